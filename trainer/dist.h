/*
 * trainer/dist.h: pinpipe-train on several ranks (mpirun -np N): the
 * communicator, the device of a rank, parameters made equal at the start,
 * gradients averaged every step through the model's gradient hook (or, with
 * --deterministic, reduced micro-batch by micro-batch in a fixed order),
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
	/* --deterministic, per run: */
	struct pp_model *model;   /* the run's model, whose gradient the slots hold */
	size_t n_params;          /* floats of one gradient */
	float *slots;             /* (micro, n_params) each micro-batch's gradient, host */
	unsigned local_done;      /* this step's micro-batches computed on this rank */
	unsigned local_count;     /* micro-batches of a step on this rank (micro / size) */
	/* gradients averaged bucket by bucket, per step: */
	size_t bucket_floats;     /* --bucket-kb, in floats */
	float *base;              /* the step's gradient vector (the hook's grads - offset) */
	size_t lo, hi;            /* the open bucket, floats [lo, hi) of it (lo = hi: none) */
	struct pp_comm_request **reqs; /* the step's allreduces in flight, in order */
	size_t n_reqs, cap_reqs;
	uint64_t buckets;         /* allreduces started, in all */
	uint64_t hook_ns;         /* time in the hook (starting them), in all */
	uint64_t sync_ns;         /* time in the sync (waiting for them), in all */
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

/*
 * Sets up the run's communicator of gradients for its device 'dev': the
 * job's, or one of the run's own (--comm=nccl: NCCL on 'dev'; several
 * ranks on a device the host cannot address: the job's backend, whose
 * staging memory is pinned for 'dev'); prints why not.  0 or -errno;
 * tr_dist_run_end() undoes it, before the device is closed.
 */
int tr_dist_run_begin(struct tr_dist *d, struct pp_device *dev);
void tr_dist_run_end(struct tr_dist *d);

/*
 * The gradient hook and sync of pp_model_config (arg: d): the hook adds
 * each range the backward pass hands over to the open bucket and starts
 * its average over the ranks (pp_comm_iallreduce) once the bucket holds
 * --bucket-kb; the sync starts the last one and waits for them all.
 * --deterministic: the hook keeps the micro-batch's ranges, the sync
 * reduces the micro-batches after this rank's last.
 */
int tr_dist_grad_hook(void *arg, float *grads, size_t offset, size_t count,
		      struct pp_stream *stream);
int tr_dist_grad_sync(void *arg, struct pp_stream *stream);

/*
 * Makes every rank's parameters rank 0's (a model made from the same seed
 * is already equal; a resumed one is made so too).  Sizes the slots of
 * --deterministic for 'model'.  0 or -errno.
 */
int tr_dist_start_model(struct tr_dist *d, struct pp_model *model);

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
