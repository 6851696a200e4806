/*
 * nn/model_cpu.c: the CPU backend of a model (the host, cpu and sim
 * devices): a step splits the batch across the model's threads, each
 * running forward, loss and backward on its slice with single-threaded
 * BLAS and its own gradient buffer; the gradients are summed in a fixed
 * order, so that a step is bit-identical from run to run at the same
 * thread count, and the optimizer updates the parameters.
 *
 * A slice of a model with convolutions goes through in groups of samples
 * whose im2col columns fit in NN_GROUP_BYTES, each group taken forward and
 * at once backward (a sample's gradient needs only its own loss), so that
 * the columns are made once and are still in cache when the backward uses
 * them.  Without convolutions the whole slice is one group, for the
 * largest GEMMs.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/internal.h"
#include "nn/nn_internal.h"

/* The im2col columns of a group of samples, at most: within a core's L2 (1 MiB here). */
#define NN_GROUP_BYTES (768 * 1024)
/* Samples in a group, at most. */
#define NN_GROUP_MAX 64

/* One thread's share of a step; worker 0 is the calling thread. */
struct nn_worker {
	struct pp_model *m;
	float *grads;       /* (n_params); worker 0 uses the model's */
	float *col;         /* (group, col_floats): each conv's columns of the group,
			     * at group x the layer's col_off */
	float *dcol;        /* (col_one) the column gradient of one sample */
	size_t start, count; /* the slice of the batch: samples */
	double loss_sum;    /* sum of the slice's losses */
	uint64_t correct;   /* correct predictions in the slice */
	int err;            /* 0 or -errno of the slice */
	char msg[256];      /* the error message of a failed slice */
};

/* Forward, loss, and when training backward, of samples s0..s0+n-1; 0 or -errno. */
static int run_group(struct nn_worker *wk, const struct nn_job *job, size_t s0, int n)
{
	struct pp_model *m = wk->m;
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	const float *P = m->params;
	float *G = wk->grads;
	const float *x;
	int ret;

	if (job->in_u8) {
		size_t sz = m->layers[0].in_size;

		u8_to_f32(m->input + s0 * sz, job->in_u8 + s0 * sz, (size_t)n * sz, m->cfg.mean,
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
			conv2d_forward(l, y, x, P + l->w_off, P + l->b_off,
				       wk->col + m->group * l->col_off, n);
			break;
		case NN_MAXPOOL:
			maxpool_forward(l, y, m->pool_idx[i] + s0 * l->out_size, x, n);
			break;
		case NN_RELU:
			relu_forward(y, x, (size_t)n * l->out_size);
			break;
		case NN_FLATTEN:
			memcpy(y, x, (size_t)n * l->out_size * sizeof(float));
			break;
		case NN_LINEAR:
			linear_forward(l, y, x, P + l->w_off, P + l->b_off, n);
			break;
		}
		x = y;
	}
	ret = softmax_xent(x, job->labels + s0, n, last->out_c, 1.0f / (float)job->batch,
			   job->train ? m->dacts[m->n_layers - 1] + s0 * last->out_size : NULL,
			   &wk->loss_sum, &wk->correct);
	if (ret || !job->train)
		return ret;
	for (size_t i = m->n_layers; i-- > 0 && (m->layers[i].n_w || m->layers[i].need_din);) {
		const struct nn_layer *l = &m->layers[i];
		const float *dy = m->dacts[i] + s0 * l->out_size;
		float *dx = l->need_din ? m->dacts[i - 1] + s0 * l->in_size : NULL;
		const float *xi = i ? m->acts[i - 1] + s0 * l->in_size :
				      (job->in_u8 ? m->input : job->in_f32) + s0 * l->in_size;

		switch (l->kind) {
		case NN_CONV:
			conv2d_backward(l, dx, G + l->w_off, G + l->b_off, dy, P + l->w_off,
					wk->col + m->group * l->col_off, wk->dcol, n);
			break;
		case NN_MAXPOOL:
			if (dx)
				maxpool_backward(l, dx, dy, m->pool_idx[i] + s0 * l->out_size, n);
			break;
		case NN_RELU:
			if (dx)
				relu_backward(dx, dy, m->acts[i] + s0 * l->out_size, (size_t)n * l->out_size);
			break;
		case NN_FLATTEN:
			if (dx)
				memcpy(dx, dy, (size_t)n * l->out_size * sizeof(float));
			break;
		case NN_LINEAR:
			linear_backward(l, dx, G + l->w_off, G + l->b_off, dy, xi, P + l->w_off, n);
			break;
		}
	}
	return 0;
}

static void run_slice(struct nn_worker *wk, const struct nn_job *job)
{
	const size_t end = wk->start + wk->count;

	wk->loss_sum = 0.0;
	wk->correct = 0;
	wk->err = 0;
	if (wk->count && job->train)
		memset(wk->grads, 0, wk->m->n_params * sizeof(float));
	for (size_t s0 = wk->start, n; s0 < end && !wk->err; s0 += n) {
		n = PP_MIN(wk->m->group, end - s0);
		wk->err = run_group(wk, job, s0, (int)n);
	}
	if (wk->err)
		snprintf(wk->msg, sizeof(wk->msg), "%s", pp_last_error());
}

