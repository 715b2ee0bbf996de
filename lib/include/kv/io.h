#ifndef KV_IO_H
#define KV_IO_H

/*
 * The file engine: one io_uring ring per kv_io handle (use one handle per
 * thread), O_DIRECT where the filesystem accepts it and the buffer and
 * length are aligned (probed once per handle, buffered otherwise),
 * atomic puts (temp beside the target + rename(2)), tail reads, explicit
 * atime stamps on hits, and batches kept QD deep.
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_IO_FSYNC	  (1u << 0)	/* fsync file, then its dir, on put */
#define KV_IO_BUFFERED	  (1u << 1)	/* never use O_DIRECT */
#define KV_IO_NO_CHECKSUM (1u << 2)	/* put: no xattr; get: no verify */
#define KV_IO_NO_TOUCH	  (1u << 3)	/* get: leave atime alone */
#define KV_IO_NO_MKDIR	  (1u << 4)	/* put: fail if bucket dirs are missing */
#define KV_IO_REPLACE	  (1u << 5)	/* put: replace a block already there */

#define KV_IO_ALIGN	4096		/* O_DIRECT buffer/length alignment */

struct kv_io_opts {
	unsigned queue_depth;	/* I/Os in flight per handle; 0: 32 */
	unsigned flags;		/* KV_IO_* defaults for every call */
};

struct kv_io;

/* Open an engine on a cache root.  -ENOTDIR/-ENOENT/-EACCES for a bad
 * root; the ring is set up here. */
int kv_io_open(const char *root, const struct kv_io_opts *opts,
	       struct kv_io **out);
void kv_io_close(struct kv_io *io);

/* 1 if the last put/get on this handle used O_DIRECT, else 0. */
int kv_io_used_direct(const struct kv_io *io);

/* Memory aligned for O_DIRECT (KV_IO_ALIGN), rounded up; free with
 * kv_io_buf_free.  From 2 MiB up it is aligned to 2 MiB and asks for
 * transparent huge pages: a direct transfer pins its pages one by one,
 * and in a VM that is the bound (kvget --batch of 2 MiB blocks: 0.8 ->
 * 2.5 GB/s). */
void *kv_io_buf_alloc(size_t len);
void kv_io_buf_free(void *buf);

/* Atomically write a block: temp beside the target, data, checksum
 * xattr, optional fsync, rename over the target.  On any failure the temp
 * is removed and the target is left as it was.  As vLLM's and llm-d's
 * writers do, a block already there is left as it is and its atime
 * stamped (unless KV_IO_NO_TOUCH), unless KV_IO_REPLACE. */
int kv_io_put(struct kv_io *io, const char *relpath, const void *buf,
	      size_t len);

/* Size of a block file; -ENOENT when absent. */
int kv_io_size(struct kv_io *io, const char *relpath, uint64_t *size);

/* Read a whole block into buf (cap bytes available); *len gets its size.
 * -EFBIG if cap is too small, -KV_ECHECKSUM on a checksum mismatch
 * (buf contents then undefined).  Stamps atime unless KV_IO_NO_TOUCH. */
int kv_io_get(struct kv_io *io, const char *relpath, void *buf, size_t cap,
	      size_t *len);

/* Read the last len bytes, as vLLM does for n blocks of a partial file;
 * -KV_ESHORT if the file is shorter.  Verified only when len is the
 * whole file. */
int kv_io_get_tail(struct kv_io *io, const char *relpath, void *buf,
		   size_t len);

/* 0 if present, -ENOENT if not; no data read, no atime stamp. */
int kv_io_has(struct kv_io *io, const char *relpath);

/* Stamp atime to now, mtime untouched (utimensat). */
int kv_io_touch(struct kv_io *io, const char *relpath);

/* Remove a block; its bucket dirs stay.  -ENOENT when absent. */
int kv_io_del(struct kv_io *io, const char *relpath);

enum kv_io_op { KV_IO_OP_PUT, KV_IO_OP_GET, KV_IO_OP_GET_TAIL, KV_IO_OP_HAS };

struct kv_io_req {
	enum kv_io_op op;
	const char *relpath;
	void *buf;		/* PUT: payload; GET: destination */
	size_t len;		/* PUT/GET_TAIL: bytes; GET: capacity */
	size_t done;		/* out: bytes moved */
	int result;		/* out: 0 or -errno / -KV_E* */
	int existed;		/* out: PUT found the block there and kept it */
	void *user;
};

/* Run n requests with up to queue_depth in flight; each gets its own
 * result.  Returns the number that failed (0 = all succeeded), or -errno
 * if the engine itself failed. */
int kv_io_batch(struct kv_io *io, struct kv_io_req *reqs, size_t n);

/* kv_io_batch for work that arrives as it goes (a manifest on stdin):
 * next() hands over the next request (return 1; 0 when it has none,
 * though it is asked again after each done(), which may queue a retry;
 * -errno to stop early), done() gets each finished one, whose buffer is
 * then the caller's again.  The batch ends when next() has none and
 * nothing is in flight.  At most queue_depth requests are between
 * next() and done() at once, so queue_depth buffers suffice.  Returns
 * the number that failed, or -errno. */
