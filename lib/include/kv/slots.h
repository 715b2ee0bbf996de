/*
 * The slot store: a pool of fixed-size slots in size classes, a key
 * index over them and an LRU order per class.  It keeps the geometry
 * (where a slot lies in the pool, its capacity, the bytes it holds) and
 * never the bytes themselves; the memory tier and kvoffd own the pool,
 * the copies and whatever else they track per slot, in arrays indexed
 * by slot id.  Not locked: callers serialise.
 *
 * A slot's life: kv_slots_alloc gives it a key, kv_slots_insert makes
 * it findable, kv_slots_touch puts it in (or moves it to the front of)
 * its class's LRU, kv_slots_remove takes it out of both, and
 * kv_slots_release returns it to the free list.
 */
#ifndef KV_SLOTS_H
#define KV_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_SLOT_NONE	UINT32_MAX	/* no slot: not found, end of a list */

struct kv_slots;

/* count slots of slot_bytes each. */
struct kv_slots_class {
	uint64_t slot_bytes;
	uint32_t count;
};

/* Classes in increasing slot_bytes, laid out one after the other in one
 * pool; slot ids run through them in order.  Slot offsets are sums of
 * slot_bytes, so sizes that are multiples of an alignment keep every
 * slot aligned. */
int kv_slots_new(const struct kv_slots_class *classes, unsigned nclasses,
		  struct kv_slots **out);
void kv_slots_free(struct kv_slots *s);

/* Geometry: fixed by kv_slots_new, so safe to read from any thread. */
uint32_t kv_slots_count(const struct kv_slots *s);
uint64_t kv_slots_pool_bytes(const struct kv_slots *s);
uint64_t kv_slots_offset(const struct kv_slots *s, uint32_t id);
uint64_t kv_slots_capacity(const struct kv_slots *s, uint32_t id);
unsigned kv_slots_class_of(const struct kv_slots *s, uint32_t id);

/* The smallest class whose slots hold len bytes, or -EFBIG. */
int kv_slots_class(const struct kv_slots *s, uint64_t len);
uint32_t kv_slots_nfree(const struct kv_slots *s, unsigned cls);

/* A free slot of the class for len, holding len bytes under key (not
 * yet findable).  -EFBIG: no class holds len; -ENOSPC: that class has no
 * free slot (evict its oldest and retry). */
int kv_slots_alloc(struct kv_slots *s, uint64_t len, const char *key,
		    uint32_t *id);
/* Back to the free list, out of the index and LRU first if need be. */
void kv_slots_release(struct kv_slots *s, uint32_t id);

const char *kv_slots_key(const struct kv_slots *s, uint32_t id);
uint64_t kv_slots_len(const struct kv_slots *s, uint32_t id);
void kv_slots_set_len(struct kv_slots *s, uint32_t id, uint64_t len);

/* Make id findable by its key, which no other slot in the index has. */
void kv_slots_insert(struct kv_slots *s, uint32_t id);
uint32_t kv_slots_find(const struct kv_slots *s, const char *key);
int kv_slots_indexed(const struct kv_slots *s, uint32_t id);
/* Out of the index and the LRU; the slot keeps its key until released. */
void kv_slots_remove(struct kv_slots *s, uint32_t id);

/* Most recently used in its class: into the LRU, or to its front. */
void kv_slots_touch(struct kv_slots *s, uint32_t id);
/* A class's least recently used slot, then toward the most recent. */
uint32_t kv_slots_oldest(const struct kv_slots *s, unsigned cls);
uint32_t kv_slots_newer(const struct kv_slots *s, uint32_t id);

/* Slots allocated, their capacity, and the bytes they hold. */
struct kv_slots_usage {
	uint32_t slots_used;
	uint64_t pool_bytes_used;
	uint64_t len_bytes;
};

void kv_slots_usage(const struct kv_slots *s, struct kv_slots_usage *u);

#ifdef __cplusplus
}
#endif

#endif
