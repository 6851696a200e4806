/*
 * tests/test_tokens.c: llm.c's token shards (pinpipe/tokens.h): every bad
 * header refused with its file and offset, and the windows through the
 * loader: each token checked against the function that wrote it (targets =
 * inputs shifted), every window once per epoch on 1, 2 and 3 ranks, the same
 * batches at 0, 1 and 2 workers and after a resume (at the same and at
 * another rank count), both token sizes, as stored and widened.
 *
 * Token j of shard s is tok(s, j), so a window's place in the set is known
 * from its index alone and any misplaced or shifted token fails a test.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pinpipe/loader.h"
#include "pinpipe/tokens.h"
#include "tests/testutil.h"
#include "tests/tokens_testutil.h"

/* Token j of shard s: above 65535 for uint32 shards, so a narrowing shows. */
static uint32_t tok(size_t s, uint64_t j, uint32_t tb)
{
	uint32_t v = (uint32_t)(s * 7919 + j * 13 + 1);
	return tb == 2 ? (uint16_t)v : v + 70000u;
}

/* Shard sizes of the sets: windows of T = 16: 12, 3 (tail of 15 tokens) and 25. */
static const uint64_t sizes[3] = { 16 * 12 + 1, 16 * 4, 16 * 25 + 7 };
#define T 16
#define NWIN (12 + 3 + 25)

/* Writes the three shards into a fresh directory; returns the pattern (free both). */
static char *make_set(char **dir_p, uint32_t tb)
{
	char *dir = pp_test_tmpdir(), path[512], *pattern = malloc(512);

	for (size_t s = 0; s < 3; s++) {
		snprintf(path, sizeof(path), "%s/train_%06zu.bin", dir, s);
		pp_test_write_tokens(path, s, sizes[s], tb, tok);
	}
	snprintf(pattern, 512, "%s/train_*.bin", dir);
	*dir_p = dir;
	return pattern;
}

/* Checks every token of a batch against tok(); returns a digest of ids and tokens. */
static uint64_t check_batch(const struct pp_tokens *tk, const struct pp_batch *b, bool widen,
			    uint32_t tb)
{
	uint64_t d = 1469598103934665603ull;

	ck_assert_uint_eq(b->nfields, 2);
	for (uint32_t k = 0; k < b->size; k++) {
		uint64_t id = b->ids[k];
		struct pp_tokens_shard sh;
		size_t s;
		for (s = 0; s < 3; s++) {
			ck_assert_int_eq(pp_tokens_get_shard(tk, s, &sh), 0);
			if (id >= sh.first_window && id < sh.first_window + sh.windows)
				break;
		}
		ck_assert_uint_lt(s, 3);
		for (uint32_t j = 0; j < T; j++) {
			uint64_t at = (id - sh.first_window) * T + j;
			uint32_t in, tg;
			if (widen) {
				in = (uint32_t)((int32_t *)b->fields[0])[k * T + j];
				tg = (uint32_t)((int32_t *)b->fields[1])[k * T + j];
			} else if (tb == 2) {
				in = ((uint16_t *)b->fields[0])[k * T + j];
				tg = ((uint16_t *)b->fields[1])[k * T + j];
			} else {
				in = ((uint32_t *)b->fields[0])[k * T + j];
				tg = ((uint32_t *)b->fields[1])[k * T + j];
			}
			ck_assert_uint_eq(in, tok(s, at, tb));
			ck_assert_uint_eq(tg, tok(s, at + 1, tb));
			d = (d ^ in) * 1099511628211ull;
		}
		d = (d ^ id) * 1099511628211ull;
	}
	return d;
}

struct run {
	uint64_t digest;
	uint64_t seen[NWIN];    /* real (not padding) appearances of each window */
	uint64_t batches;
};

