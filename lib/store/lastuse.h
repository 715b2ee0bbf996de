/* The use journals' reading side inside libkv (lastuse.c): journal text
 * taken in pieces of any size, so that no journal is ever held whole. */
#ifndef KV_STORE_LASTUSE_H
#define KV_STORE_LASTUSE_H

#include <stddef.h>
#include <stdint.h>
#include <kv/lastuse.h>

/* One journal being read: a line split between two pieces is joined, a
 * line over KV_USES_LINE_MAX is skipped up to its newline without being
 * held, and a last line without its newline is ignored.  Memory is the
 * paths kept in u, never the journal's bytes. */
struct kvi_uses_feed {
	struct kv_uses *u;
	int (*keep)(const char *relpath, void *arg);	/* NULL: every path */
	void *arg;
	int64_t latest_ns;	/* a use later than this is a bad line */
	uint64_t lines, bad;	/* complete lines seen, and those skipped */
	size_t held;		/* bytes of an unfinished line in line[] */
	int overlong;		/* the unfinished line is being skipped */
	char line[KV_USES_LINE_MAX];
};

void kvi_uses_feed_init(struct kvi_uses_feed *f, struct kv_uses *u,
			int (*keep)(const char *relpath, void *arg), void *arg);
/* Merge the next piece into f->u: 0 or -ENOMEM. */
int kvi_uses_feed(struct kvi_uses_feed *f, const char *text, size_t len);
/* Forget an unfinished line: the text starts over (a download retried). */
void kvi_uses_feed_restart(struct kvi_uses_feed *f);

/* A bucket's journal object read into u as it downloads: 0, -ENOENT when
 * it is not there, -ENOMEM, or the request's -errno with the key in
 * kv_error_detail().  lines and bad (may be NULL) get its counts. */
struct kvi_s3;
int kvi_uses_read_object(struct kvi_s3 *s, const char *key, struct kv_uses *u,
			 int (*keep)(const char *relpath, void *arg), void *arg,
			 uint64_t *lines, uint64_t *bad);

#endif
