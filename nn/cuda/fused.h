/*
 * nn/cuda/fused.h: the per-thread arithmetic of the kernels of
 * nn/cuda/fused.cu, compiled by nvcc for the GPU and by the C compiler
 * for the CPU tests (tests/test_nn_gpu_math.c), which run it for every
 * thread and block index and compare it with the CPU layers of nn/.  Each
 * function is what one thread computes, from its index; the kernels only
 * add the launch and the block's shared memory.
 *
 * The kernels:
 *  - a convolution, its bias, a ReLU (or none) and a max-pool of stride >=
 *    its window in one pass: a thread per pooled output computes the
 *    convolution's outputs of its window only, from the input (no im2col
 *    columns), and keeps the first maximum as pp_nn_maxpool_relu_forward();
 *  - their backward, as pp_nn_conv2d_backward_pooled(): the gradient
 *    passes only where the pool selected and the ReLU let through (the pooled
 *    output > 0, which is the sign of the convolution's output there); the
 *    input gradient gathered by a thread per input pixel from the selected
 *    windows that cover it, the weight and bias gradients by the reduction
 *    below;
 *  - the forward and the input gradient of the usual layers (stride 1,
 *    small kernels) again, tiled: a block per sample from shared memory,
 *    each thread several outputs from registers (the section "the tiled
 *    kernels");
 *  - sums of d (S, J, P) over S and P (the bias gradients);
 *  - a max-pool's backward as a gather (a thread per input pixel), for
 *    the pools that are not fused;
 *  - softmax cross-entropy (pp_xent_sample(), nn/nn_math.h), its loss and
 *    correct count summed by the blocks.
 *
 * Reductions are deterministic: a sum of T terms for each of J outputs is
 * cut into 'parts' by a rule of (J, T) alone, never of the GPU, part p
 * taking the terms p, p + parts, p + 2 parts, ... in order (first pass: a
 * thread per (output, part), the threads of a warp on adjacent outputs);
 * then a block of PP_RED_THREADS lanes per output adds the parts, lane t
 * those at t, t + PP_RED_THREADS, ... in order, and the lanes in a fixed
 * tree (second pass); where the terms are few and one apart (a Linear
 * layer's bias gradients), they are the parts themselves and the second
 * pass runs alone (pp_red_one_pass()).  No atomics on floats: two runs
 * give the same bits.
 */
#ifndef PP_NN_CUDA_FUSED_H
#define PP_NN_CUDA_FUSED_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nn/cuda/kernels.h"
#include "nn/nn_math.h"

/* Lanes of a block of a reduction's second pass, and of the softmax's blocks. */
#define PP_RED_THREADS 256
/* Terms a thread of a first pass sums, at least (where there are that many). */
#define PP_RED_MIN_TERMS 8
/* Threads of a first pass aimed at: about as many as an H100 holds at once. */
#define PP_RED_TARGET_THREADS (1L << 17)
/* Parts of a sum, at most: the second pass's lanes add at most 16 each. */
#define PP_RED_MAX_PARTS (16 * PP_RED_THREADS)
/* Conv outputs of a pool window computed together, sharing each weight's load. */
#define PP_FUSED_GROUP 4

/* The parts of each of J sums of T terms: enough threads for the GPU, few terms each. */
PP_HD static inline int pp_red_parts(int outputs, size_t terms)
{
	size_t cap = (size_t)PP_RED_TARGET_THREADS / (size_t)(outputs > 0 ? outputs : 1);
	size_t p = (terms + PP_RED_MIN_TERMS - 1) / PP_RED_MIN_TERMS;

	cap = cap < 1 ? 1 : cap > PP_RED_MAX_PARTS ? PP_RED_MAX_PARTS : cap;
	return (int)(p < 1 ? 1 : p > cap ? cap : p);
}

/* Terms of the sums that take the second pass alone, at most (its lanes read them J apart). */
#define PP_RED_ONE_PASS_TERMS (1L << 19)

/*
 * Whether the sums of d (S, J, 1) over S (a Linear layer's bias
 * gradients, a convolution's of 1 x 1 outputs) take the second pass
 * alone: d is then its parts, S of them, each a term, where S is at most
 * PP_RED_MAX_PARTS and S J at most PP_RED_ONE_PASS_TERMS (a block's lanes
 * read its output's terms J floats apart, which costs more than the first
 * pass's adjacent reads for wide layers); a rule of the shape, so two
 * runs give the same bits; one launch rather than two.
 */
PP_HD static inline bool pp_red_one_pass(int s, int j, int p)
{
	return p == 1 && s >= 1 && s <= PP_RED_MAX_PARTS && j >= 1 &&
	       (long long)s * j <= PP_RED_ONE_PASS_TERMS;
}

/* The floats of partial sums that J sums of T terms take (the scratch of a first pass). */
PP_HD static inline size_t pp_red_floats(int outputs, size_t terms)
{
	return (size_t)outputs * (size_t)pp_red_parts(outputs, terms);
}

/* floor(a / b) and ceil(a / b) for b > 0, a of either sign */
PP_HD static inline int pp_floor_div(int a, int b)
{
	return a >= 0 ? a / b : -((-a + b - 1) / b);
}

PP_HD static inline int pp_ceil_div(int a, int b)
{
	return -pp_floor_div(-a, b);
}

/* ------------------------------------------------------------------ sums of d (S, J, P) */

/*
 * First pass, thread (j, part): the sum of d[s, j, p] over the terms
 * t = s P + p of its part, in order.
 */
PP_HD static inline float pp_red_sum_partial(const float *d, int s, int j_count, int p_count,
					     int parts, int j, int part)
{
	const size_t terms = (size_t)s * (size_t)p_count;
	float sum = 0.0f;

	for (size_t t = (size_t)part; t < terms; t += (size_t)parts) {
		const size_t si = t / (size_t)p_count, pi = t % (size_t)p_count;

		sum += d[(si * (size_t)j_count + (size_t)j) * (size_t)p_count + pi];
	}
	return sum;
}

