/*
 * common/common_impl.h: small utilities shared by every module of the library
 * and not exported: error recording, overflow-checked sizes, little-endian
 * encoding, CRC-32 and a monotonic clock.
 */
#ifndef PP_COMMON_IMPL_H
#define PP_COMMON_IMPL_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "pinpipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PP_MAX(a, b) ((a) > (b) ? (a) : (b))

#if defined(__GNUC__)
#define PP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PP_PRINTF(f, a)
#endif

/*
 * Records a message for pp_last_error() in the calling thread and returns
 * 'err', which must be a negative errno value, so that a failure reads
 * "return pp_error(-EINVAL, "%s: ...", path);".
 */
int pp_error(int err, const char *fmt, ...) PP_PRINTF(2, 3);

/* Copies an already formatted message into pp_last_error() and returns 'err'. */
int pp_error_set(int err, const char *msg);

/*
 * Around a call of the user's (a source's read, a decoder, a transform),
 * which may fail without a message: pp_error_mark() before it, then
 * pp_error_since(mark) gives the message it set, or "" where it set none
 * (never an older failure's, and the thread's message is left as it was).
 */
uint64_t pp_error_mark(void);
const char *pp_error_since(uint64_t mark);

/*
 * The thread's message and its count, kept across a call that succeeds
 * after failures of its own that are no failure of it (a search through
 * the places a file may lie), so that pp_last_error() still gives the
 * caller's last failure: pp_error_save() before, pp_error_restore() once
 * it has succeeded.
 */
struct pp_error_saved {
	char msg[1024];  /* pp_last_error() as it was */
	uint64_t count;  /* pp_error_mark() as it was */
};
void pp_error_save(struct pp_error_saved *s);
void pp_error_restore(const struct pp_error_saved *s);

/*
 * Whether 'name' is 1..max letters, digits, '_', '.' or '-' (a field's name in
 * a layout, a decoder's in a version 2 shard).  common/layout.c.
 */
bool pp_name_ok(const char *name, size_t max);

/*
 * Where a file written beside 'path' and renamed over it must be renamed
 * to: 'path' with its symbolic links followed (to a file not there yet
 * too), so that a link keeps naming the new file.  Refuses a path that
 * names anything but a regular file (a device, a FIFO, a pipe, a
 * directory), which the rename would replace.  Returns 0 with a malloc'd
 * path in *target_p, or -errno with the path named.  common/path.c.
 */
int pp_replace_target(const char *path, char **target_p);

/*
 * Writes "DIR/PATTERN" to out[0..len), DIR's glob characters ('*', '?',
 * '[', '\\') escaped, so that glob(3) takes the directory as it is named.
 * Returns 0, or -ENAMETOOLONG with the directory named.  common/path.c.
 */
int pp_glob_join(char *out, size_t len, const char *dir, const char *pattern);

/* Writes a * b into *out_p; returns false (and writes nothing) on overflow. */
static inline bool pp_mul_size(size_t a, size_t b, size_t *out_p)
{
	size_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return false;
	*out_p = r;
	return true;
}

static inline bool pp_add_size(size_t a, size_t b, size_t *out_p)
{
	size_t r;
	if (__builtin_add_overflow(a, b, &r))
		return false;
	*out_p = r;
	return true;
}

/* n rounded up to a multiple of a (a > 0); the caller knows it does not overflow. */
static inline size_t pp_round_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

static inline uint32_t pp_le32(const void *p)
{
	const uint8_t *b = (const uint8_t *)p;
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t pp_le64(const void *p)
{
	const uint8_t *b = (const uint8_t *)p;
	return (uint64_t)pp_le32(b) | (uint64_t)pp_le32(b + 4) << 32;
}

static inline uint32_t pp_be32(const void *p)
{
	const uint8_t *b = (const uint8_t *)p;
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

static inline void pp_put_le32(void *p, uint32_t v)
{
	uint8_t *b = (uint8_t *)p;
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
	b[2] = (uint8_t)(v >> 16);
	b[3] = (uint8_t)(v >> 24);
}

static inline void pp_put_le64(void *p, uint64_t v)
{
	pp_put_le32(p, (uint32_t)v);
	pp_put_le32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

/* CRC-32 (ISO-HDLC, as zlib's crc32), continued from 'crc' (0 to start); in the codec file built. */
uint32_t pp_crc32(uint32_t crc, const void *buf, size_t len);

/*
 * Starts a library thread running fn(arg), as pthread_create() with default
 * attributes, with every asynchronous signal (SIGINT, SIGTERM, SIGHUP,
 * SIGUSR1, ...) blocked in it, so that the application's signal handlers
 * never run on a thread of the library; the caller's own mask is left as it
 * was.  The thread is named "pinpipe".  Returns 0, or -errno (-EAGAIN: no
 * resources for a thread).
 */
int pp_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg);

/*
 * Blocks in the calling thread the signals that pp_thread_create() blocks,
 * saving its mask in *caller_p, for a call that may start threads of
 * another library (OpenBLAS's); pp_signals_restore() puts the mask back.
 * Returns 0 or -errno.
 */
int pp_signals_block(sigset_t *caller_p);
void pp_signals_restore(const sigset_t *caller);

/*
 * Writes to a file beyond RLIMIT_FSIZE fail with EFBIG instead of killing
 * the process: SIGXFSZ, which the kernel sends to the thread that wrote,
 * kills by default, before the writer can remove its temporary file or say
 * why.  pp_xfsz_hold() blocks it in the calling thread for the writes that
 * follow; pp_xfsz_release() takes back one those writes raised (not one
 * that was pending before) and restores the thread's mask.  The process's
 * disposition of SIGXFSZ is never changed.
 */
struct pp_xfsz {
	sigset_t caller;   /* the thread's mask before the hold */
	bool held;         /* SIGXFSZ was blocked by the hold, not before it */
	bool was_pending;  /* SIGXFSZ was pending before the hold */
};
void pp_xfsz_hold(struct pp_xfsz *h);
void pp_xfsz_release(struct pp_xfsz *h);

/*
 * Writes buf[0..len) whole to fd: at offset 'off' (pwrite), or at the
 * file's position where off is -1 (write).  A short write goes on from
 * where it stopped, EINTR is retried, and SIGXFSZ is held (pp_xfsz_hold())
 * for the calls alone.  'faults' (NULL: none) may fail or shorten a call
 * at PP_FAULT_WRITE.  Returns 0, or -errno with *done_p (where not NULL)
 * the bytes written before the failure; the caller names the file, with
 * pp_write_hint(ret) after the reason.  common/thread.c.
 */
struct pp_fault_plan;
int pp_write_full(int fd, const void *buf, size_t len, int64_t off, struct pp_fault_plan *faults,
		  size_t *done_p);
/*
 * What to add to a failed write's reason: for -EFBIG, RLIMIT_FSIZE named
 * where the process has one, else the file system's largest file; "" for
 * any other error.
 */
const char *pp_write_hint(int err);

/* Monotonic time in nanoseconds. */
static inline uint64_t pp_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#ifdef __cplusplus
}
#endif
#endif
