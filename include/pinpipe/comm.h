/*
 * pinpipe/comm.h: a communicator for data-parallel training: the ranks of a
 * job (processes started by mpirun, across machines), and the collectives a
 * data-parallel trainer needs: allreduce (sum, mean) of float buffers on
 * the host or on a device, broadcast and barrier.
 *
 * Backends, chosen by name at create:
 *   local  one process: rank 0 of 1, every collective a no-op (the buffer
 *          already holds the result), so that a trainer written for
 *          several ranks runs unchanged in one.
 *   mpi    MPI (Open MPI): host buffers directly; a device buffer is read
 *          in place on a device the host addresses (cpu, sim), or staged
 *          through pinned host memory (cuda).  Built when configure finds
 *          MPI (--with-mpi).
 *   nccl   NCCL: device buffers of a cuda device, on the caller's stream;
 *          host buffers and the barrier through MPI.  The unique id is
 *          broadcast over MPI, or made in-process for a world of one.
 *          Built when configure finds CUDA and NCCL in its toolkit; MPI
 *          is not needed to build it, only for a world of several ranks
 *          (without MPI, nccl runs in a world of one).
 *   auto   mpi when the process was started by mpirun (or another MPI
 *          launcher) in a world of more than one rank, else local.
 *
 * Timeouts: every collective is bounded by the communicator's timeout,
 * and so is creating a communicator (mpi: MPI_Comm_idup and a barrier,
 * polled; nccl: ncclCommInitRankConfig, non-blocking, polled).  MPI's
 * collectives are issued non-blocking and polled until done or the
 * deadline; nccl's are queued on the stream and then waited for, queueing
 * and completion together within the timeout (the wait covers the work
 * queued on the stream before the collective too), and any NCCL error or
 * timeout aborts the NCCL communicator (ncclCommAbort);
 * a collective that misses it fails with -ETIMEDOUT and a message naming
 * the rank, the call and the timeout.  A non-blocking allreduce is bounded
 * by the same timeout, counted from its start to the end of its wait.  A collective that failed or timed
 * out leaves the ranks out of step: the caller ends the job with
 * pp_comm_abort(), so that no rank waits for ever on one that failed.
 * MPI errors are returned (MPI_ERRORS_RETURN on the communicator), never
 * fatal by themselves.
 *
 * Thread safety: a communicator belongs to one thread at a time; MPI is
 * initialised with MPI_THREAD_FUNNELED when pinpipe initialises it.
 * Every message of a failure of a communicator's call starts "comm
 * <backend>: rank R of N: <call>"; pp_comm_create()'s, before there are
 * ranks, "comm" or "comm <backend>".
 */
#ifndef PINPIPE_COMM_H
#define PINPIPE_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "pinpipe/common.h"
#include "pinpipe/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default bound of one collective, seconds. */
#define PP_COMM_DEFAULT_TIMEOUT_S 300.0

/* How an allreduce combines the ranks' buffers. */
enum pp_comm_op {
	PP_COMM_SUM = 1,  /* element-wise sum */
	PP_COMM_MEAN = 2, /* element-wise sum divided by the world size */
};

/* Element type of a reduced buffer. */
enum pp_comm_dtype {
	PP_COMM_F32 = 1, /* float */
	PP_COMM_F64 = 2, /* double */
};

/* How to make a communicator. */
struct pp_comm_config {
	const char *backend;      /* "auto", "local", "mpi", "nccl"; NULL: "auto" */
	double timeout_s;         /* bound of each collective, seconds, > 0; 0: the default */
	struct pp_device *device; /* nccl: the cuda device of the buffers (required); others:
				     unused (a stream's device is the stream's own) */
};

/* Fills *cfg with the defaults: "auto", PP_COMM_DEFAULT_TIMEOUT_S, no device. */
PP_API void pp_comm_config_init(struct pp_comm_config *cfg);

struct pp_comm;

/*
 * Makes a communicator ('cfg' NULL: the defaults).  mpi initialises MPI
 * when the process has not (and finalises it at exit, unless a collective
 * timed out or failed, or the job was aborted: a pending request would
 * hang MPI_Finalize), and works on its own duplicate of MPI_COMM_WORLD;
 * every rank of the world must call it, within the timeout.  Returns 0
 * and the communicator in *comm_p, or -EINVAL (an unknown backend, a bad
 * timeout, nccl without a cuda device), -ENOTSUP (a backend this build
 * lacks: the message says which configure option builds it), -EIO (MPI or
 * NCCL failed to start, with its message), -ETIMEDOUT (another rank did
 * not join within the timeout), -ENOMEM.  The environment variable PP_FAULTS (see
 * the tests) may make its collectives fail, for the tests of a failing rank.
 */
PP_API int pp_comm_create(const struct pp_comm_config *cfg, struct pp_comm **comm_p);

/* Frees the communicator (MPI itself stays initialised until exit).  NULL is allowed. */
PP_API void pp_comm_destroy(struct pp_comm *comm);

/* The backend that runs: "local", "mpi" or "nccl" (never "auto"). */
PP_API const char *pp_comm_backend(const struct pp_comm *comm);

/* This process's rank, 0..size-1, and the number of ranks. */
PP_API int pp_comm_rank(const struct pp_comm *comm);
PP_API int pp_comm_size(const struct pp_comm *comm);

/*
 * The rank among the ranks of this machine, 0..local_size-1, and their
 * number: rank R of a machine with G GPUs uses cuda:(R % G), as
 * PyTorch's DistributedDataParallel does.
 */
