/*
 * datasets/dataset.c: the dataset handle: reads and gathers from memory,
 * the synthetic source, a set of shards decoded into memory, and opening a
 * dataset by what a directory holds.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ------------------------------------------------------------- shard sets */

static bool same_shape(const struct pp_sample_info *a, const struct pp_sample_info *b)
{
	return a->dtype == b->dtype && a->ndim == b->ndim &&
	       memcmp(a->shape, b->shape, sizeof(a->shape)) == 0 &&
	       a->label_kind == b->label_kind && a->num_classes == b->num_classes;
}

/* Opens every shard (validating them all before any data is read); the caller closes them. */
static int open_shard_set(const char *const *paths, size_t npaths, struct pp_shard **shards,
			  struct pp_sample_info *info_p)
{
	struct pp_sample_info info = {0};

	for (size_t k = 0; k < npaths; k++) {
		const struct pp_sample_info *si;
		int ret = pp_shard_open(paths[k], &shards[k]);

		if (ret < 0)
			return ret;
		if (pp_shard_version(shards[k]) != 1)
			return pp_error(-EPROTONOSUPPORT, "%s: a version %u shard of records for a "
					"decoder (\"%s\"): read them through a loader; a dataset holds "
					"fixed-size samples", paths[k], pp_shard_version(shards[k]),
					pp_shard_decoder(shards[k]));
		si = pp_shard_info(shards[k]);
		if (k == 0) {
			info = *si;
		} else if (!same_shape(&info, si)) {
			return pp_error(-EINVAL, "%s: dtype, shape or labels differ from those of %s",
					paths[k], paths[0]);
		} else if (__builtin_add_overflow(info.count, si->count, &info.count)) {
			return pp_error(-EOVERFLOW, "%s: too many records in the set", paths[k]);
		}
	}
	*info_p = info;
	return 0;
}

PP_API int pp_dataset_open_shards(const char *const *paths, size_t npaths,
				  struct pp_dataset **ds_p)
{
	struct pp_shard **shards;
	struct pp_sample_info info;
	struct pp_dataset *ds = NULL;
	char name[256];
	uint8_t *mem;
	uint64_t done = 0;
	size_t total;
	int ret;

	if (npaths == 0)
		return pp_error(-EINVAL, "no shard given");
	shards = pp_calloc(npaths, sizeof(*shards));
	if (shards == NULL)
		return pp_error(-ENOMEM, "no memory");
	ret = open_shard_set(paths, npaths, shards, &info);
	if (ret < 0)
		goto out_close;
	if (npaths > 1)
		snprintf(name, sizeof(name), "shards:%s+%zu", pp_path_base(paths[0]), npaths - 1);
	else
		snprintf(name, sizeof(name), "shards:%s", pp_path_base(paths[0]));
	ret = pp_dataset_alloc(&info, name, &ds);
	if (ret < 0)
		goto out_close;
	total = (size_t)info.count * info.sample_bytes;
	mem = pp_alloc_large(total);
	if (mem == NULL) {
		ret = pp_error(-ENOMEM, "%s: no memory for %zu bytes of samples", name, total);
		goto out_destroy;
	}
	ds->mem = mem;
	ds->samples = mem;
	for (size_t k = 0; k < npaths; k++) {
		for (uint64_t c = 0; c < pp_shard_chunk_count(shards[k]); c++) {
			struct pp_shard_chunk_info ci;

			pp_shard_chunk(shards[k], c, &ci);
			ret = pp_shard_read_chunk(shards[k], c, mem + (done + ci.first_record) *
									info.sample_bytes,
						  ds->labels != NULL ? ds->labels + done + ci.first_record
								     : NULL);
			if (ret < 0)
				goto out_destroy;
		}
		done += pp_shard_info(shards[k])->count;
	}
	*ds_p = ds;
	ds = NULL;
	ret = 0;
out_destroy:
	pp_dataset_destroy(ds);
out_close:
	for (size_t k = 0; k < npaths; k++)
		pp_shard_close(shards[k]);
	free(shards);
	return ret;
}

/* ------------------------------------------------------------- directories */

static bool is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The total N of a name ending in -of-N.pps (as pinpipe-pack writes), or 0. */
static unsigned long long set_total(const char *path)
{
	const char *of = strstr(pp_path_base(path), "-of-");
	unsigned long long n;
	char end[8];

	if (of == NULL || sscanf(of, "-of-%llu%7s", &n, end) != 2 || strcmp(end, ".pps") != 0)
		return 0;
	return n;
}

/*
 * Checks that shards named -of-N make exactly one whole set: all of the
 * same N, and N of them.  Shards named otherwise are taken as they are.
 */
static int check_shard_set(const char *dir, const char *split, char **paths, size_t n)
{
	unsigned long long total = set_total(paths[0]);

	for (size_t k = 0; k < n; k++) {
		unsigned long long t = set_total(paths[k]);

		if (t != total)
			return pp_error(-EINVAL,
					"%s: the %s shards are not one set: %s and %s (of %llu and of "
					"%llu); remove the older set, or pack again (pinpipe-pack "
					"removes it)",
					dir, split, pp_path_base(paths[0]), pp_path_base(paths[k]),
					total, t);
	}
	if (total != 0 && total != n)
		return pp_error(-EINVAL, "%s: %zu %s shards of a set of %llu (%s...): expected %llu",
				dir, n, split, total, pp_path_base(paths[0]), total);
	return 0;
}

