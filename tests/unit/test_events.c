/*
 * The KV-event publisher against a plain ZMQ SUB socket: endpoint rules,
 * the three frames and their bytes, hashes in the 8-byte form llm-d's Go
 * adapter reads, per-topic sequence numbers, and drops counted (never a
 * blocked caller) when the subscriber does not read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <msgpack.h>
#include <zmq.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

static void endpoints(void)
{
	int bind = -1;

	CHECK(kv_events_endpoint_check("tcp://*:5557", &bind) == 0 && bind == 1);
	CHECK(kv_events_endpoint_check("tcp://[::]:5557", &bind) == 0 && bind == 1);
	CHECK(kv_events_endpoint_check("tcp://indexer.llm-d:5557", &bind) == 0 && bind == 0);
	CHECK(kv_events_endpoint_check("tcp://10.0.0.7:5557", &bind) == 0 && bind == 0);
	CHECK(kv_events_endpoint_check("ipc:///run/kv.sock", &bind) == 0 && bind == 1);
	CHECK(kv_events_endpoint_check("connect:ipc:///run/kv.sock", &bind) == 0 && bind == 0);
	CHECK(kv_events_endpoint_check("bind:tcp://127.0.0.1:5557", &bind) == 0 && bind == 1);
	CHECK(kv_events_endpoint_check("tcp://h:0", NULL) == -EINVAL);
	CHECK(kv_events_endpoint_check("tcp://h:65536", NULL) == -EINVAL);
	CHECK(kv_events_endpoint_check("tcp://h:12x", NULL) == -EINVAL);
	CHECK(kv_events_endpoint_check("tcp://:1", NULL) == -EINVAL);
	CHECK(kv_events_endpoint_check("tcp://h", NULL) == -EINVAL);
	CHECK(kv_events_endpoint_check("connect:tcp://*:1", NULL) == -EINVAL);
	CHECK(kv_events_endpoint_check("ipc://", NULL) == -EINVAL);
	CHECK(kv_events_endpoint_check("udp://h:1", NULL) == -EINVAL);
	CHECK(kv_events_endpoint_check("/tmp/events", NULL) == -EINVAL);
	CHECK(kv_events_is_endpoint("ipc://x") && kv_events_is_endpoint("bind:x") &&
	      !kv_events_is_endpoint("-") && !kv_events_is_endpoint("/tmp/x"));

	CHECK(kv_events_hash64("0123456789abcdef") == 0x0123456789abcdefull);
	CHECK(kv_events_hash64("ffff0123456789abcdef") == 0x0123456789abcdefull);
	CHECK(kv_events_hash64("00000000000000000000000000000005") == 5);
	CHECK(kv_events_hash64("ABCDE") == 0xabcde);
}

/* Receive one three-frame message: 0, or -1 when none comes in ms. */
static int recv_msg(void *sub, char *topic, size_t tlen, unsigned char seq[8],
		    unsigned char *payload, size_t *plen, int ms)
{
	zmq_pollitem_t it = { .socket = sub, .events = ZMQ_POLLIN };
	int n;

	if (zmq_poll(&it, 1, ms) <= 0)
		return -1;
	n = zmq_recv(sub, topic, tlen - 1, 0);
	CHECK(n > 0);
	topic[n > 0 ? n : 0] = '\0';
	CHECK(zmq_recv(sub, seq, 8, 0) == 8);
	n = zmq_recv(sub, payload, *plen, 0);
	CHECK(n > 0);
	*plen = n > 0 ? (size_t)n : 0;
	return 0;
}

