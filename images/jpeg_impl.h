/*
 * images/jpeg_impl.h: what images/jpeg.c shares with the folder source and
 * the tests: the crop a sample gets, and a decode with a worker's own state.
 */
#ifndef PP_IMAGES_JPEG_IMPL_H
#define PP_IMAGES_JPEG_IMPL_H

#include "pinpipe/image.h"

/*
 * The region of the image (in its pixels, possibly fractional for eval)
 * that the output square is resized from, whether it is flipped, and the
 * DCT scale (scale8 / 8) the image is decoded at.
 */
struct pp_jpeg_crop {
	double x, y, w, h;
	bool flip;
	unsigned scale8;     /* 1..8 */
};

/*
 * The crop of a width x height image under the configuration: train draws
 * RandomResizedCrop's parameters then the flip from rng, eval draws nothing.
 */
void pp_jpeg_plan(const struct pp_jpeg_config *cfg, uint32_t width, uint32_t height,
		  struct pp_rng *rng, struct pp_jpeg_crop *crop);

/* One thread's decoding state: a decompressor and the resize's tables. */
struct pp_jpeg_worker;

/* Makes a worker's state for the decoder.  Returns 0, -ENOTSUP (no libjpeg-turbo) or -ENOMEM. */
int pp_jpeg_worker_create(const struct pp_jpeg_decoder *d, struct pp_jpeg_worker **w_p);

/* Frees it; NULL is allowed. */
void pp_jpeg_worker_destroy(struct pp_jpeg_worker *w);

/* pp_jpeg_decode() with the worker's state. */
int pp_jpeg_decode_with(const struct pp_jpeg_decoder *d, struct pp_jpeg_worker *w,
			const void *jpeg, size_t len, struct pp_rng *rng, uint8_t *out);

/* Decodes with a crop of the caller's (in the image's pixels, inside it), for tests. */
int pp_jpeg_decode_crop(const struct pp_jpeg_decoder *d, struct pp_jpeg_worker *w,
			const void *jpeg, size_t len, const struct pp_jpeg_crop *crop, uint8_t *out);

/* The decoder's configuration, defaults filled in. */
const struct pp_jpeg_config *pp_jpeg_decoder_config(const struct pp_jpeg_decoder *d);

#endif
