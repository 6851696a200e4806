/*
 * images/tj.h: the one place that calls libjpeg-turbo (images/tj.c): a
 * thread's decompressor and its pixel buffer.  Without libjpeg-turbo at
 * configure time, the stubs below refuse, naming the package.
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
#else
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
