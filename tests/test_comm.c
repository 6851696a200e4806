/*
 * tests/test_comm.c: the communicator: the local backend (every call),
 * argument errors and their messages, injected faults (a failing and a
 * stalled collective), "auto" outside a launcher, and the mpi backend in a
 * world of one (MPI started as a singleton, without mpirun) where the
 * build has MPI; the non-blocking allreduce on each, and its requests in
 * the dispatcher (a backend of the test's own).  Several ranks are tested
 * by tests/test_comm_mpi.sh and tests/test_train_mpi.sh.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "comm/comm_impl.h"
#include "pinpipe/comm.h"
#include "tests/testutil.h"

/*
 * LeakSanitizer's options for this program (it reads them when it runs;
 * other builds never call this): no leak check.  Open MPI's components,
 * loaded at MPI_Init and unloaded at exit, leave allocations that
 * LeakSanitizer can no longer name by module, so no suppression reaches
 * them.  valgrind's leak check covers the local case (.ci/run); ASan still
 * checks every access here.
 */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
	return "detect_leaks=0";
}

/* As a launcher's rank would see it: none of its variables, so "auto" is local. */
static void leave_launcher(void)
{
	unsetenv("OMPI_COMM_WORLD_SIZE");
	unsetenv("PMI_SIZE");
	unsetenv("PMIX_SIZE");
	unsetenv("MPI_LOCALNRANKS");
	unsetenv("SLURM_NTASKS");
	unsetenv("PP_FAULTS");
}

static struct pp_comm *make(const char *backend, double timeout_s)
{
	struct pp_comm_config cfg;
	struct pp_comm *c = NULL;

	pp_comm_config_init(&cfg);
	cfg.backend = backend;
	cfg.timeout_s = timeout_s;
	ck_assert_msg(pp_comm_create(&cfg, &c) == 0, "%s: %s", backend, pp_last_error());
	return c;
}

/* Checks every collective of a world of one: each leaves the buffers as they are. */
static void check_world_of_one(struct pp_comm *c)
{
	float f[3] = { 1.5f, -2.0f, 3.25f };
	double d[2] = { 1e300, -0.5 };
	char bytes[5] = "abcd";

	ck_assert_int_eq(pp_comm_rank(c), 0);
	ck_assert_int_eq(pp_comm_size(c), 1);
	ck_assert_int_eq(pp_comm_local_rank(c), 0);
	ck_assert_int_eq(pp_comm_local_size(c), 1);
	ck_assert_int_eq(pp_comm_allreduce(c, f, 3, PP_COMM_F32, PP_COMM_SUM, NULL), 0);
	ck_assert(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f);
	ck_assert_int_eq(pp_comm_allreduce(c, f, 3, PP_COMM_F32, PP_COMM_MEAN, NULL), 0);
	ck_assert(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f);
	ck_assert_int_eq(pp_comm_allreduce(c, d, 2, PP_COMM_F64, PP_COMM_SUM, NULL), 0);
	ck_assert(d[0] == 1e300 && d[1] == -0.5);
	ck_assert_int_eq(pp_comm_allreduce(c, d, 2, PP_COMM_F64, PP_COMM_MEAN, NULL), 0);
	ck_assert(d[0] == 1e300 && d[1] == -0.5);
	ck_assert_int_eq(pp_comm_broadcast(c, bytes, sizeof(bytes), 0, NULL), 0);
	ck_assert_str_eq(bytes, "abcd");
	ck_assert_int_eq(pp_comm_barrier(c), 0);
	/* A world of one has no other rank to end: abort returns. */
	ck_assert_int_eq(pp_comm_abort(c, 3), 0);
}

/*
 * Checks the non-blocking allreduce of a world of one: requests in flight
 * together, waited for in reverse order, leave the buffers as they are, on
 * the host and in a sim device's memory on a stream.
 */
