/*
 * datasets/shard_format.h: the byte layout of a pinpipe shard, version 1,
 * shared by the reader (shard.c) and the writer (shard_writer.c).
 * docs/SHARDS.md describes it in prose; the two must agree.  All integers are
 * little-endian.  Not exported.
 */
#ifndef PP_DATASETS_SHARD_FORMAT_H
#define PP_DATASETS_SHARD_FORMAT_H

#define PP_SHARD_MAGIC "PPSHARD\0"
#define PP_SHARD_END_MAGIC "PPSHEND\0"
#define PP_SHARD_VERSION 1u

/* Header, at offset 0, in a block of PP_SHARD_ALIGN bytes (the rest zero). */
#define PP_SH_MAGIC 0               /* 8 bytes "PPSHARD\0" */
#define PP_SH_VERSION 8             /* u32: 1 */
#define PP_SH_DTYPE 12              /* u32: enum pp_dtype */
#define PP_SH_NDIM 16               /* u32: 1..4 */
#define PP_SH_SHAPE 20              /* u32[4]: shape, unused entries 0 */
#define PP_SH_LABEL_KIND 36         /* u32: enum pp_label_kind */
#define PP_SH_NUM_CLASSES 40        /* u32 */
#define PP_SH_RECORDS_PER_CHUNK 44  /* u32: records in every chunk but the last */
#define PP_SH_RECORDS 48            /* u64: records in the shard */
#define PP_SH_CHUNKS 56             /* u64: chunks in the shard */
#define PP_SH_COMPRESSION 64        /* u32: 0 stored, 1 zlib */
#define PP_SH_CRC 68                /* u32: CRC-32 of bytes 0..67 */
#define PP_SH_SIZE 72

/* One chunk index entry; the index follows the last chunk at an aligned offset. */
#define PP_SI_OFFSET 0              /* u64 */
#define PP_SI_STORED 8              /* u32 */
#define PP_SI_RAW 12                /* u32 */
#define PP_SI_RECORDS 16            /* u32 */
#define PP_SI_CRC 20                /* u32: CRC-32 of the stored bytes */
#define PP_SI_FIRST 24              /* u64 */
#define PP_SI_SIZE 32

/* Trailer: the last PP_ST_SIZE bytes of the file, right after the index. */
#define PP_ST_MAGIC 0               /* 8 bytes "PPSHEND\0" */
#define PP_ST_INDEX_OFFSET 8        /* u64 */
#define PP_ST_CHUNKS 16             /* u64 */
#define PP_ST_FILE_SIZE 24          /* u64 */
#define PP_ST_INDEX_CRC 32          /* u32: CRC-32 of the index */
#define PP_ST_CRC 36                /* u32: CRC-32 of trailer bytes 0..35 */
#define PP_ST_SIZE 40

#define PP_SHARD_COMPRESSION_STORED 0u
#define PP_SHARD_COMPRESSION_ZLIB 1u

/* Largest sample accepted (1 GiB) and largest decoded chunk (the u32 raw size). */
#define PP_SHARD_MAX_SAMPLE_BYTES ((size_t)1 << 30)
#define PP_SHARD_MAX_RAW ((uint64_t)UINT32_MAX)

static inline uint64_t pp_shard_align_up(uint64_t x)
{
	return (x + PP_SHARD_ALIGN - 1) & ~(uint64_t)(PP_SHARD_ALIGN - 1);
}

#endif
