/*
 * nn/cpu/blas.c: the BLAS under the CPU models, which kernels it runs, and
 * whether this processor has better ones (pp_blas_get_info()).
 *
 * OpenBLAS built for many processors (DYNAMIC_ARCH, as Debian's) chooses
 * its kernels from a table of the processors it knows when it is loaded,
 * and on one it does not know (0.3.21 on a Raptor Lake or an Emerald
 * Rapids) falls back to its generic Prescott kernels without a word: SGEMM
 * 6x slower there.  OPENBLAS_CORETYPE, read then, overrides the choice; a
 * library linked with the program is loaded before any of the program's
 * code runs.  So OpenBLAS is not linked but opened here (dlopen), when a
 * CPU model first needs it, as cuBLAS is (nn/cuda/ops.cu): the processor
 * is identified first, the core OpenBLAS would choose by itself judged
 * (pp_blas_openblas_core()), and where it is worse than the processor
 * allows the right one named in OPENBLAS_CORETYPE for the load.  The
 * user's own OPENBLAS_CORETYPE wins, and an OpenBLAS already in the
 * process (the program links it) is taken as it is: there the warning of
 * pp_blas_get_info() remains.  A process that trains only on a GPU never
 * loads OpenBLAS, nor starts its threads.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/common_impl.h"
#include "nn/cpu/blas.h"
#include "pinpipe/nn.h"

/* The vector instructions of the SGEMM kernels of each OpenBLAS core (0.3.21's names, x86-64). */
static const struct {
	const char *name;
	int isa;          /* enum pp_isa, or -1: neither AVX2 nor AVX-512 (generic) */
} cores[] = {
	{ "SkylakeX", PP_ISA_AVX512 }, { "Cooperlake", PP_ISA_AVX512 },
	{ "SapphireRapids", PP_ISA_AVX512 }, { "Haswell", PP_ISA_AVX2 }, { "Zen", PP_ISA_AVX2 },
	{ "Unknown", -1 }, { "Katmai", -1 }, { "Coppermine", -1 }, { "Northwood", -1 },
	{ "Prescott", -1 }, { "Banias", -1 }, { "Atom", -1 }, { "Core2", -1 }, { "Penryn", -1 },
	{ "Dunnington", -1 }, { "Nehalem", -1 }, { "Athlon", -1 }, { "Opteron", -1 },
	{ "Opteron_SSE3", -1 }, { "Barcelona", -1 }, { "Nano", -1 }, { "Sandybridge", -1 },
	{ "Bobcat", -1 }, { "Bulldozer", -1 }, { "Piledriver", -1 }, { "Steamroller", -1 },
	{ "Excavator", -1 },
};

const char *pp_blas_better_core(const char *core, bool chosen, enum pp_isa isa)
{
	/* The cores 0.3.21 accepts in OPENBLAS_CORETYPE that run everywhere the level does. */
	const char *best = isa == PP_ISA_AVX512 ? "SkylakeX" : isa == PP_ISA_AVX2 ? "Haswell" : NULL;

	if (core == NULL || best == NULL)
		return NULL;
	for (size_t i = 0; i < sizeof(cores) / sizeof(cores[0]); i++) {
		if (strcasecmp(core, cores[i].name) != 0)
			continue;
		if (cores[i].isa < 0)
			return best;
		return !chosen && cores[i].isa < (int)isa ? best : NULL;
	}
	return NULL;
}

/*
 * OpenBLAS 0.3.21's choices on an Intel family 6 or an AMD processor
 * (driver/others/dynamic.c, get_coretype()), each by the first instruction
 * set of its ladder the processor has: "bf16" AVX-512 BF16 (Cooperlake),
 * "avx512" AVX-512 VL (SkylakeX), "avx2" (Haswell), "avx" (Sandybridge);
 * below the last, the core named.
 */
enum ladder {
	FIXED,       /* the core named, whatever the instruction sets */
	FROM_AVX,    /* Sandybridge, else the core */
	FROM_AVX2,   /* Haswell, Sandybridge, else the core */
	FROM_AVX512, /* SkylakeX, Haswell, Sandybridge, else the core */
	FROM_BF16,   /* Cooperlake, SkylakeX, Haswell, Sandybridge, else the core */
};

