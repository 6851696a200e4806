/*
 * tests/device_cases.c: tests of the device interface that hold on every
 * backend with a queue of its own: copies arrive intact and in order,
 * events complete only after the work before them, streams wait for one
 * another's events, pageable copies block the host and pinned ones do not,
 * wrong pointers are refused, and closing a device with work in flight
 * waits for it and frees everything; graphs capture work without running
 * it and replay it whole, as one call.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pinpipe/device.h"
#include "tests/device_cases.h"
#include "tests/testutil.h"

static const char *const *case_names;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct pp_device *open_device(int i)
{
	struct pp_device *dev = NULL;
	int ret = pp_device_open(case_names[i], &dev);

	ck_assert_msg(ret == 0, "pp_device_open(%s): %s", case_names[i], pp_last_error());
	return dev;
}

/*
 * The streams a test began a capture on and has not ended.  The teardown
 * ends them: a failed assertion leaves the test at once, and without fork
 * (the GPU tests) a capture left open would make every later capture of
 * the thread fail, so that one failure became many.
 */
enum { MAX_CAPTURING = 8 };
static struct pp_stream *capturing[MAX_CAPTURING];

static int begin_capture(struct pp_stream *s)
{
	int ret = pp_stream_begin_capture(s);

	for (int i = 0; i < MAX_CAPTURING && ret == 0; i++) {
		if (capturing[i] == NULL) {
			capturing[i] = s;
			break;
		}
	}
	return ret;
}

static void forget_capture(struct pp_stream *s)
{
	for (int i = 0; i < MAX_CAPTURING; i++)
		if (capturing[i] == s)
			capturing[i] = NULL;
}

static int end_capture(struct pp_stream *s, struct pp_graph **g_p)
{
	forget_capture(s);
	return pp_stream_end_capture(s, g_p);
}

static void destroy_stream(struct pp_stream *s)
{
	forget_capture(s);
	pp_stream_destroy(s);
}

/* Teardown: ends the captures a failed test left open. */
static void end_captures_left(void)
{
	for (int i = 0; i < MAX_CAPTURING; i++) {
		struct pp_graph *g = NULL;

		if (capturing[i] == NULL)
			continue;
		if (pp_stream_end_capture(capturing[i], &g) == 0)
			pp_graph_destroy(g);
		capturing[i] = NULL;
	}
}

/* A log of host functions in the order the streams ran them. */
struct order_log {
	pthread_mutex_t mu;
	int v[256];
	int n;
};

struct log_entry {
	struct order_log *log;
	int value;
	unsigned delay_us; /* sleep before logging */
};

static void log_append(void *arg)
{
	struct log_entry *e = arg;

	if (e->delay_us > 0) {
		struct timespec ts = { 0, (long)e->delay_us * 1000 };
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&e->log->mu);
	if (e->log->n < (int)(sizeof(e->log->v) / sizeof(e->log->v[0])))
		e->log->v[e->log->n++] = e->value;
	pthread_mutex_unlock(&e->log->mu);
}

/*
 * Fails if a copy is lost, reordered or corrupted: 64 pinned chunks go up
 * with host functions sleeping random times between them, the same region is
 * written twice (the second must win), a device-to-device copy moves the
 * lot, and everything comes back down and is compared byte for byte.
 */
