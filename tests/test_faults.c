/*
 * tests/test_faults.c: injected faults (common/fault.h) through the
 * loader's reader, the loader, the device's pinning and every allocation of
 * the create paths: short reads, EINTR, EIO, stalled reads against the I/O
 * timeout, io_uring refused at set-up or failing to submit, pinning refused,
 * and the k-th allocation failing for every k.  Each asserts the exact
 * outcome: the error code and message, or the fallback and its statistic.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "loader/loader_impl.h"
#include "pinpipe/pinpipe.h"
#include "pinpipe/transfer.h"
#include "tests/testutil.h"
#include "device/device_impl.h"

#define NSHARDS 2
#define PER_SHARD 300
#define PER_CHUNK 25

/*
 * Whether io_uring can be set up here (the io_uring cases are skipped where
 * it cannot).  PP_TEST_IO=pread says no, for valgrind, which does not see
 * the kernel write through io_uring into a buffer.
 */
static bool uring_available(void)
{
	const char *e = getenv("PP_TEST_IO");
	struct pp_reader r;

	if (e != NULL && strcmp(e, "pread") == 0)
		return false;
	if (pp_reader_init(&r, PP_LOADER_IO_URING, 4, PP_LOADER_IO_TIMEOUT_MS) != 0)
		return false;
	pp_reader_fini(&r);
	return true;
}

/* Two compressed shards of a synthetic dataset, and the dataset to compare with. */
struct fx {
	char *dir;
	char *paths[NSHARDS];
	struct pp_dataset *ds;
	bool uring;            /* io_uring can be used here */
};

static void fx_open(struct fx *f)
{
	struct pp_synthetic_config sc = { .count = NSHARDS * PER_SHARD, .channels = 1, .height = 8,
					  .width = 8, .num_classes = 10, .seed = 5,
					  .dtype = PP_DTYPE_U8 };
	uint8_t samples[PER_SHARD * 64];
	int32_t labels[PER_SHARD];

	f->dir = pp_test_tmpdir();
	f->uring = uring_available();
	ck_assert_int_eq(pp_dataset_create_synthetic(&sc, &f->ds), 0);
	for (int s = 0; s < NSHARDS; s++) {
		struct pp_shard_writer_config wc = { .info = pp_dataset_info(f->ds),
						     .records_per_chunk = PER_CHUNK, .level = 1,
						     .threads = 1 };
		struct pp_shard_writer *w;

		ck_assert_int_ne(asprintf(&f->paths[s], "%s/part-%d.pps", f->dir, s), -1);
		ck_assert_int_eq(pp_dataset_read(f->ds, (uint64_t)s * PER_SHARD, PER_SHARD, samples,
						 labels), 0);
		ck_assert_int_eq(pp_shard_writer_create(f->paths[s], &wc, &w), 0);
		ck_assert_int_eq(pp_shard_writer_add(w, samples, labels, PER_SHARD), 0);
		ck_assert_int_eq(pp_shard_writer_finish(w), 0);
		pp_shard_writer_destroy(w);
	}
}

static void fx_close(struct fx *f)
{
	for (int s = 0; s < NSHARDS; s++)
		free(f->paths[s]);
	pp_dataset_destroy(f->ds);
	pp_test_rmtree(f->dir);
	free(f->dir);
}

/* ------------------------------------------------------------------ the reader */

#define FILE_LEN (6 * 4096 + 100)

/* A file of FILE_LEN random bytes and a reader on it through io_uring (_i 0) or pread (_i 1). */
struct rfx {
	char *dir;
	char path[4096];
	uint8_t *data;
	uint8_t *buf;          /* 2 reads of 4 blocks */
	int fd;
	struct pp_reader r;
	struct pp_read q[2];
	struct pp_fault_plan plan;
	enum pp_fault_site site; /* the read site of this path */
};

