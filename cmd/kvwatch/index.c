/*
 * The event-hash index: block files by the last 16 hex digits of their
 * name, so a KV event finds its files without a walk.  Memory is per
 * block, not per path: the dirs are interned and a name is kept as
 * packed hex digits.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "kvwatch.h"

int index_init(struct index *x)
{
	memset(x, 0, sizeof(*x));
	x->mask = 1023;
	x->dir_mask = 255;
	x->table = calloc(x->mask + 1, sizeof(*x->table));
	x->dir_table = calloc(x->dir_mask + 1, sizeof(*x->dir_table));
	if (!x->table || !x->dir_table) {
		index_free(x);
		return -ENOMEM;
	}
	return 0;
}

void index_free(struct index *x)
{
	for (uint32_t i = 0; i < x->ndirs; i++)
		free(x->dirs[i]);
	free(x->dirs);
	free(x->dir_table);
	free(x->e);
	free(x->table);
	free(x->names);
	memset(x, 0, sizeof(*x));
}

size_t index_bytes(const struct index *x)
{
	size_t b = (size_t)x->cap * sizeof(*x->e) + ((size_t)x->mask + 1) * 4 +
		   x->names_cap + ((size_t)x->dir_mask + 1) * 4 + x->dirs_cap * sizeof(char *);

	for (uint32_t i = 0; i < x->ndirs; i++)
		b += strlen(x->dirs[i]) + 1;
	return b;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* ---- dirs ---- */

static uint32_t dir_hash(const char *s, size_t n)
{
	return (uint32_t)kv_xxh3(s, n);
}

static uint32_t dir_home(const struct index *x, uint32_t i)
{
	return dir_hash(x->dirs[i], strlen(x->dirs[i]));
}

static uint32_t entry_home(const struct index *x, uint32_t i)
{
	return (uint32_t)(x->e[i].low * 0x9e3779b97f4a7c15ULL >> 32);
}

/* Double a linear-probing table of items 0..n-1 (stored + 1) placed by
 * hash_of. */
static int table_double(const struct index *x, uint32_t **table, uint32_t *mask, uint32_t n,
			uint32_t (*hash_of)(const struct index *, uint32_t))
{
	uint32_t nm = 2 * (*mask + 1) - 1, *t = calloc((size_t)nm + 1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t b = hash_of(x, i) & nm;

		while (t[b])
			b = (b + 1) & nm;
		t[b] = i + 1;
	}
	free(*table);
	*table = t;
	*mask = nm;
	return 0;
}

/* The id of dir (n bytes), interned. */
static int dir_id(struct index *x, const char *dir, size_t n, uint32_t *out)
{
	uint32_t b;

	if (2 * (x->ndirs + 1) > x->dir_mask + 1 &&
	    table_double(x, &x->dir_table, &x->dir_mask, x->ndirs, dir_home) < 0)
		return -ENOMEM;
	for (b = dir_hash(dir, n) & x->dir_mask; x->dir_table[b]; b = (b + 1) & x->dir_mask) {
		const char *d = x->dirs[x->dir_table[b] - 1];

		if (!strncmp(d, dir, n) && !d[n]) {
			*out = x->dir_table[b] - 1;
			return 0;
		}
	}
	if (x->ndirs == x->dirs_cap) {
		uint32_t cap = x->dirs_cap ? 2 * x->dirs_cap : 256;
		char **d = realloc(x->dirs, cap * sizeof(*d));

		if (!d)
			return -ENOMEM;
		x->dirs = d;
		x->dirs_cap = cap;
	}
	x->dirs[x->ndirs] = strndup(dir, n);
	if (!x->dirs[x->ndirs])
		return -ENOMEM;
	x->dir_table[b] = x->ndirs + 1;
	*out = x->ndirs++;
	return 0;
}

/* ---- entries ---- */

static uint32_t home(const struct index *x, uint64_t low)
{
	return (uint32_t)(low * 0x9e3779b97f4a7c15ULL >> 32) & x->mask;
}

/*
 * A block's name record in names: its digit count, how its bucket dirs
 * read, its group, then the digits packed two to a byte.  A v1 path's
 * bucket dirs "<hhh>/<hh>_g<group>" (llmd-v0's "<hhh>/<hh>" or with the
 * group) are the name's first five digits, so only the dirs above them
 * are interned; a path of any other shape interns its whole dir.
 */
enum bucket_form { FORM_WHOLE_DIR, FORM_HH, FORM_HH_GROUP };
#define REC_HEAD	4	/* length, form, group (2 bytes, little-endian) */

