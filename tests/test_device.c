/*
 * tests/test_device.c: the device interface on the cpu and sim backends:
 * device names and the listing, the shared cases (tests/device_cases.c) on
 * the sim with and without a bandwidth cap, the cap itself, pinned memory
 * and its fallback when RLIMIT_MEMLOCK refuses, poisoning, injected copy and
 * allocation failures, several threads on one device, and the words for the
 * CUDA runtime's "no GPU" answers.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fault.h"
#include "pinpipe/device.h"
#include "pinpipe/transfer.h"
#include "tests/device_cases.h"
#include "tests/testutil.h"
#include "device/device_impl.h"

static struct pp_device *open_ok(const char *name)
{
	struct pp_device *dev = NULL;
	int ret = pp_device_open(name, &dev);

	ck_assert_msg(ret == 0, "pp_device_open(%s): %s", name, pp_last_error());
	return dev;
}

static void assert_error_has(const char *what)
{
	ck_assert_msg(strstr(pp_last_error(), what) != NULL, "message '%s' lacks '%s'",
		      pp_last_error(), what);
}

/*
 * Fails if a bad name or option is accepted, if its message does not name
 * the culprit, or if the good spellings (units, options) are refused.
 */
START_TEST(test_names)
{
	struct pp_device *dev = NULL;

	ck_assert_int_eq(pp_device_open("gpu", &dev), -EINVAL);
	assert_error_has("'gpu'");
	ck_assert_int_eq(pp_device_open("sim:bw=fast", &dev), -EINVAL);
	assert_error_has("'fast'");
	ck_assert_int_eq(pp_device_open("sim:bw=0GB/s", &dev), -EINVAL);
	ck_assert_int_eq(pp_device_open("sim:bw=10GB", &dev), -EINVAL);
	ck_assert_int_eq(pp_device_open("sim:turbo", &dev), -EINVAL);
	assert_error_has("'turbo'");
	ck_assert_int_eq(pp_device_open("sim:mem=lots", &dev), -EINVAL);
	ck_assert_int_eq(pp_device_open("sim:call_us=-1", &dev), -EINVAL);
	assert_error_has("'-1'");
	ck_assert_int_eq(pp_device_open("sim:call_us=20us", &dev), -EINVAL);
	ck_assert_int_eq(pp_device_open("sim:call_us=", &dev), -EINVAL);
	ck_assert_int_eq(pp_device_open("cpu:fast", &dev), -EINVAL);
	ck_assert_int_eq(pp_device_open("cuda:x", &dev), -EINVAL);
	ck_assert_int_eq(pp_device_open("cuda:-1", &dev), -EINVAL);
	ck_assert_int_eq(pp_device_open("auto:1", &dev), -EINVAL);
	ck_assert_ptr_null(dev);

	dev = open_ok("sim:bw=25GB/s,poison,mem=2GiB");
	ck_assert_int_eq(pp_device_get_props(dev)->kind, PP_DEVICE_SIM);
	ck_assert_uint_eq(pp_device_get_props(dev)->total_memory, 2ull << 30);
	ck_assert_ptr_nonnull(strstr(pp_device_get_props(dev)->description, "25 GB/s"));
	pp_device_close(dev);
	dev = open_ok("sim:bw=900MiB/s");
	pp_device_close(dev);
	dev = open_ok("sim:bw=55GB/s,call_us=2.5");
	ck_assert_ptr_nonnull(strstr(pp_device_get_props(dev)->description, "2.5 us a call"));
	pp_device_close(dev);
	dev = open_ok("cpu");
	ck_assert(pp_device_get_props(dev)->host_is_device);
	ck_assert_str_eq(pp_device_get_props(dev)->name, "cpu");
	pp_device_close(dev);
	pp_device_close(NULL);
}
END_TEST

/*
 * Fails if asking for cuda without a usable GPU crashes, succeeds, or does
 * not say why (no CUDA in the build, no driver, no GPU), or if "auto" does
 * not fall back to cpu and say so.  On a machine with a GPU it checks the
 * opposite: cuda opens and auto picks it.
 */
START_TEST(test_cuda_absent_or_present)
{
	struct pp_device *dev = NULL;
	int count = pp_device_cuda_count();

	if (count > 0) {
		dev = open_ok("cuda");
		ck_assert_int_eq(pp_device_get_props(dev)->kind, PP_DEVICE_CUDA);
		ck_assert(!pp_device_get_props(dev)->host_addressable);
		pp_device_close(dev);
		dev = open_ok("auto");
		ck_assert_int_eq(pp_device_get_props(dev)->kind, PP_DEVICE_CUDA);
		pp_device_close(dev);
		ck_assert_int_eq(pp_device_open("cuda:999", &dev), -ENODEV);
		assert_error_has("no such GPU");
		return;
	}
	/* -ENODEV: no CUDA here; -EIO: a driver is there, and CUDA failed to start. */
	ck_assert_msg(count == -ENODEV || count == -EIO, "count %d", count);
	ck_assert_msg(strstr(pp_last_error(), "no CUDA") || strstr(pp_last_error(), "no GPU") ||
		      strstr(pp_last_error(), "no NVIDIA driver") ||
		      strstr(pp_last_error(), "driver is older"), "unclear reason: %s", pp_last_error());
	ck_assert_int_eq(pp_device_open("cuda", &dev), count);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "cuda"));
	ck_assert_int_eq(pp_device_open("cuda:1", &dev), count);
	ck_assert_ptr_null(dev);
	dev = open_ok("auto");
	ck_assert_int_eq(pp_device_get_props(dev)->kind, PP_DEVICE_CPU);
	assert_error_has("auto: using cpu");
	ck_assert_int_eq(pp_device_get_props(dev)->fallback[0] != '\0', count == -EIO);
	pp_device_close(dev);
}
END_TEST

