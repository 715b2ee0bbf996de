/*
 * kvoffd client: one synchronous connection per handle (use one per
 * thread).  The daemon's memfd pool arrives with the HELLO frame and is
 * mapped shared, so puts and gets are plain memcpy into and out of the
 * slot the daemon names.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <kv/errors.h>
#include <kv/integrity.h>
#include <kv/offd.h>

struct kv_offd {
	int fd;
	int broken;		/* -errno once a timeout left the stream out of step */
	unsigned char *pool;
	size_t pool_bytes;
	size_t slot_bytes;	/* the largest class's */
	uint32_t slots;
	unsigned char *payload;	/* a BATCH request's entries, made once */
	unsigned char *spayload; /* a pipeline's second op's entries, sent with
				    the next first op's */
	unsigned char *results;	/* a BATCH reply's results, made once */
	unsigned char *rbuf;	/* replies read ahead: [rpos, rlen) not yet taken */
	size_t rpos, rlen;
};

/* Replies are read RECV_AHEAD bytes at a time where they have come, so
 * the two or three a pipeline has in flight cost one recv, not two each
 * (frame, then results). */
#define RECV_AHEAD	(64u << 10)

/* SO_SNDTIMEO / SO_RCVTIMEO ran out: the daemon did not answer in time. */
static int deadline_err(int e)
{
	return e == EAGAIN || e == EWOULDBLOCK ? -ETIMEDOUT : -e;
}

/* Every send and receive on fd gives up after timeout_ms (0: never). */
static int set_deadline(int fd, unsigned timeout_ms)
{
	struct timeval tv = { .tv_sec = timeout_ms / 1000,
			      .tv_usec = (timeout_ms % 1000) * 1000 };

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return -errno;
	return 0;
}

static int send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EPIPE ? -ECONNRESET : deadline_err(errno);
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* len bytes of the reply stream: first what was read ahead, then the
 * socket's, read ahead into c->rbuf unless the rest is that large. */
static int recv_all(struct kv_offd *c, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		size_t ahead = c->rlen - c->rpos;
		ssize_t n;

		if (ahead) {
			size_t take = ahead < len ? ahead : len;

			memcpy(p, c->rbuf + c->rpos, take);
			c->rpos += take;
			p += take;
			len -= take;
			continue;
		}
		n = len >= RECV_AHEAD ? recv(c->fd, p, len, 0)
				      : recv(c->fd, c->rbuf, RECV_AHEAD, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return deadline_err(errno);
		}
		if (n == 0)
			return -ECONNRESET;
		if (len >= RECV_AHEAD) {
			p += n;
			len -= (size_t)n;
		} else {
			c->rpos = 0;
			c->rlen = (size_t)n;
		}
	}
	return 0;
}

int kv_offd_connect(const char *socket_path, struct kv_offd **out)
{
	return kv_offd_connect_timeout(socket_path, KV_OFFD_TIMEOUT_MS, out);
}

