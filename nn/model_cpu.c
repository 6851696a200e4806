/*
 * nn/model_cpu.c: the CPU backend of a model (the host, cpu and sim
 * devices).  A step gives bit-identical results whatever the thread count:
 * the batch is cut into groups at fixed boundaries from its start (with
 * convolutions, group g is samples [g G, g G + G) for the model's group
 * size G), and the groups into at most NN_CHUNKS chunks of consecutive
 * groups, both from the batch size alone.  Each chunk accumulates the
 * gradients of its groups, in order, into its own buffer; the threads
 * (single-threaded BLAS each) take whole chunks as they come free, and
 * the chunks' gradients are then added in chunk order, the samples'
 * losses (double) in sample order, and the optimizer updates the
 * parameters.  Which thread ran a chunk changes nothing in its arithmetic.
 *
 * With convolutions a group holds the samples whose im2col columns fit in
 * NN_GROUP_BYTES, taken forward and at once backward (a sample's gradient
 * needs only its own loss), so that the columns are made once and are
 * still in cache when the backward uses them.  Without convolutions a
 * group is a multiple of 8 samples, large enough for the GEMMs.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/internal.h"
#include "common/normalize.h"
#include "nn/nn_internal.h"

/* The im2col columns of a group of samples, at most: within a core's L2 (1 MiB here). */
#define NN_GROUP_BYTES (768 * 1024)
/* Samples in a group, at most. */
#define NN_GROUP_MAX 64
/* Chunks of a step, at most: each has a gradient buffer. */
#define NN_CHUNKS 16
/* Without convolutions: groups in a batch (of equal sizes, to within a sample). */
#define NN_DENSE_GROUPS 2
/* Columns of a linear layer's weight gradient in one task. */
#define NN_DW_COLS 128

/* One thread's scratch; worker 0 is the calling thread. */
struct nn_worker {
	struct pp_model *m;
	float *col;         /* (group, col_floats): each conv's columns of the group,
			     * at group x the layer's col_off */
	float *dcol;        /* (col_one) the column gradient of one sample, or
			     * pp_nn_conv2d_backward_pooled()'s scratch where larger */
};

/* Columns j0..j1-1 of the weight gradient of a linear layer (its bias too when j0 = 0). */
struct nn_dw_task {
	size_t layer;       /* index in the model's layers */
	int j0, j1;         /* columns: input features */
};

/* A run of consecutive groups of a step, and what it produced. */
struct nn_chunk {
	float *grads;       /* (n_params) the gradient of its samples; chunk 0: the model's */
	uint64_t correct;   /* correct predictions among its samples */
	int err;            /* 0 or -errno */
	char msg[256];      /* the error message when err */
};

/* True for the ReLU and max-pool whose backward pp_nn_conv2d_backward_pooled() does. */
static bool behind_pooled_conv(const struct pp_model *m, size_t i)
{
	const struct nn_layer *L = m->layers;

	if (i >= 1 && L[i - 1].kind == NN_CONV && L[i - 1].sparse_dout)
		return true;
	return L[i].kind == NN_MAXPOOL && i >= 2 && L[i - 1].kind == NN_RELU &&
	       L[i - 2].kind == NN_CONV && L[i - 2].sparse_dout;
}

/* The max-pool behind conv i (l->sparse_dout), with a ReLU between them or not. */
static const struct nn_layer *pool_of(const struct pp_model *m, size_t i)
{
	return &m->layers[m->layers[i + 1].kind == NN_RELU ? i + 2 : i + 1];
}

/*
 * True for a max-pool (i) behind a ReLU behind a convolution whose
 * backward is pp_nn_conv2d_backward_pooled(): the ReLU is done by the pool's
 * forward (pp_nn_maxpool_relu_forward() on the convolution's output), its own
 * output is not written, and the backward reads the sign of the
 * convolution's output in place of the ReLU's.
 */
static bool relu_in_pool(const struct pp_model *m, size_t i)
{
	const struct nn_layer *L = m->layers;

	return i < m->n_layers && L[i].kind == NN_MAXPOOL && i >= 2 && L[i - 1].kind == NN_RELU &&
	       L[i - 2].kind == NN_CONV && L[i - 2].sparse_dout;
}

/*
 * Where the output of layer i lies, for the whole batch: a Flatten changes
 * only the shape, so its output is its input, never copied; past the
 * bottom (i = SIZE_MAX, the output of "layer -1") the model's input.
 */
