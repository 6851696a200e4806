/*
 * tools/pack.c: pinpipe-pack, which converts IDX (MNIST, Fashion-MNIST;
 * raw or gzip) and CIFAR-10 binary batches into pinpipe shards (version 1,
 * fixed-size samples, or with --shard-version=2 records for the "raw"
 * decoder), an ImageFolder of JPEGs into version 2 shards of the files'
 * bytes for the "jpeg" decoder, and checks every chunk of a set of shards
 * with --verify.  It uses the public API only.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/args.h"
#include "common/cpu.h"
#include "common/links.h"
#include "common/size.h"
#include "pinpipe/pinpipe.h"

#define DEFAULT_SHARD_BYTES (64ull << 20)
#define DEFAULT_RECORDS_PER_CHUNK 1024u
#define DEFAULT_LEVEL 6
#define MAX_SHARDS 100000u
#define MAX_THREADS 64u

static const char usage_text[] =
	"usage: pinpipe-pack [-n SHARDS | -s SIZE] [-c RECORDS] [-l LEVEL] [-j THREADS]\n"
	"                    [--shard-version=V] -o PREFIX INPUT...\n"
	"       pinpipe-pack --verify FILE...\n"
	"\n"
	"Converts a dataset into pinpipe shards (docs/SHARDS.md),\n"
	"PREFIX-SPLIT-00000-of-0000N.pps, and prints what it wrote; once all are\n"
	"written, they replace those of an earlier run, and it removes\n"
	"PREFIX-SPLIT-*-of-*.pps of another N (a failed run leaves the earlier\n"
	"ones as they were).  INPUT is one of:\n"
	"  a directory      with Fashion-MNIST or MNIST IDX files\n"
	"                   (train-images-idx3-ubyte[.gz], t10k-...) or CIFAR-10\n"
	"                   batches: both its train and test splits are packed\n"
	"  IMAGES [LABELS]  an idx3 images file and its idx1 labels file, raw or\n"
	"                   gzip; the split is 'test' when the images file's name\n"
	"                   holds t10k or test, else 'train'\n"
	"  BATCH.bin...     CIFAR-10 binary batches: data_batch_* to train,\n"
	"                   test_batch* to test\n"
	"  an image folder  DIR/CLASS/*.jpg|jpeg, also in folders under a class\n"
	"                   (torchvision's ImageFolder; classes sorted by name, labels\n"
	"                   their index), or DIR/train/CLASS/...\n"
	"                   and DIR/val/CLASS/..., DIR/test/CLASS/... as the splits\n"
	"                   train, val and test (the same classes in each):\n"
	"                   version 2 shards of the JPEG files' bytes as they are,\n"
	"                   for the decoder \"jpeg\" (-l 0 unless given)\n"
	"\n"
	"Options:\n"
	"  -n, --shards=N        write N shards per split (default: as many as --size\n"
	"                        gives)\n"
	"  -s, --size=SIZE       decoded bytes per shard, with a K, M or G suffix\n"
	"                        (default: 64M)\n"
	"  -c, --chunk=RECORDS   records per chunk (default: 1024)\n"
	"  -l, --level=LEVEL     zlib level 1..9, or 0 to store chunks uncompressed\n"
	"                        (default: 6)\n"
	"  -j, --threads=N       compress N chunks at once, one per thread, 1..64\n"
	"                        (default: the number of CPUs online)\n"
	"      --image-size=S    an image folder's decoded side, the shards' layout\n"
	"                        image: u8[3,S,S] (default: 224)\n"
	"      --shard-version=V 1: fixed-size samples (default); 2: records of any\n"
	"                        length, here each sample as one record for the\n"
	"                        \"raw\" decoder, of the layout samples: DTYPE[SHAPE]\n"
	"                        (normalize), and the labels; an image folder is\n"
	"                        always 2 (its JPEG bytes for the \"jpeg\" decoder)\n"
	"  -o, --output=PREFIX   path prefix of the shards (required), e.g. /tmp/fmnist\n"
	"  -q, --quiet           print only errors\n"
	"      --verify          read every chunk of each FILE, check its CRC-32, size\n"
	"                        and labels (version 2: its record ends too), and\n"
	"                        report, with the version, decoder and layout of a\n"
	"                        version 2 shard; the exit status is 1 if any shard\n"
	"                        is bad\n"
	"  -h, --help            print this help and exit\n"
	"  -V, --version         print the version and exit\n"
	"\n"
	"Exit status: 0 success, 1 a failure (bad or missing input, bad shard), 2 bad\n"
	"usage.\n"
	"Fashion-MNIST: install Debian's dataset-fashion-mnist, then\n"
	"  pinpipe-pack -o /tmp/fmnist /usr/share/datasets/fashion-mnist\n"
	"  pinpipe-pack --verify /tmp/fmnist-*.pps\n";

/* What the command line asks for. */
struct pack_options {
	uint32_t shards;            /* shards per split; 0: from shard_bytes */
	uint64_t shard_bytes;       /* decoded bytes per shard */
	uint32_t records_per_chunk;
	int level;                  /* 0 stored, 1..9 zlib */
	uint32_t threads;           /* chunks compressed at once */
	uint32_t shard_version;     /* 1 fixed-size samples, 2 records for the "raw" decoder */
	const char *prefix;
	bool quiet;
	bool level_given;           /* -l given: image folders are otherwise stored (level 0) */
	uint32_t image_size;        /* an image folder's decoded side */
	bool version_given;         /* --shard-version given */
	bool image_size_given;      /* --image-size given */
};

/*
 * The shards a run writes: each goes to a staged name of its own
 * (PATH.new) and all are renamed into place once every split is written
 * (commit_written()), so that a run that fails, or is killed, leaves the
 * shards of an earlier run of the prefix as they were; staged ones are
 * removed again (and a killed run's by the next one, remove_stale_tmp()).
 */
struct written {
	char **paths; /* [n]: the shards' own names */
	size_t n;
};

