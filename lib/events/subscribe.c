/*
 * The subscriber's side of the KV-event wire: decode what vLLM, SGLang
 * and llm-d publish (both encodings, hashes as integers or bytes) and
 * receive it on a ZMQ SUB socket without ever blocking the caller.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <msgpack.h>
#include <zmq.h>

#include <kv/errors.h>
#include <kv/events.h>
#include "util/error.h"
#include "events/endpoint.h"

/* What a publisher can make a subscriber hold: ZMQ queues at most
 * SUB_HWM messages of at most SUB_MAX_MSG_BYTES (a bigger one drops its
 * sender), and decoding one costs about 32 bytes per byte of it: about
 * 200 MiB at the worst, documented in kvwatch(8).  A vLLM step's events
 * are kilobytes. */
#define SUB_MAX_MSG_BYTES	(4 << 20)
#define SUB_HWM			16
#define SUB_TOPICS		64		/* topics whose sequence is followed */
#define MEDIUM_MAX		63

/* ---- decoding ---- */

static int obj_str_is(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	       !memcmp(o->via.str.ptr, s, n);
}

static int hash_of(const msgpack_object *o, uint64_t *out)
{
	const unsigned char *p;
	uint32_t n, i;
	uint64_t v = 0;

	switch (o->type) {
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		*out = o->via.u64;
		return 0;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		*out = (uint64_t)o->via.i64;
		return 0;
	case MSGPACK_OBJECT_BIN:
	case MSGPACK_OBJECT_STR:
		p = (const unsigned char *)(o->type == MSGPACK_OBJECT_BIN ? o->via.bin.ptr
									  : o->via.str.ptr);
		n = o->type == MSGPACK_OBJECT_BIN ? o->via.bin.size : o->via.str.size;
		for (i = n > 8 ? n - 8 : 0; i < n; i++)
			v = v << 8 | p[i];
		*out = v;
		return 0;
	default:
		return -KV_EPROTO;
	}
}

/* Deliver one event of kind with hashes (an array, or NULL) and medium
 * (a string, nil, or NULL when absent). */
static int deliver(enum kv_event_kind kind, const msgpack_object *hashes,
		   const msgpack_object *medium, double ts, kv_event_fn fn, void *arg)
{
	char med[MEDIUM_MAX + 1] = "";
	struct kv_event ev = { .kind = kind, .medium = med, .ts = ts };
	uint64_t *h = NULL;
	int rc;

	if (medium && medium->type == MSGPACK_OBJECT_STR) {
		uint32_t n = medium->via.str.size;

		if (n > MEDIUM_MAX || memchr(medium->via.str.ptr, '\0', n))
			return -KV_EPROTO;
		memcpy(med, medium->via.str.ptr, n);
		med[n] = '\0';
	} else if (medium && medium->type != MSGPACK_OBJECT_NIL) {
		return -KV_EPROTO;
	}
	if (hashes) {
		if (hashes->type != MSGPACK_OBJECT_ARRAY)
			return -KV_EPROTO;
		if (hashes->via.array.size) {
			h = malloc(hashes->via.array.size * sizeof(*h));
			if (!h)
				return -ENOMEM;
		}
		for (uint32_t i = 0; i < hashes->via.array.size; i++)
			if (hash_of(&hashes->via.array.ptr[i], &h[i]) < 0) {
				free(h);
				return -KV_EPROTO;
			}
		ev.hashes = h;
		ev.nhashes = hashes->via.array.size;
	}
	rc = fn(&ev, arg);
	free(h);
	return rc;
}

static int kind_of(const msgpack_object *tag, enum kv_event_kind *kind)
{
	if (obj_str_is(tag, "BlockStored"))
		*kind = KV_EVENT_BLOCK_STORED;
	else if (obj_str_is(tag, "BlockRemoved"))
		*kind = KV_EVENT_BLOCK_REMOVED;
	else if (obj_str_is(tag, "AllBlocksCleared"))
		*kind = KV_EVENT_ALL_CLEARED;
	else
		return 0;
	return 1;
}

