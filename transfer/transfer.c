/*
 * transfer/transfer.c: the transfer stage (pinpipe/transfer.h).  It is the
 * loader's consumer, called from the trainer's thread: next() gives back the
 * host batches whose copies have completed, frees the device slots whose
 * release events have completed, issues copies of ready batches on its own
 * copy stream up to 'depth' ahead (pp_loader_try_next, so it never waits for
 * a batch while a copy is in flight), and hands out the oldest copy after
 * making the compute stream wait on its event.
 *
 * What a batch costs the host, in device calls: one copy (samples and labels
 * in one region of the slot), an event after it, the compute stream's wait
 * for that event, an event at release, and, for every 'proof_span' batches
 * (the slots beyond depth + 1: 2 by default), one query when a slot is
 * wanted (a synchronization when next() must wait for one).  Orderings
 * stand in for the other queries: compute runs in order, so the newest of
 * a span of releases on a stream proves them all complete; a release
 * recorded on the stream that waited for the batch's copy proves that copy
 * complete, and copies complete in the order issued, so the host batches
 * of it and of every earlier copy go back to the loader then
 * (copies_complete); the copies' own events are asked only when the loader
 * runs short of ring slots (host_short), and, where a device keeps a copy's
 * error with its stream (sim), once a span whether its copy failed.  One
 * batch in 'time_every' is also timed, its figures counted by overlap.c.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "pinpipe/transfer.h"
#include "transfer/transfer_impl.h"

/* Default of pp_transfer_config.time_every. */
#define TIME_EVERY_DEFAULT 16

/* Gives the loader its batch back once the slot's copy is known complete. */
static int give_back_host(struct pp_transfer *t, struct tslot *s)
{
	int ret;

	if (s->hb == NULL)
		return 0;
	ret = pp_loader_release(t->loader, s->hb);
	s->hb = NULL;
	return ret;
}

/*
 * Records that the copy 'seq' and every one before it are complete (copies
 * run in order on one stream), and gives back their host batches; 'checked'
 * when an event of the copy stream said so, and so that none of them failed.
 */
static int copies_complete(struct pp_transfer *t, uint64_t seq, bool checked)
{
	int ret = 0;

	if (checked)
		t->copies_checked = PP_MAX(t->copies_checked, seq);
	if (seq <= t->copies_done)
		return 0;
	t->copies_done = seq;
	for (uint32_t i = 0; i < t->nslots && ret == 0; i++)
		if (t->slots[i].hb != NULL && t->slots[i].copy_seq <= seq)
			ret = give_back_host(t, &t->slots[i]);
	return ret;
}

/*
 * Frees a released slot whose release has completed: its copy is complete
 * too, and with it every copy before it, when the release was recorded on
 * the stream that waited for the copy (else its copy's event is asked);
 * gives their host batches back, counts its times and poisons its memory
 * (on a sim with poisoning).
 */
static int free_slot(struct pp_transfer *t, struct tslot *s)
{
	int ret = 0;

	if (s->release_stream == s->wait_stream) {
		/*
		 * Complete, but did it fail?  Where errors stay with their stream
		 * its event says; where they reach every call, the query of the
		 * release just made would have said.
		 */
		if (!pp_device_get_props(t->dev)->sticky_errors && s->copy_seq > t->copies_checked &&
		    (ret = pp_event_query(s->b.ready)) < 0)
			return ret;
		ret = copies_complete(t, s->copy_seq, true);
	} else if (s->hb != NULL && (ret = pp_event_synchronize(s->b.ready)) == 0)
		ret = give_back_host(t, s);
	pp_transfer_count_times(t, s);
	pp_device_release(t->dev, s->mem, t->slot_bytes);
	s->state = TSLOT_FREE;
	return ret;
}

static struct tslot *find_free(struct pp_transfer *t)
{
	for (uint32_t i = 0; i < t->nslots; i++)
		if (t->slots[i].state == TSLOT_FREE)
			return &t->slots[i];
	return NULL;
}

