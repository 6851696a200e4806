/*
 * nn/cpu/conv2d.c: Conv2d (stride, zero padding) on the CPU by im2col and one
 * GEMM per sample, or (AVX-512, stride 1 without padding, few taps) the
 * direct kernel of nn/cpu/conv2d_direct.c from the input, the columns still
 * made for the backward, which reuses them.
 * Shapes (one sample): in (C, H, W), W (OC, C, K, K) as PyTorch's
 * nn.Conv2d, col (OH OW, C K K), out (OC, OH OW).  When a max-pool
 * follows (after a ReLU or not), the backward takes the pool's and the
 * ReLU's too, and visits only the positions the pool selected (one per
 * window), adding their windows to the input gradient in registers where
 * the input rows are at most 16 wide (AVX-512); otherwise it uses GEMMs.
 */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "common/common_impl.h"
#include "nn/cpu/blas.h"
#include "nn/cpu/cpu_impl.h"

/* Copies k floats; constant sizes for the common kernels, so that the copy is inlined. */
static inline void copy_run(float *dst, const float *src, int k)
{
	switch (k) {
	case 3:
		memcpy(dst, src, 3 * sizeof(float));
		break;
	case 5:
		memcpy(dst, src, 5 * sizeof(float));
		break;
	default:
		memcpy(dst, src, (size_t)k * sizeof(float));
		break;
	}
}

/*
 * im2col for stride 1 without padding, every window inside the input:
 * output position by output position, its row of columns written in
 * order (the input, a few KiB, stays in L1; writes to successive rows at
 * a stride of C K K floats each missed it).  k is a constant where
 * inlined with one.
 */
static inline __attribute__((always_inline)) void im2col_valid(const struct nn_layer *l, float *col,
							       const float *x, const int k)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, oh = l->out_h, ow = l->out_w;

	for (int oy = 0; oy < oh; oy++)
		for (int ox = 0; ox < ow; ox++)
			for (int ch = 0; ch < c; ch++) {
				const float *xr = x + ((size_t)ch * h + oy) * w + ox;

				for (int ky = 0; ky < k; ky++, col += k)
					memcpy(col, xr + (size_t)ky * w, (size_t)k * sizeof(float));
			}
}

/* col (OH OW, C K K): one row per output position, from one sample x (C, H, W) */
static void im2col(const struct nn_layer *l, float *col, const float *x)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, k = l->k, s = l->stride, p = l->pad;
	const int oh = l->out_h, ow = l->out_w, kk = c * k * k;

	if (s == 1 && p == 0) {
		if (k == 5)
			im2col_valid(l, col, x, 5);
		else if (k == 3)
			im2col_valid(l, col, x, 3);
		else
			im2col_valid(l, col, x, k);
		return;
	}

	for (int oy = 0; oy < oh; oy++)
		for (int ox = 0; ox < ow; ox++) {
			float *row = col + (size_t)(oy * ow + ox) * kk;

			for (int ch = 0; ch < c; ch++)
				for (int ky = 0; ky < k; ky++) {
					int iy = oy * s - p + ky, ix = ox * s - p;
					float *r = row + (ch * k + ky) * k;

					if (iy < 0 || iy >= h) {
						memset(r, 0, (size_t)k * sizeof(float));
						continue;
					}
					const float *xr = x + ((size_t)ch * h + iy) * w;
					if (ix >= 0 && ix + k <= w) {
						copy_run(r, xr + ix, k);
						continue;
					}
					for (int kx = 0; kx < k; kx++)
						r[kx] = ix + kx >= 0 && ix + kx < w ? xr[ix + kx] : 0.0f;
				}
		}
}

