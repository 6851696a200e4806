/*
 * tests/test_source.c: the open loader (pinpipe/source.h): layouts and
 * their checks, the sample generator, sources of the user's own (in memory
 * and file-backed, sample by sample and in bulk) with fields of four types
 * through the loader and the transfer stage, transforms, and their errors.
 *
 * Every sample's fields are a function of its index, so each batch is
 * checked byte by byte; and every epoch's batches are digested, so that
 * "the same at 0, 1 and 4 workers, after a resume, on every rank count" is
 * a comparison of digests that any misplaced byte breaks.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pinpipe/dataset.h"
#include "pinpipe/transfer.h"
#include "tests/testutil.h"

#define COUNT 203   /* samples: not a multiple of the batch sizes */
#define C 3
#define H 4
#define W 5
#define IMG (C * H * W)
#define TOK 6

/* The four fields: an image to normalise, a label, tokens, two floats. */
static const struct pp_layout layout4 = {
	.nfields = 4,
	.fields = {
		{ .name = "image", .dtype = PP_DTYPE_U8, .ndim = 3, .shape = { C, H, W },
		  .normalize = true },
		{ .name = "labels", .dtype = PP_DTYPE_I32 },
		{ .name = "tokens", .dtype = PP_DTYPE_U16, .ndim = 1, .shape = { TOK } },
		{ .name = "feat", .dtype = PP_DTYPE_F32, .ndim = 1, .shape = { 2 } },
	},
};

static uint8_t img_byte(uint64_t id, size_t j) { return (uint8_t)(id * 31 + j * 7 + 3); }
static int32_t label_of(uint64_t id) { return (int32_t)(id % 7); }
static uint16_t tok_of(uint64_t id, size_t j) { return (uint16_t)(id * 1013 + j * 17); }
static float feat_of(uint64_t id, size_t j) { return (float)id + 0.5f * (float)j; }

/* ------------------------------------------------------------------ the source */

struct tsrc {
	uint64_t fail_at;        /* read fails on this index (UINT64_MAX: never) */
	bool fail_open;          /* worker_open fails */
	bool quiet;              /* a failing read sets no message */
	atomic_int open_workers; /* worker_open minus worker_close */
	atomic_int opened;       /* worker_open calls */
};

static void fill_one(uint64_t id, void *const *f, size_t k)
{
	uint8_t *img = (uint8_t *)f[0] + k * IMG;
	uint16_t *tok = (uint16_t *)f[2] + k * TOK;
	float *feat = (float *)f[3] + k * 2;

	for (size_t j = 0; j < IMG; j++)
		img[j] = img_byte(id, j);
	((int32_t *)f[1])[k] = label_of(id);
	for (size_t j = 0; j < TOK; j++)
		tok[j] = tok_of(id, j);
	feat[0] = feat_of(id, 0);
	feat[1] = feat_of(id, 1);
}

static int t_read(void *ctx, void *wctx, const struct pp_sample *s)
{
	struct tsrc *t = ctx;

	ck_assert_ptr_nonnull(wctx);
	if (s->index == t->fail_at)
		return t->quiet ? -EIO : pp_set_error(-EIO, "disk on fire at %llu",
						      (unsigned long long)s->index);
	fill_one(s->index, s->fields, 0);
	return 0;
}

static int t_read_batch(void *ctx, void *wctx, const uint64_t *ids, size_t n, void *const *fields)
{
	struct tsrc *t = ctx;

	ck_assert_ptr_nonnull(wctx);
	for (size_t k = 0; k < n; k++) {
		if (ids[k] == t->fail_at)
			return t->quiet ? -EIO : pp_set_error(-EIO, "disk on fire in bulk");
		fill_one(ids[k], fields, k);
	}
	return 0;
}

static int t_open(void *ctx, void **wctx_p)
{
	struct tsrc *t = ctx;

	if (t->fail_open)
		return pp_set_error(-EMFILE, "no more handles");
	atomic_fetch_add(&t->open_workers, 1);
	atomic_fetch_add(&t->opened, 1);
	*wctx_p = malloc(16);
	return 0;
}

static void t_close(void *ctx, void *wctx)
{
	struct tsrc *t = ctx;

	atomic_fetch_sub(&t->open_workers, 1);
	free(wctx);
}

static const struct pp_source_ops ops_read = { .read = t_read, .worker_open = t_open,
					       .worker_close = t_close };
static const struct pp_source_ops ops_bulk = { .read_batch = t_read_batch,
					       .worker_open = t_open, .worker_close = t_close };

static struct pp_source *make_source(struct tsrc *t, bool bulk)
{
	struct pp_source_desc d = { .name = "test4", .count = COUNT, .layout = &layout4,
				    .num_classes = 7, .ops = bulk ? &ops_bulk : &ops_read, .ctx = t };
	struct pp_source *src = NULL;

	memset(t, 0, sizeof(*t));
	t->fail_at = UINT64_MAX;
	ck_assert_msg(pp_source_create(&d, &src) == 0, "%s", pp_last_error());
	return src;
}

/* ------------------------------------------------------------------ transforms */

/* Adds a random offset to every image byte and writes a uniform draw into feat[1]. */
static int t_jitter(void *ctx, const struct pp_sample *s)
{
	uint8_t *img = s->fields[0];
	uint8_t off = (uint8_t)pp_rng_below(s->rng, 256);

	(void)ctx;
	for (size_t j = 0; j < IMG; j++)
		img[j] = (uint8_t)(img[j] + off);
	((float *)s->fields[3])[1] = pp_rng_uniform(s->rng);
	return 0;
}

static int t_failing(void *ctx, const struct pp_sample *s)
{
	return s->index == *(uint64_t *)ctx ? pp_set_error(-EDOM, "cannot bend sample") : 0;
}

static const struct pp_transform jitter = { .name = "jitter", .apply = t_jitter };

/* 255 - x over the first field, whatever its size. */
static int t_invert(void *ctx, const struct pp_sample *s)
{
	uint8_t *p = s->fields[0];

	(void)ctx;
	for (size_t j = 0; j < pp_field_bytes(&s->layout->fields[0]); j++)
		p[j] = (uint8_t)(255 - p[j]);
	return 0;
}