static bool rfx_open(struct rfx *f, int path_idx)
{
	enum pp_loader_io mode = path_idx == 0 ? PP_LOADER_IO_URING : PP_LOADER_IO_PREAD;

	if (mode == PP_LOADER_IO_URING && !uring_available())
		return false;
	f->dir = pp_test_tmpdir();
	snprintf(f->path, sizeof(f->path), "%s/f", f->dir);
	f->data = malloc(FILE_LEN);
	pp_test_fill_random(f->data, FILE_LEN, 9);
	pp_test_write_file(f->path, f->data, FILE_LEN);
	f->fd = open(f->path, O_RDONLY);
	ck_assert_int_ge(f->fd, 0);
	ck_assert_int_eq(posix_memalign((void **)&f->buf, 4096, 8 * 4096), 0);
	ck_assert_int_eq(pp_fault_init(&f->plan), 0);
	pp_fault_set(&f->plan);
	ck_assert_int_eq(pp_reader_init(&f->r, mode, 4, PP_LOADER_IO_TIMEOUT_MS), 0);
	pp_fault_set(NULL);
	ck_assert_ptr_eq(f->r.faults, &f->plan);
	f->site = mode == PP_LOADER_IO_URING ? PP_FAULT_URING_READ : PP_FAULT_READ;
	return true;
}

/* Sets up the two reads: 3 blocks at 0, and the rest of the file from block 3. */
static void rfx_reads(struct rfx *f)
{
	memset(f->buf, 0, 8 * 4096);
	f->q[0] = (struct pp_read){ .fd = f->fd, .fd_buffered = f->fd, .offset = 0,
				    .len = 3 * 4096, .need = 3 * 4096, .buf = f->buf,
				    .path = f->path, .chunk = 0 };
	f->q[1] = (struct pp_read){ .fd = f->fd, .fd_buffered = f->fd, .offset = 3 * 4096,
				    .len = 4 * 4096, .need = FILE_LEN - 3 * 4096,
				    .buf = f->buf + 4 * 4096, .path = f->path, .chunk = 1 };
}

static void rfx_assert_data(const struct rfx *f)
{
	ck_assert_int_eq(memcmp(f->buf, f->data, 3 * 4096), 0);
	ck_assert_int_eq(memcmp(f->buf + 4 * 4096, f->data + 3 * 4096, FILE_LEN - 3 * 4096), 0);
}

static void rfx_close(struct rfx *f)
{
	pp_reader_fini(&f->r);
	pp_fault_fini(&f->plan);
	close(f->fd);
	free(f->buf);
	free(f->data);
	pp_test_rmtree(f->dir);
	free(f->dir);
}

/*
 * Reads that come back short are requeued for the rest and give the same
 * bytes: 12288 bytes arrive as 4096 + 4096 + 4096, the 12388 of the second
 * read as 8192 + 4096 + 100, so 6 reads are issued where 2 would do.  Fails
 * if a short read is taken as complete (wrong bytes) or as the end of the
 * file, or if the requeue is not done.
 */
START_TEST(test_reader_short)
{
	struct rfx f;

	if (!rfx_open(&f, _i))
		return;
	rfx_reads(&f);
	pp_fault_arm(&f.plan, f.site, PP_FAULT_SHORT, 0, 0);
	ck_assert_msg(pp_reader_read(&f.r, f.q, 2) == 0, "%s", pp_last_error());
	rfx_assert_data(&f);
	ck_assert_uint_eq(atomic_load(&f.plan.site[f.site].calls), 6);
	rfx_close(&f);
}
END_TEST

/*
 * EINTR is retried: the first two reads are interrupted, read again, and
 * the bytes are right.  Fails if EINTR is returned as an error or a read is
 * not retried (4 reads issued in all).
 */
START_TEST(test_reader_eintr)
{
	struct rfx f;

	if (!rfx_open(&f, _i))
		return;
	rfx_reads(&f);
	pp_fault_arm(&f.plan, f.site, -EINTR, 0, 2);
	ck_assert_msg(pp_reader_read(&f.r, f.q, 2) == 0, "%s", pp_last_error());
	rfx_assert_data(&f);
	ck_assert_uint_eq(atomic_load(&f.plan.site[f.site].calls), 4);
	ck_assert_uint_eq(atomic_load(&f.plan.site[f.site].hits), 2);
	rfx_close(&f);
}
END_TEST

/*
 * EIO on the second read is the error, with the file, chunk and offset in
 * the message; the reader works again afterwards.  Fails if the error is
 * lost, the message names another place, or the failed read leaves the
 * reader broken.
 */
