/*
 * pinpipe/loader.h: the loader: batches of samples, shuffled and sharded
 * across ranks by a plan decided from (seed, epoch, rank, world size) alone,
 * filled by worker threads into a ring of host buffers and handed out in
 * order.  What PyTorch's DataLoader(num_workers, pin_memory) with a
 * DistributedSampler does, in C.
 *
 * Sources: an in-memory dataset (pinpipe/dataset.h), a set of shard files
 * read with io_uring (pread where io_uring is refused) and decoded by the
 * workers, either once into memory or streamed chunk by chunk with a shuffle
 * window, or a source of the trainer's own (pinpipe/source.h).  A sample is
 * a list of named fields (pinpipe/source.h: struct pp_layout); the
 * built-in sources have two, "samples" (the array, normalize) and
 * "labels" (one int32, where the source has labels).  A batch hands out one
 * array per field, all in its ring slot; 'samples' and 'labels' point to the
 * first field and to the int32 scalar field named "labels" or "label".
 * Every sample goes through the decoder of its shard set (version 2), then
 * the configuration's transforms, then the conversion to the output dtype,
 * on the worker that fills its batch; where batches are filled sample by
 * sample and not streamed (a source's read, records, transforms), the
 * epoch's last ones are shared, sample by sample, with the workers that
 * have no batch left to claim.  A sample's bytes are the same whichever
 * worker made them.
 *
 * Use:
 *	pp_loader_create(&cfg, &l);
 *	for (epoch...) {
 *		pp_loader_begin_epoch(l, epoch);
 *		while ((ret = pp_loader_next(l, &b)) == 1) {
 *			... use b->samples, b->labels ...
 *			pp_loader_release(l, b);
 *		}
 *		if (ret < 0) fail with pp_last_error();
 *	}
 *	pp_loader_destroy(l);
 *
 * Thread safety: one consumer thread calls create, begin_epoch, resume,
 * next, try_next and destroy; release, get_position and get_stats may be called from
 * any thread.  The workers are the loader's own, and block the
 * asynchronous signals (pinpipe/common.h).
 */
#ifndef PINPIPE_LOADER_H
#define PINPIPE_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/common.h"
#include "pinpipe/dataset.h"
#include "pinpipe/device.h"
#include "pinpipe/source.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a shard set is held. */
enum pp_loader_cache {
	PP_LOADER_CACHE_MEMORY = 0, /* decode every chunk once, at create, into memory */
	PP_LOADER_CACHE_STREAM = 1, /* read and decode chunks as batches need them */
};

/* Which system calls read the shards. */
enum pp_loader_io {
	PP_LOADER_IO_AUTO = 0,     /* io_uring, or pread where the kernel refuses io_uring or
	                              its rings' memory (RLIMIT_MEMLOCK) */
	PP_LOADER_IO_URING = 1,    /* io_uring only: create fails where it is refused */
	PP_LOADER_IO_PREAD = 2,    /* pread only */
};

/* Normalisation of up to this many channels (shape[0] of a 3-d sample). */
#define PP_LOADER_MAX_CHANNELS 4

/* Default of pp_loader_config.io_timeout_ms: 30 s. */
#define PP_LOADER_IO_TIMEOUT_MS 30000u

/* pp_loader_config.spin_us: the default where it spins, and the value that turns spinning off. */
#define PP_LOADER_SPIN_US 100u
#define PP_LOADER_NO_SPIN UINT32_MAX

/*
 * What to load and how.  Zero-initialise it and set what differs from the
 * defaults: every field's zero value is the default written beside it.
 */
struct pp_loader_config {
	/* The source: exactly one of 'dataset', 'shard_paths' or 'source'. */
	const struct pp_dataset *dataset;  /* in memory; must outlive the loader */
	const char *const *shard_paths;    /* shard files (pp_shard_open()), in this order */
	size_t nshards;                    /* number of shard_paths */

	uint32_t batch_size;    /* samples per batch; 0: 64 */
	bool shuffle;           /* false: dataset order */
	uint64_t seed;          /* shuffling seed */
	bool drop_last;         /* drop this rank's last batch when it is short */
	uint32_t workers;       /* worker threads; 0: the consumer's thread fills batches in next() */
	uint32_t prefetch;      /* ring slots (batches filled ahead); 0: 2 * workers + 2 in
				 * memory, twice that streamed */

	struct pp_device *device; /* where batches go next, or NULL; the ring comes from its
	                             host allocator (pp_host_alloc()), else from the heap */
	bool pin_memory;          /* ring in pinned memory; needs a device (without one the
	                             ring is pageable); stats say whether pinning held */

