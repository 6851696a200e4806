/*
 * loader/convert.h: the inner loop of float output: uint8 to float32,
 * scaled and shifted, (x * scale + bias), sixteen elements at a time with
 * SSE2 where the target has it (every x86-64), one at a time elsewhere.
 * Not exported.
 */
#ifndef PP_LOADER_CONVERT_H
#define PP_LOADER_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __SSE2__
#include <emmintrin.h>

static inline void pp_convert_u8_f32(const uint8_t *src, float *dst, size_t n, float scale,
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
	for (; i < n; i++)
		dst[i] = (float)src[i] * scale + bias;
}
#else
static inline void pp_convert_u8_f32(const uint8_t *src, float *dst, size_t n, float scale,
				     float bias)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = (float)src[i] * scale + bias;
}
#endif

#endif