/* Second pass, lane t of output j's block: the parts t, t + PP_RED_THREADS, ... of partial (parts, J). */
PP_HD static inline float pp_red_lane(const float *partial, int j_count, int parts, int j, int t)
{
	float sum = 0.0f;

	for (int q = t; q < parts; q += PP_RED_THREADS)
		sum += partial[(size_t)q * (size_t)j_count + (size_t)j];
	return sum;
}

/* One step of a block's tree: lane t (< half) takes lane t + half; half = PP_RED_THREADS / 2, ..., 1. */
PP_HD static inline void pp_red_tree_step(float *lanes, int t, int half)
{
	lanes[t] += lanes[t + half];
}

/* ------------------------------------------------------------------ conv + bias + ReLU + max-pool */

/* The gradient that reaches the pool's output 'at': none where the ReLU (pooled output <= 0) blocked it. */
PP_HD static inline float pp_fused_grad(const struct pp_cuda_pool_geom *g, const float *dpool,
					const float *pooled, size_t at)
{
	return g->relu && !(pooled[at] > 0.0f) ? 0.0f : dpool[at];
}

/*
 * Forward, thread i of n OC PH PW (a pooled output (s, o, py, px)): the
 * convolution's outputs of its window, PP_FUSED_GROUP at a time, each
 * the sum over the taps (c, ky, kx) in order plus the bias; out[i] the
 * first maximum in the window's order (rows, then columns), through the
 * ReLU when g->relu; idx[i] its index in the sample's convolution output
 * (OC, OH, OW).
 */
PP_HD static inline void pp_fused_forward(const struct pp_cuda_pool_geom *g, const float *x,
					  const float *w, const float *b, float *out, int32_t *idx,
					  size_t i)
{
	const struct pp_cuda_geom *cg = &g->conv;
	/* one 64-bit division, the rest in 32 bits (a fraction of its cost on a GPU) */
	const size_t per = (size_t)g->pw * g->ph * cg->oc, s = i / per;
	const int rem = (int)(i - s * per), px = rem % g->pw, py = rem / g->pw % g->ph;
	const int o = rem / (g->pw * g->ph);
	const float *xs = x + s * (size_t)cg->c * cg->h * cg->w;
	const float *wo = w + (size_t)o * cg->c * cg->k * cg->k;
	const int win = g->pk * g->pk;
	float best = 0.0f;
	int32_t best_at = 0;

	for (int w0 = 0; w0 < win; w0 += PP_FUSED_GROUP) {
		int oy[PP_FUSED_GROUP], ox[PP_FUSED_GROUP];
		float acc[PP_FUSED_GROUP];
		const int nv = win - w0 < PP_FUSED_GROUP ? win - w0 : PP_FUSED_GROUP;

		for (int v = 0; v < PP_FUSED_GROUP; v++) {
			oy[v] = py * g->ps + (w0 + v) / g->pk;
			ox[v] = px * g->ps + (w0 + v) % g->pk;
			acc[v] = 0.0f;
		}
		for (int c = 0; c < cg->c; c++)
			for (int ky = 0; ky < cg->k; ky++)
				for (int kx = 0; kx < cg->k; kx++) {
					const float wv = wo[((size_t)c * cg->k + ky) * cg->k + kx];

					for (int v = 0; v < PP_FUSED_GROUP; v++) {
						const int iy = oy[v] * cg->stride - cg->pad + ky;
						const int ix = ox[v] * cg->stride - cg->pad + kx;

						if (v < nv && iy >= 0 && iy < cg->h && ix >= 0 && ix < cg->w)
							acc[v] += wv * xs[((size_t)c * cg->h + iy) * cg->w + ix];
					}
				}
		for (int v = 0; v < nv; v++) {
			const float val = acc[v] + b[o];

			if (w0 + v == 0 || val > best) {
				best = val;
				best_at = (int32_t)(((size_t)o * cg->oh + oy[v]) * cg->ow + ox[v]);
			}
		}
	}
	out[i] = g->relu && !(best > 0.0f) ? 0.0f : best;
	idx[i] = best_at;
}

/*
 * Backward, the input gradient, thread i of n C H W (an input pixel (s, c,
 * iy, ix)): for each output channel, pool row and pool column (in that
 * order) whose window may hold a convolution output that read the pixel,
 * the selected output's gradient times the weight of the tap that joined
 * them.  dpool, idx, pooled: the pool's output gradient, indices (as
 * pp_fused_forward()) and output, (n, OC, PH, PW).  No division in the
 * loop (a 64-bit division is a long routine on a GPU): the selected
 * output's row within its window is found by subtracting rows, fewer than
 * the window's side.
 */
