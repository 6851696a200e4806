/*
 * tests/test_results.c: pinpipe-train's results: sorting, table, CSV, JSON lines.
 */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"
#include "trainer/results.h"

static struct tr_row row(unsigned run, unsigned epoch, double epoch_s, const char *model)
{
	struct tr_row r;

	memset(&r, 0, sizeof(r));
	r.run = run;
	r.epoch = epoch;
	r.epoch_s = epoch_s;
	r.test_loss = NAN;
	r.val_loss = r.val_acc = NAN;
	r.hidden_pct = NAN;
	r.p.batch_size = 100 * run;
	r.p.lr = 0.01;
	snprintf(r.p.model, sizeof(r.p.model), "%s", model);
	snprintf(r.p.device, sizeof(r.p.device), "cpu");
	snprintf(r.status, sizeof(r.status), "ok");
	return r;
}

/* Runs fn into a memory buffer and returns the text (malloc'd). */
static char *capture(void (*fn)(const struct tr_results *, FILE *), const struct tr_results *res)
{
	char *buf = calloc(1, 65536);
	FILE *f = fmemopen(buf, 65535, "w");

	ck_assert_ptr_nonnull(f);
	fn(res, f);
	fclose(f);
	return buf;
}

static void csv(const struct tr_results *res, FILE *f)
{
	ck_assert_int_eq(tr_results_write_csv(res, f), 0);
}

/* Fails if sorting is not by the named column, both ways, stable, with unknown values last. */
START_TEST(test_sort)
{
	struct tr_results res = { 0 };
	struct tr_row r;

	r = row(1, 1, 3.0, "cnn");
	tr_results_add(&res, &r);
	r = row(1, 2, 1.0, "cnn");
	tr_results_add(&res, &r);
	r = row(2, 1, 2.0, "mlp");
	r.test_loss = 0.5;
	tr_results_add(&res, &r);
	r = row(3, 1, 1.0, "mlp");
	tr_results_add(&res, &r);

	tr_results_sort(&res, "epoch_s");
	ck_assert_uint_eq(res.rows[0].run, 1);
	ck_assert_uint_eq(res.rows[0].epoch, 2);
	ck_assert_uint_eq(res.rows[1].run, 3); /* tie with the row before: order kept */
	ck_assert_uint_eq(res.rows[3].epoch_s, 3.0);
	tr_results_sort(&res, "-batch_size");
	ck_assert_uint_eq(res.rows[0].p.batch_size, 300);
	tr_results_sort(&res, "test_loss");
	ck_assert(res.rows[0].test_loss == 0.5);
	tr_results_sort(&res, "model");
	ck_assert_str_eq(res.rows[0].p.model, "cnn");
	ck_assert(tr_results_valid_column("-hidden_pct"));
	ck_assert(!tr_results_valid_column("speed"));
	tr_results_free(&res);
}
END_TEST

/*
 * Fails if the default order ("") puts one run's epochs out of order, or
 * does not put a grid's runs fastest first by mean epoch_s (not by their
 * fastest epoch), each in epoch order, with a failed run last.
 */
START_TEST(test_sort_default)
{
	struct tr_results res = { 0 };
	struct tr_row r;
	static const unsigned want_one[][2] = { { 1, 1 }, { 1, 2 }, { 1, 3 } };
	static const unsigned want_grid[][2] = { { 3, 1 }, { 3, 2 }, { 1, 1 }, { 1, 2 }, { 2, 0 } };

	/* One run whose epochs got faster: 1, 2, 3 all the same. */
	r = row(1, 1, 3.0, "cnn");
	tr_results_add(&res, &r);
	r = row(1, 2, 1.0, "cnn");
	tr_results_add(&res, &r);
	r = row(1, 3, 2.0, "cnn");
	tr_results_add(&res, &r);
	tr_results_sort(&res, "");
	for (size_t i = 0; i < 3; i++) {
		ck_assert_uint_eq(res.rows[i].run, want_one[i][0]);
		ck_assert_uint_eq(res.rows[i].epoch, want_one[i][1]);
	}
	tr_results_free(&res);

	/* Run 1: mean 2.0 with the fastest epoch of all; run 3: mean 1.5; run 2 failed. */
	r = row(1, 1, 3.5, "cnn");
	tr_results_add(&res, &r);
	r = row(1, 2, 0.5, "cnn");
	tr_results_add(&res, &r);
	r = row(2, 0, NAN, "cnn");
	tr_results_add(&res, &r);
	r = row(3, 1, 1.6, "mlp");
	tr_results_add(&res, &r);
	r = row(3, 2, 1.4, "mlp");
	tr_results_add(&res, &r);
	tr_results_sort(&res, "");
	for (size_t i = 0; i < 5; i++) {
		ck_assert_uint_eq(res.rows[i].run, want_grid[i][0]);
		ck_assert_uint_eq(res.rows[i].epoch, want_grid[i][1]);
	}
	tr_results_free(&res);
}
END_TEST

