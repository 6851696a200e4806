/*
 * loader/plan.c: the epoch plan.  Which samples this rank takes in an epoch,
 * in which order, and which of them are padding, decided from (seed, epoch,
 * rank, world size) and the source's size alone, so that every worker count
 * and every run gives the same batches, and a position can be resumed.
 *
 * In memory: the dataset is permuted by a Fisher-Yates shuffle driven by a
 * counter-based generator keyed with (seed, epoch); rank r takes positions
 * r, r + W, r + 2W... of it, the permutation being padded by repeating its
 * start (as PyTorch's DistributedSampler) or cut to a multiple of W.  With
 * rank_slices, the permutation is cut into global batches of W x B and
 * rank r takes the r-th B of each (llm.c), padded the same way to whole
 * global batches or cut to them.  Either way, the ranks' first k batches
 * are the permutation's first k x W x B positions, so a loader of another
 * W or B can start where they stopped (pp_loader_resume()).
 *
 * Streaming: the chunks are permuted the same way and dealt to the ranks
 * in turn; each rank groups its chunks into windows of window_chunks and
 * shuffles the samples inside each window.  Ranks are padded to the longest
 * rank's count by repeating their own order from the start, or cut to the
 * shortest.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "loader/loader_impl.h"

uint64_t pp_plan_mix(uint64_t a, uint64_t b)
{
	uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t pp_plan_key(const struct pp_plan_params *p, uint64_t count, uint64_t nchunks)
{
	uint64_t k = pp_plan_mix(p->seed, p->shuffle);

	k = pp_plan_mix(k, p->rank);
	k = pp_plan_mix(k, p->world_size);
	k = pp_plan_mix(k, (uint64_t)p->rank_drop << 1 | p->drop_last);
	k = pp_plan_mix(k, p->batch_size);
	k = pp_plan_mix(k, p->window_chunks);
	k = pp_plan_mix(k, count);
	k = pp_plan_mix(k, p->rank_slices);
	return pp_plan_mix(k, nchunks);
}

uint64_t pp_plan_order_key(const struct pp_plan_params *p, uint64_t count)
{
	uint64_t k = pp_plan_mix(pp_plan_mix(pp_plan_mix(p->seed, p->shuffle), count), 0x6f72646572ull);

	return k ? k : 1;
}

/* Positions of each rank's epoch in memory, before drop_last: with rank_slices a multiple of B. */
static uint64_t memory_per_rank(const struct pp_plan_params *p, uint64_t n)
{
	uint64_t w = p->world_size, g = w * p->batch_size;

	if (p->rank_slices)
		return (p->rank_drop ? n / g : (n + g - 1) / g) * p->batch_size;
	return p->rank_drop ? n / w : (n + w - 1) / w;
}