static void check_iallreduce_world_of_one(struct pp_comm *c)
{
	struct pp_comm_request *r[3];
	float f[3] = { 1.5f, -2.0f, 3.25f }, host[4] = { 1, 2, 3, 4 }, back[4] = { 0 };
	double d[2] = { 1e300, -0.5 };
	struct pp_device *dev;
	struct pp_stream *s;
	void *buf;

	ck_assert_int_eq(pp_comm_iallreduce(c, f, 3, PP_COMM_F32, PP_COMM_SUM, NULL, &r[0]), 0);
	ck_assert_ptr_nonnull(r[0]);
	ck_assert_int_eq(pp_comm_progress(c), 0);
	ck_assert_int_eq(pp_comm_iallreduce(c, d, 2, PP_COMM_F64, PP_COMM_MEAN, NULL, &r[1]), 0);
	/* count 0: a request all the same, already done, and NULL buf allowed. */
	ck_assert_int_eq(pp_comm_iallreduce(c, NULL, 0, PP_COMM_F32, PP_COMM_SUM, NULL, &r[2]), 0);
	ck_assert_ptr_nonnull(r[2]);
	ck_assert_int_eq(pp_comm_progress(c), 0);
	for (int i = 2; i >= 0; i--)
		ck_assert_msg(pp_comm_wait(r[i], NULL) == 0, "%s", pp_last_error());
	ck_assert(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f);
	ck_assert(d[0] == 1e300 && d[1] == -0.5);
	ck_assert_int_eq(pp_comm_wait(NULL, NULL), 0);

	ck_assert_int_eq(pp_device_open("sim", &dev), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_device_alloc(dev, sizeof(host), &buf), 0);
	ck_assert_int_eq(pp_memcpy_async(buf, host, sizeof(host), PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_comm_iallreduce(c, buf, 4, PP_COMM_F32, PP_COMM_MEAN, s, &r[0]), 0);
	ck_assert_int_eq(pp_comm_progress(c), 0);
	ck_assert_msg(pp_comm_wait(r[0], s) == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_memcpy_async(back, buf, sizeof(back), PP_COPY_D2H, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	ck_assert(memcmp(host, back, sizeof(host)) == 0);
	pp_device_free(dev, buf);
	pp_stream_destroy(s);
	pp_device_close(dev);
}

/* Fails if the local backend is not rank 0 of 1 or changes a buffer. */
START_TEST(test_local_every_call)
{
	struct pp_comm *c = make("local", 0);

	ck_assert_str_eq(pp_comm_backend(c), "local");
	ck_assert(pp_comm_timeout(c) == PP_COMM_DEFAULT_TIMEOUT_S);
	check_world_of_one(c);
	check_iallreduce_world_of_one(c);
	pp_comm_destroy(c);
	pp_comm_destroy(NULL);
}
END_TEST

/* Fails if a device buffer on a stream is refused or changed by a world of one. */
START_TEST(test_local_device_buffer)
{
	struct pp_device *dev;
	struct pp_stream *s;
	struct pp_comm *c = make("local", 5);
	float host[4] = { 1, 2, 3, 4 }, back[4] = { 0 };
	void *buf;

	ck_assert(pp_comm_timeout(c) == 5.0);
	ck_assert_int_eq(pp_device_open("sim", &dev), 0);
	ck_assert_int_eq(pp_stream_create(dev, &s), 0);
	ck_assert_int_eq(pp_device_alloc(dev, sizeof(host), &buf), 0);
	ck_assert_int_eq(pp_memcpy_async(buf, host, sizeof(host), PP_COPY_H2D, s), 0);
	ck_assert_int_eq(pp_comm_allreduce(c, buf, 4, PP_COMM_F32, PP_COMM_MEAN, s), 0);
	ck_assert_int_eq(pp_comm_broadcast(c, buf, sizeof(host), 0, s), 0);
	ck_assert_int_eq(pp_memcpy_async(back, buf, sizeof(back), PP_COPY_D2H, s), 0);
	ck_assert_int_eq(pp_stream_synchronize(s), 0);
	ck_assert(memcmp(host, back, sizeof(host)) == 0);
	pp_device_free(dev, buf);
	pp_stream_destroy(s);
	pp_device_close(dev);
	pp_comm_destroy(c);
}
END_TEST

/* Fails if "auto" outside a launcher is not local, or the defaults are not those documented. */
START_TEST(test_auto_is_local)
{
	struct pp_comm *c = NULL;

	leave_launcher();
	ck_assert_int_eq(pp_comm_create(NULL, &c), 0);
	ck_assert_str_eq(pp_comm_backend(c), "local");
	ck_assert(pp_comm_timeout(c) == PP_COMM_DEFAULT_TIMEOUT_S);
	pp_comm_destroy(c);
	c = make("auto", 0);
	ck_assert_str_eq(pp_comm_backend(c), "local");
	pp_comm_destroy(c);
}
END_TEST

/*
 * Fails if pp_comm_launched() is not false outside a launcher, true for each
 * launcher's world size above 1 in the environment, and false for a world
 * of one (a single rank is no job of several).
 */
START_TEST(test_launched)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
					    "MPI_LOCALNRANKS", "SLURM_NTASKS" };

	leave_launcher();
	ck_assert(!pp_comm_launched());
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		setenv(vars[i], "1", 1);
		ck_assert_msg(!pp_comm_launched(), "%s=1", vars[i]);
		setenv(vars[i], "2", 1);
		ck_assert_msg(pp_comm_launched(), "%s=2", vars[i]);
		unsetenv(vars[i]);
	}
	ck_assert(!pp_comm_launched());
}
END_TEST

