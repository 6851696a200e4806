/*
 * tests/comm_ranks.c: the non-blocking allreduce on several ranks, run by
 * tests/test_comm_mpi.sh under mpirun:
 *
 *   comm_ranks reduce   several allreduces in flight at once (f32 and f64,
 *                       sum and mean, on the host and in a sim device's
 *                       memory on a stream, one of some 12 MB and counts
 *                       that are multiples of nothing), pp_comm_progress()
 *                       between the starts, waited for in reverse order,
 *                       three rounds; each result compared exactly with the
 *                       value computed here.  Exit 0 and "ok" from each rank.
 *   comm_ranks skip     after an allreduce on a communicator of 120 s
 *                       has lined the ranks up, one of 1 s: rank 1 starts
 *                       its first allreduce but not the second: the other
 *                       ranks' wait for it fails with -ETIMEDOUT after the
 *                       timeout of 1 s, and each ends the job with
 *                       pp_comm_abort(comm, 3).  Rank 1 waits (out of MPI)
 *                       for 60 s and exits 4 should no abort come.
 *   comm_ranks grad     the grad sync (pinpipe/grad_sync.h) over the ranks,
 *                       called as a model's backward pass calls it: a
 *                       gradient of 100003 floats in ranges of uneven
 *                       sizes, last first, averaged in buckets of 64 KiB,
 *                       each float the exact mean of the ranks'; then the
 *                       deterministic reduction of 6 micro-batches, equal
 *                       bit for bit to the sum of the 6 micro-batches' in
 *                       order k = 0..5 over 6, as one process computes it.
 *                       Exit 0 and "grad ok" from each rank.
 *   comm_ranks gradfail rank 1's communicator fails its collectives (an
 *                       injected EIO): its hook fails with the error,
 *                       named, and it ends the job with exit 5.
 *
 * The values are integers well below 2^24, so that every sum is exact in
 * float whatever the order MPI adds in, and the mean is compared with the
 * exact sum divided by the world size, as the backend divides.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pinpipe/pinpipe.h"

/* One allreduce of a round. */
struct job {
	size_t count;
	enum pp_comm_dtype dtype;
	enum pp_comm_op op;
	bool on_device;                /* in sim device memory on the stream, else on the host */
	void *host;                    /* the values, then the result */
	void *dev;                     /* on_device: the device's copy */
	struct pp_comm_request *req;
};

/* Rank r's element i: an integer below 1000 + 1000 * r (exact as float). */
static double value(int rank, size_t i, int round)
{
	return (double)((i * 7 + (size_t)round) % 1000) + 1000.0 * rank;
}

/* The exact sum over 'size' ranks of value(.., i, round), then the mean as the backend makes it. */
static double expected(const struct job *j, int size, size_t i, int round)
{
	double sum = 0;

	for (int r = 0; r < size; r++)
		sum += value(r, i, round);
	if (j->op == PP_COMM_SUM)
		return sum;
	return j->dtype == PP_COMM_F32 ? (double)((float)sum / (float)size) : sum / size;
}

static int fail(const char *what, int rank)
{
	fprintf(stderr, "comm_ranks: rank %d: %s: %s\n", rank, what, pp_last_error());
	return -1;
}

/* Fills a job's buffer with this rank's values and starts its allreduce. */
static int start(struct pp_comm *comm, struct job *j, struct pp_stream *s, int round)
{
	const int rank = pp_comm_rank(comm);
	const size_t es = j->dtype == PP_COMM_F32 ? sizeof(float) : sizeof(double);

	for (size_t i = 0; i < j->count; i++) {
		if (j->dtype == PP_COMM_F32)
			((float *)j->host)[i] = (float)value(rank, i, round);
		else
			((double *)j->host)[i] = value(rank, i, round);
	}
	if (j->on_device && pp_memcpy_async(j->dev, j->host, j->count * es, PP_COPY_H2D, s) < 0)
		return fail("copy to the device", rank);
	if (pp_comm_iallreduce(comm, j->on_device ? j->dev : j->host, j->count, j->dtype, j->op,
			       j->on_device ? s : NULL, &j->req) < 0)
		return fail("iallreduce", rank);
	return 0;
}

