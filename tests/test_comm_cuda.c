/*
 * tests/test_comm_cuda.c: the communicator on a GPU, in a world of one
 * (NCCL refuses several ranks on one GPU): nccl on a cuda device's buffers
 * on a stream, and mpi staging a cuda buffer through pinned memory.  Its
 * own main, without fork (CUDA does not survive it): with no usable GPU it
 * says why and exits 77 (SKIP); a build without NCCL or MPI skips those
 * cases and says so.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pinpipe/comm.h"
#include "pinpipe/device.h"
#include "tests/testutil.h"

/*
 * Runs every collective of 'backend' on a buffer of cuda:0 on a stream and
 * checks that a world of one leaves it as it was; a backend the build lacks
 * (-ENOTSUP) is said and passes.
 */
static void check_backend(const char *backend)
{
	float host[5] = { 1.0f, -2.5f, 3.0f, 1e-3f, 7.0f }, back[5] = { 0 };
	struct pp_comm_config cfg;
	struct pp_comm *c;
	struct pp_device *dev;
	struct pp_stream *s;
	void *buf;
	int ret;

	pp_test_watchdog_arm();
	ck_assert_int_eq(pp_device_open("cuda:0", &dev), 0);
	pp_comm_config_init(&cfg);
	cfg.backend = backend;
	cfg.device = dev;
	cfg.timeout_s = 60;
	ret = pp_comm_create(&cfg, &c);
	if (ret == -ENOTSUP) {
		printf("test_comm_cuda: %s\n", pp_last_error());
		pp_device_close(dev);
		return;
	}
	ck_assert_msg(ret == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_comm_size(c), 1);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_device_alloc(dev, sizeof(host), &buf), 0);
	ck_assert_int_eq(pp_memcpy_async(buf, host, sizeof(host), PP_COPY_H2D, s), 0);
	ck_assert_msg(pp_comm_allreduce(c, buf, 5, PP_COMM_F32, PP_COMM_SUM, s) == 0, "%s",
		      pp_last_error());
	ck_assert_msg(pp_comm_allreduce(c, buf, 5, PP_COMM_F32, PP_COMM_MEAN, s) == 0, "%s",
		      pp_last_error());
	ck_assert_msg(pp_comm_broadcast(c, buf, sizeof(host), 0, s) == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_memcpy_async(back, buf, sizeof(back), PP_COPY_D2H, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	ck_assert(memcmp(host, back, sizeof(host)) == 0);
	ck_assert_int_eq(pp_comm_barrier(c), 0);
	pp_device_free(dev, buf);
	pp_stream_destroy(s);
	pp_comm_destroy(c);
	pp_device_close(dev);
}

/* Fails if NCCL, in a world of one on a GPU, changes a buffer or fails a call. */
START_TEST(test_nccl_world_of_one)
{
	check_backend("nccl");
}
END_TEST

/* Fails if mpi's staging of a GPU buffer through pinned memory changes it or fails. */
START_TEST(test_mpi_staged)
{
	check_backend("mpi");
}
END_TEST

int main(void)
{
	const char *const *gpu_names;
	Suite *s = suite_create("comm_cuda");
	TCase *tc = tcase_create("world of one");

	pp_test_cuda_gpus_or_skip(&gpu_names);
	tcase_add_test(tc, test_nccl_world_of_one);
	tcase_add_test(tc, test_mpi_staged);
	suite_add_tcase(s, tc);
	return pp_test_run_nofork(s);
}
