/*
 * pinpipe/device.h: the device interface: memory, streams, events and
 * asynchronous copies, on one of three backends.
 *
 *   cuda  the CUDA runtime: a real GPU ("cuda", "cuda:N").
 *   cpu   the host is the device: device memory is host memory and a batch
 *         is used where it lies ("cpu").
 *   sim   a discrete device simulated on host threads ("sim",
 *         "sim:bw=25GB/s", "sim:poison"): its own memory, one copy-engine
 *         thread per stream running queued copies in order, pageable copies
 *         staged synchronously through a bounce buffer as the CUDA driver
 *         does (the call returns once the engine has moved them), pinned
 *         copies asynchronous, an optional bandwidth cap and an optional host
 *         cost of every call ("sim:call_us=20"), as a GPU driver's calls have.
 *
 * The names are those of CUDA: a stream runs its work in order; an event
 * recorded on a stream completes when the stream reaches it; a stream can be
 * made to wait for an event without the host waiting.  "auto" opens cuda:0
 * when a GPU is there and cpu otherwise.
 *
 * Device pointers (from pp_device_alloc; memory allocated by other means is
 * refused) and host pointers are checked on every copy: a copy that reaches
 * outside an allocation of the right kind fails with -EFAULT rather than
 * corrupting memory.
 *
 * Thread safety: a device may be used from several threads at once; a
 * stream and an event each belong to one thread at a time.  The sim's
 * copy-engine threads block the asynchronous signals (pinpipe/common.h).
 */
#ifndef PINPIPE_DEVICE_H
#define PINPIPE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

enum pp_device_kind {
	PP_DEVICE_CPU = 0,
	PP_DEVICE_SIM = 1,
	PP_DEVICE_CUDA = 2,
};

/* What a device is and can do. */
struct pp_device_props {
	char name[64];           /* "cpu", "sim", "cuda:0" */
	char description[128];   /* e.g. "NVIDIA H100 80GB HBM3" */
	enum pp_device_kind kind;
	int index;               /* N of cuda:N; 0 otherwise */
	uint64_t total_memory;   /* bytes of device memory (host memory for cpu) */
	bool host_is_device;     /* true for cpu: batches are used in place, never copied */
	bool host_addressable;   /* the host's CPU can read and write device memory in place
				  * (cpu, sim); false for cuda, whose memory only copies reach */
	bool async_copy;         /* copies from pinned memory overlap the host */
	int copy_engines;        /* copies that can run at once (asyncEngineCount on cuda);
				  * 0 on sim (one engine per stream, no limit) and cpu (no engine) */
	char fallback[256];      /* "auto" only: why it opened cpu although a GPU driver is
				  * there (CUDA failed to start: a driver older than the
				  * runtime, a GPU that cannot be used...), for the user to
				  * hear; "" when it opened a GPU, or there is none */
	bool sticky_errors;      /* a copy that fails on the device makes every later call
				  * fail (cuda's asynchronous errors); false: the error stays
				  * with its stream, told by its events (sim) */
	bool cuda_streams;       /* its streams are CUDA streams (pp_stream_cuda_handle()), on
				  * which CUDA kernels, cuBLAS and NCCL can be queued (cuda) */
};

struct pp_device;
struct pp_stream;
struct pp_graph;
struct pp_event;

/*
 * Opens a device by name: "auto", "cpu", "sim" with options after a colon
 * ("sim:bw=25GB/s", "sim:poison", "sim:bw=10GB/s,poison,mem=2GiB"), "cuda"
 * or "cuda:N".  The sim's options: bw=RATE caps each copy engine (units
 * B/s, KB/s, MB/s, GB/s, TB/s and KiB/s ... TiB/s); mem=SIZE sets its memory
 * (default: the host's); call_us=N makes every call that reaches a stream
 * (a copy, an event record, query or synchronize, a stream wait or
 * synchronize, a host function) cost the calling thread N microseconds of
 * spinning first, as each CUDA call costs the host (measured on an H100 host:
 * 0.2-0.4 us for a record without timing, 1.5 for a query, a few for a
 * copy, 10 for a record with timing); poison overwrites device memory that is freed, or
 * released by the transfer stage, with 0xfb, and keeps freed memory back
 * for a while (up to 256 MiB) so that a late read of it sees the pattern
 * rather than someone else's data.  Returns 0 and the device in *dev_p, or
 * -errno:
 * -EINVAL (a name or option it does not know), -ENODEV (cuda asked for, and
 * the build has no CUDA, or there is no driver, or no GPU, or no GPU N; the
 * message says which), -EIO (cuda asked for: a driver is there and CUDA
 * failed to start).  "auto" never fails for want of a GPU: it opens cpu and
 * says why in pp_last_error(); where a driver is there and CUDA failed to
 * start, it says so in props.fallback too, as a user would want to know.
 */
