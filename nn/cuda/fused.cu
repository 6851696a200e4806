/*
 * nn/cuda/fused.cu: the kernels whose per-thread arithmetic is in
 * nn/cuda/fused.h: conv + bias + ReLU + max-pool forward and its pooled
 * backward without im2col columns (and the usual layers' forward and
 * input gradient tiled, a block per sample), the deterministic sums (bias gradients)
 * spread over the whole GPU, and softmax cross-entropy in one kernel.
 * Each kernel calls the header's function for its thread; the blocks'
 * trees run here, in shared memory, in the header's order.
 */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>

#include "common/common_impl.h"
#include "nn/cuda/launch.h"
#include "nn/cuda/fused.h"

static unsigned blocks_of(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;

	return (unsigned)(b == 0 ? 1 : b);
}

/* ------------------------------------------------------------------ a block's tree */

static __device__ void tree_step(float *lanes, int t, int half)
{
	pp_red_tree_step(lanes, t, half);
}

static __device__ void tree_step(struct pp_xent_part *lanes, int t, int half)
{
	pp_xent_tree_step(lanes, t, half);
}

/*
 * The sum of a block's PP_RED_THREADS lanes in shared memory, 'mine' this
 * thread's, added in the fixed tree of the header (lane t takes lane
 * t + half, half = PP_RED_THREADS / 2, ..., 1).  Every thread of the block
 * calls it, and each gets the sum.
 */
template <typename T> static __device__ T block_sum(T *lanes, T mine)
{
	const int t = threadIdx.x;

	lanes[t] = mine;
	__syncthreads();
	for (int half = PP_RED_THREADS / 2; half > 0; half /= 2) {
		if (t < half)
			tree_step(lanes, t, half);
		__syncthreads();
	}
	return lanes[0];
}

/* ------------------------------------------------------------------ reductions */

/* First pass of a sum of d (S, J, P): a thread per (j, part), j fastest. */
static __global__ void sum_partial_kernel(float *partial, const float *d, int s, int jn, int p,
					  int parts)
{
	const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < (size_t)jn * parts)
		partial[i] = pp_red_sum_partial(d, s, jn, p, parts, (int)(i % jn), (int)(i / jn));
}

/*
 * Second pass: block j adds the parts of output j and adds the sum to
 * out0[j] (j < split) or out1[j - split].
 */
static __global__ void sum_finish_kernel(float *out0, float *out1, int split, const float *partial,
					 int jn, int parts)
{
	__shared__ float lanes[PP_RED_THREADS];
	const int j = blockIdx.x, t = threadIdx.x;
	const float sum = block_sum(lanes, pp_red_lane(partial, jn, parts, j, t));

	if (t == 0) {
		if (j < split)
			out0[j] += sum;
		else
			out1[j - split] += sum;
	}
}

static int sum_finish(float *out0, float *out1, int split, const float *partial, int jn, int parts,
		      cudaStream_t stream)
{
	sum_finish_kernel<<<(unsigned)jn, PP_RED_THREADS, 0, stream>>>(out0, out1, split, partial, jn,
								      parts);
	return pp_cuda_launched("sum_finish");
}

extern "C" int pp_cuda_sum_channels(float *out, const float *d, int s, int j, int p,
				    float *scratch, void *stream)
{
	const int parts = pp_red_parts(j, (size_t)s * p);
	int ret;

	if (pp_red_one_pass(s, j, p)) /* d (S, J) is the parts (S, J) */
		return sum_finish(out, out, j, d, j, s, (cudaStream_t)stream);
	sum_partial_kernel<<<blocks_of((size_t)j * parts, PP_CUDA_THREADS), PP_CUDA_THREADS, 0,
			     (cudaStream_t)stream>>>(scratch, d, s, j, p, parts);
	ret = pp_cuda_launched("sum_partial");
	return ret ? ret : sum_finish(out, out, j, scratch, j, parts, (cudaStream_t)stream);
}

