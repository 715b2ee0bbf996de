/*
 * Encoding and strict decoding of kvevict's shard state files.  They sit
 * on a shared volume that other nodes (and anyone with write access)
 * write to, so a reader bounds the size before reading, checks the
 * checksum, and then checks every field against what a shard can have
 * seen: a file that fails is ignored by the caller, never trusted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <kv/errors.h>
#include <kv/evict.h>
#include <kv/integrity.h>
#include "evict/shard_state.h"
#include "util/error.h"
#include "util/le.h"

static const unsigned char magic[4] = { 'K', 'V', 'S', 'H' };

/* Bounds far above any real volume (4 EiB, 2^40 files), so that sums of
 * up to KV_EVICT_MAX_SHARDS files stay exact. */
#define MAX_BYTES	(1ull << 62)
#define MAX_FILES	(1ull << 40)

int kvi_shard_encode(const struct kvi_shard_state *s, const uint64_t *count,
		     const uint64_t *bytes, void **buf, size_t *len)
{
	unsigned char *b, *p;
	uint32_t n = 0;

	for (unsigned i = 0; i < KVI_SHARD_BUCKETS; i++) {
		if (count[i] > UINT32_MAX)
			return -EOVERFLOW;
		n += count[i] != 0;
	}
	*len = KVI_SHARD_HEADER_BYTES + (size_t)n * KVI_SHARD_RECORD_BYTES +
	       KVI_SHARD_SUM_BYTES;
	b = malloc(*len);
	if (!b)
		return -ENOMEM;
	p = (unsigned char *)memcpy(b, magic, sizeof(magic)) + sizeof(magic);
	p = kvi_put_le(p, KVI_SHARD_VERSION, 4);
	p = kvi_put_le(p, s->flags, 4);
	p = kvi_put_le(p, s->index, 4);
	p = kvi_put_le(p, s->count, 4);
	p = kvi_put_le(p, s->stage, 4);
	p = kvi_put_le(p, (uint64_t)s->round_s, 8);
	p = kvi_put_le(p, s->targets, 8);
	p = kvi_put_le(p, s->cache_bytes, 8);
	p = kvi_put_le(p, s->cand_bytes, 8);
	p = kvi_put_le(p, s->fs_used_bytes, 8);
	p = kvi_put_le(p, s->fs_total_bytes, 8);
	p = kvi_put_le(p, KVI_SHARD_SUB_BITS, 4);
	p = kvi_put_le(p, n, 4);
	/* Youngest first: age buckets ascending. */
	for (unsigned i = KVI_SHARD_BUCKETS; i-- > 0;) {
		if (!count[i])
			continue;
		p = kvi_put_le(p, KVI_SHARD_BUCKETS - 1 - i, 4);
		p = kvi_put_le(p, count[i], 4);
		p = kvi_put_le(p, bytes[i], 8);
	}
	kvi_put_le(p, kv_xxh3(b, (size_t)(p - b)), 8);
	*buf = b;
	return 0;
}

/* The records: age buckets strictly ascending, none empty, sums that
 * agree with the header and stay within bounds. */
static int check_records(const unsigned char *p, const struct kvi_shard_state *s)
{
	uint64_t files = 0, bytes = 0;
	int64_t last = -1;

	for (uint32_t r = 0; r < s->records; r++, p += KVI_SHARD_RECORD_BYTES) {
		uint64_t age = kvi_get_le(p, 4), n = kvi_get_le(p + 4, 4);
		uint64_t b = kvi_get_le(p + 8, 8);

		if (age >= KVI_SHARD_BUCKETS || (int64_t)age <= last)
			return kvi_fail(-KV_EPROTO, "record %u: bucket %llu out of order or range",
					r, (unsigned long long)age);
		if (!n)
			return kvi_fail(-KV_EPROTO, "record %u: an empty bucket", r);
		if (b > MAX_BYTES - bytes)
			return kvi_fail(-KV_EPROTO, "absurd counts: more than 2^62 bytes");
		last = (int64_t)age;
		files += n;
		bytes += b;
	}
	if (files > MAX_FILES)
		return kvi_fail(-KV_EPROTO, "absurd counts: %llu files",
				(unsigned long long)files);
	if (bytes != s->cand_bytes)
		return kvi_fail(-KV_EPROTO, "absurd counts: buckets hold %llu bytes, header %llu",
				(unsigned long long)bytes, (unsigned long long)s->cand_bytes);
	return 0;
}

