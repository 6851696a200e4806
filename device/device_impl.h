/*
 * device/device_impl.h: what a device backend implements (the ops table)
 * and what the dispatcher (device/dispatch.c, with device/graph.c for
 * graphs) keeps for every device: its properties, its counters, and the
 * tables of the memory it handed out.  Not installed; the tests include it
 * to reach the sim's failure injection.
 */
#ifndef PP_DEVICE_DEVICE_IMPL_H
#define PP_DEVICE_DEVICE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common_impl.h"
#include "pinpipe/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Byte written over sim device memory that was freed or released, when poisoning is on. */
#define PP_SIM_POISON_BYTE 0xfb

/* Alignment of pp_device_alloc() memory, in bytes. */
#define PP_DEVICE_ALIGN 256

/*
 * A backend's operations.  Entries marked (optional) may be NULL, and the
 * dispatcher then does the work itself:
 *   - host_register NULL: pages are pinned with mlock();
 *   - stream_create NULL (and with it every stream and event entry): the
 *     device has no queue; work runs at once in the caller's thread, events
 *     complete when recorded, copies are memcpy();
 *   - synchronize NULL: nothing is ever in flight;
 *   - release NULL: releasing memory does nothing;
 *   - spin NULL: a synthetic compute step is a host function that sleeps;
 *   - cuda_stream NULL: the streams have no CUDA handle.
 * The stream and event entries come all together or not at all.  Every
 * entry returns 0 or -errno with pp_error() set, like the public calls.
 */
struct pp_device_ops {
	/* Device memory of at least 'bytes', aligned to PP_DEVICE_ALIGN. */
	int (*alloc)(struct pp_device *dev, size_t bytes, void **ptr_p);
	/* Frees it, after the work that may use it (the dispatcher synchronizes first). */
	void (*free)(struct pp_device *dev, void *ptr, size_t bytes);
	/* Releases the backend's context.  (optional) */
	void (*close)(struct pp_device *dev);
	/* Waits for the work on every stream, without clearing their errors.  (optional) */
	int (*synchronize)(struct pp_device *dev);
	/* Device memory given back by its user, still allocated (pp_device_release).  (optional) */
	void (*release)(struct pp_device *dev, void *ptr, size_t bytes);

	/* Page-locks host memory from mmap so the device can copy it asynchronously.  (optional) */
	int (*host_register)(struct pp_device *dev, void *ptr, size_t bytes);
	void (*host_unregister)(struct pp_device *dev, void *ptr, size_t bytes);
	/* Pinned host memory from the driver, tried when host_register fails.  (optional) */
	int (*host_alloc_pinned)(struct pp_device *dev, size_t bytes, void **ptr_p);
	void (*host_free_pinned)(struct pp_device *dev, void *ptr);

	/* Streams and events (optional, all together). */
	int (*stream_create)(struct pp_stream *stream);
	void (*stream_destroy)(struct pp_stream *stream);
	int (*stream_synchronize)(struct pp_stream *stream);
	int (*stream_wait_event)(struct pp_stream *stream, struct pp_event *event);
	int (*launch_host)(struct pp_stream *stream, void (*fn)(void *arg), void *arg);
	int (*event_create)(struct pp_event *event); /* event->timing: keep its time or not */
	void (*event_destroy)(struct pp_event *event);
	int (*event_record)(struct pp_event *event, struct pp_stream *stream);
	int (*event_query)(struct pp_event *event); /* 1, 0, or the stream's error once complete */
	int (*event_synchronize)(struct pp_event *event);
	int (*event_elapsed_ns)(struct pp_event *start, struct pp_event *end, uint64_t *ns_p);
	/*
	 * Copies n > 0 bytes, already validated; 'host_pinned' says whether the
	 * host side (src of H2D, dst of D2H) is pinned memory of this device.
	 */
	int (*memcpy_async)(struct pp_stream *stream, void *dst, const void *src, size_t n,
			    enum pp_copy_kind kind, bool host_pinned);
	/* A synthetic compute step of ns on the stream (pp_stream_spin).  (optional: NULL
	 * runs a host function that sleeps) */
	int (*spin)(struct pp_stream *stream, uint64_t ns);
	/* The stream's cudaStream_t, for the caller's kernels (pp_stream_cuda_handle).
	 * (optional: given exactly where props.cuda_streams is set) */
	void *(*cuda_stream)(struct pp_stream *stream);

