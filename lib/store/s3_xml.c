/*
 * What S3 answers in XML (listings, DeleteObjects results, errors) read
 * with libxml2, and the one body kvtools sends (DeleteObjects).  Elements
 * are matched by local name, so a namespace or its absence is the same.
 * Answers come from a server that may be hostile: no network access, no
 * entity expansion, a size bound, and every field is checked before use.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <kv/errors.h>
#include "store/s3.h"
#include "util/error.h"

/* A listing page of 1,000 keys is about 300 KB. */
#define XML_MAX		(64u << 20)
#define XML_OPTIONS	(XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | \
			 XML_PARSE_NOBLANKS | XML_PARSE_NOCDATA)

static xmlDocPtr parse(const char *xml, size_t len)
{
	xmlDocPtr doc;

	if (!xml || len == 0 || len > XML_MAX)
		return NULL;
	doc = xmlReadMemory(xml, (int)len, "s3.xml", NULL, XML_OPTIONS);
	/* S3 sends no DTD; one could only be there to expand entities. */
	if (doc && (doc->intSubset || doc->extSubset)) {
		xmlFreeDoc(doc);
		return NULL;
	}
	return doc;
}

static int is(const xmlNode *n, const char *name)
{
	return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

static const xmlNode *child(const xmlNode *n, const char *name)
{
	for (n = n->children; n; n = n->next)
		if (is(n, name))
			return n;
	return NULL;
}

/* The text of n's child name (malloc'd by libxml2), NULL if absent. */
static char *child_text(const xmlNode *n, const char *name)
{
	const xmlNode *c = child(n, name);

	return c ? (char *)xmlNodeGetContent(c) : NULL;
}

int64_t kvi_s3_time_parse(const char *text)
{
	struct tm tm;
	const char *p;
	int64_t ns = 0, scale = 100000000;
	time_t t;

	if (!text)
		return 0;
	memset(&tm, 0, sizeof(tm));
	p = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return 0;
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++) {
			ns += (*p - '0') * scale;
			scale /= 10;
		}
	}
	if (*p != 'Z' && *p != '\0' && strcmp(p, "+00:00") != 0)
		return 0;
	t = timegm(&tm);
	/* Nanoseconds since the epoch run out in 2262. */
	if (t <= 0 || t >= INT64_MAX / 1000000000 - 1)
		return 0;
	return (int64_t)t * 1000000000 + ns;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long x;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*v = x;
	return 0;
}

int kvi_s3_list_parse(const char *xml, size_t len, kvi_s3_object_fn fn,
		      kvi_s3_prefix_fn prefix_fn, void *arg, int *truncated,
		      char **token)
{
	xmlDocPtr doc = parse(xml, len);
	const xmlNode *root, *n;
	char *key, *size, *mtime, *t;
	struct kvi_s3_object o;
	int rc = 0;

	*truncated = 0;
	*token = NULL;
	if (!doc)
		return -KV_EPROTO;
	root = xmlDocGetRootElement(doc);
	if (!root || !is(root, "ListBucketResult")) {
		xmlFreeDoc(doc);
		return -KV_EPROTO;
	}
	for (n = root->children; n && rc == 0; n = n->next) {
		if (is(n, "Contents")) {
			key = child_text(n, "Key");
			size = child_text(n, "Size");
			mtime = child_text(n, "LastModified");
			o.key = key;
			o.mtime_ns = kvi_s3_time_parse(mtime);
			if (!key || !*key || strlen(key) > KVI_S3_KEY_MAX ||
			    parse_u64(size, &o.size) < 0)
				rc = -KV_EPROTO;
			else
				rc = fn(&o, arg);
			xmlFree(key);
			xmlFree(size);
			xmlFree(mtime);
		} else if (is(n, "CommonPrefixes") && prefix_fn) {
			key = child_text(n, "Prefix");
			if (!key || strlen(key) > KVI_S3_KEY_MAX)
				rc = -KV_EPROTO;
			else
				rc = prefix_fn(key, arg);
			xmlFree(key);
		} else if (is(n, "IsTruncated")) {
			t = (char *)xmlNodeGetContent(n);
			*truncated = t && strcmp(t, "true") == 0;
			xmlFree(t);
		} else if (is(n, "NextContinuationToken")) {
			t = (char *)xmlNodeGetContent(n);
			free(*token);
			*token = t && *t && strlen(t) <= KVI_S3_KEY_MAX * 4 ? strdup(t) : NULL;
			xmlFree(t);
		}
	}
	xmlFreeDoc(doc);
	/* A truncated page without a token cannot be followed. */
	if (rc == 0 && *truncated && !*token)
		rc = -KV_EPROTO;
	if (rc) {
		free(*token);
		*token = NULL;
	}
	return rc;
}

