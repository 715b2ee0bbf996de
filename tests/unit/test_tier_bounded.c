/* The bounded file tier: least recently used out first, a get counting
 * as a use; a reopen that rebuilds the order from last use; spills into
 * the chain below; a failed spill that fails the put and loses nothing;
 * replacements, deletions and blocks too big for it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <kv/kv.h>

#define BLOCK	10000
#define NBLOCKS	8

static int failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);		\
		fprintf(stderr, __VA_ARGS__);				\
		fputc('\n', stderr);					\
		failures++;						\
		return -1;						\
	}								\
} while (0)

static char keys[NBLOCKS][256];
static unsigned char data[NBLOCKS][BLOCK];
static char base[] = "/tmp/kv-test-tier-bounded-XXXXXX";

static void make_blocks(void)
{
	unsigned long long x = (unsigned long long)kv_now_ns() | 1;

	for (int i = 0; i < NBLOCKS; i++) {
		char hash[17];

		snprintf(hash, sizeof(hash), "%016llx", 0xabc000ull + (unsigned)i);
		kv_layout_block_path("org_model_0123456789ab", 0, 0, hash, keys[i],
				     sizeof(keys[i]));
		for (int k = 0; k < BLOCK; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			data[i][k] = (unsigned char)x;
		}
	}
}

/* A fresh directory under base. */
static const char *dir(const char *name)
{
	static char path[4][128];
	static unsigned n;
	char *p = path[n++ % 4];

	snprintf(p, sizeof(path[0]), "%s/%s", base, name);
	if (mkdir(p, 0755) < 0)
		perror(p);
	return p;
}

/* Block i must come back whole and unchanged. */
static int expect(struct kv_tier *t, int i)
{
	static unsigned char buf[BLOCK];
	size_t got = 0;
	int r;

	r = kv_tier_get(t, keys[i], buf, sizeof(buf), &got);
	CHECK(r == 0, "get block %d: %s", i, kv_strerror(r));
	CHECK(got == BLOCK && memcmp(buf, data[i], BLOCK) == 0, "block %d differs", i);
	return 0;
}

/* Which of blocks 0..NBLOCKS-1 t (and its chain) has, a bit each. */
static unsigned held(struct kv_tier *t)
{
	unsigned mask = 0;

	for (int i = 0; i < NBLOCKS; i++)
		if (kv_tier_has(t, keys[i]) == 0)
			mask |= 1u << i;
	return mask;
}

/* Block i's last use, as a reader of atime sees it. */
static int set_last_use(const char *root, int i, time_t sec)
{
	struct timespec ts[2] = { { .tv_sec = sec }, { .tv_nsec = UTIME_OMIT } };
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", root, keys[i]);
	CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat %s", path);
	return 0;
}

static int check_lru(void)
{
	const char *root = dir("lru");
	struct kv_tier_stat st;
	struct kv_tier *t;
	int r;

	CHECK(kv_tier_file_open_bounded(root, NULL, 0, &t) == -EINVAL, "capacity 0");
	r = kv_tier_file_open_bounded(root, NULL, 3 * BLOCK, &t);
	CHECK(r == 0, "open: %s", kv_strerror(r));
	for (int i = 0; i < 3; i++)
		CHECK(kv_tier_put(t, keys[i], data[i], BLOCK) == 0, "put %d", i);
	CHECK(held(t) == 0x7, "held %#x", held(t));
	/* A get is a use: 1 is now the least recently used. */
	CHECK(expect(t, 0) == 0, "get 0");
	CHECK(kv_tier_put(t, keys[3], data[3], BLOCK) == 0, "put 3");
	CHECK(held(t) == 0xd, "after put 3: held %#x, want 0, 2, 3", held(t));
	/* A present block put again is a use, not a reason to evict. */
	CHECK(kv_tier_put(t, keys[2], data[2], BLOCK) == 0, "put 2 again");
	CHECK(held(t) == 0xd, "put 2 again evicted: held %#x", held(t));
	CHECK(kv_tier_put(t, keys[4], data[4], BLOCK) == 0, "put 4");
	CHECK(held(t) == 0x1c, "after put 4: held %#x, want 2, 3, 4", held(t));
	CHECK(kv_tier_put(t, keys[5], data[5], 3 * BLOCK + 1) == -EFBIG, "over capacity");
	CHECK(kv_tier_stat(t, &st) == 0, "stat");
	CHECK(!strcmp(st.kind, "file") && st.blocks == 3 && st.used_bytes == 3 * BLOCK &&
	      st.capacity_bytes == 3 * BLOCK && st.evictions == 2 && st.spills == 0,
	      "stat: %llu blocks, %llu used, %llu evictions", (unsigned long long)st.blocks,
	      (unsigned long long)st.used_bytes, (unsigned long long)st.evictions);
	CHECK(kv_tier_del(t, keys[3]) == 0, "del 3");
	CHECK(kv_tier_stat(t, &st) == 0 && st.blocks == 2 && st.used_bytes == 2 * BLOCK,
	      "stat after del: %llu blocks", (unsigned long long)st.blocks);
	CHECK(kv_tier_has(t, keys[3]) == -ENOENT, "deleted block still there");
	CHECK(kv_tier_has(t, "../escape.bin") == -KV_EBADPATH, "a key outside the layout");
	kv_tier_close(t);
	return 0;
}

/* Blocks whose last use differs from their write order come back in the
 * order of use, and a root fuller than the new capacity is trimmed. */
