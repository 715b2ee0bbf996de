/*
 * The slot store: a pool of fixed-size slots in size classes, a key
 * index over them and an LRU order per class.  It keeps the geometry
 * (where a slot lies in the pool, its capacity, the bytes it holds) and
 * never the bytes themselves; the memory tier and kvoffd own the pool,
 * the copies and whatever else they track per slot, in arrays indexed
 * by slot id.  Not locked: callers serialise.
 *
 * A slot's life: kvi_slots_alloc gives it a key, kvi_slots_insert makes
 * it findable, kvi_slots_touch puts it in (or moves it to the front of)
 * its class's LRU, kvi_slots_remove takes it out of both, and
 * kvi_slots_release returns it to the free list.
 */
#ifndef KV_TIER_SLOTS_H
#define KV_TIER_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#define KVI_SLOT_NONE	UINT32_MAX	/* no slot: not found, end of a list */

struct kvi_slots;

/* count slots of slot_bytes each. */
struct kvi_slots_class {
	uint64_t slot_bytes;
	uint32_t count;
};

/* Classes in increasing slot_bytes, laid out one after the other in one
 * pool; slot ids run through them in order.  Slot offsets are sums of
 * slot_bytes, so sizes that are multiples of an alignment keep every
 * slot aligned. */
int kvi_slots_new(const struct kvi_slots_class *classes, unsigned nclasses,
		  struct kvi_slots **out);
void kvi_slots_free(struct kvi_slots *s);

/* Geometry: fixed by kvi_slots_new, so safe to read from any thread. */
uint32_t kvi_slots_count(const struct kvi_slots *s);
uint64_t kvi_slots_pool_bytes(const struct kvi_slots *s);
uint64_t kvi_slots_offset(const struct kvi_slots *s, uint32_t id);
uint64_t kvi_slots_capacity(const struct kvi_slots *s, uint32_t id);
unsigned kvi_slots_class_of(const struct kvi_slots *s, uint32_t id);

/* The smallest class whose slots hold len bytes, or -EFBIG. */
int kvi_slots_class(const struct kvi_slots *s, uint64_t len);
uint32_t kvi_slots_nfree(const struct kvi_slots *s, unsigned cls);

/* A free slot of the class for len, holding len bytes under key (not
 * yet findable).  -EFBIG: no class holds len; -ENOSPC: that class has no
 * free slot (evict its oldest and retry). */
int kvi_slots_alloc(struct kvi_slots *s, uint64_t len, const char *key,
		    uint32_t *id);
/* Back to the free list, out of the index and LRU first if need be. */
void kvi_slots_release(struct kvi_slots *s, uint32_t id);

const char *kvi_slots_key(const struct kvi_slots *s, uint32_t id);
uint64_t kvi_slots_len(const struct kvi_slots *s, uint32_t id);
void kvi_slots_set_len(struct kvi_slots *s, uint32_t id, uint64_t len);

/* Make id findable by its key, which no other slot in the index has. */
void kvi_slots_insert(struct kvi_slots *s, uint32_t id);
uint32_t kvi_slots_find(const struct kvi_slots *s, const char *key);
int kvi_slots_indexed(const struct kvi_slots *s, uint32_t id);
/* Out of the index and the LRU; the slot keeps its key until released. */
void kvi_slots_remove(struct kvi_slots *s, uint32_t id);

/* Most recently used in its class: into the LRU, or to its front. */
void kvi_slots_touch(struct kvi_slots *s, uint32_t id);
/* A class's least recently used slot, then toward the most recent. */
uint32_t kvi_slots_oldest(const struct kvi_slots *s, unsigned cls);
uint32_t kvi_slots_newer(const struct kvi_slots *s, uint32_t id);

/* Slots allocated, their capacity, and the bytes they hold. */
struct kvi_slots_usage {
	uint32_t slots_used;
	uint64_t pool_bytes_used;
	uint64_t len_bytes;
};

void kvi_slots_usage(const struct kvi_slots *s, struct kvi_slots_usage *u);

#endif
