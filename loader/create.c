/*
 * loader/create.c: the loader's create (over the source that source.c
 * opens) and destroy: the checks of the configuration, the memory each
 * part takes, each field's conversion set up (convert.c), and the decoding
 * of every chunk into memory (PP_LOADER_CACHE_MEMORY); the ring and
 * delivery are in ring.c, the worker threads in worker.c, the chunk
 * windows of streaming in window.c, and what they all do to the state
 * they share (the budget, the first error) in state.c.
 *
 * One mutex guards all shared state; samples are written outside it, into
 * slots and windows that only their filler touches until it publishes them.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/cpu.h"
#include "common/fault.h"
#include "common/common_impl.h"
#include "loader/loader_impl.h"

/*
 * The conversion of every field: those marked normalize as the
 * configuration's dtype, mean and std say, the others copied as they are;
 * and the layout handed out.
 */
static int fields_setup(struct pp_loader *l, const struct pp_loader_config *cfg)
{
	const struct pp_layout *in = &l->src.layout;
	int ret;

	l->out = *in;
	for (uint32_t f = 0; f < in->nfields; f++) {
		const struct pp_field *fd = &in->fields[f];
		struct pp_sample_info fi = { .dtype = fd->dtype, .ndim = fd->ndim,
					     .sample_bytes = pp_field_bytes(fd) };
		memcpy(fi.shape, fd->shape, sizeof(fi.shape));
		if (fd->normalize) {
			if ((ret = pp_convert_setup(&l->fcv[f], &fi, cfg)) < 0) {
				char msg[768];
				snprintf(msg, sizeof(msg), "%s", pp_last_error());
				return pp_error(ret, "%s (field '%s')", msg, fd->name);
			}
			l->converts[f] = !(l->fcv[f].in == PP_DTYPE_U8 && l->fcv[f].out == PP_DTYPE_U8);
			l->out.fields[f].dtype = l->fcv[f].out;
		} else {
			l->fcv[f] = (struct pp_convert){ .in = fd->dtype, .out = fd->dtype,
				.in_bytes = fi.sample_bytes, .out_bytes = fi.sample_bytes };
		}
	}
	l->cv = l->fcv[0];
	l->labels_field = pp_layout_labels(&l->out);
	l->transforms = cfg->transforms;
	l->ntransforms = cfg->ntransforms;
	l->seed = cfg->seed;
	l->per_sample = cfg->ntransforms > 0 || l->src.ops != NULL || l->src.records;
	return 0;
}

/* ------------------------------------------------------------------ create and destroy */

