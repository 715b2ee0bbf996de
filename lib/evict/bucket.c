/* Deleting blocks from a bucket in DeleteObjects batches (bucket.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <kv/units.h>
#include "evict/bucket.h"
#include "store/s3.h"
#include "util/error.h"

#define BLOCKS_PER_REQUEST	(KVI_S3_DELETE_MAX / 2)	/* two keys each at most */
#define REQUESTS_IN_FLIGHT	4u
#define QUEUE_MAX		(BLOCKS_PER_REQUEST * REQUESTS_IN_FLIGHT)

struct queued {
	char *path;
	char *keys[2];		/* vLLM's, the single-slash form */
	struct kvi_s3_op head[2];
	int asked[2], found[2], failed[2];
	uint64_t size;
	int64_t last_use_ns;
	enum kvi_bucket_fate fate;
};

struct request {
	struct kvi_s3_op op;
	struct queued *q;	/* its blocks */
	unsigned n;
	char *body;
	char md5[32];
};

struct kvi_bucket_del {
	struct kvi_s3 *s3;
	uint64_t hot_ns;
	kvi_bucket_deleted_fn fn;
	void *arg;
	struct queued q[QUEUE_MAX];
	unsigned n;
	unsigned asking;	/* the next HEAD: key asking % 2 of block asking / 2 */
	struct request req[REQUESTS_IN_FLIGHT];
	unsigned nreq, sent;
};

int kvi_bucket_del_open(const char *root, uint64_t hot_ns, kvi_bucket_deleted_fn fn, void *arg,
			struct kvi_bucket_del **out)
{
	struct kvi_bucket_del *d = calloc(1, sizeof(*d));
	int rc;

	if (!d)
		return -ENOMEM;
	rc = kvi_s3_open(root, &d->s3);
	if (rc < 0) {
		free(d);
		return rc;
	}
	d->hot_ns = hot_ns;
	d->fn = fn;
	d->arg = arg;
	*out = d;
	return 0;
}

/* ---- the look before the delete ---- */

static int next_head(void *arg, struct kvi_s3_op **op)
{
	struct kvi_bucket_del *d = arg;

	while (d->asking < 2 * d->n) {
		struct queued *q = &d->q[d->asking / 2];
		unsigned k = d->asking++ % 2;

		if (q->asked[k]) {
			*op = &q->head[k];
			return 1;
		}
	}
	return 0;
}

/* Each HEAD's answer stays in its op. */
static void head_done(void *arg, struct kvi_s3_op *op)
{
	(void)arg, (void)op;
}

/*
 * A HEAD of each key of each queued block, then each block's fate: hot
 * where a key is within the hot window (a writer of either form sent it
 * since the scan, or the scan saw only one form), failed where it is
 * gone or a key cannot be asked about, else deleted in the keys found.
 * S3 keeps no atime, so Last-Modified and the scan's use are all there
 * is to a block's last use.
 */
static int examine(struct kvi_bucket_del *d)
{
	/* Where it cannot be listed, both forms are asked. */
	int other = kvi_s3_other_form(d->s3);
	int64_t edge;
	unsigned i, k;
	int rc;

	for (i = 0; i < d->n; i++)
		for (k = 0; k < 2; k++) {
			struct kvi_s3_op *op = &d->q[i].head[k];

			memset(op, 0, sizeof(*op));
			op->method = KVI_S3_HEAD;
			op->key = d->q[i].keys[k];
			d->q[i].asked[k] = k == 0 || other != 0;
			d->q[i].found[k] = d->q[i].failed[k] = 0;
		}
	d->asking = 0;
	rc = kvi_s3_run(d->s3, 0, next_head, head_done, d);
	edge = d->hot_ns ? kv_now_ns() - (int64_t)d->hot_ns : INT64_MAX;
	for (i = 0; i < d->n; i++) {
		struct queued *q = &d->q[i];
		int found = 0, unknown = rc < 0;

		for (k = 0; k < 2; k++) {
			struct kvi_s3_op *op = &q->head[k];

			free(op->resp);
			op->resp = NULL;
			if (!q->asked[k] || op->result == -ENOENT)
				continue;
			if (op->result < 0) {
				unknown = 1;
				continue;
			}
			q->found[k] = 1;
			found++;
			if (op->mtime_ns > q->last_use_ns)
				q->last_use_ns = op->mtime_ns;
		}
		q->fate = unknown || !found ? KVI_BUCKET_FAILED :
			  q->last_use_ns > edge ? KVI_BUCKET_HOT : KVI_BUCKET_DELETED;
	}
	return rc < 0 ? rc : 0;
}

/* ---- the deletes ---- */

static int next(void *arg, struct kvi_s3_op **op)
{
	struct kvi_bucket_del *d = arg;

	if (d->sent == d->nreq)
		return 0;
	*op = &d->req[d->sent++].op;
	return 1;
}

