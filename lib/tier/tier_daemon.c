/*
 * The daemon tier: kvoffd's RAM tier through one client connection,
 * shared under a lock.  Keys are layout block paths, parsed into the
 * block refs the protocol carries; the daemon's own file tier sits
 * below it on the daemon's side, so this tier chains to nothing here.
 * A lost connection is made again on a later call (kvoffd restarted);
 * while the daemon is away each call fails at once, a refused connect
 * to a local socket being as cheap as a failed request.
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
	struct kv_offd *c;	/* NULL: lost, made again by hold() */
	char *path;
	unsigned timeout_ms;
	int err;		/* why there is no connection */
};

static struct dtier *D(struct kv_tier *t)
{
	return (struct dtier *)t;
}

/* The connection is gone: nothing more will succeed on it. */
static int lost(int r)
{
	return r == -ECONNRESET || r == -EPIPE || r == -KV_EPROTO || r == -ETIMEDOUT;
}

/* Lock the tier and give its connection, made again if it was lost;
 * NULL and *err (the loss, not the connect's refusal) where the daemon
 * cannot be reached now. */
static struct kv_offd *hold(struct dtier *d, int *err)
{
	pthread_mutex_lock(&d->lock);
	if (d->c && kv_offd_closed(d->c)) {
		kv_offd_close(d->c);
		d->c = NULL;
		d->err = -ECONNRESET;
	}
	if (!d->c && kv_offd_connect_timeout(d->path, d->timeout_ms, &d->c) < 0)
		d->c = NULL;
	*err = d->c ? 0 : d->err;
	return d->c;
}

/* Unlock, dropping a connection r says is lost; r. */
static int let_go(struct dtier *d, int r)
{
	if (lost(r) && d->c) {
		kv_offd_close(d->c);
		d->c = NULL;
		d->err = r;
	}
	pthread_mutex_unlock(&d->lock);
	return r;
}

static int daemon_put(struct kv_tier *t, const char *key, const void *buf, size_t len)
{
	struct kv_block_ref ref;
	struct kv_offd *c;
	int r = kv_layout_block_parse(key, &ref);

	if (r < 0)
		return r;
	if ((c = hold(D(t), &r)))
		r = kv_offd_put(c, &ref, buf, len);
	return let_go(D(t), r);
}

static int daemon_get(struct kv_tier *t, const char *key, void *buf, size_t cap,
		      size_t *len)
{
	struct kv_block_ref ref;
	struct kv_offd *c;
	int r = kv_layout_block_parse(key, &ref);

	if (r < 0)
		return r;
	if ((c = hold(D(t), &r)))
		r = kv_offd_get(c, &ref, buf, cap, len);
	return let_go(D(t), r);
}

/* The tail straight from the pinned slot: only the bytes asked for move. */
static int daemon_get_tail(struct kv_tier *t, const char *key, void *buf, size_t len)
{
	struct kv_block_ref ref;
	struct kv_offd *c;
	const void *src;
	uint32_t slot;
	size_t n;
	int r = kv_layout_block_parse(key, &ref), rr;

	if (r < 0)
		return r;
	if ((c = hold(D(t), &r)) && (r = kv_offd_lookup(c, &ref, &slot, &src, &n)) == 0) {
		if (n >= len)
			memcpy(buf, (const char *)src + n - len, len);
		else
			r = -KV_ESHORT;
		rr = kv_offd_release(c, slot);
		r = r ? r : rr;
	}
	return let_go(D(t), r);
}

static int daemon_has(struct kv_tier *t, const char *key)
{
	struct kv_block_ref ref;
	struct kv_offd *c;
	int r = kv_layout_block_parse(key, &ref);

	if (r < 0)
		return r;
	if ((c = hold(D(t), &r)))
		r = kv_offd_has(c, &ref, NULL);
	return let_go(D(t), r);
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
	struct kv_offd *c;
	int r;

	if ((c = hold(D(t), &r)))
		r = kv_offd_stats(c, &s);
	if (let_go(D(t), r) < 0)
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
	struct kv_offd *c;
	int r;

	if ((c = hold(D(t), &r)))
		r = kv_offd_list(c, dlist_entry, &l);
	return let_go(D(t), r);
}

static void daemon_close(struct kv_tier *t)
{
	struct dtier *d = D(t);

	kv_offd_close(d->c);
	pthread_mutex_destroy(&d->lock);
	free(d->path);
	free(d);
}

/* What a gather may hold of the caller's buffers: each is in hand until
 * its done(), and a reader's are as big as the largest slot. */
#define GATHER_BYTES	(64u << 20)

/* The requests of one batch_stream, gathered to go in few round trips. */
struct dbatch {
	struct kv_tier_req *req[KV_OFFD_BATCH_MAX];
	struct kv_block_ref ref[KV_OFFD_BATCH_MAX];
	const char *hash[KV_OFFD_BATCH_MAX];
	void *buf[KV_OFFD_BATCH_MAX];
	size_t len[KV_OFFD_BATCH_MAX];
	size_t got[KV_OFFD_BATCH_MAX];
	int st[KV_OFFD_BATCH_MAX];
};

/* tier.c's checks of a lone request, and the key as the protocol takes it. */
static int check(const struct kv_tier_req *req, struct kv_block_ref *ref)
{
	if ((unsigned)req->op > KV_TIER_OP_HAS || !req->key || !*req->key ||
	    (req->op != KV_TIER_OP_HAS && !req->buf && req->len))
		return -EINVAL;
	return kv_layout_block_parse(req->key, ref);
}

/* Whether request j joins i's run: one *_many call takes one op on one
 * model dir, rank and group.  A tail goes alone. */
