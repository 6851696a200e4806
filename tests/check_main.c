/*
 * tests/check_main.c: the one runner of the Check suites.  Each test
 * program links this file with one module's suite, which it names
 * pp_test_suite(); automake runs the programs and reads their exit code
 * (0 pass, 1 fail, 77 skip).
 *
 * Suites that need the real Fashion-MNIST find it in PP_FASHION_MNIST_DIR,
 * else in /usr/share/datasets/fashion-mnist.
 */
#include "config.h"

#include <check.h>
#include <stdlib.h>

#include "tests/testutil.h"

int main(void)
{
	SRunner *sr = srunner_create(pp_test_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