PP_HD static inline float pp_fused_din(const struct pp_cuda_pool_geom *g, const float *dpool,
				       const int32_t *idx, const float *pooled, const float *w,
				       size_t i)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const size_t chw = (size_t)cg->c * cg->h * cg->w;
	const size_t s = i / chw;
	const int rem = (int)(i - s * chw), ix = rem % cg->w, iy = rem / cg->w % cg->h;
	const int ch = rem / (cg->w * cg->h);
	const int k = cg->k, st = cg->stride, pad = cg->pad, ow = cg->ow;
	/* the convolution outputs whose windows cover the pixel, then the pool windows holding them */
	const int oy0 = pp_ceil_div(iy + pad - k + 1, st) > 0 ? pp_ceil_div(iy + pad - k + 1, st) : 0;
	const int ox0 = pp_ceil_div(ix + pad - k + 1, st) > 0 ? pp_ceil_div(ix + pad - k + 1, st) : 0;
	const int oy1 = pp_floor_div(iy + pad, st), ox1 = pp_floor_div(ix + pad, st);
	const int py0 = pp_ceil_div(oy0 - g->pk + 1, g->ps) > 0 ? pp_ceil_div(oy0 - g->pk + 1, g->ps) : 0;
	const int px0 = pp_ceil_div(ox0 - g->pk + 1, g->ps) > 0 ? pp_ceil_div(ox0 - g->pk + 1, g->ps) : 0;
	const int py1 = oy1 < 0 ? -1 : pp_floor_div(oy1, g->ps) < g->ph - 1 ? pp_floor_div(oy1, g->ps) : g->ph - 1;
	const int px1 = ox1 < 0 ? -1 : pp_floor_div(ox1, g->ps) < g->pw - 1 ? pp_floor_div(ox1, g->ps) : g->pw - 1;
	const int plane = cg->oh * ow;
	const size_t kk = (size_t)k * k;
	float sum = 0.0f;

	for (int o = 0; o < cg->oc; o++) {
		const size_t row0 = (s * cg->oc + o) * g->ph;
		const float *wo = w + ((size_t)o * cg->c + ch) * kk;

		for (int py = py0; py <= py1; py++)
			for (int px = px0; px <= px1; px++) {
				const size_t at = (row0 + py) * g->pw + px;
				/* the selected output (oy, ox) = (py ps + dy, px ps + dx), dy, dx < pk */
				int d, dy = 0, ky, kx;

				/* the ReLU's mask first: it stops about half the windows with one load */
				if (g->relu && !(pooled[at] > 0.0f))
					continue;
				d = idx[at] - o * plane - (py * g->ps * ow + px * g->ps);
				while (d >= ow && dy + 1 < g->pk) {
					d -= ow;
					dy++;
				}
				ky = iy + pad - (py * g->ps + dy) * st;
				kx = ix + pad - (px * g->ps + d) * st;
				if (ky >= 0 && ky < k && kx >= 0 && kx < k)
					sum += dpool[at] * wo[(size_t)ky * k + kx];
			}
	}
	return sum;
}

/*
 * Backward, the weight and bias gradients as one reduction: output j <
 * OC C K K is the weight (o, c, ky, kx), the OC after it the biases;
 * term t = s PH PW + q of the n PH PW is sample s's pooled output q of
 * channel o: its gradient (pp_fused_grad()), times, for a weight, the
 * input the tap read at the selected position (0 in the padding).  A term
 * is what the channel's outputs share (pp_fused_param_sel(): the gradient
 * and where the selected window lies, loaded once per block by the
 * kernel) and what a weight reads there (pp_fused_param_tap()).
 */
struct pp_fused_sel {
	float gr;        /* the gradient that reached the pooled output */
	int iy0, ix0;    /* the input row and column of the selected window's first tap */
	long long base;  /* x's index of that tap in channel 0 (may lie in the padding) */
};

/* A weight's (or the bias's) place in a window: the tap it is, once per thread. */
struct pp_fused_tapw {
	int bias;        /* the channel's bias: the term is the gradient itself */
	int ky, kx;      /* the tap */
	long long off;   /* x's index of the tap from the window's base: c H W + ky W + kx */
};

/* The term t of channel o: its gradient and where its selected window lies. */
PP_HD static inline struct pp_fused_sel pp_fused_param_sel(const struct pp_cuda_pool_geom *g,
							   const float *dpool, const int32_t *idx,
							   const float *pooled, int o, size_t t)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const size_t pp = (size_t)g->ph * g->pw, s = t / pp;
	const size_t at = (s * cg->oc + o) * pp + (t - s * pp);
	/* one 64-bit division above; these in 32 bits, a fraction of its cost on a GPU */
	const int r = idx[at] - o * cg->oh * cg->ow, oy = r / cg->ow;
	struct pp_fused_sel e;

	e.gr = pp_fused_grad(g, dpool, pooled, at);
	e.iy0 = oy * cg->stride - cg->pad;
	e.ix0 = (r - oy * cg->ow) * cg->stride - cg->pad;
	e.base = (long long)s * cg->c * cg->h * cg->w + (long long)e.iy0 * cg->w + e.ix0;
	return e;
}

/* Weight w (c K K + ky K + kx) of a channel, or w = C K K its bias. */
PP_HD static inline struct pp_fused_tapw pp_fused_param_tapw(const struct pp_cuda_pool_geom *g, int w)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const int kk = cg->c * cg->k * cg->k;
	struct pp_fused_tapw tw = { w >= kk, 0, 0, 0 };

	if (!tw.bias) {
		const int c = w / (cg->k * cg->k);

		tw.ky = w / cg->k % cg->k;
		tw.kx = w % cg->k;
		tw.off = ((long long)c * cg->h + tw.ky) * cg->w + tw.kx;
	}
	return tw;
}

/* The term's part of a weight's (or bias's) gradient. */
PP_HD static inline float pp_fused_param_tap(const struct pp_cuda_pool_geom *g, const float *x,
					     const struct pp_fused_sel *e,
					     const struct pp_fused_tapw *tw)
{
	const int iy = e->iy0 + tw->ky, ix = e->ix0 + tw->kx;

	if (tw->bias || e->gr == 0.0f)
		return e->gr;
	if (iy < 0 || iy >= g->conv.h || ix < 0 || ix >= g->conv.w)
		return 0.0f;
	return e->gr * x[e->base + tw->off];
}

/* Term t of output j of the reduction. */
PP_HD static inline float pp_fused_param_term(const struct pp_cuda_pool_geom *g, const float *dpool,
					      const int32_t *idx, const float *pooled,
					      const float *x, int j, size_t t)
{
	const int kk = g->conv.c * g->conv.k * g->conv.k;
	const int o = j < g->conv.oc * kk ? j / kk : j - g->conv.oc * kk;
	const struct pp_fused_sel e = pp_fused_param_sel(g, dpool, idx, pooled, o, t);
	const struct pp_fused_tapw tw = pp_fused_param_tapw(g, j < g->conv.oc * kk ? j % kk : kk);

	return pp_fused_param_tap(g, x, &e, &tw);
}

