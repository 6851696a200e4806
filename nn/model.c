/*
 * nn/model.c: models built from a spec: parameters and their PyTorch-style
 * initialisation, activations sized once for the largest batch seen, the
 * checks of a step's inputs, and the dispatch of steps to the backend of
 * the model's device (nn/cpu/model_cpu.c, nn/cuda/model_cuda.c).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "nn/nn_impl.h"

#define NN_MAX_THREADS 256

PP_API void pp_model_config_init(struct pp_model_config *cfg)
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

/*
 * PyTorch's defaults: kaiming_uniform_(a = sqrt(5)) gives the weights the
 * bound sqrt(6 / ((1 + 5) fan_in)) = 1 / sqrt(fan_in), the bias's bound.
 * Layer by layer, the weight's values then the bias's, from one stream.
 */
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

static void free_activations(struct pp_model *m)
{
	if (m->acts)
		for (size_t i = 0; i < m->n_layers; i++) {
			pp_nn_mem_free(m->dev, m->acts[i]);
			pp_nn_mem_free(m->dev, m->dacts[i]);
			pp_nn_mem_free(m->dev, m->pool_idx[i]);
		}
	free(m->acts);
	free(m->dacts);
	free(m->pool_idx);
	pp_nn_mem_free(m->dev, m->input);
	m->acts = m->dacts = NULL;
	m->pool_idx = NULL;
	m->input = NULL;
	m->capacity = 0;
}

/* Makes room for 'batch' samples; allocates only when the batch is larger than any before. */
int pp_nn_model_reserve(struct pp_model *m, size_t batch)
{
	size_t bytes;
	int ret;

	if (batch <= m->capacity)
		return 0;
	pp_nn_graph_drop(m); /* they hold the old buffers */
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
	ret = pp_nn_mem_alloc(m->dev, bytes, (void **)&m->input);
	for (size_t i = 0; i < m->n_layers && !ret; i++) {
		if (!pp_mul_size(batch, m->layers[i].out_size * sizeof(float), &bytes)) {
			ret = pp_error(-EOVERFLOW, "model: a batch of %zu is too large", batch);
			break;
		}
		ret = pp_nn_mem_alloc(m->dev, bytes, (void **)&m->acts[i]);
		if (!ret)
			ret = pp_nn_mem_alloc(m->dev, bytes, (void **)&m->dacts[i]);
		if (!ret && m->layers[i].kind == NN_MAXPOOL)
			ret = pp_nn_mem_alloc(m->dev, bytes, (void **)&m->pool_idx[i]);
	}
	if (ret)
		goto err_free_activations;
	m->capacity = batch;
	ret = m->backend->reserve(m);
	if (ret)
		goto err_free_activations;
	return 0;

err_free_activations:
	free_activations(m);
	return ret;
}

int pp_nn_model_check_runtime(const struct pp_model_config *cfg)
{
	if (cfg->threads < 1 || cfg->threads > NN_MAX_THREADS)
		return pp_error(-EINVAL, "model: %d threads (expected 1..%d)", cfg->threads, NN_MAX_THREADS);
	if (!(cfg->std > 0.0f) || !isfinite(cfg->mean) || !isfinite(cfg->std) ||
	    fpclassify(cfg->mean) == FP_SUBNORMAL || fpclassify(cfg->std) == FP_SUBNORMAL ||
	    !isfinite(1.0f / (255.0f * cfg->std)) || !isfinite(cfg->mean / cfg->std))
		return pp_error(-EINVAL, "model: normalisation mean %g, std %g (expected finite, not "
				"subnormal, std > 0, and a finite (x / 255 - mean) / std)",
				(double)cfg->mean, (double)cfg->std);
	return 0;
}

/*
 * A model whose parameters, gradient and optimizer state alone exceed the
 * memory of its device (the host's for the cpu and for NULL) is refused
 * before anything is allocated, saying what it needs and for which input:
 * a wide first layer on large samples asked for many gigabytes unsaid.
 */
