/*
 * tests/test_loader.c: the loader: every sample once per epoch over batch
 * sizes, drop rules, worker counts, world sizes and cache modes; the same
 * order for every worker count; resuming from a saved position; worker
 * errors, destroy under load, a consumer that never releases; the io_uring
 * and pread reads; real shards and datasets.
 *
 * Most tests run over test-only sources whose sample i encodes i, so that
 * every delivered sample can be checked against its id: an array in memory,
 * a gather callback, and chunks decoded by a callback that can be told to
 * fail on one chunk or to be slow.
 */
#include "config.h"

#include <check.h>
#include <math.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "loader/convert.h"
#include "loader/loader_impl.h"
#include "tests/testutil.h"

#define SAMPLE_BYTES 12
#define NCLASSES 10

/* Byte j of sample i: its id in the first 4 bytes, then a pattern of (i, j). */
static uint8_t sample_byte(uint64_t i, size_t j)
{
	if (j < 4)
		return (uint8_t)(i >> (8 * j));
	return (uint8_t)(i * 31 + j * 7);
}

static int32_t sample_label(uint64_t i)
{
	return (int32_t)((i * 7 + 3) % NCLASSES);
}

/* A test source: n samples of SAMPLE_BYTES, kept as an array, a gather callback or chunks. */
struct tsource {
	uint64_t n;
	uint8_t *samples;
	int32_t *labels;
	struct pp_plan_chunk *chunks;
	size_t nchunks;
	int64_t fail_chunk;     /* chunk whose decoding fails, or -1 */
	unsigned delay_us;      /* per chunk load */
	int workers_alive;      /* per-thread states not yet destroyed */
	pthread_mutex_t mu;
};

static void tsource_destroy(void *ctx)
{
	struct tsource *t = ctx;

	ck_assert_int_eq(t->workers_alive, 0);
	pthread_mutex_destroy(&t->mu);
	free(t->samples);
	free(t->labels);
	free(t->chunks);
	free(t);
}

static int tsource_gather(void *ctx, const uint64_t *ids, size_t n, void *samples, int32_t *labels)
{
	struct tsource *t = ctx;

	for (size_t k = 0; k < n; k++) {
		if (ids[k] >= t->n)
			return pp_error(-ERANGE, "test: id %llu out of range", (unsigned long long)ids[k]);
		memcpy((uint8_t *)samples + k * SAMPLE_BYTES, t->samples + ids[k] * SAMPLE_BYTES,
		       SAMPLE_BYTES);
		if (labels != NULL)
			labels[k] = t->labels[ids[k]];
	}
	return 0;
}

static int tsource_worker_create(void *ctx, void **wctx_p)
{
	struct tsource *t = ctx;
	int *w = malloc(sizeof(int));

	if (w == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&t->mu);
	t->workers_alive++;
	pthread_mutex_unlock(&t->mu);
	*wctx_p = w;
	return 0;
}

static void tsource_worker_destroy(void *ctx, void *wctx)
{
	struct tsource *t = ctx;

	pthread_mutex_lock(&t->mu);
	t->workers_alive--;
	pthread_mutex_unlock(&t->mu);
	free(wctx);
}

static int tsource_load(void *ctx, void *wctx, const uint32_t *ids, size_t n, void *const *dst,
			struct pp_loader_work *work)
{
	struct tsource *t = ctx;

	(void)wctx;
	for (size_t k = 0; k < n; k++) {
		const struct pp_plan_chunk *ch = &t->chunks[ids[k]];
		uint8_t *raw = dst[k];
		if (t->delay_us)
			usleep(t->delay_us);
		if ((int64_t)ids[k] == t->fail_chunk)
			return pp_error(-EBADMSG, "test.pps: chunk %u at offset %u: CRC-32 mismatch",
					ids[k], ids[k] * 4096);
		for (uint32_t j = 0; j < ch->records; j++)
			pp_put_le32(raw + 4 * j, (uint32_t)t->labels[ch->first_id + j]);
		memcpy(raw + 4 * ch->records, t->samples + ch->first_id * SAMPLE_BYTES,
		       (size_t)ch->records * SAMPLE_BYTES);
		work->chunks++;
	}
	return 0;
}

/* The I/O path of the tests that let the loader choose: pread under valgrind (pp_test_io_pread()). */
static enum pp_loader_io auto_io(void)
{
	return pp_test_io_pread() ? PP_LOADER_IO_PREAD : PP_LOADER_IO_AUTO;
}

enum tkind { T_ARRAY, T_GATHER, T_CHUNKS };

/* Makes a source of n samples; chunks of 'per_chunk' records (the last one shorter). */
static struct pp_loader_source tsource_make(enum tkind kind, uint64_t n, uint32_t per_chunk,
					    struct tsource **t_p)
{
	struct tsource *t = calloc(1, sizeof(*t));
	struct pp_loader_source src = { 0 };

	ck_assert_ptr_nonnull(t);
	t->n = n;
	t->fail_chunk = -1;
	pthread_mutex_init(&t->mu, NULL);
	t->samples = malloc(n * SAMPLE_BYTES + 1);
	t->labels = malloc(n * sizeof(int32_t) + 1);
	ck_assert_ptr_nonnull(t->samples);
	ck_assert_ptr_nonnull(t->labels);
	for (uint64_t i = 0; i < n; i++) {
		for (size_t j = 0; j < SAMPLE_BYTES; j++)
			t->samples[i * SAMPLE_BYTES + j] = sample_byte(i, j);
		t->labels[i] = sample_label(i);
	}
	src.info = (struct pp_sample_info){ .count = n, .dtype = PP_DTYPE_U8, .ndim = 3,
					    .shape = { 1, 3, 4 }, .sample_bytes = SAMPLE_BYTES,
					    .label_kind = PP_LABEL_CLASS, .num_classes = NCLASSES };
	src.destroy = tsource_destroy;
	src.ctx = t;
	if (kind == T_ARRAY) {
		src.samples = t->samples;
		src.labels = t->labels;
	} else if (kind == T_GATHER) {
		src.gather = tsource_gather;
	} else {
		t->nchunks = (n + per_chunk - 1) / per_chunk;
		t->chunks = calloc(t->nchunks + 1, sizeof(*t->chunks));
		ck_assert_ptr_nonnull(t->chunks);
		for (size_t c = 0; c < t->nchunks; c++) {
			t->chunks[c].shard = 0;
			t->chunks[c].index = c;
			t->chunks[c].first_id = c * per_chunk;
			t->chunks[c].records = (uint32_t)PP_MIN((uint64_t)per_chunk, n - c * per_chunk);
			t->chunks[c].raw_bytes = t->chunks[c].records * (size_t)(SAMPLE_BYTES + 4);
		}
		src.chunks = t->chunks;
		src.nchunks = t->nchunks;
		src.max_stored = (size_t)per_chunk * (SAMPLE_BYTES + 4);
		src.worker_create = tsource_worker_create;
		src.worker_destroy = tsource_worker_destroy;
		src.load_chunks = tsource_load;
	}
	if (t_p != NULL)
		*t_p = t;
	return src;
}

static struct pp_loader *make_loader(enum tkind kind, uint64_t n, uint32_t per_chunk,
				     const struct pp_loader_config *cfg, struct tsource **t_p)
{
	struct pp_loader_source src = tsource_make(kind, n, per_chunk, t_p);
	struct pp_loader *l = NULL;
	int ret = pp_loader_create_source(cfg, &src, &l);

	ck_assert_msg(ret == 0, "create: %s", pp_last_error());
	return l;
}

/* Checks that every sample of the batch is the one its id names, in u8 or normalised f32. */
static void check_batch_content(const struct pp_batch *b, const struct pp_loader_config *cfg)
{
	for (uint32_t k = 0; k < b->size; k++) {
		uint64_t id = b->ids[k];
		ck_assert_int_eq(b->labels[k], sample_label(id));
		for (size_t j = 0; j < SAMPLE_BYTES; j++) {
			uint8_t x = sample_byte(id, j);
			if (b->dtype == PP_DTYPE_U8) {
				ck_assert_uint_eq(((uint8_t *)b->samples)[k * SAMPLE_BYTES + j], x);
			} else {
				float sd = cfg->std[0] != 0.0f ? cfg->std[0] : 1.0f;
				float want = (x / 255.0f - cfg->mean[0]) / sd;
				float got = ((float *)b->samples)[k * SAMPLE_BYTES + j];
				ck_assert_msg(got > want - 1e-5f && got < want + 1e-5f,
					      "sample %llu byte %zu: %g, want %g",
					      (unsigned long long)id, j, (double)got, (double)want);
			}
		}
	}
}

/*
 * Runs one epoch and appends the ids it delivered (all of them, padding
 * included) to ids[], and 1 for padding to pad[]; returns the batch count.
 */
