/*
 * tests/test_nn_gpu_math.c: the per-thread arithmetic of the CUDA kernels
 * of nn/cuda/fused.cu (nn/cuda/fused.h) run on the CPU for every thread
 * and block index, the blocks' trees step by step in the kernels' order,
 * and compared with the CPU layers of nn/: the fused conv + bias + ReLU +
 * max-pool forward with pp_nn_conv2d_forward() then
 * pp_nn_maxpool_relu_forward(), its backward with
 * pp_nn_conv2d_backward_pooled(), the tiled kernels' blocks (a sample's
 * planes staged, then every thread's outputs) with the threads' bits
 * (forward) or its terms in their order (input gradient), the max-pool's
 * gathered backward with
 * pp_nn_maxpool_backward(), the deterministic sums with plain sums,
 * the softmax cross-entropy with pp_nn_softmax_xent(); and the
 * optimizers' per-element arithmetic (nn/nn_math.h) with the CPU's
 * portable optimizers, bit for bit; the small GEMM kernels
 * (nn/cuda/small_gemm.h) against the product in double.  Shapes: the CNN's
 * two convolutions, batch 1, odd sizes, padding, stride 2, pools that
 * leave rows out or leave gaps, windows of more than one group, sums over
 * more and fewer terms than a block has lanes.  Runs without a GPU; the
 * kernels themselves are compared on a GPU by tests/test_nn_cuda.c.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "nn/cpu/cpu_impl.h"
#include "nn/cuda/fused.h"
#include "nn/cuda/small_gemm.h"
#include "nn/nn_math.h"
#include "tests/nn_testutil.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------ the blocks, emulated */

/*
 * The second pass of a reduction (sum_finish_kernel): for each output j,
 * the block's lanes from pp_red_lane(), the tree, the sum added to out0[j]
 * (j < split) or out1[j - split].
 */
static void emu_finish(float *out0, float *out1, int split, const float *partial, int jn, int parts)
{
	float lanes[PP_RED_THREADS];

	for (int j = 0; j < jn; j++) {
		for (int t = 0; t < PP_RED_THREADS; t++)
			lanes[t] = pp_red_lane(partial, jn, parts, j, t);
		for (int half = PP_RED_THREADS / 2; half > 0; half /= 2)
			for (int t = 0; t < half; t++)
				pp_red_tree_step(lanes, t, half);
		if (j < split)
			out0[j] += lanes[0];
		else
			out1[j - split] += lanes[0];
	}
}

/*
 * The first pass of the weight and bias gradients as conv_pool_params_kernel
 * runs it: for each block of the plan, the tiles of its parts' terms loaded
 * (pp_fused_param_sel()) by the block's threads, then each task adding its
 * part's terms of the tile in order (pp_fused_param_tap()); the partial
 * sums written as (parts, J).
 */
static void emu_param_blocks(float *partial, const struct pp_cuda_pool_geom *g, const float *dpool,
			     const int32_t *idx, const float *pooled, const float *x, int n,
			     int parts, const struct pp_fused_param_plan *plan)
{
	static struct pp_fused_sel tile[PP_PARAM_TILE];
	const size_t terms = (size_t)n * g->ph * g->pw;
	const int jn = g->conv.oc * plan->kw;

	ck_assert_int_le(plan->tile_steps * plan->pb, PP_PARAM_TILE);
	ck_assert_int_le(plan->wb * plan->pb, PP_PARAM_THREADS * PP_PARAM_TASKS);
	for (unsigned b = 0; b < plan->blocks; b++) {
		const int wc = (int)b % plan->wchunks, pc = (int)b / plan->wchunks % plan->pchunks;
		const int o = (int)b / (plan->wchunks * plan->pchunks);
		const int p0 = pc * plan->pb, np = PP_MIN(plan->pb, parts - p0);
		const int w0 = wc * plan->wb, nw = PP_MIN(plan->wb, plan->kw - w0);
		const size_t steps_max = pp_fused_param_steps(terms, parts, p0);
		float acc[PP_PARAM_THREADS * PP_PARAM_TASKS] = { 0 };

		for (size_t m0 = 0; m0 < steps_max; m0 += (size_t)plan->tile_steps) {
			const int ms = (int)PP_MIN(steps_max - m0, (size_t)plan->tile_steps);

			for (int e = 0; e < ms * np; e++) {
				const size_t t = (size_t)(p0 + e % np) + (m0 + (size_t)(e / np)) * (size_t)parts;

				if (t < terms)
					tile[e] = pp_fused_param_sel(g, dpool, idx, pooled, o, t);
			}
			for (int k = 0; k < nw * np; k++) {
				const struct pp_fused_tapw tw = pp_fused_param_tapw(g, w0 + k % nw);
				const size_t steps = pp_fused_param_steps(terms, parts, p0 + k / nw);

				for (int mm = 0; mm < ms && m0 + (size_t)mm < steps; mm++)
					acc[k] += pp_fused_param_tap(g, x, &tile[mm * np + k / nw], &tw);
			}
		}
		for (int k = 0; k < nw * np; k++) {
			const int w = w0 + k % nw;

			partial[(size_t)(p0 + k / nw) * jn +
				(size_t)(w < plan->kw - 1 ? o * (plan->kw - 1) + w
							  : g->conv.oc * (plan->kw - 1) + o)] = acc[k];
		}
	}
}

/*
 * A tiled kernel's blocks (conv_pool_forward_tiled_kernel,
 * conv_pool_din_tiled_kernel): for each sample, every element of its
 * planes staged, as the block's threads do before their barrier, then
 * every work item from there.  The shared memory is an allocation of the
 * plan's size exactly, so that AddressSanitizer sees a read outside it.
 */
static void emu_forward_tiled(const struct pp_cuda_pool_geom *g, const struct pp_fused_tile_plan *p,
			      const float *x, const float *w, const float *b, float *out,
			      int32_t *idx, int n)
{
	float *sh = malloc(pp_fused_tile_bytes(p));

	ck_assert_ptr_nonnull(sh);
	memcpy(sh + p->plane_floats, w, (size_t)p->w_floats * sizeof(float));
	for (int s = 0; s < n; s++) {
		for (int e = 0; e < p->plane_floats; e++)
			sh[e] = pp_fused_padded_input(&g->conv, x, (size_t)s, e);
		for (int i = 0; i < p->items; i++)
			pp_fused_forward_tile(g, g->conv.k, p, sh, sh + p->plane_floats, b,
					      out + (size_t)s * p->items, idx + (size_t)s * p->items, i);
	}
	free(sh);
}

static void emu_din_tiled(const struct pp_cuda_pool_geom *g, const struct pp_fused_tile_plan *p,
			  const float *dpool, const int32_t *idx, const float *pooled, const float *w,
			  float *din, int n)
{
	const size_t chw = (size_t)g->conv.c * g->conv.h * g->conv.w;
	float *sh = malloc(pp_fused_tile_bytes(p));

	ck_assert_ptr_nonnull(sh);
	memcpy(sh + p->plane_floats, w, (size_t)p->w_floats * sizeof(float));
	for (int s = 0; s < n; s++) {
		for (int e = 0; e < p->plane_floats; e++) /* the block's two steps */
			sh[e] = 0.0f;
		for (int q = 0; q < g->conv.oc * g->ph * g->pw; q++)
			pp_fused_din_scatter(g, p, dpool, idx, pooled, (size_t)s, sh, q);
		for (int i = 0; i < p->items; i++)
			pp_fused_din_tile(g, g->conv.k, p, sh, sh + p->plane_floats, din + (size_t)s * chw, i);
	}
	free(sh);
}

