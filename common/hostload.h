/*
 * common/hostload.h: how loaded the host was while a program measured
 * something: the time this process's threads spent runnable but waiting
 * for a core (the kernel's schedstat run delay).  The sim device's copy
 * engines and kernels are host threads: when they wait for a core, its
 * copies and steps last longer than the device they stand for, and the
 * figures measure the host instead.  Internal, and not in the library:
 * common/hostload.c is compiled into pinpipe-train and pinpipe-bench and
 * their tests, as common/size.c is.
 */
#ifndef PP_COMMON_HOSTLOAD_H
#define PP_COMMON_HOSTLOAD_H

#include <stdbool.h>
#include <stdint.h>

#define PP_HOSTLOAD_MAX_THREADS 512

/*
 * Above this mean number of the process's threads waiting for a core over a
 * measurement, its timings say more about the host than about the device.
 */
#define PP_HOSTLOAD_TOO_LOADED 0.25

/* One reading: the clock and each live thread's run delay. */
struct pp_hostload {
	uint64_t wall_ns;                 /* CLOCK_MONOTONIC */
	bool known;                       /* /proc/self/task/N/schedstat could be read */
	uint32_t nthreads;                /* threads read, at most PP_HOSTLOAD_MAX_THREADS */
	int32_t tid[PP_HOSTLOAD_MAX_THREADS];
	uint64_t delay_ns[PP_HOSTLOAD_MAX_THREADS]; /* [nthreads] time runnable, not running */
};

/* Reads the clock and the run delay of every thread of the process now. */
void pp_hostload_read(struct pp_hostload *r);

/*
 * The mean number of the process's threads that waited for a core from a
 * to b: the run delay over the interval (of the threads alive at b; those
 * started since a count whole) divided by its length.  NAN when the kernel
 * does not say (no schedstat) or the interval is empty.
 */
double pp_hostload_waiting(const struct pp_hostload *a, const struct pp_hostload *b);

#endif
