/*
 * comm/comm_nccl.c: the nccl backend.  Device buffers of a cuda device are
 * reduced by NCCL on the caller's stream (queued after its work, before
 * what follows it); host buffers, the barrier and the unique id go through
 * a host communicator ("auto": mpi in a world started by mpirun, local in
 * a world of one).  The NCCL communicator is non-blocking
 * (ncclConfig_t.blocking = 0), so that its creation and each enqueue are
 * polled with ncclCommGetAsyncError until done or the timeout, and a rank
 * that never joins ends in an error rather than a hang.  A collective's
 * completion is bounded too: once queued, an event recorded after it on
 * the stream is polled (cudaEventQuery, with ncclCommGetAsyncError) until
 * the same deadline, so the caller returns when the stream has reached the
 * collective's end (the work queued before it included).  Any NCCL error
 * or timeout aborts the NCCL communicator (ncclCommAbort) at once; the
 * calls that follow fail, and it is never destroyed in an errored state.
 * A non-blocking allreduce runs on a stream of the communicator's own,
 * made to wait for the caller's stream (an event), so that the caller's
 * work queued after it runs beside it; an event recorded after it on that
 * stream is its completion, polled by pp_comm_progress() and by the wait,
 * which then makes the wait's stream wait for it too.
 *
 * NCCL is opened with dlopen() when an nccl communicator is made, not
 * linked (as cuBLAS in nn/cuda/ops.cu): libnccl maps some 200 MB into
 * every process that loads it.  Each communicator holds its own entry
 * points; the library is never unloaded (RTLD_NODELETE), as CUDA's
 * libraries do not support it.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
/* nccl.h declares functions without arguments as f() (C23's meaning), which
 * -Wstrict-prototypes reports: the header is NVIDIA's, not ours. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"

/* NCCL's entry points, resolved by name in the library. */
struct nccl_api {
	ncclResult_t (*get_unique_id)(ncclUniqueId *id);
	ncclResult_t (*init_rank_config)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
					 ncclConfig_t *config);
	ncclResult_t (*get_async_error)(ncclComm_t comm, ncclResult_t *err);
	ncclResult_t (*all_reduce)(const void *send, void *recv, size_t count, ncclDataType_t type,
				   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
	ncclResult_t (*broadcast)(const void *send, void *recv, size_t count, ncclDataType_t type,
				  int root, ncclComm_t comm, cudaStream_t stream);
	ncclResult_t (*abort)(ncclComm_t comm);
	ncclResult_t (*destroy)(ncclComm_t comm);
	const char *(*error_string)(ncclResult_t r);
};

struct nccl_ctx {
	struct nccl_api api;     /* NCCL's entry points */
	ncclComm_t nc;           /* NULL until made, and once aborted */
	cudaEvent_t done;        /* recorded after each collective: its completion, or NULL */
	cudaStream_t own;        /* the non-blocking allreduces' stream, or NULL */
	cudaEvent_t order;       /* recorded on the caller's stream before each, or NULL */
	bool aborted;            /* an error aborted nc */
	struct pp_comm *host;    /* the communicator of host buffers */
};

/* Aborts the NCCL communicator after an error: ncclCommAbort, never a destroy. */
static void nccl_abort_comm(struct nccl_ctx *x)
{
	if (x->nc != NULL)
		x->api.abort(x->nc);
	x->nc = NULL;
	x->aborted = true;
}

/* An NCCL error of 'call': the communicator is aborted. */
static int nccl_fail(const struct pp_comm *c, ncclResult_t r, const char *call)
{
	struct nccl_ctx *x = c->ctx;
	const char *msg = x->api.error_string(r);

	nccl_abort_comm(x);
	return pp_comm_fail(c, -EIO, call, "%s", msg);
}

