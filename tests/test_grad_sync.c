/*
 * tests/test_grad_sync.c: the grad sync (pinpipe/grad_sync.h) in one
 * process, as rank 1 of a world of two whose rank 0 the test plays: a
 * local communicator given a backend of the test's own, whose allreduce
 * adds rank 0's values (known to the test) to this rank's, and whose
 * broadcast writes rank 0's parameters.  Checked: the averaged gradient is
 * the mean of both ranks' element by element; the buckets are ranges of
 * consecutive floats started as the hook hands them over once they hold
 * the bucket size; the deterministic reduction keeps each micro-batch in
 * its own slot, ends the first step without an update, and gives the sum
 * of the M slots from k = 0 up over M, bit for bit; start() makes a model's
 * parameters rank 0's; bad arguments are -EINVAL with a message; a failed
 * collective fails the hook or the sync with its error, and the next step
 * runs clean.  Several processes under mpirun: tests/comm_ranks grad and
 * tests/test_train_ddp.sh.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "device/device_impl.h"
#include "pinpipe/grad_sync.h"
#include "tests/testutil.h"

#define N 10 /* floats of the test's gradient */

/* Rank 0 as the test plays it. */
static struct {
	const float *base;       /* this rank's gradient vector, which the buckets lie in */
	float grad[N];           /* rank 0's gradient at the same floats */
	const float *peer_slots; /* deterministic: rank 0's slots, (M, n) */
	size_t slot_floats;      /* M x n */
	size_t starts[16], counts[16]; /* each allreduce of the gradient: its first float, count */
	int n;
	bool shared_slot;        /* a slot both ranks wrote to */
	const float *params;     /* broadcast: rank 0's parameters */
} peer;

static int fake_allreduce(struct pp_comm *c, void *buf, size_t count, enum pp_comm_dtype dtype,
			  enum pp_comm_op op, struct pp_stream *stream)
{
	float *f = buf;

	ck_assert_int_eq(dtype, PP_COMM_F32);
	if (op == PP_COMM_MEAN) {
		const size_t at = (size_t)(f - peer.base);

		ck_assert_uint_le(at + count, N);
		peer.starts[peer.n] = at;
		peer.counts[peer.n++] = count;
		for (size_t i = 0; i < count; i++)
			f[i] = (f[i] + peer.grad[at + i]) / 2.0f;
		return 0;
	}
	ck_assert_int_eq(op, PP_COMM_SUM);
	ck_assert_uint_eq(count, peer.slot_floats);
	for (size_t i = 0; i < count; i++) {
		peer.shared_slot |= f[i] != 0.0f && peer.peer_slots[i] != 0.0f;
		f[i] += peer.peer_slots[i];
	}
	peer.n++;
	return 0;
}

static int fake_broadcast(struct pp_comm *c, void *buf, size_t bytes, int root,
			  struct pp_stream *stream)
{
	ck_assert_int_eq(root, 0);
	memcpy(buf, peer.params, bytes);
	return 0;
}

/* A world of two, this process its rank 1; PP_FAULTS, when set, is its fault plan. */
static struct pp_comm *make_pair(void)
{
	static struct pp_comm_ops ops;
	struct pp_comm_config cfg;
	struct pp_comm *c = NULL;

	pp_comm_config_init(&cfg);
	cfg.backend = "local";
	ck_assert_msg(pp_comm_create(&cfg, &c) == 0, "%s", pp_last_error());
	ops = *c->ops;
	ops.allreduce = fake_allreduce;
	ops.broadcast = fake_broadcast;
	c->ops = &ops;
	c->rank = 1;
	c->size = 2;
	memset(&peer, 0, sizeof(peer));
	return c;
}

static struct pp_grad_sync *make_sync(struct pp_comm *c, size_t bucket_bytes, unsigned micro)
{
	struct pp_grad_sync_config gc;
	struct pp_grad_sync *gs = NULL;

	pp_grad_sync_config_init(&gc);
	gc.comm = c;
	gc.bucket_bytes = bucket_bytes;
	gc.micro_batches = micro;
	ck_assert_msg(pp_grad_sync_create(&gc, &gs) == 0, "%s", pp_last_error());
	return gs;
}

/*
 * Fails if a bucket holds floats that are not consecutive, starts before
 * it holds the bucket size (but at a gap or the sync), or if the result is
 * not the mean of both ranks' gradients at every float.
 */
