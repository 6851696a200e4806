/*
 * loader/loader_impl.h: the loader's internals shared by its files: the epoch
 * plan (plan.c), the file reader with its io_uring and pread paths (io.c),
 * the conversion of samples (convert.c), the sources (source.c), the
 * layouts of the built-in kinds (layout.c), and the loader itself: its
 * create and destroy (create.c), the ring of slots and in-order delivery
 * (ring.c), the worker threads (worker.c) and the chunk windows of
 * streaming (window.c), which share struct pp_loader, and what each of
 * them does to it (state.c: the budget, the first error, wake-ups).
 * Not exported.
 */
#ifndef PP_LOADER_IMPL_H
#define PP_LOADER_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fault.h"
#include "pinpipe/loader.h"

/* ------------------------------------------------------------------ plan */

/* One chunk of a shard set, as the plan sees it. */
struct pp_plan_chunk {
	uint32_t shard;        /* index into the shard paths */
	uint64_t index;        /* chunk number in its shard */
	uint32_t records;      /* records in the chunk */
	uint64_t first_id;     /* sample id (in the whole set) of its first record */
	size_t raw_bytes;      /* bytes of the chunk once decoded (its raw layout) */
};

/*
 * A run of consecutive plan positions whose samples all lie in one window
 * of chunks (streaming only).  Padding repeats windows from the start of the
 * order as segments of their own.
 */
struct pp_plan_segment {
	uint64_t first;        /* first position in the order */
	uint64_t end;          /* one past its last position */
	uint32_t chunk0;       /* its chunks are seg_chunks[chunk0 .. chunk0 + nchunks) */
	uint32_t nchunks;
	uint64_t records;      /* records in those chunks */
};

/* What decides the order of an epoch. */
struct pp_plan_params {
	uint64_t seed;
	bool shuffle;
	uint32_t rank;
	uint32_t world_size;
	bool rank_drop;        /* drop instead of pad to an equal count per rank */
	bool drop_last;
	uint32_t batch_size;
	uint32_t window_chunks; /* streaming only */
	bool rank_slices;      /* rank r takes the r-th slice of each global batch (in memory) */
};

/* This rank's plan of one epoch. */
struct pp_plan {
	uint64_t epoch;
	uint64_t len;          /* positions in the epoch (after drop_last) */
	uint64_t real;         /* positions below this are real samples, the rest padding */
	uint64_t batches;      /* ceil or floor(len / batch_size) */
	uint64_t *order;       /* [cap] sample id at each position */
	uint64_t *perm;        /* [n] scratch: the permuted dataset, or chunk order */
	uint64_t cap;          /* positions order[] can hold */
	/* streaming only */
	uint32_t *loc;         /* [cap] record of each position within its segment's window */
	struct pp_plan_segment *segs; /* [seg_cap] */
	size_t nsegs;
	size_t seg_cap;
	uint32_t *seg_chunks;  /* [chunk_cap] indices into the chunk table */
	size_t chunk_cap;
	uint64_t *rank_len;    /* [world_size] scratch: samples of each rank before padding */
};

/* A 64-bit mix of two values (splitmix64's finaliser); keys of the shuffles. */
uint64_t pp_plan_mix(uint64_t a, uint64_t b);

/* Hash of the parameters and the source size: what a saved position must match. */
uint64_t pp_plan_key(const struct pp_plan_params *p, uint64_t count, uint64_t nchunks);

/* Hash of what decides the order of all ranks in memory (seed, shuffle, count); never 0. */
uint64_t pp_plan_order_key(const struct pp_plan_params *p, uint64_t count);

/* Allocates a plan for a source of n samples (in memory) or of the given chunks (streaming). */
int pp_plan_alloc_memory(struct pp_plan *plan, const struct pp_plan_params *p, uint64_t n);
int pp_plan_alloc_stream(struct pp_plan *plan, const struct pp_plan_params *p,
			 const struct pp_plan_chunk *chunks, size_t nchunks);
