/*
 * trainer/train.c: pinpipe-train, the reference trainer.  It reads top-down:
 * parse the flags, open the data, then for every run of the grid build a
 * device, loaders, transfer stages and a model, train and evaluate epoch
 * by epoch, and report; finally print the table and write the files.  It
 * uses the public API only, as any C trainer would.
 */
#include "config.h"

#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pinpipe/pinpipe.h"
#include "trainer/dist.h"
#include "trainer/grid.h"
#include "trainer/options.h"
#include "trainer/results.h"

/* Fashion-MNIST's training-set statistics, as in the seeds' Normalize(). */
#define NORM_MEAN 0.2860f
#define NORM_STD 0.3530f

/* Steps between two points of the per-step training loss in TensorBoard. */
#define TB_STEP_EVERY 10

/* Set by Ctrl-C, read by the training loop: atomic, as the two may run on different threads. */
static atomic_bool interrupted;

/* The fallback of "auto" to the cpu with a GPU driver there was said on stderr. */
static bool auto_fallback_said;

/* Set once the ranks agreed to stop (trainer/dist.h): a stop that every rank makes at the same step. */
static atomic_bool stop_agreed;

static void on_sigint(int sig)
{
	(void)sig;
	atomic_store(&interrupted, true);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One split of the data: decoded in memory, or the shard files a loader streams. */
struct split {
	struct pp_dataset *ds;     /* in memory, or NULL */
	char **shards;             /* --stream: the split's shard files (pp_shard_find()),
				      or NULL */
	size_t nshards;            /* their count */
	struct pp_image_folder *images; /* a folder of JPEGs, or NULL */
	struct pp_jpeg_decoder *jpeg;   /* --stream: the decoder of shards of JPEGs, or NULL */
};

/* The data of every run of the grid, opened once. */
struct data {
	struct split train;        /* what the model learns from */
	struct split val;          /* held out of the training split (--val-split), or none */
	struct split test;         /* the test split, or none without evaluation */
};

static bool split_present(const struct split *s)
{
	return s->ds != NULL || s->nshards > 0 || s->images != NULL;
}

static void split_free(struct split *s)
{
	pp_dataset_destroy(s->ds);
	pp_shard_paths_free(s->shards);
	pp_image_folder_close(s->images);
	pp_jpeg_decoder_destroy(s->jpeg);
	memset(s, 0, sizeof(*s));
}

static void data_free(struct data *d)
{
	split_free(&d->train);
	split_free(&d->val);
	split_free(&d->test);
}

/*
 * Checks that samples described by 'b' (a shard of the split 'what', or
 * that split) are shaped as those of 'a', which the model is made for.
 */
static int check_samples(const char *where, const char *what, const struct pp_sample_info *a,
			 const struct pp_sample_info *b)
{
	if (a->dtype == b->dtype && a->ndim == b->ndim && a->sample_bytes == b->sample_bytes &&
	    memcmp(a->shape, b->shape, sizeof(a->shape)) == 0 && a->label_kind == b->label_kind &&
	    a->num_classes == b->num_classes)
		return 0;
	fprintf(stderr, "pinpipe-train: %s: the %s samples (%s, %u dimensions, %zu bytes, %u classes) "
		"are not shaped as the train split's (%s, %u, %zu, %u)\n", where, what,
		pp_dtype_name(b->dtype), b->ndim, b->sample_bytes, b->num_classes,
		pp_dtype_name(a->dtype), a->ndim, a->sample_bytes, a->num_classes);
	return -EINVAL;
}

/*
 * --stream: finds a split's shard files in DIR as pp_dataset_open_dir()
 * does: the files *SPLIT*.pps, sorted by name, those named -of-N.pps one
 * whole set of N.  Their headers and indexes are validated now, so that a
 * bad file stops pinpipe-train before any run; their chunks are read by
 * the loader as it streams them.  The shape of the shards' samples is
 * written to *info.
 */
static int find_shards(const char *dir, const char *split, struct split *sp,
		       struct pp_sample_info *info, const struct tr_options *opt)
{
	struct stat st;
	int ret;

	if (stat(dir, &st) != 0 && errno != ENOENT && errno != ENOTDIR) {
		fprintf(stderr, "pinpipe-train: --stream: %s: cannot read the directory: %s\n", dir,
			strerror(errno));
		return -errno;
	}
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "pinpipe-train: --stream: %s: no such directory\n", dir);
		return -ENOENT;
	}
	ret = pp_shard_find(dir, split, &sp->shards, &sp->nshards);
	if (ret == -ENOENT) {
		fprintf(stderr, "pinpipe-train: --stream: %s has no %s shards (*%s*.pps), which "
			"--stream reads: make them with pinpipe-pack (pinpipe-pack -o OUT/NAME "
			"DATASET-DIR, then --data=OUT)%s\n", dir, split, split,
			strcmp(split, "test") == 0 ? ", or train without evaluation (--no-eval)" : "");
		return ret;
	}
	if (ret < 0) {
		fprintf(stderr, "pinpipe-train: --stream: %s\n", pp_last_error());
		return ret;
	}
	for (size_t k = 0; k < sp->nshards; k++) {
		struct pp_shard *sh;

		ret = pp_shard_open(sp->shards[k], &sh);
		if (ret < 0) {
			fprintf(stderr, "pinpipe-train: %s\n", pp_last_error());
			goto err_free;
		}
		if (k == 0)
			*info = *pp_shard_info(sh);
		ret = check_samples(sp->shards[k], "shard's", info, pp_shard_info(sh));
		/* JPEGs: decoded as the shards' layout says, augmented in training */
		if (ret == 0 && k == 0 && pp_shard_decoder(sh) != NULL &&
		    strcmp(pp_shard_decoder(sh), "jpeg") == 0) {
			const struct pp_field *f = &pp_shard_layout(sh)->fields[0];
			struct pp_jpeg_config jc = { .size = f->shape[1], .channels = f->shape[0],
						     .mode = strcmp(split, "train") == 0 ? PP_JPEG_TRAIN
											: PP_JPEG_EVAL };
			if (opt->image_size != 0 && opt->image_size != f->shape[1]) {
				fprintf(stderr, "pinpipe-train: %s: JPEGs packed for --image-size=%u, "
					"not %u (pinpipe-pack --image-size)\n", sp->shards[k],
					f->shape[1], opt->image_size);
				ret = -EINVAL;
			} else if ((ret = pp_jpeg_decoder_create(&jc, &sp->jpeg)) < 0) {
				fprintf(stderr, "pinpipe-train: %s: %s\n", sp->shards[k], pp_last_error());
			}
		}
		pp_shard_close(sh);
		if (ret < 0)
			goto err_free;
	}
	return 0;

err_free:
	pp_shard_paths_free(sp->shards);
	sp->shards = NULL;
	sp->nshards = 0;
	return ret;
}

/*
 * A synthetic dataset of COUNT training samples and COUNT/6 test samples,
 * drawn from one source so that both show the same classes.
 */
static int open_synthetic(const char *spec, uint64_t seed, struct data *d)
{
	struct pp_synthetic_config sc = {
		.count = 12000, .channels = 1, .height = 28, .width = 28,
		.num_classes = 10, .seed = 7, .dtype = PP_DTYPE_U8,
	};
	struct pp_dataset *all;
	char *end = NULL;
	int ret;

	if (spec[0] == ':') {
		sc.count = strtoull(spec + 1, &end, 10);
		if (*end != '\0' || sc.count < 6 || sc.count > (1ull << 32))
			goto bad_spec;
	} else if (spec[0] != '\0') {
		goto bad_spec;
	}
	sc.count += sc.count / 6;
	ret = pp_dataset_create_synthetic(&sc, &all);
	if (ret < 0)
		return ret;
	ret = pp_dataset_random_split(all, sc.count / 7, seed, &d->train.ds, &d->test.ds);
	pp_dataset_destroy(all);
	if (ret < 0)
		fprintf(stderr, "pinpipe-train: %s\n", pp_last_error());
	return ret;

bad_spec:
	fprintf(stderr, "pinpipe-train: --data=synthetic%s: not synthetic:COUNT (COUNT from 6 to 2^32)\n",
		spec);
	return -EINVAL;
}

/*
 * A folder of JPEGs: DIR/train (or DIR itself) to train on, with
 * RandomResizedCrop and flips; DIR/val (or DIR/test) to evaluate on.
 */
