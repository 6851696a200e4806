/*
 * tests/test_datasets.c: the datasets module: IDX (raw and gzip), CIFAR-10,
 * the synthetic source, the shard writer and reader, and how every reader
 * rejects damaged input (truncated at every offset, every byte flipped).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "common/staged.h"
#include "datasets/codec.h"
#include "datasets/shard.h"
#include "datasets/shard_format.h"
#include "pinpipe/dataset.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------- helpers */

static struct pp_dataset *make_synthetic(uint64_t count, uint32_t c, uint32_t h, uint32_t w,
					 uint64_t seed)
{
	struct pp_synthetic_config cfg = {count, c, h, w, 10, seed, PP_DTYPE_U8};
	struct pp_dataset *ds = NULL;

	ck_assert_int_eq(pp_dataset_create_synthetic(&cfg, &ds), 0);
	return ds;
}

/* Reads every sample and label of ds into malloc'd arrays. */
static void read_all(const struct pp_dataset *ds, uint8_t **samples_p, int32_t **labels_p)
{
	const struct pp_sample_info *info = pp_dataset_info(ds);
	uint8_t *s = malloc(info->count * info->sample_bytes + 1);
	int32_t *l = malloc(info->count * sizeof(int32_t) + 1);

	ck_assert_ptr_nonnull(s);
	ck_assert_ptr_nonnull(l);
	ck_assert_int_eq(pp_dataset_read(ds, 0, info->count, s, l), 0);
	*samples_p = s;
	*labels_p = l;
}

/* Wraps buf in a gzip stream (zlib's deflate with a gzip header). */
static uint8_t *gzip_bytes(const void *buf, size_t len, size_t *out_len_p)
{
	z_stream zs;
	size_t cap = len + len / 100 + 1024;
	uint8_t *out = malloc(cap);

	ck_assert_ptr_nonnull(out);
	memset(&zs, 0, sizeof(zs));
	ck_assert_int_eq(deflateInit2(&zs, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
	zs.next_in = (Bytef *)(uintptr_t)buf;
	zs.avail_in = (uInt)len;
	zs.next_out = out;
	zs.avail_out = (uInt)cap;
	ck_assert_int_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
	*out_len_p = cap - zs.avail_out;
	deflateEnd(&zs);
	return out;
}

/* Builds an idx3 image file and an idx1 label file for ds in memory. */
static void make_idx(const struct pp_dataset *ds, uint8_t **img_p, size_t *img_len_p,
		     uint8_t **lab_p, size_t *lab_len_p)
{
	const struct pp_sample_info *info = pp_dataset_info(ds);
	size_t n = info->count, sb = info->sample_bytes;
	uint8_t *img = malloc(16 + n * sb), *lab = malloc(8 + n);
	int32_t *labels = malloc(n * sizeof(int32_t) + 1);
	static const uint8_t img_magic[4] = {0, 0, 8, 3}, lab_magic[4] = {0, 0, 8, 1};

	ck_assert(img != NULL && lab != NULL && labels != NULL);
	memcpy(img, img_magic, 4);
	memcpy(lab, lab_magic, 4);
	for (int k = 0; k < 4; k++) {
		img[4 + k] = (uint8_t)(n >> (24 - 8 * k));
		img[8 + k] = (uint8_t)(info->shape[1] >> (24 - 8 * k));
		img[12 + k] = (uint8_t)(info->shape[2] >> (24 - 8 * k));
		lab[4 + k] = (uint8_t)(n >> (24 - 8 * k));
	}
	ck_assert_int_eq(pp_dataset_read(ds, 0, n, img + 16, labels), 0);
	for (size_t i = 0; i < n; i++)
		lab[8 + i] = (uint8_t)labels[i];
	free(labels);
	*img_p = img;
	*img_len_p = 16 + n * sb;
	*lab_p = lab;
	*lab_len_p = 8 + n;
}

static char *path_in(const char *dir, const char *name)
{
	char *p;

	ck_assert_int_gt(asprintf(&p, "%s/%s", dir, name), 0);
	return p;
}

/* Writes all of ds's records to a shard at path, compressing on 'threads' threads. */
static void write_shard(const struct pp_dataset *ds, const char *path, uint32_t per_chunk,
			int level, uint32_t threads)
{
	const struct pp_sample_info *info = pp_dataset_info(ds);
	struct pp_shard_writer_config cfg = {
		.info = info, .records_per_chunk = per_chunk, .level = level, .threads = threads};
	struct pp_shard_writer *w = NULL;
	uint8_t *s;
	int32_t *l;

	read_all(ds, &s, &l);
	ck_assert_int_eq(pp_shard_writer_create(path, &cfg, &w), 0);
	/* Added in uneven pieces, so that pieces cross chunk boundaries. */
	for (uint64_t done = 0; done < info->count;) {
		uint64_t n = PP_MIN(info->count - done, 3 + done % 11);

		ck_assert_int_eq(pp_shard_writer_add(w, s + done * info->sample_bytes,
						     info->label_kind != PP_LABEL_NONE ? l + done : NULL,
						     n), 0);
		done += n;
	}
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	pp_shard_writer_destroy(w);
	free(s);
	free(l);
}

static void assert_same_data(const struct pp_dataset *a, const struct pp_dataset *b)
{
	const struct pp_sample_info *ia = pp_dataset_info(a), *ib = pp_dataset_info(b);
	uint8_t *sa, *sb;
	int32_t *la, *lb;

	ck_assert_uint_eq(ia->count, ib->count);
	ck_assert_uint_eq(ia->sample_bytes, ib->sample_bytes);
	ck_assert_int_eq(ia->dtype, ib->dtype);
	ck_assert_uint_eq(ia->ndim, ib->ndim);
	ck_assert_mem_eq(ia->shape, ib->shape, sizeof(ia->shape));
	ck_assert_int_eq(ia->label_kind, ib->label_kind);
	ck_assert_uint_eq(ia->num_classes, ib->num_classes);
	read_all(a, &sa, &la);
	read_all(b, &sb, &lb);
	ck_assert(memcmp(sa, sb, ia->count * ia->sample_bytes) == 0);
	if (ia->label_kind != PP_LABEL_NONE)
		ck_assert(memcmp(la, lb, ia->count * sizeof(int32_t)) == 0);
	free(sa);
	free(sb);
	free(la);
	free(lb);
}

/* ------------------------------------------------------------- sources */

/* Fails if the synthetic source is not a function of (seed, i), if read and
 * gather disagree, or if its classes are not told apart by their prototypes. */
START_TEST(test_synthetic)
{
	struct pp_dataset *a = make_synthetic(500, 1, 8, 8, 42), *b = make_synthetic(500, 1, 8, 8, 42);
	struct pp_dataset *c = make_synthetic(500, 1, 8, 8, 43);
	uint8_t sa[64], sg[64 * 3], all[500 * 64];
	int32_t la, lg[3], labels[500];
	uint64_t idx[3] = {499, 0, 250};
	double within = 0, between = 0;
	int nw = 0, nb = 0, seen[10] = {0};
	uint8_t *s;
	int32_t *l;

	assert_same_data(a, b);
	read_all(a, &s, &l);
	ck_assert_int_eq(pp_dataset_read(c, 0, 500, all, labels), 0);
	ck_assert(memcmp(s, all, sizeof(all)) != 0);
	ck_assert_ptr_null(pp_dataset_samples(a));
	ck_assert_int_eq(pp_dataset_gather(a, idx, 3, sg, lg), 0);
	for (int k = 0; k < 3; k++) {
		ck_assert_int_eq(pp_dataset_read(a, idx[k], 1, sa, &la), 0);
		ck_assert_mem_eq(sa, sg + 64 * k, 64);
		ck_assert_int_eq(la, lg[k]);
	}
	for (int i = 0; i < 500; i++) {
		ck_assert(l[i] >= 0 && l[i] < 10);
		seen[l[i]]++;
	}
	for (int k = 0; k < 10; k++)
		ck_assert_int_gt(seen[k], 20);
	for (int i = 0; i < 100; i++)
		for (int j = i + 1; j < 100; j++) {
			double d = 0;

			for (int p = 0; p < 64; p++)
				d += abs((int)s[i * 64 + p] - (int)s[j * 64 + p]);
			if (l[i] == l[j]) {
				within += d;
				nw++;
			} else {
				between += d;
				nb++;
			}
		}
	ck_assert(within / nw < 0.5 * between / nb);
	ck_assert_int_eq(pp_dataset_read(a, 499, 2, sa, NULL), -ERANGE);
	idx[1] = 500;
	ck_assert_int_eq(pp_dataset_gather(a, idx, 3, sg, lg), -ERANGE);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "500"));
	free(s);
	free(l);
	pp_dataset_destroy(a);
	pp_dataset_destroy(b);
	pp_dataset_destroy(c);
	pp_dataset_destroy(NULL);
}
END_TEST

struct reader_arg {
	const struct pp_dataset *ds;
	uint64_t seed;
	int mismatches; /* samples whose gathered bytes or label differ from a single read */
};

static void *gather_and_compare(void *p)
{
	struct reader_arg *a = p;
	size_t sb = pp_dataset_info(a->ds)->sample_bytes;
	uint64_t idx[64], x = a->seed;
	uint8_t *batch = malloc(64 * sb), *one = malloc(sb);
	int32_t labels[64], label;

	for (int round = 0; round < 50; round++) {
		for (int k = 0; k < 64; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			idx[k] = (x >> 33) % pp_dataset_info(a->ds)->count;
		}
		if (pp_dataset_gather(a->ds, idx, 64, batch, labels) != 0)
			a->mismatches++;
		for (int k = 0; k < 64; k++) {
			if (pp_dataset_read(a->ds, idx[k], 1, one, &label) != 0 ||
			    memcmp(one, batch + k * sb, sb) != 0 || label != labels[k])
				a->mismatches++;
		}
	}
	free(batch);
	free(one);
	return NULL;
}

/* Fails if reads and gathers from several threads at once disagree with
 * each other (and, under ThreadSanitizer, if they race). */
START_TEST(test_concurrent_reads)
{
	struct pp_dataset *syn = make_synthetic(2000, 3, 8, 8, 5), *mem;
	char *dir = pp_test_tmpdir(), *p = path_in(dir, "s.pps");
	const char *paths[1] = {p};
	const struct pp_dataset *sets[2];

	write_shard(syn, p, 256, 1, 0);
	ck_assert_int_eq(pp_dataset_open_shards(paths, 1, &mem), 0);
	sets[0] = syn;
	sets[1] = mem;
	for (int d = 0; d < 2; d++) {
		pthread_t t[4];
		struct reader_arg args[4];

		for (int k = 0; k < 4; k++) {
			args[k] = (struct reader_arg){sets[d], (uint64_t)k + 1, 0};
			ck_assert_int_eq(pthread_create(&t[k], NULL, gather_and_compare, &args[k]), 0);
		}
		for (int k = 0; k < 4; k++) {
			ck_assert_int_eq(pthread_join(t[k], NULL), 0);
			ck_assert_int_eq(args[k].mismatches, 0);
		}
	}
	pp_dataset_destroy(mem);
	pp_dataset_destroy(syn);
	pp_test_rmtree(dir);
	free(p);
	free(dir);
}
END_TEST

/* Fails if a bad synthetic configuration is accepted. */
START_TEST(test_synthetic_bad_config)
{
	struct pp_synthetic_config cfg = {10, 1, 4, 4, 1, 0, PP_DTYPE_U8};
	struct pp_dataset *ds = NULL;

	ck_assert_int_eq(pp_dataset_create_synthetic(&cfg, &ds), -EINVAL);
	cfg.num_classes = 10;
	cfg.height = 0;
	ck_assert_int_eq(pp_dataset_create_synthetic(&cfg, &ds), -EINVAL);
	cfg.height = 4;
	cfg.dtype = (enum pp_dtype)7;
	ck_assert_int_eq(pp_dataset_create_synthetic(&cfg, &ds), -EINVAL);
	ck_assert_ptr_null(ds);
	/* NULLs refused, not followed */
	ck_assert_int_eq(pp_dataset_create_synthetic(NULL, &ds), -EINVAL);
	cfg.dtype = PP_DTYPE_U8;
	ck_assert_int_eq(pp_dataset_create_synthetic(&cfg, NULL), -EINVAL);
}
END_TEST

