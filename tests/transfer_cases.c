/*
 * tests/transfer_cases.c: tests of the transfer stage that hold on every
 * device with a queue of its own (sim, cuda): thousands of batches arrive
 * intact and in order under random compute delays, with no device slot
 * reused and no host batch given back before its event; pageable copies
 * block the host and pinned ones do not; epochs can change mid-stream;
 * destroying mid-stream gives everything back; misuse is refused; a span
 * of releases is proved by its newest, on its own stream.
 *
 * The device memory is read back by the compute stream itself (a
 * device-to-host copy enqueued after a random synthetic compute delay, then
 * a host function that compares it with the dataset), so a slot overwritten
 * or poisoned before the trainer's last use shows as a mismatch.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common_impl.h"
#include "pinpipe/dataset.h"
#include "pinpipe/transfer.h"
#include "tests/testutil.h"
#include "tests/transfer_cases.h"

static const char *const *case_names;

void pp_tfix_open(struct pp_tfix *f, const char *name, uint64_t count, uint32_t batch,
		  enum pp_dtype dtype, bool pin, uint32_t depth, uint32_t slots)
{
	struct pp_synthetic_config sc = { .count = count, .channels = 1, .height = 28, .width = 28,
					  .num_classes = 10, .seed = 11, .dtype = PP_DTYPE_U8 };
	struct pp_transfer_config tc = { .depth = depth, .slots = slots, .time_every = 1 };
	int ret;

	memset(f, 0, sizeof(*f));
	ret = pp_device_open(name, &f->dev);
	ck_assert_msg(ret == 0, "pp_device_open(%s): %s", name, pp_last_error());
	ret = pp_dataset_create_synthetic(&sc, &f->ds);
	ck_assert_msg(ret == 0, "synthetic dataset: %s", pp_last_error());
	f->cfg = (struct pp_loader_config){ .dataset = f->ds, .batch_size = batch, .shuffle = true,
					    .seed = 5, .workers = 2, .device = f->dev,
					    .pin_memory = pin, .dtype = dtype,
					    .mean = { 0.25f }, .std = { 0.5f } };
	ret = pp_loader_create(&f->cfg, &f->loader);
	ck_assert_msg(ret == 0, "pp_loader_create: %s", pp_last_error());
	tc.loader = f->loader;
	tc.device = f->dev;
	ret = pp_transfer_create(&tc, &f->t);
	ck_assert_msg(ret == 0, "pp_transfer_create: %s", pp_last_error());
	ret = pp_stream_create(f->dev, &f->compute);
	ck_assert_msg(ret == 0, "pp_stream_create: %s", pp_last_error());
}

void pp_tfix_close(struct pp_tfix *f)
{
	pp_stream_destroy(f->compute);
	pp_transfer_destroy(f->t);
	pp_loader_destroy(f->loader);
	pp_dataset_destroy(f->ds);
	pp_device_close(f->dev);
}

/* ------------------------------------------------------------------ the checker */

/* Read-back buffers in rotation; one is reused only after its check ran. */
#define TCHECK_BUFS 8

struct tcheck_buf {
	struct pp_tcheck *c;
	void *samples;          /* pinned host, batch x sample_bytes: read back from the device */
	int32_t *labels;        /* pinned host, batch: read back from the device */
	uint64_t *ids;          /* batch: the batch's sample ids */
	void *expect;           /* batch x sample_bytes: the dataset's samples, converted */
	int32_t *expect_labels; /* batch */
	uint32_t size;          /* samples in the batch */
	uint64_t index;         /* batch index, for messages */
	struct pp_stream *stream; /* where its check was queued */
	atomic_bool busy;       /* a check is queued on it */
};

struct pp_tcheck {
	struct pp_tfix *f;
	struct pp_loader *ref;       /* same settings, no device, no workers */
	size_t sample_bytes;         /* bytes of one sample as handed out */
	uint32_t batch;              /* samples of a full batch */
	uint64_t n;                  /* batches checked so far */
	struct tcheck_buf bufs[TCHECK_BUFS];
	atomic_uint_least64_t bad;   /* read-backs that differed */
	atomic_uint_least64_t done;  /* read-backs compared */
	atomic_uint_least64_t first_bad; /* index of the first that differed, + 1 */
};

