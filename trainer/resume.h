/*
 * trainer/resume.h: --resume in pinpipe-train: the checkpoint checked
 * against the options, its step count placed in the loader's plan, the
 * plan key its training data came in checked, and the first epoch begun
 * at the batch it stopped at.
 */
#ifndef PP_TRAINER_RESUME_H
#define PP_TRAINER_RESUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/pinpipe.h"
#include "trainer/data.h"
#include "trainer/options.h"
#include "trainer/results.h"

struct tr_run;

/* Where a run starts: at its model's step count (a resumed one's), or at the start. */
struct tr_place {
	uint64_t batches;      /* batches of an epoch of this rank */
	uint64_t steps;        /* the model's steps as the run starts (0: a new model) */
	unsigned first_epoch;  /* the epoch it starts in, from 0 */
	uint64_t key;          /* the plan key the resumed model was trained in, to check
				  (0: none, or checked already for the job's ranks) */
};

/*
 * --resume: the checkpoint's model and optimizer are those the options
 * ask for (the rows name them), else the resume is refused, naming both,
 * with -EINVAL and the reason in why.  A learning rate other than the
 * checkpoint's is taken: the model trains with the --lr its rows show.
 */
int tr_resume_check(const struct tr_options *opt, const struct tr_params *p,
		    struct pp_model *model, bool say, char *why, size_t size);

/*
 * The CRC-32 a checkpoint file ends with (of all of it before), which
 * tells two copies apart; 0 where it cannot be read.
 */
uint64_t tr_resume_file_crc(const char *path);

/*
 * Writes to why[0..len) that the checkpoint at 'path' was written by a run
 * whose training data came in another order, naming the options that
 * decide the order: those of one process, or of the job's ranks.
 */
void tr_resume_other_order(char *why, size_t len, const char *path, bool ranks);

/*
 * Places the run's model in the plan of its training data (the training
 * loader begins epoch 0 to count its batches).  Returns 0, 1 when the
 * model's run is already complete (said on stderr: nothing to train), or
 * -errno (-EINVAL with the reason in why[0..len) for a damaged count, or
 * a checkpoint of another order that would have been called complete).
 */
int tr_resume_place(const struct tr_options *opt, const struct tr_params *p,
		    const struct tr_split *train, unsigned run, struct tr_run *r,
		    struct tr_place *pl, char *why, size_t len);

/*
 * Tags the model with the plan key of its training data (with several
 * ranks, the job's: trainer/resume.c) and checks a resumed model's key
 * against it where the loader cannot (several ranks).  0, or -errno
 * (-EINVAL with the reason in why[0..len)).
 */
int tr_resume_key(const struct tr_options *opt, const struct tr_params *p,
		  const struct tr_split *train, struct tr_run *r, struct tr_place *pl, char *why,
		  size_t len);

/*
 * Begins a training epoch, or continues it from a resumed model's step
 * count.  'key' is the plan key of the loader that trained the resumed
 * model (its checkpoint's tag; 0 for a checkpoint without one): the loader
 * refuses to continue a run whose data came in another order (-EINVAL).
 */
int tr_begin_epoch(struct tr_run *r, unsigned epoch, bool resuming, uint64_t steps,
		   uint64_t batches, uint64_t key);

#endif
