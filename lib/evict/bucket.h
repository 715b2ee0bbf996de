/*
 * Deleting blocks from a bucket root (bucket.c): queued, looked at again
 * and sent as DeleteObjects requests of up to 1,000 keys, several in
 * flight.  A block's path names two keys, vLLM's "PREFIX//path" and the
 * single-slash form, one block whose last use is the later of the two.
 * Just before the delete each key gets a HEAD (the single-slash one only
 * where the root's top level has that form), as a file gets an fstatat
 * before its unlink: a block with a key written within the hot window
 * keeps both, and of the others only the keys found are deleted.
 */
#ifndef KV_EVICT_BUCKET_H
#define KV_EVICT_BUCKET_H

#include <stdint.h>

struct kvi_bucket_del;

enum kvi_bucket_fate {
	KVI_BUCKET_DELETED,	/* every key found is deleted */
	KVI_BUCKET_HOT,		/* a key is within the hot window: all kept */
	KVI_BUCKET_FAILED,	/* gone already, or a key not deleted (its code
				   in kv_error_detail()) */
};

/* What became of a queued block: size as queued, its last use over its
 * keys, the bytes of the keys deleted (some where one of two failed). */
typedef void (*kvi_bucket_deleted_fn)(const char *path, uint64_t size, int64_t last_use_ns,
				      uint64_t freed_bytes, enum kvi_bucket_fate fate, void *arg);

/* hot_ns: a key whose Last-Modified is within this of the delete is
 * hot (0: none). */
int kvi_bucket_del_open(const char *root, uint64_t hot_ns, kvi_bucket_deleted_fn fn, void *arg,
			struct kvi_bucket_del **out);
/* Queue a block; a full queue is sent first.  -errno only when sending
 * failed as a whole (the bucket unreachable). */
int kvi_bucket_del_add(struct kvi_bucket_del *d, const char *path, uint64_t size,
		       int64_t last_use_ns);
/* Send what is queued; every block gets its fn before this returns. */
int kvi_bucket_del_flush(struct kvi_bucket_del *d);
void kvi_bucket_del_close(struct kvi_bucket_del *d);

#endif
