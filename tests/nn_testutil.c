/*
 * tests/nn_testutil.c: helpers of the nn test programs (tests/nn_testutil.h).
 */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/small_gemm.h"
#include "tests/nn_testutil.h"
#include "tests/testutil.h"

uint64_t pp_test_rng = 1;

float pp_test_frand(void)
{
	pp_test_rng = pp_test_rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)(pp_test_rng >> 40) / 16777216.0f * 2.0f - 1.0f;
}

float *pp_test_rand_floats(size_t n)
{
	float *p = malloc((n + 1) * sizeof(float));

	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < n; i++)
		p[i] = pp_test_frand();
	return p;
}

float *pp_test_zero_floats(size_t n)
{
	float *p = calloc(n + 1, sizeof(float));

	ck_assert_ptr_nonnull(p);
	return p;
}

struct pp_tensor *pp_test_synth_batch(size_t batch, uint64_t seed, int32_t *labels)
{
	const size_t shape[4] = { batch, 1, 28, 28 };
	struct pp_tensor *t;

	ck_assert_int_eq(pp_tensor_create(NULL, PP_DTYPE_U8, 4, shape, &t), 0);
	pp_test_fill_random(pp_tensor_data(t), batch * 784, seed);
	for (size_t i = 0; i < batch; i++)
		labels[i] = (int32_t)((seed * 7 + i * 3) % 10);
	return t;
}

float *pp_test_read_params(struct pp_model *m)
{
	size_t n = pp_model_param_count(m);
	float *p = malloc(n * sizeof(float));

	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(pp_model_params_read(m, p, n), 0);
	return p;
}

void pp_test_train(struct pp_model *m, int steps, uint64_t first)
{
	int32_t labels[16];

	for (int s = 0; s < steps; s++) {
		struct pp_tensor *x = pp_test_synth_batch(16, first + (uint64_t)s, labels);

		ck_assert_int_eq(pp_model_train_step(m, x, labels), 0);
		pp_tensor_destroy(x);
	}
}

float *pp_test_eval_train(const char *spec, struct pp_device *dev,
			  const struct pp_model_config *cfg, struct pp_tensor *x,
			  const int32_t *labels, size_t batch, int steps, float *z, size_t *n_p)
{
	const size_t lshape[2] = { batch, 10 };
	struct pp_tensor *logits;
	struct pp_model *m;
	float *params;

	ck_assert_int_eq(pp_model_create(spec, dev, cfg, &m), 0);
	ck_assert_int_eq(pp_tensor_create(dev, PP_DTYPE_F32, 2, lshape, &logits), 0);
	ck_assert_int_eq(pp_model_evaluate(m, x, labels, logits), 0);
	ck_assert_int_eq(pp_tensor_copy_to_host(logits, z, batch * 10 * sizeof(float)), 0);
	for (int s = 0; s < steps; s++)
		ck_assert_int_eq(pp_model_train_step(m, x, labels), 0);
	params = pp_test_read_params(m);
	if (n_p)
		*n_p = pp_model_param_count(m);
	pp_tensor_destroy(logits);
	pp_model_destroy(m);
	return params;
}

const struct pp_test_gemm_case pp_test_gemm_cases[] = {
	{ true, false, 32, 100, 784, 0, 1.0f },  { false, true, 784, 32, 100, 0, 1.0f },
	{ false, false, 32, 100, 10, 0, 0.0f },  { true, false, 10, 100, 32, 0, 1.0f },
	{ false, true, 32, 10, 100, 0, 1.0f },   { false, false, 33, 7, 5, 3, 0.0f },
	{ false, true, 33, 7, 5, 3, 0.0f },      { true, false, 3, 5, 33, 2, 1.0f },
	{ false, true, 1, 1, 1, 0, 0.0f },       { false, false, 65, 3, 17, 1, 1.0f },
	{ true, false, 1, 1, 70, 5, 0.0f },
};
const size_t pp_test_gemm_ncases = sizeof(pp_test_gemm_cases) / sizeof(pp_test_gemm_cases[0]);

struct pp_cuda_gemm pp_test_gemm_of(const struct pp_test_gemm_case *t, const float *a,
				    const float *b, float *c, size_t *na, size_t *nb, size_t *nc)
{
	const int lda = (t->ta ? t->k : t->m) + t->pad, ldb = (t->tb ? t->n : t->k) + t->pad;
	const int ldc = t->m + t->pad;

	*na = (size_t)lda * (size_t)(t->ta ? t->m : t->k);
	*nb = (size_t)ldb * (size_t)(t->tb ? t->k : t->n);
	*nc = (size_t)ldc * (size_t)t->n;
	return (struct pp_cuda_gemm){ .ta = t->ta, .tb = t->tb, .m = t->m, .n = t->n, .k = t->k,
				      .a = a, .b = b, .c = c, .lda = lda, .ldb = ldb, .ldc = ldc,
				      .beta = t->beta };
}

void pp_test_small_gemm(const struct pp_cuda_gemm *g)
{
	for (int j = 0; j < g->n; j++)
		for (int i = 0; i < (g->ta ? g->m : pp_sgemm_rows(g)); i++) {
			float part[PP_SGEMM_PARTS], lane[PP_SGEMM_LANES], next[PP_SGEMM_LANES];

			if (!g->ta && i == g->m) { /* the bias's row */
				for (int q = 0; q < PP_SGEMM_PARTS; q++)
					part[q] = pp_sgemm_bias_part(g, j, q, PP_SGEMM_PARTS);
				pp_sgemm_store_bias(g, j, pp_sgemm_add_parts(part));
				continue;
			}
			if (!g->ta) {
				for (int q = 0; q < PP_SGEMM_PARTS; q++)
					part[q] = pp_sgemm_part(g, i, j, q, PP_SGEMM_PARTS);
				pp_sgemm_store(g, i, j, pp_sgemm_add_parts(part));
				continue;
			}
			for (int l = 0; l < PP_SGEMM_LANES; l++)
				lane[l] = pp_sgemm_part(g, i, j, l, PP_SGEMM_LANES);
			for (int off = PP_SGEMM_LANES / 2; off > 0; off /= 2) {
				for (int l = 0; l < PP_SGEMM_LANES; l++)
					next[l] = pp_sgemm_butterfly(lane[l], lane[l ^ off]);
				memcpy(lane, next, sizeof(lane));
			}
			pp_sgemm_store(g, i, j, lane[0]);
		}
}
