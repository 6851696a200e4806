/*
 * tests/test_transfer.c: the transfer stage on sim (the shared cases of
 * tests/transfer_cases.c, with poisoning and a bandwidth cap), its error
 * paths under injected failures, the cpu device's in-place path, the
 * loader's pp_loader_try_next() that the stage is built on, and the
 * signal masks of the threads the library starts under the stage (loader
 * workers and decoding threads, copy engines, compute and compression
 * threads).
 */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "pinpipe/dataset.h"
#include "pinpipe/nn.h"
#include "pinpipe/transfer.h"
#include "tests/testutil.h"
#include "tests/transfer_cases.h"
#include "device/device_impl.h"

/*
 * A failing device allocation while the slots are made.  Fails if create
 * does not return -ENOMEM with the sim's message, or (under the sanitizers
 * and valgrind) if what was made before it leaks.
 */
START_TEST(test_alloc_failure)
{
	struct pp_transfer_config tc = { .depth = 2 };
	struct pp_transfer *t = NULL;
	struct pp_tfix f;

	pp_tfix_open(&f, "sim", 640, 16, 0, true, 2, 0);
	ck_assert_int_eq(pp_device_sim_inject(f.dev, PP_SIM_FAIL_ALLOC, 2), 0);
	tc.loader = f.loader;
	tc.device = f.dev;
	ck_assert_int_eq(pp_transfer_create(&tc, &t), -ENOMEM);
	ck_assert_ptr_null(t);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "injected"));
	ck_assert_int_eq(pp_device_sim_inject(f.dev, PP_SIM_FAIL_ALLOC, -1), 0);
	pp_tfix_close(&f);
}
END_TEST

/*
 * Copies start failing after the 7th.  Fails if next() hangs or hands out
 * a batch whose copy failed instead of returning -EIO with the engine's
 * message, or if the stage cannot go on with a new epoch once the fault is
 * gone (intact batches, in order), or if a ring slot was lost on the way.
 */
START_TEST(test_copy_failure)
{
	struct pp_device_batch *b;
	struct pp_tcheck *c;
	struct pp_tfix f;
	int ret, got = 0;

	pp_tfix_open(&f, "sim:bw=2GB/s", 640, 16, 0, true, 3, 0);
	ck_assert_int_eq(pp_device_sim_inject(f.dev, PP_SIM_FAIL_COPY, 7), 0);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 0), 0);
	while ((ret = pp_transfer_next(f.t, f.compute, &b)) == 1) {
		ck_assert_int_eq(pp_stream_spin(f.compute, 20000), 0);
		ck_assert_int_eq(pp_transfer_release(f.t, b, f.compute), 0);
		got++;
	}
	ck_assert_int_eq(ret, -EIO);
	ck_assert_msg(strstr(pp_last_error(), "sim: stream ") != NULL &&
		      strstr(pp_last_error(), " bytes, host to device) failed: injected fault") != NULL,
		      "message: %s", pp_last_error());
	/*
	 * Samples and labels are one copy per full batch: the 8th copy is batch
	 * 7's.  The failure is returned as soon as a call sees it (batches
	 * copied ahead may be dropped with it), or, when batch 7 and those after
	 * it were handed out while their copies still ran, at the latest when
	 * the slot of a failed copy is needed again: after at most 5 (the slots:
	 * depth 3 + 2) batches from batch 7 on.
	 */
	ck_assert_int_le(got, 7 + 5);
	ck_assert_int_eq(pp_device_sim_inject(f.dev, PP_SIM_FAIL_COPY, -1), 0);
	c = pp_tcheck_create(&f);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 1), 0);
	pp_tcheck_epoch(c, 1);
	got = 0;
	while ((ret = pp_transfer_next(f.t, f.compute, &b)) == 1) {
		pp_tcheck_batch(c, b, 20);
		got++;
	}
	ck_assert_int_eq(ret, 0);
	ck_assert_int_eq(got, 40);
	ck_assert_uint_eq(pp_tcheck_finish(c), 40);
	pp_tfix_close(&f);
}
END_TEST

/*
 * The cpu device: the host is the device.  Fails if a batch is copied
 * (bytes or copy time counted, samples not in the loader's ring) or if its
 * contents differ from the reference loader's, or if the hidden share is
 * not NaN (undefined: nothing was copied), or if a release on another
 * device's stream is taken (on sim it is refused).
 */
START_TEST(test_cpu_in_place)
{
	struct pp_transfer_stats st;
	struct pp_loader_stats ls;
	struct pp_device_batch *b;
	struct pp_tfix f;
	struct pp_loader *ref;
	struct pp_batch *rb;
	struct pp_loader_config rc;
	int ret, n = 0;

	pp_tfix_open(&f, "cpu", 640, 16, PP_DTYPE_F32, true, 2, 0);
	rc = f.cfg;
	rc.device = NULL;
	rc.workers = 0;
	ck_assert_int_eq(pp_loader_create(&rc, &ref), 0);
	ck_assert_int_eq(pp_loader_begin_epoch(ref, 0), 0);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 0), 0);
	while ((ret = pp_transfer_next(f.t, f.compute, &b)) == 1) {
		ck_assert_int_eq(pp_loader_next(ref, &rb), 1);
		ck_assert_uint_eq(b->index, rb->index);
		ck_assert_int_eq(b->dtype, PP_DTYPE_F32);
		ck_assert_int_eq(memcmp(b->samples, rb->samples, (size_t)b->size * b->sample_bytes), 0);
		ck_assert_int_eq(memcmp(b->labels, rb->labels, (size_t)b->size * 4), 0);
		ck_assert_ptr_eq(b->host_labels, b->labels);
		/* Nothing to wait for, but an event all the same, as a trainer may synchronize it. */
		ck_assert_ptr_nonnull(b->ready);
		ck_assert_int_eq(pp_event_query(b->ready), 1);
		ck_assert_int_eq(pp_event_synchronize(b->ready), 0);
		ck_assert_int_eq(pp_loader_release(ref, rb), 0);
		/* Another device's stream, or none: refused here too, the batch still held. */
		if (n == 0) {
			struct pp_device *other;
			struct pp_stream *os;

			ck_assert_int_eq(pp_device_open("sim", &other), 0);
			ck_assert_int_eq(pp_stream_create(other, &os), 0);
			ck_assert_int_eq(pp_transfer_release(f.t, b, os), -EINVAL);
			ck_assert_int_eq(pp_transfer_release(f.t, b, NULL), -EINVAL);
			pp_stream_destroy(os);
			pp_device_close(other);
		}
		ck_assert_int_eq(pp_transfer_release(f.t, b, f.compute), 0);
		n++;
	}
	ck_assert_int_eq(ret, 0);
	ck_assert_int_eq(n, 40);
	ck_assert_int_eq(pp_transfer_get_stats(f.t, &st), 0);
	ck_assert_int_eq(st.device_kind, PP_DEVICE_CPU);
	ck_assert_uint_eq(st.batches, 40);
	ck_assert_uint_eq(st.bytes, 0);
	ck_assert_uint_eq(st.copy_ns, 0);
	ck_assert_uint_eq(st.copies_timed, 0);
	ck_assert(isnan(st.hidden_share));
	ck_assert_int_eq(pp_loader_get_stats(f.loader, &ls), 0);
	ck_assert_uint_eq(ls.batches, 40);
	pp_loader_destroy(ref);
	pp_tfix_close(&f);
}
END_TEST

