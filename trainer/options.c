/*
 * trainer/options.c: pinpipe-train's command line, its defaults and the grid
 * of runs it spans.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/args.h"
#include "common/links.h"
#include "common/textout.h"
#include "pinpipe/pinpipe.h"
#include "trainer/options.h"

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

static const char usage[] =
"usage: pinpipe-train [OPTION]...\n"
"Trains a model on a dataset through pinpipe's loader, transfer stage and nn,\n"
"for every combination of the comma-separated values given, and prints one\n"
"row per run and epoch, then a table of them all.\n"
"\n"
"Grid options (each takes a comma-separated list):\n"
"  -d, --device=LIST       auto, cpu, sim[:OPTIONS], cuda[:N]        [auto]\n"
"                          (a sim's options go on after commas:\n"
"                          sim:bw=25GB/s,call_us=20,cpu is two devices)\n"
"  -b, --batch-size=LIST   samples per batch                         [100]\n"
"  -w, --workers=LIST      loader worker threads (0: in the trainer) [1]\n"
"  -p, --pin-memory=LIST   on, off: pinned ring buffers              [on]\n"
"      --lr=LIST           learning rate                             [0.01]\n"
"  -m, --model=LIST        cnn, mlp, or a spec such as\n"
"                          conv:6:5,relu,maxpool:2,flatten,fc:10 (a spec is one\n"
"                          value; repeat --model for several)        [cnn]\n"
"      --optimizer=LIST    adam, sgd                                 [adam]\n"
"  -t, --threads=LIST      compute threads of a step on the cpu, 1..256, or auto:\n"
"                          as many as pay for the batch (a thread takes 4\n"
"                          samples at least) on the cores the loader leaves\n"
"                          (--stream's workers take a core each; workers on\n"
"                          data in memory, a few percent of one)     [auto]\n"
"\n"
"Run options:\n"
"      --data=DIR          Fashion-MNIST, MNIST or CIFAR-10 directory, or pinpipe\n"
"                          shards, or synthetic[:COUNT]: COUNT (12000) 1x28x28\n"
"                          u8 training images in 10 classes, each its class's\n"
"                          fixed prototype plus noise, made on demand (no file),\n"
"                          and COUNT/6 test images; or JPEGs as\n"
"                          torchvision's ImageFolder: DIR/train/CLASS/*.jpg and\n"
"                          DIR/val/CLASS/*.jpg or DIR/test/CLASS/*.jpg (or\n"
"                          DIR/CLASS/*.jpg, then with --no-eval), also in\n"
"                          folders under a class\n"
"                                                          [$PINPIPE_DATA or\n"
"                          " DEFAULT_DATA "]\n"
"      --image-size=S      JPEGs: decoded to S x S, RandomResizedCrop(S) and a\n"
"                          random flip in training, Resize(S*8/7) and\n"
"                          CenterCrop(S) in evaluation (8..4096)     [224]\n"
"  -e, --epochs=N          epochs per run                            [3]\n"
"      --seed=N            seed of initialisation and shuffling      [1]\n"
"      --momentum=X        SGD momentum                              [0]\n"
"      --weight-decay=X    L2 weight decay                           [0]\n"
"      --nesterov          Nesterov momentum (SGD)\n"
"      --prefetch=N        ring slots of the loader: 2 x workers + 2, twice that\n"
"                          streamed (fewer idle some workers) [4 up to 1 worker]\n"
"      --val-split=N       hold out N training samples for validation [0]\n"
"      --stream[=CHUNKS]   stream the shards of --data (pinpipe-pack makes them)\n"
"                          chunk by chunk as batches need them, instead of\n"
"                          decoding them whole into memory; shuffle the samples\n"
"                          within windows of CHUNKS chunks (1..1048576) [off; 8]\n"
"      --memory-budget=MB  MiB each loader (train, test) may allocate: its ring,\n"
"                          its decoded chunks (--stream), its read buffers; not\n"
"                          the data decoded in memory without --stream.  A run\n"
"                          that needs more fails, saying how much    [no limit]\n"
"      --no-shuffle        keep the dataset's order\n"
"      --drop-last         drop the last incomplete batch\n"
"      --no-eval           do not evaluate on the test set\n"
"      --checkpoint=FILE   save model and optimizer after each epoch\n"
"      --resume            continue from --checkpoint exactly, given the\n"
"                          --data, --seed, --batch-size and --stream of the run\n"
"                          that wrote it (options that reorder the training\n"
"                          data are refused); one at or past --epochs or\n"
"                          --max-steps is complete: nothing is trained\n"
"      --max-steps=N       stop each run after N steps               [no limit]\n"
"      --keep-denormals    compute with subnormal floats as IEEE has them, as\n"
"                          PyTorch does, instead of flushing them to zero (slow\n"
"                          on x86 once training makes them)     [flush, cpu]\n"
"      --graph=MODE        capture each step once as a graph and launch it as\n"
"                          one call: auto (on a GPU), on (sim and cpu too),\n"
"                          off; a capture that fails says why once and the run\n"
"                          goes on without                               [auto]\n"
"\n"
"Several processes (mpirun -np N pinpipe-train ...: one model, N ranks):\n"
"      --comm=NAME         auto (mpi under mpirun, else local), local, mpi, nccl\n"
"                          (gradients on the GPU through NCCL)       [auto]\n"
"      --comm-timeout=S    seconds a collective may take before the job is\n"
"                          ended with the reason of the rank that waited [300]\n"
"      --deterministic     N ranks give the parameters of one process with the\n"
"                          same global batch (N x --batch-size) bit for bit:\n"
"                          fixed micro-batches reduced in a fixed order, the\n"
"                          epoch's last partial global batch dropped (cpu, sim)\n"
"      --micro-batches=M   --deterministic: micro-batches of a global batch, a\n"
"                          multiple of N dividing it   [gcd(global batch, 12)]\n"
"      --bucket-kb=K       gradients averaged in buckets of consecutive layers of\n"
"                          at least K KiB, each started as soon as the backward\n"
"                          pass has made it, while it goes on; 0: a bucket a\n"
"                          layer                                            [0]\n"
"  --batch-size is per rank; rank 0 alone prints and writes the files; each\n"
"  rank reads --data and --resume's checkpoint itself.\n"
"\n"
"Output:\n"
"      --sort=COLUMN       sort the final table's rows by COLUMN, ties in run\n"
"                          order (prefix - to reverse)  [the runs by their mean\n"
"                          epoch_s, fastest first, each in epoch order]\n"
"      --columns=LIST      the final table's columns, comma-separated, or all.\n"
"                          By default those that tell something: the parameters\n"
"                          every row shares on a line above the table, no column\n"
"                          that no row has a figure in (copies on the cpu), and\n"
"                          the least telling left out (run_s first, said under\n"
"                          the table) to fit the terminal's width ($COLUMNS when\n"
"                          stdout is no terminal, else 100); a failed run's\n"
"                          status is cut to it (at least 40 characters): stderr,\n"
"                          --csv and --jsonl have every column, and reasons whole\n"
"      --csv=FILE          write the rows as CSV\n"
"      --jsonl=FILE        write the rows as JSON lines\n"
"                          (these, --checkpoint's directory and --logdir are\n"
"                          checked before any training: one that cannot be\n"
"                          written is a usage error)\n"
"      --logdir=DIR        write TensorBoard event files, one directory per run:\n"
"                          the curves, the first batch as an image grid, and\n"
"                          per epoch histograms of parameters and gradients\n"
"                          (TensorBoard itself: pip install tensorboard)\n"
"      --progress          a progress bar on stderr (default when a terminal)\n"
"      --no-progress       plain lines instead\n"
"  -q, --quiet             only the final table, whatever --progress says\n"
"  -h, --help              this help\n"
"  -V, --version           the version\n"
"\n"
"Ctrl-C (or SIGTERM) stops after the step in progress and writes the rows\n"
"and the checkpoint so far; before the first step it writes neither.\n"
"\n"
"Exit status: 0 if every run succeeded, 1 if a run failed, 2 for bad usage,\n"
"130 after Ctrl-C, 143 after SIGTERM.\n";

enum {
	OPT_LR = 256, OPT_DATA, OPT_MOMENTUM, OPT_WD, OPT_NESTEROV, OPT_PREFETCH, OPT_VAL,
	OPT_NO_SHUFFLE, OPT_DROP_LAST, OPT_NO_EVAL, OPT_CHECKPOINT, OPT_RESUME, OPT_MAX_STEPS,
	OPT_STREAM, OPT_MEMORY_BUDGET, OPT_KEEP_DENORMALS, OPT_GRAPH, OPT_SORT, OPT_CSV, OPT_JSONL, OPT_LOGDIR, OPT_PROGRESS, OPT_NO_PROGRESS,
	OPT_IMAGE_SIZE, OPT_COMM, OPT_COMM_TIMEOUT, OPT_DETERMINISTIC, OPT_MICRO_BATCHES, OPT_BUCKET_KB,
	OPT_COLUMNS,
};

static const struct option long_options[] = {
	{ "device", required_argument, NULL, 'd' },
	{ "batch-size", required_argument, NULL, 'b' },
	{ "workers", required_argument, NULL, 'w' },
	{ "pin-memory", required_argument, NULL, 'p' },
	{ "lr", required_argument, NULL, OPT_LR },
	{ "model", required_argument, NULL, 'm' },
	{ "optimizer", required_argument, NULL, 'o' },
	{ "data", required_argument, NULL, OPT_DATA },
	{ "epochs", required_argument, NULL, 'e' },
	{ "seed", required_argument, NULL, 's' },
	{ "momentum", required_argument, NULL, OPT_MOMENTUM },
	{ "weight-decay", required_argument, NULL, OPT_WD },
	{ "nesterov", no_argument, NULL, OPT_NESTEROV },
	{ "prefetch", required_argument, NULL, OPT_PREFETCH },
	{ "val-split", required_argument, NULL, OPT_VAL },
	{ "no-shuffle", no_argument, NULL, OPT_NO_SHUFFLE },
	{ "drop-last", no_argument, NULL, OPT_DROP_LAST },
	{ "no-eval", no_argument, NULL, OPT_NO_EVAL },
	{ "checkpoint", required_argument, NULL, OPT_CHECKPOINT },
	{ "resume", no_argument, NULL, OPT_RESUME },
	{ "max-steps", required_argument, NULL, OPT_MAX_STEPS },
	{ "stream", optional_argument, NULL, OPT_STREAM },
	{ "memory-budget", required_argument, NULL, OPT_MEMORY_BUDGET },
	{ "image-size", required_argument, NULL, OPT_IMAGE_SIZE },
	{ "threads", required_argument, NULL, 't' },
	{ "keep-denormals", no_argument, NULL, OPT_KEEP_DENORMALS },
	{ "graph", required_argument, NULL, OPT_GRAPH },
	{ "sort", required_argument, NULL, OPT_SORT },
	{ "columns", required_argument, NULL, OPT_COLUMNS },
	{ "csv", required_argument, NULL, OPT_CSV },
	{ "jsonl", required_argument, NULL, OPT_JSONL },
	{ "logdir", required_argument, NULL, OPT_LOGDIR },
	{ "progress", no_argument, NULL, OPT_PROGRESS },
	{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
	{ "comm", required_argument, NULL, OPT_COMM },
	{ "comm-timeout", required_argument, NULL, OPT_COMM_TIMEOUT },
	{ "deterministic", no_argument, NULL, OPT_DETERMINISTIC },
	{ "micro-batches", required_argument, NULL, OPT_MICRO_BATCHES },
	{ "bucket-kb", required_argument, NULL, OPT_BUCKET_KB },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static int bad(const char *option, const char *value, const char *why)
{
	fprintf(stderr, "pinpipe-train: --%s=%s: %s (try --help)\n", option, value, why);
	return 2;
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (s[0] == '\0' || s[0] == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_real(const char *s, double min, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (s[0] == '\0' || errno != 0 || *end != '\0' || !isfinite(v) || v < min)
		return -EINVAL;
	*out = v;
	return 0;
}

static bool parse_bool(const char *s, bool *out)
{
	if (!strcmp(s, "on") || !strcmp(s, "true") || !strcmp(s, "1") || !strcmp(s, "yes"))
		*out = true;
	else if (!strcmp(s, "off") || !strcmp(s, "false") || !strcmp(s, "0") || !strcmp(s, "no"))
		*out = false;
	else
		return false;
	return true;
}

static bool known_device(const char *s)
{
	return !strcmp(s, "auto") || !strcmp(s, "cpu") || !strcmp(s, "sim") ||
	       !strncmp(s, "sim:", 4) || !strcmp(s, "cuda") ||
	       (!strncmp(s, "cuda:", 5) && s[5] != '\0' && strspn(s + 5, "0123456789") == strlen(s + 5));
}

/*
 * Adds the devices of a comma-separated list to the axis.  A sim's options
 * are separated by commas too ("sim:bw=25GB/s,call_us=20"): a value that
 * is no device continues the sim before it.  Each sim is opened once, so
 * that an option it does not take is a usage error now, not a failed run.
 */
