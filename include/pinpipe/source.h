/*
 * pinpipe/source.h: what a sample is and where it comes from, for data of
 * any kind: the layout of a sample (named fields, each an element type and
 * a shape), sources of the trainer's own (a sample count, a layout and a
 * function that fills the fields of a sample on a worker thread), decoders
 * that turn a record's bytes into fields (version 2 shards), transforms that
 * change a decoded sample on the worker, and the counter-based random
 * generator that decoders, sources and transforms get, keyed by (seed,
 * epoch, sample index) alone, so that an augmentation depends neither on
 * the worker nor on the rank that runs it, and a resume replays it.
 *
 * A batch holds each field's values of its samples as one array
 * (batch size x field shape), the arrays back to back in one ring slot,
 * each 64-byte aligned, so that the transfer stage copies a slot in one
 * copy and the device batch has the same fields at the same places.
 *
 * Adding a source (pinpipe/loader.h, pp_loader_config.source):
 *
 *	static int my_read(void *ctx, void *wctx, const struct pp_sample *s)
 *	{
 *		uint8_t *image = s->fields[0];        // u8[3][32][32]
 *		int32_t *label = s->fields[1];        // i32
 *		... fill them for sample s->index ...
 *		return 0;                             // or pp_set_error(-EIO, "...")
 *	}
 *	static const struct pp_source_ops ops = { .read = my_read };
 *	struct pp_layout lay = { .nfields = 2, .fields = {
 *		{ .name = "image", .dtype = PP_DTYPE_U8, .ndim = 3, .shape = {3, 32, 32},
 *		  .normalize = true },
 *		{ .name = "labels", .dtype = PP_DTYPE_I32 } } };
 *	struct pp_source_desc d = { .name = "mine", .count = n, .layout = &lay,
 *				    .num_classes = 10, .ops = &ops, .ctx = my_state };
 *	pp_source_create(&d, &src);
 *	cfg.source = src;   ... pp_loader_create(&cfg, &l) ...
 */
#ifndef PINPIPE_SOURCE_H
#define PINPIPE_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef PP_MAX_DIMS
#define PP_MAX_DIMS 4
#endif

/* Fields of one layout at most. */
#define PP_MAX_FIELDS 8

/* Bytes of a field's name, its terminating NUL included. */
#define PP_FIELD_NAME_MAX 32

/* One field of a sample: a name, an element type and a shape. */
struct pp_field {
	char name[PP_FIELD_NAME_MAX]; /* unique in its layout: letters, digits, '_', '.', '-' */
	enum pp_dtype dtype;          /* element type, as the source writes it */
	uint32_t ndim;                /* dimensions used in shape[]: 0 (a scalar) .. PP_MAX_DIMS */
	uint32_t shape[PP_MAX_DIMS];  /* e.g. {3, 224, 224}; every used entry >= 1 */
	bool normalize;               /* uint8 or float32 values that the loader's dtype, mean
	                                 and std apply to (pinpipe/loader.h): converted to
	                                 float32 on the host when the loader's dtype is
	                                 PP_DTYPE_F32, else carried as stored and normalised on
	                                 the device by the consumer (u8 over the bus, 4x fewer
	                                 bytes than float32) */
};

/* What one sample is: its fields, in order. */
struct pp_layout {
	uint32_t nfields;                     /* 1..PP_MAX_FIELDS */
	struct pp_field fields[PP_MAX_FIELDS];
};

/* Returns the bytes of one sample's value of the field, or 0 for an unknown dtype or a size over 1 GiB. */
PP_API size_t pp_field_bytes(const struct pp_field *field);

/*
 * Checks a layout: 1..PP_MAX_FIELDS fields, each with a known dtype, a
 * shape of ndim entries >= 1 (at most 1 GiB a sample), a name that is
 * non-empty, NUL-terminated, of letters, digits, '_', '.', '-', and unique,
 * and 'normalize' only on uint8 or float32 fields.  Returns 0 or -EINVAL
 * with a message naming the field.
 */
PP_API int pp_layout_check(const struct pp_layout *layout);

/* Returns the index of the field named 'name', or -ENOENT. */
PP_API int pp_layout_find(const struct pp_layout *layout, const char *name);

/*
 * Returns the index of the layout's class labels: its first int32 scalar
 * field named "labels" or "label" (what a batch's 'labels' points to), or
 * -ENOENT.
 */
PP_API int pp_layout_labels(const struct pp_layout *layout);

/*
 * A counter-based random generator: its sequence is a function of the three
 * keys it was started with, and of nothing else.  SplitMix64 (Steele, Lea
 * and Flood, 2014) over a key mixed from (seed, epoch, index).
 */
struct pp_rng {
	uint64_t state; /* the generator's counter; advanced by every draw */
};

/* Starts the generator of sample 'index' in 'epoch' under 'seed'. */
PP_API void pp_rng_init(struct pp_rng *rng, uint64_t seed, uint64_t epoch, uint64_t index);

/* Returns the next 64 random bits. */
PP_API uint64_t pp_rng_next(struct pp_rng *rng);

/* Returns a float uniform in [0, 1), of 24 random bits. */
PP_API float pp_rng_uniform(struct pp_rng *rng);