static int open_images(const struct tr_options *opt, struct data *d)
{
	struct pp_jpeg_config jc = { .size = opt->image_size ? opt->image_size : 224,
				     .mode = PP_JPEG_TRAIN };
	char train[4096 + 8], test[4096 + 8];
	struct stat st;
	int ret;

	if (opt->val_split > 0) {
		fprintf(stderr, "pinpipe-train: --val-split is for data in memory, not a folder of "
			"JPEGs: give it a val/ folder\n");
		return -EINVAL;
	}
	snprintf(train, sizeof(train), "%s/train", opt->data);
	if (stat(train, &st) != 0 || !S_ISDIR(st.st_mode))
		snprintf(train, sizeof(train), "%s", opt->data);
	snprintf(test, sizeof(test), "%s/val", opt->data);
	if (stat(test, &st) != 0 || !S_ISDIR(st.st_mode))
		snprintf(test, sizeof(test), "%s/test", opt->data);
	ret = pp_image_folder_open(train, &jc, &d->train.images);
	if (ret == 0 && opt->eval) {
		jc.mode = PP_JPEG_EVAL;
		if (stat(test, &st) != 0 || !S_ISDIR(st.st_mode)) {
			fprintf(stderr, "pinpipe-train: %s: no val/ or test/ folder to evaluate on: "
				"add one, or train without evaluation (--no-eval)\n", opt->data);
			data_free(d);
			return -ENOENT;
		}
		ret = pp_image_folder_open(test, &jc, &d->test.images);
	}
	if (ret == 0 && d->test.images != NULL &&
	    pp_image_folder_classes(d->test.images) != pp_image_folder_classes(d->train.images)) {
		fprintf(stderr, "pinpipe-train: %s: %u classes, but %s has %u\n", test,
			pp_image_folder_classes(d->test.images), train,
			pp_image_folder_classes(d->train.images));
		data_free(d);
		return -EINVAL;
	}
	if (ret < 0) {
		fprintf(stderr, "pinpipe-train: %s\n", pp_last_error());
		data_free(d);
	}
	return ret;
}

/*
 * Opens --data (a directory of a known dataset, or synthetic[:COUNT]) and
 * holds out --val-split; with --stream, finds the shard files instead.
 */
static int data_open(const struct tr_options *opt, struct data *d)
{
	int ret;

	memset(d, 0, sizeof(*d));
	if (opt->stream) {
		struct pp_sample_info train, test;

		/* a packed image folder's evaluation split is its val/ */
		char pattern[4096 + 16];
		glob_t g;
		bool val;
		snprintf(pattern, sizeof(pattern), "%s/*val*.pps", opt->data);
		val = glob(pattern, 0, NULL, &g) == 0;
		globfree(&g);
		ret = find_shards(opt->data, "train", &d->train, &train, opt);
		if (ret == 0 && opt->eval)
			ret = find_shards(opt->data, val ? "val" : "test", &d->test, &test, opt);
		if (ret == 0 && opt->eval)
			ret = check_samples(opt->data, "test split's", &train, &test);
		if (ret == 0 && opt->image_size != 0 && d->train.jpeg == NULL) {
			fprintf(stderr, "pinpipe-train: --image-size is for JPEGs, and the shards of "
				"%s hold none\n", opt->data);
			ret = -EINVAL;
		}
		if (ret < 0)
			data_free(d);
		return ret;
	}
	if (strncmp(opt->data, "synthetic", 9) != 0 && pp_image_folder_probe(opt->data))
		return open_images(opt, d);
	if (opt->image_size != 0) {
		fprintf(stderr, "pinpipe-train: --image-size is for JPEGs, and --data=%s holds none "
			"(DIR/train/CLASS/*.jpg or DIR/CLASS/*.jpg)\n", opt->data);
		return -EINVAL;
	}
	if (strncmp(opt->data, "synthetic", 9) == 0) {
		ret = open_synthetic(opt->data + 9, opt->seed, d);
		if (ret < 0)
			return ret;
	} else {
		ret = pp_dataset_open_dir(opt->data, "train", &d->train.ds);
		if (ret == 0 && opt->eval)
			ret = pp_dataset_open_dir(opt->data, "test", &d->test.ds);
	}
	if (ret == 0 && !opt->eval)
		split_free(&d->test);
	if (ret == 0 && d->test.ds != NULL &&
	    check_samples(opt->data, "test split's", pp_dataset_info(d->train.ds),
			  pp_dataset_info(d->test.ds)) < 0) {
		data_free(d);
		return -EINVAL;
	}
	if (ret == 0 && opt->val_split > 0) {
		struct pp_dataset *full = d->train.ds;

		d->train.ds = NULL;
		ret = pp_dataset_random_split(full, opt->val_split, opt->seed, &d->train.ds, &d->val.ds);
		pp_dataset_destroy(full);
	}
	if (ret < 0) {
		fprintf(stderr, "pinpipe-train: %s\n", pp_last_error());
		if (ret == -ENOENT && strcmp(opt->data, "/usr/share/datasets/fashion-mnist") == 0)
			fprintf(stderr, "pinpipe-train: install it with: sudo apt-get install "
				"dataset-fashion-mnist (or give --data=DIR)\n");
		if (ret == -EPROTONOSUPPORT)
			fprintf(stderr, "pinpipe-train: train on version 2 shards with --stream, "
				"which reads them through the loader\n");
		data_free(d);
	}
	return ret;
}

/* Everything one run holds, released in reverse order by run_close(). */
struct run {
	struct pp_device *dev;
	struct pp_stream *compute;
	struct pp_loader *train_loader, *val_loader, *test_loader;
	struct pp_transfer *train_xfer, *val_xfer, *test_xfer;
	struct pp_model *model;
	struct pp_summary_writer *tb;
	double tb_loss;            /* the model's running loss sum at the last per-step point */
	uint64_t tb_samples;       /* and its sample count */
	bool tb_image_done;        /* the grid of the run's first batch is written */
	bool host_compute_on_copy; /* the CPU kernels read device memory that copies reach
				    * asynchronously (sim): wait for each batch on the host */
	struct tr_dist *dist;      /* the ranks of the job (one, without mpirun) */
};

/*
 * A write of the run's TensorBoard events failed (a full disk): said once,
 * with the file, and the run goes on without its events.
 */
static void tb_failed(struct run *r)
{
	fprintf(stderr, "pinpipe-train: warning: --logdir: %s; the run goes on without its "
		"TensorBoard events\n", pp_last_error());
	pp_summary_writer_destroy(r->tb);
	r->tb = NULL;
}

/* Adds a scalar to the run's events, if it still has them. */
static void tb_scalar(struct run *r, const char *tag, int64_t step, double value)
{
	if (r->tb != NULL && pp_summary_writer_add_scalar(r->tb, tag, step, value) < 0)
		tb_failed(r);
}

static void run_close(struct run *r)
{
	/* First the communicator of the gradients: a reduction a failure left in flight
	 * is aborted with it before the model's memory goes (nccl). */
	if (r->dist != NULL)
		tr_dist_run_end(r->dist);
	if (r->tb != NULL && pp_summary_writer_flush(r->tb) < 0)
		tb_failed(r);
	pp_summary_writer_destroy(r->tb);
	pp_model_destroy(r->model);
	pp_transfer_destroy(r->test_xfer);
	pp_transfer_destroy(r->val_xfer);
	pp_transfer_destroy(r->train_xfer);
	pp_loader_destroy(r->test_loader);
	pp_loader_destroy(r->val_loader);
	pp_loader_destroy(r->train_loader);
	pp_stream_destroy(r->compute);
	pp_device_close(r->dev);
	memset(r, 0, sizeof(*r));
}

/* The loader of a split for this rank (its share of each epoch: rank, world size). */
static void loader_config(const struct tr_options *opt, const struct tr_params *p,
			  const struct split *s, bool train, const struct run *r,
			  struct pp_loader_config *lc_p)
{
	struct pp_loader_config lc;

	memset(&lc, 0, sizeof(lc));
	if (s->ds != NULL) {
		lc.dataset = s->ds;
	} else if (s->images != NULL) {
		lc.source = pp_image_folder_source(s->images);
	} else {
		lc.shard_paths = (const char *const *)s->shards;
		lc.nshards = s->nshards;
		lc.cache = PP_LOADER_CACHE_STREAM;
		lc.window_chunks = opt->window_chunks;
		if (s->jpeg != NULL) {
			lc.decoders = pp_jpeg_decoder_get(s->jpeg);
			lc.ndecoders = 1;
		}
	}
	lc.memory_budget = opt->memory_budget;
	lc.batch_size = p->batch_size;
	lc.shuffle = train && opt->shuffle;
	lc.seed = opt->seed;
	lc.drop_last = train && opt->drop_last;
	lc.workers = p->workers;
	lc.prefetch = opt->prefetch;
	lc.device = r->dev;
	lc.pin_memory = p->pin_memory;
	lc.rank = (uint32_t)r->dist->rank;
	lc.world_size = (uint32_t)r->dist->size;
	/* --deterministic: full global batches of whole positions, as one process's */
	if (train && opt->deterministic)
		lc.drop_last = lc.rank_drop = true;
	*lc_p = lc;
}

static int make_pipeline(const struct tr_options *opt, const struct tr_params *p,
			 const struct split *s, bool train, struct run *r,
			 struct pp_loader **loader_p, struct pp_transfer **xfer_p)
{
	struct pp_loader_config lc;
	struct pp_transfer_config tc;
	int ret;

