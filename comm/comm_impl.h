/*
 * comm/comm_impl.h: what the files of comm/ share: the communicator's
 * structure and the ops table each backend fills (comm_local.c,
 * comm_mpi.c, comm_nccl.c).  The dispatcher (comm.c) validates every call,
 * applies the fault plan, and hands a backend without device buffers only
 * host memory: device memory the host addresses is used in place once its
 * stream is done, other device memory is staged through pinned memory.
 * The non-blocking allreduce is a request each backend may carry on in the
 * background (mpi, nccl); a backend without the request ops (local) has
 * its requests done at the start, by its blocking allreduce.
 */
#ifndef PP_COMM_IMPL_H
#define PP_COMM_IMPL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "pinpipe/comm.h"

struct pp_comm;
struct pp_comm_request;

/* A backend.  Buffers are host memory unless device_buffers says otherwise. */
struct pp_comm_ops {
	const char *name;
	/* buf (count of dtype) reduced in place; count > 0 */
	int (*allreduce)(struct pp_comm *c, void *buf, size_t count, enum pp_comm_dtype dtype,
			 enum pp_comm_op op, struct pp_stream *stream);
	/* bytes of buf from root; bytes > 0 */
	int (*broadcast)(struct pp_comm *c, void *buf, size_t bytes, int root,
			 struct pp_stream *stream);
	int (*barrier)(struct pp_comm *c);
	/* ends every rank; called only in a world of more than one */
	void (*abort)(struct pp_comm *c, int code);
	/* frees c->ctx; safe after a failed open, and called once every request is freed */
	void (*close)(struct pp_comm *c);
	/*
	 * The non-blocking allreduce, all four or none (optional: without them
	 * a request is done at its start by allreduce).  istart issues r (its
	 * buf, count > 0, dtype, op) on 'stream' as allreduce takes it, and may
	 * set r->done; r->state is the backend's.  itest moves r on without
	 * waiting and sets r->done once the reduction is done.  iwait waits
	 * until done or r->deadline, then makes the result seen by the work
	 * queued on 'stream' after the call (NULL: the host); called once, and
	 * only for a request that has not failed.  ifree frees r->state, the
	 * reduction possibly still in flight (a request never waited for, or
	 * a failed one).  Each returns -errno with a message on failure.
	 */
	int (*istart)(struct pp_comm_request *r, struct pp_stream *stream);
	int (*itest)(struct pp_comm_request *r);
	int (*iwait)(struct pp_comm_request *r, struct pp_stream *stream);
	void (*ifree)(struct pp_comm_request *r);
	/* allreduce and broadcast take buffers of a cuda device on a stream (nccl);
	 * host buffers then come with stream NULL */
	bool device_buffers;
};

struct pp_comm {
	const struct pp_comm_ops *ops;
	int rank, size;               /* in the job */
	int local_rank, local_size;   /* on this machine */
	double timeout_s;             /* bound of each collective, seconds */
	struct pp_device *device;     /* nccl: the buffers' cuda device; else NULL */
	struct pp_fault_plan faults;  /* PP_FAULTS or the creating thread's plan */
	bool has_faults;              /* faults holds a plan */
	struct pp_device *stage_dev;  /* the device the staging buffer was pinned for */
	void *stage;                  /* pinned host memory for device buffers (stage_bytes) */
	size_t stage_bytes;           /* bytes */
	void *ctx;                    /* the backend's */
	struct pp_comm_request *reqs; /* the requests not yet waited for, newest first */
};

/* An allreduce in flight (pp_comm_iallreduce()), from its start to its wait. */
struct pp_comm_request {
	struct pp_comm *comm;
	struct pp_comm_request *prev, *next; /* in comm->reqs */
	void *buf;                /* the buffer reduced in place: host memory unless the
				     backend has device buffers */
	size_t count;             /* elements */
	enum pp_comm_dtype dtype;
	enum pp_comm_op op;
	uint64_t deadline;        /* pp_now_ns() plus the timeout, ns: from the start, then
				     from the wait */
	bool issued;              /* started by the backend's istart: its iwait ends it */
	bool done;                /* the reduction is done (its result may still need iwait) */
	int error;                /* the first error, -errno; 0: none */
	char *msg;                /* its message, said again by the wait; NULL: none kept */
	void *state;              /* the backend's */
};

/*
 * Sets the thread's last error to "comm <backend>: rank R of N: <call>: "
 * and the rest of the message; returns err.
 */
int pp_comm_fail(const struct pp_comm *c, int err, const char *call, const char *fmt, ...)
	PP_PRINTF(4, 5);

/* The element size of dtype (0: unknown). */
size_t pp_comm_dtype_size(enum pp_comm_dtype dtype);

/*
 * The requests of the backends that pass a collective on to another
 * communicator (nccl's host buffers): start, move on and free a request of
 * 'c' without the checks and the fault plan of the public calls; the
 * request is waited for by pp_comm_wait().
 */
int pp_comm_request_start(struct pp_comm *c, void *buf, size_t count, enum pp_comm_dtype dtype,
			  enum pp_comm_op op, struct pp_stream *stream, struct pp_comm_request **req_p);
int pp_comm_request_test(struct pp_comm_request *r);
void pp_comm_request_free(struct pp_comm_request *r);

/* The backends' openers: fill c->ops, c->ctx, rank and sizes; -errno with a message. */
int pp_comm_local_open(struct pp_comm *c);

#ifdef PP_HAVE_MPI
int pp_comm_mpi_open(struct pp_comm *c);
#else
static inline int pp_comm_mpi_open(struct pp_comm *c)
{
	(void)c;
	return pp_error(-ENOTSUP, "comm mpi: this build has no MPI (configure --with-mpi, with "
			"Debian's openmpi-bin and libopenmpi-dev installed)");
}
#endif

#ifdef PP_HAVE_NCCL
int pp_comm_nccl_open(struct pp_comm *c);
#else
static inline int pp_comm_nccl_open(struct pp_comm *c)
{
	(void)c;
	return pp_error(-ENOTSUP, "comm nccl: this build has no NCCL (configure finds it with the "
			"CUDA toolkit: --with-cuda, nccl.h and libnccl.so in it)");
}
#endif

#endif
