/* The slot store alone: geometry of two classes in one pool, index
 * insert/find/remove with chains of keys in one bucket, LRU order and
 * touch per class, free-list reuse, a full class, usage totals. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>
#include <kv/slots.h>
#include "check.h"

#define NONE	KV_SLOT_NONE
#define SMALL	16384
#define LARGE	(2u << 20)

static int put(struct kv_slots *s, uint64_t len, const char *key, uint32_t *id)
{
	int r = kv_slots_alloc(s, len, key, id);

	CHECK(r == 0, "alloc '%s' (%llu bytes): %d", key, (unsigned long long)len, r);
	kv_slots_insert(s, *id);
	kv_slots_touch(s, *id);
	return 0;
}

static int check_geometry(void)
{
	const struct kv_slots_class bad[] = { { LARGE, 1 }, { SMALL, 1 } };
	const struct kv_slots_class zero[] = { { SMALL, 0 } };
	const struct kv_slots_class cls[] = { { SMALL, 3 }, { LARGE, 2 } };
	struct kv_slots *s;

	CHECK(kv_slots_new(bad, 2, &s) == -EINVAL, "classes out of order");
	CHECK(kv_slots_new(zero, 1, &s) == -EINVAL, "empty class");
	CHECK(kv_slots_new(cls, 0, &s) == -EINVAL, "no class");
	CHECK(kv_slots_new(cls, 2, &s) == 0, "new");
	CHECK(kv_slots_count(s) == 5, "count %u", kv_slots_count(s));
	CHECK(kv_slots_pool_bytes(s) == 3ull * SMALL + 2ull * LARGE, "pool bytes");
	CHECK(kv_slots_offset(s, 0) == 0, "offset 0");
	CHECK(kv_slots_offset(s, 2) == 2 * SMALL, "offset 2");
	CHECK(kv_slots_offset(s, 3) == 3 * SMALL, "offset 3");
	CHECK(kv_slots_offset(s, 4) == 3ull * SMALL + LARGE, "offset 4");
	CHECK(kv_slots_capacity(s, 2) == SMALL && kv_slots_capacity(s, 3) == LARGE,
	      "capacity");
	CHECK(kv_slots_class_of(s, 2) == 0 && kv_slots_class_of(s, 4) == 1, "class of");
	CHECK(kv_slots_class(s, 0) == 0 && kv_slots_class(s, SMALL) == 0, "small class");
	CHECK(kv_slots_class(s, SMALL + 1) == 1 && kv_slots_class(s, LARGE) == 1,
	      "large class");
	CHECK(kv_slots_class(s, LARGE + 1) == -EFBIG, "no class holds it");
	CHECK(kv_slots_nfree(s, 0) == 3 && kv_slots_nfree(s, 1) == 2, "all free");
	kv_slots_free(s);
	return 0;
}

/* Two classes fill and age apart: a full small class leaves the large
 * one alone, and each has its own oldest block. */
static int check_classes(void)
{
	const struct kv_slots_class cls[] = { { SMALL, 3 }, { LARGE, 2 } };
	struct kv_slots_usage u;
	struct kv_slots *s;
	uint32_t a, b, c, x, y, z;

	CHECK(kv_slots_new(cls, 2, &s) == 0, "new");
	CHECK(kv_slots_oldest(s, 0) == NONE && kv_slots_oldest(s, 1) == NONE, "empty LRU");
	if (put(s, 100, "a", &a) || put(s, LARGE, "x", &x) || put(s, SMALL, "b", &b) ||
	    put(s, 5000, "c", &c) || put(s, SMALL + 1, "y", &y))
		return -1;
	/* The free list hands out the lowest id first. */
	CHECK(a == 0 && b == 1 && c == 2, "small ids %u %u %u", a, b, c);
	CHECK(x == 3 && y == 4, "large ids %u %u", x, y);
	CHECK(kv_slots_alloc(s, 10, "d", &z) == -ENOSPC, "small class full");
	CHECK(kv_slots_alloc(s, LARGE + 1, "d", &z) == -EFBIG, "too large");
	kv_slots_usage(s, &u);
	CHECK(u.slots_used == 5, "slots used %u", u.slots_used);
	CHECK(u.pool_bytes_used == 3ull * SMALL + 2ull * LARGE, "pool bytes used");
	CHECK(u.len_bytes == 100ull + SMALL + 5000 + LARGE + SMALL + 1, "len bytes");

	/* Oldest first per class, newer toward the front. */
	CHECK(kv_slots_oldest(s, 0) == a, "oldest small");
	CHECK(kv_slots_newer(s, a) == b && kv_slots_newer(s, b) == c &&
	      kv_slots_newer(s, c) == NONE, "small LRU order");
	CHECK(kv_slots_oldest(s, 1) == x && kv_slots_newer(s, x) == y &&
	      kv_slots_newer(s, y) == NONE, "large LRU order");
	kv_slots_touch(s, a);
	CHECK(kv_slots_oldest(s, 0) == b && kv_slots_newer(s, c) == a, "touch moves a");
	CHECK(kv_slots_oldest(s, 1) == x, "touch in one class leaves the other");

	/* Evict the small class's oldest; its slot is the next one out. */
	z = kv_slots_oldest(s, 0);
	kv_slots_release(s, z);
	CHECK(kv_slots_find(s, "b") == NONE, "released b is gone");
	CHECK(kv_slots_nfree(s, 0) == 1 && kv_slots_nfree(s, 1) == 0, "nfree");
	if (put(s, 1, "d", &z))
		return -1;
	CHECK(z == b, "free slot reused: %u, want %u", z, b);
	CHECK(kv_slots_oldest(s, 0) == c, "d is newest");
	kv_slots_usage(s, &u);
	CHECK(u.len_bytes == 100ull + 1 + 5000 + LARGE + SMALL + 1, "len bytes after reuse");

	/* Freed in order c, a: a comes back first. */
	kv_slots_release(s, c);
	kv_slots_release(s, a);
	CHECK(kv_slots_alloc(s, 1, "e", &z) == 0 && z == a, "LIFO reuse %u", z);
	kv_slots_release(s, z);
	kv_slots_free(s);
	return 0;
}

