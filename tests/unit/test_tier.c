/* Tiers alone and chained: mem -> file -> mem round trips with spill,
 * promotion and write-through, LRU order, failures that lose nothing,
 * spills that skip a copy already below, promotion on a second hit; the
 * bounded file tier's LRU by last use, rebuilt at reopen, its spills, a
 * failed spill that fails the put; kv_tier_demote's rule for a move
 * down; a bounded tier its caller moves blocks out of, three tiers
 * under threads, and what each tier reports of its changes. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <kv/kv.h>
#include <kv/tier.h>
#include "check.h"

#define BLOCK	20000
#define NBLOCKS	12

static char keys[NBLOCKS][256];
static unsigned char data[NBLOCKS][BLOCK];

static void make_blocks(void)
{
	unsigned long long x = (unsigned long long)kv_now_ns() | 1;

	for (int i = 0; i < NBLOCKS; i++) {
		char hash[17];

		snprintf(hash, sizeof(hash), "%016llx", 0x1234abcd00ull + (unsigned)i * 7919);
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

/* Block i must come back whole and unchanged. */
static int expect(struct kv_tier *t, int i, size_t len)
{
	static unsigned char buf[BLOCK + 100];
	size_t got = 0;
	int r;

	memset(buf, 0xA5, sizeof(buf));
	r = kv_tier_get(t, keys[i], buf, sizeof(buf), &got);
	CHECK(r == 0, "get block %d: %s", i, kv_strerror(r));
	CHECK(got == len, "block %d: %zu bytes, want %zu", i, got, len);
	CHECK(memcmp(buf, data[i], len) == 0, "block %d differs", i);
	return 0;
}

static int check_mem_alone(void)
{
	struct kv_tier_mem_opts o = { .slot_bytes = BLOCK, .slots = 3 };
	struct kv_tier_stat st;
	struct kv_tier *t;
	unsigned char small[8];
	size_t len;

	CHECK(kv_tier_mem_open(&o, &t) == 0, "mem open");
	CHECK(kv_tier_get(t, keys[0], small, sizeof(small), &len) == -ENOENT, "empty get");
	CHECK(kv_tier_has(t, keys[0]) == -ENOENT, "empty has");
	for (int i = 0; i < 3; i++)
		CHECK(kv_tier_put(t, keys[i], data[i], BLOCK) == 0, "put %d", i);
	CHECK(expect(t, 0, BLOCK) == 0, "get 0");
	/* 0 was used last, so 1 is the least recently used and goes. */
	CHECK(kv_tier_put(t, keys[3], data[3], BLOCK) == 0, "put 3");
	CHECK(kv_tier_has(t, keys[1]) == -ENOENT, "LRU victim kept");
	CHECK(kv_tier_has(t, keys[0]) == 0 && kv_tier_has(t, keys[2]) == 0 &&
	      kv_tier_has(t, keys[3]) == 0, "wrong victim");
	/* Overwrite in place with a shorter block. */
	CHECK(kv_tier_put(t, keys[0], data[0], 100) == 0, "overwrite");
	CHECK(expect(t, 0, 100) == 0, "overwritten");
	CHECK(kv_tier_get(t, keys[2], small, sizeof(small), &len) == -EFBIG, "short cap");
	CHECK(kv_tier_put(t, keys[4], data[4], 4096 * 5 + 1) == -EFBIG, "over slot");
	CHECK(kv_tier_put(t, "", data[4], 1) == -EINVAL, "empty key");
	CHECK(kv_tier_stat(t, &st) == 0, "stat");
	CHECK(!strcmp(st.kind, "mem") && st.blocks == 3 && st.evictions == 1 &&
	      st.spills == 0 && st.used_bytes == 100 + 2 * BLOCK &&
	      st.capacity_bytes == 3 * 20480, "stat: %llu blocks %llu used",
	      (unsigned long long)st.blocks, (unsigned long long)st.used_bytes);
	CHECK(kv_tier_del(t, keys[2]) == 0, "del");
	CHECK(kv_tier_del(t, keys[2]) == -ENOENT, "del twice");
	CHECK(kv_tier_has(t, keys[2]) == -ENOENT, "deleted still there");
	kv_tier_close(t);
	return 0;
}

/* mem (3 slots) over file: every block stays reachable; a miss in mem
 * reads through and promotes. */
