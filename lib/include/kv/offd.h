#ifndef KV_OFFD_H
#define KV_OFFD_H

/*
 * kvoffd: the node-local offload daemon's wire protocol and client API.
 *
 * Control traffic is a stream of fixed-size frames (KV_OFFD_FRAME_BYTES,
 * little-endian, versioned) over a Unix stream socket; block data never
 * crosses the socket.  At connect the daemon sends a HELLO frame carrying
 * its memfd pool (SCM_RIGHTS); the client maps it and moves data by
 * memcpy (or DMA) into and out of the slot the daemon names.  Every
 * request gets exactly one reply of the same type with KV_OFFD_REPLY set,
 * in request order, so a client may send several requests before reading
 * the replies; a frame that does not decode closes the connection.  A
 * BATCH frame is followed by a payload of entries (kv_offd_batch_bytes)
 * and answered by a BATCH reply followed by one result per entry.  See
 * kvoffd(8) and kv(7).
 */

#include <stddef.h>
#include <stdint.h>
#include <kv/layout.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_OFFD_MAGIC		0x444f564bu	/* "KVOD" little-endian */
#define KV_OFFD_VERSION		4
#define KV_OFFD_FRAME_BYTES	512
#define KV_OFFD_MODEL_MAX	KV_NAME_MAX	/* model dir name, bytes */
#define KV_OFFD_HASH_MAX	KV_HASH_MAX_LEN
#define KV_OFFD_BATCH_MAX	4096		/* entries in one BATCH frame */
#define KV_OFFD_RESULT_BYTES	32		/* one BATCH reply entry */
#define KV_OFFD_CONFIG_MAX	(256u << 10)	/* a CONFIG's text, bytes */

#define KV_OFFD_REPLY		0x80u		/* type bit: daemon -> client */

enum kv_offd_type {
	KV_OFFD_HELLO = 1,	/* daemon: pool geometry, memfd attached */
	KV_OFFD_ALLOC,		/* key + len -> slot to write into */
	KV_OFFD_COMMIT,		/* slot: written, make it visible */
	KV_OFFD_ABORT,		/* slot: drop an uncommitted allocation */
	KV_OFFD_LOOKUP,		/* key -> pinned slot + len (RAM or read-through) */
	KV_OFFD_RELEASE,	/* slot: drop one pin */
	KV_OFFD_HAS,		/* key -> status 0/-ENOENT, arg where found */
	KV_OFFD_STATS,		/* -> stats body */
	KV_OFFD_LIST,		/* arg cursor -> next block at slot >= cursor;
				   reply arg: pins | on_disk << 32 */
	KV_OFFD_BATCH,		/* arg op | hash_len << 8, len entries, the
				   keyed ops' model_dir/rank/group; payload */
	KV_OFFD_TIER_STATS,	/* arg file tier -> its stats body; -ENOENT
				   past the last */
	KV_OFFD_CONFIG,		/* model_dir, len bytes of its config.json
				   follow: every file tier a block of it
				   lands on gets it */
	KV_OFFD_TYPE_MAX
};

/* ALLOC and LOOKUP replies: arg is the slot's offset in the pool (size
 * classes make slots of several sizes). */

/*
 * Checksums (protocol 4): a block's xxh3 is computed where its bytes are
 * in cache, by the client that copied them, not on the daemon's loop.
 * COMMIT arg KV_OFFD_COMMIT_SUM: sum is the client's xxh3 of the bytes it
 * wrote, taken as the block's; arg 0: the daemon computes it (a slot
 * filled by DMA, say).  A LOOKUP reply carries the block's sum for the
 * reader to check what it read against; a reader that finds other
 * bytes releases the pin with arg KV_OFFD_RELEASE_ALTERED, and the
 * daemon, finding them altered too, drops the block (counted in
 * "altered").  Write-behind checks the sum before a block reaches disk.
 */
#define KV_OFFD_COMMIT_SUM	1
#define KV_OFFD_RELEASE_ALTERED	1

/* KV_OFFD_HAS reply arg: where the block is. */
#define KV_OFFD_IN_RAM	1
#define KV_OFFD_ON_DISK	2

