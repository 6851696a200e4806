/*
 * datasets/source.h: the inside of a dataset, shared by the files that open
 * one (idx.c: IDX; cifar10.c: CIFAR-10; the shard set in dataset.c), and
 * whole-file reads.  Not exported.
 */
#ifndef PP_DATASETS_SOURCE_H
#define PP_DATASETS_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "pinpipe/dataset.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pinpipe reads little-endian data in place: a little-endian host is required"
#endif

struct pp_dataset {
	struct pp_sample_info info;
	char name[256];                    /* "idx:train-images-idx3-ubyte.gz" */
	void *mem;                         /* the block 'samples' lies in; freed with the dataset */
	const uint8_t *samples;            /* count * sample_bytes bytes; NULL when synthetic */
	int32_t *labels;                   /* count labels; NULL without labels */
	bool synthetic;                    /* samples are made on demand from 'syn' */
	struct pp_synthetic_config syn;    /* valid when synthetic */
};

/*
 * Allocates a dataset with room for info->count labels when it has labels
 * (samples are the caller's to attach, with 'mem').  The sizes are checked
 * for overflow.  Returns 0 or -ENOMEM / -EOVERFLOW with a message.
 */
int pp_dataset_alloc(const struct pp_sample_info *info, const char *name,
		     struct pp_dataset **ds_p);

/*
 * Reads the whole regular file at 'path' into a buffer of its size plus
 * 'extra' bytes (the caller's headroom), to be freed with free().  Returns 0,
 * or -ENOENT / -EACCES / -EISDIR / -EIO with a message naming the file, or
 * -EBADMSG for an empty file.
 */
int pp_read_whole_file(const char *path, size_t extra, void **buf_p, size_t *len_p);

/*
 * Allocates a large buffer (to be freed with free()) on a 2 MiB boundary and
 * asks for transparent huge pages, so that a buffer written once from start
 * to end (an inflated file) costs a few page faults rather than thousands.
 * Returns NULL when out of memory.
 */
void *pp_alloc_large(size_t len);

/*
 * Opens the regular file at 'path' for reading without waiting on what is
 * not one (a FIFO with no writer would block open() for ever), and fills
 * *st.  Returns the descriptor (blocking, close-on-exec), or -errno with a
 * message naming the file: -EISDIR for a directory, -EINVAL for a FIFO, a
 * socket or a device.
 */
int pp_open_regular(const char *path, struct stat *st);

/* Reads exactly len bytes at offset off (short reads resumed); -EIO or -EBADMSG at end of file, with a message. */
int pp_pread_full(int fd, const char *path, void *buf, size_t len, uint64_t off);

/* The last component of a path, for messages and names. */
const char *pp_path_base(const char *path);

/* Fills *info's sample_bytes from dtype and shape; -EOVERFLOW if it does not fit. */
int pp_sample_info_finish(struct pp_sample_info *info);

#endif
