/*
 * tests/test_nn_cuda.c: the CUDA backend of nn against the CPU one: every
 * op (each spec below exercises some: convolution with stride and padding,
 * overlapping and plain max-pools, ReLU, flatten, Linear, the loss, the
 * u8 normalisation, SGD and Adam; the last specs are single layers)
 * forward, backward and in whole training steps, compared with a
 * tolerance on cuda:0.  CUDA does not survive
 * fork(), so this program runs its tests without forking, and it has its
 * own main: with no usable GPU it says why and exits 77 (SKIP).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pinpipe/device.h"
#include "pinpipe/nn.h"
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
	/* single layers, to tell a faulty op from the others */
	{ "fc:10", 1, 4, 4 },
	{ "conv:10:3", 2, 3, 3 },
	{ "conv:10:3:2:1", 3, 2, 2 },
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
 * stay that of step 2), or if a new learning rate does not reach a
 * captured step.  Two input buffers in turn, as the transfer stage's slots.
 */
START_TEST(test_graph_matches_eager)
{
	struct pair p;
	struct pp_model *graphed;
	struct pp_model_config cfg;
	struct pp_model_graph_stats gs;
	struct pp_tensor *x2;
	float *pe, *pg;
	const size_t shape[4] = { BATCH, 1, 28, 28 };

	pair_open(&p, 1, PP_OPTIM_ADAM);
	pp_model_config_init(&cfg);
	cfg.seed = 11;
	cfg.optim.lr = 0.01f;
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
	for (int s = 0; s < 10; s++) {
		struct pp_tensor *x = s % 2 ? x2 : p.x_gpu;

		if (s == 6) {
			ck_assert_int_eq(pp_model_set_lr(p.gpu_model, 0.002f), 0);
			ck_assert_int_eq(pp_model_set_lr(graphed, 0.002f), 0);
		}
		ck_assert_int_eq(pp_model_train_step(p.gpu_model, x, p.labels_gpu), 0);
		ck_assert_int_eq(pp_model_train_step(graphed, x, p.labels_gpu), 0);
	}
	pe = malloc(p.n * sizeof(float));
	pg = malloc(p.n * sizeof(float));
	ck_assert(pe && pg);
	ck_assert_int_eq(pp_model_params_read(p.gpu_model, pe, p.n), 0);
	ck_assert_int_eq(pp_model_params_read(graphed, pg, p.n), 0);
	ck_assert_msg(max_rel_diff(pg, pe, p.n) < 1e-6, "graphed and eager differ by %g",
		      max_rel_diff(pg, pe, p.n));
	ck_assert_uint_eq(pp_model_steps(graphed), 10);
	pp_model_get_graph_stats(graphed, &gs);
	ck_assert_msg(gs.fallback[0] == '\0', "%s", gs.fallback);
	ck_assert(gs.enabled);
	ck_assert_uint_eq(gs.captures, 4);
	ck_assert_uint_eq(gs.launches, 6);
	free(pe);
	free(pg);
	pp_tensor_destroy(x2);
	pp_model_destroy(graphed);
	pair_close(&p);
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
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return pp_test_run_nofork(s);
}
