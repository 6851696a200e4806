/*
 * pinpipe/transfer.h: the transfer stage: the loader's batches copied to a
 * device ahead of use, asynchronously on a copy stream of its own, each
 * handed to the trainer with its compute stream already made to wait for
 * the copy (no host synchronisation between copy and compute).  What
 * PyTorch's .to(device, non_blocking=True) on a pinned batch does, with the
 * bookkeeping that makes it safe: a device slot is reused only once the
 * event recorded after its last use has completed, and a host ring slot goes
 * back to the loader only once its copy's event has completed.
 *
 * Batches travel as the loader stores them: with a uint8 loader they cross
 * the bus as uint8 (4x fewer bytes than float32) and the model converts and
 * normalises them on the device (nn's first step); with an f32 loader they
 * travel as float32.  Labels are copied too.
 *
 * On a device where the host is the device (cpu), nothing is copied: the
 * loader's batch is handed out in place and goes back to the loader at
 * release.
 *
 * Use:
 *	pp_transfer_create(&cfg, &t);
 *	pp_transfer_begin_epoch(t, epoch);
 *	while ((ret = pp_transfer_next(t, compute, &b)) == 1) {
 *		... enqueue work on 'compute' that reads b->samples, b->labels ...
 *		pp_transfer_release(t, b, compute);
 *	}
 *	pp_transfer_destroy(t);
 *
 * Thread safety: one thread calls every function of a transfer stage; the
 * loader it consumes must have no other consumer.
 */
#ifndef PINPIPE_TRANSFER_H
#define PINPIPE_TRANSFER_H

#include <stdint.h>

#include "pinpipe/common.h"
#include "pinpipe/device.h"
#include "pinpipe/loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What to move, where, and how far ahead.  Zero-initialise; zero fields take the defaults. */
struct pp_transfer_config {
	struct pp_loader *loader;  /* the source; must outlive the stage; the stage is its only consumer */
	struct pp_device *device;  /* the destination; the loader's ring should come from it */
	uint32_t depth;            /* batches copied ahead of the trainer; 0: 2 */
	uint32_t slots;            /* device slots, 2..256 (with depth + 1 or fewer, fewer copies
	                              run ahead while the trainer holds batches); 0: depth + 2 */
};

/* One device-resident batch, as handed out by pp_transfer_next(); valid until released. */
struct pp_device_batch {
	uint64_t epoch;          /* epoch it belongs to */
	uint64_t index;          /* batch number within the epoch on this rank, from 0 */
	uint32_t size;           /* samples in the batch */
	uint32_t padding;        /* the last 'padding' samples are repeats (see struct pp_batch) */
	enum pp_dtype dtype;     /* element type of samples, as the loader produced them */
	size_t sample_bytes;     /* bytes of one sample */
	void *samples;           /* size x sample shape, in device memory */
	int32_t *labels;         /* size labels in device memory, or NULL for a source without labels */
	const int32_t *host_labels; /* size labels in host memory (owned by the stage), or NULL */
	const uint64_t *host_ids;   /* size sample indices in host memory (owned by the stage) */
	struct pp_event *ready;  /* completes when samples and labels are on the device; the
	                            compute stream already waits for it, but host code that reads
	                            the device memory directly (CPU kernels on sim memory) must
	                            pp_event_synchronize() it first */
	uint32_t slot;           /* device slot holding it */
};

/* Counters since the stage was created; the same fields on every device. */
struct pp_transfer_stats {
	enum pp_device_kind device_kind; /* the device the batches went to */
	uint64_t batches;          /* batches handed out */
	uint64_t bytes;            /* bytes copied to the device (samples and labels) */
	uint64_t copies_timed;     /* batches whose copy is counted in copy_ns and exposed_ns */
	uint64_t copy_ns;          /* time the copies ran on the device, ns (cuda: measured with
	                              events; sim: by the engine's clock, with events) */
	uint64_t exposed_ns;       /* of copy_ns, the part not hidden behind compute: the time
	                              compute waited for the copy, plus the time the host was
	                              blocked in the copy call (a copy that blocks the thread
	                              which issues compute hides nothing), at most copy_ns */
	uint64_t host_blocked_ns;  /* time the host spent inside pp_memcpy_async() */
	uint64_t wait_ns;          /* time pp_transfer_next() waited for the loader */
	double hidden_share;       /* 1 - exposed_ns / copy_ns, in 0..1; NaN when nothing was
	                              copied (the cpu device, or no batch yet) */
};

