/*
 * common/error.c: error messages and codes.  Each thread has its own last
 * message, so two loaders in two threads never see each other's errors.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/common_impl.h"
#include "pinpipe/source.h"

static _Thread_local char pp_msg[1024];

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
	return err;
}

PP_API const char *pp_last_error(void)
{
	return pp_msg;
}

PP_API const char *pp_strerror(int err)
{
	if (err < 0)
		err = -err;
	if (err == 0)
		return "Success";
	/* strerror() is thread-safe in glibc for known codes, and every
	 * code the library returns is a standard errno value. */
	return strerror(err);
}
