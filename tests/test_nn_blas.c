/*
 * tests/test_nn_blas.c: the BLAS under the CPU models (nn/cpu/blas.c): which
 * core OpenBLAS 0.3.21 chooses by itself for a processor, and which the
 * library names in OPENBLAS_CORETYPE before it loads OpenBLAS, for every
 * kind of processor, faked (vendor, family, model, instruction sets); the
 * judgement of every kind of core against every processor level; the
 * query against OpenBLAS's own in this process; and the loading itself in
 * child processes started with a faked processor, with OPENBLAS_CORETYPE
 * (the user's), or with OpenBLAS loaded before the library opens it: this
 * program run again, which writes what it finds to the file named by
 * PP_TEST_BLAS_OUT and exits.
 */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cpu.h"
#include "nn/cpu/blas.h"
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

/* A processor as a test fakes it: flags from "avx", "avx2", "avx512" (VL), "bf16"; isa from them. */
static struct pp_cpu_id fake_cpu(const char *vendor, unsigned family, unsigned model, const char *flags)
{
	struct pp_cpu_id cpu;

	memset(&cpu, 0, sizeof(cpu));
	snprintf(cpu.vendor, sizeof(cpu.vendor), "%s", vendor);
	cpu.family = family;
	cpu.model = model;
	cpu.avx = strstr(flags, "avx") != NULL;
	cpu.avx2 = strstr(flags, "avx2") != NULL;
	cpu.avx512vl = strstr(flags, "avx512") != NULL;
	cpu.avx512bf16 = strstr(flags, "bf16") != NULL;
	cpu.isa = cpu.avx512vl ? PP_ISA_AVX512 : cpu.avx2 ? PP_ISA_AVX2 : PP_ISA_BASE;
	return cpu;
}

#define AVX512_BF16 "avx,avx2,avx512,bf16"
#define AVX512 "avx,avx2,avx512"
#define AVX2 "avx,avx2"

/* The processors the tests put to the library, with what OpenBLAS 0.3.21 and the library choose. */
static const struct {
	const char *what, *vendor;
	unsigned family, model;
	const char *flags;
	const char *openblas;      /* pp_blas_openblas_core() */
	const char *arranged;      /* pp_blas_arrangement() */
} cpus[] = {
	{ "Emerald Rapids", "GenuineIntel", 0x6, 0xcf, AVX512_BF16, "Prescott", "SkylakeX" },
	{ "Emerald Rapids, AVX-512 off", "GenuineIntel", 0x6, 0xcf, AVX2, "Prescott", "Haswell" },
	{ "Raptor Lake", "GenuineIntel", 0x6, 0xb7, AVX2, "Prescott", "Haswell" },
	{ "Raptor Lake-P", "GenuineIntel", 0x6, 0xba, AVX2, "Prescott", "Haswell" },
	{ "Arrow Lake", "GenuineIntel", 0x6, 0xc6, AVX2, "Prescott", "Haswell" },
	{ "Sapphire Rapids", "GenuineIntel", 0x6, 0x8f, AVX512_BF16, "Cooperlake", NULL },
	{ "Granite Rapids", "GenuineIntel", 0x6, 0xad, AVX512_BF16, "Cooperlake", NULL },
	{ "Sierra Forest", "GenuineIntel", 0x6, 0xaf, AVX2, "Haswell", NULL },
	{ "Skylake-SP", "GenuineIntel", 0x6, 0x55, AVX512, "SkylakeX", NULL },
	{ "Cooper Lake", "GenuineIntel", 0x6, 0x55, AVX512_BF16, "Cooperlake", NULL },
	{ "Ice Lake-SP", "GenuineIntel", 0x6, 0x6a, AVX512, "SkylakeX", NULL },
	{ "Rocket Lake", "GenuineIntel", 0x6, 0xa7, AVX512_BF16, "SkylakeX", NULL },
	{ "Cannon Lake", "GenuineIntel", 0x6, 0x66, AVX512, "Haswell", "SkylakeX" },
	{ "Haswell-EP", "GenuineIntel", 0x6, 0x3f, AVX2, "Haswell", NULL },
	{ "Alder Lake", "GenuineIntel", 0x6, 0x97, AVX2, "Haswell", NULL },
	{ "Ivy Bridge", "GenuineIntel", 0x6, 0x3a, "avx", "Sandybridge", NULL },
	{ "Nehalem in a VM with AVX2", "GenuineIntel", 0x6, 0x1a, AVX2, "Nehalem", "Haswell" },
	{ "a Pentium 4", "GenuineIntel", 0xf, 0x04, "", "Prescott", NULL },
	{ "Diamond Rapids", "GenuineIntel", 0x13, 0x01, AVX512_BF16, "Prescott", "SkylakeX" },
	{ "Zen 2", "AuthenticAMD", 0x17, 0x31, AVX2, "Zen", NULL },
	{ "Zen 3", "AuthenticAMD", 0x19, 0x01, AVX2, "Zen", NULL },
	{ "Zen 4", "AuthenticAMD", 0x19, 0x11, AVX512_BF16, "Cooperlake", NULL },
	{ "Zen 5", "AuthenticAMD", 0x1a, 0x02, AVX512_BF16, "Cooperlake", NULL },
	{ "Excavator", "AuthenticAMD", 0x15, 0x60, AVX2, "Excavator", "Haswell" },
	{ "Stoney Ridge", "AuthenticAMD", 0x15, 0x70, AVX2, "Haswell", NULL },
	{ "Piledriver", "AuthenticAMD", 0x15, 0x02, "avx", "Piledriver", NULL },
	{ "Hygon Dhyana", "HygonGenuine", 0x18, 0x00, AVX2, "Zen", NULL },
	{ "a K10 Opteron", "AuthenticAMD", 0x10, 0x02, "", NULL, NULL },
	{ "a Zhaoxin", "  Shanghai  ", 0x7, 0x5b, AVX2, NULL, NULL },
	{ "an ARM server", "", 0, 0, "", NULL, NULL },
};

