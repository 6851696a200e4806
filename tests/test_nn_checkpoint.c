/*
 * tests/test_nn_checkpoint.c: nn's checkpoints: training resumed from a
 * file gives the bits of training without a break, the caller's tag
 * survives, damaged or foreign files are refused with a message that says
 * where, a save replaces the file a link names, never a FIFO, and a save
 * past RLIMIT_FSIZE fails with -EFBIG, the earlier file kept.
 */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "common/staged.h"
#include "nn/nn_impl.h"
#include "tests/nn_testutil.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------ checkpoints */

/*
 * Fails if training 2 steps, saving, loading and training 2 more does not
 * give bit-identical parameters to 4 uninterrupted steps, for Adam and for
 * SGD with momentum (whose buffer and step count must survive the file).
 */
START_TEST(test_checkpoint_resume)
{
	char *dir = pp_test_tmpdir();
	char path[512];

	snprintf(path, sizeof(path), "%s/model.ckpt", dir);
	for (int opt = 0; opt < 2; opt++) {
		struct pp_model_config cfg;
		struct pp_model *a, *b, *c;
		float *pa, *pc;

		pp_model_config_init(&cfg);
		cfg.seed = 7;
		cfg.threads = 2;
		if (opt) {
			cfg.optim.kind = PP_OPTIM_SGD;
			cfg.optim.lr = 0.05f;
			cfg.optim.momentum = 0.9f;
		}
		ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &a), 0);
		ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &b), 0);
		pp_test_train(a, 4, 200);
		pp_test_train(b, 2, 200);
		ck_assert_int_eq(pp_model_save(b, path), 0);
		pp_model_destroy(b);
		pp_model_config_init(&cfg);
		cfg.threads = 2;
		ck_assert_int_eq(pp_model_load(path, NULL, &cfg, &c), 0);
		ck_assert_uint_eq(pp_model_steps(c), 2);
		pp_test_train(c, 2, 202);
		pa = pp_test_read_params(a);
		pc = pp_test_read_params(c);
		ck_assert(memcmp(pa, pc, pp_model_param_count(a) * sizeof(float)) == 0);
		free(pa);
		free(pc);
		pp_model_destroy(a);
		pp_model_destroy(c);
	}
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

static void expect_rejected(const char *path, const void *buf, size_t len, int err, const char *msg)
{
	struct pp_model_config cfg;
	struct pp_model *m = NULL;

	pp_model_config_init(&cfg);
	pp_test_write_file(path, buf, len);
	ck_assert_int_eq(pp_model_load(path, NULL, &cfg, &m), err);
	ck_assert_msg(strstr(pp_last_error(), msg), "expected '%s' in '%s'", msg, pp_last_error());
	ck_assert_ptr_nonnull(strstr(pp_last_error(), path));
	ck_assert_ptr_null(m);
}

/*
 * Fails if the tag is not kept through a checkpoint, or if a checkpoint of
 * version 1 (no tag: the same file without bytes 84..91) is no longer read,
 * with its steps and parameters, and tag 0.
 */
