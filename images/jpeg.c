/*
 * images/jpeg.c: the JPEG decoder: torchvision's crops planned from the
 * header, the image decoded at the DCT scale that still holds the crop
 * (images/tj.c), and resized bilinearly into CHW uint8 (images/resize.c).  A decoder runs on
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
	struct pp_tj_region *region; /* NULL: built without libjpeg's API, the whole image decoded */
	bool whole;                  /* decode the whole image all the same (tests) */
	struct pp_jpeg_resize rs;
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
	if ((ret = pp_jpeg_resize_init(&w->rs, d->cfg.size, d->cfg.channels)) < 0)
		goto err_free;
	if ((ret = pp_tj_create(&w->tj)) < 0)
		goto err_free;
	if ((ret = pp_tj_region_create(&w->region)) < 0 && ret != -ENOTSUP)
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
	pp_tj_region_destroy(w->region);
	pp_jpeg_resize_free(&w->rs);
	free(w);
}

struct pp_jpeg_resize *pp_jpeg_worker_resize(struct pp_jpeg_worker *w)
{
	return &w->rs;
}

bool pp_jpeg_worker_decode_whole(struct pp_jpeg_worker *w, bool whole)
{
	w->whole = whole;
	return w->region != NULL;
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

/*
 * Decodes the image (whose header is hd) at the crop's scale, the rows and
 * columns that the resize reads alone where libjpeg's API is there, and
 * resizes the crop into out.
 */
static int decode_crop(const struct pp_jpeg_config *cfg, struct pp_jpeg_worker *w,
		       const void *jpeg, size_t len, const struct pp_tj_header *hd,
		       const struct pp_jpeg_crop *c, uint8_t *out)
{
	/* the decoded size, as libjpeg rounds it (up) */
	const uint32_t sw = (uint32_t)(((uint64_t)hd->width * c->scale8 + 7) / 8);
	const uint32_t sh = (uint32_t)(((uint64_t)hd->height * c->scale8 + 7) / 8);
	const struct pp_jpeg_resize *rs = &w->rs;
	struct pp_tj_pixels px;
	int ret;

	if ((ret = pp_jpeg_resize_plan(&w->rs, sw, sh, hd->width, hd->height, c)) < 0)
		return ret;
	if (w->region != NULL && !w->whole) {
		ret = pp_tj_region_decode(w->region, jpeg, len, c->scale8, cfg->channels, rs->x0,
					  rs->y0, rs->x1, rs->y1, &px);
	} else {
		px = (struct pp_tj_pixels){ 0 };
		ret = pp_tj_decode(w->tj, jpeg, len, c->scale8, cfg->channels, &px.pix, &px.w, &px.h);
		px.stride = (size_t)px.w * cfg->channels;
	}
	if (ret < 0)
		return ret;
	if (px.w != sw || px.h != sh)
		return pp_error(-EBADMSG, "a JPEG decoded at %u x %u where its header and the scale "
				"%u/8 say %u x %u", px.w, px.h, c->scale8, sw, sh);
	pp_jpeg_resize_run(rs, px.pix, px.stride, px.x, px.y, out);
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