/*
 * pp_transfer_resume() mid-epoch, on a stage that has handed out batches of
 * another epoch and still copies ahead.  Fails if the batches after the
 * position are not exactly the reference's batches 7.. of epoch 1 (ids,
 * labels, device bytes), or if a position of other settings is accepted.
 */
START_TEST(test_resume)
{
	struct pp_loader_position pos;
	struct pp_device_batch *b;
	struct pp_tcheck *c;
	struct pp_tfix f;
	int ret;

	pp_tfix_open(&f, "sim:poison", 480, 16, PP_DTYPE_U8, true, 2, 0);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 0), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b), 1);
		ck_assert_int_eq(pp_transfer_release(f.t, b, f.compute), 0);
	}
	ck_assert_int_eq(pp_loader_get_position(f.loader, &pos), 0);
	pos.epoch = 1;
	pos.batch = 7;
	c = pp_tcheck_create(&f);
	pp_tcheck_epoch(c, 1);
	pp_tcheck_skip(c, 7);
	ck_assert_int_eq(pp_transfer_resume(f.t, &pos), 0);
	while ((ret = pp_transfer_next(f.t, f.compute, &b)) == 1)
		pp_tcheck_batch(c, b, 0);
	ck_assert_int_eq(ret, 0);
	ck_assert_uint_eq(pp_tcheck_finish(c), 30 - 7);
	pos.plan_key ^= 1;
	ck_assert_int_eq(pp_transfer_resume(f.t, &pos), -EINVAL);
	ck_assert_int_eq(pp_transfer_resume(f.t, NULL), -EINVAL);
	pp_tfix_close(&f);
}
END_TEST

/*
 * pp_loader_try_next() hands out the same batches, in the same order, as
 * pp_loader_next() on a loader of the same settings, with workers and
 * without.  Fails if it returns anything but 1, -EAGAIN (without workers:
 * never), or 0 at the end, or if a batch differs.
 */
START_TEST(test_loader_try_next)
{
	struct pp_synthetic_config sc = { .count = 1000, .channels = 1, .height = 8, .width = 8,
					  .num_classes = 10, .seed = 3, .dtype = PP_DTYPE_U8 };
	struct pp_loader_config cfg = { .batch_size = 10, .shuffle = true, .seed = 1 };
	struct pp_loader *a, *b;
	struct pp_batch *ba, *bb;
	struct pp_dataset *ds;
	uint32_t workers[] = { 0, 2 };
	int ret;

	ck_assert_int_eq(pp_dataset_create_synthetic(&sc, &ds), 0);
	cfg.dataset = ds;
	for (size_t w = 0; w < 2; w++) {
		int n = 0;
		long again = 0;

		cfg.workers = workers[w];
		ck_assert_int_eq(pp_loader_create(&cfg, &a), 0);
		cfg.workers = 0;
		ck_assert_int_eq(pp_loader_create(&cfg, &b), 0);
		ck_assert_int_eq(pp_loader_begin_epoch(a, 0), 0);
		ck_assert_int_eq(pp_loader_begin_epoch(b, 0), 0);
		for (;;) {
			ret = pp_loader_try_next(a, &ba);
			if (ret == -EAGAIN) {
				again++;
				continue;
			}
			ck_assert_int_ge(ret, 0);
			ck_assert_int_eq(pp_loader_next(b, &bb), ret);
			if (ret == 0)
				break;
			ck_assert_uint_eq(ba->index, bb->index);
			ck_assert_int_eq(memcmp(ba->ids, bb->ids, ba->size * sizeof(uint64_t)), 0);
			ck_assert_int_eq(memcmp(ba->samples, bb->samples, ba->size * ba->sample_bytes), 0);
			ck_assert_int_eq(pp_loader_release(a, ba), 0);
			ck_assert_int_eq(pp_loader_release(b, bb), 0);
			n++;
		}
		ck_assert_int_eq(n, 100);
		if (workers[w] == 0)
			ck_assert_int_eq(again, 0);
		pp_loader_destroy(a);
		pp_loader_destroy(b);
	}
	pp_dataset_destroy(ds);
}
END_TEST

/*
 * A position saved by the stage at one batch size resumed at another
 * (pp_transfer_resume_samples()), as a change of rank count does.  Fails if
 * the position does not count the samples all ranks took, if the batches
 * after the resume are not the order's positions from there on, or if a
 * position that is not a multiple of the new batch is accepted.
 */