/*
 * Fails if the model of OpenBLAS 0.3.21's choice misses for one of these
 * processors (the Intel models from 0xb0 up that its switch lets fall to
 * Prescott, those it does not know below that and AMD's newer families
 * chosen by their instructions, those it knows by its rows), or if the
 * library would name a core for one whose choice is right or not known,
 * or not the core of the processor's instructions where it is wrong.
 */
START_TEST(test_arrangement)
{
	for (size_t i = 0; i < sizeof(cpus) / sizeof(cpus[0]); i++) {
		const struct pp_cpu_id cpu = fake_cpu(cpus[i].vendor, cpus[i].family, cpus[i].model,
						      cpus[i].flags);
		const char *core = pp_blas_openblas_core(&cpu), *arranged = pp_blas_arrangement(&cpu);

		ck_assert_msg(core == cpus[i].openblas ||
			      (core != NULL && cpus[i].openblas != NULL && strcmp(core, cpus[i].openblas) == 0),
			      "%s: OpenBLAS chooses %s, not %s", cpus[i].what, core ? core : "(unknown)",
			      cpus[i].openblas ? cpus[i].openblas : "(unknown)");
		ck_assert_msg(arranged == cpus[i].arranged ||
			      (arranged != NULL && cpus[i].arranged != NULL &&
			       strcmp(arranged, cpus[i].arranged) == 0),
			      "%s: the library names %s, not %s", cpus[i].what, arranged ? arranged : "nothing",
			      cpus[i].arranged ? cpus[i].arranged : "nothing");
	}
}
END_TEST

/* Fails if the probe does not say this processor's level as pp_isa_best(), or its vendor's family. */
START_TEST(test_identify)
{
	struct pp_cpu_id cpu;

	pp_cpu_identify(&cpu);
	ck_assert_int_eq(cpu.isa, pp_isa_best());
#if defined(__x86_64__)
	ck_assert_int_ne(cpu.family, 0);
	ck_assert_uint_eq(strlen(cpu.vendor), 12);
	ck_assert(!cpu.avx512vl || cpu.avx2);
	ck_assert(!cpu.avx2 || cpu.avx);
	ck_assert(cpu.isa < PP_ISA_AVX2 || cpu.avx2);
#endif
}
END_TEST

/*
 * Checks that info agrees with itself for a processor of level isa: a fix
 * exactly when the judgement gives one, named in the warning.
 */
static void check_consistent(const struct pp_blas_info *info, enum pp_isa isa)
{
	const bool by_user = strcmp(info->chosen_by, "OPENBLAS_CORETYPE") == 0;
	const char *better = pp_blas_better_core(info->core, by_user, isa);

	ck_assert_str_eq(info->cpu_isa, isa == PP_ISA_AVX512 ? "AVX-512" : isa == PP_ISA_AVX2 ? "AVX2" : "");
	if (better == NULL) {
		ck_assert_str_eq(info->fix, "");
		ck_assert_str_eq(info->warning, "");
		return;
	}
	ck_assert_str_eq(info->fix + strlen("OPENBLAS_CORETYPE="), better);
	ck_assert_ptr_nonnull(strstr(info->warning, info->fix));
	ck_assert_ptr_nonnull(strstr(info->warning, info->core));
}