START_TEST(test_checkpoint_tag)
{
	char *dir = pp_test_tmpdir();
	char path[512], v1[512];
	struct pp_model_config cfg;
	struct pp_model *m, *a, *b;
	uint8_t *buf, *old;
	size_t len, n;
	float *pa, *pb;

	snprintf(path, sizeof(path), "%s/tag.ckpt", dir);
	snprintf(v1, sizeof(v1), "%s/v1.ckpt", dir);
	pp_model_config_init(&cfg);
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), 0);
	ck_assert_uint_eq(pp_model_tag(m), 0);
	pp_test_train(m, 2, 5);
	pp_model_set_tag(m, 0x0123456789abcdefull);
	ck_assert_int_eq(pp_model_save(m, path), 0);
	pp_model_destroy(m);

	ck_assert_int_eq(pp_model_load(path, NULL, &cfg, &a), 0);
	ck_assert_uint_eq(pp_model_tag(a), 0x0123456789abcdefull);
	ck_assert_uint_eq(pp_model_steps(a), 2);

	buf = pp_test_read_file(path, &len);
	ck_assert_uint_eq(pp_le32(buf + 8), 2);
	ck_assert_uint_eq(pp_le64(buf + 84), 0x0123456789abcdefull);
	old = malloc(len - 8);
	ck_assert_ptr_nonnull(old);
	memcpy(old, buf, 84);
	memcpy(old + 84, buf + 92, len - 92);
	pp_put_le32(old + 8, 1);
	pp_put_le32(old + len - 12, pp_crc32(0, old, len - 12));
	pp_test_write_file(v1, old, len - 8);
	ck_assert_int_eq(pp_model_load(v1, NULL, &cfg, &b), 0);
	ck_assert_uint_eq(pp_model_tag(b), 0);
	ck_assert_uint_eq(pp_model_steps(b), 2);
	n = pp_model_param_count(a);
	pa = malloc(n * sizeof(float));
	pb = malloc(n * sizeof(float));
	ck_assert(pa != NULL && pb != NULL);
	ck_assert_int_eq(pp_model_params_read(a, pa, n), 0);
	ck_assert_int_eq(pp_model_params_read(b, pb, n), 0);
	ck_assert_int_eq(memcmp(pa, pb, n * sizeof(float)), 0);
	free(pa);
	free(pb);
	pp_model_destroy(a);
	pp_model_destroy(b);
	free(old);
	free(buf);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if a save follows a link planted at the old fixed temporary name
 * "PATH.tmp" (the file it points to must stay as it was), leaves a
 * temporary file behind, or writes a checkpoint that does not load; if
 * two models saving to the same path in turn collide; or if a save does
 * not remove what a killed save left (PATH.tmp-XXXXXX, unlocked, stale),
 * or removes a link of that name.
 */
START_TEST(test_checkpoint_planted_link)
{
	char *dir = pp_test_tmpdir();
	char path[512], link[512], victim[512];
	struct pp_model_config cfg;
	struct pp_model *m, *m2, *a;
	struct dirent *e;
	uint8_t *buf;
	size_t len, files = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/c.ckpt", dir);
	snprintf(link, sizeof(link), "%s/c.ckpt.tmp", dir);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	pp_test_write_file(victim, "precious", 8);
	ck_assert_int_eq(symlink(victim, link), 0);
	snprintf(link, sizeof(link), "%s/c.ckpt.tmp-Link01", dir);
	ck_assert_int_eq(symlink(victim, link), 0);
	snprintf(link, sizeof(link), "%s/c.ckpt.tmp-Dead01", dir);
	pp_test_write_file(link, "a killed save's", 15);
	sleep(PP_STAGED_STALE_S + 1);
	pp_model_config_init(&cfg);
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), 0);
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m2), 0);
	pp_test_train(m, 1, 5);
	ck_assert_int_eq(pp_model_save(m, path), 0);
	ck_assert_int_eq(pp_model_save(m2, path), 0);
	ck_assert_int_eq(pp_model_save(m, path), 0);
	buf = pp_test_read_file(victim, &len);
	ck_assert_uint_eq(len, 8);
	ck_assert_int_eq(memcmp(buf, "precious", 8), 0);
	free(buf);
	ck_assert_int_eq(pp_model_load(path, NULL, &cfg, &a), 0);
	ck_assert_uint_eq(pp_model_steps(a), 1);
	/* c.ckpt, the two links and their victim: no temporary file left, the killed one's neither. */
	ck_assert_int_ne(access(link, F_OK), 0);
	d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		files += e->d_name[0] != '.';
	closedir(d);
	ck_assert_uint_eq(files, 4);
	pp_model_destroy(a);
	pp_model_destroy(m2);
	pp_model_destroy(m);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if a save to a symbolic link replaces the link rather than the
 * file it names (the link must stay a link, the file load), or if a save
 * to a FIFO is not refused with -EINVAL naming it, or replaces it.
 */
