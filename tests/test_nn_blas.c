/*
 * tests/test_nn_blas.c: pp_blas_get_info(), which kernels OpenBLAS runs
 * and whether the processor has better: the judgement of every kind of
 * core against every processor level, the query against OpenBLAS's own
 * in this process, and in a child process started with OPENBLAS_CORETYPE
 * (read by OpenBLAS when it is loaded): this program run again, which
 * writes what it finds to the file named by PP_TEST_BLAS_OUT and exits.
 */
#include "config.h"

#include <cblas.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cpu.h"
#include "nn/blas.h"
#include "pinpipe/nn.h"
#include "tests/testutil.h"

extern char **environ;

/*
 * Fails if a core without AVX2 kernels on a processor with AVX2 or AVX-512
 * is not told to take Haswell's or SkylakeX's, whether chosen or not; if
 * AVX2 kernels on an AVX-512 processor are not told to take SkylakeX's
 * when OpenBLAS chose them, or are when the user did; if a right core, a
 * processor without AVX2, or a name the table does not know gets advice.
 */
START_TEST(test_better_core)
{
	ck_assert_str_eq(pp_blas_better_core("Prescott", false, PP_ISA_AVX512), "SkylakeX");
	ck_assert_str_eq(pp_blas_better_core("Prescott", true, PP_ISA_AVX512), "SkylakeX");
	ck_assert_str_eq(pp_blas_better_core("Prescott", true, PP_ISA_AVX2), "Haswell");
	ck_assert_str_eq(pp_blas_better_core("Sandybridge", false, PP_ISA_AVX2), "Haswell");
	ck_assert_str_eq(pp_blas_better_core("nehalem", false, PP_ISA_AVX2), "Haswell");
	ck_assert_str_eq(pp_blas_better_core("Haswell", false, PP_ISA_AVX512), "SkylakeX");
	ck_assert_str_eq(pp_blas_better_core("Zen", false, PP_ISA_AVX512), "SkylakeX");
	ck_assert_ptr_null(pp_blas_better_core("Haswell", true, PP_ISA_AVX512));
	ck_assert_ptr_null(pp_blas_better_core("Haswell", false, PP_ISA_AVX2));
	ck_assert_ptr_null(pp_blas_better_core("Zen", true, PP_ISA_AVX2));
	ck_assert_ptr_null(pp_blas_better_core("SkylakeX", false, PP_ISA_AVX512));
	ck_assert_ptr_null(pp_blas_better_core("Cooperlake", false, PP_ISA_AVX512));
	ck_assert_ptr_null(pp_blas_better_core("Prescott", false, PP_ISA_BASE));
	ck_assert_ptr_null(pp_blas_better_core("NEOVERSEN1", false, PP_ISA_AVX2));
	ck_assert_ptr_null(pp_blas_better_core(NULL, false, PP_ISA_AVX512));
}
END_TEST

/* Checks that info agrees with itself: a fix exactly when the judgement gives one, named in the warning. */
static void check_consistent(const struct pp_blas_info *info, bool chosen)
{
	const char *better = pp_blas_better_core(info->core, chosen, pp_isa_best());

	ck_assert_str_eq(info->cpu_isa, pp_isa_best() == PP_ISA_AVX512 ? "AVX-512" :
					pp_isa_best() == PP_ISA_AVX2 ? "AVX2" : "");
	if (better == NULL) {
		ck_assert_str_eq(info->fix, "");
		ck_assert_str_eq(info->warning, "");
		return;
	}
	ck_assert_str_eq(info->fix + strlen("OPENBLAS_CORETYPE="), better);
	ck_assert_ptr_nonnull(strstr(info->warning, info->fix));
	ck_assert_ptr_nonnull(strstr(info->warning, info->core));
}

/* Fails if the query does not report the core OpenBLAS itself reports in this process. */
START_TEST(test_info_here)
{
	struct pp_blas_info info;
	const char *env = getenv("OPENBLAS_CORETYPE");

	pp_blas_get_info(&info);
	ck_assert_str_eq(info.library, "OpenBLAS");
	ck_assert_str_eq(info.core, openblas_get_corename());
	check_consistent(&info, env != NULL && env[0] != '\0');
}
END_TEST

/* Runs this program with OPENBLAS_CORETYPE=core (LD_PRELOAD dropped); returns what it found. */
static struct pp_blas_info child_info(const char *core)
{
	char *dir = pp_test_tmpdir(), out[4096], coretype[64], outvar[4200];
	char *argv[] = { "test_nn_blas", NULL };
	char *envp[256];
	struct pp_blas_info info;
	size_t n = 0, len;
	char *text, *line;
	int status;
	pid_t pid;

