/*
 * tests/fuzz_tokens.c: a libFuzzer target for the token shard reader
 * (pinpipe/tokens.h).  The first input byte is the mode, the rest the file:
 *   bits 0-1: 0 the file as given; 1 its token count set to what its size
 *             holds as uint16 and 2 as uint32 (magic and version left as
 *             given), so that the windows are reached; 3 a second shard of
 *             the other version beside it, which must be refused
 *   bit 2:    widen to int32
 *   bits 3-7: the window, T = 1 + (bits >> 3)
 * An accepted set is read to the end through a loader of one worker (pread,
 * for valgrind), every window's targets checked to be its inputs shifted,
 * and its counts checked against the file's size.  Any crash, leak,
 * sanitizer report, hang or broken promise (abort) is a bug; rejection is
 * not.  Built by `make fuzz` (tests/fuzz.inc); replayed over
 * tests/corpus/fuzz_tokens by `make check` through tests/fuzz_replay.c.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pinpipe/loader.h"
#include "pinpipe/tokens.h"
#include "tests/fuzz_util.h"

/* Reads every window of the set; aborts when a promise of pinpipe/tokens.h breaks. */
static void read_all(struct pp_tokens *tk, uint32_t T, bool widen, size_t file_len)
{
	const struct pp_tokens_info *info = pp_tokens_get_info(tk);
	struct pp_loader_config cfg = { .source = pp_tokens_source(tk), .batch_size = 3,
					.workers = 1, .shuffle = true };
	size_t tb = info->token_bytes, eb = widen ? 4 : tb;
	struct pp_loader *l;
	struct pp_batch *b;
	uint64_t seen = 0;
	int ret = -1;

	if (info->nshards != 1 || info->windows != (info->tokens - 1) / T ||
	    file_len != 1024 + info->tokens * tb)
		abort();
	if (pp_loader_create(&cfg, &l) < 0)
		return;
	if (pp_loader_begin_epoch(l, 0) == 0) {
		while ((ret = pp_loader_next(l, &b)) == 1) {
			for (uint32_t k = 0; k < b->size; k++)
				if (memcmp((uint8_t *)b->fields[0] + (k * T + 1) * eb,
					   (uint8_t *)b->fields[1] + k * T * eb, (T - 1) * eb) != 0)
					abort();
			seen += b->size;
			pp_loader_release(l, b);
		}
	}
	pp_loader_destroy(l);
	/* an epoch that ends without an error has every window once */
	if (ret == 0 && seen != info->windows)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	char dir[64], path[128], other[128], pattern[128];
	uint32_t mode, T;
	bool widen;
	uint8_t *f;
	struct pp_tokens *tk;
	struct pp_tokens_config tc = { 0 };

	if (len < 1)
		return 0;
	snprintf(dir, sizeof(dir), "/tmp/pp-fuzz-tokens-%d", (int)getpid());
	if (mkdir(dir, 0700) != 0 && access(dir, F_OK) != 0)
		abort();
	mode = data[0] & 3;
	widen = data[0] & 4;
	T = 1 + (data[0] >> 3);
	data++, len--;
	f = malloc(len ? len : 1);
	if (f == NULL)
		abort();
	memcpy(f, data, len);
	if ((mode == 1 || mode == 2) && len >= 12) {
		uint32_t n = (uint32_t)((len > 1024 ? len - 1024 : 0) / (mode * 2));
		memcpy(f + 8, &n, 4);
	}
	snprintf(path, sizeof(path), "%s/shard_000.bin", dir);
	snprintf(other, sizeof(other), "%s/shard_001.bin", dir);
	snprintf(pattern, sizeof(pattern), "%s/shard_*.bin", dir);
	pp_fuzz_put(path, f, len);
	if (mode == 3) {
		/* a valid shard of the version the first is not: the set is refused */
		int32_t two[256 + 4] = { 0 };
		bool v1 = len >= 4 && memcmp(f, &(int32_t){ PP_TOKENS_MAGIC_GPT2 }, 4) == 0;
		two[0] = v1 ? PP_TOKENS_MAGIC_LLAMA3 : PP_TOKENS_MAGIC_GPT2;
		two[1] = v1 ? PP_TOKENS_VERSION_LLAMA3 : PP_TOKENS_VERSION_GPT2;
		two[2] = 4;
		pp_fuzz_put(other, (const uint8_t *)two, 1024 + (size_t)4 * (v1 ? 4 : 2));
	}
	tc.seq_len = T;
	tc.widen = widen;
	tc.io = PP_LOADER_IO_PREAD;
	tc.io_depth = 2;
	if (pp_tokens_open(pattern, &tc, &tk) == 0) {
		if (mode == 3)
			abort();
		read_all(tk, T, widen, len);
		pp_tokens_close(tk);
	}
	unlink(path);
	unlink(other);
	rmdir(dir);
	free(f);
	return 0;
}
