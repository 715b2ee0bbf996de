/*
 * A bounded-memory, parallel traversal of a cache root.
 *
 * The caller's thread reads the root and each rank dir and hands the top
 * buckets (<hhh>) to a small bounded queue; worker threads walk a
 * bucket's <hh>_g<group> dirs and their files.  Everything is opened
 * relative to an open directory fd, with symlinks and mount crossings
 * refused by the kernel (openat2 RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV),
 * so a tree that changes under us cannot lead the walk outside the root.
 * With a shard filter a walk reads the root and the rank dirs, and
 * descends only into the buckets of its shard.
 * Memory is a few getdents buffers per thread plus the queue, whatever
 * the size of the tree.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <kv/lastuse.h>
#include <kv/walk.h>
#include "store/s3.h"
#include "store/walk_s3.h"
#include "util/error.h"
#include "beneath.h"

#ifndef STATX_ATTR_MOUNT_ROOT
#define STATX_ATTR_MOUNT_ROOT	0x00002000
#endif

#define WALK_MAX_THREADS	64
#define LOCAL_MAX_THREADS	8
#define WALK_QUEUE_LEN		64
#define WALK_DIRBUF_BYTES	(64 * 1024)
#define WALK_PATH_MAX		(8 * (KV_NAME_MAX + 1))
#define WALK_STATX_MASK		(STATX_TYPE | STATX_MODE | STATX_NLINK | \
				 STATX_INO | STATX_SIZE | STATX_BLOCKS | \
				 STATX_ATIME | STATX_MTIME)
/* A stat'ed entry that lives on another filesystem (a mount over it). */
#define WALK_DT_OTHER_FS	0x100

/* Levels of getdents buffers: root, rank or model dir, <hhh>, <hh>_g<g>,
 * then the caller's for an llmd-v0 tree: the dirs of a model name,
 * block_size_*, tp_*, rank_* (its <dtype> dir takes LVL_RANK). */
enum {
	LVL_ROOT, LVL_RANK, LVL_TOP, LVL_LEAF,
	LVL_V0_MODEL,
	LVL_V0_PARAMS = LVL_V0_MODEL + KV_LAYOUT_V0_MODEL_DEPTH,
	LVL_V0_PARALLEL, LVL_V0_RANK, LVL_COUNT
};

/* A rank dir (llmd-v0: a <dtype> dir) stays open while any of its
 * buckets is queued or walked; name is its path from the root. */
struct rankdir {
	int fd;
	atomic_int refs;
	struct kv_block_ref ref;
	char name[WALK_PATH_MAX];
};

struct item {
	struct rankdir *rd;
	char name[4];		/* <hhh> */
};

struct walk {
	int rootfd;
	dev_t rootdev;
	int short_read_ends;	/* a short getdents is the end (reads_whole) */
	struct kv_uses *uses;	/* recorded uses, NULL when none */
	unsigned flags;
	const char *model;
	int rank;
	unsigned shard, shards;	/* shards > 1: a shard filter */
	kv_walk_fn fn;
	void *arg;

	pthread_mutex_t cb_lock;
	atomic_int stop;	/* the callback's non-zero return */

	pthread_mutex_t q_lock;
	pthread_cond_t q_ready;
	struct item q[WALK_QUEUE_LEN];
	unsigned q_head, q_count;
	int q_closed;
	int threaded;
};

/* Per-thread state: a getdents buffer per level it may hold open. */
struct worker {
	struct walk *w;
	char *buf[LVL_COUNT];
	char path[WALK_PATH_MAX];
};

struct dirit {
	int fd;
	char *buf;
	long pos, len;
	int short_read_ends, ended;
};

/* The largest dirent64 getdents may have to leave for the next call. */
#define DIRENT_MAX_BYTES	((offsetof(struct dirent64, d_name) + 256 + 7) & ~(size_t)7)

static void dirit_init(struct dirit *it, const struct worker *wk, int fd, char *buf)
{
	it->fd = fd;
	it->buf = buf;
	it->pos = it->len = 0;
	it->short_read_ends = wk->w->short_read_ends;
	it->ended = 0;
}

/* The next entry other than "." and "..": 1, 0 at the end, or -errno. */
static int dirit_next(struct dirit *it, struct dirent64 **out)
{
	for (;;) {
		struct dirent64 *d;

		if (it->pos >= it->len) {
			ssize_t n;

			if (it->ended)
				return 0;
			n = getdents64(it->fd, it->buf, WALK_DIRBUF_BYTES);
			if (n < 0)
				return -errno;
			if (n == 0)
				return 0;
			it->len = n;
			it->pos = 0;
			/* Most leaf dirs hold a block or two: this saves
			 * the second getdents, a quarter of their calls. */
			it->ended = it->short_read_ends &&
				    (size_t)n <= WALK_DIRBUF_BYTES - DIRENT_MAX_BYTES;
		}
		d = (struct dirent64 *)(it->buf + it->pos);
		it->pos += d->d_reclen;
		if (d->d_name[0] == '.' && (!d->d_name[1] ||
		    (d->d_name[1] == '.' && !d->d_name[2])))
			continue;
		*out = d;
		return 1;
	}
}