static const char *climb(const struct pp_cpu_id *cpu, enum ladder from, const char *core)
{
	if (from >= FROM_BF16 && cpu->avx512bf16 && cpu->avx512vl)
		return "Cooperlake";
	if (from >= FROM_AVX512 && cpu->avx512vl && cpu->avx)
		return "SkylakeX";
	if (from >= FROM_AVX2 && cpu->avx2 && cpu->avx)
		return "Haswell";
	if (from >= FROM_AVX && cpu->avx)
		return "Sandybridge";
	return core;
}

/*
 * Its rows for Intel's family 6 (model = extended << 4 | base).  The 32-bit
 * cores it names for the oldest (Katmai, Coppermine, Banias) become
 * Prescott in a 64-bit process, as there.
 */
static const struct {
	unsigned model;
	enum ladder from;
	const char *core;
} intel6[] = {
	{ 0x00, FIXED, "Prescott" }, { 0x01, FIXED, "Prescott" }, { 0x02, FIXED, "Prescott" },
	{ 0x03, FIXED, "Prescott" }, { 0x04, FIXED, "Prescott" }, { 0x05, FIXED, "Prescott" },
	{ 0x06, FIXED, "Prescott" }, { 0x07, FIXED, "Prescott" }, { 0x08, FIXED, "Prescott" },
	{ 0x09, FIXED, "Prescott" }, { 0x0a, FIXED, "Prescott" }, { 0x0b, FIXED, "Prescott" },
	{ 0x0d, FIXED, "Prescott" }, { 0x0e, FIXED, "Prescott" }, { 0x0f, FIXED, "Core2" },
	{ 0x16, FIXED, "Core2" }, { 0x17, FIXED, "Penryn" }, { 0x1d, FIXED, "Dunnington" },
	{ 0x1a, FIXED, "Nehalem" }, { 0x1b, FIXED, "Nehalem" }, { 0x1e, FIXED, "Nehalem" },
	{ 0x1f, FIXED, "Nehalem" }, { 0x1c, FIXED, "Atom" },
	{ 0x25, FIXED, "Nehalem" }, { 0x2c, FIXED, "Nehalem" }, { 0x2e, FIXED, "Nehalem" },
	{ 0x2f, FIXED, "Nehalem" }, { 0x2a, FROM_AVX, "Nehalem" }, { 0x2d, FROM_AVX, "Nehalem" },
	{ 0x3a, FROM_AVX, "Nehalem" }, { 0x3e, FROM_AVX, "Nehalem" },
	{ 0x3c, FROM_AVX2, "Nehalem" }, { 0x3f, FROM_AVX2, "Nehalem" }, { 0x3d, FROM_AVX2, "Nehalem" },
	{ 0x37, FIXED, "Atom" },
	{ 0x45, FROM_AVX2, "Nehalem" }, { 0x46, FROM_AVX2, "Nehalem" }, { 0x47, FROM_AVX2, "Nehalem" },
	{ 0x4f, FROM_AVX2, "Nehalem" }, { 0x4e, FROM_AVX2, "Nehalem" }, { 0x4c, FIXED, "Nehalem" },
	{ 0x4d, FIXED, "Nehalem" },
	{ 0x56, FROM_AVX2, "Nehalem" }, { 0x55, FROM_BF16, "Nehalem" }, { 0x5e, FROM_AVX2, "Nehalem" },
	{ 0x57, FROM_AVX2, "Nehalem" }, { 0x5c, FIXED, "Nehalem" }, { 0x5f, FIXED, "Nehalem" },
	{ 0x66, FROM_AVX2, "Nehalem" }, { 0x6a, FROM_BF16, "Nehalem" }, { 0x6c, FROM_BF16, "Nehalem" },
	{ 0x7a, FIXED, "Nehalem" }, { 0x7d, FROM_AVX512, "Nehalem" }, { 0x7e, FROM_AVX512, "Nehalem" },
	{ 0x8c, FROM_AVX512, "Nehalem" }, { 0x8d, FROM_AVX512, "Nehalem" },
	{ 0x8e, FROM_AVX2, "Nehalem" }, { 0x8f, FROM_BF16, "Nehalem" },
	{ 0x97, FROM_BF16, "Nehalem" }, { 0x9a, FROM_BF16, "Nehalem" }, { 0x9e, FROM_AVX2, "Nehalem" },
	{ 0xa5, FROM_AVX2, "Nehalem" }, { 0xa6, FROM_AVX2, "Nehalem" }, { 0xa7, FROM_AVX512, "Nehalem" },
};

