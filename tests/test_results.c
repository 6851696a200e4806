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
	r.p.ranks = 1;
	r.p.global_batch = r.p.batch_size;
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
 * fastest epoch), each in epoch order, with a failed run last and a run's
 * failure row (epoch 0) after its epochs.
 */
START_TEST(test_sort_default)
{
	struct tr_results res = { 0 };
	struct tr_row r;
	static const unsigned want_one[][2] = { { 1, 1 }, { 1, 2 }, { 1, 3 } };
	static const unsigned want_grid[][2] = { { 3, 1 }, { 3, 2 }, { 3, 0 }, { 1, 1 }, { 1, 2 },
						 { 2, 0 } };

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

	/* Run 1: mean 2.0 with the fastest epoch of all; run 3: mean 1.5, then its checkpoint
	 * could not be saved (its failure row, epoch 0, comes first: after its epochs); run 2
	 * failed before an epoch. */
	r = row(1, 1, 3.5, "cnn");
	tr_results_add(&res, &r);
	r = row(1, 2, 0.5, "cnn");
	tr_results_add(&res, &r);
	r = row(2, 0, NAN, "cnn");
	tr_results_add(&res, &r);
	r = row(3, 0, NAN, "mlp");
	tr_results_add(&res, &r);
	r = row(3, 1, 1.6, "mlp");
	tr_results_add(&res, &r);
	r = row(3, 2, 1.4, "mlp");
	tr_results_add(&res, &r);
	tr_results_sort(&res, "");
	for (size_t i = 0; i < 6; i++) {
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

/* The table of 'res' with the columns 'columns', sorted as 'sort' says, 'width' wide (malloc'd). */
static char *table_of(const struct tr_results *res, const char *sort, const char *columns,
		      size_t width)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	tr_results_print_table(res, sort, columns, width, f);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

/* The table with every column (--columns=all). */
static char *table(const struct tr_results *res, const char *sort, size_t width)
{
	return table_of(res, sort, "all", width);
}

/* Line i (0-based) of text, in a static buffer; "" where there is none. */
static const char *line_of(const char *text, unsigned i)
{
	static char line[4096];

	for (; i > 0 && text != NULL; i--) {
		text = strchr(text, '\n');
		text = text ? text + 1 : NULL;
	}
	snprintf(line, sizeof(line), "%.*s", text ? (int)strcspn(text, "\n") : 0, text ? text : "");
	return line;
}

/* The widest line of text. */
static size_t widest_line(const char *text)
{
	size_t w = 0;

	for (const char *l = text; *l != '\0'; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != '\0'))
		w = strcspn(l, "\n") > w ? strcspn(l, "\n") : w;
	return w;
}

/* A cpu grid's rows: runs 1 and 2 (batch sizes 100, 200), two epochs each, no copy. */
static void cpu_grid(struct tr_results *res, const char *model)
{
	for (unsigned run = 1; run <= 2; run++) {
		for (unsigned epoch = 1; epoch <= 2; epoch++) {
			struct tr_row r = row(run, epoch, 1.5 * run + epoch, model);

			r.train_loss = 0.6 / epoch;
			r.train_acc = 0.8;
			r.test_loss = 0.5 / epoch;
			r.test_acc = 0.85;
			r.run_s = 12.125 * epoch;
			r.samples_per_s = 12345;
			r.wait_s = 0.001;
			r.p.workers = 1;
			r.p.pin_memory = true;
			r.p.threads = 2;
			snprintf(r.p.optimizer, sizeof(r.p.optimizer), "adam");
			snprintf(r.p.blas, sizeof(r.p.blas), "OpenBLAS SkylakeX");
			tr_results_add(res, &r);
		}
	}
}

/*
 * Fails if the default table of a cpu grid shows a column that no row has
 * a figure in (the copies, the validation, the allreduce, the ranks of one
 * process), does not say the parameters every row shares once above the
 * table (and not as columns), or leaves out one that tells the runs apart.
 */
START_TEST(test_table_default)
{
	struct tr_results res = { 0 };
	char *out;
	const char *head;

	cpu_grid(&res, "mlp");
	out = table_of(&res, "", "", 0);
	ck_assert_msg(strncmp(out, "sorted by the runs' mean epoch_s", 32) == 0, "%s", out);
	ck_assert_str_eq(line_of(out, 1), "device=cpu  workers=1  pin_memory=on  lr=0.01  model=mlp  "
			 "optimizer=adam  threads=2  blas=OpenBLAS SkylakeX  status=ok");
	head = line_of(out, 2);
	ck_assert_str_eq(head, "run  epoch  train_loss  train_acc  test_loss  test_acc  epoch_s  "
			 "run_s   samples_per_s  wait_s  batch_size");
	ck_assert_msg(strstr(out, "copy") == NULL && strstr(out, "val_") == NULL &&
		      strstr(out, "hidden_pct") == NULL && strstr(out, "allreduce_s") == NULL &&
		      strstr(out, "ranks") == NULL && strstr(out, "exposed_s") == NULL, "%s", out);
	ck_assert_ptr_null(strstr(out, " \n"));
	ck_assert_ptr_null(strstr(out, "not shown"));
	free(out);

	/* A row that copied: the copy columns are back, with "-" or 0 in the cpu's rows. */
	res.rows[3].copy_s = 0.25;
	res.rows[3].exposed_s = 0.125;
	res.rows[3].hidden_pct = 50;
	snprintf(res.rows[3].p.device, sizeof(res.rows[3].p.device), "sim:bw=25GB/s,call_us=20");
	out = table_of(&res, "", "", 0);
	ck_assert_msg(strstr(line_of(out, 2), "  copy_s  exposed_s  hidden_pct  device") != NULL,
		      "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "sim:bw=25GB/s,call_us=20"));
	ck_assert_ptr_null(strstr(line_of(out, 1), "device="));
	ck_assert_ptr_null(strstr(out, "copy_host_s"));
	free(out);
	tr_results_free(&res);

	/* Several ranks: their count and the global batch, said once. */
	cpu_grid(&res, "mlp");
	for (size_t i = 0; i < res.n; i++) {
		res.rows[i].p.ranks = 2;
		res.rows[i].p.global_batch = 2 * res.rows[i].p.batch_size;
		res.rows[i].allreduce_s = 0.5;
	}
	out = table_of(&res, "", "", 0);
	ck_assert_msg(strstr(line_of(out, 1), "  ranks=2  ") != NULL, "%s", out);
	ck_assert_msg(strstr(line_of(out, 2), "  allreduce_s  batch_size  global_batch") != NULL,
		      "%s", out);
	free(out);
	tr_results_free(&res);

	/* No rows: no table, not a header alone. */
	out = table_of(&res, "", "", 80);
	ck_assert_str_eq(out, "");
	free(out);
}
END_TEST

/*
 * Fails if the default table of a grid is wider than the width asked for
 * (100 here) where leaving out the figures that matter least would fit it,
 * does not say which it left out, leaves out a parameter that tells the
 * runs apart, or does not keep to the width with a long failed status.
 */
START_TEST(test_table_fits)
{
	struct tr_results res = { 0 };
	struct tr_row failed = row(3, 0, NAN, "mlp");
	char *out;

	cpu_grid(&res, "conv:6:5,relu,maxpool:2,flatten,fc:10");
	res.rows[0].p.pin_memory = false; /* run 1 */
	res.rows[1].p.pin_memory = false;
	out = table_of(&res, "", "", 0);
	ck_assert_uint_gt(widest_line(out), 100);
	free(out);
	out = table_of(&res, "", "", 100);
	ck_assert_msg(widest_line(out) <= 100, "%s", out);
	ck_assert_msg(strstr(out, "\nnot shown, to fit the width: train_loss, run_s") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "\nrun  epoch  train_acc  test_loss  test_acc  epoch_s  "
			      "samples_per_s  wait_s  batch_size  pin_memory\n") != NULL, "%s", out);
	ck_assert_ptr_null(strstr(out, " \n"));
	free(out);

	/* Five axes of the grid as columns: the model spec is cut to fit. */
	for (size_t i = 0; i < res.n; i++) {
		res.rows[i].p.workers = 1 + (unsigned)i / 2;
		res.rows[i].p.lr = 0.01 * (1 + (double)(i / 2));
		snprintf(res.rows[i].p.optimizer, sizeof(res.rows[i].p.optimizer), "%s",
			 i / 2 ? "sgd" : "adam");
		if (i / 2)
			snprintf(res.rows[i].p.model, sizeof(res.rows[i].p.model), "mlp");
	}
	out = table_of(&res, "", "", 100);
	ck_assert_msg(widest_line(out) <= 100, "%s", out);
	ck_assert_msg(strstr(out, "  conv:6:5,") != NULL && strstr(out, "...  ") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "  workers  ") != NULL && strstr(out, "  optimizer\n") != NULL &&
		      strstr(out, "  model  ") != NULL, "%s", out);
	free(out);

	/* A failed run's reason: cut to the width, whatever it is. */
	memset(failed.status, 'x', sizeof(failed.status) - 1);
	failed.status[sizeof(failed.status) - 1] = '\0';
	memcpy(failed.status, "failed: ", 8);
	tr_results_add(&res, &failed);
	out = table_of(&res, "", "", 100);
	ck_assert_msg(widest_line(out) <= 100 || strstr(out, "xxx...\n") != NULL, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "xxx...\n"));
	free(out);
	tr_results_free(&res);

	/* One failed run: its status above the table, cut to the width too. */
	tr_results_add(&res, &failed);
	out = table_of(&res, "", "", 100);
	ck_assert_msg(widest_line(out) <= 100, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, " status=failed: xxx"));
	free(out);
	tr_results_free(&res);
}
END_TEST