void pp_plan_free(struct pp_plan *plan);

/* Makes the plan of 'epoch': a pure function of the parameters, the epoch and the source. */
void pp_plan_make_memory(struct pp_plan *plan, const struct pp_plan_params *p, uint64_t n,
			 uint64_t epoch);
int pp_plan_make_stream(struct pp_plan *plan, const struct pp_plan_params *p,
			const struct pp_plan_chunk *chunks, size_t nchunks, uint64_t epoch);

/* Index of the segment holding position 'pos' (streaming). */
size_t pp_plan_segment_of(const struct pp_plan *plan, uint64_t pos);

/* ------------------------------------------------------------------ reader */

/* Alignment of offsets, lengths and buffers of O_DIRECT reads. */
#define PP_LOADER_IO_ALIGN 4096u

/* One read: 'len' bytes at 'offset' of 'fd' into 'buf'; done when at least 'need' arrived. */
struct pp_read {
	int fd;
	int fd_buffered;       /* same file without O_DIRECT, for unaligned rest of a short read */
	uint64_t offset;       /* bytes from the start of the file */
	size_t len;            /* bytes asked for (rounded up to 4096 for O_DIRECT) */
	size_t need;           /* bytes that must arrive; fewer means the file is truncated */
	void *buf;
	const char *path;      /* for messages */
	uint64_t chunk;        /* for messages */
	size_t done;           /* bytes arrived so far */
	bool inflight;         /* io_uring: submitted, its completion not yet seen */
	int inject;            /* io_uring: injected -errno for its completion, or 0 */
};

/* A reader of one thread: an io_uring of its own, or nothing for pread. */
struct pp_reader {
	bool uring;            /* io_uring set up and used */
	unsigned depth;        /* submission queue entries */
	void *ring;            /* struct io_uring, when 'uring' */
	uint8_t *fixed;        /* buffer registered with the ring, or NULL */
	size_t fixed_len;      /* its bytes */
	uint32_t timeout_ms;   /* a read making no progress this long fails with -ETIMEDOUT */
	struct pp_fault_plan *faults; /* injected faults (common/fault.h), or NULL */
};

/*
 * Sets a reader up: with io_uring when 'mode' allows and the kernel accepts
 * it, else for pread.  PP_LOADER_IO_URING where io_uring is refused returns
 * that error (-ENOSYS, -EPERM...) with a message.  The reader takes the
 * calling thread's fault plan (common/fault.h) for its life.
 */
int pp_reader_init(struct pp_reader *r, enum pp_loader_io mode, unsigned depth,
		   uint32_t timeout_ms);
void pp_reader_fini(struct pp_reader *r);

/*
 * Registers buf[0..len) with the reader's io_uring, so that reads into it
 * skip mapping the pages on every read.  Returns 0, or -errno when it cannot
 * (pread path, RLIMIT_MEMLOCK, a kernel that refuses): reads then go to the
 * buffer unregistered, as before; the caller may ignore the error.
 */
int pp_reader_register(struct pp_reader *r, void *buf, size_t len);

/*
 * Reads all of reqs[0..n) (n <= depth), requeueing short reads and retrying
 * EINTR.  Returns 0 or -errno with a message naming file and chunk; a read
 * that makes no progress for timeout_ms gives -ETIMEDOUT.  On io_uring, the
 * reads still in flight when it fails are cancelled and waited for, so the
 * buffers are the caller's again when it returns.  A pread the kernel does
 * not return from (a hung network file system) cannot be interrupted: the
 * pread path checks the limit between reads only, and its worker stays
 * blocked until the kernel returns.
 */
int pp_reader_read(struct pp_reader *r, struct pp_read *reqs, size_t n);

/* ------------------------------------------------------------------ sample conversion */