START_TEST(test_copies_intact_in_order)
{
	enum { CHUNK = 64 * 1024, N = 64, SIZE = CHUNK * N };
	struct pp_device *dev = open_device(_i);
	struct log_entry delays[N];
	struct order_log log = { .n = 0 };
	struct pp_stream *s;
	uint8_t *src, *back, *expect;
	void *d1, *d2;
	bool pinned;

	pthread_mutex_init(&log.mu, NULL);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&src, &pinned), 0);
	ck_assert(pinned);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&back, NULL), 0);
	expect = malloc(SIZE);
	ck_assert_ptr_nonnull(expect);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d1), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d2), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	/*
	 * A stream of a device whose props say cuda_streams, and only that, has a
	 * CUDA handle for the trainer's kernels; cuda's say it, cpu's and sim's not.
	 */
	ck_assert_int_eq(pp_stream_cuda_handle(s) != NULL, pp_device_get_props(dev)->cuda_streams);
	ck_assert_int_eq(pp_device_get_props(dev)->cuda_streams,
			 pp_device_get_props(dev)->kind == PP_DEVICE_CUDA);

	pp_test_fill_random(src, SIZE, 1);
	for (int i = 0; i < N; i++) {
		delays[i] = (struct log_entry){ &log, i, (unsigned)(rand() % 300) };
		ck_assert_int_eq(pp_stream_launch_host(s, log_append, &delays[i]), 0);
		ck_assert_int_eq(pp_memcpy_async((uint8_t *)d1 + (size_t)i * CHUNK,
						 src + (size_t)i * CHUNK, CHUNK, PP_COPY_H2D, s), 0);
	}
	/* Chunk 0 is written again from chunk 5's bytes: the later copy wins. */
	ck_assert_int_eq(pp_memcpy_async(d1, src + 5 * CHUNK, CHUNK, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_memcpy_async(d2, d1, SIZE, PP_COPY_D2D, s), 0);
	ck_assert_int_eq(pp_memcpy_async(back, d2, SIZE, PP_COPY_D2H, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);

	memcpy(expect, src, SIZE);
	memcpy(expect, src + 5 * CHUNK, CHUNK);
	ck_assert(memcmp(back, expect, SIZE) == 0);
	ck_assert_int_eq(log.n, N);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(log.v[i], i);

	free(expect);
	pthread_mutex_destroy(&log.mu);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if an event completes before the work recorded before it: the
 * stream is held at a gate, so the event must stay pending (query 0) until
 * the gate opens, and the copy before it must have landed when it completes.
 */
START_TEST(test_event_completes_after_work)
{
	enum { SIZE = 1 << 20 };
	struct pp_device *dev = open_device(_i);
	struct pp_stream *s;
	struct pp_event *ev, *never;
	struct pp_test_gate g;
	uint8_t *src, *back;
	void *d;
	uint64_t ns;

	pp_test_gate_init(&g);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&src, NULL), 0);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&back, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_event_create(dev, &ev), 0);
	ck_assert_int_eq(pp_event_create(dev, &never), 0);
	ck_assert_int_eq(pp_event_query(never), 1);
	ck_assert_int_eq(pp_event_synchronize(never), 0);
	ck_assert_int_eq(pp_event_elapsed_ns(never, ev, &ns), -EINVAL);

	pp_test_fill_random(src, SIZE, 2);
	ck_assert_int_eq(pp_stream_launch_host(s, pp_test_gate_pass, &g), 0);
	ck_assert_int_eq(pp_memcpy_async(d, src, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_memcpy_async(back, d, SIZE, PP_COPY_D2H, s), 0);
	ck_assert_int_eq(pp_event_record(ev, s), 0);
	pp_test_gate_wait_reached(&g);
	ck_assert_int_eq(pp_event_query(ev), 0);
	ck_assert_int_eq(pp_event_elapsed_ns(ev, ev, &ns), -EAGAIN);
	pp_test_gate_open(&g);
	ck_assert_int_eq(pp_event_synchronize(ev), 0);
	ck_assert_int_eq(pp_event_query(ev), 1);
	ck_assert(memcmp(src, back, SIZE) == 0);

	pp_event_destroy(never);
	pp_event_destroy(ev);
	pp_stream_destroy(s);
	pp_test_gate_destroy(&g);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if pp_stream_wait_event does not hold a stream back: stream B waits
 * for an event recorded on A after a gate, so B's host function must run
 * after A's, and the host never blocks in the call.
 */
START_TEST(test_stream_waits_for_event)
{
	struct pp_device *dev = open_device(_i);
	struct order_log log = { .n = 0 };
	struct log_entry a = { &log, 1, 0 }, b = { &log, 2, 0 };
	struct pp_stream *sa, *sb;
	struct pp_event *ev;
	struct pp_test_gate g;

	pp_test_gate_init(&g);
	pthread_mutex_init(&log.mu, NULL);
	ck_assert_int_eq(pp_stream_create(dev, &sa), 0);
	ck_assert_int_eq(pp_stream_create(dev, &sb), 0);
	ck_assert_int_eq(pp_event_create(dev, &ev), 0);
	ck_assert_int_eq(pp_stream_launch_host(sa, pp_test_gate_pass, &g), 0);
	ck_assert_int_eq(pp_stream_launch_host(sa, log_append, &a), 0);
	ck_assert_int_eq(pp_event_record(ev, sa), 0);
	ck_assert_int_eq(pp_stream_wait_event(sb, ev), 0);
	ck_assert_int_eq(pp_stream_launch_host(sb, log_append, &b), 0);
	pp_test_gate_wait_reached(&g);
	ck_assert_int_eq(log.n, 0);
	pp_test_gate_open(&g);
	ck_assert_int_eq(pp_stream_synchronize(sb), 0);
	ck_assert_int_eq(log.n, 2);
	ck_assert_int_eq(log.v[0], 1);
	ck_assert_int_eq(log.v[1], 2);

	pp_event_destroy(ev);
	pp_stream_destroy(sb);
	pp_stream_destroy(sa);
	pthread_mutex_destroy(&log.mu);
	pp_test_gate_destroy(&g);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if a pinned copy blocks the host or a pageable one does not, as the
 * statistics show them: the pinned copy is issued while the stream is held
 * at a gate, so it can only return if it does not wait for the copy (and
 * its event must still be pending); the pageable copy of the same 16 MiB
 * must then block the host several times longer.  Fails too if the byte
 * and copy counters are off.
 */
START_TEST(test_pinned_async_pageable_blocks)
{
	enum { SIZE = 16 << 20 };
	struct pp_device *dev = open_device(_i);
	struct pp_device_stats st0, st1, st2;
	struct pp_stream *s;
	struct pp_event *ev;
	struct pp_test_gate g;
	uint8_t *pinned_buf, *pageable_buf;
	bool pinned;
	void *d;

	pp_test_gate_init(&g);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&pinned_buf, &pinned), 0);
	ck_assert(pinned);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, false, (void **)&pageable_buf, &pinned), 0);
	ck_assert(!pinned);
	pp_test_fill_random(pinned_buf, SIZE, 3);
	memcpy(pageable_buf, pinned_buf, SIZE);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_event_create(dev, &ev), 0);
	/* A first copy warms the pages and the engine up. */
	ck_assert_int_eq(pp_memcpy_async(d, pinned_buf, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);

	ck_assert_int_eq(pp_stream_launch_host(s, pp_test_gate_pass, &g), 0);
	pp_test_gate_wait_reached(&g);
	ck_assert_int_eq(pp_device_get_stats(dev, &st0), 0);
	ck_assert_int_eq(pp_memcpy_async(d, pinned_buf, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_device_get_stats(dev, &st1), 0);
	ck_assert_int_eq(pp_event_record(ev, s), 0);
	ck_assert_int_eq(pp_event_query(ev), 0);
	pp_test_gate_open(&g);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, pageable_buf, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	ck_assert_int_eq(pp_device_get_stats(dev, &st2), 0);

	ck_assert_uint_eq(st1.copies - st0.copies, 1);
	ck_assert_uint_eq(st2.copies - st0.copies, 2);
	ck_assert_uint_eq(st2.bytes_h2d - st0.bytes_h2d, 2 * (uint64_t)SIZE);
	ck_assert_uint_eq(st2.pageable_copies - st0.pageable_copies, 1);
	ck_assert_uint_ge(st2.pinned_bytes, (uint64_t)SIZE);
	ck_assert_msg((st2.host_blocked_ns - st1.host_blocked_ns) >
			      4 * (st1.host_blocked_ns - st0.host_blocked_ns),
		      "pageable copy blocked %llu ns, pinned %llu ns",
		      (unsigned long long)(st2.host_blocked_ns - st1.host_blocked_ns),
		      (unsigned long long)(st1.host_blocked_ns - st0.host_blocked_ns));
	/* Every copy is timed on sim; on cuda a stream's first (the warm-up) and one in 16. */
	ck_assert_uint_ge(st2.copies_timed, 1);
	ck_assert_uint_gt(st2.copy_ns, 0);
	if (pp_device_get_props(dev)->kind == PP_DEVICE_SIM) {
		ck_assert_uint_eq(st2.copies_timed - st0.copies_timed, 2);
		ck_assert_uint_gt(st2.copy_ns, st0.copy_ns);
	}
	pp_device_close(dev);
	pp_test_gate_destroy(&g);
}
END_TEST

/*
 * Fails if a copy through a wrong pointer is carried out instead of being
 * refused with -EFAULT (device side outside an allocation, host side in
 * device memory), or if NULL and unknown kinds are not -EINVAL.
 */
START_TEST(test_wrong_pointers_refused)
{
	enum { SIZE = 4096 };
	struct pp_device *dev = open_device(_i);
	struct pp_stream *s;
	uint8_t host[SIZE];
	uint8_t *d, *d2;

	ck_assert_int_eq(pp_device_alloc(dev, SIZE, (void **)&d), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, (void **)&d2), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	memset(host, 1, sizeof(host));
	ck_assert_int_eq(pp_memcpy_async(d + 1, host, SIZE, PP_COPY_H2D, s), -EFAULT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "not inside"));
	ck_assert_int_eq(pp_memcpy_async(host, host, SIZE, PP_COPY_H2D, s), -EFAULT);
	ck_assert_int_eq(pp_memcpy_async(host, d + SIZE - 8, 16, PP_COPY_D2H, s), -EFAULT);
	ck_assert_int_eq(pp_memcpy_async(d, d2, SIZE, PP_COPY_H2D, s), -EFAULT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "device memory"));
	ck_assert_int_eq(pp_memcpy_async(d, host, SIZE, PP_COPY_D2D, s), -EFAULT);
	ck_assert_int_eq(pp_memcpy_async(NULL, host, SIZE, PP_COPY_H2D, s), -EINVAL);
	ck_assert_int_eq(pp_memcpy_async(d, host, SIZE, (enum pp_copy_kind)7, s), -EINVAL);
	ck_assert_int_eq(pp_memcpy_async(d, host, 0, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_device_alloc(dev, 0, (void **)&d), -EINVAL);
	pp_device_free(dev, d2);
	ck_assert_int_eq(pp_memcpy_async(d2, host, SIZE, PP_COPY_H2D, s), -EFAULT);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	pp_device_close(dev);
}
END_TEST

