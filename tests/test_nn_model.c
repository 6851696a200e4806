/*
 * tests/test_nn_model.c: nn's models on the CPU: forward outputs and
 * optimizer steps against values computed by PyTorch (tests/nn_reference.py
 * -> tests/nn_reference.h), determinism whatever the seed's use and the
 * thread count, the gradient hook, subnormal numbers, the rejection of bad specs and bad
 * inputs, tensors, a model on the sim device, Flatten in place, and
 * learning Fashion-MNIST.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fenv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "common/fault.h"
#include "common/common_impl.h"
#include "pinpipe/dataset.h"
#include "device/device_impl.h"
#include "nn/cpu/cpu_impl.h"
#include "tests/nn_reference.h"
#include "tests/nn_testutil.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------ against PyTorch */

#define REF_SPEC "conv:3:3:1:1,relu,maxpool:3:2,conv:4:3:2:1,relu,flatten,fc:5,relu,fc:3"

static void ref_config(struct pp_model_config *cfg, int threads)
{
	pp_model_config_init(cfg);
	cfg->in_channels = 2;
	cfg->in_height = 9;
	cfg->in_width = 9;
	cfg->num_classes = 3;
	cfg->threads = threads;
}

static struct pp_model *ref_model(struct pp_model_config *cfg)
{
	struct pp_model *m;
	float p[REF_NPARAMS];

	ck_assert_int_eq(pp_model_create(REF_SPEC, NULL, cfg, &m), 0);
	ck_assert_uint_eq(pp_model_param_count(m), REF_NPARAMS);
	for (int i = 0; i < REF_NPARAMS; i++)
		p[i] = (float)(0.3 * sin(0.37 * i + 0.5));
	ck_assert_int_eq(pp_model_params_write(m, p, REF_NPARAMS), 0);
	return m;
}

static struct pp_tensor *ref_inputs(enum pp_dtype dtype)
{
	const size_t shape[4] = { 3, 2, 9, 9 }, n = 3 * 2 * 9 * 9;
	struct pp_tensor *t;

	ck_assert_int_eq(pp_tensor_create(NULL, dtype, 4, shape, &t), 0);
	for (size_t j = 0; j < n; j++)
		if (dtype == PP_DTYPE_F32)
			((float *)pp_tensor_data(t))[j] = (float)cos(0.11 * (double)j);
		else
			((uint8_t *)pp_tensor_data(t))[j] = (uint8_t)((37 * j + 11) % 256);
	return t;
}

static const int32_t ref_labels[3] = { 0, 2, 1 };

static void expect_params(struct pp_model *m, const float *want)
{
	float p[REF_NPARAMS];

	ck_assert_int_eq(pp_model_params_read(m, p, REF_NPARAMS), 0);
	for (int i = 0; i < REF_NPARAMS; i++)
		ck_assert_msg(fabsf(p[i] - want[i]) <= 1e-5f + 1e-4f * fabsf(want[i]),
			      "parameter %d: %.9g, PyTorch %.9g", i, (double)p[i], (double)want[i]);
}

/*
 * Fails if the forward pass (logits and mean loss) or two SGD steps with
 * momentum, weight decay and Nesterov differ from PyTorch's beyond 1e-5
 * (+1e-4 relative), with one thread and with the batch split over two.
 */
START_TEST(test_reference_sgd)
{
	for (int threads = 1; threads <= 2; threads++) {
		struct pp_model_config cfg;
		struct pp_model *m;
		struct pp_model_metrics met;
		struct pp_tensor *x = ref_inputs(PP_DTYPE_F32), *logits;
		const size_t lshape[2] = { 3, 3 };
		float z[9];

		ref_config(&cfg, threads);
		cfg.optim.kind = PP_OPTIM_SGD;
		cfg.optim.lr = 0.1f;
		cfg.optim.momentum = 0.9f;
		cfg.optim.weight_decay = 0.01f;
		cfg.optim.nesterov = true;
		m = ref_model(&cfg);
		ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 2, lshape, &logits), 0);
		ck_assert_int_eq(pp_model_evaluate(m, x, ref_labels, logits), 0);
		ck_assert_int_eq(pp_tensor_copy_to_host(logits, z, sizeof(z)), 0);
		for (int i = 0; i < 9; i++)
			ck_assert_float_eq_tol(z[i], ref_logits[i], 1e-5f);
		ck_assert_int_eq(pp_model_metrics(m, true, &met), 0);
		ck_assert_uint_eq(met.samples, 3);
		ck_assert_double_eq_tol(met.loss_sum / 3.0, ref_loss, 1e-5);
		ck_assert_int_eq(pp_model_train_step(m, x, ref_labels), 0);
		ck_assert_int_eq(pp_model_train_step(m, x, ref_labels), 0);
		ck_assert_uint_eq(pp_model_steps(m), 2);
		expect_params(m, ref_sgd_params);
		pp_tensor_destroy(logits);
		pp_tensor_destroy(x);
		pp_model_destroy(m);
	}
}
END_TEST

/* Fails if two Adam steps with weight decay on a uint8 batch (fused normalisation) differ from PyTorch's. */
START_TEST(test_reference_adam_u8)
{
	for (int threads = 1; threads <= 2; threads++) {
		struct pp_model_config cfg;
		struct pp_model *m;
		struct pp_tensor *x = ref_inputs(PP_DTYPE_U8);

		ref_config(&cfg, threads);
		cfg.mean = 0.5f;
		cfg.std = 0.25f;
		cfg.optim.lr = 0.01f;
		cfg.optim.weight_decay = 0.001f;
		m = ref_model(&cfg);
		ck_assert_int_eq(pp_model_train_step(m, x, ref_labels), 0);
		ck_assert_int_eq(pp_model_train_step(m, x, ref_labels), 0);
		expect_params(m, ref_adam_params);
		pp_tensor_destroy(x);
		pp_model_destroy(m);
	}
}
END_TEST

/*
 * Fails if two SGD steps of a network whose max-pools do not overlap (the
 * convolutions' sparse backward) differ from PyTorch's.
 */
START_TEST(test_reference_sparse_conv)
{
	struct pp_model_config cfg;
	struct pp_model *m;
	struct pp_tensor *x = ref_inputs(PP_DTYPE_F32);
	float p[REF2_NPARAMS];

	ref_config(&cfg, 2);
	cfg.optim.kind = PP_OPTIM_SGD;
	cfg.optim.lr = 0.1f;
	cfg.optim.momentum = 0.9f;
	ck_assert_int_eq(pp_model_create("conv:3:3:1:1,relu,maxpool:2,conv:4:2,relu,maxpool:2,flatten,fc:3",
					 NULL, &cfg, &m), 0);
	ck_assert(m->layers[0].sparse_dout && m->layers[3].sparse_dout);
	ck_assert_uint_eq(pp_model_param_count(m), REF2_NPARAMS);
	for (int i = 0; i < REF2_NPARAMS; i++)
		p[i] = (float)(0.3 * sin(0.37 * i + 0.5));
	ck_assert_int_eq(pp_model_params_write(m, p, REF2_NPARAMS), 0);
	ck_assert_int_eq(pp_model_train_step(m, x, ref_labels), 0);
	ck_assert_int_eq(pp_model_train_step(m, x, ref_labels), 0);
	ck_assert_int_eq(pp_model_params_read(m, p, REF2_NPARAMS), 0);
	for (int i = 0; i < REF2_NPARAMS; i++)
		ck_assert_msg(fabsf(p[i] - ref2_sgd_params[i]) <= 1e-5f + 1e-4f * fabsf(ref2_sgd_params[i]),
			      "parameter %d: %.9g, PyTorch %.9g", i, (double)p[i], (double)ref2_sgd_params[i]);
	pp_tensor_destroy(x);
	pp_model_destroy(m);
}
END_TEST

/*
 * Fails if the parameter tensors are not listed by layer with their names,
 * offsets and counts (adding up to the model's), or if the gradients read
 * are not zero before the first step and, after an SGD step without
 * momentum or decay, (parameters before - after) / lr.
 */
START_TEST(test_grads_and_param_list)
{
	static const struct { const char *name; size_t count; } want[] = {
		{ "0.conv.weight", 54 }, { "0.conv.bias", 3 }, { "3.conv.weight", 108 },
		{ "3.conv.bias", 4 }, { "6.fc.weight", 80 }, { "6.fc.bias", 5 },
		{ "8.fc.weight", 15 }, { "8.fc.bias", 3 },
	};
	struct pp_model_param list[8], two[2];
	struct pp_model_config cfg;
	struct pp_model *m;
	struct pp_tensor *x = ref_inputs(PP_DTYPE_F32);
	float before[REF_NPARAMS], after[REF_NPARAMS], g[REF_NPARAMS];
	size_t offset = 0, nonzero = 0;

	ref_config(&cfg, 2);
	cfg.optim.kind = PP_OPTIM_SGD;
	cfg.optim.lr = 0.5f;
	ck_assert_int_eq(pp_model_create(REF_SPEC, NULL, &cfg, &m), 0);
	ck_assert_uint_eq(pp_model_param_list(m, list, 8), 8);
	for (size_t i = 0; i < 8; i++) {
		ck_assert_str_eq(list[i].name, want[i].name);
		ck_assert_uint_eq(list[i].offset, offset);
		ck_assert_uint_eq(list[i].count, want[i].count);
		offset += list[i].count;
	}
	ck_assert_uint_eq(offset, pp_model_param_count(m));
	memset(two, 0, sizeof(two));
	ck_assert_uint_eq(pp_model_param_list(m, two, 1), 8);
	ck_assert_str_eq(two[0].name, "0.conv.weight");
	ck_assert_str_eq(two[1].name, ""); /* beyond max: untouched */

	ck_assert_int_eq(pp_model_grads_read(m, g, REF_NPARAMS - 1), -EINVAL);
	ck_assert_int_eq(pp_model_grads_read(m, g, REF_NPARAMS), 0);
	for (int i = 0; i < REF_NPARAMS; i++)
		ck_assert(g[i] == 0.0f);
	for (int i = 0; i < REF_NPARAMS; i++)
		before[i] = (float)(0.3 * sin(0.37 * i + 0.5));
	ck_assert_int_eq(pp_model_params_write(m, before, REF_NPARAMS), 0);
	ck_assert_int_eq(pp_model_train_step(m, x, ref_labels), 0);
	ck_assert_int_eq(pp_model_params_read(m, after, REF_NPARAMS), 0);
	ck_assert_int_eq(pp_model_grads_read(m, g, REF_NPARAMS), 0);
	for (int i = 0; i < REF_NPARAMS; i++) {
		float step = (before[i] - after[i]) / 0.5f;

		ck_assert_msg(fabsf(g[i] - step) <= 1e-6f + 1e-4f * fabsf(step),
			      "gradient %d: %.9g, the step says %.9g", i, (double)g[i], (double)step);
		nonzero += g[i] != 0.0f;
	}
	ck_assert_uint_gt(nonzero, REF_NPARAMS / 2);
	pp_tensor_destroy(x);
	pp_model_destroy(m);
}
END_TEST

