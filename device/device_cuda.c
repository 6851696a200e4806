/*
 * device/device_cuda.c: the cuda backend, on the CUDA runtime API.
 * Device memory from cudaMalloc; pinned host memory is the dispatcher's
 * mmap registered with cudaHostRegister (so io_uring can register the same
 * pages), or cudaHostAlloc when registering is refused; streams, events and
 * copies are CUDA's.  The first copy of a stream and every
 * CUDA_TIME_EVERY-th after it is bracketed by a pair of timing events, and
 * the engine time they measure is counted into copy_ns once the copy is
 * known to be done (a record of a timing event costs the host several
 * microseconds, so the others go untimed).  Every CUDA call is checked, and
 * a failure becomes a negative errno value with a message naming the call.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "device/device_impl.h"
#include "device/spin.h"

/*
 * Timed copies in flight on a stream, at most.  When all are, a copy due to
 * be timed goes untimed rather than making the host wait.
 */
#define CUDA_TIMED_COPIES 8

/* One copy in this many of a stream is timed (the first is). */
#define CUDA_TIME_EVERY 16

struct cuda_device {
	int index; /* N of cuda:N */
};

struct cuda_stream {
	cudaStream_t s;
	cudaEvent_t start[CUDA_TIMED_COPIES]; /* recorded before each timed copy */
	cudaEvent_t end[CUDA_TIMED_COPIES];   /* recorded after it */
	unsigned head;                        /* oldest pair in flight */
	unsigned count;                       /* pairs in flight */
	uint64_t copies;                      /* copies issued on the stream */
};

static int errno_of(cudaError_t err)
{
	switch (err) {
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidValue:
		return -EINVAL;
	case cudaErrorNotReady:
		return -EAGAIN;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorStubLibrary:
	case cudaErrorInvalidDevice:
		return -ENODEV;
	default:
		return -EIO;
	}
}

/*
 * Records "<who>: <call>: <CUDA's message> (<error name>)" and returns the
 * errno.  Clears the runtime's last error, so that a non-sticky failure
 * does not linger and surface later as the failure of a kernel launch.
 */
static int cuda_fail(cudaError_t err, const char *who, const char *call)
{
	cudaGetLastError();
	return pp_error(errno_of(err), "%s: %s: %s (%s)", who, call, cudaGetErrorString(err),
			cudaGetErrorName(err));
}

#define CUDA_NAME(dev) ((dev)->props.name)

static int set_device(struct pp_device *dev)
{
	struct cuda_device *cd = dev->ctx;
	cudaError_t err = cudaSetDevice(cd->index);

	return err == cudaSuccess ? 0 : cuda_fail(err, CUDA_NAME(dev), "cudaSetDevice");
}

/* ------------------------------------------------------------------ discovery */

_Static_assert(cudaErrorStubLibrary == PP_CUDA_ERR_STUB_LIBRARY &&
	       cudaErrorInsufficientDriver == PP_CUDA_ERR_INSUFFICIENT_DRIVER &&
	       cudaErrorNoDevice == PP_CUDA_ERR_NO_DEVICE, "cudaError_t values have moved");

int pp_device_cuda_count_impl(void)
{
	int n = 0, driver = 0, runtime = 0;
	cudaError_t err = cudaGetDeviceCount(&n);
	char msg[512];
	bool broken;

	if (err == cudaSuccess && n > 0)
		return n;
	cudaGetLastError();
	/* The versions tell "no driver" (0) from "a driver too old" apart. */
	if (cudaDriverGetVersion(&driver) != cudaSuccess)
		driver = 0;
	if (cudaRuntimeGetVersion(&runtime) != cudaSuccess)
		runtime = 0;
	cudaGetLastError();
	broken = pp_device_cuda_explain(err, cudaGetErrorName(err), cudaGetErrorString(err), driver,
					runtime, msg, sizeof(msg));
	return pp_error(broken ? -EIO : -ENODEV, "%s", msg);
}

