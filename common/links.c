/* common/links.c: a path's chain of symbolic links followed (common/links.h). */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/links.h"

/* Links followed, at most: the kernel's own limit, ELOOP beyond. */
#define PP_LINKS_MAX 40

bool pp_links_follow(const char *path, char *out, size_t len)
{
	char to[PATH_MAX];
	struct stat st;

	if ((size_t)snprintf(out, len, "%s", path) >= len)
		return errno = ENAMETOOLONG, false;
	for (int links = 0; lstat(out, &st) == 0 && S_ISLNK(st.st_mode); links++) {
		const char *slash = strrchr(out, '/');
		ssize_t n;
		int w;

		if (links == PP_LINKS_MAX)
			return errno = ELOOP, false;
		n = readlink(out, to, sizeof(to) - 1);
		if (n < 0)
			return false;
		to[n] = '\0';
		if (to[0] == '/' || slash == NULL) {
			w = snprintf(out, len, "%s", to);
		} else {
			/* out's folder, then the link's text: moved up in out itself. */
			const size_t dir = (size_t)(slash - out) + 1;

			if (dir + (size_t)n >= len)
				return errno = ENAMETOOLONG, false;
			w = snprintf(out + dir, len - dir, "%s", to) + (int)dir;
		}
		if (w < 0 || (size_t)w >= len)
			return errno = ENAMETOOLONG, false;
	}
	return true;
}
