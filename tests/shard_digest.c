/*
 * tests/shard_digest.c: prints one line for the records of the shards it is
 * given, in order, of either format version: their count and a CRC-32 over
 * each record's label (int32 LE, -1 without labels) and bytes, so that
 * tests/test_pack.sh can tell that a version 2 set holds the samples of a
 * version 1 set of the same input.  Public API only.  Exit 0, or 1 with the
 * reader's message.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "pinpipe/pinpipe.h"

struct digest {
	uint64_t records;
	uLong crc;
};

static void add(struct digest *d, const void *bytes, size_t len, int32_t label)
{
	unsigned char l[4] = {(unsigned char)label, (unsigned char)(label >> 8),
			      (unsigned char)(label >> 16), (unsigned char)(label >> 24)};

	d->crc = crc32(d->crc, l, 4);
	d->crc = crc32(d->crc, bytes, (uInt)len);
	d->records++;
}

static int add_record(void *arg, uint64_t record, const void *bytes, size_t len, int32_t label)
{
	add(arg, bytes, len, label);
	return 0;
}

/* Adds version 1's chunk i, sample by sample. */
static int add_chunk(struct digest *d, struct pp_shard *sh, uint64_t i)
{
	const struct pp_sample_info *info = pp_shard_info(sh);
	struct pp_shard_chunk_info ci;
	unsigned char *s;
	int32_t *l;
	int ret = pp_shard_chunk(sh, i, &ci);

	if (ret < 0)
		return ret;
	s = malloc(ci.records * info->sample_bytes + 1);
	l = malloc(ci.records * sizeof(int32_t) + 1);
	ret = s == NULL || l == NULL ? -1 : pp_shard_read_chunk(sh, i, s, l);
	for (uint32_t r = 0; ret == 0 && r < ci.records; r++)
		add(d, s + r * info->sample_bytes, info->sample_bytes,
		    info->label_kind == PP_LABEL_NONE ? -1 : l[r]);
	free(s);
	free(l);
	return ret;
}

int main(int argc, char **argv)
{
	struct digest d = {0, crc32(0, NULL, 0)};

	for (int k = 1; k < argc; k++) {
		struct pp_shard *sh;
		int ret = pp_shard_open(argv[k], &sh);

		for (uint64_t i = 0; ret == 0 && i < pp_shard_chunk_count(sh); i++)
			ret = pp_shard_version(sh) == 1 ? add_chunk(&d, sh, i)
							: pp_shard_read_records(sh, i, add_record, &d);
		if (ret != 0) {
			fprintf(stderr, "shard_digest: %s\n", pp_last_error());
			return 1;
		}
		pp_shard_close(sh);
	}
	printf("%llu records, CRC-32 0x%08lx\n", (unsigned long long)d.records, d.crc);
	return 0;
}
