/*
 * images/jpeg.c: the JPEG decoder: torchvision's crops planned from the
 * header, the image decoded at the DCT scale that still holds the crop
 * (images/tj.c), and resized bilinearly into CHW uint8.  A decoder runs on
 * several workers at once: each thread gets its own decompressor from a
 * small pool keyed by thread (pthread_getspecific), returned to the pool
 * when the thread ends and freed with the decoder.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "images/jpeg_impl.h"
#include "images/tj.h"

struct pp_jpeg_worker {
	struct pp_tj *tj;
	uint32_t *x0;                /* [size] offset of each output column's left source pixel */
	uint16_t *fx;                /* [size] weight of the pixel right of it, of 256 */
	uint16_t *hrow[2];           /* [size * channels] two source rows resized across, x 256 */
	uint32_t hrow_y[2];          /* the source row each holds (UINT32_MAX: none) */
	uint8_t *vrow;               /* [size * channels] an output row, interleaved */
	/* the decoder's pool: */
	struct pp_jpeg_decoder *owner;
	bool in_use;
	struct pp_jpeg_worker *next;
};

struct pp_jpeg_decoder {
	struct pp_jpeg_config cfg;
	struct pp_decoder dec;
	pthread_key_t key;
	pthread_mutex_t lock;        /* guards the pool */
	struct pp_jpeg_worker *pool; /* every thread's state, in use or free */
};

static int check_config(const struct pp_jpeg_config *in, struct pp_jpeg_config *out)
{
	if (in == NULL)
		return pp_error(-EINVAL, "JPEG: no configuration");
	*out = *in;
	if (out->channels == 0)
		out->channels = 3;
	if (out->max_pixels == 0)
		out->max_pixels = PP_JPEG_MAX_PIXELS;
	if (out->size < 8 || out->size > 4096)
		return pp_error(-EINVAL, "JPEG: an output size of %u, not in 8..4096", out->size);
	if (out->channels != 1 && out->channels != 3)
		return pp_error(-EINVAL, "JPEG: %u channels, not 1 or 3", out->channels);
	if (out->mode != PP_JPEG_TRAIN && out->mode != PP_JPEG_EVAL)
		return pp_error(-EINVAL, "JPEG: an unknown mode %d", (int)out->mode);
	return 0;
}

PP_API int pp_jpeg_layout(const struct pp_jpeg_config *cfg, bool labels, struct pp_layout *lay)
{
	struct pp_jpeg_config c;
	int ret;

	if ((ret = check_config(cfg, &c)) < 0)
		return ret;
	memset(lay, 0, sizeof(*lay));
	lay->nfields = labels ? 2 : 1;
	lay->fields[0] = (struct pp_field){ .name = "image", .dtype = PP_DTYPE_U8, .ndim = 3,
					    .shape = { c.channels, c.size, c.size },
					    .normalize = true };
	if (labels)
		lay->fields[1] = (struct pp_field){ .name = "labels", .dtype = PP_DTYPE_I32 };
	return 0;
}

/* ------------------------------------------------------------------ the crop */

/* Python's round(): halves to even, as torchvision's int(round(x)). */
static double round_even(double x)
{
	double r = nearbyint(x);
	return r;
}

/* A uniform draw in [a, b), as torch's uniform_(a, b). */
static double uniform(struct pp_rng *rng, double a, double b)
{
	return a + (b - a) * (double)pp_rng_uniform(rng);
}

/*
 * torchvision.transforms.RandomResizedCrop.get_params(img, scale=(0.08, 1),
 * ratio=(3/4, 4/3)): ten tries of an area and a log-uniform aspect ratio,
 * the first that fits wins; else the whole image clamped to the ratios,
 * centred.
 */
static void random_resized_crop(uint32_t width, uint32_t height, struct pp_rng *rng,
				struct pp_jpeg_crop *c)
{
	const double area = (double)width * height;
	const double lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
	double w, h, in_ratio;

