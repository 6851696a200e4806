/*
 * nn/cuda/ops.cu: the layers on the GPU, mirroring the CPU kernels of nn/
 * op by op: element-wise work, pooling, im2col and its inverse as small
 * kernels, and the matrix products through cuBLAS, loaded at run time.
 * One thread per output element unless said otherwise; grid-stride loops.
 * The fused convolution and pooling, the reductions and the loss are in
 * nn/cuda/fused.cu, the optimizers in nn/cuda/optim.cu.
 */
#include "config.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "nn/cuda/launch.h"
#include "nn/cuda/fused.h"
#include "nn/cuda/kernels.h"
#include "nn/cuda/small_gemm.h"


/* cuBLAS's workspace: its own default on Hopper (32 MiB; 4 MiB on older GPUs). */
#define PP_CUBLAS_WORKSPACE (32 << 20)

#define GRID_STRIDE(i, n) \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
	     i += (size_t)gridDim.x * blockDim.x)

/* ------------------------------------------------------------------ cuBLAS */

/*
 * cuBLAS is opened with dlopen() when a model on a GPU first needs it, not
 * linked: loading it maps about 150 MB of pages into every process, which
 * a process that links libpinpipe and trains on the CPU would carry for
 * nothing.  Each handle holds its own reference to the library and its own
 * entry points: no state is shared between models.
 */
struct pp_cuda_blas {
	void *lib;          /* dlopen() handle of cuBLAS */
	cublasHandle_t h;
	void *workspace;    /* PP_CUBLAS_WORKSPACE bytes of device memory, the handle's own */
	cudaStream_t stream; /* the handle's stream, which the small GEMMs' kernels take too */
	decltype(&cublasCreate_v2) create;
	decltype(&cublasDestroy_v2) destroy;
	decltype(&cublasSetStream_v2) set_stream;
	decltype(&cublasSetWorkspace_v2) set_workspace;
	decltype(&cublasSgemm_v2) sgemm;
	decltype(&cublasGetStatusString) status_string;
};

/* Resolves 'name' in the library, or says which symbol is missing where. */
static int blas_sym(struct pp_cuda_blas *b, const char *lib, const char *name, void **fn_p)
{
	void *fn = dlsym(b->lib, name);

	if (fn == NULL)
		return pp_error(-ENOENT, "cuBLAS: %s has no symbol %s (not cuBLAS, or too old)", lib,
				name);
	*fn_p = fn;
	return 0;
}

