/*
 * The object-store tier: a bucket root through the S3 engine.  Keys are
 * layout block paths; each is stored at the key vLLM's obj tier computes
 * ("PREFIX//<path>") and found at that key or at the single-slash form
 * another client may have sent.  A put keeps the block's xxh3 in the
 * object's metadata; a get verifies it where present.  S3 keeps no
 * access time: a block's last use is its Last-Modified or a later use
 * recorded in the root's journals (kv/lastuse.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <kv/errors.h>
#include <kv/integrity.h>
#include <kv/lastuse.h>
#include <kv/layout.h>
#include <kv/units.h>
#include "store/s3.h"
#include "tier_impl.h"
#include "util/error.h"

struct stier {
	struct kv_tier base;
	struct kvi_s3 *s3;
	unsigned flags;		/* KV_IO_REPLACE, KV_IO_NO_CHECKSUM */
	atomic_int unconditional;	/* the server refused If-None-Match:
					   a put that keeps asks first */
	pthread_mutex_t forms_lock;	/* one look at the key forms at a time */
	_Atomic int64_t forms_at;	/* when the root's top level was last
					   listed; 0: never */
	atomic_int one_form;		/* ... and held vLLM's "PREFIX//" alone */
	atomic_int missed;		/* a batch has missed at vLLM's key */
};

/* How long a look at the root's key forms holds: a client that starts
 * writing single-slash keys is seen within this. */
#define FORMS_TTL_NS	1000000000LL

static struct stier *S(struct kv_tier *t)
{
	return (struct stier *)t;
}

static int check_key(const char *key)
{
	struct kv_block_ref ref;

	return kv_layout_block_parse(key, &ref);
}

static void hex16(uint64_t v, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)v);
}

/* A finished GET of a whole block: its checksum, where one was kept. */
static int verify(const struct stier *st, const struct kvi_s3_op *op, const char *key)
{
	char want[17];

	if (st->flags & KV_IO_NO_CHECKSUM || !op->meta_xxh3[0])
		return 0;
	hex16(kv_xxh3(op->dst, op->got), want);
	if (strcmp(want, op->meta_xxh3))
		return kvi_fail(-KV_ECHECKSUM, "'%s': xxh3 %s, metadata says %s", key, want,
				op->meta_xxh3);
	return 0;
}

/*
 * A block is at vLLM's key ("PREFIX//<path>") or, sent by another client,
 * at the single-slash form.  A miss at the first asks the second only
 * while the root's top level has a single-slash dir: one listing of it
 * (a page with the delimiter) saves a HEAD per miss on a bucket only vLLM
 * fills.  A root that cannot be listed (no ListBucket right) is asked in
 * both forms.
 */
static int forms_stale(struct stier *st)
{
	int64_t at = atomic_load(&st->forms_at);

	return !at || kv_monotonic_ns() - at >= FORMS_TTL_NS;
}

static int other_form(struct stier *st)
{
	return forms_stale(st) || !atomic_load(&st->one_form);
}

/* List the top level again where the last look is stale: one thread at
 * a time, the others going on by the last answer.  Never inside a batch
 * (kvi_s3_run): s3_batch looks before one, once a batch has missed, and
 * after one that missed. */
static void forms_look(struct stier *st)
{
	if (!forms_stale(st) || pthread_mutex_trylock(&st->forms_lock))
		return;
	if (forms_stale(st)) {
		atomic_store(&st->one_form, kvi_s3_other_form(st->s3) == 0);
		atomic_store(&st->forms_at, kv_monotonic_ns());
	}
	pthread_mutex_unlock(&st->forms_lock);
}

/* Run op on key's vLLM form, then, if absent there, on the other. */
static int on_either(struct stier *st, const char *rel, struct kvi_s3_op *op, char *key,
		     size_t len)
{
	int rc = kvi_s3_key(st->s3, rel, 1, key, len);

	if (rc < 0)
		return rc;
	op->key = key;
	rc = kvi_s3_do(st->s3, op);
	if (rc != -ENOENT)
		return rc;
	forms_look(st);
	if (!other_form(st))
		return rc;
	free(op->resp);
	op->resp = NULL;
	if ((rc = kvi_s3_key(st->s3, rel, 0, key, len)) < 0)
		return rc;
	return kvi_s3_do(st->s3, op);
}

