/* kvoffd internals: the slot pool, clients, write-behind workers. */
#ifndef KVOFFD_H
#define KVOFFD_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <kv/kv.h>
#include <kv/offd.h>
#include <kv/slots.h>
#include "../tool.h"

#define PATH_BYTES	512		/* a block's relative path */
#define SIZE_CLASSES_MAX	16	/* --size-classes */
#define SMALLEST_CLASS		(16u << 10)	/* the classes derived from
						   --slot-bytes stop here */
#define PAGE_TRIES		4	/* pages get_slot tries to empty in a class */
#define LOADS_MIN		1024	/* read-throughs in flight, at least */
#define FILE_TIERS_MAX	TOOL_TIERS_MAX	/* --tier */
#define TIER_NONE	0xffu

enum slot_state { SLOT_FREE, SLOT_ALLOC, SLOT_LOADING, SLOT_READY };

struct client;

/* What the loop tracks per slot beside the slot store (<kv/slots.h>),
 * which holds its key, length, index and LRU place. */
struct slot {
	enum slot_state state;
	uint32_t pins;
	unsigned held;		/* file tiers known to hold these bytes, a bit
				   per tier; 0: only RAM has them */
	int put_here;		/* a client put it (not read through): it
				   goes to the first file tier as it leaves */
	int wb_pending;		/* a worker may read the slot: not reusable */
	unsigned wb_tier;	/* wb_pending: the tier it is written to */
	int wb_refused;		/* always: the full queue refused it at commit */
	int wb_failed;		/* its write-behind failed (EIO...): not
				   retried; it goes, a counted drop, when its
				   room is needed */
	unsigned wb_floor;	/* the first file tier its write may go to:
				   past each one that refused it as full */
	int drain_tried;	/* SIGTERM drain queued it once already */
	int64_t start_ns;	/* ALLOC time, for put seconds */
	uint64_t sum;		/* SLOT_READY: xxh3 of the payload, fixed at
				   COMMIT or load; checked before it is served
				   or written behind */
	struct client *owner;	/* SLOT_ALLOC */
	struct client *waiters;	/* SLOT_LOADING: LOOKUPs waiting on it */
	struct kv_block_ref ref;
};

struct pin {
	uint32_t slot;
	int64_t start_ns;
};

enum wait { WAIT_NONE, WAIT_SLOT, WAIT_LOAD, WAIT_PROBE };

/* A process the daemon serves, over however many connections: what it
 * may hold of the pool is counted here, not per connection. */
struct peer {
	pid_t pid;
	unsigned refs;		/* its connections */
	uint64_t pin_bytes;	/* slots pinned over all of them (once a pin) */
	uint64_t alloc_bytes;	/* slots in SLOT_ALLOC over all of them */
};

struct client {
	int fd;
	uid_t uid;
	pid_t pid;
	struct peer *peer;
	unsigned char rbuf[KV_OFFD_FRAME_BYTES];
	size_t rlen;
	struct kv_offd_frame head;	/* a BATCH frame whose payload is due */
	unsigned char *pbuf;		/* its payload, pneed bytes of it */
	size_t plen, pneed, pcap;
	/* Replies the socket did not take yet; the client's requests are
	 * not read until they are sent. */
	unsigned char *out;
	size_t outlen, outcap;
	int doomed;			/* closed at the end of this loop turn */
	enum wait wait;
	struct kv_offd_frame saved;	/* the request parked by wait */
	uint32_t wait_slot;		/* WAIT_LOAD */
	struct probe *probe;		/* WAIT_PROBE */
	int probed;			/* its LOOKUP's key is on a file tier:
					   the tiers were asked (probe_reply) */
	struct client *next_waiter;	/* a slot's waiters, or the parked list */
	struct pin *pins;
	size_t npins, cap_pins;
	uint32_t *revoked;		/* slots of pins revoke_pins took back */
	size_t nrevoked, cap_revoked;
	uint32_t nallocs;		/* slots it holds in SLOT_ALLOC */
	struct client *prev, *next;	/* all clients */
};

/* WRITE: a RAM block to one file tier; LOAD: a miss read through the
 * file tiers into its slot; DEMOTE: a block out of a full tier into the
 * next that takes it; PROBE: presence asked of the unbounded tiers. */
enum job_kind { JOB_WRITE, JOB_LOAD, JOB_DEMOTE, JOB_PROBE };

