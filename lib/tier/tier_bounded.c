/*
 * The bounded file tier: the file tier (tier_file.c) does the I/O, and
 * this wrapper keeps its blocks in a file index (file_index.c) by last
 * use and evicts the least recently used for room.  One lock guards the
 * index; an eviction happens under it, so a block is never in neither
 * tier.  The index is the tier's truth: it answers presence and sizes
 * without a system call, and it assumes the tier is its root's only
 * writer.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/file.h>
#include <kv/errors.h>
#include <kv/file_index.h>
#include "tier_impl.h"

struct bounded {
	struct kv_tier base;
	pthread_mutex_t lock;
	struct kv_tier *files;	/* an unbounded file tier on the same root */
	struct kv_file_index *idx;
	uint64_t capacity_bytes;
	int replace;		/* KV_IO_REPLACE: a put rewrites a present block */
	int lockfd;		/* the claim on the root (KV_TIER_LOCK) */
};

static struct bounded *B(struct kv_tier *t)
{
	return (struct bounded *)t;
}

/* Over capacity, counting neither the blocks already on their way out
 * nor need more bytes to come. */
static int over(struct bounded *b, uint64_t need)
{
	struct kv_file_index_usage u;

	kv_file_index_usage(b->idx, &u);
	return u.bytes - u.moving_bytes + need > b->capacity_bytes;
}

/* Evict least recently used blocks other than keep until need more
 * bytes fit, each moved down (kv_tier_demote) and kept when no tier
 * below takes it. */
static int make_room(struct bounded *b, uint32_t keep, uint64_t need)
{
	struct kv_tier *below[KV_TIER_DEPTH_MAX];
	unsigned n = kvi_tier_spill_to(&b->base, below);
	struct kv_tier_demotion m = { 0 };
	uint32_t v = kv_file_index_oldest(b->idx);
	int r = 0;

	while (over(b, need)) {
		if (v == keep)
			v = kv_file_index_newer(b->idx, v);
		if (v == KV_FILE_INDEX_NONE) {
			r = -ENOSPC;
			break;
		}
		r = kv_tier_demote(b->files, below, n, kv_file_index_path(b->idx, v),
				   KV_TIER_DEMOTE_KEEP, &m);
		if (r < 0 && r != -ENOENT)	/* -ENOENT: only the index had it */
			break;
		if (r == 0)
			kvi_tier_evicted(&b->base, &m);
		kv_file_index_remove(b->idx, v);
		v = kv_file_index_oldest(b->idx);
		r = 0;
	}
	kv_io_buf_free(m.buf);
	return r;
}

static int bounded_put(struct kv_tier *t, const char *key, const void *buf, size_t len)
{
	struct bounded *b = B(t);
	uint32_t id;
	uint64_t held;
	int r;

	if (len > b->capacity_bytes)
		return -EFBIG;
	pthread_mutex_lock(&b->lock);
	id = kv_file_index_find(b->idx, key);
	/* A present block is kept as it is (kv_io_put) unless replaced. */
	held = id == KV_FILE_INDEX_NONE ? 0 : kv_file_index_size(b->idx, id);
	r = id != KV_FILE_INDEX_NONE && !b->replace ? 0 :
	    make_room(b, id, len > held ? len - held : 0);
	if (r == 0)
		r = kv_tier_put(b->files, key, buf, len);
	if (r == 0 && id != KV_FILE_INDEX_NONE && !b->replace)
		kv_file_index_touch(b->idx, id);
	else if (r == 0 && (r = kv_file_index_put(b->idx, key, len)) < 0)
		kv_tier_del(b->files, key);	/* uncounted, it would overfill */
	pthread_mutex_unlock(&b->lock);
	return r;
}

/* What get and size say of a block the index lacks. */
static int absent(const char *key)
{
	int r = kvi_tier_file_check_key(key);

	return r < 0 ? r : -ENOENT;
}

/* A read of an indexed block: a use, unless the block went behind the
 * tier's back. */
static int used(struct bounded *b, const char *key, int r)
{
	uint32_t id = kv_file_index_find(b->idx, key);

	if (r == -ENOENT)
		kv_file_index_remove(b->idx, id);
	else if (r == 0)
		kv_file_index_touch(b->idx, id);
	return r;
}

static int bounded_get(struct kv_tier *t, const char *key, void *buf, size_t cap, size_t *len)
{
	struct bounded *b = B(t);
	int r;

	pthread_mutex_lock(&b->lock);
	r = kv_file_index_find(b->idx, key) == KV_FILE_INDEX_NONE ? absent(key) :
	    used(b, key, kv_tier_get(b->files, key, buf, cap, len));
	pthread_mutex_unlock(&b->lock);
	return r;
}