	for (int i = 0; i < 10; i++) {
		double target = area * uniform(rng, 0.08, 1.0);
		double ar = exp(uniform(rng, lr0, lr1));
		w = round_even(sqrt(target * ar));
		h = round_even(sqrt(target / ar));
		if (w > 0 && w <= width && h > 0 && h <= height) {
			c->y = (double)pp_rng_below(rng, (uint64_t)(height - h + 1));
			c->x = (double)pp_rng_below(rng, (uint64_t)(width - w + 1));
			c->w = w;
			c->h = h;
			return;
		}
	}
	in_ratio = (double)width / height;
	if (in_ratio < 3.0 / 4.0) {
		w = width;
		h = round_even(w / (3.0 / 4.0));
	} else if (in_ratio > 4.0 / 3.0) {
		h = height;
		w = round_even(h * (4.0 / 3.0));
	} else {
		w = width;
		h = height;
	}
	c->w = w;
	c->h = h;
	c->y = floor((height - h) / 2);
	c->x = floor((width - w) / 2);
}

void pp_jpeg_plan(const struct pp_jpeg_config *cfg, uint32_t width, uint32_t height,
		  struct pp_rng *rng, struct pp_jpeg_crop *c)
{
	const double s = cfg->size;

	memset(c, 0, sizeof(*c));
	if (cfg->mode == PP_JPEG_TRAIN) {
		random_resized_crop(width, height, rng, c);
		c->flip = pp_rng_uniform(rng) < 0.5f;
	} else {
		/* Resize(R): the shorter side to R, the longer int(R * long / short); CenterCrop(S) */
		uint32_t r = cfg->size * 8 / 7;
		double nw, nh, ax, ay;
		if (width <= height) {
			nw = r;
			nh = floor((double)r * height / width);
		} else {
			nh = r;
			nw = floor((double)r * width / height);
		}
		ax = width / nw;
		ay = height / nh;
		c->x = round_even((nw - s) / 2.0) * ax;
		c->y = round_even((nh - s) / 2.0) * ay;
		c->w = s * ax;
		c->h = s * ay;
	}
	/*
	 * The smallest DCT scale (1/8, 1/4, 1/2) whose image still holds the
	 * crop at the output's size: libjpeg-turbo's scaled inverse DCT does
	 * the first part of the downscale (low-passed, as a resize should be)
	 * for less work than the whole image's decode; the bilinear resize does
	 * the rest.  Not the other M/8: their inverse DCTs have no SIMD in
	 * libjpeg-turbo 2.1, and measured slower than the whole decode
	 * (bench/README.md).
	 */
	c->scale8 = 8;
	for (unsigned m = 1; m < 8; m *= 2) {
		if (c->w * m >= s * 8 && c->h * m >= s * 8) {
			c->scale8 = m;
			break;
		}
	}
}

/* ------------------------------------------------------------------ decode */

int pp_jpeg_worker_create(const struct pp_jpeg_decoder *d, struct pp_jpeg_worker **w_p)
{
	struct pp_jpeg_worker *w = pp_calloc(1, sizeof(*w));
	int ret;

	if (w == NULL)
		return pp_error(-ENOMEM, "JPEG: no memory for a worker");
	w->x0 = pp_malloc(d->cfg.size * sizeof(*w->x0));
	w->fx = pp_malloc(d->cfg.size * sizeof(*w->fx));
	w->hrow[0] = pp_malloc((size_t)d->cfg.size * d->cfg.channels * sizeof(uint16_t));
	w->hrow[1] = pp_malloc((size_t)d->cfg.size * d->cfg.channels * sizeof(uint16_t));
	w->vrow = pp_malloc((size_t)d->cfg.size * d->cfg.channels);
	if (w->x0 == NULL || w->fx == NULL || w->hrow[0] == NULL || w->hrow[1] == NULL ||
	    w->vrow == NULL) {
		ret = pp_error(-ENOMEM, "JPEG: no memory for a worker");
		goto err_free;
	}
	if ((ret = pp_tj_create(&w->tj)) < 0)
		goto err_free;
	*w_p = w;
	return 0;

err_free:
	pp_jpeg_worker_destroy(w);
	return ret;
}

