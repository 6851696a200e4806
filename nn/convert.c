/*
 * nn/convert.c: uint8 samples to normalised float32 on the CPU: ToTensor
 * followed by Normalize, (x / 255 - mean) / std, computed as
 * x * (1 / (255 std)) - mean / std like nn/cuda/convert.cu.
 */
#include "config.h"

#include "nn/nn_internal.h"

void u8_to_f32(float *dst, const uint8_t *src, size_t count, float mean, float std)
{
	const float scale = 1.0f / (255.0f * std), shift = mean / std;

	for (size_t i = 0; i < count; i++)
		dst[i] = (float)src[i] * scale - shift;
}
