/*
 * LRU eviction with bounded memory.  A round scans (one walk) into an
 * atime histogram of the candidates, picks the boundary bucket where the
 * bytes to free run out, narrows it with linear histograms while it holds
 * more files than the stash, then deletes (a second walk) every candidate
 * older than the boundary and afterwards the boundary's oldest from a
 * bounded heap until the target is met.  Per-model quotas are rounds of
 * their own over that model's dirs, before the global round.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <kv/kv.h>
#include <kv/evict.h>

/* First-level histogram: log-linear in age, 1/512 relative width. */
#define SUB_BITS	10
#define SUB_COUNT	(1u << SUB_BITS)
#define HALF_COUNT	(SUB_COUNT / 2)
#define LOG_BUCKETS	(SUB_COUNT + (64 - SUB_BITS) * HALF_COUNT)
#define REFINE_BUCKETS	65536u
/* Boundary files kept (with their paths) for exact order. */
#define STASH_MAX	8192u
/* How often the fs-use target is re-read while deleting. */
#define STATVFS_EVERY	256u

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
	char *path;
};

struct problem {
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
	struct stash_item *heap;
	unsigned nheap;
};

static int is_hot(const struct kv_evict_opts *o, int64_t now, int64_t atime, int64_t mtime)
{
	int64_t edge;

	if (o->hot_ns == 0)
		return 0;
	edge = now - (int64_t)o->hot_ns;
	return atime > edge || mtime > edge;
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

int kv_evict_lock(const char *root, int wait, int *fd)
{
	int rootfd, lfd;

	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	lfd = openat(rootfd, KV_EVICT_LOCK_NAME,
		     O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	close(rootfd);
	if (lfd < 0)
		return -errno;
	while (flock(lfd, LOCK_EX | (wait ? 0 : LOCK_NB)) < 0) {
		int e = errno;

		if (e == EINTR)
			continue;
		close(lfd);
		return -e;
	}
	*fd = lfd;
	return 0;
}

/* ---- histograms ---- */

static unsigned log_index(uint64_t age)
{
	unsigned msb, shift, b;

	if (age < SUB_COUNT) {
		b = (unsigned)age;
	} else {
		msb = 63 - (unsigned)__builtin_clzll(age);
		shift = msb - (SUB_BITS - 1);
		b = SUB_COUNT + (shift - 1) * HALF_COUNT +
		    (unsigned)((age >> shift) - HALF_COUNT);
	}
	return LOG_BUCKETS - 1 - b;	/* older (larger age) first */
}

static void log_age_range(unsigned b, uint64_t *lo, uint64_t *hi)
{
	unsigned k, shift;
	uint64_t m;

	if (b < SUB_COUNT) {
		*lo = *hi = b;
		return;
	}
	k = b - SUB_COUNT;
	shift = k / HALF_COUNT + 1;
	m = k % HALF_COUNT + HALF_COUNT;
	*lo = m << shift;
	*hi = *lo + ((uint64_t)1 << shift) - 1;
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

	log_age_range(LOG_BUCKETS - 1 - i, &alo, &ahi);
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

static int stash_push(struct ctx *c, int64_t atime, uint64_t ino, const char *path)
{
	struct stash_item it = { atime, ino, NULL }, t;
	unsigned i;

	if (c->nheap == STASH_MAX) {
		if (!key_less(&it, &c->heap[0]))
			return 0;
		free(c->heap[0].path);
		c->heap[0] = c->heap[--c->nheap];
		sift_down(c->heap, c->nheap, 0);
	}
	it.path = strdup(path);
	if (!it.path)
		return -ENOMEM;
	i = c->nheap++;
	c->heap[i] = it;
	while (i > 0 && key_less(&c->heap[(i - 1) / 2], &c->heap[i])) {
		t = c->heap[i];
		c->heap[i] = c->heap[(i - 1) / 2];
		c->heap[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
	return 0;
}

static int stash_cmp(const void *a, const void *b)
{
	const struct stash_item *x = a, *y = b;

	return key_less(x, y) ? -1 : key_less(y, x) ? 1 : 0;
}

/* ---- removal ---- */

/*
 * Re-check and unlink one block at dirfd/name.  ino 0: no inode to
 * compare.  1 removed, 0 skipped.
 */
static int remove_block(const struct kv_evict_opts *o, struct kv_evict_report *r,
			dev_t dev, int *first_done, int dirfd, const char *name,
			uint64_t ino, const char *path, const struct kv_block_ref *ref)
{
	struct stat st;
	struct kv_evict_block b;
	int64_t atime, mtime;

	if (first_done && !*first_done) {
		*first_done = 1;
		if (o->before_first_unlink)
			o->before_first_unlink(o->arg);
	}
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_dev != dev || (ino && st.st_ino != ino)) {
		r->skipped_other++;
		return 0;
	}
	atime = ts_ns(st.st_atim);
	mtime = ts_ns(st.st_mtim);
	if (is_hot(o, kv_now_ns(), atime, mtime)) {
		r->skipped_hot++;
		return 0;
	}
	if (!o->dry_run && unlinkat(dirfd, name, 0) < 0) {
		r->skipped_other++;
		return 0;
	}
	r->files_deleted++;
	r->bytes_deleted += (uint64_t)st.st_blocks * 512;
	if (atime > r->cutoff_atime_ns)
		r->cutoff_atime_ns = atime;
	if (o->removed) {
		b.path = path;
		b.ref = ref;
		b.size_bytes = (uint64_t)st.st_size;
		b.alloc_bytes = (uint64_t)st.st_blocks * 512;
		b.atime_ns = atime;
		o->removed(&b, o->arg);
	}
	return 1;
}

/*
 * Open the directory holding relpath's last component, one component at
 * a time with O_NOFOLLOW and on the root's filesystem only; *name points
 * into relpath.
 */
static int open_parent(int rootfd, dev_t dev, const char *relpath, const char **name)
{
	char comp[KV_NAME_MAX + 1];
	const char *p = relpath, *slash;
	int fd = rootfd, nfd;
	struct stat st;
	size_t len;

	while ((slash = strchr(p, '/'))) {
		len = (size_t)(slash - p);
		if (len == 0 || len > KV_NAME_MAX) {
			nfd = -EINVAL;
			goto fail;
		}
		memcpy(comp, p, len);
		comp[len] = '\0';
		nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0) {
			nfd = -errno;
			goto fail;
		}
		if (fd != rootfd)
			close(fd);
		fd = nfd;
		if (fstat(fd, &st) < 0 || st.st_dev != dev) {
			nfd = -EXDEV;
			goto fail;
		}
		p = slash + 1;
	}
	*name = p;
	return fd;
fail:
	if (fd != rootfd)
		close(fd);
	return nfd;
}

int kv_evict_path(int rootfd, const char *relpath, const struct kv_evict_opts *o,
		  struct kv_evict_report *r)
{
	struct kv_block_ref ref;
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
	fd = open_parent(rootfd, dev, relpath, &name);
	if (fd >= 0 && fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		close(fd);
		fd = -errno;
	}
	if (fd < 0) {
		r->skipped_other++;
		return fd == -ENOENT ? 0 : fd;
	}
	r->files_scanned++;
	r->bytes_scanned += (uint64_t)st.st_blocks * 512;
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		r->skipped_other++;
		return S_ISLNK(st.st_mode) ? -ELOOP : -EINVAL;
	}
	rc = remove_block(o, r, dev, NULL, fd, name, st.st_ino, relpath, &ref);
	close(fd);
	return rc;
}

/* ---- walk callbacks ---- */

static int candidate(const struct ctx *c, const struct kv_walk_entry *e)
{
	return e->kind == KV_WALK_BLOCK && S_ISREG(e->mode) &&
	       !is_hot(c->o, c->now, e->atime_ns, e->mtime_ns);
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
		hist_add(&c->h, e->atime_ns, e->alloc_bytes);
		break;
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
	if (p->global)
		housekeep(c, e);
	return 0;
}

static int refine_cb(const struct kv_walk_entry *e, void *arg)
{
	struct ctx *c = arg;

	if (candidate(c, e) && e->atime_ns >= c->p->lo && e->atime_ns <= c->p->hi)
		hist_add(&c->h, e->atime_ns, e->alloc_bytes);
	return 0;
}

/* In fs-only global rounds, stop once statvfs shows the target met. */
static int fs_target_met(struct ctx *c)
{
	struct problem *p = c->p;
	uint64_t used, total;

	if (!p->global || c->o->dry_run || c->o->high_pct < 0 || c->o->max_bytes)
		return 0;
	if (++p->since_statvfs < STATVFS_EVERY)
		return 0;
	p->since_statvfs = 0;
	if (fs_bytes(c->rootfd, &used, &total) < 0)
		return 0;
	return pct(used, total) <= c->o->low_pct;
}

static int delete_cb(const struct kv_walk_entry *e, void *arg)
{
	struct ctx *c = arg;
	struct problem *p = c->p;
	uint64_t before;

	if (p->stop || !candidate(c, e))
		return 0;
	if (p->delete_all || e->atime_ns < p->lo) {
		before = c->r->bytes_deleted;
		if (remove_block(c->o, c->r, c->dev, &c->first_unlink_done, e->dirfd,
				 e->name, e->ino, e->path, &e->ref))
			p->freed += c->r->bytes_deleted - before;
		if (fs_target_met(c))
			p->stop = 1;
	} else if (e->atime_ns <= p->hi) {
		if (!p->ties)
			return stash_push(c, e->atime_ns, e->ino, e->path);
		if (p->boundary_freed >= p->boundary_need)
			return 0;
		before = c->r->bytes_deleted;
		if (remove_block(c->o, c->r, c->dev, &c->first_unlink_done, e->dirfd,
				 e->name, e->ino, e->path, &e->ref)) {
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
	};

	c->r->walks++;
	return kv_walk(c->root, &wo, fn, c);
}

static void stash_clear(struct ctx *c)
{
	unsigned i;

	for (i = 0; i < c->nheap; i++)
		free(c->heap[i].path);
	c->nheap = 0;
}

/* Delete the stashed boundary files oldest first until need is met. */
static void drain_stash(struct ctx *c)
{
	struct problem *p = c->p;
	struct kv_block_ref ref;
	const char *name;
	uint64_t before;
	unsigned i;
	int fd;

	qsort(c->heap, c->nheap, sizeof(*c->heap), stash_cmp);
	for (i = 0; i < c->nheap && p->freed < p->need && !p->stop; i++) {
		if (kv_layout_block_parse(c->heap[i].path, &ref) < 0) {
			c->r->skipped_other++;
			continue;
		}
		fd = open_parent(c->rootfd, c->dev, c->heap[i].path, &name);
		if (fd < 0) {
			c->r->skipped_other++;
			continue;
		}
		before = c->r->bytes_deleted;
		if (remove_block(c->o, c->r, c->dev, &c->first_unlink_done, fd, name,
				 c->heap[i].ino, c->heap[i].path, &ref))
			p->freed += c->r->bytes_deleted - before;
		close(fd);
	}
	stash_clear(c);
}

/* The global need from fs use and the byte budget, after the scan. */
static int global_need(struct ctx *c, uint64_t *need)
{
	const struct kv_evict_opts *o = c->o;
	struct problem *p = c->p;
	uint64_t used, total, low, n = 0;
	int rc;

	if (o->high_pct >= 0) {
		rc = fs_bytes(c->rootfd, &used, &total);
		if (rc < 0)
			return rc;
		if (pct(used, total) >= o->high_pct) {
			low = (uint64_t)((double)total * o->low_pct / 100.0);
			if (used > low)
				n = used - low;
		}
	}
	if (o->max_bytes && p->cache_bytes > o->max_bytes && p->cache_bytes - o->low_bytes > n)
		n = p->cache_bytes - o->low_bytes;
	*need = n;
	return 0;
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

static int run_round(struct ctx *c, struct problem *p)
{
	uint64_t left = 0, count = 0;
	int rc;

	c->p = p;
	c->now = kv_now_ns();
	rc = hist_init_log(&c->h, c->now);
	if (rc == 0)
		rc = walk(c, p->global ? KV_WALK_DIRS : 0, scan_cb);
	if (rc == 0 && p->global)
		rc = global_need(c, &p->need);
	else if (rc == 0 && p->cache_bytes > p->max_bytes)
		p->need = p->cache_bytes - p->low_bytes;
	if (rc < 0 || p->need == 0) {
		hist_free(&c->h);
		return rc;
	}
	c->r->bytes_needed += p->need;
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
	c->now = kv_now_ns();
	rc = walk(c, 0, delete_cb);
	if (rc == 0)
		drain_stash(c);
	stash_clear(c);
	return rc;
}

int kv_evict_run(const char *root, const struct kv_evict_opts *o,
		 struct kv_evict_report *r)
{
	struct ctx c = { .o = o, .r = r, .root = root };
	struct problem g = { .global = 1 };
	uint64_t used0, total0, used, total, quota_freed = 0, gone;
	int64_t t0 = kv_monotonic_ns();
	struct stat st;
	unsigned i;
	int rc, reached = 1;

	memset(r, 0, sizeof(*r));
	if (o->nquotas > KV_EVICT_MAX_QUOTAS)
		return -EINVAL;
	c.rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c.rootfd < 0)
		return -errno;
	rc = fstat(c.rootfd, &st) < 0 ? -errno : fs_bytes(c.rootfd, &used0, &total0);
	c.dev = st.st_dev;
	c.heap = malloc(STASH_MAX * sizeof(*c.heap));
	if (rc == 0 && !c.heap)
		rc = -ENOMEM;
	for (i = 0; rc == 0 && i < o->nquotas; i++) {
		/* kv_walk maps a model name with '/' to its dirs. */
		struct problem q = {
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
	free(c.heap);
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
	close(c.rootfd);
	r->elapsed_ns = kv_monotonic_ns() - t0;
	return rc;
}
