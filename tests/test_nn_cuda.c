/*
 * tests/test_nn_cuda.c: the CUDA backend of nn against the CPU one: every
 * op (each spec below exercises some: convolution with stride and padding,
 * overlapping and plain max-pools, ReLU, flatten, Linear, the loss, the
 * u8 normalisation, SGD and Adam; the last specs are single layers)
 * forward, backward and in whole training steps, compared with a
 * tolerance on cuda:0; and the kernels of nn/cuda/fused.cu one by one
 * (conv + ReLU + max-pool forward and backward, the sums, the loss)
 * against the CPU layers, each run twice for the same bits, and the small
 * GEMM kernels against their threads emulated, the ReLU and the bias
 * gradient they take and two products a launch included; and
 * pp_model_prepare() changing nothing a caller sees.  CUDA does not
 * survive fork(), so this program runs its tests without forking, and it
 * has its own main: with no usable GPU it says why and exits 77 (SKIP).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/cpu_impl.h"
#include "nn/cuda/cuda_impl.h"
#include "nn/cuda/fused.h"
#include "nn/cuda/kernels.h"
#include "nn/cuda/small_gemm.h"
#include "pinpipe/device.h"
#include "pinpipe/nn.h"
#include "tests/nn_testutil.h"
#include "tests/testutil.h"

#define BATCH 24

static const struct {
	const char *spec;
	uint32_t c, h, w;
} cases[] = {
	{ "conv:3:3:1:1,relu,maxpool:3:2,conv:4:3:2:1,relu,flatten,fc:5,relu,fc:10", 2, 9, 9 },
	{ "cnn", 1, 28, 28 },
	{ "mlp", 1, 28, 28 },
	{ "conv:5:1,relu,maxpool:2,fc:10", 3, 8, 8 },
	/* fused without a ReLU (pool stride 3 > window), then with stride 2 and padding */
	{ "conv:4:3:1:1,maxpool:2:3,conv:3:3:2:1,relu,maxpool:2,flatten,fc:10", 2, 11, 11 },
	/* single layers, to tell a faulty op from the others */
	{ "fc:10", 1, 4, 4 },
	{ "conv:10:3", 2, 3, 3 },
	{ "conv:10:3:2:1", 3, 2, 2 },
	/* Flattens first, twice, and last: no copies, the layers around them read and write through */
	{ "flatten,fc:16,relu,flatten,fc:10", 1, 4, 4 },
	{ "conv:10:3,flatten,flatten", 2, 3, 3 },
	/* ten Linear layers: their biases filled by two launches (pp_cuda_prologue() takes 8) */
	{ "fc:12,relu,fc:11,relu,fc:12,relu,fc:13,fc:12,relu,fc:12,fc:9,relu,fc:12,relu,fc:12,fc:10",
	  1, 4, 4 },
	/* ReLUs next to Linear layers, taken by their GEMMs: an input gradient past the small
	 * kernels' rule (k 300: cuBLAS, then the mask), a ReLU last, two ReLUs in a row, a ReLU
	 * after a convolution not pooled */
	{ "fc:8,relu,fc:300,relu,fc:10", 1, 4, 4 },
	{ "fc:10,relu", 1, 4, 4 },
	{ "fc:8,relu,relu,fc:10", 1, 4, 4 },
	{ "conv:3:3,relu,fc:10", 2, 5, 5 },
};

struct pair {
	struct pp_device *gpu;
	struct pp_stream *stream;
	struct pp_model *cpu_model, *gpu_model;
	struct pp_tensor *x_cpu, *x_gpu;
	int32_t labels[BATCH];
	int32_t *labels_gpu;
	size_t n;
};

/* Largest |a - b| / (1 + |b|) over n values. */
static double max_rel_diff(const float *a, const float *b, size_t n)
{
	double worst = 0.0;

	for (size_t i = 0; i < n; i++)
		worst = fmax(worst, fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i])));
	return worst;
}

static void pair_open(struct pair *p, size_t ci, enum pp_optimizer_kind opt)
{
	struct pp_model_config cfg;
	size_t shape[4] = { BATCH, cases[ci].c, cases[ci].h, cases[ci].w };
	size_t bytes = BATCH * cases[ci].c * cases[ci].h * cases[ci].w;
	float *params;

	memset(p, 0, sizeof(*p));
	ck_assert_int_eq(pp_device_open("cuda:0", &p->gpu), 0);
	ck_assert_int_eq(pp_stream_create(p->gpu, &p->stream), 0);
	pp_model_config_init(&cfg);
	cfg.in_channels = cases[ci].c;
	cfg.in_height = cases[ci].h;
	cfg.in_width = cases[ci].w;
	cfg.seed = 11;
	cfg.optim.kind = opt;
	cfg.optim.lr = opt == PP_OPTIM_SGD ? 0.05f : 0.01f;
	cfg.optim.momentum = opt == PP_OPTIM_SGD ? 0.9f : 0.0f;
	cfg.optim.nesterov = opt == PP_OPTIM_SGD;
	cfg.optim.weight_decay = 0.001f;
	/*
	 * Adam moves a parameter by about lr whatever the size of its gradient:
	 * with the default eps, a gradient of 1e-9 on one side and -1e-9 on the
	 * other (rounding) would differ by 2 lr.  A larger eps keeps tiny
	 * gradients' updates tiny, so that the comparison measures the kernels.
	 */
	cfg.optim.eps = opt == PP_OPTIM_ADAM ? 1e-3f : cfg.optim.eps;
	ck_assert_int_eq(pp_model_create(cases[ci].spec, NULL, &cfg, &p->cpu_model), 0);
	cfg.stream = p->stream;
	ck_assert_int_eq(pp_model_create(cases[ci].spec, p->gpu, &cfg, &p->gpu_model), 0);
	p->n = pp_model_param_count(p->cpu_model);
	params = malloc(p->n * sizeof(float));
	ck_assert_ptr_nonnull(params);
	ck_assert_int_eq(pp_model_params_read(p->cpu_model, params, p->n), 0);
	ck_assert_int_eq(pp_model_params_write(p->gpu_model, params, p->n), 0);
	free(params);
	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_U8, 4, shape, &p->x_cpu), 0);
	ck_assert_int_eq(pp_tensor_create(p->gpu, PP_DTYPE_U8, 4, shape, &p->x_gpu), 0);
	pp_test_fill_random(pp_tensor_data(p->x_cpu), bytes, 5 + ci);
	ck_assert_int_eq(pp_tensor_copy(p->x_gpu, p->x_cpu), 0);
	for (int i = 0; i < BATCH; i++)
		p->labels[i] = (i * 7 + 3) % 10;
	ck_assert_int_eq(pp_device_alloc(p->gpu, sizeof(p->labels), (void **)&p->labels_gpu), 0);
	ck_assert_int_eq(pp_memcpy_async(p->labels_gpu, p->labels, sizeof(p->labels), PP_COPY_H2D,
					 p->stream), 0);
	ck_assert_int_eq(pp_stream_synchronize(p->stream), 0);
}

static void pair_close(struct pair *p)
{
	pp_model_destroy(p->gpu_model);
	pp_model_destroy(p->cpu_model);
	pp_tensor_destroy(p->x_gpu);
	pp_tensor_destroy(p->x_cpu);
	pp_device_free(p->gpu, p->labels_gpu);
	pp_stream_destroy(p->stream);
	pp_device_close(p->gpu);
}

/* Fails if the GPU's logits or loss differ from the CPU's by more than 1e-4 (relative to 1 + |x|). */
START_TEST(test_forward_matches_cpu)
{
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		struct pair p;
		struct pp_tensor *lc, *lg;
		const size_t shape[2] = { BATCH, 10 };
		float zc[BATCH * 10], zg[BATCH * 10];
		struct pp_model_metrics mc, mg;

		pair_open(&p, ci, PP_OPTIM_ADAM);
		ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_F32, 2, shape, &lc), 0);
		ck_assert_int_eq(pp_tensor_create(p.gpu, PP_DTYPE_F32, 2, shape, &lg), 0);
		ck_assert_int_eq(pp_model_evaluate(p.cpu_model, p.x_cpu, p.labels, lc), 0);
		ck_assert_int_eq(pp_model_evaluate(p.gpu_model, p.x_gpu, p.labels_gpu, lg), 0);
		ck_assert_int_eq(pp_model_metrics(p.gpu_model, true, &mg), 0);
		ck_assert_int_eq(pp_model_metrics(p.cpu_model, true, &mc), 0);
		ck_assert_int_eq(pp_tensor_copy_to_host(lc, zc, sizeof(zc)), 0);
		ck_assert_int_eq(pp_tensor_copy_to_host(lg, zg, sizeof(zg)), 0);
		ck_assert_msg(max_rel_diff(zg, zc, BATCH * 10) < 1e-4, "%s: logits differ by %g",
			      cases[ci].spec, max_rel_diff(zg, zc, BATCH * 10));
		ck_assert_double_eq_tol(mg.loss_sum, mc.loss_sum, 1e-4 * BATCH);
		ck_assert_uint_eq(mg.correct, mc.correct);
		ck_assert_uint_eq(mg.samples, BATCH);
		pp_tensor_destroy(lc);
		pp_tensor_destroy(lg);
		pair_close(&p);
	}
}
END_TEST