/* pp_cuda_sum_channels(): out (J) += the sums of d (S, J, P) */
static void emu_sum_channels(float *out, const float *d, int s, int jn, int p)
{
	const int parts = pp_red_parts(jn, (size_t)s * p);
	float *partial;

	if (pp_red_one_pass(s, jn, p)) { /* the second pass alone, d its parts */
		emu_finish(out, out, jn, d, jn, s);
		return;
	}
	partial = pp_test_zero_floats(pp_red_floats(jn, (size_t)s * p));
	for (size_t i = 0; i < (size_t)jn * parts; i++)
		partial[i] = pp_red_sum_partial(d, s, jn, p, parts, (int)(i % jn), (int)(i / jn));
	emu_finish(out, out, jn, partial, jn, parts);
	free(partial);
}

/* ------------------------------------------------------------------ conv + ReLU + max-pool */

/* A convolution and its pool; the layers as nn/spec.c makes them. */
struct fused_case {
	int n, c, h, w, oc, k, stride, pad, pk, ps;
	bool relu;
};

static const struct fused_case fused_cases[] = {
	{ 3, 1, 28, 28, 6, 5, 1, 0, 2, 2, true },   /* the CNN's first convolution */
	{ 2, 6, 12, 12, 12, 5, 1, 0, 2, 2, true },  /* its second */
	{ 1, 3, 9, 7, 5, 3, 1, 1, 2, 2, true },     /* batch 1; 9 x 7: the last row out of the pool */
	{ 2, 2, 11, 10, 3, 3, 2, 2, 3, 3, false },  /* stride 2, padding 2; 9 taps: groups 4, 4, 1 */
	{ 2, 1, 13, 13, 3, 4, 1, 0, 2, 3, true },   /* pool stride 3 > window: gaps */
	{ 3, 4, 5, 5, 2, 1, 1, 0, 2, 2, false },    /* 1 x 1 kernel, odd output */
	{ 2, 2, 10, 9, 3, 2, 3, 1, 2, 2, true },    /* stride 3 > kernel 2: pixels no tap reads */
	{ 2, 2, 5, 6, 3, 2, 1, 3, 2, 2, true },     /* padding 3 > kernel 2: outputs no pixel reaches */
};

struct fused {
	struct nn_layer l, pool;
	struct pp_cuda_pool_geom g;
	int n;
	float *x, *w, *b;
	float *conv;      /* the CPU's convolution output (n, OC, OH, OW) */
	float *pooled;    /* the CPU's pool output (n, OC, PH, PW) */
	int32_t *idx;     /* the CPU's pool indices */
	float *col;       /* im2col columns of the n samples */
};

static struct fused fused_make(const struct fused_case *fc)
{
	struct fused f = { .n = fc->n };
	struct nn_layer *l = &f.l, *p = &f.pool;

	l->kind = NN_CONV;
	l->in_c = fc->c;
	l->in_h = fc->h;
	l->in_w = fc->w;
	l->out_c = fc->oc;
	l->k = fc->k;
	l->stride = fc->stride;
	l->pad = fc->pad;
	l->out_h = (fc->h + 2 * fc->pad - fc->k) / fc->stride + 1;
	l->out_w = (fc->w + 2 * fc->pad - fc->k) / fc->stride + 1;
	l->in_size = (size_t)fc->c * fc->h * fc->w;
	l->out_size = (size_t)fc->oc * l->out_h * l->out_w;
	l->n_w = (size_t)fc->oc * fc->c * fc->k * fc->k;
	l->n_b = (size_t)fc->oc;
	l->sparse_dout = true;
	p->kind = NN_MAXPOOL;
	p->in_c = p->out_c = fc->oc;
	p->in_h = l->out_h;
	p->in_w = l->out_w;
	p->k = fc->pk;
	p->stride = fc->ps;
	p->out_h = (l->out_h - fc->pk) / fc->ps + 1;
	p->out_w = (l->out_w - fc->pk) / fc->ps + 1;
	p->in_size = l->out_size;
	p->out_size = (size_t)fc->oc * p->out_h * p->out_w;
	f.g = (struct pp_cuda_pool_geom){
		.conv = { .c = fc->c, .h = fc->h, .w = fc->w, .oc = fc->oc, .oh = l->out_h,
			  .ow = l->out_w, .k = fc->k, .stride = fc->stride, .pad = fc->pad },
		.pk = fc->pk, .ps = fc->ps, .ph = p->out_h, .pw = p->out_w, .relu = fc->relu,
	};
	f.x = pp_test_rand_floats((size_t)fc->n * l->in_size);
	f.w = pp_test_rand_floats(l->n_w);
	f.b = pp_test_rand_floats(l->n_b);
	f.conv = pp_test_zero_floats((size_t)fc->n * l->out_size);
	f.pooled = pp_test_zero_floats((size_t)fc->n * p->out_size);
	f.idx = calloc((size_t)fc->n * p->out_size + 1, sizeof(int32_t));
	ck_assert_ptr_nonnull(f.idx);
	f.col = pp_test_zero_floats((size_t)fc->n * l->out_h * l->out_w * fc->c * fc->k * fc->k);
	pp_nn_conv2d_forward(l, f.conv, f.x, f.w, f.b, f.col, fc->n);
	if (fc->relu)
		pp_nn_maxpool_relu_forward(p, f.pooled, f.idx, f.conv, fc->n);
	else
		pp_nn_maxpool_forward(p, f.pooled, f.idx, f.conv, fc->n);
	return f;
}

static void fused_free(struct fused *f)
{
	free(f->x);
	free(f->w);
	free(f->b);
	free(f->conv);
	free(f->pooled);
	free(f->idx);
	free(f->col);
}

static void expect_close(const char *what, int c, const float *want, const float *got, size_t n,
			 float tol)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(fabsf(want[i] - got[i]) <= tol * (1.0f + fabsf(want[i])),
			      "case %d: %s[%zu]: %g, expected %g", c, what, i, (double)got[i],
			      (double)want[i]);
}

/*
 * The tiled forward, where the layer takes it: the same bits as the
 * thread per output (out, idx) gave; the CNN's two convolutions must take
 * it, a convolution of stride 2 or 3 must not.
 */
static void expect_tiled_forward(int c, const struct fused *f, const float *out, const int32_t *idx)
{
	const size_t outs = (size_t)f->n * f->pool.out_size;
	struct pp_fused_tile_plan plan;
	const int tiled = pp_fused_forward_plan(&f->g, &plan) == 0;
	float *out2;
	int32_t *idx2;

	ck_assert_msg(c >= 2 || tiled, "case %d: the CNN's convolution does not take the tiled forward", c);
	ck_assert_msg(f->g.conv.stride == 1 || !tiled, "case %d: stride %d taken by the tiled forward", c,
		      f->g.conv.stride);
	if (!tiled)
		return;
	ck_assert_int_eq(plan.items, (int)f->pool.out_size);
	out2 = malloc(outs * sizeof(float));
	idx2 = malloc(outs * sizeof(int32_t));
	ck_assert_ptr_nonnull(out2);
	ck_assert_ptr_nonnull(idx2);
	memset(out2, 0xff, outs * sizeof(float));
	memset(idx2, 0xff, outs * sizeof(int32_t));
	emu_forward_tiled(&f->g, &plan, f->x, f->w, f->b, out2, idx2, f->n);
	ck_assert_msg(memcmp(out2, out, outs * sizeof(float)) == 0,
		      "case %d: the tiled forward's outputs differ from the threads'", c);
	ck_assert_msg(memcmp(idx2, idx, outs * sizeof(int32_t)) == 0,
		      "case %d: the tiled forward's indices differ from the threads'", c);
	free(out2);
	free(idx2);
}