struct flag {
	pthread_mutex_t mu;
	int runs; /* times the host function ran */
};

static void flag_set(void *arg)
{
	struct flag *f = arg;

	pthread_mutex_lock(&f->mu);
	f->runs++;
	pthread_mutex_unlock(&f->mu);
}

/*
 * Fails if closing a device with work in flight drops the work, hangs, or
 * leaks (the leak shows under AddressSanitizer and valgrind): streams,
 * events, device and host memory are all left open, and the host function
 * queued last must have run by the time pp_device_close returns.
 */
START_TEST(test_close_with_work_in_flight)
{
	enum { SIZE = 256 * 1024 };
	struct pp_device *dev = open_device(_i);
	struct pp_stream *s[3];
	struct pp_event *ev[3];
	struct flag f = { .runs = 0 };
	uint8_t *h;
	void *d;

	pthread_mutex_init(&f.mu, NULL);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&h, NULL), 0);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, false, (void **)&h, NULL), 0);
	pp_test_fill_random(h, SIZE, 4);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&h, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(pp_stream_create(dev, &s[i]), 0);
		ck_assert_int_eq(pp_event_create(dev, &ev[i]), 0);
	}
	for (int k = 0; k < 50; k++) {
		for (int i = 0; i < 3; i++) {
			ck_assert_int_eq(pp_memcpy_async(d, h, SIZE, PP_COPY_H2D, s[i]), 0);
			ck_assert_int_eq(pp_event_record(ev[i], s[i]), 0);
			ck_assert_int_eq(pp_stream_wait_event(s[(i + 1) % 3], ev[i]), 0);
		}
	}
	ck_assert_int_eq(pp_stream_launch_host(s[2], flag_set, &f), 0);
	pp_device_close(dev);
	ck_assert_int_eq(f.runs, 1);
	pthread_mutex_destroy(&f.mu);
}
END_TEST