struct pp_transfer;

/*
 * Creates a transfer stage on cfg->loader and cfg->device: a copy stream,
 * events, and the device slots, each sized for the largest batch (allocated
 * once, here).  Returns 0 and the stage in *t_p, or -errno: -EINVAL (no
 * loader or device, depth or slots out of range), -ENOMEM (device memory),
 * or the device's error.
 */
PP_API int pp_transfer_create(const struct pp_transfer_config *cfg, struct pp_transfer **t_p);

/*
 * Waits for the copies in flight and the compute that released slots, gives
 * every host batch still held back to the loader, frees the device slots and
 * the stage.  Batches not yet released become invalid.  NULL is allowed.
 */
PP_API void pp_transfer_destroy(struct pp_transfer *t);

/*
 * Begins epoch 'epoch': drops (after they complete) the copies of the
 * current epoch that were not handed out yet, then begins it on the loader.
 * Batches the trainer still holds stay valid until released.  Returns 0 or
 * -errno (the loader's error, or a failed copy).
 */
PP_API int pp_transfer_begin_epoch(struct pp_transfer *t, uint64_t epoch);

/*
 * Begins pos->epoch at batch pos->batch, as pp_transfer_begin_epoch() and
 * pp_loader_resume() do: the batches that follow are exactly those that
 * came after the first pos->batch of that epoch.  For resuming a run from a
 * checkpoint.  Returns 0 or -errno (-EINVAL: a position saved with other
 * loader settings, or past the end of the epoch).
 */
PP_API int pp_transfer_resume(struct pp_transfer *t, const struct pp_loader_position *pos);

/*
 * Hands out the next batch of the epoch, on the device, in *b_p, after
 * making 'compute' (a stream of the stage's device) wait for its copy; also
 * issues the copies of the batches after it, up to 'depth' ahead.  Returns
 * 1 with a batch, 0 at the end of the epoch (*b_p = NULL), or -errno:
 * -ENOBUFS when every device slot is held by the trainer, -EINVAL (no epoch
 * begun, or a stream of another device), -EIO (a copy failed: the message
 * names the stream and the copy), or the loader's error.  A batch is handed
 * out without the host waiting for its copy, so the failure of a copy still
 * running then is returned by a later call, at the latest when its device
 * slot is needed again (and at once by pp_event_synchronize() of the
 * batch's 'ready' event, for a trainer that must know).  After an error the stage holds no copy in
 * flight, and a new epoch may be begun.
 */
PP_API int pp_transfer_next(struct pp_transfer *t, struct pp_stream *compute,
			    struct pp_device_batch **b_p);

/*
 * Gives a batch back once the work enqueued on 'compute' so far (its last
 * use) completes: an event is recorded there, and the device slot is reused
 * only after it.  Does not block.  Returns 0, or -EINVAL (a batch not held).
 */
PP_API int pp_transfer_release(struct pp_transfer *t, struct pp_device_batch *b,
			       struct pp_stream *compute);

/*
 * Writes the counters to *stats_p.  Waits for the copies already handed out
 * to be known complete, so that their times are counted.  Returns 0 or -errno.
 */
PP_API int pp_transfer_get_stats(struct pp_transfer *t, struct pp_transfer_stats *stats_p);

/*
 * Enqueues a synthetic compute step of 'ns' nanoseconds on the stream, in
 * stream order like a kernel: a spin kernel on cuda, a host function that
 * sleeps on sim, a sleep in the calling thread on cpu.  For benchmarks and
 * tests of the overlap.  Returns 0 or -errno (-EINVAL: no stream; -EIO: the
 * kernel launch failed).
 */
PP_API int pp_stream_spin(struct pp_stream *stream, uint64_t ns);

#ifdef __cplusplus
}
#endif
#endif
