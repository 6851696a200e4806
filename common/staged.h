/*
 * common/staged.h: the file a writer fills beside its target and renames
 * over it (a checkpoint, a shard, a file of rows), TARGET.tmp-XXXXXX, and
 * what a writer killed before its rename left there (common/staged.c).
 * Internal: compiled into the library (checkpoints, shards) and into the
 * programs (pinpipe-train's and pinpipe-bench's rows), which see none of
 * the library's internal symbols, so that both name and clear such files
 * one way.
 */
#ifndef PP_COMMON_STAGED_H
#define PP_COMMON_STAGED_H

#include <stddef.h>

/* A staged file this much older than now (seconds, by its status change) may be a dead writer's. */
#define PP_STAGED_STALE_S 2

/*
 * Creates a new file 'target'.tmp-XXXXXX (mkostemp: a name of its own,
 * O_EXCL, close-on-exec), its name written to tmp[0..len), and locks it
 * (flock, held until the descriptor is closed: a writer's lock says that
 * it lives).  First removes beside it what dead writers of 'target' left:
 * files of that name, not links, this user's, with one link, whose status
 * last changed PP_STAGED_STALE_S seconds ago or more (a writer locks its
 * file a moment after making it), and whose lock is free.  Where the file
 * system takes no lock, nothing is removed.  A writer keeps the file open,
 * so locked, until it is renamed into place.  The writers of one target
 * must see each other's locks: on NFS mounted with nolock or local_lock,
 * writers on two hosts do not.  Returns the descriptor (O_RDWR), or -1
 * with errno set (ENAMETOOLONG where the name does not fit in tmp).
 */
int pp_staged_create(const char *target, char *tmp, size_t len);

#endif