static int add_devices(struct tr_axis *axis, const char *name, const char *list)
{
	char buf[4096], *save = NULL;
	size_t first = axis->n;

	if (strlen(list) >= sizeof(buf) || list[0] == '\0')
		return bad(name, list, "empty or too long");
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *prev = axis->n > first ? axis->values[axis->n - 1] : NULL;

		if (!known_device(t) && prev != NULL && strncmp(prev, "sim:", 4) == 0) {
			if (strlen(prev) + 1 + strlen(t) >= sizeof(((struct tr_params *)0)->device))
				return bad(name, list, "a device name too long (63 characters at most)");
			strcat(prev, ",");
			strcat(prev, t);
			continue;
		}
		if (!known_device(t))
			return bad(name, t, "not a device (auto, cpu, sim, sim:OPTIONS, cuda, cuda:N)");
		if (axis->n == TR_MAX_VALUES)
			return bad(name, list, "too many values (at most 16)");
		if (strlen(t) >= sizeof(((struct tr_params *)0)->device))
			return bad(name, t, "too long (63 characters at most)");
		snprintf(axis->values[axis->n++], sizeof(axis->values[0]), "%s", t);
	}
	for (size_t k = first; k < axis->n; k++) {
		struct pp_device *dev;

		if (strncmp(axis->values[k], "sim:", 4) != 0)
			continue;
		if (pp_device_open(axis->values[k], &dev) < 0)
			return bad(name, axis->values[k], pp_last_error());
		pp_device_close(dev);
	}
	return 0;
}