static int names_put(struct index *x, const char *hex, size_t len, enum bucket_form form,
		     unsigned group, uint32_t *off)
{
	size_t need = REC_HEAD + (len + 1) / 2;

	if (len > 255 || x->names_len + need > UINT32_MAX)
		return -EOVERFLOW;
	if (x->names_len + need > x->names_cap) {
		size_t cap = x->names_cap ? x->names_cap + x->names_cap / 2 : 65536;
		unsigned char *p;

		while (cap < x->names_len + need)
			cap += cap / 2;
		p = realloc(x->names, cap);
		if (!p)
			return -ENOMEM;
		x->names = p;
		x->names_cap = cap;
	}
	*off = (uint32_t)x->names_len;
	x->names[x->names_len++] = (unsigned char)len;
	x->names[x->names_len++] = (unsigned char)form;
	x->names[x->names_len++] = (unsigned char)(group & 0xff);
	x->names[x->names_len++] = (unsigned char)(group >> 8);
	for (size_t i = 0; i < len; i += 2)
		x->names[x->names_len++] = (unsigned char)(hexval(hex[i]) << 4 |
			(i + 1 < len ? hexval(hex[i + 1]) : 0));
	return 0;
}

static int name_equal(const struct index *x, uint32_t off, const char *hex, size_t len,
		      enum bucket_form form, unsigned group)
{
	const unsigned char *p = x->names + off;

	if (p[0] != len || p[1] != form || (unsigned)(p[2] | p[3] << 8) != group)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ("0123456789abcdef"[(p[REC_HEAD + i / 2] >> (i & 1 ? 0 : 4)) & 15] != hex[i])
			return 0;
	return 1;
}

/* The path of an entry into buf; "" if it does not fit. */
static void entry_path(const struct index *x, const struct ix_entry *e, char *buf, size_t cap)
{
	const unsigned char *p = x->names + e->name;
	const char *dir = x->dirs[e->dir & ~SEEN_BIT];
	char digits[256];
	int n;

	for (size_t i = 0; i < p[0]; i++)
		digits[i] = "0123456789abcdef"[(p[REC_HEAD + i / 2] >> (i & 1 ? 0 : 4)) & 15];
	digits[p[0]] = '\0';
	if (p[1] == FORM_WHOLE_DIR)
		n = snprintf(buf, cap, "%s/%s.bin", dir, digits);
	else if (p[1] == FORM_HH)
		n = snprintf(buf, cap, "%s/%.3s/%.2s/%s.bin", dir, digits, digits + 3, digits);
	else
		n = snprintf(buf, cap, "%s/%.3s/%.2s_g%u/%s.bin", dir, digits, digits + 3,
			     (unsigned)(p[2] | p[3] << 8), digits);
	if (n < 0 || (size_t)n >= cap)
		buf[0] = '\0';
}

/* Split the dir of a block named hex (dir, dlen bytes) into what is
 * interned and how the bucket dirs below it read. */
static size_t bucket_split(const char *dir, size_t dlen, const char *hex, size_t hlen,
			   enum bucket_form *form, unsigned *group)
{
	const char *b = memrchr(dir, '/', dlen), *hh;
	size_t blen;

	*form = FORM_WHOLE_DIR;
	*group = 0;
	if (hlen < 5 || !b || b - dir < 4 || memcmp(b - 3, hex, 3) || b[-4] != '/')
		return dlen;
	hh = b + 1;
	blen = dlen - (size_t)(hh - dir);
	if (blen < 2 || memcmp(hh, hex + 3, 2))
		return dlen;
	if (blen == 2) {
		*form = FORM_HH;
	} else {
		char want[16];
		unsigned long g;
		char *end;

		if (blen > 10 || memcmp(hh + 2, "_g", 2) || hh[4] < '0' || hh[4] > '9')
			return dlen;
		g = strtoul(hh + 4, &end, 10);
		if (g > 65535 || end != hh + blen ||
		    snprintf(want, sizeof(want), "_g%lu", g) != (int)blen - 2 ||
		    memcmp(want, hh + 2, blen - 2))
			return dlen;
		*form = FORM_HH_GROUP;
		*group = (unsigned)g;
	}
	return (size_t)(b - 4 - dir);
}

/* The hash digits of a block path's name ("<hex>.bin"), or -EINVAL. */
static int name_hex(const char *relpath, const char **hex, size_t *hlen)
{
	const char *slash = strrchr(relpath, '/');

	if (!slash)
		return -EINVAL;
	*hex = slash + 1;
	*hlen = strlen(*hex);
	if (*hlen <= 4 || strcmp(*hex + *hlen - 4, ".bin"))
		return -EINVAL;
	*hlen -= 4;
	return 0;
}

/* The key an entry for relpath would have: its last 16 hex digits. */
static int low_of(const char *relpath, uint64_t *low)
{
	const char *hex;
	char low_hex[17];
	size_t hlen, k;

	if (name_hex(relpath, &hex, &hlen) < 0)
		return -EINVAL;
	k = hlen > 16 ? 16 : hlen;
	memcpy(low_hex, hex + hlen - k, k);
	low_hex[k] = '\0';
	*low = kv_events_hash64(low_hex);
	return 0;
}

struct has_arg {
	const char *relpath;
	int found;
};