/* Fails if a random split loses, repeats or alters a sample, depends on anything
 * but the seed, or accepts a holdout of 0 or of every sample. */
START_TEST(test_random_split)
{
	struct pp_synthetic_config cfg = {1000, 1, 4, 4, 10, 3, PP_DTYPE_U8};
	struct pp_dataset *ds, *rest, *held, *rest2, *held2;
	uint8_t seen[1000] = {0};
	uint8_t a[16], b[16];
	int32_t la, lb;

	ck_assert_int_eq(pp_dataset_create_synthetic(&cfg, &ds), 0);
	ck_assert_int_eq(pp_dataset_random_split(ds, 100, 42, &rest, &held), 0);
	ck_assert_uint_eq(pp_dataset_info(rest)->count, 900);
	ck_assert_uint_eq(pp_dataset_info(held)->count, 100);
	ck_assert_ptr_nonnull(pp_dataset_samples(held));
	/* Every sample of the parent is in exactly one part, with its label. */
	for (uint64_t i = 0; i < 1000; i++) {
		ck_assert_int_eq(pp_dataset_read(ds, i, 1, a, &la), 0);
		for (int part = 0; part < 2; part++) {
			const struct pp_dataset *p = part ? held : rest;

			for (uint64_t j = 0; j < pp_dataset_info(p)->count; j++) {
				ck_assert_int_eq(pp_dataset_read(p, j, 1, b, &lb), 0);
				if (memcmp(a, b, 16) == 0 && la == lb)
					seen[i]++;
			}
		}
	}
	for (int i = 0; i < 1000; i++)
		ck_assert_msg(seen[i] == 1, "sample %d in %d places", i, seen[i]);
	/* Same seed, same split; another seed, another split. */
	ck_assert_int_eq(pp_dataset_random_split(ds, 100, 42, &rest2, &held2), 0);
	ck_assert_mem_eq(pp_dataset_samples(held), pp_dataset_samples(held2), 100 * 16);
	pp_dataset_destroy(rest2);
	pp_dataset_destroy(held2);
	ck_assert_int_eq(pp_dataset_random_split(ds, 100, 43, &rest2, &held2), 0);
	ck_assert(memcmp(pp_dataset_samples(held), pp_dataset_samples(held2), 100 * 16) != 0);
	pp_dataset_destroy(rest2);
	pp_dataset_destroy(held2);
	rest2 = held2 = NULL;
	ck_assert_int_eq(pp_dataset_random_split(ds, 0, 1, &rest2, &held2), -EINVAL);
	ck_assert_int_eq(pp_dataset_random_split(ds, 1000, 1, &rest2, &held2), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "hold out 1000 of 1000"));
	ck_assert_ptr_null(rest2);
	pp_dataset_destroy(rest);
	pp_dataset_destroy(held);
	pp_dataset_destroy(ds);
}
END_TEST

/* Fails if IDX files (raw and gzip) do not decode to the bytes and labels they
 * were made from, or if shards made from them do not read back the same. */
START_TEST(test_idx_to_shards_roundtrip)
{
	char *dir = pp_test_tmpdir();
	char *img = path_in(dir, "train-images-idx3-ubyte"), *lab = path_in(dir, "train-labels-idx1-ubyte");
	char *imgz = path_in(dir, "x-images.gz"), *labz = path_in(dir, "x-labels.gz");
	char *sh0 = path_in(dir, "set-train-0.pps"), *sh1 = path_in(dir, "set-train-1.pps");
	struct pp_dataset *src = make_synthetic(1000, 1, 28, 28, 7), *raw, *gz, *shards, *bydir;
	uint8_t *ib, *lb, *ibz, *lbz;
	size_t il, ll, ilz, llz;
	const char *paths[2] = {sh0, sh1};

	make_idx(src, &ib, &il, &lb, &ll);
	pp_test_write_file(img, ib, il);
	pp_test_write_file(lab, lb, ll);
	ibz = gzip_bytes(ib, il, &ilz);
	lbz = gzip_bytes(lb, ll, &llz);
	pp_test_write_file(imgz, ibz, ilz);
	pp_test_write_file(labz, lbz, llz);

	ck_assert_int_eq(pp_dataset_open_idx(img, lab, &raw), 0);
	ck_assert_int_eq(pp_dataset_open_idx(imgz, labz, &gz), 0);
	assert_same_data(src, raw);
	assert_same_data(src, gz);
	ck_assert_mem_eq(pp_dataset_samples(gz), ib + 16, il - 16);
	ck_assert_str_eq(pp_dataset_name(gz), "idx:x-images.gz");
	ck_assert_uint_eq(pp_dataset_info(gz)->shape[0], 1);
	ck_assert_uint_eq(pp_dataset_info(gz)->shape[1], 28);

	/* Two shards of one source, one stored and one compressed, with a
	 * last chunk shorter than the others. */
	write_shard(gz, sh0, 64, 6, 3);
	write_shard(gz, sh1, 100, 0, 1);
	ck_assert_int_eq(pp_dataset_open_shards(paths, 2, &shards), 0);
	ck_assert_uint_eq(pp_dataset_info(shards)->count, 2000);
	{
		const uint8_t *s = pp_dataset_samples(shards);
		const int32_t *l = pp_dataset_labels(shards);

		ck_assert_mem_eq(s, ib + 16, il - 16);
		ck_assert_mem_eq(s + (il - 16), ib + 16, il - 16);
		for (size_t i = 0; i < 1000; i++) {
			ck_assert_int_eq(l[i], lb[8 + i]);
			ck_assert_int_eq(l[1000 + i], lb[8 + i]);
		}
	}
	/* open_dir prefers shards, sorted by name. */
	ck_assert_int_eq(pp_dataset_open_dir(dir, "train", &bydir), 0);
	assert_same_data(shards, bydir);
	ck_assert_str_eq(pp_dataset_name(bydir), "shards:set-train-0.pps+1");

	pp_dataset_destroy(bydir);
	pp_dataset_destroy(shards);
	pp_dataset_destroy(gz);
	pp_dataset_destroy(raw);
	pp_dataset_destroy(src);
	free(ib);
	free(lb);
	free(ibz);
	free(lbz);
	pp_test_rmtree(dir);
	free(img);
	free(lab);
	free(imgz);
	free(labz);
	free(sh0);
	free(sh1);
	free(dir);
}
END_TEST

/* Fails if shards without labels, of f32 samples, or with no records at all
 * do not round-trip, or if the chunk index is not what the layout says. */
START_TEST(test_shard_variants)
{
	char *dir = pp_test_tmpdir();
	char *p = path_in(dir, "f32.pps"), *e = path_in(dir, "empty.pps");
	struct pp_synthetic_config cfg = {333, 3, 5, 7, 4, 9, PP_DTYPE_F32};
	struct pp_sample_info info;
	struct pp_shard_writer_config wc = {.info = &info, .records_per_chunk = 50, .level = 1};
	struct pp_shard_writer *w;
	struct pp_dataset *src, *back;
	struct pp_shard *sh;
	struct pp_shard_chunk_info ci;
	float *samples, *got;
	const char *paths[1] = {p};

	ck_assert_int_eq(pp_dataset_create_synthetic(&cfg, &src), 0);
	info = *pp_dataset_info(src);
	info.label_kind = PP_LABEL_NONE;
	info.num_classes = 0;
	samples = malloc(333 * info.sample_bytes);
	got = malloc(333 * info.sample_bytes);
	ck_assert_int_eq(pp_dataset_read(src, 0, 333, samples, NULL), 0);
	ck_assert_int_eq(pp_shard_writer_create(p, &wc, &w), 0);
	ck_assert_int_eq(pp_shard_writer_add(w, samples, NULL, 333), 0);
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	pp_shard_writer_destroy(w);

	ck_assert_int_eq(pp_shard_open(p, &sh), 0);
	ck_assert_uint_eq(pp_shard_chunk_count(sh), 7);
	ck_assert_uint_eq(pp_shard_info(sh)->sample_bytes, 3 * 5 * 7 * 4);
	ck_assert_int_eq(pp_shard_info(sh)->label_kind, PP_LABEL_NONE);
	ck_assert_uint_eq(pp_shard_label_bytes(sh, 10), 0);
	for (uint64_t i = 0; i < 7; i++) {
		ck_assert_int_eq(pp_shard_chunk(sh, i, &ci), 0);
		ck_assert_uint_eq(ci.offset % PP_SHARD_ALIGN, 0);
		ck_assert_uint_eq(ci.first_record, i * 50);
		ck_assert_uint_eq(ci.records, i < 6 ? 50 : 33);
		ck_assert_uint_eq(ci.raw_size, ci.records * info.sample_bytes);
		ck_assert_int_eq(pp_shard_read_chunk(sh, i, (uint8_t *)got + ci.first_record *
							    info.sample_bytes, NULL), 0);
	}
	ck_assert_int_eq(pp_shard_chunk(sh, 7, &ci), -ERANGE);
	ck_assert_int_eq(pp_shard_read_chunk(sh, 7, got, NULL), -ERANGE);
	ck_assert_mem_eq(got, samples, 333 * info.sample_bytes);
	ck_assert_int_eq(pp_shard_verify(sh), 0);
	ck_assert_str_eq(pp_shard_path(sh), p);
	pp_shard_close(sh);
	pp_shard_close(NULL);
	ck_assert_int_eq(pp_dataset_open_shards(paths, 1, &back), 0);
	ck_assert_mem_eq(pp_dataset_samples(back), samples, 333 * info.sample_bytes);
	ck_assert_ptr_null(pp_dataset_labels(back));
	pp_dataset_destroy(back);

	/* A shard with no records: header, index of nothing, trailer. */
	ck_assert_int_eq(pp_shard_writer_create(e, &wc, &w), 0);
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	pp_shard_writer_destroy(w);
	ck_assert_int_eq(pp_shard_open(e, &sh), 0);
	ck_assert_uint_eq(pp_shard_chunk_count(sh), 0);
	ck_assert_uint_eq(pp_shard_info(sh)->count, 0);
	ck_assert_int_eq(pp_shard_verify(sh), 0);
	pp_shard_close(sh);

	free(samples);
	free(got);
	pp_dataset_destroy(src);
	pp_test_rmtree(dir);
	free(p);
	free(e);
	free(dir);
}
END_TEST

/* Fails if pp_shard_decode_chunk (the loader's path: its own reads, its own
 * inflater) does not give the labels block then the samples, as read_chunk does. */
START_TEST(test_shard_decode_chunk)
{
	char *dir = pp_test_tmpdir(), *p = path_in(dir, "a.pps");
	struct pp_dataset *src = make_synthetic(300, 1, 6, 6, 3);
	struct pp_inflater *inf;
	struct pp_shard *sh;
	int fd;

	write_shard(src, p, 128, 9, 1);
	ck_assert_int_eq(pp_shard_open(p, &sh), 0);
	ck_assert_int_eq(pp_inflater_create(&inf), 0);
	fd = open(p, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	for (uint64_t i = 0; i < pp_shard_chunk_count(sh); i++) {
		struct pp_shard_chunk_info ci;
		uint8_t *stored, *raw, *s = malloc(128 * 36);
		int32_t l[128], want_l[128];
		size_t lb;

		ck_assert_int_eq(pp_shard_chunk(sh, i, &ci), 0);
		stored = malloc(ci.stored_size);
		raw = malloc(ci.raw_size);
		ck_assert_int_eq(pread(fd, stored, ci.stored_size, (off_t)ci.offset),
				 (ssize_t)ci.stored_size);
		ck_assert_int_eq(pp_shard_decode_chunk(sh, i, stored, raw, inf), 0);
		lb = pp_shard_label_bytes(sh, ci.records);
		ck_assert_uint_eq(lb, 4 * ci.records);
		ck_assert_int_eq(pp_dataset_read(src, ci.first_record, ci.records, s, want_l), 0);
		memcpy(l, raw, lb);
		ck_assert_mem_eq(l, want_l, lb);
		ck_assert_mem_eq(raw + lb, s, ci.records * 36);
		/* One flipped stored byte is a CRC mismatch naming chunk and offset. */
		stored[ci.stored_size / 2] ^= 0x10;
		ck_assert_int_eq(pp_shard_decode_chunk(sh, i, stored, raw, inf), -EBADMSG);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "CRC-32 mismatch"));
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "chunk"));
		free(stored);
		free(raw);
		free(s);
	}
	close(fd);
	pp_inflater_destroy(inf);
	pp_shard_close(sh);
	pp_dataset_destroy(src);
	pp_test_rmtree(dir);
	free(p);
	free(dir);
}
END_TEST

