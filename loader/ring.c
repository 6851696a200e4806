/*
 * loader/ring.c: the ring of slots and in-order delivery: the slots' memory
 * (from the device's host allocator when there is one), the start of an
 * epoch or of a saved position, positions, the consumer's next, try_next and
 * release, and the statistics.  Batch b goes to slot b mod depth; the
 * consumer takes batch b only after b - 1, so the batches come out in plan
 * order whatever the number of workers.  With 0 workers the consumer fills
 * each batch itself when it asks for it.  A consumer that waits for a batch
 * polls for it first (spin_us), then sleeps on cond_ready.
 */
#include "config.h"

#include <errno.h>

#include "common/common_impl.h"
#include "loader/loader_impl.h"

/*
 * Allocates the ring within the budget, from the device's host allocator when
 * the configuration names a device, and points each slot's batch into it:
 * each field's array (pp_layout_field_span(): 64-byte aligned, back to back,
 * as pinpipe/loader.h promises the transfer stage), then the ids; each slot
 * 4096-aligned.
 */
int pp_loader_ring_bytes(struct pp_loader *l, size_t *bytes_p)
{
	const struct pp_layout *out = &l->out;
	size_t fields_bytes = 0;
	uint32_t b = l->batch_size;

	for (uint32_t f = 0; f < out->nfields; f++) {
		size_t bytes;
		if (!pp_mul_size(b, pp_field_bytes(&out->fields[f]), &bytes) ||
		    !pp_add_size(fields_bytes, pp_round_up(bytes, 64), &fields_bytes))
			return pp_error(-ENOMEM, "loader: a batch of %u samples of field '%s' (%zu "
					"bytes each) is too large", b, out->fields[f].name,
					pp_field_bytes(&out->fields[f]));
	}
	if (!pp_add_size(fields_bytes, (size_t)b * sizeof(uint64_t), &l->slot_bytes))
		return pp_error(-ENOMEM, "loader: a batch of %u samples is too large", b);
	l->slot_bytes = pp_round_up(l->slot_bytes, PP_LOADER_IO_ALIGN);
	if (!pp_mul_size(l->slot_bytes, l->depth, bytes_p))
		return pp_error(-ENOMEM, "loader: a ring of %u slots of %zu bytes is too large",
				l->depth, l->slot_bytes);
	return 0;
}

int pp_loader_ring_setup(struct pp_loader *l, const struct pp_loader_config *cfg)
{
	const struct pp_layout *out = &l->out;
	uint32_t b = l->batch_size;
	size_t ring_bytes;
	int ret;

	if ((ret = pp_loader_ring_bytes(l, &ring_bytes)) < 0)
		return ret;
	if ((ret = pp_loader_budget_add(l, cfg, ring_bytes, "the ring of slots")) < 0)
		return ret;
	if (cfg->device != NULL) {
		void *ring;
		bool pinned = false;
		if ((ret = pp_host_alloc(cfg->device, ring_bytes, cfg->pin_memory, &ring, &pinned)) < 0)
			return ret;
		l->device = cfg->device;
		l->ring = ring;
		l->stats.pinned = pinned;
	} else if (pp_posix_memalign((void **)&l->ring, PP_LOADER_IO_ALIGN, ring_bytes)) {
		l->ring = NULL;
		return pp_error(-ENOMEM, "loader: no memory for a ring of %zu bytes", ring_bytes);
	}
	l->slots = pp_calloc(l->depth, sizeof(struct pp_loader_slot));
	if (l->slots == NULL)
		return pp_error(-ENOMEM, "loader: no memory for %u slots", l->depth);
	for (uint32_t i = 0; i < l->depth; i++) {
		struct pp_batch *bt = &l->slots[i].batch;
		pthread_cond_init(&l->slots[i].freed, NULL);
		pthread_cond_init(&l->slots[i].helped, NULL);
		uint8_t *p = l->ring + (size_t)i * l->slot_bytes;
		bt->nfields = out->nfields;
		for (uint32_t f = 0; f < out->nfields; f++) {
			bt->fields[f] = p;
			p += pp_layout_field_span(out, f, b);
		}
		bt->ids = (uint64_t *)p;
		bt->samples = bt->fields[0];
		bt->labels = l->labels_field >= 0 ? bt->fields[l->labels_field] : NULL;
		bt->dtype = l->cv.out;
		bt->sample_bytes = l->cv.out_bytes;
		bt->slot = i;
	}
	return 0;
}