/* Loads NCCL (by its soname, then from the toolkit configure found) and resolves the API. */
static int nccl_load(struct pp_comm *c, struct nccl_api *api)
{
	static const char *const names[] = {
		"ncclGetUniqueId", "ncclCommInitRankConfig", "ncclCommGetAsyncError", "ncclAllReduce",
		"ncclBroadcast", "ncclCommAbort", "ncclCommDestroy", "ncclGetErrorString",
	};
	void **slots[] = {
		(void **)&api->get_unique_id, (void **)&api->init_rank_config,
		(void **)&api->get_async_error, (void **)&api->all_reduce, (void **)&api->broadcast,
		(void **)&api->abort, (void **)&api->destroy, (void **)&api->error_string,
	};
	void *lib = dlopen(PP_NCCL_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);

	if (lib == NULL)
		lib = dlopen(PP_NCCL_PATH, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (lib == NULL)
		return pp_comm_fail(c, -ENOENT, "create", "cannot load %s: %s (install NCCL, or add "
				    "its directory to LD_LIBRARY_PATH)", PP_NCCL_SONAME, dlerror());
	for (size_t i = 0; i < PP_ARRAY_SIZE(names); i++) {
		*slots[i] = dlsym(lib, names[i]);
		if (*slots[i] == NULL)
			return pp_comm_fail(c, -ENOENT, "create", "%s has no symbol %s (NCCL older "
					    "than 2.14?)", PP_NCCL_SONAME, names[i]);
	}
	return 0;
}

static int nccl_timed_out(struct pp_comm *c, const char *call)
{
	nccl_abort_comm(c->ctx);
	return pp_comm_fail(c, -ETIMEDOUT, call, "not done within the timeout of %g s: another "
			    "rank failed, stalled or was killed", c->timeout_s);
}

/* A collective after an error: the communicator was aborted. */
static int nccl_usable(struct pp_comm *c, const char *call)
{
	const struct nccl_ctx *x = c->ctx;

	if (x->nc == NULL)
		return pp_comm_fail(c, -EIO, call, "the NCCL communicator was %s", x->aborted ?
				    "aborted after an earlier error" : "never made");
	return 0;
}

/* Waits until the NCCL communicator's pending call has left ncclInProgress, or the deadline. */
static int nccl_settle(struct pp_comm *c, ncclResult_t r, const char *call, uint64_t deadline)
{
	struct nccl_ctx *x = c->ctx;

	while (r == ncclInProgress) {
		if (pp_now_ns() >= deadline)
			return nccl_timed_out(c, call);
		sched_yield();
		if (x->api.get_async_error(x->nc, &r) != ncclSuccess)
			break;
	}
	return r == ncclSuccess ? 0 : nccl_fail(c, r, call);
}

/*
 * Whether the event 'ev' (recorded after a collective) has completed, in
 * *done: an error of NCCL's or the stream's aborts the communicator.
 */
static int nccl_query(struct pp_comm *c, cudaEvent_t ev, bool *done, const char *call)
{
	struct nccl_ctx *x = c->ctx;
	cudaError_t e = cudaEventQuery(ev);
	ncclResult_t r;

	*done = e == cudaSuccess;
	if (e != cudaSuccess && e != cudaErrorNotReady) {
		nccl_abort_comm(x);
		return pp_comm_fail(c, -EIO, call, "cudaEventQuery: %s", cudaGetErrorString(e));
	}
	if (!*done && x->nc != NULL && x->api.get_async_error(x->nc, &r) == ncclSuccess &&
	    r != ncclSuccess && r != ncclInProgress)
		return nccl_fail(c, r, call);
	return 0;
}

/*
 * Polls the event 'ev' (recorded after a collective) until it has
 * completed, or the deadline: an error of NCCL's or the stream's, or the
 * deadline, aborts the communicator.
 */
static int nccl_poll(struct pp_comm *c, cudaEvent_t ev, const char *call, uint64_t deadline)
{
	bool done = false;

	for (;;) {
		int ret = nccl_query(c, ev, &done, call);

		if (ret < 0 || done)
			return ret;
		if (pp_now_ns() >= deadline)
			return nccl_timed_out(c, call);
		sched_yield();
	}
}

/* Waits until the stream has run the collective just queued on it, or the deadline. */
static int nccl_complete(struct pp_comm *c, cudaStream_t stream, const char *call, uint64_t deadline)
{
	struct nccl_ctx *x = c->ctx;
	cudaError_t e = cudaEventRecord(x->done, stream);

	if (e != cudaSuccess) {
		nccl_abort_comm(x);
		return pp_comm_fail(c, -EIO, call, "cudaEventRecord: %s", cudaGetErrorString(e));
	}
	return nccl_poll(c, x->done, call, deadline);
}

static uint64_t nccl_deadline(const struct pp_comm *c)
{
	return pp_now_ns() + (uint64_t)(c->timeout_s * 1e9);
}

static int nccl_allreduce(struct pp_comm *c, void *buf, size_t count, enum pp_comm_dtype dtype,
			  enum pp_comm_op op, struct pp_stream *stream)
{
	struct nccl_ctx *x = c->ctx;

	if (stream == NULL)
		return x->host->ops->allreduce(x->host, buf, count, dtype, op, NULL);
	if (pp_stream_device(stream) != c->device)
		return pp_comm_fail(c, -EINVAL, "allreduce", "a stream of %s, the communicator's "
				    "device is %s", pp_device_get_props(pp_stream_device(stream))->name,
				    pp_device_get_props(c->device)->name);
	const uint64_t deadline = nccl_deadline(c);
	cudaStream_t s = (cudaStream_t)pp_stream_cuda_handle(stream);
	int ret = nccl_usable(c, "allreduce");

	if (ret == 0)
		ret = nccl_settle(c, x->api.all_reduce(buf, buf, count,
						       dtype == PP_COMM_F64 ? ncclFloat64 : ncclFloat32,
						       op == PP_COMM_MEAN ? ncclAvg : ncclSum, x->nc, s),
				  "allreduce", deadline);
	return ret < 0 ? ret : nccl_complete(c, s, "allreduce", deadline);
}

static int nccl_broadcast(struct pp_comm *c, void *buf, size_t bytes, int root,
			  struct pp_stream *stream)
{
	struct nccl_ctx *x = c->ctx;

	if (stream == NULL)
		return x->host->ops->broadcast(x->host, buf, bytes, root, NULL);
	if (pp_stream_device(stream) != c->device)
		return pp_comm_fail(c, -EINVAL, "broadcast", "a stream of %s, the communicator's "
				    "device is %s", pp_device_get_props(pp_stream_device(stream))->name,
				    pp_device_get_props(c->device)->name);
	const uint64_t deadline = nccl_deadline(c);
	cudaStream_t s = (cudaStream_t)pp_stream_cuda_handle(stream);
	int ret = nccl_usable(c, "broadcast");

	if (ret == 0)
		ret = nccl_settle(c, x->api.broadcast(buf, buf, bytes, ncclUint8, root, x->nc, s),
				  "broadcast", deadline);
	return ret < 0 ? ret : nccl_complete(c, s, "broadcast", deadline);
}

/* A request: device buffers by NCCL on x->own, or host buffers by the host communicator. */
struct nccl_req {
	cudaEvent_t done;               /* recorded on x->own after the allreduce, or NULL */
	struct pp_comm_request *host;   /* host buffers: the host communicator's request */
};

/* Checks that 'stream' is of the communicator's device, for 'call'. */
static int nccl_own_device(struct pp_comm *c, const struct pp_stream *stream, const char *call)
{
	if (pp_stream_device(stream) != c->device)
		return pp_comm_fail(c, -EINVAL, call, "a stream of %s, the communicator's device is %s",
				    pp_device_get_props(pp_stream_device(stream))->name,
				    pp_device_get_props(c->device)->name);
	return 0;
}

/* A CUDA call of a request failed: the communicator is aborted, as after NCCL's errors. */
static int nccl_cuda_fail(struct pp_comm *c, cudaError_t e, const char *what)
{
	nccl_abort_comm(c->ctx);
	return pp_comm_fail(c, -EIO, "iallreduce", "%s: %s", what, cudaGetErrorString(e));
}

static int nccl_istart(struct pp_comm_request *r, struct pp_stream *stream)
{
	struct pp_comm *c = r->comm;
	struct nccl_ctx *x = c->ctx;
	struct nccl_req *q = calloc(1, sizeof(*q));
	cudaStream_t s;
	cudaError_t e;
	int ret, prev = 0;

	if (q == NULL)
		return pp_comm_fail(c, -ENOMEM, "iallreduce", "out of memory");
	r->state = q;
	if (stream == NULL)
		return pp_comm_request_start(x->host, r->buf, r->count, r->dtype, r->op, NULL, &q->host);
	ret = nccl_own_device(c, stream, "iallreduce");
	if (ret == 0)
		ret = nccl_usable(c, "iallreduce");
	if (ret < 0)
		return ret;
	s = (cudaStream_t)pp_stream_cuda_handle(stream);
	/* The event belongs to the device current when it is made: the communicator's,
	 * and then the caller's current device is put back. */
	e = cudaGetDevice(&prev);
	if (e == cudaSuccess)
		e = cudaSetDevice(pp_device_get_props(c->device)->index);
	if (e == cudaSuccess) {
		e = cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming);
		if (cudaSetDevice(prev) != cudaSuccess && e == cudaSuccess)
			e = cudaGetLastError();
	}
	if (e != cudaSuccess) {
		q->done = NULL;
		return nccl_cuda_fail(c, e, "cudaEventCreateWithFlags");
	}
	/* After the work queued on the caller's stream so far, beside what comes next. */
	e = cudaEventRecord(x->order, s);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(x->own, x->order, 0);
	if (e != cudaSuccess)
		return nccl_cuda_fail(c, e, "ordering after the caller's stream");
	ret = nccl_settle(c, x->api.all_reduce(r->buf, r->buf, r->count,
					       r->dtype == PP_COMM_F64 ? ncclFloat64 : ncclFloat32,
					       r->op == PP_COMM_MEAN ? ncclAvg : ncclSum, x->nc, x->own),
			  "iallreduce", r->deadline);
	if (ret < 0)
		return ret;
	e = cudaEventRecord(q->done, x->own);
	return e == cudaSuccess ? 0 : nccl_cuda_fail(c, e, "cudaEventRecord");
}

