/*
 * loader/layout.c: the open loader's public pieces (pinpipe/source.h): the
 * counter-based generator of a sample's randomness and sources of the
 * user's own; the layout of the built-in kinds and the arrays of fields in
 * a ring slot (the layouts themselves are common/layout.c's).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "loader/loader_impl.h"

/* ------------------------------------------------------------------ layouts */

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

/* ------------------------------------------------------------------ the generator */

PP_API void pp_rng_init(struct pp_rng *rng, uint64_t seed, uint64_t epoch, uint64_t index)
{
	rng->state = pp_plan_mix(pp_plan_mix(pp_plan_mix(seed, 0x72616e64ull), epoch), index);
}

PP_API uint64_t pp_rng_next(struct pp_rng *rng)
{
	uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

PP_API float pp_rng_uniform(struct pp_rng *rng)
{
	return (float)(pp_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}

PP_API uint64_t pp_rng_below(struct pp_rng *rng, uint64_t n)
{
	/* Lemire's multiply-shift, with the rejection that removes its bias */
	unsigned __int128 m;
	uint64_t lo;

	if (n == 0)
		return 0;
	m = (unsigned __int128)pp_rng_next(rng) * n;
	lo = (uint64_t)m;
	if (lo < n) {
		uint64_t t = -n % n;
		while (lo < t) {
			m = (unsigned __int128)pp_rng_next(rng) * n;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/* ------------------------------------------------------------------ sources of the user's own */

struct pp_source {
	char name[64];
	uint64_t count;
	struct pp_layout layout;
	uint32_t num_classes;
	const struct pp_source_ops *ops;
	void *ctx;
	const char *io_path;    /* what its reads go through, for the statistics, or NULL */
};

void pp_source_set_io_path(struct pp_source *src, const char *io_path)
{
	src->io_path = io_path;
}

PP_API int pp_source_create(const struct pp_source_desc *desc, struct pp_source **src_p)
{
	struct pp_source *src;
	int ret;

	if (desc == NULL || src_p == NULL)
		return pp_error(-EINVAL, "pp_source_create: desc and src_p must not be NULL");
	if (desc->ops == NULL || (desc->ops->read == NULL && desc->ops->read_batch == NULL))
		return pp_error(-EINVAL, "source %s: no read or read_batch function",
				desc->name ? desc->name : "(unnamed)");
	if (desc->count == 0)
		return pp_error(-EINVAL, "source %s: no samples", desc->name ? desc->name : "(unnamed)");
	if ((ret = pp_layout_check(desc->layout)) < 0) {
		char msg[768];
		snprintf(msg, sizeof(msg), "%s", pp_last_error());
		return pp_error(ret, "source %s: %s", desc->name ? desc->name : "(unnamed)", msg);
	}
	src = pp_calloc(1, sizeof(*src));
	if (src == NULL)
		return pp_error(-ENOMEM, "source: no memory");
	snprintf(src->name, sizeof(src->name), "%s", desc->name ? desc->name : "(unnamed)");
	src->count = desc->count;
	src->layout = *desc->layout;
	src->num_classes = desc->num_classes;
	src->ops = desc->ops;
	src->ctx = desc->ctx;
	*src_p = src;
	return 0;
}

PP_API void pp_source_destroy(struct pp_source *src)
{
	free(src);
}

PP_API const struct pp_layout *pp_source_layout(const struct pp_source *src)
{
	return &src->layout;
}

/* The loader's view of a source of the user's own (loader/source.c). */
void pp_loader_source_user(const struct pp_source *user, struct pp_loader_source *src)
{
	const struct pp_field *f0 = &user->layout.fields[0];

	memset(src, 0, sizeof(*src));
	src->layout = user->layout;
	snprintf(src->name, sizeof(src->name), "source %s", user->name);
	src->ops = user->ops;
	src->worker_create = user->ops->worker_open;
	src->worker_destroy = user->ops->worker_close;
	src->ctx = user->ctx;
	src->io_path = user->io_path ? user->io_path : "none";
	src->info.count = user->count;
	src->info.dtype = f0->dtype;
	src->info.ndim = f0->ndim ? f0->ndim : 1;  /* a scalar is a sample of shape {1} */
	memcpy(src->info.shape, f0->shape, sizeof(f0->shape));
	if (f0->ndim == 0)
		src->info.shape[0] = 1;
	src->info.sample_bytes = pp_field_bytes(f0);
	if (pp_layout_labels(&user->layout) >= 0 && user->num_classes > 0) {
		src->info.label_kind = PP_LABEL_CLASS;
		src->info.num_classes = user->num_classes;
	}
}
