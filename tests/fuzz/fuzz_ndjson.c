/*
 * libFuzzer harness for kvput --batch manifest lines: every input line
 * goes through manifest_line_parse(), the parser kvput --batch runs on
 * each NDJSON line (a tool_record.c block record with kvput's "file" or
 * "data_b64"), and a "data_b64" payload through the decoder kvput uses.
 * A line must either be refused with a reason or name a block path of
 * the layout whose parts are the record's, never a path outside the
 * root, with exactly one of "file" and "data_b64"; a decoded payload
 * fits its buffer.  The parser opens no file, so "file" lines are parsed
 * like any other.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../../cmd/tool_record.c"
#include "../../cmd/kvput/manifest.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_line(const struct manifest_line *m, void **buf, size_t *cap)
{
	struct kv_block_ref ref;
	size_t len;

	if (kv_layout_block_parse(m->rec.relpath, &ref) != 0 ||
	    strcmp(ref.hash, m->rec.ref.hash) || strcmp(ref.model_dir, m->rec.ref.model_dir) ||
	    ref.rank != m->rec.ref.rank || ref.group != m->rec.ref.group ||
	    m->rec.relpath[0] == '/' || strstr(m->rec.relpath, "..") || !m->file == !m->data_b64)
		abort();
	if (m->data_b64 && manifest_b64_decode(m->data_b64, buf, cap, &len) == 0 &&
	    (len > *cap || !*buf))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct tool_record_opts o = { .model_dir = "fuzz_model_0123456789ab",
					    .model_opts = 1 };
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
		if (manifest_line_parse(line, &o, &m) == 0)
			check_line(&m, &buf, &cap);
		else if (!m.rec.error[0])
			abort();
		tool_record_free(&m.rec);
	}
	kv_io_buf_free(buf);
	free(text);
	return 0;
}