static int check_mem_file(const char *root, struct kv_dma *dma)
{
	struct kv_tier_mem_opts mo = { .slot_bytes = BLOCK, .slots = 3, .dma = dma };
	struct kv_tier *mem, *file;
	struct kv_tier_stat ms, fs;
	int r;

	CHECK(kv_tier_mem_open(&mo, &mem) == 0, "mem open");
	r = kv_tier_file_open(root, NULL, &file);
	CHECK(r == 0, "file open: %s", kv_strerror(r));
	CHECK(kv_tier_chain(mem, file, KV_TIER_SPILL | KV_TIER_PROMOTE) == 0, "chain");
	CHECK(kv_tier_chain(file, mem, 0) == -ELOOP, "cycle allowed");
	for (int i = 0; i < NBLOCKS; i++) {
		r = kv_tier_put(mem, keys[i], data[i], BLOCK);
		CHECK(r == 0, "put %d: %s", i, kv_strerror(r));
	}
	/* The 9 oldest went down to the file tier, the 3 newest did not. */
	for (int i = 0; i < NBLOCKS; i++)
		CHECK(kv_tier_has(file, keys[i]) == (i < NBLOCKS - 3 ? 0 : -ENOENT),
		      "block %d in file tier: %d", i, kv_tier_has(file, keys[i]));
	/* Newest first: 3 hits in mem, then 9 misses read through. */
	for (int i = NBLOCKS - 1; i >= 0; i--)
		CHECK(expect(mem, i, BLOCK) == 0, "chain get %d", i);
	CHECK(kv_tier_stat(mem, &ms) == 0 && kv_tier_stat(file, &fs) == 0, "stat");
	CHECK(ms.spills >= NBLOCKS - 3 && ms.spills == ms.evictions, "spills %llu",
	      (unsigned long long)ms.spills);
	CHECK(ms.promotions == NBLOCKS - 3 && ms.misses == NBLOCKS - 3 &&
	      ms.hits == 3, "promotions %llu misses %llu hits %llu",
	      (unsigned long long)ms.promotions, (unsigned long long)ms.misses,
	      (unsigned long long)ms.hits);
	CHECK(fs.hits == NBLOCKS - 3 && !strcmp(fs.kind, "file") &&
	      fs.capacity_bytes > 0, "file stat");
	/* The last one read came back up: it hits in mem now. */
	CHECK(expect(mem, 0, BLOCK) == 0, "promoted");
	CHECK(kv_tier_stat(mem, &ms) == 0 && ms.hits == 4, "promoted block missed");
	/* del reaches every tier. */
	CHECK(kv_tier_del(mem, keys[0]) == 0, "del");
	CHECK(kv_tier_has(mem, keys[0]) == -ENOENT && kv_tier_has(file, keys[0]) == -ENOENT,
	      "del left a copy");
	CHECK(kv_tier_del(mem, keys[0]) == -ENOENT, "second del");
	CHECK(kv_tier_put(file, "../escape.bin", data[0], 1) == -KV_EBADPATH,
	      "file tier took a path outside the layout");
	CHECK(access(root, F_OK) == 0, "root gone");
	kv_tier_close(mem);
	kv_tier_close(file);
	return 0;
}

static int check_write_through(const char *root)
{
	struct kv_tier_mem_opts mo = { .slot_bytes = BLOCK, .slots = 2 };
	struct kv_tier *mem, *file;

	CHECK(kv_tier_mem_open(&mo, &mem) == 0, "mem open");
	CHECK(kv_tier_file_open(root, NULL, &file) == 0, "file open");
	CHECK(kv_tier_chain(mem, file, KV_TIER_WRITE_THROUGH) == 0, "chain");
	CHECK(kv_tier_put(mem, keys[5], data[5], BLOCK) == 0, "put");
	CHECK(kv_tier_has(file, keys[5]) == 0, "not written through");
	CHECK(expect(file, 5, BLOCK) == 0, "file copy");
	kv_tier_close(mem);
	kv_tier_close(file);
	return 0;
}

/* A spill that fails (the tier below has smaller slots) fails the put
 * and evicts nothing. */
static int check_failed_spill(void)
{
	struct kv_tier_mem_opts big = { .slot_bytes = BLOCK, .slots = 1 };
	struct kv_tier_mem_opts small = { .slot_bytes = 4096, .slots = 4 };
	struct kv_tier *up, *down;
	int r;

	CHECK(kv_tier_mem_open(&big, &up) == 0 && kv_tier_mem_open(&small, &down) == 0,
	      "open");
	CHECK(kv_tier_chain(up, down, KV_TIER_SPILL) == 0, "chain");
	CHECK(kv_tier_put(up, keys[0], data[0], BLOCK) == 0, "put");
	r = kv_tier_put(up, keys[1], data[1], BLOCK);
	CHECK(r == -EFBIG, "put needing a failed spill: %d", r);
	CHECK(expect(up, 0, BLOCK) == 0, "victim lost");
	CHECK(kv_tier_has(up, keys[1]) == -ENOENT, "new block half stored");
	kv_tier_close(up);
	kv_tier_close(down);
	return 0;
}

/* An evicted block already below with the same size is not written
 * again, and counts as a spill; one of another size below is. */
static int check_spill_already_below(void)
{
	struct kv_tier_mem_opts one = { .slot_bytes = BLOCK, .slots = 1 };
	struct kv_tier_mem_opts four = { .slot_bytes = BLOCK, .slots = 4 };
	struct kv_tier *up, *down;
	struct kv_tier_stat us, ds;

	CHECK(kv_tier_mem_open(&one, &up) == 0 && kv_tier_mem_open(&four, &down) == 0, "open");
	CHECK(kv_tier_chain(up, down, KV_TIER_SPILL) == 0, "chain");
	CHECK(kv_tier_put(down, keys[0], data[0], BLOCK) == 0, "put 0 below");
	CHECK(kv_tier_put(down, keys[1], data[1], 100) == 0, "put 1 below, shorter");
	CHECK(kv_tier_put(up, keys[0], data[0], BLOCK) == 0, "put 0");
	CHECK(kv_tier_put(up, keys[1], data[1], BLOCK) == 0, "put 1, evicting 0");
	CHECK(kv_tier_put(up, keys[2], data[2], BLOCK) == 0, "put 2, evicting 1");
	CHECK(kv_tier_stat(up, &us) == 0 && kv_tier_stat(down, &ds) == 0, "stat");
	CHECK(ds.puts == 3, "below: %llu puts, want 0 not written again",
	      (unsigned long long)ds.puts);
	CHECK(us.spills == 2 && us.evictions == 2, "%llu spills, %llu evictions",
	      (unsigned long long)us.spills, (unsigned long long)us.evictions);
	CHECK(expect(down, 0, BLOCK) == 0 && expect(down, 1, BLOCK) == 0, "spilled copies");
	kv_tier_close(up);
	kv_tier_close(down);
	return 0;
}