extern "C" int pp_cuda_blas_open(const char *lib, void *stream, void **handle_p)
{
	struct pp_cuda_blas *b = (struct pp_cuda_blas *)calloc(1, sizeof(*b));
	cublasStatus_t st;
	cudaError_t err;
	int ret;

	if (b == NULL)
		return pp_error(-ENOMEM, "cuBLAS: out of memory");
	/* Never unloaded once loaded (RTLD_NODELETE): CUDA's libraries do not
	 * support it, and their statically linked C++ runtime's buffers would be
	 * lost with them. */
	b->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (b->lib == NULL) {
		ret = pp_error(-ENOENT, "cuBLAS: cannot load %s: %s (install the CUDA toolkit's "
			       "cuBLAS, or add its directory to LD_LIBRARY_PATH)", lib, dlerror());
		goto fail_free;
	}
	ret = blas_sym(b, lib, "cublasCreate_v2", (void **)&b->create);
	if (ret == 0)
		ret = blas_sym(b, lib, "cublasDestroy_v2", (void **)&b->destroy);
	if (ret == 0)
		ret = blas_sym(b, lib, "cublasSetStream_v2", (void **)&b->set_stream);
	if (ret == 0)
		ret = blas_sym(b, lib, "cublasSetWorkspace_v2", (void **)&b->set_workspace);
	if (ret == 0)
		ret = blas_sym(b, lib, "cublasSgemm_v2", (void **)&b->sgemm);
	if (ret == 0)
		ret = blas_sym(b, lib, "cublasGetStatusString", (void **)&b->status_string);
	if (ret < 0)
		goto fail_close;
	st = b->create(&b->h);
	if (st != CUBLAS_STATUS_SUCCESS) {
		ret = pp_error(-EIO, "cublasCreate: %s", b->status_string(st));
		goto fail_close;
	}
	b->stream = (cudaStream_t)stream;
	st = b->set_stream(b->h, (cudaStream_t)stream);
	if (st != CUBLAS_STATUS_SUCCESS) {
		ret = pp_error(-EIO, "cublasSetStream: %s", b->status_string(st));
		goto fail_destroy;
	}
	/* After the stream, which resets it: a workspace of its own, so that a
	 * step captured as a graph holds no allocation of cuBLAS's. */
	err = cudaMalloc(&b->workspace, PP_CUBLAS_WORKSPACE);
	if (err != cudaSuccess) {
		cudaGetLastError();
		ret = pp_error(-ENOMEM, "cuBLAS: cudaMalloc of a %d MiB workspace: %s",
			       PP_CUBLAS_WORKSPACE >> 20, cudaGetErrorString(err));
		goto fail_destroy;
	}
	st = b->set_workspace(b->h, b->workspace, PP_CUBLAS_WORKSPACE);
	if (st != CUBLAS_STATUS_SUCCESS) {
		ret = pp_error(-EIO, "cublasSetWorkspace: %s", b->status_string(st));
		goto fail_free_workspace;
	}
	/*
	 * cuBLAS sets itself up at a process's first GEMM, not at cublasCreate:
	 * 144 ms on an H200 host (a probe of the calls alone), where a GEMM then
	 * takes microseconds.  One GEMM of 1 x 1 x 1 here, on operands in the
	 * workspace's first bytes (zeroed; its result read by nothing), moves
	 * that from a model's first step, and its first epoch, to its creation.
	 */
	{
		const float one = 1, zero = 0;
		float *w = (float *)b->workspace;

		err = cudaMemsetAsync(w, 0, 3 * sizeof(float), (cudaStream_t)stream);
		st = err == cudaSuccess ? b->sgemm(b->h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, w, 1,
						   w + 1, 1, &zero, w + 2, 1)
					: CUBLAS_STATUS_SUCCESS;
		if (err == cudaSuccess && st == CUBLAS_STATUS_SUCCESS)
			err = cudaStreamSynchronize((cudaStream_t)stream);
		if (st != CUBLAS_STATUS_SUCCESS || err != cudaSuccess) {
			cudaGetLastError();
			/* the wait is for the stream's earlier work too: its error may be theirs */
			ret = pp_error(-EIO, "cuBLAS: its first GEMM%s: %s",
				       st != CUBLAS_STATUS_SUCCESS ? "" : " (or the stream's work before it)",
				       st != CUBLAS_STATUS_SUCCESS ? b->status_string(st)
								   : cudaGetErrorString(err));
			goto fail_free_workspace;
		}
	}
	*handle_p = b;
	return 0;

fail_free_workspace:
	cudaFree(b->workspace);
fail_destroy:
	b->destroy(b->h);
fail_close:
	dlclose(b->lib);
fail_free:
	free(b);
	return ret;
}

extern "C" int pp_cuda_blas_create(void *stream, void **handle_p)
{
	int ret = pp_cuda_blas_open(PP_CUBLAS_SONAME, stream, handle_p);

	/* Where the library's run path does not reach: the toolkit's directory. */
	if (ret == -ENOENT && strchr(PP_CUBLAS_PATH, '/') != NULL)
		ret = pp_cuda_blas_open(PP_CUBLAS_PATH, stream, handle_p);
	return ret;
}

extern "C" void pp_cuda_blas_destroy(void *handle)
{
	struct pp_cuda_blas *b = (struct pp_cuda_blas *)handle;

	if (b == NULL)
		return;
	b->destroy(b->h);
	cudaFree(b->workspace);
	dlclose(b->lib);
	free(b);
}

/* The small GEMMs, op(A) untransposed (nn/cuda/small_gemm.h): a block per PP_SGEMM_ROWS rows of a column. */
static __device__ void small_gemm_n_block(const struct pp_cuda_gemm *g)
{
	__shared__ float part[PP_SGEMM_ROWS][PP_SGEMM_PARTS + 1];
	const int i = (int)blockIdx.x * PP_SGEMM_ROWS + (int)threadIdx.x, j = (int)blockIdx.y;

	part[threadIdx.x][threadIdx.y] =
		i < g->m ? pp_sgemm_part(g, i, j, (int)threadIdx.y, PP_SGEMM_PARTS)
		: i == g->m && g->bias ? pp_sgemm_bias_part(g, j, (int)threadIdx.y, PP_SGEMM_PARTS)
				       : 0.0f;
	__syncthreads();
	if (threadIdx.y == 0 && i < g->m)
		pp_sgemm_store(g, i, j, pp_sgemm_add_parts(part[threadIdx.x]));
	else if (threadIdx.y == 0 && i == g->m && g->bias)
		pp_sgemm_store_bias(g, j, pp_sgemm_add_parts(part[threadIdx.x]));
}

