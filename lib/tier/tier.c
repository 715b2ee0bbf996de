/*
 * The tier interface: argument checks, chaining (spill, read-through,
 * promotion, write-through), counters and batches, over the
 * implementations in tier_mem.c, tier_file.c, tier_gpu.c and
 * tier_daemon.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <kv/errors.h>
#include <kv/layout.h>
#include "tier_impl.h"

void kvi_tier_init(struct kv_tier *t, const struct kv_tier_ops *ops)
{
	memset(t, 0, sizeof(*t));
	t->ops = ops;
}

/* The one place a tier's change is counted and reported. */
static void report(struct kv_tier *t, enum kv_tier_change change, const char *key,
		   uint64_t size)
{
	struct kv_tier_report r = { .change = change, .key = key, .size = size };

	switch (change) {
	case KV_TIER_STORED:
		atomic_fetch_add(&t->puts, 1);
		break;
	case KV_TIER_PROMOTED:
		atomic_fetch_add(&t->promotions, 1);
		break;
	case KV_TIER_MOVED:
		atomic_fetch_add(&t->spills, 1);
		/* fall through: a spill is an eviction too */
	case KV_TIER_DROPPED:
		atomic_fetch_add(&t->evictions, 1);
		break;
	case KV_TIER_DELETED:
		break;
	}
	if (t->report)
		t->report(t->report_arg, t, &r);
}

void kv_tier_report_to(struct kv_tier *t, kv_tier_report_fn fn, void *arg)
{
	if (!t)
		return;
	t->report = fn;
	t->report_arg = fn ? arg : NULL;
}

static int bad_key(const char *key)
{
	return !key || !*key;
}

int kv_tier_copy_config(struct kv_tier *dst, struct kv_tier *src, const char *key)
{
	struct kv_block_ref ref;
	char *text = NULL;
	size_t len;
	int r;

	if (!dst || !src || bad_key(key))
		return -EINVAL;
	if (!dst->ops->config_put || !dst->ops->config_get || !src->ops->config_get ||
	    kv_layout_block_parse(key, &ref) < 0 || ref.layout != KV_LAYOUT_V1)
		return -EOPNOTSUPP;
	if (dst->ops->config_get(dst, ref.model_dir, NULL, NULL) == 0)
		return 0;
	r = src->ops->config_get(src, ref.model_dir, &text, &len);
	if (r == 0)
		r = dst->ops->config_put(dst, ref.model_dir, text, len);
	free(text);
	return r;
}

int kv_tier_put_config(struct kv_tier *t, const char *model_dir, const char *text, size_t len)
{
	if (!t || !model_dir || !*model_dir || !text || !len)
		return -EINVAL;
	if (!t->ops->config_put)
		return -EOPNOTSUPP;
	return t->ops->config_put(t, model_dir, text, len);
}

/*
 * A block just copied into dst from src's chain: its model dir carries
 * its config.json there as on the tier it came from, as vLLM's readers
 * and kvls --check expect of every cache root.  Best effort: the block
 * is stored either way.
 */
static void carry_config(struct kv_tier *dst, struct kv_tier *src, const char *key)
{
	for (; src; src = src->lower)
		if (src != dst && kv_tier_copy_config(dst, src, key) == 0)
			return;
}

/* This tier alone: has, or size where a tier answers presence that way. */
static int tier_has(struct kv_tier *t, const char *key)
{
	uint64_t size;

	return t->ops->has ? t->ops->has(t, key) : t->ops->size(t, key, &size);
}

/* This tier alone: the block's size (KV_TIER_SIZE_UNKNOWN where only its
 * presence is known), or -ENOENT. */
static int tier_size(struct kv_tier *t, const char *key, uint64_t *size)
{
	*size = KV_TIER_SIZE_UNKNOWN;
	return t->ops->size ? t->ops->size(t, key, size) : tier_has(t, key);
}

/*
 * A block being moved down: m names it and says where it went; its
 * bytes are at hand (at) or read from the tier it leaves on first need.
 */
struct placing {
	struct kv_tier_demotion *m;
	const void *at;
	int err;		/* reading its bytes failed: not placed */
	int open;		/* still to place */
	struct kv_tier_req req;
};

static void placing_init(struct placing *p, struct kv_tier_demotion *m, const void *at)
{
	*p = (struct placing){ .m = m, .at = at, .open = 1 };
	m->dest = -1;
	m->existed = 0;
	m->refused = 0;
	m->refusal = 0;
}

