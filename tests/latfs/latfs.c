/*
 * latfs: a FUSE passthrough that adds a fixed delay to every operation,
 * the way every metadata operation of a network filesystem is a round
 * trip.  For the tests and benchmarks of walks, puts and evictions on
 * high-latency storage.  Multi-threaded, so operations issued at once
 * wait at once: Q operations in flight with delay L run at about Q/L.
 *
 * Usage: latfs SOURCE MOUNTPOINT [-o delay_us=N] [-o max_threads=N] [FUSE options]
 *
 * Paths are resolved below SOURCE with the *at() calls from one dirfd;
 * symlinks are passed through as symlinks, never followed.  Counts of
 * operations go to SOURCE's sibling file given by -o stats=PATH at
 * unmount (for syscalls-per-block figures).  -o eio_when=PATH: while PATH
 * (outside the mount) exists, every read and write fails with EIO, as on
 * a dying disk or an export whose server went away.
 */
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/xattr.h>

struct latfs {
	char *source;
	int srcfd;
	unsigned delay_us;
	char *stats;
	char *eio_when;
	atomic_ulong ops;
};

static struct latfs L;

static const struct fuse_opt opts[] = {
	{ "delay_us=%u", offsetof(struct latfs, delay_us), 0 },
	{ "stats=%s", offsetof(struct latfs, stats), 0 },
	{ "eio_when=%s", offsetof(struct latfs, eio_when), 0 },
	FUSE_OPT_END,
};

/* The round trip every operation pays. */
static void wait_rtt(void)
{
	struct timespec ts = { L.delay_us / 1000000, (long)(L.delay_us % 1000000) * 1000 };

	atomic_fetch_add(&L.ops, 1);
	if (L.delay_us)
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
}

/* "/a/b" -> "a/b", "/" -> "." */
static const char *rel(const char *path)
{
	while (*path == '/')
		path++;
	return *path ? path : ".";
}

#define RET(expr) return (expr) < 0 ? -errno : 0

static int lat_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	wait_rtt();
	if (fi)
		RET(fstat((int)fi->fh, st));
	RET(fstatat(L.srcfd, rel(path), st, AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH));
}

static int lat_readlink(const char *path, char *buf, size_t size)
{
	ssize_t n;

	wait_rtt();
	n = readlinkat(L.srcfd, rel(path), buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static int lat_mkdir(const char *path, mode_t mode)
{
	wait_rtt();
	RET(mkdirat(L.srcfd, rel(path), mode));
}

static int lat_unlink(const char *path)
{
	wait_rtt();
	RET(unlinkat(L.srcfd, rel(path), 0));
}

static int lat_rmdir(const char *path)
{
	wait_rtt();
	RET(unlinkat(L.srcfd, rel(path), AT_REMOVEDIR));
}

static int lat_symlink(const char *target, const char *path)
{
	wait_rtt();
	RET(symlinkat(target, L.srcfd, rel(path)));
}

static int lat_rename(const char *from, const char *to, unsigned int flags)
{
	wait_rtt();
	RET(renameat2(L.srcfd, rel(from), L.srcfd, rel(to), flags));
}

static int lat_link(const char *from, const char *to)
{
	wait_rtt();
	RET(linkat(L.srcfd, rel(from), L.srcfd, rel(to), 0));
}

static int lat_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	wait_rtt();
	if (fi)
		RET(fchmod((int)fi->fh, mode));
	RET(fchmodat(L.srcfd, rel(path), mode, 0));
}

static int lat_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
	wait_rtt();
	if (fi)
		RET(fchown((int)fi->fh, uid, gid));
	RET(fchownat(L.srcfd, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW));
}

static int lat_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	int fd, r;

	wait_rtt();
	if (fi)
		RET(ftruncate((int)fi->fh, size));
	fd = openat(L.srcfd, rel(path), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = ftruncate(fd, size) < 0 ? -errno : 0;
	close(fd);
	return r;
}

static int lat_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
	wait_rtt();
	if (fi)
		RET(futimens((int)fi->fh, tv));
	RET(utimensat(L.srcfd, rel(path), tv, AT_SYMLINK_NOFOLLOW));
}

static int lat_open(const char *path, struct fuse_file_info *fi)
{
	int fd;

	wait_rtt();
	fd = openat(L.srcfd, rel(path), (fi->flags & ~O_DIRECT) | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int lat_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	int fd;

	wait_rtt();
	fd = openat(L.srcfd, rel(path), (fi->flags & ~O_DIRECT) | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
		    mode);
	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

/* Whether the data path fails now (-o eio_when). */
static int failing(void)
{
	return L.eio_when && access(L.eio_when, F_OK) == 0;
}

static int lat_read(const char *path, char *buf, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	ssize_t n;

	(void)path;
	wait_rtt();
	if (failing())
		return -EIO;
	n = pread((int)fi->fh, buf, size, off);
	return n < 0 ? -errno : (int)n;
}

static int lat_write(const char *path, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	ssize_t n;

	(void)path;
	wait_rtt();
	if (failing())
		return -EIO;
	n = pwrite((int)fi->fh, buf, size, off);
	return n < 0 ? -errno : (int)n;
}

static int lat_statfs(const char *path, struct statvfs *st)
{
	(void)path;
	wait_rtt();
	RET(fstatvfs(L.srcfd, st));
}

static int lat_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	close((int)fi->fh);
	return 0;
}

static int lat_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	(void)path;
	wait_rtt();
	RET(datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh));
}