static __global__ void small_gemm_n_kernel(struct pp_cuda_gemm g)
{
	small_gemm_n_block(&g);
}

/* Two products in one grid: blockIdx.z picks the product; the blocks past its size end at once. */
static __global__ void small_gemm_n2_kernel(struct pp_cuda_gemm g0, struct pp_cuda_gemm g1)
{
	const struct pp_cuda_gemm g = blockIdx.z == 0 ? g0 : g1;

	if ((int)blockIdx.y >= g.n || (int)blockIdx.x * PP_SGEMM_ROWS >= pp_sgemm_rows(&g))
		return; /* the whole block: no thread is left at its barrier */
	small_gemm_n_block(&g);
}

/* The grid of the untransposed kernel: blocks of rows, a column each. */
static dim3 small_gemm_n_grid(const struct pp_cuda_gemm *g)
{
	return dim3((unsigned)((pp_sgemm_rows(g) + PP_SGEMM_ROWS - 1) / PP_SGEMM_ROWS), (unsigned)g->n);
}

/* The small GEMMs, op(A) transposed and op(B) not: a warp per element of C. */
static __global__ void small_gemm_t_kernel(struct pp_cuda_gemm g)
{
	const long e = (long)blockIdx.x * PP_SGEMM_WARPS + (long)(threadIdx.x / PP_SGEMM_LANES);
	const int lane = (int)(threadIdx.x % PP_SGEMM_LANES);
	float sum;

	if (e >= (long)g.m * g.n)
		return;
	sum = pp_sgemm_part(&g, (int)(e % g.m), (int)(e / g.m), lane, PP_SGEMM_LANES);
	for (int off = PP_SGEMM_LANES / 2; off > 0; off /= 2)
		sum = pp_sgemm_butterfly(sum, __shfl_xor_sync(0xffffffffu, sum, off));
	if (lane == 0)
		pp_sgemm_store(&g, (int)(e % g.m), (int)(e / g.m), sum);
}

/* What a product may not ask: a ReLU with C not contiguous, the sums of op(B) past the small kernel. */
static int gemm_check(const struct pp_cuda_gemm *g)
{
	if ((g->relu || g->mask) && g->ldc != g->m)
		return pp_error(-EINVAL, "GEMM %dx%dx%d: a ReLU taken with it needs C contiguous "
				"(ldc %d, m %d)", g->m, g->n, g->k, g->ldc, g->m);
	if (g->bias && (g->ta || !pp_small_gemm_fits(g)))
		return pp_error(-EINVAL, "GEMM %dx%dx%d: the sums of op(B)'s columns are taken by "
				"the small kernels alone, op(A) untransposed", g->m, g->n, g->k);
	return 0;
}

extern "C" int pp_cuda_sgemm(void *handle, const struct pp_cuda_gemm *g)
{
	struct pp_cuda_blas *b = (struct pp_cuda_blas *)handle;
	const float one = 1.0f;
	cublasStatus_t st;
	int ret = gemm_check(g);

	if (ret)
		return ret;
	if (pp_small_gemm_fits(g)) {
		if (!g->ta) {
			small_gemm_n_kernel<<<small_gemm_n_grid(g), dim3(PP_SGEMM_ROWS, PP_SGEMM_PARTS), 0,
					      b->stream>>>(*g);
			return pp_cuda_launched("small_gemm_n");
		}
		small_gemm_t_kernel<<<(unsigned)(((long)g->m * g->n + PP_SGEMM_WARPS - 1) / PP_SGEMM_WARPS),
				      PP_SGEMM_WARPS * PP_SGEMM_LANES, 0, b->stream>>>(*g);
		return pp_cuda_launched("small_gemm_t");
	}
	st = b->sgemm(b->h, g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, g->tb ? CUBLAS_OP_T : CUBLAS_OP_N,
		      g->m, g->n, g->k, &one, g->a, g->lda, g->b, g->ldb, &g->beta, g->c, g->ldc);
	if (st != CUBLAS_STATUS_SUCCESS)
		return pp_error(-EIO, "cublasSgemm %dx%dx%d: %s", g->m, g->n, g->k,
				b->status_string(st));
	/* the ReLU taken with the product: its own kernels, as the small ones store it */
	{
		const size_t count = (size_t)g->m * (size_t)g->n;

		ret = g->mask ? pp_cuda_relu_backward(g->c, g->c, g->mask, count, b->stream) : 0;
		if (ret == 0 && g->relu)
			ret = pp_cuda_relu_forward(g->relu, g->c, count, b->stream);
		return ret;
	}
}

