/*
 * datasets/open.c: datasets opened from files, above the formats: a set of
 * shards decoded into memory (pp_dataset_open_shards), the shard files of
 * a split found in a directory (pp_shard_find), and a directory opened by
 * what it holds (pp_dataset_open_dir: shards, then IDX, then CIFAR-10).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "datasets/source.h"

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
