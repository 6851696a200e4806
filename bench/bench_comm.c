/*
 * bench/bench_comm.c: the time of one allreduce (mean, float32) through
 * pinpipe's communicator, as pinpipe-train's gradient hook issues it:
 *
 *   mpirun -np 2 bench/bench_comm [FLOATS [ITERATIONS [BACKEND]]]
 *
 * FLOATS defaults to the seeds' CNN's parameter count (32998), ITERATIONS
 * to 2000, BACKEND to auto.  Rank 0 prints the median, the 10th and the
 * 90th percentile of the time per call, in microseconds, after 100 calls
 * of warm-up; a barrier before each call starts the ranks together.
 *
 * What the non-blocking allreduce hides behind a backward pass:
 *
 *   mpirun -np 2 bench/bench_comm overlap [FLOATS [BUCKETS [WORK_US [PROGRESS_US
 *                                             [ITERATIONS [BACKEND]]]]]]
 *
 * A gradient of FLOATS floats (default 4194304, 16 MiB) in BUCKETS equal
 * buckets (default 8), each made by WORK_US microseconds of busy work on
 * the host (default 2000): the stand-in for the backward pass of its
 * layers, broken every PROGRESS_US by pp_comm_progress() (default 0: only
 * between buckets, as pinpipe-train's hook).  Four timings, each the median of ITERATIONS (default 30, after
 * 3 of warm-up), each after a barrier: the work alone; the allreduces
 * alone (blocking, bucket by bucket); the work then the blocking
 * allreduces (no overlap); and each bucket's pp_comm_iallreduce() as soon
 * as its work is done, pp_comm_progress() between buckets, and the waits
 * at the end (as pinpipe-train's buckets).  Rank 0 prints them, and the
 * share of the allreduces' time that the overlap hid:
 * (no overlap - overlapped) / allreduces alone, negative when the
 * overlapped run is the slower.  The busy work spins on the clock, so it
 * stands for computation that does not call MPI: Open MPI moves a
 * non-blocking collective on only inside its calls (pp_comm_progress()
 * and the waits), a step at a time, so the hidden share depends on how
 * often the work calls pp_comm_progress().
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pinpipe/pinpipe.h"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * 'us' of work that does not call MPI (the host kept busy until the clock
 * says so), broken every 'progress_us' (0: never) by pp_comm_progress().
 */
static int busy(struct pp_comm *comm, double us, double progress_us)
{
	const double end = now_us() + us;
	double next = progress_us > 0 ? now_us() + progress_us : end;
	int ret = 0;

	while (now_us() < end && ret == 0)
		if (now_us() >= next) {
			ret = pp_comm_progress(comm);
			next = now_us() + progress_us;
		}
	return ret;
}

/* The four timings of the overlap mode, per iteration, us. */
enum { T_WORK, T_COMM, T_SERIAL, T_OVERLAP, T_KINDS };

static int overlap_iteration(struct pp_comm *comm, float *buf, size_t floats, int buckets,
			     double work_us, double progress_us, int kind, double *t)
{
	const size_t per = floats / (size_t)buckets;
	struct pp_comm_request **req = calloc((size_t)buckets, sizeof(*req));
	double t0;
	int ret = pp_comm_barrier(comm);

	if (req == NULL)
		return -ENOMEM;
	t0 = now_us();
	for (int b = 0; b < buckets && ret == 0; b++) {
		/* The last bucket takes what the division leaves. */
		const size_t n = b == buckets - 1 ? floats - per * (size_t)b : per;

		if (kind != T_COMM)
			ret = busy(comm, work_us, kind == T_OVERLAP ? progress_us : 0);
		if (kind == T_COMM && ret == 0)
			ret = pp_comm_allreduce(comm, buf + per * (size_t)b, n, PP_COMM_F32,
						PP_COMM_MEAN, NULL);
		if (kind == T_OVERLAP && ret == 0) {
			ret = pp_comm_iallreduce(comm, buf + per * (size_t)b, n, PP_COMM_F32,
						 PP_COMM_MEAN, NULL, &req[b]);
			if (ret == 0)
				ret = pp_comm_progress(comm);
		}
	}
	for (int b = 0; b < buckets && kind == T_SERIAL && ret == 0; b++) {
		const size_t n = b == buckets - 1 ? floats - per * (size_t)b : per;

		ret = pp_comm_allreduce(comm, buf + per * (size_t)b, n, PP_COMM_F32, PP_COMM_MEAN,
					NULL);
	}
	for (int b = 0; b < buckets; b++) {
		int w = pp_comm_wait(req[b], NULL);

		if (ret == 0)
			ret = w;
	}
	*t = now_us() - t0;
	free(req);
	return ret;
}

