/*
 * loader/worker.c: the worker threads of the loader: claiming batch numbers
 * in order, waiting for the slot each batch goes to, filling it (from an
 * array, a gather source or the chunk windows of streaming) and publishing
 * it, a worker's first error recorded (state.c), which ends the epoch for
 * every thread; the workers' per-thread state, and their start and stop.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "common/common_impl.h"
#include "loader/loader_impl.h"

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

/* ------------------------------------------------------------------ sample by sample */

/* Prefixes the message set since 'mark' (pp_error_mark()) with what failed on which sample. */
static int sample_error(const struct pp_loader *l, int err, const char *what, uint64_t id,
			uint64_t epoch, uint64_t mark)
{
	char msg[768], where[256] = "";

	snprintf(msg, sizeof(msg), "%s", pp_error_since(mark));
	if (l->src.describe != NULL)
		l->src.describe(l->src.ctx, id, where, sizeof(where));
	return pp_error(err, "loader: %s: sample %llu%s (epoch %llu): %s", what,
			(unsigned long long)id, where, (unsigned long long)epoch,
			msg[0] ? msg : pp_strerror(err));
}

/* Bytes of one sample's value of field f as the source writes it (in) and as handed out (out). */
static inline size_t in_bytes(const struct pp_loader *l, uint32_t f)
{
	return l->fcv[f].in_bytes;
}

static inline size_t out_bytes(const struct pp_loader *l, uint32_t f)
{
	return l->fcv[f].out_bytes;
}

/*
 * Makes sample 'id' into dst[] in the source's layout: the user's read, the
 * record's decoder (w, loc: where the window holds it), or a copy of a
 * fixed-size sample and its label.
 */
static int produce(struct pp_loader *l, struct pp_loader_worker *wk, const struct pp_sample *s,
		   const struct pp_loader_window *w, uint64_t loc)
{
	void *const *dst = s->fields;
	int lf = l->labels_field;
	/* A message after a failure is then the callee's, never an older one. */
	const uint64_t mark = pp_error_mark();
	int ret;

	if (l->src.ops != NULL) {
		ret = l->src.ops->read(l->src.ctx, wk->wctx, s);
		return ret < 0 ? sample_error(l, ret, l->src.name, s->index, s->epoch, mark) : 0;
	}
	if (l->src.records) {
		if (w == NULL) {
			/* held in memory: the tables are indexed by sample id */
			w = &l->records;
			loc = s->index;
		}
		ret = l->src.decoder.decode(l->src.decoder.ctx, w->sample[loc], w->len[loc], s);
		if (ret < 0) {
			char what[96];
			snprintf(what, sizeof(what), "decoder %s", l->src.decoder.name);
			return sample_error(l, ret, what, s->index, s->epoch, mark);
		}
		if (l->src.info.label_kind != PP_LABEL_CLASS)
			return 0;
	} else if (w != NULL) {
		memcpy(dst[0], w->sample[loc], in_bytes(l, 0));
	} else if (l->src.samples != NULL) {
		memcpy(dst[0], (const uint8_t *)l->src.samples + s->index * in_bytes(l, 0),
		       in_bytes(l, 0));
	} else {
		ret = l->src.gather(l->src.ctx, &s->index, 1, dst[0], lf >= 0 ? dst[lf] : NULL);
		return ret < 0 ? sample_error(l, ret, l->src.name, s->index, s->epoch, mark) : 0;
	}
	if (lf >= 0)
		memcpy(dst[lf], w != NULL ? &w->labels[loc] : &l->src.labels[s->index], sizeof(int32_t));
	return 0;
}

/*
 * Puts sample 'id' at place i of the batch: made where the slot holds it,
 * or in the worker's staging for the fields that are converted; then the
 * transforms, with the sample's generator; then the conversion.  'src_fields'
 * (a read_batch source's batch) holds the sample already at place i.
 */