/* ------------------------------------------------------------------ conv + ReLU + max-pool */

static __global__ void conv_pool_forward_kernel(const float *__restrict__ x,
						const float *__restrict__ w,
						const float *__restrict__ b, float *out, int32_t *idx,
						size_t total, struct pp_cuda_pool_geom g)
{
	const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < total)
		pp_fused_forward(&g, x, w, b, out, idx, i);
}

/*
 * The same, a block per sample (a grid-stride loop over them): the
 * sample's input and every weight in shared memory, each thread's
 * arithmetic pp_fused_forward() on them as on a batch of one, so that
 * the taps are read from shared memory rather than again and again from
 * the caches, with the same bits as the thread per output.
 */
static __global__ void conv_pool_forward_smem_kernel(const float *__restrict__ x,
						     const float *__restrict__ w,
						     const float *__restrict__ b, float *out,
						     int32_t *idx, int n, struct pp_cuda_pool_geom g)
{
	extern __shared__ float sh[];
	const size_t chw = (size_t)g.conv.c * g.conv.h * g.conv.w;
	const size_t nw = (size_t)g.conv.oc * g.conv.c * g.conv.k * g.conv.k;
	const size_t per = (size_t)g.conv.oc * g.ph * g.pw;
	float *xs = sh, *ws = sh + chw;

	for (size_t i = threadIdx.x; i < nw; i += blockDim.x)
		ws[i] = w[i];
	for (int s = blockIdx.x; s < n; s += gridDim.x) {
		__syncthreads();
		for (size_t i = threadIdx.x; i < chw; i += blockDim.x)
			xs[i] = x[(size_t)s * chw + i];
		__syncthreads();
		for (size_t i = threadIdx.x; i < per; i += blockDim.x)
			pp_fused_forward(&g, xs, ws, b, out + (size_t)s * per, idx + (size_t)s * per, i);
	}
}

/*
 * The tiled forward (nn/cuda/fused.h, pp_fused_forward_tile()): a block
 * per sample (a grid-stride loop over them), its input with the padding's
 * zeros and every weight in shared memory, a thread per pooled output; K a
 * constant, so that the input rows a thread holds are registers.
 */
template <int K>
static __global__ void conv_pool_forward_tiled_kernel(const float *__restrict__ x,
						      const float *__restrict__ w,
						      const float *__restrict__ b, float *out,
						      int32_t *idx, int n, struct pp_fused_tile_plan plan,
						      struct pp_cuda_pool_geom g)
{
	extern __shared__ float sh[];
	float *xs = sh, *ws = sh + plan.plane_floats;

	for (int i = threadIdx.x; i < plan.w_floats; i += blockDim.x)
		ws[i] = w[i];
	for (int s = blockIdx.x; s < n; s += gridDim.x) {
		__syncthreads();
		for (int e = threadIdx.x; e < plan.plane_floats; e += blockDim.x)
			xs[e] = pp_fused_padded_input(&g.conv, x, (size_t)s, e);
		__syncthreads();
		for (int i = threadIdx.x; i < plan.items; i += blockDim.x)
			pp_fused_forward_tile(&g, K, &plan, xs, ws, b, out + (size_t)s * plan.items,
					      idx + (size_t)s * plan.items, i);
	}
}

typedef void (*forward_tiled_fn)(const float *, const float *, const float *, float *, int32_t *,
				  int, struct pp_fused_tile_plan, struct pp_cuda_pool_geom);

/* The tiled forward's kernel for each K, 1 .. PP_FUSED_KMAX. */
static const forward_tiled_fn forward_tiled[PP_FUSED_KMAX] = {
	conv_pool_forward_tiled_kernel<1>, conv_pool_forward_tiled_kernel<2>,
	conv_pool_forward_tiled_kernel<3>, conv_pool_forward_tiled_kernel<4>,
	conv_pool_forward_tiled_kernel<5>, conv_pool_forward_tiled_kernel<6>,
	conv_pool_forward_tiled_kernel<7>,
};

