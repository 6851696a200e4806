/*
 * common/staged.c: staged files, TARGET.tmp-XXXXXX, made and locked, and
 * those of dead writers removed (common/staged.h).  A writer killed before
 * its rename (SIGKILL, the machine's power) left its staged file behind;
 * it holds no lock any more, since the kernel drops a process's locks with
 * it, so the next writer of the same target can tell it from a live one's.
 */
#include "config.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/staged.h"

#define STAGED_SUFFIX ".tmp-"
#define STAGED_RANDOM 6 /* mkstemp's XXXXXX */

/* Whether 'name' is 'base' followed by .tmp- and six characters. */
static int is_staged_name(const char *name, const char *base, size_t base_len)
{
	const size_t suffix = sizeof(STAGED_SUFFIX) - 1;

	return strncmp(name, base, base_len) == 0 &&
	       strncmp(name + base_len, STAGED_SUFFIX, suffix) == 0 &&
	       strlen(name + base_len + suffix) == STAGED_RANDOM;
}

/* Whether a status change at 'ctime' is PP_STAGED_STALE_S or more before 'now'. */
static int is_stale(const struct timespec *ctime, const struct timespec *now)
{
	const long long ns = (now->tv_sec - ctime->tv_sec) * 1000000000ll +
			     (now->tv_nsec - ctime->tv_nsec);

	return ns >= PP_STAGED_STALE_S * 1000000000ll;
}

/* Removes the staged files of 'base' in the open folder d that no live writer holds. */
static void sweep(DIR *d, const char *base)
{
	const size_t base_len = strlen(base);
	const int dfd = dirfd(d);
	struct timespec now;
	struct dirent *e;

	if (dfd < 0 || clock_gettime(CLOCK_REALTIME, &now) != 0)
		return;
	while ((e = readdir(d)) != NULL) {
		struct stat st, again;
		int fd;

		if (!is_staged_name(e->d_name, base, base_len))
			continue;
		fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		/* Taken, the lock is held until close: no writer can take it meanwhile.
		 * Shared, as a descriptor open for reading can take it where flock()
		 * is made a POSIX lock (NFS): a writer's exclusive lock still refuses it. */
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		    st.st_nlink == 1 && is_stale(&st.st_ctim, &now) &&
		    flock(fd, LOCK_SH | LOCK_NB) == 0 &&
		    fstatat(dfd, e->d_name, &again, AT_SYMLINK_NOFOLLOW) == 0 &&
		    again.st_dev == st.st_dev && again.st_ino == st.st_ino)
			unlinkat(dfd, e->d_name, 0);
		close(fd);
	}
}

/*
 * Whether the file just made at 'path' (fd) is this writer's for good: its
 * lock taken, and the name still its own.  A writer held up between its
 * mkostemp() and its flock() long enough to look stale (stopped, swapped
 * out) may find a sweeper holding its file, or the name gone: it makes
 * another.  Where the file system takes no lock, no sweeper can take it
 * either.
 */
static bool locked_as_made(int fd, const char *path)
{
	struct stat st, named;

	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
		return errno != EWOULDBLOCK;
	return fstat(fd, &st) == 0 && lstat(path, &named) == 0 && st.st_dev == named.st_dev &&
	       st.st_ino == named.st_ino;
}

int pp_staged_create(const char *target, char *tmp, size_t len)
{
	const char *slash = strrchr(target, '/');
	char dir[4096];
	DIR *d;
	int fd;

	if ((size_t)snprintf(tmp, len, "%s" STAGED_SUFFIX "XXXXXX", target) >= len)
		return errno = ENAMETOOLONG, -1;
	if (slash == NULL)
		snprintf(dir, sizeof(dir), ".");
	else
		snprintf(dir, sizeof(dir), "%.*s", slash == target ? 1 : (int)(slash - target),
			 target);
	/* A folder that cannot be listed is not swept: the writer goes on. */
	if (strlen(target) < sizeof(dir) && (d = opendir(dir)) != NULL) {
		sweep(d, slash == NULL ? target : slash + 1);
		closedir(d);
	}
	for (int tries = 0;; tries++) {
		fd = mkostemp(tmp, O_CLOEXEC);
		if (fd < 0 || locked_as_made(fd, tmp) || tries == 8)
			return fd;
		close(fd);
		snprintf(tmp, len, "%s" STAGED_SUFFIX "XXXXXX", target);
	}
}
