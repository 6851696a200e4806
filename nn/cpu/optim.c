/*
 * nn/cpu/optim.c: SGD and Adam on the CPU, the per-element arithmetic of
 * nn/nn_math.h (pp_sgd_update(), pp_adam_update(), torch.optim's), which
 * the CUDA kernels compute too.
 *
 * Built with -fno-math-errno (nn/Makefile.inc), so that sqrtf is one
 * instruction: the square roots here are of non-negative numbers.
 *
 * Each update comes in three versions, chosen at run time: AVX-512 (16
 * lanes), AVX2 with FMA (8 lanes), and portable (4 lanes of baseline
 * x86-64, then pp_adam_update() for the last elements; SGD is
 * pp_sgd_update() element by element).
 * The vector versions do nn/nn_math.h's operations in its order; the
 * AVX ones take the last partial vector with masked loads and stores, so
 * that every element goes through the same arithmetic wherever it lies,
 * and they contract the multiply-adds into FMAs: results differ from the
 * portable version's in the last bits, and are the same on one machine
 * run to run.
 */
#include "config.h"

#include <immintrin.h>
#include <math.h>

#include "common/common_impl.h"
#include "nn/cpu/cpu_impl.h"
#include "nn/nn_math.h"

static void sgd_step_portable(struct nn_optim *o, float *p, const float *grad, size_t n)
{
	const struct pp_optimizer_config *c = &o->cfg;
	const float lr = c->lr, wd = c->weight_decay, mom = c->momentum, damp = 1.0f - c->dampening;
	const bool nesterov = c->nesterov, first = o->t == 1;
	float *b = o->buf1;

	for (size_t i = 0; i < n; i++)
		pp_sgd_update(&p[i], &b[i], grad[i], lr, wd, mom, damp, nesterov, first);
}

/* Adam's factors of step t (pp_adam_factors_of()). */
static struct pp_adam_factors adam_factors(const struct nn_optim *o)
{
	return pp_adam_factors_of(o->cfg.lr, o->cfg.beta1, o->cfg.beta2, o->t);
}

static void adam_step_portable(struct nn_optim *o, float *p, const float *grad, size_t n)
{
	const struct pp_optimizer_config *c = &o->cfg;
	const float b1 = c->beta1, b2 = c->beta2, wd = c->weight_decay, eps = c->eps;
	const struct pp_adam_factors f = adam_factors(o);
	const float step = f.step, bc2_sqrt = f.bc2_sqrt;
	float *m = o->buf1, *v = o->buf2;
	size_t i = 0;

	/* 4 at a time, the same operations in the same order as pp_adam_update() */
	for (; i + 4 <= n; i += 4) {
		nn_f32x4 g, pv, mv, vv, root;

		memcpy(&g, grad + i, sizeof(g));
		memcpy(&pv, p + i, sizeof(pv));
		memcpy(&mv, m + i, sizeof(mv));
		memcpy(&vv, v + i, sizeof(vv));
		if (wd != 0.0f)
			g += wd * pv;
		mv = b1 * mv + (1.0f - b1) * g;
		vv = b2 * vv + (1.0f - b2) * g * g;
		for (int k = 0; k < 4; k++)
			root[k] = sqrtf(vv[k]);
		pv -= step * (mv / (root / bc2_sqrt + eps));
		memcpy(p + i, &pv, sizeof(pv));
		memcpy(m + i, &mv, sizeof(mv));
		memcpy(v + i, &vv, sizeof(vv));
	}
	for (; i < n; i++)
		pp_adam_update(&p[i], &m[i], &v[i], grad[i], b1, b2, eps, wd, f);
}

/*
 * The vector versions, in pp_adam_update()'s order of operations: g += wd
 * p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g; p -= step m /
 * (sqrt(v) / bc2_sqrt + eps).
 */