extern "C" int pp_cuda_sgemm2(void *handle, const struct pp_cuda_gemm *g0, const struct pp_cuda_gemm *g1)
{
	struct pp_cuda_blas *b = (struct pp_cuda_blas *)handle;
	int ret;

	/* both checked before either runs */
	if ((ret = gemm_check(g0)) || (ret = gemm_check(g1)))
		return ret;
	if (!pp_small_gemm_fits(g0) || !pp_small_gemm_fits(g1) || g0->ta || g1->ta) {
		ret = pp_cuda_sgemm(handle, g0);
		return ret ? ret : pp_cuda_sgemm(handle, g1);
	}
	{
		const dim3 a = small_gemm_n_grid(g0), c = small_gemm_n_grid(g1);
		const dim3 grid(a.x > c.x ? a.x : c.x, a.y > c.y ? a.y : c.y, 2);

		small_gemm_n2_kernel<<<grid, dim3(PP_SGEMM_ROWS, PP_SGEMM_PARTS), 0, b->stream>>>(*g0, *g1);
	}
	return pp_cuda_launched("small_gemm_n2");
}

/* ------------------------------------------------------------------ rows and columns */

/* ------------------------------------------------------------------ convolution layout */

static __global__ void im2col_kernel(const float *x, float *col, int n, struct pp_cuda_geom g)
{
	const int kk = g.c * g.k * g.k, pos = g.oh * g.ow;

	GRID_STRIDE(i, (size_t)n * pos * kk) {
		int q = (int)(i % kk), j = (int)((i / kk) % pos), s = (int)(i / ((size_t)kk * pos));
		int ch = q / (g.k * g.k), ky = q / g.k % g.k, kx = q % g.k;
		int iy = j / g.ow * g.stride - g.pad + ky, ix = j % g.ow * g.stride - g.pad + kx;

		col[i] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ?
				 x[(((size_t)s * g.c + ch) * g.h + iy) * g.w + ix] : 0.0f;
	}
}

extern "C" int pp_cuda_im2col(const float *x, float *col, int n, const struct pp_cuda_geom *g,
			      void *stream)
{
	size_t total = (size_t)n * g->oh * g->ow * g->c * g->k * g->k;

	im2col_kernel<<<pp_cuda_blocks_for(total), PP_CUDA_THREADS, 0, (cudaStream_t)stream>>>(x, col, n, *g);
	return pp_cuda_launched("im2col");
}

/* one thread per input pixel, gathering from every (position, tap) that read it */
static __global__ void col2im_kernel(const float *dcol, float *dx, int n, struct pp_cuda_geom g)
{
	const int kk = g.c * g.k * g.k, pos = g.oh * g.ow;

	GRID_STRIDE(i, (size_t)n * g.c * g.h * g.w) {
		int ix = (int)(i % g.w), iy = (int)((i / g.w) % g.h);
		int ch = (int)((i / ((size_t)g.w * g.h)) % g.c), s = (int)(i / ((size_t)g.w * g.h * g.c));
		float sum = 0.0f;

		for (int ky = 0; ky < g.k; ky++) {
			int ty = iy + g.pad - ky;

			if (ty < 0 || ty % g.stride || ty / g.stride >= g.oh)
				continue;
			for (int kx = 0; kx < g.k; kx++) {
				int tx = ix + g.pad - kx;

				if (tx < 0 || tx % g.stride || tx / g.stride >= g.ow)
					continue;
				int j = ty / g.stride * g.ow + tx / g.stride;
				sum += dcol[((size_t)s * pos + j) * kk + (ch * g.k + ky) * g.k + kx];
			}
		}
		dx[i] = sum;
	}
}

extern "C" int pp_cuda_col2im(const float *dcol, float *dx, int n, const struct pp_cuda_geom *g,
			      void *stream)
{
	col2im_kernel<<<pp_cuda_blocks_for((size_t)n * g->c * g->h * g->w), PP_CUDA_THREADS, 0,
			(cudaStream_t)stream>>>(dcol, dx, n, *g);
	return pp_cuda_launched("col2im");
}

static __global__ void to_cbp_kernel(const float *y, float *yp, int n, int c, int p)
{
	GRID_STRIDE(i, (size_t)n * c * p) {
		int j = (int)(i % p), ch = (int)((i / p) % c), s = (int)(i / ((size_t)p * c));

		yp[((size_t)ch * n + s) * p + j] = y[i];
	}
}

