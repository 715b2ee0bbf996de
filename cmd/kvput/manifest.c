/* kvput --batch manifest lines: {"hash","file"|"data_b64"[,"rank","group"]}. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <openssl/evp.h>
#include "manifest.h"

static int refuse(struct manifest_line *m, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int refuse(struct manifest_line *m, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m->error, sizeof(m->error), fmt, ap);
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

int manifest_line_parse(const char *text, const char *model_dir, unsigned rank,
			unsigned group, struct manifest_line *m)
{
	json_error_t jerr;
	const char *hash;

	memset(m, 0, sizeof(*m));
	m->json = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!m->json || !json_is_object(m->json))
		return refuse(m, "invalid JSON: %s", m->json ? "not an object" : jerr.text);
	hash = json_string_value(json_object_get(m->json, "hash"));
	m->file = json_string_value(json_object_get(m->json, "file"));
	m->data_b64 = json_string_value(json_object_get(m->json, "data_b64"));
	if (!hash)
		return refuse(m, "no \"hash\" string");
	m->record_hash = hash;
	if (kv_layout_hash_normalize(hash, m->hash, sizeof(m->hash)) < 0)
		return refuse(m, "invalid hash '%s' (want 5 to 128 hex digits)", hash);
	m->record_hash = m->hash;
	if (uint_field(m->json, "rank", rank, &m->rank) < 0 ||
	    uint_field(m->json, "group", group, &m->group) < 0)
		return refuse(m, "\"rank\" and \"group\" must be integers >= 0");
	if (kv_layout_block_path(model_dir, m->rank, m->group, m->hash, m->relpath,
				 sizeof(m->relpath)) < 0)
		return refuse(m, "cannot compose a block path");
	m->record_path = m->relpath;
	if (!m->file == !m->data_b64)
		return refuse(m, "want exactly one of \"file\" and \"data_b64\"");
	return 0;
}

void manifest_line_free(struct manifest_line *m)
{
	json_decref(m->json);
	m->json = NULL;
}

int manifest_b64_decode(const char *text, void **buf, size_t *cap, size_t *len)
{
	size_t n = strlen(text), out = n / 4 * 3;
	int got;

	if (n % 4)
		return -EINVAL;
	if (out > *cap || !*buf) {
		void *nb = kv_io_buf_alloc(out);

		if (!nb)
			return -ENOMEM;
		kv_io_buf_free(*buf);
		*buf = nb;
		*cap = out ? out : 1;
	}
	if (n == 0) {
		*len = 0;
		return 0;
	}
	got = EVP_DecodeBlock(*buf, (const unsigned char *)text, (int)n);
	if (got < 0 || (size_t)got != out)
		return -EINVAL;
	/* EVP_DecodeBlock counts the padding as zero bytes. */
	if (text[n - 1] == '=')
		out--;
	if (text[n - 2] == '=')
		out--;
	*len = out;
	return 0;
}