static uint64_t run_epoch(struct pp_loader *l, uint64_t epoch, const struct pp_loader_config *cfg,
			  uint64_t *ids, uint8_t *pad, uint64_t *n_p, bool check_content)
{
	struct pp_batch *b;
	uint64_t nb = 0, bs = cfg->batch_size;
	int ret;

	ck_assert_int_eq(pp_loader_begin_epoch(l, epoch), 0);
	while ((ret = pp_loader_next(l, &b)) == 1) {
		ck_assert_uint_eq(b->index, nb);
		ck_assert_uint_eq(b->epoch, epoch);
		ck_assert_uint_le(b->size, bs);
		ck_assert_uint_le(b->padding, b->size);
		if (cfg->drop_last)
			ck_assert_uint_eq(b->size, bs);
		if (check_content)
			check_batch_content(b, cfg);
		for (uint32_t k = 0; k < b->size; k++) {
			ids[*n_p] = b->ids[k];
			pad[*n_p] = k >= b->size - b->padding;
			(*n_p)++;
		}
		nb++;
		ck_assert_int_eq(pp_loader_release(l, b), 0);
	}
	ck_assert_msg(ret == 0, "next: %s", pp_last_error());
	ck_assert_ptr_null(b);
	ck_assert_uint_eq(nb, pp_loader_batches_per_epoch(l));
	return nb;
}

/*
 * Every sample once per epoch (loops over kinds, drop rules and world sizes
 * for one batch size and worker count).  Fails if a sample is missing,
 * repeated without being marked as padding, delivered by two ranks, wrong in
 * content, or if ranks get different batch counts.
 */
static void exactly_once(enum tkind kind, enum pp_loader_cache cache, uint32_t bs,
			 uint32_t workers)
{
	const uint64_t n = 1003;
	uint64_t *ids = malloc(4 * n * sizeof(uint64_t) + 4 * bs * sizeof(uint64_t));
	uint8_t *pad = malloc(4 * n + 4 * (size_t)bs);
	uint32_t *seen = malloc(n * sizeof(uint32_t));
	bool streamed = kind == T_CHUNKS && cache == PP_LOADER_CACHE_STREAM;

	for (int drop = 0; drop < 2; drop++) {
		for (int rank_drop = 0; rank_drop < 2; rank_drop++) {
			for (uint32_t ws = 1; ws <= 3; ws++) {
				uint64_t total = 0, nreal = 0, batches = UINT64_MAX, lost;
				memset(seen, 0, n * sizeof(uint32_t));
				for (uint32_t r = 0; r < ws; r++) {
					struct pp_loader_config cfg = {
						.batch_size = bs, .shuffle = true, .seed = 42,
						.drop_last = drop, .workers = workers, .rank = r,
						.world_size = ws, .rank_drop = rank_drop,
						.cache = cache, .window_chunks = 3,
						.dtype = (bs == 7 ? PP_DTYPE_F32 : 0),
						.mean = { 0.25f }, .std = { 0.5f },
					};
					struct pp_loader *l = make_loader(kind, n, 37, &cfg, NULL);
					uint64_t cnt = 0, nb;
					nb = run_epoch(l, 3, &cfg, ids, pad, &cnt, true);
					if (batches != UINT64_MAX)
						ck_assert_uint_eq(nb, batches);
					batches = nb;
					for (uint64_t k = 0; k < cnt; k++) {
						ck_assert_uint_lt(ids[k], n);
						if (pad[k]) {
							ck_assert(!rank_drop);
							continue;
						}
						seen[ids[k]]++;
						ck_assert_msg(seen[ids[k]] == 1, "sample %llu twice "
							      "(ws %u rank %u)", (unsigned long long)ids[k],
							      ws, r);
						nreal++;
					}
					total += cnt;
					pp_loader_destroy(l);
				}
				/* equal shares; batch counts that match them */
				ck_assert_uint_eq(total % ws, 0);
				if (drop)
					ck_assert_uint_eq(total / ws, batches * bs);
				else
					ck_assert_uint_eq(batches, (total / ws + bs - 1) / bs);
				/* what may be left out: nothing, the uneven rest, a short batch */
				if (!drop && !rank_drop)
					ck_assert_uint_eq(nreal, n);
				else if (!drop && !streamed)
					ck_assert_uint_eq(nreal, n - n % ws);
				lost = rank_drop ? (streamed ? ws * 37 : n % ws) : 0;
				lost += drop ? (uint64_t)ws * (bs - 1) : 0;
				ck_assert_uint_ge(nreal + lost, n);
			}
		}
	}
	free(ids);
	free(pad);
	free(seen);
}

static const uint32_t batch_sizes[] = { 1, 7, 100, 60000 };
static const uint32_t worker_counts[] = { 0, 1, 2, 8 };

/* Every sample once, in memory (array source), for every batch size and worker count (loop index). */
START_TEST(test_exactly_once_memory)
{
	exactly_once(T_ARRAY, PP_LOADER_CACHE_MEMORY, batch_sizes[_i / 4], worker_counts[_i % 4]);
}
END_TEST

/* The same through a gather callback (a dataset without an array, as a synthetic one). */
START_TEST(test_exactly_once_gather)
{
	exactly_once(T_GATHER, PP_LOADER_CACHE_MEMORY, batch_sizes[_i / 4], worker_counts[_i % 4]);
}
END_TEST

/* The same with chunks decoded into memory at create (PP_LOADER_CACHE_MEMORY). */
START_TEST(test_exactly_once_cached)
{
	exactly_once(T_CHUNKS, PP_LOADER_CACHE_MEMORY, batch_sizes[_i / 4], worker_counts[_i % 4]);
}
END_TEST

/* The same streamed through windows of chunks (PP_LOADER_CACHE_STREAM). */
START_TEST(test_exactly_once_stream)
{
	exactly_once(T_CHUNKS, PP_LOADER_CACHE_STREAM, batch_sizes[_i / 4], worker_counts[_i % 4]);
}
END_TEST

static uint64_t *epoch_ids(enum tkind kind, uint32_t workers, uint64_t seed, uint64_t epoch,
			   enum pp_loader_cache cache, uint64_t *n_p)
{
	struct pp_loader_config cfg = { .batch_size = 10, .shuffle = true, .seed = seed,
					.workers = workers, .cache = cache, .window_chunks = 2 };
	uint64_t *ids = malloc(2000 * sizeof(uint64_t));
	uint8_t pad[2000];
	struct pp_loader *l = make_loader(kind, 997, 50, &cfg, NULL);

	*n_p = 0;
	run_epoch(l, epoch, &cfg, ids, pad, n_p, false);
	pp_loader_destroy(l);
	return ids;
}

/*
 * The same order for 0, 1, 2 and 8 workers and on a second run; a
 * different one for another epoch or seed.  Fails if the order depends on
 * the workers or on timing, or if the shuffle ignores epoch or seed.
 */
START_TEST(test_order_deterministic)
{
	enum tkind kind = _i == 0 ? T_ARRAY : T_CHUNKS;
	enum pp_loader_cache cache = _i == 2 ? PP_LOADER_CACHE_STREAM : PP_LOADER_CACHE_MEMORY;
	uint64_t n0, n;
	uint64_t *ref = epoch_ids(kind, 0, 5, 1, cache, &n0);
	uint64_t *ids;
	bool sorted = true;

	ck_assert_uint_eq(n0, 997);
	for (uint64_t k = 1; k < n0; k++)
		sorted &= ref[k] > ref[k - 1];
	ck_assert(!sorted);
	for (uint32_t w = 0; w <= 8; w = w ? w * 2 : 1) {
		for (int run = 0; run < 2; run++) {
			ids = epoch_ids(kind, w, 5, 1, cache, &n);
			ck_assert_uint_eq(n, n0);
			ck_assert_int_eq(memcmp(ids, ref, n * sizeof(uint64_t)), 0);
			free(ids);
		}
	}
	ids = epoch_ids(kind, 2, 5, 2, cache, &n);
	ck_assert_int_ne(memcmp(ids, ref, n * sizeof(uint64_t)), 0);
	free(ids);
	ids = epoch_ids(kind, 2, 6, 1, cache, &n);
	ck_assert_int_ne(memcmp(ids, ref, n * sizeof(uint64_t)), 0);
	free(ids);
	free(ref);
}
END_TEST

/*
 * Save the position mid-epoch, destroy, recreate, resume: the remaining
 * batches are those of an uninterrupted run.  Fails if resume restarts the
 * epoch, skips or repeats a batch, or accepts a position from other settings.
 */