#define STAGED ".new"

/*
 * The file the shard 'path' replaces, its links followed (a link stays a
 * link to the new shard), in target[0..len), and its staged name beside
 * that file in staged[0..len + 8).  False, with errno set, where a name
 * does not fit or a link cannot be followed.
 */
static bool staged_name(const char *path, char *target, char *staged, size_t len)
{
	if (!pp_links_follow(path, target, len))
		return false;
	if ((size_t)snprintf(staged, len + 8, "%s" STAGED, target) >= len + 8)
		return errno = ENAMETOOLONG, false;
	return true;
}

/*
 * staged_name(), said where it fails; refuses (false, said) too a path
 * that names something other than a regular file, which the rename would
 * replace (a FIFO, a directory).
 */
static bool staged_of(const char *path, char *target, char *staged, size_t len)
{
	struct stat st;

	if (!staged_name(path, target, staged, len)) {
		fprintf(stderr, "pinpipe-pack: %s: %s\n", path, strerror(errno));
		return false;
	}
	if (stat(target, &st) == 0 && !S_ISREG(st.st_mode)) {
		fprintf(stderr, "pinpipe-pack: %s: not a regular file: a shard would replace it\n",
			target);
		return false;
	}
	return true;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double mb(uint64_t bytes)
{
	return (double)bytes / 1e6;
}

static int usage_error(const char *msg, const char *arg)
{
	fprintf(stderr, "pinpipe-pack: %s%s%s%s (try --help)\n", msg, arg != NULL ? " '" : "",
		arg != NULL ? arg : "", arg != NULL ? "'" : "");
	return 2;
}

static bool parse_u64(const char *s, uint64_t max, uint64_t *v_p)
{
	char *end;
	unsigned long long v;

	if (s[0] < '0' || s[0] > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v > max)
		return false;
	*v_p = v;
	return true;
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash != NULL ? slash + 1 : path;
}

static bool remember(struct written *w, const char *path)
{
	char **p = realloc(w->paths, (w->n + 1) * sizeof(*p));

	if (p == NULL)
		return false;
	w->paths = p;
	w->paths[w->n] = strdup(path);
	if (w->paths[w->n] == NULL)
		return false;
	w->n++;
	return true;
}

/* Version 2's layout of a dataset's samples: one field "samples", normalised. */
static struct pp_layout samples_layout(const struct pp_sample_info *info)
{
	struct pp_layout lay = {.nfields = 1};

	snprintf(lay.fields[0].name, sizeof(lay.fields[0].name), "samples");
	lay.fields[0].dtype = info->dtype;
	lay.fields[0].ndim = info->ndim;
	memcpy(lay.fields[0].shape, info->shape, sizeof(info->shape));
	lay.fields[0].normalize = true;
	return lay;
}

/* Adds n samples (and their labels, or none) to a version 1 or 2 shard. */
static int add_samples(struct pp_shard_writer *w, const struct pack_options *opt,
		       const struct pp_sample_info *info, const uint8_t *samples,
		       const int32_t *labels, uint64_t n)
{
	if (opt->shard_version == 1)
		return pp_shard_writer_add(w, samples, labels, n);
	for (uint64_t k = 0; k < n; k++) {
		int ret = pp_shard_writer_add_record(w, samples + k * info->sample_bytes,
						     info->sample_bytes,
						     labels != NULL ? labels[k] : 0);

		if (ret < 0)
			return ret;
	}
	return 0;
}

/*
 * Writes one shard of records first..first+count-1 of ds; returns its size
 * in bytes and its chunk count in *chunks_p, or -1.
 */
static int64_t write_shard(const struct pack_options *opt, const struct pp_dataset *ds,
			   const char *path, uint64_t first, uint64_t count, uint64_t *chunks_p)
{
	const struct pp_sample_info *info = pp_dataset_info(ds);
	struct pp_layout lay = samples_layout(info);
	struct pp_shard_writer_config cfg = {.info = info, .records_per_chunk = opt->records_per_chunk,
					      .level = opt->level, .threads = opt->threads};
	struct pp_shard_writer *w;
	struct pp_shard *sh;
	uint64_t batch = opt->records_per_chunk;
	int32_t *labels = NULL;
	void *samples;
	struct stat st;
	int ret;

	if (opt->shard_version == 2) {
		cfg.layout = &lay;
		cfg.decoder = "raw";
		cfg.max_record_bytes = (uint32_t)info->sample_bytes;
	}
	ret = pp_shard_writer_create(path, &cfg, &w);
	if (ret < 0) {
		fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
		return -1;
	}
	samples = malloc(batch * info->sample_bytes);
	if (info->label_kind != PP_LABEL_NONE)
		labels = malloc(batch * sizeof(int32_t));
	if (samples == NULL || (info->label_kind != PP_LABEL_NONE && labels == NULL)) {
		fprintf(stderr, "pinpipe-pack: %s: out of memory\n", path);
		ret = -ENOMEM;
		goto out;
	}
	for (uint64_t done = 0; done < count && ret == 0; done += batch) {
		uint64_t n = count - done < batch ? count - done : batch;

		ret = pp_dataset_read(ds, first + done, n, samples, labels);
		if (ret == 0)
			ret = add_samples(w, opt, info, samples, labels, n);
	}
	if (ret == 0)
		ret = pp_shard_writer_finish(w);
	if (ret < 0)
		fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
out:
	free(labels);
	free(samples);
	pp_shard_writer_destroy(w);
	if (ret < 0)
		return -1;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "pinpipe-pack: %s: %s\n", path, strerror(errno));
		return -1;
	}
	/* The chunks as written: version 2's close early at 4 MiB. */
	if (pp_shard_open(path, &sh) < 0) {
		fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
		return -1;
	}
	*chunks_p = pp_shard_chunk_count(sh);
	pp_shard_close(sh);
	return (int64_t)st.st_size;
}