/* Whether a top bucket <hhh> is this walk's to descend into. */
static int bucket_ours(const struct walk *w, const char *name)
{
	return w->shards <= 1 || kv_layout_bucket_shard(name, w->shards) == (int)w->shard;
}

/* Whether a journaled use names a block this walk reaches: the uses of
 * other models, ranks and shards are not held. */
static int use_reached(const char *relpath, void *arg)
{
	const struct walk *w = arg;
	struct kv_block_ref ref;
	char top[4];

	if (kv_layout_block_parse(relpath, &ref) < 0 ||
	    (w->model && !kv_layout_model_matches(w->model, ref.model_dir)) ||
	    (w->rank >= 0 && ref.rank != (unsigned)w->rank))
		return 0;
	memcpy(top, ref.hash, 3);
	top[3] = '\0';
	return bucket_ours(w, top);
}

/* What lies outside the buckets is reported once, by shard 0. */
static int outside_ours(const struct walk *w)
{
	return w->shards <= 1 || w->shard == 0;
}

/* Open a subdirectory without following a symlink or crossing a mount:
 * -ELOOP for a symlink, -EXDEV for a mount point, -ENOTDIR if it is no
 * longer a directory. */
static int open_subdir(const struct walk *w, int dirfd, const char *name)
{
	return kvi_open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0, w->rootdev);
}

static void fill_statx(struct kv_walk_entry *e, const struct statx *stx)
{
	e->size_bytes = stx->stx_size;
	e->alloc_bytes = stx->stx_blocks * 512;
	e->atime_ns = stx->stx_atime.tv_sec * 1000000000LL + stx->stx_atime.tv_nsec;
	e->mtime_ns = stx->stx_mtime.tv_sec * 1000000000LL + stx->stx_mtime.tv_nsec;
	e->last_use_ns = e->atime_ns;
	e->ino = stx->stx_ino;
	e->nlink = stx->stx_nlink;
	e->mode = stx->stx_mode;
}

/*
 * Stat an entry, never following a symlink, and return its DT_* type
 * (WALK_DT_OTHER_FS for something mounted over it) or -errno.  With
 * KV_WALK_NO_STAT only an unknown d_type costs a stat.
 */
static int stat_entry(const struct walk *w, int dirfd, const struct dirent64 *d,
		      struct kv_walk_entry *e)
{
	struct statx stx;
	int names_only = w->flags & KV_WALK_NO_STAT;

	if (names_only && d->d_type != DT_UNKNOWN)
		return d->d_type;
	if (statx(dirfd, d->d_name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
		  names_only ? STATX_TYPE : WALK_STATX_MASK, &stx) < 0)
		return -errno;
	if (names_only)
		e->mode = stx.stx_mode & S_IFMT;
	else
		fill_statx(e, &stx);
	if ((stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) ||
	    makedev(stx.stx_dev_major, stx.stx_dev_minor) != w->rootdev)
		return WALK_DT_OTHER_FS;
	return IFTODT(stx.stx_mode);
}

static int emit(struct walk *w, const struct kv_walk_entry *e)
{
	int rc = atomic_load_explicit(&w->stop, memory_order_relaxed);

	if (rc)
		return rc;
	pthread_mutex_lock(&w->cb_lock);
	rc = atomic_load_explicit(&w->stop, memory_order_relaxed);
	if (!rc) {
		rc = w->fn(e, w->arg);
		if (rc)
			atomic_store(&w->stop, rc);
	}
	pthread_mutex_unlock(&w->cb_lock);
	return rc;
}

/* Append name to the path at len ("name" at the root, "/name" below):
 * the new length, or -ENAMETOOLONG. */
static int path_push(struct worker *wk, size_t len, const char *name)
{
	size_t n = strlen(name);

	if (len + 1 + n + 1 > sizeof(wk->path))
		return -ENAMETOOLONG;
	if (len)
		wk->path[len++] = '/';
	memcpy(wk->path + len, name, n + 1);
	return (int)(len + n);
}

/* Report the entry at wk->path (its name at name_off) with the dir part
 * of ref; st carries what a stat already filled in. */
