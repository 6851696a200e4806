/*
 * nn/nn_math.h: the per-element arithmetic that both backends compute,
 * written once: compiled by nvcc for the CUDA kernels (nn/cuda/optim.cu,
 * nn/cuda/fused.cu) and by the C compiler for the CPU backend
 * (nn/cpu/optim.c, nn/cpu/loss.c) and for the tests, which run it on the
 * CPU (tests/test_nn_gpu_math.c).  Each function is what one element (one
 * parameter, one sample) goes through; the callers only add the loops,
 * the threads or the vector lanes.
 *
 * The optimizers follow torch.optim.SGD and torch.optim.Adam of PyTorch
 * 1.13 (single-tensor, non-foreach paths):
 *
 * SGD:  g = grad + wd p;  with momentum: b = g at the first step, else
 *       b = momentum b + (1 - dampening) g;  g = nesterov ? g + momentum b : b;
 *       p -= lr g
 * Adam: g = grad + wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *       p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *
 * The order of the operations is part of the definition: a vector version
 * (nn/cpu/optim.c) does them in the same order, so that it differs from
 * this one only where it contracts a multiply and an add into an FMA.
 */
#ifndef PP_NN_MATH_H
#define PP_NN_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define PP_HD __host__ __device__
#else
#define PP_HD
#endif

/* ------------------------------------------------------------------ optimizers */

/* SGD's update of one parameter p, its momentum buffer b, from its gradient (first: step 1). */
PP_HD static inline void pp_sgd_update(float *p, float *b, float grad, float lr, float wd, float mom,
				       float damp, bool nesterov, bool first)
{
	float g = grad;

	if (wd != 0.0f)
		g += wd * *p;
	if (mom != 0.0f) {
		*b = first ? g : mom * *b + damp * g;
		g = nesterov ? g + mom * *b : *b;
	}
	*p -= lr * g;
}

/* Adam's factors of step t: lr over the first bias correction, the square root of the second. */
struct pp_adam_factors {
	float step;     /* lr / (1 - b1^t) */
	float bc2_sqrt; /* sqrt(1 - b2^t) */
};

/* Made in double, as PyTorch makes them in Python floats. */
PP_HD static inline struct pp_adam_factors pp_adam_factors_of(float lr, float b1, float b2,
							      unsigned long long t)
{
	const double bc1 = 1.0 - pow((double)b1, (double)t);
	struct pp_adam_factors f;

	f.step = (float)((double)lr / bc1);
	f.bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, (double)t));
	return f;
}

/* Adam's update of one parameter p, its moments m and v, from its gradient. */
PP_HD static inline void pp_adam_update(float *p, float *m, float *v, float grad, float b1, float b2,
					float eps, float wd, struct pp_adam_factors f)
{
	float g = grad;

	if (wd != 0.0f)
		g += wd * *p;
	*m = b1 * *m + (1.0f - b1) * g;
	*v = b2 * *v + (1.0f - b2) * g * g;
	*p -= f.step * (*m / (sqrtf(*v) / f.bc2_sqrt + eps));
}

/* ------------------------------------------------------------------ softmax cross-entropy */

/*
 * Softmax cross-entropy of sample i of n (c logits each; PyTorch's
 * CrossEntropyLoss, with mean reduction when scale = 1 / batch): writes
 * (softmax - onehot) * scale to its row of dlogits unless that is NULL,
 * and returns its loss, log(sum exp(z - max)) - (z_label - max) in double
 * (the largest logit subtracted before exponentiating); *right = 1 when
 * its first largest logit is its label.  A label outside 0..c-1 sets
 * *bad = 1: the sample's loss is 0, it is not counted right, its gradient
 * is zero.
 */
PP_HD static inline double pp_xent_sample(const float *logits, const int32_t *labels, int c,
					  float scale, float *dlogits, size_t i, unsigned *right,
					  int *bad)
{
	const float *z = logits + i * (size_t)c;
	float *d = dlogits ? dlogits + i * (size_t)c : NULL;
	const int y = labels[i];
	int arg = 0;
	float m = z[0];
	double sum = 0.0;

	*right = 0;
	*bad = 0;
	if (y < 0 || y >= c) {
		*bad = 1;
		for (int j = 0; d && j < c; j++)
			d[j] = 0.0f;
		return 0.0;
	}
	for (int j = 1; j < c; j++)
		if (z[j] > m) {
			m = z[j];
			arg = j;
		}
	for (int j = 0; j < c; j++)
		sum += exp((double)z[j] - m);
	*right = arg == y;
	if (d) {
		for (int j = 0; j < c; j++)
			d[j] = (float)(exp((double)z[j] - m) / sum) * scale;
		d[y] -= scale;
	}
	return log(sum) - ((double)z[y] - m);
}

#endif