static int check_memory(const struct pp_model *m, struct pp_device *dev)
{
	const uint64_t vectors = m->cfg.optim.kind == PP_OPTIM_ADAM ? 4 : 3;
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t have, need;

	if (dev != NULL)
		have = pp_device_get_props(dev)->total_memory;
	else
		have = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
	if (have == 0)
		return 0;
	if (!__builtin_mul_overflow((uint64_t)m->n_params, vectors * sizeof(float), &need) &&
	    need <= have)
		return 0;
	return pp_error(-ENOMEM, "model spec '%s' on %u x %u x %u inputs: its %zu parameters need "
			"%.1f GiB for themselves, their gradient and the optimizer's state, more "
			"than the %.1f GiB of memory of %s", m->spec, m->cfg.in_channels,
			m->cfg.in_height, m->cfg.in_width, m->n_params,
			(double)m->n_params * (double)vectors * sizeof(float) / (1u << 30),
			(double)have / (1u << 30),
			dev != NULL ? pp_device_get_props(dev)->name : "this machine");
}

int pp_nn_optim_check(const struct pp_optimizer_config *c)
{
	if (c->kind != PP_OPTIM_SGD && c->kind != PP_OPTIM_ADAM)
		return pp_error(-EINVAL, "optimizer: unknown kind %d (expected sgd or adam)", (int)c->kind);
	if (!(c->lr > 0.0f) || !isfinite(c->lr))
		return pp_error(-EINVAL, "optimizer: learning rate %g (expected > 0)", (double)c->lr);
	if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
		return pp_error(-EINVAL, "optimizer: weight decay %g (expected >= 0)", (double)c->weight_decay);
	if (c->kind == PP_OPTIM_SGD) {
		if (!(c->momentum >= 0.0f) || !(c->dampening >= 0.0f))
			return pp_error(-EINVAL, "sgd: momentum %g, dampening %g (expected >= 0)",
					(double)c->momentum, (double)c->dampening);
		if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
			return pp_error(-EINVAL, "sgd: Nesterov momentum requires a momentum and zero dampening");
	} else {
		if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
			return pp_error(-EINVAL, "adam: betas %g, %g (expected in [0, 1))",
					(double)c->beta1, (double)c->beta2);
		if (!(c->eps > 0.0f))
			return pp_error(-EINVAL, "adam: eps %g (expected > 0)", (double)c->eps);
	}
	return 0;
}

static int check_config(const struct pp_model_config *cfg)
{
	int ret = pp_nn_model_check_runtime(cfg);

	if (ret)
		return ret;
	if (cfg->num_classes < 2)
		return pp_error(-EINVAL, "model: %u classes (expected >= 2)", cfg->num_classes);
	return pp_nn_optim_check(&cfg->optim);
}

PP_API void pp_model_destroy(struct pp_model *m)
{
	if (!m)
		return;
	pp_nn_graph_free(m);
	if (m->backend)
		m->backend->teardown(m);
	free_activations(m);
	pp_nn_mem_free(m->dev, m->optim.buf1);
	pp_nn_mem_free(m->dev, m->optim.buf2);
	pp_nn_mem_free(m->dev, m->grads);
	pp_nn_mem_free(m->dev, m->params);
	free(m->layers);
	free(m->spec);
	free(m);
}

/* Allocates the parameters and optimizer state, and sets up the backend. */
static int model_setup(struct pp_model *m)
{
	size_t pbytes = m->n_params * sizeof(float);
	int ret;

	ret = pp_nn_mem_alloc(m->dev, pbytes, (void **)&m->params);
	if (!ret)
		ret = pp_nn_mem_alloc(m->dev, pbytes, (void **)&m->grads);
	if (!ret)
		ret = pp_nn_mem_alloc(m->dev, pbytes, (void **)&m->optim.buf1);
	if (!ret && m->cfg.optim.kind == PP_OPTIM_ADAM)
		ret = pp_nn_mem_alloc(m->dev, pbytes, (void **)&m->optim.buf2);
	if (ret)
		return ret;
	m->optim.cfg = m->cfg.optim;
	ret = m->backend->setup(m);
	return ret ? ret : pp_nn_graph_init(m);
}