/*
 * A HAS, or a batch of HAS or LOOKUP entries, that neither RAM nor a
 * bounded tier's index answered, or a LOOKUP's read-through whose size
 * is not known yet: the unbounded tiers (a stat on shared storage, a
 * HEAD on a bucket) are asked on a worker, not the loop, while the
 * client waits (WAIT_PROBE).
 */
struct probe {
	struct client *client;	/* NULL once it has gone */
	struct kv_offd_frame req;	/* what is answered: a HAS, a BATCH, or
					   a LOOKUP run again once its size
					   is known */
	unsigned tiers;		/* the tiers asked, in order, a bit each */
	size_t n;		/* entries asked */
	uint32_t *entry;	/* ... their places in the reply */
	char (*path)[PATH_BYTES];
	int *found;		/* out: 0 a tier has it, -ENOENT, or -errno */
	uint64_t *size;		/* out: its size there (KV_TIER_SIZE_UNKNOWN) */
	struct kv_tier_req *reqs;	/* one per entry: a tier's batch of them */
	unsigned char *results;	/* BATCH: the reply's results, encoded */
};

struct job {
	enum job_kind kind;
	uint32_t slot;		/* WRITE, LOAD */
	uint64_t offset, cap;	/* WRITE, LOAD: the slot's place in the pool,
				   fixed by the loop (which owns the store) */
	unsigned tier;		/* WRITE: the destination; LOAD: the tier that
				   served it (out); DEMOTE: the source */
	unsigned probe;		/* LOAD: the tiers to try, in order */
	unsigned missed;	/* LOAD: tiers that lacked it (out) */
	unsigned refused;	/* DEMOTE: tiers that failed to take it (out) */
	unsigned dest;		/* DEMOTE: the tier now holding it (out), or
				   TIER_NONE: dropped */
	int existed;		/* DEMOTE: dest had it already (out) */
	int promote;		/* WRITE: a copy up from a lower tier */
	uint64_t len;		/* WRITE: bytes; LOAD: bytes read (out);
				   DEMOTE: the file's size as indexed */
	uint64_t sum;		/* WRITE: the payload's xxh3 at COMMIT;
				   LOAD: of what was read (out) */
	int result;
	int64_t ns;		/* time the I/O took */
	struct probe *ask;	/* PROBE */
	char path[PATH_BYTES];
};


/* Per-tier counters, in --stats and the metrics file. */
struct tier_stats {
	uint64_t hits;		/* read-throughs it served */
	uint64_t misses;	/* read-throughs that tried it and found nothing */
	uint64_t read_bytes;
	uint64_t writes;	/* blocks written into it: write-behind,
				   write-through, promotion or demotion */
	uint64_t write_bytes;
	uint64_t promotions;	/* blocks copied up into it from below */
	uint64_t demotions;	/* blocks moved out of it to a lower tier */
	uint64_t drops;		/* blocks that left it with no lower tier
				   taking them */
	uint64_t errors;	/* writes, reads or removals that failed */
};

struct ftier {
	enum tool_tier_kind kind;
	char *root;
	uint64_t capacity;	/* bytes; 0: unbounded, not indexed */
	struct kv_tier *tier;	/* the loop's handle (HAS, sizes); bounded:
				   libkv's bounded tier, its index in LRU
				   order, DEMOTE jobs marked moving */
	uint64_t walk_blocks, walk_bytes;	/* found at start */
	struct tier_stats st;
};


/* A change of a block that a worker's tier handle reported
 * (kv_tier_report_to), on its way to the loop. */
struct tier_change {
	unsigned tier;
	enum kv_tier_change change;
	uint64_t size;
	char path[PATH_BYTES];
};

struct tier_changes {
	struct tier_change *v;
	size_t n, cap;
};

/* Directions of the transfer metrics. */
enum dir { DIR_PUT, DIR_GET, DIR_SPILL, DIR_READTHROUGH, DIR_COUNT };
#define HIST_BUCKETS	10	/* 4 KiB x 4^i, i < 9, then +Inf */

