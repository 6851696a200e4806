/*
 * loader/source.c: the loader's sources: an in-memory dataset (used where
 * it lies, or gathered through pp_dataset_gather() when it has no array,
 * as a synthetic one); a set of shard files whose chunks each worker reads
 * with its own reader (io_uring, or pread) into aligned staging buffers
 * and decodes with its own inflater, its records decoded by the decoder
 * its shards name; sources of the user's own (pinpipe/source.h,
 * pp_source_create); and the choice among them of pp_loader_create.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "datasets/shard.h"
#include "loader/loader_impl.h"

/* ------------------------------------------------------------------ in-memory datasets */

static int dataset_gather(void *ctx, const uint64_t *ids, size_t n, void *samples, int32_t *labels)
{
	return pp_dataset_gather(ctx, ids, n, samples, labels);
}

static void dataset_source(const struct pp_dataset *ds, struct pp_loader_source *src)
{
	memset(src, 0, sizeof(*src));
	src->info = *pp_dataset_info(ds);
	src->samples = pp_dataset_samples(ds);
	src->labels = pp_dataset_labels(ds);
	if (src->samples == NULL)
		src->gather = dataset_gather;
	src->ctx = (void *)ds;
	snprintf(src->name, sizeof(src->name), "dataset %s", pp_dataset_name(ds));
}

/* ------------------------------------------------------------------ shard sets */

struct shard_set {
	size_t nshards;
	struct pp_shard **shards;       /* [nshards] */
	int *fd;                        /* [nshards] buffered descriptors */
	int *fd_direct;                 /* [nshards] O_DIRECT where allowed, else = fd */
	struct pp_plan_chunk *chunks;   /* [nchunks] */
	size_t nchunks;
	enum pp_loader_io io;
	unsigned depth;                 /* reads in flight per worker */
	uint32_t timeout_ms;            /* limit of a read without progress */
	size_t staging;                 /* bytes of one read's staging buffer (4096-aligned) */
	bool fixed;                     /* every worker so far registered its read buffers */
	const char *io_path;            /* "io_uring" while every worker so far has its ring, else "pread" */
	unsigned nworkers;              /* workers created so far */
};

struct shard_worker {
	struct pp_reader reader;
	struct pp_inflater *inf;
	uint8_t *staging;               /* depth * staging bytes, 4096-aligned */
	struct pp_read *reqs;           /* [depth] */
};

static void shard_set_destroy(void *ctx)
{
	struct shard_set *set = ctx;

	for (size_t i = 0; i < set->nshards; i++) {
		if (set->fd_direct[i] >= 0 && set->fd_direct[i] != set->fd[i])
			close(set->fd_direct[i]);
		if (set->fd[i] >= 0)
			close(set->fd[i]);
		pp_shard_close(set->shards[i]);
	}
	free(set->shards);
	free(set->fd);
	free(set->fd_direct);
	free(set->chunks);
	free(set);
}

static void shard_worker_destroy(void *ctx, void *wctx)
{
	struct shard_worker *w = wctx;

	(void)ctx;
	pp_reader_fini(&w->reader);
	pp_inflater_destroy(w->inf);
	free(w->staging);
	free(w->reqs);
	free(w);
}

static int shard_worker_create(void *ctx, void **wctx_p)
{
	struct shard_set *set = ctx;
	struct shard_worker *w = pp_calloc(1, sizeof(*w));
	int ret;

	if (w == NULL)
		return pp_error(-ENOMEM, "loader: no memory for a worker");
	if ((ret = pp_reader_init(&w->reader, set->io, set->depth, set->timeout_ms)) < 0) {
		free(w);
		return ret;
	}
	if (!w->reader.uring)
		set->io_path = "pread";
	if ((ret = pp_inflater_create(&w->inf)) < 0)
		goto err_free;
	w->reqs = pp_calloc(set->depth, sizeof(struct pp_read));
	if (w->reqs == NULL ||
	    pp_posix_memalign((void **)&w->staging, PP_LOADER_IO_ALIGN, set->depth * set->staging)) {
		w->staging = NULL;
		ret = pp_error(-ENOMEM, "loader: no memory for %u read buffers of %zu bytes",
			       set->depth, set->staging);
		goto err_free;
	}
	/* registered where allowed; plain reads into the same buffer otherwise */
	ret = pp_reader_register(&w->reader, w->staging, set->depth * set->staging);
	set->fixed = (set->nworkers == 0 || set->fixed) && ret == 0;
	set->nworkers++;
	*wctx_p = w;
	return 0;

err_free:
	shard_worker_destroy(ctx, w);
	return ret;
}

