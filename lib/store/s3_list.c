/*
 * Every object under a bucket root, listed with many ListObjectsV2
 * requests in flight.  First the root's top levels, "PREFIX/" and, for
 * the keys vLLM writes, "PREFIX//", side by side with a delimiter, which
 * names their dirs; then the use journals found there; then every dir at
 * once.  A rank dir is listed from its start, and when its first page
 * does not hold it all, what is left is cut at the first hex digit of
 * its <hhh> buckets into contiguous key ranges listed side by side (S3
 * has no end key: a range reads at most one page past its end).  Memory
 * is the pages in flight, never the number of objects.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kv/errors.h>
#include <kv/kv.h>
#include <kv/lastuse.h>
#include <kv/layout.h>
#include "store/s3.h"
#include "util/error.h"

#define SPLIT	16	/* hex digits a rank dir's ranges are cut at */
/* A listing's query: a token, a prefix and a start key, URI-encoded. */
#define QUERY_MAX	(10 * KVI_S3_KEY_MAX + 128)

/* One listing: a prefix, optionally a key range within it. */
struct lister {
	char prefix[KVI_S3_KEY_MAX + 1];
	char after[KVI_S3_KEY_MAX + 2];	/* start-after; "" from the start */
	char upto[KVI_S3_KEY_MAX + 2];	/* last key of the range; "" to the end */
	int delimit;			/* top level: names its dirs */
	int rank_dir;			/* a rank dir not yet cut into ranges */
	char *token;
	char last[KVI_S3_KEY_MAX + 1];	/* the last key seen: pages only go on */
	struct lister *next;		/* in a queue */
	struct lister *all_next;	/* in the listing's list of all */
	struct kvi_s3_op op;
	char query[QUERY_MAX];
};

struct listing {
	struct kvi_s3 *s;
	const char *model;
	int rank;
	kvi_s3_listed_fn fn;
	void *arg;
	struct lister *ready, *all;	/* all: every lister, to free */
	struct lister *later;		/* dirs found, listed after the journals */
	char journals[2][KVI_S3_KEY_MAX + 1];	/* ".kvwatch/" dirs found */
	unsigned njournals;
	int rc;
};

static int add_to(struct listing *l, struct lister **queue, const char *prefix,
		  const char *after, const char *upto, int delimit, int rank_dir)
{
	struct lister *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	if (strlen(prefix) > KVI_S3_KEY_MAX) {
		free(p);
		return 0;
	}
	strcpy(p->prefix, prefix);
	snprintf(p->after, sizeof(p->after), "%s", after ? after : "");
	snprintf(p->upto, sizeof(p->upto), "%s", upto ? upto : "");
	p->delimit = delimit;
	p->rank_dir = rank_dir;
	p->next = *queue;
	*queue = p;
	p->all_next = l->all;
	l->all = p;
	return 0;
}

static int add(struct listing *l, const char *prefix, const char *after, const char *upto)
{
	return add_to(l, &l->ready, prefix, after, upto, 0, 0);
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

static int query(struct lister *p)
{
	return list_query(p->query, sizeof(p->query), p->prefix, p->delimit,
			  p->after[0] && !p->token ? p->after : NULL, p->token);
}

static int next(void *arg, struct kvi_s3_op **op)
{
	struct listing *l = arg;
	struct lister *p = l->ready;
	int rc;

	if (!p || l->rc)
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
		return add_to(l, &l->later, prefix, NULL, NULL, 0, 0);
	memcpy(name, rel, n - 1);
	name[n - 1] = '\0';
	memset(&ref, 0, sizeof(ref));
	if (kv_layout_rank_dir_parse(name, &ref) < 0)
		return kv_layout_model_dir_parse(name, &ref) == 0 && l->model &&
		       !kv_layout_model_matches(l->model, ref.model_dir) ? 0 :
		       add_to(l, &l->later, prefix, NULL, NULL, 0, 0);
	if ((l->model && !kv_layout_model_matches(l->model, ref.model_dir)) ||
	    (l->rank >= 0 && ref.rank != (unsigned)l->rank))
		return 0;
	return add_to(l, &l->later, prefix, NULL, NULL, 0, 1);
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
		if (strcmp(p->last, bound) <= 0)
			break;
	}
	if (i == SPLIT)
		return 0;	/* in the last range: this lister has it all */
	strcpy(p->upto, bound);
	for (j = i + 1; j <= SPLIT; j++) {
		snprintf(after, sizeof(after), "%s%c", p->prefix, hex[j - 1]);
		snprintf(bound, sizeof(bound), "%s%c", p->prefix, j < SPLIT ? hex[j] : 0);
		rc = add(l, p->prefix, after, j < SPLIT ? bound : NULL);
		if (rc)
			return rc;
	}
	return 0;
}

static int on_object(const struct kvi_s3_object *o, void *arg)
{
	struct page *pg = arg;
	struct listing *l = pg->l;
	struct kvi_s3_listed e;

	if (pg->p->upto[0] && strcmp(o->key, pg->p->upto) > 0) {
		pg->past = 1;
		return 0;
	}
	/* Keys come in order, each page after the last: a server that
	 * sends one again would have this listing go round for ever. */
	if (pg->p->last[0] && strcmp(o->key, pg->p->last) <= 0)
		return kvi_fail(-KV_EPROTO, "keys out of order in a listing from %s",
				kvi_s3_where(l->s));
	snprintf(pg->p->last, sizeof(pg->p->last), "%s", o->key);
	e.key = o->key;
	e.rel = kvi_s3_rel(l->s, o->key);
	e.size = o->size;
	e.mtime_ns = o->mtime_ns;
	/* Keys at the top level beside the layout's dirs. */
	if (!e.rel)
		return 0;
	return l->fn(&e, l->arg);
}

