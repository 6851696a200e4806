/*
 * comm/comm_impl.h: what the files of comm/ share: the communicator's
 * structure and the ops table each backend fills (comm_local.c,
 * comm_mpi.c, comm_nccl.c).  The dispatcher (comm.c) validates every call,
 * applies the fault plan, and hands a backend without device buffers only
 * host memory: device memory the host addresses is used in place once its
 * stream is done, other device memory is staged through pinned memory.
 */
#ifndef PP_COMM_IMPL_H
#define PP_COMM_IMPL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/fault.h"
#include "common/internal.h"
#include "pinpipe/comm.h"

struct pp_comm;

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
	/* frees c->ctx; safe after a failed open */
	void (*close)(struct pp_comm *c);
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
};

/*
 * Sets the thread's last error to "comm <backend>: rank R of N: <call>: "
 * and the rest of the message; returns err.
 */
int pp_comm_fail(const struct pp_comm *c, int err, const char *call, const char *fmt, ...)
	PP_PRINTF(4, 5);

/* The element size of dtype (0: unknown). */
size_t pp_comm_dtype_size(enum pp_comm_dtype dtype);

/* True when a launcher (mpirun, srun) started this process in a world of more than one rank. */
bool pp_comm_launched(void);

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
