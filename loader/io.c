/*
 * loader/io.c: the loader's file reads.  Each worker has an io_uring of its
 * own and submits all the chunk reads of a claim at once; completions that
 * come back short are requeued for the rest (at the end of a file opened
 * with O_DIRECT, the rest goes through the buffered descriptor, since its
 * offset is no longer aligned), and EINTR or EAGAIN is retried.  A worker's
 * staging buffer is registered with its ring where the kernel and
 * RLIMIT_MEMLOCK allow, and reads into it are then "fixed" reads.  Where the
 * kernel refuses io_uring (ENOSYS, EPERM), or a ring's memory (ENOMEM: the
 * kernel charges it to RLIMIT_MEMLOCK, which a few rings spend where the
 * limit is 64 KiB, and pinned memory and registered buffers spend too), the
 * same reads go through pread.
 *
 * A read that makes no progress for the reader's timeout fails with
 * -ETIMEDOUT: io_uring waits for completions with that limit and cancels
 * what is still in flight; pread checks it between reads.  Injected faults
 * (common/fault.h) make reads short, failed or stalled: a stalled io_uring
 * read is a read of the fault plan's empty pipe, which never completes
 * until cancelled, and a stalled pread sleeps until the limit, as a pread
 * blocked in the kernel would.
 */
#include "config.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "loader/loader_impl.h"

int pp_reader_init(struct pp_reader *r, enum pp_loader_io mode, unsigned depth,
		   uint32_t timeout_ms)
{
	struct io_uring *ring;
	int ret;

	memset(r, 0, sizeof(*r));
	r->depth = depth;
	r->timeout_ms = timeout_ms;
	r->faults = pp_fault_thread;
	if (mode == PP_LOADER_IO_PREAD)
		return 0;
	ring = pp_calloc(1, sizeof(*ring));
	if (ring == NULL)
		return pp_error(-ENOMEM, "loader: no memory for an io_uring");
	/* twice the reads: room for a cancellation of each */
	ret = pp_fault_check(r->faults, PP_FAULT_URING_SETUP);
	if (ret >= 0)
		ret = io_uring_queue_init(2 * depth, ring, 0);
	if (ret < 0) {
		free(ring);
		/* ENOMEM: the kernel charges a ring's memory to RLIMIT_MEMLOCK, which pinned memory and registered buffers may have spent */
		if (mode == PP_LOADER_IO_URING || (ret != -ENOSYS && ret != -EPERM && ret != -ENOMEM))
			return pp_error(ret, "loader: io_uring_queue_init(%u) failed: %s%s%s", 2 * depth,
					pp_strerror(ret),
					ret == -ENOMEM ? " (its rings count against RLIMIT_MEMLOCK, ulimit -l)"
						       : "",
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

static int timed_out(const struct pp_reader *r, const struct pp_read *q)
{
	return pp_error(-ETIMEDOUT, "%s: chunk %llu at offset %llu: read did not complete within %u ms",
			q->path, (unsigned long long)q->chunk, (unsigned long long)q->offset,
			r->timeout_ms);
}

/* Where the next part of a read goes, and through which descriptor. */
static int next_fd(const struct pp_read *q)
{
	return q->done % PP_LOADER_IO_ALIGN == 0 ? q->fd : q->fd_buffered;
}

/*
 * Bytes an injected short read moves of 'len': half, in whole 4096-byte
 * blocks so that an O_DIRECT read stays aligned; a read of one block or
 * less is left whole.
 */
static size_t short_len(size_t len)
{
	if (len <= PP_LOADER_IO_ALIGN)
		return len;
	return PP_MAX(len / 2 / PP_LOADER_IO_ALIGN * PP_LOADER_IO_ALIGN, (size_t)PP_LOADER_IO_ALIGN);
}

/* An injected stall of a pread: sleeps until the deadline, as a pread blocked that long. */
static void stall_until(uint64_t deadline)
{
	uint64_t now;

	while ((now = pp_now_ns()) < deadline) {
		uint64_t ns = PP_MIN(deadline - now, (uint64_t)1000000);
		struct timespec ts = { 0, (long)ns };
		nanosleep(&ts, NULL);
	}
}

static int read_pread(struct pp_reader *r, struct pp_read *reqs, size_t n)
{
	uint64_t limit = (uint64_t)r->timeout_ms * 1000000u;

	for (size_t i = 0; i < n; i++) {
		struct pp_read *q = &reqs[i];
		uint64_t deadline = pp_now_ns() + limit;
		int ret;

		do {
			size_t len = q->len - q->done;
			int fault = pp_fault_check(r->faults, PP_FAULT_READ);
			ssize_t res;

			if (fault == PP_FAULT_STALL)
				stall_until(deadline);
			if (pp_now_ns() >= deadline)
				return timed_out(r, q);
			if (fault < 0) {
				res = fault;
			} else {
				if (fault == PP_FAULT_SHORT)
					len = short_len(len);
				res = pread(next_fd(q), (char *)q->buf + q->done, len,
					    (off_t)(q->offset + q->done));
				if (res < 0)
					res = -errno;
			}
			ret = account(q, res);
			if (ret < 0)
				return ret;
			if (res > 0)
				deadline = pp_now_ns() + limit;
		} while (ret == 0);
	}
	return 0;
}

static void queue_read(struct pp_reader *r, struct pp_read *q)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(r->ring);
	uint8_t *dst = (uint8_t *)q->buf + q->done;
	size_t len = q->len - q->done;
	int fault = pp_fault_check(r->faults, PP_FAULT_URING_READ);

	q->inject = fault < 0 ? fault : 0;
	q->inflight = true;
	if (fault == PP_FAULT_SHORT)
		len = short_len(len);
	if (fault == PP_FAULT_STALL)
		io_uring_prep_read(sqe, r->faults->stall_fd[0], dst, (unsigned)len, (uint64_t)-1);
	else if (r->fixed != NULL && dst >= r->fixed && dst + len <= r->fixed + r->fixed_len)
		io_uring_prep_read_fixed(sqe, next_fd(q), dst, (unsigned)len, q->offset + q->done, 0);
	else
		io_uring_prep_read(sqe, next_fd(q), dst, (unsigned)len, q->offset + q->done);
	io_uring_sqe_set_data(sqe, q);
}

/*
 * Cancels the reads of reqs[0..n) still in flight and waits for their
 * completions, so that no read writes into a buffer after the caller gave
 * up.  Returns 'err'.
 */
static int cancel_reads(struct pp_reader *r, struct pp_read *reqs, size_t n, int err)
{
	struct io_uring *ring = r->ring;
	size_t left = 0;

	for (size_t i = 0; i < n; i++) {
		struct io_uring_sqe *sqe;
		if (!reqs[i].inflight)
			continue;
		left++;
		sqe = io_uring_get_sqe(ring);
		if (sqe == NULL) {
			io_uring_submit(ring);
			sqe = io_uring_get_sqe(ring);
		}
		if (sqe != NULL) {
			io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)&reqs[i], 0);
			io_uring_sqe_set_data(sqe, NULL);
		}
	}
	while (left > 0) {
		struct io_uring_cqe *cqe;
		int ret = io_uring_submit_and_wait(ring, 1);

		if (ret < 0 && ret != -EINTR && ret != -EBUSY)
			break;
		while (io_uring_peek_cqe(ring, &cqe) == 0) {
			struct pp_read *q = io_uring_cqe_get_data(cqe);
			if (q != NULL) {
				q->inflight = false;
				left--;
			}
			io_uring_cqe_seen(ring, cqe);
		}
	}
	return err;
}

