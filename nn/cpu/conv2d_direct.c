/*
 * nn/cpu/conv2d_direct.c: Conv2d at stride 1 without padding, computed
 * directly from the input (no im2col columns, no GEMM), for the layers
 * where a GEMM is too thin to pay for its columns: few input channels
 * (the first layer of an image network, 1 channel, 6 outputs).  Each
 * output row is made 8 positions at a time, the 8 sums kept in registers
 * across all the taps.  Two versions of the forward: 8-wide AVX2 with FMA,
 * chosen at run time where the CPU has them, and a portable one for the
 * others (baseline x86-64), correct but slower than im2col + GEMM (GCC
 * keeps 8-float vectors in memory on SSE): a model takes this file's
 * path only where the CPU has AVX2 and FMA (pp_nn_conv2d_direct_fits()).  A
 * third, AVX-512, for any number of input channels, also makes the
 * output of pp_nn_conv2d_forward() for the thin layers at stride 1 without
 * padding (pp_nn_conv2d_direct_forward_fits512()).  The backward, behind a ReLU and
 * a max-pool with stride >= kernel, visits only the positions the pool
 * selected and reads the input windows in place of the columns; it too
 * has the two versions.
 * Shapes (one sample): in (C, H, W), W (OC, C, K, K), out (OC, OH, OW).
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "nn/cpu/cpu_impl.h"

/* 8 floats, one AVX register (kept in memory where AVX is not enabled) */
typedef float nn_f32x8 __attribute__((vector_size(32)));

bool pp_nn_conv2d_direct_fits(const struct nn_layer *l)
{
	return l->kind == NN_CONV && l->stride == 1 && l->pad == 0 && l->in_c == 1 && l->k <= 8 &&
	       l->sparse_dout && pp_isa_best() >= PP_ISA_AVX2;
}

/*
 * The outputs of channels o..o+no-1 at row oy, positions ox..ox+8 nb-1:
 * no x nb sums of 8 kept in registers over all the C K K taps (6
 * independent chains for no = 2, nb = 3, enough to hide the latency of
 * the additions).  k, no and nb are constants where inlined with them.
 */
static inline __attribute__((always_inline)) void direct_tile(const struct nn_layer *l, float *y,
							      const float *x, const float *w,
							      const float *b, const int k, int o,
							      const int no, int oy, int ox,
							      const int nb)
{
	const int c = l->in_c, h = l->in_h, iw = l->in_w, oh = l->out_h, ow = l->out_w;
	nn_f32x8 acc[2][3];

#pragma GCC unroll 2
	for (int a = 0; a < no; a++)
#pragma GCC unroll 3
		for (int bb = 0; bb < nb; bb++)
			acc[a][bb] = (nn_f32x8){ 0 } + b[o + a];
	for (int ch = 0; ch < c; ch++)
#pragma GCC unroll 8
		for (int ky = 0; ky < k; ky++) {
			const float *xr = x + ((size_t)ch * h + oy + ky) * iw + ox;
			const float *wr = w + ((size_t)o * c + ch) * k * k + ky * k;

#pragma GCC unroll 8
			for (int kx = 0; kx < k; kx++) {
				nn_f32x8 v[3];

#pragma GCC unroll 3
				for (int bb = 0; bb < nb; bb++)
					memcpy(&v[bb], xr + kx + 8 * bb, sizeof(v[bb]));
#pragma GCC unroll 2
				for (int a = 0; a < no; a++) {
					const float wv = wr[(size_t)a * c * k * k + kx];

#pragma GCC unroll 3
					for (int bb = 0; bb < nb; bb++)
						acc[a][bb] += wv * v[bb];
				}
			}
		}
#pragma GCC unroll 2
	for (int a = 0; a < no; a++)
#pragma GCC unroll 3
		for (int bb = 0; bb < nb; bb++)
			memcpy(y + ((size_t)(o + a) * oh + oy) * ow + ox + 8 * bb, &acc[a][bb],
			       sizeof(acc[a][bb]));
}

/* Output (o, oy, ox) alone. */
static inline float direct_one(const struct nn_layer *l, const float *x, const float *w,
			       const float *b, const int k, int o, int oy, int ox)
{
	const int c = l->in_c, h = l->in_h, iw = l->in_w;
	float s = b[o];

	for (int ch = 0; ch < c; ch++)
		for (int ky = 0; ky < k; ky++) {
			const float *xr = x + ((size_t)ch * h + oy + ky) * iw + ox;
			const float *wr = w + ((size_t)o * c + ch) * k * k + ky * k;

			for (int kx = 0; kx < k; kx++)
				s += wr[kx] * xr[kx];
		}
	return s;
}