static void wire(const char *dir)
{
	char ep[256], topic[256];
	unsigned char seq[8], payload[4096];
	size_t plen = sizeof(payload);
	struct kv_events *ev;
	struct kv_events_stats st;
	void *ctx = zmq_ctx_new(), *sub = zmq_socket(ctx, ZMQ_SUB);
	msgpack_unpacked u;
	static const unsigned char five[9] = { 0xcf, 0, 0, 0, 0, 0, 0, 0, 5 };

	snprintf(ep, sizeof(ep), "ipc://%s/wire.sock", dir);
	CHECK(zmq_bind(sub, ep) == 0);
	CHECK(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0) == 0);
	snprintf(ep, sizeof(ep), "connect:ipc://%s/wire.sock", dir);
	CHECK(kv_events_open(ep, NULL, &ev) == 0);
	CHECK(kv_events_publish(ev, KV_EVENT_BLOCK_REMOVED, "org/model", "SHARED_STORAGE", 5, 0) == 0);
	CHECK(kv_events_publish(ev, KV_EVENT_BLOCK_REMOVED, "org/model", "SHARED_STORAGE",
				0xfedcba9876543210ull, 0) == 0);
	CHECK(kv_events_publish(ev, KV_EVENT_BLOCK_STORED, "org/model", "SHARED_STORAGE", 7, 16) == 0);
	kv_events_flush(ev);
	CHECK(recv_msg(sub, topic, sizeof(topic), seq, payload, &plen, 5000) == 0);
	CHECK(!strcmp(topic, "kv@SHARED_STORAGE@org/model"));
	CHECK(!memcmp(seq, "\0\0\0\0\0\0\0\0", 8));
	/* a small hash still goes as uint64 (0xcf), which the Go adapter takes */
	CHECK(memmem(payload, plen, five, sizeof(five)) != NULL);
	msgpack_unpacked_init(&u);
	CHECK(msgpack_unpack_next(&u, (const char *)payload, plen, NULL) == MSGPACK_UNPACK_SUCCESS);
	if (u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 2) {
		msgpack_object ts = u.data.via.array.ptr[0], evs = u.data.via.array.ptr[1];

		CHECK(ts.type == MSGPACK_OBJECT_FLOAT64);
		CHECK(evs.type == MSGPACK_OBJECT_ARRAY && evs.via.array.size == 2);
		if (evs.type == MSGPACK_OBJECT_ARRAY && evs.via.array.size == 2) {
			msgpack_object rm = evs.via.array.ptr[0], sd = evs.via.array.ptr[1];

			CHECK(rm.type == MSGPACK_OBJECT_ARRAY && rm.via.array.size == 3);
			CHECK(rm.via.array.ptr[1].via.array.size == 2);
			CHECK(rm.via.array.ptr[1].via.array.ptr[1].via.u64 == 0xfedcba9876543210ull);
			CHECK(sd.type == MSGPACK_OBJECT_ARRAY && sd.via.array.size == 7);
			CHECK(sd.via.array.ptr[2].type == MSGPACK_OBJECT_NIL);
			CHECK(sd.via.array.ptr[4].via.u64 == 16);
		}
	} else {
		CHECK(!"payload is [ts, events]");
	}
	msgpack_unpacked_destroy(&u);

	/* the next message on the topic is sequence 1 */
	CHECK(kv_events_publish(ev, KV_EVENT_ALL_CLEARED, "org/model", "SHARED_STORAGE", 0, 0) == 0);
	kv_events_flush(ev);
	plen = sizeof(payload);
	CHECK(recv_msg(sub, topic, sizeof(topic), seq, payload, &plen, 5000) == 0);
	CHECK(seq[7] == 1);
	kv_events_close(ev, &st);
	CHECK(st.messages_sent == 2 && st.hashes_sent == 3 && st.messages_dropped == 0);
	zmq_close(sub);
	zmq_ctx_term(ctx);
	snprintf(ep, sizeof(ep), "%s/wire.sock", dir);
	unlink(ep);
}

/* A subscriber that never reads: publish never blocks, and every hash is
 * sent or counted as dropped. */
static void drops(const char *dir)
{
	struct kv_events_opts o = { .queue_max = 2, .batch_max = 1,
				    .linger_ns = 200 * 1000000ull };
	struct kv_events_stats st;
	struct kv_events *ev;
	char ep[256];
	int hwm = 1, i;
	void *ctx = zmq_ctx_new(), *sub = zmq_socket(ctx, ZMQ_SUB);

	zmq_setsockopt(sub, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	snprintf(ep, sizeof(ep), "ipc://%s/drops.sock", dir);
	CHECK(zmq_bind(sub, ep) == 0);
	CHECK(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0) == 0);
	snprintf(ep, sizeof(ep), "connect:ipc://%s/drops.sock", dir);
	CHECK(kv_events_open(ep, &o, &ev) == 0);
	for (i = 0; i < 200000; i++)
		CHECK(kv_events_publish(ev, KV_EVENT_BLOCK_STORED, "m", "CPU", (uint64_t)i, 0) == 0);
	kv_events_close(ev, &st);
	CHECK(st.hashes_dropped > 0);
	CHECK(st.hashes_sent + st.hashes_dropped == 200000);
	zmq_close(sub);
	zmq_ctx_term(ctx);
	snprintf(ep, sizeof(ep), "%s/drops.sock", dir);
	unlink(ep);

	/* nobody there at all: a refused connect gives up at once */
	snprintf(ep, sizeof(ep), "connect:ipc://%s/nobody.sock", dir);
	CHECK(kv_events_open(ep, NULL, &ev) == 0);
	CHECK(kv_events_publish(ev, KV_EVENT_BLOCK_REMOVED, "m", "SHARED_STORAGE", 1, 0) == 0);
	kv_events_close(ev, &st);
	CHECK(st.hashes_dropped == 1 && st.messages_dropped == 1);

	/* bad arguments: a topic part the subscriber would split wrongly */
	CHECK(kv_events_open("nonsense", NULL, &ev) == -EINVAL && ev == NULL);
	snprintf(ep, sizeof(ep), "connect:ipc://%s/nobody.sock", dir);
	CHECK(kv_events_open(ep, NULL, &ev) == 0);
	CHECK(kv_events_publish(ev, KV_EVENT_BLOCK_STORED, "org@model", "CPU", 1, 0) == -EINVAL);
	CHECK(kv_events_publish(ev, KV_EVENT_BLOCK_STORED, "org/model", "C@PU", 1, 0) == -EINVAL);
	CHECK(kv_events_publish(ev, KV_EVENT_BLOCK_STORED, "org\nmodel", "CPU", 1, 0) == -EINVAL);
	CHECK(kv_events_publish(ev, KV_EVENT_BLOCK_STORED, "", "CPU", 1, 0) == -EINVAL);
	kv_events_close(ev, &st);
	CHECK(st.hashes_dropped == 0 && st.messages_sent == 0);
}