START_TEST(test_checkpoint_through_link)
{
	char *dir = pp_test_tmpdir();
	char path[512], link[512], fifo[512];
	struct pp_model_config cfg;
	struct pp_model *m, *a;
	struct stat st;

	snprintf(path, sizeof(path), "%s/real.ckpt", dir);
	snprintf(link, sizeof(link), "%s/latest.ckpt", dir);
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	ck_assert_int_eq(symlink("real.ckpt", link), 0);
	ck_assert_int_eq(mkfifo(fifo, 0644), 0);
	pp_model_config_init(&cfg);
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), 0);
	pp_test_train(m, 1, 5);
	/* Twice: first to a file not there yet, then over it. */
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(pp_model_save(m, link) == 0, "%s", pp_last_error());
		ck_assert_int_eq(lstat(link, &st), 0);
		ck_assert(S_ISLNK(st.st_mode));
		ck_assert_int_eq(pp_model_load(path, NULL, &cfg, &a), 0);
		ck_assert_uint_eq(pp_model_steps(a), 1 + (uint64_t)i);
		pp_model_destroy(a);
		pp_test_train(m, 1, 6);
	}
	ck_assert_int_eq(pp_model_save(m, fifo), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), fifo));
	ck_assert_int_eq(lstat(fifo, &st), 0);
	ck_assert(S_ISFIFO(st.st_mode));
	pp_model_destroy(m);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if a truncated, extended, bit-flipped, wrongly versioned or
 * mislabelled checkpoint (or one whose spec is bad under a valid CRC) is
 * loaded, or is rejected without a message naming the file and the place.
 */