	uint32_t rank;          /* this process's rank, 0..world_size-1 */
	uint32_t world_size;    /* ranks sharing each epoch; 0: 1 */
	bool rank_drop;         /* false: pad every rank to the same sample count, the
	                           repeats marked as padding.  In memory, as PyTorch's
	                           DistributedSampler: the epoch's order of all samples
	                           is extended by repeating its start up to a multiple of
	                           world_size, and rank r takes positions r, r + W,
	                           r + 2W... of it, so its repeats are samples from the
	                           start of the whole order (other ranks' as a rule).
	                           Streamed: chunks are dealt to the ranks in turn, and
	                           a rank short of the longest repeats its own order from
	                           its start.  true: drop the samples that do not divide
	                           evenly (in memory, the end of the order; streamed,
	                           every rank cut to the shortest), so that no sample is
	                           repeated */

	bool rank_slices;       /* false: rank r takes positions r, r + W, r + 2W... of the
	                           epoch's order (rank_drop above).  true (in memory only):
	                           the order is cut into global batches of world_size x
	                           batch_size positions and rank r takes the r-th slice of
	                           batch_size of each, as llm.c's loader does; every rank
	                           has ceil(n / (W x B)) batches of batch_size, the
	                           positions past the order's end padding that repeats its
	                           start (with rank_drop, floor(n / (W x B)) batches and no
	                           padding) */

	enum pp_dtype dtype;    /* output element type; 0: as stored.  PP_DTYPE_F32 from
	                           uint8 gives (x / 255 - mean) / std, as ToTensor + Normalize */
	float mean[PP_LOADER_MAX_CHANNELS]; /* per channel, in units of the output (0..1 for uint8) */
	float std[PP_LOADER_MAX_CHANNELS];  /* per channel; 0: 1.  Each mean and std finite and
	                                       not subnormal, else pp_loader_create() fails
	                                       with -EINVAL */

	enum pp_loader_cache cache; /* for shards only; in-memory datasets are used where they lie */
	uint32_t window_chunks; /* streaming: chunks whose samples are shuffled together; 0: 8.
	                           Up to max(2, workers + 1) windows are held decoded */
	uint32_t io_depth;      /* chunk reads in flight per worker; 0: 4 */
	bool direct_io;         /* O_DIRECT reads, buffered where the file system refuses
	                           them; off by default, as the page cache serves every
	                           epoch after the first when the shards fit in memory */
	enum pp_loader_io io;   /* I/O path */
	uint32_t io_timeout_ms; /* a chunk read that makes no progress for this long fails
	                           the loader with -ETIMEDOUT naming file and chunk, instead
	                           of hanging; 0: PP_LOADER_IO_TIMEOUT_MS.  Enforced on a
	                           stuck read by io_uring (which cancels it); the pread
	                           path checks it between reads only */
	size_t memory_budget;   /* bytes the loader may allocate (ring, caches, buffers); 0: no limit */
	/* The open loader (pinpipe/source.h); zero for none. */
	const struct pp_source *source;    /* a source of the trainer's own; must outlive the loader */
	const struct pp_decoder *decoders; /* decoders a version 2 shard set may name, looked up
	                                      by name before the built-in ones ("raw") */
	size_t ndecoders;
	const struct pp_transform *transforms; /* run on every sample, in this order, after its
	                                          decoder and before the conversion to 'dtype' */
	size_t ntransforms;

	uint32_t spin_us;       /* how long pp_loader_next() polls for a batch that is not
	                           ready before it sleeps until a worker wakes it (a wake-up
	                           costs the worker a system call, and under a hypervisor an
	                           interrupt between processors, for every batch: up to a
	                           third of a fast source's time).  0: PP_LOADER_SPIN_US
	                           where the workers leave a processor of the process's
	                           affinity (as pp_loader_create() finds it) free, else
	                           none; 1..1000000: that long; PP_LOADER_NO_SPIN: never.
	                           The poll burns the consumer's processor, only while it
	                           waits for data, and ends early when a worker fails.
	                           Without workers, and in pp_loader_try_next(), nothing
	                           polls */
};

/*
 * One batch, as handed out by pp_loader_next().  It lives in a ring slot and
 * stays valid, unchanged, until it is given back with pp_loader_release().
 */