/* Fails if the CSV lacks the header, quotes wrongly or prints unknown values. */
START_TEST(test_csv)
{
	struct tr_results res = { 0 };
	struct tr_row r = row(1, 1, 0.5, "conv:6:5,relu");
	char *out;

	snprintf(r.status, sizeof(r.status), "failed: say \"no\"");
	tr_results_add(&res, &r);
	out = capture(csv, &res);
	ck_assert_ptr_nonnull(strstr(out, "run,epoch,train_loss,"));
	ck_assert_ptr_nonnull(strstr(out, ",\"conv:6:5,relu\","));
	ck_assert_ptr_nonnull(strstr(out, ",\"failed: say \"\"no\"\"\"\n"));
	ck_assert_ptr_nonnull(strstr(out, ",0.01,"));
	free(out);
	tr_results_free(&res);
}
END_TEST

/* Fails if a JSON line is not an object with escaped strings, null for unknowns and booleans. */
START_TEST(test_jsonl)
{
	struct tr_row r = row(2, 3, 1.25, "mlp");
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	r.p.pin_memory = true;
	snprintf(r.status, sizeof(r.status), "failed: a\\b \"c\"\n");
	ck_assert_int_eq(tr_results_write_row_jsonl(&r, f), 0);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(buf, "{\"run\":2,\"epoch\":3,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"test_loss\":null,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"epoch_s\":1.25,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"pin_memory\":true,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"status\":\"failed: a\\\\b \\\"c\\\"\\u000a\"}\n"));
	free(buf);
}
END_TEST

/* The table of 'res', sorted as 'sort' says, 'width' wide (malloc'd). */
static char *table(const struct tr_results *res, const char *sort, size_t width)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	tr_results_print_table(res, sort, width, f);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

/* Length of line i (0-based) of text, or 0 where there is none. */
static size_t line_len(const char *text, unsigned i)
{
	for (; i > 0 && text != NULL; i--) {
		text = strchr(text, '\n');
		text = text ? text + 1 : NULL;
	}
	return text ? strcspn(text, "\n") : 0;
}

/*
 * Fails if the table is not aligned under its header, shows NaN instead of
 * "-", or does not name its order in the line above the header.
 */
START_TEST(test_table)
{
	struct tr_results res = { 0 };
	struct tr_row r = row(1, 1, 0.5, "mlp");
	char *out;

	tr_results_add(&res, &r);
	out = table(&res, "", 0);
	ck_assert_msg(strncmp(out, "sorted by the runs' mean epoch_s (fastest run first), then epoch\n",
			      65) == 0, "%s", out);
	/* Header and row: the last column, unpadded, starts at the same place. */
	ck_assert_uint_eq(line_len(out, 1) - strlen("status"), line_len(out, 2) - strlen("ok"));
	ck_assert_uint_gt(line_len(out, 2), 100);
	ck_assert_ptr_null(strstr(out, "nan"));
	ck_assert_ptr_nonnull(strstr(out, "  -  "));
	free(out);
	out = table(&res, "-test_acc", 0);
	ck_assert_msg(strncmp(out, "sorted by test_acc, descending;", 31) == 0, "%s", out);
	free(out);
	out = table(&res, "epoch_s", 0);
	ck_assert_msg(strncmp(out, "sorted by epoch_s, ascending;", 29) == 0, "%s", out);
	free(out);
	tr_results_free(&res);
}
END_TEST

/*
 * Fails if a failed run's long reason widens the good rows, makes a row
 * wider than the width asked for, is cut below TR_STATUS_MIN characters or
 * without "...", or if any line ends in spaces.
 */
START_TEST(test_table_failed_run)
{
	struct tr_results res = { 0 };
	struct tr_row ok = row(1, 1, 0.5, "mlp"), failed = row(2, 0, NAN, "mlp");
	size_t ok_len, base;
	char *out;

	tr_results_add(&res, &ok);
	out = table(&res, "", 0);
	ok_len = line_len(out, 2);
	base = ok_len - strlen("ok"); /* every column and gap before the status */
	free(out);

	memset(failed.status, 'x', sizeof(failed.status) - 1);
	failed.status[sizeof(failed.status) - 1] = '\0';
	memcpy(failed.status, "failed: ", 8);
	tr_results_add(&res, &failed);

	/* Room for 50 characters of status: the failed row takes them, no more. */
	out = table(&res, "", base + 50);
	ck_assert_uint_eq(line_len(out, 2), ok_len);
	ck_assert_uint_eq(line_len(out, 3), base + 50);
	ck_assert_ptr_nonnull(strstr(out, "xxx...\n"));
	ck_assert_ptr_null(strstr(out, " \n"));
	free(out);

	/* A terminal narrower than the other columns: the status keeps TR_STATUS_MIN. */
	out = table(&res, "", 80);
	ck_assert_uint_eq(line_len(out, 2), ok_len);
	ck_assert_uint_eq(line_len(out, 3), base + TR_STATUS_MIN);
	ck_assert_ptr_null(strstr(out, " \n"));
	free(out);

	/* No limit: the reason whole. */
	out = table(&res, "", 0);
	ck_assert_uint_eq(line_len(out, 3), base + strlen(failed.status));
	ck_assert_uint_eq(line_len(out, 2), ok_len);
	free(out);
	tr_results_free(&res);
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("results");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_sort);
	tcase_add_test(tc, test_csv);
	tcase_add_test(tc, test_jsonl);
	tcase_add_test(tc, test_sort_default);
	tcase_add_test(tc, test_table);
	tcase_add_test(tc, test_table_failed_run);
	suite_add_tcase(s, tc);
	return s;
}
