/*
 * tests/test_nn_layers.c: nn's layers and kernels on the CPU: finite-
 * difference gradient checks of every layer and the loss, the fused and
 * direct convolutions and the pooling windows against the plain ones, and
 * each instruction-set version of the MLP step's kernels (optimizers,
 * softmax cross-entropy, input normalisation, Linear weight gradient)
 * against the portable one.
 */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "common/normalize.h"
#include "nn/cpu/cpu_impl.h"
#include "tests/nn_testutil.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------ helpers */

/* One layer under a gradient check: L = sum(out * r), in double. */
struct gc {
	struct nn_layer l;
	int n;          /* samples */
	float *in, *w, *b, *out, *r, *col, *dcol;
	int32_t *idx;
};

static double gc_loss(struct gc *g)
{
	double s = 0.0;
	size_t outs = (size_t)g->n * g->l.out_size;

	switch (g->l.kind) {
	case NN_CONV:
		pp_nn_conv2d_forward(&g->l, g->out, g->in, g->w, g->b, g->col, g->n);
		break;
	case NN_LINEAR:
		pp_nn_linear_forward(&g->l, g->out, g->in, g->w, g->b, g->n);
		break;
	case NN_MAXPOOL:
		pp_nn_maxpool_forward(&g->l, g->out, g->idx, g->in, g->n);
		break;
	default:
		pp_nn_relu_forward(g->out, g->in, outs);
		break;
	}
	for (size_t i = 0; i < outs; i++)
		s += (double)g->out[i] * g->r[i];
	return s;
}

/*
 * Compares the analytic gradient 'ana' of L with respect to x (n values)
 * with central differences (step eps, L summed in double).  Tolerance:
 * |numeric - analytic| <= 1e-3 + 1e-2 |analytic|.
 */
static void gc_compare(const char *what, struct gc *g, float *x, size_t n, const float *ana, float eps)
{
	for (size_t i = 0; i < n; i++) {
		float keep = x[i];
		double lp, lm, num;

		x[i] = keep + eps;
		lp = gc_loss(g);
		x[i] = keep - eps;
		lm = gc_loss(g);
		x[i] = keep;
		num = (lp - lm) / (2.0 * (double)eps);
		ck_assert_msg(fabs(num - ana[i]) <= 1e-3 + 1e-2 * fabs(ana[i]),
			      "%s[%zu]: numeric %.6g, analytic %.6g", what, i, num, (double)ana[i]);
	}
}

static struct gc gc_make(enum nn_layer_kind kind, int n, int c, int h, int w, int oc, int k,
			 int stride, int pad)
{
	struct gc g = { .n = n };
	struct nn_layer *l = &g.l;

	l->kind = kind;
	l->in_c = c;
	l->in_h = h;
	l->in_w = w;
	l->k = k;
	l->stride = stride;
	l->pad = pad;
	l->out_c = kind == NN_MAXPOOL || kind == NN_RELU ? c : oc;
	if (kind == NN_LINEAR) {
		l->out_h = l->out_w = 1;
	} else if (kind == NN_RELU) {
		l->out_h = h;
		l->out_w = w;
	} else {
		l->out_h = (h + 2 * pad - k) / stride + 1;
		l->out_w = (w + 2 * pad - k) / stride + 1;
	}
	l->in_size = (size_t)c * h * w;
	l->out_size = (size_t)l->out_c * l->out_h * l->out_w;
	l->n_w = kind == NN_CONV ? (size_t)oc * c * k * k : kind == NN_LINEAR ? (size_t)oc * l->in_size : 0;
	l->n_b = l->n_w ? (size_t)oc : 0;
	g.in = pp_test_rand_floats((size_t)n * l->in_size);
	g.w = pp_test_rand_floats(l->n_w);
	g.b = pp_test_rand_floats(l->n_b);
	g.out = pp_test_zero_floats((size_t)n * l->out_size);
	g.r = pp_test_rand_floats((size_t)n * l->out_size);
	g.col = pp_test_zero_floats((size_t)n * c * k * k * l->out_h * l->out_w + 1);
	g.dcol = pp_test_zero_floats((size_t)c * k * k * l->out_h * l->out_w + 1);
	g.idx = calloc((size_t)n * l->out_size + 1, sizeof(int32_t));
	return g;
}

static void gc_free(struct gc *g)
{
	free(g->in);
	free(g->w);
	free(g->b);
	free(g->out);
	free(g->r);
	free(g->col);
	free(g->dcol);
	free(g->idx);
}

/* Makes g's dcol the size the pooled backward of g's conv behind pool takes. */
static void gc_pooled_scratch(struct gc *g, const struct nn_layer *pool)
{
	free(g->dcol);
	g->dcol = pp_test_zero_floats(pp_nn_conv2d_backward_pooled_scratch(&g->l, pool));
}

/* Runs the layer's backward with dout = r; checks din, dW and db against central differences. */
static void gc_run(struct gc *g, float eps)
{
	const struct nn_layer *l = &g->l;
	float *din = pp_test_zero_floats((size_t)g->n * l->in_size);
	float *dw = pp_test_zero_floats(l->n_w), *db = pp_test_zero_floats(l->n_b);

	gc_loss(g);
	switch (l->kind) {
	case NN_CONV:
		pp_nn_conv2d_backward(l, din, dw, db, g->r, g->w, g->col, g->dcol, g->n);
		break;
	case NN_LINEAR:
		pp_nn_linear_backward(l, din, dw, db, g->r, g->in, g->w, g->n);
		break;
	case NN_MAXPOOL:
		pp_nn_maxpool_backward(l, din, g->r, g->idx, g->n);
		break;
	default:
		pp_nn_relu_backward(din, g->r, g->out, (size_t)g->n * l->out_size);
		break;
	}
	gc_compare("input", g, g->in, (size_t)g->n * l->in_size, din, eps);
	gc_compare("weight", g, g->w, l->n_w, dw, eps);
	gc_compare("bias", g, g->b, l->n_b, db, eps);
	free(din);
	free(dw);
	free(db);
}

