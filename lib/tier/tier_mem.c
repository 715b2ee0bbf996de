/*
 * Equal-slot block store over the slot store (slots.c), in host memory
 * (the CPU tier, malloc'd or pinned) or in device memory (the GPU tier,
 * through kv_dma).  One lock per tier; a
 * spill for room happens under it, so a block is never in neither tier.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <kv/dma.h>
#include <kv/slots.h>
#include "tier_impl.h"

#define SLOT_ALIGN	4096

enum origin { MEM_MALLOC, MEM_PINNED, MEM_USER, MEM_USER_PINNED, MEM_DEVICE };

struct slots {
	struct kv_tier base;
	pthread_mutex_t lock;
	const char *kind;
	char *mem;
	enum origin origin;
	struct kv_dma *dma;
	void *bounce;		/* device slots: host copy of a spilled block */
	struct kv_slots *store;
};

static struct slots *S(struct kv_tier *t)
{
	return (struct slots *)t;
}

static char *slot(struct slots *s, uint32_t i)
{
	return s->mem + kv_slots_offset(s->store, i);
}

static int copy_in(struct slots *s, uint32_t i, const void *buf, size_t len)
{
	if (s->origin == MEM_DEVICE)
		return kv_dma_copy(s->dma, slot(s, i), buf, len);
	memcpy(slot(s, i), buf, len);
	return 0;
}

/* Make room in class cls by dropping its least recently used block,
 * spilled below first when the chain asks for it. */
static int evict_one(struct slots *s, unsigned cls)
{
	uint32_t v = kv_slots_oldest(s->store, cls);
	size_t len = kv_slots_len(s->store, v);
	const void *data = slot(s, v);
	int r;

	if (s->origin == MEM_DEVICE && s->base.lower &&
	    (s->base.flags & KV_TIER_SPILL)) {
		r = kv_dma_copy(s->dma, s->bounce, slot(s, v), len);
		if (r < 0)
			return r;
		data = s->bounce;
	}
	r = kvi_tier_evicting(&s->base, kv_slots_key(s->store, v), data, len);
	if (r < 0)
		return r;
	kv_slots_release(s->store, v);
	return 0;
}

static int slots_put(struct kv_tier *t, const char *key, const void *buf,
		     size_t len)
{
	struct slots *s = S(t);
	int cls = kv_slots_class(s->store, len);
	uint32_t i;
	int r = 0;

	if (cls < 0)
		return cls;
	pthread_mutex_lock(&s->lock);
	i = kv_slots_find(s->store, key);
	if (i == KV_SLOT_NONE) {
		r = kv_slots_alloc(s->store, len, key, &i);
		if (r == -ENOSPC) {
			r = evict_one(s, (unsigned)cls);
			if (r == 0)
				r = kv_slots_alloc(s->store, len, key, &i);
		}
		if (r < 0) {
			pthread_mutex_unlock(&s->lock);
			return r;
		}
		kv_slots_insert(s->store, i);
	} else {
		kv_slots_set_len(s->store, i, len);
	}
	kv_slots_touch(s->store, i);
	r = copy_in(s, i, buf, len);
	if (r < 0)
		kv_slots_release(s->store, i);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int slots_get(struct kv_tier *t, const char *key, void *buf, size_t cap,
		     size_t *len)
{
	struct slots *s = S(t);
	uint32_t i;
	size_t n;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	i = kv_slots_find(s->store, key);
	n = i == KV_SLOT_NONE ? 0 : kv_slots_len(s->store, i);
	if (i == KV_SLOT_NONE) {
		r = -ENOENT;
	} else if (n > cap) {
		r = -EFBIG;
	} else {
		if (s->origin == MEM_DEVICE)
			r = kv_dma_copy(s->dma, buf, slot(s, i), n);
		else
			memcpy(buf, slot(s, i), n);
		if (r == 0) {
			*len = n;
			kv_slots_touch(s->store, i);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int slots_size(struct kv_tier *t, const char *key, uint64_t *size)
{
	struct slots *s = S(t);
	uint32_t i;

	pthread_mutex_lock(&s->lock);
	i = kv_slots_find(s->store, key);
	if (i != KV_SLOT_NONE)
		*size = kv_slots_len(s->store, i);
	pthread_mutex_unlock(&s->lock);
	return i == KV_SLOT_NONE ? -ENOENT : 0;
}

static int slots_del(struct kv_tier *t, const char *key)
{
	struct slots *s = S(t);
	uint32_t i;

	pthread_mutex_lock(&s->lock);
	i = kv_slots_find(s->store, key);
	if (i != KV_SLOT_NONE)
		kv_slots_release(s->store, i);
	pthread_mutex_unlock(&s->lock);
	return i == KV_SLOT_NONE ? -ENOENT : 0;
}

static int slots_stat(struct kv_tier *t, struct kv_tier_stat *st)
{
	struct slots *s = S(t);
	struct kv_slots_usage u;

	pthread_mutex_lock(&s->lock);
	kv_slots_usage(s->store, &u);
	st->kind = s->kind;
	st->blocks = u.slots_used;
	st->used_bytes = u.len_bytes;
	st->capacity_bytes = kv_slots_pool_bytes(s->store);
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

	release_mem(s);
	if (s->bounce)
		kv_dma_host_free(s->dma, s->bounce);
	pthread_mutex_destroy(&s->lock);
	kv_slots_free(s->store);
	free(s);
}

static const struct kv_tier_ops slots_ops = {
	.put = slots_put,
	.get = slots_get,
	.del = slots_del,
	.stat = slots_stat,
	.close = slots_close,
	.size = slots_size,
};

static int get_mem(struct slots *s, const struct kvi_tier_slots_opts *o,
		   size_t slot_bytes, size_t total)
{
	void *p;
	int r;

	if (o->device_memory) {
		s->origin = MEM_DEVICE;
		r = kv_dma_host_alloc(s->dma, slot_bytes, &s->bounce);
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

int kvi_tier_slots_open(const struct kvi_tier_slots_opts *o, struct kv_tier **out)
{
	uint64_t one;
	struct slots *s;
	int r;

	if (!o->slot_bytes || !o->slots ||
	    o->slot_bytes > SIZE_MAX - SLOT_ALIGN || (o->device_memory && !o->dma))
		return -EINVAL;
	one = (o->slot_bytes + SLOT_ALIGN - 1) & ~(size_t)(SLOT_ALIGN - 1);
	if (o->slots > UINT64_MAX / one)
		return -EOVERFLOW;
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
	r = kv_slots_new(&one, 1, one * o->slots, &s->store);
	if (r == 0)
		r = get_mem(s, o, one, kv_slots_pool_bytes(s->store));
	if (r < 0) {
		slots_close(&s->base);
		return r;
	}
	*out = &s->base;
	return 0;
}

int kv_tier_mem_open(const struct kv_tier_mem_opts *opts, struct kv_tier **out)
{
	struct kvi_tier_slots_opts o;

	if (!opts)
		return -EINVAL;
	o = (struct kvi_tier_slots_opts){
		.kind = "mem",
		.slot_bytes = opts->slot_bytes,
		.slots = opts->slots,
		.dma = opts->dma,
		.mem = opts->mem,
	};
	return kvi_tier_slots_open(&o, out);
}
