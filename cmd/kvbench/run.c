/*
 * The phases of a storage run: worker threads move whole block files in
 * the cache layout through io_uring (QD deep per thread) or pread/pwrite,
 * timing open, data, fsync, close and rename apart, while the main thread
 * samples throughput once a second.  On an s3:// --dir the blocks are
 * objects, moved by libkv's S3 tier (PUT, GET, HEAD), QD in flight per
 * thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <liburing.h>
#include <linux/openat2.h>
#include "../tool.h"
#include "kvbench.h"
#include "ranks.h"

const char *const phase_names[PH_COUNT] = { "write", "read", "lookup", "mixed",
					    "create", "stat", "unlink" };
const char *const lat_names[LAT_COUNT] = {
	"read", "write", "open", "close", "fsync", "dirsync", "rename", "touch",
	"lookup", "file", "batch", "create", "unlink",
};

int lat_is_main(enum lat l)
{
	return l == LAT_READ || l == LAT_WRITE || l == LAT_LOOKUP || l == LAT_BATCH ||
	       l == LAT_CREATE || l == LAT_UNLINK;
}

#define HASH_HEX	16
#define SAMPLE_NS	1000000000ULL

/* Where a block operation stands when its requests go through the ring
 * (--registered-files opens, syncs and closes there too). */
enum stage { ST_OPEN, ST_DATA, ST_FSYNC, ST_CLOSE };

struct slot {
	int fd;			/* or its fixed-file index */
	int is_write;
	int failed;		/* an earlier request of this operation failed */
	int flags;		/* for openat */
	struct open_how how;	/* the ring's openat2, read at submission */
	const char *path;	/* what is opened: the target or the temp */
	uint64_t file;
	uint64_t done;			/* bytes moved so far */
	int64_t t_file, t_data;
	char tmp[PATH_MAX];
};

struct worker {
	struct bench *b;
	struct shared *sh;
	pthread_t tid;
	struct io_uring ring;
	int have_ring;
	struct kv_io *io;		/* ENGINE_KVIO */
	struct kv_io_req *reqs;
	struct slot *slots;
	struct s3slot *s3slots;		/* ENGINE_S3: qd requests */
	unsigned *s3free, ns3free;	/* their free list */
	struct kv_tier *tier;		/* ENGINE_S3: this thread's own handle */
	void **bufs;
	uint64_t rng;
	struct kv_hist *lat[LAT_COUNT];
	uint64_t reads, writes, hits, misses;
	_Atomic uint64_t live_ops, live_bytes;
};

/* State every worker of a phase reads. */
struct shared {
	enum phase phase;
	int rootfd;
	char **paths;			/* relative paths of the working set */
	char **missing;			/* paths of absent keys, same buckets */
	/* What reads and lookups see: the next rank's set with
	 * --cross-read, else the two above. */
	char **rpaths, **rmissing;
	_Atomic uint64_t cursor;	/* next operation number */
	uint64_t total_ops;		/* size mode: stop after this many */
	int64_t deadline_ns;		/* duration mode: stop at this time */
	atomic_int stop;
	_Atomic unsigned running;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int err;			/* first failure */
	char errmsg[512];
	/* s3: the bucket, for populating and cleaning up, and which of
	 * paths this run stored (all cleanup ever deletes). */
	struct kv_tier *tier;
	atomic_uchar *written;
};

/* One request of a bucket run in flight. */
struct s3slot {
	struct kv_tier_req req;
	uint64_t file;
	int64_t t0;			/* when it was handed to the engine */
	unsigned idx;
};

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void set_err(struct shared *sh, int err, const char *fmt, const char *path)
{
	pthread_mutex_lock(&sh->lock);
	if (!sh->err) {
		sh->err = err;
		snprintf(sh->errmsg, sizeof(sh->errmsg), fmt, path, kv_strerror(err));
	}
	pthread_mutex_unlock(&sh->lock);
	atomic_store(&sh->stop, 1);
}

/* The next operation: which file, and whether it writes.  0 when the
 * phase is over. */
static int next_op(struct worker *w, uint64_t *file, int *is_write, uint64_t *k)
{
	struct shared *sh = w->sh;
	struct bench *b = w->b;
	uint64_t n;

	if (atomic_load(&sh->stop))
		return 0;
	n = atomic_fetch_add(&sh->cursor, 1);
	if (sh->deadline_ns ? kv_monotonic_ns() >= sh->deadline_ns : n >= sh->total_ops)
		return 0;
	*k = n;
	switch (sh->phase) {
	case PH_MIXED:
		*file = splitmix(&w->rng) % b->files;
		*is_write = splitmix(&w->rng) % 100 >= b->o.mix_read_pct;
		break;
	case PH_WRITE:
		*file = n % b->files;
		*is_write = 1;
		break;
	default:
		*file = n % b->files;
		*is_write = 0;
		break;
	}
	return 1;
}

static void record(struct worker *w, enum lat l, int64_t from, int64_t to)
{
	kv_hist_record(w->lat[l], (uint64_t)(to - from));
}

/*
 * --dir is often a shared scratch dir that others can write to, and the
 * block names follow from --seed: every path under it resolves beneath
 * it, with no symlink followed, so a planted link cannot point a write,
 * a rename or an unlink at a file elsewhere.
 */

