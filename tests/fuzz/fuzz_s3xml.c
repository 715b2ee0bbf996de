/*
 * libFuzzer harness for what an S3 server answers in XML (s3_xml.c):
 * listings, DeleteObjects results and errors from a hostile or broken
 * endpoint parse into bounded, checked fields or are refused; never a
 * crash, a read past the buffer or an unbounded allocation.  An error's
 * text shows no credential.
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