/* Waits for a job and compares its result exactly with the expected one. */
static int check(struct pp_comm *comm, struct job *j, struct pp_stream *s, int round)
{
	const int rank = pp_comm_rank(comm), size = pp_comm_size(comm);
	const size_t es = j->dtype == PP_COMM_F32 ? sizeof(float) : sizeof(double);

	if (pp_comm_wait(j->req, j->on_device ? s : NULL) < 0)
		return fail("wait", rank);
	if (j->on_device) {
		memset(j->host, 0, j->count * es);
		if (pp_memcpy_async(j->host, j->dev, j->count * es, PP_COPY_D2H, s) < 0 ||
		    pp_stream_synchronize(s) < 0)
			return fail("copy from the device", rank);
	}
	for (size_t i = 0; i < j->count; i++) {
		const double got = j->dtype == PP_COMM_F32 ? (double)((float *)j->host)[i] :
			((double *)j->host)[i];
		const double want = expected(j, size, i, round);

		if (got != want) {
			fprintf(stderr, "comm_ranks: rank %d of %d, round %d: %zu %s %s (%s): element "
				"%zu is %.17g, expected %.17g\n", rank, size, round, j->count,
				j->dtype == PP_COMM_F32 ? "f32" : "f64",
				j->op == PP_COMM_SUM ? "sum" : "mean", j->on_device ? "sim" : "host", i,
				got, want);
			return -1;
		}
	}
	return 0;
}

/* A bit of work between the starts, calling pp_comm_progress() as a backward pass would. */
static int compute(struct pp_comm *comm, double *acc)
{
	for (int k = 0; k < 1000; k++)
		*acc += 1e-9 * k;
	return pp_comm_progress(comm) < 0 ? fail("progress", pp_comm_rank(comm)) : 0;
}

static int reduce(struct pp_comm *comm)
{
	struct job jobs[] = {
		{ 1, PP_COMM_F32, PP_COMM_SUM, false, NULL, NULL, NULL },
		{ 1000, PP_COMM_F32, PP_COMM_MEAN, true, NULL, NULL, NULL },
		{ 3 * 1048576 + 7, PP_COMM_F32, PP_COMM_SUM, false, NULL, NULL, NULL },
		{ 12345, PP_COMM_F64, PP_COMM_MEAN, false, NULL, NULL, NULL },
		{ 777, PP_COMM_F64, PP_COMM_SUM, true, NULL, NULL, NULL },
		{ 0, PP_COMM_F32, PP_COMM_SUM, false, NULL, NULL, NULL },
		{ 65537, PP_COMM_F32, PP_COMM_MEAN, false, NULL, NULL, NULL },
		{ 200003, PP_COMM_F32, PP_COMM_SUM, true, NULL, NULL, NULL },
	};
	const int n = (int)(sizeof(jobs) / sizeof(jobs[0])), rank = pp_comm_rank(comm);
	struct pp_device *dev = NULL;
	struct pp_stream *s = NULL;
	double acc = 0;
	int ret = 0;

	if (pp_device_open("sim", &dev) < 0 || pp_stream_create(dev, &s) < 0)
		return fail("the sim device", rank);
	for (int k = 0; k < n && ret == 0; k++) {
		const size_t bytes = (jobs[k].count ? jobs[k].count : 1) *
			(jobs[k].dtype == PP_COMM_F32 ? sizeof(float) : sizeof(double));

		jobs[k].host = malloc(bytes);
		if (jobs[k].host == NULL || (jobs[k].on_device &&
					     pp_device_alloc(dev, bytes, &jobs[k].dev) < 0))
			ret = fail("memory", rank);
	}
	for (int round = 0; round < 3 && ret == 0; round++) {
		for (int k = 0; k < n && ret == 0; k++) {
			ret = start(comm, &jobs[k], s, round);
			if (ret == 0)
				ret = compute(comm, &acc);
		}
		for (int k = n - 1; k >= 0 && ret == 0; k--)
			ret = check(comm, &jobs[k], s, round);
	}
	for (int k = 0; k < n; k++) {
		if (jobs[k].dev != NULL)
			pp_device_free(dev, jobs[k].dev);
		free(jobs[k].host);
	}
	pp_stream_destroy(s);
	pp_device_close(dev);
	if (ret == 0)
		printf("comm_ranks: rank %d of %d: ok (%d allreduces in flight, 3 rounds)\n", rank,
		       pp_comm_size(comm), n);
	return ret;
}

/*
 * Rank 1 never starts the second allreduce: the others time out waiting for
 * it.  The communicator of 1 s is made once an allreduce on 'comm' (120 s)
 * has lined the ranks up: they start apart (3 ranks on 2 cores, under a
 * sanitizer, beside other tests), and a rank a second behind would time out
 * the making of the communicator or the first allreduce instead.
 */