int kv_offd_connect_timeout(const char *socket_path, unsigned timeout_ms,
			    struct kv_offd **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kv_offd_geometry geo;
	struct kv_offd *c;
	int fd, pool_fd = -1, err;

	if (strlen(socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, socket_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A listener whose backlog is full blocks connect(); one that never
	 * accepts never sends HELLO: both end at the deadline. */
	err = set_deadline(fd, timeout_ms);
	if (err)
		goto fail;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = deadline_err(errno);
		/* A stale socket file with no listener reads as refused. */
		goto fail;
	}
	err = kv_offd_hello_recv(fd, &geo, &pool_fd);
	if (err)
		goto fail;
	c = calloc(1, sizeof(*c));
	if (c)
		c->rbuf = malloc(RECV_AHEAD);
	if (!c || !c->rbuf) {
		free(c);
		err = -ENOMEM;
		goto fail;
	}
	c->pool = mmap(NULL, (size_t)geo.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		       pool_fd, 0);
	if (c->pool == MAP_FAILED) {
		err = -errno;
		free(c->rbuf);
		free(c);
		goto fail;
	}
	close(pool_fd);
	c->fd = fd;
	c->pool_bytes = (size_t)geo.pool_bytes;
	c->slot_bytes = (size_t)geo.slot_bytes;
	c->slots = geo.slots;
	*out = c;
	return 0;
fail:
	if (pool_fd >= 0)
		close(pool_fd);
	close(fd);
	return err;
}

int kv_offd_closed(const struct kv_offd *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLRDHUP };

	return c->broken || (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

void kv_offd_close(struct kv_offd *c)
{
	if (!c)
		return;
	munmap(c->pool, c->pool_bytes);
	close(c->fd);
	free(c->payload);
	free(c->spayload);
	free(c->results);
	free(c->rbuf);
	free(c);
}

int kv_offd_set_timeout(struct kv_offd *c, unsigned timeout_ms)
{
	return set_deadline(c->fd, timeout_ms);
}

size_t kv_offd_slot_bytes(const struct kv_offd *c)
{
	return c->slot_bytes;
}

void *kv_offd_pool(const struct kv_offd *c, size_t *pool_bytes)
{
	*pool_bytes = c->pool_bytes;
	return c->pool;
}

/* One request, one reply of the same type.  A reply that does not decode
 * or names a slot outside the pool is a protocol error. */
static int request(struct kv_offd *c, const struct kv_offd_frame *req,
		   struct kv_offd_frame *rep)
{
	unsigned char buf[KV_OFFD_FRAME_BYTES];
	int err;

	if (c->broken)
		return c->broken;
	err = kv_offd_frame_encode(req, buf, sizeof(buf));
	if (err)
		return err;
	err = send_all(c->fd, buf, sizeof(buf));
	if (!err)
		err = recv_all(c, buf, sizeof(buf));
	/* A reply that comes after we gave up would answer the next request. */
	if (err == -ETIMEDOUT)
		c->broken = err;
	if (!err)
		err = kv_offd_frame_decode(buf, sizeof(buf), rep);
	if (err)
		return err;
	if (rep->type != (req->type | KV_OFFD_REPLY) || rep->slot >= c->slots ||
	    rep->len > c->slot_bytes)
		return -KV_EPROTO;
	return rep->status;
}

/* Where a slot the daemon named lies: len bytes at offset, inside the
 * pool, or NULL. */
static void *slot_ptr(const struct kv_offd *c, uint64_t offset, uint64_t len)
{
	if (offset > c->pool_bytes || len > c->pool_bytes - offset)
		return NULL;
	return c->pool + offset;
}

static int keyed(struct kv_offd_frame *f, uint16_t type, const struct kv_block_ref *ref)
{
	memset(f, 0, sizeof(*f));
	f->type = type;
	return kv_offd_frame_set_key(f, ref);
}

static int by_slot(struct kv_offd *c, uint16_t type, uint32_t slot)
{
	struct kv_offd_frame req = { .type = type, .slot = slot }, rep;

	return request(c, &req, &rep);
}

int kv_offd_alloc(struct kv_offd *c, const struct kv_block_ref *ref,
		  size_t len, uint32_t *slot, void **ptr)
{
	struct kv_offd_frame req, rep;
	int err;

	if (len > c->slot_bytes)
		return -EFBIG;
	err = keyed(&req, KV_OFFD_ALLOC, ref);
	if (err)
		return err;
	req.len = len;
	err = request(c, &req, &rep);
	if (err)
		return err;
	*slot = rep.slot;
	*ptr = slot_ptr(c, rep.arg, len);
	return *ptr ? 0 : -KV_EPROTO;
}

int kv_offd_commit(struct kv_offd *c, uint32_t slot)
{
	return by_slot(c, KV_OFFD_COMMIT, slot);
}

#define SUM_CHUNK	(64u << 10)	/* copied then hashed while in L2 */

/* Copy n bytes and return the XXH3-64 of src (a put's: what the writer
 * meant, whatever lands in the slot meanwhile) or of dst (a get's: what
 * the reader got), a chunk at a time so each is hashed while still in
 * cache. */
static uint64_t copy_sum(void *dst, const void *src, size_t n, int of_dst)
{
	struct kv_xxh3_state *st;
	uint64_t sum;

	if (n <= SUM_CHUNK || kv_xxh3_new(&st) < 0) {
		memcpy(dst, src, n);
		return kv_xxh3(of_dst ? dst : src, n);
	}
	for (size_t at = 0; at < n; at += SUM_CHUNK) {
		size_t len = n - at < SUM_CHUNK ? n - at : SUM_CHUNK;

		memcpy((char *)dst + at, (const char *)src + at, len);
		kv_xxh3_update(st, (const char *)(of_dst ? dst : src) + at, len);
	}
	sum = kv_xxh3_digest(st);
	kv_xxh3_free(st);
	return sum;
}

/* COMMIT with the block's xxh3, taken here while its bytes were in
 * cache: the daemon's loop does not read them. */
static int commit_sum(struct kv_offd *c, uint32_t slot, uint64_t sum)
{
	struct kv_offd_frame req = { .type = KV_OFFD_COMMIT, .slot = slot,
				     .arg = KV_OFFD_COMMIT_SUM, .sum = sum }, rep;

	return request(c, &req, &rep);
}

int kv_offd_abort(struct kv_offd *c, uint32_t slot)
{
	return by_slot(c, KV_OFFD_ABORT, slot);
}

/* A LOOKUP as the daemon answers it, the block's sum with it. */
static int lookup_raw(struct kv_offd *c, const struct kv_block_ref *ref, uint32_t *slot,
		      const void **ptr, size_t *len, uint64_t *sum)
{
	struct kv_offd_frame req, rep;
	int err;

	err = keyed(&req, KV_OFFD_LOOKUP, ref);
	if (err)
		return err;
	err = request(c, &req, &rep);
	if (err)
		return err;
	*slot = rep.slot;
	*ptr = slot_ptr(c, rep.arg, rep.len);
	*len = (size_t)rep.len;
	*sum = rep.sum;
	return *ptr ? 0 : -KV_EPROTO;
}

/* Give back a pin whose bytes did not match their sum: the daemon checks
 * them too and drops the block.  -KV_ECHECKSUM, or the release's error. */
static int release_altered(struct kv_offd *c, uint32_t slot)
{
	struct kv_offd_frame req = { .type = KV_OFFD_RELEASE, .slot = slot,
				     .arg = KV_OFFD_RELEASE_ALTERED }, rep;
	int err = request(c, &req, &rep);

	return err ? err : -KV_ECHECKSUM;
}

/* Tries per read: a block found altered is dropped by the daemon, so the
 * second try reads it through from the file tier, or misses. */
#define READ_TRIES	2

int kv_offd_lookup(struct kv_offd *c, const struct kv_block_ref *ref,
		   uint32_t *slot, const void **ptr, size_t *len)
{
	uint64_t sum;
	int err = -KV_ECHECKSUM;

	for (int t = 0; t < READ_TRIES && err == -KV_ECHECKSUM; t++) {
		err = lookup_raw(c, ref, slot, ptr, len, &sum);
		if (!err && kv_xxh3(*ptr, *len) != sum)
			err = release_altered(c, *slot);
	}
	return err;
}

int kv_offd_release(struct kv_offd *c, uint32_t slot)
{
	return by_slot(c, KV_OFFD_RELEASE, slot);
}

int kv_offd_put(struct kv_offd *c, const struct kv_block_ref *ref,
		const void *buf, size_t len)
{
	uint32_t slot;
	void *dst;
	int err;

	err = kv_offd_alloc(c, ref, len, &slot, &dst);
	if (err)
		return err;
	/* The source's sum: bytes someone wrote into the slot meanwhile
	 * are caught by the readers. */
	return commit_sum(c, slot, copy_sum(dst, buf, len, 0));
}

/* Checked as copied out, where the copy is in cache. */
int kv_offd_get(struct kv_offd *c, const struct kv_block_ref *ref,
		void *buf, size_t cap, size_t *len)
{
	const void *src;
	uint64_t sum;
	uint32_t slot;
	size_t n;
	int err = -KV_ECHECKSUM;

	for (int t = 0; t < READ_TRIES && err == -KV_ECHECKSUM; t++) {
		err = lookup_raw(c, ref, &slot, &src, &n, &sum);
		if (err)
			return err;
		if (n > cap) {
			err = kv_offd_release(c, slot);
			*len = n;
			return err ? err : -EFBIG;
		}
		err = copy_sum(buf, src, n, 1) == sum ? kv_offd_release(c, slot) :
		      release_altered(c, slot);
	}
	if (!err)
		*len = n;
	return err;
}

int kv_offd_has(struct kv_offd *c, const struct kv_block_ref *ref, int *where)
{
	struct kv_offd_frame req, rep;
	int err;

	err = keyed(&req, KV_OFFD_HAS, ref);
	if (err)
		return err;
	err = request(c, &req, &rep);
	if (err)
		return err;
	if (where)
		*where = (int)rep.arg;
	return 0;
}

int kv_offd_stats(struct kv_offd *c, struct kv_offd_stats *out)
{
	struct kv_offd_frame req = { .type = KV_OFFD_STATS }, rep;
	int err;

	err = request(c, &req, &rep);
	if (err)
		return err;
	*out = rep.stats;
	return 0;
}

int kv_offd_tier_stats(struct kv_offd *c, unsigned tier, struct kv_offd_tier_stats *out)
{
	struct kv_offd_frame req = { .type = KV_OFFD_TIER_STATS, .arg = tier }, rep;
	int err;

	err = request(c, &req, &rep);
	if (err)
		return err;
	*out = rep.tier_stats;
	return 0;
}

int kv_offd_list(struct kv_offd *c,
		 int (*fn)(const struct kv_offd_entry *e, void *arg), void *arg)
{
	struct kv_offd_frame req = { .type = KV_OFFD_LIST }, rep;
	struct kv_offd_entry e;
	int err;

	for (;;) {
		err = request(c, &req, &rep);
		if (err == -ENOENT)
			return 0;
		if (err)
			return err;
		memset(&e, 0, sizeof(e));
		strcpy(e.ref.model_dir, rep.model_dir);
		strcpy(e.ref.hash, rep.hash);
		e.ref.rank = rep.rank;
		e.ref.group = rep.group;
		e.size_bytes = rep.len;
		e.slot = rep.slot;
		e.pins = (uint32_t)rep.arg;
		e.on_disk = (int)(rep.arg >> 32 & 1);
		err = fn(&e, arg);
		if (err)
			return err;
		req.arg = (uint64_t)rep.slot + 1;
	}
}

/* ---- batches ---- */

/* Send count (1 or 2) BATCH frames in one call, each followed by the
 * payload of its head->len entries, already in payloads[i] (free again
 * once this returns): one wake-up of the daemon for a pipeline's two. */
static int batches_send(struct kv_offd *c, const struct kv_offd_frame *const *heads,
			unsigned char *const *payloads, unsigned count)
{
	unsigned char buf[2][KV_OFFD_FRAME_BYTES];
	struct iovec iov[4];
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 * count };
	int err;

	if (c->broken)
		return c->broken;
	if (count > 2)
		return -EINVAL;
	for (unsigned i = 0; i < count; i++) {
		err = kv_offd_frame_encode(heads[i], buf[i], sizeof(buf[i]));
		if (err)
			return err;
		iov[2 * i] = (struct iovec){ buf[i], sizeof(buf[i]) };
		iov[2 * i + 1] = (struct iovec){ payloads[i], kv_offd_batch_bytes(heads[i]) };
	}
	while (msg.msg_iovlen) {
		ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			/* Part of a frame may have gone: out of step. */
			c->broken = errno == EPIPE ? -ECONNRESET : deadline_err(errno);
			return c->broken;
		}
		while (msg.msg_iovlen && (size_t)n >= msg.msg_iov->iov_len) {
			n -= (ssize_t)msg.msg_iov->iov_len;
			msg.msg_iov++;
			msg.msg_iovlen--;
		}
		if (msg.msg_iovlen) {
			msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + n;
			msg.msg_iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

/* Send a BATCH frame and its entries, already in c->payload. */
static int batch_send(struct kv_offd *c, const struct kv_offd_frame *head)
{
	return batches_send(c, &head, &c->payload, 1);
}

int kv_offd_config(struct kv_offd *c, const char *model_dir, const char *text, size_t len)
{
	struct kv_offd_frame req = { .type = KV_OFFD_CONFIG, .len = len }, rep;
	unsigned char *payload = (unsigned char *)(uintptr_t)text;
	const struct kv_offd_frame *head = &req;
	unsigned char buf[KV_OFFD_FRAME_BYTES];
	int err;

	if (!model_dir || !text || !len || len > KV_OFFD_CONFIG_MAX ||
	    strlen(model_dir) >= sizeof(req.model_dir))
		return -EINVAL;
	strcpy(req.model_dir, model_dir);
	err = batches_send(c, &head, &payload, 1);
	if (!err)
		err = recv_all(c, buf, sizeof(buf));
	if (err == -ETIMEDOUT)
		c->broken = err;
	if (!err)
		err = kv_offd_frame_decode(buf, sizeof(buf), &rep);
	if (!err && rep.type != (KV_OFFD_CONFIG | KV_OFFD_REPLY))
		err = -KV_EPROTO;
	if (err == -KV_EPROTO)
		c->broken = err;
	return err ? err : rep.status;
}

/* The reply to a BATCH frame sent with head, its results into res.
 * Results that name a slot or bytes outside the pool are a protocol
 * error; so is anything that leaves the stream out of step, which
 * breaks the connection for good. */
static int batch_recv(struct kv_offd *c, const struct kv_offd_frame *head,
		      struct kv_offd_result *res)
{
	unsigned char buf[KV_OFFD_FRAME_BYTES];
	struct kv_offd_frame rep;
	unsigned op = (unsigned)(head->arg & 0xff);
	int err;

	if (c->broken)
		return c->broken;
	err = recv_all(c, buf, sizeof(buf));
	if (!err)
		err = kv_offd_frame_decode(buf, sizeof(buf), &rep);
	if (!err && (rep.type != (KV_OFFD_BATCH | KV_OFFD_REPLY) ||
		     (!rep.status && (rep.len != head->len || rep.arg != head->arg))))
		err = -KV_EPROTO;
	if (!err)
		err = recv_all(c, c->results, kv_offd_batch_bytes(&rep));
	for (size_t i = 0; !err && i < rep.len; i++) {
		struct kv_offd_result *r = &res[i];

		err = kv_offd_result_decode(c->results, i, r);
		if (err || r->status)
			continue;
		if (r->slot >= c->slots ||
		    ((op == KV_OFFD_LOOKUP || op == KV_OFFD_ALLOC) &&
		     (r->len > c->slot_bytes || !slot_ptr(c, r->offset, r->len))))
			err = -KV_EPROTO;
	}
	if (err) {
		c->broken = err == -ETIMEDOUT || err == -KV_EPROTO ? err : -ECONNRESET;
		return err;
	}
	return rep.status;
}

static int batch_request(struct kv_offd *c, const struct kv_offd_frame *head,
			 struct kv_offd_result *res)
{
	int err = batch_send(c, head);

	return err ? err : batch_recv(c, head, res);
}

static int payload_ready(struct kv_offd *c)
{
	/* The largest request payload, and the largest reply's results. */
	if (!c->payload)
		c->payload = malloc(KV_OFFD_BATCH_MAX * (8 + KV_OFFD_HASH_MAX));
	if (!c->spayload)
		c->spayload = malloc(KV_OFFD_BATCH_MAX * (8 + KV_OFFD_HASH_MAX));
	if (!c->results)
		c->results = malloc(KV_OFFD_BATCH_MAX * KV_OFFD_RESULT_BYTES);
	return c->payload && c->spayload && c->results ? 0 : -ENOMEM;
}

/* A hash's length if it is hex of a length the protocol takes, else 0. */
static size_t hash_len(const char *h)
{
	size_t n = 0;

	if (!h)
		return 0;
	for (; h[n] && n <= KV_OFFD_HASH_MAX; n++) {
		char ch = h[n];

		if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
		      (ch >= 'A' && ch <= 'F')))
			return 0;
	}
	return n >= KV_HASH_MIN_LEN && n <= KV_OFFD_HASH_MAX ? n : 0;
}

/* Keys from at into c->payload as head's entries: as many as one frame
 * takes, up to piece, of the length of the first. */
static void fill_keys(struct kv_offd *c, struct kv_offd_frame *head, unsigned op,
		      const struct kv_offd_keys *k, const size_t *lens, size_t at, size_t piece)
{
	struct kv_offd_batch_entry e;
	size_t hl = strlen(k->hashes[at]);

	head->arg = op | (uint64_t)hl << 8;
	head->len = 0;
	while (at + head->len < k->n && head->len < piece &&
	       strlen(k->hashes[at + head->len]) == hl) {
		const char *h = k->hashes[at + head->len];

		for (size_t j = 0; j <= hl; j++)
			e.hash[j] = (char)(h[j] >= 'A' && h[j] <= 'F' ? h[j] - 'A' + 'a' : h[j]);
		e.len = lens ? lens[at + head->len] : 0;
		head->len++;
		kv_offd_batch_encode(head, c->payload, head->len - 1, &e);
	}
}

/*
 * Keyed ops over k's keys; res[i] for key i.  Every key is checked
 * before any is sent.  The keys go in pieces, two in flight: the daemon
 * works on one while this side encodes the next and decodes the last,
 * so on two cores neither waits for the other.  Two pieces of results
 * fit the socket's buffers, so the daemon never stops reading for want
 * of room for a reply.
 */
/* Every key of k as the protocol takes it, before anything is sent. */
static int batch_keys_check(const struct kv_offd_keys *k)
{
	struct kv_offd_frame head = { .type = KV_OFFD_BATCH, .rank = k->rank, .group = k->group,
				      .len = 1, .arg = KV_OFFD_HAS | KV_HASH_MIN_LEN << 8 };
	unsigned char probe[KV_OFFD_FRAME_BYTES];
	size_t ml = k->model_dir ? strlen(k->model_dir) : 0;
	struct kv_block_ref ref;

	if (!ml || ml > KV_OFFD_MODEL_MAX)
		return -KV_EBADPATH;
	memcpy(head.model_dir, k->model_dir, ml + 1);
	if (kv_offd_frame_encode(&head, probe, sizeof(probe)) ||
	    kv_layout_model_dir_parse(k->model_dir, &ref))
		return -KV_EBADPATH;
	for (size_t i = 0; i < k->n; i++)
		if (!hash_len(k->hashes[i]))
			return -KV_EBADHASH;
	return 0;
}

static int batch_keys(struct kv_offd *c, unsigned op, const struct kv_offd_keys *k,
		      const size_t *lens, struct kv_offd_result *res)
{
	struct kv_offd_frame head[2] = {
		{ .type = KV_OFFD_BATCH, .rank = k->rank, .group = k->group },
	};
	size_t at = 0, from[2], piece = (k->n + 3) / 4;
	unsigned sent = 0, done = 0;
	int err, stop = 0;

	err = batch_keys_check(k);
	if (err)
		return err;
	snprintf(head[0].model_dir, sizeof(head[0].model_dir), "%s", k->model_dir);
	head[1] = head[0];
	piece = piece < 256 ? 256 : piece > KV_OFFD_BATCH_MAX ? KV_OFFD_BATCH_MAX : piece;
	err = payload_ready(c);
	while (!err && (done < sent || (at < k->n && !stop))) {
		if (at < k->n && !stop && sent - done < 2) {
			struct kv_offd_frame *h = &head[sent % 2];

			fill_keys(c, h, op, k, lens, at, piece);
			from[sent % 2] = at;
			at += h->len;
			err = batch_send(c, h);
			sent++;
			continue;
		}
		err = batch_recv(c, &head[done % 2], res + from[done % 2]);
		done++;
		/* A whole batch refused (its status alone): the stream is
		 * still in step; take the reply in flight, send no more. */
		if (err && !c->broken && done < sent) {
			stop = err;
			err = 0;
		}
	}
	return err ? err : stop;
}

static int batch_slots(struct kv_offd *c, unsigned op, const uint32_t *slots, size_t n,
		       struct kv_offd_result *res)
{
	struct kv_offd_frame head = { .type = KV_OFFD_BATCH, .arg = op };
	struct kv_offd_batch_entry e = { 0 };
	int err = payload_ready(c);

	for (size_t at = 0; !err && at < n; at += head.len) {
		head.len = n - at < KV_OFFD_BATCH_MAX ? n - at : KV_OFFD_BATCH_MAX;
		for (size_t i = 0; i < head.len; i++) {
			e.slot = slots[at + i];
			kv_offd_batch_encode(&head, c->payload, i, &e);
		}
		err = batch_request(c, &head, res + at);
	}
	return err;
}

static struct kv_offd_result *results(size_t n)
{
	return calloc(n ? n : 1, sizeof(struct kv_offd_result));
}

int kv_offd_has_many(struct kv_offd *c, const struct kv_offd_keys *k, int *where)
{
	struct kv_offd_result *res = results(k->n);
	int err;

	if (!res)
		return -ENOMEM;
	err = batch_keys(c, KV_OFFD_HAS, k, NULL, res);
	for (size_t i = 0; !err && i < k->n; i++)
		where[i] = res[i].status == -ENOENT ? 0 : res[i].status ? res[i].status :
			   (int)res[i].len;
	free(res);
	return err;
}

/* Entries the batch could not finish without waiting (a read-through,
 * a slot that write-behind must free: -EAGAIN) go one at a time, where
 * the daemon parks the request until it can answer. */
/* Entry i of a LOOKUP or ALLOC batch's reply into *out and *status: 0
 * when the batch settled it, 1 when it answered EAGAIN (it would have
 * waited) and the caller must run it alone, with *ref made for that. */
static int batch_took(const struct kv_offd *c, const struct kv_offd_keys *k,
		      const struct kv_offd_result *res, size_t i,
		      struct kv_offd_block *out, int *status, struct kv_block_ref *ref)
{
	memset(out, 0, sizeof(*out));
	*status = res->status;
	if (!*status) {
		out->slot = res->slot;
		out->ptr = c->pool + res->offset;
		out->len = (size_t)res->len;
		return 0;
	}
	if (*status != -EAGAIN)
		return 0;
	memset(ref, 0, sizeof(*ref));
	ref->rank = k->rank;
	ref->group = k->group;
	snprintf(ref->model_dir, sizeof(ref->model_dir), "%s", k->model_dir);
	snprintf(ref->hash, sizeof(ref->hash), "%s", k->hashes[i]);
	return 1;
}

int kv_offd_lookup_many(struct kv_offd *c, const struct kv_offd_keys *k,
			struct kv_offd_block *out, int *status)
{
	struct kv_offd_result *res = results(k->n);
	int err;

	if (!res)
		return -ENOMEM;
	err = batch_keys(c, KV_OFFD_LOOKUP, k, NULL, res);
	for (size_t i = 0; !err && i < k->n; i++) {
		struct kv_block_ref ref;
		const void *ptr;

		/* A block whose bytes are not its sum's goes back, altered,
		 * and is looked up alone (read through, or a miss). */
		if (!res[i].status && kv_xxh3(c->pool + res[i].offset, res[i].len) != res[i].sum) {
			err = release_altered(c, res[i].slot);
			if (err != -KV_ECHECKSUM)
				break;
			err = 0;
			res[i] = (struct kv_offd_result){ .status = -EAGAIN };
		}
		if (!batch_took(c, k, &res[i], i, &out[i], &status[i], &ref))
			continue;
		status[i] = kv_offd_lookup(c, &ref, &out[i].slot, &ptr, &out[i].len);
		out[i].ptr = (void *)ptr;
		if (status[i] && c->broken)
			err = c->broken;
	}
	free(res);
	return err;
}

int kv_offd_alloc_many(struct kv_offd *c, const struct kv_offd_keys *k,
		       const size_t *lens, struct kv_offd_block *out, int *status)
{
	struct kv_offd_result *res = results(k->n);
	int err;

	if (!res)
		return -ENOMEM;
	err = batch_keys(c, KV_OFFD_ALLOC, k, lens, res);
	for (size_t i = 0; !err && i < k->n; i++) {
		struct kv_block_ref ref;

		if (!batch_took(c, k, &res[i], i, &out[i], &status[i], &ref))
			continue;
		status[i] = kv_offd_alloc(c, &ref, lens[i], &out[i].slot, &out[i].ptr);
		out[i].len = lens[i];
		if (status[i] && c->broken)
			err = c->broken;
	}
	free(res);
	return err;
}

static int slots_many(struct kv_offd *c, unsigned op, const uint32_t *slots, size_t n,
		      int *status)
{
	struct kv_offd_result *res = results(n);
	int err;

	if (!res)
		return -ENOMEM;
	err = batch_slots(c, op, slots, n, res);
	for (size_t i = 0; !err && i < n; i++)
		status[i] = res[i].status;
	free(res);
	return err;
}

int kv_offd_commit_many(struct kv_offd *c, const uint32_t *slots, size_t n, int *status)
{
	return slots_many(c, KV_OFFD_COMMIT, slots, n, status);
}

int kv_offd_abort_many(struct kv_offd *c, const uint32_t *slots, size_t n, int *status)
{
	return slots_many(c, KV_OFFD_ABORT, slots, n, status);
}

int kv_offd_release_many(struct kv_offd *c, const uint32_t *slots, size_t n, int *status)
{
	return slots_many(c, KV_OFFD_RELEASE, slots, n, status);
}

/* The slots of the entries that succeeded, and where each came from. */
static size_t ok_slots(const struct kv_offd_block *b, const int *status, size_t n,
		       uint32_t *slots, size_t *from)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		if (!status[i]) {
			slots[m] = b[i].slot;
			from[m++] = i;
		}
	return m;
}