/* Channels o..o+no-1 of one sample: rows in tiles of 24 positions, then 8, then one by one. */
static inline __attribute__((always_inline)) void direct_channels(const struct nn_layer *l,
								  float *y, const float *x,
								  const float *w, const float *b,
								  const int k, int o, const int no)
{
	const int oh = l->out_h, ow = l->out_w;

	for (int oy = 0; oy < oh; oy++) {
		int ox = 0;

		for (; ox + 24 <= ow; ox += 24)
			direct_tile(l, y, x, w, b, k, o, no, oy, ox, 3);
		for (; ox + 8 <= ow; ox += 8)
			direct_tile(l, y, x, w, b, k, o, no, oy, ox, 1);
		for (; ox < ow; ox++)
			for (int a = 0; a < no; a++)
				y[((size_t)(o + a) * oh + oy) * ow + ox] =
					direct_one(l, x, w, b, k, o + a, oy, ox);
	}
}

/* One sample: y (OC, OH, OW) = b + W * x, two channels at a time. */
static inline __attribute__((always_inline)) void direct_sample(const struct nn_layer *l, float *y,
								const float *x, const float *w,
								const float *b, const int k)
{
	int o = 0;

	for (; o + 2 <= l->out_c; o += 2)
		direct_channels(l, y, x, w, b, k, o, 2);
	if (o < l->out_c)
		direct_channels(l, y, x, w, b, k, o, 1);
}

/* One sample's forward for kernel size k (a constant where inlined with one). */
typedef void direct_sample_fn(const struct nn_layer *l, float *y, const float *x, const float *w,
			      const float *b, const int k);

/*
 * Every sample through sample(), inlined into each caller (so compiled
 * once per target), with k a constant for the kernel sizes of the
 * networks here, 5 and 3, so that the loops over the taps unroll.
 */
static inline __attribute__((always_inline)) void direct_forward(const struct nn_layer *l, float *out,
								 const float *in, const float *w,
								 const float *b, int n,
								 direct_sample_fn *sample)
{
	for (int i = 0; i < n; i++) {
		float *y = out + (size_t)i * l->out_size;
		const float *x = in + (size_t)i * l->in_size;

		if (l->k == 5)
			sample(l, y, x, w, b, 5);
		else if (l->k == 3)
			sample(l, y, x, w, b, 3);
		else
			sample(l, y, x, w, b, l->k);
	}
}

void pp_nn_conv2d_direct_forward_portable(const struct nn_layer *l, float *out, const float *in,
				    const float *w, const float *b, int n)
{
	direct_forward(l, out, in, w, b, n, direct_sample);
}

PP_TARGET_AVX2 void
pp_nn_conv2d_direct_forward_avx2(const struct nn_layer *l, float *out, const float *in, const float *w,
			   const float *b, int n)
{
	direct_forward(l, out, in, w, b, n, direct_sample);
}