/*
 * A server without conditional writes answers a PUT with If-None-Match
 * 501 (or 400): from then on this handle keeps a block by asking first,
 * a HEAD in either key form, then a plain PUT.  (Two writers may both
 * find it absent and both write it: the same bytes, as the key names
 * them.)
 */
static int condition_refused(struct stier *st, const struct kvi_s3_op *op)
{
	if (!kvi_s3_condition_refused(op))
		return 0;
	atomic_store(&st->unconditional, 1);
	return 1;
}

static int head_of(struct stier *st, const char *rel, struct kvi_s3_op *head, char *key,
		   size_t len);

static int s3_put(struct kv_tier *t, const char *rel, const void *buf, size_t len)
{
	struct stier *st = S(t);
	char key[KVI_S3_KEY_MAX + 1], sum[17];
	struct kvi_s3_op op;
	int keep = !(st->flags & KV_IO_REPLACE), rc = check_key(rel);

	if (rc < 0)
		return rc;
	if (!(st->flags & KV_IO_NO_CHECKSUM))
		hex16(kv_xxh3(buf, len), sum);
	do {
		if (keep && atomic_load(&st->unconditional)) {
			rc = head_of(st, rel, &op, key, sizeof(key));
			if (rc != -ENOENT)
				return rc;	/* 0: there already, kept */
		}
		if ((rc = kvi_s3_key(st->s3, rel, 1, key, sizeof(key))) < 0)
			return rc;
		op = (struct kvi_s3_op){ .method = KVI_S3_PUT, .key = key, .body = buf,
					 .body_len = len };
		if (!(st->flags & KV_IO_NO_CHECKSUM))
			op.xxh3 = sum;
		if (keep && !atomic_load(&st->unconditional))
			op.flags |= KVI_S3_IF_NONE_MATCH;
		rc = kvi_s3_do(st->s3, &op);
		free(op.resp);
	} while (condition_refused(st, &op));
	/* Already there: kept, as the file tier keeps it. */
	return rc == -EEXIST ? 0 : rc;
}

static int s3_get(struct kv_tier *t, const char *rel, void *buf, size_t cap, size_t *len)
{
	struct stier *st = S(t);
	char key[KVI_S3_KEY_MAX + 1];
	struct kvi_s3_op op = { .method = KVI_S3_GET, .dst = buf, .cap = cap };
	int rc = check_key(rel);

	if (rc < 0)
		return rc;
	rc = on_either(st, rel, &op, key, sizeof(key));
	free(op.resp);
	if (rc == 0)
		rc = verify(st, &op, rel);
	if (rc == 0)
		*len = op.got;
	return rc;
}

static int s3_size(struct kv_tier *t, const char *rel, uint64_t *size)
{
	char key[KVI_S3_KEY_MAX + 1];
	struct kvi_s3_op head;
	int rc = head_of(S(t), rel, &head, key, sizeof(key));

	if (rc == 0)
		*size = head.size;
	return rc;
}

static int s3_has(struct kv_tier *t, const char *rel)
{
	uint64_t size;

	return s3_size(t, rel, &size);
}

static int s3_get_tail(struct kv_tier *t, const char *rel, void *buf, size_t len)
{
	struct stier *st = S(t);
	char key[KVI_S3_KEY_MAX + 1];
	struct kvi_s3_op op = { .method = KVI_S3_GET, .dst = buf, .cap = len, .tail = len,
				.flags = KVI_S3_TAIL };
	int rc = check_key(rel);

	if (rc < 0)
		return rc;
	if (len == 0)
		return s3_has(t, rel);
	rc = on_either(st, rel, &op, key, sizeof(key));
	free(op.resp);
	/* Verified only when the tail is the whole block. */
	if (rc == 0 && op.size == len)
		rc = verify(st, &op, rel);
	return rc;
}

/* A HEAD of a layout path's object, in either key form: key gets the
 * form found. */
static int head_of(struct stier *st, const char *rel, struct kvi_s3_op *head, char *key,
		   size_t len)
{
	int rc = check_key(rel);

	if (rc < 0)
		return rc;
	memset(head, 0, sizeof(*head));
	head->method = KVI_S3_HEAD;
	rc = on_either(st, rel, head, key, len);
	free(head->resp);
	head->resp = NULL;
	return rc;
}