START_TEST(test_reader_eio)
{
	char want[4200];
	struct rfx f;

	if (!rfx_open(&f, _i))
		return;
	rfx_reads(&f);
	pp_fault_arm(&f.plan, f.site, -EIO, 1, 1);
	ck_assert_int_eq(pp_reader_read(&f.r, f.q, 2), -EIO);
	snprintf(want, sizeof(want), "%s: chunk 1 at offset 12288: read failed: Input/output error",
		 f.path);
	ck_assert_str_eq(pp_last_error(), want);
	rfx_reads(&f);
	ck_assert_msg(pp_reader_read(&f.r, f.q, 2) == 0, "%s", pp_last_error());
	rfx_assert_data(&f);
	rfx_close(&f);
}
END_TEST

/*
 * A read that stalls becomes -ETIMEDOUT after the reader's limit (200 ms),
 * naming file, chunk and offset; on io_uring the stalled read is cancelled,
 * so the next reads on the same reader complete with the right bytes.
 * Fails if the stall hangs (Check's timeout), the limit is not kept (too
 * early or over 3 s), or the stalled read is left in flight.
 */
START_TEST(test_reader_timeout)
{
	char want[4200];
	struct rfx f;
	uint64_t t0, ms;

	if (!rfx_open(&f, _i))
		return;
	f.r.timeout_ms = 200;
	rfx_reads(&f);
	pp_fault_arm(&f.plan, f.site, PP_FAULT_STALL, 0, 1);
	t0 = pp_now_ns();
	ck_assert_int_eq(pp_reader_read(&f.r, f.q, 2), -ETIMEDOUT);
	ms = (pp_now_ns() - t0) / 1000000u;
	ck_assert_uint_ge(ms, 190);
	ck_assert_uint_lt(ms, 3000);
	snprintf(want, sizeof(want), "%s: chunk 0 at offset 0: read did not complete within 200 ms",
		 f.path);
	ck_assert_str_eq(pp_last_error(), want);
	ck_assert(!f.q[0].inflight && !f.q[1].inflight);
	rfx_reads(&f);
	ck_assert_msg(pp_reader_read(&f.r, f.q, 2) == 0, "%s", pp_last_error());
	rfx_assert_data(&f);
	rfx_close(&f);
}
END_TEST

/*
 * io_uring_submit failing mid-run is an error naming the file and chunk;
 * the reads queued are cancelled or completed before it returns, and the
 * reader works again afterwards.  Fails if the failure is ignored or the
 * ring is left with reads of the failed call.
 */
START_TEST(test_reader_submit_fails)
{
	char want[4200];
	struct rfx f;

	if (!rfx_open(&f, 0))
		return;
	rfx_reads(&f);
	pp_fault_arm(&f.plan, PP_FAULT_URING_SUBMIT, -EIO, 0, 1);
	ck_assert_int_eq(pp_reader_read(&f.r, f.q, 2), -EIO);
	snprintf(want, sizeof(want), "%s: chunk 0: io_uring_submit failed: Input/output error",
		 f.path);
	ck_assert_str_eq(pp_last_error(), want);
	ck_assert(!f.q[0].inflight && !f.q[1].inflight);
	rfx_reads(&f);
	ck_assert_msg(pp_reader_read(&f.r, f.q, 2) == 0, "%s", pp_last_error());
	rfx_assert_data(&f);
	rfx_close(&f);
}
END_TEST

/* ------------------------------------------------------------------ the loader */

static struct pp_loader_config stream_config(const struct fx *f, int path_idx)
{
	return (struct pp_loader_config){ .shard_paths = (const char *const *)f->paths,
					  .nshards = NSHARDS, .batch_size = 32, .shuffle = true,
					  .seed = 3, .workers = 2,
					  .cache = PP_LOADER_CACHE_STREAM,
					  .io = path_idx == 0 && f->uring ? PP_LOADER_IO_AUTO
									  : PP_LOADER_IO_PREAD };
}

/* Creates a loader with 'plan' as the thread's fault plan during create. */
static int create_with(const struct pp_loader_config *cfg, struct pp_fault_plan *plan,
		       struct pp_loader **l_p)
{
	int ret;

	pp_fault_set(plan);
	ret = pp_loader_create(cfg, l_p);
	pp_fault_set(NULL);
	return ret;
}