static int decode_event(const msgpack_object *o, double ts, kv_event_fn fn, void *arg)
{
	const msgpack_object *hashes = NULL, *medium = NULL, *tag = NULL;
	enum kv_event_kind kind;

	if (o->type == MSGPACK_OBJECT_ARRAY) {
		const msgpack_object *f = o->via.array.ptr;
		uint32_t n = o->via.array.size;

		if (!n || f[0].type != MSGPACK_OBJECT_STR)
			return -KV_EPROTO;
		if (!kind_of(&f[0], &kind))
			return 0;
		if (kind == KV_EVENT_BLOCK_STORED) {
			if (n < 2)
				return -KV_EPROTO;
			hashes = &f[1];
			medium = n > 6 ? &f[6] : NULL;
		} else if (kind == KV_EVENT_BLOCK_REMOVED) {
			if (n < 2)
				return -KV_EPROTO;
			hashes = &f[1];
			medium = n > 2 ? &f[2] : NULL;
		}
		return deliver(kind, hashes, medium, ts, fn, arg);
	}
	if (o->type != MSGPACK_OBJECT_MAP)
		return -KV_EPROTO;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];

		if (obj_str_is(&kv->key, "type"))
			tag = &kv->val;
		else if (obj_str_is(&kv->key, "block_hashes"))
			hashes = &kv->val;
		else if (obj_str_is(&kv->key, "medium"))
			medium = &kv->val;
	}
	if (!tag || tag->type != MSGPACK_OBJECT_STR)
		return -KV_EPROTO;
	if (!kind_of(tag, &kind))
		return 0;
	if (kind != KV_EVENT_ALL_CLEARED && !hashes)
		return -KV_EPROTO;
	return deliver(kind, kind == KV_EVENT_ALL_CLEARED ? NULL : hashes, medium, ts, fn, arg);
}

/* Read a big-endian length of n bytes at p. */
static uint64_t be(const unsigned char *p, unsigned n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | *p++;
	return v;
}

/*
 * Whether every array and map header claims no more elements than bytes
 * remain (each element takes one at least), so that unpacking, which
 * allocates what the headers claim before it reads the elements, needs
 * memory in proportion to the message and not to what it says.  Only
 * the headers' sizes are read here; msgpack-c decodes.
 */
static int claims_fit(const unsigned char *p, size_t len)
{
	size_t pos = 0;
	uint64_t pending = 1;		/* objects still to skip */

	while (pending && pos < len) {
		unsigned char t = p[pos++];
		uint64_t items = 0, skip = 0;
		unsigned lenb = 0;

		pending--;
		if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
			continue;
		if ((t & 0xf0) == 0x90 || (t & 0xf0) == 0x80)
			items = (uint64_t)(t & 0x0f) * ((t & 0xf0) == 0x80 ? 2 : 1);
		else if ((t & 0xe0) == 0xa0)
			skip = t & 0x1f;
		else switch (t) {
		case 0xc4: case 0xd9: lenb = 1; break;		/* bin8, str8 */
		case 0xc5: case 0xda: lenb = 2; break;
		case 0xc6: case 0xdb: lenb = 4; break;
		case 0xc7: lenb = 1; skip = 1; break;		/* ext: + type */
		case 0xc8: lenb = 2; skip = 1; break;
		case 0xc9: lenb = 4; skip = 1; break;
		case 0xca: skip = 4; break;
		case 0xcb: skip = 8; break;
		case 0xcc: case 0xd0: skip = 1; break;
		case 0xcd: case 0xd1: skip = 2; break;
		case 0xce: case 0xd2: skip = 4; break;
		case 0xcf: case 0xd3: skip = 8; break;
		case 0xd4: skip = 2; break;			/* fixext */
		case 0xd5: skip = 3; break;
		case 0xd6: skip = 5; break;
		case 0xd7: skip = 9; break;
		case 0xd8: skip = 17; break;
		case 0xdc: case 0xdd:				/* array16/32 */
		case 0xde: case 0xdf:				/* map16/32 */
			lenb = t & 1 ? 4 : 2;
			if (len - pos < lenb)
				return 0;
			items = be(p + pos, lenb) * (t >= 0xde ? 2 : 1);
			pos += lenb;
			lenb = 0;
			break;
		default:
			return 0;
		}
		if (lenb) {
			if (len - pos < lenb)
				return 0;
			skip += be(p + pos, lenb);
			pos += lenb;
		}
		if (skip > len - pos)
			return 0;
		pos += skip;
		pending += items;
		if (pending > len - pos)
			return 0;
	}
	return !pending;
}