/*
 * Fails if a thread of the fused forward computes a pooled output other
 * than the CPU's convolution then pool (a tap, channel, bias or padding
 * wrong, a window position missed or taken from the next window, the ReLU
 * not applied), or picks as maximum a position outside its window or one
 * whose value is not the window's maximum (the CPU may pick another only
 * where two values tie to rounding), or, where all tie (an input of
 * zeros), not the first.
 */
START_TEST(test_fused_forward)
{
	for (int c = 0; c < (int)(sizeof(fused_cases) / sizeof(fused_cases[0])); c++) {
		struct fused f = fused_make(&fused_cases[c]);
		const struct pp_cuda_pool_geom *g = &f.g;
		const size_t outs = (size_t)f.n * f.pool.out_size, plane = (size_t)g->conv.oh * g->conv.ow;
		float *out = pp_test_zero_floats(outs);
		int32_t *idx = calloc(outs, sizeof(int32_t));

		ck_assert_ptr_nonnull(idx);
		for (size_t i = 0; i < outs; i++)
			pp_fused_forward(g, f.x, f.w, f.b, out, idx, i);
		expect_close("pooled output", c, f.pooled, out, outs, 1e-5f);
		for (size_t i = 0; i < outs; i++) {
			const size_t s = i / f.pool.out_size, q = i % f.pool.out_size;
			const size_t o = q / ((size_t)g->ph * g->pw);
			const int py = (int)(q / g->pw % g->ph), px = (int)(q % g->pw);
			const size_t r = (size_t)idx[i] - o * plane;
			const int oy = (int)(r / g->conv.ow), ox = (int)(r % g->conv.ow);
			const float *cs = f.conv + s * f.l.out_size;

			ck_assert_msg((size_t)idx[i] >= o * plane && r < plane && oy >= py * g->ps &&
					      oy < py * g->ps + g->pk && ox >= px * g->ps &&
					      ox < px * g->ps + g->pk,
				      "case %d: output %zu picked %d, outside its window", c, i, idx[i]);
			ck_assert_msg(fabsf(cs[idx[i]] - cs[f.idx[i]]) <= 1e-5f * (1.0f + fabsf(cs[f.idx[i]])),
				      "case %d: output %zu picked %d (%g), the CPU %d (%g)", c, i, idx[i],
				      (double)cs[idx[i]], f.idx[i], (double)cs[f.idx[i]]);
		}
		expect_tiled_forward(c, &f, out, idx);
		/* an input of zeros: every output of a channel ties at its bias; the first is taken */
		memset(f.x, 0, (size_t)f.n * f.l.in_size * sizeof(float));
		pp_nn_conv2d_forward(&f.l, f.conv, f.x, f.w, f.b, f.col, f.n);
		if (g->relu)
			pp_nn_maxpool_relu_forward(&f.pool, f.pooled, f.idx, f.conv, f.n);
		else
			pp_nn_maxpool_forward(&f.pool, f.pooled, f.idx, f.conv, f.n);
		for (size_t i = 0; i < outs; i++)
			pp_fused_forward(g, f.x, f.w, f.b, out, idx, i);
		ck_assert_mem_eq(idx, f.idx, outs * sizeof(int32_t));
		ck_assert_mem_eq(out, f.pooled, outs * sizeof(float));
		expect_tiled_forward(c, &f, out, idx);
		free(out);
		free(idx);
		fused_free(&f);
	}
}
END_TEST

/*
 * The input gradient of a convolution of stride 1 and its pool, as the
 * tiled kernel adds its terms: for each pixel, output channels in order,
 * then the convolution's outputs by row and column, those the pool
 * selected and the ReLU passed (written plainly: no planes, no runs).
 */
static void din_in_order(const struct pp_cuda_pool_geom *g, const float *dpool, const int32_t *idx,
			 const float *pooled, const float *w, float *din, int n)
{
	const struct pp_cuda_geom *cg = &g->conv;

	for (int s = 0; s < n; s++)
		for (int ch = 0; ch < cg->c; ch++)
			for (int iy = 0; iy < cg->h; iy++)
				for (int ix = 0; ix < cg->w; ix++) {
					float sum = 0.0f;

					for (int o = 0; o < cg->oc; o++)
						for (int oy = 0; oy < cg->oh; oy++)
							for (int ox = 0; ox < cg->ow; ox++) {
								const int ky = iy + cg->pad - oy, kx = ix + cg->pad - ox;
								const int py = oy / g->ps, px = ox / g->ps;
								size_t at;

								if (ky < 0 || ky >= cg->k || kx < 0 || kx >= cg->k ||
								    py >= g->ph || px >= g->pw ||
								    oy - py * g->ps >= g->pk || ox - px * g->ps >= g->pk)
									continue;
								at = (((size_t)s * cg->oc + o) * g->ph + py) * g->pw + px;
								if (idx[at] != (o * cg->oh + oy) * cg->ow + ox ||
								    (g->relu && !(pooled[at] > 0.0f)))
									continue;
								sum += dpool[at] * w[((o * cg->c + ch) * cg->k + ky) * cg->k + kx];
							}
					din[(((size_t)s * cg->c + ch) * cg->h + iy) * cg->w + ix] = sum;
				}
}

/*
 * The weight and bias gradients by blocks of samples (conv_pool_wgrad_kernel),
 * emulated: each block's chunk, its groups staged one after the other
 * (shared memory filled with garbage first, so that a term read before it
 * is staged shows), then each task's terms of the group; the partial sums
 * written where pp_fused_wg_slot() says.
 */
static void emu_wgrad(const struct pp_cuda_pool_geom *g, const struct pp_fused_wg_plan *p,
		      const float *dpool, const int32_t *idx, const float *pooled, const float *x,
		      int n, float *partial)
{
	const int pp = g->ph * g->pw;
	float *sh = malloc(pp_fused_wg_bytes(p)), *acc = malloc((size_t)p->tasks * sizeof(float));
	struct pp_fused_wsel *sel = (struct pp_fused_wsel *)(void *)(sh + p->plane_floats);

	ck_assert_ptr_nonnull(sh);
	ck_assert_ptr_nonnull(acc);
	ck_assert_uint_eq(p->blocks, (unsigned)g->conv.oc * (unsigned)p->chunks);
	for (unsigned b = 0; b < p->blocks; b++) {
		const int o = (int)(b % (unsigned)g->conv.oc), chunk = (int)(b / (unsigned)g->conv.oc);

		memset(acc, 0, (size_t)p->tasks * sizeof(float));
		for (int gi = 0; gi < p->chunk_groups; gi++) {
			const int s0 = (chunk * p->chunk_groups + gi) * p->samples;
			const int count = PP_MIN(n - s0, p->samples) * pp;

			if (s0 >= n)
				break;
			memset(sh, 0xff, pp_fused_wg_bytes(p));
			for (int e = 0; e < p->plane_floats; e++)
				sh[e] = pp_fused_wg_stage_x(g, p, x, n, s0, e);
			for (int e = 0; e < count; e++)
				sel[e] = pp_fused_wg_stage_sel(g, p, dpool, idx, pooled, n, s0, o, e);
			for (int k = 0; k < p->tasks; k++)
				acc[k] = pp_fused_wg_add(p, sh, sel, count, k / p->kw,
							 pp_fused_wg_tap(g, p, k % p->kw), acc[k]);
		}
		for (int k = 0; k < p->tasks; k++)
			partial[pp_fused_wg_slot(g, p, chunk, o, k)] = acc[k];
	}
	free(sh);
	free(acc);
}