struct pp_batch {
	uint64_t epoch;        /* epoch it belongs to */
	uint64_t index;        /* batch number within the epoch on this rank, from 0 */
	uint32_t size;         /* samples in the batch */
	uint32_t padding;      /* the last 'padding' samples are repeats that pad the rank
	                          to the same count as the others: mask them in evaluation */
	enum pp_dtype dtype;   /* element type of samples */
	size_t sample_bytes;   /* bytes of one sample in 'samples' */
	void *samples;         /* size x sample shape, contiguous, 4096-byte aligned */
	int32_t *labels;       /* size class labels, or NULL for a source without labels */
	uint64_t *ids;         /* size sample indices in the dataset (shards: in the set, in path order) */
	uint32_t slot;         /* ring slot holding it */
	uint32_t nfields;      /* fields of the layout (pp_loader_layout()) */
	void *fields[PP_MAX_FIELDS]; /* [nfields] field f of the 'size' samples, size x field
	                                shape, 64-byte aligned; fields[0] == samples */
};

/*
 * Where the consumer stands, to save with a checkpoint and resume from.
 * 'samples' and 'order_key' let a loader with another rank count or batch
 * size resume it (pp_loader_resume_samples()).
 */
struct pp_loader_position {
	uint64_t epoch;        /* current epoch */
	uint64_t batch;        /* batches handed out in this epoch so far */
	uint64_t plan_key;     /* hash of the settings that decide the order; checked on resume */
	uint64_t samples;      /* positions of the epoch's order that all ranks took, when each
	                          handed out 'batch' batches: batch x batch_size x world_size */
	uint64_t order_key;    /* hash of what decides the epoch's order of all ranks (seed,
	                          shuffle, source size); 0 when that order depends on the rank
	                          count (streamed shards) */
};

/* Counters since the loader was created. */
struct pp_loader_stats {
	uint64_t batches;          /* batches handed out */
	uint64_t samples;          /* samples handed out, padding included */
	uint64_t bytes;            /* bytes of samples handed out */
	uint64_t consumer_wait_ns; /* time pp_loader_next() waited for a batch (or filled it, with 0 workers) */
	uint64_t read_ns;          /* summed over workers: waiting for chunk reads */
	uint64_t decode_ns;        /* summed over workers: CRC and inflate of chunks */
	uint64_t fill_ns;          /* summed over workers: gathering and converting samples into slots */
	uint64_t slot_wait_ns;     /* summed over workers: waiting for a free slot (or a chunk window) */
	uint64_t bytes_read;       /* bytes read from shard files */
	uint64_t chunks_decoded;   /* chunks read and decoded */
	const char *io_path;       /* "io_uring", "pread", or "none" (nothing read from files);
	                              "pread" where any worker's reads go through it */
	bool direct_io;            /* O_DIRECT reads were used */
	bool fixed_buffers;        /* io_uring read into registered buffers (false where
	                              registering was refused, e.g. by RLIMIT_MEMLOCK) */
	bool pinned;               /* the ring is pinned host memory */
	size_t memory_bytes;       /* bytes the loader allocated (ring, caches, buffers) */
	uint32_t slots;            /* ring slots */
	uint64_t consumer_spins;   /* batches pp_loader_next() polled for (spin_us) */
	uint64_t consumer_sleeps;  /* batches it slept for: not ready after the poll, where it polls */
};

struct pp_loader;

/*
 * Creates a loader and starts its workers; no epoch is begun yet.  Shards
 * are opened and validated here, and with PP_LOADER_CACHE_MEMORY decoded.
 * Returns 0 and the loader in *l_p, or -errno with a message:
 * -EINVAL (a setting out of range, both or neither source given, uint8
 * output from float samples, fewer chunks than ranks when streaming), -ENOMEM (the memory budget would be exceeded:
 * the message says how much is needed; or an allocation failed), -ENOSYS or
 * -EPERM (PP_LOADER_IO_URING where io_uring is refused), or the error of
 * opening or decoding a shard (-ENOENT, -EBADMSG...).
 */
PP_API int pp_loader_create(const struct pp_loader_config *cfg, struct pp_loader **l_p);

/*
 * Stops the workers (joining every thread, also mid-epoch and with batches
 * still held) and frees everything.  Batches not yet released become
 * invalid.  NULL is allowed.
 */
PP_API void pp_loader_destroy(struct pp_loader *l);

/*
 * Begins epoch 'epoch' (any number: the order is a function of it), ending
 * the current one wherever it stands.  Batches the consumer still holds stay
 * valid until released.  Returns 0 or -errno (a worker's earlier error).
 */
PP_API int pp_loader_begin_epoch(struct pp_loader *l, uint64_t epoch);

