/*
 * The file tier: a cache root through the io engine.  One kv_io handle
 * serves the tier under a lock, as a handle belongs to one thread at a
 * time.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <kv/errors.h>
#include <kv/layout.h>
#include "tier_impl.h"

struct ftier {
	struct kv_tier base;
	pthread_mutex_t lock;
	struct kv_io *io;
	int rootfd;
};

static struct ftier *F(struct kv_tier *t)
{
	return (struct ftier *)t;
}

/* Only layout paths: they cannot leave the root or name a temp. */
static int check_key(const char *key)
{
	struct kv_block_ref ref;

	return kv_layout_block_parse(key, &ref);
}

static int file_put(struct kv_tier *t, const char *key, const void *buf,
		    size_t len)
{
	struct ftier *f = F(t);
	int r = check_key(key);

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
	int r = check_key(key);

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
	int r = check_key(key);

	if (r < 0)
		return r;
	pthread_mutex_lock(&f->lock);
	r = kv_io_has(f->io, key);
	pthread_mutex_unlock(&f->lock);
	return r;
}

static int file_del(struct kv_tier *t, const char *key)
{
	int r = check_key(key);

	if (r < 0)
		return r;
	return unlinkat(F(t)->rootfd, key, 0) < 0 ? -errno : 0;
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

	kv_io_close(f->io);
	close(f->rootfd);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static const struct kv_tier_ops file_ops = {
	.put = file_put,
	.get = file_get,
	.has = file_has,
	.del = file_del,
	.stat = file_stat,
	.close = file_close,
};

int kv_tier_file_open(const char *root, const struct kv_io_opts *opts,
		      struct kv_tier **out)
{
	struct ftier *f;
	int r;

	if (!root)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	kvi_tier_init(&f->base, &file_ops);
	r = -pthread_mutex_init(&f->lock, NULL);
	if (r) {
		free(f);
		return r;
	}
	f->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->rootfd < 0) {
		r = -errno;
		goto fail;
	}
	r = kv_io_open(root, opts, &f->io);
	if (r < 0) {
		close(f->rootfd);
		goto fail;
	}
	*out = &f->base;
	return 0;
fail:
	pthread_mutex_destroy(&f->lock);
	free(f);
	return r;
}
