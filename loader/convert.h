/*
 * loader/convert.h: the inner loop of float output: uint8 to float32,
 * scaled and shifted (x * scale + bias).  On x86-64, an AVX2 + FMA kernel
 * (eight elements per instruction) where the processor has them, checked
 * once when the loader is created, else SSE2 (every x86-64); one element at
 * a time on other targets.  Not exported.
 */
#ifndef PP_LOADER_CONVERT_H
#define PP_LOADER_CONVERT_H

#include <stddef.h>
#include <stdint.h>

/* Converts n elements: dst[i] = src[i] * scale + bias. */
typedef void pp_convert_u8_f32_fn(const uint8_t *src, float *dst, size_t n, float scale,
				  float bias);

static inline void pp_convert_u8_f32_scalar(const uint8_t *src, float *dst, size_t n,
					    float scale, float bias)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = (float)src[i] * scale + bias;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

static inline void pp_convert_u8_f32_sse2(const uint8_t *src, float *dst, size_t n, float scale,
					  float bias)
{
	const __m128i zero = _mm_setzero_si128();
	const __m128 s = _mm_set1_ps(scale), b = _mm_set1_ps(bias);
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(src + i));
		__m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
		__m128i q[4] = { _mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero),
				 _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero) };
		for (int k = 0; k < 4; k++)
			_mm_storeu_ps(dst + i + 4 * k,
				      _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(q[k]), s), b));
	}
	pp_convert_u8_f32_scalar(src + i, dst + i, n - i, scale, bias);
}

__attribute__((target("avx2,fma"))) static inline void
pp_convert_u8_f32_avx2(const uint8_t *src, float *dst, size_t n, float scale, float bias)
{
	const __m256 s = _mm256_set1_ps(scale), b = _mm256_set1_ps(bias);
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m128i v0 = _mm_loadl_epi64((const __m128i *)(src + i));
		__m128i v1 = _mm_loadl_epi64((const __m128i *)(src + i + 8));
		__m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v0));
		__m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v1));
		_mm256_storeu_ps(dst + i, _mm256_fmadd_ps(f0, s, b));
		_mm256_storeu_ps(dst + i + 8, _mm256_fmadd_ps(f1, s, b));
	}
	pp_convert_u8_f32_scalar(src + i, dst + i, n - i, scale, bias);
}

/* The fastest kernel this processor runs. */
static inline pp_convert_u8_f32_fn *pp_convert_u8_f32_best(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return pp_convert_u8_f32_avx2;
	return pp_convert_u8_f32_sse2;
}
#else
static inline pp_convert_u8_f32_fn *pp_convert_u8_f32_best(void)
{
	return pp_convert_u8_f32_scalar;
}
#endif

#endif