/* Read p's bytes from the tier it leaves into m's buffer, grown to fit
 * (and to O_DIRECT's rounding). */
static int fetch(struct kv_tier *from, struct placing *p)
{
	struct kv_tier_demotion *m = p->m;
	size_t need = (size_t)m->len + KV_IO_ALIGN, got;
	int r;

	if (need > m->cap) {
		kv_io_buf_free(m->buf);
		m->cap = 0;
		m->buf = kv_io_buf_alloc(need);
		if (!m->buf)
			return -ENOMEM;
		m->cap = need;
	}
	r = from->ops->get(from, m->key, m->buf, m->cap, &got);
	if (r < 0)
		return r;
	if (got != m->len)
		return -KV_ESHORT;	/* rewritten under the move */
	p->at = m->buf;
	return 0;
}

/* One request per open entry, as a tier's batch takes them. */
struct pass {
	struct placing *p;
	size_t count, at;
	enum kv_tier_op op;
	int keep;		/* PUT: keep what is there already */
};

#define REQ_PENDING	1	/* not answered: its batch stopped first */

static int pass_next(void *arg, struct kv_tier_req **out)
{
	struct pass *ps = arg;

	while (ps->at < ps->count) {
		struct placing *p = &ps->p[ps->at++];

		if (!p->open)
			continue;
		p->req = (struct kv_tier_req){ .op = ps->op, .key = p->m->key, .result = REQ_PENDING };
		if (ps->op == KV_TIER_OP_PUT) {
			p->req.buf = (void *)p->at;
			p->req.len = (size_t)p->m->len;
			p->req.keep = ps->keep;
		}
		*out = &p->req;
		return 1;
	}
	return 0;
}

static void pass_done(void *arg, struct kv_tier_req *req)
{
	(void)arg, (void)req;
}

/* Whether t's put keeps a block already there in the same request (a
 * bucket's If-None-Match): then it is not asked first, the put says. */
static int put_keeps(const struct kv_tier *t)
{
	return (t->ops->flags & KVI_TIER_PUT_KEEPS) && t->ops->batch_stream && !t->lower;
}

/* Ask t about (op) every open entry: as one batch where there are
 * several, or where the put keeps, so a bucket has them in flight
 * together; else alone.  Each req.result is 0, -errno, or REQ_PENDING
 * (the batch stopped first). */
static void ask(struct kv_tier *t, struct placing *p, size_t count, enum kv_tier_op op,
		int keep)
{
	struct pass ps = { .p = p, .count = count, .op = op, .keep = keep };

	/* A batch on a chained tier asks its chain: a size must be t's own. */
	if ((count > 1 || keep) && (op == KV_TIER_OP_PUT || !t->lower)) {
		kv_tier_batch_stream(t, pass_next, pass_done, &ps);
		return;
	}
	for (size_t k = 0; k < count; k++) {
		uint64_t size = 0;

		if (!p[k].open)
			continue;
		p[k].req.existed = 0;
		p[k].req.result = op == KV_TIER_OP_PUT ?
				  kv_tier_put(t, p[k].m->key, p[k].at, (size_t)p[k].m->len) :
				  tier_size(t, p[k].m->key, &size);
		p[k].req.done = op == KV_TIER_OP_PUT ? (size_t)p[k].m->len :
				size == KV_TIER_SIZE_UNKNOWN ? SIZE_MAX : (size_t)size;
	}
}

/*
 * The one rule for moving blocks down: each goes to the first of below[]
 * that has a copy of the same size (a key names its content, the block
 * hash, so nothing is written again) or takes one; a tier that refuses
 * it (full, too small, failing) is passed for the next.  A bucket's
 * objects are whole or absent, so there its conditional put is the
 * question and the write at once.
 */