/*
 * AVX-512: the outputs of channels o..o+no-1 at row oy, positions
 * ox..ox+31, as two 16-wide vectors per channel, the first masked by m0
 * and the second by m1 (the tail of a row: 24 = 16 + 8): no x 2 sums in
 * registers over all the C K K taps (12 for no = 6), each tap's weight
 * broadcast from memory into its FMA.  No input is read past the lanes
 * in the masks.  k and no are constants where inlined with them.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
direct512_tile(const struct nn_layer *l, float *y, const float *x, const float *w, const float *b,
	       const int k, int o, const int no, int oy, int ox, __mmask16 m0, __mmask16 m1)
{
	const int c = l->in_c, h = l->in_h, iw = l->in_w, oh = l->out_h, ow = l->out_w;
	const int ckk = c * k * k;
	__m512 acc[6][2];

#pragma GCC unroll 6
	for (int a = 0; a < no; a++)
		acc[a][0] = acc[a][1] = _mm512_set1_ps(b[o + a]);
	for (int ch = 0; ch < c; ch++)
#pragma GCC unroll 8
		for (int ky = 0; ky < k; ky++) {
			const float *xr = x + ((size_t)ch * h + oy + ky) * iw + ox;
			const float *wr = w + ((size_t)o * c + ch) * k * k + ky * k;

#pragma GCC unroll 8
			for (int kx = 0; kx < k; kx++) {
				const __m512 v0 = _mm512_maskz_loadu_ps(m0, xr + kx);
				const __m512 v1 = _mm512_maskz_loadu_ps(m1, xr + kx + 16);

#pragma GCC unroll 6
				for (int a = 0; a < no; a++) {
					const __m512 wv = _mm512_set1_ps(wr[(size_t)a * ckk + kx]);

					acc[a][0] = _mm512_fmadd_ps(wv, v0, acc[a][0]);
					acc[a][1] = _mm512_fmadd_ps(wv, v1, acc[a][1]);
				}
			}
		}
#pragma GCC unroll 6
	for (int a = 0; a < no; a++) {
		float *yr = y + ((size_t)(o + a) * oh + oy) * ow + ox;

		_mm512_mask_storeu_ps(yr, m0, acc[a][0]);
		_mm512_mask_storeu_ps(yr + 16, m1, acc[a][1]);
	}
}

/*
 * AVX-512, rows of 17 to 24 positions: the outputs of channels o..o+no-1
 * at rows oy and oy+1, three vectors per channel: the first 16 positions
 * of each row, and the tails of both (up to 8 positions each) in one
 * vector, lanes 0..7 and 8..15: three FMAs per tap for two rows where
 * direct512_tile() takes four.  k and no are constants where inlined
 * with them.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
direct512_tile_pair(const struct nn_layer *l, float *y, const float *x, const float *w,
		    const float *b, const int k, int o, const int no, int oy)
{
	const int c = l->in_c, h = l->in_h, iw = l->in_w, oh = l->out_h, ow = l->out_w;
	const int ckk = c * k * k;
	const __mmask8 mt = (__mmask8)nn_lanes16(ow - 16);
	__m512 acc[6][3];

#pragma GCC unroll 6
	for (int a = 0; a < no; a++)
		acc[a][0] = acc[a][1] = acc[a][2] = _mm512_set1_ps(b[o + a]);
	for (int ch = 0; ch < c; ch++)
#pragma GCC unroll 8
		for (int ky = 0; ky < k; ky++) {
			const float *x0 = x + ((size_t)ch * h + oy + ky) * iw, *x1 = x0 + iw;
			const float *wr = w + ((size_t)o * c + ch) * k * k + ky * k;

#pragma GCC unroll 8
			for (int kx = 0; kx < k; kx++) {
				const __m512 v0 = _mm512_loadu_ps(x0 + kx);
				const __m512 v1 = _mm512_loadu_ps(x1 + kx);
				const __m512 v2 = _mm512_insertf32x8(
					_mm512_castps256_ps512(_mm256_maskz_loadu_ps(mt, x0 + 16 + kx)),
					_mm256_maskz_loadu_ps(mt, x1 + 16 + kx), 1);

#pragma GCC unroll 6
				for (int a = 0; a < no; a++) {
					const __m512 wv = _mm512_set1_ps(wr[(size_t)a * ckk + kx]);

					acc[a][0] = _mm512_fmadd_ps(wv, v0, acc[a][0]);
					acc[a][1] = _mm512_fmadd_ps(wv, v1, acc[a][1]);
					acc[a][2] = _mm512_fmadd_ps(wv, v2, acc[a][2]);
				}
			}
		}
#pragma GCC unroll 6
	for (int a = 0; a < no; a++) {
		float *y0 = y + ((size_t)(o + a) * oh + oy) * ow, *y1 = y0 + ow;

		_mm512_storeu_ps(y0, acc[a][0]);
		_mm256_mask_storeu_ps(y0 + 16, mt, _mm512_castps512_ps256(acc[a][2]));
		_mm512_storeu_ps(y1, acc[a][1]);
		_mm256_mask_storeu_ps(y1 + 16, mt, _mm512_extractf32x8_ps(acc[a][2], 1));
	}
}

/*
 * AVX-512, rows of at most 8 positions (the second convolution of a small
 * image network, 8 x 8 outputs): the outputs of channels o..o+no-1 at
 * rows oy..oy+2 np-1, one vector per channel and pair of rows (lanes
 * 0..7 the first row, 8..15 the second; a row past the last, oy + 2 p + 1
 * = OH, masked off): no x np sums in registers (24 for no = 6, np = 4)
 * over all the C K K taps, so that each loaded pair of input rows serves
 * no channels.  k, no and np are constants where inlined with them.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
direct512_tile_rows8(const struct nn_layer *l, float *y, const float *x, const float *w,
		     const float *b, const int k, int o, const int no, int oy, const int np)
{
	const int c = l->in_c, h = l->in_h, iw = l->in_w, oh = l->out_h, ow = l->out_w;
	const int ckk = c * k * k;
	const __mmask8 m = (__mmask8)nn_lanes16(ow);
	__mmask8 m1[4];
	__m512 acc[6][4];

#pragma GCC unroll 4
	for (int p = 0; p < np; p++)
		m1[p] = oy + 2 * p + 1 < oh ? m : 0;
#pragma GCC unroll 6
	for (int a = 0; a < no; a++)
#pragma GCC unroll 4
		for (int p = 0; p < np; p++)
			acc[a][p] = _mm512_set1_ps(b[o + a]);
	for (int ch = 0; ch < c; ch++)
#pragma GCC unroll 8
		for (int ky = 0; ky < k; ky++) {
			const float *xr = x + ((size_t)ch * h + oy + ky) * iw;
			const float *wr = w + ((size_t)o * c + ch) * k * k + ky * k;

#pragma GCC unroll 8
			for (int kx = 0; kx < k; kx++) {
				__m512 v[4];

#pragma GCC unroll 4
				for (int p = 0; p < np; p++) {
					const float *x0 = xr + (size_t)(2 * p) * iw + kx;

					v[p] = _mm512_insertf32x8(
						_mm512_castps256_ps512(_mm256_maskz_loadu_ps(m, x0)),
						_mm256_maskz_loadu_ps(m1[p], x0 + iw), 1);
				}
#pragma GCC unroll 6
				for (int a = 0; a < no; a++) {
					const __m512 wv = _mm512_set1_ps(wr[(size_t)a * ckk + kx]);

#pragma GCC unroll 4
					for (int p = 0; p < np; p++)
						acc[a][p] = _mm512_fmadd_ps(wv, v[p], acc[a][p]);
				}
			}
		}
#pragma GCC unroll 6
	for (int a = 0; a < no; a++)
#pragma GCC unroll 4
		for (int p = 0; p < np; p++) {
			float *y0 = y + ((size_t)(o + a) * oh + oy + 2 * p) * ow;

			_mm256_mask_storeu_ps(y0, m, _mm512_castps512_ps256(acc[a][p]));
			_mm256_mask_storeu_ps(y0 + ow, m1[p], _mm512_extractf32x8_ps(acc[a][p], 1));
		}
}

/*
 * AVX-512: channels o..o+no-1 of one sample, each row 32 positions at a
 * time, the tail masked; rows of 17 to 24 positions two at a time; rows
 * of at most 8 positions eight at a time, then two (the last maybe alone).
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
direct512_channels(const struct nn_layer *l, float *y, const float *x, const float *w,
		   const float *b, const int k, int o, const int no)
{
	const int ow = l->out_w;
	int oy = 0;

	if (ow <= 8) {
		for (; oy + 8 <= l->out_h; oy += 8)
			direct512_tile_rows8(l, y, x, w, b, k, o, no, oy, 4);
		for (; oy < l->out_h; oy += 2)
			direct512_tile_rows8(l, y, x, w, b, k, o, no, oy, 1);
		return;
	}
	if (ow > 16 && ow <= 24)
		for (; oy + 2 <= l->out_h; oy += 2)
			direct512_tile_pair(l, y, x, w, b, k, o, no, oy);
	for (; oy < l->out_h; oy++)
		for (int ox = 0; ox < ow; ox += 32)
			direct512_tile(l, y, x, w, b, k, o, no, oy, ox, nn_lanes16(ow - ox),
				       nn_lanes16(ow - ox - 16));
}

/* AVX-512: one sample, six channels at a time, then two, then one. */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
direct512_sample(const struct nn_layer *l, float *y, const float *x, const float *w,
		 const float *b, const int k)
{
	int o = 0;

	for (; o + 6 <= l->out_c; o += 6)
		direct512_channels(l, y, x, w, b, k, o, 6);
	for (; o + 2 <= l->out_c; o += 2)
		direct512_channels(l, y, x, w, b, k, o, 2);
	if (o < l->out_c)
		direct512_channels(l, y, x, w, b, k, o, 1);
}