/* What the ring's openat2 resolves with: kv_open_beneath's rules. */
#define BENEATH_RESOLVE	(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* fstat of path under rootfd, the link itself if it is one. */
static int stat_beneath(int rootfd, const char *path, struct stat *st)
{
	int fd = kv_open_beneath(rootfd, path, O_PATH, 0), r;

	if (fd < 0)
		return fd;
	r = fstat(fd, st) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* unlinkat(rootfd, path, flags) with path's dirs resolved beneath. */
static int unlink_beneath(int rootfd, const char *path, int flags)
{
	const char *name;
	int dfd = kv_open_parent_beneath(rootfd, path, &name), r;

	if (dfd < 0)
		return dfd;
	r = unlinkat(dfd, name, flags) < 0 ? -errno : 0;
	close(dfd);
	return r;
}

/* Choose what an operation opens, and how. */
static int name_op(struct worker *w, struct slot *s, uint64_t file, int is_write)
{
	struct shared *sh = w->sh;
	int r;

	s->file = file;
	s->is_write = is_write;
	s->done = 0;
	s->failed = 0;
	s->tmp[0] = '\0';
	s->path = is_write ? sh->paths[file] : sh->rpaths[file];
	s->flags = O_CLOEXEC | (w->b->direct ? O_DIRECT : 0);
	if (is_write) {
		/* In place overwrites the blocks already there, as a
		 * rewrite of a same-sized block does; a temp is new. */
		s->flags |= O_WRONLY | O_CREAT;
		if (w->b->o.atomic) {
			r = kv_layout_temp_name(s->path, s->tmp, sizeof(s->tmp));
			if (r < 0) {
				set_err(sh, r, "cannot name a temp for '%s': %s", s->path);
				return r;
			}
			s->path = s->tmp;
			/* A fresh name: never one that someone planted. */
			s->flags |= O_EXCL;
		}
	} else {
		s->flags |= O_RDONLY;
	}
	return 0;
}

/* Open the file an operation works on; the data transfer follows. */
static int begin_op(struct worker *w, struct slot *s, uint64_t file, int is_write)
{
	int64_t t0;
	int r;

	if ((r = name_op(w, s, file, is_write)) < 0)
		return r;
	t0 = kv_monotonic_ns();
	s->fd = kv_open_beneath(w->sh->rootfd, s->path, s->flags, 0644);
	s->t_data = kv_monotonic_ns();
	if (s->fd < 0) {
		r = s->fd;
		set_err(w->sh, r, "cannot open '%s': %s", s->path);
		return r;
	}
	s->t_file = t0;
	record(w, LAT_OPEN, t0, s->t_data);
	return 0;
}

/* After the file is closed: rename into place, dir fsync, atime, and
 * the operation counted.  t is when the close returned. */
static int finish_meta(struct worker *w, struct slot *s, int64_t t)
{
	struct shared *sh = w->sh;
	struct bench *b = w->b;
	const char *path = s->is_write ? sh->paths[s->file] : sh->rpaths[s->file];
	int64_t t2;
	int r = 0, dfd;
	const char *name;
	char dir[PATH_MAX], *slash;

	if (s->is_write && s->tmp[0]) {
		/* The temp is beside the target: one dir for both names. */
		dfd = kv_open_parent_beneath(sh->rootfd, path, &name);
		r = dfd < 0 ? dfd
		    : renameat(dfd, strrchr(s->tmp, '/') + 1, dfd, name) < 0 ? -errno : 0;
		if (dfd >= 0)
			close(dfd);
		if (r < 0) {
			set_err(sh, r, "cannot rename into '%s': %s", path);
			unlink_beneath(sh->rootfd, s->tmp, 0);
		}
		s->tmp[0] = '\0';
		t2 = kv_monotonic_ns();
		record(w, LAT_RENAME, t, t2);
		t = t2;
	}
	if (!r && s->is_write && b->o.fsync == FSYNC_DIR) {
		snprintf(dir, sizeof(dir), "%s", path);
		slash = strrchr(dir, '/');
		*slash = '\0';
		dfd = kv_open_beneath(sh->rootfd, dir, O_RDONLY | O_DIRECTORY, 0);
		if (dfd < 0 || fsync(dfd) < 0) {
			r = dfd < 0 ? dfd : -errno;
			set_err(sh, r, "cannot fsync the directory of '%s': %s", path);
		}
		if (dfd >= 0)
			close(dfd);
		t2 = kv_monotonic_ns();
		record(w, LAT_DIRSYNC, t, t2);
		t = t2;
	}
	if (!r && !s->is_write) {
		struct timespec ts[2] = { { .tv_nsec = UTIME_NOW }, { .tv_nsec = UTIME_OMIT } };

		dfd = kv_open_parent_beneath(sh->rootfd, path, &name);
		r = dfd < 0 ? dfd
		    : utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
		if (dfd >= 0)
			close(dfd);
		if (r < 0)
			set_err(sh, r, "cannot stamp atime on '%s': %s", path);
		t2 = kv_monotonic_ns();
		record(w, LAT_TOUCH, t, t2);
		t = t2;
	}
	if (r)
		return r;
	record(w, LAT_FILE, s->t_file, t);
	if (s->is_write)
		w->writes++;
	else
		w->reads++;
	atomic_fetch_add_explicit(&w->live_ops, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&w->live_bytes, b->o.block_bytes, memory_order_relaxed);
	return 0;
}

/* After the data, with system calls: fsync, close, then the rest. */
static int finish_op(struct worker *w, struct slot *s)
{
	struct shared *sh = w->sh;
	int64_t t = kv_monotonic_ns(), t2;
	int r = 0;

	record(w, s->is_write ? LAT_WRITE : LAT_READ, s->t_data, t);
	if (s->is_write && w->b->o.fsync != FSYNC_NONE) {
		if (fsync(s->fd) < 0) {
			r = -errno;
			set_err(sh, r, "cannot fsync '%s': %s", sh->paths[s->file]);
		}
		t2 = kv_monotonic_ns();
		record(w, LAT_FSYNC, t, t2);
		t = t2;
	}
	close(s->fd);
	s->fd = -1;
	t2 = kv_monotonic_ns();
	record(w, LAT_CLOSE, t, t2);
	if (r) {
		if (s->tmp[0])
			unlink_beneath(sh->rootfd, s->tmp, 0);
		s->tmp[0] = '\0';
		return r;
	}
	return finish_meta(w, s, t2);
}

static void abort_op(struct worker *w, struct slot *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	if (s->tmp[0])
		unlink_beneath(w->sh->rootfd, s->tmp, 0);
	s->tmp[0] = '\0';
}

static void run_psync(struct worker *w)
{
	struct slot *s = &w->slots[0];
	uint64_t len = w->b->o.block_bytes, file, k;
	int is_write;
	ssize_t n;

	while (next_op(w, &file, &is_write, &k)) {
		if (begin_op(w, s, file, is_write) < 0)
			return;
		while (s->done < len) {
			if (is_write)
				n = pwrite(s->fd, (char *)w->bufs[0] + s->done,
					   len - s->done, (off_t)s->done);
			else
				n = pread(s->fd, (char *)w->bufs[0] + s->done,
					  len - s->done, (off_t)s->done);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				set_err(w->sh, n < 0 ? -errno : -KV_ESHORT,
					is_write ? "cannot write '%s': %s" : "cannot read '%s': %s",
					w->sh->paths[file]);
				abort_op(w, s);
				return;
			}
			s->done += (uint64_t)n;
		}
		if (finish_op(w, s) < 0)
			return;
	}
}

#define UDATA(i, st)	(((uint64_t)(i) << 2) | (st))

static struct io_uring_sqe *get_sqe(struct worker *w, unsigned i, enum stage st)
{
	/* The ring holds two entries per slot and a slot never has more
	 * than two requests (open and data) outstanding. */
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);

	io_uring_sqe_set_data64(sqe, UDATA(i, st));
	return sqe;
}

static void prep_io(struct worker *w, unsigned i)
{
	struct io_uring_sqe *sqe = get_sqe(w, i, ST_DATA);
	struct slot *s = &w->slots[i];
	uint64_t left = w->b->o.block_bytes - s->done;
	char *buf = (char *)w->bufs[i] + s->done;

	if (w->b->o.registered_buffers) {
		if (s->is_write)
			io_uring_prep_write_fixed(sqe, s->fd, buf, (unsigned)left, s->done, (int)i);
		else
			io_uring_prep_read_fixed(sqe, s->fd, buf, (unsigned)left, s->done, (int)i);
	} else {
		if (s->is_write)
			io_uring_prep_write(sqe, s->fd, buf, (unsigned)left, s->done);
		else
			io_uring_prep_read(sqe, s->fd, buf, (unsigned)left, s->done);
	}
	if (w->b->o.registered_files)
		sqe->flags |= IOSQE_FIXED_FILE;
}

/* Start an operation: a synchronous open and the data request, or with
 * registered files an open into slot i of the file table linked to it. */
static int start_op(struct worker *w, unsigned i, uint64_t file, int is_write)
{
	struct slot *s = &w->slots[i];
	struct io_uring_sqe *sqe;
	int r;

	if (!w->b->o.registered_files) {
		if ((r = begin_op(w, s, file, is_write)) < 0)
			return r;
		prep_io(w, i);
		return 0;
	}
	if ((r = name_op(w, s, file, is_write)) < 0)
		return r;
	s->fd = (int)i;
	s->t_file = kv_monotonic_ns();
	sqe = get_sqe(w, i, ST_OPEN);
	/* Direct descriptors are never in the fd table: no O_CLOEXEC. */
	s->how = (struct open_how){
		.flags = (unsigned)((s->flags & ~O_CLOEXEC) | O_NOFOLLOW),
		.mode = (s->flags & O_CREAT) ? 0644 : 0,
		.resolve = BENEATH_RESOLVE,
	};
	io_uring_prep_openat2_direct(sqe, w->sh->rootfd, s->path, &s->how, i);
	sqe->flags |= IOSQE_IO_LINK;
	prep_io(w, i);
	return 0;
}

/* Ring-side fsync or close of a registered file. */
static void prep_fd_op(struct worker *w, unsigned i, enum stage st)
{
	struct io_uring_sqe *sqe = get_sqe(w, i, st);

	w->slots[i].t_data = kv_monotonic_ns();
	if (st == ST_FSYNC) {
		io_uring_prep_fsync(sqe, (int)i, 0);
		sqe->flags |= IOSQE_FIXED_FILE;
	} else {
		io_uring_prep_close_direct(sqe, i);
	}
}

static void fail_slot(struct worker *w, struct slot *s, int res, const char *fmt, const char *path)
{
	if (!s->failed)
		set_err(w->sh, res < 0 ? res : -KV_ESHORT, fmt, path);
	s->failed = 1;
}

