/*
 * datasets/shard.c: the pinpipe shard reader.  pp_shard_open() reads and
 * checks the header, the trailer and the whole chunk index against each
 * other and against the file size before it allocates anything that a count
 * in the file sizes, so a damaged file is rejected up front; chunks are
 * checked (CRC-32, decoded size, labels) as they are read.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "datasets/codec.h"
#include "datasets/shard.h"
#include "datasets/shard_format.h"
#include "datasets/source.h"

struct pp_shard {
	int fd;
	char *path;
	uint32_t version;                   /* PP_SHARD_VERSION or PP_SHARD_VERSION_RECORDS */
	struct pp_sample_info info;         /* version 2: the first field's dtype and shape */
	struct pp_layout layout;            /* the fields, then "labels" with labels */
	char decoder[PP_SHARD_DECODER_MAX + 1]; /* version 2; "" for version 1 */
	uint32_t max_record;                /* version 2: bytes of a record at most; 0 for 1 */
	uint32_t records_per_chunk;         /* records in every chunk but the last */
	uint32_t compression;               /* PP_SHARD_COMPRESSION_* */
	size_t record_bytes;                /* label bytes + sample_bytes (version 2: + END) */
	uint64_t file_size;                 /* bytes */
	uint64_t index_offset;              /* bytes from the start */
	uint64_t nchunks;
	struct pp_shard_chunk_info *chunks; /* [nchunks] */
	uint64_t max_span;                  /* largest chunk with its padding, bytes */
	uint8_t *stored;                    /* [max_span] scratch for stored bytes, or NULL */
	uint8_t *raw;                       /* [largest raw_size] scratch for decoded bytes, or NULL */
	struct pp_inflater *inf;
};

size_t pp_shard_label_bytes(const struct pp_shard *shard, uint32_t records)
{
	return shard->info.label_kind == PP_LABEL_CLASS ? (size_t)records * sizeof(int32_t) : 0;
}

/* Version 1's sample: dtype, ndim, shape; its layout {"samples", "labels"}. */
static int check_header_v1(struct pp_shard *sh, const uint8_t *h)
{
	const char *path = sh->path;
	struct pp_sample_info *info = &sh->info;
	uint32_t crc = pp_crc32(0, h, PP_SH_CRC);
	int ret;

	if (crc != pp_le32(h + PP_SH_CRC))
		return pp_error(-EBADMSG,
				"%s: offset %d: header CRC-32 mismatch (expected 0x%08x, got 0x%08x)",
				path, PP_SH_CRC, pp_le32(h + PP_SH_CRC), crc);
	for (size_t k = PP_SH_SIZE; k < PP_SHARD_ALIGN; k++)
		if (h[k] != 0)
			return pp_error(-EBADMSG,
					"%s: offset %zu: header padding byte 0x%02x, expected 0", path,
					k, h[k]);
	info->dtype = (enum pp_dtype)pp_le32(h + PP_SH_DTYPE);
	info->ndim = pp_le32(h + PP_SH_NDIM);
	for (int d = 0; d < PP_MAX_DIMS; d++)
		info->shape[d] = pp_le32(h + PP_SH_SHAPE + 4 * d);
	if (info->dtype != PP_DTYPE_U8 && info->dtype != PP_DTYPE_F32)
		return pp_error(-EBADMSG, "%s: offset %d: dtype %u, expected 1 (u8) or 2 (f32)", path,
				PP_SH_DTYPE, (unsigned)info->dtype);
	if (info->ndim < 1 || info->ndim > PP_MAX_DIMS)
		return pp_error(-EBADMSG, "%s: offset %d: %u dimensions, expected 1..%d", path,
				PP_SH_NDIM, info->ndim, PP_MAX_DIMS);
	for (uint32_t d = 0; d < PP_MAX_DIMS; d++)
		if ((d < info->ndim) != (info->shape[d] != 0))
			return pp_error(-EBADMSG, "%s: offset %u: shape[%u] is %u, expected %s", path,
					PP_SH_SHAPE + 4 * d, d, info->shape[d],
					d < info->ndim ? "at least 1" : "0 (unused)");
	ret = pp_sample_info_finish(info);
	if (ret < 0 || info->sample_bytes > PP_SHARD_MAX_SAMPLE_BYTES)
		return pp_error(-EBADMSG, "%s: offset %d: a sample of this shape exceeds %zu bytes",
				path, PP_SH_SHAPE, PP_SHARD_MAX_SAMPLE_BYTES);
	snprintf(sh->layout.fields[0].name, PP_FIELD_NAME_MAX, "samples");
	sh->layout.fields[0].dtype = info->dtype;
	sh->layout.fields[0].ndim = info->ndim;
	memcpy(sh->layout.fields[0].shape, info->shape, sizeof(info->shape));
	sh->layout.fields[0].normalize = true;
	sh->layout.nfields = 1;
	return 0;
}