static int skip(struct pp_comm *comm)
{
	const int rank = pp_comm_rank(comm);
	float a[100] = { 0 }, b[1000] = { 0 };
	struct pp_comm_request *ra, *rb = NULL;
	struct pp_comm_config cfg;
	struct pp_comm *brief;

	if (pp_comm_allreduce(comm, a, 100, PP_COMM_F32, PP_COMM_SUM, NULL) < 0)
		return fail("allreduce", rank);
	pp_comm_config_init(&cfg);
	cfg.backend = "mpi";
	cfg.timeout_s = 1;
	if (pp_comm_create(&cfg, &brief) < 0)
		return fail("create", rank);
	if (pp_comm_iallreduce(brief, a, 100, PP_COMM_F32, PP_COMM_SUM, NULL, &ra) < 0)
		return fail("iallreduce", rank);
	if (rank != 1 && pp_comm_iallreduce(brief, b, 1000, PP_COMM_F32, PP_COMM_SUM, NULL, &rb) < 0)
		return fail("iallreduce", rank);
	if (pp_comm_wait(ra, NULL) < 0)
		return fail("wait", rank);
	if (rank == 1) {
		const struct timespec second = { 1, 0 };

		for (int i = 0; i < 60; i++)
			nanosleep(&second, NULL);
		fprintf(stderr, "comm_ranks: rank 1: no abort came within 60 s\n");
		exit(4);
	}
	if (pp_comm_wait(rb, NULL) == 0) {
		fprintf(stderr, "comm_ranks: rank %d: the wait for a request rank 1 never started "
			"returned 0\n", rank);
		return -1;
	}
	fprintf(stderr, "comm_ranks: rank %d: %s\n", rank, pp_last_error());
	pp_comm_abort(brief, 3);
	return -1;
}

/* Rank r's gradient of micro-batch (or step) k at float i: an integer, exact in any sum. */
static float grad_value(int rank, int k, size_t i)
{
	return (float)((i * 13 + (size_t)k * 7) % 1000) + 1000.0f * (float)rank;
}

/* Hands grads[0..n) to the grad sync as a backward pass does: uneven ranges, the last first. */
static int backward(struct pp_grad_sync *gs, float *grads, size_t n)
{
	static const size_t sizes[] = { 7, 30001, 1, 12345, 4096 };
	size_t hi = n;
	int ret = 0;

	for (int r = 0; hi > 0 && ret == 0; r = (r + 1) % 5) {
		const size_t count = sizes[r] < hi ? sizes[r] : hi;

		ret = pp_grad_sync_hook(gs, grads + hi - count, hi - count, count, NULL);
		hi -= count;
		if (ret == 0 && r == 2)
			ret = pp_grad_sync_hook(gs, NULL, n, 0, NULL); /* a tick */
	}
	return ret < 0 ? ret : pp_grad_sync_end(gs, NULL);
}

static struct pp_grad_sync *make_sync(struct pp_comm *comm, size_t bucket_bytes, unsigned micro)
{
	struct pp_grad_sync_config gc;
	struct pp_grad_sync *gs = NULL;

	pp_grad_sync_config_init(&gc);
	gc.comm = comm;
	gc.bucket_bytes = bucket_bytes;
	gc.micro_batches = micro;
	if (pp_grad_sync_create(&gc, &gs) < 0)
		fail("grad sync", pp_comm_rank(comm));
	return gs;
}

