/*
 * transfer/transfer.c: the transfer stage (pinpipe/transfer.h).  It is the
 * loader's consumer, called from the trainer's thread: next() gives back the
 * host batches whose copies have completed, frees the device slots whose
 * release events have completed, issues copies of ready batches on its own
 * copy stream up to 'depth' ahead (pp_loader_try_next, so it never waits for
 * a batch while a copy is in flight), and hands out the oldest copy after
 * making the compute stream wait on its event.  Per batch, four events:
 * start and done on the copy stream around the copies, wanted on the compute
 * stream when it is handed out, released on the compute stream after its
 * last use.  The copy's exposed time is how long compute waited for it
 * (done - wanted, clamped at 0) plus the host's time blocked in the copy
 * call, at most the copy's own time.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "common/internal.h"
#include "pinpipe/transfer.h"
#include "transfer/device_impl.h"

/* Device slot states. */
enum tslot_state {
	TSLOT_FREE = 0,     /* unused; its memory may be written */
	TSLOT_COPYING = 1,  /* copy issued, in the queue, not handed out */
	TSLOT_HELD = 2,     /* handed out to the trainer */
	TSLOT_RELEASED = 3, /* given back; free once 'released' completes */
};

struct tslot {
	enum tslot_state state;
	void *mem;                  /* device memory: samples, then labels at labels_off */
	int32_t *host_labels;       /* [batch_size], host copies handed out with the batch */
	uint64_t *host_ids;         /* [batch_size] */
	struct pp_event *start;     /* copy stream, before the copies */
	struct pp_event *done;      /* copy stream, after the copies */
	struct pp_event *wanted;    /* compute stream, when handed out */
	struct pp_event *released;  /* compute stream, after the trainer's last use */
	struct pp_batch *hb;        /* the loader's batch until its copy is known complete, or NULL */
	bool timing;                /* handed out, its times not yet counted */
	uint64_t release_seq;       /* order of its release among all releases, from 1 */
	uint64_t blocked_ns;        /* host time inside pp_memcpy_async for this batch, ns */
	struct pp_device_batch b;   /* what the trainer sees */
};

struct pp_transfer {
	struct pp_loader *loader;
	struct pp_device *dev;
	bool in_place;              /* host is device: no copies, batches used where they lie */
	bool labels;                /* the source has labels */
	uint32_t depth;             /* copies in flight ahead of the trainer, at most */
	uint32_t nslots;            /* device slots */
	struct tslot *slots;        /* [nslots] */
	struct pp_stream *copy;     /* the copy stream */
	uint32_t *queue;            /* [nslots] ring of slots COPYING, oldest first */
	uint32_t qhead;             /* index in queue of the oldest */
	uint32_t qlen;              /* slots in the queue */
	uint32_t batch_size;        /* samples of the largest batch */
	size_t sample_bytes;        /* bytes of one sample as the loader hands it out */
	size_t labels_off;          /* offset of the labels in a slot's memory, bytes */
	size_t slot_bytes;          /* bytes of a slot's memory */
	bool epoch_begun;           /* begin_epoch succeeded at least once */
	bool loader_done;           /* the loader said end of epoch */
	uint64_t releases;          /* releases so far */
	struct pp_transfer_stats stats; /* counters; hidden_share is filled at get_stats */
};

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

/* Counts the copy times of a handed-out slot whose events are all complete. */
static void count_times(struct pp_transfer *t, struct tslot *s)
{
	uint64_t copy_ns, late_ns, exposed;

	if (!s->timing)
		return;
	s->timing = false;
	if (pp_event_elapsed_ns(s->start, s->done, &copy_ns) < 0 ||
	    pp_event_elapsed_ns(s->wanted, s->done, &late_ns) < 0)
		return;
	exposed = PP_MIN(copy_ns, late_ns + s->blocked_ns);
	t->stats.copies_timed++;
	t->stats.copy_ns += copy_ns;
	t->stats.exposed_ns += exposed;
}

/*
 * Frees a released slot (its copy is complete, since compute waited for it
 * before the release): gives its host batch back if that is still held,
 * counts its times and poisons its memory (on a sim with poisoning).
 */
static int free_slot(struct pp_transfer *t, struct tslot *s)
{
	int ret = 0;

	if (s->hb != NULL && (ret = pp_event_synchronize(s->done)) == 0)
		ret = give_back_host(t, s);
	count_times(t, s);
	pp_device_release(t->dev, s->mem, t->slot_bytes);
	s->state = TSLOT_FREE;
	return ret;
}