/* Checks one value of a grid axis; returns NULL if it is good, else why not. */
static const char *check_value(int opt, const char *v)
{
	uint64_t u;
	double d;
	bool b;

	switch (opt) {
	case 'b':
		return parse_u64(v, 1, 1u << 24, &u) == 0 ? NULL : "not a batch size (1..16777216)";
	case 'w':
		return parse_u64(v, 0, 64, &u) == 0 ? NULL : "not a worker count (0..64)";
	case 'p':
		return parse_bool(v, &b) ? NULL : "not on or off";
	case OPT_LR:
		/* The model keeps it as a float: finite, and not rounded to 0, as one. */
		return parse_real(v, 0, &d) == 0 && d > 0 && isfinite((float)d) && (float)d > 0
		       ? NULL : "not a positive learning rate a float holds";
	case 'o':
		return !strcmp(v, "adam") || !strcmp(v, "sgd") ? NULL : "not an optimizer (adam, sgd)";
	case 't':
		return !strcmp(v, "auto") || parse_u64(v, 1, 256, &u) == 0 ? NULL
			: "not a thread count (1..256, auto)";
	}
	return NULL;
}

static bool is_preset(const char *s)
{
	return !strcmp(s, "cnn") || !strcmp(s, "mlp");
}

/* Adds the values of a comma-separated list to an axis (a model spec is one value). */
static int add_values(struct tr_axis *axis, int opt, const char *name, const char *list)
{
	char buf[4096];
	char *save = NULL;
	bool split = true;

	if (strlen(list) >= sizeof(buf) || list[0] == '\0')
		return bad(name, list, "empty or too long");
	snprintf(buf, sizeof(buf), "%s", list);
	if (opt == 'm') {
		for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
			split = split && is_preset(t);
		snprintf(buf, sizeof(buf), "%s", list);
	}
	if (!split) {
		if (axis->n == TR_MAX_VALUES)
			return bad(name, list, "too many values");
		if (strlen(list) >= sizeof(axis->values[0]))
			return bad(name, list, "spec too long");
		snprintf(axis->values[axis->n++], sizeof(axis->values[0]), "%s", list);
		return 0;
	}
	/* strtok_r() would pass over an empty value ("100,,200", ","): a typo, said. */
	if (list[0] == ',' || list[strlen(list) - 1] == ',' || strstr(list, ",,") != NULL)
		return bad(name, list, "an empty value in the list");
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		const char *why = check_value(opt, t);

		if (why != NULL)
			return bad(name, t, why);
		if (axis->n == TR_MAX_VALUES)
			return bad(name, list, "too many values (at most 16)");
		if (strlen(t) >= sizeof(axis->values[0]))
			return bad(name, t, "too long");
		snprintf(axis->values[axis->n++], sizeof(axis->values[0]), "%s", t);
	}
	return 0;
}

