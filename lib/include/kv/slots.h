/*
 * The slot store: a pool of fixed-size slots in size classes, a key
 * index over them and an LRU order per class.  It keeps the geometry
 * (where a slot lies in the pool, its capacity, the bytes it holds) and
 * never the bytes themselves; the memory tier and kvoffd own the pool,
 * the copies and whatever else they track per slot, in arrays indexed
 * by slot id.  Not locked: callers serialise.
 *
 * One byte budget serves every class, as memcached's slabs do: the pool
 * is cut into pages of the largest class's size, a class is handed a
 * free page when it has no free slot and cuts it into slots of its
 * size, and a page whose slots are all free again goes to whichever
 * class next needs one.  A pool used by one block size is all that
 * size's; a mix gets what it uses.
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

/* Class sizes increase and each is a multiple of the alignment the
 * caller wants slots at; the largest is the page.  The pool holds
 * pool_bytes / largest pages (at least one).  Slot ids run page by page:
 * a page has ids for as many slots as the smallest class cuts it into,
 * and a page of a larger class uses the first of them. */
int kv_slots_new(const uint64_t *class_bytes, unsigned nclasses,
		 uint64_t pool_bytes, struct kv_slots **out);
void kv_slots_free(struct kv_slots *s);

/* Fixed by kv_slots_new, so safe to read from any thread. */
uint32_t kv_slots_count(const struct kv_slots *s);	/* slot ids */
uint64_t kv_slots_pool_bytes(const struct kv_slots *s);
unsigned kv_slots_nclasses(const struct kv_slots *s);
uint64_t kv_slots_class_bytes(const struct kv_slots *s, unsigned cls);
/* Of a slot that is in use: where it lies, what it holds, its class.
 * They hold while it stays in use; its page may go to another class
 * once it is free, so read them under the callers' serialisation. */
uint64_t kv_slots_offset(const struct kv_slots *s, uint32_t id);
uint64_t kv_slots_capacity(const struct kv_slots *s, uint32_t id);
unsigned kv_slots_class_of(const struct kv_slots *s, uint32_t id);

/* The smallest class whose slots hold len bytes, or -EFBIG. */
int kv_slots_class(const struct kv_slots *s, uint64_t len);
/* Whether kv_slots_alloc finds room for class cls: a free slot of it, a
 * free page, or a page whose slots are all free. */
int kv_slots_room(const struct kv_slots *s, unsigned cls);

/* A free slot of the class for len, holding len bytes under key (not
 * yet findable).  -EFBIG: no class holds len; -ENOSPC: no room (evict
 * the class's oldest, or every slot of another class's page, and
 * retry). */
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
/* When id was last touched, on the store's own clock: a smaller value
 * was used longer ago, whatever the classes. */
uint64_t kv_slots_last_use(const struct kv_slots *s, uint32_t id);

/* Pages: the page a slot lies on, and the ids a page has in its class
 * (first and count; count 0 while the page belongs to no class). */
uint32_t kv_slots_page_of(const struct kv_slots *s, uint32_t id);
uint32_t kv_slots_page_ids(const struct kv_slots *s, uint32_t page, uint32_t *first);
int kv_slots_used(const struct kv_slots *s, uint32_t id);
/* The first slot in use at id from or after it, or KV_SLOT_NONE: walks
 * the slots in use without visiting every id. */
uint32_t kv_slots_next_used(const struct kv_slots *s, uint32_t from);
/* for (each slot id in use, in id order): a loop of kv_slots_next_used. */
#define KV_SLOTS_EACH_USED(s, i) \
	for (uint32_t i = kv_slots_next_used((s), 0); i != KV_SLOT_NONE; \
	     i = kv_slots_next_used((s), i + 1))

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