/* Packs one split of a dataset; returns 0 or 1 (the message printed). */
static int pack_split(const struct pack_options *opt, const struct pp_dataset *ds,
		      const char *split, double load_s, struct written *written)
{
	const struct pp_sample_info *info = pp_dataset_info(ds);
	uint64_t n = info->count, record = info->sample_bytes +
					   (info->label_kind != PP_LABEL_NONE ? 4 : 0) +
					   (opt->shard_version == 2 ? 4 : 0); /* its END */
	uint64_t raw = n * record, stored = 0, shards = opt->shards;
	double t0 = now_s(), dt;

	if (shards == 0)
		shards = raw / opt->shard_bytes + (raw % opt->shard_bytes != 0);
	if (shards > n)
		shards = n;
	if (shards == 0)
		shards = 1;
	if (!opt->quiet)
		printf("%s (%s): %llu samples of %s %zu bytes, decoded in %.3f s (%.0f MB/s)\n",
		       pp_dataset_name(ds), split, (unsigned long long)n,
		       pp_dtype_name(info->dtype), info->sample_bytes, load_s,
		       load_s > 0 ? mb(n * info->sample_bytes) / load_s : 0.0);
	for (uint64_t k = 0; k < shards; k++) {
		uint64_t first = k * n / shards, last = (k + 1) * n / shards;
		char path[4096], target[4096], staged[4096 + 8];
		uint64_t chunks = 0;
		int64_t size;

		if ((size_t)snprintf(path, sizeof(path), "%s-%s-%05llu-of-%05llu.pps", opt->prefix,
				     split, (unsigned long long)k,
				     (unsigned long long)shards) >= sizeof(path)) {
			fprintf(stderr, "pinpipe-pack: %s: prefix too long\n", opt->prefix);
			return 1;
		}
		if (!remember(written, path)) {
			fprintf(stderr, "pinpipe-pack: out of memory\n");
			return 1;
		}
		if (!staged_of(path, target, staged, sizeof(target)))
			return 1;
		size = write_shard(opt, ds, staged, first, last - first, &chunks);
		if (size < 0)
			return 1;
		stored += (uint64_t)size;
		if (!opt->quiet)
			printf("  %s: %llu records, %llu chunks, %.1f MB on disk\n", path,
			       (unsigned long long)(last - first), (unsigned long long)chunks,
			       mb((uint64_t)size));
	}
	dt = now_s() - t0;
	if (!opt->quiet)
		printf("  %llu shards: %llu records, %.1f MB of records in %.1f MB on disk (%.1f%%), written "
		       "in %.3f s (%.0f MB/s of records)\n",
		       (unsigned long long)shards, (unsigned long long)n, mb(raw), mb(stored),
		       raw > 0 ? 100.0 * (double)stored / (double)raw : 0.0, dt,
		       dt > 0 ? mb(raw) / dt : 0.0);
	return 0;
}

/*
 * True when dir holds anything pp_dataset_open_dir() takes for the test
 * split: shards, an IDX images file, a CIFAR-10 test batch.
 */
static bool has_test_split(const char *dir)
{
	static const char *const names[] = {"t10k-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte",
					    "test_batch.bin", "cifar-10-batches-bin/test_batch.bin"};
	char path[4096], **shards = NULL;
	struct stat st;
	size_t n;
	bool found;

	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
		if (stat(path, &st) == 0)
			return true;
	}
	/* Shards as pp_dataset_open_dir() finds them (a set not whole is said there). */
	found = pp_shard_find(dir, "test", &shards, &n) != -ENOENT;
	pp_shard_paths_free(shards);
	return found;
}

/*
 * Opens and packs a split from a directory.  When 'optional', a test split
 * whose files are all absent is skipped; one that is there but cannot be
 * opened (its labels missing, say) fails like any other.
 */
static int pack_dir_split(const struct pack_options *opt, const char *dir, const char *split,
			  bool optional, struct written *written)
{
	struct pp_dataset *ds;
	double t0 = now_s();
	int ret;

	if (optional && !has_test_split(dir)) {
		if (!opt->quiet)
			printf("%s: no %s split, skipped\n", dir, split);
		return 0;
	}
	ret = pp_dataset_open_dir(dir, split, &ds);
	if (ret < 0) {
		fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
		return 1;
	}
	ret = pack_split(opt, ds, split, now_s() - t0, written);
	pp_dataset_destroy(ds);
	return ret;
}

static const char *split_of(const char *path)
{
	const char *b = base_name(path);

	return strstr(b, "t10k") != NULL || strstr(b, "test") != NULL ? "test" : "train";
}

/* Packs CIFAR-10 batches: the test batches and the others, each as one split. */
static int pack_cifar10(const struct pack_options *opt, char **paths, int n,
			struct written *written)
{
	static const char *const splits[] = {"train", "test"};
	const char **group = calloc((size_t)n, sizeof(*group));
	int ret = 0;

	if (group == NULL) {
		fprintf(stderr, "pinpipe-pack: out of memory\n");
		return 1;
	}
	for (size_t s = 0; s < 2 && ret == 0; s++) {
		struct pp_dataset *ds;
		size_t m = 0;
		double t0 = now_s();

		for (int k = 0; k < n; k++)
			if (strcmp(split_of(paths[k]), splits[s]) == 0)
				group[m++] = paths[k];
		if (m == 0)
			continue;
		if (pp_dataset_open_cifar10(group, m, &ds) < 0) {
			fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
			ret = 1;
			break;
		}
		ret = pack_split(opt, ds, splits[s], now_s() - t0, written);
		pp_dataset_destroy(ds);
	}
	free(group);
	return ret;
}

static bool was_written(const struct written *w, const char *path)
{
	for (size_t k = 0; k < w->n; k++)
		if (strcmp(w->paths[k], path) == 0)
			return true;
	return false;
}

/*
 * Whether s is "NNNNN-of-MMMMM" followed by 'suffix' and 'extra' more
 * characters, the counts all digits: the tail of this prefix's shard
 * names after "PREFIX-SPLIT-".  A glob's '*' takes anything, so that
 * PREFIX "fm"'s pattern also matched "fm-test-1k-test-00000-of-00001.pps",
 * a shard of the prefix "fm-test-1k".
 */