PP_TARGET_AVX512 void pp_nn_conv2d_direct_forward_avx512(const struct nn_layer *l, float *out, const float *in,
					    const float *w, const float *b, int n)
{
	direct_forward(l, out, in, w, b, n, direct512_sample);
}

/* The most taps (C K K) of a layer whose forward pp_nn_conv2d_forward() makes with the AVX-512 kernel */
#define DIRECT512_FORWARD_TAPS 1024

bool pp_nn_conv2d_direct_forward_fits512(const struct nn_layer *l)
{
	return l->kind == NN_CONV && l->stride == 1 && l->pad == 0 &&
	       (size_t)l->in_c * l->k * l->k <= DIRECT512_FORWARD_TAPS;
}

void pp_nn_conv2d_direct_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
			   const float *b, int n)
{
	const enum pp_isa isa = pp_isa_best();

	if (isa == PP_ISA_AVX512)
		pp_nn_conv2d_direct_forward_avx512(l, out, in, w, b, n);
	else if (isa == PP_ISA_AVX2)
		pp_nn_conv2d_direct_forward_avx2(l, out, in, w, b, n);
	else
		pp_nn_conv2d_direct_forward_portable(l, out, in, w, b, n);
}

/*
 * One sample's backward behind the pool: the pool's outputs in order
 * (channel, row, column), so that the selected position's channel and row
 * come from the loops and the window (no division).  The weight gradient
 * of a channel is summed in registers, one 8-wide vector per kernel row
 * (lanes k..7 unused), and added to dw once.  One input channel, k <= 8;
 * k is a constant where inlined with one.
 */
static inline __attribute__((always_inline)) void
direct_backward_sample(const struct nn_layer *l, const struct nn_layer *pool, float *dx, float *dw,
		       float *db, const float *dp, const int32_t *ix, const float *r,
		       const float *w, const float *x, const int k)
{
	const int iw = l->in_w, oc = l->out_c, pos = l->out_h * l->out_w, ow = l->out_w;
	const int s = pool->stride, ph = pool->out_h, pw = pool->out_w;

	for (int o = 0; o < oc; o++) {
		nn_f32x8 acc[8] = { { 0 } };
		float bsum = 0.0f;

		for (int py = 0; py < ph; py++)
			for (int px = 0; px < pw; px++, dp++, ix++) {
				const float g = *dp;
				int j = *ix - o * pos - py * s * ow, oy = py * s;

				if (g == 0.0f || (r && !(r[*ix] > 0.0f)))
					continue;
				while (j >= ow) {
					j -= ow;
					oy++;
				}
				bsum += g;
				const size_t row0 = (size_t)oy * iw + j;

				if (row0 + (size_t)(k - 1) * iw + 8 <= l->in_size) {
#pragma GCC unroll 8
					for (int ky = 0; ky < k; ky++) {
						nn_f32x8 v;

						memcpy(&v, x + row0 + (size_t)ky * iw, sizeof(v));
						acc[ky] += g * v;
					}
				} else {
#pragma GCC unroll 8
					for (int ky = 0; ky < k; ky++) {
						nn_f32x8 v = { 0 };

						memcpy(&v, x + row0 + (size_t)ky * iw, (size_t)k * sizeof(float));
						acc[ky] += g * v;
					}
				}
				if (dx)
					for (int ky = 0; ky < k; ky++)
						nn_axpy(dx + row0 + (size_t)ky * iw, g,
							w + ((size_t)o * k + ky) * k, k);
			}
		db[o] += bsum;
		for (int ky = 0; ky < k; ky++)
			for (int kx = 0; kx < k; kx++)
				dw[((size_t)o * k + ky) * k + kx] += acc[ky][kx];
	}
}

