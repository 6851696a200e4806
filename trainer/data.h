/*
 * trainer/data.h: pinpipe-train's data: --data opened once for every run
 * of the grid (a directory of a known dataset, synthetic[:COUNT], a folder
 * of JPEGs, or with --stream the shard files a loader streams), and the
 * loader and transfer stage of a split for one run on one rank.
 */
#ifndef PP_TRAINER_DATA_H
#define PP_TRAINER_DATA_H

#include <stdbool.h>
#include <stddef.h>

#include "pinpipe/pinpipe.h"
#include "trainer/options.h"
#include "trainer/results.h"

struct tr_run;

/* One split of the data: decoded in memory, or the shard files a loader streams. */
struct tr_split {
	struct pp_dataset *ds;     /* in memory, or NULL */
	char **shards;             /* --stream: the split's shard files (pp_shard_find()),
				      or NULL */
	size_t nshards;            /* their count */
	struct pp_image_folder *images; /* a folder of JPEGs, or NULL */
	struct pp_jpeg_decoder *jpeg;   /* --stream: the decoder of shards of JPEGs, or NULL */
};

/* The data of every run of the grid, opened once. */
struct tr_data {
	struct tr_split train;        /* what the model learns from */
	struct tr_split val;          /* held out of the training split (--val-split), or none */
	struct tr_split test;         /* the test split, or none without evaluation */
};

/*
 * Opens --data (a directory of a known dataset, or synthetic[:COUNT]) and
 * holds out --val-split; with --stream, finds the shard files instead, of
 * a chunk or more for each of the job's 'ranks'.  Returns 0, or -errno
 * with the reason on stderr (nothing left open).
 */
int tr_data_open(const struct tr_options *opt, unsigned ranks, struct tr_data *d);
void tr_data_free(struct tr_data *d);

/* Whether the split holds any data. */
bool tr_split_present(const struct tr_split *s);

/* The loader of a split for this rank (its share of each epoch: rank, world size). */
void tr_loader_config(const struct tr_options *opt, const struct tr_params *p,
		      const struct tr_split *s, bool train, const struct tr_run *r,
		      struct pp_loader_config *lc_p);

/* The loader of split 's' and its transfer stage to the run's device.  0 or -errno. */
int tr_make_pipeline(const struct tr_options *opt, const struct tr_params *p,
		     const struct tr_split *s, bool train, struct tr_run *r,
		     struct pp_loader **loader_p, struct pp_transfer **xfer_p);

#endif
