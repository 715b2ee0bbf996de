/*
 * libFuzzer harness for kvevict's shard state files (kvi_shard_decode):
 * any bytes another node or a hostile user left in the state dir are
 * either refused with -KV_EPROTO or -KV_ECHECKSUM and a message, or hold
 * every promise of the format: records in range and order, sums that
 * agree, and an encoding that the decoded histogram reproduces byte for
 * byte.  Each input is tried as it is and with its checksum made good,
 * so the fuzzer reaches the checks behind the checksum.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>
#include "evict/shard_state.h"
#include "util/le.h"

#define ASSERT(cond) do { if (!(cond)) abort(); } while (0)

static uint64_t count[KVI_SHARD_BUCKETS], bytes[KVI_SHARD_BUCKETS];

static void one(const unsigned char *b, size_t len)
{
	struct kvi_shard_state s;
	uint64_t files = 0, sum = 0;
	void *again;
	size_t alen;
	int ret = kvi_shard_decode(b, len, &s);

	if (ret < 0) {
		ASSERT(ret == -KV_EPROTO || ret == -KV_ECHECKSUM);
		ASSERT(kv_error_detail()[0] != '\0');
		return;
	}
	ASSERT(s.records <= KVI_SHARD_BUCKETS && s.index < s.count);
	ASSERT(s.count <= KV_EVICT_MAX_SHARDS && s.cand_bytes <= s.cache_bytes);
	ASSERT(s.fs_used_bytes <= s.fs_total_bytes && s.round_s > 0);
	memset(count, 0, sizeof(count));
	memset(bytes, 0, sizeof(bytes));
	kvi_shard_add(b, &s, count, bytes);
	for (unsigned i = 0; i < KVI_SHARD_BUCKETS; i++) {
		files += count[i];
		sum += bytes[i];
	}
	ASSERT(sum == s.cand_bytes && files <= (1ull << 40));
	ASSERT(kvi_shard_encode(&s, count, bytes, &again, &alen) == 0);
	ASSERT(alen == len && !memcmp(again, b, len));
	free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *b;

	if (size > KVI_SHARD_MAX_BYTES + 8)
		return 0;
	one(data, size);
	if (size < 8)
		return 0;
	b = malloc(size);
	if (!b)
		return 0;
	memcpy(b, data, size);
	kvi_put_le(b + size - 8, kv_xxh3(b, size - 8), 8);
	one(b, size);
	free(b);
	return 0;
}
