/*
 * loader/tokens.c: llm.c's token shards as a source of windows
 * (pinpipe/tokens.h).  pp_tokens_open() globs the pattern, reads and checks
 * each shard's 1024-byte header against the file's size, and keeps a
 * descriptor per shard and the prefix sums of the shards' windows.  The
 * source's read_batch, on a loader worker, locates each window (a binary
 * search of the prefix sums), reads the ranges of up to io_depth windows at
 * once through the worker's reader (loader/io.c: io_uring, or pread) into
 * the worker's staging buffer (a run of consecutive windows as one read),
 * and splits each into inputs and targets, widening to int32 when asked.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "loader/loader_impl.h"
#include "pinpipe/tokens.h"

#define TOKENS_IO_DEPTH 64u

struct tk_shard {
	char *path;
	int fd;
	uint64_t tokens;
	uint64_t windows;
	uint64_t first;        /* source index of its window 0 */
};

struct pp_tokens {
	struct pp_tokens_config cfg;
	struct pp_tokens_info info;
	struct tk_shard *shards; /* [info.nshards] */
	struct pp_source *src;
};

/* A worker's state: its reader and the staging buffer of io_depth windows. */
struct tk_worker {
	struct pp_reader reader;
	uint8_t *buf;          /* [io_depth * (T + 1) * token_bytes] */
	struct pp_read *reqs;  /* [io_depth] */
};

/* Checks one header; fills tokens and version.  Messages name the file and the offset. */
static int check_header(const char *path, const uint8_t *h, uint64_t size, uint32_t *version_p,
			uint64_t *tokens_p)
{
	int32_t magic = (int32_t)pp_le32(h), version = (int32_t)pp_le32(h + 4);
	int32_t count = (int32_t)pp_le32(h + 8);
	uint32_t tb, want;
	uint64_t need;

	if (magic == PP_TOKENS_MAGIC_GPT2) {
		want = PP_TOKENS_VERSION_GPT2;
		tb = 2;
	} else if (magic == PP_TOKENS_MAGIC_LLAMA3) {
		want = PP_TOKENS_VERSION_LLAMA3;
		tb = 4;
	} else {
		return pp_error(-EBADMSG, "%s: offset 0: bad magic %d (expected %d for GPT-2's "
				"uint16 tokens or %d for Llama 3's uint32 tokens)", path, magic,
				PP_TOKENS_MAGIC_GPT2, PP_TOKENS_MAGIC_LLAMA3);
	}
	if (version != (int32_t)want)
		return pp_error(-EBADMSG, "%s: offset 4: version %d, expected %u for magic %d", path,
				version, want, magic);
	if (count <= 0)
		return pp_error(-EBADMSG, "%s: offset 8: token count %d is not positive", path, count);
	need = PP_TOKENS_HEADER_BYTES + (uint64_t)count * tb;
	if (size != need)
		return pp_error(-EBADMSG, "%s: offset 8: token count %d needs a file of %llu bytes "
				"(1024 + %d x %u), the file has %llu", path, count,
				(unsigned long long)need, count, tb, (unsigned long long)size);
	*version_p = (uint32_t)version;
	*tokens_p = (uint64_t)count;
	return 0;
}

/* Opens shard s and checks it against the set's first shard. */
static int open_shard(struct pp_tokens *tk, size_t s)
{
	struct tk_shard *sh = &tk->shards[s];
	uint8_t h[PP_TOKENS_HEADER_BYTES];
	uint64_t T = tk->cfg.seq_len, group = tk->cfg.group ? tk->cfg.group : 1;
	uint32_t version = 0;
	struct stat st;
	ssize_t got;
	int ret;

	sh->fd = open(sh->path, O_RDONLY | O_CLOEXEC);
	if (sh->fd < 0) {
		ret = -errno;
		return pp_error(ret, "%s: cannot open: %s%s", sh->path, pp_strerror(ret),
				ret == -EMFILE ? " (a descriptor per shard: raise ulimit -n)" : "");
	}
	if (fstat(sh->fd, &st) < 0) {
		ret = -errno;
		return pp_error(ret, "%s: fstat: %s", sh->path, pp_strerror(ret));
	}
	if (!S_ISREG(st.st_mode))
		return pp_error(-EBADMSG, "%s: not a regular file", sh->path);
	if ((uint64_t)st.st_size < PP_TOKENS_HEADER_BYTES)
		return pp_error(-EBADMSG, "%s: offset 0: %llu bytes, shorter than the %u-byte header",
				sh->path, (unsigned long long)st.st_size, PP_TOKENS_HEADER_BYTES);
	got = pread(sh->fd, h, sizeof(h), 0);
	if (got < 0) {
		ret = -errno;
		return pp_error(ret, "%s: offset 0: reading the header: %s", sh->path, pp_strerror(ret));
	}
	if ((size_t)got < sizeof(h))
		return pp_error(-EBADMSG, "%s: offset %zd: the file ends inside the header", sh->path, got);
	if ((ret = check_header(sh->path, h, (uint64_t)st.st_size, &version, &sh->tokens)) < 0)
		return ret;
	if (s == 0) {
		tk->info.version = version;
		tk->info.token_bytes = version == PP_TOKENS_VERSION_GPT2 ? 2 : 4;
	} else if (version != tk->info.version) {
		return pp_error(-EBADMSG, "%s: offset 4: version %u (uint%u tokens) in a set whose "
				"first shard %s is version %u (uint%u tokens): one set holds one "
				"version", sh->path, version, version == PP_TOKENS_VERSION_GPT2 ? 16 : 32,
				tk->shards[0].path, tk->info.version, tk->info.token_bytes * 8);
	}
	sh->windows = (sh->tokens - 1) / T / group * group;
	sh->first = tk->info.windows;
	tk->info.windows += sh->windows;
	tk->info.tokens += sh->tokens;
	return 0;
}