static int check_reopen(void)
{
	const char *root = dir("reopen");
	struct kv_tier_stat st;
	struct kv_tier *t;
	int r;

	CHECK(kv_tier_file_open_bounded(root, NULL, 4 * BLOCK, &t) == 0, "open");
	for (int i = 0; i < 4; i++)
		CHECK(kv_tier_put(t, keys[i], data[i], BLOCK) == 0, "put %d", i);
	kv_tier_close(t);
	/* Oldest first: 2, 0, 3, 1. */
	CHECK(set_last_use(root, 2, 1000000) == 0 && set_last_use(root, 0, 2000000) == 0 &&
	      set_last_use(root, 3, 3000000) == 0 && set_last_use(root, 1, 4000000) == 0,
	      "set last uses");
	r = kv_tier_file_open_bounded(root, NULL, 4 * BLOCK, &t);
	CHECK(r == 0, "reopen: %s", kv_strerror(r));
	CHECK(kv_tier_stat(t, &st) == 0 && st.blocks == 4 && st.used_bytes == 4 * BLOCK,
	      "reindexed %llu blocks, %llu bytes", (unsigned long long)st.blocks,
	      (unsigned long long)st.used_bytes);
	CHECK(kv_tier_put(t, keys[4], data[4], BLOCK) == 0, "put 4");
	CHECK(held(t) == 0x1b, "after put 4: held %#x, want 2 gone", held(t));
	CHECK(kv_tier_put(t, keys[5], data[5], BLOCK) == 0, "put 5");
	CHECK(held(t) == 0x3a, "after put 5: held %#x, want 0 gone", held(t));
	kv_tier_close(t);
	/* 3, 1, 4, 5 in a tier for two: the next put leaves room for one
	 * more.  4 and 5 were written within a clock tick of each other. */
	CHECK(set_last_use(root, 4, 5000000) == 0 && set_last_use(root, 5, 6000000) == 0,
	      "set last uses");
	CHECK(kv_tier_file_open_bounded(root, NULL, 2 * BLOCK, &t) == 0, "reopen smaller");
	CHECK(kv_tier_put(t, keys[6], data[6], BLOCK) == 0, "put 6");
	CHECK(held(t) == 0x60, "after put 6: held %#x, want 5, 6", held(t));
	CHECK(expect(t, 5) == 0 && expect(t, 6) == 0, "kept blocks");
	kv_tier_close(t);
	return 0;
}

/* bounded (two blocks) over an unbounded file tier: evicted blocks land
 * below, unless there already, and every block stays reachable through
 * the chain. */
static int check_spill(void)
{
	const char *up_root = dir("spill-up"), *down_root = dir("spill-down");
	struct kv_tier *up, *down;
	struct kv_tier_stat st;
	int r;

	CHECK(kv_tier_file_open_bounded(up_root, NULL, 2 * BLOCK, &up) == 0, "open up");
	CHECK(kv_tier_file_open(down_root, NULL, &down) == 0, "open down");
	CHECK(kv_tier_chain(up, down, KV_TIER_SPILL) == 0, "chain");
	CHECK(kv_tier_put(down, keys[0], data[0], BLOCK) == 0, "put 0 below");
	for (int i = 0; i < 5; i++) {
		r = kv_tier_put(up, keys[i], data[i], BLOCK);
		CHECK(r == 0, "put %d: %s", i, kv_strerror(r));
	}
	CHECK(held(down) == 0x07, "below: held %#x, want 0, 1, 2", held(down));
	/* 0 was below already: not written again. */
	CHECK(kv_tier_stat(down, &st) == 0 && st.puts == 3, "below: %llu puts, want 3",
	      (unsigned long long)st.puts);
	CHECK(kv_tier_stat(up, &st) == 0 && st.blocks == 2 && st.spills == 3 && st.evictions == 3,
	      "stat: %llu blocks, %llu spills", (unsigned long long)st.blocks,
	      (unsigned long long)st.spills);
	for (int i = 0; i < 5; i++)
		CHECK(expect(up, i) == 0, "through the chain: %d", i);
	CHECK(expect(down, 1) == 0, "spilled bytes");
	kv_tier_close(up);
	kv_tier_close(down);
	return 0;
}

/* A spill that fails (the memory tier below has smaller slots) fails the
 * put: the victim stays, the new block is not stored. */
static int check_failed_spill(void)
{
	struct kv_tier_mem_opts small = { .slot_bytes = 4096, .slots = 4 };
	const char *root = dir("failed-spill");
	struct kv_tier *up, *down;
	struct kv_tier_stat st;
	int r;

	CHECK(kv_tier_file_open_bounded(root, NULL, 2 * BLOCK, &up) == 0, "open up");
	CHECK(kv_tier_mem_open(&small, &down) == 0, "open down");
	CHECK(kv_tier_chain(up, down, KV_TIER_SPILL) == 0, "chain");
	CHECK(kv_tier_put(up, keys[0], data[0], BLOCK) == 0, "put 0");
	CHECK(kv_tier_put(up, keys[1], data[1], BLOCK) == 0, "put 1");
	r = kv_tier_put(up, keys[2], data[2], BLOCK);
	CHECK(r == -EFBIG, "put needing a failed spill: %s", kv_strerror(r));
	CHECK(expect(up, 0) == 0 && expect(up, 1) == 0, "victim lost");
	CHECK(kv_tier_has(up, keys[2]) == -ENOENT, "new block stored");
	CHECK(kv_tier_stat(up, &st) == 0 && st.blocks == 2 && st.evictions == 0,
	      "stat: %llu blocks, %llu evictions", (unsigned long long)st.blocks,
	      (unsigned long long)st.evictions);
	kv_tier_close(up);
	kv_tier_close(down);
	return 0;
}

int main(void)
{
	char cmd[96];

	make_blocks();
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	check_lru();
	check_reopen();
	check_spill();
	check_failed_spill();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", base);
	return failures ? 1 : 0;
}