/* Every sample, memset of din included; compiled once per target. */
static inline __attribute__((always_inline)) void
direct_backward(const struct nn_layer *l, const struct nn_layer *pool, float *din, float *dw,
		float *db, const float *dpool, const int32_t *idx, const float *relu_out,
		const float *w, const float *in, int n)
{
	for (int i = 0; i < n; i++) {
		const float *dp = dpool + (size_t)i * pool->out_size;
		const int32_t *ix = idx + (size_t)i * pool->out_size;
		const float *r = relu_out ? relu_out + (size_t)i * l->out_size : NULL;
		const float *x = in + (size_t)i * l->in_size;
		float *dx = din ? din + (size_t)i * l->in_size : NULL;

		if (dx)
			memset(dx, 0, l->in_size * sizeof(float));
		if (l->k == 5)
			direct_backward_sample(l, pool, dx, dw, db, dp, ix, r, w, x, 5);
		else if (l->k == 3)
			direct_backward_sample(l, pool, dx, dw, db, dp, ix, r, w, x, 3);
		else
			direct_backward_sample(l, pool, dx, dw, db, dp, ix, r, w, x, l->k);
	}
}

void pp_nn_conv2d_direct_backward_pooled_portable(const struct nn_layer *l, const struct nn_layer *pool,
					    float *din, float *dw, float *db, const float *dpool,
					    const int32_t *idx, const float *relu_out,
					    const float *w, const float *in, int n)
{
	direct_backward(l, pool, din, dw, db, dpool, idx, relu_out, w, in, n);
}

PP_TARGET_AVX2 void
pp_nn_conv2d_direct_backward_pooled_avx2(const struct nn_layer *l, const struct nn_layer *pool,
				   float *din, float *dw, float *db, const float *dpool,
				   const int32_t *idx, const float *relu_out, const float *w,
				   const float *in, int n)
{
	direct_backward(l, pool, din, dw, db, dpool, idx, relu_out, w, in, n);
}

/* The most floats of a channel's padded output gradient in the AVX-512 backward (on the stack) */
#define DIRECT512_POSITIONS 4096
/* Its largest kernel (k x k sums in registers) */
#define DIRECT512_K 5

/* True when the AVX-512 backward takes the layer: k <= 5, and its gradient fits its buffer. */
static bool direct512_fits(const struct nn_layer *l)
{
	return l->k <= DIRECT512_K &&
	       (size_t)(l->out_h + 2 * (l->k - 1)) * l->out_w <= DIRECT512_POSITIONS;
}

/*
 * AVX-512: one channel o's output gradient of one sample, as the pool
 * sent it and the ReLU passed it, made dense in dz (OH, OW, zero on
 * entry; the value, and 0 where the ReLU blocked, stored without a
 * branch), its sum added to *bsum in the pool's order; when dx is not
 * NULL the input gradient added window by window as
 * direct_backward_sample().
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
direct512_dense_dy(const struct nn_layer *l, const struct nn_layer *pool, float *dz, float *dx,
		   float *bsum, const float *dp, const int32_t *ix, const float *r, const float *w,
		   int o)
{
	const int k = l->k, iw = l->in_w, pos = l->out_h * l->out_w, ow = l->out_w;
	const int np = pool->out_h * pool->out_w;

	if (r) {
		for (int q = 0; q < np; q++) {
			const float g = r[ix[q]] > 0.0f ? dp[q] : 0.0f;

			dz[ix[q] - o * pos] = g;
			*bsum += g;
		}
	} else {
		for (int q = 0; q < np; q++) {
			dz[ix[q] - o * pos] = dp[q];
			*bsum += dp[q];
		}
	}
	if (!dx)
		return;
	for (int q = 0; q < np; q++) {
		const int j = ix[q] - o * pos;
		const float g = dz[j];

		if (g == 0.0f)
			continue;
		const size_t row0 = (size_t)(j / ow) * iw + (size_t)(j % ow);

		for (int ky = 0; ky < k; ky++)
			nn_axpy(dx + row0 + (size_t)ky * iw, g, w + ((size_t)o * k + ky) * k, k);
	}
}

/* AVX-512: dz zero again where direct512_dense_dy() wrote it (no call: the sums stay in registers). */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
direct512_clear_dy(const struct nn_layer *l, const struct nn_layer *pool, float *dz,
		   const int32_t *ix, int o)
{
	const int np = pool->out_h * pool->out_w, base = o * l->out_h * l->out_w;

	for (int q = 0; q < np; q++)
		dz[ix[q] - base] = 0.0f;
}

