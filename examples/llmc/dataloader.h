/*
 * examples/llmc/dataloader.h: llm.c's training DataLoader (llmc/dataloader.h)
 * on pinpipe: swap this header for llm.c's and link dataloader.o and
 * pinpipe (pkg-config pinpipe), and train_gpt2.c / train_gpt2.cu run
 * unchanged.  What changes underneath: batches are read ahead on worker
 * threads (through io_uring) into a ring of buffers, pinned when a device
 * is given, and can be handed out already copied to the device.
 *
 * With should_shuffle = 0 the batches are exactly llm.c's, in llm.c's
 * order: a global batch is num_processes x B x T + 1 contiguous tokens of a
 * shard, rank r takes the r-th B x T + 1 of it; a shard gives
 * floor((tokens - 1) / (num_processes x B x T)) global batches, then the
 * next shard begins, and the first follows the last.  current_shard_idx and
 * current_sample_idx mean what they mean in llm.c (the shard, and the
 * global batch within it after the one last handed out), so a checkpoint
 * of llm.c resumes here and one of here resumes in llm.c.
 *
 * With should_shuffle = 1 it uses pinpipe's plan, not llm.c's: each epoch
 * (a pass over every window of T + 1 tokens of every shard) is a
 * permutation of all windows from one seed shared by the ranks (42, not
 * llm.c's 42 + rank), cut into global batches of num_processes x B windows
 * of which rank r takes the r-th B, so the ranks' windows are disjoint and
 * together cover the epoch (the windows past the last whole global batch
 * wait for another epoch's permutation); a row of a batch is one window
 * (llm.c's rows are also windows, but of one contiguous run of a shard).
 * Then the two numbers llm.c saves mean: current_shard_idx, the epoch;
 * current_sample_idx, the windows of the epoch's order taken by all ranks
 * so far.  A resume from them is exact, also at another num_processes or B
 * whose num_processes x B divides current_sample_idx.
 *
 * Errors: dataloader_init() prints a message naming the file and exits, as
 * llm.c does; dataloader_open() returns -errno instead, with the message in
 * pp_last_error(); so do dataloader_next_batch_checked() and
 * dataloader_resume_checked().
 */
#ifndef LLMC_PINPIPE_DATALOADER_H
#define LLMC_PINPIPE_DATALOADER_H

#include <stddef.h>
#include <stdint.h>

#include <pinpipe/pinpipe.h>

#ifdef __cplusplus
extern "C" {
#endif

/* pinpipe's settings beyond llm.c's arguments.  Zero-initialise: zeros are the defaults. */
typedef struct {
	unsigned workers;          /* threads reading ahead; 0: 2 */
	unsigned prefetch;         /* batches read ahead; 0: the loader's default */
	uint64_t seed;             /* the shuffle's seed, shared by all ranks; 0: 42 */
	struct pp_device *device;  /* the trainer's device: the ring of batches is pinned
	                              memory of it (NULL: pageable memory) */
	struct pp_stream *stream;  /* with a device: each batch is copied to the device ahead
	                              of use, and this (compute) stream waits for its copy;
	                              device_inputs/device_targets point to it.  NULL: host */
	int host_widen;            /* with a stream: 1 widens to int on the host (4 bytes a
	                              token over the bus); 0 copies the tokens as stored
	                              (uint16 or uint32) for the model to widen */
	enum pp_loader_io io;      /* the reads' system calls: io_uring, or pread where it is
	                              refused (PP_LOADER_IO_AUTO) */
	unsigned spin_us;          /* how long the trainer's thread polls for a batch that is
	                              not ready before it sleeps (pp_loader_config.spin_us);
	                              0: the loader's default, PP_LOADER_NO_SPIN: never */
} DataLoaderOptions;

typedef struct {
	/* llm.c's fields, with llm.c's meanings */
	int process_rank;
	int num_processes;
	size_t B;
	size_t T;
	size_t num_tokens;         /* tokens in all shards */
	size_t shard_num_samples;  /* global batches of the current shard (unshuffled), or of
	                              the epoch (shuffled) */
	size_t current_shard_idx;  /* see the top of this file */
	size_t current_sample_idx;
	int should_shuffle;
	int *inputs;               /* (B, T) tokens of the batch, on the host; valid until the
	                              next call.  NULL when batches go to a device */
	int *targets;              /* (B, T) inputs shifted by one token */
	/* pinpipe's */
	void *device_inputs;       /* with a stream: (B, T) on the device, int or as stored */
	void *device_targets;
	enum pp_dtype device_dtype; /* of device_inputs/targets */
	uint64_t epoch;            /* epoch of the last batch */
	struct pp_tokens *tokens;
	struct pp_loader *loader;
	struct pp_transfer *transfer;
	struct pp_batch *held;     /* the host batch handed out, released at the next call */
	struct pp_device_batch *dheld;
	struct pp_stream *stream;
} DataLoader;

/* llm.c's: opens the shards of filename_pattern and checks them; on any error prints it and exits. */
void dataloader_init(DataLoader *loader, const char *filename_pattern, size_t B, size_t T,
		     int process_rank, int num_processes, int should_shuffle);

/* As dataloader_init() with options (NULL: defaults); returns 0 or -errno (pp_last_error() says why), never exits. */
int dataloader_open(DataLoader *loader, const char *filename_pattern, size_t B, size_t T,
		    int process_rank, int num_processes, int should_shuffle,
		    const DataLoaderOptions *options);

/* llm.c's: back to the first batch (shard 0, sample 0 of epoch 0). */
void dataloader_reset(DataLoader *loader);

/* llm.c's: the next batch into inputs and targets (or device_inputs and device_targets); exits on error. */
void dataloader_next_batch(DataLoader *loader);

/* dataloader_next_batch() returning 0 or -errno instead of exiting. */
int dataloader_next_batch_checked(DataLoader *loader);

/* llm.c's: continues after the batch at which current_shard_idx and current_sample_idx were saved; exits on error. */
void dataloader_resume(DataLoader *loader, size_t current_shard_idx, size_t current_sample_idx);

/* dataloader_resume() returning 0 or -errno (a position out of range, or not divisible) instead of exiting. */
int dataloader_resume_checked(DataLoader *loader, size_t current_shard_idx,
			      size_t current_sample_idx);

/* llm.c's: stops the workers and frees everything (not the options' device or stream). */
void dataloader_free(DataLoader *loader);

#ifdef __cplusplus
}
#endif
#endif