static int emit_at(struct worker *wk, enum kv_walk_kind kind, int dirfd,
		   size_t name_off, const struct kv_block_ref *ref,
		   int has_rank, int err, const struct kv_walk_entry *st)
{
	struct kv_walk_entry e;

	if (st)
		e = *st;
	else
		memset(&e, 0, sizeof(e));
	e.kind = kind;
	e.path = wk->path;
	e.name = wk->path + name_off;
	e.dirfd = dirfd;
	memset(&e.ref, 0, sizeof(e.ref));
	if (ref) {
		memcpy(e.ref.model_dir, ref->model_dir, sizeof(e.ref.model_dir));
		memcpy(e.ref.fingerprint, ref->fingerprint, sizeof(e.ref.fingerprint));
		e.ref.rank = ref->rank;
	}
	e.has_rank = has_rank;
	e.err = err;
	return emit(wk->w, &e);
}

/* A dir that could not be opened: a symlink or mount point raced in is
 * foreign, one that vanished is skipped, anything else is unreadable. */
static int emit_open_failure(struct worker *wk, int dirfd, size_t name_off,
			     const struct kv_block_ref *ref, int has_rank, int err)
{
	if (err == -ENOENT)
		return 0;
	if (err == -ELOOP || err == -EXDEV || err == -ENOTDIR)
		return emit_at(wk, KV_WALK_FOREIGN, dirfd, name_off, ref,
			       has_rank, 0, NULL);
	return emit_at(wk, KV_WALK_ERROR, dirfd, name_off, ref, has_rank, err,
		       NULL);
}

/*
 * Stat the entry at wk->path into e for classification.  Returns its type,
 * or 0 when it is done with: vanished, or reported as an error (*rc gets
 * the callback's answer).
 */
static int classify(struct worker *wk, int dirfd, const struct dirent64 *d,
		    size_t name_off, const struct kv_block_ref *ref,
		    int has_rank, struct kv_walk_entry *e, int *rc)
{
	int type;

	memset(e, 0, sizeof(*e));
	type = stat_entry(wk->w, dirfd, d, e);
	*rc = 0;
	if (type == -ENOENT)
		return 0;
	if (type < 0) {
		*rc = emit_at(wk, KV_WALK_ERROR, dirfd, name_off, ref, has_rank,
			      type, NULL);
		return 0;
	}
	return type;
}

/* Post-order report of a bucket dir, stat'ed through its own fd. */
static int emit_dir(struct worker *wk, int parentfd, int fd, size_t name_off,
		    const struct kv_block_ref *ref)
{
	struct kv_walk_entry e;
	struct statx stx;

	memset(&e, 0, sizeof(e));
	e.mode = S_IFDIR;
	if (!(wk->w->flags & KV_WALK_NO_STAT) &&
	    statx(fd, "", AT_EMPTY_PATH, WALK_STATX_MASK, &stx) == 0)
		fill_statx(&e, &stx);
	return emit_at(wk, KV_WALK_DIR, parentfd, name_off, ref, 1, 0, &e);
}

/* A <hh>_g<group> dir at wk->path (len long, its name at name_off):
 * blocks, temps, and anything else as foreign. */
static int walk_leaf(struct worker *wk, int parentfd, size_t len,
		     size_t name_off, const struct rankdir *rd, int *empty)
{
	struct dirit it;
	struct dirent64 *d;
	int fd, rc = 0, n = 0, entries = 0;

	fd = open_subdir(wk->w, parentfd, wk->path + name_off);
	if (fd < 0)
		return emit_open_failure(wk, parentfd, name_off, &rd->ref, 1, fd);
	dirit_init(&it, wk, fd, wk->buf[LVL_LEAF]);
	while (!rc && (n = dirit_next(&it, &d)) > 0) {
		struct kv_walk_entry e;
		int plen = path_push(wk, len, d->d_name), type;
		size_t off = len + 1;

		if (plen < 0)
			continue;
		entries++;
		type = classify(wk, fd, d, off, &rd->ref, 1, &e, &rc);
		if (type == DT_REG) {
			size_t nl = (size_t)plen - off;

			if (nl > 4 && !memcmp(d->d_name + nl - 4, KV_BLOCK_SUFFIX, 4) &&
			    kv_layout_block_parse(wk->path, &e.ref) == 0) {
				e.kind = KV_WALK_BLOCK;
				e.last_use_ns = kv_last_use_ns(wk->w->uses, wk->path,
							       e.atime_ns);
				e.path = wk->path;
				e.name = wk->path + off;
				e.dirfd = fd;
				e.has_rank = 1;
				rc = emit(wk->w, &e);
			} else {
				rc = emit_at(wk, kv_layout_is_temp(d->d_name) ?
					     KV_WALK_TEMP : KV_WALK_FOREIGN,
					     fd, off, &rd->ref, 1, 0, &e);
			}
		} else if (type) {
			rc = emit_at(wk, KV_WALK_FOREIGN, fd, off, &rd->ref, 1, 0, &e);
		}
		wk->path[len] = '\0';
	}
	if (!rc && n < 0)
		rc = emit_at(wk, KV_WALK_ERROR, parentfd, name_off, &rd->ref, 1,
			     n, NULL);
	*empty = !rc && !n && !entries;
	if (*empty && (wk->w->flags & KV_WALK_DIRS))
		rc = emit_dir(wk, parentfd, fd, name_off, &rd->ref);
	close(fd);
	return rc;
}

