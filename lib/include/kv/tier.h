#ifndef KV_TIER_H
#define KV_TIER_H

/*
 * One interface over the places a block lives: CPU memory, a cache root
 * on disk, GPU memory.  Keys are block paths in the on-disk layout
 * (kv_layout_block_path), so a block keeps its name in every tier.
 * Buffers passed to put/get are host memory in every tier.
 *
 * Tiers chain: kv_tier_chain(upper, lower, flags) lets upper spill the
 * blocks it evicts into lower and, on a miss, read through lower and
 * promote what it finds.  A tier's calls are thread-safe.
 */

#include <stddef.h>
#include <stdint.h>
#include <kv/io.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kv_tier;
struct kv_dma;

#define KV_TIER_SPILL		(1u << 0) /* evicted blocks are put below */
#define KV_TIER_PROMOTE		(1u << 1) /* a hit below is put here too */
#define KV_TIER_WRITE_THROUGH	(1u << 2) /* puts also go below */

struct kv_tier_stat {
	const char *kind;	/* "mem", "file" or "gpu" */
	uint64_t blocks;	/* held now; file: not counted (0) */
	uint64_t used_bytes;	/* file: of the whole filesystem */
	uint64_t capacity_bytes;
	uint64_t hits;		/* gets answered by this tier */
	uint64_t misses;	/* gets this tier could not answer itself */
	uint64_t puts;
	uint64_t evictions;	/* blocks dropped for room */
	uint64_t spills;	/* evictions written below */
	uint64_t promotions;	/* blocks copied up from below */
};

/* Store a block, replacing any under the same key.  -EFBIG if it is
 * larger than the tier's slots; when a spill needed for room fails, the
 * lower tier's error, and nothing is evicted. */
int kv_tier_put(struct kv_tier *t, const char *key, const void *buf,
		size_t len);

/* Read a block into buf (cap bytes), through the chain; *len gets its
 * size.  -ENOENT if no tier has it, -EFBIG if cap is too small. */
int kv_tier_get(struct kv_tier *t, const char *key, void *buf, size_t cap,
		size_t *len);

/* 0 if this tier or one below has the block, else -ENOENT. */
int kv_tier_has(struct kv_tier *t, const char *key);

/* Remove the block from this tier and every tier below; -ENOENT if
 * none had it. */
int kv_tier_del(struct kv_tier *t, const char *key);

/* This tier's counters (not its chain's). */
int kv_tier_stat(struct kv_tier *t, struct kv_tier_stat *st);

/* Put lower below upper with KV_TIER_* flags; lower may have its own
 * lower.  -ELOOP if that would make a cycle. */
int kv_tier_chain(struct kv_tier *upper, struct kv_tier *lower,
		  unsigned flags);

/* Close one tier (not the ones below it). */
void kv_tier_close(struct kv_tier *t);

struct kv_tier_mem_opts {
	size_t slot_bytes;	/* the largest block; rounded up to 4096 */
	unsigned slots;
	struct kv_dma *dma;	/* pin the slots for this device; NULL: not */
	void *mem;		/* carve this (slots * slot_bytes, 4096-aligned
				   slot_bytes) instead of allocating */
};

/* CPU memory: a hash table over equal slots, LRU eviction. */
int kv_tier_mem_open(const struct kv_tier_mem_opts *opts, struct kv_tier **out);

/* A cache root through the io engine; keys must be layout block paths
 * (-KV_EBADPATH otherwise). */
int kv_tier_file_open(const char *root, const struct kv_io_opts *opts,
		      struct kv_tier **out);

struct kv_tier_gpu_opts {
	size_t slot_bytes;	/* the largest block */
	unsigned slots;
};

/* Device memory of a CUDA kv_dma handle, LRU eviction; -KV_ENODEV on
 * the CPU device (no CUDA build or no GPU). */
int kv_tier_gpu_open(struct kv_dma *dma, const struct kv_tier_gpu_opts *opts,
		     struct kv_tier **out);

#ifdef __cplusplus
}
#endif

#endif