/* One completion.  Returns 1 when the slot's operation is over. */
static int complete(struct worker *w, unsigned i, enum stage st, int res)
{
	struct slot *s = &w->slots[i];
	int regfiles = w->b->o.registered_files;
	int64_t now = kv_monotonic_ns();

	switch (st) {
	case ST_OPEN:
		/* On failure the linked data request completes -ECANCELED. */
		if (res < 0)
			fail_slot(w, s, res, "cannot open '%s': %s", s->path);
		else
			record(w, LAT_OPEN, s->t_file, now);
		s->t_data = now;
		return 0;
	case ST_DATA:
		if (s->failed && regfiles && res == -ECANCELED)
			return 1;
		if (res <= 0) {
			fail_slot(w, s, res, s->is_write ? "cannot write '%s': %s"
							 : "cannot read '%s': %s",
				  w->sh->paths[s->file]);
		} else if ((s->done += (uint64_t)res) < w->b->o.block_bytes) {
			/* A short transfer: ask for the rest. */
			prep_io(w, i);
			return 0;
		}
		if (!regfiles) {
			if (s->failed) {
				abort_op(w, s);
				return 1;
			}
			finish_op(w, s);
			return 1;
		}
		if (!s->failed)
			record(w, s->is_write ? LAT_WRITE : LAT_READ, s->t_data, now);
		prep_fd_op(w, i, !s->failed && s->is_write &&
			   w->b->o.fsync != FSYNC_NONE ? ST_FSYNC : ST_CLOSE);
		return 0;
	case ST_FSYNC:
		if (res < 0)
			fail_slot(w, s, res, "cannot fsync '%s': %s", w->sh->paths[s->file]);
		else
			record(w, LAT_FSYNC, s->t_data, now);
		prep_fd_op(w, i, ST_CLOSE);
		return 0;
	case ST_CLOSE:
		record(w, LAT_CLOSE, s->t_data, now);
		if (s->failed || res < 0) {
			if (s->tmp[0])
				unlink_beneath(w->sh->rootfd, s->tmp, 0);
			s->tmp[0] = '\0';
			return 1;
		}
		finish_meta(w, s, now);
		return 1;
	}
	return 1;
}

static void run_uring(struct worker *w)
{
	unsigned qd = w->b->o.qd, inflight = 0, nfree = qd, i, head, seen;
	unsigned *freelist = malloc(qd * sizeof(*freelist));
	struct io_uring_cqe *cqe;
	uint64_t file, k;
	int is_write, r, draining = 0;

	if (!freelist) {
		set_err(w->sh, -ENOMEM, "cannot allocate %s: %s", "slots");
		return;
	}
	for (i = 0; i < qd; i++)
		freelist[i] = qd - 1 - i;
	for (;;) {
		while (!draining && nfree && next_op(w, &file, &is_write, &k)) {
			i = freelist[--nfree];
			if (start_op(w, i, file, is_write) < 0) {
				freelist[nfree++] = i;
				draining = 1;
				break;
			}
			inflight++;
		}
		if (!inflight)
			break;
		r = io_uring_submit_and_wait(&w->ring, 1);
		if (r < 0 && r != -EINTR) {
			set_err(w->sh, r, "io_uring submit failed%s: %s", "");
			/* Requests already in the kernel still complete. */
			draining = 1;
			if (io_uring_wait_cqe(&w->ring, &cqe) < 0)
				break;
		}
		seen = 0;
		io_uring_for_each_cqe(&w->ring, head, cqe) {
			uint64_t ud = io_uring_cqe_get_data64(cqe);

			seen++;
			i = (unsigned)(ud >> 2);
			if (complete(w, i, (enum stage)(ud & 3), cqe->res)) {
				if (w->slots[i].failed)
					draining = 1;
				freelist[nfree++] = i;
				inflight--;
			}
		}
		io_uring_cq_advance(&w->ring, seen);
		if (atomic_load(&w->sh->stop))
			draining = 1;
	}
	free(freelist);
}

static void run_lookup(struct worker *w)
{
	struct shared *sh = w->sh;
	struct stat st;
	uint64_t file, k;
	int is_write;
	int64_t t0, t1;
	int r;

	while (next_op(w, &file, &is_write, &k)) {
		/* Alternate keys that are there with keys that are not. */
		int want = !(k & 1);
		const char *path = want ? sh->rpaths[(k / 2) % w->b->files]
					: sh->rmissing[(k / 2) % w->b->files];

		t0 = kv_monotonic_ns();
		if (w->io)
			r = kv_io_has(w->io, path);
		else
			r = stat_beneath(sh->rootfd, path, &st);
		t1 = kv_monotonic_ns();
		if (r < 0 && r != -ENOENT) {
			set_err(sh, r, "cannot stat '%s': %s", path);
			return;
		}
		record(w, LAT_LOOKUP, t0, t1);
		if (r == 0)
			w->hits++;
		else
			w->misses++;
		atomic_fetch_add_explicit(&w->live_ops, 1, memory_order_relaxed);
	}
}

/* The metadata phases, as mdtest's: every rank creates, then checks,
 * then removes empty files in the bucket dirs, under keys the data
 * phases never use.  A file a stonewalled create did not make is a
 * miss for stat and unlink, not an error. */
static void run_meta(struct worker *w)
{
	struct shared *sh = w->sh;
	struct stat st;
	uint64_t file, k;
	int is_write, r, fd;
	int64_t t0;

	while (next_op(w, &file, &is_write, &k)) {
		const char *path = sh->missing[file];

		t0 = kv_monotonic_ns();
		switch (sh->phase) {
		case PH_CREATE:
			fd = kv_open_beneath(sh->rootfd, path, O_WRONLY | O_CREAT | O_EXCL, 0644);
			r = fd < 0 ? fd : close(fd);
			break;
		case PH_STAT:
			r = stat_beneath(sh->rootfd, path, &st);
			break;
		default:
			r = unlink_beneath(sh->rootfd, path, 0);
			break;
		}
		if (r < 0 && (r != -ENOENT || sh->phase == PH_CREATE)) {
			set_err(sh, r, sh->phase == PH_CREATE ? "cannot create '%s': %s"
				: sh->phase == PH_STAT ? "cannot stat '%s': %s"
				: "cannot remove '%s': %s", path);
			return;
		}
		record(w, sh->phase == PH_CREATE ? LAT_CREATE : sh->phase == PH_STAT ? LAT_LOOKUP
			  : LAT_UNLINK, t0, kv_monotonic_ns());
		if (sh->phase == PH_CREATE)
			w->writes++;
		else if (r == 0)
			w->hits++;
		else
			w->misses++;
		atomic_fetch_add_explicit(&w->live_ops, 1, memory_order_relaxed);
	}
}

/* libkv's engine: batches of up to qd whole puts and gets. */
static void run_kvio(struct worker *w)
{
	struct shared *sh = w->sh;
	uint64_t len = w->b->o.block_bytes, file, k;
	unsigned qd = w->b->o.qd, n, i;
	int is_write, r;
	int64_t t0;

	for (;;) {
		for (n = 0; n < qd && next_op(w, &file, &is_write, &k); n++)
			w->reqs[n] = (struct kv_io_req){
				.op = is_write ? KV_IO_OP_PUT : KV_IO_OP_GET,
				.relpath = is_write ? sh->paths[file] : sh->rpaths[file],
				.buf = w->bufs[n],
				.len = len,
			};
		if (!n)
			return;
		t0 = kv_monotonic_ns();
		r = kv_io_batch(w->io, w->reqs, n);
		if (r < 0) {
			set_err(sh, r, "libkv engine failed on '%s': %s", w->reqs[0].relpath);
			return;
		}
		record(w, LAT_BATCH, t0, kv_monotonic_ns());
		for (i = 0; i < n; i++) {
			struct kv_io_req *q = &w->reqs[i];

			if (q->result < 0) {
				set_err(sh, q->result, q->op == KV_IO_OP_PUT ? "cannot put '%s': %s"
									  : "cannot get '%s': %s",
					q->relpath);
				continue;
			}
			if (q->op == KV_IO_OP_PUT)
				w->writes++;
			else
				w->reads++;
			atomic_fetch_add_explicit(&w->live_ops, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&w->live_bytes, len, memory_order_relaxed);
		}
		if (r > 0)
			return;
	}
}

