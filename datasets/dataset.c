/*
 * datasets/dataset.c: the dataset handle, below the formats that make one
 * (idx.c, cifar10.c, open.c's shard sets): its allocation and sample
 * shape, reads and gathers from memory, the random split, and the
 * synthetic source.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "datasets/source.h"

int pp_sample_info_finish(struct pp_sample_info *info)
{
	size_t bytes = pp_dtype_size(info->dtype);

	if (bytes == 0)
		return pp_error(-EINVAL, "unknown dtype %d", (int)info->dtype);
	if (info->ndim < 1 || info->ndim > PP_MAX_DIMS)
		return pp_error(-EINVAL, "%u dimensions, expected 1..%d", info->ndim,
				PP_MAX_DIMS);
	for (uint32_t d = 0; d < info->ndim; d++) {
		if (info->shape[d] == 0)
			return pp_error(-EINVAL, "dimension %u is 0", d);
		if (!pp_mul_size(bytes, info->shape[d], &bytes))
			return pp_error(-EOVERFLOW, "a sample of this shape overflows size_t");
	}
	for (uint32_t d = info->ndim; d < PP_MAX_DIMS; d++)
		info->shape[d] = 0;
	info->sample_bytes = bytes;
	return 0;
}

int pp_dataset_alloc(const struct pp_sample_info *info, const char *name,
		     struct pp_dataset **ds_p)
{
	struct pp_dataset *ds;
	size_t total, label_total;

	if ((uint64_t)(size_t)info->count != info->count ||
	    !pp_mul_size(info->count, info->sample_bytes, &total) ||
	    !pp_mul_size(info->count, sizeof(int32_t), &label_total))
		return pp_error(-EOVERFLOW, "%s: %llu samples of %zu bytes overflow size_t", name,
				(unsigned long long)info->count, info->sample_bytes);
	ds = pp_calloc(1, sizeof(*ds));
	if (ds == NULL)
		return pp_error(-ENOMEM, "%s: no memory", name);
	ds->info = *info;
	snprintf(ds->name, sizeof(ds->name), "%s", name);
	if (info->label_kind == PP_LABEL_CLASS) {
		ds->labels = pp_malloc(PP_MAX(label_total, 1));
		if (ds->labels == NULL) {
			free(ds);
			return pp_error(-ENOMEM, "%s: no memory for %llu labels", name,
					(unsigned long long)info->count);
		}
	}
	*ds_p = ds;
	return 0;
}

PP_API void pp_dataset_destroy(struct pp_dataset *ds)
{
	if (ds == NULL)
		return;
	free(ds->mem);
	free(ds->labels);
	free(ds);
}

PP_API const struct pp_sample_info *pp_dataset_info(const struct pp_dataset *ds)
{
	return &ds->info;
}

PP_API const char *pp_dataset_name(const struct pp_dataset *ds)
{
	return ds->name;
}

PP_API const void *pp_dataset_samples(const struct pp_dataset *ds)
{
	return ds->samples;
}

PP_API const int32_t *pp_dataset_labels(const struct pp_dataset *ds)
{
	return ds->labels;
}

/* ------------------------------------------------------------- synthetic */

/* splitmix64's finaliser: a good 64-bit mix of x. */
static inline uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static int32_t synthetic_label(const struct pp_synthetic_config *syn, uint64_t i)
{
	return (int32_t)(mix64(syn->seed ^ mix64(i)) % syn->num_classes);
}

/*
 * Sample i: each element is 3/4 of its class prototype's value (a hash of
 * seed, class and position) plus 1/4 noise (a hash of seed, i and position).
 */
