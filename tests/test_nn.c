/*
 * tests/test_nn.c: tensors, layers, losses, optimizers, specs and checkpoints on the CPU.
 */
#include "config.h"

#include <check.h>

#include "nn/nn_internal.h"
#include "tests/testutil.h"

START_TEST(test_placeholder)
{
	struct pp_model_config cfg;
	struct pp_model *m;

	pp_model_config_init(&cfg);
	ck_assert_int_eq(pp_model_create("cnn", NULL, &cfg, &m), 0);
	pp_model_destroy(m);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("nn");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_placeholder);
	suite_add_tcase(s, tc);
	return s;
}
