/*
 * pinpipe/dataset.h: sample sources and the pinpipe shard format.
 *
 * A dataset knows its sample count, the shape and element type of a sample,
 * the kind of its labels, and how to put samples into a caller's buffer.
 * IDX (MNIST, Fashion-MNIST; raw or gzip), CIFAR-10 binary batches and shard
 * sets are decoded once into memory when opened; a synthetic dataset makes
 * its samples on demand from a seed.  Every reader validates the whole file
 * before it returns, and rejects a bad file with a message (pp_last_error())
 * that names the file, the place and what was expected.
 *
 * Thread safety: a dataset is immutable once opened; pp_dataset_read() and
 * pp_dataset_gather() may be called from any number of threads at once.
 */
#ifndef PINPIPE_DATASET_H
#define PINPIPE_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/common.h"
#include "pinpipe/source.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PP_MAX_DIMS 4

enum pp_label_kind {
	PP_LABEL_NONE = 0,  /* no labels */
	PP_LABEL_CLASS = 1, /* one int32 class index per sample, 0..num_classes-1 */
};

/* What one sample looks like, and how many there are. */
struct pp_sample_info {
	uint64_t count;              /* number of samples */
	enum pp_dtype dtype;         /* element type */
	uint32_t ndim;               /* dimensions used in shape[], 1..PP_MAX_DIMS */
	uint32_t shape[PP_MAX_DIMS]; /* e.g. {1, 28, 28}: channels, height, width */
	size_t sample_bytes;         /* product of shape[] times the dtype's size */
	enum pp_label_kind label_kind;
	uint32_t num_classes;        /* labels lie in 0..num_classes-1; 0 without labels */
};

struct pp_dataset;

/*
 * Opens an IDX pair as published for MNIST and Fashion-MNIST: an idx3 file of
 * uint8 images and an idx1 file of uint8 labels, each raw or gzip-compressed
 * (detected from the content, not the name).  'labels_path' may be NULL for
 * images alone.  Samples have shape {1, rows, cols}.  Returns 0 and the
 * dataset in *ds_p, or -errno: -ENOENT (missing file), -EBADMSG (bad magic,
 * sizes that do not match, corrupt or truncated gzip, label out of range),
 * -EINVAL (image and label counts differ), -ENOMEM.
 */
PP_API int pp_dataset_open_idx(const char *images_path, const char *labels_path,
			       struct pp_dataset **ds_p);

/*
 * Opens CIFAR-10 binary batches (data_batch_N.bin, test_batch.bin): records
 * of 1 label byte and 3072 image bytes (3 x 32 x 32, channel-major).  The
 * samples of all 'npaths' files, in the order given, form one dataset.
 * Returns 0 or -errno (-EBADMSG for a size that is not a whole number of
 * records or a label above 9).
 */
PP_API int pp_dataset_open_cifar10(const char *const *paths, size_t npaths,
				   struct pp_dataset **ds_p);

/*
 * Opens a set of pinpipe shards (see pp_shard_open()) and decodes all their
 * records into memory, in the order of 'paths'.  Every shard is opened and
 * validated before any chunk is read.  The shards must agree on dtype, shape
 * and labels (else -EINVAL).  Every chunk's CRC-32, size and labels are
 * checked.  Returns 0 or -errno as pp_shard_open() and pp_shard_read_chunk(),
 * or -EPROTONOSUPPORT for a version 2 shard (records for a decoder: read
 * them through a loader).
 */
PP_API int pp_dataset_open_shards(const char *const *paths, size_t npaths,
				  struct pp_dataset **ds_p);

/*
 * Opens the dataset in a directory by what it holds, the first found of:
 * pinpipe shards named *train*.pps / *test*.pps (all of them, sorted by
 * name, as pp_shard_find() lists them; shards named -of-N.pps, as
 * pinpipe-pack writes them, must be one whole set, N of them all of the
 * same N, else -EINVAL), Fashion-MNIST or MNIST IDX files (train-images-idx3-ubyte[.gz] and
 * train-labels-idx1-ubyte[.gz], t10k-... for test), CIFAR-10 binary batches
 * (data_batch_1..5.bin and test_batch.bin, directly or in
 * cifar-10-batches-bin/).  'split' is "train" or "test" (else -EINVAL).
 * Returns -ENOENT with a message naming the directory and the files it
 * looked for when none is there, -ENOTDIR when 'dir' names a file; once
 * files are found, their errors.
 */
