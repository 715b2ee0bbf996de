/*
 * The object-store engine: one S3 bucket (and key prefix) reached the way
 * the AWS CLI reaches it (environment, ~/.aws/credentials and config),
 * requests signed by libcurl's SigV4 and run many at once on a curl multi
 * handle, retried with backoff on throttling, server errors and resets.
 * Keys are composed as vLLM's obj tier composes them, so a block written
 * here is the object vLLM looks up.  kvi_* names stay out of libkv.so's
 * exports; programs reach a bucket through kv_tier_s3_open and kv_walk.
 */
#ifndef KV_STORE_S3_H
#define KV_STORE_S3_H

#include <stddef.h>
#include <stdint.h>

#define KVI_S3_SCHEME		"s3://"
#define KVI_S3_KEY_MAX		1024	/* S3's own limit on a key */
#define KVI_S3_DELETE_MAX	1000	/* keys one DeleteObjects takes */
#define KVI_S3_XXH3_META	"x-amz-meta-kv-xxh3"

/* 1 if root names a bucket ("s3://..."). */
int kvi_s3_is_url(const char *root);

/* 0 if url is a bucket root kvi_s3_open takes: a bucket name, and a
 * prefix without "." or ".." segments (a server or libcurl would fold
 * them into another key, or another bucket); -EINVAL or -ENAMETOOLONG
 * with the reason in kv_error_detail(). */
int kvi_s3_url_check(const char *url);

enum kvi_s3_method { KVI_S3_GET, KVI_S3_HEAD, KVI_S3_PUT, KVI_S3_DELETE, KVI_S3_POST };

#define KVI_S3_IF_NONE_MATCH	(1u << 0)	/* PUT: only if absent (-EEXIST) */
#define KVI_S3_TAIL		(1u << 1)	/* GET: the last len bytes */

/* One request.  Set the inputs; the engine fills the outputs. */
struct kvi_s3_op {
	enum kvi_s3_method method;
	const char *key;	/* the object key as sent; NULL: the bucket */
	const char *query;	/* "a=b&c=d", sorted and encoded; NULL: none */
	const void *body;	/* PUT, POST */
	size_t body_len;
	void *dst;		/* GET: into here (cap bytes); NULL: into resp */
	size_t cap;
	/* GET: the body handed on as it comes instead (dst NULL), each piece
	 * at op->got bytes into it: 0 again when a retry starts over.  A
	 * non-zero return stops the transfer and is its result. */
	int (*sink)(struct kvi_s3_op *op, const char *data, size_t len);
	size_t tail;		/* GET with KVI_S3_TAIL: bytes from the end */
	unsigned flags;
	const char *xxh3;	/* PUT: 16 hex digits kept in the object's metadata */
	const char *content_md5; /* POST: base64 MD5 of body */

	int result;		/* 0, -ENOENT, -EEXIST, -EACCES, -KV_ES3... */
	long status;		/* HTTP status, 0 if none came */
	size_t got;		/* body bytes received */
	uint64_t size;		/* object size (HEAD, GET; tail: the whole) */
	int64_t mtime_ns;	/* Last-Modified */
	int64_t date_ns;	/* the server's Date: its clock, 0 if none */
	char meta_xxh3[17];	/* the checksum kept with it, "" if none */
	char *resp;		/* body when dst is NULL (malloc'd; free it) */
	void *user;
	/* engine state */
	unsigned attempts;
	int64_t not_before_ns;
	void *priv;
};

struct kvi_s3;

/* Open a bucket URL "s3://BUCKET[/PREFIX]": configuration and
 * credentials as the AWS CLI finds them (kv(7)), then a HEAD of the
 * bucket, so that a wrong endpoint, credentials or bucket fail here,
 * -errno with the bucket and endpoint in kv_error_detail(). */
int kvi_s3_open(const char *url, struct kvi_s3 **out);
void kvi_s3_close(struct kvi_s3 *s);

/* "s3://bucket/prefix at http://endpoint", for messages. */
const char *kvi_s3_where(const struct kvi_s3 *s);

/* The key under the prefix for a path relative to the root, as vLLM
 * writes it: "PREFIX//rel" with a prefix, "/rel" without (slash 1); the
 * form other clients write: "PREFIX/rel", "rel" (slash 0). */
int kvi_s3_key(const struct kvi_s3 *s, const char *rel, int slash, char *buf, size_t len);

/* The path relative to the root for a key under the prefix, either form;
 * NULL for a key outside it. */
const char *kvi_s3_rel(const struct kvi_s3 *s, const char *key);

/* The prefix every key of this root starts with ("PREFIX/" or ""). */
const char *kvi_s3_prefix(const struct kvi_s3 *s);

/* Run one request (retried as any). */
int kvi_s3_do(struct kvi_s3 *s, struct kvi_s3_op *op);

/* Whether op, sent with KVI_S3_IF_NONE_MATCH, met a server without
 * conditional writes: it answered 501, or 400. */
int kvi_s3_condition_refused(const struct kvi_s3_op *op);

/* Many requests, up to inflight at once (0: the engine's default):
 * next() gives the next (1), none for now (0: asked again after each
 * done()) or stops (-errno); done() gets each as it ends.  Returns the
 * number that failed, or -errno. */
