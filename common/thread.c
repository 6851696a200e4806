/*
 * common/thread.c: starting the library's own threads with the
 * asynchronous signals blocked, so that a signal sent to the process is
 * handled on one of the application's threads, never on a loader worker, a
 * copy engine or a compute thread in the middle of the library's work.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "common/common_impl.h"

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