/* How samples are converted into the output dtype. */
struct pp_convert {
	enum pp_dtype in;      /* source dtype */
	enum pp_dtype out;     /* output dtype */
	size_t in_bytes;       /* bytes of one source sample */
	size_t out_bytes;      /* bytes of one output sample */
	uint32_t channels;     /* planes with their own mean and std */
	size_t plane;          /* elements per channel plane */
	float scale[PP_LOADER_MAX_CHANNELS]; /* out = in * scale + bias, per channel */
	float bias[PP_LOADER_MAX_CHANNELS];
	/* the uint8-to-float kernel picked for this processor (loader/convert.h) */
	void (*u8_f32)(const uint8_t *src, float *dst, size_t n, float scale, float bias);
};

/*
 * convert.c: sets *cv up for samples as 'info' says and the output dtype,
 * mean and std of 'cfg'; returns 0, or -EINVAL for an output dtype other
 * than u8 or f32, or u8 asked of float32 samples.
 */
int pp_convert_setup(struct pp_convert *cv, const struct pp_sample_info *info,
		     const struct pp_loader_config *cfg);

/* convert.c: converts one sample from src into dst. */
void pp_convert_sample(const struct pp_convert *cv, const void *src, void *dst);

/* ------------------------------------------------------------------ sources */

/* Time and bytes a worker spent on chunks, added to the loader's statistics. */
struct pp_loader_work {
	uint64_t read_ns;
	uint64_t decode_ns;
	uint64_t bytes_read;
	uint64_t chunks;
};

/*
 * Where samples come from.  Exactly one of four kinds:
 *   array   'samples' and 'labels' hold the whole source in memory;
 *   gather  'gather' copies samples by id (e.g. a synthetic dataset);
 *   read    'read' (and 'read_batch') of a source of the user's own fill
 *           the fields of samples by id (pinpipe/source.h);
 *   chunks  'chunks' describe records stored in chunks that 'load_chunks'
 *           decodes, each into its raw layout: the labels block (records
 *           int32 little-endian, absent without labels), then the samples
 *           (version 1), or the record table and bytes that 'decoder'
 *           turns into fields (version 2, 'records').
 * 'layout' is what a sample is, in the source's dtypes; the built-in kinds
 * of fixed-size samples have the fields "samples" and "labels" (when
 * info.label_kind says so).  'ctx' is the source's own state; 'destroy'
 * frees it (may be NULL).
 */
struct pp_loader_source {
	struct pp_sample_info info;
	struct pp_layout layout;
	char name[80];                 /* for messages: "source tokens", "shards" */
	/* read: the user's source */
	const struct pp_source_ops *ops;
	/* (optional) writes where sample 'id' lies, e.g. " (train-00001.pps, record 17)" */
	void (*describe)(void *ctx, uint64_t id, char *buf, size_t len);
	bool records;                  /* chunks: version 2 records, for 'decoder' */
	struct pp_decoder decoder;     /* records: the set's decoder */
	/* where the source keeps what its reads go through, "io_uring" or "pread", which a
	 * worker whose io_uring was refused turns to "pread" (read once they are made);
	 * NULL: "none" */
	const char *const *io_path;
	bool direct_io;                /* O_DIRECT in use */
	const bool *fixed_buffers;     /* chunks: true once every worker's read buffer is
	                                  registered with its io_uring; NULL otherwise */
	const void *samples;           /* array: count * sample_bytes */
	const int32_t *labels;         /* array: count int32, or NULL */
	int (*gather)(void *ctx, const uint64_t *ids, size_t n, void *samples, int32_t *labels);
	const struct pp_plan_chunk *chunks; /* chunks: [nchunks] */
	size_t nchunks;
	size_t max_stored;             /* chunks: bytes of the largest stored chunk */
	/* chunks: per-thread state (reader, inflater, staging), made once per worker */
	int (*worker_create)(void *ctx, void **wctx_p);
	void (*worker_destroy)(void *ctx, void *wctx);
	/* chunks: decodes chunks ids[0..n) (n <= io_depth) into dst[0..n); 0 or -errno with a message */
	int (*load_chunks)(void *ctx, void *wctx, const uint32_t *ids, size_t n, void *const *dst,
			   struct pp_loader_work *work);
	void (*destroy)(void *ctx);
	void *ctx;
};