int pp_device_cuda_props(int index, struct pp_device_props *props)
{
	struct cudaDeviceProp prop;
	int engines = 0, major = 0, minor = 0, n;
	char who[32];
	cudaError_t err;

	snprintf(who, sizeof(who), "cuda:%d", index);
	/* Asked of an ordinal past the count, the runtime would record an API error. */
	n = pp_device_cuda_count_impl();
	if (n < 0)
		return n;
	if (index < 0 || index >= n)
		return pp_error(-ENODEV, "%s: no such GPU (%d present: cuda:0 to cuda:%d)", who, n,
				n - 1);
	err = cudaGetDeviceProperties(&prop, index);
	if (err != cudaSuccess)
		return cuda_fail(err, who, "cudaGetDeviceProperties");
	err = cudaDeviceGetAttribute(&engines, cudaDevAttrAsyncEngineCount, index);
	if (err == cudaSuccess)
		err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index);
	if (err == cudaSuccess)
		err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index);
	if (err != cudaSuccess)
		return cuda_fail(err, who, "cudaDeviceGetAttribute");
	memset(props, 0, sizeof(*props));
	snprintf(props->name, sizeof(props->name), "%s", who);
	snprintf(props->description, sizeof(props->description), "%.100s (sm_%d%d)", prop.name,
		 major, minor);
	props->kind = PP_DEVICE_CUDA;
	props->index = index;
	props->total_memory = prop.totalGlobalMem;
	props->host_is_device = false;
	props->host_addressable = false;
	props->async_copy = engines > 0;
	props->copy_engines = engines;
	props->sticky_errors = true;
	props->cuda_streams = true;
	return 0;
}

/* ------------------------------------------------------------------ memory */

static int cuda_alloc(struct pp_device *dev, size_t bytes, void **ptr_p)
{
	cudaError_t err;
	void *p;
	int ret = set_device(dev);

	if (ret < 0)
		return ret;
	err = cudaMalloc(&p, bytes);
	if (err != cudaSuccess) {
		cudaGetLastError();
		return pp_error(errno_of(err), "%s: cudaMalloc of %zu bytes: %s (%s)", CUDA_NAME(dev),
				bytes, cudaGetErrorString(err), cudaGetErrorName(err));
	}
	*ptr_p = p;
	return 0;
}

static void cuda_free(struct pp_device *dev, void *ptr, size_t bytes)
{
	if (set_device(dev) == 0)
		cudaFree(ptr);
}

static int cuda_host_register(struct pp_device *dev, void *ptr, size_t bytes)
{
	cudaError_t err;
	int ret = set_device(dev);

	if (ret < 0)
		return ret;
	err = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
	if (err != cudaSuccess) {
		cudaGetLastError();
		return pp_error(errno_of(err), "%s: cudaHostRegister of %zu bytes: %s (%s)",
				CUDA_NAME(dev), bytes, cudaGetErrorString(err), cudaGetErrorName(err));
	}
	return 0;
}

static void cuda_host_unregister(struct pp_device *dev, void *ptr, size_t bytes)
{
	cudaHostUnregister(ptr);
}

static int cuda_host_alloc_pinned(struct pp_device *dev, size_t bytes, void **ptr_p)
{
	cudaError_t err;
	void *p;
	int ret = set_device(dev);

	if (ret < 0)
		return ret;
	err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
	if (err != cudaSuccess) {
		cudaGetLastError();
		return pp_error(errno_of(err), "%s: cudaHostAlloc of %zu bytes: %s (%s)",
				CUDA_NAME(dev), bytes, cudaGetErrorString(err), cudaGetErrorName(err));
	}
	*ptr_p = p;
	return 0;
}

static void cuda_host_free_pinned(struct pp_device *dev, void *ptr)
{
	cudaFreeHost(ptr);
}

static int cuda_synchronize(struct pp_device *dev)
{
	cudaError_t err;
	int ret = set_device(dev);

	if (ret < 0)
		return ret;
	err = cudaDeviceSynchronize();
	return err == cudaSuccess ? 0 : cuda_fail(err, CUDA_NAME(dev), "cudaDeviceSynchronize");
}

static void cuda_close(struct pp_device *dev)
{
	free(dev->ctx);
}

/* ------------------------------------------------------------------ streams */

/* Counts the engine time of the oldest timed copy into copy_ns, waiting for it if needed. */
static int harvest_one(struct pp_stream *stream)
{
	struct cuda_stream *cs = stream->ctx;
	unsigned i = cs->head;
	float ms = 0;
	cudaError_t err = cudaEventSynchronize(cs->end[i]);

	cs->head = (cs->head + 1) % CUDA_TIMED_COPIES;
	cs->count--;
	if (err == cudaSuccess)
		err = cudaEventElapsedTime(&ms, cs->start[i], cs->end[i]);
	if (err != cudaSuccess)
		return cuda_fail(err, CUDA_NAME(stream->dev), "cudaEventElapsedTime");
	pp_device_add_copy_ns(stream->dev, (uint64_t)((double)ms * 1e6));
	return 0;
}

