/*
 * nn/model_cuda.c: the CUDA backend of a model: the same layers as the CPU
 * backend (nn/model_cpu.c), op by op, on the whole batch at once, all
 * queued on the model's stream; the host never waits inside a step.  The
 * running loss and correct count stay on the device until
 * pp_model_metrics() reads them.
 *
 * cuBLAS is column-major.  A row-major matrix X (r x c) is the column-major
 * matrix X^T (c x r) with the same leading dimension c, so each row-major
 * product C = A B below is computed as C^T = B^T A^T, and each GEMM's
 * comment says which transposition that gives.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "common/internal.h"
#include "nn/cuda/kernels.h"
#include "nn/nn_internal.h"
#include "device/device_impl.h" /* struct pp_stream: a stream's device */

static struct pp_cuda_geom geom_of(const struct nn_layer *l)
{
	struct pp_cuda_geom g = {
		.c = l->in_c, .h = l->in_h, .w = l->in_w,
		.oc = l->out_c, .oh = l->out_h, .ow = l->out_w,
		.k = l->k, .stride = l->stride, .pad = l->pad,
	};

	return g;
}

static void cuda_teardown(struct pp_model *m)
{
	if (m->stream)
		pp_cuda_sync(m->stream);
	pp_cuda_blas_destroy(m->blas);
	m->blas = NULL;
	pp_nn_mem_free(m->dev, m->col_all);
	pp_nn_mem_free(m->dev, m->dcol_all);
	pp_nn_mem_free(m->dev, m->perm);
	pp_nn_mem_free(m->dev, m->acc);
	m->col_all = m->dcol_all = m->perm = NULL;
	m->acc = NULL;
}

static int cuda_setup(struct pp_model *m)
{
	struct pp_stream *s = m->cfg.stream;
	int ret;

	if (!s)
		return pp_error(-EINVAL, "model on %s: no stream given (config field 'stream')",
				pp_nn_device_name(m->dev));
	if (s->dev != m->dev)
		return pp_error(-EINVAL, "model stream: expected device %s but got %s",
				pp_nn_device_name(m->dev), pp_nn_device_name(s->dev));
	m->stream = pp_nn_cuda_stream(s);
	ret = pp_cuda_blas_create(m->stream, &m->blas);
	if (!ret)
		ret = pp_nn_mem_alloc(m->dev, sizeof(*m->acc), (void **)&m->acc);
	return ret;
}

/* The conv scratch for m->capacity samples: im2col columns, their gradient, a permuted output. */
static int cuda_reserve(struct pp_model *m)
{
	size_t col = 0, out = 0;
	int ret;

	for (size_t i = 0; i < m->n_layers; i++) {
		const struct nn_layer *l = &m->layers[i];

		if (l->kind != NN_CONV)
			continue;
		col = PP_MAX(col, (size_t)l->out_h * l->out_w * l->in_c * l->k * l->k);
		out = PP_MAX(out, l->out_size);
	}
	pp_nn_mem_free(m->dev, m->col_all);
	pp_nn_mem_free(m->dev, m->dcol_all);
	pp_nn_mem_free(m->dev, m->perm);
	m->col_all = m->dcol_all = m->perm = NULL;
	if (!col)
		return 0;
	ret = pp_nn_mem_alloc(m->dev, m->capacity * col * sizeof(float), (void **)&m->col_all);
	if (!ret)
		ret = pp_nn_mem_alloc(m->dev, m->capacity * col * sizeof(float), (void **)&m->dcol_all);
	if (!ret)
		ret = pp_nn_mem_alloc(m->dev, m->capacity * out * sizeof(float), (void **)&m->perm);
	return ret;
}

static int conv_forward(struct pp_model *m, const struct nn_layer *l, float *y, const float *x,
			int n)
{
	const struct pp_cuda_geom g = geom_of(l);
	const int kk = l->in_c * l->k * l->k, bp = n * l->out_h * l->out_w;
	/* Yp (OC, nP) = W (OC, KK) col^T (KK, nP): column-major Yp^T = col^T(T) W^T(N) */
	const struct pp_cuda_gemm mm = {
		.ta = true, .tb = false, .m = bp, .n = l->out_c, .k = kk,
		.a = m->col_all, .lda = kk, .b = m->params + l->w_off, .ldb = kk,
		.c = m->perm, .ldc = bp, .beta = 0.0f,
	};
	int ret = pp_cuda_im2col(x, m->col_all, n, &g, m->stream);

	if (!ret)
		ret = pp_cuda_sgemm(m->blas, &mm);
	if (!ret)
		ret = pp_cuda_from_cbp(m->perm, m->params + l->b_off, y, n, l->out_c,
				       l->out_h * l->out_w, m->stream);
	return ret;
}