START_TEST(test_checkpoint_damaged)
{
	char *dir = pp_test_tmpdir();
	char path[512], bad[512];
	struct pp_model_config cfg;
	struct pp_model *m;
	uint8_t *buf, *copy;
	char want[128];
	size_t len;

	snprintf(path, sizeof(path), "%s/good.ckpt", dir);
	snprintf(bad, sizeof(bad), "%s/bad.ckpt", dir);
	pp_model_config_init(&cfg);
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), 0);
	pp_test_train(m, 1, 5);
	ck_assert_int_eq(pp_model_save(m, path), 0);
	pp_model_destroy(m);
	buf = pp_test_read_file(path, &len);
	copy = malloc(len + 16);
	ck_assert_ptr_nonnull(copy);

	/* cut short or run on: the sizes, not a CRC that cannot match */
	snprintf(want, sizeof(want), "truncated (%zu of %zu bytes)", len - 1, len);
	expect_rejected(bad, buf, len - 1, -EBADMSG, want);
	snprintf(want, sizeof(want), "truncated (%zu of %zu bytes)", (size_t)100, len);
	expect_rejected(bad, buf, 100, -EBADMSG, want);
	expect_rejected(bad, buf, 40, -EBADMSG, "too short");
	memcpy(copy, buf, len);
	memset(copy + len, 0, 16);
	snprintf(want, sizeof(want), "16 bytes past its end (%zu of %zu bytes)", len + 16, len);
	expect_rejected(bad, copy, len + 16, -EBADMSG, want);
	copy[len / 2] ^= 0x10;
	expect_rejected(bad, copy, len, -EBADMSG, "CRC-32 mismatch (expected");
	memcpy(copy, buf, len);
	copy[0] = 'X';
	expect_rejected(bad, copy, len, -EBADMSG, "offset 0: bad magic");
	memcpy(copy, buf, len);
	copy[8] = 9;
	expect_rejected(bad, copy, len, -EBADMSG, "offset 8: version 9 (expected 1 or 2)");
	/* a bad spec ("flatten" -> "flatteX") under a recomputed CRC */
	memcpy(copy, buf, len);
	copy[92 + 6] = 'X';
	pp_put_le32(copy + len - 4, pp_crc32(0, copy, len - 4));
	expect_rejected(bad, copy, len, -EBADMSG, "describe no valid model");
	/* a parameter count that does not match the file's size */
	memcpy(copy, buf, len);
	pp_put_le64(copy + 32, 25451);
	pp_put_le32(copy + len - 4, pp_crc32(0, copy, len - 4));
	expect_rejected(bad, copy, len, -EBADMSG, "expected");

	/* a bad setting of the caller's is the caller's error, not the file's */
	cfg.threads = 0;
	ck_assert_int_eq(pp_model_load(path, NULL, &cfg, &m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "0 threads"));
	cfg.threads = 1;
	snprintf(bad, sizeof(bad), "%s/missing.ckpt", dir);
	ck_assert_int_eq(pp_model_load(bad, NULL, &cfg, &m), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "missing.ckpt: cannot open"));
	/* the good one still loads */
	ck_assert_int_eq(pp_model_load(path, NULL, &cfg, &m), 0);
	ck_assert_uint_eq(pp_model_steps(m), 1);
	pp_model_destroy(m);
	free(copy);
	free(buf);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * A save in a process whose file size limit (RLIMIT_FSIZE) is below the
 * checkpoint's size, over a good checkpoint.  Fails if the child saving is
 * killed by SIGXFSZ (the signal's default) instead of the save returning
 * -EFBIG with a message naming the limit, if SIGXFSZ is left blocked or
 * pending in the child after the save, or if the good checkpoint is not
 * left as it was, or a temporary file is left beside it.
 */
START_TEST(test_checkpoint_file_size_limit)
{
	char *dir = pp_test_tmpdir();
	struct pp_model_config cfg;
	struct pp_model *m;
	char path[512];
	uint8_t *before, *after;
	size_t len, len2;
	struct dirent *e;
	int status, files = 0;
	DIR *d;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/model.ckpt", dir);
	pp_model_config_init(&cfg);
	cfg.threads = 1;
	ck_assert_int_eq(pp_model_create("mlp", NULL, &cfg, &m), 0);
	ck_assert_int_eq(pp_model_save(m, path), 0);
	pp_model_destroy(m);
	before = pp_test_read_file(path, &len);
	ck_assert_uint_gt(len, 65536);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* the child: a model of its own (no threads of the parent's), saved under the limit */
		struct rlimit rl;
		sigset_t mask, pending;
		int ret;

		if (getrlimit(RLIMIT_FSIZE, &rl) != 0)
			_exit(10);
		rl.rlim_cur = 65536;
		if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
			_exit(11);
		cfg.seed = 2;
		if (pp_model_create("mlp", NULL, &cfg, &m) != 0)
			_exit(12);
		pp_test_train(m, 1, 5);
		ret = pp_model_save(m, path);
		if (ret != -EFBIG) {
			fprintf(stderr, "save returned %d: %s\n", ret, pp_last_error());
			_exit(13);
		}
		if (strstr(pp_last_error(), "File too large (the process's file size limit, "
					    "RLIMIT_FSIZE") == NULL) {
			fprintf(stderr, "message: %s\n", pp_last_error());
			_exit(14);
		}
		if (pthread_sigmask(SIG_SETMASK, NULL, &mask) != 0 || sigismember(&mask, SIGXFSZ) ||
		    sigpending(&pending) != 0 || sigismember(&pending, SIGXFSZ))
			_exit(15);
		pp_model_destroy(m);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(!WIFSIGNALED(status), "the saving child was killed by signal %d%s",
		      WTERMSIG(status), WTERMSIG(status) == SIGXFSZ ? " (SIGXFSZ)" : "");
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	after = pp_test_read_file(path, &len2);
	ck_assert_uint_eq(len2, len);
	ck_assert(memcmp(before, after, len) == 0);
	d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.') {
			ck_assert_msg(strcmp(e->d_name, "model.ckpt") == 0, "left beside it: %s", e->d_name);
			files++;
		}
	closedir(d);
	ck_assert_int_eq(files, 1);
	free(before);
	free(after);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("nn_checkpoint");
	TCase *ckpt = tcase_create("checkpoint");

	tcase_add_test(ckpt, test_checkpoint_resume);
	tcase_add_test(ckpt, test_checkpoint_damaged);
	tcase_add_test(ckpt, test_checkpoint_tag);
	tcase_add_test(ckpt, test_checkpoint_planted_link);
	tcase_add_test(ckpt, test_checkpoint_through_link);
	tcase_add_test(ckpt, test_checkpoint_file_size_limit);
	tcase_set_timeout(ckpt, 30);
	suite_add_tcase(s, ckpt);
	return s;
}
