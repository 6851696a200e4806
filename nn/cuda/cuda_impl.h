/*
 * nn/cuda/cuda_impl.h: what the CUDA backend of a model shares
 * (nn/cuda/model_cuda.c, and the tests of its kernels): its state behind
 * m->ctx and the running totals it keeps in device memory.  The kernels'
 * launchers are nn/cuda/kernels.h, nn/cuda/optim.h and nn/cuda/fused.h.
 */
#ifndef PP_NN_CUDA_IMPL_H
#define PP_NN_CUDA_IMPL_H

#include "nn/nn_impl.h"

struct pp_cuda_optim_state;

/* The running totals of a cuda model, in device memory. */
struct nn_cuda_acc {
	double loss_sum;          /* sum of the samples' losses */
	unsigned long long correct; /* samples whose largest logit was their label */
	int bad_label;            /* 1 once a label outside the classes was seen */
};

/* The CUDA backend's state (m->ctx): the stream, cuBLAS, and the step's scratch on the device. */
struct nn_cuda {
	void *stream;             /* cudaStream_t of cfg.stream */
	void *blas;               /* cuBLAS handle on it */
	float *col_all;           /* (capacity OH OW, C K K) largest conv */
	float *dcol_all;          /* same */
	float *perm;              /* (OC, capacity OH OW) largest conv output */
	float *red;               /* the reductions' partial sums, the largest of a step
				   * at capacity (pp_red_floats(), nn/cuda/fused.h) */
	void *xent_scratch;       /* the loss's ticket and block parts for capacity samples
				   * (pp_xent_scratch_bytes()) */
	struct nn_cuda_acc *acc;  /* device: running loss, correct count, bad-label flag */
	struct pp_cuda_optim_state *optim_state; /* device: the optimizer's step count */
};

#endif
