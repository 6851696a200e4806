/*
 * images/tj_region.c: a region of a JPEG decoded alone, with libjpeg-turbo's
 * libjpeg API (built only where configure found it): the rows above the
 * region skipped (entropy-decoded, not transformed nor converted), the
 * columns cropped to the iMCUs that hold it (jpeg_crop_scanline), the rows
 * below entropy-decoded to the end of the file (its errors are errors
 * wherever the region is).  The same settings as TurboJPEG's
 * tjDecompress2() (images/tj.c), so the same bits: the library's default
 * DCT method and fancy upsampling, a warning an error
 * (TJFLAG_STOPONWARNING), at most 500 progressive scans
 * (TJFLAG_LIMITSCANS).  The columns asked for are widened by two pixels
 * each side: fancy upsampling repeats the cropped region's edge columns
 * where the whole image has neighbours.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

#include "common/common_impl.h"
#include "common/fault.h"
#include "images/tj.h"

/* Columns decoded beyond those asked for, each side (fancy upsampling's reach). */
#define REGION_MARGIN 2

/* TurboJPEG's TJFLAG_LIMITSCANS: a progressive JPEG of more scans is refused. */
#define REGION_MAX_SCANS 500

struct region_error {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
	bool warning;                /* the error was a warning (truncated or corrupt data) */
};

struct pp_tj_region {
	struct jpeg_decompress_struct d;
	struct region_error err;
	struct jpeg_progress_mgr progress;
	bool made;                   /* d was created (and not destroyed) */
	uint8_t *buf;                /* the region's pixels */
	size_t cap;                  /* of buf, in bytes */
};

static void region_error_exit(j_common_ptr c)
{
	struct region_error *e = (struct region_error *)(void *)c->err;

	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

/* A warning (msg_level -1) is an error, as TJFLAG_STOPONWARNING; trace messages are dropped. */
static void region_emit_message(j_common_ptr c, int msg_level)
{
	struct region_error *e = (struct region_error *)(void *)c->err;

	if (msg_level >= 0)
		return;
	e->warning = true;
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

static void region_progress(j_common_ptr c)
{
	struct region_error *e = (struct region_error *)(void *)c->err;
	const j_decompress_ptr d = (j_decompress_ptr)(void *)c;

	if (d->input_scan_number > REGION_MAX_SCANS) {
		snprintf(e->msg, sizeof(e->msg), "a progressive JPEG of more than %d scans",
			 REGION_MAX_SCANS);
		longjmp(e->jb, 1);
	}
}

/* Makes t->d; the caller has set t->err's handlers.  Returns 0 or -ENOMEM. */
static int region_make(struct pp_tj_region *t)
{
	if (setjmp(t->err.jb))
		return pp_error(-ENOMEM, "JPEG: cannot make a decompressor: %s", t->err.msg);
	t->d.err = &t->err.pub;
	jpeg_create_decompress(&t->d);
	t->d.progress = &t->progress;
	t->made = true;
	return 0;
}

int pp_tj_region_create(struct pp_tj_region **t_p)
{
	struct pp_tj_region *t = pp_calloc(1, sizeof(*t));
	int ret;

	if (t == NULL)
		return pp_error(-ENOMEM, "JPEG: no memory for a decompressor");
	jpeg_std_error(&t->err.pub);
	t->err.pub.error_exit = region_error_exit;
	t->err.pub.emit_message = region_emit_message;
	t->progress.progress_monitor = region_progress;
	if ((ret = region_make(t)) < 0) {
		free(t);
		return ret;
	}
	*t_p = t;
	return 0;
}

void pp_tj_region_destroy(struct pp_tj_region *t)
{
	if (t == NULL)
		return;
	if (t->made)
		jpeg_destroy_decompress(&t->d);
	free(t->buf);
	free(t);
}

/*
 * After an error, the decompressor may stand anywhere (inside a header,
 * its marker reader's state kept): a fresh one for the next file, as
 * images/tj.c does.  Returns err.
 */
static int region_reset(struct pp_tj_region *t, int err)
{
	jpeg_destroy_decompress(&t->d);
	t->made = false;
	if (region_make(t) < 0)
		t->made = false;
	return err;
}

int pp_tj_region_decode(struct pp_tj_region *t, const void *buf, size_t len, unsigned scale8,
			uint32_t channels, uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1,
			struct pp_tj_pixels *px)
{
	struct jpeg_decompress_struct *d = &t->d;
	JDIMENSION xo, xw;
	uint32_t w, h;
	size_t stride, need;

	if (!t->made && region_make(t) < 0)
		return -ENOMEM;
	t->err.warning = false;
	if (setjmp(t->err.jb))
		return region_reset(t, pp_error(-EBADMSG, "a bad JPEG (%s): %s",
						t->err.warning ? "truncated or corrupt"
							       : "cannot decode", t->err.msg));
	jpeg_mem_src(d, buf, (unsigned long)len);
	jpeg_read_header(d, TRUE);
	d->out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_EXT_RGB;
	d->scale_num = scale8;
	d->scale_denom = 8;
	jpeg_start_decompress(d);
	w = d->output_width;
	h = d->output_height;
	if ((uint32_t)d->output_components != channels || x0 >= x1 || x1 > w || y0 >= y1 || y1 > h) {
		jpeg_abort_decompress(d);
		return pp_error(-EINVAL, "JPEG: the region [%u, %u) x [%u, %u) of a %u x %u image "
				"of %d channels, %u asked for", x0, x1, y0, y1, w, h,
				d->output_components, channels);
	}
	xo = x0 >= REGION_MARGIN ? x0 - REGION_MARGIN : 0;
	xw = (x1 + REGION_MARGIN < w ? x1 + REGION_MARGIN : w) - xo;
	if (xo > 0 || xw < w)
		jpeg_crop_scanline(d, &xo, &xw);     /* widened to whole iMCUs */
	stride = (size_t)xw * channels;
	need = stride * (y1 - y0);
	if (need + stride > t->cap) {            /* and a row for the last, read and dropped */
		uint8_t *nb = pp_malloc(need + stride);
		if (nb == NULL) {
			jpeg_abort_decompress(d);
			return pp_error(-ENOMEM, "JPEG: no memory for %u x %u pixels", xw, y1 - y0);
		}
		free(t->buf);
		t->buf = nb;
		t->cap = need + stride;
	}
	if (y0 > 0 && jpeg_skip_scanlines(d, y0) != y0) {
		jpeg_abort_decompress(d);
		return pp_error(-EBADMSG, "a bad JPEG: its rows end before row %u", y0);
	}
	while (d->output_scanline < y1) {
		JSAMPROW row = t->buf + (size_t)(d->output_scanline - y0) * stride;
		if (jpeg_read_scanlines(d, &row, 1) != 1) {
			jpeg_abort_decompress(d);
			return pp_error(-EBADMSG, "a bad JPEG: its rows end at row %u",
					d->output_scanline);
		}
	}
	/*
	 * The rest read for its errors: the rows down to the last skipped
	 * (entropy-decoded, not transformed), the last read (a skip to the
	 * end would read nothing), then up to the end-of-image marker.
	 */
	if (d->output_scanline + 1 < h)
		jpeg_skip_scanlines(d, h - 1 - d->output_scanline);
	if (d->output_scanline < h) {
		JSAMPROW row = t->buf + need;
		jpeg_read_scanlines(d, &row, 1);
	}
	jpeg_finish_decompress(d);
	*px = (struct pp_tj_pixels){ .pix = t->buf, .stride = stride, .x = xo, .y = y0, .rw = xw,
				     .rh = y1 - y0, .w = w, .h = h };
	return 0;
}
