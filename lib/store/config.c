/*
 * A model dir's config: the ten fields vLLM / llm-d hash into the dir
 * name, the fingerprint over them, and config.json.  Both serializations
 * reproduce Python's json module byte for byte (ensure_ascii escaping,
 * code-point key order, float repr), because the fingerprint is a
 * SHA-256 over that text and must match what a vLLM fleet computes.
 * jansson parses; its own writer escapes differently, so the writer here
 * walks the json_t tree itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <kv/config.h>
#include <kv/errors.h>
#include <kv/io.h>
#include <kv/layout.h>
#include "util/error.h"
#include "beneath.h"

#define CONFIG_MAX_BYTES	(1 << 20)	/* far above any real config */

struct kv_config {
	json_t *fields;		/* the whole config object, unknown keys kept */
	enum kv_config_schema schema;
};

/*
 * The two schemas upstream writes.  Required fields must be present with
 * their type; optional ones are checked when present; any other key is
 * kept untouched, because the fingerprint covers the whole object.
 */
enum field_type { FIELD_STRING, FIELD_SIZE, FIELD_BOOL, FIELD_GROUPS };

struct field {
	const char *key;
	enum field_type type;
	int required;
	int64_t max;		/* FIELD_SIZE: 1..max */
};

#define SIZE_TOKENS_MAX		(1 << 20)	/* tokens in a block */
#define SIZE_BLOCKS_MAX		(1 << 20)	/* GPU blocks in a file */
#define SIZE_PARALLEL_MAX	(1 << 16)	/* ranks along one axis */

static const struct field llmd_fields[] = {
	{ "model_name", FIELD_STRING, 1, 0 },
	{ "hash_block_size", FIELD_SIZE, 1, SIZE_TOKENS_MAX },
	{ "gpu_blocks_per_file", FIELD_SIZE, 1, SIZE_BLOCKS_MAX },
	{ "tp_size", FIELD_SIZE, 1, SIZE_PARALLEL_MAX },
	{ "pp_size", FIELD_SIZE, 1, SIZE_PARALLEL_MAX },
	{ "pcp_size", FIELD_SIZE, 1, SIZE_PARALLEL_MAX },
	{ "dcp_size", FIELD_SIZE, 1, SIZE_PARALLEL_MAX },
	{ "dtype", FIELD_STRING, 1, 0 },
	{ "kv_cache_groups", FIELD_GROUPS, 1, 0 },
	{ "inference_engine", FIELD_STRING, 1, 0 },
};

static const struct field vllm_fields[] = {
	{ "model_name", FIELD_STRING, 1, 0 },
	{ "tokens_per_hash", FIELD_SIZE, 1, SIZE_TOKENS_MAX },
	{ "blocks_per_file", FIELD_SIZE, 1, SIZE_BLOCKS_MAX },
	{ "tp_size", FIELD_SIZE, 1, SIZE_PARALLEL_MAX },
	{ "pp_size", FIELD_SIZE, 1, SIZE_PARALLEL_MAX },
	{ "pcp_size", FIELD_SIZE, 1, SIZE_PARALLEL_MAX },
	{ "dcp_size", FIELD_SIZE, 1, SIZE_PARALLEL_MAX },
	{ "dtype", FIELD_STRING, 1, 0 },
	{ "kv_cache_groups", FIELD_GROUPS, 1, 0 },
	{ "inference_engine", FIELD_STRING, 1, 0 },
	{ "parallel_agnostic", FIELD_BOOL, 0, 0 },
	{ "replicated_layout", FIELD_BOOL, 0, 0 },
	{ "canonical_format", FIELD_STRING, 0, 0 },
	{ "storage_format", FIELD_STRING, 0, 0 },
};