START_TEST(test_resume_samples)
{
	static uint64_t full[480], rest[480];
	struct pp_loader_position pos, lpos;
	struct pp_device_batch *b;
	struct pp_tfix f, g;
	size_t n = 0, m = 0;
	int ret;

	pp_tfix_open(&f, "sim", 480, 16, PP_DTYPE_U8, true, 2, 0);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 1), 0);
	while ((ret = pp_transfer_next(f.t, f.compute, &b)) == 1) {
		memcpy(full + n, b->host_ids, b->size * sizeof(uint64_t));
		n += b->size;
		ck_assert_int_eq(pp_transfer_release(f.t, b, f.compute), 0);
	}
	ck_assert_int_eq(ret, 0);
	ck_assert_uint_eq(n, 480);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 1), 0);
	for (int i = 0; i < 6; i++) {
		ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b), 1);
		ck_assert_int_eq(pp_transfer_release(f.t, b, f.compute), 0);
	}
	ck_assert_int_eq(pp_transfer_get_position(f.t, &pos), 0);
	ck_assert_int_eq(pp_loader_get_position(f.loader, &lpos), 0);
	ck_assert_uint_eq(pos.batch, 6);
	ck_assert_uint_eq(pos.samples, 6 * 16); /* the trainer's, not the loader's copies ahead */
	ck_assert_uint_eq(pos.order_key, lpos.order_key);
	pp_tfix_close(&f);

	pp_tfix_open(&g, "sim", 480, 32, PP_DTYPE_U8, true, 2, 0);
	ck_assert_int_eq(pp_transfer_resume(g.t, &pos), -EINVAL); /* another plan */
	ck_assert_int_eq(pp_transfer_resume_samples(g.t, &pos), 0);
	ck_assert_int_eq(pp_transfer_get_position(g.t, &lpos), 0);
	ck_assert_uint_eq(lpos.batch, 3);
	ck_assert_uint_eq(lpos.samples, 96);
	while ((ret = pp_transfer_next(g.t, g.compute, &b)) == 1) {
		memcpy(rest + m, b->host_ids, b->size * sizeof(uint64_t));
		m += b->size;
		ck_assert_int_eq(pp_transfer_release(g.t, b, g.compute), 0);
	}
	ck_assert_int_eq(ret, 0);
	ck_assert_uint_eq(m, 480 - 96);
	ck_assert_int_eq(memcmp(rest, full + 96, m * sizeof(uint64_t)), 0);
	pos.samples = 80; /* not a multiple of 32 */
	ck_assert_int_eq(pp_transfer_resume_samples(g.t, &pos), -EINVAL);
	ck_assert_int_eq(pp_transfer_resume_samples(g.t, NULL), -EINVAL);
	pp_tfix_close(&g);
}
END_TEST

/*
 * The stage's position is the trainer's: after k batches handed out it is
 * batch k of the epoch, and k global batches of samples, while the
 * loader's runs ahead by the copies in flight.  Fails if it is not, if it
 * does not follow a resume, or if resuming from it does not hand out
 * exactly batch k and those after it.
 */
START_TEST(test_position)
{
	struct pp_loader_position pos, lpos;
	struct pp_device_batch *b;
	struct pp_tcheck *c;
	struct pp_tfix f;
	int ret;

	pp_tfix_open(&f, "sim", 480, 16, PP_DTYPE_U8, true, 3, 0);
	ck_assert_int_eq(pp_transfer_get_position(f.t, &pos), -EINVAL);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 2), 0);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b), 1);
		ck_assert_int_eq(pp_transfer_release(f.t, b, f.compute), 0);
	}
	ck_assert_int_eq(pp_transfer_get_position(f.t, &pos), 0);
	ck_assert_int_eq(pp_loader_get_position(f.loader, &lpos), 0);
	ck_assert_uint_eq(pos.epoch, 2);
	ck_assert_uint_eq(pos.batch, 5);
	ck_assert_uint_eq(pos.plan_key, lpos.plan_key);
	ck_assert_uint_ge(lpos.batch, pos.batch); /* copies ahead, when the loader had them ready */
	/* the samples of the trainer's 5 batches, not of the loader's copies ahead */
	ck_assert_uint_eq(pos.samples, 5 * 16);
	ck_assert_uint_eq(pos.order_key, lpos.order_key);
	c = pp_tcheck_create(&f);
	pp_tcheck_epoch(c, 2);
	pp_tcheck_skip(c, 5);
	ck_assert_int_eq(pp_transfer_resume(f.t, &pos), 0);
	ck_assert_int_eq(pp_transfer_get_position(f.t, &pos), 0);
	ck_assert_uint_eq(pos.batch, 5);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(pp_transfer_next(f.t, f.compute, &b), 1);
		ck_assert_uint_eq(b->index, 5 + (uint64_t)i);
		pp_tcheck_batch(c, b, 0);
	}
	ck_assert_uint_eq(pp_tcheck_finish(c), 4);
	ck_assert_int_eq(pp_transfer_get_position(f.t, &pos), 0);
	ck_assert_uint_eq(pos.batch, 9);
	ck_assert_uint_eq(pos.samples, 9 * 16);
	while ((ret = pp_transfer_next(f.t, f.compute, &b)) == 1)
		ck_assert_int_eq(pp_transfer_release(f.t, b, f.compute), 0);
	ck_assert_int_eq(ret, 0);
	ck_assert_int_eq(pp_transfer_get_position(f.t, &pos), 0);
	ck_assert_uint_eq(pos.batch, 30);
	ck_assert_int_eq(pp_transfer_begin_epoch(f.t, 3), 0);
	ck_assert_int_eq(pp_transfer_get_position(f.t, &pos), 0);
	ck_assert_uint_eq(pos.epoch, 3);
	ck_assert_uint_eq(pos.batch, 0);
	pp_tfix_close(&f);
}
END_TEST

