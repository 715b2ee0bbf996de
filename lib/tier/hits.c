/*
 * First hits remembered by key hash, one per slot: the test that keeps a
 * block read once from being promoted.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <kv/integrity.h>
#include <kv/tier.h>

struct kv_hits {
	unsigned slots;
	_Atomic uint64_t seen[];	/* key hash | 1; 0: empty */
};

int kv_hits_new(unsigned slots, struct kv_hits **out)
{
	struct kv_hits *h;

	if (!slots)
		return -EINVAL;
	h = calloc(1, sizeof(*h) + slots * sizeof(h->seen[0]));
	if (!h)
		return -ENOMEM;
	h->slots = slots;
	*out = h;
	return 0;
}

void kv_hits_free(struct kv_hits *h)
{
	free(h);
}

int kv_hits_second(struct kv_hits *h, const char *key)
{
	uint64_t k = kv_xxh3(key, strlen(key)) | 1, expected = k;
	_Atomic uint64_t *slot = &h->seen[k % h->slots];

	if (atomic_compare_exchange_strong(slot, &expected, 0))
		return 1;
	atomic_store(slot, k);
	return 0;
}