	loader_config(opt, p, s, train, r, &lc);
	ret = pp_loader_create(&lc, loader_p);
	if (ret < 0)
		return ret;
	memset(&tc, 0, sizeof(tc));
	tc.loader = *loader_p;
	tc.device = r->dev;
	/* Some 64 batches of an epoch timed (a timed batch costs the host more: see transfer.h). */
	if (s->ds != NULL) {
		uint64_t every = pp_dataset_info(s->ds)->count / p->batch_size / 64;

		tc.time_every = every < 1 ? 1 : every > 16 ? 16 : (uint32_t)every;
	}
	return pp_transfer_create(&tc, xfer_p);
}

/*
 * The plan key of the job's training data with several ranks: that of one
 * process's loader with the global batch (ranks x --batch-size), so that a
 * checkpoint resumes at any number of ranks with the same global batch.
 * A loader of rank 0 of 1 is made for it and begins epoch 0.  Where the
 * ranks' plan depends on their number, the key holds it too, so that a
 * resume at another number is refused: --stream (chunks dealt to the ranks,
 * each padded to the largest share), and --drop-last (without
 * --deterministic) when the ranks do not divide the training samples.
 */
static int job_plan_key(const struct tr_options *opt, const struct tr_params *p,
			const struct split *s, const struct run *r, uint64_t *key_p)
{
	struct pp_loader_config lc;
	struct pp_loader_position pos;
	struct pp_loader *l;
	int ret;

	loader_config(opt, p, s, true, r, &lc);
	lc.rank = 0;
	lc.world_size = 1;
	lc.batch_size = p->batch_size * (uint32_t)r->dist->size;
	lc.workers = 0;
	lc.pin_memory = false;
	lc.prefetch = 1;
	ret = pp_loader_create(&lc, &l);
	if (ret < 0)
		return ret;
	ret = pp_loader_begin_epoch(l, 0);
	if (ret == 0)
		ret = pp_loader_get_position(l, &pos);
	if (ret == 0 && (s->ds == NULL || (opt->drop_last && !opt->deterministic &&
					   pp_loader_info(l)->count % (uint64_t)r->dist->size != 0)))
		pos.plan_key = (pos.plan_key ^ (uint64_t)r->dist->size) * 0x9e3779b97f4a7c15ull;
	pp_loader_destroy(l);
	if (ret == 0)
		*key_p = pos.plan_key;
	return ret;
}

/* Makes the TensorBoard directory name of a run from its parameters. */
static void run_dirname(const struct tr_params *p, unsigned run, char *buf, size_t len)
{
	char model[64];
	size_t i;

	for (i = 0; p->model[i] != '\0' && i + 1 < sizeof(model); i++)
		model[i] = (p->model[i] == '/' || p->model[i] == ',' || p->model[i] == ':') ? '_' : p->model[i];
	model[i] = '\0';
	snprintf(buf, len, "run%u-device=%s-bs=%u-workers=%u-pin=%s-lr=%g-model=%s-opt=%s", run,
		 p->device, p->batch_size, p->workers, p->pin_memory ? "on" : "off", p->lr, model,
		 p->optimizer);
	for (i = 0; buf[i] != '\0'; i++)
		if (buf[i] == ':')
			buf[i] = '_';
}

static int run_open(const struct tr_options *opt, const struct tr_params *p, unsigned run,
		    const struct data *d, struct tr_dist *dist, struct run *r)
{
	const struct pp_sample_info *info;
	struct pp_model_config mc;
	char device[sizeof(p->device)];
	int ret;

	memset(r, 0, sizeof(*r));
	r->dist = dist;
	tr_dist_device(dist, p->device, device, sizeof(device));
	ret = pp_device_open(device, &r->dev);
	if (ret < 0)
		return ret;
	/* "auto" fell back to the cpu although a GPU driver is there: say so, once a process. */
	if (pp_device_get_props(r->dev)->fallback[0] != '\0' && !auto_fallback_said) {
		fprintf(stderr, "pinpipe-train: --device=%s: %s\n", p->device,
			pp_device_get_props(r->dev)->fallback);
		auto_fallback_said = true;
	}
	ret = tr_dist_run_begin(dist, r->dev);
	if (ret < 0)
		return ret;
	r->host_compute_on_copy = pp_device_get_props(r->dev)->host_addressable &&
				  !pp_device_get_props(r->dev)->host_is_device;
	ret = pp_stream_create(r->dev, &r->compute);
	if (ret < 0)
		return ret;
	ret = make_pipeline(opt, p, &d->train, true, r, &r->train_loader, &r->train_xfer);
	if (ret < 0)
		return ret;
	if (split_present(&d->val)) {
		ret = make_pipeline(opt, p, &d->val, false, r, &r->val_loader, &r->val_xfer);
		if (ret < 0)
			return ret;
	}
	if (split_present(&d->test)) {
		ret = make_pipeline(opt, p, &d->test, false, r, &r->test_loader, &r->test_xfer);
		if (ret < 0)
			return ret;
	}
	info = pp_loader_info(r->train_loader);
	pp_model_config_init(&mc);
	mc.in_channels = info->ndim == 3 ? info->shape[0] : 1;
	mc.in_height = info->ndim == 3 ? info->shape[1] : info->shape[0];
	mc.in_width = info->ndim == 3 ? info->shape[2] : (info->ndim >= 2 ? info->shape[1] : 1);
	mc.num_classes = info->num_classes;
	mc.seed = opt->seed;
	mc.threads = (int)p->threads;
	mc.mean = NORM_MEAN;
	mc.std = NORM_STD;
	mc.keep_denormals = opt->keep_denormals;
	mc.graph = opt->graph;
	mc.stream = r->compute;
	if (dist->size > 1 || dist->deterministic) {
		mc.grad_hook = tr_dist_grad_hook;
		mc.grad_sync = tr_dist_grad_sync;
		mc.grad_hook_arg = dist;
	}
	mc.optim.kind = strcmp(p->optimizer, "sgd") == 0 ? PP_OPTIM_SGD : PP_OPTIM_ADAM;
	mc.optim.lr = (float)p->lr;
	mc.optim.momentum = (float)opt->momentum;
	mc.optim.nesterov = opt->nesterov;
	mc.optim.weight_decay = (float)opt->weight_decay;
	if (opt->resume)
		ret = pp_model_load(opt->checkpoint, r->dev, &mc, &r->model);
	else
		ret = pp_model_create(p->model, r->dev, &mc, &r->model);
	if (ret == 0 && opt->deterministic && !pp_device_get_props(r->dev)->host_addressable) {
		fprintf(stderr, "pinpipe-train: --deterministic runs on cpu or sim, not on %s\n",
			pp_device_get_props(r->dev)->name);
		ret = -EINVAL;
	}
	if (ret == 0)
		ret = tr_dist_start_model(dist, r->model);
	if (ret < 0)
		return ret;
	if (opt->logdir[0] != '\0') {
		char dir[4096 + 512], name[512];

		run_dirname(p, run, name, sizeof(name));
		snprintf(dir, sizeof(dir), "%s/%s", opt->logdir, name);
		ret = pp_summary_writer_create(dir, &r->tb);
	}
	return ret;
}

/*
 * Writes the run's first training batch as the model gets it, as the image
 * "images/first_batch" (the seeds' grid; trainer/grid.h lays it out).  A
 * failure is a warning: the run goes on.
 */
static void tb_image_grid(struct run *r, const struct pp_device_batch *b, const struct pp_tensor *in,
			  const struct pp_sample_info *info, uint64_t step)
{
	size_t bytes = b->size * b->sample_bytes;
	uint8_t *host = malloc(bytes ? bytes : 1);
	struct tr_grid grid = { 0 };
	const char *why = NULL;
	int ret;

	r->tb_image_done = true;
	if (host == NULL) {
		why = pp_strerror(-ENOMEM);
		goto out;
	}
	/* The batch is on the device once its copy is: wait for it, then bring it back. */
	ret = pp_event_synchronize(b->ready);
	if (ret == 0)
		ret = pp_tensor_copy_to_host(in, host, bytes);
	if (ret < 0) {
		why = pp_last_error();
		goto out;
	}
	ret = tr_grid_make(host, b->size, info, &grid);
	if (ret < 0) {
		why = ret == -EINVAL ? "the samples are too large for a grid" : pp_strerror(ret);
		goto out;
	}
	ret = pp_summary_writer_add_image(r->tb, "images/first_batch", (int64_t)step, grid.pixels,
					  grid.height, grid.width, grid.channels);
	if (ret == -EIO)
		tb_failed(r);
	else if (ret < 0)
		why = pp_last_error();
out:
	if (why != NULL)
		fprintf(stderr, "pinpipe-train: warning: no image grid: %s\n", why);
	free(grid.pixels);
	free(host);
}

/*
 * Writes a histogram of each parameter tensor and of its gradient in the
 * last step ("params/0.conv.weight", "grads/0.conv.weight", ...) at
 * 'epoch', as the seeds did after each epoch.  A failure is a warning.
 */