/* The outputs of that reduction: OC C K K weights, then OC biases. */
PP_HD static inline int pp_fused_param_count(const struct pp_cuda_pool_geom *g)
{
	return g->conv.oc * (g->conv.c * g->conv.k * g->conv.k + 1);
}

/* Terms a part of that reduction takes, at least (where there are that many). */
#define PP_PARAM_MIN_TERMS 32
/* (output, part) pairs of that reduction aimed at: a few times what an H100 holds at once. */
#define PP_PARAM_TARGET_TASKS (1L << 20)

/*
 * The parts of that reduction over 'terms': more and shorter than
 * pp_red_parts() gives (the kernel's blocks share each term's loads among
 * a channel's weights, so a part's terms are cheap and many parts keep the
 * GPU busy), by a rule of the shape alone.
 */
PP_HD static inline int pp_fused_param_parts(int outputs, size_t terms)
{
	size_t cap = (size_t)PP_PARAM_TARGET_TASKS / (size_t)(outputs > 0 ? outputs : 1);
	size_t p = (terms + PP_PARAM_MIN_TERMS - 1) / PP_PARAM_MIN_TERMS;

	cap = cap < 1 ? 1 : cap > PP_RED_MAX_PARTS ? PP_RED_MAX_PARTS : cap;
	return (int)(p < 1 ? 1 : p > cap ? cap : p);
}


/* The terms of part 'part' of 'parts': part, part + parts, ... below 'terms'. */
PP_HD static inline size_t pp_fused_param_steps(size_t terms, int parts, int part)
{
	return terms > (size_t)part ? (terms - (size_t)part + (size_t)parts - 1) / (size_t)parts : 0;
}

/* First pass, thread (j, part) of that reduction over n samples: its terms in order. */
PP_HD static inline float pp_fused_param_partial(const struct pp_cuda_pool_geom *g,
						 const float *dpool, const int32_t *idx,
						 const float *pooled, const float *x, int n,
						 int parts, int j, int part)
{
	const size_t terms = (size_t)n * g->ph * g->pw;
	float sum = 0.0f;

	for (size_t t = (size_t)part; t < terms; t += (size_t)parts)
		sum += pp_fused_param_term(g, dpool, idx, pooled, x, j, t);
	return sum;
}

/*
 * How the first pass's kernel shares the terms' loads: a block of
 * PP_PARAM_THREADS threads takes one channel o, 'pb' consecutive parts and
 * 'wb' of the channel's C K K + 1 weights and bias, a (part, weight) pair
 * per task, the weights fastest, each thread at most PP_PARAM_TASKS tasks;
 * it loads the terms of its parts into shared memory tile by tile (a tile:
 * 'tile_steps' terms of each part, PP_PARAM_TILE at most), and each task
 * adds its part's terms in order, as pp_fused_param_partial() does: the same
 * sums, so the same bits, whatever the tiles.
 */
#define PP_PARAM_THREADS 256
#define PP_PARAM_TASKS 4
#define PP_PARAM_TILE 1024

struct pp_fused_param_plan {
	int kw;             /* a channel's weights and bias: C K K + 1 */
	int wb, pb;         /* weights and parts of a block */
	int wchunks, pchunks; /* blocks of a channel: over its weights, over the parts */
	int tile_steps;     /* terms of each part in a tile */
	unsigned blocks;    /* OC pchunks wchunks, block b = (o pchunks + pc) wchunks + wc */
};

PP_HD static inline struct pp_fused_param_plan pp_fused_param_plan_of(const struct pp_cuda_pool_geom *g,
								      int parts)
{
	const int cap = PP_PARAM_THREADS * PP_PARAM_TASKS;
	struct pp_fused_param_plan p;

	p.kw = g->conv.c * g->conv.k * g->conv.k + 1;
	p.wb = p.kw < cap ? p.kw : cap;
	p.pb = cap / p.wb < parts ? cap / p.wb : parts;
	p.wchunks = (p.kw + p.wb - 1) / p.wb;
	p.pchunks = (parts + p.pb - 1) / p.pb;
	p.tile_steps = PP_PARAM_TILE / p.pb;
	p.blocks = (unsigned)g->conv.oc * (unsigned)p.pchunks * (unsigned)p.wchunks;
	return p;
}

/* ------------------------------------------------------------------ the tiled kernels: a sample a block */

/*
 * The forward and the input gradient of the usual CNN's layers (stride 1,
 * kernels up to PP_FUSED_KMAX, pools of 2 x 2 for the forward) by a block
 * a sample, whose input (forward) or unpooled gradient (backward) lies in
 * shared memory with zeros around it, as every weight of the layer does:
 * each thread computes several outputs that share their loads, from
 * registers, with no test of the borders in its loops.  The terms they
 * add beyond those of pp_fused_forward() and pp_fused_din() are products
 * with zeros, which leave a sum's bits as they were (a sum that starts at
 * +0 is never -0; weights finite).  The forward adds its terms in
 * pp_fused_forward()'s order, so its bits are the same; the input
 * gradient takes a pixel's terms by output channel, then by the
 * convolution's rows and columns, where pp_fused_din() takes them by pool
 * window, so its bits may differ from that kernel's in the last place (a
 * pool window spans rows).  Both orders are fixed: two runs give the same
 * bits.  Other layers, or a sample too large for a block's shared memory,
 * take the kernels above.
 */
/* The largest kernel side of the tiled kernels: their registers are sized by it. */
#define PP_FUSED_KMAX 7
/* Input pixels of a row that a thread of the tiled input gradient computes. */
#define PP_DIN_RUN 4
/* Shared memory a block may take without asking for more (the same on every GPU since sm_20). */
#define PP_FUSED_SMEM_BYTES (48 * 1024)

