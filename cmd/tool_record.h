/*
 * The NDJSON block record that kvls writes and kvput --batch, kvget
 * --batch and kvevict --stdin read, with one set of rules: a record names
 * its block by "path" or by "model_dir", "rank", "group" and "hash" (the
 * program's --model-dir, --rank and --group fill in what it leaves out);
 * a record that gives both must agree with itself; a duplicate key
 * refuses the line; keys this module does not know are left for the
 * program or ignored, so one program's output feeds another's input.
 *
 * Parsing opens nothing and prints nothing, so the fuzz harnesses
 * (tests/fuzz/fuzz_ndjson*.c) drive exactly the code the programs run.
 * Front-end glue, not library: it needs only jansson and <kv/kv.h>.
 */
#ifndef KV_TOOL_RECORD_H
#define KV_TOOL_RECORD_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <kv/kv.h>

/* The longest line a record may take, unless it carries a payload:
 * far above any valid one (a path of PATH_MAX, a hash, a few fields). */
#define TOOL_LINE_MAX		(64u * 1024)

/* What a line that is not a JSON object is taken for. */
enum tool_record_bare {
	TOOL_RECORD_BARE_NONE,	/* nothing: it is invalid JSON */
	TOOL_RECORD_BARE_HASH,	/* a hash, cut at its first blank */
	TOOL_RECORD_BARE_PATH,	/* a block path, up to its line end */
};

struct tool_record_opts {
	const char *model_dir;	/* --model-dir / --config's; NULL or "": none */
	unsigned rank, group;	/* --rank, --group */
	int model_opts;		/* the program has --model-dir and --config */
	enum tool_record_bare bare;
	/* An absolute path is taken when it lies under root as given or
	 * as resolved (root_real); with root NULL it is refused. */
	const char *root;
	const char *root_real;
	size_t line_max;	/* a longer line is refused; 0: TOOL_LINE_MAX */
};

struct tool_record {
	struct kv_block_ref ref;	/* the block named, once parsed */
	char relpath[PATH_MAX];		/* its path under the root */
	/* For a refused line's result record: the hash and path as far as
	 * known (as given when they do not parse), NULL when not. */
	const char *record_hash;
	const char *record_path;
	char error[512];
	json_t *json;			/* holds the strings above */
};

/* Parse one non-blank line: 0, or -1 with r->error saying why.  Either
 * way tool_record_free after. */
int tool_record_parse(char *text, const struct tool_record_opts *o,
		      struct tool_record *r);
void tool_record_free(struct tool_record *r);

/* A program's own string key of a parsed record: 0 and *out (NULL when
 * absent), or -1 when the key holds something else. */
int tool_record_string(const struct tool_record *r, const char *key,
		       const char **out);

/* Refuse a parsed record for a program's own reason: -1, r->error set. */
int tool_record_refuse(struct tool_record *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Bytes a formatted record may need. */
#define TOOL_RECORD_MAX		16384

/* A block as a tier lists it, as a compact JSON record into buf
 * (TOOL_RECORD_MAX bytes) with no newline; returns the end.  Keys stay
 * sorted whichever of e's fields are set.  Written by hand, byte for byte what
 * jansson writes with JSON_SORT_KEYS | JSON_ENSURE_ASCII: jansson per
 * record would cost more than kvls's walk itself. */
char *tool_record_format(char *buf, const struct kv_tier_entry *e);

/* A JSON string the same way; needs 6 * strlen(s) + 2 bytes at p. */
char *tool_json_str(char *p, const char *s);

#endif
