/* kvoffd frames: round trips, strict rejection, canonical form under
 * mutation, and the client's answers when no daemon listens. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

#define MODEL "meta-llama_Llama-3.1-8B_0123456789ab"

static unsigned char buf[KV_OFFD_FRAME_BYTES];

static struct kv_offd_frame keyed(uint16_t type)
{
	struct kv_offd_frame f = { .type = type, .rank = 3, .group = 1 };

	strcpy(f.model_dir, MODEL);
	strcpy(f.hash, "0123456789abcdef");
	return f;
}

static int decode(struct kv_offd_frame *out)
{
	return kv_offd_frame_decode(buf, sizeof(buf), out);
}

static int frame_eq(const struct kv_offd_frame *a, const struct kv_offd_frame *b)
{
	return a->type == b->type && a->status == b->status && a->slot == b->slot &&
	       a->rank == b->rank && a->group == b->group && a->len == b->len &&
	       a->arg == b->arg && a->sum == b->sum && !strcmp(a->model_dir, b->model_dir) &&
	       !strcmp(a->hash, b->hash) &&
	       !memcmp(&a->stats, &b->stats, sizeof(a->stats));
}

/* Encode f, then check decode gives it back and re-encodes identically. */
static void round_trip(const struct kv_offd_frame *f)
{
	unsigned char again[KV_OFFD_FRAME_BYTES];
	struct kv_offd_frame g;

	CHECK(kv_offd_frame_encode(f, buf, sizeof(buf)) == 0);
	CHECK(decode(&g) == 0);
	CHECK(frame_eq(f, &g));
	CHECK(kv_offd_frame_encode(&g, again, sizeof(again)) == 0);
	CHECK(memcmp(buf, again, sizeof(buf)) == 0);
}

static void test_round_trips(void)
{
	struct kv_offd_frame f;

	f = keyed(KV_OFFD_ALLOC);
	f.len = 2 << 20;
	round_trip(&f);
	f = keyed(KV_OFFD_LOOKUP);
	round_trip(&f);
	f = keyed(KV_OFFD_HAS);
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_COMMIT, .slot = 7 };
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_RELEASE, .slot = 0xffffffffu };
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_LIST, .arg = 12 };
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_HELLO | KV_OFFD_REPLY, .slot = 4,
				    .len = 8 << 20, .arg = 2 << 20 };
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_HELLO | KV_OFFD_REPLY, .status = -EACCES };
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_LOOKUP | KV_OFFD_REPLY, .status = -ENOENT };
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_ALLOC | KV_OFFD_REPLY, .status = -KV_EBADPATH };
	round_trip(&f);
	f = keyed(KV_OFFD_LIST | KV_OFFD_REPLY);
	f.slot = 3;
	f.len = 100;
	f.arg = 2 | 1ull << 32;
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_STATS | KV_OFFD_REPLY };
	for (size_t i = 0; i < KV_OFFD_STATS_COUNT; i++)
		memcpy((char *)&f.stats + 8 * i, &(uint64_t){ 1000 + i * 0x0101010101ull }, 8);
	round_trip(&f);
	CHECK(kv_offd_stats_value(&f.stats, 0) == 1000);
	CHECK(!strcmp(kv_offd_stats_name(0), "pool_bytes"));
	CHECK(!strcmp(kv_offd_stats_name(KV_OFFD_STATS_COUNT - 1), "pins_refused"));
	CHECK(kv_offd_stats_name(KV_OFFD_STATS_COUNT) == NULL);
	f = (struct kv_offd_frame){ .type = KV_OFFD_TIER_STATS, .arg = 1 };
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_TIER_STATS | KV_OFFD_REPLY };
	for (size_t i = 0; i < KV_OFFD_TIER_STATS_COUNT; i++)
		memcpy((char *)&f.tier_stats + 8 * i, &(uint64_t){ 7 + i * 0x0102030405ull }, 8);
	round_trip(&f);
	CHECK(kv_offd_tier_stats_value(&f.tier_stats, 0) == 7);
	CHECK(!strcmp(kv_offd_tier_stats_name(KV_OFFD_TIER_STATS_COUNT - 1), "errors"));
	CHECK(kv_offd_tier_stats_name(KV_OFFD_TIER_STATS_COUNT) == NULL);
	/* A tier stats reply past its body is not a frame. */
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == 0);
	buf[48 + 8 * KV_OFFD_TIER_STATS_COUNT] = 1;
	CHECK(kv_offd_frame_decode(buf, sizeof(buf), &f) == -KV_EPROTO);
	f = (struct kv_offd_frame){ .type = KV_OFFD_TIER_STATS | KV_OFFD_REPLY, .status = -ENOENT };
	round_trip(&f);
}