/* ------------------------------------------------------------------ models */

/*
 * Fails if the same seed does not give bit-identical parameters at creation
 * and after 3 steps (2 threads), if another seed gives the same, or if the
 * initialisation leaves PyTorch's bounds +-1/sqrt(fan_in) or does not fill them.
 */
START_TEST(test_same_seed_bit_identical)
{
	struct pp_model_config cfg;
	struct pp_model *a, *b, *c;
	float *pa, *pb, *pc;
	size_t n;
	float bound = 1.0f / sqrtf(25.0f), lo = 0.0f, hi = 0.0f;

	pp_model_config_init(&cfg);
	cfg.seed = 42;
	cfg.threads = 2;
	ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &a), 0);
	ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &b), 0);
	cfg.seed = 43;
	ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &c), 0);
	n = pp_model_param_count(a);
	pa = pp_test_read_params(a);
	/* conv1: 150 weights then 6 biases, fan_in 25 */
	for (int i = 0; i < 156; i++) {
		ck_assert(fabsf(pa[i]) <= bound);
		lo = fminf(lo, pa[i]);
		hi = fmaxf(hi, pa[i]);
	}
	ck_assert(lo < -0.9f * bound && hi > 0.9f * bound);
	free(pa);
	pp_test_train(a, 3, 100);
	pp_test_train(b, 3, 100);
	pp_test_train(c, 3, 100);
	pa = pp_test_read_params(a);
	pb = pp_test_read_params(b);
	pc = pp_test_read_params(c);
	ck_assert(memcmp(pa, pb, n * sizeof(float)) == 0);
	ck_assert(memcmp(pa, pc, n * sizeof(float)) != 0);
	free(pa);
	free(pb);
	free(pc);
	pp_model_destroy(a);
	pp_model_destroy(b);
	pp_model_destroy(c);
}
END_TEST

/* What the gradient hooks of test_grad_hook saw, and what they do. */
struct hook_log {
	int calls, syncs, ticks;
	size_t n;               /* the gradient's floats */
	size_t offset, count;   /* of the last call */
	size_t next_end;        /* the end the next range must have: the ranges come from the last
				 * layer down and tile the vector, restarting at each sync */
	bool tiled;             /* every range came where next_end said */
	bool stream_null;       /* every call had no stream (the CPU backend) */
	float *seen;            /* (the vector) each range as the hook got it, or NULL */
	int fail;               /* the hook returns: 0, PP_MODEL_GRAD_KEEP, or -errno (fails) */
	int sync_fail;          /* the same, for the sync */
};

/* Halves the gradient (exact in binary): the step is SGD's with half the rate. */
static int halve_grads(void *arg, float *grads, size_t offset, size_t count, struct pp_stream *stream)
{
	struct hook_log *log = arg;

	if (count == 0) {
		/* a tick: only between ranges of a step, never before its first */
		log->ticks++;
		log->tiled &= grads == NULL && log->next_end > 0 && log->next_end < log->n &&
			      offset == log->n;
		return log->fail < 0 ? pp_error(log->fail, "hook: refused") : 0;
	}
	log->calls++;
	log->offset = offset;
	log->count = count;
	log->tiled &= count > 0 && offset + count == log->next_end;
	log->next_end = offset;
	log->stream_null &= stream == NULL;
	if (log->seen)
		memcpy(log->seen + offset, grads, count * sizeof(float));
	if (log->fail < 0)
		return pp_error(log->fail, "hook: refused");
	for (size_t i = 0; i < count; i++)
		grads[i] *= 0.5f;
	return log->fail;
}

/* Counts the step's end: every range must have come before it. */
static int sync_grads(void *arg, struct pp_stream *stream)
{
	struct hook_log *log = arg;

	log->syncs++;
	log->tiled &= log->next_end == 0;
	log->stream_null &= stream == NULL;
	log->next_end = SIZE_MAX; /* the next step's first range: set by the test */
	if (log->sync_fail < 0)
		return pp_error(log->sync_fail, "sync: refused");
	return log->sync_fail;
}

/* Fails unless m's n parameters are want's, bit for bit. */
static void assert_params(struct pp_model *m, const float *want, size_t n)
{
	float *p = pp_test_read_params(m);

	ck_assert(memcmp(want, p, n * sizeof(float)) == 0);
	free(p);
}

/* One training step of a with the hooks' log expecting the ranges of a vector of n. */
static int hooked_step(struct pp_model *a, struct hook_log *log, size_t n, uint64_t seed)
{
	struct pp_tensor *in;
	int32_t labels[16];
	int ret;

	in = pp_test_synth_batch(16, seed, labels);
	log->next_end = n;
	ret = pp_model_train_step(a, in, labels);
	pp_tensor_destroy(in);
	return ret;
}

/*
 * Fails if the gradient hook is not called once for each layer with
 * parameters, from the last down, the ranges tiling the gradient (and
 * ticks of count 0 only between them, some on one thread), each
 * whole when handed over (the values it got, halved, are the step's final
 * gradient though the other thread still finishes other layers), then
 * the sync once, before the update (SGD at lr 0.1 with the gradient halved must
 * equal SGD at 0.05 bit for bit), if a model with hooks takes graphs (a
 * replay would skip them), if a hook or sync that keeps the gradient lets
 * the step update, or if a failing hook or sync does not fail the step
 * with the parameters left unchanged.
 */
START_TEST(test_grad_hook)
{
	struct pp_model_config cfg;
	struct hook_log log = { .stream_null = true, .tiled = true };
	struct pp_model *a, *b;
	float *pa, *pb, *ga, *gb;
	size_t n;

	pp_model_config_init(&cfg);
	cfg.seed = 5;
	cfg.threads = 2;
	cfg.optim.kind = PP_OPTIM_SGD;
	cfg.optim.lr = 0.05f;
	ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &b), 0);
	cfg.optim.lr = 0.1f;
	cfg.grad_hook = halve_grads;
	cfg.grad_sync = sync_grads;
	cfg.grad_hook_arg = &log;
	ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &a), 0);
	n = pp_model_param_count(a);
	log.n = n;
	log.seen = calloc(n, sizeof(float));
	for (int i = 0; i < 3; i++) {
		struct pp_tensor *in;
		int32_t labels[16];

		ck_assert_int_eq(hooked_step(a, &log, n, 7 + (uint64_t)i), 0);
		in = pp_test_synth_batch(16, 7 + (uint64_t)i, labels);
		ck_assert_int_eq(pp_model_train_step(b, in, labels), 0);
		pp_tensor_destroy(in);
	}
	/* the cnn: 2 convolutions and 3 linear layers, 5 ranges a step, the first at 0 */
	ck_assert_int_eq(log.calls, 3 * 5);
	/* On one thread, the tasks of a layer but its last hand over nothing: ticks. */
	{
		struct pp_model *d;

		cfg.threads = 1;
		ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &d), 0);
		float *seen = log.seen;

		log.ticks = 0;
		log.seen = NULL;
		ck_assert_int_eq(hooked_step(d, &log, n, 7), 0);
		log.seen = seen;
		ck_assert_int_gt(log.ticks, 0);
		pp_model_destroy(d);
		cfg.threads = 2;
		log.calls -= 5;
		log.syncs--;
	}
	ck_assert_int_eq(log.syncs, 3);
	ck_assert(log.tiled);
	ck_assert_uint_eq(log.offset, 0);
	ck_assert(log.stream_null);
	pa = pp_test_read_params(a);
	pb = pp_test_read_params(b);
	ck_assert(memcmp(pa, pb, n * sizeof(float)) == 0);
	ga = malloc(n * sizeof(float));
	gb = malloc(n * sizeof(float));
	ck_assert_int_eq(pp_model_grads_read(a, ga, n), 0);
	ck_assert_int_eq(pp_model_grads_read(b, gb, n), 0);
	for (size_t i = 0; i < n; i++) {
		ck_assert(ga[i] == 0.5f * gb[i]);
		ck_assert(ga[i] == 0.5f * log.seen[i]);
	}
	/* Graphs asked for on a device with a stream: none, the hook runs every step. */
	{
		struct pp_model_graph_stats gs;
		struct pp_device *dev;
		struct pp_stream *s;
		struct pp_model *c;

		ck_assert_int_eq(pp_device_open("cpu", &dev), 0);
		ck_assert_int_eq(pp_stream_create(dev, &s), 0);
		cfg.stream = s;
		cfg.graph = PP_MODEL_GRAPH_ON;
		ck_assert_int_eq(pp_model_create("cnn", dev, &cfg, &c), 0);
		pp_model_get_graph_stats(c, &gs);
		ck_assert(!gs.enabled);
		log.calls = 0;
		log.syncs = 0;
		for (int i = 0; i < 3; i++)
			ck_assert_int_eq(hooked_step(c, &log, n, 7 + (uint64_t)i), 0);
		ck_assert_int_eq(log.calls, 3 * 5);
		ck_assert_int_eq(log.syncs, 3);
		ck_assert(log.tiled);
		pp_model_destroy(c);
		pp_stream_destroy(s);
		pp_device_close(dev);
	}
	/* A hook that keeps the gradient: no update, the step not counted, the gradient there. */
	log.fail = PP_MODEL_GRAD_KEEP;
	ck_assert_int_eq(hooked_step(a, &log, n, 98), 0);
	ck_assert_uint_eq(pp_model_steps(a), 3);
	assert_params(a, pa, n);
	ck_assert_int_eq(pp_model_grads_read(a, gb, n), 0);
	ck_assert(memcmp(ga, gb, n * sizeof(float)) != 0);
	/* The same from the sync alone. */
	log.fail = 0;
	log.sync_fail = PP_MODEL_GRAD_KEEP;
	ck_assert_int_eq(hooked_step(a, &log, n, 97), 0);
	ck_assert_uint_eq(pp_model_steps(a), 3);
	assert_params(a, pa, n);
	/* A hook that fails: the step fails with its error, nothing updated, no sync. */
	log.sync_fail = 0;
	log.fail = -EIO;
	log.syncs = 0;
	ck_assert_int_eq(hooked_step(a, &log, n, 99), -EIO);
	ck_assert_str_eq(pp_last_error(), "hook: refused");
	ck_assert_int_eq(log.syncs, 0);
	assert_params(a, pa, n);
	/* A sync that fails: the same. */
	log.fail = 0;
	log.sync_fail = -EPIPE;
	ck_assert_int_eq(hooked_step(a, &log, n, 96), -EPIPE);
	ck_assert_str_eq(pp_last_error(), "sync: refused");
	ck_assert_int_eq(log.syncs, 1);
	assert_params(a, pa, n);
	free(log.seen);
	free(ga);
	free(gb);
	free(pa);
	free(pb);
	pp_model_destroy(a);
	pp_model_destroy(b);
}
END_TEST

