/*
 * loader/convert.h: the inner loop of float output, uint8 to float32
 * scaled and shifted (x * scale + bias): the library's one normalisation
 * kernel (common/normalize.h), in the best version for this processor,
 * picked once when the loader is created.  Not exported.
 */
#ifndef PP_LOADER_CONVERT_H
#define PP_LOADER_CONVERT_H

#include "common/normalize.h"

/* Converts n elements: dst[i] = src[i] * scale + bias. */
typedef pp_normalize_u8_fn pp_convert_u8_f32_fn;

/* The fastest kernel this processor runs. */
static inline pp_convert_u8_f32_fn *pp_convert_u8_f32_best(void)
{
	return pp_normalize_u8_version(pp_isa_best());
}

#endif