/* One queued <hhh> bucket of a rank dir. */
static int walk_bucket(struct worker *wk, const struct item *item)
{
	const struct rankdir *rd = item->rd;
	struct dirit it;
	struct dirent64 *d;
	int fd, rc = 0, n = 0, len, empty, all_empty = 1;
	size_t name_off = strlen(rd->name) + 1;

	path_push(wk, 0, rd->name);
	len = path_push(wk, name_off - 1, item->name);
	fd = open_subdir(wk->w, rd->fd, item->name);
	if (fd < 0)
		return emit_open_failure(wk, rd->fd, name_off, &rd->ref, 1, fd);
	dirit_init(&it, wk, fd, wk->buf[LVL_TOP]);
	while (!rc && (n = dirit_next(&it, &d)) > 0) {
		struct kv_walk_entry e;
		int plen = path_push(wk, (size_t)len, d->d_name), type = d->d_type;

		if (plen < 0)
			continue;
		int leaf = kv_layout_group_bucket_parse(d->d_name, rd->ref.layout,
							NULL) == 0;

		if (type != DT_DIR || !leaf)
			type = classify(wk, fd, d, (size_t)len + 1, &rd->ref, 1,
					&e, &rc);
		empty = 0;
		if (type == DT_DIR && leaf)
			rc = walk_leaf(wk, fd, (size_t)plen, (size_t)len + 1, rd, &empty);
		else if (type)
			rc = emit_at(wk, KV_WALK_FOREIGN, fd, (size_t)len + 1,
				     &rd->ref, 1, 0, &e);
		all_empty &= empty;
		wk->path[len] = '\0';
	}
	if (!rc && n < 0)
		rc = emit_at(wk, KV_WALK_ERROR, rd->fd, name_off, &rd->ref, 1,
			     n, NULL);
	/* Empty, or holding only leaf dirs that were empty (which the
	 * caller may just have removed). */
	if (!rc && !n && all_empty && (wk->w->flags & KV_WALK_DIRS))
		rc = emit_dir(wk, rd->fd, fd, name_off, &rd->ref);
	close(fd);
	return rc;
}

static void rankdir_put(struct rankdir *rd)
{
	if (atomic_fetch_sub(&rd->refs, 1) == 1) {
		close(rd->fd);
		free(rd);
	}
}

static void run_item(struct worker *wk, const struct item *item)
{
	if (!atomic_load_explicit(&wk->w->stop, memory_order_relaxed))
		walk_bucket(wk, item);
	rankdir_put(item->rd);
}

/* Take the oldest queued item; the queue lock is held. */
static struct item queue_pop_locked(struct walk *w)
{
	struct item item = w->q[w->q_head];

	w->q_head = (w->q_head + 1) % WALK_QUEUE_LEN;
	w->q_count--;
	return item;
}

static void *worker_main(void *p)
{
	struct worker *wk = p;
	struct walk *w = wk->w;

	for (;;) {
		struct item item;

		pthread_mutex_lock(&w->q_lock);
		while (!w->q_count && !w->q_closed)
			pthread_cond_wait(&w->q_ready, &w->q_lock);
		if (!w->q_count) {
			pthread_mutex_unlock(&w->q_lock);
			return NULL;
		}
		item = queue_pop_locked(w);
		pthread_mutex_unlock(&w->q_lock);
		run_item(wk, &item);
	}
}

/* Queue a bucket.  When the queue is full the producer walks the oldest
 * one itself, which is what bounds memory without idling a core. */
static void queue_push(struct worker *self, struct rankdir *rd, const char *name)
{
	struct walk *w = self->w;
	struct item item = { .rd = rd };

	memcpy(item.name, name, sizeof(item.name));
	atomic_fetch_add(&rd->refs, 1);
	if (!w->threaded) {
		run_item(self, &item);
		return;
	}
	pthread_mutex_lock(&w->q_lock);
	while (w->q_count == WALK_QUEUE_LEN) {
		struct item mine = queue_pop_locked(w);

		pthread_mutex_unlock(&w->q_lock);
		run_item(self, &mine);
		pthread_mutex_lock(&w->q_lock);
	}
	w->q[(w->q_head + w->q_count) % WALK_QUEUE_LEN] = item;
	w->q_count++;
	pthread_cond_signal(&w->q_ready);
	pthread_mutex_unlock(&w->q_lock);
}