/* Daemon counters and gauges, every member a uint64_t so the struct is
 * also the frame's stats body, in this order. */
struct kv_offd_stats {
	uint64_t pool_bytes;		/* memfd size */
	uint64_t slot_bytes;		/* the largest class */
	uint64_t slots;			/* slots of slot_bytes the pool holds */
	uint64_t slots_used;		/* of any class: allocated, loading or
					   holding a block */
	uint64_t pool_bytes_used;	/* the bytes of those slots */
	uint64_t blocks;		/* committed blocks in RAM */
	uint64_t block_bytes;		/* their payload bytes */
	uint64_t dirty_blocks;		/* in RAM, not yet in the file tier */
	uint64_t pins;			/* outstanding pins, all clients */
	uint64_t clients;
	uint64_t hits;			/* LOOKUPs served from RAM */
	uint64_t misses;		/* LOOKUPs not in RAM */
	uint64_t puts;
	uint64_t put_bytes;
	uint64_t gets;
	uint64_t get_bytes;
	uint64_t spills;		/* blocks written behind to the file tier */
	uint64_t spill_bytes;
	uint64_t readthroughs;		/* misses loaded from the file tier */
	uint64_t readthrough_bytes;
	uint64_t evictions;		/* blocks dropped from RAM */
	uint64_t wb_queue_depth;	/* write-behind jobs queued or running */
	uint64_t wb_queue_capacity;
	uint64_t wb_drops;		/* blocks dropped from RAM unwritten */
	uint64_t wb_errors;		/* writes that failed */
	uint64_t disk_blocks;		/* block files found by the start-up walk */
	uint64_t disk_bytes;
	uint64_t refused;		/* peers refused by credentials */
	uint64_t protocol_errors;	/* clients closed for a bad frame */
	uint64_t accept_errors;		/* accepts failed for want of a descriptor */
	uint64_t alloc_refused;		/* ALLOCs over a peer's share of the pool */
	uint64_t allocs_reclaimed;	/* ALLOCs uncommitted too long, taken back */
	uint64_t altered;		/* blocks written into after COMMIT, dropped */
	uint64_t hugepages;		/* 1 if the pool is on hugetlbfs pages */
	uint64_t uptime_ns;
	uint64_t pid;
	uint64_t pins_revoked;		/* pins held past --pin-timeout while
					   puts were refused, taken back */
	uint64_t pins_refused;		/* pins refused: all the pages but one
					   per other size class held pins */
};

#define KV_OFFD_STATS_COUNT	(sizeof(struct kv_offd_stats) / sizeof(uint64_t))

/* The stats member names in order ("pool_bytes", ...); NULL past the end. */
const char *kv_offd_stats_name(size_t i);

/* Member i of a stats struct (i < KV_OFFD_STATS_COUNT). */
uint64_t kv_offd_stats_value(const struct kv_offd_stats *st, size_t i);

/* One file tier's counters and gauges (TIER_STATS replies), every
 * member a uint64_t as in kv_offd_stats. */
struct kv_offd_tier_stats {
	uint64_t tier;			/* its place, 0 nearest RAM */
	uint64_t kind;			/* KV_OFFD_TIER_LOCAL or _SHARED */
	uint64_t capacity_bytes;	/* 0: unbounded */
	uint64_t blocks;		/* bounded: in its LRU now; else found at start */
	uint64_t bytes;
	uint64_t hits;			/* read-throughs it served */
	uint64_t misses;		/* read-throughs that asked it in vain */
	uint64_t read_bytes;
	uint64_t writes;		/* blocks written into it, every way */
	uint64_t write_bytes;
	uint64_t promotions;		/* blocks copied up into it */
	uint64_t demotions;		/* blocks moved out of it, down */
	uint64_t drops;			/* blocks that left it, no tier below taking them */
	uint64_t errors;		/* reads, writes, removals that failed */
};

#define KV_OFFD_TIER_LOCAL	0
#define KV_OFFD_TIER_SHARED	1
#define KV_OFFD_TIER_STATS_COUNT (sizeof(struct kv_offd_tier_stats) / sizeof(uint64_t))

