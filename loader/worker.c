/*
 * loader/worker.c: the worker threads of the loader: claiming batch numbers
 * in order, waiting for the slot each batch goes to, filling it (from an
 * array, a gather source or the chunk windows of streaming) and publishing
 * it; the first error of a worker, which ends the epoch for every thread;
 * the workers' per-thread state, and their start and stop.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "common/internal.h"
#include "loader/loader.h"

/* ------------------------------------------------------------------ errors */

/* Records the first error of a worker; the caller holds mu. */
void pp_loader_error_record(struct pp_loader *l, int err)
{
	if (l->err == 0) {
		l->err = err;
		snprintf(l->errmsg, sizeof(l->errmsg), "%s", pp_last_error());
	}
	pthread_cond_broadcast(&l->cond_ready);
	pthread_cond_broadcast(&l->cond_slot);
	pthread_cond_broadcast(&l->cond_window);
	pthread_cond_broadcast(&l->cond_work);
}

/* Whether a fill should give up: the epoch ends, the loader stops, or a worker failed. Caller holds mu. */
bool pp_loader_must_quit(const struct pp_loader *l)
{
	return l->cancel || l->stop || l->err != 0;
}

/* ------------------------------------------------------------------ filling a batch */

/*
 * A shuffled batch reads its samples from random places of a dataset larger
 * than the caches: the reads of sample i + PP_PREFETCH_AHEAD start while
 * sample i is converted, so that the conversion does not wait on memory
 * (Fashion-MNIST on a 2-vCPU EPYC, float32 output: 4.9 M samples/s without,
 * 15.7 M with 8 ahead, 7.4 M with 2; bench/README.md).  Of a large sample
 * only the first PP_PREFETCH_BYTES: the hardware prefetcher follows the rest.
 */
#define PP_PREFETCH_AHEAD 8
#define PP_PREFETCH_BYTES 4096

static inline void prefetch_sample(const void *p, size_t bytes)
{
	const char *c = p;
	size_t end = PP_MIN(bytes, (size_t)PP_PREFETCH_BYTES);
	for (size_t off = 0; off < end; off += 64)
		__builtin_prefetch(c + off);
}

/* Fills batch b into slot sl.  Returns 0, -ECANCELED when the epoch ended, or an error with its message. */
int pp_loader_batch_fill(struct pp_loader *l, struct pp_loader_worker *wk, uint64_t b,
			 struct pp_loader_slot *sl)
{
	const struct pp_plan *plan = &l->plan;
	struct pp_batch *bt = &sl->batch;
	uint64_t first = b * l->batch_size;
	uint32_t n = (uint32_t)PP_MIN((uint64_t)l->batch_size, plan->len - first);
	uint8_t *out = bt->samples;
	uint64_t t0;
	int ret;

	bt->epoch = plan->epoch;
	bt->index = b;
	bt->size = n;
	bt->padding = (uint32_t)(first + n > plan->real ? first + n - PP_MAX(first, plan->real) : 0);
	memcpy(bt->ids, plan->order + first, n * sizeof(uint64_t));

	if (l->streaming) {
		uint64_t pos = first, end = first + n;
		while (pos < end) {
			size_t s = pp_plan_segment_of(plan, pos);
			uint64_t stop = PP_MIN(end, plan->segs[s].end);
			struct pp_loader_window *w = pp_loader_window_acquire(l, wk, s, false);
			if (w == NULL)
				return -ECANCELED;
			t0 = pp_now_ns();
			for (uint64_t k = pos; k < stop; k++) {
				uint32_t loc = plan->loc[k];
				if (k + PP_PREFETCH_AHEAD < stop)
					prefetch_sample(w->sample[plan->loc[k + PP_PREFETCH_AHEAD]],
							l->cv.in_bytes);
				pp_convert_sample(&l->cv, w->sample[loc],
						  out + (k - first) * l->cv.out_bytes);
				if (bt->labels != NULL)
					bt->labels[k - first] = w->labels[loc];
			}
			wk->fill_ns += pp_now_ns() - t0;
			pp_loader_window_release(l, w);
			pos = stop;
		}
		return 0;
	}

	t0 = pp_now_ns();
	if (l->src.samples != NULL) {
		const uint8_t *base = l->src.samples;
		size_t in_bytes = l->cv.in_bytes;
		for (uint32_t i = 0; i < n; i++) {
			if (i + PP_PREFETCH_AHEAD < n)
				prefetch_sample(base + bt->ids[i + PP_PREFETCH_AHEAD] * in_bytes,
						in_bytes);
			pp_convert_sample(&l->cv, base + bt->ids[i] * in_bytes,
					  out + (size_t)i * l->cv.out_bytes);
		}
		if (bt->labels != NULL)
			for (uint32_t i = 0; i < n; i++)
				bt->labels[i] = l->src.labels[bt->ids[i]];
	} else {
		bool direct = l->cv.in == l->cv.out && l->cv.in == PP_DTYPE_U8;
		uint8_t *dst = direct ? out : wk->staging;
		ret = l->src.gather(l->src.ctx, bt->ids, n, dst, bt->labels);
		if (ret < 0) {
			char msg[768];
			snprintf(msg, sizeof(msg), "%s", pp_last_error());
			return pp_error(ret, "loader: epoch %llu batch %llu: %s",
					(unsigned long long)plan->epoch, (unsigned long long)b, msg);
		}
		if (!direct)
			for (uint32_t i = 0; i < n; i++)
				pp_convert_sample(&l->cv, dst + (size_t)i * l->cv.in_bytes,
						  out + (size_t)i * l->cv.out_bytes);
	}
	wk->fill_ns += pp_now_ns() - t0;
	return 0;
}

