/*
 * loader/loader.c: the loader proper: the ring of slots, the worker threads,
 * in-order delivery, the chunk windows of streaming, positions, errors and
 * statistics.
 *
 * Workers claim batch numbers in order and fill batch b into slot
 * b mod depth once the consumer has released what that slot held; the
 * consumer takes batch b only after b - 1, so the batches come out in plan
 * order whatever the number of workers.  Streaming keeps a few decoded
 * windows of chunks: window buffer s mod K holds segment s of the plan, and
 * is reused for s + K once no batch needs s any more; the workers that need
 * a window decode its chunks together.  One mutex guards all shared state;
 * samples are written outside it, into slots and windows that only their
 * filler touches until it publishes them.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/fault.h"
#include "common/internal.h"
#include "loader/convert.h"
#include "loader/loader.h"

enum slot_state {
	SLOT_FREE = 0,    /* may be filled by the batch it expects */
	SLOT_FILLING = 1, /* a worker (or the consumer, with 0 workers) fills it */
	SLOT_READY = 2,   /* filled, waiting for the consumer */
	SLOT_HELD = 3,    /* handed out, not yet released */
};

struct slot {
	enum slot_state state;
	uint64_t expect;       /* the batch number allowed to fill it next */
	struct pp_batch batch; /* points into the ring */
};

/* A buffer of decoded chunks: one window of the streaming plan. */
struct window {
	int64_t seg;           /* plan segment held, -1 when none */
	uint32_t next_chunk;   /* chunks of the segment claimed for decoding */
	uint32_t chunks_done;  /* chunks decoded */
	uint32_t users;        /* fills reading it now */
	uint64_t pending;      /* batches of this epoch that still need it */
	uint8_t *raw;          /* [window_raw] decoded chunks, each in raw layout */
	const uint8_t **sample; /* [window_records] where each record's sample lies */
	int32_t *labels;       /* [window_records] */
	size_t *chunk_off;     /* [window_chunks] offset of each chunk in raw */
};

struct worker {
	struct pp_loader *l;
	pthread_t thread;
	bool started;
	void *wctx;             /* the source's per-thread state */
	void *staging;          /* gather sources: batch_size source samples */
	void **dst;             /* [io_depth] chunk destinations of one load */
	struct pp_loader_work work; /* counters, added under the mutex */
	uint64_t fill_ns;
	uint64_t slot_wait_ns;
};

struct pp_loader {
	struct pp_loader_source src;
	struct pp_plan_params params;
	struct pp_convert cv;
	uint32_t batch_size;
	uint32_t depth;          /* ring slots */
	uint32_t nworkers;       /* threads; 0: the consumer fills */
	uint32_t io_depth;       /* chunks per load */
	uint32_t claimers;       /* threads that decode chunks: max(nworkers, 1) */
	bool streaming;
	uint64_t plan_key;

	struct pp_device *device; /* the ring's allocator, or NULL for posix_memalign */
	uint8_t *ring;           /* depth * slot_bytes, 4096-aligned */
	size_t slot_bytes;
	struct slot *slots;      /* [depth] */
	struct worker *workers;  /* [max(nworkers, 1)]: [0] is the consumer's with 0 workers */

	struct window *windows;  /* [nwindows], streaming */
	uint32_t nwindows;
	size_t window_raw;       /* bytes of each window's raw buffer */
	uint64_t window_records; /* records a window can hold */
	int64_t seg_start;       /* first segment of the epoch's remaining batches */
	uint64_t epoch_start;    /* first batch filled in this epoch (a resumed position) */

	void *cache;             /* PP_LOADER_CACHE_MEMORY of chunks: the decoded samples */
	int32_t *cache_labels;
	size_t memory_bytes;

	pthread_mutex_t mu;
	pthread_cond_t cond_work;   /* workers: a batch can be claimed, or stop */
	pthread_cond_t cond_slot;   /* workers: a slot was freed, or cancel */
	pthread_cond_t cond_ready;  /* consumer: a batch is ready, or an error */
	pthread_cond_t cond_idle;   /* begin_epoch: a worker finished its batch */
	pthread_cond_t cond_window; /* workers: a window changed */

	/* guarded by mu */
	struct pp_plan plan;
	bool active;             /* an epoch was begun */
	bool cancel;             /* the epoch is being ended: workers drop their batch */
	bool stop;               /* destroy: workers exit */
	uint64_t next_claim;     /* next batch a worker takes */
	uint64_t next_deliver;   /* next batch the consumer gets */
	uint32_t busy;           /* workers between claim and publication */
	int err;                 /* first worker error, or 0 */
	char errmsg[1024];
	struct pp_loader_stats stats;
};