/* Fails if CIFAR-10 batches do not decode to their records, in file order, or
 * if a bad size or an out-of-range label is accepted, or if opening their
 * directory, which succeeds, leaves a message of its search in pp_last_error(). */
START_TEST(test_cifar10)
{
	char *dir = pp_test_tmpdir();
	char *b1 = path_in(dir, "data_batch_1.bin"), *b2 = path_in(dir, "data_batch_2.bin");
	const char *paths[2] = {b1, b2};
	size_t len = 7 * 3073;
	uint8_t *buf = malloc(len + 1), *buf2 = malloc(len);
	struct pp_dataset *ds;

	pp_test_fill_random(buf, len, 1);
	pp_test_fill_random(buf2, len, 2);
	for (int r = 0; r < 7; r++) {
		buf[r * 3073] = (uint8_t)(r % 10);
		buf2[r * 3073] = (uint8_t)((r + 3) % 10);
	}
	pp_test_write_file(b1, buf, len);
	pp_test_write_file(b2, buf2, len);
	ck_assert_int_eq(pp_dataset_open_cifar10(paths, 2, &ds), 0);
	ck_assert_uint_eq(pp_dataset_info(ds)->count, 14);
	ck_assert_uint_eq(pp_dataset_info(ds)->sample_bytes, 3072);
	ck_assert_uint_eq(pp_dataset_info(ds)->shape[0], 3);
	for (int r = 0; r < 7; r++) {
		const uint8_t *s = pp_dataset_samples(ds);

		ck_assert_mem_eq(s + r * 3072, buf + r * 3073 + 1, 3072);
		ck_assert_mem_eq(s + (7 + r) * 3072, buf2 + r * 3073 + 1, 3072);
		ck_assert_int_eq(pp_dataset_labels(ds)[r], r % 10);
		ck_assert_int_eq(pp_dataset_labels(ds)[7 + r], (r + 3) % 10);
	}
	pp_dataset_destroy(ds);
	{
		char *sub = path_in(dir, "cifar-10-batches-bin"), *tb;

		ck_assert_int_eq(mkdir(sub, 0700), 0);
		tb = path_in(sub, "test_batch.bin");
		pp_test_write_file(tb, buf2, len);
		/* found after the shards and IDX files it looked for first: the
		 * thread's message is still the last failure's, not "no test shards" */
		pp_set_error(-EIO, "an earlier failure");
		ck_assert_int_eq(pp_dataset_open_dir(dir, "test", &ds), 0);
		ck_assert_str_eq(pp_last_error(), "an earlier failure");
		ck_assert_str_eq(pp_dataset_name(ds), "cifar10:test_batch.bin");
		ck_assert_uint_eq(pp_dataset_info(ds)->count, 7);
		ck_assert_mem_eq(pp_dataset_samples(ds), buf2 + 1, 3072);
		pp_dataset_destroy(ds);
		/* The train split wants data_batch_1..5: 3..5 are missing. */
		ck_assert_int_eq(pp_dataset_open_dir(dir, "train", &ds), -ENOENT);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "data_batch_3.bin"));
		free(tb);
		free(sub);
	}

	buf[3 * 3073] = 10;
	pp_test_write_file(b1, buf, len);
	ck_assert_int_eq(pp_dataset_open_cifar10(paths, 2, &ds), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "record 3 (offset 9219): label 10"));
	pp_test_write_file(b1, buf, len - 1);
	ck_assert_int_eq(pp_dataset_open_cifar10(paths, 2, &ds), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "data_batch_1.bin: 21510 bytes"));
	pp_test_write_file(b1, buf, 0);
	ck_assert_int_eq(pp_dataset_open_cifar10(paths, 2, &ds), -EBADMSG);
	unlink(b1);
	ck_assert_int_eq(pp_dataset_open_cifar10(paths, 2, &ds), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), b1));
	free(buf);
	free(buf2);
	pp_test_rmtree(dir);
	free(b1);
	free(b2);
	free(dir);
}
END_TEST

/* Fails if a missing file, an empty file, a missing dataset directory or a
 * file given as one is not reported with the file's name and a clear reason. */
START_TEST(test_missing_and_empty)
{
	char *dir = pp_test_tmpdir(), *missing = path_in(dir, "nope.gz"), *empty = path_in(dir, "empty");
	const char *paths[1] = {missing};
	struct pp_dataset *ds = NULL;
	struct pp_shard *sh = NULL;

	ck_assert_int_eq(pp_dataset_open_idx(missing, NULL, &ds), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), missing));
	ck_assert_int_eq(pp_shard_open(missing, &sh), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "nope.gz: cannot open"));
	ck_assert_int_eq(pp_dataset_open_shards(paths, 1, &ds), -ENOENT);
	pp_test_write_file(empty, "", 0);
	ck_assert_int_eq(pp_dataset_open_idx(empty, NULL, &ds), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "empty: empty file"));
	ck_assert_int_eq(pp_shard_open(empty, &sh), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "empty file"));
	ck_assert_int_eq(pp_dataset_open_idx(dir, NULL, &ds), -EISDIR);

	ck_assert_int_eq(pp_dataset_open_dir(dir, "train", &ds), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "looked for"));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "dataset-fashion-mnist"));
	ck_assert_int_eq(pp_dataset_open_dir(missing, "train", &ds), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "no such directory"));
	/* A file given as the directory (a shard): said as such, not as missing. */
	ck_assert_int_eq(pp_dataset_open_dir(empty, "train", &ds), -ENOTDIR);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "empty: a file, not a directory"));
	ck_assert_int_eq(pp_dataset_open_dir(dir, "validation", &ds), -EINVAL);
	/* NULL where the contract promises -EINVAL, not a crash. */
	ck_assert_int_eq(pp_dataset_open_dir(dir, NULL, &ds), -EINVAL);
	ck_assert_int_eq(pp_dataset_open_dir(NULL, "train", &ds), -EINVAL);
	ck_assert_int_eq(pp_dataset_open_dir(dir, "train", NULL), -EINVAL);
	/* A link loop is said as one, not as a missing directory or split. */
	{
		char a[4096], b[4096];

		snprintf(a, sizeof(a), "%s/loop-a", dir);
		snprintf(b, sizeof(b), "%s/loop-b", dir);
		ck_assert_int_eq(symlink(b, a), 0);
		ck_assert_int_eq(symlink(a, b), 0);
		ck_assert_int_eq(pp_dataset_open_dir(a, "train", &ds), -ELOOP);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "cannot read the directory: Too many "
					     "levels of symbolic links"));
	}
	ck_assert_ptr_null(ds);
	ck_assert_ptr_null(sh);
	pp_test_rmtree(dir);
	free(missing);
	free(empty);
	free(dir);
}
END_TEST

/*
 * Fails if pp_dataset_open_dir loads a leftover shard set as extra data:
 * a set of 2 next to a set of 1 (re-packed with another -n) used to be
 * opened as one dataset of twice the samples; so did a set with a shard
 * missing.  A whole set alone opens, with its own count.
 */
START_TEST(test_open_dir_one_shard_set)
{
	char *dir = pp_test_tmpdir(), *a = path_in(dir, "p-train-00000-of-00002.pps"),
	     *b = path_in(dir, "p-train-00001-of-00002.pps"),
	     *old = path_in(dir, "p-train-00000-of-00001.pps");
	struct pp_dataset *src = make_synthetic(40, 1, 2, 2, 3), *ds = NULL;

	write_shard(src, old, 8, 1, 1);
	write_shard(src, a, 8, 1, 1);
	ck_assert_int_eq(pp_dataset_open_dir(dir, "train", &ds), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "not one set"));
	ck_assert_ptr_null(ds);
	ck_assert_int_eq(unlink(old), 0);
	ck_assert_int_eq(pp_dataset_open_dir(dir, "train", &ds), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "1 train shards of a set of 2"));
	write_shard(src, b, 8, 1, 1);
	ck_assert_int_eq(pp_dataset_open_dir(dir, "train", &ds), 0);
	ck_assert_uint_eq(pp_dataset_info(ds)->count, 80);
	pp_dataset_destroy(ds);
	pp_dataset_destroy(src);
	pp_test_rmtree(dir);
	free(a);
	free(b);
	free(old);
	free(dir);
}
END_TEST

/*
 * Fails if pp_shard_find() lists other files than a split's whole set, in
 * another order than by name, without the terminating NULL, or accepts a
 * set with a shard missing or two sets mixed (the files need not be
 * shards: it lists names, the loader opens them), or reads a directory
 * named with glob characters as a pattern.
 */
START_TEST(test_shard_find)
{
	char *dir = pp_test_tmpdir();
	const char *names[] = { "q-train-00001-of-00002.pps", "q-train-00000-of-00002.pps",
				"q-test-00000-of-00001.pps", "notes.txt" };
	char **paths = NULL, *p;
	size_t n = 0;

	for (size_t k = 0; k < PP_ARRAY_SIZE(names); k++) {
		p = path_in(dir, names[k]);
		pp_test_write_file(p, "x", 1);
		free(p);
	}
	ck_assert_int_eq(pp_shard_find(dir, "train", &paths, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_ptr_nonnull(strstr(paths[0], "/q-train-00000-of-00002.pps"));
	ck_assert_ptr_nonnull(strstr(paths[1], "/q-train-00001-of-00002.pps"));
	ck_assert_ptr_null(paths[2]);
	pp_shard_paths_free(paths);
	ck_assert_int_eq(pp_shard_find(dir, "test", &paths, &n), 0);
	ck_assert_uint_eq(n, 1);
	pp_shard_paths_free(paths);

	paths = NULL;
	n = 7;
	ck_assert_int_eq(pp_shard_find(dir, "val", &paths, &n), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "no val shards"));
	ck_assert_ptr_null(paths);
	ck_assert_uint_eq(n, 7);

	p = path_in(dir, "r-train-00000-of-00001.pps");
	pp_test_write_file(p, "x", 1);
	ck_assert_int_eq(pp_shard_find(dir, "train", &paths, &n), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "not one set"));
	ck_assert_int_eq(unlink(p), 0);
	free(p);
	p = path_in(dir, names[0]);
	ck_assert_int_eq(unlink(p), 0);
	free(p);
	ck_assert_int_eq(pp_shard_find(dir, "train", &paths, &n), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "1 train shards of a set of 2"));
	ck_assert_ptr_null(paths);
	ck_assert_int_eq(pp_shard_find(NULL, "train", &paths, &n), -EINVAL);
	pp_shard_paths_free(NULL);
	/* A prefix that holds another split's name: pinpipe-pack's names say
	 * their split ("eval-train-..." matched *val*.pps, and a set of 1 met
	 * val shards of another set). */
	{
		char *sub = path_in(dir, "named"), *f;

		ck_assert_int_eq(mkdir(sub, 0755), 0);
		f = path_in(sub, "eval-train-00000-of-00001.pps");
		pp_test_write_file(f, "x", 1);
		free(f);
		f = path_in(sub, "retest-val-00000-of-00002.pps");
		pp_test_write_file(f, "x", 1);
		free(f);
		f = path_in(sub, "retest-val-00001-of-00002.pps");
		pp_test_write_file(f, "x", 1);
		free(f);
		ck_assert_int_eq(pp_shard_find(sub, "train", &paths, &n), 0);
		ck_assert_uint_eq(n, 1);
		pp_shard_paths_free(paths);
		/* Names of another form keep the glob's match. */
		f = path_in(sub, "mnist.test-00000-of-00002.pps");
		pp_test_write_file(f, "x", 1);
		free(f);
		f = path_in(sub, "test-part-00001-of-00002.pps");
		pp_test_write_file(f, "x", 1);
		free(f);
		ck_assert_int_eq(pp_shard_find(sub, "test", &paths, &n), 0);
		ck_assert_uint_eq(n, 2);
		pp_shard_paths_free(paths);
		for (int k = 0; k < 2; k++) {
			f = path_in(sub, k ? "test-part-00001-of-00002.pps" : "mnist.test-00000-of-00002.pps");
			ck_assert_int_eq(unlink(f), 0);
			free(f);
		}
		ck_assert_int_eq(pp_shard_find(sub, "val", &paths, &n), 0);
		ck_assert_uint_eq(n, 2);
		ck_assert_ptr_nonnull(strstr(paths[0], "/retest-val-00000-of-00002.pps"));
		pp_shard_paths_free(paths);
		ck_assert_int_eq(pp_shard_find(sub, "test", &paths, &n), -ENOENT);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "another split's"));
		free(sub);
	}
	/* A directory named with glob characters is taken as named: "set[1]"
	 * matched set1's shards, and "s?t" those of sat. */
	{
		static const char *const sets[][2] = { { "set[1]", "set1" }, { "s?t", "sat" },
						       { "a*", "ab" } };

		for (size_t k = 0; k < PP_ARRAY_SIZE(sets); k++) {
			char *mine = path_in(dir, sets[k][0]), *other = path_in(dir, sets[k][1]);
			char *f;

			ck_assert_int_eq(mkdir(mine, 0755), 0);
			ck_assert_int_eq(mkdir(other, 0755), 0);
			f = path_in(other, "o-train-00000-of-00001.pps");
			pp_test_write_file(f, "x", 1);
			free(f);
			ck_assert_int_eq(pp_shard_find(mine, "train", &paths, &n), -ENOENT);
			f = path_in(mine, "m-train-00000-of-00001.pps");
			pp_test_write_file(f, "x", 1);
			free(f);
			ck_assert_int_eq(pp_shard_find(mine, "train", &paths, &n), 0);
			ck_assert_uint_eq(n, 1);
			ck_assert_ptr_nonnull(strstr(paths[0], "/m-train-00000-of-00001.pps"));
			pp_shard_paths_free(paths);
			free(mine);
			free(other);
		}
	}
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/* Fails if the writer accepts bad labels or configurations, if an
 * abandoned or failed write leaves any file behind, or does not remove
 * what a killed writer of its path left (PATH.tmp-XXXXXX, stale, no lock),
 * if a FIFO at the path is not refused, or if a link there is replaced
 * rather than its file. */
