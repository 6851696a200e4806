/*
 * nn/model.c: models built from a spec: parameters and their PyTorch-style
 * initialisation, activations sized once for the largest batch seen, and
 * the CPU training step, which splits a batch across the model's threads
 * (each running single-threaded BLAS on its slice, with its own gradient
 * buffer), sums the gradients in a fixed order and updates the parameters.
 */
#include "config.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/internal.h"
#include "nn/nn_internal.h"

#define NN_MAX_THREADS 256

/* One thread's share of a step. */
struct nn_worker {
	struct pp_model *m;
	int index;          /* 0: the calling thread */
	float *grads;       /* (n_params); worker 0 uses the model's */
	float *col, *dcol;  /* (col_floats) conv scratch */
	size_t start, count; /* the slice of the batch: samples */
	double loss_sum;    /* sum of the slice's losses */
	uint64_t correct;   /* correct predictions in the slice */
	int err;            /* 0 or -errno of the slice */
	char msg[256];      /* the error message of a failed slice */
};

/* The step being run, read by every worker. */
struct nn_job {
	bool train;
	size_t batch;         /* samples in the whole batch */
	const uint8_t *in_u8; /* (batch, in_size) or NULL */
	const float *in_f32;  /* (batch, in_size) or NULL */
	const int32_t *labels; /* (batch) */
};

void pp_model_config_init(struct pp_model_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->in_channels = 1;
	cfg->in_height = 28;
	cfg->in_width = 28;
	cfg->num_classes = 10;
	cfg->threads = 1;
	cfg->mean = 0.2860f;
	cfg->std = 0.3530f;
	cfg->optim.kind = PP_OPTIM_ADAM;
	cfg->optim.lr = 0.001f;
	cfg->optim.beta1 = 0.9f;
	cfg->optim.beta2 = 0.999f;
	cfg->optim.eps = 1e-8f;
}

/* splitmix64: the initialisation's generator. */
static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Fills p with U(-bound, bound) from 24-bit uniforms. */
static void fill_uniform(float *p, size_t n, float bound, uint64_t *state)
{
	for (size_t i = 0; i < n; i++) {
		float u = (float)(rng_next(state) >> 40) * (1.0f / 16777216.0f);

		p[i] = bound * (2.0f * u - 1.0f);
	}
}

/* kaiming_uniform_(a = sqrt(5)) gives bound = sqrt(6 / ((1 + 5) fan_in)) = 1 / sqrt(fan_in), as the bias. */
static void init_params(struct pp_model *m, float *host)
{
	uint64_t state = m->cfg.seed;

	for (size_t i = 0; i < m->n_layers; i++) {
		const struct nn_layer *l = &m->layers[i];
		size_t fan_in = l->n_b ? l->n_w / l->n_b : 0;

		if (!l->n_w)
			continue;
		fill_uniform(host + l->w_off, l->n_w, 1.0f / sqrtf((float)fan_in), &state);
		fill_uniform(host + l->b_off, l->n_b, 1.0f / sqrtf((float)fan_in), &state);
	}
}

