/*
 * The object-store engine (s3.h): configuration as the AWS CLI reads it,
 * requests on libcurl (SigV4 by CURLOPT_AWS_SIGV4), many in flight on a
 * multi handle, retries with jittered exponential backoff.  Connections
 * live in multi handles that calls borrow from a pool, one caller at a
 * time (libcurl shares no connection between threads at once), so the
 * next call on any thread reuses them; DNS and TLS sessions are shared.  No secret is ever
 * put in a message.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>
#include <libxml/parser.h>
#include <kv/errors.h>
#include <kv/units.h>
#include "store/s3.h"
#include "util/error.h"

#define INFLIGHT_DEFAULT	32u
#define INFLIGHT_MAX		256u
#define ATTEMPTS_DEFAULT	5u
#define CONNECT_TIMEOUT_MS	10000L
#define IDLE_TIMEOUT_S		30L	/* no byte for this long: a timeout */
#define REQUEST_TIMEOUT_MS	300000L	/* a whole request: a slow drip ends */
#define TIMER_SLACK_MS		50
#define BACKOFF_BASE_NS		50000000LL	/* 50 ms, doubling */
#define BACKOFF_MAX_NS		5000000000LL
#define RESP_MAX		(8u << 20)	/* an XML answer kept in memory: a page of
					   1,000 keys of S3's longest is 1.3 MB */
#define INI_MAX			(1u << 20)
#define FIELD_MAX		1024
#define POOL_MAX		16	/* idle multi handles kept */

struct kvi_s3 {
	char bucket[256];
	char prefix[KVI_S3_KEY_MAX];	/* "PREFIX/" or "" */
	char base[2048];		/* URL of the bucket, no trailing '/' */
	char where[2600];
	char endpoint[FIELD_MAX + 64];	/* for messages */
	char sigv4[160];
	char akid[FIELD_MAX], secret[FIELD_MAX], token[4 * FIELD_MAX];
	char ca[FIELD_MAX];
	long connect_ms, idle_s, request_ms;
	unsigned attempts, inflight;
	CURLSH *share;
	pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
	pthread_mutex_t pool_lock;
	CURLM *pool[POOL_MAX];	/* idle multi handles, their connections open */
	unsigned npool;
};

/* One transfer's buffers and what its headers said. */
struct xfer {
	struct kvi_s3 *s;
	struct kvi_s3_op *op;
	CURL *h;
	struct curl_slist *hdrs;
	size_t sent;		/* PUT bytes handed to curl */
	size_t resp_len, resp_cap;
	uint64_t content_length;
	int have_length;
	int too_big;
	int sink_rc;		/* what op->sink stopped the body with */
	int64_t start_ns;	/* when it was sent */
	char url[KVI_S3_KEY_MAX * 3 + 2600];
	char range[48];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static int global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
	xmlInitParser();
}

int kvi_s3_is_url(const char *root)
{
	return root && strncmp(root, KVI_S3_SCHEME, strlen(KVI_S3_SCHEME)) == 0;
}

/* ---- configuration ---- */

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static void trim(char **s, char **e)
{
	while (*s < *e && isspace((unsigned char)**s))
		(*s)++;
	while (*e > *s && isspace((unsigned char)(*e)[-1]))
		(*e)--;
}

/* key's value in [section] of an AWS ini file, into buf; 0 or -ENOENT.
 * Indented lines belong to a nested block ("s3 =\n  key = v"): skipped. */
static int ini_get(const char *path, const char *section, const char *key,
		   char *buf, size_t len)
{
	char *text, *line, *next, *end, *eq, *k, *ke, *v, *ve;
	int fd, in = 0, rc = -ENOENT;
	ssize_t n;

	if (!path)
		return -ENOENT;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -ENOENT;
	text = malloc(INI_MAX + 1);
	if (!text) {
		close(fd);
		return -ENOMEM;
	}
	n = read(fd, text, INI_MAX);
	close(fd);
	if (n < 0)
		n = 0;
	text[n] = '\0';
	for (line = text; line && *line; line = next) {
		next = strchr(line, '\n');
		end = next ? next : line + strlen(line);
		if (next)
			*next++ = '\0';
		if (*line == ' ' || *line == '\t')
			continue;
		k = line;
		ke = end;
		trim(&k, &ke);
		if (k == ke || *k == '#' || *k == ';')
			continue;
		if (*k == '[') {
			char *close_br = memchr(k, ']', (size_t)(ke - k));

			if (close_br) {
				char *sn = k + 1, *se = close_br;

				trim(&sn, &se);
				in = (size_t)(se - sn) == strlen(section) &&
				     strncmp(sn, section, (size_t)(se - sn)) == 0;
			} else {
				in = 0;
			}
			continue;
		}
		if (!in || !(eq = memchr(k, '=', (size_t)(ke - k))))
			continue;
		v = eq + 1;
		ve = ke;
		trim(&v, &ve);
		ke = eq;
		trim(&k, &ke);
		if ((size_t)(ke - k) == strlen(key) && strncmp(k, key, (size_t)(ke - k)) == 0) {
			if ((size_t)(ve - v) >= len) {
				rc = -ENAMETOOLONG;
				break;
			}
			memcpy(buf, v, (size_t)(ve - v));
			buf[ve - v] = '\0';
			rc = 0;
			break;
		}
	}
	free(text);
	return rc;
}

static void home_file(const char *var, const char *name, char *buf, size_t len)
{
	const char *v = env(var), *home = env("HOME");

	if (v)
		snprintf(buf, len, "%s", v);
	else if (home)
		snprintf(buf, len, "%s/.aws/%s", home, name);
	else
		buf[0] = '\0';
}

/* A setting from the environment, else the profile's section in the
 * config file; 0 if found. */
static int setting(const char *envs[], const char *config, const char *profile,
		   const char *key, char *buf, size_t len)
{
	char section[300];
	unsigned i;

	for (i = 0; envs && envs[i]; i++)
		if (env(envs[i])) {
			if (strlen(env(envs[i])) >= len)
				return -ENAMETOOLONG;
			strcpy(buf, env(envs[i]));
			return 0;
		}
	if (strcmp(profile, "default") == 0 && ini_get(config, "default", key, buf, len) == 0)
		return 0;
	snprintf(section, sizeof(section), "profile %s", profile);
	return ini_get(config, section, key, buf, len) == 0 ? 0 : -ENOENT;
}

static int duration_ms(const char *name, long dflt, long *out)
{
	const char *v = env(name);
	uint64_t ns;

	*out = dflt;
	if (!v)
		return 0;
	if (kv_duration_parse(v, &ns) < 0 || ns == 0)
		return kvi_fail(-EINVAL, "$%s: not a duration: '%s'", name, v);
	*out = ns / 1000000 ? (long)(ns / 1000000) : 1;
	return 0;
}

/* Whether path has a "." or ".." segment, which libcurl or a server
 * would fold away: a key that names another, or another bucket. */
static int dot_segment(const char *path)
{
	const char *seg, *end;

	for (seg = path; seg; seg = *end ? end + 1 : NULL) {
		end = strchrnul(seg, '/');
		if ((end - seg == 1 && seg[0] == '.') ||
		    (end - seg == 2 && seg[0] == '.' && seg[1] == '.'))
			return 1;
	}
	return 0;
}

/* "s3://BUCKET[/PREFIX]" into the bucket and vLLM's root_dir:
 * "PREFIX/" (its trailing slashes folded into one), or "". */
static int parse_url(const char *url, char *bucket, size_t bucket_len, char *prefix,
		     size_t prefix_len)
{
	const char *b = url + strlen(KVI_S3_SCHEME), *slash;
	size_t blen, plen;

	if (!kvi_s3_is_url(url))
		return kvi_fail(-EINVAL, "'%s' is not an s3:// URL", url);
	slash = strchr(b, '/');
	blen = slash ? (size_t)(slash - b) : strlen(b);
	if (blen == 0 || blen >= bucket_len)
		return kvi_fail(-EINVAL, "no bucket name after s3://");
	/* Letters, digits, '.', '-' and '_' (S3's names and the older ones):
	 * nothing a URL would read as more than a name. */
	for (size_t i = 0; i < blen; i++)
		if (!isalnum((unsigned char)b[i]) && !strchr(".-_", b[i]))
			return kvi_fail(-EINVAL, "'%.*s' is not a bucket name", (int)blen, b);
	if (strspn(b, ".") >= blen)
		return kvi_fail(-EINVAL, "'%.*s' is not a bucket name", (int)blen, b);
	memcpy(bucket, b, blen);
	bucket[blen] = '\0';
	prefix[0] = '\0';
	if (!slash)
		return 0;
	plen = strlen(slash + 1);
	while (plen && slash[plen] == '/')
		plen--;
	if (plen + 2 > prefix_len)
		return kvi_fail(-ENAMETOOLONG, "prefix over %zu bytes", prefix_len - 2);
	if (plen) {
		memcpy(prefix, slash + 1, plen);
		prefix[plen] = '\0';
		if (dot_segment(prefix))
			return kvi_fail(-EINVAL, "a '.' or '..' segment in the prefix would "
					"name other keys, or another bucket");
		prefix[plen] = '/';
		prefix[plen + 1] = '\0';
	}
	return 0;
}

int kvi_s3_url_check(const char *url)
{
	char bucket[256], prefix[KVI_S3_KEY_MAX];

	return parse_url(url, bucket, sizeof(bucket), prefix, sizeof(prefix));
}

static int load_conf(struct kvi_s3 *s, const char *url)
{
	static const char *endpoint_envs[] = { "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", NULL };
	static const char *region_envs[] = { "AWS_REGION", "AWS_DEFAULT_REGION", NULL };
	static const char *ca_envs[] = { "AWS_CA_BUNDLE", NULL };
	char config[4096], creds[4096], endpoint[FIELD_MAX], region[128];
	const char *profile = env("AWS_PROFILE") ? env("AWS_PROFILE") :
			      env("AWS_DEFAULT_PROFILE") ? env("AWS_DEFAULT_PROFILE") : "default";
	long ms;
	int rc;

	rc = parse_url(url, s->bucket, sizeof(s->bucket), s->prefix, sizeof(s->prefix));
	if (rc < 0)
		return rc;

	home_file("AWS_CONFIG_FILE", "config", config, sizeof(config));
	home_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", creds, sizeof(creds));
	if (setting(region_envs, config, profile, "region", region, sizeof(region)) < 0)
		strcpy(region, "us-east-1");
	for (const char *c = region; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '-')
			return kvi_fail(-EINVAL, "region '%s' is not a region name", region);
	snprintf(s->sigv4, sizeof(s->sigv4), "aws:amz:%s:s3", region);
	if (setting(ca_envs, config, profile, "ca_bundle", s->ca, sizeof(s->ca)) < 0)
		s->ca[0] = '\0';

	/* Credentials: the environment as a pair, else the profile in the
	 * credentials file, else in the config file. */
	s->akid[0] = s->secret[0] = s->token[0] = '\0';
	if (env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY")) {
		snprintf(s->akid, sizeof(s->akid), "%s", env("AWS_ACCESS_KEY_ID"));
		snprintf(s->secret, sizeof(s->secret), "%s", env("AWS_SECRET_ACCESS_KEY"));
		if (env("AWS_SESSION_TOKEN"))
			snprintf(s->token, sizeof(s->token), "%s", env("AWS_SESSION_TOKEN"));
	} else if (ini_get(creds, profile, "aws_access_key_id", s->akid, sizeof(s->akid)) == 0 &&
		   ini_get(creds, profile, "aws_secret_access_key", s->secret,
			   sizeof(s->secret)) == 0) {
		ini_get(creds, profile, "aws_session_token", s->token, sizeof(s->token));
	} else if (setting(NULL, config, profile, "aws_access_key_id", s->akid,
			   sizeof(s->akid)) == 0 &&
		   setting(NULL, config, profile, "aws_secret_access_key", s->secret,
			   sizeof(s->secret)) == 0) {
		setting(NULL, config, profile, "aws_session_token", s->token, sizeof(s->token));
	} else {
		s->akid[0] = s->secret[0] = '\0';
	}

	/* A custom endpoint (MinIO, Ceph RGW...): path-style, as those
	 * expect; AWS itself: virtual-hosted style. */
	if (setting(endpoint_envs, config, profile, "endpoint_url", endpoint,
		    sizeof(endpoint)) == 0) {
		size_t n = strlen(endpoint);

		while (n && endpoint[n - 1] == '/')
			endpoint[--n] = '\0';
		if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8))
			return kvi_fail(-EINVAL, "endpoint '%s' is not an http:// or https:// URL",
					endpoint);
		snprintf(s->base, sizeof(s->base), "%s/%s", endpoint, s->bucket);
		snprintf(s->where, sizeof(s->where), "s3://%s/%s at %s", s->bucket, s->prefix,
			 endpoint);
		snprintf(s->endpoint, sizeof(s->endpoint), "%s", endpoint);
	} else {
		snprintf(s->base, sizeof(s->base), "https://%s.s3.%s.amazonaws.com", s->bucket,
			 region);
		snprintf(s->where, sizeof(s->where), "s3://%s/%s at https://s3.%s.amazonaws.com",
			 s->bucket, s->prefix, region);
		snprintf(s->endpoint, sizeof(s->endpoint), "https://s3.%s.amazonaws.com", region);
	}

	if ((rc = duration_ms("KV_S3_CONNECT_TIMEOUT", CONNECT_TIMEOUT_MS, &s->connect_ms)) < 0)
		return rc;
	if ((rc = duration_ms("KV_S3_TIMEOUT", IDLE_TIMEOUT_S * 1000, &ms)) < 0)
		return rc;
	s->idle_s = ms < 1000 ? 1 : ms / 1000;
	if ((rc = duration_ms("KV_S3_REQUEST_TIMEOUT", REQUEST_TIMEOUT_MS, &s->request_ms)) < 0)
		return rc;
	s->attempts = ATTEMPTS_DEFAULT;
	if (env("AWS_MAX_ATTEMPTS")) {
		char *end;
		long v = strtol(env("AWS_MAX_ATTEMPTS"), &end, 10);

		if (*end || v < 1 || v > 100)
			return kvi_fail(-EINVAL, "$AWS_MAX_ATTEMPTS: not a count from 1 to 100: '%s'",
					env("AWS_MAX_ATTEMPTS"));
		s->attempts = (unsigned)v;
	}
	s->inflight = INFLIGHT_DEFAULT;
	if (env("KV_S3_INFLIGHT")) {
		char *end;
		long v = strtol(env("KV_S3_INFLIGHT"), &end, 10);

		if (*end || v < 1 || v > (long)INFLIGHT_MAX)
			return kvi_fail(-EINVAL, "$KV_S3_INFLIGHT: not a count from 1 to %u: '%s'",
					INFLIGHT_MAX, env("KV_S3_INFLIGHT"));
		s->inflight = (unsigned)v;
	}
	return 0;
}

/* ---- the connection share ---- */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access a, void *arg)
{
	struct kvi_s3 *s = arg;

	(void)h;
	(void)a;
	pthread_mutex_lock(&s->share_lock[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *arg)
{
	struct kvi_s3 *s = arg;

	(void)h;
	pthread_mutex_unlock(&s->share_lock[data]);
}

const char *kvi_s3_where(const struct kvi_s3 *s)
{
	return s->where;
}

int kvi_s3_condition_refused(const struct kvi_s3_op *op)
{
	return (op->flags & KVI_S3_IF_NONE_MATCH) && op->result == -KV_ES3 &&
	       (op->status == 501 || op->status == 400);
}

const char *kvi_s3_prefix(const struct kvi_s3 *s)
{
	return s->prefix;
}

int kvi_s3_key(const struct kvi_s3 *s, const char *rel, int slash, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s%s%s", s->prefix, slash ? "/" : "", rel);

	return n < 0 || (size_t)n >= len || (size_t)n > KVI_S3_KEY_MAX ? -ENAMETOOLONG : 0;
}

const char *kvi_s3_rel(const struct kvi_s3 *s, const char *key)
{
	size_t n = strlen(s->prefix);

	if (strncmp(key, s->prefix, n) != 0)
		return NULL;
	key += n;
	if (*key == '/')
		key++;
	return *key && *key != '/' ? key : NULL;
}

int kvi_s3_open(const char *url, struct kvi_s3 **out)
{
	struct kvi_s3 *s;
	struct kvi_s3_op op = { .method = KVI_S3_HEAD };
	int rc, i;

	kvi_error_clear();
	pthread_once(&global_once, global_init);
	if (global_rc)
		return global_rc;
	if (!kvi_s3_is_url(url))
		return kvi_fail(-EINVAL, "'%s' is not an s3:// URL", url);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	rc = load_conf(s, url);
	if (rc < 0) {
		free(s);
		return rc;
	}
	for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&s->share_lock[i], NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	s->share = curl_share_init();
	if (!s->share) {
		kvi_s3_close(s);
		return -ENOMEM;
	}
	curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);

	/* The bucket must answer: a wrong endpoint, key or name fails here,
	 * in words that name them. */
	rc = kvi_s3_do(s, &op);
	if (rc == -ENOENT)
		rc = kvi_fail(-KV_ENOBUCKET, "no bucket '%s' at %s", s->bucket, s->endpoint);
	else if (rc == -EACCES)
		rc = kvi_fail(-EACCES, "access to bucket '%s' at %s denied%s", s->bucket, s->endpoint,
			      s->akid[0] ? "" : ": no credentials found (AWS_ACCESS_KEY_ID, "
			      "AWS_PROFILE, ~/.aws/credentials)");
	free(op.resp);
	if (rc < 0) {
		kvi_s3_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

void kvi_s3_close(struct kvi_s3 *s)
{
	int i;

	if (!s)
		return;
	while (s->npool)
		curl_multi_cleanup(s->pool[--s->npool]);
	if (s->share)
		curl_share_cleanup(s->share);
	for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&s->share_lock[i]);
	pthread_mutex_destroy(&s->pool_lock);
	/* The secret does not outlive its use in freed memory. */
	explicit_bzero(s->secret, sizeof(s->secret));
	explicit_bzero(s->token, sizeof(s->token));
	free(s);
}

/* ---- one transfer ---- */

static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	struct kvi_s3_op *op = x->op;
	size_t len = size * n, name_len;
	char value[256], *colon = memchr(line, ':', len);
	const char *v;
	struct tm tm;

	if (!colon)
		return len;
	name_len = (size_t)(colon - line);
	v = colon + 1;
	while (v < line + len && (*v == ' ' || *v == '\t'))
		v++;
	{
		size_t vl = (size_t)(line + len - v);

		while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
			vl--;
		if (vl >= sizeof(value))
			return len;
		memcpy(value, v, vl);
		value[vl] = '\0';
	}
#define HDR(name) (name_len == strlen(name) && strncasecmp(line, name, name_len) == 0)
	if (HDR("content-length")) {
		x->content_length = strtoull(value, NULL, 10);
		x->have_length = 1;
	} else if (HDR("content-range")) {
		/* "bytes a-b/total": the whole object's size. */
		const char *slash = strrchr(value, '/');

		if (slash && slash[1] >= '0' && slash[1] <= '9')
			op->size = strtoull(slash + 1, NULL, 10);
	} else if (HDR(KVI_S3_XXH3_META)) {
		if (strlen(value) == 16 && strspn(value, "0123456789abcdef") == 16)
			memcpy(op->meta_xxh3, value, 17);
	} else if (HDR("last-modified") || HDR("date")) {
		int64_t *ns = HDR("date") ? &op->date_ns : &op->mtime_ns;

		memset(&tm, 0, sizeof(tm));
		if (strptime(value, "%a, %d %b %Y %H:%M:%S GMT", &tm)) {
			time_t t = timegm(&tm);

			/* A server's date past 2262 does not fit: unknown. */
			*ns = t > 0 && t < INT64_MAX / 1000000000 - 1 ? (int64_t)t * 1000000000 : 0;
		}
	}
#undef HDR
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	struct kvi_s3_op *op = x->op;
	size_t len = size * n;
	long status = 0;

	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
	if (op->sink && status >= 200 && status < 300) {
		x->sink_rc = op->sink(op, data, len);
		if (x->sink_rc)
			return 0;	/* stops the transfer: CURLE_WRITE_ERROR */
		op->got += len;
		return len;
	}
	if (op->dst && status >= 200 && status < 300) {
		if (op->got + len > op->cap) {
			x->too_big = 1;
			return 0;	/* stops the transfer: CURLE_WRITE_ERROR */
		}
		memcpy((char *)op->dst + op->got, data, len);
		op->got += len;
		return len;
	}
	/* An answer to parse (listing, error): kept, bounded. */
	if (x->resp_len + len > RESP_MAX) {
		x->too_big = 1;
		return 0;
	}
	if (x->resp_len + len + 1 > x->resp_cap) {
		size_t cap = x->resp_cap ? x->resp_cap : 16384;
		char *p;

		while (cap < x->resp_len + len + 1)
			cap *= 2;
		p = realloc(op->resp, cap);
		if (!p)
			return 0;
		op->resp = p;
		x->resp_cap = cap;
	}
	memcpy(op->resp + x->resp_len, data, len);
	x->resp_len += len;
	op->resp[x->resp_len] = '\0';
	if (!op->dst)
		op->got = x->resp_len;
	return len;
}

static size_t on_read(char *buf, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	const struct kvi_s3_op *op = x->op;
	size_t len = size * n, left = op->body_len - x->sent;

	if (len > left)
		len = left;
	memcpy(buf, (const char *)op->body + x->sent, len);
	x->sent += len;
	return len;
}

/* A retried PUT starts its body again. */
static int on_seek(void *arg, curl_off_t off, int origin)
{
	struct xfer *x = arg;

	if (origin != SEEK_SET || off < 0 || (size_t)off > x->op->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	x->sent = (size_t)off;
	return CURL_SEEKFUNC_OK;
}

static int add_header(struct xfer *x, const char *h)
{
	struct curl_slist *l = curl_slist_append(x->hdrs, h);

	if (!l)
		return -ENOMEM;
	x->hdrs = l;
	return 0;
}

static void xfer_reset(struct xfer *x)
{
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
	x->sent = x->resp_len = x->resp_cap = 0;
	x->content_length = 0;
	x->have_length = x->too_big = x->sink_rc = 0;
}

static int xfer_setup(struct xfer *x, struct kvi_s3_op *op)
{
	struct kvi_s3 *s = x->s;
	CURL *h = x->h;
	char hdr[4 * FIELD_MAX + 64];
	size_t n;
	int rc;

	xfer_reset(x);
	x->op = op;
	free(op->resp);
	op->resp = NULL;
	op->got = 0;
	op->size = 0;
	op->mtime_ns = op->date_ns = 0;
	op->meta_xxh3[0] = '\0';
	op->status = 0;

	n = (size_t)snprintf(x->url, sizeof(x->url), "%s/", s->base);
	if (op->key && dot_segment(op->key))
		return kvi_fail(-EINVAL, "key '%s' has a '.' or '..' segment", op->key);
	if (op->key) {
		rc = kvi_s3_uri_encode(op->key, 1, x->url + n, sizeof(x->url) - n);
		if (rc < 0)
			return rc;
		n += strlen(x->url + n);
	}
	if (op->query && (size_t)snprintf(x->url + n, sizeof(x->url) - n, "?%s", op->query) >=
			 sizeof(x->url) - n)
		return -ENAMETOOLONG;

	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, x->url);
	curl_easy_setopt(h, CURLOPT_SHARE, s->share);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PRIVATE, x);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, s->connect_ms);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, s->idle_s);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, s->request_ms);
	/* The key as it is: "a/../b" is a key of its own to S3. */
	curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	if (s->ca[0])
		curl_easy_setopt(h, CURLOPT_CAINFO, s->ca);
	if (s->akid[0]) {
		curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
		curl_easy_setopt(h, CURLOPT_USERNAME, s->akid);
		curl_easy_setopt(h, CURLOPT_PASSWORD, s->secret);
		/* Bodies are not hashed: a PUT is sent as it is read. */
		if ((rc = add_header(x, "x-amz-content-sha256: UNSIGNED-PAYLOAD")) < 0)
			return rc;
		if (s->token[0]) {
			snprintf(hdr, sizeof(hdr), "x-amz-security-token: %s", s->token);
			if ((rc = add_header(x, hdr)) < 0)
				return rc;
		}
	}
	switch (op->method) {
	case KVI_S3_HEAD:
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
		break;
	case KVI_S3_GET:
		if (op->flags & KVI_S3_TAIL) {
			snprintf(x->range, sizeof(x->range), "Range: bytes=-%zu", op->tail);
			if ((rc = add_header(x, x->range)) < 0)
				return rc;
		}
		break;
	case KVI_S3_PUT:
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, x);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, x);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)op->body_len);
		/* Big blocks go without waiting for "100 Continue" (an empty
		 * "Expect:" header would be signed and refused). */
		curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
		if ((rc = add_header(x, "Content-Type: application/octet-stream")) < 0)
			return rc;
		if (op->flags & KVI_S3_IF_NONE_MATCH && (rc = add_header(x, "If-None-Match: *")) < 0)
			return rc;
		if (op->xxh3) {
			snprintf(hdr, sizeof(hdr), "%s: %s", KVI_S3_XXH3_META, op->xxh3);
			if ((rc = add_header(x, hdr)) < 0)
				return rc;
		}
		break;
	case KVI_S3_DELETE:
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
		break;
	case KVI_S3_POST:
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, op->body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)op->body_len);
		curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
		if ((rc = add_header(x, "Content-Type: application/xml")) < 0)
			return rc;
		if (op->content_md5) {
			snprintf(hdr, sizeof(hdr), "Content-MD5: %s", op->content_md5);
			if ((rc = add_header(x, hdr)) < 0)
				return rc;
		}
		break;
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
	x->start_ns = kv_monotonic_ns();
	return 0;
}

/* Which of the three limits a timed-out transfer ran into, in words.
 * curl's timers fire within a millisecond or so of their time. */
static void timeout_detail(struct xfer *x, char *buf, size_t len)
{
	const struct kvi_s3 *s = x->s;
	curl_off_t sent_us = 0;

	/* A connection made (or reused) has a request on it. */
	curl_easy_getinfo(x->h, CURLINFO_PRETRANSFER_TIME_T, &sent_us);
	if ((kv_monotonic_ns() - x->start_ns) / 1000000 + TIMER_SLACK_MS >= s->request_ms)
		snprintf(buf, len, "no whole answer within %ld%s ($KV_S3_REQUEST_TIMEOUT)",
			 s->request_ms % 1000 ? s->request_ms : s->request_ms / 1000,
			 s->request_ms % 1000 ? "ms" : "s");
	else if (!sent_us)
		snprintf(buf, len, "no connection within %ld%s ($KV_S3_CONNECT_TIMEOUT)",
			 s->connect_ms % 1000 ? s->connect_ms : s->connect_ms / 1000,
			 s->connect_ms % 1000 ? "ms" : "s");
	else
		snprintf(buf, len, "no byte for %lds ($KV_S3_TIMEOUT)", s->idle_s);
}

static const char *status_code(long status)
{
	switch (status) {
	case 400: return "BadRequest";
	case 403: return "AccessDenied";
	case 404: return "NotFound";
	case 409: return "Conflict";
	case 412: return "PreconditionFailed";
	case 416: return "InvalidRange";
	case 429: return "TooManyRequests";
	case 500: return "InternalError";
	case 503: return "SlowDown";
	default: return "";
	}
}

static int is_retryable(int rc)
{
	return rc == -EAGAIN || rc == -EIO || rc == -ECONNRESET || rc == -ETIMEDOUT ||
	       rc == -ECONNREFUSED;
}

/* What a finished transfer means for its op: op->result, and the detail
 * text for a failure. */
static void xfer_finish(struct xfer *x, CURLcode cc)
{
	struct kvi_s3_op *op = x->op;
	struct kvi_s3 *s = x->s;
	const char *secrets[] = { s->secret, s->token, NULL };
	char code[64], msg[256];
	const char *key = op->key ? op->key : "";
	long status = 0;
	int rc;

	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
	op->status = status;
	/* A tail's size is the whole object's, from Content-Range. */
	if (x->have_length && !(op->method == KVI_S3_GET && op->flags & KVI_S3_TAIL))
		op->size = x->content_length;
	if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && x->too_big && status >= 200 &&
				status < 300)) {
		switch (cc) {
		case CURLE_COULDNT_CONNECT:
			rc = -ECONNREFUSED;
			break;
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_COULDNT_RESOLVE_PROXY:
			rc = -EHOSTUNREACH;
			break;
		case CURLE_OPERATION_TIMEDOUT:
			rc = -ETIMEDOUT;
			break;
		case CURLE_WRITE_ERROR:
		case CURLE_OUT_OF_MEMORY:
			rc = x->too_big ? -EFBIG : x->sink_rc ? x->sink_rc : -ENOMEM;
			break;
		case CURLE_SSL_CONNECT_ERROR:
		case CURLE_PEER_FAILED_VERIFICATION:
		case CURLE_SSL_CACERT_BADFILE:
			rc = -EPROTO;
			break;
		default:	/* resets, empty replies, short bodies */
			rc = -ECONNRESET;
			break;
		}
		/* The sink said why it stopped the body. */
		if (x->sink_rc && cc == CURLE_WRITE_ERROR) {
			op->result = x->sink_rc;
		} else if (rc == -ETIMEDOUT) {
			timeout_detail(x, msg, sizeof(msg));
			op->result = kvi_fail(rc, "%s for %s%s' (%s)", msg,
					      *key ? "'" : "bucket '", *key ? key : s->bucket,
					      s->endpoint);
		} else {
			op->result = kvi_fail(rc, "%s (%s)", curl_easy_strerror(cc), s->endpoint);
		}
		return;
	}
	if (status >= 200 && status < 300) {
		op->result = 0;
		if (x->too_big && op->dst)
			op->result = kvi_fail(-EFBIG, "object '%s' is larger than %zu bytes", key,
					      op->cap);
		/* An answer to parse, past what one may take. */
		else if (x->too_big)
			op->result = kvi_fail(-EFBIG, "the answer for %s%s%s is over %u MiB (%s)",
					      *key ? "'" : "bucket '", *key ? key : s->bucket, "'",
					      RESP_MAX >> 20, s->endpoint);
		else if (op->method == KVI_S3_GET && op->flags & KVI_S3_TAIL && op->got < op->tail)
			op->result = -KV_ESHORT;
		else if (op->method == KVI_S3_GET && (op->dst || op->sink) && x->have_length &&
			 op->got != x->content_length)
			op->result = kvi_fail(-ECONNRESET, "short body for '%s'", key);
		return;
	}
	/* The server's words, which may echo what it was sent. */
	kvi_s3_error_parse(op->resp, x->resp_len, secrets, code, sizeof(code), msg, sizeof(msg));
	/* A HEAD's answer has no body: name its status as S3 would. */
	if (!code[0])
		snprintf(code, sizeof(code), "%s", status_code(status));
	switch (status) {
	case 304:
	case 412:
		rc = -EEXIST;
		break;
	case 404:
		rc = strcmp(code, "NoSuchBucket") == 0 ? -KV_ENOBUCKET : -ENOENT;
		break;
	case 401:
	case 403:
		rc = -EACCES;
		break;
	case 416:
		rc = -KV_ESHORT;
		break;
	case 429:
	case 503:
		rc = -EAGAIN;
		break;
	case 500:
	case 502:
	case 504:
		rc = -EIO;
		break;
	default:
		rc = -KV_ES3;
		break;
	}
	if (rc == -KV_ENOBUCKET)
		op->result = kvi_fail(rc, "no bucket '%s' at %s", s->bucket, s->endpoint);
	else
		op->result = kvi_fail(rc, "HTTP %ld%s%s%s%s for %s%s%s (%s)", status,
				      code[0] ? " " : "", code, msg[0] ? ": " : "", msg,
				      *key ? "'" : "bucket '", *key ? key : s->bucket, "'",
				      s->endpoint);
}

static int64_t backoff_ns(unsigned attempt)
{
	int64_t d = BACKOFF_BASE_NS << (attempt > 16 ? 16 : attempt - 1);

	if (d > BACKOFF_MAX_NS)
		d = BACKOFF_MAX_NS;
	/* Half fixed, half random: clients that failed together spread. */
	return d / 2 + (int64_t)((uint64_t)random() % (uint64_t)(d / 2 + 1));
}

/* ---- many at once ---- */

/* A multi handle for one call, with the connections an earlier call left
 * in it. */
static CURLM *multi_get(struct kvi_s3 *s)
{
	CURLM *m = NULL;

	pthread_mutex_lock(&s->pool_lock);
	if (s->npool)
		m = s->pool[--s->npool];
	pthread_mutex_unlock(&s->pool_lock);
	return m ? m : curl_multi_init();
}

static void multi_put(struct kvi_s3 *s, CURLM *m)
{
	pthread_mutex_lock(&s->pool_lock);
	if (s->npool < POOL_MAX) {
		s->pool[s->npool++] = m;
		m = NULL;
	}
	pthread_mutex_unlock(&s->pool_lock);
	if (m)
		curl_multi_cleanup(m);
}

struct run {
	struct kvi_s3 *s;
	CURLM *multi;
	struct xfer *x;		/* inflight of them */
	struct kvi_s3_op **waiting;	/* retries not yet due */
	unsigned nfree, nwaiting;
	struct xfer **free_x;
	int failed;
};

static int start(struct run *r, struct kvi_s3_op *op)
{
	struct xfer *x = r->free_x[--r->nfree];
	int rc;

	rc = xfer_setup(x, op);
	if (rc == 0 && curl_multi_add_handle(r->multi, x->h) != CURLM_OK)
		rc = -ENOMEM;
	if (rc < 0) {
		r->free_x[r->nfree++] = x;
		op->result = rc;
		return rc;
	}
	op->attempts++;
	return 0;
}

int kvi_s3_run(struct kvi_s3 *s, unsigned inflight, kvi_s3_next_fn next,
	       kvi_s3_done_fn done, void *arg)
{
	struct run r = { .s = s };
	unsigned i, owned = 0;
	int more = 1, stop = 0, rc = 0, running;
	struct kvi_s3_op *op;
	CURLMsg *msg;
	int64_t now, wake;

	if (!inflight)
		inflight = s->inflight;
	if (inflight > INFLIGHT_MAX)
		inflight = INFLIGHT_MAX;
	r.multi = multi_get(s);
	r.x = calloc(inflight, sizeof(*r.x));
	r.free_x = calloc(inflight, sizeof(*r.free_x));
	r.waiting = calloc(inflight, sizeof(*r.waiting));
	if (!r.multi || !r.x || !r.free_x || !r.waiting) {
		rc = -ENOMEM;
		goto out;
	}
	curl_multi_setopt(r.multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)inflight);
	/* Kept open for the next call that borrows this handle. */
	curl_multi_setopt(r.multi, CURLMOPT_MAXCONNECTS, (long)INFLIGHT_MAX);
	for (i = 0; i < inflight; i++) {
		r.x[i].s = s;
		r.x[i].h = curl_easy_init();
		if (!r.x[i].h) {
			rc = -ENOMEM;
			goto out;
		}
		r.free_x[r.nfree++] = &r.x[i];
	}
	for (;;) {
		/* Fill the free slots: retries that are due first, then new work. */
		now = kv_monotonic_ns();
		for (i = 0; i < r.nwaiting && r.nfree;) {
			op = r.waiting[i];
			if (op->not_before_ns > now) {
				i++;
				continue;
			}
			r.waiting[i] = r.waiting[--r.nwaiting];
			if (start(&r, op) < 0) {
				owned--;
				r.failed++;
				done(arg, op);
			}
		}
		while (more && !stop && owned < inflight && r.nfree) {
			int got = next(arg, &op);

			if (got < 0) {
				stop = 1;
				rc = got;
				break;
			}
			if (got == 0) {
				more = 0;
				break;
			}
			op->attempts = 0;
			op->result = 0;
			owned++;
			if (start(&r, op) < 0) {
				owned--;
				r.failed++;
				done(arg, op);
				more = 1;
			}
		}
		if (owned == 0)
			break;
		curl_multi_perform(r.multi, &running);
		while ((msg = curl_multi_info_read(r.multi, &(int){ 0 }))) {
			struct xfer *x;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			xfer_finish(x, msg->data.result);
			curl_multi_remove_handle(r.multi, x->h);
			op = x->op;
			xfer_reset(x);
			r.free_x[r.nfree++] = x;
			if (is_retryable(op->result) && op->attempts < s->attempts) {
				op->not_before_ns = kv_monotonic_ns() + backoff_ns(op->attempts);
				r.waiting[r.nwaiting++] = op;
				continue;
			}
			owned--;
			if (op->result)
				r.failed++;
			done(arg, op);
			more = 1;	/* next() is asked again after each done() */
		}
		/* The next retry due, with those scheduled just now. */
		now = kv_monotonic_ns();
		wake = now + 1000000000LL;
		for (i = 0; i < r.nwaiting; i++)
			if (r.waiting[i]->not_before_ns < wake)
				wake = r.waiting[i]->not_before_ns;
		if (owned > 0 && running > 0) {
			int64_t ms = (wake - kv_monotonic_ns()) / 1000000;

			curl_multi_poll(r.multi, NULL, 0, ms < 1 ? 1 : ms > 1000 ? 1000 : (int)ms,
					NULL);
		} else if (owned > 0 && r.nwaiting) {
			int64_t ns = wake - kv_monotonic_ns();

			if (ns > 0)
				nanosleep(&(struct timespec){ ns / 1000000000, ns % 1000000000 },
					  NULL);
		}
	}
out:
	if (r.x)
		for (i = 0; i < inflight; i++) {
			if (r.x[i].h) {
				curl_multi_remove_handle(r.multi, r.x[i].h);
				curl_easy_cleanup(r.x[i].h);
			}
			xfer_reset(&r.x[i]);
		}
	if (r.multi)
		multi_put(s, r.multi);
	free(r.x);
	free(r.free_x);
	free(r.waiting);
	return rc < 0 ? rc : r.failed;
}

struct one {
	struct kvi_s3_op *op;
	int given;
};

static int one_next(void *arg, struct kvi_s3_op **op)
{
	struct one *o = arg;

	if (o->given)
		return 0;
	o->given = 1;
	*op = o->op;
	return 1;
}

static void one_done(void *arg, struct kvi_s3_op *op)
{
	(void)arg;
	(void)op;
}

int kvi_s3_do(struct kvi_s3 *s, struct kvi_s3_op *op)
{
	struct one o = { op, 0 };
	int rc = kvi_s3_run(s, 1, one_next, one_done, &o);

	return rc < 0 ? rc : op->result;
}
