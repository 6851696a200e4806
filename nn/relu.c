/*
 * nn/relu.c: ReLU on the CPU, element-wise (the compiler vectorises it).
 */
#include "config.h"

#include "nn/nn_internal.h"

void relu_forward(float *out, const float *in, size_t count)
{
	for (size_t i = 0; i < count; i++)
		out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(float *din, const float *dout, const float *out, size_t count)
{
	for (size_t i = 0; i < count; i++)
		din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}
