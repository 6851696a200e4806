/*
 * nn/cuda/model_cuda.c: the CUDA backend of a model: the same layers as the CPU
 * backend (nn/cpu/model_cpu.c), op by op, on the whole batch at once, all
 * queued on the model's stream; the host never waits inside a step.  The
 * running loss and correct count stay on the device until
 * pp_model_metrics() reads them.
 *
 * A convolution followed by a max-pool of stride >= its window (with a
 * ReLU between them or not: l->sparse_dout) runs as one layer, as on the
 * CPU: the fused kernels of nn/cuda/fused.cu compute the pool's output and
 * indices from the convolution's input, and the backward passes gradients
 * only where the pool selected, without im2col columns; the ReLU's and
 * pool's own kernels are not run, the convolution's and ReLU's outputs
 * not written.  Other convolutions take im2col and cuBLAS.  A ReLU next
 * to a Linear layer is taken by that layer's GEMMs, forward and backward
 * (relu_in_forward_gemm(), relu_in_backward_gemm()), and a Linear
 * layer's bias gradient by its weight gradient's GEMM where the small
 * kernels take that (struct pp_cuda_gemm's bias).  Every reduction of a
 * step is deterministic (nn/cuda/fused.h).
 *
 * cuBLAS is column-major.  A row-major matrix X (r x c) is the column-major
 * matrix X^T (c x r) with the same leading dimension c, so each row-major
 * product C = A B below is computed as C^T = B^T A^T, and each GEMM's
 * comment says which transposition that gives.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "nn/cuda/cuda_impl.h"
#include "nn/cuda/fused.h"
#include "nn/cuda/kernels.h"
#include "nn/cuda/optim.h"
#include "nn/cuda/small_gemm.h"

static struct pp_cuda_geom geom_of(const struct nn_layer *l)
{
	struct pp_cuda_geom g = {
		.c = l->in_c, .h = l->in_h, .w = l->in_w,
		.oc = l->out_c, .oh = l->out_h, .ow = l->out_w,
		.k = l->k, .stride = l->stride, .pad = l->pad,
	};

	return g;
}

/* The max-pool that conv i is fused with (l->sparse_dout), a ReLU between them or not. */
static size_t pool_of(const struct pp_model *m, size_t i)
{
	return m->layers[i + 1].kind == NN_RELU ? i + 2 : i + 1;
}

/* The geometry of fused conv i and its pool. */
static struct pp_cuda_pool_geom pool_geom_of(const struct pp_model *m, size_t i)
{
	const size_t p = pool_of(m, i);
	const struct nn_layer *pool = &m->layers[p];
	const struct pp_cuda_pool_geom g = {
		.conv = geom_of(&m->layers[i]),
		.pk = pool->k, .ps = pool->stride, .ph = pool->out_h, .pw = pool->out_w,
		.relu = p == i + 2,
	};

	return g;
}

static void cuda_teardown(struct pp_model *m)
{
	struct nn_cuda *cu = m->ctx;

	if (!cu)
		return;
	if (cu->stream)
		pp_cuda_sync(cu->stream);
	pp_cuda_blas_destroy(cu->blas);
	pp_nn_mem_free(m->dev, cu->col_all);
	pp_nn_mem_free(m->dev, cu->dcol_all);
	pp_nn_mem_free(m->dev, cu->perm);
	pp_nn_mem_free(m->dev, cu->acc);
	pp_nn_mem_free(m->dev, cu->optim_state);
	pp_nn_mem_free(m->dev, cu->red);
	pp_nn_mem_free(m->dev, cu->xent_scratch);
	free(cu);
	m->ctx = NULL;
}

static int cuda_setup(struct pp_model *m)
{
	struct pp_stream *s = m->cfg.stream;
	struct nn_cuda *cu;
	int ret;

	if (!s)
		return pp_error(-EINVAL, "model on %s: no stream given (config field 'stream')",
				pp_nn_device_name(m->dev));
	if (pp_stream_device(s) != m->dev)
		return pp_error(-EINVAL, "model stream: expected device %s but got %s",
				pp_nn_device_name(m->dev), pp_nn_device_name(pp_stream_device(s)));
	cu = calloc(1, sizeof(*cu));
	if (!cu)
		return pp_error(-ENOMEM, "model: out of memory");
	m->ctx = cu;
	cu->stream = pp_nn_cuda_stream(s);
	ret = pp_cuda_blas_create(cu->stream, &cu->blas);
	if (!ret)
		ret = pp_nn_mem_alloc(m->dev, sizeof(*cu->acc), (void **)&cu->acc);
	if (!ret)
		ret = pp_nn_mem_alloc(m->dev, sizeof(*cu->optim_state), (void **)&cu->optim_state);
	m->optim_t_set = true;
	return ret;
}

