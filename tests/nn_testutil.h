/*
 * tests/nn_testutil.h: what the nn test programs (test_nn_layers,
 * test_nn_model, test_nn_checkpoint, test_nn_gpu_math, test_nn_cuda) share: a repeatable
 * random stream, small models trained on synthetic batches, and the small GEMM kernels
 * emulated on the CPU.
 */
#ifndef PP_TESTS_NN_TESTUTIL_H
#define PP_TESTS_NN_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/nn.h"

/* The state of pp_test_frand(); a test may set it to replay a stream. */
extern uint64_t pp_test_rng;

/* The next float of the stream, uniform in [-1, 1). */
float pp_test_frand(void);

/* n floats of pp_test_frand(), malloc'd with one more (never NULL: fails the test). */
float *pp_test_rand_floats(size_t n);

/* n zeros, calloc'd with one more (never NULL). */
float *pp_test_zero_floats(size_t n);

/* A synthetic uint8 batch of 'batch' 1x28x28 images and labels, from 'seed'. */
struct pp_tensor *pp_test_synth_batch(size_t batch, uint64_t seed, int32_t *labels);

/* The model's parameters, malloc'd; fails the test on error. */
float *pp_test_read_params(struct pp_model *m);

/* Trains 'steps' steps on synthetic batches of 16 from seeds first, first + 1, ... */
void pp_test_train(struct pp_model *m, int steps, uint64_t first);

/*
 * A model of 'spec' on dev (NULL: the CPU) made as cfg says: its logits
 * on x (batch x 10, on dev) into z, then 'steps' training steps on x and
 * labels (on dev); returns its parameters (malloc'd; their count in *n_p
 * unless NULL) and destroys it.  Fails the test on error.
 */
float *pp_test_eval_train(const char *spec, struct pp_device *dev,
			  const struct pp_model_config *cfg, struct pp_tensor *x,
			  const int32_t *labels, size_t batch, int steps, float *z, size_t *n_p);

#include "nn/cuda/kernels.h"

/* A GEMM the small kernels are tested on: C (m x n) = op(A) op(B) + beta C, op(A) m x k. */
struct pp_test_gemm_case {
	bool ta, tb;
	int m, n, k;
	int pad;     /* the leading dimensions this far past the matrices */
	float beta;
};

/*
 * The cases test_nn_gpu_math (emulated) and test_nn_cuda (on the GPU)
 * both run, each within pp_small_gemm_fits(): the MLP's GEMMs at batch
 * 100 (forward op(A) transposed, weight gradient op(B) transposed and
 * added to, input gradient plain), and odd shapes: rows not a block's, k
 * shorter than the parts, leading dimensions past the matrix, beta 0.
 */
extern const struct pp_test_gemm_case pp_test_gemm_cases[];
extern const size_t pp_test_gemm_ncases;

/*
 * The product of case t on matrices a, b and c (its leading dimensions);
 * the floats of A, B and C, leading dimensions included, in *na, *nb, *nc.
 */
struct pp_cuda_gemm pp_test_gemm_of(const struct pp_test_gemm_case *t, const float *a,
				    const float *b, float *c, size_t *na, size_t *nb, size_t *nc);

/*
 * The kernel of nn/cuda/small_gemm.h that pp_cuda_sgemm() launches for g
 * (g->ta: a warp per element; else blocks of rows and parts), every
 * thread's arithmetic in the kernel's order, on host memory: C's bits
 * (and g->bias's, the untransposed kernel's row more) as the GPU writes
 * them.
 */
void pp_test_small_gemm(const struct pp_cuda_gemm *g);

#endif
