#ifndef KV_EVICT_H
#define KV_EVICT_H

/*
 * LRU eviction of the file tier with memory bounded independently of the
 * number of files: a scan walk builds a last-use histogram (kv/lastuse.h:
 * atime, or a later recorded use) of the eviction
 * candidates, narrower histograms over the boundary bucket refine the
 * cut-off when needed, and a second walk deletes every candidate older
 * than the cut-off plus exactly as many of the boundary bucket's oldest
 * (kept in a bounded heap) as the target needs.  Each file is re-checked
 * with fstatat() just before unlinkat(), so a block read meanwhile stays.
 * Shards split one root's buckets among runs on several nodes that agree
 * on the cut-off through state files under the root.  See kvevict(8).
 */

#include <stddef.h>
#include <stdint.h>
#include <kv/layout.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_EVICT_LOCK_NAME	".kvevict.lock"	/* at the root */
#define KV_EVICT_STATE_DIR	".kvevict"	/* at the root: shards' state */
#define KV_EVICT_MAX_QUOTAS	64
#define KV_EVICT_MAX_SHARDS	KV_LAYOUT_TOP_BUCKETS

/* A per-model byte budget: model is a model dir name or a model name
 * ('/' allowed) matching every fingerprint of it. */
struct kv_evict_quota {
	const char *model;
	uint64_t max_bytes;
	uint64_t low_bytes;
};

/* A block that was (or under dry_run would be) removed. */
struct kv_evict_block {
	const char *path;	/* relative to the root */
	const struct kv_block_ref *ref;
	uint64_t size_bytes;
	uint64_t alloc_bytes;
	int64_t atime_ns;
	int64_t last_use_ns;	/* what it was ordered by (kv/lastuse.h) */
};

typedef void (*kv_evict_removed_fn)(const struct kv_evict_block *block, void *arg);

struct kv_evict_opts {
	/* Filesystem use (statvfs, as df(1) counts it): act at or above
	 * high_pct, free down to low_pct.  high_pct < 0: off. */
	double high_pct, low_pct;
	/* Allocated bytes of the cache's files under the root: act above
	 * max_bytes, free down to low_bytes.  max_bytes 0: off. */
	uint64_t max_bytes, low_bytes;
	const struct kv_evict_quota *quotas;
	unsigned nquotas;
	uint64_t hot_ns;		/* never touch a block read/written this recently */
	uint64_t orphans_after_ns;	/* temp files older than this (mtime) go */
	uint64_t dir_grace_ns;		/* empty bucket dirs older than this go */
	int dry_run;
	unsigned threads;		/* walk and delete threads; 0: one per
					   CPU, at most 8 */
	/* Memory the scan may spend keeping victims so that it can delete
	 * them without a second walk; 0: 32 MiB.  Beyond it the round takes
	 * the histogram path (a second walk, O(1) memory). */
	size_t scan_heap_bytes;
	kv_evict_removed_fn removed;	/* optional, per removed block */
	/* Optional, called once just before the first unlink of a run, after
	 * the scan decided what goes (tests use it to race a reader). */
	void (*before_first_unlink)(void *arg);
	void *arg;			/* for all callbacks */
	/* Sharded eviction: shard_count >= 1 runs (one per node, up to
	 * KV_EVICT_MAX_SHARDS) split the root's top buckets
	 * (kv_layout_bucket_shard), each walking only its own, and agree on
	 * one LRU cut-off through state files in <root>/.kvevict/ (kv(7)):
	 * this run is shard_index, frees its share of what the targets ask,
	 * and waits at most shard_wait_ns for the others' state, freeing
	 * no more than its share without it.  0: not sharded. */
	unsigned shard_index, shard_count;
	uint64_t shard_wait_ns;
	/* Optional: what a sharded run has to say on the way (a shard
	 * missing, a state file ignored and why). */
	void (*notice)(const char *text, void *arg);
	/* Optional: called every 64 entries the walks see, with the
	 * entries walked and blocks deleted so far in this run (a
	 * program's progress line). */
	void (*progress)(uint64_t walked, uint64_t deleted, void *arg);
};

