/*
 * The file tier: a cache root through the io engine.  One kv_io handle
 * serves the tier under a lock, as a handle belongs to one thread at a
 * time; a batch holds the lock throughout and keeps the engine's queue
 * depth in flight.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <kv/config.h>
#include <kv/errors.h>
#include <kv/layout.h>
#include <kv/walk.h>
#include "tier_impl.h"

#define CONFIGS_KNOWN	16	/* model dirs remembered to hold config.json */

struct ftier {
	struct kv_tier base;
	pthread_mutex_t lock;
	struct kv_io *io;
	int rootfd;
	char *root;		/* for kv_walk */
	/* Model dirs seen holding their config.json, so that a block copied
	 * in asks the filesystem once per model dir, not once per block;
	 * replaced round-robin. */
	char *configs[CONFIGS_KNOWN];
	unsigned next_config;
};

static struct ftier *F(struct kv_tier *t)
{
	return (struct ftier *)t;
}

int kvi_tier_file_check_key(const char *key)
{
	struct kv_block_ref ref;

	return kv_layout_block_parse(key, &ref);
}

static int file_put(struct kv_tier *t, const char *key, const void *buf,
		    size_t len)
{
	struct ftier *f = F(t);
	int r = kvi_tier_file_check_key(key);

	if (r < 0)
		return r;
	pthread_mutex_lock(&f->lock);
	r = kv_io_put(f->io, key, buf, len);
	pthread_mutex_unlock(&f->lock);
	return r;
}

static int file_get(struct kv_tier *t, const char *key, void *buf, size_t cap,
		    size_t *len)
{
	struct ftier *f = F(t);
	int r = kvi_tier_file_check_key(key);

	if (r < 0)
		return r;
	pthread_mutex_lock(&f->lock);
	r = kv_io_get(f->io, key, buf, cap, len);
	pthread_mutex_unlock(&f->lock);
	return r;
}

static int file_has(struct kv_tier *t, const char *key)
{
	struct ftier *f = F(t);
	int r = kvi_tier_file_check_key(key);

	if (r < 0)
		return r;
	pthread_mutex_lock(&f->lock);
	r = kv_io_has(f->io, key);
	pthread_mutex_unlock(&f->lock);
	return r;
}

static int file_size(struct kv_tier *t, const char *key, uint64_t *size)
{
	struct ftier *f = F(t);
	int r = kvi_tier_file_check_key(key);

	if (r < 0)
		return r;
	pthread_mutex_lock(&f->lock);
	r = kv_io_size(f->io, key, size);
	pthread_mutex_unlock(&f->lock);
	return r;
}

static int file_get_tail(struct kv_tier *t, const char *key, void *buf, size_t len)
{
	struct ftier *f = F(t);
	int r = kvi_tier_file_check_key(key);

	if (r < 0)
		return r;
	pthread_mutex_lock(&f->lock);
	r = kv_io_get_tail(f->io, key, buf, len);
	pthread_mutex_unlock(&f->lock);
	return r;
}

/* A tier request in the engine: its kv_io twin, reused from a free list. */
struct fslot {
	struct kv_io_req io;
	struct kv_tier_req *req;
	struct fslot *next_free;
};

struct fbatch {
	kv_tier_next_fn next;
	kv_tier_done_fn done;
	void *arg;
	struct kv_io *io;
	struct fslot *free;
	int failed;		/* requests answered here that failed */
};

