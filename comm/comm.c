/*
 * comm/comm.c: the communicator's dispatcher: backend names ("auto"
 * included), the checks of every call, the fault plan of the tests, and
 * device buffers for backends that reduce host memory only (used in place
 * where the host addresses the device, else staged through pinned memory),
 * and the requests of the non-blocking allreduce: a list per communicator,
 * so that pp_comm_progress() reaches every one in flight and
 * pp_comm_destroy() frees those never waited for.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_impl.h"

PP_API void pp_comm_config_init(struct pp_comm_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->backend = "auto";
	cfg->timeout_s = PP_COMM_DEFAULT_TIMEOUT_S;
}

int pp_comm_fail(const struct pp_comm *c, int err, const char *call, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return pp_error(err, "comm %s: rank %d of %d: %s: %s", c->ops ? c->ops->name : "?", c->rank,
			c->size, call, msg);
}

size_t pp_comm_dtype_size(enum pp_comm_dtype dtype)
{
	return dtype == PP_COMM_F32 ? sizeof(float) : dtype == PP_COMM_F64 ? sizeof(double) : 0;
}

/* The world sizes that MPI launchers put in their ranks' environment. */
PP_API bool pp_comm_launched(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
					    "MPI_LOCALNRANKS", "SLURM_NTASKS" };

	for (size_t i = 0; i < PP_ARRAY_SIZE(vars); i++) {
		const char *v = getenv(vars[i]);

		if (v != NULL && strtol(v, NULL, 10) > 1)
			return true;
	}
	return false;
}

/* Opens the backend 'name' into c. */
static int open_backend(struct pp_comm *c, const char *name)
{
	if (strcmp(name, "auto") == 0)
		name = pp_comm_launched() ? "mpi" : "local";
	if (strcmp(name, "local") == 0)
		return pp_comm_local_open(c);
	if (strcmp(name, "mpi") == 0)
		return pp_comm_mpi_open(c);
	if (strcmp(name, "nccl") == 0) {
		if (c->device == NULL || !pp_device_get_props(c->device)->cuda_streams)
			return pp_error(-EINVAL, "comm nccl: needs a cuda device (got %s)",
					c->device ? pp_device_get_props(c->device)->name : "none");
		return pp_comm_nccl_open(c);
	}
	return pp_error(-EINVAL, "comm: unknown backend '%s' (expected auto, local, mpi or nccl)", name);
}

PP_API int pp_comm_create(const struct pp_comm_config *cfg, struct pp_comm **comm_p)
{
	struct pp_comm_config def;
	struct pp_comm *c;
	const char *env;
	int ret;

	if (comm_p == NULL)
		return pp_error(-EINVAL, "comm: no place for the communicator");
	if (cfg == NULL) {
		pp_comm_config_init(&def);
		cfg = &def;
	}
	if (!(cfg->timeout_s >= 0) || cfg->timeout_s > 1e9)
		return pp_error(-EINVAL, "comm: timeout %g s (expected > 0, or 0 for the default)",
				cfg->timeout_s);
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return pp_error(-ENOMEM, "comm: out of memory");
	c->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : PP_COMM_DEFAULT_TIMEOUT_S;
	c->device = cfg->device;
	c->rank = 0;
	c->size = 1;
	c->faults.stall_fd[0] = c->faults.stall_fd[1] = -1;
	/* The creating thread's plan, else PP_FAULTS: the collectives' faults of the tests. */
	if (pp_fault_thread != NULL) {
		for (int s = 0; s < PP_FAULT_NSITES; s++)
			pp_fault_arm(&c->faults, (enum pp_fault_site)s, pp_fault_thread->site[s].mode,
				     pp_fault_thread->site[s].after, pp_fault_thread->site[s].count);
		c->has_faults = true;
	} else if ((env = getenv("PP_FAULTS")) != NULL && env[0] != '\0') {
		ret = pp_fault_parse(&c->faults, env);
		if (ret < 0)
			goto err_free;
		c->has_faults = true;
	}
	ret = open_backend(c, cfg->backend ? cfg->backend : "auto");
	if (ret < 0)
		goto err_destroy;
	*comm_p = c;
	return 0;

err_destroy:
	pp_comm_destroy(c);
	return ret;
err_free:
	free(c);
	return ret;
}

