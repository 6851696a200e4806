/*
 * common/cpu.h: the one probe of the processor (its instruction sets, and
 * its vendor, family and model for the choices made from what it is: the
 * BLAS's kernels, nn/cpu/blas.c), and the one spelling of the target attribute
 * of each level, for the kernels that come in a version per level (nn/,
 * the loader's conversion).  Not exported.  A test fakes the processor by
 * handing a struct pp_cpu_id or an enum pp_isa of its own to the function
 * that takes one (pp_blas_arrangement(), the kernels' _isa versions).
 *
 * A function marked PP_TARGET_AVX2 or PP_TARGET_AVX512 may run only where
 * pp_isa_best() returns that level or a higher one.
 */
#ifndef PP_COMMON_CPU_H
#define PP_COMMON_CPU_H

#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The cores this process may run on: those of its affinity mask (taskset,
 * a container's cpuset), else the online ones; at least 1.  The one count
 * of them, for the library (the CPU backend's threads, the loader's poll,
 * the cpu device's description) and the programs (--threads=auto, the
 * loaded host's warning, pinpipe-pack's threads), inline so that the
 * programs, which do not reach the library's internals, share it.
 */
static inline int pp_cpu_usable_cores(void)
{
	cpu_set_t set;
	long online;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	online = sysconf(_SC_NPROCESSORS_ONLN);
	return online > 0 && online < INT_MAX ? (int)online : 1;
}

/*
 * The levels the kernels are compiled for: baseline x86-64 (SSE2), AVX2
 * with FMA, AVX-512 (F, VL, BW, DQ, with AVX2 and FMA; 16 floats a
 * register, masked loads and stores for the tails of rows).
 */
enum pp_isa {
	PP_ISA_BASE = 0,
	PP_ISA_AVX2,
	PP_ISA_AVX512,
};

#if defined(__x86_64__) && defined(__GNUC__)
#define PP_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define PP_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
#endif

/* The best level this processor runs (PP_ISA_BASE off x86-64). */
enum pp_isa pp_isa_best(void);

/*
 * What a processor says it is (cpuid), with the instruction sets that it
 * and the operating system both enable.
 */
struct pp_cpu_id {
	char vendor[13];    /* "GenuineIntel", "AuthenticAMD", "HygonGenuine", ...; "" off x86-64 */
	unsigned family;    /* as Intel and AMD number them: the base family, plus the
			     * extended one where the base is 0xf (0x6; 0x19 for Zen 3 and 4) */
	unsigned model;     /* the base model, plus the extended one << 4 where the base
			     * family is 0x6 or 0xf (0x8f Sapphire Rapids, 0xcf Emerald Rapids) */
	bool avx;
	bool avx2;
	bool avx512vl;      /* AVX-512 VL (with F), the ZMM registers enabled by the system */
	bool avx512bf16;    /* AVX-512 BF16, likewise */
	enum pp_isa isa;    /* the best level of the library's kernels (pp_isa_best()) */
};

/* Fills *id for this processor (all zero but isa off x86-64). */
void pp_cpu_identify(struct pp_cpu_id *id);

#ifdef __cplusplus
}
#endif

#endif
