#ifndef KV_TIER_H
#define KV_TIER_H

/*
 * One interface over the places a block lives: CPU memory, a cache root
 * on disk, GPU memory, the node's kvoffd.  Keys are block paths in the on-disk layout
 * (kv_layout_block_path), so a block keeps its name in every tier.
 * Buffers passed to put/get are host memory in every tier.
 *
 * Tiers chain: kv_tier_chain(upper, lower, flags) lets upper spill the
 * blocks it evicts down the chain as kv_tier_demote moves them (to the
 * first tier below with a copy of the same size, or that takes one) and, on a miss, read through lower and promote what
 * it finds; a block copied into a cache root brings its model dir's
 * config.json.  A tier's calls are thread-safe.
 */

#include <stddef.h>
#include <stdint.h>
#include <kv/io.h>
#include <kv/layout.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kv_tier;
struct kv_dma;

#define KV_TIER_SPILL		(1u << 0) /* evicted blocks are put below */
#define KV_TIER_PROMOTE		(1u << 1) /* a hit below is put here too */
#define KV_TIER_WRITE_THROUGH	(1u << 2) /* puts also go below */
#define KV_TIER_PROMOTE_SECOND_HIT (1u << 3) /* a hit below is put here on
					     its second miss here (not with
					     KV_TIER_PROMOTE) */

struct kv_tier_stat {
	const char *kind;	/* "mem", "file", "s3", "gpu" or "daemon" */
	uint64_t blocks;	/* held now; unbounded file: not counted (0) */
	uint64_t used_bytes;	/* unbounded file: of the whole filesystem */
	uint64_t capacity_bytes;
	uint64_t hits;		/* gets answered by this tier */
	uint64_t misses;	/* gets this tier could not answer itself */
	uint64_t puts;
	uint64_t evictions;	/* blocks dropped for room */
	uint64_t spills;	/* evictions kept below: written there, or
				   found there already with the same size
				   (then not written again) */
	uint64_t promotions;	/* blocks copied up from below */
	uint64_t block_max_bytes; /* the largest block a put takes; 0: unknown
				     or no limit */
};

/* Store a block, replacing any under the same key.  -EFBIG if it is
 * larger than the tier's slots; when no tier below takes a block evicted
 * for room, the first refusal, and nothing is evicted. */
int kv_tier_put(struct kv_tier *t, const char *key, const void *buf,
		size_t len);

/* Read a block into buf (cap bytes), through the chain; *len gets its
 * size.  -ENOENT if no tier has it, -EFBIG if cap is too small. */
int kv_tier_get(struct kv_tier *t, const char *key, void *buf, size_t cap,
		size_t *len);

/* 0 if this tier or one below has the block, else -ENOENT. */
int kv_tier_has(struct kv_tier *t, const char *key);

/* Remove the block from this tier and every tier below; -ENOENT if
 * none had it. */
int kv_tier_del(struct kv_tier *t, const char *key);

/* Read the last len bytes of a block, as vLLM does for n blocks of a
 * partial file, through the chain; -KV_ESHORT if it is shorter,
 * -EOPNOTSUPP where a tier cannot (mem, gpu). */
int kv_tier_get_tail(struct kv_tier *t, const char *key, void *buf,
		     size_t len);

#define KV_TIER_SIZE_UNKNOWN	UINT64_MAX

/* A block's size, through the chain, without reading it: 0 and *size
 * (KV_TIER_SIZE_UNKNOWN where a tier knows the block is there but not
 * its size), or -ENOENT. */
int kv_tier_size(struct kv_tier *t, const char *key, uint64_t *size);

/* Batches, shaped like kv_io's (kv_io_batch_stream): next() hands over
 * the next request (1; 0 when it has none, though it is asked again after
 * each done(); -errno to stop), done() gets each finished one.  HAS sets
 * done to the block's size, SIZE_MAX where kv_tier_size has it unknown. */
enum kv_tier_op { KV_TIER_OP_PUT, KV_TIER_OP_GET, KV_TIER_OP_GET_TAIL, KV_TIER_OP_HAS };