/*
 * The mlp's logits of a batch of ones made subnormal (784 x 32 x 1e-45: first
 * layer weights 1e-20, second 1e-25, biases 0), at 'threads' threads, with
 * or without keep_denormals; checks that the caller's MXCSR is the same
 * after the call, but for the exception flags.  Writes batch x 10 logits
 * to 'out'.
 */
static void subnormal_logits(int threads, bool keep, float *out, size_t batch)
{
	const size_t xshape[2] = { batch, 784 }, lshape[2] = { batch, 10 };
	struct pp_model_config cfg;
	struct pp_model *m;
	struct pp_tensor *x, *logits;
	int32_t *labels = calloc(batch, sizeof(*labels));
	float *p;
	size_t n;

	ck_assert_ptr_nonnull(labels);
	pp_model_config_init(&cfg);
	cfg.threads = threads;
	cfg.keep_denormals = keep;
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), 0);
	n = pp_model_param_count(m);
	ck_assert_uint_eq(n, 784 * 32 + 32 + 32 * 10 + 10);
	p = calloc(n, sizeof(*p));
	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < 784 * 32; i++)
		p[i] = 1e-20f;
	for (size_t i = 784 * 32 + 32; i < 784 * 32 + 32 + 320; i++)
		p[i] = 1e-25f;
	ck_assert_int_eq(pp_model_params_write(m, p, n), 0);
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 2, xshape, &x), 0);
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 2, lshape, &logits), 0);
	for (size_t i = 0; i < batch * 784; i++)
		((float *)pp_tensor_data(x))[i] = 1.0f;
#if defined(__x86_64__) || defined(__i386__)
	{
		const unsigned status = 0x3f; /* the exception flags, which the work may raise */
		const unsigned before = _mm_getcsr() & ~status;

		ck_assert_int_eq(pp_model_evaluate(m, x, labels, logits), 0);
		ck_assert_uint_eq(_mm_getcsr() & ~status, before);
	}
#else
	ck_assert_int_eq(pp_model_evaluate(m, x, labels, logits), 0);
#endif
	memcpy(out, pp_tensor_data(logits), batch * 10 * sizeof(float));
	pp_tensor_destroy(x);
	pp_tensor_destroy(logits);
	pp_model_destroy(m);
	free(p);
	free(labels);
}

/* True when setting MXCSR's FTZ and DAZ bits makes this CPU flush a subnormal product (not valgrind's). */
static bool cpu_flushes(void)
{
#if defined(__x86_64__) || defined(__i386__)
	const unsigned old = _mm_getcsr();
	volatile float a = 1e-20f, b = 1e-25f;
	float r;

	_mm_setcsr(old | 0x8040);
	r = a * b;
	_mm_setcsr(old);
	return r == 0.0f;
#else
	return false;
#endif
}

/*
 * Fails if the default does not flush subnormal results to zero in the
 * caller's thread and the model's own (a batch of 2048, whose chunks both
 * threads take), if keep_denormals does not keep them, or if a call leaves
 * the caller's floating-point environment changed.
 */
START_TEST(test_denormals)
{
	enum { BATCH = 2048 };
	static float out[BATCH * 10];
	const bool flushes = cpu_flushes();

	if (!flushes)
		fprintf(stderr, "test_denormals: this CPU (or the emulator it runs on, such as "
				"valgrind) ignores MXCSR's flush bits; flushing not checked\n");
	for (int threads = 1; threads <= 2; threads++) {
		subnormal_logits(threads, true, out, BATCH);
		for (size_t i = 0; i < BATCH * 10; i++)
			ck_assert_msg(fpclassify(out[i]) == FP_SUBNORMAL && out[i] > 2.4e-41f &&
					      out[i] < 2.6e-41f,
				      "%d threads, kept: logit %zu is %g", threads, i, (double)out[i]);
		subnormal_logits(threads, false, out, BATCH);
		for (size_t i = 0; flushes && i < BATCH * 10; i++)
			ck_assert_msg(out[i] == 0.0f, "%d threads, flushed: logit %zu is %g", threads, i,
				      (double)out[i]);
	}
}
END_TEST

/* Trains 'steps' steps of batches of 'batch', then evaluates a batch; keeps the results. */
struct thread_run {
	float *params;                    /* after training */
	size_t n_params;                  /* floats */
	struct pp_model_metrics train;    /* running totals of the training steps */
	struct pp_model_metrics eval;     /* of the evaluation alone */
	float *logits;                    /* (batch, 10) of the evaluation */
};

/* The spin of the step's threads run_with_threads() sets (pp_nn_cpu_set_spin()); -1: the model's own. */
static int64_t forced_spin_ns = -1;

static struct thread_run run_with_threads(const char *spec, size_t batch, int threads, int steps)
{
	const size_t lshape[2] = { batch, 10 };
	struct pp_model_config cfg;
	struct pp_model *m;
	struct pp_tensor *logits;
	struct thread_run r;
	int32_t *labels = malloc(batch * sizeof(*labels));

	ck_assert_ptr_nonnull(labels);
	pp_model_config_init(&cfg);
	cfg.seed = 11;
	cfg.threads = threads;
	cfg.optim.lr = 0.01f;
	ck_assert_int_eq(pp_model_create(spec, NULL, &cfg, &m), 0);
	if (forced_spin_ns >= 0)
		pp_nn_cpu_set_spin(m, (uint64_t)forced_spin_ns);
	for (int s = 0; s < steps; s++) {
		struct pp_tensor *x = pp_test_synth_batch(batch, 300 + (uint64_t)s, labels);

		ck_assert_int_eq(pp_model_train_step(m, x, labels), 0);
		pp_tensor_destroy(x);
	}
	ck_assert_int_eq(pp_model_metrics(m, true, &r.train), 0);
	ck_assert_uint_eq(r.train.samples, batch * (size_t)steps);
	r.params = pp_test_read_params(m);
	r.n_params = pp_model_param_count(m);
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 2, lshape, &logits), 0);
	{
		struct pp_tensor *x = pp_test_synth_batch(batch, 999, labels);

		ck_assert_int_eq(pp_model_evaluate(m, x, labels, logits), 0);
		pp_tensor_destroy(x);
	}
	ck_assert_int_eq(pp_model_metrics(m, true, &r.eval), 0);
	ck_assert_uint_eq(r.eval.samples, batch);
	r.logits = malloc(batch * 10 * sizeof(float));
	ck_assert_ptr_nonnull(r.logits);
	memcpy(r.logits, pp_tensor_data(logits), batch * 10 * sizeof(float));
	pp_tensor_destroy(logits);
	pp_model_destroy(m);
	free(labels);
	return r;
}

/*
 * Fails if pp_model_cpu_threads() gives more threads than cores, or fewer
 * than take a step's chunks (batch / 4, 128 at most) in as few rounds as
 * the cores would, or is not the fewest such: 2 for a batch of 100 on 2
 * cores, 13 on 16 (25 chunks in 2 rounds), 15 and 16 for a batch of 1000
 * on 15 and 16 cores.
 */