/* Runs on the compute stream: compares the read-back with what the reference loader gave. */
static void tcheck_compare(void *arg)
{
	struct tcheck_buf *b = arg;
	struct pp_tcheck *c = b->c;
	bool ok = memcmp(b->samples, b->expect, (size_t)b->size * c->sample_bytes) == 0 &&
		  memcmp(b->labels, b->expect_labels, (size_t)b->size * sizeof(int32_t)) == 0;

	if (!ok) {
		uint64_t zero = 0;

		atomic_fetch_add(&c->bad, 1);
		atomic_compare_exchange_strong(&c->first_bad, &zero, b->index + 1);
	}
	atomic_fetch_add(&c->done, 1);
	atomic_store(&b->busy, false);
}

struct pp_tcheck *pp_tcheck_create(struct pp_tfix *f)
{
	struct pp_tcheck *c = calloc(1, sizeof(*c));
	struct pp_loader_config rc = f->cfg;
	int ret;

	ck_assert_ptr_nonnull(c);
	c->f = f;
	rc.device = NULL;
	rc.pin_memory = false;
	rc.workers = 0;
	ret = pp_loader_create(&rc, &c->ref);
	ck_assert_msg(ret == 0, "reference loader: %s", pp_last_error());
	pp_loader_get_layout(c->ref, &c->batch, &c->sample_bytes);
	for (int i = 0; i < TCHECK_BUFS; i++) {
		struct tcheck_buf *b = &c->bufs[i];

		b->c = c;
		ret = pp_host_alloc(f->dev, (size_t)c->batch * c->sample_bytes, true, &b->samples, NULL);
		ck_assert_int_eq(ret, 0);
		ret = pp_host_alloc(f->dev, (size_t)c->batch * sizeof(int32_t), true,
				    (void **)&b->labels, NULL);
		ck_assert_int_eq(ret, 0);
		b->ids = calloc(c->batch, sizeof(uint64_t));
		b->expect = calloc(c->batch, c->sample_bytes);
		b->expect_labels = calloc(c->batch, sizeof(int32_t));
		ck_assert(b->ids != NULL && b->expect != NULL && b->expect_labels != NULL);
		atomic_init(&b->busy, false);
	}
	return c;
}

void pp_tcheck_epoch(struct pp_tcheck *c, uint64_t epoch)
{
	int ret = pp_loader_begin_epoch(c->ref, epoch);

	ck_assert_msg(ret == 0, "reference begin_epoch: %s", pp_last_error());
}

void pp_tcheck_skip(struct pp_tcheck *c, uint64_t n)
{
	struct pp_batch *rb;

	for (uint64_t i = 0; i < n; i++) {
		ck_assert_int_eq(pp_loader_next(c->ref, &rb), 1);
		ck_assert_int_eq(pp_loader_release(c->ref, rb), 0);
	}
}

void pp_tcheck_batch(struct pp_tcheck *c, struct pp_device_batch *b, uint32_t delay_us)
{
	struct tcheck_buf *cb = &c->bufs[c->n % TCHECK_BUFS];
	struct pp_stream *compute = c->f->compute;
	struct pp_batch *rb;
	int ret;

	ret = pp_loader_next(c->ref, &rb);
	ck_assert_msg(ret == 1, "reference loader ended before batch %llu: %d",
		      (unsigned long long)b->index, ret);
	ck_assert_uint_eq(b->epoch, rb->epoch);
	ck_assert_uint_eq(b->index, rb->index);
	ck_assert_uint_eq(b->size, rb->size);
	ck_assert_uint_eq(b->padding, rb->padding);
	ck_assert_uint_eq(b->sample_bytes, rb->sample_bytes);
	ck_assert_int_eq(b->dtype, rb->dtype);
	ck_assert_msg(memcmp(b->host_ids, rb->ids, (size_t)b->size * sizeof(uint64_t)) == 0,
		      "batch %llu: ids differ from the reference loader's",
		      (unsigned long long)b->index);
	ck_assert_msg(memcmp(b->host_labels, rb->labels, (size_t)b->size * sizeof(int32_t)) == 0,
		      "batch %llu: host labels differ", (unsigned long long)b->index);
	if (atomic_load(&cb->busy)) {
		ret = pp_stream_synchronize(cb->stream);
		ck_assert_msg(ret == 0, "compute stream: %s", pp_last_error());
		ck_assert(!atomic_load(&cb->busy));
	}
	cb->size = b->size;
	cb->index = b->index;
	memcpy(cb->expect, rb->samples, (size_t)b->size * c->sample_bytes);
	memcpy(cb->expect_labels, rb->labels, (size_t)b->size * sizeof(int32_t));
	memcpy(cb->ids, b->host_ids, (size_t)b->size * sizeof(uint64_t));
	pp_loader_release(c->ref, rb);
	cb->stream = compute;
	atomic_store(&cb->busy, true);
	if (delay_us > 0)
		ck_assert_int_eq(pp_stream_spin(compute, (uint64_t)delay_us * 1000u), 0);
	ret = pp_memcpy_async(cb->samples, b->samples, (size_t)b->size * c->sample_bytes,
			      PP_COPY_D2H, compute);
	ck_assert_msg(ret == 0, "read-back: %s", pp_last_error());
	ret = pp_memcpy_async(cb->labels, b->labels, (size_t)b->size * sizeof(int32_t),
			      PP_COPY_D2H, compute);
	ck_assert_msg(ret == 0, "read-back of labels: %s", pp_last_error());
	ck_assert_int_eq(pp_stream_launch_host(compute, tcheck_compare, cb), 0);
	ret = pp_transfer_release(c->f->t, b, compute);
	ck_assert_msg(ret == 0, "release: %s", pp_last_error());
	c->n++;
}