/* KV_TIER_PROMOTE_SECOND_HIT: a block read through once stays below, a
 * second read promotes it, and a one-slot memory forgets a first hit
 * when another key takes its slot. */
static int check_second_hit(const char *root)
{
	struct kv_tier_mem_opts mo = { .slot_bytes = BLOCK, .slots = 3 };
	struct kv_tier *mem, *file;
	struct kv_tier_stat st;
	struct kv_hits *h;

	CHECK(kv_tier_mem_open(&mo, &mem) == 0 && kv_tier_file_open(root, NULL, &file) == 0,
	      "open");
	CHECK(kv_tier_chain(mem, file, KV_TIER_PROMOTE | KV_TIER_PROMOTE_SECOND_HIT) == -EINVAL,
	      "both promotions taken");
	CHECK(kv_tier_chain(mem, file, KV_TIER_PROMOTE_SECOND_HIT) == 0, "chain");
	/* The rule alone, as kvoffd asks it. */
	{
		struct kv_hits *h;

		CHECK(kv_hits_new(8, &h) == 0, "hits");
		CHECK(kv_tier_promotes(KV_TIER_PROMOTE, NULL, keys[6]) == 1 &&
		      kv_tier_promotes(0, h, keys[6]) == 0 &&
		      kv_tier_promotes(KV_TIER_PROMOTE_SECOND_HIT, h, keys[6]) == 0 &&
		      kv_tier_promotes(KV_TIER_PROMOTE_SECOND_HIT, h, keys[6]) == 1 &&
		      kv_tier_promotes(KV_TIER_PROMOTE_SECOND_HIT, h, keys[6]) == 0,
		      "first hit, second hit, never");
		kv_hits_free(h);
	}
	CHECK(kv_tier_put(file, keys[6], data[6], BLOCK) == 0, "put below");
	CHECK(expect(mem, 6, BLOCK) == 0, "first get");
	CHECK(kv_tier_stat(mem, &st) == 0 && st.blocks == 0 && st.promotions == 0,
	      "promoted on the first hit");
	CHECK(expect(mem, 6, BLOCK) == 0, "second get");
	CHECK(kv_tier_stat(mem, &st) == 0 && st.blocks == 1 && st.promotions == 1,
	      "not promoted on the second hit: %llu promotions",
	      (unsigned long long)st.promotions);
	CHECK(expect(mem, 6, BLOCK) == 0, "third get");
	CHECK(kv_tier_stat(mem, &st) == 0 && st.hits == 1, "third get missed the mem tier");
	kv_tier_close(mem);
	kv_tier_close(file);

	CHECK(kv_hits_new(0, &h) == -EINVAL, "no slots");
	CHECK(kv_hits_new(1, &h) == 0, "hits");
	CHECK(kv_hits_second(h, keys[0]) == 0 && kv_hits_second(h, keys[0]) == 1 &&
	      kv_hits_second(h, keys[0]) == 0, "first, second, first again");
	CHECK(kv_hits_second(h, keys[1]) == 0 && kv_hits_second(h, keys[0]) == 0,
	      "a first hit kept past another key's");
	kv_hits_free(h);
	return 0;
}

static int check_user_memory(struct kv_dma *dma)
{
	void *mem;
	struct kv_tier_mem_opts o = { .slot_bytes = 4096, .slots = 2, .dma = dma };
	struct kv_tier *t;

	CHECK(posix_memalign(&mem, 4096, 2 * 4096) == 0, "memalign");
	o.mem = mem;
	CHECK(kv_tier_mem_open(&o, &t) == 0, "mem over user memory");
	CHECK(kv_tier_put(t, keys[0], data[0], 4096) == 0, "put");
	CHECK(memmem(mem, 2 * 4096, data[0], 4096) != NULL, "block not in the given memory");
	CHECK(expect(t, 0, 4096) == 0, "get");
	kv_tier_close(t);
	free(mem);
	return 0;
}

struct worker {
	struct kv_tier *t;
	int id;
	int bad;
};

/* Each thread keeps writing and reading back its own blocks while the
 * others do the same, so spills and promotions interleave. */
static void *work(void *arg)
{
	struct worker *w = arg;
	static __thread unsigned char buf[BLOCK];

	for (int round = 0; round < 40; round++) {
		for (int k = w->id; k < NBLOCKS; k += 4) {
			size_t len = 0;

			if ((round + k) % 3 == 0 &&
			    kv_tier_put(w->t, keys[k], data[k], BLOCK) < 0)
				w->bad++;
			if (kv_tier_get(w->t, keys[k], buf, sizeof(buf), &len) == 0 &&
			    (len != BLOCK || memcmp(buf, data[k], BLOCK)))
				w->bad++;
		}
	}
	return NULL;
}

/* Four threads putting and getting through t; then every block must
 * be there, whole. */
static int run_workers(struct kv_tier *t)
{
	struct worker w[4];
	pthread_t th[4];

	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .t = t, .id = i };
		CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0, "pthread_create");
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(w[i].bad == 0, "thread %d saw %d bad blocks", i, w[i].bad);
	}
	for (int i = 0; i < NBLOCKS; i++)
		CHECK(expect(t, i, BLOCK) == 0, "after threads: block %d", i);
	return 0;
}

