/*
 * trainer/data.c: pinpipe-train's data (trainer/data.h): the splits of
 * --data opened and checked before any run, and each run's loaders.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainer/data.h"
#include "trainer/run.h"

bool tr_split_present(const struct tr_split *s)
{
	return s->ds != NULL || s->nshards > 0 || s->images != NULL;
}

static void split_free(struct tr_split *s)
{
	pp_dataset_destroy(s->ds);
	pp_shard_paths_free(s->shards);
	pp_image_folder_close(s->images);
	pp_jpeg_decoder_destroy(s->jpeg);
	memset(s, 0, sizeof(*s));
}

void tr_data_free(struct tr_data *d)
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
static int find_shards(const char *dir, const char *split, struct tr_split *sp,
		       struct pp_sample_info *info, const struct tr_options *opt, unsigned ranks)
{
	uint64_t chunks = 0;
	struct stat st;
	int ret;

	if (stat(dir, &st) != 0 && errno != ENOENT && errno != ENOTDIR) {
		fprintf(stderr, "pinpipe-train: --stream: %s: cannot read the directory: %s\n", dir,
			strerror(errno));
		return -errno;
	}
	if (stat(dir, &st) != 0) {
		fprintf(stderr, "pinpipe-train: --stream: %s: no such directory\n", dir);
		return -ENOENT;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "pinpipe-train: --stream: %s: %s: give the directory that holds the "
			"shards\n", dir, S_ISREG(st.st_mode) ? "a file, not a directory" : "not a directory");
		return -ENOTDIR;
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
		chunks += pp_shard_chunk_count(sh);
		pp_shard_close(sh);
		if (ret < 0)
			goto err_free;
	}
	/* Each rank streams chunks of its own (the loader's rule, said here in the
	 * trainer's terms). */
	if (chunks < ranks) {
		fprintf(stderr, "pinpipe-train: --stream: the %s shards of %s hold %" PRIu64
			" chunks, too few for %u ranks (each streams chunks of its own): train "
			"without --stream, or pack smaller chunks (pinpipe-pack --chunk)%s\n", split,
			dir, chunks, ranks,
			strcmp(split, "train") != 0 ? ", or train without evaluation (--no-eval)" : "");
		ret = -EINVAL;
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
static int open_synthetic(const char *spec, uint64_t seed, struct tr_data *d)
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
static int open_images(const struct tr_options *opt, struct tr_data *d)
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
			tr_data_free(d);
			return -ENOENT;
		}
		ret = pp_image_folder_open(test, &jc, &d->test.images);
	}
	/* A label names one class in both splits (the count alone let val/'s shift). */
	if (ret == 0 && d->test.images != NULL)
		ret = pp_image_folder_same_classes(d->train.images, d->test.images);
	if (ret < 0) {
		fprintf(stderr, "pinpipe-train: %s\n", pp_last_error());
		tr_data_free(d);
	}
	return ret;
}

int tr_data_open(const struct tr_options *opt, unsigned ranks, struct tr_data *d)
{
	int ret;

	memset(d, 0, sizeof(*d));
	if (opt->stream) {
		struct pp_sample_info train, test;

		/* A packed image folder's evaluation split is its val/, where it has one
		 * (a set of val shards that is not whole is said as such below). */
		char **vals = NULL;
		size_t nvals;
		bool val = pp_shard_find(opt->data, "val", &vals, &nvals) != -ENOENT;

		pp_shard_paths_free(vals);
		ret = find_shards(opt->data, "train", &d->train, &train, opt, ranks);
		if (ret == 0 && opt->eval)
			ret = find_shards(opt->data, val ? "val" : "test", &d->test, &test, opt, ranks);
		if (ret == 0 && opt->eval)
			ret = check_samples(opt->data, "test split's", &train, &test);
		if (ret == 0 && opt->image_size != 0 && d->train.jpeg == NULL) {
			fprintf(stderr, "pinpipe-train: --image-size is for JPEGs, and the shards of "
				"%s hold none\n", opt->data);
			ret = -EINVAL;
		}
		if (ret < 0)
			tr_data_free(d);
		return ret;
	}
	if (strncmp(opt->data, "synthetic", 9) != 0 && pp_image_folder_probe(opt->data))
		return open_images(opt, d);
	if (opt->image_size != 0) {
		fprintf(stderr, "pinpipe-train: --image-size is for JPEGs, and --data=%s holds none "
			"(DIR/train/CLASS/*.jpg or DIR/CLASS/*.jpg, or in folders under a class)\n", opt->data);
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
		tr_data_free(d);
		return -EINVAL;
	}
	/* Said by the option, not by the split's inner name of the data ("synthetic:seed=7[rest]"). */
	if (ret == 0 && opt->val_split > 0 &&
	    opt->val_split >= pp_dataset_info(d->train.ds)->count) {
		fprintf(stderr, "pinpipe-train: --val-split=%llu: %s has %llu training samples: at "
			"most %llu can be held out\n", (unsigned long long)opt->val_split, opt->data,
			(unsigned long long)pp_dataset_info(d->train.ds)->count,
			(unsigned long long)pp_dataset_info(d->train.ds)->count - 1);
		tr_data_free(d);
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
		tr_data_free(d);
	}
	return ret;
}

void tr_loader_config(const struct tr_options *opt, const struct tr_params *p,
		      const struct tr_split *s, bool train, const struct tr_run *r,
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
	/* By default a ring the workers fill at once: the loader's (2 x workers + 2,
	 * twice that streamed), where a fixed 4 left all but 4 of 16 workers waiting
	 * for a slot (a worker fills batch b in slot b mod ring); 4 for one worker. */
	lc.prefetch = opt->prefetch ? opt->prefetch : p->workers <= 1 ? 4 : 0;
	lc.device = r->dev;
	lc.pin_memory = p->pin_memory;
	lc.rank = (uint32_t)r->dist->rank;
	lc.world_size = (uint32_t)r->dist->size;
	/* --deterministic: full global batches of whole positions, as one process's */
	if (train && opt->deterministic)
		lc.drop_last = lc.rank_drop = true;
	*lc_p = lc;
}

int tr_make_pipeline(const struct tr_options *opt, const struct tr_params *p,
		     const struct tr_split *s, bool train, struct tr_run *r,
		     struct pp_loader **loader_p, struct pp_transfer **xfer_p)
{
	struct pp_loader_config lc;
	struct pp_transfer_config tc;
	int ret;

	tr_loader_config(opt, p, s, train, r, &lc);
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