START_TEST(test_writer_errors)
{
	char *dir = pp_test_tmpdir(), *p = path_in(dir, "w.pps"), *nodir = path_in(dir, "no/w.pps");
	char *fifo = path_in(dir, "fifo.pps"), *link = path_in(dir, "link.pps");
	char *real = path_in(dir, "real.pps");
	struct pp_sample_info info = {0, PP_DTYPE_U8, 1, {4, 0, 0, 0}, 4, PP_LABEL_CLASS, 3};
	struct pp_shard *sh;
	struct pp_shard_writer_config cfg = {.info = &info, .records_per_chunk = 2, .level = 6,
					      .threads = 3};
	struct pp_shard_writer *w;
	uint8_t s[12] = {0};
	int32_t bad[3] = {0, 3, 1}, good[3] = {0, 2, 1};
	char expect[512];
	struct stat st;
	char *dead = path_in(dir, "w.pps.tmp-Dead01");

	pp_test_write_file(dead, "a killed writer's", 17);
	sleep(PP_STAGED_STALE_S + 1);
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), 0);
	ck_assert_int_ne(access(dead, F_OK), 0);
	free(dead);
	ck_assert_int_eq(pp_shard_writer_add(w, s, bad, 3), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "label 3 of record 1"));
	ck_assert_int_eq(pp_shard_writer_add(w, s, NULL, 3), -EINVAL);
	ck_assert_int_eq(pp_shard_writer_add(w, s, good, 3), 0);
	pp_shard_writer_destroy(w);
	ck_assert_int_ne(stat(p, &st), 0);
	ck_assert_int_eq(rmdir(dir), 0); /* empty: no temporary left either */
	ck_assert_int_eq(mkdir(dir, 0700), 0);

	ck_assert_int_eq(pp_shard_writer_create(nodir, &cfg, &w), -ENOENT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "no/w.pps"));
	/* NULLs refused, not followed */
	ck_assert_int_eq(pp_shard_writer_create(p, NULL, &w), -EINVAL);
	ck_assert_int_eq(pp_shard_writer_create(NULL, &cfg, &w), -EINVAL);
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, NULL), -EINVAL);
	cfg.info = NULL;
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	cfg.info = &info;
	cfg.level = 10;
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	cfg.level = 0;
	cfg.records_per_chunk = UINT32_MAX;
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	/* A compressed chunk just under 4 GiB raw may compress to more than 4 GiB,
	 * whose size the index cannot hold: it used to be accepted (and the
	 * stored size would wrap); refused before any buffer is allocated. */
	cfg.level = 1;
	cfg.records_per_chunk = UINT32_MAX / 8; /* records of 8 bytes */
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "compress to more than 4 GiB"));
	cfg.level = 0;
	/* A bad shape names the file once, then the shape's fault: the message
	 * used to be formatted over itself and came out "<path>: <path>: ". */
	cfg.records_per_chunk = 6;
	info.ndim = 0;
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	snprintf(expect, sizeof(expect), "%s: 0 dimensions, expected 1..%d", p, PP_MAX_DIMS);
	ck_assert_str_eq(pp_last_error(), expect);
	info.ndim = 1;

	/* A FIFO, which the rename would replace: refused, and left a FIFO. */
	ck_assert_int_eq(mkfifo(fifo, 0644), 0);
	ck_assert_int_eq(pp_shard_writer_create(fifo, &cfg, &w), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "FIFO"));
	ck_assert_int_eq(lstat(fifo, &st), 0);
	ck_assert(S_ISFIFO(st.st_mode));
	ck_assert_int_eq(unlink(fifo), 0);
	/* A link: the file it names is written, and the link stays one. */
	ck_assert_int_eq(symlink("real.pps", link), 0);
	ck_assert_int_eq(pp_shard_writer_create(link, &cfg, &w), 0);
	ck_assert_int_eq(pp_shard_writer_add(w, s, good, 3), 0);
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	pp_shard_writer_destroy(w);
	ck_assert_int_eq(lstat(link, &st), 0);
	ck_assert(S_ISLNK(st.st_mode));
	ck_assert_int_eq(pp_shard_open(real, &sh), 0);
	ck_assert_uint_eq(pp_shard_info(sh)->count, 3);
	pp_shard_close(sh);
	ck_assert_int_eq(unlink(link), 0);
	ck_assert_int_eq(unlink(real), 0);
	ck_assert_int_eq(rmdir(dir), 0);
	free(p);
	free(nodir);
	free(fifo);
	free(link);
	free(real);
	free(dir);
}
END_TEST

/* Fails if compressing on several threads changes a single byte of the
 * shard, whatever the number of threads and however the chunks fall. */
START_TEST(test_writer_threads_identical)
{
	char *dir = pp_test_tmpdir(), *p = path_in(dir, "t.pps");
	struct pp_dataset *src = make_synthetic(1000, 1, 7, 9, 21);
	static const uint32_t threads[] = {2, 5, 64};
	uint8_t *one, *many;
	size_t one_len, many_len;
	struct pp_shard_writer_config cfg = {.info = pp_dataset_info(src), .records_per_chunk = 37,
					      .level = 6, .threads = 65};
	struct pp_shard_writer *w = NULL;

	write_shard(src, p, 37, 6, 1);
	one = pp_test_read_file(p, &one_len);
	for (size_t k = 0; k < PP_ARRAY_SIZE(threads); k++) {
		write_shard(src, p, 37, 6, threads[k]);
		many = pp_test_read_file(p, &many_len);
		ck_assert_uint_eq(many_len, one_len);
		ck_assert(memcmp(one, many, one_len) == 0);
		free(many);
	}
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "65 threads"));
	free(one);
	pp_dataset_destroy(src);
	pp_test_rmtree(dir);
	free(p);
	free(dir);
}
END_TEST

/* ------------------------------------------------------------- damage */

/* A small shard: 40 records of 1x5x5 u8 with labels, 9 per chunk, zlib. */
static uint8_t *small_shard(const char *dir, char **path_p, size_t *len_p, int level)
{
	struct pp_dataset *src = make_synthetic(40, 1, 5, 5, 11);
	char *p = path_in(dir, "small.pps");
	uint8_t *buf;

	write_shard(src, p, 9, level, 2);
	pp_dataset_destroy(src);
	buf = pp_test_read_file(p, len_p);
	*path_p = p;
	return buf;
}

static int open_and_verify(const char *path)
{
	struct pp_shard *sh;
	int ret = pp_shard_open(path, &sh);

	if (ret < 0)
		return ret;
	ret = pp_shard_verify(sh);
	pp_shard_close(sh);
	return ret;
}

/* Fails if a shard cut short at any byte is accepted, or is rejected without
 * naming the file and saying it is truncated (or naming what is missing). */
START_TEST(test_shard_truncated_everywhere)
{
	char *dir = pp_test_tmpdir(), *p;
	size_t len;
	uint8_t *buf = small_shard(dir, &p, &len, 6);

	ck_assert_int_eq(open_and_verify(p), 0);
	ck_assert_uint_gt(len, 5 * PP_SHARD_ALIGN);
	/* Cut from the end downwards: each step only shrinks the file. */
	for (size_t n = len; n-- > 0;) {
		const char *msg;

		ck_assert_int_eq(truncate(p, (off_t)n), 0);
		ck_assert_msg(open_and_verify(p) == -EBADMSG, "truncated to %zu: accepted", n);
		msg = pp_last_error();
		ck_assert_msg(strncmp(msg, p, strlen(p)) == 0, "truncated to %zu: %s", n, msg);
		if (n == 0)
			ck_assert_ptr_nonnull(strstr(msg, "empty file"));
		else if (n < PP_SHARD_ALIGN + PP_ST_SIZE)
			ck_assert_msg(strstr(msg, "truncated") != NULL, "truncated to %zu: %s", n, msg);
		else
			ck_assert_msg(strstr(msg, "trailer") != NULL, "truncated to %zu: %s", n, msg);
	}
	free(buf);
	pp_test_rmtree(dir);
	free(p);
	free(dir);
}
END_TEST

/* What the message about a byte changed at offset k of the shard buf must say. */
static const char *flip_place(const uint8_t *buf, size_t len, size_t k)
{
	uint64_t index_offset = pp_le64(buf + len - PP_ST_SIZE + PP_ST_INDEX_OFFSET);

	if (k < PP_SH_SIZE)
		return "offset ";
	if (k < PP_SHARD_ALIGN)
		return "header padding";
	if (k < index_offset)
		return "chunk ";
	if (k < len - PP_ST_SIZE)
		return "index";
	return "trailer";
}

/* Fails if a shard with any one byte changed is accepted by open + verify, or
 * if the message does not name the file and the part (header field, header
 * padding, chunk, index, trailer) where the byte lies. */
START_TEST(test_shard_flipped_everywhere)
{
	char *dir = pp_test_tmpdir(), *p;
	size_t len;
	int levels[2] = {6, 0};

	for (int v = 0; v < 2; v++) {
		uint8_t *buf = small_shard(dir, &p, &len, levels[v]);
		int fd = open(p, O_RDWR);

		ck_assert_int_ge(fd, 0);
		for (size_t k = 0; k < len; k++) {
			uint8_t b = buf[k] ^ 0xff;
			int ret;

			ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)k), 1);
			ret = open_and_verify(p);
			ck_assert_msg(ret == -EBADMSG || (k >= 8 && k < 12 && ret == -EPROTONOSUPPORT),
				      "level %d, byte %zu flipped: returned %d", levels[v], k, ret);
			ck_assert_msg(strncmp(pp_last_error(), p, strlen(p)) == 0, "byte %zu: %s", k,
				      pp_last_error());
			ck_assert_msg(strstr(pp_last_error(), flip_place(buf, len, k)) != NULL,
				      "byte %zu: '%s' does not say '%s'", k, pp_last_error(),
				      flip_place(buf, len, k));
			ck_assert_int_eq(pwrite(fd, buf + k, 1, (off_t)k), 1);
		}
		close(fd);
		ck_assert_int_eq(open_and_verify(p), 0);
		free(buf);
		free(p);
	}
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/* Writes buf with a header CRC made right again (so that checks past the CRC are reached). */
static void write_with_header_crc(const char *p, uint8_t *buf, size_t len)
{
	pp_put_le32(buf + PP_SH_CRC, pp_crc32(0, buf, PP_SH_CRC));
	pp_test_write_file(p, buf, len);
}