/* True when the n bytes at p are all zero; else *at_p is the first one that is not. */
static bool all_zero(const uint8_t *p, size_t n, size_t *at_p)
{
	for (size_t k = 0; k < n; k++)
		if (p[k] != 0) {
			*at_p = k;
			return false;
		}
	return true;
}

/* Version 2's header CRC and padding. */
static int check_crc_v2(struct pp_shard *sh, const uint8_t *h)
{
	uint32_t crc = pp_crc32(0, h, PP_SH2_CRC);
	size_t at;

	if (crc != pp_le32(h + PP_SH2_CRC))
		return pp_error(-EBADMSG,
				"%s: offset %d: header CRC-32 mismatch (expected 0x%08x, got 0x%08x)",
				sh->path, PP_SH2_CRC, pp_le32(h + PP_SH2_CRC), crc);
	if (!all_zero(h + PP_SH2_SIZE, PP_SHARD_ALIGN - PP_SH2_SIZE, &at))
		return pp_error(-EBADMSG, "%s: offset %zu: header padding byte 0x%02x, expected 0",
				sh->path, PP_SH2_SIZE + at, h[PP_SH2_SIZE + at]);
	return 0;
}

/* Version 2's record bound, decoder and layout. */
static int check_header_v2(struct pp_shard *sh, const uint8_t *h)
{
	const char *path = sh->path;
	struct pp_sample_info *info = &sh->info;
	uint32_t len, nfields;
	uint32_t max_fields = PP_MAX_FIELDS - (info->label_kind == PP_LABEL_CLASS);
	size_t at;

	if (!all_zero(h + PP_SH_DTYPE, PP_SH_LABEL_KIND - PP_SH_DTYPE, &at))
		return pp_error(-EBADMSG, "%s: offset %zu: byte 0x%02x, expected 0 (version 2 keeps "
				"dtype and shape in its layout)",
				path, PP_SH_DTYPE + at, h[PP_SH_DTYPE + at]);
	sh->max_record = pp_le32(h + PP_SH2_MAX_RECORD);
	if (sh->max_record < 1 || sh->max_record > PP_SHARD_MAX_SAMPLE_BYTES)
		return pp_error(-EBADMSG, "%s: offset %d: records of at most %u bytes, expected "
				"1..%zu", path, PP_SH2_MAX_RECORD, sh->max_record,
				PP_SHARD_MAX_SAMPLE_BYTES);
	len = pp_le32(h + PP_SH2_DECODER_LEN);
	if (len < 1 || len > PP_SHARD_DECODER_MAX)
		return pp_error(-EBADMSG, "%s: offset %d: decoder name of %u bytes, expected 1..%d",
				path, PP_SH2_DECODER_LEN, len, PP_SHARD_DECODER_MAX);
	for (uint32_t k = 0; k < len; k++) {
		uint8_t c = h[PP_SH2_DECODER + k];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return pp_error(-EBADMSG, "%s: offset %u: decoder name byte 0x%02x, expected "
					"a letter, a digit, '_', '.' or '-'",
					path, PP_SH2_DECODER + k, c);
	}
	if (!all_zero(h + PP_SH2_DECODER + len, 32 - len, &at))
		return pp_error(-EBADMSG, "%s: offset %zu: byte 0x%02x after the decoder name of %u "
				"bytes, expected 0", path, PP_SH2_DECODER + len + at,
				h[PP_SH2_DECODER + len + at], len);
	memcpy(sh->decoder, h + PP_SH2_DECODER, len);
	sh->decoder[len] = '\0';
	nfields = pp_le32(h + PP_SH2_NFIELDS);
	if (nfields < 1 || nfields > max_fields)
		return pp_error(-EBADMSG, "%s: offset %d: %u fields, expected 1..%u%s", path,
				PP_SH2_NFIELDS, nfields, max_fields,
				max_fields < PP_MAX_FIELDS ? " (and the labels)" : "");
	for (uint32_t f = 0; f < PP_MAX_FIELDS; f++) {
		const uint8_t *e = h + PP_SH2_FIELDS + (size_t)f * PP_SF_SIZE;
		struct pp_field *fd = &sh->layout.fields[f];
		size_t off = PP_SH2_FIELDS + (size_t)f * PP_SF_SIZE, n;
		uint32_t norm = pp_le32(e + PP_SF_NORMALIZE);

		if (f >= nfields) {
			if (!all_zero(e, PP_SF_SIZE, &at))
				return pp_error(-EBADMSG, "%s: offset %zu: byte 0x%02x in unused field "
						"entry %u, expected 0", path, off + at, e[at], f);
			continue;
		}
		n = strnlen((const char *)e + PP_SF_NAME, PP_FIELD_NAME_MAX);
		if (n == PP_FIELD_NAME_MAX ||
		    !all_zero(e + PP_SF_NAME + n, PP_FIELD_NAME_MAX - n, &at))
			return pp_error(-EBADMSG, "%s: offset %zu: field %u's name is not NUL-terminated "
					"and zero-padded", path, off + PP_SF_NAME, f);
		memcpy(fd->name, e + PP_SF_NAME, PP_FIELD_NAME_MAX);
		fd->dtype = (enum pp_dtype)pp_le32(e + PP_SF_DTYPE);
		fd->ndim = pp_le32(e + PP_SF_NDIM);
		for (int d = 0; d < PP_MAX_DIMS; d++)
			fd->shape[d] = pp_le32(e + PP_SF_SHAPE + 4 * d);
		fd->normalize = norm == 1;
		if (norm > 1 || pp_le32(e + PP_SF_RESERVED) != 0)
			return pp_error(-EBADMSG, "%s: offset %zu: field %u: normalize %u and reserved "
					"%u, expected 0 or 1, and 0", path, off + PP_SF_NORMALIZE, f,
					norm, pp_le32(e + PP_SF_RESERVED));
		for (uint32_t d = fd->ndim; d < PP_MAX_DIMS; d++)
			if (fd->shape[d] != 0)
				return pp_error(-EBADMSG, "%s: offset %zu: field %u: shape[%u] is %u past "
						"its %u dimensions, expected 0", path,
						off + PP_SF_SHAPE + 4 * d, f, d, fd->shape[d], fd->ndim);
	}
	sh->layout.nfields = nfields;
	if (pp_layout_check(&sh->layout) < 0)
		return pp_error(-EBADMSG, "%s: offset %d: bad %s", path, PP_SH2_FIELDS,
				pp_last_error());
	info->dtype = sh->layout.fields[0].dtype;
	info->ndim = sh->layout.fields[0].ndim;
	memcpy(info->shape, sh->layout.fields[0].shape, sizeof(info->shape));
	info->sample_bytes = pp_field_bytes(&sh->layout.fields[0]);
	return 0;
}

