/*
 * images/tj.h: the two files that call libjpeg-turbo: images/tj.c (the
 * TurboJPEG API: a thread's decompressor and its pixel buffer) and
 * images/tj_region.c (its libjpeg API: a region of the image decoded
 * alone, rows skipped and columns cropped).  Without libjpeg-turbo at
 * configure time, the stubs below refuse, naming the package; without its
 * libjpeg API, pp_tj_region_create() refuses and the whole image is
 * decoded.
 */
#ifndef PP_IMAGES_TJ_H
#define PP_IMAGES_TJ_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fault.h"
#include "common/common_impl.h"

/* One thread's decompressor, with the buffer it decodes into. */
struct pp_tj;

/* One thread's decompressor of regions (the libjpeg API), with its buffer. */
struct pp_tj_region;

/*
 * Decoded pixels: those of the region [x, x + rw) x [y, y + rh) of the
 * image decoded at w x h, interleaved, row r at pix + r * stride.
 */
struct pp_tj_pixels {
	const uint8_t *pix;
	size_t stride;         /* bytes from a row to the next */
	uint32_t x, y;         /* the region's first column and row in the decoded image */
	uint32_t rw, rh;       /* the region's size */
	uint32_t w, h;         /* the decoded image's size */
};

/* What a JPEG's header says. */
struct pp_tj_header {
	uint32_t width, height;
	bool cmyk;             /* CMYK or YCCK: refused */
};

#ifdef PP_HAVE_TURBOJPEG
/* Makes a decompressor.  Returns 0 or -ENOMEM. */
int pp_tj_create(struct pp_tj **t_p);

/* Frees it; NULL is allowed. */
void pp_tj_destroy(struct pp_tj *t);

/* Reads the header of the JPEG in buf.  Returns 0 or -EBADMSG with libjpeg-turbo's message. */
int pp_tj_header(struct pp_tj *t, const void *buf, size_t len, struct pp_tj_header *h);

/*
 * Decodes the whole image at scale8/8 of its size (scale8 1..8),
 * 'channels' (3: RGB, 1: grayscale) interleaved, into the decompressor's
 * buffer (grown as needed), a warning being an error.  Returns 0 with the
 * pixels in *pix (rows of *w_p * channels bytes, *h_p rows), or -EBADMSG
 * or -ENOMEM with a message.
 */
int pp_tj_decode(struct pp_tj *t, const void *buf, size_t len, unsigned scale8, uint32_t channels,
		 const uint8_t **pix, uint32_t *w_p, uint32_t *h_p);
#endif

#ifdef PP_HAVE_JPEG_REGION
/* Makes a decompressor of regions.  Returns 0 or -ENOMEM. */
int pp_tj_region_create(struct pp_tj_region **t_p);

/* Frees it; NULL is allowed. */
void pp_tj_region_destroy(struct pp_tj_region *t);

/*
 * Decodes the rows [y0, y1) and at least the columns [x0, x1) (in the
 * pixels of the image at scale8/8, scale8 1..8) of the JPEG in buf, with
 * the same bits as pp_tj_decode()'s whole image there, 'channels' (3: RGB,
 * 1: grayscale) interleaved; the rows below are read too (not converted),
 * so that a truncated or corrupt file is an error wherever the region is.
 * Returns 0 with the pixels in *px, or -EBADMSG or -ENOMEM with a message.
 */
int pp_tj_region_decode(struct pp_tj_region *t, const void *buf, size_t len, unsigned scale8,
			uint32_t channels, uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1,
			struct pp_tj_pixels *px);
#else
static inline int pp_tj_region_create(struct pp_tj_region **t_p)
{
	(void)t_p;
	return -ENOTSUP;
}

static inline void pp_tj_region_destroy(struct pp_tj_region *t)
{
	(void)t;
}

static inline int pp_tj_region_decode(struct pp_tj_region *t, const void *buf, size_t len,
				      unsigned scale8, uint32_t channels, uint32_t x0, uint32_t y0,
				      uint32_t x1, uint32_t y1, struct pp_tj_pixels *px)
{
	(void)t, (void)buf, (void)len, (void)scale8, (void)channels;
	(void)x0, (void)y0, (void)x1, (void)y1, (void)px;
	return -ENOTSUP;
}
#endif

#ifndef PP_HAVE_TURBOJPEG
#define PP_TJ_MISSING "JPEG: pinpipe was built without libjpeg-turbo: install Debian's " \
	"libturbojpeg0-dev, then run ./configure and make again"

static inline int pp_tj_create(struct pp_tj **t_p)
{
	(void)t_p;
	pp_error(-ENOTSUP, PP_TJ_MISSING);
	return -ENOTSUP;
}

static inline void pp_tj_destroy(struct pp_tj *t)
{
	(void)t;
}

static inline int pp_tj_header(struct pp_tj *t, const void *buf, size_t len,
			       struct pp_tj_header *h)
{
	(void)t, (void)buf, (void)len, (void)h;
	pp_error(-ENOTSUP, PP_TJ_MISSING);
	return -ENOTSUP;
}

static inline int pp_tj_decode(struct pp_tj *t, const void *buf, size_t len, unsigned scale8,
			       uint32_t channels, const uint8_t **pix, uint32_t *w_p, uint32_t *h_p)
{
	(void)t, (void)buf, (void)len, (void)scale8, (void)channels, (void)pix, (void)w_p, (void)h_p;
	pp_error(-ENOTSUP, PP_TJ_MISSING);
	return -ENOTSUP;
}
#endif

#endif