struct kv_tier_req {
	enum kv_tier_op op;
	const char *key;
	void *buf;		/* PUT: payload; GET: destination */
	size_t len;		/* PUT/GET_TAIL: bytes; GET: capacity */
	size_t done;		/* out: bytes moved (HAS: the size) */
	int result;		/* out: 0 or -errno / -KV_E* */
	int existed;		/* out: PUT found the block and kept it (a
				   file tier's: see kv_io_put) */
	int keep;		/* PUT: keep a block already there, as a handle
				   opened without KV_IO_REPLACE does; a bucket
				   asks in the same request (If-None-Match), a
				   file tier goes by its handle's flags */
	void *user;
};

typedef int (*kv_tier_next_fn)(void *arg, struct kv_tier_req **req);
typedef void (*kv_tier_done_fn)(void *arg, struct kv_tier_req *req);

/* Run requests as next() gives them: the file tier keeps its io_uring
 * queue depth in flight, a bucket its requests, the daemon tier sends a
 * run of one op, model dir, rank and group as one batch (a few round
 * trips); other tiers and chains take one at a time.  A request that loses a tier's connection (-ECONNRESET, -EPIPE, -ETIMEDOUT,
 * -KV_EPROTO) ends the batch with that error after its done().  next()
 * and done() may ask the same tier kv_tier_size and kv_tier_has, not
 * move data through it.  Returns the number that failed, or -errno. */
int kv_tier_batch_stream(struct kv_tier *t, kv_tier_next_fn next,
			 kv_tier_done_fn done, void *arg);

#define KV_TIER_ENTRY_FILE	(1u << 0) /* alloc_bytes, atime_ns, mtime_ns, last_use_ns */
#define KV_TIER_ENTRY_RAM	(1u << 1) /* pins, on_disk */

/* One block as kv_tier_list reports it. */
struct kv_tier_entry {
	const char *key;	/* its block path */
	struct kv_block_ref ref;
	uint64_t size_bytes;
	unsigned fields;	/* KV_TIER_ENTRY_*: which members below hold */
	uint64_t alloc_bytes;
	int64_t atime_ns, mtime_ns;
	int64_t last_use_ns;	/* kv/lastuse.h: atime or a later recorded use */
	unsigned pins;		/* readers holding it now */
	int on_disk;		/* also in the file tier below */
	int err;		/* not 0: key is a directory that could not be
				   read (-errno), skipped; nothing else is set */
};

struct kv_tier_list_opts {
	const char *model;	/* kv_layout_model_matches filter; NULL: all */
	int rank;		/* only this rank; -1: all */
	unsigned threads;	/* file: walk threads; 0: one per CPU, at most 8 */
};

typedef int (*kv_tier_list_fn)(const struct kv_tier_entry *e, void *arg);

/* Call fn for each block this tier holds (not its chain's), in no set
 * order; a non-zero return stops and is returned.  -EOPNOTSUPP where a
 * tier cannot list (mem, gpu). */
int kv_tier_list(struct kv_tier *t, const struct kv_tier_list_opts *opts,
		 kv_tier_list_fn fn, void *arg);

/* Read a block of this tier (not its chain's) and check it against the
 * checksum kept with it: 0 it matches, -ENODATA none was kept,
 * -KV_ECHECKSUM it does not match, -ENOENT, -EOPNOTSUPP where a tier
 * keeps none (mem, gpu, daemon). */
int kv_tier_verify(struct kv_tier *t, const char *key);

/* kv_tier_verify of a block a listing gave as size bytes: one that is
 * another size now is not read, -ESTALE with both sizes in
 * kv_error_detail(). */
int kv_tier_verify_size(struct kv_tier *t, const char *key, uint64_t size);

/* Give the model dir of block key in dst the config.json src keeps for
 * it, if dst has none (cache roots keep one per model dir; buckets and
 * llmd-v0 dirs none): 0 when dst holds one now, -ENOENT when src has
 * none, -EOPNOTSUPP where either tier keeps none.  The chain does this
 * for every block it copies; a caller moving blocks between unchained
 * tiers calls it. */