static int shard_load(void *ctx, void *wctx, const uint32_t *ids, size_t n, void *const *dst,
		      struct pp_loader_work *work)
{
	struct shard_set *set = ctx;
	struct shard_worker *w = wctx;
	uint64_t t0 = pp_now_ns(), t1;
	int ret;

	for (size_t k = 0; k < n; k++) {
		const struct pp_plan_chunk *ch = &set->chunks[ids[k]];
		struct pp_shard_chunk_info info;
		pp_shard_chunk(set->shards[ch->shard], ch->index, &info);
		w->reqs[k] = (struct pp_read){
			.fd = set->fd_direct[ch->shard],
			.fd_buffered = set->fd[ch->shard],
			.offset = info.offset,
			.len = (info.stored_size + PP_LOADER_IO_ALIGN - 1) / PP_LOADER_IO_ALIGN *
			       PP_LOADER_IO_ALIGN,
			.need = info.stored_size,
			.buf = w->staging + k * set->staging,
			.path = pp_shard_path(set->shards[ch->shard]),
			.chunk = ch->index,
		};
		work->bytes_read += info.stored_size;
	}
	ret = pp_reader_read(&w->reader, w->reqs, n);
	t1 = pp_now_ns();
	work->read_ns += t1 - t0;
	if (ret < 0)
		return ret;
	for (size_t k = 0; k < n && ret == 0; k++) {
		const struct pp_plan_chunk *ch = &set->chunks[ids[k]];
		ret = pp_shard_decode_chunk(set->shards[ch->shard], ch->index, w->reqs[k].buf, dst[k],
					    w->inf);
		work->chunks += ret == 0;
	}
	work->decode_ns += pp_now_ns() - t1;
	return ret;
}

/* Writes " (FILE, record R)" for sample id of the set: the chunk holding it, found by bisection. */
static void shard_describe(void *ctx, uint64_t id, char *buf, size_t len)
{
	const struct shard_set *set = ctx;
	size_t lo = 0, hi = set->nchunks;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (set->chunks[mid].first_id <= id)
			lo = mid;
		else
			hi = mid;
	}
	if (set->nchunks > 0) {
		const struct pp_plan_chunk *ch = &set->chunks[lo];
		struct pp_shard_chunk_info ci;
		pp_shard_chunk(set->shards[ch->shard], ch->index, &ci);
		snprintf(buf, len, " (%s, chunk %llu, record %llu)",
			 pp_shard_path(set->shards[ch->shard]), (unsigned long long)ch->index,
			 (unsigned long long)(ci.first_record + id - ch->first_id));
	}
}

/* ------------------------------------------------------------------ decoders */

/*
 * The built-in decoder "raw": the record is the decoder's fields (the
 * layout's first 'ctx' fields: those before the labels the set stores
 * beside its records) back to back, exactly their bytes.
 */
static int raw_decode(void *ctx, const void *record, size_t len, const struct pp_sample *s)
{
	uint32_t nf = (uint32_t)(uintptr_t)ctx;
	const uint8_t *p = record;
	size_t want = 0;

	for (uint32_t f = 0; f < nf; f++)
		want += pp_field_bytes(&s->layout->fields[f]);
	if (len != want)
		return pp_set_error(-EBADMSG, "a record of %zu bytes, expected %zu (the fields' "
				    "bytes)", len, want);
	for (uint32_t f = 0; f < nf; f++) {
		size_t n = pp_field_bytes(&s->layout->fields[f]);
		memcpy(s->fields[f], p, n);
		p += n;
	}
	return 0;
}

