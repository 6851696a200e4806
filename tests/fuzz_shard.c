/*
 * tests/fuzz_shard.c: a libFuzzer target for the shard reader of both
 * format versions, version 2's records of any length above all: the input,
 * but for its first byte, is the file.  Bit 0 of the first byte makes every
 * CRC-32 it holds right first (the header's where its version puts it, the
 * chunks', the index's, the trailer's), so that the checks behind the CRCs
 * are reached: the layout, the decoder's name, the record bound, the index
 * entries' record counts and raw sizes, and each decoded chunk's END table.
 * An accepted shard is read through every path: pp_shard_verify(),
 * pp_shard_read_records() (version 2) or pp_shard_read_chunk() (version 1),
 * and the loader's own (pp_shard_decode_chunk() on its stored bytes, then
 * pp_shard_record() on each record), whose promises are asserted: every
 * record within its decoded chunk and its bound, the records in order, a
 * version 2 shard refused by pp_dataset_open_shards().
 * Any crash, leak, sanitizer report, abort or hang is a bug; rejection is not.
 * Built by `make fuzz` (tests/fuzz.inc); replayed over tests/corpus/fuzz_shard
 * by `make check` through tests/fuzz_replay.c.
 */
#include "config.h"

#include <fcntl.h>
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

/* Chunks read per input at most, so that one input stays quick. */
#define MAX_CHUNKS 64u

struct walk {
	uint64_t next;       /* the record expected next */
	uint32_t max_record;
	uint32_t sum;        /* of every byte, so that each is read */
};

static int visit(void *arg, uint64_t record, const void *bytes, size_t len, int32_t label)
{
	struct walk *w = arg;
	const uint8_t *b = bytes;

	if (record != w->next++ || len > w->max_record || label < -1)
		abort();
	for (size_t k = 0; k < len; k++)
		w->sum += b[k];
	return 0;
}

/* The loader's path: its own read of chunk i, the decode, each record located. */
static void decode_as_loader(struct pp_shard *sh, uint64_t i, struct pp_inflater *inf)
{
	struct pp_shard_chunk_info ci;
	uint8_t *stored, *raw;
	int fd;

	if (pp_shard_chunk(sh, i, &ci) != 0)
		abort();
	stored = malloc(ci.stored_size + 1);
	raw = malloc(ci.raw_size + 1);
	fd = open(pp_shard_path(sh), O_RDONLY);
	if (stored == NULL || raw == NULL || fd < 0)
		abort();
	if (pread(fd, stored, ci.stored_size, (off_t)ci.offset) == (ssize_t)ci.stored_size &&
	    pp_shard_decode_chunk(sh, i, stored, raw, inf) == 0 &&
	    pp_shard_version(sh) == PP_SHARD_VERSION_RECORDS) {
		size_t lb = pp_shard_label_bytes(sh, ci.records), total = 0;
		const uint8_t *area = raw + lb + 4 * (size_t)ci.records;

		for (uint32_t r = 0; r < ci.records; r++) {
			size_t len;
			const uint8_t *b = pp_shard_record(raw, ci.records, lb, r, &len);

			if (b != area + total || len > pp_shard_max_record(sh) ||
			    (size_t)(b - raw) + len > ci.raw_size)
				abort();
			total += len;
		}
		if (lb + 4 * (size_t)ci.records + total != ci.raw_size)
			abort();
	}
	close(fd);
	free(stored);
	free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	static char path[256];
	const char *paths[1] = {path};
	struct pp_dataset *ds = NULL;
	struct pp_shard *sh = NULL;
	struct pp_inflater *inf;
	uint8_t *f;
	FILE *out;

	if (len < 1)
		return 0;
	if (path[0] == '\0')
		snprintf(path, sizeof(path), "/tmp/pp-fuzz-%d-shard", (int)getpid());
	f = malloc(len);
	if (f == NULL)
		abort();
	memcpy(f, data + 1, len - 1);
	if (data[0] & 1)
		pp_fuzz_fix_crcs(f, len - 1);
	out = fopen(path, "wb");
	if (out == NULL || (len > 1 && fwrite(f, 1, len - 1, out) != len - 1))
		abort();
	fclose(out);
	free(f);
	if (pp_shard_open(path, &sh) != 0)
		return 0;
	if (pp_inflater_create(&inf) != 0)
		abort();
	{
		const struct pp_layout *lay = pp_shard_layout(sh);
		uint64_t n = pp_shard_chunk_count(sh);
		struct walk w = {0, pp_shard_max_record(sh), 0};
		bool v2 = pp_shard_version(sh) == PP_SHARD_VERSION_RECORDS;

		if (lay->nfields < 1 || lay->nfields > PP_MAX_FIELDS || (v2 != (pp_shard_decoder(sh) != NULL)))
			abort();
		pp_shard_verify(sh);
		for (uint64_t i = 0; i < n && i < MAX_CHUNKS; i++) {
			struct pp_shard_chunk_info ci;

			if (pp_shard_chunk(sh, i, &ci) != 0)
				abort();
			w.next = ci.first_record;
			if (v2) {
				if (pp_shard_read_records(sh, i, visit, &w) == 0 &&
				    w.next != ci.first_record + ci.records)
					abort();
			} else {
				const struct pp_sample_info *info = pp_shard_info(sh);
				void *s = malloc((size_t)ci.records * info->sample_bytes + 1);
				int32_t *l = malloc((size_t)ci.records * sizeof(int32_t) + 1);

				if (s == NULL || l == NULL)
					abort();
				pp_shard_read_chunk(sh, i, s, l);
				free(s);
				free(l);
			}
			decode_as_loader(sh, i, inf);
		}
		if (pp_dataset_open_shards(paths, 1, &ds) == 0) {
			if (v2)
				abort();
			pp_dataset_destroy(ds);
		}
	}
	pp_inflater_destroy(inf);
	pp_shard_close(sh);
	return 0;
}
