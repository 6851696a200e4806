/*
 * nn/cpu/cpu_impl.h: what the files of the CPU backend share (the host,
 * cpu and sim devices): the kernels, one layer per file,
 * <layer>_forward / <layer>_backward on a slice of a batch, the loss and
 * the optimizers, and the floating-point environment of the step's
 * threads (nn/cpu/model_cpu.c).
 */
#ifndef PP_NN_CPU_IMPL_H
#define PP_NN_CPU_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/cpu.h"
#include "nn/nn_impl.h"

/* ------------------------------------------------------------------ kernels */

/*
 * The hot kernels come in a version per instruction set (enum pp_isa,
 * common/cpu.h), chosen at run time with pp_isa_best(), each compiled with
 * PP_TARGET_AVX2 or PP_TARGET_AVX512.
 */

/*
 * The floating-point environment of a model's CPU work.  Unless the model
 * keeps subnormal numbers (pp_model_config.keep_denormals), its threads run
 * with MXCSR's flush-to-zero and denormals-are-zero bits set, as TensorFlow
 * runs its CPU kernels: on x86 each subnormal result or operand otherwise
 * costs a microcode assist of a hundred cycles or more, and training makes
 * them (Adam's first moment of a parameter whose gradient stays zero decays
 * by beta1 a step, subnormal after some 800 steps).  nn_fp_enter() sets the
 * bits when 'flush', clears them when not (keep_denormals: IEEE whatever the
 * caller had), and returns the caller's MXCSR; nn_fp_leave() puts its two
 * bits back as they were, and keeps the exception flags that the work
 * raised, as any other call would.  The model's own threads take the
 * caller's controls (rounding mode included) at each job, nn_fp_follow(),
 * so that which thread ran a part changes nothing in its arithmetic.
 * Nothing is done on other processors.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define NN_MXCSR_FTZ_DAZ 0x8040u /* bit 15 flush to zero, bit 6 denormals are zero */
#define NN_MXCSR_FLAGS 0x3fu     /* bits 0-5: the exception flags, each thread's own */
static inline unsigned nn_fp_enter(bool flush)
{
	const unsigned old = _mm_getcsr();
	const unsigned want = flush ? old | NN_MXCSR_FTZ_DAZ : old & ~NN_MXCSR_FTZ_DAZ;

	if (want != old)
		_mm_setcsr(want);
	return old;
}

/* The controls of 'csr' (another thread's MXCSR) in this thread, its own flags kept. */
static inline void nn_fp_follow(unsigned csr)
{
	const unsigned now = _mm_getcsr();
	const unsigned want = (now & NN_MXCSR_FLAGS) | (csr & ~NN_MXCSR_FLAGS);

	if (now != want)
		_mm_setcsr(want);
}

/* This thread's MXCSR, for nn_fp_follow() in another. */
static inline unsigned nn_fp_get(void)
{
	return _mm_getcsr();
}

static inline void nn_fp_leave(unsigned old)
{
	const unsigned now = _mm_getcsr();
	const unsigned want = (now & ~NN_MXCSR_FTZ_DAZ) | (old & NN_MXCSR_FTZ_DAZ);

	if (now != want)
		_mm_setcsr(want);
}
#else
static inline unsigned nn_fp_enter(bool flush)
{
	(void)flush;
	return 0;
}

static inline void nn_fp_leave(unsigned old)
{
	(void)old;
}

static inline void nn_fp_follow(unsigned csr)
{
	(void)csr;
}

static inline unsigned nn_fp_get(void)
{
	return 0;
}
#endif

/* The mask of the first n of 16 lanes (none for n <= 0, all for n >= 16). */
static inline uint16_t nn_lanes16(int n)
{
	return n >= 16 ? 0xffff : n <= 0 ? 0 : (uint16_t)((1u << n) - 1);
}

/* 4 floats, the SSE width every x86-64 has (GCC and clang vector extension). */
typedef float nn_f32x4 __attribute__((vector_size(16)));

/* y[0..n) += a x[0..n), 4 at a time: the compilers leave short loops of unknown length scalar. */
static inline void nn_axpy(float *restrict y, float a, const float *restrict x, int n)
{
	int i = 0;

	for (; i + 4 <= n; i += 4) {
		nn_f32x4 vx, vy;

		memcpy(&vx, x + i, sizeof(vx));
		memcpy(&vy, y + i, sizeof(vy));
		vy += a * vx;
		memcpy(y + i, &vy, sizeof(vy));
	}
	for (; i < n; i++)
		y[i] += a * x[i];
}

/* n is the number of samples of the slice; pointers point at its first sample. */

/* out (n, out_c) = in (n, in_c) W^T (out_c, in_c) + b (out_c) */
void pp_nn_linear_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
		    const float *b, int n);
/* dw += dout^T in; db += sum dout; din (may be NULL) = dout W */
void pp_nn_linear_backward(const struct nn_layer *l, float *din, float *dw, float *db,
		     const float *dout, const float *in, const float *w, int n);

