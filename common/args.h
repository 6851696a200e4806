/*
 * common/args.h: the programs' command lines, one convention for the three
 * tools: a long option is taken by its whole name only; an output's folder
 * checked before any work, and two outputs that would be one file.  Internal, and not
 * in the library: common/args.c is compiled into the programs (pinpipe-train,
 * pinpipe-pack, pinpipe-bench) and their tests, as common/size.c is.
 */
#ifndef PP_COMMON_ARGS_H
#define PP_COMMON_ARGS_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * getopt_long() that refuses abbreviations: where getopt_long() took a
 * long option from a prefix of its name ("--ep=1" for --epochs), returns
 * '?' with *abbrev_p set to the argument as given and *name_p to the
 * option's whole name; otherwise returns what getopt_long() returned, with
 * *abbrev_p and *name_p NULL.  The caller reports '?' as a usage error.
 */
int pp_getopt_whole(int argc, char *const argv[], const char *shortopts,
		    const struct option *longopts, const char **abbrev_p, const char **name_p);

/*
 * The option that pp_getopt_whole() just refused as unknown ('?'), as the
 * user wrote it: "-Z" for an unknown letter (which getopt leaves in the
 * middle of a cluster such as "-Zq", where argv[optind - 1] is the element
 * before), else the element that held the long option ("--bogus",
 * "--no-eval=1").  The letter is kept in a static buffer.
 */
const char *pp_getopt_unknown(char *const argv[], const struct option *longopts);

/* The folder of 'path': its text before the last '/', "." without one, "/" for "/x". */
void pp_args_folder_of(const char *path, char *dir, size_t len);

/*
 * Checks, before a program works, that it may make files in the folder
 * 'dir' (an output's).  Returns 0, or -errno with why not in why[0..len):
 * "the directory D: No such file or directory", "the directory D is not a
 * directory", "cannot make files in the directory D: Permission denied".
 */
int pp_args_check_folder(const char *dir, char *why, size_t len);

/*
 * Whether two outputs 'a' and 'b' would be one file: the same file where
 * both are there (links followed), else the same name in the same folder
 * where their links lead.
 */
bool pp_args_same_file(const char *a, const char *b);

/*
 * The end of a program's main: flushes standard output and returns
 * 'status', or, where what the program printed did not all reach it (a
 * full disk, a closed descriptor), says so on stderr ("PROG: standard
 * output: cannot write: REASON") and returns 'status', or 1 for 0.
 */
int pp_args_end_stdout(const char *prog, int status);

#endif