/* What sample id looks like after the jitter of (seed, epoch). */
static void jittered(uint64_t seed, uint64_t epoch, uint64_t id, uint8_t *img, float *feat1)
{
	struct pp_rng r;
	uint8_t off;

	pp_rng_init(&r, seed, epoch, id);
	off = (uint8_t)pp_rng_below(&r, 256);
	for (size_t j = 0; j < IMG; j++)
		img[j] = (uint8_t)(img_byte(id, j) + off);
	*feat1 = pp_rng_uniform(&r);
}

/* ------------------------------------------------------------------ checking batches */

static uint64_t digest(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* Checks every field of every sample of a host batch; returns the digest of its bytes. */
static uint64_t check_batch(const struct pp_batch *b, const struct pp_loader_config *cfg,
			    uint64_t epoch, uint64_t h)
{
	ck_assert_uint_eq(b->nfields, 4);
	ck_assert_ptr_eq(b->samples, b->fields[0]);
	ck_assert_ptr_eq(b->labels, b->fields[1]);
	for (uint32_t k = 0; k < b->size; k++) {
		uint64_t id = b->ids[k];
		uint8_t want[IMG];
		float f1 = feat_of(id, 1);

		for (size_t j = 0; j < IMG; j++)
			want[j] = img_byte(id, j);
		if (cfg->ntransforms > 0)
			jittered(cfg->seed, epoch, id, want, &f1);
		for (size_t j = 0; j < IMG; j++) {
			if (cfg->dtype == PP_DTYPE_F32) {
				size_t c = j / (H * W);
				float x = ((const float *)b->fields[0])[k * IMG + j];
				float e = ((float)want[j] / 255.0f - cfg->mean[c]) / cfg->std[c];
				ck_assert_msg(fabsf(x - e) < 1e-5f, "sample %llu byte %zu: %g, expected %g",
					      (unsigned long long)id, j, (double)x, (double)e);
			} else {
				ck_assert_uint_eq(((const uint8_t *)b->fields[0])[k * IMG + j], want[j]);
			}
		}
		ck_assert_int_eq(((const int32_t *)b->fields[1])[k], label_of(id));
		for (size_t j = 0; j < TOK; j++)
			ck_assert_uint_eq(((const uint16_t *)b->fields[2])[k * TOK + j], tok_of(id, j));
		ck_assert(((const float *)b->fields[3])[k * 2] == feat_of(id, 0));
		ck_assert(((const float *)b->fields[3])[k * 2 + 1] == f1);
	}
	h = digest(h, b->ids, b->size * sizeof(uint64_t));
	for (uint32_t f = 0; f < b->nfields; f++)
		h = digest(h, b->fields[f], b->size * (f == 0 && cfg->dtype == PP_DTYPE_F32 ? IMG * 4 :
			   f == 0 ? IMG : f == 1 ? 4 : f == 2 ? TOK * 2 : 8));
	return h;
}

/*
 * Runs 'epoch' from batch 'from' (a resume when > 0) to its end, checking
 * every batch; returns the digest, and each id's count in seen[] (real
 * samples only) when seen is not NULL.
 */
static uint64_t run_epoch(const struct pp_loader_config *cfg, uint64_t epoch, uint64_t from,
			  uint32_t *seen)
{
	struct pp_loader *l;
	struct pp_batch *b;
	uint64_t h = 0xcbf29ce484222325ull;
	int ret;

	ret = pp_loader_create(cfg, &l);
	ck_assert_msg(ret == 0, "create: %s", pp_last_error());
	if (from > 0) {
		struct pp_loader_position pos;
		ck_assert_int_eq(pp_loader_begin_epoch(l, epoch), 0);
		ck_assert_int_eq(pp_loader_get_position(l, &pos), 0);
		pos.batch = from;
		ck_assert_msg(pp_loader_resume(l, &pos) == 0, "%s", pp_last_error());
	} else {
		ck_assert_int_eq(pp_loader_begin_epoch(l, epoch), 0);
	}
	while ((ret = pp_loader_next(l, &b)) == 1) {
		h = check_batch(b, cfg, epoch, h);
		for (uint32_t k = 0; seen != NULL && k < b->size - b->padding; k++)
			seen[b->ids[k]]++;
		ck_assert_int_eq(pp_loader_release(l, b), 0);
	}
	ck_assert_msg(ret == 0, "next: %s", pp_last_error());
	pp_loader_destroy(l);
	return h;
}

/* ------------------------------------------------------------------ layouts and the generator */

/* Fails if a malformed layout is accepted, or a field is not named in the refusal. */
START_TEST(test_layout_check)
{
	struct pp_layout l = layout4;

	ck_assert_int_eq(pp_layout_check(&l), 0);
	ck_assert_int_eq(pp_layout_find(&l, "tokens"), 2);
	ck_assert_int_eq(pp_layout_find(&l, "nope"), -ENOENT);
	ck_assert_int_eq(pp_layout_labels(&l), 1);
	ck_assert_uint_eq(pp_field_bytes(&l.fields[0]), IMG);
	ck_assert_uint_eq(pp_field_bytes(&l.fields[1]), 4);
	ck_assert_uint_eq(pp_field_bytes(&l.fields[2]), TOK * 2);

	l.nfields = 0;
	ck_assert_int_eq(pp_layout_check(&l), -EINVAL);
	l = layout4;
	strcpy(l.fields[2].name, "labels");
	ck_assert_int_eq(pp_layout_check(&l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "\"labels\""));
	l = layout4;
	strcpy(l.fields[2].name, "to ken");
	ck_assert_int_eq(pp_layout_check(&l), -EINVAL);
	l = layout4;
	memset(l.fields[2].name, 'a', PP_FIELD_NAME_MAX);
	ck_assert_int_eq(pp_layout_check(&l), -EINVAL);
	l = layout4;
	l.fields[2].dtype = (enum pp_dtype)99;
	ck_assert_int_eq(pp_layout_check(&l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "(tokens)"));
	l = layout4;
	l.fields[2].shape[0] = 0;
	ck_assert_int_eq(pp_layout_check(&l), -EINVAL);
	l = layout4;
	l.fields[1].normalize = true;
	ck_assert_int_eq(pp_layout_check(&l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "normalize"));
	l = layout4;
	l.fields[0].ndim = 4;
	l.fields[0].shape[3] = 1u << 30;
	ck_assert_int_eq(pp_layout_check(&l), -EINVAL);
	/* a label that is not an int32 scalar is no class label */
	l = layout4;
	l.fields[1].ndim = 1;
	l.fields[1].shape[0] = 2;
	ck_assert_int_eq(pp_layout_labels(&l), -ENOENT);
}
END_TEST

/* Fails if the generator depends on anything but its three keys, or draws out of range. */
START_TEST(test_rng)
{
	struct pp_rng a, b;
	uint32_t buckets[10] = { 0 };

	pp_rng_init(&a, 1, 2, 3);
	pp_rng_init(&b, 1, 2, 3);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(pp_rng_next(&a), pp_rng_next(&b));
	pp_rng_init(&a, 1, 2, 3);
	for (int k = 0; k < 3; k++) {
		uint64_t key[3] = { 1, 2, 3 };
		key[k]++;
		pp_rng_init(&b, key[0], key[1], key[2]);
		ck_assert_uint_ne(pp_rng_next(&a), pp_rng_next(&b));
		pp_rng_init(&a, 1, 2, 3);
	}
	ck_assert_uint_eq(pp_rng_below(&a, 0), 0);
	for (int i = 0; i < 20000; i++) {
		float u = pp_rng_uniform(&a);
		uint64_t k = pp_rng_below(&a, 10);
		ck_assert(u >= 0.0f && u < 1.0f);
		ck_assert_uint_lt(k, 10);
		buckets[k]++;
	}
	/* 2000 expected per bucket; a biased or stuck draw leaves some far off */
	for (int k = 0; k < 10; k++)
		ck_assert_msg(buckets[k] > 1700 && buckets[k] < 2300, "bucket %d: %u", k, buckets[k]);
}
END_TEST

/* ------------------------------------------------------------------ through the loader */

/* Fails if a worker count or the bulk read changes a byte of any batch, or a field is misplaced. */
START_TEST(test_fields_workers)
{
	struct tsrc t;
	uint64_t ref = 0;
	uint32_t workers[3] = { 0, 1, 4 };

	for (int bulk = 0; bulk < 2; bulk++) {
		struct pp_source *src = make_source(&t, bulk);
		for (int w = 0; w < 3; w++) {
			struct pp_loader_config cfg = { .source = src, .batch_size = 16, .shuffle = true,
							.seed = 9, .workers = workers[w] };
			uint32_t seen[COUNT] = { 0 };
			uint64_t h = run_epoch(&cfg, 1, 0, seen);
			if (bulk == 0 && w == 0)
				ref = h;
			ck_assert_msg(h == ref, "bulk %d, %u workers: other batches", bulk, workers[w]);
			for (int i = 0; i < COUNT; i++)
				ck_assert_uint_eq(seen[i], 1);
			ck_assert_int_eq(atomic_load(&t.open_workers), 0);
			ck_assert_int_eq(atomic_load(&t.opened), (int)(workers[w] ? workers[w] : 1));
			atomic_store(&t.opened, 0);
		}
		pp_source_destroy(src);
	}
}
END_TEST

/* Fails if the layout handed out or the float32 conversion of the normalised field is wrong. */
START_TEST(test_fields_f32)
{
	struct tsrc t;
	struct pp_source *src = make_source(&t, false);
	struct pp_loader_config cfg = { .source = src, .batch_size = 10, .workers = 2,
					.dtype = PP_DTYPE_F32, .mean = { 0.5f, 0.25f, 0.125f },
					.std = { 0.5f, 2.0f, 0.25f } };
	struct pp_loader *l;
	const struct pp_layout *out;
	const struct pp_sample_info *info;
	uint32_t bs;
	size_t sb;

	ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
	out = pp_loader_layout(l);
	ck_assert_int_eq(out->fields[0].dtype, PP_DTYPE_F32);
	ck_assert_int_eq(out->fields[2].dtype, PP_DTYPE_U16);
	ck_assert_int_eq(pp_source_layout(src)->fields[0].dtype, PP_DTYPE_U8);
	info = pp_loader_info(l);
	ck_assert_uint_eq(info->count, COUNT);
	ck_assert_int_eq(info->label_kind, PP_LABEL_CLASS);
	ck_assert_uint_eq(info->num_classes, 7);
	ck_assert_int_eq(pp_loader_get_layout(l, &bs, &sb), 0);
	ck_assert_uint_eq(sb, IMG * 4);
	pp_loader_destroy(l);
	run_epoch(&cfg, 0, 0, NULL);
	pp_source_destroy(src);
}
END_TEST

/* Fails if the ranks overlap, miss a sample, or depend on the worker count. */
START_TEST(test_ranks)
{
	struct tsrc t;
	struct pp_source *src = make_source(&t, false);

	for (uint32_t ws = 1; ws <= 3; ws++) {
		uint32_t seen[COUNT] = { 0 };
		for (uint32_t r = 0; r < ws; r++) {
			struct pp_loader_config cfg = { .source = src, .batch_size = 8, .shuffle = true,
							.seed = 3, .rank = r, .world_size = ws };
			uint64_t h0 = run_epoch(&cfg, 2, 0, seen);
			cfg.workers = 3;
			ck_assert_uint_eq(run_epoch(&cfg, 2, 0, NULL), h0);
		}
		for (int i = 0; i < COUNT; i++)
			ck_assert_msg(seen[i] == 1, "world %u: sample %d seen %u times", ws, i, seen[i]);
	}
	pp_source_destroy(src);
}
END_TEST

/* Fails if a resume at another worker count hands out other batches than the whole epoch's rest. */
START_TEST(test_resume)
{
	struct tsrc t;
	struct pp_source *src = make_source(&t, true);
	struct pp_loader_config cfg = { .source = src, .batch_size = 16, .shuffle = true, .seed = 4,
					.workers = 1, .transforms = &jitter, .ntransforms = 1 };
	struct pp_loader *l;
	struct pp_batch *b;
	uint64_t h = 0xcbf29ce484222325ull;
	int ret, k = 0;

	/* the rest of epoch 5 after 4 batches, in one run ... */
	ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 5), 0);
	while ((ret = pp_loader_next(l, &b)) == 1) {
		if (k++ >= 4)
			h = check_batch(b, &cfg, 5, h);
		pp_loader_release(l, b);
	}
	ck_assert_int_eq(ret, 0);
	pp_loader_destroy(l);
	/* ... and resumed there by a loader of 4 workers */
	cfg.workers = 4;
	ck_assert_uint_eq(run_epoch(&cfg, 5, 4, NULL), h);
	pp_source_destroy(src);
}
END_TEST