/* Runs a step per batch: 'kernels' launches of 'kernel_us' each, then the release. */
static void run_steps(struct pp_tfix *f, int n, uint32_t kernels, uint32_t kernel_us)
{
	struct pp_device_batch *b;

	for (int i = 0; i < n; i++) {
		int ret = pp_transfer_next(f->t, f->compute, &b);

		ck_assert_msg(ret == 1, "next: %d %s", ret, pp_last_error());
		for (uint32_t k = 0; k < kernels; k++)
			ck_assert_int_eq(pp_stream_spin(f->compute, (uint64_t)kernel_us * 1000u), 0);
		ck_assert_int_eq(pp_transfer_release(f->t, b, f->compute), 0);
	}
}

/* What a run of steps measured: the stage's counters and the device's. */
struct steps_result {
	struct pp_transfer_stats st;
	struct pp_device_stats dev;
};

/* Runs 8 steps not counted, then n counted ones. */
static void measure_steps(struct pp_tfix *f, int n, uint32_t kernels, uint32_t kernel_us,
			  struct steps_result *r)
{
	struct pp_transfer_stats s0;
	struct pp_device_stats d0;

	ck_assert_int_eq(pp_transfer_begin_epoch(f->t, 0), 0);
	run_steps(f, 8, kernels, kernel_us);
	ck_assert_int_eq(pp_stream_synchronize(f->compute), 0);
	ck_assert_int_eq(pp_transfer_get_stats(f->t, &s0), 0);
	ck_assert_int_eq(pp_device_get_stats(f->dev, &d0), 0);
	run_steps(f, n, kernels, kernel_us);
	ck_assert_int_eq(pp_stream_synchronize(f->compute), 0);
	ck_assert_int_eq(pp_device_get_stats(f->dev, &r->dev), 0);
	ck_assert_int_eq(pp_transfer_get_stats(f->t, &r->st), 0);
	pp_tstats_sub(&r->st, &s0);
	r->dev.copies -= d0.copies;
	r->dev.calls -= d0.calls;
}

/*
 * Every call to the device costs the host 20 us (as on an H100 host), and
 * the copy of a batch (1024 float32 samples, 3.2 MB) lasts 128 us at
 * 25 GB/s: a figure that counted the host's time in the copy calls (the
 * call, and for pageable memory the staging) as exposed would call a good
 * part of it exposed.  Compute is one step per batch,
 * four times what a batch takes through the loader and the stage alone, and
 * at least 1 ms.  Fails if pinned copies are not 95% hidden (the step is
 * compute and the loader keeps ahead), or if a pageable copy does not block
 * the host for about its time (at least half of the copy as timed, which
 * includes the host's time to issue it, and less than a quarter of the
 * compute more: it does not wait for compute), or if it
 * is counted as exposed while compute had work queued.  A miss is measured
 * again; one on a loaded host does not count (pp_test_timing).
 */
START_TEST(test_call_cost_hidden)
{
	struct steps_result pin, page;
	struct pp_test_timing tm;
	struct pp_tfix f;
	uint32_t compute_us = 1000;
	char buf[320];

	pp_test_timing_begin(&tm, "test_call_cost_hidden");
	while (pp_test_timing_attempt(&tm)) {
		uint64_t t0;

		pp_tfix_open(&f, "sim:bw=25GB/s,call_us=20", 1024 * 40, 1024, PP_DTYPE_F32, true, 2, 0);
		pp_test_timing_start(&tm);
		t0 = pp_now_ns();
		measure_steps(&f, 30, 0, 0, &pin);
		compute_us = (uint32_t)PP_MAX((pp_now_ns() - t0) / 38 / 1000 * 4, 1000u);
		measure_steps(&f, 30, 1, compute_us, &pin);
		pp_test_timing_stop(&tm);
		pp_tfix_close(&f);
		pp_tfix_open(&f, "sim:bw=25GB/s,call_us=20", 1024 * 40, 1024, PP_DTYPE_F32, false, 2, 0);
		pp_test_timing_start(&tm);
		measure_steps(&f, 30, 1, compute_us, &page);
		pp_test_timing_stop(&tm);
		pp_tfix_close(&f);
		ck_assert_uint_eq(pin.st.copies_timed, 30);
		ck_assert_uint_eq(page.st.copies_timed, 30);
		if (pin.st.hidden_share < 0.95)
			snprintf(buf, sizeof(buf), "pinned: %.3f hidden (%llu of %llu ns exposed, %llu "
				 "late, host %llu ns in copy calls, %llu waiting for the loader)",
				 pin.st.hidden_share, (unsigned long long)pin.st.exposed_ns,
				 (unsigned long long)pin.st.copy_ns, (unsigned long long)pin.st.late_ns,
				 (unsigned long long)pin.st.host_blocked_ns,
				 (unsigned long long)pin.st.wait_ns);
		else if (page.st.host_blocked_ns * 2 < page.st.copy_ns ||
			 page.st.host_blocked_ns > page.st.copy_ns + 30ull * compute_us * 1000 / 4)
			snprintf(buf, sizeof(buf), "pageable: host blocked %llu ns for %llu ns of copies",
				 (unsigned long long)page.st.host_blocked_ns,
				 (unsigned long long)page.st.copy_ns);
		else if (page.st.hidden_share < 0.9)
			snprintf(buf, sizeof(buf), "pageable, compute queued: %.3f hidden",
				 page.st.hidden_share);
		else
			buf[0] = '\0';
		if (buf[0] != '\0')
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "; compute %u us a batch",
				 compute_us);
		pp_test_timing_result(&tm, buf[0] ? buf : NULL);
	}
	ck_assert_msg(pp_test_timing_failure(&tm) == NULL, "%s", pp_test_timing_failure(&tm));
}
END_TEST

/*
 * A launch-bound step: 4 kernels of no length, each launch costing the host
 * 200 us, so that compute is idle while the host does anything else.  The
 * copy of a batch (256 float32 samples) lasts 800 us at 1 GB/s.  Fails if a
 * pageable copy, which blocks the host and so the launches, is not counted
 * as exposed for at least half of the time it blocks the host (the compute
 * stream is idle all along), or if pinned copies, of which only the call's
 * time (200 us) holds up the launches, are not exposed less (under half of
 * the pageable copies' exposed time) and hidden more (a larger share).  The
 * bounds are of the run's own figures: the pageable copies' share hidden is
 * not bounded alone, as their device time (the sim's copy engine is a host
 * thread) grows past the host's block on a loaded host, and a miss is
 * measured again, one on a loaded host not counted (pp_test_timing).  (What
 * it does to the step time, pinpipe-bench overlap --kernels=N shows.)
 */