/* Finds the decoder a version 2 set names: the configuration's first, then the built-in ones. */
static int find_decoder(const struct pp_loader_config *cfg, const struct pp_shard *shard,
			struct pp_decoder *dec_p)
{
	const char *name = pp_shard_decoder(shard);
	const struct pp_layout *lay = pp_shard_layout(shard);
	uint32_t ndec = lay->nfields - (pp_shard_info(shard)->label_kind == PP_LABEL_CLASS);

	for (size_t d = 0; d < cfg->ndecoders; d++) {
		if (strcmp(cfg->decoders[d].name, name) == 0) {
			*dec_p = cfg->decoders[d];
			return 0;
		}
	}
	if (strcmp(name, "raw") == 0) {
		*dec_p = (struct pp_decoder){ .name = "raw", .decode = raw_decode,
					      .ctx = (void *)(uintptr_t)ndec };
		return 0;
	}
	return pp_error(-ENOENT, "%s: its records need the decoder \"%s\", which is neither "
			"built in (raw) nor among the %zu given (pp_loader_config.decoders)",
			pp_shard_path(shard), name, cfg->ndecoders);
}

/* Whether two version 2 shards hold records of the same layout for the same decoder. */
static bool same_records(const struct pp_shard *a, const struct pp_shard *b)
{
	const struct pp_layout *la = pp_shard_layout(a), *lb = pp_shard_layout(b);

	if (strcmp(pp_shard_decoder(a), pp_shard_decoder(b)) != 0 || la->nfields != lb->nfields)
		return false;
	for (uint32_t f = 0; f < la->nfields; f++) {
		const struct pp_field *x = &la->fields[f], *y = &lb->fields[f];
		if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype || x->ndim != y->ndim ||
		    x->normalize != y->normalize || memcmp(x->shape, y->shape, sizeof(x->shape)) != 0)
			return false;
	}
	return true;
}

/* Whether two shards hold samples of the same kind. */
static bool same_kind(const struct pp_sample_info *a, const struct pp_sample_info *b)
{
	if (a->dtype != b->dtype || a->ndim != b->ndim || a->sample_bytes != b->sample_bytes ||
	    a->label_kind != b->label_kind)
		return false;
	for (uint32_t d = 0; d < a->ndim; d++)
		if (a->shape[d] != b->shape[d])
			return false;
	return true;
}

