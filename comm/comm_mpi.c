/*
 * comm/comm_mpi.c: the mpi backend.  Each communicator works on its own
 * duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so that an MPI error
 * comes back as -EIO with MPI's message rather than ending the process.
 * Every collective is issued non-blocking (MPI_Iallreduce, MPI_Ibcast,
 * MPI_Ibarrier) and polled with MPI_Test until it is done or the
 * communicator's timeout has passed; after a while of polling the rank
 * sleeps between polls, so that ranks sharing cores leave them to the
 * ranks still computing.  MPI is initialised here when the process has not done it,
 * and then finalised at exit, unless a collective of any communicator timed
 * out or failed, or the job was aborted: a request left pending would make
 * MPI_Finalize wait for ranks that never come.  Creating a communicator is
 * bounded by the timeout too: MPI_Comm_idup, polled, and a polled barrier
 * before the split into the machine's ranks.  A non-blocking allreduce is
 * the same MPI_Iallreduce calls left in flight: MPI_Testall moves them on
 * (pp_comm_progress()), and the wait polls them as a blocking collective
 * is polled, until the timeout counted from the wait.  MPI forbids
 * freeing a collective's request before it is done, so a request never
 * waited for is left to MPI, and MPI is not finalised at exit.
 */
#include "config.h"

#include <limits.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm_impl.h"

/* Elements (or bytes) in one MPI call: MPI counts are int. */
#define MPI_CHUNK (1 << 30)

/*
 * How long a collective is polled back to back before the polls are
 * spaced by a sleep, and that sleep (ns): MPI progresses a non-blocking
 * collective only inside MPI_Test, segment by segment, so a sleep (or a
 * sched_yield(), which on a loaded machine gives the core away for a time
 * slice) between polls from the start would add one to every segment
 * (8 ms for the CNN's gradient here instead of 0.3); after the spin phase
 * the rank is waiting for a slower rank and leaves the core to it.
 */
#define MPI_SPIN_NS 2000000ull
#define MPI_POLL_SLEEP_NS 50000

struct mpi_ctx {
	MPI_Comm comm; /* the duplicate of MPI_COMM_WORLD */
};

/* MPI was initialised by pinpipe: MPI_Finalize is registered with atexit() once. */
static atomic_bool finalize_registered;

/* A collective timed out or failed, or the job was aborted: no MPI_Finalize at exit. */
static atomic_bool finalize_unsafe;

static void finalize_at_exit(void)
{
	int finalized = 0;

	if (atomic_load(&finalize_unsafe))
		return;
	MPI_Finalized(&finalized);
	if (!finalized)
		MPI_Finalize();
}

/* The message of MPI error code rc, as a comm error of 'call'. */
static int mpi_fail(const struct pp_comm *c, int rc, const char *call)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	atomic_store(&finalize_unsafe, true);
	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		len = snprintf(msg, sizeof(msg), "MPI error %d", rc);
	msg[len < (int)sizeof(msg) ? len : (int)sizeof(msg) - 1] = '\0';
	return pp_comm_fail(c, -EIO, call, "%s", msg);
}

/* MPI_Testall of n requests: 0 and *done, or -EIO with MPI's message. */
static int test_requests(struct pp_comm *c, int n, MPI_Request *reqs, bool *done, const char *call)
{
	int flag = 0, rc = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);

	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, call);
	*done = flag != 0;
	return 0;
}

/*
 * Waits for n requests of 'bytes' in all until 'deadline' (pp_now_ns()):
 * polled back to back for MPI_SPIN_NS from the call, then with a sleep
 * between polls.
 */
static int wait_requests(struct pp_comm *c, int n, MPI_Request *reqs, uint64_t deadline,
			 const char *call, size_t bytes)
{
	const uint64_t start = pp_now_ns();
	const struct timespec nap = { 0, MPI_POLL_SLEEP_NS };
	bool done = false;

	for (;;) {
		int ret = test_requests(c, n, reqs, &done, call);

		if (ret < 0 || done)
			return ret;
		const uint64_t now = pp_now_ns();

		if (now >= deadline) {
			atomic_store(&finalize_unsafe, true);
			if (bytes == 0)
				return pp_comm_fail(c, -ETIMEDOUT, call, "not done within the timeout of "
						    "%g s: another rank failed, stalled or was killed",
						    c->timeout_s);
			return pp_comm_fail(c, -ETIMEDOUT, call, "%zu bytes not done within the timeout "
					    "of %g s: another rank failed, stalled or was killed",
					    bytes, c->timeout_s);
		}
		if (now - start >= MPI_SPIN_NS)
			nanosleep(&nap, NULL);
	}
}