/*
 * Fails if a transform's randomness depends on the worker count or the run,
 * or is the same in two epochs: each sample is checked against the draws of
 * a generator keyed by (seed, epoch, index) alone.
 */
START_TEST(test_transform)
{
	struct tsrc t;
	struct pp_source *src = make_source(&t, false);
	struct pp_loader_config cfg = { .source = src, .batch_size = 32, .shuffle = true, .seed = 21,
					.transforms = &jitter, .ntransforms = 1 };
	uint64_t e0, e1;

	e0 = run_epoch(&cfg, 0, 0, NULL);
	cfg.workers = 4;
	ck_assert_uint_eq(run_epoch(&cfg, 0, 0, NULL), e0);
	e1 = run_epoch(&cfg, 1, 0, NULL);
	ck_assert_uint_ne(e0, e1);
	cfg.dtype = PP_DTYPE_F32;
	cfg.std[0] = cfg.std[1] = cfg.std[2] = 1.0f;
	run_epoch(&cfg, 1, 0, NULL);
	pp_source_destroy(src);
}
END_TEST

/* Fails if a transform on a built-in dataset does not run, or runs on the wrong sample. */
START_TEST(test_transform_builtin)
{
	struct pp_synthetic_config sc = { .count = 50, .channels = 1, .height = 4, .width = 4,
					  .num_classes = 3, .seed = 2, .dtype = PP_DTYPE_U8 };
	struct pp_dataset *ds;
	struct pp_transform inv = { .name = "invert", .apply = NULL };
	struct pp_loader_config cfg = { .batch_size = 7, .workers = 2, .shuffle = true };
	struct pp_loader *l;
	struct pp_batch *b;
	uint8_t want[16];
	int32_t lab;
	int ret;

	ck_assert_int_eq(pp_dataset_create_synthetic(&sc, &ds), 0);
	cfg.dataset = ds;
	cfg.transforms = &inv;
	cfg.ntransforms = 1;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), -EINVAL);   /* no apply function */
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "invert"));
	inv.apply = t_invert;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
	ck_assert_uint_eq(pp_loader_layout(l)->nfields, 2);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1) {
		for (uint32_t k = 0; k < b->size; k++) {
			ck_assert_int_eq(pp_dataset_read(ds, b->ids[k], 1, want, &lab), 0);
			for (int j = 0; j < 16; j++)
				ck_assert_uint_eq(((uint8_t *)b->samples)[k * 16 + j], 255 - want[j]);
			ck_assert_int_eq(b->labels[k], lab);
		}
		pp_loader_release(l, b);
	}
	ck_assert_int_eq(ret, 0);
	pp_loader_destroy(l);
	pp_dataset_destroy(ds);
}
END_TEST