static bool shard_tail(const char *s, const char *suffix, size_t extra)
{
	for (int part = 0; part < 2; part++) {
		size_t d = strspn(s, "0123456789");

		if (d == 0)
			return false;
		s += d;
		if (part == 0) {
			if (strncmp(s, "-of-", 4) != 0)
				return false;
			s += 4;
		}
	}
	if (strncmp(s, suffix, strlen(suffix)) != 0)
		return false;
	return strlen(s + strlen(suffix)) == extra;
}

static int cmp_path(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The files "PREFIX-*" in PREFIX's folder, as paths (PREFIX followed by
 * the rest of each name), sorted.  The names are compared with the prefix
 * as text: a glob of it took "-o 'd?'" to match the files of "d1".
 * Returns 0, or 1 said; frees nothing of an earlier list.
 */
static int prefix_files(const char *prefix, char ***paths_p, size_t *n_p)
{
	const char *base = base_name(prefix);
	char dir[4096];
	struct dirent *e;
	char **v = NULL;
	size_t n = 0;
	DIR *d;

	pp_args_folder_of(prefix, dir, sizeof(dir));
	d = opendir(dir);
	if (d == NULL) {
		fprintf(stderr, "pinpipe-pack: %s: cannot list the folder %s: %s\n", prefix, dir,
			strerror(errno));
		return 1;
	}
	while ((e = readdir(d)) != NULL) {
		char **nv;

		if (strncmp(e->d_name, base, strlen(base)) != 0 || e->d_name[strlen(base)] != '-')
			continue;
		nv = realloc(v, (n + 1) * sizeof(*v));
		if (nv == NULL || asprintf(&nv[n], "%s%s", prefix, e->d_name + strlen(base)) < 0) {
			v = nv != NULL ? nv : v;
			for (size_t k = 0; k < n; k++)
				free(v[k]);
			free(v);
			closedir(d);
			fprintf(stderr, "pinpipe-pack: out of memory\n");
			return 1;
		}
		v = nv;
		n++;
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_path);
	*paths_p = v;
	*n_p = n;
	return 0;
}

static const char *const pack_splits[] = {"train", "test", "val"};

/*
 * Which split 'path' (PREFIX-...) is a shard of, as an index into
 * pack_splits: PREFIX-SPLIT-NNNNN-of-MMMMM followed by 'suffix' and
 * 'extra' more characters; -1 where it is none.
 */
static int prefix_shard(const char *prefix, const char *path, const char *suffix, size_t extra)
{
	const char *tail = path + strlen(prefix) + 1;

	for (int s = 0; s < 3; s++)
		if (strncmp(tail, pack_splits[s], strlen(pack_splits[s])) == 0 &&
		    tail[strlen(pack_splits[s])] == '-' &&
		    shard_tail(tail + strlen(pack_splits[s]) + 1, suffix, extra))
			return s;
	return -1;
}

/*
 * After a successful pack: removes PREFIX-SPLIT-*-of-*.pps of each split
 * written that this run did not write (a set of another total, left from
 * an earlier run), which would otherwise be loaded as extra data.
 */
static int remove_stale(const struct pack_options *opt, const struct written *w)
{
	bool packed[3] = {false, false, false};
	char **paths;
	size_t n;
	int ret = 0;

	for (size_t k = 0; k < w->n; k++) {
		const int s = prefix_shard(opt->prefix, w->paths[k], ".pps", 0);

		if (s >= 0)
			packed[s] = true;
	}
	if (prefix_files(opt->prefix, &paths, &n) != 0)
		return 1;
	for (size_t k = 0; k < n; k++) {
		const int s = prefix_shard(opt->prefix, paths[k], ".pps", 0);

		if (s < 0 || !packed[s] || was_written(w, paths[k]))
			continue;
		if (unlink(paths[k]) != 0) {
			fprintf(stderr, "pinpipe-pack: %s: a shard of an earlier set, cannot "
				"remove it: %s\n", paths[k], strerror(errno));
			ret = 1;
		} else if (!opt->quiet) {
			printf("removed %s, a shard of an earlier set\n", paths[k]);
		}
	}
	for (size_t k = 0; k < n; k++)
		free(paths[k]);
	free(paths);
	return ret;
}

/*
 * Removes the temporary files of this prefix's shards that a pinpipe-pack
 * killed while writing left behind (PREFIX-*-of-*.pps.new, staged, and
 * .pps.new.tmp-XXXXXX or .pps.tmp-XXXXXX, the shard writer's names),
 * saying so.  Returns 0, or 1 when one cannot be
 * removed (said on stderr).
 */
static int remove_stale_tmp(const struct pack_options *opt)
{
	char **paths;
	size_t n;
	int ret = 0;

	if (prefix_files(opt->prefix, &paths, &n) != 0)
		return 1;
	for (size_t k = 0; k < n; k++) {
		/* PREFIX-SPLIT-NNNNN-of-MMMMM.pps then .tmp-XXXXXX (the writer's), .new
		 * (staged) or .new.tmp-XXXXXX, not another prefix's. */
		if (prefix_shard(opt->prefix, paths[k], ".pps.tmp-", 6) < 0 &&
		    prefix_shard(opt->prefix, paths[k], ".pps" STAGED, 0) < 0 &&
		    prefix_shard(opt->prefix, paths[k], ".pps" STAGED ".tmp-", 6) < 0)
			continue;
		if (unlink(paths[k]) != 0) {
			fprintf(stderr, "pinpipe-pack: %s: a temporary file of an interrupted run, "
				"cannot remove it: %s\n", paths[k], strerror(errno));
			ret = 1;
		} else if (!opt->quiet) {
			printf("removed %s, a temporary file of an interrupted run\n", paths[k]);
		}
	}
	for (size_t k = 0; k < n; k++)
		free(paths[k]);
	free(paths);
	return ret;
}