static void test_encode_rejects(void)
{
	struct kv_offd_frame f;

	f = keyed(KV_OFFD_ALLOC);
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf) - 1) == -KV_EPROTO);
	f.slot = 1;			/* ALLOC carries no slot */
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f = keyed(KV_OFFD_COMMIT);	/* COMMIT carries no key */
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f = keyed(KV_OFFD_LOOKUP);
	f.status = -ENOENT;		/* requests carry no status */
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f = keyed(KV_OFFD_HELLO);	/* clients never send HELLO */
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f = keyed(KV_OFFD_TYPE_MAX);
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f = keyed(KV_OFFD_LOOKUP);
	strcpy(f.hash, "0123ABCD");	/* upper case is the caller's to fold */
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f = keyed(KV_OFFD_LOOKUP);
	strcpy(f.model_dir, "..");
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	strcpy(f.model_dir, "a/b_0123456789ab");
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f = (struct kv_offd_frame){ .type = KV_OFFD_LOOKUP | KV_OFFD_REPLY, .status = 5 };
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
}

static void test_decode_rejects(void)
{
	struct kv_offd_frame f = keyed(KV_OFFD_ALLOC), g;
	unsigned char good[KV_OFFD_FRAME_BYTES];

	f.len = 4096;
	CHECK(kv_offd_frame_encode(&f, good, sizeof(good)) == 0);
	CHECK(kv_offd_frame_decode(good, sizeof(good) - 1, &g) == -KV_EPROTO);
	CHECK(kv_offd_frame_decode(NULL, sizeof(good), &g) == -KV_EPROTO);

	memcpy(buf, good, sizeof(buf));
	buf[0] ^= 1;				/* magic */
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[4] = KV_OFFD_VERSION + 1;		/* version */
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[6] = 0x42;				/* type */
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[7] = 1;				/* type high byte */
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[44] = 1;				/* reserved */
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[511] = 1;				/* padding after the key */
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[48 + strlen(MODEL) + 1] = 'x';	/* bytes past model_len */
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[40] = 0xff;				/* model_len past its field */
	buf[41] = 0xff;
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[42] = 4;				/* hash shorter than 5 digits */
	buf[43] = 0;
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[48 + 3] = '\0';			/* NUL inside the model name */
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	buf[12] = 1;				/* a slot on ALLOC */
	CHECK(decode(&g) == -KV_EPROTO);
	memcpy(buf, good, sizeof(buf));
	CHECK(decode(&g) == 0 && g.len == 4096 && g.rank == 3 && g.group == 1);
}

/* Any mutation either fails to decode or decodes to a frame that encodes
 * back to exactly the same bytes: there is one spelling per frame. */
static void test_mutations(void)
{
	struct kv_offd_frame seeds[4], g;
	unsigned char good[KV_OFFD_FRAME_BYTES], again[KV_OFFD_FRAME_BYTES];
	unsigned accepted = 0;

	seeds[0] = keyed(KV_OFFD_ALLOC);
	seeds[1] = keyed(KV_OFFD_LIST | KV_OFFD_REPLY);
	seeds[2] = (struct kv_offd_frame){ .type = KV_OFFD_STATS | KV_OFFD_REPLY, .stats.pid = 9 };
	seeds[3] = (struct kv_offd_frame){ .type = KV_OFFD_RELEASE, .slot = 2 };
	srand(1);
	for (int n = 0; n < 200000; n++) {
		CHECK(kv_offd_frame_encode(&seeds[n % 4], good, sizeof(good)) == 0);
		memcpy(buf, good, sizeof(buf));
		for (int k = 1 + rand() % 3; k > 0; k--)
			buf[rand() % (n % 2 ? 64 : KV_OFFD_FRAME_BYTES)] = (unsigned char)rand();
		if (decode(&g))
			continue;
		accepted++;
		CHECK(kv_offd_frame_encode(&g, again, sizeof(again)) == 0);
		CHECK(memcmp(buf, again, sizeof(buf)) == 0);
	}
	CHECK(accepted > 0);
}