/* ------------------------------------------------------------------ conversion */

static void convert_f32_f32(const float *src, float *dst, size_t n, float scale, float bias)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = src[i] * scale + bias;
}

void pp_convert_sample(const struct pp_convert *cv, const void *src, void *dst)
{
	if (cv->in == cv->out && cv->in == PP_DTYPE_U8) {
		memcpy(dst, src, cv->in_bytes);
		return;
	}
	for (uint32_t c = 0; c < cv->channels; c++) {
		size_t o = c * cv->plane;
		if (cv->in == PP_DTYPE_U8)
			cv->u8_f32((const uint8_t *)src + o, (float *)dst + o, cv->plane,
				       cv->scale[c], cv->bias[c]);
		else
			convert_f32_f32((const float *)src + o, (float *)dst + o, cv->plane,
					cv->scale[c], cv->bias[c]);
	}
}

static int convert_setup(struct pp_convert *cv, const struct pp_sample_info *info,
			 const struct pp_loader_config *cfg)
{
	size_t elems = info->sample_bytes / pp_dtype_size(info->dtype);

	memset(cv, 0, sizeof(*cv));
	cv->in = info->dtype;
	cv->out = cfg->dtype ? cfg->dtype : info->dtype;
	if (pp_dtype_size(cv->out) == 0)
		return pp_error(-EINVAL, "loader: unknown output dtype %d", (int)cfg->dtype);
	if (cv->in == PP_DTYPE_F32 && cv->out == PP_DTYPE_U8)
		return pp_error(-EINVAL, "loader: uint8 output asked for float32 samples");
	cv->in_bytes = info->sample_bytes;
	cv->out_bytes = elems * pp_dtype_size(cv->out);
	cv->channels = 1;
	if (info->ndim == 3 && info->shape[0] <= PP_LOADER_MAX_CHANNELS)
		cv->channels = info->shape[0];
	cv->plane = elems / cv->channels;
	cv->u8_f32 = pp_convert_u8_f32_best();
	for (uint32_t c = 0; c < cv->channels; c++) {
		float sd = cfg->std[c] != 0.0f ? cfg->std[c] : 1.0f;
		float unit = cv->in == PP_DTYPE_U8 ? 1.0f / 255.0f : 1.0f;
		cv->scale[c] = unit / sd;
		cv->bias[c] = -cfg->mean[c] / sd;
	}
	return 0;
}

/* ------------------------------------------------------------------ errors */

/* Records the first error of a worker; the caller holds mu. */
static void record_error(struct pp_loader *l, int err)
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
static bool must_quit(const struct pp_loader *l)
{
	return l->cancel || l->stop || l->err != 0;
}

/* ------------------------------------------------------------------ windows */

static uint64_t batches_in(const struct pp_loader *l, const struct pp_plan_segment *s,
			   uint64_t from_batch)
{
	uint64_t first = PP_MAX(s->first / l->batch_size, from_batch);
	uint64_t last = (s->end - 1) / l->batch_size;

	return last >= first ? last - first + 1 : 0;
}

/* Whether window buffer w may be taken for segment s.  Caller holds mu. */
static bool window_can_take(const struct pp_loader *l, const struct window *w, int64_t s)
{
	if (w->seg < 0)
		return s < l->seg_start + (int64_t)l->nwindows;
	return w->seg == s - (int64_t)l->nwindows && w->pending == 0 && w->users == 0;
}

/* Points the window's record tables at chunks c0..c0+n of segment s once they are decoded. */
static void window_index(struct pp_loader *l, struct window *w, const struct pp_plan_segment *s,
			 uint32_t c0, uint32_t n)
{
	uint64_t rec = 0;
	size_t lab = l->src.info.label_kind == PP_LABEL_CLASS ? sizeof(int32_t) : 0;

	for (uint32_t c = 0; c < c0; c++)
		rec += l->src.chunks[l->plan.seg_chunks[s->chunk0 + c]].records;
	for (uint32_t c = c0; c < c0 + n; c++) {
		const struct pp_plan_chunk *ch = &l->src.chunks[l->plan.seg_chunks[s->chunk0 + c]];
		const uint8_t *base = w->raw + w->chunk_off[c];
		for (uint32_t j = 0; j < ch->records; j++, rec++) {
			w->sample[rec] = base + lab * ch->records + (size_t)j * l->src.info.sample_bytes;
			w->labels[rec] = lab ? (int32_t)pp_le32(base + 4 * (size_t)j) : 0;
		}
	}
}

/*
 * Makes segment s available in its window, decoding its chunks with the
 * other workers that need it, and counts this fill as a user.  Returns the
 * window, or NULL when the fill must quit (error recorded or epoch ended).
 * With 'ahead', it only decodes what it can without waiting (the window
 * buffer may not be free yet, other workers may hold the last chunks) and
 * returns NULL: read-ahead by a worker that would otherwise wait for a slot.
 */
