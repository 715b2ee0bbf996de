/*
 * libFuzzer harness for kvget --batch input: every input line goes
 * through block_line_parse(), the parser kvget --batch runs on each line
 * (a kvls NDJSON record or a bare hash).  A line must be refused with a
 * reason or name a block path of the layout whose hash is the one
 * recorded, never a path that leaves the root ("..", absolute, a foreign
 * name).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../../cmd/kvget/blockline.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_line(const struct block_line *l)
{
	struct kv_block_ref ref;

	if (kv_layout_block_parse(l->relpath, &ref) != 0 || strcmp(ref.hash, l->hash) ||
	    l->relpath[0] == '/' || strstr(l->relpath, ".."))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The first byte picks whether --model-dir was given, and --rank. */
	const char *model_dir;
	struct block_line l;
	char *text, *line, *save = NULL;
	unsigned rank;

	if (size < 1)
		return 0;
	model_dir = data[0] & 1 ? "fuzz_model_0123456789ab" : "";
	rank = (data[0] >> 1) & 3;
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!line[strspn(line, " \t\r")])
			continue;
		if (block_line_parse(line, model_dir, rank, 0, &l) == 0)
			check_line(&l);
		else if (!l.error[0])
			abort();
		block_line_free(&l);
	}
	free(text);
	return 0;
}