/* Fails if a bad argument is accepted, or its message does not name the rank and the call. */
START_TEST(test_argument_errors)
{
	struct pp_comm_config cfg;
	struct pp_comm *c = NULL;
	struct pp_device *dev;
	float f[2] = { 0 };

	pp_comm_config_init(&cfg);
	cfg.backend = "tcp";
	ck_assert_int_eq(pp_comm_create(&cfg, &c), -EINVAL);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "unknown backend 'tcp'"));
	cfg.backend = "local";
	cfg.timeout_s = -1;
	ck_assert_int_eq(pp_comm_create(&cfg, &c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "timeout -1"));
	ck_assert_int_eq(pp_comm_create(NULL, NULL), -EINVAL);
	/* nccl needs a cuda device, whether or not the build has NCCL. */
	cfg.backend = "nccl";
	cfg.timeout_s = 0;
	ck_assert_int_eq(pp_comm_create(&cfg, &c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "needs a cuda device (got none)"));
	ck_assert_int_eq(pp_device_open("sim", &dev), 0);
	cfg.device = dev;
	ck_assert_int_eq(pp_comm_create(&cfg, &c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "needs a cuda device (got sim)"));
	pp_device_close(dev);

	c = make("local", 0);
	ck_assert_int_eq(pp_comm_allreduce(c, f, 2, (enum pp_comm_dtype)7, PP_COMM_SUM, NULL), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: allreduce: unknown dtype 7");
	ck_assert_int_eq(pp_comm_allreduce(c, f, 2, PP_COMM_F32, (enum pp_comm_op)9, NULL), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: allreduce: unknown op 9");
	ck_assert_int_eq(pp_comm_allreduce(c, NULL, 2, PP_COMM_F32, PP_COMM_SUM, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "no buffer for 2 elements"));
	ck_assert_int_eq(pp_comm_allreduce(c, NULL, 0, PP_COMM_F32, PP_COMM_SUM, NULL), 0);
	ck_assert_int_eq(pp_comm_allreduce(c, f, SIZE_MAX / 2, PP_COMM_F32, PP_COMM_SUM, NULL),
			 -EINVAL);
	ck_assert_int_eq(pp_comm_broadcast(c, f, sizeof(f), 1, NULL), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: broadcast: root 1 (expected 0..0)");
	ck_assert_int_eq(pp_comm_broadcast(c, f, sizeof(f), -1, NULL), -EINVAL);
	ck_assert_int_eq(pp_comm_broadcast(c, NULL, 4, 0, NULL), -EINVAL);
	ck_assert_int_eq(pp_comm_broadcast(c, NULL, 0, 0, NULL), 0);
	pp_comm_destroy(c);
}
END_TEST

/*
 * Fails if a bad argument of pp_comm_iallreduce() is accepted, leaves
 * *req_p set, or its message is not that of pp_comm_allreduce() for the
 * call "iallreduce".
 */
START_TEST(test_iallreduce_argument_errors)
{
	struct pp_comm *c = make("local", 0);
	struct pp_comm_request *r;
	float f[2] = { 0 };

	ck_assert_int_eq(pp_comm_iallreduce(c, f, 2, PP_COMM_F32, PP_COMM_SUM, NULL, NULL), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: iallreduce: no place for the request");
	r = (struct pp_comm_request *)f;
	ck_assert_int_eq(pp_comm_iallreduce(c, f, 2, (enum pp_comm_dtype)7, PP_COMM_SUM, NULL, &r),
			 -EINVAL);
	ck_assert_ptr_null(r);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: iallreduce: unknown dtype 7");
	r = (struct pp_comm_request *)f;
	ck_assert_int_eq(pp_comm_iallreduce(c, f, 2, PP_COMM_F32, (enum pp_comm_op)9, NULL, &r),
			 -EINVAL);
	ck_assert_ptr_null(r);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: iallreduce: unknown op 9");
	r = (struct pp_comm_request *)f;
	ck_assert_int_eq(pp_comm_iallreduce(c, NULL, 2, PP_COMM_F32, PP_COMM_SUM, NULL, &r), -EINVAL);
	ck_assert_ptr_null(r);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: iallreduce: no buffer for 2 elements");
	r = (struct pp_comm_request *)f;
	ck_assert_int_eq(pp_comm_iallreduce(c, f, SIZE_MAX / 2, PP_COMM_F64, PP_COMM_SUM, NULL, &r),
			 -EINVAL);
	ck_assert_ptr_null(r);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "iallreduce: 9223372036854775807 elements are too many"));
	/* None of them left a request for destroy to free (valgrind's leak check sees the rest). */
	ck_assert_ptr_null(c->reqs);
	pp_comm_destroy(c);
}
END_TEST

/*
 * A backend of requests of the test's own, in place of local's ops: a
 * request is done at its second test, one of 13 elements fails at its
 * first, a wait adds 1 to the buffer's first element (so that a wait run
 * twice, or not at all, shows), and each free is counted.
 */
static int fake_frees;

static int fake_istart(struct pp_comm_request *r, struct pp_stream *stream)
{
	r->state = calloc(1, sizeof(int));
	return r->state != NULL ? 0 : -ENOMEM;
}

static int fake_itest(struct pp_comm_request *r)
{
	int *tests = r->state;

	if (r->count == 13)
		return pp_comm_fail(r->comm, -EIO, "iallreduce", "the fake backend failed");
	if (++*tests >= 2)
		r->done = true;
	return 0;
}

static int fake_iwait(struct pp_comm_request *r, struct pp_stream *stream)
{
	((float *)r->buf)[0] += 1;
	r->done = true;
	return 0;
}

static void fake_ifree(struct pp_comm_request *r)
{
	free(r->state);
	fake_frees++;
}

/*
 * Fails if the dispatcher loses a request: a failure found by progress
 * not said again, with its message, by that request's wait; a wait not run
 * once per request whatever the order, nor for one done at its start; a
 * request never waited for not freed by destroy.
 */
START_TEST(test_requests_in_the_dispatcher)
{
	static struct pp_comm_ops ops;
	struct pp_comm *c = make("local", 0);
	struct pp_comm_request *r[5];
	float buf[5][13] = { { 0 } };
	const size_t counts[5] = { 1, 13, 2, 3, 4 };

	ops = *c->ops;
	ops.istart = fake_istart;
	ops.itest = fake_itest;
	ops.iwait = fake_iwait;
	ops.ifree = fake_ifree;
	c->ops = &ops;
	fake_frees = 0;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pp_comm_iallreduce(c, buf[i], counts[i], PP_COMM_F32, PP_COMM_SUM,
						    NULL, &r[i]), 0);
	ck_assert_int_eq(pp_comm_progress(c), -EIO);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: iallreduce: the fake backend failed");
	ck_assert(r[0]->done == false && r[2]->done == false);
	/* Reported once by progress; the others go on to done. */
	ck_assert_int_eq(pp_comm_progress(c), 0);
	ck_assert(r[0]->done && r[2]->done);
	for (int i = 3; i < 5; i++)
		ck_assert_int_eq(pp_comm_iallreduce(c, buf[i], counts[i], PP_COMM_F32, PP_COMM_SUM,
						    NULL, &r[i]), 0);
	ck_assert_int_eq(pp_comm_wait(r[2], NULL), 0);
	ck_assert_int_eq(pp_comm_barrier(c), 0);
	pp_error(-EPERM, "another error since");
	ck_assert_int_eq(pp_comm_wait(r[1], NULL), -EIO);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: iallreduce: the fake backend failed");
	ck_assert_int_eq(pp_comm_wait(r[0], NULL), 0);
	ck_assert(buf[0][0] == 1 && buf[1][0] == 0 && buf[2][0] == 1);
	ck_assert_int_eq(fake_frees, 3);
	/* A request done at its start (count 0; a staged buffer likewise) is not the
	 * backend's to end: its wait does not run the backend's (a mean divided twice). */
	{
		struct pp_comm_request *z;
		float zero[1] = { 0 };

		ck_assert_int_eq(pp_comm_iallreduce(c, zero, 0, PP_COMM_F32, PP_COMM_MEAN, NULL, &z), 0);
		ck_assert_int_eq(pp_comm_wait(z, NULL), 0);
		ck_assert(zero[0] == 0);
		ck_assert_int_eq(fake_frees, 4);
	}
	/* r[3] and r[4] never waited for: destroy frees them. */
	pp_comm_destroy(c);
	ck_assert_int_eq(fake_frees, 6);
	ck_assert(buf[3][0] == 0 && buf[4][0] == 0);
}
END_TEST

