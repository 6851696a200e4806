/*
 * tests/test_common.c: errors, messages, CRC-32, the little-endian helpers,
 * the programs' size parser, where a file renamed over a path goes, and
 * the staged files killed writers leave beside it.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/common_impl.h"
#include "common/fault.h"
#include "common/size.h"
#include "common/staged.h"
#include "tests/testutil.h"

/*
 * Fails if pp_error does not return its code or does not format the
 * message, or pp_strerror() has no text that lasts for any int.
 */
START_TEST(test_error_message)
{
	int ret = pp_error(-EBADMSG, "%s: chunk %d at offset %d: bad", "x.pps", 3, 12288);

	ck_assert_int_eq(ret, -EBADMSG);
	ck_assert_str_eq(pp_last_error(), "x.pps: chunk 3 at offset 12288: bad");
	ck_assert_str_eq(pp_strerror(-ENOENT), strerror(ENOENT));
	ck_assert_str_eq(pp_strerror(ENOENT), strerror(ENOENT));
	ck_assert_str_eq(pp_strerror(0), "Success");
	/* Any int: INT_MIN has no negation, and unknown codes' texts both live on
	 * (strerror()'s buffer was freed by the next unknown code's call). */
	{
		const char *a = pp_strerror(INT_MIN), *b = pp_strerror(-9999), *c = pp_strerror(9998);

		ck_assert_str_eq(a, "Unknown error");
		ck_assert_str_eq(b, "Unknown error");
		ck_assert_str_eq(c, "Unknown error");
		ck_assert_str_eq(pp_strerror(INT_MAX), "Unknown error");
	}
}
END_TEST

/*
 * Fails if pp_error formats the message into the buffer it reads an
 * argument from: with "%s: %s", path, pp_last_error(), vsnprintf used to
 * write over the old message while copying it, giving "a.pps: a.pps: ".
 */
START_TEST(test_error_message_wraps_last)
{
	pp_error(-EINVAL, "expected 1..4 dimensions, got 0");
	ck_assert_int_eq(pp_error(-EINVAL, "%s: %s", "a.pps", pp_last_error()), -EINVAL);
	ck_assert_str_eq(pp_last_error(), "a.pps: expected 1..4 dimensions, got 0");
	pp_error(-EIO, "keep me");
	pp_error(-EIO, "%s", pp_last_error());
	ck_assert_str_eq(pp_last_error(), "keep me");
}
END_TEST

static void *set_other_message(void *arg)
{
	(void)arg;
	pp_error(-EIO, "from another thread");
	return NULL;
}