static void set_default(struct tr_axis *axis, const char *value)
{
	if (axis->n == 0)
		snprintf(axis->values[axis->n++], sizeof(axis->values[0]), "%s", value);
}

static int copy_path(char *dst, size_t len, const char *name, const char *value)
{
	if (value[0] == '\0' || strlen(value) >= len)
		return bad(name, value, "empty or too long");
	snprintf(dst, len, "%s", value);
	return 0;
}

/* Checks that 'dir' is a folder this process may make files in; else says why on stderr. */
static int check_folder(const char *name, const char *path, const char *dir)
{
	char why[4200];

	if (pp_args_check_folder(dir, why, sizeof(why)) == 0)
		return 0;
	fprintf(stderr, "pinpipe-train: --%s=%s: %s\n", name, path, why);
	return 2;
}

/*
 * 0 when a write to the regular file at 'path' can be made, else the
 * errno: an empty write, which changes nothing, through a descriptor
 * opened to append.  Some files that access() says root may write refuse
 * every write (those of /proc: EIO), and would fail the run only after
 * its training.
 */
static int probe_write(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY), err = 0;

	if (fd < 0)
		return errno;
	if (write(fd, "", 0) < 0)
		err = errno;
	close(fd);
	return err;
}

/*
 * Checks, before anything is trained, that an output can be written:
 * a file (--csv, --jsonl), one that is written beside itself and renamed
 * (--checkpoint: its folder must take the temporary file), or a folder
 * made with its parents (--logdir).  Returns 0, or 2 with the path and
 * the reason on stderr.
 */