PP_API int pp_dataset_open_dir(const char *dir, const char *split, struct pp_dataset **ds_p);

/* Parameters of a synthetic dataset. */
struct pp_synthetic_config {
	uint64_t count;        /* number of samples */
	uint32_t channels;     /* sample shape {channels, height, width} */
	uint32_t height;
	uint32_t width;
	uint32_t num_classes;  /* 2..65536 */
	uint64_t seed;         /* same seed, same samples */
	enum pp_dtype dtype;   /* PP_DTYPE_U8 or PP_DTYPE_F32 */
};

/*
 * Creates a synthetic dataset: sample i is a function of (seed, i) alone,
 * made on demand, so it takes no memory whatever its size.  It is learnable:
 * each class has a prototype image and each sample is its class's prototype
 * plus noise, and the label of sample i is (a hash of seed and i) modulo
 * num_classes.
 */
PP_API int pp_dataset_create_synthetic(const struct pp_synthetic_config *cfg,
				       struct pp_dataset **ds_p);

/*
 * Splits a dataset as PyTorch's random_split does: a permutation of its
 * samples drawn from 'seed' alone; the last 'holdout' samples of it form
 * *holdout_p and the others, in permutation order, *rest_p.  Both are new
 * in-memory datasets (the samples are copied), independent of 'ds'.
 * Returns 0, or -EINVAL when holdout is 0 or not below the sample count,
 * -ENOMEM.  Nothing is written on failure.
 */
PP_API int pp_dataset_random_split(const struct pp_dataset *ds, uint64_t holdout, uint64_t seed,
				   struct pp_dataset **rest_p, struct pp_dataset **holdout_p);

/* Frees the dataset and everything it holds.  NULL is allowed. */
PP_API void pp_dataset_destroy(struct pp_dataset *ds);

/* Returns the dataset's shape and counts; valid while the dataset lives. */
PP_API const struct pp_sample_info *pp_dataset_info(const struct pp_dataset *ds);

/* Returns a short description, e.g. "idx:train-images-idx3-ubyte.gz". */
PP_API const char *pp_dataset_name(const struct pp_dataset *ds);

/*
 * Copies samples first..first+count-1 into 'samples' (count * sample_bytes
 * bytes) and their labels into 'labels' (count int32; may be NULL), -1
 * for each sample of a dataset without labels (PP_LABEL_NONE).
 * Returns 0, or -ERANGE when the range runs past the end.
 */
PP_API int pp_dataset_read(const struct pp_dataset *ds, uint64_t first, uint64_t count,
			   void *samples, int32_t *labels);

/*
 * Copies the samples indices[0..n-1], in that order, into 'samples' and
 * their labels into 'labels' (may be NULL; -1 for each sample of a dataset
 * without labels).  Returns 0, or -ERANGE when an
 * index is out of range (nothing is written then).
 */
PP_API int pp_dataset_gather(const struct pp_dataset *ds, const uint64_t *indices, size_t n,
			     void *samples, int32_t *labels);

/*
 * Returns the dataset's samples as one contiguous in-memory array
 * (count * sample_bytes bytes), or NULL when it has none (synthetic).  For
 * loaders that gather straight from memory.
 */
PP_API const void *pp_dataset_samples(const struct pp_dataset *ds);

/* Returns the labels as one contiguous array of count int32, or NULL. */
PP_API const int32_t *pp_dataset_labels(const struct pp_dataset *ds);

/* ------------------------------------------------------------------ shards
 *
 * The pinpipe shard format (docs/SHARDS.md has the byte layout): a 4 KiB
 * header block, chunks of records each compressed on its own with zlib (or
 * stored raw) and starting at a 4 KiB boundary, a chunk index with the
 * offset, sizes, record count and CRC-32 of every chunk, and a trailer that
 * locates the index, so that a truncated file is detected.  Inside a chunk,
 * the labels (int32 little-endian, one per record; absent without labels)
 * come first, then the samples, one after the other.
 */

struct pp_shard;

/* Where a chunk lies, and what it holds. */
struct pp_shard_chunk_info {
	uint64_t offset;       /* bytes from the start of the file; a multiple of 4096 */
	uint32_t stored_size;  /* bytes on disk (compressed, or raw when stored) */
	uint32_t raw_size;     /* bytes once decoded: records * (label bytes + sample_bytes);
				* version 2: records * (label bytes + 4) + the records' bytes */
	uint32_t records;      /* number of records */
	uint32_t crc32;        /* CRC-32 of the stored bytes */
	uint64_t first_record; /* index in the shard of the chunk's first record */
};