PP_API void pp_loader_destroy(struct pp_loader *l)
{
	uint32_t nw;

	if (l == NULL)
		return;
	nw = PP_MAX(l->nworkers, 1u);
	if (l->workers != NULL) {
		pp_loader_workers_stop(l);
		for (uint32_t i = 0; i < nw; i++) {
			struct pp_loader_worker *wk = &l->workers[i];
			if (wk->opened && l->src.worker_destroy != NULL)
				l->src.worker_destroy(l->src.ctx, wk->wctx);
			free(wk->staging);
			free(wk->sfields);
			free(wk->batch_staging);
			free(wk->dst);
		}
		free(l->workers);
	}
	if (l->windows != NULL) {
		for (uint32_t i = 0; i < l->nwindows; i++) {
			free(l->windows[i].raw);
			free(l->windows[i].sample);
			free(l->windows[i].len);
			free(l->windows[i].labels);
			free(l->windows[i].chunk_off);
		}
		free(l->windows);
	}
	pp_plan_free(&l->plan);
	for (uint32_t i = 0; l->slots != NULL && i < l->depth; i++) {
		pthread_cond_destroy(&l->slots[i].freed);
		pthread_cond_destroy(&l->slots[i].helped);
	}
	free(l->slots);
	if (l->device != NULL)
		pp_host_free(l->device, l->ring);
	else
		free(l->ring);
	free(l->cache);
	free(l->cache_labels);
	free(l->records.sample);
	free(l->records.len);
	free(l->records.labels);
	if (l->src.destroy != NULL)
		l->src.destroy(l->src.ctx);
	pthread_cond_destroy(&l->cond_window);
	pthread_cond_destroy(&l->cond_idle);
	pthread_cond_destroy(&l->cond_ready);
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
	if (cfg->spin_us > 1000000 && cfg->spin_us != PP_LOADER_NO_SPIN)
		return pp_error(-EINVAL, "loader: spin_us %u is above the limit of 1000000 (1 s; "
				"PP_LOADER_NO_SPIN for none)", cfg->spin_us);
	if (cfg->prefetch > 4096 || cfg->io_depth > 256 || cfg->window_chunks > (1u << 20))
		return pp_error(-EINVAL, "loader: prefetch %u, io_depth %u or window_chunks %u "
				"out of range (at most 4096, 256, 2^20)", cfg->prefetch,
				cfg->io_depth, cfg->window_chunks);
	if ((unsigned)cfg->cache > PP_LOADER_CACHE_STREAM || (unsigned)cfg->io > PP_LOADER_IO_PREAD)
		return pp_error(-EINVAL, "loader: unknown cache mode %d or I/O path %d",
				(int)cfg->cache, (int)cfg->io);
	if (pp_dtype_size(info->dtype) == 0 || info->sample_bytes == 0)
		return pp_error(-EINVAL, "loader: the source's samples have no known type or size");
	for (int c = 0; c < PP_LOADER_MAX_CHANNELS; c++) {
		float sd = cfg->std[c] != 0.0f ? cfg->std[c] : 1.0f;

		/* As nn's own check: a NaN, an infinity or a subnormal makes every
		 * value of the batch NaN or infinite. */
		if (!isfinite(cfg->mean[c]) || !isfinite(cfg->std[c]) || cfg->std[c] < 0.0f ||
		    fpclassify(cfg->mean[c]) == FP_SUBNORMAL || fpclassify(sd) == FP_SUBNORMAL ||
		    !isfinite(1.0f / (255.0f * sd)) || !isfinite(cfg->mean[c] / sd))
			return pp_error(-EINVAL, "loader: channel %d: normalisation mean %g, std %g "
					"(expected finite, not subnormal, std >= 0 (0: 1), and a finite "
					"(x / 255 - mean) / std)", c, (double)cfg->mean[c], (double)cfg->std[c]);
	}
	if ((cfg->transforms == NULL) != (cfg->ntransforms == 0) ||
	    (cfg->decoders == NULL) != (cfg->ndecoders == 0))
		return pp_error(-EINVAL, "loader: %zu transforms at %p and %zu decoders at %p: give "
				"both an array and its length, or neither", cfg->ntransforms,
				(const void *)cfg->transforms, cfg->ndecoders,
				(const void *)cfg->decoders);
	for (size_t t = 0; t < cfg->ntransforms; t++)
		if (cfg->transforms[t].apply == NULL)
			return pp_error(-EINVAL, "loader: transform %zu (%s) has no apply function", t,
					cfg->transforms[t].name ? cfg->transforms[t].name : "unnamed");
	for (size_t d = 0; d < cfg->ndecoders; d++)
		if (cfg->decoders[d].decode == NULL || cfg->decoders[d].name == NULL)
			return pp_error(-EINVAL, "loader: decoder %zu has no name or no decode function",
					d);
	return 0;
}