static void run_slice(struct nn_worker *wk, const struct nn_job *job)
{
	struct pp_model *m = wk->m;
	const size_t s0 = wk->start;
	const int n = (int)wk->count;
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	const float *P = m->params;
	float *G = wk->grads;
	const float *x;

	wk->loss_sum = 0.0;
	wk->correct = 0;
	wk->err = 0;
	if (n == 0)
		return;
	if (job->train)
		memset(G, 0, m->n_params * sizeof(float));
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
			conv2d_forward(l, y, x, P + l->w_off, P + l->b_off, wk->col, n);
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
	wk->err = softmax_xent(x, job->labels + s0, n, last->out_c, 1.0f / (float)job->batch,
			       job->train ? m->dacts[m->n_layers - 1] + s0 * last->out_size : NULL,
			       &wk->loss_sum, &wk->correct);
	if (wk->err) {
		snprintf(wk->msg, sizeof(wk->msg), "%s", pp_last_error());
		return;
	}
	if (!job->train)
		return;
	for (size_t i = m->n_layers; i-- > 0 && (m->layers[i].n_w || m->layers[i].need_din);) {
		const struct nn_layer *l = &m->layers[i];
		const float *dy = m->dacts[i] + s0 * l->out_size;
		float *dx = l->need_din ? m->dacts[i - 1] + s0 * l->in_size : NULL;
		const float *xi = i ? m->acts[i - 1] + s0 * l->in_size :
				      (job->in_u8 ? m->input : job->in_f32) + s0 * l->in_size;

		switch (l->kind) {
		case NN_CONV:
			conv2d_backward(l, dx, G + l->w_off, G + l->b_off, dy, xi, P + l->w_off, wk->col,
					wk->dcol, n);
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

static void free_activations(struct pp_model *m)
{
	if (m->acts)
		for (size_t i = 0; i < m->n_layers; i++) {
			nn_mem_free(m->dev, m->acts[i]);
			nn_mem_free(m->dev, m->dacts[i]);
			nn_mem_free(m->dev, m->pool_idx[i]);
		}
	free(m->acts);
	free(m->dacts);
	free(m->pool_idx);
	nn_mem_free(m->dev, m->input);
	m->acts = m->dacts = NULL;
	m->pool_idx = NULL;
	m->input = NULL;
	m->capacity = 0;
}

/* Makes room for 'batch' samples; allocates only when the batch is larger than any before. */
static int reserve(struct pp_model *m, size_t batch)
{
	size_t bytes;
	int ret;

	if (batch <= m->capacity)
		return 0;
	free_activations(m);
	m->acts = calloc(m->n_layers, sizeof(*m->acts));
	m->dacts = calloc(m->n_layers, sizeof(*m->dacts));
	m->pool_idx = calloc(m->n_layers, sizeof(*m->pool_idx));
	if (!m->acts || !m->dacts || !m->pool_idx) {
		ret = pp_error(-ENOMEM, "model: out of memory for a batch of %zu", batch);
		goto err_free_activations;
	}
	if (!pp_mul_size(batch, m->layers[0].in_size * sizeof(float), &bytes)) {
		ret = pp_error(-EOVERFLOW, "model: a batch of %zu is too large", batch);
		goto err_free_activations;
	}
	ret = nn_mem_alloc(m->dev, bytes, (void **)&m->input);
	for (size_t i = 0; i < m->n_layers && !ret; i++) {
		if (!pp_mul_size(batch, m->layers[i].out_size * sizeof(float), &bytes)) {
			ret = pp_error(-EOVERFLOW, "model: a batch of %zu is too large", batch);
			break;
		}
		ret = nn_mem_alloc(m->dev, bytes, (void **)&m->acts[i]);
		if (!ret)
			ret = nn_mem_alloc(m->dev, bytes, (void **)&m->dacts[i]);
		if (!ret && m->layers[i].kind == NN_MAXPOOL)
			ret = nn_mem_alloc(m->dev, bytes, (void **)&m->pool_idx[i]);
	}
	if (ret)
		goto err_free_activations;
	m->capacity = batch;
	return 0;

err_free_activations:
	free_activations(m);
	return ret;
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

static int check_config(const struct pp_model_config *cfg)
{
	if (cfg->threads < 1 || cfg->threads > NN_MAX_THREADS)
		return pp_error(-EINVAL, "model: %d threads (expected 1..%d)", cfg->threads, NN_MAX_THREADS);
	if (!(cfg->std > 0.0f) || !isfinite(cfg->mean) || !isfinite(cfg->std))
		return pp_error(-EINVAL, "model: normalisation mean %g, std %g (expected finite, std > 0)",
				(double)cfg->mean, (double)cfg->std);
	if (cfg->num_classes < 2)
		return pp_error(-EINVAL, "model: %u classes (expected >= 2)", cfg->num_classes);
	return nn_optim_check(&cfg->optim);
}

void pp_model_destroy(struct pp_model *m)
{
	if (!m)
		return;
	if (m->tids) {
		stop_workers(m, m->threads_started);
		pthread_cond_destroy(&m->go);
		pthread_cond_destroy(&m->done);
		pthread_mutex_destroy(&m->lock);
	}
	free(m->tids);
	if (m->workers)
		for (int t = 0; t < m->threads; t++) {
			if (t)
				nn_mem_free(m->dev, m->workers[t].grads);
			nn_mem_free(m->dev, m->workers[t].col);
			nn_mem_free(m->dev, m->workers[t].dcol);
		}
	free(m->workers);
	free_activations(m);
	nn_mem_free(m->dev, m->optim.buf1);
	nn_mem_free(m->dev, m->optim.buf2);
	nn_mem_free(m->dev, m->grads);
	nn_mem_free(m->dev, m->params);
	free(m->layers);
	free(m->spec);
	free(m);
}

/* Allocates the parameters, optimizer state and per-thread buffers, and starts the threads. */
static int model_setup(struct pp_model *m)
{
	size_t pbytes = m->n_params * sizeof(float);
	int ret;

	ret = nn_mem_alloc(m->dev, pbytes, (void **)&m->params);
	if (!ret)
		ret = nn_mem_alloc(m->dev, pbytes, (void **)&m->grads);
	if (!ret)
		ret = nn_mem_alloc(m->dev, pbytes, (void **)&m->optim.buf1);
	if (!ret && m->cfg.optim.kind == PP_OPTIM_ADAM)
		ret = nn_mem_alloc(m->dev, pbytes, (void **)&m->optim.buf2);
	if (ret)
		return ret;
	m->optim.cfg = m->cfg.optim;
	for (size_t i = 0; i < m->n_layers; i++)
		if (m->layers[i].kind == NN_CONV)
			m->col_floats = PP_MAX(m->col_floats, m->layers[i].n_w / (size_t)m->layers[i].out_c *
								      (size_t)m->layers[i].out_h * m->layers[i].out_w);
	m->threads = m->cfg.threads;
	m->workers = calloc((size_t)m->threads, sizeof(*m->workers));
	if (!m->workers)
		return pp_error(-ENOMEM, "model: out of memory");
	for (int t = 0; t < m->threads; t++) {
		struct nn_worker *wk = &m->workers[t];

		wk->m = m;
		wk->index = t;
		wk->grads = m->grads;
		if (t)
			ret = nn_mem_alloc(m->dev, pbytes, (void **)&wk->grads);
		if (!ret)
			ret = nn_mem_alloc(m->dev, m->col_floats * sizeof(float), (void **)&wk->col);
		if (!ret)
			ret = nn_mem_alloc(m->dev, m->col_floats * sizeof(float), (void **)&wk->dcol);
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

int nn_model_new(const char *spec, struct pp_device *dev, const struct pp_model_config *cfg,
		 struct pp_model **model_p)
{
	struct pp_model *m;
	const struct nn_layer *last;
	int ret;

	ret = check_config(cfg);
	if (ret)
		return ret;
	m = calloc(1, sizeof(*m));
	if (!m)
		return pp_error(-ENOMEM, "model: out of memory");
	m->dev = dev;
	m->kind = nn_device_kind(dev);
	m->cfg = *cfg;
	ret = nn_spec_parse(spec, (int)PP_MIN(cfg->in_channels, 1u << 30),
			    (int)PP_MIN(cfg->in_height, 1u << 30), (int)PP_MIN(cfg->in_width, 1u << 30),
			    &m->layers, &m->n_layers, &m->spec);
	if (ret)
		goto err_destroy;
	last = &m->layers[m->n_layers - 1];
	if (last->out_size != cfg->num_classes) {
		ret = pp_error(-EINVAL, "model spec '%s': the last layer gives %zu outputs, expected %u classes",
			       m->spec, last->out_size, cfg->num_classes);
		goto err_destroy;
	}
	m->n_params = last->b_off + last->n_b;
	openblas_set_num_threads(1);
	ret = model_setup(m);
	if (ret)
		goto err_destroy;
	*model_p = m;
	return 0;

err_destroy:
	pp_model_destroy(m);
	return ret;
}

int pp_model_create(const char *spec, struct pp_device *dev, const struct pp_model_config *cfg,
		    struct pp_model **model_p)
{
	struct pp_model *m;
	float *host;
	int ret = nn_model_new(spec, dev, cfg, &m);

	if (ret)
		return ret;
	host = calloc(m->n_params ? m->n_params : 1, sizeof(float));
	if (!host) {
		pp_model_destroy(m);
		return pp_error(-ENOMEM, "model: out of memory");
	}
	init_params(m, host);
	ret = pp_model_params_write(m, host, m->n_params);
	free(host);
	if (ret) {
		pp_model_destroy(m);
		return ret;
	}
	*model_p = m;
	return 0;
}

const char *pp_model_spec(const struct pp_model *m)
{
	return m->spec;
}

size_t pp_model_param_count(const struct pp_model *m)
{
	return m->n_params;
}

uint64_t pp_model_steps(const struct pp_model *m)
{
	return m->optim.t;
}

int pp_model_summary(const struct pp_model *m, char *buf, size_t size)
{
	static const char *names[] = { "", "conv", "maxpool", "relu", "flatten", "fc" };
	size_t len = 0;

	if (size)
		buf[0] = '\0';
	for (size_t i = 0; i < m->n_layers; i++) {
		const struct nn_layer *l = &m->layers[i];
		char geom[48] = "";
		int r;

		if (l->kind == NN_CONV)
			snprintf(geom, sizeof(geom), " k%d s%d p%d", l->k, l->stride, l->pad);
		else if (l->kind == NN_MAXPOOL)
			snprintf(geom, sizeof(geom), " k%d s%d", l->k, l->stride);
		r = snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0,
			     "%-8s %dx%dx%d -> %dx%dx%d%s  %zu params\n", names[l->kind], l->in_c,
			     l->in_h, l->in_w, l->out_c, l->out_h, l->out_w, geom, l->n_w + l->n_b);
		len += (size_t)r;
	}
	len += (size_t)snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0,
				"total %zu params\n", m->n_params);
	return (int)len;
}

int pp_model_params_read(struct pp_model *m, float *dst, size_t count)
{
	if (count != m->n_params)
		return pp_error(-EINVAL, "model: reading %zu parameters, the model has %zu", count,
				m->n_params);
	return nn_mem_copy(NULL, dst, m->dev, m->params, count * sizeof(float));
}

int pp_model_params_write(struct pp_model *m, const float *src, size_t count)
{
	if (count != m->n_params)
		return pp_error(-EINVAL, "model: writing %zu parameters, the model has %zu", count,
				m->n_params);
	return nn_mem_copy(m->dev, m->params, NULL, src, count * sizeof(float));
}

/* Checks that 'inputs' fits the model (device, dtype, sample shape) and fills the job's inputs. */
static int check_inputs(struct pp_model *m, const struct pp_tensor *in, const int32_t *labels,
			struct nn_job *job)
{
	const size_t want = m->layers[0].in_size;
	size_t per = 1;

	if (in->dev != m->dev && !(in->kind == PP_DEVICE_CPU && m->kind == PP_DEVICE_CPU))
		return pp_error(-EINVAL, "model inputs: expected device %s but got %s",
				nn_device_name(m->dev), nn_device_name(in->dev));
	for (int i = 1; i < in->ndim; i++)
		per *= in->shape[i];
	if (in->ndim < 2 || per != want)
		return pp_error(-EINVAL,
				"model inputs: a tensor of %d dimensions with %zu elements per sample, expected (batch, %u, %u, %u)",
				in->ndim, per, m->cfg.in_channels, m->cfg.in_height, m->cfg.in_width);
	if (!labels)
		return pp_error(-EINVAL, "model inputs: no labels");
	job->batch = in->shape[0];
	job->in_u8 = in->dtype == PP_DTYPE_U8 ? in->data : NULL;
	job->in_f32 = in->dtype == PP_DTYPE_F32 ? in->data : NULL;
	job->labels = labels;
	return reserve(m, job->batch);
}

int pp_model_train_step(struct pp_model *m, const struct pp_tensor *inputs, const int32_t *labels)
{
	struct nn_job job = { .train = true };
	int ret = check_inputs(m, inputs, labels, &job);

	if (ret)
		return ret;
	ret = run_job(m, &job);
	if (ret)
		return ret;
	for (int t = 1; t < m->threads; t++) {
		const float *g = m->workers[t].grads;

		if (m->workers[t].count)
			for (size_t i = 0; i < m->n_params; i++)
				m->grads[i] += g[i];
	}
	nn_optim_step_cpu(&m->optim, m->params, m->grads, m->n_params);
	return 0;
}

int pp_model_evaluate(struct pp_model *m, const struct pp_tensor *inputs, const int32_t *labels,
		      struct pp_tensor *logits)
{
	struct nn_job job = { .train = false };
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	int ret = check_inputs(m, inputs, labels, &job);

	if (ret)
		return ret;
	if (logits && (logits->dtype != PP_DTYPE_F32 || logits->numel != job.batch * last->out_size))
		return pp_error(-EINVAL, "model logits: %zu %s elements, expected %zu f32", logits->numel,
				pp_dtype_name(logits->dtype), job.batch * last->out_size);
	if (logits && logits->dev != m->dev && !(logits->kind == PP_DEVICE_CPU && m->kind == PP_DEVICE_CPU))
		return pp_error(-EINVAL, "model logits: expected device %s but got %s",
				nn_device_name(m->dev), nn_device_name(logits->dev));
	ret = run_job(m, &job);
	if (ret)
		return ret;
	if (logits)
		return nn_mem_copy(logits->dev, logits->data, m->dev, m->acts[m->n_layers - 1],
				   job.batch * last->out_size * sizeof(float));
	return 0;
}

int pp_model_metrics(struct pp_model *m, bool reset, struct pp_model_metrics *metrics_p)
{
	*metrics_p = m->metrics;
	if (reset)
		memset(&m->metrics, 0, sizeof(m->metrics));
	return 0;
}
