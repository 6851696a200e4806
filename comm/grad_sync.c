/*
 * comm/grad_sync.c: a model's gradient averaged over the ranks every step
 * (pinpipe/grad_sync.h): buckets of consecutive ranges, each allreduce
 * started as soon as its bucket is full and waited for at the sync; or the
 * deterministic reduction of fixed micro-batches, one slot each.  Above
 * both comm/ and nn/, it uses their public calls only.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "pinpipe/grad_sync.h"

struct pp_grad_sync {
	struct pp_comm *comm;
	int rank, size;           /* in the communicator */
	size_t bucket_floats;     /* a bucket's least size, floats (>= 1) */
	unsigned micro;           /* deterministic: micro-batches a global batch (M); 0: buckets */
	unsigned local_count;     /* deterministic: micro-batches a step on this rank (M / size) */
	unsigned local_done;      /* this step's micro-batches whose gradient is kept */
	size_t n_params;          /* floats of one gradient (pp_grad_sync_start()) */
	float *slots;             /* deterministic: (micro, n_params) each micro-batch's gradient */
	float *base;              /* the step's gradient vector (the hook's grads - offset) */
	size_t lo, hi;            /* the open bucket, floats [lo, hi) of it (lo = hi: none) */
	struct pp_comm_request **reqs; /* the step's allreduces in flight, in order */
	size_t n_reqs, cap_reqs;
	struct pp_grad_sync_stats stats;
};

PP_API void pp_grad_sync_config_init(struct pp_grad_sync_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
}

PP_API int pp_grad_sync_create(const struct pp_grad_sync_config *cfg, struct pp_grad_sync **gs_p)
{
	struct pp_grad_sync *gs;

	if (cfg == NULL || gs_p == NULL || cfg->comm == NULL)
		return pp_error(-EINVAL, "grad_sync: no %s", cfg == NULL ? "config" :
				gs_p == NULL ? "place for the grad sync" : "communicator");
	if (cfg->micro_batches % (unsigned)pp_comm_size(cfg->comm) != 0)
		return pp_error(-EINVAL, "grad_sync: %u micro-batches are not a multiple of the %d "
				"ranks", cfg->micro_batches, pp_comm_size(cfg->comm));
	gs = calloc(1, sizeof(*gs));
	if (gs == NULL)
		return pp_error(-ENOMEM, "grad_sync: out of memory");
	gs->comm = cfg->comm;
	gs->rank = pp_comm_rank(cfg->comm);
	gs->size = pp_comm_size(cfg->comm);
	gs->bucket_floats = cfg->bucket_bytes / sizeof(float);
	if (gs->bucket_floats == 0)
		gs->bucket_floats = 1; /* each range a bucket */
	gs->micro = cfg->micro_batches;
	gs->local_count = gs->micro / (unsigned)gs->size;
	*gs_p = gs;
	return 0;
}

PP_API void pp_grad_sync_destroy(struct pp_grad_sync *gs)
{
	if (gs == NULL)
		return;
	/* requests still in flight are the communicator's to free */
	free(gs->reqs);
	free(gs->slots);
	free(gs);
}

PP_API int pp_grad_sync_attach(struct pp_grad_sync *gs, struct pp_model_config *mc)
{
	if (gs == NULL || mc == NULL)
		return pp_error(-EINVAL, "grad_sync: attach: no %s", gs == NULL ? "grad sync" :
				"model config");
	mc->grad_hook = pp_grad_sync_hook;
	mc->grad_sync = pp_grad_sync_end;
	mc->grad_hook_arg = gs;
	return 0;
}

/* A failure of this rank's step: "grad_sync: rank R of N: " and the message.  Returns err. */
static int PP_PRINTF(3, 4) sync_fail(const struct pp_grad_sync *gs, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return pp_error(err, "grad_sync: rank %d of %d: %s", gs->rank, gs->size, msg);
}

/* Forgets the step: its allreduces (the communicator frees a failure's), its micro-batches. */
static void drop_step(struct pp_grad_sync *gs)
{
	gs->n_reqs = 0;
	gs->lo = gs->hi = 0;
	gs->local_done = 0;
	if (gs->slots != NULL)
		memset(gs->slots, 0, (size_t)gs->micro * gs->n_params * sizeof(float));
}