/*
 * A bucket: the same operations as requests to libkv's S3 tier, through
 * kv_tier_batch_stream on this thread's own tier handle, with qd of them
 * in flight (next() hands over no more while qd are out).  --threads x
 * --qd are the requests in flight, as they are the I/Os in flight on a
 * filesystem.  A handle per thread rather than one with threads x qd in
 * flight: each handle's engine is one curl multi loop driven by the
 * thread that runs the batch, so with one handle a single thread would
 * do all the TLS, signing and xxh3 of every request and, once it is
 * busy, add its own queueing to every latency; a loop per thread spreads
 * that over the cores, as a connector's workers would, and keeps each
 * request's latency its own.
 *
 * Latency is per request, from next() handing it to the engine to the
 * engine's done() for it: the round trip, the transfer and any retries
 * the engine made (what a caller waits), as the file engine's is from
 * the submission to the completion.
 */
static void s3_fail(struct worker *w, int err, const char *what, const char *key)
{
	struct shared *sh = w->sh;
	const char *detail = kv_error_detail();

	pthread_mutex_lock(&sh->lock);
	if (!sh->err) {
		sh->err = err;
		snprintf(sh->errmsg, sizeof(sh->errmsg), "cannot %s '%s/%s': %s%s%s", what,
			 w->b->o.dir, key, kv_strerror(err), *detail ? ": " : "", detail);
	}
	pthread_mutex_unlock(&sh->lock);
	atomic_store(&sh->stop, 1);
}

static int s3_next(void *arg, struct kv_tier_req **out)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	struct s3slot *s;
	uint64_t file, k;
	int is_write;

	/* qd out: done() frees one, and next() is asked again then. */
	if (!w->ns3free || !next_op(w, &file, &is_write, &k))
		return 0;
	s = &w->s3slots[w->s3free[--w->ns3free]];
	s->file = file;
	if (sh->phase == PH_LOOKUP) {
		/* Alternate keys that are there with keys that are not. */
		s->req = (struct kv_tier_req){
			.op = KV_TIER_OP_HAS,
			.key = !(k & 1) ? sh->rpaths[(k / 2) % w->b->files]
					: sh->rmissing[(k / 2) % w->b->files],
		};
	} else {
		s->req = (struct kv_tier_req){
			.op = is_write ? KV_TIER_OP_PUT : KV_TIER_OP_GET,
			.key = is_write ? sh->paths[file] : sh->rpaths[file],
			.buf = w->bufs[s->idx],
			.len = w->b->o.block_bytes,
		};
	}
	s->req.user = s;
	s->t0 = kv_monotonic_ns();
	*out = &s->req;
	return 1;
}

static void s3_done(void *arg, struct kv_tier_req *req)
{
	int64_t t = kv_monotonic_ns();
	struct worker *w = arg;
	struct s3slot *s = req->user;
	uint64_t len = w->b->o.block_bytes;
	int r = req->result;

	w->s3free[w->ns3free++] = s->idx;
	if (req->op == KV_TIER_OP_HAS) {
		if (r < 0 && r != -ENOENT) {
			s3_fail(w, r, "look up", req->key);
			return;
		}
		record(w, LAT_LOOKUP, s->t0, t);
		if (r == 0)
			w->hits++;
		else
			w->misses++;
		atomic_fetch_add_explicit(&w->live_ops, 1, memory_order_relaxed);
		return;
	}
	if (r == 0 && req->op == KV_TIER_OP_GET && req->done != len)
		r = -KV_ESHORT;
	if (r < 0) {
		s3_fail(w, r, req->op == KV_TIER_OP_PUT ? "put" : "get", req->key);
		return;
	}
	record(w, req->op == KV_TIER_OP_PUT ? LAT_WRITE : LAT_READ, s->t0, t);
	if (req->op == KV_TIER_OP_PUT) {
		atomic_store_explicit(&w->sh->written[s->file], 1, memory_order_relaxed);
		w->writes++;
	} else {
		w->reads++;
	}
	atomic_fetch_add_explicit(&w->live_ops, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&w->live_bytes, len, memory_order_relaxed);
}

static void run_s3(struct worker *w)
{
	int r = kv_tier_batch_stream(w->tier, s3_next, s3_done, w);

	/* A lost connection ends the batch; failed requests were said in
	 * done(). */
	if (r < 0)
		s3_fail(w, r, "reach", "");
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;

	if (w->b->o.engine == ENGINE_S3)
		run_s3(w);
	else if (sh->phase == PH_LOOKUP)
		run_lookup(w);
	else if (sh->phase >= PH_CREATE)
		run_meta(w);
	else if (w->b->o.engine == ENGINE_KVIO)
		run_kvio(w);
	else if (w->b->o.engine == ENGINE_URING)
		run_uring(w);
	else
		run_psync(w);
	pthread_mutex_lock(&sh->lock);
	atomic_fetch_sub(&sh->running, 1);
	pthread_cond_signal(&sh->cond);
	pthread_mutex_unlock(&sh->lock);
	return NULL;
}

uint64_t bench_buffer_bytes(const struct bench_opts *o)
{
	/* Lookups and metadata move no data (worker_setup). */
	if (!(o->phases & (1u << PH_WRITE | 1u << PH_READ | 1u << PH_MIXED)))
		return 0;
	return (uint64_t)o->threads * (o->engine != ENGINE_PSYNC ? o->qd : 1) * o->block_bytes;
}

static int worker_setup(struct bench *b, struct worker *w, enum phase ph)
{
	unsigned n = b->o.engine != ENGINE_PSYNC ? b->o.qd : 1, i;
	struct io_uring_params p = { 0 };
	struct iovec *iov;
	int r;

	for (i = 0; i < LAT_COUNT; i++)
		if ((r = kv_hist_new(&w->lat[i])) < 0)
			return r;
	if (b->o.engine == ENGINE_KVIO) {
		struct kv_io_opts o = {
			.queue_depth = b->o.qd,
			/* REPLACE: every write phase writes its files anew. */
			.flags = KV_IO_REPLACE | (b->direct ? 0 : KV_IO_BUFFERED) |
				 (b->o.fsync != FSYNC_NONE ? KV_IO_FSYNC : 0),
		};

		if ((r = kv_io_open(b->o.dir, &o, &w->io)) < 0)
			return r;
		if (!(w->reqs = calloc(n, sizeof(*w->reqs))))
			return -ENOMEM;
	}
	if (b->o.engine == ENGINE_S3) {
		/* REPLACE: every write phase writes its objects anew.  Its
		 * engine has $KV_S3_INFLIGHT = qd slots (bench_run). */
		struct kv_io_opts o = { .flags = KV_IO_REPLACE };

		if ((r = kv_tier_s3_open(b->o.dir, &o, &w->tier)) < 0)
			return r;
		w->s3slots = calloc(n, sizeof(*w->s3slots));
		w->s3free = calloc(n, sizeof(*w->s3free));
		if (!w->s3slots || !w->s3free)
			return -ENOMEM;
		for (i = 0; i < n; i++) {
			w->s3slots[i].idx = i;
			w->s3free[i] = n - 1 - i;
		}
		w->ns3free = n;
	}
	if (ph == PH_LOOKUP || ph >= PH_CREATE)
		return 0;	/* presence checks and metadata move no data */
	w->slots = calloc(n, sizeof(*w->slots));
	w->bufs = calloc(n, sizeof(*w->bufs));
	if (!w->slots || !w->bufs)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		w->slots[i].fd = -1;
		if ((r = posix_memalign(&w->bufs[i], KV_IO_ALIGN, b->o.block_bytes)))
			return -r;
		/* What is written is incompressible, distinct per buffer. */
		for (uint64_t j = 0; ph != PH_READ && j + 8 <= b->o.block_bytes; j += 8) {
			uint64_t v = splitmix(&w->rng);

			memcpy((char *)w->bufs[i] + j, &v, 8);
		}
	}
	if (b->o.engine != ENGINE_URING)
		return 0;
	if (b->o.sqpoll) {
		p.flags |= IORING_SETUP_SQPOLL;
		p.sq_thread_idle = 100;
	}
	r = io_uring_queue_init_params(2 * n, &w->ring, &p);
	if (r < 0)
		return r;
	w->have_ring = 1;
	if (b->o.registered_files && (r = io_uring_register_files_sparse(&w->ring, n)) < 0)
		return r;
	if (b->o.registered_buffers) {
		iov = calloc(n, sizeof(*iov));
		if (!iov)
			return -ENOMEM;
		for (i = 0; i < n; i++) {
			iov[i].iov_base = w->bufs[i];
			iov[i].iov_len = b->o.block_bytes;
		}
		r = io_uring_register_buffers(&w->ring, iov, n);
		free(iov);
		if (r < 0)
			return r;
	}
	return 0;
}