/* ------------------------------------------------------------------ epochs */

/* Ends the current epoch (workers drop their batches) and starts 'epoch' at batch 'start'. */
static int start_epoch(struct pp_loader *l, uint64_t epoch, uint64_t start, bool check_start)
{
	struct pp_plan_params *p = &l->params;
	int ret = 0;

	pthread_mutex_lock(&l->mu);
	if (l->err != 0) {
		ret = pp_error_set(l->err, l->errmsg);
		goto out_unlock;
	}
	l->cancel = true;
	pp_loader_wake_slots(l);
	pthread_cond_broadcast(&l->cond_window);
	while (l->busy > 0)
		pthread_cond_wait(&l->cond_idle, &l->mu);
	l->active = false;
	if (l->streaming)
		ret = pp_plan_make_stream(&l->plan, p, l->src.chunks, l->src.nchunks, epoch);
	else
		pp_plan_make_memory(&l->plan, p, l->src.info.count, epoch);
	if (ret == 0 && check_start && start > l->plan.batches)
		ret = pp_error(-EINVAL, "loader: position at batch %llu lies past the %llu batches "
			       "of epoch %llu", (unsigned long long)start,
			       (unsigned long long)l->plan.batches, (unsigned long long)epoch);
	if (ret < 0) {
		l->cancel = false;
		goto out_unlock;
	}
	for (uint32_t i = 0; i < l->depth; i++) {
		struct pp_loader_slot *sl = &l->slots[i];
		uint64_t e = start + (i + l->depth - start % l->depth) % l->depth;
		if (sl->state == PP_SLOT_READY)
			sl->state = PP_SLOT_FREE;
		sl->expect = e;
		/* batch numbers start again: no poll may take an earlier epoch's for its own */
		__atomic_store_n(&sl->published, 0, __ATOMIC_RELEASE);
	}
	for (uint32_t i = 0; i < l->nwindows; i++) {
		l->windows[i].seg = -1;
		l->windows[i].pending = 0;
		l->windows[i].next_chunk = 0;
		l->windows[i].chunks_done = 0;
	}
	l->seg_start = l->streaming && start * l->batch_size < l->plan.len
		       ? (int64_t)pp_plan_segment_of(&l->plan, start * l->batch_size) : 0;
	l->epoch_start = start;
	l->next_claim = start;
	l->next_deliver = start;
	l->active = true;
	l->cancel = false;
	pthread_cond_broadcast(&l->cond_work);
out_unlock:
	pthread_mutex_unlock(&l->mu);
	return ret;
}

PP_API int pp_loader_begin_epoch(struct pp_loader *l, uint64_t epoch)
{
	return start_epoch(l, epoch, 0, false);
}

PP_API int pp_loader_resume(struct pp_loader *l, const struct pp_loader_position *pos)
{
	if (l == NULL || pos == NULL)
		return pp_error(-EINVAL, "pp_loader_resume: loader and position must not be NULL");
	if (pos->plan_key != l->plan_key)
		return pp_error(-EINVAL, "loader: the position was saved by a loader with other "
				"settings (seed, shuffle, batch size, ranks, drop rules, window or "
				"source size differ)");
	return start_epoch(l, pos->epoch, pos->batch, true);
}

