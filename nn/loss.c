/*
 * nn/loss.c: softmax cross-entropy (PyTorch's CrossEntropyLoss with mean
 * reduction when scale = 1 / batch) on the CPU.  Numerically stable: the
 * largest logit is subtracted before exponentiating, and the loss is
 * log(sum exp(z - max)) - (z_label - max), in double.
 */
#include "config.h"

#include <errno.h>
#include <math.h>

#include "common/internal.h"
#include "nn/nn_internal.h"

int softmax_xent(const float *logits, const int32_t *labels, int n, int c, float scale,
		 float *dlogits, double *losses, uint64_t *correct)
{
	uint64_t right = 0;

	for (int i = 0; i < n; i++)
		if (labels[i] < 0 || labels[i] >= c)
			return pp_error(-ERANGE, "softmax cross-entropy: label %d of sample %d is outside 0..%d",
					(int)labels[i], i, c - 1);
	for (int i = 0; i < n; i++) {
		const float *z = logits + (size_t)i * c;
		int y = labels[i], arg = 0;
		float m = z[0];
		double sum = 0.0;

		for (int j = 1; j < c; j++)
			if (z[j] > m) {
				m = z[j];
				arg = j;
			}
		for (int j = 0; j < c; j++)
			sum += exp((double)z[j] - m);
		losses[i] = log(sum) - ((double)z[y] - m);
		right += arg == y;
		if (dlogits) {
			float *d = dlogits + (size_t)i * c;

			for (int j = 0; j < c; j++)
				d[j] = (float)(exp((double)z[j] - m) / sum) * scale;
			d[y] -= scale;
		}
	}
	*correct += right;
	return 0;
}