static const struct schema {
	const char *name;
	const char *tokens_key;		/* tokens per hashed block */
	const char *per_file_key;	/* GPU blocks per file */
	const char *group_tokens_key;	/* kv_cache_groups[i]: tokens per block */
	const struct field *fields;
	size_t nfields;
} schemas[] = {
	[KV_CONFIG_LLMD] = { "llm-d", "hash_block_size", "gpu_blocks_per_file",
			     "block_size", llmd_fields,
			     sizeof(llmd_fields) / sizeof(llmd_fields[0]) },
	[KV_CONFIG_VLLM] = { "vllm", "tokens_per_hash", "blocks_per_file",
			     "tokens_per_block", vllm_fields,
			     sizeof(vllm_fields) / sizeof(vllm_fields[0]) },
};


/* A growing output buffer; on allocation failure it records -ENOMEM
 * once and ignores further appends. */
struct sbuf {
	char *p;
	size_t len, cap;
	int err;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->err = -ENOMEM;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

/* Decode one UTF-8 sequence (jansson has already validated it). */
static unsigned utf8_next(const unsigned char *s, size_t *i)
{
	unsigned c = s[*i], n, cp;

	if (c < 0x80) {
		(*i)++;
		return c;
	}
	n = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
	cp = c & (0x3f >> n);
	for (unsigned k = 1; k <= n; k++)
		cp = (cp << 6) | (s[*i + k] & 0x3f);
	*i += n + 1;
	return cp;
}

/* A string as json.dumps(ensure_ascii=True) writes it: everything
 * outside ' '..'~' escaped, lowercase \uXXXX, UTF-16 surrogate pairs
 * above U+FFFF, and '/' left alone. */
static void put_string(struct sbuf *b, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	char esc[16];
	size_t i = 0;

	sb_add(b, "\"", 1);
	while (i < n) {
		size_t run = i;

		while (run < n && u[run] >= 0x20 && u[run] < 0x7f &&
		       u[run] != '"' && u[run] != '\\')
			run++;
		sb_add(b, s + i, run - i);
		if (run == n)
			break;
		i = run;
		unsigned cp = utf8_next(u, &i);

		switch (cp) {
		case '"':  sb_add(b, "\\\"", 2); continue;
		case '\\': sb_add(b, "\\\\", 2); continue;
		case '\n': sb_add(b, "\\n", 2); continue;
		case '\r': sb_add(b, "\\r", 2); continue;
		case '\t': sb_add(b, "\\t", 2); continue;
		case '\b': sb_add(b, "\\b", 2); continue;
		case '\f': sb_add(b, "\\f", 2); continue;
		}
		if (cp >= 0x10000) {
			cp -= 0x10000;
			snprintf(esc, sizeof(esc), "\\u%04x\\u%04x",
				 0xd800 | (cp >> 10), 0xdc00 | (cp & 0x3ff));
		} else {
			snprintf(esc, sizeof(esc), "\\u%04x", cp);
		}
		sb_str(b, esc);
	}
	sb_add(b, "\"", 1);
}

/* Python's repr(float): the shortest digits that read back as x, in
 * fixed notation when the decimal exponent is in [-4, 16), else as
 * d.ddde+XX.  Finite x only (jansson has no NaN or infinity). */
static void put_real(struct sbuf *b, double x)
{
	char tmp[40], digits[20], out[48];
	int ndig = 0, exp10 = 0, o = 0;
	double ax = fabs(x);

	if (ax == 0) {
		sb_str(b, signbit(x) ? "-0.0" : "0.0");
		return;
	}
	for (int prec = 1; prec <= DBL_DECIMAL_DIG; prec++) {
		char *e;

		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, ax);
		e = strchr(tmp, 'e');
		ndig = 0;
		for (char *p = tmp; p < e; p++)
			if (*p != '.')
				digits[ndig++] = *p;
		digits[ndig] = '\0';
		exp10 = atoi(e + 1);
		if (strtod(tmp, NULL) == ax)
			break;
		/* Just above a power of two the gap below x is half the gap
		 * above, so the nearest prec-digit decimal may miss while the
		 * next one up still reads back as x. */
		char up[20];
		int k = ndig - 1, upexp = exp10;

		memcpy(up, digits, (size_t)ndig + 1);
		while (k >= 0 && up[k] == '9')
			up[k--] = '0';
		if (k >= 0) {
			up[k]++;
		} else {
			up[0] = '1';
			upexp++;
		}
		snprintf(tmp, sizeof(tmp), "%c.%se%d", up[0], up + 1, upexp);
		if (strtod(tmp, NULL) == ax) {
			memcpy(digits, up, (size_t)ndig + 1);
			exp10 = upexp;
			break;
		}
	}
	while (ndig > 1 && digits[ndig - 1] == '0')
		digits[--ndig] = '\0';

