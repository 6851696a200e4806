/*
 * trainer/rows.h: pinpipe-train's files of rows (--csv, --jsonl) and the
 * rows said on the terminal as each epoch ends.
 */
#ifndef PP_TRAINER_ROWS_H
#define PP_TRAINER_ROWS_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "trainer/options.h"
#include "trainer/results.h"

/*
 * The files of rows, --csv and --jsonl (rank 0's): each row is written and
 * flushed as it is made, so that a SIGKILL, a killed rank or a timeout
 * leaves the rows so far.  A resume appends to them, after the rows of the
 * epochs its checkpoint holds (tr_rows_resume()).  At the end the CSV's rows
 * of this process are written again in --sort's order (tr_rows_finish()).
 */
struct tr_row_files {
	FILE *csv;             /* --csv, or NULL */
	FILE *jsonl;           /* --jsonl, or NULL */
	off_t csv_base;        /* bytes of the CSV before this process's rows: its header and
				  the rows a resume kept */
	bool csv_failed;       /* a row could not be written there (said on stderr) */
	bool jsonl_failed;
	bool csv_shared;       /* the file standard output writes (pp_rows_fopen()): rows are
				  added to it, never cut nor rewritten */
	bool jsonl_shared;
	char *csv_staged;      /* a file of rows there before a run that does not resume is
				  replaced once the first row is written: until then the rows
				  go to this temporary file beside it (NULL: none pending) */
	char *jsonl_staged;
	char *csv_target;      /* the file it replaces, the path's links followed */
	char *jsonl_target;
};

/*
 * Set when a row could not be written to --csv or --jsonl (a full disk):
 * the run that wrote it failed, and no other run starts.
 */
extern bool tr_output_failed;

/*
 * Opens the files of rows of rank 0 (the other ranks write none); the CSV
 * gets its header when it is new.  Returns 0, or -errno with the file named.
 */
int tr_rows_start(const struct tr_options *opt, struct tr_row_files *rf);

/*
 * A resume at the end of epoch 'epochs' (or in the epoch after it): each
 * file keeps its rows of epochs 1 to 'epochs' and drops the others (an
 * interrupted epoch's, which the resume trains again; failed runs'), so
 * that the resumed rows follow with no epoch twice.  Returns 0 or -errno.
 */
int tr_rows_resume(const struct tr_options *opt, struct tr_row_files *rf, unsigned epochs);

/*
 * Appends a finished row to the results, the JSON lines and the CSV, not
 * yet the terminal (tr_rows_print()): what a stop must keep is on disk
 * before a write to an output nobody reads may block.  Returns 0, or
 * -errno when a file could not be written (the file is named on stderr;
 * tr_output_failed is set).
 */
int tr_rows_report(const struct tr_options *opt, struct tr_row_files *rf, struct tr_results *res,
		   const struct tr_row *row);

/* Prints a reported row on standard output (nothing with progress < 0). */
void tr_rows_print(const struct tr_options *opt, const struct tr_row *row);

/* A failed run's row; 'why' says why, or NULL for the library's last error. */
void tr_rows_fail(const struct tr_options *opt, struct tr_results *res, unsigned run,
		  const struct tr_params *p, int err, const char *why, struct tr_row_files *rf);

/*
 * Closes the files of rows; the CSV, a regular file, gets this process's
 * rows again in 'res''s order (sorted by --sort), after its header and the
 * rows a resume kept.  Returns 0, or -errno with the file named.
 */
int tr_rows_finish(const struct tr_options *opt, struct tr_row_files *rf,
		   const struct tr_results *res);

#endif