/* Runs epoch 0 and checks every sample and label against the dataset; returns the batches. */
static int check_epoch(struct pp_loader *l, const struct pp_dataset *ds)
{
	uint8_t want[32 * 64];
	int32_t labels[32];
	struct pp_batch *b;
	int ret, n = 0;

	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1) {
		ck_assert_int_eq(pp_dataset_gather(ds, b->ids, b->size, want, labels), 0);
		ck_assert_int_eq(memcmp(b->samples, want, (size_t)b->size * 64), 0);
		ck_assert_int_eq(memcmp(b->labels, labels, b->size * sizeof(int32_t)), 0);
		ck_assert_int_eq(pp_loader_release(l, b), 0);
		n++;
	}
	ck_assert_msg(ret == 0, "%s", pp_last_error());
	return n;
}

/* Runs epoch 0 until an error and returns it; fails if the epoch ends without one. */
static int epoch_error(struct pp_loader *l)
{
	struct pp_batch *b;
	int ret;

	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1)
		ck_assert_int_eq(pp_loader_release(l, b), 0);
	ck_assert_int_lt(ret, 0);
	return ret;
}

/*
 * Through the loader, with every read short, the epoch's samples and labels
 * are those of the dataset.  Fails if a short read is decoded as if whole
 * (the chunk's CRC fails) or a sample differs.
 */
START_TEST(test_loader_short_reads)
{
	struct pp_loader_config cfg;
	struct pp_fault_plan plan;
	struct pp_loader *l;
	struct fx f;
	bool uring = _i == 0 && uring_available();

	if (_i == 0 && !uring)
		return;
	fx_open(&f);
	cfg = stream_config(&f, _i);
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, uring ? PP_FAULT_URING_READ : PP_FAULT_READ, PP_FAULT_SHORT, 0, 0);
	ck_assert_msg(create_with(&cfg, &plan, &l) == 0, "%s", pp_last_error());
	ck_assert_int_eq(check_epoch(l, f.ds), (NSHARDS * PER_SHARD + 31) / 32);
	ck_assert_uint_gt(atomic_load(&plan.site[uring ? PP_FAULT_URING_READ : PP_FAULT_READ].hits), 0);
	pp_loader_destroy(l);
	pp_fault_fini(&plan);
	fx_close(&f);
}
END_TEST

/*
 * EIO on a read in the middle of an epoch (the 5th read) stops the epoch
 * with -EIO and a message naming a shard file and its chunk; the loader is
 * then destroyed cleanly.  Fails if the error is lost (the epoch ends with
 * 0), or the message names no file or chunk.
 */
START_TEST(test_loader_eio)
{
	struct pp_loader_config cfg;
	struct pp_fault_plan plan;
	struct pp_loader *l;
	struct fx f;
	bool uring = _i == 0 && uring_available();
	char want[4200];

	if (_i == 0 && !uring)
		return;
	fx_open(&f);
	cfg = stream_config(&f, _i);
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, uring ? PP_FAULT_URING_READ : PP_FAULT_READ, -EIO, 4, 1);
	ck_assert_msg(create_with(&cfg, &plan, &l) == 0, "%s", pp_last_error());
	ck_assert_int_eq(epoch_error(l), -EIO);
	snprintf(want, sizeof(want), "%s/part-", f.dir);
	ck_assert_msg(strstr(pp_last_error(), want) != NULL, "%s", pp_last_error());
	ck_assert_msg(strstr(pp_last_error(), ".pps: chunk ") != NULL, "%s", pp_last_error());
	ck_assert_msg(strstr(pp_last_error(), ": read failed: Input/output error") != NULL, "%s",
		      pp_last_error());
	pp_loader_destroy(l);
	pp_fault_fini(&plan);
	fx_close(&f);
}
END_TEST

/*
 * A worker whose read stalls turns the epoch into -ETIMEDOUT after the
 * configured io_timeout_ms, with file and chunk in the message, and the
 * loader is destroyed without hanging.  Fails on a hang (Check's timeout),
 * a wrong code, or a message without the limit and place.
 */