/* ------------------------------------------------------------------ gradient checks */

/* Fails if Linear's backward (dx, dW, db) disagrees with its forward's finite differences. */
START_TEST(test_grad_linear)
{
	struct gc g = gc_make(NN_LINEAR, 3, 7, 1, 1, 5, 0, 0, 0);

	gc_run(&g, 1e-2f);
	gc_free(&g);
}
END_TEST

/*
 * Fails if Conv2d's forward or backward (GEMM path) is wrong: with padding
 * and stride 1, with stride 2 and padding 2, and without padding at
 * stride 1 (the column copy of whole windows) for kernels of 3, 5 and 4
 * (the constant and the general copy lengths).
 */
START_TEST(test_grad_conv)
{
	static const int shapes[5][6] = {
		/* c, h, w, k, stride, pad */
		{ 3, 6, 5, 3, 1, 1 }, { 2, 7, 7, 3, 2, 2 }, { 2, 7, 6, 3, 1, 0 },
		{ 2, 8, 9, 5, 1, 0 }, { 3, 6, 7, 4, 1, 0 },
	};

	for (int i = 0; i < 5; i++) {
		const int *sh = shapes[i];
		struct gc g = gc_make(NN_CONV, 2, sh[0], sh[1], sh[2], 3, sh[3], sh[4], sh[5]);

		gc_run(&g, 1e-2f);
		gc_free(&g);
	}
}
END_TEST

static void expect_close(const char *what, const float *want, const float *got, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(fabsf(want[i] - got[i]) <= 1e-5f * (1.0f + fabsf(want[i])),
			      "%s[%zu]: %g, expected %g", what, i, (double)got[i], (double)want[i]);
}

/* Says which of the kernels' versions a test compares on this CPU (all of them where it has AVX-512). */
static void note_isa(const char *test, enum pp_isa best)
{
	if (best < PP_ISA_AVX512)
		fprintf(stderr, "%s: no %s on this CPU, its version%s not compared\n", test,
			best < PP_ISA_AVX2 ? "AVX2 nor AVX-512" : "AVX-512",
			best < PP_ISA_AVX2 ? "s" : "");
}

/*
 * Fails if the fused backward of conv, ReLU (or none) and a max-pool with
 * stride >= kernel differs from the three backwards one after the other
 * (max-pool, ReLU, the gradient-checked GEMM conv backward): a gradient
 * lost, sent to a position the pool did not select or the ReLU blocked,
 * or to the wrong channel.  The 9x9 output leaves the last row and column
 * out of the 2x2 windows; the 2x2 stride-3 pool leaves gaps between them.
 */
START_TEST(test_conv_pooled_backward)
{
	for (int variant = 0; variant < 4; variant++) {
		const bool relu = variant & 1;
		struct gc g = gc_make(NN_CONV, 2, 3, 9, 9, 4, 3, 1, 1);
		const struct nn_layer *l = &g.l;
		struct gc pg = gc_make(NN_MAXPOOL, 2, 4, 9, 9, 4, 2, variant < 2 ? 2 : 3, 0);
		const struct nn_layer *pool = &pg.l;
		gc_pooled_scratch(&g, pool);
		const size_t outs = (size_t)g.n * l->out_size, pouts = (size_t)g.n * pool->out_size;
		float *act = pp_test_zero_floats(outs), *dact = pp_test_zero_floats(outs), *dy = pp_test_zero_floats(outs);
		float *pooled = pp_test_zero_floats(pouts), *dpool = pp_test_rand_floats(pouts);
		float *din1 = pp_test_zero_floats((size_t)g.n * l->in_size), *din2 = pp_test_zero_floats((size_t)g.n * l->in_size);
		float *dw1 = pp_test_zero_floats(l->n_w), *dw2 = pp_test_zero_floats(l->n_w);
		float *db1 = pp_test_zero_floats(l->n_b), *db2 = pp_test_zero_floats(l->n_b);

		for (size_t i = 0; i < pouts; i += 3)
			dpool[i] = 0.0f;
		pp_nn_conv2d_forward(l, g.out, g.in, g.w, g.b, g.col, g.n);
		if (relu)
			pp_nn_relu_forward(act, g.out, outs);
		else
			memcpy(act, g.out, outs * sizeof(float));
		pp_nn_maxpool_forward(pool, pooled, pg.idx, act, g.n);
		pp_nn_maxpool_backward(pool, dact, dpool, pg.idx, g.n);
		if (relu)
			pp_nn_relu_backward(dy, dact, act, outs);
		else
			memcpy(dy, dact, outs * sizeof(float));
		pp_nn_conv2d_backward(l, din1, dw1, db1, dy, g.w, g.col, g.dcol, g.n);
		pp_nn_conv2d_backward_pooled(l, pool, din2, dw2, db2, dpool, pg.idx, relu ? act : NULL, g.w,
				       g.col, g.dcol, g.n);
		expect_close("input gradient", din1, din2, (size_t)g.n * l->in_size);
		expect_close("weight gradient", dw1, dw2, l->n_w);
		expect_close("bias gradient", db1, db2, l->n_b);
		free(act);
		free(dact);
		free(dy);
		free(pooled);
		free(dpool);
		free(din1);
		free(din2);
		free(dw1);
		free(dw2);
		free(db1);
		free(db2);
		gc_free(&pg);
		gc_free(&g);
	}
}
END_TEST

