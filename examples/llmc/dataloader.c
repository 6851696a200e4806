/*
 * examples/llmc/dataloader.c: llm.c's DataLoader on pinpipe (dataloader.h
 * says what it promises).  The shards are a token set (pinpipe/tokens.h)
 * of windows of T + 1 tokens, widened to int; the loader's plan puts rank
 * r on the r-th slice of B windows of each global batch of num_processes x
 * B (rank_slices).  Unshuffled, the set's shards are cut to whole global
 * batches (group), so that the plan's batch k is llm.c's batch of the same
 * shard and sample; shuffled, every window is in the permutation and no
 * rank is padded (rank_drop).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataloader.h"

/* Global batch size in windows. */
static uint64_t global_batch(const DataLoader *dl)
{
	return (uint64_t)dl->num_processes * dl->B;
}

/* Unshuffled: the shard holding global batch k of the epoch, and its global batches. */
static size_t shard_of_batch(const DataLoader *dl, uint64_t k, uint64_t *first_p, uint64_t *n_p)
{
	const struct pp_tokens_info *info = pp_tokens_get_info(dl->tokens);
	struct pp_tokens_shard sh = { 0 };
	size_t s;

	for (s = 0; s < info->nshards; s++) {
		pp_tokens_get_shard(dl->tokens, s, &sh);
		if (k < (sh.first_window + sh.windows) / global_batch(dl))
			break;
	}
	if (s == info->nshards)
		s--;
	*first_p = sh.first_window / global_batch(dl);
	*n_p = sh.windows / global_batch(dl);
	return s;
}

/* Sets llm.c's two numbers to where batch k of 'epoch' leaves them (k = -1: before batch 0). */
static void set_position(DataLoader *dl, uint64_t epoch, uint64_t done)
{
	uint64_t first, n;

	dl->epoch = epoch;
	if (dl->should_shuffle) {
		dl->current_shard_idx = epoch;
		dl->current_sample_idx = done * global_batch(dl);
		dl->shard_num_samples = pp_loader_batches_per_epoch(dl->loader);
		return;
	}
	dl->current_shard_idx = shard_of_batch(dl, done ? done - 1 : 0, &first, &n);
	dl->current_sample_idx = done ? done - first : 0;
	dl->shard_num_samples = n;
}

/* Gives the batch handed out back to the loader (or its device slot to the stage). */
static void release_held(DataLoader *dl)
{
	if (dl->held != NULL)
		pp_loader_release(dl->loader, dl->held);
	if (dl->dheld != NULL)
		pp_transfer_release(dl->transfer, dl->dheld, dl->stream);
	dl->held = NULL;
	dl->dheld = NULL;
	dl->inputs = dl->targets = NULL;
	dl->device_inputs = dl->device_targets = NULL;
}

static int begin(DataLoader *dl, uint64_t epoch, const struct pp_loader_position *pos)
{
	int ret;

	release_held(dl);
	if (dl->transfer != NULL)
		ret = pos ? pp_transfer_resume(dl->transfer, pos) : pp_transfer_begin_epoch(dl->transfer, epoch);
	else
		ret = pos ? pp_loader_resume(dl->loader, pos) : pp_loader_begin_epoch(dl->loader, epoch);
	if (ret == 0)
		set_position(dl, epoch, pos ? pos->batch : 0);
	return ret;
}

int dataloader_open(DataLoader *dl, const char *pattern, size_t B, size_t T, int process_rank,
		    int num_processes, int should_shuffle, const DataLoaderOptions *options)
{
	DataLoaderOptions o = options ? *options : (DataLoaderOptions){ 0 };
	struct pp_tokens_config tc = { .seq_len = (uint32_t)T, .io = o.io };
	struct pp_loader_config cfg = { 0 };
	const struct pp_tokens_info *info;
	int ret;

	memset(dl, 0, sizeof(*dl));
	if (B == 0 || T == 0 || B > (1u << 24) || T > (1u << 26) || num_processes < 1 ||
	    process_rank < 0 || process_rank >= num_processes)
		return pp_set_error(-EINVAL, "dataloader: B %zu, T %zu, process %d of %d out of range",
				    B, T, process_rank, num_processes);
	dl->process_rank = process_rank;
	dl->num_processes = num_processes;
	dl->B = B;
	dl->T = T;
	dl->should_shuffle = should_shuffle != 0;
	dl->stream = o.device != NULL ? o.stream : NULL;
	tc.widen = dl->stream == NULL || o.host_widen;
	tc.group = should_shuffle ? 1 : (uint64_t)num_processes * B;
	if ((ret = pp_tokens_open(pattern, &tc, &dl->tokens)) < 0)
		return ret;
	info = pp_tokens_get_info(dl->tokens);
	dl->num_tokens = info->tokens;
	dl->device_dtype = info->dtype;
	/* llm.c asserts that every shard holds a global batch: say which does not */
	for (size_t s = 0; s < info->nshards; s++) {
		struct pp_tokens_shard sh;
		pp_tokens_get_shard(dl->tokens, s, &sh);
		if (!should_shuffle && sh.windows == 0) {
			ret = pp_set_error(-EINVAL, "dataloader: %s: %llu tokens, fewer than the "
					   "num_processes x B x T + 1 = %llu of a global batch",
					   sh.path, (unsigned long long)sh.tokens,
					   (unsigned long long)(global_batch(dl) * T + 1));
			goto err;
		}
	}
	cfg.source = pp_tokens_source(dl->tokens);
	cfg.batch_size = (uint32_t)B;
	cfg.shuffle = dl->should_shuffle;
	cfg.seed = o.seed ? o.seed : 42;
	cfg.workers = o.workers ? o.workers : 2;
	cfg.spin_us = o.spin_us;
	cfg.prefetch = o.prefetch;
	cfg.device = o.device;
	cfg.pin_memory = o.device != NULL;
	cfg.rank = (uint32_t)process_rank;
	cfg.world_size = (uint32_t)num_processes;
	cfg.rank_slices = true;
	cfg.rank_drop = true;
	if ((ret = pp_loader_create(&cfg, &dl->loader)) < 0)
		goto err;
	if (dl->stream != NULL &&
	    (ret = pp_transfer_create(&(struct pp_transfer_config){ .loader = dl->loader,
		    .device = o.device }, &dl->transfer)) < 0)
		goto err;
	if ((ret = begin(dl, 0, NULL)) < 0)
		goto err;
	if (pp_loader_batches_per_epoch(dl->loader) == 0) {
		ret = pp_set_error(-EINVAL, "dataloader: %s: %llu windows of %zu + 1 tokens are "
				   "fewer than a global batch of %d x %zu", pattern,
				   (unsigned long long)info->windows, T, num_processes, B);
		goto err;
	}
	return 0;
err:
	dataloader_free(dl);
	return ret;
}