static struct window *window_acquire(struct pp_loader *l, struct worker *wk, size_t s, bool ahead)
{
	struct window *w = &l->windows[s % l->nwindows];
	const struct pp_plan_segment *seg = &l->plan.segs[s];
	uint64_t t0;
	int ret;

	pthread_mutex_lock(&l->mu);
	while (w->seg != (int64_t)s) {
		if (must_quit(l))
			goto out_quit;
		if (window_can_take(l, w, (int64_t)s)) {
			size_t off = 0;
			w->seg = (int64_t)s;
			w->next_chunk = 0;
			w->chunks_done = 0;
			w->pending = batches_in(l, seg, l->epoch_start);
			for (uint32_t c = 0; c < seg->nchunks; c++) {
				const struct pp_plan_chunk *ch =
					&l->src.chunks[l->plan.seg_chunks[seg->chunk0 + c]];
				w->chunk_off[c] = off;
				off += (size_t)ch->records * (l->src.info.sample_bytes +
					(l->src.info.label_kind == PP_LABEL_CLASS ? 4 : 0));
			}
			break;
		}
		if (ahead)
			goto out_quit;
		t0 = pp_now_ns();
		pthread_cond_wait(&l->cond_window, &l->mu);
		wk->slot_wait_ns += pp_now_ns() - t0;
	}
	while (w->next_chunk < seg->nchunks) {
		/* claims small enough that the workers finish the window together */
		uint32_t c0 = w->next_chunk, left = seg->nchunks - c0;
		uint32_t share = (left + 2 * l->claimers - 1) / (2 * l->claimers);
		uint32_t n = PP_MIN(l->io_depth, share);
		w->next_chunk += n;
		pthread_mutex_unlock(&l->mu);
		for (uint32_t i = 0; i < n; i++)
			wk->dst[i] = w->raw + w->chunk_off[c0 + i];
		ret = l->src.load_chunks(l->src.ctx, wk->wctx, l->plan.seg_chunks + seg->chunk0 + c0, n,
					 wk->dst, &wk->work);
		if (ret == 0)
			window_index(l, w, seg, c0, n);
		pthread_mutex_lock(&l->mu);
		if (ret < 0) {
			record_error(l, ret);
			goto out_quit;
		}
		w->chunks_done += n;
		pthread_cond_broadcast(&l->cond_window);
	}
	if (ahead)
		goto out_quit;
	while (w->chunks_done < seg->nchunks) {
		if (must_quit(l))
			goto out_quit;
		t0 = pp_now_ns();
		pthread_cond_wait(&l->cond_window, &l->mu);
		wk->slot_wait_ns += pp_now_ns() - t0;
	}
	w->users++;
	pthread_mutex_unlock(&l->mu);
	return w;

out_quit:
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

static void window_release(struct pp_loader *l, struct window *w)
{
	pthread_mutex_lock(&l->mu);
	w->users--;
	w->pending--;
	if (w->pending == 0)
		pthread_cond_broadcast(&l->cond_window);
	pthread_mutex_unlock(&l->mu);
}

/* ------------------------------------------------------------------ filling a batch */

/* Fills batch b into slot sl.  Returns 0, -ECANCELED when the epoch ended, or an error with its message. */
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

static int fill_batch(struct pp_loader *l, struct worker *wk, uint64_t b, struct slot *sl)
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
			struct window *w = window_acquire(l, wk, s, false);
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
			window_release(l, w);
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
static void collect_work(struct pp_loader *l, struct worker *wk)
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

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct pp_loader *l = wk->l;