/* Fails if one thread's error message overwrites another's. */
START_TEST(test_error_message_per_thread)
{
	pthread_t t;

	pp_error(-EINVAL, "mine");
	ck_assert_int_eq(pthread_create(&t, NULL, set_other_message, NULL), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_str_eq(pp_last_error(), "mine");
}
END_TEST

/* Fails if pp_crc32 differs from zlib's crc32, or from the check value of CRC-32/ISO-HDLC. */
START_TEST(test_crc32)
{
	static uint8_t buf[100000];

	ck_assert_uint_eq(pp_crc32(0, "123456789", 9), 0xcbf43926u);
	pp_test_fill_random(buf, sizeof(buf), 7);
	ck_assert_uint_eq(pp_crc32(0, buf, sizeof(buf)), (uint32_t)crc32(0, buf, sizeof(buf)));
	ck_assert_uint_eq(pp_crc32(pp_crc32(0, buf, 333), buf + 333, sizeof(buf) - 333),
			  (uint32_t)crc32(0, buf, sizeof(buf)));
}
END_TEST

/* Fails if the byte-order helpers or the overflow checks are wrong. */
START_TEST(test_bytes_and_sizes)
{
	uint8_t b[8];
	size_t r = 7;

	pp_put_le64(b, 0x0102030405060708ull);
	ck_assert_uint_eq(b[0], 8);
	ck_assert_uint_eq(b[7], 1);
	ck_assert_uint_eq(pp_le64(b), 0x0102030405060708ull);
	ck_assert_uint_eq(pp_le32(b), 0x05060708u);
	ck_assert_uint_eq(pp_be32(b), 0x08070605u);
	ck_assert(!pp_mul_size(SIZE_MAX / 2 + 1, 2, &r));
	ck_assert_uint_eq(r, 7);
	ck_assert(pp_mul_size(1000, 1000, &r));
	ck_assert_uint_eq(r, 1000000);
	ck_assert(!pp_add_size(SIZE_MAX, 1, &r));
	ck_assert_uint_eq(pp_dtype_size(PP_DTYPE_F32), 4);
	ck_assert_uint_eq(pp_dtype_size((enum pp_dtype)99), 0);
	ck_assert_str_eq(pp_version(), PACKAGE_VERSION);
}
END_TEST

/*
 * Fails if pp_parse_size refuses a size that pinpipe-pack or pinpipe-bench
 * took (a K, M or G suffix in either case, then B, i or iB), takes what
 * neither did, or writes its output on a refusal.
 */
START_TEST(test_parse_size)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "1", 1 }, { "4096", 4096 }, { "4K", 4096 }, { "4k", 4096 }, { "64M", 64ull << 20 },
		{ "64m", 64ull << 20 }, { "1G", 1ull << 30 }, { "2g", 2ull << 30 }, { "2KB", 2048 },
		{ "2KiB", 2048 }, { "2Ki", 2048 }, { "3MB", 3ull << 20 }, { "1GiB", 1ull << 30 },
		{ "17179869183G", 17179869183ull << 30 }, { "18446744073709551615", UINT64_MAX },
	};
	static const char *const bad[] = {
		"", "0", "0K", "K", "-1", "+1", " 1", "1 ", "1X", "10B", "1iB", "1KBB", "1KiBB", "1Kb",
		"1.5M", "1T", "17179869184G", "18446744073709551616", "99999999999999999999K",
	};
	uint64_t v;

	for (size_t i = 0; i < PP_ARRAY_SIZE(good); i++) {
		v = 0;
		ck_assert_msg(pp_parse_size(good[i].s, &v), "'%s' refused", good[i].s);
		ck_assert_uint_eq(v, good[i].v);
	}
	for (size_t i = 0; i < PP_ARRAY_SIZE(bad); i++) {
		v = 7;
		ck_assert_msg(!pp_parse_size(bad[i], &v), "'%s' taken", bad[i]);
		ck_assert_uint_eq(v, 7);
	}
}
END_TEST

/* Fails unless pp_replace_target(path) gives 'want' (NULL: the path itself). */
static void expect_target(const char *path, const char *want)
{
	char *t = NULL;

	ck_assert_msg(pp_replace_target(path, &t) == 0, "%s: %s", path, pp_last_error());
	ck_assert_str_eq(t, want ? want : path);
	free(t);
}

/* Fails unless pp_replace_target(path) refuses with 'err', naming the path and 'what'. */
static void expect_refused(const char *path, int err, const char *what)
{
	char *t = (char *)"unset";

	ck_assert_int_eq(pp_replace_target(path, &t), err);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(pp_last_error(), path) != NULL && strstr(pp_last_error(), what) != NULL,
		      "%s: '%s' does not say '%s'", path, pp_last_error(), what);
}

/*
 * Fails if a file renamed over a path would not replace the file the user
 * named: a new path or a regular file must give itself (the file's
 * canonical name), a symbolic link the file it names (relative links
 * resolved from the link's folder, chains followed, to a file not there
 * yet too), and a device, a FIFO, a directory or a loop of links must be
 * refused with the path named; a refusal must leave the path as it was.
 */
