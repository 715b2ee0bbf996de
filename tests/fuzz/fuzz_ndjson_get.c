/*
 * libFuzzer harness for the block records kvget --batch and kvevict
 * --stdin read: every input line goes through tool_record_parse(), the
 * parser both run on each line (a kvls NDJSON record, or a bare hash or
 * path).  A line must be refused with a reason or name a block path of
 * the layout whose parts are the ones recorded, never a path that leaves
 * the root ("..", absolute, a foreign name).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../../cmd/tool_record.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_line(const struct tool_record *r)
{
	struct kv_block_ref ref;

	if (kv_layout_block_parse(r->relpath, &ref) != 0 || strcmp(ref.hash, r->ref.hash) ||
	    strcmp(ref.model_dir, r->ref.model_dir) || ref.rank != r->ref.rank ||
	    ref.group != r->ref.group || r->relpath[0] == '/' || strstr(r->relpath, ".."))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The first byte picks --model-dir or none, --rank, and whether a
	 * bare line is a hash (kvget) or a path under a root (kvevict). */
	struct tool_record_opts o = { .model_opts = 1, .bare = TOOL_RECORD_BARE_HASH };
	struct tool_record r;
	char *text, *line, *save = NULL;

	if (size < 1)
		return 0;
	o.model_dir = data[0] & 1 ? "fuzz_model_0123456789ab" : "";
	o.rank = (data[0] >> 1) & 3;
	if (data[0] & 8) {
		o.bare = TOOL_RECORD_BARE_PATH;
		o.root = "/cache/root/";
		o.root_real = "/mnt/cache";
	}
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!line[strspn(line, " \t\r")])
			continue;
		if (tool_record_parse(line, &o, &r) == 0)
			check_line(&r);
		else if (!r.error[0])
			abort();
		tool_record_free(&r);
	}
	free(text);
	return 0;
}