/* Fails if absurd counts, a label outside the classes, an unknown version or
 * a wrong magic get past open, or if their messages miss what is wrong. */
START_TEST(test_shard_bad_fields)
{
	char *dir = pp_test_tmpdir(), *p;
	size_t len;
	uint8_t *buf = small_shard(dir, &p, &len, 6), *t = malloc(len);
	struct pp_shard *sh = NULL;

	memcpy(t, buf, len);
	t[0] = 'X';
	pp_test_write_file(p, t, len);
	ck_assert_int_eq(pp_shard_open(p, &sh), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "not a pinpipe shard"));

	memcpy(t, buf, len);
	pp_put_le32(t + PP_SH_VERSION, 3);
	write_with_header_crc(p, t, len);
	ck_assert_int_eq(pp_shard_open(p, &sh), -EPROTONOSUPPORT);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "version 3"));

	/* 2^40 records in 2^40 chunks: the header agrees with itself, the
	 * trailer and file size do not; nothing of that size is allocated. */
	memcpy(t, buf, len);
	pp_put_le64(t + PP_SH_RECORDS, (uint64_t)1 << 40);
	pp_put_le32(t + PP_SH_RECORDS_PER_CHUNK, 1);
	pp_put_le64(t + PP_SH_CHUNKS, (uint64_t)1 << 40);
	write_with_header_crc(p, t, len);
	ck_assert_int_eq(pp_shard_open(p, &sh), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "trailer gives 5 chunks"));

	memcpy(t, buf, len);
	pp_put_le32(t + PP_SH_SHAPE, 0x40000000);
	write_with_header_crc(p, t, len);
	ck_assert_int_eq(pp_shard_open(p, &sh), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "exceeds"));

	/* Fewer classes than the labels need: found when the chunk is decoded. */
	memcpy(t, buf, len);
	pp_put_le32(t + PP_SH_NUM_CLASSES, 2);
	write_with_header_crc(p, t, len);
	ck_assert_int_eq(open_and_verify(p), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "has label"));
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "expected 0..1"));
	ck_assert_ptr_null(sh);
	free(t);
	free(buf);
	pp_test_rmtree(dir);
	free(p);
	free(dir);
}
END_TEST

/* A small IDX pair: 6 images of 3x4 and their labels. */
static void small_idx(uint8_t **img_p, size_t *il_p, uint8_t **lab_p, size_t *ll_p)
{
	struct pp_dataset *src = make_synthetic(6, 1, 3, 4, 5);

	make_idx(src, img_p, il_p, lab_p, ll_p);
	pp_dataset_destroy(src);
}

/* Fails if a dataset opened without labels gives anything but the -1 its
 * contract promises for each label, through pp_dataset_read and gather. */
START_TEST(test_no_labels_read_minus_one)
{
	char *dir = pp_test_tmpdir(), *img = path_in(dir, "img");
	uint64_t idx[3] = {5, 0, 2};
	int32_t labels[6];
	uint8_t *ib, *lb, samples[6 * 12];
	size_t il, ll;
	struct pp_dataset *ds = NULL;

	small_idx(&ib, &il, &lb, &ll);
	pp_test_write_file(img, ib, il);
	ck_assert_int_eq(pp_dataset_open_idx(img, NULL, &ds), 0);
	ck_assert_int_eq(pp_dataset_info(ds)->label_kind, PP_LABEL_NONE);
	memset(labels, 0, sizeof(labels));
	ck_assert_int_eq(pp_dataset_read(ds, 0, 6, samples, labels), 0);
	for (int k = 0; k < 6; k++)
		ck_assert_int_eq(labels[k], -1);
	memset(labels, 0, sizeof(labels));
	ck_assert_int_eq(pp_dataset_gather(ds, idx, 3, samples, labels), 0);
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(labels[k], -1);
	pp_dataset_destroy(ds);
	free(ib);
	free(lb);
	pp_test_rmtree(dir);
	free(img);
	free(dir);
}
END_TEST

/* Fails if a raw IDX file cut short anywhere, or with any header byte changed,
 * is accepted, or if absurd dimensions get past the size check. */
START_TEST(test_idx_damage)
{
	char *dir = pp_test_tmpdir(), *img = path_in(dir, "img"), *lab = path_in(dir, "lab");
	uint8_t *ib, *lb, t[128];
	size_t il, ll;
	struct pp_dataset *ds = NULL;

	small_idx(&ib, &il, &lb, &ll);
	pp_test_write_file(lab, lb, ll);
	for (size_t n = 0; n < il; n++) {
		pp_test_write_file(img, ib, n);
		ck_assert_msg(pp_dataset_open_idx(img, lab, &ds) == -EBADMSG, "cut at %zu", n);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), img));
	}
	for (size_t k = 0; k < 16; k++) {
		memcpy(t, ib, il);
		t[k] ^= 0xff;
		pp_test_write_file(img, t, il);
		ck_assert_msg(pp_dataset_open_idx(img, lab, &ds) == -EBADMSG, "byte %zu", k);
		ck_assert_msg(strstr(pp_last_error(), "offset") != NULL, "byte %zu: %s", k,
			      pp_last_error());
	}
	/* Absurd dimensions: 2^32-1 images of 2^32-1 x 2^32-1. */
	memcpy(t, ib, il);
	memset(t + 4, 0xff, 12);
	pp_test_write_file(img, t, il);
	ck_assert_int_eq(pp_dataset_open_idx(img, lab, &ds), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "more than any IDX file holds"));
	/* 2^20 images of 2^20 x 2^24: the product wraps around 2^64 to 0. */
	memcpy(t, ib, il);
	memset(t + 4, 0, 12);
	t[5] = t[9] = 0x10;
	t[12] = 1;
	pp_test_write_file(img, t, il);
	ck_assert_int_eq(pp_dataset_open_idx(img, lab, &ds), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "more than any IDX file holds"));
	/* Labels: cut short, a count that differs, a label of 10. */
	pp_test_write_file(img, ib, il);
	for (size_t n = 0; n < ll; n++) {
		pp_test_write_file(lab, lb, n);
		ck_assert_msg(pp_dataset_open_idx(img, lab, &ds) == -EBADMSG, "labels cut at %zu", n);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), lab));
	}
	memcpy(t, lb, ll);
	t[7] = 5;
	pp_test_write_file(lab, t, 8 + 5);
	ck_assert_int_eq(pp_dataset_open_idx(img, lab, &ds), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "has 5 labels"));
	memcpy(t, lb, ll);
	t[8 + 4] = 10;
	pp_test_write_file(lab, t, ll);
	ck_assert_int_eq(pp_dataset_open_idx(img, lab, &ds), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "label 4 (data offset 4): 10"));
	/* The images file given as labels. */
	ck_assert_int_eq(pp_dataset_open_idx(img, img, &ds), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "1 dimensions"));
	ck_assert_ptr_null(ds);
	free(ib);
	free(lb);
	pp_test_rmtree(dir);
	free(img);
	free(lab);
	free(dir);
}
END_TEST

/* Fails if a gzip IDX file cut short anywhere, with any byte changed (except
 * the header fields gzip itself ignores), with trailing data, or whose
 * trailer disagrees with the IDX header, is accepted. */
START_TEST(test_gzip_damage)
{
	char *dir = pp_test_tmpdir(), *img = path_in(dir, "img.gz"), *lab = path_in(dir, "lab");
	uint8_t *ib, *lb, *gz, *t;
	size_t il, ll, gl;
	struct pp_dataset *ds = NULL;

	small_idx(&ib, &il, &lb, &ll);
	pp_test_write_file(lab, lb, ll);
	gz = gzip_bytes(ib, il, &gl);
	t = malloc(gl + 16);
	pp_test_write_file(img, gz, gl);
	ck_assert_int_eq(pp_dataset_open_idx(img, lab, &ds), 0);
	ck_assert_mem_eq(pp_dataset_samples(ds), ib + 16, il - 16);
	pp_dataset_destroy(ds);
	ds = NULL;
	for (size_t n = 1; n < gl; n++) {
		pp_test_write_file(img, gz, n);
		ck_assert_msg(pp_dataset_open_idx(img, lab, &ds) == -EBADMSG, "cut at %zu", n);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), img));
	}
	for (size_t k = 0; k < gl; k++) {
		int ret;

		memcpy(t, gz, gl);
		t[k] ^= 0xff;
		pp_test_write_file(img, t, gl);
		ret = pp_dataset_open_idx(img, lab, &ds);
		if (k >= 4 && k < 10) {
			/* MTIME, XFL, OS: informational, ignored by gzip too. */
			ck_assert_msg(ret == 0, "byte %zu: %s", k, pp_last_error());
			ck_assert_mem_eq(pp_dataset_samples(ds), ib + 16, il - 16);
			pp_dataset_destroy(ds);
			ds = NULL;
			continue;
		}
		ck_assert_msg(ret == -EBADMSG, "byte %zu flipped: returned %d", k, ret);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), img));
	}
	memcpy(t, gz, gl);
	memcpy(t + gl, "junk", 4);
	pp_test_write_file(img, t, gl + 4);
	ck_assert_int_eq(pp_dataset_open_idx(img, lab, &ds), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "gzip"));
	ck_assert_ptr_null(ds);
	free(t);
	free(gz);
	free(ib);
	free(lb);
	pp_test_rmtree(dir);
	free(img);
	free(lab);
	free(dir);
}
END_TEST

/* Fails if a gzip file whose stream and trailer both claim a huge IDX is
 * inflated into a buffer sized by the claim rather than rejected. */
START_TEST(test_gzip_absurd_header)
{
	char *dir = pp_test_tmpdir(), *img = path_in(dir, "big.gz");
	uint8_t hdr[16] = {0, 0, 8, 3, 0x00, 0x10, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x10, 0};
	uint8_t *gz;
	size_t gl;
	struct pp_dataset *ds = NULL;

	/* 2^20 images of 2^12 x 2^12: 2^44 bytes, claimed by 16 bytes of data. */
	gz = gzip_bytes(hdr, sizeof(hdr), &gl);
	pp_put_le32(gz + gl - 4, 16); /* ISIZE agrees with 2^44 + 16 modulo 2^32 */
	pp_test_write_file(img, gz, gl);
	ck_assert_int_eq(pp_dataset_open_idx(img, NULL, &ds), -EBADMSG);
	ck_assert_msg(strstr(pp_last_error(), "more than") != NULL, "%s", pp_last_error());
	ck_assert_ptr_null(ds);
	free(gz);
	pp_test_rmtree(dir);
	free(img);
	free(dir);
}
END_TEST

/* ------------------------------------------------------------- real data */

/* Fails if the real Fashion-MNIST does not decode to the sizes and class
 * balance it is published with, to the bytes zlib's own gzread gives, or if
 * shards made from it do not read back the same. */