START_TEST(test_cpu_threads)
{
	ck_assert_uint_eq(pp_model_cpu_threads(100, 2), 2);
	ck_assert_uint_eq(pp_model_cpu_threads(100, 16), 13);
	ck_assert_uint_eq(pp_model_cpu_threads(100, 8), 7);
	ck_assert_uint_eq(pp_model_cpu_threads(1000, 15), 15);
	ck_assert_uint_eq(pp_model_cpu_threads(1000, 16), 16);
	ck_assert_uint_eq(pp_model_cpu_threads(3, 16), 1);
	ck_assert_uint_eq(pp_model_cpu_threads(100, 0), 1);
	for (size_t batch = 1; batch <= 2000; batch += 7)
		for (unsigned cores = 1; cores <= 64; cores++) {
			const size_t chunks = batch / 4 < 1 ? 1 : batch / 4 > 128 ? 128 : batch / 4;
			const unsigned t = pp_model_cpu_threads(batch, cores);
			const size_t rounds = (chunks + cores - 1) / cores;

			ck_assert_uint_ge(t, 1);
			ck_assert_uint_le(t, cores);
			ck_assert_uint_eq((chunks + t - 1) / t, rounds);
			ck_assert(t == 1 || (chunks + t - 2) / (t - 1) > rounds);
		}
}
END_TEST

/*
 * Fails if the thread count changes any bit of the parameters after
 * training, of the running loss and correct count, or of the evaluation's
 * logits and metrics: for the cnn (the sparse convolution backward), a
 * small conv network with padding, stride and the dense convolution
 * backward, and the mlp (no convolutions), at batch sizes that do (100,
 * 1000: the most chunks; not for the cnn) and do not (37) split evenly and
 * one smaller than a chunk (3), at 2, 3, 5, 8 and 15 threads (5 and 15
 * at 1000; more threads than chunks at the small batches).  Splitting the batch per
 * thread, or summing per-thread gradients or losses, makes the last bits
 * differ.
 */
START_TEST(test_threads_bit_identical)
{
	static const char *specs[] = { "cnn", "conv:4:3:1:1,relu,maxpool:2,conv:6:3:2,relu,fc:10", "mlp" };
	static const size_t batches[] = { 3, 37, 100, 1000 };
	static const int threads[] = { 2, 3, 5, 8, 15 };

	for (size_t k = 0; k < 3; k++)
		for (size_t b = 0; b < 4 - (k == 0); b++) { /* the cnn at 1000: minutes under valgrind */
			struct thread_run one = run_with_threads(specs[k], batches[b], 1, 3);

			/* at 1000, 5 and 15 threads only: the same under valgrind */
			for (size_t i = batches[b] == 1000 ? 2 : 0; i < 5; i += batches[b] == 1000 ? 2 : 1) {
				const int t = threads[i];
				struct thread_run r = run_with_threads(specs[k], batches[b], t, 3);

				ck_assert_uint_eq(r.n_params, one.n_params);
				ck_assert_msg(memcmp(one.params, r.params, r.n_params * sizeof(float)) == 0,
					      "%s batch %zu: parameters differ at %d threads", specs[k],
					      batches[b], t);
				ck_assert_msg(memcmp(&one.train, &r.train, sizeof(r.train)) == 0,
					      "%s batch %zu: training loss %.17g vs %.17g, correct %llu vs %llu at %d threads",
					      specs[k], batches[b], one.train.loss_sum, r.train.loss_sum,
					      (unsigned long long)one.train.correct,
					      (unsigned long long)r.train.correct, t);
				ck_assert_msg(memcmp(&one.eval, &r.eval, sizeof(r.eval)) == 0,
					      "%s batch %zu: evaluation differs at %d threads", specs[k],
					      batches[b], t);
				ck_assert(memcmp(one.logits, r.logits, batches[b] * 10 * sizeof(float)) == 0);
				free(r.params);
				free(r.logits);
			}
			free(one.params);
			free(one.logits);
		}
}
END_TEST

/*
 * Fails if the threads of a step, spinning for each next job before they
 * sleep or sleeping at once, change a bit of the results of one thread,
 * or hang (a job posted while a thread goes to sleep and never seen by it,
 * a last worker's end never seen by the caller: the test's timeout): the
 * cnn at batch 37 and the mlp at 100, at 2 and 5 threads (more than this
 * machine may have cores, where the model itself would not spin), each
 * spinning 0 (sleep at once), 2 us (a thread now spinning, now asleep when
 * a job comes) and 1 ms.
 */
START_TEST(test_threads_spin)
{
	static const char *specs[] = { "cnn", "mlp" };
	static const size_t batches[] = { 37, 100 };
	static const int64_t spins[] = { 0, 2000, 1000000 };

	for (size_t k = 0; k < 2; k++) {
		struct thread_run one;

		forced_spin_ns = -1;
		one = run_with_threads(specs[k], batches[k], 1, 3);
		for (size_t i = 0; i < 3; i++)
			for (int t = 2; t <= 5; t += 3) {
				struct thread_run r;

				forced_spin_ns = spins[i];
				r = run_with_threads(specs[k], batches[k], t, 3);
				forced_spin_ns = -1;
				ck_assert_msg(memcmp(one.params, r.params, r.n_params * sizeof(float)) == 0 &&
					      memcmp(&one.train, &r.train, sizeof(r.train)) == 0 &&
					      memcmp(one.logits, r.logits, batches[k] * 10 * sizeof(float)) == 0,
					      "%s batch %zu, %d threads spinning %lld ns: results differ",
					      specs[k], batches[k], t, (long long)spins[i]);
				free(r.params);
				free(r.logits);
			}
		free(one.params);
		free(one.logits);
	}
}
END_TEST

/* Fails if the presets' parameter counts or summaries are not those of the seeds' networks. */
START_TEST(test_presets_and_summary)
{
	struct pp_model_config cfg;
	struct pp_model *m;
	char buf[2048];
	int len;

	pp_model_config_init(&cfg);
	ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &m), 0);
	/* 6*25+6 + 12*6*25+12 + 192*120+120 + 120*60+60 + 60*10+10 */
	ck_assert_uint_eq(pp_model_param_count(m), 32998);
	ck_assert_str_eq(pp_model_spec(m),
			 "conv:6:5,relu,maxpool:2,conv:12:5,relu,maxpool:2,flatten,fc:120,relu,fc:60,relu,fc:10");
	len = pp_model_summary(m, buf, sizeof(buf));
	ck_assert_int_eq(len, (int)strlen(buf));
	ck_assert_ptr_nonnull(strstr(buf, "conv     1x28x28 -> 6x24x24 k5 s1 p0  156 params\n"));
	ck_assert_ptr_nonnull(strstr(buf, "maxpool  12x8x8 -> 12x4x4 k2 s2  0 params\n"));
	ck_assert_ptr_nonnull(strstr(buf, "fc       192x1x1 -> 120x1x1  23160 params\n"));
	ck_assert_ptr_nonnull(strstr(buf, "total 32998 params\n"));
	/* truncated output still reports the whole length */
	ck_assert_int_eq(pp_model_summary(m, buf, 10), len);
	ck_assert_uint_eq(strlen(buf), 9);
	pp_model_destroy(m);
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), 0);
	ck_assert_uint_eq(pp_model_param_count(m), 784 * 32 + 32 + 32 * 10 + 10);
	pp_model_destroy(m);
}
END_TEST

/* Fails if a bad spec or config is accepted, or rejected without naming the layer and the problem. */
START_TEST(test_bad_specs)
{
	static const struct {
		const char *spec;
		const char *msg;
	} bad[] = {
		{ "", "empty" },
		{ "conv:6", "layer 1 'conv:6': expected conv:OUT:K" },
		{ "conv:0:5,flatten,fc:10", "layer 1 'conv:0:5': expected conv:OUT:K" },
		{ "fc:10,bogus", "layer 2 'bogus': unknown layer" },
		{ "conv:6:50,flatten,fc:10", "kernel 50 does not fit the 28x28 input" },
		{ "relu:3,fc:10", "layer 1 'relu:3': takes no arguments" },
		{ "fc:x", "expected fc:OUT" },
		{ "fc:-3", "expected fc:OUT" },
		{ "fc:32,,fc:10", "empty layer" },
		{ "fc:10,", "empty layer" },
		{ "conv:1:1:1:1:1", "too many ':' fields" },
		{ "fc:7", "the last layer gives 7 outputs, expected 10 classes" },
		{ "fc:99999999999", "expected fc:OUT" },
		/* a positive integer all the same: the bound said */
		{ "fc:65536,fc:10", "expected fc:OUT with a positive integer up to 65535" },
		{ "maxpool:65536,fc:10", "up to 65535" },
		{ "flatten,conv:4:3,fc:10", "needs an image input" },
	};
	struct pp_model_config cfg;
	struct pp_model *m = NULL;

	pp_model_config_init(&cfg);
	for (size_t i = 0; i < PP_ARRAY_SIZE(bad); i++) {
		ck_assert_int_eq(pp_model_create(bad[i].spec, NULL, &cfg, &m), -EINVAL);
		ck_assert_msg(strstr(pp_last_error(), bad[i].msg), "spec '%s': message '%s'", bad[i].spec,
			      pp_last_error());
		ck_assert_ptr_null(m);
	}
	cfg.threads = 0;
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "0 threads"));
	pp_model_config_init(&cfg);
	cfg.optim.lr = -1.0f;
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "learning rate"));
	pp_model_config_init(&cfg);
	cfg.optim.kind = PP_OPTIM_SGD;
	cfg.optim.nesterov = true;
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "Nesterov"));
	ck_assert_ptr_null(m);
	/* A subnormal std (or mean) makes every input infinite; NaN is refused too. */
	for (int i = 0; i < 3; i++) {
		pp_model_config_init(&cfg);
		if (i == 0)
			cfg.std = 1e-45f;
		else if (i == 1)
			cfg.mean = 1e-45f;
		else
			cfg.mean = NAN;
		ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), -EINVAL);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "normalisation mean"));
		ck_assert_ptr_null(m);
	}
	/* A model larger than its device's memory is refused before it is
	 * allocated, saying what it needs for which input: 16.8 M parameters
	 * with Adam's state are 256 MiB, on a device of 64 MiB. */
	{
		struct pp_device *dev;

		ck_assert_int_eq(pp_device_open("sim:mem=64MiB", &dev), 0);
		pp_model_config_init(&cfg);
		cfg.in_height = cfg.in_width = 64;
		ck_assert_int_eq(pp_model_create("flatten,fc:4096,relu,fc:10", dev, &cfg, &m), -ENOMEM);
		ck_assert_msg(strstr(pp_last_error(), "on 1 x 64 x 64 inputs: its 16822282 parameters "
				     "need 0.3 GiB") != NULL &&
			      strstr(pp_last_error(), "more than the 0.1 GiB of memory of sim") != NULL,
			      "%s", pp_last_error());
		ck_assert_ptr_null(m);
		ck_assert_int_eq(pp_model_create("flatten,fc:64,relu,fc:10", dev, &cfg, &m), 0);
		pp_model_destroy(m);
		pp_device_close(dev);
	}
}
END_TEST

