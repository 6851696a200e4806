/*
 * common/thread.c: starting the library's own threads with the
 * asynchronous signals blocked, so that a signal sent to the process is
 * handled on one of the application's threads, never on a loader worker, a
 * copy engine or a compute thread in the middle of the library's work.
 * And the signal a thread's own write raises past RLIMIT_FSIZE, SIGXFSZ,
 * held for the write (pp_xfsz_hold(), pp_write_full()): a failure to say,
 * not the process killed.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "common/fault.h"

/*
 * The signals a library thread keeps: those the kernel sends to the thread
 * that caused them (a fault, a trap, abort()), which cannot wait, and
 * SIGPROF, so that a profiler's timer still samples the library's threads.
 * Every other signal, SIGINT and SIGTERM first, is blocked.
 */
static const int kept_signals[] = {
	SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT, SIGPROF,
};

int pp_signals_block(sigset_t *caller_p)
{
	sigset_t blocked;

	sigfillset(&blocked);
	for (size_t k = 0; k < PP_ARRAY_SIZE(kept_signals); k++)
		sigdelset(&blocked, kept_signals[k]);
	return -pthread_sigmask(SIG_SETMASK, &blocked, caller_p);
}

void pp_signals_restore(const sigset_t *caller)
{
	pthread_sigmask(SIG_SETMASK, caller, NULL);
}

int pp_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	sigset_t caller;
	int ret;

	/* The new thread inherits the mask in force when it is created. */
	ret = pp_signals_block(&caller);
	if (ret < 0)
		return ret;
	ret = -pthread_create(thread, NULL, fn, arg);
	pp_signals_restore(&caller);
	/* So that a user (and a test) can tell the library's threads from others'. */
	if (ret == 0)
		pthread_setname_np(*thread, "pinpipe");
	return ret;
}

void pp_xfsz_hold(struct pp_xfsz *h)
{
	sigset_t xfsz, pending;

	sigemptyset(&xfsz);
	sigaddset(&xfsz, SIGXFSZ);
	h->held = false;
	h->was_pending = false;
	if (pthread_sigmask(SIG_BLOCK, &xfsz, &h->caller) != 0)
		return;
	/* Already blocked: the caller's own arrangement, left as it is. */
	h->held = !sigismember(&h->caller, SIGXFSZ);
	h->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ);
}

void pp_xfsz_release(struct pp_xfsz *h)
{
	const struct timespec now = { 0, 0 };
	sigset_t xfsz, pending;

	if (!h->held)
		return;
	sigemptyset(&xfsz);
	sigaddset(&xfsz, SIGXFSZ);
	/* the writes' own SIGXFSZ (thread-directed, so still this thread's): taken back */
	if (!h->was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ))
		while (sigtimedwait(&xfsz, NULL, &now) < 0 && errno == EINTR)
			;
	pthread_sigmask(SIG_SETMASK, &h->caller, NULL);
	h->held = false;
}

int pp_write_full(int fd, const void *buf, size_t len, int64_t off, struct pp_fault_plan *faults,
		  size_t *done_p)
{
	const uint8_t *p = buf;
	struct pp_xfsz xfsz;
	size_t done = 0;
	int ret = 0;

	pp_xfsz_hold(&xfsz);
	while (done < len) {
		const int fault = pp_fault_check(faults, PP_FAULT_WRITE);
		const size_t part = fault == PP_FAULT_SHORT ? (len - done + 1) / 2 : len - done;
		ssize_t n;

		if (fault < 0) {
			errno = -fault;
			n = -1;
		} else if (off < 0) {
			n = write(fd, p + done, part);
		} else {
			n = pwrite(fd, p + done, part, (off_t)off + (off_t)done);
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			break;
		}
		/* nothing taken, no reason given (a FUSE file system may): not forever */
		if (n == 0) {
			ret = -EIO;
			break;
		}
		done += (size_t)n;
	}
	pp_xfsz_release(&xfsz);
	if (done_p != NULL)
		*done_p = done;
	return ret;
}

const char *pp_write_hint(int err)
{
	struct rlimit rl;

	if (err != -EFBIG)
		return "";
	if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY)
		return " (the largest file this file system takes)";
	return " (the process's file size limit, RLIMIT_FSIZE: ulimit -f)";
}