START_TEST(test_fashion_mnist)
{
	const char *fm = pp_test_fashion_mnist_dir();
	char *dir, *gzpath, *p0, *p1;
	struct pp_dataset *train, *test, *back;
	uint8_t *ref;
	int counts[10] = {0};
	gzFile f;
	const char *paths[2];

	if (fm == NULL) {
		fprintf(stderr, "test_fashion_mnist: skipped, dataset-fashion-mnist is not installed\n");
		return;
	}
	ck_assert_int_eq(pp_dataset_open_dir(fm, "train", &train), 0);
	ck_assert_int_eq(pp_dataset_open_dir(fm, "test", &test), 0);
	ck_assert_uint_eq(pp_dataset_info(train)->count, 60000);
	ck_assert_uint_eq(pp_dataset_info(test)->count, 10000);
	ck_assert_uint_eq(pp_dataset_info(train)->sample_bytes, 784);
	ck_assert_uint_eq(pp_dataset_info(train)->num_classes, 10);
	for (int i = 0; i < 60000; i++)
		counts[pp_dataset_labels(train)[i]]++;
	for (int k = 0; k < 10; k++)
		ck_assert_int_eq(counts[k], 6000);

	ck_assert_int_gt(asprintf(&gzpath, "%s/t10k-images-idx3-ubyte.gz", fm), 0);
	ref = malloc(16 + 10000 * 784);
	f = gzopen(gzpath, "rb");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(gzread(f, ref, 16 + 10000 * 784), 16 + 10000 * 784);
	gzclose(f);
	ck_assert_mem_eq(pp_dataset_samples(test), ref + 16, 10000 * 784);

	dir = pp_test_tmpdir();
	p0 = path_in(dir, "fm-train-0.pps");
	p1 = path_in(dir, "fm-test-0.pps");
	write_shard(train, p0, 1024, 1, 2);
	write_shard(test, p1, 1000, 0, 0);
	paths[0] = p0;
	paths[1] = p1;
	ck_assert_int_eq(pp_dataset_open_shards(paths, 2, &back), 0);
	ck_assert_mem_eq(pp_dataset_samples(back), pp_dataset_samples(train), 60000 * 784);
	ck_assert_mem_eq((const uint8_t *)pp_dataset_samples(back) + 60000 * 784,
			 pp_dataset_samples(test), 10000 * 784);
	ck_assert_mem_eq(pp_dataset_labels(back), pp_dataset_labels(train), 60000 * 4);
	ck_assert_mem_eq(pp_dataset_labels(back) + 60000, pp_dataset_labels(test), 10000 * 4);
	pp_dataset_destroy(back);
	pp_dataset_destroy(train);
	pp_dataset_destroy(test);
	free(ref);
	free(gzpath);
	pp_test_rmtree(dir);
	free(p0);
	free(p1);
	free(dir);
}
END_TEST

/* ------------------------------------------------------- version 2: records */

/* The bytes of record r of the test sets: its length is lens[r], its bytes a function of r. */
static void record_bytes(uint64_t r, uint8_t *buf, size_t len)
{
	pp_test_fill_random(buf, len, 1000 + r);
}

static int32_t record_label(uint64_t r)
{
	return (int32_t)((r * 7 + 3) % 10);
}

/* The layout of the test sets: a u8 image and a u16 mask. */
static struct pp_layout test_layout(void)
{
	struct pp_layout lay = {.nfields = 2, .fields = {
		{.name = "image", .dtype = PP_DTYPE_U8, .ndim = 3, .shape = {3, 4, 5}, .normalize = true},
		{.name = "mask", .dtype = PP_DTYPE_U16, .ndim = 1, .shape = {7}}}};

	return lay;
}

/*
 * Writes a version 2 shard at path of n records of lens[r] bytes each (with
 * labels or not, records_per_chunk R, zlib 'level', 'threads', bound
 * max_record, decoder "bytes").
 */
static void write_records(const char *path, const size_t *lens, uint64_t n, bool labels,
			  uint32_t R, int level, uint32_t threads, uint32_t max_record)
{
	struct pp_sample_info info = {.label_kind = labels ? PP_LABEL_CLASS : PP_LABEL_NONE,
				      .num_classes = labels ? 10 : 0};
	struct pp_layout lay = test_layout();
	struct pp_shard_writer_config cfg = {.info = &info, .records_per_chunk = R, .level = level,
					     .threads = threads, .layout = &lay, .decoder = "bytes",
					     .max_record_bytes = max_record};
	struct pp_shard_writer *w;
	size_t big = 0;
	uint8_t *buf;

	for (uint64_t r = 0; r < n; r++)
		big = PP_MAX(big, lens[r]);
	buf = malloc(big + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pp_shard_writer_create(path, &cfg, &w), 0);
	for (uint64_t r = 0; r < n; r++) {
		record_bytes(r, buf, lens[r]);
		ck_assert_msg(pp_shard_writer_add_record(w, buf, lens[r], record_label(r)) == 0,
			      "record %llu: %s", (unsigned long long)r, pp_last_error());
	}
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	pp_shard_writer_destroy(w);
	free(buf);
}

/* What check_record compares each record against, and counts. */
struct record_check {
	const size_t *lens;
	bool labels;
	uint64_t next;
	uint8_t *want;
};

static int check_record(void *arg, uint64_t record, const void *bytes, size_t len, int32_t label)
{
	struct record_check *c = arg;

	ck_assert_uint_eq(record, c->next);
	ck_assert_uint_eq(len, c->lens[record]);
	record_bytes(record, c->want, len);
	ck_assert_msg(len == 0 || memcmp(bytes, c->want, len) == 0, "record %llu differs",
		      (unsigned long long)record);
	ck_assert_int_eq(label, c->labels ? record_label(record) : -1);
	c->next++;
	return 0;
}

static int stop_at_three(void *arg, uint64_t record, const void *bytes, size_t len, int32_t label)
{
	*(uint64_t *)arg = record;
	return record == 3 ? -ECANCELED : 0;
}

/*
 * Fails if records of any length (0 bytes, 1 byte, one over the 4 MiB chunk
 * target, hundreds per chunk over several chunks), with and without labels,
 * stored and zlib, on 1 and 3 threads, do not read back byte for byte with
 * their labels, through pp_shard_read_records() and through the loader's
 * path (pp_shard_decode_chunk + pp_shard_record); if a chunk passes its
 * record count or its 4 MiB (but for a single record), or closes before it
 * had to; if 3 threads write other bytes than 1; or if the header's layout,
 * decoder and bound are not given back.
 */
START_TEST(test_shard_records_roundtrip)
{
	char *dir = pp_test_tmpdir(), *p = path_in(dir, "rec.pps");
	const char *paths[1] = {p};
	uint64_t n = 2600;
	size_t *lens = malloc(n * sizeof(*lens)), big = (size_t)9 << 19; /* 4.5 MiB */
	struct record_check c = {.lens = lens, .want = malloc(big + 1)};
	uint8_t *one_thread[4] = {NULL};
	size_t one_len[4] = {0};

	ck_assert_ptr_nonnull(lens);
	for (uint64_t r = 0; r < n; r++)
		lens[r] = r % 5 == 0 ? 0 : r % 7 == 0 ? 1 : (r * 2654435761u) % 3001;
	lens[1000] = big;
	lens[1001] = 3 << 20; /* 3 MiB: with the next ones, past the target */
	lens[1002] = (size_t)3 << 19;
	for (int v = 0; v < 8; v++) {
		bool labels = v & 1;
		int level = v & 2 ? 6 : 0;
		uint32_t threads = v & 4 ? 3 : 1, R = 300;
		struct pp_shard *sh;
		struct pp_shard_chunk_info ci;
		const struct pp_layout *lay;
		struct pp_dataset *ds = NULL;
		uint64_t total = 0;

		write_records(p, lens, n, labels, R, level, threads, 0);
		/* 3 threads write the bytes that 1 does. */
		if (threads == 1) {
			one_thread[v & 3] = pp_test_read_file(p, &one_len[v & 3]);
		} else {
			size_t got_len;
			uint8_t *got = pp_test_read_file(p, &got_len);

			ck_assert_uint_eq(got_len, one_len[v & 3]);
			ck_assert(memcmp(got, one_thread[v & 3], got_len) == 0);
			free(got);
		}
		ck_assert_int_eq(pp_shard_open(p, &sh), 0);
		ck_assert_uint_eq(pp_shard_version(sh), 2);
		ck_assert_str_eq(pp_shard_decoder(sh), "bytes");
		ck_assert_uint_eq(pp_shard_max_record(sh), 64u << 20);
		ck_assert_uint_eq(pp_shard_info(sh)->count, n);
		ck_assert_int_eq(pp_shard_info(sh)->dtype, PP_DTYPE_U8);
		ck_assert_uint_eq(pp_shard_info(sh)->ndim, 3);
		ck_assert_uint_eq(pp_shard_info(sh)->shape[2], 5);
		ck_assert_uint_eq(pp_shard_info(sh)->sample_bytes, 60);
		ck_assert_int_eq(pp_shard_info(sh)->label_kind,
				 labels ? PP_LABEL_CLASS : PP_LABEL_NONE);
		lay = pp_shard_layout(sh);
		ck_assert_uint_eq(lay->nfields, labels ? 3 : 2);
		ck_assert_str_eq(lay->fields[0].name, "image");
		ck_assert(lay->fields[0].normalize);
		ck_assert_str_eq(lay->fields[1].name, "mask");
		ck_assert_int_eq(lay->fields[1].dtype, PP_DTYPE_U16);
		ck_assert_uint_eq(lay->fields[1].shape[0], 7);
		ck_assert(!lay->fields[1].normalize);
		if (labels) {
			ck_assert_str_eq(lay->fields[2].name, "labels");
			ck_assert_int_eq(lay->fields[2].dtype, PP_DTYPE_I32);
			ck_assert_uint_eq(lay->fields[2].ndim, 0);
		}
		c.labels = labels;
		c.next = 0;
		for (uint64_t i = 0; i < pp_shard_chunk_count(sh); i++) {
			uint64_t first, bytes = 0;

			ck_assert_int_eq(pp_shard_chunk(sh, i, &ci), 0);
			first = ci.first_record;
			ck_assert_uint_eq(first, c.next);
			ck_assert_uint_ge(ci.records, 1);
			ck_assert_uint_le(ci.records, R);
			for (uint64_t r = first; r < first + ci.records; r++)
				bytes += lens[r];
			ck_assert_uint_eq(ci.raw_size, (labels ? 8 : 4) * (uint64_t)ci.records + bytes);
			if (ci.records > 1)
				ck_assert_uint_le(ci.raw_size, 4u << 20);
			/* Closed early only because the next record would pass 4 MiB. */
			if (ci.records < R && i + 1 < pp_shard_chunk_count(sh))
				ck_assert_uint_gt(ci.raw_size + (labels ? 8 : 4) + lens[first + ci.records],
						  4u << 20);
			ck_assert_int_eq(pp_shard_read_records(sh, i, check_record, &c), 0);
			total += ci.records;
		}
		ck_assert_uint_eq(c.next, n);
		ck_assert_uint_eq(total, n);
		ck_assert_uint_gt(pp_shard_chunk_count(sh), n / R + 2);
		/* The loader's path: its own read, decode, and record look-up. */
		{
			struct pp_inflater *inf;
			int fd = open(p, O_RDONLY);
			uint64_t i = pp_shard_chunk_count(sh) / 2;

			ck_assert_int_ge(fd, 0);
			ck_assert_int_eq(pp_inflater_create(&inf), 0);
			ck_assert_int_eq(pp_shard_chunk(sh, i, &ci), 0);
			{
				uint8_t *stored = malloc(ci.stored_size + 1), *raw = malloc(ci.raw_size + 1);
				size_t lb = pp_shard_label_bytes(sh, ci.records);

				ck_assert_int_eq(pread(fd, stored, ci.stored_size, (off_t)ci.offset),
						 (ssize_t)ci.stored_size);
				ck_assert_int_eq(pp_shard_decode_chunk(sh, i, stored, raw, inf), 0);
				ck_assert_uint_eq(lb, labels ? 4 * ci.records : 0);
				for (uint32_t r = 0; r < ci.records; r++) {
					size_t len;
					const uint8_t *b = pp_shard_record(raw, ci.records, lb, r, &len);
					uint64_t rec = ci.first_record + r;

					ck_assert_uint_eq(len, lens[rec]);
					record_bytes(rec, c.want, len);
					ck_assert(len == 0 || memcmp(b, c.want, len) == 0);
					if (labels)
						ck_assert_int_eq((int32_t)pp_le32(raw + 4 * r),
								 record_label(rec));
				}
				free(stored);
				free(raw);
			}
			pp_inflater_destroy(inf);
			close(fd);
		}
		{
			uint64_t last = 0;

			ck_assert_int_eq(pp_shard_read_records(sh, 0, stop_at_three, &last), -ECANCELED);
			ck_assert_uint_eq(last, 3);
		}
		ck_assert_int_eq(pp_shard_read_records(sh, pp_shard_chunk_count(sh), check_record, &c),
				 -ERANGE);
		ck_assert_int_eq(pp_shard_read_chunk(sh, 0, c.want, NULL), -EINVAL);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "pp_shard_read_records"));
		ck_assert_int_eq(pp_shard_verify(sh), 0);
		pp_shard_close(sh);
		ck_assert_int_eq(pp_dataset_open_shards(paths, 1, &ds), -EPROTONOSUPPORT);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "read them through a loader"));
		ck_assert_ptr_null(ds);
		if (v == 0) {
			/* pp_dataset_open_dir finds a set of them, and refuses it so. */
			char *set = path_in(dir, "rec-train-00000-of-00001.pps");

			ck_assert_int_eq(rename(p, set), 0);
			ck_assert_int_eq(pp_dataset_open_dir(dir, "train", &ds), -EPROTONOSUPPORT);
			ck_assert_ptr_nonnull(strstr(pp_last_error(), set));
			ck_assert_ptr_nonnull(strstr(pp_last_error(), "read them through a loader"));
			ck_assert_int_eq(unlink(set), 0);
			free(set);
		}
	}
	for (int k = 0; k < 4; k++)
		free(one_thread[k]);
	free(c.want);
	free(lens);
	pp_test_rmtree(dir);
	free(p);
	free(dir);
}
END_TEST

