/*
 * common/path.c: paths the library makes from the user's.
 *
 * A directory's name inside a glob(3) pattern is escaped (pp_glob_join()):
 * a '[', '?' or '*' in it would match other directories' files.
 *
 * Where a file that is written beside its target and
 * renamed over it (a checkpoint, a shard, pinpipe-train's sorted CSV) must
 * go, so that the rename replaces the file the user named and nothing
 * else: a symbolic link is followed to the file it names (renamed over,
 * the link itself would become a file, and its target keep the old data),
 * and a path that names something other than a regular file -- a device
 * such as /dev/null, a FIFO, /dev/stdout on a terminal or a pipe, a
 * directory -- is refused (renamed over, the device itself would be
 * replaced by a file: as root, for every program of the machine).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "common/links.h"

static const char *kind_of(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISFIFO(mode))
		return "a FIFO or a pipe";
	if (S_ISSOCK(mode))
		return "a socket";
	return "not a regular file";
}

int pp_replace_target(const char *path, char **target_p)
{
	struct stat st;
	char *p, buf[PATH_MAX];

	*target_p = NULL;
	if (stat(path, &st) == 0) {
		/* There: a regular file, through any links, by its own name. */
		if (!S_ISREG(st.st_mode))
			return pp_error(-EINVAL, "%s: %s, not a regular file: it cannot be replaced",
					path, kind_of(st.st_mode));
		p = realpath(path, NULL);
		if (p == NULL)
			return pp_error(-errno, "%s: cannot resolve the path: %s", path,
					strerror(errno));
		*target_p = p;
		return 0;
	}
	if (errno != ENOENT)
		return pp_error(-errno, "%s: %s", path, strerror(errno));
	/* Not there: a new file, at the end of a chain of links that lead nowhere yet. */
	if (!pp_links_follow(path, buf, sizeof(buf)))
		return pp_error(-errno, "%s: cannot resolve the path: %s", path, strerror(errno));
	if (lstat(buf, &st) != 0) {
		if (errno != ENOENT)
			return pp_error(-errno, "%s: cannot resolve the path: %s", path,
					strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		/* Made meanwhile: judged as the stat() above judges one already there. */
		return pp_error(-EINVAL, "%s: %s, not a regular file: it cannot be replaced", path,
				kind_of(st.st_mode));
	}
	*target_p = strdup(buf);
	if (*target_p == NULL)
		return pp_error(-ENOMEM, "%s: out of memory resolving the path", path);
	return 0;
}

int pp_glob_join(char *out, size_t len, const char *dir, const char *pattern)
{
	size_t n = 0;

	for (const char *c = dir; *c != '\0'; c++) {
		if (strchr("*?[\\", *c) != NULL && n < len)
			out[n++] = '\\';
		if (n < len)
			out[n++] = *c;
	}
	if (n >= len || (size_t)snprintf(out + n, len - n, "/%s", pattern) >= len - n)
		return pp_error(-ENAMETOOLONG, "%s: the directory's name is too long", dir);
	return 0;
}