/* Runs the rest of the epoch begun on l into r. */
static void drain(struct pp_loader *l, const struct pp_tokens *tk, bool widen, uint32_t tb,
		  uint64_t max_batches, struct run *r)
{
	struct pp_batch *b;
	int ret;

	while (r->batches < max_batches && (ret = pp_loader_next(l, &b)) == 1) {
		r->digest = r->digest * 31 + check_batch(tk, b, widen, tb);
		for (uint32_t k = 0; k < b->size - b->padding; k++)
			r->seen[b->ids[k]]++;
		r->batches++;
		ck_assert_int_eq(pp_loader_release(l, b), 0);
	}
	if (r->batches < max_batches)
		ck_assert_msg(ret == 0, "%s", pp_last_error());
}

static struct pp_loader_config config(const struct pp_tokens *tk, uint32_t workers, uint32_t rank,
				      uint32_t world, bool slices)
{
	return (struct pp_loader_config){ .source = pp_tokens_source(tk), .batch_size = 4,
		.shuffle = true, .seed = 7, .workers = workers, .rank = rank, .world_size = world,
		.rank_slices = slices };
}

static struct pp_tokens *open_set(const char *pattern, bool widen, uint64_t group)
{
	struct pp_tokens_config tc = { .seq_len = T, .widen = widen, .group = group, .io_depth = 3,
				       .io = pp_test_io_pread() ? PP_LOADER_IO_PREAD : 0 };
	struct pp_tokens *tk;

	ck_assert_msg(pp_tokens_open(pattern, &tc, &tk) == 0, "%s", pp_last_error());
	return tk;
}

/*
 * Fails if the set's counts, its windows' tokens (either size, widened or
 * not; shuffled, and in order, where runs of windows are read at once), or
 * the order at 0, 1 and 2 workers differ from what the shards hold.
 */
START_TEST(test_windows)
{
	for (uint32_t tb = 2; tb <= 4; tb += 2) {
		char *dir, *pattern = make_set(&dir, tb);
		for (int widen = 0; widen < 2; widen++) {
			struct pp_tokens *tk = open_set(pattern, widen, 0);
			const struct pp_tokens_info *info = pp_tokens_get_info(tk);
			uint64_t first = 0;
			ck_assert_uint_eq(info->nshards, 3);
			ck_assert_uint_eq(info->token_bytes, tb);
			ck_assert_uint_eq(info->version, tb == 2 ? 1 : 7);
			ck_assert_uint_eq(info->windows, NWIN);
			ck_assert_uint_eq(info->tokens, sizes[0] + sizes[1] + sizes[2]);
			ck_assert_int_eq(info->dtype, widen ? PP_DTYPE_I32
						     : tb == 2 ? PP_DTYPE_U16 : PP_DTYPE_U32);
			for (uint32_t w = 0; w <= 5; w++) {
				struct pp_loader_config cfg = config(tk, w % 3, 0, 1, false);
				struct pp_loader *l;
				struct run r = { 0 };
				cfg.shuffle = w < 3;
				ck_assert_msg(pp_loader_create(&cfg, &l) == 0, "%s", pp_last_error());
				ck_assert_int_eq(pp_loader_begin_epoch(l, 3), 0);
				drain(l, tk, widen, tb, UINT64_MAX, &r);
				for (size_t i = 0; i < NWIN; i++)
					ck_assert_uint_eq(r.seen[i], 1);
				{
					struct pp_loader_stats st;
					ck_assert_int_eq(pp_loader_get_stats(l, &st), 0);
					ck_assert_msg(strcmp(st.io_path, "pread") == 0 ||
						      (!pp_test_io_pread() &&
						       strcmp(st.io_path, "io_uring") == 0),
						      "io_path %s", st.io_path);
				}
				if (w % 3 == 0)
					first = r.digest;
				ck_assert_uint_eq(r.digest, first);
				pp_loader_destroy(l);
			}
			pp_tokens_close(tk);
		}
		pp_test_rmtree(dir);
		free(dir);
		free(pattern);
	}
}
END_TEST

