/*
 * trainer/results.c: rows of results as a table, CSV and JSON lines.  The
 * columns are described once, in a table of names, kinds and offsets, that
 * every output and the sort read.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/results.h"

enum col_kind { COL_UINT, COL_BOOL, COL_REAL, COL_TEXT };

struct column {
	const char *name;
	enum col_kind kind;
	size_t offset;     /* of the field in struct tr_row */
	int precision;     /* digits after the point in the table, for COL_REAL */
};

#define ROW(f) offsetof(struct tr_row, f)
#define PAR(f) (offsetof(struct tr_row, p) + offsetof(struct tr_params, f))

static const struct column columns[] = {
	{ "run", COL_UINT, ROW(run), 0 },
	{ "epoch", COL_UINT, ROW(epoch), 0 },
	{ "train_loss", COL_REAL, ROW(train_loss), 4 },
	{ "train_acc", COL_REAL, ROW(train_acc), 4 },
	{ "val_loss", COL_REAL, ROW(val_loss), 4 },
	{ "val_acc", COL_REAL, ROW(val_acc), 4 },
	{ "test_loss", COL_REAL, ROW(test_loss), 4 },
	{ "test_acc", COL_REAL, ROW(test_acc), 4 },
	{ "epoch_s", COL_REAL, ROW(epoch_s), 3 },
	{ "run_s", COL_REAL, ROW(run_s), 3 },
	{ "samples_per_s", COL_REAL, ROW(samples_per_s), 0 },
	{ "wait_s", COL_REAL, ROW(wait_s), 3 },
	{ "copy_s", COL_REAL, ROW(copy_s), 3 },
	{ "exposed_s", COL_REAL, ROW(exposed_s), 3 },
	{ "copy_host_s", COL_REAL, ROW(copy_host_s), 3 },
	{ "hidden_pct", COL_REAL, ROW(hidden_pct), 1 },
	{ "allreduce_s", COL_REAL, ROW(allreduce_s), 3 },
	{ "device", COL_TEXT, PAR(device), 0 },
	{ "batch_size", COL_UINT, PAR(batch_size), 0 },
	{ "workers", COL_UINT, PAR(workers), 0 },
	{ "pin_memory", COL_BOOL, PAR(pin_memory), 0 },
	{ "lr", COL_REAL, PAR(lr), -1 },
	{ "model", COL_TEXT, PAR(model), 0 },
	{ "optimizer", COL_TEXT, PAR(optimizer), 0 },
	{ "threads", COL_UINT, PAR(threads), 0 },
	{ "blas", COL_TEXT, PAR(blas), 0 },
	{ "status", COL_TEXT, ROW(status), 0 },
};

#define NCOLS (sizeof(columns) / sizeof(columns[0]))

static const void *field(const struct tr_row *row, const struct column *c)
{
	return (const char *)row + c->offset;
}

/* Formats one cell for the table or CSV; NaN is "-" in the table, empty in CSV. */
static void format_cell(const struct tr_row *row, const struct column *c, bool table, char *buf,
			size_t len)
{
	const void *f = field(row, c);
	double v;

	switch (c->kind) {
	case COL_UINT:
		snprintf(buf, len, "%u", *(const unsigned *)f);
		return;
	case COL_BOOL:
		snprintf(buf, len, "%s", *(const bool *)f ? "on" : "off");
		return;
	case COL_TEXT:
		snprintf(buf, len, "%s", (const char *)f);
		return;
	case COL_REAL:
		v = *(const double *)f;
		if (isnan(v))
			snprintf(buf, len, "%s", table ? "-" : "");
		else if (c->precision < 0 || !table)
			snprintf(buf, len, "%.9g", v);
		else
			snprintf(buf, len, "%.*f", c->precision, v);
		return;
	}
}

int tr_results_add(struct tr_results *res, const struct tr_row *row)
{
	if (res->n == res->cap) {
		size_t cap = res->cap ? res->cap * 2 : 16;
		struct tr_row *rows = realloc(res->rows, cap * sizeof(*rows));

		if (rows == NULL)
			return -ENOMEM;
		res->rows = rows;
		res->cap = cap;
	}
	res->rows[res->n++] = *row;
	return 0;
}

void tr_results_free(struct tr_results *res)
{
	free(res->rows);
	memset(res, 0, sizeof(*res));
}

