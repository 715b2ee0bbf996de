#ifndef KV_EVENTS_H
#define KV_EVENTS_H

/*
 * KV events on the wire llm-d's KV-cache indexer reads (and vLLM's engine
 * writes): a ZMQ PUB socket, each message three frames
 *
 *	topic "kv@<medium-or-pod>@<model_name>", 8-byte big-endian sequence
 *	number (per topic, from 0), msgpack [timestamp, [events...]]
 *
 * with positional events ["BlockStored", [hashes], parent, token_ids,
 * block_size, lora_id, medium], ["BlockRemoved", [hashes], medium] and
 * ["AllBlocksCleared"]; hashes are the low 64 bits of the block hash.
 *
 * The publisher never blocks its caller: events are batched per topic into
 * messages, messages wait in a bounded queue that a thread of the
 * publisher hands to ZMQ, and what does not fit is dropped and counted (a
 * gap in the sequence numbers tells the subscriber).  Messages are held
 * until a subscriber has subscribed (ZMQ drops what PUB sends before), and
 * kv_events_close() lingers, within a bound, until the queue is flushed.
 * See kv(7).
 */

#include <stddef.h>
#include <stdint.h>
#include <kv/layout.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_EVENTS_SHARED_STORAGE "SHARED_STORAGE"	/* the file tiers */
#define KV_EVENTS_CPU		 "CPU"			/* kvoffd's RAM tier */
#define KV_EVENTS_LOCAL_DISK	 "LOCAL_DISK"		/* kvoffd's local file tiers */

enum kv_event_kind {
	KV_EVENT_BLOCK_STORED,
	KV_EVENT_BLOCK_REMOVED,
	KV_EVENT_ALL_CLEARED,
};

struct kv_events_opts {
	unsigned queue_max;	/* messages waiting to be sent; 0: 1024 */
	unsigned batch_max;	/* block hashes per message; 0: 1024 */
	uint64_t flush_ns;	/* a partial batch goes after this; 0: 20 ms */
	/* How long kv_events_close() may wait to flush; 0: 2 s.  Within
	 * it, a publisher that never saw a subscriber waits at most
	 * min(linger, 500 ms) from its open, and a connect that the peer
	 * refused gives up at once. */
	uint64_t linger_ns;
	/* Topic middle for media other than SHARED_STORAGE (the pod or node
	 * whose tier it is); NULL: the medium. */
	const char *pod;
	/* When the queue is full, wait for room while a subscriber is there
	 * to make it (a bulk announce) instead of dropping. */
	int backpressure;
	/* The tier's locality ("LOCAL", "REMOTE"): events go as vLLM's
	 * self-describing maps (a "type" key, named fields) with a
	 * "locality" field.  NULL: positional events, no locality. */
	const char *locality;
};

struct kv_events_stats {
	uint64_t messages_sent, hashes_sent;
	uint64_t messages_dropped, hashes_dropped;	/* queue full, or unsent at close */
	uint64_t unnamed;	/* blocks whose model dir names no model a
				   topic can carry */
	uint64_t subscriptions;	/* seen so far */
};

struct kv_events;

/* Whether text names a ZMQ endpoint rather than a file: it starts with
 * "tcp://", "ipc://", "bind:" or "connect:". */
int kv_events_is_endpoint(const char *text);

/* Check an endpoint: [bind:|connect:]tcp://HOST:PORT or
 * [bind:|connect:]ipc://PATH.  Without a prefix, a tcp host of "*" (or a
 * bracketed "::") and every ipc path bind, other tcp hosts connect (vLLM's
 * rule).  *bind (may be NULL) says which.  -EINVAL, with detail, when
 * malformed. */
int kv_events_endpoint_check(const char *text, int *bind);

/* Open a publisher on endpoint (checked as above).  -EINVAL malformed,
 * -EADDRINUSE and others from ZMQ. */
int kv_events_open(const char *endpoint, const struct kv_events_opts *opts,
		   struct kv_events **out);

/* Queue an event about hash (the low 64 bits of a block hash) of
 * model_name in medium.  block_size (tokens; 0 unknown) is for
 * BlockStored; hash is unused for AllBlocksCleared.  Never blocks.
 * -EINVAL for a model name or medium that cannot be part of a topic
 * (empty, over KV_NAME_MAX bytes, an '@' or a control character). */