/* A key DeleteObjects could not delete: its block stays. */
static void on_error(const char *key, const char *code, void *arg)
{
	struct request *r = arg;

	for (unsigned i = 0; i < r->n; i++)
		for (unsigned k = 0; k < 2; k++)
			if (r->q[i].found[k] && !strcmp(r->q[i].keys[k], key)) {
				r->q[i].failed[k] = 1;
				kvi_fail(-EACCES, "'%s': %s", key, code);
			}
}

static void done(void *arg, struct kvi_s3_op *op)
{
	struct request *r = (struct request *)op;
	unsigned i;

	(void)arg;
	if (op->result < 0 || kvi_s3_delete_parse(op->resp, op->got, on_error, r) < 0)
		for (i = 0; i < r->n; i++)
			r->q[i].failed[0] = r->q[i].failed[1] = 1;
}

/* The request deleting the keys found of q's blocks to be deleted: 1,
 * or 0 where there are none. */
static int prepare(struct request *r, struct queued *q, unsigned n)
{
	const char *keys[KVI_S3_DELETE_MAX];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0, i, k, nkeys = 0;
	size_t len;
	int rc;

	for (i = 0; i < n; i++)
		for (k = 0; k < 2; k++)
			if (q[i].fate == KVI_BUCKET_DELETED && q[i].found[k])
				keys[nkeys++] = q[i].keys[k];
	if (!nkeys)
		return 0;
	rc = kvi_s3_delete_body(keys, nkeys, &r->body, &len);
	if (rc < 0)
		return rc;
	/* S3 wants the body's MD5 with DeleteObjects. */
	if (!EVP_Digest(r->body, len, md, &mdlen, EVP_md5(), NULL)) {
		free(r->body);
		return -ENOMEM;
	}
	EVP_EncodeBlock((unsigned char *)r->md5, md, (int)mdlen);
	memset(&r->op, 0, sizeof(r->op));
	r->op.method = KVI_S3_POST;
	r->op.key = "";
	r->op.query = "delete=";
	r->op.body = r->body;
	r->op.body_len = len;
	r->op.content_md5 = r->md5;
	r->q = q;
	r->n = n;
	return 1;
}

int kvi_bucket_del_flush(struct kvi_bucket_del *d)
{
	unsigned i, k, at;
	int rc;

	if (!d->n)
		return 0;
	d->nreq = d->sent = 0;
	rc = examine(d);
	for (at = 0; at < d->n && rc >= 0; at += BLOCKS_PER_REQUEST) {
		unsigned n = d->n - at < BLOCKS_PER_REQUEST ? d->n - at : BLOCKS_PER_REQUEST;

		rc = prepare(&d->req[d->nreq], &d->q[at], n);
		if (rc > 0)
			d->nreq++;
	}
	if (rc >= 0 && d->nreq)
		rc = kvi_s3_run(d->s3, REQUESTS_IN_FLIGHT, next, done, d);
	for (i = 0; i < d->n; i++) {
		struct queued *q = &d->q[i];
		uint64_t freed = 0;
		int failed = 0;

		/* One key of two deleted: its bytes are free all the same. */
		for (k = 0; k < 2 && q->fate == KVI_BUCKET_DELETED; k++) {
			if (rc < 0 || q->failed[k])
				failed |= q->found[k];
			else if (q->found[k])
				freed += q->head[k].size;
		}
		if (failed)
			q->fate = KVI_BUCKET_FAILED;
		d->fn(q->path, q->size, q->last_use_ns, freed, q->fate, d->arg);
		free(q->path);
		free(q->keys[0]);
		free(q->keys[1]);
	}
	for (i = 0; i < d->nreq; i++) {
		free(d->req[i].body);
		free(d->req[i].op.resp);
	}
	d->n = 0;
	return rc < 0 ? rc : 0;
}

int kvi_bucket_del_add(struct kvi_bucket_del *d, const char *path, uint64_t size,
		       int64_t last_use_ns)
{
	struct queued *q;
	char key[KVI_S3_KEY_MAX + 1];
	int rc = 0, slash;

	if (d->n == QUEUE_MAX && (rc = kvi_bucket_del_flush(d)) < 0)
		return rc;
	q = &d->q[d->n];
	memset(q, 0, sizeof(*q));
	q->path = strdup(path);
	for (slash = 1; slash >= 0; slash--)
		if (kvi_s3_key(d->s3, path, slash, key, sizeof(key)) == 0)
			q->keys[1 - slash] = strdup(key);
	if (!q->path || !q->keys[0] || !q->keys[1]) {
		free(q->path);
		free(q->keys[0]);
		free(q->keys[1]);
		return -ENOMEM;
	}
	q->size = size;
	q->last_use_ns = last_use_ns;
	d->n++;
	return 0;
}

void kvi_bucket_del_close(struct kvi_bucket_del *d)
{
	if (!d)
		return;
	kvi_bucket_del_flush(d);
	kvi_s3_close(d->s3);
	free(d);
}
