/*
 * The state file one kvevict shard writes for the others of its round
 * (kv(7) "Eviction shard state"): what it scanned of one stage, with a
 * sparse age histogram keyed to the round's reference time, so that the
 * files of all shards merge exactly.  Format version 1, little-endian:
 *
 *    0  4  magic "KVSH"          40  8  cache bytes
 *    4  4  version (1)           48  8  candidate bytes
 *    8  4  flags (bit 0: dry)    56  8  fs used bytes (statvfs)
 *   12  4  shard index           64  8  fs total bytes (used + avail)
 *   16  4  shard count           72  4  sub bits (9)
 *   20  4  stage                 76  4  record count n
 *   24  8  round (s, the epoch)  80     n records of 16 bytes: u32 age
 *   32  8  targets (XXH3-64)            bucket, u32 files, u64 bytes
 *                                80+16n 8  XXH3-64 of bytes 0..80+16n
 */
#ifndef KV_EVICT_SHARD_STATE_H
#define KV_EVICT_SHARD_STATE_H

#include <stddef.h>
#include <stdint.h>

#define KVI_SHARD_VERSION	1
#define KVI_SHARD_SUB_BITS	9
#define KVI_SHARD_BUCKETS	((64u - KVI_SHARD_SUB_BITS + 1) << KVI_SHARD_SUB_BITS)
#define KVI_SHARD_HEADER_BYTES	80u
#define KVI_SHARD_RECORD_BYTES	16u
#define KVI_SHARD_SUM_BYTES	8u
#define KVI_SHARD_MAX_BYTES	(KVI_SHARD_HEADER_BYTES + \
				 KVI_SHARD_BUCKETS * KVI_SHARD_RECORD_BYTES + \
				 KVI_SHARD_SUM_BYTES)
#define KVI_SHARD_FLAG_DRY	1u
#define KVI_SHARD_MAX_STAGES	65u	/* a stage per quota, then the global one */

struct kvi_shard_state {
	uint32_t flags;
	uint32_t index, count, stage;
	int64_t round_s;		/* the round's reference time */
	uint64_t targets;		/* XXH3-64 of the targets' text */
	uint64_t cache_bytes;		/* blocks, configs, temps scanned */
	uint64_t cand_bytes;		/* the histogram's bytes */
	uint64_t fs_used_bytes, fs_total_bytes;
	uint32_t records;		/* decode: non-empty buckets */
};

/* Encode s and a histogram of KVI_SHARD_BUCKETS buckets indexed oldest
 * first (index KVI_SHARD_BUCKETS - 1 - age bucket) into a malloc'ed
 * *buf of *len bytes; only non-empty buckets are written.  -EOVERFLOW
 * when a bucket holds 2^32 files or more, -ENOMEM. */
int kvi_shard_encode(const struct kvi_shard_state *s, const uint64_t *count,
		     const uint64_t *bytes, void **buf, size_t *len);

/* Check len bytes at buf: size, checksum, header and every record;
 * 0 with *s filled, or -KV_ECHECKSUM / -KV_EPROTO with the reason in
 * kv_error_detail(). */
int kvi_shard_decode(const void *buf, size_t len, struct kvi_shard_state *s);

/* Add the histogram of a buf kvi_shard_decode accepted to count and
 * bytes (oldest first), saturating. */
void kvi_shard_add(const void *buf, const struct kvi_shard_state *s,
		   uint64_t *count, uint64_t *bytes);

#endif