/* Harvests the timed copies already done, oldest first, without waiting. */
static int harvest_done(struct pp_stream *stream)
{
	struct cuda_stream *cs = stream->ctx;
	cudaError_t err;
	int ret = 0;

	while (ret == 0 && cs->count > 0) {
		err = cudaEventQuery(cs->end[cs->head]);
		if (err == cudaErrorNotReady)
			break;
		if (err != cudaSuccess)
			return cuda_fail(err, CUDA_NAME(stream->dev), "cudaEventQuery");
		ret = harvest_one(stream);
	}
	return ret;
}

static int harvest_all(struct pp_stream *stream)
{
	struct cuda_stream *cs = stream->ctx;
	int ret = 0;

	while (cs->count > 0) {
		int r = harvest_one(stream);
		if (ret == 0)
			ret = r;
	}
	return ret;
}

static void destroy_timing_events(struct cuda_stream *cs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		cudaEventDestroy(cs->start[i]);
		cudaEventDestroy(cs->end[i]);
	}
}

static void *cuda_stream_handle(struct pp_stream *stream)
{
	return ((struct cuda_stream *)stream->ctx)->s;
}

static int cuda_stream_create(struct pp_stream *stream)
{
	struct pp_device *dev = stream->dev;
	struct cuda_stream *cs;
	cudaError_t err = cudaSuccess;
	unsigned made = 0;
	int ret = set_device(dev);

	if (ret < 0)
		return ret;
	cs = calloc(1, sizeof(*cs));
	if (cs == NULL)
		return pp_error(-ENOMEM, "%s: out of memory for stream %u", CUDA_NAME(dev), stream->id);
	err = cudaStreamCreateWithFlags(&cs->s, cudaStreamNonBlocking);
	if (err != cudaSuccess) {
		ret = cuda_fail(err, CUDA_NAME(dev), "cudaStreamCreateWithFlags");
		goto err_free_stream;
	}
	for (made = 0; made < CUDA_TIMED_COPIES; made++) {
		err = cudaEventCreate(&cs->start[made]);
		if (err != cudaSuccess)
			break;
		err = cudaEventCreate(&cs->end[made]);
		if (err != cudaSuccess) {
			cudaEventDestroy(cs->start[made]);
			break;
		}
	}
	if (err != cudaSuccess) {
		ret = cuda_fail(err, CUDA_NAME(dev), "cudaEventCreate");
		goto err_destroy_events;
	}
	stream->ctx = cs;
	return 0;

err_destroy_events:
	destroy_timing_events(cs, made);
	cudaStreamDestroy(cs->s);
err_free_stream:
	free(cs);
	return ret;
}

static void cuda_stream_destroy(struct pp_stream *stream)
{
	struct cuda_stream *cs = stream->ctx;

	cudaStreamSynchronize(cs->s);
	harvest_all(stream);
	destroy_timing_events(cs, CUDA_TIMED_COPIES);
	cudaStreamDestroy(cs->s);
	free(cs);
}

static int cuda_stream_synchronize(struct pp_stream *stream)
{
	struct cuda_stream *cs = stream->ctx;
	cudaError_t err = cudaStreamSynchronize(cs->s);
	int ret = harvest_all(stream);

	if (err != cudaSuccess)
		return cuda_fail(err, CUDA_NAME(stream->dev), "cudaStreamSynchronize");
	return ret;
}

static int cuda_stream_wait_event(struct pp_stream *stream, struct pp_event *event)
{
	struct cuda_stream *cs = stream->ctx;
	cudaError_t err = cudaStreamWaitEvent(cs->s, (cudaEvent_t)event->ctx, 0);

	return err == cudaSuccess ? 0 : cuda_fail(err, CUDA_NAME(stream->dev), "cudaStreamWaitEvent");
}

static int cuda_launch_host(struct pp_stream *stream, void (*fn)(void *arg), void *arg)
{
	struct cuda_stream *cs = stream->ctx;
	cudaError_t err = cudaLaunchHostFunc(cs->s, fn, arg);

	return err == cudaSuccess ? 0 : cuda_fail(err, CUDA_NAME(stream->dev), "cudaLaunchHostFunc");
}

