/*
 * common/size.h: sizes on the programs' command lines ("64M", "4KiB").
 * Internal, and not in the library, whose sizes are numbers: common/size.c
 * is compiled into the programs that read sizes (pinpipe-pack,
 * pinpipe-bench) and into their tests.
 */
#ifndef PP_COMMON_SIZE_H
#define PP_COMMON_SIZE_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Parses a size: a decimal number above 0 with an optional K, M or G suffix
 * (binary: 2^10, 2^20, 2^30; either case), which may be followed by "B",
 * "i" or "iB" ("64M", "4k", "1GiB").  Returns true and writes the size to
 * *v_p, or returns false, writing nothing, when s is no such size or the
 * size does not fit in 64 bits.
 */
bool pp_parse_size(const char *s, uint64_t *v_p);

#endif
