/*
 * What a tier implements and what lib/tier/tier.c does for all of them
 * (chaining, counters).  kvi_* names stay out of libkv.so's exports.
 */
#ifndef KV_TIER_IMPL_H
#define KV_TIER_IMPL_H

#include <stdatomic.h>
#include <kv/tier.h>

/* kv_tier_ops.flags */
#define KVI_TIER_PUT_KEEPS	(1u << 0)	/* a batch PUT with keep is one
						   request, the block there or not */

struct kv_tier_ops {
	unsigned flags;
	int (*put)(struct kv_tier *t, const char *key, const void *buf,
		   size_t len);
	int (*get)(struct kv_tier *t, const char *key, void *buf, size_t cap,
		   size_t *len);
	int (*has)(struct kv_tier *t, const char *key);	/* NULL: size answers */
	int (*del)(struct kv_tier *t, const char *key);
	/* Fill kind, blocks, used_bytes, capacity_bytes. */
	int (*stat)(struct kv_tier *t, struct kv_tier_stat *st);
	void (*close)(struct kv_tier *t);
	/* Optional; NULL: what tier.c does without them. */
	int (*size)(struct kv_tier *t, const char *key, uint64_t *size);
	int (*get_tail)(struct kv_tier *t, const char *key, void *buf,
			size_t len);
	int (*list)(struct kv_tier *t, const struct kv_tier_list_opts *o,
		    kv_tier_list_fn fn, void *arg);
	int (*batch_stream)(struct kv_tier *t, kv_tier_next_fn next,
			    kv_tier_done_fn done, void *arg);
	/* size: as a listing gave it, UINT64_MAX: unknown. */
	int (*verify)(struct kv_tier *t, const char *key, uint64_t size);
	/* A model dir's config.json, where a tier keeps one (a cache root):
	 * its bytes (-ENOENT none; text NULL: only whether there is one),
	 * and made to hold given bytes. */
	int (*config_get)(struct kv_tier *t, const char *model_dir, char **text,
			  size_t *len);
	int (*config_put)(struct kv_tier *t, const char *model_dir, const char *text,
			  size_t len);
};

struct kv_tier {
	const struct kv_tier_ops *ops;
	struct kv_tier *lower;
	unsigned flags;		/* KV_TIER_* toward lower */
	struct kv_hits *first_hits;	/* KV_TIER_PROMOTE_SECOND_HIT */
	atomic_uint_least64_t hits, misses, puts, evictions, spills, promotions;
	kv_tier_report_fn report;	/* kv_tier_report_to */
	void *report_arg;
};

void kvi_tier_init(struct kv_tier *t, const struct kv_tier_ops *ops);

/* An implementation about to drop a block for room: spill it below if
 * the chain asks for it (kv_tier_demote's rule, the bytes at hand).  0
 * when the block may go; a refusal when no tier below took it. */
int kvi_tier_evicting(struct kv_tier *t, const char *key, const void *buf,
		      size_t len);

/* Where t's evictions spill: the chain below it, nearest first, when it
 * has KV_TIER_SPILL; else none. */
unsigned kvi_tier_spill_to(struct kv_tier *t, struct kv_tier **below);

/* Report that m's block left t, for the tier below m names or for
 * none. */
void kvi_tier_evicted(struct kv_tier *t, const struct kv_tier_demotion *m);

/* 0 if key is a layout block path, the only keys a file tier takes (they
 * cannot leave the root or name a temp); -KV_EBADPATH otherwise. */
int kvi_tier_file_check_key(const char *key);

/* Equal-slot store with a hash table and LRU, in host memory or (dev
 * set) in device memory moved with kv_dma_copy; tier_mem and tier_gpu. */
struct kvi_tier_slots_opts {
	const char *kind;
	size_t slot_bytes;
	unsigned slots;
	struct kv_dma *dma;	/* pin host slots for it, or own dev slots */
	int device_memory;	/* slots in dma's device memory */
	void *mem;		/* host slots carved from here */
};

int kvi_tier_slots_open(const struct kvi_tier_slots_opts *o, struct kv_tier **out);

#endif