/* A block's checksum as its body comes, up to the size it had. */
struct hashing {
	struct kv_xxh3_state *st;
	uint64_t size;
};

static int hash_piece(struct kvi_s3_op *op, const char *data, size_t len)
{
	struct hashing *h = op->user;

	/* A retry starts over. */
	if (op->got == 0) {
		kv_xxh3_free(h->st);
		h->st = NULL;
		if (kv_xxh3_new(&h->st) < 0)
			return -ENOMEM;
	}
	if (op->got + len > h->size)
		return kvi_fail(-ESTALE, "over %llu bytes now", (unsigned long long)h->size);
	kv_xxh3_update(h->st, data, len);
	return 0;
}

/* The checksum of the body, never the body: what the server says of
 * its size takes no memory.  size: as listed, UINT64_MAX unknown. */
static int s3_verify(struct kv_tier *t, const char *rel, uint64_t size)
{
	struct stier *st = S(t);
	char key[KVI_S3_KEY_MAX + 1];
	struct kvi_s3_op head, get = { .method = KVI_S3_GET, .sink = hash_piece };
	struct hashing h = { NULL, 0 };
	const char *kept;
	char want[17];
	int rc;

	kvi_error_clear();
	rc = head_of(st, rel, &head, key, sizeof(key));
	if (rc < 0)
		return rc;
	if (size != UINT64_MAX && head.size != size)
		return kvi_fail(-ESTALE, "%llu bytes now, %llu when listed",
				(unsigned long long)head.size, (unsigned long long)size);
	if (!head.meta_xxh3[0])
		return -ENODATA;
	h.size = head.size;
	get.key = key;
	get.user = &h;
	rc = kvi_s3_do(st->s3, &get);
	free(get.resp);
	if (rc == 0) {
		hex16(h.st ? kv_xxh3_digest(h.st) : kv_xxh3("", 0), want);
		kept = get.meta_xxh3[0] ? get.meta_xxh3 : head.meta_xxh3;
		if (strcmp(want, kept))
			rc = kvi_fail(-KV_ECHECKSUM, "xxh3 %s, metadata says %s", want, kept);
	}
	kv_xxh3_free(h.st);
	return rc;
}

static int s3_del(struct kv_tier *t, const char *rel)
{
	struct stier *st = S(t);
	char key[KVI_S3_KEY_MAX + 1];
	struct kvi_s3_op head, del = { .method = KVI_S3_DELETE };
	int rc = head_of(st, rel, &head, key, sizeof(key));

	if (rc < 0)
		return rc;
	del.key = key;
	rc = kvi_s3_do(st->s3, &del);
	free(del.resp);
	return rc;
}

static int s3_stat(struct kv_tier *t, struct kv_tier_stat *out)
{
	(void)t;
	out->kind = "s3";
	out->blocks = 0;
	out->used_bytes = 0;
	out->capacity_bytes = 0;
	return 0;
}

static void s3_close(struct kv_tier *t)
{
	struct stier *st = S(t);

	kvi_s3_close(st->s3);
	pthread_mutex_destroy(&st->forms_lock);
	free(st);
}

/* ---- listing ---- */

struct slist {
	struct stier *st;
	struct kv_uses *uses;
	kv_tier_list_fn fn;
	void *arg;
};

static int on_listed(const struct kvi_s3_listed *o, void *arg)
{
	struct slist *l = arg;
	struct kv_tier_entry e;

	memset(&e, 0, sizeof(e));
	if (kv_layout_block_parse(o->rel, &e.ref) < 0)
		return 0;
	e.key = o->rel;
	e.size_bytes = o->size;
	e.fields = KV_TIER_ENTRY_FILE;
	e.alloc_bytes = o->size;
	e.atime_ns = e.mtime_ns = o->mtime_ns;
	e.last_use_ns = kv_last_use_ns(l->uses, o->rel, o->mtime_ns);
	return l->fn(&e, l->arg);
}

static int s3_list(struct kv_tier *t, const struct kv_tier_list_opts *o, kv_tier_list_fn fn,
		   void *arg)
{
	struct stier *st = S(t);
	struct slist l = { st, NULL, fn, arg };
	int rc = kvi_s3_list_all(st->s3, o ? o->model : NULL, o ? o->rank : -1, &l.uses,
				 on_listed, &l);
	kv_uses_free(l.uses);
	return rc;
}