int kvi_shard_decode(const void *buf, size_t len, struct kvi_shard_state *s)
{
	const unsigned char *b = buf;
	struct kvi_shard_state t;
	uint32_t version, sub_bits;

	kvi_error_clear();
	if (len < KVI_SHARD_HEADER_BYTES + KVI_SHARD_SUM_BYTES || len > KVI_SHARD_MAX_BYTES)
		return kvi_fail(-KV_EPROTO, "wrong size (%zu bytes)", len);
	if (memcmp(b, magic, sizeof(magic)))
		return kvi_fail(-KV_EPROTO, "not a shard state file");
	version = (uint32_t)kvi_get_le(b + 4, 4);
	if (version != KVI_SHARD_VERSION)
		return kvi_fail(-KV_EPROTO, "format version %u", version);
	memset(&t, 0, sizeof(t));
	t.records = (uint32_t)kvi_get_le(b + 76, 4);
	if (t.records > KVI_SHARD_BUCKETS ||
	    len != KVI_SHARD_HEADER_BYTES + (size_t)t.records * KVI_SHARD_RECORD_BYTES +
		   KVI_SHARD_SUM_BYTES)
		return kvi_fail(-KV_EPROTO, "wrong size (%zu bytes for %u records)", len,
				t.records);
	if (kvi_get_le(b + len - KVI_SHARD_SUM_BYTES, 8) != kv_xxh3(b, len - KVI_SHARD_SUM_BYTES))
		return kvi_fail(-KV_ECHECKSUM, "bad checksum");
	t.flags = (uint32_t)kvi_get_le(b + 8, 4);
	t.index = (uint32_t)kvi_get_le(b + 12, 4);
	t.count = (uint32_t)kvi_get_le(b + 16, 4);
	t.stage = (uint32_t)kvi_get_le(b + 20, 4);
	t.round_s = (int64_t)kvi_get_le(b + 24, 8);
	t.targets = kvi_get_le(b + 32, 8);
	t.cache_bytes = kvi_get_le(b + 40, 8);
	t.cand_bytes = kvi_get_le(b + 48, 8);
	t.fs_used_bytes = kvi_get_le(b + 56, 8);
	t.fs_total_bytes = kvi_get_le(b + 64, 8);
	sub_bits = (uint32_t)kvi_get_le(b + 72, 4);
	if (t.flags & ~KVI_SHARD_FLAG_DRY)
		return kvi_fail(-KV_EPROTO, "unknown flags 0x%x", t.flags);
	if (sub_bits != KVI_SHARD_SUB_BITS)
		return kvi_fail(-KV_EPROTO, "a histogram of %u sub-bucket bits", sub_bits);
	if (!t.count || t.count > KV_EVICT_MAX_SHARDS || t.index >= t.count)
		return kvi_fail(-KV_EPROTO, "shard %u of %u", t.index, t.count);
	if (t.stage >= KVI_SHARD_MAX_STAGES || t.round_s <= 0)
		return kvi_fail(-KV_EPROTO, "stage %u of round %lld", t.stage,
				(long long)t.round_s);
	if (t.cache_bytes > MAX_BYTES || t.cand_bytes > t.cache_bytes ||
	    t.fs_total_bytes > MAX_BYTES || t.fs_used_bytes > t.fs_total_bytes)
		return kvi_fail(-KV_EPROTO, "absurd counts in the header");
	if (check_records(b + KVI_SHARD_HEADER_BYTES, &t) < 0)
		return -KV_EPROTO;
	*s = t;
	return 0;
}

void kvi_shard_add(const void *buf, const struct kvi_shard_state *s,
		   uint64_t *count, uint64_t *bytes)
{
	const unsigned char *p = (const unsigned char *)buf + KVI_SHARD_HEADER_BYTES;

	for (uint32_t r = 0; r < s->records; r++, p += KVI_SHARD_RECORD_BYTES) {
		unsigned i = KVI_SHARD_BUCKETS - 1 - (unsigned)kvi_get_le(p, 4);
		uint64_t n = kvi_get_le(p + 4, 4), b = kvi_get_le(p + 8, 8);

		count[i] = count[i] > UINT64_MAX - n ? UINT64_MAX : count[i] + n;
		bytes[i] = bytes[i] > UINT64_MAX - b ? UINT64_MAX : bytes[i] + b;
	}
}
