/*
 * nn/cuda/kernels.h: launchers of the library's CUDA kernels and cuBLAS
 * calls, callable from C.  Each enqueues its work on 'stream' (a
 * cudaStream_t; NULL is the legacy default stream) and returns 0, or a
 * negative errno value with a message naming the kernel when the launch
 * fails.  Nothing here synchronises the host except pp_cuda_sync() and
 * pp_cuda_read().  Arrays are row-major as in the CPU kernels of nn/,
 * which these mirror op by op.  Without CUDA in the build every launcher
 * is a stub that returns -ENODEV.
 */
#ifndef PP_NN_CUDA_KERNELS_H
#define PP_NN_CUDA_KERNELS_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Geometry of a convolution or pooling, one sample. */
struct pp_cuda_geom {
	int c, h, w;     /* input channels, rows, columns */
	int oc, oh, ow;  /* output channels, rows, columns */
	int k, stride, pad; /* kernel size, stride, zero padding (pixels) */
};

/*
 * A convolution followed by a max-pool whose stride is at least its
 * window (no padding), with a ReLU between them or not: the layers that
 * the fused kernels (nn/cuda/fused.cu) take as one.
 */
struct pp_cuda_pool_geom {
	struct pp_cuda_geom conv; /* the convolution */
	int pk, ps;               /* the pool's window and stride (pixels), ps >= pk */
	int ph, pw;               /* the pool's output rows, columns */
	bool relu;                /* a ReLU between the two */
};

/* Column-major SGEMM parameters, as cublasSgemm takes them. */
struct pp_cuda_gemm {
	bool ta, tb;      /* transpose A, B */
	int m, n, k;      /* C is m x n, op(A) m x k, op(B) k x n */
	const float *a, *b;
	float *c;
	int lda, ldb, ldc;
	float beta;       /* C = op(A) op(B) + beta C */
	/*
	 * The ReLU next to a Linear layer, taken with its GEMM (ldc must then
	 * be m: C contiguous): 'relu', when not NULL, receives max(C, 0) too,
	 * at C's indices (the ReLU's forward after the layer's); 'mask', when
	 * not NULL, zeroes C where it is not > 0, at C's indices (the ReLU's
	 * backward, mask its output, on the input gradient of the layer above
	 * it).  The small kernels apply them as they store C; after cuBLAS,
	 * the ReLU's own kernels do (nn/cuda/small_gemm.h).
	 */
	float *relu;
	const float *mask;
	/*
	 * When not NULL (op(A) untransposed, and a product the small kernels
	 * take: pp_small_gemm_fits()): bias[j] = sum over p of op(B)(p, j) +
	 * beta bias[j] too, what row m of C would be were op(A)'s row m all
	 * ones: a Linear layer's bias gradient with its weight gradient, in
	 * one launch.
	 */
	float *bias;
};

/* Arrays a step's prologue fills with rows of a bias, at most. */
#define PP_CUDA_FILLS 8

/*
 * What a step does before its layers, in one launch (pp_cuda_prologue()):
 * the uint8 input normalised, dst[i] = (src[i] / 255 - mean) / std
 * (ToTensor + Normalize) in the arithmetic of common/normalize.h, the
 * gradients zeroed, and Linear layers' outputs filled with their bias on
 * every row (their GEMMs add to it).  Each part may be empty.
 */
struct pp_cuda_prologue {
	const uint8_t *src;           /* the input, n bytes (n 0: none) */
	float *dst;                   /* its normalised floats */
	size_t n;
	float mean, std;
	float *zero;                  /* floats to zero (zero_n 0: none) */
	size_t zero_n;
	int fills;                    /* 0 .. PP_CUDA_FILLS arrays: */
	int rows;                     /* out[k] (rows, cols[k]) = b[k] (cols[k]) on every row */
	float *out[PP_CUDA_FILLS];
	const float *b[PP_CUDA_FILLS];
	int cols[PP_CUDA_FILLS];
};

#ifdef PP_HAVE_CUDA

/* Sets bytes of device memory to zero. */
int pp_cuda_zero(void *ptr, size_t bytes, void *stream);
/* Copies bytes from device to device. */
int pp_cuda_copy(void *dst, const void *src, size_t bytes, void *stream);
/* Copies bytes from the device to the host and waits for the stream. */
int pp_cuda_read(void *host, const void *src, size_t bytes, void *stream);
/* Waits for the stream's work. */
int pp_cuda_sync(void *stream);

