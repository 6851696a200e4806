/*
 * images/resize.c: the bilinear resize of a crop of a decoded image into
 * CHW uint8 (torchvision's coordinates: pixel centres at +0.5, the edge
 * pixel repeated), in 8-bit fixed point.  Down first, then across:
 *
 *   - down (the V pass): each output row is the weighted sum of two source
 *     rows over the crop's columns only, contiguous bytes into 16-bit
 *     values (x 256, exact), in the compiler's vectors on every processor;
 *   - across (the H pass): each output pixel is the weighted sum of two
 *     pixels of that row (x 256 again, exact in 32 bits), rounded once,
 *     written into the three planes, the flip folded into the order of the
 *     column table.  Portable C, and AVX2 for RGB: two pixels a 128-bit
 *     lane, shuffled into pairs and summed by pmaddwd, eight pixels at a
 *     time transposed into the planes.
 *
 * Both versions give the same bits (one rounding of an exact sum), which
 * are those of the earlier across-then-down order too.  The row is kept
 * as value - 32768 in int16, so that pmaddwd's signed products hold it.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "common/fault.h"
#include "images/jpeg_impl.h"

#ifdef PP_TARGET_AVX2
#include <immintrin.h>
#endif

/* int16 values the H pass may read past the row's end (a 128-bit load at its last pixel) */
#define VROW_SLACK 16

/* The bias of the row's values (value - 32768) and of the rounding, in the H pass's sums. */
#define HSUM_BIAS (32768 * 256 + 32768)

int pp_jpeg_resize_init(struct pp_jpeg_resize *r, uint32_t size, uint32_t channels)
{
	memset(r, 0, sizeof(*r));
	r->size = size;
	r->channels = channels;
	r->isa = pp_isa_best();
	r->xa = pp_malloc(size * sizeof(*r->xa));
	r->fx = pp_malloc(size * sizeof(*r->fx));
	r->xw = pp_malloc((size_t)size * 4 * sizeof(*r->xw));
	r->ya = pp_malloc(size * sizeof(*r->ya));
	r->fy = pp_malloc(size * sizeof(*r->fy));
	if (r->xa == NULL || r->fx == NULL || r->xw == NULL || r->ya == NULL || r->fy == NULL) {
		pp_jpeg_resize_free(r);
		return pp_error(-ENOMEM, "JPEG: no memory for the resize's tables");
	}
	return 0;
}

void pp_jpeg_resize_free(struct pp_jpeg_resize *r)
{
	free(r->xa);
	free(r->fx);
	free(r->xw);
	free(r->ya);
	free(r->fy);
	free(r->vrow);
	memset(r, 0, sizeof(*r));
}

/*
 * Where output coordinate o falls in a scaled image of n pixels: the left
 * (or upper) one and the weight of the next, of 256 (0 at an edge).
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

typedef uint8_t u8x8 __attribute__((vector_size(8)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));

/*
 * The V pass: v[j] = r0[j] * w0 + r1[j] * w1 - 32768 (w0 + w1 = 256) for
 * j < n, eight at a time in the compiler's vectors (SSE2's pmullw at the
 * baseline).
 */
static void vpass(const uint8_t *r0, const uint8_t *r1, uint32_t w0, uint32_t w1, size_t n,
		  int16_t *v)
{
	const u16x8 a = { (uint16_t)w0, (uint16_t)w0, (uint16_t)w0, (uint16_t)w0,
			  (uint16_t)w0, (uint16_t)w0, (uint16_t)w0, (uint16_t)w0 };
	const u16x8 b = { (uint16_t)w1, (uint16_t)w1, (uint16_t)w1, (uint16_t)w1,
			  (uint16_t)w1, (uint16_t)w1, (uint16_t)w1, (uint16_t)w1 };
	size_t j = 0;

	for (; j + 8 <= n; j += 8) {
		u8x8 p0, p1;
		u16x8 s;
		memcpy(&p0, r0 + j, 8);
		memcpy(&p1, r1 + j, 8);
		s = __builtin_convertvector(p0, u16x8) * a + __builtin_convertvector(p1, u16x8) * b;
		s ^= 0x8000;
		memcpy(v + j, &s, sizeof(s));
	}
	for (; j < n; j++)
		v[j] = (int16_t)((r0[j] * w0 + r1[j] * w1) ^ 0x8000);
}

/* The H pass, portable: out[k][ox] for each channel k, from the row v. */
static void hpass_portable(const struct pp_jpeg_resize *r, const int16_t *v, uint8_t *out,
			   size_t plane)
{
	const uint32_t s = r->size, ch = r->channels;

	for (uint32_t ox = 0; ox < s; ox++) {
		const int16_t *p = v + r->xa[ox];
		const int32_t w1 = r->fx[ox], w0 = 256 - w1;
		for (uint32_t k = 0; k < ch; k++)
			out[k * plane + ox] = (uint8_t)((p[k] * w0 + p[k + ch] * w1 + HSUM_BIAS) >> 16);
	}
}