static void *worker_main(void *arg)
{
	struct nn_worker *wk = arg;
	struct pp_model *m = wk->m;
	uint64_t seen = 0;

	pthread_mutex_lock(&m->lock);
	for (;;) {
		while (!m->quit && m->generation == seen)
			pthread_cond_wait(&m->go, &m->lock);
		if (m->quit)
			break;
		seen = m->generation;
		pthread_mutex_unlock(&m->lock);
		run_slice(wk, m->job);
		pthread_mutex_lock(&m->lock);
		if (--m->pending == 0)
			pthread_cond_signal(&m->done);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* Runs the job on every worker, the caller being worker 0; returns the first slice's error. */
static int run_job(struct pp_model *m, struct nn_job *job)
{
	const size_t per = job->batch / (size_t)m->threads, extra = job->batch % (size_t)m->threads;
	size_t at = 0;

	for (int t = 0; t < m->threads; t++) {
		m->workers[t].start = at;
		m->workers[t].count = per + ((size_t)t < extra);
		at += m->workers[t].count;
	}
	m->job = job;
	if (m->threads > 1) {
		pthread_mutex_lock(&m->lock);
		m->pending = m->threads - 1;
		m->generation++;
		pthread_cond_broadcast(&m->go);
		pthread_mutex_unlock(&m->lock);
	}
	run_slice(&m->workers[0], job);
	if (m->threads > 1) {
		pthread_mutex_lock(&m->lock);
		while (m->pending)
			pthread_cond_wait(&m->done, &m->lock);
		pthread_mutex_unlock(&m->lock);
	}
	for (int t = 0; t < m->threads; t++)
		if (m->workers[t].err)
			return pp_error_set(m->workers[t].err, m->workers[t].msg);
	for (int t = 0; t < m->threads; t++) {
		m->metrics.loss_sum += m->workers[t].loss_sum;
		m->metrics.correct += m->workers[t].correct;
	}
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
			if (t)
				nn_mem_free(m->dev, m->workers[t].grads);
			nn_mem_free(m->dev, m->workers[t].col);
			nn_mem_free(m->dev, m->workers[t].dcol);
		}
	free(m->workers);
	m->workers = NULL;
}

/* Allocates the per-thread buffers and starts the threads. */
static int cpu_setup(struct pp_model *m)
{
	size_t pbytes = m->n_params * sizeof(float);
	int ret = 0;

	size_t col_one = 0;

	for (size_t i = 0; i < m->n_layers; i++) {
		struct nn_layer *l = &m->layers[i];
		size_t cols = (size_t)l->out_h * l->out_w * l->in_c * l->k * l->k;

		if (l->kind != NN_CONV)
			continue;
		l->col_off = m->col_floats;
		m->col_floats += cols;
		col_one = PP_MAX(col_one, cols);
	}
	m->group = m->col_floats ? PP_MIN(PP_MAX(NN_GROUP_BYTES / (m->col_floats * sizeof(float)), 1u),
					  (size_t)NN_GROUP_MAX) : SIZE_MAX;
	m->threads = m->cfg.threads;
	m->workers = calloc((size_t)m->threads, sizeof(*m->workers));
	if (!m->workers)
		return pp_error(-ENOMEM, "model: out of memory");
	for (int t = 0; t < m->threads; t++) {
		struct nn_worker *wk = &m->workers[t];

		wk->m = m;
		wk->grads = m->grads;
		if (t)
			ret = nn_mem_alloc(m->dev, pbytes, (void **)&wk->grads);
		if (!ret)
			ret = nn_mem_alloc(m->dev, (m->col_floats ? m->group * m->col_floats : 0) *
							   sizeof(float), (void **)&wk->col);
		if (!ret)
			ret = nn_mem_alloc(m->dev, col_one * sizeof(float), (void **)&wk->dcol);
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
		ret = -pthread_create(&m->tids[t - 1], NULL, worker_main, &m->workers[t]);
		if (ret)
			return pp_error(ret, "model: starting thread %d of %d: %s", t, m->threads,
					pp_strerror(ret));
		m->threads_started++;
	}
	return 0;
}


static int cpu_reserve(struct pp_model *m)
{
	return 0;
}

static int cpu_run(struct pp_model *m, struct nn_job *job)
{
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	int ret = run_job(m, job);

	if (ret)
		return ret;
	if (job->logits)
		memcpy(job->logits, m->acts[m->n_layers - 1], job->batch * last->out_size * sizeof(float));
	if (!job->train)
		return 0;
	for (int t = 1; t < m->threads; t++) {
		const float *g = m->workers[t].grads;

		if (m->workers[t].count)
			for (size_t i = 0; i < m->n_params; i++)
				m->grads[i] += g[i];
	}
	nn_optim_step_cpu(&m->optim, m->params, m->grads, m->n_params);
	return 0;
}

static int cpu_metrics(struct pp_model *m, bool reset, struct pp_model_metrics *metrics_p)
{
	*metrics_p = m->metrics;
	if (reset)
		memset(&m->metrics, 0, sizeof(m->metrics));
	return 0;
}

const struct nn_backend nn_backend_cpu = {
	.setup = cpu_setup,
	.teardown = cpu_teardown,
	.reserve = cpu_reserve,
	.run = cpu_run,
	.metrics = cpu_metrics,
};