static void test_set_key(void)
{
	struct kv_offd_frame f = { .type = KV_OFFD_LOOKUP };
	struct kv_block_ref ref = { .rank = 1, .group = 2 };

	strcpy(ref.model_dir, MODEL);
	strcpy(ref.hash, "ABCDEF0123");
	CHECK(kv_offd_frame_set_key(&f, &ref) == 0);
	CHECK(!strcmp(f.hash, "abcdef0123") && f.rank == 1 && f.group == 2);
	strcpy(ref.hash, "abcz0123");
	CHECK(kv_offd_frame_set_key(&f, &ref) == -KV_EBADHASH);
	strcpy(ref.hash, "abc");
	CHECK(kv_offd_frame_set_key(&f, &ref) == -KV_EBADHASH);
	strcpy(ref.hash, "abcdef0123");
	strcpy(ref.model_dir, "");
	CHECK(kv_offd_frame_set_key(&f, &ref) == -KV_EBADPATH);
}

static void test_unreachable(void)
{
	char dir[] = "/tmp/test_offd_proto.XXXXXX", path[64];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kv_offd *c;
	int fd;

	if (!mkdtemp(dir)) {
		failures++;
		return;
	}
	snprintf(path, sizeof(path), "%s/sock", dir);
	CHECK(kv_offd_connect(path, &c) == -ENOENT);
	/* A socket file nobody listens on: a daemon that died. */
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	strcpy(sa.sun_path, path);
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHECK(kv_offd_connect(path, &c) == -ECONNREFUSED);
	close(fd);
	unlink(path);
	rmdir(dir);
}

/* A fake daemon on a socketpair: HELLO with a memfd, then one LOOKUP
 * answered with slot 1, so the client's pointer must land in slot 1. */
static void test_client_mapping(void)
{
	struct kv_offd_frame hello = { .type = KV_OFFD_HELLO | KV_OFFD_REPLY, .slot = 4,
				       .len = 4 * 8192, .arg = 8192 };
	struct kv_offd_frame req, rep = { .type = KV_OFFD_LOOKUP | KV_OFFD_REPLY,
					  .slot = 1, .len = 5, .arg = 8192 };
	char dir[] = "/tmp/test_offd_map.XXXXXX", path[64];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kv_block_ref ref = { .rank = 0 };
	union {
		struct cmsghdr hdr;
		char space[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctl.space, .msg_controllen = sizeof(ctl.space) };
	struct cmsghdr *cm;
	struct kv_offd *c = NULL;
	const void *p;
	size_t len, pool_bytes;
	uint32_t slot;
	int lfd, sfd, mfd;
	pid_t pid;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/sock", dir);
	strcpy(sa.sun_path, path);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 1) == 0);
	mfd = memfd_create("test", 0);
	CHECK(mfd >= 0 && ftruncate(mfd, 4 * 8192) == 0);
	CHECK(pwrite(mfd, "hello", 5, 8192) == 5);
	rep.sum = kv_xxh3("hello", 5);
	pid = fork();
	if (pid == 0) {
		sfd = accept(lfd, NULL, NULL);
		kv_offd_frame_encode(&hello, buf, sizeof(buf));
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
		if (sendmsg(sfd, &msg, 0) != (ssize_t)sizeof(buf) ||
		    recv(sfd, buf, sizeof(buf), MSG_WAITALL) != (ssize_t)sizeof(buf) ||
		    kv_offd_frame_decode(buf, sizeof(buf), &req) || req.type != KV_OFFD_LOOKUP)
			_exit(1);
		kv_offd_frame_encode(&rep, buf, sizeof(buf));
		_exit(send(sfd, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf) ? 0 : 1);
	}
	CHECK(kv_offd_connect(path, &c) == 0);
	if (c) {
		CHECK(kv_offd_slot_bytes(c) == 8192);
		CHECK(kv_offd_pool(c, &pool_bytes) != NULL && pool_bytes == 4 * 8192);
		strcpy(ref.model_dir, MODEL);
		strcpy(ref.hash, "abcdef01");
		CHECK(kv_offd_lookup(c, &ref, &slot, &p, &len) == 0);
		CHECK(slot == 1 && len == 5 && !memcmp(p, "hello", 5));
		/* The fake daemon is gone: the next request sees the reset. */
		CHECK(kv_offd_has(c, &ref, NULL) == -ECONNRESET);
		kv_offd_close(c);
	}
	CHECK(waitpid(pid, &(int){ 0 }, 0) == pid);
	close(mfd);
	close(lfd);
	unlink(path);
	rmdir(dir);
}

/* BATCH heads: the op decides whether a key and a hash length come
 * with it; entries and results round-trip, bad ones are refused. */