#ifdef PP_TARGET_AVX2
/* The H pass for RGB, AVX2: eight output pixels a round, the rest portable. */
PP_TARGET_AVX2 static void hpass_rgb_avx2(const struct pp_jpeg_resize *r, const int16_t *v,
					  uint8_t *out, size_t plane)
{
	const uint32_t s = r->size;
	/* [R0 G0 B0 R1 G1 B1 . .] -> [R0 R1 G0 G1 B0 B1 0 0], each lane */
	const __m256i pairs = _mm256_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1,
					       0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
	/* four pixels' RGBx bytes -> R R R R G G G G B B B B x x x x, each lane */
	const __m256i planar = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
						0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
	const __m256i bias = _mm256_set1_epi32(HSUM_BIAS);
	uint32_t ox = 0;

	for (; ox + 8 <= s; ox += 8) {
		__m256i q[4];
		for (int i = 0; i < 4; i++) {
			/* pixels ox + 2i (low lane) and ox + 2i + 1 (high lane) */
			const uint32_t e = ox + 2 * (uint32_t)i;
			__m256i x = _mm256_castsi128_si256(
				_mm_loadu_si128((const __m128i *)(const void *)(v + r->xa[e])));
			x = _mm256_inserti128_si256(
				x, _mm_loadu_si128((const __m128i *)(const void *)(v + r->xa[e + 1])), 1);
			x = _mm256_shuffle_epi8(x, pairs);
			x = _mm256_madd_epi16(x, _mm256_loadu_si256((const __m256i *)(const void *)
								    (r->xw + (size_t)e * 4)));
			q[i] = _mm256_srai_epi32(_mm256_add_epi32(x, bias), 16);
		}
		/* lanes: low = pixels 0 2 4 6, high = 1 3 5 7, RGBx each */
		__m256i b = _mm256_packus_epi16(_mm256_packs_epi32(q[0], q[1]),
						_mm256_packs_epi32(q[2], q[3]));
		b = _mm256_shuffle_epi8(b, planar);
		const __m128i lo = _mm256_castsi256_si128(b), hi = _mm256_extracti128_si256(b, 1);
		const __m128i rg = _mm_unpacklo_epi8(lo, hi), bx = _mm_unpackhi_epi8(lo, hi);
		_mm_storel_epi64((__m128i *)(void *)(out + ox), rg);
		_mm_storel_epi64((__m128i *)(void *)(out + plane + ox), _mm_srli_si128(rg, 8));
		_mm_storel_epi64((__m128i *)(void *)(out + 2 * plane + ox), bx);
	}
	for (; ox < s; ox++) {
		const int16_t *p = v + r->xa[ox];
		const int32_t w1 = r->fx[ox], w0 = 256 - w1;
		for (uint32_t k = 0; k < 3; k++)
			out[k * plane + ox] = (uint8_t)((p[k] * w0 + p[k + 3] * w1 + HSUM_BIAS) >> 16);
	}
}
#endif

int pp_jpeg_resize_plan(struct pp_jpeg_resize *r, uint32_t sw, uint32_t sh, uint32_t width,
			uint32_t height, const struct pp_jpeg_crop *c)
{
	const uint32_t s = r->size, ch = r->channels;
	uint32_t lo = UINT32_MAX, hi = 0;
	size_t n;

	/* the columns, in the output's order (mirrored when flipped), and the crop's span */
	for (uint32_t ox = 0; ox < s; ox++) {
		const uint32_t o = c->flip ? s - 1 - ox : ox;
		uint32_t x0;
		source_pixel(c->x, c->w / s, o, (double)sw / width, sw, &x0, &r->fx[ox]);
		r->xa[ox] = x0;
		lo = x0 < lo ? x0 : lo;
		hi = x0 + 2 > hi ? x0 + 2 : hi;
	}
	hi = hi < sw ? hi : sw;
	n = (size_t)(hi - lo) * ch;
	if (n + VROW_SLACK > r->vcap) {
		int16_t *nv = pp_malloc((n + VROW_SLACK) * sizeof(*nv));
		if (nv == NULL)
			return pp_error(-ENOMEM, "JPEG: no memory for a row of %u pixels", hi - lo);
		free(r->vrow);
		r->vrow = nv;
		r->vcap = n + VROW_SLACK;
	}
	/* read, not used (a weight of 0 or a lane dropped), but defined */
	memset(r->vrow + n, 0, VROW_SLACK * sizeof(*r->vrow));
	for (uint32_t ox = 0; ox < s; ox++) {
		const int32_t w1 = r->fx[ox], pair = (256 - w1) | w1 << 16;
		r->xa[ox] = (r->xa[ox] - lo) * ch;
		r->xw[ox * 4] = r->xw[ox * 4 + 1] = r->xw[ox * 4 + 2] = pair;
		r->xw[ox * 4 + 3] = 0;
	}
	r->x0 = lo;
	r->x1 = hi;
	r->y0 = UINT32_MAX;
	r->y1 = 0;
	for (uint32_t oy = 0; oy < s; oy++) {
		source_pixel(c->y, c->h / s, oy, (double)sh / height, sh, &r->ya[oy], &r->fy[oy]);
		r->y0 = r->ya[oy] < r->y0 ? r->ya[oy] : r->y0;
		r->y1 = r->ya[oy] + 1 + (r->fy[oy] > 0) > r->y1 ? r->ya[oy] + 1 + (r->fy[oy] > 0) : r->y1;
	}
	return 0;
}

void pp_jpeg_resize_run(const struct pp_jpeg_resize *r, const uint8_t *pix, size_t stride,
			uint32_t px, uint32_t py, uint8_t *out)
{
	const uint32_t s = r->size, ch = r->channels;
	const size_t plane = (size_t)s * s, n = (size_t)(r->x1 - r->x0) * ch;

	for (uint32_t oy = 0; oy < s; oy++) {
		const uint32_t fy = r->fy[oy];
		const uint8_t *r0 = pix + (size_t)(r->ya[oy] - py) * stride + (size_t)(r->x0 - px) * ch;
		const uint8_t *r1 = fy > 0 ? r0 + stride : r0;
		vpass(r0, r1, 256u - fy, fy, n, r->vrow);
#ifdef PP_TARGET_AVX2
		if (ch == 3 && r->isa >= PP_ISA_AVX2) {
			hpass_rgb_avx2(r, r->vrow, out + (size_t)oy * s, plane);
			continue;
		}
#endif
		hpass_portable(r, r->vrow, out + (size_t)oy * s, plane);
	}
}