/* dx (C, H, W) += the rows of dcol (OH OW, C K K) put back where im2col took them */
static void col2im(const struct nn_layer *l, float *dx, const float *dcol)
{
	const int c = l->in_c, h = l->in_h, w = l->in_w, k = l->k, s = l->stride, p = l->pad;
	const int oh = l->out_h, ow = l->out_w, kk = c * k * k;

	for (int oy = 0; oy < oh; oy++)
		for (int ox = 0; ox < ow; ox++) {
			const float *row = dcol + (size_t)(oy * ow + ox) * kk;

			for (int ch = 0; ch < c; ch++)
				for (int ky = 0; ky < k; ky++) {
					int iy = oy * s - p + ky;

					if (iy < 0 || iy >= h)
						continue;
					float *xr = dx + ((size_t)ch * h + iy) * w;
					const float *r = row + (ch * k + ky) * k;
					const int ix = ox * s - p;

					if (ix >= 0 && ix + k <= w) {
						nn_axpy(xr + ix, 1.0f, r, k);
						continue;
					}
					for (int kx = 0; kx < k; kx++)
						if (ix + kx >= 0 && ix + kx < w)
							xr[ix + kx] += r[kx];
				}
		}
}

void pp_nn_conv2d_forward_impl(const struct nn_layer *l, float *out, const float *in, const float *w,
			 const float *b, float *col, int n, enum pp_isa isa)
{
	const int oc = l->out_c, kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;
	const bool direct = isa == PP_ISA_AVX512 && pp_nn_conv2d_direct_forward_fits512(l);

	for (int i = 0; i < n; i++) {
		float *y = out + (size_t)i * l->out_size;
		float *c = col + (size_t)i * pos * kk;

		im2col(l, c, in + (size_t)i * l->in_size);
		if (direct) {
			pp_nn_conv2d_direct_forward_avx512(l, y, in + (size_t)i * l->in_size, w, b, 1);
			continue;
		}
		for (int o = 0; o < oc; o++)
			for (int j = 0; j < pos; j++)
				y[(size_t)o * pos + j] = b[o];
		/* y (OC, P) += W (OC, CKK) . col^T (CKK, P) */
		pp_blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, oc, pos, kk, 1.0f, w, kk, c, kk,
			      1.0f, y, pos);
	}
}

void pp_nn_conv2d_forward(const struct nn_layer *l, float *out, const float *in, const float *w,
		    const float *b, float *col, int n)
{
	pp_nn_conv2d_forward_impl(l, out, in, w, b, col, n, pp_isa_best());
}

void pp_nn_conv2d_backward(const struct nn_layer *l, float *din, float *dw, float *db,
		     const float *dout, const float *w, const float *cols, float *dcol, int n)
{
	const int oc = l->out_c, kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;

	for (int i = 0; i < n; i++) {
		const float *dy = dout + (size_t)i * l->out_size;
		const float *col = cols + (size_t)i * pos * kk;

		for (int o = 0; o < oc; o++) {
			float s = 0.0f;

			for (int j = 0; j < pos; j++)
				s += dy[(size_t)o * pos + j];
			db[o] += s;
		}
		/* dW (OC, CKK) += dy (OC, P) . col (P, CKK) */
		pp_blas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, oc, kk, pos, 1.0f, dy, pos, col,
			      kk, 1.0f, dw, kk);
		if (!din)
			continue;
		/* dcol (P, CKK) = dy^T (P, OC) . W (OC, CKK) */
		pp_blas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, pos, kk, oc, 1.0f, dy, pos, w, kk,
			      0.0f, dcol, kk);
		float *dx = din + (size_t)i * l->in_size;
		memset(dx, 0, l->in_size * sizeof(float));
		col2im(l, dx, dcol);
	}
}

/* 8 floats, one AVX register (two SSE ones where AVX is not enabled) */
typedef float nn_f32x8 __attribute__((vector_size(32)));

/*
 * y[0..n) += a x[0..n): when wide, 8 at a time (one AVX FMA; only where
 * compiled for AVX, SSE code keeping 8-float vectors in memory), then as
 * nn_axpy().
 */
static inline __attribute__((always_inline)) void axpy8(float *restrict y, float a,
							const float *restrict x, int n,
							const bool wide)
{
	int i = 0;

	for (; wide && i + 8 <= n; i += 8) {
		nn_f32x8 vx, vy;

		memcpy(&vx, x + i, sizeof(vx));
		memcpy(&vy, y + i, sizeof(vy));
		vy += a * vx;
		memcpy(y + i, &vy, sizeof(vy));
	}
	nn_axpy(y + i, a, x + i, n - i);
}

