/*
 * common/textout.h: text cells as the programs' tables write them: a CSV
 * cell quoted as RFC 4180 asks where it holds a comma, a quote or a line
 * break (its quotes doubled), and a JSON string with its quotes,
 * backslashes and control characters escaped.  Internal, and not in the
 * library: common/textout.c is compiled into pinpipe-train and
 * pinpipe-bench and their tests, as common/size.c is.
 */
#ifndef PP_COMMON_TEXTOUT_H
#define PP_COMMON_TEXTOUT_H

#include <stdio.h>

/* Writes s as one CSV cell. */
void pp_csv_cell(FILE *out, const char *s);

/* Writes s as a JSON string, quotes included. */
void pp_json_string(FILE *out, const char *s);

#endif
