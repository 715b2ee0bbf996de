/*
 * The slot store: per-slot records in one array indexed by slot id,
 * chained hash buckets over the indexed ones, per class a free list and
 * an LRU order (both kv/lru.h, through one array of links: a slot is in
 * one of them or in neither), and per page the class it is cut for and
 * how many of its slots are in use.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <kv/lru.h>
#include <kv/slots.h>

#define NONE		KV_SLOT_NONE
#define NO_CLASS	UINT16_MAX

struct slot {
	char *key;		/* from alloc to release */
	uint64_t hash;
	uint64_t len;
	uint64_t last_use;	/* the store's clock at the last touch */
	uint32_t hnext;		/* index chain */
	unsigned char used, indexed, in_lru;
};

struct class {
	uint64_t slot_bytes;
	uint32_t per_page;	/* slots a page of this class holds */
	struct kv_lru free;	/* the newest is handed out first */
	struct kv_lru lru;
};

struct page {
	uint16_t cls;		/* NO_CLASS: free */
	uint32_t used;		/* its slots in use */
};

struct kv_slots {
	struct class *cls;
	unsigned ncls;
	struct page *page;
	uint32_t npages, ids_per_page;
	uint32_t *free_pages, nfree_pages;	/* a stack */
	uint32_t nempty;	/* pages of a class with no slot in use */
	uint64_t page_bytes;
	struct slot *e;
	struct kv_lru_link *lru;	/* per slot: its LRU or free-list link */
	uint32_t count;
	uint32_t *bucket;
	uint32_t mask;		/* buckets - 1 */
	uint64_t clock;
	struct kv_slots_usage use;
};

static struct class *class_of(const struct kv_slots *s, uint32_t id)
{
	return &s->cls[s->page[id / s->ids_per_page].cls];
}

int kv_slots_new(const uint64_t *class_bytes, unsigned nclasses,
		 uint64_t pool_bytes, struct kv_slots **out)
{
	struct kv_slots *s;
	uint64_t page_bytes, npages, count, nb = 16;

	if (!nclasses || nclasses >= NO_CLASS)
		return -EINVAL;
	for (unsigned c = 0; c < nclasses; c++)
		if (!class_bytes[c] || (c && class_bytes[c] <= class_bytes[c - 1]))
			return -EINVAL;
	page_bytes = class_bytes[nclasses - 1];
	npages = pool_bytes / page_bytes;
	if (!npages)
		return -EINVAL;
	/* Ids for a page cut into the smallest slots. */
	count = page_bytes / class_bytes[0];
	if (count >= NONE / 2 || npages >= NONE / 2 / count)
		return -EOVERFLOW;
	count *= npages;
	/* Chains of two when every id is in use, of one or less when a
	 * class larger than the smallest fills the pool. */
	while (nb < count / 2)
		nb *= 2;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cls = calloc(nclasses, sizeof(*s->cls));
	s->page = calloc(npages, sizeof(*s->page));
	s->free_pages = calloc(npages, sizeof(*s->free_pages));
	s->e = calloc(count, sizeof(*s->e));
	s->lru = calloc(count, sizeof(*s->lru));
	s->bucket = malloc(nb * sizeof(*s->bucket));
	if (!s->cls || !s->page || !s->free_pages || !s->e || !s->lru || !s->bucket) {
		kv_slots_free(s);
		return -ENOMEM;
	}
	s->ncls = nclasses;
	s->page_bytes = page_bytes;
	s->npages = (uint32_t)npages;
	s->ids_per_page = (uint32_t)(page_bytes / class_bytes[0]);
	s->count = (uint32_t)count;
	s->mask = (uint32_t)nb - 1;
	for (uint32_t i = 0; i < nb; i++)
		s->bucket[i] = NONE;
	for (unsigned c = 0; c < nclasses; c++) {
		struct class *k = &s->cls[c];

		k->slot_bytes = class_bytes[c];
		k->per_page = (uint32_t)(page_bytes / class_bytes[c]);
		kv_lru_init(&k->free);
		kv_lru_init(&k->lru);
	}
	/* Popped from the top: page 0 first. */
	for (uint32_t p = 0; p < s->npages; p++) {
		s->page[p].cls = NO_CLASS;
		s->free_pages[p] = s->npages - 1 - p;
	}
	s->nfree_pages = s->npages;
	*out = s;
	return 0;
}

