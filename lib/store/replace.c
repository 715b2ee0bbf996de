/*
 * Whole files written by name: see kv/io.h.  A new name or a regular
 * file gets a temp beside it, renamed over it at the end; anything else
 * at the name is never replaced, as a rename would destroy it (kvget -o
 * /dev/null run as root once left a regular file for /dev/null).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <kv/io.h>
#include <kv/kv.h>
#include <kv/layout.h>
#include "beneath.h"
#include "util/error.h"

struct kv_file_out {
	int fd;
	int dirfd;			/* the dir that holds name, O_PATH */
	unsigned flags;
	int in_place;			/* fd is the file at name itself */
	char name[NAME_MAX + 1];
	char tmp[NAME_MAX + 1];
};

enum { TARGET_REPLACE, TARGET_IN_PLACE };

static const char *kind_of(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFCHR: return "character device";
	case S_IFBLK: return "block device";
	case S_IFIFO: return "FIFO";
	case S_IFSOCK: return "socket";
	default: return "special file";
	}
}

/* What name in dir is: absent or a regular file (TARGET_REPLACE), a
 * device, FIFO or socket to write in place (TARGET_IN_PLACE, only with
 * KV_FILE_IN_PLACE), or refused: -errno with the detail set. */
static int target(int dir, const char *name, unsigned flags)
{
	struct stat st;

	if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? TARGET_REPLACE : -errno;
	if (S_ISREG(st.st_mode))
		return TARGET_REPLACE;
	if (S_ISLNK(st.st_mode))
		return kvi_fail(-ELOOP, "it is a symbolic link (not followed, not replaced)");
	if (S_ISDIR(st.st_mode))
		return kvi_fail(-EISDIR, "it is a directory");
	if (!(flags & KV_FILE_IN_PLACE))
		return kvi_fail(-EINVAL, "it is a %s, not a regular file (not replaced)",
				kind_of(st.st_mode));
	return TARGET_IN_PLACE;
}

/* The dir that holds path's last component, O_PATH, and that component. */
static int open_parent(int dirfd, const char *path, unsigned flags, const char **name)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	char dir[PATH_MAX];
	int fd;

	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return kvi_fail(-EISDIR, "it names a directory");
	if (strlen(base) > NAME_MAX)
		return -ENAMETOOLONG;
	if (flags & KV_FILE_BENEATH)
		return kv_open_parent_beneath(dirfd, path, name);
	*name = base;
	if (!slash) {
		strcpy(dir, ".");
	} else if (slash == path) {
		strcpy(dir, "/");
	} else {
		if ((size_t)(slash - path) >= sizeof(dir))
			return -ENAMETOOLONG;
		memcpy(dir, path, (size_t)(slash - path));
		dir[slash - path] = '\0';
	}
	fd = openat(dirfd, dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* The device, FIFO or socket at f->name opened for writing: never
 * created, truncated or followed, and no wait for a FIFO's reader. */
static int open_in_place(struct kv_file_out *f)
{
	struct stat st;
	int fd, fl, err;

	fd = openat(f->dirfd, f->name, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		err = errno;
		if (err == ENXIO && fstatat(f->dirfd, f->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			return S_ISFIFO(st.st_mode)
			       ? kvi_fail(-ENXIO, "it is a FIFO with no reader")
			       : kvi_fail(-ENXIO, "it is a %s, which cannot be opened",
					  kind_of(st.st_mode));
		if (err == ELOOP)
			return kvi_fail(-ELOOP, "it is a symbolic link (not followed, not replaced)");
		return -err;
	}
	/* Swapped for a file or a dir since it was looked at. */
	if (fstat(fd, &st) < 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
		close(fd);
		return kvi_fail(-EAGAIN, "it changed while being opened");
	}
	if (!(f->flags & KV_FILE_NONBLOCK) &&
	    ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)) {
		err = -errno;
		close(fd);
		return err;
	}
	f->fd = fd;
	f->in_place = 1;
	return 0;
}

static int open_temp(struct kv_file_out *f, mode_t mode)
{
	int err = kv_layout_temp_name(f->name, f->tmp, sizeof(f->tmp));

	if (err < 0)
		return err;
	f->fd = openat(f->dirfd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		       mode);
	if (f->fd < 0)
		return -errno;
	if ((f->flags & KV_FILE_MODE_EXACT) && fchmod(f->fd, mode) < 0) {
		err = -errno;
		close(f->fd);
		f->fd = -1;
		unlinkat(f->dirfd, f->tmp, 0);
		return err;
	}
	return 0;
}

int kv_file_replace_open(int dirfd, const char *path, mode_t mode, unsigned flags,
			 struct kv_file_out **out)
{
	struct kv_file_out *f;
	const char *name;
	int err;

	kvi_error_clear();
	if (!path || !*path || !out)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = -1;
	f->flags = flags;
	f->dirfd = open_parent(dirfd, path, flags, &name);
	if (f->dirfd < 0) {
		err = f->dirfd;
		free(f);
		return err;
	}
	strcpy(f->name, name);
	err = target(f->dirfd, f->name, flags);
	if (err == TARGET_IN_PLACE)
		err = open_in_place(f);
	else if (err == TARGET_REPLACE)
		err = open_temp(f, mode);
	if (err < 0) {
		close(f->dirfd);
		free(f);
		return err;
	}
	*out = f;
	return 0;
}

int kv_file_replace_fd(const struct kv_file_out *f)
{
	return f->fd;
}

void kv_file_replace_abort(struct kv_file_out *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	if (!f->in_place)
		unlinkat(f->dirfd, f->tmp, 0);
	close(f->dirfd);
	free(f);
}

/* The rename made durable: an fsync of the dir itself, not its O_PATH fd. */
static int sync_dir(int dirfd)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

int kv_file_replace_commit(struct kv_file_out *f)
{
	int err = 0, renamed = 0;

	kvi_error_clear();
	/* A device or a FIFO may not take fsync (EINVAL): nothing to lose. */
	if ((f->flags & KV_FILE_FSYNC) && fsync(f->fd) < 0 &&
	    !(f->in_place && (errno == EINVAL || errno == EROFS)))
		err = -errno;
	if (close(f->fd) < 0 && !err)
		err = -errno;
	f->fd = -1;
	if (!err && !f->in_place) {
		/* Looked at again: what appeared since the open is not replaced
		 * (its bytes are in the temp, so it is not written in place). */
		err = target(f->dirfd, f->name, f->flags & ~KV_FILE_IN_PLACE);
		if (!err && renameat(f->dirfd, f->tmp, f->dirfd, f->name) < 0)
			err = -errno;
		renamed = !err;
		if (!err && (f->flags & KV_FILE_FSYNC))
			err = sync_dir(f->dirfd);
	}
	if (!renamed && !f->in_place)
		unlinkat(f->dirfd, f->tmp, 0);
	close(f->dirfd);
	free(f);
	return err;
}

int kv_file_replace(int dirfd, const char *path, const void *buf, size_t len, mode_t mode,
		    unsigned flags)
{
	struct kv_file_out *f;
	int err = kv_file_replace_open(dirfd, path, mode, flags, &f);

	if (err < 0)
		return err;
	err = kv_write_full(f->fd, buf, len);
	if (err < 0) {
		kv_file_replace_abort(f);
		return err;
	}
	return kv_file_replace_commit(f);
}
