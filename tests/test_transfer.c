/*
 * tests/test_transfer.c: the transfer stage on sim (the shared cases of
 * tests/transfer_cases.c, with poisoning and a bandwidth cap), its error
 * paths under injected failures, the cpu device's in-place path, and the
 * loader's pp_loader_try_next() that the stage is built on.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "pinpipe/dataset.h"
#include "pinpipe/transfer.h"
#include "tests/testutil.h"
#include "tests/transfer_cases.h"
#include "transfer/device_impl.h"

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
	 * Samples and labels are two copies per batch: the 8th copy is batch 3's
	 * labels.  The failure is returned as soon as a call sees it (batches
	 * 1 and 2, copied ahead, may be dropped with it), or, when batch 3 and
	 * those after it were handed out while their copies still ran, at the
	 * latest when the slot of a failed copy is needed again: after at most
	 * 5 (the slots: depth 3 + 2) batches from batch 3 on.
	 */
	ck_assert_int_le(got, 3 + 5);
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
 * not NaN (undefined: nothing was copied).
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
		ck_assert_int_eq(pp_loader_release(ref, rb), 0);
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
	suite_add_tcase(s, tc);
	pp_transfer_cases_add(s, "shared", sim_names, 1);
	return s;
}