void pp_jpeg_worker_destroy(struct pp_jpeg_worker *w)
{
	if (w == NULL)
		return;
	pp_tj_destroy(w->tj);
	free(w->x0);
	free(w->fx);
	free(w->hrow[0]);
	free(w->hrow[1]);
	free(w->vrow);
	free(w);
}

/*
 * Where output coordinate o falls in a scaled image of n pixels: the left
 * (or upper) one and the weight of the next, of 256 (0 at an edge, so that
 * the next is never read past it).
 */
static void source_pixel(double start, double step, uint32_t o, double scale, uint32_t n,
			 uint32_t *i0, uint16_t *f)
{
	double src = start + (o + 0.5) * step - 0.5;       /* in the image's pixels */
	double sc = (src + 0.5) * scale - 0.5;             /* in the decoded image's */
	double fl;
	long q;

	if (sc <= 0) {
		*i0 = 0;
		*f = 0;
		return;
	}
	if (sc >= n - 1) {
		*i0 = n - 1;
		*f = 0;
		return;
	}
	fl = floor(sc);
	q = lround((sc - fl) * 256);
	*i0 = (uint32_t)fl + (q == 256);
	*f = (uint16_t)(q == 256 ? 0 : q);
}

/* Reads the header and checks that the image may be decoded. */
static int check_header(const struct pp_jpeg_config *cfg, struct pp_jpeg_worker *w,
			const void *jpeg, size_t len, struct pp_tj_header *hd)
{
	int ret;

	if ((ret = pp_tj_header(w->tj, jpeg, len, hd)) < 0)
		return ret;
	if ((uint64_t)hd->width * hd->height > cfg->max_pixels)
		return pp_error(-E2BIG, "a JPEG of %u x %u pixels, over the bound of %llu pixels",
				hd->width, hd->height, (unsigned long long)cfg->max_pixels);
	if (hd->cmyk)
		return pp_error(-ENOTSUP, "a CMYK JPEG (%u x %u): only RGB and grayscale are "
				"decoded; convert it to RGB", hd->width, hd->height);
	return 0;
}

