/*
 * common/cpu.c: the processor's instruction sets, asked of the compiler's
 * cpuid wrapper (which also checks that the system saves their registers),
 * and its vendor, family and model, asked of cpuid itself.
 */
#include "config.h"

#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

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

void pp_cpu_identify(struct pp_cpu_id *id)
{
	memset(id, 0, sizeof(*id));
	id->isa = pp_isa_best();
#if defined(__x86_64__) && defined(__GNUC__)
	unsigned eax, ebx, ecx, edx, base;

	if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
		memcpy(id->vendor, &ebx, 4);
		memcpy(id->vendor + 4, &edx, 4);
		memcpy(id->vendor + 8, &ecx, 4);
	}
	if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
		base = (eax >> 8) & 0xf;
		id->family = base + (base == 0xf ? (eax >> 20) & 0xff : 0);
		id->model = ((eax >> 4) & 0xf) | (base == 0x6 || base == 0xf ? ((eax >> 16) & 0xf) << 4 : 0);
	}
	__builtin_cpu_init();
	id->avx = __builtin_cpu_supports("avx");
	id->avx2 = __builtin_cpu_supports("avx2");
	id->avx512vl = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
	id->avx512bf16 = id->avx512vl && __builtin_cpu_supports("avx512bf16");
#endif
}