/* Finish the successful entries of a put or get with op (COMMIT or
 * RELEASE), folding each one's outcome into status. */
static int finish_many(struct kv_offd *c, unsigned op, const struct kv_offd_block *b,
		       int *status, size_t n)
{
	uint32_t *slots = malloc((n ? n : 1) * sizeof(*slots));
	size_t *from = malloc((n ? n : 1) * sizeof(*from));
	int *st = malloc((n ? n : 1) * sizeof(*st));
	size_t m;
	int err = -ENOMEM;

	if (slots && from && st) {
		m = ok_slots(b, status, n, slots, from);
		err = m ? slots_many(c, op, slots, m, st) : 0;
		for (size_t j = 0; !err && j < m; j++)
			if (!status[from[j]])
				status[from[j]] = st[j];
	}
	free(slots);
	free(from);
	free(st);
	return err;
}

/* put_many holds its keys' slots between two round trips: a chunk at a
 * time, of at most a quarter of the pool's bytes, well inside the
 * daemon's per-client share of uncommitted slots (half the pool's
 * bytes; a block's slot is at most twice its size with the default
 * classes).  Entries past a share that does not hold them wait for the
 * next pass (put_pass). */
static size_t chunk_keys(const struct kv_offd *c, const size_t *lens, const size_t *idx,
			 size_t n)
{
	uint64_t budget = c->pool_bytes / 4, sum = 0;
	size_t m = 0;

	for (; m < n && m < KV_OFFD_BATCH_MAX; m++) {
		if (m && sum + lens[idx[m]] > budget)
			break;
		sum += lens[idx[m]];
	}
	return m;
}

