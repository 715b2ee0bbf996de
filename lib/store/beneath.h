/*
 * Opening a path below a directory without ever leaving it: no symlink
 * followed at any component, no ".." above it, optionally no mount
 * crossed.  Every open under a cache root goes through here (the walk,
 * the file engine, eviction), so a hostile tree cannot point a reader or
 * a writer outside the root.
 */
#ifndef KV_STORE_BENEATH_H
#define KV_STORE_BENEATH_H

#include <sys/types.h>
#include <linux/openat2.h>

/* What every open below a root resolves with. */
#define KVI_RESOLVE	(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* openat2(dirfd, path, flags | O_CLOEXEC | O_NOFOLLOW, mode) resolved
 * with KVI_RESOLVE (| RESOLVE_NO_XDEV when dev is not 0: every component
 * must lie on that device).  Where the kernel has no openat2, the same
 * rules one component at a time.  The fd, or -errno: -ELOOP for a
 * symlink, -EXDEV for a mount or an escape. */
int kvi_open_beneath(int dirfd, const char *path, int flags, mode_t mode, dev_t dev);

/* The dirs of path (a relative "a/b/c"), made where missing (mode 0777
 * before umask) and opened O_RDONLY | O_DIRECTORY under the same rules:
 * the fd of the last, or -errno. */
int kvi_mkdir_beneath(int dirfd, const char *path);

#endif