/* No more items: wake the workers and help them drain the queue. */
static void queue_close(struct worker *self)
{
	struct walk *w = self->w;

	pthread_mutex_lock(&w->q_lock);
	w->q_closed = 1;
	pthread_cond_broadcast(&w->q_ready);
	while (w->q_count) {
		struct item mine = queue_pop_locked(w);

		pthread_mutex_unlock(&w->q_lock);
		run_item(self, &mine);
		pthread_mutex_lock(&w->q_lock);
	}
	pthread_mutex_unlock(&w->q_lock);
}

/*
 * A rank dir open at fd (its path from the root in name; parentfd and
 * name_off say where its own name is): queue its <hhh> buckets, report
 * anything else as foreign.  Takes fd.
 */
static int walk_rank_fd(struct worker *wk, int parentfd, int fd, const char *name,
			size_t name_off, const struct kv_block_ref *ref)
{
	struct walk *w = wk->w;
	struct rankdir *rd;
	struct dirit it;
	struct dirent64 *d;
	int rc = 0, n;
	size_t len = strlen(name);

	rd = malloc(sizeof(*rd));
	if (!rd) {
		close(fd);
		path_push(wk, 0, name);
		return emit_at(wk, KV_WALK_ERROR, parentfd, name_off, ref, 1,
			       -ENOMEM, NULL);
	}
	rd->fd = fd;
	atomic_init(&rd->refs, 1);
	rd->ref = *ref;
	memcpy(rd->name, name, len + 1);
	dirit_init(&it, wk, fd, wk->buf[LVL_RANK]);
	while (!rc && (n = dirit_next(&it, &d)) > 0) {
		struct kv_walk_entry e;
		int type = d->d_type;
		int bucket = kv_layout_hash_bucket_parse(d->d_name) == 0;

		rc = atomic_load_explicit(&w->stop, memory_order_relaxed);
		if (rc)
			break;
		if (bucket ? !bucket_ours(w, d->d_name) : !outside_ours(w))
			continue;
		/* A bucket this thread walked itself reused the path. */
		path_push(wk, 0, name);
		if (path_push(wk, len, d->d_name) < 0)
			continue;
		if (type != DT_DIR || !bucket)
			type = classify(wk, fd, d, len + 1, ref, 1, &e, &rc);
		if (type == DT_DIR && bucket)
			queue_push(wk, rd, d->d_name);
		else if (type)
			rc = emit_at(wk, KV_WALK_FOREIGN, fd, len + 1, ref, 1, 0, &e);
	}
	if (!rc && n < 0) {
		path_push(wk, 0, name);
		rc = emit_at(wk, KV_WALK_ERROR, parentfd, name_off, ref, 1, n, NULL);
	}
	rankdir_put(rd);
	return rc;
}

static int walk_rank(struct worker *wk, const char *name,
		     const struct kv_block_ref *ref)
{
	int fd = open_subdir(wk->w, wk->w->rootfd, name);

	if (fd < 0)
		return emit_open_failure(wk, wk->w->rootfd, 0, ref, 1, fd);
	return walk_rank_fd(wk, wk->w->rootfd, fd, name, 0, ref);
}

/* A model dir: its config.json, temps of a config being written, and
 * anything else as foreign; nothing below it is descended. */
static int walk_model(struct worker *wk, const char *name,
		      const struct kv_block_ref *ref)
{
	struct dirit it;
	struct dirent64 *d;
	int fd, rc = 0, n;
	size_t len = strlen(name);

	fd = open_subdir(wk->w, wk->w->rootfd, name);
	if (fd < 0)
		return emit_open_failure(wk, wk->w->rootfd, 0, ref, 0, fd);
	dirit_init(&it, wk, fd, wk->buf[LVL_RANK]);
	while (!rc && (n = dirit_next(&it, &d)) > 0) {
		struct kv_walk_entry e;
		enum kv_walk_kind kind = KV_WALK_FOREIGN;
		int type;

		if (path_push(wk, len, d->d_name) < 0)
			continue;
		type = classify(wk, fd, d, len + 1, ref, 0, &e, &rc);
		if (type == DT_REG && !strcmp(d->d_name, KV_CONFIG_NAME))
			kind = KV_WALK_CONFIG;
		else if (type == DT_REG && kv_layout_is_temp(d->d_name))
			kind = KV_WALK_TEMP;
		if (type)
			rc = emit_at(wk, kind, fd, len + 1, ref, 0, 0, &e);
		wk->path[len] = '\0';
	}
	if (!rc && n < 0)
		rc = emit_at(wk, KV_WALK_ERROR, wk->w->rootfd, 0, ref, 0, n, NULL);
	close(fd);
	return rc;
}

/* ---- llm-d's layout before #585 (llmd-v0), read, never written ---- */