PP_TARGET_AVX512 static void adam_step_avx512(struct nn_optim *o, float *p,
								  const float *grad, size_t n)
{
	const struct pp_optimizer_config *c = &o->cfg;
	const struct pp_adam_factors f = adam_factors(o);
	const __m512 b1 = _mm512_set1_ps(c->beta1), b2 = _mm512_set1_ps(c->beta2);
	const __m512 a1 = _mm512_set1_ps(1.0f - c->beta1), a2 = _mm512_set1_ps(1.0f - c->beta2);
	const __m512 wd = _mm512_set1_ps(c->weight_decay), eps = _mm512_set1_ps(c->eps);
	const __m512 step = _mm512_set1_ps(f.step), bc2 = _mm512_set1_ps(f.bc2_sqrt);
	const bool decay = c->weight_decay != 0.0f;
	float *m = o->buf1, *v = o->buf2;

	for (size_t i = 0; i < n; i += 16) {
		const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 g = _mm512_maskz_loadu_ps(k, grad + i), pv = _mm512_maskz_loadu_ps(k, p + i);
		__m512 mv = _mm512_maskz_loadu_ps(k, m + i), vv = _mm512_maskz_loadu_ps(k, v + i);
		__m512 den;

		if (decay)
			g = _mm512_fmadd_ps(wd, pv, g);
		mv = _mm512_fmadd_ps(b1, mv, _mm512_mul_ps(a1, g));
		vv = _mm512_fmadd_ps(b2, vv, _mm512_mul_ps(_mm512_mul_ps(a2, g), g));
		den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), bc2), eps);
		pv = _mm512_fnmadd_ps(step, _mm512_div_ps(mv, den), pv);
		_mm512_mask_storeu_ps(p + i, k, pv);
		_mm512_mask_storeu_ps(m + i, k, mv);
		_mm512_mask_storeu_ps(v + i, k, vv);
	}
}

/* The mask of lanes [0, k) of 8, for maskload and maskstore. */
PP_TARGET_AVX2 static inline __m256i lanes8(size_t k)
{
	const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);

	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)PP_MIN(k, 8u)), idx);
}

/* 8 floats from p, of which the 'left' first (all when left >= 8); the others 0. */
PP_TARGET_AVX2 static inline __m256 load8(const float *p, size_t left)
{
	return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(left));
}

/* Stores the 'left' first of the 8 floats of v to p (all when left >= 8). */
PP_TARGET_AVX2 static inline void store8(float *p, size_t left, __m256 v)
{
	if (left >= 8)
		_mm256_storeu_ps(p, v);
	else
		_mm256_maskstore_ps(p, lanes8(left), v);
}

PP_TARGET_AVX2 static void adam_step_avx2(struct nn_optim *o, float *p,
								 const float *grad, size_t n)
{
	const struct pp_optimizer_config *c = &o->cfg;
	const struct pp_adam_factors f = adam_factors(o);
	const __m256 b1 = _mm256_set1_ps(c->beta1), b2 = _mm256_set1_ps(c->beta2);
	const __m256 a1 = _mm256_set1_ps(1.0f - c->beta1), a2 = _mm256_set1_ps(1.0f - c->beta2);
	const __m256 wd = _mm256_set1_ps(c->weight_decay), eps = _mm256_set1_ps(c->eps);
	const __m256 step = _mm256_set1_ps(f.step), bc2 = _mm256_set1_ps(f.bc2_sqrt);
	const bool decay = c->weight_decay != 0.0f;
	float *m = o->buf1, *v = o->buf2;

	for (size_t i = 0; i < n; i += 8) {
		const size_t left = n - i;
		__m256 g = load8(grad + i, left), pv = load8(p + i, left);
		__m256 mv = load8(m + i, left), vv = load8(v + i, left);
		__m256 den;

		if (decay)
			g = _mm256_fmadd_ps(wd, pv, g);
		mv = _mm256_fmadd_ps(b1, mv, _mm256_mul_ps(a1, g));
		vv = _mm256_fmadd_ps(b2, vv, _mm256_mul_ps(_mm256_mul_ps(a2, g), g));
		den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bc2), eps);
		pv = _mm256_fnmadd_ps(step, _mm256_div_ps(mv, den), pv);
		store8(p + i, left, pv);
		store8(m + i, left, mv);
		store8(v + i, left, vv);
	}
}