static uint32_t count_free(const struct pp_transfer *t)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < t->nslots; i++)
		n += t->slots[i].state == TSLOT_FREE;
	return n;
}

/* The slot holding a host batch with the oldest (newest) copy, or NULL. */
static struct tslot *host_holder(struct pp_transfer *t, bool newest)
{
	struct tslot *r = NULL;

	for (uint32_t i = 0; i < t->nslots; i++) {
		struct tslot *s = &t->slots[i];

		if (s->hb != NULL && (r == NULL || (newest ? s->copy_seq > r->copy_seq
							    : s->copy_seq < r->copy_seq)))
			r = s;
	}
	return r;
}

/* The released slot with the oldest release, or NULL. */
static struct tslot *oldest_released(struct pp_transfer *t)
{
	struct tslot *r = NULL;

	for (uint32_t i = 0; i < t->nslots; i++)
		if (t->slots[i].state == TSLOT_RELEASED &&
		    (r == NULL || t->slots[i].release_seq < r->release_seq))
			r = &t->slots[i];
	return r;
}

/*
 * The release whose completion is asked for s's: of the releases on s's
 * stream from s's to proof_span - 1 after it, the newest (s's own where
 * none came after it there); its completion proves every earlier one there.
 */
static struct tslot *proof_of(struct pp_transfer *t, const struct tslot *s)
{
	struct tslot *p = NULL;

	for (uint32_t i = 0; i < t->nslots; i++) {
		struct tslot *x = &t->slots[i];

		if (x->state == TSLOT_RELEASED && x->release_stream == s->release_stream &&
		    x->release_seq >= s->release_seq &&
		    x->release_seq - s->release_seq < t->proof_span &&
		    (p == NULL || x->release_seq > p->release_seq))
			p = x;
	}
	return p;
}

/*
 * Frees the released slots that p's complete release proves complete: its
 * own and every earlier one on its stream, newest first (so that the first
 * freed proves the copies of the others sound, where a device is asked).
 */
static int free_proven(struct pp_transfer *t, struct tslot *p)
{
	struct pp_stream *stream = p->release_stream;
	uint64_t seq = p->release_seq;
	int ret;

	for (;;) {
		struct tslot *s = NULL;

		for (uint32_t i = 0; i < t->nslots; i++) {
			struct tslot *x = &t->slots[i];

			if (x->state == TSLOT_RELEASED && x->release_stream == stream &&
			    x->release_seq <= seq && (s == NULL || x->release_seq > s->release_seq))
				s = x;
		}
		if (s == NULL)
			return 0;
		if ((ret = free_slot(t, s)) < 0)
			return ret;
	}
}

/*
 * Frees the released slots that prefetch() can use now, oldest release
 * first, asking the device one query a span of releases (that of its
 * newest, proof_of()), and none more where it is not complete yet (no
 * later release is then asked: compute runs in order).  Where the last
 * next() had to wait for a release and a copy is queued, nothing is asked:
 * compute is behind, and would say no.  A host batch goes back to the
 * loader once an ordering proves its copy complete (free_slot), without a
 * query of its own; only where the loader runs short are the copies'
 * events asked (host_short()).  With nothing queued and no slot free,
 * next() waits for a span instead.  Never blocks.  Returns 0 or the error
 * of a failed copy.
 */
static int reclaim(struct pp_transfer *t)
{
	bool waited = t->slot_waited;
	struct tslot *s, *p;
	int ret = 0;

	t->slot_waited = false;
	if (t->loader_done || (t->qlen == 0 && count_free(t) == 0) || (waited && t->qlen > 0))
		return 0;
	while (count_free(t) < t->depth - PP_MIN(t->qlen, t->depth) &&
	       (s = oldest_released(t)) != NULL &&
	       (ret = pp_event_query((p = proof_of(t, s))->released)) == 1)
		if ((ret = free_proven(t, p)) < 0)
			return ret;
	return ret < 0 ? ret : 0;
}

