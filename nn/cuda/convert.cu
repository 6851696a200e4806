/*
 * nn/cuda/convert.cu: uint8 samples to normalised float32 on the device, so
 * that batches can cross the bus as uint8 (4x fewer bytes than float32).
 * The arithmetic of the CPU versions (common/normalize.h): the product
 * x * scale rounded, then the sum with bias rounded; __fmul_rn and
 * __fadd_rn, because nvcc would otherwise fuse the two into an FMA.  Also
 * the plain memory operations of the nn module: zero, copy, read back, wait.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>

#include "common/common_impl.h"
#include "common/normalize.h"
#include "nn/cuda/kernels.h"

static __global__ void u8_to_f32_kernel(const uint8_t *__restrict__ src, float *__restrict__ dst,
					size_t n, float scale, float bias)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		dst[i] = __fadd_rn(__fmul_rn((float)src[i], scale), bias);
}

extern "C" int pp_cuda_u8_to_f32(const uint8_t *src, float *dst, size_t n, float mean, float std,
				 void *stream)
{
	const unsigned threads = 256;
	size_t blocks = (n + threads - 1) / threads;
	float scale, bias;
	cudaError_t err;

	if (n == 0)
		return 0;
	if (blocks > 65535)
		blocks = 65535;
	pp_normalize_u8_params(mean, std, &scale, &bias);
	u8_to_f32_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(src, dst, n, scale,
										 bias);
	err = cudaGetLastError();
	if (err != cudaSuccess)
		return pp_error(-EIO, "u8_to_f32 kernel launch: %s", cudaGetErrorString(err));
	return 0;
}

static int fail(cudaError_t err, const char *what)
{
	return pp_error(-EIO, "%s: %s", what, cudaGetErrorString(err));
}

extern "C" int pp_cuda_zero(void *ptr, size_t bytes, void *stream)
{
	cudaError_t err = cudaMemsetAsync(ptr, 0, bytes, (cudaStream_t)stream);

	return err == cudaSuccess ? 0 : fail(err, "cudaMemsetAsync");
}

extern "C" int pp_cuda_copy(void *dst, const void *src, size_t bytes, void *stream)
{
	cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
					  (cudaStream_t)stream);

	return err == cudaSuccess ? 0 : fail(err, "cudaMemcpyAsync device to device");
}

extern "C" int pp_cuda_read(void *host, const void *src, size_t bytes, void *stream)
{
	cudaError_t err = cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost,
					  (cudaStream_t)stream);

	if (err != cudaSuccess)
		return fail(err, "cudaMemcpyAsync device to host");
	err = cudaStreamSynchronize((cudaStream_t)stream);
	return err == cudaSuccess ? 0 : fail(err, "cudaStreamSynchronize");
}

extern "C" int pp_cuda_sync(void *stream)
{
	cudaError_t err = cudaStreamSynchronize((cudaStream_t)stream);

	return err == cudaSuccess ? 0 : fail(err, "cudaStreamSynchronize");
}