/* Blocks of a kernel that takes a sample a block: one each, at most 65535 (a grid-stride loop). */
static unsigned sample_blocks(int n)
{
	return (unsigned)(n < 65535 ? n : 65535);
}

extern "C" int pp_cuda_conv_pool_forward(const float *x, const float *w, const float *b, float *out,
					 int32_t *idx, int n, const struct pp_cuda_pool_geom *g,
					 void *stream)
{
	const size_t total = (size_t)n * g->conv.oc * g->ph * g->pw;
	const size_t smem = ((size_t)g->conv.c * g->conv.h * g->conv.w +
			     (size_t)g->conv.oc * g->conv.c * g->conv.k * g->conv.k) * sizeof(float);
	struct pp_fused_tile_plan plan;

	if (n > 0 && g->conv.k >= 1 && pp_fused_forward_plan(g, &plan) == 0) {
		forward_tiled[g->conv.k - 1]<<<sample_blocks(n), PP_CUDA_THREADS,
					       pp_fused_tile_bytes(&plan), (cudaStream_t)stream>>>(
			x, w, b, out, idx, n, plan, *g);
		return pp_cuda_launched("conv_pool_forward_tiled");
	}
	if (smem <= PP_FUSED_SMEM_BYTES && n > 0) {
		conv_pool_forward_smem_kernel<<<sample_blocks(n), PP_CUDA_THREADS, smem,
						(cudaStream_t)stream>>>(x, w, b, out, idx, n, *g);
		return pp_cuda_launched("conv_pool_forward");
	}
	conv_pool_forward_kernel<<<blocks_of(total, PP_CUDA_THREADS), PP_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		x, w, b, out, idx, total, *g);
	return pp_cuda_launched("conv_pool_forward");
}

static __global__ void conv_pool_din_kernel(float *din, const float *__restrict__ dpool,
					    const int32_t *__restrict__ idx,
					    const float *__restrict__ pooled,
					    const float *__restrict__ w, size_t total,
					    struct pp_cuda_pool_geom g)
{
	const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < total)
		din[i] = pp_fused_din(&g, dpool, idx, pooled, w, i);
}

/*
 * The tiled input gradient (pp_fused_din_tile()): a block per sample, the
 * gradient that reached each output channel of its convolution (zeros but
 * where the pool selected and the ReLU passed: zeroed, then scattered by
 * pp_fused_din_scatter()) as planes with zeros around them in shared
 * memory, with every weight; a thread per run of PP_DIN_RUN pixels of an
 * input row.
 */
template <int K>
static __global__ void conv_pool_din_tiled_kernel(float *din, const float *__restrict__ dpool,
						  const int32_t *__restrict__ idx,
						  const float *__restrict__ pooled,
						  const float *__restrict__ w, int n,
						  struct pp_fused_tile_plan plan, struct pp_cuda_pool_geom g)
{
	extern __shared__ float sh[];
	float *gs = sh, *ws = sh + plan.plane_floats;
	const size_t chw = (size_t)g.conv.c * g.conv.h * g.conv.w;
	const int pooled_per = g.conv.oc * g.ph * g.pw;

	for (int i = threadIdx.x; i < plan.w_floats; i += blockDim.x)
		ws[i] = w[i];
	for (int s = blockIdx.x; s < n; s += gridDim.x) {
		__syncthreads();
		for (int e = threadIdx.x; e < plan.plane_floats; e += blockDim.x)
			gs[e] = 0.0f;
		__syncthreads();
		for (int q = threadIdx.x; q < pooled_per; q += blockDim.x)
			pp_fused_din_scatter(&g, &plan, dpool, idx, pooled, (size_t)s, gs, q);
		__syncthreads();
		for (int i = threadIdx.x; i < plan.items; i += blockDim.x)
			pp_fused_din_tile(&g, K, &plan, gs, ws, din + (size_t)s * chw, i);
	}
}