static const struct column *find_column(const char *name)
{
	if (name[0] == '-')
		name++;
	for (size_t i = 0; i < NCOLS; i++)
		if (strcmp(columns[i].name, name) == 0)
			return &columns[i];
	return NULL;
}

bool tr_results_valid_column(const char *column)
{
	return find_column(column) != NULL;
}

const char *tr_results_column_names(void)
{
	static char names[512];

	if (names[0] == '\0') {
		for (size_t i = 0; i < NCOLS; i++) {
			if (i > 0)
				strcat(names, ",");
			strcat(names, columns[i].name);
		}
	}
	return names;
}

static int compare(const struct tr_row *a, const struct tr_row *b, const struct column *c)
{
	const void *fa = field(a, c), *fb = field(b, c);
	double x, y;

	switch (c->kind) {
	case COL_UINT:
		return (*(const unsigned *)fa > *(const unsigned *)fb) -
		       (*(const unsigned *)fa < *(const unsigned *)fb);
	case COL_BOOL:
		return (int)*(const bool *)fa - (int)*(const bool *)fb;
	case COL_TEXT:
		return strcmp(fa, fb);
	case COL_REAL:
		x = *(const double *)fa;
		y = *(const double *)fb;
		if (isnan(x) || isnan(y))
			return isnan(x) - isnan(y); /* unknown values sort last */
		return (x > y) - (x < y);
	}
	return 0;
}

/* The mean epoch_s of the timed epochs of row i's run; NaN for a run with none. */
static double run_mean_epoch_s(const struct tr_results *res, size_t i)
{
	double sum = 0;
	size_t n = 0;

	for (size_t r = 0; r < res->n; r++) {
		if (res->rows[r].run == res->rows[i].run && !isnan(res->rows[r].epoch_s)) {
			sum += res->rows[r].epoch_s;
			n++;
		}
	}
	return n ? sum / (double)n : NAN;
}

/* The default order: runs by their mean epoch_s (runs without one last), then run, then epoch. */
static int compare_runs(const struct tr_row *a, double mean_a, const struct tr_row *b, double mean_b)
{
	if (isnan(mean_a) || isnan(mean_b)) {
		if (isnan(mean_a) != isnan(mean_b))
			return isnan(mean_a) - isnan(mean_b);
	} else if (mean_a != mean_b) {
		return (mean_a > mean_b) - (mean_a < mean_b);
	}
	if (a->run != b->run)
		return (a->run > b->run) - (a->run < b->run);
	return (a->epoch > b->epoch) - (a->epoch < b->epoch);
}

static void sort_runs(struct tr_results *res)
{
	double *mean;

	if (res->n < 2)
		return;
	mean = malloc(res->n * sizeof(*mean));
	if (mean == NULL) /* the rows stay in the order they ran: run, then epoch */
		return;
	for (size_t i = 0; i < res->n; i++)
		mean[i] = run_mean_epoch_s(res, i);
	for (size_t i = 1; i < res->n; i++) {
		struct tr_row key = res->rows[i];
		double key_mean = mean[i];
		size_t j = i;

		while (j > 0 && compare_runs(&res->rows[j - 1], mean[j - 1], &key, key_mean) > 0) {
			res->rows[j] = res->rows[j - 1];
			mean[j] = mean[j - 1];
			j--;
		}
		res->rows[j] = key;
		mean[j] = key_mean;
	}
	free(mean);
}

void tr_results_sort(struct tr_results *res, const char *column)
{
	const struct column *c;
	int sign = column[0] == '-' ? -1 : 1;

	if (column[0] == '\0') {
		sort_runs(res);
		return;
	}
	c = find_column(column);
	if (c == NULL)
		return;
	/* Insertion sort: stable, and a results table has few rows. */
	for (size_t i = 1; i < res->n; i++) {
		struct tr_row key = res->rows[i];
		size_t j = i;

		while (j > 0 && sign * compare(&res->rows[j - 1], &key, c) > 0) {
			res->rows[j] = res->rows[j - 1];
			j--;
		}
		res->rows[j] = key;
	}
}

/*
 * The table's cell of a row's status: whole when it is no wider than
 * 'width', else its first width - 3 characters and "...".
 */
static void cut_cell(char *cell, size_t width)
{
	if (strlen(cell) > width && width >= 3)
		memcpy(cell + width - 3, "...", 4);
}