START_TEST(test_loader_timeout)
{
	struct pp_loader_config cfg;
	struct pp_fault_plan plan;
	struct pp_loader *l;
	struct fx f;
	bool uring = _i == 0 && uring_available();
	uint64_t t0;

	if (_i == 0 && !uring)
		return;
	fx_open(&f);
	cfg = stream_config(&f, _i);
	cfg.io_timeout_ms = 200;
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, uring ? PP_FAULT_URING_READ : PP_FAULT_READ, PP_FAULT_STALL, 2, 1);
	ck_assert_msg(create_with(&cfg, &plan, &l) == 0, "%s", pp_last_error());
	t0 = pp_now_ns();
	ck_assert_int_eq(epoch_error(l), -ETIMEDOUT);
	ck_assert_uint_ge((pp_now_ns() - t0) / 1000000u, 190);
	ck_assert_msg(strstr(pp_last_error(), ".pps: chunk ") != NULL, "%s", pp_last_error());
	ck_assert_msg(strstr(pp_last_error(), ": read did not complete within 200 ms") != NULL,
		      "%s", pp_last_error());
	pp_loader_destroy(l);
	pp_fault_fini(&plan);
	fx_close(&f);
}
END_TEST

/*
 * io_uring refused at set-up with ENOSYS, EPERM or ENOMEM (its rings'
 * memory, which the kernel charges to RLIMIT_MEMLOCK): PP_LOADER_IO_AUTO
 * falls back to pread, says so in the statistics, and loads the right
 * samples; PP_LOADER_IO_URING fails with that code and a message (naming
 * RLIMIT_MEMLOCK for ENOMEM).  Fails if the fallback is not taken or not
 * reported, or io_uring-only mode succeeds.
 */
START_TEST(test_uring_refused)
{
	static const int codes[] = { -ENOSYS, -EPERM, -ENOMEM };
	struct pp_loader_config cfg;
	struct pp_loader_stats st;
	struct pp_fault_plan plan;
	struct pp_loader *l;
	struct fx f;
	int code = codes[_i];

	fx_open(&f);
	cfg = stream_config(&f, 0);
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, PP_FAULT_URING_SETUP, code, 0, 0);
	ck_assert_msg(create_with(&cfg, &plan, &l) == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
	ck_assert_str_eq(st.io_path, "pread");
	ck_assert(!st.fixed_buffers);
	ck_assert_int_eq(check_epoch(l, f.ds), (NSHARDS * PER_SHARD + 31) / 32);
	pp_loader_destroy(l);

	cfg.io = PP_LOADER_IO_URING;
	l = NULL;
	ck_assert_int_eq(create_with(&cfg, &plan, &l), code);
	ck_assert_ptr_null(l);
	ck_assert_msg(strstr(pp_last_error(), "io_uring_queue_init(8) failed: ") != NULL, "%s",
		      pp_last_error());
	ck_assert_msg(strstr(pp_last_error(), "PP_LOADER_IO_AUTO falls back to pread") != NULL,
		      "%s", pp_last_error());
	if (code == -ENOMEM)
		ck_assert_msg(strstr(pp_last_error(), "RLIMIT_MEMLOCK") != NULL, "%s", pp_last_error());
	pp_fault_fini(&plan);
	fx_close(&f);
}
END_TEST

/*
 * io_uring given to the source's probe but refused to a worker's ring with
 * ENOMEM, as where RLIMIT_MEMLOCK (64 KiB in many containers) holds a few
 * rings: every worker's from the first on, then the second's alone.  Fails
 * if create fails (it did: "a worker's state: io_uring_queue_init(8)
 * failed"), if the statistics say io_uring though a worker reads through
 * pread, or if the samples are wrong.
 */
START_TEST(test_uring_refused_to_a_worker)
{
	struct pp_loader_config cfg;
	struct pp_loader_stats st;
	struct pp_fault_plan plan;
	struct pp_loader *l;
	struct fx f;

	fx_open(&f);
	if (!f.uring) {
		fprintf(stderr, "test_uring_refused_to_a_worker: no io_uring here: not checked\n");
		fx_close(&f);
		return;
	}
	cfg = stream_config(&f, 0);
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	for (int after = 1; after <= 2; after++) {
		/* the probe's call passes; then every worker's, or the second's alone, is refused */
		pp_fault_arm(&plan, PP_FAULT_URING_SETUP, -ENOMEM, (uint64_t)after, after == 1 ? 0 : 1);
		ck_assert_msg(create_with(&cfg, &plan, &l) == 0, "%s", pp_last_error());
		ck_assert_uint_eq(atomic_load(&plan.site[PP_FAULT_URING_SETUP].hits), after == 1 ? 2 : 1);
		ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
		ck_assert_str_eq(st.io_path, "pread");
		ck_assert(!st.fixed_buffers);
		ck_assert_int_eq(check_epoch(l, f.ds), (NSHARDS * PER_SHARD + 31) / 32);
		pp_loader_destroy(l);
	}
	pp_fault_fini(&plan);
	fx_close(&f);
}
END_TEST