START_TEST(test_buckets_average)
{
	struct pp_comm *c = make_pair();
	struct pp_grad_sync *gs = make_sync(c, 3 * sizeof(float), 0);
	struct pp_grad_sync_stats st;
	float g[N];

	for (int i = 0; i < N; i++) {
		g[i] = (float)(i + 1);
		peer.grad[i] = (float)(10 * i);
	}
	peer.base = g;
	/* The backward pass hands the layers over from the last: floats 7..9, 5..6, 2..4, 0..1. */
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 7, 7, 3, NULL), 0);
	ck_assert_int_eq(peer.n, 1); /* 3 floats: full, started */
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 5, 5, 2, NULL), 0);
	ck_assert_int_eq(pp_grad_sync_hook(gs, NULL, N, 0, NULL), 0); /* a tick */
	ck_assert_int_eq(peer.n, 1); /* 2 floats: open */
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 2, 2, 3, NULL), 0);
	ck_assert_int_eq(peer.n, 2); /* 5..6 and 2..4 together */
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 0, 0, 2, NULL), 0);
	ck_assert_int_eq(peer.n, 2);
	ck_assert_int_eq(pp_grad_sync_end(gs, NULL), 0); /* the last, open one */
	ck_assert_int_eq(peer.n, 3);
	ck_assert_uint_eq(peer.starts[0], 7);
	ck_assert_uint_eq(peer.counts[0], 3);
	ck_assert_uint_eq(peer.starts[1], 2);
	ck_assert_uint_eq(peer.counts[1], 5);
	ck_assert_uint_eq(peer.starts[2], 0);
	ck_assert_uint_eq(peer.counts[2], 2);
	for (int i = 0; i < N; i++)
		ck_assert_float_eq(g[i], ((float)(i + 1) + (float)(10 * i)) / 2.0f);
	pp_grad_sync_get_stats(gs, &st);
	ck_assert_uint_eq(st.steps, 1);
	ck_assert_uint_eq(st.allreduces, 3);
	ck_assert_uint_eq(st.bytes, N * sizeof(float));

	/* A gap between two ranges closes the bucket, whatever its size; 0: a bucket a range. */
	pp_grad_sync_destroy(gs);
	gs = make_sync(c, 1 << 20, 0);
	peer.n = 0;
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 8, 8, 2, NULL), 0);
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 3, 3, 2, NULL), 0);
	ck_assert_int_eq(peer.n, 1);
	ck_assert_int_eq(pp_grad_sync_end(gs, NULL), 0);
	ck_assert_int_eq(peer.n, 2);
	ck_assert_uint_eq(peer.starts[0], 8);
	ck_assert_uint_eq(peer.starts[1], 3);
	pp_grad_sync_destroy(gs);
	gs = make_sync(c, 0, 0);
	peer.n = 0;
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 5, 5, 5, NULL), 0);
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 0, 0, 5, NULL), 0);
	ck_assert_int_eq(peer.n, 2);
	ck_assert_int_eq(pp_grad_sync_end(gs, NULL), 0);
	ck_assert_int_eq(peer.n, 2);
	pp_grad_sync_destroy(gs);
	pp_comm_destroy(c);
}
END_TEST

/*
 * Fails if start() does not make the model's parameters rank 0's; if rank
 * 1's micro-batches are not kept in slots 1 and 3 alone (rank 0's are 0
 * and 2), if the first sync of a step updates, or if the result is not
 * (s0 + s1 + s2 + s3) / 4 added in that order, bit for bit, in this step
 * and in the next (the slots emptied between); or if a sync with no range
 * handed over since the last is not refused.
 */
