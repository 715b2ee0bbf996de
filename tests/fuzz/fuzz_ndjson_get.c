/*
 * libFuzzer harness for kvget --batch input, in process: kvget's own
 * source is compiled in (its main renamed) and every input line goes
 * where batch_next() sends it, parse_record() for a kvls NDJSON record
 * and parse_hash() for a bare hash.  A line must be refused or name a
 * block path of the layout whose hash is the one recorded, never a path
 * that leaves the root ("..", absolute, a foreign name).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define main kvget_main
#include "../../cmd/kvget/kvget.c"
#undef main
#include "../../cmd/tool.c"
#include "../../cmd/tool_modeldir.c"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	tool_name = "kvget";
	if (!freopen("/dev/null", "w", stdout))
		abort();
	stderr = fopen("/dev/null", "w");
	return 0;
}

static void check_slot(const struct slot *s)
{
	struct kv_block_ref ref;

	if (kv_layout_block_parse(s->relpath, &ref) != 0 || strcmp(ref.hash, s->hash) ||
	    s->relpath[0] == '/' || strstr(s->relpath, ".."))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The first byte picks whether --model-dir was given. */
	struct get get = { .root = "/nonexistent" };
	struct batch b = { .get = &get };
	struct slot s;
	char *text, *line, *save = NULL;

	if (size < 1)
		return 0;
	if (data[0] & 1)
		strcpy(get.model_dir, "fuzz_model_0123456789ab");
	get.rank = (data[0] >> 1) & 3;
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	memset(&s, 0, sizeof(s));
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *p = line + strspn(line, " \t\r");

		b.line++;
		if (!*p)
			continue;
		if ((*p == '{' ? parse_record(&b, p, &s) : parse_hash(&b, p, &s)) == 0)
			check_slot(&s);
	}
	free(text);
	return 0;
}