/* source.c: names the system calls a library's own source reads with ("io_uring", "pread"), for the loader's statistics. */
void pp_source_set_io_path(struct pp_source *src, const char *io_path);

/*
 * source.c: the loader's view of the one source the config gives (a
 * dataset, shard paths or a source of the user's own) into *src; returns
 * 0, or -EINVAL (none, or more than one), or the error of opening the
 * shards.
 */
int pp_loader_source_open(const struct pp_loader_config *cfg, struct pp_loader_source *src);

/* ------------------------------------------------------------------ fields */

/* layout.c: a layout of the built-in kinds: "samples" as 'info' says, then "labels" where it has labels. */
void pp_layout_from_info(const struct pp_sample_info *info, struct pp_layout *layout);

/* layout.c: bytes of a slot's array of field f for 'batch' samples: 64-byte aligned, as the slot lays them out. */
size_t pp_layout_field_span(const struct pp_layout *layout, uint32_t f, uint32_t batch);

/* ------------------------------------------------------------------ the loader */

enum pp_loader_slot_state {
	PP_SLOT_FREE = 0,    /* may be filled by the batch it expects */
	PP_SLOT_FILLING = 1, /* a worker (or the consumer, with 0 workers) fills it */
	PP_SLOT_READY = 2,   /* filled, waiting for the consumer */
	PP_SLOT_HELD = 3,    /* handed out, not yet released */
};

struct pp_loader_slot {
	enum pp_loader_slot_state state;
	uint64_t expect;       /* the batch number allowed to fill it next */
	uint64_t published;    /* 1 + the batch last made READY in it; written under mu with
	                          release order, read by a spinning consumer without mu */
	pthread_cond_t freed;  /* the workers waiting to fill it: it was released, or the
	                          epoch ends (one per slot, so that a release wakes only
	                          those waiting for its slot) */
	struct pp_batch batch; /* points into the ring */
	/*
	 * A fill that idle workers join at the epoch's end (pp_loader_batch_fill()
	 * sample by sample, without streaming): the next sample to fill, taken by
	 * whichever worker gets it (atomic), the batch's samples and whether
	 * helpers may join (mu), the helpers at work (mu), the first helper's
	 * failure and its message (mu), and the filler waiting for its helpers.
	 */
	uint32_t next_sample;
	uint32_t nsamples;
	bool shared;
	uint32_t helpers;
	int help_ret;
	char help_msg[1024];   /* as long as pp_last_error()'s and errmsg: a helper's
	                          message whole, as the filler's own would be */
	pthread_cond_t helped;
};

/* A buffer of decoded chunks: one window of the streaming plan. */
struct pp_loader_window {
	int64_t seg;           /* plan segment held, -1 when none */
	uint32_t next_chunk;   /* chunks of the segment claimed for decoding */
	uint32_t chunks_done;  /* chunks decoded */
	uint32_t users;        /* fills reading it now */
	uint64_t pending;      /* batches of this epoch that still need it */
	uint8_t *raw;          /* [window_raw] decoded chunks, each in raw layout */
	const uint8_t **sample; /* [window_records] where each record's sample lies */
	uint32_t *len;         /* [window_records] bytes of each record (version 2 records) */
	int32_t *labels;       /* [window_records] */
	size_t *chunk_off;     /* [window_chunks] offset of each chunk in raw */
};

