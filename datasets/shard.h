/*
 * datasets/shard.h: the parts of the shard reader that the loader uses to do
 * its own I/O (io_uring or pread) and decode chunks in its worker threads.
 * Not exported.
 */
#ifndef PP_DATASETS_SHARD_H
#define PP_DATASETS_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "pinpipe/dataset.h"

#define PP_SHARD_ALIGN 4096u

/* One inflate state: libdeflate's decompressor where built, zlib otherwise. */
struct pp_inflater;

int pp_inflater_create(struct pp_inflater **inf_p);
void pp_inflater_destroy(struct pp_inflater *inf);

/*
 * Inflates the zlib stream src[0..src_len) into exactly dst_len bytes at dst.
 * Returns 0, -ENOMEM (the inflater's memory), or -EBADMSG when the stream is
 * corrupt or does not decode to exactly dst_len bytes (no message is
 * recorded; the caller names the place).
 */
int pp_inflate(struct pp_inflater *inf, const void *src, size_t src_len, void *dst,
	       size_t dst_len);

/* Size of the labels block at the start of a decoded chunk of 'records' records. */
size_t pp_shard_label_bytes(const struct pp_shard *shard, uint32_t records);

/*
 * Checks the CRC-32 of chunk i's stored bytes 'stored' (stored_size bytes,
 * as read from the file at the chunk's offset) and decodes them into 'raw'
 * (raw_size bytes): the labels block, then version 1's samples, or version
 * 2's END table and bytes area (shard_format.h).  Checks every label's range
 * and, for version 2, that the ends never decrease, that no record passes
 * pp_shard_max_record() and that the last end is the bytes area's size, so
 * that pp_shard_record() can trust the chunk.  Thread-safe for different
 * inflaters.  Returns 0, -ENOMEM, or -EBADMSG with a message naming the
 * file, the chunk and its offset (for a bad END: its offset in the chunk's
 * decoded bytes).
 */
int pp_shard_decode_chunk(const struct pp_shard *shard, uint64_t i, const void *stored,
			  void *raw, struct pp_inflater *inf);

/*
 * Locates record r (0..records-1) of a version 2 chunk of 'records' records
 * decoded by pp_shard_decode_chunk() into 'raw', whose labels block is
 * label_bytes (pp_shard_label_bytes()): returns a pointer to its bytes and
 * their count in *len_p.  No check: the decode made them.
 */
const uint8_t *pp_shard_record(const void *raw, uint32_t records, size_t label_bytes, uint32_t r,
			       size_t *len_p);

#endif
