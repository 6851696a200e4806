/*
 * nn/cuda/optim.cu: SGD and Adam over the flat parameter vector, reading
 * the step count from device memory and counting it there (nn/cuda/optim.h).
 * The element-wise arithmetic is nn/nn_math.h's, the CPU backend's too.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>

#include "common/common_impl.h"
#include "nn/cuda/launch.h"
#include "nn/cuda/optim.h"
#include "nn/nn_math.h"

static __global__ void set_kernel(struct pp_cuda_optim_state *st, unsigned long long t)
{
	st->t = t;
	st->ticket = 0;
}

/*
 * The step an update makes: t + 1, read by each block's first thread at
 * its start (with Adam's factors, by pp_adam_factors_of() as on the host).
 */
static __device__ unsigned long long step_of(const struct pp_cuda_optim_state *st)
{
	return st->t + 1;
}

/*
 * After a block's elements: the last block of the grid to finish (a
 * ticket taken after a fence, as the softmax's) stores the step count t
 * and puts the ticket back for the next update.  Every block read the
 * count before taking its ticket, so none reads it once it moved; one
 * launch an update, where a one-thread kernel counted the step before.
 */
static __device__ void count_step(struct pp_cuda_optim_state *st, unsigned long long t)
{
	__syncthreads();
	if (threadIdx.x == 0) {
		/* not needed for the count (the last block reads no other block's
		 * data), but orders this block's read of st->t before its ticket
		 * beyond doubt */
		__threadfence();
		if (atomicAdd(&st->ticket, 1u) == gridDim.x - 1) {
			st->t = t;
			st->ticket = 0;
		}
	}
}

static __global__ void sgd_kernel(float *p, const float *grad, float *b, size_t n, float lr,
				  float wd, float mom, float damp, bool nesterov,
				  struct pp_cuda_optim_state *st)
{
	__shared__ unsigned long long t;

	if (threadIdx.x == 0)
		t = step_of(st);
	__syncthreads();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		pp_sgd_update(&p[i], &b[i], grad[i], lr, wd, mom, damp, nesterov, t == 1);
	count_step(st, t);
}

static __global__ void adam_kernel(float *p, const float *grad, float *m, float *v, size_t n,
				   float lr, float b1, float b2, float eps, float wd,
				   struct pp_cuda_optim_state *st)
{
	__shared__ unsigned long long t;
	__shared__ struct pp_adam_factors f;

	if (threadIdx.x == 0) {
		t = step_of(st);
		f = pp_adam_factors_of(lr, b1, b2, t);
	}
	__syncthreads();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		pp_adam_update(&p[i], &m[i], &v[i], grad[i], b1, b2, eps, wd, f);
	count_step(st, t);
}

extern "C" int pp_cuda_optim_set(struct pp_cuda_optim_state *st, unsigned long long t, void *stream)
{
	set_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(st, t);
	return pp_cuda_launched("optimizer step count");
}

extern "C" int pp_cuda_optim_step(struct pp_cuda_optim_state *st, const struct pp_cuda_optim_args *a,
				  float *p, const float *g, float *buf1, float *buf2, size_t n,
				  void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;

	if (a->adam) {
		adam_kernel<<<pp_cuda_blocks_for(n), PP_CUDA_THREADS, 0, s>>>(p, g, buf1, buf2, n, a->lr,
									   a->beta1, a->beta2, a->eps,
									   a->weight_decay, st);
		return pp_cuda_launched("adam");
	}
	sgd_kernel<<<pp_cuda_blocks_for(n), PP_CUDA_THREADS, 0, s>>>(p, g, buf1, n, a->lr, a->weight_decay,
						    a->momentum, 1.0f - a->dampening, a->nesterov, st);
	return pp_cuda_launched("sgd");
}
