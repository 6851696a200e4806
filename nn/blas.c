/*
 * nn/blas.c: which kernels the BLAS under the CPU models runs, and whether
 * this processor has better ones (pp_blas_get_info()).  OpenBLAS built
 * for many processors (DYNAMIC_ARCH, as Debian's) chooses its kernels
 * from a table of the processors it knows, and on one it does not know
 * (0.3.21 on an Emerald Rapids Xeon) falls back to its generic Prescott
 * kernels without a word: SGEMM 6x slower there.  The BLAS's own query,
 * openblas_get_corename(), is looked up when asked (dlsym), so that the
 * library still links and runs on a BLAS without it, reported as unknown.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nn/blas.h"
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

/* The level of a known core's kernels, for the warning: "generic" below AVX2. */
static const char *core_level(const char *core)
{
	for (size_t i = 0; i < sizeof(cores) / sizeof(cores[0]); i++)
		if (strcasecmp(core, cores[i].name) == 0)
			return cores[i].isa == PP_ISA_AVX512 ? "AVX-512" :
			       cores[i].isa == PP_ISA_AVX2 ? "AVX2" : "generic";
	return "";
}

void pp_blas_get_info(struct pp_blas_info *info)
{
	char *(*corename)(void);
	const enum pp_isa isa = pp_isa_best();
	const char *env = getenv("OPENBLAS_CORETYPE");
	const char *better;
	bool chosen;

	memset(info, 0, sizeof(*info));
	snprintf(info->cpu_isa, sizeof(info->cpu_isa), "%s",
		 isa == PP_ISA_AVX512 ? "AVX-512" : isa == PP_ISA_AVX2 ? "AVX2" : "");
	*(void **)&corename = dlsym(RTLD_DEFAULT, "openblas_get_corename");
	if (corename == NULL || corename() == NULL)
		return;
	snprintf(info->library, sizeof(info->library), "OpenBLAS");
	snprintf(info->core, sizeof(info->core), "%s", corename());
	/* chosen: the core OpenBLAS runs is the one named (it takes an unknown name, or an
	 * empty one, silently, and then picks a core of its own) */
	chosen = env != NULL && env[0] != '\0' && strcasecmp(env, info->core) == 0;
	better = pp_blas_better_core(info->core, chosen, isa);
	if (better == NULL)
		return;
	snprintf(info->fix, sizeof(info->fix), "OPENBLAS_CORETYPE=%s", better);
	snprintf(info->warning, sizeof(info->warning),
		 "OpenBLAS runs its %s kernels (%s) on this processor, which has %s: its matrix "
		 "products run several times slower than they can (%s); run with %s in the "
		 "environment", info->core, core_level(info->core), info->cpu_isa,
		 chosen ? "OPENBLAS_CORETYPE chose them" :
		 env != NULL ? "this OpenBLAS does not know the core OPENBLAS_CORETYPE names" :
			       "this OpenBLAS does not know the processor",
		 info->fix);
}