/* Returns an integer uniform in [0, n) (0 when n is 0), without modulo bias. */
PP_API uint64_t pp_rng_below(struct pp_rng *rng, uint64_t n);

/*
 * One sample as a source, a decoder or a transform sees it.  fields[f]
 * points to the sample's value of field f (pp_field_bytes() bytes, in the
 * field's dtype as the source writes it: before the loader's conversion to
 * float32), in a buffer of the worker's own: write every byte of it (the
 * buffer is not cleared between samples).
 */
struct pp_sample {
	uint64_t index;                /* the sample's index in the source, 0..count-1 */
	uint64_t epoch;                /* the epoch it is loaded for */
	const struct pp_layout *layout;
	void *const *fields;           /* [layout->nfields] */
	struct pp_rng *rng;            /* keyed by (the loader's seed, epoch, index); shared, in
	                                  order, by the decoder and then each transform */
};

/*
 * Sets the message that pp_last_error() returns in this thread to the
 * formatted text and returns 'err' (a negative errno value), so that a
 * source, decoder or transform fails with "return pp_set_error(-EIO,
 * "%s: short read", path);".  The loader adds the source's name and the
 * sample's index before it.
 */
PP_API int pp_set_error(int err, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 2, 3)))
#endif
	;

/*
 * What a source of the trainer's own does.  Contract: the functions are
 * called from the loader's worker threads (from the thread calling
 * pp_loader_next() with 0 workers), several at once from different workers
 * on different samples (also the samples of one batch, at an epoch's end),
 * each worker with its own 'wctx'; they may block on
 * I/O, but must return (a read that never returns hangs the loader); they
 * must not call the loader or transfer stage that uses them; they return 0,
 * or -errno, optionally with a message set by pp_set_error(), which ends
 * the loader: pp_loader_next() returns the error, with the source's name
 * and the sample's index (for read_batch, the first of its list), and every
 * later call does too.
 */
struct pp_source_ops {
	/*
	 * Fills s->fields with sample s->index.  Required unless read_batch is
	 * given; s->rng is the sample's generator, for a source that samples.
	 */
	int (*read)(void *ctx, void *wctx, const struct pp_sample *s);
	/*
	 * (optional) Fills samples indices[0..n), in that order: sample k's
	 * value of field f goes to fields[f] + k * pp_field_bytes(field f).  For
	 * sources that read faster in bulk; used in place of 'read' when given.
	 */
	int (*read_batch)(void *ctx, void *wctx, const uint64_t *indices, size_t n,
			  void *const *fields);
	/* (optional) Makes a worker's state, once per worker thread, at pp_loader_create(). */
	int (*worker_open)(void *ctx, void **wctx_p);
	/* (optional) Frees a worker's state, at pp_loader_destroy(). */
	void (*worker_close)(void *ctx, void *wctx);
};

/* A source of the trainer's own, as pp_source_create() takes it. */
struct pp_source_desc {
	const char *name;              /* for messages, e.g. "tokens:train"; copied */
	uint64_t count;                /* samples, >= 1 */
	const struct pp_layout *layout; /* copied */
	uint32_t num_classes;          /* values of an int32 scalar field named "labels" or
	                                  "label" lie in 0..num_classes-1 (checked by the
	                                  trainer, not the loader); 0: no such field */
	const struct pp_source_ops *ops; /* must outlive the source */
	void *ctx;                     /* the source's own state; the caller's to free after
	                                  pp_source_destroy() */
};

struct pp_source;

/*
 * Creates a source from its description, for any number of loaders
 * (pp_loader_config.source) that it outlives.  Returns 0 and the source in
 * *src_p, or -EINVAL (a bad layout, no read function, a count of 0, named)
 * or -ENOMEM.
 */
PP_API int pp_source_create(const struct pp_source_desc *desc, struct pp_source **src_p);

/* Frees the source (not its ctx).  NULL is allowed. */
PP_API void pp_source_destroy(struct pp_source *src);

/* Returns the source's layout. */
PP_API const struct pp_layout *pp_source_layout(const struct pp_source *src);

/*
 * A decoder: turns one record's bytes (a record of a version 2 shard) into
 * the sample's fields.  A shard set names its decoder; the loader looks the
 * name up in pp_loader_config.decoders, then among the built-in ones:
 *   "raw"   the record is every field's value back to back, little-endian,
 *           exactly as many bytes as the fields hold (else -EBADMSG).
 * A "labels" field that the set stores beside its records (a set with class
 * labels) is filled by the loader, not the decoder.  Called on worker
 * threads under the contract of struct pp_source_ops; returns 0 or -errno.
 */
struct pp_decoder {
	const char *name;
	int (*decode)(void *ctx, const void *record, size_t len, const struct pp_sample *s);
	void *ctx;
};

/*
 * A transform: changes a decoded sample in place on the worker, after the
 * decoder (or the source) and before the conversion to float32, with the
 * sample's generator (s->rng) for its randomness: the same sample gets the
 * same draws in the same epoch whatever the worker count, rank count or
 * resume, and other draws in another epoch.  Called on worker threads
 * under the contract of struct pp_source_ops; returns 0 or -errno.
 */
struct pp_transform {
	const char *name;              /* for messages */
	int (*apply)(void *ctx, const struct pp_sample *s);
	void *ctx;
};

#ifdef __cplusplus
}
#endif
#endif