/* Keys idx[0..n) of k: alloc, copy, commit.  Entries a full class
 * refused (-ENOSPC: every slot of it held by this batch) are left in
 * idx, first, for another pass once this one's commits make them
 * evictable; *left says how many. */
static int put_pass(struct kv_offd *c, const struct kv_offd_keys *k, size_t *idx, size_t n,
		    const void *const *bufs, const size_t *lens, int *status,
		    struct kv_offd_block *b, const char **hs, size_t *ls, int *st,
		    size_t *left)
{
	struct kv_offd_keys sub = *k;
	size_t m = 0;
	int err;

	for (size_t i = 0; i < n; i++) {
		hs[i] = k->hashes[idx[i]];
		ls[i] = lens[idx[i]];
	}
	sub.hashes = hs;
	sub.n = n;
	err = kv_offd_alloc_many(c, &sub, ls, b, st);
	for (size_t i = 0; !err && i < n; i++)
		if (!st[i])
			memcpy(b[i].ptr, bufs[idx[i]], ls[i]);
	if (!err)
		err = finish_many(c, KV_OFFD_COMMIT, b, st, n);
	for (size_t i = 0; !err && i < n; i++) {
		status[idx[i]] = st[i];
		if (st[i] == -ENOSPC)
			idx[m++] = idx[i];
	}
	*left = m;
	return err;
}

