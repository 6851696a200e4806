/*
 * nn/cuda/launch.h: what the .cu files of nn/cuda share to launch their
 * kernels: the block size of a thread-per-element kernel, its grid for a
 * grid-stride loop, and the check of a launch.  Included by nvcc only.
 */
#ifndef PP_NN_CUDA_LAUNCH_H
#define PP_NN_CUDA_LAUNCH_H

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stddef.h>

#include "common/common_impl.h"

/* Threads of a block of the kernels that take a thread per element. */
#define PP_CUDA_THREADS 256

/* Blocks of PP_CUDA_THREADS for n elements in a grid-stride loop: at least 1, at most 65535. */
static inline unsigned pp_cuda_blocks_for(size_t n)
{
	size_t b = (n + PP_CUDA_THREADS - 1) / PP_CUDA_THREADS;

	return (unsigned)(b == 0 ? 1 : b > 65535 ? 65535 : b);
}

/* 0, or -EIO naming the kernel when its launch failed. */
static inline int pp_cuda_launched(const char *kernel)
{
	cudaError_t err = cudaGetLastError();

	if (err != cudaSuccess)
		return pp_error(-EIO, "%s kernel launch: %s", kernel, cudaGetErrorString(err));
	return 0;
}

#endif
