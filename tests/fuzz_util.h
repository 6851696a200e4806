/*
 * tests/fuzz_util.h: what several fuzz targets share: writing an input to a
 * scratch file, and making a would-be shard's CRCs right so that the
 * parsers behind them are reached.
 */
#ifndef PP_TESTS_FUZZ_UTIL_H
#define PP_TESTS_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/common_impl.h"
#include "datasets/shard.h"
#include "datasets/shard_format.h"

/* Writes data[0..len) to path, replacing it; aborts (a fuzzer's crash) when it cannot. */
static inline void pp_fuzz_put(const char *path, const uint8_t *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	if (f == NULL)
		abort();
	if (len > 0 && fwrite(data, 1, len, f) != len)
		abort();
	fclose(f);
}

/*
 * Recomputes the header (version 1's or 2's), chunk, index and trailer
 * CRCs of a would-be shard, where they lie inside it.
 */
static inline void pp_fuzz_fix_crcs(uint8_t *f, size_t len)
{
	uint8_t *t = f + len - PP_ST_SIZE;
	uint64_t index_offset, n;

	if (len < PP_SHARD_ALIGN + PP_ST_SIZE)
		return;
	if (pp_le32(f + PP_SH_VERSION) == PP_SHARD_VERSION_RECORDS)
		pp_put_le32(f + PP_SH2_CRC, pp_crc32(0, f, PP_SH2_CRC));
	else
		pp_put_le32(f + PP_SH_CRC, pp_crc32(0, f, PP_SH_CRC));
	index_offset = pp_le64(t + PP_ST_INDEX_OFFSET);
	if (index_offset <= len - PP_ST_SIZE) {
		n = (len - PP_ST_SIZE - index_offset) / PP_SI_SIZE;
		for (uint64_t i = 0; i < n; i++) {
			uint8_t *e = f + index_offset + i * PP_SI_SIZE;
			uint64_t off = pp_le64(e + PP_SI_OFFSET), size = pp_le32(e + PP_SI_STORED);

			if (off <= len && size <= len - off)
				pp_put_le32(e + PP_SI_CRC, pp_crc32(0, f + off, size));
		}
		pp_put_le32(t + PP_ST_INDEX_CRC, pp_crc32(0, f + index_offset, n * PP_SI_SIZE));
	}
	pp_put_le32(t + PP_ST_CRC, pp_crc32(0, t, PP_ST_CRC));
}

#endif