/*
 * The same partial sums written plainly: part (chunk, lane) of output j
 * (pp_fused_param_term()'s numbering) adds the terms of its chunk's
 * groups in order, in each group those at lane, lane + lanes, ...
 */
static void wgrad_in_order(const struct pp_cuda_pool_geom *g, const struct pp_fused_wg_plan *p,
			   const float *dpool, const int32_t *idx, const float *pooled, const float *x,
			   int n, float *partial)
{
	const int pp = g->ph * g->pw, jn = pp_fused_param_count(g);

	for (int chunk = 0; chunk < p->chunks; chunk++)
		for (int lane = 0; lane < p->lanes; lane++)
			for (int j = 0; j < jn; j++) {
				float sum = 0.0f;

				for (int gi = 0; gi < p->chunk_groups; gi++) {
					const int s0 = (chunk * p->chunk_groups + gi) * p->samples;

					for (int u = lane; s0 < n && u < PP_MIN(n - s0, p->samples) * pp;
					     u += p->lanes)
						sum += pp_fused_param_term(g, dpool, idx, pooled, x, j,
									   (size_t)s0 * pp + (size_t)u);
				}
				partial[(size_t)(chunk * p->lanes + lane) * jn + j] = sum;
			}
}

/*
 * Fails if the weight and bias gradients by blocks of samples, where the
 * layer takes them (the CNN's convolutions must), give partial sums other
 * than their terms in the plan's order, bit for bit, or, after the second
 * pass, gradients other than the CPU's: with the plan's groups, with
 * groups of 1 and 2 samples (a group cut short), and chunks of 2 groups.
 */
static void expect_wgrad(int c, const struct fused *f, const float *dpool, const float *dw_cpu,
			 const float *db_cpu)
{
	const struct pp_cuda_pool_geom *g = &f->g;
	const int pp = g->ph * g->pw, jn = pp_fused_param_count(g);
	struct pp_fused_wg_plan plan;

	if (pp_fused_wg_plan_of(g, f->n, &plan) != 0) {
		ck_assert_msg(c >= 2, "case %d: the CNN's convolution does not take the weight "
			      "gradients by blocks of samples", c);
		return;
	}
	/* every batch up to a model's capacity: its chunks cover it, none is
	 * empty, the parts stay within the second pass's, and the scratch
	 * reserved at the capacity holds them */
	for (int n = 1; n <= 20000; n += n < 100 ? 1 : 97) {
		struct pp_fused_wg_plan q;
		const int per_chunk = plan.samples;

		ck_assert_int_eq(pp_fused_wg_plan_of(g, n, &q), 0);
		ck_assert_msg((long long)q.chunks * q.chunk_groups * per_chunk >= n &&
			      (long long)(q.chunks - 1) * q.chunk_groups * per_chunk < n,
			      "case %d, batch %d: %d chunks of %d groups of %d samples", c, n, q.chunks,
			      q.chunk_groups, per_chunk);
		ck_assert_int_le(q.parts, PP_RED_MAX_PARTS);
		ck_assert_uint_eq(q.blocks, (unsigned)g->conv.oc * (unsigned)q.chunks);
		ck_assert_msg(pp_fused_param_floats(g, 20000) >= (size_t)jn * q.parts &&
			      pp_fused_param_floats(g, n) >= (size_t)jn * q.parts,
			      "case %d, batch %d: scratch of %zu floats for %d parts of %d", c, n,
			      pp_fused_param_floats(g, n), q.parts, jn);
	}
	for (int v = 0; v < 4; v++) {
		struct pp_fused_wg_plan p = plan;
		float *got, *want, *dw, *db;

		if (v >= 1) { /* groups of v samples; for v = 3, of 2 samples, two groups a chunk */
			p.samples = v < 3 ? v : 2;
			p.lanes = PP_MIN(plan.lanes, p.samples * pp);
			p.tasks = p.kw * p.lanes;
			p.plane_floats = p.samples * g->conv.c * p.rows * p.cols;
			p.sel_count = p.samples * pp;
			pp_fused_wg_chunks(&p, f->n);
			if (v == 3) {
				p.chunk_groups = 2;
				p.chunks = (p.groups + 1) / 2;
				p.parts = p.chunks * p.lanes;
			}
			p.blocks = (unsigned)g->conv.oc * (unsigned)p.chunks;
		}
		got = pp_test_zero_floats((size_t)jn * p.parts);
		want = pp_test_zero_floats((size_t)jn * p.parts);
		dw = pp_test_zero_floats(f->l.n_w);
		db = pp_test_zero_floats(f->l.n_b);
		memset(got, 0xff, (size_t)jn * p.parts * sizeof(float));
		emu_wgrad(g, &p, dpool, f->idx, f->pooled, f->x, f->n, got);
		wgrad_in_order(g, &p, dpool, f->idx, f->pooled, f->x, f->n, want);
		ck_assert_msg(memcmp(got, want, (size_t)jn * p.parts * sizeof(float)) == 0,
			      "case %d, variant %d (groups of %d, %d a chunk, %d lanes): the blocks' "
			      "partial sums differ from their terms in order", c, v, p.samples,
			      p.chunk_groups, p.lanes);
		emu_finish(dw, db, jn - g->conv.oc, got, jn, p.parts);
		expect_close("weight gradient (by samples)", c, dw_cpu, dw, f->l.n_w, 1e-4f);
		expect_close("bias gradient (by samples)", c, db_cpu, db, f->l.n_b, 1e-4f);
		free(got);
		free(want);
		free(dw);
		free(db);
	}
}

/*
 * Fails if the fused backward's threads (the input gradient, a thread per
 * pixel) and its reduction (first pass per (weight or bias, part), second
 * pass per block) differ from pp_nn_conv2d_backward_pooled() on the same
 * pool output, indices and gradient: a gradient sent to a position the
 * pool did not select or the ReLU blocked, a window that covers a pixel
 * missed (padding, stride, the first and last pool rows), a term counted
 * twice or not at all, a bias mixed with a weight.
 */