/* The slots of piece [at, at + n) whose first op succeeded, as a BATCH
 * of op into head and c->spayload: COMMITs with the sums taken here,
 * RELEASEs marked altered where the bytes read did not match; their key
 * indices go to idx.  How many (0: nothing to send). */
static size_t encode_slots(struct kv_offd *c, struct kv_offd_frame *head, unsigned op,
			   const struct kv_offd_result *res, const uint64_t *sums,
			   const unsigned char *altered, size_t at, size_t n, size_t *idx)
{
	struct kv_offd_batch_entry e = { 0 };

	*head = (struct kv_offd_frame){ .type = KV_OFFD_BATCH, .arg = op };
	for (size_t i = at; i < at + n; i++)
		if (!res[i].status)
			idx[head->len++] = i;
	for (size_t j = 0; j < head->len; j++) {
		e.slot = res[idx[j]].slot;
		if (op == KV_OFFD_COMMIT) {
			e.flags = KV_OFFD_COMMIT_SUM;
			e.sum = sums[idx[j]];
		} else {
			e.flags = altered[idx[j]] ? KV_OFFD_RELEASE_ALTERED : 0;
		}
		kv_offd_batch_encode(head, c->spayload, j, &e);
	}
	return head->len;
}

#define PIECE_BYTES	(1u << 20)	/* best of 128K..2M at 16 KiB and 2 MiB
					   (bench/offd-batch.sh) */