/* ---- batches: many requests in flight ---- */

struct sreq {
	struct kvi_s3_op op;
	struct kv_tier_req *req;
	char key[KVI_S3_KEY_MAX + 1];
	char sum[17];
	int slash;		/* the key form being tried */
	int asking, asked;	/* PUT: a HEAD first (condition_refused) */
	struct sreq *next;	/* free list, or the queue to try again */
};

struct sbatch {
	struct stier *st;
	kv_tier_next_fn next;
	kv_tier_done_fn done;
	void *arg;
	struct sreq *free, *again;
	int stop;
	int failed;		/* answered here */
	int missed;		/* a miss at vLLM's key: forms_look after */
};

/* r's PUT as its handle and the server allow: with If-None-Match where
 * it keeps a block there already; on a server without conditional
 * writes a HEAD first where the handle keeps, a plain PUT where it
 * replaces anyway (keep only saved a write). */
static void start_put(struct sbatch *b, struct sreq *r)
{
	struct kv_tier_req *req = r->req;
	int replace = b->st->flags & KV_IO_REPLACE;
	int keeps = !replace || req->keep;
	int unconditional = atomic_load(&b->st->unconditional);

	/* At vLLM's key (again, after a HEAD at the other): where a PUT
	 * goes, and a HEAD asks first. */
	if (!r->slash)
		(void)kvi_s3_key(b->st->s3, req->key, 1, r->key, sizeof(r->key));
	r->slash = 1;
	memset(&r->op, 0, sizeof(r->op));
	r->op.key = r->key;
	r->op.priv = r;
	r->asking = keeps && unconditional && !replace && !r->asked;
	if (r->asking) {
		r->op.method = KVI_S3_HEAD;
		return;
	}
	r->op.method = KVI_S3_PUT;
	r->op.body = req->buf;
	r->op.body_len = req->len;
	if (!(b->st->flags & KV_IO_NO_CHECKSUM))
		r->op.xxh3 = r->sum;
	if (keeps && !unconditional)
		r->op.flags = KVI_S3_IF_NONE_MATCH;
}

static int batch_next(void *arg, struct kvi_s3_op **out)
{
	struct sbatch *b = arg;
	struct sreq *r;
	struct kv_tier_req *req;
	int rc;

	if ((r = b->again)) {
		b->again = r->next;
		*out = &r->op;
		return 1;
	}
	while (!b->stop) {
		rc = b->next(b->arg, &req);
		if (rc <= 0) {
			if (rc < 0)
				b->stop = rc;
			return rc;
		}
		req->done = 0;
		req->existed = 0;
		rc = check_key(req->key);
		r = NULL;
		if (rc == 0 && (r = b->free))
			b->free = r->next;
		else if (rc == 0 && !(r = malloc(sizeof(*r))))
			rc = -ENOMEM;
		if (rc == 0 && (rc = kvi_s3_key(b->st->s3, req->key, 1, r->key,
						sizeof(r->key))) < 0) {
			r->next = b->free;
			b->free = r;
		}
		if (rc < 0) {
			req->result = rc;
			b->failed++;
			b->done(b->arg, req);
			continue;
		}
		memset(&r->op, 0, sizeof(r->op));
		r->req = req;
		r->slash = 1;
		r->asking = r->asked = 0;
		r->op.key = r->key;
		r->op.priv = r;
		switch (req->op) {
		case KV_TIER_OP_PUT:
			if (!(b->st->flags & KV_IO_NO_CHECKSUM))
				hex16(kv_xxh3(req->buf, req->len), r->sum);
			start_put(b, r);
			break;
		case KV_TIER_OP_GET:
			r->op.method = KVI_S3_GET;
			r->op.dst = req->buf;
			r->op.cap = req->len;
			break;
		case KV_TIER_OP_GET_TAIL:
			r->op.method = KVI_S3_GET;
			r->op.dst = req->buf;
			r->op.cap = req->len;
			r->op.tail = req->len;
			r->op.flags = KVI_S3_TAIL;
			break;
		case KV_TIER_OP_HAS:
			r->op.method = KVI_S3_HEAD;
			break;
		}
		*out = &r->op;
		return 1;
	}
	return 0;
}

