/*
 * common/links.h: a path's chain of symbolic links followed, to the name
 * that a file renamed over the path must take (common/links.c).  Internal:
 * compiled into the library, where common/path.c uses it, and into the
 * programs, which see none of the library's internal symbols (common/args.c
 * and tools/pack.c use it), so that the two follow links one way.
 */
#ifndef PP_COMMON_LINKS_H
#define PP_COMMON_LINKS_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Writes to out[0..len) 'path' with its chain of symbolic links followed
 * to its last name: the first that is not a link, or that is not there
 * yet (a link that leads nowhere names the file to make).  A relative
 * link is read from its own folder.  Returns true, or false with errno
 * set: ELOOP past 40 links, ENAMETOOLONG where a name does not fit, or
 * readlink()'s error.
 */
bool pp_links_follow(const char *path, char *out, size_t len);

#endif