/* din (n, in_c) = dout W */
void pp_nn_linear_backward_input(const struct nn_layer *l, float *din, const float *dout, const float *w,
			   int n);
/*
 * The columns j0..j1-1 of dW: dw[:, j0:j1] = beta dw[:, j0:j1] + dout^T
 * in[:, j0:j1], and when db is not NULL db = beta db + sum dout, the
 * samples added in order (beta is 0 or 1).
 */
void pp_nn_linear_backward_params(const struct nn_layer *l, float *dw, float *db, const float *dout,
			    const float *in, int n, int j0, int j1, float beta);

/* col (n, out_h out_w, in_c k k): receives each sample's im2col columns */
void pp_nn_conv2d_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
		    const float *b, float *col, int n);
/*
 * The same, the output by the code for isa (only one the CPU has): for
 * PP_ISA_AVX512 where pp_nn_conv2d_direct_forward_fits512(), the direct kernel
 * from the input; otherwise (and for any other isa) a GEMM on the columns.
 */
void pp_nn_conv2d_forward_impl(const struct nn_layer *l, float *out, const float *in, const float *w,
			 const float *b, float *col, int n, enum pp_isa isa);
/*
 * col: the columns pp_nn_conv2d_forward() made of these n samples; dcol: scratch
 * of one sample's columns; din may be NULL; dout (n, out_c, out_h, out_w)
 */
void pp_nn_conv2d_backward(const struct nn_layer *l, float *din, float *dw, float *db,
		     const float *dout, const float *w, const float *col, float *dcol, int n);
/*
 * The backward of conv (l), then a ReLU when relu_out (its output, or its
 * input: only the sign is read; shaped as the conv's) is not NULL, then 'pool', a max-pool with stride >= its
 * kernel (l->sparse_dout), from the pool's output gradient dpool and
 * indices idx (n, pool out_size): only the positions the pool selected
 * and the ReLU passed are visited.  Other arguments as pp_nn_conv2d_backward().
 */
void pp_nn_conv2d_backward_pooled(const struct nn_layer *l, const struct nn_layer *pool, float *din,
			    float *dw, float *db, const float *dpool, const int32_t *idx,
			    const float *relu_out, const float *w, const float *cols, float *dcol,
			    int n);
/*
 * The same, in the version chosen by the flags: the input gradient added
 * window by window into din (scatter; where the layer allows it: stride
 * 1, no padding, k <= 8; with AVX-512, for kernels 3 and 5 behind a 2 x 2
 * pool, in registers a row at a time) or through dcol and col2im;
 * the code for isa (only one the CPU has, pp_isa_best()).  For both, dcol
 * holds pp_nn_conv2d_backward_pooled_scratch() floats.
 */
void pp_nn_conv2d_backward_pooled_impl(const struct nn_layer *l, const struct nn_layer *pool,
				 float *din, float *dw, float *db, const float *dpool,
				 const int32_t *idx, const float *relu_out, const float *w,
				 const float *cols, float *dcol, int n, bool scatter, enum pp_isa isa);
/* The floats of dcol that pp_nn_conv2d_backward_pooled() takes for conv l behind pool: at least one sample's columns */
size_t pp_nn_conv2d_backward_pooled_scratch(const struct nn_layer *l, const struct nn_layer *pool);

/*
 * Direct convolution (nn/cpu/conv2d_direct.c): true for a conv layer it takes
 * (stride 1, no padding, one input channel, kernel <= 8, a max-pool
 * behind: sparse_dout), on a CPU with AVX2 and FMA.
 */
bool pp_nn_conv2d_direct_fits(const struct nn_layer *l);
/* out (n, out_c, out_h, out_w) = b + W * in, as pp_nn_conv2d_forward() but without columns */
void pp_nn_conv2d_direct_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
			   const float *b, int n);
/* The two versions it chooses between (the AVX2 one only where the CPU has AVX2 and FMA). */
void pp_nn_conv2d_direct_forward_portable(const struct nn_layer *l, float *out, const float *in,
				    const float *w, const float *b, int n);
void pp_nn_conv2d_direct_forward_avx2(const struct nn_layer *l, float *out, const float *in,
				const float *w, const float *b, int n);
/*
 * The AVX-512 one, only where pp_isa_best() is PP_ISA_AVX512; any number
 * of input channels and kernel size, at stride 1 without padding.
 */
void pp_nn_conv2d_direct_forward_avx512(const struct nn_layer *l, float *out, const float *in,
				  const float *w, const float *b, int n);
/*
 * True for a conv layer whose forward pp_nn_conv2d_forward() makes with
 * pp_nn_conv2d_direct_forward_avx512() on a CPU with AVX-512: stride 1, no
 * padding, at most 1024 taps (C K K: the thin GEMMs of small networks).
 */
bool pp_nn_conv2d_direct_forward_fits512(const struct nn_layer *l);
/*
 * As pp_nn_conv2d_backward_pooled(), the weight gradient from the layer's input
 * in (n, in_c, in_h, in_w) in place of columns, din (may be NULL) written
 * whole.
 */