static void place(struct kv_tier *from, struct kv_tier *const *below, unsigned n,
		  struct placing *p, size_t count)
{
	for (unsigned i = 0; i < n; i++) {
		int keeps = put_keeps(below[i]);
		size_t open = 0;

		if (!keeps)
			ask(below[i], p, count, KV_TIER_OP_HAS, 0);
		for (size_t k = 0; k < count; k++) {
			struct kv_tier_demotion *m = p[k].m;

			if (!p[k].open)
				continue;
			if (!keeps && p[k].req.result == 0 && p[k].req.done == m->len) {
				m->dest = (int)i;
				m->existed = 1;
				p[k].open = 0;
			} else if (!p[k].at && (p[k].err = fetch(from, &p[k])) < 0) {
				p[k].open = 0;
			} else {
				open++;
			}
		}
		if (!open)
			return;
		ask(below[i], p, count, KV_TIER_OP_PUT, keeps);
		for (size_t k = 0; k < count; k++) {
			struct kv_tier_demotion *m = p[k].m;
			int r = p[k].req.result == REQ_PENDING ? -ECONNRESET : p[k].req.result;

			if (!p[k].open)
				continue;
			if (r == 0) {
				m->dest = (int)i;
				m->existed = keeps && p[k].req.existed;
				p[k].open = 0;
				carry_config(below[i], from, m->key);
				continue;
			}
			m->refused |= 1u << i;
			if (!m->refusal)
				m->refusal = r;
		}
	}
}

unsigned kvi_tier_spill_to(struct kv_tier *t, struct kv_tier **below)
{
	unsigned n = 0;

	if (t->flags & KV_TIER_SPILL)
		for (struct kv_tier *l = t->lower; l && n < KV_TIER_DEPTH_MAX; l = l->lower)
			below[n++] = l;
	return n;
}

void kvi_tier_evicted(struct kv_tier *t, const struct kv_tier_demotion *m)
{
	report(t, m->dest >= 0 ? KV_TIER_MOVED : KV_TIER_DROPPED, m->key, m->len);
}

int kvi_tier_evicting(struct kv_tier *t, const char *key, const void *buf,
		      size_t len)
{
	struct kv_tier *below[KV_TIER_DEPTH_MAX];
	struct kv_tier_demotion m = { .key = key, .len = len };
	struct placing p;

	placing_init(&p, &m, buf);
	place(t, below, kvi_tier_spill_to(t, below), &p, 1);
	if (m.dest < 0 && m.refused)
		return m.refusal;	/* kept here: a put fails rather than lose it */
	kvi_tier_evicted(t, &m);
	return 0;
}

/* After place: keep or remove the block where it was, and say so. */
static int leave(struct kv_tier *from, struct placing *p, unsigned flags)
{
	struct kv_tier_demotion *m = p->m;
	int r = p->err, gone;

	if ((flags & KV_TIER_DEMOTE_KEEP) && (r < 0 || (m->dest < 0 && m->refused)))
		return r < 0 ? r : m->refusal;
	/* Unreadable (damaged, or gone bad), it leaves too: nothing could
	 * ever read it through again. */
	gone = from->ops->del(from, m->key);
	if (gone == -ENOENT && m->dest < 0 && !m->refused)
		return -ENOENT;	/* removed by someone else: nothing moved */
	if (r == -ENOENT)
		r = 0;
	if (r == 0 && gone < 0 && gone != -ENOENT)
		r = gone;
	if (gone == 0)	/* else still there, or someone else's removal */
		kvi_tier_evicted(from, m);
	return r;
}

int kv_tier_demote_many(struct kv_tier *from, struct kv_tier *const *below, unsigned n,
			struct kv_tier_demotion *m, size_t count, unsigned flags)
{
	struct placing one, *p = &one;
	int failed = 0;

	if (!from || !m || (n && !below) || n > KV_TIER_DEPTH_MAX ||
	    (flags & ~KV_TIER_DEMOTE_KEEP))
		return -EINVAL;
	if (count > 1 && !(p = calloc(count, sizeof(*p))))
		return -ENOMEM;
	for (size_t k = 0; k < count; k++) {
		uint64_t size;
		int r = bad_key(m[k].key) ? -EINVAL : tier_size(from, m[k].key, &size);

		placing_init(&p[k], &m[k], NULL);
		m[k].len = 0;
		m[k].result = r < 0 ? r : size == KV_TIER_SIZE_UNKNOWN ? -EOPNOTSUPP : 0;
		if (m[k].result < 0)
			p[k].open = 0;	/* -ENOENT: nothing to move */
		else
			m[k].len = size;
	}
	place(from, below, n, p, count);
	for (size_t k = 0; k < count; k++) {
		if (m[k].result == 0)
			m[k].result = leave(from, &p[k], flags);
		failed += m[k].result < 0;
	}
	if (p != &one)
		free(p);
	return failed;
}

int kv_tier_demote(struct kv_tier *from, struct kv_tier *const *below, unsigned n,
		   const char *key, unsigned flags, struct kv_tier_demotion *m)
{
	int r;

	if (!m)
		return -EINVAL;
	m->key = key;
	r = kv_tier_demote_many(from, below, n, m, 1, flags);
	return r < 0 ? r : m->result;
}

