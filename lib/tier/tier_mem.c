/*
 * Equal-slot block store: a chained hash table over the slots and an
 * LRU list, in host memory (the CPU tier, malloc'd or pinned) or in
 * device memory (the GPU tier, through kv_dma).  One lock per tier; a
 * spill for room happens under it, so a block is never in neither tier.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <kv/dma.h>
#include "tier_impl.h"

#define SLOT_ALIGN	4096
#define NIL		UINT_MAX

struct entry {
	char *key;
	uint64_t hash;
	size_t len;
	unsigned hnext;		/* next in the hash bucket */
	unsigned prev, next;	/* LRU list, most recent first */
};

enum origin { MEM_MALLOC, MEM_PINNED, MEM_USER, MEM_USER_PINNED, MEM_DEVICE };

struct slots {
	struct kv_tier base;
	pthread_mutex_t lock;
	const char *kind;
	char *mem;
	size_t slot_bytes;
	unsigned nslots;
	enum origin origin;
	struct kv_dma *dma;
	void *bounce;		/* device slots: host copy of a spilled block */
	struct entry *e;
	unsigned *bucket;
	unsigned mask;		/* buckets - 1 */
	unsigned head, tail;
	unsigned *free_stack;
	unsigned nfree;
	uint64_t used_bytes;
};

static struct slots *S(struct kv_tier *t)
{
	return (struct slots *)t;
}

static char *slot(struct slots *s, unsigned i)
{
	return s->mem + (size_t)i * s->slot_bytes;
}

static uint64_t key_hash(const char *key)
{
	return XXH3_64bits(key, strlen(key));
}

static unsigned find(struct slots *s, const char *key, uint64_t h)
{
	unsigned i = s->bucket[h & s->mask];

	while (i != NIL && (s->e[i].hash != h || strcmp(s->e[i].key, key)))
		i = s->e[i].hnext;
	return i;
}

static void lru_unlink(struct slots *s, unsigned i)
{
	struct entry *e = &s->e[i];

	if (e->prev != NIL)
		s->e[e->prev].next = e->next;
	else
		s->head = e->next;
	if (e->next != NIL)
		s->e[e->next].prev = e->prev;
	else
		s->tail = e->prev;
}

static void lru_front(struct slots *s, unsigned i)
{
	s->e[i].prev = NIL;
	s->e[i].next = s->head;
	if (s->head != NIL)
		s->e[s->head].prev = i;
	s->head = i;
	if (s->tail == NIL)
		s->tail = i;
}

static void drop(struct slots *s, unsigned i)
{
	unsigned *p = &s->bucket[s->e[i].hash & s->mask];

	while (*p != i)
		p = &s->e[*p].hnext;
	*p = s->e[i].hnext;
	lru_unlink(s, i);
	s->used_bytes -= s->e[i].len;
	free(s->e[i].key);
	s->e[i].key = NULL;
	s->free_stack[s->nfree++] = i;
}

static int copy_in(struct slots *s, unsigned i, const void *buf, size_t len)
{
	if (s->origin == MEM_DEVICE)
		return kv_dma_copy(s->dma, slot(s, i), buf, len);
	memcpy(slot(s, i), buf, len);
	return 0;
}

/* Make room by dropping the least recently used block, spilled below
 * first when the chain asks for it. */
static int evict_one(struct slots *s)
{
	unsigned v = s->tail;
	const void *data = slot(s, v);
	int r;

	if (s->origin == MEM_DEVICE && s->base.lower &&
	    (s->base.flags & KV_TIER_SPILL)) {
		r = kv_dma_copy(s->dma, s->bounce, slot(s, v), s->e[v].len);
		if (r < 0)
			return r;
		data = s->bounce;
	}
	r = kvi_tier_evicting(&s->base, s->e[v].key, data, s->e[v].len);
	if (r < 0)
		return r;
	drop(s, v);
	return 0;
}