void pp_nn_conv2d_direct_backward_pooled(const struct nn_layer *l, const struct nn_layer *pool,
				   float *din, float *dw, float *db, const float *dpool,
				   const int32_t *idx, const float *relu_out, const float *w,
				   const float *in, int n);
void pp_nn_conv2d_direct_backward_pooled_portable(const struct nn_layer *l, const struct nn_layer *pool,
					    float *din, float *dw, float *db, const float *dpool,
					    const int32_t *idx, const float *relu_out,
					    const float *w, const float *in, int n);
void pp_nn_conv2d_direct_backward_pooled_avx2(const struct nn_layer *l, const struct nn_layer *pool,
					float *din, float *dw, float *db, const float *dpool,
					const int32_t *idx, const float *relu_out, const float *w,
					const float *in, int n);
/*
 * The AVX-512 one: where pp_isa_best() is PP_ISA_AVX512, for k <= 5 and
 * (out_h + 2 (k - 1)) out_w <= 4096.
 */
void pp_nn_conv2d_direct_backward_pooled_avx512(const struct nn_layer *l, const struct nn_layer *pool,
					  float *din, float *dw, float *db, const float *dpool,
					  const int32_t *idx, const float *relu_out,
					  const float *w, const float *in, int n);

/* idx (n, out_c, out_h, out_w): the index in the sample's input of each maximum */
void pp_nn_maxpool_forward(const struct nn_layer *l, float *out, int32_t *idx, const float *in, int n);
/*
 * The max-pool of ReLU(in), from in: out = max(0, the window's maximum),
 * idx the window's maximum in 'in' (which may differ from the index of
 * pp_nn_maxpool_forward() on ReLU(in) only where out is 0).
 */
void pp_nn_maxpool_relu_forward(const struct nn_layer *l, float *out, int32_t *idx, const float *in,
			  int n);
/*
 * Either of the two (relu), with the version of the 2x2 windows of stride
 * 2 for isa (only one the CPU has, pp_isa_best()): portable (four windows
 * at a time) or AVX-512 (sixteen); the same choices and values.
 */
void pp_nn_maxpool_forward_impl(const struct nn_layer *l, float *out, int32_t *idx, const float *in,
			  int n, bool relu, enum pp_isa isa);
void pp_nn_maxpool_backward(const struct nn_layer *l, float *din, const float *dout,
		      const int32_t *idx, int n);

void pp_nn_relu_forward(float *out, const float *in, size_t count);
/* din = dout where out > 0, else 0 */
void pp_nn_relu_backward(float *din, const float *dout, const float *out, size_t count);

/*
 * Softmax cross-entropy of n samples of c logits.  Writes each sample's
 * loss to losses[0..n) and adds the correct predictions to *correct; writes
 * (softmax - onehot) * scale to dlogits unless it is NULL.  Returns 0 or
 * -ERANGE for a label outside 0..c-1.
 */
int pp_nn_softmax_xent(const float *logits, const int32_t *labels, int n, int c, float scale,
		 float *dlogits, double *losses, uint64_t *correct);

/* ------------------------------------------------------------------ optimizers */

/* One update of p (n) from g (n); cpu. */
void pp_nn_optim_step_cpu(struct nn_optim *o, float *p, const float *g, size_t n);

/* ------------------------------------------------------------------ the MLP's step: vector versions */

/* The kernels below come in a version for each enum pp_isa (above). */
/* pp_nn_optim_step_cpu() in the version for isa (which the CPU must have). */
void pp_nn_optim_step_isa(struct nn_optim *o, float *p, const float *g, size_t n, enum pp_isa isa);
/* pp_nn_softmax_xent() in the version for isa (AVX-512 for up to 16 classes, else portable). */
int pp_nn_softmax_xent_isa(const float *logits, const int32_t *labels, int n, int c, float scale,
		     float *dlogits, double *losses, uint64_t *correct, enum pp_isa isa);
/* pp_nn_linear_backward_params() in the version for isa: AVX-512, or else the GEMM of CBLAS. */
void pp_nn_linear_backward_params_isa(const struct nn_layer *l, float *dw, float *db, const float *dout,
				const float *in, int n, int j0, int j1, float beta, enum pp_isa isa);

/* ------------------------------------------------------------------ the step's threads */

/* How the CPU backend runs a layer (nn/cpu/model_cpu.c's state has one per layer). */
struct nn_cpu_layer {
	size_t col_off; /* conv: offset of its columns in a worker's scratch, floats */
	bool direct;    /* conv: computed by pp_nn_conv2d_direct_*() without columns
			 * (pp_nn_conv2d_direct_fits()) */
};

/*
 * How long the step's threads spin for the next job before they sleep
 * on a condition variable (nn/cpu/model_cpu.c), which the backend sets
 * from the processors the threads leave free; a test's, to run either way.
 */
void pp_nn_cpu_set_spin(struct pp_model *m, uint64_t ns);

#endif