static int check_header(struct pp_shard *sh, const uint8_t *h)
{
	const char *path = sh->path;
	struct pp_sample_info *info = &sh->info;
	uint32_t version = pp_le32(h + PP_SH_VERSION);
	uint64_t chunks_min, chunks_max;
	size_t label_bytes;
	int ret;

	if (memcmp(h + PP_SH_MAGIC, PP_SHARD_MAGIC, 8) != 0)
		return pp_error(-EBADMSG, "%s: offset 0: magic is not \"PPSHARD\": not a pinpipe shard",
				path);
	if (version != PP_SHARD_VERSION && version != PP_SHARD_VERSION_RECORDS)
		return pp_error(-EPROTONOSUPPORT,
				"%s: offset %d: shard format version %u, this library reads versions "
				"%u and %u",
				path, PP_SH_VERSION, version, PP_SHARD_VERSION,
				PP_SHARD_VERSION_RECORDS);
	sh->version = version;
	info->label_kind = (enum pp_label_kind)pp_le32(h + PP_SH_LABEL_KIND);
	info->num_classes = pp_le32(h + PP_SH_NUM_CLASSES);
	info->count = pp_le64(h + PP_SH_RECORDS);
	sh->records_per_chunk = pp_le32(h + PP_SH_RECORDS_PER_CHUNK);
	sh->nchunks = pp_le64(h + PP_SH_CHUNKS);
	sh->compression = pp_le32(h + PP_SH_COMPRESSION);
	/* The CRC first (in the version's check), so that a damaged header says so. */
	ret = version == PP_SHARD_VERSION ? check_header_v1(sh, h) : check_crc_v2(sh, h);
	if (ret < 0)
		return ret;
	if (info->label_kind == PP_LABEL_NONE) {
		if (info->num_classes != 0)
			return pp_error(-EBADMSG, "%s: offset %d: %u classes without labels, expected 0",
					path, PP_SH_NUM_CLASSES, info->num_classes);
	} else if (info->label_kind == PP_LABEL_CLASS) {
		if (info->num_classes < 1 || info->num_classes > INT32_MAX)
			return pp_error(-EBADMSG, "%s: offset %d: %u classes, expected 1..%d", path,
					PP_SH_NUM_CLASSES, info->num_classes, INT32_MAX);
	} else {
		return pp_error(-EBADMSG, "%s: offset %d: label kind %u, expected 0 (none) or 1 (class)",
				path, PP_SH_LABEL_KIND, (unsigned)info->label_kind);
	}
	ret = version == PP_SHARD_VERSION_RECORDS ? check_header_v2(sh, h) : 0;
	if (ret < 0)
		return ret;
	if (info->label_kind == PP_LABEL_CLASS) {
		struct pp_field *lf = &sh->layout.fields[sh->layout.nfields++];

		snprintf(lf->name, PP_FIELD_NAME_MAX, "labels");
		lf->dtype = PP_DTYPE_I32;
		if (pp_layout_check(&sh->layout) < 0)
			return pp_error(-EBADMSG, "%s: offset %d: bad %s", path, PP_SH2_FIELDS,
					pp_last_error());
	}
	if (sh->compression != PP_SHARD_COMPRESSION_STORED &&
	    sh->compression != PP_SHARD_COMPRESSION_ZLIB)
		return pp_error(-EBADMSG, "%s: offset %d: compression %u, expected 0 (stored) or 1 (zlib)",
				path, PP_SH_COMPRESSION, sh->compression);
	label_bytes = pp_shard_label_bytes(sh, 1);
	/* Version 2: the fixed part of a record, its label and its END. */
	sh->record_bytes = label_bytes + (version == PP_SHARD_VERSION ? info->sample_bytes : 4);
	if (sh->records_per_chunk == 0 ||
	    (uint64_t)sh->records_per_chunk * sh->record_bytes > PP_SHARD_MAX_RAW)
		return pp_error(-EBADMSG,
				"%s: offset %d: %u records per chunk of %zu bytes each, expected 1 or "
				"more and at most 4 GiB per chunk",
				path, PP_SH_RECORDS_PER_CHUNK, sh->records_per_chunk, sh->record_bytes);
	chunks_min = info->count / sh->records_per_chunk +
		     (info->count % sh->records_per_chunk != 0);
	/* Version 2's chunks close early on their bytes: 1..R records each. */
	chunks_max = version == PP_SHARD_VERSION ? chunks_min : info->count;
	if (sh->nchunks < chunks_min || sh->nchunks > chunks_max) {
		if (chunks_min == chunks_max)
			return pp_error(-EBADMSG,
					"%s: offset %d: %llu chunks, expected %llu for %llu records of "
					"%u per chunk",
					path, PP_SH_CHUNKS, (unsigned long long)sh->nchunks,
					(unsigned long long)chunks_min, (unsigned long long)info->count,
					sh->records_per_chunk);
		return pp_error(-EBADMSG,
				"%s: offset %d: %llu chunks, expected %llu..%llu for %llu records of "
				"at most %u per chunk",
				path, PP_SH_CHUNKS, (unsigned long long)sh->nchunks,
				(unsigned long long)chunks_min, (unsigned long long)chunks_max,
				(unsigned long long)info->count, sh->records_per_chunk);
	}
	return 0;
}