struct pp_loader_worker {
	struct pp_loader *l;
	pthread_t thread;
	bool started;
	void *wctx;             /* the source's per-thread state */
	void *staging;          /* gather sources: batch_size source samples; per-sample
	                           fills: one sample of each field, for those converted */
	void **sfields;         /* [nfields] per-sample fills: where the source writes the
	                           sample in 'staging' (converted fields) */
	void *batch_staging;    /* read_batch sources with transforms or conversion: a batch
	                           of each field in the source's layout */
	void **dst;             /* [io_depth] chunk destinations of one load */
	bool opened;            /* the source's worker_create succeeded: worker_destroy is owed */
	struct pp_loader_work work; /* counters, added under the mutex */
	uint64_t fill_ns;
	uint64_t slot_wait_ns;
};

struct pp_loader {
	struct pp_loader_source src;
	struct pp_plan_params params;
	struct pp_convert cv;    /* of field 0, for the built-in fixed-size kinds */
	struct pp_convert fcv[PP_MAX_FIELDS]; /* of each field */
	bool converts[PP_MAX_FIELDS]; /* field f is converted (normalised or widened to f32) */
	struct pp_layout out;    /* the layout handed out */
	int labels_field;        /* its labels field (pp_layout_labels()), or negative */
	bool per_sample;         /* fills go sample by sample: transforms, a user's source, records */
	const struct pp_transform *transforms;
	size_t ntransforms;
	uint64_t seed;           /* key of the samples' generators */
	uint32_t batch_size;
	uint32_t depth;          /* ring slots */
	uint32_t nworkers;       /* threads; 0: the consumer fills */
	uint32_t io_depth;       /* chunks per load */
	uint32_t claimers;       /* threads that decode chunks: max(nworkers, 1) */
	bool streaming;
	uint64_t plan_key;
	uint64_t order_key;      /* pp_plan_order_key(), or 0 when streaming */

	struct pp_device *device; /* the ring's allocator, or NULL for posix_memalign */
	uint8_t *ring;           /* depth * slot_bytes, 4096-aligned */
	size_t slot_bytes;
	struct pp_loader_slot *slots;      /* [depth] */
	struct pp_loader_worker *workers;  /* [max(nworkers, 1)]: [0] is the consumer's with 0 workers */

	struct pp_loader_window *windows;  /* [nwindows], streaming */
	uint32_t nwindows;
	size_t window_raw;       /* bytes of each window's raw buffer */
	uint64_t window_records; /* records a window can hold */
	int64_t seg_start;       /* first segment of the epoch's remaining batches */
	uint64_t epoch_start;    /* first batch filled in this epoch (a resumed position) */

	void *cache;             /* PP_LOADER_CACHE_MEMORY of chunks: the decoded samples
	                            (version 2: the decoded chunks, one after the other) */
	int32_t *cache_labels;
	struct pp_loader_window records; /* PP_LOADER_CACHE_MEMORY of version 2 records: its
	                            tables (sample, len, labels) indexed by sample id */
	size_t memory_bytes;

	uint64_t spin_ns;        /* pp_loader_next() polls this long before sleeping; 0: never */
	int failed;              /* err is set: written under mu with release order, read by a
	                            polling consumer without mu */
	pthread_mutex_t mu;
	pthread_cond_t cond_work;   /* workers: a batch can be claimed, or stop */
	pthread_cond_t cond_ready;  /* consumer: a batch is ready, or an error */
	pthread_cond_t cond_idle;   /* begin_epoch: a worker finished its batch */
	pthread_cond_t cond_window; /* workers: a window changed */

	/* guarded by mu */
	struct pp_plan plan;
	bool active;             /* an epoch was begun */
	bool cancel;             /* the epoch is being ended: workers drop their batch */
	bool stop;               /* destroy: workers exit */
	uint64_t next_claim;     /* next batch a worker takes */
	uint64_t next_deliver;   /* next batch the consumer gets */
	uint32_t busy;           /* workers between claim and publication */
	int err;                 /* first worker error, or 0 */
	char errmsg[1024];
	struct pp_loader_stats stats;
};

