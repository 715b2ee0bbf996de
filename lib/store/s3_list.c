/*
 * Every object under a bucket root, listed with many ListObjectsV2
 * requests in flight.  First the root's top levels, "PREFIX/" and, for
 * the keys vLLM writes, "PREFIX//", side by side with a delimiter, which
 * names their dirs; then the use journals found there; then the dirs in
 * the order named, a new one whenever no page of those begun waits.  A
 * rank dir is listed from its start, and when its first page does not
 * hold it all, what is left is cut at the first hex digit of its <hhh>
 * buckets into contiguous key ranges listed side by side (S3 has no end
 * key: a range reads at most one page past its end).  A dir found in
 * both key forms is listed as one: each of its ranges in both forms side
 * by side, their pages merged in path order, so that a path stored under
 * both keys comes to fn as its two objects together.
 * Memory is the pages in flight, a page held for each merge whose other
 * form is in flight, and the names of the dirs not yet listed (bounded),
 * never the number of objects.  Every page goes on from the one before
 * (kvi_s3_list_page): a server that sends one again cannot make a
 * listing go round for ever.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kv/errors.h>
#include <kv/kv.h>
#include <kv/lastuse.h>
#include <kv/layout.h>
#include "store/lastuse.h"
#include "store/s3.h"
#include "util/error.h"

#define SPLIT	16	/* hex digits a rank dir's ranges are cut at */
/* A listing's query: a token, a prefix and a start key, URI-encoded. */
#define QUERY_MAX	(10 * KVI_S3_KEY_MAX + 128)
/* The names of the dirs the top levels name, kept until each is listed:
 * some 60 bytes a rank dir, so a quarter of a million of them. */
#define NAMES_MAX	(16u << 20)

/* An object of a page that waits for the other form's page. */
struct held {
	char *key;
	uint64_t size;
	int64_t mtime_ns;
};

/* One listing: a prefix, optionally a key range within it.  Listers
 * live while their range is listed: those in flight, those queued, and
 * merges waiting for their other form. */
struct lister {
	char *prefix;
	char *upto;			/* last key of the range; NULL to the end */
	int delimit;			/* top level: names its dirs */
	int form;			/* top level: 1 vLLM's "PREFIX//", 0 the other */
	int rank_dir;			/* a rank dir not yet cut into ranges */
	struct kvi_s3_cursor cur;	/* its pages so far: last, token */
	struct lister *twin;		/* the same range in the other key form */
	struct held *held;		/* its page's objects not yet merged */
	size_t nheld, at, cap;
	int finished;			/* twin: no page left to ask for */
	struct lister *next;		/* in the queue */
	struct lister *all_prev, *all_next;	/* in the listing's list of all */
	struct kvi_s3_op op;
	char *query;			/* while a page is asked for */
};

/* The dirs a top level named, in its order: each a flag ('r' a rank
 * dir, '-' another) and its path relative to the root, "<dir>/". */
struct names {
	char *buf;
	size_t len, cap, at;		/* at: the next to list */
};

struct listing {
	struct kvi_s3 *s;
	const char *model;
	int rank;
	kvi_s3_listed_fn fn;
	void *arg;
	struct lister *ready, *all;	/* all: every lister alive, to free */
	struct names dirs[2];		/* by form: named, listed after the journals */
	int open_dirs;			/* next() takes dirs from them */
	char journals[2][KVI_S3_KEY_MAX + 1];	/* ".kvwatch/" dirs found */
	unsigned njournals;
	int rc;
};

static struct lister *new_lister(struct listing *l, const char *prefix, const char *after,
				 const char *upto, int delimit, int rank_dir)
{
	struct lister *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->prefix = strdup(prefix);
	p->upto = upto ? strdup(upto) : NULL;
	if (!p->prefix || (upto && !p->upto)) {
		free(p->prefix);
		free(p->upto);
		free(p);
		return NULL;
	}
	/* A range's first key comes after its start. */
	snprintf(p->cur.last, sizeof(p->cur.last), "%s", after ? after : "");
	p->delimit = delimit;
	p->rank_dir = rank_dir;
	p->all_next = l->all;
	if (l->all)
		l->all->all_prev = p;
	l->all = p;
	return p;
}

