/*
 * tests/test_llmc.c: examples/llmc/dataloader.c, llm.c's DataLoader on
 * pinpipe, against a reference of llm.c's loader written here from its
 * documented algorithm (llmc/dataloader.h: a global batch is num_processes x
 * B x T + 1 contiguous tokens read with fseek + fread at header + sample x
 * global bytes + rank x B x T x token bytes, widened to int, inputs[i] =
 * buf[i] and targets[i] = buf[i + 1]; a shard gives floor((tokens - 1) /
 * (num_processes x B x T)) samples; the next shard when the current one is
 * spent, the first after the last).  Unshuffled, every batch of three passes
 * must equal the reference's for 1-3 processes and both token sizes, with a
 * resume from the reference's two numbers; shuffled, the ranks' windows
 * must be disjoint and cover the epoch, and a resume at another process
 * count must continue the same order; batches copied to a device equal llm.c's.  Errors: a bad shard named, by the
 * returning variant and by the exiting one.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "examples/llmc/dataloader.h"
#include "tests/testutil.h"
#include "tests/tokens_testutil.h"

static uint32_t tok(size_t s, uint64_t j, uint32_t tb)
{
	uint32_t v = (uint32_t)(s * 7919 + j * 13 + 1);
	return tb == 2 ? (uint16_t)v : v % 1000003u + 70000u;
}

#define B 3
#define T 8
/* tokens of the four shards: 1, 2, 3 and 4 global batches of 3 x 3 x 8 for 3 processes, with tails */
static const uint64_t sizes[4] = { 3 * 24 * 3 + 5, 3 * 24 * 4 + 1, 3 * 24 * 5 + 70, 72 * 6 };

static char *make_set(char **dir_p, uint32_t tb)
{
	char *dir = pp_test_tmpdir(), path[512], *pattern = malloc(512);

	for (size_t s = 0; s < 4; s++) {
		snprintf(path, sizeof(path), "%s/tok_train_%06zu.bin", dir, s);
		pp_test_write_tokens(path, s, sizes[s], tb, tok);
	}
	snprintf(pattern, 512, "%s/tok_train_*.bin", dir);
	*dir_p = dir;
	return pattern;
}

/* ------------------------------------------------------------------ llm.c's algorithm */

struct ref {
	glob_t g;
	int rank, procs;
	uint32_t tb;
	size_t shard, sample, shard_samples;
	FILE *f;
	uint8_t buf[(B * T + 1) * 4];
	int inputs[B * T], targets[B * T];
};

static void ref_load_shard(struct ref *r, size_t s)
{
	int32_t h[256];

	if (r->f != NULL)
		fclose(r->f);
	r->f = fopen(r->g.gl_pathv[s], "rb");
	ck_assert_ptr_nonnull(r->f);
	ck_assert_int_eq(fread(h, sizeof(h), 1, r->f), 1);
	r->shard_samples = (size_t)((h[2] - 1) / ((uint64_t)r->procs * B * T));
}

static void ref_init(struct ref *r, const char *pattern, int rank, int procs, uint32_t tb)
{
	memset(r, 0, sizeof(*r));
	ck_assert_int_eq(glob(pattern, 0, NULL, &r->g), 0);
	r->rank = rank;
	r->procs = procs;
	r->tb = tb;
	ref_load_shard(r, 0);
}

static void ref_next(struct ref *r)
{
	long off;

	if (r->sample >= r->shard_samples) {
		r->shard = r->shard == r->g.gl_pathc - 1 ? 0 : r->shard + 1;
		r->sample = 0;
		ref_load_shard(r, r->shard);
	}
	off = 1024 + (long)((r->sample * r->procs * B * T + (size_t)r->rank * B * T) * r->tb);
	ck_assert_int_eq(fseek(r->f, off, SEEK_SET), 0);
	ck_assert_int_eq(fread(r->buf, r->tb, B * T + 1, r->f), B * T + 1);
	for (int i = 0; i < B * T; i++) {
		uint32_t a, b;
		if (r->tb == 2) {
			a = ((uint16_t *)r->buf)[i];
			b = ((uint16_t *)r->buf)[i + 1];
		} else {
			a = ((uint32_t *)r->buf)[i];
			b = ((uint32_t *)r->buf)[i + 1];
		}
		r->inputs[i] = (int)a;
		r->targets[i] = (int)b;
	}
	r->sample++;
}

static void ref_free(struct ref *r)
{
	if (r->f != NULL)
		fclose(r->f);
	globfree(&r->g);
}