/*
 * Everything a step of m->capacity samples needs beyond the activations,
 * so that a step allocates nothing: the scratch of the convolutions that
 * are not fused (im2col columns, their gradient, a permuted output), the
 * partial sums of the largest reduction (their count grows with the
 * batch, pp_red_parts()), and the loss's.
 */
static int cuda_reserve(struct pp_model *m)
{
	struct nn_cuda *cu = m->ctx;
	const size_t cap = m->capacity;
	size_t col = 0, out = 0, red = 0;
	int ret;

	for (size_t i = 0; i < m->n_layers; i++) {
		const struct nn_layer *l = &m->layers[i];

		if (l->kind == NN_LINEAR)
			red = PP_MAX(red, pp_red_floats(l->out_c, cap));
		if (l->kind == NN_CONV && l->sparse_dout) {
			const struct pp_cuda_pool_geom g = pool_geom_of(m, i);

			red = PP_MAX(red, pp_fused_param_floats(&g, (int)cap));
		} else if (l->kind == NN_CONV) {
			red = PP_MAX(red, pp_red_floats(l->out_c, cap * (size_t)l->out_h * l->out_w));
			col = PP_MAX(col, (size_t)l->out_h * l->out_w * l->in_c * l->k * l->k);
			out = PP_MAX(out, l->out_size);
		}
	}
	pp_nn_mem_free(m->dev, cu->col_all);
	pp_nn_mem_free(m->dev, cu->dcol_all);
	pp_nn_mem_free(m->dev, cu->perm);
	pp_nn_mem_free(m->dev, cu->red);
	pp_nn_mem_free(m->dev, cu->xent_scratch);
	cu->col_all = cu->dcol_all = cu->perm = cu->red = NULL;
	cu->xent_scratch = NULL;
	ret = pp_nn_mem_alloc(m->dev, pp_xent_scratch_bytes((int)PP_MIN(cap, (size_t)INT32_MAX)),
			      &cu->xent_scratch);
	if (!ret && red)
		ret = pp_nn_mem_alloc(m->dev, red * sizeof(float), (void **)&cu->red);
	if (!ret && col)
		ret = pp_nn_mem_alloc(m->dev, cap * col * sizeof(float), (void **)&cu->col_all);
	if (!ret && col)
		ret = pp_nn_mem_alloc(m->dev, cap * col * sizeof(float), (void **)&cu->dcol_all);
	if (!ret && col)
		ret = pp_nn_mem_alloc(m->dev, cap * out * sizeof(float), (void **)&cu->perm);
	return ret;
}

static int conv_forward(struct pp_model *m, const struct nn_layer *l, float *y, const float *x,
			int n)
{
	struct nn_cuda *cu = m->ctx;
	const struct pp_cuda_geom g = geom_of(l);
	const int kk = l->in_c * l->k * l->k, bp = n * l->out_h * l->out_w;
	/* Yp (OC, nP) = W (OC, KK) col^T (KK, nP): column-major Yp^T = col^T(T) W^T(N) */
	const struct pp_cuda_gemm mm = {
		.ta = true, .tb = false, .m = bp, .n = l->out_c, .k = kk,
		.a = cu->col_all, .lda = kk, .b = m->params + l->w_off, .ldb = kk,
		.c = cu->perm, .ldc = bp, .beta = 0.0f,
	};
	int ret = pp_cuda_im2col(x, cu->col_all, n, &g, cu->stream);

	if (!ret)
		ret = pp_cuda_sgemm(cu->blas, &mm);
	if (!ret)
		ret = pp_cuda_from_cbp(cu->perm, m->params + l->b_off, y, n, l->out_c,
				       l->out_h * l->out_w, cu->stream);
	return ret;
}

