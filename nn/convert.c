/*
 * nn/convert.c: uint8 samples to normalised float32 on the CPU: ToTensor
 * followed by Normalize, (x / 255 - mean) / std, computed as
 * x * (1 / (255 std)) - mean / std like nn/cuda/convert.cu.
 *
 * Three versions, chosen at run time: AVX-512 (16 at a time), AVX2 (8)
 * and portable (4, baseline x86-64).  All round the product and then the
 * difference, without FMA, so that they give the same bits as before
 * they were vectorised.
 */
#include "config.h"

#include <immintrin.h>

#include "nn/nn_internal.h"

/* 4 lanes of int32, converted to nn_f32x4 */
typedef int32_t nn_i32x4 __attribute__((vector_size(16)));

static void u8_to_f32_portable(float *dst, const uint8_t *src, size_t count, float scale,
			       float shift)
{
	size_t i = 0;

	for (; i + 4 <= count; i += 4) {
		const nn_i32x4 u = { src[i], src[i + 1], src[i + 2], src[i + 3] };
		nn_f32x4 x = __builtin_convertvector(u, nn_f32x4);

		x = x * scale;
		x = x - shift;
		memcpy(dst + i, &x, sizeof(x));
	}
	for (; i < count; i++)
		dst[i] = (float)src[i] * scale - shift;
}

__attribute__((target("avx2"))) static void u8_to_f32_avx2(float *dst, const uint8_t *src,
							    size_t count, float scale, float shift)
{
	const __m256 s = _mm256_set1_ps(scale), t = _mm256_set1_ps(shift);
	size_t i = 0;

	for (; i + 8 <= count; i += 8) {
		const __m128i u = _mm_loadl_epi64((const __m128i *)(const void *)(src + i));
		const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(u));

		_mm256_storeu_ps(dst + i, _mm256_sub_ps(_mm256_mul_ps(x, s), t));
	}
	for (; i < count; i++)
		dst[i] = (float)src[i] * scale - shift;
}

PP_TARGET_AVX512 static void
u8_to_f32_avx512(float *dst, const uint8_t *src, size_t count, float scale, float shift)
{
	const __m512 s = _mm512_set1_ps(scale), t = _mm512_set1_ps(shift);

	for (size_t i = 0; i < count; i += 16) {
		const __mmask16 k = count - i >= 16 ? 0xffff : (__mmask16)((1u << (count - i)) - 1);
		const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, src + i)));

		/* the rounding forms, which GCC does not contract into an FMA as it does the plain ones */
		const __m512 y = _mm512_sub_round_ps(_mm512_mul_round_ps(x, s, _MM_FROUND_CUR_DIRECTION), t,
						     _MM_FROUND_CUR_DIRECTION);

		_mm512_mask_storeu_ps(dst + i, k, y);
	}
}

void pp_nn_u8_to_f32_isa(float *dst, const uint8_t *src, size_t count, float mean, float std,
		   enum pp_isa isa)
{
	const float scale = 1.0f / (255.0f * std), shift = mean / std;

	if (isa == PP_ISA_AVX512)
		u8_to_f32_avx512(dst, src, count, scale, shift);
	else if (isa == PP_ISA_AVX2)
		u8_to_f32_avx2(dst, src, count, scale, shift);
	else
		u8_to_f32_portable(dst, src, count, scale, shift);
}

void pp_nn_u8_to_f32(float *dst, const uint8_t *src, size_t count, float mean, float std)
{
	pp_nn_u8_to_f32_isa(dst, src, count, mean, std, pp_isa_best());
}