/*
 * Whether a file the glob *SPLIT*.pps found is a shard of 'split': one
 * named as pinpipe-pack names them, PREFIX-S-NNNNN-of-MMMMM.pps with S
 * train, test or val, is of split S alone, whatever its prefix holds
 * ("eval-train-00000-of-00001.pps" is no val shard); another name
 * ("train-part-00000-of-00004.pps") is taken by the glob's match.
 */
static bool of_split(const char *path, const char *split)
{
	static const char *const splits[] = { "train", "test", "val" };
	const char *b = pp_path_base(path), *of = NULL, *p, *q;
	bool known = false;

	for (p = strstr(b, "-of-"); p != NULL; p = strstr(p + 1, "-of-"))
		of = p;
	if (of == NULL || strspn(of + 4, "0123456789") == 0 ||
	    strcmp(of + 4 + strspn(of + 4, "0123456789"), ".pps") != 0)
		return true;
	for (p = of; p > b && p[-1] >= '0' && p[-1] <= '9'; p--)
		;
	if (p == of || p == b || p[-1] != '-')
		return true;
	for (q = p - 1; q > b && q[-1] != '-'; q--)
		;
	for (size_t k = 0; k < PP_ARRAY_SIZE(splits); k++)
		known = known || ((size_t)(p - 1 - q) == strlen(splits[k]) &&
				  strncmp(q, splits[k], strlen(splits[k])) == 0);
	return !known ||
	       ((size_t)(p - 1 - q) == strlen(split) && strncmp(q, split, strlen(split)) == 0);
}

PP_API int pp_shard_find(const char *dir, const char *split, char ***paths_p, size_t *count_p)
{
	char pattern[4096], glob_split[64];
	char **paths, **found = NULL;
	size_t n = 0;
	glob_t g;
	int ret;

	if (dir == NULL || split == NULL || paths_p == NULL || count_p == NULL)
		return pp_error(-EINVAL, "pp_shard_find: no argument may be NULL");
	if (snprintf(glob_split, sizeof(glob_split), "*%s*.pps", split) >= (int)sizeof(glob_split) ||
	    strpbrk(split, "*?[\\/") != NULL)
		return pp_error(-EINVAL, "pp_shard_find: split '%s': a name of letters", split);
	ret = pp_glob_join(pattern, sizeof(pattern), dir, glob_split);
	if (ret < 0)
		return ret;
	ret = glob(pattern, 0, NULL, &g);
	if (ret != 0) {
		globfree(&g);
		if (ret == GLOB_NOSPACE)
			return pp_error(-ENOMEM, "%s: out of memory listing the %s shards", dir, split);
		return pp_error(-ENOENT, "%s: no %s shards (*%s*.pps)", dir, split, split);
	}
	found = pp_calloc(g.gl_pathc, sizeof(*found));
	if (found == NULL) {
		ret = pp_error(-ENOMEM, "%s: out of memory listing the %s shards", dir, split);
		goto out;
	}
	for (size_t k = 0; k < g.gl_pathc; k++)
		if (of_split(g.gl_pathv[k], split))
			found[n++] = g.gl_pathv[k];
	if (n == 0) {
		ret = pp_error(-ENOENT, "%s: no %s shards (*%s*.pps; %s is another split's)", dir,
			       split, split, pp_path_base(g.gl_pathv[0]));
		goto out;
	}
	ret = check_shard_set(dir, split, found, n);
	if (ret < 0)
		goto out;
	paths = pp_calloc(n + 1, sizeof(*paths));
	if (paths == NULL) {
		ret = pp_error(-ENOMEM, "%s: out of memory listing the %s shards", dir, split);
		goto out;
	}
	for (size_t k = 0; k < n; k++) {
		size_t len = strlen(found[k]) + 1;

		paths[k] = pp_malloc(len);
		if (paths[k] != NULL)
			memcpy(paths[k], found[k], len);
		if (paths[k] == NULL) {
			pp_shard_paths_free(paths);
			ret = pp_error(-ENOMEM, "%s: out of memory listing the %s shards", dir, split);
			goto out;
		}
	}
	*paths_p = paths;
	*count_p = n;
out:
	free(found);
	globfree(&g);
	return ret;
}

PP_API void pp_shard_paths_free(char **paths)
{
	if (paths == NULL)
		return;
	for (size_t k = 0; paths[k] != NULL; k++)
		free(paths[k]);
	free(paths);
}