/*
 * Fails if inputs of the wrong shape, or an out-of-range label, are
 * accepted, or if a rejected step changes the parameters.
 */
START_TEST(test_bad_inputs)
{
	struct pp_model_config cfg;
	struct pp_model *m;
	struct pp_tensor *x, *flat;
	int32_t labels[4];
	const size_t shape[2] = { 4, 783 };
	float *before, *after;

	pp_model_config_init(&cfg);
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), 0);
	before = pp_test_read_params(m);
	x = pp_test_synth_batch(4, 1, labels);
	labels[2] = 10;
	ck_assert_int_eq(pp_model_train_step(m, x, labels), -ERANGE);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "label 10 of sample 2 is outside 0..9"));
	labels[2] = -1;
	ck_assert_int_eq(pp_model_evaluate(m, x, labels, NULL), -ERANGE);
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 2, shape, &flat), 0);
	labels[2] = 1;
	ck_assert_int_eq(pp_model_train_step(m, flat, labels), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "783 elements per sample, expected (batch, 1, 28, 28)"));
	ck_assert_int_eq(pp_model_train_step(m, x, NULL), -EINVAL);
	after = pp_test_read_params(m);
	ck_assert(memcmp(before, after, pp_model_param_count(m) * sizeof(float)) == 0);
	ck_assert_uint_eq(pp_model_steps(m), 0);
	ck_assert_int_eq(pp_model_train_step(m, x, labels), 0);
	ck_assert_uint_eq(pp_model_steps(m), 1);
	free(before);
	free(after);
	pp_tensor_destroy(flat);
	pp_tensor_destroy(x);
	pp_model_destroy(m);
}
END_TEST

/* Fails if tensor copies lose or change data, or if bad shapes and sizes are accepted. */
START_TEST(test_tensors)
{
	const size_t shape[3] = { 2, 3, 4 }, other[1] = { 24 }, zero[2] = { 2, 0 };
	struct pp_tensor *a, *b, *w;
	float src[24], dst[24];

	for (int i = 0; i < 24; i++)
		src[i] = (float)i * 0.5f - 3.0f;
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 3, shape, &a), 0);
	ck_assert_uint_eq(pp_tensor_numel(a), 24);
	ck_assert_uint_eq(pp_tensor_dim(a, 2), 4);
	ck_assert_uint_eq(pp_tensor_dim(a, 3), 0);
	ck_assert_str_eq(pp_tensor_device_name(a), "cpu");
	ck_assert_int_eq(pp_tensor_copy_from_host(a, src, sizeof(src)), 0);
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 1, other, &b), 0);
	ck_assert_int_eq(pp_tensor_copy(b, a), 0);
	ck_assert_int_eq(pp_tensor_copy_to_host(b, dst, sizeof(dst)), 0);
	ck_assert(memcmp(src, dst, sizeof(src)) == 0);
	ck_assert_int_eq(pp_tensor_copy_to_host(b, dst, 4), -EINVAL);
	ck_assert_int_eq(pp_tensor_wrap(NULL, dst, PP_DTYPE_U8, 1, other, &w), 0);
	ck_assert_int_eq(pp_tensor_copy(w, a), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "24 f32 elements on cpu into 24 u8 elements on cpu"));
	pp_tensor_destroy(w);
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 2, zero, &w), -EINVAL);
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 5, shape, &w), -EINVAL);
	ck_assert_int_eq(pp_tensor_create(NULL, (enum pp_dtype)9, 1, other, &w), -EINVAL);
	pp_tensor_destroy(NULL);
	pp_tensor_destroy(a);
	pp_tensor_destroy(b);
}
END_TEST

/* Accuracy and mean loss of 'm' on samples first..first+n-1 of 'ds', in batches of 100. */
static void evaluate_on(struct pp_model *m, const struct pp_dataset *ds, uint64_t first, size_t n,
			double *acc_p, double *loss_p)
{
	const size_t shape[4] = { 100, 1, 28, 28 };
	struct pp_tensor *x;
	struct pp_model_metrics met;
	uint64_t idx[100];
	int32_t labels[100];

	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_U8, 4, shape, &x), 0);
	ck_assert_int_eq(pp_model_metrics(m, true, &met), 0);
	for (size_t b = 0; b + 100 <= n; b += 100) {
		for (size_t k = 0; k < 100; k++)
			idx[k] = first + b + k;
		ck_assert_int_eq(pp_dataset_gather(ds, idx, 100, pp_tensor_data(x), labels), 0);
		ck_assert_int_eq(pp_model_evaluate(m, x, labels, NULL), 0);
	}
	ck_assert_int_eq(pp_model_metrics(m, true, &met), 0);
	*acc_p = (double)met.correct / (double)met.samples;
	*loss_p = met.loss_sum / (double)met.samples;
	pp_tensor_destroy(x);
}

/*
 * Fails if the cnn does not learn Fashion-MNIST: after 200 steps of Adam
 * (lr 0.01, batches of 100 of the first 20,000 training images in order,
 * uint8 through the fused normalisation) it must classify at least 75% of
 * the first 2,000 test images right and its test loss must have fallen
 * below a quarter of the untrained one (log 10 = 2.30).  PyTorch's same
 * network reaches 80 to 82% and a loss of 0.51 to 0.54 there
 * (tests/nn_fashion_mnist.py); chance is 10%.
 */
START_TEST(test_learns_fashion_mnist)
{
	const char *dir = pp_test_fashion_mnist_dir();
	const size_t shape[4] = { 100, 1, 28, 28 };
	char images[4096], labels_path[4096];
	struct pp_dataset *train_ds, *test_ds;
	struct pp_model_config cfg;
	struct pp_model *m;
	struct pp_tensor *x;
	uint64_t idx[100];
	int32_t labels[100];
	double acc0, loss0, acc, loss;

	if (!dir) {
		fprintf(stderr, "test_learns_fashion_mnist: skipped, dataset-fashion-mnist is not installed\n");
		return;
	}
	snprintf(images, sizeof(images), "%s/train-images-idx3-ubyte.gz", dir);
	snprintf(labels_path, sizeof(labels_path), "%s/train-labels-idx1-ubyte.gz", dir);
	ck_assert_int_eq(pp_dataset_open_idx(images, labels_path, &train_ds), 0);
	snprintf(images, sizeof(images), "%s/t10k-images-idx3-ubyte.gz", dir);
	snprintf(labels_path, sizeof(labels_path), "%s/t10k-labels-idx1-ubyte.gz", dir);
	ck_assert_int_eq(pp_dataset_open_idx(images, labels_path, &test_ds), 0);
	pp_model_config_init(&cfg);
	cfg.seed = 1;
	cfg.threads = 2;
	cfg.optim.lr = 0.01f;
	ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &m), 0);
	evaluate_on(m, test_ds, 0, 2000, &acc0, &loss0);
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_U8, 4, shape, &x), 0);
	for (size_t b = 0; b < 20000; b += 100) {
		for (size_t k = 0; k < 100; k++)
			idx[k] = b + k;
		ck_assert_int_eq(pp_dataset_gather(train_ds, idx, 100, pp_tensor_data(x), labels), 0);
		ck_assert_int_eq(pp_model_train_step(m, x, labels), 0);
	}
	evaluate_on(m, test_ds, 0, 2000, &acc, &loss);
	fprintf(stderr, "test_learns_fashion_mnist: test accuracy %.4f -> %.4f, loss %.4f -> %.4f\n",
		acc0, acc, loss0, loss);
	ck_assert_msg(acc >= 0.75, "test accuracy %.4f after 200 steps (expected >= 0.75)", acc);
	ck_assert_msg(loss < 0.25 * loss0, "test loss %.4f after 200 steps, %.4f before", loss, loss0);
	pp_tensor_destroy(x);
	pp_model_destroy(m);
	pp_dataset_destroy(test_ds);
	pp_dataset_destroy(train_ds);
}
END_TEST

/* ------------------------------------------------------------------ devices */

