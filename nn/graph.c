/*
 * nn/graph.c: a model's steps captured as graphs and launched as one call
 * (pp_model_config.graph).  A step is known by its key: training or
 * evaluation, the batch size, and the pointers of its inputs, labels and
 * logits.  The transfer stage hands out a few device slots, each reused
 * batch after batch, so a trainer's steps come back to a handful of keys,
 * while a one-off (an epoch's last, partial batch) is seen once: a key is
 * run op by op the first time it is seen, captured the second, and
 * launched from then on.  The graph keeps the pointers, so the batch it
 * reads is whatever the slot holds at the launch: no copy into a fixed
 * buffer, no kernel argument to update.
 *
 * On a queued backend (cuda) the capture records the kernels run() issues
 * on the model's stream; the work that changes from step to step reads its
 * values from device memory (the optimizer's step count, nn/cuda/optim.h),
 * and the host's bookkeeping of a launch is backend->account().  On the CPU
 * backend (cpu and sim devices, with a stream) the capture records one host
 * function that runs the step with the job and optimizer settings it was
 * captured with, and each launch is followed by a wait for the stream, as
 * the CPU backend's steps are done when the call returns.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "nn/nn_impl.h"

/* Graphs a model keeps, at most (and keys it remembers having seen). */
#define NN_GRAPHS 16

/* One key, seen once (graph NULL) or captured. */
struct nn_graph_entry {
	bool used;                      /* the entry holds a key */
	bool train;                     /* the key: training or evaluation, */
	size_t batch;                   /* batch size, */
	const void *in;                 /* inputs (u8 or f32), */
	bool in_u8;
	const int32_t *labels;          /* labels, */
	const float *logits;            /* logits (NULL: none) */
	uint64_t last_use;              /* the model's clock at its last step */
	struct pp_graph *graph;         /* NULL until captured */
	/* CPU backend: what the recorded host function runs */
	struct pp_model *m;
	struct nn_job job;              /* the step's job as captured */
	struct pp_optimizer_config optim; /* the optimizer settings as captured */
	int err;                        /* the last launch's error, 0 */
	char msg[256];                  /* its message */
};

struct nn_graphs {
	struct nn_graph_entry e[NN_GRAPHS];
	uint64_t clock;                 /* steps run through here */
	struct pp_model_graph_stats stats;
};

int pp_nn_graph_init(struct pp_model *m)
{
	/* A gradient hook runs on the host in every step: a replay would skip it. */
	const bool on = m->cfg.grad_hook == NULL && m->cfg.grad_sync == NULL &&
			(m->cfg.graph == PP_MODEL_GRAPH_ON ||
			 (m->cfg.graph == PP_MODEL_GRAPH_AUTO && m->backend->queued));

	if (m->cfg.graph != PP_MODEL_GRAPH_AUTO && m->cfg.graph != PP_MODEL_GRAPH_OFF &&
	    m->cfg.graph != PP_MODEL_GRAPH_ON)
		return pp_error(-EINVAL, "model: graph mode %d (expected auto, off or on)",
				(int)m->cfg.graph);
	if (!on)
		return 0;
	if (m->cfg.stream == NULL)
		return pp_error(-EINVAL, "model on %s: steps as graphs need a stream (config field "
				"'stream')", pp_nn_device_name(m->dev));
	if (pp_stream_device(m->cfg.stream) != m->dev)
		return pp_error(-EINVAL, "model stream: expected device %s but got %s",
				pp_nn_device_name(m->dev), pp_nn_device_name(pp_stream_device(m->cfg.stream)));
	m->graphs = calloc(1, sizeof(*m->graphs));
	if (m->graphs == NULL)
		return pp_error(-ENOMEM, "model: out of memory");
	m->graphs->stats.enabled = true;
	return 0;
}

static void entry_clear(struct nn_graph_entry *e)
{
	pp_graph_destroy(e->graph);
	memset(e, 0, sizeof(*e));
}

void pp_nn_graph_drop(struct pp_model *m)
{
	struct nn_graphs *gs = m->graphs;
	bool any = false;

	if (gs == NULL)
		return;
	for (size_t i = 0; i < NN_GRAPHS; i++) {
		any = any || gs->e[i].used;
		entry_clear(&gs->e[i]);
	}
	if (any)
		gs->stats.drops++;
}

void pp_nn_graph_free(struct pp_model *m)
{
	if (m->graphs == NULL)
		return;
	for (size_t i = 0; i < NN_GRAPHS; i++)
		entry_clear(&m->graphs->e[i]);
	free(m->graphs);
	m->graphs = NULL;
}

static bool entry_is(const struct nn_graph_entry *e, const struct nn_job *job)
{
	const void *in = job->in_u8 ? (const void *)job->in_u8 : (const void *)job->in_f32;

	return e->used && e->train == job->train && e->batch == job->batch && e->in == in &&
	       e->in_u8 == (job->in_u8 != NULL) && e->labels == job->labels &&
	       e->logits == job->logits;
}

/* True when entry a is to be replaced before b: free first, then seen once, then the oldest. */
static bool replace_before(const struct nn_graph_entry *a, const struct nn_graph_entry *b)
{
	if (a->used != b->used)
		return !a->used;
	if ((a->graph == NULL) != (b->graph == NULL))
		return a->graph == NULL;
	return a->last_use < b->last_use;
}