/* Where a tiled kernel keeps a sample and the weights in shared memory. */
struct pp_fused_tile_plan {
	int rows, cols;    /* a channel's plane with its border of zeros */
	int top, left;     /* the border above and left of the plane's first row and column */
	int runs;          /* the input gradient: runs of PP_DIN_RUN pixels a row */
	int items;         /* a sample's work items: pooled outputs, or input rows' runs */
	int plane_floats;  /* channels x rows x cols: the sample's planes */
	int w_floats;      /* OC C K K: the weights */
};

/* Shared memory of a tiled kernel, in bytes. */
PP_HD static inline size_t pp_fused_tile_bytes(const struct pp_fused_tile_plan *p)
{
	return ((size_t)p->plane_floats + (size_t)p->w_floats) * sizeof(float);
}

/*
 * The tiled forward's plan: the sample's input with 'pad' zeros on every
 * side (staged by pp_fused_padded_input()), a thread per pooled output.  Returns 0 when the layer fits it
 * (stride 1, a 2 x 2 pool, K <= PP_FUSED_KMAX, the sample and the weights
 * in PP_FUSED_SMEM_BYTES), else -1.
 */
PP_HD static inline int pp_fused_forward_plan(const struct pp_cuda_pool_geom *g,
					      struct pp_fused_tile_plan *p)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const long long rows = (long long)cg->h + 2LL * cg->pad, cols = (long long)cg->w + 2LL * cg->pad;
	const long long planes = (long long)cg->c * rows * cols;
	const long long wf = (long long)cg->oc * cg->c * cg->k * cg->k;

	if (cg->stride != 1 || g->pk != 2 || cg->k > PP_FUSED_KMAX ||
	    (planes + wf) * (long long)sizeof(float) > PP_FUSED_SMEM_BYTES)
		return -1;
	p->rows = (int)rows;
	p->cols = (int)cols;
	p->top = p->left = cg->pad;
	p->runs = 0;
	p->items = cg->oc * g->ph * g->pw;
	p->plane_floats = (int)planes;
	p->w_floats = (int)wf;
	return 0;
}

/*
 * Element e of the inputs of samples s, s + 1, ... each channel with the
 * padding's zeros around it (H + 2 pad rows of W + 2 pad): x (s + e's
 * sample, c, r - pad, q - pad), or 0 in the padding.  Without padding the
 * planes are the inputs as they lie: no division.
 */
PP_HD static inline float pp_fused_padded_input(const struct pp_cuda_geom *cg, const float *x,
						size_t s, int e)
{
	const int rows = cg->h + 2 * cg->pad, cols = cg->w + 2 * cg->pad;
	int q, r, c;

	if (cg->pad == 0)
		return x[s * (size_t)cg->c * (size_t)cg->h * (size_t)cg->w + (size_t)e];
	q = e % cols - cg->pad;
	r = e / cols % rows - cg->pad;
	c = e / (cols * rows);
	if (r < 0 || r >= cg->h || q < 0 || q >= cg->w)
		return 0.0f;
	return x[((s * (size_t)cg->c + (size_t)c) * (size_t)cg->h + (size_t)r) * (size_t)cg->w +
		 (size_t)q];
}

/*
 * Pooled output i (o, py, px) of the sample whose padded input is xs and
 * weights ws (both in shared memory), as pp_fused_forward(): the window's
 * four convolution outputs from two rows of K + 1 inputs a tap row, held
 * in registers; k is the layer's K (a constant in the kernel).
 */
PP_HD static inline void pp_fused_forward_tile(const struct pp_cuda_pool_geom *g, const int k,
					       const struct pp_fused_tile_plan *p, const float *xs,
					       const float *ws, const float *b, float *out,
					       int32_t *idx, int i)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const int px = i % g->pw, py = i / g->pw % g->ph, o = i / (g->pw * g->ph);
	const int oy = py * g->ps, ox = px * g->ps;
	float acc[4] = { 0.0f, 0.0f, 0.0f, 0.0f }, best = 0.0f;
	int32_t best_at = 0;

	for (int c = 0; c < cg->c; c++)
		for (int ky = 0; ky < k; ky++) {
			const float *r0 = xs + ((c * p->rows) + oy + ky) * p->cols + ox;
			const float *r1 = r0 + p->cols;
			const float *wr = ws + ((o * cg->c + c) * k + ky) * k;
			float a[PP_FUSED_KMAX + 1], d[PP_FUSED_KMAX + 1];

			for (int j = 0; j <= k; j++) {
				a[j] = r0[j];
				d[j] = r1[j];
			}
			for (int kx = 0; kx < k; kx++) {
				const float wv = wr[kx];

				acc[0] += wv * a[kx];
				acc[1] += wv * a[kx + 1];
				acc[2] += wv * d[kx];
				acc[3] += wv * d[kx + 1];
			}
		}
	for (int v = 0; v < 4; v++) {
		const float val = acc[v] + b[o];

		if (v == 0 || val > best) {
			best = val;
			best_at = (int32_t)((o * cg->oh + oy + v / 2) * cg->ow + ox + v % 2);
		}
	}
	out[i] = g->relu && !(best > 0.0f) ? 0.0f : best;
	idx[i] = best_at;
}

/*
 * The tiled input gradient's plan: each output channel's plane of the
 * gradient that reached the convolution (the selected outputs' gradients,
 * zeros elsewhere) with K - 1 zeros above and left and more below and
 * right, so that every tap a run reads lies in it; a thread per run of
 * PP_DIN_RUN pixels of an input row.  Returns 0 when the layer fits it
 * (stride 1, K <= PP_FUSED_KMAX, the planes and the weights in
 * PP_FUSED_SMEM_BYTES), else -1.
 */