/* Fails if 'group' does not cut each shard's windows to a multiple of it, or the shard table is wrong. */
START_TEST(test_group)
{
	char *dir, *pattern = make_set(&dir, 2);
	struct pp_tokens *tk = open_set(pattern, false, 5);
	static const uint64_t want[3] = { 10, 0, 25 };
	struct pp_tokens_shard sh;
	uint64_t first = 0;

	ck_assert_uint_eq(pp_tokens_get_info(tk)->windows, 35);
	for (size_t s = 0; s < 3; s++) {
		ck_assert_int_eq(pp_tokens_get_shard(tk, s, &sh), 0);
		ck_assert_uint_eq(sh.windows, want[s]);
		ck_assert_uint_eq(sh.first_window, first);
		ck_assert_uint_eq(sh.tokens, sizes[s]);
		ck_assert_ptr_nonnull(strstr(sh.path, s == 0 ? "train_000000" : s == 1 ? "train_000001"
									   : "train_000002"));
		first += sh.windows;
	}
	ck_assert_int_eq(pp_tokens_get_shard(tk, 3, &sh), -EINVAL);
	/* window 10 is the third shard's first (the second has none) */
	{
		struct pp_loader_config cfg = config(tk, 1, 0, 1, false);
		struct pp_loader *l;
		struct pp_batch *b;
		cfg.shuffle = false;
		ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
		ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
		for (int i = 0; i < 3; i++) {
			ck_assert_int_eq(pp_loader_next(l, &b), 1);
			if (i < 2)
				ck_assert_int_eq(pp_loader_release(l, b), 0);
		}
		ck_assert_uint_eq(b->ids[2], 10);
		ck_assert_uint_eq(((uint16_t *)b->fields[0])[2 * T], tok(2, 0, 2));
		ck_assert_int_eq(pp_loader_release(l, b), 0);
		pp_loader_destroy(l);
	}
	pp_tokens_close(tk);
	pp_test_rmtree(dir);
	free(dir);
	free(pattern);
}
END_TEST

/* Fails if the ranks of 1, 2 or 3 (both rank splits) overlap or miss a window, or their batch counts differ. */
START_TEST(test_ranks)
{
	char *dir, *pattern = make_set(&dir, 2);
	struct pp_tokens *tk = open_set(pattern, true, 0);

	for (int slices = 0; slices < 2; slices++) {
		for (uint32_t world = 1; world <= 3; world++) {
			uint64_t seen[NWIN] = { 0 }, batches = 0;
			for (uint32_t rank = 0; rank < world; rank++) {
				struct pp_loader_config cfg = config(tk, rank % 2, rank, world, slices);
				struct pp_loader *l;
				struct run r = { 0 };
				ck_assert_msg(pp_loader_create(&cfg, &l) == 0, "%s", pp_last_error());
				ck_assert_int_eq(pp_loader_begin_epoch(l, 1), 0);
				drain(l, tk, true, 2, UINT64_MAX, &r);
				if (rank == 0)
					batches = r.batches;
				ck_assert_uint_eq(r.batches, batches);
				for (size_t i = 0; i < NWIN; i++)
					seen[i] += r.seen[i];
				pp_loader_destroy(l);
			}
			for (size_t i = 0; i < NWIN; i++)
				ck_assert_msg(seen[i] == 1, "world %u slices %d: window %zu seen %llu "
					      "times", world, slices, i, (unsigned long long)seen[i]);
		}
	}
	pp_tokens_close(tk);
	pp_test_rmtree(dir);
	free(dir);
	free(pattern);
}
END_TEST

/*
 * Fails if a resume does not continue the epoch exactly: at the same rank
 * count (the rest's digest equals an uninterrupted run's), and at another
 * (2 ranks stop after 2 batches, 4 ranks of the same batch size and the
 * other rank split resume, and every window of the epoch is seen once in
 * all); a start that the new ranks' global batch does not divide and
 * another seed are refused.
 */