struct writer {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stop;
	struct job *writes;	/* ring of capacity wcap */
	size_t wcap, whead, wcount;
	struct job *loads;	/* ring of capacity lcap */
	size_t lcap, lhead, lcount;
	struct job *probes;	/* ring of capacity lcap */
	size_t phead, pcount;
	struct job *done;	/* ring of capacity wcap + 2 * lcap */
	size_t dhead, dcount;
	size_t running;
	const struct job **active;	/* each thread's jobs, waiting or running ... */
	size_t *nactive;		/* ... this many of them */
	uint64_t *ticket;		/* ... in the order it left the ring */
	uint64_t next_ticket;
	int efd;		/* eventfd: completions ready */
	unsigned nthreads;	/* --write-threads: every kind of job */
	pthread_t *threads;	/* ... and after them, the prober: probes
				   only, so that writes held up by slow
				   storage never hold up a presence check */
	pthread_cond_t pcond;	/* the prober's */
	int prober;		/* started */
	struct kv_tier **handles;	/* (nthreads + 1) x ntiers */
	struct tier_changes changes;	/* the handles' reports, for the loop */
	uint64_t changes_lost;	/* ... not kept, out of memory */
	struct reporter {
		struct writer *w;
		unsigned tier;
	} reporters[FILE_TIERS_MAX];	/* what each tier's handles report to */
};

/* The config.json texts clients gave (configs.c): at most CONFIGS_MAX
 * model dirs, the oldest given way. */
#define CONFIGS_MAX	64

struct configs {
	pthread_mutex_t lock;	/* the loop adds, workers read */
	struct config_text {
		char model_dir[KV_NAME_MAX + 1];
		char *text;	/* NULL: unused */
		size_t len;
	} v[CONFIGS_MAX];
	unsigned next;
};

/* Read-through size memory (daemon.c, size_hint). */
#define SIZE_HINTS	256

struct size_hint {
	uint64_t key;		/* model dir and group; 0: none */
	uint64_t bytes;		/* the last block's size there; 0: unknown */
};

struct offd {
	/* configuration */
	struct ftier tiers[FILE_TIERS_MAX];	/* --tier, in order; --root: one */
	unsigned ntiers;
	unsigned promote;		/* --promote: KV_TIER_PROMOTE* */
	struct kv_hits *first_hits;	/* KV_TIER_PROMOTE_SECOND_HIT */
	const char *socket_path;
	const char *metrics_path;
	const char *events_path;
	unsigned write_flags;	/* KV_TIER_SPILL; --write-policy always adds
				 * KV_TIER_WRITE_THROUGH */
	unsigned io_flags;

	/* pool */
	int memfd;
	unsigned char *pool;
	uint64_t pool_bytes, slot_bytes;	/* slot_bytes: the largest class */
	uint32_t nslots;		/* slot ids (kv_slots_count) */
	uint32_t npages;		/* slots of the largest class the pool holds */
	int hugepages;
	const uint64_t *classes;	/* slot sizes, increasing */
	unsigned nclasses;
	struct kv_slots *store;	/* index, LRU, free list, geometry */
	struct size_hint size_hints[SIZE_HINTS];
	struct slot *slots;		/* by slot id, beside the store's */
	uint32_t *page_pins;		/* by page: pins on its slots */
	uint32_t pages_pinned;		/* pages with a pin */
	uint32_t class_pages_pinned[SIZE_CLASSES_MAX];	/* ... of each class */
	uint32_t loads_inflight;
	uint32_t probes_inflight;	/* PROBE jobs */
	uint32_t wb_inflight;
	uint64_t wb_landed;		/* write-behind jobs finished */
	int catchup;			/* some slot has wb_refused set */
	unsigned said_full;		/* tiers said full, a bit each */
	uint32_t catchup_at;		/* where catch_up resumes */
	int wb_stalled;			/* no write landed for a whole tick */
	int pin_starved;		/* a put was refused for pinned slots
					   since the last tick */
	uint64_t pin_timeout_ns;	/* --pin-timeout */
	int tick_busy;			/* writes were in flight at the last tick */
	uint64_t tick_landed;		/* wb_landed at the last tick */

	/* clients */
	int lfd, epfd;
	struct client *clients;
	struct client *parked_head, *parked_tail;
	int sfd, tfd;			/* signalfd, one-second timerfd */
	int accept_paused;		/* out of fds: listener not polled */
	int64_t accept_logged_ns;	/* last "cannot accept" message */
	int64_t protocol_logged_ns;	/* last "malformed frame" message */
	uint64_t protocol_logged;	/* protocol_errors it counted */
	uint64_t ticks;			/* timer ticks seen */
	int draining;			/* SIGTERM seen */
	int waking;			/* inside wake_parked */
	unsigned char *results;		/* a BATCH reply's, encoded here */
	struct writer wr;
	struct configs configs;		/* config.json texts clients gave */