static int check_threads(const char *root)
{
	struct kv_tier_mem_opts mo = { .slot_bytes = BLOCK, .slots = 4 };
	struct kv_tier *mem, *file;

	CHECK(kv_tier_mem_open(&mo, &mem) == 0 && kv_tier_file_open(root, NULL, &file) == 0,
	      "open");
	CHECK(kv_tier_chain(mem, file, KV_TIER_SPILL | KV_TIER_PROMOTE) == 0, "chain");
	CHECK(run_workers(mem) == 0, "threads");
	kv_tier_close(mem);
	kv_tier_close(file);
	return 0;
}

/* A batch of every op in order, one request at a time in the list. */
struct batch {
	struct kv_tier_req reqs[2 * NBLOCKS];
	unsigned char bufs[2 * NBLOCKS][BLOCK];
	size_t n, next, done, failed;
};

static int batch_next(void *arg, struct kv_tier_req **req)
{
	struct batch *b = arg;

	if (b->next == b->n)
		return 0;
	*req = &b->reqs[b->next++];
	return 1;
}

static void batch_done(void *arg, struct kv_tier_req *req)
{
	struct batch *b = arg;

	b->done++;
	b->failed += req->result < 0;
}

static int count_block(const struct kv_tier_entry *e, void *arg)
{
	(*(size_t *)arg) += !e->err && e->size_bytes == BLOCK &&
			    (e->fields & KV_TIER_ENTRY_FILE);
	return 0;
}

/* Batches on the file tier (its io_uring queue) and on a chain (tier.c's
 * loop), tails, sizes and the listing. */
static int check_batches(const char *root)
{
	static struct batch b;
	struct kv_tier_mem_opts mo = { .slot_bytes = BLOCK, .slots = 2 };
	struct kv_tier *f, *m;
	unsigned char tail[100];
	uint64_t size;
	size_t listed = 0;
	int r;

	CHECK(kv_tier_file_open(root, NULL, &f) == 0, "file open");
	for (int i = 0; i < NBLOCKS; i++)
		b.reqs[i] = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = keys[i],
						  .buf = data[i], .len = BLOCK };
	b.reqs[NBLOCKS] = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = "../x.bin" };
	b.n = NBLOCKS + 1;
	r = kv_tier_batch_stream(f, batch_next, batch_done, &b);
	CHECK(r == 1 && b.done == b.n && b.failed == 1, "file puts: %d, %zu done", r, b.done);
	CHECK(kv_tier_size(f, keys[3], &size) == 0 && size == BLOCK, "size");
	CHECK(kv_tier_get_tail(f, keys[3], tail, sizeof(tail)) == 0 &&
	      !memcmp(tail, data[3] + BLOCK - sizeof(tail), sizeof(tail)), "tail");
	CHECK(kv_tier_list(f, NULL, count_block, &listed) == 0 && listed == NBLOCKS,
	      "listed %zu", listed);
	CHECK(kv_tier_mem_open(&mo, &m) == 0, "mem open");
	CHECK(kv_tier_list(m, NULL, count_block, &listed) == -EOPNOTSUPP, "mem lists");
	CHECK(kv_tier_chain(m, f, KV_TIER_PROMOTE) == 0, "chain");
	memset(&b, 0, sizeof(b));
	for (int i = 0; i < NBLOCKS; i++) {
		b.reqs[2 * i] = (struct kv_tier_req){ .op = KV_TIER_OP_GET, .key = keys[i],
						      .buf = b.bufs[i], .len = BLOCK };
		b.reqs[2 * i + 1] = (struct kv_tier_req){ .op = KV_TIER_OP_HAS, .key = keys[i] };
	}
	b.n = 2 * NBLOCKS;
	r = kv_tier_batch_stream(m, batch_next, batch_done, &b);
	CHECK(r == 0 && b.done == b.n, "chain batch: %d, %zu done", r, b.done);
	for (int i = 0; i < NBLOCKS; i++)
		CHECK(b.reqs[2 * i].done == BLOCK && !memcmp(b.bufs[i], data[i], BLOCK) &&
		      b.reqs[2 * i + 1].result == 0, "block %d through the chain", i);
	/* The mem tier answers presence with the size it holds. */
	CHECK(b.reqs[1].done == BLOCK, "size from the mem tier: %zu", b.reqs[1].done);
	kv_tier_close(m);
	kv_tier_close(f);
	return 0;
}

/* A rank dir symlinked out of the root: has, get and del all refuse,
 * and the file outside stays. */
static int check_del_beneath(const char *root)
{
	char outside[256], rankdir[256], victim[1200], bucket[600];
	const char *rank_end;
	struct kv_tier *t;
	struct stat st;
	int r;

	snprintf(outside, sizeof(outside), "%s/outside", root);
	snprintf(rankdir, sizeof(rankdir), "%s/in", root);
	CHECK(mkdir(outside, 0755) == 0 && mkdir(rankdir, 0755) == 0, "mkdir");
	rank_end = strchr(keys[5], '/');
	snprintf(bucket, sizeof(bucket), "%s/%s", outside, rank_end + 1);
	*strrchr(bucket, '/') = '\0';
	snprintf(victim, sizeof(victim), "mkdir -p '%s' && touch '%s/%s'", bucket,
		 outside, rank_end + 1);
	CHECK(system(victim) == 0, "plant");
	snprintf(victim, sizeof(victim), "%s/%.*s", rankdir, (int)(rank_end - keys[5]),
		 keys[5]);
	CHECK(symlink(outside, victim) == 0, "symlink");
	r = kv_tier_file_open(rankdir, NULL, &t);
	CHECK(r == 0, "file open: %s", kv_strerror(r));
	CHECK(kv_tier_has(t, keys[5]) < 0, "has through a symlinked rank dir");
	r = kv_tier_del(t, keys[5]);
	CHECK(r < 0, "del through a symlinked rank dir: %d", r);
	snprintf(victim, sizeof(victim), "%s/%s", outside, rank_end + 1);
	CHECK(stat(victim, &st) == 0, "del removed a file outside the root");
	kv_tier_close(t);
	return 0;
}

