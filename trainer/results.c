/*
 * trainer/results.c: rows of results as a table, CSV and JSON lines.  The
 * columns are described once, in a table of names, kinds and offsets, that
 * every output and the sort read.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/textout.h"
#include "trainer/results.h"

enum col_kind { COL_UINT, COL_BOOL, COL_REAL, COL_TEXT };

/*
 * What the default table (tr_results_print_table() with columns "") does
 * with a column.  A run's parameters that are the same in every row go to
 * one line above the table; a figure that no row has (NaN, or 0 where 0
 * means nothing was done: no copy on the cpu, no allreduce on one rank) is
 * left out; 'fit' orders the columns left out, first to last, when the
 * rows are wider than the terminal (0: always shown).
 */
enum col_role {
	ROLE_FIGURE,       /* a measurement: shown unless no row has it */
	ROLE_FIGURE_ZERO,  /* a measurement whose 0 means none: shown unless no row has one > 0 */
	ROLE_PARAM,        /* the same in every row: above the table */
	ROLE_RANKS,        /* a parameter of several ranks: left out when every row ran on one */
};

struct column {
	const char *name;
	enum col_kind kind;
	size_t offset;     /* of the field in struct tr_row */
	int precision;     /* digits after the point in the table, for COL_REAL */
	enum col_role role;
	unsigned fit;      /* 1..: left out in this order to fit the width; 0: never */
};

#define ROW(f) offsetof(struct tr_row, f)
#define PAR(f) (offsetof(struct tr_row, p) + offsetof(struct tr_params, f))