static int check_trailer(struct pp_shard *sh, const uint8_t *t)
{
	const char *path = sh->path;
	uint64_t at = sh->file_size - PP_ST_SIZE;
	uint64_t index_offset = pp_le64(t + PP_ST_INDEX_OFFSET);
	uint64_t chunks = pp_le64(t + PP_ST_CHUNKS), size = pp_le64(t + PP_ST_FILE_SIZE);
	uint32_t crc = pp_crc32(0, t, PP_ST_CRC);

	if (memcmp(t + PP_ST_MAGIC, PP_SHARD_END_MAGIC, 8) != 0)
		return pp_error(-EBADMSG,
				"%s: offset %llu: no trailer magic \"PPSHEND\" in the last %d bytes: "
				"the file is truncated or damaged",
				path, (unsigned long long)at, PP_ST_SIZE);
	if (crc != pp_le32(t + PP_ST_CRC))
		return pp_error(-EBADMSG,
				"%s: offset %llu: trailer CRC-32 mismatch (expected 0x%08x, got 0x%08x)",
				path, (unsigned long long)(at + PP_ST_CRC), pp_le32(t + PP_ST_CRC), crc);
	if (size != sh->file_size)
		return pp_error(-EBADMSG,
				"%s: offset %llu: trailer gives a file of %llu bytes, the file has %llu",
				path, (unsigned long long)(at + PP_ST_FILE_SIZE),
				(unsigned long long)size, (unsigned long long)sh->file_size);
	if (chunks != sh->nchunks)
		return pp_error(-EBADMSG, "%s: offset %llu: trailer gives %llu chunks, the header %llu",
				path, (unsigned long long)(at + PP_ST_CHUNKS),
				(unsigned long long)chunks, (unsigned long long)sh->nchunks);
	if (index_offset % PP_SHARD_ALIGN != 0 || index_offset < PP_SHARD_ALIGN ||
	    index_offset > at || (at - index_offset) / PP_SI_SIZE != chunks ||
	    (at - index_offset) % PP_SI_SIZE != 0)
		return pp_error(-EBADMSG,
				"%s: offset %llu: index offset %llu, expected a multiple of %u with "
				"%llu entries of %d bytes between it and the trailer at %llu",
				path, (unsigned long long)(at + PP_ST_INDEX_OFFSET),
				(unsigned long long)index_offset, PP_SHARD_ALIGN,
				(unsigned long long)chunks, PP_SI_SIZE, (unsigned long long)at);
	sh->index_offset = index_offset;
	return 0;
}

