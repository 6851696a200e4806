/*
 * tools/bench.c: pinpipe-bench, "how much does pinning buy me on
 * this machine".  Two benchmarks, each run with pinned and with pageable
 * host memory side by side, on any device (sim, sim:bw=25GB/s, cuda):
 *
 *   bandwidth  host-to-device and device-to-host GB/s over a range of copy
 *              sizes, and the share of the time the host was blocked in
 *              the copy call (like CUDA's bandwidthTest);
 *   overlap    the real loader feeding the transfer stage, with a synthetic
 *              compute step per batch on the compute stream (one kernel, or
 *              --kernels=N short ones launched one by one, as a trainer
 *              does): step time, copy time, the part of it exposed and the
 *              share hidden, the host's time in copy calls and in the whole
 *              stage, its device calls, and the time waited for data.
 *
 * Results print as a table, then what pinning bought (pinned against
 * pageable) and, when this process's threads waited for a core long enough
 * to matter, that the host was too loaded for the figures; with --csv /
 * --jsonl also as CSV or JSON lines.  Uses the public API only.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/args.h"
#include "common/cpu.h"
#include "common/hostload.h"
#include "common/links.h"
#include "common/size.h"
#include "common/textout.h"
#include "pinpipe/pinpipe.h"
#include "pinpipe/transfer.h"

#define MAX_SIZES 32
#define MAX_ROWS 256
#define MAX_COLS 20
#define CELL 72 /* bytes of a table cell */

struct options {
	const char *command;    /* "bandwidth" or "overlap" */
	const char *device;     /* device name */
	const char *csv;        /* CSV output path, or NULL */
	const char *jsonl;      /* JSON lines output path, or NULL */
	size_t sizes[MAX_SIZES]; /* bandwidth: copy sizes, bytes */
	int nsizes;
	uint64_t total;         /* bandwidth: bytes copied per measurement */
	long compute_us;        /* overlap: compute per batch, µs; < 0: as long as the copy */
	uint32_t kernels;       /* overlap: the compute of a batch as this many kernels */
	uint32_t time_every;    /* overlap: the stage times one batch in this many; 0: its default */
	uint32_t batch_size;    /* overlap: samples per batch */
	uint32_t batches;       /* overlap: batches per run */
	uint32_t workers;       /* overlap: loader threads */
	uint32_t depth;         /* overlap: copies ahead */
	uint32_t prefetch;      /* overlap: the loader's ring slots; 0: the loader's default */
	enum pp_dtype dtype;    /* overlap: batch element type */
	const char *data;       /* overlap: "synthetic" or a dataset directory */
	uint32_t image_size;    /* overlap, a folder of JPEGs: the decoded side */
};

/* A table of results: named columns, rows of formatted cells. */
struct table {
	const char *cols[MAX_COLS];
	bool numeric[MAX_COLS];  /* right-aligned, unquoted in JSON */
	int ncols;
	char cells[MAX_ROWS][MAX_COLS][CELL];
	int nrows;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
	fputs("usage: pinpipe-bench bandwidth [--device=NAME] [--sizes=LIST] [--total=SIZE]\n"
	      "                               [--csv=FILE] [--jsonl=FILE]\n"
	      "       pinpipe-bench overlap [--device=NAME] [--compute-us=N] [--kernels=N]\n"
	      "                             [--batch-size=N] [--batches=N] [--workers=N]\n"
	      "                             [--depth=N] [--prefetch=N] [--time-every=N]\n"
	      "                             [--dtype=u8|f32] [--data=synthetic|DIR]\n"
	      "                             [--image-size=S] [--csv=FILE] [--jsonl=FILE]\n"
	      "       pinpipe-bench --help | --version\n"
	      "Each command takes the options of its line (another is refused).\n"
	      "\n"
	      "How much pinned host memory buys on this machine, pinned against pageable:\n"
	      "  bandwidth  host-to-device and device-to-host GB/s per copy size, and the\n"
	      "             share of the time the host was blocked in the copy call\n"
	      "  overlap    the loader feeding the transfer stage, with a synthetic compute\n"
	      "             step per batch: step time, copy time exposed and hidden, the\n"
	      "             host's time in copy calls and in the stage, its device calls\n"
	      "Then what pinning bought (pinned against pageable: GB/s; the step's time),\n"
	      "and a warning when this process had 0.25 threads or more waiting for a\n"
	      "core, on average (cpu_wait): on a host that busy the figures measure the\n"
	      "host, and on sim, whose copy engine and kernels are host threads, the\n"
	      "device too.\n"
	      "\n"
	      "  --device=NAME     auto, cpu, sim, sim:bw=25GB/s,call_us=20, cuda, cuda:N\n"
	      "                    (default: auto)\n"
	      "  --sizes=LIST      copy sizes, e.g. 4K,64K,1M,4M (K, M, G: binary; default\n"
	      "                    4K,64K,256K,1M,4M)\n"
	      "  --total=SIZE      bytes copied per measurement (default 64M)\n"
	      "  --compute-us=N    compute per batch, µs (default: as long as a copy: the mean\n"
	      "                    pinned copy time over 100 batches, measured first)\n"
	      "  --kernels=N       the compute of a batch as N kernels, each launched by the\n"
	      "                    host in turn, as a trainer does: with short ones the step\n"
	      "                    is bound by the launches, and a copy that blocks the host\n"
	      "                    (pageable) delays them and shows in the step (default 1)\n"
	      "  --time-every=N    the stage times one batch in N (default: the stage's, 16)\n"
	      "  --batch-size=N    samples per batch (default 256)\n"
	      "  --batches=N       batches per run (default 200)\n"
	      "  --workers=N       loader threads (default 2)\n"
	      "  --depth=N         batches copied ahead (default 2)\n"
	      "  --prefetch=N      the loader's ring slots: batches filled ahead, the stage's\n"
	      "                    included until their copies are known done (default: the\n"
	      "                    loader's, 2 x workers + 2)\n"
	      "  --dtype=u8|f32    batches as stored (u8) or converted to float32 (default f32)\n"
	      "  --data=synthetic|DIR  synthetic (default): 60,000 1x28x28 u8 images in 10\n"
	      "                    classes, each its class's fixed prototype plus noise,\n"
	      "                    made on demand from the sample's index (no file; the\n"
	      "                    shape of Fashion-MNIST); or the training\n"
	      "                    split of a dataset directory (e.g. Fashion-MNIST), or a\n"
	      "                    folder of JPEGs (DIR/train/CLASS/*.jpg or DIR/CLASS/*.jpg,\n"
	      "                    or in folders under a class),\n"
	      "                    decoded by the workers with RandomResizedCrop and flips:\n"
	      "                    samples_per_s is then images/s\n"
	      "  --image-size=S    the JPEGs' decoded side (default 224)\n"
	      "  --csv=FILE        also write the rows as CSV\n"
	      "  --jsonl=FILE      also write the rows as JSON lines, an object a row\n"
	      "                    (--json=FILE: the same)\n"
	      "  -h, --help        this text\n"
	      "  -V, --version     the version\n"
	      "Exit status: 0 ok, 1 the benchmark failed, 2 bad usage.\n", f);
}

