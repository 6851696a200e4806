/*
 * common/normalize.h: the one uint8 -> float32 normalisation of the
 * library, ToTensor followed by Normalize, (x / 255 - mean) / std, used by
 * the loader's float output (loader/convert.h), by nn's CPU input
 * (nn/cpu/model_cpu.c) and, in the same arithmetic, by nn's CUDA kernel
 * (nn/cuda/convert.cu).  Not exported.
 *
 * The arithmetic, in every version and on the device: scale = 1 / (255 std)
 * and bias = -(mean / std), once; then per element the product x * scale
 * rounded to float, then the sum with bias rounded to float.  No FMA: the
 * file is compiled with -ffp-contract=off and the CUDA kernel uses
 * __fmul_rn and __fadd_rn, which the compiler never fuses.  This is the
 * arithmetic nn has always used for its input (x * scale - mean / std,
 * unfused; adding -(mean / std) gives the same bits as subtracting it), so
 * that training gives the same bits as before; the loader's AVX2 version
 * used to fuse, and its SSE2 one did not, so its float output now has the
 * same bits on every processor, and the loader takes its scale and bias
 * from pp_normalize_u8_params() too: a float batch from the loader has the
 * bits nn computes from the same uint8 batch.
 */
#ifndef PP_COMMON_NORMALIZE_H
#define PP_COMMON_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "common/cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Converts n elements: dst[i] = (float)src[i] * scale + bias, rounded after each operation. */
typedef void pp_normalize_u8_fn(const uint8_t *src, float *dst, size_t n, float scale, float bias);

/*
 * The version for isa, which must be one this processor runs (at most
 * pp_isa_best()); every version gives the same bits.
 */
pp_normalize_u8_fn *pp_normalize_u8_version(enum pp_isa isa);

/* The scale and bias of pp_normalize_u8_fn that make (x / 255 - mean) / std. */
static inline void pp_normalize_u8_params(float mean, float std, float *scale_p, float *bias_p)
{
	*scale_p = 1.0f / (255.0f * std);
	*bias_p = -(mean / std);
}

/* (src[i] / 255 - mean) / std into dst, n elements, with the best version for this processor. */
void pp_normalize_u8(const uint8_t *src, float *dst, size_t n, float mean, float std);

#ifdef __cplusplus
}
#endif

#endif
