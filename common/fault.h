/*
 * common/fault.h: fault injection for the tests of the error paths.  A
 * fault plan names, for each site (allocations, reads, io_uring set-up,
 * reads and submissions, writes, pinning), what its calls do: pass, fail
 * with an errno, come back short, or stall; from which call on and how many
 * times.  Not exported, not a public knob.
 *
 * A plan reaches the code in one of two ways:
 *   - the thread's plan (pp_fault_set()): the objects created by the calling
 *     thread while it is set take it, at create, and keep it for their life
 *     (their worker threads use it through the object, never through their
 *     own thread's plan).  It is thread-local, not global, so that a plan set
 *     by one test thread never reaches a loader created by another thread;
 *     the allocation sites read it directly, as an allocation in a create
 *     path has no object yet to carry a plan.
 *   - the PP_FAULTS environment variable, read once when a shard writer is
 *     created (pinpipe-pack's tests) and when "auto" opens a device (the
 *     tools' tests of a broken GPU driver) and when a communicator is created
 *     (the tests of a failing rank), in the syntax of pp_fault_parse().
 * With no plan, a site costs one predictable branch on a NULL pointer.
 */
#ifndef PP_COMMON_FAULT_H
#define PP_COMMON_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

enum pp_fault_site {
	PP_FAULT_ALLOC = 0,        /* heap allocations of the create paths: -ENOMEM */
	PP_FAULT_READ = 1,         /* the loader's preads: -errno, short or stall */
	PP_FAULT_URING_SETUP = 2,  /* io_uring_queue_init: -errno (-ENOSYS, -EPERM: pread fallback) */
	PP_FAULT_URING_READ = 3,   /* io_uring reads: -errno in the completion, short or stall */
	PP_FAULT_URING_SUBMIT = 4, /* io_uring_submit: -errno */
	PP_FAULT_WRITE = 5,        /* the shard writer's pwrites: -errno or short */
	PP_FAULT_PIN = 6,          /* pinning host memory: -errno (pageable fallback) */
	PP_FAULT_CUDA_START = 7,   /* "auto" finding a GPU driver whose CUDA fails to start: -errno */
	PP_FAULT_GRAPH = 8,        /* the end of a graph capture: -errno (the capture failed) */
	PP_FAULT_COMM = 9,         /* a communicator's collectives: -errno, or stall until the timeout */
	PP_FAULT_NSITES = 10,
};

/* Modes besides a negative errno. */
#define PP_FAULT_SHORT 1 /* the call moves half its bytes (at least 1) */
#define PP_FAULT_STALL 2 /* the call does not complete until its timeout */

/* What one site does. */
struct pp_fault {
	int mode;               /* -errno, PP_FAULT_SHORT or PP_FAULT_STALL; 0: no fault */
	uint64_t after;         /* calls that pass before the first faulty one */
	uint64_t count;         /* faulty calls from then on; 0: all of them */
	_Atomic uint64_t calls; /* calls seen so far */
	_Atomic uint64_t hits;  /* calls made faulty so far */
};

struct pp_fault_plan {
	struct pp_fault site[PP_FAULT_NSITES];
	int stall_fd[2];        /* a pipe never written to: where stalled io_uring reads wait */
};

/* The calling thread's plan, or NULL; see above. */
extern _Thread_local struct pp_fault_plan *pp_fault_thread;

/* Sets a plan up with no fault.  Returns 0 or -errno (the stall pipe). */
int pp_fault_init(struct pp_fault_plan *p);
void pp_fault_fini(struct pp_fault_plan *p);

/* Makes site fail with 'mode' from call after + 1 on, 'count' times (0: always); resets its counters. */
void pp_fault_arm(struct pp_fault_plan *p, enum pp_fault_site site, int mode, uint64_t after,
		  uint64_t count);

/* Sets (or with NULL clears) the calling thread's plan. */
void pp_fault_set(struct pp_fault_plan *p);

/*
 * Arms p from a specification such as "write:ENOSPC" or
 * "read:EIO:after=3:count=1;uring_setup:ENOSYS": sites alloc, read,
 * uring_setup, uring_read, uring_submit, write, pin, cuda_start, graph, comm; modes an errno name
 * (EIO, EINTR, EAGAIN, ENOSPC, ENOSYS, EPERM, ENOMEM), "short" or "stall".
 * Returns 0, or -EINVAL with a message naming what was not understood.
 */
int pp_fault_parse(struct pp_fault_plan *p, const char *spec);

/* The slow half of pp_fault_check(). */
int pp_fault_hit(struct pp_fault_plan *p, enum pp_fault_site site);

/* What this call of 'site' must do: 0 (nothing), a -errno, PP_FAULT_SHORT or PP_FAULT_STALL. */
static inline int pp_fault_check(struct pp_fault_plan *p, enum pp_fault_site site)
{
	if (__builtin_expect(p == NULL, 1))
		return 0;
	return pp_fault_hit(p, site);
}

/* malloc, calloc, realloc and posix_memalign with the thread's allocation faults. */
static inline void *pp_malloc(size_t n)
{
	return pp_fault_check(pp_fault_thread, PP_FAULT_ALLOC) < 0 ? NULL : malloc(n);
}

static inline void *pp_calloc(size_t n, size_t size)
{
	return pp_fault_check(pp_fault_thread, PP_FAULT_ALLOC) < 0 ? NULL : calloc(n, size);
}

static inline void *pp_realloc(void *ptr, size_t n)
{
	return pp_fault_check(pp_fault_thread, PP_FAULT_ALLOC) < 0 ? NULL : realloc(ptr, n);
}

static inline int pp_posix_memalign(void **ptr_p, size_t align, size_t n)
{
	if (pp_fault_check(pp_fault_thread, PP_FAULT_ALLOC) < 0)
		return ENOMEM;
	return posix_memalign(ptr_p, align, n);
}

#endif