/* ------------------------------------------------------------------ errors */

/* Runs a loader to its first error and returns it, with the message in pp_last_error(). */
static int first_error(const struct pp_loader_config *cfg)
{
	struct pp_loader *l;
	struct pp_batch *b;
	char msg[1024];
	int ret, again;

	ck_assert_msg(pp_loader_create(cfg, &l) == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1)
		pp_loader_release(l, b);
	snprintf(msg, sizeof(msg), "%s", pp_last_error());
	/* once failed, the loader keeps saying so */
	again = pp_loader_next(l, &b);
	ck_assert_int_eq(again, ret);
	pp_loader_destroy(l);
	return pp_set_error(ret, "%s", msg);
}

/*
 * Fails if a failing source, transform or worker state is not named with
 * the sample, or hangs; or if a read that fails without a message is said
 * with an older failure's.
 */
START_TEST(test_errors)
{
	struct tsrc t;
	uint64_t bad = 77;
	struct pp_transform failing = { .name = "bend", .apply = t_failing, .ctx = &bad };
	uint32_t workers[2] = { 0, 3 };

	for (int bulk = 0; bulk < 2; bulk++) {
		struct pp_source *src = make_source(&t, bulk);
		for (int w = 0; w < 2; w++) {
			struct pp_loader_config cfg = { .source = src, .batch_size = 10, .shuffle = true,
							.workers = workers[w] };
			t.fail_at = 100;
			ck_assert_int_eq(first_error(&cfg), -EIO);
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "source test4"));
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "disk on fire"));
			if (!bulk)
				ck_assert_ptr_nonnull(strstr(pp_last_error(), "sample 100"));
			/* A read that fails without a message of its own: its code said,
			 * not an older failure's message (on 0 workers, the caller's). */
			t.quiet = true;
			pp_set_error(-EINVAL, "an older failure, elsewhere");
			ck_assert_int_eq(first_error(&cfg), -EIO);
			ck_assert_msg(strstr(pp_last_error(), "older failure") == NULL &&
				      strstr(pp_last_error(), pp_strerror(-EIO)) != NULL &&
				      strstr(pp_last_error(), "source test4") != NULL, "%s", pp_last_error());
			t.quiet = false;
			t.fail_at = UINT64_MAX;
			/* A whole epoch that fails nowhere leaves the thread's message as it was. */
			if (workers[w] == 0) {
				struct pp_loader *l;
				struct pp_batch *b;
				int ret;

				ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
				ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
				pp_set_error(-EINVAL, "the caller's own");
				while ((ret = pp_loader_next(l, &b)) == 1)
					pp_loader_release(l, b);
				ck_assert_int_eq(ret, 0);
				ck_assert_str_eq(pp_last_error(), "the caller's own");
				pp_loader_destroy(l);
			}
			cfg.transforms = &failing;
			cfg.ntransforms = 1;
			ck_assert_int_eq(first_error(&cfg), -EDOM);
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "transform bend: sample 77"));
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "cannot bend sample"));
			ck_assert_int_eq(atomic_load(&t.open_workers), 0);
		}
		t.fail_open = true;
		{
			struct pp_loader_config cfg = { .source = src, .workers = 2 };
			struct pp_loader *l = NULL;
			ck_assert_int_eq(pp_loader_create(&cfg, &l), -EMFILE);
			ck_assert_ptr_null(l);
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "no more handles"));
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "test4"));
		}
		ck_assert_int_eq(atomic_load(&t.open_workers), 0);
		pp_source_destroy(src);
	}
}
END_TEST

/* ------------------------------------------------------------------ shared fills */