/* A request whose NCCL communicator another request's failure aborted fails too. */
static int nccl_req_usable(struct pp_comm_request *r)
{
	return nccl_usable(r->comm, "iallreduce");
}

static int nccl_itest(struct pp_comm_request *r)
{
	struct nccl_req *q = r->state;
	int ret;

	if (q->host != NULL) {
		ret = pp_comm_request_test(q->host);
		r->done = q->host->done;
		return ret;
	}
	ret = nccl_req_usable(r);
	return ret < 0 ? ret : nccl_query(r->comm, q->done, &r->done, "iallreduce");
}

static int nccl_iwait(struct pp_comm_request *r, struct pp_stream *stream)
{
	struct pp_comm *c = r->comm;
	struct nccl_req *q = r->state;
	cudaError_t e;
	int ret;

	if (q->host != NULL) {
		ret = pp_comm_wait(q->host, NULL);
		q->host = NULL;
		return ret;
	}
	ret = stream != NULL ? nccl_own_device(c, stream, "wait") : 0;
	if (ret == 0 && !r->done)
		ret = nccl_req_usable(r);
	if (ret == 0 && !r->done)
		ret = nccl_poll(c, q->done, "iallreduce", r->deadline);
	if (ret < 0)
		return ret;
	r->done = true;
	if (stream == NULL)
		return 0;
	/* Done on the device already: this orders the stream's next work after it all the same. */
	e = cudaStreamWaitEvent((cudaStream_t)pp_stream_cuda_handle(stream), q->done, 0);
	return e == cudaSuccess ? 0 : nccl_cuda_fail(c, e, "cudaStreamWaitEvent");
}