static int check_output(const char *name, const char *path, bool folder, bool beside)
{
	struct stat st;
	char dir[4096], real[PATH_MAX];
	int err;

	if (stat(path, &st) == 0) {
		if (folder != S_ISDIR(st.st_mode)) {
			fprintf(stderr, "pinpipe-train: --%s=%s: %s\n", name, path,
				folder ? "not a directory" : "a directory, not a file");
			return 2;
		}
		if (folder)
			return check_folder(name, path, path);
		if (!beside && access(path, W_OK) != 0) {
			fprintf(stderr, "pinpipe-train: --%s=%s: cannot write: %s\n", name, path,
				strerror(errno));
			return 2;
		}
		if (!beside && S_ISREG(st.st_mode) && (err = probe_write(path)) != 0) {
			fprintf(stderr, "pinpipe-train: --%s=%s: cannot write: %s\n", name, path,
				strerror(err));
			return 2;
		}
		if (!beside)
			return 0;
		/* Renamed over, a device (/dev/null) would be replaced by a file. */
		if (!S_ISREG(st.st_mode)) {
			fprintf(stderr, "pinpipe-train: --%s=%s: not a regular file: it is written "
				"beside it and renamed over it, which would replace it\n", name, path);
			return 2;
		}
	} else if (errno != ENOENT && errno != ENOTDIR) {
		fprintf(stderr, "pinpipe-train: --%s=%s: %s\n", name, path, strerror(errno));
		return 2;
	}
	/* Through links, the file they lead to is replaced (made, where it is not
	 * there yet): beside that one. */
	if (beside && pp_links_follow(path, real, sizeof(real)))
		pp_args_folder_of(real, dir, sizeof(dir));
	else
		pp_args_folder_of(path, dir, sizeof(dir));
	/* A folder of TensorBoard runs is made with its parents: the nearest one there decides. */
	while (folder && stat(dir, &st) != 0 && errno == ENOENT && strcmp(dir, ".") != 0 &&
	       strcmp(dir, "/") != 0) {
		char up[4096];

		pp_args_folder_of(dir, up, sizeof(up));
		snprintf(dir, sizeof(dir), "%s", up);
	}
	return check_folder(name, path, dir);
}

/*
 * Refuses (2) two outputs that are one file, where each would undo the
 * other: the CSV sorted and renamed over a checkpoint, rows written over
 * rows (a terminal, a pipe or standard output's own file takes --csv and
 * --jsonl in turn); and a checkpoint on standard output's own file, which
 * the rename would take away from it.
 */
static int check_distinct(const struct tr_options *opt)
{
	const struct {
		const char *name, *path;
	} out[] = { { "csv", opt->csv }, { "jsonl", opt->jsonl }, { "checkpoint", opt->checkpoint } };

	for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++)
		for (size_t j = i + 1; j < sizeof(out) / sizeof(out[0]); j++)
			if (out[i].path[0] != '\0' && out[j].path[0] != '\0' &&
			    pp_args_same_file(out[i].path, out[j].path) &&
			    (j == 2 || pp_rows_clash(out[i].path))) {
				fprintf(stderr, "pinpipe-train: --%s=%s and --%s=%s are one file: each "
					"would write over the other\n", out[i].name, out[i].path,
					out[j].name, out[j].path);
				return 2;
			}
	/* Past check_output(), a checkpoint that does not clash is standard output's file. */
	if (opt->checkpoint[0] != '\0' && !pp_rows_clash(opt->checkpoint)) {
		fprintf(stderr, "pinpipe-train: --checkpoint=%s: the file standard output or error "
			"writes: renamed into place, the checkpoint would take it away from them\n",
			opt->checkpoint);
		return 2;
	}
	return 0;
}