typedef int (*kv_io_next_fn)(void *arg, struct kv_io_req **req);
typedef void (*kv_io_done_fn)(void *arg, struct kv_io_req *req);
int kv_io_batch_stream(struct kv_io *io, kv_io_next_fn next,
		       kv_io_done_fn done, void *arg);

/*
 * Paths below a directory that others can write to (a shared scratch
 * dir, a cache root): resolved without ever leaving it, no symlink
 * followed at any component, no ".." above it.  What the engine does
 * for every open; programs use these for their own files there.
 */

/* openat(dirfd, path, flags | O_NOFOLLOW | O_CLOEXEC, mode) resolved
 * beneath dirfd: the fd, or -errno (-ELOOP a symlink, -EXDEV an escape). */
int kv_open_beneath(int dirfd, const char *path, int flags, mode_t mode);

/* The dirs of path ("a/b/c") made where missing (0777 before umask) and
 * opened beneath dirfd: the fd of the last, or -errno. */
int kv_mkdir_beneath(int dirfd, const char *path);

/* The dir that holds path's last component, opened O_PATH | O_DIRECTORY
 * beneath dirfd (a dup of dirfd for a bare name), for an *at() call on
 * *name with AT_SYMLINK_NOFOLLOW (renameat, unlinkat, utimensat):
 * the fd, or -errno; *name points into path. */
int kv_open_parent_beneath(int dirfd, const char *path, const char **name);

/* flock(op: LOCK_SH or LOCK_EX) the lock file name in dirfd, made mode
 * 0600 where missing; *fd holds the lock until closed.  A lock file
 * that others could open (group or other bits set), or of a user other
 * than this one, root or dirfd's owner, is first replaced by a fresh
 * one, so that no one who may not run the tool can hold it.  Waits at most wait_ns (0: not at all), then
 * -EWOULDBLOCK with the holder (pid, command, uid) in kv_error_detail();
 * -EPERM when a foreign lock file cannot be replaced; -errno. */
int kv_lock_beneath(int dirfd, const char *name, int op, int64_t wait_ns, int *fd);

/*
 * Whole files written by name (kvget -o FILE, a metrics file, a state
 * file): a new name or a regular file is replaced atomically, through a
 * temp beside it ("<name>_<random>.tmp", made O_EXCL, never followed)
 * renamed over it, so a reader sees the old file or the new one whole.
 * Nothing else at the name is ever replaced: a symbolic link is refused
 * (-ELOOP: neither followed nor replaced), a directory too (-EISDIR), and
 * a device, FIFO or socket is written in place with KV_FILE_IN_PLACE,
 * else refused (-EINVAL).  A refusal says why in kv_error_detail()
 * ("it is a FIFO with no reader"), to follow "cannot write 'FILE': ".
 */
#define KV_FILE_FSYNC	   (1u << 0)	/* the new file, then its dir, made durable */
#define KV_FILE_BENEATH	   (1u << 1)	/* path resolved as kv_open_beneath does */
#define KV_FILE_IN_PLACE   (1u << 2)	/* a device, FIFO or socket is written to */
#define KV_FILE_NONBLOCK   (1u << 3)	/* in place, a write never waits: -EAGAIN */
#define KV_FILE_MODE_EXACT (1u << 4)	/* a new file gets mode, umask or not */

struct kv_file_out;

/* Start writing path (relative to dirfd, or AT_FDCWD; its dirs resolved
 * as openat does, or beneath dirfd with KV_FILE_BENEATH): write to
 * kv_file_replace_fd(), then commit or abort.  A new file gets mode
 * (less the umask, unless KV_FILE_MODE_EXACT).  In place, the open never
 * creates or truncates and never waits for a FIFO's reader: -ENXIO when
 * it has none.  0 and *out, or -errno. */
int kv_file_replace_open(int dirfd, const char *path, mode_t mode, unsigned flags,
			 struct kv_file_out **out);

/* The descriptor to write to; kv_file_replace_commit closes it. */
int kv_file_replace_fd(const struct kv_file_out *f);

/* Finish: the temp is renamed over the name (checked again first, so a
 * device or a link put there meanwhile is refused, not replaced), or the
 * file written in place is closed.  f is freed either way; on failure
 * the temp is removed and the name left as it was.  0, or -errno. */
int kv_file_replace_commit(struct kv_file_out *f);

/* Give up: the temp is removed, the name left as it was (bytes already
 * written in place stay written); f is freed.  NULL is ignored. */
void kv_file_replace_abort(struct kv_file_out *f);

/* kv_file_replace_open, len bytes of buf, kv_file_replace_commit. */
int kv_file_replace(int dirfd, const char *path, const void *buf, size_t len, mode_t mode,
		    unsigned flags);

#ifdef __cplusplus
}
#endif

#endif