static void worker_free(struct bench *b, struct worker *w)
{
	unsigned n = b->o.engine != ENGINE_PSYNC ? b->o.qd : 1, i;

	if (w->have_ring)
		io_uring_queue_exit(&w->ring);
	if (w->io)
		kv_io_close(w->io);
	if (w->tier)
		kv_tier_close(w->tier);
	free(w->s3slots);
	free(w->s3free);
	free(w->reqs);
	for (i = 0; w->bufs && i < n; i++)
		free(w->bufs[i]);
	free(w->bufs);
	free(w->slots);
	for (i = 0; i < LAT_COUNT; i++)
		kv_hist_free(w->lat[i]);
}

static int add_sample(struct bench *b, struct sample s)
{
	if (b->nsamples == b->samples_cap) {
		size_t cap = b->samples_cap ? b->samples_cap * 2 : 64;
		struct sample *n = realloc(b->samples, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		b->samples = n;
		b->samples_cap = cap;
	}
	b->samples[b->nsamples++] = s;
	return 0;
}

static void progress(enum phase ph, uint64_t t_ns,
		     uint64_t ops, uint64_t bytes, uint64_t interval_ns,
		     uint64_t d_bytes, uint64_t d_ops)
{
	char tb[16], rate[16];
	double secs = (double)interval_ns / 1e9;

	kv_size_format(bytes, tb, sizeof(tb));
	kv_size_format(secs > 0 ? (uint64_t)((double)d_bytes / secs) : 0, rate, sizeof(rate));
	fprintf(stderr, "\r\033[K%s: %.0f s, %llu ops, %s, %s/s, %.0f ops/s",
		phase_names[ph], (double)t_ns / 1e9, (unsigned long long)ops, tb, rate,
		secs > 0 ? (double)d_ops / secs : 0.0);
}

/* Sample the workers' counters once a second until they are all done. */
static int sample_loop(struct bench *b, struct shared *sh, struct worker *ws,
		       int64_t start)
{
	/* Under mpirun rank 0 shows its own seconds; the phase's figures
	 * are gathered from every rank at its end. */
	int tty = isatty(STDERR_FILENO) && b->rank == 0;
	uint64_t last_ops = 0, last_bytes = 0, last_t = 0;
	int64_t next = start + (int64_t)SAMPLE_NS;
	int done = 0, r;

	while (!done) {
		struct timespec ts;
		uint64_t ops = 0, bytes = 0, t;
		unsigned i;

		ts.tv_sec = 0;
		ts.tv_nsec = 0;
		pthread_mutex_lock(&sh->lock);
		while (atomic_load(&sh->running) && kv_monotonic_ns() < next) {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 20000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&sh->cond, &sh->lock, &ts);
			/* Another rank finished its share: this phase is over. */
			if (ranks_wall_hit())
				atomic_store(&sh->stop, 1);
		}
		done = !atomic_load(&sh->running);
		pthread_mutex_unlock(&sh->lock);
		t = (uint64_t)(kv_monotonic_ns() - start);
		for (i = 0; i < b->o.threads; i++) {
			ops += atomic_load(&ws[i].live_ops);
			bytes += atomic_load(&ws[i].live_bytes);
		}
		if (t > last_t) {
			struct sample s = { sh->phase, t, t - last_t, ops - last_ops,
					    bytes - last_bytes };

			if ((r = add_sample(b, s)) < 0)
				return r;
			if (b->o.ndjson && b->rank == 0) {
				tool_json_print(sample_json(&s));
				fflush(stdout);
			}
			if (tty)
				progress(sh->phase, t, ops, bytes, t - last_t,
					 bytes - last_bytes, ops - last_ops);
		}
		last_ops = ops;
		last_bytes = bytes;
		last_t = t;
		next += (int64_t)SAMPLE_NS;
	}
	if (tty)
		fputs("\r\033[K", stderr);
	return 0;
}

/* Make the working set cold for a buffered read: write back, then drop
 * its pages (every file, or the whole page cache with --drop-caches). */