static int conv_backward(struct pp_model *m, const struct nn_layer *l, float *dx,
			 const float *dy, const float *x, int n)
{
	const struct pp_cuda_geom g = geom_of(l);
	const int kk = l->in_c * l->k * l->k, bp = n * l->out_h * l->out_w;
	/* dW (OC, KK) += dYp (OC, nP) col (nP, KK): column-major dW^T = col^T(N) dYp^T(N) */
	const struct pp_cuda_gemm dw = {
		.ta = false, .tb = false, .m = kk, .n = l->out_c, .k = bp,
		.a = m->col_all, .lda = kk, .b = m->perm, .ldb = bp,
		.c = m->grads + l->w_off, .ldc = kk, .beta = 1.0f,
	};
	/* dcol (nP, KK) = dYp^T (nP, OC) W (OC, KK): column-major dcol^T = W^T(N) dYp(T) */
	const struct pp_cuda_gemm dc = {
		.ta = false, .tb = true, .m = kk, .n = bp, .k = l->out_c,
		.a = m->params + l->w_off, .lda = kk, .b = m->perm, .ldb = bp,
		.c = m->dcol_all, .ldc = kk, .beta = 0.0f,
	};
	int ret = pp_cuda_to_cbp(dy, m->perm, n, l->out_c, l->out_h * l->out_w, m->stream);

	if (!ret)
		ret = pp_cuda_sum_cols(m->grads + l->b_off, m->perm, l->out_c, bp, m->stream);
	if (!ret)
		ret = pp_cuda_im2col(x, m->col_all, n, &g, m->stream);
	if (!ret)
		ret = pp_cuda_sgemm(m->blas, &dw);
	if (!ret && dx)
		ret = pp_cuda_sgemm(m->blas, &dc);
	if (!ret && dx)
		ret = pp_cuda_col2im(m->dcol_all, dx, n, &g, m->stream);
	return ret;
}

static int linear_forward_cuda(struct pp_model *m, const struct nn_layer *l, float *y,
			       const float *x, int n)
{
	const int ic = (int)l->in_size, oc = l->out_c;
	/* y (n, OC) = x (n, IC) W^T (IC, OC) + b: column-major y^T = W(T) x^T(N) */
	const struct pp_cuda_gemm mm = {
		.ta = true, .tb = false, .m = oc, .n = n, .k = ic,
		.a = m->params + l->w_off, .lda = ic, .b = x, .ldb = ic,
		.c = y, .ldc = oc, .beta = 1.0f,
	};
	int ret = pp_cuda_fill_rows(y, m->params + l->b_off, n, oc, m->stream);

	return ret ? ret : pp_cuda_sgemm(m->blas, &mm);
}

static int linear_backward_cuda(struct pp_model *m, const struct nn_layer *l, float *dx,
				const float *dy, const float *x, int n)
{
	const int ic = (int)l->in_size, oc = l->out_c;
	/* dW (OC, IC) += dy^T (OC, n) x (n, IC): column-major dW^T = x^T(N) dy(T) */
	const struct pp_cuda_gemm dw = {
		.ta = false, .tb = true, .m = ic, .n = oc, .k = n,
		.a = x, .lda = ic, .b = dy, .ldb = oc,
		.c = m->grads + l->w_off, .ldc = ic, .beta = 1.0f,
	};
	/* dx (n, IC) = dy (n, OC) W (OC, IC): column-major dx^T = W^T(N) dy^T(N) */
	const struct pp_cuda_gemm dd = {
		.ta = false, .tb = false, .m = ic, .n = n, .k = oc,
		.a = m->params + l->w_off, .lda = ic, .b = dy, .ldb = oc,
		.c = dx, .ldc = ic, .beta = 0.0f,
	};
	int ret = pp_cuda_sum_rows(m->grads + l->b_off, dy, n, oc, m->stream);

	if (!ret)
		ret = pp_cuda_sgemm(m->blas, &dw);
	if (!ret && dx)
		ret = pp_cuda_sgemm(m->blas, &dd);
	return ret;
}

static int forward(struct pp_model *m, const float *x, int n)
{
	int ret = 0;

	for (size_t i = 0; i < m->n_layers && !ret; i++) {
		const struct nn_layer *l = &m->layers[i];
		const struct pp_cuda_geom g = geom_of(l);
		float *y = m->acts[i];

		switch (l->kind) {
		case NN_CONV:
			ret = conv_forward(m, l, y, x, n);
			break;
		case NN_MAXPOOL:
			ret = pp_cuda_maxpool_forward(y, m->pool_idx[i], x, n, &g, m->stream);
			break;
		case NN_RELU:
			ret = pp_cuda_relu_forward(y, x, (size_t)n * l->out_size, m->stream);
			break;
		case NN_FLATTEN:
			ret = pp_cuda_copy(y, x, (size_t)n * l->out_size * sizeof(float), m->stream);
			break;
		case NN_LINEAR:
			ret = linear_forward_cuda(m, l, y, x, n);
			break;
		}
		x = y;
	}
	return ret;
}