/*
 * A cuBLAS handle bound to 'stream', with its own reference to cuBLAS,
 * which is loaded here (dlopen) and not linked: by its soname, then from
 * the toolkit's directory found by configure.  -ENOENT with a message
 * naming the library when it cannot be loaded or lacks a function, -EIO
 * when cuBLAS refuses (no GPU).  pp_cuda_blas_open() loads the library
 * named 'lib' instead.
 */
int pp_cuda_blas_create(void *stream, void **handle_p);
int pp_cuda_blas_open(const char *lib, void *stream, void **handle_p);
void pp_cuda_blas_destroy(void *handle);
/*
 * C = op(A) op(B) + beta C on the handle's stream: by a kernel of
 * nn/cuda/small_gemm.h where pp_small_gemm_fits(), else by cuBLAS.
 */
int pp_cuda_sgemm(void *handle, const struct pp_cuda_gemm *g);
/*
 * Two independent products (neither reads what the other writes), as
 * pp_cuda_sgemm() each: in one launch where the untransposed small kernel
 * takes both (a Linear layer's weight and input gradients), the same bits
 * as two.
 */
int pp_cuda_sgemm2(void *handle, const struct pp_cuda_gemm *g0, const struct pp_cuda_gemm *g1);

/* The step's prologue (struct pp_cuda_prologue, above), in one launch. */
int pp_cuda_prologue(const struct pp_cuda_prologue *p, void *stream);
/*
 * out (J) += the sums of d (S, J, P) over S and P (a Linear's bias
 * gradient with P = 1, a convolution's with S the samples), in the
 * deterministic order of nn/cuda/fused.h; scratch: pp_red_floats(J, S P)
 * (nn/cuda/fused.h) floats of device memory.
 */
int pp_cuda_sum_channels(float *out, const float *d, int s, int j, int p, float *scratch,
			 void *stream);

/*
 * Conv + bias (+ ReLU) + max-pool of n samples x (n, C, H, W) with weights
 * w (OC, C, K, K) and bias b (OC), without columns: out (n, OC, PH, PW),
 * idx the index of each window's first maximum in the sample's
 * convolution output (OC, OH, OW), as pp_nn_conv2d_forward() then
 * pp_nn_maxpool_relu_forward() (or pp_nn_maxpool_forward()).
 */
int pp_cuda_conv_pool_forward(const float *x, const float *w, const float *b, float *out,
			      int32_t *idx, int n, const struct pp_cuda_pool_geom *g, void *stream);
/*
 * Its backward from the pool's output gradient dpool, indices idx and
 * output pooled (n, OC, PH, PW), as pp_nn_conv2d_backward_pooled(): dw
 * (OC, C, K, K) and db (OC) += the gradients (deterministic, see
 * nn/cuda/fused.h), din (n, C, H, W) = the input gradient unless NULL.
 * scratch: pp_fused_param_floats(g, n) floats.
 */
int pp_cuda_conv_pool_backward(float *din, float *dw, float *db, const float *dpool,
			       const int32_t *idx, const float *pooled, const float *x,
			       const float *w, int n, const struct pp_cuda_pool_geom *g,
			       float *scratch, void *stream);

/* col (n OH OW, C K K) from x (n, C, H, W) */
int pp_cuda_im2col(const float *x, float *col, int n, const struct pp_cuda_geom *g, void *stream);
/* dx (n, C, H, W) = the sum of the entries of dcol (n OH OW, C K K) taken from each pixel */
int pp_cuda_col2im(const float *dcol, float *dx, int n, const struct pp_cuda_geom *g, void *stream);
/* yp (C, n P) from y (n, C, P) */
int pp_cuda_to_cbp(const float *y, float *yp, int n, int c, int p, void *stream);
/* y (n, C, P) = yp (C, n P) + bias (C) */
int pp_cuda_from_cbp(const float *yp, const float *bias, float *y, int n, int c, int p,
		     void *stream);

int pp_cuda_relu_forward(float *out, const float *in, size_t count, void *stream);
/* din = dout where out > 0, else 0 */
int pp_cuda_relu_backward(float *din, const float *dout, const float *out, size_t count,
			  void *stream);
/* idx: the index within the sample's input of each maximum (the first one) */
int pp_cuda_maxpool_forward(float *out, int32_t *idx, const float *in, int n,
			    const struct pp_cuda_geom *g, void *stream);
/* din (n, C, H, W) = the gradients of the windows that selected each pixel, gathered (no atomics) */
int pp_cuda_maxpool_backward(float *din, const float *dout, const int32_t *idx, int n,
			     const struct pp_cuda_geom *g, void *stream);

