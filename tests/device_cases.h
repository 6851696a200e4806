/*
 * tests/device_cases.h: the device tests that every backend with its own
 * queue passes (sim and cuda), shared by tests/test_device.c and
 * tests/test_device_cuda.c.
 */
#ifndef PP_TESTS_DEVICE_CASES_H
#define PP_TESTS_DEVICE_CASES_H

#include <check.h>

/*
 * Adds to 's' a test case named 'tcase_name' that runs each shared test
 * once on every device of names[0..n-1] (which must outlive the suite).
 */
void pp_device_cases_add(Suite *s, const char *tcase_name, const char *const *names, int n);

#endif