/* Fails if an injected fault does not fail the collective it names, with the rank and the call. */
START_TEST(test_fault_fails_a_collective)
{
	struct pp_fault_plan plan;
	struct pp_comm *c;
	float f = 1;

	leave_launcher();
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, PP_FAULT_COMM, -EIO, 2, 1);
	pp_fault_set(&plan);
	c = make("local", 0);
	pp_fault_set(NULL);
	ck_assert_int_eq(pp_comm_allreduce(c, &f, 1, PP_COMM_F32, PP_COMM_SUM, NULL), 0);
	ck_assert_int_eq(pp_comm_barrier(c), 0);
	ck_assert_int_eq(pp_comm_allreduce(c, &f, 1, PP_COMM_F32, PP_COMM_SUM, NULL), -EIO);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: allreduce: Input/output error "
			 "(injected fault)");
	ck_assert_int_eq(pp_comm_allreduce(c, &f, 1, PP_COMM_F32, PP_COMM_SUM, NULL), 0);
	pp_comm_destroy(c);
	pp_fault_fini(&plan);

	/* The same through PP_FAULTS, as the shell tests give it to one rank. */
	setenv("PP_FAULTS", "comm:ENOSPC", 1);
	c = make("local", 0);
	ck_assert_int_eq(pp_comm_barrier(c), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "rank 0 of 1: barrier"));
	pp_comm_destroy(c);
	setenv("PP_FAULTS", "comm:nonsense", 1);
	ck_assert_int_eq(pp_comm_create(NULL, &c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "PP_FAULTS"));
	unsetenv("PP_FAULTS");
}
END_TEST