int kv_tier_copy_config(struct kv_tier *dst, struct kv_tier *src, const char *key);

/* Give model_dir in t the config.json text (len bytes) if it has none:
 * a cache root writes it (-KV_EFINGERPRINT when the text names another
 * model dir), kvoffd's tier hands it to the daemon, whose file tiers
 * each get it with the first block of that dir they take.  -EOPNOTSUPP
 * where a tier keeps none (a bucket, memory). */
int kv_tier_put_config(struct kv_tier *t, const char *model_dir, const char *text, size_t len);

/* This tier's counters (not its chain's): puts, promotions, evictions
 * and spills count its reports (kv_tier_report_to), hits and misses
 * its gets. */
int kv_tier_stat(struct kv_tier *t, struct kv_tier_stat *st);

/* What a tier reports of a block of its own as it changes. */
enum kv_tier_change {
	KV_TIER_STORED,		/* a put took it (a batch PUT that found it
				   there and kept it: not reported; a single
				   put that kept it: reported) */
	KV_TIER_PROMOTED,	/* copied up into it on a hit below */
	KV_TIER_MOVED,		/* left it for a tier below: a spill, a demotion */
	KV_TIER_DROPPED,	/* left it for room, no tier below taking it */
	KV_TIER_DELETED,	/* removed by kv_tier_del */
};
struct kv_tier_report {
	enum kv_tier_change change;
	const char *key;
	uint64_t size;		/* bytes; 0 for KV_TIER_DELETED (not known) */
};
typedef void (*kv_tier_report_fn)(void *arg, struct kv_tier *t,
				  const struct kv_tier_report *r);
/* Have t report each change to fn (NULL: to no one), whoever made it: a
 * caller's put or del, the chain's spills and promotions, kv_tier_demote.
 * fn runs on the thread that made the change, maybe with t's lock held:
 * it must not call into t.  Each tier of a chain reports its own. */
void kv_tier_report_to(struct kv_tier *t, kv_tier_report_fn fn, void *arg);

/* Put lower below upper with KV_TIER_* flags; lower may have its own
 * lower.  -ELOOP if that would make a cycle, -EINVAL for both
 * KV_TIER_PROMOTE and KV_TIER_PROMOTE_SECOND_HIT. */
int kv_tier_chain(struct kv_tier *upper, struct kv_tier *lower,
		  unsigned flags);

/* Move a block out of from into the first of below[] (n of them, nearest
 * first, at most KV_TIER_DEPTH_MAX) that has a copy of the same size
 * (not written again) or takes one; a tier that refuses it is passed for
 * the next.  Then it is removed from from, taken or not (a cache drops
 * what no lower tier takes), unless flags has KV_TIER_DEMOTE_KEEP: then a
 * block no tier took stays and the first refusal is returned.  Each tier
 * is asked alone (not through its chain), so the caller may give its own
 * handles, one per thread.  A bucket is asked with one conditional PUT
 * (If-None-Match): an object at the key is the copy, whatever its size.  0 and *m, -ENOENT if from lacks it (nothing
 * done), or the error reading it (an unreadable block is removed
 * too, without KV_TIER_DEMOTE_KEEP) or removing it. */
#define KV_TIER_DEPTH_MAX	16
#define KV_TIER_DEMOTE_KEEP	(1u << 0)
struct kv_tier_demotion {
	const char *key;	/* kv_tier_demote_many: the block (in) */
	void *buf;		/* scratch for the bytes, grown as needed
				   (kv_io_buf_alloc): start NULL and 0,
				   reuse, then kv_io_buf_free */
	size_t cap;
	uint64_t len;		/* out: the block's size */
	int dest;		/* out: the index in below[] of the tier
				   holding it now; -1: none took it */
	int existed;		/* out: below[dest] had it already */
	unsigned refused;	/* out: below[] that refused it, a bit each */
	int refusal;		/* out: the first refusal's error */
	int result;		/* kv_tier_demote_many: what kv_tier_demote
				   would return for it (out) */
};
int kv_tier_demote(struct kv_tier *from, struct kv_tier *const *below, unsigned n,
		   const char *key, unsigned flags, struct kv_tier_demotion *m);