/*
 * "auto" where a GPU driver is there and CUDA fails to start (injected):
 * fails if it does not open cpu, or does not say why in props.fallback
 * (for the tools to tell the user), or says anything there when CUDA is
 * simply absent, as on a machine without a GPU.
 */
START_TEST(test_auto_fallback_said)
{
	struct pp_fault_plan plan;
	struct pp_device *dev;

	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, PP_FAULT_CUDA_START, -EIO, 0, 0);
	pp_fault_set(&plan);
	dev = open_ok("auto");
	pp_fault_set(NULL);
	ck_assert_int_eq(pp_device_get_props(dev)->kind, PP_DEVICE_CPU);
	ck_assert_ptr_nonnull(strstr(pp_device_get_props(dev)->fallback, "CUDA failed to start"));
	assert_error_has("auto: using cpu, because cuda: a driver is there");
	pp_device_close(dev);
	pp_fault_fini(&plan);
	if (pp_device_cuda_count() == -ENODEV) {
		dev = open_ok("auto");
		ck_assert_str_eq(pp_device_get_props(dev)->fallback, "");
		pp_device_close(dev);
	}
}
END_TEST

/* Whether pp_device_cuda_explain() called the last inputs broken (a driver, failing). */
static bool explained_broken;

/* The message pp_device_cuda_explain() writes for these inputs. */
static const char *explain(int err, const char *name, int driver, int runtime)
{
	static char msg[512];

	explained_broken = pp_device_cuda_explain(err, name, "CUDA's own words", driver, runtime,
						  msg, sizeof(msg));
	return msg;
}

/*
 * Fails if "driver version is insufficient" (error 35) does not become "no
 * NVIDIA driver" without one (driver version 0) and "older than" with both
 * versions for an old one; if a stub libcuda, a driver without a GPU or an
 * unknown error is not told apart; or if a message is cut or overflows.
 */
START_TEST(test_cuda_explain)
{
	const char *m;
	char small[24];

	m = explain(PP_CUDA_ERR_INSUFFICIENT_DRIVER, "cudaErrorInsufficientDriver", 0, 13000);
	ck_assert_str_eq(m, "cuda: no NVIDIA driver (libcuda.so.1 not found; cudaGetDeviceCount: "
			 "cudaErrorInsufficientDriver)");
	ck_assert(!explained_broken);
	m = explain(PP_CUDA_ERR_INSUFFICIENT_DRIVER, "cudaErrorInsufficientDriver", 12020, 13000);
	ck_assert(explained_broken);
	ck_assert_str_eq(m, "cuda: the NVIDIA driver is older than the CUDA runtime: it supports "
			 "CUDA 12.2, the runtime is CUDA 13.0; update the driver "
			 "(cudaGetDeviceCount: cudaErrorInsufficientDriver)");
	m = explain(PP_CUDA_ERR_INSUFFICIENT_DRIVER, "cudaErrorInsufficientDriver", 13010, 13000);
	ck_assert_ptr_nonnull(strstr(m, "the NVIDIA driver (CUDA 13.1) was refused by the CUDA 13.0 "
				     "runtime (cudaGetDeviceCount: CUDA's own words"));
	m = explain(PP_CUDA_ERR_STUB_LIBRARY, "cudaErrorStubLibrary", 0, 13000);
	ck_assert_str_eq(m, "cuda: no NVIDIA driver: the libcuda.so.1 found is the CUDA toolkit's "
			 "stub (cudaGetDeviceCount: cudaErrorStubLibrary)");
	ck_assert(!explained_broken);
	m = explain(PP_CUDA_ERR_NO_DEVICE, "cudaErrorNoDevice", 13000, 13000);
	ck_assert(!explained_broken);
	ck_assert_str_eq(m, "cuda: an NVIDIA driver (CUDA 13.0) and no GPU (cudaGetDeviceCount: "
			 "cudaErrorNoDevice)");
	m = explain(0, "cudaSuccess", 12080, 13000);
	ck_assert_str_eq(m, "cuda: an NVIDIA driver (CUDA 12.8) and no GPU (cudaGetDeviceCount: "
			 "none found)");
	m = explain(999, "cudaErrorUnknown", 13000, 13000);
	ck_assert_str_eq(m, "cuda: the GPUs cannot be used (cudaGetDeviceCount: CUDA's own words, "
			 "cudaErrorUnknown; driver CUDA 13.0, runtime CUDA 13.0)");
	ck_assert(explained_broken);
	pp_device_cuda_explain(PP_CUDA_ERR_INSUFFICIENT_DRIVER, "x", "y", 0, 13000, small,
			       sizeof(small));
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
}
END_TEST

/*
 * Fails if the listing misses cpu or sim, gets their capabilities or a
 * GPU's wrong, overflows 'max', disagrees with the GPU count, or, when it
 * succeeds, leaves the reason there is no GPU in pp_last_error().
 */
