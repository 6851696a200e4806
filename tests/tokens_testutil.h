/*
 * tests/tokens_testutil.h: llm.c's token shards as the tests write them
 * (test_tokens, test_llmc), as llm.c's data_common.py does: a header of
 * 256 int32 (magic, version, count), then the tokens.
 */
#ifndef PP_TESTS_TOKENS_TESTUTIL_H
#define PP_TESTS_TOKENS_TESTUTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pinpipe/tokens.h"
#include "tests/testutil.h"

/* Writes shard s of n tokens of tb bytes (2: GPT-2's, 4: Llama 3's), token j being tok(s, j, tb). */
static inline void pp_test_write_tokens(const char *path, size_t s, uint64_t n, uint32_t tb,
					uint32_t (*tok)(size_t s, uint64_t j, uint32_t tb))
{
	size_t len = 1024 + n * tb;
	uint8_t *buf = calloc(1, len);
	int32_t h[3] = { tb == 2 ? PP_TOKENS_MAGIC_GPT2 : PP_TOKENS_MAGIC_LLAMA3,
			 tb == 2 ? PP_TOKENS_VERSION_GPT2 : PP_TOKENS_VERSION_LLAMA3, (int32_t)n };

	ck_assert_ptr_nonnull(buf);
	memcpy(buf, h, sizeof(h));
	for (uint64_t j = 0; j < n; j++) {
		uint32_t v = tok(s, j, tb);
		if (tb == 2) {
			uint16_t u = (uint16_t)v;
			memcpy(buf + 1024 + j * 2, &u, 2);
		} else {
			memcpy(buf + 1024 + j * 4, &v, 4);
		}
	}
	pp_test_write_file(path, buf, len);
	free(buf);
}

#endif