/* The same for count blocks, m[k].key each, by the same rule: each tier
 * below is asked about all of them at once (in flight together on a
 * bucket).  Returns how many failed (their m[k].result), or -EINVAL. */
int kv_tier_demote_many(struct kv_tier *from, struct kv_tier *const *below, unsigned n,
			struct kv_tier_demotion *m, size_t count, unsigned flags);
/* Close one tier (not the ones below it). */
void kv_tier_close(struct kv_tier *t);

/* The memory of first hits behind KV_TIER_PROMOTE_SECOND_HIT (and
 * kvoffd's --promote second-hit): a key hash per slot, so a flood of
 * one-off reads forgets the oldest rather than growing.  Thread-safe;
 * racing calls may both count a hit as the first. */
#define KV_HITS_SLOTS	4096	/* what the chain keeps */

struct kv_hits;

int kv_hits_new(unsigned slots, struct kv_hits **out);
void kv_hits_free(struct kv_hits *h);
/* 1 if key was hit before (then forgotten: its next hit is a first
 * again), else 0 (and remembered). */
int kv_hits_second(struct kv_hits *h, const char *key);

/* Whether a block a get found below a tier is copied up into it, by
 * promotion flags: always with KV_TIER_PROMOTE, on its second miss with
 * KV_TIER_PROMOTE_SECOND_HIT (first_hits remembering the first), else
 * never.  The chain's rule, for a caller that moves blocks itself. */
int kv_tier_promotes(unsigned flags, struct kv_hits *first_hits, const char *key);

struct kv_tier_mem_opts {
	size_t slot_bytes;	/* the largest block; rounded up to 4096 */
	unsigned slots;
	struct kv_dma *dma;	/* pin the slots for this device; NULL: not */
	void *mem;		/* carve this (slots * slot_bytes, 4096-aligned
				   slot_bytes) instead of allocating */
};

/* CPU memory: a hash table over equal slots, LRU eviction. */
int kv_tier_mem_open(const struct kv_tier_mem_opts *opts, struct kv_tier **out);

/* A cache root through the io engine; keys must be layout block paths
 * (-KV_EBADPATH otherwise). */
int kv_tier_file_open(const char *root, const struct kv_io_opts *opts,
		      struct kv_tier **out);

/* The same root holding at most capacity_bytes of blocks, in exact LRU
 * order: indexed at open, least recently used first by last use
 * (kv/lastuse.h); a put or a get is a use, has and size are not.  A put
 * that would take it past capacity_bytes first evicts the least recently
 * used blocks, each moved below by kv_tier_demote's rule when the chain
 * has KV_TIER_SPILL, else removed; when no tier below takes one the put
 * fails with the first refusal and nothing is lost.  A root found fuller than capacity_bytes is
 * trimmed by the next put.  The index answers has and size, so the tier
 * must be its root's only writer: it claims the root (KV_TIER_LOCK)
 * and fails with -EBUSY while another process (kvoffd, another bounded
 * tier) holds the claim.  -EFBIG for a block over capacity_bytes;
 * -EINVAL for a capacity of 0. */
int kv_tier_file_open_bounded(const char *root, const struct kv_io_opts *opts,
			      uint64_t capacity_bytes, struct kv_tier **out);

/* The same, the root claimed in holder's name (KV_TIER_LOCK says "pid
 * PID holder"). */
int kv_tier_file_open_bounded_by(const char *root, const struct kv_io_opts *opts,
				 uint64_t capacity_bytes, const char *holder,
				 struct kv_tier **out);