/* One thread of the decoding of every chunk into memory, at create. */
struct cache_job {
	struct pp_loader *l;
	struct pp_loader_worker *wk; /* its reader and inflater */
	uint8_t *raw;          /* a decoded chunk */
	const size_t *chunk_off; /* version 2: where each chunk is decoded in l->cache */
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
		if (l->src.records)
			dst = (uint8_t *)l->cache + job->chunk_off[id];
		ret = l->src.load_chunks(l->src.ctx, job->wk->wctx, &id, 1, &dst, &job->wk->work);
		if (ret < 0) {
			job->err = ret;
			snprintf(job->msg, sizeof(job->msg), "%s", pp_last_error());
			pthread_mutex_lock(&l->mu);
			l->err = ret;
			pthread_mutex_unlock(&l->mu);
			break;
		}
		if (l->src.records) {
			/* the records stay where they were decoded; the tables point at them */
			pp_loader_index_chunk(l, ch, dst, ch->first_id, l->records.sample,
					      l->records.len, l->records.labels);
			continue;
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
	struct cache_job *jobs = NULL;
	size_t samples_bytes = 0, max_raw = 0, next = 0, *chunk_off = NULL;
	int ret = 0;

	if (l->src.records) {
		/* version 2: every decoded chunk kept whole, and tables of its records */
		chunk_off = pp_malloc((l->src.nchunks + 1) * sizeof(size_t));
		if (chunk_off == NULL)
			return pp_error(-ENOMEM, "loader: no memory for %zu chunks", l->src.nchunks);
		for (size_t i = 0; i < l->src.nchunks; i++) {
			chunk_off[i] = samples_bytes;
			if (!pp_add_size(samples_bytes, l->src.chunks[i].raw_bytes, &samples_bytes)) {
				ret = pp_error(-ENOMEM, "loader: the decoded shards do not fit in memory");
				goto out_free;
			}
		}
		if ((ret = pp_loader_budget_add(l, cfg, samples_bytes + info->count *
						(sizeof(uint8_t *) + 2 * sizeof(int32_t)),
						"decoding the shards into memory")) < 0)
			goto out_free;
		l->cache = pp_malloc(samples_bytes ? samples_bytes : 1);
		l->records.sample = pp_malloc(info->count * sizeof(uint8_t *) + 1);
		l->records.len = pp_malloc(info->count * sizeof(uint32_t) + 1);
		l->records.labels = pp_malloc(info->count * sizeof(int32_t) + 1);
		if (l->cache == NULL || l->records.sample == NULL || l->records.len == NULL ||
		    l->records.labels == NULL) {
			ret = pp_error(-ENOMEM, "loader: no memory to decode %llu records",
				       (unsigned long long)info->count);
			goto out_free;
		}
	} else {
		for (size_t i = 0; i < l->src.nchunks; i++)
			max_raw = PP_MAX(max_raw, l->src.chunks[i].raw_bytes);
		if (!pp_mul_size(info->count, info->sample_bytes, &samples_bytes))
			return pp_error(-ENOMEM, "loader: %llu samples of %zu bytes do not fit in "
					"memory", (unsigned long long)info->count, info->sample_bytes);
		if ((ret = pp_loader_budget_add(l, cfg, samples_bytes + info->count * lab,
						"decoding the shards into memory")) < 0 ||
		    (ret = pp_loader_budget_add(l, cfg, nthreads * max_raw, "decoding buffers")) < 0)
			return ret;
		l->cache = pp_malloc(samples_bytes ? samples_bytes : 1);
		l->cache_labels = lab ? pp_malloc(info->count * lab + 1) : NULL;
		if (l->cache == NULL || (lab && l->cache_labels == NULL)) {
			ret = pp_error(-ENOMEM, "loader: no memory to decode %llu samples",
				       (unsigned long long)info->count);
			goto out_free;
		}
	}
	jobs = pp_calloc(nthreads, sizeof(*jobs));
	if (jobs == NULL) {
		ret = pp_error(-ENOMEM, "loader: no memory for %u decoding threads", nthreads);
		goto out_free;
	}
	for (uint32_t t = 0; t < nthreads; t++) {
		jobs[t] = (struct cache_job){ .l = l, .wk = &l->workers[t], .next = &next,
					      .chunk_off = chunk_off };
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
		pp_loader_work_collect(l, &l->workers[t]);
	}
	l->err = 0;
	if (ret == 0 && !l->src.records) {
		l->src.samples = l->cache;
		l->src.labels = l->cache_labels;
	}
out_free:
	for (uint32_t t = 0; jobs != NULL && t < l->claimers; t++)
		free(jobs[t].raw);
	free(jobs);
	free(chunk_off);
	return ret;
}

/*
 * How long the consumer polls for a batch (pp_loader_config.spin_us): by
 * default only where a processor of the process's affinity is left free by
 * the workers, so that the poll never takes a worker's processor.
 */
static uint64_t spin_ns(const struct pp_loader_config *cfg)
{
	if (cfg->workers == 0 || cfg->spin_us == PP_LOADER_NO_SPIN)
		return 0;
	if (cfg->spin_us != 0)
		return (uint64_t)cfg->spin_us * 1000u;
	return cfg->workers < (uint32_t)pp_cpu_usable_cores() ? (uint64_t)PP_LOADER_SPIN_US * 1000u : 0;
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
	if (l->src.layout.nfields == 0)
		pp_layout_from_info(&l->src.info, &l->src.layout);
	if (l->src.name[0] == '\0')
		snprintf(l->src.name, sizeof(l->src.name), "source");
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cond_work, NULL);
	pthread_cond_init(&l->cond_ready, NULL);
	pthread_cond_init(&l->cond_idle, NULL);
	pthread_cond_init(&l->cond_window, NULL);

