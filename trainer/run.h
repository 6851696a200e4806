/*
 * trainer/run.h: what one run of pinpipe-train's grid holds (its device,
 * loaders, transfer stages, model and TensorBoard events), shared by the
 * files of the trainer that build it, report it and place a resume in it.
 */
#ifndef PP_TRAINER_RUN_H
#define PP_TRAINER_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "pinpipe/pinpipe.h"
#include "trainer/data.h"
#include "trainer/dist.h"
#include "trainer/options.h"
#include "trainer/results.h"

/* Everything one run holds, released in reverse order by tr_run_close(). */
struct tr_run {
	struct pp_device *dev;
	struct pp_stream *compute;
	struct pp_loader *train_loader, *val_loader, *test_loader;
	struct pp_transfer *train_xfer, *val_xfer, *test_xfer;
	struct pp_model *model;
	struct pp_summary_writer *tb;
	double tb_loss;            /* the model's running loss sum at the last per-step point */
	uint64_t tb_samples;       /* and its sample count */
	bool tb_image_done;        /* the grid of the run's first batch is written */
	bool host_compute_on_copy; /* the CPU kernels read device memory that copies reach
				    * asynchronously (sim): wait for each batch on the host */
	struct tr_dist *dist;      /* the ranks of the job (one, without mpirun) */
};

/*
 * Builds run 'run' of the grid with parameters 'p' on this rank: its
 * device, the loaders and transfer stages of the splits of 'd', its model
 * (with the ranks' gradient hook and their parameters made equal); its
 * events (--logdir) are opened once its first epoch has begun
 * (tr_tb_open()), so that a run refused before leaves no file.  Once the device is open, p->device is its
 * name as the rows give it (cpu for "auto", a sim with its options).
 * 0 or -errno; tr_run_close() releases what was built, also after a
 * failure.
 */
int tr_run_open(const struct tr_options *opt, struct tr_params *p, unsigned run,
		const struct tr_data *d, struct tr_dist *dist, struct tr_run *r);
void tr_run_close(struct tr_run *r);

/*
 * Names the BLAS kernels of a run on the CPU in its parameters, and says
 * once a process, on stderr, when the processor has better ones and how
 * to choose them (pp_blas_get_info()).
 */
void tr_blas_note(struct tr_params *p, bool say);

/* A capture that failed turned the model's graphs off: said once; the run goes on without. */
void tr_say_graph_fallback(const struct pp_model *model);

#endif