/* Keys per pipeline piece for blocks of avg bytes: at least one, and
 * three pieces hold slots at once well inside a client's share (a piece
 * at most a sixteenth of the pool). */
static size_t piece_keys(const struct kv_offd *c, uint64_t avg)
{
	uint64_t most = c->pool_bytes / 16 / (avg ? avg : 1);
	size_t keys = avg >= PIECE_BYTES ? 1 : PIECE_BYTES / (avg ? avg : 1);

	if (keys > KV_OFFD_BATCH_MAX)
		keys = KV_OFFD_BATCH_MAX;
	return !most ? 1 : keys < most ? keys : (size_t)most;
}

/*
 * put_many and get_many as a pipeline of pieces: once piece k is copied,
 * its COMMIT (RELEASE) and the ALLOC (LOOKUP) of piece k + 2 go out in
 * one message, and the daemon answers them while this side copies piece
 * k + 1.  Requests F0 F1 | S0 F2 | S1 F3 ..., replies in that order.
 * Entries that would have to wait (-EAGAIN) or found their class full
 * (-ENOSPC) keep that status for the one-at-a-time path to take.
 */
static int pipeline(struct kv_offd *c, int put, const struct kv_offd_keys *k,
		    const void *const *src, void *const *dst, const size_t *sizes,
		    size_t *lens, int *status)
{
	unsigned fop = put ? KV_OFFD_ALLOC : KV_OFFD_LOOKUP;
	unsigned sop = put ? KV_OFFD_COMMIT : KV_OFFD_RELEASE;
	size_t n = k->n, piece, next = 0, fat[2], sent_s = 0, seen = 0;
	uint64_t total = 0, seen_bytes = 0;
	struct kv_offd_frame fh[2] = { { .type = KV_OFFD_BATCH, .rank = k->rank,
					 .group = k->group } }, sh;
	struct kv_offd_result *res = results(n), *sres = results(KV_OFFD_BATCH_MAX);
	size_t *idx = calloc(n ? n : 1, sizeof(*idx));
	/* Sums of what a put copied in; reads of a get that did not match. */
	uint64_t *sums = calloc(n ? n : 1, sizeof(*sums));
	unsigned char *altered = calloc(n ? n : 1, 1);
	const struct kv_offd_frame *heads[2];
	unsigned char *payloads[2];
	unsigned fsent = 0, fdone = 0, count;
	int err = res && sres && idx && sums && altered ? payload_ready(c) : -ENOMEM;

	/* Pieces of about PIECE_BYTES: small enough that the two sides
	 * overlap, large enough that the messages stay few.  A put knows
	 * its sizes; a get guesses from its buffers (no block is over the
	 * largest class) until the first replies tell. */
	for (size_t i = 0; i < n; i++)
		total += put || sizes[i] < c->slot_bytes ? sizes[i] : c->slot_bytes;
	piece = piece_keys(c, n ? total / n : 0);
	snprintf(fh[0].model_dir, sizeof(fh[0].model_dir), "%s", k->model_dir);
	fh[1] = fh[0];
	/* Two first ops out before the first copy. */
	while (!err && fsent < 2 && next < n) {
		fill_keys(c, &fh[fsent % 2], fop, k, put ? sizes : NULL, next, piece);
		fat[fsent % 2] = next;
		next += fh[fsent % 2].len;
		err = batch_send(c, &fh[fsent % 2]);
		fsent++;
	}
	while (!err && fdone < fsent) {
		struct kv_offd_frame *h = &fh[fdone % 2];
		size_t at = fat[fdone % 2], m = (size_t)h->len;

		err = batch_recv(c, h, res + at);
		fdone++;
		for (size_t i = at; !err && i < at + m; i++) {
			struct kv_offd_result *r = &res[i];

			status[i] = r->status;
			if (r->status)
				continue;
			if (put) {
				sums[i] = copy_sum(c->pool + r->offset, src[i], sizes[i], 0);
				continue;
			}
			lens[i] = (size_t)r->len;
			seen++;
			seen_bytes += r->len;
			if (r->len > sizes[i]) {
				status[i] = -EFBIG;
				continue;
			}
			/* Checked in cache; a mismatch goes back altered and
			 * is read again alone. */
			if (copy_sum(dst[i], c->pool + r->offset, (size_t)r->len, 1) != r->sum) {
				altered[i] = 1;
				status[i] = -EAGAIN;
			}
		}
		/* The last piece's second op, answered after this first op. */
		if (!err && sent_s)
			err = batch_recv(c, &sh, sres);
		for (size_t j = 0; !err && sent_s && j < sh.len; j++)
			if (!status[idx[j]])
				status[idx[j]] = sres[j].status;
		if (err)
			break;
		/* This piece's second op and the first op of the piece after
		 * next, in one send. */
		sent_s = encode_slots(c, &sh, sop, res, sums, altered, at, m, idx);
		heads[0] = &sh;
		payloads[0] = c->spayload;
		count = sent_s ? 1 : 0;
		if (next < n) {
			struct kv_offd_frame *f = &fh[fsent % 2];

			if (seen)
				piece = piece_keys(c, seen_bytes / seen);

			fill_keys(c, f, fop, k, put ? sizes : NULL, next, piece);
			fat[fsent % 2] = next;
			next += f->len;
			heads[count] = f;
			payloads[count++] = c->payload;
			fsent++;
		}
		if (count)
			err = batches_send(c, heads, payloads, count);
	}
	if (!err && sent_s) {
		err = batch_recv(c, &sh, sres);
		for (size_t j = 0; !err && j < sh.len; j++)
			if (!status[idx[j]])
				status[idx[j]] = sres[j].status;
	}
	/* A batch refused whole left replies in flight: out of step. */
	if (err && !c->broken)
		c->broken = -KV_EPROTO;
	free(res);
	free(sres);
	free(idx);
	free(sums);
	free(altered);
	return err;
}