PP_API int pp_grad_sync_start(struct pp_grad_sync *gs, struct pp_model *model)
{
	size_t n;
	float *params;
	int ret;

	if (gs == NULL || model == NULL)
		return pp_error(-EINVAL, "grad_sync: start: no %s",
				gs == NULL ? "grad sync" : "model");
	n = pp_model_param_count(model);
	free(gs->slots);
	gs->slots = NULL;
	gs->n_params = n;
	drop_step(gs);
	if (gs->micro > 0) {
		gs->slots = calloc((size_t)gs->micro * (n ? n : 1), sizeof(float));
		if (gs->slots == NULL)
			return sync_fail(gs, -ENOMEM, "start: no memory for %u gradients of %zu floats",
					 gs->micro, n);
	}
	if (gs->size < 2)
		return 0;
	params = malloc((n ? n : 1) * sizeof(float));
	if (params == NULL)
		return sync_fail(gs, -ENOMEM, "start: no memory for %zu parameters", n);
	ret = pp_model_params_read(model, params, n);
	if (ret == 0)
		ret = pp_comm_broadcast(gs->comm, params, n * sizeof(float), 0, NULL);
	if (ret == 0)
		ret = pp_model_params_write(model, params, n);
	free(params);
	return ret;
}

/* Starts the average of the open bucket over the ranks. */
static int start_bucket(struct pp_grad_sync *gs, struct pp_stream *stream)
{
	struct pp_comm_request *req;
	int ret;

	if (gs->lo == gs->hi)
		return 0;
	if (gs->n_reqs == gs->cap_reqs) {
		const size_t cap = gs->cap_reqs ? 2 * gs->cap_reqs : 16;
		struct pp_comm_request **r = realloc(gs->reqs, cap * sizeof(*r));

		if (r == NULL)
			return sync_fail(gs, -ENOMEM, "averaging the gradient: no memory for %zu "
					 "requests", cap);
		gs->reqs = r;
		gs->cap_reqs = cap;
	}
	ret = pp_comm_iallreduce(gs->comm, gs->base + gs->lo, gs->hi - gs->lo, PP_COMM_F32,
				 PP_COMM_MEAN, stream, &req);
	if (ret < 0)
		return ret;
	gs->reqs[gs->n_reqs++] = req;
	gs->stats.allreduces++;
	gs->stats.bytes += (gs->hi - gs->lo) * sizeof(float);
	gs->lo = gs->hi = 0;
	return 0;
}

/*
 * Deterministic: keeps a range of this micro-batch's gradient in its slot,
 * which the host reads and sums: a gradient the host cannot address (on a
 * cuda device) is refused, not read.
 */
static int keep_range(struct pp_grad_sync *gs, const float *grads, size_t offset, size_t count,
		      struct pp_stream *stream)
{
	const unsigned k = (unsigned)gs->rank + (unsigned)gs->size * gs->local_done;
	const struct pp_device_props *props =
		stream != NULL ? pp_device_get_props(pp_stream_device(stream)) : NULL;

	if (props != NULL && !props->host_addressable)
		return sync_fail(gs, -EINVAL, "the deterministic reduction (micro_batches %u) sums "
				 "the gradient on the host: not in the memory of %s, which the host "
				 "cannot address", gs->micro, props->name);
	if (gs->slots == NULL || offset > gs->n_params || count > gs->n_params - offset)
		return sync_fail(gs, -EINVAL, "the gradient hook: floats %zu..%zu of a gradient of "
				 "%zu%s", offset, offset + count, gs->n_params,
				 gs->slots == NULL ? " (no micro-batch slots: pp_grad_sync_start())" : "");
	memcpy(gs->slots + (size_t)k * gs->n_params + offset, grads, count * sizeof(float));
	return 0;
}

/*
 * Deterministic, once a micro-batch's gradient is whole: after this rank's
 * last, reduces them all into the gradient, else keeps it (no update).
 */