/*
 * AVX-512 backward behind the pool, one input channel: output channel by
 * output channel over all n samples, the weight gradient as the dense
 * correlation of the channel's output gradient with the input.  The
 * gradient is made dense in dz (see direct512_dense_dy(); K - 1 zero
 * rows above and below).  Then input row by input row, 16 positions at
 * a time (the row's tail masked): the K shifted input vectors loaded
 * once each serve the K kernel rows (the output rows iy - ky), one
 * 16-wide sum in registers per tap (25 for k = 5, the most it takes)
 * over all the samples, reduced once.  Four times the multiplications
 * of the sparse walk but no branch on each selected position.  k is a
 * constant where inlined with one.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
direct512_backward(const struct nn_layer *l, const struct nn_layer *pool, float *din, float *dw,
		   float *db, const float *dpool, const int32_t *idx, const float *relu_out,
		   const float *w, const float *in, int n, const int k)
{
	const int iw = l->in_w, ih = l->in_h, oh = l->out_h, ow = l->out_w;
	const size_t np = (size_t)pool->out_h * pool->out_w;
	float dzbuf[DIRECT512_POSITIONS];
	float *dz = dzbuf + (size_t)(k - 1) * ow; /* row 0 of the gradient */

	memset(dzbuf, 0, (size_t)(oh + 2 * (k - 1)) * ow * sizeof(float));
	if (din)
		memset(din, 0, (size_t)n * l->in_size * sizeof(float));
	for (int o = 0; o < l->out_c; o++) {
		__m512 acc[DIRECT512_K][DIRECT512_K];
		float bsum = 0.0f;

#pragma GCC unroll 5
		for (int ky = 0; ky < k; ky++)
#pragma GCC unroll 5
			for (int kx = 0; kx < k; kx++)
				acc[ky][kx] = _mm512_setzero_ps();
		for (int i = 0; i < n; i++) {
			const size_t p0 = (size_t)i * pool->out_size + (size_t)o * np;
			const float *x = in + (size_t)i * l->in_size;

			direct512_dense_dy(l, pool, dz, din ? din + (size_t)i * l->in_size : NULL,
					   &bsum, dpool + p0, idx + p0,
					   relu_out ? relu_out + (size_t)i * l->out_size : NULL, w, o);
			for (int ox = 0; ox < ow; ox += 16) {
				const __mmask16 m = nn_lanes16(ow - ox);

				for (int iy = 0; iy < ih; iy++) {
					const float *xr = x + (size_t)iy * iw + ox;
					const float *dr = dz + (ptrdiff_t)iy * ow + ox;
					__m512 xv[DIRECT512_K];

#pragma GCC unroll 5
					for (int kx = 0; kx < k; kx++)
						xv[kx] = _mm512_maskz_loadu_ps(m, xr + kx);
#pragma GCC unroll 5
					for (int ky = 0; ky < k; ky++) {
						const __m512 d =
							_mm512_maskz_loadu_ps(m, dr - (ptrdiff_t)ky * ow);

#pragma GCC unroll 5
						for (int kx = 0; kx < k; kx++)
							acc[ky][kx] = _mm512_fmadd_ps(d, xv[kx], acc[ky][kx]);
					}
				}
			}
			direct512_clear_dy(l, pool, dz, idx + p0, o);
		}
		db[o] += bsum;
#pragma GCC unroll 5
		for (int ky = 0; ky < k; ky++)
#pragma GCC unroll 5
			for (int kx = 0; kx < k; kx++)
				dw[((size_t)o * k + ky) * k + kx] += _mm512_reduce_add_ps(acc[ky][kx]);
	}
}

/* The most input rows of a layer that direct512_backward_paired() takes (its scratch is on the stack) */
#define PAIRED_ROWS 32
/* The samples whose input tails it lays out at a time */
#define PAIRED_BLOCK 8

/*
 * True when the AVX-512 backward takes the layer with its rows paired
 * (direct512_backward_paired()): no input gradient wanted, output rows of
 * 17 to 24 positions, at most PAIRED_ROWS input rows, a 2x2 pool of stride 2.
 */
static bool paired_fits(const struct nn_layer *l, const struct nn_layer *pool, const float *din)
{
	return !din && l->k <= DIRECT512_K && l->out_w > 16 && l->out_w <= 24 &&
	       l->in_h <= PAIRED_ROWS && pool->k == 2 && pool->stride == 2;
}