/*
 * The key's entry, or a new one in place of a free entry, else of the least
 * recently used key seen once (one-off keys, such as an epoch's last batch
 * in a slot of its own, do not push captured graphs out), else of the
 * least recently used graph.
 */
static struct nn_graph_entry *entry_for(struct nn_graphs *gs, const struct nn_job *job,
					bool *new_p)
{
	struct nn_graph_entry *lru = &gs->e[0];

	for (size_t i = 0; i < NN_GRAPHS; i++) {
		struct nn_graph_entry *e = &gs->e[i];

		if (entry_is(e, job)) {
			*new_p = false;
			return e;
		}
		if (replace_before(e, lru))
			lru = e;
	}
	entry_clear(lru);
	lru->used = true;
	lru->train = job->train;
	lru->batch = job->batch;
	lru->in = job->in_u8 ? (const void *)job->in_u8 : (const void *)job->in_f32;
	lru->in_u8 = job->in_u8 != NULL;
	lru->labels = job->labels;
	lru->logits = job->logits;
	*new_p = true;
	return lru;
}

/* The CPU backend's recorded step: the job and optimizer settings it was captured with. */
static void cpu_step(void *arg)
{
	struct nn_graph_entry *e = arg;
	struct pp_model *m = e->m;
	const struct pp_optimizer_config now = m->optim.cfg;

	m->optim.cfg = e->optim;
	e->err = m->backend->run(m, &e->job);
	m->optim.cfg = now;
	if (e->err)
		snprintf(e->msg, sizeof(e->msg), "%s", pp_last_error());
}

/* Turns graphs off for good after a capture failed, keeping its reason. */
static void give_up(struct pp_model *m, int err)
{
	struct nn_graphs *gs = m->graphs;

	snprintf(gs->stats.fallback, sizeof(gs->stats.fallback),
		 "model on %s: capturing a step as a graph failed (%s), so steps are launched "
		 "op by op", pp_nn_device_name(m->dev), err ? pp_last_error() : "?");
	gs->stats.enabled = false;
	pp_nn_graph_drop(m);
}

/* Captures the entry's step; 0, or the capture's error (then nothing was run). */
static int capture(struct pp_model *m, struct nn_graph_entry *e, struct nn_job *job)
{
	struct pp_stream *s = m->cfg.stream;
	int ret = 0, end;

	e->m = m;
	e->job = *job;
	e->optim = m->optim.cfg;
	if (m->backend->queued && m->backend->prepare)
		ret = m->backend->prepare(m);
	if (ret)
		return ret;
	ret = pp_stream_begin_capture(s);
	if (ret)
		return ret;
	if (m->backend->queued) {
		m->capturing = true;
		ret = m->backend->run(m, &e->job);
		m->capturing = false;
	} else {
		ret = pp_stream_launch_host(s, cpu_step, e);
	}
	end = pp_stream_end_capture(s, &e->graph);
	if (ret == 0 && end == 0)
		m->graphs->stats.captures++;
	else if (end == 0) {
		pp_graph_destroy(e->graph);
		e->graph = NULL;
	}
	return ret ? ret : end;
}

/* Launches the entry's graph: the step's work, and its bookkeeping on the host. */
static int launch(struct pp_model *m, struct nn_graph_entry *e, const struct nn_job *job)
{
	int ret;

	e->err = 0; /* before the launch: the recorded step may run on the stream's thread */
	ret = m->backend->queued && m->backend->prepare ? m->backend->prepare(m) : 0;
	if (!ret)
		ret = pp_graph_launch(e->graph, m->cfg.stream);
	if (ret)
		return ret;
	m->graphs->stats.launches++;
	if (m->backend->queued) {
		if (m->backend->account)
			m->backend->account(m, job);
		return 0;
	}
	ret = pp_stream_synchronize(m->cfg.stream);
	if (ret)
		return ret;
	return e->err ? pp_error(e->err, "%s", e->msg) : 0;
}

int pp_nn_graph_run(struct pp_model *m, struct nn_job *job)
{
	struct nn_graphs *gs = m->graphs;
	struct nn_graph_entry *e;
	bool seen_new;
	int ret;

	if (gs == NULL || !gs->stats.enabled) {
		if (gs)
			gs->stats.eager++;
		return m->backend->run(m, job);
	}
	e = entry_for(gs, job, &seen_new);
	e->last_use = ++gs->clock;
	if (seen_new) {
		gs->stats.eager++;
		return m->backend->run(m, job);
	}
	if (e->graph == NULL) {
		ret = capture(m, e, job);
		if (ret) {
			/* the step's own errors (a bad label) come again op by op, with their message */
			give_up(m, ret);
			gs->stats.eager++;
			return m->backend->run(m, job);
		}
	}
	return launch(m, e, job);
}

PP_API void pp_model_get_graph_stats(const struct pp_model *m, struct pp_model_graph_stats *stats_p)
{
	if (m->graphs)
		*stats_p = m->graphs->stats;
	else
		memset(stats_p, 0, sizeof(*stats_p));
}