/* ------------------------------------------------------------------ events */

static int cuda_event_create(struct pp_event *event)
{
	cudaEvent_t e;
	cudaError_t err;
	int ret = set_device(event->dev);

	if (ret < 0)
		return ret;
	err = cudaEventCreateWithFlags(&e, event->timing ? cudaEventDefault
							   : cudaEventDisableTiming);
	if (err != cudaSuccess)
		return cuda_fail(err, CUDA_NAME(event->dev), "cudaEventCreateWithFlags");
	event->ctx = e;
	return 0;
}

static void cuda_event_destroy(struct pp_event *event)
{
	cudaEventDestroy((cudaEvent_t)event->ctx);
}

static int cuda_event_record(struct pp_event *event, struct pp_stream *stream)
{
	struct cuda_stream *cs = stream->ctx;
	cudaError_t err = cudaEventRecord((cudaEvent_t)event->ctx, cs->s);

	return err == cudaSuccess ? 0 : cuda_fail(err, CUDA_NAME(stream->dev), "cudaEventRecord");
}

static int cuda_event_query(struct pp_event *event)
{
	cudaError_t err = cudaEventQuery((cudaEvent_t)event->ctx);

	if (err == cudaSuccess)
		return 1;
	if (err == cudaErrorNotReady)
		return 0;
	return cuda_fail(err, CUDA_NAME(event->dev), "cudaEventQuery");
}

static int cuda_event_synchronize(struct pp_event *event)
{
	cudaError_t err = cudaEventSynchronize((cudaEvent_t)event->ctx);

	return err == cudaSuccess ? 0 : cuda_fail(err, CUDA_NAME(event->dev), "cudaEventSynchronize");
}

static int cuda_event_elapsed_ns(struct pp_event *start, struct pp_event *end, uint64_t *ns_p)
{
	float ms = 0;
	cudaError_t err;
	int ret;

	/* The runtime records an API error for the time of an event not complete: ask first. */
	if ((ret = cuda_event_query(start)) < 0 || (ret == 1 && (ret = cuda_event_query(end)) < 0))
		return ret;
	if (ret == 0)
		return pp_error(-EAGAIN, "%s: elapsed time asked of an event not completed yet",
				CUDA_NAME(start->dev));
	err = cudaEventElapsedTime(&ms, (cudaEvent_t)start->ctx, (cudaEvent_t)end->ctx);

	if (err != cudaSuccess)
		return cuda_fail(err, CUDA_NAME(start->dev), "cudaEventElapsedTime");
	*ns_p = ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
	return 0;
}

/* ------------------------------------------------------------------ copies */

static int cuda_memcpy_async(struct pp_stream *stream, void *dst, const void *src, size_t n,
			     enum pp_copy_kind kind, bool host_pinned)
{
	static const enum cudaMemcpyKind kinds[] = {
		[PP_COPY_H2D] = cudaMemcpyHostToDevice,
		[PP_COPY_D2H] = cudaMemcpyDeviceToHost,
		[PP_COPY_D2D] = cudaMemcpyDeviceToDevice,
	};
	struct cuda_stream *cs = stream->ctx;
	unsigned slot;
	cudaError_t err;
	bool timed;
	int ret;

	/* a copy captured into a graph is not timed: its events would be in the graph too */
	timed = stream->capture == NULL && cs->copies++ % CUDA_TIME_EVERY == 0;
	if (timed && (ret = harvest_done(stream)) < 0)
		return ret;
	timed = timed && cs->count < CUDA_TIMED_COPIES;
	slot = (cs->head + cs->count) % CUDA_TIMED_COPIES;
	if (timed) {
		err = cudaEventRecord(cs->start[slot], cs->s);
		if (err != cudaSuccess)
			return cuda_fail(err, CUDA_NAME(stream->dev), "cudaEventRecord");
	}
	err = cudaMemcpyAsync(dst, src, n, kinds[kind], cs->s);
	if (err != cudaSuccess) {
		cudaGetLastError();
		return pp_error(errno_of(err), "%s: stream %u: cudaMemcpyAsync of %zu bytes (%s): %s (%s)",
				CUDA_NAME(stream->dev), stream->id, n,
				host_pinned ? "pinned" : "pageable", cudaGetErrorString(err),
				cudaGetErrorName(err));
	}
	if (timed) {
		err = cudaEventRecord(cs->end[slot], cs->s);
		if (err != cudaSuccess)
			return cuda_fail(err, CUDA_NAME(stream->dev), "cudaEventRecord");
		cs->count++;
	}
	return 0;
}