/* Says what is wrong with the command line, on one line; returns 2, the exit status. */
static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int bad_usage(const char *fmt, ...)
{
	va_list ap;

	fputs("pinpipe-bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (try --help)\n", stderr);
	return 2;
}

static bool parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *v_p)
{
	char *end;
	unsigned long v;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return false;
	*v_p = (uint32_t)v;
	return true;
}

static int parse_sizes(const char *arg, struct options *o)
{
	char buf[512], *save = NULL, *tok;
	uint64_t v;

	if (strlen(arg) >= sizeof(buf))
		return bad_usage("--sizes: list too long: %s", arg);
	strcpy(buf, arg);
	o->nsizes = 0;
	for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		if (o->nsizes == MAX_SIZES)
			return bad_usage("--sizes: more than 32 sizes in %s", arg);
		if (!pp_parse_size(tok, &v) || v > (1ull << 34))
			return bad_usage("--sizes: not a size from 1 to 16G: '%s'", tok);
		o->sizes[o->nsizes++] = (size_t)v;
	}
	if (o->nsizes == 0)
		return bad_usage("--sizes: no size in '%s'", arg);
	return 0;
}

enum {
	OPT_DEVICE = 256, OPT_IMAGE_SIZE, OPT_SIZES, OPT_TOTAL, OPT_COMPUTE, OPT_BATCH, OPT_BATCHES, OPT_WORKERS,
	OPT_DEPTH, OPT_DTYPE, OPT_DATA, OPT_CSV, OPT_JSONL, OPT_KERNELS, OPT_TIME_EVERY, OPT_PREFETCH,
};

/* Whether option c is one that 'command' takes (its usage line lists them). */
static bool option_of(const char *command, int c)
{
	switch (c) {
	case OPT_SIZES: case OPT_TOTAL:
		return strcmp(command, "bandwidth") == 0;
	case OPT_COMPUTE: case OPT_KERNELS: case OPT_TIME_EVERY: case OPT_BATCH: case OPT_BATCHES:
	case OPT_WORKERS: case OPT_DEPTH: case OPT_DTYPE: case OPT_DATA: case OPT_IMAGE_SIZE:
	case OPT_PREFETCH:
		return strcmp(command, "overlap") == 0;
	}
	return true;
}