/*
 * dx (C, H, W) += g times the kernel of one output channel, its rows
 * padded to 8 (wpad (C, K, 8), lanes k..7 zero), at the window whose top
 * left is 'at': each kernel row one 8-wide update.  Where the last row
 * would reach past the input, the rows are added k floats at a time.
 */
static inline __attribute__((always_inline)) void scatter_window(const struct nn_layer *l,
								 float *dx, float g,
								 const float *wpad, size_t at)
{
	const int c = l->in_c, h = l->in_h, iw = l->in_w, k = l->k;
	const bool whole = at + ((size_t)(c - 1) * h + k - 1) * iw + 8 <= l->in_size;

	for (int ch = 0; ch < c; ch++)
		for (int ky = 0; ky < k; ky++) {
			float *d = dx + at + ((size_t)ch * h + ky) * iw;
			const float *wr = wpad + (size_t)(ch * k + ky) * 8;

			if (whole) {
				nn_f32x8 vd, vw;

				memcpy(&vd, d, sizeof(vd));
				memcpy(&vw, wr, sizeof(vw));
				vd += g * vw;
				memcpy(d, &vd, sizeof(vd));
			} else {
				nn_axpy(d, g, wr, k);
			}
		}
}

/*
 * The position j (row oy, column ox; ow columns) within its channel that a
 * pool window selected, from that position and the window's first row
 * top (a row at or above it): no division, as the window spans few rows.
 */
static inline __attribute__((always_inline)) int pooled_position(int j, int top, int ow,
								 int *oy_p, int *ox_p)
{
	int oy = top;

	j -= oy * ow;
	while (j >= ow) {
		j -= ow;
		oy++;
	}
	*oy_p = oy;
	*ox_p = j;
	return j + oy * ow;
}

/*
 * The pooled backward of one sample.  The pool's outputs in order
 * (channel, row, column): the selected position's channel and row come
 * from the loops and the window, without division.  With wpad (the
 * weights padded, see scatter_window()) the input gradient is added to
 * dx at once; otherwise through dcol and col2im.  Compiled once per
 * target, wide for AVX (see axpy8()).
 */
static inline __attribute__((always_inline)) void
pooled_sample(const struct nn_layer *l, const struct nn_layer *pool, float *dx, float *dw,
	      float *db, const float *dp, const int32_t *ix, const float *r, const float *w,
	      const float *wpad, const float *col, float *dcol, const bool wide)
{
	const int kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w, ow = l->out_w;
	const int s = pool->stride, ph = pool->out_h, pw = pool->out_w;
	const size_t wrows = (size_t)l->in_c * l->k * 8;

	if (dx && !wpad)
		memset(dcol, 0, (size_t)pos * kk * sizeof(float));
	for (int o = 0; o < l->out_c; o++)
		for (int py = 0; py < ph; py++)
			for (int px = 0; px < pw; px++, dp++, ix++) {
				const float g = *dp;
				int oy, ox, j;

				if (g == 0.0f || (r && !(r[*ix] > 0.0f)))
					continue;
				j = pooled_position(*ix - o * pos, py * s, ow, &oy, &ox);
				db[o] += g;
				axpy8(dw + (size_t)o * kk, g, col + (size_t)j * kk, kk, wide);
				if (dx && wpad)
					scatter_window(l, dx, g, wpad + o * wrows,
						       (size_t)(oy * l->stride - l->pad) * l->in_w +
							       (size_t)(ox * l->stride - l->pad));
				else if (dx)
					axpy8(dcol + (size_t)j * kk, g, w + (size_t)o * kk, kk, wide);
			}
	if (dx && !wpad)
		col2im(l, dx, dcol);
}