/*
 * Fails if the elapsed time between two events around a copy is not the
 * span in which the copy ran: it must be at least 1 µs for 32 MiB, and no
 * more than the host's own measure of the whole sequence.
 */
START_TEST(test_event_elapsed)
{
	enum { SIZE = 32 << 20 };
	struct pp_device *dev = open_device(_i);
	struct pp_stream *s;
	struct pp_event *a, *b;
	uint64_t ns = 0, t0, t1;
	uint8_t *h;
	void *d;

	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&h, NULL), 0);
	memset(h, 7, SIZE);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_event_create(dev, &a), 0);
	ck_assert_int_eq(pp_event_create(dev, &b), 0);
	t0 = now_ns();
	ck_assert_int_eq(pp_event_record(a, s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, h, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_event_record(b, s), 0);
	ck_assert_int_eq(pp_event_synchronize(b), 0);
	t1 = now_ns();
	ck_assert_int_eq(pp_event_elapsed_ns(a, b, &ns), 0);
	ck_assert_uint_ge(ns, 1000);
	ck_assert_uint_le(ns, t1 - t0);
	pp_device_close(dev);
}
END_TEST

static void *open_gate_later(void *arg)
{
	struct timespec ts = { 0, 50 * 1000 * 1000 };

	nanosleep(&ts, NULL);
	pp_test_gate_open(arg);
	return NULL;
}

