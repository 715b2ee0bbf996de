/*
 * The KV-event publisher: see <kv/events.h>.
 *
 * Callers append block hashes to a per-topic pending batch under one
 * mutex; a full batch (or one older than flush_ns) is encoded into a
 * message and put on a bounded queue.  One thread owns the ZMQ sockets
 * (they are not thread-safe): it reads subscriptions off the XPUB socket,
 * connection events off a socket monitor, and hands queued messages to
 * ZMQ only while somebody is subscribed.  XPUB_NODROP makes ZMQ answer
 * EAGAIN at its high-water mark instead of dropping silently, so every
 * drop happens here, where it is counted.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <msgpack.h>
#include <zmq.h>
#include <kv/config.h>
#include <kv/errors.h>
#include <kv/events.h>
#include <kv/units.h>
#include "store/beneath.h"
#include "util/error.h"
#include "events/endpoint.h"

#define DEFAULT_QUEUE	1024
#define DEFAULT_BATCH	1024
#define DEFAULT_FLUSH_NS (20 * 1000000ull)
#define DEFAULT_LINGER_NS (2000 * 1000000ull)
#define JOIN_MAX_NS	(500 * 1000000ull)
#define ZMQ_HWM		1000	/* messages per subscriber inside ZMQ */
#define EVENTS_PER_MSG	256	/* kind/medium changes per message */
#define MEDIUM_MAX	32
#define CONFIG_READ_MAX	(1 << 20)
#define MONITOR_ADDR	"inproc://kv-events-monitor"
#define ZAP_DOMAIN	"kvtools"	/* see kv_events_open */

struct pending_event {
	enum kv_event_kind kind;
	char medium[MEDIUM_MAX];
	unsigned block_size;
	uint64_t *hashes;
	size_t n, cap;
};

struct topic {
	char *name;
	uint64_t seq;			/* next sequence number */
	struct pending_event *ev;	/* the batch being built */
	size_t nev, evcap, nhashes;
	int64_t first_ns;		/* when the batch got its first event */
};

struct message {
	char *topic;
	size_t topic_len;
	uint64_t seq;
	char *payload;
	size_t len;
	unsigned nhashes;
};

/* model dir -> model name, read once per dir */
struct dir_name {
	char *model_dir;
	char *model_name;		/* NULL: names no model */
	unsigned block_size;
};

struct kv_events {
	struct kv_events_opts o;
	char *ipc_path;			/* a socket file we bound: unlinked at close */
	dev_t ipc_dev;			/* ... if it is still that one */
	ino_t ipc_ino;
	void *zctx, *pub, *mon;
	int wakefd;
	pthread_t thread;
	int64_t open_ns;

	pthread_mutex_t lock;		/* everything below */
	pthread_cond_t room;		/* the sender took a message */
	int hopeless;			/* no subscriber, and none coming */
	int stalled;			/* a wait for room timed out; none
					   since has been sent */
	struct topic *topics;
	size_t ntopics, topcap;
	size_t npending;		/* topics with a batch */
	struct message **queue;		/* ring of o.queue_max */
	size_t qhead, qlen;
	int stopping;
	int64_t close_ns;
	struct dir_name *names;
	size_t nnames, namecap;
	struct kv_events_stats st;

	/* thread-only */
	long subs;			/* active subscriptions */
	int peers;			/* connections up */
	int refused;			/* a connect failed before any succeeded */
};

/* ---- endpoints ---- */

int kv_events_is_endpoint(const char *text)
{
	static const char *const prefix[] = { "tcp://", "ipc://", "bind:", "connect:" };

	for (size_t i = 0; i < sizeof(prefix) / sizeof(prefix[0]); i++)
		if (!strncmp(text, prefix[i], strlen(prefix[i])))
			return 1;
	return 0;
}

static int host_ok(const char *h, size_t len)
{
	if (len == 1 && h[0] == '*')
		return 1;
	if (len > 2 && h[0] == '[' && h[len - 1] == ']') {
		for (size_t i = 1; i < len - 1; i++)
			if (!strchr("0123456789abcdefABCDEF:.", h[i]))
				return 0;
		return 1;
	}
	if (len == 0 || len > 253)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!(h[i] >= 'a' && h[i] <= 'z') && !(h[i] >= 'A' && h[i] <= 'Z') &&
		    !(h[i] >= '0' && h[i] <= '9') && h[i] != '.' && h[i] != '-' &&
		    h[i] != '_')
			return 0;
	return 1;
}