/*
 * Fails if the query does not report the core the loaded OpenBLAS itself
 * reports in this process, or if that core is not the one the library
 * arranged, or, where it arranged none, not the one the model of
 * OpenBLAS's choice predicts for this processor (with OPENBLAS_CORETYPE
 * unset: the model is checked against the real library on every machine
 * the tests run on).
 */
START_TEST(test_info_here)
{
	const char *env = getenv("OPENBLAS_CORETYPE");
	char *(*corename)(void);
	struct pp_blas_info info;
	struct pp_cpu_id cpu;
	const char *arranged, *predicted;
	void *lib;

	pp_cpu_identify(&cpu);
	ck_assert_int_eq(pp_blas_open(), 0);
	pp_blas_get_info(&info);
	lib = dlopen(PP_OPENBLAS_SONAME, RTLD_NOW | RTLD_NOLOAD);
	if (lib == NULL)
		lib = dlopen(PP_OPENBLAS_PATH, RTLD_NOW | RTLD_NOLOAD);
	ck_assert_msg(lib != NULL, "OpenBLAS is not loaded after pp_blas_open()");
	*(void **)&corename = dlsym(lib, "openblas_get_corename");
	ck_assert_ptr_nonnull(corename);
	ck_assert_str_eq(info.library, "OpenBLAS");
	ck_assert_str_eq(info.core, corename());
	dlclose(lib);
	check_consistent(&info, cpu.isa);
	if (env != NULL) {
		ck_assert_str_ne(info.chosen_by, "pinpipe");
		return;
	}
	arranged = pp_blas_arrangement(&cpu);
	predicted = pp_blas_openblas_core(&cpu);
	if (arranged != NULL) {
		ck_assert_str_eq(info.core, arranged);
		ck_assert_str_eq(info.chosen_by, "pinpipe");
	} else {
		ck_assert_str_eq(info.chosen_by, "OpenBLAS");
		if (predicted != NULL)
			ck_assert_msg(strcasecmp(info.core, predicted) == 0,
				      "OpenBLAS chose %s on %s family 0x%x model 0x%x, the model says %s",
				      info.core, cpu.vendor, cpu.family, cpu.model, predicted);
	}
	ck_assert_ptr_null(getenv("OPENBLAS_CORETYPE"));
}
END_TEST

/* How a child of child_info() starts: the processor it fakes, and what comes before the library. */
struct child {
	const char *cpu;       /* "vendor:family:model:flags" for pp_blas_open_cpu(), NULL: the real one */
	const char *coretype;  /* the user's OPENBLAS_CORETYPE, NULL: unset */
	const char *preload;   /* a core to load OpenBLAS with before the library opens it, NULL: none */
	const char *env;       /* one more NAME=VALUE of the environment, NULL: none */
};

/* What a child found: pp_blas_get_info()'s fields, and OPENBLAS_CORETYPE after the load. */
struct found {
	struct pp_blas_info info;
	char env[64];
	char num_threads[64];  /* OPENBLAS_NUM_THREADS after the load, "(unset)" */
	int threads;           /* the child's threads after the load */
};

/* Runs this program as 'c' says (LD_PRELOAD dropped); returns what it found. */
static struct found child_info(const struct child *c)
{
	char *dir = pp_test_tmpdir(), out[4096], coretype[64], outvar[4200], cpuvar[128];
	char preload[64];
	char *argv[] = { "test_nn_blas", NULL };
	char *envp[256];
	struct found f;
	size_t n = 0, len;
	char *text, *line;
	int status;
	pid_t pid;