/* The tier stats member names in order ("tier", ...); NULL past the end. */
const char *kv_offd_tier_stats_name(size_t i);

/* Member i of a tier stats struct (i < KV_OFFD_TIER_STATS_COUNT). */
uint64_t kv_offd_tier_stats_value(const struct kv_offd_tier_stats *st, size_t i);

/* A decoded frame.  model_dir and hash are NUL-terminated; which fields
 * carry meaning depends on type (see kvoffd(8)); the rest are zero. */
struct kv_offd_frame {
	uint16_t type;		/* enum kv_offd_type, | KV_OFFD_REPLY */
	int32_t status;		/* replies: 0 or -errno / -KV_E* */
	uint32_t slot;
	uint32_t rank;
	uint32_t group;
	uint64_t len;
	uint64_t arg;
	char model_dir[KV_OFFD_MODEL_MAX + 1];
	char hash[KV_OFFD_HASH_MAX + 1];
	uint64_t sum;		/* COMMIT requests, LOOKUP replies: xxh3 */
	struct kv_offd_stats stats;	/* STATS replies only */
	struct kv_offd_tier_stats tier_stats;	/* TIER_STATS replies only */
};

/* Encode f into buf (KV_OFFD_FRAME_BYTES).  -KV_EPROTO if f would not
 * decode (unknown type, bad key text, a field its type does not use). */
int kv_offd_frame_encode(const struct kv_offd_frame *f, void *buf, size_t len);

/* Decode and validate any bytes: 0 and *out filled, or -KV_EPROTO (wrong
 * size, magic, version or type, non-zero padding, key text that is not a
 * safe name / lowercase hex, fields its type does not use). */
int kv_offd_frame_decode(const void *buf, size_t len, struct kv_offd_frame *out);

/*
 * BATCH payloads.  The request's entries, by op (the frame's arg & 0xff):
 * HAS, LOOKUP: hash_len bytes of lowercase hex; ALLOC: u64 len, then the
 * hash; COMMIT: u32 slot, u32 flags (as a COMMIT's arg), u64 sum;
 * RELEASE: u32 slot, u32 flags (as a RELEASE's arg); ABORT: u32 slot (no
 * key in the frame).  The reply (status 0) carries
 * len results of KV_OFFD_RESULT_BYTES each: i32 status, u32 slot, u64
 * len, u64 offset, u64 sum.
 */
struct kv_offd_batch_entry {
	uint64_t len;				/* ALLOC */
	uint32_t slot;				/* COMMIT, ABORT, RELEASE */
	uint32_t flags;				/* COMMIT, RELEASE: as their arg */
	uint64_t sum;				/* COMMIT */
	char hash[KV_OFFD_HASH_MAX + 1];	/* HAS, LOOKUP, ALLOC */
};

/* One entry's outcome: status 0 or -errno; HAS: len is where the block
 * is; LOOKUP: slot, len, offset and xxh3 of the pinned block; ALLOC:
 * slot, len and offset to fill; COMMIT, ABORT, RELEASE: slot. */
struct kv_offd_result {
	int32_t status;
	uint32_t slot;
	uint64_t len;
	uint64_t offset;
	uint64_t sum;
};

/* The payload bytes that follow a decoded frame (0 for all but BATCH
 * and CONFIG). */
size_t kv_offd_batch_bytes(const struct kv_offd_frame *f);

/* Entry i of a BATCH request f's payload: 0, or -KV_EPROTO when its hash
 * is not lowercase hex or i is past the frame's count. */
int kv_offd_batch_decode(const struct kv_offd_frame *f, const void *payload,
			 size_t i, struct kv_offd_batch_entry *e);
int kv_offd_batch_encode(const struct kv_offd_frame *f, void *payload,
			 size_t i, const struct kv_offd_batch_entry *e);

/* Result i of a BATCH reply's payload: -KV_EPROTO on a status that is
 * not 0 or -errno / -KV_E*, or non-zero fields a failure does not use. */
int kv_offd_result_decode(const void *payload, size_t i, struct kv_offd_result *r);
int kv_offd_result_encode(void *payload, size_t i, const struct kv_offd_result *r);