static const char *make_cold(struct bench *b, struct shared *sh)
{
	uint64_t i;
	int fd;

	if (b->direct)
		return "direct";
	syncfs(sh->rootfd);
	if (b->o.drop_caches) {
		fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
		if (fd >= 0 && write(fd, "1\n", 2) == 2) {
			close(fd);
			return "drop_caches";
		}
		if (fd >= 0)
			close(fd);
	}
	for (i = 0; i < b->files; i++) {
		fd = kv_open_beneath(sh->rootfd, sh->rpaths[i], O_RDONLY | O_NONBLOCK, 0);
		if (fd < 0)
			continue;
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	return "fadvise";
}

/*
 * A rank's share of a phase as words: the counters, then per latency
 * its count, min, max and sum, then its non-empty buckets as (latency,
 * index, count).  Rank 0 rebuilds every rank's histograms from these,
 * so merging is kv_hist_merge, exact, never an average of percentiles.
 */
#define RANK_HEAD	8
#define RANK_WORDS	(RANK_HEAD + 4 * LAT_COUNT)

static int pack_rank(const struct phase_result *res, uint64_t **out, size_t *n)
{
	size_t cap = RANK_WORDS, len = RANK_WORDS;
	uint64_t *w;

	for (unsigned l = 0; l < LAT_COUNT; l++)
		for (unsigned i = 0; i < KV_HIST_BUCKETS; i++)
			cap += res->lat[l]->buckets[i] ? 3 : 0;
	if (!(w = malloc(cap * sizeof(*w))))
		return -ENOMEM;
	w[0] = res->elapsed_ns;
	w[1] = res->ops;
	w[2] = res->bytes;
	w[3] = res->reads;
	w[4] = res->writes;
	w[5] = res->hits;
	w[6] = res->misses;
	w[7] = 0;
	for (unsigned l = 0; l < LAT_COUNT; l++) {
		const struct kv_hist *h = res->lat[l];
		uint64_t *q = w + RANK_HEAD + 4 * l;

		q[0] = h->count;
		q[1] = h->min;
		q[2] = h->max;
		memcpy(&q[3], &h->sum, sizeof(q[3]));
		for (unsigned i = 0; i < KV_HIST_BUCKETS; i++) {
			if (!h->buckets[i])
				continue;
			w[len++] = l;
			w[len++] = i;
			w[len++] = h->buckets[i];
		}
	}
	*out = w;
	*n = len;
	return 0;
}

static int unpack_rank(const uint64_t *w, size_t n, struct rank_result *rr)
{
	int r;

	rr->elapsed_ns = w[0];
	rr->ops = w[1];
	rr->bytes = w[2];
	rr->reads = w[3];
	rr->writes = w[4];
	rr->hits = w[5];
	rr->misses = w[6];
	for (unsigned l = 0; l < LAT_COUNT; l++) {
		const uint64_t *q = w + RANK_HEAD + 4 * l;

		if ((r = kv_hist_new(&rr->lat[l])) < 0)
			return r;
		rr->lat[l]->count = q[0];
		rr->lat[l]->min = q[1];
		rr->lat[l]->max = q[2];
		memcpy(&rr->lat[l]->sum, &q[3], sizeof(q[3]));
	}
	for (size_t k = RANK_WORDS; k + 3 <= n; k += 3)
		if (w[k] < LAT_COUNT && w[k + 1] < KV_HIST_BUCKETS)
			rr->lat[w[k]]->buckets[w[k + 1]] = w[k + 2];
	return 0;
}

/* What makes a rank the slowest: bytes a second or, for phases that
 * move none, operations; a pass ends on all ranks at once only when
 * stonewalled, so the share alone would not do. */
static double rank_rate(const struct rank_result *rr)
{
	double secs = rr->elapsed_ns ? (double)rr->elapsed_ns / 1e9 : 1e-9;

	return (double)(rr->bytes ? rr->bytes : rr->ops) / secs;
}

/* With several ranks: rank 0 keeps each rank's figures and makes the
 * phase's the sum of them, elapsed the longest of them. */
static int gather_ranks(struct bench *b, struct phase_result *res)
{
	uint64_t *mine = NULL, *all = NULL;
	size_t n, *ns = NULL, off = 0;
	int r;

	if (b->nranks < 2)
		return 0;
	if ((r = pack_rank(res, &mine, &n)) < 0 || (r = ranks_gather(mine, n, &all, &ns)) < 0)
		goto out;
	if (b->rank != 0)
		goto out;
	if (!(res->per_rank = calloc(b->nranks, sizeof(*res->per_rank)))) {
		r = -ENOMEM;
		goto out;
	}
	res->elapsed_ns = res->ops = res->bytes = res->reads = res->writes = 0;
	res->hits = res->misses = 0;
	for (unsigned l = 0; l < LAT_COUNT; l++)
		kv_hist_init(res->lat[l]);
	for (unsigned k = 0; k < b->nranks; off += ns[k], k++) {
		struct rank_result *rr = &res->per_rank[k];

		if ((r = unpack_rank(all + off, ns[k], rr)) < 0)
			goto out;
		if (rr->elapsed_ns > res->elapsed_ns)
			res->elapsed_ns = rr->elapsed_ns;
		res->ops += rr->ops;
		res->bytes += rr->bytes;
		res->reads += rr->reads;
		res->writes += rr->writes;
		res->hits += rr->hits;
		res->misses += rr->misses;
		for (unsigned l = 0; l < LAT_COUNT; l++)
			kv_hist_merge(res->lat[l], rr->lat[l]);
		if (rank_rate(rr) < rank_rate(&res->per_rank[res->slowest]))
			res->slowest = k;
	}
out:
	if (r < 0)
		snprintf(b->err, sizeof(b->err), "cannot gather the ranks' results: %s",
			 kv_strerror(r));
	free(mine);
	free(all);
	free(ns);
	return r;
}

static int run_phase(struct bench *b, struct shared *sh, enum phase ph)
{
	struct phase_result *res = &b->res[ph];
	struct worker *ws;
	unsigned i, l, started = 0;
	int64_t start;
	int r = 0;

	/* A bucket: no cache here to make cold (none reported). */
	if ((ph == PH_READ || ph == PH_MIXED) && !b->s3)
		res->cache_drop = make_cold(b, sh);
	ws = calloc(b->o.threads, sizeof(*ws));
	if (!ws)
		return -ENOMEM;
	for (i = 0; i < b->o.threads && r == 0; i++) {
		ws[i].b = b;
		ws[i].sh = sh;
		ws[i].rng = b->o.seed * 1000003 + i + ph * 7919;
		r = worker_setup(b, &ws[i], ph);
	}
	if (r < 0) {
		snprintf(b->err, sizeof(b->err), "cannot set up workers: %s%s%s%s", kv_strerror(r),
			 r == -ENOMEM && b->o.registered_buffers ?
			 " (registered buffers are locked memory)" : "",
			 b->s3 && *kv_error_detail() ? ": " : "", b->s3 ? kv_error_detail() : "");
		goto out;
	}
	sh->phase = ph;
	atomic_store(&sh->cursor, 0);
	atomic_store(&sh->stop, 0);
	sh->total_ops = ph == PH_LOOKUP ? b->o.lookups : b->files;
	/* Every rank starts together, or the first would have the storage
	 * to itself for a while. */
	ranks_wall_arm();
	ranks_barrier();
	start = kv_monotonic_ns();
	sh->deadline_ns = b->o.duration_ns ? start + (int64_t)b->o.duration_ns : 0;
	atomic_store(&sh->running, b->o.threads);
	for (i = 0; i < b->o.threads; i++) {
		r = -pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]);
		if (r < 0) {
			set_err(sh, r, "cannot start a thread%s: %s", "");
			atomic_fetch_sub(&sh->running, b->o.threads - i);
			break;
		}
		started++;
	}
	r = sample_loop(b, sh, ws, start);
	res->elapsed_ns = (uint64_t)(kv_monotonic_ns() - start);
	ranks_wall_done();
	for (i = 0; i < started; i++)
		pthread_join(ws[i].tid, NULL);
	res->ran = 1;
	for (l = 0; l < LAT_COUNT; l++) {
		if (!res->lat[l] && (r = kv_hist_new(&res->lat[l])) < 0)
			break;
		for (i = 0; i < b->o.threads; i++)
			kv_hist_merge(res->lat[l], ws[i].lat[l]);
	}
	for (i = 0; i < b->o.threads; i++) {
		res->reads += ws[i].reads;
		res->writes += ws[i].writes;
		res->hits += ws[i].hits;
		res->misses += ws[i].misses;
		res->ops += atomic_load(&ws[i].live_ops);
		res->bytes += atomic_load(&ws[i].live_bytes);
	}
	if (sh->err) {
		r = sh->err;
		snprintf(b->err, sizeof(b->err), "%s", sh->errmsg);
	}
	if (!r) {
		ranks_wall_drain();
		r = gather_ranks(b, res);
	}
out:
	for (i = 0; i < b->o.threads; i++)
		worker_free(b, &ws[i]);
	free(ws);
	return r;
}

/* The model dir a run writes into, named and fingerprinted as a vLLM
 * fleet's would be, so lookups walk the same depth of directories.  A
 * bucket gets the name only: its rank dirs need no config.json (kvls
 * reads them without), so nothing is stored but the blocks. */
static int make_model_dir(struct bench *b, int rootfd)
{
	unsigned tokens = b->have_geo ? b->geo.tokens_per_file : 256;
	unsigned gpu = b->have_geo ? b->geo.gpu_block_tokens : 16;
	char text[1024];
	struct kv_config *cfg;
	int r;

	snprintf(text, sizeof(text),
		 "{\"model_name\": \"kvbench/%s-%llu\", \"hash_block_size\": %u,"
		 " \"gpu_blocks_per_file\": %u, \"tp_size\": %u, \"pp_size\": 1,"
		 " \"pcp_size\": 1, \"dcp_size\": 1, \"dtype\": \"%s\","
		 " \"kv_cache_groups\": [{\"block_size\": %u, \"layer_names\": []}],"
		 " \"inference_engine\": \"kvbench\"}",
		 b->have_geo && b->geo.model_type[0] ? b->geo.model_type : "block",
		 (unsigned long long)b->o.block_bytes, gpu, tokens / gpu,
		 b->have_geo ? b->geo.tp : 1, b->have_geo ? b->geo.dtype : "bfloat16", gpu);
	r = kv_config_parse(text, strlen(text), &cfg);
	if (r < 0)
		return r;
	if (b->s3)
		r = kv_config_model_dir(cfg, b->model_dir, sizeof(b->model_dir));
	else
		r = kv_config_ensure_model_dir(rootfd, cfg, b->model_dir, sizeof(b->model_dir));
	kv_config_free(cfg);
	return r;
}