static void batch_done(void *arg, struct kvi_s3_op *op)
{
	struct sbatch *b = arg;
	struct sreq *r = op->priv;
	struct kv_tier_req *req = r->req;
	int rc = op->result;

	free(op->resp);
	op->resp = NULL;
	/* Not at vLLM's key: try the other form before saying so. */
	if (rc == -ENOENT && r->slash && (req->op != KV_TIER_OP_PUT || r->asking)) {
		b->missed = 1;
		if (other_form(b->st) &&
		    kvi_s3_key(b->st->s3, req->key, 0, r->key, sizeof(r->key)) == 0) {
			r->slash = 0;
			r->next = b->again;
			b->again = r;
			return;
		}
	}
	/* Asked first and absent in either form, or the server refused the
	 * condition: the PUT (again) as start_put makes it now. */
	if ((r->asking && rc == -ENOENT) ||
	    (req->op == KV_TIER_OP_PUT && condition_refused(b->st, op))) {
		r->asked = r->asking;
		start_put(b, r);
		r->next = b->again;
		b->again = r;
		return;
	}
	/* There already (412, or found when asked first): kept. */
	if (req->op == KV_TIER_OP_PUT && (rc == -EEXIST || (r->asking && rc == 0))) {
		rc = 0;
		req->existed = 1;
	}
	if (rc == 0) {
		switch (req->op) {
		case KV_TIER_OP_PUT:
			req->done = req->len;
			break;
		case KV_TIER_OP_GET:
			rc = verify(b->st, op, req->key);
			req->done = op->got;
			break;
		case KV_TIER_OP_GET_TAIL:
			if (op->size == req->len)
				rc = verify(b->st, op, req->key);
			req->done = op->got;
			break;
		case KV_TIER_OP_HAS:
			req->done = op->size;
			break;
		}
	}
	req->result = rc;
	if (rc)
		b->failed++;
	r->next = b->free;
	b->free = r;
	b->done(b->arg, req);
}

static int s3_batch(struct kv_tier *t, kv_tier_next_fn next, kv_tier_done_fn done, void *arg)
{
	struct sbatch b = { .st = S(t), .next = next, .done = done, .arg = arg };
	struct sreq *r;
	int rc;

	if (atomic_load(&b.st->missed))
		forms_look(b.st);
	rc = kvi_s3_run(b.st->s3, 0, batch_next, batch_done, &b);
	if (b.missed) {
		atomic_store(&b.st->missed, 1);
		forms_look(b.st);
	}
	while ((r = b.free)) {
		b.free = r->next;
		free(r);
	}
	if (rc < 0)
		return rc;
	if (b.stop < 0)
		return b.stop;
	/* Not kvi_s3_run's count: it counts a miss the other key form then
	 * answered. */
	return b.failed;
}

static const struct kv_tier_ops s3_ops = {
	.flags = KVI_TIER_PUT_KEEPS,
	.put = s3_put,
	.get = s3_get,
	.has = s3_has,
	.del = s3_del,
	.stat = s3_stat,
	.close = s3_close,
	.size = s3_size,
	.get_tail = s3_get_tail,
	.list = s3_list,
	.batch_stream = s3_batch,
	.verify = s3_verify,
};

int kv_tier_s3_open(const char *url, const struct kv_io_opts *opts, struct kv_tier **out)
{
	struct stier *st = calloc(1, sizeof(*st));
	int rc;

	if (!st)
		return -ENOMEM;
	rc = kvi_s3_open(url, &st->s3);
	if (rc < 0) {
		free(st);
		return rc;
	}
	kvi_tier_init(&st->base, &s3_ops);
	st->flags = opts ? opts->flags : 0;
	pthread_mutex_init(&st->forms_lock, NULL);
	*out = &st->base;
	return 0;
}

int kv_root_is_s3(const char *root)
{
	return kvi_s3_is_url(root);
}

int kv_root_check(const char *root)
{
	kvi_error_clear();
	if (!root || !*root)
		return kvi_fail(-EINVAL, "no root");
	return kvi_s3_is_url(root) ? kvi_s3_url_check(root) : 0;
}