/*
 * Fails if a version of the pooled conv backward (the input gradient
 * added window by window, in registers a row at a time (AVX-512: two
 * channels, then the third alone), or through the columns; AVX-512, AVX2
 * or portable code, each where the CPU has it)
 * differs from the three backwards one after the other (max-pool, ReLU,
 * the gradient-checked GEMM conv backward), at stride 1 without padding
 * where the window scatter applies: a window added at the wrong place or
 * channel, a padded lane added to the input, or a gradient read or
 * written past the end of the input (the last windows of a 7-wide input,
 * under ASan).  Kernels 5 and 3; 3 input channels, 4 outputs.
 */
START_TEST(test_conv_pooled_versions)
{
	static const int shapes[3][3] = { { 12, 12, 5 }, { 7, 7, 3 }, { 9, 8, 5 } }; /* h, w, k */
	const enum pp_isa best = pp_isa_best();

	note_isa("test_conv_pooled_versions", best);
	for (int s = 0; s < 3; s++)
		for (int variant = 0; variant < 2 * ((int)best + 1); variant++) {
			const int *sh = shapes[s];
			const bool scatter = variant & 1;
			const enum pp_isa isa = (enum pp_isa)(variant / 2);
			struct gc g = gc_make(NN_CONV, 2, 3, sh[0], sh[1], 4, sh[2], 1, 0);
			const struct nn_layer *l = &g.l;
			struct gc pg = gc_make(NN_MAXPOOL, 2, 4, l->out_h, l->out_w, 0, 2, 2, 0);
			const struct nn_layer *pool = &pg.l;
			gc_pooled_scratch(&g, pool);
			const size_t outs = (size_t)g.n * l->out_size, pouts = (size_t)g.n * pool->out_size;
			const size_t ins = (size_t)g.n * l->in_size;
			float *act = pp_test_zero_floats(outs), *dact = pp_test_zero_floats(outs), *dy = pp_test_zero_floats(outs);
			float *pooled = pp_test_zero_floats(pouts), *dpool = pp_test_rand_floats(pouts);
			float *din1 = pp_test_zero_floats(ins), *din2 = pp_test_rand_floats(ins);
			float *dw1 = pp_test_zero_floats(l->n_w), *dw2 = pp_test_zero_floats(l->n_w);
			float *db1 = pp_test_zero_floats(l->n_b), *db2 = pp_test_zero_floats(l->n_b);

			for (size_t i = 0; i < pouts; i += 3)
				dpool[i] = 0.0f;
			pp_nn_conv2d_forward(l, g.out, g.in, g.w, g.b, g.col, g.n);
			pp_nn_relu_forward(act, g.out, outs);
			pp_nn_maxpool_forward(pool, pooled, pg.idx, act, g.n);
			pp_nn_maxpool_backward(pool, dact, dpool, pg.idx, g.n);
			pp_nn_relu_backward(dy, dact, act, outs);
			pp_nn_conv2d_backward(l, din1, dw1, db1, dy, g.w, g.col, g.dcol, g.n);
			pp_nn_conv2d_backward_pooled_impl(l, pool, din2, dw2, db2, dpool, pg.idx, act, g.w,
						    g.col, g.dcol, g.n, scatter, isa);
			expect_close("input gradient", din1, din2, ins);
			expect_close("weight gradient", dw1, dw2, l->n_w);
			expect_close("bias gradient", db1, db2, l->n_b);
			free(act);
			free(dact);
			free(dy);
			free(pooled);
			free(dpool);
			free(din1);
			free(din2);
			free(dw1);
			free(dw2);
			free(db1);
			free(db2);
			gc_free(&pg);
			gc_free(&g);
		}
}
END_TEST

/*
 * Fails if the direct convolution (one input channel, no columns) differs
 * from the gradient-checked im2col + GEMM path, in any version (the
 * portable one, and the AVX2 and AVX-512 ones where the CPU has them): a
 * tap, channel or bias missed, a row of 24 or 8 positions or the single
 * positions after them (widths 26, 9 and 4; AVX-512: 32 then a masked
 * tail, widths 36, 26 and 9, two rows at a time with their tails in
 * one vector, widths 24 and 21, the last of 9 rows alone, and rows of at
 * most 8 two to a vector, widths 4 and 8) or the second
 * channel of a pair (3 outputs:
 * a pair, then one alone; AVX-512: 8 and 7, six then two or one) wrong;
 * or if its pooled backward differs from pp_nn_conv2d_backward_pooled() on the
 * columns: a gradient sent to the wrong tap, window or channel, or read
 * past the input's end (the last windows of an input whose row is
 * shorter than 8, under ASan); on AVX-512 also without the input
 * gradient, where rows of 17 to 24 outputs are taken two at a time with
 * their tails in one vector (widths 24, 21, 19 and 17; 24 and 15 input
 * rows, the last of an odd count alone; 9 and 13 output rows, the last
 * outside the pool; blocks of 8 samples then 3): a tail lane, a pair's
 * second row, a kept position or the ReLU's mask wrong.  Kernels 5, 3, 4
 * and 2 (the constant and the general code).  Also fails if a model would take the direct path on
 * a CPU without AVX2 and FMA.
 */