static int mkdirs_for(int rootfd, const char *relpath)
{
	char p[PATH_MAX], *s;
	int fd;

	snprintf(p, sizeof(p), "%s", relpath);
	if (!(s = strrchr(p, '/')))
		return 0;
	*s = '\0';
	fd = kv_mkdir_beneath(rootfd, p);
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

/* The working set of a rank, in its own rank dir, as a TP rank's. */
static int make_paths(struct bench *b, struct shared *sh, unsigned rank, char ***pathsp,
		      char ***missingp)
{
	uint64_t i, seed = b->o.seed;
	char hash[HASH_HEX + 1], path[PATH_MAX];
	char **paths, **missing;
	int r;

	paths = *pathsp = calloc(b->files, sizeof(char *));
	missing = *missingp = calloc(b->files, sizeof(char *));
	if (!paths || !missing)
		return -ENOMEM;
	for (i = 0; i < b->files; i++) {
		uint64_t h = splitmix(&seed);

		snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)h);
		r = kv_layout_block_path(b->model_dir, rank, 0, hash, path, sizeof(path));
		if (r < 0)
			return r;
		if (!b->s3 && (r = mkdirs_for(sh->rootfd, path)) < 0)
			return r;
		if (!(paths[i] = strdup(path)))
			return -ENOMEM;
		/* An absent key in the same bucket: only the name differs. */
		snprintf(hash + 5, sizeof(hash) - 5, "%011llx",
			 (unsigned long long)(~h & 0xfffffffffffULL));
		r = kv_layout_block_path(b->model_dir, rank, 0, hash, path, sizeof(path));
		if (r < 0)
			return r;
		if (!(missing[i] = strdup(path)))
			return -ENOMEM;
	}
	return 0;
}

/* O_DIRECT is used when asked for or, by default, when the filesystem
 * takes it; tmpfs and some FUSE mounts refuse it at open. */
static int probe_direct(struct bench *b, int rootfd)
{
	char name[64];
	int fd, err;

	if (b->o.direct == DIRECT_OFF)
		return 0;
	snprintf(name, sizeof(name), ".kvbench-direct-%d.tmp", (int)getpid());
	fd = openat(rootfd, name, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		unlinkat(rootfd, name, 0);
		/* Unaligned blocks cannot go direct; main refused --direct. */
		if (b->o.block_bytes % KV_IO_ALIGN)
			return 0;
		return 1;
	}
	err = errno;
	if (err == EINVAL && b->o.direct == DIRECT_AUTO)
		return 0;
	if (err == EINVAL)
		snprintf(b->err, sizeof(b->err), "cannot use O_DIRECT in '%s': %s (try --buffered)",
			 b->o.dir, strerror(err));
	else
		snprintf(b->err, sizeof(b->err), "cannot create a file in '%s': %s", b->o.dir,
			 strerror(err));
	return -err;
}

static void cleanup(struct bench *b, struct shared *sh)
{
	char p[PATH_MAX], *s;
	uint64_t i;

	for (i = 0; i < b->files && sh->paths && sh->paths[i]; i++)
		unlink_beneath(sh->rootfd, sh->paths[i], 0);
	/* What a failed or stonewalled metadata phase left. */
	for (i = 0; i < b->files && sh->missing && sh->missing[i]; i++)
		unlink_beneath(sh->rootfd, sh->missing[i], 0);
	/* Bucket dirs, rank dir, then the model dir: rmdir leaves any that
	 * hold something that is not ours. */
	for (i = 0; i < b->files && sh->paths && sh->paths[i]; i++) {
		snprintf(p, sizeof(p), "%s", sh->paths[i]);
		while ((s = strrchr(p, '/'))) {
			*s = '\0';
			if (unlink_beneath(sh->rootfd, p, AT_REMOVEDIR) < 0)
				break;
		}
	}
	if (b->model_dir[0]) {
		snprintf(p, sizeof(p), "%s/%s", b->model_dir, KV_CONFIG_NAME);
		unlink_beneath(sh->rootfd, p, 0);
		unlink_beneath(sh->rootfd, b->model_dir, AT_REMOVEDIR);
	}
}

/* Reads need the working set in place: write, untimed, any block file a
 * write phase did not (none ran, or its --duration ended first). */
static int populate(struct bench *b, struct shared *sh)
{
	struct stat st;
	uint64_t i, done;
	const char *bad = NULL;
	ssize_t n;
	void *buf;
	int fd, r = 0;

	buf = calloc(1, b->o.block_bytes);
	if (!buf)
		return -ENOMEM;
	for (i = 0; i < b->files && r == 0; i++) {
		if (stat_beneath(sh->rootfd, sh->paths[i], &st) == 0 && S_ISREG(st.st_mode) &&
		    (uint64_t)st.st_size == b->o.block_bytes)
			continue;
		bad = sh->paths[i];
		fd = kv_open_beneath(sh->rootfd, bad, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK,
				     0644);
		if (fd < 0) {
			r = fd;
			break;
		}
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			r = -EINVAL;
			close(fd);
			break;
		}
		for (done = 0; done < b->o.block_bytes; done += (uint64_t)n) {
			n = pwrite(fd, (char *)buf + done, b->o.block_bytes - done, (off_t)done);
			if (n < 0 && errno == EINTR) {
				n = 0;
				continue;
			}
			if (n <= 0) {
				r = n < 0 ? -errno : -EIO;
				break;
			}
		}
		close(fd);
	}
	free(buf);
	if (r < 0)
		snprintf(b->err, sizeof(b->err), "cannot write '%s': %s", bad,
			 kv_strerror(r));
	return r;
}

/* ---- a bucket: populating and cleaning up through the root's tier ---- */

struct s3fill {
	struct bench *b;
	struct shared *sh;
	const void *buf;		/* every PUT's body (read only) */
	uint64_t next;
	int err;
	const char *bad;
	struct kv_tier_req *reqs;	/* qd of them, free when user is NULL */
};

static int fill_next(void *arg, struct kv_tier_req **out)
{
	struct s3fill *f = arg;
	struct kv_tier_req *q = NULL;

	for (unsigned i = 0; i < f->b->o.qd && !q; i++)
		if (!f->reqs[i].user)
			q = &f->reqs[i];
	while (q && !f->err && f->next < f->b->files) {
		uint64_t i = f->next++;

		if (atomic_load(&f->sh->written[i]))
			continue;
		*q = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = f->sh->paths[i],
					   .buf = (void *)f->buf, .len = f->b->o.block_bytes,
					   .user = (void *)(uintptr_t)(i + 1) };
		*out = q;
		return 1;
	}
	return 0;
}

static void fill_done(void *arg, struct kv_tier_req *req)
{
	struct s3fill *f = arg;
	uint64_t i = (uint64_t)(uintptr_t)req->user - 1;

	req->user = NULL;
	if (req->result == 0) {
		atomic_store(&f->sh->written[i], 1);
	} else if (!f->err) {
		f->err = req->result;
		f->bad = f->sh->paths[i];
	}
}

/* Reads need the working set in the bucket: PUT, untimed, qd at a time,
 * every block this run has not stored yet. */
static int populate_s3(struct bench *b, struct shared *sh)
{
	struct s3fill f = { .b = b, .sh = sh };
	uint64_t seed = b->o.seed ^ 0x5eed, j;
	void *buf = malloc(b->o.block_bytes);
	int r;

	f.reqs = calloc(b->o.qd, sizeof(*f.reqs));
	if (!buf || !f.reqs) {
		free(buf);
		free(f.reqs);
		return -ENOMEM;
	}
	for (j = 0; j + 8 <= b->o.block_bytes; j += 8) {
		uint64_t v = splitmix(&seed);

		memcpy((char *)buf + j, &v, 8);
	}
	f.buf = buf;
	r = kv_tier_batch_stream(sh->tier, fill_next, fill_done, &f);
	if (r >= 0)
		r = f.err;
	if (r < 0)
		snprintf(b->err, sizeof(b->err), "cannot put '%s/%s': %s%s%s", b->o.dir,
			 f.bad ? f.bad : "", kv_strerror(r), *kv_error_detail() ? ": " : "",
			 kv_error_detail());
	free(buf);
	free(f.reqs);
	return r;
}

struct s3clean {
	struct bench *b;
	struct shared *sh;
	_Atomic uint64_t next;
};

static void clean_with(struct s3clean *c, struct kv_tier *t)
{
	uint64_t i;

	while ((i = atomic_fetch_add(&c->next, 1)) < c->b->files)
		if (atomic_load(&c->sh->written[i]))
			kv_tier_del(t, c->sh->paths[i]);
}