/* Split "[bind:|connect:]scheme://rest"; *addr points into text. */
static int endpoint_parse(const char *text, const char **addr, int *bind)
{
	int mode = -1;			/* -1: by vLLM's rule */
	const char *p = text;

	kvi_error_clear();
	if (!strncmp(p, "bind:", 5)) {
		mode = 1;
		p += 5;
	} else if (!strncmp(p, "connect:", 8)) {
		mode = 0;
		p += 8;
	}
	*addr = p;
	if (!strncmp(p, "ipc://", 6)) {
		size_t len = strlen(p + 6);

		/* sun_path holds 107 bytes and a NUL */
		if (len == 0 || len > 107 || strchr(p + 6, '\n'))
			return kvi_fail(-EINVAL, "'%s': an ipc:// endpoint needs a path of 1 to 107 bytes",
					text);
		*bind = mode >= 0 ? mode : 1;
		return 0;
	}
	if (!strncmp(p, "tcp://", 6)) {
		const char *h = p + 6, *colon = strrchr(h, ':');
		char *end;
		unsigned long port;

		if (!colon || colon == h)
			return kvi_fail(-EINVAL, "'%s': a tcp:// endpoint is tcp://HOST:PORT", text);
		errno = 0;
		port = strtoul(colon + 1, &end, 10);
		if (colon[1] < '0' || colon[1] > '9' || *end || errno || port == 0 ||
		    port > 65535)
			return kvi_fail(-EINVAL, "'%s': the port must be 1 to 65535", text);
		if (!host_ok(h, (size_t)(colon - h)))
			return kvi_fail(-EINVAL, "'%s': '%.*s' is not a host name, address or *",
					text, (int)(colon - h), h);
		if (mode == 0 && colon - h == 1 && h[0] == '*')
			return kvi_fail(-EINVAL, "'%s': cannot connect to '*'", text);
		*bind = mode >= 0 ? mode : (h[0] == '*' || strstr(h, "::") != NULL);
		return 0;
	}
	return kvi_fail(-EINVAL, "'%s' is not a ZMQ endpoint: use tcp://HOST:PORT or ipc://PATH, "
			"optionally after bind: or connect:", text);
}

int kv_events_endpoint_check(const char *text, int *bind)
{
	const char *addr;
	int b = 0, rc = endpoint_parse(text, &addr, &b);

	if (rc == 0 && bind)
		*bind = b;
	return rc;
}

uint64_t kv_events_hash64(const char *hex)
{
	size_t len = strlen(hex);
	const char *p = len > 16 ? hex + len - 16 : hex;
	uint64_t v = 0;

	for (; *p; p++) {
		unsigned d = *p >= '0' && *p <= '9' ? (unsigned)(*p - '0')
			   : *p >= 'a' && *p <= 'f' ? (unsigned)(*p - 'a' + 10)
			   : *p >= 'A' && *p <= 'F' ? (unsigned)(*p - 'A' + 10) : 0;
		v = v << 4 | d;
	}
	return v;
}

/* ---- messages ---- */

static void message_free(struct message *m)
{
	if (!m)
		return;
	free(m->topic);
	free(m->payload);
	free(m);
}

static void pack_str(msgpack_packer *pk, const char *s)
{
	size_t len = strlen(s);

	msgpack_pack_str(pk, len);
	msgpack_pack_str_body(pk, s, len);
}

/* One event as vLLM's self-describing map (vLLM #42892: a "type" key
 * and named fields), which carries the tier's locality. */
static void pack_map_event(msgpack_packer *pk, const struct pending_event *e,
			   const char *locality)
{
	static const char *const types[] = {
		[KV_EVENT_BLOCK_STORED] = "BlockStored", [KV_EVENT_BLOCK_REMOVED] = "BlockRemoved",
		[KV_EVENT_ALL_CLEARED] = "AllBlocksCleared",
	};
	int stored = e->kind == KV_EVENT_BLOCK_STORED;

	if (e->kind == KV_EVENT_ALL_CLEARED) {
		msgpack_pack_map(pk, 1);
		pack_str(pk, "type");
		pack_str(pk, types[e->kind]);
		return;
	}
	msgpack_pack_map(pk, stored ? 8 : 4);
	pack_str(pk, "type");
	pack_str(pk, types[e->kind]);
	pack_str(pk, "block_hashes");
	msgpack_pack_array(pk, (uint32_t)e->n);
	for (size_t k = 0; k < e->n; k++)
		msgpack_pack_fix_uint64(pk, e->hashes[k]);
	if (stored) {
		pack_str(pk, "parent_block_hash");
		msgpack_pack_nil(pk);
		pack_str(pk, "token_ids");
		msgpack_pack_array(pk, 0);
		pack_str(pk, "block_size");
		msgpack_pack_unsigned_int(pk, e->block_size);
		pack_str(pk, "lora_id");
		msgpack_pack_nil(pk);
	}
	pack_str(pk, "medium");
	pack_str(pk, e->medium);
	pack_str(pk, "locality");
	pack_str(pk, locality);
}

