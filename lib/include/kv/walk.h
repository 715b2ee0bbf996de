#ifndef KV_WALK_H
#define KV_WALK_H

/*
 * A bounded-memory traversal of a cache root: getdents64 and statx
 * relative to directory fds, no symlink following, one filesystem,
 * parallel across rank dirs and top buckets.  Memory is O(threads x
 * depth), never O(files).
 */

#include <stdint.h>
#include <sys/types.h>
#include <kv/layout.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kv_walk_kind {
	KV_WALK_BLOCK,		/* a <hash>.bin file in the layout */
	KV_WALK_CONFIG,		/* a model dir's config.json */
	KV_WALK_TEMP,		/* a writer's temp file (*.tmp in a bucket) */
	KV_WALK_FOREIGN,	/* anything else: unknown name, symlink, special
				   file, a mount point of another filesystem */
	KV_WALK_DIR,		/* a bucket dir that may be empty, after its
				   contents (KV_WALK_DIRS) */
	KV_WALK_ERROR,		/* a directory that could not be read: skipped */
};

struct kv_walk_entry {
	enum kv_walk_kind kind;
	const char *path;	/* relative to the root */
	const char *name;	/* last component of path */
	int dirfd;		/* the containing dir, open during the callback */
	struct kv_block_ref ref; /* model_dir/fingerprint/rank always where the
				    path reaches them; group/hash for blocks */
	int has_rank;		/* ref.rank is meaningful */
	uint64_t size_bytes;	/* apparent size */
	uint64_t alloc_bytes;	/* st_blocks * 512 */
	int64_t atime_ns;
	int64_t mtime_ns;
	/* The later of atime and a use recorded in the root's journals
	 * (kv/lastuse.h): what eviction orders by.  atime_ns for all but
	 * blocks. */
	int64_t last_use_ns;
	uint64_t ino;
	uint32_t nlink;
	mode_t mode;
	int err;		/* KV_WALK_ERROR: -errno of the failure */
};

#define KV_WALK_DIRS	(1u << 0)	/* also report, post-order, the bucket dirs
					   the walk read empty (a <hhh> dir:
					   holding only such leaf dirs) */
#define KV_WALK_NO_STAT	(1u << 1)	/* names only: size/times left 0 */

#define KV_WALK_REMOTE_THREADS	64	/* default on a network filesystem */

struct kv_walk_opts {
	unsigned threads;	/* 0: kv_walk_default_threads(root); at most 64 */
	const char *model;	/* only this model (model dir name, or safe
				   model name matching any fingerprint); NULL: all */
	int rank;		/* only this rank; -1: all */
	unsigned flags;
	/* shard_count > 1: only the top buckets <hhh> that
	 * kv_layout_bucket_shard() gives to shard_index (the others are
	 * skipped unread), and, in shard 0 alone, what lies outside any
	 * bucket: model dirs and their config.json, foreign entries at the
	 * root and in rank dirs.  Every shard reads the root and the rank
	 * dirs, and reports their errors.  0 or 1: everything. */
	unsigned shard_index, shard_count;
};

/* Called for each entry; the walk holds a lock so calls never overlap.
 * A non-zero return stops the walk and becomes kv_walk's return. */
typedef int (*kv_walk_fn)(const struct kv_walk_entry *entry, void *arg);

/* Operations to keep in flight on the filesystem fd is on: each walk or
 * delete thread waits on one at a time, so on a network filesystem
 * (NFS, FUSE, CephFS, Lustre, GPFS, SMB...), where each is a round trip,
 * KV_WALK_REMOTE_THREADS; on a local one, where more only contend, one
 * per online CPU, at most 8. */
unsigned kv_walk_default_threads(int fd);

/* Walk root, a directory or a bucket ("s3://BUCKET[/PREFIX]": every
 * object under it, as regular files with dirfd -1, atime and mtime its
 * Last-Modified; kv(7)).  0 when done (unreadable subdirs were reported as
 * KV_WALK_ERROR entries, not failures); -errno when the root itself
 * cannot be opened or a use journal read (kv_uses_load, kv/lastuse.h;
 * named in kv_error_detail()); -EINVAL for a shard_index not below
 * shard_count or a shard_count above KV_LAYOUT_TOP_BUCKETS; or the
 * callback's non-zero return. */
int kv_walk(const char *root, const struct kv_walk_opts *opts,
	    kv_walk_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