/* Opens dir's shards named *split*.pps, sorted by name; 1 when there are none. */
static int open_dir_shards(const char *dir, const char *split, struct pp_dataset **ds_p)
{
	char **paths;
	size_t n;
	int ret = pp_shard_find(dir, split, &paths, &n);

	if (ret == -ENOENT)
		return 1;
	if (ret < 0)
		return ret;
	ret = pp_dataset_open_shards((const char *const *)paths, n, ds_p);
	pp_shard_paths_free(paths);
	return ret;
}

/* Opens dir's IDX pair for split; 1 when the images are not there. */
static int open_dir_idx(const char *dir, const char *split, struct pp_dataset **ds_p)
{
	const char *stem = strcmp(split, "train") == 0 ? "train" : "t10k";
	char images[4096], labels[4096];

	snprintf(images, sizeof(images), "%s/%s-images-idx3-ubyte.gz", dir, stem);
	snprintf(labels, sizeof(labels), "%s/%s-labels-idx1-ubyte.gz", dir, stem);
	if (!is_file(images)) {
		snprintf(images, sizeof(images), "%s/%s-images-idx3-ubyte", dir, stem);
		snprintf(labels, sizeof(labels), "%s/%s-labels-idx1-ubyte", dir, stem);
		if (!is_file(images))
			return 1;
	}
	return pp_dataset_open_idx(images, labels, ds_p);
}

/* Opens dir's CIFAR-10 batches for split; 1 when there are none. */
static int open_dir_cifar10(const char *dir, const char *split, struct pp_dataset **ds_p)
{
	static const char *const subdirs[] = {"", "/cifar-10-batches-bin"};
	char paths[5][4096];
	const char *ptrs[5];

	for (size_t s = 0; s < PP_ARRAY_SIZE(subdirs); s++) {
		size_t n = strcmp(split, "train") == 0 ? 5 : 1;

		for (size_t k = 0; k < n; k++) {
			if (n == 5)
				snprintf(paths[k], sizeof(paths[k]), "%s%s/data_batch_%zu.bin", dir,
					 subdirs[s], k + 1);
			else
				snprintf(paths[k], sizeof(paths[k]), "%s%s/test_batch.bin", dir,
					 subdirs[s]);
			ptrs[k] = paths[k];
		}
		if (is_file(paths[0]))
			return pp_dataset_open_cifar10(ptrs, n, ds_p);
	}
	return 1;
}

/* Looks for the split's files, the shards first; 0, 1 (none there) or -errno. */
static int open_dir_found(const char *dir, const char *split, struct pp_dataset **ds_p)
{
	int ret = open_dir_shards(dir, split, ds_p);

	if (ret == 1)
		ret = open_dir_idx(dir, split, ds_p);
	if (ret == 1)
		ret = open_dir_cifar10(dir, split, ds_p);
	return ret;
}

PP_API int pp_dataset_open_dir(const char *dir, const char *split, struct pp_dataset **ds_p)
{
	struct pp_error_saved saved;
	struct stat st;
	DIR *probe;
	int ret;

	if (dir == NULL || split == NULL || ds_p == NULL)
		return pp_error(-EINVAL, "pp_dataset_open_dir: NULL directory, split or result");
	if (strcmp(split, "train") != 0 && strcmp(split, "test") != 0)
		return pp_error(-EINVAL, "split '%s', expected 'train' or 'test'", split);
	ret = stat(dir, &st) == 0 ? 0 : -errno;
	/* A file where the directory should be (a shard, the dataset's archive): said as such. */
	if (ret == 0 && !S_ISDIR(st.st_mode))
		return pp_error(-ENOTDIR, "%s: %s: give the directory that holds the dataset's "
				"files (its shards, IDX files or CIFAR-10 batches)", dir,
				S_ISREG(st.st_mode) ? "a file, not a directory" : "not a directory");
	if (ret == -ENOENT || ret == -ENOTDIR)
		return pp_error(-ENOENT,
				"%s: no such directory (for Fashion-MNIST, install Debian's "
				"dataset-fashion-mnist, which puts it in /usr/share/datasets/fashion-mnist)",
				dir);
	/* A link loop, a directory this user may not read: said as such, not as "not found". */
	probe = ret == 0 ? opendir(dir) : NULL;
	if (probe == NULL) {
		ret = ret < 0 ? ret : -errno;
		return pp_error(ret, "%s: cannot read the directory: %s", dir, strerror(-ret));
	}
	closedir(probe);
	/* The searches that found nothing ("no test shards") are no failure of a call that succeeds. */
	pp_error_save(&saved);
	ret = open_dir_found(dir, split, ds_p);
	if (ret == 0)
		pp_error_restore(&saved);
	if (ret != 1)
		return ret;
	return pp_error(-ENOENT,
			"%s: no %s split found: looked for *%s*.pps shards, %s-images-idx3-ubyte[.gz] "
			"(MNIST, Fashion-MNIST; install Debian's dataset-fashion-mnist for "
			"/usr/share/datasets/fashion-mnist) and CIFAR-10 %s (also in "
			"cifar-10-batches-bin/)",
			dir, split, split, strcmp(split, "train") == 0 ? "train" : "t10k",
			strcmp(split, "train") == 0 ? "data_batch_1..5.bin" : "test_batch.bin");
}