/* Parses the command line; returns 0, 2 (bad usage, said on stderr) or -1 (--help or --version printed). */
static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "sizes", required_argument, NULL, OPT_SIZES },
		{ "total", required_argument, NULL, OPT_TOTAL },
		{ "compute-us", required_argument, NULL, OPT_COMPUTE },
		{ "kernels", required_argument, NULL, OPT_KERNELS },
		{ "time-every", required_argument, NULL, OPT_TIME_EVERY },
		{ "batch-size", required_argument, NULL, OPT_BATCH },
		{ "batches", required_argument, NULL, OPT_BATCHES },
		{ "workers", required_argument, NULL, OPT_WORKERS },
		{ "depth", required_argument, NULL, OPT_DEPTH },
		{ "prefetch", required_argument, NULL, OPT_PREFETCH },
		{ "dtype", required_argument, NULL, OPT_DTYPE },
		{ "data", required_argument, NULL, OPT_DATA },
		{ "image-size", required_argument, NULL, OPT_IMAGE_SIZE },
		{ "csv", required_argument, NULL, OPT_CSV },
		{ "jsonl", required_argument, NULL, OPT_JSONL },
		{ "json", required_argument, NULL, OPT_JSONL },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	static const size_t default_sizes[] = { 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20 };
	const char *abbrev, *whole;
	uint32_t v;
	uint64_t s;
	int c, ret;

	*o = (struct options){ .device = "auto", .total = 64ull << 20, .compute_us = -1,
			       .kernels = 1, .batch_size = 256, .batches = 200, .workers = 2, .depth = 2,
			       .dtype = PP_DTYPE_F32, .data = "synthetic", .image_size = 224 };
	o->nsizes = (int)(sizeof(default_sizes) / sizeof(default_sizes[0]));
	memcpy(o->sizes, default_sizes, sizeof(default_sizes));
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return -1;
	}
	if (argc >= 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)) {
		printf("pinpipe-bench %s\n", pp_version());
		return -1;
	}
	if (argc < 2 || argv[1][0] == '-')
		return bad_usage("%s", argc < 2 ? "no command given: bandwidth or overlap"
				      : "the command (bandwidth or overlap) comes first");
	o->command = argv[1];
	if (strcmp(o->command, "bandwidth") != 0 && strcmp(o->command, "overlap") != 0)
		return bad_usage("unknown command '%s': bandwidth or overlap", o->command);
	opterr = 0;
	optind = 2;
	while ((c = pp_getopt_whole(argc, argv, ":hV", longopts, &abbrev, &whole)) != -1) {
		/* Measured by the other command only, it would be taken and ignored. */
		if (!option_of(o->command, c)) {
			const char *name = "";

			for (const struct option *lo = longopts; lo->name != NULL; lo++)
				if (lo->val == c) {
					name = lo->name;
					break;
				}
			return bad_usage("--%s is an option of %s, not of %s", name,
					 strcmp(o->command, "overlap") == 0 ? "bandwidth" : "overlap",
					 o->command);
		}
		switch (c) {
		case OPT_DEVICE:
			o->device = optarg;
			break;
		case OPT_SIZES:
			if ((ret = parse_sizes(optarg, o)) != 0)
				return ret;
			break;
		case OPT_TOTAL:
			if (!pp_parse_size(optarg, &s) || s > (1ull << 40))
				return bad_usage("--total: not a size: '%s'", optarg);
			o->total = s;
			break;
		case OPT_COMPUTE:
			if (!parse_u32(optarg, 0, 10000000, &v))
				return bad_usage("--compute-us: not a number of µs from 0 to 10000000: '%s'",
						 optarg);
			o->compute_us = v;
			break;
		case OPT_KERNELS:
			if (!parse_u32(optarg, 1, 10000, &o->kernels))
				return bad_usage("--kernels: not a number from 1 to 10000: '%s'", optarg);
			break;
		case OPT_TIME_EVERY:
			if (!parse_u32(optarg, 1, 1 << 20, &o->time_every))
				return bad_usage("--time-every: not a number from 1 to 1048576: '%s'",
						 optarg);
			break;
		case OPT_BATCH:
			if (!parse_u32(optarg, 1, 1 << 20, &o->batch_size))
				return bad_usage("--batch-size: not a number from 1 to 1048576: '%s'", optarg);
			break;
		case OPT_BATCHES:
			if (!parse_u32(optarg, 1, 1 << 24, &o->batches))
				return bad_usage("--batches: not a number from 1: '%s'", optarg);
			break;
		case OPT_IMAGE_SIZE:
			if (!parse_u32(optarg, 8, 4096, &o->image_size))
				return bad_usage("--image-size: not a number from 8 to 4096: '%s'", optarg);
			break;
		case OPT_WORKERS:
			if (!parse_u32(optarg, 0, 64, &o->workers))
				return bad_usage("--workers: not a number from 0 to 64: '%s'", optarg);
			break;
		case OPT_DEPTH:
			if (!parse_u32(optarg, 1, 64, &o->depth))
				return bad_usage("--depth: not a number from 1 to 64: '%s'", optarg);
			break;
		case OPT_PREFETCH:
			if (!parse_u32(optarg, 1, 1024, &o->prefetch))
				return bad_usage("--prefetch: not a number from 1 to 1024: '%s'", optarg);
			break;
		case OPT_DTYPE:
			if (strcmp(optarg, "u8") == 0)
				o->dtype = PP_DTYPE_U8;
			else if (strcmp(optarg, "f32") == 0)
				o->dtype = PP_DTYPE_F32;
			else
				return bad_usage("--dtype: u8 or f32, not '%s'", optarg);
			break;
		case OPT_DATA:
			o->data = optarg;
			break;
		case OPT_CSV:
			o->csv = optarg;
			break;
		case OPT_JSONL:
			o->jsonl = optarg;
			break;
		case 'h':
			usage(stdout);
			return -1;
		case 'V':
			printf("pinpipe-bench %s\n", pp_version());
			return -1;
		case ':':
			return bad_usage("option %s needs a value", argv[optind - 1]);
		default:
			if (abbrev != NULL)
				return bad_usage("'%s': options are taken by their whole name: --%s",
						 abbrev, whole);
			return bad_usage("unknown option '%s'", pp_getopt_unknown(argv, longopts));
		}
	}
	if (optind < argc)
		return bad_usage("unexpected argument '%s'", argv[optind]);
	return 0;
}

/* ------------------------------------------------------------------ output */

static void table_cols(struct table *t, const char *const *cols, const bool *numeric, int n)
{
	for (int i = 0; i < n; i++) {
		t->cols[i] = cols[i];
		t->numeric[i] = numeric[i];
	}
	t->ncols = n;
}

/* Adds a row; 'cells' are the ncols strings. */
static void table_add(struct table *t, char cells[][CELL])
{
	if (t->nrows == MAX_ROWS)
		return;
	for (int i = 0; i < t->ncols; i++)
		memcpy(t->cells[t->nrows][i], cells[i], CELL);
	t->nrows++;
}

static void table_print(const struct table *t)
{
	int w[MAX_COLS];

	for (int c = 0; c < t->ncols; c++) {
		w[c] = (int)strlen(t->cols[c]);
		for (int r = 0; r < t->nrows; r++)
			if ((int)strlen(t->cells[r][c]) > w[c])
				w[c] = (int)strlen(t->cells[r][c]);
	}
	for (int c = 0; c < t->ncols; c++)
		printf("%s%*s", c ? "  " : "", t->numeric[c] ? w[c] : -w[c], t->cols[c]);
	putchar('\n');
	for (int r = 0; r < t->nrows; r++) {
		for (int c = 0; c < t->ncols; c++)
			printf("%s%*s", c ? "  " : "", t->numeric[c] ? w[c] : -w[c], t->cells[r][c]);
		putchar('\n');
	}
}

/*
 * Opens --csv or --jsonl's file before anything is measured, so that a
 * path that cannot be written is said at once, not after the benchmark;
 * for appending, so that a file there stays as it was until rows replace
 * it (table_write()); where it is standard output's own file
 * (--csv=/dev/stdout > FILE), through standard output's (*shared).
 */