START_TEST(test_resume)
{
	enum tkind kind = _i == 0 ? T_ARRAY : T_CHUNKS;
	struct pp_loader_config cfg = { .batch_size = 9, .shuffle = true, .seed = 77, .workers = 2,
					.world_size = 2, .rank = 1, .cache = PP_LOADER_CACHE_STREAM,
					.window_chunks = 3 };
	uint64_t full[1000], n_full = 0, rest[1000], n_rest = 0;
	uint8_t pad[1000];
	struct pp_loader_position pos;
	struct pp_batch *b;
	struct pp_loader *l = make_loader(kind, 1500, 40, &cfg, NULL);
	uint64_t nb = run_epoch(l, 4, &cfg, full, pad, &n_full, false);

	pp_loader_destroy(l);
	ck_assert_uint_gt(nb, 20);

	l = make_loader(kind, 1500, 40, &cfg, NULL);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 4), 0);
	for (int k = 0; k < 13; k++) {
		ck_assert_int_eq(pp_loader_next(l, &b), 1);
		ck_assert_int_eq(pp_loader_release(l, b), 0);
	}
	ck_assert_int_eq(pp_loader_get_position(l, &pos), 0);
	ck_assert_uint_eq(pos.epoch, 4);
	ck_assert_uint_eq(pos.batch, 13);
	pp_loader_destroy(l);

	l = make_loader(kind, 1500, 40, &cfg, NULL);
	/* NULLs refused, not followed */
	ck_assert_int_eq(pp_loader_resume(l, NULL), -EINVAL);
	ck_assert_int_eq(pp_loader_resume_samples(l, NULL), -EINVAL);
	ck_assert_int_eq(pp_loader_get_position(l, NULL), -EINVAL);
	{
		struct pp_loader_stats st;

		ck_assert_int_eq(pp_loader_get_stats(NULL, &st), -EINVAL);
		ck_assert_int_eq(pp_loader_get_stats(l, NULL), -EINVAL);
		ck_assert_int_eq(pp_loader_release(NULL, NULL), -EINVAL);
	}
	ck_assert_int_eq(pp_loader_resume(l, &pos), 0);
	while (pp_loader_next(l, &b) == 1) {
		memcpy(rest + n_rest, b->ids, b->size * sizeof(uint64_t));
		n_rest += b->size;
		check_batch_content(b, &cfg);
		ck_assert_int_eq(pp_loader_release(l, b), 0);
	}
	ck_assert_uint_eq(n_rest, n_full - 13 * 9);
	ck_assert_int_eq(memcmp(rest, full + 13 * 9, n_rest * sizeof(uint64_t)), 0);
	pos.batch = nb + 1;
	ck_assert_int_eq(pp_loader_resume(l, &pos), -EINVAL);
	pp_loader_destroy(l);

	/* at another rank count: in memory when the new global batch divides 13 x 9 x 2, never streamed */
	cfg.world_size = 3;
	cfg.rank = 0;
	l = make_loader(kind, 1500, 40, &cfg, NULL);
	ck_assert_int_eq(pp_loader_resume(l, &pos), -EINVAL);
	ck_assert_int_eq(pp_loader_resume_samples(l, &pos), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), kind == T_ARRAY ? "not a multiple" : "streamed"));
	pp_loader_destroy(l);
	cfg.world_size = 1;
	l = make_loader(kind, 1500, 40, &cfg, NULL);
	ck_assert_int_eq(pp_loader_resume_samples(l, &pos), kind == T_ARRAY ? 0 : -EINVAL);
	if (kind == T_ARRAY) {
		ck_assert_int_eq(pp_loader_get_position(l, &pos), 0);
		ck_assert_uint_eq(pos.batch, 13 * 2);
		ck_assert_uint_eq(pos.samples, 13 * 9 * 2);
	}
	pp_loader_destroy(l);
	cfg.world_size = 2;
	cfg.rank = 1;

	cfg.seed = 78;
	l = make_loader(kind, 1500, 40, &cfg, NULL);
	pos.batch = 1;
	ck_assert_int_eq(pp_loader_resume(l, &pos), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "other settings"));
	pp_loader_destroy(l);
}
END_TEST

/*
 * A chunk that fails to decode: next() returns its error with its message,
 * and keeps returning it; destroy is clean.  Fails on a hang, a lost or
 * rewritten message, or a leak (under ASan or valgrind).
 */
START_TEST(test_corrupt_chunk)
{
	uint32_t workers = _i == 0 ? 0 : 2;
	enum pp_loader_cache cache = _i == 2 ? PP_LOADER_CACHE_MEMORY : PP_LOADER_CACHE_STREAM;
	struct pp_loader_config cfg = { .batch_size = 16, .shuffle = true, .workers = workers,
					.cache = PP_LOADER_CACHE_STREAM, .window_chunks = 2 };
	struct pp_loader_source src = tsource_make(T_CHUNKS, 500, 20, NULL);
	struct tsource *t = src.ctx;
	struct pp_loader *l = NULL;
	struct pp_batch *b;
	int ret, got = 0;

	cfg.cache = cache;
	t->fail_chunk = 13;
	ret = pp_loader_create_source(&cfg, &src, &l);
	if (cache == PP_LOADER_CACHE_MEMORY) {
		ck_assert_int_eq(ret, -EBADMSG);
		ck_assert_str_eq(pp_last_error(), "test.pps: chunk 13 at offset 53248: CRC-32 mismatch");
		return;
	}
	ck_assert_int_eq(ret, 0);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1) {
		got++;
		pp_loader_release(l, b);
	}
	ck_assert_int_eq(ret, -EBADMSG);
	ck_assert_int_lt(got, 500 / 16);
	ck_assert_str_eq(pp_last_error(), "test.pps: chunk 13 at offset 53248: CRC-32 mismatch");
	pp_error(-EINVAL, "something else");
	ck_assert_int_eq(pp_loader_next(l, &b), -EBADMSG);
	ck_assert_str_eq(pp_last_error(), "test.pps: chunk 13 at offset 53248: CRC-32 mismatch");
	ck_assert_int_eq(pp_loader_begin_epoch(l, 1), -EBADMSG);
	pp_loader_destroy(l);
}
END_TEST

/*
 * Destroy at any point: mid-epoch with batches held, workers blocked on
 * full slots, workers in the middle of slow chunk loads.  Fails on a hang
 * (the test's timeout), a crash, or a leak under ASan or valgrind; the test
 * source also checks that every worker's state was destroyed.
 */
START_TEST(test_destroy_midepoch)
{
	for (int k = 0; k < 6; k++) {
		struct pp_loader_config cfg = { .batch_size = 5, .shuffle = true, .workers = 8,
						.prefetch = 6, .cache = PP_LOADER_CACHE_STREAM,
						.window_chunks = 2 };
		struct tsource *t;
		struct pp_loader *l = make_loader(k % 2 ? T_CHUNKS : T_ARRAY, 3000, 25, &cfg, &t);
		struct pp_batch *b;

		if (k % 2)
			t->delay_us = 300;
		ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
		for (int j = 0; j < k; j++) {
			ck_assert_int_eq(pp_loader_next(l, &b), 1);
			if (j % 2)
				pp_loader_release(l, b);
		}
		if (k == 4)
			usleep(20000);
		pp_loader_destroy(l);
	}
}
END_TEST

/*
 * A consumer that holds every slot gets -ENOBUFS, not a deadlock; once it
 * releases one (from another thread, out of order), next() goes on.
 */
struct release_arg {
	struct pp_loader *l;
	struct pp_batch *b;
};

static void *release_other_thread(void *arg)
{
	struct release_arg *a = arg;

	ck_assert_int_eq(pp_loader_release(a->l, a->b), 0);
	return NULL;
}

START_TEST(test_enobufs)
{
	struct pp_loader_config cfg = { .batch_size = 3, .workers = _i, .prefetch = 3 };
	struct pp_loader *l = make_loader(T_ARRAY, 100, 0, &cfg, NULL);
	struct pp_batch *held[3], *b;
	struct release_arg a;
	pthread_t th;

	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	ck_assert_int_eq(pp_loader_next(l, &b), 1);
	held[0] = b;
	ck_assert_int_eq(pp_loader_next(l, &held[1]), 1);
	ck_assert_int_eq(pp_loader_next(l, &held[2]), 1);
	ck_assert_int_eq(pp_loader_next(l, &b), -ENOBUFS);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "held by the consumer"));
	ck_assert_int_eq(pp_loader_release(l, held[2]), 0);
	ck_assert_int_eq(pp_loader_release(l, held[2]), -EINVAL);
	ck_assert_int_eq(pp_loader_next(l, &b), -ENOBUFS);
	a.l = l;
	a.b = held[0];
	ck_assert_int_eq(pthread_create(&th, NULL, release_other_thread, &a), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(pp_loader_next(l, &b), 1);
	ck_assert_uint_eq(b->index, 3);
	ck_assert_uint_eq(b->ids[0], 9);
	pp_loader_destroy(l);
}
END_TEST