/*
 * Fails if a version 1 shard does not say so (version, layout of "samples"
 * and "labels", no decoder, no bound), or if its records can be read as
 * version 2's; or if a version 2 shard of no records, or of records that the
 * default "raw" decoder names, is not written and read back as such.
 */
START_TEST(test_shard_records_versions)
{
	char *dir = pp_test_tmpdir(), *p;
	size_t len;
	uint8_t *buf = small_shard(dir, &p, &len, 6);
	struct pp_shard *sh;
	const struct pp_layout *lay;
	struct pp_sample_info info = {.label_kind = PP_LABEL_NONE};
	struct pp_layout one = {.nfields = 1, .fields = {{.name = "tokens", .dtype = PP_DTYPE_U32,
							  .ndim = 1, .shape = {9}}}};
	struct pp_shard_writer_config cfg = {.info = &info, .layout = &one};
	struct pp_shard_writer *w;
	uint64_t dummy;
	uint8_t rec[36] = {1, 2, 3};

	ck_assert_int_eq(pp_shard_open(p, &sh), 0);
	ck_assert_uint_eq(pp_shard_version(sh), 1);
	ck_assert_ptr_null(pp_shard_decoder(sh));
	ck_assert_uint_eq(pp_shard_max_record(sh), 0);
	lay = pp_shard_layout(sh);
	ck_assert_uint_eq(lay->nfields, 2);
	ck_assert_str_eq(lay->fields[0].name, "samples");
	ck_assert_int_eq(lay->fields[0].dtype, PP_DTYPE_U8);
	ck_assert_uint_eq(lay->fields[0].ndim, 3);
	ck_assert_uint_eq(lay->fields[0].shape[1], 5);
	ck_assert(lay->fields[0].normalize);
	ck_assert_str_eq(lay->fields[1].name, "labels");
	ck_assert_int_eq(lay->fields[1].dtype, PP_DTYPE_I32);
	ck_assert_int_eq(pp_shard_read_records(sh, 0, stop_at_three, &dummy), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "pp_shard_read_chunk"));
	pp_shard_close(sh);

	/* No records at all; then one, the default decoder's "raw" and bound. */
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), 0);
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	pp_shard_writer_destroy(w);
	ck_assert_int_eq(open_and_verify(p), 0);
	ck_assert_int_eq(pp_shard_open(p, &sh), 0);
	ck_assert_uint_eq(pp_shard_chunk_count(sh), 0);
	ck_assert_uint_eq(pp_shard_info(sh)->count, 0);
	ck_assert_str_eq(pp_shard_decoder(sh), "raw");
	ck_assert_uint_eq(pp_shard_info(sh)->sample_bytes, 36);
	ck_assert_uint_eq(pp_shard_layout(sh)->nfields, 1);
	pp_shard_close(sh);
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), 0);
	ck_assert_int_eq(pp_shard_writer_add_record(w, rec, sizeof(rec), 99), 0);
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	pp_shard_writer_destroy(w);
	ck_assert_int_eq(pp_shard_open(p, &sh), 0);
	ck_assert_uint_eq(pp_shard_chunk_count(sh), 1);
	ck_assert_uint_eq(pp_shard_max_record(sh), 64u << 20);
	{
		size_t lens[1] = {sizeof(rec)};
		struct record_check c = {.lens = lens, .want = malloc(sizeof(rec))};

		/* check_record compares against record_bytes(0): make rec so. */
		record_bytes(0, rec, sizeof(rec));
		pp_shard_close(sh);
		ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), 0);
		ck_assert_int_eq(pp_shard_writer_add_record(w, rec, sizeof(rec), 0), 0);
		ck_assert_int_eq(pp_shard_writer_finish(w), 0);
		pp_shard_writer_destroy(w);
		ck_assert_int_eq(pp_shard_open(p, &sh), 0);
		ck_assert_int_eq(pp_shard_read_records(sh, 0, check_record, &c), 0);
		ck_assert_uint_eq(c.next, 1);
		free(c.want);
	}
	pp_shard_close(sh);
	free(buf);
	pp_test_rmtree(dir);
	free(p);
	free(dir);
}
END_TEST

/*
 * Fails if the version 2 writer takes what it must refuse (a record over
 * its bound, a label out of range, fixed-size samples, a bad decoder name,
 * a bad layout, a field named "labels" beside the labels, too many fields,
 * a bound over 1 GiB), if a refused record is added anyway, or if a version
 * 1 writer takes records.
 */
START_TEST(test_shard_records_writer_errors)
{
	char *dir = pp_test_tmpdir(), *p = path_in(dir, "w.pps");
	struct pp_sample_info info = {.label_kind = PP_LABEL_CLASS, .num_classes = 3};
	struct pp_sample_info v1info = {.dtype = PP_DTYPE_U8, .ndim = 1, .shape = {4},
					.label_kind = PP_LABEL_NONE};
	struct pp_layout lay = test_layout(), bad;
	struct pp_shard_writer_config cfg = {.info = &info, .layout = &lay, .max_record_bytes = 10};
	struct pp_shard_writer_config v1 = {.info = &v1info};
	struct pp_shard_writer *w;
	struct pp_shard *sh;
	uint8_t rec[11] = {0};
	int32_t label = 0;
	struct {
		const char *decoder;
		const char *says;
	} names[] = {{"", "decoder name"}, {"a b", "decoder name"},
		     {"0123456789012345678901234567890123", "decoder name"}};

	ck_assert_int_eq(pp_shard_writer_create(p, &v1, &w), 0);
	ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 4, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "version 1"));
	pp_shard_writer_destroy(w);

	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), 0);
	ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 11, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "record 0 of 11 bytes, the shard's bound is 10"));
	ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 10, 3), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "label 3 of record 0, expected 0..2"));
	ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 10, -1), -EINVAL);
	ck_assert_int_eq(pp_shard_writer_add_record(w, NULL, 1, 0), -EINVAL);
	ck_assert_int_eq(pp_shard_writer_add(w, rec, &label, 1), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "pp_shard_writer_add_record"));
	ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 10, 2), 0);
	ck_assert_int_eq(pp_shard_writer_add_record(w, NULL, 0, 1), 0);
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 1, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "already finished"));
	pp_shard_writer_destroy(w);
	ck_assert_int_eq(pp_shard_open(p, &sh), 0);
	ck_assert_uint_eq(pp_shard_info(sh)->count, 2);
	ck_assert_uint_eq(pp_shard_max_record(sh), 10);
	ck_assert_int_eq(pp_shard_verify(sh), 0);
	pp_shard_close(sh);

	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		cfg.decoder = names[k].decoder;
		ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), names[k].says));
		ck_assert_ptr_nonnull(strstr(pp_last_error(), p));
	}
	cfg.decoder = NULL;
	cfg.max_record_bytes = (1u << 30) + 1;
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "records of at most"));
	cfg.max_record_bytes = 0;

	bad = lay;
	bad.nfields = 0;
	cfg.layout = &bad;
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "0 fields"));
	bad = lay;
	bad.fields[1].dtype = PP_DTYPE_I64;
	bad.fields[1].normalize = true;
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "field 1 (mask): normalize on i64"));
	bad = lay;
	snprintf(bad.fields[1].name, sizeof(bad.fields[1].name), "labels");
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "a field named \"labels\""));
	bad = lay;
	bad.nfields = PP_MAX_FIELDS;
	for (uint32_t f = 0; f < PP_MAX_FIELDS; f++) {
		bad.fields[f] = lay.fields[0];
		snprintf(bad.fields[f].name, sizeof(bad.fields[f].name), "f%u", f);
	}
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "8 fields and the labels"));
	/* Eight fields without labels fill the header's table. */
	info.label_kind = PP_LABEL_NONE;
	info.num_classes = 0;
	ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), 0);
	ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 5, 0), 0);
	ck_assert_int_eq(pp_shard_writer_finish(w), 0);
	pp_shard_writer_destroy(w);
	ck_assert_int_eq(pp_shard_open(p, &sh), 0);
	ck_assert_uint_eq(pp_shard_layout(sh)->nfields, PP_MAX_FIELDS);
	ck_assert_str_eq(pp_shard_layout(sh)->fields[7].name, "f7");
	pp_shard_close(sh);
	ck_assert_int_eq(unlink(p), 0);

	/* A full disk at the third chunk's write: the error sticks, no file is left. */
	{
		struct pp_fault_plan plan;
		struct stat st;

		ck_assert_int_eq(pp_fault_init(&plan), 0);
		pp_fault_arm(&plan, PP_FAULT_WRITE, -ENOSPC, 2, 0);
		pp_fault_set(&plan);
		cfg.records_per_chunk = 2;
		cfg.level = 1;
		cfg.threads = 2;
		ck_assert_int_eq(pp_shard_writer_create(p, &cfg, &w), 0);
		for (int r = 0; r < 4; r++)
			ck_assert_int_eq(pp_shard_writer_add_record(w, rec, (size_t)r, 0), 0);
		/* Slots of 2 chunks of 2 records: the 4th record flushes the first two
		 * chunks (one write each, both pass), the 8th the next two (the first fails). */
		for (int r = 4; r < 7; r++)
			ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 5, 0), 0);
		ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 5, 0), -ENOSPC);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "write of"));
		ck_assert_int_eq(pp_shard_writer_add_record(w, rec, 5, 0), -ENOSPC);
		ck_assert_ptr_nonnull(strstr(pp_last_error(), "an earlier write failed"));
		ck_assert_int_eq(pp_shard_writer_finish(w), -ENOSPC);
		pp_shard_writer_destroy(w);
		pp_fault_set(NULL);
		pp_fault_fini(&plan);
		ck_assert_int_ne(stat(p, &st), 0);
	}
	ck_assert_int_eq(rmdir(dir), 0); /* empty: no temporary left either */
	free(p);
	free(dir);
}
END_TEST

/* Makes every CRC-32 of a version 2 shard right again (header, chunks, index, trailer). */
static void fix_v2_crcs(uint8_t *f, size_t len)
{
	uint8_t *t = f + len - PP_ST_SIZE;
	uint64_t index_offset = pp_le64(t + PP_ST_INDEX_OFFSET), n = pp_le64(t + PP_ST_CHUNKS);

	pp_put_le32(f + PP_SH2_CRC, pp_crc32(0, f, PP_SH2_CRC));
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *e = f + index_offset + i * PP_SI_SIZE;

		pp_put_le32(e + PP_SI_CRC, pp_crc32(0, f + pp_le64(e + PP_SI_OFFSET),
						     pp_le32(e + PP_SI_STORED)));
	}
	pp_put_le32(t + PP_ST_INDEX_CRC, pp_crc32(0, f + index_offset, n * PP_SI_SIZE));
	pp_put_le32(t + PP_ST_CRC, pp_crc32(0, t, PP_ST_CRC));
}

/* A small version 2 shard, stored: 40 records of 0..76 bytes with labels, 16 a chunk, bound 80. */
static uint8_t *small_records(const char *dir, char **path_p, size_t *len_p, int level,
			      size_t *lens)
{
	char *p = path_in(dir, "small2.pps");

	for (int r = 0; r < 40; r++)
		lens[r] = (size_t)(r * 37 % 77);
	write_records(p, lens, 40, true, 16, level, 2, 80);
	*path_p = p;
	return pp_test_read_file(p, len_p);
}

