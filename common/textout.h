/*
 * common/textout.h: text cells as the programs' tables write them: a CSV
 * cell quoted as RFC 4180 asks where it holds a comma, a quote or a line
 * break (its quotes doubled), and a JSON string with its quotes,
 * backslashes and control characters escaped; and the file a table of
 * rows goes to, which may be the one standard output already writes, and
 * whether two outputs on one file would write over each other.
 * Internal, and not in the
 * library: common/textout.c is compiled into pinpipe-train and
 * pinpipe-bench and their tests, as common/size.c is.
 */
#ifndef PP_COMMON_TEXTOUT_H
#define PP_COMMON_TEXTOUT_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Writes s as one CSV cell. */
void pp_csv_cell(FILE *out, const char *s);

/* Writes s as a JSON string, quotes included. */
void pp_json_string(FILE *out, const char *s);

/*
 * Opens 'path' for a program's rows with fopen(path, mode), unless it is
 * the file that the program's standard output or error already writes
 * (/dev/stdout, or the file the shell redirected them to): then a new
 * descriptor of that same open file (dup(2)), so that the two write at one
 * offset, one after the other, where two opens would write over each
 * other from their own offsets.  *shared_p says which: a shared file is
 * not to be truncated, rewritten nor renamed over (what standard output
 * wrote there would go), and standard output is to be flushed before each
 * write to it.  NULL with errno set on failure.
 */
FILE *pp_rows_fopen(const char *path, const char *mode, bool *shared_p);

/*
 * Whether two outputs on one file 'path' would undo each other: a regular
 * file or one not there yet, other than the one standard output or error
 * writes (which both write through its descriptor, pp_rows_fopen()); a
 * terminal, a pipe or a FIFO takes the two in turn.
 */
bool pp_rows_clash(const char *path);

/*
 * Whether a file of rows 'st' may be replaced by renaming a temporary file
 * over it (pp_rows_tmp_open()): a regular file of this user's with one
 * name.  Renamed over, another's file would become this user's, and one of
 * several names would lose the others: those are written in place.
 */
bool pp_rows_replaceable(const struct stat *st);

/*
 * Whether pp_rows_tmp_open() failed for 'err' because the folder takes no
 * new file (EACCES, EPERM, EROFS), where the file itself may still be
 * written in place.
 */
bool pp_rows_tmp_refused(int err);

/*
 * Opens TARGET.tmp-XXXXXX beside 'target', a file renamed over it once
 * written (pp_staged_create(): locked while open, and what killed writers
 * of 'target' left removed first): of 'mode' (the file it replaces, not
 * mkstemp's 0600), with fopen's 'fmode'.  Its name in tmp[0..len).  NULL
 * with errno set (ENAMETOOLONG where the name does not fit) and nothing
 * left behind.
 */
FILE *pp_rows_tmp_open(const char *target, mode_t mode, const char *fmode, char *tmp, size_t len);

/*
 * Writes buf[0..len) over the file 'target' in place, from its start, and
 * cuts it there: for a file of rows that a rename cannot replace (a file
 * mounted there) or must not (of several names, another user's).  The
 * room is taken first (posix_fallocate), so that a full disk leaves the
 * file as it was; synced.  Returns the descriptor (O_RDWR, at its end), or
 * -1 with errno set and *touched_p whether the file was written at all
 * (then it may hold part of buf, part of what it held).
 */
int pp_rows_write_over(const char *target, const void *buf, size_t len, bool *touched_p);

/*
 * Renames the staged file 'tmp' (TARGET.tmp-XXXXXX) to TARGET.kept-XXXXXX,
 * out of the sweep's reach (pp_staged_create()), for rows that could go
 * nowhere else; its new name in kept[0..klen).  0, or -1 with errno set.
 */
int pp_rows_keep(const char *tmp, char *kept, size_t klen);

#endif