/*
 * The loader has no batch ready: where the stage holds half its ring or
 * more (host batches whose copies are not known complete), its workers may
 * be short of slots, and the oldest copy's event is asked (one query: the
 * loader fills its ring in order, so the oldest batch's slot is the one it
 * needs first).  Returns 1 when it went back (worth asking the loader
 * again), 0, or the error of a failed copy.
 */
static int host_short(struct pp_transfer *t)
{
	struct tslot *s = host_holder(t, false);
	uint32_t held = 0;
	int ret;

	for (uint32_t i = 0; i < t->nslots; i++)
		held += t->slots[i].hb != NULL;
	if (s == NULL || held * 2 < t->ring_slots)
		return 0;
	if ((ret = pp_event_query(s->b.ready)) <= 0)
		return ret;
	return (ret = copies_complete(t, s->copy_seq, true)) < 0 ? ret : 1;
}

/*
 * Ends every copy not handed out: waits for the copy stream, gives every
 * host batch back and returns the queued slots to FREE.  Returns the first
 * error of the copy stream since the last drain (cleared), or 0.
 */
static int drain(struct pp_transfer *t)
{
	int ret = pp_stream_synchronize(t->copy), r;

	for (uint32_t i = 0; i < t->nslots; i++) {
		struct tslot *s = &t->slots[i];

		r = give_back_host(t, s);
		if (ret == 0)
			ret = r;
		if (s->state == TSLOT_COPYING) {
			s->state = TSLOT_FREE;
			s->timed = s->marked = false;
		}
	}
	t->qlen = 0;
	t->copies_done = t->copies_checked = t->copies;
	t->spare_fresh = false;
	t->calls.n = 0;
	return ret;
}

/*
 * Describes host batch hb as slot s's device batch, used where it lies (a
 * host device): its place in the epoch, its samples, labels and ids in the
 * loader's slot, ready after s->done.  A copy points it at its device copy.
 */
static void describe_batch(struct pp_transfer *t, struct tslot *s, const struct pp_batch *hb)
{
	s->b = (struct pp_device_batch){
		.epoch = hb->epoch,
		.index = hb->index,
		.size = hb->size,
		.padding = hb->padding,
		.dtype = hb->dtype,
		.sample_bytes = hb->sample_bytes,
		.samples = hb->samples,
		.labels = hb->labels,
		.host_labels = hb->labels,
		.host_ids = hb->ids,
		.ready = s->done,
		.slot = (uint32_t)(s - t->slots),
		.nfields = hb->nfields,
	};
	memcpy(s->b.fields, hb->fields, sizeof(hb->fields));
}

/* Whether the host batch's fields lie at the device slot's offsets, so that one copy moves them all. */
static bool one_copy(const struct pp_transfer *t, const struct pp_batch *hb)
{
	if (hb->size != t->batch_size)
		return false;
	for (uint32_t f = 1; f < t->layout->nfields; f++)
		if ((const char *)hb->fields[f] - (const char *)hb->fields[0] !=
		    (ptrdiff_t)t->field_off[f])
			return false;
	return true;
}

/*
 * Issues the copy of host batch hb into the free slot s and queues it: one
 * copy of every field together where the loader's slot holds them at the
 * device slot's offsets (every full batch), else one each.
 */