uint64_t pp_tcheck_finish(struct pp_tcheck *c)
{
	uint64_t n = c->n, bad, first;
	int ret = pp_stream_synchronize(c->f->compute);

	ck_assert_msg(ret == 0, "compute stream: %s", pp_last_error());
	bad = atomic_load(&c->bad);
	first = atomic_load(&c->first_bad);
	ck_assert_uint_eq(atomic_load(&c->done), n);
	for (int i = 0; i < TCHECK_BUFS; i++) {
		pp_host_free(c->f->dev, c->bufs[i].samples);
		pp_host_free(c->f->dev, c->bufs[i].labels);
		free(c->bufs[i].ids);
		free(c->bufs[i].expect);
		free(c->bufs[i].expect_labels);
	}
	pp_loader_destroy(c->ref);
	free(c);
	ck_assert_msg(bad == 0, "%llu of %llu batches differed on the device (first: batch %llu)",
		      (unsigned long long)bad, (unsigned long long)n,
		      (unsigned long long)(first - 1));
	return n;
}

/* ------------------------------------------------------------------ the cases */

/* A small deterministic generator for delays. */
static uint32_t next_rand(uint64_t *state)
{
	*state = *state * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*state >> 33);
}

static void sleep_us(uint32_t us)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)us * 1000 };

	nanosleep(&ts, NULL);
}

/*
 * Two epochs of 1000 batches each, random compute delays (0-100 µs) on the
 * compute stream and random pauses in the trainer's thread.  Fails if a
 * batch arrives out of order or not the loader's (ids, labels), or if its
 * device memory differs from the dataset when compute reads it: a device
 * slot reused (or, on the sim, poisoned) before the trainer's release event,
 * or a host batch given back to the loader (and refilled) before its copy
 * completed, shows as a mismatch.
 */
START_TEST(test_stream_intact_in_order)
{
	struct pp_tfix f;
	struct pp_tcheck *c;
	struct pp_device_batch *b;
	struct pp_transfer_stats st;
	uint64_t rng = 99, per_epoch;
	int ret;

	pp_tfix_open(&f, case_names[_i], 16000, 16, 0, true, 3, 0);
	c = pp_tcheck_create(&f);
	for (uint64_t e = 0; e < 2; e++) {
		uint64_t n = 0;

		ck_assert_int_eq(pp_transfer_begin_epoch(f.t, e), 0);
		pp_tcheck_epoch(c, e);
		per_epoch = pp_loader_batches_per_epoch(f.loader);
		while ((ret = pp_transfer_next(f.t, f.compute, &b)) == 1) {
			uint32_t r = next_rand(&rng);

			ck_assert_uint_eq(b->index, n);
			pp_tcheck_batch(c, b, r % 101);
			if (r % 7 == 0)
				sleep_us(r % 50);
			n++;
		}
		ck_assert_msg(ret == 0, "next: %s", pp_last_error());
		ck_assert_ptr_null(b);
		ck_assert_uint_eq(n, 1000);
		ck_assert_uint_eq(n, per_epoch);
	}
	ck_assert_uint_eq(pp_tcheck_finish(c), 2000);
	ck_assert_int_eq(pp_transfer_get_stats(f.t, &st), 0);
	ck_assert_uint_eq(st.batches, 2000);
	ck_assert_uint_eq(st.bytes, 2000ull * 16 * (784 + 4));
	ck_assert_uint_eq(st.copies_timed, 2000);
	ck_assert_uint_le(st.exposed_ns, st.copy_ns);
	ck_assert_uint_le(st.late_ns, st.exposed_ns);
	pp_tfix_close(&f);
}
END_TEST

