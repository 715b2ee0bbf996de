/* The slot store alone: geometry of two classes in one pool, pages
 * handed to a class and taken back whole, index insert/find/remove with
 * chains of keys in one bucket, LRU order and touch per class, one clock
 * of last use, free-list reuse, a full class, usage totals. */
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
	const uint64_t bad[] = { LARGE, SMALL }, zero[] = { 0 }, cls[] = { SMALL, LARGE };
	struct kv_slots *s;

	CHECK(kv_slots_new(bad, 2, LARGE, &s) == -EINVAL, "classes out of order");
	CHECK(kv_slots_new(zero, 1, LARGE, &s) == -EINVAL, "empty class");
	CHECK(kv_slots_new(cls, 0, LARGE, &s) == -EINVAL, "no class");
	CHECK(kv_slots_new(cls, 2, LARGE - 1, &s) == -EINVAL, "no page");
	/* Three pages of the largest class; the spare bytes are not used. */
	CHECK(kv_slots_new(cls, 2, 3ull * LARGE + SMALL, &s) == 0, "new");
	CHECK(kv_slots_count(s) == 3 * (LARGE / SMALL), "ids %u", kv_slots_count(s));
	CHECK(kv_slots_pool_bytes(s) == 3ull * LARGE, "pool bytes");
	CHECK(kv_slots_nclasses(s) == 2 && kv_slots_class_bytes(s, 1) == LARGE, "classes");
	CHECK(kv_slots_class(s, 0) == 0 && kv_slots_class(s, SMALL) == 0, "small class");
	CHECK(kv_slots_class(s, SMALL + 1) == 1 && kv_slots_class(s, LARGE) == 1,
	      "large class");
	CHECK(kv_slots_class(s, LARGE + 1) == -EFBIG, "no class holds it");
	CHECK(kv_slots_room(s, 0) && kv_slots_room(s, 1), "all free");
	CHECK(kv_slots_next_used(s, 0) == NONE, "none used");
	kv_slots_free(s);
	return 0;
}

/*
 * One byte budget: pages go to the class that asks, are cut into its
 * slots, and come back whole once every slot on them is free, to
 * whichever class asks next.
 */
static int check_pages(void)
{
	const uint64_t cls[] = { SMALL, LARGE };
	const uint32_t per = LARGE / SMALL;
	struct kv_slots_usage u;
	struct kv_slots *s;
	uint32_t a, b, x, y, z, first, small[LARGE / SMALL];
	char key[32];

	CHECK(kv_slots_new(cls, 2, 3ull * LARGE, &s) == 0, "new");
	if (put(s, 100, "a", &a) || put(s, SMALL, "b", &b) || put(s, LARGE, "x", &x) ||
	    put(s, SMALL + 1, "y", &y))
		return -1;
	/* Page 0 for the small class, lowest ids first; pages 1, 2 large. */
	CHECK(a == 0 && b == 1, "small ids %u %u", a, b);
	CHECK(x == per && y == 2 * per, "large ids %u %u", x, y);
	CHECK(kv_slots_offset(s, b) == SMALL && kv_slots_offset(s, x) == LARGE &&
	      kv_slots_offset(s, y) == 2ull * LARGE, "offsets");
	CHECK(kv_slots_capacity(s, b) == SMALL && kv_slots_capacity(s, x) == LARGE, "capacity");
	CHECK(kv_slots_class_of(s, a) == 0 && kv_slots_class_of(s, y) == 1, "class of");
	CHECK(kv_slots_page_of(s, b) == 0 && kv_slots_page_of(s, y) == 2, "page of");
	CHECK(kv_slots_page_ids(s, 0, &first) == per && first == 0, "small page ids");
	CHECK(kv_slots_page_ids(s, 1, &first) == 1 && first == per, "large page ids");
	/* Every page taken: the large class is full, the small one still has
	 * room on its page. */
	CHECK(kv_slots_alloc(s, LARGE, "z", &z) == -ENOSPC, "large full");
	CHECK(!kv_slots_room(s, 1) && kv_slots_room(s, 0), "room");
	CHECK(kv_slots_alloc(s, LARGE + 1, "z", &z) == -EFBIG, "too large");
	for (uint32_t k = 2; k < per; k++) {
		snprintf(key, sizeof(key), "s%u", k);
		if (put(s, SMALL, key, &small[k]))
			return -1;
	}
	CHECK(kv_slots_alloc(s, 1, "z", &z) == -ENOSPC && !kv_slots_room(s, 0), "small full");
	kv_slots_usage(s, &u);
	CHECK(u.slots_used == per + 2, "slots used %u", u.slots_used);
	CHECK(u.pool_bytes_used == 3ull * LARGE, "pool bytes used %llu",
	      (unsigned long long)u.pool_bytes_used);
	CHECK(u.len_bytes == 100ull + SMALL + LARGE + SMALL + 1 + (per - 2) * (uint64_t)SMALL,
	      "len bytes");

	/* x's page comes free and goes to the small class, cut into its
	 * slots; then back, whole, to the large class. */
	kv_slots_release(s, x);
	CHECK(kv_slots_room(s, 0) && kv_slots_room(s, 1), "an empty page is room for both");
	CHECK(kv_slots_alloc(s, 1, "c", &z) == 0 && z == per, "small slot on page 1: %u", z);
	CHECK(kv_slots_offset(s, z) == LARGE && kv_slots_capacity(s, z) == SMALL &&
	      kv_slots_class_of(s, z) == 0, "page 1 is small now");
	CHECK(kv_slots_page_ids(s, 1, &first) == per, "page 1 ids");
	CHECK(!kv_slots_room(s, 1), "no room for a large block beside c");
	kv_slots_release(s, z);
	CHECK(kv_slots_alloc(s, LARGE, "x2", &z) == 0 && z == per &&
	      kv_slots_capacity(s, z) == LARGE, "page 1 large again");
	/* Its former small slots are off the small class's free list. */
	CHECK(kv_slots_alloc(s, 1, "c", &z) == -ENOSPC, "small full again");

	/* Walking the slots in use visits the pages' used ids only. */
	{
		uint32_t n = 0, last = 0;

		for (uint32_t i = kv_slots_next_used(s, 0); i != NONE;
		     i = kv_slots_next_used(s, i + 1), n++)
			last = i;
		CHECK(n == per + 2 && last == 2 * per, "walked %u, last %u", n, last);
		CHECK(kv_slots_next_used(s, per + 1) == 2 * per, "skips the rest of page 1");
	}
	kv_slots_free(s);
	return 0;
}