static int check_index(struct pp_shard *sh, const uint8_t *index, uint32_t index_crc)
{
	const char *path = sh->path;
	uint64_t next = PP_SHARD_ALIGN, first = 0;
	uint32_t crc = pp_crc32(0, index, sh->nchunks * PP_SI_SIZE);

	if (crc != index_crc)
		return pp_error(-EBADMSG,
				"%s: offset %llu: chunk index CRC-32 mismatch (expected 0x%08x as the "
				"trailer gives, got 0x%08x)",
				path, (unsigned long long)sh->index_offset, index_crc, crc);
	for (uint64_t i = 0; i < sh->nchunks; i++) {
		const uint8_t *e = index + i * PP_SI_SIZE;
		struct pp_shard_chunk_info *c = &sh->chunks[i];
		uint64_t at = sh->index_offset + i * PP_SI_SIZE;
		uint32_t records = i + 1 < sh->nchunks ? sh->records_per_chunk
						       : (uint32_t)(sh->info.count - first);
		uint64_t end, fixed;

		c->offset = pp_le64(e + PP_SI_OFFSET);
		c->stored_size = pp_le32(e + PP_SI_STORED);
		c->raw_size = pp_le32(e + PP_SI_RAW);
		c->records = pp_le32(e + PP_SI_RECORDS);
		c->crc32 = pp_le32(e + PP_SI_CRC);
		c->first_record = pp_le64(e + PP_SI_FIRST);
		if (c->offset != next)
			return pp_error(-EBADMSG, "%s: chunk %llu index entry at offset %llu: chunk "
					"offset %llu, expected %llu",
					path, (unsigned long long)i, (unsigned long long)at,
					(unsigned long long)c->offset, (unsigned long long)next);
		if (sh->version == PP_SHARD_VERSION_RECORDS) {
			/* 1..R records, leaving at least one for each chunk after it. */
			uint64_t left = sh->info.count - first - (sh->nchunks - i - 1);

			if (c->first_record != first || c->records < 1 ||
			    c->records > sh->records_per_chunk || c->records > left ||
			    (i + 1 == sh->nchunks && c->records != left))
				return pp_error(-EBADMSG, "%s: chunk %llu index entry at offset %llu: "
						"records %llu..+%u, expected %llu..+(1..%llu)%s",
						path, (unsigned long long)i, (unsigned long long)at,
						(unsigned long long)c->first_record, c->records,
						(unsigned long long)first,
						(unsigned long long)PP_MIN(left, sh->records_per_chunk),
						i + 1 == sh->nchunks ? ", the rest of the shard" : "");
			records = c->records;
		} else if (c->records != records || c->first_record != first) {
			return pp_error(-EBADMSG, "%s: chunk %llu index entry at offset %llu: records "
					"%llu..+%u, expected %llu..+%u",
					path, (unsigned long long)i, (unsigned long long)at,
					(unsigned long long)c->first_record, c->records,
					(unsigned long long)first, records);
		}
		fixed = (uint64_t)records * sh->record_bytes;
		if (sh->version == PP_SHARD_VERSION ? c->raw_size != fixed
		    : c->raw_size < fixed || c->raw_size - fixed > (uint64_t)records * sh->max_record)
			return pp_error(-EBADMSG, "%s: chunk %llu index entry at offset %llu: raw size "
					"%u, expected %llu%s",
					path, (unsigned long long)i, (unsigned long long)at, c->raw_size,
					(unsigned long long)fixed,
					sh->version == PP_SHARD_VERSION ? ""
					: " (labels and ENDs) plus records of at most the bound each");
		if (sh->compression == PP_SHARD_COMPRESSION_STORED ? c->stored_size != c->raw_size
		    : (c->stored_size == 0 || c->raw_size > (uint64_t)c->stored_size *
					PP_DEFLATE_MAX_RATIO + PP_DEFLATE_MAX_SLACK))
			return pp_error(-EBADMSG, "%s: chunk %llu index entry at offset %llu: stored "
					"size %u cannot hold %u raw bytes (%s)",
					path, (unsigned long long)i, (unsigned long long)at,
					c->stored_size, c->raw_size,
					sh->compression == PP_SHARD_COMPRESSION_STORED ? "stored"
										      : "zlib");
		end = c->offset + c->stored_size;
		if (end > sh->index_offset)
			return pp_error(-EBADMSG, "%s: chunk %llu index entry at offset %llu: chunk ends "
					"at %llu, past the index at %llu",
					path, (unsigned long long)i, (unsigned long long)at,
					(unsigned long long)end, (unsigned long long)sh->index_offset);
		next = pp_shard_align_up(end);
		first += records;
		sh->max_span = PP_MAX(sh->max_span, next - c->offset);
	}
	if (next != sh->index_offset)
		return pp_error(-EBADMSG,
				"%s: offset %llu: the chunk index is at %llu, expected %llu after the "
				"last chunk",
				path, (unsigned long long)(sh->file_size - PP_ST_SIZE + PP_ST_INDEX_OFFSET),
				(unsigned long long)sh->index_offset, (unsigned long long)next);
	return 0;
}