START_TEST(test_conv_direct)
{
	const enum pp_isa best = pp_isa_best();
	const bool has_avx2 = best >= PP_ISA_AVX2;
	static const int shapes[11][4] = {
		/* h, w, k, output channels */
		{ 30, 30, 5, 3 }, { 11, 13, 5, 3 }, { 6, 6, 3, 3 }, { 9, 7, 4, 3 },
		{ 12, 40, 5, 8 }, { 10, 30, 3, 7 }, { 8, 9, 2, 8 }, { 28, 28, 5, 6 },
		{ 11, 23, 3, 8 }, { 27, 22, 4, 5 }, { 15, 19, 3, 2 },
	};

	note_isa("test_conv_direct", best);
	for (int s = 0; s < 11; s++)
		for (int variant = 0; variant < 2 * ((int)best + 1); variant++) {
			const int *sh = shapes[s];
			const bool relu = variant & 1;
			const enum pp_isa isa = (enum pp_isa)(variant / 2);
			struct gc g = gc_make(NN_CONV, 11, 1, sh[0], sh[1], sh[3], sh[2], 1, 0);
			struct nn_layer *l = &g.l;
			struct gc pg = gc_make(NN_MAXPOOL, 11, sh[3], l->out_h, l->out_w, 0, 2, 2, 0);
			const struct nn_layer *pool = &pg.l;
			gc_pooled_scratch(&g, pool);
			const size_t outs = (size_t)g.n * l->out_size, pouts = (size_t)g.n * pool->out_size;
			const size_t ins = (size_t)g.n * l->in_size;
			float *y = pp_test_zero_floats(outs), *act = pp_test_zero_floats(outs), *pooled = pp_test_zero_floats(pouts);
			float *dpool = pp_test_rand_floats(pouts);
			float *din1 = pp_test_zero_floats(ins), *din2 = pp_test_zero_floats(ins);
			float *dw1 = pp_test_zero_floats(l->n_w), *dw2 = pp_test_zero_floats(l->n_w);
			float *db1 = pp_test_zero_floats(l->n_b), *db2 = pp_test_zero_floats(l->n_b);

			l->sparse_dout = true;
			ck_assert(pp_nn_conv2d_direct_fits(l) == has_avx2);
			for (size_t i = 0; i < pouts; i += 3)
				dpool[i] = 0.0f;
			pp_nn_conv2d_forward_impl(l, g.out, g.in, g.w, g.b, g.col, g.n, PP_ISA_BASE);
			if (isa == PP_ISA_AVX512)
				pp_nn_conv2d_direct_forward_avx512(l, y, g.in, g.w, g.b, g.n);
			else if (isa == PP_ISA_AVX2)
				pp_nn_conv2d_direct_forward_avx2(l, y, g.in, g.w, g.b, g.n);
			else
				pp_nn_conv2d_direct_forward_portable(l, y, g.in, g.w, g.b, g.n);
			expect_close("output", g.out, y, outs);
			if (relu)
				pp_nn_relu_forward(act, g.out, outs);
			else
				memcpy(act, g.out, outs * sizeof(float));
			pp_nn_maxpool_forward(pool, pooled, pg.idx, act, g.n);
			pp_nn_conv2d_backward_pooled(l, pool, din1, dw1, db1, dpool, pg.idx, relu ? act : NULL,
					       g.w, g.col, g.dcol, g.n);
			if (isa == PP_ISA_AVX512)
				pp_nn_conv2d_direct_backward_pooled_avx512(l, pool, din2, dw2, db2, dpool, pg.idx,
								     relu ? act : NULL, g.w, g.in, g.n);
			else if (isa == PP_ISA_AVX2)
				pp_nn_conv2d_direct_backward_pooled_avx2(l, pool, din2, dw2, db2, dpool, pg.idx,
								   relu ? act : NULL, g.w, g.in, g.n);
			else
				pp_nn_conv2d_direct_backward_pooled_portable(l, pool, din2, dw2, db2, dpool,
								       pg.idx, relu ? act : NULL, g.w,
								       g.in, g.n);
			expect_close("input gradient", din1, din2, ins);
			expect_close("weight gradient", dw1, dw2, l->n_w);
			expect_close("bias gradient", db1, db2, l->n_b);
			if (isa == PP_ISA_AVX512) {
				/* without the input gradient: rows of 17 to 24 taken in pairs */
				memset(dw2, 0, l->n_w * sizeof(float));
				memset(db2, 0, l->n_b * sizeof(float));
				pp_nn_conv2d_direct_backward_pooled_avx512(l, pool, NULL, dw2, db2, dpool, pg.idx,
								     relu ? act : NULL, g.w, g.in, g.n);
				expect_close("weight gradient, no input gradient", dw1, dw2, l->n_w);
				expect_close("bias gradient, no input gradient", db1, db2, l->n_b);
			}
			free(y);
			free(act);
			free(pooled);
			free(dpool);
			free(din1);
			free(din2);
			free(dw1);
			free(dw2);
			free(db1);
			free(db2);
			gc_free(&pg);
			gc_free(&g);
		}
}
END_TEST

/*
 * Fails if pp_nn_conv2d_forward() on AVX-512 (the direct kernel from the input
 * where pp_nn_conv2d_direct_forward_fits512(), else the GEMM) gives another
 * output than the GEMM on the columns, or other columns (the backward
 * reads them): several input channels (the cnn's second convolution, 6
 * to 12 channels, 12 x 12 to 8 x 8), rows of at most 8 positions eight
 * at a time, then two at a time with the last alone (8, 7 and 6 rows),
 * wider rows, 6 + 2 + 1 output channels, kernels 5, 3 and 1; and layers
 * the check rejects (padding, stride 2, more than 1024 taps), which must
 * still give the GEMM's result (widths 9 to 16 with kernels 3 and 5 among
 * the first).  Also fails if the check accepts one of
 * those or rejects one of the others.
 */