typedef void (*din_tiled_fn)(float *, const float *, const int32_t *, const float *, const float *,
			     int, struct pp_fused_tile_plan, struct pp_cuda_pool_geom);

/* The tiled input gradient's kernel for each K, 1 .. PP_FUSED_KMAX. */
static const din_tiled_fn din_tiled[PP_FUSED_KMAX] = {
	conv_pool_din_tiled_kernel<1>, conv_pool_din_tiled_kernel<2>, conv_pool_din_tiled_kernel<3>,
	conv_pool_din_tiled_kernel<4>, conv_pool_din_tiled_kernel<5>, conv_pool_din_tiled_kernel<6>,
	conv_pool_din_tiled_kernel<7>,
};

/*
 * First pass of the weight and bias gradients, as the plan says
 * (pp_fused_param_plan_of()): block (o, pc, wc) loads the terms of its
 * parts into shared memory a tile at a time, once for all the channel's
 * weights, and each of its tasks (a part, a weight) adds its part's terms
 * in order from there.
 */
static __global__ void __launch_bounds__(PP_PARAM_THREADS)
conv_pool_params_kernel(float *partial, const float *__restrict__ dpool,
			const int32_t *__restrict__ idx, const float *__restrict__ pooled,
			const float *__restrict__ x, int n, int parts,
			struct pp_fused_param_plan plan, struct pp_cuda_pool_geom g)
{
	__shared__ struct pp_fused_sel tile[PP_PARAM_TILE];
	const int b = blockIdx.x, wc = b % plan.wchunks, pc = b / plan.wchunks % plan.pchunks;
	const int o = b / (plan.wchunks * plan.pchunks);
	const int p0 = pc * plan.pb, np = parts - p0 < plan.pb ? parts - p0 : plan.pb;
	const int w0 = wc * plan.wb, nw = plan.kw - w0 < plan.wb ? plan.kw - w0 : plan.wb;
	const int tasks = nw * np, jn = g.conv.oc * plan.kw;
	const size_t terms = (size_t)n * g.ph * g.pw;
	const size_t steps_max = pp_fused_param_steps(terms, parts, p0);
	struct pp_fused_tapw tw[PP_PARAM_TASKS];
	size_t steps[PP_PARAM_TASKS];
	float acc[PP_PARAM_TASKS];

	for (int r = 0; r < PP_PARAM_TASKS; r++) {
		const int k = threadIdx.x + r * PP_PARAM_THREADS;

		acc[r] = 0.0f;
		steps[r] = k < tasks ? pp_fused_param_steps(terms, parts, p0 + k / nw) : 0;
		tw[r] = pp_fused_param_tapw(&g, k < tasks ? w0 + k % nw : 0);
	}
	for (size_t m0 = 0; m0 < steps_max; m0 += (size_t)plan.tile_steps) {
		const int ms = steps_max - m0 < (size_t)plan.tile_steps ? (int)(steps_max - m0)
									: plan.tile_steps;

		for (int e = threadIdx.x; e < ms * np; e += PP_PARAM_THREADS) {
			const size_t t = (size_t)(p0 + e % np) + (m0 + (size_t)(e / np)) * (size_t)parts;

			if (t < terms)
				tile[e] = pp_fused_param_sel(&g, dpool, idx, pooled, o, t);
		}
		__syncthreads();
#pragma unroll
		for (int r = 0; r < PP_PARAM_TASKS; r++) {
			const int k = threadIdx.x + r * PP_PARAM_THREADS, i = k / nw;
			const int mend = steps[r] > m0 ? (steps[r] - m0 < (size_t)ms ? (int)(steps[r] - m0) : ms) : 0;

			for (int mm = 0; mm < mend; mm++)
				acc[r] += pp_fused_param_tap(&g, x, &tile[mm * np + i], &tw[r]);
		}
		__syncthreads();
	}
	for (int r = 0; r < PP_PARAM_TASKS; r++) {
		const int k = threadIdx.x + r * PP_PARAM_THREADS, w = w0 + k % nw;

		if (k < tasks)
			partial[(size_t)(p0 + k / nw) * jn +
				(w < plan.kw - 1 ? o * (plan.kw - 1) + w : g.conv.oc * (plan.kw - 1) + o)] = acc[r];
	}
}