	/* reporting */
	FILE *events;
	const char *events_endpoint;	/* --events tcp://|ipc://, or $KV_EVENTS */
	struct kv_events *publisher;	/* KV events for llm-d's indexer */
	int rootfd;			/* the publisher's model names */
	struct tier_changes changes;	/* the last taken from the writer */
	struct kv_offd_stats st;
	double seconds[DIR_COUNT];
	uint64_t hist[DIR_COUNT][HIST_BUCKETS];
	int64_t start_ns;
};

/* configs.c */
void configs_init(struct configs *cs);
void configs_free(struct configs *cs);
/* Keep model_dir's config text (checked: a config whose fingerprint
 * names model_dir).  -KV_EBADCONFIG, -KV_EFINGERPRINT, -ENOMEM. */
int configs_add(struct configs *cs, const char *model_dir, const char *text, size_t len);
/* Give tier t the config of model_dir a client gave, if it has none:
 * 0, -ENOENT when no client gave one, or the tier's refusal. */
int configs_give(struct configs *cs, struct kv_tier *t, const char *model_dir);

/* tiers.c */
/* Open every tier, claim and index the bounded ones; says why and
 * returns -errno when one cannot be. */
int tiers_open(struct offd *d);
void tiers_close(struct offd *d);
const char *tier_name(const struct offd *d, unsigned t);
/* A new handle on tier t, its kv_io flags d->io_flags | flags. */
int tier_open_handle(const struct offd *d, unsigned t, unsigned flags, struct kv_tier **out);
/* The tiers a read-through of path tries, in order. */
unsigned tiers_probe(struct offd *d, const char *path);
/* Whether a bounded tier's index holds path, and its size there (size
 * may be NULL). */
int tiers_indexed(struct offd *d, const char *path, uint64_t *size);
/* The unbounded tiers, a bit each: only asking them says what they hold. */
unsigned tiers_unbounded(const struct offd *d);
/* Whether a write of path into tier t must wait: a DEMOTE holds it. */
int tier_moving(struct offd *d, unsigned t, const char *path);
/* A block landed in tier t (write-behind, write-through, promotion,
 * demotion): a bounded tier indexes it, and moves out what that puts
 * over its capacity.  (The handle that wrote it reported it.) */
void tier_stored(struct offd *d, unsigned t, const char *path, uint64_t size);
/* Queue DEMOTE jobs while tier t is over its capacity. */
void tier_trim(struct offd *d, unsigned t);
/* A DEMOTE job finished. */
void tier_demoted(struct offd *d, const struct job *j);
/* A read-through served path from tier t: it is the newest there. */
void tier_touch(struct offd *d, unsigned t, const char *path);

/* writer.c */
int writer_start(struct offd *d, unsigned nthreads, size_t wcap);
/* Queue a job; -EAGAIN when the write queue is full. */
int writer_push(struct offd *d, const struct job *job);
/* Take one finished job; 0 if one was returned, -EAGAIN if none. */
int writer_pop_done(struct offd *d, struct job *out);
size_t writer_queued(struct offd *d);
/* Take the changes the workers' handles reported so far, giving back
 * the emptied array of the last call (*mine).  Returns how many were
 * lost since (not kept, out of memory). */
uint64_t writer_take_changes(struct offd *d, struct tier_changes *mine);
/* Ask p's tiers through handles io (one per tier). */
void probe_run(const struct offd *d, struct kv_tier *const *io, struct probe *p);
void writer_stop(struct offd *d);

/* report.c */
int report_open_events(struct offd *d);
/* tier: TIER_NONE for RAM, else a file tier. */
void report_event(struct offd *d, const char *event, unsigned tier, uint32_t i);
/* Count and announce (BlockStored, BlockRemoved) the changes the file
 * tiers reported since the last call: the one path for both. */
void report_tier_changes(struct offd *d);
/* AllBlocksCleared for each model the RAM tier held, as it goes away. */
void report_ram_cleared(struct offd *d);
void report_transfer(struct offd *d, enum dir dir, uint64_t bytes, int64_t ns);
void report_fill_stats(struct offd *d, struct kv_offd_stats *out);
void report_fill_tier_stats(struct offd *d, unsigned t, struct kv_offd_tier_stats *out);
/* --metrics-file rewritten (kv_file_replace): 0, or -errno said. */
int report_write_metrics(struct offd *d);

/* daemon.c */
int offd_pool_init(struct offd *d);
int offd_serve(struct offd *d, int ready_fd);

#endif