/*
 * AVX-512: channel o's output gradient of one sample made dense without a
 * branch or a scattered store: row y of the gradient is pool row y / 2
 * spread over two lanes per window (a permutation), kept where the pool's
 * index is that position (and, behind a ReLU, the convolution's output
 * there is positive), zero elsewhere.  Columns 0..15 of row y go to d16
 * (16 floats a row), columns 16..OW-1 to d8 (8 floats a row, zero past
 * OW), rows 0..2 PH-1; the rest of both stays as it was (zero).  Returns
 * bsum plus the rows.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) __m512
paired_dense_dy(const struct nn_layer *l, const struct nn_layer *pool, float *d16, float *d8,
		const float *dp, const int32_t *ix, const float *r, int o, __m512 bsum)
{
	const int ow = l->out_w, pw = pool->out_w, base = o * l->out_h * ow;
	const __mmask16 mp = nn_lanes16(pw), mt = nn_lanes16(ow - 16);
	const __m512i lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
	const __m512i hi = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15,
					     15);
	const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const __m512i sixteen = _mm512_set1_epi32(16);
	const __m512 zero = _mm512_setzero_ps();

	for (int y = 0; y < 2 * pool->out_h; y++) {
		const __m512 g = _mm512_maskz_loadu_ps(mp, dp + (size_t)(y >> 1) * pw);
		const __m512i q = _mm512_maskz_loadu_epi32(mp, ix + (size_t)(y >> 1) * pw);
		const __m512i pos = _mm512_add_epi32(iota, _mm512_set1_epi32(base + y * ow));
		__mmask16 m0 = _mm512_cmpeq_epi32_mask(_mm512_permutexvar_epi32(lo, q), pos);
		__mmask16 m1 = _mm512_mask_cmpeq_epi32_mask(mt, _mm512_permutexvar_epi32(hi, q),
							    _mm512_add_epi32(pos, sixteen));

		if (r) {
			const float *rr = r + base + (size_t)y * ow;

			m0 = _mm512_mask_cmp_ps_mask(m0, _mm512_loadu_ps(rr), zero, _CMP_GT_OQ);
			m1 = _mm512_mask_cmp_ps_mask(m1, _mm512_maskz_loadu_ps(mt, rr + 16), zero,
						     _CMP_GT_OQ);
		}
		const __m512 v0 = _mm512_maskz_permutexvar_ps(m0, lo, g);
		const __m512 v1 = _mm512_maskz_permutexvar_ps(m1, hi, g);

		_mm512_store_ps(d16 + (size_t)y * 16, v0);
		_mm256_store_ps(d8 + (size_t)y * 8, _mm512_castps512_ps256(v1));
		bsum = _mm512_add_ps(bsum, _mm512_add_ps(v0, v1));
	}
	return bsum;
}

/*
 * AVX-512: the k x k sums acc gain input row iy's (16 positions from xr,
 * shifted by kx) products with the gradient rows iy - ky (16 floats a row
 * from d, row 0 at d); 'step' is the floats from one gradient row to the
 * next.  Inlined, with acc in registers.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
paired_row(__m512 acc[DIRECT512_K][DIRECT512_K], const float *xr, ptrdiff_t xstep, const float *d,
	   int iy, int step, const int k)
{
	__m512 xv[DIRECT512_K] = { 0 }; /* (all set for k; GCC cannot tell where k is not constant) */

#pragma GCC unroll 5
	for (int kx = 0; kx < k; kx++)
		xv[kx] = _mm512_loadu_ps(xr + (ptrdiff_t)kx * xstep);
#pragma GCC unroll 5
	for (int ky = 0; ky < k; ky++) {
		const __m512 dv = _mm512_loadu_ps(d + (ptrdiff_t)(iy - ky) * step);

#pragma GCC unroll 5
		for (int kx = 0; kx < k; kx++)
			acc[ky][kx] = _mm512_fmadd_ps(dv, xv[kx], acc[ky][kx]);
	}
}