/* Adds a worker's counters to the loader's and clears them.  Caller holds mu. */
void pp_loader_work_collect(struct pp_loader *l, struct pp_loader_worker *wk)
{
	l->stats.read_ns += wk->work.read_ns;
	l->stats.decode_ns += wk->work.decode_ns;
	l->stats.bytes_read += wk->work.bytes_read;
	l->stats.chunks_decoded += wk->work.chunks;
	l->stats.fill_ns += wk->fill_ns;
	l->stats.slot_wait_ns += wk->slot_wait_ns;
	memset(&wk->work, 0, sizeof(wk->work));
	wk->fill_ns = 0;
	wk->slot_wait_ns = 0;
}

/* A worker thread: claims the next batch, waits for its slot, fills it, publishes it. */
static void *worker_main(void *arg)
{
	struct pp_loader_worker *wk = arg;
	struct pp_loader *l = wk->l;

	pthread_mutex_lock(&l->mu);
	for (;;) {
		struct pp_loader_slot *sl;
		uint64_t b, t0;
		int ret;

		while (!l->stop && (l->err != 0 || !l->active || l->cancel ||
				    l->next_claim >= l->plan.batches))
			pthread_cond_wait(&l->cond_work, &l->mu);
		if (l->stop)
			break;
		b = l->next_claim++;
		l->busy++;
		sl = &l->slots[b % l->depth];
		if (l->streaming && !(sl->state == PP_SLOT_FREE && sl->expect == b)) {
			size_t s = pp_plan_segment_of(&l->plan, b * l->batch_size);
			pthread_mutex_unlock(&l->mu);
			pp_loader_window_acquire(l, wk, s, true);
			if (s + 1 < l->plan.nsegs)
				pp_loader_window_acquire(l, wk, s + 1, true);
			pthread_mutex_lock(&l->mu);
		}
		t0 = pp_now_ns();
		while (!pp_loader_must_quit(l) && !(sl->state == PP_SLOT_FREE && sl->expect == b))
			pthread_cond_wait(&l->cond_slot, &l->mu);
		wk->slot_wait_ns += pp_now_ns() - t0;
		if (pp_loader_must_quit(l)) {
			l->busy--;
			pthread_cond_broadcast(&l->cond_idle);
			continue;
		}
		sl->state = PP_SLOT_FILLING;
		sl->expect += l->depth;
		pthread_mutex_unlock(&l->mu);

		ret = pp_loader_batch_fill(l, wk, b, sl);

		pthread_mutex_lock(&l->mu);
		pp_loader_work_collect(l, wk);
		if (ret < 0) {
			sl->state = PP_SLOT_FREE;
			if (ret != -ECANCELED)
				pp_loader_error_record(l, ret);
		} else {
			sl->state = PP_SLOT_READY;
			pthread_cond_broadcast(&l->cond_ready);
		}
		l->busy--;
		pthread_cond_broadcast(&l->cond_idle);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* ------------------------------------------------------------------ start and stop */

/* Stops and joins the workers.  Safe to call with some never started. */
void pp_loader_workers_stop(struct pp_loader *l)
{
	pthread_mutex_lock(&l->mu);
	l->stop = true;
	l->cancel = true;
	pthread_cond_broadcast(&l->cond_work);
	pthread_cond_broadcast(&l->cond_slot);
	pthread_cond_broadcast(&l->cond_window);
	pthread_cond_broadcast(&l->cond_ready);
	pthread_mutex_unlock(&l->mu);
	for (uint32_t i = 0; i < l->nworkers; i++)
		if (l->workers[i].started)
			pthread_join(l->workers[i].thread, NULL);
}

/* Allocates each worker's state (the consumer's with 0 workers) within the budget. */
int pp_loader_workers_setup(struct pp_loader *l, const struct pp_loader_config *cfg)
{
	uint32_t nw = PP_MAX(l->nworkers, 1u);
	int ret;

	l->workers = pp_calloc(nw, sizeof(struct pp_loader_worker));
	if (l->workers == NULL)
		return pp_error(-ENOMEM, "loader: no memory for %u workers", nw);
	for (uint32_t i = 0; i < nw; i++) {
		struct pp_loader_worker *wk = &l->workers[i];
		wk->l = l;
		if (l->src.gather != NULL) {
			size_t bytes = (size_t)l->batch_size * l->src.info.sample_bytes;
			if ((ret = pp_loader_budget_add(l, cfg, bytes, "a worker's gather buffer")) < 0)
				return ret;
			wk->staging = pp_malloc(bytes ? bytes : 1);
			if (wk->staging == NULL)
				return pp_error(-ENOMEM, "loader: no memory for a worker's gather buffer");
		}
		if (l->src.load_chunks != NULL) {
			wk->dst = pp_calloc(l->io_depth, sizeof(void *));
			if (wk->dst == NULL)
				return pp_error(-ENOMEM, "loader: no memory for a worker");
			if ((ret = pp_loader_budget_add(l, cfg, l->io_depth * pp_round_up(l->src.max_stored,
				PP_LOADER_IO_ALIGN), "a worker's read buffer")) < 0)
				return ret;
			if ((ret = l->src.worker_create(l->src.ctx, &wk->wctx)) < 0)
				return ret;
		}
	}
	return 0;
}

/* Starts the worker threads; pp_loader_workers_stop() joins those that started. */
int pp_loader_workers_start(struct pp_loader *l)
{
	for (uint32_t i = 0; i < l->nworkers; i++) {
		int ret = pp_thread_create(&l->workers[i].thread, worker_main, &l->workers[i]);
		if (ret != 0)
			return pp_error(ret, "loader: cannot start worker %u: %s", i, pp_strerror(ret));
		l->workers[i].started = true;
	}
	return 0;
}
