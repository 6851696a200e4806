/*
 * trainer/tensorboard.h: pinpipe-train's TensorBoard events (--logdir),
 * one directory of events a run.  A failed write is a warning: the run
 * goes on without its events (tr_tb_failed()).
 */
#ifndef PP_TRAINER_TENSORBOARD_H
#define PP_TRAINER_TENSORBOARD_H

#include <stdint.h>

#include "pinpipe/pinpipe.h"
#include "trainer/options.h"
#include "trainer/results.h"

struct tr_run;

/* Steps between two points of the per-step training loss in TensorBoard. */
#define TB_STEP_EVERY 10

/* With --logdir, opens the run's events in a directory named by its parameters.  0 or -errno. */
int tr_tb_open(const struct tr_options *opt, const struct tr_params *p, unsigned run,
	       struct tr_run *r);

/*
 * A write of the run's TensorBoard events failed (a full disk): said once,
 * with the file, and the run goes on without its events.
 */
void tr_tb_failed(struct tr_run *r);

/*
 * Writes the run's first training batch as the model gets it, as the image
 * "images/first_batch" (the seeds' grid; trainer/grid.h lays it out).  A
 * failure is a warning: the run goes on.
 */
void tr_tb_image_grid(struct tr_run *r, const struct pp_device_batch *b, const struct pp_tensor *in,
		      const struct pp_sample_info *info, uint64_t step);

/* The mean training loss of the steps since the last point, at step 'steps' + 1.  0 or -errno. */
int tr_tb_step(struct tr_run *r, uint64_t steps);

/* An epoch's row as scalars, and the histograms of the parameters and gradients; flushed. */
void tr_tb_epoch(struct tr_run *r, const struct tr_row *row, uint64_t steps);

/* Flushes and closes the run's events, if it has them. */
void tr_tb_close(struct tr_run *r);

#endif