/* Packs the image folder at dir as split 'split'; returns 0 or 1 (the message printed). */
static int pack_image_split(const struct pack_options *opt, struct pp_image_folder *f,
			    const char *dir, const char *split, struct written *written)
{
	struct pp_jpeg_config jc = {.size = opt->image_size, .mode = PP_JPEG_EVAL};
	struct pp_layout lay;
	struct pp_sample_info info = {.label_kind = PP_LABEL_CLASS};
	struct pp_shard_writer_config cfg = {.info = &info, .records_per_chunk = opt->records_per_chunk,
					      .level = opt->level_given ? opt->level : 0,
					      .threads = opt->threads, .layout = &lay,
					      .decoder = "jpeg"};
	uint64_t n, total = 0, shards = opt->shards, stored = 0;
	uint8_t *buf = NULL;
	size_t cap = 0;
	double t0 = now_s(), dt;
	int ret = 0;

	if (pp_jpeg_layout(&jc, false, &lay) < 0) {
		fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
		return 1;
	}
	info.num_classes = pp_image_folder_classes(f);
	info.count = n = pp_image_folder_count(f);
	for (uint64_t i = 0; i < n; i++) {
		struct stat st;
		if (stat(pp_image_folder_path(f, i), &st) == 0)
			total += (uint64_t)st.st_size;
	}
	if (shards == 0)
		shards = total / opt->shard_bytes + (total % opt->shard_bytes != 0);
	shards = shards > n ? n : shards == 0 ? 1 : shards;
	if (!opt->quiet)
		printf("%s (%s): %llu JPEGs in %u classes, %.1f MB\n", dir, split,
		       (unsigned long long)n, info.num_classes, mb(total));
	for (uint64_t k = 0; k < shards && ret == 0; k++) {
		uint64_t first = k * n / shards, last = (k + 1) * n / shards;
		struct pp_shard_writer *w;
		char path[4096], target[4096], staged[4096 + 8];
		struct stat st;

		if ((size_t)snprintf(path, sizeof(path), "%s-%s-%05llu-of-%05llu.pps", opt->prefix,
				     split, (unsigned long long)k,
				     (unsigned long long)shards) >= sizeof(path)) {
			fprintf(stderr, "pinpipe-pack: %s: prefix too long\n", opt->prefix);
			ret = 1;
			break;
		}
		if (!remember(written, path)) {
			fprintf(stderr, "pinpipe-pack: out of memory\n");
			ret = 1;
			break;
		}
		if (!staged_of(path, target, staged, sizeof(target))) {
			ret = 1;
			break;
		}
		if (pp_shard_writer_create(staged, &cfg, &w) < 0) {
			fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
			ret = 1;
			break;
		}
		for (uint64_t i = first; i < last && ret == 0; i++) {
			const char *file = pp_image_folder_path(f, i);
			FILE *fp = fopen(file, "rb");
			size_t len = 0;
			if (fp == NULL || fstat(fileno(fp), &st) != 0) {
				fprintf(stderr, "pinpipe-pack: %s: %s\n", file, strerror(errno));
				ret = 1;
			} else if ((size_t)st.st_size > cap && (free(buf), cap = (size_t)st.st_size,
								buf = malloc(cap)) == NULL) {
				fprintf(stderr, "pinpipe-pack: %s: out of memory\n", file);
				cap = 0;
				ret = 1;
			} else if ((len = fread(buf, 1, (size_t)st.st_size, fp)) != (size_t)st.st_size) {
				fprintf(stderr, "pinpipe-pack: %s: a short read\n", file);
				ret = 1;
			} else if (len < 3 || buf[0] != 0xff || buf[1] != 0xd8 || buf[2] != 0xff) {
				fprintf(stderr, "pinpipe-pack: %s: not a JPEG (no start-of-image "
					"marker)\n", file);
				ret = 1;
			} else if (pp_shard_writer_add_record(w, buf, len,
							      pp_image_folder_label(f, i)) < 0) {
				/* The file first: the shard's record number says little. */
				fprintf(stderr, "pinpipe-pack: %s: %s\n", file, pp_last_error());
				ret = 1;
			}
			if (fp != NULL)
				fclose(fp);
		}
		if (ret == 0 && pp_shard_writer_finish(w) < 0) {
			fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
			ret = 1;
		}
		pp_shard_writer_destroy(w);
		if (ret == 0 && stat(staged, &st) == 0) {
			stored += (uint64_t)st.st_size;
			if (!opt->quiet)
				printf("  %s: %llu records, %.1f MB on disk\n", path,
				       (unsigned long long)(last - first), mb((uint64_t)st.st_size));
		}
	}
	dt = now_s() - t0;
	if (ret == 0 && !opt->quiet)
		printf("  %llu shards: %llu records, %.1f MB of JPEGs in %.1f MB on disk, written in "
		       "%.3f s\n", (unsigned long long)shards, (unsigned long long)n, mb(total),
		       mb(stored), dt);
	free(buf);
	return ret;
}

/*
 * Packs an image folder: its train/, val/ and test/ subfolders as those
 * splits (pinpipe-train evaluates on val/, else test/), or itself as
 * train.  Each is listed once, and all before anything is written, so
 * that splits whose classes are not train/'s (a label is a class's index
 * in each folder) are refused first.
 */
