/*
 * trainer/grid.c: a batch of samples laid out as one image for TensorBoard.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "trainer/grid.h"

/* Sample j's channel c at row y, column x, as 0..255. */
static uint8_t pixel(const void *samples, const struct pp_sample_info *info, size_t j, uint32_t c,
		     uint32_t y, uint32_t x, uint32_t h, uint32_t w, float lo, float hi)
{
	const char *sample = (const char *)samples + j * info->sample_bytes;
	size_t i = ((size_t)c * h + y) * w + x;
	float v;

	if (info->dtype == PP_DTYPE_U8)
		return ((const uint8_t *)sample)[i];
	v = ((const float *)sample)[i];
	return isfinite(v) && hi > lo ? (uint8_t)lrintf(255.0f * (v - lo) / (hi - lo)) : 0;
}

int tr_grid_make(const void *samples, size_t n, const struct pp_sample_info *info,
		 struct tr_grid *grid_p)
{
	uint32_t ch = info->ndim >= 3 ? info->shape[0] : 1;
	uint32_t h = info->ndim >= 2 ? info->shape[info->ndim - 2] : 1;
	uint32_t w = info->shape[info->ndim - 1], shown = ch == 3 ? 3 : 1;
	size_t cols, rows, gw, gh;
	float lo = INFINITY, hi = -INFINITY;
	uint8_t *pixels;

	if (n > TR_GRID_SAMPLES)
		n = TR_GRID_SAMPLES;
	if (n == 0)
		return -EINVAL;
	cols = n < TR_GRID_ROW ? n : TR_GRID_ROW;
	rows = (n + cols - 1) / cols;
	gw = cols * ((size_t)w + TR_GRID_PAD) + TR_GRID_PAD;
	gh = rows * ((size_t)h + TR_GRID_PAD) + TR_GRID_PAD;
	if (gw > PP_SUMMARY_IMAGE_MAX || gh > PP_SUMMARY_IMAGE_MAX)
		return -EINVAL;
	pixels = calloc(gh * gw, shown);
	if (pixels == NULL)
		return -ENOMEM;
	if (info->dtype == PP_DTYPE_F32) {
		for (size_t i = 0; i < n * info->sample_bytes / sizeof(float); i++) {
			float v = ((const float *)samples)[i];

			if (isfinite(v)) {
				lo = v < lo ? v : lo;
				hi = v > hi ? v : hi;
			}
		}
	}
	for (size_t j = 0; j < n; j++) {
		size_t top = (j / cols) * (h + TR_GRID_PAD) + TR_GRID_PAD;
		size_t left = (j % cols) * (w + TR_GRID_PAD) + TR_GRID_PAD;

		for (uint32_t y = 0; y < h; y++)
			for (uint32_t x = 0; x < w; x++)
				for (uint32_t c = 0; c < shown; c++)
					pixels[((top + y) * gw + left + x) * shown + c] =
						pixel(samples, info, j, c, y, x, h, w, lo, hi);
	}
	grid_p->pixels = pixels;
	grid_p->height = (uint32_t)gh;
	grid_p->width = (uint32_t)gw;
	grid_p->channels = shown;
	return 0;
}