struct kv_evict_report {
	uint64_t files_scanned, bytes_scanned;	/* blocks seen by the scans */
	uint64_t files_hot;			/* blocks inside the hot window */
	uint64_t files_deleted, bytes_deleted;	/* bytes: allocated */
	uint64_t skipped_hot;		/* went hot between scan and unlink */
	uint64_t skipped_other;		/* vanished, replaced, or unlink failed */
	uint64_t orphans_removed, orphan_bytes_removed;
	uint64_t dirs_removed;
	uint64_t dirs_unreadable;	/* KV_WALK_ERROR entries */
	uint64_t cache_bytes_before, cache_bytes_after;
	double use_before_pct, use_after_pct;
	uint64_t bytes_needed;		/* what the targets asked to free */
	int target_reached;		/* every target met after the run */
	unsigned walks;			/* full or model walks performed */
	int64_t cutoff_atime_ns;	/* newest last use deleted, 0 if none */
	int64_t elapsed_ns;
	/* Sharded runs (the counts above are then this shard's): the round
	 * joined, in seconds since the epoch, and how many shards' state
	 * the last stage merged, this one's included. */
	int64_t shard_round;
	unsigned shards_merged;
};

/* Filesystem use of path in percent, as df(1): used / (used + available
 * to unprivileged users), used = blocks - free. */
int kv_evict_fs_use(const char *path, double *use_pct);

/* Open and flock "<root>/.kvevict.lock" (0600, this user's: see
 * kv_lock_beneath); *fd holds the lock until closed.  -EWOULDBLOCK when
 * another still holds it after wait_ns (0: at once), its holder in
 * kv_error_detail(). */
int kv_evict_lock(const char *root, int64_t wait_ns, int *fd);

/* The lock of shard index of a sharded run: a shared flock on
 * "<root>/.kvevict.lock" (so that an unsharded run and shards exclude
 * each other, and shards do not) and an exclusive one on
 * "<root>/.kvevict/lock.<index>"; fd[0] and fd[1] hold them until
 * closed.  -EWOULDBLOCK when another still holds either after wait_ns. */
int kv_evict_lock_shard(const char *root, unsigned index, int64_t wait_ns, int fd[2]);

/* The lock of a bucket root (s3://), where kv_evict_lock and
 * kv_evict_lock_shard lock a filesystem's: the object
 * "<root>//.kvevict.lock" for an unsharded run (count 0), or
 * "<root>//.kvevict/lock.<index>" for shard index of count, made only
 * where absent and naming its holder; the two kinds exclude each other,
 * shards do not.  A thread of the holder rewrites it every 15s; one
 * the server's clock says was not for 60s (its holder died) is taken
 * over.  *out holds it until kv_evict_unlock_bucket.  -EWOULDBLOCK when
 * another still holds it after wait_ns (0: at once), its holder in
 * kv_error_detail(); the bucket's errors, as kv_tier_s3_open's. */
struct kv_evict_bucket_lock;
int kv_evict_lock_bucket(const char *root, unsigned index, unsigned count, int64_t wait_ns,
			 struct kv_evict_bucket_lock **out);

/* Give a bucket's lock up: the object removed where it is still ours. */
void kv_evict_unlock_bucket(struct kv_evict_bucket_lock *lock);

/* Remove orphans and empty dirs, then evict by the thresholds, budget
 * and quotas in opts; fills report.  -EINVAL when a low target is above
 * its high one or the shard is out of range; -errno when the root (or,
 * sharded, its state dir) cannot be opened or walked. */
int kv_evict_run(const char *root, const struct kv_evict_opts *opts,
		 struct kv_evict_report *report);

/* Remove one block named by relpath (relative to the root open at
 * rootfd) with the same safety rules as kv_evict_run: it must parse as a
 * layout block path, every component is opened with O_NOFOLLOW on the
 * root's filesystem, and it must be a regular file outside the hot
 * window.  1 removed, 0 skipped (counted in report), -errno failure. */
int kv_evict_path(int rootfd, const char *relpath, const struct kv_evict_opts *opts,
		  struct kv_evict_report *report);

#ifdef __cplusplus
}
#endif

#endif
