/*
 * common/layout.c: sample layouts (pinpipe/source.h): the bytes of a field,
 * the check of a layout, the look-up of a field by name and of the labels.  In the core
 * library, beneath the datasets (version 2 shards name a layout) and the
 * loader.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "common/common_impl.h"
#include "pinpipe/source.h"

#define PP_FIELD_MAX_BYTES ((uint64_t)1 << 30)

PP_API size_t pp_field_bytes(const struct pp_field *field)
{
	uint64_t n = pp_dtype_size(field->dtype);

	if (n == 0 || field->ndim > PP_MAX_DIMS)
		return 0;
	for (uint32_t d = 0; d < field->ndim; d++) {
		if (field->shape[d] == 0 || field->shape[d] > PP_FIELD_MAX_BYTES)
			return 0;
		n *= field->shape[d];
		if (n > PP_FIELD_MAX_BYTES)
			return 0;
	}
	return (size_t)n;
}

bool pp_name_ok(const char *name, size_t max)
{
	size_t n = strnlen(name, max + 1);

	if (n < 1 || n > max)
		return false;
	for (size_t k = 0; k < n; k++) {
		char c = name[k];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

PP_API int pp_layout_check(const struct pp_layout *layout)
{
	if (layout == NULL)
		return pp_error(-EINVAL, "layout: none given");
	if (layout->nfields < 1 || layout->nfields > PP_MAX_FIELDS)
		return pp_error(-EINVAL, "layout: %u fields, expected 1..%d", layout->nfields,
				PP_MAX_FIELDS);
	for (uint32_t f = 0; f < layout->nfields; f++) {
		const struct pp_field *fd = &layout->fields[f];

		if (!pp_name_ok(fd->name, PP_FIELD_NAME_MAX - 1))
			return pp_error(-EINVAL, "layout: field %u: name \"%.*s\" is not 1..%d "
					"letters, digits, '_', '.' or '-'",
					f, PP_FIELD_NAME_MAX, fd->name, PP_FIELD_NAME_MAX - 1);
		for (uint32_t g = 0; g < f; g++)
			if (strcmp(layout->fields[g].name, fd->name) == 0)
				return pp_error(-EINVAL, "layout: field %u: name \"%s\" is field %u's too",
						f, fd->name, g);
		if (pp_dtype_size(fd->dtype) == 0)
			return pp_error(-EINVAL, "layout: field %u (%s): unknown dtype %d", f, fd->name,
					(int)fd->dtype);
		if (fd->ndim > PP_MAX_DIMS)
			return pp_error(-EINVAL, "layout: field %u (%s): %u dimensions, expected 0..%d",
					f, fd->name, fd->ndim, PP_MAX_DIMS);
		for (uint32_t d = 0; d < fd->ndim; d++)
			if (fd->shape[d] == 0)
				return pp_error(-EINVAL, "layout: field %u (%s): shape[%u] is 0, "
						"expected at least 1", f, fd->name, d);
		if (pp_field_bytes(fd) == 0)
			return pp_error(-EINVAL, "layout: field %u (%s): a value of this shape "
					"exceeds 1 GiB", f, fd->name);
		if (fd->normalize && fd->dtype != PP_DTYPE_U8 && fd->dtype != PP_DTYPE_F32)
			return pp_error(-EINVAL, "layout: field %u (%s): normalize on %s, expected "
					"u8 or f32", f, fd->name, pp_dtype_name(fd->dtype));
	}
	return 0;
}

PP_API int pp_layout_find(const struct pp_layout *layout, const char *name)
{
	for (uint32_t f = 0; f < layout->nfields && f < PP_MAX_FIELDS; f++)
		if (strncmp(layout->fields[f].name, name, PP_FIELD_NAME_MAX) == 0)
			return (int)f;
	return -ENOENT;
}

PP_API int pp_layout_labels(const struct pp_layout *layout)
{
	for (uint32_t f = 0; f < layout->nfields; f++) {
		const struct pp_field *fd = &layout->fields[f];
		if ((strcmp(fd->name, "labels") == 0 || strcmp(fd->name, "label") == 0) &&
		    fd->dtype == PP_DTYPE_I32 && fd->ndim == 0)
			return (int)f;
	}
	return -ENOENT;
}