PP_HD static inline int pp_fused_din_plan(const struct pp_cuda_pool_geom *g,
					  struct pp_fused_tile_plan *p)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const long long runs = ((long long)cg->w + PP_DIN_RUN - 1) / PP_DIN_RUN;
	/* the rows and columns the runs read, and every output of the
	 * convolution (where the scatter writes: more, where pad >= K) */
	const long long rows = ((long long)cg->h + cg->pad > cg->oh ? (long long)cg->h + cg->pad : cg->oh) +
			       cg->k - 1;
	/* odd: the runs of a warp's threads, 4 floats apart in a row, then a
	 * row further, fall in fewer common banks (6 at most in a bank for the
	 * CNN's 12 x 12 at 16 columns, 3 at 17) */
	const long long cols = ((runs * PP_DIN_RUN + cg->pad > cg->ow ? runs * PP_DIN_RUN + cg->pad : cg->ow) +
				cg->k - 1) | 1;
	const long long planes = (long long)cg->oc * rows * cols;
	const long long wf = (long long)cg->oc * cg->c * cg->k * cg->k;

	if (cg->stride != 1 || cg->k > PP_FUSED_KMAX ||
	    (planes + wf) * (long long)sizeof(float) > PP_FUSED_SMEM_BYTES)
		return -1;
	p->rows = (int)rows;
	p->cols = (int)cols;
	p->top = p->left = cg->k - 1;
	p->runs = (int)runs;
	p->items = cg->c * cg->h * (int)runs;
	p->plane_floats = (int)planes;
	p->w_floats = (int)wf;
	return 0;
}

/*
 * The planes staged in two steps, a barrier between them: every element
 * zeroed, then each pooled output q (o, py, px) of sample s writes the
 * gradient that reached it (pp_fused_grad(): 0 where the ReLU blocked
 * it) at its selected convolution output, inside its window.  Windows do
 * not overlap, so no two outputs write one element; a thread per pooled
 * output, one division each, where a thread per element would test every
 * element against its window.
 */
PP_HD static inline void pp_fused_din_scatter(const struct pp_cuda_pool_geom *g,
					      const struct pp_fused_tile_plan *p, const float *dpool,
					      const int32_t *idx, const float *pooled, size_t s,
					      float *gs, int q)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const int per = g->ph * g->pw, o = q / per;
	const size_t at = (s * (size_t)cg->oc + (size_t)o) * (size_t)per + (size_t)(q - o * per);
	const int r = idx[at] - o * cg->oh * cg->ow, oy = r / cg->ow, ox = r - oy * cg->ow;

	gs[(o * p->rows + oy + p->top) * p->cols + ox + p->left] = pp_fused_grad(g, dpool, pooled, at);
}

/*
 * Run 'item' (c, iy, run) of the sample's input gradient, from its planes
 * gs and the weights ws (both in shared memory): for each output channel
 * and each of the K gradient rows that reach the input row (the
 * convolution's rows in order, so the kernel's rows backwards), the row's
 * PP_DIN_RUN + K - 1 values in registers, each pixel of the run adding
 * its K taps (columns in order); din_s: the sample's input gradient.  A
 * pixel's terms come by output channel, then by the convolution's row and
 * column (not by pool window, as pp_fused_din()'s).
 */
PP_HD static inline void pp_fused_din_tile(const struct pp_cuda_pool_geom *g, const int k,
					   const struct pp_fused_tile_plan *p, const float *gs,
					   const float *ws, float *din_s, int item)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const int run = item % p->runs, iy = item / p->runs % cg->h, c = item / (p->runs * cg->h);
	const int ix0 = run * PP_DIN_RUN;
	float acc[PP_DIN_RUN];

	for (int v = 0; v < PP_DIN_RUN; v++)
		acc[v] = 0.0f;
	for (int o = 0; o < cg->oc; o++) {
		/* gradient row iy + pad - (K - 1) + t lies at plane row iy + pad + t */
		const float *go = gs + (o * p->rows + iy + cg->pad) * p->cols + ix0 + cg->pad;
		const float *wo = ws + (o * cg->c + c) * k * k;

		for (int t = 0; t < k; t++) {
			const float *gr = go + t * p->cols, *wr = wo + (k - 1 - t) * k;
			float gv[PP_DIN_RUN + PP_FUSED_KMAX - 1];

			for (int j = 0; j < PP_DIN_RUN + k - 1; j++)
				gv[j] = gr[j];
			for (int j = 0; j < k; j++) {
				const float wv = wr[k - 1 - j];

				for (int v = 0; v < PP_DIN_RUN; v++)
					acc[v] += gv[v + j] * wv;
			}
		}
	}
	for (int v = 0; v < PP_DIN_RUN && ix0 + v < cg->w; v++)
		din_s[(c * cg->h + iy) * cg->w + ix0 + v] = acc[v];
}

/*
 * The weight and bias gradients of the usual layers by blocks of samples,
 * every term in shared memory: block (chunk, o) takes output channel o
 * and a chunk of consecutive samples, which it stages 'samples' at a time
 * (a group): their inputs, with the padding's zeros, and for each pooled
 * output of channel o its gradient (pp_fused_grad()) and where its
 * selected window's first tap lies among them.  A task is a (weight or
 * bias, lane): lane r adds a group's terms r, r + lanes, ... in order,
 * group after group, so each (chunk, lane) is a part of the reduction and
 * sum_finish_kernel adds the parts as for the kernel above; a part's terms
 * and their order are a rule of the shape alone (two runs give the same
 * bits).  Its partial sums are the terms of pp_fused_param_term() in that
 * order: a tap in the padding adds the gradient times a zero where that
 * function gives 0, and a gradient of 0 is multiplied by its input where
 * that function takes the 0 alone, which leave the sum's bits as they were
 * (inputs finite).  Layers
 * whose channel has more than PP_WG_THREADS PP_WG_TASKS weights, or
 * whose sample does not fit a block's shared memory, take the kernel above.
 */
#define PP_WG_THREADS 256
#define PP_WG_TASKS 4
/* Samples a group stages, at most. */
#define PP_WG_SAMPLES 8
/* Chunks of a channel, at most: beyond, a chunk takes more groups. */
#define PP_WG_MAX_CHUNKS 512