int tr_options_parse(int argc, char **argv, struct tr_options *opt)
{
	const char *env = getenv("PINPIPE_DATA");
	const char *abbrev, *whole;
	uint64_t u;
	int c, ret = 0;

	memset(opt, 0, sizeof(*opt));
	snprintf(opt->data, sizeof(opt->data), "%s", DEFAULT_DATA);
	if (env != NULL && env[0] != '\0') {
		snprintf(opt->data, sizeof(opt->data), "%s", env);
		opt->data_from_env = true;
	}
	opt->epochs = 3;
	opt->seed = 1;
	opt->prefetch = 0; /* tr_loader_config(): 4, or the loader's default past one worker */
	opt->shuffle = true;
	opt->eval = true;
	opt->progress = isatty(2) ? 1 : 0;
	snprintf(opt->comm, sizeof(opt->comm), "auto");
	opt->comm_timeout = PP_COMM_DEFAULT_TIMEOUT_S;
	opt->bucket_kb = TR_BUCKET_KB;

	optind = 1;
	opterr = 0;
	while (ret == 0 && (c = pp_getopt_whole(argc, argv, ":d:b:w:p:m:o:e:s:t:qhV", long_options,
						&abbrev, &whole)) != -1) {
		const char *name = NULL;

		for (const struct option *o = long_options; o->name; o++)
			if (o->val == c)
				name = o->name;
		switch (c) {
		case 'd': ret = add_devices(&opt->device, name, optarg); break;
		case 'b': ret = add_values(&opt->batch_size, c, name, optarg); break;
		case 'w': ret = add_values(&opt->workers, c, name, optarg); break;
		case 'p': ret = add_values(&opt->pin_memory, c, name, optarg); break;
		case OPT_LR: ret = add_values(&opt->lr, c, name, optarg); break;
		case 'm': ret = add_values(&opt->model, c, name, optarg); break;
		case 'o': ret = add_values(&opt->optimizer, c, name, optarg); break;
		case OPT_DATA:
			ret = copy_path(opt->data, sizeof(opt->data), name, optarg);
			opt->data_from_env = false;
			if (ret == 0 && strncmp(optarg, "synthetic", 9) == 0 && optarg[9] != '\0' &&
			    (optarg[9] != ':' || parse_u64(optarg + 10, 6, 1ull << 32, &u) < 0))
				ret = bad(name, optarg, "not synthetic:COUNT (COUNT from 6 to 2^32)");
			break;
		case 'e':
			if (parse_u64(optarg, 1, TR_MAX_EPOCHS, &u) < 0)
				ret = bad(name, optarg, "not an epoch count (1..100000)");
			opt->epochs = (unsigned)u;
			break;
		case 's':
			if (parse_u64(optarg, 0, UINT64_MAX, &opt->seed) < 0)
				ret = bad(name, optarg, "not a seed (an unsigned integer)");
			break;
		case OPT_MOMENTUM:
			if (parse_real(optarg, 0, &opt->momentum) < 0 || opt->momentum >= 1)
				ret = bad(name, optarg, "not a momentum in [0, 1)");
			break;
		case OPT_WD:
			if (parse_real(optarg, 0, &opt->weight_decay) < 0)
				ret = bad(name, optarg, "not a weight decay >= 0");
			break;
		case OPT_NESTEROV: opt->nesterov = true; break;
		case OPT_PREFETCH:
			if (parse_u64(optarg, 1, 1024, &u) < 0)
				ret = bad(name, optarg, "not a slot count (1..1024)");
			opt->prefetch = (unsigned)u;
			break;
		case OPT_VAL:
			if (parse_u64(optarg, 0, UINT64_MAX, &opt->val_split) < 0)
				ret = bad(name, optarg, "not a sample count");
			break;
		case OPT_NO_SHUFFLE: opt->shuffle = false; break;
		case OPT_DROP_LAST: opt->drop_last = true; break;
		case OPT_NO_EVAL: opt->eval = false; break;
		case OPT_KEEP_DENORMALS: opt->keep_denormals = true; break;
		case OPT_GRAPH:
			if (strcmp(optarg, "auto") == 0)
				opt->graph = PP_MODEL_GRAPH_AUTO;
			else if (strcmp(optarg, "on") == 0)
				opt->graph = PP_MODEL_GRAPH_ON;
			else if (strcmp(optarg, "off") == 0)
				opt->graph = PP_MODEL_GRAPH_OFF;
			else
				ret = bad(name, optarg, "not a graph mode (auto, on or off)");
			break;
		case OPT_CHECKPOINT:
			ret = copy_path(opt->checkpoint, sizeof(opt->checkpoint), name, optarg);
			break;
		case OPT_RESUME: opt->resume = true; break;
		case OPT_MAX_STEPS:
			if (parse_u64(optarg, 1, UINT64_MAX, &opt->max_steps) < 0)
				ret = bad(name, optarg, "not a step count >= 1");
			break;
		case OPT_STREAM:
			opt->stream = true;
			if (optarg != NULL && parse_u64(optarg, 1, 1u << 20, &u) < 0)
				ret = bad(name, optarg, "not a window of chunks (1..1048576)");
			opt->window_chunks = optarg != NULL ? (uint32_t)u : 0;
			break;
		case OPT_IMAGE_SIZE:
			if (parse_u64(optarg, 8, 4096, &u) < 0)
				ret = bad(name, optarg, "not an image side of 8..4096 pixels");
			opt->image_size = (uint32_t)u;
			break;
		case OPT_MEMORY_BUDGET:
			if (parse_u64(optarg, 1, SIZE_MAX >> 20, &u) < 0)
				ret = bad(name, optarg, "not a size in MiB (1 or more)");
			opt->memory_budget = (size_t)u << 20;
			break;
		case 't': ret = add_values(&opt->threads, c, name, optarg); break;
		case OPT_SORT:
			if (!tr_results_valid_column(optarg) || strlen(optarg) >= sizeof(opt->sort)) {
				char why[600];

				snprintf(why, sizeof(why), "not a column (%s)", tr_results_column_names());
				ret = bad(name, optarg, why);
				break;
			}
			snprintf(opt->sort, sizeof(opt->sort), "%s", optarg);
			break;
		case OPT_COLUMNS: {
			char col[64], why[700];

			if (optarg[0] == '\0' || strlen(optarg) >= sizeof(opt->columns)) {
				ret = bad(name, optarg, "empty or too long");
			} else if (!tr_results_valid_columns(optarg, col, sizeof(col))) {
				snprintf(why, sizeof(why), "'%s' is not a column, or named twice (all, "
					 "or a list of: %s)", col, tr_results_column_names());
				ret = bad(name, optarg, why);
			} else {
				snprintf(opt->columns, sizeof(opt->columns), "%s", optarg);
			}
			break;
		}
		case OPT_CSV: ret = copy_path(opt->csv, sizeof(opt->csv), name, optarg); break;
		case OPT_JSONL: ret = copy_path(opt->jsonl, sizeof(opt->jsonl), name, optarg); break;
		case OPT_LOGDIR: ret = copy_path(opt->logdir, sizeof(opt->logdir), name, optarg); break;
		/* -q wins, before or after these: it means only the final table. */
		case OPT_PROGRESS: opt->progress = opt->progress < 0 ? -1 : 1; break;
		case OPT_NO_PROGRESS: opt->progress = opt->progress < 0 ? -1 : 0; break;
		case OPT_COMM:
			if (strcmp(optarg, "auto") && strcmp(optarg, "local") && strcmp(optarg, "mpi") &&
			    strcmp(optarg, "nccl"))
				ret = bad(name, optarg, "not a communicator (auto, local, mpi, nccl)");
			else
				snprintf(opt->comm, sizeof(opt->comm), "%s", optarg);
			break;
		case OPT_COMM_TIMEOUT:
			if (parse_real(optarg, 0, &opt->comm_timeout) < 0 || opt->comm_timeout <= 0 ||
			    opt->comm_timeout > 1e6)
				ret = bad(name, optarg, "not a timeout in seconds (> 0, at most 1e6)");
			break;
		case OPT_DETERMINISTIC: opt->deterministic = true; break;
		case OPT_MICRO_BATCHES:
			if (parse_u64(optarg, 1, 1u << 20, &u) < 0)
				ret = bad(name, optarg, "not a micro-batch count (1..1048576)");
			opt->micro_batches = (unsigned)u;
			break;
		case OPT_BUCKET_KB:
			if (parse_u64(optarg, 0, 1u << 30, &u) < 0)
				ret = bad(name, optarg, "not a bucket size in KiB (0..1073741824)");
			opt->bucket_kb = (unsigned)u;
			break;
		case 'q': opt->progress = -1; break;
		case 'h': fputs(usage, stdout); return 1;
		case 'V': printf("pinpipe-train %s\n", pp_version()); return 1;
		case ':':
			fprintf(stderr, "pinpipe-train: %s needs a value (try --help)\n", argv[optind - 1]);
			return 2;
		default:
			if (abbrev != NULL)
				fprintf(stderr, "pinpipe-train: '%s': options are taken by their whole "
					"name: --%s (try --help)\n", abbrev, whole);
			else
				fprintf(stderr, "pinpipe-train: unknown option '%s' (try --help)\n",
					pp_getopt_unknown(argv, long_options));
			return 2;
		}
	}
	if (ret != 0)
		return ret;
	if (optind < argc) {
		fprintf(stderr, "pinpipe-train: unexpected argument '%s' (try --help)\n", argv[optind]);
		return 2;
	}
	/* The data as PINPIPE_DATA gives it, where no --data replaced it: whole, or refused. */
	if (opt->data_from_env && strlen(env) >= sizeof(opt->data)) {
		fprintf(stderr, "pinpipe-train: PINPIPE_DATA: %zu bytes, too long (under %zu)\n",
			strlen(env), sizeof(opt->data));
		return 2;
	}
	if (opt->resume && opt->checkpoint[0] == '\0') {
		fprintf(stderr, "pinpipe-train: --resume needs --checkpoint=FILE (try --help)\n");
		return 2;
	}
	if (opt->stream && strncmp(opt->data, "synthetic", 9) == 0) {
		fprintf(stderr, "pinpipe-train: --stream reads pinpipe shards, and --data=%s has none "
			"(pinpipe-pack makes them from a dataset directory)\n", opt->data);
		return 2;
	}
	if (opt->stream && opt->val_split > 0) {
		fprintf(stderr, "pinpipe-train: --stream and --val-split exclude each other: the "
			"validation split is drawn from the samples in memory\n");
		return 2;
	}
	if (opt->deterministic && opt->stream) {
		fprintf(stderr, "pinpipe-train: --deterministic and --stream exclude each other: the "
			"ranks' micro-batches are positions of the order of the data in memory\n");
		return 2;
	}
	if (opt->micro_batches && !opt->deterministic) {
		fprintf(stderr, "pinpipe-train: --micro-batches needs --deterministic (try --help)\n");
		return 2;
	}
	set_default(&opt->device, "auto");
	set_default(&opt->batch_size, "100");
	set_default(&opt->workers, "1");
	set_default(&opt->pin_memory, "on");
	set_default(&opt->lr, "0.01");
	set_default(&opt->model, "cnn");
	set_default(&opt->optimizer, "adam");
	set_default(&opt->threads, "auto");
	if (opt->checkpoint[0] != '\0' && tr_options_runs(opt) > 1) {
		fprintf(stderr, "pinpipe-train: --checkpoint takes a single run, not a grid of %zu\n",
			tr_options_runs(opt));
		return 2;
	}
	/* Outputs that cannot be written are refused now, not after hours of training. */
	if (opt->csv[0] != '\0' && (ret = check_output("csv", opt->csv, false, false)) != 0)
		return ret;
	if (opt->jsonl[0] != '\0' && (ret = check_output("jsonl", opt->jsonl, false, false)) != 0)
		return ret;
	if (opt->checkpoint[0] != '\0' &&
	    (ret = check_output("checkpoint", opt->checkpoint, false, true)) != 0)
		return ret;
	if (opt->logdir[0] != '\0' && (ret = check_output("logdir", opt->logdir, true, false)) != 0)
		return ret;
	return check_distinct(opt);
}