/*
 * Fails if three training steps (forward, backward, update) on the GPU
 * leave parameters further than 1e-3 (relative to 1 + |p|) from the CPU's,
 * with SGD (momentum, Nesterov, weight decay) and with Adam.
 */
START_TEST(test_train_steps_match_cpu)
{
	for (int opt = PP_OPTIM_SGD; opt <= PP_OPTIM_ADAM; opt++)
		for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
			struct pair p;
			float *pc, *pg;

			pair_open(&p, ci, (enum pp_optimizer_kind)opt);
			for (int s = 0; s < 3; s++) {
				ck_assert_int_eq(pp_model_train_step(p.cpu_model, p.x_cpu, p.labels), 0);
				ck_assert_int_eq(pp_model_train_step(p.gpu_model, p.x_gpu, p.labels_gpu), 0);
			}
			pc = malloc(p.n * sizeof(float));
			pg = malloc(p.n * sizeof(float));
			ck_assert(pc && pg);
			ck_assert_int_eq(pp_model_params_read(p.cpu_model, pc, p.n), 0);
			ck_assert_int_eq(pp_model_params_read(p.gpu_model, pg, p.n), 0);
			ck_assert_msg(max_rel_diff(pg, pc, p.n) < 1e-3, "%s, optimizer %d: parameters differ by %g",
				      cases[ci].spec, opt, max_rel_diff(pg, pc, p.n));
			ck_assert_uint_eq(pp_model_steps(p.gpu_model), 3);
			free(pc);
			free(pg);
			pair_close(&p);
		}
}
END_TEST

/*
 * Runs steps of 24, 7 (the first samples: a partial batch, after the
 * scratch was reserved for 24) and 24 samples on the GPU model of pair
 * ci, and on the CPU model too when cpu_p is not NULL; returns the GPU's
 * parameters (malloc'd) and its loss sum.
 */
static float *run_mixed_steps(size_t ci, float **cpu_p, double *loss_p)
{
	const size_t shape[4] = { 7, cases[ci].c, cases[ci].h, cases[ci].w };
	struct pp_tensor *part_cpu, *part_gpu;
	struct pp_model_metrics mg;
	struct pair p;
	float *pg;

	pair_open(&p, ci, PP_OPTIM_ADAM);
	ck_assert_int_eq(pp_tensor_wrap(NULL, pp_tensor_data(p.x_cpu), PP_DTYPE_U8, 4, shape,
					&part_cpu), 0);
	ck_assert_int_eq(pp_tensor_wrap(p.gpu, pp_tensor_data(p.x_gpu), PP_DTYPE_U8, 4, shape,
					&part_gpu), 0);
	for (int s = 0; s < 3; s++) {
		ck_assert_int_eq(pp_model_train_step(p.gpu_model, s == 1 ? part_gpu : p.x_gpu,
						     p.labels_gpu), 0);
		if (cpu_p)
			ck_assert_int_eq(pp_model_train_step(p.cpu_model, s == 1 ? part_cpu : p.x_cpu,
							     p.labels), 0);
	}
	ck_assert_int_eq(pp_model_metrics(p.gpu_model, true, &mg), 0);
	*loss_p = mg.loss_sum;
	pg = malloc(p.n * sizeof(float));
	ck_assert_ptr_nonnull(pg);
	ck_assert_int_eq(pp_model_params_read(p.gpu_model, pg, p.n), 0);
	if (cpu_p) {
		*cpu_p = malloc(p.n * sizeof(float));
		ck_assert_ptr_nonnull(*cpu_p);
		ck_assert_int_eq(pp_model_params_read(p.cpu_model, *cpu_p, p.n), 0);
	}
	pp_tensor_destroy(part_cpu);
	pp_tensor_destroy(part_gpu);
	pair_close(&p);
	return pg;
}

/*
 * Fails if two runs of the same steps on the GPU (full, partial, full
 * batches) end with other bits in the parameters or the loss sum (a
 * reduction whose order depends on timing: float atomics), or if they
 * leave the CPU's parameters by more than 1e-3 (a partial batch reading
 * past its samples in the scratch reserved for the full one).
 */
START_TEST(test_steps_deterministic)
{
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		float *pc, *p1, *p2;
		double l1, l2;
		size_t n;
		struct pair p;

		pair_open(&p, ci, PP_OPTIM_ADAM);
		n = p.n;
		pair_close(&p);
		p1 = run_mixed_steps(ci, &pc, &l1);
		p2 = run_mixed_steps(ci, NULL, &l2);
		ck_assert_msg(memcmp(p1, p2, n * sizeof(float)) == 0, "%s: two runs differ", cases[ci].spec);
		ck_assert_msg(memcmp(&l1, &l2, sizeof(l1)) == 0, "%s: loss sums %.17g and %.17g",
			      cases[ci].spec, l1, l2);
		ck_assert_msg(max_rel_diff(p1, pc, n) < 1e-3, "%s: parameters differ from the CPU's by %g",
			      cases[ci].spec, max_rel_diff(p1, pc, n));
		free(pc);
		free(p1);
		free(p2);
	}
}
END_TEST

/* The GPU model's parameters, gradient and running totals (not reset), read into the host. */
struct gpu_state {
	float *params, *grads;
	struct pp_model_metrics mt;
	uint64_t steps;
};

static void state_read(struct pair *p, struct gpu_state *st)
{
	st->params = malloc(p->n * sizeof(float));
	st->grads = malloc(p->n * sizeof(float));
	ck_assert(st->params && st->grads);
	ck_assert_int_eq(pp_model_params_read(p->gpu_model, st->params, p->n), 0);
	ck_assert_int_eq(pp_model_grads_read(p->gpu_model, st->grads, p->n), 0);
	ck_assert_int_eq(pp_model_metrics(p->gpu_model, false, &st->mt), 0);
	st->steps = pp_model_steps(p->gpu_model);
}

static void state_expect_eq(const struct gpu_state *a, const struct gpu_state *b, size_t n,
			    const char *what)
{
	ck_assert_msg(memcmp(a->params, b->params, n * sizeof(float)) == 0, "%s: parameters", what);
	ck_assert_msg(memcmp(a->grads, b->grads, n * sizeof(float)) == 0, "%s: gradient", what);
	ck_assert_msg(memcmp(&a->mt.loss_sum, &b->mt.loss_sum, sizeof(a->mt.loss_sum)) == 0 &&
		      a->mt.correct == b->mt.correct && a->mt.samples == b->mt.samples,
		      "%s: running totals", what);
	ck_assert_msg(a->steps == b->steps, "%s: steps %llu and %llu", what,
		      (unsigned long long)a->steps, (unsigned long long)b->steps);
}

static void state_free(struct gpu_state *st)
{
	free(st->params);
	free(st->grads);
}

/* A gradient hook that counts its calls. */
static int count_hook(void *arg, float *grads, size_t offset, size_t count, struct pp_stream *s)
{
	(void)grads, (void)offset, (void)count, (void)s;
	++*(int *)arg;
	return 0;
}

/*
 * Fails if pp_model_prepare() on cuda (a training step's kernels and GEMMs
 * launched on scratch) changes what a caller sees: the parameters, the
 * gradient of the last step, the running totals or the step count, right
 * after it (preparing for a larger batch than any before, which drops the
 * graphs, then for a smaller one, which keeps them); or the bits of the
 * steps after it, graphed, against a model never prepared; or if it calls
 * the gradient hook (a third model's, which takes no graphs).
 */