void pp_tstats_sub(struct pp_transfer_stats *st, const struct pp_transfer_stats *s0)
{
	st->batches -= s0->batches;
	st->bytes -= s0->bytes;
	st->copies_timed -= s0->copies_timed;
	st->copy_ns -= s0->copy_ns;
	st->late_ns -= s0->late_ns;
	st->exposed_ns -= s0->exposed_ns;
	st->host_blocked_ns -= s0->host_blocked_ns;
	st->stage_ns -= s0->stage_ns;
	st->wait_ns -= s0->wait_ns;
	st->slot_wait_ns -= s0->slot_wait_ns;
	st->hidden_share = st->copy_ns ? 1.0 - (double)st->exposed_ns / (double)st->copy_ns : NAN;
}

/* Runs 'n' batches with 'compute_us' of compute each on the compute stream. */
static void run_batches(struct pp_tfix *f, int n, uint32_t compute_us)
{
	struct pp_device_batch *b;

	for (int i = 0; i < n; i++) {
		int ret = pp_transfer_next(f->t, f->compute, &b);

		ck_assert_msg(ret == 1, "next: %d %s", ret, pp_last_error());
		ck_assert_int_eq(pp_stream_spin(f->compute, (uint64_t)compute_us * 1000u), 0);
		ck_assert_int_eq(pp_transfer_release(f->t, b, f->compute), 0);
	}
}

/*
 * Runs 'batches' batches with 'compute_us' of compute each, after 8 not
 * counted (the first use of every slot and page), and writes the stats of
 * the counted ones.
 */
static void run_compute(struct pp_tfix *f, int batches, uint32_t compute_us,
			struct pp_transfer_stats *st)
{
	struct pp_transfer_stats s0;

	ck_assert_int_eq(pp_transfer_begin_epoch(f->t, 0), 0);
	run_batches(f, 8, compute_us);
	ck_assert_int_eq(pp_transfer_get_stats(f->t, &s0), 0);
	run_batches(f, batches, compute_us);
	ck_assert_int_eq(pp_stream_synchronize(f->compute), 0);
	ck_assert_int_eq(pp_transfer_get_stats(f->t, st), 0);
	pp_tstats_sub(st, &s0);
}

/*
 * Float32 batches, compute sized from what the test measures: first a run
 * with no compute gives the time a batch takes through the loader and the
 * stage; compute is then four times that, and at least 1 ms, so that the
 * loader keeps ahead on any machine.  On sim batches of 64 (200 KB, 200 us
 * at 1 GB/s), on a GPU batches of 4096 (12.8 MB, about 250 us at 50 GB/s, so
 * that the copy is long against the cost of the call).  Fails if pinned
 * copies are not 95% hidden when the step is compute and nothing waited for
 * data (the rule of pinpipe/transfer.h), if the host is blocked in the copy
 * call for pinned batches (more than a quarter of the copy time), or not
 * for most of it for pageable ones.  (Under the sanitizers the call itself
 * costs up to a seventh of a copy; a blocking copy costs all of it.)  A
 * miss is measured again; one on a loaded host does not count
 * (pp_test_timing).
 */
