/* The S3 engine's parsers and encoders (s3_xml.c): listings with their
 * pages, prefixes and hostile fields, DeleteObjects bodies and answers,
 * errors made safe to print, times, and the URI encoding SigV4 signs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>
#include "store/s3.h"

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

struct seen {
	unsigned objects, prefixes;
	char key[KVI_S3_KEY_MAX + 1];
	uint64_t size;
	int64_t mtime;
	char prefix[KVI_S3_KEY_MAX + 1];
};

static int on_object(const struct kvi_s3_object *o, void *arg)
{
	struct seen *s = arg;

	s->objects++;
	snprintf(s->key, sizeof(s->key), "%s", o->key);
	s->size = o->size;
	s->mtime = o->mtime_ns;
	return 0;
}

static int on_prefix(const char *p, void *arg)
{
	struct seen *s = arg;

	s->prefixes++;
	snprintf(s->prefix, sizeof(s->prefix), "%s", p);
	return 0;
}

static int list(const char *xml, struct seen *s, int *truncated, char **token)
{
	memset(s, 0, sizeof(*s));
	return kvi_s3_list_parse(xml, strlen(xml), on_object, on_prefix, s, truncated, token);
}

#define HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"

static void test_listing(void)
{
	struct seen s;
	char *token, big[2 * KVI_S3_KEY_MAX + 200];
	int truncated;

	CHECK(list(HEAD "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
		   "<IsTruncated>true</IsTruncated><NextContinuationToken>t/+=</NextContinuationToken>"
		   "<CommonPrefixes><Prefix>fleet//</Prefix></CommonPrefixes>"
		   "<Contents><Key>fleet//m_0123456789ab_r0/abc/de_g0/abcde.bin</Key>"
		   "<LastModified>2026-11-26T00:16:50.250Z</LastModified><Size>4096</Size></Contents>"
		   "</ListBucketResult>", &s, &truncated, &token) == 0);
	CHECK(s.objects == 1 && s.prefixes == 1 && truncated && token && !strcmp(token, "t/+="));
	CHECK(!strcmp(s.key, "fleet//m_0123456789ab_r0/abc/de_g0/abcde.bin"));
	CHECK(!strcmp(s.prefix, "fleet//"));
	CHECK(s.size == 4096 && s.mtime == 1795652210250000000LL);
	free(token);
	/* The last page, no namespace. */
	CHECK(list(HEAD "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>",
		   &s, &truncated, &token) == 0 && !truncated && !token && !s.objects);
	/* A truncated page with no way on, junk, the wrong document. */
	CHECK(list("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
		   &s, &truncated, &token) == -KV_EPROTO && !token);
	CHECK(list("not xml at all", &s, &truncated, &token) == -KV_EPROTO);
	CHECK(list("<Error><Code>SlowDown</Code></Error>", &s, &truncated, &token) == -KV_EPROTO);
	CHECK(kvi_s3_list_parse("", 0, on_object, NULL, &s, &truncated, &token) == -KV_EPROTO);
	/* Sizes that are not counts, a key past S3's limit. */
	CHECK(list("<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents>"
		   "</ListBucketResult>", &s, &truncated, &token) == -KV_EPROTO);
	CHECK(list("<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",
		   &s, &truncated, &token) == -KV_EPROTO);
	snprintf(big, sizeof(big), "<ListBucketResult><Contents><Key>%0*d</Key><Size>1</Size>"
		 "</Contents></ListBucketResult>", KVI_S3_KEY_MAX + 1, 0);
	CHECK(list(big, &s, &truncated, &token) == -KV_EPROTO);
	/* S3 sends no DTD: one (and its entities, a billion laughs) is refused. */
	CHECK(list("<!DOCTYPE l [<!ENTITY a \"zz\">]><ListBucketResult><Contents><Key>x&a;</Key>"
		   "<Size>1</Size></Contents></ListBucketResult>", &s, &truncated, &token) ==
	      -KV_EPROTO && !s.objects);
}

static unsigned del_errors;
static char del_key[64];

static void on_del_error(const char *key, const char *code, void *arg)
{
	(void)arg;
	(void)code;
	del_errors++;
	snprintf(del_key, sizeof(del_key), "%s", key);
}

