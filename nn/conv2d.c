/*
 * nn/conv2d.c: Conv2d (stride, zero padding) on the CPU by im2col and one
 * GEMM per sample; the backward reuses the forward's columns.
 * Shapes (one sample): in (C, H, W), W (OC, C, K, K) as PyTorch's
 * nn.Conv2d, col (OH OW, C K K), out (OC, OH OW).  When a max-pool
 * follows, the backward visits only the positions with a gradient (at most
 * one per pooling window) and uses GEMMs otherwise.
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

/* col (OH OW, C K K): one row per output position, from one sample x (C, H, W) */
static void im2col(const struct nn_layer *l, float *col, const float *x)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, k = l->k, s = l->stride, p = l->pad;
	const int oh = l->out_h, ow = l->out_w, kk = c * k * k;

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

/*
 * The gradients of one sample when most of dy is zero, as behind a ReLU and
 * a max-pool, which pass gradient to at most one position of each window:
 * only the positions with a gradient contribute, each as one row of col
 * (to dW) and of dcol (from W; dcol may be NULL).
 */
static void backward_sparse(int oc, int kk, int pos, float *dw, float *db, const float *dy,
			    const float *col, const float *w, float *dcol)
{
	if (dcol)
		memset(dcol, 0, (size_t)pos * kk * sizeof(float));
	for (int o = 0; o < oc; o++)
		for (int j = 0; j < pos; j++) {
			const float g = dy[(size_t)o * pos + j];

			if (g == 0.0f)
				continue;
			db[o] += g;
			nn_axpy(dw + (size_t)o * kk, g, col + (size_t)j * kk, kk);
			if (dcol)
				nn_axpy(dcol + (size_t)j * kk, g, w + (size_t)o * kk, kk);
		}
}

void conv2d_backward(const struct nn_layer *l, float *din, float *dw, float *db,
		     const float *dout, const float *w, const float *cols, float *dcol, int n)
{
	const int oc = l->out_c, kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;

	for (int i = 0; i < n; i++) {
		const float *dy = dout + (size_t)i * l->out_size;
		const float *col = cols + (size_t)i * pos * kk;

		if (l->sparse_dout) {
			backward_sparse(oc, kk, pos, dw, db, dy, col, w, din ? dcol : NULL);
		} else {
			for (int o = 0; o < oc; o++) {
				float s = 0.0f;

				for (int j = 0; j < pos; j++)
					s += dy[(size_t)o * pos + j];
				db[o] += s;
			}
			/* dW (OC, CKK) += dy (OC, P) . col (P, CKK) */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, oc, kk, pos, 1.0f, dy, pos,
				    col, kk, 1.0f, dw, kk);
			/* dcol (P, CKK) = dy^T (P, OC) . W (OC, CKK) */
			if (din)
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, pos, kk, oc, 1.0f, dy,
					    pos, w, kk, 0.0f, dcol, kk);
		}
		if (!din)
			continue;
		float *dx = din + (size_t)i * l->in_size;
		memset(dx, 0, l->in_size * sizeof(float));
		col2im(l, dx, dcol);
	}
}