PP_API void pp_comm_destroy(struct pp_comm *c)
{
	if (c == NULL)
		return;
	/* Before close: a backend's request state may hold its resources (nccl's events). */
	while (c->reqs != NULL)
		pp_comm_request_free(c->reqs);
	if (c->ops != NULL)
		c->ops->close(c);
	pp_host_free(c->stage_dev, c->stage);
	free(c);
}

PP_API const char *pp_comm_backend(const struct pp_comm *c)
{
	return c->ops->name;
}

PP_API int pp_comm_rank(const struct pp_comm *c)
{
	return c->rank;
}

PP_API int pp_comm_size(const struct pp_comm *c)
{
	return c->size;
}

PP_API int pp_comm_local_rank(const struct pp_comm *c)
{
	return c->local_rank;
}

PP_API int pp_comm_local_size(const struct pp_comm *c)
{
	return c->local_size;
}

PP_API double pp_comm_timeout(const struct pp_comm *c)
{
	return c->timeout_s;
}

/*
 * The fault plan's word on this call: 0, or the error of an injected
 * fault; a stall waits twice the timeout first (a rank that stopped
 * answering: the other ranks' timeouts expire first).
 */
static int injected(struct pp_comm *c, const char *call)
{
	int f = c->has_faults ? pp_fault_check(&c->faults, PP_FAULT_COMM) : 0;

	if (f < 0)
		return pp_comm_fail(c, f, call, "%s (injected fault)", pp_strerror(f));
	if (f == PP_FAULT_STALL) {
		uint64_t end = pp_now_ns() + (uint64_t)(2e9 * c->timeout_s);
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		while (pp_now_ns() < end)
			nanosleep(&ts, NULL);
		return pp_comm_fail(c, -ETIMEDOUT, call, "stalled for twice the timeout of %g s "
				    "(injected fault)", c->timeout_s);
	}
	return 0;
}

/* Makes the pinned staging buffer at least 'bytes' long, for the device 'dev'. */
static int stage_reserve(struct pp_comm *c, struct pp_device *dev, size_t bytes, const char *call)
{
	void *p;
	int ret;

	if (c->stage != NULL && c->stage_dev == dev && c->stage_bytes >= bytes)
		return 0;
	pp_host_free(c->stage_dev, c->stage);
	c->stage = NULL;
	c->stage_bytes = 0;
	ret = pp_host_alloc(dev, bytes, true, &p, NULL);
	if (ret < 0)
		return pp_comm_fail(c, ret, call, "no pinned memory of %zu bytes to stage: %s", bytes,
				    pp_last_error());
	c->stage = p;
	c->stage_dev = dev;
	c->stage_bytes = bytes;
	return 0;
}

/*
 * Runs a collective 'run' on device memory (buf, bytes on the stream's
 * device) for a backend of host buffers: in place once the stream is
 * done where the host addresses the device, else through the staging
 * buffer (a copy back, the collective, a copy out, each waited for).
 */
struct coll {
	enum { COLL_ALLREDUCE, COLL_BROADCAST } kind;
	size_t count;             /* allreduce: elements */
	enum pp_comm_dtype dtype; /* allreduce */
	enum pp_comm_op op;       /* allreduce */
	int root;                 /* broadcast */
};

static int run_host(struct pp_comm *c, const struct coll *k, void *buf, size_t bytes)
{
	if (k->kind == COLL_ALLREDUCE)
		return c->ops->allreduce(c, buf, k->count, k->dtype, k->op, NULL);
	return c->ops->broadcast(c, buf, bytes, k->root, NULL);
}

static int run_staged(struct pp_comm *c, const struct coll *k, void *buf, size_t bytes,
		      struct pp_stream *stream, const char *call)
{
	struct pp_device *dev = pp_stream_device(stream);
	const struct pp_device_props *props = pp_device_get_props(dev);
	int ret;

	if (props->host_addressable) {
		ret = pp_stream_synchronize(stream);
		if (ret < 0)
			return pp_comm_fail(c, ret, call, "waiting for the stream: %s", pp_last_error());
		return run_host(c, k, buf, bytes);
	}
	ret = stage_reserve(c, dev, bytes, call);
	if (ret == 0)
		ret = pp_memcpy_async(c->stage, buf, bytes, PP_COPY_D2H, stream);
	if (ret == 0)
		ret = pp_stream_synchronize(stream);
	if (ret < 0)
		return pp_comm_fail(c, ret, call, "staging %zu bytes from %s: %s", bytes, props->name,
				    pp_last_error());
	ret = run_host(c, k, c->stage, bytes);
	if (ret < 0)
		return ret;
	ret = pp_memcpy_async(buf, c->stage, bytes, PP_COPY_H2D, stream);
	if (ret == 0)
		ret = pp_stream_synchronize(stream);
	if (ret < 0)
		return pp_comm_fail(c, ret, call, "staging %zu bytes to %s: %s", bytes, props->name,
				    pp_last_error());
	return 0;
}