START_TEST(test_resume)
{
	char *dir, *pattern = make_set(&dir, 4);
	struct pp_tokens *tk = open_set(pattern, false, 0);

	for (int slices = 0; slices < 2; slices++) {
		struct pp_loader_config cfg = config(tk, 2, 1, 2, slices);
		struct pp_loader *l, *l2;
		struct pp_loader_position pos;
		struct run whole = { 0 }, head = { 0 }, tail = { 0 };
		uint64_t seen[NWIN] = { 0 };

		/* the same rank count */
		ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
		ck_assert_int_eq(pp_loader_begin_epoch(l, 5), 0);
		drain(l, tk, false, 4, 2, &head);
		drain(l, tk, false, 4, UINT64_MAX, &whole);
		ck_assert_int_eq(pp_loader_begin_epoch(l, 5), 0);
		drain(l, tk, false, 4, 2, &tail);
		ck_assert_int_eq(pp_loader_get_position(l, &pos), 0);
		ck_assert_uint_eq(pos.batch, 2);
		ck_assert_uint_eq(pos.samples, 2 * 4 * 2);
		ck_assert_int_eq(pp_loader_create(&cfg, &l2), 0);
		ck_assert_msg(pp_loader_resume(l2, &pos) == 0, "%s", pp_last_error());
		memset(&tail, 0, sizeof(tail));
		drain(l2, tk, false, 4, UINT64_MAX, &tail);
		ck_assert_uint_eq(tail.digest, whole.digest);
		pp_loader_destroy(l2);
		pp_loader_destroy(l);

		/* 2 ranks x 2 batches of 4, then 4 ranks from window 16 of the order */
		for (uint32_t rank = 0; rank < 2; rank++) {
			struct run r = { 0 };
			cfg = config(tk, 1, rank, 2, slices);
			ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
			ck_assert_int_eq(pp_loader_begin_epoch(l, 5), 0);
			drain(l, tk, false, 4, 2, &r);
			ck_assert_int_eq(pp_loader_get_position(l, &pos), 0);
			for (size_t i = 0; i < NWIN; i++)
				seen[i] += r.seen[i];
			pp_loader_destroy(l);
		}
		for (uint32_t rank = 0; rank < 4; rank++) {
			struct run r = { 0 };
			cfg = config(tk, rank % 3, rank, 4, !slices);
			ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
			ck_assert_int_eq(pp_loader_resume(l, &pos), -EINVAL);
			ck_assert_msg(pp_loader_resume_samples(l, &pos) == 0, "%s", pp_last_error());
			drain(l, tk, false, 4, UINT64_MAX, &r);
			for (size_t i = 0; i < NWIN; i++)
				seen[i] += r.seen[i];
			pp_loader_destroy(l);
		}
		/* 16 windows before, the other 24 after (in the other rank split) */
		for (size_t i = 0; i < NWIN; i++)
			ck_assert_uint_eq(seen[i], 1);
		/* 3 ranks of 4 cannot start at window 16 of the order */
		cfg = config(tk, 0, 0, 3, slices);
		ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
		ck_assert_int_eq(pp_loader_resume_samples(l, &pos), -EINVAL);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "sample 16"));
		/* another seed cannot resume it */
		pp_loader_destroy(l);
		cfg = config(tk, 0, 0, 4, slices);
		cfg.seed = 8;
		ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
		ck_assert_int_eq(pp_loader_resume_samples(l, &pos), -EINVAL);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "another order"));
		pp_loader_destroy(l);
	}
	pp_tokens_close(tk);
	pp_test_rmtree(dir);
	free(dir);
	free(pattern);
}
END_TEST

/* Opens a set of the one shard 'bytes' and checks the error's code and the words of its message. */
static void refused(const void *bytes, size_t len, int err, const char *words)
{
	char *dir = pp_test_tmpdir(), path[512], pattern[512];
	struct pp_tokens_config tc = { .seq_len = T };
	struct pp_tokens *tk = (struct pp_tokens *)&tc;

	snprintf(path, sizeof(path), "%s/bad_000.bin", dir);
	snprintf(pattern, sizeof(pattern), "%s/bad_*.bin", dir);
	pp_test_write_file(path, bytes, len);
	ck_assert_int_eq(pp_tokens_open(pattern, &tc, &tk), err);
	ck_assert_ptr_eq(tk, (struct pp_tokens *)&tc);
	ck_assert_msg(strstr(pp_last_error(), words) != NULL, "'%s' lacks '%s'", pp_last_error(),
		      words);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "/bad_"));
	pp_test_rmtree(dir);
	free(dir);
}