size_t tr_options_runs(const struct tr_options *opt)
{
	return opt->device.n * opt->batch_size.n * opt->workers.n * opt->pin_memory.n *
	       opt->lr.n * opt->model.n * opt->optimizer.n * opt->threads.n;
}

int tr_options_run_params(const struct tr_options *opt, size_t i, struct tr_params *p)
{
	const struct tr_axis *axes[] = { &opt->device, &opt->batch_size, &opt->workers,
					 &opt->pin_memory, &opt->lr, &opt->model, &opt->optimizer,
					 &opt->threads };
	size_t pick[8];
	uint64_t u = 0;

	if (i >= tr_options_runs(opt))
		return -ERANGE;
	for (size_t a = 8; a-- > 0;) {
		pick[a] = i % axes[a]->n;
		i /= axes[a]->n;
	}
	memset(p, 0, sizeof(*p));
	snprintf(p->device, sizeof(p->device), "%s", opt->device.values[pick[0]]);
	parse_u64(opt->batch_size.values[pick[1]], 1, UINT64_MAX, &u);
	p->batch_size = (unsigned)u;
	parse_u64(opt->workers.values[pick[2]], 0, UINT64_MAX, &u);
	p->workers = (unsigned)u;
	parse_bool(opt->pin_memory.values[pick[3]], &p->pin_memory);
	parse_real(opt->lr.values[pick[4]], 0, &p->lr);
	snprintf(p->model, sizeof(p->model), "%s", opt->model.values[pick[5]]);
	snprintf(p->optimizer, sizeof(p->optimizer), "%s", opt->optimizer.values[pick[6]]);
	u = 0;
	if (strcmp(opt->threads.values[pick[7]], "auto") != 0)
		parse_u64(opt->threads.values[pick[7]], 1, 256, &u);
	p->threads = (unsigned)u;
	return 0;
}

unsigned tr_options_threads(const struct tr_options *opt, const struct tr_params *p, unsigned cores)
{
	const unsigned busy = opt->stream ? p->workers : 0;

	if (p->threads)
		return p->threads;
	return pp_model_cpu_threads(p->batch_size, cores > busy ? cores - busy : 1);
}