static void nccl_ifree(struct pp_comm_request *r)
{
	struct nccl_req *q = r->state;

	if (q == NULL)
		return;
	if (q->host != NULL)
		pp_comm_request_free(q->host);
	/* A reduction abandoned in flight (the caller failed before its wait): the
	 * communicator is aborted, since ncclCommDestroy would wait for it, for ever
	 * where another rank is gone. */
	if (q->done != NULL && !r->done && cudaEventQuery(q->done) != cudaSuccess)
		nccl_abort_comm(r->comm->ctx);
	/* An event still pending is released by CUDA once it completes. */
	if (q->done != NULL)
		cudaEventDestroy(q->done);
	free(q);
	r->state = NULL;
}

static int nccl_barrier(struct pp_comm *c)
{
	struct nccl_ctx *x = c->ctx;

	return x->host->ops->barrier(x->host);
}

static void nccl_abort(struct pp_comm *c, int code)
{
	struct nccl_ctx *x = c->ctx;

	nccl_abort_comm(x);
	pp_comm_abort(x->host, code);
}

static void nccl_close(struct pp_comm *c)
{
	struct nccl_ctx *x = c->ctx;

	if (x == NULL)
		return;
	/* An errored communicator was aborted (NULL): only a sound one is destroyed. */
	if (x->nc != NULL)
		x->api.destroy(x->nc);
	if (x->done != NULL)
		cudaEventDestroy(x->done);
	if (x->order != NULL)
		cudaEventDestroy(x->order);
	if (x->own != NULL)
		cudaStreamDestroy(x->own);
	pp_comm_destroy(x->host);
	free(x);
	c->ctx = NULL;
}