/* Pages in a row that name nothing before a listing is taken not to
 * advance: S3 may send a few (keys it skips), not hundreds. */
#define EMPTY_PAGES_MAX	100

/* A page checked name by name on its way to the caller's fn. */
struct order {
	struct kvi_s3_cursor *c;
	const char *where;
	kvi_s3_object_fn fn;
	kvi_s3_prefix_fn prefix_fn;
	void *arg;
	char key[KVI_S3_KEY_MAX + 1], dir[KVI_S3_KEY_MAX + 1];	/* this page's last */
};

/* Keys come in order, dirs too (the two are sorted together, but a page
 * sends its keys first), and all after the pages before. */
static int in_order(struct order *o, char *last, const char *name)
{
	if (strcmp(name, last) <= 0 || strcmp(name, o->c->last) <= 0)
		return kvi_fail(-KV_EPROTO, "a listing from %s goes back: names out of order",
				o->where);
	snprintf(last, KVI_S3_KEY_MAX + 1, "%s", name);
	return 0;
}

static int ordered_object(const struct kvi_s3_object *obj, void *arg)
{
	struct order *o = arg;
	int rc = in_order(o, o->key, obj->key);

	return rc ? rc : o->fn(obj, o->arg);
}

static int ordered_prefix(const char *prefix, void *arg)
{
	struct order *o = arg;
	int rc = in_order(o, o->dir, prefix);

	return rc || !o->prefix_fn ? rc : o->prefix_fn(prefix, o->arg);
}

int kvi_s3_list_page(const char *xml, size_t len, const char *where, struct kvi_s3_cursor *c,
		     kvi_s3_object_fn fn, kvi_s3_prefix_fn prefix_fn, void *arg)
{
	struct order o = { .c = c, .where = where, .fn = fn, .prefix_fn = prefix_fn, .arg = arg };
	char *token = NULL;
	int truncated = 0, rc;

	rc = kvi_s3_list_parse(xml, len, ordered_object, ordered_prefix, &o, &truncated, &token);
	if (rc == 0 && truncated && c->token && !strcmp(c->token, token))
		rc = kvi_fail(-KV_EPROTO, "a listing from %s does not advance: the same token "
			      "again", where);
	if (rc == 0 && (o.key[0] || o.dir[0])) {
		snprintf(c->last, sizeof(c->last), "%s", strcmp(o.key, o.dir) > 0 ? o.key : o.dir);
		c->empty = 0;
	} else if (rc == 0 && truncated && ++c->empty > EMPTY_PAGES_MAX) {
		rc = kvi_fail(-KV_EPROTO, "a listing from %s does not advance: %u pages in a "
			      "row name nothing", where, EMPTY_PAGES_MAX + 1);
	}
	if (rc) {
		free(token);
		return rc;
	}
	free(c->token);
	c->token = token;
	c->truncated = truncated;
	return 0;
}

/* An S3 error code: a word of letters and digits ("AccessDenied"). */
static int is_code(const char *code)
{
	size_t n = code ? strlen(code) : 0;

	return n && n <= 64 && strspn(code, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
					    "abcdefghijklmnopqrstuvwxyz0123456789") == n;
}

int kvi_s3_delete_parse(const char *xml, size_t len, kvi_s3_delete_err_fn fn, void *arg)
{
	xmlDocPtr doc = parse(xml, len);
	const xmlNode *root, *n;
	char *key, *code;

	if (!doc)
		return -KV_EPROTO;
	root = xmlDocGetRootElement(doc);
	if (!root || !is(root, "DeleteResult")) {
		xmlFreeDoc(doc);
		return -KV_EPROTO;
	}
	for (n = root->children; n; n = n->next) {
		if (!is(n, "Error"))
			continue;
		key = child_text(n, "Key");
		code = child_text(n, "Code");
		/* The code reaches a message: S3's words, not the server's. */
		fn(key ? key : "", is_code(code) ? code : "InternalError", arg);
		xmlFree(key);
		xmlFree(code);
	}
	xmlFreeDoc(doc);
	return 0;
}

#define REDACTED	"[redacted]"

/* Headers whose value is a credential, or a signature made with one, as a
 * server echoing a request writes them: "Name: value" or "name=value". */
static const char *const secret_headers[] = {
	"authorization", "x-amz-security-token", "x-amz-signature", NULL
};

/* The length of a credential starting at text: one of secrets, or a
 * secret header's name and value (*keep: the name's part, kept); 0 if
 * none starts here. */