START_TEST(test_prepare_changes_nothing)
{
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		struct gpu_state before, after, plain;
		struct pair p, q, h;
		struct pp_model_config cfg;
		struct pp_model_graph_stats gs;
		int calls = 0, calls_before;

		pair_open(&p, ci, PP_OPTIM_ADAM);
		pair_open(&q, ci, PP_OPTIM_ADAM);
		pair_open(&h, ci, PP_OPTIM_ADAM);
		/* h's model again, with a hook that counts its calls */
		pp_model_destroy(h.gpu_model);
		pp_model_config_init(&cfg);
		cfg.in_channels = cases[ci].c;
		cfg.in_height = cases[ci].h;
		cfg.in_width = cases[ci].w;
		cfg.stream = h.stream;
		cfg.grad_hook = count_hook;
		cfg.grad_hook_arg = &calls;
		ck_assert_int_eq(pp_model_create(cases[ci].spec, h.gpu, &cfg, &h.gpu_model), 0);
		ck_assert_int_eq(pp_model_train_step(h.gpu_model, h.x_gpu, h.labels_gpu), 0);
		calls_before = calls;
		ck_assert_int_gt(calls_before, 0);
		ck_assert_int_eq(pp_model_prepare(h.gpu_model, 2 * BATCH), 0);
		ck_assert_int_eq(calls, calls_before);

		/* two steps each: the second captured as a graph */
		for (int s = 0; s < 2; s++) {
			ck_assert_int_eq(pp_model_train_step(p.gpu_model, p.x_gpu, p.labels_gpu), 0);
			ck_assert_int_eq(pp_model_train_step(q.gpu_model, q.x_gpu, q.labels_gpu), 0);
		}
		state_read(&p, &before);
		ck_assert_msg(pp_model_prepare(p.gpu_model, 2 * BATCH) == 0, "%s: %s", cases[ci].spec,
			      pp_last_error());
		state_read(&p, &after);
		state_expect_eq(&before, &after, p.n, cases[ci].spec);
		state_free(&after);
		/* captured again at its second step after the drop, then kept by a smaller prepare */
		for (int s = 0; s < 2; s++)
			ck_assert_int_eq(pp_model_train_step(p.gpu_model, p.x_gpu, p.labels_gpu), 0);
		ck_assert_int_eq(pp_model_prepare(p.gpu_model, 7), 0);
		pp_model_get_graph_stats(p.gpu_model, &gs);
		ck_assert_msg(gs.drops == 1 && gs.captures == 2, "%s: %llu drops, %llu captures",
			      cases[ci].spec, (unsigned long long)gs.drops,
			      (unsigned long long)gs.captures);

		/* the steps after it: the bits of q's, never prepared */
		for (int s = 0; s < 2; s++)
			ck_assert_int_eq(pp_model_train_step(q.gpu_model, q.x_gpu, q.labels_gpu), 0);
		for (int s = 0; s < 2; s++) {
			ck_assert_int_eq(pp_model_train_step(p.gpu_model, p.x_gpu, p.labels_gpu), 0);
			ck_assert_int_eq(pp_model_train_step(q.gpu_model, q.x_gpu, q.labels_gpu), 0);
		}
		pp_model_get_graph_stats(p.gpu_model, &gs);
		/* launched: each capturing step and the last two, captured before prepare(7) */
		ck_assert_msg(gs.launches == 4 && gs.drops == 1, "%s: %llu launches", cases[ci].spec,
			      (unsigned long long)gs.launches);
		state_read(&p, &after);
		state_read(&q, &plain);
		state_expect_eq(&plain, &after, p.n, cases[ci].spec);
		state_free(&before);
		state_free(&after);
		state_free(&plain);
		pair_close(&p);
		pair_close(&q);
		pair_close(&h);
	}
}
END_TEST

/* Fails if a label out of range on the GPU is not reported, or inputs from the host are accepted. */
START_TEST(test_bad_label_and_device)
{
	struct pair p;
	struct pp_model_metrics m;
	int32_t bad = 10;

	pair_open(&p, 2, PP_OPTIM_ADAM);
	ck_assert_int_eq(pp_model_train_step(p.gpu_model, p.x_cpu, p.labels), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "expected device cuda:0 but got cpu"));
	ck_assert_int_eq(pp_memcpy_async(p.labels_gpu + 3, &bad, sizeof(bad), PP_COPY_H2D, p.stream), 0);
	ck_assert_int_eq(pp_model_train_step(p.gpu_model, p.x_gpu, p.labels_gpu), 0);
	ck_assert_int_eq(pp_model_metrics(p.gpu_model, true, &m), -ERANGE);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "label outside 0..9"));
	pair_close(&p);
}
END_TEST

/*
 * Fails if a step launched as a CUDA graph differs from the same step
 * launched kernel by kernel (beyond 1e-6 relative: the same kernels on the
 * same data), if a capture fails on a real GPU (the fallback must stay
 * empty: every call of a step must be capturable), if the optimizer's
 * step count frozen in a graph is used (Adam's bias correction would then
 * stay that of step 2, SGD's momentum buffer be restarted), if a new
 * learning rate does not reach a captured step, or if an evaluation
 * launched as a graph gives other logits.  Two input buffers in turn, as
 * the transfer stage's slots; SGD with momentum and Adam.
 */
START_TEST(test_graph_matches_eager)
{
	for (int opt = PP_OPTIM_SGD; opt <= PP_OPTIM_ADAM; opt++) {
		struct pair p;
		struct pp_model *graphed;
		struct pp_model_config cfg;
		struct pp_model_graph_stats gs;
		struct pp_tensor *x2, *lg[2];
		const size_t shape[4] = { BATCH, 1, 28, 28 }, lshape[2] = { BATCH, 10 };
		float *pe, *pg, ze[BATCH * 10], zg[BATCH * 10];

		pair_open(&p, 1, (enum pp_optimizer_kind)opt);
		pp_model_config_init(&cfg);
		cfg.seed = 11;
		cfg.optim.kind = (enum pp_optimizer_kind)opt;
		cfg.optim.lr = opt == PP_OPTIM_SGD ? 0.05f : 0.01f;
		cfg.optim.momentum = opt == PP_OPTIM_SGD ? 0.9f : 0.0f;
		cfg.optim.eps = 1e-3f;
		cfg.optim.weight_decay = 0.001f;
		cfg.stream = p.stream;
		cfg.graph = PP_MODEL_GRAPH_OFF;
		pp_model_destroy(p.gpu_model);
		ck_assert_int_eq(pp_model_create("cnn", p.gpu, &cfg, &p.gpu_model), 0);
		cfg.graph = PP_MODEL_GRAPH_ON;
		ck_assert_int_eq(pp_model_create("cnn", p.gpu, &cfg, &graphed), 0);
		ck_assert_int_eq(pp_tensor_create(p.gpu, PP_DTYPE_U8, 4, shape, &x2), 0);
		ck_assert_int_eq(pp_tensor_copy(x2, p.x_cpu), 0);
		for (int k = 0; k < 2; k++)
			ck_assert_int_eq(pp_tensor_create(p.gpu, PP_DTYPE_F32, 2, lshape, &lg[k]), 0);
		for (int s = 0; s < 10; s++) {
			struct pp_tensor *x = s % 2 ? x2 : p.x_gpu;

			if (s == 6) {
				ck_assert_int_eq(pp_model_set_lr(p.gpu_model, cfg.optim.lr / 5), 0);
				ck_assert_int_eq(pp_model_set_lr(graphed, cfg.optim.lr / 5), 0);
			}
			ck_assert_int_eq(pp_model_train_step(p.gpu_model, x, p.labels_gpu), 0);
			ck_assert_int_eq(pp_model_train_step(graphed, x, p.labels_gpu), 0);
		}
		/* evaluations: seen, captured, launched */
		for (int e = 0; e < 3; e++) {
			ck_assert_int_eq(pp_model_evaluate(p.gpu_model, x2, p.labels_gpu, lg[0]), 0);
			ck_assert_int_eq(pp_model_evaluate(graphed, x2, p.labels_gpu, lg[1]), 0);
		}
		ck_assert_int_eq(pp_tensor_copy_to_host(lg[0], ze, sizeof(ze)), 0);
		ck_assert_int_eq(pp_tensor_copy_to_host(lg[1], zg, sizeof(zg)), 0);
		ck_assert_msg(max_rel_diff(zg, ze, BATCH * 10) < 1e-6, "graphed logits differ by %g",
			      max_rel_diff(zg, ze, BATCH * 10));
		pe = malloc(p.n * sizeof(float));
		pg = malloc(p.n * sizeof(float));
		ck_assert(pe && pg);
		ck_assert_int_eq(pp_model_params_read(p.gpu_model, pe, p.n), 0);
		ck_assert_int_eq(pp_model_params_read(graphed, pg, p.n), 0);
		ck_assert_msg(max_rel_diff(pg, pe, p.n) < 1e-6, "optimizer %d: graphed and eager differ by %g",
			      opt, max_rel_diff(pg, pe, p.n));
		ck_assert_uint_eq(pp_model_steps(graphed), 10);
		pp_model_get_graph_stats(graphed, &gs);
		ck_assert_msg(gs.fallback[0] == '\0', "%s", gs.fallback);
		ck_assert(gs.enabled);
		/* training: two keys captured twice (before and after the new rate); evaluation once */
		ck_assert_uint_eq(gs.captures, 4 + 1);
		ck_assert_uint_eq(gs.launches, 6 + 2);
		free(pe);
		free(pg);
		pp_tensor_destroy(lg[0]);
		pp_tensor_destroy(lg[1]);
		pp_tensor_destroy(x2);
		pp_model_destroy(graphed);
		pair_close(&p);
	}
}
END_TEST

