/*
 * pinpipe/tokens.h: token shards of language-model trainers, as llm.c's
 * dev/data/data_common.py writes them and llmc/dataloader.h reads them: a
 * header of 256 little-endian int32 (magic, version, token count, the rest
 * unused), then the tokens.  GPT-2: magic 20240520, version 1, uint16
 * tokens; Llama 3: magic 20240801, version 7, uint32 tokens; the file is
 * exactly 1024 + count x token bytes.  A set is a glob(3) pattern of such
 * shards ("fineweb_train_*.bin"), in the sorted order of their names.
 *
 * The set is a source (pinpipe/source.h) of windows of T + 1 consecutive
 * tokens, as two fields of T tokens: "inputs" and "targets" (targets =
 * inputs shifted by one).  Window i of a shard starts at its token i x T, so
 * a shard of n tokens has floor((n - 1) / T) windows (with 'group', cut to a
 * multiple of it); windows never cross a shard's end.  The source's sample
 * k is the set's window k: the windows of the first shard, then those of the
 * second...  Every header and size is checked at open, without reading the
 * tokens; the workers read each window's range as its batch needs it,
 * through io_uring (pread where the kernel refuses it).
 *
 * Use:
 *	struct pp_tokens_config tc = { .seq_len = 1024 };
 *	pp_tokens_open("data/fineweb_train_*.bin", &tc, &tk);
 *	cfg.source = pp_tokens_source(tk);  ... pp_loader_create(&cfg, &l) ...
 *	... batch->fields[0]: inputs, B x T; batch->fields[1]: targets, B x T ...
 *	pp_loader_destroy(l);
 *	pp_tokens_close(tk);
 */
#ifndef PINPIPE_TOKENS_H
#define PINPIPE_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/common.h"
#include "pinpipe/loader.h"
#include "pinpipe/source.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of a token shard's header: 256 int32. */
#define PP_TOKENS_HEADER_BYTES 1024u

/* Magic and version of GPT-2's shards (uint16 tokens) and Llama 3's (uint32 tokens). */
#define PP_TOKENS_MAGIC_GPT2 20240520
#define PP_TOKENS_VERSION_GPT2 1
#define PP_TOKENS_MAGIC_LLAMA3 20240801
#define PP_TOKENS_VERSION_LLAMA3 7

/* How to open a set.  Zero-initialise; zero fields take the defaults. */
struct pp_tokens_config {
	uint32_t seq_len;       /* T: tokens of "inputs" and of "targets"; required, >= 1 */
	bool widen;             /* fields of int32 (widened on the host, as llm.c's int
	                           buffers); false: uint16 or uint32 as stored (half or the
	                           same bytes over the bus), for the device to widen */
	uint64_t group;         /* each shard's windows cut to a multiple of this (llm.c
	                           reads whole global batches of processes x B windows of a
	                           shard); 0: 1, every window */
	enum pp_loader_io io;   /* I/O path of the workers' reads (pinpipe/loader.h) */
	uint32_t io_depth;      /* window reads in flight per worker; 0: 64 */
	uint32_t io_timeout_ms; /* a read with no progress this long fails; 0: PP_LOADER_IO_TIMEOUT_MS */
};

/* What a set holds. */
struct pp_tokens_info {
	size_t nshards;         /* files matched */
	uint32_t version;       /* 1 (uint16 tokens) or 7 (uint32 tokens), of every shard */
	uint32_t token_bytes;   /* 2 or 4 */
	enum pp_dtype dtype;    /* of the fields: PP_DTYPE_U16 or PP_DTYPE_U32, or
	                           PP_DTYPE_I32 when widened */
	uint64_t tokens;        /* in all shards */
	uint64_t windows;       /* samples of the source: windows of all shards */
};

/* One shard of a set. */
struct pp_tokens_shard {
	const char *path;       /* as glob(3) found it; valid while the set is open */
	uint64_t tokens;        /* the header's count */
	uint64_t windows;       /* its windows (after 'group') */
	uint64_t first_window;  /* the source's index of its window 0 */
};

struct pp_tokens;

/*
 * Opens the shards matching 'pattern' (glob(3), sorted) and checks each
 * one's header and size, reading 1024 bytes of each and no token.  The
 * shards stay open (one descriptor each) until pp_tokens_close().  Returns
 * 0 and the set in *tk_p, or -errno with a message naming the file and the
 * byte offset: -ENOENT (no file matches), -EBADMSG (a file shorter than the
 * header, a bad magic, a version that is not its magic's, a token count
 * that is not positive or does not match the file's size, versions mixed in
 * one set, no window of seq_len + 1 tokens in any shard), -EINVAL (a bad
 * configuration), -EMFILE, -EACCES... from open(2), -ENOSYS or -EPERM
 * (PP_LOADER_IO_URING where the kernel refuses io_uring), or -ENOMEM.
 */
PP_API int pp_tokens_open(const char *pattern, const struct pp_tokens_config *cfg,
			  struct pp_tokens **tk_p);

/* Closes the shards and frees the set; the loaders using its source must be destroyed first.  NULL is allowed. */
PP_API void pp_tokens_close(struct pp_tokens *tk);

/* Returns what the set holds. */
PP_API const struct pp_tokens_info *pp_tokens_get_info(const struct pp_tokens *tk);

/* Writes shard s (0..nshards-1) to *shard_p.  Returns 0, or -EINVAL for s out of range. */
PP_API int pp_tokens_get_shard(const struct pp_tokens *tk, size_t s,
			       struct pp_tokens_shard *shard_p);

/*
 * Returns the set's source of windows (fields "inputs" and "targets", T
 * tokens each, of the set's dtype), for pp_loader_config.source; owned by
 * the set.  Its reads run on the loader's workers, each with an io_uring
 * of its own and a buffer of io_depth x (T + 1) tokens (128 KiB by default
 * for T = 1024 and uint16), outside the loader's memory budget.  A read
 * error, a shard that shrank since it was opened, or a uint32 token above
 * INT32_MAX to widen fails the loader with the file and offset.
 */
PP_API const struct pp_source *pp_tokens_source(const struct pp_tokens *tk);

#ifdef __cplusplus
}
#endif
#endif
