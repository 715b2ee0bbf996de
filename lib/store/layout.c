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

/* Lowercase hex of a length a hash may have into out (len bytes): its
 * length, or -KV_EBADHASH / -ENAMETOOLONG.  One pass: kvoffd normalizes
 * a hash per key of a batch. */
static int hash_lower(const char *hash, char *out, size_t len)
{
	size_t n;

	if (!hash)
		return -KV_EBADHASH;
	for (n = 0; hash[n] && n <= KV_HASH_MAX_LEN; n++) {
		char c = hash[n];

		if (c >= 'A' && c <= 'F')
			c = (char)(c - 'A' + 'a');
		else if (!is_lower_hex(c))
			return -KV_EBADHASH;
		if (n + 1 < len)
			out[n] = c;
	}
	if (n < KV_HASH_MIN_LEN || n > KV_HASH_MAX_LEN)
		return -KV_EBADHASH;
	if (len < n + 1)
		return -ENAMETOOLONG;
	out[n] = '\0';
	return (int)n;
}

int kv_layout_hash_normalize(const char *hash, char *out, size_t len)
{
	int n = hash_lower(hash, out, len);

	return n < 0 ? n : 0;
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
	if (strchr(model_dir, '/')) {
		struct kv_layout_v0 v0;
		char v0safe[KV_NAME_MAX + 1];

		return kv_layout_v0_parse(model_dir, &v0) == 0 &&
		       kv_layout_safe_model(v0.model_name, v0safe, sizeof(v0safe)) == 0 &&
		       !strcmp(safe, v0safe);
	}
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

/* The decimal digits of v at p, their count returned. */
static size_t put_decimal(char *p, unsigned v)
{
	char tmp[10];
	size_t n = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	for (size_t i = 0; i < n; i++)
		p[i] = tmp[n - 1 - i];
	return n;
}

int kv_layout_block_path(const char *model_dir, unsigned rank, unsigned group,
			 const char *hash, char *buf, size_t len)
{
	char h[KV_HASH_MAX_LEN + 1], ranks[10], groups[10];
	size_t mlen, hlen, rl, gl, need;
	char *p = buf;
	int ret;

	if (!model_dir)
		return -KV_EBADPATH;
	mlen = strnlen(model_dir, KV_NAME_MAX + 1);
	if (!model_dir_ok(model_dir, mlen))
		return -KV_EBADPATH;
	ret = hash_lower(hash, h, sizeof(h));
	if (ret < 0)
		return ret;
	hlen = (size_t)ret;
	rl = put_decimal(ranks, rank);
	gl = put_decimal(groups, group);
	/* The rank dir must still be one name, however long the model. */
	if (mlen + 2 + rl > KV_NAME_MAX)
		return -ENAMETOOLONG;
	/* "<model_dir>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin", composed by
	 * hand: kvoffd composes one per key of a batch of thousands. */
	need = mlen + 2 + rl + 1 + 3 + 1 + 2 + 2 + gl + 1 + hlen + strlen(KV_BLOCK_SUFFIX) + 1;
	if (need > len)
		return -ENAMETOOLONG;
	memcpy(p, model_dir, mlen);
	p += mlen;
	memcpy(p, "_r", 2);
	memcpy(p + 2, ranks, rl);
	p += 2 + rl;
	*p++ = '/';
	memcpy(p, h, 3);
	p[3] = '/';
	memcpy(p + 4, h + 3, 2);
	memcpy(p + 6, "_g", 2);
	p += 8;
	memcpy(p, groups, gl);
	p += gl;
	*p++ = '/';
	memcpy(p, h, hlen);
	p += hlen;
	memcpy(p, KV_BLOCK_SUFFIX, sizeof(KV_BLOCK_SUFFIX));
	return 0;
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

int kv_layout_bucket_shard(const char *name, unsigned count)
{
	unsigned v = 0;

	if (count == 0 || count > KV_LAYOUT_TOP_BUCKETS)
		return -EINVAL;
	if (!name || !top_bucket_ok(name, strlen(name)))
		return -KV_EBADPATH;
	for (int i = 0; i < 3; i++)
		v = v * 16 + (unsigned)(name[i] <= '9' ? name[i] - '0' : name[i] - 'a' + 10);
	return (int)(v * count / KV_LAYOUT_TOP_BUCKETS);
}

/* llmd-v0 also had plain "<hh>" buckets (group 0); *grouped says which. */
static int leaf_bucket_split(const char *s, size_t n, enum kv_layout_kind layout,
			     unsigned *group, int *grouped)
{
	*grouped = 1;
	if (group_bucket_split(s, n, group) == 0)
		return 0;
	if (layout == KV_LAYOUT_LLMD_V0 && n == 2 && all_lower_hex(s, 2)) {
		*group = 0;
		*grouped = 0;
		return 0;
	}
	return -1;
}

int kv_layout_group_bucket_parse(const char *name, enum kv_layout_kind layout,
				 unsigned *group)
{
	unsigned g;
	int grouped;

	if (leaf_bucket_split(name, strlen(name), layout, &g, &grouped) < 0)
		return -KV_EBADPATH;
	if (group)
		*group = g;
	return 0;
}

const char *kv_layout_name(enum kv_layout_kind layout)
{
	return layout == KV_LAYOUT_LLMD_V0 ? "llmd-v0" : "v1";
}

/* s[0..n) is prefix, then a canonical decimal, then (if infix) infix and
 * another; the numbers go to a and b. */
static int two_numbers(const char *s, size_t n, const char *prefix,
		       const char *infix, unsigned *a, unsigned *b)
{
	size_t pl = strlen(prefix), il = infix ? strlen(infix) : 0, d;

	if (n <= pl || memcmp(s, prefix, pl))
		return -1;
	s += pl;
	n -= pl;
	for (d = 0; d < n && s[d] >= '0' && s[d] <= '9'; d++)
		;
	if (parse_decimal(s, d, a) < 0)
		return -1;
	if (!infix)
		return d == n ? 0 : -1;
	if (n - d <= il || memcmp(s + d, infix, il))
		return -1;
	return parse_decimal(s + d + il, n - d - il, b);
}

/* "tp_<T>_pp_size_<P>_pcp_size_<C>" */
static int v0_parallel_split(const char *s, size_t n, unsigned *tp, unsigned *pp,
			     unsigned *pcp)
{
	const char *at = memmem(s, n, "_pcp_size_", 10);

	if (!at || two_numbers(s, (size_t)(at - s), "tp_", "_pp_size_", tp, pp) < 0)
		return -1;
	return two_numbers(at, n - (size_t)(at - s), "_pcp_size_", NULL, pcp, NULL);
}

static int v0_params_split(const char *s, size_t n, unsigned *bs, unsigned *bpf)
{
	return two_numbers(s, n, "block_size_", "_blocks_per_file_", bs, bpf);
}

int kv_layout_v0_rank_parse(const char *name, unsigned *rank)
{
	unsigned r;

	if (two_numbers(name, strlen(name), "rank_", NULL, &r, NULL) < 0)
		return -KV_EBADPATH;
	if (rank)
		*rank = r;
	return 0;
}

int kv_layout_v0_params_parse(const char *name)
{
	unsigned bs, bpf;

	return v0_params_split(name, strlen(name), &bs, &bpf) == 0 ? 0 : -KV_EBADPATH;
}

/* A name llm-d wrote from a model name's part or a dtype: any safe bytes. */
static int v0_name_ok(const char *s, size_t n)
{
	return n > 0 && n <= KV_NAME_MAX && name_bytes_ok(s, n) &&
	       !(n == 1 && s[0] == '.') && !(n == 2 && s[0] == '.' && s[1] == '.');
}

/* A part of a model name: a v0_name_ok name the walk enters, so not a
 * dot-name (the walk skips those: a block below one would never be
 * listed nor evicted). */
static int v0_model_part_ok(const char *s, size_t n)
{
	return v0_name_ok(s, n) && s[0] != '.';
}

int kv_layout_v0_parse(const char *model_dir, struct kv_layout_v0 *out)
{
	const char *comp[KV_LAYOUT_V0_MODEL_DEPTH + 2];
	size_t clen[KV_LAYOUT_V0_MODEL_DEPTH + 2], mlen;
	const char *p = model_dir;
	int n = 0;

	if (!model_dir || *model_dir == '/')
		return -KV_EBADPATH;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t l = slash ? (size_t)(slash - p) : strlen(p);

		if (n == KV_LAYOUT_V0_MODEL_DEPTH + 2 || !v0_model_part_ok(p, l))
			return -KV_EBADPATH;
		comp[n] = p;
		clen[n++] = l;
		if (!slash)
			break;
		p = slash + 1;
	}
	if (n < 3 ||
	    v0_params_split(comp[n - 2], clen[n - 2], &out->block_size,
			    &out->blocks_per_file) < 0 ||
	    v0_parallel_split(comp[n - 1], clen[n - 1], &out->tp, &out->pp,
			      &out->pcp) < 0)
		return -KV_EBADPATH;
	mlen = (size_t)(comp[n - 2] - model_dir) - 1;
	if (mlen > KV_NAME_MAX)
		return -KV_EBADPATH;
	memcpy(out->model_name, model_dir, mlen);
	out->model_name[mlen] = '\0';
	return 0;
}

/* The last three components: <hhh>/<hh>[_g<G>]/<hash>.bin, the hash
 * agreeing with its buckets. */
static int block_tail_parse(const char *const *comp, const size_t *clen,
			    struct kv_block_ref *r)
{
	const char *hash = comp[2];
	size_t hlen, sl = strlen(KV_BLOCK_SUFFIX);

	if (!top_bucket_ok(comp[0], clen[0]) ||
	    leaf_bucket_split(comp[1], clen[1], r->layout, &r->group, &r->group_dir) < 0)
		return -1;
	if (clen[2] <= sl)
		return -1;
	hlen = clen[2] - sl;
	if (memcmp(hash + hlen, KV_BLOCK_SUFFIX, sl) ||
	    hlen < KV_HASH_MIN_LEN || hlen > KV_HASH_MAX_LEN ||
	    !all_lower_hex(hash, hlen))
		return -1;
	if (memcmp(hash, comp[0], 3) || memcmp(hash + 3, comp[1], 2))
		return -1;
	memcpy(r->hash, hash, hlen);
	r->hash[hlen] = '\0';
	return 0;
}

/* llmd-v0: comp[0..n-6) the model name, then block_size_..., tp_...,
 * rank_<R>, <dtype> and the tail. */
static int v0_block_parse(const char *const *comp, const size_t *clen, int n,
			  struct kv_block_ref *r)
{
	struct kv_layout_v0 v0;
	size_t dlen;

	if (n < 8 || n > 7 + KV_LAYOUT_V0_MODEL_DEPTH)
		return -1;
	for (int i = 0; i < n - 7; i++)
		if (!v0_model_part_ok(comp[i], clen[i]))
			return -1;
	if (two_numbers(comp[n - 5], clen[n - 5], "rank_", NULL, &r->rank, NULL) < 0 ||
	    !v0_name_ok(comp[n - 4], clen[n - 4]) || clen[n - 4] > KV_DTYPE_DIR_MAX)
		return -1;
	dlen = (size_t)(comp[n - 5] - comp[0]) - 1;
	if (dlen > KV_NAME_MAX)
		return -1;
	memcpy(r->model_dir, comp[0], dlen);
	r->model_dir[dlen] = '\0';
	if (kv_layout_v0_parse(r->model_dir, &v0) < 0)
		return -1;
	memcpy(r->dtype, comp[n - 4], clen[n - 4]);
	r->dtype[clen[n - 4]] = '\0';
	r->layout = KV_LAYOUT_LLMD_V0;
	return block_tail_parse(comp + n - 3, clen + n - 3, r);
}

int kv_layout_block_parse(const char *relpath, struct kv_block_ref *ref)
{
	enum { MAXC = 7 + KV_LAYOUT_V0_MODEL_DEPTH };
	const char *comp[MAXC];
	size_t clen[MAXC], mlen;
	const char *p = relpath;
	struct kv_block_ref r;
	int n = 0;

	if (!relpath || *relpath == '/')
		return -KV_EBADPATH;
	/* Non-empty components; "." and ".." fail the name checks below,
	 * but are refused here first so no caller ever sees them accepted
	 * by accident. */
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t l = slash ? (size_t)(slash - p) : strlen(p);

		if (n == MAXC || l == 0 || l > KV_NAME_MAX ||
		    (l == 1 && p[0] == '.') ||
		    (l == 2 && p[0] == '.' && p[1] == '.'))
			return -KV_EBADPATH;
		comp[n] = p;
		clen[n++] = l;
		if (!slash)
			break;
		p = slash + 1;
	}
	memset(&r, 0, sizeof(r));
	if (n == 4) {
		if (rank_dir_split(comp[0], clen[0], &mlen, &r.rank) < 0 ||
		    block_tail_parse(comp + 1, clen + 1, &r) < 0)
			return -KV_EBADPATH;
		fill_model(&r, comp[0], mlen);
	} else if (v0_block_parse(comp, clen, n, &r) < 0) {
		return -KV_EBADPATH;
	}
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

int kv_layout_block_path_ref(const struct kv_block_ref *ref, char *buf,
			     size_t len)
{
	struct kv_layout_v0 v0;
	char h[KV_HASH_MAX_LEN + 1], group[16] = "";
	int ret;

	if (ref->layout != KV_LAYOUT_LLMD_V0)
		return kv_layout_block_path(ref->model_dir, ref->rank, ref->group,
					    ref->hash, buf, len);
	if (kv_layout_v0_parse(ref->model_dir, &v0) < 0 ||
	    !v0_name_ok(ref->dtype, strlen(ref->dtype)))
		return -KV_EBADPATH;
	ret = kv_layout_hash_normalize(ref->hash, h, sizeof(h));
	if (ret < 0)
		return ret;
	if (ref->group_dir)
		snprintf(group, sizeof(group), "_g%u", ref->group);
	ret = snprintf(buf, len, "%s/rank_%u/%s/%.3s/%.2s%s/%s%s", ref->model_dir,
		       ref->rank, ref->dtype, h, h + 3, group, h, KV_BLOCK_SUFFIX);
	if (ret < 0 || (size_t)ret >= len)
		return -ENAMETOOLONG;
	return 0;
}
