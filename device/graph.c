/*
 * device/graph.c: captures.  A capture on a stream, one per thread at a
 * time; the calls made through pinpipe while it is open (host functions
 * and copies), recorded in order: what a backend without graphs of its
 * own gets again at each launch, and what the counters count at each
 * launch of a backend's own graph (cuda's stream capture); the calls a
 * capture cannot take, which spoil it as CUDA's do.  The dispatcher's
 * streams and copies hand their calls here while their stream captures
 * (device_impl.h), and launch what was recorded (dispatch.c): this file
 * calls nothing of the dispatcher's.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "device/device_impl.h"

/*
 * The captures open on every device, each with the thread that began it.
 * A thread captures one stream at a time: CUDA refuses to instantiate a
 * graph while another capture of the thread is open (and that refusal
 * spoils the open capture too), so a second capture begun in a thread is
 * refused on every backend, before any backend is asked.
 */
static pthread_mutex_t open_captures_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pp_graph *open_captures;

/* Writes into msg the stream this thread is capturing, if any; returns whether there is one. */
static bool thread_capturing(char *msg, size_t len)
{
	pthread_t self = pthread_self();
	bool found = false;

	pthread_mutex_lock(&open_captures_mu);
	for (struct pp_graph *g = open_captures; g != NULL && !found; g = g->next_open) {
		if (pthread_equal(g->thread, self)) {
			snprintf(msg, len, "%s stream %u", g->dev->props.name, g->stream->id);
			found = true;
		}
	}
	pthread_mutex_unlock(&open_captures_mu);
	return found;
}

static void open_captures_add(struct pp_graph *g, struct pp_stream *stream)
{
	g->stream = stream;
	g->thread = pthread_self();
	pthread_mutex_lock(&open_captures_mu);
	g->next_open = open_captures;
	open_captures = g;
	pthread_mutex_unlock(&open_captures_mu);
}

static void open_captures_remove(struct pp_graph *g)
{
	pthread_mutex_lock(&open_captures_mu);
	for (struct pp_graph **pp = &open_captures; *pp != NULL; pp = &(*pp)->next_open) {
		if (*pp == g) {
			*pp = g->next_open;
			break;
		}
	}
	pthread_mutex_unlock(&open_captures_mu);
	g->next_open = NULL;
	g->stream = NULL;
}

/* Appends a node to the graph the stream is capturing; a failure spoils the capture. */
static int graph_append(struct pp_stream *stream, const struct pp_graph_node *node)
{
	struct pp_graph *g = stream->capture;

	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		struct pp_graph_node *v = pp_realloc(g->nodes, cap * sizeof(*v));

		if (v == NULL) {
			int ret = pp_error(-ENOMEM, "%s: stream %u: out of memory for a graph of %zu "
					   "calls", stream->dev->props.name, stream->id, g->n + 1);

			if (g->err == 0) {
				g->err = ret;
				snprintf(g->msg, sizeof(g->msg), "%s", pp_last_error());
			}
			return ret;
		}
		g->nodes = v;
		g->cap = cap;
	}
	g->nodes[g->n++] = *node;
	return 0;
}

int pp_graph_record_host(struct pp_stream *stream, void (*fn)(void *arg), void *arg)
{
	const struct pp_graph_node node = { .kind = PP_GRAPH_HOST, .fn = fn, .arg = arg };

	return graph_append(stream, &node);
}

int pp_graph_record_copy(struct pp_stream *stream, void *dst, const void *src, size_t n,
			 enum pp_copy_kind kind)
{
	const struct pp_graph_node node = {
		.kind = PP_GRAPH_COPY, .dst = dst, .src = src, .n = n, .copy_kind = kind,
	};

	return graph_append(stream, &node);
}

int pp_graph_spoil(struct pp_stream *stream, int err)
{
	struct pp_graph *g = stream->capture;

	if (err < 0 && g != NULL && g->err == 0) {
		g->err = err;
		snprintf(g->msg, sizeof(g->msg), "%s", pp_last_error());
	}
	return err;
}

/* A call a capturing stream cannot take: it fails, and so does the capture. */
int pp_graph_refuse_call(struct pp_stream *stream, int err, const char *call)
{
	struct pp_graph *g = stream->capture;
	int ret = pp_error(err, "%s: stream %u is capturing a graph: %s cannot be captured",
			   stream->dev->props.name, stream->id, call);

	if (g->err == 0) {
		g->err = ret;
		snprintf(g->msg, sizeof(g->msg), "%s", pp_last_error());
	}
	return ret;
}

PP_API int pp_stream_begin_capture(struct pp_stream *stream)
{
	struct pp_graph *g;
	char other[96];
	int ret;

	if (stream == NULL)
		return pp_error(-EINVAL, "pp_stream_begin_capture: stream is NULL");
	if (stream->capture != NULL)
		return pp_error(-EBUSY, "%s: stream %u is already capturing a graph",
				stream->dev->props.name, stream->id);
	if (thread_capturing(other, sizeof(other)))
		return pp_error(-EBUSY, "%s: stream %u cannot begin a capture: this thread is "
				"capturing %s (a thread captures one stream at a time; end "
				"that capture first)", stream->dev->props.name, stream->id, other);
	g = pp_calloc(1, sizeof(*g));
	if (g == NULL)
		return pp_error(-ENOMEM, "%s: out of memory for a graph", stream->dev->props.name);
	g->dev = stream->dev;
	if (stream->dev->ops->graph_begin != NULL) {
		pp_device_count_call(stream->dev);
		ret = stream->dev->ops->graph_begin(stream);
		if (ret < 0) {
			free(g);
			return ret;
		}
	}
	open_captures_add(g, stream);
	stream->capture = g;
	return 0;
}

PP_API int pp_stream_end_capture(struct pp_stream *stream, struct pp_graph **graph_p)
{
	struct pp_graph *g;
	int ret = 0, fault;

	if (stream == NULL || graph_p == NULL)
		return pp_error(-EINVAL, "pp_stream_end_capture: stream and graph_p must not be NULL");
	g = stream->capture;
	if (g == NULL)
		return pp_error(-EINVAL, "%s: stream %u: end of a capture that was not begun",
				stream->dev->props.name, stream->id);
	stream->capture = NULL;
	open_captures_remove(g);
	if (stream->dev->ops->graph_end != NULL) {
		pp_device_count_call(stream->dev);
		ret = stream->dev->ops->graph_end(stream, &g->ctx);
	}
	fault = pp_fault_check(pp_fault_thread, PP_FAULT_GRAPH);
	if (ret == 0 && g->err == 0 && fault < 0)
		ret = pp_error(fault, "%s: stream %u: the capture failed (injected fault: %s)",
			       stream->dev->props.name, stream->id, strerror(-fault));
	/* The first error, before the backend's end that it made fail (CUDA
	 * invalidates a capture whose call failed). */
	if (g->err != 0)
		ret = pp_error(g->err, "%s", g->msg);
	if (ret < 0) {
		pp_graph_destroy(g);
		return ret;
	}
	*graph_p = g;
	return 0;
}

PP_API size_t pp_graph_calls(const struct pp_graph *graph)
{
	return graph != NULL ? graph->n : 0;
}

PP_API void pp_graph_destroy(struct pp_graph *graph)
{
	if (graph == NULL)
		return;
	if (graph->ctx != NULL)
		graph->dev->ops->graph_destroy(graph->dev, graph->ctx);
	free(graph->nodes);
	free(graph);
}
