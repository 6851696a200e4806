/*
 * device/spin.h: the CUDA side of pp_stream_spin() (device/spin.c),
 * with a stub in builds without CUDA.
 */
#ifndef PP_DEVICE_SPIN_H
#define PP_DEVICE_SPIN_H

#include <errno.h>
#include <stdint.h>

#include "common/common_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef PP_HAVE_CUDA
/* Enqueues a kernel that runs for ns nanoseconds on 'stream' (a cudaStream_t).  Returns 0 or -EIO. */
int pp_cuda_spin(void *stream, uint64_t ns);
#else
static inline int pp_cuda_spin(void *stream, uint64_t ns)
{
	(void)stream;
	(void)ns;
	return pp_error(-ENODEV, "cuda: this build of pinpipe has no CUDA (configured without the toolkit)");
}
#endif

#ifdef __cplusplus
}
#endif
#endif