/*
 * Waits for the next batch of the epoch and hands it out in *batch_p.
 * Returns 1 with a batch, 0 at the end of the epoch (*batch_p = NULL), or
 * -errno: -ENOBUFS when every ring slot is held by the consumer (release a
 * batch first), -EINVAL before any epoch was begun, or the first error of a
 * worker (-EIO, -EBADMSG, -ETIMEDOUT for a read that made no progress
 * within io_timeout_ms...) with its message naming the file and chunk; a
 * read that fails through io_uring is not retried through pread.  Once a
 * worker failed, every later call returns that error; the loader can still
 * be destroyed.
 */
PP_API int pp_loader_next(struct pp_loader *l, struct pp_batch **batch_p);

/*
 * pp_loader_next() without waiting: returns -EAGAIN (and no message) when
 * the next batch is not filled yet; otherwise the same as pp_loader_next()
 * (with 0 workers it fills the batch in the caller's thread).  For a
 * consumer that has other work while it waits, such as the transfer stage.
 */
PP_API int pp_loader_try_next(struct pp_loader *l, struct pp_batch **batch_p);

/*
 * Gives a batch's slot back to the ring.  Callable from any thread, at any
 * time after pp_loader_next() handed it out, in any order.  Returns 0, or
 * -EINVAL when the batch is not one that is held (or the loader is NULL).
 */
PP_API int pp_loader_release(struct pp_loader *l, struct pp_batch *batch);

/* Writes where the consumer stands (epoch, batches handed out) to *pos_p. */
PP_API int pp_loader_get_position(struct pp_loader *l, struct pp_loader_position *pos_p);

/*
 * Begins pos->epoch at batch pos->batch: the batches that follow are exactly
 * those a loader with the same settings would have handed out after the
 * first pos->batch.  Returns 0, or -EINVAL when the position was saved with
 * other settings (seed, shuffle, batch size, ranks, drop rules, window,
 * dataset size) or lies past the end of the epoch.
 */
PP_API int pp_loader_resume(struct pp_loader *l, const struct pp_loader_position *pos);

/*
 * Begins pos->epoch at position pos->samples of the epoch's order of all
 * ranks: a resume at another rank count, batch size, rank split or drop
 * rule, of a position saved by a loader of the same order (pos->order_key:
 * the same seed, shuffle and source size) held in memory.  This loader's
 * ranks then take exactly the positions from there on that they would take
 * after a start at the epoch's beginning, so across the change no sample
 * of the order is repeated or skipped (past the order's end, the new
 * settings' padding or drop rules apply).  Returns 0, or -EINVAL when the
 * order differs, the loader streams shards (whose order depends on the
 * rank count), pos->samples is not a multiple of this loader's global
 * batch (world_size x batch_size), or it lies past the end of the epoch.
 */
PP_API int pp_loader_resume_samples(struct pp_loader *l, const struct pp_loader_position *pos);

/*
 * Returns the number of batches of the current epoch on this rank (the same
 * on every rank); 0 before the first epoch is begun.  In memory it is the
 * same for every epoch; streamed, it can differ by a batch or two between
 * epochs, as the ranks' shares of chunks of unequal sizes change.
 */
PP_API uint64_t pp_loader_batches_per_epoch(const struct pp_loader *l);

/*
 * Writes the samples of a full batch (the largest) to *batch_size_p and the
 * bytes of one sample as handed out (after conversion to the output dtype)
 * to *sample_bytes_p, so that a consumer can size its buffers once.  Returns 0.
 */
PP_API int pp_loader_get_layout(const struct pp_loader *l, uint32_t *batch_size_p,
				size_t *sample_bytes_p);

/*
 * Returns the shape of the source's samples (count: the whole source, all
 * ranks).  For a source of several fields: the first field's dtype and
 * shape, and labels when it has an int32 scalar field named "labels" or
 * "label".
 */
PP_API const struct pp_sample_info *pp_loader_info(const struct pp_loader *l);

/*
 * Returns the layout of the batches as handed out: the source's fields,
 * those with 'normalize' in the output dtype (float32 when the loader's
 * dtype is PP_DTYPE_F32).  Valid while the loader lives.
 */
PP_API const struct pp_layout *pp_loader_layout(const struct pp_loader *l);

/* Writes the counters to *stats_p; 0, or -EINVAL for a NULL loader or stats. */
PP_API int pp_loader_get_stats(struct pp_loader *l, struct pp_loader_stats *stats_p);

#ifdef __cplusplus
}
#endif
#endif
