/*
 * loader/convert.c: the conversion of a field's samples into the output
 * dtype: uint8 copied, or converted to float32 by the library's one
 * normalisation (loader/convert.h's kernel for this processor), float32
 * scaled and shifted; each channel with its own mean and std.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "common/common_impl.h"
#include "loader/convert.h"
#include "loader/loader_impl.h"

static void convert_f32_f32(const float *src, float *dst, size_t n, float scale, float bias)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = src[i] * scale + bias;
}

void pp_convert_sample(const struct pp_convert *cv, const void *src, void *dst)
{
	if (cv->in == cv->out && cv->in == PP_DTYPE_U8) {
		memcpy(dst, src, cv->in_bytes);
		return;
	}
	for (uint32_t c = 0; c < cv->channels; c++) {
		size_t o = c * cv->plane;
		if (cv->in == PP_DTYPE_U8)
			cv->u8_f32((const uint8_t *)src + o, (float *)dst + o, cv->plane,
				       cv->scale[c], cv->bias[c]);
		else
			convert_f32_f32((const float *)src + o, (float *)dst + o, cv->plane,
					cv->scale[c], cv->bias[c]);
	}
}

int pp_convert_setup(struct pp_convert *cv, const struct pp_sample_info *info,
		     const struct pp_loader_config *cfg)
{
	size_t elems = info->sample_bytes / pp_dtype_size(info->dtype);

	memset(cv, 0, sizeof(*cv));
	cv->in = info->dtype;
	cv->out = cfg->dtype ? cfg->dtype : info->dtype;
	if (cfg->dtype != 0 && cfg->dtype != PP_DTYPE_U8 && cfg->dtype != PP_DTYPE_F32)
		return pp_error(-EINVAL, "loader: output dtype %d, expected u8 or f32", (int)cfg->dtype);
	if (cv->in == PP_DTYPE_F32 && cv->out == PP_DTYPE_U8)
		return pp_error(-EINVAL, "loader: uint8 output asked for float32 samples");
	cv->in_bytes = info->sample_bytes;
	cv->out_bytes = elems * pp_dtype_size(cv->out);
	cv->channels = 1;
	if (info->ndim == 3 && info->shape[0] <= PP_LOADER_MAX_CHANNELS)
		cv->channels = info->shape[0];
	cv->plane = elems / cv->channels;
	cv->u8_f32 = pp_convert_u8_f32_best();
	for (uint32_t c = 0; c < cv->channels; c++) {
		float sd = cfg->std[c] != 0.0f ? cfg->std[c] : 1.0f;

		/* uint8: the library's one normalisation, in nn's bits (common/normalize.h). */
		if (cv->in == PP_DTYPE_U8) {
			pp_normalize_u8_params(cfg->mean[c], sd, &cv->scale[c], &cv->bias[c]);
		} else {
			cv->scale[c] = 1.0f / sd;
			cv->bias[c] = -cfg->mean[c] / sd;
		}
	}
	return 0;
}