/* Encode t's batch as [ts, [events...]] and empty it: positional events,
 * or maps where the publisher has a locality to say. */
static struct message *encode(struct topic *t, const char *locality)
{
	struct message *m = calloc(1, sizeof(*m));
	msgpack_sbuffer sb;
	msgpack_packer pk;

	if (!m)
		return NULL;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_double(&pk, (double)kv_now_ns() / 1e9);
	msgpack_pack_array(&pk, (uint32_t)t->nev);
	for (size_t i = 0; i < t->nev; i++) {
		struct pending_event *e = &t->ev[i];

		if (locality) {
			pack_map_event(&pk, e, locality);
			continue;
		}
		switch (e->kind) {
		case KV_EVENT_BLOCK_STORED:
			msgpack_pack_array(&pk, 7);
			pack_str(&pk, "BlockStored");
			break;
		case KV_EVENT_BLOCK_REMOVED:
			msgpack_pack_array(&pk, 3);
			pack_str(&pk, "BlockRemoved");
			break;
		case KV_EVENT_ALL_CLEARED:
			msgpack_pack_array(&pk, 1);
			pack_str(&pk, "AllBlocksCleared");
			continue;
		}
		msgpack_pack_array(&pk, (uint32_t)e->n);
		/* Always the 8-byte form: llm-d's Go adapter takes a hash as
		 * uint64 or int64 only, not the narrower types a minimal
		 * encoding would give a small value. */
		for (size_t k = 0; k < e->n; k++)
			msgpack_pack_fix_uint64(&pk, e->hashes[k]);
		if (e->kind == KV_EVENT_BLOCK_STORED) {
			msgpack_pack_nil(&pk);		/* parent: unknown here */
			msgpack_pack_array(&pk, 0);	/* token ids */
			msgpack_pack_unsigned_int(&pk, e->block_size);
			msgpack_pack_nil(&pk);		/* lora id */
		}
		pack_str(&pk, e->medium);
	}
	m->topic = strdup(t->name);
	m->topic_len = strlen(t->name);
	m->seq = t->seq++;
	m->payload = sb.data;
	m->len = sb.size;
	m->nhashes = (unsigned)t->nhashes;
	for (size_t i = 0; i < t->nev; i++)
		free(t->ev[i].hashes);
	t->nev = 0;
	t->nhashes = 0;
	t->first_ns = 0;
	if (!m->topic || !m->payload) {
		message_free(m);
		return NULL;
	}
	return m;
}

static void wake(struct kv_events *ev);

/* Move t's batch to the queue (lock held); 1 when the thread should wake. */
static int enqueue(struct kv_events *ev, struct topic *t)
{
	unsigned nhashes = (unsigned)t->nhashes;
	struct message *m;

	if (!t->nev)
		return 0;
	if (ev->o.backpressure && ev->qlen == ev->o.queue_max && !ev->hopeless &&
	    !ev->stalled && !ev->stopping) {
		/* within the linger bound: a peer that never reads is not
		 * waited for forever */
		int64_t until = kv_now_ns() + (int64_t)ev->o.linger_ns;
		struct timespec ts = { until / 1000000000, until % 1000000000 };

		while (ev->qlen == ev->o.queue_max && !ev->hopeless && !ev->stopping) {
			wake(ev);
			if (pthread_cond_timedwait(&ev->room, &ev->lock, &ts) == ETIMEDOUT) {
				ev->stalled = 1;
				break;
			}
		}
	}
	ev->npending--;
	m = encode(t, ev->o.locality);
	if (!m || ev->qlen == ev->o.queue_max) {
		/* The sequence number is spent: the gap tells subscribers. */
		ev->st.messages_dropped++;
		ev->st.hashes_dropped += nhashes;
		message_free(m);
		return 0;
	}
	ev->queue[(ev->qhead + ev->qlen++) % ev->o.queue_max] = m;
	return 1;
}