/*
 * SGD: g = grad + wd p; b = g at the first step, else mom b + damp g;
 * g = nesterov ? g + mom b : b; p -= lr g.
 */
PP_TARGET_AVX512 static void sgd_step_avx512(struct nn_optim *o, float *p,
								 const float *grad, size_t n)
{
	const struct pp_optimizer_config *c = &o->cfg;
	const __m512 lr = _mm512_set1_ps(c->lr), wd = _mm512_set1_ps(c->weight_decay);
	const __m512 mom = _mm512_set1_ps(c->momentum), damp = _mm512_set1_ps(1.0f - c->dampening);
	const bool decay = c->weight_decay != 0.0f, momentum = c->momentum != 0.0f;
	const bool first = o->t == 1;
	float *b = o->buf1;

	for (size_t i = 0; i < n; i += 16) {
		const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 g = _mm512_maskz_loadu_ps(k, grad + i), pv = _mm512_maskz_loadu_ps(k, p + i);

		if (decay)
			g = _mm512_fmadd_ps(wd, pv, g);
		if (momentum) {
			__m512 bv = first ? g : _mm512_fmadd_ps(mom, _mm512_maskz_loadu_ps(k, b + i),
								_mm512_mul_ps(damp, g));

			_mm512_mask_storeu_ps(b + i, k, bv);
			g = c->nesterov ? _mm512_fmadd_ps(mom, bv, g) : bv;
		}
		_mm512_mask_storeu_ps(p + i, k, _mm512_fnmadd_ps(lr, g, pv));
	}
}

PP_TARGET_AVX2 static void sgd_step_avx2(struct nn_optim *o, float *p,
								const float *grad, size_t n)
{
	const struct pp_optimizer_config *c = &o->cfg;
	const __m256 lr = _mm256_set1_ps(c->lr), wd = _mm256_set1_ps(c->weight_decay);
	const __m256 mom = _mm256_set1_ps(c->momentum), damp = _mm256_set1_ps(1.0f - c->dampening);
	const bool decay = c->weight_decay != 0.0f, momentum = c->momentum != 0.0f;
	const bool first = o->t == 1;
	float *b = o->buf1;

	for (size_t i = 0; i < n; i += 8) {
		const size_t left = n - i;
		__m256 g = load8(grad + i, left), pv = load8(p + i, left);

		if (decay)
			g = _mm256_fmadd_ps(wd, pv, g);
		if (momentum) {
			__m256 bv = first ? g : _mm256_fmadd_ps(mom, load8(b + i, left),
								_mm256_mul_ps(damp, g));

			store8(b + i, left, bv);
			g = c->nesterov ? _mm256_fmadd_ps(mom, bv, g) : bv;
		}
		store8(p + i, left, _mm256_fnmadd_ps(lr, g, pv));
	}
}

void pp_nn_optim_step_isa(struct nn_optim *o, float *p, const float *g, size_t n, enum pp_isa isa)
{
	const bool sgd = o->cfg.kind == PP_OPTIM_SGD;

	o->t++;
	switch (isa) {
	case PP_ISA_AVX512:
		if (sgd)
			sgd_step_avx512(o, p, g, n);
		else
			adam_step_avx512(o, p, g, n);
		break;
	case PP_ISA_AVX2:
		if (sgd)
			sgd_step_avx2(o, p, g, n);
		else
			adam_step_avx2(o, p, g, n);
		break;
	case PP_ISA_BASE:
		if (sgd)
			sgd_step_portable(o, p, g, n);
		else
			adam_step_portable(o, p, g, n);
		break;
	}
}

void pp_nn_optim_step_cpu(struct nn_optim *o, float *p, const float *g, size_t n)
{
	pp_nn_optim_step_isa(o, p, g, n, pp_isa_best());
}