	snprintf(out, sizeof(out), "%s/info", dir);
	snprintf(outvar, sizeof(outvar), "PP_TEST_BLAS_OUT=%s", out);
	/* valgrind's preload without valgrind would break the child */
	for (char **e = environ; *e && n < 240; e++)
		if (strncmp(*e, "OPENBLAS_CORETYPE=", 18) != 0 && strncmp(*e, "LD_PRELOAD=", 11) != 0 &&
		    strncmp(*e, "OPENBLAS_NUM_THREADS=", 21) != 0 && strncmp(*e, "OMP_NUM_THREADS=", 16) != 0 &&
		    strncmp(*e, "GOTO_NUM_THREADS=", 17) != 0)
			envp[n++] = *e;
	if (c->coretype != NULL) {
		snprintf(coretype, sizeof(coretype), "OPENBLAS_CORETYPE=%s", c->coretype);
		envp[n++] = coretype;
	}
	if (c->cpu != NULL) {
		snprintf(cpuvar, sizeof(cpuvar), "PP_TEST_BLAS_CPU=%s", c->cpu);
		envp[n++] = cpuvar;
	}
	if (c->preload != NULL) {
		snprintf(preload, sizeof(preload), "PP_TEST_BLAS_PRELOAD=%s", c->preload);
		envp[n++] = preload;
	}
	if (c->env != NULL)
		envp[n++] = (char *)c->env;
	envp[n++] = outvar;
	envp[n] = NULL;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execve("/proc/self/exe", argv, envp);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child (cpu %s, coretype %s): status %d",
		      c->cpu ? c->cpu : "real", c->coretype ? c->coretype : "unset", status);
	text = pp_test_read_file(out, &len);
	/* the file as a string: pp_test_read_file() does not end it */
	text = realloc(text, len + 1);
	ck_assert_ptr_nonnull(text);
	text[len] = '\0';
	memset(&f, 0, sizeof(f));
	for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "core=", 5) == 0)
			snprintf(f.info.core, sizeof(f.info.core), "%s", line + 5);
		else if (strncmp(line, "fix=", 4) == 0)
			snprintf(f.info.fix, sizeof(f.info.fix), "%s", line + 4);
		else if (strncmp(line, "warning=", 8) == 0)
			snprintf(f.info.warning, sizeof(f.info.warning), "%s", line + 8);
		else if (strncmp(line, "cpu_isa=", 8) == 0)
			snprintf(f.info.cpu_isa, sizeof(f.info.cpu_isa), "%s", line + 8);
		else if (strncmp(line, "chosen_by=", 10) == 0)
			snprintf(f.info.chosen_by, sizeof(f.info.chosen_by), "%s", line + 10);
		else if (strncmp(line, "env=", 4) == 0)
			snprintf(f.env, sizeof(f.env), "%s", line + 4);
		else if (strncmp(line, "num_threads=", 12) == 0)
			snprintf(f.num_threads, sizeof(f.num_threads), "%s", line + 12);
		else if (strncmp(line, "threads=", 8) == 0)
			f.threads = atoi(line + 8);
	}
	free(text);
	pp_test_rmtree(dir);
	free(dir);
	return f;
}

/* True, saying why not, where children can be checked: not under valgrind, whose tool /proc/self/exe is. */
static bool children_checkable(const char *test)
{
	const char *preload = getenv("LD_PRELOAD");

	if (preload != NULL && strstr(preload, "vgpreload") != NULL) {
		fprintf(stderr, "%s: not checked under valgrind\n", test);
		return false;
	}
	return true;
}

/*
 * Fails if a process started with OPENBLAS_CORETYPE=Prescott on a
 * processor with AVX2 or AVX-512 does not report the Prescott core,
 * chosen by the user (the library named nothing over it), with the fix
 * for its level (SkylakeX or Haswell) and a warning, or if one started
 * with Haswell (the user's choice of AVX2 kernels) warns; on a processor
 * without AVX2, if either warns.  An OpenBLAS that does not read the
 * variable (built for one processor) must still agree with itself.
 */
START_TEST(test_info_child)
{
	const enum pp_isa isa = pp_isa_best();
	const struct child prescott = { .coretype = "Prescott" }, haswell = { .coretype = "Haswell" };
	struct found f;

	if (!children_checkable("test_info_child"))
		return;
	f = child_info(&prescott);
	if (strcmp(f.info.core, "Prescott") != 0) {
		fprintf(stderr, "test_info_child: OpenBLAS ignores OPENBLAS_CORETYPE (core %s): "
			"its choice is only checked for consistency\n", f.info.core);
		check_consistent(&f.info, isa);
		return;
	}
	ck_assert_str_eq(f.info.chosen_by, "OPENBLAS_CORETYPE");
	ck_assert_str_eq(f.env, "Prescott");
	ck_assert_str_eq(f.info.cpu_isa, isa == PP_ISA_AVX512 ? "AVX-512" : isa == PP_ISA_AVX2 ? "AVX2" : "");
	if (isa == PP_ISA_BASE) {
		ck_assert_str_eq(f.info.fix, "");
		return;
	}
	ck_assert_str_eq(f.info.fix, isa == PP_ISA_AVX512 ? "OPENBLAS_CORETYPE=SkylakeX"
							 : "OPENBLAS_CORETYPE=Haswell");
	ck_assert_ptr_nonnull(strstr(f.info.warning, "Prescott"));
	ck_assert_ptr_nonnull(strstr(f.info.warning, "OPENBLAS_CORETYPE chose them"));
	ck_assert_ptr_nonnull(strstr(f.info.warning, f.info.fix));
	f = child_info(&haswell);
	ck_assert_str_eq(f.info.core, "Haswell");
	ck_assert_str_eq(f.info.fix, "");
	ck_assert_str_eq(f.info.warning, "");
}
END_TEST