/*
 * The weight and bias gradients by blocks of samples (nn/cuda/fused.h,
 * pp_fused_wg_plan_of()): block (chunk, o) stages its chunk's groups one
 * after the other, the inputs and channel o's terms in shared memory, and
 * each of its tasks (a weight or the bias, a lane) adds its terms of each
 * group in order; its sum is part (chunk, lane) of that weight's.
 */
static __global__ void
conv_pool_wgrad_kernel(float *partial, const float *__restrict__ dpool,
		       const int32_t *__restrict__ idx, const float *__restrict__ pooled,
		       const float *__restrict__ x, int n, struct pp_fused_wg_plan plan,
		       struct pp_cuda_pool_geom g)
{
	extern __shared__ float sh[];
	struct pp_fused_wsel *sel = (struct pp_fused_wsel *)(sh + plan.plane_floats);
	const int o = (int)(blockIdx.x % (unsigned)g.conv.oc), chunk = (int)(blockIdx.x / (unsigned)g.conv.oc);
	const int pp = g.ph * g.pw;
	int tap[PP_WG_TASKS];
	float acc[PP_WG_TASKS];

#pragma unroll
	for (int r = 0; r < PP_WG_TASKS; r++) {
		const int k = threadIdx.x + r * PP_WG_THREADS;

		acc[r] = 0.0f;
		tap[r] = k < plan.tasks ? pp_fused_wg_tap(&g, &plan, k % plan.kw) : 0;
	}
	for (int gi = 0; gi < plan.chunk_groups; gi++) {
		const int s0 = (chunk * plan.chunk_groups + gi) * plan.samples;
		const int count = (n - s0 < plan.samples ? n - s0 : plan.samples) * pp;

		if (s0 >= n)
			break; /* the same for every thread of the block */
		__syncthreads();
		for (int e = threadIdx.x; e < plan.plane_floats; e += PP_WG_THREADS)
			sh[e] = pp_fused_wg_stage_x(&g, &plan, x, n, s0, e);
		for (int e = threadIdx.x; e < count; e += PP_WG_THREADS)
			sel[e] = pp_fused_wg_stage_sel(&g, &plan, dpool, idx, pooled, n, s0, o, e);
		__syncthreads();
#pragma unroll
		for (int r = 0; r < PP_WG_TASKS; r++) {
			const int k = threadIdx.x + r * PP_WG_THREADS;

			if (k < plan.tasks)
				acc[r] = pp_fused_wg_add(&plan, sh, sel, count, k / plan.kw, tap[r], acc[r]);
		}
	}
#pragma unroll
	for (int r = 0; r < PP_WG_TASKS; r++) {
		const int k = threadIdx.x + r * PP_WG_THREADS;

		if (k < plan.tasks)
			partial[pp_fused_wg_slot(&g, &plan, chunk, o, k)] = acc[r];
	}
}