START_TEST(test_launch_bound_exposed)
{
	struct steps_result pin, page;
	struct pp_test_timing tm;
	struct pp_tfix f;
	char buf[320];

	pp_test_timing_begin(&tm, "test_launch_bound_exposed");
	while (pp_test_timing_attempt(&tm)) {
		pp_tfix_open(&f, "sim:bw=1GB/s,call_us=200", 256 * 40, 256, PP_DTYPE_F32, true, 2, 0);
		pp_test_timing_start(&tm);
		measure_steps(&f, 30, 4, 0, &pin);
		pp_test_timing_stop(&tm);
		pp_tfix_close(&f);
		pp_tfix_open(&f, "sim:bw=1GB/s,call_us=200", 256 * 40, 256, PP_DTYPE_F32, false, 2, 0);
		pp_test_timing_start(&tm);
		measure_steps(&f, 30, 4, 0, &page);
		pp_test_timing_stop(&tm);
		pp_tfix_close(&f);
		ck_assert_uint_eq(pin.st.copies_timed, 30);
		ck_assert_uint_eq(page.st.copies_timed, 30);
		if (page.st.exposed_ns * 2 < page.st.host_blocked_ns)
			snprintf(buf, sizeof(buf), "pageable: %llu ns exposed of %llu ns blocking the host "
				 "(%.3f hidden)", (unsigned long long)page.st.exposed_ns,
				 (unsigned long long)page.st.host_blocked_ns, page.st.hidden_share);
		else if (pin.st.exposed_ns * 2 >= page.st.exposed_ns)
			snprintf(buf, sizeof(buf), "exposed: pinned %llu ns (%llu late), pageable %llu ns",
				 (unsigned long long)pin.st.exposed_ns,
				 (unsigned long long)pin.st.late_ns,
				 (unsigned long long)page.st.exposed_ns);
		else if (pin.st.hidden_share <= page.st.hidden_share)
			snprintf(buf, sizeof(buf), "hidden share: pinned %.3f, pageable %.3f",
				 pin.st.hidden_share, page.st.hidden_share);
		else
			buf[0] = '\0';
		pp_test_timing_result(&tm, buf[0] ? buf : NULL);
	}
	ck_assert_msg(pp_test_timing_failure(&tm) == NULL, "%s", pp_test_timing_failure(&tm));
}
END_TEST

/*
 * What a batch costs in device calls, by default (one batch in 16 timed).
 * Fails if a full batch takes more than one copy (samples and labels go
 * together), or more than 9 calls on average (7 here) (a copy, an event after it,
 * the compute stream's wait, an event at release, and a few queries; the
 * timed batches add three timing events).
 */
START_TEST(test_calls_per_batch)
{
	struct pp_transfer_config tc = { .depth = 2 };
	struct steps_result r;
	struct pp_tfix f;

	pp_tfix_open(&f, "sim", 64 * 200, 64, PP_DTYPE_F32, true, 2, 0);
	pp_transfer_destroy(f.t);
	tc.loader = f.loader;
	tc.device = f.dev;
	ck_assert_int_eq(pp_transfer_create(&tc, &f.t), 0);
	measure_steps(&f, 160, 1, 200, &r);
	ck_assert_uint_eq(r.st.batches, 160);
	/* One copy a batch, give or take the depth copied ahead. */
	ck_assert_uint_ge(r.dev.copies, 160 - 2);
	ck_assert_uint_le(r.dev.copies, 160 + 2);
	ck_assert_uint_eq(r.st.copies_timed, 10);
	/* Less the test's own: a compute step (a host function) a batch. */
	ck_assert_msg(r.dev.calls - 160 <= 9 * 160, "%llu calls of the stage for 160 batches",
		      (unsigned long long)(r.dev.calls - 160));
	pp_tfix_close(&f);
}
END_TEST

/*
 * What a batch costs in device calls when every call costs the host time
 * (sim:call_us=5, as on a GPU host), with no compute (the copies and the
 * host's calls are the pipeline) and with a compute step a batch ten times
 * a copy, copied 2 and 6 ahead of a loader ring of 16, one batch in 16
 * timed, with the default slots (depth + 3) and with depth + 5.  A batch
 * needs one copy, an event after it, the compute stream's wait for it and
 * an event at its release.  The releases come in spans of k (2 with the
 * default slots, 4 with depth + 5): compute runs in order, so the newest
 * of a span proves the others complete, and with them the copies of their
 * batches (so no copy's event is asked whether it is); a span costs one
 * query, or a synchronization where the stage must wait, a query that
 * finds it not complete yet now and then, and, on the sim, one copy's
 * event asked whether the copy failed (its errors stay with the copy
 * stream, where CUDA's reach the release's query).  Where compute is
 * behind the host, the next() after a wait asks nothing (the query would
 * say no): with spans of 2 the wait is then the span's one call, and the
 * sim's check.  A timed batch adds three timing events.  Fails if a run
 * takes more than 4 calls a batch and 3 a span (2 with compute behind and
 * spans of 2), 3 a timed batch, one in eight batches wasted and the slots'
 * worth at the edges (the stage took 6.1-6.2 a batch here when it asked
 * every release, 7.4 before that, when it asked the copies' events too; 5.7
 * with compute behind when it asked after a wait), or more than one copy a
 * batch.
 */
