/*
 * images/jpeg_impl.h: what images/jpeg.c shares with the folder source and
 * the tests: the crop a sample gets, and a decode with a worker's own state.
 */
#ifndef PP_IMAGES_JPEG_IMPL_H
#define PP_IMAGES_JPEG_IMPL_H

#include "common/cpu.h"
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

/*
 * One thread's resize (images/resize.c): the tables of a crop's columns
 * and rows, and the row between its two passes, grown as needed.
 */
struct pp_jpeg_resize {
	uint32_t size, channels;     /* of the output */
	enum pp_isa isa;             /* the version of the pass across (pp_isa_best(); tests set it) */
	uint32_t *xa;                /* [size] each output column's left source value in vrow,
				      * in the output's order (mirrored when flipped) */
	uint16_t *fx;                /* [size] weight of the pixel right of it, of 256 */
	int32_t *xw;                 /* [size][4] both weights as int16 pairs (x3 and a 0), for AVX2 */
	uint32_t *ya;                /* [size] each output row's upper source row */
	uint16_t *fy;                /* [size] weight of the row below it, of 256 */
	uint32_t x0, x1, y0, y1;     /* the source columns [x0, x1) and rows [y0, y1) read */
	int16_t *vrow;               /* [vcap] a row resized down over the columns read, interleaved:
				      * value x 256 - 32768 */
	size_t vcap;
};

/* Makes the tables for an output of size x size x channels.  Returns 0 or -ENOMEM. */
int pp_jpeg_resize_init(struct pp_jpeg_resize *r, uint32_t size, uint32_t channels);

/* Frees them; a zeroed or freed resize is allowed. */
void pp_jpeg_resize_free(struct pp_jpeg_resize *r);

/*
 * Plans the bilinear resize of crop c (in the pixels of the width x height
 * image) of the image decoded at sw x sh into size x size, flipped if c
 * says so: the tables, and the columns and rows it reads (r->x0.. y1).
 * Returns 0 or -ENOMEM.
 */
int pp_jpeg_resize_plan(struct pp_jpeg_resize *r, uint32_t sw, uint32_t sh, uint32_t width,
			uint32_t height, const struct pp_jpeg_crop *c);

/*
 * Resizes as planned into out (CHW uint8) from the decoded pixels: pix is
 * pixel (px, py) of the decoded image (interleaved, rows stride bytes
 * apart), and the pixels from there hold at least the columns and rows
 * the plan reads.
 */
void pp_jpeg_resize_run(const struct pp_jpeg_resize *r, const uint8_t *pix, size_t stride,
			uint32_t px, uint32_t py, uint8_t *out);

/* One thread's decoding state: a decompressor and the resize's tables. */
struct pp_jpeg_worker;

/* Makes a worker's state for the decoder.  Returns 0, -ENOTSUP (no libjpeg-turbo) or -ENOMEM. */
int pp_jpeg_worker_create(const struct pp_jpeg_decoder *d, struct pp_jpeg_worker **w_p);

/* Frees it; NULL is allowed. */
void pp_jpeg_worker_destroy(struct pp_jpeg_worker *w);

/* pp_jpeg_decode() with the worker's state. */
int pp_jpeg_decode_with(const struct pp_jpeg_decoder *d, struct pp_jpeg_worker *w,
			const void *jpeg, size_t len, struct pp_rng *rng, uint8_t *out);

/* The worker's resize, for tests (to set its isa). */
struct pp_jpeg_resize *pp_jpeg_worker_resize(struct pp_jpeg_worker *w);

/*
 * Makes the worker decode the whole image (true) or, where pinpipe has
 * libjpeg's API, only the rows and columns the crop reads (false, the
 * default), for tests.  Returns whether it has that API.
 */
bool pp_jpeg_worker_decode_whole(struct pp_jpeg_worker *w, bool whole);

/* Decodes with a crop of the caller's (in the image's pixels, inside it), for tests. */
int pp_jpeg_decode_crop(const struct pp_jpeg_decoder *d, struct pp_jpeg_worker *w,
			const void *jpeg, size_t len, const struct pp_jpeg_crop *crop, uint8_t *out);

/* The decoder's configuration, defaults filled in. */
const struct pp_jpeg_config *pp_jpeg_decoder_config(const struct pp_jpeg_decoder *d);

#endif
