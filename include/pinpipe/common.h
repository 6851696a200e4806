/*
 * pinpipe/common.h: what every part of the public API shares: the export
 * marker, error reporting, element types, the library version and CRC-32C.
 *
 * Error convention (liburing's): a function that can fail returns 0 (or a
 * count) on success and a negative errno value on failure.  The message of
 * the last failure in the calling thread, which names the file, the place
 * and what was expected, is returned by pp_last_error().
 *
 * Signals: every thread the library starts (a loader's workers and
 * decoding threads, the sim device's copy engines, a model's compute
 * threads, a shard writer's compression threads) blocks the asynchronous
 * signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM,
 * SIGCHLD, SIGPIPE and SIGRTMIN..SIGRTMAX among them) for its whole life;
 * it keeps only those the kernel sends to the thread that caused them
 * (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT) and SIGPROF.
 * A signal sent to the process is therefore handled on one of the
 * application's own threads, as if the library started none.  The calling
 * thread's mask is never changed.  The library's threads are named
 * "pinpipe" (as ps -L and /proc/PID/task/TID/comm show them).  Threads that
 * other libraries start on their own (OpenBLAS's when it is loaded or when
 * a BLAS call needs them, the CUDA runtime's) are not pinpipe's, and keep
 * the masks those libraries give them.
 */
#ifndef PINPIPE_COMMON_H
#define PINPIPE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PP_BUILDING_LIBRARY) && defined(__GNUC__)
#define PP_API __attribute__((visibility("default")))
#else
#define PP_API
#endif

#define PP_VERSION_STRING "0.1.0"

/* Element type of samples and tensors.  Values are part of the shard format. */
enum pp_dtype {
	PP_DTYPE_U8 = 1,  /* unsigned 8-bit integer */
	PP_DTYPE_F32 = 2, /* IEEE 754 binary32, little-endian on disk */
	PP_DTYPE_I32 = 3, /* signed 32-bit integer (class labels) */
	PP_DTYPE_U16 = 4, /* unsigned 16-bit integer (GPT-2 tokens) */
	PP_DTYPE_U32 = 5, /* unsigned 32-bit integer (Llama 3 tokens) */
	PP_DTYPE_I64 = 6, /* signed 64-bit integer */
};

/* Returns the library version, e.g. "0.1.0". */
PP_API const char *pp_version(void);

/*
 * Returns a description of the error code 'err' (negative errno values as the
 * library returns them, or positive ones; "Unknown error" for a code of no
 * errno).  Never NULL; thread-safe; the text is static, and lasts.
 */
PP_API const char *pp_strerror(int err);

/*
 * Returns the message of the last call into the library that failed in this
 * thread, e.g. "train.pps: chunk 3 at offset 12288: CRC-32 mismatch
 * (expected 0x1c291ca3, got 0x00000000)".  Valid until the next failing call
 * in the same thread; a successful call does not clear it.  Returns "" when
 * no call has failed in this thread.  Never NULL.
 */
PP_API const char *pp_last_error(void);

/* Returns the size in bytes of one element of 'dtype', or 0 if it is unknown. */
PP_API size_t pp_dtype_size(enum pp_dtype dtype);

/* Returns "u8", "f32", "i32", "u16", "u32" or "i64", or "?" for an unknown dtype. */
PP_API const char *pp_dtype_name(enum pp_dtype dtype);

/*
 * CRC-32C (Castagnoli) of len bytes, continued from crc (0 to start), as
 * TensorBoard's event records use it.
 */
PP_API uint32_t pp_crc32c(uint32_t crc, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