static int pack_images(const struct pack_options *opt, const char *dir, struct written *written)
{
	static const char *const splits[] = {"train", "val", "test"};
	struct pp_jpeg_config jc = {.size = opt->image_size, .mode = PP_JPEG_EVAL};
	struct pp_image_folder *f[3] = {NULL, NULL, NULL};
	char sub[3][4096];
	struct stat st;
	int ret = 0, found = 0;

	for (size_t s = 0; s < 3 && ret == 0; s++) {
		snprintf(sub[s], sizeof(sub[s]), "%s/%s", dir, splits[s]);
		if (stat(sub[s], &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		found++;
		if (pp_image_folder_open(sub[s], &jc, &f[s]) < 0 ||
		    (s > 0 && f[0] != NULL && pp_image_folder_same_classes(f[0], f[s]) < 0)) {
			fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
			ret = 1;
		}
	}
	if (found == 0) {
		snprintf(sub[0], sizeof(sub[0]), "%s", dir);
		if (pp_image_folder_open(dir, &jc, &f[0]) < 0) {
			fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
			ret = 1;
		}
	}
	for (size_t s = 0; s < 3 && ret == 0; s++)
		if (f[s] != NULL)
			ret = pack_image_split(opt, f[s], sub[s], splits[s], written);
	for (size_t s = 0; s < 3; s++)
		pp_image_folder_close(f[s]);
	return ret;
}

/*
 * Renames every staged shard of the run into place, once all are written,
 * each where it was staged from (staged_of() checks again that nothing
 * but a regular file is there): 0, or 1 said.  *renamed_p counts the
 * shards renamed: where a rename fails after others, the prefix's set
 * mixes the two runs, and says so.
 */
static int commit_written(const struct written *w, size_t *renamed_p)
{
	char target[4096], staged[4096 + 8];

	*renamed_p = 0;
	for (size_t k = 0; k < w->n; k++)
		if (!staged_of(w->paths[k], target, staged, sizeof(target)))
			return 1;
	for (size_t k = 0; k < w->n; k++) {
		if (!staged_of(w->paths[k], target, staged, sizeof(target)))
			return 1;
		if (rename(staged, target) != 0) {
			fprintf(stderr, "pinpipe-pack: %s: cannot rename %s into place: %s\n",
				w->paths[k], staged, strerror(errno));
			return 1;
		}
		++*renamed_p;
	}
	return 0;
}

/*
 * Two runs of one prefix at once would remove each other's staged shards
 * and rename a mix of both into place: each run holds PREFIX.lock, a file
 * beside the shards locked with flock(2), for the whole of pack(), and a
 * second is refused.  The file is removed while locked at the end; a run
 * that locked a file just removed (opened before the removal) finds its
 * name gone or another's, and locks again.  A killed run's file is taken
 * over by the next (a lock ends with its process).  Returns the locked
 * descriptor, or -1 said.
 */
static int lock_prefix(const char *prefix, char *path, size_t len)
{
	if ((size_t)snprintf(path, len, "%s.lock", prefix) >= len) {
		fprintf(stderr, "pinpipe-pack: -o %s: the path is too long\n", prefix);
		return -1;
	}
	/* Another name each time only where the file is removed and made again between
	 * the open and the lock: a few tries are plenty. */
	for (int tries = 0; tries < 100; tries++) {
		struct stat held, named;
		/* Read-only (a lock needs no more), so that a leftover file of mode 0444 is
		 * taken over too; never through a link, never waiting on a FIFO. */
		int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY,
			      0644);

		if (fd < 0) {
			if (errno == ELOOP)
				fprintf(stderr, "pinpipe-pack: -o %s: its lock %s is a symbolic link: "
					"remove it\n", prefix, path);
			else
				fprintf(stderr, "pinpipe-pack: -o %s: cannot make its lock %s: %s\n",
					prefix, path, strerror(errno));
			return -1;
		}
		if (fstat(fd, &held) != 0 || !S_ISREG(held.st_mode)) {
			fprintf(stderr, "pinpipe-pack: -o %s: its lock %s is not a regular file: "
				"remove it\n", prefix, path);
			close(fd);
			return -1;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
			const int err = errno;

			/* A file system without locks (some NFS mounts) packs as before. */
			if (err == ENOLCK || err == EOPNOTSUPP) {
				fprintf(stderr, "pinpipe-pack: -o %s: warning: %s cannot be locked "
					"here (%s): two runs of the prefix at once would mix their "
					"shards\n", prefix, path, strerror(err));
				return fd;
			}
			close(fd);
			if (err == EWOULDBLOCK)
				fprintf(stderr, "pinpipe-pack: -o %s: another pinpipe-pack is packing "
					"this prefix (it holds %s): wait for it to end\n", prefix, path);
			else
				fprintf(stderr, "pinpipe-pack: -o %s: cannot lock %s: %s\n", prefix,
					path, strerror(err));
			return -1;
		}
		if (lstat(path, &named) == 0 && held.st_dev == named.st_dev &&
		    held.st_ino == named.st_ino)
			return fd;
		close(fd);
	}
	fprintf(stderr, "pinpipe-pack: -o %s: its lock %s is removed and made again as it is "
		"taken: another program is at work there\n", prefix, path);
	return -1;
}

/* Ends lock_prefix()'s hold: the file removed, then its lock. */
static void unlock_prefix(int fd, const char *path)
{
	unlink(path);
	close(fd);
}

static int pack(const struct pack_options *opt, char **inputs, int n)
{
	struct written written = {NULL, 0};
	size_t renamed = 0;
	struct stat st;
	bool all_bin = true, images;
	char lock[4096 + 8];
	int ret, stale = 0, lock_fd;

	for (int k = 0; k < n; k++)
		all_bin = all_bin && has_suffix(inputs[k], ".bin");
	images = n == 1 && stat(inputs[0], &st) == 0 && S_ISDIR(st.st_mode) &&
		 pp_image_folder_probe(inputs[0]);
	/* Bad usage before the lock: it says so (2) also while another run packs. */
	if (n > 2 && !all_bin)
		return usage_error("expected a directory, IMAGES [LABELS], or CIFAR-10 .bin files; "
				   "got", inputs[2]);
	if (images && opt->version_given && opt->shard_version == 1)
		return usage_error("--shard-version=1: an image folder is packed as version 2 records "
				   "of its JPEG bytes (version 1 holds fixed-size samples); got",
				   inputs[0]);
	if (!images && opt->image_size_given)
		return usage_error("--image-size is for a folder of JPEGs; got", inputs[0]);
	lock_fd = lock_prefix(opt->prefix, lock, sizeof(lock));
	if (lock_fd < 0)
		return 1;
	if (remove_stale_tmp(opt) != 0) {
		unlock_prefix(lock_fd, lock);
		return 1;
	}
	if (images) {
		ret = pack_images(opt, inputs[0], &written);
	} else if (n == 1 && stat(inputs[0], &st) == 0 && S_ISDIR(st.st_mode)) {
		ret = pack_dir_split(opt, inputs[0], "train", false, &written);
		if (ret == 0)
			ret = pack_dir_split(opt, inputs[0], "test", true, &written);
	} else if (n == 1 && stat(inputs[0], &st) != 0) {
		fprintf(stderr,
			"pinpipe-pack: %s: %s (for Fashion-MNIST, install Debian's "
			"dataset-fashion-mnist: it puts the files in /usr/share/datasets/fashion-mnist)\n",
			inputs[0], strerror(errno));
		ret = 1;
	} else if (all_bin) {
		ret = pack_cifar10(opt, inputs, n, &written);
	} else {
		struct pp_dataset *ds;
		double t0 = now_s();

		if (pp_dataset_open_idx(inputs[0], n == 2 ? inputs[1] : NULL, &ds) < 0) {
			fprintf(stderr, "pinpipe-pack: %s\n", pp_last_error());
			ret = 1;
		} else {
			ret = pack_split(opt, ds, split_of(inputs[0]), now_s() - t0, &written);
			pp_dataset_destroy(ds);
		}
	}
	if (ret == 0)
		ret = commit_written(&written, &renamed);
	if (ret == 0)
		stale = remove_stale(opt, &written);
	for (size_t k = 0; k < written.n; k++) {
		char target[4096], staged[4096 + 8];

		if (ret != 0 && staged_name(written.paths[k], target, staged, sizeof(target)))
			unlink(staged);
		free(written.paths[k]);
	}
	free(written.paths);
	unlock_prefix(lock_fd, lock);
	if (ret == 1 && renamed > 0)
		fprintf(stderr, "pinpipe-pack: %zu shards of this run were renamed into place before "
			"the failure, the others removed: the shards of %s mix two runs, pack it "
			"again\n", renamed, opt->prefix);
	else if (ret == 1 && written.n > 0)
		fprintf(stderr, "pinpipe-pack: the shards of this run removed; any of an earlier run of "
			"%s left as they were\n", opt->prefix);
	return ret != 0 ? ret : stale;
}

/* Writes "samples: u8[1,28,28] normalize, labels: i32" for a layout into buf. */
static void format_layout(const struct pp_layout *lay, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (uint32_t f = 0; f < lay->nfields && at < len; f++) {
		const struct pp_field *fd = &lay->fields[f];

		at += (size_t)snprintf(buf + at, len - at, "%s%s: %s", f > 0 ? ", " : "", fd->name,
				       pp_dtype_name(fd->dtype));
		for (uint32_t d = 0; d < fd->ndim && at < len; d++)
			at += (size_t)snprintf(buf + at, len - at, "%s%u%s", d == 0 ? "[" : ",",
					       fd->shape[d], d + 1 == fd->ndim ? "]" : "");
		if (fd->normalize && at < len)
			at += (size_t)snprintf(buf + at, len - at, " normalize");
	}
}

static int verify(char **files, int n)
{
	uint64_t total_records = 0, total_chunks = 0, total_disk = 0, total_raw = 0;
	double total_s = 0;
	int bad = 0;

	for (int k = 0; k < n; k++) {
		struct pp_shard *sh;
		uint64_t raw = 0, chunks;
		double t0 = now_s(), dt;
		struct stat st;
		int ret = pp_shard_open(files[k], &sh);

		if (ret == 0) {
			ret = pp_shard_verify(sh);
			dt = now_s() - t0;
			chunks = pp_shard_chunk_count(sh);
			for (uint64_t c = 0; c < chunks; c++) {
				struct pp_shard_chunk_info ci;

				pp_shard_chunk(sh, c, &ci);
				raw += ci.raw_size;
			}
			/* The size pinpipe-pack reported as "on disk": the whole file. */
			if (ret == 0 && stat(files[k], &st) < 0) {
				printf("BAD: %s: %s\n", files[k], strerror(errno));
				bad++;
			} else if (ret == 0) {
				char what[1024] = "";

				if (pp_shard_version(sh) != 1) {
					char lay[768];

					format_layout(pp_shard_layout(sh), lay, sizeof(lay));
					snprintf(what, sizeof(what), " version %u, decoder %s, layout %s, "
						 "records of at most %u bytes,", pp_shard_version(sh),
						 pp_shard_decoder(sh), lay, pp_shard_max_record(sh));
				}
				printf("%s: ok,%s %llu records, %llu chunks, %.1f MB on disk, %.1f MB "
				       "decoded in %.3f s (%.0f MB/s)\n",
				       files[k], what, (unsigned long long)pp_shard_info(sh)->count,
				       (unsigned long long)chunks, mb((uint64_t)st.st_size), mb(raw), dt,
				       dt > 0 ? mb(raw) / dt : 0.0);
				total_records += pp_shard_info(sh)->count;
				total_chunks += chunks;
				total_disk += (uint64_t)st.st_size;
				total_raw += raw;
				total_s += dt;
			}
			pp_shard_close(sh);
		}
		if (ret < 0) {
			printf("BAD: %s\n", pp_last_error());
			bad++;
		}
	}
	printf("%d of %d shards ok: %llu records, %llu chunks, %.1f MB on disk, %.1f MB decoded "
	       "in %.3f s (%.0f MB/s)\n",
	       n - bad, n, (unsigned long long)total_records, (unsigned long long)total_chunks,
	       mb(total_disk), mb(total_raw), total_s, total_s > 0 ? mb(total_raw) / total_s : 0.0);
	return bad == 0 ? 0 : 1;
}

/*
 * Checks that the shards of PREFIX can be written in its folder, before
 * anything is decoded: a missing or read-only folder is a usage error
 * naming the prefix, not a failure after the whole input was read.
 */
static int check_prefix(const char *prefix)
{
	char dir[4096], why[4200];
	struct stat st;
	int ret;

	/* the shards are PREFIX-SPLIT-...: a folder alone would make files named "-train-..." in it */
	if (prefix[0] == '\0' || prefix[strlen(prefix) - 1] == '/' ||
	    (stat(prefix, &st) == 0 && S_ISDIR(st.st_mode))) {
		fprintf(stderr, "pinpipe-pack: -o %s: a folder, not a prefix: the shards are named "
			"PREFIX-SPLIT-N-of-M.pps (give, e.g., %s%sfmnist)\n", prefix, prefix,
			prefix[0] != '\0' && prefix[strlen(prefix) - 1] == '/' ? "" : "/");
		return 2;
	}
	pp_args_folder_of(prefix, dir, sizeof(dir));
	ret = pp_args_check_folder(dir, why, sizeof(why));
	if (ret == 0)
		return 0;
	fprintf(stderr, "pinpipe-pack: -o %s: %s%s\n", prefix, why,
		ret == -ENOENT ? " (make it first)" : "");
	return 2;
}

static int pack_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"shards", required_argument, NULL, 'n'},
		{"size", required_argument, NULL, 's'},
		{"chunk", required_argument, NULL, 'c'},
		{"level", required_argument, NULL, 'l'},
		{"threads", required_argument, NULL, 'j'},
		{"shard-version", required_argument, NULL, 'S'},
		{"image-size", required_argument, NULL, 'I'},
		{"output", required_argument, NULL, 'o'},
		{"quiet", no_argument, NULL, 'q'},
		{"verify", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	int cpus = pp_cpu_usable_cores();
	struct pack_options opt = {0, DEFAULT_SHARD_BYTES, DEFAULT_RECORDS_PER_CHUNK, DEFAULT_LEVEL,
				   (uint32_t)cpus > MAX_THREADS ? MAX_THREADS : (uint32_t)cpus,
				   1, NULL, false, false, 224, false, false};
	bool do_verify = false, have_n = false, have_s = false, have_c = false, have_j = false;
	const char *abbrev, *whole;
	uint64_t v;
	int c;

	opterr = 0;
	while ((c = pp_getopt_whole(argc, argv, ":n:s:c:l:j:o:qhV", longopts, &abbrev, &whole)) != -1) {
		switch (c) {
		case 'n':
			if (!parse_u64(optarg, MAX_SHARDS, &v) || v == 0)
				return usage_error("--shards: expected a count of 1..100000, got",
						   optarg);
			opt.shards = (uint32_t)v;
			have_n = true;
			break;
		case 's':
			if (!pp_parse_size(optarg, &opt.shard_bytes))
				return usage_error("--size: expected bytes with a K, M or G suffix, got",
						   optarg);
			have_s = true;
			break;
		case 'c':
			if (!parse_u64(optarg, UINT32_MAX, &v) || v == 0)
				return usage_error("--chunk: expected a record count of 1 or more, got",
						   optarg);
			opt.records_per_chunk = (uint32_t)v;
			have_c = true;
			break;
		case 'l':
			if (!parse_u64(optarg, 9, &v))
				return usage_error("--level: expected 0..9, got", optarg);
			opt.level = (int)v;
			opt.level_given = true;
			break;
		case 'I':
			if (!parse_u64(optarg, 4096, &v) || v < 8)
				return usage_error("--image-size: expected 8..4096, got", optarg);
			opt.image_size = (uint32_t)v;
			opt.image_size_given = true;
			break;
		case 'j':
			if (!parse_u64(optarg, MAX_THREADS, &v) || v == 0)
				return usage_error("--threads: expected 1..64, got", optarg);
			opt.threads = (uint32_t)v;
			have_j = true;
			break;
		case 'S':
			if (!parse_u64(optarg, 2, &v) || v == 0)
				return usage_error("--shard-version: expected 1 or 2, got", optarg);
			opt.shard_version = (uint32_t)v;
			opt.version_given = true;
			break;
		case 'o':
			opt.prefix = optarg;
			break;
		case 'q':
			opt.quiet = true;
			break;
		case 'v':
			do_verify = true;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'V':
			printf("pinpipe-pack %s\n", pp_version());
			return 0;
		case ':':
			return usage_error("missing value for option", argv[optind - 1]);
		default:
			if (abbrev != NULL) {
				fprintf(stderr, "pinpipe-pack: '%s': options are taken by their whole "
					"name: --%s (try --help)\n", abbrev, whole);
				return 2;
			}
			return usage_error("unknown option", pp_getopt_unknown(argv, longopts));
		}
	}
	if (have_n && have_s)
		return usage_error("--shards and --size exclude each other", NULL);
	if (do_verify) {
		if (optind == argc)
			return usage_error("--verify: no shard file given", NULL);
		/* Options of packing, given to --verify, would be taken and ignored. */
		if (opt.prefix != NULL || have_n || have_s || have_c || have_j || opt.level_given ||
		    opt.version_given || opt.image_size_given)
			return usage_error("--verify takes only files (and -q): the options of packing "
					   "are not its", NULL);
		return verify(argv + optind, argc - optind);
	}
	if (opt.prefix == NULL)
		return usage_error("no output prefix given (-o PREFIX)", NULL);
	if (optind == argc)
		return usage_error("no input given", NULL);
	if (check_prefix(opt.prefix) != 0)
		return 2;
	return pack(&opt, argv + optind, argc - optind);
}

/*
 * Output that did not all reach standard output is a failure too, said.
 * Past RLIMIT_FSIZE a write fails with EFBIG, said: SIGXFSZ would kill with no word.
 */
int main(int argc, char **argv)
{
	signal(SIGXFSZ, SIG_IGN);
	return pp_args_end_stdout("pinpipe-pack", pack_main(argc, argv));
}