	/*
	 * Graphs (optional, all together): the backend captures the work
	 * issued on a stream between graph_begin and graph_end itself (cuda:
	 * stream capture, so that the kernels a caller launches on the stream
	 * are captured too), writes its executable graph to *graph_p, and
	 * replays it with one call.  NULL: the dispatcher records the calls
	 * made through it (host functions, copies, spins) and issues them
	 * again at each launch, as one call.
	 */
	int (*graph_begin)(struct pp_stream *stream);
	int (*graph_end)(struct pp_stream *stream, void **graph_p);
	int (*graph_launch)(void *graph, struct pp_stream *stream);
	void (*graph_destroy)(struct pp_device *dev, void *graph);
};

/* How an allocation was made, so that it is freed the same way. */
enum pp_mem_kind {
	PP_MEM_DEVICE = 0,        /* device memory: ops->alloc */
	PP_MEM_MMAP = 1,          /* host memory: mmap, pageable */
	PP_MEM_MMAP_LOCKED = 2,   /* host memory: mmap + mlock */
	PP_MEM_MMAP_REGISTERED = 3, /* host memory: mmap + ops->host_register */
	PP_MEM_DRIVER = 4,        /* host memory: ops->host_alloc_pinned */
};

/* One allocation handed out by the device. */
struct pp_mem_range {
	uintptr_t addr;              /* first byte */
	size_t bytes;                /* length asked for */
	size_t mapped;               /* length mapped (host: rounded to pages), bytes */
	enum pp_mem_kind kind;
};

/*
 * Allocations sorted by address, for range lookups on every copy: one
 * table of device memory, one of host memory, kept and freed by the same
 * code in dispatch.c.
 */
struct pp_mem_table {
	struct pp_mem_range *v; /* [n], sorted by addr */
	size_t n;               /* entries in use */
	size_t cap;             /* entries allocated */
};

/* The counters of struct pp_device_stats, updated from any thread. */
struct pp_device_counters {
	atomic_uint_least64_t copies;
	atomic_uint_least64_t bytes_h2d;
	atomic_uint_least64_t bytes_d2h;
	atomic_uint_least64_t copies_timed;
	atomic_uint_least64_t copy_ns;
	atomic_uint_least64_t host_blocked_ns;
	atomic_uint_least64_t pinned_bytes;
	atomic_uint_least64_t pinned_fallbacks;
	atomic_uint_least64_t pageable_copies;
	atomic_uint_least64_t calls;
	atomic_uint_least64_t graph_launches;
};

/* A place in a device's list of its open streams or events (doubly linked). */
struct pp_dev_link {
	struct pp_dev_link *prev, *next;
};

struct pp_device {
	const struct pp_device_ops *ops;
	struct pp_device_props props;
	struct pp_device_counters stats;
	pthread_mutex_t mu;          /* guards the tables, lists and ids below */
	struct pp_mem_table device_mem; /* pp_device_alloc() allocations */
	struct pp_mem_table host_mem;   /* pp_host_alloc() allocations */
	struct pp_dev_link *streams; /* open streams, by their link */
	struct pp_dev_link *events;  /* open events, by their link */
	unsigned next_stream_id;     /* id of the next stream, from 1 */
	void *ctx;                   /* the backend's context */
};

struct pp_stream {
	struct pp_dev_link link;       /* in dev->streams; first: a link is its stream */
	struct pp_device *dev;
	unsigned id;                   /* 1, 2, ... in creation order, for messages */
	void *ctx;                     /* the backend's stream */
	struct pp_graph *capture;      /* the graph being captured on it, or NULL */
	bool replaying;                /* a recorded graph's calls are being issued on it: they
					* cost no call of their own (the launch was the call) */
};