static const struct column columns[] = {
	{ "run", COL_UINT, ROW(run), 0, ROLE_PARAM, 0 },
	{ "epoch", COL_UINT, ROW(epoch), 0, ROLE_PARAM, 0 },
	{ "train_loss", COL_REAL, ROW(train_loss), 4, ROLE_FIGURE, 3 },
	{ "train_acc", COL_REAL, ROW(train_acc), 4, ROLE_FIGURE, 10 },
	{ "val_loss", COL_REAL, ROW(val_loss), 4, ROLE_FIGURE, 4 },
	{ "val_acc", COL_REAL, ROW(val_acc), 4, ROLE_FIGURE, 0 },
	{ "test_loss", COL_REAL, ROW(test_loss), 4, ROLE_FIGURE, 5 },
	{ "test_acc", COL_REAL, ROW(test_acc), 4, ROLE_FIGURE, 0 },
	{ "epoch_s", COL_REAL, ROW(epoch_s), 3, ROLE_FIGURE, 0 },
	{ "run_s", COL_REAL, ROW(run_s), 3, ROLE_FIGURE, 2 },
	{ "samples_per_s", COL_REAL, ROW(samples_per_s), 0, ROLE_FIGURE, 8 },
	{ "wait_s", COL_REAL, ROW(wait_s), 3, ROLE_FIGURE, 6 },
	{ "copy_s", COL_REAL, ROW(copy_s), 3, ROLE_FIGURE_ZERO, 0 },
	{ "exposed_s", COL_REAL, ROW(exposed_s), 3, ROLE_FIGURE_ZERO, 9 },
	{ "copy_host_s", COL_REAL, ROW(copy_host_s), 3, ROLE_FIGURE_ZERO, 7 },
	{ "hidden_pct", COL_REAL, ROW(hidden_pct), 1, ROLE_FIGURE, 0 },
	{ "allreduce_s", COL_REAL, ROW(allreduce_s), 3, ROLE_FIGURE_ZERO, 0 },
	{ "device", COL_TEXT, PAR(device), 0, ROLE_PARAM, 0 },
	{ "batch_size", COL_UINT, PAR(batch_size), 0, ROLE_PARAM, 0 },
	{ "ranks", COL_UINT, PAR(ranks), 0, ROLE_RANKS, 0 },
	{ "global_batch", COL_UINT, PAR(global_batch), 0, ROLE_RANKS, 0 },
	{ "workers", COL_UINT, PAR(workers), 0, ROLE_PARAM, 0 },
	{ "pin_memory", COL_BOOL, PAR(pin_memory), 0, ROLE_PARAM, 0 },
	{ "lr", COL_REAL, PAR(lr), -1, ROLE_PARAM, 0 },
	{ "model", COL_TEXT, PAR(model), 0, ROLE_PARAM, 0 },
	{ "optimizer", COL_TEXT, PAR(optimizer), 0, ROLE_PARAM, 0 },
	{ "threads", COL_UINT, PAR(threads), 0, ROLE_PARAM, 0 },
	{ "blas", COL_TEXT, PAR(blas), 0, ROLE_PARAM, 1 },
	{ "status", COL_TEXT, ROW(status), 0, ROLE_PARAM, 0 },
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

/*
 * The default order: runs by their mean epoch_s (runs without one last),
 * then run, then epoch, a run's failure row (epoch 0) after its epochs: the
 * epochs it trained, then how it ended (a checkpoint that could not be
 * saved after them).
 */
static int compare_runs(const struct tr_row *a, double mean_a, const struct tr_row *b, double mean_b)
{
	const unsigned ea = a->epoch ? a->epoch : UINT_MAX, eb = b->epoch ? b->epoch : UINT_MAX;

	if (isnan(mean_a) || isnan(mean_b)) {
		if (isnan(mean_a) != isnan(mean_b))
			return isnan(mean_a) - isnan(mean_b);
	} else if (mean_a != mean_b) {
		return (mean_a > mean_b) - (mean_a < mean_b);
	}
	if (a->run != b->run)
		return (a->run > b->run) - (a->run < b->run);
	return (ea > eb) - (ea < eb);
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
 * A cell cut to 'width' characters: whole when it is no wider, else its
 * first width - 3 characters and "...".
 */
static void cut_cell(char *cell, size_t width)
{
	if (strlen(cell) > width && width >= 3)
		memcpy(cell + width - 3, "...", 4);
}

/* The fewest characters of a model or a device the default table shows, to fit the width. */
#define TR_TEXT_MIN 12

/* The columns of a table, in the order shown, and what is said above it. */
struct layout {
	size_t shown[NCOLS];  /* indexes into columns[], in the order shown */
	size_t n;             /* columns shown */
	size_t width[NCOLS];  /* by index into columns[]: the column's width */
	bool above[NCOLS];    /* by index into columns[]: the same in every row, said above */
	bool fitted[NCOLS];   /* by index into columns[]: left out to fit the width */
};

/* True if every row has the same cell in column c. */
static bool same_in_every_row(const struct tr_results *res, const struct column *c)
{
	char first[256], cell[256];

	if (res->n == 0)
		return false;
	format_cell(&res->rows[0], c, true, first, sizeof(first));
	for (size_t r = 1; r < res->n; r++) {
		format_cell(&res->rows[r], c, true, cell, sizeof(cell));
		if (strcmp(cell, first) != 0)
			return false;
	}
	return true;
}

/* True if some row has a figure in column c: a number, and for ROLE_FIGURE_ZERO one > 0. */
static bool has_figure(const struct tr_results *res, const struct column *c)
{
	for (size_t r = 0; r < res->n; r++) {
		double v = *(const double *)field(&res->rows[r], c);

		if (!isnan(v) && (c->role != ROLE_FIGURE_ZERO || v != 0))
			return true;
	}
	return false;
}

static bool several_ranks(const struct tr_results *res)
{
	for (size_t r = 0; r < res->n; r++)
		if (res->rows[r].p.ranks > 1)
			return true;
	return false;
}

/* The widest cell of column c, its name included. */
static size_t column_width(const struct tr_results *res, const struct column *c)
{
	size_t w = strlen(c->name);
	char cell[256];

	for (size_t r = 0; r < res->n; r++) {
		format_cell(&res->rows[r], c, true, cell, sizeof(cell));
		if (strlen(cell) > w)
			w = strlen(cell);
	}
	return w;
}

/* Index of the column named name[0..len) in columns[], or NCOLS. */
static size_t column_index(const char *name, size_t len)
{
	for (size_t i = 0; i < NCOLS; i++)
		if (strlen(columns[i].name) == len && strncmp(columns[i].name, name, len) == 0)
			return i;
	return NCOLS;
}

bool tr_results_valid_columns(const char *list, char *bad, size_t len)
{
	bool seen[NCOLS] = { false };

	if (strcmp(list, "all") == 0)
		return true;
	for (const char *s = list; ; s++) {
		size_t n = strcspn(s, ","), i = column_index(s, n);

		if (i == NCOLS || seen[i]) {
			snprintf(bad, len, "%.*s", (int)n, s);
			return false;
		}
		seen[i] = true;
		s += n;
		if (*s == '\0')
			return true;
	}
}

/* The width of the columns shown, with the two spaces between them. */
static size_t layout_width(const struct layout *l)
{
	size_t w = 0;

	for (size_t k = 0; k < l->n; k++)
		w += l->width[l->shown[k]] + (k ? 2 : 0);
	return w;
}

/* The status column cut to what the width leaves it, at least TR_STATUS_MIN. */
static void fit_status(const struct tr_results *res, struct layout *l, size_t limit)
{
	size_t st = NCOLS - 1, whole = column_width(res, &columns[st]), others;
	bool shown = false;

	for (size_t k = 0; k < l->n; k++)
		shown = shown || l->shown[k] == st;
	if (!shown || limit == 0)
		return;
	l->width[st] = 0;
	others = layout_width(l);
	l->width[st] = whole;
	if (others + whole > limit && whole > TR_STATUS_MIN)
		l->width[st] = limit > others + TR_STATUS_MIN ? limit - others : TR_STATUS_MIN;
}

/*
 * Chooses the columns: every one ("all"), those of a list, or by default
 * those that tell the rows apart, fitted to 'limit' (0: no limit).
 */
static void layout_make(const struct tr_results *res, const char *list, size_t limit,
			struct layout *l)
{
	bool ranks = several_ranks(res);

	memset(l, 0, sizeof(*l));
	for (size_t i = 0; i < NCOLS; i++)
		l->width[i] = column_width(res, &columns[i]);
	if (strcmp(list, "all") == 0) {
		for (size_t i = 0; i < NCOLS; i++)
			l->shown[l->n++] = i;
		fit_status(res, l, limit);
		return;
	}
	if (list[0] != '\0') {
		/* The names of the list (tr_results_valid_columns()), NCOLS of them at most. */
		for (const char *s = list; *s != '\0' && l->n < NCOLS; s += *s == ',') {
			size_t n = strcspn(s, ","), i = column_index(s, n);

			if (i < NCOLS)
				l->shown[l->n++] = i;
			s += n;
		}
		fit_status(res, l, limit);
		return;
	}
	for (size_t i = 0; i < NCOLS; i++) {
		const struct column *c = &columns[i];

		switch (c->role) {
		case ROLE_FIGURE:
		case ROLE_FIGURE_ZERO:
			if (!has_figure(res, c))
				continue;
			break;
		case ROLE_RANKS:
			if (!ranks)
				continue;
			/* fall through */
		case ROLE_PARAM:
			if (same_in_every_row(res, c)) {
				l->above[i] = true;
				continue;
			}
			break;
		}
		l->shown[l->n++] = i;
	}
	/* Too wide: the status cut first, then the columns that matter least left out. */
	fit_status(res, l, limit);
	while (limit > 0 && layout_width(l) > limit) {
		size_t drop = l->n;

		for (size_t k = 0; k < l->n; k++) {
			unsigned f = columns[l->shown[k]].fit;

			if (f != 0 && (drop == l->n || f < columns[l->shown[drop]].fit))
				drop = k;
		}
		if (drop == l->n)
			break;
		l->fitted[l->shown[drop]] = true;
		memmove(&l->shown[drop], &l->shown[drop + 1], (l->n - drop - 1) * sizeof(l->shown[0]));
		l->n--;
		fit_status(res, l, limit);
	}
	/* Still too wide: the texts of the runs (a model spec, a sim's options) cut with "...". */
	for (size_t k = 0; k < l->n && limit > 0 && layout_width(l) > limit; k++) {
		size_t i = l->shown[k], over = layout_width(l) - limit;

		if (columns[i].kind == COL_TEXT && i != NCOLS - 1 && l->width[i] > TR_TEXT_MIN)
			l->width[i] = l->width[i] > over + TR_TEXT_MIN ? l->width[i] - over : TR_TEXT_MIN;
	}
}

/*
 * Prints 'items' (each ending in '\0', the last followed by another '\0')
 * on lines of at most 'limit' characters (0: one line), 'sep' between
 * them, the lines after the first indented by one space; an item wider
 * than a line is cut with "...".
 */
static void print_wrapped(const char *items, const char *sep, size_t limit, FILE *out)
{
	const size_t gap = strlen(sep);

	size_t col = 0;
	char item[512];

	for (const char *s = items; *s != '\0'; s += strlen(s) + 1) {
		size_t n;

		snprintf(item, sizeof(item), "%s", s);
		if (limit > 0 && col > 1 && col + gap + strlen(item) > limit) {
			fputs("\n ", out);
			col = 1;
		}
		n = col > 1 ? col + gap : col;
		if (limit > n + 3 && n + strlen(item) > limit)
			cut_cell(item, limit - n);
		fprintf(out, "%s%s", col > 1 ? sep : "", item);
		col = n + strlen(item);
	}
	if (col > 0)
		fputc('\n', out);
}

/* Appends "text\0" to buf[0..len) at *at; keeps room for the final '\0'. */
static void add_item(char *buf, size_t len, size_t *at, const char *text)
{
	size_t n = strlen(text) + 1;

	if (*at + n + 1 > len)
		return;
	memcpy(buf + *at, text, n);
	*at += n;
	buf[*at] = '\0';
}

void tr_results_print_table(const struct tr_results *res, const char *sort, const char *list,
			    size_t limit, FILE *out)
{
	struct layout l;
	char cell[256], item[300], items[4096], note[1024], *save = NULL;
	size_t at = 0;

	if (res->n == 0)
		return;
	layout_make(res, list, limit, &l);
	if (sort[0] == '\0')
		fprintf(out, "sorted by the runs' mean epoch_s (fastest run first), then epoch\n");
	else
		fprintf(out, "sorted by %s, %s; ties in the order of the runs\n",
			sort[0] == '-' ? sort + 1 : sort, sort[0] == '-' ? "descending" : "ascending");
	/* The parameters every row shares, once. */
	items[0] = '\0';
	for (size_t i = 0; i < NCOLS; i++) {
		if (!l.above[i])
			continue;
		format_cell(&res->rows[0], &columns[i], true, cell, sizeof(cell));
		if (cell[0] == '\0') /* a text that no row has (the blas of a cuda run) */
			continue;
		snprintf(item, sizeof(item), "%s=%s", columns[i].name, cell);
		add_item(items, sizeof(items), &at, item);
	}
	print_wrapped(items, "  ", limit, out);
	/* Every column but the last is padded to its width; none ends in spaces. */
	for (size_t k = 0; k < l.n; k++) {
		size_t i = l.shown[k];
		bool last = k + 1 == l.n;

		snprintf(cell, sizeof(cell), "%s", columns[i].name);
		cut_cell(cell, l.width[i]);
		fprintf(out, "%s%-*s", k ? "  " : "", last ? 0 : (int)l.width[i], cell);
	}
	fputc('\n', out);
	for (size_t r = 0; r < res->n; r++) {
		for (size_t k = 0; k < l.n; k++) {
			size_t i = l.shown[k];
			bool left = columns[i].kind == COL_TEXT, last = k + 1 == l.n;
			int w = last && left ? 0 : (int)l.width[i];

			format_cell(&res->rows[r], &columns[i], true, cell, sizeof(cell));
			cut_cell(cell, l.width[i]);
			fprintf(out, "%s%*s", k ? "  " : "", left ? -w : w, cell);
		}
		fputc('\n', out);
	}
	/* What did not fit, and where to find it. */
	snprintf(note, sizeof(note), "not shown, to fit the width:");
	for (size_t i = 0, k = 0; i < NCOLS; i++)
		if (l.fitted[i])
			snprintf(note + strlen(note), sizeof(note) - strlen(note), "%s %s",
				 k++ ? "," : "", columns[i].name);
	if (strchr(note, ':')[1] == '\0')
		return;
	snprintf(note + strlen(note), sizeof(note) - strlen(note), " (--columns=all shows every "
		 "column; --csv and --jsonl have them)");
	at = 0;
	items[0] = '\0';
	for (char *w = strtok_r(note, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save))
		add_item(items, sizeof(items), &at, w);
	print_wrapped(items, " ", limit, out);
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
		pp_csv_cell(out, cell);
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

int tr_results_write_row_jsonl(const struct tr_row *row, FILE *out)
{
	char cell[256];

	fputc('{', out);
	for (size_t c = 0; c < NCOLS; c++) {
		const struct column *col = &columns[c];

		fprintf(out, "%s\"%s\":", c ? "," : "", col->name);
		switch (col->kind) {
		case COL_TEXT:
			pp_json_string(out, field(row, col));
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