/*
 * Fails if a model on the sim device (its own memory, the CPU kernels)
 * trains differently from one on the host, if tensors do not survive a
 * round trip through sim memory, or if a host tensor handed to the sim
 * model (or a sim tensor to a host model) is not refused with both names.
 */
START_TEST(test_sim_device)
{
	struct pp_device *sim, *cpu;
	struct pp_model_config cfg;
	struct pp_model *host_model, *sim_model, *cpu_model;
	struct pp_tensor *x_host, *x_sim, *x_cpu;
	int32_t labels[16], *labels_sim;
	float *ph, *ps;
	size_t n;

	ck_assert_int_eq(pp_device_open("sim", &sim), 0);
	ck_assert_int_eq(pp_device_open("cpu", &cpu), 0);
	pp_model_config_init(&cfg);
	cfg.seed = 3;
	ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &host_model), 0);
	ck_assert_int_eq(pp_model_create("cnn", sim, &cfg, &sim_model), 0);
	ck_assert_int_eq(pp_model_create("cnn", cpu, &cfg, &cpu_model), 0);
	x_host = pp_test_synth_batch(16, 9, labels);
	ck_assert_int_eq(pp_tensor_create(sim, PP_DTYPE_U8, 4, (const size_t[]){ 16, 1, 28, 28 }, &x_sim), 0);
	ck_assert_str_eq(pp_tensor_device_name(x_sim), "sim");
	ck_assert_int_eq(pp_tensor_copy(x_sim, x_host), 0);
	ck_assert_int_eq(pp_device_alloc(sim, sizeof(labels), (void **)&labels_sim), 0);
	memcpy(labels_sim, labels, sizeof(labels));

	ck_assert_int_eq(pp_model_train_step(sim_model, x_host, labels), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "expected device sim but got cpu"));
	ck_assert_int_eq(pp_model_train_step(host_model, x_sim, labels), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "expected device cpu but got sim"));
	/* the host and the cpu device share memory: either may feed the other */
	ck_assert_int_eq(pp_tensor_wrap(cpu, pp_tensor_data(x_host), PP_DTYPE_U8, 4,
					(const size_t[]){ 16, 1, 28, 28 }, &x_cpu), 0);
	ck_assert_int_eq(pp_model_train_step(host_model, x_cpu, labels), 0);
	ck_assert_int_eq(pp_model_train_step(cpu_model, x_host, labels), 0);
	ck_assert_int_eq(pp_model_train_step(sim_model, x_sim, labels_sim), 0);

	n = pp_model_param_count(host_model);
	ph = pp_test_read_params(host_model);
	ps = pp_test_read_params(sim_model);
	ck_assert(memcmp(ph, ps, n * sizeof(float)) == 0);
	free(ps);
	ps = pp_test_read_params(cpu_model);
	ck_assert(memcmp(ph, ps, n * sizeof(float)) == 0);
	free(ph);
	free(ps);
	pp_device_free(sim, labels_sim);
	pp_tensor_destroy(x_cpu);
	pp_tensor_destroy(x_sim);
	pp_tensor_destroy(x_host);
	pp_model_destroy(cpu_model);
	pp_model_destroy(sim_model);
	pp_model_destroy(host_model);
	pp_device_close(cpu);
	pp_device_close(sim);
}
END_TEST

/*
 * Fails if a Flatten, whose output on the CPU is its input (not a copy),
 * makes a layer read the wrong activations: a model with Flattens first,
 * in the middle and last must give the same bits as the same model
 * without them, in its logits and in its parameters after two steps,
 * on uint8 and on float32 inputs.
 */
START_TEST(test_flatten_in_place)
{
	static const char *const specs[2] = { "fc:16,relu,fc:10", "flatten,fc:16,relu,flatten,fc:10,flatten" };
	int32_t labels[16];

	for (int f32 = 0; f32 < 2; f32++) {
		struct pp_tensor *u8 = pp_test_synth_batch(16, 3, labels), *x = u8;
		float *after[2], z[2][160];

		if (f32) {
			const size_t shape[4] = { 16, 1, 28, 28 };

			ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 4, shape, &x), 0);
			for (size_t i = 0; i < 16 * 784; i++)
				((float *)pp_tensor_data(x))[i] = pp_test_frand();
		}
		for (int s = 0; s < 2; s++) {
			struct pp_model_config cfg;

			pp_model_config_init(&cfg);
			cfg.seed = 5;
			after[s] = pp_test_eval_train(specs[s], NULL, &cfg, x, labels, 16, 2, z[s], NULL);
		}
		ck_assert_mem_eq(z[0], z[1], sizeof(z[0]));
		ck_assert_mem_eq(after[0], after[1], (16 * 784 + 16 + 10 * 16 + 10) * sizeof(float));
		free(after[0]);
		free(after[1]);
		if (f32)
			pp_tensor_destroy(x);
		pp_tensor_destroy(u8);
	}
}
END_TEST

/* Two device slots of 16 samples (as the transfer stage's), a partial batch and a large one. */
struct graph_bufs {
	struct pp_tensor *x[2], *partial, *large, *logits;
	int32_t *lab[2], *lab_partial, *lab_large;
};

static void graph_bufs_init(struct graph_bufs *b, struct pp_device *dev)
{
	const size_t s16[4] = { 16, 1, 28, 28 }, s8[4] = { 8, 1, 28, 28 }, s32[4] = { 32, 1, 28, 28 };
	const size_t ls[2] = { 16, 10 };

	for (int k = 0; k < 2; k++) {
		ck_assert_int_eq(pp_tensor_create(dev, PP_DTYPE_U8, 4, s16, &b->x[k]), 0);
		ck_assert_int_eq(pp_device_alloc(dev, 16 * sizeof(int32_t), (void **)&b->lab[k]), 0);
	}
	ck_assert_int_eq(pp_tensor_create(dev, PP_DTYPE_U8, 4, s8, &b->partial), 0);
	ck_assert_int_eq(pp_tensor_create(dev, PP_DTYPE_U8, 4, s32, &b->large), 0);
	ck_assert_int_eq(pp_tensor_create(dev, PP_DTYPE_F32, 2, ls, &b->logits), 0);
	ck_assert_int_eq(pp_device_alloc(dev, 8 * sizeof(int32_t), (void **)&b->lab_partial), 0);
	ck_assert_int_eq(pp_device_alloc(dev, 32 * sizeof(int32_t), (void **)&b->lab_large), 0);
}

static void graph_bufs_fini(struct graph_bufs *b, struct pp_device *dev)
{
	for (int k = 0; k < 2; k++) {
		pp_tensor_destroy(b->x[k]);
		pp_device_free(dev, b->lab[k]);
	}
	pp_tensor_destroy(b->partial);
	pp_tensor_destroy(b->large);
	pp_tensor_destroy(b->logits);
	pp_device_free(dev, b->lab_partial);
	pp_device_free(dev, b->lab_large);
}

/* Fills x (a tensor on a host-addressable device) and its labels from 'seed'. */
static void graph_fill(struct pp_tensor *x, int32_t *labels, uint64_t seed)
{
	size_t n = pp_tensor_dim(x, 0);
	int32_t host_labels[32];
	struct pp_tensor *h = pp_test_synth_batch(n, seed, host_labels);

	memcpy(pp_tensor_data(x), pp_tensor_data(h), n * 784);
	memcpy(labels, host_labels, n * sizeof(int32_t));
	pp_tensor_destroy(h);
}

/* The CNN from 'seed' on dev, its steps on 'stream', graphs as 'graph' says (two threads). */
static struct pp_model *graph_model(struct pp_device *dev, struct pp_stream *stream, uint64_t seed,
				    enum pp_model_graph graph)
{
	struct pp_model_config cfg;
	struct pp_model *m;

	pp_model_config_init(&cfg);
	cfg.seed = seed;
	cfg.threads = 2;
	cfg.stream = stream;
	cfg.graph = graph;
	ck_assert_int_eq(pp_model_create("cnn", dev, &cfg, &m), 0);
	return m;
}

/*
 * The schedule of test_graph_steps: training on two slots in turn,
 * evaluations with logits, a new learning rate, a partial batch, a larger
 * batch than any before (new buffers), each slot refilled before its step.
 * Writes the logits of the two evaluations to z (2 x 160).
 */
static void graph_schedule(struct pp_model *m, struct graph_bufs *b, float *z)
{
	uint64_t seed = 100;
	int evals = 0;

	for (int i = 0; i < 16; i++) {
		struct pp_tensor *x;
		int32_t *lab;
		int k = i % 2;
		bool eval = i == 6 || i == 7;

		if (i == 8)
			ck_assert_int_eq(pp_model_set_lr(m, 0.003f), 0);
		x = i == 12 ? b->partial : i == 13 ? b->large : b->x[k];
		lab = i == 12 ? b->lab_partial : i == 13 ? b->lab_large : b->lab[k];
		if (eval)
			x = b->x[0], lab = b->lab[0];
		graph_fill(x, lab, seed++);
		if (eval) {
			ck_assert_int_eq(pp_model_evaluate(m, x, lab, b->logits), 0);
			ck_assert_int_eq(pp_tensor_copy_to_host(b->logits, z + 160 * evals, 160 * sizeof(float)), 0);
			evals++;
		} else {
			ck_assert_msg(pp_model_train_step(m, x, lab) == 0, "step %d: %s", i, pp_last_error());
		}
	}
}

/*
 * Fails if a step launched as a graph computes anything else than the same
 * step launched op by op (parameters, logits and running totals bit for
 * bit, on cpu and on sim), if a graph outlives what it captured (a new
 * learning rate, new buffers: the CPU's recorded step keeps the settings it
 * was captured with, as a CUDA graph keeps its arguments, so a graph not
 * dropped would train with the old rate), or if the counters lie: each key
 * runs op by op when first seen, is captured the second time, launched
 * from then on.
 */
