/*
 * nn/cpu/maxpool.c: MaxPool2d (no padding) on the CPU.  The forward keeps the
 * index of each window's maximum (the first one, as PyTorch's CPU kernel),
 * so the backward routes each gradient to it.  A ReLU before it can be
 * fused in (pp_nn_maxpool_relu_forward()).  The common 2x2 windows of stride 2
 * have a portable version, four windows at a time, and an AVX-512 one,
 * sixteen, chosen at run time.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "nn/cpu/cpu_impl.h"

/* 4 lanes of int32, for the comparison masks and indices */
typedef int32_t nn_i32x4 __attribute__((vector_size(16)));

/*
 * Where c (all ones or zeros per lane) is set, v and its index vi become
 * the maximum m and its index mi.
 */
static inline void take(nn_f32x4 *m, nn_i32x4 *mi, nn_f32x4 v, nn_i32x4 vi)
{
	const nn_i32x4 c = v > *m;

	*m = (nn_f32x4)((c & (nn_i32x4)v) | (~c & (nn_i32x4)*m));
	*mi = (c & vi) | (~c & *mi);
}

/*
 * Four 2x2 windows side by side, the first at index 'at' of x (rows w
 * floats apart), without branches: the same choices as the scalar loop
 * (the first maximum in the order top left, top right, bottom left,
 * bottom right; a NaN first stays).
 */
static inline __attribute__((always_inline)) void maxpool2_x4(float *y, int32_t *ix, const float *x,
							      int at, int w, const bool relu)
{
	const nn_i32x4 i0 = { at, at + 2, at + 4, at + 6 };
	nn_f32x4 a, b, top_l, top_r, bot_l, bot_r, m;
	nn_i32x4 mi = i0;

	memcpy(&a, x + at, sizeof(a));
	memcpy(&b, x + at + 4, sizeof(b));
	top_l = __builtin_shufflevector(a, b, 0, 2, 4, 6);
	top_r = __builtin_shufflevector(a, b, 1, 3, 5, 7);
	memcpy(&a, x + at + w, sizeof(a));
	memcpy(&b, x + at + w + 4, sizeof(b));
	bot_l = __builtin_shufflevector(a, b, 0, 2, 4, 6);
	bot_r = __builtin_shufflevector(a, b, 1, 3, 5, 7);
	m = top_l;
	take(&m, &mi, top_r, i0 + 1);
	take(&m, &mi, bot_l, i0 + w);
	take(&m, &mi, bot_r, i0 + w + 1);
	if (relu)
		m = (nn_f32x4)((nn_i32x4)m & (m > (nn_f32x4){ 0 }));
	memcpy(y, &m, sizeof(m));
	memcpy(ix, &mi, sizeof(mi));
}

/*
 * The common 2x2 window with stride 2, four windows at a time then one by
 * one; the same choices as the general loop.  With relu, each output is max(0, the window's maximum):
 * the pool of the ReLU of 'in' (the index may differ only where that is
 * 0, where no gradient passes).
 */
static inline __attribute__((always_inline)) void maxpool2(const struct nn_layer *l, float *out,
							   int32_t *idx, const float *in, int n,
							   const bool relu)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, oh = l->out_h, ow = l->out_w;

	for (int i = 0; i < n; i++) {
		const float *x = in + (size_t)i * l->in_size;
		float *y = out + (size_t)i * l->out_size;
		int32_t *ix = idx + (size_t)i * l->out_size;

		for (int ch = 0; ch < c; ch++)
			for (int oy = 0; oy < oh; oy++) {
				const int r0 = (ch * h + 2 * oy) * w, r1 = r0 + w;

				int ox = 0;

				for (; ox + 4 <= ow; ox += 4, y += 4, ix += 4)
					maxpool2_x4(y, ix, x, r0 + 2 * ox, w, relu);
				for (; ox < ow; ox++) {
					int best = r0 + 2 * ox;
					float m = x[best];

					if (x[r0 + 2 * ox + 1] > m) {
						best = r0 + 2 * ox + 1;
						m = x[best];
					}
					if (x[r1 + 2 * ox] > m) {
						best = r1 + 2 * ox;
						m = x[best];
					}
					if (x[r1 + 2 * ox + 1] > m) {
						best = r1 + 2 * ox + 1;
						m = x[best];
					}
					*y++ = relu && !(m > 0.0f) ? 0.0f : m;
					*ix++ = best;
				}
			}
	}
}

/*
 * AVX-512: maxpool2(), 16 windows of a row at a time (the row's tail
 * masked): the two input rows' 32 floats split into their even and odd
 * columns by two permutations each, then the same choices with masks.
 */