static int slots_put(struct kv_tier *t, const char *key, const void *buf,
		     size_t len)
{
	struct slots *s = S(t);
	uint64_t h = key_hash(key);
	char *dup = NULL;
	unsigned i;
	int r = 0;

	if (len > s->slot_bytes)
		return -EFBIG;
	pthread_mutex_lock(&s->lock);
	i = find(s, key, h);
	if (i == NIL) {
		dup = strdup(key);
		if (!dup)
			r = -ENOMEM;
		if (r == 0 && s->nfree == 0)
			r = evict_one(s);
		if (r < 0) {
			pthread_mutex_unlock(&s->lock);
			free(dup);
			return r;
		}
		i = s->free_stack[--s->nfree];
		s->e[i].key = dup;
		s->e[i].hash = h;
		s->e[i].len = 0;
		s->e[i].hnext = s->bucket[h & s->mask];
		s->bucket[h & s->mask] = i;
	} else {
		lru_unlink(s, i);
	}
	lru_front(s, i);
	s->used_bytes -= s->e[i].len;
	s->e[i].len = len;
	s->used_bytes += len;
	r = copy_in(s, i, buf, len);
	if (r < 0)
		drop(s, i);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int slots_get(struct kv_tier *t, const char *key, void *buf, size_t cap,
		     size_t *len)
{
	struct slots *s = S(t);
	uint64_t h = key_hash(key);
	unsigned i;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	i = find(s, key, h);
	if (i == NIL) {
		r = -ENOENT;
	} else if (s->e[i].len > cap) {
		r = -EFBIG;
	} else {
		if (s->origin == MEM_DEVICE)
			r = kv_dma_copy(s->dma, buf, slot(s, i), s->e[i].len);
		else
			memcpy(buf, slot(s, i), s->e[i].len);
		if (r == 0) {
			*len = s->e[i].len;
			lru_unlink(s, i);
			lru_front(s, i);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int slots_has(struct kv_tier *t, const char *key)
{
	struct slots *s = S(t);
	uint64_t h = key_hash(key);
	unsigned i;

	pthread_mutex_lock(&s->lock);
	i = find(s, key, h);
	pthread_mutex_unlock(&s->lock);
	return i == NIL ? -ENOENT : 0;
}

static int slots_del(struct kv_tier *t, const char *key)
{
	struct slots *s = S(t);
	uint64_t h = key_hash(key);
	unsigned i;

	pthread_mutex_lock(&s->lock);
	i = find(s, key, h);
	if (i != NIL)
		drop(s, i);
	pthread_mutex_unlock(&s->lock);
	return i == NIL ? -ENOENT : 0;
}

static int slots_stat(struct kv_tier *t, struct kv_tier_stat *st)
{
	struct slots *s = S(t);

	pthread_mutex_lock(&s->lock);
	st->kind = s->kind;
	st->blocks = s->nslots - s->nfree;
	st->used_bytes = s->used_bytes;
	st->capacity_bytes = (uint64_t)s->slot_bytes * s->nslots;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static void release_mem(struct slots *s)
{
	if (!s->mem)
		return;
	switch (s->origin) {
	case MEM_MALLOC:
		free(s->mem);
		break;
	case MEM_PINNED:
		kv_dma_host_free(s->dma, s->mem);
		break;
	case MEM_USER:
		break;
	case MEM_USER_PINNED:
		kv_dma_unregister(s->dma, s->mem);
		break;
	case MEM_DEVICE:
		kv_dma_dev_free(s->dma, s->mem);
		break;
	}
}

static void slots_close(struct kv_tier *t)
{
	struct slots *s = S(t);

	for (unsigned i = 0; s->e && i < s->nslots; i++)
		free(s->e[i].key);
	release_mem(s);
	if (s->bounce)
		kv_dma_host_free(s->dma, s->bounce);
	pthread_mutex_destroy(&s->lock);
	free(s->e);
	free(s->bucket);
	free(s->free_stack);
	free(s);
}

static const struct kv_tier_ops slots_ops = {
	.put = slots_put,
	.get = slots_get,
	.has = slots_has,
	.del = slots_del,
	.stat = slots_stat,
	.close = slots_close,
};

static int get_mem(struct slots *s, const struct kvi_slots_opts *o, size_t total)
{
	void *p;
	int r;

	if (o->device_memory) {
		s->origin = MEM_DEVICE;
		r = kv_dma_host_alloc(s->dma, s->slot_bytes, &s->bounce);
		if (r == 0)
			r = kv_dma_dev_alloc(s->dma, total, &p);
	} else if (o->mem) {
		s->origin = o->dma ? MEM_USER_PINNED : MEM_USER;
		p = o->mem;
		r = o->dma ? kv_dma_register(o->dma, p, total) : 0;
	} else if (o->dma) {
		s->origin = MEM_PINNED;
		r = kv_dma_host_alloc(o->dma, total, &p);
	} else {
		s->origin = MEM_MALLOC;
		r = posix_memalign(&p, SLOT_ALIGN, total) ? -ENOMEM : 0;
	}
	if (r == 0)
		s->mem = p;
	return r;
}

int kvi_tier_slots_open(const struct kvi_slots_opts *o, struct kv_tier **out)
{
	struct slots *s;
	unsigned nb = 1;
	size_t total;
	int r;

	if (!o->slot_bytes || !o->slots || o->slots >= NIL / 2 ||
	    o->slot_bytes > SIZE_MAX - SLOT_ALIGN || (o->device_memory && !o->dma))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	kvi_tier_init(&s->base, &slots_ops);
	r = -pthread_mutex_init(&s->lock, NULL);
	if (r) {
		free(s);
		return r;
	}
	s->kind = o->kind;
	s->dma = o->dma;
	s->nslots = o->slots;
	s->slot_bytes = (o->slot_bytes + SLOT_ALIGN - 1) & ~(size_t)(SLOT_ALIGN - 1);
	s->head = s->tail = NIL;
	while (nb < o->slots)
		nb <<= 1;
	s->mask = nb - 1;
	s->e = calloc(o->slots, sizeof(*s->e));
	s->bucket = malloc(nb * sizeof(*s->bucket));
	s->free_stack = malloc(o->slots * sizeof(*s->free_stack));
	if (!s->e || !s->bucket || !s->free_stack) {
		slots_close(&s->base);
		return -ENOMEM;
	}
	if (s->slot_bytes > SIZE_MAX / o->slots) {
		slots_close(&s->base);
		return -EOVERFLOW;
	}
	total = s->slot_bytes * o->slots;
	r = get_mem(s, o, total);
	if (r < 0) {
		slots_close(&s->base);
		return r;
	}
	for (unsigned i = 0; i < nb; i++)
		s->bucket[i] = NIL;
	for (unsigned i = 0; i < o->slots; i++)
		s->free_stack[i] = o->slots - 1 - i;
	s->nfree = o->slots;
	*out = &s->base;
	return 0;
}

int kv_tier_mem_open(const struct kv_tier_mem_opts *opts, struct kv_tier **out)
{
	struct kvi_slots_opts o;

	if (!opts)
		return -EINVAL;
	o = (struct kvi_slots_opts){
		.kind = "mem",
		.slot_bytes = opts->slot_bytes,
		.slots = opts->slots,
		.dma = opts->dma,
		.mem = opts->mem,
	};
	return kvi_tier_slots_open(&o, out);
}