/*
 * Fails if freeing memory that a queued copy still reads or writes does not
 * wait for the copy: each time the stream is held at a gate that another
 * thread opens 50 ms later, and pp_host_free of the source of a queued
 * copy, then pp_device_free of the source of another, must return only
 * after the gate opened; the data that went through both must arrive whole.
 */
START_TEST(test_free_waits_for_copies)
{
	enum { SIZE = 1 << 20 };
	struct pp_device *dev = open_device(_i);
	struct pp_stream *s;
	struct pp_test_gate g1, g2;
	pthread_t opener;
	uint8_t *src, *back, *expect = malloc(SIZE);
	void *d, *d2;

	ck_assert_ptr_nonnull(expect);
	pp_test_gate_init(&g1);
	pp_test_gate_init(&g2);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&src, NULL), 0);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&back, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d2), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	pp_test_fill_random(src, SIZE, 5);
	memcpy(expect, src, SIZE);
	pp_test_fill_random(back, SIZE, 6);

	ck_assert_int_eq(pp_stream_launch_host(s, pp_test_gate_pass, &g1), 0);
	ck_assert_int_eq(pp_memcpy_async(d, src, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pthread_create(&opener, NULL, open_gate_later, &g1), 0);
	pp_host_free(dev, src);
	ck_assert(pp_test_gate_is_open(&g1));
	ck_assert_int_eq(pthread_join(opener, NULL), 0);

	ck_assert_int_eq(pp_stream_launch_host(s, pp_test_gate_pass, &g2), 0);
	ck_assert_int_eq(pp_memcpy_async(d2, d, SIZE, PP_COPY_D2D, s), 0);
	ck_assert_int_eq(pthread_create(&opener, NULL, open_gate_later, &g2), 0);
	pp_device_free(dev, d);
	ck_assert(pp_test_gate_is_open(&g2));
	ck_assert_int_eq(pthread_join(opener, NULL), 0);

	ck_assert_int_eq(pp_memcpy_async(back, d2, SIZE, PP_COPY_D2H, s), 0);
	ck_assert_int_eq(pp_device_synchronize(dev), 0);
	ck_assert(memcmp(expect, back, SIZE) == 0);
	pp_device_close(dev);
	pp_test_gate_destroy(&g2);
	pp_test_gate_destroy(&g1);
	free(expect);
}
END_TEST

/*
 * Fails if a graph runs its work while being captured, loses, reorders or
 * freezes it, or costs more than one call a launch: eight host functions
 * and eight copies are captured, nothing may have run at the end of the
 * capture; each launch then runs them all, in order, reading the host
 * memory as it is at the launch (a graph keeps pointers, not bytes).
 */
START_TEST(test_graph_replays)
{
	enum { CHUNK = 16 * 1024, N = 8, SIZE = CHUNK * N };
	struct pp_device *dev = open_device(_i);
	struct log_entry entries[N];
	struct order_log log = { .n = 0 };
	struct pp_device_stats st0, st1;
	struct pp_stream *s;
	struct pp_graph *g = NULL;
	uint8_t *src, *back;
	void *d;

	pthread_mutex_init(&log.mu, NULL);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&src, NULL), 0);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&back, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	memset(back, 0, SIZE);

	ck_assert_int_eq(begin_capture(s), 0);
	for (int i = 0; i < N; i++) {
		entries[i] = (struct log_entry){ &log, i, 0 };
		ck_assert_int_eq(pp_stream_launch_host(s, log_append, &entries[i]), 0);
		ck_assert_int_eq(pp_memcpy_async((uint8_t *)d + (size_t)i * CHUNK,
						 src + (size_t)i * CHUNK, CHUNK, PP_COPY_H2D, s), 0);
	}
	ck_assert_int_eq(pp_memcpy_async(back, d, SIZE, PP_COPY_D2H, s), 0);
	ck_assert_int_eq(end_capture(s, &g), 0);
	ck_assert_uint_eq(pp_graph_calls(g), 2 * N + 1);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	ck_assert_int_eq(log.n, 0);
	for (size_t i = 0; i < SIZE; i++)
		ck_assert_uint_eq(back[i], 0);

	for (int round = 1; round <= 3; round++) {
		pp_test_fill_random(src, SIZE, (unsigned)round);
		ck_assert_int_eq(pp_device_get_stats(dev, &st0), 0);
		ck_assert_int_eq(pp_graph_launch(g, s), 0);
		ck_assert_int_eq(pp_device_get_stats(dev, &st1), 0);
		ck_assert_uint_eq(st1.calls - st0.calls, 1);
		ck_assert_uint_eq(st1.graph_launches - st0.graph_launches, 1);
		ck_assert_uint_eq(st1.copies - st0.copies, N + 1);
		ck_assert_uint_eq(st1.bytes_h2d - st0.bytes_h2d, SIZE);
		ck_assert_int_eq(pp_stream_synchronize(s), 0);
		ck_assert(memcmp(back, src, SIZE) == 0);
		ck_assert_int_eq(log.n, round * N);
		for (int i = 0; i < log.n; i++)
			ck_assert_int_eq(log.v[i], i % N);
	}

	pp_graph_destroy(g);
	pp_graph_destroy(NULL);
	pthread_mutex_destroy(&log.mu);
	pp_device_close(dev);
}
END_TEST