START_TEST(test_list)
{
	struct pp_device_props props[8], one;
	size_t n = 99;
	int gpus = pp_device_cuda_count();

	pp_set_error(-EIO, "an earlier failure");
	ck_assert_int_eq(pp_device_list(props, 8, &n), 0);
	ck_assert_str_eq(pp_last_error(), "an earlier failure");
	ck_assert_uint_eq(n, 2 + (size_t)(gpus > 0 ? PP_MIN(gpus, 6) : 0));
	ck_assert_str_eq(props[0].name, "cpu");
	ck_assert_str_eq(props[1].name, "sim");
	ck_assert(props[0].host_is_device && props[0].host_addressable);
	ck_assert(!props[1].host_is_device && props[1].async_copy && props[1].host_addressable);
	ck_assert_uint_gt(props[0].total_memory, 0);
	ck_assert(!props[0].cuda_streams && !props[1].cuda_streams);
	/* a GPU's entry says what the props of the device opened say */
	for (size_t i = 2; i < n; i++)
		ck_assert(props[i].cuda_streams && props[i].sticky_errors && !props[i].host_addressable);
	ck_assert_int_eq(pp_device_list(&one, 1, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(one.name, "cpu");
	ck_assert_int_eq(pp_device_list(NULL, 0, NULL), -EINVAL);
	/* A NULL device: no properties, nothing released (both were followed) */
	ck_assert_ptr_null(pp_device_get_props(NULL));
	pp_device_release(NULL, &one, sizeof(one));
}
END_TEST

static void count_run(void *arg)
{
	(*(int *)arg)++;
}

static void count_up(void *arg)
{
	(*(int *)arg)++;
}

/*
 * Fails if the cpu device runs a captured call at once (it has no queue:
 * outside a capture host functions and copies run in the call), if a
 * launch does not run the calls in the caller, or if a capture that
 * fails (the "graph" fault site, as a CUDA capture that is invalidated)
 * still gives a graph.  The sim's call cost is paid once a launch.
 */
START_TEST(test_graph_cpu_and_faults)
{
	struct pp_device *dev = open_ok("cpu");
	struct pp_device_stats st0, st1;
	struct pp_fault_plan plan;
	struct pp_stream *s;
	struct pp_graph *g = NULL;
	uint8_t src[64], *dst;
	int count = 0;

	memset(src, 7, sizeof(src));
	ck_assert_int_eq(pp_device_alloc(dev, sizeof(src), (void **)&dst), 0);
	memset(dst, 0, sizeof(src));
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_stream_begin_capture(s), 0);
	ck_assert_int_eq(pp_stream_launch_host(s, count_up, &count), 0);
	ck_assert_int_eq(pp_memcpy_async(dst, src, sizeof(src), PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_stream_spin(s, 1000), 0);
	ck_assert_int_eq(count, 0);
	ck_assert_uint_eq(dst[0], 0);
	ck_assert_int_eq(pp_stream_end_capture(s, &g), 0);
	ck_assert_uint_eq(pp_graph_calls(g), 3);
	ck_assert_int_eq(pp_graph_launch(g, s), 0);
	ck_assert_int_eq(count, 1);
	ck_assert_uint_eq(dst[63], 7);
	ck_assert_int_eq(pp_graph_launch(g, s), 0);
	ck_assert_int_eq(count, 2);
	pp_graph_destroy(g);
	g = NULL;

	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, PP_FAULT_GRAPH, -EIO, 0, 1);
	pp_fault_set(&plan);
	ck_assert_int_eq(pp_stream_begin_capture(s), 0);
	ck_assert_int_eq(pp_stream_launch_host(s, count_up, &count), 0);
	ck_assert_int_eq(pp_stream_end_capture(s, &g), -EIO);
	ck_assert_ptr_null(g);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "capture failed"));
	ck_assert_int_eq(count, 2);
	pp_fault_set(NULL);
	pp_fault_fini(&plan);
	pp_stream_destroy(s);
	pp_device_free(dev, dst);
	pp_device_close(dev);

	/* sim with a call cost: a launch of ten host functions is one call */
	dev = open_ok("sim:call_us=50");
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_stream_begin_capture(s), 0);
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(pp_stream_launch_host(s, count_up, &count), 0);
	ck_assert_int_eq(pp_stream_end_capture(s, &g), 0);
	ck_assert_int_eq(pp_device_get_stats(dev, &st0), 0);
	ck_assert_int_eq(pp_graph_launch(g, s), 0);
	ck_assert_int_eq(pp_device_get_stats(dev, &st1), 0);
	ck_assert_uint_eq(st1.calls - st0.calls, 1);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	ck_assert_int_eq(count, 12);
	pp_graph_destroy(g);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if the cpu backend copies lazily or out of order: with no queue,
 * a copy is done when the call returns, events are complete at once, and
 * a host function runs in the call.
 */
