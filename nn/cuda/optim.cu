/*
 * nn/cuda/optim.cu: SGD and Adam over the flat parameter vector, reading
 * the step count and Adam's factors from device memory (nn/cuda/optim.h).
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
}

/* Step t + 1 and its factors (pp_adam_factors_of(), as on the host). */
static __global__ void tick_kernel(struct pp_cuda_optim_state *st, float lr, float b1, float b2)
{
	const unsigned long long t = st->t + 1;
	const struct pp_adam_factors f = pp_adam_factors_of(lr, b1, b2, t);

	st->t = t;
	st->step = f.step;
	st->bc2_sqrt = f.bc2_sqrt;
}

static __global__ void sgd_kernel(float *p, const float *grad, float *b, size_t n, float lr,
				  float wd, float mom, float damp, bool nesterov,
				  const struct pp_cuda_optim_state *st)
{
	const bool first = st->t == 1;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		pp_sgd_update(&p[i], &b[i], grad[i], lr, wd, mom, damp, nesterov, first);
}

static __global__ void adam_kernel(float *p, const float *grad, float *m, float *v, size_t n,
				   float b1, float b2, float eps, float wd,
				   const struct pp_cuda_optim_state *st)
{
	struct pp_adam_factors f;

	f.step = st->step;
	f.bc2_sqrt = st->bc2_sqrt;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		pp_adam_update(&p[i], &m[i], &v[i], grad[i], b1, b2, eps, wd, f);
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
	int ret;

	tick_kernel<<<1, 1, 0, s>>>(st, a->lr, a->beta1, a->beta2);
	ret = pp_cuda_launched("optimizer step factors");
	if (ret)
		return ret;
	if (a->adam) {
		adam_kernel<<<pp_cuda_blocks_for(n), PP_CUDA_THREADS, 0, s>>>(p, g, buf1, buf2, n, a->beta1, a->beta2,
							     a->eps, a->weight_decay, st);
		return pp_cuda_launched("adam");
	}
	sgd_kernel<<<pp_cuda_blocks_for(n), PP_CUDA_THREADS, 0, s>>>(p, g, buf1, n, a->lr, a->weight_decay,
						    a->momentum, 1.0f - a->dampening, a->nesterov, st);
	return pp_cuda_launched("sgd");
}