/*
 * Fails if --columns=LIST does not show those columns alone, in its
 * order, or a bad list is taken.
 */
START_TEST(test_table_columns)
{
	struct tr_results res = { 0 };
	char *out, bad[64] = "";

	cpu_grid(&res, "mlp");
	out = table_of(&res, "", "test_acc,epoch,device", 0);
	ck_assert_str_eq(line_of(out, 1), "test_acc  epoch  device");
	ck_assert_str_eq(line_of(out, 2), "  0.8500      1  cpu");
	ck_assert_str_eq(line_of(out, 6), "");
	free(out);
	ck_assert(tr_results_valid_columns("all", bad, sizeof(bad)));
	ck_assert(tr_results_valid_columns("epoch,status", bad, sizeof(bad)));
	ck_assert(!tr_results_valid_columns("epoch,speed,run", bad, sizeof(bad)));
	ck_assert_str_eq(bad, "speed");
	ck_assert(!tr_results_valid_columns("epoch,", bad, sizeof(bad)));
	ck_assert(!tr_results_valid_columns("", bad, sizeof(bad)));
	tr_results_free(&res);
}
END_TEST

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
	tcase_add_test(tc, test_table_default);
	tcase_add_test(tc, test_table_fits);
	tcase_add_test(tc, test_table_columns);
	suite_add_tcase(s, tc);
	return s;
}