static void synthetic_sample(const struct pp_synthetic_config *syn, uint64_t i,
			     size_t elems, void *dst)
{
	uint64_t cls = (uint64_t)synthetic_label(syn, i);
	uint64_t pkey = mix64(syn->seed ^ 0x5bd1e995u) + cls * 0x100000001b3ull;
	uint64_t nkey = mix64(syn->seed + mix64(i ^ 0xa5a5a5a5a5a5a5a5ull));
	uint8_t *u8 = dst;
	float *f32 = dst;

	for (size_t e = 0; e < elems; e += 8) {
		uint64_t proto = mix64(pkey + e), noise = mix64(nkey + e);

		for (size_t k = 0; k < 8 && e + k < elems; k++) {
			unsigned v = (unsigned)((proto >> (8 * k)) & 0xff) * 3 / 4 +
				     (unsigned)((noise >> (8 * k)) & 0x3f);

			if (syn->dtype == PP_DTYPE_U8)
				u8[e + k] = (uint8_t)v;
			else
				f32[e + k] = (float)v / 255.0f;
		}
	}
}

PP_API int pp_dataset_create_synthetic(const struct pp_synthetic_config *cfg,
				       struct pp_dataset **ds_p)
{
	struct pp_sample_info info = {0};
	struct pp_dataset *ds;
	char name[128];
	int ret;

	if (cfg == NULL || ds_p == NULL)
		return pp_error(-EINVAL, "pp_dataset_create_synthetic: cfg and ds_p must not be NULL");
	if (cfg->dtype != PP_DTYPE_U8 && cfg->dtype != PP_DTYPE_F32)
		return pp_error(-EINVAL, "synthetic dataset: dtype %d, expected u8 or f32",
				(int)cfg->dtype);
	if (cfg->num_classes < 2 || cfg->num_classes > 65536)
		return pp_error(-EINVAL, "synthetic dataset: %u classes, expected 2..65536",
				cfg->num_classes);
	if (cfg->channels == 0 || cfg->height == 0 || cfg->width == 0)
		return pp_error(-EINVAL, "synthetic dataset: shape %ux%ux%u has a zero dimension",
				cfg->channels, cfg->height, cfg->width);
	info.count = cfg->count;
	info.dtype = cfg->dtype;
	info.ndim = 3;
	info.shape[0] = cfg->channels;
	info.shape[1] = cfg->height;
	info.shape[2] = cfg->width;
	info.label_kind = PP_LABEL_CLASS;
	info.num_classes = cfg->num_classes;
	ret = pp_sample_info_finish(&info);
	if (ret < 0)
		return ret;
	snprintf(name, sizeof(name), "synthetic:seed=%llu", (unsigned long long)cfg->seed);
	ds = pp_calloc(1, sizeof(*ds));
	if (ds == NULL)
		return pp_error(-ENOMEM, "%s: no memory", name);
	ds->info = info;
	snprintf(ds->name, sizeof(ds->name), "%s", name);
	ds->synthetic = true;
	ds->syn = *cfg;
	*ds_p = ds;
	return 0;
}

/* ------------------------------------------------------------- reads */

static void put_sample(const struct pp_dataset *ds, uint64_t i, uint8_t *dst)
{
	if (ds->synthetic)
		synthetic_sample(&ds->syn, i, ds->info.sample_bytes / pp_dtype_size(ds->info.dtype),
				 dst);
	else
		memcpy(dst, ds->samples + i * ds->info.sample_bytes, ds->info.sample_bytes);
}

static int32_t get_label(const struct pp_dataset *ds, uint64_t i)
{
	if (ds->synthetic)
		return synthetic_label(&ds->syn, i);
	return ds->labels != NULL ? ds->labels[i] : -1;
}

PP_API int pp_dataset_read(const struct pp_dataset *ds, uint64_t first, uint64_t count,
			   void *samples, int32_t *labels)
{
	size_t sb = ds->info.sample_bytes;

	if (first > ds->info.count || count > ds->info.count - first)
		return pp_error(-ERANGE, "%s: samples %llu..+%llu lie past the end (%llu samples)",
				ds->name, (unsigned long long)first, (unsigned long long)count,
				(unsigned long long)ds->info.count);
	if (ds->synthetic) {
		for (uint64_t k = 0; k < count; k++)
			put_sample(ds, first + k, (uint8_t *)samples + k * sb);
	} else if (count > 0) {
		memcpy(samples, ds->samples + first * sb, count * sb);
	}
	if (labels != NULL) {
		if (ds->labels != NULL && count > 0)
			memcpy(labels, ds->labels + first, count * sizeof(int32_t));
		else
			for (uint64_t k = 0; k < count; k++)
				labels[k] = get_label(ds, first + k);
	}
	return 0;
}