/* A term of a group: the gradient of a pooled output, and its window's first tap in the planes. */
struct pp_fused_wsel {
	float gr;
	int off;
};

struct pp_fused_wg_plan {
	int kw;            /* a channel's weights and bias: C K K + 1 */
	int lanes;         /* lanes a weight's terms are dealt to in a group */
	int tasks;         /* kw lanes: at most PP_WG_THREADS PP_WG_TASKS */
	int samples;       /* samples of a group */
	int groups;        /* groups of the batch */
	int chunk_groups;  /* groups a chunk takes */
	int chunks;        /* chunks of a channel */
	int parts;         /* chunks lanes: the parts of each weight's sum */
	int rows, cols;    /* an input plane with the padding */
	int plane_floats;  /* the group's inputs: samples C rows cols */
	int sel_count;     /* the group's terms: samples PH PW */
	unsigned blocks;   /* OC chunks: block b is chunk b / OC of channel b % OC */
};

/* Chunks of a channel, at most: PP_WG_MAX_CHUNKS, and parts no more than PP_RED_MAX_PARTS. */
PP_HD static inline int pp_fused_wg_max_chunks(int lanes)
{
	const int cap = PP_RED_MAX_PARTS / (lanes > 0 ? lanes : 1);

	return cap < 1 ? 1 : cap < PP_WG_MAX_CHUNKS ? cap : PP_WG_MAX_CHUNKS;
}

/* The chunks of a channel for n samples in groups of 'samples'. */
PP_HD static inline void pp_fused_wg_chunks(struct pp_fused_wg_plan *p, int n)
{
	const int most = pp_fused_wg_max_chunks(p->lanes);

	p->groups = n > 0 ? (n + p->samples - 1) / p->samples : 1;
	p->chunk_groups = (p->groups + most - 1) / most;
	p->chunks = (p->groups + p->chunk_groups - 1) / p->chunk_groups;
	p->parts = p->chunks * p->lanes;
}

/* The plan for n samples: 0, or -1 where the layer takes the kernel above. */
PP_HD static inline int pp_fused_wg_plan_of(const struct pp_cuda_pool_geom *g, int n,
					    struct pp_fused_wg_plan *p)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const long long rows = (long long)cg->h + 2LL * cg->pad, cols = (long long)cg->w + 2LL * cg->pad;
	const long long pp = (long long)g->ph * g->pw;
	const long long per = (long long)cg->c * rows * cols * (long long)sizeof(float) +
			      pp * (long long)sizeof(struct pp_fused_wsel);
	const long long kw = (long long)cg->c * cg->k * cg->k + 1;
	long long samples = per > 0 ? PP_FUSED_SMEM_BYTES / per : 0, lanes;

	memset(p, 0, sizeof(*p));
	if (samples < 1 || kw > PP_WG_THREADS * PP_WG_TASKS)
		return -1;
	samples = samples < PP_WG_SAMPLES ? samples : PP_WG_SAMPLES;
	lanes = kw < PP_WG_THREADS ? PP_WG_THREADS / kw : 1;
	lanes = lanes < samples * pp ? lanes : samples * pp;
	p->kw = (int)kw;
	p->lanes = (int)lanes;
	p->tasks = (int)(kw * lanes);
	p->samples = (int)samples;
	p->rows = (int)rows;
	p->cols = (int)cols;
	p->plane_floats = (int)(samples * cg->c * rows * cols);
	p->sel_count = (int)(samples * pp);
	pp_fused_wg_chunks(p, n);
	p->blocks = (unsigned)cg->oc * (unsigned)p->chunks;
	return 0;
}

/* Shared memory of a block of the plan, in bytes. */
PP_HD static inline size_t pp_fused_wg_bytes(const struct pp_fused_wg_plan *p)
{
	return (size_t)p->plane_floats * sizeof(float) + (size_t)p->sel_count * sizeof(struct pp_fused_wsel);
}

/* Element e of the planes of the group from sample s0 (pp_fused_padded_input()), 0 past sample n - 1. */
PP_HD static inline float pp_fused_wg_stage_x(const struct pp_cuda_pool_geom *g,
					      const struct pp_fused_wg_plan *p, const float *x, int n,
					      int s0, int e)
{
	const size_t per = (size_t)g->conv.c * (size_t)p->rows * (size_t)p->cols;

	return (size_t)e < (size_t)(n - s0) * per ? pp_fused_padded_input(&g->conv, x, (size_t)s0, e)
						  : 0.0f;
}

/* Term e of channel o in the group from sample s0: pooled output e of the group's sample e / (PH PW). */
PP_HD static inline struct pp_fused_wsel pp_fused_wg_stage_sel(const struct pp_cuda_pool_geom *g,
							       const struct pp_fused_wg_plan *p,
							       const float *dpool, const int32_t *idx,
							       const float *pooled, int n, int s0, int o,
							       int e)
{
	const struct pp_cuda_geom *cg = &g->conv;
	const int pp = g->ph * g->pw, sl = e / pp;
	struct pp_fused_wsel t = { 0.0f, 0 };
	size_t at;
	int r, oy;

	if (s0 + sl >= n)
		return t;
	at = ((size_t)(s0 + sl) * (size_t)cg->oc + (size_t)o) * (size_t)pp + (size_t)(e - sl * pp);
	r = idx[at] - o * cg->oh * cg->ow;
	oy = r / cg->ow;
	t.gr = pp_fused_grad(g, dpool, pooled, at);
	t.off = (sl * cg->c * p->rows + oy * cg->stride) * p->cols + (r - oy * cg->ow) * cg->stride;
	return t;
}

/* Weight w (c K K + ky K + kx) of a channel: its tap's offset from a window's first; -1: w = C K K, the bias. */
PP_HD static inline int pp_fused_wg_tap(const struct pp_cuda_pool_geom *g,
					const struct pp_fused_wg_plan *p, int w)
{
	const int k = g->conv.k;

	if (w >= p->kw - 1)
		return -1;
	return (w / (k * k) * p->rows + w / k % k) * p->cols + w % k;
}

