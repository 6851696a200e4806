/*
 * common/staged.c: staged files, TARGET.tmp-XXXXXX, made and locked, and
 * those of dead writers removed (common/staged.h).  A writer killed before
 * its rename (SIGKILL, the machine's power) left its staged file behind;
 * it holds no lock any more, since the kernel drops a process's locks with
 * it, so the next writer of the same target can tell it from a live one's.
 */
#include "config.h"

#include <dirent.h>
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

/* Removes the staged files of 'base' in the open folder dfd that no live writer holds. */
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
		/* Taken, the lock is held until close: no writer can take it meanwhile. */
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		    st.st_nlink == 1 && now.tv_sec - st.st_ctim.tv_sec >= PP_STAGED_STALE_S &&
		    flock(fd, LOCK_EX | LOCK_NB) == 0 &&
		    fstatat(dfd, e->d_name, &again, AT_SYMLINK_NOFOLLOW) == 0 &&
		    again.st_dev == st.st_dev && again.st_ino == st.st_ino)
			unlinkat(dfd, e->d_name, 0);
		close(fd);
	}
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
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -1;
	/* A file system without locks: the file stays unswept, not refused. */
	(void)flock(fd, LOCK_EX | LOCK_NB);
	return fd;
}