/* Set a frame's key from a block ref (model_dir, rank, group, hash; the
 * hash is lowercased).  -KV_EBADHASH / -KV_EBADPATH on bad text. */
int kv_offd_frame_set_key(struct kv_offd_frame *f, const struct kv_block_ref *ref);

/* The shared pool as HELLO describes it: slots in size classes, the
 * largest slot_bytes, slot ids below slots; where each slot lies comes
 * with ALLOC and LOOKUP. */
struct kv_offd_geometry {
	uint64_t pool_bytes;
	uint64_t slot_bytes;
	uint32_t slots;
};

/* Daemon side: a new connection's HELLO, status 0 with geo and pool_fd
 * (passed by SCM_RIGHTS), or a refusal (-EACCES) with neither.  Never
 * blocks; -EPIPE when the peer cannot take the frame. */
int kv_offd_hello_send(int fd, int status, int pool_fd,
		       const struct kv_offd_geometry *geo);

/* Client side: read the HELLO, fill geo and *pool_fd (the caller's to
 * close).  The refusal's status, -ECONNRESET on a closed socket, or
 * -KV_EPROTO when the frame or the geometry does not check out (the fd
 * must hold the whole pool). */
int kv_offd_hello_recv(int fd, struct kv_offd_geometry *geo, int *pool_fd);

/* ---- client ---- */

struct kv_offd;

/* How long a connect or a request waits for the daemon by default. */
#define KV_OFFD_TIMEOUT_MS	30000

/* Connect to the daemon at socket_path and map its pool.  -ENOENT or
 * -ECONNREFUSED when no daemon listens there, -EACCES when it refuses
 * this peer, -KV_EPROTO on a version mismatch, -ETIMEDOUT when it does
 * not answer within KV_OFFD_TIMEOUT_MS. */
int kv_offd_connect(const char *socket_path, struct kv_offd **out);

/* The same with a deadline of timeout_ms (0: wait for ever) for the
 * connect and for every request after it. */
int kv_offd_connect_timeout(const char *socket_path, unsigned timeout_ms,
			    struct kv_offd **out);

/* Change the deadline of every later request.  A request that runs out
 * returns -ETIMEDOUT and leaves the connection unusable (-ETIMEDOUT from
 * then on): a late reply would answer the wrong request. */
int kv_offd_set_timeout(struct kv_offd *c, unsigned timeout_ms);
void kv_offd_close(struct kv_offd *c);

/* 1 if the connection can serve no more requests: the daemon closed it
 * (it exited or restarted) or a timeout left it out of step; a caller
 * holding an idle connection then makes a new one.  One poll(2). */
int kv_offd_closed(const struct kv_offd *c);

/* The largest block the pool takes (its largest slot size). */
size_t kv_offd_slot_bytes(const struct kv_offd *c);

/* The shared pool as mapped here, e.g. to register it with the GPU
 * (cudaHostRegister) so blocks are DMA'd straight into slots. */
void *kv_offd_pool(const struct kv_offd *c, size_t *pool_bytes);

/* Copy len bytes into the RAM tier under ref's key (replacing any older
 * block there).  -EFBIG over the slot size, -ENOSPC when every slot is
 * pinned or being written.  Errors on a lost connection: -ECONNRESET. */
int kv_offd_put(struct kv_offd *c, const struct kv_block_ref *ref,
		const void *buf, size_t len);

/* Copy a block out (RAM, else read through from the file tier); *len gets
 * its size.  -ENOENT when absent from both, -EFBIG when cap is short. */
int kv_offd_get(struct kv_offd *c, const struct kv_block_ref *ref,
		void *buf, size_t cap, size_t *len);

/* 0 and *where (KV_OFFD_IN_RAM / KV_OFFD_ON_DISK) if present, -ENOENT if
 * not.  where may be NULL. */
int kv_offd_has(struct kv_offd *c, const struct kv_block_ref *ref, int *where);

/* Zero-copy forms: alloc gives a pointer into the shared pool to fill
 * (e.g. by DMA) before commit or abort; lookup gives a pinned pointer to
 * read before release. */