/* Every sample; wpad as pooled_sample(). */
static inline __attribute__((always_inline)) void
pooled_all(const struct nn_layer *l, const struct nn_layer *pool, float *din, float *dw,
	   float *db, const float *dpool, const int32_t *idx, const float *relu_out,
	   const float *w, const float *wpad, const float *cols, float *dcol, int n,
	   const bool wide)
{
	const int kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;

	for (int i = 0; i < n; i++) {
		float *dx = din ? din + (size_t)i * l->in_size : NULL;

		if (dx)
			memset(dx, 0, l->in_size * sizeof(float));
		pooled_sample(l, pool, dx, dw, db, dpool + (size_t)i * pool->out_size,
			      idx + (size_t)i * pool->out_size,
			      relu_out ? relu_out + (size_t)i * l->out_size : NULL, w, wpad,
			      cols + (size_t)i * pos * kk, dcol, wide);
	}
}

static void pooled_portable(const struct nn_layer *l, const struct nn_layer *pool, float *din,
			    float *dw, float *db, const float *dpool, const int32_t *idx,
			    const float *relu_out, const float *w, const float *wpad,
			    const float *cols, float *dcol, int n)
{
	pooled_all(l, pool, din, dw, db, dpool, idx, relu_out, w, wpad, cols, dcol, n, false);
}

PP_TARGET_AVX2 static void
pooled_avx2(const struct nn_layer *l, const struct nn_layer *pool, float *din, float *dw,
	    float *db, const float *dpool, const int32_t *idx, const float *relu_out,
	    const float *w, const float *wpad, const float *cols, float *dcol, int n)
{
	pooled_all(l, pool, din, dw, db, dpool, idx, relu_out, w, wpad, cols, dcol, n, true);
}

/* The weight gradient's taps summed in registers per pass of pooled512_sample(): 10 vectors of 16 */
#define POOLED512_TAPS 160

/* A row of the shifted weights of the register-rows input gradient: 16 zeros, k weights, zeros */
#define ROWS_WIDTH 32

/*
 * The register-rows input gradient (AVX-512, rows512_dx()): two input
 * channels at a time, the rows of their gradient (at most 16 wide) held
 * in registers while the selected positions of each pool row add their
 * windows, and stored once, in place of one read-modify-write of memory per kernel
 * row and window (adjacent windows overlap, and a load that partly
 * overlaps a recent store waits for it).  For stride 1 without padding,
 * kernel 3 or 5, behind a 2 x 2 max-pool of stride 2 without padding.
 */
static bool rows_fit(const struct nn_layer *l, const struct nn_layer *pool)
{
	return l->stride == 1 && l->pad == 0 && (l->k == 3 || l->k == 5) && l->in_w <= 16 &&
	       pool->k == 2 && pool->stride == 2 && pool->pad == 0;
}

/* Stacked rows of shifted weights per (output, input channel): one zero row, the k rows, one zero row */
static int rows_stack(const struct nn_layer *l, const struct nn_layer *pool)
{
	return l->k + 2 * pool->k - 2;
}

/* One selected position of a sample, in the pool row whose list holds it. */
struct rows_entry {
	float g;     /* its gradient */
	int32_t off; /* where its (output channel's, pool row offset's) stack of shifted weight
		      * rows starts, input channel 0, lane 0 at its column: floats into wsh */
};

/* The floats of scratch the register-rows input gradient takes: wsh, the entries, the counts. */
static size_t rows_floats(const struct nn_layer *l, const struct nn_layer *pool)
{
	return (size_t)l->out_c * l->in_c * rows_stack(l, pool) * ROWS_WIDTH +
	       pool->out_size * (sizeof(struct rows_entry) / sizeof(float)) + pool->out_h;
}

size_t pp_nn_conv2d_backward_pooled_scratch(const struct nn_layer *l, const struct nn_layer *pool)
{
	const size_t cols = (size_t)l->out_h * l->out_w * l->in_c * l->k * l->k;

	return rows_fit(l, pool) ? PP_MAX(cols, rows_floats(l, pool)) : cols;
}