/* Index of the shard holding window w: the last whose first window is <= w. */
static size_t shard_of(const struct pp_tokens *tk, uint64_t w)
{
	size_t lo = 0, hi = tk->info.nshards;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (tk->shards[mid].first <= w)
			lo = mid;
		else
			hi = mid;
	}
	/* shards of no window share their first with the next: take the one holding w */
	while (lo + 1 < tk->info.nshards && tk->shards[lo].first + tk->shards[lo].windows <= w)
		lo++;
	return lo;
}

/* ------------------------------------------------------------------ the source */

static int tk_worker_open(void *ctx, void **wctx_p)
{
	struct pp_tokens *tk = ctx;
	uint32_t depth = tk->cfg.io_depth ? tk->cfg.io_depth : TOKENS_IO_DEPTH;
	size_t win = ((size_t)tk->cfg.seq_len + 1) * tk->info.token_bytes;
	struct tk_worker *w = pp_calloc(1, sizeof(*w));
	int ret;

	if (w == NULL)
		return pp_set_error(-ENOMEM, "tokens: no memory for a worker");
	ret = pp_reader_init(&w->reader, tk->cfg.io, depth,
			     tk->cfg.io_timeout_ms ? tk->cfg.io_timeout_ms : PP_LOADER_IO_TIMEOUT_MS);
	if (ret < 0) {
		free(w);
		return ret;
	}
	/* this worker's io_uring refused where the probe's was not (RLIMIT_MEMLOCK spent) */
	if (!w->reader.uring)
		pp_source_set_io_path(tk->src, "pread");
	w->reqs = pp_calloc(depth, sizeof(*w->reqs));
	if (w->reqs == NULL || pp_posix_memalign((void **)&w->buf, PP_LOADER_IO_ALIGN,
						 pp_round_up(depth * win, PP_LOADER_IO_ALIGN))) {
		w->buf = NULL;
		pp_reader_fini(&w->reader);
		free(w->reqs);
		free(w);
		return pp_set_error(-ENOMEM, "tokens: no memory for a worker's %u windows of %zu "
				    "bytes", depth, win);
	}
	/* registered where the kernel and RLIMIT_MEMLOCK allow; plain reads otherwise */
	(void)pp_reader_register(&w->reader, w->buf, pp_round_up(depth * win, PP_LOADER_IO_ALIGN));
	*wctx_p = w;
	return 0;
}

static void tk_worker_close(void *ctx, void *wctx)
{
	struct tk_worker *w = wctx;

	(void)ctx;
	if (w == NULL)
		return;
	pp_reader_fini(&w->reader);
	free(w->buf);
	free(w->reqs);
	free(w);
}

/*
 * dst[0..n) = src[0..n) widened; restrict and blocks of 8 so that -O2
 * vectorises it (gcc 12's cheap model leaves the plain loop scalar).
 */
static void widen_u16(int32_t *restrict dst, const uint16_t *restrict src, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		for (size_t j = 0; j < 8; j++)
			dst[i + j] = src[i + j];
	for (; i < n; i++)
		dst[i] = src[i];
}

static void widen_u32(int32_t *restrict dst, const uint32_t *restrict src, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		for (size_t j = 0; j < 8; j++)
			dst[i + j] = (int32_t)src[i + j];
	for (; i < n; i++)
		dst[i] = (int32_t)src[i];
}

