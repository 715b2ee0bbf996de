/* kvget --batch input lines: bare hashes or kvls NDJSON block records. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "blockline.h"

static int refuse(struct block_line *l, const char *hash, const char *path,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int refuse(struct block_line *l, const char *hash, const char *path,
		  const char *fmt, ...)
{
	va_list ap;

	l->record_hash = hash;
	l->record_path = path;
	va_start(ap, fmt);
	vsnprintf(l->error, sizeof(l->error), fmt, ap);
	va_end(ap);
	return -1;
}

static int uint_field(json_t *rec, const char *key, unsigned dflt, unsigned *out)
{
	json_t *v = json_object_get(rec, key);

	*out = dflt;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > UINT_MAX)
		return -1;
	*out = (unsigned)json_integer_value(v);
	return 0;
}

/* A kvls record: its "path", else model_dir/rank/group/hash. */
static int parse_record(const char *text, const char *dflt_model_dir, unsigned rank,
			unsigned group, struct block_line *l)
{
	const char *path, *model_dir, *hash;
	struct kv_block_ref ref;
	json_error_t jerr;

	l->json = json_loads(text, 0, &jerr);
	if (!l->json || !json_is_object(l->json))
		return refuse(l, NULL, NULL, "invalid JSON: %s",
			      l->json ? "not an object" : jerr.text);
	path = json_string_value(json_object_get(l->json, "path"));
	model_dir = json_string_value(json_object_get(l->json, "model_dir"));
	hash = json_string_value(json_object_get(l->json, "hash"));
	if (!model_dir)
		model_dir = dflt_model_dir;
	if (path) {
		if (kv_layout_block_parse(path, &ref) < 0 || strlen(path) >= sizeof(l->relpath))
			return refuse(l, hash, path, "not a block path in the cache layout");
		strcpy(l->relpath, path);
		strcpy(l->hash, ref.hash);
		return 0;
	}
	if (!hash)
		return refuse(l, NULL, NULL, "no \"path\" and no \"hash\"");
	if (kv_layout_hash_normalize(hash, l->hash, sizeof(l->hash)) < 0)
		return refuse(l, hash, NULL, "invalid hash '%s' (want 5 to 128 hex digits)", hash);
	if (uint_field(l->json, "rank", rank, &rank) < 0 ||
	    uint_field(l->json, "group", group, &group) < 0)
		return refuse(l, l->hash, NULL, "\"rank\" and \"group\" must be integers >= 0");
	if (!*model_dir)
		return refuse(l, l->hash, NULL,
			      "no model dir: give \"model_dir\", --model-dir or --config");
	if (kv_layout_model_dir_parse(model_dir, &ref) < 0 ||
	    kv_layout_block_path(model_dir, rank, group, l->hash, l->relpath,
				 sizeof(l->relpath)) < 0)
		return refuse(l, l->hash, NULL, "invalid model dir '%s'", model_dir);
	return 0;
}

/* A bare hash on its own line, in the given model dir, rank and group. */
static int parse_hash(char *text, const char *model_dir, unsigned rank, unsigned group,
		      struct block_line *l)
{
	text[strcspn(text, " \t\r\n")] = '\0';
	if (kv_layout_hash_normalize(text, l->hash, sizeof(l->hash)) < 0)
		return refuse(l, NULL, NULL, "invalid hash '%s' (want 5 to 128 hex digits)",
			      text);
	if (!*model_dir)
		return refuse(l, l->hash, NULL, "a bare hash needs --model-dir or --config");
	if (kv_layout_block_path(model_dir, rank, group, l->hash, l->relpath,
				 sizeof(l->relpath)) < 0)
		return refuse(l, l->hash, NULL, "cannot compose a block path");
	return 0;
}

int block_line_parse(char *text, const char *model_dir, unsigned rank, unsigned group,
		     struct block_line *l)
{
	memset(l, 0, sizeof(*l));
	text += strspn(text, " \t\r\n");
	return *text == '{' ? parse_record(text, model_dir, rank, group, l) :
	       parse_hash(text, model_dir, rank, group, l);
}

void block_line_free(struct block_line *l)
{
	json_decref(l->json);
	l->json = NULL;
}