START_TEST(test_cpu_synchronous)
{
	struct pp_device *dev = open_ok("cpu");
	struct pp_device_stats st;
	struct pp_stream *s;
	struct pp_event *a, *b;
	uint8_t src[1000];
	uint64_t ns;
	void *d;
	int runs = 0;

	ck_assert_int_eq(pp_device_alloc(dev, sizeof(src), &d), 0);
	ck_assert_uint_eq((uintptr_t)d % PP_DEVICE_ALIGN, 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_event_create(dev, &a), 0);
	ck_assert_int_eq(pp_event_create(dev, &b), 0);
	pp_test_fill_random(src, sizeof(src), 9);
	ck_assert_int_eq(pp_event_record(a, s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, src, sizeof(src), PP_COPY_H2D, s), 0);
	ck_assert(memcmp(d, src, sizeof(src)) == 0);
	ck_assert_int_eq(pp_event_record(b, s), 0);
	ck_assert_int_eq(pp_event_query(b), 1);
	ck_assert_int_eq(pp_event_elapsed_ns(a, b, &ns), 0);
	ck_assert_int_eq(pp_stream_wait_event(s, a), 0);
	ck_assert_int_eq(pp_stream_launch_host(s, count_run, &runs), 0);
	ck_assert_int_eq(runs, 1);
	ck_assert_int_eq(pp_stream_launch_host(s, NULL, NULL), -EINVAL);
	ck_assert_ptr_null(pp_stream_cuda_handle(s)); /* a cpu stream has no CUDA handle */
	ck_assert_ptr_null(pp_stream_cuda_handle(NULL));
	ck_assert_ptr_eq(pp_stream_device(s), dev); /* a stream names its device */
	ck_assert_ptr_null(pp_stream_device(NULL));
	ck_assert_int_eq(pp_device_get_stats(dev, &st), 0);
	ck_assert_uint_eq(st.copies, 1);
	ck_assert_uint_eq(st.bytes_h2d, sizeof(src));
	ck_assert_uint_eq(st.pageable_copies, 1);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if the bandwidth cap is not applied: 32 MiB at 250 MB/s must take at
 * least 134 ms of engine time between two events, or if it is applied in
 * the pinned copy call rather than on the engine: the stream is held at a
 * gate, so the call can only return if it does not wait for the copy, and
 * the event after the copy must still be pending then.  (A bound on the
 * call's wall-clock time, half the copy's, failed on a host that
 * descheduled the caller that long.)
 */
START_TEST(test_bandwidth_cap)
{
	enum { SIZE = 32 << 20 };
	const uint64_t min_ns = (uint64_t)SIZE * 4; /* 4 ns per byte */
	struct pp_device *dev = open_ok("sim:bw=250MB/s");
	struct pp_device_stats st;
	struct pp_test_gate g;
	struct pp_stream *s;
	struct pp_event *a, *b;
	uint64_t ns;
	uint8_t *h;
	void *d;

	pp_test_gate_init(&g);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&h, NULL), 0);
	memset(h, 1, SIZE);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_event_create(dev, &a), 0);
	ck_assert_int_eq(pp_event_create(dev, &b), 0);
	ck_assert_int_eq(pp_stream_launch_host(s, pp_test_gate_pass, &g), 0);
	ck_assert_int_eq(pp_event_record(a, s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, h, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_event_record(b, s), 0);
	ck_assert_int_eq(pp_event_query(b), 0);
	pp_test_gate_open(&g);
	ck_assert_int_eq(pp_event_synchronize(b), 0);
	ck_assert_int_eq(pp_event_elapsed_ns(a, b, &ns), 0);
	ck_assert_uint_ge(ns, min_ns);
	ck_assert_int_eq(pp_device_get_stats(dev, &st), 0);
	ck_assert_uint_ge(st.copy_ns, min_ns);
	pp_device_close(dev);
	pp_test_gate_destroy(&g);
}
END_TEST

/*
 * Fails if a pageable copy under a bandwidth cap returns before the engine
 * has moved it: the host must be blocked for at least n / bw.
 */
START_TEST(test_pageable_blocks_for_transfer)
{
	enum { SIZE = 16 << 20 };
	struct pp_device *dev = open_ok("sim:bw=1GB/s");
	struct pp_device_stats st;
	struct pp_stream *s;
	uint8_t *h;
	void *d;

	ck_assert_int_eq(pp_host_alloc(dev, SIZE, false, (void **)&h, NULL), 0);
	memset(h, 2, SIZE);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, h, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_device_get_stats(dev, &st), 0);
	ck_assert_uint_ge(st.host_blocked_ns, (uint64_t)SIZE);
	ck_assert_uint_eq(st.pageable_copies, 1);
	pp_device_close(dev);
}
END_TEST

/* CPU time of the calling thread, ns. */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Fails if a device-to-host copy into pageable memory does not cost the
 * caller a memcpy of it, as the driver's staging does (the sim's engine used
 * to write pageable memory itself, so that a pageable device-to-host copy
 * cost what a pinned one does, and beat pinned host-to-device copies), or if
 * one into pinned memory costs the caller as much.  On CPU time, the
 * caller's own, against a memcpy of the same size timed the same way: the
 * least of three runs each, the most of the pageable ones.
 */