int kv_offd_alloc(struct kv_offd *c, const struct kv_block_ref *ref,
		  size_t len, uint32_t *slot, void **ptr);
int kv_offd_commit(struct kv_offd *c, uint32_t slot);
int kv_offd_abort(struct kv_offd *c, uint32_t slot);
int kv_offd_lookup(struct kv_offd *c, const struct kv_block_ref *ref,
		   uint32_t *slot, const void **ptr, size_t *len);
int kv_offd_release(struct kv_offd *c, uint32_t slot);

int kv_offd_stats(struct kv_offd *c, struct kv_offd_stats *out);

/* Give the daemon model_dir's config.json (len bytes of text, at most
 * KV_OFFD_CONFIG_MAX): every file tier a block of that dir lands on gets
 * it, as vLLM's readers and kvls --check expect of a cache root, though
 * none had it before.  -KV_EBADCONFIG for text that is no config,
 * -KV_EFINGERPRINT when it names another model dir. */
int kv_offd_config(struct kv_offd *c, const char *model_dir, const char *text, size_t len);

/* File tier number tier's counters; -ENOENT past the last tier. */
int kv_offd_tier_stats(struct kv_offd *c, unsigned tier, struct kv_offd_tier_stats *out);

/*
 * Batches: one request per up to KV_OFFD_BATCH_MAX keys, all of one
 * model dir, rank and group (a scheduler step's block hashes).  The
 * return is 0 once every key has its outcome in status[i] (0 or
 * -errno), or the failure of the whole call: -KV_EBADHASH / -KV_EBADPATH
 * before anything is sent, or a lost connection.
 */
struct kv_offd_keys {
	const char *model_dir;
	uint32_t rank;
	uint32_t group;
	const char *const *hashes;	/* n hex strings */
	size_t n;
};

/* A block in the pool, as alloc_many gives it to fill or lookup_many
 * pins it to read. */
struct kv_offd_block {
	uint32_t slot;
	void *ptr;
	size_t len;
};

/* where[i]: 0 absent, KV_OFFD_IN_RAM or KV_OFFD_ON_DISK. */
int kv_offd_has_many(struct kv_offd *c, const struct kv_offd_keys *k, int *where);

/* Pin each present block (reading misses through from the file tier);
 * status[i] -ENOENT for a block in neither. */
int kv_offd_lookup_many(struct kv_offd *c, const struct kv_offd_keys *k,
			struct kv_offd_block *out, int *status);

/* Slots to fill with lens[i] bytes each, then commit_many or abort_many. */
int kv_offd_alloc_many(struct kv_offd *c, const struct kv_offd_keys *k,
		       const size_t *lens, struct kv_offd_block *out, int *status);
int kv_offd_commit_many(struct kv_offd *c, const uint32_t *slots, size_t n, int *status);
int kv_offd_abort_many(struct kv_offd *c, const uint32_t *slots, size_t n, int *status);
int kv_offd_release_many(struct kv_offd *c, const uint32_t *slots, size_t n, int *status);

/* kv_offd_put and kv_offd_get over many keys: a few round trips, not
 * two per key; lens[i] gets block i's size. */
int kv_offd_put_many(struct kv_offd *c, const struct kv_offd_keys *k,
		     const void *const *bufs, const size_t *lens, int *status);
int kv_offd_get_many(struct kv_offd *c, const struct kv_offd_keys *k,
		     void *const *bufs, const size_t *caps, size_t *lens, int *status);

/* One RAM-tier block as kv_offd_list reports it. */
struct kv_offd_entry {
	struct kv_block_ref ref;	/* model_dir, rank, group, hash */
	uint64_t size_bytes;
	uint32_t slot;
	uint32_t pins;
	int on_disk;			/* written behind or read through */
};

/* Call fn for each block in the RAM tier (a consistent view per block, not
 * a snapshot of the whole pool); a non-zero return stops and is returned. */
int kv_offd_list(struct kv_offd *c,
		 int (*fn)(const struct kv_offd_entry *e, void *arg), void *arg);

#ifdef __cplusplus
}
#endif

#endif