static DataLoader open_dl(const char *pattern, int rank, int procs, int shuffle,
			  const DataLoaderOptions *o)
{
	DataLoaderOptions opts = o ? *o : (DataLoaderOptions){ 0 };
	DataLoader dl;

	if (pp_test_io_pread())
		opts.io = PP_LOADER_IO_PREAD;
	ck_assert_msg(dataloader_open(&dl, pattern, B, T, rank, procs, shuffle, &opts) == 0, "%s",
		      pp_last_error());
	return dl;
}

/* Fails if any batch of three passes, or the two numbers after it, differ from llm.c's, for 1-3 processes, both token sizes, and after a resume from llm.c's numbers. */
START_TEST(test_unshuffled)
{
	for (uint32_t tb = 2; tb <= 4; tb += 2) {
		char *dir, *pattern = make_set(&dir, tb);
		for (int procs = 1; procs <= 3; procs++) {
			for (int rank = 0; rank < procs; rank++) {
				DataLoader dl = open_dl(pattern, rank, procs, 0, NULL);
				struct ref r;
				size_t per_pass = 0, saved_shard = 0, saved_sample = 0;
				ref_init(&r, pattern, rank, procs, tb);
				for (int s = 0; s < 4; s++)
					per_pass += (sizes[s] - 1) / (procs * B * T);
				ck_assert_uint_eq(dl.num_tokens, sizes[0] + sizes[1] + sizes[2] + sizes[3]);
				for (size_t k = 0; k < 3 * per_pass; k++) {
					ref_next(&r);
					ck_assert_msg(dataloader_next_batch_checked(&dl) == 0, "%s",
						      pp_last_error());
					ck_assert_int_eq(memcmp(dl.inputs, r.inputs, sizeof(r.inputs)), 0);
					ck_assert_int_eq(memcmp(dl.targets, r.targets, sizeof(r.targets)), 0);
					ck_assert_uint_eq(dl.current_shard_idx, r.shard);
					ck_assert_uint_eq(dl.current_sample_idx, r.sample);
					ck_assert_uint_eq(dl.shard_num_samples, r.shard_samples);
					if (k == per_pass + 2) {
						saved_shard = r.shard;
						saved_sample = r.sample;
					}
				}
				/* resume where llm.c stood after batch per_pass + 2 */
				ref_free(&r);
				ref_init(&r, pattern, rank, procs, tb);
				for (size_t k = 0; k <= per_pass + 2; k++)
					ref_next(&r);
				ck_assert_int_eq(dataloader_resume_checked(&dl, saved_shard, saved_sample), 0);
				for (size_t k = 0; k < per_pass; k++) {
					ref_next(&r);
					ck_assert_int_eq(dataloader_next_batch_checked(&dl), 0);
					ck_assert_int_eq(memcmp(dl.inputs, r.inputs, sizeof(r.inputs)), 0);
					ck_assert_uint_eq(dl.current_shard_idx, r.shard);
					ck_assert_uint_eq(dl.current_sample_idx, r.sample);
				}
				/* reset: back to llm.c's first batch */
				dataloader_reset(&dl);
				ref_free(&r);
				ref_init(&r, pattern, rank, procs, tb);
				ref_next(&r);
				ck_assert_int_eq(dataloader_next_batch_checked(&dl), 0);
				ck_assert_int_eq(memcmp(dl.inputs, r.inputs, sizeof(r.inputs)), 0);
				ck_assert_int_eq(dataloader_resume_checked(&dl, 4, 0), -EINVAL);
				ck_assert_int_eq(dataloader_resume_checked(&dl, 0, 1000), -EINVAL);
				ref_free(&r);
				dataloader_free(&dl);
			}
		}
		pp_test_rmtree(dir);
		free(dir);
		free(pattern);
	}
}
END_TEST

/* The window ids of the batch just handed out (the loader's batch). */
static void mark(const DataLoader *dl, uint8_t *seen, size_t nwin, int add)
{
	for (uint32_t k = 0; k < dl->held->size; k++) {
		uint64_t id = dl->held->ids[k];
		ck_assert_uint_lt(id, nwin);
		seen[id] += (uint8_t)add;
	}
}

/*
 * Fails if the shuffled ranks' windows overlap or miss a window of the
 * epoch's whole global batches, if a row is not its window, or if 2
 * processes stopped mid-epoch and resumed as 3 (from the two numbers) do
 * not take exactly the windows that 1 process of 6 would have.
 */