/* Fails if a bad header, size, pattern or mix of versions is accepted or its message misses the file or offset. */
START_TEST(test_headers)
{
	uint8_t f[1024 + 2 * 40] = { 0 };
	int32_t *h = (int32_t *)f;
	char *dir, *pattern, path[512];
	struct pp_tokens_config tc = { .seq_len = T };
	struct pp_tokens *tk;

	h[0] = PP_TOKENS_MAGIC_GPT2, h[1] = 1, h[2] = 40;
	refused(f, 100, -EBADMSG, "offset 0: 100 bytes, shorter than the 1024-byte header");
	h[0] = 12345;
	refused(f, sizeof(f), -EBADMSG, "offset 0: bad magic 12345");
	h[0] = PP_TOKENS_MAGIC_GPT2, h[1] = 7;
	refused(f, sizeof(f), -EBADMSG, "offset 4: version 7, expected 1 for magic 20240520");
	h[0] = PP_TOKENS_MAGIC_LLAMA3, h[1] = 1;
	refused(f, sizeof(f), -EBADMSG, "offset 4: version 1, expected 7 for magic 20240801");
	h[0] = PP_TOKENS_MAGIC_GPT2, h[2] = 0;
	refused(f, sizeof(f), -EBADMSG, "offset 8: token count 0 is not positive");
	h[2] = -3;
	refused(f, sizeof(f), -EBADMSG, "offset 8: token count -3 is not positive");
	h[2] = 41;
	refused(f, sizeof(f), -EBADMSG, "offset 8: token count 41 needs a file of 1106 bytes "
					"(1024 + 41 x 2), the file has 1104");
	h[2] = 40;
	refused(f, sizeof(f) - 1, -EBADMSG, "the file has 1103");
	h[2] = 39;
	refused(f, sizeof(f), -EBADMSG, "token count 39 needs a file of 1102 bytes "
					"(1024 + 39 x 2), the file has 1104");
	h[2] = 40;
	h[0] = PP_TOKENS_MAGIC_LLAMA3, h[1] = 7;
	refused(f, sizeof(f), -EBADMSG, "token count 40 needs a file of 1184 bytes");
	h[0] = PP_TOKENS_MAGIC_GPT2, h[1] = 1, h[2] = 10;
	refused(f, 1024 + 20, -EBADMSG, "no shard of the 1 holds a window of 16 + 1 tokens");

	/* a pattern that matches nothing */
	dir = pp_test_tmpdir();
	snprintf(path, sizeof(path), "%s/none_*.bin", dir);
	ck_assert_int_eq(pp_tokens_open(path, &tc, &tk), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "no file matches the pattern"));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "none_*.bin"));
	tc.seq_len = 0;
	snprintf(path, sizeof(path), "%s/*.bin", dir);
	ck_assert_int_eq(pp_tokens_open(path, &tc, &tk), -EINVAL);
	tc.seq_len = T;
	pp_test_rmtree(dir);
	free(dir);

	/* versions mixed in one set: named with both files */
	pattern = make_set(&dir, 2);
	snprintf(path, sizeof(path), "%s/train_000001.bin", dir);
	pp_test_write_tokens(path, 1, 100, 4, tok);
	ck_assert_int_eq(pp_tokens_open(pattern, &tc, &tk), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "train_000001.bin: offset 4: version 7 "
						       "(uint32 tokens) in a set whose first shard"));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "train_000000.bin is version 1"));
	pp_test_rmtree(dir);
	free(dir);
	free(pattern);
}
END_TEST