PP_API int pp_loader_resume_samples(struct pp_loader *l, const struct pp_loader_position *pos)
{
	uint64_t global;

	if (l == NULL || pos == NULL)
		return pp_error(-EINVAL, "pp_loader_resume_samples: loader and position must not "
				"be NULL");
	global = (uint64_t)l->batch_size * l->params.world_size;
	if (l->streaming)
		return pp_error(-EINVAL, "loader: streamed shards are dealt to the ranks by chunk: "
				"their order depends on the rank count, so a position resumes only "
				"with the same settings (pp_loader_resume)");
	if (pos->order_key == 0 || pos->order_key != l->order_key)
		return pp_error(-EINVAL, "loader: the position was saved by a loader of another "
				"order (seed, shuffle or source size differ, or it was streamed)");
	if (pos->samples % global != 0)
		return pp_error(-EINVAL, "loader: the position lies at sample %llu of epoch %llu's "
				"order, which is not a multiple of this loader's global batch of "
				"%u ranks x %u samples", (unsigned long long)pos->samples,
				(unsigned long long)pos->epoch, l->params.world_size, l->batch_size);
	return start_epoch(l, pos->epoch, pos->samples / global, true);
}

PP_API int pp_loader_get_position(struct pp_loader *l, struct pp_loader_position *pos_p)
{
	if (l == NULL || pos_p == NULL)
		return pp_error(-EINVAL, "pp_loader_get_position: loader and pos_p must not be NULL");
	pthread_mutex_lock(&l->mu);
	pos_p->epoch = l->plan.epoch;
	pos_p->batch = l->active ? l->next_deliver : 0;
	pos_p->plan_key = l->plan_key;
	pos_p->samples = pos_p->batch * l->batch_size * l->params.world_size;
	pos_p->order_key = l->order_key;
	pthread_mutex_unlock(&l->mu);
	return 0;
}

PP_API uint64_t pp_loader_batches_per_epoch(const struct pp_loader *l)
{
	struct pp_loader *m = (struct pp_loader *)l;
	uint64_t n;

	pthread_mutex_lock(&m->mu);
	n = l->plan.batches;
	pthread_mutex_unlock(&m->mu);
	return n;
}

/* ------------------------------------------------------------------ consumer */

/* A hint to the processor inside a polling loop. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/*
 * Polls, without the mutex, up to l->spin_ns for batch b to be published
 * in its slot or for a worker to fail (a hint only: the caller checks the
 * slot's state and the error under the mutex after).  A consumer asleep on
 * cond_ready costs the worker that fills its batch a wake-up for every
 * batch.
 */
static void spin_for(const struct pp_loader *l, const struct pp_loader_slot *sl, uint64_t b)
{
	uint64_t t0 = pp_now_ns();

	for (uint32_t i = 1;; i++) {
		if (__atomic_load_n(&sl->published, __ATOMIC_ACQUIRE) == b + 1 ||
		    __atomic_load_n(&l->failed, __ATOMIC_ACQUIRE))
			return;
		cpu_relax();
		if ((i & 63) == 0 && pp_now_ns() - t0 > l->spin_ns)
			return;
	}
}

