#ifndef KV_LRU_H
#define KV_LRU_H

/*
 * The one LRU order of libkv: a doubly linked list over items that the
 * caller numbers 0..n-1 and keeps in its own arrays, the links in an
 * array of struct kv_lru_link beside them (an item's link may also
 * carry a free list while the item is in no order).  The slot store
 * keeps one per size class; the file tier index (kv/file_index.h) one
 * of its blocks by last use.  Not locked: callers serialise.
 */

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_LRU_NONE	UINT32_MAX	/* no item: an end of the list */

struct kv_lru_link {
	uint32_t older, newer;
};

struct kv_lru {
	uint32_t oldest, newest;	/* KV_LRU_NONE when empty */
};

/* An empty order. */
void kv_lru_init(struct kv_lru *l);
/* Make id, which is in no order, the newest of l. */
void kv_lru_push(struct kv_lru *l, struct kv_lru_link *links, uint32_t id);
/* Take id out of l; its link is then NONE both ways. */
void kv_lru_remove(struct kv_lru *l, struct kv_lru_link *links, uint32_t id);

#ifdef __cplusplus
}
#endif

#endif