void kv_slots_free(struct kv_slots *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; s->e && i < s->count; i++)
		free(s->e[i].key);
	free(s->cls);
	free(s->page);
	free(s->free_pages);
	free(s->e);
	free(s->lru);
	free(s->bucket);
	free(s);
}

uint32_t kv_slots_count(const struct kv_slots *s)
{
	return s->count;
}

uint64_t kv_slots_pool_bytes(const struct kv_slots *s)
{
	return s->page_bytes * s->npages;
}

unsigned kv_slots_nclasses(const struct kv_slots *s)
{
	return s->ncls;
}

uint64_t kv_slots_class_bytes(const struct kv_slots *s, unsigned cls)
{
	return s->cls[cls].slot_bytes;
}

uint64_t kv_slots_offset(const struct kv_slots *s, uint32_t id)
{
	uint32_t p = id / s->ids_per_page;

	return p * s->page_bytes + (id % s->ids_per_page) * class_of(s, id)->slot_bytes;
}

uint64_t kv_slots_capacity(const struct kv_slots *s, uint32_t id)
{
	return class_of(s, id)->slot_bytes;
}

unsigned kv_slots_class_of(const struct kv_slots *s, uint32_t id)
{
	return s->page[id / s->ids_per_page].cls;
}

int kv_slots_class(const struct kv_slots *s, uint64_t len)
{
	for (unsigned c = 0; c < s->ncls; c++)
		if (len <= s->cls[c].slot_bytes)
			return (int)c;
	return -EFBIG;
}

int kv_slots_room(const struct kv_slots *s, unsigned cls)
{
	return s->cls[cls].free.newest != NONE || s->nfree_pages || s->nempty;
}

/* A page for class c: a free one, else an empty page of another class,
 * its slots taken off that class's free list.  Its slots go on c's free
 * list, the lowest id to be handed out first. */
static int page_for(struct kv_slots *s, unsigned c)
{
	struct class *k = &s->cls[c];
	uint32_t p, first;

	if (s->nfree_pages) {
		p = s->free_pages[--s->nfree_pages];
	} else if (s->nempty) {
		for (p = 0; p < s->npages; p++)
			if (s->page[p].cls != NO_CLASS && s->page[p].cls != c &&
			    !s->page[p].used)
				break;
		if (p == s->npages)
			return -ENOSPC;
		first = p * s->ids_per_page;
		for (uint32_t i = 0; i < s->cls[s->page[p].cls].per_page; i++)
			kv_lru_remove(&s->cls[s->page[p].cls].free, s->lru, first + i);
		s->nempty--;
	} else {
		return -ENOSPC;
	}
	s->page[p] = (struct page){ .cls = (uint16_t)c };
	s->nempty++;
	first = p * s->ids_per_page;
	for (uint32_t i = k->per_page; i-- > 0;)
		kv_lru_push(&k->free, s->lru, first + i);
	return 0;
}

int kv_slots_alloc(struct kv_slots *s, uint64_t len, const char *key,
		    uint32_t *id)
{
	int c = kv_slots_class(s, len);
	struct class *k;
	struct page *pg;
	struct slot *e;
	char *dup;
	uint32_t i;

	if (c < 0)
		return c;
	k = &s->cls[c];
	if (k->free.newest == NONE && page_for(s, (unsigned)c))
		return -ENOSPC;
	dup = strdup(key);
	if (!dup)
		return -ENOMEM;
	i = k->free.newest;
	kv_lru_remove(&k->free, s->lru, i);
	pg = &s->page[i / s->ids_per_page];
	if (!pg->used++)
		s->nempty--;
	e = &s->e[i];
	*e = (struct slot){
		.key = dup,
		.hash = XXH3_64bits(key, strlen(key)),
		.len = len,
		.hnext = NONE,
		.used = 1,
	};
	s->use.slots_used++;
	s->use.pool_bytes_used += k->slot_bytes;
	s->use.len_bytes += len;
	*id = i;
	return 0;
}

