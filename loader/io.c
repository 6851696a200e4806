/*
 * loader/io.c: the loader's file reads.  Each worker has an io_uring of its
 * own and submits all the chunk reads of a claim at once; completions that
 * come back short are requeued for the rest (at the end of a file opened
 * with O_DIRECT, the rest goes through the buffered descriptor, since its
 * offset is no longer aligned).  A worker's staging buffer is registered
 * with its ring where the kernel and RLIMIT_MEMLOCK allow, and reads into it
 * are then "fixed" reads.  Where the kernel refuses io_uring (ENOSYS,
 * EPERM), the same reads go through pread.
 */
#include "config.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/internal.h"
#include "loader/loader.h"

int pp_reader_init(struct pp_reader *r, enum pp_loader_io mode, unsigned depth)
{
	struct io_uring *ring;
	int ret;

	memset(r, 0, sizeof(*r));
	r->depth = depth;
	if (mode == PP_LOADER_IO_PREAD)
		return 0;
	ring = calloc(1, sizeof(*ring));
	if (ring == NULL)
		return pp_error(-ENOMEM, "loader: no memory for an io_uring");
	ret = io_uring_queue_init(depth, ring, 0);
	if (ret < 0) {
		free(ring);
		if (mode == PP_LOADER_IO_URING || (ret != -ENOSYS && ret != -EPERM))
			return pp_error(ret, "loader: io_uring_queue_init(%u) failed: %s%s", depth,
					pp_strerror(ret),
					mode == PP_LOADER_IO_URING ? " (io_uring was asked for; "
								     "PP_LOADER_IO_AUTO falls back to pread)" : "");
		return 0;
	}
	r->ring = ring;
	r->uring = true;
	return 0;
}

int pp_reader_register(struct pp_reader *r, void *buf, size_t len)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	int ret;

	if (!r->uring)
		return -EOPNOTSUPP;
	ret = io_uring_register_buffers(r->ring, &iov, 1);
	if (ret < 0)
		return ret;
	r->fixed = buf;
	r->fixed_len = len;
	return 0;
}

void pp_reader_fini(struct pp_reader *r)
{
	if (r->uring) {
		io_uring_queue_exit(r->ring);
		free(r->ring);
	}
	memset(r, 0, sizeof(*r));
}

/* What to do with 'res' bytes (or -errno) that arrived for a read: 1 when it is complete, 0 to requeue, or -errno. */
static int account(struct pp_read *q, ssize_t res)
{
	if (res < 0) {
		if (res == -EINTR || res == -EAGAIN)
			return 0;
		return pp_error((int)res, "%s: chunk %llu at offset %llu: read failed: %s", q->path,
				(unsigned long long)q->chunk,
				(unsigned long long)(q->offset + q->done), pp_strerror((int)res));
	}
	if (res == 0 && q->done < q->need)
		return pp_error(-EBADMSG, "%s: chunk %llu at offset %llu: file ends after %zu of "
				"its %zu bytes (truncated?)", q->path, (unsigned long long)q->chunk,
				(unsigned long long)q->offset, q->done, q->need);
	q->done += (size_t)res;
	return q->done >= q->need ? 1 : 0;
}

/* Where the next part of a read goes, and through which descriptor. */
static int next_fd(const struct pp_read *q)
{
	return q->done % PP_LOADER_IO_ALIGN == 0 ? q->fd : q->fd_buffered;
}

static int read_pread(struct pp_read *reqs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct pp_read *q = &reqs[i];
		int ret;

		do {
			ssize_t res = pread(next_fd(q), (char *)q->buf + q->done, q->len - q->done,
					    (off_t)(q->offset + q->done));
			ret = account(q, res < 0 ? -errno : res);
			if (ret < 0)
				return ret;
		} while (ret == 0);
	}
	return 0;
}

static void queue_read(struct pp_reader *r, struct pp_read *q)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(r->ring);
	uint8_t *dst = (uint8_t *)q->buf + q->done;
	size_t len = q->len - q->done;

	if (r->fixed != NULL && dst >= r->fixed && dst + len <= r->fixed + r->fixed_len)
		io_uring_prep_read_fixed(sqe, next_fd(q), dst, (unsigned)len, q->offset + q->done, 0);
	else
		io_uring_prep_read(sqe, next_fd(q), dst, (unsigned)len, q->offset + q->done);
	io_uring_sqe_set_data(sqe, q);
}

int pp_reader_read(struct pp_reader *r, struct pp_read *reqs, size_t n)
{
	struct io_uring *ring = r->ring;
	size_t pending = n;
	int first_err = 0;

	if (!r->uring)
		return read_pread(reqs, n);
	for (size_t i = 0; i < n; i++)
		queue_read(r, &reqs[i]);
	while (pending > 0) {
		struct io_uring_cqe *cqe;
		struct pp_read *q;
		int ret = io_uring_submit_and_wait(ring, 1);

		if (ret < 0 && ret != -EINTR)
			return pp_error(ret, "loader: io_uring_submit failed: %s", pp_strerror(ret));
		while (io_uring_peek_cqe(ring, &cqe) == 0) {
			q = io_uring_cqe_get_data(cqe);
			ret = account(q, cqe->res);
			io_uring_cqe_seen(ring, cqe);
			if (ret == 0 && first_err == 0) {
				queue_read(r, q);
				continue;
			}
			if (ret < 0 && first_err == 0)
				first_err = ret;
			pending--;
		}
	}
	return first_err;
}