static void test_delete(void)
{
	const char *keys[] = { "fleet//a&b<c>.bin", "/lead" };
	char *body;
	size_t len;
	const char *answer = HEAD "<DeleteResult><Deleted><Key>/lead</Key></Deleted>"
			     "<Error><Key>fleet//x</Key><Code>AccessDenied</Code></Error></DeleteResult>";

	CHECK(kvi_s3_delete_body(keys, 2, &body, &len) == 0);
	CHECK(strstr(body, "<Quiet>true</Quiet>"));
	CHECK(strstr(body, "<Key>fleet//a&amp;b&lt;c&gt;.bin</Key>"));
	CHECK(strstr(body, "<Key>/lead</Key>"));
	free(body);
	CHECK(kvi_s3_delete_parse(answer, strlen(answer), on_del_error, NULL) == 0);
	CHECK(del_errors == 1 && !strcmp(del_key, "fleet//x"));
	CHECK(kvi_s3_delete_parse("<x/>", 4, on_del_error, NULL) == -KV_EPROTO);
}

static void test_error(void)
{
	char code[16], msg[32];
	const char *e = "<Error><Code>SignatureDoesNotMatch</Code>"
			"<Message>bad sig \xc3\xa9\xe2\x80\xae and a long tail that is cut</Message></Error>";

	kvi_s3_error_parse(e, strlen(e), NULL, code, sizeof(code), msg, sizeof(msg));
	/* Cut to fit, no terminal escapes. */
	CHECK(strlen(code) == sizeof(code) - 1 && !strncmp(code, "SignatureDoesNotMatch", 15));
	/* Printable ASCII only: no bidi override reaches a terminal. */
	CHECK(!strncmp(msg, "bad sig ????? and", 17) && strlen(msg) == sizeof(msg) - 1);
	kvi_s3_error_parse("", 0, NULL, code, sizeof(code), msg, sizeof(msg));
	CHECK(!code[0] && !msg[0]);
}

static void test_error_redacted(void)
{
	static const char *const secrets[] = { "S3cretKey/abc", "TokEnToken+tOKEN==", NULL };
	char code[64], msg[256], small[40];
	const char *e = "<Error><Code>InvalidArgument</Code><Message>Headers: "
			"x-amz-security-token: TokEnToken+tOKEN==&#10;"
			"Authorization: AWS4-HMAC-SHA256 Credential=AKID/x, "
			"SignedHeaders=host;x-amz-date, Signature=0123abcd&#10;"
			"key S3cretKey/abc, X-Amz-Signature=feed&amp;x=1"
			"</Message></Error>";

	kvi_s3_error_parse(e, strlen(e), secrets, code, sizeof(code), msg, sizeof(msg));
	CHECK(!strcmp(code, "InvalidArgument"));
	CHECK(!strstr(msg, "TokEn") && !strstr(msg, "S3cret") && !strstr(msg, "0123abcd") &&
	      !strstr(msg, "feed") && !strstr(msg, "AKID"));
	CHECK(strstr(msg, "x-amz-security-token: [redacted]?Authorization: [redacted]?key "
			  "[redacted], X-Amz-Signature=[redacted]&x=1"));
	/* A secret that would be cut by the end of the buffer goes whole. */
	kvi_s3_error_parse(e, strlen(e), secrets, code, sizeof(code), small, sizeof(small));
	CHECK(!strcmp(small, "Headers: x-amz-security-token: [redacte"));
}

static void test_times_and_encoding(void)
{
	char buf[64];

	CHECK(kvi_s3_time_parse("1970-01-01T00:00:01Z") == 1000000000LL);
	CHECK(kvi_s3_time_parse("2026-11-26T00:16:50.5Z") == 1795652210500000000LL);
	CHECK(kvi_s3_time_parse("9999-01-01T00:00:00Z") == 0);
	CHECK(kvi_s3_time_parse("yesterday") == 0);
	CHECK(kvi_s3_time_parse(NULL) == 0);
	CHECK(kvi_s3_uri_encode("a b/c+=~", 1, buf, sizeof(buf)) == 0 &&
	      !strcmp(buf, "a%20b/c%2B%3D~"));
	CHECK(kvi_s3_uri_encode("a b/c", 0, buf, sizeof(buf)) == 0 && !strcmp(buf, "a%20b%2Fc"));
	CHECK(kvi_s3_uri_encode("//", 1, buf, sizeof(buf)) == 0 && !strcmp(buf, "//"));
	CHECK(kvi_s3_uri_encode("abc", 0, buf, 3) == -ENAMETOOLONG);
	CHECK(kvi_s3_is_url("s3://b") && !kvi_s3_is_url("/s3://b") && !kvi_s3_is_url(NULL));
}

int main(void)
{
	test_listing();
	test_delete();
	test_error();
	test_error_redacted();
	test_times_and_encoding();
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures ? 1 : 0;
}