/* The timing conditions of test_pinned_async_pageable_blocks; NULL when they hold, else why not. */
static const char *overlap_failure(const struct pp_transfer_stats *pin,
				   const struct pp_transfer_stats *page, char *buf, size_t len)
{
	if (pin->host_blocked_ns * 4 >= pin->copy_ns)
		snprintf(buf, len, "pinned: host blocked %llu ns of %llu ns of copies",
			 (unsigned long long)pin->host_blocked_ns, (unsigned long long)pin->copy_ns);
	else if (page->host_blocked_ns * 2 <= page->copy_ns)
		snprintf(buf, len, "pageable: host blocked only %llu ns of %llu ns of copies",
			 (unsigned long long)page->host_blocked_ns, (unsigned long long)page->copy_ns);
	else if (pin->hidden_share < 0.95)
		snprintf(buf, len, "pinned: %.3f hidden (%llu of %llu ns exposed, %llu late; %llu ns "
			 "waiting for the loader)", pin->hidden_share,
			 (unsigned long long)pin->exposed_ns, (unsigned long long)pin->copy_ns,
			 (unsigned long long)pin->late_ns, (unsigned long long)pin->wait_ns);
	else
		return NULL;
	return buf;
}

START_TEST(test_pinned_async_pageable_blocks)
{
	struct pp_transfer_stats pin, page, bare;
	struct pp_device *probe;
	struct pp_tfix f;
	uint32_t batch, compute_us;
	uint64_t per_batch, t0;
	struct pp_test_timing tm;
	char buf[320];

	ck_assert_int_eq(pp_device_open(case_names[_i], &probe), 0);
	batch = pp_device_get_props(probe)->kind == PP_DEVICE_CUDA ? 4096 : 64;
	pp_device_close(probe);
	per_batch = (uint64_t)batch * (3136 + 4);
	/*
	 * Timing on a shared machine: a run that missed is measured again
	 * (pp_test_timing: one where other processes took the cores from the
	 * copy engine or the loader does not count); every run must count the
	 * right bytes, and one must meet every bound.
	 */
	pp_test_timing_begin(&tm, "test_pinned_async_pageable_blocks");
	while (pp_test_timing_attempt(&tm)) {
		const char *why;

		pp_tfix_open(&f, case_names[_i], (uint64_t)batch * 40, batch, PP_DTYPE_F32, true, 2, 0);
		pp_test_timing_start(&tm);
		t0 = pp_now_ns();
		run_compute(&f, 30, 0, &bare);
		compute_us = (uint32_t)PP_MAX((pp_now_ns() - t0) / 38 / 1000 * 4, 1000u);
		run_compute(&f, 30, compute_us, &pin);
		pp_test_timing_stop(&tm);
		pp_tfix_close(&f);
		pp_tfix_open(&f, case_names[_i], (uint64_t)batch * 40, batch, PP_DTYPE_F32, false, 2, 0);
		pp_test_timing_start(&tm);
		run_compute(&f, 30, compute_us, &page);
		pp_test_timing_stop(&tm);
		pp_tfix_close(&f);

		/* Bytes of the 30 batches handed out, give or take the 2 (depth) copied ahead. */
		ck_assert_uint_ge(pin.bytes, 28 * per_batch);
		ck_assert_uint_le(pin.bytes, 32 * per_batch);
		ck_assert_uint_ge(pin.copies_timed, 28);
		ck_assert_uint_ge(page.copies_timed, 28);
		ck_assert_uint_le(pin.exposed_ns, pin.copy_ns);
		ck_assert_uint_le(pin.late_ns, pin.exposed_ns);
		why = overlap_failure(&pin, &page, buf, sizeof(buf));
		if (why != NULL)
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "; compute %u us a batch",
				 compute_us);
		pp_test_timing_result(&tm, why);
	}
	ck_assert_msg(pp_test_timing_failure(&tm) == NULL, "%s", pp_test_timing_failure(&tm));
}
END_TEST

/*
 * Changes epoch after 5 batches while holding one of them.  Fails if the
 * new epoch does not start at its batch 0 with the reference's ids, if
 * its batches are not all there and intact, or if the batch held across the
 * change was overwritten (it is read back after the whole new epoch).
 */