START_TEST(test_deterministic_micro_batches)
{
	struct pp_comm *c = make_pair();
	struct pp_grad_sync *gs = make_sync(c, 0, 4);
	struct pp_device *dev;
	struct pp_model_config mc;
	struct pp_model *model;
	struct pp_grad_sync_stats st;
	float *params, *got, *grad, *want, *theirs, *s[4];
	size_t n, h;

	ck_assert_int_eq(pp_device_open("cpu", &dev), 0);
	pp_model_config_init(&mc);
	ck_assert_int_eq(pp_grad_sync_attach(gs, &mc), 0);
	ck_assert(mc.grad_hook == pp_grad_sync_hook && mc.grad_sync == pp_grad_sync_end);
	ck_assert_ptr_eq(mc.grad_hook_arg, gs);
	ck_assert_int_eq(pp_model_create("mlp", dev, &mc, &model), 0);
	n = pp_model_param_count(model);
	h = n / 3;
	params = malloc(n * sizeof(float));
	got = malloc(n * sizeof(float));
	grad = malloc(n * sizeof(float));
	want = malloc(n * sizeof(float));
	theirs = calloc(4 * n, sizeof(float));
	ck_assert(params && got && grad && want && theirs);
	for (size_t i = 0; i < n; i++)
		params[i] = (float)(i % 2001) / 1000.0f - 1.0f;
	peer.params = params;
	ck_assert_int_eq(pp_grad_sync_start(gs, model), 0);
	ck_assert_int_eq(pp_model_params_read(model, got, n), 0);
	ck_assert_mem_eq(got, params, n * sizeof(float));

	/* Micro-batch k's gradient s[k]: rank 0 holds slots 0 and 2, this rank 1 and 3. */
	for (int k = 0; k < 4; k++) {
		s[k] = k % 2 == 0 ? theirs + (size_t)k * n : malloc(n * sizeof(float));
		ck_assert_ptr_nonnull(s[k]);
		for (size_t i = 0; i < n; i++)
			s[k][i] = (float)(1 + k) / 3.0f + (float)(i % 97) * 1e-3f;
	}
	for (size_t i = 0; i < n; i++)
		want[i] = (((s[0][i] + s[1][i]) + s[2][i]) + s[3][i]) / 4.0f;
	peer.peer_slots = theirs;
	peer.slot_floats = 4 * n;
	for (int step = 0; step < 2; step++) {
		for (int j = 0; j < 2; j++) {
			memcpy(grad, s[1 + 2 * j], n * sizeof(float));
			/* the last layers' first: floats h..n-1, then 0..h-1 */
			ck_assert_int_eq(pp_grad_sync_hook(gs, grad + h, h, n - h, NULL), 0);
			ck_assert_int_eq(pp_grad_sync_hook(gs, grad, 0, h, NULL), 0);
			ck_assert_int_eq(pp_grad_sync_end(gs, NULL), j == 0 ? PP_MODEL_GRAD_KEEP : 0);
			/* one reduction, after the rank's last micro-batch */
			ck_assert_int_eq(peer.n, step + j);
		}
		ck_assert(!peer.shared_slot);
		ck_assert_mem_eq(grad, want, n * sizeof(float));
	}
	/* A sync with no gradient handed over since the last: refused, not a write through NULL. */
	ck_assert_int_eq(pp_grad_sync_end(gs, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "no gradient handed over by "
				     "pp_grad_sync_hook() since the last sync"));
	ck_assert_int_eq(peer.n, 2);
	free(s[1]);
	free(s[3]);
	pp_grad_sync_get_stats(gs, &st);
	ck_assert_uint_eq(st.steps, 2);
	ck_assert_uint_eq(st.allreduces, 2);
	ck_assert_uint_eq(st.bytes, 2 * 4 * n * sizeof(float));
	free(theirs);
	free(want);
	free(grad);
	free(got);
	free(params);
	pp_grad_sync_destroy(gs);
	pp_model_destroy(model);
	pp_device_close(dev);
	pp_comm_destroy(c);
}
END_TEST

/* Fails if a bad argument is not -EINVAL with a message naming it, or crashes. */
START_TEST(test_bad_arguments)
{
	struct pp_comm *c = make_pair();
	struct pp_grad_sync_config gc;
	struct pp_grad_sync *gs = NULL;
	struct pp_model_config mc;
	float g[N] = { 0 };

	pp_grad_sync_config_init(&gc);
	ck_assert_ptr_null(gc.comm);
	ck_assert_uint_eq(gc.bucket_bytes, 0);
	ck_assert_uint_eq(gc.micro_batches, 0);
	ck_assert_int_eq(pp_grad_sync_create(NULL, &gs), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "grad_sync: no config");
	ck_assert_int_eq(pp_grad_sync_create(&gc, &gs), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "grad_sync: no communicator");
	gc.comm = c;
	ck_assert_int_eq(pp_grad_sync_create(&gc, NULL), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "grad_sync: no place for the grad sync");
	gc.micro_batches = 3;
	ck_assert_int_eq(pp_grad_sync_create(&gc, &gs), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "grad_sync: 3 micro-batches are not a multiple of the 2 ranks");
	ck_assert_ptr_null(gs);
	pp_model_config_init(&mc);
	ck_assert_int_eq(pp_grad_sync_attach(NULL, &mc), -EINVAL);
	ck_assert_ptr_null(mc.grad_hook);
	ck_assert_int_eq(pp_grad_sync_start(NULL, NULL), -EINVAL);
	ck_assert_int_eq(pp_grad_sync_hook(NULL, g, 0, 1, NULL), -EINVAL);
	ck_assert_int_eq(pp_grad_sync_end(NULL, NULL), -EINVAL);
	pp_grad_sync_destroy(NULL);

	/* The deterministic reduction before start(), and a range outside the gradient. */
	gs = make_sync(c, 0, 2);
	ck_assert_int_eq(pp_grad_sync_attach(gs, NULL), -EINVAL);
	ck_assert_int_eq(pp_grad_sync_hook(gs, g, 0, 1, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "grad_sync: rank 1 of 2: the gradient hook: "
				     "floats 0..1 of a gradient of 0 (no micro-batch slots"));
	ck_assert_int_eq(pp_grad_sync_end(gs, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "pp_grad_sync_start()"));
	pp_grad_sync_destroy(gs);
	/*
	 * The deterministic reduction reads the gradient on the host: a range
	 * on the stream of a device the host cannot address (a cuda device's,
	 * played by a cpu device that says so) is refused, not read.
	 */
	{
		struct pp_device *dev;
		struct pp_stream *stream;

		ck_assert_int_eq(pp_device_open("cpu", &dev), 0);
		ck_assert_int_eq(pp_stream_create(dev, &stream), 0);
		gs = make_sync(c, 0, 2);
		dev->props.host_addressable = false;
		ck_assert_int_eq(pp_grad_sync_hook(gs, g, 0, 1, stream), -EINVAL);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "grad_sync: rank 1 of 2: the "
					     "deterministic reduction (micro_batches 2) sums the "
					     "gradient on the host: not in the memory of cpu"));
		dev->props.host_addressable = true;
		pp_grad_sync_destroy(gs);
		pp_stream_destroy(stream);
		pp_device_close(dev);
	}
	gs = make_sync(c, 0, 0);
	ck_assert_int_eq(pp_grad_sync_hook(gs, NULL, 0, 3, NULL), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "grad_sync: rank 1 of 2: the gradient hook: no gradient "
			 "for floats 0..3");
	pp_grad_sync_destroy(gs);
	pp_comm_destroy(c);
}
END_TEST