int pp_reader_read(struct pp_reader *r, struct pp_read *reqs, size_t n)
{
	struct io_uring *ring = r->ring;
	uint64_t limit = (uint64_t)r->timeout_ms * 1000000u, deadline;
	size_t pending = n;
	int first_err = 0;

	if (!r->uring)
		return read_pread(r, reqs, n);
	for (size_t i = 0; i < n; i++)
		queue_read(r, &reqs[i]);
	deadline = pp_now_ns() + limit;
	while (pending > 0) {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts;
		uint64_t now = pp_now_ns(), wait = deadline > now ? deadline - now : 0;
		int ret = pp_fault_check(r->faults, PP_FAULT_URING_SUBMIT);

		if (ret < 0)
			return cancel_reads(r, reqs, n, pp_error(ret, "%s: chunk %llu: io_uring_submit "
				"failed: %s", reqs[0].path, (unsigned long long)reqs[0].chunk,
				pp_strerror(ret)));
		ts.tv_sec = (long long)(wait / 1000000000u);
		ts.tv_nsec = (long long)(wait % 1000000000u);
		/* one system call submits what is queued and waits, up to the deadline */
		ret = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL);
		if (ret == -ETIME) {
			for (size_t i = 0; i < n; i++)
				if (reqs[i].inflight)
					return cancel_reads(r, reqs, n, timed_out(r, &reqs[i]));
		}
		if (ret < 0 && ret != -EINTR && ret != -EBUSY && ret != -ETIME)
			return cancel_reads(r, reqs, n, pp_error(ret, "%s: chunk %llu: io_uring_submit "
				"failed: %s", reqs[0].path, (unsigned long long)reqs[0].chunk,
				pp_strerror(ret)));
		while (io_uring_peek_cqe(ring, &cqe) == 0) {
			struct pp_read *q = io_uring_cqe_get_data(cqe);
			int res = cqe->res;

			io_uring_cqe_seen(ring, cqe);
			q->inflight = false;
			if (q->inject != 0 && res >= 0)
				res = q->inject;
			ret = account(q, res);
			if (res > 0)
				deadline = pp_now_ns() + limit;
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