/* Whether the dir name below fd holds a block_size_* dir within the
 * levels of model-name dirs left: the mark of an llmd-v0 tree.  Names
 * only; dot-names (snapshots, lock files) are never searched. */
static int v0_probe(struct worker *wk, int fd, const char *name, unsigned level)
{
	struct dirit it;
	struct dirent64 *d;
	int n, found = 0, sub = open_subdir(wk->w, fd, name);

	if (sub < 0)
		return 0;
	dirit_init(&it, wk, sub, wk->buf[level]);
	while (!found && (n = dirit_next(&it, &d)) > 0) {
		if (d->d_type != DT_DIR && d->d_type != DT_UNKNOWN)
			continue;
		if (kv_layout_v0_params_parse(d->d_name) == 0)
			found = 1;
		else if (level + 1 < LVL_V0_PARAMS && d->d_name[0] != '.')
			found = v0_probe(wk, sub, d->d_name, level + 1);
	}
	close(sub);
	return found;
}

/* Rebuild wk->path as dir/name (the walks below reuse the buffer): its
 * length, or -ENAMETOOLONG. */
static int v0_path(struct worker *wk, const char *dir, const char *name)
{
	return path_push(wk, (size_t)path_push(wk, 0, dir), name);
}

enum v0_level { V0_MODEL, V0_PARAMS, V0_PARALLEL, V0_RANK };

/*
 * One dir of an llmd-v0 tree, open at fd with path dir: descend into what
 * the next level may hold, report anything else as foreign.  ref carries
 * what the levels above found; level_buf is this dir's getdents buffer.
 */
static int v0_dir(struct worker *wk, int fd, const char *dir, enum v0_level level,
		  unsigned model_depth, struct kv_block_ref *ref)
{
	static const unsigned bufs[] = {
		[V0_PARAMS] = LVL_V0_PARAMS, [V0_PARALLEL] = LVL_V0_PARALLEL,
		[V0_RANK] = LVL_V0_RANK,
	};
	struct walk *w = wk->w;
	size_t dlen = strlen(dir);
	struct dirit it;
	struct dirent64 *d;
	int rc = 0, n;

	dirit_init(&it, wk, fd, wk->buf[level == V0_MODEL ? LVL_V0_MODEL + model_depth :
				     bufs[level]]);
	while (!rc && (n = dirit_next(&it, &d)) > 0) {
		enum v0_level next = level;
		struct kv_walk_entry e;
		char path[WALK_PATH_MAX];
		int plen = v0_path(wk, dir, d->d_name), type = d->d_type, want = 0, sub;
		unsigned rank;

		if (plen < 0)
			continue;
		switch (level) {
		case V0_MODEL:
			if (kv_layout_v0_params_parse(d->d_name) == 0)
				want = 1, next = V0_PARAMS;
			else if (model_depth + 1 < KV_LAYOUT_V0_MODEL_DEPTH &&
				 d->d_name[0] != '.' &&
				 v0_probe(wk, fd, d->d_name, LVL_V0_MODEL + model_depth + 1))
				want = 1;
			break;
		case V0_PARAMS:
			/* The dir above rank_<R> is the model dir of llmd-v0. */
			if (kv_layout_v0_parse(wk->path, &(struct kv_layout_v0){ 0 }) == 0 &&
			    (size_t)plen <= KV_NAME_MAX) {
				want = kv_layout_model_matches(w->model, wk->path);
				next = V0_PARALLEL;
				if (!want)
					continue;
			}
			break;
		case V0_PARALLEL:
			if (kv_layout_v0_rank_parse(d->d_name, &rank) == 0) {
				if (w->rank >= 0 && rank != (unsigned)w->rank)
					continue;
				want = 1, next = V0_RANK;
				ref->rank = rank;
			}
			break;
		case V0_RANK:
			want = strlen(d->d_name) <= KV_DTYPE_DIR_MAX;
			break;
		}
		if (!want && !outside_ours(w))
			continue;
		if (type != DT_DIR || !want)
			type = classify(wk, fd, d, dlen + 1, NULL, 0, &e, &rc);
		if (type != DT_DIR || !want) {
			if (type && !(w->model || w->rank >= 0) && outside_ours(w))
				rc = emit_at(wk, KV_WALK_FOREIGN, fd, dlen + 1, NULL, 0, 0, &e);
			continue;
		}
		memcpy(path, wk->path, (size_t)plen + 1);
		sub = open_subdir(w, fd, d->d_name);
		if (sub < 0) {
			rc = emit_open_failure(wk, fd, dlen + 1, NULL, 0, sub);
			continue;
		}
		if (level == V0_PARAMS)
			memcpy(ref->model_dir, path, (size_t)plen + 1);
		if (level == V0_RANK) {
			memcpy(ref->dtype, d->d_name, strlen(d->d_name) + 1);
			rc = walk_rank_fd(wk, fd, sub, path, dlen + 1, ref);
			continue;
		}
		rc = v0_dir(wk, sub, path, next,
			    next == V0_MODEL ? model_depth + 1 : model_depth, ref);
		close(sub);
	}
	if (!rc && n < 0) {
		path_push(wk, 0, dir);
		rc = emit_at(wk, KV_WALK_ERROR, fd, 0, NULL, 0, n, NULL);
	}
	return rc;
}