typedef int (*kvi_s3_next_fn)(void *arg, struct kvi_s3_op **op);
typedef void (*kvi_s3_done_fn)(void *arg, struct kvi_s3_op *op);
int kvi_s3_run(struct kvi_s3 *s, unsigned inflight, kvi_s3_next_fn next,
	       kvi_s3_done_fn done, void *arg);

/* ---- every object under the root (s3_list.c) ---- */

struct kvi_s3_listed {
	const char *key;	/* as stored */
	const char *rel;	/* relative to the root, either key form */
	uint64_t size;
	int64_t mtime_ns;
	/* The other key form of rel where both are stored: fn gets the
	 * two one after the other, each naming the other; NULL if none. */
	const struct kvi_s3_listed *twin;
};

/* fn for each object under the root (in this thread, in no set order
 * but twins together; a non-zero return stops and is returned).  model
 * (kv_layout_model_matches) and rank (-1: all) skip other rank dirs
 * unlisted.  uses (may be NULL) gets the uses recorded in the root's
 * journals (kv/lastuse.h), "<root>/.kvwatch/<node>.uses" in either key
 * form, read before any block is listed; NULL if none. */
struct kv_uses;
typedef int (*kvi_s3_listed_fn)(const struct kvi_s3_listed *o, void *arg);
int kvi_s3_list_all(struct kvi_s3 *s, const char *model, int rank, struct kv_uses **uses,
		    kvi_s3_listed_fn fn, void *arg);

/* fn for each object under prefix (a flat listing, page by page; a
 * non-zero return stops and is returned). */
struct kvi_s3_object;
typedef int (*kvi_s3_object_fn)(const struct kvi_s3_object *o, void *arg);
int kvi_s3_list_prefix(struct kvi_s3 *s, const char *prefix, kvi_s3_object_fn fn, void *arg);

/* Whether the root's top level has a dir in the single-slash key form
 * ("PREFIX/<dir>/", as other clients write): 1, 0 none (every key is
 * vLLM's "PREFIX//..."), or -errno where it cannot be listed.  One
 * ListObjectsV2 page. */
int kvi_s3_other_form(struct kvi_s3 *s);

/* ---- listings (s3_xml.c) ---- */

struct kvi_s3_object {
	const char *key;
	uint64_t size;
	int64_t mtime_ns;
};

/* A ListObjectsV2 page: fn per object (a non-zero return stops and is
 * returned), prefix_fn per CommonPrefix (may be NULL); *truncated and
 * the continuation token (malloc'd, NULL if none) for the next page.
 * -KV_EPROTO for what is not a listing. */
typedef int (*kvi_s3_prefix_fn)(const char *prefix, void *arg);
int kvi_s3_list_parse(const char *xml, size_t len, kvi_s3_object_fn fn,
		      kvi_s3_prefix_fn prefix_fn, void *arg, int *truncated,
		      char **token);

/* Where a listing is in its pages.  S3 names keys, and dirs, in
 * ascending order, each page going on from the one before: a page that
 * goes back is a loop or a lie, whatever its token says. */
struct kvi_s3_cursor {
	char last[KVI_S3_KEY_MAX + 1];	/* the greatest name so far ("": none;
					   start-after where one is given) */
	char *token;			/* the next page's (malloc'd), or NULL */
	int truncated;			/* a next page follows */
	unsigned empty;			/* pages in a row that named nothing */
};

/* Parse a ListObjectsV2 page (as kvi_s3_list_parse, prefix_fn may be
 * NULL) that follows c, and move c past it: -KV_EPROTO, with detail
 * naming where (a server, for messages), for a key or dir not after
 * the one before, a token the page before gave too, or too many pages
 * in a row that name nothing.  Free c->token when done. */
int kvi_s3_list_page(const char *xml, size_t len, const char *where, struct kvi_s3_cursor *c,
		     kvi_s3_object_fn fn, kvi_s3_prefix_fn prefix_fn, void *arg);

/* A DeleteObjects answer: fn per key that failed with its code. */
typedef void (*kvi_s3_delete_err_fn)(const char *key, const char *code, void *arg);
int kvi_s3_delete_parse(const char *xml, size_t len, kvi_s3_delete_err_fn fn, void *arg);

/* An <Error>: Code and Message into code/msg ("" where absent), in
 * printable ASCII, with each of secrets (NULL-terminated, may be NULL)
 * and the value of an Authorization, X-Amz-Security-Token or
 * X-Amz-Signature the server echoes replaced by "[redacted]". */
void kvi_s3_error_parse(const char *xml, size_t len, const char *const *secrets, char *code,
			size_t code_len, char *msg, size_t msg_len);

/* An ISO 8601 time ("2026-11-25T10:00:00.000Z") in ns; 0 if it is not one. */
int64_t kvi_s3_time_parse(const char *text);

/* DeleteObjects request body for keys (XML-escaped) into a malloc'd
 * buffer. */
int kvi_s3_delete_body(const char *const *keys, size_t n, char **body, size_t *len);

/* URI-encode s into buf as S3 wants a query value (keep_slash 0) or a
 * key in the path (keep_slash 1). */
int kvi_s3_uri_encode(const char *s, int keep_slash, char *buf, size_t len);

#endif
