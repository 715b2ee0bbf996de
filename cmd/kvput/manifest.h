/*
 * One line of a kvput --batch manifest: a block record (tool_record.h)
 * with kvput's own "file" or "data_b64".  Parsed apart from kvput's I/O,
 * so the fuzz harness (tests/fuzz/fuzz_ndjson.c) drives exactly the code
 * kvput runs.
 */
#ifndef KVPUT_MANIFEST_H
#define KVPUT_MANIFEST_H

#include <stddef.h>
#include "../tool_record.h"

struct manifest_line {
	struct tool_record rec;
	const char *file;		/* exactly one of file and data_b64 */
	const char *data_b64;
};

/* Parse one non-blank line: 0, or -1 with m->rec.error saying why.
 * Either way tool_record_free(&m->rec) after. */
int manifest_line_parse(char *text, const struct tool_record_opts *o,
			struct manifest_line *m);

/* Base64 text into *buf, an aligned buffer of *cap bytes replaced by a
 * bigger one as needed; *len gets the bytes.  -EINVAL unless it is clean
 * base64, -ENOMEM. */
int manifest_b64_decode(const char *text, void **buf, size_t *cap, size_t *len);

#endif