START_TEST(test_calls_per_batch_costly)
{
	static const struct {
		uint32_t depth, kernels, kernel_us, slots, k;
	} runs[] = { { 2, 0, 0, 0, 2 },   { 6, 0, 0, 0, 2 },   { 2, 1, 200, 0, 2 },
		     { 6, 1, 200, 0, 2 }, { 2, 0, 0, 7, 4 },   { 2, 1, 200, 7, 4 } };
	enum { N = 96 };

	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		struct pp_transfer_config tc = { .depth = runs[i].depth, .slots = runs[i].slots };
		const uint32_t nslots = runs[i].slots ? runs[i].slots : runs[i].depth + 3;
		struct steps_result r;
		struct pp_tfix f;
		uint64_t calls, bound, span_calls;

		pp_tfix_open(&f, "sim:bw=10GB/s,call_us=5", 64 * 400, 64, PP_DTYPE_F32, true, 2, 0);
		pp_transfer_destroy(f.t);
		/* A ring of 16: the loader's slots are not what the stage holds (see host_short). */
		pp_loader_destroy(f.loader);
		f.cfg.prefetch = 16;
		ck_assert_int_eq(pp_loader_create(&f.cfg, &f.loader), 0);
		tc.loader = f.loader;
		tc.device = f.dev;
		ck_assert_int_eq(pp_transfer_create(&tc, &f.t), 0);
		measure_steps(&f, N, runs[i].kernels, runs[i].kernel_us, &r);
		ck_assert_uint_eq(r.st.batches, N);
		ck_assert_uint_ge(r.dev.copies, N - runs[i].depth);
		ck_assert_uint_le(r.dev.copies, N + runs[i].depth);
		/* Less the test's own calls: a compute step (a host function) a kernel. */
		calls = r.dev.calls - (uint64_t)N * runs[i].kernels;
		/* Compute behind the host and spans of 2: the next() after a wait asks nothing. */
		span_calls = runs[i].kernels > 0 && runs[i].k == 2 ? 2 : 3;
		bound = 4 * N + span_calls * N / runs[i].k + 3 * r.st.copies_timed + N / 8 +
			2 * nslots;
		ck_assert_msg(calls <= bound, "depth %u, %u slots, %u kernels: %llu calls of the "
			      "stage for %d batches (%llu timed), more than %llu", runs[i].depth,
			      nslots, runs[i].kernels, (unsigned long long)calls, N,
			      (unsigned long long)r.st.copies_timed, (unsigned long long)bound);
		pp_tfix_close(&f);
	}
}
END_TEST

/* ------------------------------------------------------------------ signals */

#define MAX_THREADS 256

/* This process's threads (/proc/self/task): writes up to MAX_THREADS ids, returns their count. */
static size_t thread_ids(pid_t *ids)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	size_t n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL && n < MAX_THREADS)
		if (e->d_name[0] != '.')
			ids[n++] = (pid_t)atoi(e->d_name);
	closedir(d);
	return n;
}

/*
 * True when thread 'tid' is one of the library's (named "pinpipe" by
 * pp_thread_create): OpenBLAS starts threads of its own, with the mask of
 * whichever thread first calls it, which are not the library's to mask.
 */
static bool library_thread(pid_t tid)
{
	char path[64], name[32] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	if (fgets(name, sizeof(name), f) == NULL)
		name[0] = '\0';
	fclose(f);
	return strcmp(name, "pinpipe\n") == 0;
}

static bool has_id(const pid_t *ids, size_t n, pid_t id)
{
	for (size_t k = 0; k < n; k++)
		if (ids[k] == id)
			return true;
	return false;
}

/*
 * The signals thread 'tid' blocks (SigBlk of its status, bit sig - 1), into
 * *mask_p; false when the thread has gone or is exiting (state Z or X: its
 * mask reads 0 then, and it takes no signal).  An exiting thread can also
 * read 0 while its state still says it runs (the kernel has let go of its
 * signal state): a mask of 0 is read again, for up to 20 ms, until the
 * thread is gone; one that keeps it is reported.
 */
static bool read_blocked(pid_t tid, uint64_t *mask_p);

static bool thread_blocked(pid_t tid, uint64_t *mask_p)
{
	struct timespec ms = { 0, 1000000 };

	for (int tries = 0; tries < 20; tries++) {
		if (!read_blocked(tid, mask_p))
			return false;
		if (*mask_p != 0)
			return true;
		nanosleep(&ms, NULL);
	}
	return true;
}

static bool read_blocked(pid_t tid, uint64_t *mask_p)
{
	char path[64], line[256], state = '?';
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	while (!found && fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "State: %c", &state) == 1 && (state == 'Z' || state == 'X'))
			break;
		found = sscanf(line, "SigBlk: %" SCNx64, mask_p) == 1;
	}
	fclose(f);
	return found;
}

#define SIGBIT(sig) ((uint64_t)1 << ((sig) - 1))
/* What a library thread must block, and what it must not. */
#define MUST_BLOCK (SIGBIT(SIGINT) | SIGBIT(SIGTERM) | SIGBIT(SIGHUP) | SIGBIT(SIGQUIT) | \
		    SIGBIT(SIGUSR1) | SIGBIT(SIGALRM) | SIGBIT(SIGCHLD))
#define MUST_KEEP (SIGBIT(SIGSEGV) | SIGBIT(SIGBUS) | SIGBIT(SIGFPE) | SIGBIT(SIGILL))

/* Unblocks in the calling thread the signals a library thread must block. */
static void unblock_async_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	for (int sig = 1; sig < 64; sig++)
		if (MUST_BLOCK & SIGBIT(sig))
			sigaddset(&set, sig);
	ck_assert_int_eq(pthread_sigmask(SIG_UNBLOCK, &set, NULL), 0);
}

static void *no_op(void *arg)
{
	return arg;
}

/*
 * Snapshots the threads there before the library starts any: the caller,
 * and those of the runtime (OpenBLAS's, and ThreadSanitizer's, which it
 * starts with the process's first thread: one is started and joined
 * first, so that it is in the snapshot).
 */
