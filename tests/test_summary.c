/*
 * tests/test_summary.c: TensorBoard event files, read back by a TFRecord and
 * protobuf reader written here independently of the writer.
 */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/internal.h"
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

/* Parses Value { tag = 1; simple_value = 2; }, Summary { value = 1; } or Event. */
static void parse(const uint8_t *p, const uint8_t *end, int level, struct event *ev)
{
	while (p < end) {
		uint64_t key = get_varint(&p, end);
		unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);

		if (wire == 1) {
			uint64_t bits = pp_le64(p);
			ck_assert(level == 0 && field == 1);
			memcpy(&ev->wall_time, &bits, 8);
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
			} else {
				ck_assert(level == 2 && field == 1 && len < sizeof(ev->tag));
				memcpy(ev->tag, p, len);
			}
			p += len;
		}
	}
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

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("summary");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_crc32c);
	tcase_add_test(tc, test_scalars_round_trip);
	tcase_add_test(tc, test_two_writers_and_errors);
	suite_add_tcase(s, tc);
	return s;
}