PP_TARGET_AVX512 static void maxpool2_avx512(const struct nn_layer *l, float *out, int32_t *idx,
				      const float *in, int n, bool relu)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, oh = l->out_h, ow = l->out_w;
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
					       28, 30);
	const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
	const __m512i one = _mm512_set1_epi32(1), down = _mm512_set1_epi32(w);
	const __m512 zero = _mm512_setzero_ps();

	for (int i = 0; i < n; i++) {
		const float *x = in + (size_t)i * l->in_size;
		float *y = out + (size_t)i * l->out_size;
		int32_t *ix = idx + (size_t)i * l->out_size;

		for (int ch = 0; ch < c; ch++)
			for (int oy = 0; oy < oh; oy++, y += ow, ix += ow)
				for (int ox = 0; ox < ow; ox += 16) {
					const int at = (ch * h + 2 * oy) * w + 2 * ox;
					const __mmask16 ma = nn_lanes16(2 * (ow - ox)),
							mb = nn_lanes16(2 * (ow - ox) - 16),
							my = nn_lanes16(ow - ox);
					const __m512 a0 = _mm512_maskz_loadu_ps(ma, x + at);
					const __m512 b0 = _mm512_maskz_loadu_ps(mb, x + at + 16);
					const __m512 a1 = _mm512_maskz_loadu_ps(ma, x + at + w);
					const __m512 b1 = _mm512_maskz_loadu_ps(mb, x + at + w + 16);
					const __m512 tr = _mm512_permutex2var_ps(a0, odd, b0);
					const __m512 bl = _mm512_permutex2var_ps(a1, even, b1);
					const __m512 br = _mm512_permutex2var_ps(a1, odd, b1);
					const __m512i i0 = _mm512_add_epi32(_mm512_set1_epi32(at), even);
					__m512 m = _mm512_permutex2var_ps(a0, even, b0);
					__m512i mi = i0;
					__mmask16 k = _mm512_cmp_ps_mask(tr, m, _CMP_GT_OQ);

					m = _mm512_mask_mov_ps(m, k, tr);
					mi = _mm512_mask_add_epi32(mi, k, i0, one);
					k = _mm512_cmp_ps_mask(bl, m, _CMP_GT_OQ);
					m = _mm512_mask_mov_ps(m, k, bl);
					mi = _mm512_mask_add_epi32(mi, k, i0, down);
					k = _mm512_cmp_ps_mask(br, m, _CMP_GT_OQ);
					m = _mm512_mask_mov_ps(m, k, br);
					mi = _mm512_mask_add_epi32(mi, k, i0, _mm512_add_epi32(down, one));
					if (relu)
						m = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, zero, _CMP_GT_OQ), m);
					_mm512_mask_storeu_ps(y + ox, my, m);
					_mm512_mask_storeu_epi32(ix + ox, my, mi);
				}
	}
}

/* relu: as maxpool2(); isa: the version of the 2x2 windows of stride 2 (one the CPU has) */
void pp_nn_maxpool_forward_impl(const struct nn_layer *l, float *out, int32_t *idx, const float *in,
			  int n, bool relu, enum pp_isa isa)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, oh = l->out_h, ow = l->out_w;
	const int k = l->k, s = l->stride;

	if (k == 2 && s == 2 && isa == PP_ISA_AVX512) {
		maxpool2_avx512(l, out, idx, in, n, relu);
		return;
	}
	if (k == 2 && s == 2) {
		maxpool2(l, out, idx, in, n, relu);
		return;
	}
	for (int i = 0; i < n; i++) {
		const float *x = in + (size_t)i * l->in_size;
		float *y = out + (size_t)i * l->out_size;
		int32_t *ix = idx + (size_t)i * l->out_size;

		for (int ch = 0; ch < c; ch++)
			for (int oy = 0; oy < oh; oy++)
				for (int ox = 0; ox < ow; ox++) {
					int best = (ch * h + oy * s) * w + ox * s;
					float m = x[best];

					for (int ky = 0; ky < k; ky++)
						for (int kx = 0; kx < k; kx++) {
							int at = (ch * h + oy * s + ky) * w + ox * s + kx;

							if (x[at] > m) {
								m = x[at];
								best = at;
							}
						}
					y[(ch * oh + oy) * ow + ox] = relu && !(m > 0.0f) ? 0.0f : m;
					ix[(ch * oh + oy) * ow + ox] = best;
				}
	}
}

void pp_nn_maxpool_forward(const struct nn_layer *l, float *out, int32_t *idx, const float *in, int n)
{
	pp_nn_maxpool_forward_impl(l, out, idx, in, n, false, pp_isa_best());
}

void pp_nn_maxpool_relu_forward(const struct nn_layer *l, float *out, int32_t *idx, const float *in,
			  int n)
{
	pp_nn_maxpool_forward_impl(l, out, idx, in, n, true, pp_isa_best());
}

void pp_nn_maxpool_backward(const struct nn_layer *l, float *din, const float *dout,
		      const int32_t *idx, int n)
{
	memset(din, 0, (size_t)n * l->in_size * sizeof(float));
	for (int i = 0; i < n; i++) {
		float *dx = din + (size_t)i * l->in_size;
		const float *dy = dout + (size_t)i * l->out_size;
		const int32_t *ix = idx + (size_t)i * l->out_size;

		for (size_t j = 0; j < l->out_size; j++)
			dx[ix[j]] += dy[j];
	}
}