/*
 * AVX-512 backward behind a 2x2 pool of stride 2, one input channel, no
 * input gradient (the first layer), output rows of 17 to 24 positions
 * (paired_fits()): direct512_backward() with every lane used.  Each input
 * row's first 16 positions are taken as there; the tails (positions 16..,
 * at most 8) of two consecutive rows are one vector, from a copy of the
 * block's inputs where the tails shifted by kx are rows of 8 floats in a
 * row (x8, a zero row after the last), and the gradient's tails likewise
 * (d8): three FMAs per tap for two rows where direct512_backward() takes
 * four, and no row of zeros past the input.  The gradient is made dense
 * without a branch (paired_dense_dy()).  Blocks of PAIRED_BLOCK samples,
 * whose tails are laid out once for all the output channels; each
 * channel's sums are added to dw once per block.  k is a constant where
 * inlined with one.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
direct512_backward_paired(const struct nn_layer *l, const struct nn_layer *pool, float *dw,
			  float *db, const float *dpool, const int32_t *idx,
			  const float *relu_out, const float *in, int n, const int k)
{
	enum { PAD = DIRECT512_K - 1, ROWS = PAIRED_ROWS + 2 * PAD + 1 };
	const int iw = l->in_w, ih = l->in_h, oh = l->out_h;
	const size_t np = (size_t)pool->out_h * pool->out_w;
	const __mmask8 mt = (__mmask8)nn_lanes16(l->out_w - 16);
	float x8[PAIRED_BLOCK][DIRECT512_K][PAIRED_ROWS + 1][8] __attribute__((aligned(64)));
	float d16buf[ROWS * 16] __attribute__((aligned(64)));
	float d8buf[ROWS * 8] __attribute__((aligned(64)));
	float *d16 = d16buf + (size_t)(k - 1) * 16, *d8 = d8buf + (size_t)(k - 1) * 8; /* row 0 */

	memset(d16buf, 0, (size_t)(oh + 2 * (k - 1) + 1) * 16 * sizeof(float));
	memset(d8buf, 0, (size_t)(oh + 2 * (k - 1) + 1) * 8 * sizeof(float));
	for (int i0 = 0; i0 < n; i0 += PAIRED_BLOCK) {
		const int nb = n - i0 < PAIRED_BLOCK ? n - i0 : PAIRED_BLOCK;

		for (int s = 0; s < nb; s++) {
			const float *x = in + (size_t)(i0 + s) * l->in_size;

			for (int kx = 0; kx < k; kx++) {
				float *t = &x8[s][kx][0][0];

				for (int iy = 0; iy < ih; iy++)
					_mm256_store_ps(t + (size_t)iy * 8,
							_mm256_maskz_loadu_ps(mt, x + (size_t)iy * iw + 16 + kx));
				_mm256_store_ps(t + (size_t)ih * 8, _mm256_setzero_ps());
			}
		}
		for (int o = 0; o < l->out_c; o++) {
			__m512 acc[DIRECT512_K][DIRECT512_K];
			__m512 bsum = _mm512_setzero_ps();

#pragma GCC unroll 5
			for (int ky = 0; ky < k; ky++)
#pragma GCC unroll 5
				for (int kx = 0; kx < k; kx++)
					acc[ky][kx] = _mm512_setzero_ps();
			for (int s = 0; s < nb; s++) {
				const size_t i = (size_t)(i0 + s), p0 = i * pool->out_size + (size_t)o * np;
				const float *x = in + i * l->in_size;

				bsum = paired_dense_dy(l, pool, d16, d8, dpool + p0, idx + p0,
						       relu_out ? relu_out + i * l->out_size : NULL, o,
						       bsum);
				for (int iy = 0; iy < ih; iy += 2) {
					paired_row(acc, x + (size_t)iy * iw, 1, d16, iy, 16, k);
					if (iy + 1 < ih)
						paired_row(acc, x + (size_t)(iy + 1) * iw, 1, d16, iy + 1,
							   16, k);
					paired_row(acc, &x8[s][0][iy][0], (PAIRED_ROWS + 1) * 8, d8, iy,
						   8, k);
				}
			}
			db[o] += _mm512_reduce_add_ps(bsum);
#pragma GCC unroll 5
			for (int ky = 0; ky < k; ky++)
#pragma GCC unroll 5
				for (int kx = 0; kx < k; kx++)
					dw[((size_t)o * k + ky) * k + kx] += _mm512_reduce_add_ps(acc[ky][kx]);
		}
	}
}

PP_TARGET_AVX512 void pp_nn_conv2d_direct_backward_pooled_avx512(const struct nn_layer *l,
						    const struct nn_layer *pool, float *din,
						    float *dw, float *db, const float *dpool,
						    const int32_t *idx, const float *relu_out,
						    const float *w, const float *in, int n)
{
	if (paired_fits(l, pool, din)) {
		if (l->k == 5)
			direct512_backward_paired(l, pool, dw, db, dpool, idx, relu_out, in, n, 5);
		else if (l->k == 3)
			direct512_backward_paired(l, pool, dw, db, dpool, idx, relu_out, in, n, 3);
		else
			direct512_backward_paired(l, pool, dw, db, dpool, idx, relu_out, in, n, l->k);
		return;
	}
	switch (l->k) {
	case 5:
		direct512_backward(l, pool, din, dw, db, dpool, idx, relu_out, w, in, n, 5);
		break;
	case 4:
		direct512_backward(l, pool, din, dw, db, dpool, idx, relu_out, w, in, n, 4);
		break;
	case 3:
		direct512_backward(l, pool, din, dw, db, dpool, idx, relu_out, w, in, n, 3);
		break;
	default:
		direct512_backward(l, pool, din, dw, db, dpool, idx, relu_out, w, in, n, l->k);
		break;
	}
}

void pp_nn_conv2d_direct_backward_pooled(const struct nn_layer *l, const struct nn_layer *pool,
				   float *din, float *dw, float *db, const float *dpool,
				   const int32_t *idx, const float *relu_out, const float *w,
				   const float *in, int n)
{
	const enum pp_isa isa = pp_isa_best();

	if (isa == PP_ISA_AVX512 && direct512_fits(l))
		pp_nn_conv2d_direct_backward_pooled_avx512(l, pool, din, dw, db, dpool, idx, relu_out, w,
						     in, n);
	else if (isa != PP_ISA_BASE)
		pp_nn_conv2d_direct_backward_pooled_avx2(l, pool, din, dw, db, dpool, idx, relu_out, w, in,
						   n);
	else
		pp_nn_conv2d_direct_backward_pooled_portable(l, pool, din, dw, db, dpool, idx, relu_out, w,
						       in, n);
}
