/*
 * nn/cpu/relu.c: ReLU on the CPU, element-wise, 4 floats at a time: GCC's -O2
 * leaves such loops of unknown length scalar.
 */
#include "config.h"

#include "nn/cpu/cpu_impl.h"

/* 4 lanes of int32, for the comparison masks of nn_f32x4 */
typedef int32_t nn_i32x4 __attribute__((vector_size(16)));

void pp_nn_relu_forward(float *out, const float *in, size_t count)
{
	const nn_f32x4 zero = { 0.0f, 0.0f, 0.0f, 0.0f };
	size_t i = 0;

	for (; i + 4 <= count; i += 4) {
		nn_f32x4 x;
		nn_i32x4 keep;

		memcpy(&x, in + i, sizeof(x));
		keep = x > zero;
		x = (nn_f32x4)((nn_i32x4)x & keep);
		memcpy(out + i, &x, sizeof(x));
	}
	for (; i < count; i++)
		out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void pp_nn_relu_backward(float *din, const float *dout, const float *out, size_t count)
{
	const nn_f32x4 zero = { 0.0f, 0.0f, 0.0f, 0.0f };
	size_t i = 0;

	for (; i + 4 <= count; i += 4) {
		nn_f32x4 y, d;
		nn_i32x4 keep;

		memcpy(&y, out + i, sizeof(y));
		memcpy(&d, dout + i, sizeof(d));
		keep = y > zero;
		d = (nn_f32x4)((nn_i32x4)d & keep);
		memcpy(din + i, &d, sizeof(d));
	}
	for (; i < count; i++)
		din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}