static int same_run(const struct dbatch *b, size_t i, size_t j)
{
	return b->req[j]->op == b->req[i]->op && b->req[i]->op != KV_TIER_OP_GET_TAIL &&
	       b->ref[j].rank == b->ref[i].rank && b->ref[j].group == b->ref[i].group &&
	       !strcmp(b->ref[j].model_dir, b->ref[i].model_dir);
}

/* Requests [at, at + n) in one call; each one's outcome in st[] (HAS:
 * where), got[] a GET's size.  The call's own failure, or 0. */
static int run_many(struct kv_tier *t, struct dbatch *b, size_t at, size_t n)
{
	struct kv_offd_keys k = { .model_dir = b->ref[at].model_dir, .rank = b->ref[at].rank,
				  .group = b->ref[at].group, .hashes = b->hash + at, .n = n };
	struct kv_tier_req *q = b->req[at];
	struct kv_offd *c;
	int r = -EINVAL;

	if (q->op == KV_TIER_OP_GET_TAIL) {
		r = daemon_get_tail(t, q->key, q->buf, q->len);
		b->st[at] = r;
		return lost(r) ? r : 0;
	}
	for (size_t i = at; i < at + n; i++) {
		b->hash[i] = b->ref[i].hash;
		b->buf[i] = b->req[i]->buf;
		b->len[i] = b->req[i]->len;
	}
	c = hold(D(t), &r);
	if (c && q->op == KV_TIER_OP_PUT)
		r = kv_offd_put_many(c, &k, (const void *const *)b->buf + at, b->len + at,
				     b->st + at);
	else if (c && q->op == KV_TIER_OP_GET)
		r = kv_offd_get_many(c, &k, b->buf + at, b->len + at, b->got + at, b->st + at);
	else if (c && q->op == KV_TIER_OP_HAS)
		r = kv_offd_has_many(c, &k, b->st + at);
	return let_go(D(t), r);
}

/* Request i's answer as tier.c's lone path gives it, r the call's failure. */
static void answer(struct kv_tier *t, struct dbatch *b, size_t i, int r)
{
	struct kv_tier_req *q = b->req[i];
	int st = b->st[i];

	q->result = r ? r : q->op != KV_TIER_OP_HAS ? st : st > 0 ? 0 : st ? st : -ENOENT;
	q->done = 0;
	if (r)
		return;
	if (q->op == KV_TIER_OP_GET) {
		q->done = b->got[i];	/* on -EFBIG too: the size it needs */
		if (!st || st == -ENOENT)
			atomic_fetch_add(st ? &t->misses : &t->hits, 1);
	} else if (!q->result) {
		q->done = q->op == KV_TIER_OP_HAS ? SIZE_MAX : q->len;
	}
}

/*
 * Requests gathered until next() has none or a call's worth is here,
 * then sent as runs, one round trip's worth of blocks each, not one at
 * a time.  The daemon's put replaces, as a lone put does: keep is not
 * asked.  A lost connection fails every request gathered, and the batch.
 */
static int daemon_batch(struct kv_tier *t, kv_tier_next_fn next, kv_tier_done_fn done,
			void *arg)
{
	struct dbatch *b = malloc(sizeof(*b));
	int r = 1, failed = 0, gone = 0;

	if (!b)
		return -ENOMEM;
	while (r == 1 && !gone) {
		size_t n = 0, bytes = 0;

		while (n < KV_OFFD_BATCH_MAX && bytes < GATHER_BYTES &&
		       (r = next(arg, &b->req[n])) == 1) {
			struct kv_tier_req *q = b->req[n];

			q->existed = 0;
			q->result = check(q, &b->ref[n]);
			if (q->result < 0) {
				q->done = 0;
				failed++;
				done(arg, q);
				continue;
			}
			bytes += q->op == KV_TIER_OP_HAS ? 0 : q->len;
			n++;
		}
		for (size_t at = 0, m; at < n; at += m) {
			int rr = 0;

			for (m = 1; at + m < n && same_run(b, at, at + m); m++)
				;
			if (!gone) {
				rr = run_many(t, b, at, m);
				if (lost(rr))
					gone = rr;
			}
			for (size_t i = at; i < at + m; i++) {
				answer(t, b, i, gone ? gone : rr);
				failed += b->req[i]->result < 0;
				done(arg, b->req[i]);
			}
		}
		/* Asked again after the done()s, as kv_io's batches are. */
		if (r == 0 && n)
			r = 1;
	}
	free(b);
	return gone ? gone : r < 0 ? r : failed;
}

/* The daemon's file tiers each take it with a block of the dir. */
static int daemon_config_put(struct kv_tier *t, const char *model_dir, const char *text,
			     size_t len)
{
	struct kv_offd *c;
	int r;

	if ((c = hold(D(t), &r)))
		r = kv_offd_config(c, model_dir, text, len);
	return let_go(D(t), r);
}

static const struct kv_tier_ops daemon_ops = {
	.put = daemon_put,
	.get = daemon_get,
	.has = daemon_has,
	.del = daemon_del,
	.stat = daemon_stat,
	.close = daemon_close,
	.get_tail = daemon_get_tail,
	.list = daemon_list,
	.batch_stream = daemon_batch,
	.config_put = daemon_config_put,
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
	d->timeout_ms = timeout_ms;
	if (!(d->path = strdup(socket_path))) {
		free(d);
		return -ENOMEM;
	}
	r = -pthread_mutex_init(&d->lock, NULL);
	if (r == 0) {
		r = kv_offd_connect_timeout(socket_path, timeout_ms, &d->c);
		if (r < 0)
			pthread_mutex_destroy(&d->lock);
	}
	if (r < 0) {
		free(d->path);
		free(d);
		return r;
	}
	*out = &d->base;
	return 0;
}