static int reduce_micro(struct pp_grad_sync *gs)
{
	const size_t p = gs->n_params;
	int ret;

	if (gs->slots == NULL)
		return sync_fail(gs, -EINVAL, "the gradient sync: no micro-batch slots "
				 "(pp_grad_sync_start())");
	if (gs->base == NULL && p > 0)
		return sync_fail(gs, -EINVAL, "the gradient sync: no gradient handed over by "
				 "pp_grad_sync_hook() since the last sync");
	if (++gs->local_done < gs->local_count)
		return PP_MODEL_GRAD_KEEP;
	gs->local_done = 0;
	ret = pp_comm_allreduce(gs->comm, gs->slots, (size_t)gs->micro * p, PP_COMM_F32,
				PP_COMM_SUM, NULL);
	if (ret < 0)
		return ret;
	gs->stats.allreduces++;
	gs->stats.bytes += (size_t)gs->micro * p * sizeof(float);
	for (size_t i = 0; i < p; i++) {
		float s = 0.0f;

		for (unsigned m = 0; m < gs->micro; m++)
			s += gs->slots[(size_t)m * p + i];
		gs->base[i] = s / (float)gs->micro;
	}
	/* each slot has one contributor again in the next step */
	memset(gs->slots, 0, (size_t)gs->micro * p * sizeof(float));
	return 0;
}

PP_API int pp_grad_sync_hook(void *arg, float *grads, size_t offset, size_t count,
			     struct pp_stream *stream)
{
	struct pp_grad_sync *gs = arg;
	const uint64_t t0 = pp_now_ns();
	int ret = 0;

	if (gs == NULL)
		return pp_error(-EINVAL, "grad_sync: hook: no grad sync");
	if (count == 0) {
		/* a tick of the backward pass: the buckets in flight moved on */
		ret = gs->n_reqs > 0 ? pp_comm_progress(gs->comm) : 0;
		if (ret < 0)
			drop_step(gs);
		gs->stats.hook_ns += pp_now_ns() - t0;
		return ret;
	}
	if (grads == NULL)
		return sync_fail(gs, -EINVAL, "the gradient hook: no gradient for floats %zu..%zu",
				 offset, offset + count);
	gs->base = grads - offset;
	if (gs->micro > 0) {
		ret = keep_range(gs, grads, offset, count, stream);
		if (ret < 0)
			drop_step(gs);
		gs->stats.hook_ns += pp_now_ns() - t0;
		return ret;
	}
	/* ranges come from the last layer down: a bucket grows downwards */
	if (gs->lo != gs->hi && offset + count != gs->lo)
		ret = start_bucket(gs, stream);
	if (ret == 0) {
		if (gs->lo == gs->hi)
			gs->hi = offset + count;
		gs->lo = offset;
		if (gs->hi - gs->lo >= gs->bucket_floats)
			ret = start_bucket(gs, stream);
	}
	/* MPI moves the buckets in flight on only inside its calls */
	if (ret == 0 && gs->n_reqs > 0)
		ret = pp_comm_progress(gs->comm);
	if (ret < 0)
		drop_step(gs);
	gs->stats.hook_ns += pp_now_ns() - t0;
	return ret;
}

PP_API int pp_grad_sync_end(void *arg, struct pp_stream *stream)
{
	struct pp_grad_sync *gs = arg;
	const uint64_t t0 = pp_now_ns();
	int ret;

	if (gs == NULL)
		return pp_error(-EINVAL, "grad_sync: sync: no grad sync");
	if (gs->micro > 0) {
		ret = reduce_micro(gs);
		if (ret < 0)
			drop_step(gs);
	} else {
		ret = start_bucket(gs, stream);
		for (size_t i = 0; i < gs->n_reqs && ret == 0; i++) {
			ret = pp_comm_wait(gs->reqs[i], stream);
			gs->reqs[i] = NULL;
		}
		/* those not waited for are the communicator's to free */
		drop_step(gs);
	}
	if (ret == 0)
		gs->stats.steps++;
	gs->base = NULL; /* the next step's hook hands its gradient over again */
	gs->stats.sync_ns += pp_now_ns() - t0;
	return ret;
}

PP_API void pp_grad_sync_get_stats(const struct pp_grad_sync *gs,
				   struct pp_grad_sync_stats *stats)
{
	if (gs == NULL)
		memset(stats, 0, sizeof(*stats));
	else
		*stats = gs->stats;
}