/* A capture of one copy on another thread's stream, made while the test's thread captures. */
struct other_thread_capture {
	struct pp_stream *s;
	void *d;           /* 4096 bytes of s's device */
	int begin, end;    /* what begin and end returned */
	size_t calls;      /* pp_graph_calls() of the graph */
	char msg[256];     /* pp_last_error() after a failure */
};

static void *capture_in_thread(void *arg)
{
	struct other_thread_capture *t = arg;
	struct pp_graph *g = NULL;

	t->begin = pp_stream_begin_capture(t->s);
	t->end = -1;
	if (t->begin == 0) {
		int copy = pp_memcpy_async(t->d, (uint8_t *)t->d + 2048, 2048, PP_COPY_D2D, t->s);

		t->end = pp_stream_end_capture(t->s, &g);
		if (copy < 0 && t->end == 0)
			t->end = copy;
	}
	if (t->begin < 0 || t->end < 0)
		snprintf(t->msg, sizeof(t->msg), "%s", pp_last_error());
	t->calls = pp_graph_calls(g);
	pp_graph_destroy(g);
	return NULL;
}

/*
 * Fails if a capture takes a call it cannot replay, or a misuse is let
 * through: a second begin, a synchronization or an event on a capturing
 * stream (which spoils the capture: its end reports the first error and
 * makes no graph), an end without a begin, a launch on a capturing stream
 * or on another device's stream, a copy from pageable memory, a copy out
 * of bounds or of an unknown kind (also spoiling the capture).
 */
