/*
 * tests/test_summary.c: TensorBoard event files, read back by a TFRecord,
 * protobuf and PNG reader written here independently of the writer (PNG
 * through zlib): scalars, images and histograms.
 */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zlib.h>

#include "common/common_impl.h"
#include "pinpipe/summary.h"
#include "tests/testutil.h"

/* One decoded Event: the fields the writer uses. */
struct event {
	double wall_time;
	int64_t step;
	char version[32];
	char tag[64];
	float value;
	int has_value;
	/* Value.image */
	int has_image;
	uint64_t height, width, colorspace;
	uint8_t *png;        /* encoded_image_string (malloc'd) */
	size_t png_len;
	/* Value.histo */
	int has_histo;
	double min, max, num, sum, sum_squares;
	double limit[64], bucket[64];
	size_t n_limit, n_bucket;
};

static uint32_t unmask(uint32_t m)
{
	uint32_t r = m - 0xa282ead8u;

	return (r >> 17) | (r << 15);
}

static uint64_t get_varint(const uint8_t **p, const uint8_t *end)
{
	uint64_t v = 0;

	for (int shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if ((b & 0x80) == 0)
			return v;
	}
	ck_abort_msg("bad varint");
	return 0;
}

static double get_double(const uint8_t *p)
{
	uint64_t bits = pp_le64(p);
	double v;

	memcpy(&v, &bits, 8);
	return v;
}

/* Parses Image { height = 1; width = 2; colorspace = 3; encoded_image_string = 4; }. */
static void parse_image(const uint8_t *p, const uint8_t *end, struct event *ev)
{
	ev->has_image = 1;
	while (p < end) {
		uint64_t key = get_varint(&p, end), len;
		unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);

		if (field >= 1 && field <= 3) {
			ck_assert_uint_eq(wire, 0);
			*(field == 1 ? &ev->height : field == 2 ? &ev->width : &ev->colorspace) =
				get_varint(&p, end);
			continue;
		}
		ck_assert(field == 4 && wire == 2);
		len = get_varint(&p, end);
		ck_assert(len <= (uint64_t)(end - p));
		ev->png = malloc(len);
		memcpy(ev->png, p, len);
		ev->png_len = len;
		p += len;
	}
}

/* Parses HistogramProto { double min..sum_squares = 1..5; packed doubles 6, 7; }. */
static void parse_histo(const uint8_t *p, const uint8_t *end, struct event *ev)
{
	double *scalars[] = { &ev->min, &ev->max, &ev->num, &ev->sum, &ev->sum_squares };

	ev->has_histo = 1;
	while (p < end) {
		uint64_t key = get_varint(&p, end), len;
		unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);
		double *dst;
		size_t *n;

		if (field >= 1 && field <= 5) {
			ck_assert(wire == 1 && end - p >= 8);
			*scalars[field - 1] = get_double(p);
			p += 8;
			continue;
		}
		ck_assert((field == 6 || field == 7) && wire == 2);
		len = get_varint(&p, end);
		ck_assert(len <= (uint64_t)(end - p) && len % 8 == 0 && len / 8 <= 64);
		dst = field == 6 ? ev->limit : ev->bucket;
		n = field == 6 ? &ev->n_limit : &ev->n_bucket;
		for (*n = 0; *n < len / 8; (*n)++)
			dst[*n] = get_double(p + 8 * *n);
		p += len;
	}
}

