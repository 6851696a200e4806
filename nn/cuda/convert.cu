/*
 * nn/cuda/convert.cu: a step's prologue, in one launch: uint8 samples to
 * normalised float32 on the device, so that batches can cross the bus as
 * uint8 (4x fewer bytes than float32), the gradients' zeros and the Linear
 * layers' biases.  The normalisation's arithmetic is the CPU versions'
 * (common/normalize.h): the product x * scale rounded, then the sum with
 * bias rounded; __fmul_rn and __fadd_rn, because nvcc would otherwise fuse
 * the two into an FMA.  Also the plain memory operations of the nn module:
 * zero, copy, read back, wait.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>

#include "common/common_impl.h"
#include "common/normalize.h"
#include "nn/cuda/kernels.h"

/*
 * A step's prologue: row y of the grid does part y, the fills first, then
 * the normalisation, then the zeros, each in a grid-stride loop of its
 * own over the grid's x.
 */
static __global__ void prologue_kernel(struct pp_cuda_prologue p, float scale, float bias)
{
	const int part = (int)blockIdx.y;
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (part < p.fills) {
		const size_t cols = (size_t)p.cols[part], n = (size_t)p.rows * cols;
		float *out = p.out[part];
		const float *b = p.b[part];

		for (size_t i = first; i < n; i += stride)
			out[i] = b[i % cols];
	} else if (part == p.fills && p.n > 0) {
		for (size_t i = first; i < p.n; i += stride)
			p.dst[i] = __fadd_rn(__fmul_rn((float)p.src[i], scale), bias);
	} else if (part == p.fills + (p.n > 0)) {
		for (size_t i = first; i < p.zero_n; i += stride)
			p.zero[i] = 0.0f;
	}
}

extern "C" int pp_cuda_prologue(const struct pp_cuda_prologue *p, void *stream)
{
	const unsigned parts = (unsigned)p->fills + (p->n > 0) + (p->zero_n > 0);
	size_t most = PP_MAX(p->n, p->zero_n), blocks;
	float scale = 0.0f, bias = 0.0f;
	cudaError_t err;

	if (p->fills < 0 || p->fills > PP_CUDA_FILLS)
		return pp_error(-EINVAL, "prologue: %d arrays to fill (0 to %d)", p->fills, PP_CUDA_FILLS);
	if (parts == 0)
		return 0;
	for (int k = 0; k < p->fills; k++)
		most = PP_MAX(most, (size_t)p->rows * (size_t)p->cols[k]);
	/* a grid-stride loop: at most 1024 blocks a part (every part gets as many) */
	blocks = PP_MIN(PP_MAX((most + 255) / 256, (size_t)1), (size_t)1024);
	if (p->n > 0)
		pp_normalize_u8_params(p->mean, p->std, &scale, &bias);
	prologue_kernel<<<dim3((unsigned)blocks, parts), 256, 0, (cudaStream_t)stream>>>(*p, scale, bias);
	err = cudaGetLastError();
	if (err != cudaSuccess)
		return pp_error(-EIO, "prologue kernel launch: %s", cudaGetErrorString(err));
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