/* The next held object of p, or NULL. */
static struct held *next_held(struct lister *p)
{
	return p->at < p->nheld ? &p->held[p->at] : NULL;
}

static void drop_held(struct lister *p)
{
	free(p->held[p->at].key);
	p->held[p->at++].key = NULL;
	if (p->at == p->nheld)
		p->at = p->nheld = 0;
}

/* p, not queued nor in flight, is done with. */
static void free_lister(struct listing *l, struct lister *p)
{
	if (p->all_prev)
		p->all_prev->all_next = p->all_next;
	else
		l->all = p->all_next;
	if (p->all_next)
		p->all_next->all_prev = p->all_prev;
	while (next_held(p))
		drop_held(p);
	free(p->held);
	free(p->cur.token);
	free(p->op.resp);
	free(p->query);
	free(p->prefix);
	free(p->upto);
	free(p);
}

static void requeue(struct listing *l, struct lister *p)
{
	p->next = l->ready;
	l->ready = p;
}

static int add(struct listing *l, const char *prefix, const char *after, const char *upto)
{
	struct lister *p = new_lister(l, prefix, after, upto, 0, 0);

	if (!p)
		return -ENOMEM;
	requeue(l, p);
	return 0;
}

/* A ListObjectsV2 query into q: prefix, optionally with the delimiter
 * that names dirs, a key to start after and the token of a next page;
 * its parameters in the order SigV4 signs them. */
static int list_query(char *q, size_t len, const char *prefix, int delimit, const char *after,
		      const char *token)
{
	char tok[4 * KVI_S3_KEY_MAX + 1], pre[3 * KVI_S3_KEY_MAX + 1], aft[3 * KVI_S3_KEY_MAX + 1];
	int n;

	tok[0] = aft[0] = '\0';
	if ((token && kvi_s3_uri_encode(token, 0, tok, sizeof(tok)) < 0) ||
	    kvi_s3_uri_encode(prefix, 0, pre, sizeof(pre)) < 0 ||
	    (after && kvi_s3_uri_encode(after, 0, aft, sizeof(aft)) < 0))
		return -ENAMETOOLONG;
	n = snprintf(q, len, "%s%s%s%slist-type=2&max-keys=1000&prefix=%s%s%s",
		     token ? "continuation-token=" : "", tok, token ? "&" : "",
		     delimit ? "delimiter=%2F&" : "", pre, after ? "&start-after=" : "", aft);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* p's next page: from its start (after its range's start), or on. */
static int query(struct lister *p)
{
	if (!p->query && !(p->query = malloc(QUERY_MAX)))
		return -ENOMEM;
	return list_query(p->query, QUERY_MAX, p->prefix, p->delimit,
			  p->cur.last[0] && !p->cur.token ? p->cur.last : NULL, p->cur.token);
}

static int pair(struct listing *l, struct lister *a, struct lister *b);

/* The next of names, NULL at the end. */
static const char *name_next(const struct names *d)
{
	return d->at < d->len ? d->buf + d->at : NULL;
}

/* Queue the next dir the top levels named, one in both key forms as a
 * pair: 0, also when none is left. */
static int open_dir(struct listing *l)
{
	const char *n[2] = { name_next(&l->dirs[0]), name_next(&l->dirs[1]) };
	char prefix[KVI_S3_KEY_MAX + 2];
	struct lister *p[2] = { NULL, NULL };
	int cmp, f, rc = 0;

	if (!n[0] && !n[1])
		return 0;
	/* Both in order: the same dir in both forms meets itself. */
	cmp = !n[0] ? 1 : !n[1] ? -1 : strcmp(n[0] + 1, n[1] + 1);
	for (f = 0; f < 2; f++) {
		if (!n[f] || (f == 0 ? cmp > 0 : cmp < 0))
			continue;
		l->dirs[f].at += strlen(n[f]) + 1;
		snprintf(prefix, sizeof(prefix), "%s%s%s", kvi_s3_prefix(l->s), f ? "/" : "",
			 n[f] + 1);
		p[f] = new_lister(l, prefix, NULL, NULL, 0, n[f][0] == 'r');
		if (!p[f])
			return -ENOMEM;
	}
	if (p[0] && p[1])
		rc = pair(l, p[1], p[0]);
	else
		requeue(l, p[0] ? p[0] : p[1]);
	return rc;
}

