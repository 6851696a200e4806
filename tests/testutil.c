/*
 * tests/testutil.c: temporary directories, files and data for the suites,
 * the attempts of timing tests and a gate to hold a stream.
 */
#include "config.h"

#include <check.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pinpipe/device.h"
#include "tests/testutil.h"

char *pp_test_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	char *path;

	if (base == NULL || base[0] == '\0')
		base = "/tmp";
	ck_assert_int_gt(asprintf(&path, "%s/pinpipe-test-XXXXXX", base), 0);
	ck_assert_msg(mkdtemp(path) != NULL, "mkdtemp %s failed", path);
	return path;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void pp_test_rmtree(const char *dir)
{
	if (dir != NULL)
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void pp_test_write_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");

	ck_assert_msg(f != NULL, "cannot create %s", path);
	ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

void *pp_test_read_file(const char *path, size_t *len_p)
{
	FILE *f = fopen(path, "rb");
	long len;
	void *buf;

	ck_assert_msg(f != NULL, "cannot open %s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	ck_assert_int_ge(len, 0);
	rewind(f);
	buf = malloc((size_t)len + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	((char *)buf)[len] = '\0'; /* text read with string functions ends there */
	*len_p = (size_t)len;
	return buf;
}

const char *pp_test_fashion_mnist_dir(void)
{
	const char *dir = getenv("PP_FASHION_MNIST_DIR");
	char path[4096];

	if (getenv("PP_TEST_QUICK") != NULL)
		return NULL;
	if (dir == NULL || dir[0] == '\0')
		dir = "/usr/share/datasets/fashion-mnist";
	snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", dir);
	return access(path, R_OK) == 0 ? dir : NULL;
}

bool pp_test_io_pread(void)
{
	const char *e = getenv("PP_TEST_IO");

	return e != NULL && strcmp(e, "pread") == 0;
}

void pp_test_fill_random(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 24);
	}
}

void pp_test_watchdog_arm(void)
{
	alarm(PP_TEST_WATCHDOG_S);
}

int pp_test_cuda_gpus_or_skip(const char *const **names_p)
{
	static char names[16][16];
	static const char *ptrs[16];
	int gpus = pp_device_cuda_count();

	if (gpus <= 0) {
		printf("SKIP: %s\n", pp_last_error());
		exit(77);
	}
	if (gpus > 16)
		gpus = 16;
	for (int i = 0; i < gpus; i++) {
		snprintf(names[i], sizeof(names[i]), "cuda:%d", i);
		ptrs[i] = names[i];
	}
	*names_p = ptrs;
	return gpus;
}

int pp_test_run_nofork(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* True under valgrind: its preload is in LD_PRELOAD. */
static bool under_valgrind(void)
{
	const char *pre = getenv("LD_PRELOAD");

	return pre != NULL && strstr(pre, "vgpreload") != NULL;
}

/*
 * True in a ThreadSanitizer build, whose instrumented loads, stores and
 * locks slow the threads unevenly (the sim's copy engine against a caller
 * spinning for its call cost): its stage looks for races, not for times.
 */
static bool under_tsan(void)
{
#if defined(__SANITIZE_THREAD__)
	return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
	return true;
#else
	return false;
#endif
#else
	return false;
#endif
}

void pp_test_timing_begin(struct pp_test_timing *t, const char *test)
{
	t->test = test;
	t->attempt = 0;
	t->judged = 0;
	t->done = false;
	t->wait = NAN;
	t->why[0] = '\0';
}

bool pp_test_timing_attempt(struct pp_test_timing *t)
{
	if (t->done)
		return false;
	if (t->judged < PP_TEST_TIMING_JUDGED && t->attempt < PP_TEST_TIMING_ATTEMPTS) {
		t->attempt++;
		t->wait = NAN;
		return true;
	}
	if (t->judged == 0)
		fprintf(stderr, "%s: timing not judged: the host was too loaded in every attempt\n",
			t->test);
	return false;
}

void pp_test_timing_start(struct pp_test_timing *t)
{
	pp_hostload_read(&t->start);
}

void pp_test_timing_stop(struct pp_test_timing *t)
{
	struct pp_hostload now;
	double w;

	pp_hostload_read(&now);
	w = pp_hostload_waiting(&t->start, &now);
	if (!isnan(w) && (isnan(t->wait) || w > t->wait))
		t->wait = w;
}

void pp_test_timing_result(struct pp_test_timing *t, const char *why)
{
	bool loaded = !isnan(t->wait) && t->wait >= PP_HOSTLOAD_TOO_LOADED;
	char wait[64];

	if (why == NULL) {
		t->done = true;
		return;
	}
	if (under_valgrind() || under_tsan()) {
		fprintf(stderr, "%s: timing not checked %s: %s\n", t->test,
			under_valgrind() ? "under valgrind (one thread at a time)"
					 : "under ThreadSanitizer (its instrumentation slows threads unevenly)",
			why);
		t->done = true;
		return;
	}
	if (isnan(t->wait))
		snprintf(wait, sizeof(wait), "threads waiting for a core unknown");
	else
		snprintf(wait, sizeof(wait), "%.2f threads waiting for a core", t->wait);
	fprintf(stderr, "%s: attempt %d missed (%s, %s): %s\n", t->test, t->attempt,
		loaded ? "host loaded, not counted" : "judged", wait, why);
	if (!loaded) {
		t->judged++;
		snprintf(t->why, sizeof(t->why), "%s (%s)", why, wait);
	}
}

const char *pp_test_timing_failure(const struct pp_test_timing *t)
{
	return t->done || t->judged == 0 ? NULL : t->why;
}

void pp_test_gate_init(struct pp_test_gate *g)
{
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	g->open = false;
	g->reached = false;
}

void pp_test_gate_pass(void *arg)
{
	struct pp_test_gate *g = arg;

	pthread_mutex_lock(&g->mu);
	g->reached = true;
	pthread_cond_broadcast(&g->cv);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

void pp_test_gate_open(struct pp_test_gate *g)
{
	pthread_mutex_lock(&g->mu);
	g->open = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

bool pp_test_gate_is_open(struct pp_test_gate *g)
{
	bool open;

	pthread_mutex_lock(&g->mu);
	open = g->open;
	pthread_mutex_unlock(&g->mu);
	return open;
}

void pp_test_gate_wait_reached(struct pp_test_gate *g)
{
	pthread_mutex_lock(&g->mu);
	while (!g->reached)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

void pp_test_gate_destroy(struct pp_test_gate *g)
{
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->mu);
}