/* Opens every shard, validates it, and lists its chunks. */
static int shard_source(const struct pp_loader_config *cfg, struct pp_loader_source *src)
{
	struct shard_set *set = pp_calloc(1, sizeof(*set));
	size_t total = 0, max_stored = 0;
	uint64_t first = 0;
	struct pp_reader probe;
	int ret;

	memset(src, 0, sizeof(*src));
	if (set == NULL)
		return pp_error(-ENOMEM, "loader: no memory");
	set->shards = pp_calloc(cfg->nshards, sizeof(*set->shards));
	set->fd = pp_malloc(cfg->nshards * sizeof(int));
	set->fd_direct = pp_malloc(cfg->nshards * sizeof(int));
	if (set->shards == NULL || set->fd == NULL || set->fd_direct == NULL) {
		ret = pp_error(-ENOMEM, "loader: no memory for %zu shards", cfg->nshards);
		goto err_destroy;
	}
	for (size_t i = 0; i < cfg->nshards; i++)
		set->fd[i] = set->fd_direct[i] = -1;
	set->nshards = cfg->nshards;
	set->io = cfg->io;
	set->depth = cfg->io_depth ? cfg->io_depth : 4;
	set->timeout_ms = cfg->io_timeout_ms ? cfg->io_timeout_ms : PP_LOADER_IO_TIMEOUT_MS;
	for (size_t i = 0; i < cfg->nshards; i++) {
		const char *path = cfg->shard_paths[i];
		const struct pp_sample_info *info;
		if ((ret = pp_shard_open(path, &set->shards[i])) < 0)
			goto err_destroy;
		info = pp_shard_info(set->shards[i]);
		if (i == 0) {
			src->info = *info;
			src->info.count = 0;
			src->records = pp_shard_version(set->shards[0]) >= 2;
			src->layout = *pp_shard_layout(set->shards[0]);
			if (src->records && (ret = find_decoder(cfg, set->shards[0], &src->decoder)) < 0)
				goto err_destroy;
		} else if ((pp_shard_version(set->shards[i]) >= 2) != src->records ||
			   !same_kind(info, &src->info) ||
			   (src->records && !same_records(set->shards[i], set->shards[0]))) {
			ret = pp_error(-EINVAL, "%s: samples of another version, shape, type, layout, "
				       "decoder or labels than those of %s", path,
				       cfg->shard_paths[0]);
			goto err_destroy;
		}
		src->info.count += info->count;
		src->info.num_classes = PP_MAX(src->info.num_classes, info->num_classes);
		total += pp_shard_chunk_count(set->shards[i]);
		set->fd[i] = open(path, O_RDONLY | O_CLOEXEC);
		if (set->fd[i] < 0) {
			ret = -errno;
			ret = pp_error(ret, "%s: cannot open: %s", path, pp_strerror(ret));
			goto err_destroy;
		}
		set->fd_direct[i] = set->fd[i];
		if (cfg->direct_io) {
			int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
			if (fd >= 0) {
				set->fd_direct[i] = fd;
				src->direct_io = true;
			}
		}
	}
	set->chunks = pp_calloc(total ? total : 1, sizeof(*set->chunks));
	if (set->chunks == NULL) {
		ret = pp_error(-ENOMEM, "loader: no memory for %zu chunks", total);
		goto err_destroy;
	}
	for (size_t i = 0; i < cfg->nshards; i++) {
		uint64_t nc = pp_shard_chunk_count(set->shards[i]);
		for (uint64_t c = 0; c < nc; c++) {
			struct pp_shard_chunk_info ci;
			pp_shard_chunk(set->shards[i], c, &ci);
			set->chunks[set->nchunks++] = (struct pp_plan_chunk){
				.shard = (uint32_t)i, .index = c, .records = ci.records,
				.first_id = first + ci.first_record, .raw_bytes = ci.raw_size };
			max_stored = PP_MAX(max_stored, (size_t)ci.stored_size);
		}
		first += pp_shard_info(set->shards[i])->count;
	}
	set->staging = (max_stored + PP_LOADER_IO_ALIGN - 1) / PP_LOADER_IO_ALIGN * PP_LOADER_IO_ALIGN;
	if ((ret = pp_reader_init(&probe, cfg->io, set->depth, set->timeout_ms)) < 0)
		goto err_destroy;
	set->io_path = probe.uring ? "io_uring" : "pread";
	src->io_path = &set->io_path;
	pp_reader_fini(&probe);
	src->chunks = set->chunks;
	src->nchunks = set->nchunks;
	src->max_stored = set->staging;
	src->fixed_buffers = &set->fixed;
	src->worker_create = shard_worker_create;
	src->worker_destroy = shard_worker_destroy;
	src->load_chunks = shard_load;
	src->destroy = shard_set_destroy;
	src->describe = shard_describe;
	src->ctx = set;
	snprintf(src->name, sizeof(src->name), "shards");
	return 0;

err_destroy:
	shard_set_destroy(set);
	return ret;
}

/* ------------------------------------------------------------------ sources of the user's own */

struct pp_source {
	char name[64];
	uint64_t count;
	struct pp_layout layout;
	uint32_t num_classes;
	const struct pp_source_ops *ops;
	void *ctx;
	const char *io_path;    /* what its reads go through, for the statistics: "none" until told */
};