	if (signbit(x))
		out[o++] = '-';
	if (exp10 >= -4 && exp10 < 16) {
		if (exp10 < 0) {
			o += snprintf(out + o, sizeof(out) - (size_t)o, "0.");
			for (int i = -1; i > exp10; i--)
				out[o++] = '0';
			o += snprintf(out + o, sizeof(out) - (size_t)o, "%s", digits);
		} else {
			for (int i = 0; i <= exp10; i++)
				out[o++] = i < ndig ? digits[i] : '0';
			out[o++] = '.';
			if (ndig > exp10 + 1)
				o += snprintf(out + o, sizeof(out) - (size_t)o,
					      "%s", digits + exp10 + 1);
			else
				out[o++] = '0';
		}
	} else {
		out[o++] = digits[0];
		if (ndig > 1) {
			out[o++] = '.';
			o += snprintf(out + o, sizeof(out) - (size_t)o, "%s",
				      digits + 1);
		}
		o += snprintf(out + o, sizeof(out) - (size_t)o, "e%c%02d",
			      exp10 < 0 ? '-' : '+', abs(exp10));
	}
	sb_add(b, out, (size_t)o);
}

struct kv_pair {
	const char *key;
	size_t len;
	json_t *value;
};

/* Code-point order: UTF-8 byte order is the same. */
static int pair_cmp(const void *a, const void *b)
{
	const struct kv_pair *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->key, y->key, n);

	if (c)
		return c;
	return (x->len > y->len) - (x->len < y->len);
}

static void newline(struct sbuf *b, int indent, int depth)
{
	sb_add(b, "\n", 1);
	for (int i = 0; i < indent * depth; i++)
		sb_add(b, " ", 1);
}

/* indent < 0: separators (",", ":"); else json.dump(indent=N). */
static void put_value(struct sbuf *b, json_t *v, int indent, int depth)
{
	char num[32];

	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		size_t n = json_object_size(v), i = 0;
		struct kv_pair *pairs;
		const char *key;
		json_t *val;
		void *it;

		if (n == 0) {
			sb_add(b, "{}", 2);
			return;
		}
		pairs = calloc(n, sizeof(*pairs));
		if (!pairs) {
			b->err = -ENOMEM;
			return;
		}
		for (it = json_object_iter(v); it && i < n;
		     it = json_object_iter_next(v, it), i++) {
			key = json_object_iter_key(it);
			val = json_object_iter_value(it);
			pairs[i].key = key;
			pairs[i].len = json_object_iter_key_len(it);
			pairs[i].value = val;
		}
		qsort(pairs, i, sizeof(*pairs), pair_cmp);
		sb_add(b, "{", 1);
		for (size_t k = 0; k < i; k++) {
			if (k)
				sb_add(b, ",", 1);
			if (indent >= 0)
				newline(b, indent, depth + 1);
			put_string(b, pairs[k].key, pairs[k].len);
			sb_str(b, indent >= 0 ? ": " : ":");
			put_value(b, pairs[k].value, indent, depth + 1);
		}
		if (indent >= 0)
			newline(b, indent, depth);
		sb_add(b, "}", 1);
		free(pairs);
		return;
	}
	case JSON_ARRAY: {
		size_t n = json_array_size(v);

		if (n == 0) {
			sb_add(b, "[]", 2);
			return;
		}
		sb_add(b, "[", 1);
		for (size_t k = 0; k < n; k++) {
			if (k)
				sb_add(b, ",", 1);
			if (indent >= 0)
				newline(b, indent, depth + 1);
			put_value(b, json_array_get(v, k), indent, depth + 1);
		}
		if (indent >= 0)
			newline(b, indent, depth);
		sb_add(b, "]", 1);
		return;
	}
	case JSON_STRING:
		put_string(b, json_string_value(v), json_string_length(v));
		return;
	case JSON_INTEGER:
		snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
			 json_integer_value(v));
		sb_str(b, num);
		return;
	case JSON_REAL:
		put_real(b, json_real_value(v));
		return;
	case JSON_TRUE:
		sb_add(b, "true", 4);
		return;
	case JSON_FALSE:
		sb_add(b, "false", 5);
		return;
	case JSON_NULL:
		sb_add(b, "null", 4);
		return;
	}
}

