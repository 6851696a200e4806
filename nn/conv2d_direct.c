/*
 * nn/conv2d_direct.c: Conv2d at stride 1 without padding, computed
 * directly from the input (no im2col columns, no GEMM), for the layers
 * where a GEMM is too thin to pay for its columns: few input channels
 * (the first layer of an image network, 1 channel, 6 outputs).  Each
 * output row is made 8 positions at a time, the 8 sums kept in registers
 * across all the taps.  Two versions of the forward: 8-wide AVX2 with FMA,
 * chosen at run time where the CPU has them, and a portable one for the
 * others (baseline x86-64), correct but slower than im2col + GEMM (GCC
 * keeps 8-float vectors in memory on SSE): a model takes this file's
 * path only where the CPU has AVX2 and FMA (conv2d_direct_fits()).  The backward, behind a ReLU and
 * a max-pool with stride >= kernel, visits only the positions the pool
 * selected and reads the input windows in place of the columns; it too
 * has the two versions.
 * Shapes (one sample): in (C, H, W), W (OC, C, K, K), out (OC, OH, OW).
 */
#include "config.h"

#include <string.h>

#include "nn/nn_internal.h"

/* 8 floats, one AVX register (kept in memory where AVX is not enabled) */
typedef float nn_f32x8 __attribute__((vector_size(32)));

bool conv2d_direct_fits(const struct nn_layer *l)
{
	return l->kind == NN_CONV && l->stride == 1 && l->pad == 0 && l->in_c == 1 && l->k <= 8 &&
	       l->sparse_dout && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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

/* Every sample; compiled once per target. */
static inline __attribute__((always_inline)) void direct_forward(const struct nn_layer *l, float *out,
								 const float *in, const float *w,
								 const float *b, int n)
{
	for (int i = 0; i < n; i++) {
		float *y = out + (size_t)i * l->out_size;
		const float *x = in + (size_t)i * l->in_size;

		if (l->k == 5)
			direct_sample(l, y, x, w, b, 5);
		else if (l->k == 3)
			direct_sample(l, y, x, w, b, 3);
		else
			direct_sample(l, y, x, w, b, l->k);
	}
}

void conv2d_direct_forward_portable(const struct nn_layer *l, float *out, const float *in,
				    const float *w, const float *b, int n)
{
	direct_forward(l, out, in, w, b, n);
}

__attribute__((target("avx2,fma"))) void
conv2d_direct_forward_avx2(const struct nn_layer *l, float *out, const float *in, const float *w,
			   const float *b, int n)
{
	direct_forward(l, out, in, w, b, n);
}

void conv2d_direct_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
			   const float *b, int n)
{
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		conv2d_direct_forward_avx2(l, out, in, w, b, n);
	else
		conv2d_direct_forward_portable(l, out, in, w, b, n);
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

void conv2d_direct_backward_pooled_portable(const struct nn_layer *l, const struct nn_layer *pool,
					    float *din, float *dw, float *db, const float *dpool,
					    const int32_t *idx, const float *relu_out,
					    const float *w, const float *in, int n)
{
	direct_backward(l, pool, din, dw, db, dpool, idx, relu_out, w, in, n);
}

__attribute__((target("avx2,fma"))) void
conv2d_direct_backward_pooled_avx2(const struct nn_layer *l, const struct nn_layer *pool,
				   float *din, float *dw, float *db, const float *dpool,
				   const int32_t *idx, const float *relu_out, const float *w,
				   const float *in, int n)
{
	direct_backward(l, pool, din, dw, db, dpool, idx, relu_out, w, in, n);
}

void conv2d_direct_backward_pooled(const struct nn_layer *l, const struct nn_layer *pool,
				   float *din, float *dw, float *db, const float *dpool,
				   const int32_t *idx, const float *relu_out, const float *w,
				   const float *in, int n)
{
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		conv2d_direct_backward_pooled_avx2(l, pool, din, dw, db, dpool, idx, relu_out, w, in,
						   n);
	else
		conv2d_direct_backward_pooled_portable(l, pool, din, dw, db, dpool, idx, relu_out, w,
						       in, n);
}