/*
 * Opens a shard of format version 1 or 2 and validates its header, chunk
 * index and trailer (magic, version, sizes, index CRC, offsets inside the
 * file; version 2's layout, decoder name and record bound).  Chunks
 * themselves are checked when read.  Returns 0 and the shard in *shard_p, or -errno:
 * -ENOENT, -EBADMSG (damaged or truncated), -EPROTONOSUPPORT (a version this
 * library does not read).
 */
PP_API int pp_shard_open(const char *path, struct pp_shard **shard_p);

/* Closes the shard and frees it.  NULL is allowed. */
PP_API void pp_shard_close(struct pp_shard *shard);

/*
 * Lists the shard files of a split in a directory, as pp_dataset_open_dir()
 * finds them: the files *SPLIT*.pps in DIR, sorted by name, where a name
 * as pinpipe-pack writes them, PREFIX-S-NNNNN-of-N.pps with S train, test
 * or val, counts for its split S alone (its prefix may name another
 * split); files named -of-N.pps must make exactly one whole set of N.  For
 * a loader that streams them (pp_loader_config.shard_paths).  Writes a
 * NULL-terminated array of paths to *paths_p (free it with
 * pp_shard_paths_free()) and their count to *count_p.  Returns 0, -ENOENT
 * when there is no such file, -EINVAL (naming the files) when they are
 * not one whole set, or -ENOMEM.
 */
PP_API int pp_shard_find(const char *dir, const char *split, char ***paths_p, size_t *count_p);

/* Frees an array of paths from pp_shard_find().  NULL is allowed. */
PP_API void pp_shard_paths_free(char **paths);

/* Returns the shape and record count of the shard. */
PP_API const struct pp_sample_info *pp_shard_info(const struct pp_shard *shard);

/* Returns the number of chunks. */
PP_API uint64_t pp_shard_chunk_count(const struct pp_shard *shard);

/* Returns the shard's format version: 1 (fixed-size samples) or 2 (records of any length). */
PP_API uint32_t pp_shard_version(const struct pp_shard *shard);

/*
 * Returns the layout of the shard's samples: version 1 {"samples" (the
 * array, normalize), "labels" (int32) where it has labels}; version 2 the
 * fields its decoder writes, then "labels" where it has labels.  For
 * version 2, pp_shard_info() gives the record count and the labels, and
 * the first field's dtype and shape.
 */
PP_API const struct pp_layout *pp_shard_layout(const struct pp_shard *shard);

/* Returns the name of the decoder of a version 2 shard's records, or NULL for version 1. */
PP_API const char *pp_shard_decoder(const struct pp_shard *shard);

/* Returns the bound of one record of a version 2 shard (0 for version 1). */
PP_API uint32_t pp_shard_max_record(const struct pp_shard *shard);

/*
 * Reads chunk i of a version 2 shard, checks it as pp_shard_read_chunk()
 * does and its record table (each record within the chunk and at most
 * pp_shard_max_record() bytes), and calls fn once per record, in order,
 * with the record's index in the shard, its bytes and its label (-1
 * without labels); fn returns 0 to go on, or an error that ends the read
 * and is returned.  Returns 0 or -errno (-EINVAL for a version 1 shard,
 * -EBADMSG with the file, chunk and offset named).  Not thread-safe on one
 * shard.
 */
PP_API int pp_shard_read_records(struct pp_shard *shard, uint64_t i,
				 int (*fn)(void *arg, uint64_t record, const void *bytes,
					   size_t len, int32_t label),
				 void *arg);

/* Returns the path the shard was opened from. */
PP_API const char *pp_shard_path(const struct pp_shard *shard);

/* Writes chunk i's index entry into *info_p; -ERANGE if there is no chunk i. */
PP_API int pp_shard_chunk(const struct pp_shard *shard, uint64_t i,
			  struct pp_shard_chunk_info *info_p);

/*
 * Reads chunk i, checks its CRC-32 and decodes its records into 'samples'
 * (records * sample_bytes bytes) and 'labels' (records int32; may be NULL).
 * Returns 0 or -errno (-EBADMSG with the file, chunk and offset named;
 * -EINVAL for a version 2 shard, which has no fixed-size samples: see
 * pp_shard_read_records()).
 * Not thread-safe on one shard: each thread opens its own.
 */
