/*
 * common/size.c: the one parser of sizes on the programs' command lines
 * (common/size.h), shared by pinpipe-pack and pinpipe-bench.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "common/size.h"

bool pp_parse_size(const char *s, uint64_t *v_p)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return false;
	if (*end == 'K' || *end == 'k')
		mul = 1ull << 10;
	else if (*end == 'M' || *end == 'm')
		mul = 1ull << 20;
	else if (*end == 'G' || *end == 'g')
		mul = 1ull << 30;
	if (mul != 1)
		end++;
	if ((*end == 'i' || *end == 'B') && mul != 1)
		end += end[0] == 'i' && end[1] == 'B' ? 2 : 1;
	if (*end != '\0' || v == 0 || v > UINT64_MAX / mul)
		return false;
	*v_p = v * mul;
	return true;
}
