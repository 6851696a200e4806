/*
 * tests/test_images.c: the JPEG decoder and the ImageFolder source.  The
 * JPEGs are made here with libjpeg-turbo's encoder (photo-like: gradients,
 * discs, noise); the reference decode is libjpeg-turbo's own (same DCT
 * method, same upsampling) and, where Pillow is installed, Pillow's.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "images/jpeg_impl.h"
#include "pinpipe/dataset.h"
#include "pinpipe/image.h"
#include "pinpipe/loader.h"
#include "tests/testutil.h"

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(p, n) ((void)(p), (void)(n))
#endif

/*
 * libjpeg-turbo 2.1's SIMD code leaves a few edge columns of its output
 * undefined to valgrind's memcheck (the last ones at the DCT scale 1/8,
 * and at every scale for 4:4:0 files and some cropped widths), though
 * their bits do not depend on any memory's contents: the same under every
 * --malloc-fill, and equal to libjpeg-turbo's other decodes of the file.
 * The pixels of those decodes are marked defined before they are
 * compared; the other tests still check the resize under memcheck.
 */
static void libjpeg_defined(const void *p, size_t n)
{
	(void)VALGRIND_MAKE_MEM_DEFINED(p, n);
}

/* A photo-like w x h image of 'ch' channels from seed: a gradient, a few discs, noise. */
static uint8_t *make_pixels(uint32_t w, uint32_t h, uint32_t ch, uint64_t seed)
{
	uint8_t *p = malloc((size_t)w * h * ch);
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	double cx[3], cy[3], r[3];

	for (int i = 0; i < 3; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		cx[i] = (double)(x >> 40 & 0xffff) / 65536 * w;
		cy[i] = (double)(x >> 20 & 0xffff) / 65536 * h;
		r[i] = (double)(x >> 8 & 0xfff) / 4096 * (w < h ? w : h) / 3 + 4;
	}
	for (uint32_t yy = 0; yy < h; yy++) {
		for (uint32_t xx = 0; xx < w; xx++) {
			for (uint32_t k = 0; k < ch; k++) {
				double v = 255.0 * ((double)xx / w * (k == 0) + (double)yy / h * (k != 0)) *
					   0.6 + 40 * k;
				for (int i = 0; i < 3; i++)
					if ((xx - cx[i]) * (xx - cx[i]) + (yy - cy[i]) * (yy - cy[i]) <
					    r[i] * r[i])
						v = 60.0 * (i + 1) + 30 * k;
				x = x * 6364136223846793005ull + 1442695040888963407ull;
				v += (double)(x >> 59) - 16;
				p[((size_t)yy * w + xx) * ch + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
		}
	}
	return p;
}

/*
 * Encodes an image with chroma subsampling samp (TJSAMP_*; grayscale's
 * for one channel); flags: TJFLAG_PROGRESSIVE, or 0.  Returns malloc'd
 * bytes.
 */
static uint8_t *make_jpeg_samp(uint32_t w, uint32_t h, uint32_t ch, uint64_t seed, int flags,
			       int samp, size_t *len_p)
{
	tjhandle t = tjInitCompress();
	uint8_t *px = make_pixels(w, h, ch == 4 ? 4 : ch, seed), *jpeg = NULL, *out;
	unsigned long len = 0;

	ck_assert_ptr_nonnull(t);
	ck_assert_msg(tjCompress2(t, px, (int)w, 0, (int)h,
				  ch == 1 ? TJPF_GRAY : ch == 4 ? TJPF_CMYK : TJPF_RGB, &jpeg, &len,
				  ch == 1 ? TJSAMP_GRAY : samp, 90, flags) == 0,
		      "%s", tjGetErrorStr2(t));
	out = malloc(len);
	memcpy(out, jpeg, len);
	tjFree(jpeg);
	tjDestroy(t);
	free(px);
	*len_p = len;
	return out;
}

/* make_jpeg_samp() at 4:2:0. */
static uint8_t *make_jpeg(uint32_t w, uint32_t h, uint32_t ch, uint64_t seed, int flags,
			  size_t *len_p)
{
	return make_jpeg_samp(w, h, ch, seed, flags, TJSAMP_420, len_p);
}

/* libjpeg-turbo's own decode at (sw, sh) (a scale it supports), with default flags. */
static uint8_t *reference(const uint8_t *jpeg, size_t len, uint32_t sw, uint32_t sh, uint32_t ch)
{
	tjhandle t = tjInitDecompress();
	uint8_t *px = malloc((size_t)sw * sh * ch);

	ck_assert_msg(tjDecompress2(t, jpeg, len, px, (int)sw, 0, (int)sh,
				    ch == 1 ? TJPF_GRAY : TJPF_RGB, 0) == 0, "%s", tjGetErrorStr2(t));
	libjpeg_defined(px, (size_t)sw * sh * ch);
	tjDestroy(t);
	return px;
}

/* Fails unless out (CHW, s x s) is ref (HWC, rw wide) from (x0, y0) on, mirrored if flip. */
static void assert_crop_of(const uint8_t *out, const uint8_t *ref, uint32_t rw, uint32_t ch,
			   uint32_t s, uint32_t x0, uint32_t y0, bool flip, const char *what)
{
	for (uint32_t k = 0; k < ch; k++)
		for (uint32_t y = 0; y < s; y++)
			for (uint32_t x = 0; x < s; x++) {
				uint32_t rx = x0 + (flip ? s - 1 - x : x);
				uint8_t want = ref[((size_t)(y0 + y) * rw + rx) * ch + k];
				uint8_t got = out[(size_t)k * s * s + (size_t)y * s + x];
				ck_assert_msg(got == want, "%s: channel %u (%u, %u): %u, want %u", what,
					      k, x, y, got, want);
			}
}

/*
 * Fails if an eval decode whose resize is the identity (the shorter side
 * already size * 8 / 7, whole or after the DCT's 1/8) differs by one value
 * from libjpeg-turbo's decode of the same file, centre-cropped as
 * torchvision does; for RGB, grayscale, progressive.
 */
START_TEST(test_eval_equals_reference)
{
	static const struct { uint32_t w, h, ch, denom; int flags; } cases[] = {
		{ 64, 80, 3, 1, 0 }, { 80, 64, 3, 1, 0 }, { 512, 640, 3, 8, 0 },
		{ 256, 320, 3, 4, 0 }, { 64, 80, 1, 1, 0 }, { 128, 160, 3, 2, TJFLAG_PROGRESSIVE },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pp_jpeg_config jc = { .size = 56, .channels = cases[i].ch, .mode = PP_JPEG_EVAL };
		struct pp_jpeg_decoder *d;
		size_t len;
		uint8_t *jpeg = make_jpeg(cases[i].w, cases[i].h, cases[i].ch, i, cases[i].flags, &len);
		uint32_t sw = cases[i].w / cases[i].denom, sh = cases[i].h / cases[i].denom;
		uint8_t *ref = reference(jpeg, len, sw, sh, cases[i].ch), out[3 * 56 * 56];
		struct pp_jpeg_crop c;
		char what[64];

		ck_assert_int_eq(pp_jpeg_decoder_create(&jc, &d), 0);
		pp_jpeg_plan(&jc, cases[i].w, cases[i].h, NULL, &c);
		ck_assert_uint_eq(c.scale8, 8 / cases[i].denom);
		ck_assert_msg(pp_jpeg_decode(d, jpeg, len, NULL, out) == 0, "%s", pp_last_error());
		snprintf(what, sizeof(what), "%u x %u, %u channels", cases[i].w, cases[i].h,
			 cases[i].ch);
		/* CenterCrop(56) of 64 x 80: round((80 - 56) / 2) = 12, round(4) = 4 */
		assert_crop_of(out, ref, sw, cases[i].ch, 56, sw > sh ? 12 : 4, sw > sh ? 4 : 12,
			       false, what);
		free(ref);
		free(jpeg);
		pp_jpeg_decoder_destroy(d);
	}
}
END_TEST

/* Fails if libjpeg-turbo's full-size decode (the reference above) differs from Pillow's. */
START_TEST(test_reference_equals_pillow)
{
	char *dir = pp_test_tmpdir(), path[512], raw[512], cmd[1600];
	size_t len, rlen;
	uint8_t *jpeg = make_jpeg(120, 90, 3, 7, 0, &len), *ref, *pil;

	if (system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") != 0) {
		fprintf(stderr, "test_reference_equals_pillow: no Pillow, not checked\n");
		goto out;
	}
	snprintf(path, sizeof(path), "%s/a.jpg", dir);
	snprintf(raw, sizeof(raw), "%s/a.raw", dir);
	pp_test_write_file(path, jpeg, len);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c \"from PIL import Image; "
		 "open('%s', 'wb').write(Image.open('%s').convert('RGB').tobytes())\"", raw, path);
	ck_assert_int_eq(system(cmd), 0);
	pil = pp_test_read_file(raw, &rlen);
	ck_assert_uint_eq(rlen, 120 * 90 * 3);
	ref = reference(jpeg, len, 120, 90, 3);
	ck_assert_int_eq(memcmp(ref, pil, rlen), 0);
	free(ref);
	free(pil);
out:
	free(jpeg);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if a crop of the output's size at scale 1, or of twice the size at
 * scale 1/2, is not exactly that part of libjpeg-turbo's decode (at that
 * scale), or its flip not the mirror image.
 */
START_TEST(test_crop_and_flip)
{
	struct pp_jpeg_config jc = { .size = 32, .mode = PP_JPEG_TRAIN };
	struct pp_jpeg_decoder *d;
	struct pp_jpeg_worker *w;
	size_t len;
	uint8_t *jpeg = make_jpeg(200, 150, 3, 3, 0, &len), out[3 * 32 * 32];
	uint8_t *full = reference(jpeg, len, 200, 150, 3), *half = reference(jpeg, len, 100, 75, 3);

	ck_assert_int_eq(pp_jpeg_decoder_create(&jc, &d), 0);
	ck_assert_int_eq(pp_jpeg_worker_create(d, &w), 0);
	for (int flip = 0; flip < 2; flip++) {
		struct pp_jpeg_crop c = { .x = 17, .y = 9, .w = 32, .h = 32, .flip = flip, .scale8 = 8 };
		ck_assert_int_eq(pp_jpeg_decode_crop(d, w, jpeg, len, &c, out), 0);
		assert_crop_of(out, full, 200, 3, 32, 17, 9, flip, "scale 1");
		c = (struct pp_jpeg_crop){ .x = 60, .y = 40, .w = 64, .h = 64, .flip = flip,
					   .scale8 = 4 };
		ck_assert_int_eq(pp_jpeg_decode_crop(d, w, jpeg, len, &c, out), 0);
		assert_crop_of(out, half, 100, 3, 32, 30, 20, flip, "scale 1/2");
	}
	pp_jpeg_worker_destroy(w);
	pp_jpeg_decoder_destroy(d);
	free(full);
	free(half);
	free(jpeg);
}
END_TEST

/* torchvision's coordinate (align_corners=False) of output o in a decoded axis of n pixels. */
static void ref_axis(double start, double len, uint32_t s, uint32_t o, double scale, uint32_t n,
		     uint32_t *i0, uint32_t *i1, double *f)
{
	double sc = (start + (o + 0.5) * len / s) * scale - 0.5;

	sc = sc < 0 ? 0 : sc > n - 1 ? n - 1 : sc;
	*i0 = (uint32_t)floor(sc);
	*i1 = *i0 + 1 < n ? *i0 + 1 : *i0;
	*f = sc - *i0;
}

/*
 * Fails if a resized crop (RandomResizedCrop's, flipped or not, at every
 * DCT scale, up and down, RGB and grayscale, an output size that is not a
 * multiple of 8) differs by more than one value from the real-valued
 * bilinear resize of libjpeg-turbo's decode at the crop's scale (the
 * 8-bit weights move a value by under one before its rounding), or if the
 * portable and AVX2 versions of the resize differ by one bit.
 */
START_TEST(test_resize_bounded)
{
	static const struct { uint32_t w, h, ch, size; } cases[] = {
		{ 400, 300, 3, 37 }, { 300, 400, 3, 64 }, { 400, 300, 1, 40 }, { 90, 70, 3, 120 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const uint32_t W = cases[i].w, H = cases[i].h, ch = cases[i].ch, s = cases[i].size;
		struct pp_jpeg_config jc = { .size = s, .channels = ch, .mode = PP_JPEG_TRAIN };
		struct pp_jpeg_decoder *d;
		struct pp_jpeg_worker *w;
		size_t len, plane = (size_t)s * s, ndiff = 0;
		uint8_t *jpeg = make_jpeg(W, H, ch, 40 + i, 0, &len), *ref[9] = { NULL };
		uint8_t *out = malloc(ch * plane), *out2 = malloc(ch * plane);
		unsigned scales_seen = 0;

		ck_assert_int_eq(pp_jpeg_decoder_create(&jc, &d), 0);
		ck_assert_int_eq(pp_jpeg_worker_create(d, &w), 0);
		for (uint32_t m = 1; m <= 8; m *= 2)
			ref[m] = reference(jpeg, len, (W * m + 7) / 8, (H * m + 7) / 8, ch);
		for (uint64_t t = 0; t < 80; t++) {
			struct pp_rng rng;
			struct pp_jpeg_crop c;
			pp_rng_init(&rng, 5, i, t);
			pp_jpeg_plan(&jc, W, H, &rng, &c);
			/* some at the whole size, some at a scale coarser than the plan's */
			if (t % 4 == 1)
				c.scale8 = 8;
			else if (t % 4 == 3 && c.scale8 > 1)
				c.scale8 /= 2;
			scales_seen |= 1u << c.scale8;
			pp_jpeg_worker_resize(w)->isa = PP_ISA_BASE;
			ck_assert_msg(pp_jpeg_decode_crop(d, w, jpeg, len, &c, out) == 0, "%s",
				      pp_last_error());
			if (c.scale8 == 1)
				libjpeg_defined(out, ch * plane);
			if (pp_isa_best() >= PP_ISA_AVX2) {
				pp_jpeg_worker_resize(w)->isa = pp_isa_best();
				ck_assert_int_eq(pp_jpeg_decode_crop(d, w, jpeg, len, &c, out2), 0);
				if (c.scale8 == 1)
					libjpeg_defined(out2, ch * plane);
				ck_assert_msg(memcmp(out, out2, ch * plane) == 0,
					      "case %zu, crop %llu: the AVX2 resize differs from the "
					      "portable one", i, (unsigned long long)t);
			}
			const uint32_t sw = (W * c.scale8 + 7) / 8, sh = (H * c.scale8 + 7) / 8;
			const uint8_t *p = ref[c.scale8];
			for (uint32_t oy = 0; oy < s; oy++) {
				uint32_t y0, y1, x0, x1;
				double fy, fx;
				ref_axis(c.y, c.h, s, oy, (double)sh / H, sh, &y0, &y1, &fy);
				for (uint32_t ox = 0; ox < s; ox++) {
					ref_axis(c.x, c.w, s, c.flip ? s - 1 - ox : ox, (double)sw / W, sw,
						 &x0, &x1, &fx);
					for (uint32_t k = 0; k < ch; k++) {
						double top = p[((size_t)y0 * sw + x0) * ch + k] * (1 - fx) +
							     p[((size_t)y0 * sw + x1) * ch + k] * fx;
						double bot = p[((size_t)y1 * sw + x0) * ch + k] * (1 - fx) +
							     p[((size_t)y1 * sw + x1) * ch + k] * fx;
						double want = top * (1 - fy) + bot * fy;
						int got = out[k * plane + (size_t)oy * s + ox];
						ck_assert_msg(fabs(got - want) < 1.5,
							      "case %zu, crop %llu (%g, %g, %g x %g, flip %d, "
							      "scale %u/8): channel %u (%u, %u): %d, want %.2f",
							      i, (unsigned long long)t, c.x, c.y, c.w, c.h,
							      c.flip, c.scale8, k, ox, oy, got, want);
						ndiff += got != (int)lround(want);
					}
				}
			}
		}
		/* the 8-bit weights are not the real ones: some values differ, but few */
		ck_assert_msg(ndiff < 80 * ch * plane / 10, "case %zu: %zu values off by one", i,
			      ndiff);
		/* the cases reach the DCT scales they are meant to */
		ck_assert_msg((scales_seen & (1u << 8)) && (i == 3 || (scales_seen & (1u << 4))),
			      "case %zu: scales seen %#x", i, scales_seen);
		for (uint32_t m = 1; m <= 8; m *= 2)
			free(ref[m]);
		free(out);
		free(out2);
		free(jpeg);
		pp_jpeg_worker_destroy(w);
		pp_jpeg_decoder_destroy(d);
	}
}
END_TEST

/*
 * Fails if decoding only the rows and columns a crop reads (libjpeg's API)
 * gives other bits than decoding the whole image, for RandomResizedCrop's
 * crops and eval's, at every DCT scale, flipped or not, for 4:2:0, 4:2:2,
 * 4:4:0, 4:4:4, grayscale and progressive files of sizes that are not
 * whole iMCUs; or if a file truncated or cut by an EOI marker below a crop
 * at its top decodes.  Skips where pinpipe has no libjpeg API.
 */
START_TEST(test_region_equals_whole)
{
	static const struct { uint32_t w, h, ch; int samp, flags; } cases[] = {
		{ 301, 227, 3, TJSAMP_420, 0 }, { 227, 301, 3, TJSAMP_422, 0 },
		{ 250, 190, 3, TJSAMP_440, 0 }, { 250, 190, 3, TJSAMP_444, 0 },
		{ 263, 199, 1, TJSAMP_GRAY, 0 }, { 301, 227, 3, TJSAMP_420, TJFLAG_PROGRESSIVE },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const uint32_t ch = cases[i].ch, s = 40;
		struct pp_jpeg_config jc = { .size = s, .channels = ch, .mode = PP_JPEG_TRAIN };
		struct pp_jpeg_config ec = { .size = s, .channels = ch, .mode = PP_JPEG_EVAL };
		struct pp_jpeg_decoder *d;
		struct pp_jpeg_worker *w;
		size_t len;
		uint8_t *jpeg = make_jpeg_samp(cases[i].w, cases[i].h, ch, 60 + i, cases[i].flags,
					       cases[i].samp, &len);
		uint8_t whole[3 * 40 * 40], part[3 * 40 * 40];
		unsigned scales_seen = 0;

		ck_assert_int_eq(pp_jpeg_decoder_create(&jc, &d), 0);
		ck_assert_int_eq(pp_jpeg_worker_create(d, &w), 0);
		if (!pp_jpeg_worker_decode_whole(w, false)) {
			fprintf(stderr, "test_region_equals_whole: no libjpeg API, not checked\n");
			pp_jpeg_worker_destroy(w);
			pp_jpeg_decoder_destroy(d);
			free(jpeg);
			return;
		}
		for (uint64_t t = 0; t < 120; t++) {
			struct pp_rng rng;
			struct pp_jpeg_crop c;
			pp_rng_init(&rng, 7, i, t);
			pp_jpeg_plan(t == 0 ? &ec : &jc, cases[i].w, cases[i].h, &rng, &c);
			if (t % 3 == 1)
				c.scale8 = 8;
			scales_seen |= 1u << c.scale8;
			pp_jpeg_worker_decode_whole(w, true);
			ck_assert_msg(pp_jpeg_decode_crop(d, w, jpeg, len, &c, whole) == 0, "%s",
				      pp_last_error());
			pp_jpeg_worker_decode_whole(w, false);
			ck_assert_msg(pp_jpeg_decode_crop(d, w, jpeg, len, &c, part) == 0, "%s",
				      pp_last_error());
			libjpeg_defined(whole, ch * s * s);
			libjpeg_defined(part, ch * s * s);
			ck_assert_msg(memcmp(whole, part, ch * s * s) == 0,
				      "case %zu, crop %llu (%g, %g, %g x %g, flip %d, scale %u/8): the "
				      "region's decode differs from the whole image's", i,
				      (unsigned long long)t, c.x, c.y, c.w, c.h, c.flip, c.scale8);
		}
		ck_assert_msg((scales_seen & 0x112) == 0x112 || (scales_seen & 0x114) == 0x114,
			      "case %zu: scales seen %#x", i, scales_seen);
		/* a crop of the top rows of a file that ends (or whose data ends) further down */
		{
			struct pp_jpeg_crop c = { .x = 10, .y = 0, .w = 40, .h = 40, .scale8 = 8 };
			uint8_t *cut = malloc(len);
			memcpy(cut, jpeg, len);
			ck_assert_int_eq(pp_jpeg_decode_crop(d, w, cut, len * 3 / 4, &c, part),
					 -EBADMSG);
			ck_assert_msg(strstr(pp_last_error(), "truncated or corrupt") != NULL, "%s",
				      pp_last_error());
			cut[len * 3 / 4] = 0xff;
			cut[len * 3 / 4 + 1] = 0xd9;
			ck_assert_int_eq(pp_jpeg_decode_crop(d, w, cut, len, &c, part), -EBADMSG);
			/* and the worker decodes the next good file */
			ck_assert_msg(pp_jpeg_decode_crop(d, w, jpeg, len, &c, part) == 0, "%s",
				      pp_last_error());
			pp_jpeg_worker_decode_whole(w, true);
			ck_assert_int_eq(pp_jpeg_decode_crop(d, w, jpeg, len, &c, whole), 0);
			ck_assert_int_eq(memcmp(whole, part, ch * s * s), 0);
			free(cut);
		}
		pp_jpeg_worker_destroy(w);
		pp_jpeg_decoder_destroy(d);
		free(jpeg);
	}
}
END_TEST

/*
 * Fails if RandomResizedCrop's crops leave the image, break its scale and
 * ratio bounds, flip far from half the time, or miss torchvision's
 * centre-crop fallback when no try fits; or if the DCT scale chosen leaves
 * the crop smaller than the output, or is not the smallest that does not.
 */
START_TEST(test_train_plan)
{
	struct pp_jpeg_config jc = { .size = 32, .channels = 3, .mode = PP_JPEG_TRAIN };
	static const uint32_t dims[][2] = { { 500, 375 }, { 375, 500 }, { 40, 40 }, { 3000, 2000 } };
	uint32_t flips = 0, n = 0;

	for (size_t k = 0; k < 4; k++) {
		for (uint64_t i = 0; i < 500; i++, n++) {
			struct pp_rng rng;
			struct pp_jpeg_crop c, c2;
			double W = dims[k][0], H = dims[k][1];
			pp_rng_init(&rng, 1, 2, i);
			pp_jpeg_plan(&jc, dims[k][0], dims[k][1], &rng, &c);
			pp_rng_init(&rng, 1, 2, i);
			pp_jpeg_plan(&jc, dims[k][0], dims[k][1], &rng, &c2);
			ck_assert_int_eq(memcmp(&c, &c2, sizeof(c)), 0);
			ck_assert(c.x >= 0 && c.y >= 0 && c.x + c.w <= W && c.y + c.h <= H);
			ck_assert(c.w == floor(c.w) && c.h == floor(c.h) && c.w >= 1 && c.h >= 1);
			/* rounding of w and h moves area and ratio by at most a pixel's worth */
			ck_assert_msg(c.w * c.h >= 0.08 * W * H - (c.w + c.h) &&
				      c.w / c.h >= 0.75 * (1 - 1 / c.h) - 1 / c.h &&
				      c.w / c.h <= 4.0 / 3 * (1 + 1 / c.h) + 1 / c.h,
				      "%g x %g of %g x %g", c.w, c.h, W, H);
			/* the smallest of 1/8, 1/4, 1/2, 1 that holds the crop at 32 x 32 or more */
			ck_assert(c.scale8 == 1 || c.scale8 == 2 || c.scale8 == 4 || c.scale8 == 8);
			ck_assert(c.scale8 == 8 || (c.w * c.scale8 >= 32 * 8 && c.h * c.scale8 >= 32 * 8));
			ck_assert(c.scale8 == 1 || c.w * (c.scale8 / 2) < 32 * 8 ||
				  c.h * (c.scale8 / 2) < 32 * 8);
			flips += c.flip;
		}
	}
	/* 2000 fair coins: 1000 +- 5 standard deviations (22.4) */
	ck_assert_msg(flips > 888 && flips < 1112, "%u flips of %u", flips, n);
	/* 1000 x 10: no try fits (h >= 24 > 10), so the fallback: h = 10, w = round(13.3) */
	for (uint64_t i = 0; i < 20; i++) {
		struct pp_rng rng;
		struct pp_jpeg_crop c;
		pp_rng_init(&rng, 3, 0, i);
		pp_jpeg_plan(&jc, 1000, 10, &rng, &c);
		ck_assert(c.w == 13 && c.h == 10 && c.x == 493 && c.y == 0);
		pp_rng_init(&rng, 3, 0, i);
		pp_jpeg_plan(&jc, 10, 1000, &rng, &c);
		ck_assert(c.w == 10 && c.h == 13 && c.x == 0 && c.y == 493);
	}
}
END_TEST

/*
 * RandomResizedCrop's draws as torchvision makes them: a try's crop may
 * be as wide or as tall as the image, and its corner is drawn from every
 * place that holds it, the last one included (torch.randint(0, H - h + 1));
 * the aspect ratio is log-uniform, so that on a square image as many
 * crops are wider than tall as taller than wide (20000 plans: a
 * difference within 5 standard deviations, sqrt(20000) each); and
 * CenterCrop's offset is Python's round() of half the difference, halves
 * to even (a 36 x 37 image to 32: 2.5 rows, so 2).  Fails if a try
 * refuses a crop of the image's full width, a corner never reaches the
 * far edge, the ratio is drawn uniform (1/4 more wide crops than tall),
 * or halves round away from zero.
 */
START_TEST(test_train_plan_draws)
{
	struct pp_jpeg_config jc = { .size = 4, .channels = 3, .mode = PP_JPEG_TRAIN };
	struct pp_jpeg_config ec = { .size = 32, .channels = 3, .mode = PP_JPEG_EVAL };
	bool full_w = false, full_h = false, right = false, bottom = false;
	int64_t wide = 0, tall = 0;
	struct pp_rng rng;
	struct pp_jpeg_crop c;

	for (uint64_t i = 0; i < 500; i++) {
		pp_rng_init(&rng, 4, 0, i);
		pp_jpeg_plan(&jc, 8, 8, &rng, &c);
		full_w |= c.w == 8 && c.h < 8;
		full_h |= c.h == 8 && c.w < 8;
		right |= c.w < 8 && c.x + c.w == 8;
		bottom |= c.h < 8 && c.y + c.h == 8;
	}
	ck_assert_msg(full_w && full_h, "no try of the full width (%d) or height (%d)", full_w, full_h);
	ck_assert_msg(right && bottom, "no crop at the right (%d) or bottom (%d) edge", right, bottom);
	for (uint64_t i = 0; i < 20000; i++) {
		pp_rng_init(&rng, 5, 0, i);
		pp_jpeg_plan(&jc, 3000, 3000, &rng, &c);
		wide += c.w > c.h;
		tall += c.w < c.h;
	}
	ck_assert_msg(llabs(wide - tall) < 5 * 142, "%lld wider than tall, %lld taller than wide",
		      (long long)wide, (long long)tall);
	pp_jpeg_plan(&ec, 36, 37, NULL, &c);
	ck_assert_msg(c.x == 2 && c.y == 2 && c.w == 32 && c.h == 32, "%g, %g, %g x %g", c.x, c.y,
		      c.w, c.h);
	pp_jpeg_plan(&ec, 37, 36, NULL, &c);
	ck_assert_msg(c.x == 2 && c.y == 2 && c.w == 32 && c.h == 32, "%g, %g, %g x %g", c.x, c.y,
		      c.w, c.h);
}
END_TEST

/* Writes a JPEG file; returns its bytes (malloc'd) and length. */
static uint8_t *write_jpeg(const char *path, uint32_t w, uint32_t h, uint64_t seed, size_t *len_p)
{
	uint8_t *j = make_jpeg(w, h, 3, seed, seed % 3 == 0 ? TJFLAG_PROGRESSIVE : 0, len_p);
	pp_test_write_file(path, j, *len_p);
	return j;
}

/* Makes ROOT/{cat,ant,bee}/ with per images each (made out of name order), sizes varying. */
static void make_folder(const char *root, int per)
{
	static const char *const cls[] = { "cat", "ant", "bee" };
	char path[1024];

	mkdir(root, 0755);
	for (int c = 0; c < 3; c++) {
		snprintf(path, sizeof(path), "%s/%s", root, cls[c]);
		mkdir(path, 0755);
		for (int i = per - 1; i >= 0; i--) {
			size_t len;
			snprintf(path, sizeof(path), "%s/%s/%02d.%s", root, cls[c], i,
				 i % 2 ? "JPEG" : "jpg");
			free(write_jpeg(path, 60 + 13 * i, 50 + 7 * c, (uint64_t)(c * 100 + i), &len));
		}
	}
	snprintf(path, sizeof(path), "%s/ant/notes.txt", root);
	pp_test_write_file(path, "not an image", 12);
}

static uint64_t digest(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/*
 * One epoch from a loader: every image checked against pp_jpeg_decode() of
 * its file with the sample's generator, every label against its class; the
 * digest of the batches returned, and each id's count added to seen[].
 */
static uint64_t folder_epoch(const struct pp_loader_config *cfg, struct pp_image_folder *f,
			     const struct pp_jpeg_decoder *d, uint64_t epoch, uint64_t skip,
			     uint32_t *seen)
{
	const uint32_t s = pp_jpeg_decoder_config(d)->size;
	struct pp_loader *l;
	struct pp_batch *b;
	uint64_t h = 0xcbf29ce484222325ull, k = 0;
	uint8_t *want = malloc(3 * s * s);
	int ret;

	ck_assert_msg(pp_loader_create(cfg, &l) == 0, "%s", pp_last_error());
	if (skip > 0) {
		struct pp_loader_position pos;
		ck_assert_int_eq(pp_loader_begin_epoch(l, epoch), 0);
		ck_assert_int_eq(pp_loader_get_position(l, &pos), 0);
		pos.batch = skip;
		ck_assert_msg(pp_loader_resume(l, &pos) == 0, "%s", pp_last_error());
	} else {
		ck_assert_int_eq(pp_loader_begin_epoch(l, epoch), 0);
	}
	while ((ret = pp_loader_next(l, &b)) == 1) {
		for (uint32_t i = 0; i < b->size - b->padding; i++) {
			uint64_t id = b->ids[i];
			size_t len;
			uint8_t *jpeg = pp_test_read_file(pp_image_folder_path(f, id), &len);
			struct pp_rng rng;
			pp_rng_init(&rng, cfg->seed, epoch, id);
			ck_assert_int_eq(pp_jpeg_decode(d, jpeg, len, &rng, want), 0);
			ck_assert_msg(memcmp((uint8_t *)b->fields[0] + (size_t)i * 3 * s * s, want,
					     3 * s * s) == 0, "sample %llu", (unsigned long long)id);
			ck_assert_int_eq(b->labels[i], pp_image_folder_label(f, id));
			free(jpeg);
			if (seen != NULL)
				seen[id]++;
		}
		h = digest(h, b->ids, b->size * 8);
		h = digest(h, b->fields[0], (size_t)b->size * 3 * s * s);
		h = digest(h, b->labels, b->size * 4);
		k++;
		pp_loader_release(l, b);
	}
	ck_assert_msg(ret == 0, "%s", pp_last_error());
	pp_loader_destroy(l);
	free(want);
	return h;
}

/*
 * Fails if the folder's classes are not sorted by name with labels their
 * index, a non-JPEG file is listed, or its samples through the loader
 * (shuffled, 0 and 3 workers, 1..3 ranks, a resume) differ from the
 * decoder's of the same file with the same generator, or cover the set
 * other than once.
 */
START_TEST(test_folder_loader)
{
	char *dir = pp_test_tmpdir(), root[512];
	struct pp_jpeg_config jc = { .size = 24, .mode = PP_JPEG_TRAIN };
	struct pp_image_folder *f;
	struct pp_jpeg_decoder *d;
	uint32_t seen[21];
	uint64_t h0, h;

	snprintf(root, sizeof(root), "%s/train", dir);
	make_folder(root, 7);
	ck_assert_msg(pp_image_folder_open(root, &jc, &f) == 0, "%s", pp_last_error());
	ck_assert_int_eq(pp_jpeg_decoder_create(&jc, &d), 0);
	ck_assert_uint_eq(pp_image_folder_classes(f), 3);
	ck_assert_str_eq(pp_image_folder_class(f, 0), "ant");
	ck_assert_str_eq(pp_image_folder_class(f, 1), "bee");
	ck_assert_str_eq(pp_image_folder_class(f, 2), "cat");
	ck_assert_ptr_null(pp_image_folder_class(f, 3));
	ck_assert_int_eq(pp_image_folder_label(f, 0), 0);
	ck_assert_int_eq(pp_image_folder_label(f, 7), 1);
	ck_assert_int_eq(pp_image_folder_label(f, 20), 2);
	ck_assert_ptr_nonnull(strstr(pp_image_folder_path(f, 8), "/bee/01.JPEG"));
	ck_assert_ptr_null(pp_image_folder_path(f, 21));

	struct pp_loader_config cfg = { .source = pp_image_folder_source(f), .batch_size = 4,
					.shuffle = true, .seed = 11 };
	memset(seen, 0, sizeof(seen));
	h0 = folder_epoch(&cfg, f, d, 2, 0, seen);
	for (int i = 0; i < 21; i++)
		ck_assert_uint_eq(seen[i], 1);
	cfg.workers = 3;
	ck_assert_uint_eq(folder_epoch(&cfg, f, d, 2, 0, NULL), h0);
	/* another epoch, other crops */
	ck_assert_uint_ne(folder_epoch(&cfg, f, d, 3, 0, NULL), h0);
	/* a resume after 2 batches hands out the rest: checked sample by sample */
	memset(seen, 0, sizeof(seen));
	folder_epoch(&cfg, f, d, 2, 2, seen);
	h = 0;
	for (int i = 0; i < 21; i++)
		h += seen[i];
	ck_assert_uint_eq(h, 21 - 8);
	for (uint32_t ws = 2; ws <= 3; ws++) {
		memset(seen, 0, sizeof(seen));
		cfg.world_size = ws;
		for (uint32_t r = 0; r < ws; r++) {
			cfg.rank = r;
			folder_epoch(&cfg, f, d, 2, 0, seen);
		}
		for (int i = 0; i < 21; i++)
			ck_assert_msg(seen[i] == 1, "%u ranks: sample %d seen %u times", ws, i, seen[i]);
	}
	pp_jpeg_decoder_destroy(d);
	pp_image_folder_close(f);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if two splits of the same classes are not taken as such, or if a
 * split whose classes differ (a class renamed, or one missing, which
 * shifts the labels after it) is not refused with both roots and the
 * first class that differs named.
 */
START_TEST(test_folder_same_classes)
{
	char *dir = pp_test_tmpdir(), train[512], val[512], a[600], b[600];
	struct pp_jpeg_config jc = { .size = 24, .mode = PP_JPEG_EVAL };
	struct pp_image_folder *ft, *fv;

	snprintf(train, sizeof(train), "%s/train", dir);
	snprintf(val, sizeof(val), "%s/val", dir);
	make_folder(train, 2);
	make_folder(val, 1);
	ck_assert_int_eq(pp_image_folder_open(train, &jc, &ft), 0);
	ck_assert_int_eq(pp_image_folder_open(val, &jc, &fv), 0);
	ck_assert_int_eq(pp_image_folder_same_classes(ft, fv), 0);
	pp_image_folder_close(fv);
	/* bee renamed bird: the same count, another class 1 */
	snprintf(a, sizeof(a), "%s/bee", val);
	snprintf(b, sizeof(b), "%s/bird", val);
	ck_assert_int_eq(rename(a, b), 0);
	ck_assert_int_eq(pp_image_folder_open(val, &jc, &fv), 0);
	ck_assert_int_eq(pp_image_folder_same_classes(ft, fv), -EINVAL);
	ck_assert_msg(strstr(pp_last_error(), val) != NULL && strstr(pp_last_error(), train) != NULL &&
		      strstr(pp_last_error(), "class 1 is \"bee\" there, \"bird\" here") != NULL,
		      "%s", pp_last_error());
	pp_image_folder_close(fv);
	/* ant gone: bee's images would be labelled 0 */
	snprintf(a, sizeof(a), "%s/ant", val);
	pp_test_rmtree(a);
	ck_assert_int_eq(rename(b, a), 0);
	snprintf(a, sizeof(a), "%s/bee", val);
	snprintf(b, sizeof(b), "%s/ant", val);
	ck_assert_int_eq(rename(b, a), 0);
	ck_assert_int_eq(pp_image_folder_open(val, &jc, &fv), 0);
	ck_assert_int_eq(pp_image_folder_same_classes(ft, fv), -EINVAL);
	ck_assert_msg(strstr(pp_last_error(), "class 0 is \"ant\" there, \"bee\" here (3 classes "
			     "against 2)") != NULL, "%s", pp_last_error());
	ck_assert_int_eq(pp_image_folder_same_classes(NULL, fv), -EINVAL);
	pp_image_folder_close(fv);
	pp_image_folder_close(ft);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if classes whose names are not all UTF-8 are not in the order
 * torchvision gives them (Python's sorted() of the names os.scandir()
 * decodes, undecodable bytes as U+DC80..U+DCFF), which strcmp() would
 * not: the list below is what Python 3.11 printed for these folders, and
 * each label is its class's index in it.  Files are sorted the same way.
 */
START_TEST(test_folder_non_utf8_order)
{
	static const char *const want[] = {
		"a", "\xc3\xa9", "\xe2\x82\xac", "\x80x", "\xe2\x82", "\xe9t\xe9",
		"\xed\xa0\x80", "\xff", "\xee\x80\x80", "\xf0\x9f\x98\x80",
	};
	const size_t n = sizeof(want) / sizeof(want[0]);
	char *dir = pp_test_tmpdir(), root[512], path[700];
	struct pp_jpeg_config jc = { .size = 16, .mode = PP_JPEG_EVAL };
	struct pp_image_folder *f;
	size_t len;

	snprintf(root, sizeof(root), "%s/train", dir);
	ck_assert_int_eq(mkdir(root, 0755), 0);
	/* made in reverse, and the files in the first class under the same names */
	for (size_t i = n; i-- > 0;) {
		snprintf(path, sizeof(path), "%s/%s", root, want[i]);
		if (mkdir(path, 0755) != 0 && errno == EILSEQ) {
			fprintf(stderr, "test_folder_non_utf8_order: %s takes no name that is not "
				"UTF-8: not checked\n", dir);
			pp_test_rmtree(dir);
			free(dir);
			return;
		}
		ck_assert_msg(access(path, F_OK) == 0, "%s: %s", path, strerror(errno));
	}
	for (size_t i = n; i-- > 0;) {
		snprintf(path, sizeof(path), "%s/%s/x.jpg", root, want[i]);
		free(write_jpeg(path, 20, 20, (uint64_t)i, &len));
		snprintf(path, sizeof(path), "%s/a/%s.jpg", root, want[i]);
		if (i > 0)
			free(write_jpeg(path, 20, 20, (uint64_t)(100 + i), &len));
	}
	ck_assert_msg(pp_image_folder_open(root, &jc, &f) == 0, "%s", pp_last_error());
	ck_assert_uint_eq(pp_image_folder_classes(f), n);
	ck_assert_uint_eq(pp_image_folder_count(f), 2 * n - 1);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(strcmp(pp_image_folder_class(f, (uint32_t)i), want[i]) == 0,
			      "class %zu is not the %zu-th name", i, i);
	/* class "a": its files by name the same way, x.jpg (U+0078) before U+00E9 */
	for (size_t i = 0; i < n; i++) {
		if (i == 0)
			snprintf(path, sizeof(path), "%s/a/x.jpg", root);
		else
			snprintf(path, sizeof(path), "%s/a/%s.jpg", root, want[i]);
		ck_assert_msg(strcmp(pp_image_folder_path(f, i), path) == 0, "file %zu: %s", i,
			      pp_image_folder_path(f, i));
		ck_assert_int_eq(pp_image_folder_label(f, i), 0);
	}
	for (size_t i = 1; i < n; i++)
		ck_assert_int_eq(pp_image_folder_label(f, n - 1 + i), (int32_t)i);
	pp_image_folder_close(f);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if a class's images in folders under it are not listed as
 * torchvision's ImageFolder lists them (every folder, in the order of the
 * folders' paths, then each folder's files by name: ant/zz.jpg before
 * ant/a b/11.jpg, which a sort of whole paths puts first), with the
 * class's label, and the folder not probed as one of images (a class of
 * subfolders alone included); if a folder reached by another name (a link) is not
 * listed under both, as torchvision lists it; or if a link loop under a
 * class is not refused.
 */
START_TEST(test_folder_nested)
{
	static const char *const want[] = { "ant/00.jpg", "ant/01.JPEG", "ant/zz.jpg", "ant/a b/11.jpg",
					    "ant/sub/10.jpg", "ant/sub/deeper/12.jpeg", "bee/00.jpg" };
	char *dir = pp_test_tmpdir(), root[512], path[700];
	struct pp_jpeg_config jc = { .size = 24, .mode = PP_JPEG_EVAL };
	struct pp_image_folder *f;
	size_t len;

	snprintf(root, sizeof(root), "%s/train", dir);
	make_folder(root, 2);
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/ant/%s", root, i == 0 ? "sub" : i == 1 ? "a b" :
			 "sub/deeper");
		ck_assert_int_eq(mkdir(path, 0755), 0);
	}
	for (int i = 2; i < 6; i++) {
		snprintf(path, sizeof(path), "%s/%s", root, want[i]);
		free(write_jpeg(path, 40, 30, (uint64_t)(500 + i), &len));
	}
	ck_assert_msg(pp_image_folder_open(root, &jc, &f) == 0, "%s", pp_last_error());
	ck_assert_uint_eq(pp_image_folder_count(f), 3 * 2 + 4);
	ck_assert(pp_image_folder_probe(dir));
	/* A class whose images are all in a folder under it is an image folder too. */
	snprintf(path, sizeof(path), "%s/deep", dir);
	ck_assert(!pp_image_folder_probe(path));
	ck_assert_int_eq(mkdir(path, 0755), 0);
	ck_assert(!pp_image_folder_probe(path));
	snprintf(path, sizeof(path), "%s/deep/only", dir);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/deep/only/notes.txt", dir);
	pp_test_write_file(path, "x", 1);
	snprintf(path, sizeof(path), "%s/deep", dir);
	ck_assert(!pp_image_folder_probe(path));
	snprintf(path, sizeof(path), "%s/deep/only/sub", dir);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/deep/only/sub/x.JPG", dir);
	free(write_jpeg(path, 20, 20, 9, &len));
	snprintf(path, sizeof(path), "%s/deep", dir);
	ck_assert(pp_image_folder_probe(path));
	/* Beside a file of the root's own (a dataset's), a deep JPEG is no
	 * class's (a sample, a preview); one in a class folder itself is. */
	snprintf(path, sizeof(path), "%s/deep/train-images-idx3-ubyte.gz", dir);
	pp_test_write_file(path, "x", 1);
	snprintf(path, sizeof(path), "%s/deep", dir);
	ck_assert(!pp_image_folder_probe(path));
	snprintf(path, sizeof(path), "%s/deep/only/y.jpeg", dir);
	free(write_jpeg(path, 20, 20, 10, &len));
	snprintf(path, sizeof(path), "%s/deep", dir);
	ck_assert(pp_image_folder_probe(path));
	/* 8 folders under a class at most */
	{
		char d8[700];
		size_t at;

		at = (size_t)snprintf(d8, sizeof(d8), "%s/deep8", dir);
		ck_assert_int_eq(mkdir(d8, 0755), 0);
		for (int i = 0; i < 10; i++) {
			at += (size_t)snprintf(d8 + at, sizeof(d8) - at, "/%d", i);
			ck_assert_int_eq(mkdir(d8, 0755), 0);
		}
		/* deep8/0 is the class; 1..8 are 8 folders under it */
		snprintf(path, sizeof(path), "%s/deep8/0/1/2/3/4/5/6/7/8/x.jpg", dir);
		free(write_jpeg(path, 20, 20, 11, &len));
		snprintf(path, sizeof(path), "%s/deep8", dir);
		ck_assert(pp_image_folder_probe(path));
		snprintf(path, sizeof(path), "%s/deep8/0/1/2/3/4/5/6/7/8/x.jpg", dir);
		snprintf(d8, sizeof(d8), "%s/deep8/0/1/2/3/4/5/6/7/8/9/x.jpg", dir);
		ck_assert_int_eq(rename(path, d8), 0);
		snprintf(path, sizeof(path), "%s/deep8", dir);
		ck_assert(!pp_image_folder_probe(path));
	}
	for (uint64_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", root, want[i]);
		ck_assert_str_eq(pp_image_folder_path(f, i), path);
		ck_assert_int_eq(pp_image_folder_label(f, i), i < 6 ? 0 : 1);
	}
	pp_image_folder_close(f);
	/* Another name for a folder (a link to it): its images listed under
	 * both, as torchvision lists them (ant/alias/... before ant/sub/...). */
	snprintf(path, sizeof(path), "%s/ant/alias", root);
	ck_assert_int_eq(symlink("sub", path), 0);
	ck_assert_msg(pp_image_folder_open(root, &jc, &f) == 0, "%s", pp_last_error());
	ck_assert_uint_eq(pp_image_folder_count(f), 3 * 2 + 4 + 2);
	snprintf(path, sizeof(path), "%s/ant/alias/deeper/12.jpeg", root);
	ck_assert_str_eq(pp_image_folder_path(f, 5), path);
	snprintf(path, sizeof(path), "%s/ant/sub/10.jpg", root);
	ck_assert_str_eq(pp_image_folder_path(f, 6), path);
	pp_image_folder_close(f);
	snprintf(path, sizeof(path), "%s/ant/alias", root);
	ck_assert_int_eq(unlink(path), 0);
	/* A link back up: the same images again and again, refused. */
	snprintf(path, sizeof(path), "%s/ant/sub/up", root);
	ck_assert_int_eq(symlink("..", path), 0);
	ck_assert_int_eq(pp_image_folder_open(root, &jc, &f), -ELOOP);
	ck_assert_msg(strstr(pp_last_error(), "ant/sub/up: the folder") != NULL &&
		      strstr(pp_last_error(), "link loop") != NULL, "%s", pp_last_error());
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if the JPEG bytes packed as version 2 records for the decoder
 * "jpeg" load other images than the decoder makes of the files they came
 * from (with the sample's generator), or other batches at 0 and 2
 * workers, held in memory and streamed.
 */
START_TEST(test_shards)
{
	char *dir = pp_test_tmpdir(), root[512], shard[512];
	const char *sp = shard;
	struct pp_jpeg_config jc = { .size = 24, .mode = PP_JPEG_TRAIN };
	struct pp_image_folder *f;
	struct pp_jpeg_decoder *d;
	struct pp_layout lay;
	struct pp_sample_info info = { .label_kind = PP_LABEL_CLASS, .num_classes = 3 };
	struct pp_shard_writer_config wc = { .info = &info, .records_per_chunk = 5,
					     .layout = &lay, .decoder = "jpeg" };
	struct pp_shard_writer *w;
	uint64_t h0;

	snprintf(root, sizeof(root), "%s/train", dir);
	snprintf(shard, sizeof(shard), "%s/train-000.pps", dir);
	make_folder(root, 5);
	ck_assert_int_eq(pp_image_folder_open(root, &jc, &f), 0);
	ck_assert_int_eq(pp_jpeg_decoder_create(&jc, &d), 0);
	ck_assert_int_eq(pp_jpeg_layout(&jc, false, &lay), 0);
	ck_assert_int_eq(pp_shard_writer_create(shard, &wc, &w), 0);
	for (uint64_t i = 0; i < 15; i++) {
		size_t len;
		uint8_t *j = pp_test_read_file(pp_image_folder_path(f, i), &len);
		ck_assert_int_eq(pp_shard_writer_add_record(w, j, len, pp_image_folder_label(f, i)), 0);
		free(j);
	}
	ck_assert_msg(pp_shard_writer_finish(w) == 0, "%s", pp_last_error());
	pp_shard_writer_destroy(w);

	struct pp_loader_config cfg = { .batch_size = 4, .shuffle = true, .seed = 5 };
	uint32_t seen[15];
	cfg.shard_paths = &sp;
	cfg.nshards = 1;
	cfg.decoders = pp_jpeg_decoder_get(d);
	cfg.ndecoders = 1;
	cfg.io = pp_test_io_pread() ? PP_LOADER_IO_PREAD : 0;
	for (int stream = 0; stream < 2; stream++) {
		cfg.cache = stream ? PP_LOADER_CACHE_STREAM : PP_LOADER_CACHE_MEMORY;
		cfg.workers = 0;
		memset(seen, 0, sizeof(seen));
		h0 = folder_epoch(&cfg, f, d, 1, 0, seen);
		for (int i = 0; i < 15; i++)
			ck_assert_uint_eq(seen[i], 1);
		cfg.workers = 2;
		ck_assert_uint_eq(folder_epoch(&cfg, f, d, 1, 0, NULL), h0);
	}
	pp_jpeg_decoder_destroy(d);
	pp_image_folder_close(f);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/* Runs one epoch of the folder at root; returns the error of pp_loader_next(), its message in msg. */
static int folder_error(const char *root, char *msg, size_t len)
{
	struct pp_jpeg_config jc = { .size = 16, .mode = PP_JPEG_EVAL };
	struct pp_image_folder *f;
	struct pp_loader *l;
	struct pp_batch *b;
	int ret;

	ck_assert_msg(pp_image_folder_open(root, &jc, &f) == 0, "%s", pp_last_error());
	struct pp_loader_config cfg = { .source = pp_image_folder_source(f), .batch_size = 2,
					.workers = 2 };
	ck_assert_int_eq(pp_loader_create(&cfg, &l), 0);
	ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
	while ((ret = pp_loader_next(l, &b)) == 1)
		pp_loader_release(l, b);
	snprintf(msg, len, "%s", pp_last_error());
	pp_loader_destroy(l);
	pp_image_folder_close(f);
	return ret;
}

/*
 * Fails if a zero-byte, non-JPEG, truncated, corrupt, huge-dimension or
 * CMYK file is not refused with its name (through the folder source and
 * through a shard, whose message names the shard and the record), or if
 * a truncated file decodes to anything.
 */
START_TEST(test_bad_files)
{
	char *dir = pp_test_tmpdir(), root[512], path[1024], msg[1024];
	size_t len, clen;
	uint8_t *good = make_jpeg(96, 64, 3, 1, 0, &len), *bad = malloc(len + 16);
	uint8_t *cmyk = make_jpeg(32, 32, 4, 2, 0, &clen), out[3 * 16 * 16];
	struct pp_jpeg_config jc = { .size = 16, .mode = PP_JPEG_EVAL, .max_pixels = 100000 };
	struct pp_jpeg_decoder *d;
	size_t sof = 0;
	enum { ZERO, TEXT, TRUNC_HALF, TRUNC_END, EOI_INSIDE, NO_HEIGHT, HUGE, CMYK, NCASES };
	static const char *const names[] = { "zero", "text", "half", "noend", "eoi", "noheight",
					     "huge", "cmyk" };
	static const int errs[] = { -EBADMSG, -EBADMSG, -EBADMSG, -EBADMSG, -EBADMSG, -EBADMSG,
				    -E2BIG, -ENOTSUP };

	for (size_t i = 2; i + 8 < len && sof == 0; i++)
		if (good[i] == 0xff && good[i + 1] == 0xc0)
			sof = i;
	ck_assert_msg(sof == 158, "SOF at %zu", sof);
	ck_assert_int_eq(pp_jpeg_decoder_create(&jc, &d), 0);
	ck_assert_msg(pp_jpeg_decode(d, good, len, NULL, out) == 0, "%s", pp_last_error());
	snprintf(root, sizeof(root), "%s/set", dir);
	for (int c = 0; c < NCASES; c++) {
		size_t n = len;
		memcpy(bad, good, len);
		switch (c) {
		case ZERO: n = 0; break;
		case TEXT: n = 12; memcpy(bad, "hello, world", 12); break;
		case TRUNC_HALF: n = len / 2; break;
		case TRUNC_END: n = len - 2; break;
		case EOI_INSIDE: bad[len / 2] = 0xff; bad[len / 2 + 1] = 0xd9; break;
		case NO_HEIGHT: bad[sof + 5] = 0; bad[sof + 6] = 0; break;
		case HUGE: bad[sof + 5] = bad[sof + 7] = 0xea; bad[sof + 6] = bad[sof + 8] = 0x60; break;
		case CMYK: memcpy(bad, cmyk, clen); n = clen; break;
		}
		ck_assert_msg(pp_jpeg_decode(d, bad, n, NULL, out) == errs[c], "%s: %s", names[c],
			      pp_last_error());
		/* through the folder: a good file, then the bad one, named */
		pp_test_rmtree(root);
		mkdir(root, 0755);
		snprintf(path, sizeof(path), "%s/x", root);
		mkdir(path, 0755);
		snprintf(path, sizeof(path), "%s/x/a.jpg", root);
		pp_test_write_file(path, good, len);
		snprintf(path, sizeof(path), "%s/x/%s.jpg", root, names[c]);
		pp_test_write_file(path, bad, n);
		ck_assert_int_eq(folder_error(root, msg, sizeof(msg)), errs[c]);
		ck_assert_msg(strstr(msg, path) != NULL, "%s: %s", names[c], msg);
		/* through a shard: record 1 of its only chunk */
		{
			char shard[600];
			const char *sp = shard;
			struct pp_layout lay;
			struct pp_sample_info info = { .label_kind = PP_LABEL_CLASS, .num_classes = 1 };
			struct pp_shard_writer_config wc = { .info = &info, .layout = &lay,
							     .decoder = "jpeg" };
			struct pp_shard_writer *w;
			struct pp_loader *l;
			struct pp_batch *b;
			int ret;
			snprintf(shard, sizeof(shard), "%s/bad.pps", dir);
			ck_assert_int_eq(pp_jpeg_layout(&jc, false, &lay), 0);
			ck_assert_int_eq(pp_shard_writer_create(shard, &wc, &w), 0);
			ck_assert_int_eq(pp_shard_writer_add_record(w, good, len, 0), 0);
			ck_assert_int_eq(pp_shard_writer_add_record(w, bad, n, 0), 0);
			ck_assert_int_eq(pp_shard_writer_finish(w), 0);
			pp_shard_writer_destroy(w);
			struct pp_loader_config cfg = { .shard_paths = &sp, .nshards = 1,
							.batch_size = 2, .workers = 1,
							.decoders = pp_jpeg_decoder_get(d),
							.ndecoders = 1,
							.io = pp_test_io_pread() ? PP_LOADER_IO_PREAD
										 : 0 };
			ck_assert_msg(pp_loader_create(&cfg, &l) == 0, "%s", pp_last_error());
			ck_assert_int_eq(pp_loader_begin_epoch(l, 0), 0);
			while ((ret = pp_loader_next(l, &b)) == 1)
				pp_loader_release(l, b);
			ck_assert_int_eq(ret, errs[c]);
			ck_assert_msg(strstr(pp_last_error(), shard) != NULL &&
				      strstr(pp_last_error(), "record 1") != NULL, "%s: %s", names[c],
				      pp_last_error());
			pp_loader_destroy(l);
		}
	}
	/* an empty class and a missing root, refused by name */
	snprintf(path, sizeof(path), "%s/y", root);
	mkdir(path, 0755);
	ck_assert_int_eq(pp_image_folder_open(root, &jc, &(struct pp_image_folder *){ NULL }),
			 -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "\"y\""));
	snprintf(path, sizeof(path), "%s/none", dir);
	ck_assert_int_eq(pp_image_folder_open(path, &jc, &(struct pp_image_folder *){ NULL }),
			 -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), path));
	jc.size = 4;
	ck_assert_int_eq(pp_jpeg_decoder_create(&jc, &(struct pp_jpeg_decoder *){ NULL }), -EINVAL);
	pp_jpeg_decoder_destroy(d);
	free(good);
	free(bad);
	free(cmyk);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * The resize's weights are the real ones to the nearest 1/256, rounded
 * once: a step from 0 to 255 between two pixels, stretched over 199
 * columns (torchvision's coordinates: (o + 0.5) x 2 / 199 - 0.5, clamped
 * to the two pixels), is within one value of 255 x that coordinate's
 * fraction everywhere (a weight off by under 1/512 moves it by under 0.5,
 * the rounding by 0.5 more), flipped or not.  Fails if a weight is
 * truncated (off by up to 1/256), or the columns' places or order are.
 */
START_TEST(test_resize_weights)
{
	const uint32_t s = 199;
	const uint8_t pix[2] = { 0, 255 };
	uint8_t *out = malloc((size_t)s * s);
	struct pp_jpeg_resize r;

	ck_assert_ptr_nonnull(out);
	ck_assert_int_eq(pp_jpeg_resize_init(&r, s, 1), 0);
	for (int flip = 0; flip < 2; flip++) {
		struct pp_jpeg_crop c = { .x = 0, .y = 0, .w = 2, .h = 1, .flip = flip, .scale8 = 8 };
		ck_assert_int_eq(pp_jpeg_resize_plan(&r, 2, 1, 2, 1, &c), 0);
		pp_jpeg_resize_run(&r, pix, 2, 0, 0, out);
		for (uint32_t oy = 0; oy < s; oy++) {
			for (uint32_t ox = 0; ox < s; ox++) {
				uint32_t o = flip ? s - 1 - ox : ox;
				double sc = (o + 0.5) * 2.0 / s - 0.5;
				double want = 255.0 * (sc < 0 ? 0 : sc > 1 ? 1 : sc);
				int got = out[(size_t)oy * s + ox];
				ck_assert_msg(fabs(got - want) < 1.0, "flip %d (%u, %u): %d, want %.3f",
					      flip, ox, oy, got, want);
			}
		}
	}
	pp_jpeg_resize_free(&r);
	free(out);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("images");
	TCase *tc = tcase_create("jpeg");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_eval_equals_reference);
	tcase_add_test(tc, test_reference_equals_pillow);
	tcase_add_test(tc, test_crop_and_flip);
	tcase_add_test(tc, test_resize_bounded);
	tcase_add_test(tc, test_resize_weights);
	tcase_add_test(tc, test_region_equals_whole);
	tcase_add_test(tc, test_train_plan);
	tcase_add_test(tc, test_train_plan_draws);
	suite_add_tcase(s, tc);
	tc = tcase_create("loader");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_folder_loader);
	tcase_add_test(tc, test_folder_same_classes);
	tcase_add_test(tc, test_folder_nested);
	tcase_add_test(tc, test_folder_non_utf8_order);
	tcase_add_test(tc, test_shards);
	tcase_add_test(tc, test_bad_files);
	suite_add_tcase(s, tc);
	return s;
}