static int table_open(const char *opt, const char *path, FILE **f, bool *shared)
{
	*f = NULL;
	*shared = false;
	if (path == NULL)
		return 0;
	*f = pp_rows_fopen(path, "a", shared);
	if (*f == NULL) {
		fprintf(stderr, "pinpipe-bench: --%s=%s: cannot open for writing: %s\n", opt, path,
			strerror(errno));
		return 1;
	}
	return 0;
}

/* The rows of t into f: JSON lines, or CSV with its header. */
static void table_put(const struct table *t, FILE *f, bool json)
{
	if (json) {
		for (int r = 0; r < t->nrows; r++) {
			fputs("{", f);
			for (int c = 0; c < t->ncols; c++) {
				const char *v = t->cells[r][c];
				bool dash = strcmp(v, "-") == 0;

				fputs(c ? ", " : "", f);
				pp_json_string(f, t->cols[c]);
				fputs(": ", f);
				if (t->numeric[c] && !dash)
					fputs(v, f);
				else
					pp_json_string(f, dash ? "" : v);
			}
			fputs("}\n", f);
		}
	} else {
		for (int c = 0; c < t->ncols; c++) {
			fputs(c ? "," : "", f);
			pp_csv_cell(f, t->cols[c]);
		}
		fputc('\n', f);
		for (int r = 0; r < t->nrows; r++)
			for (int c = 0; c < t->ncols; c++) {
				pp_csv_cell(f, t->cells[r][c]);
				fputc(c + 1 < t->ncols ? ',' : '\n', f);
			}
	}
}

/*
 * Where the staged file of rows f ('tmp', written whole) cannot be renamed
 * over 'target' ('why': a file mounted there, EBUSY): the rows written
 * over it in place (pp_rows_write_over(): a full disk leaves it as it
 * was), the staged file removed; or, where they cannot be, the staged file
 * kept out of the sweep's reach, and named.  Closes f; returns 0 or 1.
 */
static int table_write_over(const struct table *t, FILE *f, const char *path, bool json,
			    const char *tmp, const char *target, int why)
{
	char *buf = NULL, kept[PATH_MAX + 16];
	size_t n = 0;
	bool touched = false;
	FILE *mem = open_memstream(&buf, &n);
	int fd = -1, err = 0;

	if (mem == NULL) {
		err = errno;
	} else {
		table_put(t, mem, json);
		if (fclose(mem) != 0 || (fd = pp_rows_write_over(target, buf, n, &touched)) < 0 ||
		    close(fd) != 0)
			err = errno ? errno : EIO;
	}
	free(buf);
	if (err == 0) {
		/* unlinked before its close: locked until then (pp_staged_create()) */
		unlink(tmp);
		fclose(f);
		fprintf(stderr, "pinpipe-bench: %s: %s cannot be renamed over it (%s): its rows "
			"are written in place\n", path, tmp, strerror(why));
		return 0;
	}
	if (pp_rows_keep(tmp, kept, sizeof(kept)) != 0)
		snprintf(kept, sizeof(kept), "%s", tmp);
	fclose(f);
	fprintf(stderr, "pinpipe-bench: %s: write failed: %s cannot be renamed over it (%s), nor "
		"its rows written over it: %s%s; they are in %s\n", path, tmp, strerror(why),
		strerror(err), touched ? " (it may hold part of them)" : "", kept);
	return 1;
}

/*
 * Writes the rows so far into f (NULL: nothing) in place of what it held,
 * or after what standard output wrote there (shared), and closes it.
 */
static int table_write(const struct table *t, FILE *f, bool shared, const char *path, bool json)
{
	char target[PATH_MAX], tmp[PATH_MAX + 16] = "";
	struct stat st;
	int err;

	if (f == NULL)
		return 0;
	if (t->ncols == 0) {           /* failed before a benchmark began: the file stays as it was */
		fclose(f);
		return 0;
	}
	/* A regular file of this user's, of one name, is replaced whole: the rows go to
	 * a temporary file beside the one its links lead to, of its mode, renamed over
	 * it once all are written, so that a full disk leaves the earlier rows.  In
	 * place where the folder takes no new file, and for another's file or one of
	 * several names (renamed over, it would become this user's, or lose a name). */
	if (!shared && fstat(fileno(f), &st) == 0 && pp_rows_replaceable(&st) &&
	    pp_links_follow(path, target, sizeof(target))) {
		FILE *staged = pp_rows_tmp_open(target, st.st_mode, "w", tmp, sizeof(tmp));

		if (staged == NULL && !pp_rows_tmp_refused(errno) && errno != ENAMETOOLONG) {
			/* a full disk, no inode left: the earlier file stays as it is */
			fprintf(stderr, "pinpipe-bench: %s: cannot create %s beside it: %s\n", path,
				tmp, strerror(errno));
			fclose(f);
			return 1;
		}
		if (staged != NULL) {
			fclose(f);
			f = staged;
		} else {
			tmp[0] = '\0';
		}
	} else {
		tmp[0] = '\0';
	}
	/* In place: a regular file's old rows go (a pipe or a terminal has none: EINVAL). */
	if (shared)
		fflush(stdout);
	else if (tmp[0] == '\0' && ftruncate(fileno(f), 0) != 0 && errno != EINVAL) {
		fprintf(stderr, "pinpipe-bench: %s: cannot truncate: %s\n", path, strerror(errno));
		fclose(f);
		return 1;
	}
	table_put(t, f, json);
	err = ferror(f) ? EIO : 0;
	if (tmp[0] != '\0' && err == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0))
		err = errno;
	/* renamed before its close: until then its lock says a writer lives */
	if (tmp[0] != '\0' && err == 0 && rename(tmp, target) != 0)
		return table_write_over(t, f, path, json, tmp, target, errno);
	if (fclose(f) != 0 && err == 0)
		err = errno;
	if (tmp[0] != '\0' && err != 0)
		unlink(tmp);
	if (err != 0) {
		fprintf(stderr, "pinpipe-bench: %s: write failed: %s\n", path, strerror(err));
		return 1;
	}
	return 0;
}

