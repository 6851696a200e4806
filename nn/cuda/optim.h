/*
 * nn/cuda/optim.h: the optimizers on the GPU, with their step count in
 * device memory, so that a step captured as a graph (nn/graph.c) updates
 * the parameters as step t + 1 at every launch, not as the step it was
 * captured at (as PyTorch's Adam with capturable=True).  One kernel for
 * the whole flat parameter vector, one launch a step: each block makes the
 * step's factors from the count, by pp_adam_factors_of() (nn/nn_math.h) as
 * on the host, and the last block to finish counts the step.  Without
 * CUDA in the build every launcher returns -ENODEV.
 */
#ifndef PP_NN_CUDA_OPTIM_H
#define PP_NN_CUDA_OPTIM_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the optimizer kernels read of the step, in device memory. */
struct pp_cuda_optim_state {
	unsigned long long t; /* steps taken */
	unsigned int ticket;  /* an update's blocks that have finished; 0 between updates */
};

/* The settings of an optimizer that a graph keeps (nn/nn_math.h's meaning). */
struct pp_cuda_optim_args {
	bool adam;            /* Adam, else SGD */
	float lr, beta1, beta2, eps, weight_decay;
	float momentum, dampening;
	bool nesterov;
};

#ifdef PP_HAVE_CUDA
/* Sets the step count to t (after a checkpoint's load), in stream order. */
int pp_cuda_optim_set(struct pp_cuda_optim_state *st, unsigned long long t, void *stream);
/*
 * One update of p (n) from g (n) as step t + 1, with buf1 (SGD momentum,
 * Adam first moment) and buf2 (Adam second moment); t + 1 becomes the
 * count.  One launch.
 */
int pp_cuda_optim_step(struct pp_cuda_optim_state *st, const struct pp_cuda_optim_args *a,
		       float *p, const float *g, float *buf1, float *buf2, size_t n, void *stream);
#else
static inline int pp_cuda_optim_set(struct pp_cuda_optim_state *st, unsigned long long t,
				    void *stream)
{
	(void)st, (void)t, (void)stream;
	return -ENODEV;
}

static inline int pp_cuda_optim_step(struct pp_cuda_optim_state *st,
				     const struct pp_cuda_optim_args *a, float *p, const float *g,
				     float *buf1, float *buf2, size_t n, void *stream)
{
	(void)st, (void)a, (void)p, (void)g, (void)buf1, (void)buf2, (void)n, (void)stream;
	return -ENODEV;
}
#endif

#ifdef __cplusplus
}
#endif
#endif
