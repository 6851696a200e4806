/*
 * datasets/codec.h: the compression codecs the dataset readers and the shard
 * writer share, beyond the chunk inflater of shard.h: gzip files (IDX .gz)
 * and deflate for the writer.  libdeflate is used where the build has it
 * (codec_libdeflate.c), zlib otherwise (codec_zlib.c); both produce and read
 * the same zlib and gzip streams.  Not exported.
 */
#ifndef PP_DATASETS_CODEC_H
#define PP_DATASETS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "datasets/shard.h"

/* Deflate produces at most this many bytes of output per byte of input... */
#define PP_DEFLATE_MAX_RATIO 1032u
/* ...plus this many (zlib or gzip framing and the last block). */
#define PP_DEFLATE_MAX_SLACK 64u

/*
 * Inflates the single-member gzip stream src[0..src_len) into exactly dst_len
 * bytes at dst, checking the gzip CRC-32 and ISIZE.  Returns 0, -ENOMEM (the
 * inflater's memory), or -EBADMSG when the stream is corrupt, ends early,
 * decodes to another size or is followed by other bytes (no message is
 * recorded; the caller names the file).
 */
int pp_gunzip(struct pp_inflater *inf, const void *src, size_t src_len, void *dst,
	      size_t dst_len);

/*
 * Inflates the first dst_len bytes of the gzip stream src[0..src_len) (a
 * file header, say) with zlib.  Returns 0, -ENOMEM, or -EBADMSG when the
 * stream is corrupt or holds fewer bytes.
 */
int pp_gunzip_head(const void *src, size_t src_len, void *dst, size_t dst_len);

/* A compressor to zlib streams at one level. */
struct pp_deflater;

/* Creates a deflater for 'level' 1..9.  Returns 0, -EINVAL or -ENOMEM. */
int pp_deflater_create(int level, struct pp_deflater **def_p);
void pp_deflater_destroy(struct pp_deflater *def);

/* The most bytes pp_deflate() can produce from src_len bytes. */
size_t pp_deflate_bound(struct pp_deflater *def, size_t src_len);

/*
 * Compresses src[0..src_len) into a zlib stream at dst (dst_cap bytes, at
 * least pp_deflate_bound()).  Returns 0 and its length in *len_p, or -EIO.
 */
int pp_deflate(struct pp_deflater *def, const void *src, size_t src_len, void *dst,
	       size_t dst_cap, size_t *len_p);

#endif