PP_API int pp_shard_open(const char *path, struct pp_shard **shard_p)
{
	uint8_t *header, trailer[PP_ST_SIZE], *index = NULL;
	struct pp_shard *sh;
	struct stat st;
	size_t index_len;
	int ret;

	sh = pp_calloc(1, sizeof(*sh));
	if (sh == NULL)
		return pp_error(-ENOMEM, "%s: no memory", path);
	sh->path = strdup(path);
	header = pp_malloc(PP_SHARD_ALIGN);
	if (sh->path == NULL || header == NULL) {
		ret = pp_error(-ENOMEM, "%s: no memory", path);
		goto err_free;
	}
	sh->fd = pp_open_regular(path, &st);
	if (sh->fd < 0) {
		ret = sh->fd;
		goto err_free;
	}
	sh->file_size = (uint64_t)st.st_size;
	if (sh->file_size == 0) {
		ret = pp_error(-EBADMSG, "%s: empty file, expected a pinpipe shard", path);
		goto err_close;
	}
	if (sh->file_size >= 8) {
		ret = pp_pread_full(sh->fd, path, header, 8, 0);
		if (ret < 0)
			goto err_close;
		if (memcmp(header, PP_SHARD_MAGIC, 8) != 0) {
			ret = pp_error(-EBADMSG,
				       "%s: offset 0: magic is not \"PPSHARD\": not a pinpipe shard", path);
			goto err_close;
		}
	}
	if (sh->file_size < PP_SHARD_ALIGN + PP_ST_SIZE) {
		ret = pp_error(-EBADMSG,
			       "%s: %llu bytes, shorter than the smallest shard (%u: header block "
			       "and trailer): truncated",
			       path, (unsigned long long)sh->file_size, PP_SHARD_ALIGN + PP_ST_SIZE);
		goto err_close;
	}
	ret = pp_pread_full(sh->fd, path, header, PP_SHARD_ALIGN, 0);
	if (ret < 0)
		goto err_close;
	ret = check_header(sh, header);
	if (ret < 0)
		goto err_close;
	ret = pp_pread_full(sh->fd, path, trailer, PP_ST_SIZE, sh->file_size - PP_ST_SIZE);
	if (ret < 0)
		goto err_close;
	ret = check_trailer(sh, trailer);
	if (ret < 0)
		goto err_close;
	/* The trailer check bounds nchunks by the file size: these sizes are real. */
	index_len = (size_t)sh->nchunks * PP_SI_SIZE;
	index = pp_malloc(PP_MAX(index_len, 1));
	sh->chunks = pp_calloc(PP_MAX(sh->nchunks, 1), sizeof(*sh->chunks));
	if (index == NULL || sh->chunks == NULL) {
		ret = pp_error(-ENOMEM, "%s: no memory for an index of %llu chunks", path,
			       (unsigned long long)sh->nchunks);
		goto err_close;
	}
	ret = pp_pread_full(sh->fd, path, index, index_len, sh->index_offset);
	if (ret < 0)
		goto err_close;
	ret = check_index(sh, index, pp_le32(trailer + PP_ST_INDEX_CRC));
	if (ret < 0)
		goto err_close;
	ret = pp_inflater_create(&sh->inf);
	if (ret < 0) {
		ret = pp_error(ret, "%s: no memory for an inflater", path);
		goto err_close;
	}
	free(index);
	free(header);
	*shard_p = sh;
	return 0;

err_close:
	close(sh->fd);
err_free:
	free(index);
	free(header);
	free(sh->chunks);
	free(sh->path);
	free(sh);
	return ret;
}

PP_API void pp_shard_close(struct pp_shard *shard)
{
	if (shard == NULL)
		return;
	close(shard->fd);
	pp_inflater_destroy(shard->inf);
	free(shard->stored);
	free(shard->raw);
	free(shard->chunks);
	free(shard->path);
	free(shard);
}

PP_API const struct pp_sample_info *pp_shard_info(const struct pp_shard *shard)
{
	return &shard->info;
}

PP_API uint64_t pp_shard_chunk_count(const struct pp_shard *shard)
{
	return shard->nchunks;
}

PP_API uint32_t pp_shard_version(const struct pp_shard *shard)
{
	return shard->version;
}

PP_API const struct pp_layout *pp_shard_layout(const struct pp_shard *shard)
{
	return &shard->layout;
}

PP_API const char *pp_shard_decoder(const struct pp_shard *shard)
{
	return shard->version == PP_SHARD_VERSION_RECORDS ? shard->decoder : NULL;
}

