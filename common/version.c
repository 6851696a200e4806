/*
 * common/version.c: the library's version (pinpipe/common.h), as the
 * headers it was built with say it.
 */
#include "config.h"

#include "pinpipe/common.h"

PP_API const char *pp_version(void)
{
	return PP_VERSION_STRING;
}