int kv_events_publish(struct kv_events *ev, enum kv_event_kind kind,
		      const char *model_name, const char *medium, uint64_t hash,
		      unsigned block_size);

/* The same for the block ref names under the root open at rootfd: the
 * model name (and block size) come from its model dir's config.json, or
 * an llmd-v0 dir's name, read once per dir.  A dir that names no model a
 * topic can carry is counted in unnamed and skipped (1 returned). */
int kv_events_publish_block(struct kv_events *ev, enum kv_event_kind kind,
			    const char *medium, int rootfd,
			    const struct kv_block_ref *ref);

/* Name model_dir's blocks from cfg (its model_name and block size) for
 * kv_events_publish_block, where no config.json can be read: a bucket
 * holds none.  -KV_EBADCONFIG when cfg names no model a topic can carry. */
struct kv_config;
int kv_events_name_model_dir(struct kv_events *ev, const char *model_dir,
			     const struct kv_config *cfg);

/* Send every partial batch now (still without blocking). */
void kv_events_flush(struct kv_events *ev);

void kv_events_stats(struct kv_events *ev, struct kv_events_stats *out);

/* Flush, linger within opts->linger_ns, close; stats (may be NULL) get
 * the final counts.  ev may be NULL. */
void kv_events_close(struct kv_events *ev, struct kv_events_stats *stats);

/* The low 64 bits of a hex block hash: its last 16 digits, big-endian. */
uint64_t kv_events_hash64(const char *hex);

/* ---- the subscriber's side ---- */

/* One decoded event.  A hash given as bytes is read as its last 8
 * bytes, big-endian (fewer: zero-extended), as llm-d's decoder does; a
 * negative integer as its two's complement. */
struct kv_event {
	enum kv_event_kind kind;
	const char *medium;	/* NUL-terminated; "" when null or absent */
	const uint64_t *hashes;	/* the event's block hashes, in order */
	size_t nhashes;
	double ts;		/* the message's timestamp, s since the epoch */
};

/* Called once per event of a message; a non-zero return stops the
 * message there and becomes the decoder's return. */
typedef int (*kv_event_fn)(const struct kv_event *ev, void *arg);

/* Decode one message payload: msgpack [ts, [events...], ...] with each
 * event positional (["BlockStored", hashes, parent, token_ids,
 * block_size, lora_id, medium, ...], ["BlockRemoved", hashes, medium,
 * ...], ["AllBlocksCleared"]) or a map with a "type" key ("block_hashes",
 * "medium"; other keys ignored).  Events of an unknown type are skipped.
 * 0, -KV_EPROTO for a payload that is not such a message (the events
 * before the fault were delivered), -ENOMEM, or fn's return. */
int kv_events_decode(const void *payload, size_t len, kv_event_fn fn, void *arg);

/* A subscriber: one ZMQ SUB socket on any number of endpoints, every
 * topic, frames [topic, 8-byte big-endian seq, payload]. */
struct kv_events_sub;

struct kv_events_sub_stats {
	uint64_t messages;	/* well-formed frames decoded */
	uint64_t bad_frames;	/* wrong part count, sequence size, or payload */
	uint64_t gaps;		/* sequence numbers skipped (per topic) */
	uint64_t events;	/* events delivered */
};

int kv_events_sub_open(struct kv_events_sub **out);
/* Subscribe on endpoint: bind or connect by kv_events_endpoint_check's
 * rule.  An ipc path that holds anything but a socket no one serves is
 * refused (-EEXIST, -EADDRINUSE), since binding would replace it.
 * -EINVAL malformed, -errno from ZMQ. */
int kv_events_sub_add(struct kv_events_sub *s, const char *endpoint);
/* A file descriptor to poll(2) for POLLIN; it is edge-triggered, so a
 * caller polls it only after a drain that returned 0. */
int kv_events_sub_fd(struct kv_events_sub *s);
/* Receive and decode at most max_messages waiting messages without
 * blocking, calling fn per event: 1 if more may be waiting, 0 when
 * none is, or fn's non-zero return. */
int kv_events_sub_drain(struct kv_events_sub *s, unsigned max_messages,
			kv_event_fn fn, void *arg);
void kv_events_sub_stats(const struct kv_events_sub *s, struct kv_events_sub_stats *out);
void kv_events_sub_close(struct kv_events_sub *s);

#ifdef __cplusplus
}
#endif

#endif