/* pp_loader_next(), or with 'wait' false pp_loader_try_next(). */
static int next_batch(struct pp_loader *l, bool wait, struct pp_batch **batch_p)
{
	uint64_t b, t0 = pp_now_ns();
	struct pp_loader_slot *sl;
	int ret;

	if (batch_p == NULL)
		return pp_error(-EINVAL, "pp_loader_next: batch_p must not be NULL");
	pthread_mutex_lock(&l->mu);
	if (l->err != 0) {
		ret = pp_error_set(l->err, l->errmsg);
		goto out_unlock;
	}
	if (!l->active) {
		ret = pp_error(-EINVAL, "loader: no epoch begun (call pp_loader_begin_epoch first)");
		goto out_unlock;
	}
	b = l->next_deliver;
	if (b >= l->plan.batches) {
		*batch_p = NULL;
		ret = 0;
		goto out_unlock;
	}
	sl = &l->slots[b % l->depth];
	if (sl->state == PP_SLOT_HELD) {
		ret = pp_error(-ENOBUFS, "loader: all %u ring slots are held by the consumer; release "
			       "a batch before asking for batch %llu", l->depth,
			       (unsigned long long)b);
		goto out_unlock;
	}
	if (l->nworkers == 0) {
		sl->state = PP_SLOT_FILLING;
		sl->expect += l->depth;
		pthread_mutex_unlock(&l->mu);
		ret = pp_loader_batch_fill(l, &l->workers[0], b, sl);
		pthread_mutex_lock(&l->mu);
		pp_loader_work_collect(l, &l->workers[0]);
		if (ret < 0) {
			sl->state = PP_SLOT_FREE;
			pp_loader_error_record(l, ret);
			ret = pp_error_set(l->err, l->errmsg);
			goto out_unlock;
		}
	} else {
		if (!wait && l->err == 0 && sl->state != PP_SLOT_READY) {
			ret = -EAGAIN;
			goto out_unlock;
		}
		if (l->spin_ns > 0 && l->err == 0 && sl->state != PP_SLOT_READY) {
			pthread_mutex_unlock(&l->mu);
			spin_for(l, sl, b);
			pthread_mutex_lock(&l->mu);
			l->stats.consumer_spins++;
		}
		if (l->err == 0 && sl->state != PP_SLOT_READY)
			l->stats.consumer_sleeps++;
		while (l->err == 0 && sl->state != PP_SLOT_READY)
			pthread_cond_wait(&l->cond_ready, &l->mu);
		if (l->err != 0) {
			ret = pp_error_set(l->err, l->errmsg);
			goto out_unlock;
		}
	}
	sl->state = PP_SLOT_HELD;
	l->next_deliver++;
	l->stats.batches++;
	l->stats.samples += sl->batch.size;
	l->stats.bytes += (uint64_t)sl->batch.size * sl->batch.sample_bytes;
	l->stats.consumer_wait_ns += pp_now_ns() - t0;
	*batch_p = &sl->batch;
	ret = 1;
out_unlock:
	pthread_mutex_unlock(&l->mu);
	return ret;
}

PP_API int pp_loader_next(struct pp_loader *l, struct pp_batch **batch_p)
{
	return next_batch(l, true, batch_p);
}

PP_API int pp_loader_try_next(struct pp_loader *l, struct pp_batch **batch_p)
{
	return next_batch(l, false, batch_p);
}

PP_API int pp_loader_release(struct pp_loader *l, struct pp_batch *batch)
{
	int ret = 0;

	if (l == NULL)
		return pp_error(-EINVAL, "pp_loader_release: the loader must not be NULL");
	pthread_mutex_lock(&l->mu);
	if (batch == NULL || batch->slot >= l->depth || batch != &l->slots[batch->slot].batch ||
	    l->slots[batch->slot].state != PP_SLOT_HELD) {
		ret = pp_error(-EINVAL, "loader: release of a batch that is not held");
	} else {
		l->slots[batch->slot].state = PP_SLOT_FREE;
	}
	pthread_mutex_unlock(&l->mu);
	/*
	 * The waiting worker woken after the unlock: woken under the mutex, it
	 * would find the mutex held and sleep again on it, and the unlock would
	 * then be a second system call of the consumer's (the transfer stage's
	 * host time).  It looks at the slot's state under the mutex, so a
	 * wake-up after the unlock is never lost.
	 */
	if (ret == 0)
		pthread_cond_broadcast(&l->slots[batch->slot].freed);
	return ret;
}

PP_API int pp_loader_get_stats(struct pp_loader *l, struct pp_loader_stats *stats_p)
{
	if (l == NULL || stats_p == NULL)
		return pp_error(-EINVAL, "pp_loader_get_stats: loader and stats must not be NULL");
	pthread_mutex_lock(&l->mu);
	*stats_p = l->stats;
	pthread_mutex_unlock(&l->mu);
	return 0;
}
