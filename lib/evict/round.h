/*
 * The rounds of sharded eviction (kv(7) "Eviction shards"): N kvevict
 * instances, one per node, agree through files in <root>/.kvevict/ on a
 * round and its reference time, publish what each scanned of its share
 * of the buckets, and merge what the others published, waiting a
 * bounded time for each; no other channel between them.
 */
#ifndef KV_EVICT_ROUND_H
#define KV_EVICT_ROUND_H

#include <stdint.h>
#include <sys/types.h>
#include "evict/shard_state.h"

struct kvi_round;

struct kvi_round_opts {
	unsigned index, count;
	int dry;
	/* How long to wait for the others' state, and how long after a
	 * round opened a shard may still join it. */
	uint64_t wait_ns;
	void (*notice)(const char *text, void *arg);	/* optional */
	void *arg;
	/* An s3:// root: the state lives under its prefix, not below the
	 * rootfd kvi_round_join is given (-1). */
	const char *bucket_root;
};

/* One stage of a round, merged over the shards present. */
struct kvi_round_merge {
	uint64_t *count, *bytes;	/* the caller's, KVI_SHARD_BUCKETS each,
					   oldest first; added to */
	uint64_t cache_bytes, cand_bytes;
	uint64_t fs_used_bytes, fs_total_bytes;	/* the largest reading */
	unsigned present;		/* shards merged, this one included */
	unsigned share_buckets;		/* top buckets they own, of 4096 */
};

/* Open (making it if missing) the state dir below rootfd into *fd:
 * no symlink, never outside the root. */
int kvi_round_dir_open(int rootfd, int *fd);

/* Join the newest round opened within opts->wait_ns before now that
 * this shard has no state in yet, or open one; then, after a settling
 * second, take the newest such round again, so that shards that opened
 * rounds at once end in one. */
int kvi_round_join(int rootfd, const struct kvi_round_opts *opts,
		   struct kvi_round **out);

/* The round's id and reference time, in seconds since the epoch. */
int64_t kvi_round_id(const struct kvi_round *r);

/* Publish mine (its identity filled in here) with the histogram count
 * and bytes for its stage, then merge into m the state of the other
 * shards of the stage as it arrives, for at most wait_ns: at stage 0
 * every shard is awaited, later only those present at the stage before.
 * Damaged, hostile or mismatched files are ignored, with a notice. */
int kvi_round_exchange(struct kvi_round *r, struct kvi_shard_state *mine,
		       const uint64_t *count, const uint64_t *bytes,
		       struct kvi_round_merge *m);

/* Remove the state of stale rounds, and free r. */
void kvi_round_leave(struct kvi_round *r);

#endif