static size_t threads_before(pid_t *ids)
{
	pthread_t t;

	ck_assert_int_eq(pthread_create(&t, NULL, no_op, NULL), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	return thread_ids(ids);
}

/* A model on the fixture's device, computing on 'threads' threads. */
static struct pp_model *model_open(struct pp_tfix *f, int threads)
{
	struct pp_model_config mc;
	struct pp_model *m;
	int ret;

	pp_model_config_init(&mc);
	mc.in_channels = 1;
	mc.in_height = 28;
	mc.in_width = 28;
	mc.num_classes = 10;
	mc.threads = threads;
	mc.mean = 0.25f;
	mc.std = 0.5f;
	mc.stream = f->compute;
	ret = pp_model_create("mlp", f->dev, &mc, &m);
	ck_assert_msg(ret == 0, "pp_model_create: %s", pp_last_error());
	return m;
}

/*
 * Every thread started by a sim device, a loader with workers, a transfer
 * stage and a model of 3 compute threads, created while the caller takes
 * SIGINT, blocks SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGALRM and
 * SIGCHLD and keeps SIGSEGV, SIGBUS, SIGFPE and SIGILL, and the caller's
 * mask is as it was.  Fails if a library thread leaves an asynchronous
 * signal open (a handler could run on it), blocks a fault signal, or if
 * fewer threads than the fixture's 2 workers, 1 copy engine and 2 compute
 * threads were found.
 */
START_TEST(test_threads_block_signals)
{
	pid_t before[MAX_THREADS], after[MAX_THREADS];
	size_t nbefore, nafter, checked = 0;
	sigset_t mine;
	struct pp_model *m;
	struct pp_tfix f;

	unblock_async_signals();
	nbefore = threads_before(before);
	pp_tfix_open(&f, "sim", 640, 16, 0, true, 2, 0);
	m = model_open(&f, 3);
	nafter = thread_ids(after);
	for (size_t k = 0; k < nafter; k++) {
		struct timespec ms = { 0, 1000000 };
		uint64_t mask;
		int tries = 0;

		if (has_id(before, nbefore, after[k]) || !library_thread(after[k]) ||
		    !thread_blocked(after[k], &mask))
			continue;
		/* A thread being started blocks everything until it sets the mask it was given. */
		while ((mask & MUST_KEEP) == MUST_KEEP && tries++ < 1000 && nanosleep(&ms, NULL) == 0)
			thread_blocked(after[k], &mask);
		ck_assert_msg((mask & MUST_BLOCK) == MUST_BLOCK && (mask & MUST_KEEP) == 0,
			      "thread %d of the library has signal mask %#" PRIx64, (int)after[k], mask);
		checked++;
	}
	ck_assert_uint_ge(checked, 5);
	ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, NULL, &mine), 0);
	ck_assert(!sigismember(&mine, SIGINT) && !sigismember(&mine, SIGTERM));
	pp_model_destroy(m);
	pp_tfix_close(&f);
}
END_TEST

/* Where the SIGINT handler of test_sigint_on_main ran. */
static pid_t main_tid;
static pid_t before_ids[MAX_THREADS];
static size_t nbefore_ids;
static atomic_uint handled_on_main, handled_on_library, handled_elsewhere;

static void count_sigint(int sig)
{
	pid_t tid = (pid_t)syscall(SYS_gettid);

	(void)sig;
	if (tid == main_tid)
		atomic_fetch_add(&handled_on_main, 1);
	else if (has_id(before_ids, nbefore_ids, tid))
		atomic_fetch_add(&handled_elsewhere, 1);
	else
		atomic_fetch_add(&handled_on_library, 1);
}

/* The test's sender: SIGINT to the process at random moments, and the masks of every library thread. */
struct sender {
	pthread_t thread;
	pid_t tid;
	atomic_bool stop;
	unsigned sent;                 /* SIGINTs sent */
	unsigned checked;              /* library threads whose mask was read */
	unsigned open;                 /* of them, those that left SIGINT unblocked */
	pid_t open_tid;                /* the last of those */
	uint64_t open_mask;            /* and its mask */
	char open_stat[160];           /* and the start of its /proc stat line (name, state) */
	uint64_t seed;
};

static void *send_sigints(void *arg)
{
	struct sender *s = arg;
	pid_t ids[MAX_THREADS];

	s->tid = (pid_t)syscall(SYS_gettid);
	while (!atomic_load(&s->stop)) {
		struct timespec ts = { 0, 0 };
		size_t n;

		s->seed = s->seed * 6364136223846793005ull + 1442695040888963407ull;
		ts.tv_nsec = (long)(s->seed >> 33) % 400000;
		nanosleep(&ts, NULL);
		ck_assert_int_eq(kill(getpid(), SIGINT), 0);
		s->sent++;
		n = thread_ids(ids);
		for (size_t k = 0; k < n; k++) {
			uint64_t mask;

			if (ids[k] == s->tid || has_id(before_ids, nbefore_ids, ids[k]) ||
			    !library_thread(ids[k]) || !thread_blocked(ids[k], &mask))
				continue;
			s->checked++;
			if ((mask & SIGBIT(SIGINT)) == 0) {
				char path[64];
				FILE *f;

				s->open++;
				s->open_tid = ids[k];
				s->open_mask = mask;
				snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)ids[k]);
				if ((f = fopen(path, "r")) != NULL) {
					if (fgets(s->open_stat, sizeof(s->open_stat), f) == NULL)
						s->open_stat[0] = '\0';
					fclose(f);
				}
			}
		}
	}
	return NULL;
}

/* Trains the fixture's model on one epoch of its stage, as pinpipe-train does on sim. */
static void train_epoch(struct pp_tfix *f, struct pp_model *m, uint64_t epoch)
{
	struct pp_device_batch *b;
	int ret;

	ck_assert_int_eq(pp_transfer_begin_epoch(f->t, epoch), 0);
	while ((ret = pp_transfer_next(f->t, f->compute, &b)) == 1) {
		size_t shape[4] = { b->size, 1, 28, 28 };
		struct pp_tensor *in;

		ck_assert_int_eq(pp_event_synchronize(b->ready), 0);
		ck_assert_int_eq(pp_tensor_wrap(f->dev, b->samples, b->dtype, 4, shape, &in), 0);
		ret = pp_model_train_step(m, in, b->labels);
		ck_assert_msg(ret == 0, "train step: %s", pp_last_error());
		pp_tensor_destroy(in);
		ck_assert_int_eq(pp_transfer_release(f->t, b, f->compute), 0);
	}
	ck_assert_int_eq(ret, 0);
}

