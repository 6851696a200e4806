/*
 * tests/test_transfer_cuda.c: the shared transfer-stage cases
 * (tests/transfer_cases.c) on every GPU.  CUDA does not survive fork(), so
 * this program runs its tests without forking, and it has its own main:
 * with no usable GPU it says why and exits 77, which automake reports as SKIP.
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "pinpipe/device.h"
#include "tests/testutil.h"
#include "tests/transfer_cases.h"

static char gpu_names[16][16];
static const char *gpu_name_ptrs[16];

int main(void)
{
	Suite *s;
	SRunner *sr;
	int gpus = pp_device_cuda_count();
	int failed;

	if (gpus <= 0) {
		printf("SKIP: %s\n", pp_last_error());
		return 77;
	}
	if (gpus > 16)
		gpus = 16;
	for (int i = 0; i < gpus; i++) {
		snprintf(gpu_names[i], sizeof(gpu_names[i]), "cuda:%d", i);
		gpu_name_ptrs[i] = gpu_names[i];
	}
	s = suite_create("transfer_cuda");
	pp_transfer_cases_add(s, "cuda", gpu_name_ptrs, gpus);
	sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
