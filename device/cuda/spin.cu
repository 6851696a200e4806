/*
 * device/cuda/spin.cu: a kernel that keeps one GPU thread busy for a
 * given time, measured with the globaltimer register (nanoseconds), as the
 * synthetic compute step of pinpipe-bench's overlap benchmark.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>

#include "common/common_impl.h"
#include "device/spin.h"

static __global__ void spin_kernel(unsigned long long ns)
{
	unsigned long long t0, t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
}

extern "C" int pp_cuda_spin(void *stream, uint64_t ns)
{
	cudaError_t err;

	spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long)ns);
	err = cudaGetLastError();
	if (err != cudaSuccess)
		return pp_error(-EIO, "spin kernel launch: %s", cudaGetErrorString(err));
	return 0;
}