/*
 * The device as the rows name it: the device's name, or the option as given
 * where it names the same device with settings ("sim:bw=25GB/s,call_us=20").
 */
static const char *device_label(const struct options *o, struct pp_device *dev)
{
	const char *name = pp_device_get_props(dev)->name;
	size_t n = strlen(name);

	return strncmp(o->device, name, n) == 0 && o->device[n] == ':' ? o->device : name;
}

static int fail(const char *what, int ret)
{
	fprintf(stderr, "pinpipe-bench: %s: %s (%s)\n", what, pp_strerror(ret), pp_last_error());
	return 1;
}

/* ------------------------------------------------------------------ bandwidth */

/*
 * Copies 'size' bytes 'reps' times in 'kind' and writes GB/s, the
 * host-blocked share and the threads that waited for a core (NAN: unknown).
 */
static int measure_copies(struct pp_stream *st, void *dev_buf, void *host_buf, size_t size,
			  uint64_t reps, enum pp_copy_kind kind, double *gbps_p, double *blocked_p,
			  double *wait_p)
{
	static struct pp_hostload h0, h1;
	double t0, t1, blocked = 0;
	int ret;

	pp_hostload_read(&h0);
	t0 = now_s();
	for (uint64_t i = 0; i < reps; i++) {
		double c0 = now_s();

		if (kind == PP_COPY_H2D)
			ret = pp_memcpy_async(dev_buf, host_buf, size, kind, st);
		else
			ret = pp_memcpy_async(host_buf, dev_buf, size, kind, st);
		blocked += now_s() - c0;
		if (ret < 0)
			return ret;
	}
	if ((ret = pp_stream_synchronize(st)) < 0)
		return ret;
	t1 = now_s();
	pp_hostload_read(&h1);
	*wait_p = pp_hostload_waiting(&h0, &h1);
	*gbps_p = (double)size * (double)reps / (t1 - t0) / 1e9;
	*blocked_p = blocked / (t1 - t0);
	return 0;
}

static int run_bandwidth(const struct options *o, struct pp_device *dev, struct table *t)
{
	static const char *const cols[] = { "device", "direction", "memory", "pinned", "size_bytes",
					    "copies", "gb_per_s", "host_blocked_share", "cpu_wait" };
	static const bool num[] = { false, false, false, false, true, true, true, true, true };
	const char *name = device_label(o, dev);
	struct pp_stream *st;
	int ret;

	table_cols(t, cols, num, 9);
	if ((ret = pp_stream_create(dev, &st)) < 0)
		return fail("stream", ret);
	for (int i = 0; i < o->nsizes && ret == 0; i++) {
		size_t size = o->sizes[i];
		uint64_t reps = o->total / size < 2 ? 2 : o->total / size;
		void *dbuf;

		if ((ret = pp_device_alloc(dev, size, &dbuf)) < 0) {
			ret = fail("device memory", ret);
			break;
		}
		for (int pin = 1; pin >= 0 && ret == 0; pin--) {
			void *hbuf;
			bool pinned;

			if ((ret = pp_host_alloc(dev, size, pin, &hbuf, &pinned)) < 0) {
				ret = fail("host memory", ret);
				break;
			}
			memset(hbuf, 0x5a, size);
			for (int d = 0; d < 2; d++) {
				enum pp_copy_kind kind = d == 0 ? PP_COPY_H2D : PP_COPY_D2H;
				double gbps, blocked, wait;
				char cells[9][CELL];

				/* A warm-up pass, then the measurement. */
				if ((ret = measure_copies(st, dbuf, hbuf, size, reps < 4 ? reps : 4, kind,
							  &gbps, &blocked, &wait)) < 0 ||
				    (ret = measure_copies(st, dbuf, hbuf, size, reps, kind, &gbps,
							  &blocked, &wait)) < 0) {
					ret = fail("copy", ret);
					break;
				}
				snprintf(cells[0], CELL, "%s", name);
				snprintf(cells[1], CELL, "%s", d == 0 ? "h2d" : "d2h");
				snprintf(cells[2], CELL, "%s", pin ? "pinned" : "pageable");
				snprintf(cells[3], CELL, "%s", pinned ? "yes" : "no");
				snprintf(cells[4], CELL, "%zu", size);
				snprintf(cells[5], CELL, "%llu", (unsigned long long)reps);
				snprintf(cells[6], CELL, "%.2f", gbps);
				snprintf(cells[7], CELL, "%.3f", blocked);
				snprintf(cells[8], CELL, isnan(wait) ? "-" : "%.2f", wait);
				table_add(t, cells);
			}
			/* A failed copy's stream is waited for before its memory goes. */
			if (ret != 0)
				pp_stream_synchronize(st);
			pp_host_free(dev, hbuf);
		}
		pp_device_free(dev, dbuf);
	}
	pp_stream_destroy(st);
	return ret;
}

/* ------------------------------------------------------------------ overlap */

struct overlap_result {
	struct pp_transfer_stats st;
	bool pinned;        /* the ring was really pinned */
	double wall_s;      /* first counted next() to the last compute's end */
	uint64_t calls;     /* device calls of the stage (the bench's own kernels not counted) */
	double cpu_wait;    /* this process's threads waiting for a core, on average; NAN: unknown */
	uint32_t ring;      /* the loader's ring slots */
};

