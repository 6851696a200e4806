/*
 * loader/layout.c: the layout of the built-in kinds of source and the
 * arrays of fields in a ring slot (the layouts themselves are
 * common/layout.c's).
 */
#include "config.h"

#include <string.h>

#include "common/common_impl.h"
#include "loader/loader_impl.h"

void pp_layout_from_info(const struct pp_sample_info *info, struct pp_layout *layout)
{
	memset(layout, 0, sizeof(*layout));
	layout->nfields = 1;
	strcpy(layout->fields[0].name, "samples");
	layout->fields[0].dtype = info->dtype;
	layout->fields[0].ndim = info->ndim;
	memcpy(layout->fields[0].shape, info->shape, sizeof(info->shape));
	layout->fields[0].normalize = true;
	if (info->label_kind == PP_LABEL_CLASS) {
		layout->nfields = 2;
		strcpy(layout->fields[1].name, "labels");
		layout->fields[1].dtype = PP_DTYPE_I32;
	}
}

size_t pp_layout_field_span(const struct pp_layout *layout, uint32_t f, uint32_t batch)
{
	return pp_round_up((size_t)batch * pp_field_bytes(&layout->fields[f]), 64);
}
