/*
 * libFuzzer harness for what an S3 server answers in XML (s3_xml.c):
 * listings, DeleteObjects results and errors from a hostile or broken
 * endpoint parse into bounded, checked fields or are refused; never a
 * crash, a read past the buffer or an unbounded allocation.  A listing's
 * pages hand on names only in order, and an error's text no credential.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <kv/errors.h>
#include "store/s3.h"

#define ASSERT(cond) do { if (!(cond)) abort(); } while (0)

static int on_object(const struct kvi_s3_object *o, void *arg)
{
	ASSERT(o->key && strlen(o->key) <= KVI_S3_KEY_MAX);
	(*(size_t *)arg)++;
	return 0;
}

static int on_prefix(const char *p, void *arg)
{
	ASSERT(strlen(p) <= KVI_S3_KEY_MAX);
	(*(size_t *)arg)++;
	return 0;
}

static void on_error(const char *key, const char *code, void *arg)
{
	ASSERT(key && code);
	(*(size_t *)arg)++;
}

/* What a listing's pages hand on: each name after every one before, of
 * its kind on its page, and after every name of the pages before. */
struct seen {
	char key[KVI_S3_KEY_MAX + 1], dir[KVI_S3_KEY_MAX + 1];
	char floor[KVI_S3_KEY_MAX + 1];
	size_t named;
};

static int seen_object(const struct kvi_s3_object *o, void *arg)
{
	struct seen *s = arg;

	ASSERT(strcmp(o->key, s->key) > 0 && strcmp(o->key, s->floor) > 0);
	strcpy(s->key, o->key);
	s->named++;
	return 0;
}

static int seen_prefix(const char *p, void *arg)
{
	struct seen *s = arg;

	ASSERT(strcmp(p, s->dir) > 0 && strcmp(p, s->floor) > 0);
	strcpy(s->dir, p);
	s->named++;
	return 0;
}

/* The input as a page, then again as the next: a page that named
 * anything cannot follow itself.  Then its halves as two pages. */
static void pages(const char *data, size_t len)
{
	struct kvi_s3_cursor c = { .token = NULL };
	struct seen s = { .named = 0 };
	size_t named;
	int rc;

	rc = kvi_s3_list_page(data, len, "fuzz", &c, seen_object, seen_prefix, &s);
	ASSERT(rc == 0 || rc == -KV_EPROTO);
	if (rc == 0) {
		named = s.named;
		strcpy(s.floor, c.last);
		s.key[0] = s.dir[0] = '\0';
		rc = kvi_s3_list_page(data, len, "fuzz", &c, seen_object, seen_prefix, &s);
		ASSERT(rc == -KV_EPROTO || (!named && s.named == named));
	}
	free(c.token);
	memset(&c, 0, sizeof(c));
	memset(&s, 0, sizeof(s));
	if (kvi_s3_list_page(data, len / 2, "fuzz", &c, seen_object, seen_prefix, &s) == 0) {
		strcpy(s.floor, c.last);
		s.key[0] = s.dir[0] = '\0';
		kvi_s3_list_page(data + len / 2, len - len / 2, "fuzz", &c, seen_object,
				 seen_prefix, &s);
	}
	free(c.token);
}

/* What a server's error text must never show of them (an echoing
 * server puts the request's headers there). */
static const char *const secrets[] = { "SECRETkey", "t0ken", NULL };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	char code[64], msg[256], *token = NULL;
	size_t n = 0;
	int truncated, rc;

	rc = kvi_s3_list_parse((const char *)data, len, on_object, on_prefix, &n, &truncated,
			       &token);
	ASSERT(rc == 0 || rc == -KV_EPROTO);
	ASSERT(rc == 0 || !token);
	ASSERT(!truncated || rc || token);
	free(token);
	pages((const char *)data, len);
	kvi_s3_delete_parse((const char *)data, len, on_error, &n);
	kvi_s3_error_parse((const char *)data, len, secrets, code, sizeof(code), msg, sizeof(msg));
	ASSERT(strlen(code) < sizeof(code) && strlen(msg) < sizeof(msg));
	for (size_t i = 0; code[i]; i++)
		ASSERT(code[i] >= 0x20 && code[i] < 0x7f);
	for (size_t i = 0; msg[i]; i++)
		ASSERT(msg[i] >= 0x20 && msg[i] < 0x7f);
	for (unsigned i = 0; secrets[i]; i++)
		ASSERT(!strstr(code, secrets[i]) && !strstr(msg, secrets[i]));
	return 0;
}
