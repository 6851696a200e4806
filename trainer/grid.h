/*
 * trainer/grid.h: a batch of samples laid out as one image, the grid
 * pinpipe-train writes to TensorBoard (as torchvision's make_grid does).
 */
#ifndef PP_TRAINER_GRID_H
#define PP_TRAINER_GRID_H

#include <stddef.h>
#include <stdint.h>

#include "pinpipe/pinpipe.h"

#define TR_GRID_SAMPLES 64 /* samples shown at most */
#define TR_GRID_ROW 8      /* samples in a row of the grid */
#define TR_GRID_PAD 2      /* black pixels between samples and around them */

/* An image of height x width pixels of 'channels' bytes each, row by row. */
struct tr_grid {
	uint8_t *pixels;   /* malloc'd */
	uint32_t height, width;
	uint32_t channels; /* 1 (gray) or 3 (RGB) */
};

/*
 * Lays out the first min(n, TR_GRID_SAMPLES) of the n samples at 'samples'
 * (host memory, each info->sample_bytes of info->dtype, shaped as
 * info->shape: channels, height, width; fewer dimensions are one channel,
 * one row) TR_GRID_ROW a row with TR_GRID_PAD black pixels around each: u8
 * values as they are, f32 ones scaled from the min to the max of the shown
 * samples' finite values to 0..255 (non-finite ones black).  Three channels
 * show as RGB; any other count as gray, its first channel.  Returns 0 and
 * the grid in *grid_p, -EINVAL (no sample, or a grid wider or taller than
 * PP_SUMMARY_IMAGE_MAX) or -ENOMEM; prints nothing.
 */
int tr_grid_make(const void *samples, size_t n, const struct pp_sample_info *info,
		 struct tr_grid *grid_p);

#endif