/* The keys a pipeline left for the one-at-a-time path, listed in idx:
 * those that would wait (-EAGAIN) and, in a put, those its pieces in
 * flight crowded out of their class or the client's share; how many. */
static size_t left_over(const int *status, size_t n, int put, size_t *idx)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		if (status[i] == -EAGAIN ||
		    (put && (status[i] == -ENOSPC || status[i] == -EDQUOT)))
			idx[m++] = i;
	return m;
}

int kv_offd_put_many(struct kv_offd *c, const struct kv_offd_keys *k,
		     const void *const *bufs, const size_t *lens, int *status)
{
	size_t m = k->n < KV_OFFD_BATCH_MAX ? k->n : KV_OFFD_BATCH_MAX, n = 0, left;
	struct kv_offd_block *b = calloc(m ? m : 1, sizeof(*b));
	size_t *idx = calloc(k->n ? k->n : 1, sizeof(*idx)), *ls = calloc(m ? m : 1, sizeof(*ls));
	const char **hs = calloc(m ? m : 1, sizeof(*hs));
	int *st = calloc(m ? m : 1, sizeof(*st));
	int err = b && idx && ls && hs && st ? 0 : -ENOMEM;

	if (!err)
		err = batch_keys_check(k);
	if (!err)
		err = pipeline(c, 1, k, bufs, NULL, lens, NULL, status);
	if (!err)
		n = left_over(status, k->n, 1, idx);
	/* What would wait, a chunk at a time, in passes while a pass stores
	 * something. */
	for (size_t at = 0, chunk; !err && at < n; at += chunk) {
		size_t cn = chunk = chunk_keys(c, lens, idx + at, n - at);

		while (!err && cn) {
			err = put_pass(c, k, idx + at, cn, bufs, lens, status, b, hs, ls, st, &left);
			if (left == cn)
				break;
			cn = left;
		}
	}
	free(b);
	free(idx);
	free(ls);
	free(hs);
	free(st);
	return err;
}