START_TEST(test_fused_backward)
{
	for (int c = 0; c < (int)(sizeof(fused_cases) / sizeof(fused_cases[0])); c++) {
		struct fused f = fused_make(&fused_cases[c]);
		const struct pp_cuda_pool_geom *g = &f.g;
		const size_t outs = (size_t)f.n * f.pool.out_size, ins = (size_t)f.n * f.l.in_size;
		const int jn = pp_fused_param_count(g);
		const int parts = pp_fused_param_parts(jn, (size_t)f.n * g->ph * g->pw);
		float *dpool = pp_test_rand_floats(outs);
		float *dcol = pp_test_zero_floats(pp_nn_conv2d_backward_pooled_scratch(&f.l, &f.pool));
		float *din1 = pp_test_zero_floats(ins), *din2 = pp_test_zero_floats(ins);
		float *dw1 = pp_test_zero_floats(f.l.n_w), *dw2 = pp_test_zero_floats(f.l.n_w);
		float *db1 = pp_test_zero_floats(f.l.n_b), *db2 = pp_test_zero_floats(f.l.n_b);
		float *partial = pp_test_zero_floats(pp_fused_param_floats(g, f.n));
		float *tiled = pp_test_zero_floats(pp_fused_param_floats(g, f.n));
		struct pp_fused_tile_plan tplan;
		bool tiled_din;

		for (size_t i = 0; i < outs; i += 5)
			dpool[i] = 0.0f;
		pp_nn_conv2d_backward_pooled(&f.l, &f.pool, din1, dw1, db1, dpool, f.idx,
					     g->relu ? f.conv : NULL, f.w, f.col, dcol, f.n);
		for (size_t i = 0; i < ins; i++)
			din2[i] = pp_fused_din(g, dpool, f.idx, f.pooled, f.w, i);
		for (size_t i = 0; i < (size_t)jn * parts; i++)
			partial[i] = pp_fused_param_partial(g, dpool, f.idx, f.pooled, f.x, f.n, parts,
							    (int)(i % jn), (int)(i / jn));
		/* the kernel's blocks and tiles: the same sums, so the same bits, whatever the tile */
		for (int ts = 0; ts < 3; ts++) {
			struct pp_fused_param_plan plan = pp_fused_param_plan_of(g, parts);

			if (ts > 0) /* tiles of 1 and 3 terms a part: boundaries inside the parts */
				plan.tile_steps = 2 * ts - 1;
			memset(tiled, 0xff, pp_fused_param_floats(g, f.n) * sizeof(float));
			emu_param_blocks(tiled, g, dpool, f.idx, f.pooled, f.x, f.n, parts, &plan);
			ck_assert_msg(memcmp(tiled, partial, (size_t)jn * parts * sizeof(float)) == 0,
				      "case %d: the blocks' partial sums (tiles of %d terms a part) "
				      "differ from the threads'", c, plan.tile_steps);
		}
		emu_finish(dw2, db2, jn - g->conv.oc, partial, jn, parts);
		expect_close("input gradient", c, din1, din2, ins, 1e-4f);
		/* the tiled input gradient, where the layer takes it: the bits of its order, close to the CPU's */
		tiled_din = pp_fused_din_plan(g, &tplan) == 0;
		ck_assert_msg(c >= 2 || tiled_din, "case %d: the CNN's convolution does not take the tiled "
			      "input gradient", c);
		ck_assert_msg(g->conv.stride == 1 || !tiled_din, "case %d: stride %d taken by the tiled "
			      "input gradient", c, g->conv.stride);
		if (tiled_din) {
			memset(din1, 0xff, ins * sizeof(float));
			emu_din_tiled(g, &tplan, dpool, f.idx, f.pooled, f.w, din1, f.n);
			expect_close("tiled input gradient", c, din2, din1, ins, 1e-5f);
			din_in_order(g, dpool, f.idx, f.pooled, f.w, din2, f.n);
			ck_assert_msg(memcmp(din1, din2, ins * sizeof(float)) == 0,
				      "case %d: the tiled input gradient differs from its terms in order", c);
		}
		expect_close("weight gradient", c, dw1, dw2, f.l.n_w, 1e-4f);
		expect_close("bias gradient", c, db1, db2, f.l.n_b, 1e-4f);
		expect_wgrad(c, &f, dpool, dw1, db1);
		free(dpool);
		free(dcol);
		free(din1);
		free(din2);
		free(dw1);
		free(dw2);
		free(db1);
		free(db2);
		free(partial);
		free(tiled);
		fused_free(&f);
	}
}
END_TEST

/*
 * Fails if the max-pool backward's threads (a gather per input pixel)
 * give other bits than pp_nn_maxpool_backward() (the same additions in
 * the same order): a window that covers a pixel missed (overlapping
 * windows of stride 1 and 2, the edges, a last row outside every
 * window), a gradient sent to a pixel the window did not select.
 */
START_TEST(test_pool_backward)
{
	static const int shapes[][6] = {
		/* n, c, h, w, k, stride */
		{ 2, 3, 9, 9, 3, 2 }, { 1, 2, 7, 6, 3, 1 }, { 3, 6, 24, 24, 2, 2 }, { 2, 1, 11, 8, 4, 3 },
	};

	for (int c = 0; c < (int)(sizeof(shapes) / sizeof(shapes[0])); c++) {
		const int *sh = shapes[c];
		struct nn_layer l = { .kind = NN_MAXPOOL, .in_c = sh[1], .out_c = sh[1], .in_h = sh[2],
				      .in_w = sh[3], .k = sh[4], .stride = sh[5] };
		struct pp_cuda_geom g;
		size_t ins, outs;
		float *x, *y, *dy, *din1, *din2;
		int32_t *idx;

		l.out_h = (l.in_h - l.k) / l.stride + 1;
		l.out_w = (l.in_w - l.k) / l.stride + 1;
		l.in_size = (size_t)l.in_c * l.in_h * l.in_w;
		l.out_size = (size_t)l.out_c * l.out_h * l.out_w;
		g = (struct pp_cuda_geom){ .c = l.in_c, .h = l.in_h, .w = l.in_w, .oc = l.out_c,
					   .oh = l.out_h, .ow = l.out_w, .k = l.k, .stride = l.stride };
		ins = (size_t)sh[0] * l.in_size;
		outs = (size_t)sh[0] * l.out_size;
		x = pp_test_rand_floats(ins);
		y = pp_test_zero_floats(outs);
		dy = pp_test_rand_floats(outs);
		din1 = pp_test_zero_floats(ins);
		din2 = pp_test_zero_floats(ins);
		idx = calloc(outs + 1, sizeof(int32_t));
		ck_assert_ptr_nonnull(idx);
		/* ties, so that overlapping windows select the same pixel */
		for (size_t i = 0; i < ins; i += 4)
			x[i] = 0.5f;
		pp_nn_maxpool_forward(&l, y, idx, x, sh[0]);
		pp_nn_maxpool_backward(&l, din1, dy, idx, sh[0]);
		for (size_t i = 0; i < ins; i++)
			din2[i] = pp_pool_din(&g, dy, idx, i);
		ck_assert_mem_eq(din1, din2, ins * sizeof(float));
		free(x);
		free(y);
		free(dy);
		free(din1);
		free(din2);
		free(idx);
	}
}
END_TEST

/* ------------------------------------------------------------------ sums and their parts */

/*
 * Fails if the partition of a sum loses or repeats a term (all ones: the
 * sums are exact integers) or adds the wrong elements (random values
 * against a sum in double), for sums of 1 term, fewer terms than a
 * block's lanes, more parts than lanes (the strided lanes), many outputs
 * (few parts each) and a Linear's and the CNN's bias gradients: a
 * Linear's by the second pass alone up to PP_RED_MAX_PARTS samples (and
 * PP_RED_ONE_PASS_TERMS terms in all), and by both passes beyond.
 */