static const float *output_of(const struct pp_model *m, const struct nn_job *job, size_t i)
{
	for (; i < m->n_layers && m->layers[i].kind == NN_FLATTEN; i--)
		;
	if (i >= m->n_layers)
		return job->in_u8 ? m->input : job->in_f32;
	return m->acts[i];
}

/*
 * Forward, loss, and when training backward, of samples s0..s0+n-1: the
 * convolutions' gradients into G, the linear layers' input gradients only;
 * 0 or -errno.
 */
static int run_group(struct nn_worker *wk, const struct nn_job *job, float *G, size_t s0, int n,
		     uint64_t *correct)
{
	struct pp_model *m = wk->m;
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	const float *P = m->params;
	const float *x; /* the input of the layer being run */
	int ret;

	if (job->in_u8) {
		size_t sz = m->layers[0].in_size;

		pp_normalize_u8(job->in_u8 + s0 * sz, m->input + s0 * sz, (size_t)n * sz, m->cfg.mean,
				m->cfg.std);
		x = m->input + s0 * sz;
	} else {
		x = job->in_f32 + s0 * m->layers[0].in_size;
	}
	for (size_t i = 0; i < m->n_layers; i++) {
		const struct nn_layer *l = &m->layers[i];
		float *y = m->acts[i] + s0 * l->out_size;

		switch (l->kind) {
		case NN_CONV:
			if (l->direct)
				pp_nn_conv2d_direct_forward(l, y, x, P + l->w_off, P + l->b_off, n);
			else
				pp_nn_conv2d_forward(l, y, x, P + l->w_off, P + l->b_off,
					       wk->col + m->group * l->col_off, n);
			break;
		case NN_MAXPOOL:
			if (relu_in_pool(m, i))
				pp_nn_maxpool_relu_forward(l, y, m->pool_idx[i] + s0 * l->out_size,
						     m->acts[i - 2] + s0 * l->in_size, n);
			else
				pp_nn_maxpool_forward(l, y, m->pool_idx[i] + s0 * l->out_size, x, n);
			break;
		case NN_RELU:
			if (!relu_in_pool(m, i + 1))
				pp_nn_relu_forward(y, x, (size_t)n * l->out_size);
			break;
		case NN_FLATTEN:
			continue; /* its output is its input (output_of()) */
		case NN_LINEAR:
			pp_nn_linear_forward(l, y, x, P + l->w_off, P + l->b_off, n);
			break;
		}
		x = y;
	}
	ret = pp_nn_softmax_xent(x, job->labels + s0, n, last->out_c, 1.0f / (float)job->batch,
			   job->train ? m->dacts[m->n_layers - 1] + s0 * last->out_size : NULL,
			   m->losses + s0, correct);
	if (ret || !job->train)
		return ret;
	for (size_t i = m->n_layers; i-- > 0 && (m->layers[i].n_w || m->layers[i].need_din);) {
		const struct nn_layer *l = &m->layers[i];
		const float *dy = m->dacts[i] + s0 * l->out_size;
		float *dx = l->need_din ? m->dacts[i - 1] + s0 * l->in_size : NULL;

		switch (l->kind) {
		case NN_CONV:
			if (l->sparse_dout) {
				const struct nn_layer *pool = pool_of(m, i);
				const size_t p = (size_t)(pool - m->layers);

				const float *dp = m->dacts[p] + s0 * pool->out_size;
				const int32_t *ix = m->pool_idx[p] + s0 * pool->out_size;
				const float *r = p == i + 2 ? m->acts[i] + s0 * l->out_size : NULL;

				if (l->direct)
					pp_nn_conv2d_direct_backward_pooled(l, pool, dx, G + l->w_off,
								      G + l->b_off, dp, ix, r,
								      P + l->w_off,
								      output_of(m, job, i - 1) + s0 * l->in_size, n);
				else
					pp_nn_conv2d_backward_pooled(l, pool, dx, G + l->w_off, G + l->b_off, dp,
							       ix, r, P + l->w_off,
							       wk->col + m->group * l->col_off,
							       wk->dcol, n);
			} else {
				pp_nn_conv2d_backward(l, dx, G + l->w_off, G + l->b_off, dy, P + l->w_off,
						wk->col + m->group * l->col_off, wk->dcol, n);
			}
			break;
		case NN_MAXPOOL:
			if (dx && !behind_pooled_conv(m, i))
				pp_nn_maxpool_backward(l, dx, dy, m->pool_idx[i] + s0 * l->out_size, n);
			break;
		case NN_RELU:
			if (dx && !behind_pooled_conv(m, i))
				pp_nn_relu_backward(dx, dy, m->acts[i] + s0 * l->out_size, (size_t)n * l->out_size);
			break;
		case NN_FLATTEN:
			if (dx)
				memcpy(dx, dy, (size_t)n * l->out_size * sizeof(float));
			break;
		case NN_LINEAR:
			if (dx)
				pp_nn_linear_backward_input(l, dx, dy, P + l->w_off, n);
			break;
		}
	}
	return 0;
}