static int conv_backward(struct pp_model *m, const struct nn_layer *l, float *dx,
			 const float *dy, const float *x, int n)
{
	struct nn_cuda *cu = m->ctx;
	const struct pp_cuda_geom g = geom_of(l);
	const int kk = l->in_c * l->k * l->k, bp = n * l->out_h * l->out_w;
	/* dW (OC, KK) += dYp (OC, nP) col (nP, KK): column-major dW^T = col^T(N) dYp^T(N) */
	struct pp_cuda_gemm dw = {
		.ta = false, .tb = false, .m = kk, .n = l->out_c, .k = bp,
		.a = cu->col_all, .lda = kk, .b = cu->perm, .ldb = bp,
		.c = m->grads + l->w_off, .ldc = kk, .beta = 1.0f,
	};
	/* dcol (nP, KK) = dYp^T (nP, OC) W (OC, KK): column-major dcol^T = W^T(N) dYp(T) */
	const struct pp_cuda_gemm dc = {
		.ta = false, .tb = true, .m = kk, .n = bp, .k = l->out_c,
		.a = m->params + l->w_off, .lda = kk, .b = cu->perm, .ldb = bp,
		.c = cu->dcol_all, .ldc = kk, .beta = 0.0f,
	};
	int ret = pp_cuda_to_cbp(dy, cu->perm, n, l->out_c, l->out_h * l->out_w, cu->stream);

	/* db (OC) = the sums of dYp's rows, op(B)'s columns: with dW where the small kernel takes it */
	if (pp_small_gemm_fits(&dw))
		dw.bias = m->grads + l->b_off;
	else if (!ret)
		ret = pp_cuda_sum_channels(m->grads + l->b_off, dy, n, l->out_c, l->out_h * l->out_w,
					   cu->red, cu->stream);
	if (!ret)
		ret = pp_cuda_im2col(x, cu->col_all, n, &g, cu->stream);
	if (!ret && dx)
		ret = pp_cuda_sgemm2(cu->blas, &dw, &dc);
	else if (!ret)
		ret = pp_cuda_sgemm(cu->blas, &dw);
	if (!ret && dx)
		ret = pp_cuda_col2im(cu->dcol_all, dx, n, &g, cu->stream);
	return ret;
}

/* A Linear layer's forward; 'relu' not NULL: the ReLU after it too, its output there. */
static int linear_forward_cuda(struct pp_model *m, const struct nn_layer *l, float *y,
			       const float *x, int n, float *relu)
{
	struct nn_cuda *cu = m->ctx;
	const int ic = (int)l->in_size, oc = l->out_c;
	/* y (n, OC) = x (n, IC) W^T (IC, OC) + b: column-major y^T = W(T) x^T(N) */
	const struct pp_cuda_gemm mm = {
		.ta = true, .tb = false, .m = oc, .n = n, .k = ic,
		.a = m->params + l->w_off, .lda = ic, .b = x, .ldb = ic,
		.c = y, .ldc = oc, .beta = 1.0f, .relu = relu,
	};
	/* y holds the bias already (prologue()) */
	return pp_cuda_sgemm(cu->blas, &mm);
}

/*
 * A Linear layer's backward; 'mask' not NULL: the ReLU below it too (its
 * output), 'dx' then the gradient of the ReLU's input.
 */
static int linear_backward_cuda(struct pp_model *m, const struct nn_layer *l, float *dx,
				const float *mask, const float *dy, const float *x, int n)
{
	struct nn_cuda *cu = m->ctx;
	const int ic = (int)l->in_size, oc = l->out_c;
	/* dW (OC, IC) += dy^T (OC, n) x (n, IC): column-major dW^T = x^T(N) dy(T) */
	struct pp_cuda_gemm dw = {
		.ta = false, .tb = true, .m = ic, .n = oc, .k = n,
		.a = x, .lda = ic, .b = dy, .ldb = oc,
		.c = m->grads + l->w_off, .ldc = ic, .beta = 1.0f,
	};
	/* dx (n, IC) = dy (n, OC) W (OC, IC): column-major dx^T = W^T(N) dy^T(N) */
	const struct pp_cuda_gemm dd = {
		.ta = false, .tb = false, .m = ic, .n = n, .k = oc,
		.a = m->params + l->w_off, .lda = ic, .b = dy, .ldb = oc,
		.c = dx, .ldc = ic, .beta = 0.0f, .mask = mask,
	};
	int ret = 0;

	/* db (OC) = the sums of dy's columns: with dW where the small kernels take it */
	if (pp_small_gemm_fits(&dw))
		dw.bias = m->grads + l->b_off;
	else
		ret = pp_cuda_sum_channels(m->grads + l->b_off, dy, n, oc, 1, cu->red, cu->stream);
	if (!ret && dx) /* one launch where the small kernel takes both */
		ret = pp_cuda_sgemm2(cu->blas, &dw, &dd);
	else if (!ret)
		ret = pp_cuda_sgemm(cu->blas, &dw);
	return ret;
}

