/*
 * The file engine.  Data moves through io_uring, up to queue_depth
 * transfers in flight.  The opens, which may wait on the journal or on
 * directory reads from a cold cache, go through the ring too where the
 * kernel has those opcodes, so they overlap other blocks' data; the quick
 * steps (fstat, xattr, rename, atime) are plain syscalls between
 * completions.  Nothing is ever opened through a symlink or outside the
 * root: a get opens its block with openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS, a put first opens its bucket dir that way (making
 * the missing dirs one at a time) and then creates, renames and syncs
 * within that dir only.  Each request
 * occupies one slot from start to finish and has at most one SQE
 * outstanding, so a ring of queue_depth entries never runs out.  Where
 * no ring can be set up (an old kernel, a sandbox that forbids
 * io_uring) the same steps run as plain synchronous syscalls.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <liburing.h>
#include <kv/errors.h>
#include <kv/integrity.h>
#include <kv/io.h>
#include <kv/layout.h>
#include "beneath.h"

#define DEFAULT_QUEUE_DEPTH	32
#define MAX_QUEUE_DEPTH		1024
#define HUGE_PAGE_BYTES		(2u << 20)	/* a transparent huge page */
#define MAX_SQE_BYTES		(1u << 30)	/* one SQE moves at most this */
#define TEMP_OPEN_TRIES		8
#define MKDIR_TRIES		3
#define RENAME_TRIES		5	/* backing off from 2 ms to 64 ms */

enum { DIRECT_UNKNOWN = -1, DIRECT_NO = 0, DIRECT_YES = 1 };

enum step { STEP_OPEN, STEP_DATA, STEP_FSYNC, STEP_DIRSYNC };

struct slot {
	struct kv_io_req *req;	/* NULL while the slot is free */
	int fd;			/* the block (get) or its temp (put) */
	int dirfd;		/* put: the bucket dir, opened beneath the root */
	enum step step;
	int direct;
	int whole;		/* get: the read covers the whole file */
	struct open_how how;	/* STEP_OPEN: flags and resolve rules */
	int refused_direct;	/* get: the open said no to O_DIRECT */
	int temp_made;		/* put: the temp exists and is ours to remove */
	unsigned opens, mkdirs;	/* put: attempts so far */
	off_t off;		/* file offset where the transfer starts */
	size_t want;		/* bytes the transfer must move */
	size_t xfer;		/* bytes asked for: want, rounded up for direct reads */
	size_t done;
	int res;		/* without a ring: the result of the last step */
	char tmp[NAME_MAX + 1];	/* put: the temp's name in the bucket dir */
};

struct kv_io {
	int rootfd;
	unsigned qd;
	unsigned flags;
	int direct;		/* DIRECT_*: what the root's filesystem accepts */
	int used_direct;
	int broken;		/* -errno once the ring failed; the handle is spent */
	int have_ring;
	int ring_open;		/* the ring does openat2 */
	int noatime_denied;	/* an O_NOATIME open got EPERM */
	struct io_uring ring;
	struct slot *slots;
	struct slot **free;
	struct slot **ready;	/* without a ring: steps done, not yet completed */
	unsigned nready;
};

static size_t round_up(size_t len)
{
	return (len + KV_IO_ALIGN - 1) & ~(size_t)(KV_IO_ALIGN - 1);
}

static int is_aligned(const void *p)
{
	return ((uintptr_t)p & (KV_IO_ALIGN - 1)) == 0;
}

int kv_io_open(const char *root, const struct kv_io_opts *opts,
	       struct kv_io **out)
{
	struct kv_io *io;
	struct statfs sfs;
	unsigned i;
	int ret;

