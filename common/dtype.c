/*
 * common/dtype.c: the element types of samples and fields
 * (pinpipe/common.h): each one's size and name.
 */
#include "config.h"

#include <stddef.h>

#include "pinpipe/common.h"

PP_API size_t pp_dtype_size(enum pp_dtype dtype)
{
	switch (dtype) {
	case PP_DTYPE_U8:
		return 1;
	case PP_DTYPE_F32:
	case PP_DTYPE_I32:
	case PP_DTYPE_U32:
		return 4;
	case PP_DTYPE_U16:
		return 2;
	case PP_DTYPE_I64:
		return 8;
	}
	return 0;
}

PP_API const char *pp_dtype_name(enum pp_dtype dtype)
{
	switch (dtype) {
	case PP_DTYPE_U8:
		return "u8";
	case PP_DTYPE_F32:
		return "f32";
	case PP_DTYPE_I32:
		return "i32";
	case PP_DTYPE_U16:
		return "u16";
	case PP_DTYPE_U32:
		return "u32";
	case PP_DTYPE_I64:
		return "i64";
	}
	return "?";
}