static int run(struct pp_comm *c, const struct coll *k, void *buf, size_t bytes,
	       struct pp_stream *stream, const char *call)
{
	int ret = injected(c, call);

	if (ret < 0)
		return ret;
	if (stream == NULL || c->ops->device_buffers) {
		if (k->kind == COLL_ALLREDUCE)
			return c->ops->allreduce(c, buf, k->count, k->dtype, k->op, stream);
		return c->ops->broadcast(c, buf, bytes, k->root, stream);
	}
	return run_staged(c, k, buf, bytes, stream, call);
}

/* The checks of an allreduce's arguments, for 'call': 0, or -EINVAL with a message. */
static int check_allreduce(struct pp_comm *c, const void *buf, size_t count,
			   enum pp_comm_dtype dtype, enum pp_comm_op op, const char *call)
{
	const size_t es = pp_comm_dtype_size(dtype);

	if (es == 0)
		return pp_comm_fail(c, -EINVAL, call, "unknown dtype %d", (int)dtype);
	if (op != PP_COMM_SUM && op != PP_COMM_MEAN)
		return pp_comm_fail(c, -EINVAL, call, "unknown op %d", (int)op);
	if (count == 0)
		return 0;
	if (buf == NULL)
		return pp_comm_fail(c, -EINVAL, call, "no buffer for %zu elements", count);
	if (count > SIZE_MAX / es)
		return pp_comm_fail(c, -EINVAL, call, "%zu elements are too many", count);
	return 0;
}

PP_API int pp_comm_allreduce(struct pp_comm *c, void *buf, size_t count,
			     enum pp_comm_dtype dtype, enum pp_comm_op op, struct pp_stream *stream)
{
	struct coll k = { .kind = COLL_ALLREDUCE, .count = count, .dtype = dtype, .op = op };
	int ret = check_allreduce(c, buf, count, dtype, op, "allreduce");

	if (ret < 0 || count == 0)
		return ret;
	return run(c, &k, buf, count * pp_comm_dtype_size(dtype), stream, "allreduce");
}

/* Keeps r's first error and its message, for its wait to say again. */
static int request_failed(struct pp_comm_request *r, int err)
{
	if (r->error == 0) {
		r->error = err;
		r->msg = strdup(pp_last_error());
	}
	return err;
}

int pp_comm_request_start(struct pp_comm *c, void *buf, size_t count, enum pp_comm_dtype dtype,
			  enum pp_comm_op op, struct pp_stream *stream, struct pp_comm_request **req_p)
{
	struct coll k = { .kind = COLL_ALLREDUCE, .count = count, .dtype = dtype, .op = op };
	const size_t bytes = count * pp_comm_dtype_size(dtype);
	struct pp_comm_request *r = calloc(1, sizeof(*r));
	int ret = 0;

	*req_p = NULL;
	if (r == NULL)
		return pp_comm_fail(c, -ENOMEM, "iallreduce", "out of memory");
	r->comm = c;
	r->buf = buf;
	r->count = count;
	r->dtype = dtype;
	r->op = op;
	r->deadline = pp_now_ns() + (uint64_t)(c->timeout_s * 1e9);
	if (count == 0) {
		r->done = true;
	} else if (stream != NULL && !c->ops->device_buffers &&
		   !pp_device_get_props(pp_stream_device(stream))->host_addressable) {
		/* Staged through the one pinned buffer: done here, the host waiting. */
		ret = run_staged(c, &k, buf, bytes, stream, "iallreduce");
		r->done = true;
	} else {
		if (stream != NULL && !c->ops->device_buffers) {
			/* In place, once the work queued before has written it. */
			ret = pp_stream_synchronize(stream);
			if (ret < 0)
				ret = pp_comm_fail(c, ret, "iallreduce", "waiting for the stream: %s",
						   pp_last_error());
			stream = NULL;
		}
		if (ret == 0 && c->ops->istart != NULL) {
			ret = c->ops->istart(r, stream);
			r->issued = true;
		} else if (ret == 0) {
			ret = c->ops->allreduce(c, buf, count, dtype, op, stream);
			r->done = true;
		}
	}
	if (ret < 0) {
		if (c->ops->ifree != NULL)
			c->ops->ifree(r);
		free(r);
		return ret;
	}
	r->next = c->reqs;
	if (c->reqs != NULL)
		c->reqs->prev = r;
	c->reqs = r;
	*req_p = r;
	return 0;
}