/* Writes t (a changed copy of buf) with its CRCs made right, opens and verifies it. */
static int damaged(const char *p, uint8_t *t, size_t len)
{
	fix_v2_crcs(t, len);
	pp_test_write_file(p, t, len);
	return open_and_verify(p);
}

static void assert_says(const char *what, const char *a, const char *b)
{
	ck_assert_msg(strstr(pp_last_error(), a) != NULL && (b == NULL || strstr(pp_last_error(), b)),
		      "%s: '%s' does not say '%s'%s%s", what, pp_last_error(), a,
		      b != NULL ? " and " : "", b != NULL ? b : "");
}

/*
 * Fails if a damaged version 2 shard is accepted (with its CRCs made right,
 * so that the checks behind them are reached), or its message does not name
 * the file and the place: an END that goes back, one over the bound, a last
 * END short of the records, a raw size over the bound, a bad field in the
 * layout (a normalize flag of 2 among them), a bad decoder name length or
 * byte, a version 2 field in version 1's dtype, a chunk count the records
 * cannot make, a last chunk that leaves some of the header's records out.
 */
START_TEST(test_shard_records_damage)
{
	char *dir = pp_test_tmpdir(), *p;
	size_t len, lens[40];
	uint8_t *buf = small_records(dir, &p, &len, 0, lens), *t = malloc(len);
	/* Chunk 0 (stored, at 4096): 16 labels, 16 ENDs, then the bytes. */
	size_t ends = PP_SHARD_ALIGN + 16 * 4;
	uint8_t *f0 = t + PP_SH2_FIELDS;

	ck_assert_int_eq(open_and_verify(p), 0);
	/* A header field changed and its CRC left: the CRC is what is wrong. */
	memcpy(t, buf, len);
	pp_put_le32(t + PP_SH_LABEL_KIND, 7);
	pp_test_write_file(p, t, len);
	ck_assert_int_eq(open_and_verify(p), -EBADMSG);
	assert_says("header CRC", "offset 624: header CRC-32 mismatch", NULL);
	/* Record 2's END before record 1's. */
	memcpy(t, buf, len);
	pp_put_le32(t + ends + 4 * 2, pp_le32(buf + ends + 4 * 1) - 1);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("END back", p, "chunk 0 at offset 4096: record 2: END");
	assert_says("END back", "at byte 72 of the decoded chunk", NULL);
	/* Record 3 over the bound of 80 (the raw size still within 16 x 80). */
	memcpy(t, buf, len);
	pp_put_le32(t + ends + 4 * 3, pp_le32(buf + ends + 4 * 2) + 81);
	for (int r = 4; r < 16; r++)
		pp_put_le32(t + ends + 4 * r, pp_le32(t + ends + 4 * 3));
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("over the bound", "record 3: END", "at most 80 bytes on");
	/* The last END short of the bytes area. */
	memcpy(t, buf, len);
	pp_put_le32(t + ends + 4 * 15, pp_le32(buf + ends + 4 * 15) - 1);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("last END", "chunk 0 at offset 4096: the last record ends at", NULL);
	/* A label outside the classes (the labels block leads the chunk). */
	memcpy(t, buf, len);
	pp_put_le32(t + PP_SHARD_ALIGN + 4 * 5, 10);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("label", "chunk 0 at offset 4096: record 5 has label 10, expected 0..9", NULL);
	/* A lower bound in the header: the raw sizes no longer fit it. */
	memcpy(t, buf, len);
	pp_put_le32(t + PP_SH2_MAX_RECORD, 2);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("raw over bound", "chunk 0 index entry at offset", "raw size");
	pp_put_le32(t + PP_SH2_MAX_RECORD, 0);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("bound 0", "offset 68: records of at most 0 bytes", NULL);
	/* The layout. */
	memcpy(t, buf, len);
	pp_put_le32(f0 + PP_SF_DTYPE, 99);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("dtype", "offset 112: bad layout: field 0 (image): unknown dtype 99", NULL);
	memcpy(t, buf, len);
	pp_put_le32(f0 + PP_SF_SHAPE + 4 * 3, 5);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("shape", "offset 164: field 0: shape[3] is 5 past its 3 dimensions", NULL);
	memcpy(t, buf, len);
	pp_put_le32(f0 + PP_SF_SIZE + PP_SF_NORMALIZE, 1);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("normalize", "field 1 (mask): normalize on u16", NULL);
	memcpy(t, buf, len);
	memset(f0 + PP_SF_NAME, 'a', PP_FIELD_NAME_MAX);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("name", "offset 112: field 0's name is not NUL-terminated", NULL);
	memcpy(t, buf, len);
	memcpy(f0 + PP_SF_SIZE + PP_SF_NAME, "labels", 6);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("labels twice", "name \"labels\" is field 1's too", NULL);
	memcpy(t, buf, len);
	pp_put_le32(t + PP_SH2_NFIELDS, 8);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("nfields", "offset 108: 8 fields, expected 1..7 (and the labels)", NULL);
	memcpy(t, buf, len);
	t[PP_SH2_FIELDS + 5 * PP_SF_SIZE + 9] = 1;
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("unused field", "offset 441: byte 0x01 in unused field entry 5", NULL);
	/* The decoder's name. */
	memcpy(t, buf, len);
	pp_put_le32(t + PP_SH2_DECODER_LEN, 0);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("decoder 0", "offset 72: decoder name of 0 bytes, expected 1..31", NULL);
	pp_put_le32(t + PP_SH2_DECODER_LEN, 32);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("decoder 32", "offset 72: decoder name of 32 bytes", NULL);
	pp_put_le32(t + PP_SH2_DECODER_LEN, 4);
	t[PP_SH2_DECODER + 3] = 0;
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("decoder byte", "offset 79: decoder name byte 0x00", NULL);
	pp_put_le32(t + PP_SH2_DECODER_LEN, 3);
	t[PP_SH2_DECODER + 3] = 's';
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("decoder tail", "offset 79: byte 0x73 after the decoder name of 3 bytes", NULL);
	/* Version 1's dtype field set in version 2. */
	memcpy(t, buf, len);
	pp_put_le32(t + PP_SH_DTYPE, 1);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("v1 dtype", "offset 12: byte 0x01, expected 0", NULL);
	/* 40 records cannot make 41 chunks, nor 2 of at most 16. */
	memcpy(t, buf, len);
	pp_put_le64(t + PP_SH_CHUNKS, 41);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("chunks", "offset 56: 41 chunks, expected 3..40", NULL);
	/* A chunk index entry with records the shard cannot hold. */
	memcpy(t, buf, len);
	{
		uint64_t io = pp_le64(t + len - PP_ST_SIZE + PP_ST_INDEX_OFFSET);

		pp_put_le32(t + io + PP_SI_RECORDS, 17);
		ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
		assert_says("index records", "chunk 0 index entry", "records 0..+17, expected 0..+(1..16)");
		/* the last chunk one record short of the header's 40: the rest unheld */
		memcpy(t, buf, len);
		pp_put_le32(t + io + 2 * PP_SI_SIZE + PP_SI_RECORDS, 7);
		ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
		assert_says("last chunk records", "chunk 2 index entry",
			    "records 32..+7, expected 32..+(1..8), the rest of the shard");
	}
	/* A field's normalize flag neither 0 nor 1. */
	memcpy(t, buf, len);
	pp_put_le32(f0 + PP_SF_NORMALIZE, 2);
	ck_assert_int_eq(damaged(p, t, len), -EBADMSG);
	assert_says("normalize 2", "offset 168: field 0: normalize 2 and reserved 0", NULL);
	ck_assert_ptr_null(NULL);
	free(t);
	free(buf);
	pp_test_rmtree(dir);
	free(p);
	free(dir);
}
END_TEST

/*
 * Fails if a version 2 shard (stored, then zlib) with any one byte changed
 * is accepted by open + verify, or if the message does not name the file
 * and the part (header field, header padding, chunk, index, trailer); or if
 * one cut short at any byte is accepted, or not said to be truncated.
 */
START_TEST(test_shard_records_flipped_truncated)
{
	char *dir = pp_test_tmpdir(), *p;
	size_t len, lens[40];
	int levels[2] = {0, 6};

	for (int v = 0; v < 2; v++) {
		uint8_t *buf = small_records(dir, &p, &len, levels[v], lens);
		uint64_t index_offset = pp_le64(buf + len - PP_ST_SIZE + PP_ST_INDEX_OFFSET);
		int fd = open(p, O_RDWR);

		ck_assert_int_ge(fd, 0);
		ck_assert_uint_gt(len, 3 * PP_SHARD_ALIGN);
		for (size_t k = 0; k < len; k++) {
			uint8_t b = buf[k] ^ 0xff;
			const char *place = k < PP_SH2_SIZE ? "offset " : k < PP_SHARD_ALIGN ?
					    "header padding" : k < index_offset ? "chunk " :
					    k < len - PP_ST_SIZE ? "index" : "trailer";
			int ret;

			ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)k), 1);
			ret = open_and_verify(p);
			ck_assert_msg(ret == -EBADMSG || (k >= 8 && k < 12 && ret == -EPROTONOSUPPORT),
				      "level %d, byte %zu flipped: returned %d", levels[v], k, ret);
			ck_assert_msg(strncmp(pp_last_error(), p, strlen(p)) == 0, "byte %zu: %s", k,
				      pp_last_error());
			ck_assert_msg(strstr(pp_last_error(), place) != NULL,
				      "byte %zu: '%s' does not say '%s'", k, pp_last_error(), place);
			ck_assert_int_eq(pwrite(fd, buf + k, 1, (off_t)k), 1);
		}
		close(fd);
		ck_assert_int_eq(open_and_verify(p), 0);
		for (size_t n = len; n-- > 0;) {
			ck_assert_int_eq(truncate(p, (off_t)n), 0);
			ck_assert_msg(open_and_verify(p) == -EBADMSG, "truncated to %zu: accepted", n);
			ck_assert_msg(strstr(pp_last_error(), n == 0 ? "empty file" :
					     n < PP_SHARD_ALIGN + PP_ST_SIZE ? "truncated" : "trailer"),
				      "truncated to %zu: %s", n, pp_last_error());
		}
		free(buf);
		free(p);
	}
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("datasets");
	TCase *tc = tcase_create("sources");
	TCase *damage = tcase_create("damage");
	TCase *real = tcase_create("fashion-mnist");

	/* test_random_split's million reads take over 4 s under ThreadSanitizer on a busy machine. */
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_synthetic);
	tcase_add_test(tc, test_synthetic_bad_config);
	tcase_add_test(tc, test_random_split);
	tcase_add_test(tc, test_concurrent_reads);
	tcase_add_test(tc, test_idx_to_shards_roundtrip);
	tcase_add_test(tc, test_shard_variants);
	tcase_add_test(tc, test_shard_decode_chunk);
	tcase_add_test(tc, test_cifar10);
	tcase_add_test(tc, test_missing_and_empty);
	tcase_add_test(tc, test_writer_errors);
	tcase_add_test(tc, test_writer_threads_identical);
	tcase_add_test(tc, test_shard_records_roundtrip);
	tcase_add_test(tc, test_shard_records_versions);
	tcase_add_test(tc, test_shard_records_writer_errors);
	suite_add_tcase(s, tc);

	tcase_set_timeout(damage, 60);
	tcase_add_test(damage, test_shard_truncated_everywhere);
	tcase_add_test(damage, test_shard_flipped_everywhere);
	tcase_add_test(damage, test_shard_bad_fields);
	tcase_add_test(damage, test_idx_damage);
	tcase_add_test(damage, test_no_labels_read_minus_one);
	tcase_add_test(damage, test_open_dir_one_shard_set);
	tcase_add_test(damage, test_shard_find);
	tcase_add_test(damage, test_gzip_damage);
	tcase_add_test(damage, test_gzip_absurd_header);
	tcase_add_test(damage, test_shard_records_damage);
	tcase_add_test(damage, test_shard_records_flipped_truncated);
	suite_add_tcase(s, damage);

	tcase_set_timeout(real, 60);
	tcase_add_test(real, test_fashion_mnist);
	suite_add_tcase(s, real);
	return s;
}