/*
 * try_next() returns -EAGAIN while the next batch is being filled (chunk
 * loads are slowed here), then the batches in order, and 0 at the end;
 * with 0 workers it fills in place.  get_layout() gives the full batch and
 * the output sample size.  Fails if try_next blocks, skips or reorders.
 */
START_TEST(test_try_next)
{
	struct pp_loader_config cfg = { .batch_size = 10, .workers = _i, .dtype = PP_DTYPE_F32,
					.cache = PP_LOADER_CACHE_STREAM, .window_chunks = 1 };
	struct tsource *t;
	struct pp_loader *l = make_loader(T_CHUNKS, 95, 10, &cfg, &t);
	struct pp_batch *b;
	uint64_t next = 0, again = 0;
	uint32_t bs;
	size_t sb;
	int ret;

	t->delay_us = 20000;
	ck_assert_int_eq(pp_loader_get_layout(l, &bs, &sb), 0);
	ck_assert_uint_eq(bs, 10);
	ck_assert_uint_eq(sb, SAMPLE_BYTES * sizeof(float));
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_try_next(l, &b)) != 0) {
		if (ret == -EAGAIN) {
			again++;
			usleep(1000);
			continue;
		}
		ck_assert_int_eq(ret, 1);
		ck_assert_uint_eq(b->index, next++);
		check_batch_content(b, &cfg);
		ck_assert_int_eq(pp_loader_release(l, b), 0);
	}
	ck_assert_uint_eq(next, 10);
	if (_i == 0)
		ck_assert_uint_eq(again, 0);
	else
		ck_assert_uint_gt(again, 0);
	pp_loader_destroy(l);
}
END_TEST

/*
 * A NaN or infinite mean or std, or a subnormal one, is refused at create
 * with -EINVAL naming the channel, as nn's own check does.  Fails if one
 * is taken: every value of its batches would be NaN or infinite.
 */
START_TEST(test_bad_normalisation)
{
	static const struct {
		float mean, std;
	} bad[] = { { NAN, 0.5f }, { 0.5f, NAN }, { INFINITY, 0.5f }, { 0.5f, INFINITY },
		    { 0.5f, -INFINITY }, { 0.5f, 1e-45f }, { 1e-45f, 0.5f }, { 1e30f, 1e-10f } };
	struct pp_loader *l = NULL;

	/* A source is the loader's from create on, even a failed one: one each. */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct pp_loader_config cfg = { .batch_size = 4, .dtype = PP_DTYPE_F32 };
		struct pp_loader_source src = tsource_make(T_ARRAY, 8, 0, NULL);

		cfg.mean[1] = bad[i].mean;
		cfg.std[1] = bad[i].std;
		ck_assert_int_eq(pp_loader_create_source(&cfg, &src, &l), -EINVAL);
		ck_assert_ptr_null(l);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "channel 1: normalisation mean"));
	}
	/* The smallest normal std, and 0 (taken as 1), are taken. */
	for (int i = 0; i < 2; i++) {
		struct pp_loader_config cfg = { .batch_size = 4, .dtype = PP_DTYPE_F32 };
		struct pp_loader_source src = tsource_make(T_ARRAY, 8, 0, NULL);

		cfg.std[0] = i ? 0.0f : 1e-30f;
		ck_assert_int_eq(pp_loader_create_source(&cfg, &src, &l), 0);
		pp_loader_destroy(l);
		l = NULL;
	}
}
END_TEST

/*
 * Float output is (x / 255 - mean) / std per channel, for 3 channels, with
 * the bits of the library's one normalisation (nn computes the same from a
 * uint8 batch).  Fails if the channels are mixed up, the formula is wrong,
 * or the loader rounds differently from nn.
 */
START_TEST(test_normalise_channels)
{
	struct pp_loader_config cfg = { .batch_size = 4, .dtype = PP_DTYPE_F32,
					.mean = { 0.1f, 0.5f, 0.9f }, .std = { 0.2f, 0.353f, 0.31f } };
	struct pp_loader_source src = tsource_make(T_ARRAY, 8, 0, NULL);
	struct pp_loader *l = NULL;
	struct pp_batch *b;

	/* 12 bytes as 3 channels of 2 x 2 */
	src.info.shape[0] = 3;
	src.info.shape[1] = 2;
	src.info.shape[2] = 2;
	ck_assert_int_eq(pp_loader_create_source(&cfg, &src, &l), 0);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	ck_assert_int_eq(pp_loader_next(l, &b), 1);
	ck_assert_int_eq(b->dtype, PP_DTYPE_F32);
	ck_assert_uint_eq(b->sample_bytes, 48);
	for (uint32_t k = 0; k < 4; k++)
		for (size_t j = 0; j < 12; j++) {
			size_t c = j / 4;
			float want = (sample_byte(k, j) / 255.0f - cfg.mean[c]) / cfg.std[c];
			float got = ((float *)b->samples)[k * 12 + j];
			uint8_t byte = sample_byte(k, j);
			float same;

			ck_assert_float_eq_tol(got, want, 1e-5);
			/* Bit for bit what nn computes from the uint8 batch: one normalisation. */
			pp_normalize_u8(&byte, &same, 1, cfg.mean[c], cfg.std[c]);
			ck_assert_msg(memcmp(&got, &same, sizeof(got)) == 0,
				      "sample %u byte %zu: loader %.9g, the normalisation %.9g", k, j,
				      (double)got, (double)same);
		}
	pp_loader_destroy(l);
}
END_TEST

/*
 * The uint8-to-float kernels agree with the scalar loop for every length
 * around their vector widths (16, 8, 4) and tails.  Fails if a vector
 * kernel drops, reorders or misconverts an element, or writes past the end.
 */
START_TEST(test_convert_kernels)
{
	const float scale = 1.0f / (255.0f * 0.353f), bias = -0.286f / 0.353f;
	uint8_t src[100];
	float want[100], got[100];
	pp_convert_u8_f32_fn *kernels[4] = { pp_convert_u8_f32_best(), NULL, NULL, NULL };

	for (enum pp_isa isa = PP_ISA_BASE; isa <= pp_isa_best(); isa++)
		kernels[1 + isa] = pp_normalize_u8_version(isa);
	pp_test_fill_random(src, sizeof(src), 11);
	for (size_t n = 0; n <= 100; n++) {
		for (size_t i = 0; i < n; i++)
			want[i] = (float)src[i] * scale + bias;
		for (int k = 0; k < 4; k++) {
			if (kernels[k] == NULL)
				continue;
			memset(got, 0xff, sizeof(got));
			kernels[k](src, got, n, scale, bias);
			for (size_t i = 0; i < n; i++)
				ck_assert_float_eq_tol(got[i], want[i], 1e-5);
			if (n < 100)
				ck_assert_uint_eq(((uint32_t *)got)[n], 0xffffffffu);
		}
	}
}
END_TEST

/*
 * Bad settings and a memory budget too small are refused with a message.
 * Fails if a wrong setting is accepted or the message is missing.
 */
START_TEST(test_bad_config)
{
	struct pp_loader_config cfg = { .batch_size = 100, .world_size = 2, .rank = 2 };
	struct pp_loader_source src = tsource_make(T_ARRAY, 100, 0, NULL);
	struct pp_loader *l = NULL;

	ck_assert_int_eq(pp_loader_create_source(&cfg, &src, &l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "rank 2"));
	ck_assert_ptr_null(l);

	cfg.rank = 0;
	cfg.memory_budget = 10000;
	cfg.dtype = PP_DTYPE_F32;
	src = tsource_make(T_ARRAY, 100, 0, NULL);
	ck_assert_int_eq(pp_loader_create_source(&cfg, &src, &l), -ENOMEM);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "memory budget of 10000 bytes exceeded"));

	cfg.memory_budget = 0;
	cfg.dtype = PP_DTYPE_U8;
	src = tsource_make(T_ARRAY, 100, 0, NULL);
	src.info.dtype = PP_DTYPE_F32;
	src.info.sample_bytes = 48;
	ck_assert_int_eq(pp_loader_create_source(&cfg, &src, &l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "uint8 output"));

	cfg.dtype = 0;
	cfg.world_size = 4;
	cfg.cache = PP_LOADER_CACHE_STREAM;
	src = tsource_make(T_CHUNKS, 100, 40, NULL);
	ck_assert_int_eq(pp_loader_create_source(&cfg, &src, &l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "3 chunks are too few to stream to 4 ranks"));

	cfg.world_size = 1;
	cfg.rank_slices = true;
	src = tsource_make(T_CHUNKS, 100, 40, NULL);
	ck_assert_int_eq(pp_loader_create_source(&cfg, &src, &l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "rank_slices is for sources in memory"));
	cfg.rank_slices = false;

	src = tsource_make(T_ARRAY, 100, 0, NULL);
	ck_assert_int_eq(pp_loader_create_source(&cfg, &src, &l), 0);
	ck_assert_int_eq(pp_loader_next(l, &(struct pp_batch *){ NULL }), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "no epoch begun"));
	pp_loader_destroy(l);
}
END_TEST