PP_API int pp_device_open(const char *name, struct pp_device **dev_p);

/*
 * Waits for all the device's work, destroys the streams and events still
 * open, frees the device and host memory still allocated and closes the
 * device.  Every handle obtained from it is invalid afterwards.  NULL is
 * allowed.
 */
PP_API void pp_device_close(struct pp_device *dev);

/*
 * Blocks until the work issued on every stream of the device has completed.
 * Returns 0, or -errno: the error of a copy that failed on one of the
 * streams (-EIO), which stays there for that stream's pp_stream_synchronize.
 */
PP_API int pp_device_synchronize(struct pp_device *dev);

/* Returns the device's properties, valid while it is open; NULL for a NULL device. */
PP_API const struct pp_device_props *pp_device_get_props(const struct pp_device *dev);

/*
 * Lists the devices present: cpu, sim, and each GPU.  Writes at most 'max'
 * entries to 'props' and their number to *n_p; returns 0 or -errno.  With no
 * GPU, the list simply has none, and pp_device_cuda_count() says why.
 */
PP_API int pp_device_list(struct pp_device_props *props, size_t max, size_t *n_p);

/*
 * Returns the number of GPUs usable (> 0), or -ENODEV with a message that
 * says why there are none: a build without CUDA, no driver, or no device;
 * or -EIO where a driver is there and CUDA failed to start (a driver older
 * than the runtime, or another error of the runtime's).
 */
PP_API int pp_device_cuda_count(void);

/* ------------------------------------------------------------------ memory */

/*
 * Allocates 'bytes' (> 0) of device memory, aligned to 256 bytes.  Returns
 * 0 and the pointer in *ptr_p, or -EINVAL (0 bytes) or -ENOMEM.  On cpu the
 * pointer is host memory.
 */
PP_API int pp_device_alloc(struct pp_device *dev, size_t bytes, void **ptr_p);

/*
 * Waits for the device's work (as cudaFree does) and frees device memory
 * from pp_device_alloc() on 'dev'.  NULL is allowed; another pointer is ignored.
 */
PP_API void pp_device_free(struct pp_device *dev, void *ptr);

/*
 * Allocates 'bytes' of host memory aligned to 4096 bytes, page-locked
 * (pinned) when 'pinned' and the system allows it.  When pinning is refused
 * (RLIMIT_MEMLOCK, no GPU), it falls back to pageable memory, counts the
 * fallback in the statistics and writes false to *pinned_p (may be NULL).
 * Pinned means registered with the driver on cuda, and page-locked with
 * mlock on sim and cpu; on cpu, where nothing is ever copied, it changes no
 * figure, and *pinned_p says whether mlock held (RLIMIT_MEMLOCK).  Returns
 * 0, -EINVAL (dev or ptr_p NULL, 0 bytes) or -ENOMEM.  Pinning is slow:
 * allocate once, not per batch.
 */
PP_API int pp_host_alloc(struct pp_device *dev, size_t bytes, bool pinned, void **ptr_p,
			 bool *pinned_p);

/*
 * Waits for the device's work and frees host memory from pp_host_alloc()
 * on 'dev'.  NULL is allowed; another pointer is ignored.
 */
PP_API void pp_host_free(struct pp_device *dev, void *ptr);

/*
 * Tells the device that [ptr, ptr + bytes) of its memory no longer holds
 * anything its user needs (a buffer handed back to a pool): a sim opened
 * with poisoning overwrites it with 0xfb bytes, so that a later read of it
 * shows; elsewhere (and for a NULL device) it does nothing.
 */
PP_API void pp_device_release(struct pp_device *dev, void *ptr, size_t bytes);

/* ------------------------------------------------------------------ streams and events */

/* Creates a stream: work on it runs in the order it was issued. */
PP_API int pp_stream_create(struct pp_device *dev, struct pp_stream **stream_p);

/* Waits for the stream's work and destroys it.  NULL is allowed. */
PP_API void pp_stream_destroy(struct pp_stream *stream);

/* Returns the device a stream was created on (NULL for NULL). */
PP_API struct pp_device *pp_stream_device(const struct pp_stream *stream);

/*
 * Blocks until all work issued on the stream so far has completed.  Returns
 * 0, or the first error of that work since the last call (a failed copy:
 * -EIO with a message naming the stream and the copy), which is then cleared.
 */