PP_API uint32_t pp_shard_max_record(const struct pp_shard *shard)
{
	return shard->max_record;
}

PP_API const char *pp_shard_path(const struct pp_shard *shard)
{
	return shard->path;
}

PP_API int pp_shard_chunk(const struct pp_shard *shard, uint64_t i,
			  struct pp_shard_chunk_info *info_p)
{
	if (i >= shard->nchunks)
		return pp_error(-ERANGE, "%s: chunk %llu, the shard has %llu", shard->path,
				(unsigned long long)i, (unsigned long long)shard->nchunks);
	*info_p = shard->chunks[i];
	return 0;
}

/* Checks the END table of version 2's decoded chunk i (shard_format.h). */
static int check_ends(const struct pp_shard *shard, uint64_t i, const uint8_t *raw)
{
	const struct pp_shard_chunk_info *c = &shard->chunks[i];
	size_t label_bytes = pp_shard_label_bytes(shard, c->records);
	size_t table = label_bytes, area_at = table + 4 * (size_t)c->records;
	uint64_t area = c->raw_size - area_at; /* the index check keeps it >= 0 */
	uint32_t prev = 0;

	for (uint32_t r = 0; r < c->records; r++) {
		uint32_t end = pp_le32(raw + table + 4 * (size_t)r);

		if (end < prev || end - prev > shard->max_record || end > area)
			return pp_error(-EBADMSG,
					"%s: chunk %llu at offset %llu: record %llu: END %u at byte "
					"%zu of the decoded chunk, expected %u..%llu (the record's start, "
					"at most %u bytes on, within the %llu bytes of records)",
					shard->path, (unsigned long long)i,
					(unsigned long long)c->offset,
					(unsigned long long)(c->first_record + r), end,
					table + 4 * (size_t)r, prev,
					(unsigned long long)PP_MIN(area, (uint64_t)prev + shard->max_record),
					shard->max_record, (unsigned long long)area);
		prev = end;
	}
	if (prev != area)
		return pp_error(-EBADMSG,
				"%s: chunk %llu at offset %llu: the last record ends at %u (byte %zu of "
				"the decoded chunk), the chunk holds %llu bytes of records",
				shard->path, (unsigned long long)i, (unsigned long long)c->offset, prev,
				area_at - 4, (unsigned long long)area);
	return 0;
}

const uint8_t *pp_shard_record(const void *raw, uint32_t records, size_t label_bytes, uint32_t r,
			       size_t *len_p)
{
	const uint8_t *table = (const uint8_t *)raw + label_bytes;
	uint32_t start = r > 0 ? pp_le32(table + 4 * (size_t)(r - 1)) : 0;

	*len_p = pp_le32(table + 4 * (size_t)r) - start;
	return table + 4 * (size_t)records + start;
}

int pp_shard_decode_chunk(const struct pp_shard *shard, uint64_t i, const void *stored,
			  void *raw, struct pp_inflater *inf)
{
	const struct pp_shard_chunk_info *c = &shard->chunks[i];
	uint32_t crc = pp_crc32(0, stored, c->stored_size);
	const uint8_t *lab = raw;

	if (crc != c->crc32)
		return pp_error(-EBADMSG,
				"%s: chunk %llu at offset %llu: CRC-32 mismatch (expected 0x%08x, got "
				"0x%08x)",
				shard->path, (unsigned long long)i, (unsigned long long)c->offset,
				c->crc32, crc);
	if (shard->compression == PP_SHARD_COMPRESSION_ZLIB) {
		int ret = pp_inflate(inf, stored, c->stored_size, raw, c->raw_size);

		if (ret == -ENOMEM)
			return pp_error(-ENOMEM, "%s: chunk %llu at offset %llu: no memory to inflate it",
					shard->path, (unsigned long long)i,
					(unsigned long long)c->offset);
		if (ret < 0)
			return pp_error(-EBADMSG,
					"%s: chunk %llu at offset %llu: zlib stream is corrupt or does "
					"not decode to %u bytes",
					shard->path, (unsigned long long)i,
					(unsigned long long)c->offset, c->raw_size);
	} else if (stored != raw) {
		memcpy(raw, stored, c->raw_size);
	}
	if (shard->version == PP_SHARD_VERSION_RECORDS) {
		int ret = check_ends(shard, i, raw);

		if (ret < 0)
			return ret;
	}
	if (shard->info.label_kind == PP_LABEL_CLASS)
		for (uint32_t r = 0; r < c->records; r++) {
			uint32_t label = pp_le32(lab + 4 * (size_t)r);

			if (label >= shard->info.num_classes)
				return pp_error(-EBADMSG,
						"%s: chunk %llu at offset %llu: record %llu has label "
						"%d, expected 0..%u",
						shard->path, (unsigned long long)i,
						(unsigned long long)c->offset,
						(unsigned long long)(c->first_record + r), (int32_t)label,
						shard->info.num_classes - 1);
		}
	return 0;
}