/*
 * dx (C, H, W) of one sample = the windows of its selected positions,
 * ent[py cap ..] the count[py] positions of pool row py (cap: out_c pool
 * columns), each the output channel's kernel times g.  wsh
 * (OC, C, rows_stack(), ROWS_WIDTH): kernel row ky of (o, c) at stack row
 * ky + PK - 1, its k weights from lane 16.  Two input channels at a time
 * (two independent chains of FMAs), the K + PK - 1 rows of each that pool
 * row py's windows reach (from row S py) are held in registers; a window
 * at row offset dy within its pool row reads the stack from row PK - 1 -
 * dy (its rows above and below are zeros), and lane ix from 16 - ox.
 * Past each pool row the S rows no later window reaches are stored.  K,
 * PK and S are constants where inlined with them.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
rows512_dx(const struct nn_layer *l, const struct nn_layer *pool, float *dx, const float *wsh,
	   const struct rows_entry *ent, const int32_t *count, const int K, const int PK, const int S)
{
	const int h = l->in_h, w = l->in_w, ph = pool->out_h, cap = l->out_c * pool->out_w;
	const int nw = K + PK - 1; /* rows in registers, per channel */
	const size_t stack = (size_t)(K + 2 * PK - 2) * ROWS_WIDTH;
	const __mmask16 m = nn_lanes16(w);

	for (int c = 0; c < l->in_c; c += 2) {
		const int nc = PP_MIN(l->in_c - c, 2);
		/* the second channel's stack; the first's again when there is none */
		const size_t c2 = nc == 2 ? stack : 0;
		float *d = dx + (size_t)c * h * w;
		const float *wc = wsh + (size_t)c * stack;
		__m512 r[2][8]; /* [channel][0, nw): K <= 5, PK = 2 (rows_fit()) */
		int row = 0;    /* the input row of r[.][0] */

#pragma GCC unroll 8
		for (int t = 0; t < nw; t++)
			r[0][t] = r[1][t] = _mm512_setzero_ps();
		for (int py = 0; py < ph; py++, row += S) {
			const struct rows_entry *e = ent + (size_t)py * cap;

			for (int q = 0; q < count[py]; q++) {
				const __m512 vg = _mm512_set1_ps(e[q].g);
				const float *wp = wc + e[q].off;

#pragma GCC unroll 8
				for (int t = 0; t < nw; t++) {
					r[0][t] = _mm512_fmadd_ps(vg, _mm512_loadu_ps(wp + t * ROWS_WIDTH),
								  r[0][t]);
					r[1][t] = _mm512_fmadd_ps(
						vg, _mm512_loadu_ps(wp + c2 + t * ROWS_WIDTH), r[1][t]);
				}
			}
#pragma GCC unroll 8
			for (int t = 0; t < S; t++)
				for (int k = 0; k < nc && row + t < h; k++)
					_mm512_mask_storeu_ps(d + ((size_t)k * h + row + t) * w, m, r[k][t]);
#pragma GCC unroll 8
			for (int t = 0; t < nw; t++) {
				r[0][t] = t + S < nw ? r[0][t + S] : _mm512_setzero_ps();
				r[1][t] = t + S < nw ? r[1][t + S] : _mm512_setzero_ps();
			}
		}
#pragma GCC unroll 8
		for (int t = 0; t < nw; t++)
			for (int k = 0; k < nc && row + t < h; k++)
				_mm512_mask_storeu_ps(d + ((size_t)k * h + row + t) * w, m, r[k][t]);
	}
}

/*
 * The AVX-512 pooled backward of one sample, channel by channel: the
 * channel's weight gradient (C K K taps) summed in ten 16-wide registers
 * over its selected positions and added to dw once per pass of 160 taps
 * (the taps past C K K masked off), its bias gradient likewise.  The
 * input gradient, in the first pass: with wpad as pooled_sample() (8-wide
 * unmasked updates: a masked store would stall the overlapping loads of
 * the next window, which cannot take its data by store forwarding);
 * otherwise through dcol and col2im.
 */
