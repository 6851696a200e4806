/*
 * tests/test_grid.c: pinpipe-train's image grid of a batch (trainer/grid.c).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"
#include "trainer/grid.h"

static struct pp_sample_info shape(enum pp_dtype dtype, uint32_t c, uint32_t h, uint32_t w)
{
	struct pp_sample_info info;

	memset(&info, 0, sizeof(info));
	info.dtype = dtype;
	info.ndim = 3;
	info.shape[0] = c;
	info.shape[1] = h;
	info.shape[2] = w;
	info.sample_bytes = (size_t)c * h * w * (dtype == PP_DTYPE_F32 ? 4 : 1);
	return info;
}

/*
 * Fails if u8 gray samples are not placed 8 a row with 2 black pixels
 * around each, in order, with their own values, or if the grid's size is
 * not 2 + rows x (height + 2) by 2 + 8 x (width + 2), or if more than 64
 * samples are shown.
 */
START_TEST(test_gray_layout)
{
	struct pp_sample_info info = shape(PP_DTYPE_U8, 1, 3, 4);
	uint8_t samples[70 * 12];
	struct tr_grid g;

	for (size_t i = 0; i < sizeof(samples); i++)
		samples[i] = (uint8_t)(1 + i % 251);
	ck_assert_int_eq(tr_grid_make(samples, 10, &info, &g), 0);
	ck_assert_uint_eq(g.channels, 1);
	ck_assert_uint_eq(g.height, 2 + 2 * 5);
	ck_assert_uint_eq(g.width, 2 + 8 * 6);
	for (uint32_t y = 0; y < g.height; y++) {
		for (uint32_t x = 0; x < g.width; x++) {
			uint32_t ty = y < 2 ? 99 : (y - 2) % 5, tx = x < 2 ? 99 : (x - 2) % 6;
			size_t j = (y - 2) / 5 * 8 + (x - 2) / 6;
			uint8_t want = ty < 3 && tx < 4 && j < 10 ? samples[j * 12 + ty * 4 + tx] : 0;

			ck_assert_msg(g.pixels[y * g.width + x] == want, "(%u, %u): %u, expected %u", y,
				      x, g.pixels[y * g.width + x], want);
		}
	}
	free(g.pixels);
	/* 70 samples: the first 64, 8 rows of 8. */
	ck_assert_int_eq(tr_grid_make(samples, 70, &info, &g), 0);
	ck_assert_uint_eq(g.height, 2 + 8 * 5);
	ck_assert_uint_eq(g.pixels[(2 + 7 * 5) * g.width + 2 + 7 * 6], samples[63 * 12]);
	free(g.pixels);
	/* Fewer than a row: as wide as the samples. */
	ck_assert_int_eq(tr_grid_make(samples, 3, &info, &g), 0);
	ck_assert_uint_eq(g.width, 2 + 3 * 6);
	free(g.pixels);
}
END_TEST

/*
 * Fails if three planar channels are not interleaved as RGB, f32 values are
 * not scaled from their min to their max over 0..255 with non-finite ones
 * black, or if no sample or a grid too large is accepted.
 */
START_TEST(test_rgb_f32_and_errors)
{
	struct pp_sample_info info = shape(PP_DTYPE_F32, 3, 1, 2);
	float samples[2 * 6] = { -1, 1, 0, 0.5f, NAN, 3, /* sample 0: R, G, B planes */
				 3, -1, INFINITY, 1, 0, 0 };
	static uint8_t wide[6 * 3000];
	struct tr_grid g;
	const uint8_t *p;

	ck_assert_int_eq(tr_grid_make(samples, 2, &info, &g), 0);
	ck_assert_uint_eq(g.channels, 3);
	ck_assert_uint_eq(g.height, 2 + 3);
	ck_assert_uint_eq(g.width, 2 + 2 * 4);
	p = g.pixels + (2 * g.width + 2) * 3; /* sample 0, pixel (0, 0): R -1, G 0, B NaN */
	ck_assert(p[0] == 0 && p[1] == 64 && p[2] == 0);
	p += 3; /* pixel (0, 1): R 1, G 0.5, B 3 */
	ck_assert(p[0] == 128 && p[1] == 96 && p[2] == 255);
	p = g.pixels + (2 * g.width + 6) * 3; /* sample 1, pixel (0, 0): 3, inf, 0 */
	ck_assert(p[0] == 255 && p[1] == 0 && p[2] == 64);
	ck_assert(g.pixels[0] == 0 && g.pixels[(2 * g.width + 4) * 3] == 0); /* padding */
	free(g.pixels);

	ck_assert_int_eq(tr_grid_make(samples, 0, &info, &g), -EINVAL);
	info = shape(PP_DTYPE_U8, 1, 1, 3000);
	ck_assert_int_eq(tr_grid_make(wide, 5, &info, &g), 0); /* 2 + 5 x 3002 = 15012 wide */
	free(g.pixels);
	ck_assert_int_eq(tr_grid_make(wide, 6, &info, &g), -EINVAL); /* 18014 > 16384 */
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("grid");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_gray_layout);
	tcase_add_test(tc, test_rgb_f32_and_errors);
	suite_add_tcase(s, tc);
	return s;
}