/* Enqueues a batch's compute: 'kernels' spins that add up to compute_ns; counts their calls. */
static int compute_step(const struct options *o, struct pp_device *dev, struct pp_stream *compute,
			uint64_t compute_ns, uint64_t *own_calls)
{
	struct pp_device_stats d0, d1;
	int ret = 0;

	pp_device_get_stats(dev, &d0);
	for (uint32_t k = 0; k < o->kernels && ret == 0; k++)
		ret = pp_stream_spin(compute, compute_ns / o->kernels);
	pp_device_get_stats(dev, &d1);
	*own_calls += d1.calls - d0.calls;
	return ret;
}

/* The counters of the stage from s0 to s1, with its hidden share. */
static struct pp_transfer_stats stats_diff(const struct pp_transfer_stats *s1,
					   const struct pp_transfer_stats *s0)
{
	struct pp_transfer_stats d = *s1;

	d.batches -= s0->batches;
	d.bytes -= s0->bytes;
	d.copies_timed -= s0->copies_timed;
	d.copy_ns -= s0->copy_ns;
	d.late_ns -= s0->late_ns;
	d.exposed_ns -= s0->exposed_ns;
	d.host_blocked_ns -= s0->host_blocked_ns;
	d.stage_ns -= s0->stage_ns;
	d.wait_ns -= s0->wait_ns;
	d.slot_wait_ns -= s0->slot_wait_ns;
	d.hidden_share = d.copy_ns > 0 ? 1.0 - (double)d.exposed_ns / (double)d.copy_ns : NAN;
	return d;
}

/*
 * Runs o->batches batches through a loader and a stage with pin_memory
 * 'pin', after a warm-up of a tenth as many (at most 20) that is not counted.
 */
static int overlap_run(const struct options *o, struct pp_device *dev, const struct pp_dataset *ds,
		       const struct pp_source *src, bool pin, uint64_t compute_ns,
		       struct overlap_result *r)
{
	struct pp_loader_config lc = { .dataset = ds, .source = src, .batch_size = o->batch_size, .shuffle = true,
				       .seed = 1, .workers = o->workers, .prefetch = o->prefetch, .device = dev,
				       .pin_memory = pin, .dtype = o->dtype,
				       .mean = { 0.2860f }, .std = { 0.3530f } };
	struct pp_transfer_config tc = { .device = dev, .depth = o->depth,
					 .time_every = o->time_every };
	struct pp_loader_stats ls;
	struct pp_loader *l = NULL;
	struct pp_transfer *t = NULL;
	struct pp_stream *compute = NULL;
	struct pp_device_batch *b;
	struct pp_transfer_stats s0 = { 0 }, s1;
	struct pp_device_stats d0 = { 0 }, d1;
	static struct pp_hostload h0, h1;
	uint32_t warmup = o->batches / 10 < 20 ? o->batches / 10 : 20, done = 0;
	uint64_t epoch = 0, own = 0;
	double t0;
	int ret;

	if ((ret = pp_loader_create(&lc, &l)) < 0) {
		fail("loader", ret);
		goto out;
	}
	tc.loader = l;
	if ((ret = pp_transfer_create(&tc, &t)) < 0 || (ret = pp_stream_create(dev, &compute)) < 0 ||
	    (ret = pp_transfer_begin_epoch(t, epoch)) < 0) {
		fail("transfer stage", ret);
		goto out;
	}
	t0 = now_s();
	while (done < warmup + o->batches) {
		if (done == warmup) {
			/* First use of every slot and page is over: start counting. */
			pp_transfer_get_stats(t, &s0);
			pp_device_get_stats(dev, &d0);
			own = 0;
			pp_hostload_read(&h0);
			t0 = now_s();
		}
		ret = pp_transfer_next(t, compute, &b);
		if (ret == 0) {
			if ((ret = pp_transfer_begin_epoch(t, ++epoch)) < 0)
				break;
			continue;
		}
		if (ret < 0)
			break;
		if ((ret = compute_step(o, dev, compute, compute_ns, &own)) < 0 ||
		    (ret = pp_transfer_release(t, b, compute)) < 0)
			break;
		done++;
	}
	pp_device_get_stats(dev, &d1);
	if (ret >= 0)
		ret = pp_stream_synchronize(compute);
	r->wall_s = now_s() - t0;
	pp_hostload_read(&h1);
	r->cpu_wait = pp_hostload_waiting(&h0, &h1);
	if (ret < 0) {
		fail("overlap run", ret);
		goto out;
	}
	pp_transfer_get_stats(t, &s1);
	r->st = stats_diff(&s1, &s0);
	r->calls = d1.calls - d0.calls - own;
	pp_loader_get_stats(l, &ls);
	r->pinned = ls.pinned;
	r->ring = ls.slots;
out:
	pp_stream_destroy(compute);
	pp_transfer_destroy(t);
	pp_loader_destroy(l);
	return ret < 0 ? 1 : 0;
}