int kv_tier_put(struct kv_tier *t, const char *key, const void *buf,
		size_t len)
{
	int r;

	if (bad_key(key) || (!buf && len))
		return -EINVAL;
	r = t->ops->put(t, key, buf, len);
	if (r < 0)
		return r;
	report(t, KV_TIER_STORED, key, len);
	if (t->lower && (t->flags & KV_TIER_WRITE_THROUGH)) {
		r = kv_tier_put(t->lower, key, buf, len);
		if (r == 0)
			carry_config(t->lower, t, key);
		return r;
	}
	return 0;
}

int kv_tier_promotes(unsigned flags, struct kv_hits *first_hits, const char *key)
{
	if (flags & KV_TIER_PROMOTE)
		return 1;
	return (flags & KV_TIER_PROMOTE_SECOND_HIT) && first_hits &&
	       kv_hits_second(first_hits, key);
}

int kv_tier_get(struct kv_tier *t, const char *key, void *buf, size_t cap,
		size_t *len)
{
	int r;

	if (bad_key(key) || (!buf && cap) || !len)
		return -EINVAL;
	r = t->ops->get(t, key, buf, cap, len);
	if (r != -ENOENT) {
		if (r == 0)
			atomic_fetch_add(&t->hits, 1);
		return r;
	}
	atomic_fetch_add(&t->misses, 1);
	if (!t->lower)
		return r;
	r = kv_tier_get(t->lower, key, buf, cap, len);
	/* A block that cannot be promoted (too big, a failed spill) is
	 * still a good answer from below. */
	if (r == 0 && kv_tier_promotes(t->flags, t->first_hits, key) &&
	    t->ops->put(t, key, buf, *len) == 0) {
		report(t, KV_TIER_PROMOTED, key, *len);
		carry_config(t, t->lower, key);
	}
	return r;
}

int kv_tier_has(struct kv_tier *t, const char *key)
{
	int r;

	if (bad_key(key))
		return -EINVAL;
	r = tier_has(t, key);
	if (r == -ENOENT && t->lower)
		r = kv_tier_has(t->lower, key);
	return r;
}

int kv_tier_get_tail(struct kv_tier *t, const char *key, void *buf, size_t len)
{
	int r;

	if (bad_key(key) || (!buf && len))
		return -EINVAL;
	r = t->ops->get_tail ? t->ops->get_tail(t, key, buf, len) : -EOPNOTSUPP;
	if (r == -ENOENT && t->lower)
		r = kv_tier_get_tail(t->lower, key, buf, len);
	return r;
}

int kv_tier_size(struct kv_tier *t, const char *key, uint64_t *size)
{
	int r;

	if (bad_key(key) || !size)
		return -EINVAL;
	*size = KV_TIER_SIZE_UNKNOWN;
	r = t->ops->size ? t->ops->size(t, key, size) : tier_has(t, key);
	if (r == -ENOENT && t->lower)
		r = kv_tier_size(t->lower, key, size);
	return r;
}

/* The connection behind a tier is gone: nothing more will succeed. */
static int lost(int r)
{
	return r == -ECONNRESET || r == -EPIPE || r == -KV_EPROTO || r == -ETIMEDOUT;
}

static int run_req(struct kv_tier *t, struct kv_tier_req *req)
{
	uint64_t size;
	int r;

	req->done = 0;
	switch (req->op) {
	case KV_TIER_OP_PUT:
		r = kv_tier_put(t, req->key, req->buf, req->len);
		if (r == 0)
			req->done = req->len;
		return r;
	case KV_TIER_OP_GET:
		return kv_tier_get(t, req->key, req->buf, req->len, &req->done);
	case KV_TIER_OP_GET_TAIL:
		r = kv_tier_get_tail(t, req->key, req->buf, req->len);
		if (r == 0)
			req->done = req->len;
		return r;
	case KV_TIER_OP_HAS:
		r = kv_tier_size(t, req->key, &size);
		if (r == 0)
			req->done = size == KV_TIER_SIZE_UNKNOWN ? SIZE_MAX : (size_t)size;
		return r;
	}
	return -EINVAL;
}

/* A tier's own batch, its caller's callbacks behind these, so that each
 * block a PUT stores is reported as kv_tier_put's would be. */
struct reporting {
	struct kv_tier *t;
	kv_tier_next_fn next;
	kv_tier_done_fn done;
	void *arg;
};