/*
 * Gives back the host batches of completed copies and frees the slots
 * whose release has completed; never blocks.  Returns 0 or the error of a
 * failed copy.
 */
static int reclaim(struct pp_transfer *t)
{
	int ret;

	for (uint32_t i = 0; i < t->nslots; i++) {
		struct tslot *s = &t->slots[i];

		if (s->hb != NULL && pp_event_query(s->done) == 1) {
			ret = pp_event_synchronize(s->done);
			if (ret < 0)
				return ret;
			if ((ret = give_back_host(t, s)) < 0)
				return ret;
		}
		if (s->state == TSLOT_RELEASED && pp_event_query(s->released) == 1 &&
		    (ret = free_slot(t, s)) < 0)
			return ret;
	}
	return 0;
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
		if (s->state == TSLOT_COPYING)
			s->state = TSLOT_FREE;
	}
	t->qlen = 0;
	return ret;
}

static struct tslot *find_free(struct pp_transfer *t)
{
	for (uint32_t i = 0; i < t->nslots; i++)
		if (t->slots[i].state == TSLOT_FREE)
			return &t->slots[i];
	return NULL;
}

/* Issues the copies of host batch hb into the free slot s and queues it. */
static int issue(struct pp_transfer *t, struct tslot *s, struct pp_batch *hb)
{
	size_t nbytes, lbytes = 0;
	uint64_t t0;
	int ret;

	s->hb = hb;
	if (hb->size > t->batch_size || hb->sample_bytes != t->sample_bytes) {
		return pp_error(-EOVERFLOW, "transfer: batch %llu of epoch %llu (%u samples of %zu "
				"bytes) does not fit a device slot (%u samples of %zu bytes)",
				(unsigned long long)hb->index, (unsigned long long)hb->epoch,
				hb->size, hb->sample_bytes, t->batch_size, t->sample_bytes);
	}
	nbytes = (size_t)hb->size * hb->sample_bytes;
	if (t->labels && hb->labels != NULL) {
		lbytes = (size_t)hb->size * sizeof(int32_t);
		memcpy(s->host_labels, hb->labels, lbytes);
	}
	memcpy(s->host_ids, hb->ids, (size_t)hb->size * sizeof(uint64_t));
	s->b = (struct pp_device_batch){
		.epoch = hb->epoch,
		.index = hb->index,
		.size = hb->size,
		.padding = hb->padding,
		.dtype = hb->dtype,
		.sample_bytes = hb->sample_bytes,
		.samples = s->mem,
		.labels = lbytes ? (int32_t *)((char *)s->mem + t->labels_off) : NULL,
		.host_labels = lbytes ? s->host_labels : NULL,
		.host_ids = s->host_ids,
		.ready = s->done,
		.slot = (uint32_t)(s - t->slots),
	};
	if ((ret = pp_event_record(s->start, t->copy)) < 0)
		return ret;
	t0 = pp_now_ns();
	ret = pp_memcpy_async(s->b.samples, hb->samples, nbytes, PP_COPY_H2D, t->copy);
	if (ret == 0 && lbytes)
		ret = pp_memcpy_async(s->b.labels, hb->labels, lbytes, PP_COPY_H2D, t->copy);
	s->blocked_ns = pp_now_ns() - t0;
	t->stats.host_blocked_ns += s->blocked_ns;
	if (ret < 0)
		return ret;
	if ((ret = pp_event_record(s->done, t->copy)) < 0)
		return ret;
	t->stats.bytes += nbytes + lbytes;
	s->state = TSLOT_COPYING;
	t->queue[(t->qhead + t->qlen) % t->nslots] = (uint32_t)(s - t->slots);
	t->qlen++;
	return 0;
}