/* Queues the backward pass; returns 0, PP_MODEL_GRAD_KEEP (the gradient hook asked for no update) or -errno. */
static int backward(struct pp_model *m, const float *input, int n)
{
	bool keep = false;
	int ret = 0;

	for (size_t i = m->n_layers; i-- > 0 && !ret && (m->layers[i].n_w || m->layers[i].need_din);) {
		const struct nn_layer *l = &m->layers[i];
		const struct pp_cuda_geom g = geom_of(l);
		const float *dy = m->dacts[i];
		float *dx = l->need_din ? m->dacts[i - 1] : NULL;
		const float *x = i ? m->acts[i - 1] : input;

		switch (l->kind) {
		case NN_CONV:
			ret = conv_backward(m, l, dx, dy, x, n);
			break;
		case NN_MAXPOOL:
			if (dx)
				ret = pp_cuda_maxpool_backward(dx, dy, m->pool_idx[i], n, &g, m->stream);
			break;
		case NN_RELU:
			if (dx)
				ret = pp_cuda_relu_backward(dx, dy, m->acts[i], (size_t)n * l->out_size,
							    m->stream);
			break;
		case NN_FLATTEN:
			if (dx)
				ret = pp_cuda_copy(dx, dy, (size_t)n * l->out_size * sizeof(float), m->stream);
			break;
		case NN_LINEAR:
			ret = linear_backward_cuda(m, l, dx, dy, x, n);
			break;
		}
		if (!ret && l->n_w) {
			ret = pp_nn_model_grads_ready(m, l->w_off, l->n_w + l->n_b);
			keep |= ret == PP_MODEL_GRAD_KEEP;
			ret = ret < 0 ? ret : 0;
		}
	}
	return ret < 0 ? ret : keep ? PP_MODEL_GRAD_KEEP : 0;
}

static int update(struct pp_model *m)
{
	const struct pp_optimizer_config *c = &m->optim.cfg;
	struct nn_optim *o = &m->optim;

	o->t++;
	if (c->kind == PP_OPTIM_SGD)
		return pp_cuda_sgd(m->params, m->grads, o->buf1, m->n_params, c->lr, c->weight_decay,
				   c->momentum, c->dampening, c->nesterov, o->t == 1, m->stream);
	/* the bias corrections in double on the host, as nn/optim.c */
	return pp_cuda_adam(m->params, m->grads, o->buf1, o->buf2, m->n_params,
			    (float)(c->lr / (1.0 - pow(c->beta1, (double)o->t))),
			    (float)sqrt(1.0 - pow(c->beta2, (double)o->t)), c->beta1, c->beta2, c->eps,
			    c->weight_decay, m->stream);
}

static int cuda_run(struct pp_model *m, struct nn_job *job)
{
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	const int n = (int)job->batch;
	const float *x = job->in_f32;
	int ret = 0;

	if (job->batch > INT32_MAX / PP_MAX(last->out_size, m->layers[0].in_size))
		return pp_error(-EINVAL, "model on %s: a batch of %zu is too large", pp_nn_device_name(m->dev),
				job->batch);
	if (job->in_u8) {
		ret = pp_cuda_u8_to_f32(job->in_u8, m->input, job->batch * m->layers[0].in_size,
					m->cfg.mean, m->cfg.std, m->stream);
		x = m->input;
	}
	if (!ret && job->train)
		ret = pp_cuda_zero(m->grads, m->n_params * sizeof(float), m->stream);
	if (!ret)
		ret = forward(m, x, n);
	if (!ret)
		ret = pp_cuda_softmax_xent(m->acts[m->n_layers - 1], job->labels, n, last->out_c,
					   1.0f / (float)n, job->train ? m->dacts[m->n_layers - 1] : NULL,
					   &m->acc->loss_sum, &m->acc->correct, &m->acc->bad_label,
					   m->stream);
	if (!ret && job->logits)
		ret = pp_cuda_copy(job->logits, m->acts[m->n_layers - 1],
				   job->batch * last->out_size * sizeof(float), m->stream);
	if (!ret && job->train)
		ret = backward(m, x, n);
	if (!ret && job->train)
		ret = update(m);
	if (ret >= 0)
		m->metrics.samples += job->batch;
	return ret < 0 ? ret : 0;
}

static int cuda_metrics(struct pp_model *m, bool reset, struct pp_model_metrics *metrics_p)
{
	struct nn_cuda_acc acc;
	int ret = pp_cuda_read(&acc, m->acc, sizeof(acc), m->stream);

	if (ret)
		return ret;
	if (reset) {
		ret = pp_cuda_zero(m->acc, sizeof(*m->acc), m->stream);
		if (ret)
			return ret;
	}
	if (acc.bad_label)
		return pp_error(-ERANGE, "model on %s: a label outside 0..%d was given since the last reset",
				pp_nn_device_name(m->dev), (int)m->layers[m->n_layers - 1].out_size - 1);
	metrics_p->loss_sum = acc.loss_sum;
	metrics_p->correct = acc.correct;
	metrics_p->samples = m->metrics.samples;
	if (reset)
		m->metrics.samples = 0;
	return 0;
}

const struct nn_backend pp_nn_backend_cuda = {
	.setup = cuda_setup,
	.teardown = cuda_teardown,
	.reserve = cuda_reserve,
	.run = cuda_run,
	.metrics = cuda_metrics,
	.queued = true,
};