/* Splits a window (at byte 'offset' of 'path', read to 'src') into place k of the fields. */
static int split_window(const struct pp_tokens *tk, const char *path, uint64_t offset,
			const uint8_t *src, size_t k, void *const *fields)
{
	size_t T = tk->cfg.seq_len;

	if (!tk->cfg.widen) {
		size_t tb = tk->info.token_bytes;
		memcpy((uint8_t *)fields[0] + k * T * tb, src, T * tb);
		memcpy((uint8_t *)fields[1] + k * T * tb, src + tb, T * tb);
	} else if (tk->info.token_bytes == 2) {
		const uint16_t *t = (const uint16_t *)src;
		widen_u16((int32_t *)fields[0] + k * T, t, T);
		widen_u16((int32_t *)fields[1] + k * T, t + 1, T);
	} else {
		const uint32_t *t = (const uint32_t *)src;
		int32_t *in = (int32_t *)fields[0] + k * T, *tg = (int32_t *)fields[1] + k * T;
		uint32_t high = 0;
		for (size_t i = 0; i <= T; i++)
			high |= t[i];
		if (high > INT32_MAX) {
			for (size_t i = 0; i <= T; i++)
				if (t[i] > INT32_MAX)
					return pp_set_error(-EBADMSG, "%s: offset %llu: token %u does not "
							    "fit the int32 it is widened to", path,
							    (unsigned long long)(offset + 4 * i), t[i]);
		}
		widen_u32(in, t, T);
		widen_u32(tg, t + 1, T);
	}
	return 0;
}

/*
 * Reads windows indices[0..n) into the fields: runs of consecutive windows
 * of one shard (an unshuffled order) as one read of their tokens, up to
 * the staging buffer; up to io_depth reads in flight at once.
 */
static int tk_read_batch(void *ctx, void *wctx, const uint64_t *indices, size_t n,
			 void *const *fields)
{
	struct pp_tokens *tk = ctx;
	struct tk_worker *w = wctx;
	size_t tb = tk->info.token_bytes, cap = (size_t)w->reader.depth * (tk->cfg.seq_len + 1);
	uint64_t T = tk->cfg.seq_len;
	int ret;

	for (size_t k = 0; k < n;) {
		size_t nreq = 0, used = 0, k0 = k;
		/* gather reads while the buffer and the queue have room */
		while (k < n && nreq < w->reader.depth) {
			uint64_t id = indices[k];
			const struct tk_shard *sh;
			size_t m = 1;
			if (id >= tk->info.windows)
				return pp_set_error(-EINVAL, "tokens: window %llu of %llu",
						    (unsigned long long)id,
						    (unsigned long long)tk->info.windows);
			if (used + T + 1 > cap)
				break;
			sh = &tk->shards[shard_of(tk, id)];
			while (k + m < n && indices[k + m] == id + m &&
			       id + m < sh->first + sh->windows && used + (m + 1) * T + 1 <= cap)
				m++;
			w->reqs[nreq++] = (struct pp_read){ .fd = sh->fd, .fd_buffered = sh->fd,
				.offset = PP_TOKENS_HEADER_BYTES + (id - sh->first) * T * tb,
				.len = (m * T + 1) * tb, .need = (m * T + 1) * tb,
				.buf = w->buf + used * tb, .path = sh->path, .chunk = id - sh->first };
			used += m * T + 1;
			k += m;
		}
		if ((ret = pp_reader_read(&w->reader, w->reqs, nreq)) < 0) {
			char msg[768];
			snprintf(msg, sizeof(msg), "%s", pp_last_error());
			return pp_set_error(ret, "tokens: window %llu: %s",
					    (unsigned long long)indices[k0], msg);
		}
		for (size_t r = 0, j = k0; r < nreq; r++) {
			const struct pp_read *q = &w->reqs[r];
			size_t m = (q->len / tb - 1) / T;
			for (size_t i = 0; i < m; i++, j++)
				if ((ret = split_window(tk, q->path, q->offset + i * T * tb,
							(const uint8_t *)q->buf + i * T * tb, j,
							fields)) < 0)
					return ret;
		}
	}
	return 0;
}

static const struct pp_source_ops tk_ops = {
	.read_batch = tk_read_batch,
	.worker_open = tk_worker_open,
	.worker_close = tk_worker_close,
};

/* ------------------------------------------------------------------ the set */

PP_API int pp_tokens_open(const char *pattern, const struct pp_tokens_config *cfg,
			  struct pp_tokens **tk_p)
{
	struct pp_tokens *tk;
	struct pp_layout lay = { .nfields = 2 };
	struct pp_reader probe;
	glob_t g;
	int ret;