START_TEST(test_graph_steps)
{
	static const char *const names[2] = { "cpu", "sim" };
	struct pp_device *dev;
	struct pp_stream *stream;
	struct graph_bufs b;
	struct pp_model *m[2];
	struct pp_model_metrics mt[2];
	struct pp_model_graph_stats gs;
	float z[2][2 * 160], *p[2];

	ck_assert_int_eq(pp_device_open(names[_i], &dev), 0);
	ck_assert_int_eq(pp_stream_create(dev, &stream), 0);
	graph_bufs_init(&b, dev);
	for (int g = 0; g < 2; g++) {
		m[g] = graph_model(dev, stream, 11, g ? PP_MODEL_GRAPH_ON : PP_MODEL_GRAPH_OFF);
		graph_schedule(m[g], &b, z[g]);
		ck_assert_int_eq(pp_model_metrics(m[g], false, &mt[g]), 0);
		p[g] = pp_test_read_params(m[g]);
	}
	ck_assert_mem_eq(p[0], p[1], pp_model_param_count(m[0]) * sizeof(float));
	ck_assert_mem_eq(z[0], z[1], sizeof(z[0]));
	ck_assert(mt[0].loss_sum == mt[1].loss_sum);
	ck_assert_uint_eq(mt[0].correct, mt[1].correct);
	ck_assert_uint_eq(mt[0].samples, mt[1].samples);
	ck_assert_uint_eq(pp_model_steps(m[0]), pp_model_steps(m[1]));

	pp_model_get_graph_stats(m[0], &gs);
	ck_assert(!gs.enabled);
	ck_assert_uint_eq(gs.captures + gs.launches, 0);
	pp_model_get_graph_stats(m[1], &gs);
	ck_assert(gs.enabled);
	ck_assert_str_eq(gs.fallback, "");
	/* steps 0-5: two slots, each seen, captured, launched twice;
	 * 6-7: the evaluation seen, then captured; set_lr drops them all (1);
	 * 8-11: each slot seen again, then captured; 12: partial, seen;
	 * 13: larger, new buffers (drop 2), seen; 14-15: each slot seen anew. */
	ck_assert_uint_eq(gs.eager, 2 + 1 + 2 + 1 + 1 + 2);
	ck_assert_uint_eq(gs.captures, 2 + 1 + 2);
	ck_assert_uint_eq(gs.launches, 4 + 1 + 2);
	ck_assert_uint_eq(gs.drops, 2);

	for (int g = 0; g < 2; g++) {
		free(p[g]);
		pp_model_destroy(m[g]);
	}
	graph_bufs_fini(&b, dev);
	pp_stream_destroy(stream);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if a failed capture loses a step or stops training (the model must
 * go on op by op, say why once, and give the bits of a model without
 * graphs), if a bad label in a launched step is not reported as it is op by
 * op (-ERANGE, the parameters left as they were), or if graphs are allowed
 * without a stream.
 */
START_TEST(test_graph_fallback_and_errors)
{
	struct pp_device *dev;
	struct pp_stream *stream;
	struct pp_fault_plan plan;
	struct pp_model_config cfg;
	struct pp_model *m, *ref;
	struct pp_model_graph_stats gs;
	struct graph_bufs b;
	float *p, *q;
	size_t n;

	ck_assert_int_eq(pp_device_open("sim", &dev), 0);
	ck_assert_int_eq(pp_stream_create(dev, &stream), 0);
	graph_bufs_init(&b, dev);
	pp_model_config_init(&cfg);
	cfg.seed = 4;
	cfg.graph = PP_MODEL_GRAPH_ON;
	ck_assert_int_eq(pp_model_create("mlp", dev, &cfg, &m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "stream"));
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), -EINVAL);
	cfg.graph = (enum pp_model_graph)7;
	cfg.stream = stream;
	ck_assert_int_eq(pp_model_create("mlp", dev, &cfg, &m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "graph mode 7"));
	cfg.graph = PP_MODEL_GRAPH_ON;

	/* the first capture fails (as a CUDA capture that is invalidated) */
	ck_assert_int_eq(pp_fault_init(&plan), 0);
	pp_fault_arm(&plan, PP_FAULT_GRAPH, -EIO, 0, 1);
	pp_fault_set(&plan);
	ck_assert_int_eq(pp_model_create("mlp", dev, &cfg, &m), 0);
	cfg.graph = PP_MODEL_GRAPH_OFF;
	ck_assert_int_eq(pp_model_create("mlp", dev, &cfg, &ref), 0);
	for (int i = 0; i < 4; i++) {
		graph_fill(b.x[0], b.lab[0], (uint64_t)i);
		ck_assert_int_eq(pp_model_train_step(m, b.x[0], b.lab[0]), 0);
		ck_assert_int_eq(pp_model_train_step(ref, b.x[0], b.lab[0]), 0);
	}
	pp_fault_set(NULL);
	pp_fault_fini(&plan);
	pp_model_get_graph_stats(m, &gs);
	ck_assert(!gs.enabled);
	ck_assert_uint_eq(gs.captures, 0);
	ck_assert_uint_eq(gs.eager, 4);
	ck_assert_ptr_nonnull(strstr(gs.fallback, "capture failed"));
	ck_assert_ptr_nonnull(strstr(gs.fallback, "op by op"));
	n = pp_model_param_count(m);
	p = pp_test_read_params(m);
	q = pp_test_read_params(ref);
	ck_assert_mem_eq(p, q, n * sizeof(float));
	free(q);
	pp_model_destroy(ref);
	pp_model_destroy(m);

	/* a bad label in a launched step: -ERANGE, nothing changed */
	cfg.graph = PP_MODEL_GRAPH_ON;
	ck_assert_int_eq(pp_model_create("mlp", dev, &cfg, &m), 0);
	for (int i = 0; i < 3; i++) {
		graph_fill(b.x[0], b.lab[0], (uint64_t)i);
		ck_assert_int_eq(pp_model_train_step(m, b.x[0], b.lab[0]), 0);
	}
	pp_model_get_graph_stats(m, &gs);
	ck_assert_uint_eq(gs.launches, 2);
	free(p);
	p = pp_test_read_params(m);
	b.lab[0][5] = 10;
	ck_assert_int_eq(pp_model_train_step(m, b.x[0], b.lab[0]), -ERANGE);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "label"));
	q = pp_test_read_params(m);
	ck_assert_mem_eq(p, q, n * sizeof(float));
	b.lab[0][5] = 3;
	ck_assert_int_eq(pp_model_train_step(m, b.x[0], b.lab[0]), 0);
	pp_model_get_graph_stats(m, &gs);
	ck_assert_uint_eq(gs.launches, 4);
	ck_assert_int_eq(pp_model_set_lr(m, 0.0f), -EINVAL);
	ck_assert_int_eq(pp_model_set_lr(m, NAN), -EINVAL);
	free(q);
	free(p);
	pp_model_destroy(m);
	graph_bufs_fini(&b, dev);
	pp_stream_destroy(stream);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if keys seen once push captured graphs out: after a slot's step is
 * captured, twenty steps of other batch sizes (one-off keys, more than the
 * model keeps) come, and the slot's next step must still be a launch.
 */
START_TEST(test_graph_one_offs_keep_graphs)
{
	struct pp_device *dev;
	struct pp_stream *stream;
	struct pp_model_config cfg;
	struct pp_model *m;
	struct pp_model_graph_stats gs;
	struct graph_bufs b;

	ck_assert_int_eq(pp_device_open("cpu", &dev), 0);
	ck_assert_int_eq(pp_stream_create(dev, &stream), 0);
	graph_bufs_init(&b, dev);
	pp_model_config_init(&cfg);
	cfg.stream = stream;
	cfg.graph = PP_MODEL_GRAPH_ON;
	ck_assert_int_eq(pp_model_create("mlp", dev, &cfg, &m), 0);
	graph_fill(b.large, b.lab_large, 1);
	graph_fill(b.x[0], b.lab[0], 2);
	/* the largest batch first: the one-offs below need no new buffers */
	ck_assert_int_eq(pp_model_evaluate(m, b.large, b.lab_large, NULL), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pp_model_train_step(m, b.x[0], b.lab[0]), 0);
	for (size_t n = 1; n <= 20; n++) {
		struct pp_tensor *view;

		ck_assert_int_eq(pp_tensor_wrap(dev, pp_tensor_data(b.large), PP_DTYPE_U8, 4,
						(const size_t[]){ n, 1, 28, 28 }, &view), 0);
		ck_assert_int_eq(pp_model_evaluate(m, view, b.lab_large, NULL), 0);
		pp_tensor_destroy(view);
	}
	pp_model_get_graph_stats(m, &gs);
	ck_assert_uint_eq(gs.launches, 2);
	ck_assert_int_eq(pp_model_train_step(m, b.x[0], b.lab[0]), 0);
	pp_model_get_graph_stats(m, &gs);
	ck_assert_uint_eq(gs.launches, 3);
	ck_assert_uint_eq(gs.captures, 1);
	ck_assert_uint_eq(gs.eager, 1 + 1 + 20);
	ck_assert_uint_eq(gs.drops, 0);
	pp_model_destroy(m);
	graph_bufs_fini(&b, dev);
	pp_stream_destroy(stream);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if a model's threads compute in another floating-point mode than
 * its caller: with the rounding mode set upward after the models were made
 * (their threads started in the default mode), one thread and three must
 * still give the same bits, and those must differ from round-to-nearest's.
 */
START_TEST(test_threads_follow_caller_rounding)
{
	float *p[3];
	size_t n = 0;

	for (int k = 0; k < 3; k++) {
		struct pp_model_config cfg;
		struct pp_model *m;

		pp_model_config_init(&cfg);
		cfg.seed = 5;
		cfg.threads = k == 1 ? 3 : 1;
		ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &m), 0);
		if (k < 2)
			fesetround(FE_UPWARD);
		pp_test_train(m, 3, 40);
		fesetround(FE_TONEAREST);
		n = pp_model_param_count(m);
		p[k] = pp_test_read_params(m);
		pp_model_destroy(m);
	}
	ck_assert_mem_eq(p[0], p[1], n * sizeof(float));
	ck_assert(memcmp(p[0], p[2], n * sizeof(float)) != 0);
	for (int k = 0; k < 3; k++)
		free(p[k]);
}
END_TEST

