/*
 * nn/cpu/linear.c: Linear (fully connected) layer on the CPU, through CBLAS.
 * Row-major: in (n, in_c), W (out_c, in_c) as PyTorch's nn.Linear, out (n, out_c).
 *
 * The weight gradient has an AVX-512 version besides the GEMM: a block of
 * 8 rows by 32 columns of dW kept in registers over the whole batch,
 * reading dout and the input where they lie.  OpenBLAS packs both
 * operands of this thin product (out_c rows, a batch deep) on every
 * call, which at batch 1000 cost more than the arithmetic.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "nn/cpu/blas.h"
#include "nn/cpu/cpu_impl.h"

void pp_nn_linear_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
		    const float *b, int n)
{
	const int ic = (int)l->in_size, oc = l->out_c;

	for (int i = 0; i < n; i++)
		for (int o = 0; o < oc; o++)
			out[(size_t)i * oc + o] = b[o];
	/* out (n, oc) += in (n, ic) . W^T (ic, oc) */
	pp_blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, oc, ic, 1.0f, in, ic, w, ic, 1.0f,
		      out, oc);
}

void pp_nn_linear_backward_input(const struct nn_layer *l, float *din, const float *dout, const float *w,
			   int n)
{
	const int ic = (int)l->in_size, oc = l->out_c;

	/* din (n, ic) = dout (n, oc) . W (oc, ic) */
	pp_blas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, ic, oc, 1.0f, dout, oc, w, ic, 0.0f,
		      din, ic);
}

/* The mask of the first k of 16 lanes (all for k >= 16, none for k <= 0). */
static inline __mmask16 lanes16(int k)
{
	return k >= 16 ? 0xffff : k <= 0 ? 0 : (__mmask16)((1u << k) - 1);
}

/*
 * Rows o0..o0+ob-1, columns j..j+31 (those before j1) of dW = beta dW +
 * dout^T in: 2 ob sums of 16 in registers, the samples added in order.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
dw_tile(float *dw, const float *dout, const float *in, int n, int ic, int oc, int o0,
	const int ob, int j, int j1, float beta)
{
	const __mmask16 m0 = lanes16(j1 - j), m1 = lanes16(j1 - j - 16);
	__m512 a[8][2];

#pragma GCC unroll 8
	for (int o = 0; o < ob; o++)
		a[o][0] = a[o][1] = _mm512_setzero_ps();
	for (int i = 0; i < n; i++) {
		const float *x = in + (size_t)i * ic + j, *d = dout + (size_t)i * oc + o0;
		const __m512 x0 = _mm512_maskz_loadu_ps(m0, x), x1 = _mm512_maskz_loadu_ps(m1, x + 16);

#pragma GCC unroll 8
		for (int o = 0; o < ob; o++) {
			const __m512 dv = _mm512_set1_ps(d[o]);

			a[o][0] = _mm512_fmadd_ps(dv, x0, a[o][0]);
			a[o][1] = _mm512_fmadd_ps(dv, x1, a[o][1]);
		}
	}
#pragma GCC unroll 8
	for (int o = 0; o < ob; o++) {
		float *r = dw + (size_t)(o0 + o) * ic + j;

		if (beta != 0.0f) {
			a[o][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, r), a[o][0]);
			a[o][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, r + 16), a[o][1]);
		}
		_mm512_mask_storeu_ps(r, m0, a[o][0]);
		_mm512_mask_storeu_ps(r + 16, m1, a[o][1]);
	}
}

/* dW[:, j0:j1] (beta 0 or 1) in tiles of 8 rows, then 4, 2 and 1 for the last rows. */
PP_TARGET_AVX512 static void dw_avx512(float *dw, const float *dout,
							  const float *in, int n, int ic, int oc,
							  int j0, int j1, float beta)
{
	for (int j = j0; j < j1; j += 32) {
		int o = 0;

		for (; o + 8 <= oc; o += 8)
			dw_tile(dw, dout, in, n, ic, oc, o, 8, j, j1, beta);
		if (o + 4 <= oc) {
			dw_tile(dw, dout, in, n, ic, oc, o, 4, j, j1, beta);
			o += 4;
		}
		if (o + 2 <= oc) {
			dw_tile(dw, dout, in, n, ic, oc, o, 2, j, j1, beta);
			o += 2;
		}
		if (o < oc)
			dw_tile(dw, dout, in, n, ic, oc, o, 1, j, j1, beta);
	}
}

void pp_nn_linear_backward_params_isa(const struct nn_layer *l, float *dw, float *db, const float *dout,
				const float *in, int n, int j0, int j1, float beta, enum pp_isa isa)
{
	const int ic = (int)l->in_size, oc = l->out_c;

	if (db) {
		if (beta == 0.0f)
			memset(db, 0, (size_t)oc * sizeof(float));
		for (int i = 0; i < n; i++)
			for (int o = 0; o < oc; o++)
				db[o] += dout[(size_t)i * oc + o];
	}
	if (isa == PP_ISA_AVX512) {
		dw_avx512(dw, dout, in, n, ic, oc, j0, j1, beta);
		return;
	}
	/* dW[:, j0:j1] (oc, j1 - j0) = beta dW[:, j0:j1] + dout^T (oc, n) . in[:, j0:j1] (n, j1 - j0) */
	pp_blas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, j1 - j0, n, 1.0f, dout, oc, in + j0,
		      ic, beta, dw + j0, ic);
}

void pp_nn_linear_backward_params(const struct nn_layer *l, float *dw, float *db, const float *dout,
			    const float *in, int n, int j0, int j1, float beta)
{
	pp_nn_linear_backward_params_isa(l, dw, db, dout, in, n, j0, j1, beta, pp_isa_best());
}

void pp_nn_linear_backward(const struct nn_layer *l, float *din, float *dw, float *db,
		     const float *dout, const float *in, const float *w, int n)
{
	pp_nn_linear_backward_params(l, dw, db, dout, in, n, 0, (int)l->in_size, 1.0f);
	if (din)
		pp_nn_linear_backward_input(l, din, dout, w, n);
}
