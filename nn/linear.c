/*
 * nn/linear.c: Linear (fully connected) layer on the CPU, through CBLAS.
 * Row-major: in (n, in_c), W (out_c, in_c) as PyTorch's nn.Linear, out (n, out_c).
 */
#include "config.h"

#include <cblas.h>
#include <string.h>

#include "nn/nn_internal.h"

void linear_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
		    const float *b, int n)
{
	const int ic = (int)l->in_size, oc = l->out_c;

	for (int i = 0; i < n; i++)
		for (int o = 0; o < oc; o++)
			out[(size_t)i * oc + o] = b[o];
	/* out (n, oc) += in (n, ic) . W^T (ic, oc) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, oc, ic, 1.0f, in, ic, w, ic, 1.0f,
		    out, oc);
}

void linear_backward_input(const struct nn_layer *l, float *din, const float *dout, const float *w,
			   int n)
{
	const int ic = (int)l->in_size, oc = l->out_c;

	/* din (n, ic) = dout (n, oc) . W (oc, ic) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, ic, oc, 1.0f, dout, oc, w, ic, 0.0f,
		    din, ic);
}

void linear_backward_params(const struct nn_layer *l, float *dw, float *db, const float *dout,
			    const float *in, int n, int j0, int j1, float beta)
{
	const int ic = (int)l->in_size, oc = l->out_c;

	if (db) {
		if (beta == 0.0f)
			memset(db, 0, (size_t)oc * sizeof(float));
		for (int i = 0; i < n; i++)
			for (int o = 0; o < oc; o++)
				db[o] += dout[(size_t)i * oc + o];
	}
	/* dW[:, j0:j1] (oc, j1 - j0) = beta dW[:, j0:j1] + dout^T (oc, n) . in[:, j0:j1] (n, j1 - j0) */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, j1 - j0, n, 1.0f, dout, oc, in + j0,
		    ic, beta, dw + j0, ic);
}

void linear_backward(const struct nn_layer *l, float *din, float *dw, float *db,
		     const float *dout, const float *in, const float *w, int n)
{
	linear_backward_params(l, dw, db, dout, in, n, 0, (int)l->in_size, 1.0f);
	if (din)
		linear_backward_input(l, din, dout, w, n);
}
