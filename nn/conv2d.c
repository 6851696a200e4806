/*
 * nn/conv2d.c: Conv2d (stride, zero padding) on the CPU by im2col and one
 * GEMM per sample, so that the column buffer of a sample stays in cache.
 * Shapes (one sample): in (C, H, W), W (OC, C, K, K) as PyTorch's
 * nn.Conv2d, col (C K K, OH OW), out (OC, OH OW).
 */
#include "config.h"

#include <cblas.h>
#include <string.h>

#include "nn/nn_internal.h"

/* col (C K K, OH OW) from one sample x (C, H, W) */
static void im2col(const struct nn_layer *l, float *col, const float *x)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, k = l->k, s = l->stride, p = l->pad;
	const int oh = l->out_h, ow = l->out_w;

	for (int ch = 0; ch < c; ch++)
		for (int ky = 0; ky < k; ky++)
			for (int kx = 0; kx < k; kx++) {
				float *row = col + (size_t)((ch * k + ky) * k + kx) * oh * ow;

				for (int oy = 0; oy < oh; oy++) {
					int iy = oy * s - p + ky;
					float *r = row + (size_t)oy * ow;

					if (iy < 0 || iy >= h) {
						memset(r, 0, (size_t)ow * sizeof(float));
						continue;
					}
					const float *xr = x + ((size_t)ch * h + iy) * w;
					for (int ox = 0; ox < ow; ox++) {
						int ix = ox * s - p + kx;

						r[ox] = ix >= 0 && ix < w ? xr[ix] : 0.0f;
					}
				}
			}
}

/* dx (C, H, W) += the columns of dcol (C K K, OH OW) put back where im2col took them */
static void col2im(const struct nn_layer *l, float *dx, const float *dcol)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, k = l->k, s = l->stride, p = l->pad;
	const int oh = l->out_h, ow = l->out_w;

	for (int ch = 0; ch < c; ch++)
		for (int ky = 0; ky < k; ky++)
			for (int kx = 0; kx < k; kx++) {
				const float *row = dcol + (size_t)((ch * k + ky) * k + kx) * oh * ow;

				for (int oy = 0; oy < oh; oy++) {
					int iy = oy * s - p + ky;

					if (iy < 0 || iy >= h)
						continue;
					float *xr = dx + ((size_t)ch * h + iy) * w;
					const float *r = row + (size_t)oy * ow;
					for (int ox = 0; ox < ow; ox++) {
						int ix = ox * s - p + kx;

						if (ix >= 0 && ix < w)
							xr[ix] += r[ox];
					}
				}
			}
}

void conv2d_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
		    const float *b, float *col, int n)
{
	const int oc = l->out_c, kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;

	for (int i = 0; i < n; i++) {
		float *y = out + (size_t)i * l->out_size;

		im2col(l, col, in + (size_t)i * l->in_size);
		for (int o = 0; o < oc; o++)
			for (int j = 0; j < pos; j++)
				y[(size_t)o * pos + j] = b[o];
		/* y (OC, P) += W (OC, CKK) . col (CKK, P) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, oc, pos, kk, 1.0f, w, kk, col,
			    pos, 1.0f, y, pos);
	}
}

void conv2d_backward(const struct nn_layer *l, float *din, float *dw, float *db,
		     const float *dout, const float *in, const float *w, float *col,
		     float *dcol, int n)
{
	const int oc = l->out_c, kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;

	for (int i = 0; i < n; i++) {
		const float *dy = dout + (size_t)i * l->out_size;

		for (int o = 0; o < oc; o++) {
			float s = 0.0f;

			for (int j = 0; j < pos; j++)
				s += dy[(size_t)o * pos + j];
			db[o] += s;
		}
		im2col(l, col, in + (size_t)i * l->in_size);
		/* dW (OC, CKK) += dy (OC, P) . col^T (P, CKK) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, oc, kk, pos, 1.0f, dy, pos, col,
			    pos, 1.0f, dw, kk);
		if (!din)
			continue;
		/* dcol (CKK, P) = W^T (CKK, OC) . dy (OC, P) */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kk, pos, oc, 1.0f, w, kk, dy, pos,
			    0.0f, dcol, pos);
		float *dx = din + (size_t)i * l->in_size;
		memset(dx, 0, l->in_size * sizeof(float));
		col2im(l, dx, dcol);
	}
}