/* Decodes the image (whose header is hd) at the crop's scale and resizes the crop into out. */
static int decode_crop(const struct pp_jpeg_config *cfg, struct pp_jpeg_worker *w,
		       const void *jpeg, size_t len, const struct pp_tj_header *hdp,
		       const struct pp_jpeg_crop *cp, uint8_t *out)
{
	const uint32_t s = cfg->size, ch = cfg->channels;
	const size_t plane = (size_t)s * s;
	const struct pp_tj_header hd = *hdp;
	const struct pp_jpeg_crop c = *cp;
	const uint8_t *pix = NULL;
	uint32_t sw = 0, sh = 0;
	int ret;

	if ((ret = pp_tj_decode(w->tj, jpeg, len, c.scale8, ch, &pix, &sw, &sh)) < 0)
		return ret;
	for (uint32_t ox = 0; ox < s; ox++) {
		source_pixel(c.x, c.w / s, ox, (double)sw / hd.width, sw, &w->x0[ox], &w->fx[ox]);
		w->x0[ox] *= ch;
	}
	/*
	 * Bilinear in 8-bit fixed point, exact where a weight is 0 (a pixel on
	 * the grid): each source row used is resized across once (hrow), then
	 * each output row is the weighted sum of two of those.
	 */
	w->hrow_y[0] = w->hrow_y[1] = UINT32_MAX;
	for (uint32_t oy = 0; oy < s; oy++) {
		uint32_t y0, rows[2];
		uint16_t fy;
		const uint16_t *h[2];
		source_pixel(c.y, c.h / s, oy, (double)sh / hd.height, sh, &y0, &fy);
		rows[0] = y0;
		rows[1] = fy > 0 ? y0 + 1 : y0;
		for (int r = 0; r < 2; r++) {
			int slot = w->hrow_y[0] == rows[r] ? 0 : w->hrow_y[1] == rows[r] ? 1 : -1;
			if (slot < 0) {
				/* replace the row not needed now */
				slot = w->hrow_y[0] == rows[1 - r] ? 1 : 0;
				const uint8_t *src = pix + (size_t)rows[r] * sw * ch;
				uint16_t *dst = w->hrow[slot];
				if (ch == 3) {
					for (uint32_t ox = 0; ox < s; ox++) {
						const uint32_t a = w->x0[ox], wx1 = w->fx[ox];
						const uint32_t wx0 = 256 - wx1, b = wx1 ? a + 3 : a;
						dst[ox * 3] = (uint16_t)(src[a] * wx0 + src[b] * wx1);
						dst[ox * 3 + 1] = (uint16_t)(src[a + 1] * wx0 +
									     src[b + 1] * wx1);
						dst[ox * 3 + 2] = (uint16_t)(src[a + 2] * wx0 +
									     src[b + 2] * wx1);
					}
				} else {
					for (uint32_t ox = 0; ox < s; ox++) {
						const uint32_t a = w->x0[ox], wx1 = w->fx[ox];
						const uint32_t b = wx1 ? a + 1 : a;
						dst[ox] = (uint16_t)(src[a] * (256 - wx1) + src[b] * wx1);
					}
				}
				w->hrow_y[slot] = rows[r];
			}
			h[r] = w->hrow[slot];
		}
		/* down, over the interleaved row (contiguous: the compiler's vectors), then apart */
		const uint32_t wy1 = fy, wy0 = 256 - fy, n = s * ch;
		const uint16_t *t0 = h[0], *t1 = h[1];
		uint8_t *v = w->vrow;
		for (uint32_t i = 0; i < n; i++)
			v[i] = (uint8_t)(((uint32_t)t0[i] * wy0 + (uint32_t)t1[i] * wy1 + 32768) >> 16);
		for (uint32_t k = 0; k < ch; k++) {
			uint8_t *dst = out + k * plane + (size_t)oy * s;
			if (c.flip)
				for (uint32_t ox = 0; ox < s; ox++)
					dst[s - 1 - ox] = v[ox * ch + k];
			else
				for (uint32_t ox = 0; ox < s; ox++)
					dst[ox] = v[ox * ch + k];
		}
	}
	return 0;
}

int pp_jpeg_decode_with(const struct pp_jpeg_decoder *d, struct pp_jpeg_worker *w,
			const void *jpeg, size_t len, struct pp_rng *rng, uint8_t *out)
{
	struct pp_tj_header hd;
	struct pp_jpeg_crop c;
	int ret;

	if ((ret = check_header(&d->cfg, w, jpeg, len, &hd)) < 0)
		return ret;
	pp_jpeg_plan(&d->cfg, hd.width, hd.height, rng, &c);
	return decode_crop(&d->cfg, w, jpeg, len, &hd, &c, out);
}

int pp_jpeg_decode_crop(const struct pp_jpeg_decoder *d, struct pp_jpeg_worker *w,
			const void *jpeg, size_t len, const struct pp_jpeg_crop *crop, uint8_t *out)
{
	struct pp_tj_header hd;
	int ret;

	if ((ret = check_header(&d->cfg, w, jpeg, len, &hd)) < 0)
		return ret;
	return decode_crop(&d->cfg, w, jpeg, len, &hd, crop, out);
}

/* ------------------------------------------------------------------ the pool of thread states */

/* At a thread's end: its state goes back to the pool, for the next thread. */
static void release_worker(void *p)
{
	struct pp_jpeg_worker *w = p;

	pthread_mutex_lock(&w->owner->lock);
	w->in_use = false;
	pthread_mutex_unlock(&w->owner->lock);
}

/* The calling thread's state: its own, a free one of the pool, or a new one. */
static int thread_worker(const struct pp_jpeg_decoder *cd, struct pp_jpeg_worker **w_p)
{
	struct pp_jpeg_decoder *d = (struct pp_jpeg_decoder *)cd;
	struct pp_jpeg_worker *w = pthread_getspecific(d->key);
	int ret = 0;

	if (w != NULL) {
		*w_p = w;
		return 0;
	}
	pthread_mutex_lock(&d->lock);
	for (w = d->pool; w != NULL && w->in_use; w = w->next)
		;
	if (w == NULL && (ret = pp_jpeg_worker_create(d, &w)) == 0) {
		w->owner = d;
		w->next = d->pool;
		d->pool = w;
	}
	if (ret == 0) {
		w->in_use = true;
		if (pthread_setspecific(d->key, w) != 0) {
			w->in_use = false;
			ret = pp_error(-ENOMEM, "JPEG: no memory for a thread's state");
		}
	}
	pthread_mutex_unlock(&d->lock);
	if (ret == 0)
		*w_p = w;
	return ret;
}