static int grad(struct pp_comm *comm)
{
	const int rank = pp_comm_rank(comm), size = pp_comm_size(comm);
	const size_t n = 100003;
	const unsigned micro = 6;
	float *g = malloc(n * sizeof(float));
	struct pp_grad_sync *gs = make_sync(comm, 64 << 10, 0);
	struct pp_device *dev = NULL;
	struct pp_model_config mc;
	struct pp_model *model = NULL;
	struct pp_grad_sync_stats st;
	size_t np;
	int ret = 0;

	if (g == NULL || gs == NULL)
		return -1;
	/* Buckets: each float the mean of the ranks', as the backend divides. */
	for (int step = 0; step < 3 && ret == 0; step++) {
		for (size_t i = 0; i < n; i++)
			g[i] = grad_value(rank, step, i);
		if (backward(gs, g, n) < 0)
			ret = fail("buckets", rank);
		for (size_t i = 0; i < n && ret == 0; i++) {
			float sum = 0.0f;

			for (int r = 0; r < size; r++)
				sum += grad_value(r, step, i);
			if (g[i] != sum / (float)size) {
				fprintf(stderr, "comm_ranks: rank %d of %d: grad step %d: float %zu is %.9g, "
					"the mean is %.9g\n", rank, size, step, i, (double)g[i],
					(double)(sum / (float)size));
				ret = -1;
			}
		}
	}
	/* Buckets of 30008, 16442, 30008, 16442 floats and the last 7103: 5 a step. */
	pp_grad_sync_get_stats(gs, &st);
	if (ret == 0 && (st.steps != 3 || st.bytes != 3 * n * sizeof(float) || st.allreduces != 3 * 5)) {
		fprintf(stderr, "comm_ranks: rank %d: grad: %llu steps, %llu bytes in %llu allreduces\n",
			rank, (unsigned long long)st.steps, (unsigned long long)st.bytes,
			(unsigned long long)st.allreduces);
		ret = -1;
	}
	pp_grad_sync_destroy(gs);

	/* Deterministic: micro-batch k = rank + size j; the result as one process adds them. */
	gs = make_sync(comm, 0, micro);
	if (ret == 0 && (gs == NULL || pp_device_open("cpu", &dev) < 0))
		ret = fail("the cpu device", rank);
	pp_model_config_init(&mc);
	if (ret == 0 && pp_model_create("mlp", dev, &mc, &model) < 0)
		ret = fail("the model", rank);
	if (ret == 0 && pp_grad_sync_start(gs, model) < 0)
		ret = fail("start", rank);
	np = model ? pp_model_param_count(model) : 0;
	for (unsigned j = 0; j < micro / (unsigned)size && ret == 0; j++) {
		const int k = rank + size * (int)j;

		for (size_t i = 0; i < np; i++)
			g[i] = grad_value(k % 2, k, i) / 3.0f; /* not exact: the order shows */
		ret = backward(gs, g, np);
		if (ret != (j + 1 == micro / (unsigned)size ? 0 : PP_MODEL_GRAD_KEEP))
			ret = fail("the micro-batches' sync", rank);
		else
			ret = 0;
	}
	for (size_t i = 0; i < np && ret == 0; i++) {
		float sum = 0.0f;

		for (unsigned k = 0; k < micro; k++)
			sum += grad_value((int)k % 2, (int)k, i) / 3.0f;
		if (memcmp(&g[i], &(float){ sum / (float)micro }, sizeof(float)) != 0) {
			fprintf(stderr, "comm_ranks: rank %d of %d: deterministic: float %zu is %.9g, "
				"one process has %.9g\n", rank, size, i, (double)g[i],
				(double)(sum / (float)micro));
			ret = -1;
		}
	}
	pp_grad_sync_destroy(gs);
	pp_model_destroy(model);
	pp_device_close(dev);
	free(g);
	if (ret == 0)
		printf("comm_ranks: rank %d of %d: grad ok\n", rank, size);
	return ret;
}

/* Rank 1's collectives fail (PP_FAULTS given to its communicator alone): it ends the job. */
static int gradfail(struct pp_comm *comm)
{
	const int rank = pp_comm_rank(comm);
	struct pp_grad_sync *gs = make_sync(comm, 0, 0);
	float g[64] = { 0 };
	int ret;

	if (gs == NULL)
		return -1;
	ret = backward(gs, g, 64);
	pp_grad_sync_destroy(gs);
	if (ret == 0) {
		if (rank == 1)
			fprintf(stderr, "comm_ranks: rank 1: the failing collectives did not fail\n");
		return 0;
	}
	fprintf(stderr, "comm_ranks: rank %d: the gradient: %s\n", rank, pp_last_error());
	pp_comm_abort(comm, 5);
	return -1;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "reduce";
	struct pp_comm_config cfg;
	struct pp_comm *comm;
	int ret;

	if (strcmp(mode, "reduce") != 0 && strcmp(mode, "skip") != 0 && strcmp(mode, "grad") != 0 &&
	    strcmp(mode, "gradfail") != 0) {
		fprintf(stderr, "comm_ranks: usage: comm_ranks [reduce|skip|grad|gradfail]\n");
		return 2;
	}
	/* gradfail: rank 1's communicator fails its collectives (the fault plan is read at create). */
	if (strcmp(mode, "gradfail") == 0 && getenv("OMPI_COMM_WORLD_RANK") != NULL &&
	    strcmp(getenv("OMPI_COMM_WORLD_RANK"), "1") == 0)
		setenv("PP_FAULTS", "comm:EIO", 1);
	pp_comm_config_init(&cfg);
	cfg.backend = "mpi";
	/* Generous for a loaded machine; skip() makes its own of 1 s. */
	cfg.timeout_s = 120;
	if (pp_comm_create(&cfg, &comm) < 0) {
		fprintf(stderr, "comm_ranks: %s\n", pp_last_error());
		return 1;
	}
	ret = strcmp(mode, "skip") == 0 ? skip(comm) : strcmp(mode, "grad") == 0 ? grad(comm) :
	      strcmp(mode, "gradfail") == 0 ? gradfail(comm) : reduce(comm);
	if (ret < 0)
		pp_comm_abort(comm, 1);
	pp_comm_destroy(comm);
	return ret < 0 ? 1 : 0;
}