static int serialize(const struct kv_config *cfg, int indent, char **out,
		     size_t *len)
{
	struct sbuf b = { 0 };

	put_value(&b, cfg->fields, indent, 0);
	if (b.err) {
		free(b.p);
		return b.err;
	}
	*out = b.p;
	if (len)
		*len = b.len;
	return 0;
}

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "a list";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a float";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: break;
	}
	return "null";
}

static int check_groups(const json_t *groups, const char *tokens_key)
{
	size_t i;
	json_t *g;

	if (!json_is_array(groups))
		return kvi_fail(-KV_EBADCONFIG, "field 'kv_cache_groups' is %s, not a list",
				type_name(groups));
	json_array_foreach(groups, i, g) {
		json_t *bs = json_object_get(g, tokens_key);
		json_t *names = json_object_get(g, "layer_names");

		if (!json_is_object(g))
			return kvi_fail(-KV_EBADCONFIG, "field 'kv_cache_groups': item %zu is %s, "
					"not an object", i, type_name(g));
		if (!json_is_integer(bs))
			return kvi_fail(-KV_EBADCONFIG, "field 'kv_cache_groups': item %zu has no "
					"integer '%s'", i, tokens_key);
		if (json_integer_value(bs) < 1 || json_integer_value(bs) > SIZE_TOKENS_MAX)
			return kvi_fail(-KV_EBADCONFIG, "field 'kv_cache_groups': item %zu: '%s' "
					"is %lld, not 1..%d", i, tokens_key,
					(long long)json_integer_value(bs), SIZE_TOKENS_MAX);
		if (!json_is_array(names))
			return kvi_fail(-KV_EBADCONFIG, "field 'kv_cache_groups': item %zu has no "
					"list 'layer_names'", i);
	}
	return 0;
}

static int check_field(const json_t *root, const struct schema *sc,
		       const struct field *f)
{
	json_t *v = json_object_get(root, f->key);
	char safe[KV_NAME_MAX + 1];

	if (!v)
		return f->required ? kvi_fail(-KV_EBADCONFIG, "missing field '%s'", f->key) : 0;
	switch (f->type) {
	case FIELD_STRING:
		if (!json_is_string(v))
			return kvi_fail(-KV_EBADCONFIG, "field '%s' is %s, not a string",
					f->key, type_name(v));
		if (strlen(json_string_value(v)) != json_string_length(v))
			return kvi_fail(-KV_EBADCONFIG, "field '%s' holds a NUL character",
					f->key);
		if (!strcmp(f->key, "model_name") &&
		    kv_layout_safe_model(json_string_value(v), safe, sizeof(safe)) < 0)
			return kvi_fail(-KV_EBADCONFIG, "field 'model_name' cannot name a "
					"directory (empty, too long or control characters)");
		return 0;
	case FIELD_SIZE:
		if (!json_is_integer(v))
			return kvi_fail(-KV_EBADCONFIG, "field '%s' is %s, not an integer",
					f->key, type_name(v));
		if (json_integer_value(v) < 1 || json_integer_value(v) > f->max)
			return kvi_fail(-KV_EBADCONFIG, "field '%s' is %lld, not 1..%lld",
					f->key, (long long)json_integer_value(v),
					(long long)f->max);
		return 0;
	case FIELD_BOOL:
		if (!json_is_boolean(v))
			return kvi_fail(-KV_EBADCONFIG, "field '%s' is %s, not a boolean",
					f->key, type_name(v));
		return 0;
	case FIELD_GROUPS:
		return check_groups(v, sc->group_tokens_key);
	}
	return 0;
}