static const struct pp_comm_ops nccl_ops = {
	.name = "nccl",
	.allreduce = nccl_allreduce,
	.broadcast = nccl_broadcast,
	.barrier = nccl_barrier,
	.abort = nccl_abort,
	.close = nccl_close,
	.istart = nccl_istart,
	.itest = nccl_itest,
	.iwait = nccl_iwait,
	.ifree = nccl_ifree,
	.device_buffers = true,
};

int pp_comm_nccl_open(struct pp_comm *c)
{
	struct pp_comm_config hc;
	struct nccl_ctx *x;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	ncclUniqueId id;
	ncclResult_t r;
	int ret;

	c->ops = &nccl_ops;
	x = calloc(1, sizeof(*x));
	if (x == NULL)
		return pp_comm_fail(c, -ENOMEM, "create", "out of memory");
	c->ctx = x;
	ret = nccl_load(c, &x->api);
	if (ret < 0)
		return ret;
	pp_comm_config_init(&hc);
	hc.timeout_s = c->timeout_s;
	ret = pp_comm_create(&hc, &x->host);
	if (ret < 0)
		return ret;
	c->rank = x->host->rank;
	c->size = x->host->size;
	c->local_rank = x->host->local_rank;
	c->local_size = x->host->local_size;
	memset(&id, 0, sizeof(id));
	if (c->rank == 0 && (r = x->api.get_unique_id(&id)) != ncclSuccess)
		return nccl_fail(c, r, "ncclGetUniqueId");
	ret = x->host->ops->broadcast(x->host, &id, sizeof(id), 0, NULL);
	if (ret < 0)
		return ret;
	if (cudaSetDevice(pp_device_get_props(c->device)->index) != cudaSuccess)
		return pp_comm_fail(c, -EIO, "create", "cudaSetDevice(%d) failed",
				    pp_device_get_props(c->device)->index);
	if (cudaEventCreateWithFlags(&x->done, cudaEventDisableTiming) != cudaSuccess) {
		x->done = NULL;
		return pp_comm_fail(c, -EIO, "create", "cudaEventCreateWithFlags failed");
	}
	if (cudaEventCreateWithFlags(&x->order, cudaEventDisableTiming) != cudaSuccess) {
		x->order = NULL;
		return pp_comm_fail(c, -EIO, "create", "cudaEventCreateWithFlags failed");
	}
	/* Non-blocking: no implicit order with the legacy default stream either. */
	if (cudaStreamCreateWithFlags(&x->own, cudaStreamNonBlocking) != cudaSuccess) {
		x->own = NULL;
		return pp_comm_fail(c, -EIO, "create", "cudaStreamCreateWithFlags failed");
	}
	config.blocking = 0;
	r = x->api.init_rank_config(&x->nc, c->size, id, c->rank, &config);
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_fail(c, r, "ncclCommInitRankConfig");
	return nccl_settle(c, r, "ncclCommInitRankConfig", nccl_deadline(c));
}