int pp_nn_model_new(const char *spec, struct pp_device *dev, const struct pp_model_config *cfg,
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
	/* the backend is chosen by what the device offers, not by its kind */
	if (pp_nn_host_addressable(dev))
		m->backend = &pp_nn_backend_cpu;
	else if (pp_device_get_props(dev)->cuda_streams)
		m->backend = &pp_nn_backend_cuda;
	else {
		free(m);
		return pp_error(-ENODEV, "model: no nn backend for device %s: its memory is not "
				"the host's and its streams are not CUDA streams",
				pp_nn_device_name(dev));
	}
	m->cfg = *cfg;
	ret = pp_nn_spec_parse(spec, (int)PP_MIN(cfg->in_channels, 1u << 30),
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
	ret = check_memory(m, dev);
	if (ret)
		goto err_destroy;
	ret = model_setup(m);
	if (ret)
		goto err_destroy;
	*model_p = m;
	return 0;

err_destroy:
	pp_model_destroy(m);
	return ret;
}

PP_API int pp_model_create(const char *spec, struct pp_device *dev,
			   const struct pp_model_config *cfg, struct pp_model **model_p)
{
	struct pp_model *m;
	float *host;
	int ret = pp_nn_model_new(spec, dev, cfg, &m);

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

PP_API const char *pp_model_spec(const struct pp_model *m)
{
	return m->spec;
}

PP_API size_t pp_model_param_count(const struct pp_model *m)
{
	return m->n_params;
}

PP_API uint64_t pp_model_steps(const struct pp_model *m)
{
	return m->optim.t;
}

/* The spec's name of each layer kind. */
static const char *const layer_names[] = { "", "conv", "maxpool", "relu", "flatten", "fc" };

PP_API int pp_model_summary(const struct pp_model *m, char *buf, size_t size)
{
	const char *const *names = layer_names;
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

int pp_nn_model_wait(struct pp_model *m)
{
	return m->backend->queued ? pp_stream_synchronize(m->cfg.stream) : 0;
}

size_t pp_nn_past_flattens(const struct pp_model *m, size_t i)
{
	for (; i < m->n_layers && m->layers[i].kind == NN_FLATTEN; i--)
		;
	return i < m->n_layers ? i : SIZE_MAX;
}

bool pp_nn_behind_pooled_conv(const struct pp_model *m, size_t i)
{
	const struct nn_layer *L = m->layers;

	if (i >= 1 && L[i - 1].kind == NN_CONV && L[i - 1].sparse_dout)
		return true;
	return L[i].kind == NN_MAXPOOL && i >= 2 && L[i - 1].kind == NN_RELU &&
	       L[i - 2].kind == NN_CONV && L[i - 2].sparse_dout;
}

int pp_nn_model_grads_ready(struct pp_model *m, size_t offset, size_t count)
{
	if (m->cfg.grad_hook == NULL || count == 0)
		return 0;
	return m->cfg.grad_hook(m->cfg.grad_hook_arg, m->grads + offset, offset, count,
				m->backend->queued ? m->cfg.stream : NULL);
}

int pp_nn_model_grads_tick(struct pp_model *m)
{
	if (m->cfg.grad_hook == NULL)
		return 0;
	return m->cfg.grad_hook(m->cfg.grad_hook_arg, NULL, m->n_params, 0,
				m->backend->queued ? m->cfg.stream : NULL);
}

int pp_nn_model_grads_sync(struct pp_model *m)
{
	if (m->cfg.grad_sync == NULL)
		return 0;
	return m->cfg.grad_sync(m->cfg.grad_hook_arg, m->backend->queued ? m->cfg.stream : NULL);
}

PP_API int pp_model_params_read(struct pp_model *m, float *dst, size_t count)
{
	int ret;

	if (count != m->n_params)
		return pp_error(-EINVAL, "model: reading %zu parameters, the model has %zu", count,
				m->n_params);
	ret = pp_nn_model_wait(m);
	return ret ? ret : pp_nn_mem_copy(NULL, dst, m->dev, m->params, count * sizeof(float));
}

PP_API int pp_model_grads_read(struct pp_model *m, float *dst, size_t count)
{
	int ret;

	if (count != m->n_params)
		return pp_error(-EINVAL, "model: reading %zu gradients, the model has %zu", count,
				m->n_params);
	ret = pp_nn_model_wait(m);
	return ret ? ret : pp_nn_mem_copy(NULL, dst, m->dev, m->grads, count * sizeof(float));
}

PP_API size_t pp_model_param_list(const struct pp_model *m, struct pp_model_param *params,
				  size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < m->n_layers; i++) {
		const struct nn_layer *l = &m->layers[i];

		for (int bias = 0; bias < 2; bias++) {
			size_t count = bias ? l->n_b : l->n_w;

			if (count == 0)
				continue;
			if (n < max) {
				snprintf(params[n].name, sizeof(params[n].name), "%zu.%s.%s", i,
					 layer_names[l->kind], bias ? "bias" : "weight");
				params[n].offset = bias ? l->b_off : l->w_off;
				params[n].count = count;
			}
			n++;
		}
	}
	return n;
}

PP_API int pp_model_params_write(struct pp_model *m, const float *src, size_t count)
{
	int ret;

	if (count != m->n_params)
		return pp_error(-EINVAL, "model: writing %zu parameters, the model has %zu", count,
				m->n_params);
	ret = pp_nn_model_wait(m);
	return ret ? ret : pp_nn_mem_copy(m->dev, m->params, NULL, src, count * sizeof(float));
}

/* True when a tensor on 'dev' can be used by a model on 'mdev'. */
static bool same_device(const struct pp_device *dev, const struct pp_device *mdev)
{
	return dev == mdev || (pp_nn_host_is_device(dev) && pp_nn_host_is_device(mdev));
}

/* Checks that 'inputs' fits the model (device, dtype, sample shape) and fills the job's inputs. */
static int check_inputs(struct pp_model *m, const struct pp_tensor *in, const int32_t *labels,
			struct nn_job *job)
{
	const size_t want = m->layers[0].in_size;
	size_t per = 1;

	if (!same_device(in->dev, m->dev))
		return pp_error(-EINVAL, "model inputs: expected device %s but got %s",
				pp_nn_device_name(m->dev), pp_nn_device_name(in->dev));
	for (int i = 1; i < in->ndim; i++)
		per *= in->shape[i];
	if (in->ndim < 2 || per != want)
		return pp_error(-EINVAL,
				"model inputs: a tensor of %d dimensions with %zu elements per sample, "
				"expected (batch, %u, %u, %u)",
				in->ndim, per, m->cfg.in_channels, m->cfg.in_height, m->cfg.in_width);
	if (!labels)
		return pp_error(-EINVAL, "model inputs: no labels");
	job->batch = in->shape[0];
	job->in_u8 = in->dtype == PP_DTYPE_U8 ? in->data : NULL;
	job->in_f32 = in->dtype == PP_DTYPE_F32 ? in->data : NULL;
	job->labels = labels;
	return pp_nn_model_reserve(m, job->batch);
}

PP_API int pp_model_train_step(struct pp_model *m, const struct pp_tensor *inputs,
			       const int32_t *labels)
{
	struct nn_job job = { .train = true };
	int ret = check_inputs(m, inputs, labels, &job);

	if (ret)
		return ret;
	return pp_nn_graph_run(m, &job);
}

PP_API int pp_model_evaluate(struct pp_model *m, const struct pp_tensor *inputs,
			     const int32_t *labels, struct pp_tensor *logits)
{
	struct nn_job job = { .train = false };
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	int ret = check_inputs(m, inputs, labels, &job);

	if (ret)
		return ret;
	if (logits && (logits->dtype != PP_DTYPE_F32 || logits->numel != job.batch * last->out_size))
		return pp_error(-EINVAL, "model logits: %zu %s elements, expected %zu f32", logits->numel,
				pp_dtype_name(logits->dtype), job.batch * last->out_size);
	if (logits && !same_device(logits->dev, m->dev))
		return pp_error(-EINVAL, "model logits: expected device %s but got %s",
				pp_nn_device_name(m->dev), pp_nn_device_name(logits->dev));
	job.logits = logits ? logits->data : NULL;
	return pp_nn_graph_run(m, &job);
}

PP_API int pp_model_prepare(struct pp_model *m, size_t batch)
{
	int ret;

	if (batch == 0)
		return pp_error(-EINVAL, "model: preparing for a batch of 0 samples");
	ret = pp_nn_model_reserve(m, batch);
	if (!ret && m->backend->warm)
		ret = m->backend->warm(m, batch);
	return ret;
}

PP_API int pp_model_metrics(struct pp_model *m, bool reset, struct pp_model_metrics *metrics_p)
{
	return m->backend->metrics(m, reset, metrics_p);
}

PP_API int pp_model_set_lr(struct pp_model *m, float lr)
{
	if (!(lr > 0.0f) || !isfinite(lr))
		return pp_error(-EINVAL, "model: learning rate %g (expected finite, > 0)", (double)lr);
	if (lr == m->optim.cfg.lr)
		return 0;
	m->optim.cfg.lr = lr;
	m->cfg.optim.lr = lr;
	pp_nn_graph_drop(m);
	return 0;
}

PP_API void pp_model_get_optimizer(const struct pp_model *m, struct pp_optimizer_config *cfg_p)
{
	*cfg_p = m->optim.cfg;
}