void pp_source_set_io_path(struct pp_source *src, const char *io_path)
{
	src->io_path = io_path;
}

PP_API int pp_source_create(const struct pp_source_desc *desc, struct pp_source **src_p)
{
	struct pp_source *src;
	int ret;

	if (desc == NULL || src_p == NULL)
		return pp_error(-EINVAL, "pp_source_create: desc and src_p must not be NULL");
	if (desc->ops == NULL || (desc->ops->read == NULL && desc->ops->read_batch == NULL))
		return pp_error(-EINVAL, "source %s: no read or read_batch function",
				desc->name ? desc->name : "(unnamed)");
	if (desc->count == 0)
		return pp_error(-EINVAL, "source %s: no samples", desc->name ? desc->name : "(unnamed)");
	if ((ret = pp_layout_check(desc->layout)) < 0) {
		char msg[768];
		snprintf(msg, sizeof(msg), "%s", pp_last_error());
		return pp_error(ret, "source %s: %s", desc->name ? desc->name : "(unnamed)", msg);
	}
	src = pp_calloc(1, sizeof(*src));
	if (src == NULL)
		return pp_error(-ENOMEM, "source: no memory");
	snprintf(src->name, sizeof(src->name), "%s", desc->name ? desc->name : "(unnamed)");
	src->count = desc->count;
	src->layout = *desc->layout;
	src->num_classes = desc->num_classes;
	src->ops = desc->ops;
	src->ctx = desc->ctx;
	src->io_path = "none";
	*src_p = src;
	return 0;
}

PP_API void pp_source_destroy(struct pp_source *src)
{
	free(src);
}

PP_API const struct pp_layout *pp_source_layout(const struct pp_source *src)
{
	return &src->layout;
}

/* The loader's view of a source of the user's own. */
static void user_source(const struct pp_source *user, struct pp_loader_source *src)
{
	const struct pp_field *f0 = &user->layout.fields[0];

	memset(src, 0, sizeof(*src));
	src->layout = user->layout;
	snprintf(src->name, sizeof(src->name), "source %s", user->name);
	src->ops = user->ops;
	src->worker_create = user->ops->worker_open;
	src->worker_destroy = user->ops->worker_close;
	src->ctx = user->ctx;
	src->io_path = &user->io_path;
	src->info.count = user->count;
	src->info.dtype = f0->dtype;
	src->info.ndim = f0->ndim ? f0->ndim : 1;  /* a scalar is a sample of shape {1} */
	memcpy(src->info.shape, f0->shape, sizeof(f0->shape));
	if (f0->ndim == 0)
		src->info.shape[0] = 1;
	src->info.sample_bytes = pp_field_bytes(f0);
	if (pp_layout_labels(&user->layout) >= 0 && user->num_classes > 0) {
		src->info.label_kind = PP_LABEL_CLASS;
		src->info.num_classes = user->num_classes;
	}
}

/* ------------------------------------------------------------------ the choice */

int pp_loader_source_open(const struct pp_loader_config *cfg, struct pp_loader_source *src)
{
	int given = (cfg->dataset != NULL) + (cfg->nshards > 0) + (cfg->source != NULL);

	if (given != 1)
		return pp_error(-EINVAL, "loader: give exactly one source: a dataset, shard paths or "
				"a source (got %s%s%s%s)", given == 0 ? "none" : given == 2 ? "both " : "all: ",
				cfg->dataset != NULL ? "a dataset " : "",
				cfg->nshards > 0 ? "shard paths " : "", cfg->source != NULL ? "a source" : "");
	if (cfg->nshards > 0 && cfg->shard_paths == NULL)
		return pp_error(-EINVAL, "loader: %zu shards but no shard_paths", cfg->nshards);
	if (cfg->dataset != NULL)
		dataset_source(cfg->dataset, src);
	else if (cfg->source != NULL)
		user_source(cfg->source, src);
	else
		return shard_source(cfg, src);
	return 0;
}