/*
 * Fails (or crashes) if a step whose buffers could not all be allocated
 * leaves the model believing it has one it has not: for every point at
 * which the sim's allocations of a larger batch start failing, the step
 * fails with -ENOMEM, and a smaller step after it must train normally,
 * to the bits of a model that never failed.
 */
START_TEST(test_reserve_failure_recovers)
{
	struct pp_device *dev;
	struct graph_bufs b;
	float *ref = NULL;
	size_t n = 0;
	int ret = -ENOMEM;

	ck_assert_int_eq(pp_device_open("sim", &dev), 0);
	graph_bufs_init(&b, dev);
	graph_fill(b.large, b.lab_large, 3);
	graph_fill(b.x[0], b.lab[0], 4);
	for (long long k = -1; ret != 0; k++) {
		struct pp_model_config cfg;
		struct pp_model *m;
		float *p;

		pp_model_config_init(&cfg);
		cfg.seed = 8;
		ck_assert_int_eq(pp_model_create("conv:6:5,relu,maxpool:2,fc:10", dev, &cfg, &m), 0);
		if (k >= 0) {
			ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_ALLOC, k), 0);
			ret = pp_model_train_step(m, b.large, b.lab_large);
			ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_ALLOC, -1), 0);
			ck_assert_msg(ret == 0 || ret == -ENOMEM, "step of 32 after %lld allocations: %d", k,
				      ret);
			if (ret == 0) {
				pp_model_destroy(m);
				break;
			}
		}
		ck_assert_int_eq(pp_model_train_step(m, b.x[0], b.lab[0]), 0);
		n = pp_model_param_count(m);
		p = pp_test_read_params(m);
		if (ref == NULL)
			ref = p;
		else {
			ck_assert_mem_eq(p, ref, n * sizeof(float));
			free(p);
		}
		pp_model_destroy(m);
		ck_assert_int_lt(k, 1000);
	}
	free(ref);
	graph_bufs_fini(&b, dev);
	pp_device_close(dev);
}
END_TEST

/*
 * Fails if pp_model_prepare() changes what a caller sees (parameters, the
 * gradient, the step count, the running totals, the steps after it, which
 * must equal an unprepared model's bit for bit on sim and cpu), if it does
 * not make room for its batch (a step of that batch, or a smaller one, must
 * then allocate nothing: every allocation of the sim device fails after
 * it), if it drops the graphs where it makes no room, or if it takes a
 * batch of 0 or one too large to address.
 */
START_TEST(test_prepare)
{
	static const char *const names[2] = { "cpu", "sim" };
	struct pp_device *dev;
	struct pp_stream *stream;
	struct graph_bufs b;
	struct pp_model *m[2];
	struct pp_model_metrics mt[2];
	struct pp_model_graph_stats gs;
	float *p[2], *g[2];
	size_t n;

	ck_assert_int_eq(pp_device_open(names[_i], &dev), 0);
	ck_assert_int_eq(pp_stream_create(dev, &stream), 0);
	graph_bufs_init(&b, dev);
	for (int k = 0; k < 2; k++)
		m[k] = graph_model(dev, stream, 5, PP_MODEL_GRAPH_ON);
	n = pp_model_param_count(m[0]);

	ck_assert_int_eq(pp_model_prepare(m[1], 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "batch of 0"));
	ck_assert_int_eq(pp_model_prepare(m[1], (size_t)1 << 62), -EOVERFLOW);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "too large"));

	/* a step on each, then the second prepared for 32: nothing it shows moves */
	graph_fill(b.x[0], b.lab[0], 1);
	for (int k = 0; k < 2; k++)
		ck_assert_int_eq(pp_model_train_step(m[k], b.x[0], b.lab[0]), 0);
	p[0] = pp_test_read_params(m[1]);
	g[0] = malloc(n * sizeof(float));
	ck_assert_ptr_nonnull(g[0]);
	ck_assert_int_eq(pp_model_grads_read(m[1], g[0], n), 0);
	ck_assert_int_eq(pp_model_metrics(m[1], false, &mt[0]), 0);
	ck_assert_int_eq(pp_model_prepare(m[1], 32), 0);
	p[1] = pp_test_read_params(m[1]);
	g[1] = malloc(n * sizeof(float));
	ck_assert_ptr_nonnull(g[1]);
	ck_assert_int_eq(pp_model_grads_read(m[1], g[1], n), 0);
	ck_assert_int_eq(pp_model_metrics(m[1], false, &mt[1]), 0);
	ck_assert_mem_eq(p[0], p[1], n * sizeof(float));
	ck_assert_mem_eq(g[0], g[1], n * sizeof(float));
	ck_assert(mt[0].loss_sum == mt[1].loss_sum);
	ck_assert_uint_eq(mt[0].correct, mt[1].correct);
	ck_assert_uint_eq(mt[0].samples, mt[1].samples);
	ck_assert_uint_eq(pp_model_steps(m[1]), 1);
	for (int k = 0; k < 2; k++) {
		free(p[k]);
		free(g[k]);
	}

	/* the room is made: steps of 32 and of 16 allocate nothing (sim counts them) */
	if (_i == 1)
		ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_ALLOC, 0), 0);
	graph_fill(b.large, b.lab_large, 2);
	graph_fill(b.x[1], b.lab[1], 3);
	for (int k = 1; k >= 0; k--) {
		ck_assert_msg(pp_model_train_step(m[k], b.large, b.lab_large) == 0, "%s",
			      pp_last_error());
		ck_assert_int_eq(pp_model_train_step(m[k], b.x[1], b.lab[1]), 0);
		if (k == 1 && _i == 1)
			ck_assert_int_eq(pp_device_sim_inject(dev, PP_SIM_FAIL_ALLOC, -1), 0);
	}
	/* ...and a smaller prepare keeps the graphs: slot 1's key, seen, is captured next */
	ck_assert_int_eq(pp_model_prepare(m[1], 16), 0);
	for (int k = 0; k < 2; k++) {
		ck_assert_int_eq(pp_model_train_step(m[k], b.x[1], b.lab[1]), 0);
		ck_assert_int_eq(pp_model_metrics(m[k], false, &mt[k]), 0);
		p[k] = pp_test_read_params(m[k]);
	}
	/* one drop: prepare(32)'s new buffers */
	pp_model_get_graph_stats(m[1], &gs);
	ck_assert_uint_eq(gs.drops, 1);
	ck_assert_uint_eq(gs.captures, 1);
	ck_assert_mem_eq(p[0], p[1], n * sizeof(float));
	ck_assert(mt[0].loss_sum == mt[1].loss_sum);
	ck_assert_uint_eq(mt[0].correct, mt[1].correct);
	ck_assert_uint_eq(mt[0].samples, mt[1].samples);
	ck_assert_uint_eq(pp_model_steps(m[0]), pp_model_steps(m[1]));
	for (int k = 0; k < 2; k++) {
		free(p[k]);
		pp_model_destroy(m[k]);
	}
	graph_bufs_fini(&b, dev);
	pp_stream_destroy(stream);
	pp_device_close(dev);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("nn_model");
	TCase *ref = tcase_create("pytorch");
	TCase *model = tcase_create("model");
	TCase *learn = tcase_create("fashion-mnist");

	tcase_add_test(ref, test_reference_sgd);
	tcase_add_test(ref, test_reference_adam_u8);
	tcase_add_test(ref, test_reference_sparse_conv);
	tcase_add_test(model, test_same_seed_bit_identical);
	tcase_add_test(model, test_grads_and_param_list);
	tcase_add_test(model, test_grad_hook);
	tcase_add_test(model, test_threads_bit_identical);
	tcase_add_test(model, test_threads_spin);
	tcase_add_test(model, test_cpu_threads);
	tcase_add_test(model, test_denormals);
	tcase_add_test(model, test_presets_and_summary);
	tcase_add_test(model, test_bad_specs);
	tcase_add_test(model, test_bad_inputs);
	tcase_add_test(model, test_tensors);
	tcase_add_test(model, test_sim_device);
	tcase_add_test(model, test_flatten_in_place);
	tcase_add_loop_test(model, test_graph_steps, 0, 2);
	tcase_add_test(model, test_graph_fallback_and_errors);
	tcase_add_test(model, test_graph_one_offs_keep_graphs);
	tcase_add_test(model, test_threads_follow_caller_rounding);
	tcase_add_test(model, test_reserve_failure_recovers);
	tcase_add_loop_test(model, test_prepare, 0, 2);
	tcase_set_timeout(model, 30);
	suite_add_tcase(s, ref);
	suite_add_tcase(s, model);
	tcase_set_timeout(learn, 120);
	tcase_add_test(learn, test_learns_fashion_mnist);
	suite_add_tcase(s, learn);
	return s;
}