/*
 * The reader reads what the file holds, through io_uring (into a registered
 * buffer) and through pread, with and without O_DIRECT, and reports a
 * truncated file.  Fails if a read
 * comes back short or wrong, or a short file is not an error.
 */
START_TEST(test_reader)
{
	enum pp_loader_io mode = _i == 0 && auto_io() == PP_LOADER_IO_AUTO ? PP_LOADER_IO_URING
									    : PP_LOADER_IO_PREAD;
	char *dir = pp_test_tmpdir();
	char path[4096];
	size_t len = 5 * 4096 + 100;
	uint8_t *data = malloc(len);
	uint8_t *buf[3], *block;
	struct pp_reader r;
	struct pp_read q[3];
	int fd, fd_direct, ret;

	snprintf(path, sizeof(path), "%s/f", dir);
	pp_test_fill_random(data, len, 3);
	pp_test_write_file(path, data, len);
	ret = pp_reader_init(&r, mode, 4, PP_LOADER_IO_TIMEOUT_MS);
	if (ret == -ENOSYS || ret == -EPERM) {
		/* io_uring refused here: the pread case covers the reads */
		ck_assert_int_eq(mode, PP_LOADER_IO_URING);
		pp_test_rmtree(dir);
		free(dir);
		free(data);
		return;
	}
	ck_assert_msg(ret == 0, "%s", pp_last_error());
	ck_assert(r.uring == (mode == PP_LOADER_IO_URING));
	fd = open(path, O_RDONLY);
	fd_direct = open(path, O_RDONLY | O_DIRECT);
	if (fd_direct < 0)
		fd_direct = fd;
	ck_assert_int_ge(fd, 0);
	/* one block, registered with the ring where there is one: "fixed" reads */
	ck_assert_int_eq(posix_memalign((void **)&block, 4096, 9 * 4096), 0);
	for (int k = 0; k < 3; k++)
		buf[k] = block + k * 3 * 4096;
	ret = pp_reader_register(&r, block, 9 * 4096);
	ck_assert_int_eq(ret, mode == PP_LOADER_IO_URING ? 0 : -EOPNOTSUPP);
	/* two aligned reads, one running into the end of the file */
	q[0] = (struct pp_read){ .fd = fd_direct, .fd_buffered = fd, .offset = 0, .len = 8192,
				 .need = 8192, .buf = buf[0], .path = path, .chunk = 0 };
	q[1] = (struct pp_read){ .fd = fd_direct, .fd_buffered = fd, .offset = 4 * 4096,
				 .len = 8192, .need = 4096 + 100, .buf = buf[1], .path = path, .chunk = 1 };
	q[2] = (struct pp_read){ .fd = fd, .fd_buffered = fd, .offset = 4096, .len = 3 * 4096,
				 .need = 3 * 4096, .buf = buf[2], .path = path, .chunk = 2 };
	ck_assert_msg(pp_reader_read(&r, q, 3) == 0, "%s", pp_last_error());
	ck_assert_int_eq(memcmp(buf[0], data, 8192), 0);
	ck_assert_int_eq(memcmp(buf[1], data + 4 * 4096, 4096 + 100), 0);
	ck_assert_int_eq(memcmp(buf[2], data + 4096, 3 * 4096), 0);
	/* a chunk said to run past the end of the file */
	q[0] = (struct pp_read){ .fd = fd_direct, .fd_buffered = fd, .offset = 4 * 4096,
				 .len = 8192, .need = 8000, .buf = buf[0], .path = path, .chunk = 7 };
	ck_assert_int_eq(pp_reader_read(&r, q, 1), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "chunk 7 at offset 16384: file ends after 4196"));
	pp_reader_fini(&r);
	close(fd);
	if (fd_direct != fd)
		close(fd_direct);
	free(block);
	pp_test_rmtree(dir);
	free(dir);
	free(data);
}
END_TEST

/*
 * Statistics count what was handed out.  Fails if a counter misses batches
 * or samples, the I/O path is not reported, or a streamed ring is not
 * twice the in-memory default deep.
 */
START_TEST(test_stats)
{
	struct pp_loader_config cfg = { .batch_size = 10, .workers = 2, .cache = PP_LOADER_CACHE_STREAM };
	struct pp_loader *l = make_loader(T_CHUNKS, 95, 10, &cfg, NULL);
	struct pp_loader_stats st;
	uint64_t ids[200], n = 0;
	uint8_t pad[200];

	run_epoch(l, 0, &cfg, ids, pad, &n, true);
	ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
	ck_assert_uint_eq(st.batches, 10);
	ck_assert_uint_eq(st.samples, 95);
	ck_assert_uint_eq(st.bytes, 95 * SAMPLE_BYTES);
	ck_assert_uint_eq(st.chunks_decoded, 10);
	ck_assert_str_eq(st.io_path, "none");
	ck_assert_uint_eq(st.slots, 12); /* streamed: 2 (2 workers + 2) by default */
	ck_assert_uint_gt(st.memory_bytes, 12 * 10 * SAMPLE_BYTES);
	pp_loader_destroy(l);
}
END_TEST

/*
 * The consumer's poll (spin_us): a consumer faster than its workers (a
 * source whose chunks load slowly) polls for its batches when told to and
 * catches them there, sleeps for them when told not to, and by default
 * polls exactly where the workers leave a processor free; over two epochs
 * (the second's batch numbers those of the first again), the batches are
 * those of a loader that fills them in the consumer's thread, in order.
 * Fails if spin_us is ignored, if the poll misses batches published to it
 * (or takes an earlier epoch's for its own), if it hands out a batch out of
 * order, or if an out-of-range value is accepted.
 */
START_TEST(test_spin)
{
	uint32_t spins[] = { 200000, PP_LOADER_NO_SPIN, 0 };
	struct pp_loader_config ref_cfg = { .batch_size = 10, .shuffle = true, .seed = 3,
					    .cache = PP_LOADER_CACHE_STREAM };
	struct pp_loader *l = make_loader(T_CHUNKS, 200, 10, &ref_cfg, NULL);
	struct pp_loader_source src;
	struct pp_loader_stats st;
	uint64_t ref[400], ids[400], nref = 0;
	uint8_t pad[400];
	cpu_set_t set;
	int cpus;

	ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	cpus = CPU_COUNT(&set);
	run_epoch(l, 1, &ref_cfg, ref, pad, &nref, true);
	run_epoch(l, 2, &ref_cfg, ref, pad, &nref, true);
	ck_assert_uint_eq(nref, 400);
	ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
	ck_assert_uint_eq(st.consumer_spins + st.consumer_sleeps, 0); /* 0 workers: never waits */
	pp_loader_destroy(l);
	for (int i = 0; i < 3; i++) {
		for (uint32_t w = 1; w <= 3; w += 2) {
			struct pp_loader_config cfg = ref_cfg;
			struct tsource *t;
			uint64_t n = 0;
			bool polls = spins[i] != PP_LOADER_NO_SPIN && (spins[i] != 0 || (int)w < cpus);
			cfg.workers = w;
			cfg.spin_us = spins[i];
			l = make_loader(T_CHUNKS, 200, 10, &cfg, &t);
			t->delay_us = 5000; /* a chunk a batch: 5 ms each, far slower than the consumer */
			run_epoch(l, 1, &cfg, ids, pad, &n, true);
			run_epoch(l, 2, &cfg, ids, pad, &n, true);
			ck_assert_uint_eq(n, nref);
			ck_assert_int_eq(memcmp(ids, ref, sizeof(ref)), 0);
			ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
			ck_assert_uint_le(st.consumer_spins + st.consumer_sleeps, 2 * 20);
			if (polls) {
				ck_assert_msg(st.consumer_spins > 0, "spin_us %u, %u workers, %d CPUs: "
					      "no poll", spins[i], w, cpus);
				/* 200 ms against 5 ms batches: nearly every poll catches its batch */
				if (spins[i] == 200000)
					ck_assert_msg(st.consumer_sleeps * 4 < st.consumer_spins,
						      "%u workers: %llu polls, %llu sleeps", w,
						      (unsigned long long)st.consumer_spins,
						      (unsigned long long)st.consumer_sleeps);
			} else {
				ck_assert_msg(st.consumer_spins == 0, "spin_us %u, %u workers, %d CPUs: "
					      "%llu polls", spins[i], w, cpus,
					      (unsigned long long)st.consumer_spins);
				/* 40 batches of 5 ms against a consumer that does nothing */
				ck_assert_uint_gt(st.consumer_sleeps, 0);
			}
			pp_loader_destroy(l);
		}
	}
	ref_cfg.workers = 1;
	ref_cfg.spin_us = 1000001;
	src = tsource_make(T_ARRAY, 100, 0, NULL);
	l = NULL;
	ck_assert_int_eq(pp_loader_create_source(&ref_cfg, &src, &l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "spin_us 1000001"));
	ck_assert_ptr_null(l);
}
END_TEST

