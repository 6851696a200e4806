/*
 * device/spin.c: pp_stream_spin(), a synthetic compute step in stream
 * order: the backend's own where it has one (ops->spin: a kernel on cuda,
 * device/cuda/spin.cu), else a host function that sleeps: on the sim's
 * stream thread, or in the caller on cpu (where host functions run at once).
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "common/common_impl.h"
#include "device/device_impl.h"
#include "pinpipe/device.h"

/* Sleeps for (uintptr_t)arg nanoseconds. */
static void spin_host(void *arg)
{
	uint64_t until = pp_now_ns() + (uint64_t)(uintptr_t)arg;
	struct timespec ts = { .tv_sec = (time_t)(until / 1000000000u),
			       .tv_nsec = (long)(until % 1000000000u) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		continue;
}

PP_API int pp_stream_spin(struct pp_stream *stream, uint64_t ns)
{
	if (stream == NULL)
		return pp_error(-EINVAL, "pp_stream_spin: no stream");
	if (ns > UINTPTR_MAX)
		return pp_error(-EINVAL, "pp_stream_spin: %llu ns is too long",
				(unsigned long long)ns);
	/* while the dispatcher records a capture, a spin is the host function it can record */
	if (stream->dev->ops->spin != NULL && !pp_stream_recording(stream))
		return stream->dev->ops->spin(stream, ns);
	return pp_stream_launch_host(stream, spin_host, (void *)(uintptr_t)ns);
}
