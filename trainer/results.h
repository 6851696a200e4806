/*
 * trainer/results.h: the rows pinpipe-train reports, one per run and epoch,
 * and their output as an aligned table, CSV or JSON lines, sorted by any
 * column.
 */
#ifndef PP_TRAINER_RESULTS_H
#define PP_TRAINER_RESULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* One run's parameters: a point of the grid. */
struct tr_params {
	char device[64];     /* "cpu", "sim", "cuda:0" */
	unsigned batch_size; /* samples per batch */
	unsigned workers;    /* loader worker threads */
	bool pin_memory;     /* pinned ring */
	double lr;           /* learning rate */
	char model[160];     /* preset or spec */
	char optimizer[16];  /* "adam" or "sgd" */
	unsigned threads;    /* compute threads of a cpu step (0: auto, until the run resolves it;
			      * 0 in the rows of a cuda run) */
	char blas[48];       /* not an axis: the BLAS kernels a cpu run ran on, "OpenBLAS SkylakeX"
			      * (pp_blas_get_info()); "" for a cuda run or a BLAS that does not say */
	unsigned ranks;      /* not an axis: the processes of the job (mpirun -np), 1 alone */
	unsigned global_batch; /* not an axis: the samples of a step over the ranks,
				* ranks x batch_size */
};

/* One row: a run's epoch, or a run that failed (epoch 0, status says why). */
struct tr_row {
	unsigned run;          /* 1-based run number */
	unsigned epoch;        /* 1-based; 0 for a run's failure row (it could not start, or
	                          failed after its epochs: a checkpoint not saved) */
	double train_loss;     /* mean over the epoch's batches; NaN when unknown */
	double train_acc;      /* fraction 0..1 */
	double val_loss;       /* on the held-out validation samples; NaN without --val-split */
	double val_acc;
	double test_loss;      /* NaN when not evaluated */
	double test_acc;
	double epoch_s;        /* seconds of the epoch's training loop */
	double run_s;          /* seconds since the run began */
	double samples_per_s;  /* training samples per second in the epoch */
	double wait_s;         /* seconds the trainer waited for data in the epoch */
	double copy_s;         /* seconds of host-to-device copy in the epoch (measured on the
				  timed batches, scaled to all); 0 where nothing is copied (cpu) */
	double exposed_s;      /* of copy_s, the seconds not hidden behind compute (pinpipe/transfer.h) */
	double copy_host_s;    /* seconds the host spent in copy calls in the epoch */
	double hidden_pct;     /* share of the copy time hidden behind compute, 0..100; NaN without copies */
	double allreduce_s;    /* seconds the steps spent on the gradient's average over the ranks
				  (starting it, and waiting for what the backward pass did not
				  hide) in the epoch, rank 0's; 0 on one rank */
	struct tr_params p;
	char status[200];      /* "ok", or "failed: <reason>" */
};

struct tr_results {
	struct tr_row *rows;
	size_t n;     /* rows in use */
	size_t cap;   /* rows allocated */
};

/* Appends a copy of *row; returns 0 or -ENOMEM. */
int tr_results_add(struct tr_results *res, const struct tr_row *row);

void tr_results_free(struct tr_results *res);

/* Returns true if 'column' (optionally prefixed with '-' for descending) names a column. */
bool tr_results_valid_column(const char *column);

/*
 * Sorts the rows by 'column', ascending, or descending with a leading '-';
 * ties keep their order.  "" is the default order, which reads naturally
 * for one run and for a grid: the runs by their mean epoch_s, fastest
 * first (a run that failed last), each run's epochs in order.
 */
void tr_results_sort(struct tr_results *res, const char *column);

/* The names of every column, comma-separated, for --help. */
const char *tr_results_column_names(void);

/* The fewest characters of a status the table shows, however narrow the terminal. */
#define TR_STATUS_MIN 40

/*
 * Checks a --columns value: "all", or column names separated by commas.
 * Returns true if it is one; else false, with the first name that is not a
 * column, or a column named a second time, in bad[0..len).
 */
bool tr_results_valid_columns(const char *list, char *bad, size_t len);

/*
 * Prints the rows as an aligned table, under a line that names the order
 * 'sort' (as given to tr_results_sort) put them in; prints nothing without
 * rows.  'columns' chooses the columns: "all" every one, in the order of
 * the CSV; a list of names (tr_results_valid_columns()) those, in its
 * order; "" those that tell something: a parameter of the runs that is
 * the same in every row (device=cpu, status=ok) goes to a line above the
 * table, NAME=VALUE two spaces apart, a figure that no row has (the copy
 * columns of a cpu run, the validation without --val-split, the allreduce
 * on one rank) is left out, and where the rows are wider than 'width'
 * figures that matter less are left out (the run's time first), named on
 * a line under the table, then a model spec or a sim's options is cut
 * with "..." (to 12 characters at least).  The status is cut with "..." where a row would
 * be wider than 'width' characters (0: no limit), but keeps at least
 * TR_STATUS_MIN of them: a failed run's reason does not widen every row.
 * No line ends in spaces.
 */
void tr_results_print_table(const struct tr_results *res, const char *sort, const char *columns,
			    size_t width, FILE *out);

/* Writes a header line and the rows as CSV (RFC 4180 quoting). */
int tr_results_write_csv(const struct tr_results *res, FILE *out);

/* Writes the CSV's header line, or one row as a CSV line; 0 or -EIO. */
int tr_results_write_csv_header(FILE *out);
int tr_results_write_row_csv(const struct tr_row *row, FILE *out);

/* Writes one JSON object per row and line. */
int tr_results_write_row_jsonl(const struct tr_row *row, FILE *out);

#endif
