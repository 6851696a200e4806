/*
 * pinpipe/grad_sync.h: data-parallel training: a model's gradient
 * averaged over the ranks of a communicator (pinpipe/comm.h) every step,
 * through the model's gradient hook and sync (pp_model_config.grad_hook,
 * grad_sync), so that every rank applies the same update to the same
 * parameters: one model trained on the global batch of N x the batch of
 * each of the N ranks, as PyTorch's DistributedDataParallel does.
 *
 *   pp_comm_create(NULL, &comm);                 // mpi under mpirun, else local
 *   pp_grad_sync_config_init(&gc);
 *   gc.comm = comm;
 *   pp_grad_sync_create(&gc, &gs);
 *   pp_model_config_init(&mc);
 *   pp_grad_sync_attach(gs, &mc);
 *   pp_model_create("cnn", dev, &mc, &model);
 *   pp_grad_sync_start(gs, model);               // rank 0's parameters everywhere
 *   ... pp_model_train_step(model, in, labels) on each rank's own batches ...
 *   pp_model_destroy(model); pp_grad_sync_destroy(gs); pp_comm_destroy(comm);
 *
 * Two ways to average:
 *
 *   buckets (micro_batches 0)  The model hands the gradient over range by
 *       range (a layer's parameters), from the last layer down, as the
 *       backward pass makes them.  Consecutive ranges are gathered into a
 *       bucket of at least bucket_bytes, and the bucket's mean over the
 *       ranks is started (pp_comm_iallreduce()) as soon as it is full, so
 *       that it runs while the backward pass goes on with the layers
 *       below; the sync starts the last bucket and waits for them all
 *       before the optimizer reads the gradient.  The result is the mean
 *       to float rounding: the sum's order is MPI's (with 2 ranks, a + b
 *       whatever the order).
 *
 *   deterministic (micro_batches M > 0)  A global batch is M micro-batches,
 *       M a multiple of the N ranks; rank r trains its M/N micro-batches
 *       one pp_model_train_step() each, its j-th being micro-batch
 *       k = r + N j.  Each micro-batch's gradient is kept in a slot of its
 *       own, the sync ending the step without an update
 *       (PP_MODEL_GRAD_KEEP) after all but the rank's last; then the slots
 *       of every rank are summed by one allreduce in which each slot has a
 *       single non-zero contributor (exact in any order), and each rank adds
 *       the M slots from k = 0 up and divides by M.  The result depends on
 *       neither N nor which rank computed what: N ranks and one process
 *       training the same M micro-batches hold the same parameters bit for
 *       bit, for every N that divides M (on the CPU, whose step is
 *       bit-identical whatever its thread count).  It costs M forward and
 *       backward passes of B/M samples in place of one, and an allreduce of
 *       M gradients in place of one.  The host keeps and sums the slots: a
 *       model on a device whose memory the host cannot address (cuda) is
 *       refused by the hook (-EINVAL).
 *
 * A failed collective fails the step (the model's parameters left as they
 * were) with the communicator's error, and leaves the ranks out of step:
 * end the job with pp_comm_abort().  Allreduces a failure left in flight
 * are the communicator's, freed by pp_comm_destroy().  A grad sync
 * belongs to the thread that trains its model.
 */
#ifndef PINPIPE_GRAD_SYNC_H
#define PINPIPE_GRAD_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "pinpipe/comm.h"
#include "pinpipe/common.h"
#include "pinpipe/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How to average a model's gradient over the ranks. */
struct pp_grad_sync_config {
	struct pp_comm *comm;     /* the ranks (required; kept, not owned), which reduce the
				     gradient where the model has it: nccl on its GPU, mpi
				     staging a cuda device's through pinned memory (destroy
				     the communicator before closing the device) */
	size_t bucket_bytes;      /* buckets: an allreduce started once consecutive ranges hold
				     this many bytes; 0: one a range (a layer) */
	unsigned micro_batches;   /* 0: buckets; M > 0: the deterministic reduction of M
				     micro-batches a global batch, M a multiple of the ranks */
};

/* Fills *cfg with the defaults: no communicator, a bucket a layer, buckets. */
PP_API void pp_grad_sync_config_init(struct pp_grad_sync_config *cfg);

struct pp_grad_sync;

/*
 * Makes a grad sync over cfg->comm.  Returns 0 and it in *gs_p, or -EINVAL
 * (NULL cfg, comm or gs_p; micro_batches not a multiple of the ranks) or
 * -ENOMEM, with the reason in pp_last_error().
 */
PP_API int pp_grad_sync_create(const struct pp_grad_sync_config *cfg, struct pp_grad_sync **gs_p);

/* Frees it, not its communicator; the model it is attached to trains no more.  NULL is allowed. */
PP_API void pp_grad_sync_destroy(struct pp_grad_sync *gs);

/*
 * Makes a model made from 'mc' average its gradient through gs: sets
 * mc->grad_hook, grad_sync and grad_hook_arg.  Returns 0, or -EINVAL (NULL).
 */
PP_API int pp_grad_sync_attach(struct pp_grad_sync *gs, struct pp_model_config *mc);

/*
 * Called by every rank once its model (made from a config attach() filled)
 * exists, before it trains: makes every rank's parameters rank 0's (a
 * model made from the same seed is equal already; a loaded one is made so)
 * and sizes the micro-batch slots of the deterministic reduction.  Returns
 * 0, or -EINVAL (NULL), -ENOMEM, or a failed broadcast's error.
 */
PP_API int pp_grad_sync_start(struct pp_grad_sync *gs, struct pp_model *model);

/*
 * The hook and the sync themselves, as pp_model_config's grad_hook and
 * grad_sync take them (arg: the grad sync), for a hook of one's own that
 * calls them.  Return 0, PP_MODEL_GRAD_KEEP (the sync of a deterministic
 * micro-batch but the rank's last), or -errno: -EINVAL (a NULL gradient
 * with count > 0; in the deterministic reduction, a range outside the
 * gradient, before start(), or on a stream of a device the host cannot
 * address, and its sync with no range handed over since the last),
 * -ENOMEM, or a collective's error (the step's buckets then dropped: the
 * communicator frees them).
 */
PP_API int pp_grad_sync_hook(void *gs, float *grads, size_t offset, size_t count,
			     struct pp_stream *stream);
PP_API int pp_grad_sync_end(void *gs, struct pp_stream *stream);

/* What a grad sync did since it was made. */
struct pp_grad_sync_stats {
	uint64_t steps;          /* syncs that returned 0: updates of averaged gradients */
	uint64_t allreduces;     /* allreduces started: buckets, or reductions of the slots */
	uint64_t bytes;          /* bytes of gradient reduced by them */
	uint64_t hook_ns;        /* time in the hook (starting buckets), ns */
	uint64_t sync_ns;        /* time in the sync (waiting for them, the slots' reduction), ns */
};

/* Fills *stats.  NULL gs: zeros. */
PP_API void pp_grad_sync_get_stats(const struct pp_grad_sync *gs, struct pp_grad_sync_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