/* Runs chunk c of the step: its groups in order, its gradient from zero. */
static void run_chunk(struct nn_worker *wk, const struct nn_job *job, size_t c)
{
	struct pp_model *m = wk->m;
	struct nn_chunk *ch = &m->chunks[c];
	const size_t g0 = c * m->job_groups / m->job_chunks;
	const size_t g1 = (c + 1) * m->job_groups / m->job_chunks;

	ch->correct = 0;
	ch->err = 0;
	if (job->train)
		for (size_t i = 0; i < m->n_layers; i++)
			if (m->layers[i].kind == NN_CONV) {
				memset(ch->grads + m->layers[i].w_off, 0, m->layers[i].n_w * sizeof(float));
				memset(ch->grads + m->layers[i].b_off, 0, m->layers[i].n_b * sizeof(float));
			}
	for (size_t g = g0; g < g1 && !ch->err; g++) {
		const size_t s0 = g * m->job_group, n = PP_MIN(m->job_group, job->batch - s0);

		ch->err = run_group(wk, job, ch->grads, s0, (int)n, &ch->correct);
	}
	if (ch->err)
		snprintf(ch->msg, sizeof(ch->msg), "%s", pp_last_error());
}

/* Takes chunks of the step until none is left. */
static void run_chunks(struct nn_worker *wk)
{
	struct pp_model *m = wk->m;

	for (;;) {
		size_t c = __atomic_fetch_add(&m->next_chunk, 1, __ATOMIC_RELAXED);

		if (c >= m->job_chunks)
			break;
		run_chunk(wk, m->job, c);
	}
}

/*
 * Takes the linear layers' weight gradients, a block of columns at a time,
 * each over the whole batch in one GEMM of a shape fixed by the batch size.
 */
static void run_dw_tasks(struct nn_worker *wk)
{
	struct pp_model *m = wk->m;
	const struct nn_job *job = m->job;

	for (;;) {
		size_t t = __atomic_fetch_add(&m->next_dw_task, 1, __ATOMIC_RELAXED);
		const struct nn_dw_task *task;
		const struct nn_layer *l;
		const float *in;

		if (t >= m->n_dw_tasks)
			break;
		task = &m->dw_tasks[t];
		l = &m->layers[task->layer];
		in = output_of(m, job, task->layer - 1);
		pp_nn_linear_backward_params(l, m->grads + l->w_off, task->j0 ? NULL : m->grads + l->b_off,
				       m->dacts[task->layer], in, (int)job->batch, task->j0, task->j1,
				       0.0f);
	}
}

