/*
 * datasets/shard_format.h: the byte layout of a pinpipe shard, versions 1
 * and 2, shared by the reader (shard.c) and the writer (shard_writer.c).
 * docs/SHARDS.md describes it in prose; the two must agree.  All integers are
 * little-endian.  Not exported.
 */
#ifndef PP_DATASETS_SHARD_FORMAT_H
#define PP_DATASETS_SHARD_FORMAT_H

#define PP_SHARD_MAGIC "PPSHARD\0"
#define PP_SHARD_END_MAGIC "PPSHEND\0"
#define PP_SHARD_VERSION 1u          /* fixed-size samples */
#define PP_SHARD_VERSION_RECORDS 2u  /* records of any length, for a decoder */

/* Header, at offset 0, in a block of PP_SHARD_ALIGN bytes (the rest zero). */
#define PP_SH_MAGIC 0               /* 8 bytes "PPSHARD\0" */
#define PP_SH_VERSION 8             /* u32: 1 or 2 */
#define PP_SH_DTYPE 12              /* u32: enum pp_dtype (version 2: 0) */
#define PP_SH_NDIM 16               /* u32: 1..4 (version 2: 0) */
#define PP_SH_SHAPE 20              /* u32[4]: shape, unused entries 0 (version 2: 0) */
#define PP_SH_LABEL_KIND 36         /* u32: enum pp_label_kind */
#define PP_SH_NUM_CLASSES 40        /* u32 */
#define PP_SH_RECORDS_PER_CHUNK 44  /* u32: records in every chunk but the last (version 2:
				     * in any chunk at most) */
#define PP_SH_RECORDS 48            /* u64: records in the shard */
#define PP_SH_CHUNKS 56             /* u64: chunks in the shard */
#define PP_SH_COMPRESSION 64        /* u32: 0 stored, 1 zlib */
#define PP_SH_CRC 68                /* u32: CRC-32 of bytes 0..67 */
#define PP_SH_SIZE 72

/*
 * Version 2's header: bytes 0..67 as version 1's (dtype, ndim and shape 0),
 * then the bound of a record, the decoder's name and the layout of the
 * fields the decoder writes (a "labels" field is implied by the label kind,
 * not listed), and the CRC-32 of all of it.
 */
#define PP_SH2_MAX_RECORD 68        /* u32: bytes of one record at most, 1..1 GiB */
#define PP_SH2_DECODER_LEN 72       /* u32: length of the decoder's name, 1..31 */
#define PP_SH2_DECODER 76           /* 32 bytes: the name, then zeros */
#define PP_SH2_NFIELDS 108          /* u32: fields listed, 1..PP_MAX_FIELDS (one fewer with
				     * labels) */
#define PP_SH2_FIELDS 112           /* PP_MAX_FIELDS entries of PP_SF_SIZE bytes; unused
				     * entries zero */
#define PP_SH2_CRC (PP_SH2_FIELDS + PP_MAX_FIELDS * PP_SF_SIZE) /* u32: CRC-32 of bytes
								  * before it (624) */
#define PP_SH2_SIZE (PP_SH2_CRC + 4)

/* One field of a version 2 layout. */
#define PP_SF_NAME 0                /* 32 bytes: the name, then zeros (at least one) */
#define PP_SF_DTYPE 32              /* u32: enum pp_dtype */
#define PP_SF_NDIM 36               /* u32: 0..4 */
#define PP_SF_SHAPE 40              /* u32[4]: unused entries 0 */
#define PP_SF_NORMALIZE 56          /* u32: 0 or 1 */
#define PP_SF_RESERVED 60           /* u32: 0 */
#define PP_SF_SIZE 64

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

/*
 * Version 2: a decoded chunk of n records is the labels block (n int32,
 * absent without labels), n u32 END offsets (record k is bytes
 * [end[k-1] (0 for k = 0), end[k]) of the bytes area), then the bytes area.
 * The writer closes a chunk at records_per_chunk records, or before a record
 * that would take its decoded size past PP_SHARD_CHUNK_TARGET (a chunk of one
 * record may be larger).  The default bound of one record:
 */
#define PP_SHARD_CHUNK_TARGET ((size_t)4 << 20)
#define PP_SHARD_DEFAULT_MAX_RECORD ((uint32_t)64 << 20)
#define PP_SHARD_DECODER_MAX 31

static inline uint64_t pp_shard_align_up(uint64_t x)
{
	return (x + PP_SHARD_ALIGN - 1) & ~(uint64_t)(PP_SHARD_ALIGN - 1);
}

#endif
