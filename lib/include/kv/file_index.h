/*
 * The blocks of a bounded file tier in exact LRU order by last use: a
 * hash index on the block path and libkv's LRU order (kv/lru.h) over one
 * array of entries, each with its size and a "moving" mark for a block
 * that is on its way out.  The bounded file tier
 * (kv_tier_file_open_bounded) keeps one; kvoffd tells it what its
 * workers move (kv_tier_bounded_*).
 * Not locked: callers serialise.
 */
#ifndef KV_FILE_INDEX_H
#define KV_FILE_INDEX_H

#include <stdint.h>
#include <kv/lru.h>
#include <kv/walk.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_FILE_INDEX_NONE	KV_LRU_NONE	/* no entry: not found, end */

struct kv_file_index;

int kv_file_index_new(struct kv_file_index **out);
void kv_file_index_free(struct kv_file_index *x);

/* Index every block under root (a kv_walk with opts; NULL: all of it),
 * least recently used first by last use (kv/lastuse.h), so that the
 * last found is the newest.  0, -ENOMEM or kv_walk's error. */
int kv_file_index_scan(struct kv_file_index *x, const char *root,
		       const struct kv_walk_opts *opts);

/* Add path, or refresh its size, as the most recently used.  0 or
 * -ENOMEM (then the index is as it was). */
int kv_file_index_put(struct kv_file_index *x, const char *path, uint64_t size_bytes);
uint32_t kv_file_index_find(const struct kv_file_index *x, const char *path);
/* Most recently used: a hit. */
void kv_file_index_touch(struct kv_file_index *x, uint32_t id);
/* Out of the index; id may be reused by the next put. */
void kv_file_index_remove(struct kv_file_index *x, uint32_t id);

const char *kv_file_index_path(const struct kv_file_index *x, uint32_t id);
uint64_t kv_file_index_size(const struct kv_file_index *x, uint32_t id);
/* A block on its way out (a demotion in flight): its bytes count in
 * moving_bytes until it is removed or unmarked. */
int kv_file_index_moving(const struct kv_file_index *x, uint32_t id);
void kv_file_index_set_moving(struct kv_file_index *x, uint32_t id, int moving);

/* The least recently used entry, then toward the most recent. */
uint32_t kv_file_index_oldest(const struct kv_file_index *x);
uint32_t kv_file_index_newer(const struct kv_file_index *x, uint32_t id);

struct kv_file_index_usage {
	uint64_t blocks;
	uint64_t bytes;
	uint64_t moving_bytes;	/* of blocks marked moving */
};

void kv_file_index_usage(const struct kv_file_index *x, struct kv_file_index_usage *u);

#ifdef __cplusplus
}
#endif

#endif