const char *pp_blas_openblas_core(const struct pp_cpu_id *cpu)
{
	/* What it does with a processor it has no row for: the first of the ladder it has. */
	const char *unknown = climb(cpu, FROM_BF16, "Prescott");
	const unsigned f = cpu->family, m = cpu->model;

	if (strcmp(cpu->vendor, "GenuineIntel") == 0) {
		/* the base family 0xf: the Pentium 4's, and every family from 0x10 on (0x13 Diamond Rapids) */
		if (f >= 0xf)
			return "Prescott";
		if (f != 0x6)
			return unknown;
		for (size_t i = 0; i < sizeof(intel6) / sizeof(intel6[0]); i++)
			if (intel6[i].model == m)
				return climb(cpu, intel6[i].from, intel6[i].core);
		/* A model of no row: by the instruction sets up to 0xaf; from 0xb0 on,
		 * its switch on the extended model has no case and falls through to
		 * the Pentium 4's, Prescott. */
		return m >= 0xb0 ? "Prescott" : unknown;
	}
	if (strcmp(cpu->vendor, "AuthenticAMD") != 0 && strcmp(cpu->vendor, "HygonGenuine") != 0)
		return NULL;
	switch (f) {
	case 0x15: /* Bulldozer's family: by the base model and the extended one */
		switch (m & 0xf) {
		case 0x1:
			return cpu->avx ? "Bulldozer" : "Barcelona";
		case 0x2: case 0x3:
			return cpu->avx ? "Piledriver" : "Barcelona";
		case 0x5:
			return cpu->avx ? "Excavator" : "Barcelona";
		case 0x0: case 0x8:
			if (m >> 4 == 1)
				return cpu->avx ? "Piledriver" : "Barcelona";
			if (m >> 4 == 3)
				return cpu->avx ? "Steamroller" : "Barcelona";
			if (m >> 4 == 6)
				return cpu->avx ? "Excavator" : "Barcelona";
			return unknown;
		default:
			return unknown;
		}
	case 0x16: /* Jaguar */
		return "Bobcat";
	case 0x17: /* Zen, Zen 2 */
	case 0x18: /* Hygon Dhyana */
		return cpu->avx ? "Zen" : "Barcelona";
	case 0x19: /* Zen 3, Zen 4 */
		return cpu->avx512bf16 && cpu->avx512vl ? "Cooperlake" :
		       cpu->avx512vl && cpu->avx ? "SkylakeX" : cpu->avx ? "Zen" : "Barcelona";
	default:
		return f > 0x19 ? unknown : NULL;
	}
}

const char *pp_blas_arrangement(const struct pp_cpu_id *cpu)
{
	const char *core = pp_blas_openblas_core(cpu);

	return core != NULL ? pp_blas_better_core(core, false, cpu->isa) : NULL;
}

/* ------------------------------------------------------------------ loading */

/* The loaded OpenBLAS, and how its core came to be chosen: set once, under 'lock'. */
static struct {
	pthread_mutex_t lock;
	bool tried;                /* the load was tried (read without the lock: 'ready') */
	int ret;                   /* 0, or its -errno */
	char why[512];             /* the message of a failed load */
	void *lib;
	__typeof__(&cblas_sgemm) sgemm;
	__typeof__(&openblas_set_num_threads) set_threads;
	__typeof__(&openblas_get_corename) corename;   /* NULL: not said */
	struct pp_cpu_id cpu;      /* the processor it was loaded for */
	const char *arranged;      /* the core named in OPENBLAS_CORETYPE for the load, or NULL */
	bool preloaded;            /* in the process before: its core was chosen then */
	bool user_set;             /* the user's OPENBLAS_CORETYPE was set at the load... */
	char user_core[32];        /* ...to this */
} blas = { .lock = PTHREAD_MUTEX_INITIALIZER };
static bool ready;                 /* blas is set (atomic: acquire, release) */