/* A source whose reads take a while and say which thread made each sample. */
struct slow_src {
	uint64_t fail_at;                 /* read fails on this index (UINT64_MAX: never) */
	bool wait_helper;                 /* the first thread to read waits for a second */
	_Atomic unsigned long first;      /* that first thread */
	_Atomic unsigned long thread_of[64]; /* the thread that read sample i */
};

/* Whether a thread other than 'self' has read a sample. */
static bool other_reader(struct slow_src *t, unsigned long self)
{
	for (int i = 0; i < 64; i++) {
		unsigned long th = atomic_load(&t->thread_of[i]);
		if (th != 0 && th != self)
			return true;
	}
	return false;
}

static int slow_read(void *ctx, void *wctx, const struct pp_sample *s)
{
	struct slow_src *t = ctx;
	unsigned long self = (unsigned long)pthread_self(), none = 0;

	(void)wctx;
	atomic_store(&t->thread_of[s->index % 64], self);
	usleep(1000);
	/* However slow the machine, a helper that joins within 10 s is seen joining. */
	if (t->wait_helper && atomic_compare_exchange_strong(&t->first, &none, self))
		for (int ms = 0; ms < 10000 && !other_reader(t, self); ms++)
			usleep(1000);
	/* A message as long as a deep path's: a helper's is not cut short. */
	if (s->index == t->fail_at)
		return pp_set_error(-EIO, "/data/%0600d/x.jpg: slow disk gave up at %llu", 0,
				    (unsigned long long)s->index);
	fill_one(s->index, s->fields, 0);
	return 0;
}

/*
 * The epoch's last batch shared by the workers with none left to claim
 * (loader/worker.c, fill_shared()): one batch of 64 slow samples an epoch
 * on 4 workers is read by more than one thread, and gives the batch of 1
 * worker (which reads it alone), sample for sample; a sample that fails,
 * whichever thread read it, fails the batch with the source's message,
 * whole (as long as a deep path's), and the loader says so again and is
 * destroyed (no hang).  Fails if the idle workers do not help, if a
 * helper's sample lands elsewhere or is left out, or if a helper's failure
 * is lost, cut short or hangs the filler.
 */
START_TEST(test_shared_fills)
{
	static const struct pp_source_ops ops = { .read = slow_read };
	struct slow_src t;
	struct pp_source_desc d = { .name = "slow", .count = 64, .layout = &layout4,
				    .num_classes = 7, .ops = &ops, .ctx = &t };
	struct pp_source *src = NULL;
	uint64_t h[2];

	memset(&t, 0, sizeof(t));
	t.fail_at = UINT64_MAX;
	ck_assert_msg(pp_source_create(&d, &src) == 0, "%s", pp_last_error());
	for (int k = 0; k < 2; k++) {
		struct pp_loader_config cfg = { .source = src, .batch_size = 64, .shuffle = true,
						.seed = 5, .workers = k ? 4 : 1 };
		uint32_t seen[COUNT] = { 0 };
		unsigned long threads[64];
		int distinct = 0;

		for (int i = 0; i < 64; i++)
			atomic_store(&t.thread_of[i], 0ul);
		atomic_store(&t.first, 0ul);
		t.wait_helper = k == 1;
		h[k] = run_epoch(&cfg, 2, 0, seen);
		for (int i = 0; i < 64; i++) {
			unsigned long th = atomic_load(&t.thread_of[i]);
			bool known = false;

			ck_assert_uint_eq(seen[i], 1);
			ck_assert_uint_ne(th, 0);
			for (int j = 0; j < distinct; j++)
				known = known || threads[j] == th;
			if (!known)
				threads[distinct++] = th;
		}
		if (k == 0)
			ck_assert_int_eq(distinct, 1);
		else
			ck_assert_msg(distinct >= 2, "4 workers: the batch was read by %d thread(s)",
				      distinct);
	}
	ck_assert_msg(h[0] == h[1], "the shared batch differs from one worker's");
	t.wait_helper = false;
	for (uint64_t bad = 0; bad < 64; bad += 21) {
		struct pp_loader_config cfg = { .source = src, .batch_size = 64, .shuffle = true,
						.seed = 5, .workers = 4 };
		char want[64];

		t.fail_at = bad;
		snprintf(want, sizeof(want), "slow disk gave up at %llu", (unsigned long long)bad);
		ck_assert_int_eq(first_error(&cfg), -EIO);
		ck_assert_msg(strstr(pp_last_error(), want) != NULL, "sample %llu: %s",
			      (unsigned long long)bad, pp_last_error());
	}
	pp_source_destroy(src);
}
END_TEST

/* Fails if a bad source description, a layout over the budget or two sources are accepted. */
START_TEST(test_refused)
{
	struct tsrc t = { .fail_at = UINT64_MAX };
	struct pp_layout big = layout4;
	struct pp_source_ops none = { 0 };
	struct pp_source_desc d = { .name = "bad", .count = 10, .layout = &layout4, .ops = &none,
				    .ctx = &t };
	struct pp_source *src = NULL;
	struct pp_loader_config cfg = { .batch_size = 64, .memory_budget = 1 << 20 };
	struct pp_loader *l = NULL;
	struct pp_synthetic_config sc = { .count = 5, .channels = 1, .height = 2, .width = 2,
					  .num_classes = 2, .dtype = PP_DTYPE_U8 };
	struct pp_dataset *ds;

	ck_assert_int_eq(pp_source_create(&d, &src), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "bad"));
	d.ops = &ops_read;
	d.count = 0;
	ck_assert_int_eq(pp_source_create(&d, &src), -EINVAL);
	d.count = 10;
	big.fields[2].dtype = (enum pp_dtype)0;
	d.layout = &big;
	ck_assert_int_eq(pp_source_create(&d, &src), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "(tokens)"));
	ck_assert_ptr_null(src);

	/* 64 samples of 64 KiB tokens do not fit a 1 MiB budget */
	big = layout4;
	big.fields[2].shape[0] = 32768;
	d.layout = &big;
	ck_assert_int_eq(pp_source_create(&d, &src), 0);
	cfg.source = src;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), -ENOMEM);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "budget"));
	ck_assert_ptr_null(l);

	/* exactly one source */
	ck_assert_int_eq(pp_dataset_create_synthetic(&sc, &ds), 0);
	cfg.dataset = ds;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "a source"));
	/* a transform array without its length */
	cfg.dataset = NULL;
	cfg.memory_budget = 0;
	cfg.transforms = &jitter;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), -EINVAL);
	pp_dataset_destroy(ds);
	pp_source_destroy(src);
}
END_TEST