	if (pattern == NULL || cfg == NULL || tk_p == NULL)
		return pp_error(-EINVAL, "pp_tokens_open: pattern, cfg and tk_p must not be NULL");
	if (cfg->seq_len == 0 || cfg->seq_len > (1u << 26))
		return pp_error(-EINVAL, "tokens: seq_len %u is not in 1..%u", cfg->seq_len, 1u << 26);
	if (cfg->io > PP_LOADER_IO_PREAD || cfg->io_depth > 4096)
		return pp_error(-EINVAL, "tokens: io %d or io_depth %u out of range", (int)cfg->io,
				cfg->io_depth);
	ret = glob(pattern, GLOB_ERR, NULL, &g);
	if (ret == GLOB_NOMATCH)
		return pp_error(-ENOENT, "tokens: no file matches the pattern '%s'", pattern);
	if (ret != 0) {
		if (ret != GLOB_NOSPACE)
			globfree(&g);
		return pp_error(ret == GLOB_NOSPACE ? -ENOMEM : -EIO, "tokens: glob('%s') failed%s",
				pattern, ret == GLOB_ABORTED ? ": a directory could not be read" : "");
	}
	tk = pp_calloc(1, sizeof(*tk));
	if (tk == NULL || (tk->shards = pp_calloc(g.gl_pathc, sizeof(*tk->shards))) == NULL) {
		free(tk);
		globfree(&g);
		return pp_error(-ENOMEM, "tokens: no memory for %zu shards", (size_t)g.gl_pathc);
	}
	tk->cfg = *cfg;
	for (size_t s = 0; s < g.gl_pathc; s++)
		tk->shards[s].fd = -1;
	tk->info.nshards = g.gl_pathc;
	for (size_t s = 0; s < g.gl_pathc; s++) {
		if ((tk->shards[s].path = strdup(g.gl_pathv[s])) == NULL) {
			globfree(&g);
			ret = pp_error(-ENOMEM, "tokens: no memory for the shards' names");
			goto err_close;
		}
	}
	globfree(&g);
	for (size_t s = 0; s < tk->info.nshards; s++)
		if ((ret = open_shard(tk, s)) < 0)
			goto err_close;
	if (tk->info.windows == 0) {
		ret = pp_error(-EBADMSG, "tokens: %s: no shard of the %zu holds a window of %u + 1 "
			       "tokens%s", pattern, tk->info.nshards, cfg->seq_len,
			       cfg->group > 1 ? " in whole groups" : "");
		goto err_close;
	}
	tk->info.dtype = cfg->widen ? PP_DTYPE_I32
				    : tk->info.token_bytes == 2 ? PP_DTYPE_U16 : PP_DTYPE_U32;
	for (int f = 0; f < 2; f++) {
		strcpy(lay.fields[f].name, f == 0 ? "inputs" : "targets");
		lay.fields[f].dtype = tk->info.dtype;
		lay.fields[f].ndim = 1;
		lay.fields[f].shape[0] = cfg->seq_len;
	}
	ret = pp_source_create(&(struct pp_source_desc){ .name = "tokens",
		.count = tk->info.windows, .layout = &lay, .ops = &tk_ops, .ctx = tk }, &tk->src);
	if (ret < 0)
		goto err_close;
	/* the workers' readers will go the way this one goes; io_uring asked for and refused fails here */
	if ((ret = pp_reader_init(&probe, cfg->io, 1, PP_LOADER_IO_TIMEOUT_MS)) < 0)
		goto err_close;
	pp_source_set_io_path(tk->src, probe.uring ? "io_uring" : "pread");
	pp_reader_fini(&probe);
	*tk_p = tk;
	return 0;
err_close:
	pp_tokens_close(tk);
	return ret;
}

PP_API void pp_tokens_close(struct pp_tokens *tk)
{
	if (tk == NULL)
		return;
	pp_source_destroy(tk->src);
	for (size_t s = 0; s < tk->info.nshards; s++) {
		if (tk->shards[s].fd >= 0)
			close(tk->shards[s].fd);
		free(tk->shards[s].path);
	}
	free(tk->shards);
	free(tk);
}

PP_API const struct pp_tokens_info *pp_tokens_get_info(const struct pp_tokens *tk)
{
	return &tk->info;
}

PP_API int pp_tokens_get_shard(const struct pp_tokens *tk, size_t s,
			       struct pp_tokens_shard *shard_p)
{
	if (s >= tk->info.nshards)
		return pp_error(-EINVAL, "tokens: shard %zu of %zu", s, tk->info.nshards);
	*shard_p = (struct pp_tokens_shard){ .path = tk->shards[s].path,
		.tokens = tk->shards[s].tokens, .windows = tk->shards[s].windows,
		.first_window = tk->shards[s].first };
	return 0;
}

PP_API const struct pp_source *pp_tokens_source(const struct pp_tokens *tk)
{
	return tk->src;
}
