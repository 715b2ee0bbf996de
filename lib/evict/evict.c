/*
 * LRU eviction with bounded memory.  A round scans (one walk) into an
 * atime histogram of the candidates and a heap of the oldest ones with
 * their paths, capped in bytes.  When the heap covers what must be freed,
 * its files are deleted oldest first and the round is over.  Otherwise
 * the histogram gives the boundary bucket where the bytes to free run
 * out, linear histograms narrow it while it holds more files than the
 * stash, and a second walk deletes every candidate older than the
 * boundary, then the boundary's oldest from a small heap until the target
 * is met.  Per-model quotas are rounds of their own over that model's
 * dirs, before the global round.
 *
 * Sharded, each round scans only the shard's buckets into a histogram
 * keyed to the shards' shared reference time, swaps it with the other
 * shards' through the state dir (round.c), and frees the shard's part of
 * the merged LRU order: all of its candidates older than the global
 * boundary bucket and its share of that bucket, oldest first.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <kv/integrity.h>
#include <kv/io.h>
#include <kv/layout.h>
#include <kv/units.h>
#include <kv/walk.h>
#include <kv/evict.h>
#include "evict/bucket.h"
#include "evict/round.h"
#include "store/s3.h"
#include "store/beneath.h"
#include "util/error.h"
#include "util/loglin.h"

/* First-level histogram: log-linear in age, 1/512 relative width. */
#define AGE_SUB_BITS	9
#define LOG_BUCKETS	KVI_LOGLIN_BUCKETS(AGE_SUB_BITS)
#define REFINE_BUCKETS	65536u
/* Bytes the scan may spend keeping victims with their paths, and how
 * many it may keep (an array of at most 8 MiB). */
#define SCAN_HEAP_BYTES	(32u << 20)
#define SCAN_HEAP_MAX	(SCAN_HEAP_BYTES / 128)
/* A block path's dirs: llmd-v0's model name, parameters, rank, dtype and
 * buckets are the most. */
#define KV_BUCKET_DIR_MAX	((7 + KV_LAYOUT_V0_MODEL_DEPTH) * (KV_NAME_MAX + 1))
/* What malloc adds to each path kept, for the count above. */
#define MALLOC_OVERHEAD	16u
/* Boundary files the second walk keeps for exact order. */
#define STASH_MAX	8192u
/* How often the fs-use target is re-read while deleting. */
#define STATVFS_EVERY	256u
#define NS_PER_S	1000000000ll

/* Shards swap the first-level histogram as it is. */
_Static_assert(LOG_BUCKETS == KVI_SHARD_BUCKETS, "shard state holds the scan's histogram");

struct hist {
	int linear;		/* 0: log-linear in age from now */
	int64_t now;		/* log mode */
	int64_t lo;		/* linear mode: first atime */
	uint64_t width;		/* linear mode: atime ns per bucket */
	unsigned n;
	uint64_t *count, *bytes; /* index ascending in atime: oldest first */
};

struct stash_item {
	int64_t atime_ns;
	uint64_t ino;
	uint64_t alloc_bytes;
	char *path;
};

/* A max-heap on (atime, ino): the youngest is dropped first, so what it
 * holds is always the oldest of what it was offered. */
struct heap {
	struct stash_item *v;
	unsigned n, cap, max_n;
	size_t mem, max_mem;	/* array and paths */
	uint64_t bytes;		/* allocated bytes of the files held */
	uint64_t prune_need;	/* drop the youngest while the rest covers this */
	int dropped;		/* something offered is not held */
};

struct problem {
	unsigned stage;		/* sharded: quotas 0.., then the global one */
	const char *model;	/* walk filter, NULL: the whole root */
	int global;		/* housekeeping, fs use and byte budget */
	uint64_t max_bytes, low_bytes;
	uint64_t cache_bytes;	/* blocks, configs and temps seen */
	uint64_t cand_bytes;	/* non-hot blocks */
	uint64_t need;
	int delete_all;
	int64_t lo, hi;		/* boundary atimes; older than lo all go */
	int ties;		/* lo == hi: any order is LRU order */
	uint64_t boundary_count, boundary_need, boundary_freed;
	uint64_t freed;
	int stop;		/* fs target met early (external frees) */
	unsigned since_statvfs;
};

struct ctx {
	const struct kv_evict_opts *o;
	struct kv_evict_report *r;
	const char *root;
	int rootfd;
	dev_t dev;
	int64_t now;
	int first_unlink_done;
	struct hist h;
	struct problem *p;
	struct heap heap;
	struct kvi_round *round;	/* sharded */
	struct kvi_bucket_del *bucket;	/* an s3:// root: its deletions */
	uint64_t walked;		/* entries the walks saw, for progress */
};

/* The progress callback keeps its own clock; every 64 entries is often
 * enough on a filesystem at a few milliseconds an operation. */
static void tick(struct ctx *c)
{
	if (c->o->progress && !(++c->walked & 63))
		c->o->progress(c->walked, c->r->files_deleted, c->o->arg);
}

/* Within the hot window: used (kv/lastuse.h) or written that recently. */
static int is_hot(const struct kv_evict_opts *o, int64_t now, int64_t last_use, int64_t mtime)
{
	int64_t edge;

	if (o->hot_ns == 0)
		return 0;
	edge = now - (int64_t)o->hot_ns;
	return last_use > edge || mtime > edge;
}