/*
 * Softmax cross-entropy of n samples of c logits, in one kernel: adds the
 * losses to *loss_sum and the correct predictions to *correct (device
 * memory), sets *bad_label to 1 when a label is outside 0..c-1 (that
 * sample is left out, its gradient zero), and writes (softmax - onehot)
 * * scale to dlogits unless it is NULL.  The blocks' sums are added by the
 * last block to finish, in block order (deterministic); scratch:
 * pp_xent_scratch_bytes(n) (nn/cuda/fused.h) bytes of device memory, zeroed before its
 * first use, which each call leaves zeroed where it needs it.
 */
int pp_cuda_softmax_xent(const float *logits, const int32_t *labels, int n, int c, float scale,
			 float *dlogits, double *loss_sum, unsigned long long *correct,
			 int *bad_label, void *scratch, void *stream);


#else /* !PP_HAVE_CUDA */

#define PP_CUDA_STUB { return -ENODEV; }
static inline int pp_cuda_zero(void *ptr, size_t bytes, void *stream) PP_CUDA_STUB
static inline int pp_cuda_copy(void *dst, const void *src, size_t bytes, void *stream) PP_CUDA_STUB
static inline int pp_cuda_read(void *host, const void *src, size_t bytes, void *stream) PP_CUDA_STUB
static inline int pp_cuda_sync(void *stream) PP_CUDA_STUB
static inline int pp_cuda_blas_create(void *stream, void **handle_p) PP_CUDA_STUB
static inline int pp_cuda_blas_open(const char *lib, void *stream, void **handle_p) PP_CUDA_STUB
static inline void pp_cuda_blas_destroy(void *handle) {}
static inline int pp_cuda_sgemm(void *handle, const struct pp_cuda_gemm *g) PP_CUDA_STUB
static inline int pp_cuda_sgemm2(void *handle, const struct pp_cuda_gemm *g0,
				 const struct pp_cuda_gemm *g1) PP_CUDA_STUB
static inline int pp_cuda_prologue(const struct pp_cuda_prologue *p, void *stream) PP_CUDA_STUB
static inline int pp_cuda_sum_channels(float *out, const float *d, int s, int j, int p,
				       float *scratch, void *stream) PP_CUDA_STUB
static inline int pp_cuda_conv_pool_forward(const float *x, const float *w, const float *b,
					    float *out, int32_t *idx, int n,
					    const struct pp_cuda_pool_geom *g, void *stream) PP_CUDA_STUB
static inline int pp_cuda_conv_pool_backward(float *din, float *dw, float *db,
					     const float *dpool, const int32_t *idx,
					     const float *pooled, const float *x, const float *w,
					     int n, const struct pp_cuda_pool_geom *g, float *scratch,
					     void *stream) PP_CUDA_STUB
static inline int pp_cuda_im2col(const float *x, float *col, int n, const struct pp_cuda_geom *g,
				 void *stream) PP_CUDA_STUB
static inline int pp_cuda_col2im(const float *dcol, float *dx, int n,
				 const struct pp_cuda_geom *g, void *stream) PP_CUDA_STUB
static inline int pp_cuda_to_cbp(const float *y, float *yp, int n, int c, int p,
				 void *stream) PP_CUDA_STUB
static inline int pp_cuda_from_cbp(const float *yp, const float *bias, float *y, int n, int c,
				   int p, void *stream) PP_CUDA_STUB
static inline int pp_cuda_relu_forward(float *out, const float *in, size_t count,
				       void *stream) PP_CUDA_STUB
static inline int pp_cuda_relu_backward(float *din, const float *dout, const float *out,
					size_t count, void *stream) PP_CUDA_STUB
static inline int pp_cuda_maxpool_forward(float *out, int32_t *idx, const float *in, int n,
					  const struct pp_cuda_geom *g, void *stream) PP_CUDA_STUB
static inline int pp_cuda_maxpool_backward(float *din, const float *dout, const int32_t *idx,
					   int n, const struct pp_cuda_geom *g,
					   void *stream) PP_CUDA_STUB
static inline int pp_cuda_softmax_xent(const float *logits, const int32_t *labels, int n, int c,
				       float scale, float *dlogits, double *loss_sum,
				       unsigned long long *correct, int *bad_label,
				       void *scratch, void *stream) PP_CUDA_STUB
#undef PP_CUDA_STUB

#endif /* PP_HAVE_CUDA */

#ifdef __cplusplus
}
#endif
#endif
