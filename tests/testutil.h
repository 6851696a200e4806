/*
 * tests/testutil.h: helpers shared by the Check suites.
 */
#ifndef PP_TESTS_TESTUTIL_H
#define PP_TESTS_TESTUTIL_H

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hostload.h"

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
 * A timing test's attempts on a shared host (a 2-core laptop, a CI host
 * whose cores other processes take): each attempt measures its runs and
 * checks relations between the figures it measured; a miss is measured
 * again, up to PP_TEST_TIMING_ATTEMPTS attempts.  A miss during which this
 * process's threads waited for a core PP_HOSTLOAD_TOO_LOADED or more on
 * average (the sim's copy engines and kernels are host threads, so their
 * times then measure the host) does not count; PP_TEST_TIMING_JUDGED misses
 * that do fail the test, and when every miss was loaded the test says on
 * stderr that its timing was not judged, and passes.  Under valgrind (its
 * preload in LD_PRELOAD: every thread on one core, one at a time) and in a
 * ThreadSanitizer build (its instrumentation slows threads unevenly) the
 * first miss is said not checked.  A test checks the rest all the same.
 *
 *	struct pp_test_timing t;
 *
 *	pp_test_timing_begin(&t, "test_name");
 *	while (pp_test_timing_attempt(&t)) {
 *		open; pp_test_timing_start(&t); run; pp_test_timing_stop(&t); close;
 *		pp_test_timing_result(&t, NULL or why);
 *	}
 *	ck_assert_msg(pp_test_timing_failure(&t) == NULL, "%s", pp_test_timing_failure(&t));
 */
#define PP_TEST_TIMING_ATTEMPTS 5
#define PP_TEST_TIMING_JUDGED 3
struct pp_test_timing {
	const char *test;
	int attempt;              /* attempts begun */
	int judged;               /* misses on a host not too loaded */
	bool done;                /* passed, or excused */
	double wait;              /* the attempt's runs: the most threads waiting for a core; NAN unknown */
	struct pp_hostload start; /* the reading at the start of the run under way */
	char why[480];            /* the last judged miss */
};

/* Starts the attempts of test 'test'. */
void pp_test_timing_begin(struct pp_test_timing *t, const char *test);

/* Whether to make another attempt (none passed yet, misses left); begins it. */
bool pp_test_timing_attempt(struct pp_test_timing *t);

/*
 * Around each run of an attempt, while the threads that it measures are
 * alive (a thread that ended took its delay with it): reads how long this
 * process's threads waited for a core; the attempt counts its worst run.
 */
void pp_test_timing_start(struct pp_test_timing *t);
void pp_test_timing_stop(struct pp_test_timing *t);

/* Ends an attempt: 'why' its figures missed (copied), or NULL when they held. */
void pp_test_timing_result(struct pp_test_timing *t, const char *why);

/* After the attempts: why the test fails, or NULL (passed, excused or not judged). */
const char *pp_test_timing_failure(const struct pp_test_timing *t);

/*
 * A host function (pp_stream_launch_host(s, pp_test_gate_pass, &gate))
 * that holds its stream until the test opens the gate: what is queued
 * after it cannot have run before pp_test_gate_open(), on any machine.
 */
struct pp_test_gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool open;
	bool reached; /* the stream has reached the gate */
};
void pp_test_gate_init(struct pp_test_gate *g);
void pp_test_gate_pass(void *arg);
void pp_test_gate_open(struct pp_test_gate *g);
bool pp_test_gate_is_open(struct pp_test_gate *g);
/* Waits until the stream has reached the gate. */
void pp_test_gate_wait_reached(struct pp_test_gate *g);
void pp_test_gate_destroy(struct pp_test_gate *g);

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