/*
 * Fails if a Flatten on the GPU, which copies neither its input forward nor
 * its gradient back, makes a layer read or write the wrong buffer: a model
 * with Flattens first, twice in a row, in the middle and last must give
 * the same bits as the same model without them, in its logits and in its
 * parameters after three steps, op by op and as graphs.
 */
START_TEST(test_flatten_through)
{
	static const char *const specs[2] = { "fc:16,relu,fc:10",
					      "flatten,fc:16,relu,flatten,flatten,fc:10,flatten" };
	struct pair p;

	pair_open(&p, 2, PP_OPTIM_ADAM);
	for (int graph = 0; graph < 2; graph++) {
		float z[2][BATCH * 10], *after[2];
		size_t n[2];

		for (int s = 0; s < 2; s++) {
			struct pp_model_config cfg;

			pp_model_config_init(&cfg);
			cfg.seed = 5;
			cfg.stream = p.stream;
			cfg.graph = graph ? PP_MODEL_GRAPH_ON : PP_MODEL_GRAPH_OFF;
			after[s] = pp_test_eval_train(specs[s], p.gpu, &cfg, p.x_gpu, p.labels_gpu, BATCH, 3,
						      z[s], &n[s]);
		}
		ck_assert_msg(memcmp(z[0], z[1], sizeof(z[0])) == 0, "graph %d: the logits differ", graph);
		ck_assert_uint_eq(n[0], n[1]);
		ck_assert_msg(memcmp(after[0], after[1], n[0] * sizeof(float)) == 0,
			      "graph %d: the parameters differ", graph);
		free(after[0]);
		free(after[1]);
	}
	pair_close(&p);
}
END_TEST

/* ------------------------------------------------------------------ the kernels one by one */

/* Device memory holding a copy of host (bytes; zeros where host is NULL), on g's stream. */
static void *dev_put(struct pp_device *gpu, struct pp_stream *st, const void *host, size_t bytes)
{
	void *d;

	ck_assert_int_eq(pp_device_alloc(gpu, bytes, &d), 0);
	if (host)
		ck_assert_int_eq(pp_memcpy_async(d, host, bytes, PP_COPY_H2D, st), 0);
	else
		ck_assert_int_eq(pp_cuda_zero(d, bytes, pp_nn_cuda_stream(st)), 0);
	ck_assert_int_eq(pp_stream_synchronize(st), 0);
	return d;
}

static void dev_get(void *host, const void *d, size_t bytes, struct pp_stream *st)
{
	ck_assert_int_eq(pp_memcpy_async(host, d, bytes, PP_COPY_D2H, st), 0);
	ck_assert_int_eq(pp_stream_synchronize(st), 0);
}

static float *host_floats(size_t n, uint64_t seed)
{
	float *p = malloc((n + 1) * sizeof(float));
	uint64_t x = seed;

	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (float)(x >> 40) / 16777216.0f * 2.0f - 1.0f;
	}
	return p;
}

static void expect_close(const char *what, const char *where, const float *want, const float *got,
			 size_t n, float tol)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(fabsf(want[i] - got[i]) <= tol * (1.0f + fabsf(want[i])),
			      "%s: %s[%zu]: %g, expected %g", where, what, i, (double)got[i],
			      (double)want[i]);
}

/*
 * Fails if the fused kernels on the GPU differ from the CPU's convolution,
 * ReLU and pool forward (the pooled output by more than 1e-5, a window's
 * maximum taken at a position whose value is not the maximum) or its
 * pooled backward (input, weight and bias gradients by more than 1e-4),
 * or if a second backward gives other bits than the first: the CNN's two
 * convolutions at batch 100 (a reduction of many parts; the tiled
 * forward and input gradient), an odd case with padding, stride 2, a pool
 * with gaps and no ReLU, batch 1 (the forward and input gradient that are
 * not tiled; the weight gradients by blocks of samples take any stride),
 * and a tiled one with padding, K = 3 and rows of 7 (a run cut short).
 */