/* xattrs through /proc/self/fd of an O_PATH fd: no *at() form exists. */
static int xattr_path(const char *path, char *buf, size_t len, int *fd)
{
	*fd = openat(L.srcfd, rel(path), O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (*fd < 0)
		return -errno;
	snprintf(buf, len, "/proc/self/fd/%d", *fd);
	return 0;
}

static int lat_setxattr(const char *path, const char *name, const char *value, size_t size,
			int flags)
{
	char p[64];
	int fd, r;

	wait_rtt();
	if ((r = xattr_path(path, p, sizeof(p), &fd)) < 0)
		return r;
	r = setxattr(p, name, value, size, flags) < 0 ? -errno : 0;
	close(fd);
	return r;
}

static int lat_getxattr(const char *path, const char *name, char *value, size_t size)
{
	char p[64];
	ssize_t n;
	int fd, r;

	wait_rtt();
	if ((r = xattr_path(path, p, sizeof(p), &fd)) < 0)
		return r;
	n = getxattr(p, name, value, size);
	close(fd);
	return n < 0 ? -errno : (int)n;
}

static int lat_listxattr(const char *path, char *list, size_t size)
{
	char p[64];
	ssize_t n;
	int fd, r;

	wait_rtt();
	if ((r = xattr_path(path, p, sizeof(p), &fd)) < 0)
		return r;
	n = listxattr(p, list, size);
	close(fd);
	return n < 0 ? -errno : (int)n;
}

static int lat_removexattr(const char *path, const char *name)
{
	char p[64];
	int fd, r;

	wait_rtt();
	if ((r = xattr_path(path, p, sizeof(p), &fd)) < 0)
		return r;
	r = removexattr(p, name) < 0 ? -errno : 0;
	close(fd);
	return r;
}

static int lat_opendir(const char *path, struct fuse_file_info *fi)
{
	int fd;
	DIR *d;

	wait_rtt();
	fd = openat(L.srcfd, rel(path), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	return 0;
}

/* One round trip per call, as a network filesystem's READDIR is. */
static int lat_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		       struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	DIR *d = (DIR *)(uintptr_t)fi->fh;
	struct dirent *e;

	(void)path;
	(void)flags;
	wait_rtt();
	if (off != telldir(d))
		seekdir(d, off);
	while ((e = readdir(d))) {
		struct stat st = { .st_ino = e->d_ino, .st_mode = (mode_t)DTTOIF(e->d_type) };

		if (fill(buf, e->d_name, &st, telldir(d), 0))
			break;
	}
	return 0;
}

static int lat_releasedir(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	closedir((DIR *)(uintptr_t)fi->fh);
	return 0;
}

static int lat_access(const char *path, int mask)
{
	wait_rtt();
	RET(faccessat(L.srcfd, rel(path), mask, AT_SYMLINK_NOFOLLOW));
}

static void *lat_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	/* every lookup and getattr goes to us: no kernel cache hides the
	 * latency, and other mounts' changes are seen at once */
	cfg->entry_timeout = 0;
	cfg->attr_timeout = 0;
	cfg->negative_timeout = 0;
	cfg->use_ino = 1;
	cfg->nullpath_ok = 1;
	return NULL;
}

static void lat_destroy(void *data)
{
	FILE *f;

	(void)data;
	if (L.stats && (f = fopen(L.stats, "w"))) {
		fprintf(f, "%lu\n", (unsigned long)atomic_load(&L.ops));
		fclose(f);
	}
}

static const struct fuse_operations ops = {
	.init = lat_init,
	.destroy = lat_destroy,
	.getattr = lat_getattr,
	.readlink = lat_readlink,
	.mkdir = lat_mkdir,
	.unlink = lat_unlink,
	.rmdir = lat_rmdir,
	.symlink = lat_symlink,
	.rename = lat_rename,
	.link = lat_link,
	.chmod = lat_chmod,
	.chown = lat_chown,
	.truncate = lat_truncate,
	.utimens = lat_utimens,
	.open = lat_open,
	.create = lat_create,
	.read = lat_read,
	.write = lat_write,
	.statfs = lat_statfs,
	.release = lat_release,
	.fsync = lat_fsync,
	.setxattr = lat_setxattr,
	.getxattr = lat_getxattr,
	.listxattr = lat_listxattr,
	.removexattr = lat_removexattr,
	.opendir = lat_opendir,
	.readdir = lat_readdir,
	.releasedir = lat_releasedir,
	.access = lat_access,
};

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	int ret;

	if (argc < 3 || argv[1][0] == '-') {
		fprintf(stderr, "usage: latfs SOURCE MOUNTPOINT [-o delay_us=N] "
				"[-o max_threads=N] [-o stats=FILE] [-o eio_when=FILE] [FUSE options]\n");
		return 2;
	}
	L.source = realpath(argv[1], NULL);
	if (!L.source || (L.srcfd = open(L.source, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "latfs: cannot open '%s': %s\n", argv[1], strerror(errno));
		return 1;
	}
	/* SOURCE is ours, not FUSE's */
	args.argv[1] = args.argv[0];
	args.argv++;
	args.argc--;
	if (fuse_opt_parse(&args, &L, opts, NULL) < 0)
		return 2;
	/* the caller's stats path is relative to where it ran */
	if (L.stats && L.stats[0] != '/') {
		char *cwd = getcwd(NULL, 0), *abs;

		if (!cwd || asprintf(&abs, "%s/%s", cwd, L.stats) < 0)
			return 1;
		free(cwd);
		L.stats = abs;
	}
	umask(0);
	ret = fuse_main(args.argc, args.argv, &ops, NULL);
	fuse_opt_free_args(&args);
	return ret;
}