/* state.c: adds 'bytes' to the loader's memory and checks the budget: 0, or -ENOMEM with a message naming 'what'. */
int pp_loader_budget_add(struct pp_loader *l, const struct pp_loader_config *cfg, size_t bytes,
			 const char *what);

/* ring.c: allocates the ring of l->depth slots and points each slot's batch into it; 0 or -errno. */
int pp_loader_ring_setup(struct pp_loader *l, const struct pp_loader_config *cfg);
/* The ring's bytes (l->slot_bytes set too), as pp_loader_ring_setup() takes them: 0, or -ENOMEM said. */
int pp_loader_ring_bytes(struct pp_loader *l, size_t *bytes_p);

/* state.c: wakes every worker waiting for a slot (the epoch ends, the loader stops or failed).  Caller holds mu. */
void pp_loader_wake_slots(struct pp_loader *l);

/* worker.c: allocates the state of each worker (one for the consumer with 0 workers); 0 or -errno. */
int pp_loader_workers_setup(struct pp_loader *l, const struct pp_loader_config *cfg);

/* worker.c: starts the l->nworkers threads; 0 or -errno with a message. */
int pp_loader_workers_start(struct pp_loader *l);

/* worker.c: stops and joins the workers.  Safe to call with some never started. */
void pp_loader_workers_stop(struct pp_loader *l);

/*
 * worker.c: fills batch b into slot sl (a worker, or the consumer with 0
 * workers).  Returns 0, -ECANCELED when the epoch ended, or an error with
 * its message.
 */
int pp_loader_batch_fill(struct pp_loader *l, struct pp_loader_worker *wk, uint64_t b,
			 struct pp_loader_slot *sl);

/* state.c: adds a worker's counters to the loader's and clears them.  Caller holds mu. */
void pp_loader_work_collect(struct pp_loader *l, struct pp_loader_worker *wk);

/* state.c: records the first error of a worker and wakes every waiter.  Caller holds mu. */
void pp_loader_error_record(struct pp_loader *l, int err);

/* state.c: whether a fill should give up: the epoch ends, the loader stops, or a worker failed. Caller holds mu. */
bool pp_loader_must_quit(const struct pp_loader *l);

/*
 * window.c: allocates the chunk windows of streaming within the budget, where
 * a ring of 'ring_bytes' (pp_loader_ring_bytes()) is still to come; 0 or -errno.
 */
int pp_loader_windows_setup(struct pp_loader *l, const struct pp_loader_config *cfg,
			    size_t ring_bytes);

/*
 * window.c: makes segment s available in its window, decoding its chunks
 * with the other workers that need it, and counts this fill as a user.
 * Returns the window, or NULL when the fill must quit (error recorded or
 * epoch ended).  With 'ahead', it only decodes what it can without waiting
 * and returns NULL: read-ahead by a worker that would otherwise wait for a
 * slot.
 */
struct pp_loader_window *pp_loader_window_acquire(struct pp_loader *l, struct pp_loader_worker *wk,
						  size_t s, bool ahead);

/*
 * window.c: points record tables at the records of chunk ch decoded at
 * 'base', from entry 'rec' on: samples (version 1) or records and their
 * lengths (version 2; 'len' unused otherwise), and labels.
 */
void pp_loader_index_chunk(const struct pp_loader *l, const struct pp_plan_chunk *ch,
			   const uint8_t *base, uint64_t rec, const uint8_t **sample, uint32_t *len,
			   int32_t *labels);

/* window.c: ends a fill's use of the window pp_loader_window_acquire() returned. */
void pp_loader_window_release(struct pp_loader *l, struct pp_loader_window *w);

/*
 * Creates a loader over 'src' (the config's dataset and shard fields are
 * ignored); a source with no layout gets that of its info
 * (pp_layout_from_info()).  Takes 'src' over: its destroy is called, on
 * failure too.
 */
int pp_loader_create_source(const struct pp_loader_config *cfg, struct pp_loader_source *src,
			    struct pp_loader **l_p);

#endif
