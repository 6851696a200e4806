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
 */
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv)
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
