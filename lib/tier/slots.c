/*
 * The slot store: per-slot records in one array indexed by slot id,
 * chained hash buckets over the indexed ones, and per class a free list
 * (LIFO, so a freed slot is reused first) and an LRU order (kv/lru.h),
 * both through one array of links.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <kv/lru.h>
#include <kv/slots.h>

#define NONE	KV_SLOT_NONE

struct slot {
	char *key;		/* from alloc to release */
	uint64_t hash;
	uint64_t len;
	uint32_t hnext;		/* index chain */
	unsigned char used, indexed, in_lru;
};

struct class {
	uint64_t slot_bytes;
	uint64_t base;		/* offset of its first slot */
	uint32_t first, count;	/* its slot ids */
	uint32_t free_head, nfree;	/* linked by lru[].newer */
	struct kv_lru lru;
};

struct kv_slots {
	struct class *cls;
	unsigned ncls;
	struct slot *e;
	struct kv_lru_link *lru;	/* per slot: its LRU or free-list link */
	uint32_t count;
	uint32_t *bucket;
	uint32_t mask;		/* buckets - 1 */
	struct kv_slots_usage use;
};

static struct class *class_of(const struct kv_slots *s, uint32_t id)
{
	unsigned c = 0;

	while (id >= s->cls[c].first + s->cls[c].count)
		c++;
	return &s->cls[c];
}

static void free_push(struct kv_slots *s, struct class *c, uint32_t id)
{
	s->lru[id].newer = c->free_head;
	c->free_head = id;
	c->nfree++;
}

int kv_slots_new(const struct kv_slots_class *classes, unsigned nclasses,
		  struct kv_slots **out)
{
	struct kv_slots *s;
	uint64_t base = 0, count = 0, nb = 16;

	if (!nclasses)
		return -EINVAL;
	for (unsigned c = 0; c < nclasses; c++) {
		const struct kv_slots_class *k = &classes[c];

		if (!k->slot_bytes || !k->count ||
		    (c && k->slot_bytes <= classes[c - 1].slot_bytes))
			return -EINVAL;
		if (k->slot_bytes > (UINT64_MAX - base) / k->count)
			return -EOVERFLOW;
		base += k->slot_bytes * k->count;
		count += k->count;
		if (count >= NONE / 2)
			return -EINVAL;
	}
	while (nb < 2 * count)
		nb *= 2;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cls = calloc(nclasses, sizeof(*s->cls));
	s->e = calloc(count, sizeof(*s->e));
	s->lru = calloc(count, sizeof(*s->lru));
	s->bucket = malloc(nb * sizeof(*s->bucket));
	if (!s->cls || !s->e || !s->lru || !s->bucket) {
		kv_slots_free(s);
		return -ENOMEM;
	}
	s->ncls = nclasses;
	s->count = (uint32_t)count;
	s->mask = (uint32_t)nb - 1;
	for (uint32_t i = 0; i < nb; i++)
		s->bucket[i] = NONE;
	base = 0;
	count = 0;
	for (unsigned c = 0; c < nclasses; c++) {
		struct class *k = &s->cls[c];

		k->slot_bytes = classes[c].slot_bytes;
		k->count = classes[c].count;
		k->first = (uint32_t)count;
		k->base = base;
		k->free_head = NONE;
		kv_lru_init(&k->lru);
		for (uint32_t i = k->count; i-- > 0;)
			free_push(s, k, k->first + i);
		base += k->slot_bytes * k->count;
		count += k->count;
	}
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
	const struct class *k = &s->cls[s->ncls - 1];

	return k->base + k->slot_bytes * k->count;
}

uint64_t kv_slots_offset(const struct kv_slots *s, uint32_t id)
{
	const struct class *k = class_of(s, id);

	return k->base + (uint64_t)(id - k->first) * k->slot_bytes;
}

uint64_t kv_slots_capacity(const struct kv_slots *s, uint32_t id)
{
	return class_of(s, id)->slot_bytes;
}

unsigned kv_slots_class_of(const struct kv_slots *s, uint32_t id)
{
	return (unsigned)(class_of(s, id) - s->cls);
}

int kv_slots_class(const struct kv_slots *s, uint64_t len)
{
	for (unsigned c = 0; c < s->ncls; c++)
		if (len <= s->cls[c].slot_bytes)
			return (int)c;
	return -EFBIG;
}

uint32_t kv_slots_nfree(const struct kv_slots *s, unsigned cls)
{
	return s->cls[cls].nfree;
}

int kv_slots_alloc(struct kv_slots *s, uint64_t len, const char *key,
		    uint32_t *id)
{
	int c = kv_slots_class(s, len);
	struct class *k;
	struct slot *e;
	char *dup;
	uint32_t i;

	if (c < 0)
		return c;
	k = &s->cls[c];
	if (!k->nfree)
		return -ENOSPC;
	dup = strdup(key);
	if (!dup)
		return -ENOMEM;
	i = k->free_head;
	e = &s->e[i];
	k->free_head = s->lru[i].newer;
	k->nfree--;
	s->lru[i] = (struct kv_lru_link){ NONE, NONE };
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
	free_push(s, k, id);
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
}

uint32_t kv_slots_oldest(const struct kv_slots *s, unsigned cls)
{
	return s->cls[cls].lru.oldest;
}

uint32_t kv_slots_newer(const struct kv_slots *s, uint32_t id)
{
	return s->lru[id].newer;
}

void kv_slots_usage(const struct kv_slots *s, struct kv_slots_usage *u)
{
	*u = s->use;
}
