/*
 * tests/test_cublas.c: cuBLAS is opened at run time (nn/cuda/ops.cu), not
 * linked: a process that links the library does not map it until a model
 * on a GPU asks for it, and a library that cannot be loaded, or that is not
 * cuBLAS, gives a message naming it.  Built only with CUDA; runs without a
 * GPU (cuBLAS then loads and refuses to create a handle).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/common_impl.h"
#include "nn/cuda/kernels.h"
#include "tests/testutil.h"

/* Whether /proc/self/maps lists a file whose name contains 'name'. */
static bool mapped(const char *name)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	ck_assert_ptr_nonnull(f);
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, name) != NULL;
	fclose(f);
	return found;
}

/* Fails if linking the library maps cuBLAS (its 150 MB of pages) into the process. */
START_TEST(test_not_linked)
{
	ck_assert(!mapped("libcublas"));
}
END_TEST

/*
 * Fails if creating a handle does not load cuBLAS, by its soname or from
 * the toolkit's directory (a wrong PP_CUBLAS_SONAME or PP_CUBLAS_PATH gives
 * -ENOENT), or if with no GPU the refusal is not an error naming cublasCreate.
 */
START_TEST(test_loads_on_demand)
{
	void *h = NULL;
	int ret = pp_cuda_blas_create(NULL, &h);

	if (ret == 0) {
		ck_assert_ptr_nonnull(h);
		ck_assert(mapped("libcublas"));
		pp_cuda_blas_destroy(h);
		return;
	}
	ck_assert_msg(ret == -EIO, "pp_cuda_blas_create: %d: %s", ret, pp_last_error());
	ck_assert_msg(strstr(pp_last_error(), "cublasCreate") != NULL, "%s", pp_last_error());
	ck_assert_ptr_null(h);
}
END_TEST

/* Fails if a library that cannot be loaded is not named in the error, or leaves a handle. */
START_TEST(test_missing_library)
{
	void *h = NULL;

	ck_assert_int_eq(pp_cuda_blas_open("libpinpipe-no-such-blas.so.1", NULL, &h), -ENOENT);
	ck_assert_ptr_null(h);
	ck_assert_msg(strstr(pp_last_error(), "cannot load libpinpipe-no-such-blas.so.1") != NULL,
		      "%s", pp_last_error());
}
END_TEST

/* Fails if a library without cuBLAS's functions is taken for cuBLAS. */
START_TEST(test_not_cublas)
{
	void *h = NULL;

	ck_assert_int_eq(pp_cuda_blas_open("libz.so.1", NULL, &h), -ENOENT);
	ck_assert_ptr_null(h);
	ck_assert_msg(strstr(pp_last_error(), "libz.so.1 has no symbol cublasCreate_v2") != NULL,
		      "%s", pp_last_error());
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("cublas");
	TCase *tc = tcase_create("load");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_not_linked);
	tcase_add_test(tc, test_loads_on_demand);
	tcase_add_test(tc, test_missing_library);
	tcase_add_test(tc, test_not_cublas);
	suite_add_tcase(s, tc);
	return s;
}
