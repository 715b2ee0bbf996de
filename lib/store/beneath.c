/* Opens that stay below a directory: see beneath.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <kv/io.h>
#include "beneath.h"

/* Cleared on the first ENOSYS (a kernel before 5.6, a seccomp filter). */
static atomic_int have_openat2 = 1;

/* The fallback: each component opened with O_NOFOLLOW from the last one's
 * fd, ".." refused, the device checked when asked. */
static int open_by_component(int dirfd, const char *path, int flags, mode_t mode,
			     dev_t dev)
{
	char comp[NAME_MAX + 1];
	const char *p = path;
	int fd = dirfd, next, err;
	struct stat st;

	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);

		if (len == 0 || len > NAME_MAX ||
		    (p[0] == '.' && (len == 1 || (len == 2 && p[1] == '.')))) {
			err = -EXDEV;
			goto out;
		}
		memcpy(comp, p, len);
		comp[len] = '\0';
		next = slash ? openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
			     : openat(fd, comp, flags | O_NOFOLLOW | O_CLOEXEC, mode);
		err = next < 0 ? -errno : 0;
		if (fd != dirfd)
			close(fd);
		if (next < 0)
			return err;
		if (dev && (fstat(next, &st) < 0 || st.st_dev != dev)) {
			close(next);
			return -EXDEV;
		}
		if (!slash)
			return next;
		fd = next;
		p = slash + 1;
	}
out:
	if (fd != dirfd)
		close(fd);
	return err;
}

int kvi_open_beneath(int dirfd, const char *path, int flags, mode_t mode, dev_t dev)
{
	if (atomic_load_explicit(&have_openat2, memory_order_relaxed)) {
		struct open_how how = {
			.flags = (unsigned)(flags | O_NOFOLLOW | O_CLOEXEC),
			.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
			.resolve = KVI_RESOLVE | (dev ? RESOLVE_NO_XDEV : 0),
		};
		int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

		if (fd >= 0)
			return fd;
		if (errno != ENOSYS)
			return -errno;
		atomic_store(&have_openat2, 0);
	}
	return open_by_component(dirfd, path, flags, mode, dev);
}

int kvi_mkdir_beneath(int dirfd, const char *path)
{
	char comp[NAME_MAX + 1];
	const char *p = path;
	int fd = dirfd, next;

	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);

		if (len == 0 || len > NAME_MAX) {
			next = -EINVAL;
		} else {
			memcpy(comp, p, len);
			comp[len] = '\0';
			next = kvi_open_beneath(fd, comp, O_RDONLY | O_DIRECTORY, 0, 0);
			if (next == -ENOENT) {
				/* Racing writers make the same dirs: EEXIST is fine. */
				if (mkdirat(fd, comp, 0777) < 0 && errno != EEXIST)
					next = -errno;
				else
					next = kvi_open_beneath(fd, comp, O_RDONLY | O_DIRECTORY,
								0, 0);
			}
		}
		if (fd != dirfd)
			close(fd);
		if (next < 0 || !slash)
			return next;
		fd = next;
		p = slash + 1;
	}
}

int kv_open_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	return kvi_open_beneath(dirfd, path, flags, mode, 0);
}

int kv_mkdir_beneath(int dirfd, const char *path)
{
	return kvi_mkdir_beneath(dirfd, path);
}

int kv_open_parent_beneath(int dirfd, const char *path, const char **name)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	char dir[PATH_MAX];
	int fd;

	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return -EINVAL;
	*name = base;
	if (!slash) {
		fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
		return fd < 0 ? -errno : fd;
	}
	if ((size_t)(slash - path) >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	return kvi_open_beneath(dirfd, dir, O_PATH | O_DIRECTORY, 0, 0);
}