static int issue(struct pp_transfer *t, struct tslot *s, struct pp_batch *hb)
{
	uint32_t nf = t->layout->nfields;
	size_t nbytes = 0, lbytes = 0;
	uint64_t t0, t1;
	bool one;
	int ret;

	s->hb = hb;
	if (hb->size > t->batch_size || hb->sample_bytes != t->sample_bytes) {
		return pp_error(-EOVERFLOW, "transfer: batch %llu of epoch %llu (%u samples of %zu "
				"bytes) does not fit a device slot (%u samples of %zu bytes)",
				(unsigned long long)hb->index, (unsigned long long)hb->epoch,
				hb->size, hb->sample_bytes, t->batch_size, t->sample_bytes);
	}
	for (uint32_t f = 0; f < nf; f++)
		nbytes += (size_t)hb->size * t->field_bytes[f];
	if (t->labels_field >= 0) {
		lbytes = (size_t)hb->size * sizeof(int32_t);
		memcpy(s->host_labels, hb->fields[t->labels_field], lbytes);
	}
	memcpy(s->host_ids, hb->ids, (size_t)hb->size * sizeof(uint64_t));
	s->timed = t->copies % t->time_every == 0;
	s->copy_seq = ++t->copies;
	s->marked = false;
	if (s->timed && t->qlen == 0 && t->spare_fresh) {
		/* Next to be handed out: the mark recorded while nothing was queued is its own. */
		struct pp_event *e = s->t_mark;

		s->t_mark = t->spare_mark;
		t->spare_mark = e;
		t->spare_fresh = false;
		s->marked = true;
		s->mark_stream = t->spare_stream;
	}
	describe_batch(t, s, hb);
	for (uint32_t f = 0; f < nf; f++)
		s->b.fields[f] = (char *)s->mem + t->field_off[f];
	s->b.samples = s->mem;
	s->b.labels = t->labels_field >= 0 ? s->b.fields[t->labels_field] : NULL;
	s->b.host_labels = lbytes ? s->host_labels : NULL;
	s->b.host_ids = s->host_ids;
	s->b.ready = s->timed ? s->t_done : s->done;
	if (s->timed && (ret = pp_event_record(s->t_start, t->copy)) < 0)
		return ret;
	one = nf == 1 || one_copy(t, hb);
	t0 = pp_now_ns();
	if (one) {
		ret = pp_memcpy_async(s->mem, hb->fields[0], t->field_off[nf - 1] +
				      (size_t)hb->size * t->field_bytes[nf - 1], PP_COPY_H2D, t->copy);
	} else {
		ret = 0;
		for (uint32_t f = 0; f < nf && ret == 0; f++)
			ret = pp_memcpy_async(s->b.fields[f], hb->fields[f],
					      (size_t)hb->size * t->field_bytes[f], PP_COPY_H2D,
					      t->copy);
	}
	t1 = pp_now_ns();
	pp_transfer_note_call(t, t0, t1);
	t->stats.host_blocked_ns += t1 - t0;
	if (ret < 0)
		return ret;
	if ((ret = pp_event_record(s->b.ready, t->copy)) < 0)
		return ret;
	t->stats.bytes += nbytes;
	s->state = TSLOT_COPYING;
	t->queue[(t->qhead + t->qlen) % t->nslots] = (uint32_t)(s - t->slots);
	t->qlen++;
	return 0;
}

/*
 * pp_loader_next(), or with 'wait' false pp_loader_try_next(): the loader's
 * time (with 0 workers it fills the batch there) counts as waiting for data,
 * in the stage's wait_ns and in this call's.
 */
static int loader_take(struct pp_transfer *t, bool wait, struct pp_batch **hb_p)
{
	uint64_t t0 = pp_now_ns(), dt;
	int ret = wait ? pp_loader_next(t->loader, hb_p) : pp_loader_try_next(t->loader, hb_p);

	dt = pp_now_ns() - t0;
	t->stats.wait_ns += dt;
	t->wait_in_call += dt;
	return ret;
}

/* Issues copies of the batches the loader has ready, up to depth ahead; never blocks. */
static int prefetch(struct pp_transfer *t)
{
	struct pp_batch *hb;
	struct tslot *s;
	int ret;

	while (t->qlen < t->depth && !t->loader_done && (s = find_free(t)) != NULL) {
		ret = loader_take(t, false, &hb);
		if (ret == -EAGAIN || ret == -ENOBUFS) {
			/* Its ring may be held by copies complete: given back, it is asked again. */
			if ((ret = host_short(t)) <= 0)
				return ret;
			ret = loader_take(t, false, &hb);
			if (ret == -EAGAIN || ret == -ENOBUFS)
				return 0;
		}
		if (ret < 0)
			return ret;
		if (ret == 0) {
			t->loader_done = true;
			return 0;
		}
		if ((ret = issue(t, s, hb)) < 0)
			return ret;
	}
	return 0;
}