struct pp_event {
	struct pp_dev_link link;      /* in dev->events; first: a link is its event */
	struct pp_device *dev;
	bool timing;                  /* keeps its time (not PP_EVENT_NO_TIMING) */
	bool recorded;                /* recorded at least once */
	uint64_t host_ns;             /* when recorded, without a backend queue (pp_now_ns) */
	void *ctx;                    /* the backend's event */
};

/* "host to device" and so on, for messages. */
static inline const char *pp_copy_kind_name(enum pp_copy_kind kind)
{
	switch (kind) {
	case PP_COPY_H2D:
		return "host to device";
	case PP_COPY_D2H:
		return "device to host";
	case PP_COPY_D2D:
		return "device to device";
	}
	return "?";
}

/* Counts a call that reaches the backend's queues (struct pp_device_stats.calls). */
static inline void pp_device_count_call(struct pp_device *dev)
{
	atomic_fetch_add_explicit(&dev->stats.calls, 1, memory_order_relaxed);
}

/* The same for a call on a stream, unless it is a recorded graph's call being issued again. */
static inline void pp_device_count_stream_call(struct pp_stream *stream)
{
	if (!stream->replaying)
		pp_device_count_call(stream->dev);
}

/* Counts a copy of n bytes done, in copies and in bytes_h2d or bytes_d2h. */
static inline void pp_device_count_copy(struct pp_device *dev, size_t n, enum pp_copy_kind kind)
{
	atomic_fetch_add_explicit(&dev->stats.copies, 1, memory_order_relaxed);
	if (kind == PP_COPY_H2D)
		atomic_fetch_add_explicit(&dev->stats.bytes_h2d, n, memory_order_relaxed);
	else if (kind == PP_COPY_D2H)
		atomic_fetch_add_explicit(&dev->stats.bytes_d2h, n, memory_order_relaxed);
}

/* True when the dispatcher records the stream's calls (a capture, on a backend without graphs). */
static inline bool pp_stream_recording(const struct pp_stream *stream)
{
	return stream->capture != NULL && stream->dev->ops->graph_begin == NULL;
}

/* A graph: what a capture recorded (device/graph.c), launched by the dispatcher. */
enum pp_graph_node_kind {
	PP_GRAPH_HOST = 0, /* a host function */
	PP_GRAPH_COPY = 1, /* a copy */
};

/* One call recorded during a capture. */
struct pp_graph_node {
	enum pp_graph_node_kind kind;
	void (*fn)(void *arg);   /* PP_GRAPH_HOST */
	void *arg;
	void *dst;               /* PP_GRAPH_COPY */
	const void *src;
	size_t n;                /* bytes */
	enum pp_copy_kind copy_kind;
};

struct pp_graph {
	struct pp_device *dev;
	void *ctx;               /* the backend's executable graph; NULL: the dispatcher's */
	struct pp_graph_node *nodes; /* the calls made through pinpipe, in order: what the
				   * dispatcher issues again, or (with a backend graph) what
				   * the counters count at each launch */
	size_t n, cap;           /* nodes used, allocated */
	int err;                 /* the capture's first error, or 0 */
	char msg[256];           /* its message */
	/* while captured: */
	struct pp_stream *stream; /* the stream capturing it */
	pthread_t thread;        /* the thread that began the capture */
	struct pp_graph *next_open; /* in graph.c's list of the captures open */
};

/*
 * device/graph.c's side of a capture, for the dispatcher's calls on a
 * stream that captures (stream->capture set).  pp_graph_record_host and
 * pp_graph_record_copy add the call to the graph (which a backend without
 * graphs issues again at each launch; with graphs, the copies are counted
 * at each launch); they return 0, or -ENOMEM, which spoils the capture.
 * pp_graph_refuse_call fails a call that a capture cannot take ('call'
 * names it, for the message), with 'err', and spoils the capture with it,
 * as CUDA invalidates a capture, so that no graph lacks a call its caller
 * believed made.  pp_graph_spoil spoils the capture, if the stream has
 * one, with a call's error 'err' (< 0; its message the thread's last),
 * and returns it: a call that failed is not in the graph either.
 */