/*
 * The arrangement itself, on processors the tests fake in children.  Fails
 * if, with OPENBLAS_CORETYPE unset, a Raptor Lake with AVX2 (which 0.3.21
 * would give Prescott's kernels) does not get Haswell's, chosen by the
 * library, without a warning and with the environment left unset after
 * the load (this machine's OpenBLAS alone would choose its own core
 * here: Haswell's only come from the library's naming them); if an
 * Emerald Rapids does not get SkylakeX's likewise; if the user's
 * OPENBLAS_CORETYPE=Prescott does not win over the library's choice (and
 * warn); or if an OpenBLAS loaded before the library opens it (a program
 * linking it), with Prescott's kernels, is not taken as it is and warned
 * of as loaded before.  The faked processors' kernels must run here:
 * Haswell's need AVX2, SkylakeX's AVX-512.
 */
START_TEST(test_arranged_child)
{
	const char *raptor = "GenuineIntel:6:0xb7:" AVX2;
	const struct child arrange = { .cpu = raptor };
	const struct child emerald = { .cpu = "GenuineIntel:6:0xcf:" AVX512_BF16 };
	const struct child user = { .cpu = raptor, .coretype = "Prescott" };
	const struct child before = { .cpu = raptor, .preload = "Prescott" };
	struct found f;

	if (!children_checkable("test_arranged_child"))
		return;
	if (pp_isa_best() < PP_ISA_AVX2) {
		fprintf(stderr, "test_arranged_child: no AVX2 here, Haswell's kernels cannot run: "
			"not checked\n");
		return;
	}
	/* The user's choice first: it also says whether this OpenBLAS reads the variable at all. */
	f = child_info(&user);
	if (strcmp(f.info.core, "Prescott") != 0) {
		fprintf(stderr, "test_arranged_child: OpenBLAS ignores OPENBLAS_CORETYPE (core %s): "
			"not checked\n", f.info.core);
		return;
	}
	ck_assert_str_eq(f.info.chosen_by, "OPENBLAS_CORETYPE");
	ck_assert_str_eq(f.info.fix, "OPENBLAS_CORETYPE=Haswell");
	ck_assert_ptr_nonnull(strstr(f.info.warning, "OPENBLAS_CORETYPE chose them"));
	ck_assert_str_eq(f.env, "Prescott");

	f = child_info(&arrange);
	ck_assert_str_eq(f.info.core, "Haswell");
	ck_assert_str_eq(f.info.chosen_by, "pinpipe");
	ck_assert_str_eq(f.info.cpu_isa, "AVX2");
	ck_assert_str_eq(f.info.fix, "");
	ck_assert_str_eq(f.info.warning, "");
	ck_assert_str_eq(f.env, "(unset)");

	f = child_info(&before);
	ck_assert_str_eq(f.info.core, "Prescott");
	ck_assert_str_eq(f.info.chosen_by, "OpenBLAS");
	ck_assert_str_eq(f.info.fix, "OPENBLAS_CORETYPE=Haswell");
	ck_assert_ptr_nonnull(strstr(f.info.warning, "loaded before pinpipe"));
	ck_assert_str_eq(f.env, "(unset)");

	if (pp_isa_best() < PP_ISA_AVX512) {
		fprintf(stderr, "test_arranged_child: no AVX-512 here: SkylakeX's kernels not checked\n");
		return;
	}
	f = child_info(&emerald);
	ck_assert_str_eq(f.info.core, "SkylakeX");
	ck_assert_str_eq(f.info.chosen_by, "pinpipe");
	ck_assert_str_eq(f.info.cpu_isa, "AVX-512");
	ck_assert_str_eq(f.info.warning, "");
	ck_assert_str_eq(f.env, "(unset)");
}
END_TEST

