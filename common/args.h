/*
 * common/args.h: the programs' command lines, one convention for the three
 * tools: a long option is taken by its whole name only.  Internal, and not
 * in the library: common/args.c is compiled into the programs (pinpipe-train,
 * pinpipe-pack, pinpipe-bench) and their tests, as common/size.c is.
 */
#ifndef PP_COMMON_ARGS_H
#define PP_COMMON_ARGS_H

#include <getopt.h>

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

#endif
