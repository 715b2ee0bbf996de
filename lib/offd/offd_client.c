/*
 * kvoffd client: one synchronous connection per handle (use one per
 * thread).  The daemon's memfd pool arrives with the HELLO frame and is
 * mapped shared, so puts and gets are plain memcpy into and out of the
 * slot the daemon names.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <kv/errors.h>
#include <kv/offd.h>

struct kv_offd {
	int fd;
	int broken;		/* -errno once a timeout left the stream out of step */
	unsigned char *pool;
	size_t pool_bytes;
	size_t slot_bytes;
	uint32_t slots;
};

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

static int recv_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return deadline_err(errno);
		}
		if (n == 0)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
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
	if (!c) {
		err = -ENOMEM;
		goto fail;
	}
	c->pool = mmap(NULL, (size_t)geo.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		       pool_fd, 0);
	if (c->pool == MAP_FAILED) {
		err = -errno;
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

void kv_offd_close(struct kv_offd *c)
{
	if (!c)
		return;
	munmap(c->pool, c->pool_bytes);
	close(c->fd);
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
		err = recv_all(c->fd, buf, sizeof(buf));
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
	*ptr = c->pool + (size_t)rep.slot * c->slot_bytes;
	return 0;
}

int kv_offd_commit(struct kv_offd *c, uint32_t slot)
{
	return by_slot(c, KV_OFFD_COMMIT, slot);
}

int kv_offd_abort(struct kv_offd *c, uint32_t slot)
{
	return by_slot(c, KV_OFFD_ABORT, slot);
}

int kv_offd_lookup(struct kv_offd *c, const struct kv_block_ref *ref,
		   uint32_t *slot, const void **ptr, size_t *len)
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
	*ptr = c->pool + (size_t)rep.slot * c->slot_bytes;
	*len = (size_t)rep.len;
	return 0;
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
	memcpy(dst, buf, len);
	return kv_offd_commit(c, slot);
}

int kv_offd_get(struct kv_offd *c, const struct kv_block_ref *ref,
		void *buf, size_t cap, size_t *len)
{
	const void *src;
	uint32_t slot;
	size_t n;
	int err;

	err = kv_offd_lookup(c, ref, &slot, &src, &n);
	if (err)
		return err;
	if (n <= cap)
		memcpy(buf, src, n);
	err = kv_offd_release(c, slot);
	if (err)
		return err;
	*len = n;
	return n <= cap ? 0 : -EFBIG;
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
