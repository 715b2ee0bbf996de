/*
 * libFuzzer harness for kvput --batch manifest lines, in process: kvput's
 * own source is compiled in (its main renamed) and every input line goes
 * through load_line(), the function kvput --batch runs on each NDJSON
 * line.  A line must either be refused (reported, skipped) or become a
 * put request whose path is a block path of the layout for that hash,
 * never a path outside the model's rank dir.  Lines naming a "file" are
 * skipped: that branch only opens the named path, and a fuzzer that
 * finds "/dev/zero" would measure the disk, not the parser.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define main kvput_main
#include "../../cmd/kvput/kvput.c"
#undef main
#include "../../cmd/tool.c"
#include "../../cmd/tool_modeldir.c"

#define FUZZ_MODEL_DIR "fuzz_model_0123456789ab"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	tool_name = "kvput";
	/* Results and per-line complaints are the tool's business, not the
	 * fuzzer's log; libFuzzer keeps its own handle on stderr. */
	if (!freopen("/dev/null", "w", stdout))
		abort();
	stderr = fopen("/dev/null", "w");
	return 0;
}

static int names_a_file(const char *line)
{
	json_t *rec = json_loads(line, 0, NULL);
	int has = rec && json_is_object(rec) && json_object_get(rec, "file");

	json_decref(rec);
	return has;
}

static void check_request(const struct slot *s)
{
	struct kv_block_ref ref;

	if (s->req.op != KV_IO_OP_PUT || s->req.relpath != s->relpath ||
	    s->req.buf != s->payload.data || s->req.len != s->payload.len ||
	    (s->payload.data == s->payload.buf && s->payload.len > s->payload.cap))
		abort();
	if (kv_layout_block_parse(s->relpath, &ref) != 0 || strcmp(ref.hash, s->hash) ||
	    strcmp(ref.model_dir, FUZZ_MODEL_DIR) || strstr(s->relpath, ".."))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct put put = { .root = "/nonexistent", .model_dir = FUZZ_MODEL_DIR };
	struct batch b = { .put = &put, .in_name = "<fuzz>" };
	struct slot s;
	char *text = malloc(size + 1), *line, *save = NULL;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	memset(&s, 0, sizeof(s));
	/* Lines as batch_next() hands them over: blank ones skipped. */
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		b.line++;
		if (strspn(line, " \t\r") == strlen(line) || names_a_file(line))
			continue;
		if (load_line(&b, line, &s) == 0)
			check_request(&s);
	}
	payload_release(&s.payload);
	kv_io_buf_free(s.payload.buf);
	free(text);
	return 0;
}
