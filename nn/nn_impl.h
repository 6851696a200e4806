/*
 * nn/nn_impl.h: what the files of nn/ share: the tensor and model
 * structures, the layer descriptions and the CPU kernels (one layer per
 * file, <layer>_forward / <layer>_backward, on a slice of a batch).
 */
#ifndef PP_NN_IMPL_H
#define PP_NN_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/cpu.h"
#include "pinpipe/nn.h"

struct pp_tensor {
	struct pp_device *dev;  /* NULL: host memory */
	enum pp_dtype dtype;
	int ndim;
	size_t shape[PP_TENSOR_MAX_DIMS]; /* elements per dimension */
	size_t numel;           /* product of shape */
	void *data;             /* numel elements of dtype, on dev */
	bool owned;             /* free data on destroy */
};

/* Host or device memory for the nn module, zeroed (nn/devmem.c). */
int pp_nn_mem_alloc(struct pp_device *dev, size_t bytes, void **ptr_p);
void pp_nn_mem_free(struct pp_device *dev, void *ptr);
/* Copies bytes between two places, each on its device (NULL: host); returns when done. */
int pp_nn_mem_copy(struct pp_device *dst_dev, void *dst, struct pp_device *src_dev, const void *src,
		size_t bytes);
/* The name of a device for messages: "cpu" for the host. */
const char *pp_nn_device_name(const struct pp_device *dev);
/* True when the CPU can use the device's memory in place (the host, cpu, sim). */
bool pp_nn_host_addressable(const struct pp_device *dev);
/* True when the device's memory is the host's own (the host, cpu): one place for tensors. */
bool pp_nn_host_is_device(const struct pp_device *dev);
/* The cudaStream_t of a stream of a cuda device (NULL for NULL). */
void *pp_nn_cuda_stream(struct pp_stream *stream);

enum nn_layer_kind {
	NN_CONV = 1,
	NN_MAXPOOL,
	NN_RELU,
	NN_FLATTEN,
	NN_LINEAR,
};

/* One layer: its geometry per sample and where its parameters are. */
struct nn_layer {
	enum nn_layer_kind kind;
	int in_c, in_h, in_w;    /* input shape of one sample (linear: in_c features, 1 x 1) */
	int out_c, out_h, out_w; /* output shape of one sample */
	int k, stride, pad;      /* conv, maxpool: kernel size, stride, zero padding (pixels) */
	size_t in_size;          /* in_c * in_h * in_w floats */
	size_t out_size;         /* out_c * out_h * out_w floats */
	size_t w_off;            /* offset of the weight in the parameter vector (floats) */
	size_t n_w;              /* conv (out_c, in_c, k, k), linear (out_c, in_c) floats */
	size_t b_off;            /* offset of the bias (out_c floats) */
	size_t n_b;              /* out_c for conv and linear, else 0 */
	bool need_din;           /* the backward must produce the input gradient
				  * (a trainable layer precedes) */
	size_t col_off;          /* conv: offset of its columns in a CPU worker's scratch, floats */
	bool sparse_dout;        /* conv: a max-pool (after a ReLU or not) with stride >= its kernel
				  * follows, so at most one output in each pooling window has a
				  * gradient; the CPU backward of the three is pp_nn_conv2d_backward_pooled() */
	bool direct;             /* conv, CPU: computed by conv2d_direct_*() without columns
				  * (set when the CPU backend is set up, pp_nn_conv2d_direct_fits()) */
};

/* Parses a spec for input c x h x w into layers (malloc'd, *n_p of them); message on error. */
int pp_nn_spec_parse(const char *spec, int c, int h, int w, struct nn_layer **layers_p,
		  size_t *n_p, char **expanded_p);

/* ------------------------------------------------------------------ CPU kernels */

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
 * Direct convolution (nn/conv2d_direct.c): true for a conv layer it takes
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

/* Optimizer state: sized by the parameter count. */
struct nn_optim {
	struct pp_optimizer_config cfg;
	uint64_t t;   /* steps taken */
	float *buf1;  /* SGD momentum buffer, Adam first moment (n) */
	float *buf2;  /* Adam second moment (n); NULL for SGD */
};

int pp_nn_optim_check(const struct pp_optimizer_config *cfg);
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