/* Fails if a shard cut short after open, or a uint32 token that int32 cannot hold, is not named by the loader's error. */
START_TEST(test_read_errors)
{
	char *dir, *pattern = make_set(&dir, 4), path[512];
	struct pp_tokens *tk = open_set(pattern, true, 0);
	struct pp_loader_config cfg = config(tk, 1, 0, 1, false);
	struct pp_loader *l;
	struct pp_batch *b;
	uint8_t big[1024 + 4 * (T + 1)] = { 0 };
	int32_t h[3] = { PP_TOKENS_MAGIC_LLAMA3, 7, T + 1 };
	int ret;

	/* the last shard cut to its header */
	snprintf(path, sizeof(path), "%s/train_000002.bin", dir);
	ck_assert_int_eq(truncate(path, 1024), 0);
	cfg.shuffle = false;
	ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1)
		pp_loader_release(l, b);
	ck_assert_int_eq(ret, -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "train_000002.bin"));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "at offset 1024"));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "source tokens: sample 12"));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "tokens: window 15: "));
	pp_loader_destroy(l);
	pp_tokens_close(tk);
	pp_test_rmtree(dir);
	free(dir);
	free(pattern);

	/* a token of 2^31 widened */
	dir = pp_test_tmpdir();
	memcpy(big, h, sizeof(h));
	memset(big + 1024 + 4 * 5, 0x80, 4);
	snprintf(path, sizeof(path), "%s/big.bin", dir);
	pp_test_write_file(path, big, sizeof(big));
	tk = open_set(path, true, 0);
	cfg = config(tk, 0, 0, 1, false);
	ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	ck_assert_int_eq(pp_loader_next(l, &b), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "big.bin: offset 1044: token 2155905152 "
						       "does not fit the int32"));
	pp_loader_destroy(l);
	/* the same as the window's last token, a target alone */
	memset(big + 1024 + 4 * 5, 0, 4);
	memset(big + 1024 + 4 * T, 0x80, 4);
	pp_test_write_file(path, big, sizeof(big));
	ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	ck_assert_int_eq(pp_loader_next(l, &b), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "big.bin: offset 1088: token 2155905152 "
						       "does not fit the int32"));
	pp_loader_destroy(l);
	pp_tokens_close(tk);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Windows of a length that is no multiple of 8 (5 tokens), widened from
 * either token size: every input and target is the token at its place.
 * Fails if the widening drops or misplaces a token after the last whole
 * block of 8.
 */
START_TEST(test_widen_odd_length)
{
	for (uint32_t tb = 2; tb <= 4; tb += 2) {
		char *dir = pp_test_tmpdir(), path[512];
		struct pp_tokens_config tc = { .seq_len = 5, .widen = true,
					       .io = pp_test_io_pread() ? PP_LOADER_IO_PREAD : 0 };
		struct pp_tokens *tk;
		struct pp_loader *l;
		struct pp_batch *b;

		snprintf(path, sizeof(path), "%s/odd_000.bin", dir);
		pp_test_write_tokens(path, 0, 5 * 3 + 1, tb, tok);
		ck_assert_msg(pp_tokens_open(path, &tc, &tk) == 0, "%s", pp_last_error());
		ck_assert_uint_eq(pp_tokens_get_info(tk)->windows, 3);
		struct pp_loader_config cfg = { .source = pp_tokens_source(tk), .batch_size = 3 };
		ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
		ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
		ck_assert_int_eq(pp_loader_next(l, &b), 1);
		ck_assert_uint_eq(b->size, 3);
		for (uint32_t k = 0; k < 3; k++) {
			for (uint32_t j = 0; j < 5; j++) {
				uint64_t at = b->ids[k] * 5 + j;
				ck_assert_uint_eq((uint32_t)((int32_t *)b->fields[0])[k * 5 + j],
						  tok(0, at, tb));
				ck_assert_uint_eq((uint32_t)((int32_t *)b->fields[1])[k * 5 + j],
						  tok(0, at + 1, tb));
			}
		}
		ck_assert_int_eq(pp_loader_release(l, b), 0);
		pp_loader_destroy(l);
		pp_tokens_close(tk);
		pp_test_rmtree(dir);
		free(dir);
	}
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("tokens");
	TCase *tc = tcase_create("tokens");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_headers);
	tcase_add_test(tc, test_windows);
	tcase_add_test(tc, test_group);
	tcase_add_test(tc, test_ranks);
	tcase_add_test(tc, test_resume);
	tcase_add_test(tc, test_read_errors);
	tcase_add_test(tc, test_widen_odd_length);
	suite_add_tcase(s, tc);
	return s;
}