PP_API int pp_dataset_gather(const struct pp_dataset *ds, const uint64_t *indices, size_t n,
			     void *samples, int32_t *labels)
{
	size_t sb = ds->info.sample_bytes;

	for (size_t k = 0; k < n; k++)
		if (indices[k] >= ds->info.count)
			return pp_error(-ERANGE, "%s: index %llu (at %zu) is out of range (%llu samples)",
					ds->name, (unsigned long long)indices[k], k,
					(unsigned long long)ds->info.count);
	for (size_t k = 0; k < n; k++) {
		put_sample(ds, indices[k], (uint8_t *)samples + k * sb);
		if (labels != NULL)
			labels[k] = get_label(ds, indices[k]);
	}
	return 0;
}

/* ------------------------------------------------------------- random split */

/* Gathers the samples indices[0..n-1] of 'ds' into a new in-memory dataset. */
static int gather_new(const struct pp_dataset *ds, const uint64_t *indices, size_t n,
		      const char *part, struct pp_dataset **out_p)
{
	struct pp_sample_info info = ds->info;
	struct pp_dataset *out;
	char name[300];
	size_t bytes;
	int ret;

	info.count = n;
	snprintf(name, sizeof(name), "%s[%s]", ds->name, part);
	ret = pp_dataset_alloc(&info, name, &out);
	if (ret < 0)
		return ret;
	bytes = n * info.sample_bytes; /* checked by pp_dataset_alloc */
	out->mem = pp_malloc(PP_MAX(bytes, 1));
	if (out->mem == NULL) {
		pp_dataset_destroy(out);
		return pp_error(-ENOMEM, "%s: no memory for %zu bytes of samples", name, bytes);
	}
	out->samples = out->mem;
	ret = pp_dataset_gather(ds, indices, n, out->mem, out->labels);
	if (ret < 0) {
		pp_dataset_destroy(out);
		return ret;
	}
	*out_p = out;
	return 0;
}

PP_API int pp_dataset_random_split(const struct pp_dataset *ds, uint64_t holdout, uint64_t seed,
				   struct pp_dataset **rest_p, struct pp_dataset **holdout_p)
{
	uint64_t count = ds->info.count;
	struct pp_dataset *rest = NULL, *held = NULL;
	uint64_t *perm;
	size_t bytes;
	int ret;

	if (holdout == 0 || holdout >= count)
		return pp_error(-EINVAL, "%s: cannot hold out %llu of %llu samples (1..%llu)",
				ds->name, (unsigned long long)holdout, (unsigned long long)count,
				(unsigned long long)(count > 0 ? count - 1 : 0));
	if ((uint64_t)(size_t)count != count || !pp_mul_size(count, sizeof(*perm), &bytes))
		return pp_error(-EOVERFLOW, "%s: too many samples to split", ds->name);
	perm = pp_malloc(bytes);
	if (perm == NULL)
		return pp_error(-ENOMEM, "%s: no memory to split %llu samples", ds->name,
				(unsigned long long)count);
	/* Fisher-Yates from a counter-based generator: a function of the seed alone. */
	for (uint64_t i = 0; i < count; i++)
		perm[i] = i;
	for (uint64_t i = count - 1; i > 0; i--) {
		uint64_t j = mix64(seed ^ mix64(i + 0x632be59bd9b4e019ull)) % (i + 1);
		uint64_t t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	ret = gather_new(ds, perm, count - holdout, "rest", &rest);
	if (ret == 0)
		ret = gather_new(ds, perm + (count - holdout), holdout, "holdout", &held);
	free(perm);
	if (ret < 0) {
		pp_dataset_destroy(rest);
		return ret;
	}
	*rest_p = rest;
	*holdout_p = held;
	return 0;
}