int pp_comm_request_test(struct pp_comm_request *r)
{
	struct pp_comm *c = r->comm;
	int ret;

	if (r->done || r->error < 0)
		return r->error;
	ret = c->ops->itest(r);
	return ret < 0 ? request_failed(r, ret) : 0;
}

void pp_comm_request_free(struct pp_comm_request *r)
{
	struct pp_comm *c = r->comm;

	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		c->reqs = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	if (c->ops->ifree != NULL)
		c->ops->ifree(r);
	free(r->msg);
	free(r);
}

PP_API int pp_comm_iallreduce(struct pp_comm *c, void *buf, size_t count,
			      enum pp_comm_dtype dtype, enum pp_comm_op op, struct pp_stream *stream,
			      struct pp_comm_request **req_p)
{
	int ret;

	if (req_p == NULL)
		return pp_comm_fail(c, -EINVAL, "iallreduce", "no place for the request");
	*req_p = NULL;
	ret = check_allreduce(c, buf, count, dtype, op, "iallreduce");
	if (ret == 0 && count > 0)
		ret = injected(c, "iallreduce");
	if (ret < 0)
		return ret;
	return pp_comm_request_start(c, buf, count, dtype, op, stream, req_p);
}

PP_API int pp_comm_progress(struct pp_comm *c)
{
	int first = 0;

	for (struct pp_comm_request *r = c->reqs; r != NULL; r = r->next) {
		/* A request that failed before said so then: only new failures here. */
		if (r->error < 0)
			continue;
		int ret = pp_comm_request_test(r);

		if (ret < 0 && first == 0)
			first = ret;
	}
	/* The first failure's message, not the last's. */
	for (struct pp_comm_request *r = c->reqs; first < 0 && r != NULL; r = r->next)
		if (r->error == first && r->msg != NULL)
			pp_error_set(first, r->msg);
	return first;
}

PP_API int pp_comm_wait(struct pp_comm_request *r, struct pp_stream *stream)
{
	struct pp_comm *c;
	int ret = 0;

	if (r == NULL)
		return 0;
	c = r->comm;
	if (r->error < 0)
		ret = r->msg != NULL ? pp_error_set(r->error, r->msg) :
			pp_comm_fail(c, r->error, "iallreduce", "%s (failed before the wait)",
				     pp_strerror(r->error));
	else if (r->issued && c->ops->iwait != NULL) {
		/* A request done at its start (staged, or a backend's blocking call) holds its
		 * result already: only one the backend started is ended by it.  The wait is
		 * bounded from its own start: the caller's work since the request's is not
		 * the other ranks' delay. */
		r->deadline = pp_now_ns() + (uint64_t)(c->timeout_s * 1e9);
		ret = c->ops->iwait(r, c->ops->device_buffers ? stream : NULL);
	}
	pp_comm_request_free(r);
	return ret;
}

PP_API int pp_comm_broadcast(struct pp_comm *c, void *buf, size_t bytes, int root,
			     struct pp_stream *stream)
{
	struct coll k = { .kind = COLL_BROADCAST, .root = root };

	if (root < 0 || root >= c->size)
		return pp_comm_fail(c, -EINVAL, "broadcast", "root %d (expected 0..%d)", root,
				    c->size - 1);
	if (bytes == 0)
		return 0;
	if (buf == NULL)
		return pp_comm_fail(c, -EINVAL, "broadcast", "no buffer for %zu bytes", bytes);
	return run(c, &k, buf, bytes, stream, "broadcast");
}

PP_API int pp_comm_barrier(struct pp_comm *c)
{
	int ret = injected(c, "barrier");

	return ret < 0 ? ret : c->ops->barrier(c);
}

PP_API int pp_comm_abort(struct pp_comm *c, int code)
{
	if (c->size > 1) {
		fflush(stdout);
		fflush(stderr);
		c->ops->abort(c, code);
	}
	return 0;
}