/* Issues copies of the batches the loader has ready, up to depth ahead; never blocks. */
static int prefetch(struct pp_transfer *t)
{
	struct pp_batch *hb;
	struct tslot *s;
	int ret;

	while (t->qlen < t->depth && !t->loader_done && (s = find_free(t)) != NULL) {
		ret = pp_loader_try_next(t->loader, &hb);
		if (ret == -EAGAIN || ret == -ENOBUFS)
			return 0;
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
	struct tslot *s;
	uint64_t t0;
	int ret;

	while ((s = find_free(t)) == NULL) {
		struct tslot *r = NULL;

		/* The oldest release completes first: compute runs in order. */
		for (uint32_t i = 0; i < t->nslots; i++)
			if (t->slots[i].state == TSLOT_RELEASED &&
			    (r == NULL || t->slots[i].release_seq < r->release_seq))
				r = &t->slots[i];
		if (r == NULL)
			return pp_error(-ENOBUFS, "transfer: all %u device slots are held by the "
					"trainer; release a batch before asking for the next",
					t->nslots);
		pp_event_synchronize(r->released);
		if ((ret = free_slot(t, r)) < 0)
			return ret;
	}
	/* The loader's ring must not be held by copies the trainer already has. */
	for (uint32_t i = 0; i < t->nslots; i++) {
		if (t->slots[i].hb != NULL) {
			if ((ret = pp_event_synchronize(t->slots[i].done)) < 0)
				return ret;
			if ((ret = give_back_host(t, &t->slots[i])) < 0)
				return ret;
		}
	}
	t0 = pp_now_ns();
	ret = pp_loader_next(t->loader, &hb);
	t->stats.wait_ns += pp_now_ns() - t0;
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
	uint64_t t0;
	int ret;

	if (s == NULL)
		return pp_error(-ENOBUFS, "transfer: all %u slots are held by the trainer; release a "
				"batch before asking for the next", t->nslots);
	t0 = pp_now_ns();
	ret = pp_loader_next(t->loader, &hb);
	t->stats.wait_ns += pp_now_ns() - t0;
	if (ret <= 0) {
		if (ret == 0)
			*b_p = NULL;
		return ret;
	}
	s->hb = hb;
	s->state = TSLOT_HELD;
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
	};
	t->stats.batches++;
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

PP_API int pp_transfer_next(struct pp_transfer *t, struct pp_stream *compute,
			    struct pp_device_batch **b_p)
{
	struct tslot *s;
	int ret;

	if (!t->epoch_begun)
		return pp_error(-EINVAL, "transfer: no epoch begun (call pp_transfer_begin_epoch first)");
	if (compute == NULL || compute->dev != t->dev)
		return pp_error(-EINVAL, "transfer: the compute stream is not a stream of device %s",
				t->dev->props.name);
	if (t->in_place)
		return next_in_place(t, b_p);
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
	s = &t->slots[t->queue[t->qhead]];
	/* A copy known complete is known good; one still running is checked by a later call. */
	if (pp_event_query(s->done) == 1 && (ret = pp_event_synchronize(s->done)) < 0)
		return fail(t, ret);
	if ((ret = pp_event_record(s->wanted, compute)) < 0 ||
	    (ret = pp_stream_wait_event(compute, s->done)) < 0)
		return fail(t, ret);
	t->qhead = (t->qhead + 1) % t->nslots;
	t->qlen--;
	s->state = TSLOT_HELD;
	s->timing = true;
	t->stats.batches++;
	*b_p = &s->b;
	return 1;
}

PP_API int pp_transfer_release(struct pp_transfer *t, struct pp_device_batch *b,
			       struct pp_stream *compute)
{
	struct tslot *s;
	int ret;

	if (b == NULL || b->slot >= t->nslots || b != &t->slots[b->slot].b ||
	    t->slots[b->slot].state != TSLOT_HELD)
		return pp_error(-EINVAL, "transfer: release of a batch that is not held");
	s = &t->slots[b->slot];
	if (t->in_place) {
		ret = give_back_host(t, s);
		s->state = TSLOT_FREE;
		return ret;
	}
	if (compute == NULL || compute->dev != t->dev)
		return pp_error(-EINVAL, "transfer: the compute stream is not a stream of device %s",
				t->dev->props.name);
	if ((ret = pp_event_record(s->released, compute)) < 0)
		return ret;
	s->state = TSLOT_RELEASED;
	s->release_seq = ++t->releases;
	return 0;
}

/* Drops what is in flight and starts the loader at 'pos', or at the start of 'epoch' when pos is NULL. */
static int restart(struct pp_transfer *t, uint64_t epoch, const struct pp_loader_position *pos)
{
	int ret = t->in_place ? 0 : drain(t);

	if (ret < 0)
		return ret;
	t->loader_done = false;
	ret = pos != NULL ? pp_loader_resume(t->loader, pos) : pp_loader_begin_epoch(t->loader, epoch);
	if (ret < 0)
		return ret;
	t->epoch_begun = true;
	return 0;
}

PP_API int pp_transfer_begin_epoch(struct pp_transfer *t, uint64_t epoch)
{
	return restart(t, epoch, NULL);
}

PP_API int pp_transfer_resume(struct pp_transfer *t, const struct pp_loader_position *pos)
{
	if (pos == NULL)
		return pp_error(-EINVAL, "transfer: resume needs a position");
	return restart(t, pos->epoch, pos);
}

PP_API int pp_transfer_get_stats(struct pp_transfer *t, struct pp_transfer_stats *stats_p)
{
	struct pp_transfer_stats st;

	for (uint32_t i = 0; i < t->nslots && !t->in_place; i++) {
		struct tslot *s = &t->slots[i];

		if (s->timing && pp_event_synchronize(s->wanted) == 0 &&
		    pp_event_synchronize(s->done) == 0)
			count_times(t, s);
	}
	st = t->stats;
	st.hidden_share = st.copy_ns > 0 ? 1.0 - (double)st.exposed_ns / (double)st.copy_ns : NAN;
	*stats_p = st;
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
		pp_event_destroy(s->released);
		pp_event_destroy(s->wanted);
		pp_event_destroy(s->done);
		pp_event_destroy(s->start);
		pp_device_free(t->dev, s->mem);
		free(s->host_ids);
		free(s->host_labels);
	}
	pp_stream_destroy(t->copy);
	free(t->queue);
	free(t->slots);
	free(t);
}

