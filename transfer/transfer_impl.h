/*
 * transfer/transfer_impl.h: the transfer stage's state, shared by the
 * stage (transfer.c: copies, slots, hand-outs, create and destroy) and
 * its figures (overlap.c: the timed batches' exposed copy time, the host
 * time of the stage's calls).  Not installed.
 */
#ifndef PP_TRANSFER_TRANSFER_IMPL_H
#define PP_TRANSFER_TRANSFER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/device.h"
#include "pinpipe/loader.h"
#include "pinpipe/transfer.h"

/* Host intervals of copy calls kept per hand-out; more are merged into the last. */
#define MAX_CALLS 8

/* Device slot states. */
enum tslot_state {
	TSLOT_FREE = 0,     /* unused; its memory may be written */
	TSLOT_COPYING = 1,  /* copy issued, in the queue, not handed out */
	TSLOT_HELD = 2,     /* handed out to the trainer */
	TSLOT_RELEASED = 3, /* given back; free once 'released' completes */
};

/* Host-clock intervals of copy calls, ns. */
struct call_spans {
	uint32_t n;                 /* intervals in use */
	uint64_t v[MAX_CALLS][2];   /* [from, to) */
};

struct tslot {
	enum tslot_state state;
	void *mem;                  /* device memory: the fields at field_off[], as the loader's slots */
	int32_t *host_labels;       /* [batch_size], host copies handed out with the batch */
	uint64_t *host_ids;         /* [batch_size] */
	struct pp_event *done;      /* copy stream, after the copy; no timing */
	struct pp_event *released;  /* compute stream, after the trainer's last use; no timing */
	struct pp_event *t_start;   /* timed batches: copy stream, before the copy */
	struct pp_event *t_done;    /* timed batches: copy stream, after it (in place of done) */
	struct pp_event *t_wanted;  /* timed batches: compute stream, at the hand-out */
	struct pp_event *t_mark;    /* timed batches: compute stream, at the last release
				       before the hand-out */
	struct pp_batch *hb;        /* the loader's batch until its copy is known complete, or NULL */
	bool timed;                 /* its copy is timed (t_done stands for done) */
	bool marked;                /* t_mark recorded while it was next to be handed out */
	bool counting;              /* handed out timed, its figures not counted yet */
	uint64_t copy_seq;          /* order of its copy among all copies, from 1 */
	uint64_t release_seq;       /* order of its release among all releases, from 1 */
	struct pp_stream *wait_stream; /* the stream made to wait for its copy at the hand-out */
	struct pp_stream *release_stream; /* the stream its release was recorded on */
	uint64_t want_ns;           /* host clock when t_wanted was recorded */
	struct pp_stream *mark_stream; /* where t_mark was recorded */
	struct pp_stream *want_stream; /* where t_wanted was recorded */
	struct call_spans calls;    /* the copy calls of the next() that handed it out */
	struct pp_device_batch b;   /* what the trainer sees */
};

struct pp_transfer {
	struct pp_loader *loader;
	struct pp_device *dev;
	bool in_place;              /* host is device: no copies, batches used where they lie */
	uint32_t depth;             /* copies in flight ahead of the trainer, at most */
	uint32_t nslots;            /* device slots */
	uint32_t time_every;        /* one copy in this many is timed */
	struct tslot *slots;        /* [nslots] */
	struct pp_stream *copy;     /* the copy stream */
	uint32_t *queue;            /* [nslots] ring of slots COPYING, oldest first */
	uint32_t qhead;             /* index in queue of the oldest */
	uint32_t qlen;              /* slots in the queue */
	uint32_t ring_slots;        /* slots of the loader's ring */
	uint32_t batch_size;        /* samples of the largest batch */
	size_t sample_bytes;        /* bytes of one sample as the loader hands it out */
	const struct pp_layout *layout; /* the loader's, as handed out */
	int labels_field;           /* index of its labels field, or negative */
	size_t field_off[PP_MAX_FIELDS]; /* offset of each field in a slot's memory, bytes (as
				       in the loader's ring slots, so that one copy moves all) */
	size_t field_bytes[PP_MAX_FIELDS]; /* bytes of one sample of each field */
	size_t slot_bytes;          /* bytes of a slot's memory: up to the last field's end */
	bool epoch_begun;           /* begin_epoch succeeded at least once */
	bool loader_done;           /* the loader said end of epoch */
	uint64_t epoch;             /* the epoch begun */
	uint64_t handed;            /* batches of that epoch handed out (from the resume point) */
	uint64_t copies;            /* copies issued so far */
	uint64_t copies_done;       /* copy_seq of the newest copy known complete: it and
				       every one before it (one copy stream, run in order) */
	uint64_t copies_checked;    /* copy_seq of the newest copy known not to have failed */
	uint64_t releases;          /* releases so far */
	bool slot_waited;           /* the last next() waited for a slot's release: compute is
				       behind the host, and the next next(), with a copy queued,
				       asks the device nothing */
	uint32_t proof_span;        /* releases one query proves at once: that of the newest of
				       them (compute runs in order on its stream); the slots
				       beyond depth + 1, at most 4 */
	struct pp_event *spare_mark; /* a mark recorded while no copy was queued, swapped into
					the next timed slot issued */
	bool spare_fresh;           /* spare_mark recorded since the last hand-out */
	struct pp_stream *spare_stream; /* where spare_mark was recorded */
	struct call_spans calls;    /* copy calls since the last hand-out */
	uint64_t wait_in_call;      /* ns of the current call spent waiting (loader, slots) */
	struct pp_transfer_stats stats; /* counters; hidden_share is filled at get_stats */
};

/* overlap.c: notes a copy call's host interval for the hand-out that ends this next(). */
void pp_transfer_note_call(struct pp_transfer *t, uint64_t from, uint64_t to);

/*
 * overlap.c: counts the figures of a timed batch once its events are
 * complete (its 'wanted' is: compute reached the hand-out, after waiting
 * for the copy); once only, after which s->counting is false.
 */
void pp_transfer_count_times(struct pp_transfer *t, struct tslot *s);

/* overlap.c: adds the host time of a call of the stage since t0, less its waits, to stage_ns. */
void pp_transfer_count_call(struct pp_transfer *t, uint64_t t0);

#endif