extern "C" int pp_cuda_conv_pool_backward(float *din, float *dw, float *db, const float *dpool,
					  const int32_t *idx, const float *pooled, const float *x,
					  const float *w, int n, const struct pp_cuda_pool_geom *g,
					  float *scratch, void *stream)
{
	const cudaStream_t st = (cudaStream_t)stream;
	const int jn = pp_fused_param_count(g), nw = jn - g->conv.oc;
	const int parts = pp_fused_param_parts(jn, (size_t)n * g->ph * g->pw);
	const struct pp_fused_param_plan plan = pp_fused_param_plan_of(g, parts);
	struct pp_fused_tile_plan tp;
	struct pp_fused_wg_plan wg;
	int ret = 0;

	if (din && n > 0 && g->conv.k >= 1 && pp_fused_din_plan(g, &tp) == 0) {
		din_tiled[g->conv.k - 1]<<<sample_blocks(n), PP_CUDA_THREADS, pp_fused_tile_bytes(&tp),
					   st>>>(din, dpool, idx, pooled, w, n, tp, *g);
		ret = pp_cuda_launched("conv_pool_din_tiled");
	} else if (din) {
		const size_t total = (size_t)n * g->conv.c * g->conv.h * g->conv.w;

		conv_pool_din_kernel<<<blocks_of(total, PP_CUDA_THREADS), PP_CUDA_THREADS, 0, st>>>(din, dpool, idx,
										    pooled, w, total, *g);
		ret = pp_cuda_launched("conv_pool_din");
	}
	if (ret)
		return ret;
	if (n > 0 && pp_fused_wg_plan_of(g, n, &wg) == 0) {
		conv_pool_wgrad_kernel<<<wg.blocks, PP_WG_THREADS, pp_fused_wg_bytes(&wg), st>>>(
			scratch, dpool, idx, pooled, x, n, wg, *g);
		ret = pp_cuda_launched("conv_pool_wgrad");
		return ret ? ret : sum_finish(dw, db, nw, scratch, jn, wg.parts, st);
	}
	conv_pool_params_kernel<<<plan.blocks, PP_PARAM_THREADS, 0, st>>>(scratch, dpool, idx, pooled, x,
									 n, parts, plan, *g);
	ret = pp_cuda_launched("conv_pool_params");
	return ret ? ret : sum_finish(dw, db, nw, scratch, jn, parts, st);
}

/* ------------------------------------------------------------------ loss */

/*
 * A thread per sample; each block adds its samples' losses and counts in
 * a tree and stores them as its part; the last block to finish (a ticket
 * taken after a fence, so that it sees every part) adds the parts in
 * block order, adds the result to the running totals, and puts the ticket
 * back to 0 for the next call.
 */
static __global__ void softmax_xent_kernel(const float *logits, const int32_t *labels, int n, int c,
					   float scale, float *dlogits, double *loss_sum,
					   unsigned long long *correct, int *bad_label,
					   unsigned *ticket, struct pp_xent_part *parts)
{
	__shared__ struct pp_xent_part lanes[PP_RED_THREADS];
	__shared__ bool last;
	const int t = threadIdx.x;
	const size_t i = (size_t)blockIdx.x * PP_RED_THREADS + t;
	struct pp_xent_part mine = { 0.0, 0 };

	if (i < (size_t)n) {
		unsigned right;
		int bad;

		mine.loss = pp_xent_sample(logits, labels, c, scale, dlogits, i, &right, &bad);
		mine.correct = right;
		if (bad)
			*bad_label = 1;
	}
	mine = block_sum(lanes, mine);
	if (t == 0) {
		parts[blockIdx.x] = mine;
		__threadfence();
		last = atomicAdd(ticket, 1u) == gridDim.x - 1;
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	mine = block_sum(lanes, pp_xent_lane(parts, (int)gridDim.x, t));
	if (t == 0) {
		*loss_sum += mine.loss;
		*correct += mine.correct;
		*ticket = 0;
	}
}

extern "C" int pp_cuda_softmax_xent(const float *logits, const int32_t *labels, int n, int c,
				    float scale, float *dlogits, double *loss_sum,
				    unsigned long long *correct, int *bad_label, void *scratch,
				    void *stream)
{
	softmax_xent_kernel<<<(unsigned)pp_xent_blocks(n), PP_RED_THREADS, 0, (cudaStream_t)stream>>>(
		logits, labels, n, c, scale, dlogits, loss_sum, correct, bad_label, (unsigned *)scratch,
		(struct pp_xent_part *)((char *)scratch + PP_XENT_PARTS_AT));
	return pp_cuda_launched("pp_nn_softmax_xent");
}
