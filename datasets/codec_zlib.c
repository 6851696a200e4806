/*
 * datasets/codec_zlib.c: the codecs of codec.h on zlib, for builds without
 * libdeflate; pp_crc32() on zlib's crc32() too.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include <zlib.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "datasets/codec.h"

/* zlib counts in uInt: feed it at most this much at a time. */
#define PP_ZLIB_STEP ((size_t)1 << 30)

struct pp_inflater {
	z_stream zs;
	int window_bits; /* of the stream zs was initialised for: 15 zlib, 31 gzip; 0 none */
};

struct pp_deflater {
	int level; /* 1..9 */
};

uint32_t pp_crc32(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len > 0) {
		uInt n = len > PP_ZLIB_STEP ? (uInt)PP_ZLIB_STEP : (uInt)len;
		crc = (uint32_t)crc32(crc, p, n);
		p += n;
		len -= n;
	}
	return crc;
}

int pp_inflater_create(struct pp_inflater **inf_p)
{
	struct pp_inflater *inf = pp_calloc(1, sizeof(*inf));

	if (inf == NULL)
		return pp_error(-ENOMEM, "no memory for a decompressor");
	*inf_p = inf;
	return 0;
}

void pp_inflater_destroy(struct pp_inflater *inf)
{
	if (inf == NULL)
		return;
	if (inf->window_bits != 0)
		inflateEnd(&inf->zs);
	free(inf);
}

/* Inflates one whole stream of the kind 'window_bits' says into exactly dst_len bytes. */
static int inflate_exact(struct pp_inflater *inf, int window_bits, const void *src,
			 size_t src_len, void *dst, size_t dst_len)
{
	z_stream *zs = &inf->zs;
	size_t in_left = src_len, out_left = dst_len;
	int zret;

	if (inf->window_bits != window_bits) {
		if (inf->window_bits != 0)
			inflateEnd(zs);
		inf->window_bits = 0;
		memset(zs, 0, sizeof(*zs));
		if (inflateInit2(zs, window_bits) != Z_OK)
			return -ENOMEM;
		inf->window_bits = window_bits;
	} else if (inflateReset(zs) != Z_OK) {
		return -EBADMSG;
	}
	zs->next_in = (Bytef *)(uintptr_t)src;
	zs->next_out = dst;
	do {
		size_t in_step = PP_MIN(in_left, PP_ZLIB_STEP);
		size_t out_step = PP_MIN(out_left, PP_ZLIB_STEP);
		size_t in_used, out_used;

		zs->avail_in = (uInt)in_step;
		zs->avail_out = (uInt)out_step;
		zret = inflate(zs, Z_NO_FLUSH);
		in_used = in_step - zs->avail_in;
		out_used = out_step - zs->avail_out;
		in_left -= in_used;
		out_left -= out_used;
		if (zret == Z_BUF_ERROR && in_used == 0 && out_used == 0)
			return -EBADMSG;
		if (zret == Z_MEM_ERROR)
			return -ENOMEM;
		if (zret != Z_OK && zret != Z_STREAM_END && zret != Z_BUF_ERROR)
			return -EBADMSG;
	} while (zret != Z_STREAM_END);
	return in_left == 0 && out_left == 0 ? 0 : -EBADMSG;
}

int pp_inflate(struct pp_inflater *inf, const void *src, size_t src_len, void *dst,
	       size_t dst_len)
{
	return inflate_exact(inf, 15, src, src_len, dst, dst_len);
}

int pp_gunzip(struct pp_inflater *inf, const void *src, size_t src_len, void *dst,
	      size_t dst_len)
{
	return inflate_exact(inf, 16 + 15, src, src_len, dst, dst_len);
}

int pp_deflater_create(int level, struct pp_deflater **def_p)
{
	struct pp_deflater *def;

	if (level < 1 || level > 9)
		return -EINVAL;
	def = pp_calloc(1, sizeof(*def));
	if (def == NULL)
		return pp_error(-ENOMEM, "no memory for a compressor");
	def->level = level;
	*def_p = def;
	return 0;
}

void pp_deflater_destroy(struct pp_deflater *def)
{
	free(def);
}

size_t pp_deflate_bound(struct pp_deflater *def, size_t src_len)
{
	return (size_t)compressBound((uLong)src_len);
}

int pp_deflate(struct pp_deflater *def, const void *src, size_t src_len, void *dst,
	       size_t dst_cap, size_t *len_p)
{
	uLongf n = (uLongf)dst_cap;

	if (compress2(dst, &n, src, (uLong)src_len, def->level) != Z_OK)
		return -EIO;
	*len_p = (size_t)n;
	return 0;
}