/* Parses Value { tag = 1; simple_value = 2; image = 4; histo = 5; }, Summary { value = 1; } or Event. */
static void parse(const uint8_t *p, const uint8_t *end, int level, struct event *ev)
{
	while (p < end) {
		uint64_t key = get_varint(&p, end);
		unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);

		if (wire == 1) {
			ck_assert(level == 0 && field == 1);
			ev->wall_time = get_double(p);
			p += 8;
		} else if (wire == 0) {
			ck_assert(level == 0 && field == 2);
			ev->step = (int64_t)get_varint(&p, end);
		} else if (wire == 5) {
			uint32_t bits = pp_le32(p);
			ck_assert(level == 2 && field == 2);
			memcpy(&ev->value, &bits, 4);
			ev->has_value = 1;
			p += 4;
		} else {
			uint64_t len;
			ck_assert_uint_eq(wire, 2);
			len = get_varint(&p, end);
			ck_assert(len <= (uint64_t)(end - p));
			if (level == 0 && field == 3) {
				ck_assert(len < sizeof(ev->version));
				memcpy(ev->version, p, len);
			} else if (level == 0 && field == 5) {
				parse(p, p + len, 1, ev);
			} else if (level == 1 && field == 1) {
				parse(p, p + len, 2, ev);
			} else if (level == 2 && field == 4) {
				parse_image(p, p + len, ev);
			} else if (level == 2 && field == 5) {
				parse_histo(p, p + len, ev);
			} else {
				ck_assert(level == 2 && field == 1 && len < sizeof(ev->tag));
				memcpy(ev->tag, p, len);
			}
			p += len;
		}
	}
}