START_TEST(test_epoch_change_midstream)
{
	struct pp_device_batch *b, *held = NULL;
	struct pp_tfix f;
	struct pp_tcheck *c;
	uint64_t n = 0;
	int ret;

	pp_tfix_open(&f, case_names[_i], 1600, 16, 0, true, 3, 6);
	c = pp_tcheck_create(&f);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 0), 0);
	pp_tcheck_epoch(c, 0);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b), 1);
		if (i == 4)
			held = b;
		else
			pp_tcheck_batch(c, b, 10);
	}
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 1), 0);
	pp_tcheck_epoch(c, 1);
	while ((ret = pp_transfer_next(f.t, f.compute, &b)) == 1) {
		ck_assert_uint_eq(b->epoch, 1);
		ck_assert_uint_eq(b->index, n);
		pp_tcheck_batch(c, b, 5);
		n++;
	}
	ck_assert_int_eq(ret, 0);
	ck_assert_uint_eq(n, 100);
	ck_assert_uint_eq(pp_tcheck_finish(c), 104);
	/* The held batch is batch 4 of epoch 0: read it back now, against a fresh reference. */
	c = pp_tcheck_create(&f);
	pp_tcheck_epoch(c, 0);
	pp_tcheck_skip(c, 4);
	ck_assert_uint_eq(held->epoch, 0);
	ck_assert_uint_eq(held->index, 4);
	pp_tcheck_batch(c, held, 0);
	ck_assert_uint_eq(pp_tcheck_finish(c), 1);
	pp_tfix_close(&f);
}
END_TEST

/*
 * Destroys the stage with copies in flight and a batch held.  Fails (by
 * -ENOBUFS from the loader) if a ring slot was not given back, or, under
 * the sanitizers and valgrind, if anything leaked.
 */
START_TEST(test_destroy_midstream)
{
	struct pp_loader_stats ls;
	struct pp_device_batch *b;
	struct pp_batch *held[64];
	struct pp_tfix f;

	pp_tfix_open(&f, case_names[_i], 1600, 16, 0, true, 3, 0);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 0), 0);
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b), 1);
		ck_assert_int_eq(pp_stream_spin(f.compute, 50000), 0);
		if (i < 9)
			ck_assert_int_eq(pp_transfer_release(f.t, b, f.compute), 0);
	}
	pp_transfer_destroy(f.t);
	f.t = NULL;
	ck_assert_int_eq(pp_loader_get_stats(f.loader, &ls), 0);
	ck_assert_uint_le(ls.slots, 64);
	ck_assert_int_eq(pp_loader_begin_epoch(f.loader, 1), 0);
	for (uint32_t i = 0; i < ls.slots; i++) {
		int ret = pp_loader_next(f.loader, &held[i]);

		ck_assert_msg(ret == 1, "ring slot %u of %u: %d %s", i, ls.slots, ret, pp_last_error());
	}
	for (uint32_t i = 0; i < ls.slots; i++)
		ck_assert_int_eq(pp_loader_release(f.loader, held[i]), 0);
	pp_tfix_close(&f);
}
END_TEST

/*
 * Fails if asking for a batch while the trainer holds every device slot
 * hangs or succeeds, or if misuse is not refused with -EINVAL: next before
 * an epoch, release of a batch not held (twice, or NULL), a compute stream
 * of another device, a config without a loader.
 */
START_TEST(test_misuse_refused)
{
	struct pp_transfer_config tc = { 0 };
	struct pp_device_batch *b1, *b2, *b3;
	struct pp_device *other;
	struct pp_stream *os;
	struct pp_transfer *t;
	struct pp_tfix f;

	pp_tfix_open(&f, case_names[_i], 1600, 16, 0, true, 1, 2);
	ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b1), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "epoch"));
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 0), 0);
	ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b1), 1);
	ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b2), 1);
	ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b3), -ENOBUFS);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "transfer: all"));
	ck_assert_int_eq(pp_transfer_release(f.t, b1, f.compute), 0);
	ck_assert_int_eq(pp_transfer_release(f.t, b1, f.compute), -EINVAL);
	ck_assert_int_eq(pp_transfer_release(f.t, NULL, f.compute), -EINVAL);
	ck_assert_int_eq(pp_device_open("sim", &other), 0);
	ck_assert_int_eq(pp_stream_create(other, &os), 0);
	ck_assert_int_eq(pp_transfer_next(f.t, os, &b3), -EINVAL);
	ck_assert_int_eq(pp_transfer_release(f.t, b2, os), -EINVAL);
	ck_assert_int_eq(pp_transfer_release(f.t, b2, f.compute), 0);
	ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b3), 1);
	ck_assert_uint_eq(b3->index, 2);
	ck_assert_int_eq(pp_transfer_release(f.t, b3, f.compute), 0);
	pp_stream_destroy(os);
	pp_device_close(other);
	tc.device = f.dev;
	ck_assert_int_eq(pp_transfer_create(&tc, &t), -EINVAL);
	ck_assert_int_eq(pp_transfer_create(NULL, &t), -EINVAL);
	ck_assert_int_eq(pp_transfer_create(&tc, NULL), -EINVAL);
	tc.loader = f.loader;
	tc.slots = 1;
	ck_assert_int_eq(pp_transfer_create(&tc, &t), -EINVAL);
	pp_transfer_destroy(NULL);
	pp_tfix_close(&f);
}
END_TEST