START_TEST(test_graph_misuse_refused)
{
	struct pp_device *dev = open_device(_i), *other = open_device(_i);
	struct pp_stream *s, *s_other;
	struct pp_event *e;
	struct pp_graph *g = NULL, *g2 = NULL;
	uint8_t *pageable;
	void *d, *d_other;

	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_stream_create(other, &s_other), 0);
	ck_assert_int_eq(pp_event_create(dev, &e), 0);
	ck_assert_int_eq(pp_device_alloc(dev, 4096, &d), 0);
	ck_assert_int_eq(pp_device_alloc(other, 4096, &d_other), 0);
	ck_assert_int_eq(pp_host_alloc(dev, 4096, false, (void **)&pageable, NULL), 0);

	ck_assert_int_eq(end_capture(s, &g), -EINVAL);
	ck_assert_int_eq(pp_stream_begin_capture(NULL), -EINVAL);
	ck_assert_int_eq(begin_capture(s), 0);
	ck_assert_int_eq(begin_capture(s), -EBUSY);
	ck_assert_int_eq(pp_stream_synchronize(s), -EBUSY);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "capturing"));
	ck_assert_int_eq(end_capture(s, &g), -EBUSY);
	ck_assert_ptr_null(g);

	ck_assert_int_eq(begin_capture(s), 0);
	ck_assert_int_eq(pp_event_record(e, s), -ENOTSUP);
	ck_assert_int_eq(pp_stream_wait_event(s, e), -ENOTSUP);
	ck_assert_int_eq(pp_graph_launch(g2, s), -EINVAL);
	ck_assert_int_eq(end_capture(s, &g), -ENOTSUP);
	ck_assert_ptr_null(g);

	if (!pp_device_get_props(dev)->host_is_device) {
		ck_assert_int_eq(begin_capture(s), 0);
		ck_assert_int_eq(pp_memcpy_async(d, pageable, 4096, PP_COPY_H2D, s), -ENOTSUP);
		ck_assert_int_eq(end_capture(s, &g), -ENOTSUP);
	}
	/* A copy refused for its bounds or its kind spoils the capture too (a
	 * graph was made without it, and its launches skipped the copy). */
	ck_assert_int_eq(begin_capture(s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, (uint8_t *)d + 2048, 4096, PP_COPY_D2D, s), -EFAULT);
	ck_assert_int_eq(end_capture(s, &g), -EFAULT);
	ck_assert_ptr_null(g);
	ck_assert_int_eq(begin_capture(s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, (uint8_t *)d + 2048, 16, (enum pp_copy_kind)7, s), -EINVAL);
	ck_assert_int_eq(end_capture(s, &g), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "unknown copy kind 7"));
	ck_assert_ptr_null(g);

	/*
	 * A good capture still works after the spoiled ones.  While it is open,
	 * a second capture of this thread (another device's stream) is refused
	 * and leaves it whole, and another thread captures at the same time.
	 */
	ck_assert_int_eq(begin_capture(s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, (uint8_t *)d + 2048, 2048, PP_COPY_D2D, s), 0);
	ck_assert_int_eq(begin_capture(s_other), -EBUSY);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "one stream at a time"));
	ck_assert_int_eq(end_capture(s_other, &g2), -EINVAL);
	ck_assert_ptr_null(g2);
	{
		struct other_thread_capture t = { .s = s_other, .d = d_other };
		pthread_t th;

		ck_assert_int_eq(pthread_create(&th, NULL, capture_in_thread, &t), 0);
		ck_assert_int_eq(pthread_join(th, NULL), 0);
		ck_assert_msg(t.begin == 0 && t.end == 0, "capture in another thread: %d %d: %s",
			      t.begin, t.end, t.msg);
		ck_assert_uint_eq(t.calls, 1);
	}
	ck_assert_int_eq(end_capture(s, &g), 0);
	ck_assert_uint_eq(pp_graph_calls(g), 1);
	ck_assert_int_eq(pp_graph_launch(g, s_other), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "captured on device"));
	ck_assert_int_eq(begin_capture(s), 0);
	ck_assert_int_eq(pp_graph_launch(g, s), -EBUSY);
	ck_assert_int_eq(end_capture(s, &g2), 0);
	pp_graph_destroy(g2);
	ck_assert_int_eq(pp_graph_launch(g, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	pp_graph_destroy(g);

	/* A stream destroyed while capturing lets its capture go, and the thread with it. */
	ck_assert_int_eq(begin_capture(s_other), 0);
	destroy_stream(s_other);
	ck_assert_int_eq(begin_capture(s), 0);
	ck_assert_int_eq(end_capture(s, &g), 0);
	ck_assert_uint_eq(pp_graph_calls(g), 0);
	pp_graph_destroy(g);

	pp_host_free(dev, pageable);
	pp_event_destroy(e);
	pp_device_close(other);
	pp_device_close(dev);
}
END_TEST

void pp_device_cases_add(Suite *s, const char *tcase_name, const char *const *names, int n)
{
	TCase *tc = tcase_create(tcase_name);

	case_names = names;
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, pp_test_watchdog_arm, end_captures_left);
	tcase_add_loop_test(tc, test_copies_intact_in_order, 0, n);
	tcase_add_loop_test(tc, test_event_completes_after_work, 0, n);
	tcase_add_loop_test(tc, test_stream_waits_for_event, 0, n);
	tcase_add_loop_test(tc, test_pinned_async_pageable_blocks, 0, n);
	tcase_add_loop_test(tc, test_wrong_pointers_refused, 0, n);
	tcase_add_loop_test(tc, test_close_with_work_in_flight, 0, n);
	tcase_add_loop_test(tc, test_event_elapsed, 0, n);
	tcase_add_loop_test(tc, test_free_waits_for_copies, 0, n);
	tcase_add_loop_test(tc, test_graph_replays, 0, n);
	tcase_add_loop_test(tc, test_graph_misuse_refused, 0, n);
	suite_add_tcase(s, tc);
}