/*
 * Fails if a stalled collective does not end in -ETIMEDOUT naming the
 * timeout, or ends before the twice the timeout that a stall waits.
 */
START_TEST(test_fault_stall_times_out)
{
	struct pp_comm *c;
	float f = 1;
	uint64_t t0;

	leave_launcher();
	setenv("PP_FAULTS", "comm:stall", 1);
	c = make("local", 0.05);
	unsetenv("PP_FAULTS");
	t0 = pp_now_ns();
	ck_assert_int_eq(pp_comm_allreduce(c, &f, 1, PP_COMM_F32, PP_COMM_SUM, NULL), -ETIMEDOUT);
	ck_assert_uint_ge(pp_now_ns() - t0, 100 * 1000 * 1000);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "allreduce: stalled for twice the timeout of 0.05 s"));
	pp_comm_destroy(c);
}
END_TEST

/*
 * Fails if an injected fault does not fail the iallreduce it falls on, at
 * its start and with no request, or if a stall does not end that start in
 * -ETIMEDOUT after the twice the timeout that a stall waits; or if
 * requests never waited for are not freed by destroy (valgrind's leak
 * check of this case, .ci/run).
 */
START_TEST(test_fault_fails_an_iallreduce)
{
	struct pp_fault_plan plan;
	struct pp_comm_request *r[3];
	struct pp_comm *c;
	float f = 1;
	uint64_t t0;

	leave_launcher();
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, PP_FAULT_COMM, -EIO, 1, 1);
	pp_fault_set(&plan);
	c = make("local", 0);
	pp_fault_set(NULL);
	ck_assert_int_eq(pp_comm_iallreduce(c, &f, 1, PP_COMM_F32, PP_COMM_SUM, NULL, &r[0]), 0);
	ck_assert_int_eq(pp_comm_iallreduce(c, &f, 1, PP_COMM_F32, PP_COMM_SUM, NULL, &r[1]), -EIO);
	ck_assert_ptr_null(r[1]);
	ck_assert_str_eq(pp_last_error(), "comm local: rank 0 of 1: iallreduce: Input/output error "
			 "(injected fault)");
	ck_assert_int_eq(pp_comm_iallreduce(c, &f, 1, PP_COMM_F32, PP_COMM_SUM, NULL, &r[2]), 0);
	ck_assert_ptr_nonnull(r[2]);
	/* r[0] and r[2] never waited for. */
	pp_comm_destroy(c);
	pp_fault_fini(&plan);

	setenv("PP_FAULTS", "comm:stall", 1);
	c = make("local", 0.05);
	unsetenv("PP_FAULTS");
	t0 = pp_now_ns();
	ck_assert_int_eq(pp_comm_iallreduce(c, &f, 1, PP_COMM_F32, PP_COMM_SUM, NULL, &r[0]),
			 -ETIMEDOUT);
	ck_assert_uint_ge(pp_now_ns() - t0, 100 * 1000 * 1000);
	ck_assert_ptr_null(r[0]);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "rank 0 of 1: iallreduce: stalled for twice "
				     "the timeout of 0.05 s"));
	pp_comm_destroy(c);
}
END_TEST