START_TEST(test_conv_forward_direct512)
{
	const enum pp_isa best = pp_isa_best();
	static const int shapes[11][7] = {
		/* c, h, w, output channels, k, stride, pad */
		{ 6, 12, 12, 12, 5, 1, 0 }, { 3, 11, 9, 9, 5, 1, 0 },  { 4, 9, 10, 7, 3, 1, 0 },
		{ 2, 14, 30, 6, 5, 1, 0 },  { 5, 6, 8, 13, 1, 1, 0 },  { 2, 9, 16, 3, 3, 1, 0 },
		{ 1, 7, 16, 2, 5, 1, 0 },   { 3, 10, 10, 4, 3, 1, 1 }, { 3, 13, 13, 5, 3, 2, 0 },
		{ 50, 9, 9, 7, 5, 1, 0 },   { 6, 12, 12, 12, 5, 1, 2 },
	};

	note_isa("test_conv_forward_direct512", best);
	for (int s = 0; s < 11; s++) {
		const int *sh = shapes[s];
		struct gc g = gc_make(NN_CONV, 3, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6]);
		const struct nn_layer *l = &g.l;
		const size_t outs = (size_t)g.n * l->out_size;
		const size_t cols = (size_t)g.n * l->in_c * l->k * l->k * l->out_h * l->out_w;
		float *y = pp_test_zero_floats(outs), *col = pp_test_zero_floats(cols);

		ck_assert_msg(pp_nn_conv2d_direct_forward_fits512(l) == (s < 7), "shape %d", s);
		if (best < PP_ISA_AVX512) {
			free(y);
			free(col);
			gc_free(&g);
			continue;
		}
		pp_nn_conv2d_forward_impl(l, g.out, g.in, g.w, g.b, g.col, g.n, PP_ISA_BASE);
		pp_nn_conv2d_forward_impl(l, y, g.in, g.w, g.b, col, g.n, PP_ISA_AVX512);
		expect_close("output", g.out, y, outs);
		ck_assert(memcmp(g.col, col, cols * sizeof(float)) == 0);
		free(y);
		free(col);
		gc_free(&g);
	}
}
END_TEST

/*
 * Fails if the 2x2 stride-2 max-pool (portable: four windows at a time,
 * then one by one; AVX-512: sixteen, the row's tail masked; output widths
 * 10, 12, 4 and 21, heights 4 and 3 with a row and a column left over) or
 * its fusion with a ReLU picks another value or index than the first
 * maximum of each window (top left, top right, bottom left, bottom
 * right), or if the fused one does not give max(0, maximum); ties (values
 * on a coarse grid) make the order matter.
 */
START_TEST(test_maxpool_windows)
{
	static const int shapes[4][2] = { { 9, 21 }, { 8, 24 }, { 7, 8 }, { 8, 43 } }; /* h, w */
	const enum pp_isa best = pp_isa_best();

	note_isa("test_maxpool_windows", best);
	for (int s = 0; s < 4; s++)
		for (int isa = 0; isa <= (int)best; isa++) {
			struct gc g = gc_make(NN_MAXPOOL, 2, 3, shapes[s][0], shapes[s][1], 0, 2, 2, 0);
			const struct nn_layer *l = &g.l;
			const size_t outs = (size_t)g.n * l->out_size;
			float *y2 = pp_test_zero_floats(outs);
			int32_t *idx2 = calloc(outs, sizeof(int32_t));

			ck_assert_ptr_nonnull(idx2);
			for (size_t i = 0; i < (size_t)g.n * l->in_size; i++)
				g.in[i] = roundf(g.in[i] * 3.0f);
			pp_nn_maxpool_forward_impl(l, g.out, g.idx, g.in, g.n, false, (enum pp_isa)isa);
			pp_nn_maxpool_forward_impl(l, y2, idx2, g.in, g.n, true, (enum pp_isa)isa);
			for (int i = 0; i < g.n; i++)
				for (int ch = 0; ch < l->out_c; ch++)
					for (int oy = 0; oy < l->out_h; oy++)
						for (int ox = 0; ox < l->out_w; ox++) {
							const float *x = g.in + (size_t)i * l->in_size;
							const size_t q = (size_t)i * l->out_size +
									 ((size_t)ch * l->out_h + oy) * l->out_w +
									 ox;
							int best_at = (ch * l->in_h + 2 * oy) * l->in_w + 2 * ox;

							for (int k = 1; k < 4; k++) {
								int at = (ch * l->in_h + 2 * oy + k / 2) * l->in_w +
									 2 * ox + k % 2;

								if (x[at] > x[best_at])
									best_at = at;
							}
							ck_assert_msg(g.idx[q] == best_at && idx2[q] == best_at,
								      "%dx%d, isa %d, window %zu: index %d, %d, expected %d",
								      shapes[s][0], shapes[s][1], isa, q,
								      (int)g.idx[q], (int)idx2[q], best_at);
							ck_assert(g.out[q] == x[best_at]);
							ck_assert(y2[q] == (x[best_at] > 0.0f ? x[best_at] : 0.0f));
						}
			free(y2);
			free(idx2);
			gc_free(&g);
		}
}
END_TEST

/*
 * Fails if MaxPool2d routes gradients anywhere but to each window's
 * maximum: overlapping 3x3 windows with stride 2, and the 2x2 stride-2
 * windows of the unrolled path, over an odd size (the last row and column
 * unused).
 */