	io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	io->qd = opts && opts->queue_depth ? opts->queue_depth : DEFAULT_QUEUE_DEPTH;
	if (io->qd > MAX_QUEUE_DEPTH)
		io->qd = MAX_QUEUE_DEPTH;
	io->flags = opts ? opts->flags : 0;
	io->direct = DIRECT_UNKNOWN;
	io->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (io->rootfd < 0) {
		ret = -errno;
		free(io);
		return ret;
	}
	/* tmpfs accepts O_DIRECT on recent kernels but it is the page cache
	 * itself: direct I/O there only adds alignment rules. */
	if (fstatfs(io->rootfd, &sfs) == 0 &&
	    (sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC))
		io->direct = DIRECT_NO;
	io->slots = calloc(io->qd, sizeof(*io->slots));
	io->free = calloc(io->qd, sizeof(*io->free));
	io->ready = calloc(io->qd, sizeof(*io->ready));
	if (!io->slots || !io->free || !io->ready) {
		kv_io_close(io);
		return -ENOMEM;
	}
	for (i = 0; i < io->qd; i++)
		io->free[i] = &io->slots[i];
	io->have_ring = io_uring_queue_init(io->qd, &io->ring, 0) == 0;
	if (io->have_ring) {
		struct io_uring_probe *probe = io_uring_get_probe_ring(&io->ring);

		io->ring_open = probe && io_uring_opcode_supported(probe, IORING_OP_OPENAT2);
		if (probe)
			io_uring_free_probe(probe);
	}
	*out = io;
	return 0;
}

void kv_io_close(struct kv_io *io)
{
	if (!io)
		return;
	if (io->have_ring)
		io_uring_queue_exit(&io->ring);
	close(io->rootfd);
	free(io->slots);
	free(io->free);
	free(io->ready);
	free(io);
}

int kv_io_used_direct(const struct kv_io *io)
{
	return io->used_direct;
}

void *kv_io_buf_alloc(size_t len)
{
	size_t align = len >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES : KV_IO_ALIGN;
	void *p;

	if (posix_memalign(&p, align, round_up(len ? len : 1)) != 0)
		return NULL;
	if (align == HUGE_PAGE_BYTES)
		madvise(p, len & ~(HUGE_PAGE_BYTES - 1), MADV_HUGEPAGE);
	return p;
}

void kv_io_buf_free(void *buf)
{
	free(buf);
}