static int one_sample(struct pp_loader *l, struct pp_loader_worker *wk, struct pp_batch *bt,
		      uint32_t i, void *const *src_fields, const struct pp_loader_window *w,
		      uint32_t loc)
{
	uint32_t nf = l->src.layout.nfields;
	void *dst[PP_MAX_FIELDS];
	struct pp_rng rng;
	struct pp_sample s = { .index = bt->ids[i], .epoch = bt->epoch, .layout = &l->src.layout,
			       .fields = dst, .rng = &rng };
	int ret;

	for (uint32_t f = 0; f < nf; f++) {
		if (src_fields != NULL)
			dst[f] = (uint8_t *)src_fields[f] + (size_t)i * in_bytes(l, f);
		else if (l->converts[f])
			dst[f] = wk->sfields[f];
		else
			dst[f] = (uint8_t *)bt->fields[f] + (size_t)i * out_bytes(l, f);
	}
	pp_rng_init(&rng, l->seed, bt->epoch, s.index);
	if (src_fields == NULL && (ret = produce(l, wk, &s, w, loc)) < 0)
		return ret;
	for (size_t t = 0; t < l->ntransforms; t++) {
		const struct pp_transform *tr = &l->transforms[t];
		const uint64_t mark = pp_error_mark();

		if ((ret = tr->apply(tr->ctx, &s)) < 0) {
			char what[96];
			snprintf(what, sizeof(what), "transform %s", tr->name ? tr->name : "(unnamed)");
			return sample_error(l, ret, what, s.index, s.epoch, mark);
		}
	}
	for (uint32_t f = 0; f < nf; f++) {
		uint8_t *out = (uint8_t *)bt->fields[f] + (size_t)i * out_bytes(l, f);
		if (l->converts[f])
			pp_convert_sample(&l->fcv[f], dst[f], out);
		else if (dst[f] != out)
			memcpy(out, dst[f], out_bytes(l, f));
	}
	return 0;
}

/* Fills plan positions first..first+n into the batch sample by sample. */
static int fill_per_sample(struct pp_loader *l, struct pp_loader_worker *wk, struct pp_batch *bt,
			   uint64_t first, uint32_t n)
{
	const struct pp_plan *plan = &l->plan;
	void *src_fields[PP_MAX_FIELDS];
	uint64_t t0 = pp_now_ns();
	int ret = 0;

	if (l->src.ops != NULL && l->src.ops->read_batch != NULL) {
		bool direct = l->ntransforms == 0;
		uint8_t *p = wk->batch_staging;
		for (uint32_t f = 0; f < l->src.layout.nfields; f++) {
			direct = direct && !l->converts[f];
			src_fields[f] = p;
			p += pp_layout_field_span(&l->src.layout, f, l->batch_size);
		}
		const uint64_t mark = pp_error_mark();

		ret = l->src.ops->read_batch(l->src.ctx, wk->wctx, bt->ids, n,
					     direct ? bt->fields : src_fields);
		if (ret < 0)
			ret = sample_error(l, ret, l->src.name, bt->ids[0], bt->epoch, mark);
		for (uint32_t i = 0; i < n && !direct && ret == 0; i++)
			ret = one_sample(l, wk, bt, i, src_fields, NULL, 0);
	} else if (!l->streaming) {
		for (uint32_t i = 0; i < n && ret == 0; i++)
			ret = one_sample(l, wk, bt, i, NULL, NULL, 0);
	} else {
		/* the time a window takes to decode counts as reading and decoding, not filling */
		for (uint64_t pos = first, end = first + n; pos < end && ret == 0;) {
			size_t sg = pp_plan_segment_of(plan, pos);
			uint64_t stop = PP_MIN(end, plan->segs[sg].end);
			struct pp_loader_window *w;
			wk->fill_ns += pp_now_ns() - t0;
			w = pp_loader_window_acquire(l, wk, sg, false);
			t0 = pp_now_ns();
			if (w == NULL)
				return -ECANCELED;
			for (uint64_t k = pos; k < stop && ret == 0; k++)
				ret = one_sample(l, wk, bt, (uint32_t)(k - first), NULL, w,
						 plan->loc[k]);
			pp_loader_window_release(l, w);
			pos = stop;
		}
	}
	wk->fill_ns += pp_now_ns() - t0;
	return ret;
}

/*
 * Whether batch fills are shared: sample by sample from a source's reads
 * (images, records, a user's source), without streaming windows or whole
 * batches read at once, by two workers or more.  A sample's bytes depend
 * on its index, epoch and the seed alone (its generator, one_sample()),
 * so whichever worker fills it, the batch is the same.
 */
static bool fills_shared(const struct pp_loader *l)
{
	return l->per_sample && !l->streaming && l->nworkers > 1 &&
	       !(l->src.ops != NULL && l->src.ops->read_batch != NULL);
}

