/*
 * libFuzzer harness for kvput --batch manifest lines: every input line
 * goes through manifest_line_parse(), the parser kvput --batch runs on
 * each NDJSON line, and a "data_b64" payload through the decoder kvput
 * uses.  A line must either be refused with a reason or name a block path
 * of the layout for its hash and rank inside the model, never a path
 * outside it, with exactly one of "file" and "data_b64"; a decoded
 * payload fits its buffer.  The parser opens no file, so "file" lines
 * are parsed like any other.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../../cmd/kvput/manifest.c"

#define FUZZ_MODEL_DIR "fuzz_model_0123456789ab"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_line(const struct manifest_line *m, void **buf, size_t *cap)
{
	struct kv_block_ref ref;
	size_t len;

	if (kv_layout_block_parse(m->relpath, &ref) != 0 || strcmp(ref.hash, m->hash) ||
	    strcmp(ref.model_dir, FUZZ_MODEL_DIR) || ref.rank != m->rank ||
	    ref.group != m->group || strstr(m->relpath, "..") || !m->file == !m->data_b64)
		abort();
	if (m->data_b64 && manifest_b64_decode(m->data_b64, buf, cap, &len) == 0 &&
	    (len > *cap || !*buf))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct manifest_line m;
	char *text = malloc(size + 1), *line, *save = NULL;
	void *buf = NULL;
	size_t cap = 0;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	/* Lines as kvput reads them: blank ones skipped. */
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strspn(line, " \t\r") == strlen(line))
			continue;
		if (manifest_line_parse(line, FUZZ_MODEL_DIR, 0, 0, &m) == 0)
			check_line(&m, &buf, &cap);
		else if (!m.error[0])
			abort();
		manifest_line_free(&m);
	}
	kv_io_buf_free(buf);
	free(text);
	return 0;
}