int kv_events_decode(const void *payload, size_t len, kv_event_fn fn, void *arg)
{
	msgpack_unpacked u;
	const msgpack_object *evs, *tso;
	double ts = 0;
	size_t off = 0;
	int rc = 0;

	if (!claims_fit(payload, len))
		return -KV_EPROTO;
	msgpack_unpacked_init(&u);
	switch (msgpack_unpack_next(&u, payload, len, &off)) {
	case MSGPACK_UNPACK_SUCCESS:
		break;
	case MSGPACK_UNPACK_NOMEM_ERROR:
		msgpack_unpacked_destroy(&u);
		return -ENOMEM;
	default:
		msgpack_unpacked_destroy(&u);
		return -KV_EPROTO;
	}
	if (off != len || u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size < 2 ||
	    u.data.via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY) {
		msgpack_unpacked_destroy(&u);
		return -KV_EPROTO;
	}
	evs = &u.data.via.array.ptr[1];
	tso = &u.data.via.array.ptr[0];
	if (tso->type == MSGPACK_OBJECT_FLOAT32 || tso->type == MSGPACK_OBJECT_FLOAT64)
		ts = tso->via.f64;
	else if (tso->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		ts = (double)tso->via.u64;
	for (uint32_t i = 0; !rc && i < evs->via.array.size; i++)
		rc = decode_event(&evs->via.array.ptr[i], ts, fn, arg);
	msgpack_unpacked_destroy(&u);
	return rc;
}

/* ---- the socket ---- */

struct topic_seq {
	uint64_t hash;		/* of the topic; 0: unused */
	uint64_t next;		/* the sequence number expected */
};

struct kv_events_sub {
	void *zctx, *sock;
	struct kv_events_sub_stats st;
	struct topic_seq seq[SUB_TOPICS];
};

int kv_events_sub_open(struct kv_events_sub **out)
{
	struct kv_events_sub *s = calloc(1, sizeof(*s));
	int64_t max = SUB_MAX_MSG_BYTES;
	int hwm = SUB_HWM, zero = 0;

	if (!s)
		return -ENOMEM;
	s->zctx = zmq_ctx_new();
	s->sock = s->zctx ? zmq_socket(s->zctx, ZMQ_SUB) : NULL;
	if (!s->sock) {
		int err = errno ? errno : ENOMEM;

		if (s->zctx)
			zmq_ctx_term(s->zctx);
		free(s);
		return kvi_fail(-err, "cannot open a subscriber: %s", zmq_strerror(err));
	}
	zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &max, sizeof(max));
	zmq_setsockopt(s->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(s->sock, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s->sock, ZMQ_SUBSCRIBE, "", 0);
	*out = s;
	return 0;
}

int kv_events_sub_add(struct kv_events_sub *s, const char *endpoint)
{
	const char *addr = endpoint;
	int bind, rc = kv_events_endpoint_check(endpoint, &bind);

	if (rc)
		return rc;
	if (!strncmp(addr, "bind:", 5))
		addr += 5;
	else if (!strncmp(addr, "connect:", 8))
		addr += 8;
	if (bind && (rc = kvi_ipc_path_free(addr, endpoint)) < 0)
		return rc;
	if ((bind ? zmq_bind(s->sock, addr) : zmq_connect(s->sock, addr)) < 0) {
		int err = errno;

		return kvi_fail(-err, "cannot %s %s: %s", bind ? "bind" : "connect to",
				endpoint, zmq_strerror(err));
	}
	return 0;
}

int kv_events_sub_fd(struct kv_events_sub *s)
{
	int fd = -1;
	size_t len = sizeof(fd);

	return zmq_getsockopt(s->sock, ZMQ_FD, &fd, &len) < 0 ? -errno : fd;
}

/* Count the numbers a topic skipped since its last message. */
static void follow_seq(struct kv_events_sub *s, const void *topic, size_t tlen, uint64_t seq)
{
	uint64_t h = 1469598103934665603ULL;	/* FNV-1a: a slot per topic */
	struct topic_seq *t;

	for (size_t i = 0; i < tlen; i++)
		h = (h ^ ((const unsigned char *)topic)[i]) * 1099511628211ULL;
	h |= 1;
	t = &s->seq[h % SUB_TOPICS];
	if (t->hash == h && seq > t->next)
		s->st.gaps += seq - t->next;
	t->hash = h;
	t->next = seq + 1;
}

/* Receive the rest of a message that is being refused. */
static void skip_parts(void *sock, zmq_msg_t *m)
{
	int more;
	size_t ml = sizeof(more);

	while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml) == 0 && more)
		if (zmq_msg_recv(m, sock, 0) < 0)
			break;
}