static void *worker_main(void *arg)
{
	struct nn_worker *wk = arg;
	struct pp_model *m = wk->m;
	uint64_t seen = 0;

	nn_fp_enter(!m->cfg.keep_denormals); /* the thread's own, for its whole life */
	pthread_mutex_lock(&m->lock);
	for (;;) {
		while (!m->quit && m->generation == seen)
			pthread_cond_wait(&m->go, &m->lock);
		if (m->quit)
			break;
		seen = m->generation;
		pthread_mutex_unlock(&m->lock);
		m->work(wk);
		pthread_mutex_lock(&m->lock);
		if (--m->pending == 0)
			pthread_cond_signal(&m->done);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* Samples per group of a batch: the model's with convolutions, else from the batch size. */
static size_t group_size(const struct pp_model *m, size_t batch)
{
	return m->group ? m->group : PP_MAX((batch + NN_DENSE_GROUPS - 1) / NN_DENSE_GROUPS, 1u);
}

/* Runs m->work on every worker, the caller being worker 0, and waits for them all. */
static void run_workers(struct pp_model *m, void (*work)(struct nn_worker *wk))
{
	m->work = work;
	if (m->threads > 1) {
		pthread_mutex_lock(&m->lock);
		m->pending = m->threads - 1;
		m->generation++;
		pthread_cond_broadcast(&m->go);
		pthread_mutex_unlock(&m->lock);
	}
	work(&m->workers[0]);
	if (m->threads > 1) {
		pthread_mutex_lock(&m->lock);
		while (m->pending)
			pthread_cond_wait(&m->done, &m->lock);
		pthread_mutex_unlock(&m->lock);
	}
}

/*
 * Runs the job's chunks on the workers, then adds the losses in sample
 * order; returns the error of the first failed chunk.
 */
static int run_job(struct pp_model *m, struct nn_job *job)
{
	m->job_group = group_size(m, job->batch);
	m->job_groups = (job->batch + m->job_group - 1) / m->job_group;
	m->job_chunks = PP_MIN(m->job_groups, (size_t)NN_CHUNKS);
	m->next_chunk = 0;
	m->job = job;
	run_workers(m, run_chunks);
	for (size_t c = 0; c < m->job_chunks; c++)
		if (m->chunks[c].err)
			return pp_error_set(m->chunks[c].err, m->chunks[c].msg);
	for (size_t c = 0; c < m->job_chunks; c++)
		m->metrics.correct += m->chunks[c].correct;
	for (size_t i = 0; i < job->batch; i++)
		m->metrics.loss_sum += m->losses[i];
	m->metrics.samples += job->batch;
	return 0;
}

static void stop_workers(struct pp_model *m, int started)
{
	pthread_mutex_lock(&m->lock);
	m->quit = true;
	pthread_cond_broadcast(&m->go);
	pthread_mutex_unlock(&m->lock);
	for (int t = 0; t < started; t++)
		pthread_join(m->tids[t], NULL);
}

static void cpu_teardown(struct pp_model *m)
{
	if (m->tids) {
		stop_workers(m, m->threads_started);
		pthread_cond_destroy(&m->go);
		pthread_cond_destroy(&m->done);
		pthread_mutex_destroy(&m->lock);
	}
	free(m->tids);
	m->tids = NULL;
	if (m->workers)
		for (int t = 0; t < m->threads; t++) {
			pp_nn_mem_free(m->dev, m->workers[t].col);
			pp_nn_mem_free(m->dev, m->workers[t].dcol);
		}
	free(m->workers);
	m->workers = NULL;
	if (m->chunks)
		for (size_t c = 1; c < m->chunks_ready; c++)
			pp_nn_mem_free(m->dev, m->chunks[c].grads);
	free(m->chunks);
	m->chunks = NULL;
	free(m->dw_tasks);
	m->dw_tasks = NULL;
	m->n_dw_tasks = 0;
	m->chunks_ready = 0;
	pp_nn_mem_free(m->dev, m->losses);
	m->losses = NULL;
}

/* Allocates the per-thread buffers and starts the threads. */
static int cpu_setup(struct pp_model *m)
{
	size_t col_one = 0;
	int ret = 0;

	for (size_t i = 0; i < m->n_layers; i++) {
		struct nn_layer *l = &m->layers[i];
		size_t cols = (size_t)l->out_h * l->out_w * l->in_c * l->k * l->k;

		if (l->kind != NN_CONV)
			continue;
		l->direct = pp_nn_conv2d_direct_fits(l);
		if (l->direct)
			continue;
		l->col_off = m->col_floats;
		m->col_floats += cols;
		col_one = PP_MAX(col_one, l->sparse_dout ? pp_nn_conv2d_backward_pooled_scratch(l, pool_of(m, i))
							 : cols);
	}
	m->group = m->col_floats ? PP_MIN(PP_MAX(NN_GROUP_BYTES / (m->col_floats * sizeof(float)), 1u),
					  (size_t)NN_GROUP_MAX) : 0;
	m->threads = m->cfg.threads;
	m->workers = calloc((size_t)m->threads, sizeof(*m->workers));
	m->chunks = calloc(NN_CHUNKS, sizeof(*m->chunks));
	if (!m->workers || !m->chunks)
		return pp_error(-ENOMEM, "model: out of memory");
	m->chunks[0].grads = m->grads;
	m->chunks_ready = 1;
	for (size_t i = 0; i < m->n_layers; i++)
		if (m->layers[i].kind == NN_LINEAR)
			m->n_dw_tasks += (m->layers[i].in_size + NN_DW_COLS - 1) / NN_DW_COLS;
	m->dw_tasks = calloc(m->n_dw_tasks, sizeof(*m->dw_tasks));
	if (m->n_dw_tasks && !m->dw_tasks)
		return pp_error(-ENOMEM, "model: out of memory");
	for (size_t i = 0, t = 0; i < m->n_layers; i++)
		for (size_t j = 0; m->layers[i].kind == NN_LINEAR && j < m->layers[i].in_size;
		     j += NN_DW_COLS, t++) {
			m->dw_tasks[t].layer = i;
			m->dw_tasks[t].j0 = (int)j;
			m->dw_tasks[t].j1 = (int)PP_MIN(j + NN_DW_COLS, m->layers[i].in_size);
		}
	for (int t = 0; t < m->threads; t++) {
		struct nn_worker *wk = &m->workers[t];

		wk->m = m;
		ret = pp_nn_mem_alloc(m->dev, (m->col_floats ? m->group * m->col_floats : 0) *
							   sizeof(float), (void **)&wk->col);
		if (!ret)
			ret = pp_nn_mem_alloc(m->dev, col_one * sizeof(float), (void **)&wk->dcol);
		if (ret)
			return ret;
	}
	if (m->threads == 1)
		return 0;
	m->tids = calloc((size_t)m->threads - 1, sizeof(*m->tids));
	if (!m->tids)
		return pp_error(-ENOMEM, "model: out of memory");
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->go, NULL);
	pthread_cond_init(&m->done, NULL);
	for (int t = 1; t < m->threads; t++) {
		ret = pp_thread_create(&m->tids[t - 1], worker_main, &m->workers[t]);
		if (ret)
			return pp_error(ret, "model: starting thread %d of %d: %s", t, m->threads,
					pp_strerror(ret));
		m->threads_started++;
	}
	return 0;
}


/* The samples' losses and the gradient buffers of the chunks of m->capacity samples. */
static int cpu_reserve(struct pp_model *m)
{
	const size_t group = group_size(m, m->capacity);
	const size_t chunks = PP_MIN((m->capacity + group - 1) / group, (size_t)NN_CHUNKS);
	int ret;

	pp_nn_mem_free(m->dev, m->losses);
	m->losses = NULL;
	ret = pp_nn_mem_alloc(m->dev, m->capacity * sizeof(double), (void **)&m->losses);
	for (; !ret && m->chunks_ready < chunks; m->chunks_ready++)
		ret = pp_nn_mem_alloc(m->dev, m->n_params * sizeof(float),
				   (void **)&m->chunks[m->chunks_ready].grads);
	return ret;
}

static int run_batch(struct pp_model *m, struct nn_job *job)
{
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	int ret;

	for (size_t i = 0; i < job->batch; i++)
		if (job->labels[i] < 0 || job->labels[i] >= last->out_c)
			return pp_error(-ERANGE, "model inputs: label %d of sample %zu is outside 0..%d",
					(int)job->labels[i], i, last->out_c - 1);
	ret = run_job(m, job);
	if (ret)
		return ret;
	if (job->logits)
		memcpy(job->logits, output_of(m, job, m->n_layers - 1),
		       job->batch * last->out_size * sizeof(float));
	if (!job->train)
		return 0;
	m->next_dw_task = 0;
	run_workers(m, run_dw_tasks);
	for (size_t c = 1; c < m->job_chunks; c++)
		for (size_t i = 0; i < m->n_layers; i++) {
			const struct nn_layer *l = &m->layers[i];
			const float *g = m->chunks[c].grads;

			if (l->kind != NN_CONV)
				continue;
			for (size_t j = 0; j < l->n_w; j++)
				m->grads[l->w_off + j] += g[l->w_off + j];
			for (size_t j = 0; j < l->n_b; j++)
				m->grads[l->b_off + j] += g[l->b_off + j];
		}
	ret = pp_nn_model_grads_ready(m, 0, m->n_params);
	if (ret)
		return ret < 0 ? ret : 0;
	pp_nn_optim_step_cpu(&m->optim, m->params, m->grads, m->n_params);
	return 0;
}

/* The job in the model's floating-point environment (nn_fp_enter()), the caller's put back. */
static int cpu_run(struct pp_model *m, struct nn_job *job)
{
	const unsigned env = nn_fp_enter(!m->cfg.keep_denormals);
	const int ret = run_batch(m, job);

	nn_fp_leave(env);
	return ret;
}

static int cpu_metrics(struct pp_model *m, bool reset, struct pp_model_metrics *metrics_p)
{
	*metrics_p = m->metrics;
	if (reset)
		memset(&m->metrics, 0, sizeof(m->metrics));
	return 0;
}

const struct nn_backend pp_nn_backend_cpu = {
	.setup = cpu_setup,
	.teardown = cpu_teardown,
	.reserve = cpu_reserve,
	.run = cpu_run,
	.metrics = cpu_metrics,
	.queued = false,
};
