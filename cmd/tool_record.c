/* The NDJSON block record: one parser, one writer. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "tool_record.h"

static int refuse_at(struct tool_record *r, const char *hash, const char *path,
		     const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));

static int refuse_at(struct tool_record *r, const char *hash, const char *path,
		     const char *fmt, va_list ap)
{
	r->record_hash = hash;
	r->record_path = path;
	vsnprintf(r->error, sizeof(r->error), fmt, ap);
	return -1;
}

static int refuse(struct tool_record *r, const char *hash, const char *path,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int refuse(struct tool_record *r, const char *hash, const char *path,
		  const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	refuse_at(r, hash, path, fmt, ap);
	va_end(ap);
	return -1;
}

int tool_record_refuse(struct tool_record *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	refuse_at(r, r->record_hash, r->record_path, fmt, ap);
	va_end(ap);
	return -1;
}

int tool_record_string(const struct tool_record *r, const char *key, const char **out)
{
	json_t *v = json_object_get(r->json, key);

	*out = json_string_value(v);
	return v && !*out ? -1 : 0;
}

/* An optional unsigned key: 0 (*given says whether it was there), or -1. */
static int uint_key(json_t *rec, const char *key, unsigned *out, int *given)
{
	json_t *v = json_object_get(rec, key);

	*given = v != NULL;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > UINT_MAX)
		return -1;
	*out = (unsigned)json_integer_value(v);
	return 0;
}

/* Strip "<prefix>/" from path; NULL when path is not under prefix. */
static const char *under(const char *prefix, const char *path)
{
	size_t n;

	if (!prefix)
		return NULL;
	n = strlen(prefix);
	while (n > 1 && prefix[n - 1] == '/')
		n--;
	if (n == 1 && prefix[0] == '/')
		return path + 1;
	if (!strncmp(path, prefix, n) && path[n] == '/')
		return path + n + 1;
	return NULL;
}

/* A block path, relative or (where the program takes one) absolute. */
static int parse_path(struct tool_record *r, const struct tool_record_opts *o,
		      const char *path, const char *hash)
{
	const char *rel = path;

	if (path[0] == '/' && o->root && !(rel = under(o->root, path)))
		rel = under(o->root_real, path);
	if (!rel)
		return refuse(r, hash, path, "path is outside the root");
	if (kv_layout_block_parse(rel, &r->ref) < 0 || strlen(rel) >= sizeof(r->relpath))
		return refuse(r, hash, path, "not a block path in the cache layout");
	strcpy(r->relpath, rel);
	r->record_hash = r->ref.hash;
	r->record_path = r->relpath;
	return 0;
}

/* The block from model_dir ("" for none), rank, group and hash. */
static int compose(struct tool_record *r, const struct tool_record_opts *o,
		   const char *model_dir, unsigned rank, unsigned group, const char *hash)
{
	if (kv_layout_hash_normalize(hash, r->ref.hash, sizeof(r->ref.hash)) < 0)
		return refuse(r, hash, NULL, "invalid hash '%s' (want 5 to 128 hex digits)", hash);
	r->record_hash = r->ref.hash;
	if (!*model_dir)
		return refuse(r, r->ref.hash, NULL, "no model dir: give \"model_dir\"%s",
			      o->model_opts ? ", --model-dir or --config" : "");
	if (kv_layout_model_dir_parse(model_dir, &r->ref) < 0 ||
	    kv_layout_block_path(model_dir, rank, group, r->ref.hash, r->relpath,
				 sizeof(r->relpath)) < 0)
		return refuse(r, r->ref.hash, NULL, "invalid model dir '%s'", model_dir);
	r->ref.rank = rank;
	r->ref.group = group;
	r->record_path = r->relpath;
	return 0;
}