static void test_batches(void)
{
	struct kv_offd_frame f = { .type = KV_OFFD_BATCH, .rank = 1, .len = 2,
				   .arg = KV_OFFD_ALLOC | 16 << 8 }, g;
	struct kv_offd_batch_entry e = { .len = 16384 }, out;
	struct kv_offd_result r = { .slot = 9, .len = 16384, .offset = 1 << 20 }, rr;
	unsigned char payload[2 * (8 + 16)], res[2 * KV_OFFD_RESULT_BYTES];

	strcpy(f.model_dir, MODEL);
	round_trip(&f);
	CHECK(kv_offd_batch_bytes(&f) == 2 * (8 + 16));
	strcpy(e.hash, "0123456789abcdef");
	CHECK(kv_offd_batch_encode(&f, payload, 0, &e) == 0);
	strcpy(e.hash, "0123456789ABCDEF");
	CHECK(kv_offd_batch_encode(&f, payload, 1, &e) == -KV_EPROTO);
	strcpy(e.hash, "0123456789abcde");
	CHECK(kv_offd_batch_encode(&f, payload, 1, &e) == -KV_EPROTO);
	CHECK(kv_offd_batch_encode(&f, payload, 2, &e) == -KV_EPROTO);
	memcpy(payload + 24, payload, 24);
	CHECK(kv_offd_batch_decode(&f, payload, 1, &out) == 0);
	CHECK(out.len == 16384 && !strcmp(out.hash, "0123456789abcdef"));
	payload[24 + 8] = 'G';
	CHECK(kv_offd_batch_decode(&f, payload, 1, &out) == -KV_EPROTO);

	/* Keyed ops need a model dir and a hash length; slot ops neither. */
	g = f;
	g.model_dir[0] = '\0';
	CHECK(kv_offd_frame_encode(&g, buf, sizeof(buf)) == -KV_EPROTO);
	g = f;
	g.arg = KV_OFFD_HAS;
	CHECK(kv_offd_frame_encode(&g, buf, sizeof(buf)) == -KV_EPROTO);
	g = (struct kv_offd_frame){ .type = KV_OFFD_BATCH, .len = 3, .arg = KV_OFFD_RELEASE };
	round_trip(&g);
	CHECK(kv_offd_batch_bytes(&g) == 3 * 8);	/* slot, flags */
	strcpy(g.model_dir, MODEL);
	CHECK(kv_offd_frame_encode(&g, buf, sizeof(buf)) == -KV_EPROTO);
	/* Counts: 1 to KV_OFFD_BATCH_MAX; ops: the batchable ones. */
	g = f;
	g.len = KV_OFFD_BATCH_MAX + 1;
	CHECK(kv_offd_frame_encode(&g, buf, sizeof(buf)) == -KV_EPROTO);
	g.len = 0;
	CHECK(kv_offd_frame_encode(&g, buf, sizeof(buf)) == -KV_EPROTO);
	g = f;
	g.arg = KV_OFFD_STATS | 16 << 8;
	CHECK(kv_offd_frame_encode(&g, buf, sizeof(buf)) == -KV_EPROTO);
	g.arg = KV_OFFD_HAS | 16 << 8 | 1 << 16;
	CHECK(kv_offd_frame_encode(&g, buf, sizeof(buf)) == -KV_EPROTO);
	/* A count past the limit is refused by the decoder too. */
	g = f;
	CHECK(kv_offd_frame_encode(&g, buf, sizeof(buf)) == 0);
	buf[24 + 5] = 1;
	CHECK(decode(&g) == -KV_EPROTO);

	/* Replies: a failed one carries its status alone, and no payload. */
	g = (struct kv_offd_frame){ .type = KV_OFFD_BATCH | KV_OFFD_REPLY, .len = 2,
				    .arg = f.arg };
	round_trip(&g);
	CHECK(kv_offd_batch_bytes(&g) == 2 * KV_OFFD_RESULT_BYTES);
	g = (struct kv_offd_frame){ .type = KV_OFFD_BATCH | KV_OFFD_REPLY, .status = -EINVAL };
	round_trip(&g);
	CHECK(kv_offd_batch_bytes(&g) == 0);
	g.len = 2;
	CHECK(kv_offd_frame_encode(&g, buf, sizeof(buf)) == -KV_EPROTO);
	CHECK(kv_offd_result_encode(res, 0, &r) == 0);
	CHECK(kv_offd_result_decode(res, 0, &rr) == 0 && !memcmp(&r, &rr, sizeof(r)));
	r = (struct kv_offd_result){ .status = -ENOENT, .slot = 1 };
	CHECK(kv_offd_result_encode(res, 1, &r) == -KV_EPROTO);
	r.slot = 0;
	CHECK(kv_offd_result_encode(res, 1, &r) == 0);
	res[KV_OFFD_RESULT_BYTES + 4] = 1;
	CHECK(kv_offd_result_decode(res, 1, &rr) == -KV_EPROTO);
	memset(res, 0, sizeof(res));
	res[0] = 1;	/* status 1: neither 0 nor -errno */
	CHECK(kv_offd_result_decode(res, 0, &rr) == -KV_EPROTO);
	/* A LOOKUP result carries the block's sum; a failed one none. */
	r = (struct kv_offd_result){ .slot = 2, .len = 5, .offset = 8192,
				     .sum = 0x0123456789abcdefull };
	CHECK(kv_offd_result_encode(res, 0, &r) == 0);
	CHECK(kv_offd_result_decode(res, 0, &rr) == 0 && rr.sum == r.sum);
	r = (struct kv_offd_result){ .status = -ENOENT, .sum = 1 };
	CHECK(kv_offd_result_encode(res, 1, &r) == -KV_EPROTO);
}