/* Waits for the request until the deadline of the communicator's timeout. */
static int wait_request(struct pp_comm *c, MPI_Request *req, const char *call, size_t bytes)
{
	return wait_requests(c, 1, req, pp_now_ns() + (uint64_t)(c->timeout_s * 1e9), call, bytes);
}

static MPI_Datatype mpi_type(enum pp_comm_dtype dtype)
{
	return dtype == PP_COMM_F64 ? MPI_DOUBLE : MPI_FLOAT;
}

/* The sum into the mean, on the host: MPI has no MPI_SUM divided by the size. */
static void mean_of_sum(const struct pp_comm *c, void *buf, size_t count, enum pp_comm_dtype dtype,
			enum pp_comm_op op)
{
	if (op == PP_COMM_MEAN && dtype == PP_COMM_F32)
		for (size_t i = 0; i < count; i++)
			((float *)buf)[i] /= (float)c->size;
	else if (op == PP_COMM_MEAN)
		for (size_t i = 0; i < count; i++)
			((double *)buf)[i] /= (double)c->size;
}

static int mpi_allreduce(struct pp_comm *c, void *buf, size_t count, enum pp_comm_dtype dtype,
			 enum pp_comm_op op, struct pp_stream *stream)
{
	struct mpi_ctx *x = c->ctx;
	const size_t es = pp_comm_dtype_size(dtype);
	char *p = buf;
	int ret;

	for (size_t done = 0; done < count;) {
		const int n = (int)(count - done < MPI_CHUNK ? count - done : MPI_CHUNK);
		MPI_Request req;
		int rc = MPI_Iallreduce(MPI_IN_PLACE, p + done * es, n, mpi_type(dtype), MPI_SUM,
					x->comm, &req);

		if (rc != MPI_SUCCESS)
			return mpi_fail(c, rc, "allreduce");
		ret = wait_request(c, &req, "allreduce", (size_t)n * es);
		if (ret < 0)
			return ret;
		done += (size_t)n;
	}
	mean_of_sum(c, buf, count, dtype, op);
	return 0;
}

/* A request's MPI requests, one per MPI_CHUNK of its elements. */
struct mpi_req {
	int issued;              /* requests issued, 0..n */
	int n;                   /* requests it takes */
	MPI_Request reqs[];
};

static int mpi_istart(struct pp_comm_request *r, struct pp_stream *stream)
{
	struct pp_comm *c = r->comm;
	struct mpi_ctx *x = c->ctx;
	const size_t es = pp_comm_dtype_size(r->dtype);
	const size_t n = (r->count + MPI_CHUNK - 1) / MPI_CHUNK;
	struct mpi_req *m = calloc(1, sizeof(*m) + n * sizeof(MPI_Request));
	char *p = r->buf;

	if (m == NULL)
		return pp_comm_fail(c, -ENOMEM, "iallreduce", "out of memory");
	m->n = (int)n;
	r->state = m;
	for (size_t done = 0; done < r->count; m->issued++) {
		const int k = (int)(r->count - done < MPI_CHUNK ? r->count - done : MPI_CHUNK);
		int rc = MPI_Iallreduce(MPI_IN_PLACE, p + done * es, k, mpi_type(r->dtype), MPI_SUM,
					x->comm, &m->reqs[m->issued]);

		if (rc != MPI_SUCCESS)
			return mpi_fail(c, rc, "iallreduce");
		done += (size_t)k;
	}
	return 0;
}

static int mpi_itest(struct pp_comm_request *r)
{
	struct mpi_req *m = r->state;

	return test_requests(r->comm, m->n, m->reqs, &r->done, "iallreduce");
}

static int mpi_iwait(struct pp_comm_request *r, struct pp_stream *stream)
{
	struct mpi_req *m = r->state;
	int ret = 0;

	if (!r->done)
		ret = wait_requests(r->comm, m->n, m->reqs, r->deadline, "iallreduce",
				    r->count * pp_comm_dtype_size(r->dtype));
	if (ret < 0)
		return ret;
	r->done = true;
	mean_of_sum(r->comm, r->buf, r->count, r->dtype, r->op);
	return 0;
}

static void mpi_ifree(struct pp_comm_request *r)
{
	/* Requests still in flight stay with MPI (MPI_Request_free of a collective's
	 * is erroneous), which then cannot be finalised. */
	if (!r->done && r->state != NULL)
		atomic_store(&finalize_unsafe, true);
	free(r->state);
	r->state = NULL;
}

static int mpi_broadcast(struct pp_comm *c, void *buf, size_t bytes, int root,
			 struct pp_stream *stream)
{
	struct mpi_ctx *x = c->ctx;
	char *p = buf;