/*
 * Pinning refused: the loader's ring falls back to pageable memory, the
 * loader's statistics say pinned false and the device counts one fallback;
 * the batches are still right.  Fails if create fails instead, or the
 * fallback is not reported.
 */
START_TEST(test_pin_refused)
{
	struct pp_loader_config cfg;
	struct pp_loader_stats st;
	struct pp_device_stats ds;
	struct pp_fault_plan plan;
	struct pp_device *dev;
	struct pp_loader *l;
	struct fx f;

	fx_open(&f);
	ck_assert_int_eq(pp_device_open("sim", &dev), 0);
	cfg = stream_config(&f, 1);
	cfg.device = dev;
	cfg.pin_memory = true;
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, PP_FAULT_PIN, -EPERM, 0, 0);
	ck_assert_msg(create_with(&cfg, &plan, &l) == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
	ck_assert(!st.pinned);
	ck_assert_int_eq(pp_device_get_stats(dev, &ds), 0);
	ck_assert_uint_eq(ds.pinned_fallbacks, 1);
	ck_assert_uint_eq(atomic_load(&plan.site[PP_FAULT_PIN].hits), 1);
	ck_assert_int_eq(check_epoch(l, f.ds), (NSHARDS * PER_SHARD + 31) / 32);
	pp_loader_destroy(l);
	pp_device_close(dev);
	pp_fault_fini(&plan);
	fx_close(&f);
}
END_TEST

/* ------------------------------------------------------------------ allocation failures */

/* One create path under test: makes its object into *obj_p, or fails. */
struct create_case {
	const char *name;
	int (*create)(struct fx *f, void **obj_p);
	void (*destroy)(void *obj);
};

static int create_device(struct fx *f, void **obj_p)
{
	(void)f;
	return pp_device_open("sim", (struct pp_device **)obj_p);
}

static void destroy_device(void *obj)
{
	pp_device_close(obj);
}

static int create_shard(struct fx *f, void **obj_p)
{
	return pp_shard_open(f->paths[0], (struct pp_shard **)obj_p);
}

static void destroy_shard(void *obj)
{
	pp_shard_close(obj);
}

static int create_dataset(struct fx *f, void **obj_p)
{
	return pp_dataset_open_shards((const char *const *)f->paths, NSHARDS,
				      (struct pp_dataset **)obj_p);
}

static void destroy_dataset(void *obj)
{
	pp_dataset_destroy(obj);
}

/* An IDX pair of 5 images of 4 x 4 and their labels, raw, beside the shards. */
static int create_idx(struct fx *f, void **obj_p)
{
	static const uint8_t images_head[16] = { 0, 0, 8, 3, 0, 0, 0, 5, 0, 0, 0, 4, 0, 0, 0, 4 };
	static const uint8_t labels_file[13] = { 0, 0, 8, 1, 0, 0, 0, 5, 1, 2, 3, 4, 5 };
	char images[4096], labels[4096];
	uint8_t buf[16 + 5 * 16];

	snprintf(images, sizeof(images), "%s/images-idx3-ubyte", f->dir);
	snprintf(labels, sizeof(labels), "%s/labels-idx1-ubyte", f->dir);
	if (access(images, R_OK) != 0) {
		memcpy(buf, images_head, sizeof(images_head));
		pp_test_fill_random(buf + 16, 5 * 16, 4);
		pp_test_write_file(images, buf, sizeof(buf));
		pp_test_write_file(labels, labels_file, sizeof(labels_file));
	}
	return pp_dataset_open_idx(images, labels, (struct pp_dataset **)obj_p);
}

/* The list of the fixture's shards (part-N.pps), as pp_shard_find() makes it. */
static int create_shard_list(struct fx *f, void **obj_p)
{
	size_t n;
	int ret = pp_shard_find(f->dir, "part", (char ***)obj_p, &n);

	ck_assert(ret < 0 || n == NSHARDS);
	return ret;
}

static void destroy_shard_list(void *obj)
{
	pp_shard_paths_free(obj);
}