START_TEST(test_grad_maxpool)
{
	struct gc g = gc_make(NN_MAXPOOL, 2, 2, 7, 7, 0, 3, 2, 0);
	struct gc g2 = gc_make(NN_MAXPOOL, 2, 3, 7, 5, 0, 2, 2, 0);
	size_t n = (size_t)g.n * g.l.in_size, n2 = (size_t)g2.n * g2.l.in_size;

	/* distinct values 0.01 apart, so that a step of 1e-3 never changes a maximum */
	for (size_t i = 0; i < n; i++)
		g.in[i] = (float)((i * 37) % n) * 0.01f - 1.0f;
	for (size_t i = 0; i < n2; i++)
		g2.in[i] = (float)((i * 41) % n2) * 0.01f - 1.0f;
	gc_run(&g, 1e-3f);
	gc_run(&g2, 1e-3f);
	gc_free(&g);
	gc_free(&g2);
}
END_TEST

/* Fails if ReLU's backward lets gradient through where the output is 0, or blocks it elsewhere. */
START_TEST(test_grad_relu)
{
	struct gc g = gc_make(NN_RELU, 2, 3, 3, 5, 0, 0, 0, 0); /* 90: the 4-wide loop and its tail */
	size_t n = (size_t)g.n * g.l.in_size;

	for (size_t i = 0; i < n; i++) /* away from the kink at 0 */
		g.in[i] = g.in[i] >= 0 ? g.in[i] + 0.05f : g.in[i] - 0.05f;
	gc_run(&g, 1e-3f);
	gc_free(&g);
}
END_TEST

static double xent_loss(const float *z, const int32_t *y, int n, int c)
{
	double losses[8], s = 0.0;
	uint64_t correct = 0;

	ck_assert_int_le(n, 8);
	ck_assert_int_eq(pp_nn_softmax_xent(z, y, n, c, 1.0f, NULL, losses, &correct), 0);
	for (int i = 0; i < n; i++)
		s += losses[i];
	return s / n;
}

/*
 * Fails if the softmax cross-entropy gradient is not d(mean loss)/dz, or if
 * the loss overflows on large logits (numerical stability).
 */
START_TEST(test_grad_loss)
{
	const int n = 4, c = 5;
	int32_t y[4] = { 0, 4, 2, 2 };
	float *z = pp_test_rand_floats((size_t)n * c), *dz = pp_test_zero_floats((size_t)n * c);
	float big[3] = { 1000.0f, -1000.0f, 999.0f };
	int32_t by[1] = { 2 };
	double losses[4];
	uint64_t correct = 0;

	for (int i = 0; i < n * c; i++)
		z[i] *= 3.0f;
	ck_assert_int_eq(pp_nn_softmax_xent(z, y, n, c, 1.0f / n, dz, losses, &correct), 0);
	for (int i = 0; i < n * c; i++) {
		float keep = z[i];
		double lp, lm, num;

		z[i] = keep + 1e-2f;
		lp = xent_loss(z, y, n, c);
		z[i] = keep - 1e-2f;
		lm = xent_loss(z, y, n, c);
		z[i] = keep;
		num = (lp - lm) / 2e-2;
		ck_assert_msg(fabs(num - dz[i]) <= 1e-4 + 1e-2 * fabs(dz[i]), "dz[%d]: numeric %g, analytic %g",
			      i, num, (double)dz[i]);
	}
	/* log(1 + e^-1 + e^-2000) = 0.31326168752 for the label 999 against 1000 */
	correct = 0;
	ck_assert_int_eq(pp_nn_softmax_xent(big, by, 1, 3, 1.0f, NULL, losses, &correct), 0);
	ck_assert_double_eq_tol(losses[0], 1.3132616875182228, 1e-9);
	ck_assert_uint_eq(correct, 0);
	free(z);
	free(dz);
}
END_TEST

/* ------------------------------------------------------------------ the MLP's step: vector kernels */

/* True where the CPU has the AVX-512 the kernels use (F, VL, BW, DQ, and FMA): the
 * tests below must then run the AVX-512 versions. */
static bool has_avx512(void)
{
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
	       __builtin_cpu_supports("fma");
}

/* The instruction sets this CPU has, best last; their count. */
static int isas_here(enum pp_isa isas[3])
{
	int n = 0;

	isas[n++] = PP_ISA_BASE;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		isas[n++] = PP_ISA_AVX2;
	if (has_avx512())
		isas[n++] = PP_ISA_AVX512;
	return n;
}

static void expect_near(const char *what, const float *want, const float *got, size_t n, float rel,
			float abs_tol)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(fabsf(got[i] - want[i]) <= abs_tol + rel * fabsf(want[i]),
			      "%s[%zu]: %.9g, expected %.9g", what, i, (double)got[i], (double)want[i]);
}

/*
 * Fails if a vector version of SGD (plain; momentum, dampening and weight
 * decay; Nesterov) or Adam (with and without weight decay) differs after
 * three steps from the portable version (4 lanes, no FMA) by more than
 * the last bits: a lane of the 37 skipped or updated twice (37 = two full
 * vectors of 16 and a masked tail of 5; four of 8 and a tail of 5), a
 * moment not written back, the first step's momentum not the gradient,
 * a bias correction of the wrong step; or if a masked tail writes past the
 * end of the parameters or of either buffer (a sentinel there).  Also
 * fails if the CPU has AVX-512 and pp_isa_best() does not choose it.
 */