static int parse_json(char *text, const struct tool_record_opts *o, struct tool_record *r)
{
	const char *path, *model_dir, *hash, *dflt = o->model_dir ? o->model_dir : "";
	unsigned rank = o->rank, group = o->group;
	int has_rank, has_group;
	char norm[KV_HASH_MAX_LEN + 1];
	json_error_t jerr;

	r->json = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!r->json || !json_is_object(r->json))
		return refuse(r, NULL, NULL, "invalid JSON: %s",
			      r->json ? "not an object" : jerr.text);
	if (tool_record_string(r, "hash", &hash) < 0)
		return refuse(r, NULL, NULL, "\"hash\" must be a string");
	if (tool_record_string(r, "path", &path) < 0 ||
	    tool_record_string(r, "model_dir", &model_dir) < 0)
		return refuse(r, hash, NULL, "\"path\" and \"model_dir\" must be strings");
	if (uint_key(r->json, "rank", &rank, &has_rank) < 0 ||
	    uint_key(r->json, "group", &group, &has_group) < 0)
		return refuse(r, hash, path, "\"rank\" and \"group\" must be integers >= 0");
	if (!path) {
		if (!hash)
			return refuse(r, NULL, NULL, "no \"path\" and no \"hash\"");
		return compose(r, o, model_dir ? model_dir : dflt, rank, group, hash);
	}
	if (parse_path(r, o, path, hash) < 0)
		return -1;
	/* A record that names its block twice must name one block. */
	if (hash && (kv_layout_hash_normalize(hash, norm, sizeof(norm)) < 0 ||
		     strcmp(norm, r->ref.hash)))
		return refuse(r, hash, path, "\"path\" and \"hash\" disagree");
	if (model_dir && strcmp(model_dir, r->ref.model_dir))
		return refuse(r, r->ref.hash, path, "\"path\" and \"model_dir\" disagree");
	if ((has_rank && rank != r->ref.rank) || (has_group && group != r->ref.group))
		return refuse(r, r->ref.hash, path, "\"path\" and \"%s\" disagree",
			      has_rank && rank != r->ref.rank ? "rank" : "group");
	return 0;
}

static int parse_bare_hash(char *text, const struct tool_record_opts *o,
			   struct tool_record *r)
{
	text[strcspn(text, " \t\r\n")] = '\0';
	if (kv_layout_hash_normalize(text, r->ref.hash, sizeof(r->ref.hash)) < 0)
		return refuse(r, NULL, NULL, "invalid hash '%s' (want 5 to 128 hex digits)",
			      text);
	if (!o->model_dir || !*o->model_dir)
		return refuse(r, r->ref.hash, NULL, "a bare hash needs --model-dir or --config");
	return compose(r, o, o->model_dir, o->rank, o->group, text);
}

int tool_record_parse(char *text, const struct tool_record_opts *o, struct tool_record *r)
{
	memset(r, 0, sizeof(*r));
	if (strlen(text) > (o->line_max ? o->line_max : TOOL_LINE_MAX))
		return refuse(r, NULL, NULL, "line longer than %zu bytes",
			      o->line_max ? o->line_max : TOOL_LINE_MAX);
	text += strspn(text, " \t\r\n");
	if (*text == '{' || o->bare == TOOL_RECORD_BARE_NONE)
		return parse_json(text, o, r);
	if (o->bare == TOOL_RECORD_BARE_HASH)
		return parse_bare_hash(text, o, r);
	text[strcspn(text, "\r\n")] = '\0';
	return parse_path(r, o, text, NULL);
}

void tool_record_free(struct tool_record *r)
{
	json_decref(r->json);
	r->json = NULL;
}

/* --- writing --------------------------------------------------------- */

static char *put_u64(char *p, uint64_t v)
{
	char tmp[20];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = tmp[--n];
	return p;
}

static char *put_i64(char *p, int64_t v)
{
	if (v < 0) {
		*p++ = '-';
		return put_u64(p, (uint64_t)0 - (uint64_t)v);
	}
	return put_u64(p, (uint64_t)v);
}

