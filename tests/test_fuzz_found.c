/*
 * tests/test_fuzz_found.c: regression tests for the bugs found by fuzzing
 * or while writing the fuzz targets (each input is also in a seed corpus,
 * tests/corpus/, which `make check` replays); each test names its target.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "pinpipe/image.h"
#include "pinpipe/nn.h"
#include "tests/testutil.h"

/* Writes a checkpoint header (SGD, no momentum state beyond one vector) with 'spec' and n parameters of 0. */
static void write_checkpoint(const char *path, const char *spec, uint32_t c, uint32_t h,
			     uint32_t w, uint32_t classes, uint64_t n)
{
	size_t slen = strlen(spec), len = 84 + slen + 8 * n + 4;
	uint8_t *f = calloc(1, len);

	ck_assert_ptr_nonnull(f);
	memcpy(f, "PPNNCKPT", 8);
	pp_put_le32(f + 8, 1);
	pp_put_le32(f + 12, (uint32_t)slen);
	pp_put_le32(f + 16, c);
	pp_put_le32(f + 20, h);
	pp_put_le32(f + 24, w);
	pp_put_le32(f + 28, classes);
	pp_put_le32(f + 32, (uint32_t)n);
	pp_put_le32(f + 48, PP_OPTIM_SGD);
	pp_put_le32(f + 52, 0x3dcccccd); /* lr 0.1 */
	memcpy(f + 84, spec, slen);
	pp_put_le32(f + len - 4, pp_crc32(0, f, len - 4));
	pp_test_write_file(path, f, len);
	free(f);
}

/*
 * fuzz_nn (found reading the code it reaches, before a run did): a
 * checkpoint of 140 bytes whose valid header and CRC describe a spec of
 * 2^30 weights (and 5 parameters) made pp_model_load() allocate and
 * initialise 16 GB before it compared the counts.  Fails (takes 15 s or
 * more, past the timeout, or runs out of memory) if the parameter count is
 * not checked against the spec first, or if the load does not fail with
 * -EBADMSG naming the offset of the count.
 */
START_TEST(test_checkpoint_huge_spec)
{
	char *dir = pp_test_tmpdir(), path[4096];
	struct pp_model_config cfg;
	struct pp_model *model = NULL;

	snprintf(path, sizeof(path), "%s/huge.ckpt", dir);
	write_checkpoint(path, "fc:32768,fc:32768,fc:3", 1, 1, 1, 3, 5);
	pp_model_config_init(&cfg);
	ck_assert_int_eq(pp_model_load(path, NULL, &cfg, &model), -EBADMSG);
	ck_assert_ptr_null(model);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "offset 32: 5 parameters"));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "has 1073938435"));
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * fuzz_nn: the same check must still let a matching count through to the
 * model's own checks: a small spec with the right count loads.  Fails if
 * the early check rejects a valid checkpoint.
 */
START_TEST(test_checkpoint_matching_count_loads)
{
	char *dir = pp_test_tmpdir(), path[4096];
	struct pp_model_config cfg;
	struct pp_model *model = NULL;

	snprintf(path, sizeof(path), "%s/small.ckpt", dir);
	write_checkpoint(path, "fc:3", 1, 2, 2, 3, 15);
	pp_model_config_init(&cfg);
	ck_assert_int_eq(pp_model_load(path, NULL, &cfg, &model), 0);
	ck_assert_uint_eq(pp_model_param_count(model), 15);
	pp_model_destroy(model);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * fuzz_jpeg, tests/corpus/fuzz_jpeg/tables-only-crash-3f338d26: a JPEG cut
 * inside its quantisation table reads as tables alone (libjpeg-turbo
 * supplies the end), and tjDecompressHeader3() then succeeds without
 * writing the dimensions: the decoder went on with uninitialised ones.
 * Fails unless it is refused as having no image.
 */
START_TEST(test_jpeg_tables_only)
{
	static const uint8_t jpeg[] = { 0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0,
					1, 1, 0, 0, 1, 0, 1, 0, 0, 0xff, 0xdb, 0x00, 0x43, 0x00,
					2, 1, 1, 1, 1, 1, 2, 1, 1, 1, 2, 2, 2, 2, 2, 4, 3, 2, 2 };
	struct pp_jpeg_config jc = { .size = 8, .mode = PP_JPEG_EVAL };
	struct pp_jpeg_decoder *d;
	uint8_t out[3 * 8 * 8];
	int ret = pp_jpeg_decoder_create(&jc, &d);

	if (ret == -ENOTSUP) {
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "libturbojpeg0-dev"));
		return; /* built without libjpeg-turbo: nothing decodes */
	}
	ck_assert_int_eq(ret, 0);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(pp_jpeg_decode(d, jpeg, sizeof(jpeg), NULL, out), -EBADMSG);
		ck_assert_msg(strstr(pp_last_error(), "no image in its 44 bytes: cut short") != NULL,
			      "%s", pp_last_error());
	}
	pp_jpeg_decoder_destroy(d);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("fuzz_found");
	TCase *tc = tcase_create("nn");

	tcase_add_test(tc, test_checkpoint_huge_spec);
	tcase_add_test(tc, test_checkpoint_matching_count_loads);
	tcase_add_test(tc, test_jpeg_tables_only);
	suite_add_tcase(s, tc);
	return s;
}
