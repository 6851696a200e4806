/*
 * nn/cuda/kernels.h: launchers of the library's CUDA kernels, callable from
 * C.  Each enqueues its work on 'stream' (a cudaStream_t) and returns 0, or
 * a negative errno value with a message naming the kernel when the launch
 * fails.  Nothing here synchronises the host.
 */
#ifndef PP_NN_CUDA_KERNELS_H
#define PP_NN_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = (src[i] / 255 - mean) / std for i in 0..n-1: ToTensor + Normalize. */
int pp_cuda_u8_to_f32(const uint8_t *src, float *dst, size_t n, float mean, float std,
		      void *stream);

#ifdef __cplusplus
}
#endif
#endif