START_TEST(test_optim_versions)
{
	enum { N = 37, STEPS = 3 };
	const float sentinel = 12345.0f;
	enum pp_isa isas[3];
	const int n_isas = isas_here(isas);
	struct pp_optimizer_config cfgs[5];

	ck_assert(!has_avx512() || pp_isa_best() == PP_ISA_AVX512);
	ck_assert(!has_avx512() || isas[n_isas - 1] == PP_ISA_AVX512);
	for (int k = 0; k < 5; k++) {
		struct pp_model_config mc;

		pp_model_config_init(&mc);
		cfgs[k] = mc.optim;
		cfgs[k].kind = k < 3 ? PP_OPTIM_SGD : PP_OPTIM_ADAM;
		cfgs[k].lr = 0.05f;
	}
	cfgs[1].momentum = 0.9f;
	cfgs[1].dampening = 0.3f;
	cfgs[1].weight_decay = 0.01f;
	cfgs[2].momentum = 0.8f;
	cfgs[2].dampening = 0.0f;
	cfgs[2].nesterov = true;
	cfgs[4].weight_decay = 0.02f;
	for (int k = 0; k < 5; k++) {
		float p[3][N + 1], m[3][N + 1], v[3][N + 1];

		for (int a = 0; a < n_isas; a++) {
			struct nn_optim o = { .cfg = cfgs[k], .buf1 = m[a],
					      .buf2 = cfgs[k].kind == PP_OPTIM_ADAM ? v[a] : NULL };

			ck_assert_int_eq(pp_nn_optim_check(&cfgs[k]), 0);
			pp_test_rng = 7;
			for (int i = 0; i < N; i++) {
				p[a][i] = pp_test_frand();
				m[a][i] = v[a][i] = 0.0f;
			}
			p[a][N] = m[a][N] = v[a][N] = sentinel;
			for (int s = 0; s < STEPS; s++) {
				float g[N + 1];

				for (int i = 0; i < N; i++)
					g[i] = pp_test_frand() * (float)(s + 1);
				g[N] = sentinel;
				pp_nn_optim_step_isa(&o, p[a], g, N, isas[a]);
			}
			ck_assert_uint_eq(o.t, STEPS);
			ck_assert(p[a][N] == sentinel && m[a][N] == sentinel && v[a][N] == sentinel);
			if (a == 0)
				continue;
			expect_near("parameter", p[0], p[a], N, 1e-6f, 1e-7f);
			if (cfgs[k].momentum != 0.0f || cfgs[k].kind == PP_OPTIM_ADAM)
				expect_near("first buffer", m[0], m[a], N, 1e-6f, 1e-7f);
			if (cfgs[k].kind == PP_OPTIM_ADAM)
				expect_near("second moment", v[0], v[a], N, 1e-6f, 1e-9f);
		}
		/* the step changed every parameter: the comparison above is not of untouched arrays */
		pp_test_rng = 7;
		for (int i = 0; i < N; i++)
			ck_assert(p[0][i] != pp_test_frand());
	}
}
END_TEST

/*
 * Fails if the AVX-512 softmax cross-entropy (its own exp, in double)
 * differs from the portable one (the C library's exp): a loss off by more
 * than 1e-13 relative (a polynomial or range reduction wrong, lanes past
 * the classes counted in the sum), a gradient off by more than float
 * rounding, another argmax (a tie must go to the first index), a
 * gradient written past a sample's classes (a sentinel after the last);
 * for 10 classes (the MLP's), 3, 8, 9 and 16 (the mask's edges), logits
 * of +-30 and of +-1000 (exps that underflow to 0).  Also fails if it
 * accepts a label outside the classes.
 */
START_TEST(test_xent_versions)
{
	static const int classes[5] = { 10, 3, 8, 9, 16 };
	enum { N = 9 };

	ck_assert(!has_avx512() || pp_isa_best() == PP_ISA_AVX512);
	for (int ci = 0; ci < 5; ci++)
		for (int big = 0; big < 2; big++) {
			const int c = classes[ci];
			float z[N * 16], d[2][N * 16 + 1];
			double losses[2][N];
			uint64_t correct[2] = { 5, 5 };
			int32_t y[N];

			for (int i = 0; i < N * c; i++)
				z[i] = pp_test_frand() * (big ? 1000.0f : 30.0f);
			for (int i = 0; i < N; i++)
				y[i] = (int32_t)((i * 7 + ci) % c);
			/* a tie for the largest logit, the label on the second: not correct */
			z[1 * c + 0] = z[1 * c + 1] = 2000.0f;
			y[1] = 1;
			/* the label the largest: correct */
			z[2 * c + y[2]] = 3000.0f;
			for (int a = 0; a < 2; a++) {
				d[a][N * c] = 12345.0f;
				ck_assert_int_eq(pp_nn_softmax_xent_isa(z, y, N, c, 0.25f, d[a], losses[a],
								  &correct[a],
								  a ? pp_isa_best() : PP_ISA_BASE), 0);
				ck_assert(d[a][N * c] == 12345.0f);
			}
			ck_assert_uint_eq(correct[0], correct[1]);
			ck_assert_uint_ge(correct[0], 6);
			for (int i = 0; i < N; i++)
				ck_assert_msg(fabs(losses[1][i] - losses[0][i]) <= 1e-13 * fabs(losses[0][i]) + 1e-15,
					      "c %d sample %d: loss %.17g, expected %.17g", c, i,
					      losses[1][i], losses[0][i]);
			expect_near("logit gradient", d[0], d[1], (size_t)N * c, 1e-6f, 1e-12f);
			y[N - 1] = c;
			ck_assert_int_eq(pp_nn_softmax_xent_isa(z, y, N, c, 0.25f, d[1], losses[1], &correct[1],
							  pp_isa_best()), -ERANGE);
		}
}
END_TEST