static void free_events(struct event *evs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(evs[i].png);
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/*
 * Decodes a PNG of 8-bit samples with zlib, checking the signature and each
 * chunk's CRC-32; returns its pixels (malloc'd, rows of width x channels)
 * and writes its size and channel count (from its color type).  Only the
 * filter "none" is taken, as the writer uses.
 */
static uint8_t *png_decode(const uint8_t *png, size_t len, uint32_t *h_p, uint32_t *w_p,
			   uint32_t *ch_p)
{
	static const uint8_t signature[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	uint8_t *idat = NULL, *raw, *pixels;
	size_t idat_len = 0, pos = 8, row;
	uLongf raw_len;
	uint32_t h = 0, w = 0, ch = 0;
	int seen_end = 0;

	ck_assert(len >= 8 && memcmp(png, signature, 8) == 0);
	while (pos < len && !seen_end) {
		uint32_t n = be32(png + pos);
		const uint8_t *type = png + pos + 4, *data = png + pos + 8;

		ck_assert(pos + 12 + (size_t)n <= len);
		ck_assert_uint_eq(be32(data + n), (uint32_t)crc32(crc32(0, type, 4), data, n));
		if (memcmp(type, "IHDR", 4) == 0) {
			ck_assert_uint_eq(n, 13);
			w = be32(data);
			h = be32(data + 4);
			ck_assert_uint_eq(data[8], 8);
			ck_assert(data[9] == 0 || data[9] == 2 || data[9] == 6);
			ch = data[9] == 0 ? 1 : data[9] == 2 ? 3 : 4;
			ck_assert(data[10] == 0 && data[11] == 0 && data[12] == 0);
		} else if (memcmp(type, "IDAT", 4) == 0) {
			idat = realloc(idat, idat_len + n + 1);
			memcpy(idat + idat_len, data, n);
			idat_len += n;
		} else {
			ck_assert(memcmp(type, "IEND", 4) == 0 && n == 0);
			seen_end = 1;
		}
		pos += 12 + (size_t)n;
	}
	ck_assert(seen_end && pos == len && w > 0 && h > 0);
	row = (size_t)w * ch;
	raw_len = (uLongf)((row + 1) * h);
	raw = malloc(raw_len);
	pixels = malloc(row * h);
	ck_assert_int_eq(uncompress(raw, &raw_len, idat, (uLong)idat_len), Z_OK);
	ck_assert_uint_eq(raw_len, (row + 1) * h);
	for (uint32_t y = 0; y < h; y++) {
		ck_assert_uint_eq(raw[y * (row + 1)], 0);
		memcpy(pixels + y * row, raw + y * (row + 1) + 1, row);
	}
	free(raw);
	free(idat);
	*h_p = h;
	*w_p = w;
	*ch_p = ch;
	return pixels;
}

/* Reads every record of an event file, checking the framing and both CRCs. */
static size_t read_events(const char *path, struct event *evs, size_t max)
{
	size_t len, n = 0;
	uint8_t *buf = pp_test_read_file(path, &len);
	const uint8_t *p = buf, *end = buf + len;

	while (p < end) {
		uint64_t rec_len;

		ck_assert_msg(end - p >= 12, "truncated record header");
		rec_len = pp_le64(p);
		ck_assert_uint_eq(unmask(pp_le32(p + 8)), pp_crc32c(0, p, 8));
		p += 12;
		ck_assert(rec_len + 4 <= (uint64_t)(end - p));
		ck_assert_uint_eq(unmask(pp_le32(p + rec_len)), pp_crc32c(0, p, rec_len));
		ck_assert(n < max);
		memset(&evs[n], 0, sizeof(evs[n]));
		parse(p, p + rec_len, 0, &evs[n]);
		n++;
		p += rec_len + 4;
	}
	free(buf);
	return n;
}

/* Fails if CRC-32C is not the Castagnoli function (check value 0xe3069283). */
START_TEST(test_crc32c)
{
	ck_assert_uint_eq(pp_crc32c(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(pp_crc32c(pp_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}
END_TEST

/* Fails if the file is not TFRecord framing with masked CRC-32C, or an event's fields are wrong. */
START_TEST(test_scalars_round_trip)
{
	char *dir = pp_test_tmpdir();
	char sub[4096];
	struct pp_summary_writer *w;
	struct event evs[8];
	size_t n;

	snprintf(sub, sizeof(sub), "%s/run/bs=100", dir);
	ck_assert_int_eq(pp_summary_writer_create(sub, &w), 0);
	ck_assert_ptr_nonnull(strstr(pp_summary_writer_path(w), "/run/bs=100/events.out.tfevents."));
	ck_assert_int_eq(pp_summary_writer_add_scalar(w, "loss/train", 7, 0.25), 0);
	ck_assert_int_eq(pp_summary_writer_add_scalar(w, "accuracy/test", 300, 0.875), 0);
	ck_assert_int_eq(pp_summary_writer_flush(w), 0);
	n = read_events(pp_summary_writer_path(w), evs, 8);
	ck_assert_uint_eq(n, 3);
	ck_assert_str_eq(evs[0].version, "brain.Event:2");
	ck_assert(evs[0].wall_time > 1.7e9);
	ck_assert_str_eq(evs[1].tag, "loss/train");
	ck_assert_int_eq(evs[1].step, 7);
	ck_assert(evs[1].has_value && evs[1].value == 0.25f);
	ck_assert_str_eq(evs[2].tag, "accuracy/test");
	ck_assert_int_eq(evs[2].step, 300);
	ck_assert(evs[2].value == 0.875f);
	free_events(evs, n);
	pp_summary_writer_destroy(w);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if an image does not come back as the PNG of exactly its pixels,
 * with its height, width and colorspace (1 gray, 3 RGB) in the Image
 * message, or if a bad size or channel count is accepted.
 */
START_TEST(test_image_round_trip)
{
	char *dir = pp_test_tmpdir();
	struct pp_summary_writer *w;
	struct event evs[4];
	uint8_t gray[5 * 7], rgb[3 * 2 * 3], *back;
	uint32_t h, wd, ch;
	size_t n;

	for (size_t i = 0; i < sizeof(gray); i++)
		gray[i] = (uint8_t)(i * 7 + 1);
	for (size_t i = 0; i < sizeof(rgb); i++)
		rgb[i] = (uint8_t)(250 - i * 13);
	ck_assert_int_eq(pp_summary_writer_create(dir, &w), 0);
	ck_assert_int_eq(pp_summary_writer_add_image(w, "images/gray", 3, gray, 5, 7, 1), 0);
	ck_assert_int_eq(pp_summary_writer_add_image(w, "images/rgb", 4, rgb, 3, 2, 3), 0);
	ck_assert_int_eq(pp_summary_writer_add_image(w, "images/bad", 4, rgb, 3, 2, 2), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "2 channels"));
	ck_assert_int_eq(pp_summary_writer_add_image(w, "images/bad", 4, rgb, 0, 2, 3), -EINVAL);
	ck_assert_int_eq(pp_summary_writer_flush(w), 0);
	n = read_events(pp_summary_writer_path(w), evs, 4);
	ck_assert_uint_eq(n, 3);

	ck_assert_str_eq(evs[1].tag, "images/gray");
	ck_assert_int_eq(evs[1].step, 3);
	ck_assert(evs[1].has_image && !evs[1].has_value);
	ck_assert(evs[1].height == 5 && evs[1].width == 7 && evs[1].colorspace == 1);
	back = png_decode(evs[1].png, evs[1].png_len, &h, &wd, &ch);
	ck_assert(h == 5 && wd == 7 && ch == 1);
	ck_assert_mem_eq(back, gray, sizeof(gray));
	free(back);

	ck_assert_str_eq(evs[2].tag, "images/rgb");
	ck_assert(evs[2].height == 3 && evs[2].width == 2 && evs[2].colorspace == 3);
	back = png_decode(evs[2].png, evs[2].png_len, &h, &wd, &ch);
	ck_assert(h == 3 && wd == 2 && ch == 3);
	ck_assert_mem_eq(back, rgb, sizeof(rgb));
	free(back);
	free_events(evs, n);
	pp_summary_writer_destroy(w);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Fails if a histogram's min, max, count, sum or sum of squares is wrong,
 * its buckets are not PP_SUMMARY_BUCKETS of equal width named by their
 * right edges, a value lands in the wrong bucket (one on an edge belongs
 * to the bucket on its left), non-finite values are counted, or equal
 * values do not make one bucket.
 */
START_TEST(test_histogram_round_trip)
{
	char *dir = pp_test_tmpdir();
	struct pp_summary_writer *w;
	struct event evs[4];
	float v[64];
	double sum = 0, sq = 0, total = 0;
	const float twos[3] = { 2.0f, 2.0f, 2.0f }, nans[2] = { NAN, INFINITY };
	size_t n;

	/* 0, 1, ..., 59 and two values that are not numbers: 30 buckets of width 59/30. */
	for (int i = 0; i < 60; i++) {
		v[i] = (float)i;
		sum += i;
		sq += (double)i * i;
	}
	v[60] = NAN;
	v[61] = -INFINITY;
	ck_assert_int_eq(pp_summary_writer_create(dir, &w), 0);
	ck_assert_int_eq(pp_summary_writer_add_histogram(w, "params/0.fc.weight", 2, v, 62), 0);
	ck_assert_int_eq(pp_summary_writer_add_histogram(w, "grads/0.fc.bias", 2, twos, 3), 0);
	ck_assert_int_eq(pp_summary_writer_add_histogram(w, "x", 2, nans, 2), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "no finite value"));
	ck_assert_int_eq(pp_summary_writer_flush(w), 0);
	n = read_events(pp_summary_writer_path(w), evs, 4);
	ck_assert_uint_eq(n, 3);

	ck_assert_str_eq(evs[1].tag, "params/0.fc.weight");
	ck_assert_int_eq(evs[1].step, 2);
	ck_assert(evs[1].has_histo && !evs[1].has_value);
	ck_assert(evs[1].min == 0 && evs[1].max == 59 && evs[1].num == 60);
	ck_assert(evs[1].sum == sum && evs[1].sum_squares == sq);
	ck_assert_uint_eq(evs[1].n_limit, PP_SUMMARY_BUCKETS);
	ck_assert_uint_eq(evs[1].n_bucket, PP_SUMMARY_BUCKETS);
	for (size_t b = 0; b < PP_SUMMARY_BUCKETS; b++) {
		double lo = b ? evs[1].limit[b - 1] : -INFINITY, want = 0;

		ck_assert_double_eq_tol(evs[1].limit[b], 59.0 * (double)(b + 1) / 30.0, 1e-9);
		for (int i = 0; i < 60; i++)
			want += i > lo && i <= evs[1].limit[b];
		ck_assert_msg(evs[1].bucket[b] == want, "bucket %zu: %g, expected %g", b,
			      evs[1].bucket[b], want);
		total += evs[1].bucket[b];
	}
	ck_assert(total == 60);
	ck_assert(evs[1].limit[PP_SUMMARY_BUCKETS - 1] == 59.0);

	ck_assert_str_eq(evs[2].tag, "grads/0.fc.bias");
	ck_assert(evs[2].min == 2 && evs[2].max == 2 && evs[2].num == 3 && evs[2].sum == 6);
	ck_assert(evs[2].n_limit == 1 && evs[2].limit[0] == 2 && evs[2].n_bucket == 1 &&
		  evs[2].bucket[0] == 3);
	free_events(evs, n);
	pp_summary_writer_destroy(w);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/* Fails if two writers in one directory share a file, or a bad tag or directory is accepted. */
START_TEST(test_two_writers_and_errors)
{
	char *dir = pp_test_tmpdir();
	char file[4096];
	struct pp_summary_writer *a, *b;

	ck_assert_int_eq(pp_summary_writer_create(dir, &a), 0);
	ck_assert_int_eq(pp_summary_writer_create(dir, &b), 0);
	ck_assert_str_ne(pp_summary_writer_path(a), pp_summary_writer_path(b));
	ck_assert_int_eq(pp_summary_writer_add_scalar(a, "", 1, 1.0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "tag"));
	/* NULL where the contract promises -EINVAL, not a crash. */
	ck_assert_int_eq(pp_summary_writer_add_image(a, "img", 0, NULL, 2, 2, 1), -EINVAL);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "NULL pixels"));
	ck_assert_int_eq(pp_summary_writer_add_image(NULL, "img", 0, (const uint8_t *)"abcd", 2, 2, 1),
			 -EINVAL);
	ck_assert_int_eq(pp_summary_writer_add_scalar(a, NULL, 1, 1.0), -EINVAL);
	ck_assert_int_eq(pp_summary_writer_add_histogram(a, "h", 1, NULL, 3), -EINVAL);
	ck_assert_int_eq(pp_summary_writer_flush(NULL), -EINVAL);
	pp_summary_writer_destroy(a);
	pp_summary_writer_destroy(b);
	pp_summary_writer_destroy(NULL);

	snprintf(file, sizeof(file), "%s/plain", dir);
	pp_test_write_file(file, "x", 1);
	snprintf(file, sizeof(file), "%s/plain/sub", dir);
	ck_assert_int_lt(pp_summary_writer_create(file, &a), 0);
	ck_assert_ptr_nonnull(strstr(pp_last_error(), "plain"));
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * Scalars written in a child whose file size limit (RLIMIT_FSIZE) is
 * below one buffer of records.  Fails if the child is killed by SIGXFSZ
 * (the signal's default) instead of the write failing with -EFBIG and a
 * message naming the limit; if records are refused before a buffer of
 * them waits, or taken after; if SIGXFSZ is left blocked or pending; or
 * if, the limit raised again, the flush does not complete the file: every
 * record taken whole and in order, none lost and none twice.
 */
START_TEST(test_file_size_limit)
{
	char *dir = pp_test_tmpdir();
	const size_t max = 4096;
	struct event *evs;
	char path[4096];
	size_t n, len;
	int status;
	pid_t pid;
	FILE *f;

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* Nothing of Check's here: _exit() with a code the parent names. */
		struct pp_summary_writer *w;
		struct rlimit rl, low;
		sigset_t mask, pending;
		int64_t step = 0, first;
		int ret, code = 0;

		/* what it allocated before the fork freed: valgrind counts it at _exit() */
#define CHILD_EXIT(c) do { free(dir); _exit(c); } while (0)
		if (getrlimit(RLIMIT_FSIZE, &rl) != 0)
			CHILD_EXIT(10);
		low = rl;
		low.rlim_cur = 10000;
		if (pp_summary_writer_create(dir, &w) != 0 || setrlimit(RLIMIT_FSIZE, &low) != 0)
			CHILD_EXIT(11);
		while ((ret = pp_summary_writer_add_scalar(w, "loss", step, (double)step)) == 0 &&
		       step < (int64_t)max - 10)
			step++;
		if (ret != -EFBIG)
			code = 12;
		else if (strstr(pp_last_error(), "File too large (the process's file size limit, "
						 "RLIMIT_FSIZE") == NULL ||
			 strstr(pp_last_error(), pp_summary_writer_path(w)) == NULL)
			code = 13;
		/* What did not go is kept: records are taken until the buffer is full
		 * again, the one that fills it included; then refused. */
		first = step++;
		while (code == 0 &&
		       (ret = pp_summary_writer_add_scalar(w, "loss", step, (double)step)) == 0 &&
		       step < (int64_t)max - 10)
			step++;
		if (code == 0 && (ret != -EFBIG || step == first + 1 ||
				  pp_summary_writer_add_scalar(w, "loss", step + 1, 0.0) != -EFBIG ||
				  pp_summary_writer_flush(w) != -EFBIG))
			code = 14;
		if (code == 0 &&
		    (pthread_sigmask(SIG_SETMASK, NULL, &mask) != 0 || sigismember(&mask, SIGXFSZ) ||
		     sigpending(&pending) != 0 || sigismember(&pending, SIGXFSZ)))
			code = 15;
		/* the limit raised before anything is said (stderr may be a file past it) */
		if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
			CHILD_EXIT(16);
		if (code != 0) {
			fprintf(stderr, "step %lld: %d: %s\n", (long long)step, ret, pp_last_error());
			CHILD_EXIT(code);
		}
		if (pp_summary_writer_flush(w) != 0)
			CHILD_EXIT(17);
		snprintf(path, sizeof(path), "%s/last", dir);
		f = fopen(path, "w");
		if (f == NULL || fprintf(f, "%lld", (long long)step) < 0 || fclose(f) != 0)
			CHILD_EXIT(18);
		snprintf(path, sizeof(path), "%s/path", dir);
		f = fopen(path, "w");
		if (f == NULL || fputs(pp_summary_writer_path(w), f) < 0 || fclose(f) != 0)
			CHILD_EXIT(19);
		pp_summary_writer_destroy(w);
		CHILD_EXIT(0);
#undef CHILD_EXIT
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(!WIFSIGNALED(status), "the writing child was killed by signal %d%s",
		      WTERMSIG(status), WTERMSIG(status) == SIGXFSZ ? " (SIGXFSZ)" : "");
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exit %d",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	evs = calloc(max, sizeof(*evs));
	ck_assert_ptr_nonnull(evs);
	{
		char *text, *events;
		long long last;

		snprintf(path, sizeof(path), "%s/last", dir);
		text = pp_test_read_file(path, &len);
		ck_assert_int_eq(sscanf(text, "%lld", &last), 1);
		free(text);
		snprintf(path, sizeof(path), "%s/path", dir);
		events = pp_test_read_file(path, &len);
		free(pp_test_read_file(events, &len));
		ck_assert_uint_gt(len, 10000);
		n = read_events(events, evs, max);
		free(events);
		/* the version, then steps 0..last: the one that met the limit kept */
		ck_assert_uint_eq(n, (size_t)last + 2);
		for (size_t i = 1; i < n; i++) {
			ck_assert_str_eq(evs[i].tag, "loss");
			ck_assert_int_eq(evs[i].step, (int64_t)i - 1);
			ck_assert(evs[i].value == (float)(i - 1));
		}
	}
	free_events(evs, n);
	free(evs);
	pp_test_rmtree(dir);
	free(dir);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("summary");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_crc32c);
	tcase_add_test(tc, test_scalars_round_trip);
	tcase_add_test(tc, test_image_round_trip);
	tcase_add_test(tc, test_histogram_round_trip);
	tcase_add_test(tc, test_two_writers_and_errors);
	tcase_add_test(tc, test_file_size_limit);
	suite_add_tcase(s, tc);
	return s;
}
