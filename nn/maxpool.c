/*
 * nn/maxpool.c: MaxPool2d (no padding) on the CPU.  The forward keeps the
 * index of each window's maximum (the first one, as PyTorch's CPU kernel),
 * so the backward routes each gradient to it.
 */
#include "config.h"

#include <string.h>

#include "nn/nn_internal.h"

/* The common 2x2 window with stride 2, unrolled; the same choices as the general loop. */
static void maxpool2_forward(const struct nn_layer *l, float *out, int32_t *idx, const float *in,
			     int n)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, oh = l->out_h, ow = l->out_w;

	for (int i = 0; i < n; i++) {
		const float *x = in + (size_t)i * l->in_size;
		float *y = out + (size_t)i * l->out_size;
		int32_t *ix = idx + (size_t)i * l->out_size;

		for (int ch = 0; ch < c; ch++)
			for (int oy = 0; oy < oh; oy++) {
				const int r0 = (ch * h + 2 * oy) * w, r1 = r0 + w;

				for (int ox = 0; ox < ow; ox++) {
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
					*y++ = m;
					*ix++ = best;
				}
			}
	}
}

void maxpool_forward(const struct nn_layer *l, float *out, int32_t *idx, const float *in, int n)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, oh = l->out_h, ow = l->out_w;
	const int k = l->k, s = l->stride;

	if (k == 2 && s == 2) {
		maxpool2_forward(l, out, idx, in, n);
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
					y[(ch * oh + oy) * ow + ox] = m;
					ix[(ch * oh + oy) * ow + ox] = best;
				}
	}
}

void maxpool_backward(const struct nn_layer *l, float *din, const float *dout,
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
