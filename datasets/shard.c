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
#include "common/internal.h"
#include "datasets/codec.h"
#include "datasets/shard.h"
#include "datasets/shard_format.h"
#include "datasets/source.h"

struct pp_shard {
	int fd;
	char *path;
	struct pp_sample_info info;
	uint32_t records_per_chunk;         /* records in every chunk but the last */
	uint32_t compression;               /* PP_SHARD_COMPRESSION_* */
	size_t record_bytes;                /* label bytes + sample_bytes */
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

static int check_header(struct pp_shard *sh, const uint8_t *h)
{
	const char *path = sh->path;
	struct pp_sample_info *info = &sh->info;
	uint32_t version = pp_le32(h + PP_SH_VERSION), crc;
	uint64_t chunks_expected;
	size_t label_bytes;
	int ret;

	if (memcmp(h + PP_SH_MAGIC, PP_SHARD_MAGIC, 8) != 0)
		return pp_error(-EBADMSG, "%s: offset 0: magic is not \"PPSHARD\": not a pinpipe shard",
				path);
	if (version != PP_SHARD_VERSION)
		return pp_error(-EPROTONOSUPPORT,
				"%s: offset %d: shard format version %u, this library reads version %u",
				path, PP_SH_VERSION, version, PP_SHARD_VERSION);
	crc = pp_crc32(0, h, PP_SH_CRC);
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
	info->label_kind = (enum pp_label_kind)pp_le32(h + PP_SH_LABEL_KIND);
	info->num_classes = pp_le32(h + PP_SH_NUM_CLASSES);
	info->count = pp_le64(h + PP_SH_RECORDS);
	sh->records_per_chunk = pp_le32(h + PP_SH_RECORDS_PER_CHUNK);
	sh->nchunks = pp_le64(h + PP_SH_CHUNKS);
	sh->compression = pp_le32(h + PP_SH_COMPRESSION);

	if (pp_dtype_size(info->dtype) == 0)
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
	if (sh->compression != PP_SHARD_COMPRESSION_STORED &&
	    sh->compression != PP_SHARD_COMPRESSION_ZLIB)
		return pp_error(-EBADMSG, "%s: offset %d: compression %u, expected 0 (stored) or 1 (zlib)",
				path, PP_SH_COMPRESSION, sh->compression);
	label_bytes = pp_shard_label_bytes(sh, 1);
	sh->record_bytes = label_bytes + info->sample_bytes;
	if (sh->records_per_chunk == 0 ||
	    (uint64_t)sh->records_per_chunk * sh->record_bytes > PP_SHARD_MAX_RAW)
		return pp_error(-EBADMSG,
				"%s: offset %d: %u records per chunk of %zu bytes each, expected 1 or "
				"more and at most 4 GiB per chunk",
				path, PP_SH_RECORDS_PER_CHUNK, sh->records_per_chunk, sh->record_bytes);
	chunks_expected = info->count / sh->records_per_chunk +
			  (info->count % sh->records_per_chunk != 0);
	if (sh->nchunks != chunks_expected)
		return pp_error(-EBADMSG,
				"%s: offset %d: %llu chunks, expected %llu for %llu records of %u per chunk",
				path, PP_SH_CHUNKS, (unsigned long long)sh->nchunks,
				(unsigned long long)chunks_expected, (unsigned long long)info->count,
				sh->records_per_chunk);
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
		uint64_t end;

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
		if (c->records != records || c->first_record != first)
			return pp_error(-EBADMSG, "%s: chunk %llu index entry at offset %llu: records "
					"%llu..+%u, expected %llu..+%u",
					path, (unsigned long long)i, (unsigned long long)at,
					(unsigned long long)c->first_record, c->records,
					(unsigned long long)first, records);
		if ((uint64_t)c->raw_size != (uint64_t)records * sh->record_bytes)
			return pp_error(-EBADMSG, "%s: chunk %llu index entry at offset %llu: raw size "
					"%u, expected %llu",
					path, (unsigned long long)i, (unsigned long long)at, c->raw_size,
					(unsigned long long)records * sh->record_bytes);
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

PP_API int pp_shard_read_chunk(struct pp_shard *shard, uint64_t i, void *samples,
			       int32_t *labels)
{
	const struct pp_shard_chunk_info *c;
	size_t label_bytes;
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
	label_bytes = pp_shard_label_bytes(shard, c->records);
	if (labels != NULL && label_bytes > 0)
		memcpy(labels, shard->raw, label_bytes);
	memcpy(samples, shard->raw + label_bytes, c->raw_size - label_bytes);
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