START_TEST(test_shuffled)
{
	char *dir, *pattern = make_set(&dir, 2);
	DataLoader one = open_dl(pattern, 0, 1, 1, NULL);
	size_t nwin = 0, batches;
	uint8_t *seen, *want;
	size_t shard = 0, sample = 0;

	for (int s = 0; s < 4; s++)
		nwin += (sizes[s] - 1) / T;
	seen = calloc(nwin, 1);
	want = calloc(nwin, 1);
	batches = one.shard_num_samples;
	ck_assert_uint_eq(batches, nwin / B);
	/* two epochs on 3 processes: disjoint, covering, rows checked against the shards */
	for (uint64_t epoch = 0; epoch < 2; epoch++) {
		memset(seen, 0, nwin);
		for (int rank = 0; rank < 3; rank++) {
			DataLoader dl = open_dl(pattern, rank, 3, 1, &(DataLoaderOptions){ .workers = 1 + rank % 2 });
			if (epoch == 1)
				ck_assert_int_eq(dataloader_resume_checked(&dl, 1, 0), 0);
			for (size_t k = 0; k < nwin / (3 * B); k++) {
				ck_assert_int_eq(dataloader_next_batch_checked(&dl), 0);
				ck_assert_uint_eq(dl.current_shard_idx, epoch);
				ck_assert_uint_eq(dl.current_sample_idx, (k + 1) * 3 * B);
				mark(&dl, seen, nwin, 1);
				for (int b = 0; b < B; b++) {
					struct pp_tokens_shard sh;
					uint64_t id = dl.held->ids[b];
					size_t s = 0;
					while (pp_tokens_get_shard(dl.tokens, s + 1, &sh) == 0 &&
					       sh.first_window <= id)
						s++;
					pp_tokens_get_shard(dl.tokens, s, &sh);
					for (int t = 0; t < T; t++) {
						uint64_t at = (id - sh.first_window) * T + t;
						ck_assert_int_eq(dl.inputs[b * T + t], (int)tok(s, at, 2));
						ck_assert_int_eq(dl.targets[b * T + t], (int)tok(s, at + 1, 2));
					}
				}
			}
			/* the next batch is the next epoch's */
			ck_assert_int_eq(dataloader_next_batch_checked(&dl), 0);
			ck_assert_uint_eq(dl.current_shard_idx, epoch + 1);
			dataloader_free(&dl);
		}
		for (size_t i = 0; i < nwin; i++)
			ck_assert_uint_le(seen[i], 1);
	}
	{
		size_t covered = 0;
		for (size_t i = 0; i < nwin; i++)
			covered += seen[i];
		ck_assert_uint_eq(covered, nwin / (3 * B) * 3 * B);
	}
	dataloader_free(&one);

	/* 2 processes take 6 steps of 6 windows, then 3 take the rest of the epoch from window 36 */
	memset(seen, 0, nwin);
	for (int rank = 0; rank < 2; rank++) {
		DataLoader dl = open_dl(pattern, rank, 2, 1, NULL);
		for (int k = 0; k < 6; k++) {
			ck_assert_int_eq(dataloader_next_batch_checked(&dl), 0);
			mark(&dl, seen, nwin, 1);
		}
		shard = dl.current_shard_idx;
		sample = dl.current_sample_idx;
		dataloader_free(&dl);
	}
	ck_assert_uint_eq(shard, 0);
	ck_assert_uint_eq(sample, 6 * 6);
	for (int rank = 0; rank < 3; rank++) {
		DataLoader dl = open_dl(pattern, rank, 3, 1, NULL);
		ck_assert_int_eq(dataloader_resume_checked(&dl, shard, sample), 0);
		while (dataloader_next_batch_checked(&dl) == 0 && dl.current_shard_idx == 0)
			mark(&dl, seen, nwin, 1);
		dataloader_free(&dl);
	}
	for (int rank = 0; rank < 2; rank++) {
		DataLoader dl = open_dl(pattern, rank, 2, 1, NULL);
		while (dataloader_next_batch_checked(&dl) == 0 && dl.current_shard_idx == 0)
			mark(&dl, want, nwin, 1);
		dataloader_free(&dl);
	}
	/*
	 * The permutation's first 169 / 9 x 9 = 162 windows, each once, all of
	 * them among the 168 that 2 processes take throughout.
	 */
	{
		size_t n = 0;
		for (size_t i = 0; i < nwin; i++) {
			ck_assert_uint_le(seen[i], 1);
			ck_assert(!seen[i] || want[i]);
			n += seen[i];
		}
		ck_assert_uint_eq(n, nwin / 9 * 9);
	}
	/* 5 processes of 3 cannot start at window 36 */
	{
		DataLoader dl = open_dl(pattern, 0, 5, 1, NULL);
		ck_assert_int_eq(dataloader_resume_checked(&dl, shard, sample), -EINVAL);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "not a multiple of num_processes x B"));
		dataloader_free(&dl);
	}
	free(seen);
	free(want);
	pp_test_rmtree(dir);
	free(dir);
	free(pattern);
}
END_TEST