/* A root entry that is no v1 name: the top of an llmd-v0 tree, or foreign. */
static int walk_v0(struct worker *wk, const char *name)
{
	struct kv_block_ref ref = { .layout = KV_LAYOUT_LLMD_V0 };
	int fd, rc;

	fd = open_subdir(wk->w, wk->w->rootfd, name);
	if (fd < 0)
		return emit_open_failure(wk, wk->w->rootfd, 0, NULL, 0, fd);
	rc = v0_dir(wk, fd, name, V0_MODEL, 0, &ref);
	close(fd);
	return rc;
}

enum root_kind { ROOT_OTHER, ROOT_RANK, ROOT_MODEL };

static int walk_root(struct worker *wk)
{
	struct walk *w = wk->w;
	struct dirit it;
	struct dirent64 *d;
	int rc = 0, n, filtered = w->model || w->rank >= 0;

	dirit_init(&it, wk, w->rootfd, wk->buf[LVL_ROOT]);
	while (!rc && (n = dirit_next(&it, &d)) > 0) {
		enum root_kind kind = ROOT_OTHER;
		struct kv_block_ref ref;
		struct kv_walk_entry e;
		int type = d->d_type;

		memset(&ref, 0, sizeof(ref));
		if (kv_layout_rank_dir_parse(d->d_name, &ref) == 0)
			kind = ROOT_RANK;
		else if (kv_layout_model_dir_parse(d->d_name, &ref) == 0)
			kind = ROOT_MODEL;
		/* Filters skip whole dirs, and everything outside any model. */
		if (filtered && kind != ROOT_OTHER &&
		    (!kv_layout_model_matches(w->model, ref.model_dir) ||
		     (kind == ROOT_RANK && ref.rank != (unsigned)w->rank && w->rank >= 0)))
			continue;
		if (kind == ROOT_MODEL && !outside_ours(w))
			continue;
		if (path_push(wk, 0, d->d_name) < 0)
			continue;
		if (type != DT_DIR || kind == ROOT_OTHER)
			type = classify(wk, w->rootfd, d, 0, NULL, 0, &e, &rc);
		if (type == DT_DIR && kind == ROOT_RANK)
			rc = walk_rank(wk, d->d_name, &ref);
		else if (type == DT_DIR && kind == ROOT_MODEL)
			rc = walk_model(wk, d->d_name, &ref);
		else if (type == DT_DIR && d->d_name[0] != '.' &&
			 v0_probe(wk, w->rootfd, d->d_name, LVL_V0_MODEL))
			rc = walk_v0(wk, d->d_name);
		else if (type && !filtered && outside_ours(w))
			rc = emit_at(wk, KV_WALK_FOREIGN, w->rootfd, 0, NULL, 0, 0, &e);
	}
	if (!rc && n < 0) {
		path_push(wk, 0, ".");
		rc = emit_at(wk, KV_WALK_ERROR, w->rootfd, 0, NULL, 0, n, NULL);
	}
	return rc;
}

/* Buffers for levels first..last-1: the caller reads every level, the
 * workers only buckets. */
static int worker_init(struct worker *wk, struct walk *w, int first, int last)
{
	memset(wk, 0, sizeof(*wk));
	wk->w = w;
	for (int i = first; i < last; i++)
		if (!(wk->buf[i] = malloc(WALK_DIRBUF_BYTES)))
			return -ENOMEM;
	return 0;
}

static void worker_fini(struct worker *wk)
{
	for (int i = 0; i < LVL_COUNT; i++)
		free(wk->buf[i]);
}

/* Filesystems where every metadata operation is a network round trip
 * (statfs f_type); FUSE covers GlusterFS, CephFS's and S3 clients. */
static int remote_fs(long type)
{
	switch ((unsigned long)type) {
	case 0x6969:		/* NFS */
	case 0x65735546:	/* FUSE */
	case 0x00c36400:	/* CephFS */
	case 0x0bd00bd0:	/* Lustre */
	case 0x47504653:	/* GPFS / IBM Storage Scale */
	case 0xfe534d42:	/* SMB2 */
	case 0xff534d42:	/* CIFS */
	case 0x564c:		/* NCP */
	case 0x5346414f:	/* AFS */
	case 0x6b414653:	/* kAFS */
	case 0x013111a8:	/* IBRIX */
	case 0x19830326:	/* BeeGFS */
	case 0x2fc12fc1:	/* ZFS (may be local; harmless) */
		return 1;
	default:
		return 0;
	}
}