PP_TARGET_AVX512 static inline __attribute__((always_inline)) void
pooled512_sample(const struct nn_layer *l, const struct nn_layer *pool, float *dx, float *dw,
		 float *db, const float *dp0, const int32_t *ix0, const float *r, const float *w,
		 const float *wpad, const float *wsh, const float *col, float *dcol)
{
	const int kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w, ow = l->out_w;
	const int s = pool->stride, ph = pool->out_h, pw = pool->out_w;
	const size_t wrows = (size_t)l->in_c * l->k * 8;
	const int stack = rows_stack(l, pool), cap = l->out_c * pw;
	struct rows_entry *ent = NULL;
	int32_t *count = NULL;

	if (dx && wsh) {
		ent = (struct rows_entry *)(dcol + (size_t)l->out_c * l->in_c * stack * ROWS_WIDTH);
		count = (int32_t *)(ent + pool->out_size);
		memset(count, 0, (size_t)ph * sizeof(*count));
	} else if (dx && !wpad) {
		memset(dcol, 0, (size_t)pos * kk * sizeof(float));
	}
	for (int o = 0; o < l->out_c; o++) {
		const float *wo = w + (size_t)o * kk;

		for (int t0 = 0; t0 < kk; t0 += POOLED512_TAPS) {
			const int32_t *ix = ix0 + (size_t)o * ph * pw;
			const float *dp = dp0 + (size_t)o * ph * pw;
			const int taps = PP_MIN(kk - t0, POOLED512_TAPS); /* in this pass */
			const __mmask16 tail = nn_lanes16(taps % 16);
			__m512 acc[POOLED512_TAPS / 16];
			float bsum = 0.0f;

#pragma GCC unroll 10
			for (int v = 0; v < POOLED512_TAPS / 16; v++)
				acc[v] = _mm512_setzero_ps();
			for (int py = 0; py < ph; py++)
				for (int px = 0; px < pw; px++, dp++, ix++) {
					const float g = *dp;
					int oy, ox, j;

					if (g == 0.0f || (r && !(r[*ix] > 0.0f)))
						continue;
					j = pooled_position(*ix - o * pos, py * s, ow, &oy, &ox);

					const __m512 vg = _mm512_set1_ps(g);
					const float *cr = col + (size_t)j * kk + t0;

#pragma GCC unroll 10
					for (int v = 0; v < POOLED512_TAPS / 16; v++) {
						if (16 * v >= taps)
							break;
						acc[v] = _mm512_fmadd_ps(
							vg,
							16 * v + 16 <= taps
								? _mm512_loadu_ps(cr + 16 * v)
								: _mm512_maskz_loadu_ps(tail, cr + 16 * v),
							acc[v]);
					}
					if (t0)
						continue;
					bsum += g;
					if (ent) {
						struct rows_entry *e = ent + (size_t)py * cap + count[py]++;

						e->g = g;
						e->off = (int32_t)(((size_t)o * l->in_c * stack +
								    (size_t)(pool->k - 1 - (oy - py * s))) *
									   ROWS_WIDTH +
								   ROWS_WIDTH / 2 - (size_t)ox);
					} else if (dx && wpad) {
						scatter_window(l, dx, g, wpad + o * wrows,
							       (size_t)oy * l->in_w + (size_t)ox);
					} else if (dx) {
						float *dr = dcol + (size_t)j * kk;

						for (int t = 0; t < kk; t += 16) {
							const __mmask16 m = nn_lanes16(kk - t);

							_mm512_mask_storeu_ps(
								dr + t, m,
								_mm512_fmadd_ps(vg, _mm512_maskz_loadu_ps(m, wo + t),
										_mm512_maskz_loadu_ps(m, dr + t)));
						}
					}
				}
			float *dwo = dw + (size_t)o * kk + t0;

#pragma GCC unroll 10
			for (int v = 0; v < POOLED512_TAPS / 16; v++) {
				const __mmask16 m = nn_lanes16(kk - t0 - 16 * v);

				_mm512_mask_storeu_ps(dwo + 16 * v, m,
						      _mm512_add_ps(_mm512_maskz_loadu_ps(m, dwo + 16 * v),
								    acc[v]));
			}
			if (!t0)
				db[o] += bsum;
		}
	}
	if (ent && l->k == 5)
		rows512_dx(l, pool, dx, wsh, ent, count, 5, 2, 2);
	else if (ent)
		rows512_dx(l, pool, dx, wsh, ent, count, 3, 2, 2);
	else if (dx && !wpad)
		col2im(l, dx, dcol);
}

