/*
 * pinpipe/summary.h: TensorBoard event files, so that a C trainer's curves
 * show in `tensorboard --logdir DIR` beside PyTorch's SummaryWriter runs.
 *
 * A writer creates one file, DIR/events.out.tfevents.<seconds>.<host>.<pid>.<n>,
 * of TFRecord records (length, masked CRC-32C of the length, an Event
 * protocol buffer, masked CRC-32C of the data); the first record carries
 * the file version "brain.Event:2", every later one a summary: a scalar, an
 * image (PNG) or a histogram, which TensorBoard shows in its Scalars,
 * Images and Histograms (and Distributions) tabs.
 *
 * Thread safety: one writer per thread at a time.
 */
#ifndef PINPIPE_SUMMARY_H
#define PINPIPE_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "pinpipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pp_summary_writer;

/*
 * Creates DIR (and its parents) if needed and a new event file in it.
 * Returns 0 and the writer in *w_p, or -errno with a message naming the path.
 */
PP_API int pp_summary_writer_create(const char *dir, struct pp_summary_writer **w_p);

/*
 * Appends the scalar 'value' under 'tag' (e.g. "loss/train") at 'step', at
 * the current wall-clock time.  Buffered: see pp_summary_writer_flush().
 * Returns 0 or -errno: a failed write's, with the file named (-EFBIG past
 * the process's RLIMIT_FSIZE, which does not kill it, -ENOSPC, -EIO).  A
 * record taken is kept, and goes first at the next write, though the write
 * its call made failed; once 64 KiB wait unwritten, further records are
 * refused (not kept) until a write succeeds.
 */
PP_API int pp_summary_writer_add_scalar(struct pp_summary_writer *w, const char *tag,
					int64_t step, double value);

/* The largest height or width of an image, in pixels. */
#define PP_SUMMARY_IMAGE_MAX 16384

/*
 * Appends an image under 'tag' at 'step', encoded as PNG: 'pixels' holds
 * height x width x channels bytes, row by row, each pixel's channels
 * together (1: gray, 3: RGB, 4: RGBA).  Returns 0, -EINVAL (a bad tag, size
 * or channel count, named), -ENOMEM, or a failed write's -errno (as
 * pp_summary_writer_add_scalar()).
 */
PP_API int pp_summary_writer_add_image(struct pp_summary_writer *w, const char *tag, int64_t step,
				       const uint8_t *pixels, uint32_t height, uint32_t width,
				       uint32_t channels);

/* Buckets of a histogram whose values are not all equal. */
#define PP_SUMMARY_BUCKETS 30

/*
 * Appends a histogram of the n 'values' under 'tag' at 'step': their min,
 * max, count, sum and sum of squares, and PP_SUMMARY_BUCKETS buckets of
 * equal width from min to max (one when all are equal), each named by its
 * right edge and holding the values above the edge before it.  Values that
 * are not finite are left out.  Returns 0, -EINVAL (a bad tag, or no finite
 * value), -ENOMEM, or a failed write's -errno.
 */
PP_API int pp_summary_writer_add_histogram(struct pp_summary_writer *w, const char *tag,
					   int64_t step, const float *values, size_t n);

/*
 * Writes what is buffered to the file (records go by themselves once 64 KiB
 * wait).  Returns 0 or -errno, with the file named; what did not go is
 * kept for the next try, so that the file never holds part of a record
 * followed by another.
 */
PP_API int pp_summary_writer_flush(struct pp_summary_writer *w);

/* Returns the path of the writer's event file. */
PP_API const char *pp_summary_writer_path(const struct pp_summary_writer *w);

/*
 * Flushes, closes the file and frees the writer.  NULL is allowed.  Records
 * a failed flush could not write are lost; flush first to know.
 */
PP_API void pp_summary_writer_destroy(struct pp_summary_writer *w);

#ifdef __cplusplus
}
#endif
#endif
