/*
 * nn/cuda/small_gemm.h: the per-thread arithmetic of the GEMM kernels that
 * take the small products of a step in place of cuBLAS (nn/cuda/ops.cu's
 * pp_cuda_sgemm()), compiled by nvcc for the GPU and by the C compiler for
 * the CPU tests (tests/test_nn_gpu_math.c), as nn/cuda/fused.h is.
 *
 * A Linear layer of a small model at a small batch (the MLP's 784 x 32 at
 * batch 100) is a GEMM of a few million multiply-adds, which cuBLAS runs as
 * a kernel and, where k is long against m and n, a second one that adds
 * its split-k parts: four kernels of a few microseconds each where the
 * arithmetic is under one.  These kernels take such a product in one
 * launch:
 *  - op(A) not transposed (its rows i adjacent in memory): a block of
 *    PP_SGEMM_ROWS x PP_SGEMM_PARTS threads per PP_SGEMM_ROWS rows of one
 *    column j of C, thread (i, q) summing the terms p = q, q + PARTS, ...
 *    in order (a warp on adjacent rows, its loads of A coalesced, of B the
 *    same address), then thread (i, 0) adding the PARTS sums in order;
 *  - op(A) transposed and op(B) not (the forward of a Linear layer: each
 *    C(i, j) a dot product of two columns adjacent in memory): a warp per
 *    C(i, j), lane l summing the terms p = l, l + 32, ... in order, then
 *    the lanes' sums added by a butterfly of five steps (every lane ends
 *    with the same bits: a + b = b + a).
 * Every sum in a fixed order, fused multiply-adds (fmaf) on both sides:
 * the same bits on every run, and in the CPU tests.  C = op(A) op(B) +
 * beta C, C not read where beta is 0 (as cuBLAS); a ReLU next to the
 * layer taken as C is stored (struct pp_cuda_gemm's relu and mask), and
 * the bias gradient with the weight gradient as a row more of the
 * untransposed kernel (its bias): one launch a step fewer for each.
 */
#ifndef PP_NN_CUDA_SMALL_GEMM_H
#define PP_NN_CUDA_SMALL_GEMM_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "nn/cuda/kernels.h"
#include "nn/nn_math.h"

/* Rows of C a block of the untransposed kernel takes (a warp's width). */
#define PP_SGEMM_ROWS 32
/* Parts of each sum in the untransposed kernel. */
#define PP_SGEMM_PARTS 8
/* Lanes of each sum in the transposed kernel. */
#define PP_SGEMM_LANES 32
/* Warps a block of the transposed kernel: C's elements a block. */
#define PP_SGEMM_WARPS 8
/*
 * Multiply-adds of a product these kernels take, at most (m n k): they
 * read A and B again for every element of C (no tiles), so their time
 * grows with m n k where cuBLAS's stays near its floor of some 8 us: on an
 * H200, 6-7 us at 2.5 million (the MLP's and the CNN's Linear layers at
 * batch 100), 12-25 us at 7 million (the CNN's at batch 1000, which
 * cuBLAS takes in 9-11 us).
 */
#define PP_SGEMM_MAX_WORK (3L << 20)
/*
 * Terms of a sum, at most: a thread's serial multiply-adds are k / parts
 * (8 untransposed, 32 transposed); k = 1000 over 8 parts took 18 us on an
 * H200 for 320 elements, where the whole product is a third of a million.
 */
#define PP_SGEMM_MAX_K_N 256
#define PP_SGEMM_MAX_K_T 1024
/* Columns of C, at most, for the untransposed kernel (a grid's y). */
#define PP_SGEMM_MAX_COLS 65535

/*
 * Whether pp_cuda_sgemm() runs 'g' with these kernels rather than cuBLAS:
 * at most PP_SGEMM_MAX_WORK multiply-adds; op(A) untransposed with k at
 * most PP_SGEMM_MAX_K_N, or op(A) transposed, op(B) not, with k from a
 * warp's lanes (shorter dot products would leave most lanes idle) to
 * PP_SGEMM_MAX_K_T.
 */
