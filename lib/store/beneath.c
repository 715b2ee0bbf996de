/* Opens that stay below a directory: see beneath.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <kv/io.h>
#include <kv/units.h>
#include "beneath.h"
#include "util/error.h"

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

/* Who holds a flock on st's file, from /proc/locks: "pid P (COMM, uid U)",
 * or "an unknown process" (another PID namespace, no /proc). */
static void lock_holder(const struct stat *st, char *buf, size_t len)
{
	char line[256], path[64], comm[64] = "?";
	unsigned maj, min;
	unsigned long long ino;
	struct stat pst;
	int pid = 0;
	FILE *f = fopen("/proc/locks", "re");

	snprintf(buf, len, "an unknown process");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, "FLOCK") || strstr(line, "->"))
			continue;
		if (sscanf(line, "%*s %*s %*s %*s %d %x:%x:%llu", &pid, &maj, &min, &ino) == 4 &&
		    ino == (unsigned long long)st->st_ino && makedev(maj, min) == st->st_dev)
			break;
		pid = 0;
	}
	fclose(f);
	if (pid <= 0)
		return;
	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	if ((f = fopen(path, "re"))) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (stat(path, &pst) == 0)
		snprintf(buf, len, "pid %d (%s, uid %u)", pid, comm, (unsigned)pst.st_uid);
	else
		snprintf(buf, len, "pid %d", pid);
}

/* A fresh 0600 lock file of this user renamed over name (which must
 * still be a regular file). */
static int lock_replace(int dirfd, const char *name)
{
	return kv_file_replace(dirfd, name, "", 0, 0600, KV_FILE_BENEATH | KV_FILE_MODE_EXACT);
}

int kv_lock_beneath(int dirfd, const char *name, int op, int64_t wait_ns, int *fd)
{
	int64_t deadline = kv_monotonic_ns() + (wait_ns > 0 ? wait_ns : 0);
	struct timespec nap = { 0, 20 * 1000 * 1000 };
	struct stat st, now, dir;
	char who[160];
	int lfd, err;

	kvi_error_clear();
	if (fstat(dirfd, &dir) < 0)
		return -errno;
	for (int tries = 0; tries < 8; tries++) {
		lfd = openat(dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
			     0600);
		/* fs.protected_regular refuses even root an O_CREAT open of
		 * another's file in a sticky world-writable dir: open it as
		 * it is, to be judged (and replaced) below. */
		if (lfd < 0 && (errno == EACCES || errno == EPERM))
			lfd = openat(dirfd, name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (lfd < 0 && errno == ENOENT)
			continue;	/* removed between the two opens */
		if (lfd < 0)
			return kvi_fail(-errno, "lock '%s': %s", name, strerror(errno));
		if (fstat(lfd, &st) < 0 || !S_ISREG(st.st_mode)) {
			close(lfd);
			return kvi_fail(-EINVAL, "lock '%s' is not a regular file", name);
		}
		if ((st.st_uid != geteuid() && st.st_uid != 0 && st.st_uid != dir.st_uid) ||
		    (st.st_mode & 077)) {
			/* Others could open it, so hold it (or it is the file of
			 * a user who may not run the tool here): not to trust. */
			err = lock_replace(dirfd, name);
			close(lfd);
			if (err < 0)
				return kvi_fail(err == -EACCES ? -EPERM : err,
						"lock '%s' belongs to uid %u (mode %04o) and cannot be "
						"replaced: %s", name, (unsigned)st.st_uid,
						(unsigned)(st.st_mode & 07777), strerror(-err));
			continue;
		}
		while (flock(lfd, op | LOCK_NB) < 0) {
			err = errno;
			if (err == EINTR)
				continue;
			if (err != EWOULDBLOCK || kv_monotonic_ns() >= deadline) {
				if (err == EWOULDBLOCK)
					lock_holder(&st, who, sizeof(who));
				close(lfd);
				return err == EWOULDBLOCK
				       ? kvi_fail(-EWOULDBLOCK, "lock '%s' held by %s", name, who)
				       : kvi_fail(-err, "lock '%s': %s", name, strerror(err));
			}
			nanosleep(&nap, NULL);
			if (nap.tv_nsec < 320 * 1000 * 1000)
				nap.tv_nsec *= 2;
		}
		/* Replaced while we waited on the old one: take the new one. */
		if (fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
		    now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
			*fd = lfd;
			return 0;
		}
		close(lfd);
	}
	return kvi_fail(-EAGAIN, "lock '%s' keeps being replaced", name);
}
