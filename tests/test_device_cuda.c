/*
 * tests/test_device_cuda.c: the shared device cases (tests/device_cases.c)
 * on every GPU.  CUDA does not survive fork(), so this program runs its
 * tests without forking, and it has its own main: with no usable GPU it
 * says why and exits 77, which automake reports as SKIP.  Check's timeout
 * does not apply without fork: each test arms an alarm() watchdog instead.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "pinpipe/device.h"
#include "tests/device_cases.h"
#include "tests/testutil.h"
#include "device/device_impl.h"

static const char *const *gpu_names; /* "cuda:0", ... */
static int gpu_count;

/*
 * Fails if a failed CUDA call leaves its error pending in the runtime (it
 * used to linger and come back later as the failure of an unrelated kernel
 * launch): a GPU that is not there is refused before the runtime is asked
 * (asked, it would record an API error), and an allocation larger than the
 * GPU fails in cudaMalloc, whose error must be cleared with it.
 */
START_TEST(test_failure_clears_last_error)
{
	struct pp_device_props props;
	struct pp_device *dev = NULL;
	void *p = NULL;

	ck_assert_int_eq(pp_device_cuda_props(gpu_count + 7, &props), -ENODEV);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "no such GPU"));
	ck_assert_int_eq(cudaGetLastError(), cudaSuccess);

	ck_assert_int_eq(pp_device_open(gpu_names[0], &dev), 0);
	ck_assert_int_lt(pp_device_alloc(dev, (size_t)1 << 60, &p), 0);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "cudaMalloc"));
	ck_assert_ptr_null(p);
	ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if pinning host memory for cuda:N runs on whatever GPU is current
 * in the calling thread (creating a context on GPU 0): with the thread's
 * current GPU set to 0, pp_host_alloc on the last GPU must leave it current.
 * Only tells something with two GPUs or more.
 */
START_TEST(test_pinning_on_its_gpu)
{
	struct pp_device *dev = NULL;
	bool pinned = false;
	void *h;
	int cur = -1;

	ck_assert_int_eq(pp_device_open(gpu_names[gpu_count - 1], &dev), 0);
	ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
	ck_assert_int_eq(pp_host_alloc(dev, 1 << 20, true, &h, &pinned), 0);
	ck_assert(pinned);
	ck_assert_int_eq(cudaGetDevice(&cur), cudaSuccess);
	ck_assert_int_eq(cur, gpu_count - 1);
	pp_device_close(dev);
}
END_TEST

int main(void)
{
	Suite *s;
	TCase *tc;

	gpu_count = pp_test_cuda_gpus_or_skip(&gpu_names);
	s = suite_create("device_cuda");
	pp_device_cases_add(s, "cuda", gpu_names, gpu_count);
	tc = tcase_create("cuda_only");
	tcase_add_checked_fixture(tc, pp_test_watchdog_arm, NULL);
	tcase_add_test(tc, test_failure_clears_last_error);
	tcase_add_test(tc, test_pinning_on_its_gpu);
	suite_add_tcase(s, tc);
	return pp_test_run_nofork(s);
}
