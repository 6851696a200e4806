/*
 * common/crc32.c: CRC-32 of chunks and files.  libdeflate's implementation
 * (carry-less multiply where the CPU has it) is several times faster than
 * zlib's; both compute the same function.
 */
#include "config.h"

#include <zlib.h>
#ifdef PP_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include "common/internal.h"

uint32_t pp_crc32(uint32_t crc, const void *buf, size_t len)
{
#ifdef PP_HAVE_LIBDEFLATE
	return libdeflate_crc32(crc, buf, len);
#else
	const unsigned char *p = buf;
	while (len > 0) {
		uInt n = len > (1u << 30) ? 1u << 30 : (uInt)len;
		crc = (uint32_t)crc32(crc, p, n);
		p += n;
		len -= n;
	}
	return crc;
#endif
}
