/*
 * common/error.c: error messages and codes.  Each thread has its own last
 * message, so two loaders in two threads never see each other's errors.
 */
#include "config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/common_impl.h"
#include "pinpipe/source.h"

static _Thread_local char pp_msg[1024];
/* Messages set so far in the thread: a mark taken before a call tells whether it set one. */
static _Thread_local uint64_t pp_msg_count;

/*
 * Formats into a buffer of its own first: an argument may be pp_last_error()
 * itself ("%s: %s", path, pp_last_error()), which vsnprintf must not write
 * over while it reads it.
 */
static int error_format(int err, const char *fmt, va_list ap)
{
	char buf[sizeof(pp_msg)];

	vsnprintf(buf, sizeof(buf), fmt, ap);
	memcpy(pp_msg, buf, sizeof(pp_msg));
	pp_msg_count++;
	return err;
}

int pp_error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = error_format(err, fmt, ap);
	va_end(ap);
	return err;
}

/* The same, for sources, decoders and transforms of the user's own (pinpipe/source.h). */
PP_API int pp_set_error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = error_format(err, fmt, ap);
	va_end(ap);
	return err;
}

int pp_error_set(int err, const char *msg)
{
	if (msg != pp_msg)
		snprintf(pp_msg, sizeof(pp_msg), "%s", msg);
	pp_msg_count++;
	return err;
}

uint64_t pp_error_mark(void)
{
	return pp_msg_count;
}

const char *pp_error_since(uint64_t mark)
{
	return pp_msg_count != mark ? pp_msg : "";
}

void pp_error_save(struct pp_error_saved *s)
{
	_Static_assert(sizeof(s->msg) == sizeof(pp_msg), "a saved message holds the thread's");
	memcpy(s->msg, pp_msg, sizeof(pp_msg));
	s->count = pp_msg_count;
}

void pp_error_restore(const struct pp_error_saved *s)
{
	memcpy(pp_msg, s->msg, sizeof(pp_msg));
	pp_msg_count = s->count;
}

PP_API const char *pp_last_error(void)
{
	return pp_msg;
}

PP_API const char *pp_strerror(int err)
{
	const char *s;

	if (err == 0)
		return "Success";
	/* -INT_MIN is not an int: no errno is that large. */
	if (err == INT_MIN || err == INT_MAX)
		return "Unknown error";
	if (err < 0)
		err = -err;
	/* strerrordesc_np() gives glibc's static text for a known code; strerror()
	 * would format an unknown one into a buffer of the thread's that the next
	 * such call frees, under a caller still reading the first. */
#ifdef HAVE_STRERRORDESC_NP
	s = strerrordesc_np(err);
#else
	{
		static _Thread_local char buf[128];

		s = strerror_r(err, buf, sizeof(buf));
	}
#endif
	return s != NULL ? s : "Unknown error";
}
