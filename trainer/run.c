/*
 * trainer/run.c: one run of pinpipe-train's grid built and released
 * (trainer/run.h): its device, the loaders and transfer stages of its
 * splits, its model (new, or resumed from --checkpoint) and its events.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "trainer/run.h"
#include "trainer/tensorboard.h"

/* Fashion-MNIST's training-set statistics, as in the seeds' Normalize(). */
#define NORM_MEAN 0.2860f
#define NORM_STD 0.3530f

/* The fallback of "auto" to the cpu with a GPU driver there was said on stderr. */
static bool auto_fallback_said;

/*
 * Writes into p->device the name of the device the run opened, as its
 * rows, its errors and its --logdir folder give it: what "auto" or "cuda"
 * opened (cpu, cuda:0), with the options a sim was given
 * ("sim:bw=25GB/s,call_us=20"; the device itself says "sim").
 */
static void name_device(struct tr_params *p, const struct pp_device *dev)
{
	const char *name = pp_device_get_props(dev)->name;

	if (strcmp(name, "sim") != 0 || strncmp(p->device, "sim:", 4) != 0)
		snprintf(p->device, sizeof(p->device), "%s", name);
}

/*
 * The model readied for the run's steps before its first epoch
 * (pp_model_prepare()), so that no epoch carries the allocation of its
 * buffers or the first launches of its kernels (cuBLAS picks its kernels
 * by shape): for each split, the batch size or its samples where they are
 * fewer (a rank's share of them), and in a world of one its shorter last
 * batch too.  Not with --deterministic, whose training steps are
 * micro-batches (on the CPU, which loads no kernels).
 */
static int prepare_model(const struct tr_options *opt, const struct tr_params *p,
			 const struct tr_run *r)
{
	struct pp_loader *const loaders[3] = { r->train_loader, r->val_loader, r->test_loader };
	const uint64_t batch = p->batch_size, ranks = (uint64_t)r->dist->size;
	uint64_t sizes[6];
	size_t n = 0;
	int ret = 0;

	for (int i = 0; i < 3 && !opt->deterministic; i++) {
		const bool drop = i == 0 && opt->drop_last;
		uint64_t count = loaders[i] ? pp_loader_info(loaders[i])->count / ranks : 0;

		if (count == 0 || (drop && count < batch))
			continue; /* no step of it: no split, or no whole batch (refused later) */
		sizes[n++] = count < batch ? count : batch;
		if (ranks == 1 && count > batch && count % batch != 0 && !drop)
			sizes[n++] = count % batch;
	}
	/* each size once: the splits share the batch size, and a step's warming is a whole step */
	for (size_t i = 0; i < n && ret == 0; i++) {
		bool seen = false;

		for (size_t j = 0; j < i; j++)
			seen = seen || sizes[j] == sizes[i];
		if (!seen)
			ret = pp_model_prepare(r->model, (size_t)sizes[i]);
	}
	return ret;
}