/* Paths stay below the root: relative, no "." or ".." or empty parts. */
static int relpath_ok(const char *p)
{
	if (!p || !*p || *p == '/')
		return 0;
	for (;;) {
		size_t n = strcspn(p, "/");

		if (n == 0 || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		if (!p[n])
			return 1;
		p += n + 1;
	}
}

/* A get opens its block from the root, a put its temp in the bucket dir. */
static int open_dirfd(const struct kv_io *io, const struct slot *s)
{
	return s->req->op == KV_IO_OP_PUT ? s->dirfd : io->rootfd;
}

static const char *open_path(const struct slot *s)
{
	return s->req->op == KV_IO_OP_PUT ? s->tmp : s->req->relpath;
}

static int open_step(const struct kv_io *io, const struct slot *s)
{
	return kvi_open_beneath(open_dirfd(io, s), open_path(s), (int)s->how.flags,
				(mode_t)s->how.mode, 0);
}

/* A step done now, as a plain syscall, and queued as completed. */
static void issue_sync(struct kv_io *io, struct slot *s, char *p, size_t n)
{
	ssize_t r;

	switch (s->step) {
	case STEP_OPEN:
		r = open_step(io, s);
		if (r < 0) {
			s->res = (int)r;
			io->ready[io->nready++] = s;
			return;
		}
		break;
	case STEP_FSYNC:
		r = fsync(s->fd);
		break;
	case STEP_DIRSYNC:
		r = fsync(s->dirfd);
		break;
	default:
		if (s->req->op == KV_IO_OP_PUT)
			r = pwrite(s->fd, p, n, s->off + s->done);
		else
			r = pread(s->fd, p, n, s->off + s->done);
	}
	s->res = r < 0 ? -errno : (int)r;
	io->ready[io->nready++] = s;
}

static void issue(struct kv_io *io, struct slot *s)
{
	struct io_uring_sqe *sqe;
	char *p = (char *)s->req->buf + s->done;
	size_t n = s->xfer - s->done;
	if (n > MAX_SQE_BYTES)
		n = MAX_SQE_BYTES;
	if (!io->have_ring || (s->step == STEP_OPEN && !io->ring_open)) {
		issue_sync(io, s, p, n);
		return;
	}
	/* Cannot stay NULL: each slot holds at most one SQE and the ring has
	 * an entry per slot; submitting only makes room sooner. */
	while (!(sqe = io_uring_get_sqe(&io->ring)))
		io_uring_submit(&io->ring);
	switch (s->step) {
	case STEP_OPEN:
		/* The kernel copies how at submission, just below. */
		io_uring_prep_openat2(sqe, open_dirfd(io, s), open_path(s), &s->how);
		break;
	case STEP_FSYNC:
		io_uring_prep_fsync(sqe, s->fd, 0);
		break;
	case STEP_DIRSYNC:
		io_uring_prep_fsync(sqe, s->dirfd, 0);
		break;
	default:
		if (s->req->op == KV_IO_OP_PUT)
			io_uring_prep_write(sqe, s->fd, p, n, s->off + s->done);
		else
			io_uring_prep_read(sqe, s->fd, p, n, s->off + s->done);
	}
	io_uring_sqe_set_data(sqe, s);
	/* Off to the kernel now, not after the completions or next() calls
	 * still to be handled, which may take a while (checksums, payloads
	 * to load): a device left idle meanwhile is bandwidth lost. */
	io_uring_submit(&io->ring);
}

/* Release what the slot holds; a put that never reached its rename
 * leaves no temp behind.  Returns 1: the request is finished. */
static int finish(struct kv_io *io, struct slot *s, int result)
{
	struct kv_io_req *req = s->req;

	if (s->fd >= 0)
		close(s->fd);
	if (s->temp_made)
		unlinkat(s->dirfd, s->tmp, 0);
	if (s->dirfd >= 0)
		close(s->dirfd);
	s->fd = s->dirfd = -1;
	s->temp_made = 0;
	req->result = result;
	req->done = s->done;
	if (result == 0 && req->op != KV_IO_OP_HAS)
		io->used_direct = s->direct;
	return 1;
}

static int stat_block(struct kv_io *io, const char *relpath, uint64_t *size)
{
	struct stat st;
	int fd, err;

	if (!relpath_ok(relpath))
		return -KV_EBADPATH;
	fd = kvi_open_beneath(io->rootfd, relpath, O_PATH, 0, 0);
	if (fd < 0)
		return fd;
	err = fstat(fd, &st) < 0 ? -errno : 0;
	close(fd);
	if (err < 0)
		return err;
	/* O_PATH | O_NOFOLLOW opens a final symlink itself: never a block. */
	if (S_ISLNK(st.st_mode))
		return -ELOOP;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	*size = st.st_size;
	return 0;
}

/* Length of the bucket dirs part of a relpath, through its last '/'. */
static size_t dir_len(const char *relpath)
{
	const char *slash = strrchr(relpath, '/');

	return slash ? (size_t)(slash - relpath) + 1 : 0;
}

/* Create the temp under a fresh name in the bucket dir. */
static int put_open(struct kv_io *io, struct slot *s)
{
	const char *rel = s->req->relpath;
	int ret;

	if (++s->opens > TEMP_OPEN_TRIES)
		return finish(io, s, -EEXIST);
	ret = kv_layout_temp_name(rel + dir_len(rel), s->tmp, sizeof(s->tmp));
	if (ret < 0)
		return finish(io, s, ret);
	s->step = STEP_OPEN;
	issue(io, s);
	return 0;
}

/* Open the bucket dir of relpath beneath the root (the root itself for a
 * path without dirs), making what is missing when make is set. */
static int open_dir_of(struct kv_io *io, const char *relpath, int flags, int make)
{
	size_t dirlen = dir_len(relpath);
	char dir[PATH_MAX];
	int fd;

	if (!dirlen) {
		fd = dup(io->rootfd);
		return fd < 0 ? -errno : fd;
	}
	if (dirlen > sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, relpath, dirlen - 1);
	dir[dirlen - 1] = '\0';
	fd = kvi_open_beneath(io->rootfd, dir, flags, 0, 0);
	/* An evictor may remove an empty parent between two of our mkdirs
	 * (ENOENT again): start over from the root, a few rounds at most. */
	for (int tries = 0; fd == -ENOENT && make && tries < MKDIR_TRIES; tries++)
		fd = kvi_mkdir_beneath(io->rootfd, dir);
	return fd;
}

static int put_dir(struct kv_io *io, struct slot *s)
{
	if (s->dirfd >= 0)
		close(s->dirfd);
	s->dirfd = open_dir_of(io, s->req->relpath, O_RDONLY | O_DIRECTORY,
			       !(io->flags & KV_IO_NO_MKDIR));
	return s->dirfd < 0 ? s->dirfd : 0;
}

/* Upstream's store: a block already there (a regular file; anything else
 * is replaced) is a hit, its atime stamped as llm-d does. */
static int put_existing(struct kv_io *io, struct slot *s)
{
	struct timespec atime_now[2] = { { 0, UTIME_NOW }, { 0, UTIME_OMIT } };
	const char *name = s->req->relpath + dir_len(s->req->relpath);
	struct stat st;

	if (fstatat(s->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return 0;
	if (!(io->flags & KV_IO_NO_TOUCH))
		utimensat(s->dirfd, name, atime_now, AT_SYMLINK_NOFOLLOW);
	s->req->existed = 1;
	return 1;
}

static int put_begin(struct kv_io *io, struct slot *s)
{
	struct kv_io_req *req = s->req;
	int ret;

	s->direct = io->direct != DIRECT_NO && !(io->flags & KV_IO_BUFFERED) &&
		    req->len && req->len % KV_IO_ALIGN == 0 && is_aligned(req->buf);
	s->how.flags |= O_WRONLY | O_CREAT | O_EXCL | (s->direct ? O_DIRECT : 0);
	s->how.mode = 0666;
	s->want = s->xfer = req->len;
	ret = put_dir(io, s);
	if (ret < 0)
		return finish(io, s, ret);
	if (!(io->flags & KV_IO_REPLACE) && put_existing(io, s))
		return finish(io, s, 0);
	return put_open(io, s);
}

static int put_written(struct kv_io *io, struct slot *s);

/* The temp's openat came back: write into it, or find out why not. */
static int put_opened(struct kv_io *io, struct slot *s, int res)
{
	if (res >= 0) {
		s->fd = res;
		s->temp_made = 1;
		if (s->direct)
			io->direct = DIRECT_YES;
		if (!s->want)
			return put_written(io, s);
		s->step = STEP_DATA;
		issue(io, s);
		return 0;
	}
	if (res == -EINVAL && s->direct && io->direct != DIRECT_YES) {
		io->direct = DIRECT_NO;
		s->direct = 0;
		s->how.flags &= ~(uint64_t)O_DIRECT;
		return put_open(io, s);
	}
	/* An evictor may remove an empty bucket between our mkdir and
	 * open: a few rounds, not one. */
	if (res == -ENOENT && dir_len(s->req->relpath) && s->mkdirs < MKDIR_TRIES &&
	    !(io->flags & KV_IO_NO_MKDIR)) {
		s->mkdirs++;
		res = put_dir(io, s);
		return res < 0 ? finish(io, s, res) : put_open(io, s);
	}
	if (res == -EEXIST)
		return put_open(io, s);
	return finish(io, s, res);
}

static int put_commit(struct kv_io *io, struct slot *s)
{
	const char *rel = s->req->relpath;
	int ret = close(s->fd);

	s->fd = -1;
	if (ret < 0)
		return finish(io, s, -errno);
	/* Within the dir opened beneath the root: a dir swapped for a
	 * symlink since cannot move the block elsewhere. */
	if (renameat(s->dirfd, s->tmp, s->dirfd, rel + dir_len(rel)) < 0) {
		struct stat st;
		int err = errno, tries = 0;

		/* A distributed filesystem (GlusterFS's DHT) may fail a rename
		 * over a target that another node unlinks at that moment with
		 * ENOENT, whether or not it moved our temp: while the temp is
		 * there, try again, a little later each time; once it is gone,
		 * the rename took effect (nothing else removes a young temp). */
		while (err == ENOENT) {
			if (fstatat(s->dirfd, s->tmp, &st, AT_SYMLINK_NOFOLLOW) < 0) {
				err = errno == ENOENT ? 0 : err;
				break;
			}
			if (tries++ == RENAME_TRIES)
				break;
			usleep(1000u << tries);
			err = renameat(s->dirfd, s->tmp, s->dirfd, rel + dir_len(rel)) < 0 ? errno : 0;
		}
		if (err)
			return finish(io, s, -err);
	}
	s->temp_made = 0;
	if (!(io->flags & KV_IO_FSYNC))
		return finish(io, s, 0);
	/* The rename is durable only once its directory is. */
	s->step = STEP_DIRSYNC;
	issue(io, s);
	return 0;
}

static int put_written(struct kv_io *io, struct slot *s)
{
	struct kv_io_req *req = s->req;
	int ret;

	if (!(io->flags & KV_IO_NO_CHECKSUM)) {
		ret = kv_integrity_set(s->fd, kv_xxh3(req->buf, req->len));
		if (ret < 0 && ret != -ENOTSUP && ret != -EOPNOTSUPP)
			return finish(io, s, ret);
	}
	if (io->flags & KV_IO_FSYNC) {
		s->step = STEP_FSYNC;
		issue(io, s);
		return 0;
	}
	return put_commit(io, s);
}

static void get_begin(struct kv_io *io, struct slot *s)
{
	/* O_NOATIME keeps relatime from stamping what the caller asked us
	 * to leave alone, and otherwise spares the read path an atime
	 * update (a journal entry) that our own stamp repeats; only the
	 * owner may use it.  O_NONBLOCK: a FIFO planted at a block path
	 * must not hang us; it goes before reads. */
	s->how.flags |= O_RDONLY | O_NONBLOCK;
	if ((io->flags & KV_IO_NO_TOUCH) || !io->noatime_denied)
		s->how.flags |= O_NOATIME;
	if (io->direct != DIRECT_NO && !(io->flags & KV_IO_BUFFERED) &&
	    is_aligned(s->req->buf))
		s->how.flags |= O_DIRECT;
	s->step = STEP_OPEN;
	issue(io, s);
}

/* Size up an open block and choose direct or buffered for its read. */
static int get_sized(struct kv_io *io, struct slot *s)
{
	struct kv_io_req *req = s->req;
	struct stat st;

	if (fstat(s->fd, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (s->how.flags & O_DIRECT)
		io->direct = DIRECT_YES;
	else if (s->refused_direct && io->direct == DIRECT_UNKNOWN)
		io->direct = DIRECT_NO;
	if (req->op == KV_IO_OP_GET) {
		if ((uint64_t)st.st_size > req->len)
			return -EFBIG;
		s->off = 0;
		s->want = st.st_size;
	} else {
		if ((uint64_t)st.st_size < req->len)
			return -KV_ESHORT;
		s->off = st.st_size - req->len;
		s->want = req->len;
	}
	s->whole = s->off == 0;
	s->direct = s->want && (s->how.flags & O_DIRECT) && s->off % KV_IO_ALIGN == 0 &&
		    (req->op == KV_IO_OP_GET ? round_up(s->want) <= req->len :
					       s->want % KV_IO_ALIGN == 0);
	s->xfer = s->direct ? round_up(s->want) : s->want;
	if (fcntl(s->fd, F_SETFL, (s->direct ? O_DIRECT : 0) | (int)(s->how.flags & O_NOATIME)) < 0)
		return -errno;
	return 0;
}

static int get_read(struct kv_io *io, struct slot *s);

/* The block's openat came back: read it, or retry the open plainer. */
static int get_opened(struct kv_io *io, struct slot *s, int res)
{
	int ret;

	if (res == -EPERM && (s->how.flags & O_NOATIME)) {
		/* Not our files: when we stamp atime anyway, stop asking. */
		io->noatime_denied = 1;
		s->how.flags &= ~(uint64_t)O_NOATIME;
		issue(io, s);
		return 0;
	}
	if (res == -EINVAL && (s->how.flags & O_DIRECT)) {
		/* The filesystem, or a non-file at the path, said no. */
		s->how.flags &= ~(uint64_t)O_DIRECT;
		s->refused_direct = 1;
		issue(io, s);
		return 0;
	}
	if (res < 0)
		return finish(io, s, res);
	s->fd = res;
	ret = get_sized(io, s);
	if (ret < 0)
		return finish(io, s, ret);
	if (!s->want)
		return get_read(io, s);
	s->step = STEP_DATA;
	issue(io, s);
	return 0;
}

static int get_read(struct kv_io *io, struct slot *s)
{
	struct timespec atime_now[2] = { { 0, UTIME_NOW }, { 0, UTIME_OMIT } };
	int ret;

	if (s->whole && !(io->flags & KV_IO_NO_CHECKSUM)) {
		ret = kv_integrity_check(s->fd, s->req->buf, s->want);
		if (ret < 0)
			return finish(io, s, ret);
	}
	/* Best effort: a reader that does not own the file, or a read-only
	 * mount, still gets its data. */
	if (!(io->flags & KV_IO_NO_TOUCH))
		futimens(s->fd, atime_now);
	return finish(io, s, 0);
}

/* Begin a request: 0 if it now has an SQE in flight, 1 if it finished. */
static int start(struct kv_io *io, struct slot *s, struct kv_io_req *req)
{
	uint64_t size;

	s->req = req;
	req->existed = 0;
	s->fd = s->dirfd = -1;
	s->step = STEP_DATA;
	s->direct = s->whole = s->temp_made = s->refused_direct = 0;
	s->opens = s->mkdirs = 0;
	memset(&s->how, 0, sizeof(s->how));
	s->how.flags = O_CLOEXEC | O_NOFOLLOW;
	s->how.resolve = KVI_RESOLVE;
	s->off = 0;
	s->want = s->xfer = s->done = 0;
	if (!relpath_ok(req->relpath))
		return finish(io, s, -KV_EBADPATH);
	switch (req->op) {
	case KV_IO_OP_HAS:
		return finish(io, s, stat_block(io, req->relpath, &size));
	case KV_IO_OP_PUT:
		return put_begin(io, s);
	case KV_IO_OP_GET:
	case KV_IO_OP_GET_TAIL:
		get_begin(io, s);
		return 0;
	default:
		return finish(io, s, -EINVAL);
	}
}

/* A completion for slot s: 0 if it went back in flight, 1 if finished. */
static int complete(struct kv_io *io, struct slot *s, int res)
{
	int put = s->req->op == KV_IO_OP_PUT;

	if (res == -EINTR || res == -EAGAIN) {
		issue(io, s);
		return 0;
	}
	if (s->step == STEP_OPEN)
		return put ? put_opened(io, s, res) : get_opened(io, s, res);
	if (s->step == STEP_FSYNC)
		return res < 0 ? finish(io, s, res) : put_commit(io, s);
	if (s->step == STEP_DIRSYNC)
		return finish(io, s, res < 0 ? res : 0);
	if (res < 0)
		return finish(io, s, res);
	if (res == 0)	/* a write that moves nothing, or a file that shrank */
		return finish(io, s, put ? -EIO : -KV_ESHORT);
	s->done += res;
	if (s->done < s->want) {
		/* A short transfer can leave the rest unaligned: finish it
		 * through the page cache. */
		if (s->direct && s->done % KV_IO_ALIGN) {
			if (fcntl(s->fd, F_SETFL, 0) < 0)
				return finish(io, s, -errno);
			s->direct = 0;
			s->xfer = s->want;
		}
		issue(io, s);
		return 0;
	}
	s->done = s->want;
	return put ? put_written(io, s) : get_read(io, s);
}

/* Submit what is queued and, unless a step already finished without
 * the ring, wait for a completion; -errno if the ring itself failed. */
static int wait_some(struct kv_io *io)
{
	int r;

	if (!io->have_ring)
		return 0;
	r = io->nready ? io_uring_submit(&io->ring) : io_uring_submit_and_wait(&io->ring, 1);
	if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
		return r;
	return 0;
}

/* The next finished step, if any: its slot and result. */
static int reap(struct kv_io *io, struct slot **s, int *res)
{
	struct io_uring_cqe *cqe;

	if (io->nready) {
		*s = io->ready[--io->nready];
		*res = (*s)->res;
		return 1;
	}
	if (!io->have_ring || io_uring_peek_cqe(&io->ring, &cqe) != 0)
		return 0;
	*s = io_uring_cqe_get_data(cqe);
	*res = cqe->res;
	io_uring_cqe_seen(&io->ring, cqe);
	return 1;
}

int kv_io_batch_stream(struct kv_io *io, kv_io_next_fn next,
		       kv_io_done_fn done, void *arg)
{
	unsigned inflight = 0, nfree = io->qd, i;
	int failed = 0, more = 1, stop = 0, res;
	struct kv_io_req *req;
	struct slot *s;

	if (io->broken)
		return io->broken;
	for (;;) {
		while (more && nfree) {
			req = NULL;
			res = next(arg, &req);
			if (res <= 0) {
				/* Asked again once a done() may have queued more
				 * work, unless it asked to stop. */
				more = 0;
				if (res < 0)
					stop = res;
				break;
			}
			s = io->free[--nfree];
			if (start(io, s, req) == 0) {
				inflight++;
				continue;
			}
			s->req = NULL;
			io->free[nfree++] = s;
			failed += req->result != 0;
			done(arg, req);
			more = !stop;
		}
		if (!inflight)
			break;
		res = wait_some(io);
		if (res < 0) {
			/* The ring itself failed: nothing more can complete. */
			io->broken = res;
			for (i = 0; i < io->qd; i++) {
				req = io->slots[i].req;
				if (!req)
					continue;
				finish(io, &io->slots[i], res);
				io->slots[i].req = NULL;
				done(arg, req);
			}
			return res;
		}
		while (reap(io, &s, &res)) {
			if (complete(io, s, res) == 0)
				continue;
			req = s->req;
			s->req = NULL;
			io->free[nfree++] = s;
			inflight--;
			failed += req->result != 0;
			done(arg, req);
			more = !stop;
		}
	}
	return stop ? stop : failed;
}

struct array_walk {
	struct kv_io_req *reqs;
	size_t n, next;
};

static int array_next(void *arg, struct kv_io_req **req)
{
	struct array_walk *w = arg;

	if (w->next == w->n)
		return 0;
	*req = &w->reqs[w->next++];
	return 1;
}

static void array_done(void *arg, struct kv_io_req *req)
{
	(void)arg;
	(void)req;
}

int kv_io_batch(struct kv_io *io, struct kv_io_req *reqs, size_t n)
{
	struct array_walk w = { reqs, n, 0 };

	return kv_io_batch_stream(io, array_next, array_done, &w);
}

static int run_one(struct kv_io *io, enum kv_io_op op, const char *relpath,
		   void *buf, size_t len, size_t *done)
{
	struct kv_io_req req = { .op = op, .relpath = relpath, .buf = buf, .len = len };
	int ret = kv_io_batch(io, &req, 1);

	if (ret < 0)
		return ret;
	if (done)
		*done = req.done;
	return req.result;
}

int kv_io_put(struct kv_io *io, const char *relpath, const void *buf, size_t len)
{
	return run_one(io, KV_IO_OP_PUT, relpath, (void *)buf, len, NULL);
}

int kv_io_get(struct kv_io *io, const char *relpath, void *buf, size_t cap,
	      size_t *len)
{
	return run_one(io, KV_IO_OP_GET, relpath, buf, cap, len);
}

int kv_io_get_tail(struct kv_io *io, const char *relpath, void *buf, size_t len)
{
	return run_one(io, KV_IO_OP_GET_TAIL, relpath, buf, len, NULL);
}

int kv_io_size(struct kv_io *io, const char *relpath, uint64_t *size)
{
	return stat_block(io, relpath, size);
}

int kv_io_has(struct kv_io *io, const char *relpath)
{
	uint64_t size;

	return stat_block(io, relpath, &size);
}

/* op on the last component of relpath, in its bucket dir. */
static int in_dir_of(struct kv_io *io, const char *relpath,
		     int (*op)(int dirfd, const char *name))
{
	int dirfd, err;

	if (!relpath_ok(relpath))
		return -KV_EBADPATH;
	dirfd = open_dir_of(io, relpath, O_PATH | O_DIRECTORY, 0);
	if (dirfd < 0)
		return dirfd;
	err = op(dirfd, relpath + dir_len(relpath));
	close(dirfd);
	return err;
}

static int touch_at(int dirfd, const char *name)
{
	struct timespec atime_now[2] = { { 0, UTIME_NOW }, { 0, UTIME_OMIT } };

	return utimensat(dirfd, name, atime_now, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static int unlink_at(int dirfd, const char *name)
{
	return unlinkat(dirfd, name, 0) < 0 ? -errno : 0;
}

int kv_io_touch(struct kv_io *io, const char *relpath)
{
	return in_dir_of(io, relpath, touch_at);
}

int kv_io_del(struct kv_io *io, const char *relpath)
{
	return in_dir_of(io, relpath, unlink_at);
}