/* ------------------------------------------------------------------ a file-backed source */

#define REC 40   /* a record of the file: 32 bytes of image, then the label, then 4 spare */

struct fsrc {
	const char *path;
};

static int f_open(void *ctx, void **wctx_p)
{
	struct fsrc *f = ctx;
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return pp_set_error(-errno, "%s: cannot open", f->path);
	*wctx_p = (void *)(intptr_t)(fd + 1);
	return 0;
}

static void f_close(void *ctx, void *wctx)
{
	(void)ctx;
	close((int)(intptr_t)wctx - 1);
}

static int f_read(void *ctx, void *wctx, const struct pp_sample *s)
{
	struct fsrc *f = ctx;
	uint8_t rec[REC];
	ssize_t n = pread((int)(intptr_t)wctx - 1, rec, REC, (off_t)(s->index * REC));

	if (n != REC)
		return pp_set_error(-EIO, "%s: record %llu: %zd of %d bytes", f->path,
				    (unsigned long long)s->index, n, REC);
	memcpy(s->fields[0], rec, 32);
	memcpy(s->fields[1], rec + 32, 4);
	return 0;
}

/* Fails if a source that reads a file on its workers delivers other bytes, or a short file is not named. */
START_TEST(test_file_source)
{
	static const struct pp_source_ops fops = { .read = f_read, .worker_open = f_open,
						   .worker_close = f_close };
	struct pp_layout lay = { .nfields = 2, .fields = {
		{ .name = "pixels", .dtype = PP_DTYPE_U8, .ndim = 2, .shape = { 4, 8 } },
		{ .name = "label", .dtype = PP_DTYPE_I32 } } };
	char *dir = pp_test_tmpdir(), path[512];
	uint8_t *file = malloc(100 * REC);
	struct fsrc fs = { .path = path };
	struct pp_source_desc d = { .name = "file", .count = 100, .layout = &lay, .num_classes = 5,
				    .ops = &fops, .ctx = &fs };
	struct pp_source *src;
	struct pp_loader_config cfg = { .batch_size = 9, .shuffle = true, .workers = 2, .seed = 1 };
	struct pp_loader *l;
	struct pp_batch *b;
	uint32_t seen[100] = { 0 };
	int ret;

	snprintf(path, sizeof(path), "%s/records.bin", dir);
	pp_test_fill_random(file, 100 * REC, 5);
	for (int i = 0; i < 100; i++) {
		int32_t lab = i % 5;
		memcpy(file + i * REC + 32, &lab, 4);
	}
	pp_test_write_file(path, file, 100 * REC);
	ck_assert_int_eq(pp_source_create(&d, &src), 0);
	cfg.source = src;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1) {
		ck_assert_ptr_eq(b->labels, b->fields[1]);
		for (uint32_t k = 0; k < b->size; k++) {
			uint64_t id = b->ids[k];
			ck_assert_mem_eq((uint8_t *)b->fields[0] + k * 32, file + id * REC, 32);
			ck_assert_int_eq(b->labels[k], (int32_t)(id % 5));
			seen[id]++;
		}
		pp_loader_release(l, b);
	}
	ck_assert_int_eq(ret, 0);
	pp_loader_destroy(l);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(seen[i], 1);

	/* cut the file short: the first sample past its end is named, with the file */
	ck_assert_int_eq(truncate(path, 60 * REC + 7), 0);
	ck_assert_int_eq(first_error(&cfg), -EIO);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "records.bin: record"));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "source file: sample"));
	pp_source_destroy(src);
	free(file);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/* ------------------------------------------------------------------ through the transfer stage */

/*
 * Fails if a device batch lacks a field, holds it elsewhere than its index
 * says, or holds other bytes than the host batch (cpu: in place; sim: a
 * copy, read back from the device).
 */
START_TEST(test_transfer)
{
	static const char *const devs[] = { "cpu", "sim" };
	struct tsrc t;
	struct pp_source *src = make_source(&t, false);

	for (int di = 0; di < 2; di++) {
		struct pp_device *dev;
		struct pp_stream *compute;
		struct pp_loader *l;
		struct pp_transfer *tr;
		struct pp_device_batch *db;
		struct pp_loader_config cfg = { .source = src, .batch_size = 12, .shuffle = true,
						.workers = 2, .pin_memory = true };
		struct pp_transfer_config tc = { .time_every = 1 };
		uint32_t seen[COUNT] = { 0 };
		int ret;

		ck_assert_int_eq(pp_device_open(devs[di], &dev), 0);
		cfg.device = dev;
		ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
		tc.loader = l;
		tc.device = dev;
		ck_assert_msg(pp_transfer_create(&tc, &tr) == 0, "%s", pp_last_error());
		ck_assert_int_eq(pp_stream_create(dev, &compute), 0);
		ck_assert_int_eq(pp_transfer_begin_epoch(tr, 0), 0);
		while ((ret = pp_transfer_next(tr, compute, &db)) == 1) {
			struct pp_batch hb = { .size = db->size, .nfields = db->nfields,
					       .ids = (uint64_t *)db->host_ids };
			size_t bytes[4] = { IMG, 4, TOK * 2, 8 };
			void *host[4];
			ck_assert_uint_eq(db->nfields, 4);
			ck_assert_ptr_eq(db->samples, db->fields[0]);
			ck_assert_ptr_eq(db->labels, db->fields[1]);
			ck_assert_int_eq(pp_event_synchronize(db->ready), 0);
			for (int f = 0; f < 4; f++) {
				host[f] = malloc(bytes[f] * db->size);
				if (pp_device_get_props(dev)->host_is_device)
					memcpy(host[f], db->fields[f], bytes[f] * db->size);
				else
					ck_assert_int_eq(pp_memcpy_async(host[f], db->fields[f],
									 bytes[f] * db->size,
									 PP_COPY_D2H, compute), 0);
				hb.fields[f] = host[f];
			}
			ck_assert_int_eq(pp_stream_synchronize(compute), 0);
			hb.samples = hb.fields[0];
			hb.labels = hb.fields[1];
			check_batch(&hb, &cfg, 0, 0);
			for (uint32_t k = 0; k < db->size; k++) {
				ck_assert_int_eq(db->host_labels[k], label_of(db->host_ids[k]));
				seen[db->host_ids[k]]++;
			}
			for (int f = 0; f < 4; f++)
				free(host[f]);
			ck_assert_int_eq(pp_transfer_release(tr, db, compute), 0);
		}
		ck_assert_msg(ret == 0, "%s: %s", devs[di], pp_last_error());
		for (int i = 0; i < COUNT; i++)
			ck_assert_uint_eq(seen[i], 1);
		pp_transfer_destroy(tr);
		pp_stream_destroy(compute);
		pp_loader_destroy(l);
		pp_device_close(dev);
	}
	pp_source_destroy(src);
}
END_TEST