/*
 * Nothing is in flight: waits for a free slot (the trainer's compute) and
 * for the loader's next batch, and issues its copy.  Returns 1, 0 at the end
 * of the epoch, or -errno.
 */
static int fetch_blocking(struct pp_transfer *t)
{
	struct pp_batch *hb;
	struct tslot *s, *r, *p;
	uint64_t t0, dt;
	int ret;

	while ((s = find_free(t)) == NULL) {
		/* The oldest release completes first: compute runs in order. */
		r = oldest_released(t);

		if (r == NULL)
			return pp_error(-ENOBUFS, "transfer: all %u device slots are held by the "
					"trainer; release a batch before asking for the next",
					t->nslots);
		p = proof_of(t, r);
		t->slot_waited = true;
		t0 = pp_now_ns();
		ret = pp_event_synchronize(p->released);
		dt = pp_now_ns() - t0;
		t->stats.slot_wait_ns += dt;
		t->wait_in_call += dt;
		if (ret < 0 || (ret = free_proven(t, p)) < 0)
			return ret;
	}
	ret = loader_take(t, false, &hb);
	if (ret == -EAGAIN || ret == -ENOBUFS) {
		/*
		 * Before waiting for the loader, its ring must not be held by
		 * copies the trainer already has: once the newest is complete,
		 * all are.
		 */
		if ((r = host_holder(t, true)) != NULL &&
		    ((ret = pp_event_synchronize(r->b.ready)) < 0 ||
		     (ret = copies_complete(t, r->copy_seq, true)) < 0))
			return ret;
		ret = loader_take(t, true, &hb);
	}
	if (ret <= 0) {
		if (ret == 0)
			t->loader_done = true;
		return ret;
	}
	ret = issue(t, s, hb);
	return ret < 0 ? ret : 1;
}

/* The host-is-device path: the loader's batch, in place. */
static int next_in_place(struct pp_transfer *t, struct pp_device_batch **b_p)
{
	struct tslot *s = find_free(t);
	struct pp_batch *hb;
	int ret;

	if (s == NULL)
		return pp_error(-ENOBUFS, "transfer: all %u slots are held by the trainer; release a "
				"batch before asking for the next", t->nslots);
	ret = loader_take(t, true, &hb);
	if (ret <= 0) {
		if (ret == 0)
			*b_p = NULL;
		return ret;
	}
	s->hb = hb;
	s->state = TSLOT_HELD;
	describe_batch(t, s, hb);
	t->stats.batches++;
	t->handed++;
	*b_p = &s->b;
	return 1;
}

/* After an error of a copy or of the loader: nothing stays in flight. */
static int fail(struct pp_transfer *t, int ret)
{
	char msg[512];

	snprintf(msg, sizeof(msg), "%s", pp_last_error());
	drain(t);
	return pp_error_set(ret, msg);
}

/* Hands out the oldest copy: compute waits for it on the device, not the host. */
static int hand_out(struct pp_transfer *t, struct pp_stream *compute, struct pp_device_batch **b_p)
{
	struct tslot *s = &t->slots[t->queue[t->qhead]];
	int ret;

	if (s->timed) {
		s->want_ns = pp_now_ns();
		s->want_stream = compute;
		if ((ret = pp_event_record(s->t_wanted, compute)) < 0)
			return ret;
		s->calls = t->calls;
		s->counting = true;
	}
	if ((ret = pp_stream_wait_event(compute, s->b.ready)) < 0)
		return ret;
	s->wait_stream = compute;
	t->calls.n = 0;
	t->spare_fresh = false;
	t->qhead = (t->qhead + 1) % t->nslots;
	t->qlen--;
	s->state = TSLOT_HELD;
	t->stats.batches++;
	t->handed++;
	*b_p = &s->b;
	return 1;
}

static int next_copied(struct pp_transfer *t, struct pp_stream *compute,
		       struct pp_device_batch **b_p)
{
	int ret;