/* Protocol 4's checksums: a COMMIT takes the client's sum only with
 * KV_OFFD_COMMIT_SUM, a RELEASE may say the bytes were altered, a LOOKUP
 * reply carries the sum; batch entries the same. */
static void test_sums(void)
{
	struct kv_offd_frame f = { .type = KV_OFFD_COMMIT, .slot = 3, .arg = KV_OFFD_COMMIT_SUM,
				   .sum = ~0ull }, g;
	struct kv_offd_batch_entry e = { .slot = 7, .flags = KV_OFFD_COMMIT_SUM, .sum = 42 }, out;
	unsigned char payload[2 * 16];

	round_trip(&f);
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == 0 && decode(&g) == 0 &&
	      g.sum == ~0ull && g.arg == KV_OFFD_COMMIT_SUM);
	f.arg = 0;	/* a sum without the flag */
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f.sum = 0;
	round_trip(&f);
	f.arg = 2;
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f = (struct kv_offd_frame){ .type = KV_OFFD_RELEASE, .slot = 3,
				    .arg = KV_OFFD_RELEASE_ALTERED };
	round_trip(&f);
	f.arg = 2;
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	/* Only COMMIT requests and LOOKUP replies have a sum. */
	f = (struct kv_offd_frame){ .type = KV_OFFD_ABORT, .slot = 3, .sum = 1 };
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);
	f = (struct kv_offd_frame){ .type = KV_OFFD_LOOKUP | KV_OFFD_REPLY, .slot = 1, .len = 5,
				    .arg = 8192, .sum = 99 };
	round_trip(&f);
	f = (struct kv_offd_frame){ .type = KV_OFFD_ABORT, .slot = 3 };
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == 0);
	buf[432] = 1;	/* a sum where ABORT has none */
	CHECK(decode(&g) == -KV_EPROTO);
	f = (struct kv_offd_frame){ .type = KV_OFFD_LOOKUP | KV_OFFD_REPLY, .status = -ENOENT,
				    .sum = 1 };
	CHECK(kv_offd_frame_encode(&f, buf, sizeof(buf)) == -KV_EPROTO);

	f = (struct kv_offd_frame){ .type = KV_OFFD_BATCH, .len = 2, .arg = KV_OFFD_COMMIT };
	CHECK(kv_offd_batch_bytes(&f) == 2 * 16);
	CHECK(kv_offd_batch_encode(&f, payload, 0, &e) == 0);
	CHECK(kv_offd_batch_decode(&f, payload, 0, &out) == 0 && out.slot == 7 &&
	      out.flags == KV_OFFD_COMMIT_SUM && out.sum == 42);
	e.flags = 0;
	CHECK(kv_offd_batch_encode(&f, payload, 1, &e) == -KV_EPROTO);
	payload[4] = 3;		/* unknown flags */
	CHECK(kv_offd_batch_decode(&f, payload, 0, &out) == -KV_EPROTO);
	f.arg = KV_OFFD_RELEASE;
	e = (struct kv_offd_batch_entry){ .slot = 5, .flags = KV_OFFD_RELEASE_ALTERED };
	CHECK(kv_offd_batch_encode(&f, payload, 1, &e) == 0);
	CHECK(kv_offd_batch_decode(&f, payload, 1, &out) == 0 && out.slot == 5 &&
	      out.flags == KV_OFFD_RELEASE_ALTERED);
	e.flags = 2;
	CHECK(kv_offd_batch_encode(&f, payload, 0, &e) == -KV_EPROTO);
}

int main(void)
{
	test_round_trips();
	test_batches();
	test_sums();
	test_encode_rejects();
	test_decode_rejects();
	test_mutations();
	test_set_key();
	test_unreachable();
	test_client_mapping();
	return failures ? 1 : 0;
}
