/* common/textout.c: CSV cells and JSON strings of the programs' tables (common/textout.h). */
#include "config.h"

#include <errno.h>
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