/*
 * Fails if the mpi backend, where the build has it, is not a world of one
 * outside mpirun that passes every call; or, where the build lacks it,
 * if the error does not say how to build it.
 */
START_TEST(test_mpi_world_of_one)
{
	struct pp_comm_config cfg;
	struct pp_comm *c = NULL, *c2 = NULL;
	int ret;

	leave_launcher();
	pp_comm_config_init(&cfg);
	cfg.backend = "mpi";
	ret = pp_comm_create(&cfg, &c);
	if (ret == -ENOTSUP) {
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "--with-mpi"));
		return;
	}
	ck_assert_msg(ret == 0, "%s", pp_last_error());
	ck_assert_str_eq(pp_comm_backend(c), "mpi");
	check_world_of_one(c);
	check_iallreduce_world_of_one(c);
	/* A second communicator in the same process: MPI is started once. */
	ck_assert_int_eq(pp_comm_create(&cfg, &c2), 0);
	check_world_of_one(c2);
	pp_comm_destroy(c2);
	pp_comm_destroy(c);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("comm");
	TCase *tc = tcase_create("local");

	tcase_add_test(tc, test_local_every_call);
	tcase_add_test(tc, test_local_device_buffer);
	tcase_add_test(tc, test_auto_is_local);
	tcase_add_test(tc, test_launched);
	tcase_add_test(tc, test_argument_errors);
	tcase_add_test(tc, test_fault_fails_a_collective);
	tcase_add_test(tc, test_fault_stall_times_out);
	tcase_add_test(tc, test_iallreduce_argument_errors);
	tcase_add_test(tc, test_requests_in_the_dispatcher);
	tcase_add_test(tc, test_fault_fails_an_iallreduce);
	suite_add_tcase(s, tc);
	tc = tcase_create("mpi");
	/* MPI's singleton start takes a while on a loaded machine. */
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_mpi_world_of_one);
	suite_add_tcase(s, tc);
	return s;
}