static size_t secret_at(const char *text, const char *const *secrets, size_t *keep)
{
	const char *p, *v;
	size_t i, n;

	*keep = 0;
	for (i = 0; secrets && secrets[i]; i++) {
		n = strlen(secrets[i]);
		if (n && !strncmp(text, secrets[i], n))
			return n;
	}
	for (i = 0; secret_headers[i]; i++) {
		n = strlen(secret_headers[i]);
		if (strncasecmp(text, secret_headers[i], n))
			continue;
		p = text + n + strspn(text + n, " \t\"'");
		if (*p != ':' && *p != '=')
			continue;
		v = p + 1 + strspn(p + 1, " \t\"'");
		/* The value runs to the end of its line, field or quote. */
		for (p = v; (unsigned char)*p >= 0x20 && !strchr("&<>\"'", *p); p++)
			;
		if (p == v)
			continue;
		*keep = (size_t)(v - text);
		return (size_t)(p - text);
	}
	return 0;
}

static char printable(char c)
{
	return c >= 0x20 && c < 0x7f ? c : '?';
}

/* src into dst, cut to fit: printable ASCII only, as this text reaches a
 * terminal, and every credential in it redacted.  Each is matched whole
 * before anything is cut, so none shows in part either. */
static void copy_text(char *dst, size_t len, const char *src, const char *const *secrets)
{
	size_t i = 0, j = 0, k, n, keep;

	while (src && src[i] && j + 1 < len) {
		n = secret_at(src + i, secrets, &keep);
		if (!n) {
			dst[j++] = printable(src[i++]);
			continue;
		}
		for (k = 0; k < keep && j + 1 < len; k++)
			dst[j++] = printable(src[i + k]);
		for (k = 0; REDACTED[k] && j + 1 < len; k++)
			dst[j++] = REDACTED[k];
		i += n;
	}
	dst[j] = '\0';
}

void kvi_s3_error_parse(const char *xml, size_t len, const char *const *secrets, char *code,
			size_t code_len, char *msg, size_t msg_len)
{
	xmlDocPtr doc = parse(xml, len);
	const xmlNode *root;
	char *c = NULL, *m = NULL;

	code[0] = msg[0] = '\0';
	if (!doc)
		return;
	root = xmlDocGetRootElement(doc);
	if (root && is(root, "Error")) {
		c = child_text(root, "Code");
		m = child_text(root, "Message");
		copy_text(code, code_len, c, secrets);
		copy_text(msg, msg_len, m, secrets);
	}
	xmlFree(c);
	xmlFree(m);
	xmlFreeDoc(doc);
}

int kvi_s3_uri_encode(const char *s, int keep_slash, char *buf, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t j = 0;
	unsigned char c;

	for (; (c = (unsigned char)*s); s++) {
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
			if (j + 1 >= len)
				return -ENAMETOOLONG;
			buf[j++] = (char)c;
		} else {
			if (j + 3 >= len)
				return -ENAMETOOLONG;
			buf[j++] = '%';
			buf[j++] = hex[c >> 4];
			buf[j++] = hex[c & 15];
		}
	}
	if (j >= len)
		return -ENAMETOOLONG;
	buf[j] = '\0';
	return 0;
}

int kvi_s3_delete_body(const char *const *keys, size_t n, char **body, size_t *len)
{
	xmlDocPtr doc = xmlNewDoc(BAD_CAST "1.0");
	xmlNodePtr root, obj;
	xmlChar *out = NULL;
	int size = 0;
	size_t i;

	if (!doc)
		return -ENOMEM;
	root = xmlNewNode(NULL, BAD_CAST "Delete");
	if (!root) {
		xmlFreeDoc(doc);
		return -ENOMEM;
	}
	xmlDocSetRootElement(doc, root);
	xmlNewProp(root, BAD_CAST "xmlns", BAD_CAST "http://s3.amazonaws.com/doc/2006-03-01/");
	/* Only failures come back. */
	xmlNewTextChild(root, NULL, BAD_CAST "Quiet", BAD_CAST "true");
	for (i = 0; i < n; i++) {
		obj = xmlNewChild(root, NULL, BAD_CAST "Object", NULL);
		/* xmlNewTextChild escapes &, < and >. */
		if (!obj || !xmlNewTextChild(obj, NULL, BAD_CAST "Key", BAD_CAST keys[i])) {
			xmlFreeDoc(doc);
			return -ENOMEM;
		}
	}
	xmlDocDumpMemoryEnc(doc, &out, &size, "UTF-8");
	xmlFreeDoc(doc);
	if (!out || size <= 0) {
		xmlFree(out);
		return -ENOMEM;
	}
	*body = malloc((size_t)size);
	if (!*body) {
		xmlFree(out);
		return -ENOMEM;
	}
	memcpy(*body, out, (size_t)size);
	*len = (size_t)size;
	xmlFree(out);
	return 0;
}