/* One deleting thread, on a handle of its own: calls into one S3 tier
 * handle from several threads at once stall in libcurl's shared
 * connection cache, so each thread has its own, as the workers do. */
static void *clean_main(void *arg)
{
	struct s3clean *c = arg;
	struct kv_io_opts o = { .flags = KV_IO_REPLACE };
	struct kv_tier *t;

	if (kv_tier_s3_open(c->b->o.dir, &o, &t) < 0)
		return NULL;	/* the main thread deletes what is left */
	clean_with(c, t);
	kv_tier_close(t);
	return NULL;
}

/* Delete the objects this run stored, and only those: a key is deleted
 * once its PUT (timed or populating) succeeded, never a key it only
 * looked up or read, nor anything else under the prefix.  kv_tier_del is
 * a HEAD and a DELETE, one at a time: threads x qd threads (16 at most)
 * share the keys out. */
static void cleanup_s3(struct bench *b, struct shared *sh)
{
	struct s3clean c = { .b = b, .sh = sh };
	uint64_t n = (uint64_t)b->o.threads * b->o.qd;
	pthread_t *tids;
	unsigned i, started = 0;

	if (!sh->written || !sh->paths)
		return;
	if (n > 16)
		n = 16;
	if (n > b->files)
		n = b->files;
	tids = calloc(n, sizeof(*tids));
	for (i = 0; tids && i < n; i++)
		if (pthread_create(&tids[i], NULL, clean_main, &c) == 0)
			started++;
	for (i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	/* Keys no thread took (one could not open its handle). */
	clean_with(&c, sh->tier);
}

/* A bucket --dir: checked by opening it (the bucket must answer), the
 * engine's requests in flight set to --qd. */
static int open_bucket(struct bench *b, struct shared *sh)
{
	struct kv_io_opts o = { .flags = KV_IO_REPLACE };
	char n[16];
	int r;

	/* Each handle's engine takes qd requests at once; next() never
	 * hands it more, so $KV_S3_INFLIGHT is --qd here. */
	snprintf(n, sizeof(n), "%u", b->o.qd);
	setenv("KV_S3_INFLIGHT", n, 1);
	r = kv_tier_s3_open(b->o.dir, &o, &sh->tier);
	if (r < 0) {
		snprintf(b->err, sizeof(b->err), "cannot open '%s': %s%s%s", b->o.dir,
			 kv_strerror(r), *kv_error_detail() ? ": " : "", kv_error_detail());
		sh->tier = NULL;
		return r;
	}
	if (!(sh->written = calloc(b->files, sizeof(*sh->written)))) {
		snprintf(b->err, sizeof(b->err), "%s", kv_strerror(-ENOMEM));
		return -ENOMEM;
	}
	return 0;
}

static void free_paths(const struct bench *b, char **paths)
{
	for (uint64_t i = 0; i < b->files && paths; i++)
		free(paths[i]);
	free(paths);
}

/* The scratch dir this run made, once empty: only the one it opened
 * (rootfd), and never what is there besides its own files. */
static void remove_scratch(const char *dir, int rootfd)
{
	struct stat opened, now;

	if (fstat(rootfd, &opened) == 0 && lstat(dir, &now) == 0 &&
	    opened.st_dev == now.st_dev && opened.st_ino == now.st_ino)
		rmdir(dir);
}

int bench_run(struct bench *b)
{
	struct shared sh = { .rootfd = -1 };
	enum phase ph;
	int r, created = 0;

	pthread_mutex_init(&sh.lock, NULL);
	pthread_cond_init(&sh.cond, NULL);
	b->started_ns = kv_now_ns();
	b->files = (b->o.size_bytes + b->o.block_bytes - 1) / b->o.block_bytes;
	if (!b->files)
		b->files = 1;
	if (b->s3) {
		if ((r = open_bucket(b, &sh)) < 0)
			goto out;
		r = make_model_dir(b, -1);
		if (r < 0) {
			snprintf(b->err, sizeof(b->err), "cannot name a model dir: %s",
				 kv_strerror(r));
			goto out;
		}
		goto laid_out;
	}
	/* --dir is made if missing (its parent must exist), as `mkdir DIR`
	 * and kvget -o DIR do; a dir made here is opened without following
	 * a link, so nothing swapped in after the mkdir is written to. */
	created = mkdir(b->o.dir, 0777) == 0;
	if (!created && errno != EEXIST) {
		r = -errno;
		snprintf(b->err, sizeof(b->err), "cannot make the scratch dir '%s': %s", b->o.dir,
			 strerror(errno));
		goto out;
	}
	sh.rootfd = open(b->o.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (created ? O_NOFOLLOW : 0));
	if (sh.rootfd < 0) {
		r = -errno;
		snprintf(b->err, sizeof(b->err), "cannot open '%s': %s", b->o.dir, strerror(errno));
		goto out;
	}
	if ((r = probe_direct(b, sh.rootfd)) < 0)
		goto out;
	b->direct = r;
	/* Rank 0 writes config.json; the others find it there. */
	if (b->rank == 0)
		r = make_model_dir(b, sh.rootfd);
	ranks_barrier();
	if (b->rank != 0)
		r = make_model_dir(b, sh.rootfd);
	if (r < 0) {
		snprintf(b->err, sizeof(b->err), "cannot create a model dir in '%s': %s",
			 b->o.dir, kv_strerror(r));
		goto out;
	}
laid_out:
	r = make_paths(b, &sh, (unsigned)b->rank, &sh.paths, &sh.missing);
	sh.rpaths = sh.paths;
	sh.rmissing = sh.missing;
	if (r >= 0 && b->o.cross_read && b->nranks > 1)
		r = make_paths(b, &sh, ((unsigned)b->rank + 1) % b->nranks, &sh.rpaths,
			       &sh.rmissing);
	if (r < 0) {
		snprintf(b->err, sizeof(b->err), "cannot lay out files in '%s': %s",
			 b->o.dir, kv_strerror(r));
		goto out;
	}
	for (ph = 0; ph < PH_COUNT; ph++) {
		if (!(b->o.phases & (1u << ph)))
			continue;
		if (ph != PH_WRITE && ph < PH_CREATE &&
		    (r = b->s3 ? populate_s3(b, &sh) : populate(b, &sh)) < 0)
			goto out;
		if ((r = run_phase(b, &sh, ph)) < 0)
			goto out;
	}
	/* No rank removes files another may still read. */
	ranks_barrier();
	/* Where it ran, while its dir is there to be looked at. */
	if (b->rank == 0) {
		b->env = env_json(b->o.dir);
		env_fs_summary(b->o.dir, b->fs, sizeof(b->fs));
	}
	r = 0;
out:
	if (sh.rootfd >= 0) {
		if (!b->o.keep) {
			cleanup(b, &sh);
			/* Then the dir, if this rank made it, once every
			 * rank's files are gone (a failed run waits for none). */
			if (r == 0)
				ranks_barrier();
			if (created)
				remove_scratch(b->o.dir, sh.rootfd);
		}
		close(sh.rootfd);
	}
	if (sh.tier) {
		if (!b->o.keep)
			cleanup_s3(b, &sh);
		kv_tier_close(sh.tier);
	}
	free(sh.written);
	if (sh.rpaths != sh.paths) {
		free_paths(b, sh.rpaths);
		free_paths(b, sh.rmissing);
	}
	free_paths(b, sh.paths);
	free_paths(b, sh.missing);
	pthread_mutex_destroy(&sh.lock);
	pthread_cond_destroy(&sh.cond);
	return r;
}

void bench_free(struct bench *b)
{
	json_decref(b->env);
	for (int ph = 0; ph < PH_COUNT; ph++) {
		for (int l = 0; l < LAT_COUNT; l++)
			kv_hist_free(b->res[ph].lat[l]);
		for (unsigned k = 0; b->res[ph].per_rank && k < b->nranks; k++)
			for (int l = 0; l < LAT_COUNT; l++)
				kv_hist_free(b->res[ph].per_rank[k].lat[l]);
		free(b->res[ph].per_rank);
	}
	free(b->samples);
}