static int fbatch_next(void *arg, struct kv_io_req **out)
{
	static const enum kv_io_op ops[] = {
		[KV_TIER_OP_PUT] = KV_IO_OP_PUT, [KV_TIER_OP_GET] = KV_IO_OP_GET,
		[KV_TIER_OP_GET_TAIL] = KV_IO_OP_GET_TAIL, [KV_TIER_OP_HAS] = KV_IO_OP_HAS,
	};
	struct fbatch *b = arg;
	struct kv_tier_req *req;
	struct fslot *s;
	uint64_t size;
	int r;

	/* Presence is a stat, answered here, with the size kv_io's HAS drops. */
	while ((r = b->next(b->arg, &req)) == 1) {
		req->done = 0;
		req->result = (unsigned)req->op < sizeof(ops) / sizeof(ops[0]) ?
			      kvi_tier_file_check_key(req->key) : -EINVAL;
		if (req->result == 0 && req->op != KV_TIER_OP_HAS)
			break;
		if (req->result == 0)
			req->result = kv_io_size(b->io, req->key, &size);
		if (req->result == 0)
			req->done = (size_t)size;
		else
			b->failed++;
		b->done(b->arg, req);
	}
	if (r != 1)
		return r;
	s = b->free;
	if (s)
		b->free = s->next_free;
	else if (!(s = calloc(1, sizeof(*s))))
		return -ENOMEM;
	s->req = req;
	s->io = (struct kv_io_req){ .op = ops[req->op], .relpath = req->key,
				    .buf = req->buf, .len = req->len, .user = s };
	*out = &s->io;
	return 1;
}

static void fbatch_done(void *arg, struct kv_io_req *io)
{
	struct fbatch *b = arg;
	struct fslot *s = io->user;

	s->req->done = io->done;
	s->req->result = io->result;
	s->req->existed = io->existed;
	s->next_free = b->free;
	b->free = s;
	b->done(b->arg, s->req);
}

static int file_batch_stream(struct kv_tier *t, kv_tier_next_fn next,
			     kv_tier_done_fn done, void *arg)
{
	struct ftier *f = F(t);
	struct fbatch b = { .io = f->io, .next = next, .done = done, .arg = arg };
	struct fslot *s;
	int r;

	pthread_mutex_lock(&f->lock);
	r = kv_io_batch_stream(f->io, fbatch_next, fbatch_done, &b);
	pthread_mutex_unlock(&f->lock);
	while ((s = b.free)) {
		b.free = s->next_free;
		free(s);
	}
	return r < 0 ? r : r + b.failed;
}

struct flist {
	kv_tier_list_fn fn;
	void *arg;
};

static int flist_entry(const struct kv_walk_entry *w, void *arg)
{
	struct flist *l = arg;
	struct kv_tier_entry e = { .key = w->path };

	if (w->kind == KV_WALK_ERROR) {
		e.err = w->err;
		return l->fn(&e, l->arg);
	}
	if (w->kind != KV_WALK_BLOCK)
		return 0;
	e.ref = w->ref;
	e.size_bytes = w->size_bytes;
	e.fields = KV_TIER_ENTRY_FILE;
	e.alloc_bytes = w->alloc_bytes;
	e.atime_ns = w->atime_ns;
	e.mtime_ns = w->mtime_ns;
	e.last_use_ns = w->last_use_ns;
	return l->fn(&e, l->arg);
}

static int file_list(struct kv_tier *t, const struct kv_tier_list_opts *o,
		     kv_tier_list_fn fn, void *arg)
{
	struct kv_walk_opts w = { .threads = o->threads, .model = o->model, .rank = o->rank };
	struct flist l = { .fn = fn, .arg = arg };

	return kv_walk(F(t)->root, &w, flist_entry, &l);
}

static int file_del(struct kv_tier *t, const char *key)
{
	int r = kvi_tier_file_check_key(key);

	if (r < 0)
		return r;
	/* Through the engine: its bucket dir resolved beneath the root. */
	pthread_mutex_lock(&F(t)->lock);
	r = kv_io_del(F(t)->io, key);
	pthread_mutex_unlock(&F(t)->lock);
	return r;
}

static int file_stat(struct kv_tier *t, struct kv_tier_stat *st)
{
	struct statvfs v;

	if (fstatvfs(F(t)->rootfd, &v) < 0)
		return -errno;
	st->kind = "file";
	st->capacity_bytes = (uint64_t)v.f_blocks * v.f_frsize;
	st->used_bytes = (uint64_t)(v.f_blocks - v.f_bfree) * v.f_frsize;
	return 0;
}