PP_API int pp_comm_local_rank(const struct pp_comm *comm);
PP_API int pp_comm_local_size(const struct pp_comm *comm);

/* The bound of each collective, seconds. */
PP_API double pp_comm_timeout(const struct pp_comm *comm);

/*
 * True when an MPI launcher (mpirun, mpiexec, srun) started this process
 * as one of several ranks, as its environment says (OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE, PMIX_SIZE, MPI_LOCALNRANKS or SLURM_NTASKS above 1): the test
 * of "auto", for a program that must not run as one of several alone.
 */
PP_API bool pp_comm_launched(void);

/*
 * Replaces buf[0..count) on every rank by the element-wise sum (or mean)
 * of all ranks' buffers.  With 'stream' NULL, 'buf' is host memory and the
 * call returns when done.  Otherwise 'buf' is memory of the stream's device
 * (pp_device_alloc()): the reduction comes after the work queued on the
 * stream before it, and work queued after it sees the result; mpi waits
 * for the stream and returns when done, nccl queues it on the stream and
 * returns once the stream has run it (its host thread waits: no overlap
 * with the work queued after it).
 * Every rank calls it with the same count, dtype and op.  mpi stages the
 * buffers of a device the host cannot address (cuda) through pinned host
 * memory of that device, kept for the next call: destroy the communicator
 * before closing the device.  Returns 0, or
 * -EINVAL (NULL buf with count > 0, an unknown dtype or op; count 0 does
 * nothing), -ETIMEDOUT (not done within the timeout), -EIO (MPI or NCCL
 * failed, with its message), -ENOMEM.
 */
PP_API int pp_comm_allreduce(struct pp_comm *comm, void *buf, size_t count,
			     enum pp_comm_dtype dtype, enum pp_comm_op op, struct pp_stream *stream);

/* An allreduce in flight (pp_comm_iallreduce()), ended by pp_comm_wait(). */
struct pp_comm_request;

/*
 * Starts the allreduce of pp_comm_allreduce() and returns with it in
 * flight in *req_p, so that the caller goes on computing (the rest of a
 * backward pass) while the ranks reduce: pp_comm_wait() ends it.  Every
 * rank starts the same allreduces (count, dtype, op) in the same order;
 * several may be in flight at once and be waited for in any order.  The
 * caller neither reads nor writes buf[0..count) until the wait.
 * With 'stream' NULL, 'buf' is host memory.  Otherwise it is memory of
 * the stream's device, taken as the work queued on the stream before this
 * call leaves it: mpi on a device the host addresses (cpu, sim) waits for
 * the stream here, then MPI reduces in the background; mpi on a device it
 * does not address (cuda) stages and reduces it all here, the host
 * waiting (no overlap: nccl is the backend of GPUs); nccl queues it on a
 * stream of the communicator's own, behind an event of 'stream', so that
 * it runs beside the work queued on 'stream' after it.  MPI moves a
 * collective on only inside its calls: pp_comm_progress() between pieces
 * of work keeps the requests going.  count 0 gives a request already done.
 * Returns 0, or the errors of pp_comm_allreduce() (and -EINVAL for a NULL
 * req_p); *req_p is then NULL.
 */
PP_API int pp_comm_iallreduce(struct pp_comm *comm, void *buf, size_t count,
			      enum pp_comm_dtype dtype, enum pp_comm_op op, struct pp_stream *stream,
			      struct pp_comm_request **req_p);

/*
 * Moves the communicator's requests in flight on, without waiting for
 * any: 0, or -EIO (MPI or NCCL failed, with its message; the failed
 * request's wait fails too).
 */
PP_API int pp_comm_progress(struct pp_comm *comm);

/*
 * Ends a request and frees it, whatever it returns.  With 'stream' NULL
 * it returns once the result is in buf; with a stream of the buffer's
 * device, once the work queued on 'stream' after this call will see the
 * result (nccl: the host waits until the communicator's stream has run the
 * reduction, and 'stream' waits for it on the device too).  Bounded by
 * the communicator's timeout, counted from this call (the caller's own
 * work since the start does not count).  Returns 0, or -ETIMEDOUT, -EIO,
 * -ENOMEM, -EINVAL (nccl: a stream of another device); as after a failed
 * pp_comm_allreduce(), the ranks are then out of step (pp_comm_abort()).
 * NULL: 0.  A request never waited for is freed by pp_comm_destroy(),
 * its reduction abandoned (MPI is then not finalised at exit; nccl aborts
 * its communicator rather than wait for it).
 */
PP_API int pp_comm_wait(struct pp_comm_request *req, struct pp_stream *stream);

/*
 * Copies 'bytes' of buf from rank 'root' to every other rank's buf;
 * 'stream' as for pp_comm_allreduce().  Returns 0, or -EINVAL (root out
 * of range, NULL buf with bytes > 0), -ETIMEDOUT, -EIO, -ENOMEM.
 */
PP_API int pp_comm_broadcast(struct pp_comm *comm, void *buf, size_t bytes, int root,
			     struct pp_stream *stream);

/* Returns when every rank has called it: 0, or -ETIMEDOUT, -EIO. */
PP_API int pp_comm_barrier(struct pp_comm *comm);

/*
 * Ends every process of the job with exit status 'code' (MPI_Abort), after
 * a failure on this rank that the others cannot know of: they may be
 * waiting in a collective.  In a world of one it does nothing and returns
 * 0: the caller ends as it would without a communicator.
 */
PP_API int pp_comm_abort(struct pp_comm *comm, int code);

#ifdef __cplusplus
}
#endif
#endif