static void tb_histograms(struct run *r, unsigned epoch)
{
	size_t count = pp_model_param_count(r->model);
	size_t n = pp_model_param_list(r->model, NULL, 0);
	struct pp_model_param *list = calloc(n ? n : 1, sizeof(*list));
	float *params = calloc(count ? count : 1, sizeof(float));
	float *grads = calloc(count ? count : 1, sizeof(float));
	int ret = -ENOMEM;

	if (list == NULL || params == NULL || grads == NULL)
		goto out;
	pp_model_param_list(r->model, list, n);
	ret = pp_model_params_read(r->model, params, count);
	if (ret == 0)
		ret = pp_model_grads_read(r->model, grads, count);
	for (size_t i = 0; i < n && ret == 0; i++) {
		char tag[64];

		snprintf(tag, sizeof(tag), "params/%s", list[i].name);
		ret = pp_summary_writer_add_histogram(r->tb, tag, epoch, params + list[i].offset,
						      list[i].count);
		snprintf(tag, sizeof(tag), "grads/%s", list[i].name);
		if (ret == 0)
			ret = pp_summary_writer_add_histogram(r->tb, tag, epoch, grads + list[i].offset,
							      list[i].count);
	}
out:
	if (ret == -EIO)
		tb_failed(r);
	else if (ret < 0)
		fprintf(stderr, "pinpipe-train: warning: no histograms: %s\n",
			pp_last_error()[0] ? pp_last_error() : pp_strerror(ret));
	free(grads);
	free(params);
	free(list);
}

/*
 * Whether training stops before the next step: Ctrl-C here, or on any
 * other rank (trainer/dist.h), so that every rank stops at the same step.
 * A failed collective stops with its error in *err_p.
 */
static bool ranks_stop(struct run *r, int *err_p)
{
	int err;

	if (tr_dist_any(r->dist, interrupted, &err)) {
		if (err < 0) {
			*err_p = err;
		} else {
			atomic_store(&stop_agreed, true);
			atomic_store(&interrupted, true);
		}
		return true;
	}
	return false;
}

/* Runs one pass over a transfer stage's epoch: training when 'train', else evaluation. */
static int run_pass(struct run *r, struct pp_transfer *xfer, bool train, uint64_t *steps,
		    uint64_t max_steps, const struct pp_sample_info *info, int progress,
		    uint64_t batches, double t0, const char *what)
{
	struct pp_device_batch *b;
	uint64_t done = 0, samples = 0;
	int ret = 0, released;

	/* Several ranks evaluate to the end: their sums are reduced together. */
	while (!(train ? ranks_stop(r, &ret) : interrupted && r->dist->size == 1) &&
	       (ret = pp_transfer_next(xfer, r->compute, &b)) == 1) {
		/* Evaluation leaves out the repeats that pad this rank to the others' count. */
		size_t shape[4] = { train ? b->size : b->size - b->padding, 1, 1, 1 };
		struct pp_tensor *in = NULL;
		int ndim = 1 + (int)info->ndim;

		for (uint32_t k = 0; k < info->ndim && k < 3; k++)
			shape[1 + k] = info->shape[k];
		if (r->host_compute_on_copy)
			ret = pp_event_synchronize(b->ready);
		if (ret >= 0 && shape[0] > 0)
			ret = pp_tensor_wrap(r->dev, b->samples, b->dtype, ndim, shape, &in);
		if (ret >= 0 && train && r->tb && !r->tb_image_done)
			tb_image_grid(r, b, in, info, *steps);
		if (ret >= 0 && in != NULL) {
			ret = !train ? pp_model_evaluate(r->model, in, b->labels, NULL)
			      : r->dist->deterministic
			      ? tr_dist_deterministic_step(r->dist, r->dev, b->samples, b->labels, b->size,
							   b->dtype, b->sample_bytes, ndim, shape + 1)
			      : pp_model_train_step(r->model, in, b->labels);
			pp_tensor_destroy(in);
		}
		samples += b->size;
		released = pp_transfer_release(xfer, b, r->compute);
		if (ret >= 0)
			ret = released;
		if (ret < 0)
			return ret;
		done++;
		if (train && r->tb && (*steps + 1) % TB_STEP_EVERY == 0) {
			struct pp_model_metrics m;

			/* The running totals since the last point give the mean loss of these steps. */
			ret = pp_model_metrics(r->model, false, &m);
			if (ret == 0 && m.samples > r->tb_samples) {
				tb_scalar(r, "loss/train_step", (int64_t)*steps + 1,
					  (m.loss_sum - r->tb_loss) / (double)(m.samples - r->tb_samples));
				r->tb_loss = m.loss_sum;
				r->tb_samples = m.samples;
			}
		}
		if (train && ++*steps >= max_steps && max_steps)
			break;
		if (progress > 0 && (done % 8 == 0 || done == batches)) {
			double el = now_s() - t0;
			int width = 30, fill = batches ? (int)(width * done / batches) : 0;

			fprintf(stderr, "\r  %-5s [%.*s%*s] %3d%% %9.0f samples/s  ETA %4.0fs ", what,
				fill, "##############################", width - fill, "",
				batches ? (int)(100 * done / batches) : 0, el > 0 ? samples / el : 0,
				done && batches ? el / done * (double)(batches - done) : 0);
		}
	}
	if (progress > 0)
		fprintf(stderr, "\r%80s\r", "");
	if (ret < 0)
		return ret;
	return (train ? stop_agreed : interrupted && r->dist->size == 1) ? -EINTR : 0;
}

/* Evaluates the model on one pass of a transfer stage; NaN results when there is none. */
static int evaluate(struct run *r, struct pp_transfer *xfer, struct pp_loader *loader,
		    const struct pp_sample_info *info, int progress, const char *what,
		    double *loss_p, double *acc_p)
{
	struct pp_model_metrics m;
	uint64_t steps = 0;
	int ret;

	*loss_p = *acc_p = NAN;
	if (xfer == NULL)
		return 0;
	pp_model_metrics(r->model, true, &m);
	ret = pp_transfer_begin_epoch(xfer, 0);
	if (ret == 0)
		ret = run_pass(r, xfer, false, &steps, 0, info, progress,
			       pp_loader_batches_per_epoch(loader), now_s(), what);
	if (ret == 0)
		ret = pp_model_metrics(r->model, true, &m);
	if (ret == 0)
		ret = tr_dist_sum_metrics(r->dist, &m);
	if (ret < 0)
		return ret;
	*loss_p = m.samples ? m.loss_sum / (double)m.samples : NAN;
	*acc_p = m.samples ? (double)m.correct / (double)m.samples : NAN;
	return 0;
}

static void print_row(const struct tr_row *row, int progress)
{
	if (progress < 0)
		return;
	printf("run %u epoch %u: train loss %.4f acc %.4f", row->run, row->epoch, row->train_loss,
	       row->train_acc);
	if (!isnan(row->val_acc))
		printf(", val loss %.4f acc %.4f", row->val_loss, row->val_acc);
	if (!isnan(row->test_acc))
		printf(", test loss %.4f acc %.4f", row->test_loss, row->test_acc);
	printf(", %.2f s, %.0f samples/s, waited %.3f s", row->epoch_s, row->samples_per_s,
	       row->wait_s);
	if (!isnan(row->hidden_pct))
		printf(", copy %.3f s (%.0f%% hidden), host in copy calls %.3f s", row->copy_s,
		       row->hidden_pct, row->copy_host_s);
	printf("\n");
	fflush(stdout);
}

/*
 * Set when a row could not be written to --csv or --jsonl (a full disk):
 * the run that wrote it failed, and no other run starts.
 */
static bool output_failed;

/*
 * Writes one row to a file of rows and flushes it: a full disk shows here,
 * not at the end, and a row that did not fit whole is cut off again, so
 * that the file holds whole rows.  Returns 0, or -errno with the file named
 * on stderr.
 */
static int write_row(FILE *f, const char *option, const char *path, const struct tr_row *row,
		     int (*write)(const struct tr_row *, FILE *))
{
	struct stat st;
	bool regular;
	int err;

	if (f == NULL)
		return 0;
	regular = fflush(f) == 0 && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
	errno = 0;
	if (!ferror(f) && write(row, f) == 0 && fflush(f) == 0 && !ferror(f))
		return 0;
	err = errno ? errno : EIO;
	/* What stdio still holds of the row is dropped, not written at fclose(). */
	__fpurge(f);
	if (regular && ftruncate(fileno(f), st.st_size) != 0)
		fprintf(stderr, "pinpipe-train: %s=%s: cannot cut off a partial row: %s\n", option,
			path, strerror(errno));
	fprintf(stderr, "pinpipe-train: %s=%s: cannot write: %s\n", option, path, strerror(err));
	output_failed = true;
	return -err;
}

/*
 * The files of rows, --csv and --jsonl (rank 0's): each row is written and
 * flushed as it is made, so that a SIGKILL, a killed rank or a timeout
 * leaves the rows so far.  A resume appends to them, after the rows of the
 * epochs its checkpoint holds (rows_resume()).  At the end the CSV's rows
 * of this process are written again in --sort's order (rows_finish()).
 */