/* ------------------------------------------------------------------ real shards and datasets */


/* Writes n samples of the test pattern as 'nshards' shards of chunks of 'rpc' records. */
static char **write_shards(const char *dir, uint64_t n, size_t nshards, uint32_t rpc, int level)
{
	struct pp_sample_info info = { .dtype = PP_DTYPE_U8, .ndim = 3, .shape = { 1, 3, 4 },
				       .sample_bytes = SAMPLE_BYTES, .label_kind = PP_LABEL_CLASS,
				       .num_classes = NCLASSES };
	struct pp_shard_writer_config wc = { .info = &info, .records_per_chunk = rpc, .level = level };
	char **paths = calloc(nshards, sizeof(char *));
	uint64_t first = 0;

	for (size_t s = 0; s < nshards; s++) {
		uint64_t cnt = n / nshards + (s < n % nshards);
		uint8_t *samples = malloc(cnt * SAMPLE_BYTES + 1);
		int32_t *labels = malloc(cnt * sizeof(int32_t) + 1);
		struct pp_shard_writer *w;
		for (uint64_t i = 0; i < cnt; i++) {
			for (size_t j = 0; j < SAMPLE_BYTES; j++)
				samples[i * SAMPLE_BYTES + j] = sample_byte(first + i, j);
			labels[i] = sample_label(first + i);
		}
		ck_assert_int_gt(asprintf(&paths[s], "%s/part%zu.pps", dir, s), 0);
		ck_assert_msg(pp_shard_writer_create(paths[s], &wc, &w) == 0, "%s", pp_last_error());
		ck_assert_msg(pp_shard_writer_add(w, samples, labels, cnt) == 0, "%s", pp_last_error());
		ck_assert_msg(pp_shard_writer_finish(w) == 0, "%s", pp_last_error());
		pp_shard_writer_destroy(w);
		free(samples);
		free(labels);
		first += cnt;
	}
	return paths;
}

static void free_paths(char **paths, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
}

/*
 * Shards read through io_uring (or pread where refused) and through pread,
 * buffered and O_DIRECT, cached or streamed, by 0 or 2 workers, on 1 or 2
 * ranks: every sample once, with its content and label.  Fails on a sample
 * lost, repeated or wrong, or when the I/O path reported is not the one run.
 */
START_TEST(test_shards_exactly_once)
{
	char *dir = pp_test_tmpdir();
	char **paths = write_shards(dir, 2500, 3, 64, 1);
	uint32_t *seen = calloc(2500, sizeof(uint32_t));
	uint64_t *ids = malloc(4000 * sizeof(uint64_t));
	uint8_t *pad = malloc(4000);

	for (int k = 0; k < 16; k++) {
		struct pp_loader_config cfg = {
			.shard_paths = (const char *const *)paths, .nshards = 3, .batch_size = 33,
			.shuffle = true, .seed = 9, .workers = k & 1 ? 2 : 0,
			.cache = k & 2 ? PP_LOADER_CACHE_STREAM : PP_LOADER_CACHE_MEMORY,
			.io = _i == 0 ? auto_io() : PP_LOADER_IO_PREAD,
			.direct_io = k & 4, .world_size = k & 8 ? 2 : 1, .window_chunks = 3,
		};
		uint64_t nreal = 0;
		memset(seen, 0, 2500 * sizeof(uint32_t));
		for (uint32_t r = 0; r < cfg.world_size; r++) {
			struct pp_loader *l = NULL;
			struct pp_loader_stats st;
			uint64_t cnt = 0;
			cfg.rank = r;
			ck_assert_msg(pp_loader_create(&cfg, &l) == 0, "%s", pp_last_error());
			ck_assert_uint_eq(pp_loader_info(l)->count, 2500);
			run_epoch(l, 1, &cfg, ids, pad, &cnt, true);
			for (uint64_t i = 0; i < cnt; i++)
				if (!pad[i]) {
					ck_assert_uint_eq(++seen[ids[i]], 1);
					nreal++;
				}
			ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
			if (cfg.io == PP_LOADER_IO_PREAD)
				ck_assert_str_eq(st.io_path, "pread");
			if (strcmp(st.io_path, "pread") == 0)
				ck_assert(!st.fixed_buffers);
			else
				ck_assert(strcmp(st.io_path, "io_uring") == 0 ||
					  strcmp(st.io_path, "pread") == 0);
			ck_assert_uint_gt(st.chunks_decoded, 0);
			ck_assert_uint_gt(st.bytes_read, 0);
			pp_loader_destroy(l);
		}
		ck_assert_uint_eq(nreal, 2500);
	}
	free(seen);
	free(ids);
	free(pad);
	free_paths(paths, 3);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * A byte flipped in a chunk's stored bytes: streaming delivers the error of
 * that chunk with the file's name, caching fails at create; a file cut
 * short is refused at create.  Fails if a damaged chunk goes unnoticed or
 * its message does not name the file and chunk.
 */
START_TEST(test_shards_corrupt)
{
	char *dir = pp_test_tmpdir();
	char **paths = write_shards(dir, 1000, 1, 100, 6);
	struct pp_shard *sh;
	struct pp_shard_chunk_info ci;
	struct pp_loader_config cfg = { .shard_paths = (const char *const *)paths, .nshards = 1,
					.batch_size = 10, .workers = _i,
					.cache = PP_LOADER_CACHE_STREAM, .io = auto_io() };
	struct pp_loader *l = NULL;
	struct pp_batch *b;
	char want[256];
	size_t len;
	uint8_t *data;
	int ret;

	ck_assert_int_eq(pp_shard_open(paths[0], &sh), 0);
	ck_assert_int_eq(pp_shard_chunk(sh, 6, &ci), 0);
	pp_shard_close(sh);
	data = pp_test_read_file(paths[0], &len);
	data[ci.offset + ci.stored_size / 2] ^= 0x40;
	pp_test_write_file(paths[0], data, len);
	snprintf(want, sizeof(want), "%s: chunk 6", paths[0]);

	ck_assert_msg(pp_loader_create(&cfg, &l) == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1)
		pp_loader_release(l, b);
	ck_assert_int_eq(ret, -EBADMSG);
	ck_assert_msg(strstr(pp_last_error(), want) != NULL, "message: %s", pp_last_error());
	pp_loader_destroy(l);

	cfg.cache = PP_LOADER_CACHE_MEMORY;
	l = NULL;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), -EBADMSG);
	ck_assert_msg(strstr(pp_last_error(), want) != NULL, "message: %s", pp_last_error());
	ck_assert_ptr_null(l);

	pp_test_write_file(paths[0], data, len - 5000);
	ck_assert_int_eq(pp_loader_create(&cfg, &l), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), paths[0]));
	free(data);
	free_paths(paths, 1);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Sources and options at the edge: a missing shard, two sources, io_uring
 * forced (an error only where the kernel refuses it), a ring from a
 * device's host allocator.  Fails if a bad source is accepted, or an error
 * lacks its message.
 */