/*
 * A Flatten changes only the shape: its output is its input, and the
 * gradient of its output is that of its input, neither copied (two copies
 * of the batch's features a step, and two launches, fewer).  The output
 * of layer i, past Flattens (i = SIZE_MAX, below the first layer: the
 * model's input), and where the gradient of layer i's output lies.
 */
static const float *output_of(const struct pp_model *m, size_t i, const float *input)
{
	i = pp_nn_past_flattens(m, i);
	return i == SIZE_MAX ? input : m->acts[i];
}

static float *grad_of(const struct pp_model *m, size_t i)
{
	i = pp_nn_past_flattens(m, i);
	return i == SIZE_MAX ? NULL : m->dacts[i];
}

/*
 * A ReLU next to a Linear layer is taken by the layer's GEMMs (struct
 * pp_cuda_gemm's relu and mask: one launch fewer for each pass): its
 * forward by the Linear layer just below it, which stores the ReLU's
 * output as it stores its own; its backward by the Linear layer above it
 * (past Flattens), whose input gradient is then masked by the ReLU's
 * output and written where the ReLU's input gradient goes.
 */
static bool relu_in_forward_gemm(const struct pp_model *m, size_t i)
{
	return m->layers[i].kind == NN_RELU && i > 0 && m->layers[i - 1].kind == NN_LINEAR;
}

/* The ReLU whose backward Linear layer i's input gradient takes; SIZE_MAX: none. */
static size_t relu_in_backward_gemm(const struct pp_model *m, size_t i)
{
	const size_t r = i == 0 ? SIZE_MAX : pp_nn_past_flattens(m, i - 1);

	/* (a ReLU behind a pooled convolution has the pool above it, never a Linear layer) */
	if (r == SIZE_MAX || m->layers[r].kind != NN_RELU || !m->layers[r].need_din ||
	    grad_of(m, r - 1) == NULL)
		return SIZE_MAX;
	return r;
}

/* Whether ReLU r's backward is taken by the Linear layer above it. */
static bool relu_taken_backward(const struct pp_model *m, size_t r)
{
	size_t j = r + 1;

	while (j < m->n_layers && m->layers[j].kind == NN_FLATTEN)
		j++;
	return j < m->n_layers && m->layers[j].kind == NN_LINEAR && m->layers[j].need_din &&
	       relu_in_backward_gemm(m, j) == r;
}

static int forward(struct pp_model *m, const float *x, int n)
{
	struct nn_cuda *cu = m->ctx;
	int ret = 0;

	for (size_t i = 0; i < m->n_layers && !ret; i++) {
		const struct nn_layer *l = &m->layers[i];
		const struct pp_cuda_geom g = geom_of(l);
		float *y = m->acts[i];

		if (pp_nn_behind_pooled_conv(m, i)) {
			x = y; /* the pool's output, written by the convolution */
			continue;
		}
		switch (l->kind) {
		case NN_CONV:
			if (l->sparse_dout) {
				const struct pp_cuda_pool_geom pg = pool_geom_of(m, i);
				const size_t p = pool_of(m, i);

				ret = pp_cuda_conv_pool_forward(x, m->params + l->w_off,
								m->params + l->b_off, m->acts[p],
								m->pool_idx[p], n, &pg, cu->stream);
			} else {
				ret = conv_forward(m, l, y, x, n);
			}
			break;
		case NN_MAXPOOL:
			ret = pp_cuda_maxpool_forward(y, m->pool_idx[i], x, n, &g, cu->stream);
			break;
		case NN_RELU:
			if (!relu_in_forward_gemm(m, i)) /* else written with the Linear layer's */
				ret = pp_cuda_relu_forward(y, x, (size_t)n * l->out_size, cu->stream);
			break;
		case NN_FLATTEN:
			continue; /* x stays its output (output_of()) */
		case NN_LINEAR:
			ret = linear_forward_cuda(m, l, y, x, n,
						  i + 1 < m->n_layers && relu_in_forward_gemm(m, i + 1)
							  ? m->acts[i + 1] : NULL);
			break;
		}
		x = y;
	}
	return ret;
}

