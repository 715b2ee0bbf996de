/* kv_walk's bucket half (walk_s3.c). */
#ifndef KV_STORE_WALK_S3_H
#define KV_STORE_WALK_S3_H

#include <kv/walk.h>

/* kv_walk for an "s3://" root: every object under it, as entries whose
 * dirfd is -1; KV_WALK_DIRS has nothing to add.  -errno (-KV_ENOBUCKET,
 * -EACCES...) when the bucket cannot be reached or listed. */
int kvi_walk_s3(const char *root, const struct kv_walk_opts *opts, kv_walk_fn fn, void *arg);

#endif