/* ---- the subscriber's decoder ---- */

struct seen {
	int n;
	enum kv_event_kind kind[8];
	char medium[8][64];
	uint64_t hash[8][4];
	size_t nhashes[8];
};

static int on_event(const struct kv_event *ev, void *arg)
{
	struct seen *s = arg;

	if (s->n == 8)
		return 0;
	s->kind[s->n] = ev->kind;
	snprintf(s->medium[s->n], 64, "%s", ev->medium);
	s->nhashes[s->n] = ev->nhashes;
	for (size_t i = 0; i < ev->nhashes && i < 4; i++)
		s->hash[s->n][i] = ev->hashes[i];
	s->n++;
	return 0;
}

static void str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

static void decode(void)
{
	static const unsigned char twelve[12] = { 9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8 };
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct seen s = { 0 };

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, 1.5);
	msgpack_pack_array(&pk, 4);
	/* positional, hashes as an integer, a negative one and bytes */
	msgpack_pack_array(&pk, 7);
	str(&pk, "BlockStored");
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint64(&pk, 0xfedcba9876543210ULL);
	msgpack_pack_int64(&pk, -2);
	msgpack_pack_bin(&pk, sizeof(twelve));
	msgpack_pack_bin_body(&pk, twelve, sizeof(twelve));
	msgpack_pack_nil(&pk);
	msgpack_pack_array(&pk, 0);
	msgpack_pack_int(&pk, 16);
	msgpack_pack_nil(&pk);
	str(&pk, "GPU");
	/* vLLM's map, extra keys ignored, no medium */
	msgpack_pack_map(&pk, 3);
	str(&pk, "group_idx");
	msgpack_pack_int(&pk, 1);
	str(&pk, "block_hashes");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, 7);
	str(&pk, "type");
	str(&pk, "BlockStored");
	/* an unknown type is skipped, a removal read */
	msgpack_pack_array(&pk, 1);
	str(&pk, "SomethingNew");
	msgpack_pack_array(&pk, 3);
	str(&pk, "BlockRemoved");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, 9);
	str(&pk, "STORAGE");
	msgpack_pack_int(&pk, 0);
	CHECK(kv_events_decode(sb.data, sb.size, on_event, &s) == 0);
	CHECK(s.n == 3);
	CHECK(s.kind[0] == KV_EVENT_BLOCK_STORED && !strcmp(s.medium[0], "GPU"));
	CHECK(s.nhashes[0] == 3 && s.hash[0][0] == 0xfedcba9876543210ULL &&
	      s.hash[0][1] == (uint64_t)-2 && s.hash[0][2] == 0x0102030405060708ULL);
	CHECK(s.kind[1] == KV_EVENT_BLOCK_STORED && !strcmp(s.medium[1], "") &&
	      s.nhashes[1] == 1 && s.hash[1][0] == 7);
	CHECK(s.kind[2] == KV_EVENT_BLOCK_REMOVED && !strcmp(s.medium[2], "STORAGE"));
	/* truncated, trailing bytes, not a batch */
	CHECK(kv_events_decode(sb.data, sb.size - 1, on_event, &s) == -KV_EPROTO);
	msgpack_pack_nil(&pk);
	CHECK(kv_events_decode(sb.data, sb.size, on_event, &s) == -KV_EPROTO);
	CHECK(kv_events_decode("\xc0", 1, on_event, &s) == -KV_EPROTO);
	msgpack_sbuffer_destroy(&sb);
}

int main(void)
{
	char dir[] = "/tmp/kv-events-test.XXXXXX";

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	endpoints();
	decode();
	wire(dir);
	drops(dir);
	rmdir(dir);
	if (failures)
		fprintf(stderr, "test_events: %d failures\n", failures);
	return failures ? 1 : 0;
}