	pthread_mutex_lock(&l->mu);
	for (;;) {
		struct slot *sl;
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
		if (l->streaming && !(sl->state == SLOT_FREE && sl->expect == b)) {
			size_t s = pp_plan_segment_of(&l->plan, b * l->batch_size);
			pthread_mutex_unlock(&l->mu);
			window_acquire(l, wk, s, true);
			if (s + 1 < l->plan.nsegs)
				window_acquire(l, wk, s + 1, true);
			pthread_mutex_lock(&l->mu);
		}
		t0 = pp_now_ns();
		while (!must_quit(l) && !(sl->state == SLOT_FREE && sl->expect == b))
			pthread_cond_wait(&l->cond_slot, &l->mu);
		wk->slot_wait_ns += pp_now_ns() - t0;
		if (must_quit(l)) {
			l->busy--;
			pthread_cond_broadcast(&l->cond_idle);
			continue;
		}
		sl->state = SLOT_FILLING;
		sl->expect += l->depth;
		pthread_mutex_unlock(&l->mu);

		ret = fill_batch(l, wk, b, sl);

		pthread_mutex_lock(&l->mu);
		collect_work(l, wk);
		if (ret < 0) {
			sl->state = SLOT_FREE;
			if (ret != -ECANCELED)
				record_error(l, ret);
		} else {
			sl->state = SLOT_READY;
			pthread_cond_broadcast(&l->cond_ready);
		}
		l->busy--;
		pthread_cond_broadcast(&l->cond_idle);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* ------------------------------------------------------------------ create and destroy */

static size_t round_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

/* Stops and joins the workers.  Safe to call with some never started. */
static void stop_workers(struct pp_loader *l)
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

PP_API void pp_loader_destroy(struct pp_loader *l)
{
	uint32_t nw;

	if (l == NULL)
		return;
	nw = PP_MAX(l->nworkers, 1u);
	if (l->workers != NULL) {
		stop_workers(l);
		for (uint32_t i = 0; i < nw; i++) {
			struct worker *wk = &l->workers[i];
			if (wk->wctx != NULL)
				l->src.worker_destroy(l->src.ctx, wk->wctx);
			free(wk->staging);
			free(wk->dst);
		}
		free(l->workers);
	}
	if (l->windows != NULL) {
		for (uint32_t i = 0; i < l->nwindows; i++) {
			free(l->windows[i].raw);
			free(l->windows[i].sample);
			free(l->windows[i].labels);
			free(l->windows[i].chunk_off);
		}
		free(l->windows);
	}
	pp_plan_free(&l->plan);
	free(l->slots);
	if (l->device != NULL)
		pp_host_free(l->device, l->ring);
	else
		free(l->ring);
	free(l->cache);
	free(l->cache_labels);
	if (l->src.destroy != NULL)
		l->src.destroy(l->src.ctx);
	pthread_cond_destroy(&l->cond_window);
	pthread_cond_destroy(&l->cond_idle);
	pthread_cond_destroy(&l->cond_ready);
	pthread_cond_destroy(&l->cond_slot);
	pthread_cond_destroy(&l->cond_work);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

static int check_config(const struct pp_loader_config *cfg, const struct pp_sample_info *info)
{
	uint32_t ws = cfg->world_size ? cfg->world_size : 1;

	if (cfg->rank >= ws)
		return pp_error(-EINVAL, "loader: rank %u is not below the world size %u", cfg->rank, ws);
	if (cfg->batch_size > (1u << 24))
		return pp_error(-EINVAL, "loader: batch size %u is above the limit of %u",
				cfg->batch_size, 1u << 24);
	if (cfg->workers > 256)
		return pp_error(-EINVAL, "loader: %u workers are above the limit of 256", cfg->workers);
	if (cfg->prefetch > 4096 || cfg->io_depth > 256 || cfg->window_chunks > (1u << 20))
		return pp_error(-EINVAL, "loader: prefetch %u, io_depth %u or window_chunks %u "
				"out of range (at most 4096, 256, 2^20)", cfg->prefetch,
				cfg->io_depth, cfg->window_chunks);
	if ((unsigned)cfg->cache > PP_LOADER_CACHE_STREAM || (unsigned)cfg->io > PP_LOADER_IO_PREAD)
		return pp_error(-EINVAL, "loader: unknown cache mode %d or I/O path %d",
				(int)cfg->cache, (int)cfg->io);
	if (pp_dtype_size(info->dtype) == 0 || info->sample_bytes == 0)
		return pp_error(-EINVAL, "loader: the source's samples have no known type or size");
	for (int c = 0; c < PP_LOADER_MAX_CHANNELS; c++)
		if (cfg->std[c] < 0.0f)
			return pp_error(-EINVAL, "loader: std[%d] = %g is negative", c, (double)cfg->std[c]);
	return 0;
}

/* Adds 'bytes' to the loader's memory and checks the budget. */
static int budget_add(struct pp_loader *l, const struct pp_loader_config *cfg, size_t bytes,
		      const char *what)
{
	if (!pp_add_size(l->memory_bytes, bytes, &l->memory_bytes) ||
	    (cfg->memory_budget != 0 && l->memory_bytes > cfg->memory_budget))
		return pp_error(-ENOMEM, "loader: memory budget of %zu bytes exceeded: %zu bytes "
				"needed so far, of which %zu for %s", cfg->memory_budget,
				l->memory_bytes, bytes, what);
	return 0;
}

/* One thread of the decoding of every chunk into memory, at create. */
struct cache_job {
	struct pp_loader *l;
	struct worker *wk;     /* its reader and inflater */
	uint8_t *raw;          /* a decoded chunk */
	size_t *next;          /* next chunk to claim, under l->mu */
	int err;               /* its first error, or 0 */
	char msg[1024];        /* and that error's message */
	pthread_t thread;
};

static void *cache_thread(void *arg)
{
	struct cache_job *job = arg;
	struct pp_loader *l = job->l;
	const struct pp_sample_info *info = &l->src.info;
	size_t lab = info->label_kind == PP_LABEL_CLASS ? sizeof(int32_t) : 0;

	for (;;) {
		const struct pp_plan_chunk *ch;
		uint32_t id;
		void *dst = job->raw;
		int ret;

		pthread_mutex_lock(&l->mu);
		id = (uint32_t)*job->next;
		*job->next += l->err == 0 && *job->next < l->src.nchunks;
		ret = l->err;
		pthread_mutex_unlock(&l->mu);
		if (ret != 0 || id >= l->src.nchunks)
			break;
		ch = &l->src.chunks[id];
		ret = l->src.load_chunks(l->src.ctx, job->wk->wctx, &id, 1, &dst, &job->wk->work);
		if (ret < 0) {
			job->err = ret;
			snprintf(job->msg, sizeof(job->msg), "%s", pp_last_error());
			pthread_mutex_lock(&l->mu);
			l->err = ret;
			pthread_mutex_unlock(&l->mu);
			break;
		}
		for (uint32_t j = 0; j < (lab ? ch->records : 0); j++)
			l->cache_labels[ch->first_id + j] = (int32_t)pp_le32(job->raw + 4 * (size_t)j);
		memcpy((uint8_t *)l->cache + ch->first_id * info->sample_bytes,
		       job->raw + lab * ch->records, (size_t)ch->records * info->sample_bytes);
	}
	return NULL;
}

/*
 * Decodes every chunk into one array of samples and one of labels
 * (PP_LOADER_CACHE_MEMORY), on as many threads as the loader has workers
 * (the calling thread alone with 0 or 1).
 */
static int cache_chunks(struct pp_loader *l, const struct pp_loader_config *cfg)
{
	const struct pp_sample_info *info = &l->src.info;
	size_t lab = info->label_kind == PP_LABEL_CLASS ? sizeof(int32_t) : 0;
	uint32_t nthreads = l->claimers;
	struct cache_job *jobs;
	size_t samples_bytes, max_raw = 0, next = 0;
	int ret = 0;

	for (size_t i = 0; i < l->src.nchunks; i++)
		max_raw = PP_MAX(max_raw, (size_t)l->src.chunks[i].records * (info->sample_bytes + lab));
	if (!pp_mul_size(info->count, info->sample_bytes, &samples_bytes))
		return pp_error(-ENOMEM, "loader: %llu samples of %zu bytes do not fit in memory",
				(unsigned long long)info->count, info->sample_bytes);
	if ((ret = budget_add(l, cfg, samples_bytes + info->count * lab,
			      "decoding the shards into memory")) < 0 ||
	    (ret = budget_add(l, cfg, nthreads * max_raw, "decoding buffers")) < 0)
		return ret;
	l->cache = pp_malloc(samples_bytes ? samples_bytes : 1);
	l->cache_labels = lab ? pp_malloc(info->count * lab + 1) : NULL;
	jobs = pp_calloc(nthreads, sizeof(*jobs));
	if (l->cache == NULL || (lab && l->cache_labels == NULL) || jobs == NULL) {
		ret = pp_error(-ENOMEM, "loader: no memory to decode %llu samples",
			       (unsigned long long)info->count);
		goto out_free;
	}
	for (uint32_t t = 0; t < nthreads; t++) {
		jobs[t] = (struct cache_job){ .l = l, .wk = &l->workers[t], .next = &next };
		jobs[t].raw = pp_malloc(max_raw ? max_raw : 1);
		if (jobs[t].raw == NULL) {
			ret = pp_error(-ENOMEM, "loader: no memory for a decoding buffer of %zu bytes",
				       max_raw);
			goto out_free;
		}
	}
	for (uint32_t t = 1; t < nthreads; t++) {
		if ((ret = pp_thread_create(&jobs[t].thread, cache_thread, &jobs[t])) != 0) {
			pthread_mutex_lock(&l->mu);
			l->err = ret;
			pthread_mutex_unlock(&l->mu);
			nthreads = t;
			ret = pp_error(ret, "loader: cannot start a decoding thread: %s",
				       pp_strerror(ret));
			break;
		}
	}
	cache_thread(&jobs[0]);
	for (uint32_t t = 1; t < nthreads; t++)
		pthread_join(jobs[t].thread, NULL);
	for (uint32_t t = 0; t < nthreads; t++) {
		if (jobs[t].err != 0 && ret == 0)
			ret = pp_error_set(jobs[t].err, jobs[t].msg);
		collect_work(l, &l->workers[t]);
	}
	l->err = 0;
	if (ret == 0) {
		l->src.samples = l->cache;
		l->src.labels = l->cache_labels;
	}
out_free:
	for (uint32_t t = 0; jobs != NULL && t < l->claimers; t++)
		free(jobs[t].raw);
	free(jobs);
	return ret;
}

static int setup_windows(struct pp_loader *l, const struct pp_loader_config *cfg)
{
	const struct pp_sample_info *info = &l->src.info;
	size_t lab = info->label_kind == PP_LABEL_CLASS ? sizeof(int32_t) : 0;
	uint32_t wc = l->params.window_chunks;
	uint32_t max_rec = 0;
	size_t per;
	int ret;

	for (size_t i = 0; i < l->src.nchunks; i++)
		max_rec = PP_MAX(max_rec, l->src.chunks[i].records);
	l->window_records = (uint64_t)wc * max_rec;
	l->window_raw = l->window_records * (info->sample_bytes + lab);
	per = l->window_raw + l->window_records * (sizeof(uint8_t *) + sizeof(int32_t)) +
	      wc * sizeof(size_t);
	l->nwindows = PP_MAX(2u, l->nworkers + 1);
	if (cfg->memory_budget != 0 && l->memory_bytes + per * l->nwindows > cfg->memory_budget)
		l->nwindows = 2;
	if ((ret = budget_add(l, cfg, per * l->nwindows, "the chunk windows")) < 0)
		return ret;
	l->windows = pp_calloc(l->nwindows, sizeof(struct window));
	if (l->windows == NULL)
		return pp_error(-ENOMEM, "loader: no memory for the chunk windows");
	for (uint32_t i = 0; i < l->nwindows; i++) {
		struct window *w = &l->windows[i];
		w->seg = -1;
		w->raw = pp_malloc(l->window_raw ? l->window_raw : 1);
		w->sample = pp_malloc((l->window_records ? l->window_records : 1) * sizeof(uint8_t *));
		w->labels = pp_malloc((l->window_records ? l->window_records : 1) * sizeof(int32_t));
		w->chunk_off = pp_malloc(wc * sizeof(size_t));
		if (w->raw == NULL || w->sample == NULL || w->labels == NULL || w->chunk_off == NULL)
			return pp_error(-ENOMEM, "loader: no memory for a chunk window of %zu bytes",
					l->window_raw);
	}
	return 0;
}

static int setup_ring(struct pp_loader *l, const struct pp_loader_config *cfg)
{
	const struct pp_sample_info *info = &l->src.info;
	size_t samples_bytes, ring_bytes;
	size_t b = l->batch_size;
	int ret;

	if (!pp_mul_size(b, l->cv.out_bytes, &samples_bytes))
		return pp_error(-ENOMEM, "loader: a batch of %zu samples of %zu bytes is too large",
				b, l->cv.out_bytes);
	l->slot_bytes = round_up(samples_bytes, 64) + round_up(b * sizeof(int32_t), 64) +
			b * sizeof(uint64_t);
	l->slot_bytes = round_up(l->slot_bytes, PP_LOADER_IO_ALIGN);
	if (!pp_mul_size(l->slot_bytes, l->depth, &ring_bytes))
		return pp_error(-ENOMEM, "loader: a ring of %u slots of %zu bytes is too large",
				l->depth, l->slot_bytes);
	if ((ret = budget_add(l, cfg, ring_bytes, "the ring of slots")) < 0)
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
	l->slots = pp_calloc(l->depth, sizeof(struct slot));
	if (l->slots == NULL)
		return pp_error(-ENOMEM, "loader: no memory for %u slots", l->depth);
	for (uint32_t i = 0; i < l->depth; i++) {
		struct pp_batch *bt = &l->slots[i].batch;
		uint8_t *p = l->ring + (size_t)i * l->slot_bytes;
		bt->samples = p;
		bt->labels = info->label_kind == PP_LABEL_CLASS ? (int32_t *)(p + round_up(samples_bytes, 64))
								: NULL;
		bt->ids = (uint64_t *)(p + round_up(samples_bytes, 64) + round_up(b * sizeof(int32_t), 64));
		bt->dtype = l->cv.out;
		bt->sample_bytes = l->cv.out_bytes;
		bt->slot = i;
	}
	return 0;
}

static int setup_workers(struct pp_loader *l, const struct pp_loader_config *cfg)
{
	uint32_t nw = PP_MAX(l->nworkers, 1u);
	int ret;

	l->workers = pp_calloc(nw, sizeof(struct worker));
	if (l->workers == NULL)
		return pp_error(-ENOMEM, "loader: no memory for %u workers", nw);
	for (uint32_t i = 0; i < nw; i++) {
		struct worker *wk = &l->workers[i];
		wk->l = l;
		if (l->src.gather != NULL) {
			size_t bytes = (size_t)l->batch_size * l->src.info.sample_bytes;
			if ((ret = budget_add(l, cfg, bytes, "a worker's gather buffer")) < 0)
				return ret;
			wk->staging = pp_malloc(bytes ? bytes : 1);
			if (wk->staging == NULL)
				return pp_error(-ENOMEM, "loader: no memory for a worker's gather buffer");
		}
		if (l->src.load_chunks != NULL) {
			wk->dst = pp_calloc(l->io_depth, sizeof(void *));
			if (wk->dst == NULL)
				return pp_error(-ENOMEM, "loader: no memory for a worker");
			if ((ret = budget_add(l, cfg, l->io_depth * round_up(l->src.max_stored,
				PP_LOADER_IO_ALIGN), "a worker's read buffer")) < 0)
				return ret;
			if ((ret = l->src.worker_create(l->src.ctx, &wk->wctx)) < 0)
				return ret;
		}
	}
	return 0;
}

static int start_workers(struct pp_loader *l)
{
	for (uint32_t i = 0; i < l->nworkers; i++) {
		int ret = pp_thread_create(&l->workers[i].thread, worker_main, &l->workers[i]);
		if (ret != 0)
			return pp_error(ret, "loader: cannot start worker %u: %s", i, pp_strerror(ret));
		l->workers[i].started = true;
	}
	return 0;
}

int pp_loader_create_source(const struct pp_loader_config *cfg, struct pp_loader_source *src,
			    struct pp_loader **l_p)
{
	struct pp_loader *l;
	int ret;

	if ((ret = check_config(cfg, &src->info)) < 0) {
		if (src->destroy != NULL)
			src->destroy(src->ctx);
		return ret;
	}
	l = pp_calloc(1, sizeof(*l));
	if (l == NULL) {
		if (src->destroy != NULL)
			src->destroy(src->ctx);
		return pp_error(-ENOMEM, "loader: no memory");
	}
	l->src = *src;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cond_work, NULL);
	pthread_cond_init(&l->cond_slot, NULL);
	pthread_cond_init(&l->cond_ready, NULL);
	pthread_cond_init(&l->cond_idle, NULL);
	pthread_cond_init(&l->cond_window, NULL);

	l->batch_size = cfg->batch_size ? cfg->batch_size : 64;
	l->nworkers = cfg->workers;
	l->io_depth = cfg->io_depth ? cfg->io_depth : 4;
	l->claimers = PP_MAX(cfg->workers, 1u);
	l->streaming = src->load_chunks != NULL && cfg->cache == PP_LOADER_CACHE_STREAM;
	/* streamed, a worker inflating a chunk holds up the batches behind its own: twice the slots */
	l->depth = cfg->prefetch ? cfg->prefetch : (l->streaming ? 2 : 1) * (2 * cfg->workers + 2);
	l->params = (struct pp_plan_params){
		.seed = cfg->seed,
		.shuffle = cfg->shuffle,
		.rank = cfg->rank,
		.world_size = cfg->world_size ? cfg->world_size : 1,
		.rank_drop = cfg->rank_drop,
		.drop_last = cfg->drop_last,
		.batch_size = l->batch_size,
		.window_chunks = l->streaming ? (cfg->window_chunks ? cfg->window_chunks : 8) : 0,
	};
	l->plan_key = pp_plan_key(&l->params, src->info.count, l->streaming ? src->nchunks : 0);
	if ((ret = convert_setup(&l->cv, &src->info, cfg)) < 0)
		goto err_destroy;
	if ((ret = setup_workers(l, cfg)) < 0)
		goto err_destroy;
	if (src->load_chunks != NULL && !l->streaming && (ret = cache_chunks(l, cfg)) < 0)
		goto err_destroy;
	if (l->streaming && src->nchunks < l->params.world_size) {
		ret = pp_error(-EINVAL, "loader: %zu chunks are too few to stream to %u ranks "
			       "(each rank needs a chunk; use PP_LOADER_CACHE_MEMORY)",
			       src->nchunks, l->params.world_size);
		goto err_destroy;
	}
	if (l->streaming) {
		if ((ret = pp_plan_alloc_stream(&l->plan, &l->params, src->chunks, src->nchunks)) < 0)
			goto err_destroy;
		if ((ret = budget_add(l, cfg, l->plan.cap * 12 + src->nchunks * 8, "the epoch plan")) < 0)
			goto err_destroy;
		if ((ret = setup_windows(l, cfg)) < 0)
			goto err_destroy;
	} else {
		if ((ret = pp_plan_alloc_memory(&l->plan, &l->params, src->info.count)) < 0)
			goto err_destroy;
		if ((ret = budget_add(l, cfg, l->plan.cap * 8 + src->info.count * 8, "the epoch plan")) < 0)
			goto err_destroy;
	}
	if ((ret = setup_ring(l, cfg)) < 0)
		goto err_destroy;
	l->stats.io_path = src->io_path ? src->io_path : "none";
	l->stats.direct_io = src->direct_io;
	l->stats.fixed_buffers = src->fixed_buffers != NULL && *src->fixed_buffers;
	l->stats.memory_bytes = l->memory_bytes;
	l->stats.slots = l->depth;
	if ((ret = start_workers(l)) < 0)
		goto err_destroy;
	*l_p = l;
	return 0;

err_destroy:
	pp_loader_destroy(l);
	return ret;
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
	pthread_cond_broadcast(&l->cond_slot);
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
		struct slot *sl = &l->slots[i];
		uint64_t e = start + (i + l->depth - start % l->depth) % l->depth;
		if (sl->state == SLOT_READY)
			sl->state = SLOT_FREE;
		sl->expect = e;
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
	if (pos->plan_key != l->plan_key)
		return pp_error(-EINVAL, "loader: the position was saved by a loader with other "
				"settings (seed, shuffle, batch size, ranks, drop rules, window or "
				"source size differ)");
	return start_epoch(l, pos->epoch, pos->batch, true);
}

PP_API int pp_loader_get_position(struct pp_loader *l, struct pp_loader_position *pos_p)
{
	pthread_mutex_lock(&l->mu);
	pos_p->epoch = l->plan.epoch;
	pos_p->batch = l->active ? l->next_deliver : 0;
	pos_p->plan_key = l->plan_key;
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

PP_API int pp_loader_get_layout(const struct pp_loader *l, uint32_t *batch_size_p,
				size_t *sample_bytes_p)
{
	*batch_size_p = l->batch_size;
	*sample_bytes_p = l->cv.out_bytes;
	return 0;
}

PP_API const struct pp_sample_info *pp_loader_info(const struct pp_loader *l)
{
	return &l->src.info;
}

/* ------------------------------------------------------------------ consumer */

/* pp_loader_next(), or with 'wait' false pp_loader_try_next(). */
static int next_batch(struct pp_loader *l, bool wait, struct pp_batch **batch_p)
{
	uint64_t b, t0 = pp_now_ns();
	struct slot *sl;
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
	if (sl->state == SLOT_HELD) {
		ret = pp_error(-ENOBUFS, "loader: all %u ring slots are held by the consumer; release "
			       "a batch before asking for batch %llu", l->depth,
			       (unsigned long long)b);
		goto out_unlock;
	}
	if (l->nworkers == 0) {
		sl->state = SLOT_FILLING;
		sl->expect += l->depth;
		pthread_mutex_unlock(&l->mu);
		ret = fill_batch(l, &l->workers[0], b, sl);
		pthread_mutex_lock(&l->mu);
		collect_work(l, &l->workers[0]);
		if (ret < 0) {
			sl->state = SLOT_FREE;
			record_error(l, ret);
			ret = pp_error_set(l->err, l->errmsg);
			goto out_unlock;
		}
	} else {
		if (!wait && l->err == 0 && sl->state != SLOT_READY) {
			ret = -EAGAIN;
			goto out_unlock;
		}
		while (l->err == 0 && sl->state != SLOT_READY)
			pthread_cond_wait(&l->cond_ready, &l->mu);
		if (l->err != 0) {
			ret = pp_error_set(l->err, l->errmsg);
			goto out_unlock;
		}
	}
	sl->state = SLOT_HELD;
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

	pthread_mutex_lock(&l->mu);
	if (batch == NULL || batch->slot >= l->depth || batch != &l->slots[batch->slot].batch ||
	    l->slots[batch->slot].state != SLOT_HELD) {
		ret = pp_error(-EINVAL, "loader: release of a batch that is not held");
	} else {
		l->slots[batch->slot].state = SLOT_FREE;
		pthread_cond_broadcast(&l->cond_slot);
	}
	pthread_mutex_unlock(&l->mu);
	return ret;
}

PP_API int pp_loader_get_stats(struct pp_loader *l, struct pp_loader_stats *stats_p)
{
	pthread_mutex_lock(&l->mu);
	*stats_p = l->stats;
	pthread_mutex_unlock(&l->mu);
	return 0;
}