static int next(void *arg, struct kvi_s3_op **op)
{
	struct listing *l = arg;
	struct lister *p;
	int rc;

	if (l->rc)
		return 0;
	/* A dir is opened only when no page of those open waits: the
	 * listers alive stay a few per request in flight. */
	if (!l->ready && l->open_dirs && (rc = open_dir(l)) < 0)
		return rc;
	p = l->ready;
	if (!p)
		return 0;
	l->ready = p->next;
	rc = query(p);
	if (rc < 0)
		return rc;
	memset(&p->op, 0, sizeof(p->op));
	p->op.method = KVI_S3_GET;
	p->op.key = "";
	p->op.query = p->query;
	p->op.priv = p;
	*op = &p->op;
	return 1;
}

struct page {
	struct listing *l;
	struct lister *p;
	int past;	/* a key beyond the range: stop after this page */
};

/* A dir's name kept for after the journals, by the form it is in. */
static int name_add(struct listing *l, int form, int rank_dir, const char *rel)
{
	struct names *d = &l->dirs[form];
	size_t n = strlen(rel) + 2;
	char *buf;

	if (l->dirs[0].len + l->dirs[1].len + n > NAMES_MAX)
		return kvi_fail(-ENOBUFS, "the top level of %s names more dirs than fit in %u MiB",
				kvi_s3_where(l->s), NAMES_MAX >> 20);
	if (d->len + n > d->cap) {
		size_t cap = d->cap ? d->cap : 4096;

		while (cap < d->len + n)
			cap *= 2;
		buf = realloc(d->buf, cap);
		if (!buf)
			return -ENOMEM;
		d->buf = buf;
		d->cap = cap;
	}
	d->buf[d->len] = rank_dir ? 'r' : '-';
	memcpy(d->buf + d->len + 1, rel, n - 1);
	d->len += n;
	return 0;
}

/* A dir a top level named: kept for after the journals. */
static int on_prefix(const char *prefix, void *arg)
{
	struct page *pg = arg;
	struct listing *l = pg->l;
	const char *root = kvi_s3_prefix(l->s), *rel;
	char name[KV_NAME_MAX + 2];
	struct kv_block_ref ref;
	size_t n;

	/* "PREFIX//" is listed from the start, beside "PREFIX/". */
	if (strlen(prefix) == strlen(root) + 1 && strncmp(prefix, root, strlen(root)) == 0 &&
	    prefix[strlen(root)] == '/')
		return 0;
	rel = kvi_s3_rel(l->s, prefix);
	if (!rel)
		return 0;
	if (!strcmp(rel, KV_USES_DIR "/")) {
		if (l->njournals < 2)
			snprintf(l->journals[l->njournals++], sizeof(l->journals[0]), "%s", prefix);
		return 0;
	}
	n = strlen(rel);
	if (n < 2 || n > sizeof(name) - 1)
		return name_add(l, pg->p->form, 0, rel);
	memcpy(name, rel, n - 1);
	name[n - 1] = '\0';
	memset(&ref, 0, sizeof(ref));
	if (kv_layout_rank_dir_parse(name, &ref) < 0)
		return kv_layout_model_dir_parse(name, &ref) == 0 && l->model &&
		       !kv_layout_model_matches(l->model, ref.model_dir) ? 0 :
		       name_add(l, pg->p->form, 0, rel);
	if ((l->model && !kv_layout_model_matches(l->model, ref.model_dir)) ||
	    (l->rank >= 0 && ref.rank != (unsigned)l->rank))
		return 0;
	return name_add(l, pg->p->form, 1, rel);
}

/*
 * A rank dir's first page ended at key last without reaching the end:
 * this lister goes on to the end of the range (P<d>, P<d+1>] that last
 * lies in, and a lister per range above it takes the rest; the ranges
 * (-, P0], (P0, P1], ... (Pf, -) hold every key once.
 */