START_TEST(test_sums)
{
	static const int shapes[][3] = {
		/* S, J, P */
		{ 1, 1, 1 }, { 3, 7, 1 }, { 100, 120, 1 }, { 1000, 10, 1 }, { 5, 6, 577 },
		{ 2, 12, 64 }, { 1, 3, 100000 }, { 4, 2000, 3 }, { 100, 6, 576 },
		{ PP_RED_MAX_PARTS, 3, 1 }, { PP_RED_MAX_PARTS + 1, 3, 1 }, { 60000, 10, 1 },
		{ 1000, 600, 1 },
	};

	ck_assert(pp_red_one_pass(1, 1, 1) && pp_red_one_pass(100, 120, 1) &&
		  pp_red_one_pass(PP_RED_MAX_PARTS, 3, 1) && pp_red_one_pass(1000, 120, 1));
	ck_assert(!pp_red_one_pass(PP_RED_MAX_PARTS + 1, 1, 1) && !pp_red_one_pass(100, 120, 2) &&
		  !pp_red_one_pass(0, 10, 1) && !pp_red_one_pass(4096, 4096, 1));
	for (int c = 0; c < (int)(sizeof(shapes) / sizeof(shapes[0])); c++) {
		const int s = shapes[c][0], jn = shapes[c][1], p = shapes[c][2];
		const size_t n = (size_t)s * jn * p;
		float *d = pp_test_rand_floats(n), *ones = pp_test_zero_floats(n);
		float *out = pp_test_zero_floats((size_t)jn), *count = pp_test_zero_floats((size_t)jn);
		double *want = calloc((size_t)jn, sizeof(double)), *mag = calloc((size_t)jn, sizeof(double));

		ck_assert(want && mag);
		for (size_t i = 0; i < n; i++) {
			const size_t j = i / (size_t)p % (size_t)jn;

			ones[i] = 1.0f;
			want[j] += d[i];
			mag[j] += fabs((double)d[i]);
		}
		emu_sum_channels(count, ones, s, jn, p);
		emu_sum_channels(out, d, s, jn, p);
		for (int j = 0; j < jn; j++) {
			ck_assert_msg(count[j] == (float)s * (float)p, "case %d: output %d summed %g terms of %d",
				      c, j, (double)count[j], s * p);
			ck_assert_msg(fabs(out[j] - want[j]) <= 1e-6 * (1.0 + mag[j]),
				      "case %d: output %d: %g, expected %g", c, j, (double)out[j], want[j]);
		}
		free(d);
		free(ones);
		free(out);
		free(count);
		free(want);
		free(mag);
	}
}
END_TEST

/*
 * Fails if the rule of the parts gives no part, more than the second pass
 * takes, more partial sums than the scratch the model reserves for its
 * largest batch (the rule must not decrease with the terms), or a number
 * that depends on anything but the outputs and terms.
 */
START_TEST(test_red_parts)
{
	static const int outputs[] = { 1, 6, 10, 120, 156, 1812, 200000 };

	for (size_t o = 0; o < sizeof(outputs) / sizeof(outputs[0]); o++) {
		int prev = 0;

		for (size_t t = 1; t < 50000000; t = t * 3 + 1) {
			const int parts = pp_red_parts(outputs[o], t);

			ck_assert_int_ge(parts, 1);
			ck_assert_int_le(parts, PP_RED_MAX_PARTS);
			ck_assert_int_ge(parts, prev);
			ck_assert_uint_le((size_t)parts, t);
			ck_assert_uint_le(pp_red_floats(outputs[o], t),
					  PP_MAX((size_t)outputs[o], (size_t)PP_RED_TARGET_THREADS));
			ck_assert_int_eq(parts, pp_red_parts(outputs[o], t));
			prev = parts;
		}
		/* the weight gradients' rule: more parts, the same bounds */
		prev = 0;
		for (size_t t = 1; t < 50000000; t = t * 3 + 1) {
			const int parts = pp_fused_param_parts(outputs[o], t);

			ck_assert_int_ge(parts, 1);
			ck_assert_int_le(parts, PP_RED_MAX_PARTS);
			ck_assert_int_ge(parts, prev);
			ck_assert_int_ge(parts, pp_red_parts(outputs[o], t) / 8);
			ck_assert_uint_le((size_t)parts, t);
			ck_assert_uint_le((size_t)outputs[o] * parts,
					  PP_MAX((size_t)outputs[o], (size_t)PP_PARAM_TARGET_TASKS));
			prev = parts;
		}
	}
}
END_TEST

/* ------------------------------------------------------------------ softmax cross-entropy */

/*
 * The softmax kernel of n samples emulated: each block's lanes and tree,
 * then the last block's.  Returns the loss; *correct, *bad as the kernel
 * adds and sets them.
 */
static double emu_xent(const float *logits, const int32_t *labels, int n, int c, float scale,
		       float *dlogits, unsigned long long *correct, int *bad)
{
	const int blocks = pp_xent_blocks(n);
	struct pp_xent_part *parts = calloc((size_t)blocks, sizeof(*parts));
	struct pp_xent_part lanes[PP_RED_THREADS];
	double loss;

	ck_assert_ptr_nonnull(parts);
	*bad = 0;
	for (int b = 0; b < blocks; b++) {
		for (int t = 0; t < PP_RED_THREADS; t++) {
			const size_t i = (size_t)b * PP_RED_THREADS + t;
			unsigned right = 0;
			int bad_one = 0;

			lanes[t].loss = i < (size_t)n ? pp_xent_sample(logits, labels, c, scale, dlogits,
								      i, &right, &bad_one) : 0.0;
			lanes[t].correct = right;
			*bad |= bad_one;
		}
		for (int half = PP_RED_THREADS / 2; half > 0; half /= 2)
			for (int t = 0; t < half; t++)
				pp_xent_tree_step(lanes, t, half);
		parts[b] = lanes[0];
	}
	for (int t = 0; t < PP_RED_THREADS; t++)
		lanes[t] = pp_xent_lane(parts, blocks, t);
	for (int half = PP_RED_THREADS / 2; half > 0; half /= 2)
		for (int t = 0; t < half; t++)
			pp_xent_tree_step(lanes, t, half);
	*correct = lanes[0].correct;
	loss = lanes[0].loss;
	free(parts);
	return loss;
}

/*
 * Fails if the softmax kernel's threads and blocks give another loss sum,
 * correct count or gradient than pp_nn_softmax_xent(), for batch 1, a
 * block and one more sample (a second, nearly empty block), and more
 * blocks than lanes (the last block's strided lanes); or if a label
 * outside the classes is not flagged, its loss not left out, its gradient
 * row not zero.
 */
START_TEST(test_xent)
{
	static const int shapes[][2] = { { 1, 10 }, { 7, 3 }, { 256, 10 }, { 257, 10 }, { 1000, 10 },
					 { 70000, 4 }, { 5, 1 } };

	for (int k = 0; k < (int)(sizeof(shapes) / sizeof(shapes[0])); k++) {
		const int n = shapes[k][0], c = shapes[k][1];
		float *z = pp_test_rand_floats((size_t)n * c);
		float *d1 = pp_test_zero_floats((size_t)n * c), *d2 = pp_test_zero_floats((size_t)n * c);
		double *losses = calloc((size_t)n, sizeof(double)), want = 0.0;
		int32_t *labels = malloc((size_t)n * sizeof(int32_t));
		const float scale = 1.0f / (float)n;
		uint64_t right1 = 0;
		unsigned long long right2;
		double got;
		int bad;

		ck_assert(losses && labels);
		for (int i = 0; i < n; i++) {
			labels[i] = (i * 7 + 3) % c;
			for (int j = 0; j < c; j++)
				z[(size_t)i * c + j] *= 6.0f;
		}
		ck_assert_int_eq(pp_nn_softmax_xent(z, labels, n, c, scale, d1, losses, &right1), 0);
		for (int i = 0; i < n; i++)
			want += losses[i];
		got = emu_xent(z, labels, n, c, scale, d2, &right2, &bad);
		ck_assert_int_eq(bad, 0);
		ck_assert_msg(fabs(got - want) <= 1e-12 * (1.0 + fabs(want)), "case %d: loss %.17g, expected %.17g",
			      k, got, want);
		ck_assert_uint_eq(right2, right1);
		expect_close("gradient", k, d1, d2, (size_t)n * c, 1e-6f);

		/* the last sample's label out of range */
		labels[n - 1] = c;
		got = emu_xent(z, labels, n, c, scale, d2, &right2, &bad);
		ck_assert_int_eq(bad, 1);
		ck_assert_msg(fabs(got - (want - losses[n - 1])) <= 1e-12 * (1.0 + fabs(want)),
			      "case %d: loss with a bad label %.17g, expected %.17g", k, got,
			      want - losses[n - 1]);
		for (int j = 0; j < c; j++)
			ck_assert(d2[(size_t)(n - 1) * c + j] == 0.0f);
		ck_assert_int_eq(pp_nn_softmax_xent(z, labels, n, c, scale, d1, losses, &right1), -ERANGE);
		free(z);
		free(d1);
		free(d2);
		free(losses);
		free(labels);
	}
}
END_TEST