/* Decode one UTF-8 sequence at s; its length, or 0 if invalid. */
static int utf8_decode(const unsigned char *s, uint32_t *cp)
{
	int n;
	uint32_t c;

	if (s[0] < 0xc2)
		return 0;
	if (s[0] < 0xe0) {
		n = 2;
		c = s[0] & 0x1f;
	} else if (s[0] < 0xf0) {
		n = 3;
		c = s[0] & 0x0f;
	} else if (s[0] < 0xf5) {
		n = 4;
		c = s[0] & 0x07;
	} else {
		return 0;
	}
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if ((n == 3 && (c < 0x800 || (c >= 0xd800 && c < 0xe000))) ||
	    (n == 4 && (c < 0x10000 || c > 0x10ffff)))
		return 0;
	*cp = c;
	return n;
}

static char *put_u_escape(char *p, uint32_t cp)
{
	static const char hex[] = "0123456789ABCDEF";

	*p++ = '\\';
	*p++ = 'u';
	for (int shift = 12; shift >= 0; shift -= 4)
		*p++ = hex[(cp >> shift) & 0xf];
	return p;
}

/* File names need not be UTF-8; an invalid byte becomes U+FFFD. */
char *tool_json_str(char *p, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	*p++ = '"';
	while (*s) {
		const unsigned char *run = s;
		uint32_t cp;
		int n;

		/* Plain ASCII, nearly every byte of a layout path, in one copy. */
		while (*s >= 0x20 && *s < 0x80 && *s != '"' && *s != '\\')
			s++;
		memcpy(p, run, (size_t)(s - run));
		p += s - run;
		if (!*s)
			break;
		switch (*s) {
		case '"': p = stpcpy(p, "\\\""); s++; continue;
		case '\\': p = stpcpy(p, "\\\\"); s++; continue;
		case '\b': p = stpcpy(p, "\\b"); s++; continue;
		case '\f': p = stpcpy(p, "\\f"); s++; continue;
		case '\n': p = stpcpy(p, "\\n"); s++; continue;
		case '\r': p = stpcpy(p, "\\r"); s++; continue;
		case '\t': p = stpcpy(p, "\\t"); s++; continue;
		}
		if (*s < 0x20) {
			p = put_u_escape(p, *s++);
			continue;
		}
		n = utf8_decode(s, &cp);
		if (!n) {
			p = put_u_escape(p, 0xfffd);
			s++;
			continue;
		}
		s += n;
		if (cp >= 0x10000) {
			cp -= 0x10000;
			p = put_u_escape(p, 0xd800 | (cp >> 10));
			p = put_u_escape(p, 0xdc00 | (cp & 0x3ff));
		} else {
			p = put_u_escape(p, cp);
		}
	}
	*p++ = '"';
	return p;
}

char *tool_record_format(char *p, const struct kv_tier_entry *e)
{
	int file = e->fields & KV_TIER_ENTRY_FILE, ram = e->fields & KV_TIER_ENTRY_RAM;

	*p++ = '{';
	if (file) {
		p = stpcpy(p, "\"alloc_bytes\":");
		p = put_u64(p, e->alloc_bytes);
		p = stpcpy(p, ",\"atime_ns\":");
		p = put_i64(p, e->atime_ns);
		*p++ = ',';
	}
	p = stpcpy(p, "\"group\":");
	p = put_u64(p, e->ref.group);
	p = stpcpy(p, ",\"hash\":");
	p = tool_json_str(p, e->ref.hash);
	if (file) {
		p = stpcpy(p, ",\"last_use_ns\":");
		p = put_i64(p, e->last_use_ns);
	}
	p = stpcpy(p, ",\"model_dir\":");
	p = tool_json_str(p, e->ref.model_dir);
	if (file) {
		p = stpcpy(p, ",\"mtime_ns\":");
		p = put_i64(p, e->mtime_ns);
	}
	if (ram)
		p = stpcpy(p, e->on_disk ? ",\"on_disk\":true" : ",\"on_disk\":false");
	p = stpcpy(p, ",\"path\":");
	p = tool_json_str(p, e->key);
	if (ram) {
		p = stpcpy(p, ",\"pins\":");
		p = put_u64(p, e->pins);
	}
	p = stpcpy(p, ",\"rank\":");
	p = put_u64(p, e->ref.rank);
	p = stpcpy(p, ",\"size_bytes\":");
	p = put_u64(p, e->size_bytes);
	*p++ = '}';
	return p;
}