/*
 * OpenBLAS starts its threads as it is loaded, idle ones (pinpipe runs it
 * on one), and 0.3.21 dies with them under a limit: the thread RLIMIT_NPROC
 * refused is joined at exit (SIGSEGV), one whose buffer RLIMIT_AS refused
 * is waited on for ever.  Fails if the library's load of OpenBLAS leaves a
 * thread beside the child's own, with OMP_NUM_THREADS asking for 4 too, or
 * leaves OPENBLAS_NUM_THREADS set after it; or if the user's own
 * OPENBLAS_NUM_THREADS is not left as it was.  With one core OpenBLAS
 * starts none by itself: then this checks only the environment.
 */
START_TEST(test_no_idle_threads_child)
{
	const struct child plain = { 0 }, omp = { .env = "OMP_NUM_THREADS=4" };
	const struct child user = { .env = "OPENBLAS_NUM_THREADS=2" };
	struct found f;

	if (!children_checkable("test_no_idle_threads_child"))
		return;
	if (pp_cpu_usable_cores() < 2)
		fprintf(stderr, "test_no_idle_threads_child: one core, where OpenBLAS starts no "
			"thread by itself: the threads not checked\n");
	f = child_info(&plain);
	ck_assert_msg(f.threads == 1, "%d threads after OpenBLAS's load", f.threads);
	ck_assert_str_eq(f.num_threads, "(unset)");
	f = child_info(&omp);
	ck_assert_msg(f.threads == 1, "%d threads after OpenBLAS's load with OMP_NUM_THREADS=4",
		      f.threads);
	ck_assert_str_eq(f.num_threads, "(unset)");
	f = child_info(&user);
	ck_assert_str_eq(f.num_threads, "2");
}
END_TEST

/*
 * The child of child_info(): loads OpenBLAS first where PP_TEST_BLAS_PRELOAD
 * says (as a program linking it would have it), opens the library's for
 * the processor PP_TEST_BLAS_CPU fakes, and writes what it finds.
 */
static void child_main(const char *out)
{
	const char *fake = getenv("PP_TEST_BLAS_CPU"), *preload = getenv("PP_TEST_BLAS_PRELOAD");
	const char *env, *num_threads;
	struct dirent *e;
	int threads = 0;
	DIR *task;
	struct pp_blas_info info;
	struct pp_cpu_id cpu;
	char vendor[16] = "", flags[64] = "";
	unsigned family = 0, model = 0;
	FILE *f;

	if (preload != NULL) {
		setenv("OPENBLAS_CORETYPE", preload, 1);
		if (dlopen(PP_OPENBLAS_SONAME, RTLD_NOW | RTLD_GLOBAL) == NULL)
			exit(2);
		unsetenv("OPENBLAS_CORETYPE");
	}
	if (fake != NULL) {
		if (sscanf(fake, "%15[^:]:%u:%x:%63s", vendor, &family, &model, flags) < 3)
			exit(3);
		cpu = fake_cpu(vendor, family, model, flags);
		if (pp_blas_open_cpu(&cpu) < 0)
			exit(4);
	}
	pp_blas_get_info(&info);
	env = getenv("OPENBLAS_CORETYPE");
	num_threads = getenv("OPENBLAS_NUM_THREADS");
	if ((task = opendir("/proc/self/task")) != NULL) {
		while ((e = readdir(task)) != NULL)
			threads += e->d_name[0] != '.';
		closedir(task);
	}
	f = fopen(out, "w");
	if (f == NULL || fprintf(f, "core=%s\nfix=%s\nwarning=%s\ncpu_isa=%s\nchosen_by=%s\nenv=%s\n"
				 "num_threads=%s\nthreads=%d\n",
				 info.core, info.fix, info.warning, info.cpu_isa, info.chosen_by,
				 env ? env : "(unset)", num_threads ? num_threads : "(unset)",
				 threads) < 0 || fclose(f) != 0)
		exit(1);
	exit(0);
}

Suite *pp_test_suite(void)
{
	const char *out = getenv("PP_TEST_BLAS_OUT");
	Suite *s;
	TCase *tc;

	/* before the suite is made: the child ends without freeing it */
	if (out != NULL)
		child_main(out);
	s = suite_create("nn_blas");
	tc = tcase_create("blas");
	tcase_add_test(tc, test_better_core);
	tcase_add_test(tc, test_arrangement);
	tcase_add_test(tc, test_identify);
	tcase_add_test(tc, test_info_here);
	tcase_add_test(tc, test_info_child);
	tcase_add_test(tc, test_arranged_child);
	tcase_add_test(tc, test_no_idle_threads_child);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return s;
}