/*
 * Queues the backward pass; returns 0, PP_MODEL_GRAD_KEEP (the gradient
 * hook asked for no update) or -errno.  'warm' (cuda_warm()): no hook.
 */
static int backward(struct pp_model *m, const float *input, int n, bool warm)
{
	struct nn_cuda *cu = m->ctx;
	bool keep = false;
	int ret = 0;

	for (size_t i = m->n_layers; i-- > 0 && !ret && (m->layers[i].n_w || m->layers[i].need_din);) {
		const struct nn_layer *l = &m->layers[i];
		const struct pp_cuda_geom g = geom_of(l);
		const float *dy = m->dacts[i];
		float *dx = l->need_din ? grad_of(m, i - 1) : NULL;
		const float *x = output_of(m, i - 1, input);

		if (pp_nn_behind_pooled_conv(m, i))
			continue; /* the convolution before them takes their backward */
		switch (l->kind) {
		case NN_CONV:
			if (l->sparse_dout) {
				const struct pp_cuda_pool_geom pg = pool_geom_of(m, i);
				const size_t p = pool_of(m, i);

				ret = pp_cuda_conv_pool_backward(dx, m->grads + l->w_off,
								 m->grads + l->b_off, m->dacts[p],
								 m->pool_idx[p], m->acts[p], x,
								 m->params + l->w_off, n, &pg, cu->red,
								 cu->stream);
			} else {
				ret = conv_backward(m, l, dx, dy, x, n);
			}
			break;
		case NN_MAXPOOL:
			if (dx)
				ret = pp_cuda_maxpool_backward(dx, dy, m->pool_idx[i], n, &g, cu->stream);
			break;
		case NN_RELU:
			if (dx && !relu_taken_backward(m, i)) /* else taken by the layer above's */
				ret = pp_cuda_relu_backward(dx, dy, m->acts[i], (size_t)n * l->out_size,
							    cu->stream);
			break;
		case NN_FLATTEN:
			continue; /* the layer above wrote the gradient of its input (grad_of()) */
		case NN_LINEAR: {
			const size_t r = dx ? relu_in_backward_gemm(m, i) : SIZE_MAX;

			ret = r == SIZE_MAX ? linear_backward_cuda(m, l, dx, NULL, dy, x, n)
					    : linear_backward_cuda(m, l, grad_of(m, r - 1), m->acts[r],
								   dy, x, n);
			break;
		}
		}
		if (!ret && l->n_w && !warm) {
			ret = pp_nn_model_grads_ready(m, l->w_off, l->n_w + l->n_b);
			keep |= ret == PP_MODEL_GRAD_KEEP;
			ret = ret < 0 ? ret : 0;
		}
	}
	if (!ret && !warm) {
		/* the hook's work in flight ended, in the stream's order, before the update */
		ret = pp_nn_model_grads_sync(m);
		keep |= ret == PP_MODEL_GRAD_KEEP;
	}
	return ret < 0 ? ret : keep ? PP_MODEL_GRAD_KEEP : 0;
}

/* The device's step count from the host's (a new model, a checkpoint's), in stream order. */
static int cuda_prepare(struct pp_model *m)
{
	struct nn_cuda *cu = m->ctx;
	int ret;

	if (!m->optim_t_set)
		return 0;
	ret = pp_cuda_optim_set(cu->optim_state, m->optim.t, cu->stream);
	if (!ret)
		m->optim_t_set = false;
	return ret;
}

