/*
 * nn/conv2d.c: Conv2d (stride, zero padding) on the CPU by im2col and one
 * GEMM per sample; the backward reuses the forward's columns.
 * Shapes (one sample): in (C, H, W), W (OC, C, K, K) as PyTorch's
 * nn.Conv2d, col (OH OW, C K K), out (OC, OH OW).  When a max-pool
 * follows (after a ReLU or not), the backward takes the pool's and the
 * ReLU's too, and visits only the positions the pool selected (one per
 * window); otherwise it uses GEMMs.
 */
#include "config.h"

#include <cblas.h>
#include <string.h>

#include "nn/nn_internal.h"

/* Copies k floats; constant sizes for the common kernels, so that the copy is inlined. */
static inline void copy_run(float *dst, const float *src, int k)
{
	switch (k) {
	case 3:
		memcpy(dst, src, 3 * sizeof(float));
		break;
	case 5:
		memcpy(dst, src, 5 * sizeof(float));
		break;
	default:
		memcpy(dst, src, (size_t)k * sizeof(float));
		break;
	}
}

/*
 * im2col for stride 1 without padding, every window inside the input:
 * input row by input row, each run of k floats copied to the rows of
 * successive output positions.  k is a constant where inlined with one.
 */
static inline __attribute__((always_inline)) void im2col_valid(const struct nn_layer *l, float *col,
							       const float *x, const int k)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, oh = l->out_h, ow = l->out_w;
	const int kk = c * k * k;

	for (int ch = 0; ch < c; ch++)
		for (int ky = 0; ky < k; ky++)
			for (int oy = 0; oy < oh; oy++) {
				const float *xr = x + ((size_t)ch * h + oy + ky) * w;
				float *r = col + (size_t)oy * ow * kk + (ch * k + ky) * k;

				for (int ox = 0; ox < ow; ox++, r += kk)
					memcpy(r, xr + ox, (size_t)k * sizeof(float));
			}
}

/* col (OH OW, C K K): one row per output position, from one sample x (C, H, W) */
static void im2col(const struct nn_layer *l, float *col, const float *x)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, k = l->k, s = l->stride, p = l->pad;
	const int oh = l->out_h, ow = l->out_w, kk = c * k * k;

	if (s == 1 && p == 0) {
		if (k == 5)
			im2col_valid(l, col, x, 5);
		else if (k == 3)
			im2col_valid(l, col, x, 3);
		else
			im2col_valid(l, col, x, k);
		return;
	}

	for (int oy = 0; oy < oh; oy++)
		for (int ox = 0; ox < ow; ox++) {
			float *row = col + (size_t)(oy * ow + ox) * kk;

			for (int ch = 0; ch < c; ch++)
				for (int ky = 0; ky < k; ky++) {
					int iy = oy * s - p + ky, ix = ox * s - p;
					float *r = row + (ch * k + ky) * k;

					if (iy < 0 || iy >= h) {
						memset(r, 0, (size_t)k * sizeof(float));
						continue;
					}
					const float *xr = x + ((size_t)ch * h + iy) * w;
					if (ix >= 0 && ix + k <= w) {
						copy_run(r, xr + ix, k);
						continue;
					}
					for (int kx = 0; kx < k; kx++)
						r[kx] = ix + kx >= 0 && ix + kx < w ? xr[ix + kx] : 0.0f;
				}
		}
}

/* dx (C, H, W) += the rows of dcol (OH OW, C K K) put back where im2col took them */
static void col2im(const struct nn_layer *l, float *dx, const float *dcol)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, k = l->k, s = l->stride, p = l->pad;
	const int oh = l->out_h, ow = l->out_w, kk = c * k * k;

	for (int oy = 0; oy < oh; oy++)
		for (int ox = 0; ox < ow; ox++) {
			const float *row = dcol + (size_t)(oy * ow + ox) * kk;

			for (int ch = 0; ch < c; ch++)
				for (int ky = 0; ky < k; ky++) {
					int iy = oy * s - p + ky;

					if (iy < 0 || iy >= h)
						continue;
					float *xr = dx + ((size_t)ch * h + iy) * w;
					const float *r = row + (ch * k + ky) * k;
					const int ix = ox * s - p;

					if (ix >= 0 && ix + k <= w) {
						nn_axpy(xr + ix, 1.0f, r, k);
						continue;
					}
					for (int kx = 0; kx < k; kx++)
						if (ix + kx >= 0 && ix + kx < w)
							xr[ix + kx] += r[kx];
				}
		}
}

void conv2d_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
		    const float *b, float *col, int n)
{
	const int oc = l->out_c, kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;

	for (int i = 0; i < n; i++) {
		float *y = out + (size_t)i * l->out_size;
		float *c = col + (size_t)i * pos * kk;

		im2col(l, c, in + (size_t)i * l->in_size);
		for (int o = 0; o < oc; o++)
			for (int j = 0; j < pos; j++)
				y[(size_t)o * pos + j] = b[o];
		/* y (OC, P) += W (OC, CKK) . col^T (CKK, P) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, oc, pos, kk, 1.0f, w, kk, c, kk,
			    1.0f, y, pos);
	}
}

void conv2d_backward(const struct nn_layer *l, float *din, float *dw, float *db,
		     const float *dout, const float *w, const float *cols, float *dcol, int n)
{
	const int oc = l->out_c, kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;

	for (int i = 0; i < n; i++) {
		const float *dy = dout + (size_t)i * l->out_size;
		const float *col = cols + (size_t)i * pos * kk;

		for (int o = 0; o < oc; o++) {
			float s = 0.0f;

			for (int j = 0; j < pos; j++)
				s += dy[(size_t)o * pos + j];
			db[o] += s;
		}
		/* dW (OC, CKK) += dy (OC, P) . col (P, CKK) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, oc, kk, pos, 1.0f, dy, pos, col,
			    kk, 1.0f, dw, kk);
		if (!din)
			continue;
		/* dcol (P, CKK) = dy^T (P, OC) . W (OC, CKK) */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, pos, kk, oc, 1.0f, dy, pos, w, kk,
			    0.0f, dcol, kk);
		float *dx = din + (size_t)i * l->in_size;
		memset(dx, 0, l->in_size * sizeof(float));
		col2im(l, dx, dcol);
	}
}

void conv2d_backward_pooled(const struct nn_layer *l, const struct nn_layer *pool, float *din,
			    float *dw, float *db, const float *dpool, const int32_t *idx,
			    const float *relu_out, const float *w, const float *cols, float *dcol,
			    int n)
{
	const int kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;

	for (int i = 0; i < n; i++) {
		const float *dp = dpool + (size_t)i * pool->out_size;
		const int32_t *ix = idx + (size_t)i * pool->out_size;
		const float *r = relu_out ? relu_out + (size_t)i * l->out_size : NULL;
		const float *col = cols + (size_t)i * pos * kk;

		if (din)
			memset(dcol, 0, (size_t)pos * kk * sizeof(float));
		for (size_t q = 0; q < pool->out_size; q++) {
			const float g = dp[q];
			const int at = ix[q], o = at / pos, j = at % pos;

			if (g == 0.0f || (r && !(r[at] > 0.0f)))
				continue;
			db[o] += g;
			nn_axpy(dw + (size_t)o * kk, g, col + (size_t)j * kk, kk);
			if (din)
				nn_axpy(dcol + (size_t)j * kk, g, w + (size_t)o * kk, kk);
		}
		if (!din)
			continue;
		float *dx = din + (size_t)i * l->in_size;
		memset(dx, 0, l->in_size * sizeof(float));
		col2im(l, dx, dcol);
	}
}