/* Resolves 'name' in the library into *fn_p, or says which symbol is missing where. */
static int blas_sym(const char *lib, const char *name, void **fn_p)
{
	*fn_p = dlsym(blas.lib, name);
	if (*fn_p == NULL) {
		snprintf(blas.why, sizeof(blas.why), "OpenBLAS: %s has no symbol %s (not OpenBLAS)",
			 lib, name);
		return -ENOENT;
	}
	return 0;
}

/* The load itself, under the lock; 0 or -ENOENT with blas.why. */
static int blas_load(void)
{
	const char *env = getenv("OPENBLAS_CORETYPE"), *lib = PP_OPENBLAS_SONAME;
	const int flags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;
	sigset_t caller;
	bool masked, one_thread;
	int ret;

	blas.user_set = env != NULL;
	if (env != NULL)
		snprintf(blas.user_core, sizeof(blas.user_core), "%s", env);
	blas.lib = dlopen(PP_OPENBLAS_SONAME, RTLD_NOW | RTLD_NOLOAD);
	blas.preloaded = blas.lib != NULL;
	if (blas.lib == NULL) {
		blas.arranged = env == NULL ? pp_blas_arrangement(&blas.cpu) : NULL;
		/* Named only while nobody else does (and then taken away again below). */
		if (blas.arranged != NULL && (setenv("OPENBLAS_CORETYPE", blas.arranged, 0) != 0 ||
					      strcmp(getenv("OPENBLAS_CORETYPE"), blas.arranged) != 0))
			blas.arranged = NULL;
		/*
		 * OpenBLAS starts its threads as it is loaded, as many as OPENBLAS_NUM_THREADS
		 * (else OMP_NUM_THREADS, else the cores) says, idle ones since pinpipe runs it on
		 * one: none unless the user asks (OPENBLAS_NUM_THREADS=1, named for the load
		 * alone).  0.3.21 dies with them: where RLIMIT_NPROC refuses one, its exit joins
		 * the thread never made (SIGSEGV); where RLIMIT_AS refuses one's buffer, the
		 * thread retries for ever and the exit waits on it.
		 */
		one_thread = getenv("OPENBLAS_NUM_THREADS") == NULL &&
			     setenv("OPENBLAS_NUM_THREADS", "1", 0) == 0;
		/* The threads it starts take the library's mask. */
		masked = pp_signals_block(&caller) == 0;
		blas.lib = dlopen(lib, flags);
		if (blas.lib == NULL) {
			lib = PP_OPENBLAS_PATH;
			blas.lib = dlopen(lib, flags);
		}
		if (masked)
			pp_signals_restore(&caller);
		if (blas.arranged != NULL)
			unsetenv("OPENBLAS_CORETYPE");
		if (one_thread)
			unsetenv("OPENBLAS_NUM_THREADS");
	}
	if (blas.lib == NULL) {
		const char *err = dlerror();

		/* installing is the remedy only where it is missing: not where it could not be mapped (RLIMIT_AS) */
		snprintf(blas.why, sizeof(blas.why), "OpenBLAS: cannot load %s nor %s: %s%s",
			 PP_OPENBLAS_SONAME, PP_OPENBLAS_PATH, err ? err : "(no reason given)",
			 err == NULL || strstr(err, "No such file") != NULL ?
			 " (install Debian's libopenblas0, or add its directory to LD_LIBRARY_PATH)" :
			 strstr(err, "failed to map") != NULL ?
			 " (the process's address space limit, RLIMIT_AS: ulimit -v)" : "");
		return -ENOENT;
	}
	ret = blas_sym(lib, "cblas_sgemm", (void **)&blas.sgemm);
	if (ret == 0)
		ret = blas_sym(lib, "openblas_set_num_threads", (void **)&blas.set_threads);
	if (ret < 0) {
		dlclose(blas.lib);
		blas.lib = NULL;
		return ret;
	}
	*(void **)&blas.corename = dlsym(blas.lib, "openblas_get_corename");
	return 0;
}

