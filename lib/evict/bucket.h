/*
 * Deleting blocks from a bucket root (bucket.c): queued and sent as
 * DeleteObjects requests of up to 1,000 keys, several in flight.  A
 * block's path names two keys, vLLM's "PREFIX//path" and the
 * single-slash form, and both are deleted (S3 answers a delete of a key
 * that is not there as done).
 */
#ifndef KV_EVICT_BUCKET_H
#define KV_EVICT_BUCKET_H

#include <stdint.h>

struct kvi_bucket_del;

/* What became of a queued block: ok 1 deleted, 0 refused (its code in
 * kv_error_detail()). */
typedef void (*kvi_bucket_deleted_fn)(const char *path, uint64_t size, int64_t last_use_ns,
				      int ok, void *arg);

int kvi_bucket_del_open(const char *root, kvi_bucket_deleted_fn fn, void *arg,
			struct kvi_bucket_del **out);
/* Queue a block; a full queue is sent first.  -errno only when sending
 * failed as a whole (the bucket unreachable). */
int kvi_bucket_del_add(struct kvi_bucket_del *d, const char *path, uint64_t size,
		       int64_t last_use_ns);
/* Send what is queued; every block gets its fn before this returns. */
int kvi_bucket_del_flush(struct kvi_bucket_del *d);
void kvi_bucket_del_close(struct kvi_bucket_del *d);

#endif