PP_HD static inline bool pp_small_gemm_fits(const struct pp_cuda_gemm *g)
{
	const double work = (double)g->m * (double)g->n * (double)g->k;

	if (g->m < 1 || g->n < 1 || g->k < 1 || work > (double)PP_SGEMM_MAX_WORK)
		return false;
	if (!g->ta)
		return g->n <= PP_SGEMM_MAX_COLS && g->k <= PP_SGEMM_MAX_K_N;
	return !g->tb && g->k >= PP_SGEMM_LANES && g->k <= PP_SGEMM_MAX_K_T;
}

/* op(A)(i, p) */
PP_HD static inline float pp_sgemm_a(const struct pp_cuda_gemm *g, int i, int p)
{
	return g->ta ? g->a[(size_t)p + (size_t)i * (size_t)g->lda]
		     : g->a[(size_t)i + (size_t)p * (size_t)g->lda];
}

/* op(B)(p, j) */
PP_HD static inline float pp_sgemm_b(const struct pp_cuda_gemm *g, int p, int j)
{
	return g->tb ? g->b[(size_t)j + (size_t)p * (size_t)g->ldb]
		     : g->b[(size_t)p + (size_t)j * (size_t)g->ldb];
}

/* Part q of 'parts' of C(i, j)'s sum: the terms p = q, q + parts, ... in order. */
PP_HD static inline float pp_sgemm_part(const struct pp_cuda_gemm *g, int i, int j, int q,
					int parts)
{
	float acc = 0.0f;

	for (int p = q; p < g->k; p += parts)
		acc = fmaf(pp_sgemm_a(g, i, p), pp_sgemm_b(g, p, j), acc);
	return acc;
}

/*
 * Part q of 'parts' of bias[j]'s sum (struct pp_cuda_gemm's bias): op(B)(p,
 * j) for p = q, q + parts, ... in order, as row m of the product with
 * op(A)'s row of ones.
 */
PP_HD static inline float pp_sgemm_bias_part(const struct pp_cuda_gemm *g, int j, int q, int parts)
{
	float acc = 0.0f;

	for (int p = q; p < g->k; p += parts)
		acc += pp_sgemm_b(g, p, j);
	return acc;
}

/* Rows of the untransposed kernel's grid: C's, and the bias's row where it is asked for. */
PP_HD static inline int pp_sgemm_rows(const struct pp_cuda_gemm *g)
{
	return g->m + (g->bias != NULL ? 1 : 0);
}

/* The untransposed kernel's sum of the PP_SGEMM_PARTS parts of one element, in order. */
PP_HD static inline float pp_sgemm_add_parts(const float *part)
{
	float sum = part[0];

	for (int q = 1; q < PP_SGEMM_PARTS; q++)
		sum += part[q];
	return sum;
}

/* One step of the transposed kernel's butterfly: lane l's sum after it (off = 16, 8, 4, 2, 1). */
PP_HD static inline float pp_sgemm_butterfly(float mine, float other)
{
	return mine + other;
}

/*
 * Stores C(i, j) = sum + beta C(i, j), C not read where beta is 0; zero
 * where g->mask is not > 0 there, and max(C(i, j), 0) into g->relu too
 * (the ReLU's arithmetic of nn/cuda/ops.cu's kernels, which take these
 * where cuBLAS ran the product).
 */
PP_HD static inline void pp_sgemm_store(const struct pp_cuda_gemm *g, int i, int j, float sum)
{
	const size_t e = (size_t)i + (size_t)j * (size_t)g->ldc;
	float v = g->beta != 0.0f ? fmaf(g->beta, g->c[e], sum) : sum;

	if (g->mask)
		v = g->mask[e] > 0.0f ? v : 0.0f;
	g->c[e] = v;
	if (g->relu)
		g->relu[e] = v > 0.0f ? v : 0.0f;
}

/* Stores bias[j] = sum + beta bias[j]; not read where beta is 0. */
PP_HD static inline void pp_sgemm_store_bias(const struct pp_cuda_gemm *g, int j, float sum)
{
	g->bias[j] = g->beta != 0.0f ? fmaf(g->beta, g->bias[j], sum) : sum;
}

#endif
