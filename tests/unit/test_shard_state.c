/* kvevict's shard state files: round trips, merges, and every kind of
 * damaged or hostile file refused, the hostile ones with a checksum that
 * holds (patched at the offsets kv(7) gives, then summed again). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>
#include "evict/shard_state.h"
#include "util/le.h"

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
		kv_error_detail()); failures++; } } while (0)

static uint64_t count[KVI_SHARD_BUCKETS], bytes[KVI_SHARD_BUCKETS];

static struct kvi_shard_state sample(void)
{
	struct kvi_shard_state s = {
		.flags = KVI_SHARD_FLAG_DRY, .index = 2, .count = 4, .stage = 1,
		.round_s = 1790000000, .targets = 0x0123456789abcdefull,
		.cache_bytes = 1 << 20, .fs_used_bytes = 5000, .fs_total_bytes = 9000,
	};

	memset(count, 0, sizeof(count));
	memset(bytes, 0, sizeof(bytes));
	/* oldest first: the oldest bucket, a middle one, the newest */
	count[0] = 1, bytes[0] = 4096;
	count[1234] = 7, bytes[1234] = 7 * 8192;
	count[KVI_SHARD_BUCKETS - 1] = 2, bytes[KVI_SHARD_BUCKETS - 1] = 0;
	s.cand_bytes = 4096 + 7 * 8192;
	return s;
}

static void resum(unsigned char *b, size_t len)
{
	kvi_put_le(b + len - 8, kv_xxh3(b, len - 8), 8);
}

static void test_round_trip(void)
{
	struct kvi_shard_state s = sample(), d;
	static uint64_t c2[KVI_SHARD_BUCKETS], b2[KVI_SHARD_BUCKETS];
	void *buf;
	size_t len;

	CHECK(kvi_shard_encode(&s, count, bytes, &buf, &len) == 0);
	CHECK(len == 80 + 3 * 16 + 8);
	CHECK(!memcmp(buf, "KVSH", 4));
	/* Records go youngest first: the newest bucket is age bucket 0. */
	CHECK(kvi_get_le((unsigned char *)buf + 80, 4) == 0);
	CHECK(kvi_get_le((unsigned char *)buf + 96, 4) == KVI_SHARD_BUCKETS - 1 - 1234);
	CHECK(kvi_shard_decode(buf, len, &d) == 0);
	CHECK(d.flags == s.flags && d.index == 2 && d.count == 4 && d.stage == 1);
	CHECK(d.round_s == s.round_s && d.targets == s.targets);
	CHECK(d.cache_bytes == s.cache_bytes && d.cand_bytes == s.cand_bytes);
	CHECK(d.fs_used_bytes == 5000 && d.fs_total_bytes == 9000 && d.records == 3);
	/* Merging the same file twice doubles every bucket. */
	kvi_shard_add(buf, &d, c2, b2);
	kvi_shard_add(buf, &d, c2, b2);
	for (unsigned i = 0; i < KVI_SHARD_BUCKETS; i++)
		CHECK(c2[i] == 2 * count[i] && b2[i] == 2 * bytes[i]);
	/* ...and saturates rather than wraps. */
	b2[0] = UINT64_MAX - 1;
	kvi_shard_add(buf, &d, c2, b2);
	CHECK(b2[0] == UINT64_MAX);
	free(buf);

	/* An empty histogram is a header and a checksum. */
	s = sample();
	memset(count, 0, sizeof(count));
	s.cand_bytes = 0;
	CHECK(kvi_shard_encode(&s, count, bytes, &buf, &len) == 0);
	CHECK(len == 88 && kvi_shard_decode(buf, len, &d) == 0 && d.records == 0);
	free(buf);

	s = sample();
	count[5] = 1ull << 32;
	CHECK(kvi_shard_encode(&s, count, bytes, &buf, &len) == -EOVERFLOW);
}

/* Patch a copy of a good file at off (bytes wide, value v), sum it
 * again when resummed, and expect ret from the decoder. */
static void expect(const char *what, size_t off, int width, uint64_t v, int resummed, int ret)
{
	struct kvi_shard_state s = sample(), d;
	unsigned char *b;
	void *buf;
	size_t len;
	int got;

	CHECK(kvi_shard_encode(&s, count, bytes, &buf, &len) == 0);
	b = buf;
	kvi_put_le(b + off, v, width);
	if (resummed)
		resum(b, len);
	memset(&d, 0xa5, sizeof(d));
	got = kvi_shard_decode(b, len, &d);
	if (got != ret) {
		fprintf(stderr, "%s: got %d, want %d (%s)\n", what, got, ret, kv_error_detail());
		failures++;
	}
	if (ret)
		CHECK(kv_error_detail()[0] != '\0' && d.index == 0xa5a5a5a5u);
	free(buf);
}

