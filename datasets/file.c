/*
 * datasets/file.c: whole-file and positioned reads with the resumption of
 * short reads, and the errors they give, named by file.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "datasets/source.h"

const char *pp_path_base(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash != NULL ? slash + 1 : path;
}

#define PP_HUGE_PAGE ((size_t)2 << 20)

void *pp_alloc_large(size_t len)
{
	void *p;

	if (len < PP_HUGE_PAGE)
		return pp_malloc(PP_MAX(len, 1));
	if (pp_posix_memalign(&p, PP_HUGE_PAGE, len) != 0)
		return NULL;
	/* Only a hint: without transparent huge pages, small pages do. */
	madvise(p, len, MADV_HUGEPAGE);
	return p;
}

int pp_pread_full(int fd, const char *path, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, p + done, len - done, (off_t)(off + done));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return pp_error(-errno, "%s: read of %zu bytes at offset %llu failed: %s",
					path, len, (unsigned long long)(off + done),
					strerror(errno));
		}
		if (n == 0)
			return pp_error(-EBADMSG,
					"%s: file ends at offset %llu, expected %zu bytes more",
					path, (unsigned long long)(off + done), len - done);
		done += (size_t)n;
	}
	return 0;
}

static const char *file_kind(mode_t mode)
{
	return S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket" :
	       S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device" :
	       "not a regular file";
}

int pp_open_regular(const char *path, struct stat *st)
{
	int fd, flags, ret;

	/* O_NONBLOCK: open() of a FIFO returns at once instead of waiting for a writer. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return pp_error(-errno, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, st) != 0) {
		ret = pp_error(-errno, "%s: cannot stat: %s", path, strerror(errno));
		goto err_close;
	}
	if (S_ISDIR(st->st_mode)) {
		ret = pp_error(-EISDIR, "%s: is a directory, expected a file", path);
		goto err_close;
	}
	if (!S_ISREG(st->st_mode)) {
		ret = pp_error(-EINVAL, "%s: %s, expected a regular file", path,
			       file_kind(st->st_mode));
		goto err_close;
	}
	/* Back to blocking reads: io_uring would answer -EAGAIN where the page cache misses. */
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
		ret = pp_error(-errno, "%s: fcntl: %s", path, strerror(errno));
		goto err_close;
	}
	return fd;

err_close:
	close(fd);
	return ret;
}

int pp_read_whole_file(const char *path, size_t extra, void **buf_p, size_t *len_p)
{
	struct stat st;
	void *buf;
	size_t len, cap;
	int fd, ret;

	fd = pp_open_regular(path, &st);
	if (fd < 0)
		return fd;
	if (st.st_size == 0) {
		ret = pp_error(-EBADMSG, "%s: empty file", path);
		goto err_close;
	}
	len = (size_t)st.st_size;
	if ((off_t)len != st.st_size || !pp_add_size(len, extra, &cap)) {
		ret = pp_error(-EOVERFLOW, "%s: %lld bytes do not fit in memory", path,
			       (long long)st.st_size);
		goto err_close;
	}
	buf = pp_alloc_large(cap);
	if (buf == NULL) {
		ret = pp_error(-ENOMEM, "%s: no memory for its %zu bytes", path, len);
		goto err_close;
	}
	ret = pp_pread_full(fd, path, buf, len, 0);
	if (ret < 0)
		goto err_free;
	close(fd);
	*buf_p = buf;
	*len_p = len;
	return 0;

err_free:
	free(buf);
err_close:
	close(fd);
	return ret;
}