/* Allocates a slot's events, host arrays and (unless in place) device memory. */
static int slot_init(struct pp_transfer *t, struct tslot *s)
{
	int ret;

	if ((ret = pp_event_create(t->dev, &s->start)) < 0 ||
	    (ret = pp_event_create(t->dev, &s->done)) < 0 ||
	    (ret = pp_event_create(t->dev, &s->wanted)) < 0 ||
	    (ret = pp_event_create(t->dev, &s->released)) < 0)
		return ret;
	if (t->in_place)
		return 0;
	s->host_labels = pp_calloc(t->batch_size, sizeof(int32_t));
	s->host_ids = pp_calloc(t->batch_size, sizeof(uint64_t));
	if (s->host_labels == NULL || s->host_ids == NULL)
		return pp_error(-ENOMEM, "transfer: out of memory for a slot's labels and ids "
				"(%u samples)", t->batch_size);
	return pp_device_alloc(t->dev, t->slot_bytes, &s->mem);
}

PP_API int pp_transfer_create(const struct pp_transfer_config *cfg, struct pp_transfer **t_p)
{
	struct pp_transfer *t;
	size_t sbytes;
	int ret;

	if (cfg == NULL || cfg->loader == NULL || cfg->device == NULL)
		return pp_error(-EINVAL, "transfer: a loader and a device are needed");
	if (cfg->depth > 64)
		return pp_error(-EINVAL, "transfer: depth %u is out of range (0..64)", cfg->depth);
	if (cfg->slots == 1 || cfg->slots > 256)
		return pp_error(-EINVAL, "transfer: %u device slots is out of range (0: depth + 2, "
				"or 2..256)", cfg->slots);
	t = pp_calloc(1, sizeof(*t));
	if (t == NULL)
		return pp_error(-ENOMEM, "transfer: out of memory");
	t->loader = cfg->loader;
	t->dev = cfg->device;
	t->in_place = pp_device_get_props(t->dev)->host_is_device;
	t->labels = pp_loader_info(t->loader)->label_kind != PP_LABEL_NONE;
	t->depth = cfg->depth ? cfg->depth : 2;
	t->nslots = cfg->slots ? cfg->slots : t->depth + 2;
	t->stats.device_kind = pp_device_get_props(t->dev)->kind;
	pp_loader_get_layout(t->loader, &t->batch_size, &t->sample_bytes);
	if (!pp_mul_size(t->batch_size, t->sample_bytes, &sbytes)) {
		ret = pp_error(-EOVERFLOW, "transfer: a batch of %u samples of %zu bytes is too large",
			       t->batch_size, t->sample_bytes);
		goto err_destroy;
	}
	t->labels_off = (sbytes + PP_DEVICE_ALIGN - 1) / PP_DEVICE_ALIGN * PP_DEVICE_ALIGN;
	t->slot_bytes = t->labels_off + (t->labels ? (size_t)t->batch_size * sizeof(int32_t) : 0);
	t->slots = pp_calloc(t->nslots, sizeof(*t->slots));
	t->queue = pp_calloc(t->nslots, sizeof(*t->queue));
	if (t->slots == NULL || t->queue == NULL) {
		ret = pp_error(-ENOMEM, "transfer: out of memory for %u slots", t->nslots);
		goto err_destroy;
	}
	if ((ret = pp_stream_create(t->dev, &t->copy)) < 0)
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
