/*
 * common/args.c: getopt_long() without its abbreviations (common/args.h).
 * getopt_long() takes any unambiguous prefix of a long option's name, so
 * "--ep=1" sets --epochs and a misspelling that happens to be a prefix is
 * taken silently; a later option of the same prefix would make the same
 * command line ambiguous.  Whole names only: the element that held the
 * option is found from optind after the call, which is past the option and
 * its value when that was the next element.  Also the checks of the
 * programs' outputs: their folders, and two that would be one file.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/args.h"
#include "common/links.h"

int pp_getopt_whole(int argc, char *const argv[], const char *shortopts,
		    const struct option *longopts, const char **abbrev_p, const char **name_p)
{
	int idx = -1, c = getopt_long(argc, argv, shortopts, longopts, &idx);
	const char *e;
	size_t len;

	*abbrev_p = NULL;
	*name_p = NULL;
	if (c == -1 || c == '?' || c == ':' || idx < 0 || optind < 1)
		return c;
	e = argv[optind - 1];
	/* "--name VALUE": optarg is the element after the option's own. */
	if (optarg != NULL && optarg == argv[optind - 1] && optind >= 2)
		e = argv[optind - 2];
	if (strncmp(e, "--", 2) != 0)
		return c;
	len = strcspn(e + 2, "=");
	if (len == strlen(longopts[idx].name) && strncmp(e + 2, longopts[idx].name, len) == 0)
		return c;
	*abbrev_p = e;
	*name_p = longopts[idx].name;
	return '?';
}

const char *pp_getopt_unknown(char *const argv[], const struct option *longopts)
{
	static char letter[3];
	const char *prev = optind >= 1 ? argv[optind - 1] : "";

	/* A long option refused (a value it does not take) has its own val in optopt. */
	if (strncmp(prev, "--", 2) == 0) {
		const size_t len = strcspn(prev + 2, "=");

		for (const struct option *o = longopts; o->name != NULL; o++)
			if (strlen(o->name) == len && strncmp(prev + 2, o->name, len) == 0 &&
			    o->val == optopt)
				return prev;
	}
	if (optopt > 0 && optopt < 128) {
		letter[0] = '-';
		letter[1] = (char)optopt;
		letter[2] = '\0';
		return letter;
	}
	return prev;
}

void pp_args_folder_of(const char *path, char *dir, size_t len)
{
	const char *slash = strrchr(path, '/');

	if (slash == NULL)
		snprintf(dir, len, ".");
	else if (slash == path)
		snprintf(dir, len, "/");
	else
		snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

int pp_args_check_folder(const char *dir, char *why, size_t len)
{
	struct stat st;
	int err;

	if (stat(dir, &st) != 0) {
		err = errno;
		snprintf(why, len, "the directory %s: %s", dir, strerror(err));
	} else if (!S_ISDIR(st.st_mode)) {
		err = ENOTDIR;
		snprintf(why, len, "the directory %s is not a directory", dir);
	} else if (access(dir, W_OK | X_OK) != 0) {
		err = errno;
		snprintf(why, len, "cannot make files in the directory %s: %s", dir, strerror(err));
	} else {
		return 0;
	}
	return -err;
}

/* 'path' as its folder's canonical name and its last name; false where the folder is not there. */
static bool canonical(const char *path, char *out, size_t len)
{
	const char *base = strrchr(path, '/');
	char dir[PATH_MAX], real[PATH_MAX];

	pp_args_folder_of(path, dir, sizeof(dir));
	if (realpath(dir, real) == NULL)
		return false;
	return (size_t)snprintf(out, len, "%s/%s", real, base ? base + 1 : path) < len;
}

bool pp_args_same_file(const char *a, const char *b)
{
	char ta[PATH_MAX], tb[PATH_MAX], ca[2 * PATH_MAX], cb[2 * PATH_MAX];
	struct stat sa, sb;
	const bool ha = stat(a, &sa) == 0, hb = stat(b, &sb) == 0;

	if (ha && hb)
		return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	/* Neither there yet: where their links lead, by the folders' own names. */
	return !ha && !hb && pp_links_follow(a, ta, sizeof(ta)) &&
	       pp_links_follow(b, tb, sizeof(tb)) && canonical(ta, ca, sizeof(ca)) &&
	       canonical(tb, cb, sizeof(cb)) && strcmp(ca, cb) == 0;
}

int pp_args_end_stdout(const char *prog, int status)
{
	bool failed = ferror(stdout) != 0;
	int err = 0;

	if (fflush(stdout) != 0) {
		err = errno;
		failed = true;
	}
	if (!failed)
		return status;
	/* A write failed before and its buffer went: its reason is gone with it. */
	fprintf(stderr, "%s: standard output: cannot write: %s\n", prog,
		err ? strerror(err) : "a write failed, and what was printed is not all there");
	return status != 0 ? status : 1;
}