int pp_graph_record_host(struct pp_stream *stream, void (*fn)(void *arg), void *arg);
int pp_graph_record_copy(struct pp_stream *stream, void *dst, const void *src, size_t n,
			 enum pp_copy_kind kind);
int pp_graph_refuse_call(struct pp_stream *stream, int err, const char *call);
int pp_graph_spoil(struct pp_stream *stream, int err);

/* Adds the engine time of one copy, measured by a backend, to the device's copy_ns. */
static inline void pp_device_add_copy_ns(struct pp_device *dev, uint64_t ns)
{
	atomic_fetch_add_explicit(&dev->stats.copies_timed, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&dev->stats.copy_ns, ns, memory_order_relaxed);
}

/*
 * Backends: each fills dev->ops, dev->props and dev->ctx from the options
 * after the colon of the device name (NULL when there were none).
 */
int pp_device_cpu_open(struct pp_device *dev, const char *options);
int pp_device_sim_open(struct pp_device *dev, const char *options);

/* Failures the sim can be told to inject (for the tests of the error paths). */
enum pp_sim_fault {
	PP_SIM_FAIL_COPY = 0,  /* copies run by the engines fail with -EIO */
	PP_SIM_FAIL_ALLOC = 1, /* pp_device_alloc fails with -ENOMEM */
};

/*
 * Makes the sim device fail every 'fault' after the next 'after' succeed
 * (after < 0: never again).  Returns 0, or -EINVAL if dev is not a sim.
 */
int pp_device_sim_inject(struct pp_device *dev, enum pp_sim_fault fault, long long after);

/* cudaError_t values that pp_device_cuda_explain() tells apart (device_cuda.c checks them). */
#define PP_CUDA_ERR_STUB_LIBRARY 34        /* cudaErrorStubLibrary */
#define PP_CUDA_ERR_INSUFFICIENT_DRIVER 35 /* cudaErrorInsufficientDriver */
#define PP_CUDA_ERR_NO_DEVICE 100          /* cudaErrorNoDevice */

/*
 * Writes into msg (len bytes) why the CUDA runtime has no GPU to offer, as
 * "cuda: ..." for pp_last_error(): no NVIDIA driver, a driver older than
 * the runtime (both versions named), a driver and no GPU, or CUDA's own
 * words for anything else.  'err' is what cudaGetDeviceCount returned
 * (0 when it succeeded and counted none), 'name' and 'text' CUDA's name
 * and message for it; 'driver' the CUDA version the driver supports
 * (cudaDriverGetVersion, 1000 * major + 10 * minor; 0 with no driver),
 * 'runtime' the runtime's (cudaRuntimeGetVersion).  Returns true where a
 * driver is there and CUDA failed to start (CUDA is broken rather than
 * absent), false where there is no driver or no GPU.
 */
bool pp_device_cuda_explain(int err, const char *name, const char *text, int driver, int runtime,
			    char *msg, size_t len);

#ifdef PP_HAVE_CUDA
int pp_device_cuda_open(struct pp_device *dev, int index);
int pp_device_cuda_count_impl(void);
int pp_device_cuda_props(int index, struct pp_device_props *props);
#else
static inline int pp_device_cuda_open(struct pp_device *dev, int index)
{
	(void)dev;
	(void)index;
	return pp_error(-ENODEV, "cuda: this build of pinpipe has no CUDA (configured without the toolkit)");
}

static inline int pp_device_cuda_count_impl(void)
{
	return pp_error(-ENODEV, "cuda: this build of pinpipe has no CUDA (configured without the toolkit)");
}

static inline int pp_device_cuda_props(int index, struct pp_device_props *props)
{
	(void)index;
	(void)props;
	return pp_device_cuda_count_impl();
}
#endif

#ifdef __cplusplus
}
#endif
#endif