PP_API int pp_stream_synchronize(struct pp_stream *stream);

/*
 * Enqueues fn(arg) on the stream: it runs on a host thread once the work
 * issued before it has completed, and the work issued after it waits for
 * it to return (cudaLaunchHostFunc).  fn must not call into the device.
 * On cpu it runs at once in the caller's thread.  Returns 0 or -errno.
 */
PP_API int pp_stream_launch_host(struct pp_stream *stream, void (*fn)(void *arg), void *arg);

/*
 * Returns the cudaStream_t of a stream of a cuda device (as a void *), so
 * that a trainer can put its own kernels and cuBLAS calls on the stream the
 * transfer stage makes wait for each batch; NULL for a stream of a device
 * whose props do not say cuda_streams.  The handle stays owned by pinpipe:
 * do not destroy it.
 */
PP_API void *pp_stream_cuda_handle(struct pp_stream *stream);

/* Flags of pp_event_create_flags(). */
enum pp_event_flags {
	PP_EVENT_DEFAULT = 0,        /* keeps the time it completes, for pp_event_elapsed_ns() */
	PP_EVENT_NO_TIMING = 1 << 0, /* keeps no time: cheaper to record (on cuda,
					cudaEventDisableTiming: a record costs the host a
					fraction of a microsecond instead of several) */
};

/* Creates an event that keeps its time (pp_event_create_flags with PP_EVENT_DEFAULT). */
PP_API int pp_event_create(struct pp_device *dev, struct pp_event **event_p);

/*
 * Creates an event with 'flags' (enum pp_event_flags, or-ed).  An event
 * only ordered on, never timed, should be PP_EVENT_NO_TIMING.  Returns 0,
 * or -EINVAL (an unknown flag), or the device's error.
 */
PP_API int pp_event_create_flags(struct pp_device *dev, unsigned flags,
				 struct pp_event **event_p);

/* Destroys an event, once a record of it still in flight has completed.  NULL is allowed. */
PP_API void pp_event_destroy(struct pp_event *event);

/*
 * Records the event on the stream: it completes when the stream's work
 * issued before it has.  Recording again replaces the earlier record.
 * The event and the stream must belong to the same device.
 */
PP_API int pp_event_record(struct pp_event *event, struct pp_stream *stream);

/*
 * Returns 1 if the event has completed (or was never recorded), 0 if not
 * yet, or -errno: the error of a copy that failed on its stream before it
 * (-EIO), as pp_event_synchronize() would return it.
 */
PP_API int pp_event_query(struct pp_event *event);

/*
 * Blocks the host until the event has completed.  Returns 0, or the error
 * of a copy that failed on its stream before it (-EIO).
 */
PP_API int pp_event_synchronize(struct pp_event *event);

/* Makes the stream's later work wait for the event, without blocking the host. */
PP_API int pp_stream_wait_event(struct pp_stream *stream, struct pp_event *event);

/*
 * Writes the time between two completed events, in nanoseconds, to *ns_p
 * (0 when 'end' completed first).  Returns 0, -EINVAL (an event never
 * recorded, or created with PP_EVENT_NO_TIMING) or -EAGAIN (not completed;
 * on cuda the runtime is not asked then).
 */
PP_API int pp_event_elapsed_ns(struct pp_event *start, struct pp_event *end, uint64_t *ns_p);

/* ------------------------------------------------------------------ copies */

enum pp_copy_kind {
	PP_COPY_H2D = 0, /* host to device */
	PP_COPY_D2H = 1, /* device to host */
	PP_COPY_D2D = 2, /* device to device */
};

/*
 * Copies n bytes on the stream.  From pinned host memory the call returns at
 * once and the copy runs in the background; from pageable memory it blocks
 * the host while the data is staged, as CUDA does.  Completion is known
 * through an event recorded after it.  On cpu the copy is a memcpy.
 * The device side must lie inside one pp_device_alloc() allocation of the
 * stream's device and the host side outside all of them (except on cpu).
 * Returns 0, or -EINVAL (NULL pointer, unknown kind), -EFAULT (a pointer
 * outside the memory its kind names), -ENOMEM, or -EIO (a pageable copy,
 * which completes before the call returns, failed).  n == 0 does nothing.
 */
PP_API int pp_memcpy_async(void *dst, const void *src, size_t n, enum pp_copy_kind kind,
			   struct pp_stream *stream);