static int bounded_get_tail(struct kv_tier *t, const char *key, void *buf, size_t len)
{
	struct bounded *b = B(t);
	int r;

	pthread_mutex_lock(&b->lock);
	r = kv_file_index_find(b->idx, key) == KV_FILE_INDEX_NONE ? absent(key) :
	    used(b, key, kv_tier_get_tail(b->files, key, buf, len));
	pthread_mutex_unlock(&b->lock);
	return r;
}

static int bounded_size(struct kv_tier *t, const char *key, uint64_t *size)
{
	struct bounded *b = B(t);
	uint32_t id;
	int r = 0;

	pthread_mutex_lock(&b->lock);
	id = kv_file_index_find(b->idx, key);
	if (id == KV_FILE_INDEX_NONE)
		r = absent(key);
	else
		*size = kv_file_index_size(b->idx, id);
	pthread_mutex_unlock(&b->lock);
	return r;
}

static int bounded_del(struct kv_tier *t, const char *key)
{
	struct bounded *b = B(t);
	uint32_t id;
	int r;

	pthread_mutex_lock(&b->lock);
	r = kv_tier_del(b->files, key);
	id = kv_file_index_find(b->idx, key);
	if ((r == 0 || r == -ENOENT) && id != KV_FILE_INDEX_NONE)
		kv_file_index_remove(b->idx, id);
	pthread_mutex_unlock(&b->lock);
	return r;
}

static int bounded_stat(struct kv_tier *t, struct kv_tier_stat *st)
{
	struct bounded *b = B(t);
	struct kv_file_index_usage u;

	pthread_mutex_lock(&b->lock);
	kv_file_index_usage(b->idx, &u);
	pthread_mutex_unlock(&b->lock);
	st->kind = "file";
	st->blocks = u.blocks;
	st->used_bytes = u.bytes;
	st->capacity_bytes = b->capacity_bytes;
	st->block_max_bytes = b->capacity_bytes;
	return 0;
}

static int bounded_list(struct kv_tier *t, const struct kv_tier_list_opts *o,
			kv_tier_list_fn fn, void *arg)
{
	return kv_tier_list(B(t)->files, o, fn, arg);
}

static int bounded_verify(struct kv_tier *t, const char *key, uint64_t size)
{
	return kv_tier_verify_size(B(t)->files, key, size);
}