static int run_overlap(const struct options *o, struct pp_device *dev, struct table *t)
{
	static const char *const cols[] = { "device", "memory", "batch_size", "dtype", "batches",
					    "kernels", "compute_us", "step_us", "copy_us",
					    "exposed_us", "hidden_share", "host_blocked_us",
					    "stage_us", "calls_per_batch", "data_wait_us",
					    "samples_per_s", "cpu_wait" };
	static const bool num[] = { false, false, true, false, true, true, true, true, true,
				    true, true, true, true, true, true, true, true };
	struct pp_synthetic_config sc = { .count = 60000, .channels = 1, .height = 28, .width = 28,
					  .num_classes = 10, .seed = 1, .dtype = PP_DTYPE_U8 };
	const char *name = device_label(o, dev);
	struct pp_dataset *ds = NULL;
	struct pp_image_folder *img = NULL;
	const struct pp_source *src = NULL;
	struct pp_sample_info img_info;
	const struct pp_sample_info *info;
	uint64_t compute_ns = 0;
	char train[4096 + 8];
	struct stat st;
	int ret;

	table_cols(t, cols, num, 17);
	/* a folder of JPEGs: its train/ if it has one */
	snprintf(train, sizeof(train), "%s/train", o->data);
	if (stat(train, &st) != 0 || !S_ISDIR(st.st_mode))
		snprintf(train, sizeof(train), "%s", o->data);
	if (strcmp(o->data, "synthetic") != 0 && pp_image_folder_probe(o->data)) {
		struct pp_jpeg_config jc = { .size = o->image_size, .mode = PP_JPEG_TRAIN };
		ret = pp_image_folder_open(train, &jc, &img);
		if (ret == 0) {
			src = pp_image_folder_source(img);
			img_info = (struct pp_sample_info){ .count = pp_image_folder_count(img),
							    .dtype = PP_DTYPE_U8, .ndim = 3,
							    .shape = { 3, o->image_size,
								       o->image_size } };
		}
	} else if (strcmp(o->data, "synthetic") == 0) {
		ret = pp_dataset_create_synthetic(&sc, &ds);
	} else {
		ret = pp_dataset_open_dir(o->data, "train", &ds);
	}
	if (ret < 0)
		return fail(o->data, ret);
	if (o->compute_us >= 0) {
		compute_ns = (uint64_t)o->compute_us * 1000u;
	} else {
		/*
		 * As long as a copy: the mean pinned copy of a first run without
		 * compute, then of a run with that compute (copies run slower on a
		 * busy host than on an idle one).
		 */
		struct options co = *o;

		co.batches = o->batches < 100 ? o->batches : 100;
		co.time_every = 1;
		for (int i = 0; i < 2; i++) {
			struct overlap_result r = { 0 };

			if (overlap_run(&co, dev, ds, src, true, compute_ns, &r) != 0) {
				pp_dataset_destroy(ds);
				pp_image_folder_close(img);
				return 1;
			}
			compute_ns = r.st.copies_timed ? r.st.copy_ns / r.st.copies_timed : 0;
		}
	}
	info = ds != NULL ? pp_dataset_info(ds) : &img_info;
	printf("# data: %s, %llu samples of %u", strcmp(o->data, "synthetic") == 0 ? "synthetic" : o->data,
	       (unsigned long long)info->count, info->ndim ? info->shape[0] : 1);
	for (uint32_t k = 1; k < info->ndim; k++)
		printf("x%u", info->shape[k]);
	printf(" %s as %s; batches of %u, %u loader workers, %u copied ahead\n",
	       pp_dtype_name(info->dtype), pp_dtype_name(o->dtype), o->batch_size, o->workers,
	       o->depth);
	printf("# compute: %.1f us a batch (%s) as %u kernel%s; one batch in %u timed\n",
	       (double)compute_ns / 1e3, o->compute_us >= 0 ? "--compute-us" : "as long as a pinned copy",
	       o->kernels, o->kernels == 1 ? "" : "s", o->time_every ? o->time_every : 16);
	for (int pin = 1; pin >= 0; pin--) {
		struct overlap_result r = { 0 };
		uint64_t n;
		char c[17][CELL];

		if (overlap_run(o, dev, ds, src, pin, compute_ns, &r) != 0) {
			pp_dataset_destroy(ds);
			pp_image_folder_close(img);
			return 1;
		}
		if (pin)
			printf("# the loader's ring: %u batch%s (%s)\n", r.ring, r.ring == 1 ? "" : "es",
			       o->prefetch ? "--prefetch" : "its default");
		n = r.st.copies_timed ? r.st.copies_timed : 1;
		snprintf(c[0], CELL, "%s", name);
		snprintf(c[1], CELL, "%s", !pin ? "pageable" : r.pinned ? "pinned"
					      : "pageable (pinning refused)");
		snprintf(c[2], CELL, "%u", o->batch_size);
		snprintf(c[3], CELL, "%s", pp_dtype_name(o->dtype));
		snprintf(c[4], CELL, "%llu", (unsigned long long)r.st.batches);
		snprintf(c[5], CELL, "%u", o->kernels);
		snprintf(c[6], CELL, "%.1f", (double)compute_ns / 1e3);
		snprintf(c[7], CELL, "%.1f", r.wall_s * 1e6 / (double)r.st.batches);
		snprintf(c[8], CELL, "%.1f", (double)r.st.copy_ns / 1e3 / (double)n);
		snprintf(c[9], CELL, "%.1f", (double)r.st.exposed_ns / 1e3 / (double)n);
		if (isnan(r.st.hidden_share))
			snprintf(c[10], CELL, "-");
		else
			snprintf(c[10], CELL, "%.3f", r.st.hidden_share);
		snprintf(c[11], CELL, "%.1f", (double)r.st.host_blocked_ns / 1e3 / (double)r.st.batches);
		snprintf(c[12], CELL, "%.1f", (double)r.st.stage_ns / 1e3 / (double)r.st.batches);
		snprintf(c[13], CELL, "%.2f", (double)r.calls / (double)r.st.batches);
		snprintf(c[14], CELL, "%.1f", (double)r.st.wait_ns / 1e3 / (double)r.st.batches);
		snprintf(c[15], CELL, "%.0f", (double)r.st.batches * o->batch_size / r.wall_s);
		snprintf(c[16], CELL, isnan(r.cpu_wait) ? "-" : "%.2f", r.cpu_wait);
		table_add(t, c);
	}
	pp_dataset_destroy(ds);
	pp_image_folder_close(img);
	return 0;
}

/* The cell of row r in the column named 'col', or NULL. */
static const char *cell(const struct table *t, int r, const char *col)
{
	for (int c = 0; c < t->ncols; c++)
		if (strcmp(t->cols[c], col) == 0)
			return t->cells[r][c];
	return NULL;
}

/*
 * What pinning bought, from the rows: the step's time pinned against
 * pageable (overlap), or each size's GB/s (bandwidth); then, when this
 * process had 0.25 threads or more waiting for a core on average in some
 * row, that the host was too loaded for the figures.  The share of
 * the copy hidden is no comparison: a pageable copy's time, as timed,
 * includes the host's staging of it, which the share counts as hidden.
 */