/* A uniform integer below 'bound' from the generator (key, *ctr), by Lemire's method. */
static uint64_t uniform_below(uint64_t key, uint64_t *ctr, uint64_t bound)
{
	unsigned __int128 m = (unsigned __int128)pp_plan_mix(key, (*ctr)++) * bound;
	uint64_t low = (uint64_t)m;

	if (low < bound) {
		uint64_t t = -bound % bound;
		while (low < t) {
			m = (unsigned __int128)pp_plan_mix(key, (*ctr)++) * bound;
			low = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/* Fisher-Yates over a[0..n), and over b[0..n) with the same swaps when b is not NULL. */
static void shuffle2(uint64_t *a, uint32_t *b, uint64_t n, uint64_t key)
{
	uint64_t ctr = 0;

	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = uniform_below(key, &ctr, i);
		uint64_t t = a[i - 1];
		a[i - 1] = a[j];
		a[j] = t;
		if (b != NULL) {
			uint32_t u = b[i - 1];
			b[i - 1] = b[j];
			b[j] = u;
		}
	}
}

static uint64_t batches_of(const struct pp_plan_params *p, uint64_t len)
{
	return p->drop_last ? len / p->batch_size : (len + p->batch_size - 1) / p->batch_size;
}

int pp_plan_alloc_memory(struct pp_plan *plan, const struct pp_plan_params *p, uint64_t n)
{
	uint64_t cap = memory_per_rank(p, n);

	memset(plan, 0, sizeof(*plan));
	plan->order = pp_malloc((cap ? cap : 1) * sizeof(uint64_t));
	plan->perm = pp_malloc((n ? n : 1) * sizeof(uint64_t));
	if (plan->order == NULL || plan->perm == NULL) {
		pp_plan_free(plan);
		return pp_error(-ENOMEM, "loader: no memory for the plan of %llu samples",
				(unsigned long long)n);
	}
	plan->cap = cap;
	return 0;
}

int pp_plan_alloc_stream(struct pp_plan *plan, const struct pp_plan_params *p,
			 const struct pp_plan_chunk *chunks, size_t nchunks)
{
	uint64_t per_rank = (nchunks + p->world_size - 1) / p->world_size;
	uint64_t max_records = 0;

	memset(plan, 0, sizeof(*plan));
	for (size_t i = 0; i < nchunks; i++)
		max_records = PP_MAX(max_records, chunks[i].records);
	plan->cap = per_rank * max_records;
	plan->chunk_cap = per_rank;
	plan->seg_cap = 2 * (per_rank / p->window_chunks + 2);
	plan->order = pp_malloc((plan->cap ? plan->cap : 1) * sizeof(uint64_t));
	plan->loc = pp_malloc((plan->cap ? plan->cap : 1) * sizeof(uint32_t));
	plan->perm = pp_malloc((nchunks ? nchunks : 1) * sizeof(uint64_t));
	plan->seg_chunks = pp_malloc((per_rank ? per_rank : 1) * sizeof(uint32_t));
	plan->segs = pp_malloc(plan->seg_cap * sizeof(struct pp_plan_segment));
	plan->rank_len = pp_malloc(p->world_size * sizeof(uint64_t));
	if (plan->order == NULL || plan->loc == NULL || plan->perm == NULL ||
	    plan->seg_chunks == NULL || plan->segs == NULL || plan->rank_len == NULL) {
		pp_plan_free(plan);
		return pp_error(-ENOMEM, "loader: no memory for the plan of %zu chunks", nchunks);
	}
	return 0;
}

void pp_plan_free(struct pp_plan *plan)
{
	free(plan->order);
	free(plan->perm);
	free(plan->loc);
	free(plan->segs);
	free(plan->seg_chunks);
	free(plan->rank_len);
	memset(plan, 0, sizeof(*plan));
}

void pp_plan_make_memory(struct pp_plan *plan, const struct pp_plan_params *p, uint64_t n,
			 uint64_t epoch)
{
	uint64_t w = p->world_size, r = p->rank, bs = p->batch_size;
	uint64_t per = memory_per_rank(p, n);
	uint64_t real = r < n ? PP_MIN(per, (n - r + w - 1) / w) : 0;

	if (p->rank_slices) {
		/* whole global batches, then this rank's slice of the partial one */
		uint64_t full = n / (w * bs), rest = n % (w * bs);
		real = PP_MIN(per, full * bs + PP_MIN(bs, rest > r * bs ? rest - r * bs : 0));
	}
	plan->epoch = epoch;
	for (uint64_t i = 0; i < n; i++)
		plan->perm[i] = i;
	if (p->shuffle)
		shuffle2(plan->perm, NULL, n, pp_plan_mix(p->seed, epoch));
	for (uint64_t k = 0; k < per; k++) {
		uint64_t at = p->rank_slices ? (k / bs * w + r) * bs + k % bs : r + k * w;
		plan->order[k] = plan->perm[at % n];
	}
	plan->batches = batches_of(p, per);
	plan->len = PP_MIN(per, plan->batches * p->batch_size);
	plan->real = PP_MIN(real, plan->len);
}

/* Appends a segment, growing the array when padding needs more than foreseen. */
static int push_segment(struct pp_plan *plan, const struct pp_plan_segment *s)
{
	if (plan->nsegs == plan->seg_cap) {
		size_t cap = plan->seg_cap * 2;
		struct pp_plan_segment *segs = pp_realloc(plan->segs, cap * sizeof(*segs));
		if (segs == NULL)
			return pp_error(-ENOMEM, "loader: no memory for %zu plan segments", cap);
		plan->segs = segs;
		plan->seg_cap = cap;
	}
	plan->segs[plan->nsegs++] = *s;
	return 0;
}

int pp_plan_make_stream(struct pp_plan *plan, const struct pp_plan_params *p,
			const struct pp_plan_chunk *chunks, size_t nchunks, uint64_t epoch)
{
	uint64_t w = p->world_size, r = p->rank;
	uint64_t ekey = pp_plan_mix(p->seed, epoch);
	uint64_t target, own = 0, pos = 0, limit;
	uint32_t m = 0;
	size_t nreal;
	int ret;

	plan->epoch = epoch;
	plan->nsegs = 0;
	for (size_t i = 0; i < nchunks; i++)
		plan->perm[i] = i;
	if (p->shuffle)
		shuffle2(plan->perm, NULL, nchunks, pp_plan_mix(ekey, 1));
	for (uint64_t q = 0; q < w; q++)
		plan->rank_len[q] = 0;
	for (size_t i = 0; i < nchunks; i++)
		plan->rank_len[i % w] += chunks[plan->perm[i]].records;
	target = plan->rank_len[0];
	for (uint64_t q = 1; q < w; q++)
		target = p->rank_drop ? PP_MIN(target, plan->rank_len[q])
				      : PP_MAX(target, plan->rank_len[q]);
	own = plan->rank_len[r];
	if (own == 0 && target > 0)
		return pp_error(-EINVAL, "loader: rank %u of %u has no chunk in epoch %llu: "
				"%zu chunks are too few to stream to %u ranks",
				p->rank, p->world_size, (unsigned long long)epoch, nchunks,
				p->world_size);

	/* This rank's chunks, in windows; the samples of each window shuffled. */
	for (uint64_t i = r; i < nchunks; i += w)
		plan->seg_chunks[m++] = (uint32_t)plan->perm[i];
	for (uint32_t c0 = 0, win = 0; c0 < m; c0 += p->window_chunks, win++) {
		struct pp_plan_segment s = { .first = pos, .chunk0 = c0,
					     .nchunks = PP_MIN(p->window_chunks, m - c0) };
		for (uint32_t c = c0; c < c0 + s.nchunks; c++) {
			const struct pp_plan_chunk *ch = &chunks[plan->seg_chunks[c]];
			for (uint32_t j = 0; j < ch->records; j++) {
				plan->order[pos] = ch->first_id + j;
				plan->loc[pos] = (uint32_t)(pos - s.first);
				pos++;
			}
		}
		s.records = pos - s.first;
		s.end = pos;
		if (p->shuffle)
			shuffle2(plan->order + s.first, plan->loc + s.first, s.records,
				 pp_plan_mix(pp_plan_mix(ekey, 2 + r), win));
		if (s.records > 0 && (ret = push_segment(plan, &s)) < 0)
			return ret;
	}

	/* Pad by repeating the order from its start, segment by segment. */
	nreal = plan->nsegs;
	while (pos < target) {
		for (size_t i = 0; i < nreal && pos < target; i++) {
			struct pp_plan_segment s = plan->segs[i];
			uint64_t take = PP_MIN(s.end - s.first, target - pos);
			memcpy(plan->order + pos, plan->order + s.first, take * sizeof(uint64_t));
			memcpy(plan->loc + pos, plan->loc + s.first, take * sizeof(uint32_t));
			s.first = pos;
			s.end = pos + take;
			pos += take;
			if ((ret = push_segment(plan, &s)) < 0)
				return ret;
		}
	}

	/* Cut to the common count, then to whole batches with drop_last. */
	plan->batches = batches_of(p, target);
	limit = PP_MIN(target, plan->batches * p->batch_size);
	while (plan->nsegs > 0 && plan->segs[plan->nsegs - 1].first >= limit)
		plan->nsegs--;
	if (plan->nsegs > 0 && plan->segs[plan->nsegs - 1].end > limit)
		plan->segs[plan->nsegs - 1].end = limit;
	plan->len = limit;
	plan->real = PP_MIN(own, limit);
	return 0;
}

size_t pp_plan_segment_of(const struct pp_plan *plan, uint64_t pos)
{
	size_t lo = 0, hi = plan->nsegs;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (plan->segs[mid].first <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}