/* Which writer's schema: its tokens-per-block key tells them apart. */
static int schema_of(const json_t *root, enum kv_config_schema *out)
{
	int llmd = json_object_get(root, schemas[KV_CONFIG_LLMD].tokens_key) != NULL;
	int vllm = json_object_get(root, schemas[KV_CONFIG_VLLM].tokens_key) != NULL;

	if (llmd == vllm)
		return kvi_fail(-KV_EBADCONFIG, llmd ?
				"both 'hash_block_size' (llm-d) and 'tokens_per_hash' (vLLM)" :
				"missing field 'hash_block_size' (llm-d) or 'tokens_per_hash' (vLLM)");
	*out = llmd ? KV_CONFIG_LLMD : KV_CONFIG_VLLM;
	return 0;
}

int kv_config_parse(const char *text, size_t len, struct kv_config **out)
{
	enum kv_config_schema schema = KV_CONFIG_LLMD;
	struct kv_config *cfg;
	json_error_t jerr;
	json_t *root;
	int ret;

	kvi_error_clear();
	/* Python accepts "\u0000" in strings; keep it so the fingerprint of
	 * any such config still matches, then refuse it where it matters. */
	root = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
	if (!root)
		return kvi_fail(-KV_EBADCONFIG, "line %d: %s", jerr.line, jerr.text);
	if (!json_is_object(root)) {
		ret = kvi_fail(-KV_EBADCONFIG, "config is %s, not an object", type_name(root));
		json_decref(root);
		return ret;
	}
	ret = schema_of(root, &schema);
	for (size_t f = 0; ret == 0 && f < schemas[schema].nfields; f++)
		ret = check_field(root, &schemas[schema], &schemas[schema].fields[f]);
	if (ret < 0) {
		json_decref(root);
		return ret;
	}
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg) {
		json_decref(root);
		return -ENOMEM;
	}
	cfg->fields = root;
	cfg->schema = schema;
	*out = cfg;
	return 0;
}

/* The text of the open fd, to EOF rather than st_size so a pipe works
 * too, at most CONFIG_MAX_BYTES: 0 and a malloc'd *out, or -errno. */
static int read_text(int fd, char **out, size_t *outlen)
{
	size_t len = 0, cap = 4096;
	char *text = malloc(cap);

	if (!text)
		return -ENOMEM;
	for (;;) {
		ssize_t r;

		if (len == cap) {
			char *p;

			if (cap >= CONFIG_MAX_BYTES) {
				free(text);
				return kvi_fail(-KV_EBADCONFIG, "larger than %d bytes",
						CONFIG_MAX_BYTES);
			}
			p = realloc(text, cap * 2);
			if (!p) {
				free(text);
				return -ENOMEM;
			}
			text = p;
			cap *= 2;
		}
		r = read(fd, text + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(text);
			return -errno;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	*out = text;
	*outlen = len;
	return 0;
}

/* Load with extra open flags.  A FIFO is opened without blocking (no
 * writer: it reads as empty), so a hostile tree cannot hang a reader. */
static int load_at(int dirfd, const char *path, int oflags,
		   struct kv_config **out)
{
	struct stat st;
	size_t len;
	char *text;
	int fd, ret;

	kvi_error_clear();
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
		    oflags);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || fcntl(fd, F_SETFL, 0) < 0) {
		ret = -errno;
		close(fd);
		return ret;
	}
	if ((oflags & O_NOFOLLOW) && !S_ISREG(st.st_mode)) {
		close(fd);
		return kvi_fail(-KV_EBADCONFIG, "not a regular file");
	}
	ret = read_text(fd, &text, &len);
	close(fd);
	if (ret < 0)
		return ret;
	ret = kv_config_parse(text, len, out);
	free(text);
	return ret;
}