static int has_one(const char *relpath, void *arg)
{
	struct has_arg *h = arg;

	if (!strcmp(relpath, h->relpath))
		h->found = 1;
	return 0;
}

int index_has(struct index *x, const char *relpath)
{
	struct has_arg h = { relpath, 0 };
	uint64_t low;

	if (low_of(relpath, &low) < 0)
		return 0;
	index_each(x, low, has_one, &h);
	return h.found;
}

int index_add(struct index *x, const char *relpath)
{
	const char *slash = strrchr(relpath, '/'), *hex;
	struct ix_entry *reuse = NULL;
	enum bucket_form form;
	unsigned group;
	size_t hlen, plen;
	uint64_t low;
	uint32_t dir, b, name;
	int rc;

	if (x->ndirs >= SEEN_BIT - 1 || name_hex(relpath, &hex, &hlen) < 0)
		return -EINVAL;
	for (size_t i = 0; i < hlen; i++)
		if (hexval(hex[i]) < 0)
			return -EINVAL;
	plen = bucket_split(relpath, (size_t)(slash - relpath), hex, hlen, &form, &group);
	rc = dir_id(x, relpath, plen, &dir);
	if (rc)
		return rc;
	low_of(relpath, &low);
	for (b = home(x, low); x->table[b]; b = (b + 1) & x->mask) {
		struct ix_entry *e = &x->e[x->table[b] - 1];

		if (e->low != low || !name_equal(x, e->name, hex, hlen, form, group))
			continue;
		if (e->dir != DIR_GONE && (e->dir & ~SEEN_BIT) == dir) {
			e->dir = dir | x->parity;
			return 0;
		}
		if (e->dir == DIR_GONE && !reuse)
			reuse = e;
	}
	if (reuse) {
		reuse->dir = dir | x->parity;
		x->blocks++;
		return 0;
	}
	if (x->n == UINT32_MAX - 1)
		return -EOVERFLOW;
	if (2 * ((uint64_t)x->n + 1) > (uint64_t)x->mask + 1) {
		if ((rc = table_double(x, &x->table, &x->mask, x->n, entry_home)) < 0)
			return rc;
	}
	if (x->n == x->cap) {
		uint32_t cap = x->cap ? (x->cap < (1u << 30) ? x->cap + x->cap / 2 : UINT32_MAX - 1)
				      : 4096;
		struct ix_entry *e = realloc(x->e, (size_t)cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		x->e = e;
		x->cap = cap;
	}
	rc = names_put(x, hex, hlen, form, group, &name);
	if (rc)
		return rc;
	x->e[x->n] = (struct ix_entry){ .low = low, .dir = dir | x->parity, .name = name };
	for (b = home(x, low); x->table[b]; b = (b + 1) & x->mask)
		;
	x->table[b] = ++x->n;
	x->blocks++;
	return 0;
}

unsigned index_each(struct index *x, uint64_t low, index_fn fn, void *arg)
{
	char path[4096];
	unsigned found = 0;

	for (uint32_t b = home(x, low); x->table[b]; b = (b + 1) & x->mask) {
		struct ix_entry *e = &x->e[x->table[b] - 1];

		if (e->low != low || e->dir == DIR_GONE)
			continue;
		entry_path(x, e, path, sizeof(path));
		if (!path[0])
			continue;
		found++;
		if (fn(path, arg) == 1) {
			e->dir = DIR_GONE;
			x->blocks--;
		}
	}
	return found;
}

static int walk_add(const struct kv_walk_entry *e, void *arg)
{
	if (e->kind != KV_WALK_BLOCK)
		return 0;
	return index_add(arg, e->path) == -ENOMEM ? -ENOMEM : 0;
}

int index_build(struct index *x, const char *root, unsigned threads)
{
	struct kv_walk_opts o = { .threads = threads, .rank = -1, .flags = KV_WALK_NO_STAT };

	return kv_walk(root, &o, walk_add, x);
}

void index_walk_begin(struct index *x)
{
	x->parity ^= SEEN_BIT;
}

int index_walk_end(struct index *x)
{
	struct index y;
	char path[4096];
	int rc = 0;

	for (uint32_t i = 0; i < x->n; i++) {
		struct ix_entry *e = &x->e[i];

		if (e->dir != DIR_GONE && (e->dir & SEEN_BIT) != x->parity) {
			e->dir = DIR_GONE;
			x->blocks--;
		}
	}
	if (x->n - x->blocks <= x->blocks || index_init(&y) < 0)
		return 0;
	/* Mostly gone: the live entries into a fresh index. */
	y.parity = x->parity;
	for (uint32_t i = 0; !rc && i < x->n; i++)
		if (x->e[i].dir != DIR_GONE) {
			entry_path(x, &x->e[i], path, sizeof(path));
			rc = path[0] ? index_add(&y, path) : 0;
		}
	if (rc) {
		index_free(&y);
		return rc;
	}
	index_free(x);
	*x = y;
	return 0;
}