START_TEST(test_pageable_d2h_staged)
{
	enum { SIZE = 8 << 20 };
	struct pp_device *dev = open_ok("sim");
	uint64_t memcpy_ns = UINT64_MAX, pageable_ns = 0, pinned_ns = UINT64_MAX;
	struct pp_stream *s;
	uint8_t *page, *pin, *d;

	ck_assert_int_eq(pp_host_alloc(dev, SIZE, false, (void **)&page, NULL), 0);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&pin, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, (void **)&d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	memset(page, 1, SIZE);
	memset(pin, 1, SIZE);
	memset(d, 7, SIZE);
	for (int i = 0; i < 3; i++) {
		uint64_t t0 = thread_cpu_ns();

		memcpy(page, d, SIZE);
		memcpy_ns = PP_MIN(memcpy_ns, thread_cpu_ns() - t0);
		memset(page, 0, SIZE);
		t0 = thread_cpu_ns();
		ck_assert_int_eq(pp_memcpy_async(page, d, SIZE, PP_COPY_D2H, s), 0);
		pageable_ns = PP_MAX(pageable_ns, thread_cpu_ns() - t0);
		ck_assert_uint_eq(page[0], 7);
		ck_assert_uint_eq(page[SIZE - 1], 7);
		t0 = thread_cpu_ns();
		ck_assert_int_eq(pp_memcpy_async(pin, d, SIZE, PP_COPY_D2H, s), 0);
		pinned_ns = PP_MIN(pinned_ns, thread_cpu_ns() - t0);
		ck_assert_int_eq(pp_stream_synchronize(s), 0);
	}
	ck_assert_msg(pageable_ns >= memcpy_ns / 2, "pageable d2h: %llu ns of the caller's CPU, "
		      "a memcpy %llu", (unsigned long long)pageable_ns, (unsigned long long)memcpy_ns);
	ck_assert_msg(pinned_ns <= memcpy_ns / 4, "pinned d2h: %llu ns of the caller's CPU, "
		      "a memcpy %llu", (unsigned long long)pinned_ns, (unsigned long long)memcpy_ns);
	pp_device_close(dev);
}
END_TEST

/* Drops CAP_IPC_LOCK, which lets root lock memory past RLIMIT_MEMLOCK. */
static int drop_ipc_lock(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &hdr, data) != 0)
		return -1;
	data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
	return (int)syscall(SYS_capset, &hdr, data);
}

/* The child of test_pinned_fallback; returns its exit status (0 pass). */
static int pinned_fallback_child(void)
{
	struct rlimit lim = { 64 * 1024, 64 * 1024 };
	struct pp_device_stats st;
	struct pp_device *dev;
	bool pinned = true;
	void *big, *small;

	if (drop_ipc_lock() != 0 || setrlimit(RLIMIT_MEMLOCK, &lim) != 0)
		return 2;
	if (pp_device_open("sim", &dev) != 0)
		return 3;
	if (pp_host_alloc(dev, 1 << 20, true, &big, &pinned) != 0 || pinned)
		return 4;
	if (strstr(pp_last_error(), "fell back to pageable") == NULL ||
	    strstr(pp_last_error(), "mlock") == NULL || strstr(pp_last_error(), "RLIMIT_MEMLOCK") == NULL)
		return 5;
	memset(big, 1, 1 << 20);
	if (pp_host_alloc(dev, 4096, true, &small, &pinned) != 0 || !pinned)
		return 6;
	if (pp_device_get_stats(dev, &st) != 0 || st.pinned_fallbacks != 1 || st.pinned_bytes != 4096)
		return 7;
	pp_device_close(dev);
	return 0;
}

/*
 * Fails if a pinned allocation refused by RLIMIT_MEMLOCK is an error rather
 * than pageable memory with *pinned_p false, a message and a count, or if a
 * small one within the limit is not pinned.  Runs in a child so that the
 * lowered limit does not outlive it, even under CK_FORK=no.
 */
START_TEST(test_pinned_fallback)
{
	int status = -1;
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(pinned_fallback_child());
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_msg(WEXITSTATUS(status) == 0, "child failed at step %d", WEXITSTATUS(status));
}
END_TEST

/*
 * Fails if injected copy failures hang or vanish: after 3 good copies the
 * 4th fails, so the event after it and the stream both report -EIO with a
 * message naming the stream, the error is cleared by the synchronize that
 * reported it, and a pageable copy that fails returns the error itself.
 */
START_TEST(test_copy_failure)
{
	enum { SIZE = 4096 };
	struct pp_device *dev = open_ok("sim");
	struct pp_stream *s;
	struct pp_event *ev;
	uint8_t *h, pageable[SIZE];
	void *d;

	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&h, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_event_create(dev, &ev), 0);
	ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_COPY, 3), 0);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(pp_memcpy_async(d, h, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_event_record(ev, s), 0);
	ck_assert_int_eq(pp_event_synchronize(ev), -EIO);
	assert_error_has("stream 1: copy 4");
	ck_assert_int_eq(pp_stream_synchronize(s), -EIO);
	assert_error_has("injected");
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	memset(pageable, 0, sizeof(pageable));
	ck_assert_int_eq(pp_memcpy_async(d, pageable, SIZE, PP_COPY_H2D, s), -EIO);
	ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_COPY, -1), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), -EIO);
	ck_assert_int_eq(pp_memcpy_async(d, pageable, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if a pageable copy that fails returns 0 because its stream already
 * holds an earlier error (the copy's own outcome used to be looked up in the
 * stream's first error only), or if pp_device_synchronize returns 0 while a
 * stream has a failed copy: it must report it, and leave it to the stream's
 * own synchronize, which clears it.
 */
START_TEST(test_copy_errors_reported)
{
	enum { SIZE = 4096 };
	struct pp_device *dev = open_ok("sim");
	struct pp_stream *s, *idle;
	uint8_t *h, pageable[SIZE];
	void *d;

	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&h, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &idle), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	memset(pageable, 1, sizeof(pageable));
	ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_COPY, 0), 0);
	ck_assert_int_eq(pp_memcpy_async(d, h, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, pageable, SIZE, PP_COPY_H2D, s), -EIO);
	assert_error_has("copy 2 ");
	ck_assert_int_eq(pp_memcpy_async(pageable, d, SIZE, PP_COPY_D2H, s), -EIO);
	assert_error_has("copy 3 ");
	ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_COPY, -1), 0);
	ck_assert_int_eq(pp_device_synchronize(dev), -EIO);
	assert_error_has("stream 2: copy 1 ");
	ck_assert_int_eq(pp_device_synchronize(dev), -EIO);
	ck_assert_int_eq(pp_stream_synchronize(idle), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), -EIO);
	ck_assert_int_eq(pp_device_synchronize(dev), 0);
	pp_device_close(dev);
}
END_TEST

