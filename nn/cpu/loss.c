/*
 * nn/cpu/loss.c: softmax cross-entropy (PyTorch's CrossEntropyLoss with mean
 * reduction when scale = 1 / batch) on the CPU.  Numerically stable: the
 * largest logit is subtracted before exponentiating, and the loss is
 * log(sum exp(z - max)) - (z_label - max), in double.
 *
 * Two versions: a portable one, pp_xent_sample() of nn/nn_math.h (the
 * CUDA kernel's arithmetic too) with the C library's exp, and for
 * up to 16 classes an AVX-512 one that takes a sample's logits in one
 * vector and exponentiates them in double, 8 at a time, with its own exp
 * (to about 1 ulp, so the losses agree with the portable version's to
 * about 1e-15 relative), once for the loss and the gradient together.
 */
#include "config.h"

#include <errno.h>
#include <immintrin.h>
#include <math.h>

#include "common/common_impl.h"
#include "nn/cpu/cpu_impl.h"
#include "nn/nn_math.h"

/* Classes the AVX-512 version takes: one vector of floats. */
#define XENT_AVX512_MAX_CLASSES 16

/* pp_xent_sample() sample by sample (the labels checked by the caller). */
static void softmax_xent_portable(const float *logits, const int32_t *labels, int n, int c,
				  float scale, float *dlogits, double *losses, uint64_t *correct)
{
	uint64_t right = 0;

	for (int i = 0; i < n; i++) {
		unsigned r;
		int bad;

		losses[i] = pp_xent_sample(logits, labels, c, scale, dlogits, (size_t)i, &r, &bad);
		right += r;
	}
	*correct += right;
}

/*
 * exp(x) of 8 doubles, for x <= 0 (below -746 it is 0; NaN stays NaN):
 * x = k ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, the first with
 * trailing zero bits so that k ln2_hi is exact), the Taylor polynomial of
 * degree 13 of exp(r) (truncation below 1e-17), times 2^k by scalef
 * (which makes the subnormals and the zeros of the deep negatives).
 */
PP_TARGET_AVX512 static __m512d exp_pd(__m512d x)
{
	static const double inv_fact[14] = {
		1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
		1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0,
		1.0 / 6.0, 0.5, 1.0, 1.0,
	};
	__m512d k, r, p;

	x = _mm512_max_pd(_mm512_set1_pd(-746.0), x);
	k = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(1.4426950408889634)),
				 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_fnmadd_pd(k, _mm512_set1_pd(6.93147180369123816490e-01), x);
	r = _mm512_fnmadd_pd(k, _mm512_set1_pd(1.90821492927058770002e-10), r);
	p = _mm512_set1_pd(inv_fact[0]);
	for (int j = 1; j < 14; j++)
		p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(inv_fact[j]));
	return _mm512_scalef_pd(p, k);
}

/* As the portable version, for c <= XENT_AVX512_MAX_CLASSES. */
PP_TARGET_AVX512 static void softmax_xent_avx512(const float *logits,
								     const int32_t *labels, int n,
								     int c, float scale, float *dlogits,
								     double *losses, uint64_t *correct)
{
	const __mmask16 lanes = (__mmask16)((1u << c) - 1);
	const __mmask8 lanes_lo = (__mmask8)lanes, lanes_hi = (__mmask8)(lanes >> 8);
	uint64_t right = 0;

	for (int i = 0; i < n; i++) {
		const float *z = logits + (size_t)i * c;
		const int y = labels[i];
		const __m512 zf = _mm512_maskz_loadu_ps(lanes, z);
		const float m = _mm512_mask_reduce_max_ps(lanes, zf);
		/* the first of the largest, as the portable version's strict comparison */
		const unsigned top = _mm512_mask_cmp_ps_mask(lanes, zf, _mm512_set1_ps(m), _CMP_EQ_OQ);
		const __m512d md = _mm512_set1_pd((double)m);
		__m512d e_lo, e_hi;
		double sum;

		e_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(zf));
		e_hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(zf), 1)));
		e_lo = _mm512_maskz_mov_pd(lanes_lo, exp_pd(_mm512_sub_pd(e_lo, md)));
		e_hi = _mm512_maskz_mov_pd(lanes_hi, exp_pd(_mm512_sub_pd(e_hi, md)));
		sum = _mm512_reduce_add_pd(_mm512_add_pd(e_lo, e_hi));
		losses[i] = log(sum) - ((double)z[y] - m);
		right += (top ? __builtin_ctz(top) : 0) == y;
		if (dlogits) {
			const __m512d s = _mm512_set1_pd(sum);
			const __m256 d_lo = _mm512_cvtpd_ps(_mm512_div_pd(e_lo, s));
			const __m256 d_hi = _mm512_cvtpd_ps(_mm512_div_pd(e_hi, s));
			__m512 d = _mm512_castpd_ps(_mm512_insertf64x4(
				_mm512_castps_pd(_mm512_castps256_ps512(d_lo)), _mm256_castps_pd(d_hi), 1));
			float *dz = dlogits + (size_t)i * c;

			_mm512_mask_storeu_ps(dz, lanes, _mm512_mul_ps(d, _mm512_set1_ps(scale)));
			dz[y] -= scale;
		}
	}
	*correct += right;
}

int pp_nn_softmax_xent_isa(const float *logits, const int32_t *labels, int n, int c, float scale,
		     float *dlogits, double *losses, uint64_t *correct, enum pp_isa isa)
{
	for (int i = 0; i < n; i++)
		if (labels[i] < 0 || labels[i] >= c)
			return pp_error(-ERANGE, "softmax cross-entropy: label %d of sample %d is outside 0..%d",
					(int)labels[i], i, c - 1);
	if (isa == PP_ISA_AVX512 && c <= XENT_AVX512_MAX_CLASSES)
		softmax_xent_avx512(logits, labels, n, c, scale, dlogits, losses, correct);
	else
		softmax_xent_portable(logits, labels, n, c, scale, dlogits, losses, correct);
	return 0;
}

int pp_nn_softmax_xent(const float *logits, const int32_t *labels, int n, int c, float scale,
		 float *dlogits, double *losses, uint64_t *correct)
{
	return pp_nn_softmax_xent_isa(logits, labels, n, c, scale, dlogits, losses, correct, pp_isa_best());
}