/* Classes age apart, each with its own oldest block, and one clock
 * orders last uses across them. */
static int check_classes(void)
{
	const uint64_t cls[] = { SMALL, LARGE };
	struct kv_slots *s;
	uint32_t a, b, c, x, y, z;

	CHECK(kv_slots_new(cls, 2, 3ull * LARGE, &s) == 0, "new");
	CHECK(kv_slots_oldest(s, 0) == NONE && kv_slots_oldest(s, 1) == NONE, "empty LRU");
	if (put(s, 100, "a", &a) || put(s, LARGE, "x", &x) || put(s, SMALL, "b", &b) ||
	    put(s, 5000, "c", &c) || put(s, SMALL + 1, "y", &y))
		return -1;
	/* Oldest first per class, newer toward the front. */
	CHECK(kv_slots_oldest(s, 0) == a, "oldest small");
	CHECK(kv_slots_newer(s, a) == b && kv_slots_newer(s, b) == c &&
	      kv_slots_newer(s, c) == NONE, "small LRU order");
	CHECK(kv_slots_oldest(s, 1) == x && kv_slots_newer(s, x) == y &&
	      kv_slots_newer(s, y) == NONE, "large LRU order");
	CHECK(kv_slots_last_use(s, a) < kv_slots_last_use(s, x) &&
	      kv_slots_last_use(s, x) < kv_slots_last_use(s, b), "one clock");
	kv_slots_touch(s, a);
	CHECK(kv_slots_oldest(s, 0) == b && kv_slots_newer(s, c) == a, "touch moves a");
	CHECK(kv_slots_oldest(s, 1) == x, "touch in one class leaves the other");
	CHECK(kv_slots_last_use(s, a) > kv_slots_last_use(s, y), "a is newest of all");

	/* Evict the small class's oldest; its slot is the next one out. */
	z = kv_slots_oldest(s, 0);
	kv_slots_release(s, z);
	CHECK(kv_slots_find(s, "b") == NONE, "released b is gone");
	if (put(s, 1, "d", &z))
		return -1;
	CHECK(z == b, "free slot reused: %u, want %u", z, b);
	CHECK(kv_slots_oldest(s, 0) == c, "d is newest");

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
	const uint64_t one = SMALL;
	struct kv_slots *s;
	uint32_t a, b;

	CHECK(kv_slots_new(&one, 1, 4 * SMALL, &s) == 0, "new");
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
	const uint64_t one = 4096;
	char keys[N][32];
	uint32_t ids[N];
	struct kv_slots *s;
	uint64_t want = 0;
	int n = 0;

	/* 12 slots get 16 buckets, so equal low 4 bits share one. */
	for (unsigned k = 0; n < N; k++) {
		char key[32];
		uint64_t h;

		snprintf(key, sizeof(key), "blk/%u.bin", k);
		h = XXH3_64bits(key, strlen(key)) & 15;
		if (k == 0)
			want = h;
		if (h == want)
			strcpy(keys[n++], key);
	}
	CHECK(kv_slots_new(&one, 1, N * 4096, &s) == 0, "new");
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
	check_pages();
	check_classes();
	check_states();
	check_collisions();
	return failures ? 1 : 0;
}