static int split(struct listing *l, struct lister *p)
{
	static const char hex[] = "0123456789abcdef";
	char bound[KVI_S3_KEY_MAX + 2], after[KVI_S3_KEY_MAX + 2];
	int i, j, rc;

	p->rank_dir = 0;
	for (i = 0; i < SPLIT; i++) {
		snprintf(bound, sizeof(bound), "%s%c", p->prefix, hex[i]);
		if (strcmp(p->cur.last, bound) <= 0)
			break;
	}
	if (i == SPLIT)
		return 0;	/* in the last range: this lister has it all */
	free(p->upto);
	if (!(p->upto = strdup(bound)))
		return -ENOMEM;
	for (j = i + 1; j <= SPLIT; j++) {
		snprintf(after, sizeof(after), "%s%c", p->prefix, hex[j - 1]);
		snprintf(bound, sizeof(bound), "%s%c", p->prefix, j < SPLIT ? hex[j] : 0);
		rc = add(l, p->prefix, after, j < SPLIT ? bound : NULL);
		if (rc)
			return rc;
	}
	return 0;
}

static void describe(const struct listing *l, struct kvi_s3_listed *e, const char *key,
		     uint64_t size, int64_t mtime_ns)
{
	e->key = key;
	e->rel = kvi_s3_rel(l->s, key);
	e->size = size;
	e->mtime_ns = mtime_ns;
	e->twin = NULL;
}

static int report(struct listing *l, const struct kvi_s3_listed *e)
{
	/* Keys at the top level beside the layout's dirs. */
	return e->rel ? l->fn(e, l->arg) : 0;
}