struct row_files {
	FILE *csv;             /* --csv, or NULL */
	FILE *jsonl;           /* --jsonl, or NULL */
	off_t csv_base;        /* bytes of the CSV before this process's rows: its header and
				  the rows a resume kept */
};

/* Opens a file of rows: appended to by a resume, else emptied.  NULL with the file named on stderr. */
static FILE *rows_open(const char *option, const char *path, bool resume)
{
	FILE *f = fopen(path, resume ? "a+" : "w+");

	if (f == NULL)
		fprintf(stderr, "pinpipe-train: %s=%s: cannot open: %s\n", option, path, strerror(errno));
	return f;
}

/*
 * The length of the record at the start of s[0..len): a line of JSON, or a
 * CSV record (a quoted cell may hold a newline), with its newline.
 */
static size_t record_len(const char *s, size_t len, bool csv)
{
	bool quoted = false;

	for (size_t i = 0; i < len; i++) {
		if (csv && s[i] == '"')
			quoted = !quoted;
		else if (s[i] == '\n' && !quoted)
			return i + 1;
	}
	return len;
}

/*
 * The epoch of a row: its "epoch" key (JSON), or its cell number 'col'
 * (CSV); 0 when there is none (a failed run's row, a partial line).
 */
static unsigned long record_epoch(const char *s, size_t len, bool csv, size_t col)
{
	char buf[24];
	size_t i = 0, n = 0;

	if (!csv) {
		static const char key[] = "\"epoch\":";

		for (; i + sizeof(key) - 1 < len && memcmp(s + i, key, sizeof(key) - 1) != 0; i++)
			;
		i += sizeof(key) - 1;
	} else {
		for (size_t c = 0; c < col && i < len; i++) {
			if (s[i] == '"')
				for (i++; i < len && !(s[i] == '"' && (i + 1 >= len || s[i + 1] != '"')); i++)
					i += s[i] == '"';
			else if (s[i] == ',')
				c++;
		}
	}
	while (i < len && n + 1 < sizeof(buf) && s[i] >= '0' && s[i] <= '9')
		buf[n++] = s[i++];
	buf[n] = '\0';
	return n ? strtoul(buf, NULL, 10) : 0;
}

/*
 * Replaces 'path' with text[0..len) followed by the CSV rows of 'res' (when
 * not NULL), through a temporary file beside it that is renamed over it:
 * a SIGKILL leaves the old file or the new one.  Returns 0, or -errno with
 * the file named on stderr.
 */
static int rows_replace(const char *option, const char *path, const char *text, size_t len,
			const struct tr_results *res)
{
	char tmp[PATH_MAX];
	FILE *f;
	int fd, ret = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", path) >= (int)sizeof(tmp)) {
		fprintf(stderr, "pinpipe-train: %s=%s: the path is too long\n", option, path);
		return -ENAMETOOLONG;
	}
	fd = mkstemp(tmp);
	if (fd < 0 || (f = fdopen(fd, "w")) == NULL) {
		ret = -errno;
		fprintf(stderr, "pinpipe-train: %s=%s: cannot create %s: %s\n", option, path, tmp,
			strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
		return ret;
	}
	errno = 0;
	fwrite(text, 1, len, f);
	for (size_t i = 0; res != NULL && i < res->n; i++)
		tr_results_write_row_csv(&res->rows[i], f);
	if (fflush(f) != 0 || ferror(f) || fsync(fd) != 0)
		ret = -(errno ? errno : EIO);
	if (fclose(f) != 0 && ret == 0)
		ret = -errno;
	if (ret == 0 && rename(tmp, path) != 0)
		ret = -errno;
	if (ret < 0) {
		fprintf(stderr, "pinpipe-train: %s=%s: cannot write: %s\n", option, path, strerror(-ret));
		unlink(tmp);
	}
	return ret;
}

/* The whole content of a file of rows; NULL with the file named on stderr. */
static char *rows_read(const char *option, const char *path, FILE *f, size_t *len_p)
{
	struct stat st;
	char *text;
	ssize_t got = 0;

	if (fflush(f) != 0 || fstat(fileno(f), &st) != 0) {
		fprintf(stderr, "pinpipe-train: %s=%s: %s\n", option, path, strerror(errno));
		return NULL;
	}
	text = malloc((size_t)st.st_size + 1);
	if (text == NULL) {
		fprintf(stderr, "pinpipe-train: %s=%s: no memory for its %lld bytes\n", option, path,
			(long long)st.st_size);
		return NULL;
	}
	for (ssize_t n = 1; got < st.st_size && n > 0; got += n > 0 ? n : 0)
		n = pread(fileno(f), text + got, (size_t)(st.st_size - got), got);
	if (got < st.st_size) {
		fprintf(stderr, "pinpipe-train: %s=%s: cannot read: %s\n", option, path,
			strerror(errno ? errno : EIO));
		free(text);
		return NULL;
	}
	*len_p = (size_t)got;
	return text;
}

/*
 * A resume at the end of epoch 'epochs' (or in the epoch after it): the
 * file keeps its rows of epochs 1 to 'epochs' and drops the others (an
 * interrupted epoch's, which the resume trains again; failed runs'), so
 * that the resumed rows follow with no epoch twice.  A file that is not a
 * regular one (a pipe) is left as it is.  Returns 0 or -errno.
 */