START_TEST(test_fused_kernels_match_cpu)
{
	static const int shapes[][11] = {
		/* n, c, h, w, oc, k, stride, pad, pk, ps, relu */
		{ 100, 1, 28, 28, 6, 5, 1, 0, 2, 2, 1 },
		{ 100, 6, 12, 12, 12, 5, 1, 0, 2, 2, 1 },
		{ 1, 3, 11, 10, 5, 3, 2, 1, 2, 3, 0 },
		{ 3, 3, 9, 7, 5, 3, 1, 1, 2, 2, 1 },
	};
	struct pp_device *gpu;
	struct pp_stream *st;

	ck_assert_int_eq(pp_device_open("cuda:0", &gpu), 0);
	ck_assert_int_eq(pp_stream_create(gpu, &st), 0);
	for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); c++) {
		const int *sh = shapes[c];
		const int n = sh[0];
		struct nn_layer l = { .kind = NN_CONV, .in_c = sh[1], .in_h = sh[2], .in_w = sh[3],
				      .out_c = sh[4], .k = sh[5], .stride = sh[6], .pad = sh[7],
				      .sparse_dout = true };
		struct nn_layer pool = { .kind = NN_MAXPOOL, .in_c = sh[4], .out_c = sh[4], .k = sh[8],
					 .stride = sh[9] };
		struct pp_cuda_pool_geom g;
		size_t ins, outs, convs, red;
		float *x, *w, *b, *conv, *pooled, *col, *dcol, *dpool, *din, *dw, *db;
		float *out_g, *din_g, *dw_g, *db_g, *dw_g2, *db_g2;
		int32_t *idx, *idx_g;
		void *dx, *dwt, *dbt, *dout, *didx, *ddp, *ddin, *ddw, *ddb, *dred;

		l.out_h = (l.in_h + 2 * l.pad - l.k) / l.stride + 1;
		l.out_w = (l.in_w + 2 * l.pad - l.k) / l.stride + 1;
		l.in_size = (size_t)l.in_c * l.in_h * l.in_w;
		l.out_size = (size_t)l.out_c * l.out_h * l.out_w;
		l.n_w = (size_t)l.out_c * l.in_c * l.k * l.k;
		l.n_b = (size_t)l.out_c;
		pool.in_h = l.out_h;
		pool.in_w = l.out_w;
		pool.out_h = (l.out_h - pool.k) / pool.stride + 1;
		pool.out_w = (l.out_w - pool.k) / pool.stride + 1;
		pool.in_size = l.out_size;
		pool.out_size = (size_t)pool.out_c * pool.out_h * pool.out_w;
		g = (struct pp_cuda_pool_geom){
			.conv = { .c = l.in_c, .h = l.in_h, .w = l.in_w, .oc = l.out_c, .oh = l.out_h,
				  .ow = l.out_w, .k = l.k, .stride = l.stride, .pad = l.pad },
			.pk = pool.k, .ps = pool.stride, .ph = pool.out_h, .pw = pool.out_w,
			.relu = sh[10] != 0,
		};
		ins = (size_t)n * l.in_size;
		outs = (size_t)n * pool.out_size;
		convs = (size_t)n * l.out_size;
		red = pp_fused_param_floats(&g, n);
		x = host_floats(ins, 1 + c);
		w = host_floats(l.n_w, 2 + c);
		b = host_floats(l.n_b, 3 + c);
		dpool = host_floats(outs, 4 + c);
		conv = calloc(convs + 1, sizeof(float));
		pooled = calloc(outs + 1, sizeof(float));
		idx = calloc(outs + 1, sizeof(int32_t));
		idx_g = calloc(outs + 1, sizeof(int32_t));
		col = calloc((size_t)n * l.out_h * l.out_w * l.in_c * l.k * l.k + 1, sizeof(float));
		dcol = calloc(pp_nn_conv2d_backward_pooled_scratch(&l, &pool) + 1, sizeof(float));
		din = calloc(ins + 1, sizeof(float));
		dw = calloc(l.n_w + 1, sizeof(float));
		db = calloc(l.n_b + 1, sizeof(float));
		out_g = calloc(outs + 1, sizeof(float));
		din_g = calloc(ins + 1, sizeof(float));
		dw_g = calloc(l.n_w + 1, sizeof(float));
		db_g = calloc(l.n_b + 1, sizeof(float));
		dw_g2 = calloc(l.n_w + 1, sizeof(float));
		db_g2 = calloc(l.n_b + 1, sizeof(float));
		ck_assert(conv && pooled && idx && idx_g && col && dcol && din && dw && db && out_g &&
			  din_g && dw_g && db_g && dw_g2 && db_g2);
		for (size_t i = 0; i < outs; i += 7)
			dpool[i] = 0.0f;

		/* the CPU */
		pp_nn_conv2d_forward(&l, conv, x, w, b, col, n);
		if (g.relu)
			pp_nn_maxpool_relu_forward(&pool, pooled, idx, conv, n);
		else
			pp_nn_maxpool_forward(&pool, pooled, idx, conv, n);
		pp_nn_conv2d_backward_pooled(&l, &pool, din, dw, db, dpool, idx, g.relu ? conv : NULL, w,
					     col, dcol, n);

		/* the GPU's forward */
		dx = dev_put(gpu, st, x, ins * sizeof(float));
		dwt = dev_put(gpu, st, w, l.n_w * sizeof(float));
		dbt = dev_put(gpu, st, b, l.n_b * sizeof(float));
		dout = dev_put(gpu, st, NULL, outs * sizeof(float));
		didx = dev_put(gpu, st, NULL, outs * sizeof(int32_t));
		ck_assert_int_eq(pp_cuda_conv_pool_forward(dx, dwt, dbt, dout, didx, n, &g,
							   pp_nn_cuda_stream(st)), 0);
		dev_get(out_g, dout, outs * sizeof(float), st);
		dev_get(idx_g, didx, outs * sizeof(int32_t), st);
		expect_close("pooled output", "forward", pooled, out_g, outs, 1e-5f);
		for (size_t i = 0; i < outs; i++) {
			const float *cs = conv + i / pool.out_size * l.out_size;

			ck_assert_msg(idx_g[i] >= 0 && (size_t)idx_g[i] < l.out_size &&
					      fabsf(cs[idx_g[i]] - cs[idx[i]]) <= 1e-5f * (1.0f + fabsf(cs[idx[i]])),
				      "case %zu: output %zu: the GPU picked %d, the CPU %d", c, i, idx_g[i], idx[i]);
		}

		/* the GPU's backward, from the CPU's pool (indices and output), twice */
		ddp = dev_put(gpu, st, dpool, outs * sizeof(float));
		ddin = dev_put(gpu, st, NULL, ins * sizeof(float));
		ck_assert_int_eq(pp_memcpy_async(didx, idx, outs * sizeof(int32_t), PP_COPY_H2D, st), 0);
		ck_assert_int_eq(pp_memcpy_async(dout, pooled, outs * sizeof(float), PP_COPY_H2D, st), 0);
		for (int run = 0; run < 2; run++) {
			ddw = dev_put(gpu, st, NULL, l.n_w * sizeof(float));
			ddb = dev_put(gpu, st, NULL, l.n_b * sizeof(float));
			dred = dev_put(gpu, st, NULL, red * sizeof(float));
			ck_assert_int_eq(pp_cuda_conv_pool_backward(ddin, ddw, ddb, ddp, didx, dout, dx, dwt,
								    n, &g, dred, pp_nn_cuda_stream(st)), 0);
			dev_get(run ? dw_g2 : dw_g, ddw, l.n_w * sizeof(float), st);
			dev_get(run ? db_g2 : db_g, ddb, l.n_b * sizeof(float), st);
			pp_device_free(gpu, ddw);
			pp_device_free(gpu, ddb);
			pp_device_free(gpu, dred);
		}
		dev_get(din_g, ddin, ins * sizeof(float), st);
		expect_close("input gradient", "backward", din, din_g, ins, 1e-4f);
		expect_close("weight gradient", "backward", dw, dw_g, l.n_w, 1e-4f);
		expect_close("bias gradient", "backward", db, db_g, l.n_b, 1e-4f);
		ck_assert_mem_eq(dw_g, dw_g2, l.n_w * sizeof(float));
		ck_assert_mem_eq(db_g, db_g2, l.n_b * sizeof(float));

		pp_device_free(gpu, dx);
		pp_device_free(gpu, dwt);
		pp_device_free(gpu, dbt);
		pp_device_free(gpu, dout);
		pp_device_free(gpu, didx);
		pp_device_free(gpu, ddp);
		pp_device_free(gpu, ddin);
		free(x);
		free(w);
		free(b);
		free(dpool);
		free(conv);
		free(pooled);
		free(idx);
		free(idx_g);
		free(col);
		free(dcol);
		free(din);
		free(dw);
		free(db);
		free(out_g);
		free(din_g);
		free(dw_g);
		free(db_g);
		free(dw_g2);
		free(db_g2);
	}
	pp_stream_destroy(st);
	pp_device_close(gpu);
}
END_TEST

/*
 * Fails if the GPU's sums of d (S, J, P) differ from sums in double by
 * more than 1e-5 of the sum of magnitudes, or two runs give other bits;
 * or if the GPU's softmax cross-entropy (1, 257 and 70000 samples: one
 * block, two, more blocks than lanes) gives another loss sum, correct
 * count or gradient than the CPU's, or another loss sum in a second run.
 */