	if ((ret = reclaim(t)) < 0 || (ret = prefetch(t)) < 0)
		return fail(t, ret);
	if (t->qlen == 0) {
		if (!t->loader_done && (ret = fetch_blocking(t)) < 0)
			return fail(t, ret);
		if (t->qlen == 0) {
			*b_p = NULL;
			return 0;
		}
		if ((ret = prefetch(t)) < 0)
			return fail(t, ret);
	}
	if ((ret = hand_out(t, compute, b_p)) < 0)
		return fail(t, ret);
	return 1;
}

PP_API int pp_transfer_next(struct pp_transfer *t, struct pp_stream *compute,
			    struct pp_device_batch **b_p)
{
	uint64_t t0 = pp_now_ns();
	int ret;

	if (!t->epoch_begun)
		return pp_error(-EINVAL, "transfer: no epoch begun (call pp_transfer_begin_epoch first)");
	if (compute == NULL || pp_stream_device(compute) != t->dev)
		return pp_error(-EINVAL, "transfer: the compute stream is not a stream of device %s",
				pp_device_get_props(t->dev)->name);
	ret = t->in_place ? next_in_place(t, b_p) : next_copied(t, compute, b_p);
	pp_transfer_count_call(t, t0);
	return ret;
}

PP_API int pp_transfer_release(struct pp_transfer *t, struct pp_device_batch *b,
			       struct pp_stream *compute)
{
	uint64_t t0 = pp_now_ns();
	struct tslot *s, *next;
	int ret;

	if (b == NULL || b->slot >= t->nslots || b != &t->slots[b->slot].b ||
	    t->slots[b->slot].state != TSLOT_HELD)
		return pp_error(-EINVAL, "transfer: release of a batch that is not held");
	s = &t->slots[b->slot];
	/* Checked on every device, as pp_transfer_next() checks it (cpu took any stream). */
	if (compute == NULL || pp_stream_device(compute) != t->dev)
		return pp_error(-EINVAL, "transfer: the compute stream is not a stream of device %s",
				pp_device_get_props(t->dev)->name);
	if (t->in_place) {
		ret = give_back_host(t, s);
		s->state = TSLOT_FREE;
		return ret;
	}
	if ((ret = pp_event_record(s->released, compute)) < 0)
		return ret;
	s->state = TSLOT_RELEASED;
	s->release_seq = ++t->releases;
	s->release_stream = compute;
	/* Where compute's work before the next hand-out ends, when that batch is timed. */
	next = t->qlen > 0 ? &t->slots[t->queue[t->qhead]] : NULL;
	if (next != NULL && next->timed) {
		if ((ret = pp_event_record(next->t_mark, compute)) < 0)
			return ret;
		next->marked = true;
		next->mark_stream = compute;
	} else if (next == NULL && t->copies % t->time_every == 0) {
		if ((ret = pp_event_record(t->spare_mark, compute)) < 0)
			return ret;
		t->spare_fresh = true;
		t->spare_stream = compute;
	}
	pp_transfer_count_call(t, t0);
	return 0;
}

/* Drops what is in flight and starts the loader at 'pos', or at the start of 'epoch' when pos is NULL. */
/* How a restart places the loader. */
enum restart_how { AT_START, AT_BATCH, AT_SAMPLES };

static int restart(struct pp_transfer *t, uint64_t epoch, const struct pp_loader_position *pos,
		   enum restart_how how)
{
	struct pp_loader_position lp;
	int ret = t->in_place ? 0 : drain(t);

	if (ret < 0)
		return ret;
	t->loader_done = false;
	ret = how == AT_BATCH   ? pp_loader_resume(t->loader, pos)
	    : how == AT_SAMPLES ? pp_loader_resume_samples(t->loader, pos)
				: pp_loader_begin_epoch(t->loader, epoch);
	/* nothing is handed out yet: the loader stands where the trainer does */
	if (ret < 0 || (ret = pp_loader_get_position(t->loader, &lp)) < 0)
		return ret;
	t->epoch_begun = true;
	t->epoch = epoch;
	t->handed = lp.batch;
	return 0;
}