static int cuda_spin(struct pp_stream *stream, uint64_t ns)
{
	return pp_cuda_spin(((struct cuda_stream *)stream->ctx)->s, ns);
}

/*
 * Graphs: stream capture, so that the kernels and cuBLAS calls the caller
 * launches on the stream are captured with the copies and host functions
 * issued through the dispatcher.  Thread-local mode: a call of another
 * thread (the transfer stage's event queries) neither joins nor spoils it.
 */
static int cuda_graph_begin(struct pp_stream *stream)
{
	cudaError_t err = cudaStreamBeginCapture(((struct cuda_stream *)stream->ctx)->s,
						 cudaStreamCaptureModeThreadLocal);

	return err == cudaSuccess ? 0 : cuda_fail(err, CUDA_NAME(stream->dev), "cudaStreamBeginCapture");
}

static int cuda_graph_end(struct pp_stream *stream, void **graph_p)
{
	cudaGraph_t graph = NULL;
	cudaGraphExec_t exec = NULL;
	cudaError_t err = cudaStreamEndCapture(((struct cuda_stream *)stream->ctx)->s, &graph);

	if (err != cudaSuccess) {
		if (graph != NULL)
			cudaGraphDestroy(graph);
		return cuda_fail(err, CUDA_NAME(stream->dev), "cudaStreamEndCapture");
	}
	err = cudaGraphInstantiateWithFlags(&exec, graph, 0);
	cudaGraphDestroy(graph);
	if (err != cudaSuccess)
		return cuda_fail(err, CUDA_NAME(stream->dev), "cudaGraphInstantiate");
	*graph_p = exec;
	return 0;
}

static int cuda_graph_launch(void *graph, struct pp_stream *stream)
{
	cudaError_t err = cudaGraphLaunch((cudaGraphExec_t)graph, ((struct cuda_stream *)stream->ctx)->s);

	return err == cudaSuccess ? 0 : cuda_fail(err, CUDA_NAME(stream->dev), "cudaGraphLaunch");
}

/* A graph destroyed with launches in flight is freed once they complete (the driver's rule). */
static void cuda_graph_destroy(struct pp_device *dev, void *graph)
{
	(void)dev;
	cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static const struct pp_device_ops cuda_ops = {
	.alloc = cuda_alloc,
	.free = cuda_free,
	.close = cuda_close,
	.synchronize = cuda_synchronize,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.host_alloc_pinned = cuda_host_alloc_pinned,
	.host_free_pinned = cuda_host_free_pinned,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.stream_synchronize = cuda_stream_synchronize,
	.stream_wait_event = cuda_stream_wait_event,
	.launch_host = cuda_launch_host,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_query = cuda_event_query,
	.event_synchronize = cuda_event_synchronize,
	.event_elapsed_ns = cuda_event_elapsed_ns,
	.memcpy_async = cuda_memcpy_async,
	.spin = cuda_spin,
	.cuda_stream = cuda_stream_handle,
	.graph_begin = cuda_graph_begin,
	.graph_end = cuda_graph_end,
	.graph_launch = cuda_graph_launch,
	.graph_destroy = cuda_graph_destroy,
};

int pp_device_cuda_open(struct pp_device *dev, int index)
{
	struct cuda_device *cd;
	cudaError_t err;
	int n = pp_device_cuda_count_impl();
	int ret;

	if (n < 0)
		return n;
	if (index >= n)
		return pp_error(-ENODEV, "cuda:%d: no such GPU (%d present: cuda:0 to cuda:%d)", index, n,
				n - 1);
	ret = pp_device_cuda_props(index, &dev->props);
	if (ret < 0)
		return ret;
	err = cudaSetDevice(index);
	if (err == cudaSuccess)
		err = cudaFree(NULL);
	if (err != cudaSuccess)
		return cuda_fail(err, dev->props.name, "cudaSetDevice");
	cd = calloc(1, sizeof(*cd));
	if (cd == NULL)
		return pp_error(-ENOMEM, "%s: out of memory", dev->props.name);
	cd->index = index;
	dev->ops = &cuda_ops;
	dev->ctx = cd;
	return 0;
}