/*
 * Fails if the CPU's portable optimizers (4 lanes, then one at a time)
 * and the per-element definitions the CUDA kernels run (nn/nn_math.h:
 * pp_sgd_update(), pp_adam_update() with pp_adam_factors_of()) give
 * other bits after three steps of 37 parameters (nine vectors of 4 and a
 * tail of 1): an operation out of order in the vector body, a bias
 * correction of another step or in float.  Also fails if SGD's first step
 * does not take the gradient (with weight decay) as its momentum, or
 * Nesterov's step is not g + momentum b.
 */
START_TEST(test_optim_math)
{
	enum { N = 37, STEPS = 3 };
	struct pp_optimizer_config cfgs[4];

	for (int k = 0; k < 4; k++) {
		struct pp_model_config mc;

		pp_model_config_init(&mc);
		cfgs[k] = mc.optim;
		cfgs[k].kind = k < 2 ? PP_OPTIM_SGD : PP_OPTIM_ADAM;
		cfgs[k].lr = 0.05f;
	}
	cfgs[0].momentum = 0.9f;
	cfgs[0].dampening = 0.3f;
	cfgs[0].weight_decay = 0.01f;
	cfgs[1].momentum = 0.8f;
	cfgs[1].nesterov = true;
	cfgs[3].weight_decay = 0.02f;
	for (int k = 0; k < 4; k++) {
		const struct pp_optimizer_config *c = &cfgs[k];
		float p[2][N], b1[2][N], b2[2][N];
		struct nn_optim o = { .cfg = *c, .buf1 = b1[0], .buf2 = b2[0] };

		pp_test_rng = 11;
		for (int i = 0; i < N; i++) {
			p[0][i] = p[1][i] = pp_test_frand();
			b1[0][i] = b1[1][i] = b2[0][i] = b2[1][i] = 0.0f;
		}
		for (unsigned long long t = 1; t <= STEPS; t++) {
			const struct pp_adam_factors f = pp_adam_factors_of(c->lr, c->beta1, c->beta2, t);
			float g[N];

			for (int i = 0; i < N; i++)
				g[i] = pp_test_frand() * (float)t;
			pp_nn_optim_step_isa(&o, p[0], g, N, PP_ISA_BASE);
			for (int i = 0; i < N; i++)
				if (c->kind == PP_OPTIM_SGD)
					pp_sgd_update(&p[1][i], &b1[1][i], g[i], c->lr, c->weight_decay,
						      c->momentum, 1.0f - c->dampening, c->nesterov, t == 1);
				else
					pp_adam_update(&p[1][i], &b1[1][i], &b2[1][i], g[i], c->beta1,
						       c->beta2, c->eps, c->weight_decay, f);
		}
		ck_assert_msg(memcmp(p[0], p[1], sizeof(p[0])) == 0 && memcmp(b1[0], b1[1], sizeof(b1[0])) == 0 &&
			      memcmp(b2[0], b2[1], sizeof(b2[0])) == 0,
			      "optimizer %d: the CPU's portable update differs from nn/nn_math.h's", k);
	}
	/* one parameter by hand: p 1, gradient 0.5, weight decay 0.1, momentum 0.9, Nesterov */
	{
		float p = 1.0f, b = 7.0f;
		const float g = 0.5f + 0.1f * 1.0f;

		pp_sgd_update(&p, &b, 0.5f, 0.25f, 0.1f, 0.9f, 1.0f, true, true);
		ck_assert(b == g);
		ck_assert_msg(fabsf(p - (1.0f - 0.25f * (g + 0.9f * g))) <= 1e-7f, "sgd: p %.9g", (double)p);
	}
	/* Adam's factors of step 2: lr / (1 - b1^2), sqrt(1 - b2^2), made in double */
	{
		const struct pp_adam_factors f = pp_adam_factors_of(0.001f, 0.9f, 0.999f, 2);

		ck_assert(f.step == (float)((double)0.001f / (1.0 - (double)0.9f * (double)0.9f)));
		ck_assert(f.bc2_sqrt == (float)sqrt(1.0 - (double)0.999f * (double)0.999f));
	}
}
END_TEST

/*
 * The small GEMM kernels (nn/cuda/small_gemm.h), every thread emulated
 * (pp_test_small_gemm()), against the product in double, on
 * pp_test_gemm_cases (the MLP's GEMMs at batch 100, odd shapes), C of NaN
 * where beta is 0 (not read).  Fails
 * on an index of A, B or C swapped, a term left out or taken twice, beta
 * not applied or C read where it is 0.  And the rule of which products
 * take them: the MLP's and the CNN's Linear layers at batch 100, not the
 * CNN's at batch 1000 nor the MLP's first, not sums of k past a thread's
 * share, not op(A) transposed with k under a warp, not both transposed.
 */
START_TEST(test_small_gemm)
{
	for (size_t c = 0; c < pp_test_gemm_ncases; c++) {
		const struct pp_test_gemm_case *t = &pp_test_gemm_cases[c];
		size_t na, nb, nc;
		struct pp_cuda_gemm g = pp_test_gemm_of(t, NULL, NULL, NULL, &na, &nb, &nc);
		const int m = g.m, n = g.n, k = g.k, ldc = g.ldc;
		float *a = pp_test_rand_floats(na), *b = pp_test_rand_floats(nb);
		float *c0 = pp_test_rand_floats(nc), *got = pp_test_zero_floats(nc);

		g.a = a;
		g.b = b;
		g.c = got;
		ck_assert_msg(pp_small_gemm_fits(&g), "case %zu: not taken by the small kernels", c);
		for (size_t e = 0; e < nc; e++)
			got[e] = t->beta != 0.0f ? c0[e] : NAN;
		pp_test_small_gemm(&g);
		for (int j = 0; j < n; j++)
			for (int i = 0; i < ldc; i++) {
				double want = 0.0, mag = 0.0;
				const float v = got[(size_t)i + (size_t)j * ldc];

				if (i >= m) { /* past the matrix: untouched */
					ck_assert_msg(t->beta != 0.0f ? v == c0[(size_t)i + (size_t)j * ldc]
								   : isnan(v),
						      "case %zu: C's padding (%d, %d) written", c, i, j);
					continue;
				}
				for (int p = 0; p < k; p++) {
					const double term = (double)pp_sgemm_a(&g, i, p) * pp_sgemm_b(&g, p, j);

					want += term;
					mag += fabs(term);
				}
				want += (double)t->beta * (t->beta != 0.0f ? c0[(size_t)i + (size_t)j * ldc] : 0.0);
				ck_assert_msg(fabs(v - want) <= 1e-5 * (1.0 + mag),
					      "case %zu: C(%d, %d) = %.9g, expected %.9g", c, i, j, (double)v, want);
			}
		free(a);
		free(b);
		free(c0);
		free(got);
	}
	{
		const struct pp_cuda_gemm mlp1000 = { .ta = true, .m = 32, .n = 1000, .k = 784 };
		const struct pp_cuda_gemm short_k = { .ta = true, .m = 6, .n = 640, .k = 25 };
		const struct pp_cuda_gemm both = { .ta = true, .tb = true, .m = 8, .n = 8, .k = 64 };
		/* the CNN's second Linear layer at batch 1000, forward; the MLP's last, weight gradient */
		const struct pp_cuda_gemm cnn1000 = { .ta = true, .m = 60, .n = 1000, .k = 120 };
		const struct pp_cuda_gemm long_k = { .tb = true, .m = 32, .n = 10, .k = 1000 };
		const struct pp_cuda_gemm long_dot = { .ta = true, .m = 2, .n = 2, .k = 1025 };
		/* the CNN's first Linear layer at batch 100: input gradient, forward */
		const struct pp_cuda_gemm cnn100 = { .m = 192, .n = 100, .k = 120 };
		const struct pp_cuda_gemm cnn100_t = { .ta = true, .m = 120, .n = 100, .k = 192 };

		ck_assert(!pp_small_gemm_fits(&mlp1000));
		ck_assert(!pp_small_gemm_fits(&short_k));
		ck_assert(!pp_small_gemm_fits(&both));
		ck_assert(!pp_small_gemm_fits(&cnn1000));
		ck_assert(!pp_small_gemm_fits(&long_k));
		ck_assert(!pp_small_gemm_fits(&long_dot));
		ck_assert(pp_small_gemm_fits(&cnn100));
		ck_assert(pp_small_gemm_fits(&cnn100_t));
	}
}
END_TEST

