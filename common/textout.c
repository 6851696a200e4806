/* common/textout.c: CSV cells and JSON strings of the programs' tables (common/textout.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/staged.h"
#include "common/textout.h"

/* 1 or 2 where 'st' is the file that standard output or error writes, else 0. */
static int std_fd_of(const struct stat *st)
{
	struct stat std;

	for (int fd = 1; fd <= 2; fd++)
		if (fstat(fd, &std) == 0 && std.st_dev == st->st_dev && std.st_ino == st->st_ino)
			return fd;
	return 0;
}

FILE *pp_rows_fopen(const char *path, const char *mode, bool *shared_p)
{
	struct stat st;
	int fd, dup_fd;
	FILE *f;

	*shared_p = false;
	if (stat(path, &st) != 0 || (fd = std_fd_of(&st)) == 0)
		return fopen(path, mode);
	dup_fd = dup(fd);
	if (dup_fd < 0)
		return NULL;
	/* "w" on a descriptor truncates nothing and leaves its flags as they are. */
	f = fdopen(dup_fd, "w");
	if (f == NULL) {
		int err = errno;

		close(dup_fd);
		errno = err;
		return NULL;
	}
	*shared_p = true;
	return f;
}

bool pp_rows_clash(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return true;
	return S_ISREG(st.st_mode) && std_fd_of(&st) == 0;
}

bool pp_rows_replaceable(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_uid == geteuid() && st->st_nlink == 1;
}

bool pp_rows_tmp_refused(int err)
{
	return err == EACCES || err == EPERM || err == EROFS;
}

FILE *pp_rows_tmp_open(const char *target, mode_t mode, const char *fmode, char *tmp, size_t len)
{
	FILE *f;
	int fd, err;

	fd = pp_staged_create(target, tmp, len);
	if (fd < 0)
		return NULL;
	if (fchmod(fd, mode & 07777) == 0 && (f = fdopen(fd, fmode)) != NULL)
		return f;
	err = errno;
	close(fd);
	unlink(tmp);
	errno = err;
	return NULL;
}

int pp_rows_write_over(const char *target, const void *buf, size_t len, bool *touched_p)
{
	const char *p = buf;
	size_t done = 0;
	int fd, err;

	*touched_p = false;
	fd = open(target, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	/* A file system that allocates no room ahead (EOPNOTSUPP, EINVAL) is written anyway. */
	err = len > 0 ? posix_fallocate(fd, 0, (off_t)len) : 0;
	if (err != 0 && err != EOPNOTSUPP && err != EINVAL)
		goto fail;
	err = 0;
	while (done < len) {
		ssize_t n = write(fd, p + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? errno : EIO;
			break;
		}
		*touched_p = true;
		done += (size_t)n;
	}
	if (err == 0 && (ftruncate(fd, (off_t)len) != 0 || fsync(fd) != 0))
		err = errno;
	if (err == 0)
		return fd;
fail:
	close(fd);
	errno = err;
	return -1;
}

int pp_rows_keep(const char *tmp, char *kept, size_t klen)
{
	const char *mark = strrchr(tmp, '.');

	if (mark == NULL || strncmp(mark, ".tmp-", 5) != 0 ||
	    (size_t)snprintf(kept, klen, "%.*s.kept-%s", (int)(mark - tmp), tmp, mark + 5) >= klen)
		return errno = EINVAL, -1;
	return rename(tmp, kept);
}

void pp_csv_cell(FILE *out, const char *s)
{
	if (strpbrk(s, ",\"\n\r") == NULL) {
		fputs(s, out);
		return;
	}
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', out);
		fputc(*s, out);
	}
	fputc('"', out);
}

void pp_json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(out, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(out, "\\u%04x", ch);
		else
			fputc(ch, out);
	}
	fputc('"', out);
}