START_TEST(test_sources)
{
	char *dir = pp_test_tmpdir();
	char **paths = write_shards(dir, 300, 1, 50, 0);
	const char *missing[] = { "/nonexistent/x.pps" };
	struct pp_synthetic_config sc = { .count = 500, .channels = 1, .height = 4, .width = 3,
					  .num_classes = 10, .seed = 1, .dtype = PP_DTYPE_U8 };
	struct pp_loader_config cfg = { .shard_paths = missing, .nshards = 1, .batch_size = 10 };
	struct pp_loader *l = NULL;
	struct pp_dataset *ds;
	struct pp_device *dev;
	struct pp_loader_stats st;
	struct pp_batch *b;
	uint8_t want[10 * 12];
	int ret;

	ck_assert_int_eq(pp_loader_create(&cfg, &l), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "/nonexistent/x.pps"));

	ck_assert_int_eq(pp_dataset_create_synthetic(&sc, &ds), 0);
	cfg.dataset = ds;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "both"));

	/* a synthetic dataset goes through pp_dataset_gather(), into a device's host memory */
	ck_assert_int_eq(pp_device_open("cpu", &dev), 0);
	cfg.nshards = 0;
	cfg.shuffle = true;
	cfg.workers = 2;
	cfg.device = dev;
	cfg.pin_memory = true;
	ck_assert_msg(pp_loader_create(&cfg, &l) == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	ck_assert_int_eq(pp_loader_next(l, &b), 1);
	ck_assert_int_eq(pp_dataset_gather(ds, b->ids, 10, want, NULL), 0);
	ck_assert_int_eq(memcmp(b->samples, want, sizeof(want)), 0);
	ck_assert_uint_eq((uintptr_t)b->samples % 4096, 0);
	ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
	ck_assert_str_eq(st.io_path, "none");
	pp_loader_destroy(l);
	pp_device_close(dev);
	pp_dataset_destroy(ds);

	cfg = (struct pp_loader_config){ .shard_paths = (const char *const *)paths, .nshards = 1,
					 .io = PP_LOADER_IO_URING, .cache = PP_LOADER_CACHE_STREAM };
	ret = pp_loader_create(&cfg, &l);
	if (ret == 0) {
		ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
		ck_assert_str_eq(st.io_path, "io_uring");
		pp_loader_destroy(l);
	} else {
		ck_assert(ret == -ENOSYS || ret == -EPERM);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "io_uring"));
	}
	free_paths(paths, 1);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Where the kernel refuses io_uring (here a seccomp filter makes
 * io_uring_setup fail with EPERM, as Docker's default profile does), the
 * loader reads through pread and says so; forcing io_uring is an error with
 * a message.  Fails if the fallback is missing, silent, or loses samples.
 * Needs Check's fork mode, since the filter stays on the process.
 */
START_TEST(test_uring_refused)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = PP_ARRAY_SIZE(filter), .filter = filter };
	const char *fork_mode = getenv("CK_FORK");
	char *dir;
	char **paths;
	struct pp_loader_config cfg = { .nshards = 2, .batch_size = 50, .shuffle = true,
					.workers = 2, .cache = PP_LOADER_CACHE_STREAM };
	struct pp_loader *l = NULL;
	struct pp_loader_stats st;
	uint64_t ids[1000], n = 0;
	uint8_t pad[1000];
	uint8_t seen[700] = { 0 };

	if (fork_mode != NULL && strcmp(fork_mode, "no") == 0)
		return;
	dir = pp_test_tmpdir();
	paths = write_shards(dir, 700, 2, 64, 1);
	cfg.shard_paths = (const char *const *)paths;
	ck_assert_int_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	ck_assert_int_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);

	ck_assert_msg(pp_loader_create(&cfg, &l) == 0, "%s", pp_last_error());
	run_epoch(l, 0, &cfg, ids, pad, &n, true);
	ck_assert_uint_eq(n, 700);
	for (uint64_t i = 0; i < n; i++)
		ck_assert_uint_eq(seen[ids[i]]++, 0);
	ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
	ck_assert_str_eq(st.io_path, "pread");
	ck_assert(!st.fixed_buffers);
	pp_loader_destroy(l);

	cfg.io = PP_LOADER_IO_URING;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), -EPERM);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "io_uring_queue_init"));
	free_paths(paths, 2);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fashion-MNIST's training set as an in-memory dataset, float32 normalised:
 * all 60000 once, each batch equal to the dataset's samples converted by
 * hand.  Skipped without the data.  Fails if a sample is lost or repeated
 * or a value differs from (x / 255 - mean) / std.
 */
START_TEST(test_fashion_mnist)
{
	const char *fm = pp_test_fashion_mnist_dir();
	struct pp_dataset *ds;
	struct pp_loader *l = NULL;
	struct pp_batch *b;
	uint8_t *seen, *raw;
	uint64_t total = 0;

	if (fm == NULL)
		return;
	ck_assert_msg(pp_dataset_open_dir(fm, "train", &ds) == 0, "%s", pp_last_error());
	struct pp_loader_config cfg = { .dataset = ds, .batch_size = 100, .shuffle = true,
					.workers = 2, .dtype = PP_DTYPE_F32,
					.mean = { 0.2860f }, .std = { 0.3530f } };
	ck_assert_msg(pp_loader_create(&cfg, &l) == 0, "%s", pp_last_error());
	seen = calloc(60000, 1);
	raw = malloc(100 * 784);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while (pp_loader_next(l, &b) == 1) {
		ck_assert_int_eq(pp_dataset_gather(ds, b->ids, b->size, raw, NULL), 0);
		for (uint32_t k = 0; k < b->size; k++) {
			ck_assert_uint_eq(seen[b->ids[k]]++, 0);
			for (int j = 0; j < 784; j += 97) {
				float want = (raw[k * 784 + j] / 255.0f - 0.2860f) / 0.3530f;
				ck_assert_float_eq_tol(((float *)b->samples)[k * 784 + j], want, 1e-5);
			}
		}
		total += b->size;
		pp_loader_release(l, b);
	}
	ck_assert_uint_eq(total, 60000);
	free(seen);
	free(raw);
	pp_loader_destroy(l);
	pp_dataset_destroy(ds);
}
END_TEST

/*
 * Rank padding in memory is DistributedSampler's, as pinpipe/loader.h
 * says: 1003 samples on 3 ranks extend the epoch's order by its first two
 * positions, which rank 1 and rank 2 take last.  Fails if a rank's padding
 * is not the sample at that place of the whole order (rank 0's first, then
 * rank 1's first), if it is not marked, or if rank 0 gets any.
 */
START_TEST(test_rank_padding_memory)
{
	struct pp_synthetic_config sc = { .count = 1003, .channels = 1, .height = 2, .width = 2,
					  .num_classes = 10, .seed = 4, .dtype = PP_DTYPE_U8 };
	uint64_t first[3], last[3];
	uint32_t padding[3];
	struct pp_dataset *ds;

	ck_assert_int_eq(pp_dataset_create_synthetic(&sc, &ds), 0);
	for (uint32_t r = 0; r < 3; r++) {
		struct pp_loader_config cfg = { .dataset = ds, .batch_size = 335, .shuffle = true,
						.seed = 9, .rank = r, .world_size = 3 };
		struct pp_loader *l;
		struct pp_batch *b;

		ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
		ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
		ck_assert_int_eq(pp_loader_next(l, &b), 1);
		ck_assert_uint_eq(b->size, 335);
		first[r] = b->ids[0];
		last[r] = b->ids[334];
		padding[r] = b->padding;
		ck_assert_int_eq(pp_loader_release(l, b), 0);
		ck_assert_int_eq(pp_loader_next(l, &b), 0);
		pp_loader_destroy(l);
	}
	ck_assert_uint_eq(padding[0], 0);
	ck_assert_uint_eq(padding[1], 1);
	ck_assert_uint_eq(padding[2], 1);
	ck_assert_uint_eq(last[1], first[0]);
	ck_assert_uint_eq(last[2], first[1]);
	pp_dataset_destroy(ds);
}
END_TEST

/*
 * Every setting the header names as deciding the order makes a saved
 * position another loader's: a resume by a loader that differs from the
 * saver in one of them alone is refused, and one that differs only in
 * what does not decide the order (workers, prefetch) is taken.  Likewise
 * pp_loader_resume_samples() refuses a position of another seed or source
 * size.  Fails if the plan's key leaves out any of those settings.
 */
START_TEST(test_resume_settings)
{
	enum { S_SEED, S_SHUFFLE, S_BATCH, S_WORLD, S_RANK, S_DROP, S_RANK_DROP, S_WINDOW,
	       S_COUNT, S_SLICES, S_NONE };
	bool streamed = _i == 1;
	struct pp_loader_config base = { .batch_size = 8, .shuffle = true, .seed = 5, .workers = 1,
					 .world_size = 2, .rank = 0, .window_chunks = 2,
					 .cache = streamed ? PP_LOADER_CACHE_STREAM
							   : PP_LOADER_CACHE_MEMORY };
	enum tkind kind = streamed ? T_CHUNKS : T_ARRAY;
	struct pp_loader_position pos, other;
	struct pp_loader *l = make_loader(kind, 600, 20, &base, NULL);

	ck_assert_int_eq(pp_loader_begin_epoch(l, 1), 0);
	ck_assert_int_eq(pp_loader_get_position(l, &pos), 0);
	pp_loader_destroy(l);
	pos.batch = 2;
	pos.samples = 2 * 8 * 2;
	for (int s = S_SEED; s <= S_NONE; s++) {
		struct pp_loader_config cfg = base;
		uint64_t n = 600;

		if ((s == S_WINDOW && !streamed) || (s == S_SLICES && streamed))
			continue;
		switch (s) {
		case S_SEED: cfg.seed = 6; break;
		case S_SHUFFLE: cfg.shuffle = false; break;
		case S_BATCH: cfg.batch_size = 10; break;
		case S_WORLD: cfg.world_size = 3; break;
		case S_RANK: cfg.rank = 1; break;
		case S_DROP: cfg.drop_last = true; break;
		case S_RANK_DROP: cfg.rank_drop = true; break;
		case S_WINDOW: cfg.window_chunks = 3; break;
		case S_COUNT: n = 620; break;
		case S_SLICES: cfg.rank_slices = true; break;
		default: cfg.workers = 3; cfg.prefetch = 5; break;
		}
		l = make_loader(kind, n, 20, &cfg, NULL);
		ck_assert_msg(pp_loader_resume(l, &pos) == (s == S_NONE ? 0 : -EINVAL),
			      "setting %d changed, streamed %d: resume returned otherwise", s,
			      streamed);
		if (!streamed && (s == S_SEED || s == S_COUNT || s == S_SHUFFLE)) {
			ck_assert_msg(pp_loader_resume_samples(l, &pos) == -EINVAL,
				      "setting %d changed: resume_samples accepted", s);
			ck_assert_int_eq(pp_loader_get_position(l, &other), 0);
			ck_assert_uint_ne(other.order_key, pos.order_key);
		}
		pp_loader_destroy(l);
	}
}
END_TEST

