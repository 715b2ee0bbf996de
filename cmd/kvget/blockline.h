/*
 * One line of kvget --batch input, the block it names, parsed apart from
 * kvget's I/O: nothing is read and nothing printed, so the fuzz harness
 * (tests/fuzz/fuzz_ndjson_get.c) drives exactly the code kvget runs.
 */
#ifndef KVGET_BLOCKLINE_H
#define KVGET_BLOCKLINE_H

#include <limits.h>
#include <jansson.h>
#include <kv/kv.h>

struct block_line {
	char hash[KV_HASH_MAX_LEN + 1];	/* normalized */
	char relpath[PATH_MAX];		/* the block path under the root */
	/* For a refused line's record: the hash and path as far as known
	 * (as given when they do not parse), NULL when not. */
	const char *record_hash;
	const char *record_path;
	char error[512];
	json_t *json;			/* holds the strings above */
};

/*
 * A non-blank line: a bare hash, found in model_dir ("" for none) at the
 * rank and group given, or a kvls NDJSON block record, whose "path" is
 * used, else its "model_dir" (default model_dir), "rank", "group" (the
 * defaults given) and "hash".  0, or -1 with l->error saying why; either
 * way block_line_free after.  A bare hash line is cut at its first blank.
 */
int block_line_parse(char *text, const char *model_dir, unsigned rank, unsigned group,
		     struct block_line *l);
void block_line_free(struct block_line *l);

#endif