void tr_results_print_table(const struct tr_results *res, const char *sort, size_t width_limit,
			    FILE *out)
{
	size_t width[NCOLS], last = NCOLS - 1, used = 0;
	char cell[256];

	for (size_t c = 0; c < NCOLS; c++) {
		width[c] = strlen(columns[c].name);
		for (size_t r = 0; r < res->n; r++) {
			format_cell(&res->rows[r], &columns[c], true, cell, sizeof(cell));
			if (strlen(cell) > width[c])
				width[c] = strlen(cell);
		}
		if (c < last)
			used += width[c] + 2;
	}
	/* The last column, the status, takes what the terminal has left, at least TR_STATUS_MIN. */
	if (width_limit > 0 && width[last] > TR_STATUS_MIN && used + width[last] > width_limit)
		width[last] = width_limit > used + TR_STATUS_MIN ? width_limit - used : TR_STATUS_MIN;
	if (sort[0] == '\0')
		fprintf(out, "sorted by the runs' mean epoch_s (fastest run first), then epoch\n");
	else
		fprintf(out, "sorted by %s, %s; ties in the order of the runs\n",
			sort[0] == '-' ? sort + 1 : sort, sort[0] == '-' ? "descending" : "ascending");
	/* Every column but the last is padded to its width; none ends in spaces. */
	for (size_t c = 0; c < NCOLS; c++)
		fprintf(out, "%s%-*s", c ? "  " : "", c < last ? (int)width[c] : 0, columns[c].name);
	fputc('\n', out);
	for (size_t r = 0; r < res->n; r++) {
		for (size_t c = 0; c < NCOLS; c++) {
			bool left = columns[c].kind == COL_TEXT;

			format_cell(&res->rows[r], &columns[c], true, cell, sizeof(cell));
			if (c == last) {
				cut_cell(cell, width[c]);
				fprintf(out, "  %s", cell);
				continue;
			}
			fprintf(out, "%s%*s", c ? "  " : "", left ? -(int)width[c] : (int)width[c], cell);
		}
		fputc('\n', out);
	}
}

static void write_csv_text(const char *s, FILE *out)
{
	if (strpbrk(s, ",\"\n\r") == NULL) {
		fputs(s, out);
		return;
	}
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', out);
		fputc(*s, out);
	}
	fputc('"', out);
}

int tr_results_write_csv_header(FILE *out)
{
	for (size_t c = 0; c < NCOLS; c++)
		fprintf(out, "%s%s", c ? "," : "", columns[c].name);
	fputc('\n', out);
	return ferror(out) ? -EIO : 0;
}

int tr_results_write_row_csv(const struct tr_row *row, FILE *out)
{
	char cell[256];

	for (size_t c = 0; c < NCOLS; c++) {
		if (c)
			fputc(',', out);
		format_cell(row, &columns[c], false, cell, sizeof(cell));
		write_csv_text(cell, out);
	}
	fputc('\n', out);
	return ferror(out) ? -EIO : 0;
}

int tr_results_write_csv(const struct tr_results *res, FILE *out)
{
	tr_results_write_csv_header(out);
	for (size_t r = 0; r < res->n; r++)
		tr_results_write_row_csv(&res->rows[r], out);
	return ferror(out) ? -EIO : 0;
}

static void write_json_text(const char *s, FILE *out)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(out, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(out, "\\u%04x", ch);
		else
			fputc(ch, out);
	}
	fputc('"', out);
}

int tr_results_write_row_jsonl(const struct tr_row *row, FILE *out)
{
	char cell[256];

	fputc('{', out);
	for (size_t c = 0; c < NCOLS; c++) {
		const struct column *col = &columns[c];

		fprintf(out, "%s\"%s\":", c ? "," : "", col->name);
		switch (col->kind) {
		case COL_TEXT:
			write_json_text(field(row, col), out);
			break;
		case COL_BOOL:
			fputs(*(const bool *)field(row, col) ? "true" : "false", out);
			break;
		case COL_REAL:
			if (isnan(*(const double *)field(row, col)) ||
			    isinf(*(const double *)field(row, col))) {
				fputs("null", out);
				break;
			}
			/* fall through */
		case COL_UINT:
			format_cell(row, col, false, cell, sizeof(cell));
			fputs(cell, out);
			break;
		}
	}
	fputs("}\n", out);
	return ferror(out) ? -EIO : 0;
}