	snprintf(out, sizeof(out), "%s/info", dir);
	snprintf(coretype, sizeof(coretype), "OPENBLAS_CORETYPE=%s", core);
	snprintf(outvar, sizeof(outvar), "PP_TEST_BLAS_OUT=%s", out);
	/* valgrind's preload without valgrind would break the child */
	for (char **e = environ; *e && n < 250; e++)
		if (strncmp(*e, "OPENBLAS_CORETYPE=", 18) != 0 && strncmp(*e, "LD_PRELOAD=", 11) != 0)
			envp[n++] = *e;
	envp[n++] = coretype;
	envp[n++] = outvar;
	envp[n] = NULL;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execve("/proc/self/exe", argv, envp);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child with %s: status %d",
		      coretype, status);
	text = pp_test_read_file(out, &len);
	/* the file as a string: pp_test_read_file() does not end it */
	text = realloc(text, len + 1);
	ck_assert_ptr_nonnull(text);
	text[len] = '\0';
	memset(&info, 0, sizeof(info));
	for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "core=", 5) == 0)
			snprintf(info.core, sizeof(info.core), "%s", line + 5);
		else if (strncmp(line, "fix=", 4) == 0)
			snprintf(info.fix, sizeof(info.fix), "%s", line + 4);
		else if (strncmp(line, "warning=", 8) == 0)
			snprintf(info.warning, sizeof(info.warning), "%s", line + 8);
		else if (strncmp(line, "cpu_isa=", 8) == 0)
			snprintf(info.cpu_isa, sizeof(info.cpu_isa), "%s", line + 8);
	}
	free(text);
	pp_test_rmtree(dir);
	free(dir);
	return info;
}

/*
 * Fails if a process started with OPENBLAS_CORETYPE=Prescott on a
 * processor with AVX2 or AVX-512 does not report the Prescott core with
 * the fix for its level (SkylakeX or Haswell) and a warning, or if one
 * started with Haswell (the user's choice of AVX2 kernels) warns; on a
 * processor without AVX2, if either warns.  An OpenBLAS that does not
 * read the variable (built for one processor) must still agree with
 * itself.
 */
START_TEST(test_info_child)
{
	const enum pp_isa isa = pp_isa_best();
	const char *preload = getenv("LD_PRELOAD");
	struct pp_blas_info info;

	/* under valgrind, /proc/self/exe is valgrind's tool, not this program */
	if (preload != NULL && strstr(preload, "vgpreload") != NULL) {
		fprintf(stderr, "test_info_child: not checked under valgrind\n");
		return;
	}
	info = child_info("Prescott");
	if (strcmp(info.core, "Prescott") != 0) {
		fprintf(stderr, "test_info_child: OpenBLAS ignores OPENBLAS_CORETYPE (core %s): "
			"its choice is only checked for consistency\n", info.core);
		check_consistent(&info, true);
		return;
	}
	ck_assert_str_eq(info.cpu_isa, isa == PP_ISA_AVX512 ? "AVX-512" : isa == PP_ISA_AVX2 ? "AVX2" : "");
	if (isa == PP_ISA_BASE) {
		ck_assert_str_eq(info.fix, "");
	} else {
		ck_assert_str_eq(info.fix, isa == PP_ISA_AVX512 ? "OPENBLAS_CORETYPE=SkylakeX"
								: "OPENBLAS_CORETYPE=Haswell");
		ck_assert_ptr_nonnull(strstr(info.warning, "Prescott"));
		ck_assert_ptr_nonnull(strstr(info.warning, info.fix));
	}
	if (isa == PP_ISA_BASE)
		return;
	info = child_info("Haswell");
	ck_assert_str_eq(info.core, "Haswell");
	ck_assert_str_eq(info.fix, "");
	ck_assert_str_eq(info.warning, "");
}
END_TEST

Suite *pp_test_suite(void)
{
	const char *out = getenv("PP_TEST_BLAS_OUT");
	Suite *s = suite_create("nn_blas");
	TCase *tc = tcase_create("blas");

	/* The child of child_info(): what it finds, and nothing else. */
	if (out != NULL) {
		struct pp_blas_info info;
		FILE *f = fopen(out, "w");

		pp_blas_get_info(&info);
		if (f == NULL || fprintf(f, "core=%s\nfix=%s\nwarning=%s\ncpu_isa=%s\n", info.core,
					 info.fix, info.warning, info.cpu_isa) < 0 || fclose(f) != 0)
			exit(1);
		exit(0);
	}
	tcase_add_test(tc, test_better_core);
	tcase_add_test(tc, test_info_here);
	tcase_add_test(tc, test_info_child);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return s;
}