struct slow_flag {
	pthread_mutex_t mu;
	bool done; /* the host function has finished */
};

static void slow_flag_set(void *arg)
{
	struct slow_flag *f = arg;
	struct timespec ts = { 0, 100 * 1000 * 1000 };

	nanosleep(&ts, NULL);
	pthread_mutex_lock(&f->mu);
	f->done = true;
	pthread_mutex_unlock(&f->mu);
}

/*
 * Fails if an event recorded on a busy stream and then on an idle one is
 * freed by pp_event_destroy before the busy stream's record has run: the
 * idle stream's later record completed the event, and destroy used to
 * return at once, leaving the busy stream's queued record to write into
 * freed memory (AddressSanitizer reports it; here destroy must return only
 * after the host function queued before that record has finished).
 */
START_TEST(test_event_destroy_waits_all_records)
{
	struct pp_device *dev = open_ok("sim");
	struct slow_flag f = { .done = false };
	struct pp_stream *busy, *idle;
	struct pp_event *ev;
	bool done;

	pthread_mutex_init(&f.mu, NULL);
	ck_assert_int_eq(pp_stream_create(dev, &busy), 0);
	ck_assert_int_eq(pp_stream_create(dev, &idle), 0);
	ck_assert_int_eq(pp_event_create(dev, &ev), 0);
	ck_assert_int_eq(pp_stream_launch_host(busy, slow_flag_set, &f), 0);
	ck_assert_int_eq(pp_event_record(ev, busy), 0);
	ck_assert_int_eq(pp_event_record(ev, idle), 0);
	ck_assert_int_eq(pp_stream_synchronize(idle), 0);
	pp_event_destroy(ev);
	pthread_mutex_lock(&f.mu);
	done = f.done;
	pthread_mutex_unlock(&f.mu);
	ck_assert_msg(done, "pp_event_destroy returned before the busy stream's record ran");
	ck_assert_int_eq(pp_stream_synchronize(busy), 0);
	pp_device_close(dev);
	pthread_mutex_destroy(&f.mu);
}
END_TEST

/*
 * Fails if allocations past the sim's capacity, or injected failures,
 * succeed or leave the accounting wrong: with 1 MiB, 2 MiB fails with a
 * message, 512 KiB fits, 768 KiB more does not until the first is freed.
 */
START_TEST(test_alloc_failure)
{
	struct pp_device *dev = open_ok("sim:mem=1MiB");
	struct pp_device *cpu = open_ok("cpu");
	void *a = NULL, *b = NULL;

	ck_assert_int_eq(pp_device_alloc(dev, 2 << 20, &a), -ENOMEM);
	assert_error_has("out of device memory");
	ck_assert_ptr_null(a);
	ck_assert_int_eq(pp_device_alloc(dev, 512 << 10, &a), 0);
	ck_assert_int_eq(pp_device_alloc(dev, 768 << 10, &b), -ENOMEM);
	pp_device_free(dev, a);
	ck_assert_int_eq(pp_device_alloc(dev, 768 << 10, &b), 0);
	ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_ALLOC, 1), 0);
	ck_assert_int_eq(pp_device_alloc(dev, 16, &a), 0);
	ck_assert_int_eq(pp_device_alloc(dev, 16, &a), -ENOMEM);
	assert_error_has("injected");
	ck_assert_int_eq(pp_device_sim_inject(cpu, PP_SIM_FAIL_ALLOC, 1), -EINVAL);
	ck_assert_int_eq(pp_host_alloc(dev, SIZE_MAX - 100, false, &a, NULL), -ENOMEM);
	ck_assert_int_eq(pp_host_alloc(dev, 0, false, &a, NULL), -EINVAL);
	pp_device_close(cpu);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if poisoning does not mark released and freed device memory, or if
 * a copy from freed memory is carried out instead of refused.
 */
START_TEST(test_poison)
{
	enum { SIZE = 8192 };
	struct pp_device *dev = open_ok("sim:poison");
	struct pp_stream *s;
	uint8_t *h, *d;

	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&h, NULL), 0);
	memset(h, 0x11, SIZE);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, (void **)&d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, h, SIZE, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	ck_assert_uint_eq(d[SIZE - 1], 0x11);
	pp_device_release(dev, d, SIZE / 2);
	ck_assert_uint_eq(d[0], PP_SIM_POISON_BYTE);
	ck_assert_uint_eq(d[SIZE / 2 - 1], PP_SIM_POISON_BYTE);
	ck_assert_uint_eq(d[SIZE / 2], 0x11);
	pp_device_free(dev, d);
	/* The sim keeps freed memory poisoned a while: a late read sees the pattern. */
	ck_assert_uint_eq(d[SIZE - 1], PP_SIM_POISON_BYTE);
	ck_assert_int_eq(pp_memcpy_async(h, d, SIZE, PP_COPY_D2H, s), -EFAULT);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if a stream, an event and a device from two different devices are
 * mixed without an error: recording, waiting and timing across devices
 * must be -EINVAL.
 */