/* Local filesystems whose readdir fills the caller's buffer until the
 * directory ends (ext4's linear, htree and inline dirs, tmpfs's offset
 * map, XFS, Btrfs): a read that left room for one more entry was the
 * last.  Network and FUSE filesystems may return less before the end. */
static int reads_whole(long type)
{
	switch ((unsigned long)type) {
	case 0xef53:		/* ext2, ext3, ext4 */
	case 0x01021994:	/* tmpfs */
	case 0x58465342:	/* XFS */
	case 0x9123683e:	/* Btrfs */
		return 1;
	default:
		return 0;
	}
}

unsigned kv_walk_default_threads(int fd)
{
	struct statfs sf;
	long cpus;

	if (fd >= 0 && fstatfs(fd, &sf) == 0 && remote_fs((long)sf.f_type))
		return KV_WALK_REMOTE_THREADS;
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus < 1)
		return 1;
	return cpus > LOCAL_MAX_THREADS ? LOCAL_MAX_THREADS : (unsigned)cpus;
}

static unsigned thread_count(const struct kv_walk_opts *opts, int rootfd)
{
	if (opts && opts->threads)
		return opts->threads > WALK_MAX_THREADS ? WALK_MAX_THREADS : opts->threads;
	return kv_walk_default_threads(rootfd);
}

int kv_walk(const char *root, const struct kv_walk_opts *opts,
	    kv_walk_fn fn, void *arg)
{
	struct worker self, workers[WALK_MAX_THREADS];
	pthread_t tids[WALK_MAX_THREADS];
	unsigned nthreads, started = 0;
	struct walk *w;
	struct statfs sf;
	struct stat st;
	int rc;

	if (!root || !fn || (opts && (opts->shard_count > KV_LAYOUT_TOP_BUCKETS ||
				      (opts->shard_count > 1 &&
				       opts->shard_index >= opts->shard_count))))
		return -EINVAL;
	kvi_error_clear();
	if (kvi_s3_is_url(root))
		return kvi_walk_s3(root, opts, fn, arg);
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	/* The root itself may be a symlink an operator chose; nothing below
	 * it is followed. */
	w->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (w->rootfd < 0 || fstat(w->rootfd, &st) < 0) {
		rc = -errno;
		if (w->rootfd >= 0)
			close(w->rootfd);
		free(w);
		return rc;
	}
	w->rootdev = st.st_dev;
	/* The walk does not cross mounts, so the root's type is every dir's. */
	w->short_read_ends = fstatfs(w->rootfd, &sf) == 0 && reads_whole((long)sf.f_type);
	w->flags = opts ? opts->flags : 0;
	w->rank = opts ? opts->rank : -1;
	w->model = opts ? opts->model : NULL;
	w->shard = opts ? opts->shard_index : 0;
	w->shards = opts ? opts->shard_count : 0;
	/* Read-only from here on, so the walk's threads share it unlocked.
	 * A journal that cannot be read fails the walk: last uses without
	 * it would be wrong. */
	if (!(w->flags & KV_WALK_NO_STAT) &&
	    (rc = kv_uses_load(w->rootfd, w->model || w->rank >= 0 || w->shards > 1 ?
				      use_reached : NULL, w, &w->uses)) < 0) {
		close(w->rootfd);
		free(w);
		return rc;
	}
	nthreads = thread_count(opts, w->rootfd);
	w->fn = fn;
	w->arg = arg;
	pthread_mutex_init(&w->cb_lock, NULL);
	pthread_mutex_init(&w->q_lock, NULL);
	pthread_cond_init(&w->q_ready, NULL);

	rc = worker_init(&self, w, LVL_ROOT, LVL_COUNT);
	while (!rc && started + 1 < nthreads) {
		struct worker *wk = &workers[started];

		if (worker_init(wk, w, LVL_TOP, LVL_LEAF + 1) < 0 ||
		    pthread_create(&tids[started], NULL, worker_main, wk)) {
			worker_fini(wk);
			break;
		}
		started++;
	}
	w->threaded = started > 0;
	if (!rc)
		rc = walk_root(&self);
	queue_close(&self);
	for (unsigned i = 0; i < started; i++) {
		pthread_join(tids[i], NULL);
		worker_fini(&workers[i]);
	}
	worker_fini(&self);
	if (!rc)
		rc = atomic_load(&w->stop);
	close(w->rootfd);
	kv_uses_free(w->uses);
	pthread_cond_destroy(&w->q_ready);
	pthread_mutex_destroy(&w->q_lock);
	pthread_mutex_destroy(&w->cb_lock);
	free(w);
	return rc;
}