static int reporting_next(void *arg, struct kv_tier_req **req)
{
	struct reporting *rp = arg;

	return rp->next(rp->arg, req);
}

static void reporting_done(void *arg, struct kv_tier_req *req)
{
	struct reporting *rp = arg;

	if (req->op == KV_TIER_OP_PUT && req->result == 0 && !req->existed)
		report(rp->t, KV_TIER_STORED, req->key, req->len);
	rp->done(rp->arg, req);
}

int kv_tier_batch_stream(struct kv_tier *t, kv_tier_next_fn next,
			 kv_tier_done_fn done, void *arg)
{
	struct reporting rp = { .t = t, .next = next, .done = done, .arg = arg };
	struct kv_tier_req *req;
	int r, failed = 0;

	if (!next || !done)
		return -EINVAL;
	/* A chain moves block by block: its spills and promotions are. */
	if (t->ops->batch_stream && !t->lower)
		return t->ops->batch_stream(t, reporting_next, reporting_done, &rp);
	while ((r = next(arg, &req)) == 1) {
		req->result = run_req(t, req);
		if (req->result < 0)
			failed++;
		r = req->result;
		done(arg, req);
		if (lost(r))
			return r;
	}
	return r < 0 ? r : failed;
}

int kv_tier_list(struct kv_tier *t, const struct kv_tier_list_opts *opts,
		 kv_tier_list_fn fn, void *arg)
{
	static const struct kv_tier_list_opts all = { .rank = -1 };

	if (!fn)
		return -EINVAL;
	return t->ops->list ? t->ops->list(t, opts ? opts : &all, fn, arg) : -EOPNOTSUPP;
}

int kv_tier_verify(struct kv_tier *t, const char *key)
{
	return t->ops->verify ? t->ops->verify(t, key, UINT64_MAX) : -EOPNOTSUPP;
}

int kv_tier_verify_size(struct kv_tier *t, const char *key, uint64_t size)
{
	return t->ops->verify ? t->ops->verify(t, key, size) : -EOPNOTSUPP;
}

int kv_tier_del(struct kv_tier *t, const char *key)
{
	int r, rl;

	if (bad_key(key))
		return -EINVAL;
	r = t->ops->del(t, key);
	if (r < 0 && r != -ENOENT)
		return r;
	if (r == 0)
		report(t, KV_TIER_DELETED, key, 0);
	if (!t->lower)
		return r;
	rl = kv_tier_del(t->lower, key);
	if (rl < 0 && rl != -ENOENT)
		return rl;
	return r == 0 || rl == 0 ? 0 : -ENOENT;
}

int kv_tier_stat(struct kv_tier *t, struct kv_tier_stat *st)
{
	int r;

	memset(st, 0, sizeof(*st));
	r = t->ops->stat(t, st);
	if (r < 0)
		return r;
	st->hits = atomic_load(&t->hits);
	st->misses = atomic_load(&t->misses);
	st->puts = atomic_load(&t->puts);
	st->evictions = atomic_load(&t->evictions);
	st->spills = atomic_load(&t->spills);
	st->promotions = atomic_load(&t->promotions);
	return 0;
}

int kv_tier_chain(struct kv_tier *upper, struct kv_tier *lower,
		  unsigned flags)
{
	const unsigned second = KV_TIER_PROMOTE | KV_TIER_PROMOTE_SECOND_HIT;
	int r;

	if (!upper || (flags & ~(KV_TIER_SPILL | KV_TIER_PROMOTE | KV_TIER_WRITE_THROUGH |
				 KV_TIER_PROMOTE_SECOND_HIT)) || (flags & second) == second)
		return -EINVAL;
	for (struct kv_tier *l = lower; l; l = l->lower)
		if (l == upper)
			return -ELOOP;
	if (!lower)
		flags = 0;
	if ((flags & KV_TIER_PROMOTE_SECOND_HIT) && !upper->first_hits &&
	    (r = kv_hits_new(KV_HITS_SLOTS, &upper->first_hits)) < 0)
		return r;
	if (!(flags & KV_TIER_PROMOTE_SECOND_HIT)) {
		kv_hits_free(upper->first_hits);
		upper->first_hits = NULL;
	}
	upper->lower = lower;
	upper->flags = flags;
	return 0;
}

void kv_tier_close(struct kv_tier *t)
{
	if (!t)
		return;
	kv_hits_free(t->first_hits);
	t->ops->close(t);
}
