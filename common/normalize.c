/*
 * common/normalize.c: uint8 -> float32 normalisation (common/normalize.h)
 * in a version per instruction set, chosen at run time: AVX-512 (16 at a
 * time, the tail masked), AVX2 (8 at a time) and portable (4 at a time,
 * baseline x86-64).  Compiled with -ffp-contract=off (common/Makefile.inc),
 * so that no version fuses the product and the sum into an FMA: all give
 * the same bits.
 */
#include "config.h"

#include <string.h>

#include "common/normalize.h"

#ifdef PP_TARGET_AVX2
#include <immintrin.h>
#endif

typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));

static void normalize_portable(const uint8_t *src, float *dst, size_t n, float scale, float bias)
{
	size_t i = 0;

	for (; i + 4 <= n; i += 4) {
		const i32x4 u = { src[i], src[i + 1], src[i + 2], src[i + 3] };
		f32x4 x = __builtin_convertvector(u, f32x4);

		x = x * scale + bias;
		memcpy(dst + i, &x, sizeof(x));
	}
	for (; i < n; i++)
		dst[i] = (float)src[i] * scale + bias;
}

#ifdef PP_TARGET_AVX2
PP_TARGET_AVX2 static void normalize_avx2(const uint8_t *src, float *dst, size_t n, float scale,
					   float bias)
{
	const __m256 s = _mm256_set1_ps(scale), b = _mm256_set1_ps(bias);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		const __m128i u = _mm_loadl_epi64((const __m128i *)(const void *)(src + i));
		const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(u));

		_mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_mul_ps(x, s), b));
	}
	for (; i < n; i++)
		dst[i] = (float)src[i] * scale + bias;
}

PP_TARGET_AVX512 static void normalize_avx512(const uint8_t *src, float *dst, size_t n, float scale,
					       float bias)
{
	const __m512 s = _mm512_set1_ps(scale), b = _mm512_set1_ps(bias);

	for (size_t i = 0; i < n; i += 16) {
		const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, src + i)));

		_mm512_mask_storeu_ps(dst + i, k, _mm512_add_ps(_mm512_mul_ps(x, s), b));
	}
}
#endif

pp_normalize_u8_fn *pp_normalize_u8_version(enum pp_isa isa)
{
#ifdef PP_TARGET_AVX2
	if (isa == PP_ISA_AVX512)
		return normalize_avx512;
	if (isa == PP_ISA_AVX2)
		return normalize_avx2;
#endif
	return normalize_portable;
}

void pp_normalize_u8(const uint8_t *src, float *dst, size_t n, float mean, float std)
{
	float scale, bias;

	pp_normalize_u8_params(mean, std, &scale, &bias);
	pp_normalize_u8_version(pp_isa_best())(src, dst, n, scale, bias);
}
