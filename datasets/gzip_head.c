/*
 * datasets/gzip_head.c: reads the first bytes of a gzip stream with zlib, so
 * that a file's header can be checked before the whole file is inflated.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include <zlib.h>

#include "common/common_impl.h"
#include "datasets/codec.h"

int pp_gunzip_head(const void *src, size_t src_len, void *dst, size_t dst_len)
{
	z_stream zs;
	int zret, ret = 0;

	memset(&zs, 0, sizeof(zs));
	if (inflateInit2(&zs, 16 + 15) != Z_OK)
		return -ENOMEM;
	zs.next_in = (Bytef *)(uintptr_t)src;
	zs.avail_in = (uInt)PP_MIN(src_len, (size_t)1 << 30);
	zs.next_out = dst;
	zs.avail_out = (uInt)dst_len;
	while (zs.avail_out > 0) {
		zret = inflate(&zs, Z_NO_FLUSH);
		if (zret == Z_STREAM_END) {
			if (zs.avail_out > 0)
				ret = -EBADMSG;
			break;
		}
		if (zret != Z_OK) {
			ret = zret == Z_MEM_ERROR ? -ENOMEM : -EBADMSG;
			break;
		}
	}
	inflateEnd(&zs);
	return ret;
}