/*
 * The ReLU the small GEMM kernels take as they store C (struct
 * pp_cuda_gemm's relu and mask), every thread emulated, on the cases whose
 * C is contiguous: with 'mask', C is the plain product's where the mask is
 * > 0 and 0 elsewhere (NaN included: the ReLU backward's rule); with
 * 'relu', C is the plain product's and 'relu' its max with 0; both
 * together, the masked C and its max with 0.  Fails on an index of the
 * mask or of the ReLU's output other than C's, the mask applied after
 * beta is left out of it, or a ReLU that passes negatives.
 */
START_TEST(test_small_gemm_relu)
{
	int tried = 0;

	for (size_t c = 0; c < pp_test_gemm_ncases; c++) {
		const struct pp_test_gemm_case *t = &pp_test_gemm_cases[c];
		size_t na, nb, nc;
		struct pp_cuda_gemm g = pp_test_gemm_of(t, NULL, NULL, NULL, &na, &nb, &nc);
		float *a, *b, *c0, *plain, *got, *relu, *mask;

		if (t->pad != 0)
			continue;
		tried++;
		a = pp_test_rand_floats(na);
		b = pp_test_rand_floats(nb);
		c0 = pp_test_rand_floats(nc);
		mask = pp_test_rand_floats(nc); /* about half of it not > 0 */
		mask[nc / 2] = NAN;
		plain = pp_test_zero_floats(nc);
		got = pp_test_zero_floats(nc);
		relu = pp_test_zero_floats(nc);
		g.a = a;
		g.b = b;
		memcpy(plain, c0, nc * sizeof(float));
		g.c = plain;
		pp_test_small_gemm(&g);
		for (int kind = 0; kind < 3; kind++) {
			struct pp_cuda_gemm e = g;

			memcpy(got, c0, nc * sizeof(float));
			for (size_t i = 0; i < nc; i++)
				relu[i] = -7.0f;
			e.c = got;
			e.mask = kind != 1 ? mask : NULL;
			e.relu = kind != 0 ? relu : NULL;
			pp_test_small_gemm(&e);
			for (size_t i = 0; i < nc; i++) {
				const float want = kind != 1 && !(mask[i] > 0.0f) ? 0.0f : plain[i];

				ck_assert_msg(memcmp(&got[i], &want, sizeof(float)) == 0,
					      "case %zu, kind %d: C[%zu] = %g, expected %g", c, kind, i,
					      (double)got[i], (double)want);
				ck_assert_msg(kind == 0 ? relu[i] == -7.0f
							: relu[i] == (want > 0.0f ? want : 0.0f),
					      "case %zu, kind %d: ReLU[%zu] = %g for C %g", c, kind, i,
					      (double)relu[i], (double)want);
			}
		}
		free(a);
		free(b);
		free(c0);
		free(mask);
		free(plain);
		free(got);
		free(relu);
	}
	ck_assert_int_ge(tried, 4);
}
END_TEST

/*
 * The bias's row of the untransposed small kernel (struct pp_cuda_gemm's
 * bias: the sums of op(B)'s columns), every thread emulated, on the cases
 * with op(A) untransposed: against the sums in double (plus beta times
 * what was there; NaN there where beta is 0, not read), C's bits those of
 * the product without it, nothing written past bias[n - 1].  Fails on a
 * term left out or taken twice, op(B)'s index swapped, beta not applied,
 * or the row written into C.
 */
START_TEST(test_small_gemm_bias)
{
	int tried = 0;

	for (size_t c = 0; c < pp_test_gemm_ncases; c++) {
		const struct pp_test_gemm_case *t = &pp_test_gemm_cases[c];
		size_t na, nb, nc;
		struct pp_cuda_gemm g = pp_test_gemm_of(t, NULL, NULL, NULL, &na, &nb, &nc);
		float *a, *b, *c0, *plain, *got, *bias, *b0;

		if (t->ta)
			continue;
		tried++;
		a = pp_test_rand_floats(na);
		b = pp_test_rand_floats(nb);
		c0 = pp_test_rand_floats(nc);
		b0 = pp_test_rand_floats((size_t)g.n + 1);
		plain = pp_test_zero_floats(nc);
		got = pp_test_zero_floats(nc);
		bias = pp_test_zero_floats((size_t)g.n + 1);
		for (int j = 0; j <= g.n; j++)
			bias[j] = t->beta != 0.0f || j == g.n ? b0[j] : NAN;
		g.a = a;
		g.b = b;
		memcpy(plain, c0, nc * sizeof(float));
		g.c = plain;
		pp_test_small_gemm(&g);
		memcpy(got, c0, nc * sizeof(float));
		g.c = got;
		g.bias = bias;
		pp_test_small_gemm(&g);
		ck_assert_msg(memcmp(got, plain, nc * sizeof(float)) == 0, "case %zu: C changed", c);
		for (int j = 0; j < g.n; j++) {
			double want = t->beta != 0.0f ? (double)t->beta * b0[j] : 0.0, mag = 0.0;

			for (int p = 0; p < g.k; p++) {
				want += pp_sgemm_b(&g, p, j);
				mag += fabs((double)pp_sgemm_b(&g, p, j));
			}
			ck_assert_msg(fabs(bias[j] - want) <= 1e-5 * (1.0 + mag),
				      "case %zu: bias[%d] = %.9g, expected %.9g", c, j, (double)bias[j], want);
		}
		ck_assert_msg(bias[g.n] == b0[g.n], "case %zu: written past the bias", c);
		free(a);
		free(b);
		free(c0);
		free(b0);
		free(plain);
		free(got);
		free(bias);
	}
	ck_assert_int_ge(tried, 4);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("nn_gpu_math");
	TCase *tc = tcase_create("per-thread");

	tcase_add_test(tc, test_fused_forward);
	tcase_add_test(tc, test_fused_backward);
	tcase_add_test(tc, test_pool_backward);
	tcase_add_test(tc, test_sums);
	tcase_add_test(tc, test_red_parts);
	tcase_add_test(tc, test_xent);
	tcase_add_test(tc, test_optim_math);
	tcase_add_test(tc, test_small_gemm);
	tcase_add_test(tc, test_small_gemm_relu);
	tcase_add_test(tc, test_small_gemm_bias);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}