/*
 * Fails if a failed allreduce (an injected fault of the communicator) is
 * not the hook's or the sync's error, with the communicator's message, or
 * if the step after it does not average as if nothing had failed.
 */
START_TEST(test_failed_collective)
{
	struct pp_comm *c;
	struct pp_grad_sync *gs;
	struct pp_grad_sync_stats st;
	float g[N];

	/* The second collective fails, once. */
	setenv("PP_FAULTS", "comm:EIO:after=1:count=1", 1);
	c = make_pair();
	unsetenv("PP_FAULTS");
	gs = make_sync(c, 0, 0);
	for (int i = 0; i < N; i++) {
		g[i] = 2.0f;
		peer.grad[i] = 4.0f;
	}
	peer.base = g;
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 5, 5, 5, NULL), 0);
	ck_assert_int_eq(pp_grad_sync_hook(gs, g, 0, 5, NULL), -EIO);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "rank 1 of 2: iallreduce: Input/output error "
				     "(injected fault)"));
	/* The model does not call the sync of a failed step; the next step starts clean. */
	for (int i = 0; i < N; i++)
		g[i] = 2.0f;
	ck_assert_int_eq(pp_grad_sync_hook(gs, g + 5, 5, 5, NULL), 0);
	ck_assert_int_eq(pp_grad_sync_hook(gs, g, 0, 5, NULL), 0);
	ck_assert_int_eq(pp_grad_sync_end(gs, NULL), 0);
	for (int i = 0; i < N; i++)
		ck_assert_float_eq(g[i], 3.0f);
	pp_grad_sync_get_stats(gs, &st);
	ck_assert_uint_eq(st.steps, 1);
	pp_grad_sync_destroy(gs);
	pp_comm_destroy(c);

	/* A failure in the sync's own allreduce (deterministic: the slots' reduction). */
	setenv("PP_FAULTS", "comm:ENOSPC", 1);
	c = make_pair();
	unsetenv("PP_FAULTS");
	gs = make_sync(c, 0, 2);
	{
		struct pp_device *dev;
		struct pp_model_config mc;
		struct pp_model *model;
		float *grad;
		size_t n;

		ck_assert_int_eq(pp_device_open("cpu", &dev), 0);
		pp_model_config_init(&mc);
		ck_assert_int_eq(pp_model_create("mlp", dev, &mc, &model), 0);
		n = pp_model_param_count(model);
		/* start()'s broadcast is a collective too: it fails first */
		ck_assert_int_eq(pp_grad_sync_start(gs, model), -ENOSPC);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "rank 1 of 2: broadcast"));
		grad = calloc(n, sizeof(float));
		ck_assert_ptr_nonnull(grad);
		ck_assert_int_eq(pp_grad_sync_hook(gs, grad, 0, n, NULL), 0);
		ck_assert_int_eq(pp_grad_sync_end(gs, NULL), -ENOSPC);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "rank 1 of 2: allreduce"));
		pp_grad_sync_get_stats(gs, &st);
		ck_assert_uint_eq(st.steps, 0);
		free(grad);
		pp_model_destroy(model);
		pp_device_close(dev);
	}
	pp_grad_sync_destroy(gs);
	pp_comm_destroy(c);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("grad_sync");
	TCase *tc = tcase_create("pair");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_buckets_average);
	tcase_add_test(tc, test_deterministic_micro_batches);
	tcase_add_test(tc, test_bad_arguments);
	tcase_add_test(tc, test_failed_collective);
	suite_add_tcase(s, tc);
	return s;
}