int pp_blas_open_cpu(const struct pp_cpu_id *cpu)
{
	int ret;

	pthread_mutex_lock(&blas.lock);
	if (!blas.tried) {
		blas.cpu = *cpu;
		blas.ret = blas_load();
		blas.tried = true;
		__atomic_store_n(&ready, true, __ATOMIC_RELEASE);
	}
	ret = blas.ret;
	pthread_mutex_unlock(&blas.lock);
	/* each caller gets the message in its own thread's last error */
	return ret < 0 ? pp_error(ret, "%s", blas.why) : 0;
}

int pp_blas_open(void)
{
	struct pp_cpu_id cpu;

	if (__atomic_load_n(&ready, __ATOMIC_ACQUIRE))
		return blas.ret < 0 ? pp_error(blas.ret, "%s", blas.why) : 0;
	pp_cpu_identify(&cpu);
	return pp_blas_open_cpu(&cpu);
}

void pp_blas_single_thread(void)
{
	if (blas.set_threads != NULL)
		blas.set_threads(1);
}

void pp_blas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
		   int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
		   float beta, float *c, int ldc)
{
	if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE))
		pp_blas_open();
	if (blas.sgemm == NULL) {
		fprintf(stderr, "pinpipe: %s\n", blas.why);
		abort();
	}
	blas.sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ------------------------------------------------------------------ the report */

/* The level of a known core's kernels, for the warning: "generic" below AVX2. */
static const char *core_level(const char *core)
{
	for (size_t i = 0; i < sizeof(cores) / sizeof(cores[0]); i++)
		if (strcasecmp(core, cores[i].name) == 0)
			return cores[i].isa == PP_ISA_AVX512 ? "AVX-512" :
			       cores[i].isa == PP_ISA_AVX2 ? "AVX2" : "generic";
	return "";
}

/* Why OpenBLAS runs a core slower than the processor allows, for the warning. */
static const char *blas_why_slow(const char *core, bool chosen)
{
	if (chosen)
		return "OPENBLAS_CORETYPE chose them";
	if (blas.user_set)
		return "this OpenBLAS does not know the core OPENBLAS_CORETYPE names";
	if (blas.preloaded)
		return "OpenBLAS was loaded before pinpipe could choose its kernels: the program "
		       "links it";
	if (blas.arranged != NULL)
		return "this OpenBLAS does not take the core that pinpipe named in OPENBLAS_CORETYPE";
	return "this OpenBLAS does not know the processor";
}

PP_API void pp_blas_get_info(struct pp_blas_info *info)
{
	const char *better, *core;
	bool chosen, by_user;
	enum pp_isa isa;

	memset(info, 0, sizeof(*info));
	if (pp_blas_open() < 0) {
		snprintf(info->warning, sizeof(info->warning), "%.320s: the models cannot run on the CPU",
			 blas.why);
		return;
	}
	isa = blas.cpu.isa;
	snprintf(info->cpu_isa, sizeof(info->cpu_isa), "%s",
		 isa == PP_ISA_AVX512 ? "AVX-512" : isa == PP_ISA_AVX2 ? "AVX2" : "");
	if (blas.corename == NULL || (core = blas.corename()) == NULL)
		return;
	snprintf(info->library, sizeof(info->library), "OpenBLAS");
	snprintf(info->core, sizeof(info->core), "%s", core);
	/* chosen: the core OpenBLAS runs is the one named (it takes an unknown name, or an
	 * empty one, silently, and then picks a core of its own) */
	by_user = blas.user_set && strcasecmp(blas.user_core, info->core) == 0;
	chosen = by_user || (blas.arranged != NULL && strcasecmp(blas.arranged, info->core) == 0);
	snprintf(info->chosen_by, sizeof(info->chosen_by), "%s",
		 by_user ? "OPENBLAS_CORETYPE" : chosen ? "pinpipe" : "OpenBLAS");
	better = pp_blas_better_core(info->core, by_user, isa);
	if (better == NULL)
		return;
	snprintf(info->fix, sizeof(info->fix), "OPENBLAS_CORETYPE=%s", better);
	snprintf(info->warning, sizeof(info->warning),
		 "OpenBLAS runs its %s kernels (%s) on this processor, which has %s: its matrix "
		 "products run several times slower than they can (%s); run with %s in the "
		 "environment", info->core, core_level(info->core), info->cpu_isa,
		 blas_why_slow(info->core, by_user), info->fix);
}
