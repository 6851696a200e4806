/*
 * images/tj.c: libjpeg-turbo's TurboJPEG API, for images/jpeg.c: header,
 * and a decode at a DCT scale with warnings as errors (a truncated file
 * otherwise decodes "successfully" with its missing rows grey).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <turbojpeg.h>

#include "images/tj.h"

struct pp_tj {
	tjhandle h;
	uint8_t *buf;
	size_t cap;
};

int pp_tj_create(struct pp_tj **t_p)
{
	struct pp_tj *t = pp_calloc(1, sizeof(*t));

	if (t == NULL)
		return pp_error(-ENOMEM, "JPEG: no memory for a decompressor");
	t->h = tjInitDecompress();
	if (t->h == NULL) {
		free(t);
		return pp_error(-ENOMEM, "JPEG: cannot make a decompressor: %s", tjGetErrorStr2(NULL));
	}
	*t_p = t;
	return 0;
}

void pp_tj_destroy(struct pp_tj *t)
{
	if (t == NULL)
		return;
	if (t->h != NULL)
		tjDestroy(t->h);
	free(t->buf);
	free(t);
}

/*
 * After a failed call, the handle's decompressor may stand inside a header
 * (libjpeg's marker reader keeps its state), and the next file would be
 * read from there: a fresh handle for the next file.  Returns err.
 */
static int tj_reset(struct pp_tj *t, int err)
{
	tjDestroy(t->h);
	t->h = tjInitDecompress();
	return err;
}

int pp_tj_header(struct pp_tj *t, const void *buf, size_t len, struct pp_tj_header *h)
{
	/* set: a JPEG of tables alone reads "successfully" and leaves them as they are */
	int w = 0, hh = 0, subsamp = -1, cs = -1;

	if (len == 0)
		return pp_error(-EBADMSG, "an empty file, not a JPEG");
	if (len > (unsigned long)-1 || len < 4 || ((const uint8_t *)buf)[0] != 0xff ||
	    ((const uint8_t *)buf)[1] != 0xd8)
		return pp_error(-EBADMSG, "not a JPEG (no start-of-image marker)");
	if (t->h == NULL && (t->h = tjInitDecompress()) == NULL)
		return pp_error(-ENOMEM, "JPEG: cannot make a decompressor: %s", tjGetErrorStr2(NULL));
	if (tjDecompressHeader3(t->h, buf, (unsigned long)len, &w, &hh, &subsamp, &cs) < 0)
		return tj_reset(t, pp_error(-EBADMSG, "a bad JPEG header: %s",
					    tjGetErrorStr2(t->h)));
	/* libjpeg-turbo supplies the end of a file cut short: its tables read, no frame. */
	if (w == 0 && hh == 0)
		return tj_reset(t, pp_error(-EBADMSG, "a JPEG with no image in its %zu bytes: cut "
					    "short before its frame header, or of tables alone", len));
	if (w <= 0 || hh <= 0 || w > 65535 || hh > 65535)
		return tj_reset(t, pp_error(-EBADMSG, "a JPEG of %d x %d pixels (or of tables alone, "
					    "no image)", w, hh));
	h->width = (uint32_t)w;
	h->height = (uint32_t)hh;
	h->cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
	return 0;
}

int pp_tj_decode(struct pp_tj *t, const void *buf, size_t len, unsigned scale8, uint32_t channels,
		 const uint8_t **pix, uint32_t *w_p, uint32_t *h_p)
{
	tjscalingfactor sf = { (int)scale8, 8 };
	int w = 0, h = 0, subsamp = -1, cs = -1;
	size_t need;

	if (tjDecompressHeader3(t->h, buf, (unsigned long)len, &w, &h, &subsamp, &cs) < 0)
		return tj_reset(t, pp_error(-EBADMSG, "a bad JPEG header: %s",
					    tjGetErrorStr2(t->h)));
	if (w <= 0 || h <= 0 || w > 65535 || h > 65535)
		return tj_reset(t, pp_error(-EBADMSG, "a JPEG of %d x %d pixels", w, h));
	w = TJSCALED(w, sf);
	h = TJSCALED(h, sf);
	need = (size_t)w * (size_t)h * channels;
	if (need > t->cap) {
		uint8_t *nb = pp_malloc(need);
		if (nb == NULL)
			return pp_error(-ENOMEM, "JPEG: no memory for %d x %d pixels", w, h);
		free(t->buf);
		t->buf = nb;
		t->cap = need;
	}
	if (tjDecompress2(t->h, buf, (unsigned long)len, t->buf, w, w * (int)channels, h,
			  channels == 1 ? TJPF_GRAY : TJPF_RGB,
			  TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) < 0)
		return tj_reset(t, pp_error(-EBADMSG, "a bad JPEG (%s): %s",
					    tjGetErrorCode(t->h) == TJERR_WARNING ? "truncated or corrupt"
										  : "cannot decode",
					    tjGetErrorStr2(t->h)));
	*pix = t->buf;
	*w_p = (uint32_t)w;
	*h_p = (uint32_t)h;
	return 0;
}