/* ------------------------------------------------------------------ version 2 shards */

/*
 * Records of varying length: record id holds (id % 13) + 1 repeats of the
 * byte id & 0xff, then nothing else; the decoder "count" turns it into
 * "n": i32 (the length) and "first": u8[4] (the byte, four times).
 */
static const struct pp_layout count_layout = { .nfields = 2, .fields = {
	{ .name = "n", .dtype = PP_DTYPE_I32 },
	{ .name = "first", .dtype = PP_DTYPE_U8, .ndim = 1, .shape = { 4 } } } };

static int count_decode(void *ctx, const void *record, size_t len, const struct pp_sample *s)
{
	const uint8_t *r = record;

	(void)ctx;
	if (len == 0 || r[0] == 0xee)
		return pp_set_error(-EBADMSG, "a poisoned record");
	*(int32_t *)s->fields[0] = (int32_t)len;
	memset(s->fields[1], r[0], 4);
	return 0;
}

/* Writes 'n' records of the "count" kind (from 'first' on) in shards of 'per_shard' records. */
static void write_count_shards(const char *dir, uint64_t n, uint64_t per_shard, char **paths,
			       uint64_t poison)
{
	struct pp_sample_info info = { .label_kind = PP_LABEL_CLASS, .num_classes = 5 };
	struct pp_shard_writer_config wc = { .info = &info, .records_per_chunk = 7, .level = 1,
					     .layout = &count_layout, .decoder = "count" };
	uint8_t rec[16];

	for (uint64_t i = 0, sh = 0; i < n; sh++) {
		struct pp_shard_writer *w;
		paths[sh] = malloc(512);
		snprintf(paths[sh], 512, "%s/count-%03llu.pps", dir, (unsigned long long)sh);
		ck_assert_msg(pp_shard_writer_create(paths[sh], &wc, &w) == 0, "%s", pp_last_error());
		for (uint64_t k = 0; k < per_shard && i < n; k++, i++) {
			memset(rec, i == poison ? 0xee : (int)(i & 0xff), sizeof(rec));
			ck_assert_int_eq(pp_shard_writer_add_record(w, rec, i % 13 + 1, (int32_t)(i % 5)),
					 0);
		}
		ck_assert_msg(pp_shard_writer_finish(w) == 0, "%s", pp_last_error());
		pp_shard_writer_destroy(w);
	}
}

/* One epoch of a version 2 set: each sample checked, the digest of every batch returned. */
static uint64_t count_epoch(const struct pp_loader_config *cfg, uint64_t n, uint32_t *seen)
{
	struct pp_loader *l;
	struct pp_batch *b;
	uint64_t h = 0xcbf29ce484222325ull;
	int ret;

	ck_assert_msg(pp_loader_create(cfg, &l) == 0, "create: %s", pp_last_error());
	ck_assert_uint_eq(pp_loader_layout(l)->nfields, 3);
	ck_assert_int_eq(pp_layout_labels(pp_loader_layout(l)), 2);
	ck_assert_uint_eq(pp_loader_info(l)->count, n);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 1), 0);
	while ((ret = pp_loader_next(l, &b)) == 1) {
		for (uint32_t k = 0; k < b->size; k++) {
			uint64_t id = b->ids[k];
			ck_assert_int_eq(((int32_t *)b->fields[0])[k], (int32_t)(id % 13 + 1));
			for (int j = 0; j < 4; j++)
				ck_assert_uint_eq(((uint8_t *)b->fields[1])[k * 4 + j], id & 0xff);
			ck_assert_int_eq(b->labels[k], (int32_t)(id % 5));
			if (seen != NULL && k < b->size - b->padding)
				seen[id]++;
		}
		h = digest(h, b->ids, b->size * 8);
		h = digest(h, b->fields[0], b->size * 4);
		h = digest(h, b->fields[1], b->size * 4);
		pp_loader_release(l, b);
	}
	ck_assert_msg(ret == 0, "next: %s", pp_last_error());
	pp_loader_destroy(l);
	return h;
}

/*
 * Fails if records of varying length are not decoded by the set's decoder,
 * held in memory or streamed, with the same batches at 0 and 3 workers and
 * on 1..3 ranks together covering the set.
 */