static void test_hostile(void)
{
	struct kvi_shard_state s = sample(), d;
	unsigned char *b, big[KVI_SHARD_MAX_BYTES + 16];
	void *buf;
	size_t len;

	expect("good", 0, 0, 0, 1, 0);
	expect("checksum", 50, 1, 0xff, 0, -KV_ECHECKSUM);
	expect("magic", 0, 1, 'X', 1, -KV_EPROTO);
	expect("version", 4, 4, 2, 1, -KV_EPROTO);
	expect("flags", 8, 4, 2, 1, -KV_EPROTO);
	expect("index", 12, 4, 4, 1, -KV_EPROTO);
	expect("count 0", 16, 4, 0, 1, -KV_EPROTO);
	expect("count", 16, 4, KV_EVICT_MAX_SHARDS + 1, 1, -KV_EPROTO);
	expect("stage", 20, 4, KVI_SHARD_MAX_STAGES, 1, -KV_EPROTO);
	expect("round", 24, 8, 0, 1, -KV_EPROTO);
	expect("negative round", 24, 8, (uint64_t)-5, 1, -KV_EPROTO);
	expect("cache < candidates", 40, 8, 10, 1, -KV_EPROTO);
	expect("cache", 40, 8, 1ull << 63, 1, -KV_EPROTO);
	expect("fs used > total", 56, 8, 9001, 1, -KV_EPROTO);
	expect("fs total", 64, 8, UINT64_MAX, 1, -KV_EPROTO);
	expect("sub bits", 72, 4, 12, 1, -KV_EPROTO);
	expect("records", 76, 4, 2, 1, -KV_EPROTO);
	expect("records", 76, 4, 4, 1, -KV_EPROTO);
	expect("records", 76, 4, UINT32_MAX, 1, -KV_EPROTO);
	/* record 1 at 96: its bucket, files, bytes */
	expect("bucket order", 96, 4, 0, 1, -KV_EPROTO);
	expect("bucket range", 112, 4, KVI_SHARD_BUCKETS, 1, -KV_EPROTO);
	expect("empty bucket", 100, 4, 0, 1, -KV_EPROTO);
	expect("bytes disagree", 104, 8, 7 * 8192 + 1, 1, -KV_EPROTO);
	expect("absurd bytes", 104, 8, UINT64_MAX, 1, -KV_EPROTO);
	expect("header bytes disagree", 48, 8, 4096, 1, -KV_EPROTO);

	/* Cut short, or longer than its records say. */
	CHECK(kvi_shard_encode(&s, count, bytes, &buf, &len) == 0);
	CHECK(kvi_shard_decode(buf, len - 1, &d) == -KV_EPROTO);
	CHECK(kvi_shard_decode(buf, 0, &d) == -KV_EPROTO);
	CHECK(kvi_shard_decode(buf, 87, &d) == -KV_EPROTO);
	memcpy(big, buf, len);
	memset(big + len, 0, 16);
	CHECK(kvi_shard_decode(big, len + 16, &d) == -KV_EPROTO);
	CHECK(kvi_shard_decode(big, KVI_SHARD_MAX_BYTES + 1, &d) == -KV_EPROTO);
	free(buf);

	/* 2^40 files and more: absurd, whatever the checksum. */
	s = sample();
	memset(count, 0, sizeof(count));
	memset(bytes, 0, sizeof(bytes));
	for (unsigned i = 0; i < 300; i++)
		count[i] = UINT32_MAX;
	s.cand_bytes = 0;
	CHECK(kvi_shard_encode(&s, count, bytes, &buf, &len) == 0);
	CHECK(kvi_shard_decode(buf, len, &d) == -KV_EPROTO);
	b = buf;
	free(b);

	/* The largest file: every bucket used. */
	for (unsigned i = 0; i < KVI_SHARD_BUCKETS; i++)
		count[i] = 1, bytes[i] = 1;
	s.cand_bytes = KVI_SHARD_BUCKETS;
	CHECK(kvi_shard_encode(&s, count, bytes, &buf, &len) == 0);
	CHECK(len == KVI_SHARD_MAX_BYTES && kvi_shard_decode(buf, len, &d) == 0);
	free(buf);
}

int main(void)
{
	test_round_trip();
	test_hostile();
	return failures ? 1 : 0;
}
