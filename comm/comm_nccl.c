/*
 * comm/comm_nccl.c: the nccl backend.  Device buffers of a cuda device are
 * reduced by NCCL on the caller's stream (queued after its work, before
 * what follows it); host buffers, the barrier and the unique id go through
 * a host communicator ("auto": mpi in a world started by mpirun, local in
 * a world of one).  The NCCL communicator is non-blocking
 * (ncclConfig_t.blocking = 0), so that its creation and each enqueue are
 * polled with ncclCommGetAsyncError until done or the timeout, and a rank
 * that never joins ends in an error rather than a hang; the error aborts
 * the NCCL communicator (ncclCommAbort).
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
#include "device/device_impl.h"

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
	ncclComm_t nc;           /* NULL until made */
	struct pp_comm *host;    /* the communicator of host buffers */
};

static int nccl_fail(const struct pp_comm *c, ncclResult_t r, const char *call)
{
	const struct nccl_ctx *x = c->ctx;

	return pp_comm_fail(c, -EIO, call, "%s", x->api.error_string(r));
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

/* Waits until the NCCL communicator's pending call has left ncclInProgress, or the timeout. */
static int nccl_settle(struct pp_comm *c, ncclResult_t r, const char *call)
{
	struct nccl_ctx *x = c->ctx;
	const uint64_t deadline = pp_now_ns() + (uint64_t)(c->timeout_s * 1e9);

	while (r == ncclInProgress) {
		if (pp_now_ns() >= deadline) {
			x->api.abort(x->nc);
			x->nc = NULL;
			return pp_comm_fail(c, -ETIMEDOUT, call, "not done within the timeout of %g s: "
					    "another rank failed, stalled or was killed", c->timeout_s);
		}
		sched_yield();
		if (x->api.get_async_error(x->nc, &r) != ncclSuccess)
			break;
	}
	return r == ncclSuccess ? 0 : nccl_fail(c, r, call);
}

static int nccl_allreduce(struct pp_comm *c, void *buf, size_t count, enum pp_comm_dtype dtype,
			  enum pp_comm_op op, struct pp_stream *stream)
{
	struct nccl_ctx *x = c->ctx;

	if (stream == NULL)
		return x->host->ops->allreduce(x->host, buf, count, dtype, op, NULL);
	if (stream->dev != c->device)
		return pp_comm_fail(c, -EINVAL, "allreduce", "a stream of %s, the communicator's "
				    "device is %s", pp_device_get_props(stream->dev)->name,
				    pp_device_get_props(c->device)->name);
	return nccl_settle(c, x->api.all_reduce(buf, buf, count,
					    dtype == PP_COMM_F64 ? ncclFloat64 : ncclFloat32,
					    op == PP_COMM_MEAN ? ncclAvg : ncclSum, x->nc,
					    (cudaStream_t)pp_stream_cuda_handle(stream)),
			   "allreduce");
}

static int nccl_broadcast(struct pp_comm *c, void *buf, size_t bytes, int root,
			  struct pp_stream *stream)
{
	struct nccl_ctx *x = c->ctx;

	if (stream == NULL)
		return x->host->ops->broadcast(x->host, buf, bytes, root, NULL);
	if (stream->dev != c->device)
		return pp_comm_fail(c, -EINVAL, "broadcast", "a stream of %s, the communicator's "
				    "device is %s", pp_device_get_props(stream->dev)->name,
				    pp_device_get_props(c->device)->name);
	return nccl_settle(c, x->api.broadcast(buf, buf, bytes, ncclUint8, root, x->nc,
					    (cudaStream_t)pp_stream_cuda_handle(stream)),
			   "broadcast");
}

static int nccl_barrier(struct pp_comm *c)
{
	struct nccl_ctx *x = c->ctx;

	return x->host->ops->barrier(x->host);
}

static void nccl_abort(struct pp_comm *c, int code)
{
	struct nccl_ctx *x = c->ctx;

	if (x->nc != NULL)
		x->api.abort(x->nc);
	x->nc = NULL;
	pp_comm_abort(x->host, code);
}

static void nccl_close(struct pp_comm *c)
{
	struct nccl_ctx *x = c->ctx;

	if (x == NULL)
		return;
	if (x->nc != NULL)
		x->api.destroy(x->nc);
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
	config.blocking = 0;
	r = x->api.init_rank_config(&x->nc, c->size, id, c->rank, &config);
	if (r != ncclSuccess && r != ncclInProgress)
		return nccl_fail(c, r, "ncclCommInitRankConfig");
	return nccl_settle(c, r, "ncclCommInitRankConfig");
}