static int create_stream_loader(struct fx *f, void **obj_p)
{
	struct pp_loader_config cfg = stream_config(f, 0);
	return pp_loader_create(&cfg, (struct pp_loader **)obj_p);
}

static int create_memory_loader(struct fx *f, void **obj_p)
{
	struct pp_loader_config cfg = stream_config(f, 0);
	cfg.cache = PP_LOADER_CACHE_MEMORY;
	return pp_loader_create(&cfg, (struct pp_loader **)obj_p);
}

static void destroy_loader(void *obj)
{
	pp_loader_destroy(obj);
}

/* A loader into a sim device's pinned memory and a transfer stage on it. */
struct stage {
	struct pp_device *dev;
	struct pp_loader *l;
	struct pp_transfer *t;
};

static void destroy_stage(void *obj)
{
	struct stage *s = obj;

	pp_transfer_destroy(s->t);
	pp_loader_destroy(s->l);
	pp_device_close(s->dev);
	free(s);
}

static int create_stage(struct fx *f, void **obj_p)
{
	struct pp_loader_config cfg = stream_config(f, 0);
	struct pp_transfer_config tc = { 0 };
	struct stage *s = calloc(1, sizeof(*s));
	int ret;

	ck_assert_ptr_nonnull(s);
	if ((ret = pp_device_open("sim", &s->dev)) < 0)
		goto err;
	cfg.device = s->dev;
	cfg.pin_memory = true;
	if ((ret = pp_loader_create(&cfg, &s->l)) < 0)
		goto err;
	tc.loader = s->l;
	tc.device = s->dev;
	if ((ret = pp_transfer_create(&tc, &s->t)) < 0)
		goto err;
	*obj_p = s;
	return 0;
err:
	destroy_stage(s);
	return ret;
}

static const struct create_case create_cases[] = {
	{ "device", create_device, destroy_device },
	{ "shard", create_shard, destroy_shard },
	{ "dataset", create_dataset, destroy_dataset },
	{ "idx dataset", create_idx, destroy_dataset },
	{ "shard list", create_shard_list, destroy_shard_list },
	{ "stream loader", create_stream_loader, destroy_loader },
	{ "memory loader", create_memory_loader, destroy_loader },
	{ "transfer stage", create_stage, destroy_stage },
};

/*
 * Fails the k-th allocation of a create path, for k = 1, 2, ... until the
 * create makes no allocation that can fail: each failure must return
 * -ENOMEM with a message, write no object, and (under ASan or valgrind)
 * leak nothing.  Fails if a failed allocation is ignored (crash, or success
 * with the fault taken), reported with another code or no message, or if
 * the path has no allocation at all to fail.
 */
START_TEST(test_alloc_failures)
{
	const struct create_case *c = &create_cases[_i];
	struct pp_fault_plan plan;
	struct fx f;
	uint64_t k;

	fx_open(&f);
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	for (k = 0;; k++) {
		void *obj = NULL;
		int ret;

		pp_fault_arm(&plan, PP_FAULT_ALLOC, -ENOMEM, k, 1);
		pp_error_set(0, "");
		pp_fault_set(&plan);
		ret = c->create(&f, &obj);
		pp_fault_set(NULL);
		if (atomic_load(&plan.site[PP_FAULT_ALLOC].hits) == 0) {
			ck_assert_msg(ret == 0, "%s: %s", c->name, pp_last_error());
			c->destroy(obj);
			break;
		}
		ck_assert_msg(ret == -ENOMEM, "%s: allocation %llu failed: got %d (%s)", c->name,
			      (unsigned long long)k + 1, ret, pp_last_error());
		ck_assert_msg(pp_last_error()[0] != '\0', "%s: allocation %llu: no message", c->name,
			      (unsigned long long)k + 1);
		ck_assert_ptr_null(obj);
	}
	ck_assert_uint_gt(k, 1);
	pp_fault_fini(&plan);
	fx_close(&f);
}
END_TEST

/*
 * Device memory refused (the sim's injected allocation failure) at each of
 * the transfer stage's 4 slots: create returns -ENOMEM with the sim's
 * message, frees what it had (ASan, valgrind), and succeeds once the device
 * allocates again.  Fails if a refused slot is ignored or reported wrong.
 */
