/*
 * tests/test_comm_cuda.c: the communicator on a GPU, in a world of one
 * (NCCL refuses several ranks on one GPU): nccl on a cuda device's buffers
 * on a stream, and mpi staging a cuda buffer through pinned memory, each
 * blocking and non-blocking (pp_comm_iallreduce()).  Its
 * own main, without fork (CUDA does not survive it): with no usable GPU it
 * says why and exits 77 (SKIP); a build without NCCL or MPI skips those
 * cases and says so.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pinpipe/comm.h"
#include "pinpipe/device.h"
#include "tests/testutil.h"

/*
 * Opens cuda:0 and a communicator of 'backend' on it, in a world of one;
 * false when the build lacks the backend (-ENOTSUP: said, nothing left open).
 */
static bool open_comm(const char *backend, struct pp_device **dev_p, struct pp_comm **c_p)
{
	struct pp_comm_config cfg;
	int ret;

	pp_test_watchdog_arm();
	ck_assert_int_eq(pp_device_open("cuda:0", dev_p), 0);
	pp_comm_config_init(&cfg);
	cfg.backend = backend;
	cfg.device = *dev_p;
	cfg.timeout_s = 60;
	ret = pp_comm_create(&cfg, c_p);
	if (ret == -ENOTSUP) {
		printf("test_comm_cuda: %s\n", pp_last_error());
		pp_device_close(*dev_p);
		return false;
	}
	ck_assert_msg(ret == 0, "%s", pp_last_error());
	return true;
}

/*
 * Runs every collective of 'backend' on a buffer of cuda:0 on a stream and
 * checks that a world of one leaves it as it was; a backend the build lacks
 * (-ENOTSUP) is said and passes.
 */
static void check_backend(const char *backend)
{
	float host[5] = { 1.0f, -2.5f, 3.0f, 1e-3f, 7.0f }, back[5] = { 0 };
	struct pp_comm *c;
	struct pp_device *dev;
	struct pp_stream *s;
	void *buf;

	if (!open_comm(backend, &dev, &c))
		return;
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

/*
 * The non-blocking allreduce of 'backend' on cuda:0: f32 and f64, sum and
 * mean, in flight together with a host buffer's, waited for in reverse
 * order on the stream, then read back by a copy queued on the stream after
 * the wait; a request never waited for is left to pp_comm_destroy().
 */
static void check_backend_nonblocking(const char *backend)
{
	float hf[5] = { 1.0f, -2.5f, 3.0f, 1e-3f, 7.0f }, bf[5] = { 0 }, h[3] = { 4, 5, 6 };
	double hd[3] = { 1e300, -0.25, 3.5 }, bd[3] = { 0 };
	struct pp_comm_request *r[4];
	struct pp_comm *c;
	struct pp_device *dev;
	struct pp_stream *s;
	void *df, *dd, *dl;

	if (!open_comm(backend, &dev, &c))
		return;
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_device_alloc(dev, sizeof(hf), &df), 0);
	ck_assert_int_eq(pp_device_alloc(dev, sizeof(hd), &dd), 0);
	ck_assert_int_eq(pp_device_alloc(dev, sizeof(hf), &dl), 0);
	/* The copies are queued, not done: the reductions must come after them. */
	ck_assert_int_eq(pp_memcpy_async(df, hf, sizeof(hf), PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_memcpy_async(dd, hd, sizeof(hd), PP_COPY_H2D, s), 0);
	ck_assert_msg(pp_comm_iallreduce(c, df, 5, PP_COMM_F32, PP_COMM_SUM, s, &r[0]) == 0, "%s",
		      pp_last_error());
	ck_assert_int_eq(pp_comm_progress(c), 0);
	ck_assert_msg(pp_comm_iallreduce(c, dd, 3, PP_COMM_F64, PP_COMM_MEAN, s, &r[1]) == 0, "%s",
		      pp_last_error());
	ck_assert_msg(pp_comm_iallreduce(c, h, 3, PP_COMM_F32, PP_COMM_MEAN, NULL, &r[2]) == 0, "%s",
		      pp_last_error());
	ck_assert_msg(pp_comm_iallreduce(c, dl, 5, PP_COMM_F32, PP_COMM_MEAN, s, &r[3]) == 0, "%s",
		      pp_last_error());
	ck_assert_int_eq(pp_comm_progress(c), 0);
	for (int i = 2; i >= 0; i--)
		ck_assert_msg(pp_comm_wait(r[i], i == 2 ? NULL : s) == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_memcpy_async(bf, df, sizeof(bf), PP_COPY_D2H, s), 0);
	ck_assert_int_eq(pp_memcpy_async(bd, dd, sizeof(bd), PP_COPY_D2H, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	ck_assert(memcmp(hf, bf, sizeof(hf)) == 0);
	ck_assert(memcmp(hd, bd, sizeof(hd)) == 0);
	ck_assert(h[0] == 4 && h[1] == 5 && h[2] == 6);
	/* r[3] never waited for: destroy frees it (and its event). */
	pp_comm_destroy(c);
	pp_device_free(dev, dl);
	pp_device_free(dev, dd);
	pp_device_free(dev, df);
	pp_stream_destroy(s);
	pp_device_close(dev);
}

/* Fails if NCCL, in a world of one on a GPU, changes a buffer or fails a call. */
START_TEST(test_nccl_world_of_one)
{
	check_backend("nccl");
	check_backend_nonblocking("nccl");
}
END_TEST

/* Fails if mpi's staging of a GPU buffer through pinned memory changes it or fails. */
START_TEST(test_mpi_staged)
{
	check_backend("mpi");
	check_backend_nonblocking("mpi");
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