PP_API int pp_shard_read_chunk(struct pp_shard *shard, uint64_t i, void *samples,
			       int32_t *labels);

/*
 * Reads every chunk and checks its CRC-32, its decoded size, its labels,
 * version 2's record table, and that its padding up to the next 4 KiB
 * boundary is zero, so that any byte
 * changed anywhere in the file is found.  Returns 0 when the whole shard is
 * sound, or the first error found (-EBADMSG, with the file, chunk and offset
 * named).  Not thread-safe on one shard.
 */
PP_API int pp_shard_verify(struct pp_shard *shard);

struct pp_shard_writer;

/* How a shard is written. */
struct pp_shard_writer_config {
	const struct pp_sample_info *info; /* shape, dtype, labels; count is ignored */
	uint32_t records_per_chunk;        /* 0: 1024 */
	int level;                         /* 0: stored raw; 1..9: zlib level */
	uint32_t threads;                  /* chunks compressed at once, each on its own
					    * thread (0 or 1: in the calling thread); 1..64;
					    * those threads block the asynchronous signals
					    * (pinpipe/common.h) */
	/* Version 2: records of any length (pp_shard_writer_add_record()). */
	const struct pp_layout *layout;    /* non-NULL: write version 2, whose records the
					    * decoder turns into these fields (a "labels" field
					    * is added by info->label_kind, not listed here);
					    * info's dtype and shape are then ignored */
	const char *decoder;               /* version 2: the decoder's name (pinpipe/source.h),
					    * 1..31 letters, digits, '_', '.', '-'; NULL: "raw" */
	uint32_t max_record_bytes;         /* version 2: the largest record allowed, which a
					    * reader enforces; at most 1 GiB; 0: 64 MiB */
};

/*
 * Starts writing a shard to 'path'.  The data goes to a temporary file
 * beside it (path.tmp-XXXXXX), renamed to 'path' by pp_shard_writer_finish(),
 * so a failed or abandoned write never leaves a half-written shard; a
 * symbolic link at 'path' is followed (the file it names is replaced, and
 * the temporary file is beside that file).  The temporary file is locked
 * (flock) while written; one a killed writer left (no lock, its status 2
 * seconds old or more, this user's) is removed by the next writer of 'path'.
 * Returns 0 and the writer in *w_p, or -EINVAL (bad shape, labels, level,
 * a chunk over 4 GiB, or a path that names a device, a FIFO or a directory,
 * which the rename would replace), -ENOMEM, or the -errno of creating the
 * file.  A writer is
 * used by one thread at a time.
 */
PP_API int pp_shard_writer_create(const char *path, const struct pp_shard_writer_config *cfg,
				  struct pp_shard_writer **w_p);

/*
 * Appends 'count' records: samples (count * sample_bytes) and labels (count
 * int32, or NULL without labels).  Returns 0, -EINVAL for a label outside
 * 0..num_classes-1 (nothing of the call is added then) or missing labels,
 * or -errno of a failed write (the writer is then failed for good: finish()
 * returns the error and destroy() removes the temporary file).
 */
PP_API int pp_shard_writer_add(struct pp_shard_writer *w, const void *samples,
			       const int32_t *labels, uint64_t count);

/*
 * Appends one record of a version 2 shard: 'len' bytes (0..max_record_bytes)
 * and its label (ignored without labels).  Chunks hold records_per_chunk
 * records, or fewer when their bytes would pass 4 MiB.  Returns 0, -EINVAL
 * (a version 1 writer, a record over the bound, a label outside
 * 0..num_classes-1: nothing is added then), or -errno of a failed write as
 * pp_shard_writer_add().
 */
PP_API int pp_shard_writer_add_record(struct pp_shard_writer *w, const void *record, size_t len,
				      int32_t label);

/*
 * Writes the last chunk, the index, the trailer and the header, syncs and
 * renames the file into place.  Returns 0 or -errno (then no file is left
 * at 'path' by this writer).
 */
PP_API int pp_shard_writer_finish(struct pp_shard_writer *w);

/* Frees the writer; removes the temporary file if the shard was not finished.  NULL is allowed. */
PP_API void pp_shard_writer_destroy(struct pp_shard_writer *w);

#ifdef __cplusplus
}
#endif
#endif