/* Allocates the scratch buffers on first use. */
static int ensure_scratch(struct pp_shard *sh)
{
	uint64_t max_raw = 0;

	if (sh->stored != NULL)
		return 0;
	for (uint64_t i = 0; i < sh->nchunks; i++)
		max_raw = PP_MAX(max_raw, sh->chunks[i].raw_size);
	sh->stored = pp_malloc(PP_MAX(sh->max_span, 1));
	sh->raw = pp_malloc(PP_MAX(max_raw, 1));
	if (sh->stored == NULL || sh->raw == NULL) {
		free(sh->stored);
		free(sh->raw);
		sh->stored = sh->raw = NULL;
		return pp_error(-ENOMEM, "%s: no memory for a chunk", sh->path);
	}
	return 0;
}

/* Reads chunk i into the shard's scratch and decodes it there (shard->raw); its entry in *c_p. */
static int read_decoded(struct pp_shard *shard, uint64_t i, const struct pp_shard_chunk_info **c_p)
{
	const struct pp_shard_chunk_info *c;
	int ret;

	if (i >= shard->nchunks)
		return pp_error(-ERANGE, "%s: chunk %llu, the shard has %llu", shard->path,
				(unsigned long long)i, (unsigned long long)shard->nchunks);
	ret = ensure_scratch(shard);
	if (ret < 0)
		return ret;
	c = &shard->chunks[i];
	ret = pp_pread_full(shard->fd, shard->path, shard->stored, c->stored_size, c->offset);
	if (ret < 0)
		return ret;
	ret = pp_shard_decode_chunk(shard, i, shard->stored, shard->raw, shard->inf);
	if (ret < 0)
		return ret;
	*c_p = c;
	return 0;
}

PP_API int pp_shard_read_chunk(struct pp_shard *shard, uint64_t i, void *samples,
			       int32_t *labels)
{
	const struct pp_shard_chunk_info *c;
	size_t label_bytes;
	int ret;

	if (shard->version != PP_SHARD_VERSION)
		return pp_error(-EINVAL, "%s: a version %u shard holds records of any length for "
				"the decoder \"%s\", not fixed-size samples: read them with "
				"pp_shard_read_records() or a loader",
				shard->path, shard->version, shard->decoder);
	if ((ret = read_decoded(shard, i, &c)) < 0)
		return ret;
	label_bytes = pp_shard_label_bytes(shard, c->records);
	if (labels != NULL && label_bytes > 0)
		memcpy(labels, shard->raw, label_bytes);
	memcpy(samples, shard->raw + label_bytes, c->raw_size - label_bytes);
	return 0;
}

PP_API int pp_shard_read_records(struct pp_shard *shard, uint64_t i,
				 int (*fn)(void *arg, uint64_t record, const void *bytes,
					   size_t len, int32_t label),
				 void *arg)
{
	const struct pp_shard_chunk_info *c;
	size_t label_bytes;
	int ret;

	if (shard->version != PP_SHARD_VERSION_RECORDS)
		return pp_error(-EINVAL, "%s: a version %u shard holds fixed-size samples, not "
				"records: read them with pp_shard_read_chunk()",
				shard->path, shard->version);
	if ((ret = read_decoded(shard, i, &c)) < 0)
		return ret;
	label_bytes = pp_shard_label_bytes(shard, c->records);
	for (uint32_t r = 0; r < c->records; r++) {
		size_t len;
		const uint8_t *bytes = pp_shard_record(shard->raw, c->records, label_bytes, r, &len);
		int32_t label = label_bytes > 0 ? (int32_t)pp_le32(shard->raw + 4 * (size_t)r) : -1;

		ret = fn(arg, c->first_record + r, bytes, len, label);
		if (ret != 0)
			return ret;
	}
	return 0;
}

PP_API int pp_shard_verify(struct pp_shard *shard)
{
	int ret = ensure_scratch(shard);

	if (ret < 0)
		return ret;
	for (uint64_t i = 0; i < shard->nchunks; i++) {
		const struct pp_shard_chunk_info *c = &shard->chunks[i];
		uint64_t span = pp_shard_align_up(c->offset + c->stored_size) - c->offset;

		ret = pp_pread_full(shard->fd, shard->path, shard->stored, span, c->offset);
		if (ret < 0)
			return ret;
		for (uint64_t k = c->stored_size; k < span; k++)
			if (shard->stored[k] != 0)
				return pp_error(-EBADMSG,
						"%s: chunk %llu: padding byte at offset %llu is 0x%02x, "
						"expected 0",
						shard->path, (unsigned long long)i,
						(unsigned long long)(c->offset + k), shard->stored[k]);
		ret = pp_shard_decode_chunk(shard, i, shard->stored, shard->raw, shard->inf);
		if (ret < 0)
			return ret;
	}
	return 0;
}