/*
 * A shuffle draws every order: across 64 epochs, the 3 samples of a
 * dataset come in each of their 6 orders (the plan is a function of the
 * epoch, so this holds or fails for good).  Fails if the Fisher-Yates
 * shuffle skips a step, which leaves half the orders out.
 */
START_TEST(test_shuffle_every_order)
{
	struct pp_plan_params p = { .seed = 11, .shuffle = true, .world_size = 1, .batch_size = 3 };
	struct pp_plan plan;
	bool seen[9] = { false };

	ck_assert_int_eq(pp_plan_alloc_memory(&plan, &p, 3), 0);
	for (uint64_t e = 0; e < 64; e++) {
		pp_plan_make_memory(&plan, &p, 3, e);
		ck_assert_uint_eq(plan.len, 3);
		ck_assert_uint_ne(plan.order[0], plan.order[1]);
		ck_assert_uint_ne(plan.order[0], plan.order[2]);
		ck_assert_uint_ne(plan.order[1], plan.order[2]);
		seen[plan.order[0] * 3 + plan.order[1]] = true;
	}
	for (int a = 0; a < 3; a++)
		for (int b = 0; b < 3; b++)
			ck_assert_msg(a == b || seen[a * 3 + b], "order %d %d never drawn", a, b);
	pp_plan_free(&plan);
}
END_TEST

/*
 * Streamed, the chunks are permuted anew each epoch (keyed with the
 * epoch), and each window's samples get their own shuffle: with windows of
 * one chunk, the first window is not the same chunk in all of 8 epochs,
 * and not every window of an epoch has its samples in the same relative
 * order.  Fails if the chunk order ignores the epoch or the windows share
 * one shuffle.
 */
START_TEST(test_stream_windows)
{
	struct pp_plan_params p = { .seed = 3, .shuffle = true, .world_size = 1, .batch_size = 10,
				    .window_chunks = 1 };
	struct pp_plan_chunk chunks[20];
	struct pp_plan plan;
	uint64_t first_chunk[8];
	bool epochs_differ = false, windows_differ = false;

	for (uint32_t c = 0; c < 20; c++)
		chunks[c] = (struct pp_plan_chunk){ .index = c, .first_id = c * 10, .records = 10 };
	ck_assert_int_eq(pp_plan_alloc_stream(&plan, &p, chunks, 20), 0);
	for (uint64_t e = 0; e < 8; e++) {
		ck_assert_int_eq(pp_plan_make_stream(&plan, &p, chunks, 20, e), 0);
		ck_assert_uint_eq(plan.len, 200);
		first_chunk[e] = plan.order[0] / 10;
		epochs_differ |= first_chunk[e] != first_chunk[0];
		for (uint64_t w = 1; w < 20; w++) {
			for (uint64_t k = 0; k < 10; k++) {
				/* each window is one chunk's ten samples */
				ck_assert_uint_eq(plan.order[w * 10 + k] / 10, plan.order[w * 10] / 10);
				windows_differ |= plan.order[w * 10 + k] % 10 != plan.order[k] % 10;
			}
		}
	}
	ck_assert_msg(epochs_differ, "chunk %llu first in every epoch",
		      (unsigned long long)first_chunk[0]);
	ck_assert_msg(windows_differ, "every window has one relative order");
	pp_plan_free(&plan);
}
END_TEST

/*
 * Streamed with more workers than windows: under a memory budget that one
 * window per worker would exceed, the loader takes two windows, so the
 * workers take turns at them, each waiting for a window that the last
 * batch of its segment frees.  Every sample comes once in each of 3
 * epochs.  The budget is one byte under what the loader takes without
 * one (five windows): two windows and the ring fit it, a ring after five
 * does not.  Fails if that budget is refused (the windows counted without
 * the ring after them: "memory budget ... exceeded ... for the ring of
 * slots"), by a hang if a freed window does not wake the workers that wait
 * for it, or if a window is taken while needed.
 */
START_TEST(test_stream_two_windows)
{
	struct pp_loader_config cfg = { .batch_size = 7, .shuffle = true, .seed = 2, .workers = 4,
					.cache = PP_LOADER_CACHE_STREAM, .window_chunks = 8,
					.prefetch = 2 };
	struct pp_loader_stats st;
	struct pp_loader *l = make_loader(T_CHUNKS, 1200, 50, &cfg, NULL);
	uint64_t ids[1300], n;
	uint8_t pad[1300];
	size_t full;
	int ret = -ENOMEM;

	ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
	full = st.memory_bytes;
	pp_loader_destroy(l);
	cfg.memory_budget = full - 1;
	{
		struct pp_loader_source src = tsource_make(T_CHUNKS, 1200, 50, NULL);

		ret = pp_loader_create_source(&cfg, &src, &l);
	}
	ck_assert_msg(ret == 0, "a budget of %zu bytes (5 windows take %zu) refused: %s",
		      cfg.memory_budget, full, pp_last_error());
	ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
	ck_assert_uint_lt(st.memory_bytes, full);
	for (uint64_t e = 0; e < 3; e++) {
		bool seen[1200] = { false };

		n = 0;
		run_epoch(l, e, &cfg, ids, pad, &n, true);
		ck_assert_uint_eq(n, 1200);
		for (uint64_t k = 0; k < n; k++) {
			ck_assert_msg(!seen[ids[k]], "sample %llu twice", (unsigned long long)ids[k]);
			seen[ids[k]] = true;
		}
	}
	pp_loader_destroy(l);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("loader");
	TCase *tc = tcase_create("plan");
	TCase *te = tcase_create("errors");
	TCase *tio = tcase_create("io");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_exactly_once_memory, 0, 16);
	tcase_add_loop_test(tc, test_exactly_once_gather, 0, 16);
	tcase_add_loop_test(tc, test_exactly_once_cached, 0, 16);
	tcase_add_loop_test(tc, test_exactly_once_stream, 0, 16);
	tcase_add_loop_test(tc, test_order_deterministic, 0, 3);
	tcase_add_loop_test(tc, test_resume, 0, 2);
	tcase_add_test(tc, test_rank_padding_memory);
	tcase_add_loop_test(tc, test_resume_settings, 0, 2);
	tcase_add_test(tc, test_shuffle_every_order);
	tcase_add_test(tc, test_stream_windows);
	tcase_add_test(tc, test_stream_two_windows);
	suite_add_tcase(s, tc);
	tcase_set_timeout(te, 30);
	tcase_add_loop_test(te, test_corrupt_chunk, 0, 3);
	tcase_add_test(te, test_destroy_midepoch);
	tcase_add_loop_test(te, test_enobufs, 0, 3);
	tcase_add_loop_test(te, test_try_next, 0, 2);
	tcase_add_test(te, test_normalise_channels);
	tcase_add_test(te, test_bad_normalisation);
	tcase_add_test(te, test_convert_kernels);
	tcase_add_test(te, test_bad_config);
	tcase_add_test(te, test_stats);
	tcase_add_test(te, test_spin);
	suite_add_tcase(s, te);
	tcase_set_timeout(tio, 60);
	tcase_add_loop_test(tio, test_reader, 0, 2);
	tcase_add_loop_test(tio, test_shards_exactly_once, 0, 2);
	tcase_add_loop_test(tio, test_shards_corrupt, 0, 2);
	tcase_add_test(tio, test_sources);
	tcase_add_test(tio, test_uring_refused);
	tcase_add_test(tio, test_fashion_mnist);
	suite_add_tcase(s, tio);
	return s;
}
