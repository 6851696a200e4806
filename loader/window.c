/*
 * loader/window.c: the chunk windows of streaming.  Window buffer s mod K
 * holds segment s of the plan, and is reused for s + K once no batch needs
 * s any more; the workers that need a window decode its chunks together,
 * in claims small enough that they finish it together, and a worker that
 * would wait for a slot reads ahead into the windows of its batch.
 */
#include "config.h"

#include <errno.h>

#include "common/common_impl.h"
#include "datasets/shard.h"
#include "loader/loader_impl.h"

/* Batches from 'from_batch' on that take samples of segment s. */
static uint64_t batches_in(const struct pp_loader *l, const struct pp_plan_segment *s,
			   uint64_t from_batch)
{
	uint64_t first = PP_MAX(s->first / l->batch_size, from_batch);
	uint64_t last = (s->end - 1) / l->batch_size;

	return last >= first ? last - first + 1 : 0;
}

/* Whether window buffer w may be taken for segment s.  Caller holds mu. */
static bool window_can_take(const struct pp_loader *l, const struct pp_loader_window *w, int64_t s)
{
	if (w->seg < 0)
		return s < l->seg_start + (int64_t)l->nwindows;
	return w->seg == s - (int64_t)l->nwindows && w->pending == 0 && w->users == 0;
}

/*
 * Points record tables at the records of a decoded chunk (its raw layout),
 * from entry 'rec' on: each record's sample (version 1) or bytes and length
 * (version 2), and its label.  Used by the windows and by the memory cache
 * of version 2 records.
 */
void pp_loader_index_chunk(const struct pp_loader *l, const struct pp_plan_chunk *ch,
			   const uint8_t *base, uint64_t rec, const uint8_t **sample, uint32_t *len,
			   int32_t *labels)
{
	size_t lab = l->src.info.label_kind == PP_LABEL_CLASS ? sizeof(int32_t) : 0;

	for (uint32_t j = 0; j < ch->records; j++, rec++) {
		if (l->src.records) {
			size_t n;
			sample[rec] = pp_shard_record(base, ch->records, lab * ch->records, j, &n);
			len[rec] = (uint32_t)n;
		} else {
			sample[rec] = base + lab * ch->records + (size_t)j * l->src.info.sample_bytes;
		}
		labels[rec] = lab ? (int32_t)pp_le32(base + 4 * (size_t)j) : 0;
	}
}

/* Points the window's record tables at chunks c0..c0+n of segment s once they are decoded. */
static void window_index(struct pp_loader *l, struct pp_loader_window *w,
			 const struct pp_plan_segment *s, uint32_t c0, uint32_t n)
{
	uint64_t rec = 0;

	for (uint32_t c = 0; c < c0; c++)
		rec += l->src.chunks[l->plan.seg_chunks[s->chunk0 + c]].records;
	for (uint32_t c = c0; c < c0 + n; c++) {
		const struct pp_plan_chunk *ch = &l->src.chunks[l->plan.seg_chunks[s->chunk0 + c]];
		pp_loader_index_chunk(l, ch, w->raw + w->chunk_off[c], rec, w->sample, w->len,
				      w->labels);
		rec += ch->records;
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
struct pp_loader_window *pp_loader_window_acquire(struct pp_loader *l, struct pp_loader_worker *wk,
						  size_t s, bool ahead)
{
	struct pp_loader_window *w = &l->windows[s % l->nwindows];
	const struct pp_plan_segment *seg = &l->plan.segs[s];
	uint64_t t0;
	int ret;

	pthread_mutex_lock(&l->mu);
	while (w->seg != (int64_t)s) {
		if (pp_loader_must_quit(l))
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
				off += ch->raw_bytes;
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
			pp_loader_error_record(l, ret);
			goto out_quit;
		}
		w->chunks_done += n;
		pthread_cond_broadcast(&l->cond_window);
	}
	if (ahead)
		goto out_quit;
	while (w->chunks_done < seg->nchunks) {
		if (pp_loader_must_quit(l))
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

/* Ends a fill's use of a window; the last batch that needed it frees it for segment s + K. */
void pp_loader_window_release(struct pp_loader *l, struct pp_loader_window *w)
{
	pthread_mutex_lock(&l->mu);
	w->users--;
	w->pending--;
	if (w->pending == 0)
		pthread_cond_broadcast(&l->cond_window);
	pthread_mutex_unlock(&l->mu);
}

/* Allocates the window buffers: one more than the workers, two when the budget (with the ring) is short. */
int pp_loader_windows_setup(struct pp_loader *l, const struct pp_loader_config *cfg, size_t ring)
{
	uint32_t wc = l->params.window_chunks;
	uint32_t max_rec = 0;
	size_t max_raw = 0, per;
	int ret;

	for (size_t i = 0; i < l->src.nchunks; i++) {
		max_rec = PP_MAX(max_rec, l->src.chunks[i].records);
		max_raw = PP_MAX(max_raw, l->src.chunks[i].raw_bytes);
	}
	l->window_records = (uint64_t)wc * max_rec;
	if (!pp_mul_size(wc, max_raw, &l->window_raw))
		return pp_error(-ENOMEM, "loader: a window of %u chunks of %zu bytes is too large",
				wc, max_raw);
	per = l->window_raw + l->window_records * (sizeof(uint8_t *) + sizeof(int32_t) +
	      (l->src.records ? sizeof(uint32_t) : 0)) + wc * sizeof(size_t);
	l->nwindows = PP_MAX(2u, l->nworkers + 1);
	/* The ring comes after the windows (ring.c): a budget it would pass with one
	 * window per worker takes two. */
	if (cfg->memory_budget != 0 &&
	    l->memory_bytes + per * l->nwindows + ring > cfg->memory_budget)
		l->nwindows = 2;
	if ((ret = pp_loader_budget_add(l, cfg, per * l->nwindows, "the chunk windows")) < 0)
		return ret;
	l->windows = pp_calloc(l->nwindows, sizeof(struct pp_loader_window));
	if (l->windows == NULL)
		return pp_error(-ENOMEM, "loader: no memory for the chunk windows");
	for (uint32_t i = 0; i < l->nwindows; i++) {
		struct pp_loader_window *w = &l->windows[i];
		w->seg = -1;
		w->raw = pp_malloc(l->window_raw ? l->window_raw : 1);
		w->sample = pp_malloc((l->window_records ? l->window_records : 1) * sizeof(uint8_t *));
		w->labels = pp_malloc((l->window_records ? l->window_records : 1) * sizeof(int32_t));
		w->chunk_off = pp_malloc(wc * sizeof(size_t));
		if (l->src.records)
			w->len = pp_malloc((l->window_records ? l->window_records : 1) *
					   sizeof(uint32_t));
		if (w->raw == NULL || w->sample == NULL || w->labels == NULL || w->chunk_off == NULL ||
		    (l->src.records && w->len == NULL))
			return pp_error(-ENOMEM, "loader: no memory for a chunk window of %zu bytes",
					l->window_raw);
	}
	return 0;
}