static int get_chunk(struct kv_offd *c, const struct kv_offd_keys *k,
		     void *const *bufs, const size_t *caps, size_t *lens, int *status,
		     struct kv_offd_block *b, int *got)
{
	int err = kv_offd_lookup_many(c, k, b, got);

	for (size_t i = 0; !err && i < k->n; i++) {
		status[i] = got[i];
		lens[i] = got[i] ? 0 : b[i].len;
		if (got[i])
			continue;
		if (b[i].len <= caps[i])
			memcpy(bufs[i], b[i].ptr, b[i].len);
		else
			status[i] = -EFBIG;
	}
	/* Release every pin, the ones too big for their buffer too. */
	if (!err)
		err = finish_many(c, KV_OFFD_RELEASE, b, got, k->n);
	for (size_t i = 0; !err && i < k->n; i++)
		if (!status[i])
			status[i] = got[i];
	return err;
}

int kv_offd_get_many(struct kv_offd *c, const struct kv_offd_keys *k,
		     void *const *bufs, const size_t *caps, size_t *lens, int *status)
{
	size_t n = k->n ? k->n : 1, left = 0;
	size_t *idx = calloc(n, sizeof(*idx)), *cp = calloc(n, sizeof(*cp));
	size_t *ln = calloc(n, sizeof(*ln));
	struct kv_offd_block *b = calloc(n, sizeof(*b));
	const char **hs = calloc(n, sizeof(*hs));
	void **bf = calloc(n, sizeof(*bf));
	int *st = calloc(n, sizeof(*st)), *got = calloc(n, sizeof(*got));
	int err = idx && cp && ln && b && hs && bf && st && got ? 0 : -ENOMEM;

	for (size_t i = 0; i < k->n; i++)
		lens[i] = 0;
	if (!err)
		err = batch_keys_check(k);
	if (!err)
		err = pipeline(c, 0, k, NULL, bufs, caps, lens, status);
	if (!err)
		left = left_over(status, k->n, 0, idx);
	/* Read-throughs, where the daemon may wait: one at a time. */
	if (!err && left) {
		struct kv_offd_keys sub = *k;

		for (size_t j = 0; j < left; j++) {
			hs[j] = k->hashes[idx[j]];
			bf[j] = bufs[idx[j]];
			cp[j] = caps[idx[j]];
		}
		sub.hashes = hs;
		sub.n = left;
		err = get_chunk(c, &sub, bf, cp, ln, st, b, got);
		for (size_t j = 0; !err && j < left; j++) {
			status[idx[j]] = st[j];
			lens[idx[j]] = ln[j];
		}
	}
	free(idx);
	free(cp);
	free(ln);
	free(b);
	free(hs);
	free(bf);
	free(st);
	free(got);
	return err;
}