static int hold(struct lister *p, const struct kvi_s3_object *o)
{
	struct held *h;

	if (p->nheld == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 1024;

		h = realloc(p->held, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		p->held = h;
		p->cap = cap;
	}
	h = &p->held[p->nheld];
	h->key = strdup(o->key);
	if (!h->key)
		return -ENOMEM;
	h->size = o->size;
	h->mtime_ns = o->mtime_ns;
	p->nheld++;
	return 0;
}

/* A key of a page, in order (kvi_s3_list_page saw to it). */
static int on_object(const struct kvi_s3_object *o, void *arg)
{
	struct page *pg = arg;
	struct listing *l = pg->l;
	struct kvi_s3_listed e;

	if (pg->p->upto && strcmp(o->key, pg->p->upto) > 0) {
		pg->past = 1;
		return 0;
	}
	if (pg->p->twin)
		return hold(pg->p, o);
	describe(l, &e, o->key, o->size, o->mtime_ns);
	return report(l, &e);
}

/*
 * Hand on the held objects of a range's two forms in path order, as far
 * as both have been read: a form not read to its end may still hold a
 * path that sorts before the other's next.  A path in both goes as its
 * two objects one after the other, each naming the other.
 */
static int merge(struct listing *l, struct lister *a)
{
	struct lister *b = a->twin;
	size_t la = strlen(a->prefix), lb = strlen(b->prefix);
	struct kvi_s3_listed x, y;
	struct held *ha, *hb;
	int rc = 0, cmp;

	while (rc == 0) {
		ha = next_held(a);
		hb = next_held(b);
		if ((!ha && !a->finished) || (!hb && !b->finished) || (!ha && !hb))
			break;
		cmp = !ha ? 1 : !hb ? -1 : strcmp(ha->key + la, hb->key + lb);
		if (cmp <= 0)
			describe(l, &x, ha->key, ha->size, ha->mtime_ns);
		if (cmp >= 0)
			describe(l, &y, hb->key, hb->size, hb->mtime_ns);
		if (cmp == 0) {
			x.twin = &y;
			y.twin = &x;
		}
		rc = cmp <= 0 ? report(l, &x) : 0;
		if (rc == 0 && cmp >= 0)
			rc = report(l, &y);
		if (cmp <= 0)
			drop_held(a);
		if (cmp >= 0)
			drop_held(b);
	}
	return rc;
}

/* A page of a range listed in both forms: merged, then each form the
 * merge has used up asks for its next page; a form with objects left
 * waits for the other's.  Both read to their end and merged, the two
 * are done with. */
static int twin_page(struct listing *l, struct lister *p, int more)
{
	struct lister *t = p->twin;
	int waiting = next_held(t) != NULL;
	int rc;

	p->finished = !more;
	rc = merge(l, p);
	if (rc)
		return rc;
	if (!p->finished && !next_held(p))
		requeue(l, p);
	if (waiting && !t->finished && !next_held(t))
		requeue(l, t);
	if (p->finished && t->finished && !next_held(p) && !next_held(t)) {
		free_lister(l, p);
		free_lister(l, t);
	}
	return 0;
}

static void done(void *arg, struct kvi_s3_op *op)
{
	struct listing *l = arg;
	struct lister *p = op->priv;
	struct page pg = { l, p, 0 };
	int more, rc;

	free(p->query);
	p->query = NULL;
	/* Failed already: what it said stays the detail. */
	if (l->rc)
		return;
	if (op->result < 0) {
		l->rc = op->result;
		return;
	}
	kvi_error_clear();
	rc = kvi_s3_list_page(op->resp, op->got, kvi_s3_where(l->s), &p->cur, on_object,
			      p->delimit ? on_prefix : NULL, &pg);
	free(op->resp);
	op->resp = NULL;
	if (rc) {
		if (!l->rc)
			l->rc = rc == -KV_EPROTO && !*kv_error_detail() ?
				kvi_fail(rc, "not a listing from %s", kvi_s3_where(l->s)) : rc;
		return;
	}
	more = p->cur.truncated && !pg.past;
	if (p->twin) {
		if ((rc = twin_page(l, p, more)) && !l->rc)
			l->rc = rc;
		return;
	}
	if (more && p->rank_dir && (rc = split(l, p)) < 0 && !l->rc)
		l->rc = rc;
	if (more)
		requeue(l, p);
	else
		free_lister(l, p);
}

/* Make a and b, the same dir in vLLM's key form and the other, twins
 * and queue them: a rank dir cut at once into the ranges split() would
 * make, each range's two listers twins too. */
static int pair(struct listing *l, struct lister *a, struct lister *b)
{
	static const char hex[] = "0123456789abcdef";
	struct lister *p[2] = { a, b }, *r[2];
	char after[KVI_S3_KEY_MAX + 2], upto[KVI_S3_KEY_MAX + 2];
	int i, j;

	a->twin = b;
	b->twin = a;
	requeue(l, b);
	requeue(l, a);
	if (!a->rank_dir || !b->rank_dir)
		return 0;
	for (i = 0; i < 2; i++) {
		p[i]->rank_dir = 0;
		snprintf(upto, sizeof(upto), "%s0", p[i]->prefix);
		if (!(p[i]->upto = strdup(upto)))
			return -ENOMEM;
	}
	for (j = 1; j <= SPLIT; j++) {
		for (i = 0; i < 2; i++) {
			snprintf(after, sizeof(after), "%s%c", p[i]->prefix, hex[j - 1]);
			snprintf(upto, sizeof(upto), "%s%c", p[i]->prefix, j < SPLIT ? hex[j] : 0);
			r[i] = new_lister(l, p[i]->prefix, after, j < SPLIT ? upto : NULL, 0, 0);
			if (!r[i])
				return -ENOMEM;
		}
		r[0]->twin = r[1];
		r[1]->twin = r[0];
		requeue(l, r[1]);
		requeue(l, r[0]);
	}
	return 0;
}

static int load_journals(struct listing *l, struct kv_uses **uses);

int kvi_s3_list_all(struct kvi_s3 *s, const char *model, int rank, struct kv_uses **uses,
		    kvi_s3_listed_fn fn, void *arg)
{
	struct listing l = { .s = s, .model = model, .rank = rank, .fn = fn, .arg = arg };
	char top[KVI_S3_KEY_MAX + 2];
	struct lister *p[2];
	int rc = 0, f;

	if (uses)
		*uses = NULL;
	/* Both top levels at once: "PREFIX/" and vLLM's "PREFIX//". */
	snprintf(top, sizeof(top), "%s/", kvi_s3_prefix(s));
	for (f = 0; f < 2 && rc == 0; f++) {
		p[f] = new_lister(&l, f ? top : kvi_s3_prefix(s), NULL, NULL, 1, 0);
		if (!p[f]) {
			rc = -ENOMEM;
			break;
		}
		p[f]->form = f;
		requeue(&l, p[f]);
	}
	if (rc == 0)
		rc = kvi_s3_run(s, 0, next, done, &l);
	if (rc >= 0 && !l.rc && uses)
		rc = load_journals(&l, uses);
	/* Then every dir found. */
	l.open_dirs = 1;
	if (rc >= 0 && !l.rc)
		rc = kvi_s3_run(s, 0, next, done, &l);
	if (rc > 0)
		rc = 0;
	if (l.rc)
		rc = l.rc;
	if (rc && uses) {
		kv_uses_free(*uses);
		*uses = NULL;
	}
	while (l.all)
		free_lister(&l, l.all);
	free(l.dirs[0].buf);
	free(l.dirs[1].buf);
	return rc;
}

/* ---- the use journals (kv/lastuse.h) under the root ---- */

struct journals {
	struct kvi_s3 *s;
	struct kv_uses *uses;
};

static int on_journal(const struct kvi_s3_object *o, void *arg)
{
	struct journals *j = arg;
	size_t n = strlen(o->key), sl = strlen(KV_USES_SUFFIX);
	int rc = 0;

	if (n <= sl || strcmp(o->key + n - sl, KV_USES_SUFFIX) || o->size == 0)
		return 0;
	if (!j->uses)
		rc = kv_uses_new(&j->uses);
	/* Read as it downloads, whatever its size; one that cannot be read
	 * fails the listing, as on a filesystem. */
	if (rc == 0)
		rc = kvi_uses_read_object(j->s, o->key, j->uses, NULL, NULL, NULL, NULL);
	return rc == -ENOENT ? 0 : rc;
}

int kvi_s3_list_prefix(struct kvi_s3 *s, const char *prefix, kvi_s3_object_fn fn, void *arg)
{
	struct kvi_s3_cursor c = { .token = NULL };
	char q[QUERY_MAX];
	int rc;

	do {
		struct kvi_s3_op op = { .method = KVI_S3_GET, .key = "", .query = q };

		rc = list_query(q, sizeof(q), prefix, 0, NULL, c.token);
		if (rc == 0)
			rc = kvi_s3_do(s, &op);
		if (rc == 0)
			rc = kvi_s3_list_page(op.resp, op.got, kvi_s3_where(s), &c, fn, NULL, arg);
		free(op.resp);
	} while (rc == 0 && c.truncated);
	free(c.token);
	return rc;
}

/* A CommonPrefix of the root's top level other than vLLM's "PREFIX//". */
static int other_dir(const char *prefix, void *arg)
{
	const char *vllm = arg;

	return strcmp(prefix, vllm) != 0;
}

static int no_object(const struct kvi_s3_object *o, void *arg)
{
	(void)o, (void)arg;
	return 0;
}

int kvi_s3_other_form(struct kvi_s3 *s)
{
	char q[QUERY_MAX], vllm[KVI_S3_KEY_MAX + 2], *token = NULL;
	struct kvi_s3_op op = { .method = KVI_S3_GET, .key = "", .query = q };
	int truncated = 0, rc;

	snprintf(vllm, sizeof(vllm), "%s/", kvi_s3_prefix(s));
	rc = list_query(q, sizeof(q), kvi_s3_prefix(s), 1, NULL, NULL);
	if (rc == 0)
		rc = kvi_s3_do(s, &op);
	if (rc == 0)
		rc = kvi_s3_list_parse(op.resp, op.got, no_object, other_dir, vllm, &truncated,
				       &token);
	free(op.resp);
	free(token);
	if (rc < 0)
		return rc;
	/* A page that stops short holds 1,000 names: more than one dir. */
	return rc != 0 || truncated;
}

/* The .uses objects in the journal dirs the top levels named. */
static int load_journals(struct listing *l, struct kv_uses **uses)
{
	struct journals j = { l->s, NULL };
	int rc = 0;

	for (unsigned d = 0; d < l->njournals && rc == 0; d++)
		rc = kvi_s3_list_prefix(l->s, l->journals[d], on_journal, &j);
	if (rc < 0) {
		kv_uses_free(j.uses);
		return rc;
	}
	*uses = j.uses;
	return 0;
}