/*
 * Fills the samples of sl's batch that its cursor gives, until none is left
 * or one fails: the filler's and each helper's loop.  Returns 0 or the
 * failure, its message said; a failure ends the cursor, for the others.
 */
static int fill_from_cursor(struct pp_loader *l, struct pp_loader_worker *wk,
			    struct pp_loader_slot *sl, uint32_t n)
{
	uint64_t t0 = pp_now_ns();
	uint32_t i;
	int ret = 0;

	while (ret == 0 && (i = __atomic_fetch_add(&sl->next_sample, 1, __ATOMIC_RELAXED)) < n)
		ret = one_sample(l, wk, &sl->batch, i, NULL, NULL, 0);
	if (ret < 0)
		__atomic_store_n(&sl->next_sample, n, __ATOMIC_RELAXED);
	wk->fill_ns += pp_now_ns() - t0;
	return ret;
}

/*
 * A shared fill (fills_shared()): the batch's samples are taken one by one
 * from the slot's cursor, by this worker and by the workers that have no
 * batch left to claim at the epoch's end (help()), so that the
 * epoch's last batches are filled by every worker rather than each by one
 * while the others wait.  Returns once every sample is in, or with the
 * first failure (the filler's own, else a helper's, with its message).
 */
static int fill_shared(struct pp_loader *l, struct pp_loader_worker *wk, struct pp_loader_slot *sl,
		       uint32_t n)
{
	int ret;

	pthread_mutex_lock(&l->mu);
	sl->nsamples = n;
	sl->help_ret = 0;
	sl->help_msg[0] = '\0';
	__atomic_store_n(&sl->next_sample, 0, __ATOMIC_RELAXED);
	sl->shared = true;
	/* Waiting there are only the workers with no batch left to claim. */
	pthread_cond_broadcast(&l->cond_work);
	pthread_mutex_unlock(&l->mu);
	ret = fill_from_cursor(l, wk, sl, n);
	pthread_mutex_lock(&l->mu);
	sl->shared = false;
	while (sl->helpers > 0)
		pthread_cond_wait(&sl->helped, &l->mu);
	if (ret == 0 && sl->help_ret < 0)
		ret = pp_error_set(sl->help_ret, sl->help_msg);
	pthread_mutex_unlock(&l->mu);
	return ret;
}

/*
 * The slot of the oldest shared fill that has samples left, or NULL: what
 * a worker with no batch to claim may help with.  Caller holds mu.
 */
static struct pp_loader_slot *help_wanted(struct pp_loader *l)
{
	struct pp_loader_slot *best = NULL;

	for (uint32_t k = 0; k < l->depth; k++) {
		struct pp_loader_slot *sl = &l->slots[k];

		if (sl->state == PP_SLOT_FILLING && sl->shared &&
		    __atomic_load_n(&sl->next_sample, __ATOMIC_RELAXED) < sl->nsamples &&
		    (best == NULL || sl->batch.index < best->batch.index))
			best = sl;
	}
	return best;
}

/*
 * Helps sl's shared fill: its samples from its cursor, then the counters
 * collected and a failure kept for the filler, who waits for its helpers
 * before it publishes.  Called and returns with mu held.
 */
static void help(struct pp_loader *l, struct pp_loader_worker *wk, struct pp_loader_slot *sl)
{
	const uint32_t n = sl->nsamples;
	int ret;

	sl->helpers++;
	pthread_mutex_unlock(&l->mu);
	ret = fill_from_cursor(l, wk, sl, n);
	pthread_mutex_lock(&l->mu);
	pp_loader_work_collect(l, wk);
	if (ret < 0 && sl->help_ret == 0) {
		sl->help_ret = ret;
		snprintf(sl->help_msg, sizeof(sl->help_msg), "%s", pp_last_error());
	}
	if (--sl->helpers == 0)
		pthread_cond_broadcast(&sl->helped);
}