void kv_slots_release(struct kv_slots *s, uint32_t id)
{
	struct class *k = class_of(s, id);
	struct slot *e = &s->e[id];

	kv_slots_remove(s, id);
	s->use.slots_used--;
	s->use.pool_bytes_used -= k->slot_bytes;
	s->use.len_bytes -= e->len;
	free(e->key);
	*e = (struct slot){ .hnext = NONE };
	kv_lru_push(&k->free, s->lru, id);
	if (!--s->page[id / s->ids_per_page].used)
		s->nempty++;
}

const char *kv_slots_key(const struct kv_slots *s, uint32_t id)
{
	return s->e[id].key;
}

uint64_t kv_slots_len(const struct kv_slots *s, uint32_t id)
{
	return s->e[id].len;
}

void kv_slots_set_len(struct kv_slots *s, uint32_t id, uint64_t len)
{
	s->use.len_bytes += len - s->e[id].len;
	s->e[id].len = len;
}

void kv_slots_insert(struct kv_slots *s, uint32_t id)
{
	struct slot *e = &s->e[id];
	uint32_t *head = &s->bucket[e->hash & s->mask];

	e->hnext = *head;
	*head = id;
	e->indexed = 1;
}

uint32_t kv_slots_find(const struct kv_slots *s, const char *key)
{
	uint64_t h = XXH3_64bits(key, strlen(key));
	uint32_t i = s->bucket[h & s->mask];

	while (i != NONE && (s->e[i].hash != h || strcmp(s->e[i].key, key)))
		i = s->e[i].hnext;
	return i;
}

int kv_slots_indexed(const struct kv_slots *s, uint32_t id)
{
	return s->e[id].indexed;
}

static void lru_unlink(struct kv_slots *s, uint32_t id)
{
	kv_lru_remove(&class_of(s, id)->lru, s->lru, id);
	s->e[id].in_lru = 0;
}

void kv_slots_remove(struct kv_slots *s, uint32_t id)
{
	struct slot *e = &s->e[id];
	uint32_t *p;

	if (e->in_lru)
		lru_unlink(s, id);
	if (!e->indexed)
		return;
	p = &s->bucket[e->hash & s->mask];
	while (*p != id)
		p = &s->e[*p].hnext;
	*p = e->hnext;
	e->hnext = NONE;
	e->indexed = 0;
}

void kv_slots_touch(struct kv_slots *s, uint32_t id)
{
	struct class *k = class_of(s, id);
	struct slot *e = &s->e[id];

	if (e->in_lru)
		kv_lru_remove(&k->lru, s->lru, id);
	kv_lru_push(&k->lru, s->lru, id);
	e->in_lru = 1;
	e->last_use = ++s->clock;
}

uint32_t kv_slots_oldest(const struct kv_slots *s, unsigned cls)
{
	return s->cls[cls].lru.oldest;
}

uint32_t kv_slots_newer(const struct kv_slots *s, uint32_t id)
{
	return s->lru[id].newer;
}

uint64_t kv_slots_last_use(const struct kv_slots *s, uint32_t id)
{
	return s->e[id].last_use;
}

uint32_t kv_slots_page_of(const struct kv_slots *s, uint32_t id)
{
	return id / s->ids_per_page;
}

uint32_t kv_slots_page_ids(const struct kv_slots *s, uint32_t page, uint32_t *first)
{
	*first = page * s->ids_per_page;
	return s->page[page].cls == NO_CLASS ? 0 : s->cls[s->page[page].cls].per_page;
}

int kv_slots_used(const struct kv_slots *s, uint32_t id)
{
	return s->e[id].used;
}

uint32_t kv_slots_next_used(const struct kv_slots *s, uint32_t from)
{
	for (uint32_t p = from / s->ids_per_page; p < s->npages; p++) {
		uint32_t first, n = kv_slots_page_ids(s, p, &first);

		if (!s->page[p].used)
			continue;
		for (uint32_t i = from > first ? from : first; i < first + n; i++)
			if (s->e[i].used)
				return i;
	}
	return NONE;
}

void kv_slots_usage(const struct kv_slots *s, struct kv_slots_usage *u)
{
	*u = s->use;
}