START_TEST(test_sums_and_loss_match_cpu)
{
	static const int sums[][3] = { { 1, 1, 1 }, { 100, 120, 1 }, { 1000, 6, 576 }, { 3, 2000, 5 },
				       { 5000, 10, 1 } };
	static const int xents[][2] = { { 1, 10 }, { 257, 10 }, { 70000, 10 } };
	struct pp_device *gpu;
	struct pp_stream *st;

	ck_assert_int_eq(pp_device_open("cuda:0", &gpu), 0);
	ck_assert_int_eq(pp_stream_create(gpu, &st), 0);
	for (size_t c = 0; c < sizeof(sums) / sizeof(sums[0]); c++) {
		const int s = sums[c][0], jn = sums[c][1], p = sums[c][2];
		const size_t n = (size_t)s * jn * p;
		float *d = host_floats(n, 10 + c), *got[2];
		double *want = calloc((size_t)jn, sizeof(double)), *mag = calloc((size_t)jn, sizeof(double));
		void *dd = dev_put(gpu, st, d, n * sizeof(float));
		void *red = dev_put(gpu, st, NULL, pp_red_floats(jn, (size_t)s * p) * sizeof(float));

		ck_assert(want && mag);
		for (size_t i = 0; i < n; i++) {
			want[i / p % jn] += d[i];
			mag[i / p % jn] += fabs((double)d[i]);
		}
		for (int run = 0; run < 2; run++) {
			void *out = dev_put(gpu, st, NULL, (size_t)jn * sizeof(float));

			got[run] = calloc((size_t)jn, sizeof(float));
			ck_assert_ptr_nonnull(got[run]);
			ck_assert_int_eq(pp_cuda_sum_channels(out, dd, s, jn, p, red, pp_nn_cuda_stream(st)), 0);
			dev_get(got[run], out, (size_t)jn * sizeof(float), st);
			pp_device_free(gpu, out);
		}
		for (int j = 0; j < jn; j++)
			ck_assert_msg(fabs(got[0][j] - want[j]) <= 1e-5 * (1.0 + mag[j]),
				      "sum case %zu: output %d: %g, expected %g", c, j, (double)got[0][j], want[j]);
		ck_assert_mem_eq(got[0], got[1], (size_t)jn * sizeof(float));
		pp_device_free(gpu, dd);
		pp_device_free(gpu, red);
		free(d);
		free(got[0]);
		free(got[1]);
		free(want);
		free(mag);
	}
	for (size_t c = 0; c < sizeof(xents) / sizeof(xents[0]); c++) {
		const int n = xents[c][0], k = xents[c][1];
		float *z = host_floats((size_t)n * k, 20 + c), *d1 = calloc((size_t)n * k, sizeof(float));
		float *d2 = calloc((size_t)n * k, sizeof(float));
		double *losses = calloc((size_t)n, sizeof(double)), want = 0.0;
		int32_t *labels = malloc((size_t)n * sizeof(int32_t));
		struct nn_cuda_acc acc[2];
		uint64_t right = 0;
		void *dz, *dl, *dd, *dacc, *scratch;

		ck_assert(d1 && d2 && losses && labels);
		for (int i = 0; i < n; i++)
			labels[i] = (i * 7 + 3) % k;
		ck_assert_int_eq(pp_nn_softmax_xent(z, labels, n, k, 1.0f / (float)n, d1, losses, &right), 0);
		for (int i = 0; i < n; i++)
			want += losses[i];
		dz = dev_put(gpu, st, z, (size_t)n * k * sizeof(float));
		dl = dev_put(gpu, st, labels, (size_t)n * sizeof(int32_t));
		dd = dev_put(gpu, st, NULL, (size_t)n * k * sizeof(float));
		scratch = dev_put(gpu, st, NULL, pp_xent_scratch_bytes(n));
		for (int run = 0; run < 2; run++) {
			struct nn_cuda_acc *a;

			dacc = dev_put(gpu, st, NULL, sizeof(*a));
			a = dacc;
			ck_assert_int_eq(pp_cuda_softmax_xent(dz, dl, n, k, 1.0f / (float)n, dd, &a->loss_sum,
							      &a->correct, &a->bad_label, scratch,
							      pp_nn_cuda_stream(st)), 0);
			dev_get(&acc[run], dacc, sizeof(acc[run]), st);
			pp_device_free(gpu, dacc);
		}
		dev_get(d2, dd, (size_t)n * k * sizeof(float), st);
		ck_assert_msg(fabs(acc[0].loss_sum - want) <= 1e-9 * (1.0 + fabs(want)),
			      "loss case %zu: %.17g, expected %.17g", c, acc[0].loss_sum, want);
		ck_assert_uint_eq(acc[0].correct, right);
		ck_assert_int_eq(acc[0].bad_label, 0);
		ck_assert_mem_eq(&acc[0].loss_sum, &acc[1].loss_sum, sizeof(double));
		expect_close("gradient", "loss", d1, d2, (size_t)n * k, 1e-6f);
		pp_device_free(gpu, dz);
		pp_device_free(gpu, dl);
		pp_device_free(gpu, dd);
		pp_device_free(gpu, scratch);
		free(z);
		free(d1);
		free(d2);
		free(losses);
		free(labels);
	}
	pp_stream_destroy(st);
	pp_device_close(gpu);
}
END_TEST

/* cuda:0, a stream on it and a cuBLAS handle on the stream, for the GEMM tests; and their end. */
static void *blas_open(struct pp_device **gpu_p, struct pp_stream **st_p)
{
	void *blas;

	ck_assert_int_eq(pp_device_open("cuda:0", gpu_p), 0);
	ck_assert_int_eq(pp_stream_create(*gpu_p, st_p), 0);
	ck_assert_int_eq(pp_cuda_blas_create(pp_nn_cuda_stream(*st_p), &blas), 0);
	return blas;
}

static void blas_close(struct pp_device *gpu, struct pp_stream *st, void *blas)
{
	pp_cuda_blas_destroy(blas);
	pp_stream_destroy(st);
	pp_device_close(gpu);
}

/*
 * pp_cuda_sgemm()'s small kernels (nn/cuda/small_gemm.h) against their
 * threads emulated on the CPU (pp_test_small_gemm()), bit for bit, twice,
 * on pp_test_gemm_cases (the MLP's GEMMs at batch 100, odd shapes; beta 0
 * on C of NaN); and a product past the rule (cuBLAS's) against the
 * emulation within a tolerance, C's padding left as it was.
 */
START_TEST(test_small_gemm_kernels)
{
	/* past the rule: cuBLAS's */
	static const struct pp_test_gemm_case cublas_case = { true, false, 32, 1000, 784, 1, 1.0f };
	struct pp_device *gpu;
	struct pp_stream *st;
	void *blas = blas_open(&gpu, &st);
	for (size_t c = 0; c <= pp_test_gemm_ncases; c++) {
		const struct pp_test_gemm_case *t =
			c < pp_test_gemm_ncases ? &pp_test_gemm_cases[c] : &cublas_case;
		size_t na, nb, nc;
		struct pp_cuda_gemm g = pp_test_gemm_of(t, NULL, NULL, NULL, &na, &nb, &nc);
		const int m = g.m, ldc = g.ldc;
		float *a = host_floats(na, 50 + c), *b = host_floats(nb, 60 + c), *c0 = host_floats(nc, 70 + c);
		float *want = malloc(nc * sizeof(float)), *got[2];
		bool fits;
		void *da = dev_put(gpu, st, a, na * sizeof(float)), *db = dev_put(gpu, st, b, nb * sizeof(float));

		ck_assert_ptr_nonnull(want);
		g.a = a;
		g.b = b;
		g.c = want;
		fits = pp_small_gemm_fits(&g);
		ck_assert_msg(fits == (t != &cublas_case), "case %zu: the rule", c);
		for (size_t e = 0; e < nc; e++)
			if (t->beta == 0.0f)
				c0[e] = NAN;
		memcpy(want, c0, nc * sizeof(float));
		pp_test_small_gemm(&g);
		for (int run = 0; run < 2; run++) {
			void *dc = dev_put(gpu, st, c0, nc * sizeof(float));
			struct pp_cuda_gemm dg = g;

			dg.a = da;
			dg.b = db;
			dg.c = dc;
			got[run] = malloc(nc * sizeof(float));
			ck_assert_ptr_nonnull(got[run]);
			ck_assert_int_eq(pp_cuda_sgemm(blas, &dg), 0);
			dev_get(got[run], dc, nc * sizeof(float), st);
			pp_device_free(gpu, dc);
		}
		if (fits) {
			ck_assert_msg(memcmp(got[0], want, nc * sizeof(float)) == 0,
				      "case %zu: the kernel's bits differ from its threads emulated", c);
			ck_assert_mem_eq(got[0], got[1], nc * sizeof(float));
		} else {
			for (size_t e = 0; e < nc; e++)
				ck_assert_msg(e % ldc >= (size_t)m ? got[0][e] == c0[e]
								   : fabsf(got[0][e] - want[e]) <= 1e-3f,
					      "case %zu: cuBLAS's C[%zu] = %g, emulated %g", c, e,
					      (double)got[0][e], (double)want[e]);
		}
		pp_device_free(gpu, da);
		pp_device_free(gpu, db);
		free(a);
		free(b);
		free(c0);
		free(want);
		free(got[0]);
		free(got[1]);
	}
	blas_close(gpu, st, blas);
}
END_TEST

/*
 * The ReLU taken with a GEMM (struct pp_cuda_gemm's relu and mask) on the
 * GPU: by the small kernels, bit for bit against their threads emulated;
 * after cuBLAS (a product past the rule), by the ReLU's kernels: C zero
 * where the mask is not > 0, the ReLU's output exactly max(C, 0) of the C
 * written, C within a tolerance of the emulation.  And refused, naming
 * why, where C is not contiguous.
 */
