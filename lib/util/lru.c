/* The LRU order (kv/lru.h): oldest at one end, newest at the other. */
#include <kv/lru.h>

void kv_lru_init(struct kv_lru *l)
{
	l->oldest = l->newest = KV_LRU_NONE;
}

void kv_lru_push(struct kv_lru *l, struct kv_lru_link *links, uint32_t id)
{
	links[id].older = l->newest;
	links[id].newer = KV_LRU_NONE;
	if (l->newest != KV_LRU_NONE)
		links[l->newest].newer = id;
	else
		l->oldest = id;
	l->newest = id;
}

void kv_lru_remove(struct kv_lru *l, struct kv_lru_link *links, uint32_t id)
{
	struct kv_lru_link *k = &links[id];

	if (k->older != KV_LRU_NONE)
		links[k->older].newer = k->newer;
	else
		l->oldest = k->newer;
	if (k->newer != KV_LRU_NONE)
		links[k->newer].older = k->older;
	else
		l->newest = k->older;
	k->older = k->newer = KV_LRU_NONE;
}