/*
 * Enqueues a synthetic compute step of 'ns' nanoseconds on the stream, in
 * stream order like a kernel: a spin kernel on cuda, a host function that
 * sleeps on sim, a sleep in the calling thread on cpu.  For benchmarks and
 * tests of the overlap.  Returns 0 or -errno (-EINVAL: no stream; -EIO: the
 * kernel launch failed).
 */
PP_API int pp_stream_spin(struct pp_stream *stream, uint64_t ns);

/* ------------------------------------------------------------------ graphs */

/*
 * A graph is the work issued on a stream between pp_stream_begin_capture()
 * and pp_stream_end_capture(), kept to be issued again with one call
 * (pp_graph_launch()): on cuda a CUDA graph made by stream capture, so that
 * the kernels and cuBLAS calls a caller launches on the stream
 * (pp_stream_cuda_handle()) are in it too; on sim and cpu the host
 * functions, copies and spins issued through pinpipe, recorded and issued
 * again in order.  A graph keeps the arguments it was captured with: the
 * same pointers, sizes and values at every launch.
 */

/*
 * Starts capturing the work issued on the stream: from now until
 * pp_stream_end_capture() that work is recorded, not run.  While a stream
 * captures, pp_stream_synchronize() on it returns -EBUSY, and an event
 * recorded on it or waited for by it -ENOTSUP (a graph holds no events).
 * A thread captures one stream at a time, on every backend: a capture
 * begun while the same thread has one open, on any stream of any device,
 * is refused with -EBUSY (its message names the open one), which is left
 * as it was (CUDA cannot make a graph while another capture of the thread
 * is open, and trying spoils that capture too); other threads may capture
 * at the same time.  End a capture in the thread that began it.
 * Returns 0, -EINVAL (NULL), -EBUSY (this stream or another of this thread
 * already capturing), -ENOMEM, or the device's error.
 */
PP_API int pp_stream_begin_capture(struct pp_stream *stream);

/*
 * Ends the capture and writes the graph to *graph_p.  When something
 * issued during the capture failed or could not be captured, no graph is
 * made and that error is returned (the work was not run either): a caller
 * can then issue it again without a graph.  Returns 0, -EINVAL (NULL, or
 * the stream was not capturing), or the capture's error.
 */
PP_API int pp_stream_end_capture(struct pp_stream *stream, struct pp_graph **graph_p);

/*
 * Issues the graph's work on the stream (a stream of the device it was
 * captured on, not capturing), in stream order, as one call.  Returns 0,
 * -EINVAL, -EBUSY (the stream is capturing) or the first error of the
 * work issued (its message says which).
 */
PP_API int pp_graph_launch(struct pp_graph *graph, struct pp_stream *stream);

/* The calls recorded in the graph: host functions and copies (on cuda, kernels launched
 * on the stream directly are in the graph but not counted here). */
PP_API size_t pp_graph_calls(const struct pp_graph *graph);

/* Destroys a graph, after its launches in flight have completed.  NULL is allowed. */
PP_API void pp_graph_destroy(struct pp_graph *graph);

/* ------------------------------------------------------------------ statistics */

/* Counters of a device since it was opened; the same fields on every backend. */
struct pp_device_stats {
	uint64_t copies;           /* copies issued */
	uint64_t bytes_h2d;        /* bytes copied host to device */
	uint64_t bytes_d2h;        /* bytes copied device to host */
	uint64_t copies_timed;     /* copies whose time is in copy_ns: every copy on sim and
				    * cpu; on cuda the first and then every 16th of a stream
				    * (timing events cost the host microseconds a record) */
	uint64_t copy_ns;          /* ns the timed copies ran on the device (engine time; on
				    * cuda, measured with events and counted once known done) */
	uint64_t host_blocked_ns;  /* ns the host spent inside pp_memcpy_async() */
	uint64_t pinned_bytes;     /* host bytes allocated pinned */
	uint64_t pinned_fallbacks; /* pinned allocations that fell back to pageable */
	uint64_t pageable_copies;  /* copies from or to pageable host memory (the slow path) */
	uint64_t calls;            /* calls that reach the device's queues: copies, event
				    * records, queries and synchronizations, stream waits and
				    * synchronizations, host functions, graph launches (each
				    * costs the host time on a GPU: what a per-batch budget
				    * counts; the work inside a graph is not counted) */
	uint64_t graph_launches;   /* pp_graph_launch() calls that succeeded */
};

/* Writes the device's counters to *stats_p. */
PP_API int pp_device_get_stats(struct pp_device *dev, struct pp_device_stats *stats_p);

#ifdef __cplusplus
}
#endif
#endif