/*
 * Writes the fixture's samples to a shard on 4 compression threads, and
 * decodes it into memory on a loader of 3 workers (2 decoding threads
 * besides the caller), whose epoch it reads.  PP_TEST_IO=pread reads it
 * with pread, for valgrind, which does not see io_uring write a buffer.
 */
static void shard_round_trip(struct pp_tfix *f, const char *path)
{
	const struct pp_sample_info *info = pp_dataset_info(f->ds);
	struct pp_shard_writer_config wc = { .info = info, .records_per_chunk = 32, .level = 1,
					     .threads = 4 };
	const char *io = getenv("PP_TEST_IO");
	struct pp_loader_config lc = { .shard_paths = &path, .nshards = 1, .batch_size = 50,
				       .workers = 3, .cache = PP_LOADER_CACHE_MEMORY };
	uint64_t *ids = malloc(info->count * sizeof(*ids));
	uint8_t *samples = malloc(info->count * info->sample_bytes);
	int32_t *labels = malloc(info->count * sizeof(*labels));
	struct pp_shard_writer *w;
	struct pp_loader *l;
	struct pp_batch *b;
	int ret;

	ck_assert(ids && samples && labels);
	if (io != NULL && strcmp(io, "pread") == 0)
		lc.io = PP_LOADER_IO_PREAD;
	for (uint64_t k = 0; k < info->count; k++)
		ids[k] = k;
	ck_assert_int_eq(pp_dataset_gather(f->ds, ids, info->count, samples, labels), 0);
	ck_assert_int_eq(pp_shard_writer_create(path, &wc, &w), 0);
	ck_assert_int_eq(pp_shard_writer_add(w, samples, labels, info->count), 0);
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	pp_shard_writer_destroy(w);
	ret = pp_loader_create(&lc, &l);
	ck_assert_msg(ret == 0, "loader on %s: %s", path, pp_last_error());
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1)
		ck_assert_int_eq(pp_loader_release(l, b), 0);
	ck_assert_int_eq(ret, 0);
	pp_loader_destroy(l);
	free(ids);
	free(samples);
	free(labels);
}

/*
 * SIGINT sent to the process many times, at random moments, while the
 * library starts, uses and stops its threads (a sim device with its copy
 * engines, loader workers, a transfer stage, a model's compute threads,
 * a shard writer's compression threads, a loader's decoding threads), and
 * the main thread takes SIGINT as an application does.  Fails if the
 * handler ran on a thread that the library started, or never ran on the
 * main thread, or if a library thread was ever seen with SIGINT open.
 */
START_TEST(test_sigint_on_main)
{
	struct sigaction sa, old;
	struct sender s = { .seed = (uint64_t)time(NULL) };
	sigset_t block, prev;
	char *dir = pp_test_tmpdir(), *path;

	ck_assert_int_gt(asprintf(&path, "%s/signals.pps", dir), 0);
	unblock_async_signals();
	main_tid = (pid_t)syscall(SYS_gettid);
	nbefore_ids = threads_before(before_ids);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = count_sigint;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(SIGINT, &sa, &old), 0);
	/* The sender is not the library's: it blocks SIGINT itself. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, &block, &prev), 0);
	ck_assert_int_eq(pthread_create(&s.thread, NULL, send_sigints, &s), 0);
	ck_assert_int_eq(pthread_sigmask(SIG_SETMASK, &prev, NULL), 0);
	for (int round = 0; round < 3; round++) {
		struct pp_model *m;
		struct pp_tfix f;

		pp_tfix_open(&f, "sim", 600, 20, 0, round != 1, 2, 0);
		m = model_open(&f, 3);
		train_epoch(&f, m, (uint64_t)round);
		pp_model_destroy(m);
		shard_round_trip(&f, path);
		pp_tfix_close(&f);
	}
	atomic_store(&s.stop, true);
	ck_assert_int_eq(pthread_join(s.thread, NULL), 0);
	ck_assert_int_eq(sigaction(SIGINT, &old, NULL), 0);
	ck_assert_msg(atomic_load(&handled_on_library) == 0,
		      "the SIGINT handler ran %u times on a thread of the library (%u on main, %u sent)",
		      atomic_load(&handled_on_library), atomic_load(&handled_on_main), s.sent);
	ck_assert_uint_gt(atomic_load(&handled_on_main), 0);
	ck_assert_msg(s.open == 0, "%u of %u library threads seen had SIGINT unblocked (thread %d: "
		      "mask %#" PRIx64 ", stat %.60s)", s.open, s.checked, (int)s.open_tid, s.open_mask,
		      s.open_stat);
	ck_assert_uint_gt(s.checked, 0);
	pp_test_rmtree(dir);
	free(path);
	free(dir);
}
END_TEST

static const char *const sim_names[] = { "sim:poison,bw=1GB/s" };

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("transfer");
	TCase *tc = tcase_create("sim");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_alloc_failure);
	tcase_add_test(tc, test_copy_failure);
	tcase_add_test(tc, test_cpu_in_place);
	tcase_add_test(tc, test_loader_try_next);
	tcase_add_test(tc, test_resume);
	tcase_add_test(tc, test_position);
	tcase_add_test(tc, test_resume_samples);
	tcase_add_test(tc, test_calls_per_batch);
	tcase_add_test(tc, test_calls_per_batch_costly);
	suite_add_tcase(s, tc);
	tc = tcase_create("signals");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_threads_block_signals);
	tcase_add_test(tc, test_sigint_on_main);
	suite_add_tcase(s, tc);
	tc = tcase_create("overlap");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_call_cost_hidden);
	tcase_add_test(tc, test_launch_bound_exposed);
	suite_add_tcase(s, tc);
	pp_transfer_cases_add(s, "shared", sim_names, 1);
	return s;
}