/* Fails if the batches copied to a (simulated) device differ from llm.c's, widened on the host or carried as uint16. */
START_TEST(test_device)
{
	char *dir, *pattern = make_set(&dir, 2);
	struct pp_device *dev;
	struct pp_stream *st;

	ck_assert_int_eq(pp_device_open("sim", &dev), 0);
	ck_assert_int_eq(pp_stream_create(dev, &st), 0);
	for (int widen = 0; widen < 2; widen++) {
		DataLoaderOptions o = { .device = dev, .stream = st, .host_widen = widen };
		DataLoader dl = open_dl(pattern, 1, 2, 0, &o);
		struct ref r;
		ref_init(&r, pattern, 1, 2, 2);
		ck_assert_int_eq(dl.device_dtype, widen ? PP_DTYPE_I32 : PP_DTYPE_U16);
		for (int k = 0; k < 20; k++) {
			int32_t in[B * T], tg[B * T];
			uint16_t in16[B * T], tg16[B * T];
			ref_next(&r);
			ck_assert_int_eq(dataloader_next_batch_checked(&dl), 0);
			ck_assert_ptr_null(dl.inputs);
			ck_assert_int_eq(pp_memcpy_async(widen ? (void *)in : in16, dl.device_inputs,
							 sizeof(int32_t) * B * T / (widen ? 1 : 2),
							 PP_COPY_D2H, st), 0);
			ck_assert_int_eq(pp_memcpy_async(widen ? (void *)tg : tg16, dl.device_targets,
							 sizeof(int32_t) * B * T / (widen ? 1 : 2),
							 PP_COPY_D2H, st), 0);
			ck_assert_int_eq(pp_stream_synchronize(st), 0);
			for (int i = 0; i < B * T; i++) {
				ck_assert_int_eq((widen ? in[i] : in16[i]), r.inputs[i]);
				ck_assert_int_eq((widen ? tg[i] : tg16[i]), r.targets[i]);
			}
		}
		ref_free(&r);
		dataloader_free(&dl);
	}
	pp_stream_destroy(st);
	pp_device_close(dev);
	pp_test_rmtree(dir);
	free(dir);
	free(pattern);
}
END_TEST

/* Fails if a bad shard or a shard too small for a global batch is not named, by the returning variant and by dataloader_init's exit. */
START_TEST(test_errors)
{
	char *dir, *pattern = make_set(&dir, 2), path[512], out[512];
	DataLoader dl;
	int status;
	pid_t pid;

	/* 10 processes: the first shard (221 tokens) holds no global batch of 10 x 3 x 8 + 1 */
	ck_assert_int_eq(dataloader_open(&dl, pattern, B, T, 0, 10, 0, NULL), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "tok_train_000000.bin: 221 tokens, fewer "
						       "than the num_processes x B x T + 1 = 241"));
	ck_assert_int_eq(dataloader_open(&dl, pattern, B, T, 4, 4, 0, NULL), -EINVAL);
	snprintf(path, sizeof(path), "%s/tok_train_000002.bin", dir);
	ck_assert_int_eq(truncate(path, 1500), 0);
	ck_assert_int_eq(dataloader_open(&dl, pattern, B, T, 0, 1, 1, NULL), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "tok_train_000002.bin: offset 8: token count"));

	/* llm.c's exit, with the message on stdout */
	snprintf(out, sizeof(out), "%s/out.txt", dir);
	fflush(stdout);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (freopen(out, "w", stdout) == NULL)
			_exit(3);
		dataloader_init(&dl, pattern, B, T, 0, 1, 0);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == EXIT_FAILURE);
	{
		size_t len;
		char *text = pp_test_read_file(out, &len);
		ck_assert_ptr_nonnull(text);
		ck_assert_ptr_nonnull(strstr(text, "Error: "));
		ck_assert_ptr_nonnull(strstr(text, "tok_train_000002.bin: offset 8"));
		free(text);
	}
	pp_test_rmtree(dir);
	free(dir);
	free(pattern);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("llmc");
	TCase *tc = tcase_create("llmc");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_unshuffled);
	tcase_add_test(tc, test_shuffled);
	tcase_add_test(tc, test_device);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return s;
}