static int overlap(struct pp_comm *comm, size_t floats, int buckets, double work_us,
		   double progress_us, int iters)
{
	static const char *const names[T_KINDS] = { "work alone", "allreduces alone",
						    "work then allreduces", "overlapped" };
	const int warm = 3;
	float *buf = calloc(floats, sizeof(float));
	double *t = calloc((size_t)iters * T_KINDS, sizeof(double)), med[T_KINDS];
	int ret = 0;

	if (buf == NULL || t == NULL) {
		free(buf);
		free(t);
		fprintf(stderr, "bench_comm: out of memory\n");
		return -ENOMEM;
	}
	/* The kinds interleaved, so that a slow spell of the machine falls on all of them. */
	for (int i = -warm; i < iters && ret == 0; i++)
		for (int k = 0; k < T_KINDS && ret == 0; k++) {
			double ti = 0;

			ret = overlap_iteration(comm, buf, floats, buckets, work_us, progress_us, k,
						&ti);
			if (i >= 0)
				t[k * iters + i] = ti;
		}
	if (ret == 0 && pp_comm_rank(comm) == 0) {
		printf("bench_comm: %s, %d ranks, %zu floats (%.1f MiB) in %d buckets, %.0f us of work "
		       "each, progress every %.0f us (0: between buckets), median of %d:\n",
		       pp_comm_backend(comm), pp_comm_size(comm), floats, (double)floats * 4 / 1048576,
		       buckets, work_us, progress_us, iters);
		for (int k = 0; k < T_KINDS; k++) {
			qsort(t + k * iters, (size_t)iters, sizeof(double), cmp_double);
			med[k] = t[k * iters + iters / 2];
			printf("  %-22s %10.0f us\n", names[k], med[k]);
		}
		printf("  hidden: %.0f%% of the allreduces' time\n",
		       100 * (med[T_SERIAL] - med[T_OVERLAP]) / med[T_COMM]);
	}
	free(t);
	free(buf);
	return ret;
}

/* The time of one allreduce: the first mode. */
static int one_allreduce(int argc, char **argv)
{
	const size_t floats = argc > 1 ? strtoull(argv[1], NULL, 10) : 32998;
	const int iters = argc > 2 ? atoi(argv[2]) : 2000, warm = 100;
	struct pp_comm_config cfg;
	struct pp_comm *comm;
	float *buf = calloc(floats ? floats : 1, sizeof(float));
	double *t = calloc((size_t)(iters > 0 ? iters : 1), sizeof(double));
	int ret = 0;

	if (buf == NULL || t == NULL || iters < 1) {
		fprintf(stderr, "bench_comm: usage: bench_comm [FLOATS [ITERATIONS >= 1 [BACKEND]]]\n");
		return 2;
	}
	pp_comm_config_init(&cfg);
	cfg.backend = argc > 3 ? argv[3] : "auto";
	if (pp_comm_create(&cfg, &comm) < 0) {
		fprintf(stderr, "bench_comm: %s\n", pp_last_error());
		return 1;
	}
	for (int i = -warm; i < iters && ret == 0; i++) {
		double t0;

		ret = pp_comm_barrier(comm);
		t0 = now_us();
		if (ret == 0)
			ret = pp_comm_allreduce(comm, buf, floats, PP_COMM_F32, PP_COMM_MEAN, NULL);
		if (i >= 0)
			t[i] = now_us() - t0;
	}
	if (ret < 0) {
		fprintf(stderr, "bench_comm: %s\n", pp_last_error());
		pp_comm_abort(comm, 1);
	} else if (pp_comm_rank(comm) == 0) {
		qsort(t, (size_t)iters, sizeof(double), cmp_double);
		printf("bench_comm: %s, %d ranks, allreduce of %zu floats (%.1f KiB): median %.1f us, "
		       "p10 %.1f, p90 %.1f (%d calls)\n", pp_comm_backend(comm), pp_comm_size(comm),
		       floats, (double)floats * 4 / 1024, t[iters / 2], t[iters / 10],
		       t[iters * 9 / 10], iters);
	}
	pp_comm_destroy(comm);
	free(t);
	free(buf);
	return ret < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	/* An option ("--help") would be read as a count of 0 and measured. */
	for (int i = 1; i < argc; i++)
		if (argv[i][0] == '-') {
			const bool help = strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;

			fprintf(help ? stdout : stderr, "usage: bench_comm [FLOATS [ITERATIONS [BACKEND]]]\n"
				"       bench_comm overlap [FLOATS [BUCKETS [WORK_US [PROGRESS_US "
				"[ITERATIONS [BACKEND]]]]]]\n(under mpirun; bench/bench_comm.c says more)\n");
			return help ? 0 : 2;
		}
	if (argc > 1 && strcmp(argv[1], "overlap") == 0) {
		const size_t floats = argc > 2 ? strtoull(argv[2], NULL, 10) : 4194304;
		const int buckets = argc > 3 ? atoi(argv[3]) : 8;
		const double work_us = argc > 4 ? atof(argv[4]) : 2000;
		const double progress_us = argc > 5 ? atof(argv[5]) : 0;
		const int iters = argc > 6 ? atoi(argv[6]) : 30;
		struct pp_comm_config cfg;
		struct pp_comm *comm;
		int ret;

		if (buckets < 1 || floats < (size_t)buckets || !(work_us >= 0) || !(progress_us >= 0) ||
		    iters < 1) {
			fprintf(stderr, "bench_comm: usage: bench_comm overlap [FLOATS >= BUCKETS "
				"[BUCKETS >= 1 [WORK_US >= 0 [PROGRESS_US >= 0 [ITERATIONS >= 1 "
				"[BACKEND]]]]]]\n");
			return 2;
		}
		pp_comm_config_init(&cfg);
		cfg.backend = argc > 7 ? argv[7] : "auto";
		if (pp_comm_create(&cfg, &comm) < 0) {
			fprintf(stderr, "bench_comm: %s\n", pp_last_error());
			return 1;
		}
		ret = overlap(comm, floats, buckets, work_us, progress_us, iters);
		if (ret < 0) {
			fprintf(stderr, "bench_comm: %s\n", pp_last_error());
			pp_comm_abort(comm, 1);
		}
		pp_comm_destroy(comm);
		return ret < 0 ? 1 : 0;
	}
	return one_allreduce(argc, argv);
}