/* A fresh directory under root. */
static const char *subdir(const char *root, const char *name)
{
	static char path[4][128];
	static unsigned n;
	char *p = path[n++ % 4];

	snprintf(p, sizeof(path[0]), "%s/%s", root, name);
	if (mkdir(p, 0755) < 0)
		perror(p);
	return p;
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

/* The bounded file tier: least recently used out first, a get and a
 * put of a present block counting as uses; deletions and blocks too big
 * for it. */
static int check_bounded_lru(const char *base)
{
	const char *root = subdir(base, "lru");
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
	CHECK(expect(t, 0, BLOCK) == 0, "get 0");
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
static int check_bounded_reopen(const char *base)
{
	const char *root = subdir(base, "reopen");
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
	/* The root is claimed: a second bounded tier on it is refused,
	 * naming the holder, while an unbounded one may still read it. */
	{
		struct kv_tier *again, *plain;

		r = kv_tier_file_open_bounded(root, NULL, 4 * BLOCK, &again);
		CHECK(r == -EBUSY && strstr(kv_error_detail(), "pid"), "second claim: %s (%s)",
		      kv_strerror(r), kv_error_detail());
		CHECK(kv_tier_file_open(root, NULL, &plain) == 0, "unbounded open");
		kv_tier_close(plain);
	}
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
	CHECK(expect(t, 5, BLOCK) == 0 && expect(t, 6, BLOCK) == 0, "kept blocks");
	kv_tier_close(t);
	return 0;
}

/* bounded (two blocks) over an unbounded file tier: evicted blocks land
 * below, unless there already, and every block stays reachable through
 * the chain. */
static int check_bounded_spill(const char *base)
{
	const char *up_root = subdir(base, "spill-up"), *down_root = subdir(base, "spill-down");
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
		CHECK(expect(up, i, BLOCK) == 0, "through the chain: %d", i);
	CHECK(expect(down, 1, BLOCK) == 0, "spilled bytes");
	kv_tier_close(up);
	kv_tier_close(down);
	return 0;
}

/* A bounded tier's spill that fails (the memory tier below has smaller
 * slots) fails the put: the victim stays, the new block is not stored. */
static int check_bounded_failed_spill(const char *base)
{
	struct kv_tier_mem_opts small = { .slot_bytes = 4096, .slots = 4 };
	const char *root = subdir(base, "failed-spill");
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
	CHECK(expect(up, 0, BLOCK) == 0 && expect(up, 1, BLOCK) == 0, "victim lost");
	CHECK(kv_tier_has(up, keys[2]) == -ENOENT, "new block stored");
	CHECK(kv_tier_stat(up, &st) == 0 && st.blocks == 2 && st.evictions == 0,
	      "stat: %llu blocks, %llu evictions", (unsigned long long)st.blocks,
	      (unsigned long long)st.evictions);
	kv_tier_close(up);
	kv_tier_close(down);
	return 0;
}

/* kv_tier_demote, each tier asked alone as kvoffd's workers ask theirs:
 * a block goes past a tier that refuses it (slots too small) to the
 * next, is not written where a copy of its size is, is dropped when none
 * takes it or kept with KV_TIER_DEMOTE_KEEP; a missing one is -ENOENT.
 * A bounded tier's spill falls past a refusing tier the same way. */
static int check_demote(const char *base)
{
	struct kv_tier_mem_opts small = { .slot_bytes = 4096, .slots = 4 };
	struct kv_tier_mem_opts fits = { .slot_bytes = BLOCK, .slots = 4 };
	struct kv_tier *from, *tiny, *mem, *shared, *up, *below[2];
	struct kv_tier_demotion m = { 0 };
	struct kv_tier_stat st;
	int r;

	CHECK(kv_tier_file_open(subdir(base, "demote-from"), NULL, &from) == 0 &&
	      kv_tier_mem_open(&small, &tiny) == 0 && kv_tier_mem_open(&fits, &mem) == 0 &&
	      kv_tier_file_open(subdir(base, "demote-shared"), NULL, &shared) == 0, "open");
	for (int i = 0; i < 4; i++)
		CHECK(kv_tier_put(from, keys[i], data[i], BLOCK) == 0, "put %d", i);
	below[0] = tiny;
	below[1] = mem;
	r = kv_tier_demote(from, below, 2, keys[0], 0, &m);
	CHECK(r == 0 && m.dest == 1 && !m.existed && m.refused == 1 && m.refusal == -EFBIG &&
	      m.len == BLOCK, "past a refusal: %s, dest %d, refused %u", kv_strerror(r), m.dest,
	      m.refused);
	CHECK(kv_tier_has(from, keys[0]) == -ENOENT && expect(mem, 0, BLOCK) == 0, "moved");
	CHECK(kv_tier_demote(from, below, 2, keys[0], 0, &m) == -ENOENT, "gone: ENOENT");

	/* A copy of its size below: found, not written again. */
	CHECK(kv_tier_put(shared, keys[1], data[1], BLOCK) == 0, "put below");
	below[0] = shared;
	r = kv_tier_demote(from, below, 2, keys[1], 0, &m);
	CHECK(r == 0 && m.dest == 0 && m.existed, "copy below: %s, dest %d", kv_strerror(r),
	      m.dest);
	CHECK(kv_tier_stat(mem, &st) == 0 && st.puts == 1, "written again: %llu puts",
	      (unsigned long long)st.puts);

	/* Nothing takes it: kept with KV_TIER_DEMOTE_KEEP, else dropped. */
	below[0] = tiny;
	r = kv_tier_demote(from, below, 1, keys[2], KV_TIER_DEMOTE_KEEP, &m);
	CHECK(r == -EFBIG && m.dest < 0 && expect(from, 2, BLOCK) == 0, "kept: %s",
	      kv_strerror(r));
	r = kv_tier_demote(from, below, 1, keys[2], 0, &m);
	CHECK(r == 0 && m.dest < 0 && m.refused == 1 && kv_tier_has(from, keys[2]) == -ENOENT,
	      "dropped: %s, dest %d", kv_strerror(r), m.dest);
	CHECK(kv_tier_demote(from, NULL, 0, keys[3], 0, &m) == 0 && m.dest < 0 &&
	      kv_tier_has(from, keys[3]) == -ENOENT, "no tier below: dropped");
	CHECK(kv_tier_demote(from, below, KV_TIER_DEPTH_MAX + 1, keys[3], 0, &m) == -EINVAL,
	      "too deep");
	kv_io_buf_free(m.buf);

	/* Several at once: each tier below asked about all of them in one
	 * batch; one missing, one found below already. */
	{
		struct kv_tier_demotion many[4] = { { .key = keys[7] }, { .key = keys[8] },
						    { .key = keys[9] }, { .key = keys[10] } };

		for (int i = 7; i < 10; i++)
			CHECK(kv_tier_put(from, keys[i], data[i], BLOCK) == 0, "put %d", i);
		CHECK(kv_tier_put(shared, keys[8], data[8], BLOCK) == 0, "put 8 below");
		below[0] = tiny;
		below[1] = shared;
		r = kv_tier_demote_many(from, below, 2, many, 4, 0);
		CHECK(r == 1 && many[3].result == -ENOENT, "%d failed, missing one %d", r,
		      many[3].result);
		for (int k = 0; k < 3; k++) {
			CHECK(many[k].result == 0 && many[k].dest == 1 && many[k].existed == (k == 1) &&
			      many[k].refused == 1, "block %d: %d, dest %d, refused %u",
			      7 + k, many[k].result, many[k].dest, many[k].refused);
			CHECK(kv_tier_has(from, keys[7 + k]) == -ENOENT && expect(shared, 7 + k, BLOCK) == 0,
			      "block %d not moved", 7 + k);
			kv_io_buf_free(many[k].buf);
		}
	}

	/* A bounded tier over the tiny tier over the shared root: its
	 * evictions land in the shared root. */
	CHECK(kv_tier_file_open_bounded(subdir(base, "demote-up"), NULL, 2 * BLOCK, &up) == 0,
	      "open bounded");
	CHECK(kv_tier_chain(up, tiny, KV_TIER_SPILL) == 0 &&
	      kv_tier_chain(tiny, shared, KV_TIER_SPILL) == 0, "chain");
	for (int i = 4; i < 7; i++)
		CHECK(kv_tier_put(up, keys[i], data[i], BLOCK) == 0, "bounded put %d", i);
	CHECK(kv_tier_stat(up, &st) == 0 && st.blocks == 2 && st.spills == 1, "bounded: %llu "
	      "blocks, %llu spills", (unsigned long long)st.blocks, (unsigned long long)st.spills);
	CHECK(expect(shared, 4, BLOCK) == 0, "spilled past the tiny tier");
	kv_tier_close(up);
	kv_tier_close(from);
	kv_tier_close(tiny);
	kv_tier_close(mem);
	kv_tier_close(shared);
	return 0;
}

struct offered {
	char keys[8][256];
	unsigned n, pass;	/* offers seen; pass the first this many */
};

static int offer(void *arg, const char *key, uint64_t size)
{
	struct offered *o = arg;

	(void)size;
	snprintf(o->keys[o->n % 8], sizeof(o->keys[0]), "%s", key);
	return o->n++ < o->pass ? 1 : 0;
}

/* A bounded tier whose blocks its caller writes and moves through its
 * own handles, as kvoffd does: the root claimed in the caller's name,
 * the index told of writes and reads, trim offering the least recently
 * used while over capacity, not those already moving, and moved
 * removing them. */
static int check_bounded_moves(const char *base)
{
	const char *root = subdir(base, "moves");
	struct kv_tier *t, *files;
	struct offered o = { .pass = 1 };
	struct kv_tier_stat st;
	char lock[512], text[256] = "";
	uint64_t size = 0;
	int moving = 0, fd;

	CHECK(kv_tier_file_open_bounded_by(root, NULL, 3 * BLOCK, "socket /x.sock", &t) == 0,
	      "open");
	snprintf(lock, sizeof(lock), "%s/" KV_TIER_LOCK, root);
	fd = open(lock, O_RDONLY);
	CHECK(fd >= 0 && read(fd, text, sizeof(text) - 1) > 0 && strstr(text, " socket /x.sock"),
	      "claim says '%s'", text);
	if (fd >= 0)
		close(fd);
	CHECK(kv_tier_file_open(root, NULL, &files) == 0, "own handle");
	for (int i = 0; i < 5; i++) {
		CHECK(kv_tier_put(files, keys[i], data[i], BLOCK) == 0, "put %d", i);
		CHECK(kv_tier_bounded_stored(t, keys[i], BLOCK) == 0, "stored %d", i);
	}
	CHECK(kv_tier_bounded_used(t, keys[0]) == 0, "used 0");
	CHECK(kv_tier_bounded_find(t, keys[1], &size, &moving) == 0 && size == BLOCK && !moving,
	      "find");
	/* Two over: 1 and 2 are the oldest (0 was used); 1 is passed, so 2
	 * and 3 are marked. */
	CHECK(kv_tier_bounded_trim(t, offer, &o) == 0 && o.n == 3, "%u offered", o.n);
	CHECK(!strcmp(o.keys[0], keys[1]) && !strcmp(o.keys[1], keys[2]) &&
	      !strcmp(o.keys[2], keys[3]), "offered out of LRU order");
	CHECK(kv_tier_bounded_find(t, keys[2], NULL, &moving) == 0 && moving, "2 not moving");
	CHECK(kv_tier_bounded_find(t, keys[1], NULL, &moving) == 0 && !moving, "1 moving");
	o.n = 0;
	CHECK(kv_tier_bounded_trim(t, offer, &o) == 0 && o.n == 0, "moving ones offered again");
	CHECK(kv_tier_bounded_moved(t, keys[2]) == 0 && kv_tier_bounded_moved(t, keys[3]) == 0,
	      "moved");
	CHECK(kv_tier_bounded_moved(t, keys[2]) == -ENOENT, "moved twice");
	CHECK(kv_tier_stat(t, &st) == 0 && st.blocks == 3 && st.used_bytes == 3 * BLOCK,
	      "stat: %llu blocks", (unsigned long long)st.blocks);
	CHECK(kv_tier_bounded_find(files, keys[0], NULL, NULL) == -EINVAL, "not bounded");
	kv_tier_close(files);
	kv_tier_close(t);
	return 0;
}

/* What tiers reported, in order. */
struct reports {
	size_t n;
	struct {
		struct kv_tier *t;
		enum kv_tier_change change;
		char key[256];
		uint64_t size;
	} r[64];
};

static void record(void *arg, struct kv_tier *t, const struct kv_tier_report *r)
{
	struct reports *log = arg;

	if (log->n == sizeof(log->r) / sizeof(log->r[0]))
		return;
	log->r[log->n].t = t;
	log->r[log->n].change = r->change;
	snprintf(log->r[log->n].key, sizeof(log->r[0].key), "%s", r->key);
	log->r[log->n].size = r->size;
	log->n++;
}

/* The next report must be this one. */
static int reported(struct reports *log, size_t *at, struct kv_tier *t,
		    enum kv_tier_change change, int i, uint64_t size)
{
	CHECK(*at < log->n, "report %zu missing (change %d of block %d)", *at, change, i);
	CHECK(log->r[*at].t == t && log->r[*at].change == change &&
	      !strcmp(log->r[*at].key, keys[i]) && log->r[*at].size == size,
	      "report %zu: change %d of '%s', %llu bytes; want change %d of block %d", *at,
	      log->r[*at].change, log->r[*at].key, (unsigned long long)log->r[*at].size,
	      change, i);
	(*at)++;
	return 0;
}

/* Each tier of a chain reports its own changes, whoever makes them, and
 * its counters count the same reports. */
static int check_reports(const char *root)
{
	static struct batch b;
	struct kv_tier_mem_opts mo = { .slot_bytes = BLOCK, .slots = 2 };
	struct kv_tier *mem, *file;
	struct kv_tier_demotion m = { 0 };
	struct kv_tier_stat ms, fs;
	struct reports log = { 0 };
	size_t at = 0;

	CHECK(kv_tier_mem_open(&mo, &mem) == 0 && kv_tier_file_open(root, NULL, &file) == 0,
	      "open");
	CHECK(kv_tier_chain(mem, file, KV_TIER_SPILL | KV_TIER_PROMOTE) == 0, "chain");
	kv_tier_report_to(mem, record, &log);
	kv_tier_report_to(file, record, &log);
	for (int i = 0; i < 3; i++)
		CHECK(kv_tier_put(mem, keys[i], data[i], BLOCK) == 0, "put %d", i);
	reported(&log, &at, mem, KV_TIER_STORED, 0, BLOCK);
	reported(&log, &at, mem, KV_TIER_STORED, 1, BLOCK);
	reported(&log, &at, file, KV_TIER_STORED, 0, BLOCK);	/* the spill lands ... */
	reported(&log, &at, mem, KV_TIER_MOVED, 0, BLOCK);	/* ... then it leaves */
	reported(&log, &at, mem, KV_TIER_STORED, 2, BLOCK);
	/* A hit below: promoted, evicting the oldest, 1. */
	CHECK(expect(mem, 0, BLOCK) == 0, "get 0");
	reported(&log, &at, file, KV_TIER_STORED, 1, BLOCK);
	reported(&log, &at, mem, KV_TIER_MOVED, 1, BLOCK);
	reported(&log, &at, mem, KV_TIER_PROMOTED, 0, BLOCK);
	/* The file tier's own batch: stored, and kept where it was there. */
	b.reqs[0] = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = keys[5], .buf = data[5],
					  .len = BLOCK };
	b.reqs[1] = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = keys[1], .buf = data[1],
					  .len = BLOCK };
	b.n = 2;
	CHECK(kv_tier_batch_stream(file, batch_next, batch_done, &b) == 0 && b.done == 2,
	      "batch");
	CHECK(b.reqs[1].existed, "a present block rewritten");
	reported(&log, &at, file, KV_TIER_STORED, 5, BLOCK);
	/* Deleted through the chain: each tier that had it. */
	CHECK(kv_tier_del(mem, keys[0]) == 0, "del");
	reported(&log, &at, mem, KV_TIER_DELETED, 0, 0);
	reported(&log, &at, file, KV_TIER_DELETED, 0, 0);
	/* Demoted with no tier below: dropped. */
	CHECK(kv_tier_demote(file, NULL, 0, keys[5], 0, &m) == 0 && m.dest < 0, "drop");
	reported(&log, &at, file, KV_TIER_DROPPED, 5, BLOCK);
	CHECK(at == log.n, "%zu reports, %zu expected", log.n, at);
	CHECK(kv_tier_stat(mem, &ms) == 0 && kv_tier_stat(file, &fs) == 0, "stat");
	CHECK(ms.puts == 3 && ms.promotions == 1 && ms.spills == 2 && ms.evictions == 2,
	      "mem counts %llu puts, %llu promotions, %llu spills, %llu evictions",
	      (unsigned long long)ms.puts, (unsigned long long)ms.promotions,
	      (unsigned long long)ms.spills, (unsigned long long)ms.evictions);
	CHECK(fs.puts == 3 && fs.evictions == 1 && fs.spills == 0, "file counts %llu puts, "
	      "%llu evictions", (unsigned long long)fs.puts, (unsigned long long)fs.evictions);
	/* Told to report to no one, it does not. */
	kv_tier_report_to(mem, NULL, &log);
	CHECK(kv_tier_put(mem, keys[6], data[6], BLOCK) == 0 &&
	      kv_tier_put(mem, keys[7], data[7], BLOCK) == 0, "put 6, 7");
	reported(&log, &at, file, KV_TIER_STORED, 2, BLOCK);	/* file still reports */
	CHECK(at == log.n, "%zu reports from mem after", log.n - at);
	kv_io_buf_free(m.buf);
	kv_tier_close(mem);
	kv_tier_close(file);
	return 0;
}

