/*
 * trainer/dist.h: pinpipe-train on several ranks (mpirun -np N): the
 * communicator, the device of a rank, the run's grad sync (pinpipe/grad_sync.h:
 * parameters made equal at the start, gradients averaged every step in
 * buckets of --bucket-kb or, with --deterministic, reduced micro-batch by
 * micro-batch in a fixed order), the micro-batches of a rank's batch,
 * metrics summed over the ranks, and a stop that every rank agrees on.
 */
#ifndef PP_TRAINER_DIST_H
#define PP_TRAINER_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/pinpipe.h"
#include "trainer/options.h"

struct tr_dist {
	struct pp_comm *comm;     /* the ranks, host buffers: parameters, metrics, the stop */
	struct pp_comm *grads;    /* the run's communicator of gradients: comm, or one of
				     the run's own on its GPU (nccl, or mpi staging through
				     pinned memory: tr_dist_run_begin()) */
	bool nccl;                /* --comm=nccl */
	double timeout_s;         /* --comm-timeout */
	int rank, size;           /* in the job */
	bool deterministic;       /* --deterministic: fixed micro-batches, fixed order */
	unsigned micro_opt;       /* --micro-batches as given (0: each run's default) */
	unsigned micro;           /* --deterministic: the run's micro-batches per global batch (M) */
	unsigned local_count;     /* --deterministic: micro-batches of a step on this rank (micro / size) */
	size_t bucket_bytes;      /* --bucket-kb, in bytes */
	/* per run: */
	struct pp_grad_sync *sync; /* the run's gradient averaging over grads (several ranks, or
				      --deterministic), or NULL */
	struct pp_model *model;   /* the run's model */
	uint64_t comm_ns;         /* the grad syncs of the runs before this one: ns in their
				     hooks and syncs */
	char why[512];            /* the run's failure found here ("rank R of N: ..."), or "" */
};

/* Makes the communicator of --comm and --comm-timeout; prints why not.  0 or -errno. */
int tr_dist_open(const struct tr_options *opt, struct tr_dist *d);

/*
 * Several ranks: checks that every rank was given the options that must
 * agree (those of the training and of the grid, not paths, output or
 * threads): rank 0's are broadcast and each rank compares its own.
 * Returns 0, -EINVAL when one differs (each differing rank says its value
 * and rank 0's on stderr; why, on every rank, names the option and the
 * ranks), or -errno of a failed collective (why says so).
 */
int tr_dist_check_options(struct tr_dist *d, const struct tr_options *opt, char *why, size_t len);
void tr_dist_close(struct tr_dist *d);

/*
 * The device this rank opens for 'name': with several ranks, "cuda" and
 * "auto" (where there is a GPU) become cuda:(local rank % GPUs), as
 * PyTorch's DistributedDataParallel does; other names stay as given.
 */
void tr_dist_device(const struct tr_dist *d, const char *name, char *buf, size_t len);

/*
 * Checks a run's batch size against the ranks and micro-batches (why not
 * in why[0..len)); fills the per-run state of --deterministic.  0 or -EINVAL.
 */
int tr_dist_check_batch(struct tr_dist *d, unsigned batch_size, char *why, size_t len);

/* Values tr_dist_check_state() compares, at most. */
#define TR_DIST_STATE_MAX 8

/*
 * Checks that every rank holds what rank 0 holds before a run trains:
 * mine[0..n) (names[k] says what each is: a checkpoint's step count and
 * CRC, the training samples' count), sent by rank 0 to the others.  A
 * rank whose values differ says so on stderr; then every rank returns
 * -EINVAL with why (a stale copy of the checkpoint on one machine trained
 * on silently, or ended the job in MPI_ERR_TRUNCATE with no reason), or 0.
 */
int tr_dist_check_state(struct tr_dist *d, const uint64_t *mine, const char *const *names,
			size_t n, char *why, size_t len);

/*
 * Sets up the run's communicator of gradients for its device 'dev': the
 * job's, or one of the run's own (--comm=nccl: NCCL on 'dev'; several
 * ranks on a device the host cannot address: the job's backend, whose
 * staging memory is pinned for 'dev'); and, with several ranks or
 * --deterministic, the run's grad sync over it (d->sync, for the model's
 * config: pp_grad_sync_attach()).  Prints why not.  0 or -errno;
 * tr_dist_run_end() undoes it, before the device is closed.
 */
int tr_dist_run_begin(struct tr_dist *d, struct pp_device *dev);
void tr_dist_run_end(struct tr_dist *d);

/*
 * Makes every rank's parameters rank 0's (a model made from the same seed
 * is already equal; a resumed one is made so too) and sizes the slots of
 * --deterministic for 'model' (pp_grad_sync_start()).  0 or -errno.
 */
int tr_dist_start_model(struct tr_dist *d, struct pp_model *model);

/* Nanoseconds spent averaging gradients, in the hooks and syncs of every run so far. */
uint64_t tr_dist_comm_ns(const struct tr_dist *d);

/*
 * --deterministic: trains one global step on this rank's batch of n
 * samples (b->samples of sample_bytes each, b->labels), micro-batch by
 * micro-batch, through a tensor of one micro-batch on 'dev'.  0 or -errno.
 */
int tr_dist_deterministic_step(struct tr_dist *d, struct pp_device *dev, const void *samples,
			       const int32_t *labels, size_t n, enum pp_dtype dtype,
			       size_t sample_bytes, int ndim, const size_t *sample_shape);

/* Sums the running totals of the ranks into *m (a world of one: unchanged).  0 or -errno. */
int tr_dist_sum_metrics(struct tr_dist *d, struct pp_model_metrics *m);

/*
 * True when any rank wants to stop (its 'stop' is true): every rank then
 * stops at the same step.  A failed collective also stops (*err_p < 0).
 */
bool tr_dist_any(struct tr_dist *d, bool stop, int *err_p);

#endif
