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
 * What it costs the host per batch, in device calls: one copy (samples and
 * labels together), an event after it, the compute stream's wait for that
 * event, an event at release, and one query (or, when it must wait, one
 * synchronization) of the oldest release to learn that a device slot is
 * free; that release proves its batch's copy and every earlier one complete,
 * so their host batches go back to the loader without a query of their own
 * (the copies' events are asked only when the loader runs short while the
 * stage holds half its ring, and on a device whose copy errors stay with
 * their stream, the sim, once a batch whether its copy failed).  One batch in time_every is also timed on the
 * device (timing events cost the host more: on an H100 host 10 us a record
 * against 0.3 without timing).
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
	                              run ahead while the trainer holds batches; each slot beyond
	                              depth + 2, up to 3 more, lets one query of a release stand
	                              for one more: fewer device calls a batch, for a batch of
	                              device memory); 0: depth + 3.  Each slot keeps its
	                              batch of the loader's ring until an ordering proves its
	                              copy done, and the loader fills its ring in order, so a
	                              ring (pp_loader_config.prefetch) of fewer than workers +
	                              slots batches can leave workers idle */
	uint32_t time_every;       /* time one batch in this many (the first is): its copy time
	                              and exposure, on the device's timeline (see struct
	                              pp_transfer_stats); 1: every batch; 0: 16 */
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
	                            pp_event_synchronize() it first.  Never NULL: on cpu (in
	                            place, nothing copied) an event that is already complete */
	uint32_t slot;           /* device slot holding it */
	uint32_t nfields;        /* fields of the loader's layout (pp_loader_layout()) */
	void *fields[PP_MAX_FIELDS]; /* [nfields] each field's size values, in device memory
	                                (in place on cpu: the loader's); fields[0] == samples,
	                                and labels is the labels field's (pp_layout_labels()) */
};

/*
 * Counters since the stage was created; the same fields on every device.
 * Three separate figures say where a step's time may go: waiting for the
 * loader (wait_ns), the host's time in copy calls (host_blocked_ns) and the
 * copy time exposed to compute (exposed_ns, of the timed batches).
 *
 * How exposure is measured, on the device's timeline: for a timed batch,
 * events on the compute stream at the last release before its hand-out
 * ('mark': compute's earlier work done) and at its hand-out ('wanted':
 * compute could take the batch now), and around its copy on the copy
 * stream.  Exposed is
 *   - the time compute waited for the copy: from 'wanted' to the copy's
 *     end, when the copy ends later (late_ns);
 *   - plus the host's time in copy calls during the next() that handed it
 *     out that fell while compute was idle, between 'mark' and 'wanted': a
 *     copy that blocks the host (pageable memory) delays compute only when
 *     compute has nothing queued, as with a trainer that launches kernel by
 *     kernel and not far ahead; while compute is busy, it is hidden;
 * at most the copy's time.  Host time in a call that returns while the
 * device computes is never exposure: when the step takes no longer than
 * its compute and nothing waited for data, the copies are hidden.
 */
struct pp_transfer_stats {
	enum pp_device_kind device_kind; /* the device the batches went to */
	uint64_t batches;          /* batches handed out */
	uint64_t bytes;            /* bytes of samples and labels copied to the device */
	uint64_t copies_timed;     /* batches timed (one in time_every): the copy_ns,
	                              late_ns and exposed_ns of those */
	uint64_t copy_ns;          /* time the timed copies ran on the device, ns (between
	                              events around them on the copy stream) */
	uint64_t late_ns;          /* of exposed_ns, the time compute waited on the device
	                              for a copy still running, ns */
	uint64_t exposed_ns;       /* of copy_ns, the part not hidden behind compute (above), ns */
	uint64_t host_blocked_ns;  /* time the host spent inside the copy calls (every batch):
	                              a few us for pinned memory, the whole copy for pageable */
	uint64_t stage_ns;         /* the host time of the stage's own calls (next, release)
	                              less its waits for the loader and for slots: its cost,
	                              copy calls included */
	uint64_t wait_ns;          /* time pp_transfer_next() spent in the loader's calls:
	                              waiting for a batch (with 0 workers, filling it) */
	uint64_t slot_wait_ns;     /* time pp_transfer_next() waited for compute to finish
	                              with a device slot (every slot held or in use) */
	double hidden_share;       /* 1 - exposed_ns / copy_ns, in 0..1; NaN when nothing was
	                              timed (the cpu device, or no batch yet) */
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
 * Begins pos->epoch at position pos->samples of the epoch's order of all
 * ranks, as pp_loader_resume_samples() does: the resume of a position saved
 * with another rank count, batch size, rank split or drop rule (by
 * pp_transfer_get_position() or pp_loader_get_position()).  Returns 0 or
 * -errno (-EINVAL: another order, a streamed loader, pos->samples not a
 * multiple of this loader's global batch, or past the end of the epoch).
 */
PP_API int pp_transfer_resume_samples(struct pp_transfer *t, const struct pp_loader_position *pos);

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
 * only after it (the stage asks one such event for a few releases on one
 * stream, the newest: compute runs in order).  Does not block.  Returns 0,
 * or -EINVAL (a batch not held, or 'compute' not a stream of the stage's
 * device; the batch is then still held).
 */
PP_API int pp_transfer_release(struct pp_transfer *t, struct pp_device_batch *b,
			       struct pp_stream *compute);

/*
 * Writes where the trainer stands to *pos_p: the epoch begun and the
 * batches of it handed out by pp_transfer_next() (from the resume point on,
 * counting those before it), with the loader's plan and order keys and the
 * positions of the order all ranks took with those batches (samples).  The
 * loader's own position runs ahead by the copies in flight; this one does
 * not.  Saved once every batch handed out is trained on, it resumes
 * (pp_transfer_resume, or pp_transfer_resume_samples at another rank count
 * or batch size) at the next batch.  Returns 0, or -EINVAL before any epoch was begun.
 */
PP_API int pp_transfer_get_position(struct pp_transfer *t, struct pp_loader_position *pos_p);

/*
 * Writes the counters to *stats_p.  Waits for the copies already handed out
 * to be known complete, so that their times are counted.  Returns 0 or -errno.
 */
PP_API int pp_transfer_get_stats(struct pp_transfer *t, struct pp_transfer_stats *stats_p);

#ifdef __cplusplus
}
#endif
#endif