/* RAM over a bounded local tier over shared storage, as kvoffd stacks
 * them, under four threads: every block stays reachable and whole, and
 * the local tier within its capacity. */
static int check_hierarchy(const char *base)
{
	struct kv_tier_mem_opts mo = { .slot_bytes = BLOCK, .slots = 3 };
	struct kv_tier *mem, *local, *shared;
	struct kv_tier_stat st;

	CHECK(kv_tier_mem_open(&mo, &mem) == 0 &&
	      kv_tier_file_open_bounded(subdir(base, "local"), NULL, 4 * BLOCK, &local) == 0 &&
	      kv_tier_file_open(subdir(base, "shared"), NULL, &shared) == 0, "open");
	CHECK(kv_tier_chain(mem, local, KV_TIER_SPILL | KV_TIER_PROMOTE) == 0 &&
	      kv_tier_chain(local, shared, KV_TIER_SPILL | KV_TIER_PROMOTE_SECOND_HIT) == 0,
	      "chain");
	CHECK(run_workers(mem) == 0, "threads");
	CHECK(kv_tier_stat(local, &st) == 0 && st.used_bytes <= 4 * BLOCK && st.spills > 0,
	      "local: %llu bytes, %llu spills", (unsigned long long)st.used_bytes,
	      (unsigned long long)st.spills);
	kv_tier_close(mem);
	kv_tier_close(local);
	kv_tier_close(shared);
	return 0;
}