START_TEST(test_replace_target)
{
	char *dir = pp_test_tmpdir();
	char *real = realpath(dir, NULL);
	char a[PATH_MAX], b[PATH_MAX], want[PATH_MAX];
	struct stat st;

	ck_assert_ptr_nonnull(real);
	/* Not there: the path as given. */
	snprintf(a, sizeof(a), "%s/new.ckpt", dir);
	expect_target(a, NULL);
	expect_target("no-such-file-here.ckpt", NULL);
	/* A regular file: its canonical name. */
	snprintf(a, sizeof(a), "%s/file", dir);
	pp_test_write_file(a, "x", 1);
	snprintf(want, sizeof(want), "%s/file", real);
	expect_target(a, want);
	/* A relative link in a folder of its own, to the file. */
	snprintf(a, sizeof(a), "%s/sub", dir);
	ck_assert_int_eq(mkdir(a, 0755), 0);
	snprintf(a, sizeof(a), "%s/sub/link", dir);
	ck_assert_int_eq(symlink("../file", a), 0);
	expect_target(a, want);
	/* A chain of links that ends where nothing is yet: that file, not a link of the chain. */
	snprintf(a, sizeof(a), "%s/first", dir);
	ck_assert_int_eq(symlink("sub/second", a), 0);
	snprintf(b, sizeof(b), "%s/sub/second", dir);
	ck_assert_int_eq(symlink("third.ckpt", b), 0);
	snprintf(want, sizeof(want), "%s/sub/third.ckpt", dir);
	expect_target(a, want);
	snprintf(b, sizeof(b), "%s/abs", dir);
	ck_assert_int_eq(symlink(want, b), 0);
	expect_target(b, want);
	/* What a rename would replace: refused, left as it was. */
	expect_refused("/dev/null", -EINVAL, "character device");
	ck_assert_int_eq(stat("/dev/null", &st), 0);
	ck_assert(S_ISCHR(st.st_mode));
	snprintf(a, sizeof(a), "%s/fifo", dir);
	ck_assert_int_eq(mkfifo(a, 0644), 0);
	expect_refused(a, -EINVAL, "FIFO");
	snprintf(b, sizeof(b), "%s/to-fifo", dir);
	ck_assert_int_eq(symlink("fifo", b), 0);
	expect_refused(b, -EINVAL, "FIFO");
	ck_assert_int_eq(lstat(a, &st), 0);
	ck_assert(S_ISFIFO(st.st_mode));
	expect_refused(dir, -EINVAL, "directory");
	snprintf(a, sizeof(a), "%s/loop1", dir);
	snprintf(b, sizeof(b), "%s/loop2", dir);
	ck_assert_int_eq(symlink("loop2", a), 0);
	ck_assert_int_eq(symlink("loop1", b), 0);
	expect_refused(a, -ELOOP, strerror(ELOOP));
	free(real);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if a failed write's hint does not name RLIMIT_FSIZE for EFBIG
 * where the process has that limit, and the file system where it has
 * none, or if it adds anything to another error; or if pp_write_full()
 * does not write a buffer whole through short writes, at an offset and at
 * the file's position.
 */
START_TEST(test_write_full)
{
	char *dir = pp_test_tmpdir(), path[PATH_MAX], buf[10000], *back;
	struct pp_fault_plan faults;
	struct rlimit rl, set;
	size_t done, len;
	int fd;

	ck_assert_str_eq(pp_write_hint(-ENOSPC), "");
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &rl), 0);
	set = rl;
	set.rlim_cur = rl.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 40 : rl.rlim_max / 2;
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &set), 0);
	ck_assert_ptr_nonnull(strstr(pp_write_hint(-EFBIG), "RLIMIT_FSIZE: ulimit -f"));
	if (rl.rlim_max == RLIM_INFINITY) {
		set.rlim_cur = RLIM_INFINITY;
		ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &set), 0);
		ck_assert_str_eq(pp_write_hint(-EFBIG), " (the largest file this file system takes)");
	}
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 7);
	snprintf(path, sizeof(path), "%s/w", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	/* every call moves half of what is left: a loop of short writes */
	ck_assert_int_eq(pp_fault_init(&faults), 0);
	pp_fault_arm(&faults, PP_FAULT_WRITE, PP_FAULT_SHORT, 0, 0);
	ck_assert_int_eq(pp_write_full(fd, buf, 6000, -1, &faults, &done), 0);
	ck_assert_uint_eq(done, 6000);
	ck_assert_int_eq(pp_write_full(fd, buf + 6000, 4000, 6000, &faults, &done), 0);
	pp_fault_fini(&faults);
	/* a failure: the bytes before it counted */
	ck_assert_int_eq(pp_write_full(-1, buf, 10, -1, NULL, &done), -EBADF);
	ck_assert_uint_eq(done, 0);
	close(fd);
	back = pp_test_read_file(path, &len);
	ck_assert_uint_eq(len, sizeof(buf));
	ck_assert_int_eq(memcmp(back, buf, sizeof(buf)), 0);
	free(back);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/* Makes dir/name holding "x"; returns its path (static). */
static const char *staged_file(const char *dir, const char *name)
{
	static char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	pp_test_write_file(path, "x", 1);
	return path;
}

static bool exists(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return lstat(path, &st) == 0;
}

/*
 * Fails if pp_staged_create() removes beside its target anything but what
 * dead writers of that target left (TARGET.tmp-XXXXXX, a regular file of
 * this user's with one link and no lock, not new): a live writer's
 * (locked), one just made, another target's, a name of another shape, a
 * link, a file of two names; or if it leaves a dead writer's; or if the
 * file it makes is not new, empty, named TARGET.tmp-XXXXXX, and locked.
 */
START_TEST(test_staged_sweep)
{
	char *dir = pp_test_tmpdir();
	char target[PATH_MAX], tmp[PATH_MAX], other[PATH_MAX];
	int live, fd, probe;
	struct stat st;

	snprintf(target, sizeof(target), "%s/runs.csv", dir);
	pp_test_write_file(target, "old\n", 4);
	/* Status changes cannot be set back: a dead writer's file is one whose
	 * status last changed PP_STAGED_STALE_S seconds ago, so the test waits
	 * that long after making the old ones. */
	staged_file(dir, "runs.csv.tmp-dead01");
	staged_file(dir, "runs.csv.tmp-dead02");
	staged_file(dir, "runs.csv.tmp-live01");
	staged_file(dir, "other.csv.tmp-dead01");
	staged_file(dir, "runs.csv.tmp-toolong1");
	staged_file(dir, "runs.csv.tmp-short");
	staged_file(dir, "kept-target");
	snprintf(tmp, sizeof(tmp), "%s/runs.csv.tmp-link01", dir);
	ck_assert_int_eq(symlink("kept-target", tmp), 0);
	snprintf(other, sizeof(other), "%s/runs.csv.tmp-twice1", dir);
	ck_assert_int_eq(link(staged_file(dir, "second-name"), other), 0);
	snprintf(tmp, sizeof(tmp), "%s/runs.csv.tmp-live01", dir);
	live = open(tmp, O_RDONLY);
	ck_assert_int_ge(live, 0);
	ck_assert_int_eq(flock(live, LOCK_EX | LOCK_NB), 0);
	sleep(PP_STAGED_STALE_S + 1);
	staged_file(dir, "runs.csv.tmp-new001");

	fd = pp_staged_create(target, tmp, sizeof(tmp));
	ck_assert_int_ge(fd, 0);
	ck_assert(!exists(dir, "runs.csv.tmp-dead01"));
	ck_assert(!exists(dir, "runs.csv.tmp-dead02"));
	ck_assert(exists(dir, "runs.csv.tmp-live01"));
	ck_assert(exists(dir, "runs.csv.tmp-new001"));
	ck_assert(exists(dir, "other.csv.tmp-dead01"));
	ck_assert(exists(dir, "runs.csv.tmp-toolong1"));
	ck_assert(exists(dir, "runs.csv.tmp-short"));
	ck_assert(exists(dir, "runs.csv.tmp-link01"));
	ck_assert(exists(dir, "kept-target"));
	ck_assert(exists(dir, "runs.csv.tmp-twice1"));
	ck_assert(exists(dir, "runs.csv"));
	/* the new one: its own name, empty, locked while open */
	ck_assert_int_eq(strncmp(tmp, target, strlen(target)), 0);
	ck_assert_int_eq(strncmp(tmp + strlen(target), ".tmp-", 5), 0);
	ck_assert_uint_eq(strlen(tmp + strlen(target) + 5), 6);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert(S_ISREG(st.st_mode) && st.st_size == 0);
	probe = open(tmp, O_RDONLY);
	ck_assert_int_ge(probe, 0);
	ck_assert_int_eq(flock(probe, LOCK_EX | LOCK_NB), -1);
	ck_assert_int_eq(errno, EWOULDBLOCK);
	close(probe);
	/* its writer gone, and the time past, the next one removes it */
	close(fd);
	close(live);
	sleep(PP_STAGED_STALE_S + 1);
	snprintf(other, sizeof(other), "%s", tmp);
	fd = pp_staged_create(target, tmp, sizeof(tmp));
	ck_assert_int_ge(fd, 0);
	ck_assert_int_ne(access(other, F_OK), 0);
	ck_assert(!exists(dir, "runs.csv.tmp-live01"));
	ck_assert(!exists(dir, "runs.csv.tmp-new001"));
	close(fd);
	unlink(tmp);
	/* a name that does not fit */
	ck_assert_int_eq(pp_staged_create(target, tmp, strlen(target) + 5), -1);
	ck_assert_int_eq(errno, ENAMETOOLONG);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("common");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_error_message);
	tcase_add_test(tc, test_error_message_wraps_last);
	tcase_add_test(tc, test_error_message_per_thread);
	tcase_add_test(tc, test_crc32);
	tcase_add_test(tc, test_bytes_and_sizes);
	tcase_add_test(tc, test_parse_size);
	tcase_add_test(tc, test_replace_target);
	tcase_add_test(tc, test_write_full);
	tcase_add_test(tc, test_staged_sweep);
	/* test_staged_sweep waits twice for its files to age */
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return s;
}