	for (size_t done = 0; done < bytes;) {
		const int n = (int)(bytes - done < MPI_CHUNK ? bytes - done : MPI_CHUNK);
		MPI_Request req;
		int rc = MPI_Ibcast(p + done, n, MPI_BYTE, root, x->comm, &req);
		int ret;

		if (rc != MPI_SUCCESS)
			return mpi_fail(c, rc, "broadcast");
		ret = wait_request(c, &req, "broadcast", (size_t)n);
		if (ret < 0)
			return ret;
		done += (size_t)n;
	}
	return 0;
}

static int mpi_barrier(struct pp_comm *c)
{
	struct mpi_ctx *x = c->ctx;
	MPI_Request req;
	int rc = MPI_Ibarrier(x->comm, &req);

	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, "barrier");
	return wait_request(c, &req, "barrier", 0);
}

static void mpi_abort(struct pp_comm *c, int code)
{
	struct mpi_ctx *x = c->ctx;

	atomic_store(&finalize_unsafe, true);
	MPI_Abort(x->comm != MPI_COMM_NULL ? x->comm : MPI_COMM_WORLD, code);
}

static void mpi_close(struct pp_comm *c)
{
	struct mpi_ctx *x = c->ctx;
	int finalized = 0;

	if (x == NULL)
		return;
	MPI_Finalized(&finalized);
	if (x->comm != MPI_COMM_NULL && !finalized)
		MPI_Comm_free(&x->comm);
	free(x);
	c->ctx = NULL;
}

static const struct pp_comm_ops mpi_ops = {
	.name = "mpi",
	.allreduce = mpi_allreduce,
	.broadcast = mpi_broadcast,
	.barrier = mpi_barrier,
	.abort = mpi_abort,
	.close = mpi_close,
	.istart = mpi_istart,
	.itest = mpi_itest,
	.iwait = mpi_iwait,
	.ifree = mpi_ifree,
	.device_buffers = false,
};

/* Initialises MPI unless the process did; registers its finalisation then. */
static int mpi_start(struct pp_comm *c)
{
	int inited = 0, finalized = 0, provided, rc;

	MPI_Finalized(&finalized);
	if (finalized)
		return pp_comm_fail(c, -EIO, "create", "MPI was already finalised in this process");
	MPI_Initialized(&inited);
	if (inited)
		return 0;
	rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, "MPI_Init_thread");
	if (!atomic_exchange(&finalize_registered, true))
		atexit(finalize_at_exit);
	return 0;
}

int pp_comm_mpi_open(struct pp_comm *c)
{
	struct mpi_ctx *x;
	MPI_Comm node, dup = MPI_COMM_NULL;
	MPI_Request req;
	int rc, ret;

	c->ops = &mpi_ops;
	ret = mpi_start(c);
	if (ret < 0)
		return ret;
	x = calloc(1, sizeof(*x));
	if (x == NULL)
		return pp_comm_fail(c, -ENOMEM, "create", "out of memory");
	x->comm = MPI_COMM_NULL;
	c->ctx = x;
	/* The world's rank and size name this rank in the messages of create. */
	rc = MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
	if (rc == MPI_SUCCESS)
		rc = MPI_Comm_size(MPI_COMM_WORLD, &c->size);
	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, "create: the rank in MPI_COMM_WORLD");
	/* Non-blocking, polled until the timeout: a rank that never comes fails it. */
	rc = MPI_Comm_idup(MPI_COMM_WORLD, &dup, &req);
	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, "create: MPI_Comm_idup");
	ret = wait_request(c, &req, "create: MPI_Comm_idup", 0);
	if (ret < 0)
		return ret;
	x->comm = dup;
	rc = MPI_Comm_set_errhandler(x->comm, MPI_ERRORS_RETURN);
	if (rc == MPI_SUCCESS)
		rc = MPI_Comm_rank(x->comm, &c->rank);
	if (rc == MPI_SUCCESS)
		rc = MPI_Comm_size(x->comm, &c->size);
	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, "create");
	/* MPI_Comm_split_type blocks until every rank calls it: a polled barrier
	 * first, so that a missing rank fails within the timeout. */
	rc = MPI_Ibarrier(x->comm, &req);
	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, "create: the barrier before MPI_Comm_split_type");
	ret = wait_request(c, &req, "create: the barrier before MPI_Comm_split_type", 0);
	if (ret < 0)
		return ret;
	/* The ranks that share this machine's memory: the node-local rank. */
	rc = MPI_Comm_split_type(x->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
	if (rc == MPI_SUCCESS) {
		rc = MPI_Comm_rank(node, &c->local_rank);
		if (rc == MPI_SUCCESS)
			rc = MPI_Comm_size(node, &c->local_size);
		MPI_Comm_free(&node);
	}
	if (rc != MPI_SUCCESS)
		return mpi_fail(c, rc, "create: MPI_Comm_split_type (the ranks of this machine)");
	return 0;
}