/* The optimizer's update: its step count and factors come from device memory (graphs). */
static int update(struct pp_model *m)
{
	struct nn_cuda *cu = m->ctx;
	const struct pp_optimizer_config *c = &m->optim.cfg;
	const struct pp_cuda_optim_args a = {
		.adam = c->kind == PP_OPTIM_ADAM, .lr = c->lr, .beta1 = c->beta1, .beta2 = c->beta2,
		.eps = c->eps, .weight_decay = c->weight_decay, .momentum = c->momentum,
		.dampening = c->dampening, .nesterov = c->nesterov,
	};

	return pp_cuda_optim_step(cu->optim_state, &a, m->params, m->grads, m->optim.buf1,
				  m->optim.buf2, m->n_params, cu->stream);
}

/* The host's bookkeeping of a step: done in the step, or at each launch of its graph. */
static void cuda_account(struct pp_model *m, const struct nn_job *job)
{
	if (job->train)
		m->optim.t++;
	m->metrics.samples += job->batch;
}

/*
 * What a step does before its layers (pp_cuda_prologue()): the uint8
 * input normalised into m->input, the gradients zeroed when training, and
 * every Linear layer's output filled with its bias, PP_CUDA_FILLS layers a
 * launch: one launch for all of it up to 8 Linear layers, where the CNN's
 * step launched three kernels and a memset for these before.
 */
static int prologue(struct pp_model *m, const struct nn_job *job, int n)
{
	struct nn_cuda *cu = m->ctx;
	struct pp_cuda_prologue p;
	size_t i = 0;
	int ret = 0;

	for (bool first = true; ret == 0 && (first || i < m->n_layers); first = false) {
		memset(&p, 0, sizeof(p));
		p.rows = n;
		if (first && job->in_u8) {
			p.src = job->in_u8;
			p.dst = m->input;
			p.n = job->batch * m->layers[0].in_size;
			p.mean = m->cfg.mean;
			p.std = m->cfg.std;
		}
		if (first && job->train) {
			p.zero = m->grads;
			p.zero_n = m->n_params;
		}
		for (; i < m->n_layers && p.fills < PP_CUDA_FILLS; i++) {
			const struct nn_layer *l = &m->layers[i];

			if (l->kind != NN_LINEAR)
				continue;
			p.out[p.fills] = m->acts[i];
			p.b[p.fills] = m->params + l->b_off;
			p.cols[p.fills] = l->out_c;
			p.fills++;
		}
		ret = pp_cuda_prologue(&p, cu->stream);
	}
	return ret;
}

static int cuda_run(struct pp_model *m, struct nn_job *job)
{
	struct nn_cuda *cu = m->ctx;
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	const int n = (int)job->batch;
	const float *x = job->in_f32;
	int ret = 0;

	if (job->batch > INT32_MAX / PP_MAX(last->out_size, m->layers[0].in_size))
		return pp_error(-EINVAL, "model on %s: a batch of %zu is too large", pp_nn_device_name(m->dev),
				job->batch);
	if (!m->capturing)
		ret = cuda_prepare(m);
	if (job->in_u8)
		x = m->input;
	if (!ret)
		ret = prologue(m, job, n);
	if (!ret)
		ret = forward(m, x, n);
	/* the logits: the last layer's output (a Flatten's is its input's) */
	if (!ret)
		ret = pp_cuda_softmax_xent(output_of(m, m->n_layers - 1, x), job->labels, n, last->out_c,
					   1.0f / (float)n, job->train ? grad_of(m, m->n_layers - 1) : NULL,
					   &cu->acc->loss_sum, &cu->acc->correct, &cu->acc->bad_label,
					   cu->xent_scratch, cu->stream);
	if (!ret && job->logits)
		ret = pp_cuda_copy(job->logits, output_of(m, m->n_layers - 1, x),
				   job->batch * last->out_size * sizeof(float), cu->stream);
	if (!ret && job->train)
		ret = backward(m, x, n, job->warm);
	if (!ret && job->train && !job->warm)
		ret = update(m);
	if (job->warm)
		return ret < 0 ? ret : 0;
	if (ret == PP_MODEL_GRAD_KEEP && !m->capturing)
		m->metrics.samples += job->batch; /* the hook kept the gradient: no step taken */
	else if (!ret && !m->capturing)
		cuda_account(m, job);
	/* a step that failed after its step count was taken on the device: set it again */
	if (ret < 0 && job->train && !m->capturing)
		m->optim_t_set = true;
	return ret < 0 ? ret : 0;
}