void dataloader_init(DataLoader *dl, const char *pattern, size_t B, size_t T, int process_rank,
		     int num_processes, int should_shuffle)
{
	if (dataloader_open(dl, pattern, B, T, process_rank, num_processes, should_shuffle,
			    NULL) < 0) {
		printf("Error: %s\n", pp_last_error());
		exit(EXIT_FAILURE);
	}
}

void dataloader_reset(DataLoader *dl)
{
	if (begin(dl, 0, NULL) < 0) {
		printf("Error: %s\n", pp_last_error());
		exit(EXIT_FAILURE);
	}
}

int dataloader_next_batch_checked(DataLoader *dl)
{
	uint64_t epoch, index;
	int ret = 0;

	release_held(dl);
	for (int tries = 0; tries < 2; tries++) {
		if (dl->transfer != NULL)
			ret = pp_transfer_next(dl->transfer, dl->stream, &dl->dheld);
		else
			ret = pp_loader_next(dl->loader, &dl->held);
		if (ret != 0)
			break;
		/* the end of an epoch: llm.c goes back to the first shard */
		if ((ret = begin(dl, dl->epoch + 1, NULL)) < 0)
			return ret;
	}
	if (ret <= 0)
		return ret < 0 ? ret : pp_set_error(-EIO, "dataloader: an epoch without a batch");
	if (dl->transfer != NULL) {
		dl->device_inputs = dl->dheld->fields[0];
		dl->device_targets = dl->dheld->fields[1];
		epoch = dl->dheld->epoch;
		index = dl->dheld->index;
	} else {
		dl->inputs = dl->held->fields[0];
		dl->targets = dl->held->fields[1];
		epoch = dl->held->epoch;
		index = dl->held->index;
	}
	set_position(dl, epoch, index + 1);
	return 0;
}

void dataloader_next_batch(DataLoader *dl)
{
	if (dataloader_next_batch_checked(dl) < 0) {
		printf("Error: %s\n", pp_last_error());
		exit(EXIT_FAILURE);
	}
}

int dataloader_resume_checked(DataLoader *dl, size_t shard, size_t sample)
{
	struct pp_loader_position pos;
	int ret;

	if ((ret = pp_loader_get_position(dl->loader, &pos)) < 0)
		return ret;
	if (dl->should_shuffle) {
		if (sample % global_batch(dl) != 0)
			return pp_set_error(-EINVAL, "dataloader: window %zu of epoch %zu's order is "
					    "not a multiple of num_processes x B = %llu", sample, shard,
					    (unsigned long long)global_batch(dl));
		pos.epoch = shard;
		pos.batch = sample / global_batch(dl);
	} else {
		struct pp_tokens_shard sh;
		if (pp_tokens_get_shard(dl->tokens, shard, &sh) < 0 ||
		    sample > sh.windows / global_batch(dl))
			return pp_set_error(-EINVAL, "dataloader: no shard %zu with a sample %zu (%zu "
					    "shards)", shard, sample,
					    pp_tokens_get_info(dl->tokens)->nshards);
		pos.epoch = dl->epoch;
		pos.batch = sh.first_window / global_batch(dl) + sample;
	}
	if ((ret = begin(dl, pos.epoch, &pos)) < 0)
		return ret;
	dl->current_shard_idx = shard;
	dl->current_sample_idx = sample;
	return 0;
}

void dataloader_resume(DataLoader *dl, size_t shard, size_t sample)
{
	if (dataloader_resume_checked(dl, shard, sample) < 0) {
		printf("Error: %s\n", pp_last_error());
		exit(EXIT_FAILURE);
	}
}

void dataloader_free(DataLoader *dl)
{
	release_held(dl);
	pp_transfer_destroy(dl->transfer);
	pp_loader_destroy(dl->loader);
	pp_tokens_close(dl->tokens);
	dl->transfer = NULL;
	dl->loader = NULL;
	dl->tokens = NULL;
}