int main(void)
{
	char root[] = "/tmp/kv-test-tier-XXXXXX";
	struct kv_dma *cpu;
	struct kv_tier *t;
	struct kv_tier_gpu_opts go = { .slot_bytes = BLOCK, .slots = 2 };
	char cmd[64];

	make_blocks();
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	if (kv_dma_open(KV_DMA_DEVICE_CPU, NULL, &cpu) < 0) {
		fprintf(stderr, "open the CPU device\n");
		return 1;
	}
	check_mem_alone();
	check_mem_file(subdir(root, "a"), NULL);
	check_mem_file(subdir(root, "b"), cpu);
	check_threads(subdir(root, "c"));
	check_batches(subdir(root, "d"));
	check_write_through(root);
	check_failed_spill();
	check_spill_already_below();
	check_second_hit(root);
	check_bounded_lru(root);
	check_bounded_reopen(root);
	check_bounded_spill(root);
	check_bounded_failed_spill(root);
	check_demote(root);
	check_bounded_moves(root);
	check_hierarchy(root);
	check_reports(subdir(root, "reports"));
	check_user_memory(cpu);
	check_del_beneath(root);
	if (kv_tier_gpu_open(cpu, &go, &t) != -KV_ENODEV) {
		fprintf(stderr, "GPU tier opened on the CPU device\n");
		failures++;
	}
	kv_dma_close(cpu);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return failures ? 1 : 0;
}