static int rows_resume_one(const char *option, const char *path, FILE **f_p, bool csv,
			   unsigned epochs, off_t *base_p)
{
	struct stat st;
	size_t len, kept = 0, col = 0, at = 0;
	char *text;
	int ret;

	if (*f_p == NULL || fstat(fileno(*f_p), &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	text = rows_read(option, path, *f_p, &len);
	if (text == NULL)
		return -EIO;
	if (csv && len > 0) {
		/* The header stays; it says which cell is the epoch. */
		size_t n = record_len(text, len, true);

		for (const char *c = text; c < text + n && strncmp(c, "epoch,", 6) != 0; c++)
			col += *c == ',';
		at = kept = n;
	}
	while (at < len) {
		size_t n = record_len(text + at, len - at, csv);
		unsigned long e = record_epoch(text + at, n, csv, col);

		if (text[at + n - 1] == '\n' && e >= 1 && e <= epochs) {
			memmove(text + kept, text + at, n);
			kept += n;
		}
		at += n;
	}
	ret = rows_replace(option, path, text, kept, NULL);
	free(text);
	if (ret < 0)
		return ret;
	fclose(*f_p);
	*f_p = rows_open(option, path, true);
	if (*f_p == NULL)
		return -EIO;
	if (base_p != NULL)
		*base_p = (off_t)kept;
	return 0;
}

static int rows_resume(const struct tr_options *opt, struct row_files *rf, unsigned epochs)
{
	int ret = rows_resume_one("--csv", opt->csv, &rf->csv, true, epochs, &rf->csv_base);

	if (ret == 0)
		ret = rows_resume_one("--jsonl", opt->jsonl, &rf->jsonl, false, epochs, NULL);
	if (ret < 0)
		output_failed = true;
	return ret;
}

/*
 * Opens the files of rows of rank 0 (the other ranks write none); the CSV
 * gets its header when it is new.  Returns 0, or -errno with the file named.
 */
static int rows_start(const struct tr_options *opt, struct row_files *rf)
{
	struct stat st;

	memset(rf, 0, sizeof(*rf));
	if (opt->jsonl[0] != '\0' && (rf->jsonl = rows_open("--jsonl", opt->jsonl, opt->resume)) == NULL)
		return -EIO;
	if (opt->csv[0] == '\0')
		return 0;
	rf->csv = rows_open("--csv", opt->csv, opt->resume);
	if (rf->csv == NULL)
		return -EIO;
	if (fstat(fileno(rf->csv), &st) == 0 && st.st_size > 0) {
		rf->csv_base = st.st_size;
		return 0;
	}
	if (tr_results_write_csv_header(rf->csv) < 0 || fflush(rf->csv) != 0) {
		fprintf(stderr, "pinpipe-train: --csv=%s: cannot write: %s\n", opt->csv, strerror(errno));
		return -EIO;
	}
	rf->csv_base = ftello(rf->csv);
	return 0;
}

/*
 * Closes the files of rows; the CSV, a regular file, gets this process's
 * rows again in 'res''s order (sorted by --sort), after its header and the
 * rows a resume kept.  Returns 0, or -errno with the file named.
 */
static int rows_finish(const struct tr_options *opt, struct row_files *rf,
		       const struct tr_results *res)
{
	struct stat st;
	size_t len;
	char *text;
	int ret = 0;

	if (rf->csv != NULL && res != NULL && !output_failed && fstat(fileno(rf->csv), &st) == 0 &&
	    S_ISREG(st.st_mode)) {
		text = rows_read("--csv", opt->csv, rf->csv, &len);
		ret = text == NULL ? -EIO
		      : rows_replace("--csv", opt->csv, text, len < (size_t)rf->csv_base ? len : (size_t)rf->csv_base, res);
		free(text);
	}
	if (rf->csv != NULL && (ferror(rf->csv) | fclose(rf->csv)) != 0 && !output_failed && ret == 0) {
		fprintf(stderr, "pinpipe-train: --csv=%s: cannot write: %s\n", opt->csv, strerror(errno));
		ret = -EIO;
	}
	if (rf->jsonl != NULL && (ferror(rf->jsonl) | fclose(rf->jsonl)) != 0 && !output_failed) {
		fprintf(stderr, "pinpipe-train: --jsonl=%s: cannot write: %s\n", opt->jsonl,
			strerror(errno));
		ret = -EIO;
	}
	return ret;
}

/* A failed run's row; 'why' says why, or NULL for the library's last error. */
static void fail_row(const struct tr_options *opt, struct tr_results *res, unsigned run,
		     const struct tr_params *p, int err, const char *why, struct row_files *rf)
{
	struct tr_row row;

	memset(&row, 0, sizeof(row));
	row.run = run;
	row.train_loss = row.train_acc = row.val_loss = row.val_acc = NAN;
	row.test_loss = row.test_acc = NAN;
	row.epoch_s = row.run_s = row.samples_per_s = row.wait_s = row.copy_s = row.hidden_pct = NAN;
	row.copy_host_s = row.exposed_s = row.allreduce_s = NAN;
	row.p = *p;
	const char *reason = why ? why : pp_last_error()[0] ? pp_last_error() : pp_strerror(err);

	/* The row's status holds the reason's start; stderr has it whole. */
	snprintf(row.status, sizeof(row.status), "failed: %.*s", (int)sizeof(row.status) - 9, reason);
	fprintf(stderr, "pinpipe-train: run %u (%s): %s\n", run, p->device, reason);
	tr_results_add(res, &row);
	/* A file that failed already said so. */
	if (rf->jsonl && !ferror(rf->jsonl))
		write_row(rf->jsonl, "--jsonl", opt->jsonl, &row, tr_results_write_row_jsonl);
	if (rf->csv && !ferror(rf->csv))
		write_row(rf->csv, "--csv", opt->csv, &row, tr_results_write_row_csv);
}

/*
 * The cores this process may run on: those of its affinity mask (taskset,
 * a container's cpuset), else the online ones.
 */
static unsigned usable_cores(void)
{
	cpu_set_t set;
	long online = sysconf(_SC_NPROCESSORS_ONLN);

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	return online > 0 ? (unsigned)online : 1;
}

/* Trains one run of the grid; returns 0, or -errno when it failed (its row says why). */
/*
 * Appends a finished row to the results, the terminal, the JSON lines and
 * TensorBoard.  Returns 0, or -errno when the JSON lines could not be
 * written (the file is named on stderr); TensorBoard's failures are a
 * warning (tb_failed()).
 */
static int report_row(const struct tr_options *opt, struct run *r, const struct tr_row *row,
		      uint64_t steps, struct tr_results *res, struct row_files *rf)
{
	int ret;

	tr_results_add(res, row);
	print_row(row, opt->progress);
	/* Each row on disk as it is made: mpirun kills ranks that take long to stop. */
	ret = write_row(rf->jsonl, "--jsonl", opt->jsonl, row, tr_results_write_row_jsonl);
	if (ret == 0)
		ret = write_row(rf->csv, "--csv", opt->csv, row, tr_results_write_row_csv);
	if (ret < 0)
		return ret;
	if (r->tb == NULL)
		return 0;
	tb_scalar(r, "loss/train", (int64_t)steps, row->train_loss);
	tb_scalar(r, "accuracy/train", (int64_t)steps, row->train_acc);
	if (!isnan(row->val_acc)) {
		tb_scalar(r, "loss/val", (int64_t)steps, row->val_loss);
		tb_scalar(r, "accuracy/val", (int64_t)steps, row->val_acc);
	}
	if (!isnan(row->test_acc)) {
		tb_scalar(r, "loss/test", (int64_t)steps, row->test_loss);
		tb_scalar(r, "accuracy/test", (int64_t)steps, row->test_acc);
	}
	tb_scalar(r, "time/epoch_s", row->epoch, row->epoch_s);
	tb_scalar(r, "time/samples_per_s", row->epoch, row->samples_per_s);
	tb_scalar(r, "time/wait_s", row->epoch, row->wait_s);
	if (r->dist->size > 1)
		tb_scalar(r, "time/allreduce_s", row->epoch, row->allreduce_s);
	if (r->tb != NULL)
		tb_histograms(r, row->epoch);
	/* The writer buffers: a full disk shows at the flush, once per epoch. */
	if (r->tb != NULL && pp_summary_writer_flush(r->tb) < 0)
		tb_failed(r);
	return 0;
}

/*
 * Begins a training epoch, or continues it from a resumed model's step
 * count.  'key' is the plan key of the loader that trained the resumed
 * model (its checkpoint's tag; 0 for a checkpoint without one): the loader
 * refuses to continue a run whose data came in another order (-EINVAL).
 */
static int begin_epoch(struct run *r, unsigned epoch, bool resuming, uint64_t steps,
		       uint64_t batches, uint64_t key)
{
	struct pp_loader_position pos;
	int ret = pp_transfer_begin_epoch(r->train_xfer, epoch);

	if (ret < 0 || !resuming || batches == 0 || (steps % batches == 0 && key == 0))
		return ret;
	ret = pp_loader_get_position(r->train_loader, &pos);
	if (ret < 0)
		return ret;
	pos.epoch = epoch;
	pos.batch = steps % batches;
	if (key != 0)
		pos.plan_key = key;
	return pp_transfer_resume(r->train_xfer, &pos);
}

/*
 * Trains one epoch and fills its row: training metrics, time, waiting,
 * copies, and evaluation.  Returns 0, -EINTR when Ctrl-C stopped it (the
 * row then holds what was trained), or another -errno.
 */
/* A capture that failed turned the model's graphs off: said once; the run goes on without. */
static void say_graph_fallback(const struct pp_model *model)
{
	static bool said;
	struct pp_model_graph_stats gs;

	pp_model_get_graph_stats(model, &gs);
	if (gs.fallback[0] != '\0' && !said) {
		fprintf(stderr, "pinpipe-train: %s\n", gs.fallback);
		said = true;
	}
}

static int train_epoch(const struct tr_options *opt, struct run *r, const struct pp_sample_info *info,
		       uint64_t *steps, uint64_t batches, struct tr_row *row)
{
	struct pp_transfer_stats s0, s1;
	struct pp_model_metrics m;
	uint64_t timed, comm0;
	double t0, scale;
	int ret, pass;

	pp_transfer_get_stats(r->train_xfer, &s0);
	pp_model_metrics(r->model, true, &m);
	comm0 = r->dist->hook_ns + r->dist->sync_ns;
	r->tb_loss = 0;
	r->tb_samples = 0;
	t0 = now_s();
	pass = run_pass(r, r->train_xfer, true, steps, opt->max_steps, info, opt->progress, batches,
			t0, "train");
	ret = pp_stream_synchronize(r->compute);
	if (pass < 0 && pass != -EINTR)
		return pass;
	if (ret < 0)
		return ret;
	row->epoch_s = now_s() - t0;
	row->allreduce_s = (double)(r->dist->hook_ns + r->dist->sync_ns - comm0) * 1e-9;
	pp_model_metrics(r->model, true, &m);
	/* The whole job's figures: every rank's samples. */
	ret = tr_dist_sum_metrics(r->dist, &m);
	if (ret < 0)
		return ret;
	pp_transfer_get_stats(r->train_xfer, &s1);
	row->train_loss = m.samples ? m.loss_sum / (double)m.samples : NAN;
	row->train_acc = m.samples ? (double)m.correct / (double)m.samples : NAN;
	row->samples_per_s = row->epoch_s > 0 ? (double)m.samples / row->epoch_s : NAN;
	row->wait_s = (double)(s1.wait_ns - s0.wait_ns) * 1e-9;
	/* Copy time and exposure are measured on the timed batches: scaled to the epoch's. */
	timed = s1.copies_timed - s0.copies_timed;
	scale = timed ? (double)(s1.batches - s0.batches) / (double)timed
		      : s1.bytes == s0.bytes ? 0 : NAN;
	row->copy_s = (double)(s1.copy_ns - s0.copy_ns) * 1e-9 * scale;
	row->exposed_s = (double)(s1.exposed_ns - s0.exposed_ns) * 1e-9 * scale;
	row->copy_host_s = (double)(s1.host_blocked_ns - s0.host_blocked_ns) * 1e-9;
	row->hidden_pct = s1.copy_ns > s0.copy_ns
		? 100.0 * (1.0 - (double)(s1.exposed_ns - s0.exposed_ns) / (double)(s1.copy_ns - s0.copy_ns))
		: NAN;
	row->val_loss = row->val_acc = row->test_loss = row->test_acc = NAN;
	if (pass == -EINTR)
		return pass;
	ret = evaluate(r, r->val_xfer, r->val_loader, info, opt->progress, "val", &row->val_loss,
		       &row->val_acc);
	if (ret == 0)
		ret = evaluate(r, r->test_xfer, r->test_loader, info, opt->progress, "test",
			       &row->test_loss, &row->test_acc);
	return ret;
}

/*
 * Names the BLAS kernels of a run on the CPU in its parameters, and says
 * once a process, on stderr, when the processor has better ones and how
 * to choose them (pp_blas_get_info()).
 */
static void blas_note(struct tr_params *p, bool say)
{
	static bool said;
	struct pp_blas_info info;

	pp_blas_get_info(&info);
	if (info.library[0] != '\0')
		snprintf(p->blas, sizeof(p->blas), "%s %s", info.library, info.core);
	if (info.warning[0] != '\0' && !said && say)
		fprintf(stderr, "pinpipe-train: warning: %s\n", info.warning);
	said = said || info.warning[0] != '\0';
}

/*
 * --resume: the checkpoint's model and optimizer are those the options
 * ask for (the rows name them), else the resume is refused, naming both,
 * with -EINVAL and the reason in why.  A learning rate other than the
 * checkpoint's is taken: the model trains with the --lr its rows show.
 */
static int resume_check(const struct tr_options *opt, const struct tr_params *p,
			struct pp_model *model, bool say, char *why, size_t size)
{
	const char *want = pp_model_preset(p->model) ? pp_model_preset(p->model) : p->model;
	struct pp_optimizer_config o;
	const char *kind;

	pp_model_get_optimizer(model, &o);
	kind = o.kind == PP_OPTIM_SGD ? "sgd" : "adam";
	if (strcmp(want, pp_model_spec(model)) != 0)
		snprintf(why, size, "--resume: %s holds the model '%s', not --model=%s ('%s'): resume "
			 "it with its own model", opt->checkpoint, pp_model_spec(model), p->model, want);
	else if (strcmp(p->optimizer, kind) != 0)
		snprintf(why, size, "--resume: %s holds the optimizer %s, not --optimizer=%s: resume "
			 "it with its own optimizer", opt->checkpoint, kind, p->optimizer);
	else if (o.momentum != (float)opt->momentum || o.weight_decay != (float)opt->weight_decay ||
		 o.nesterov != opt->nesterov)
		snprintf(why, size, "--resume: %s holds the optimizer's --momentum=%g "
			 "--weight-decay=%g%s, not --momentum=%g --weight-decay=%g%s", opt->checkpoint,
			 (double)o.momentum, (double)o.weight_decay, o.nesterov ? " --nesterov" : "",
			 opt->momentum, opt->weight_decay, opt->nesterov ? " --nesterov" : "");
	else if (o.lr != (float)p->lr) {
		if (say)
			fprintf(stderr, "pinpipe-train: --resume: %s was trained at the learning rate "
				"%g: it goes on at --lr=%g\n", opt->checkpoint, (double)o.lr, p->lr);
		return pp_model_set_lr(model, (float)p->lr);
	} else
		return 0;
	return -EINVAL;
}

/* Trains one run of the grid; returns 0, or -errno when it failed (its row says why). */
static int train_run(const struct tr_options *opt, const struct tr_params *p, unsigned run,
		     const struct data *d, struct tr_dist *dist, struct tr_results *res,
		     struct row_files *rf)
{
	struct tr_params params = *p;
	const struct pp_sample_info *info;
	struct run r;
	double t_run = now_s();
	uint64_t steps, batches, resumed_steps;
	unsigned first_epoch;
	struct pp_loader_position pos;
	uint64_t resumed_key;
	char why[sizeof(opt->checkpoint) + 1024] = "";  /* why the run failed, when the trainer knows */
	unsigned cores;
	int ret;

	memset(&r, 0, sizeof(r));
	/* The ranks of a machine share its cores (and its GPUs, by local rank). */
	cores = usable_cores() / (unsigned)pp_comm_local_size(dist->comm);
	params.threads = tr_options_threads(opt, p, cores ? cores : 1);
	ret = tr_dist_check_batch(dist, p->batch_size, why, sizeof(why));
	if (ret == 0)
		ret = run_open(opt, &params, run, d, dist, &r);
	if (ret == 0 && opt->resume)
		ret = resume_check(opt, &params, r.model, dist->rank == 0, why, sizeof(why));
	if (ret < 0)
		goto fail;
	/* Rows name the device that ran ("auto" opens cpu or cuda:0), a CPU step's threads and BLAS. */
	snprintf(params.device, sizeof(params.device), "%s", pp_device_get_props(r.dev)->name);
	if (pp_device_get_props(r.dev)->host_addressable)
		blas_note(&params, dist->rank == 0);
	else
		params.threads = 0;
	p = &params;
	info = pp_loader_info(r.train_loader);
	/* The loader knows an epoch's batch count once one is begun (the same for
	 * every epoch of one rank, in memory or streamed): it places a resumed
	 * model's steps. */
	ret = pp_transfer_begin_epoch(r.train_xfer, 0);
	if (ret < 0)
		goto fail;
	batches = pp_loader_batches_per_epoch(r.train_loader);
	steps = resumed_steps = pp_model_steps(r.model);
	/* A resumed model's steps place it in the plan: epoch steps / batches,
	 * at batch steps % batches.  No run goes past TR_MAX_EPOCHS epochs, so
	 * a count beyond them is no position of this plan: a damaged file. */
	if (steps != 0 && (batches == 0 || steps / batches > TR_MAX_EPOCHS ||
			   (steps / batches == TR_MAX_EPOCHS && steps % batches != 0))) {
		snprintf(why, sizeof(why), "--resume: %s: its step count %" PRIu64 " lies past the "
			 "end of any run of its training data (%" PRIu64 " batches an epoch, %u epochs "
			 "at most): the file is damaged, or was not written by pinpipe-train",
			 opt->checkpoint, steps, batches, TR_MAX_EPOCHS);
		ret = -EINVAL;
		goto fail;
	}
	first_epoch = batches ? (unsigned)(steps / batches) : 0;
	if (steps != 0 && (first_epoch >= opt->epochs || (opt->max_steps && steps >= opt->max_steps))) {
		char at[64], limit[64];

		if (steps % batches == 0)
			snprintf(at, sizeof(at), "the end of epoch %u", first_epoch);
		else
			snprintf(at, sizeof(at), "batch %" PRIu64 " of epoch %u", steps % batches,
				 first_epoch + 1);
		if (first_epoch >= opt->epochs)
			snprintf(limit, sizeof(limit), "--epochs=%u", opt->epochs);
		else
			snprintf(limit, sizeof(limit), "--max-steps=%" PRIu64, opt->max_steps);
		fprintf(stderr, "pinpipe-train: run %u: %s is at step %" PRIu64 ", %s (of %" PRIu64
			" batches), at or past %s: the run is already complete, nothing was trained\n",
			run, opt->checkpoint, steps, at, batches, limit);
		run_close(&r);
		return 0;
	}
	/* The files of rows keep the epochs the checkpoint holds, and no later ones. */
	if (opt->resume && rows_resume(opt, rf, first_epoch) < 0) {
		snprintf(why, sizeof(why), "--resume: a file of rows cannot be rewritten");
		ret = -EIO;
		goto fail;
	}
	/* The model keeps the order of its training data (the loader's plan key)
	 * in its checkpoints, so that a resume can be checked against it. */
	ret = pp_loader_get_position(r.train_loader, &pos);
	if (ret < 0)
		goto fail;
	if (dist->size > 1)
		ret = job_plan_key(opt, p, &d->train, &r, &pos.plan_key);
	if (ret < 0)
		goto fail;
	resumed_key = steps ? pp_model_tag(r.model) : 0;
	pp_model_set_tag(r.model, pos.plan_key);
	/* Several ranks: the job's key is checked here, and each rank's loader
	 * resumes its own share of the same position. */
	if (dist->size > 1 && resumed_key != 0 && resumed_key != pos.plan_key) {
		snprintf(why, sizeof(why), "--resume: %s was written by a run whose training data "
			 "came in another order (a global batch of ranks x --batch-size, --data, "
			 "--seed, --val-split, --no-shuffle, --drop-last or --deterministic differ, "
			 "or, with --stream or --drop-last, the number of ranks)",
			 opt->checkpoint);
		ret = -EINVAL;
		goto fail;
	}
	if (dist->size > 1)
		resumed_key = 0;
	if (opt->progress >= 0)
		printf("run %u: device=%s batch_size=%u workers=%u pin_memory=%s lr=%g model=%s "
		       "optimizer=%s, %zu parameters%s\n", run, p->device, p->batch_size, p->workers,
		       p->pin_memory ? "on" : "off", p->lr, p->model, p->optimizer,
		       pp_model_param_count(r.model), steps ? " (resumed)" : "");
	/* Seen before a long first epoch, also through a pipe. */
	fflush(stdout);
	for (unsigned epoch = first_epoch; epoch < opt->epochs; epoch++) {
		uint64_t steps_before = steps;
		struct tr_row row;
		int ret2;

		if (opt->max_steps && steps >= opt->max_steps)
			break;
		memset(&row, 0, sizeof(row));
		row.run = run;
		row.epoch = epoch + 1;
		row.p = *p;
		ret = begin_epoch(&r, epoch, epoch == first_epoch, steps, batches, resumed_key);
		if (ret == -EINVAL && epoch == first_epoch && steps != 0)
			fprintf(stderr, "pinpipe-train: --resume: %s was written by a run whose "
				"training data came in another order (--data, --seed, --batch-size, "
				"--val-split, --no-shuffle, --drop-last or the --stream window differ); "
				"resume it with the options it was written with\n", opt->checkpoint);
		if (ret == 0)
			ret = train_epoch(opt, &r, info, &steps, batches, &row);
		say_graph_fallback(r.model);
		if (ret < 0 && ret != -EINTR)
			goto fail;
		/* Stopped before a step of this epoch: no row of NaNs, and the
		 * checkpoint, if any, stays that of the last step. */
		if (ret == -EINTR && steps == steps_before)
			break;
		row.run_s = now_s() - t_run;
		snprintf(row.status, sizeof(row.status), "%s", ret == -EINTR ? "interrupted" : "ok");
		ret2 = report_row(opt, &r, &row, steps, res, rf);
		if (ret2 < 0) {
			snprintf(why, sizeof(why), "a file of rows cannot be written: %s",
				 pp_strerror(ret2));
			ret = ret2;
			goto fail;
		}
		/* An interrupted epoch's steps are whole: its checkpoint resumes exactly. */
		if (opt->checkpoint[0] != '\0' && dist->rank == 0) {
			int saved = pp_model_save(r.model, opt->checkpoint);

			if (saved < 0) {
				ret = saved;
				goto fail;
			}
		}
		if (ret == -EINTR)
			break;
	}
	/* Rank 0 speaks for the job. */
	if (dist->rank == 0 && ret == -EINTR && steps == resumed_steps)
		fprintf(stderr, "pinpipe-train: interrupted before the first step of run %u: nothing "
			"trained%s%s%s\n", run, opt->checkpoint[0] == '\0' ? "" : steps ? ", " :
			", no checkpoint written", steps ? opt->checkpoint : "",
			steps ? " left as it was" : "");
	else if (dist->rank == 0 && ret == -EINTR)
		fprintf(stderr, "pinpipe-train: interrupted after %llu steps%s\n",
			(unsigned long long)steps,
			opt->checkpoint[0] ? "; the checkpoint resumes from there" : "");
	run_close(&r);
	return ret == -EINTR ? ret : 0;

fail:
	fail_row(opt, res, run, p, ret, why[0] ? why : dist->why[0] ? dist->why : NULL, rf);
	run_close(&r);
	return ret;
}

/*
 * Several ranks: rank 0 alone prints and writes the files (the others run
 * quiet); Ctrl-C and the SIGTERM that mpirun sends its ranks on Ctrl-C
 * both stop at the next step that every rank agrees on.
 */
static void ranks_setup(struct tr_options *opt, const struct tr_dist *dist)
{
	if (dist->size > 1) {
		/* Without SA_RESTART: on Ctrl-C mpirun stops reading the ranks'
		 * output, seconds before its SIGTERM, so rank 0 may be blocked
		 * writing a progress line to a full pipe; the signal must end
		 * that write (the line is lost) for the rank to stop and write
		 * its rows and checkpoint before mpirun's SIGKILL. */
		struct sigaction sa = { .sa_handler = on_sigint };

		sigemptyset(&sa.sa_mask);
		sigaction(SIGTERM, &sa, NULL);
	}
	if (dist->rank == 0)
		return;
	opt->progress = -1;
	opt->csv[0] = opt->jsonl[0] = opt->logdir[0] = '\0';
}

/*
 * A rank failed (its reason is on stderr): with other ranks, which may
 * wait for it in a collective, the whole job ends with status 1.
 */
static int rank_failed(struct tr_dist *dist)
{
	if (dist->size > 1) {
		fprintf(stderr, "pinpipe-train: rank %d of %d failed (the reason is above): ending the "
			"job\n", dist->rank, dist->size);
		pp_comm_abort(dist->comm, 1);
	}
	tr_dist_close(dist);
	return 1;
}

/*
 * The width the final table keeps to: the terminal's, else $COLUMNS, else
 * 80 (a failed run's reason is then cut in the table; stderr, the CSV and
 * the JSON lines have it whole).
 */
static size_t table_width(void)
{
	struct winsize ws;
	const char *env = getenv("COLUMNS");
	char *end;
	unsigned long cols;

	if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	if (env != NULL && env[0] != '\0') {
		errno = 0;
		cols = strtoul(env, &end, 10);
		if (errno == 0 && *end == '\0' && cols > 0 && cols <= 65535)
			return cols;
	}
	return 80;
}

int main(int argc, char **argv)
{
	struct tr_options opt;
	struct tr_results res = { 0 };
	struct tr_dist dist;
	struct data d;
	struct row_files rf;
	char checked[1024];        /* why the ranks' options do not agree */
	size_t runs, started = 0;
	int ret, failed = 0;
	bool told = false;         /* a run said where Ctrl-C stopped it */

	ret = tr_options_parse(argc, argv, &opt);
	if (ret != 0)
		return ret == 1 ? 0 : 2;
	signal(SIGINT, on_sigint);
	if (tr_dist_open(&opt, &dist) < 0)
		return 1;
	ranks_setup(&opt, &dist);
	if (data_open(&opt, &d) < 0)
		return rank_failed(&dist);
	if (rows_start(&opt, &rf) < 0) {
		rows_finish(&opt, &rf, NULL);
		data_free(&d);
		return rank_failed(&dist);
	}
	/* The ranks of a job agree on the options, or none trains: exit 2, as for a bad option. */
	ret = tr_dist_check_options(&dist, &opt, checked, sizeof(checked));
	if (ret < 0) {
		struct tr_params p;

		tr_options_run_params(&opt, 0, &p);
		if (dist.rank == 0)
			fail_row(&opt, &res, 1, &p, ret, checked, &rf);
		rows_finish(&opt, &rf, NULL);
		tr_results_free(&res);
		data_free(&d);
		if (ret != -EINVAL)
			return rank_failed(&dist);
		tr_dist_close(&dist);
		return 2;
	}
	runs = tr_options_runs(&opt);
	for (size_t i = 0; i < runs; i++) {
		struct tr_params p;
		int err;

		/* Several ranks agree on Ctrl-C before each run, so that all start it
		 * (and its broadcast) or none does. */
		if (tr_dist_any(&dist, interrupted, &err)) {
			if (err < 0) {
				fprintf(stderr, "pinpipe-train: before run %zu: %s\n", i + 1, pp_last_error());
				data_free(&d);
				return rank_failed(&dist);
			}
			atomic_store(&interrupted, true);
			break;
		}

		tr_options_run_params(&opt, i, &p);
		started++;
		ret = train_run(&opt, &p, (unsigned)i + 1, &d, &dist, &res, &rf);
		told = ret == -EINTR;
		if (ret < 0)
			failed++;
		/* The other ranks may be waiting for this one: end them, with this reason said. */
		if (ret < 0 && ret != -EINTR && dist.size > 1) {
			data_free(&d);
			return rank_failed(&dist);
		}
		/* A file of rows could not be written: no other run starts. */
		if (output_failed)
			break;
	}
	if (dist.rank == 0 && interrupted && !told && started == 0)
		fprintf(stderr, "pinpipe-train: interrupted before the first step: nothing trained%s%s%s\n",
			opt.checkpoint[0] == '\0' ? "" : opt.resume ? ", " : ", no checkpoint written",
			opt.resume ? opt.checkpoint : "", opt.resume ? " left as it was" : "");
	else if (dist.rank == 0 && interrupted && !told && started < runs)
		fprintf(stderr, "pinpipe-train: interrupted after run %zu: runs %zu to %zu not started\n",
			started, started + 1, runs);
	tr_results_sort(&res, opt.sort);
	if (opt.progress >= 0)
		printf("\n");
	if (dist.rank == 0)
		tr_results_print_table(&res, opt.sort, table_width(), stdout);
	if (rows_finish(&opt, &rf, &res) < 0)
		failed++;
	tr_results_free(&res);
	data_free(&d);
	/* mpirun ends the job when a rank exits non-zero (130 after Ctrl-C): no rank
	 * leaves before rank 0 has written everything. */
	fflush(stdout);
	/* A failed barrier leaves a request pending, and ranks that may never come:
	 * the job ends here (no MPI_Finalize), failed. */
	if (dist.size > 1 && pp_comm_barrier(dist.comm) < 0) {
		fprintf(stderr, "pinpipe-train: the final barrier: %s\n", pp_last_error());
		return rank_failed(&dist);
	}
	tr_dist_close(&dist);
	if (interrupted)
		return 130;
	return failed ? 1 : 0;
}