PP_API int pp_jpeg_decode(const struct pp_jpeg_decoder *d, const void *jpeg, size_t len,
			  struct pp_rng *rng, uint8_t *out)
{
	struct pp_jpeg_worker *w = NULL;
	int ret;

	if (d == NULL || (jpeg == NULL && len > 0) || out == NULL ||
	    (rng == NULL && d->cfg.mode == PP_JPEG_TRAIN))
		return pp_error(-EINVAL, "pp_jpeg_decode: NULL arguments");
	if ((ret = thread_worker(d, &w)) < 0)
		return ret;
	return pp_jpeg_decode_with(d, w, jpeg, len, rng, out);
}

/* The decoder as the loader calls it: into the field "image", or the first. */
static int jpeg_decode_sample(void *ctx, const void *record, size_t len, const struct pp_sample *s)
{
	const struct pp_jpeg_decoder *d = ctx;
	const struct pp_field *f;
	int idx = pp_layout_find(s->layout, "image");

	if (idx < 0)
		idx = 0;
	f = &s->layout->fields[idx];
	if (f->dtype != PP_DTYPE_U8 || f->ndim != 3 || f->shape[0] != d->cfg.channels ||
	    f->shape[1] != d->cfg.size || f->shape[2] != d->cfg.size)
		return pp_set_error(-EINVAL, "the decoder \"jpeg\" makes uint8 [%u][%u][%u], but "
				    "the field \"%s\" is another type or shape", d->cfg.channels,
				    d->cfg.size, d->cfg.size, f->name);
	return pp_jpeg_decode(d, record, len, s->rng, s->fields[idx]);
}

PP_API int pp_jpeg_decoder_create(const struct pp_jpeg_config *cfg, struct pp_jpeg_decoder **d_p)
{
	struct pp_jpeg_decoder *d;
	struct pp_tj *probe;
	int ret;

	if (d_p == NULL)
		return pp_error(-EINVAL, "pp_jpeg_decoder_create: d_p must not be NULL");
	d = pp_calloc(1, sizeof(*d));
	if (d == NULL)
		return pp_error(-ENOMEM, "JPEG: no memory for a decoder");
	if ((ret = check_config(cfg, &d->cfg)) < 0 || (ret = pp_tj_create(&probe)) < 0) {
		free(d);
		return ret;
	}
	pp_tj_destroy(probe);
	if (pthread_key_create(&d->key, release_worker) != 0) {
		free(d);
		return pp_error(-ENOMEM, "JPEG: no thread key left for a decoder");
	}
	pthread_mutex_init(&d->lock, NULL);
	d->dec = (struct pp_decoder){ .name = "jpeg", .decode = jpeg_decode_sample, .ctx = d };
	*d_p = d;
	return 0;
}

PP_API void pp_jpeg_decoder_destroy(struct pp_jpeg_decoder *d)
{
	if (d == NULL)
		return;
	/* no thread's end calls release_worker() after this: every state is freed here */
	pthread_key_delete(d->key);
	while (d->pool != NULL) {
		struct pp_jpeg_worker *w = d->pool;
		d->pool = w->next;
		pp_jpeg_worker_destroy(w);
	}
	pthread_mutex_destroy(&d->lock);
	free(d);
}

PP_API const struct pp_decoder *pp_jpeg_decoder_get(const struct pp_jpeg_decoder *d)
{
	return &d->dec;
}

const struct pp_jpeg_config *pp_jpeg_decoder_config(const struct pp_jpeg_decoder *d)
{
	return &d->cfg;
}