/* ------------------------------------------------------------------ models */

struct nn_worker;
struct nn_graphs;
struct pp_cuda_optim_state;
struct nn_chunk;
struct nn_dw_task;
struct nn_sched;

/* A batch to run through a model. */
struct nn_job {
	bool train;           /* backward and update too */
	size_t batch;         /* samples */
	const uint8_t *in_u8; /* (batch, in_size) or NULL */
	const float *in_f32;  /* (batch, in_size) or NULL */
	const int32_t *labels; /* (batch) */
	float *logits;        /* (batch, classes) on the model's device, or NULL */
};

/*
 * How a model runs on its kind of device: the CPU kernels, where the host
 * addresses the device's memory (the host, cpu, sim), or else the CUDA
 * kernels.
 */
struct nn_backend {
	/* Prepares what the backend needs once the parameters exist. */
	int (*setup)(struct pp_model *m);
	/* Frees it.  Safe after a failed setup. */
	void (*teardown)(struct pp_model *m);
	/* Allocates what a batch of m->capacity samples needs beyond the activations. */
	int (*reserve)(struct pp_model *m);
	/* Runs a job: forward and loss, and backward and update when job->train. */
	int (*run)(struct pp_model *m, struct nn_job *job);
	/* Writes the running totals, resetting them when asked. */
	int (*metrics)(struct pp_model *m, bool reset, struct pp_model_metrics *metrics_p);
	/* run() queues its work on the model's stream (cfg.stream) rather than doing it */
	bool queued;
	/* Queued backends: makes the device's copy of the host's state current before a
	 * capture (outside it).  (optional) */
	int (*prepare)(struct pp_model *m);
	/* Queued backends: the host's bookkeeping of a step launched as a graph, which
	 * run() left undone while m->capturing (steps taken, samples).  (optional) */
	void (*account)(struct pp_model *m, const struct nn_job *job);
};

extern const struct nn_backend pp_nn_backend_cpu;
extern const struct nn_backend pp_nn_backend_cuda;

/* Checks the settings a checkpoint does not hold (threads, mean, std); -EINVAL with a message. */
int pp_nn_model_check_runtime(const struct pp_model_config *cfg);

/*
 * True for layer i when it is the ReLU or max-pool behind a convolution
 * whose pooled kernels run them too (l->sparse_dout: the CPU's
 * pp_nn_conv2d_backward_pooled(), cuda's fused conv + ReLU + pool): the
 * layer's own pass is then skipped.
 */
bool pp_nn_behind_pooled_conv(const struct pp_model *m, size_t i);

/* Waits for the model's queued work (nn_backend.queued); 0 or -errno. */
int pp_nn_model_wait(struct pp_model *m);

/*
 * Hands the gradient's range [offset, offset + count) to the model's
 * gradient hook (pp_model_config.grad_hook), if any: 0, PP_MODEL_GRAD_KEEP
 * (no update this step) or its error.
 */
int pp_nn_model_grads_ready(struct pp_model *m, size_t offset, size_t count);

/*
 * Calls the gradient hook with count 0 between pieces of the backward
 * pass, once some ranges have been handed over: 0, PP_MODEL_GRAD_KEEP or
 * its error.
 */
int pp_nn_model_grads_tick(struct pp_model *m);

/*
 * The end of a step's gradient ranges: the model's grad_sync
 * (pp_model_config.grad_sync), if any: 0, PP_MODEL_GRAD_KEEP or its error.
 */
int pp_nn_model_grads_sync(struct pp_model *m);

/* Activations and per-batch buffers for 'batch' samples (nn/model.c). */
int pp_nn_model_reserve(struct pp_model *m, size_t batch);

/*
 * Steps as graphs (nn/graph.c): set up from cfg.graph once the backend is
 * (0 or -EINVAL: graphs asked for and no stream), freed, all dropped (their
 * buffers moved, the learning rate changed), and a step run through them:
 * launched as a graph, captured, or run by the backend op by op.
 */
int pp_nn_graph_init(struct pp_model *m);
void pp_nn_graph_free(struct pp_model *m);
void pp_nn_graph_drop(struct pp_model *m);
int pp_nn_graph_run(struct pp_model *m, struct nn_job *job);

