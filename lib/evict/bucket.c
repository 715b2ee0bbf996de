/* Deleting blocks from a bucket in DeleteObjects batches (bucket.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include "evict/bucket.h"
#include "store/s3.h"
#include "util/error.h"

#define BLOCKS_PER_REQUEST	(KVI_S3_DELETE_MAX / 2)	/* two keys each */
#define REQUESTS_IN_FLIGHT	4u
#define QUEUE_MAX		(BLOCKS_PER_REQUEST * REQUESTS_IN_FLIGHT)

struct queued {
	char *path;
	char *keys[2];
	uint64_t size;
	int64_t last_use_ns;
	int failed;
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
	kvi_bucket_deleted_fn fn;
	void *arg;
	struct queued q[QUEUE_MAX];
	unsigned n;
	struct request req[REQUESTS_IN_FLIGHT];
	unsigned nreq, sent;
};

int kvi_bucket_del_open(const char *root, kvi_bucket_deleted_fn fn, void *arg,
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
	d->fn = fn;
	d->arg = arg;
	*out = d;
	return 0;
}

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
		if (!strcmp(r->q[i].keys[0], key) || !strcmp(r->q[i].keys[1], key)) {
			r->q[i].failed = 1;
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
			r->q[i].failed = 1;
}

static int prepare(struct request *r, struct queued *q, unsigned n)
{
	const char *keys[KVI_S3_DELETE_MAX];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0, i;
	size_t len;
	int rc;

	for (i = 0; i < n; i++) {
		keys[2 * i] = q[i].keys[0];
		keys[2 * i + 1] = q[i].keys[1];
	}
	rc = kvi_s3_delete_body(keys, 2 * n, &r->body, &len);
	if (rc < 0)
		return rc;
	/* S3 wants the body's MD5 with DeleteObjects. */
	if (!EVP_Digest(r->body, len, md, &mdlen, EVP_md5(), NULL))
		return -ENOMEM;
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
	return 0;
}

int kvi_bucket_del_flush(struct kvi_bucket_del *d)
{
	unsigned i, at;
	int rc = 0;

	if (!d->n)
		return 0;
	d->nreq = d->sent = 0;
	for (at = 0; at < d->n && rc == 0; at += BLOCKS_PER_REQUEST) {
		unsigned n = d->n - at < BLOCKS_PER_REQUEST ? d->n - at : BLOCKS_PER_REQUEST;

		rc = prepare(&d->req[d->nreq], &d->q[at], n);
		if (rc == 0)
			d->nreq++;
	}
	if (rc == 0)
		rc = kvi_s3_run(d->s3, REQUESTS_IN_FLIGHT, next, done, d);
	for (i = 0; i < d->n; i++) {
		struct queued *q = &d->q[i];

		d->fn(q->path, q->size, q->last_use_ns, rc >= 0 && !q->failed, d->arg);
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