/* ------------------------------------------------------------------ a batch */

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

	if (fills_shared(l))
		return fill_shared(l, wk, sl, n);
	if (l->per_sample)
		return fill_per_sample(l, wk, bt, first, n);
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
		const uint64_t mark = pp_error_mark();

		ret = l->src.gather(l->src.ctx, bt->ids, n, dst, bt->labels);
		if (ret < 0) {
			char msg[768];
			snprintf(msg, sizeof(msg), "%s", pp_error_since(mark));
			return pp_error(ret, "loader: epoch %llu batch %llu: %s",
					(unsigned long long)plan->epoch, (unsigned long long)b,
					msg[0] ? msg : pp_strerror(ret));
		}
		if (!direct)
			for (uint32_t i = 0; i < n; i++)
				pp_convert_sample(&l->cv, dst + (size_t)i * l->cv.in_bytes,
						  out + (size_t)i * l->cv.out_bytes);
	}
	wk->fill_ns += pp_now_ns() - t0;
	return 0;
}

/*
 * A worker thread: claims the next batch, waits for its slot, fills it,
 * publishes it; with no batch left to claim, helps the fills still going
 * where they are shared (help_wanted()).
 */
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
				    l->next_claim >= l->plan.batches)) {
			/* No batch left to claim: the epoch's last fills, shared where they may be. */
			if (l->err == 0 && l->active && !l->cancel && (sl = help_wanted(l)) != NULL) {
				help(l, wk, sl);
				continue;
			}
			pthread_cond_wait(&l->cond_work, &l->mu);
		}
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
			pthread_cond_wait(&sl->freed, &l->mu);
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
			__atomic_store_n(&sl->published, b + 1, __ATOMIC_RELEASE);
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
	pp_loader_wake_slots(l);
	pthread_cond_broadcast(&l->cond_window);
	pthread_cond_broadcast(&l->cond_ready);
	pthread_mutex_unlock(&l->mu);
	for (uint32_t i = 0; i < l->nworkers; i++)
		if (l->workers[i].started)
			pthread_join(l->workers[i].thread, NULL);
}

/*
 * The buffers of a worker that fills sample by sample: one sample of each
 * field that is converted (the source writes it there, the conversion reads
 * it), and a whole batch in the source's layout for a read_batch source
 * whose batches are transformed or converted before they go to the slot.
 */
static int per_sample_setup(struct pp_loader *l, const struct pp_loader_config *cfg,
			    struct pp_loader_worker *wk)
{
	const struct pp_layout *in = &l->src.layout;
	size_t one = 0, batch = 0;
	uint8_t *p;
	int ret;

	for (uint32_t f = 0; f < in->nfields; f++) {
		if (l->converts[f])
			one += pp_round_up(pp_field_bytes(&in->fields[f]), 64);
		batch += pp_layout_field_span(in, f, l->batch_size);
	}
	if (l->src.ops == NULL || l->src.ops->read_batch == NULL)
		batch = 0;
	if ((ret = pp_loader_budget_add(l, cfg, one + batch, "a worker's sample buffers")) < 0)
		return ret;
	wk->sfields = pp_calloc(in->nfields, sizeof(void *));
	if (wk->sfields == NULL)
		return pp_error(-ENOMEM, "loader: no memory for a worker's sample buffers");
	if (pp_posix_memalign(&wk->staging, 64, one ? one : 64)) {
		wk->staging = NULL;
		return pp_error(-ENOMEM, "loader: no memory for a worker's sample buffer of %zu bytes",
				one);
	}
	if (batch && pp_posix_memalign(&wk->batch_staging, 64, batch)) {
		wk->batch_staging = NULL;
		return pp_error(-ENOMEM, "loader: no memory for a worker's batch buffer of %zu bytes",
				batch);
	}
	p = wk->staging;
	for (uint32_t f = 0; f < in->nfields; f++) {
		if (!l->converts[f])
			continue;
		wk->sfields[f] = p;
		p += pp_round_up(pp_field_bytes(&in->fields[f]), 64);
	}
	return 0;
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
		if (l->per_sample && (ret = per_sample_setup(l, cfg, wk)) < 0)
			return ret;
		if (l->src.gather != NULL && !l->per_sample) {
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
		}
		if (l->src.worker_create != NULL) {
			const uint64_t mark = pp_error_mark();

			if ((ret = l->src.worker_create(l->src.ctx, &wk->wctx)) < 0) {
				char msg[768];
				snprintf(msg, sizeof(msg), "%s", pp_error_since(mark));
				return pp_error(ret, "loader: %s: a worker's state: %s", l->src.name,
						msg[0] ? msg : pp_strerror(ret));
			}
			wk->opened = true;
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