extern "C" int pp_cuda_to_cbp(const float *y, float *yp, int n, int c, int p, void *stream)
{
	to_cbp_kernel<<<pp_cuda_blocks_for((size_t)n * c * p), PP_CUDA_THREADS, 0, (cudaStream_t)stream>>>(y, yp, n,
											    c, p);
	return pp_cuda_launched("to_cbp");
}

static __global__ void from_cbp_kernel(const float *yp, const float *bias, float *y, int n, int c,
				       int p)
{
	GRID_STRIDE(i, (size_t)n * c * p) {
		int j = (int)(i % p), ch = (int)((i / p) % c), s = (int)(i / ((size_t)p * c));

		y[i] = yp[((size_t)ch * n + s) * p + j] + bias[ch];
	}
}

extern "C" int pp_cuda_from_cbp(const float *yp, const float *bias, float *y, int n, int c, int p,
				void *stream)
{
	from_cbp_kernel<<<pp_cuda_blocks_for((size_t)n * c * p), PP_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		yp, bias, y, n, c, p);
	return pp_cuda_launched("from_cbp");
}

/* ------------------------------------------------------------------ ReLU and max-pool */

static __global__ void relu_forward_kernel(float *out, const float *in, size_t count)
{
	GRID_STRIDE(i, count)
		out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

extern "C" int pp_cuda_relu_forward(float *out, const float *in, size_t count, void *stream)
{
	relu_forward_kernel<<<pp_cuda_blocks_for(count), PP_CUDA_THREADS, 0, (cudaStream_t)stream>>>(out, in, count);
	return pp_cuda_launched("pp_nn_relu_forward");
}

static __global__ void relu_backward_kernel(float *din, const float *dout, const float *out,
					    size_t count)
{
	GRID_STRIDE(i, count)
		din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

extern "C" int pp_cuda_relu_backward(float *din, const float *dout, const float *out,
				     size_t count, void *stream)
{
	relu_backward_kernel<<<pp_cuda_blocks_for(count), PP_CUDA_THREADS, 0, (cudaStream_t)stream>>>(din, dout, out,
										     count);
	return pp_cuda_launched("pp_nn_relu_backward");
}

static __global__ void maxpool_forward_kernel(float *out, int32_t *idx, const float *in, int n,
					      struct pp_cuda_geom g)
{
	GRID_STRIDE(i, (size_t)n * g.c * g.oh * g.ow) {
		int ox = (int)(i % g.ow), oy = (int)((i / g.ow) % g.oh);
		int ch = (int)((i / ((size_t)g.ow * g.oh)) % g.c);
		int s = (int)(i / ((size_t)g.ow * g.oh * g.c));
		const float *x = in + (size_t)s * g.c * g.h * g.w;
		int best = (ch * g.h + oy * g.stride) * g.w + ox * g.stride;
		float m = x[best];

		for (int ky = 0; ky < g.k; ky++)
			for (int kx = 0; kx < g.k; kx++) {
				int at = (ch * g.h + oy * g.stride + ky) * g.w + ox * g.stride + kx;

				if (x[at] > m) {
					m = x[at];
					best = at;
				}
			}
		out[i] = m;
		idx[i] = best;
	}
}

extern "C" int pp_cuda_maxpool_forward(float *out, int32_t *idx, const float *in, int n,
				       const struct pp_cuda_geom *g, void *stream)
{
	maxpool_forward_kernel<<<pp_cuda_blocks_for((size_t)n * g->c * g->oh * g->ow), PP_CUDA_THREADS, 0,
				 (cudaStream_t)stream>>>(out, idx, in, n, *g);
	return pp_cuda_launched("pp_nn_maxpool_forward");
}

/* a thread per input pixel, gathering from the windows that selected it (pp_pool_din()) */
static __global__ void maxpool_backward_kernel(float *din, const float *dout, const int32_t *idx,
					       size_t total, struct pp_cuda_geom g)
{
	GRID_STRIDE(i, total)
		din[i] = pp_pool_din(&g, dout, idx, i);
}

extern "C" int pp_cuda_maxpool_backward(float *din, const float *dout, const int32_t *idx, int n,
					const struct pp_cuda_geom *g, void *stream)
{
	const size_t total = (size_t)n * g->c * g->h * g->w;

	maxpool_backward_kernel<<<pp_cuda_blocks_for(total), PP_CUDA_THREADS, 0, (cudaStream_t)stream>>>(din, dout, idx,
											total, *g);
	return pp_cuda_launched("pp_nn_maxpool_backward");
}
