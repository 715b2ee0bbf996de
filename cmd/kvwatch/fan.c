/*
 * The node's reads: one fanotify mark on the root's whole filesystem
 * (so an open through any mount of it counts, a pod's bind mount
 * included), fd-based events (FUSE has no fsid for the FID modes),
 * read in large batches, each event's fd closed at once.  The reader is
 * never waited on: these are notifications, not permission events.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/fanotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include "../tool.h"
#include "kvwatch.h"

#define FAN_BUF_BYTES	(256 << 10)
#define FDS_SPARE	128	/* kept free of event fds */

/* The kernel opens an fd for every event a read returns, and loses the
 * events it cannot open one for: raise the soft limit on open files to
 * the hard one, and read no more events at once than fds are left. */
static size_t read_bytes_for_fds(void)
{
	struct rlimit rl;
	rlim_t fds;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	fds = rl.rlim_cur > 2 * FDS_SPARE ? rl.rlim_cur - FDS_SPARE : FDS_SPARE;
	if (fds > FAN_BUF_BYTES / FAN_EVENT_METADATA_LEN)
		return FAN_BUF_BYTES;
	return (size_t)fds * FAN_EVENT_METADATA_LEN;
}

void fan_open(struct watch *w)
{
	uint64_t mask = FAN_OPEN | FAN_CLOSE_WRITE;

	w->fan_read_bytes = read_bytes_for_fds();

	w->fan = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE,
			       O_RDONLY | O_LARGEFILE | O_CLOEXEC);
	if (w->fan < 0) {
		if (errno == EPERM)
			tool_err("fanotify needs the CAP_SYS_ADMIN capability to watch a whole "
				 "filesystem: %s", strerror(errno));
		else
			tool_err("cannot start fanotify: %s", strerror(errno));
		exit(EXIT_RUNTIME);
	}
	if (fanotify_mark(w->fan, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, mask, AT_FDCWD,
			  w->root) == 0) {
		w->mark = "filesystem";
		return;
	}
	/* A filesystem the kernel cannot mark whole: its mount, at least. */
	if ((errno == EINVAL || errno == EXDEV || errno == ENODEV || errno == EOPNOTSUPP) &&
	    fanotify_mark(w->fan, FAN_MARK_ADD | FAN_MARK_MOUNT, mask, AT_FDCWD, w->root) == 0) {
		w->mark = "mount";
		return;
	}
	tool_err("cannot watch the filesystem of '%s': %s%s", w->root, strerror(errno),
		 errno == EPERM ? " (fanotify needs CAP_SYS_ADMIN)" : "");
	exit(EXIT_RUNTIME);
}

/* stat relpath resolved beneath the root with no link followed at any
 * component: a rank dir planted as a symlink to elsewhere names no
 * block of this root. */
static int stat_beneath(int rootfd, const char *relpath, struct stat *st)
{
	const char *name;
	int dirfd = kv_open_parent_beneath(rootfd, relpath, &name), rc;

	if (dirfd < 0)
		return dirfd;
	rc = fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) ? -errno : 0;
	close(dirfd);
	return rc;
}

/* The block path under the root of what fd is: the path after the root,
 * or, read through another mount of the filesystem, the longest tail of
 * the path that is a layout path and the same file under the root. */
static const char *relpath_of(struct watch *w, char *path, int fd)
{
	struct kv_block_ref ref;
	struct stat a, b;

	if (!strncmp(path, w->root_real, w->root_len) && path[w->root_len] == '/')
		return path + w->root_len + 1;
	if (fstat(fd, &a) < 0)
		return NULL;
	for (char *p = path; (p = strchr(p, '/')); ) {
		p++;
		if (kv_layout_block_parse(p, &ref) == 0 && stat_beneath(w->rootfd, p, &b) == 0 &&
		    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
			return p;
	}
	return NULL;
}

/* Whether pid runs a program --ignore-comm names.  One process reads
 * many blocks in a row, so the last answer is kept, for a second (pids
 * are reused). */
#define PID_CACHE_NS	1000000000LL

static int ignored(struct watch *w, pid_t pid)
{
	char path[64], comm[32] = ",";
	int64_t now;
	ssize_t n;
	int fd;

	if (!w->ignore[0] || pid <= 0)
		return 0;
	now = kv_now_ns();

	if (pid == w->last_pid && now - w->last_pid_ns < PID_CACHE_NS)
		return w->last_ignored;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, comm + 1, sizeof(comm) - 3) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;		/* gone: count the use */
	if (comm[n] == '\n')
		n--;
	comm[n + 1] = ',';
	comm[n + 2] = '\0';
	w->last_pid = pid;
	w->last_pid_ns = now;
	w->last_ignored = strstr(w->ignore, comm) != NULL;
	return w->last_ignored;
}

static int ends_with(const char *s, size_t n, const char *tail)
{
	size_t t = strlen(tail);

	return n >= t && !memcmp(s + n - t, tail, t);
}

static void on_event(struct watch *w, const struct fanotify_event_metadata *md)
{
	char link[64], path[PATH_MAX], *cut;
	struct kv_block_ref ref;
	const char *rel;
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", md->fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return;
	path[n] = '\0';
	if (ends_with(path, (size_t)n, KV_BLOCK_SUFFIX)) {
		rel = relpath_of(w, path, md->fd);
		if (!rel || kv_layout_block_parse(rel, &ref) < 0)
			return;
		watch_index_add(w, rel);
		if (!(md->mask & FAN_OPEN))
			return;
		if (ignored(w, md->pid))
			w->c.reads_ignored++;
		else
			record_use(w, rel, md->fd, SOURCE_READ);
		return;
	}
	/* A writer's temp, closed: its block is about to appear. */
	if ((md->mask & FAN_CLOSE_WRITE) && ends_with(path, (size_t)n, ".tmp") &&
	    (cut = strstr(strrchr(path, '/'), KV_BLOCK_SUFFIX "_"))) {
		cut[strlen(KV_BLOCK_SUFFIX)] = '\0';
		if (!strncmp(path, w->root_real, w->root_len) && path[w->root_len] == '/' &&
		    kv_layout_block_parse(path + w->root_len + 1, &ref) == 0)
			watch_index_add(w, path + w->root_len + 1);
	}
}

/* 1 when the read filled the buffer (more may wait), 0 when it took
 * all there was. */
int fan_drain(struct watch *w)
{
	static char buf[FAN_BUF_BYTES] __attribute__((aligned(8)));
	const struct fanotify_event_metadata *md;
	ssize_t len = read(w->fan, buf, w->fan_read_bytes);
	pid_t self = getpid();
	size_t got;

	if (len <= 0)
		return 0;
	got = (size_t)len;	/* FAN_EVENT_NEXT counts len down */
	for (md = (const void *)buf; FAN_EVENT_OK(md, len); md = FAN_EVENT_NEXT(md, len)) {
		if (md->vers != FANOTIFY_METADATA_VERSION)
			break;
		if (md->mask & FAN_Q_OVERFLOW)
			w->c.overflows++;
		if (md->fd < 0)
			continue;
		if (md->pid != self)
			on_event(w, md);
		else
			w->last_pid = 0;
		close(md->fd);
	}
	return got + FAN_EVENT_METADATA_LEN * 64 > w->fan_read_bytes;
}