/*
 * Where the model takes graphs: the same step captured once and dropped,
 * never launched, so that the first capture of a process (CUDA's graph
 * machinery set up: 13 ms on an H200 host, where later captures take
 * 0.1-0.2 ms) is not a first epoch's.  A failure here changes nothing,
 * pp_last_error() included: the steps' own captures say theirs.  (Its
 * end of capture is one of the fault sites' PP_FAULT_GRAPH checks: a
 * test that fails "the first capture" arms it after the prepare.)
 */
static void prime_capture(struct pp_model *m, struct nn_job *job)
{
	struct pp_model_graph_stats gs;
	struct pp_graph *graph = NULL;
	struct pp_error_saved saved;

	pp_model_get_graph_stats(m, &gs);
	if (!gs.enabled || gs.fallback[0] != '\0')
		return;
	pp_error_save(&saved);
	if (pp_stream_begin_capture(m->cfg.stream) == 0) {
		m->capturing = true;
		cuda_run(m, job);
		m->capturing = false;
		if (pp_stream_end_capture(m->cfg.stream, &graph) == 0)
			pp_graph_destroy(graph);
	}
	pp_error_restore(&saved);
}

/*
 * pp_model_prepare(): a training step of 'batch' samples on zeros, but for
 * the hooks and the update, so that each of its kernels and GEMMs has been
 * launched once (a kernel loads at its first launch: cuBLAS's take some
 * 17 ms each).  What the step writes that a caller sees, the gradient and
 * the running totals, is kept aside first and put back after it, in the
 * stream's order; the activations and the input buffer are the steps'
 * scratch.  Waits for it all.  A failure of the stream's work leaves them
 * as the failure did (a CUDA error is the stream's from then on).  Then
 * the step is captured once where the model takes graphs (prime_capture()).
 */
static int cuda_warm(struct pp_model *m, size_t batch)
{
	struct nn_cuda *cu = m->ctx;
	const size_t grads = m->n_params * sizeof(float);
	struct nn_job job = { .train = true, .batch = batch, .in_f32 = m->input, .warm = true };
	unsigned char *keep = NULL;
	int32_t *labels = NULL;
	int ret, ret2;

	ret = pp_nn_mem_alloc(m->dev, grads + sizeof(*cu->acc), (void **)&keep);
	if (!ret) /* zeroed: class 0, in range */
		ret = pp_nn_mem_alloc(m->dev, batch * sizeof(*labels), (void **)&labels);
	if (!ret)
		ret = pp_cuda_zero(m->input, batch * m->layers[0].in_size * sizeof(float), cu->stream);
	if (!ret)
		ret = pp_cuda_copy(keep, m->grads, grads, cu->stream);
	if (!ret)
		ret = pp_cuda_copy(keep + grads, cu->acc, sizeof(*cu->acc), cu->stream);
	if (!ret) {
		job.labels = labels;
		ret = cuda_run(m, &job);
		/* put back whatever the step did */
		ret2 = pp_cuda_copy(m->grads, keep, grads, cu->stream);
		if (!ret2)
			ret2 = pp_cuda_copy(cu->acc, keep + grads, sizeof(*cu->acc), cu->stream);
		ret = ret ? ret : ret2;
	}
	ret2 = pp_cuda_sync(cu->stream);
	ret = ret ? ret : ret2;
	if (!ret)
		prime_capture(m, &job);
	pp_nn_mem_free(m->dev, labels);
	pp_nn_mem_free(m->dev, keep);
	return ret;
}

static int cuda_metrics(struct pp_model *m, bool reset, struct pp_model_metrics *metrics_p)
{
	struct nn_cuda *cu = m->ctx;
	struct nn_cuda_acc acc;
	int ret = pp_cuda_read(&acc, cu->acc, sizeof(acc), cu->stream);

	if (ret)
		return ret;
	if (reset) {
		ret = pp_cuda_zero(cu->acc, sizeof(*cu->acc), cu->stream);
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
	.prepare = cuda_prepare,
	.account = cuda_account,
	.warm = cuda_warm,
};
