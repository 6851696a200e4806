/*
 * tests/test_transfer_cuda.c: the shared transfer-stage cases
 * (tests/transfer_cases.c) on every GPU.  CUDA does not survive fork(), so
 * this program runs its tests without forking, and it has its own main:
 * with no usable GPU it says why and exits 77, which automake reports as SKIP.
 * Check's timeout does not apply without fork: each case arms an alarm()
 * watchdog instead (pp_test_watchdog_arm, in tests/transfer_cases.c).
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "pinpipe/device.h"
#include "tests/testutil.h"
#include "tests/transfer_cases.h"

int main(void)
{
	const char *const *gpu_names;
	int gpus = pp_test_cuda_gpus_or_skip(&gpu_names);
	Suite *s = suite_create("transfer_cuda");

	pp_transfer_cases_add(s, "cuda", gpu_names, gpus);
	return pp_test_run_nofork(s);
}
