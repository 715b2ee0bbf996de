#ifndef KV_XFER_H
#define KV_XFER_H

/*
 * Transfers a caller may not wait for: a model server's scheduler hands
 * over a job (many blocks between its host memory and a tier), goes on,
 * and later polls for the jobs that finished.  Each job runs whole on
 * one of the engine's threads, through that thread's own tier handle, as
 * one kv_tier_batch_stream (a file tier keeps its queue depth in flight,
 * a bucket its requests, the daemon's batches a few round trips).  Loads
 * and lookups go before stores, and stores never take the last thread.
 *
 * A load is checked: a block whose size is not the one asked for, or
 * whose checksum does not match, fails (KV_ESHORT, KV_ECHECKSUM), its
 * destination is zeroed, and with KV_XFER_REMOVE_BAD the block is
 * removed.  A load or a touch is a use (kv_use_record); a store keeps a
 * block already there.  See libkv(3).
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kv_tier;
struct kv_use_recorder;
struct kv_events;
struct kv_xfer;

enum kv_xfer_op {
	KV_XFER_STORE,		/* bufs[i] (lens[i] bytes) into the tier */
	KV_XFER_LOAD,		/* the tier's block into bufs[i]: exactly lens[i] bytes */
	KV_XFER_HAS,		/* status[i] 0 present, -ENOENT absent */
	KV_XFER_TOUCH,		/* record a use of each block (no data) */
};

/* A job: the caller's memory, untouched by the caller from submit until
 * kv_xfer_poll hands it back. */
struct kv_xfer_job {
	uint64_t id;		/* the caller's */
	enum kv_xfer_op op;
	size_t n;
	const char *const *keys;	/* layout block paths */
	void *const *bufs;		/* STORE, LOAD */
	const size_t *lens;		/* STORE, LOAD */
	int *status;		/* out: 0 or -errno / -KV_E* per block */
	size_t failed;		/* out: how many status[i] are not 0 */
	uint64_t bytes;		/* out: bytes moved (a store kept: 0) */
	int64_t start_ns, end_ns;	/* out: kv_monotonic_ns() as it ran */
	struct kv_xfer_job *next;	/* the engine's */
};

#define KV_XFER_REMOVE_BAD	(1u << 0) /* a load that finds a block of the
					     wrong size or checksum removes it */

struct kv_xfer_opts {
	unsigned flags;			/* KV_XFER_* */
	struct kv_use_recorder *uses;	/* loads and touches recorded here;
					   NULL: not recorded */
	/* Eviction before a store passes it: the blocks under root (a
	 * cache root or a bucket) kept at or under max_bytes by kvevict's
	 * LRU (kv_evict_run, freeing down to low_bytes).  0: no bound. */
	const char *root;
	uint64_t max_bytes, low_bytes;
	/* Announce what stores add and eviction removes, medium and
	 * rootfd's config.json as kv_events_publish_block takes them
	 * (rootfd -1 on a bucket: kv_events_name_model_dir first).  NULL:
	 * no events. */
	struct kv_events *events;
	const char *medium;
	int rootfd;
};

/* Start one thread per tier handle (n of them, each the thread's alone;
 * the caller closes them after kv_xfer_close). */
int kv_xfer_open(struct kv_tier *const *tiers, unsigned n, const struct kv_xfer_opts *opts,
		 struct kv_xfer **out);
/* Queue a job; never blocks.  -EINVAL for a malformed job. */
int kv_xfer_submit(struct kv_xfer *x, struct kv_xfer_job *job);
/* Up to max finished jobs, oldest first; never blocks. */
size_t kv_xfer_poll(struct kv_xfer *x, struct kv_xfer_job **done, size_t max);
/* Jobs submitted and not yet handed back by kv_xfer_poll. */
size_t kv_xfer_pending(struct kv_xfer *x);
/* Wait until every submitted job has finished (they stay to be polled). */
void kv_xfer_drain(struct kv_xfer *x);

struct kv_xfer_stats {
	uint64_t evictions, evicted_bytes;	/* by max_bytes */
	uint64_t eviction_errors;
	uint64_t removed_bad;			/* KV_XFER_REMOVE_BAD */
	uint64_t uses_failed;			/* uses recorded nowhere */
	uint64_t used_bytes;			/* under root, as last measured
						   plus stores since; 0 unknown */
};
void kv_xfer_stats(struct kv_xfer *x, struct kv_xfer_stats *out);

/* Drain, stop the threads, free.  x may be NULL. */
void kv_xfer_close(struct kv_xfer *x);

#ifdef __cplusplus
}
#endif

#endif