static void file_close(struct kv_tier *t)
{
	struct ftier *f = F(t);

	for (unsigned i = 0; i < CONFIGS_KNOWN; i++)
		free(f->configs[i]);
	kv_io_close(f->io);
	close(f->rootfd);
	free(f->root);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

/* Under f->lock. */
static int config_known_locked(const struct ftier *f, const char *model_dir)
{
	for (unsigned i = 0; i < CONFIGS_KNOWN; i++)
		if (f->configs[i] && !strcmp(f->configs[i], model_dir))
			return 1;
	return 0;
}

static int config_known(struct ftier *f, const char *model_dir)
{
	int known;

	pthread_mutex_lock(&f->lock);
	known = config_known_locked(f, model_dir);
	pthread_mutex_unlock(&f->lock);
	return known;
}

static void config_remember(struct ftier *f, const char *model_dir)
{
	char *copy = strdup(model_dir);

	if (!copy)
		return;
	pthread_mutex_lock(&f->lock);
	if (config_known_locked(f, model_dir)) {
		free(copy);
	} else {
		free(f->configs[f->next_config]);
		f->configs[f->next_config] = copy;
		f->next_config = (f->next_config + 1) % CONFIGS_KNOWN;
	}
	pthread_mutex_unlock(&f->lock);
}

static int file_config_get(struct kv_tier *t, const char *model_dir, char **text,
			   size_t *len)
{
	struct ftier *f = F(t);
	char *mine = NULL;
	size_t n;
	int r;

	if (!text && config_known(f, model_dir))
		return 0;
	r = kv_config_read(f->rootfd, model_dir, text ? text : &mine, len ? len : &n);
	free(mine);
	if (r == 0)
		config_remember(f, model_dir);
	return r;
}

/* The dir the config names must be model_dir: a block never lands under
 * a config that is not its own. */
static int file_config_put(struct kv_tier *t, const char *model_dir, const char *text,
			   size_t len)
{
	struct kv_config *cfg;
	char dir[KV_NAME_MAX + 1];
	int r = kv_config_parse(text, len, &cfg);

	if (r < 0)
		return r;
	r = kv_config_ensure_model_dir(F(t)->rootfd, cfg, dir, sizeof(dir));
	if (r == 0 && strcmp(dir, model_dir))
		r = -KV_EFINGERPRINT;
	kv_config_free(cfg);
	if (r == 0)
		config_remember(F(t), model_dir);
	return r;
}

static const struct kv_tier_ops file_ops = {
	.put = file_put,
	.get = file_get,
	.has = file_has,
	.del = file_del,
	.stat = file_stat,
	.close = file_close,
	.size = file_size,
	.get_tail = file_get_tail,
	.list = file_list,
	.batch_stream = file_batch_stream,
	.config_get = file_config_get,
	.config_put = file_config_put,
};

int kv_tier_file_open(const char *root, const struct kv_io_opts *opts,
		      struct kv_tier **out)
{
	pthread_mutexattr_t attr;
	struct ftier *f;
	int r;

	if (!root)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	kvi_tier_init(&f->base, &file_ops);
	/* Recursive: a batch's callbacks ask the tier for sizes under its lock. */
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	r = -pthread_mutex_init(&f->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	if (r) {
		free(f);
		return r;
	}
	f->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->rootfd < 0) {
		r = -errno;
		goto fail;
	}
	f->root = strdup(root);
	r = f->root ? kv_io_open(root, opts, &f->io) : -ENOMEM;
	if (r < 0) {
		close(f->rootfd);
		goto fail;
	}
	*out = &f->base;
	return 0;
fail:
	pthread_mutex_destroy(&f->lock);
	free(f->root);
	free(f);
	return r;
}