START_TEST(test_mixed_devices_refused)
{
	struct pp_device *a = open_ok("sim"), *b = open_ok("sim");
	struct pp_stream *sa;
	struct pp_event *ea, *eb;
	uint64_t ns;

	ck_assert_int_eq(pp_stream_create(a, &sa), 0);
	ck_assert_int_eq(pp_event_create(a, &ea), 0);
	ck_assert_int_eq(pp_event_create(b, &eb), 0);
	ck_assert_int_eq(pp_event_record(eb, sa), -EINVAL);
	ck_assert_int_eq(pp_stream_wait_event(sa, eb), -EINVAL);
	ck_assert_int_eq(pp_event_record(ea, sa), 0);
	ck_assert_int_eq(pp_event_elapsed_ns(ea, eb, &ns), -EINVAL);
	ck_assert_int_eq(pp_event_synchronize(ea), 0);
	pp_device_close(b);
	pp_device_close(a);
}
END_TEST

struct worker {
	struct pp_device *dev;
	int seed;
	int failures; /* rounds whose data came back wrong */
};

static void *worker_main(void *arg)
{
	enum { SIZE = 128 * 1024 };
	struct worker *w = arg;
	struct pp_stream *s;
	struct pp_event *ev;
	uint8_t *h, *back;
	void *d;

	if (pp_stream_create(w->dev, &s) != 0 || pp_event_create(w->dev, &ev) != 0 ||
	    pp_host_alloc(w->dev, SIZE, true, (void **)&h, NULL) != 0 ||
	    pp_host_alloc(w->dev, SIZE, w->seed % 2 == 0, (void **)&back, NULL) != 0 ||
	    pp_device_alloc(w->dev, SIZE, &d) != 0) {
		w->failures = -1;
		return NULL;
	}
	for (int round = 0; round < 40; round++) {
		pp_test_fill_random(h, SIZE, (uint64_t)(w->seed * 1000 + round));
		if (pp_memcpy_async(d, h, SIZE, PP_COPY_H2D, s) != 0 ||
		    pp_memcpy_async(back, d, SIZE, PP_COPY_D2H, s) != 0 ||
		    pp_event_record(ev, s) != 0 || pp_event_synchronize(ev) != 0 ||
		    memcmp(h, back, SIZE) != 0)
			w->failures++;
	}
	pp_device_free(w->dev, d);
	pp_host_free(w->dev, back);
	pp_host_free(w->dev, h);
	pp_event_destroy(ev);
	pp_stream_destroy(s);
	return NULL;
}

/*
 * Fails if threads sharing one device (allocating, freeing and copying on
 * their own streams at once) see each other's data or corrupt the tables;
 * ThreadSanitizer checks the locking in the --enable-sanitizers=thread build.
 */
START_TEST(test_threads_share_device)
{
	enum { THREADS = 4 };
	struct pp_device *dev = open_ok("sim");
	struct worker w[THREADS];
	pthread_t t[THREADS];
	struct pp_device_stats st;

	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ dev, i + 1, 0 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_int_eq(w[i].failures, 0);
	}
	ck_assert_int_eq(pp_device_get_stats(dev, &st), 0);
	ck_assert_uint_eq(st.copies, THREADS * 40 * 2);
	ck_assert_uint_eq(st.bytes_h2d, (uint64_t)THREADS * 40 * 128 * 1024);
	ck_assert_uint_eq(st.bytes_d2h, st.bytes_h2d);
	pp_device_close(dev);
}
END_TEST

/*
 * sim:call_us=N: every call that reaches a stream costs the caller N us,
 * and is counted.  Fails if a pinned copy, an event record, a query, a
 * stream wait or a host function returns sooner than N us after it was
 * made, or if the device's call counter does not count exactly those calls
 * (and not an allocation or a stream's creation).
 */