PP_API int pp_transfer_begin_epoch(struct pp_transfer *t, uint64_t epoch)
{
	return restart(t, epoch, NULL, AT_START);
}

PP_API int pp_transfer_resume(struct pp_transfer *t, const struct pp_loader_position *pos)
{
	if (pos == NULL)
		return pp_error(-EINVAL, "transfer: resume needs a position");
	return restart(t, pos->epoch, pos, AT_BATCH);
}

PP_API int pp_transfer_resume_samples(struct pp_transfer *t, const struct pp_loader_position *pos)
{
	if (pos == NULL)
		return pp_error(-EINVAL, "transfer: resume needs a position");
	return restart(t, pos->epoch, pos, AT_SAMPLES);
}

PP_API int pp_transfer_get_position(struct pp_transfer *t, struct pp_loader_position *pos_p)
{
	struct pp_loader_position lp;
	int ret;

	if (t == NULL || pos_p == NULL)
		return pp_error(-EINVAL, "pp_transfer_get_position: t and pos_p must not be NULL");
	if (!t->epoch_begun)
		return pp_error(-EINVAL, "transfer: no epoch begun, so no position");
	if ((ret = pp_loader_get_position(t->loader, &lp)) < 0)
		return ret;
	/*
	 * The loader stands lp.batch batches in, at least as far as the trainer
	 * (the copies ahead), and says what lp.batch batches of all ranks take:
	 * a global batch is lp.samples / lp.batch.  Where it stands at 0, so
	 * does the trainer.
	 */
	*pos_p = (struct pp_loader_position){
		.epoch = t->epoch, .batch = t->handed, .plan_key = lp.plan_key,
		.samples = lp.batch > 0 ? lp.samples / lp.batch * t->handed : 0,
		.order_key = lp.order_key };
	return 0;
}

PP_API void pp_transfer_destroy(struct pp_transfer *t)
{
	if (t == NULL)
		return;
	if (t->copy != NULL) {
		drain(t);
		pp_device_synchronize(t->dev);
	}
	/* slots is NULL where create failed to allocate it */
	for (uint32_t i = 0; t->slots != NULL && i < t->nslots; i++) {
		struct tslot *s = &t->slots[i];

		give_back_host(t, s);
		pp_event_destroy(s->t_mark);
		pp_event_destroy(s->t_wanted);
		pp_event_destroy(s->t_done);
		pp_event_destroy(s->t_start);
		pp_event_destroy(s->released);
		pp_event_destroy(s->done);
		pp_device_free(t->dev, s->mem);
		free(s->host_ids);
		free(s->host_labels);
	}
	pp_event_destroy(t->spare_mark);
	pp_stream_destroy(t->copy);
	free(t->queue);
	free(t->slots);
	free(t);
}

/* Allocates a slot's events, host arrays and device memory (in place, one event only). */
static int slot_init(struct pp_transfer *t, struct tslot *s)
{
	int ret;

	/* In place, 'done' is never recorded: the batch's 'ready', complete from the start. */
	if ((ret = pp_event_create_flags(t->dev, PP_EVENT_NO_TIMING, &s->done)) < 0 || t->in_place)
		return ret;
	if ((ret = pp_event_create_flags(t->dev, PP_EVENT_NO_TIMING, &s->released)) < 0 ||
	    (ret = pp_event_create(t->dev, &s->t_start)) < 0 ||
	    (ret = pp_event_create(t->dev, &s->t_done)) < 0 ||
	    (ret = pp_event_create(t->dev, &s->t_wanted)) < 0 ||
	    (ret = pp_event_create(t->dev, &s->t_mark)) < 0)
		return ret;
	s->host_labels = pp_calloc(t->batch_size, sizeof(int32_t));
	s->host_ids = pp_calloc(t->batch_size, sizeof(uint64_t));
	if (s->host_labels == NULL || s->host_ids == NULL)
		return pp_error(-ENOMEM, "transfer: out of memory for a slot's labels and ids "
				"(%u samples)", t->batch_size);
	return pp_device_alloc(t->dev, t->slot_bytes, &s->mem);
}