/* acc plus lane 'lane''s terms of a group's 'count' terms, in order, for the weight at 'tap' (-1: the bias). */
PP_HD static inline float pp_fused_wg_add(const struct pp_fused_wg_plan *p, const float *xs,
					  const struct pp_fused_wsel *sel, int count, int lane,
					  int tap, float acc)
{
	if (tap < 0) {
		for (int u = lane; u < count; u += p->lanes)
			acc += sel[u].gr;
	} else {
		for (int u = lane; u < count; u += p->lanes)
			acc += sel[u].gr * xs[sel[u].off + tap];
	}
	return acc;
}

/* Where task k's sum goes in the partial sums (parts, J): the weights of all channels, then the biases. */
PP_HD static inline size_t pp_fused_wg_slot(const struct pp_cuda_pool_geom *g,
					    const struct pp_fused_wg_plan *p, int chunk, int o, int k)
{
	const int w = k % p->kw, lane = k / p->kw, jn = g->conv.oc * p->kw;
	const int j = w < p->kw - 1 ? o * (p->kw - 1) + w : g->conv.oc * (p->kw - 1) + o;

	return (size_t)(chunk * p->lanes + lane) * (size_t)jn + (size_t)j;
}

/*
 * The floats of the weight gradients' partial sums for up to n samples
 * (the scratch of pp_cuda_conv_pool_backward()), whichever kernel takes
 * them: the chunks of a channel for n samples at most
 * pp_fused_wg_max_chunks(), and never more than for n.
 */
PP_HD static inline size_t pp_fused_param_floats(const struct pp_cuda_pool_geom *g, int n)
{
	const size_t terms = (size_t)n * g->ph * g->pw, jn = (size_t)pp_fused_param_count(g);
	const size_t tiled = jn * (size_t)pp_fused_param_parts((int)jn, terms);
	struct pp_fused_wg_plan p;
	size_t chunks;

	if (pp_fused_wg_plan_of(g, n, &p) != 0)
		return tiled;
	chunks = (size_t)(p.groups < pp_fused_wg_max_chunks(p.lanes) ? p.groups
								       : pp_fused_wg_max_chunks(p.lanes));
	return tiled > jn * chunks * (size_t)p.lanes ? tiled : jn * chunks * (size_t)p.lanes;
}

/* ------------------------------------------------------------------ max-pool backward */

/*
 * A max-pool's input gradient (no padding), thread i of n C H W (an input
 * pixel): the sum of the output gradients of the windows that cover the
 * pixel and selected it (idx, as pp_nn_maxpool_forward()), in output
 * order, as pp_nn_maxpool_backward() adds them: overlapping windows need
 * no atomics.  g: the pool's geometry (c channels, h x w in, oh x ow out).
 */
PP_HD static inline float pp_pool_din(const struct pp_cuda_geom *g, const float *dout,
				      const int32_t *idx, size_t i)
{
	const int ix = (int)(i % (size_t)g->w), iy = (int)(i / (size_t)g->w % (size_t)g->h);
	const size_t sc = i / ((size_t)g->w * g->h); /* sample s, channel ch: s C + ch */
	const int32_t at = (int32_t)((sc % (size_t)g->c * g->h + iy) * g->w + ix);
	const int oy0 = pp_ceil_div(iy - g->k + 1, g->stride) > 0 ? pp_ceil_div(iy - g->k + 1, g->stride) : 0;
	const int ox0 = pp_ceil_div(ix - g->k + 1, g->stride) > 0 ? pp_ceil_div(ix - g->k + 1, g->stride) : 0;
	const int oy1 = iy / g->stride < g->oh - 1 ? iy / g->stride : g->oh - 1;
	const int ox1 = ix / g->stride < g->ow - 1 ? ix / g->stride : g->ow - 1;
	float sum = 0.0f;

	for (int oy = oy0; oy <= oy1; oy++)
		for (int ox = ox0; ox <= ox1; ox++) {
			const size_t o = (sc * g->oh + oy) * g->ow + ox;

			if (idx[o] == at)
				sum += dout[o];
		}
	return sum;
}

/* ------------------------------------------------------------------ softmax cross-entropy */

/* What a block of the softmax adds up: its samples' losses and correct predictions. */
struct pp_xent_part {
	double loss;                /* the sum of the block's losses */
	unsigned long long correct; /* its samples whose largest logit was their label */
};

/* One step of a softmax block's tree, as pp_red_tree_step(). */
PP_HD static inline void pp_xent_tree_step(struct pp_xent_part *lanes, int t, int half)
{
	lanes[t].loss += lanes[t + half].loss;
	lanes[t].correct += lanes[t + half].correct;
}

/* The last block's lane t: the blocks' parts t, t + PP_RED_THREADS, ... in order. */
PP_HD static inline struct pp_xent_part pp_xent_lane(const struct pp_xent_part *parts, int blocks,
						     int t)
{
	struct pp_xent_part sum = { 0.0, 0 };

	for (int q = t; q < blocks; q += PP_RED_THREADS) {
		sum.loss += parts[q].loss;
		sum.correct += parts[q].correct;
	}
	return sum;
}

/* Blocks of the softmax of n samples: PP_RED_THREADS samples each. */
PP_HD static inline int pp_xent_blocks(int n)
{
	return n > 0 ? (n + PP_RED_THREADS - 1) / PP_RED_THREADS : 1;
}

/* Where the blocks' parts start in the softmax's scratch, after its ticket (an unsigned int). */
#define PP_XENT_PARTS_AT 16

/* The bytes of the softmax's scratch for n samples: the ticket, then a part per block. */
PP_HD static inline size_t pp_xent_scratch_bytes(int n)
{
	return PP_XENT_PARTS_AT + (size_t)pp_xent_blocks(n) * sizeof(struct pp_xent_part);
}

#endif