static int64_t ts_ns(struct timespec ts)
{
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int kv_evict_fs_use(const char *path, double *use_pct)
{
	struct statvfs sv;
	uint64_t used, avail;

	if (statvfs(path, &sv) < 0)
		return -errno;
	used = (uint64_t)(sv.f_blocks - sv.f_bfree);
	avail = sv.f_bavail;
	*use_pct = used + avail ? 100.0 * (double)used / (double)(used + avail) : 0.0;
	return 0;
}

/* Bytes used and used + available, as df(1) counts them. */
static int fs_bytes(int fd, uint64_t *used, uint64_t *total)
{
	struct statvfs sv;

	*used = *total = 0;
	/* A bucket has no filesystem to fill. */
	if (fd < 0)
		return 0;
	if (fstatvfs(fd, &sv) < 0)
		return -errno;
	*used = (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
	*total = *used + (uint64_t)sv.f_bavail * sv.f_frsize;
	return 0;
}

static double pct(uint64_t used, uint64_t total)
{
	return total ? 100.0 * (double)used / (double)total : 0.0;
}

int kv_evict_lock(const char *root, int64_t wait_ns, int *fd)
{
	int rootfd, rc;

	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	rc = kv_lock_beneath(rootfd, KV_EVICT_LOCK_NAME, LOCK_EX, wait_ns, fd);
	close(rootfd);
	return rc;
}

int kv_evict_lock_shard(const char *root, unsigned index, int64_t wait_ns, int fd[2])
{
	int64_t deadline = kv_monotonic_ns() + wait_ns, left;
	char name[32];
	int rootfd, dirfd = -1, shared = -1, rc;

	kvi_error_clear();
	if (index >= KV_EVICT_MAX_SHARDS)
		return -EINVAL;
	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	snprintf(name, sizeof(name), "lock.%u", index);
	rc = kv_lock_beneath(rootfd, KV_EVICT_LOCK_NAME, LOCK_SH, wait_ns, &shared);
	if (rc == 0)
		rc = kvi_round_dir_open(rootfd, &dirfd);
	left = deadline - kv_monotonic_ns();
	if (rc == 0)
		rc = kv_lock_beneath(dirfd, name, LOCK_EX, left > 0 ? left : 0, &fd[1]);
	if (rc == 0)
		fd[0] = shared;
	else if (shared >= 0)
		close(shared);
	if (dirfd >= 0)
		close(dirfd);
	close(rootfd);
	return rc;
}

/* ---- histograms ---- */

/* Index ascending in atime: older (larger age) first. */
static unsigned log_index(uint64_t age)
{
	return LOG_BUCKETS - 1 - kvi_loglin_index(age, AGE_SUB_BITS);
}

static int64_t sat_sub(int64_t now, uint64_t age)
{
	__int128 v = (__int128)now - (__int128)age;

	return v < INT64_MIN ? INT64_MIN : (int64_t)v;
}

static void hist_range(const struct hist *h, unsigned i, int64_t *lo, int64_t *hi)
{
	if (h->linear) {
		uint64_t off = (uint64_t)i * h->width;

		*lo = (int64_t)((uint64_t)h->lo + off);
		*hi = (int64_t)((uint64_t)*lo + h->width - 1);
		return;
	}
	uint64_t alo, ahi;

	alo = kvi_loglin_low(LOG_BUCKETS - 1 - i, AGE_SUB_BITS);
	ahi = kvi_loglin_high(LOG_BUCKETS - 1 - i, AGE_SUB_BITS);
	*lo = i == 0 ? INT64_MIN : sat_sub(h->now, ahi);
	*hi = i == h->n - 1 ? INT64_MAX : sat_sub(h->now, alo);
}

static int hist_init_log(struct hist *h, int64_t now)
{
	memset(h, 0, sizeof(*h));
	h->now = now;
	h->n = LOG_BUCKETS;
	h->count = calloc(h->n, sizeof(*h->count));
	h->bytes = calloc(h->n, sizeof(*h->bytes));
	return h->count && h->bytes ? 0 : -ENOMEM;
}

/* Linear over [lo, hi], at most REFINE_BUCKETS buckets. */
static int hist_init_linear(struct hist *h, int64_t lo, int64_t hi)
{
	uint64_t span = (uint64_t)hi - (uint64_t)lo;

	memset(h, 0, sizeof(*h));
	h->linear = 1;
	h->lo = lo;
	h->width = span / REFINE_BUCKETS + 1;
	h->n = (unsigned)(span / h->width) + 1;
	h->count = calloc(h->n, sizeof(*h->count));
	h->bytes = calloc(h->n, sizeof(*h->bytes));
	return h->count && h->bytes ? 0 : -ENOMEM;
}

static void hist_free(struct hist *h)
{
	free(h->count);
	free(h->bytes);
	h->count = h->bytes = NULL;
}

static void hist_add(struct hist *h, int64_t atime, uint64_t bytes)
{
	unsigned i;

	if (h->linear) {
		i = (unsigned)(((uint64_t)atime - (uint64_t)h->lo) / h->width);
	} else {
		int64_t age = h->now - atime;

		i = log_index(age > 0 ? (uint64_t)age : 0);
	}
	h->count[i]++;
	h->bytes[i] += bytes;
}

/*
 * The bucket where the running sum (oldest first) reaches need: its
 * atime range, how much of need is left for it, and its file count.
 * 0 when found, -1 when the histogram holds less than need.
 */
static int hist_boundary(const struct hist *h, uint64_t need, int64_t *lo, int64_t *hi,
			 uint64_t *left, uint64_t *count)
{
	uint64_t acc = 0;
	unsigned i, last = 0;
	int any = 0;

	for (i = 0; i < h->n; i++) {
		if (!h->count[i])
			continue;
		any = 1;
		last = i;
		if (acc + h->bytes[i] >= need) {
			hist_range(h, i, lo, hi);
			*left = need - acc;
			*count = h->count[i];
			return 0;
		}
		acc += h->bytes[i];
	}
	if (any) {
		hist_range(h, last, lo, hi);
		*count = h->count[last];
		*left = h->bytes[last];
	}
	return -1;
}

/* ---- the bounded heap of boundary files (max-heap on atime, ino) ---- */

static int key_less(const struct stash_item *a, const struct stash_item *b)
{
	if (a->atime_ns != b->atime_ns)
		return a->atime_ns < b->atime_ns;
	return a->ino < b->ino;
}

static void sift_down(struct stash_item *h, unsigned n, unsigned i)
{
	for (;;) {
		unsigned l = 2 * i + 1, r = l + 1, m = i;
		struct stash_item t;

		if (l < n && key_less(&h[m], &h[l]))
			m = l;
		if (r < n && key_less(&h[m], &h[r]))
			m = r;
		if (m == i)
			return;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static void heap_init(struct heap *h, unsigned max_n, size_t max_mem, uint64_t prune_need)
{
	memset(h, 0, sizeof(*h));
	h->max_n = max_n;
	h->max_mem = max_mem;
	h->prune_need = prune_need;
}

static void heap_pop(struct heap *h)
{
	h->dropped = 1;
	h->bytes -= h->v[0].alloc_bytes;
	h->mem -= strlen(h->v[0].path) + 1 + MALLOC_OVERHEAD;
	free(h->v[0].path);
	h->v[0] = h->v[--h->n];
	sift_down(h->v, h->n, 0);
}

static void heap_free(struct heap *h)
{
	unsigned i;

	for (i = 0; i < h->n; i++)
		free(h->v[i].path);
	free(h->v);
	memset(h, 0, sizeof(*h));
}

static int heap_push(struct heap *h, int64_t atime, uint64_t ino, uint64_t alloc,
		     const char *path)
{
	struct stash_item it = { atime, ino, alloc, NULL }, t;
	unsigned i, cap;
	void *v;

	if (h->n == h->max_n) {
		h->dropped = 1;
		if (!key_less(&it, &h->v[0]))
			return 0;
		heap_pop(h);
	}
	if (h->n == h->cap) {
		cap = h->cap ? h->cap * 2 : 1024;
		if (cap > h->max_n)
			cap = h->max_n;
		v = realloc(h->v, cap * sizeof(*h->v));
		if (!v)
			return -ENOMEM;
		h->mem += (cap - h->cap) * sizeof(*h->v);
		h->v = v;
		h->cap = cap;
	}
	it.path = strdup(path);
	if (!it.path)
		return -ENOMEM;
	h->mem += strlen(path) + 1 + MALLOC_OVERHEAD;
	h->bytes += alloc;
	i = h->n++;
	h->v[i] = it;
	while (i > 0 && key_less(&h->v[(i - 1) / 2], &h->v[i])) {
		t = h->v[i];
		h->v[i] = h->v[(i - 1) / 2];
		h->v[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
	while (h->n > 1 && (h->mem > h->max_mem ||
			    h->bytes - h->v[0].alloc_bytes >= h->prune_need))
		heap_pop(h);
	return 0;
}

static int path_cmp(const void *a, const void *b)
{
	return strcmp(((const struct stash_item *)a)->path, ((const struct stash_item *)b)->path);
}

static int stash_cmp(const void *a, const void *b)
{
	const struct stash_item *x = a, *y = b;

	return key_less(x, y) ? -1 : key_less(y, x) ? 1 : 0;
}

/* ---- removal ---- */

/*
 * Re-check and unlink one block at dirfd/name; used_ns is the last use
 * the scan saw (0 if none), which a fresh atime can only move later;
 * cb_lock (or NULL) serializes the callback.  1 removed, 0 skipped.
 */
static int remove_block(const struct kv_evict_opts *o, struct kv_evict_report *r,
			dev_t dev, int dirfd, const char *name, uint64_t ino,
			int64_t used_ns, const char *path, const struct kv_block_ref *ref,
			pthread_mutex_t *cb_lock)
{
	struct stat st;
	struct kv_evict_block b;
	int64_t atime, mtime, last_use;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_dev != dev || (ino && st.st_ino != ino)) {
		r->skipped_other++;
		return 0;
	}
	atime = ts_ns(st.st_atim);
	mtime = ts_ns(st.st_mtim);
	last_use = atime > used_ns ? atime : used_ns;
	if (is_hot(o, kv_now_ns(), last_use, mtime)) {
		r->skipped_hot++;
		return 0;
	}
	if (!o->dry_run && unlinkat(dirfd, name, 0) < 0) {
		r->skipped_other++;
		return 0;
	}
	r->files_deleted++;
	r->bytes_deleted += (uint64_t)st.st_blocks * 512;
	if (last_use > r->cutoff_atime_ns)
		r->cutoff_atime_ns = last_use;
	if (o->removed) {
		b.path = path;
		b.ref = ref;
		b.size_bytes = (uint64_t)st.st_size;
		b.alloc_bytes = (uint64_t)st.st_blocks * 512;
		b.atime_ns = atime;
		b.last_use_ns = last_use;
		if (cb_lock)
			pthread_mutex_lock(cb_lock);
		o->removed(&b, o->arg);
		if (cb_lock)
			pthread_mutex_unlock(cb_lock);
	}
	return 1;
}

/*
 * Open a block's bucket dir ("<rank>/<hhh>/<hh>_g<n>", or the longer dirs
 * of llmd-v0) below rootfd as a dirfd for *at() calls: never above the
 * root, through no symlink, across no mount point.  One openat2 resolves
 * every component with those checks.
 */
static int open_bucket(int rootfd, const char *dir, dev_t dev)
{
	return kvi_open_beneath(rootfd, dir, O_PATH | O_DIRECTORY, 0, dev);
}

/* The bucket dir of the last block opened: blocks taken in path order
 * share it, which saves its open and close for all but the first block of
 * a bucket. */
struct dircache {
	int fd;
	size_t len;
	char dir[KV_BUCKET_DIR_MAX];
};

static void dircache_init(struct dircache *dc)
{
	dc->fd = -1;
	dc->len = 0;
}

static void dircache_drop(struct dircache *dc)
{
	if (dc->fd >= 0)
		close(dc->fd);
	dircache_init(dc);
}

/*
 * The bucket dir holding block path relpath (already parsed as a layout
 * path: its dirs, then <name>), from dc or freshly opened into it; *name
 * points into relpath.  The fd belongs to dc.
 */
static int open_parent(int rootfd, dev_t dev, struct dircache *dc, const char *relpath,
		       const char **name)
{
	const char *p = strrchr(relpath, '/');
	size_t len;
	int fd;

	if (!p || !p[1] || (size_t)(p - relpath) >= sizeof(dc->dir))
		return -EINVAL;
	*name = p + 1;
	len = (size_t)(p - relpath);
	if (dc->fd >= 0 && dc->len == len && !memcmp(dc->dir, relpath, len))
		return dc->fd;
	dircache_drop(dc);
	memcpy(dc->dir, relpath, len);
	dc->dir[len] = '\0';
	fd = open_bucket(rootfd, dc->dir, dev);
	if (fd < 0)
		return fd;
	dc->fd = fd;
	dc->len = len;
	return fd;
}

int kv_evict_path(int rootfd, const char *relpath, const struct kv_evict_opts *o,
		  struct kv_evict_report *r)
{
	struct kv_block_ref ref;
	struct dircache dc;
	struct stat st;
	const char *name;
	dev_t dev;
	int fd, rc;

	rc = kv_layout_block_parse(relpath, &ref);
	if (rc < 0) {
		r->skipped_other++;
		return rc;
	}
	if (fstat(rootfd, &st) < 0)
		return -errno;
	dev = st.st_dev;
	dircache_init(&dc);
	fd = open_parent(rootfd, dev, &dc, relpath, &name);
	if (fd >= 0 && fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		fd = -errno;
	if (fd < 0) {
		dircache_drop(&dc);
		r->skipped_other++;
		return fd == -ENOENT ? 0 : fd;
	}
	r->files_scanned++;
	r->bytes_scanned += (uint64_t)st.st_blocks * 512;
	if (!S_ISREG(st.st_mode)) {
		dircache_drop(&dc);
		r->skipped_other++;
		return S_ISLNK(st.st_mode) ? -ELOOP : -EINVAL;
	}
	rc = remove_block(o, r, dev, fd, name, st.st_ino, 0, relpath, &ref, NULL);
	dircache_drop(&dc);
	return rc;
}

/* ---- a bucket root's blocks ---- */

static void first_unlink(struct ctx *c);

static void report_removed(struct ctx *c, const char *path, uint64_t size, int64_t last_use)
{
	struct kv_block_ref ref;
	struct kv_evict_block b = {
		.path = path, .ref = &ref, .size_bytes = size, .alloc_bytes = size,
		.atime_ns = last_use, .last_use_ns = last_use,
	};

	if (c->o->removed && kv_layout_block_parse(path, &ref) == 0)
		c->o->removed(&b, c->o->arg);
}

/* A block of a bucket root goes into the next DeleteObjects batch and
 * counts as gone now; bucket.c looks at its keys again just before the
 * delete, and bucket_deleted puts the counts right.  1 queued, 0
 * skipped. */
static int bucket_remove(struct ctx *c, const char *path, uint64_t size, int64_t last_use)
{
	struct kv_evict_report *r = c->r;

	first_unlink(c);
	if (!c->o->dry_run && kvi_bucket_del_add(c->bucket, path, size, last_use) < 0) {
		r->skipped_other++;
		return 0;
	}
	r->files_deleted++;
	r->bytes_deleted += size;
	if (c->o->dry_run) {
		if (last_use > r->cutoff_atime_ns)
			r->cutoff_atime_ns = last_use;
		report_removed(c, path, size, last_use);
	}
	return 1;
}

/* A queued block's fate: the bytes its keys held in place of the scan's
 * size, and the block back where a key was hot or stays. */
static void bucket_deleted(const char *path, uint64_t size, int64_t last_use, uint64_t freed,
			   enum kvi_bucket_fate fate, void *arg)
{
	struct ctx *c = arg;
	struct kv_evict_report *r = c->r;

	r->bytes_deleted -= r->bytes_deleted < size ? r->bytes_deleted : size;
	r->bytes_deleted += freed;
	if (c->p) {
		c->p->freed -= c->p->freed < size ? c->p->freed : size;
		c->p->freed += freed;
	}
	if (fate == KVI_BUCKET_DELETED) {
		if (last_use > r->cutoff_atime_ns)
			r->cutoff_atime_ns = last_use;
		report_removed(c, path, freed, last_use);
		return;
	}
	r->files_deleted--;
	if (fate == KVI_BUCKET_HOT)
		r->skipped_hot++;
	else
		r->skipped_other++;
}

/* ---- walk callbacks ---- */

static int candidate(const struct ctx *c, const struct kv_walk_entry *e)
{
	return e->kind == KV_WALK_BLOCK && S_ISREG(e->mode) &&
	       !is_hot(c->o, c->now, e->last_use_ns, e->mtime_ns);
}

static int dir_is_empty(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *de;
	int empty = 1;

	if (fd < 0)
		return 0;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			empty = 0;
			break;
		}
	closedir(d);
	return empty;
}

static void housekeep(struct ctx *c, const struct kv_walk_entry *e)
{
	const struct kv_evict_opts *o = c->o;
	struct kv_evict_report *r = c->r;

	if (e->kind == KV_WALK_TEMP && S_ISREG(e->mode) &&
	    e->mtime_ns < c->now - (int64_t)o->orphans_after_ns) {
		if (o->dry_run || unlinkat(e->dirfd, e->name, 0) == 0) {
			r->orphans_removed++;
			r->orphan_bytes_removed += e->alloc_bytes;
			c->p->cache_bytes -= e->alloc_bytes;
		}
	} else if (e->kind == KV_WALK_DIR && e->mtime_ns < c->now - (int64_t)o->dir_grace_ns) {
		/* rmdir refuses a dir that is not empty, which is the test. */
		if (o->dry_run ? dir_is_empty(e->dirfd, e->name)
			       : unlinkat(e->dirfd, e->name, AT_REMOVEDIR) == 0)
			r->dirs_removed++;
	}
}

static int scan_cb(const struct kv_walk_entry *e, void *arg)
{
	struct ctx *c = arg;
	struct problem *p = c->p;

	tick(c);
	switch (e->kind) {
	case KV_WALK_BLOCK:
		p->cache_bytes += e->alloc_bytes;
		/* The global scan, last, counts what the tree holds. */
		if (p->global) {
			c->r->files_scanned++;
			c->r->bytes_scanned += e->alloc_bytes;
		}
		if (!S_ISREG(e->mode))
			break;
		if (!candidate(c, e)) {
			c->r->files_hot += p->global;
			break;
		}
		p->cand_bytes += e->alloc_bytes;
		hist_add(&c->h, e->last_use_ns, e->alloc_bytes);
		return heap_push(&c->heap, e->last_use_ns, e->ino, e->alloc_bytes, e->path);
	case KV_WALK_CONFIG:
	case KV_WALK_TEMP:
		p->cache_bytes += e->alloc_bytes;
		break;
	case KV_WALK_ERROR:
		c->r->dirs_unreadable++;
		break;
	default:
		break;
	}
	/* A bucket has no dirs, and a writer's temp is no object. */
	if (p->global && !c->bucket)
		housekeep(c, e);
	return 0;
}

static int refine_cb(const struct kv_walk_entry *e, void *arg)
{
	struct ctx *c = arg;

	tick(c);
	if (candidate(c, e) && e->last_use_ns >= c->p->lo && e->last_use_ns <= c->p->hi)
		hist_add(&c->h, e->last_use_ns, e->alloc_bytes);
	return 0;
}

/* In fs-only global rounds, stop once statvfs shows the target met. */
static int fs_target_met(struct ctx *c)
{
	struct problem *p = c->p;
	uint64_t used, total;

	/* Shards free their share: the others' deletions show in statvfs. */
	if (!p->global || c->o->dry_run || c->o->high_pct < 0 || c->o->max_bytes ||
	    c->round)
		return 0;
	if (++p->since_statvfs < STATVFS_EVERY)
		return 0;
	p->since_statvfs = 0;
	if (fs_bytes(c->rootfd, &used, &total) < 0)
		return 0;
	return pct(used, total) <= c->o->low_pct;
}

static void first_unlink(struct ctx *c)
{
	if (!c->first_unlink_done && c->o->before_first_unlink)
		c->o->before_first_unlink(c->o->arg);
	c->first_unlink_done = 1;
}

static int delete_cb(const struct kv_walk_entry *e, void *arg)
{
	struct ctx *c = arg;
	struct problem *p = c->p;
	uint64_t before;

	tick(c);
	if (p->stop || !candidate(c, e))
		return 0;
	if (c->bucket && (p->delete_all || e->last_use_ns < p->lo ||
			  (e->last_use_ns <= p->hi && p->ties &&
			   p->boundary_freed < p->boundary_need))) {
		if (bucket_remove(c, e->path, e->alloc_bytes, e->last_use_ns)) {
			p->freed += e->alloc_bytes;
			if (!(p->delete_all || e->last_use_ns < p->lo))
				p->boundary_freed += e->alloc_bytes;
		}
	} else if (p->delete_all || e->last_use_ns < p->lo) {
		first_unlink(c);
		before = c->r->bytes_deleted;
		if (remove_block(c->o, c->r, c->dev, e->dirfd, e->name, e->ino,
				 e->last_use_ns, e->path,
				 &e->ref, NULL))
			p->freed += c->r->bytes_deleted - before;
		if (fs_target_met(c))
			p->stop = 1;
	} else if (e->last_use_ns <= p->hi) {
		if (!p->ties)
			return heap_push(&c->heap, e->last_use_ns, e->ino, e->alloc_bytes, e->path);
		if (p->boundary_freed >= p->boundary_need)
			return 0;
		first_unlink(c);
		before = c->r->bytes_deleted;
		if (remove_block(c->o, c->r, c->dev, e->dirfd, e->name, e->ino,
				 e->last_use_ns, e->path,
				 &e->ref, NULL)) {
			p->freed += c->r->bytes_deleted - before;
			p->boundary_freed += c->r->bytes_deleted - before;
		}
	}
	return 0;
}

/* ---- rounds ---- */

static int walk(struct ctx *c, unsigned flags, kv_walk_fn fn)
{
	struct kv_walk_opts wo = {
		.threads = c->o->threads,
		.model = c->p->model,
		.rank = -1,
		.flags = flags,
		.shard_index = c->o->shard_index,
		.shard_count = c->round ? c->o->shard_count : 0,
	};

	c->r->walks++;
	return kv_walk(c->root, &wo, fn, c);
}

/* A held file (its path parsed by the walk): open its dir safely (or
 * reuse it from dc), re-check, unlink. */
static int remove_held(struct ctx *c, struct kv_evict_report *r, const struct stash_item *it,
		       struct dircache *dc, pthread_mutex_t *cb_lock)
{
	struct kv_block_ref ref;
	const char *name;
	int fd;

	/* Only the callback needs the ref back. */
	if (c->o->removed && kv_layout_block_parse(it->path, &ref) < 0) {
		r->skipped_other++;
		return 0;
	}
	fd = open_parent(c->rootfd, c->dev, dc, it->path, &name);
	if (fd < 0) {
		r->skipped_other++;
		return 0;
	}
	return remove_block(c->o, r, c->dev, fd, name, it->ino, it->atime_ns, it->path, &ref,
			    cb_lock);
}

/* Files below this many are not worth threads; each takes this many
 * neighbours (in path order) at a time. */
#define DRAIN_PARALLEL_MIN	256u
#define DRAIN_CHUNK		64u
#define DRAIN_MAX_THREADS	64u

struct drain_job {
	struct ctx *c;
	const struct stash_item *v;
	unsigned end;
	atomic_uint next;
	pthread_mutex_t lock;	/* the callback and the merge */
};

static void *drain_worker(void *arg)
{
	struct drain_job *j = arg;
	struct kv_evict_report t = { 0 }, *r = j->c->r;
	struct dircache dc;
	unsigned i, last;

	dircache_init(&dc);
	while ((i = atomic_fetch_add(&j->next, DRAIN_CHUNK)) < j->end) {
		last = i + DRAIN_CHUNK < j->end ? i + DRAIN_CHUNK : j->end;
		for (; i < last; i++)
			remove_held(j->c, &t, &j->v[i], &dc, &j->lock);
	}
	dircache_drop(&dc);
	pthread_mutex_lock(&j->lock);
	r->files_deleted += t.files_deleted;
	r->bytes_deleted += t.bytes_deleted;
	r->skipped_hot += t.skipped_hot;
	r->skipped_other += t.skipped_other;
	if (t.cutoff_atime_ns > r->cutoff_atime_ns)
		r->cutoff_atime_ns = t.cutoff_atime_ns;
	j->c->p->freed += t.bytes_deleted;
	pthread_mutex_unlock(&j->lock);
	return NULL;
}

/* Remove v[0, end) on several threads: the set is exact, so the order
 * within it does not matter, and path order lets neighbours share dirs.
 * The default is the walk's: one thread per CPU on a local filesystem
 * (more only add lock contention, measured on tmpfs), many on a network
 * one, where each unlink waits on a round trip. */
static void drain_parallel(struct ctx *c, struct stash_item *v, unsigned end)
{
	struct drain_job j = { .c = c, .v = v, .end = end };
	pthread_t tid[DRAIN_MAX_THREADS];
	unsigned n = c->o->threads, started = 0, i;
	if (!n)
		n = kv_walk_default_threads(c->rootfd);
	if (n > DRAIN_MAX_THREADS)
		n = DRAIN_MAX_THREADS;
	if (end < DRAIN_PARALLEL_MIN)
		n = 1;
	qsort(v, end, sizeof(*v), path_cmp);
	atomic_init(&j.next, 0);
	pthread_mutex_init(&j.lock, NULL);
	while (started + 1 < n && pthread_create(&tid[started], NULL, drain_worker, &j) == 0)
		started++;
	drain_worker(&j);
	for (i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&j.lock);
}

/* Delete the held files oldest first until need is met: the oldest
 * prefix that covers it at once, then one by one past any skipped. */
static void drain(struct ctx *c)
{
	struct problem *p = c->p;
	struct heap *h = &c->heap;
	uint64_t acc = p->freed, before;
	struct dircache dc;
	unsigned end, i;

	if (h->n)
		qsort(h->v, h->n, sizeof(*h->v), stash_cmp);
	if (c->bucket) {
		/* After each batch, the next oldest make up for what its look
		 * before the delete kept. */
		for (i = 0; i < h->n && p->freed < p->need;) {
			for (; i < h->n && p->freed < p->need; i++)
				if (bucket_remove(c, h->v[i].path, h->v[i].alloc_bytes,
						  h->v[i].atime_ns))
					p->freed += h->v[i].alloc_bytes;
			kvi_bucket_del_flush(c->bucket);
		}
		heap_free(h);
		return;
	}
	for (end = 0; end < h->n && acc < p->need; end++)
		acc += h->v[end].alloc_bytes;
	if (end) {
		first_unlink(c);
		drain_parallel(c, h->v, end);
	}
	dircache_init(&dc);
	for (i = end; i < h->n && p->freed < p->need && !p->stop; i++) {
		before = c->r->bytes_deleted;
		if (remove_held(c, c->r, &h->v[i], &dc, NULL))
			p->freed += c->r->bytes_deleted - before;
		if (fs_target_met(c))
			p->stop = 1;
	}
	dircache_drop(&dc);
	heap_free(h);
}

/* Bytes to free for the fs-use target at that use: 0 under --high. */
static uint64_t fs_need_at(const struct kv_evict_opts *o, uint64_t used, uint64_t total)
{
	uint64_t low;

	if (o->high_pct < 0 || pct(used, total) < o->high_pct)
		return 0;
	low = (uint64_t)((double)total * o->low_pct / 100.0);
	return used > low ? used - low : 0;
}

/* Bytes to free for the fs-use target now. */
static int fs_need(struct ctx *c, uint64_t *need)
{
	uint64_t used, total;
	int rc;

	*need = 0;
	if (c->o->high_pct < 0)
		return 0;
	rc = fs_bytes(c->rootfd, &used, &total);
	if (rc == 0)
		*need = fs_need_at(c->o, used, total);
	return rc;
}

/* The global need: the fs-use target's n, or the byte budget's for
 * a cache of cache_bytes when that is more. */
static uint64_t budget_need(const struct kv_evict_opts *o, uint64_t n, uint64_t cache_bytes)
{
	if (o->max_bytes && cache_bytes > o->max_bytes && cache_bytes - o->low_bytes > n)
		n = cache_bytes - o->low_bytes;
	return n;
}

/* The global need from fs use and the byte budget, after the scan. */
static int global_need(struct ctx *c, uint64_t *need)
{
	uint64_t n;
	int rc;

	rc = fs_need(c, &n);
	if (rc == 0)
		*need = budget_need(c->o, n, c->p->cache_bytes);
	return rc;
}

/* ---- shards ---- */

/* What every shard of a round must agree on for a stage: its targets. */
static uint64_t targets_of(const struct kv_evict_opts *o, const struct problem *p)
{
	char t[2 * KV_NAME_MAX + 160];
	int n;

	if (p->global)
		n = snprintf(t, sizeof(t), "global high=%.17g low=%.17g max=%llu low_bytes=%llu",
			     o->high_pct, o->low_pct, (unsigned long long)o->max_bytes,
			     (unsigned long long)o->low_bytes);
	else
		n = snprintf(t, sizeof(t), "quota %s max=%llu low_bytes=%llu", p->model,
			     (unsigned long long)p->max_bytes, (unsigned long long)p->low_bytes);
	return kv_xxh3(t, n < (int)sizeof(t) ? (size_t)n : sizeof(t) - 1);
}

/* Bytes the round's own files take that the shards' readings of the
 * volume's use may have missed: each shard reads before it writes its
 * state, and nothing is deleted before every present shard has
 * written, so the largest reading, the last, lacks at most a state
 * file of each.  A block each (a state is a few hundred bytes), added
 * to the fs-use target's need when there is one, so that the volume
 * ends at --low and not a few blocks above it. */
static uint64_t round_slack(const struct ctx *c, unsigned present)
{
	struct statvfs sv;

	if (c->rootfd < 0 || fstatvfs(c->rootfd, &sv) < 0)
		return 0;
	return (uint64_t)present * sv.f_frsize;
}

/* Of need over the merged histogram g, the part in this shard's mine:
 * every byte older than the bucket where need runs out, and of that
 * bucket what is left in proportion to this shard's bytes there. */
static uint64_t own_share(const struct hist *mine, const struct hist *g, uint64_t need)
{
	uint64_t acc = 0, own = 0;

	if (!need)
		return 0;
	for (unsigned i = 0; i < g->n; i++) {
		if (g->bytes[i] >= need - acc) {
			unsigned __int128 left = need - acc;

			if (g->bytes[i])
				own += (uint64_t)((left * mine->bytes[i] + g->bytes[i] - 1) /
						  g->bytes[i]);
			return own;
		}
		acc += g->bytes[i];
		own += mine->bytes[i];
	}
	return own;
}

/*
 * After a sharded scan: publish it, merge the others', and set p->need
 * to this shard's part of the whole volume's need.  Shards missing from
 * the merge are taken to hold what those present hold per bucket, so
 * that those present free their own share of the need and no more.
 */
static int shard_need(struct ctx *c, struct problem *p)
{
	const struct kv_evict_opts *o = c->o;
	struct kvi_shard_state me = {
		.stage = p->stage,
		.targets = targets_of(o, p),
		.cache_bytes = p->cache_bytes,
		.cand_bytes = p->cand_bytes,
	};
	struct kvi_round_merge m = { 0 };
	struct hist g = { 0 };
	uint64_t cache, need;
	int rc;

	rc = fs_bytes(c->rootfd, &me.fs_used_bytes, &me.fs_total_bytes);
	if (rc == 0)
		rc = hist_init_log(&g, c->h.now);
	if (rc == 0) {
		m.count = g.count;
		m.bytes = g.bytes;
		rc = kvi_round_exchange(c->round, &me, c->h.count, c->h.bytes, &m);
	}
	if (rc == 0) {
		c->r->shards_merged = m.present;
		/* The whole cache, as the buckets present show it. */
		cache = (uint64_t)((unsigned __int128)m.cache_bytes * KV_LAYOUT_TOP_BUCKETS /
				   m.share_buckets);
		if (p->global) {
			need = fs_need_at(o, m.fs_used_bytes, m.fs_total_bytes);
			if (need)
				need += round_slack(c, m.present);
			need = budget_need(o, need, cache);
		} else {
			need = cache > p->max_bytes ? cache - p->low_bytes : 0;
		}
		need = (uint64_t)((unsigned __int128)need * m.share_buckets /
				  KV_LAYOUT_TOP_BUCKETS);
		p->need = own_share(&c->h, &g, need);
	}
	hist_free(&g);
	return rc;
}

/* Narrow the boundary until the stash can hold it or it is one atime. */
static int refine(struct ctx *c)
{
	struct problem *p = c->p;
	uint64_t left, count;
	int64_t lo, hi;
	int rc;

	while (p->boundary_count > STASH_MAX && p->lo < p->hi) {
		rc = hist_init_linear(&c->h, p->lo, p->hi);
		if (rc == 0)
			rc = walk(c, 0, refine_cb);
		if (rc == 0 && hist_boundary(&c->h, p->boundary_need, &lo, &hi, &left, &count) == 0) {
			p->lo = lo;
			p->hi = hi;
			p->boundary_need = left;
			p->boundary_count = count;
		} else if (rc == 0) {
			/* Files left the range since the scan: stash what is there. */
			p->boundary_count = 0;
		}
		hist_free(&c->h);
		if (rc < 0)
			return rc;
	}
	p->ties = p->lo == p->hi;
	return 0;
}

/* The second walk: all older than the boundary, then its oldest. */
static int delete_by_boundary(struct ctx *c, struct problem *p)
{
	uint64_t left = 0, count = 0;
	int rc;

	if (p->need >= p->cand_bytes)
		p->delete_all = 1;
	else
		hist_boundary(&c->h, p->need, &p->lo, &p->hi, &left, &count);
	p->boundary_need = left;
	p->boundary_count = count;
	hist_free(&c->h);
	if (!p->delete_all) {
		rc = refine(c);
		if (rc < 0)
			return rc;
	}
	heap_init(&c->heap, STASH_MAX, SIZE_MAX, UINT64_MAX);
	c->now = kv_now_ns();
	rc = walk(c, 0, delete_cb);
	if (rc == 0)
		drain(c);
	heap_free(&c->heap);
	return rc;
}

static int run_round(struct ctx *c, struct problem *p)
{
	uint64_t est = UINT64_MAX;
	int rc;

	c->p = p;
	/* With only an fs target the need is known before the scan, and the
	 * scan keeps no more victims than cover it; a shard's is known only
	 * after the merge. */
	rc = p->global && c->o->high_pct >= 0 && !c->o->max_bytes && !c->round ?
	     fs_need(c, &est) : 0;
	c->now = kv_now_ns();
	if (rc == 0)
		rc = hist_init_log(&c->h, c->round ? kvi_round_id(c->round) * NS_PER_S : c->now);
	heap_init(&c->heap, SCAN_HEAP_MAX,
		  c->o->scan_heap_bytes ? c->o->scan_heap_bytes : SCAN_HEAP_BYTES, est);
	if (rc == 0)
		rc = walk(c, p->global ? KV_WALK_DIRS : 0, scan_cb);
	if (rc == 0 && c->round)
		rc = shard_need(c, p);
	else if (rc == 0 && p->global)
		rc = global_need(c, &p->need);
	else if (rc == 0 && p->cache_bytes > p->max_bytes)
		p->need = p->cache_bytes - p->low_bytes;
	if (rc == 0 && p->need) {
		c->r->bytes_needed += p->need;
		if (c->heap.bytes >= p->need || !c->heap.dropped) {
			drain(c);
		} else {
			heap_free(&c->heap);
			rc = delete_by_boundary(c, p);
		}
	}
	/* What is still queued is sent while this round's counts are open. */
	if (c->bucket && kvi_bucket_del_flush(c->bucket) < 0 && rc == 0)
		rc = -EIO;
	hist_free(&c->h);
	heap_free(&c->heap);
	return rc;
}

int kv_evict_run(const char *root, const struct kv_evict_opts *o,
		 struct kv_evict_report *r)
{
	struct ctx c = { .o = o, .r = r, .root = root };
	struct problem g = { .global = 1, .stage = o->nquotas };
	uint64_t used0, total0, used, total, quota_freed = 0, gone;
	int64_t t0 = kv_monotonic_ns();
	struct stat st;
	unsigned i;
	int rc, reached = 1;

	memset(r, 0, sizeof(*r));
	kvi_error_clear();
	if (o->nquotas > KV_EVICT_MAX_QUOTAS || o->high_pct > 100 ||
	    (o->high_pct >= 0 && (o->low_pct < 0 || o->low_pct > o->high_pct)) ||
	    o->low_bytes > o->max_bytes || o->shard_count > KV_EVICT_MAX_SHARDS ||
	    (o->shard_count && o->shard_index >= o->shard_count))
		return -EINVAL;
	for (i = 0; i < o->nquotas; i++)
		if (!o->quotas[i].model || o->quotas[i].low_bytes > o->quotas[i].max_bytes)
			return -EINVAL;
	if (kvi_s3_is_url(root)) {
		/* A bucket: byte budgets only, one run at a time. */
		if (o->high_pct >= 0)
			return kvi_fail(-EINVAL, "a bucket has no filesystem use: give a byte budget");
		rc = kvi_bucket_del_open(root, o->hot_ns, bucket_deleted, &c, &c.bucket);
		if (rc < 0)
			return rc;
		c.rootfd = -1;
		used0 = total0 = 0;
	} else {
		c.rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (c.rootfd < 0)
			return -errno;
		rc = fstat(c.rootfd, &st) < 0 ? -errno : fs_bytes(c.rootfd, &used0, &total0);
		c.dev = st.st_dev;
	}
	if (rc == 0 && o->shard_count) {
		struct kvi_round_opts ro = {
			.index = o->shard_index, .count = o->shard_count, .dry = o->dry_run,
			.wait_ns = o->shard_wait_ns, .notice = o->notice, .arg = o->arg,
			.bucket_root = c.bucket ? root : NULL,
		};

		rc = kvi_round_join(c.rootfd, &ro, &c.round);
		if (rc == 0)
			r->shard_round = kvi_round_id(c.round);
	}
	for (i = 0; rc == 0 && i < o->nquotas; i++) {
		/* kv_walk maps a model name with '/' to its dirs. */
		struct problem q = {
			.stage = i,
			.model = o->quotas[i].model,
			.max_bytes = o->quotas[i].max_bytes,
			.low_bytes = o->quotas[i].low_bytes,
		};

		rc = run_round(&c, &q);
		quota_freed += q.freed;
		if (q.freed < q.need)
			reached = 0;
	}
	if (rc == 0)
		rc = run_round(&c, &g);
	if (rc == 0) {
		if (g.freed < g.need && !g.stop)
			reached = 0;
		r->target_reached = reached;
		r->cache_bytes_before = g.cache_bytes + r->orphan_bytes_removed + quota_freed;
		r->cache_bytes_after = g.cache_bytes - g.freed;
		r->use_before_pct = pct(used0, total0);
		gone = r->bytes_deleted + r->orphan_bytes_removed;
		if (o->dry_run)
			r->use_after_pct = pct(used0 > gone ? used0 - gone : 0, total0);
		else if (fs_bytes(c.rootfd, &used, &total) == 0)
			r->use_after_pct = pct(used, total);
	}
	kvi_round_leave(c.round);
	kvi_bucket_del_close(c.bucket);
	if (c.rootfd >= 0)
		close(c.rootfd);
	r->elapsed_ns = kv_monotonic_ns() - t0;
	return rc;
}