struct counted {
	kv_event_fn fn;
	void *arg;
	uint64_t *events;
};

static int count_event(const struct kv_event *ev, void *arg)
{
	struct counted *c = arg;

	(*c->events)++;
	return c->fn(ev, c->arg);
}

int kv_events_sub_drain(struct kv_events_sub *s, unsigned max_messages,
			kv_event_fn fn, void *arg)
{
	struct counted c = { fn, arg, &s->st.events };

	for (unsigned i = 0; i < max_messages; i++) {
		zmq_msg_t part[3];
		int more = 0, n = 0, rc = 0;
		size_t ml = sizeof(more);

		for (; n < 3; n++) {
			zmq_msg_init(&part[n]);
			if (zmq_msg_recv(&part[n], s->sock, n ? 0 : ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(&part[n]);
				break;
			}
			if (zmq_getsockopt(s->sock, ZMQ_RCVMORE, &more, &ml) < 0 || !more) {
				n++;
				break;
			}
		}
		if (n == 0)
			return 0;
		if (n == 3 && more)
			skip_parts(s->sock, &part[2]);
		if (n != 3 || more || zmq_msg_size(&part[1]) != 8) {
			s->st.bad_frames++;
		} else {
			const unsigned char *b = zmq_msg_data(&part[1]);
			uint64_t seq = 0;

			for (int k = 0; k < 8; k++)
				seq = seq << 8 | b[k];
			follow_seq(s, zmq_msg_data(&part[0]), zmq_msg_size(&part[0]), seq);
			rc = kv_events_decode(zmq_msg_data(&part[2]), zmq_msg_size(&part[2]),
					      count_event, &c);
			if (rc == -KV_EPROTO || rc == -ENOMEM) {
				s->st.bad_frames++;
				rc = 0;
			} else if (rc == 0) {
				s->st.messages++;
			}
		}
		while (n-- > 0)
			zmq_msg_close(&part[n]);
		if (rc)
			return rc;
	}
	return 1;
}

void kv_events_sub_stats(const struct kv_events_sub *s, struct kv_events_sub_stats *out)
{
	*out = s->st;
}

void kv_events_sub_close(struct kv_events_sub *s)
{
	if (!s)
		return;
	zmq_close(s->sock);
	zmq_ctx_term(s->zctx);
	free(s);
}