START_TEST(test_records)
{
	const struct pp_decoder count = { .name = "count", .decode = count_decode };
	char *dir = pp_test_tmpdir(), *paths[4] = { 0 };
	uint64_t n = 150;

	write_count_shards(dir, n, 40, paths, UINT64_MAX);
	for (int stream = 0; stream < 2; stream++) {
		struct pp_loader_config cfg = { .shard_paths = (const char *const *)paths, .nshards = 4,
						.batch_size = 8, .shuffle = true, .seed = 6,
						.decoders = &count, .ndecoders = 1,
						.io = pp_test_io_pread() ? PP_LOADER_IO_PREAD : 0,
						.cache = stream ? PP_LOADER_CACHE_STREAM
								: PP_LOADER_CACHE_MEMORY,
						.window_chunks = 3 };
		uint32_t seen[150] = { 0 };
		uint64_t h0 = count_epoch(&cfg, n, seen);
		for (uint64_t i = 0; i < n; i++)
			ck_assert_uint_eq(seen[i], 1);
		cfg.workers = 3;
		ck_assert_uint_eq(count_epoch(&cfg, n, NULL), h0);
		for (uint32_t ws = 2; ws <= 3; ws++) {
			memset(seen, 0, sizeof(seen));
			cfg.world_size = ws;
			for (uint32_t r = 0; r < ws; r++) {
				cfg.rank = r;
				count_epoch(&cfg, n, seen);
			}
			for (uint64_t i = 0; i < n; i++)
				ck_assert_msg(seen[i] == 1, "stream %d, %u ranks: sample %llu seen %u "
					      "times", stream, ws, (unsigned long long)i, seen[i]);
			cfg.rank = 0;
			cfg.world_size = 1;
		}
	}
	for (int i = 0; i < 4; i++)
		free(paths[i]);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if the built-in "raw" decoder over version 2 records of fixed-size
 * samples gives other batches than version 1 shards of the same samples.
 */
START_TEST(test_records_raw_as_v1)
{
	struct pp_sample_info info = { .dtype = PP_DTYPE_U8, .ndim = 3, .shape = { 1, 3, 5 },
				       .sample_bytes = 15, .label_kind = PP_LABEL_CLASS,
				       .num_classes = 4 };
	struct pp_layout lay = { .nfields = 1, .fields = {
		{ .name = "samples", .dtype = PP_DTYPE_U8, .ndim = 3, .shape = { 1, 3, 5 },
		  .normalize = true } } };
	char *dir = pp_test_tmpdir(), p1[512], p2[512];
	const char *s1 = p1, *s2 = p2;
	uint8_t samples[97 * 15];
	int32_t labels[97];
	uint64_t h[2][2];

	pp_test_fill_random(samples, sizeof(samples), 8);
	for (int i = 0; i < 97; i++)
		labels[i] = i % 4;
	snprintf(p1, sizeof(p1), "%s/v1.pps", dir);
	snprintf(p2, sizeof(p2), "%s/v2.pps", dir);
	for (int v = 0; v < 2; v++) {
		struct pp_shard_writer_config wc = { .info = &info, .records_per_chunk = 10,
						     .layout = v ? &lay : NULL };
		struct pp_shard_writer *w;
		ck_assert_int_eq(pp_shard_writer_create(v ? p2 : p1, &wc, &w), 0);
		if (v == 0)
			ck_assert_int_eq(pp_shard_writer_add(w, samples, labels, 97), 0);
		for (int i = 0; v == 1 && i < 97; i++)
			ck_assert_int_eq(pp_shard_writer_add_record(w, samples + i * 15, 15, labels[i]),
					 0);
		ck_assert_msg(pp_shard_writer_finish(w) == 0, "%s", pp_last_error());
		pp_shard_writer_destroy(w);
	}
	for (int v = 0; v < 2; v++) {
		for (int stream = 0; stream < 2; stream++) {
			struct pp_loader_config cfg = { .shard_paths = v ? &s2 : &s1, .nshards = 1,
							.batch_size = 6, .shuffle = true, .workers = 2,
							.dtype = PP_DTYPE_F32, .mean = { 0.5f },
							.std = { 0.25f }, .window_chunks = 2,
							.io = pp_test_io_pread() ? PP_LOADER_IO_PREAD : 0,
							.cache = stream ? PP_LOADER_CACHE_STREAM
									: PP_LOADER_CACHE_MEMORY };
			struct pp_loader *l;
			struct pp_batch *b;
			uint64_t d = 0xcbf29ce484222325ull;
			int ret;

			ck_assert_msg(pp_loader_create(&cfg, &l) == 0, "%s", pp_last_error());
			ck_assert_int_eq(pp_loader_layout(l)->fields[0].dtype, PP_DTYPE_F32);
			ck_assert_int_eq(pp_loader_begin_epoch(l, 2), 0);
			while ((ret = pp_loader_next(l, &b)) == 1) {
				d = digest(d, b->ids, b->size * 8);
				d = digest(d, b->samples, b->size * 15 * 4);
				d = digest(d, b->labels, b->size * 4);
				pp_loader_release(l, b);
			}
			ck_assert_int_eq(ret, 0);
			pp_loader_destroy(l);
			h[v][stream] = d;
		}
	}
	ck_assert_uint_eq(h[0][0], h[1][0]);
	ck_assert_uint_eq(h[0][1], h[1][1]);
	/* one set of both versions is refused */
	{
		const char *both[2] = { p1, p2 };
		struct pp_loader_config cfg = { .shard_paths = both, .nshards = 2 };
		struct pp_loader *l = NULL;
		ck_assert_int_eq(pp_loader_create(&cfg, &l), -EINVAL);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "version"));
	}
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/* Fails if a missing decoder or a failing one is not named with the shard, record and sample. */
START_TEST(test_records_errors)
{
	const struct pp_decoder count = { .name = "count", .decode = count_decode };
	char *dir = pp_test_tmpdir(), *paths[2] = { 0 };
	struct pp_loader_config cfg = { .nshards = 2, .batch_size = 5, .workers = 2,
					.io = pp_test_io_pread() ? PP_LOADER_IO_PREAD : 0 };
	struct pp_loader *l = NULL;

	write_count_shards(dir, 60, 30, paths, 44);
	cfg.shard_paths = (const char *const *)paths;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "\"count\""));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "count-000.pps"));
	cfg.decoders = &count;
	cfg.ndecoders = 1;
	for (int stream = 0; stream < 2; stream++) {
		cfg.cache = stream ? PP_LOADER_CACHE_STREAM : PP_LOADER_CACHE_MEMORY;
		ck_assert_int_eq(first_error(&cfg), -EBADMSG);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "decoder count: sample 44"));
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "count-001.pps, chunk 2, record 14"));
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "a poisoned record"));
	}
	for (int i = 0; i < 2; i++)
		free(paths[i]);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("source");
	TCase *tc = tcase_create("layout");

	tcase_add_test(tc, test_layout_check);
	tcase_add_test(tc, test_rng);
	suite_add_tcase(s, tc);
	tc = tcase_create("loader");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_fields_workers);
	tcase_add_test(tc, test_fields_f32);
	tcase_add_test(tc, test_ranks);
	tcase_add_test(tc, test_resume);
	tcase_add_test(tc, test_transform);
	tcase_add_test(tc, test_transform_builtin);
	tcase_add_test(tc, test_file_source);
	tcase_add_test(tc, test_transfer);
	tcase_add_test(tc, test_records);
	tcase_add_test(tc, test_records_raw_as_v1);
	suite_add_tcase(s, tc);
	tc = tcase_create("errors");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_shared_fills);
	tcase_add_test(tc, test_records_errors);
	suite_add_tcase(s, tc);
	return s;
}