static void print_verdict(const struct options *o, const struct table *t, enum pp_device_kind kind)
{
	double worst = NAN;

	for (int r = 0; r < t->nrows; r++) {
		double w = atof(cell(t, r, "cpu_wait"));

		if (strcmp(cell(t, r, "cpu_wait"), "-") != 0 && (isnan(worst) || w > worst))
			worst = w;
	}
	if (strcmp(o->command, "overlap") == 0 && t->nrows == 2) {
		double on = atof(cell(t, 0, "step_us")), off = atof(cell(t, 1, "step_us"));

		if (strcmp(cell(t, 0, "memory"), "pinned") != 0)
			printf("# pinning bought nothing: it was refused, both runs are pageable\n");
		else if (on > 0 && off > 0)
			printf("# pinning bought: a step of %.1f us pinned against %.1f us pageable, "
			       "%.1f%% %s (exposed copy %s against %s us a batch)\n", on, off,
			       fabs(off - on) / off * 100, on <= off ? "less" : "MORE",
			       cell(t, 0, "exposed_us"), cell(t, 1, "exposed_us"));
	} else if (strcmp(o->command, "bandwidth") == 0) {
		for (int d = 0; d < 2; d++) {
			const char *dir = d == 0 ? "h2d" : "d2h";
			int n = 0;

			printf("# pinning bought, %s (pinned against pageable GB/s):", dir);
			/* Each size's rows: pinned h2d, d2h, then pageable h2d, d2h. */
			for (int r = 0; r + 2 < t->nrows; r++) {
				double pin, page;

				if (strcmp(cell(t, r, "direction"), dir) != 0 ||
				    strcmp(cell(t, r, "memory"), "pinned") != 0)
					continue;
				pin = atof(cell(t, r, "gb_per_s"));
				page = atof(cell(t, r + 2, "gb_per_s"));
				printf("%s %s B %.2fx", n++ ? "," : "", cell(t, r, "size_bytes"),
				       page > 0 ? pin / page : NAN);
			}
			printf("\n");
		}
	}
	if (!isnan(worst) && worst >= PP_HOSTLOAD_TOO_LOADED)
		printf("# host too loaded for these figures: this process had %.2f threads waiting "
		       "for a core on average (cpu_wait, %d cores)%s\n", worst,
		       pp_cpu_usable_cores(),
		       kind == PP_DEVICE_SIM ? "; sim's copy engine and kernels are host threads, "
		       "so its copy and step times measure the host" : "");
}

static int bench_main(int argc, char **argv)
{
	static struct table t;
	struct options o;
	struct pp_device *dev;
	struct pp_blas_info blas;
	enum pp_device_kind kind;
	FILE *csv, *jsonl;
	bool csv_shared, jsonl_shared;
	int wrote;
	int ret = parse_args(argc, argv, &o);

	if (ret != 0)
		return ret < 0 ? 0 : ret;
	/* One file for both: the second's truncation would take the first's rows. */
	if (o.csv != NULL && o.jsonl != NULL && pp_args_same_file(o.csv, o.jsonl) &&
	    pp_rows_clash(o.csv)) {
		fprintf(stderr, "pinpipe-bench: --csv=%s and --jsonl=%s are one file: each would "
			"write over the other\n", o.csv, o.jsonl);
		return 2;
	}
	/* Before any work, as pinpipe-train's: a path that cannot be written is bad usage. */
	if (table_open("csv", o.csv, &csv, &csv_shared) != 0)
		return 2;
	if (table_open("jsonl", o.jsonl, &jsonl, &jsonl_shared) != 0) {
		if (csv != NULL)
			fclose(csv);
		return 2;
	}
	if ((ret = pp_device_open(o.device, &dev)) < 0) {
		fprintf(stderr, "pinpipe-bench: --device=%s: %s\n", o.device, pp_last_error());
		table_write(&t, csv, csv_shared, o.csv, false);
		table_write(&t, jsonl, jsonl_shared, o.jsonl, true);
		return ret == -EINVAL ? 2 : 1;
	}
	if (pp_device_get_props(dev)->fallback[0] != '\0')
		fprintf(stderr, "pinpipe-bench: --device=%s: %s\n", o.device,
			pp_device_get_props(dev)->fallback);
	/* The library's CPU kernels on generic BLAS kernels: said once, as pinpipe-train does. */
	pp_blas_get_info(&blas);
	if (blas.warning[0] != '\0')
		fprintf(stderr, "pinpipe-bench: warning: %s\n", blas.warning);
	printf("# pinpipe-bench %s on %s (%s)\n", o.command, pp_device_get_props(dev)->name,
	       pp_device_get_props(dev)->description);
	kind = pp_device_get_props(dev)->kind;
	if (strcmp(o.command, "bandwidth") == 0)
		ret = run_bandwidth(&o, dev, &t);
	else
		ret = run_overlap(&o, dev, &t);
	pp_device_close(dev);
	/* A failed benchmark's rows so far are printed and written too (exit 1 still). */
	if (t.nrows > 0)
		table_print(&t);
	if (ret == 0)
		print_verdict(&o, &t, kind);
	wrote = table_write(&t, csv, csv_shared, o.csv, false);
	wrote |= table_write(&t, jsonl, jsonl_shared, o.jsonl, true);
	return ret != 0 ? ret : wrote;
}

/*
 * Output that did not all reach standard output is a failure too, said.
 * A write past RLIMIT_FSIZE (--csv, --jsonl, standard output into a file)
 * fails with EFBIG and is said as any other failed write: SIGXFSZ, which
 * would kill the program with no word, is ignored.
 */
int main(int argc, char **argv)
{
	signal(SIGXFSZ, SIG_IGN);
	return pp_args_end_stdout("pinpipe-bench", bench_main(argc, argv));
}