	l->batch_size = cfg->batch_size ? cfg->batch_size : 64;
	l->nworkers = cfg->workers;
	l->spin_ns = spin_ns(cfg);
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
		.rank_slices = cfg->rank_slices,
	};
	l->plan_key = pp_plan_key(&l->params, src->info.count, l->streaming ? src->nchunks : 0);
	l->order_key = l->streaming ? 0 : pp_plan_order_key(&l->params, src->info.count);
	if (l->streaming && cfg->rank_slices) {
		ret = pp_error(-EINVAL, "loader: rank_slices is for sources in memory, not streamed "
			       "shards (use PP_LOADER_CACHE_MEMORY)");
		goto err_destroy;
	}
	if ((ret = fields_setup(l, cfg)) < 0)
		goto err_destroy;
	if ((ret = pp_loader_workers_setup(l, cfg)) < 0)
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
		if ((ret = pp_loader_budget_add(l, cfg, l->plan.cap * 12 + src->nchunks * 8,
						"the epoch plan")) < 0)
			goto err_destroy;
		size_t ring_bytes;

		if ((ret = pp_loader_ring_bytes(l, &ring_bytes)) < 0 ||
		    (ret = pp_loader_windows_setup(l, cfg, ring_bytes)) < 0)
			goto err_destroy;
	} else {
		if ((ret = pp_plan_alloc_memory(&l->plan, &l->params, src->info.count)) < 0)
			goto err_destroy;
		if ((ret = pp_loader_budget_add(l, cfg, l->plan.cap * 8 + src->info.count * 8,
						"the epoch plan")) < 0)
			goto err_destroy;
	}
	if ((ret = pp_loader_ring_setup(l, cfg)) < 0)
		goto err_destroy;
	l->stats.io_path = src->io_path != NULL ? *src->io_path : "none";
	l->stats.direct_io = src->direct_io;
	l->stats.fixed_buffers = src->fixed_buffers != NULL && *src->fixed_buffers;
	l->stats.memory_bytes = l->memory_bytes;
	l->stats.slots = l->depth;
	if ((ret = pp_loader_workers_start(l)) < 0)
		goto err_destroy;
	*l_p = l;
	return 0;

err_destroy:
	pp_loader_destroy(l);
	return ret;
}

PP_API int pp_loader_create(const struct pp_loader_config *cfg, struct pp_loader **l_p)
{
	struct pp_loader_source src;
	int ret;

	if (cfg == NULL || l_p == NULL)
		return pp_error(-EINVAL, "pp_loader_create: cfg and l_p must not be NULL");
	ret = pp_loader_source_open(cfg, &src);
	if (ret < 0)
		return ret;
	return pp_loader_create_source(cfg, &src, l_p);
}

/* ------------------------------------------------------------------ layout */

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

PP_API const struct pp_layout *pp_loader_layout(const struct pp_loader *l)
{
	return &l->out;
}