/*
 * Releases asked in spans: one query of the newest of up to k releases on
 * a stream (2 with the default slots, 4 with depth + 5) frees them all,
 * and only releases on that stream.  The trainer holds every slot, then
 * releases the oldest; then takes the epoch changing its compute stream
 * every 7 batches (destroying the stream it leaves at the third change),
 * then at every batch, then holding two batches at a time, released in
 * turn on two streams.  Fails if next() refuses or hangs, or if a batch is
 * out of order or differs from the dataset when its compute reads it after
 * a delay: a slot reused before its release completed (a span that took
 * in a release of another stream, or one after its newest).
 */
START_TEST(test_release_proofs)
{
	for (uint32_t slots = 0; slots <= 7; slots += 7) {
		const uint32_t nslots = slots ? slots : 2 + 3;
		struct pp_device_batch *b, *held[8], *pair = NULL;
		struct pp_stream *other, *swap;
		struct pp_tcheck *c;
		struct pp_tfix f;
		uint64_t n, changes = 0;
		int ret;

		pp_tfix_open(&f, case_names[_i], 16 * 150, 16, 0, true, 2, slots);
		ck_assert_int_eq(pp_stream_create(f.dev, &other), 0);
		c = pp_tcheck_create(&f);
		ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 0), 0);
		pp_tcheck_epoch(c, 0);
		for (uint32_t i = 0; i < nslots; i++)
			ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &held[i]), 1);
		ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b), -ENOBUFS);
		pp_tcheck_batch(c, held[0], 300);
		ret = pp_transfer_next(f.t, f.compute, &b);
		ck_assert_msg(ret == 1, "slots %u: next after one release: %d %s", nslots, ret,
			      pp_last_error());
		for (uint32_t i = 1; i < nslots; i++)
			pp_tcheck_batch(c, held[i], 50);
		n = nslots;
		do {
			ck_assert_uint_eq(b->index, n);
			if (n >= 100 && pair == NULL && n % 2 == 0) {
				/* Two held: this one is released after the next is taken. */
				pair = b;
				n++;
				continue;
			}
			if (pair != NULL) {
				pp_tcheck_batch(c, pair, 150);
				pair = NULL;
			}
			pp_tcheck_batch(c, b, n % 3 == 0 ? 200 : 20);
			n++;
			if (n < 60 ? n % 7 == 0 : true) {
				swap = f.compute;
				f.compute = other;
				other = swap;
				if (++changes == 3) {
					pp_stream_destroy(other);
					ck_assert_int_eq(pp_stream_create(f.dev, &other), 0);
				}
			}
		} while ((ret = pp_transfer_next(f.t, f.compute, &b)) == 1);
		ck_assert_msg(ret == 0, "slots %u: next: %s", nslots, pp_last_error());
		ck_assert_ptr_null(pair);
		ck_assert_uint_eq(n, 150);
		ck_assert_int_eq(pp_stream_synchronize(other), 0);
		ck_assert_uint_eq(pp_tcheck_finish(c), 150);
		pp_stream_destroy(other);
		pp_tfix_close(&f);
	}
}
END_TEST

void pp_transfer_cases_add(Suite *s, const char *tcase_name, const char *const *names, int n)
{
	TCase *tc = tcase_create(tcase_name);

	case_names = names;
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, pp_test_watchdog_arm, NULL);
	tcase_add_loop_test(tc, test_stream_intact_in_order, 0, n);
	tcase_add_loop_test(tc, test_pinned_async_pageable_blocks, 0, n);
	tcase_add_loop_test(tc, test_epoch_change_midstream, 0, n);
	tcase_add_loop_test(tc, test_destroy_midstream, 0, n);
	tcase_add_loop_test(tc, test_misuse_refused, 0, n);
	tcase_add_loop_test(tc, test_release_proofs, 0, n);
	suite_add_tcase(s, tc);
}