/*
 * A bounded tier whose caller writes, reads and moves its blocks through
 * handles of its own on the root (unbounded file tiers, one per thread,
 * as kvoffd's workers do) tells its index what they did, and the index
 * says what to move out.  -EINVAL where t is not a bounded tier.
 *   find: 0 and the size, and whether it is on its way out (moving;
 *     either pointer may be NULL), or -ENOENT; no system call.
 *   used: a read elsewhere: it is now the most recently used.
 *   stored: a block written there elsewhere, the most recently used;
 *     -ENOMEM leaves the index as it was.
 *   trim: while the tier holds more than its capacity beside the
 *     blocks already moving, offer the least recently used others,
 *     oldest first, to out(): 0 marks it moving (the caller moves it, as
 *     kv_tier_demote does, then says moved), 1 passes it, and an error
 *     stops the walk and is returned.  out() runs under the tier's lock:
 *     it must not call the tier.
 *   moved: gone from the root (moved out, or found gone): out of the
 *     index.  used and moved: -ENOENT if it was not indexed.
 */
int kv_tier_bounded_find(struct kv_tier *t, const char *key, uint64_t *size, int *moving);
int kv_tier_bounded_used(struct kv_tier *t, const char *key);
int kv_tier_bounded_stored(struct kv_tier *t, const char *key, uint64_t size);
typedef int (*kv_tier_bounded_out_fn)(void *arg, const char *key, uint64_t size);
int kv_tier_bounded_trim(struct kv_tier *t, kv_tier_bounded_out_fn out, void *arg);
int kv_tier_bounded_moved(struct kv_tier *t, const char *key);
/* The claim of a bounded tier's only writer on its root (the bounded
 * tier's while open, kvoffd's for the tiers it bounds): this file,
 * flock()ed exclusively, holding "pid PID ...".  A second claimant gets
 * -EBUSY, the holder in kv_error_detail(); kvevict refuses such a root
 * unless forced. */
#define KV_TIER_LOCK	".kvoffd.lock"

/* Take that claim on root for this process, the lock file saying "pid
 * PID holder": 0 and *lockfd (closing it gives the claim up), -EBUSY
 * with the holder in kv_error_detail(), or -errno. */
int kv_tier_claim(const char *root, const char *holder, int *lockfd);

/* A bucket root "s3://BUCKET[/PREFIX]", configured and signed as the AWS
 * CLI is (kv(7)): each block is one object at the key vLLM's obj tier
 * writes, "PREFIX//<block path>", and is found there or at the
 * single-slash form.  opts->flags: KV_IO_REPLACE, KV_IO_NO_CHECKSUM
 * (others ignored).  The bucket is checked here: -KV_ENOBUCKET, -EACCES,
 * -ECONNREFUSED... with the bucket and endpoint in kv_error_detail(). */
int kv_tier_s3_open(const char *url, const struct kv_io_opts *opts, struct kv_tier **out);

/* 1 if root names a bucket (begins "s3://"). */
int kv_root_is_s3(const char *root);

/* 0 if root can name a cache root: any path, or a bucket root with a
 * bucket name and no "." or ".." segment in its prefix (they would name
 * other keys, or another bucket); -EINVAL with the reason in
 * kv_error_detail().  Nothing is opened. */
int kv_root_check(const char *root);

/* The RAM tier of the kvoffd serving socket_path, over one connection
 * whose connect and requests each wait at most timeout_ms (0: for ever;
 * see kv_offd_connect_timeout); the daemon reads through and writes
 * behind to its own file tier.  Blocks are not deleted through it: del
 * is -EOPNOTSUPP. */
int kv_tier_daemon_open(const char *socket_path, unsigned timeout_ms,
			struct kv_tier **out);

struct kv_tier_gpu_opts {
	size_t slot_bytes;	/* the largest block */
	unsigned slots;
};

/* Device memory of a CUDA kv_dma handle, LRU eviction; -KV_ENODEV on
 * the CPU device (no CUDA build or no GPU). */
int kv_tier_gpu_open(struct kv_dma *dma, const struct kv_tier_gpu_opts *opts,
		     struct kv_tier **out);

#ifdef __cplusplus
}
#endif

#endif
