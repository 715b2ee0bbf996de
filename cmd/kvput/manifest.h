/*
 * One line of a kvput --batch manifest, parsed apart from kvput's I/O:
 * no file is opened and nothing is printed, so the fuzz harness
 * (tests/fuzz/fuzz_ndjson.c) drives exactly the code kvput runs.
 */
#ifndef KVPUT_MANIFEST_H
#define KVPUT_MANIFEST_H

#include <limits.h>
#include <stddef.h>
#include <jansson.h>
#include <kv/kv.h>

struct manifest_line {
	char hash[KV_HASH_MAX_LEN + 1];	/* normalized; "" until known */
	char relpath[PATH_MAX];		/* the block path; "" until known */
	unsigned rank, group;
	const char *file;		/* exactly one of file and data_b64 */
	const char *data_b64;
	/* For a refused line's record: the hash and path as far as known
	 * (the hash as given when it is not hex), NULL when not. */
	const char *record_hash;
	const char *record_path;
	char error[512];
	json_t *json;			/* holds the strings above */
};

/* Parse one line for model_dir with the --rank and --group defaults: 0,
 * or -1 with m->error saying why.  Either way manifest_line_free after. */
int manifest_line_parse(const char *text, const char *model_dir, unsigned rank,
			unsigned group, struct manifest_line *m);
void manifest_line_free(struct manifest_line *m);

/* Base64 text into *buf, an aligned buffer of *cap bytes replaced by a
 * bigger one as needed; *len gets the bytes.  -EINVAL unless it is clean
 * base64, -ENOMEM. */
int manifest_b64_decode(const char *text, void **buf, size_t *cap, size_t *len);

#endif