static void done(void *arg, struct kvi_s3_op *op)
{
	struct listing *l = arg;
	struct lister *p = op->priv;
	struct page pg = { l, p, 0 };
	char *token = NULL;
	int truncated = 0, rc;

	if (op->result < 0) {
		if (!l->rc)
			l->rc = op->result;
		return;
	}
	kvi_error_clear();
	rc = kvi_s3_list_parse(op->resp, op->got, on_object, p->delimit ? on_prefix : NULL, &pg,
			       &truncated, &token);
	free(op->resp);
	op->resp = NULL;
	if (rc) {
		if (!l->rc)
			l->rc = rc == -KV_EPROTO && !*kv_error_detail() ?
				kvi_fail(rc, "not a listing from %s", kvi_s3_where(l->s)) : rc;
		free(token);
		return;
	}
	/* The same token again: the next page would be this one. */
	if (truncated && !pg.past && p->token && token && !strcmp(p->token, token)) {
		free(token);
		if (!l->rc)
			l->rc = kvi_fail(-KV_EPROTO, "a listing from %s does not advance",
					 kvi_s3_where(l->s));
		return;
	}
	free(p->token);
	p->token = token;
	if (truncated && !pg.past && p->rank_dir && (rc = split(l, p)) < 0 && !l->rc)
		l->rc = rc;
	if (truncated && !pg.past) {
		p->next = l->ready;
		l->ready = p;
	}
}

static int load_journals(struct listing *l, struct kv_uses **uses);


int kvi_s3_list_all(struct kvi_s3 *s, const char *model, int rank, struct kv_uses **uses,
		    kvi_s3_listed_fn fn, void *arg)
{
	struct listing l = { .s = s, .model = model, .rank = rank, .fn = fn, .arg = arg };
	char top[KVI_S3_KEY_MAX + 2];
	struct lister *p, *nx;
	int rc;

	if (uses)
		*uses = NULL;
	/* Both top levels at once: "PREFIX/" and vLLM's "PREFIX//". */
	snprintf(top, sizeof(top), "%s/", kvi_s3_prefix(s));
	rc = add_to(&l, &l.ready, kvi_s3_prefix(s), NULL, NULL, 1, 0);
	if (rc == 0)
		rc = add_to(&l, &l.ready, top, NULL, NULL, 1, 0);
	if (rc == 0)
		rc = kvi_s3_run(s, 0, next, done, &l);
	if (rc >= 0 && !l.rc && uses)
		rc = load_journals(&l, uses);
	/* Then every dir found. */
	if (rc >= 0 && !l.rc) {
		l.ready = l.later;
		l.later = NULL;
		rc = kvi_s3_run(s, 0, next, done, &l);
	}
	if (rc > 0)
		rc = 0;
	if (l.rc)
		rc = l.rc;
	if (rc && uses) {
		kv_uses_free(*uses);
		*uses = NULL;
	}
	for (p = l.all; p; p = nx) {
		nx = p->all_next;
		free(p->token);
		free(p->op.resp);
		free(p);
	}
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
	struct kvi_s3_op op = { .method = KVI_S3_GET, .key = o->key };
	size_t n = strlen(o->key), sl = strlen(KV_USES_SUFFIX);
	char *text;
	int rc;

	if (n <= sl || strcmp(o->key + n - sl, KV_USES_SUFFIX) || o->size == 0)
		return 0;
	op.cap = o->size < KV_USES_FILE_MAX ? o->size : KV_USES_FILE_MAX;
	text = malloc(op.cap);
	if (!text)
		return -ENOMEM;
	op.dst = text;
	rc = kvi_s3_do(j->s, &op);
	free(op.resp);
	/* Grown since listed: what fits is read, as from a file. */
	if (rc == -EFBIG)
		rc = 0;
	if (rc == 0 && !j->uses)
		rc = kv_uses_new(&j->uses);
	if (rc == 0)
		rc = kv_uses_parse(j->uses, text, op.got, NULL);
	free(text);
	/* An unreadable journal is skipped, as on a filesystem. */
	return rc == -ENOMEM ? rc : 0;
}

int kvi_s3_list_prefix(struct kvi_s3 *s, const char *prefix, kvi_s3_object_fn fn, void *arg)
{
	char q[QUERY_MAX], *token = NULL;
	int truncated = 0, rc;

	do {
		struct kvi_s3_op op = { .method = KVI_S3_GET, .key = "", .query = q };

		rc = list_query(q, sizeof(q), prefix, 0, NULL, token);
		free(token);
		token = NULL;
		if (rc == 0)
			rc = kvi_s3_do(s, &op);
		if (rc == 0)
			rc = kvi_s3_list_parse(op.resp, op.got, fn, NULL, arg, &truncated, &token);
		free(op.resp);
	} while (rc == 0 && truncated);
	free(token);
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
