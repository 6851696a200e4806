/*
 * common/cpu.c: the processor's instruction sets, asked of the compiler's
 * cpuid wrapper.
 */
#include "config.h"

#include "common/cpu.h"

enum pp_isa pp_isa_best(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	/* the library's kernels may run before the compiler's own constructor did */
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("fma"))
		return PP_ISA_AVX512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return PP_ISA_AVX2;
#endif
	return PP_ISA_BASE;
}