static void bounded_close(struct kv_tier *t)
{
	struct bounded *b = B(t);

	kv_tier_close(b->files);
	kv_file_index_free(b->idx);
	close(b->lockfd);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

static int bounded_config_get(struct kv_tier *t, const char *model_dir, char **text,
			      size_t *len)
{
	struct kv_tier *files = B(t)->files;

	return files->ops->config_get(files, model_dir, text, len);
}

static int bounded_config_put(struct kv_tier *t, const char *model_dir, const char *text,
			      size_t len)
{
	struct kv_tier *files = B(t)->files;

	return files->ops->config_put(files, model_dir, text, len);
}

/* No batch_stream: each put and get must pass through the index. */
static const struct kv_tier_ops bounded_ops = {
	.put = bounded_put,
	.get = bounded_get,
	.del = bounded_del,
	.stat = bounded_stat,
	.close = bounded_close,
	.size = bounded_size,
	.get_tail = bounded_get_tail,
	.list = bounded_list,
	.verify = bounded_verify,
	.config_get = bounded_config_get,
	.config_put = bounded_config_put,
};

int kv_tier_claim(const char *root, const char *holder, int *lockfd)
{
	char text[640];
	int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r, n;

	if (dfd < 0)
		return -errno;
	/* 0600 and this user's: a reader of the root cannot hold it. */
	r = kv_lock_beneath(dfd, KV_TIER_LOCK, LOCK_EX, 0, lockfd);
	close(dfd);
	if (r < 0)
		return r == -EWOULDBLOCK ? -EBUSY : r;
	n = snprintf(text, sizeof(text), "pid %d %s\n", (int)getpid(), holder);
	if (n >= (int)sizeof(text))
		n = (int)sizeof(text) - 1;
	if (ftruncate(*lockfd, 0) < 0 || pwrite(*lockfd, text, (size_t)n, 0) != n) {
		r = -errno;
		close(*lockfd);
		return r;
	}
	return 0;
}

int kv_tier_file_open_bounded_by(const char *root, const struct kv_io_opts *opts,
				 uint64_t capacity_bytes, const char *holder, struct kv_tier **out)
{
	struct bounded *b;
	int r;

	if (!root || !capacity_bytes || !holder)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	kvi_tier_init(&b->base, &bounded_ops);
	b->capacity_bytes = capacity_bytes;
	b->replace = opts && (opts->flags & KV_IO_REPLACE);
	r = -pthread_mutex_init(&b->lock, NULL);
	if (r) {
		free(b);
		return r;
	}
	b->lockfd = -1;
	r = kv_tier_file_open(root, opts, &b->files);
	/* The index is the truth only while no other process writes the
	 * root. */
	if (r == 0)
		r = kv_tier_claim(root, holder, &b->lockfd);
	if (r == 0)
		r = kv_file_index_new(&b->idx);
	if (r == 0)
		r = kv_file_index_scan(b->idx, root, NULL);
	if (r < 0) {
		kv_tier_close(b->files);
		kv_file_index_free(b->idx);
		if (b->lockfd >= 0)
			close(b->lockfd);
		pthread_mutex_destroy(&b->lock);
		free(b);
		return r;
	}
	*out = &b->base;
	return 0;
}

int kv_tier_file_open_bounded(const char *root, const struct kv_io_opts *opts,
			      uint64_t capacity_bytes, struct kv_tier **out)
{
	return kv_tier_file_open_bounded_by(root, opts, capacity_bytes, "bounded tier", out);
}

/* ---- a bounded tier whose blocks its caller moves on its own handles ---- */

static struct bounded *as_bounded(struct kv_tier *t)
{
	return t && t->ops == &bounded_ops ? B(t) : NULL;
}

/* act on key's index entry, under the lock: 0, or -ENOENT when it is not
 * indexed. */
static int on_entry(struct kv_tier *t, const char *key,
		    void (*act)(struct kv_file_index *x, uint32_t id, void *arg), void *arg)
{
	struct bounded *b = as_bounded(t);
	uint32_t id;

	if (!b || !key)
		return -EINVAL;
	pthread_mutex_lock(&b->lock);
	id = kv_file_index_find(b->idx, key);
	if (id != KV_FILE_INDEX_NONE)
		act(b->idx, id, arg);
	pthread_mutex_unlock(&b->lock);
	return id == KV_FILE_INDEX_NONE ? -ENOENT : 0;
}

struct found {
	uint64_t *size;
	int *moving;
};

static void read_entry(struct kv_file_index *x, uint32_t id, void *arg)
{
	struct found *f = arg;

	if (f->size)
		*f->size = kv_file_index_size(x, id);
	if (f->moving)
		*f->moving = kv_file_index_moving(x, id);
}

static void touch_entry(struct kv_file_index *x, uint32_t id, void *arg)
{
	(void)arg;
	kv_file_index_touch(x, id);
}

static void remove_entry(struct kv_file_index *x, uint32_t id, void *arg)
{
	(void)arg;
	kv_file_index_remove(x, id);
}

int kv_tier_bounded_find(struct kv_tier *t, const char *key, uint64_t *size, int *moving)
{
	struct found f = { .size = size, .moving = moving };

	return on_entry(t, key, read_entry, &f);
}

int kv_tier_bounded_used(struct kv_tier *t, const char *key)
{
	return on_entry(t, key, touch_entry, NULL);
}

int kv_tier_bounded_stored(struct kv_tier *t, const char *key, uint64_t size)
{
	struct bounded *b = as_bounded(t);
	int r;

	if (!b || !key)
		return -EINVAL;
	pthread_mutex_lock(&b->lock);
	r = kv_file_index_put(b->idx, key, size);
	pthread_mutex_unlock(&b->lock);
	return r;
}

int kv_tier_bounded_moved(struct kv_tier *t, const char *key)
{
	return on_entry(t, key, remove_entry, NULL);
}

int kv_tier_bounded_trim(struct kv_tier *t, kv_tier_bounded_out_fn out, void *arg)
{
	struct bounded *b = as_bounded(t);
	int r = 0;

	if (!b || !out)
		return -EINVAL;
	pthread_mutex_lock(&b->lock);
	for (uint32_t v = kv_file_index_oldest(b->idx); v != KV_FILE_INDEX_NONE && over(b, 0);
	     v = kv_file_index_newer(b->idx, v)) {
		if (kv_file_index_moving(b->idx, v))
			continue;
		r = out(arg, kv_file_index_path(b->idx, v), kv_file_index_size(b->idx, v));
		if (r < 0)
			break;
		if (r == 0)
			kv_file_index_set_moving(b->idx, v, 1);
		r = 0;
	}
	pthread_mutex_unlock(&b->lock);
	return r;
}