START_TEST(test_transfer_device_memory)
{
	struct pp_loader_config cfg;
	struct pp_transfer_config tc = { 0 };
	struct pp_transfer *t;
	struct pp_device *dev;
	struct pp_loader *l;
	struct fx f;

	fx_open(&f);
	ck_assert_int_eq(pp_device_open("sim", &dev), 0);
	cfg = stream_config(&f, 1);
	cfg.device = dev;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
	tc.loader = l;
	tc.device = dev;
	for (long long after = 0; after < 4; after++) {
		t = NULL;
		ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_ALLOC, after), 0);
		ck_assert_int_eq(pp_transfer_create(&tc, &t), -ENOMEM);
		ck_assert_ptr_null(t);
		ck_assert_msg(strstr(pp_last_error(), "failed: injected fault") != NULL, "%s",
			      pp_last_error());
	}
	ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_ALLOC, -1), 0);
	ck_assert_msg(pp_transfer_create(&tc, &t) == 0, "%s", pp_last_error());
	pp_transfer_destroy(t);
	pp_loader_destroy(l);
	pp_device_close(dev);
	fx_close(&f);
}
END_TEST

/*
 * The PP_FAULTS syntax arms the sites it names and refuses what it does
 * not know, naming it.  Fails if a field is parsed wrong or a bad entry is
 * accepted.
 */
START_TEST(test_parse)
{
	struct pp_fault_plan plan;

	ck_assert_int_eq(pp_fault_init(&plan), 0);
	ck_assert_int_eq(pp_fault_parse(&plan, "write:ENOSPC:after=3;read:short:count=2"), 0);
	ck_assert_int_eq(plan.site[PP_FAULT_WRITE].mode, -ENOSPC);
	ck_assert_uint_eq(plan.site[PP_FAULT_WRITE].after, 3);
	ck_assert_int_eq(plan.site[PP_FAULT_READ].mode, PP_FAULT_SHORT);
	ck_assert_uint_eq(plan.site[PP_FAULT_READ].count, 2);
	for (int n = 0; n < 3; n++)
		ck_assert_int_eq(pp_fault_check(&plan, PP_FAULT_WRITE), 0);
	ck_assert_int_eq(pp_fault_check(&plan, PP_FAULT_WRITE), -ENOSPC);
	ck_assert_int_eq(pp_fault_check(&plan, PP_FAULT_READ), PP_FAULT_SHORT);
	ck_assert_int_eq(pp_fault_check(&plan, PP_FAULT_READ), PP_FAULT_SHORT);
	ck_assert_int_eq(pp_fault_check(&plan, PP_FAULT_READ), 0);
	ck_assert_int_eq(pp_fault_parse(&plan, "disk:EIO"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "unknown site in 'disk:EIO'"));
	ck_assert_int_eq(pp_fault_parse(&plan, "read:EBOGUS"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "unknown mode in 'read:EBOGUS'"));
	ck_assert_int_eq(pp_fault_parse(&plan, "read:EIO:later=2"), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "'later=2'"));
	pp_fault_fini(&plan);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("faults");
	TCase *tc = tcase_create("reader");

	tcase_add_loop_test(tc, test_reader_short, 0, 2);
	tcase_add_loop_test(tc, test_reader_eintr, 0, 2);
	tcase_add_loop_test(tc, test_reader_eio, 0, 2);
	tcase_add_loop_test(tc, test_reader_timeout, 0, 2);
	tcase_add_test(tc, test_reader_submit_fails);
	tcase_add_test(tc, test_parse);
	suite_add_tcase(s, tc);

	tc = tcase_create("loader");
	tcase_set_timeout(tc, 20);
	tcase_add_loop_test(tc, test_loader_short_reads, 0, 2);
	tcase_add_loop_test(tc, test_loader_eio, 0, 2);
	tcase_add_loop_test(tc, test_loader_timeout, 0, 2);
	tcase_add_loop_test(tc, test_uring_refused, 0, 3);
	tcase_add_test(tc, test_uring_refused_to_a_worker);
	tcase_add_test(tc, test_pin_refused);
	tcase_add_test(tc, test_transfer_device_memory);
	suite_add_tcase(s, tc);

	tc = tcase_create("alloc");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_alloc_failures, 0, (int)PP_ARRAY_SIZE(create_cases));
	suite_add_tcase(s, tc);
	return s;
}