struct pp_model {
	struct pp_device *dev;    /* NULL: host */
	const struct nn_backend *backend;
	struct pp_model_config cfg;
	char *spec;               /* expanded */
	uint64_t tag;             /* the caller's, kept in checkpoints (pp_model_set_tag()) */
	struct nn_layer *layers;  /* n_layers */
	size_t n_layers;
	size_t n_params;          /* floats */
	float *params;            /* (n_params) on dev */
	float *grads;             /* (n_params) on dev */
	struct nn_optim optim;    /* buffers on dev */
	/* activations, allocated for 'capacity' samples at the first step that needs them */
	size_t capacity;          /* samples */
	float *input;             /* (capacity, in_size of layer 0): the normalised batch */
	float **acts;             /* n_layers x (capacity, out_size) */
	float **dacts;            /* n_layers x (capacity, out_size) */
	int32_t **pool_idx;       /* n_layers x (capacity, out_size) for maxpool, else NULL */
	size_t col_floats;        /* the im2col columns of all conv layers, one sample, floats */
	size_t group;             /* CPU, with convolutions: samples taken forward and backward
				   * together; 0 without */
	/* CPU: a step's batch is cut into at most NN_CHUNKS chunks at boundaries fixed by the
	 * batch size, whatever the thread count (nn/model_cpu.c) */
	struct nn_chunk *chunks;  /* NN_CHUNKS; chunk 0 accumulates into 'grads' */
	size_t chunks_ready;      /* chunks whose gradient buffers are allocated */
	double *losses;           /* (capacity) each sample's loss in the step */
	size_t job_chunks;        /* chunks in the step being run */
	struct nn_dw_task *dw_tasks; /* n_dw_tasks: slices of the parameters, each finished
				      * (gradient, then update) by one task after the chunks */
	size_t n_dw_tasks;
	/* the layers with parameters, the last first: the gradient's ranges in the order of
	 * the tasks, each handed to the gradient hook once its tasks are done */
	struct nn_grad_range *ranges;
	size_t n_ranges;
	size_t next_range;        /* the next range for the hook (worker 0 alone) */
	int range_status;         /* the hook's: 0, PP_MODEL_GRAD_KEEP seen, or -errno (worker 0) */
	void (*work)(struct nn_worker *wk); /* what the workers run for the posted job */
	/* threads: worker 0 is the caller */
	int threads;
	struct nn_worker *workers; /* threads */
	pthread_t *tids;           /* threads - 1 */
	int threads_started;       /* of tids */
	struct nn_job *job;        /* the step being run */
	pthread_mutex_t lock;      /* guards the sleeping threads' waits (struct nn_sched), quit */
	pthread_cond_t go;         /* signalled when a job is posted or the workers are to quit */
	pthread_cond_t done;       /* signalled when the last worker finishes a job */
	struct nn_sched *sched;    /* the counters the threads take work and jobs from (model_cpu.c) */
	unsigned fp_csr;           /* the caller's floating-point controls for the job (x86 MXCSR) */
	bool quit;                 /* the workers are to exit */
	struct pp_model_metrics metrics; /* cuda: samples only; the sums are in 'acc' */
	struct nn_graphs *graphs;  /* the captured steps (nn/graph.c), NULL without graphs */
	bool capturing;            /* run() is being captured: its work is recorded, not done */
	/* cuda */
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
	bool optim_state_stale;   /* optim.t changed on the host (a checkpoint's load) */
};

/* The running totals of a cuda model, in device memory. */
struct nn_cuda_acc {
	double loss_sum;          /* sum of the samples' losses */
	unsigned long long correct; /* samples whose largest logit was their label */
	int bad_label;            /* 1 once a label outside the classes was seen */
};

/*
 * CPU: how long the step's threads spin for the next job before they
 * sleep on a condition variable (nn/model_cpu.c), which the backend sets
 * from the processors the threads leave free; a test's, to run either way.
 */
void pp_nn_cpu_set_spin(struct pp_model *m, uint64_t ns);

/* Builds a model with its buffers, parameters not yet set (nn/model.c). */
int pp_nn_model_new(const char *spec, struct pp_device *dev, const struct pp_model_config *cfg,
		 struct pp_model **model_p);

#endif
