/*
 * tests/fuzz_datasets.c: a libFuzzer target for every parser of the datasets
 * module.  The first input byte picks the parser, the rest is the file:
 *   0 shard (pp_shard_open, pp_shard_verify, pp_dataset_open_shards)
 *   1 IDX images, raw or gzip (pp_dataset_open_idx without labels)
 *   2 IDX labels, raw or gzip, against a fixed valid images file of 3 images
 *   3 CIFAR-10 batch (pp_dataset_open_cifar10)
 *   4 shard as in 0, with every CRC-32 it holds made right first, so that
 *     the checks behind the CRCs are reached
 * Any crash, leak, sanitizer report or hang is a bug; rejection is not.
 * Built by `make fuzz` (tests/fuzz.inc); replayed over
 * tests/corpus/fuzz_datasets by `make check` through tests/fuzz_replay.c.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "datasets/shard.h"
#include "datasets/shard_format.h"
#include "pinpipe/dataset.h"
#include "tests/fuzz_util.h"

static const char *scratch_path(const char *what)
{
	static char paths[2][256];
	int k = strcmp(what, "a") == 0 ? 0 : 1;

	if (paths[k][0] == '\0')
		snprintf(paths[k], sizeof(paths[k]), "/tmp/pp-fuzz-%d-%s", (int)getpid(), what);
	return paths[k];
}

static void read_everything(const struct pp_dataset *ds)
{
	const struct pp_sample_info *info = pp_dataset_info(ds);
	uint64_t n = info->count < 4 ? info->count : 4;
	uint8_t *s = malloc(n * info->sample_bytes + 1);
	int32_t labels[4];

	if (s != NULL && pp_dataset_read(ds, info->count - n, n, s, labels) != 0)
		abort();
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	static const uint8_t images[16 + 3 * 4] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
	const char *a = scratch_path("a"), *b = scratch_path("b");
	struct pp_dataset *ds = NULL;
	struct pp_shard *sh = NULL;

	if (len < 1)
		return 0;
	if (data[0] % 5 == 4) {
		uint8_t *f = malloc(len);

		if (f == NULL)
			abort();
		memcpy(f, data + 1, len - 1);
		pp_fuzz_fix_crcs(f, len - 1);
		pp_fuzz_put(a, f, len - 1);
		free(f);
	} else {
		pp_fuzz_put(a, data + 1, len - 1);
	}
	switch (data[0] % 5) {
	case 0:
	case 4:
		if (pp_shard_open(a, &sh) == 0) {
			pp_shard_verify(sh);
			pp_shard_close(sh);
		}
		if (pp_dataset_open_shards(&a, 1, &ds) == 0)
			read_everything(ds);
		break;
	case 1:
		if (pp_dataset_open_idx(a, NULL, &ds) == 0)
			read_everything(ds);
		break;
	case 2:
		pp_fuzz_put(b, images, sizeof(images));
		if (pp_dataset_open_idx(b, a, &ds) == 0)
			read_everything(ds);
		break;
	case 3:
		if (pp_dataset_open_cifar10(&a, 1, &ds) == 0)
			read_everything(ds);
		break;
	}
	pp_dataset_destroy(ds);
	return 0;
}