/* A slot outside the index and LRU keeps its key and length; a block
 * findable but not in the LRU (a load in flight) is never a candidate. */
static int check_states(void)
{
	const struct kv_slots_class one[] = { { SMALL, 4 } };
	struct kv_slots *s;
	uint32_t a, b;

	CHECK(kv_slots_new(one, 1, &s) == 0, "new");
	CHECK(kv_slots_alloc(s, 7, "k", &a) == 0, "alloc");
	CHECK(!kv_slots_indexed(s, a) && kv_slots_find(s, "k") == NONE, "not yet findable");
	CHECK(!strcmp(kv_slots_key(s, a), "k") && kv_slots_len(s, a) == 7, "key and len");
	kv_slots_insert(s, a);
	CHECK(kv_slots_indexed(s, a) && kv_slots_find(s, "k") == a, "findable");
	CHECK(kv_slots_oldest(s, 0) == NONE, "indexed is not in the LRU");
	kv_slots_touch(s, a);
	CHECK(kv_slots_oldest(s, 0) == a, "touched is in the LRU");
	kv_slots_set_len(s, a, 9);
	CHECK(kv_slots_len(s, a) == 9, "set len");

	/* A replacement for k: the old one leaves the index and LRU but
	 * keeps its key until released. */
	CHECK(kv_slots_alloc(s, 3, "k", &b) == 0 && b != a, "second k");
	kv_slots_remove(s, a);
	kv_slots_insert(s, b);
	kv_slots_touch(s, b);
	CHECK(kv_slots_find(s, "k") == b, "k is the new slot");
	CHECK(!kv_slots_indexed(s, a) && !strcmp(kv_slots_key(s, a), "k"), "old keeps key");
	CHECK(kv_slots_oldest(s, 0) == b && kv_slots_newer(s, b) == NONE, "only b in LRU");
	kv_slots_remove(s, a);
	kv_slots_release(s, a);
	CHECK(kv_slots_find(s, "k") == b, "releasing the old leaves the new");
	kv_slots_free(s);
	return 0;
}

/* Keys chosen to share one bucket: every one stays findable while
 * others in its chain come and go, whatever its place in the chain. */
static int check_collisions(void)
{
	enum { N = 12 };
	const struct kv_slots_class one[] = { { 4096, N } };
	char keys[N][32];
	uint32_t ids[N];
	struct kv_slots *s;
	uint64_t want = 0;
	int n = 0;

	/* 12 slots get 32 buckets, so equal low 5 bits share one. */
	for (unsigned k = 0; n < N; k++) {
		char key[32];
		uint64_t h;

		snprintf(key, sizeof(key), "blk/%u.bin", k);
		h = XXH3_64bits(key, strlen(key)) & 31;
		if (k == 0)
			want = h;
		if (h == want)
			strcpy(keys[n++], key);
	}
	CHECK(kv_slots_new(one, 1, &s) == 0, "new");
	for (int i = 0; i < N; i++)
		if (put(s, 1, keys[i], &ids[i]))
			return -1;
	CHECK(kv_slots_find(s, "blk/none.bin") == NONE, "absent key");
	for (int i = 0; i < N; i++)
		CHECK(kv_slots_find(s, keys[i]) == ids[i], "find %s", keys[i]);
	/* Take out the head, a middle and the tail of the chain. */
	kv_slots_release(s, ids[N - 1]);
	kv_slots_release(s, ids[5]);
	kv_slots_release(s, ids[0]);
	for (int i = 0; i < N; i++) {
		uint32_t want_id = i == 0 || i == 5 || i == N - 1 ? NONE : ids[i];

		CHECK(kv_slots_find(s, keys[i]) == want_id, "after removals: %s", keys[i]);
	}
	if (put(s, 1, keys[5], &ids[5]))
		return -1;
	CHECK(kv_slots_find(s, keys[5]) == ids[5], "back in the chain");
	kv_slots_free(s);
	return 0;
}

int main(void)
{
	check_geometry();
	check_classes();
	check_states();
	check_collisions();
	return failures ? 1 : 0;
}