/*
 * Fails if a version of the uint8 to float32 normalisation gives other
 * bits than x * (1 / (255 std)) - mean / std computed one by one (an FMA
 * would change the last bits; a lane converted from the wrong byte, a
 * signed conversion of bytes above 127), or misses or overruns the tail:
 * 300 values (every byte value, then a tail of 12 for 16 lanes, of 4
 * for 8), a sentinel after them.
 */
START_TEST(test_convert_versions)
{
	enum { N = 300 };
	const float mean = 0.2860f, std = 0.3530f;
	const float shift = mean / std;
	float scale, bias;
	enum pp_isa isas[3];
	const int n_isas = isas_here(isas);
	uint8_t src[N];
	float want[N], got[N + 1];

	ck_assert(!has_avx512() || isas[n_isas - 1] == PP_ISA_AVX512);
	for (int i = 0; i < N; i++) {
		src[i] = (uint8_t)(i < 256 ? i : (i * 97) % 256);
		want[i] = (float)src[i] * (1.0f / (255.0f * std)) - shift;
	}
	pp_normalize_u8_params(mean, std, &scale, &bias);
	ck_assert(scale == 1.0f / (255.0f * std) && bias == -shift);
	for (int a = 0; a < n_isas; a++) {
		got[N] = 12345.0f;
		pp_normalize_u8_version(isas[a])(src, got, N, scale, bias);
		ck_assert_msg(memcmp(got, want, sizeof(want)) == 0, "version %d differs", (int)isas[a]);
		ck_assert(got[N] == 12345.0f);
	}
}
END_TEST

/*
 * Fails if the AVX-512 weight gradient of a Linear layer differs from
 * CBLAS's GEMM beyond float rounding, or writes a column outside j0..j1
 * or a row past out_c: tiles of 8 rows then 4, 2 and 1 (32, 13 = 8 + 4
 * + 1, 60 = 7 x 8 + 4, 10 = 8 + 2 rows), a last block of 16 columns (its
 * second vector empty) and of fewer than 16, a range that starts off a
 * vector's boundary, beta 1 (added to what dW held) and 0, and the bias
 * gradient with it.  Runs where the CPU has AVX-512.
 */
START_TEST(test_linear_dw_versions)
{
	static const int cases[6][6] = {
		/* out_c, in_c, n, j0, j1, beta */
		{ 32, 784, 100, 0, 128, 0 }, { 32, 784, 37, 768, 784, 0 }, { 13, 50, 5, 3, 50, 1 },
		{ 60, 70, 9, 0, 70, 1 },     { 10, 7, 3, 0, 7, 0 },        { 2, 40, 4, 5, 38, 1 },
	};

	if (!has_avx512())
		return;
	ck_assert(pp_isa_best() == PP_ISA_AVX512);
	for (int t = 0; t < 6; t++) {
		const int *c = cases[t];
		struct gc g = gc_make(NN_LINEAR, c[2], c[1], 1, 1, c[0], 0, 0, 0);
		const size_t nw = g.l.n_w;
		float *dw[2], *db[2];
		float *dout = pp_test_rand_floats((size_t)c[2] * c[0]);
		float *start = pp_test_rand_floats(nw), *db_start = pp_test_rand_floats((size_t)c[0]);

		for (int a = 0; a < 2; a++) {
			dw[a] = pp_test_zero_floats(nw);
			db[a] = pp_test_zero_floats((size_t)c[0]);
			memcpy(dw[a], start, nw * sizeof(float));
			memcpy(db[a], db_start, (size_t)c[0] * sizeof(float));
			pp_nn_linear_backward_params_isa(&g.l, dw[a], db[a], dout, g.in, c[2], c[3], c[4],
						   (float)c[5], a ? PP_ISA_AVX512 : PP_ISA_BASE);
		}
		for (size_t i = 0; i < nw; i++) {
			const size_t col = i % (size_t)c[1];

			if (col < (size_t)c[3] || col >= (size_t)c[4])
				ck_assert_msg(dw[1][i] == start[i], "case %d: weight %zu outside the columns written", t, i);
		}
		expect_near("weight gradient", dw[0], dw[1], nw, 1e-5f, 1e-5f);
		ck_assert_mem_eq(db[0], db[1], (size_t)c[0] * sizeof(float));
		for (int a = 0; a < 2; a++) {
			free(dw[a]);
			free(db[a]);
		}
		free(dout);
		free(start);
		free(db_start);
		gc_free(&g);
	}
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("nn_layers");
	TCase *grad = tcase_create("gradients");
	TCase *mlp = tcase_create("mlp-step");

	tcase_add_test(grad, test_grad_linear);
	tcase_add_test(grad, test_grad_conv);
	tcase_add_test(grad, test_conv_pooled_backward);
	tcase_add_test(grad, test_conv_pooled_versions);
	tcase_add_test(grad, test_conv_direct);
	tcase_add_test(grad, test_conv_forward_direct512);
	tcase_add_test(grad, test_grad_maxpool);
	tcase_add_test(grad, test_maxpool_windows);
	tcase_add_test(grad, test_grad_relu);
	tcase_add_test(grad, test_grad_loss);
	suite_add_tcase(s, grad);
	tcase_add_test(mlp, test_optim_versions);
	tcase_add_test(mlp, test_xent_versions);
	tcase_add_test(mlp, test_convert_versions);
	tcase_add_test(mlp, test_linear_dw_versions);
	tcase_set_timeout(mlp, 30);
	suite_add_tcase(s, mlp);
	return s;
}