int kv_config_read(int rootfd, const char *model_dir, char **text, size_t *len)
{
	char path[KV_NAME_MAX + sizeof("/" KV_CONFIG_NAME)];
	struct kv_block_ref ref;
	struct stat st;
	int fd, ret;

	kvi_error_clear();
	if (kv_layout_model_dir_parse(model_dir, &ref) < 0)
		return -KV_EBADPATH;
	snprintf(path, sizeof(path), "%s/%s", model_dir, KV_CONFIG_NAME);
	fd = kvi_open_beneath(rootfd, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, 0);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		ret = -errno;
	else if (!S_ISREG(st.st_mode))
		ret = kvi_fail(-KV_EBADCONFIG, "not a regular file");
	else
		ret = read_text(fd, text, len);
	close(fd);
	return ret;
}

int kv_config_load(int dirfd, const char *path, struct kv_config **out)
{
	return load_at(dirfd, path, 0, out);
}

void kv_config_free(struct kv_config *cfg)
{
	if (!cfg)
		return;
	json_decref(cfg->fields);
	free(cfg);
}

int kv_config_canonical(const struct kv_config *cfg, char **out)
{
	return serialize(cfg, -1, out, NULL);
}

int kv_config_fingerprint(const struct kv_config *cfg,
			  char out[KV_FINGERPRINT_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t len = 0;
	char *text = NULL;
	int ret;

	ret = serialize(cfg, -1, &text, &len);
	if (ret < 0)
		return ret;
	ret = EVP_Digest(text, len, md, &mdlen, EVP_sha256(), NULL);
	free(text);
	if (ret != 1)
		return -ENOMEM;
	for (int i = 0; i < KV_FINGERPRINT_LEN / 2; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[KV_FINGERPRINT_LEN] = '\0';
	return 0;
}

int kv_config_model_dir(const struct kv_config *cfg, char *buf, size_t len)
{
	char fp[KV_FINGERPRINT_LEN + 1];
	int ret = kv_config_fingerprint(cfg, fp);

	if (ret < 0)
		return ret;
	return kv_layout_model_dir(kv_config_string(cfg, "model_name"), fp,
				   buf, len);
}

const char *kv_config_string(const struct kv_config *cfg, const char *key)
{
	return json_string_value(json_object_get(cfg->fields, key));
}

enum kv_config_schema kv_config_schema(const struct kv_config *cfg)
{
	return cfg->schema;
}

const char *kv_config_schema_name(const struct kv_config *cfg)
{
	return schemas[cfg->schema].name;
}

int kv_config_blocks(const struct kv_config *cfg, uint64_t *tokens_per_block,
		     uint64_t *blocks_per_file)
{
	const struct schema *sc = &schemas[cfg->schema];

	/* Both were checked positive at parse. */
	*tokens_per_block = (uint64_t)json_integer_value(json_object_get(cfg->fields,
									 sc->tokens_key));
	*blocks_per_file = (uint64_t)json_integer_value(json_object_get(cfg->fields,
									sc->per_file_key));
	return 0;
}

int kv_config_int(const struct kv_config *cfg, const char *key, int64_t *out)
{
	json_t *v = json_object_get(cfg->fields, key);

	if (!json_is_integer(v))
		return -ENOENT;
	*out = json_integer_value(v);
	return 0;
}

/* Write the indented text to a fresh temp beside path, fsync'd so the
 * name it is linked or renamed to never shows a torn file. */
static int write_temp(const struct kv_config *cfg, int dirfd,
		      const char *path, char *tmp, size_t tmplen)
{
	size_t len = 0, off = 0;
	char *text = NULL;
	int fd, ret;

	ret = kv_layout_temp_name(path, tmp, tmplen);
	if (ret < 0)
		return ret;
	ret = serialize(cfg, 2, &text, &len);
	if (ret < 0)
		return ret;
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
		    O_NOFOLLOW, 0644);
	if (fd < 0) {
		ret = -errno;
		free(text);
		return ret;
	}
	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			break;
		}
		off += (size_t)w;
	}
	if (ret == 0 && fsync(fd) < 0)
		ret = -errno;
	if (close(fd) < 0 && ret == 0)
		ret = -errno;
	free(text);
	if (ret < 0)
		unlinkat(dirfd, tmp, 0);
	return ret;
}

