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

#define PATH_BYTES	512		/* a block's relative path */
#define SIZE_CLASSES_MAX	16	/* --size-classes */

enum slot_state { SLOT_FREE, SLOT_ALLOC, SLOT_LOADING, SLOT_READY };

struct client;

/* What the loop tracks per slot beside the slot store (<kv/slots.h>),
 * which holds its key, length, index and LRU place. */
struct slot {
	enum slot_state state;
	uint32_t pins;
	int on_disk;		/* the file tier holds these bytes */
	int wb_pending;		/* a worker may read the slot: not reusable */
	int wb_refused;		/* always: the full queue refused it at commit */
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

enum wait { WAIT_NONE, WAIT_SLOT, WAIT_LOAD };

struct client {
	int fd;
	uid_t uid;
	pid_t pid;
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
	struct client *next_waiter;	/* a slot's waiters, or the parked list */
	struct pin *pins;
	size_t npins, cap_pins;
	uint32_t nallocs;		/* slots it holds in SLOT_ALLOC */
	struct client *prev, *next;	/* all clients */
};

enum job_kind { JOB_WRITE, JOB_LOAD };

struct job {
	enum job_kind kind;
	uint32_t slot;
	uint64_t len;		/* WRITE: bytes; LOAD: bytes read (out) */
	uint64_t sum;		/* WRITE: the payload's xxh3 at COMMIT;
				   LOAD: of what was read (out) */
	int result;
	int64_t ns;		/* time the I/O took */
	char path[PATH_BYTES];
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
	struct job *loads;	/* ring of capacity lcap (one per slot) */
	size_t lcap, lhead, lcount;
	struct job *done;	/* ring of capacity wcap + lcap */
	size_t dhead, dcount;
	size_t running;
	int efd;		/* eventfd: completions ready */
	unsigned nthreads;
	pthread_t *threads;
	struct kv_io **ios;
};

struct offd {
	/* configuration */
	const char *root;
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
	uint32_t nslots;
	int hugepages;
	const struct kv_slots_class *classes;	/* --size-classes, counts 0 */
	unsigned nclasses;
	struct kv_slots *store;	/* index, LRU, free list, geometry */
	struct slot *slots;		/* by slot id, beside the store's */
	uint32_t loads_inflight;
	uint32_t wb_inflight;
	uint64_t wb_landed;		/* write-behind jobs finished */
	int catchup;			/* some slot has wb_refused set */
	uint32_t catchup_at;		/* where catch_up resumes */
	int wb_stalled;			/* no write landed for a whole tick */
	int tick_busy;			/* writes were in flight at the last tick */
	uint64_t tick_landed;		/* wb_landed at the last tick */

	/* clients */
	int lfd, epfd;
	struct client *clients;
	struct client *parked_head, *parked_tail;
	int sfd, tfd;			/* signalfd, one-second timerfd */
	int accept_paused;		/* out of fds: listener not polled */
	int64_t accept_logged_ns;	/* last "cannot accept" message */
	uint64_t ticks;			/* timer ticks seen */
	int draining;			/* SIGTERM seen */
	int waking;			/* inside wake_parked */
	struct kv_io *io;		/* loop thread's handle (HAS) */
	unsigned char *results;		/* a BATCH reply's, encoded here */
	struct writer wr;

	/* reporting */
	FILE *events;
	const char *events_endpoint;	/* --events tcp://|ipc://, or $KV_EVENTS */
	struct kv_events *publisher;	/* KV events for llm-d's indexer */
	int rootfd;			/* the publisher's model names */
	struct kv_offd_stats st;
	double seconds[DIR_COUNT];
	uint64_t hist[DIR_COUNT][HIST_BUCKETS];
	int64_t start_ns;
};

/* writer.c */
int writer_start(struct offd *d, unsigned nthreads, size_t wcap);
/* Queue a job; -EAGAIN when the write queue is full. */
int writer_push(struct offd *d, const struct job *job);
/* Take one finished job; 0 if one was returned, -EAGAIN if none. */
int writer_pop_done(struct offd *d, struct job *out);
size_t writer_queued(struct offd *d);
void writer_stop(struct offd *d);

/* report.c */
int report_open_events(struct offd *d);
void report_event(struct offd *d, const char *event, const char *tier, uint32_t i);
/* AllBlocksCleared for each model the RAM tier held, as it goes away. */
void report_ram_cleared(struct offd *d);
void report_transfer(struct offd *d, enum dir dir, uint64_t bytes, int64_t ns);
void report_fill_stats(struct offd *d, struct kv_offd_stats *out);
int report_write_metrics(struct offd *d);

/* daemon.c */
int offd_pool_init(struct offd *d);
int offd_serve(struct offd *d, int ready_fd);

#endif