START_TEST(test_gemm_relu_kernels)
{
	/* the MLP's forward and input gradient at batch 100 (small), then past the rule */
	static const struct pp_test_gemm_case gemms[] = {
		{ true, false, 32, 100, 784, 0, 1.0f }, { false, false, 32, 100, 10, 0, 0.0f },
		{ true, false, 32, 1000, 784, 0, 1.0f }, { false, false, 300, 1000, 60, 0, 0.0f },
	};
	struct pp_device *gpu;
	struct pp_stream *st;
	void *blas = blas_open(&gpu, &st);
	for (size_t c = 0; c < sizeof(gemms) / sizeof(gemms[0]); c++) {
		const struct pp_test_gemm_case *t = &gemms[c];
		size_t na, nb, nc;
		struct pp_cuda_gemm g = pp_test_gemm_of(t, NULL, NULL, NULL, &na, &nb, &nc);
		float *a = host_floats(na, 80 + c), *b = host_floats(nb, 90 + c);
		float *c0 = host_floats(nc, 100 + c), *mask = host_floats(nc, 110 + c);
		float *want = malloc(nc * sizeof(float)), *wrelu = malloc(nc * sizeof(float));
		float *got = malloc(nc * sizeof(float)), *grelu = malloc(nc * sizeof(float));
		void *da = dev_put(gpu, st, a, na * sizeof(float)), *db = dev_put(gpu, st, b, nb * sizeof(float));
		void *dm = dev_put(gpu, st, mask, nc * sizeof(float));
		const bool fits = c < 2;

		ck_assert(want && wrelu && got && grelu);
		g.a = a;
		g.b = b;
		ck_assert_msg(pp_small_gemm_fits(&g) == fits, "case %zu: the rule", c);
		for (int kind = 0; kind < 2; kind++) {
			void *dc = dev_put(gpu, st, c0, nc * sizeof(float));
			void *dr = dev_put(gpu, st, NULL, nc * sizeof(float));
			struct pp_cuda_gemm dg = g;

			/* kind 0: the ReLU's forward after the product; 1: its backward on it */
			memcpy(want, c0, nc * sizeof(float));
			g.c = want;
			g.relu = kind == 0 ? wrelu : NULL;
			g.mask = kind == 1 ? mask : NULL;
			pp_test_small_gemm(&g);
			dg.a = da;
			dg.b = db;
			dg.c = dc;
			dg.relu = kind == 0 ? dr : NULL;
			dg.mask = kind == 1 ? dm : NULL;
			ck_assert_msg(pp_cuda_sgemm(blas, &dg) == 0, "case %zu: %s", c, pp_last_error());
			dev_get(got, dc, nc * sizeof(float), st);
			if (kind == 0)
				dev_get(grelu, dr, nc * sizeof(float), st);
			for (size_t e = 0; e < nc; e++) {
				if (fits)
					ck_assert_msg(memcmp(&got[e], &want[e], sizeof(float)) == 0 &&
						      (kind == 1 || memcmp(&grelu[e], &wrelu[e], sizeof(float)) == 0),
						      "case %zu, kind %d: C[%zu] %g / %g, emulated %g / %g", c,
						      kind, e, (double)got[e], (double)grelu[e], (double)want[e],
						      (double)wrelu[e]);
				else
					ck_assert_msg(fabsf(got[e] - want[e]) <= 1e-3f &&
						      (kind == 0 ? grelu[e] == (got[e] > 0.0f ? got[e] : 0.0f)
								 : mask[e] > 0.0f || got[e] == 0.0f),
						      "case %zu, kind %d: C[%zu] %g / %g, emulated %g", c, kind,
						      e, (double)got[e], (double)grelu[e], (double)want[e]);
			}
			g.relu = NULL;
			g.mask = NULL;
			pp_device_free(gpu, dc);
			pp_device_free(gpu, dr);
		}
		/* C with a leading dimension past its rows: refused */
		{
			struct pp_cuda_gemm dg = g;

			dg.a = da;
			dg.b = db;
			dg.c = dm;
			dg.ldc = g.m + 1;
			dg.n = 1;
			dg.relu = dm;
			ck_assert_int_eq(pp_cuda_sgemm(blas, &dg), -EINVAL);
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "contiguous"));
		}
		pp_device_free(gpu, da);
		pp_device_free(gpu, db);
		pp_device_free(gpu, dm);
		free(a);
		free(b);
		free(c0);
		free(mask);
		free(want);
		free(wrelu);
		free(got);
		free(grelu);
	}
	blas_close(gpu, st, blas);
}
END_TEST

/*
 * The bias's row of the untransposed small kernel on the GPU (struct
 * pp_cuda_gemm's bias, the sums of op(B)'s columns), on the cases of
 * pp_test_gemm_cases with op(A) untransposed: C and the sums bit for bit
 * against the threads emulated, twice.  And refused, naming why, with
 * op(A) transposed and for a product the small kernels do not take.
 */
START_TEST(test_gemm_bias_kernels)
{
	static const struct pp_test_gemm_case refused[] = {
		{ true, false, 32, 100, 784, 0, 1.0f }, { false, true, 32, 10, 1000, 0, 1.0f },
	};
	struct pp_device *gpu;
	struct pp_stream *st;
	void *blas = blas_open(&gpu, &st);
	for (size_t c = 0; c < pp_test_gemm_ncases + 2; c++) {
		const struct pp_test_gemm_case *t =
			c < pp_test_gemm_ncases ? &pp_test_gemm_cases[c] : &refused[c - pp_test_gemm_ncases];
		size_t na, nb, nc;
		struct pp_cuda_gemm g = pp_test_gemm_of(t, NULL, NULL, NULL, &na, &nb, &nc);
		const size_t nbias = (size_t)g.n;
		float *a, *b, *c0, *b0, *want, *wbias;
		void *da, *db;

		if (t->ta && c < pp_test_gemm_ncases)
			continue;
		a = host_floats(na, 120 + c);
		b = host_floats(nb, 130 + c);
		c0 = host_floats(nc, 140 + c);
		b0 = host_floats(nbias, 150 + c);
		for (size_t e = 0; e < nc || e < nbias; e++) /* not read where beta is 0 */
			if (t->beta == 0.0f) {
				if (e < nc)
					c0[e] = NAN;
				if (e < nbias)
					b0[e] = NAN;
			}
		want = malloc(nc * sizeof(float));
		wbias = malloc(nbias * sizeof(float));
		ck_assert(want && wbias);
		da = dev_put(gpu, st, a, na * sizeof(float));
		db = dev_put(gpu, st, b, nb * sizeof(float));
		if (c >= pp_test_gemm_ncases) {
			struct pp_cuda_gemm dg = g;
			void *dc = dev_put(gpu, st, c0, nc * sizeof(float));
			void *dbias = dev_put(gpu, st, b0, nbias * sizeof(float));

			dg.a = da;
			dg.b = db;
			dg.c = dc;
			dg.bias = dbias;
			ck_assert_int_eq(pp_cuda_sgemm(blas, &dg), -EINVAL);
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "small kernels alone"));
			pp_device_free(gpu, dc);
			pp_device_free(gpu, dbias);
		} else {
			memcpy(want, c0, nc * sizeof(float));
			memcpy(wbias, b0, nbias * sizeof(float));
			g.a = a;
			g.b = b;
			g.c = want;
			g.bias = wbias;
			pp_test_small_gemm(&g);
			for (int run = 0; run < 2; run++) {
				struct pp_cuda_gemm dg = g;
				void *dc = dev_put(gpu, st, c0, nc * sizeof(float));
				void *dbias = dev_put(gpu, st, b0, nbias * sizeof(float));
				float *got = malloc(nc * sizeof(float)), *gbias = malloc(nbias * sizeof(float));

				ck_assert(got && gbias);
				dg.a = da;
				dg.b = db;
				dg.c = dc;
				dg.bias = dbias;
				ck_assert_msg(pp_cuda_sgemm(blas, &dg) == 0, "case %zu: %s", c, pp_last_error());
				dev_get(got, dc, nc * sizeof(float), st);
				dev_get(gbias, dbias, nbias * sizeof(float), st);
				ck_assert_msg(memcmp(got, want, nc * sizeof(float)) == 0 &&
					      memcmp(gbias, wbias, nbias * sizeof(float)) == 0,
					      "case %zu, run %d: the kernel's bits differ from its threads emulated",
					      c, run);
				free(got);
				free(gbias);
				pp_device_free(gpu, dc);
				pp_device_free(gpu, dbias);
			}
		}
		pp_device_free(gpu, da);
		pp_device_free(gpu, db);
		free(a);
		free(b);
		free(c0);
		free(b0);
		free(want);
		free(wbias);
	}
	blas_close(gpu, st, blas);
}
END_TEST

/*
 * A product of case t on the host (emulated into want, the bias into
 * wbias) and on the GPU, for test_gemm_pair_kernels: with a bias row
 * and a ReLU mask where asked, and C on the GPU followed by 'tail' floats
 * of NaN, which no block of a pair may write.
 */
struct gemm_run {
	struct pp_cuda_gemm g, dg;  /* host, device */
	float *a, *b, *c0, *want, *got, *mask, *bias0, *wbias, *gbias;
	size_t nc, tail;
};

static void gemm_run_open(struct gemm_run *r, const struct pp_test_gemm_case *t, uint64_t seed,
			  bool bias, bool mask, size_t tail, struct pp_device *gpu,
			  struct pp_stream *st)
{
	size_t na, nb;
	float *c_dev;

