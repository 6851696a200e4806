/*
 * common/args.c: getopt_long() without its abbreviations (common/args.h).
 * getopt_long() takes any unambiguous prefix of a long option's name, so
 * "--ep=1" sets --epochs and a misspelling that happens to be a prefix is
 * taken silently; a later option of the same prefix would make the same
 * command line ambiguous.  Whole names only: the element that held the
 * option is found from optind after the call, which is past the option and
 * its value when that was the next element.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/args.h"

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