int tr_run_open(const struct tr_options *opt, struct tr_params *p, unsigned run,
		const struct tr_data *d, struct tr_dist *dist, struct tr_run *r)
{
	const struct pp_sample_info *info;
	struct pp_model_config mc;
	char device[sizeof(p->device)];
	int ret;

	memset(r, 0, sizeof(*r));
	r->dist = dist;
	tr_dist_device(dist, p->device, device, sizeof(device));
	ret = pp_device_open(device, &r->dev);
	if (ret < 0)
		return ret;
	/* "auto" fell back to the cpu although a GPU driver is there: say so, once a process. */
	if (pp_device_get_props(r->dev)->fallback[0] != '\0' && !auto_fallback_said) {
		fprintf(stderr, "pinpipe-train: --device=%s: %s\n", p->device,
			pp_device_get_props(r->dev)->fallback);
		auto_fallback_said = true;
	}
	name_device(p, r->dev);
	ret = tr_dist_run_begin(dist, r->dev);
	if (ret < 0)
		return ret;
	r->host_compute_on_copy = pp_device_get_props(r->dev)->host_addressable &&
				  !pp_device_get_props(r->dev)->host_is_device;
	ret = pp_stream_create(r->dev, &r->compute);
	if (ret < 0)
		return ret;
	ret = tr_make_pipeline(opt, p, &d->train, true, r, &r->train_loader, &r->train_xfer);
	if (ret < 0)
		return ret;
	if (tr_split_present(&d->val)) {
		ret = tr_make_pipeline(opt, p, &d->val, false, r, &r->val_loader, &r->val_xfer);
		if (ret < 0)
			return ret;
	}
	if (tr_split_present(&d->test)) {
		ret = tr_make_pipeline(opt, p, &d->test, false, r, &r->test_loader, &r->test_xfer);
		if (ret < 0)
			return ret;
	}
	info = pp_loader_info(r->train_loader);
	pp_model_config_init(&mc);
	mc.in_channels = info->ndim == 3 ? info->shape[0] : 1;
	mc.in_height = info->ndim == 3 ? info->shape[1] : info->shape[0];
	mc.in_width = info->ndim == 3 ? info->shape[2] : (info->ndim >= 2 ? info->shape[1] : 1);
	mc.num_classes = info->num_classes;
	mc.seed = opt->seed;
	mc.threads = (int)p->threads;
	mc.mean = NORM_MEAN;
	mc.std = NORM_STD;
	mc.keep_denormals = opt->keep_denormals;
	mc.graph = opt->graph;
	mc.stream = r->compute;
	if (dist->sync != NULL)
		pp_grad_sync_attach(dist->sync, &mc);
	mc.optim.kind = strcmp(p->optimizer, "sgd") == 0 ? PP_OPTIM_SGD : PP_OPTIM_ADAM;
	mc.optim.lr = (float)p->lr;
	mc.optim.momentum = (float)opt->momentum;
	mc.optim.nesterov = opt->nesterov;
	mc.optim.weight_decay = (float)opt->weight_decay;
	if (opt->resume)
		ret = pp_model_load(opt->checkpoint, r->dev, &mc, &r->model);
	else
		ret = pp_model_create(p->model, r->dev, &mc, &r->model);
	if (ret == 0 && opt->deterministic && !pp_device_get_props(r->dev)->host_addressable) {
		fprintf(stderr, "pinpipe-train: --deterministic runs on cpu or sim, not on %s\n",
			pp_device_get_props(r->dev)->name);
		ret = -EINVAL;
	}
	if (ret == 0)
		ret = tr_dist_start_model(dist, r->model);
	if (ret == 0)
		ret = prepare_model(opt, p, r);
	return ret;
}

void tr_run_close(struct tr_run *r)
{
	/* First the communicator of the gradients: a reduction a failure left in flight
	 * is aborted with it before the model's memory goes (nccl). */
	if (r->dist != NULL)
		tr_dist_run_end(r->dist);
	tr_tb_close(r);
	pp_model_destroy(r->model);
	pp_transfer_destroy(r->test_xfer);
	pp_transfer_destroy(r->val_xfer);
	pp_transfer_destroy(r->train_xfer);
	pp_loader_destroy(r->test_loader);
	pp_loader_destroy(r->val_loader);
	pp_loader_destroy(r->train_loader);
	pp_stream_destroy(r->compute);
	pp_device_close(r->dev);
	memset(r, 0, sizeof(*r));
}

void tr_blas_note(struct tr_params *p, bool say)
{
	static bool said;
	struct pp_blas_info info;

	pp_blas_get_info(&info);
	if (info.library[0] != '\0')
		snprintf(p->blas, sizeof(p->blas), "%s %s", info.library, info.core);
	if (info.warning[0] != '\0' && !said && say)
		fprintf(stderr, "pinpipe-train: warning: %s\n", info.warning);
	said = said || info.warning[0] != '\0';
}

void tr_say_graph_fallback(const struct pp_model *model)
{
	static bool said;
	struct pp_model_graph_stats gs;

	pp_model_get_graph_stats(model, &gs);
	if (gs.fallback[0] != '\0' && !said) {
		fprintf(stderr, "pinpipe-train: %s\n", gs.fallback);
		said = true;
	}
}
