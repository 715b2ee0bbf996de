/*
 * The daemon tier: kvoffd's RAM tier through one client connection,
 * shared under a lock.  Keys are layout block paths, parsed into the
 * block refs the protocol carries; the daemon's own file tier sits
 * below it on the daemon's side, so this tier chains to nothing here.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <kv/errors.h>
#include <kv/layout.h>
#include <kv/offd.h>
#include "tier_impl.h"

struct dtier {
	struct kv_tier base;
	pthread_mutex_t lock;
	struct kv_offd *c;
};

static struct dtier *D(struct kv_tier *t)
{
	return (struct dtier *)t;
}

static int daemon_put(struct kv_tier *t, const char *key, const void *buf, size_t len)
{
	struct kv_block_ref ref;
	int r = kv_layout_block_parse(key, &ref);

	if (r < 0)
		return r;
	pthread_mutex_lock(&D(t)->lock);
	r = kv_offd_put(D(t)->c, &ref, buf, len);
	pthread_mutex_unlock(&D(t)->lock);
	return r;
}

static int daemon_get(struct kv_tier *t, const char *key, void *buf, size_t cap,
		      size_t *len)
{
	struct kv_block_ref ref;
	int r = kv_layout_block_parse(key, &ref);

	if (r < 0)
		return r;
	pthread_mutex_lock(&D(t)->lock);
	r = kv_offd_get(D(t)->c, &ref, buf, cap, len);
	pthread_mutex_unlock(&D(t)->lock);
	return r;
}

/* The tail straight from the pinned slot: only the bytes asked for move. */
static int daemon_get_tail(struct kv_tier *t, const char *key, void *buf, size_t len)
{
	struct kv_block_ref ref;
	const void *src;
	uint32_t slot;
	size_t n;
	int r = kv_layout_block_parse(key, &ref), rr;

	if (r < 0)
		return r;
	pthread_mutex_lock(&D(t)->lock);
	r = kv_offd_lookup(D(t)->c, &ref, &slot, &src, &n);
	if (r == 0) {
		if (n >= len)
			memcpy(buf, (const char *)src + n - len, len);
		else
			r = -KV_ESHORT;
		rr = kv_offd_release(D(t)->c, slot);
		r = r ? r : rr;
	}
	pthread_mutex_unlock(&D(t)->lock);
	return r;
}

static int daemon_has(struct kv_tier *t, const char *key)
{
	struct kv_block_ref ref;
	int r = kv_layout_block_parse(key, &ref);

	if (r < 0)
		return r;
	pthread_mutex_lock(&D(t)->lock);
	r = kv_offd_has(D(t)->c, &ref, NULL);
	pthread_mutex_unlock(&D(t)->lock);
	return r;
}

/* The protocol deletes nothing: blocks leave the daemon by its LRU. */
static int daemon_del(struct kv_tier *t, const char *key)
{
	(void)t;
	(void)key;
	return -EOPNOTSUPP;
}

static int daemon_stat(struct kv_tier *t, struct kv_tier_stat *st)
{
	struct kv_offd_stats s;
	int r;

	pthread_mutex_lock(&D(t)->lock);
	r = kv_offd_stats(D(t)->c, &s);
	pthread_mutex_unlock(&D(t)->lock);
	if (r < 0)
		return r;
	st->kind = "daemon";
	st->blocks = s.blocks;
	st->used_bytes = s.pool_bytes_used;
	st->capacity_bytes = s.pool_bytes;
	st->block_max_bytes = s.slot_bytes;
	return 0;
}

struct dlist {
	const struct kv_tier_list_opts *o;
	kv_tier_list_fn fn;
	void *arg;
};

static int dlist_entry(const struct kv_offd_entry *o, void *arg)
{
	struct dlist *l = arg;
	char key[2 * KV_NAME_MAX + KV_HASH_MAX_LEN + 32];
	struct kv_tier_entry e = {
		.key = key, .ref = o->ref, .size_bytes = o->size_bytes,
		.fields = KV_TIER_ENTRY_RAM, .pins = o->pins, .on_disk = o->on_disk,
	};

	if (!kv_layout_model_matches(l->o->model, o->ref.model_dir) ||
	    (l->o->rank >= 0 && o->ref.rank != (unsigned)l->o->rank) ||
	    kv_layout_block_path_ref(&o->ref, key, sizeof(key)) < 0)
		return 0;
	return l->fn(&e, l->arg);
}

static int daemon_list(struct kv_tier *t, const struct kv_tier_list_opts *o,
		       kv_tier_list_fn fn, void *arg)
{
	struct dlist l = { .o = o, .fn = fn, .arg = arg };
	int r;

	pthread_mutex_lock(&D(t)->lock);
	r = kv_offd_list(D(t)->c, dlist_entry, &l);
	pthread_mutex_unlock(&D(t)->lock);
	return r;
}

static void daemon_close(struct kv_tier *t)
{
	struct dtier *d = D(t);

	kv_offd_close(d->c);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* No batch_stream: tier.c's loop runs a batch over the one connection
 * and stops it when the connection is lost. */
static const struct kv_tier_ops daemon_ops = {
	.put = daemon_put,
	.get = daemon_get,
	.has = daemon_has,
	.del = daemon_del,
	.stat = daemon_stat,
	.close = daemon_close,
	.get_tail = daemon_get_tail,
	.list = daemon_list,
};

int kv_tier_daemon_open(const char *socket_path, unsigned timeout_ms,
			struct kv_tier **out)
{
	struct dtier *d;
	int r;

	if (!socket_path || !out)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	kvi_tier_init(&d->base, &daemon_ops);
	r = -pthread_mutex_init(&d->lock, NULL);
	if (r == 0) {
		r = kv_offd_connect_timeout(socket_path, timeout_ms, &d->c);
		if (r < 0)
			pthread_mutex_destroy(&d->lock);
	}
	if (r < 0) {
		free(d);
		return r;
	}
	*out = &d->base;
	return 0;
}