PP_TARGET_AVX512 static void pooled_avx512(const struct nn_layer *l, const struct nn_layer *pool,
				    float *din, float *dw, float *db, const float *dpool,
				    const int32_t *idx, const float *relu_out, const float *w,
				    const float *wpad, const float *wsh, const float *cols, float *dcol,
				    int n)
{
	const int kk = l->in_c * l->k * l->k, pos = l->out_h * l->out_w;

	for (int i = 0; i < n; i++) {
		float *dx = din ? din + (size_t)i * l->in_size : NULL;
		const float *r = relu_out ? relu_out + (size_t)i * l->out_size : NULL;
		const float *dp = dpool + (size_t)i * pool->out_size;
		const int32_t *ix = idx + (size_t)i * pool->out_size;
		const float *col = cols + (size_t)i * pos * kk;

		if (dx)
			memset(dx, 0, l->in_size * sizeof(float));
		pooled512_sample(l, pool, dx, dw, db, dp, ix, r, w, wpad, wsh, col, dcol);
	}
}

/*
 * The window scatter needs stride 1 without padding (every window inside
 * the input), k <= 8, and room in dcol for the padded weights (OC, C, K, 8);
 * AVX-512 adds the windows in registers instead where rows_fit(), from
 * the shifted weights (OC, C, rows_stack(), ROWS_WIDTH) at the start of dcol.
 */
void pp_nn_conv2d_backward_pooled_impl(const struct nn_layer *l, const struct nn_layer *pool,
				 float *din, float *dw, float *db, const float *dpool,
				 const int32_t *idx, const float *relu_out, const float *w,
				 const float *cols, float *dcol, int n, bool scatter, enum pp_isa isa)
{
	const size_t rows = (size_t)l->out_c * l->in_c * l->k;
	float *wpad = NULL, *wsh = NULL;

	if (din && scatter && isa == PP_ISA_AVX512 && rows_fit(l, pool)) {
		const int stack = rows_stack(l, pool);

		wsh = dcol;
		memset(wsh, 0, (size_t)l->out_c * l->in_c * stack * ROWS_WIDTH * sizeof(float));
		for (size_t q = 0; q < rows; q++) /* q: (o, c, ky); its stack (o, c) */
			memcpy(wsh + ((q / l->k) * stack + (q % l->k) + pool->k - 1) * ROWS_WIDTH +
				       ROWS_WIDTH / 2,
			       w + q * l->k, (size_t)l->k * sizeof(float));
	} else if (din && scatter && l->stride == 1 && l->pad == 0 && l->k <= 8 &&
		   rows * 8 <= (size_t)l->out_h * l->out_w * l->in_c * l->k * l->k) {
		wpad = dcol;
		memset(wpad, 0, rows * 8 * sizeof(float));
		for (size_t q = 0; q < rows; q++)
			memcpy(wpad + q * 8, w + q * l->k, (size_t)l->k * sizeof(float));
	}
	if (isa == PP_ISA_AVX512)
		pooled_avx512(l, pool, din, dw, db, dpool, idx, relu_out, w, wpad, wsh, cols, dcol, n);
	else if (isa == PP_ISA_AVX2)
		pooled_avx2(l, pool, din, dw, db, dpool, idx, relu_out, w, wpad, cols, dcol, n);
	else
		pooled_portable(l, pool, din, dw, db, dpool, idx, relu_out, w, wpad, cols, dcol, n);
}

void pp_nn_conv2d_backward_pooled(const struct nn_layer *l, const struct nn_layer *pool, float *din,
			    float *dw, float *db, const float *dpool, const int32_t *idx,
			    const float *relu_out, const float *w, const float *cols, float *dcol,
			    int n)
{
	const enum pp_isa isa = pp_isa_best();

	pp_nn_conv2d_backward_pooled_impl(l, pool, din, dw, db, dpool, idx, relu_out, w, cols, dcol, n,
				    isa != PP_ISA_BASE, isa);
}