	memset(r, 0, sizeof(*r));
	r->g = pp_test_gemm_of(t, NULL, NULL, NULL, &na, &nb, &r->nc);
	r->tail = tail;
	r->a = host_floats(na, seed);
	r->b = host_floats(nb, seed + 1);
	r->c0 = host_floats(r->nc + tail, seed + 2);
	for (size_t e = 0; e < r->nc + tail; e++)
		if (t->beta == 0.0f || e >= r->nc)
			r->c0[e] = NAN;
	r->want = malloc(r->nc * sizeof(float));
	r->got = malloc((r->nc + tail) * sizeof(float));
	ck_assert(r->want && r->got);
	memcpy(r->want, r->c0, r->nc * sizeof(float));
	r->g.a = r->a;
	r->g.b = r->b;
	r->g.c = r->want;
	if (mask) {
		r->mask = host_floats(r->nc, seed + 3);
		r->g.mask = r->mask;
	}
	if (bias) {
		r->bias0 = host_floats((size_t)r->g.n, seed + 4);
		r->wbias = malloc((size_t)r->g.n * sizeof(float));
		r->gbias = malloc((size_t)r->g.n * sizeof(float));
		ck_assert(r->wbias && r->gbias);
		memcpy(r->wbias, r->bias0, (size_t)r->g.n * sizeof(float));
		r->g.bias = r->wbias;
	}
	pp_test_small_gemm(&r->g);
	r->dg = r->g;
	r->dg.a = dev_put(gpu, st, r->a, na * sizeof(float));
	r->dg.b = dev_put(gpu, st, r->b, nb * sizeof(float));
	c_dev = dev_put(gpu, st, r->c0, (r->nc + tail) * sizeof(float));
	r->dg.c = c_dev;
	r->dg.mask = mask ? dev_put(gpu, st, r->mask, r->nc * sizeof(float)) : NULL;
	r->dg.bias = bias ? dev_put(gpu, st, r->bias0, (size_t)r->g.n * sizeof(float)) : NULL;
}

/* Fails unless C (and the bias) are the emulation's bits, and C's tail is untouched. */
static void gemm_run_expect(struct gemm_run *r, struct pp_stream *st, const char *what)
{
	dev_get(r->got, r->dg.c, (r->nc + r->tail) * sizeof(float), st);
	ck_assert_msg(memcmp(r->got, r->want, r->nc * sizeof(float)) == 0, "%s: C's bits", what);
	for (size_t e = r->nc; e < r->nc + r->tail; e++)
		ck_assert_msg(isnan(r->got[e]), "%s: written past C, at %zu", what, e);
	if (r->dg.bias) {
		dev_get(r->gbias, r->dg.bias, (size_t)r->g.n * sizeof(float), st);
		ck_assert_msg(memcmp(r->gbias, r->wbias, (size_t)r->g.n * sizeof(float)) == 0,
			      "%s: the bias's bits", what);
	}
}

static void gemm_run_close(struct gemm_run *r, struct pp_device *gpu)
{
	pp_device_free(gpu, (void *)r->dg.a);
	pp_device_free(gpu, (void *)r->dg.b);
	pp_device_free(gpu, r->dg.c);
	pp_device_free(gpu, (void *)r->dg.mask);
	pp_device_free(gpu, r->dg.bias);
	free(r->a);
	free(r->b);
	free(r->c0);
	free(r->want);
	free(r->got);
	free(r->mask);
	free(r->bias0);
	free(r->wbias);
	free(r->gbias);
}

/*
 * Two products in one launch (pp_cuda_sgemm2(), a Linear layer's weight
 * and input gradients): each C, and the weight gradient's bias row where
 * it has one, bit for bit its threads emulated, for pairs of other shapes,
 * nothing written past either C (the larger grid's blocks past the
 * smaller product); the pair a layer launches, its weight gradient with
 * the bias and its input gradient with a ReLU's mask; a pair with a
 * product the small kernels do not take (two calls, cuBLAS's within a
 * tolerance); and a refused product refused in a pair, before the other
 * runs.
 */
START_TEST(test_gemm_pair_kernels)
{
	static const struct {
		struct pp_test_gemm_case t[2];
		bool bias_mask;  /* the first with a bias row, the second masked */
	} pairs[] = {
		/* the MLP's last layer: weight gradient, input gradient; then with bias and mask */
		{ { { false, true, 32, 10, 100, 0, 1.0f }, { false, false, 32, 100, 10, 0, 0.0f } }, false },
		{ { { false, true, 32, 10, 100, 0, 1.0f }, { false, false, 32, 100, 10, 0, 0.0f } }, true },
		/* the CNN's first Linear layer at batch 100, with bias and mask; odd shapes, padded */
		{ { { false, true, 192, 120, 100, 0, 1.0f }, { false, false, 192, 100, 120, 0, 0.0f } }, true },
		{ { { false, false, 65, 3, 17, 1, 1.0f }, { false, true, 33, 7, 5, 3, 0.0f } }, false },
		/* past the rule: cuBLAS for the first */
		{ { { false, true, 32, 10, 1000, 0, 1.0f }, { false, false, 32, 100, 10, 0, 0.0f } }, false },
	};
	struct pp_device *gpu;
	struct pp_stream *st;
	void *blas = blas_open(&gpu, &st);

	for (size_t c = 0; c < sizeof(pairs) / sizeof(pairs[0]); c++) {
		const struct pp_test_gemm_case *t = pairs[c].t;
		const bool bm = pairs[c].bias_mask;
		struct gemm_run r[2];
		char what[64];

		for (int k = 0; k < 2; k++) {
			/* room for the columns of the other product past this one's */
			const int more = t[1 - k].n > t[k].n ? t[1 - k].n - t[k].n : 0;

			gemm_run_open(&r[k], &t[k], 200 + 10 * c + 5 * (uint64_t)k, bm && k == 0,
				      bm && k == 1, (size_t)more * (size_t)(t[k].m + t[k].pad) + 64, gpu,
				      st);
		}
		ck_assert_msg(pp_cuda_sgemm2(blas, &r[0].dg, &r[1].dg) == 0, "pair %zu: %s", c,
			      pp_last_error());
		for (int k = 0; k < 2; k++) {
			snprintf(what, sizeof(what), "pair %zu, product %d", c, k);
			if (pp_small_gemm_fits(&r[k].g)) {
				gemm_run_expect(&r[k], st, what);
				continue;
			}
			dev_get(r[k].got, r[k].dg.c, r[k].nc * sizeof(float), st);
			for (size_t e = 0; e < r[k].nc; e++)
				ck_assert_msg(fabsf(r[k].got[e] - r[k].want[e]) <= 1e-3f,
					      "%s: C[%zu] %g, emulated %g", what, e,
					      (double)r[k].got[e], (double)r[k].want[e]);
		}
		/* a ReLU on a C not contiguous: refused in the pair as alone, the first not run */
		if (t[1].pad != 0) {
			r[1].dg.relu = r[1].dg.c;
			ck_assert_int_eq(pp_cuda_sgemm2(blas, &r[0].dg, &r[1].dg), -EINVAL);
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "contiguous"));
			r[1].dg.relu = NULL;
			gemm_run_expect(&r[0], st, "the first of a refused pair"); /* beta 1: run twice, it would differ */
		}
		for (int k = 0; k < 2; k++)
			gemm_run_close(&r[k], gpu);
	}
	blas_close(gpu, st, blas);
}
END_TEST

int main(void)
{
	const char *const *gpu_names;
	Suite *s;
	TCase *tc;

	pp_test_cuda_gpus_or_skip(&gpu_names);
	s = suite_create("nn_cuda");
	tc = tcase_create("cpu_vs_cuda");
	tcase_add_test(tc, test_forward_matches_cpu);
	tcase_add_test(tc, test_train_steps_match_cpu);
	tcase_add_test(tc, test_bad_label_and_device);
	tcase_add_test(tc, test_graph_matches_eager);
	tcase_add_test(tc, test_flatten_through);
	tcase_add_test(tc, test_steps_deterministic);
	tcase_add_test(tc, test_fused_kernels_match_cpu);
	tcase_add_test(tc, test_sums_and_loss_match_cpu);
	tcase_add_test(tc, test_small_gemm_kernels);
	tcase_add_test(tc, test_prepare_changes_nothing);
	tcase_add_test(tc, test_gemm_relu_kernels);
	tcase_add_test(tc, test_gemm_bias_kernels);
	tcase_add_test(tc, test_gemm_pair_kernels);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return pp_test_run_nofork(s);
}
