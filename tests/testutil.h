/*
 * tests/testutil.h: helpers shared by the Check suites.
 */
#ifndef PP_TESTS_TESTUTIL_H
#define PP_TESTS_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each test program defines its module's suite under this name. */
Suite *pp_test_suite(void);

/* A fresh empty directory under $TMPDIR (or /tmp); the caller removes it with pp_test_rmtree(). */
char *pp_test_tmpdir(void);

/* Removes a directory made by pp_test_tmpdir() and everything in it. */
void pp_test_rmtree(const char *dir);

/* Writes len bytes to path, replacing it; fails the test on error. */
void pp_test_write_file(const char *path, const void *buf, size_t len);

/* Reads a whole file into a malloc'd buffer; fails the test on error. */
void *pp_test_read_file(const char *path, size_t *len_p);

/*
 * The directory holding the real Fashion-MNIST, or NULL if it is not
 * installed or PP_TEST_QUICK is set (the tests on it take minutes under valgrind).
 */
const char *pp_test_fashion_mnist_dir(void);

/*
 * Whether PP_TEST_IO=pread asks the loaders of the tests to read through
 * pread, for valgrind, which does not see the kernel write through io_uring
 * into a buffer.
 */
bool pp_test_io_pread(void);

/* Fills buf with deterministic pseudo-random bytes from seed. */
void pp_test_fill_random(void *buf, size_t len, uint64_t seed);

/*
 * What a timing test fails with: 'why' (NULL when its timing held), or NULL
 * under valgrind (its preload is in LD_PRELOAD), after saying on stderr
 * that test 'test' did not check it: valgrind runs every thread of the
 * process on one core, one at a time, so relations between the times of
 * threads that a test measures (a copy hidden behind compute) do not hold
 * there; nor in a ThreadSanitizer build, whose instrumentation slows the
 * threads unevenly (its stage looks for races).  The test checks the rest
 * all the same.
 */
const char *pp_test_timing_failure(const char *test, const char *why);

/*
 * A watchdog for programs that run Check without forking (CUDA does not
 * survive fork), where Check's timeout does not apply: a checked fixture
 * that arms alarm(PP_TEST_WATCHDOG_S) before each test, so that a test that
 * hangs (a failed assertion that leaves a host function blocked, say) kills
 * the program with SIGALRM instead of hanging make check.  The next test
 * re-arms it; after the last, the program's exit stays guarded.  Longer
 * than the 60 s timeout of the forked cases, which report first there.
 */
#define PP_TEST_WATCHDOG_S 90
void pp_test_watchdog_arm(void);

/*
 * For the programs that need a GPU: writes the names "cuda:0", "cuda:1", ...
 * of this machine's GPUs (up to 16, in storage of this file) to *names_p
 * and returns their count; with none, prints why and exits 77, which
 * automake counts as SKIP.
 */
int pp_test_cuda_gpus_or_skip(const char *const **names_p);

/* Runs the suite without forking (CUDA does not survive fork()); returns the exit status. */
int pp_test_run_nofork(Suite *s);

#endif
