/*
 * common/cpu.h: the one probe of the processor's instruction sets, and the
 * one spelling of the target attribute of each level, for the kernels that
 * come in a version per level (nn/, the loader's conversion).  Not exported.
 *
 * A function marked PP_TARGET_AVX2 or PP_TARGET_AVX512 may run only where
 * pp_isa_best() returns that level or a higher one.
 */
#ifndef PP_COMMON_CPU_H
#define PP_COMMON_CPU_H

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif
