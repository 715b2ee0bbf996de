/*
 * Names in the vLLM / llm-d on-disk layout: composing them, and parsing
 * them back strictly, so that anything a walk meets either is a layout
 * name or is reported as foreign.  Names are parsed from the right
 * because safe model names may hold '_' and digits themselves.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <kv/errors.h>
#include <kv/layout.h>

/* "_r" plus the widest unsigned rank. */
#define RANK_SUFFIX_MAX	(2 + 10)

static int is_lower_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static int all_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!is_lower_hex(s[i]))
			return 0;
	return 1;
}

/* Bytes that never belong in a name: '/', and control characters
 * (newline above all, which would break line-oriented output). */
static int name_bytes_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '/' || c < 0x20 || c == 0x7f)
			return 0;
	}
	return 1;
}

/* A canonical decimal unsigned ("0", "17", never "017" or "+1") as
 * Python's f"{n}" writes it; -1 when s[0..n) is not one. */
static int parse_decimal(const char *s, size_t n, unsigned *out)
{
	unsigned long v = 0;

	if (n == 0 || n > 10 || (n > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v > UINT_MAX)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int kv_layout_hash_normalize(const char *hash, char *out, size_t len)
{
	size_t n;

	if (!hash)
		return -KV_EBADHASH;
	n = strnlen(hash, KV_HASH_MAX_LEN + 1);
	if (n < KV_HASH_MIN_LEN || n > KV_HASH_MAX_LEN)
		return -KV_EBADHASH;
	for (size_t i = 0; i < n; i++) {
		char c = hash[i];

		if (!is_lower_hex(c) && !(c >= 'A' && c <= 'F'))
			return -KV_EBADHASH;
	}
	if (len < n + 1)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < n; i++) {
		char c = hash[i];

		out[i] = (c >= 'A' && c <= 'F') ? (char)(c - 'A' + 'a') : c;
	}
	out[n] = '\0';
	return 0;
}

int kv_layout_safe_model(const char *model_name, char *buf, size_t len)
{
	size_t n;

	if (!model_name)
		return -KV_EBADPATH;
	n = strlen(model_name);
	if (n == 0)
		return -KV_EBADPATH;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)model_name[i];

		if (c < 0x20 || c == 0x7f)
			return -KV_EBADPATH;
	}
	if (n > KV_NAME_MAX - 1 - KV_FINGERPRINT_LEN)
		return -ENAMETOOLONG;
	if (len < n + 1)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < n; i++)
		buf[i] = model_name[i] == '/' ? '_' : model_name[i];
	buf[n] = '\0';
	return 0;
}

int kv_layout_model_matches(const char *filter, const char *model_dir)
{
	char safe[KV_NAME_MAX + 1];
	size_t n;

	if (!filter || !strcmp(filter, model_dir))
		return 1;
	if (kv_layout_safe_model(filter, safe, sizeof(safe)) < 0)
		return 0;
	n = strlen(safe);
	return strlen(model_dir) == n + 1 + KV_FINGERPRINT_LEN &&
	       !strncmp(model_dir, safe, n) && model_dir[n] == '_';
}

int kv_layout_model_dir(const char *model_name, const char *fingerprint,
			char *buf, size_t len)
{
	char safe[KV_NAME_MAX + 1];
	int ret;

	if (!fingerprint || strlen(fingerprint) != KV_FINGERPRINT_LEN ||
	    !all_lower_hex(fingerprint, KV_FINGERPRINT_LEN))
		return -KV_EBADPATH;
	ret = kv_layout_safe_model(model_name, safe, sizeof(safe));
	if (ret < 0)
		return ret;
	ret = snprintf(buf, len, "%s_%s", safe, fingerprint);
	if (ret < 0 || (size_t)ret >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* Check "<safe_model>_<d12>" held in s[0..n). */
static int model_dir_ok(const char *s, size_t n)
{
	const char *fp;

	if (n < 2 + KV_FINGERPRINT_LEN || n > KV_NAME_MAX)
		return 0;
	fp = s + n - KV_FINGERPRINT_LEN;
	return fp[-1] == '_' && all_lower_hex(fp, KV_FINGERPRINT_LEN) &&
	       name_bytes_ok(s, n);
}

static void fill_model(struct kv_block_ref *ref, const char *s, size_t n)
{
	memcpy(ref->model_dir, s, n);
	ref->model_dir[n] = '\0';
	memcpy(ref->fingerprint, s + n - KV_FINGERPRINT_LEN, KV_FINGERPRINT_LEN);
	ref->fingerprint[KV_FINGERPRINT_LEN] = '\0';
}

int kv_layout_model_dir_parse(const char *name, struct kv_block_ref *ref)
{
	size_t n;

	if (!name)
		return -KV_EBADPATH;
	n = strnlen(name, KV_NAME_MAX + 1);
	if (!model_dir_ok(name, n))
		return -KV_EBADPATH;
	fill_model(ref, name, n);
	return 0;
}

/* Split s[0..n) as "<model_dir>_r<rank>"; the model dir's length goes to
 * *mlen. */
static int rank_dir_split(const char *s, size_t n, size_t *mlen,
			  unsigned *rank)
{
	size_t d = n;

	while (d > 0 && s[d - 1] >= '0' && s[d - 1] <= '9')
		d--;
	if (d < 2 || s[d - 2] != '_' || s[d - 1] != 'r')
		return -1;
	if (parse_decimal(s + d, n - d, rank) < 0)
		return -1;
	*mlen = d - 2;
	return model_dir_ok(s, *mlen) ? 0 : -1;
}

int kv_layout_rank_dir_parse(const char *name, struct kv_block_ref *ref)
{
	size_t n, mlen;
	unsigned rank;

	if (!name)
		return -KV_EBADPATH;
	n = strnlen(name, KV_NAME_MAX + 1);
	if (n > KV_NAME_MAX || rank_dir_split(name, n, &mlen, &rank) < 0)
		return -KV_EBADPATH;
	fill_model(ref, name, mlen);
	ref->rank = rank;
	return 0;
}

int kv_layout_block_path(const char *model_dir, unsigned rank, unsigned group,
			 const char *hash, char *buf, size_t len)
{
	char h[KV_HASH_MAX_LEN + 1];
	size_t mlen;
	int ret;

	if (!model_dir)
		return -KV_EBADPATH;
	mlen = strnlen(model_dir, KV_NAME_MAX + 1);
	if (!model_dir_ok(model_dir, mlen))
		return -KV_EBADPATH;
	ret = kv_layout_hash_normalize(hash, h, sizeof(h));
	if (ret < 0)
		return ret;
	/* The rank dir must still be one name, however long the model. */
	if (mlen + RANK_SUFFIX_MAX > KV_NAME_MAX) {
		char suffix[RANK_SUFFIX_MAX + 1];

		snprintf(suffix, sizeof(suffix), "_r%u", rank);
		if (mlen + strlen(suffix) > KV_NAME_MAX)
			return -ENAMETOOLONG;
	}
	ret = snprintf(buf, len, "%s_r%u/%.3s/%.2s_g%u/%s%s", model_dir, rank,
		       h, h + 3, group, h, KV_BLOCK_SUFFIX);
	if (ret < 0 || (size_t)ret >= len)
		return -ENAMETOOLONG;
	return 0;
}

int kv_layout_block_path_ref(const struct kv_block_ref *ref, char *buf,
			     size_t len)
{
	return kv_layout_block_path(ref->model_dir, ref->rank, ref->group,
				    ref->hash, buf, len);
}

/* "<hhh>" */
static int top_bucket_ok(const char *s, size_t n)
{
	return n == 3 && all_lower_hex(s, 3);
}

/* "<hh>_g<group>" */
static int group_bucket_split(const char *s, size_t n, unsigned *group)
{
	return n >= 5 && all_lower_hex(s, 2) && s[2] == '_' && s[3] == 'g' &&
	       parse_decimal(s + 4, n - 4, group) == 0 ? 0 : -1;
}

int kv_layout_hash_bucket_parse(const char *name)
{
	return top_bucket_ok(name, strlen(name)) ? 0 : -KV_EBADPATH;
}

int kv_layout_group_bucket_parse(const char *name, unsigned *group)
{
	unsigned g;

	if (group_bucket_split(name, strlen(name), &g) < 0)
		return -KV_EBADPATH;
	if (group)
		*group = g;
	return 0;
}

int kv_layout_block_parse(const char *relpath, struct kv_block_ref *ref)
{
	const char *comp[4];
	size_t clen[4];
	const char *p = relpath, *hash;
	struct kv_block_ref r;
	size_t mlen, hlen;
	int n = 0;

	if (!relpath || *relpath == '/')
		return -KV_EBADPATH;
	/* Exactly four non-empty components; "." and ".." fail the name
	 * checks below, but are refused here first so no caller ever sees
	 * them accepted by accident. */
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t l = slash ? (size_t)(slash - p) : strlen(p);

		if (n == 4 || l == 0 || l > KV_NAME_MAX ||
		    (l == 1 && p[0] == '.') ||
		    (l == 2 && p[0] == '.' && p[1] == '.'))
			return -KV_EBADPATH;
		comp[n] = p;
		clen[n++] = l;
		if (!slash)
			break;
		p = slash + 1;
	}
	if (n != 4)
		return -KV_EBADPATH;

	memset(&r, 0, sizeof(r));
	if (rank_dir_split(comp[0], clen[0], &mlen, &r.rank) < 0)
		return -KV_EBADPATH;
	if (!top_bucket_ok(comp[1], clen[1]) ||
	    group_bucket_split(comp[2], clen[2], &r.group) < 0)
		return -KV_EBADPATH;
	hash = comp[3];
	if (clen[3] <= strlen(KV_BLOCK_SUFFIX))
		return -KV_EBADPATH;
	hlen = clen[3] - strlen(KV_BLOCK_SUFFIX);
	if (memcmp(hash + hlen, KV_BLOCK_SUFFIX, strlen(KV_BLOCK_SUFFIX)) ||
	    hlen < KV_HASH_MIN_LEN || hlen > KV_HASH_MAX_LEN ||
	    !all_lower_hex(hash, hlen))
		return -KV_EBADPATH;
	if (memcmp(hash, comp[1], 3) || memcmp(hash + 3, comp[2], 2))
		return -KV_EBADPATH;

	fill_model(&r, comp[0], mlen);
	memcpy(r.hash, hash, hlen);
	r.hash[hlen] = '\0';
	*ref = r;
	return 0;
}

int kv_layout_is_temp(const char *name)
{
	size_t n, s = strlen(KV_TEMP_SUFFIX);

	if (!name)
		return 0;
	n = strlen(name);
	return n > s && !strcmp(name + n - s, KV_TEMP_SUFFIX);
}

int kv_layout_temp_name(const char *target_name, char *buf, size_t len)
{
	unsigned char rnd[8];
	const char *base;
	size_t got = 0;
	int ret;

	if (!target_name || !*target_name)
		return -EINVAL;
	/* Unpredictable, so no other local user can pre-create the name. */
	while (got < sizeof(rnd)) {
		ssize_t r = getrandom(rnd + got, sizeof(rnd) - got, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)r;
	}
	ret = snprintf(buf, len, "%s_%02x%02x%02x%02x%02x%02x%02x%02x%s",
		       target_name, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
		       rnd[5], rnd[6], rnd[7], KV_TEMP_SUFFIX);
	if (ret < 0 || (size_t)ret >= len)
		return -ENAMETOOLONG;
	base = strrchr(buf, '/');
	base = base ? base + 1 : buf;
	if (strlen(base) > KV_NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}