PP_API int pp_transfer_create(const struct pp_transfer_config *cfg, struct pp_transfer **t_p)
{
	struct pp_loader_stats ls;
	struct pp_transfer *t;
	size_t sbytes;
	int ret;

	if (t_p == NULL)
		return pp_error(-EINVAL, "pp_transfer_create: t_p must not be NULL");
	if (cfg == NULL || cfg->loader == NULL || cfg->device == NULL)
		return pp_error(-EINVAL, "transfer: a loader and a device are needed");
	if (cfg->depth > 64)
		return pp_error(-EINVAL, "transfer: depth %u is out of range (0..64)", cfg->depth);
	if (cfg->slots == 1 || cfg->slots > 256)
		return pp_error(-EINVAL, "transfer: %u device slots is out of range (0: depth + 3, "
				"or 2..256)", cfg->slots);
	t = pp_calloc(1, sizeof(*t));
	if (t == NULL)
		return pp_error(-ENOMEM, "transfer: out of memory");
	t->loader = cfg->loader;
	t->dev = cfg->device;
	t->in_place = pp_device_get_props(t->dev)->host_is_device;
	t->layout = pp_loader_layout(t->loader);
	t->labels_field = pp_layout_labels(t->layout);
	t->depth = cfg->depth ? cfg->depth : 2;
	t->nslots = cfg->slots ? cfg->slots : t->depth + 3;
	t->proof_span = t->nslots > t->depth + 1 ? PP_MIN(t->nslots - t->depth - 1, 4u) : 1;
	t->time_every = cfg->time_every ? cfg->time_every : TIME_EVERY_DEFAULT;
	t->stats.device_kind = pp_device_get_props(t->dev)->kind;
	pp_loader_get_layout(t->loader, &t->batch_size, &t->sample_bytes);
	if ((ret = pp_loader_get_stats(t->loader, &ls)) < 0)
		goto err_destroy;
	t->ring_slots = ls.slots;
	if (!pp_mul_size(t->batch_size, t->sample_bytes, &sbytes)) {
		ret = pp_error(-EOVERFLOW, "transfer: a batch of %u samples of %zu bytes is too large",
			       t->batch_size, t->sample_bytes);
		goto err_destroy;
	}
	/* The loader's slots hold the fields at these offsets too (pinpipe/loader.h). */
	for (uint32_t f = 0; f < t->layout->nfields; f++) {
		size_t span;
		t->field_bytes[f] = pp_field_bytes(&t->layout->fields[f]);
		t->field_off[f] = t->slot_bytes;
		if (!pp_mul_size(t->batch_size, t->field_bytes[f], &span) ||
		    !pp_add_size(t->slot_bytes, f + 1 < t->layout->nfields ? (span + 63) / 64 * 64
							: span, &t->slot_bytes)) {
			ret = pp_error(-EOVERFLOW, "transfer: a batch of %u samples is too large",
				       t->batch_size);
			goto err_destroy;
		}
	}
	t->slots = pp_calloc(t->nslots, sizeof(*t->slots));
	t->queue = pp_calloc(t->nslots, sizeof(*t->queue));
	if (t->slots == NULL || t->queue == NULL) {
		ret = pp_error(-ENOMEM, "transfer: out of memory for %u slots", t->nslots);
		goto err_destroy;
	}
	if (!t->in_place && ((ret = pp_stream_create(t->dev, &t->copy)) < 0 ||
			     (ret = pp_event_create(t->dev, &t->spare_mark)) < 0))
		goto err_destroy;
	for (uint32_t i = 0; i < t->nslots; i++)
		if ((ret = slot_init(t, &t->slots[i])) < 0)
			goto err_destroy;
	*t_p = t;
	return 0;

err_destroy:
	pp_transfer_destroy(t);
	return ret;
}