int kv_config_write(const struct kv_config *cfg, int dirfd, const char *path)
{
	size_t len = 0;
	char *text = NULL;
	int ret;

	ret = serialize(cfg, 2, &text, &len);
	if (ret < 0)
		return ret;
	/* A config.json that is not a regular file is refused, never
	 * replaced. */
	ret = kv_file_replace(dirfd, path, text, len, 0644, KV_FILE_FSYNC);
	free(text);
	return ret;
}

/* 0 if dirfd/config.json describes the same fields as cfg; a different
 * one hashes to another name than its dir's: -KV_EFINGERPRINT. */
static int same_config(const struct kv_config *cfg, int dirfd)
{
	struct kv_config *old;
	char *a = NULL, *b = NULL;
	int ret;

	/* Inside a shared root, config.json must be a plain file. */
	ret = load_at(dirfd, KV_CONFIG_NAME, O_NOFOLLOW, &old);
	if (ret < 0)
		return ret;
	ret = serialize(cfg, -1, &a, NULL);
	if (ret == 0) {
		ret = serialize(old, -1, &b, NULL);
		if (ret == 0) {
			ret = strcmp(a, b) ? -KV_EFINGERPRINT : 0;
			free(b);
		}
		free(a);
	}
	kv_config_free(old);
	return ret;
}

int kv_config_ensure_model_dir(int rootfd, const struct kv_config *cfg,
			       char *model_dir, size_t len)
{
	char name[KV_NAME_MAX + 1], tmp[PATH_MAX];
	int dfd, ret;

	ret = kv_config_model_dir(cfg, name, sizeof(name));
	if (ret < 0)
		return ret;
	if (strlen(name) >= len)
		return -ENAMETOOLONG;
	if (mkdirat(rootfd, name, 0755) < 0 && errno != EEXIST)
		return -errno;
	dfd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
		     O_CLOEXEC);
	if (dfd < 0)
		return -errno;

	ret = same_config(cfg, dfd);
	if (ret == -ENOENT) {
		/* link(2) never replaces, so of racing writers one wins and
		 * the others compare against what it wrote. */
		ret = write_temp(cfg, dfd, KV_CONFIG_NAME, tmp, sizeof(tmp));
		if (ret == 0) {
			if (linkat(dfd, tmp, dfd, KV_CONFIG_NAME, 0) < 0) {
				if (errno == EEXIST)
					ret = same_config(cfg, dfd);
				else if (renameat(dfd, tmp, dfd,
						  KV_CONFIG_NAME) < 0)
					ret = -errno;	/* no hard links */
			}
			unlinkat(dfd, tmp, 0);
		}
	}
	close(dfd);
	if (ret == 0)
		strcpy(model_dir, name);
	return ret;
}