static void wake(struct kv_events *ev)
{
	uint64_t one = 1;

	if (write(ev->wakefd, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread is already due to wake */
	}
}

/* Enqueue every batch older than flush_ns (all when force); lock held. */
static int flush_locked(struct kv_events *ev, int force)
{
	int64_t now = kv_monotonic_ns();
	int woke = 0;

	for (size_t i = 0; i < ev->ntopics && ev->npending; i++) {
		struct topic *t = &ev->topics[i];

		if (t->nev && (force || now - t->first_ns >= (int64_t)ev->o.flush_ns))
			woke |= enqueue(ev, t);
	}
	return woke;
}

/* ---- the sending thread ---- */

static void read_subscriptions(struct kv_events *ev)
{
	unsigned char buf[256];
	int n;

	while ((n = zmq_recv(ev->pub, buf, sizeof(buf), ZMQ_DONTWAIT)) >= 0) {
		if (n >= 1 && buf[0] == 1) {
			ev->subs++;
			pthread_mutex_lock(&ev->lock);
			ev->st.subscriptions++;
			pthread_mutex_unlock(&ev->lock);
		} else if (n >= 1 && buf[0] == 0 && ev->subs > 0) {
			ev->subs--;
		}
	}
}

static void read_monitor(struct kv_events *ev)
{
	unsigned char buf[64];
	uint16_t id;
	int more, n;
	size_t ml = sizeof(more);

	while ((n = zmq_recv(ev->mon, buf, sizeof(buf), ZMQ_DONTWAIT)) >= 0) {
		if (n >= 2) {
			memcpy(&id, buf, sizeof(id));
			if (id == ZMQ_EVENT_CONNECTED || id == ZMQ_EVENT_ACCEPTED) {
				ev->peers++;
				ev->refused = 0;
			} else if (id == ZMQ_EVENT_DISCONNECTED && ev->peers > 0) {
				ev->peers--;
			} else if (id == ZMQ_EVENT_CONNECT_RETRIED && !ev->peers) {
				ev->refused = 1;
			}
		}
		/* the second frame names the endpoint */
		while (zmq_getsockopt(ev->mon, ZMQ_RCVMORE, &more, &ml) == 0 && more)
			if (zmq_recv(ev->mon, buf, sizeof(buf), 0) < 0)
				break;
	}
}

/* Hand queued messages to ZMQ until it says EAGAIN; 1 when it did. */
static int send_queue(struct kv_events *ev)
{
	for (;;) {
		struct message *m;
		unsigned char seq[8];

		pthread_mutex_lock(&ev->lock);
		m = ev->qlen ? ev->queue[ev->qhead] : NULL;
		pthread_mutex_unlock(&ev->lock);
		if (!m || ev->subs <= 0)
			return 0;
		for (int i = 0; i < 8; i++)
			seq[i] = (unsigned char)(m->seq >> (56 - 8 * i));
		if (zmq_send(ev->pub, m->topic, m->topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
			return errno == EAGAIN;
		/* ZMQ takes a multipart message whole once its first frame is in */
		zmq_send(ev->pub, seq, sizeof(seq), ZMQ_SNDMORE);
		zmq_send(ev->pub, m->payload, m->len, 0);
		pthread_mutex_lock(&ev->lock);
		ev->qhead = (ev->qhead + 1) % ev->o.queue_max;
		ev->qlen--;
		ev->stalled = 0;
		pthread_cond_broadcast(&ev->room);
		ev->st.messages_sent++;
		ev->st.hashes_sent += m->nhashes;
		pthread_mutex_unlock(&ev->lock);
		message_free(m);
	}
}

/* No subscriber, and none on the way: the peer refused us, or the join
 * window since open passed without one. */
static int no_subscriber_coming(struct kv_events *ev, int64_t now)
{
	uint64_t join = ev->o.linger_ns < JOIN_MAX_NS ? ev->o.linger_ns : JOIN_MAX_NS;

	if (ev->subs > 0 || ev->peers > 0)	/* a subscription is on the way */
		return 0;
	return ev->refused || now >= ev->open_ns + (int64_t)join;
}

/* At close: whether waiting longer could still deliver something. */
static int worth_waiting(struct kv_events *ev, int64_t now)
{
	if (now >= ev->close_ns + (int64_t)ev->o.linger_ns)
		return 0;
	return !no_subscriber_coming(ev, now);
}

static void *sender(void *arg)
{
	struct kv_events *ev = arg;

	for (;;) {
		zmq_pollitem_t it[3] = {
			{ .socket = ev->pub, .events = ZMQ_POLLIN },
			{ .socket = ev->mon, .events = ZMQ_POLLIN },
			{ .fd = ev->wakefd, .events = ZMQ_POLLIN },
		};
		int64_t now = kv_monotonic_ns();
		long timeout = 1000;
		int stopping, blocked, queued, pending;
		uint64_t drain;

		read_subscriptions(ev);
		read_monitor(ev);
		pthread_mutex_lock(&ev->lock);
		flush_locked(ev, 0);
		pthread_mutex_unlock(&ev->lock);
		blocked = send_queue(ev);

		pthread_mutex_lock(&ev->lock);
		if (ev->hopeless != no_subscriber_coming(ev, now)) {
			ev->hopeless = !ev->hopeless;
			pthread_cond_broadcast(&ev->room);
		}
		stopping = ev->stopping;
		queued = ev->qlen > 0;
		pending = ev->npending > 0;
		pthread_mutex_unlock(&ev->lock);
		if (stopping && (!queued || !worth_waiting(ev, now)))
			break;
		if (pending)
			timeout = (long)(ev->o.flush_ns / 1000000) + 1;
		if (queued && ev->subs > 0 && blocked)
			it[0].events |= ZMQ_POLLOUT;
		if (stopping)
			timeout = 10;
		if (zmq_poll(it, 3, timeout) < 0 && errno != EINTR)
			break;
		if (it[2].revents & ZMQ_POLLIN && read(ev->wakefd, &drain, sizeof(drain)) < 0) {
			/* nothing to drain */
		}
	}
	return NULL;
}

/* ---- model names ---- */

/* Whether name can be a topic's part: the subscriber splits the topic on
 * '@' and wants exactly three parts. */
static int topic_part_ok(const char *name)
{
	size_t len = strlen(name);

	if (!len || len > KV_NAME_MAX || strchr(name, '@'))
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			return 0;
	return 1;
}

/* The model name and block size config.json in model_dir states. */
static int read_model_name(int rootfd, const char *model_dir, char **name,
			   unsigned *block_size)
{
	char path[KV_NAME_MAX + 32], *text = NULL;
	struct kv_config *cfg = NULL;
	struct kv_block_ref ref;
	struct kv_layout_v0 v0;
	uint64_t tokens = 0, per_file = 0;
	size_t len = 0;
	ssize_t r;
	const char *mn;
	int fd, rc = -ENOENT;

	*name = NULL;
	*block_size = 0;
	if (kv_layout_model_dir_parse(model_dir, &ref) < 0) {
		if (kv_layout_v0_parse(model_dir, &v0) < 0)
			return -KV_EBADPATH;
		if (!topic_part_ok(v0.model_name))
			return -KV_EBADPATH;
		*name = strdup(v0.model_name);
		*block_size = v0.block_size;
		return *name ? 0 : -ENOMEM;
	}
	snprintf(path, sizeof(path), "%s/%s", model_dir, KV_CONFIG_NAME);
	fd = kvi_open_beneath(rootfd, path, O_RDONLY | O_NONBLOCK, 0, 0);
	if (fd < 0)
		return fd;
	text = malloc(CONFIG_READ_MAX);
	if (!text) {
		rc = -ENOMEM;
		goto out;
	}
	while (len < CONFIG_READ_MAX && (r = read(fd, text + len, CONFIG_READ_MAX - len)) > 0)
		len += (size_t)r;
	rc = kv_config_parse(text, len, &cfg);
	if (rc < 0)
		goto out;
	mn = kv_config_string(cfg, "model_name");
	if (!mn || !topic_part_ok(mn)) {
		rc = -KV_EBADCONFIG;
		goto out;
	}
	*name = strdup(mn);
	rc = *name ? 0 : -ENOMEM;
	if (kv_config_blocks(cfg, &tokens, &per_file) == 0 && tokens <= UINT32_MAX)
		*block_size = (unsigned)tokens;
out:
	kv_config_free(cfg);
	free(text);
	close(fd);
	return rc;
}

/* The name and block size cfg states, for a dir named before it is read. */
static void name_from_config(struct dir_name *d, const struct kv_config *cfg)
{
	uint64_t tokens = 0, per_file = 0;
	const char *mn = kv_config_string(cfg, "model_name");

	free(d->model_name);
	d->model_name = mn && topic_part_ok(mn) ? strdup(mn) : NULL;
	d->block_size = kv_config_blocks(cfg, &tokens, &per_file) == 0 && tokens <= UINT32_MAX ?
			(unsigned)tokens : 0;
}

static struct dir_name *name_for(struct kv_events *ev, int rootfd, const char *model_dir)
{
	struct dir_name *d;

	/* model dirs come in runs; few volumes hold more than a handful */
	for (size_t i = ev->nnames; i-- > 0;)
		if (!strcmp(ev->names[i].model_dir, model_dir))
			return &ev->names[i];
	if (ev->nnames == ev->namecap) {
		size_t cap = ev->namecap ? ev->namecap * 2 : 8;
		struct dir_name *p = realloc(ev->names, cap * sizeof(*p));

		if (!p)
			return NULL;
		ev->names = p;
		ev->namecap = cap;
	}
	d = &ev->names[ev->nnames];
	d->model_dir = strdup(model_dir);
	if (!d->model_dir)
		return NULL;
	d->model_name = NULL;
	d->block_size = 0;
	if (rootfd >= 0)
		read_model_name(rootfd, model_dir, &d->model_name, &d->block_size);
	ev->nnames++;
	return d;
}

int kv_events_name_model_dir(struct kv_events *ev, const char *model_dir,
			     const struct kv_config *cfg)
{
	struct dir_name *d;

	pthread_mutex_lock(&ev->lock);
	d = name_for(ev, -1, model_dir);
	if (d)
		name_from_config(d, cfg);
	pthread_mutex_unlock(&ev->lock);
	return !d ? -ENOMEM : d->model_name ? 0 : -KV_EBADCONFIG;
}

/* ---- publishing ---- */

static struct topic *topic_for(struct kv_events *ev, const char *model, const char *medium)
{
	const char *mid = ev->o.pod && strcmp(medium, KV_EVENTS_SHARED_STORAGE) ? ev->o.pod
										   : medium;
	size_t len = 3 + strlen(mid) + 1 + strlen(model) + 1;
	struct topic *t;
	char *name = malloc(len);

	if (!name)
		return NULL;
	snprintf(name, len, "kv@%s@%s", mid, model);
	for (size_t i = ev->ntopics; i-- > 0;)
		if (!strcmp(ev->topics[i].name, name)) {
			free(name);
			return &ev->topics[i];
		}
	if (ev->ntopics == ev->topcap) {
		size_t cap = ev->topcap ? ev->topcap * 2 : 8;
		struct topic *p = realloc(ev->topics, cap * sizeof(*p));

		if (!p) {
			free(name);
			return NULL;
		}
		ev->topics = p;
		ev->topcap = cap;
	}
	t = &ev->topics[ev->ntopics++];
	memset(t, 0, sizeof(*t));
	t->name = name;
	return t;
}

/* 1 when the batch is the first pending one: the sender must start its
 * flush_ns clock. */
static int add_event(struct kv_events *ev, struct topic *t, enum kv_event_kind kind,
		     const char *medium, uint64_t hash, unsigned block_size)
{
	int first = 0;

	struct pending_event *e = t->nev ? &t->ev[t->nev - 1] : NULL;

	/* one AllBlocksCleared says it all until something new is stored */
	if (e && kind == KV_EVENT_ALL_CLEARED && e->kind == kind)
		return 0;

	if (!e || e->kind != kind || kind == KV_EVENT_ALL_CLEARED ||
	    strcmp(e->medium, medium) || e->block_size != block_size) {
		if (t->nev == t->evcap) {
			size_t cap = t->evcap ? t->evcap * 2 : 4;
			struct pending_event *p = realloc(t->ev, cap * sizeof(*p));

			if (!p)
				return -ENOMEM;
			t->ev = p;
			t->evcap = cap;
		}
		e = &t->ev[t->nev++];
		memset(e, 0, sizeof(*e));
		e->kind = kind;
		snprintf(e->medium, sizeof(e->medium), "%s", medium);
		e->block_size = block_size;
		if (t->nev == 1) {
			t->first_ns = kv_monotonic_ns();
			first = ev->npending++ == 0;
		}
	}
	if (kind == KV_EVENT_ALL_CLEARED)
		return first;
	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 16;
		uint64_t *p = realloc(e->hashes, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		e->hashes = p;
		e->cap = cap;
	}
	e->hashes[e->n++] = hash;
	t->nhashes++;
	return first;
}

static int publish_locked(struct kv_events *ev, enum kv_event_kind kind, const char *model,
			  const char *medium, uint64_t hash, unsigned block_size, int *woke)
{
	struct topic *t = topic_for(ev, model, medium);
	int rc;

	if (!t)
		return -ENOMEM;
	rc = add_event(ev, t, kind, medium, hash, block_size);
	if (rc < 0)
		return rc;
	*woke = rc;
	if (t->nhashes >= ev->o.batch_max || t->nev >= EVENTS_PER_MSG)
		*woke |= enqueue(ev, t);
	return 0;
}

int kv_events_publish(struct kv_events *ev, enum kv_event_kind kind, const char *model_name,
		      const char *medium, uint64_t hash, unsigned block_size)
{
	int rc, woke = 0;

	if (!model_name || !topic_part_ok(model_name) || !medium || !topic_part_ok(medium) ||
	    strlen(medium) >= MEDIUM_MAX)
		return -EINVAL;
	pthread_mutex_lock(&ev->lock);
	rc = publish_locked(ev, kind, model_name, medium, hash, block_size, &woke);
	pthread_mutex_unlock(&ev->lock);
	if (woke)
		wake(ev);
	return rc;
}

int kv_events_publish_block(struct kv_events *ev, enum kv_event_kind kind,
			    const char *medium, int rootfd, const struct kv_block_ref *ref)
{
	struct dir_name *d;
	int rc, woke = 0;

	if (!medium || !topic_part_ok(medium) || strlen(medium) >= MEDIUM_MAX)
		return -EINVAL;
	pthread_mutex_lock(&ev->lock);
	d = name_for(ev, rootfd, ref->model_dir);
	if (!d) {
		rc = -ENOMEM;
	} else if (!d->model_name) {
		ev->st.unnamed++;
		rc = 1;
	} else {
		rc = publish_locked(ev, kind, d->model_name, medium,
				    kv_events_hash64(ref->hash), d->block_size, &woke);
	}
	pthread_mutex_unlock(&ev->lock);
	if (woke)
		wake(ev);
	return rc;
}

void kv_events_flush(struct kv_events *ev)
{
	int woke;

	pthread_mutex_lock(&ev->lock);
	woke = flush_locked(ev, 1);
	pthread_mutex_unlock(&ev->lock);
	if (woke)
		wake(ev);
}

void kv_events_stats(struct kv_events *ev, struct kv_events_stats *out)
{
	pthread_mutex_lock(&ev->lock);
	*out = ev->st;
	pthread_mutex_unlock(&ev->lock);
}

/* ---- open and close ---- */

/* libzmq unlinks an ipc:// path before it binds there: allow that only
 * for nothing, or a socket no one serves.  Any other file is refused, so
 * a mistyped or planted endpoint never deletes a file. */
int kvi_ipc_path_free(const char *addr, const char *endpoint)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = addr + 6;
	struct stat st;
	int fd, err;

	if (strncmp(addr, "ipc://", 6) || path[0] == '@')
		return 0;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : kvi_fail(-errno, "'%s': %s", endpoint, strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return kvi_fail(-EEXIST, "'%s': '%s' exists and is not a socket", endpoint, path);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	err = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (err == 0)
		return kvi_fail(-EADDRINUSE, "'%s': another process serves '%s'", endpoint, path);
	return 0;
}

static void destroy(struct kv_events *ev)
{
	if (ev->mon)
		zmq_close(ev->mon);
	if (ev->pub)
		zmq_close(ev->pub);
	if (ev->zctx)
		zmq_ctx_term(ev->zctx);
	if (ev->ipc_path) {
		struct stat st;

		/* libzmq unlinks the path itself: a file put there since is
		 * not ours to remove. */
		if (lstat(ev->ipc_path, &st) == 0 && S_ISSOCK(st.st_mode) &&
		    st.st_dev == ev->ipc_dev && st.st_ino == ev->ipc_ino)
			unlink(ev->ipc_path);
	}
	free(ev->ipc_path);
	if (ev->wakefd >= 0)
		close(ev->wakefd);
	for (size_t i = 0; i < ev->ntopics; i++) {
		for (size_t k = 0; k < ev->topics[i].nev; k++)
			free(ev->topics[i].ev[k].hashes);
		free(ev->topics[i].ev);
		free(ev->topics[i].name);
	}
	free(ev->topics);
	for (size_t i = 0; i < ev->qlen; i++)
		message_free(ev->queue[(ev->qhead + i) % ev->o.queue_max]);
	free(ev->queue);
	for (size_t i = 0; i < ev->nnames; i++) {
		free(ev->names[i].model_dir);
		free(ev->names[i].model_name);
	}
	free(ev->names);
	pthread_cond_destroy(&ev->room);
	pthread_mutex_destroy(&ev->lock);
	free(ev);
}

static int zmq_err(const char *what, const char *endpoint)
{
	int err = errno;

	return kvi_fail(-err, "%s %s: %s", what, endpoint, zmq_strerror(err));
}

int kv_events_open(const char *endpoint, const struct kv_events_opts *opts,
		   struct kv_events **out)
{
	struct kv_events *ev;
	const char *addr;
	int bind, rc, one = 1, zero = 0, hwm = ZMQ_HWM;

	*out = NULL;
	rc = endpoint_parse(endpoint, &addr, &bind);
	if (rc < 0)
		return rc;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	pthread_mutex_init(&ev->lock, NULL);
	pthread_cond_init(&ev->room, NULL);
	ev->wakefd = -1;
	if (opts)
		ev->o = *opts;
	if (!ev->o.queue_max)
		ev->o.queue_max = DEFAULT_QUEUE;
	if (!ev->o.batch_max)
		ev->o.batch_max = DEFAULT_BATCH;
	if (!ev->o.flush_ns)
		ev->o.flush_ns = DEFAULT_FLUSH_NS;
	if (!ev->o.linger_ns)
		ev->o.linger_ns = DEFAULT_LINGER_NS;
	ev->queue = calloc(ev->o.queue_max, sizeof(*ev->queue));
	ev->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ev->zctx = zmq_ctx_new();
	if (!ev->queue || ev->wakefd < 0 || !ev->zctx) {
		rc = -ENOMEM;
		goto fail;
	}
	ev->pub = zmq_socket(ev->zctx, ZMQ_XPUB);
	if (!ev->pub) {
		rc = zmq_err("cannot open a publisher for", endpoint);
		goto fail;
	}
	zmq_setsockopt(ev->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(ev->pub, ZMQ_XPUB_NODROP, &one, sizeof(one));
	zmq_setsockopt(ev->pub, ZMQ_LINGER, &zero, sizeof(zero));
	/* A ZAP domain makes libzmq refuse pre-ZMTP-3 peers at the
	 * handshake.  Without it a peer that is not ZMTP at all (an HTTP
	 * server answering 400 and closing) is taken for ZMTP 1.0, whose
	 * phantom subscription libzmq 4.3 asserts on (zmtp_engine.cpp:463)
	 * and aborts the program.  No ZAP handler runs, so ZMTP 3
	 * subscribers connect as before. */
	zmq_setsockopt(ev->pub, ZMQ_ZAP_DOMAIN, ZAP_DOMAIN, strlen(ZAP_DOMAIN));
	if (zmq_socket_monitor(ev->pub, MONITOR_ADDR,
			       ZMQ_EVENT_CONNECTED | ZMQ_EVENT_ACCEPTED |
			       ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED) < 0 ||
	    !(ev->mon = zmq_socket(ev->zctx, ZMQ_PAIR)) ||
	    zmq_connect(ev->mon, MONITOR_ADDR) < 0) {
		rc = zmq_err("cannot monitor the publisher for", endpoint);
		goto fail;
	}
	if (bind && (rc = kvi_ipc_path_free(addr, endpoint)) < 0)
		goto fail;
	if ((bind ? zmq_bind(ev->pub, addr) : zmq_connect(ev->pub, addr)) < 0) {
		rc = zmq_err(bind ? "cannot bind" : "cannot connect to", endpoint);
		goto fail;
	}
	if (bind && !strncmp(addr, "ipc://", 6) && addr[6] != '@') {
		struct stat st;

		ev->ipc_path = strdup(addr + 6);
		if (lstat(addr + 6, &st) == 0) {
			ev->ipc_dev = st.st_dev;
			ev->ipc_ino = st.st_ino;
		}
	}
	ev->open_ns = kv_monotonic_ns();
	rc = -pthread_create(&ev->thread, NULL, sender, ev);
	if (rc < 0)
		goto fail;
	*out = ev;
	return 0;
fail:
	destroy(ev);
	return rc;
}

void kv_events_close(struct kv_events *ev, struct kv_events_stats *stats)
{
	int64_t left;
	int ms;

	if (!ev) {
		if (stats)
			memset(stats, 0, sizeof(*stats));
		return;
	}
	pthread_mutex_lock(&ev->lock);
	flush_locked(ev, 1);
	ev->stopping = 1;
	ev->close_ns = kv_monotonic_ns();
	pthread_mutex_unlock(&ev->lock);
	wake(ev);
	pthread_join(ev->thread, NULL);

	/* What is still queued never reached ZMQ; what ZMQ holds it may send
	 * for the rest of the linger. */
	ev->st.messages_dropped += ev->qlen;
	for (size_t i = 0; i < ev->qlen; i++)
		ev->st.hashes_dropped += ev->queue[(ev->qhead + i) % ev->o.queue_max]->nhashes;
	left = ev->close_ns + (int64_t)ev->o.linger_ns - kv_monotonic_ns();
	ms = left > 0 ? (int)(left / 1000000) : 0;
	zmq_setsockopt(ev->pub, ZMQ_LINGER, &ms, sizeof(ms));
	zmq_socket_monitor(ev->pub, NULL, 0);
	if (stats)
		*stats = ev->st;
	destroy(ev);
}