START_TEST(test_call_cost)
{
	enum { SIZE = 4096, CALL_US = 300 };
	struct pp_device *dev = open_ok("sim:call_us=300");
	struct pp_device_stats st0, st1;
	struct pp_stream *s, *s2;
	struct pp_event *ev;
	uint64_t t0, dt[5];
	uint8_t *h;
	void *d;

	ck_assert_int_eq(pp_host_alloc(dev, SIZE, true, (void **)&h, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, SIZE, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s2), 0);
	ck_assert_int_eq(pp_event_create_flags(dev, PP_EVENT_NO_TIMING, &ev), 0);
	ck_assert_int_eq(pp_device_get_stats(dev, &st0), 0);
	t0 = pp_now_ns();
	ck_assert_int_eq(pp_memcpy_async(d, h, SIZE, PP_COPY_H2D, s), 0);
	dt[0] = pp_now_ns() - t0;
	t0 = pp_now_ns();
	ck_assert_int_eq(pp_event_record(ev, s), 0);
	dt[1] = pp_now_ns() - t0;
	t0 = pp_now_ns();
	ck_assert_int_ge(pp_event_query(ev), 0);
	dt[2] = pp_now_ns() - t0;
	t0 = pp_now_ns();
	ck_assert_int_eq(pp_stream_wait_event(s2, ev), 0);
	dt[3] = pp_now_ns() - t0;
	t0 = pp_now_ns();
	ck_assert_int_eq(pp_stream_spin(s2, 0), 0);
	dt[4] = pp_now_ns() - t0;
	ck_assert_int_eq(pp_stream_synchronize(s2), 0);
	ck_assert_int_eq(pp_device_get_stats(dev, &st1), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_msg(dt[i] >= CALL_US * 1000u, "call %d took %llu ns", i,
			      (unsigned long long)dt[i]);
	ck_assert_uint_eq(st1.calls - st0.calls, 6);
	pp_device_close(dev);
}
END_TEST

/*
 * Events without timing: fails if one is refused, if it does not order a
 * stream as a timed one does, if elapsed time is given for it rather than
 * refused with -EINVAL, or if an unknown flag is accepted.
 */
START_TEST(test_event_no_timing)
{
	struct pp_device *dev = open_ok("sim:bw=1GB/s");
	struct pp_event *plain, *timed, *e;
	struct pp_test_gate g;
	struct pp_stream *s;
	uint64_t ns;
	uint8_t *h;
	void *d;

	pp_test_gate_init(&g);
	ck_assert_int_eq(pp_host_alloc(dev, 1 << 20, true, (void **)&h, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, 1 << 20, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_event_create_flags(dev, PP_EVENT_NO_TIMING, &plain), 0);
	ck_assert_int_eq(pp_event_create(dev, &timed), 0);
	ck_assert_int_eq(pp_event_create_flags(dev, 0x80, &e), -EINVAL);
	assert_error_has("0x80");
	/* The stream held at a gate, so the query comes before the end on any machine. */
	ck_assert_int_eq(pp_stream_launch_host(s, pp_test_gate_pass, &g), 0);
	ck_assert_int_eq(pp_event_record(timed, s), 0);
	ck_assert_int_eq(pp_memcpy_async(d, h, 1 << 20, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_event_record(plain, s), 0);
	ck_assert_int_eq(pp_event_query(plain), 0);
	pp_test_gate_open(&g);
	ck_assert_int_eq(pp_event_synchronize(plain), 0);
	ck_assert_int_eq(pp_event_query(plain), 1);
	ck_assert_int_eq(pp_event_elapsed_ns(timed, plain, &ns), -EINVAL);
	assert_error_has("PP_EVENT_NO_TIMING");
	ck_assert_int_eq(pp_event_elapsed_ns(plain, timed, &ns), -EINVAL);
	ck_assert_int_eq(pp_event_elapsed_ns(timed, timed, &ns), 0);
	pp_device_close(dev);
	pp_test_gate_destroy(&g);
}
END_TEST

/*
 * A query of an event after a failed copy: fails if it says 1 (complete, as
 * if all went well) or 0 rather than the copy's -EIO with its message.
 */
START_TEST(test_query_reports_failure)
{
	struct pp_device *dev = open_ok("sim");
	struct pp_stream *s;
	struct pp_event *ev;
	uint8_t *h;
	void *d;

	ck_assert_int_eq(pp_host_alloc(dev, 4096, true, (void **)&h, NULL), 0);
	ck_assert_int_eq(pp_device_alloc(dev, 4096, &d), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_event_create_flags(dev, PP_EVENT_NO_TIMING, &ev), 0);
	ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_COPY, 0), 0);
	ck_assert_int_eq(pp_memcpy_async(d, h, 4096, PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_event_record(ev, s), 0);
	while (pp_event_query(ev) == 0)
		continue;
	ck_assert_int_eq(pp_event_query(ev), -EIO);
	assert_error_has("injected");
	pp_device_close(dev);
}
END_TEST

static const char *const sim_names[] = { "sim", "sim:bw=8GB/s,poison" };

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("device");
	TCase *tc = tcase_create("api");

	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_cuda_absent_or_present);
	tcase_add_test(tc, test_cuda_explain);
	tcase_add_test(tc, test_auto_fallback_said);
	tcase_add_test(tc, test_list);
	tcase_add_test(tc, test_cpu_synchronous);
	tcase_add_test(tc, test_pinned_fallback);
	tcase_add_test(tc, test_copy_failure);
	tcase_add_test(tc, test_copy_errors_reported);
	tcase_add_test(tc, test_event_destroy_waits_all_records);
	tcase_add_test(tc, test_alloc_failure);
	tcase_add_test(tc, test_poison);
	tcase_add_test(tc, test_mixed_devices_refused);
	tcase_add_test(tc, test_event_no_timing);
	tcase_add_test(tc, test_query_reports_failure);
	tcase_add_test(tc, test_graph_cpu_and_faults);
	suite_add_tcase(s, tc);

	tc = tcase_create("timing");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_bandwidth_cap);
	tcase_add_test(tc, test_pageable_blocks_for_transfer);
	tcase_add_test(tc, test_pageable_d2h_staged);
	tcase_add_test(tc, test_threads_share_device);
	tcase_add_test(tc, test_call_cost);
	suite_add_tcase(s, tc);

	pp_device_cases_add(s, "sim", sim_names, (int)PP_ARRAY_SIZE(sim_names));
	return s;
}
