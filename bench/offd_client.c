/*
 * A small kvoffd client for tests/bats/kvoffd.bats and bench/offd.sh,
 * built against libkv by both:
 *
 *   offd_client put SOCK MODEL_DIR RANK GROUP HASH FILE
 *   offd_client get SOCK MODEL_DIR RANK GROUP HASH        (block to stdout)
 *   offd_client hold SOCK MODEL_DIR RANK GROUP HASH       (pin, say "pinned",
 *                                                          wait for stdin EOF)
 *   offd_client hog SOCK MODEL_DIR BYTES                  (ALLOC slots of BYTES
 *                                                          and never commit: say
 *                                                          "hog N ERROR", wait
 *                                                          for stdin EOF)
 *   offd_client scribble SOCK MODEL_DIR RANK GROUP HASH   (write into a block
 *                                                          it did not put)
 *   offd_client stress SOCK MODEL_DIR CLIENT KEYS ITERS BYTES
 *       put and get KEYS shared keys and KEYS keys of this CLIENT, ITERS
 *       rounds, checking every byte read (content is a function of the key)
 *   offd_client bench SOCK MODEL_DIR CLIENT BLOCKS ITERS BYTES
 *       put then get BLOCKS blocks ITERS times; prints bytes and ns
 *   offd_client memcpy BLOCKS ITERS BYTES
 *       bench's moves by one thread with memcpy: each block into its
 *       place in a pool, then back out into one buffer
 *   offd_client batch SOCK MODEL_DIR CLIENT BLOCKS ITERS BYTES
 *       bench with put_many and get_many of all BLOCKS at once; also
 *       prints when the timed rounds began and ended (t0, t1: the
 *       monotonic clock's ns, for clients run side by side)
 *   offd_client memcpy-batch BLOCKS ITERS BYTES
 *       batch's moves by one thread with memcpy: every block into its
 *       place in a pool, then every one out into its own buffer
 *
 * The bench modes' buffers are page-aligned, as a connector's pinned
 * staging buffers are, and as kvoffd's pool slots are: a copy between
 * buffers 16 bytes apart modulo 64 (malloc's large blocks, numpy's
 * arrays) runs at half the speed on some CPUs (bench/RESULTS.md).
 *   offd_client has SOCK MODEL_DIR CLIENT KEYS ITERS
 *       put KEYS 4 KiB blocks, then has_many of all KEYS ITERS times;
 *       prints checks and ns
 *   offd_client fill SOCK MODEL_DIR BYTES COUNT
 *       put_many COUNT blocks of BYTES (keys per size), then the
 *       daemon's pool_bytes_used and block_bytes
 *   offd_client zipf SOCK MODEL_DIR KEYS OPS SKEW SEED
 *       OPS gets of keys zipf-0000000000000000 + i, i < KEYS drawn with
 *       probability ~ 1/(i+1)^SKEW; a key no tier has is put (the
 *       recompute), with content that gets check; prints gets, misses
 *       and ns
 *   offd_client zipf-fill SOCK MODEL_DIR KEYS
 *       put every one of those KEYS keys once
 *   offd_client dma SOCK MODEL_DIR BYTES
 *       register the shared pool with CUDA device 0 (cudaHostRegister),
 *       DMA a block of BYTES from the device straight into a slot, read
 *       it back through the daemon, then DMA it from the slot back to
 *       the device; every byte checked
 *
 * Exit: 0 ok, 1 block absent, 3 failure or mismatch, 4 daemon unreachable.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <kv/kv.h>

/* n bytes, page-aligned (see above), or NULL. */
static void *page_alloc(size_t n)
{
	return aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "offd_client: %s: %s\n", what, kv_strerror(err));
	if (err == -ENOENT)
		return 1;
	return err == -ECONNREFUSED || err == -ECONNRESET || err == -EACCES ? 4 : 3;
}

static int connect_to(const char *sock, struct kv_offd **c)
{
	int err = kv_offd_connect(sock, c);

	if (err) {
		fprintf(stderr, "offd_client: cannot reach '%s': %s\n", sock, kv_strerror(err));
		exit(err == -ENOENT || err == -ECONNREFUSED || err == -EACCES ||
		     err == -ECONNRESET ? 4 : 3);
	}
	return 0;
}

static void make_ref(struct kv_block_ref *ref, const char *model, unsigned rank,
		     unsigned group, const char *hash)
{
	memset(ref, 0, sizeof(*ref));
	snprintf(ref->model_dir, sizeof(ref->model_dir), "%s", model);
	ref->rank = rank;
	ref->group = group;
	snprintf(ref->hash, sizeof(ref->hash), "%s", hash);
}

/* Content that any client can check: bytes derived from the key. */
static void fill(unsigned char *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, len - i < 8 ? len - i : 8);
	}
}

static int64_t now_ns(void)
{
	return kv_monotonic_ns();
}

static int cmd_put(char **a)
{
	struct kv_block_ref ref;
	struct kv_offd *c;
	size_t cap = 64u << 20, len = 0;
	unsigned char *buf = malloc(cap);
	FILE *f = fopen(a[5], "rb");
	int err;

	if (!buf || !f) {
		free(buf);
		return fail(a[5], -errno);
	}
	len = fread(buf, 1, cap, f);
	fclose(f);
	connect_to(a[0], &c);
	make_ref(&ref, a[1], (unsigned)atoi(a[2]), (unsigned)atoi(a[3]), a[4]);
	err = kv_offd_put(c, &ref, buf, len);
	kv_offd_close(c);
	free(buf);
	return err ? fail("put", err) : 0;
}

static int cmd_get(char **a)
{
	struct kv_block_ref ref;
	struct kv_offd *c;
	unsigned char *buf;
	size_t len;
	int err;

	connect_to(a[0], &c);
	buf = malloc(kv_offd_slot_bytes(c));
	make_ref(&ref, a[1], (unsigned)atoi(a[2]), (unsigned)atoi(a[3]), a[4]);
	err = buf ? kv_offd_get(c, &ref, buf, kv_offd_slot_bytes(c), &len) : -ENOMEM;
	kv_offd_close(c);
	if (err)
		err = fail("get", err);
	else if (fwrite(buf, 1, len, stdout) != len || fflush(stdout))
		err = fail("stdout", -EIO);
	free(buf);
	return err;
}

/* A hostile neighbour: the pool is mapped writable, so write into a
 * committed block it only looked up. */
static int cmd_scribble(char **a)
{
	struct kv_block_ref ref;
	struct kv_offd *c;
	const void *p;
	uint32_t slot;
	size_t len;
	int err;

	connect_to(a[0], &c);
	make_ref(&ref, a[1], (unsigned)atoi(a[2]), (unsigned)atoi(a[3]), a[4]);
	err = kv_offd_lookup(c, &ref, &slot, &p, &len);
	if (!err) {
		memset((void *)p, 0x5a, len < 64 ? len : 64);
		err = kv_offd_release(c, slot);
	}
	kv_offd_close(c);
	return err ? fail("scribble", err) : 0;
}

/* A hostile neighbour: take every slot the daemon hands out, commit none. */
static int cmd_hog(char **a)
{
	struct kv_block_ref ref;
	struct kv_offd *c;
	char hash[32], ch;
	unsigned n = 0;
	uint32_t slot;
	void *p;
	int err;

	connect_to(a[0], &c);
	for (;;) {
		snprintf(hash, sizeof(hash), "%016x", n + 0xabc00);
		make_ref(&ref, a[1], 0, 0, hash);
		err = kv_offd_alloc(c, &ref, (size_t)atoll(a[2]), &slot, &p);
		if (err)
			break;
		n++;
	}
	printf("hog %u %s\n", n, kv_strerror(err));
	fflush(stdout);
	while (read(0, &ch, 1) > 0)
		;
	kv_offd_close(c);
	return 0;
}

static int cmd_hold(char **a)
{
	struct kv_block_ref ref;
	struct kv_offd *c;
	const void *p;
	uint32_t slot;
	size_t len;
	char ch;
	int err;

	connect_to(a[0], &c);
	make_ref(&ref, a[1], (unsigned)atoi(a[2]), (unsigned)atoi(a[3]), a[4]);
	err = kv_offd_lookup(c, &ref, &slot, &p, &len);
	if (err)
		return fail("lookup", err);
	printf("pinned %u %zu\n", slot, len);
	fflush(stdout);
	while (read(0, &ch, 1) > 0)
		;
	err = kv_offd_release(c, slot);
	kv_offd_close(c);
	return err ? fail("release", err) : 0;
}

static void key_hash(char *hash, size_t len, unsigned owner, unsigned k)
{
	snprintf(hash, len, "%08x%08x", owner, k);
}

static int cmd_stress(char **a)
{
	unsigned client = (unsigned)atoi(a[2]), keys = (unsigned)atoi(a[3]);
	unsigned iters = (unsigned)atoi(a[4]);
	size_t bytes = (size_t)atol(a[5]), len;
	unsigned char *want = malloc(bytes), *got = malloc(bytes);
	struct kv_block_ref ref;
	struct kv_offd *c;
	char hash[32];
	int err, rc = 0;

	if (!want || !got) {
		rc = fail("malloc", -ENOMEM);
		goto out;
	}
	connect_to(a[0], &c);
	for (unsigned it = 0; !rc && it < iters; it++) {
		for (unsigned k = 0; !rc && k < 2 * keys; k++) {
			/* Even k: a key every client shares; odd: this client's. */
			unsigned owner = k % 2 ? client + 1 : 0;

			key_hash(hash, sizeof(hash), owner, k / 2);
			make_ref(&ref, a[1], 0, 0, hash);
			fill(want, bytes, (uint64_t)owner << 32 | (k / 2));
			if ((err = kv_offd_put(c, &ref, want, bytes)))
				rc = fail("put", err);
			else if ((err = kv_offd_get(c, &ref, got, bytes, &len)))
				rc = fail("get", err);
			else if (len != bytes || memcmp(want, got, bytes)) {
				fprintf(stderr, "offd_client: block %s differs\n", hash);
				rc = 3;
			}
		}
	}
	kv_offd_close(c);
	if (!rc)
		printf("ok %u\n", iters * 2 * keys);
out:
	free(want);
	free(got);
	return rc;
}

static int cmd_bench(char **a)
{
	unsigned client = (unsigned)atoi(a[2]), blocks = (unsigned)atoi(a[3]);
	unsigned iters = (unsigned)atoi(a[4]);
	size_t bytes = (size_t)atol(a[5]), len;
	unsigned char *src = page_alloc((size_t)blocks * bytes), *dst = page_alloc(bytes);
	struct kv_block_ref ref;
	struct kv_offd *c;
	char hash[32];
	int64_t t0 = 0, t1;
	int err;

	if (!src || !dst) {
		free(src);
		free(dst);
		return fail("malloc", -ENOMEM);
	}
	for (unsigned b = 0; b < blocks; b++)
		fill(src + (size_t)b * bytes, bytes, b);
	memset(dst, 0, bytes);
	connect_to(a[0], &c);
	/* Round 0 is a warm-up: it maps the pool's pages into this process. */
	for (unsigned it = 0; it <= iters; it++) {
		if (it == 1)
			t0 = now_ns();
		for (unsigned b = 0; b < blocks; b++) {
			key_hash(hash, sizeof(hash), client + 1, b);
			make_ref(&ref, a[1], 0, 0, hash);
			err = kv_offd_put(c, &ref, src + (size_t)b * bytes, bytes);
			if (!err)
				err = kv_offd_get(c, &ref, dst, bytes, &len);
			if (err) {
				kv_offd_close(c);
				free(src);
				free(dst);
				return fail("put or get", err);
			}
		}
	}
	t1 = now_ns();
	kv_offd_close(c);
	err = memcmp(dst, src + (size_t)(blocks - 1) * bytes, bytes) ?
	      fail("verify", -KV_ECHECKSUM) : 0;
	if (!err)
		printf("{\"bytes\":%llu,\"ns\":%lld}\n",
		       (unsigned long long)2 * iters * blocks * bytes, (long long)(t1 - t0));
	free(src);
	free(dst);
	return err;
}

/* bench's moves (batch 0) or batch's (1), by memcpy alone. */
static int memcpy_moves(char **a, int batch)
{
	unsigned blocks = (unsigned)atoi(a[0]), iters = (unsigned)atoi(a[1]);
	size_t bytes = (size_t)atol(a[2]), span = (size_t)blocks * bytes;
	unsigned char *src = page_alloc(span), *pool = page_alloc(span);
	unsigned char *dst = page_alloc(batch ? span : bytes);
	size_t last = batch ? span - bytes : 0;
	int64_t t0, t1;
	int rc;

	if (!src || !pool || !dst) {
		free(src);
		free(pool);
		free(dst);
		return fail("malloc", -ENOMEM);
	}
	for (unsigned b = 0; b < blocks; b++)
		fill(src + (size_t)b * bytes, bytes, b);
	memset(pool, 0, span);
	memset(dst, 0, batch ? span : bytes);
	t0 = now_ns();
	for (unsigned it = 0; it < iters; it++) {
		if (batch) {
			for (unsigned b = 0; b < blocks; b++)
				memcpy(pool + (size_t)b * bytes, src + (size_t)b * bytes, bytes);
			for (unsigned b = 0; b < blocks; b++)
				memcpy(dst + (size_t)b * bytes, pool + (size_t)b * bytes, bytes);
			continue;
		}
		for (unsigned b = 0; b < blocks; b++) {
			memcpy(pool + (size_t)b * bytes, src + (size_t)b * bytes, bytes);
			memcpy(dst, pool + (size_t)b * bytes, bytes);
		}
	}
	t1 = now_ns();
	rc = memcmp(dst + last, src + span - bytes, bytes) ? 3 : 0;
	if (!rc)
		printf("{\"bytes\":%llu,\"ns\":%lld}\n",
		       (unsigned long long)2 * iters * blocks * bytes, (long long)(t1 - t0));
	free(src);
	free(pool);
	free(dst);
	return rc;
}

static int cmd_memcpy(char **a)
{
	return memcpy_moves(a, 0);
}

static int cmd_memcpy_batch(char **a)
{
	return memcpy_moves(a, 1);
}

/* What the _many calls take for n keys of one client. */
struct many {
	unsigned n;
	char **hashes;
	const void **in;
	void **out;
	size_t *lens, *got;
	int *status;
	struct kv_offd_keys k;
};

static void many_free(struct many *m)
{
	for (unsigned i = 0; m->hashes && i < m->n; i++)
		free(m->hashes[i]);
	free(m->hashes);
	free(m->in);
	free(m->out);
	free(m->lens);
	free(m->got);
	free(m->status);
}

static int many_new(struct many *m, const char *model, unsigned client, unsigned n)
{
	memset(m, 0, sizeof(*m));
	m->n = n;
	m->hashes = calloc(n, sizeof(*m->hashes));
	m->in = calloc(n, sizeof(*m->in));
	m->out = calloc(n, sizeof(*m->out));
	m->lens = calloc(n, sizeof(*m->lens));
	m->got = calloc(n, sizeof(*m->got));
	m->status = calloc(n, sizeof(*m->status));
	if (!m->hashes || !m->in || !m->out || !m->lens || !m->got || !m->status)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		m->hashes[i] = malloc(32);
		if (!m->hashes[i])
			return -ENOMEM;
		key_hash(m->hashes[i], 32, client + 1, i);
	}
	m->k = (struct kv_offd_keys){ .model_dir = model,
				      .hashes = (const char *const *)m->hashes, .n = n };
	return 0;
}

static int all_ok(const int *status, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (status[i])
			return fail(what, status[i]);
	return 0;
}

/* put_many of m's keys, each block from m->in and m->lens. */
static int put_all(struct kv_offd *c, struct many *m)
{
	int err = kv_offd_put_many(c, &m->k, m->in, m->lens, m->status);

	return err ? fail("put_many", err) : all_ok(m->status, m->n, "put_many");
}

static int cmd_batch(char **a)
{
	unsigned client = (unsigned)atoi(a[2]), blocks = (unsigned)atoi(a[3]);
	unsigned iters = (unsigned)atoi(a[4]);
	size_t bytes = (size_t)atol(a[5]);
	unsigned char *src = page_alloc((size_t)blocks * bytes);
	unsigned char *dst = page_alloc((size_t)blocks * bytes);
	struct kv_offd *c;
	struct many m;
	int64_t t0 = 0, t1;
	int err = many_new(&m, a[1], client, blocks);

	if (err || !src || !dst) {
		err = fail("malloc", -ENOMEM);
		goto out;
	}
	for (unsigned b = 0; b < blocks; b++) {
		fill(src + (size_t)b * bytes, bytes, b);
		m.in[b] = src + (size_t)b * bytes;
		m.out[b] = dst + (size_t)b * bytes;
		m.lens[b] = bytes;
	}
	memset(dst, 0, (size_t)blocks * bytes);
	connect_to(a[0], &c);
	/* Round 0 is a warm-up, as in bench. */
	for (unsigned it = 0; !err && it <= iters; it++) {
		if (it == 1)
			t0 = now_ns();
		err = put_all(c, &m);
		if (!err && (err = kv_offd_get_many(c, &m.k, m.out, m.lens, m.got, m.status)))
			err = fail("get_many", err);
		if (!err)
			err = all_ok(m.status, blocks, "get_many");
	}
	t1 = now_ns();
	kv_offd_close(c);
	if (!err && memcmp(src, dst, (size_t)blocks * bytes))
		err = fail("verify", -KV_ECHECKSUM);
	if (!err)
		printf("{\"bytes\":%llu,\"ns\":%lld,\"t0\":%lld,\"t1\":%lld}\n",
		       (unsigned long long)2 * iters * blocks * bytes, (long long)(t1 - t0),
		       (long long)t0, (long long)t1);
out:
	many_free(&m);
	free(src);
	free(dst);
	return err;
}

static int cmd_has(char **a)
{
	unsigned client = (unsigned)atoi(a[2]), keys = (unsigned)atoi(a[3]);
	unsigned iters = (unsigned)atoi(a[4]);
	size_t bytes = 4096;
	unsigned char *blk = calloc(1, bytes);
	struct kv_offd *c;
	struct many m;
	uint64_t present = 0;
	int64_t t0, t1;
	int err = many_new(&m, a[1], client, keys);

	if (err || !blk) {
		err = fail("malloc", -ENOMEM);
		goto out;
	}
	for (unsigned i = 0; i < keys; i++) {
		m.in[i] = blk;
		m.lens[i] = bytes;
	}
	connect_to(a[0], &c);
	err = put_all(c, &m);
	t0 = now_ns();
	for (unsigned it = 0; !err && it < iters; it++) {
		err = kv_offd_has_many(c, &m.k, m.status);
		if (err)
			err = fail("has_many", err);
		for (unsigned i = 0; !err && i < keys; i++)
			present += m.status[i] == KV_OFFD_IN_RAM;
	}
	t1 = now_ns();
	kv_offd_close(c);
	if (!err && present != (uint64_t)keys * iters) {
		fprintf(stderr, "offd_client: %llu of %llu checks found the block in RAM\n",
			(unsigned long long)present, (unsigned long long)keys * iters);
		err = 3;
	}
	if (!err)
		printf("{\"checks\":%llu,\"ns\":%lld}\n", (unsigned long long)keys * iters,
		       (long long)(t1 - t0));
out:
	many_free(&m);
	free(blk);
	return err;
}

/* Fill the pool with COUNT blocks of BYTES and report what it holds. */
static int cmd_fill(char **a)
{
	size_t bytes = (size_t)atol(a[2]);
	unsigned count = (unsigned)atoi(a[3]);
	unsigned char *blk = calloc(1, bytes);
	struct kv_offd_stats st;
	struct kv_offd *c;
	struct many m;
	int err = many_new(&m, a[1], (unsigned)bytes, count);

	if (err || !blk) {
		err = fail("malloc", -ENOMEM);
		goto out;
	}
	for (unsigned i = 0; i < count; i++) {
		m.in[i] = blk;
		m.lens[i] = bytes;
	}
	connect_to(a[0], &c);
	err = put_all(c, &m);
	if (!err && (err = kv_offd_stats(c, &st)))
		err = fail("stats", err);
	kv_offd_close(c);
	if (!err)
		printf("{\"pool_bytes\":%llu,\"pool_bytes_used\":%llu,\"block_bytes\":%llu}\n",
		       (unsigned long long)st.pool_bytes, (unsigned long long)st.pool_bytes_used,
		       (unsigned long long)st.block_bytes);
out:
	many_free(&m);
	free(blk);
	return err;
}

/* The content of zipf key i, for the put on a miss and the check on a hit. */
static void zipf_ref(struct kv_block_ref *ref, const char *model, unsigned i)
{
	char hash[32];

	snprintf(hash, sizeof(hash), "%016x", 0x5a000000u + i);
	make_ref(ref, model, 0, 0, hash);
}

static int cmd_zipf(char **a)
{
	unsigned keys = (unsigned)atoi(a[2]), ops = (unsigned)atoi(a[3]);
	double skew = atof(a[4]), *cdf = calloc(keys ? keys : 1, sizeof(double)), sum = 0;
	uint64_t x = (uint64_t)atoll(a[5]) * 0x9e3779b97f4a7c15ull + 7, misses = 0;
	unsigned char *buf = NULL;
	struct kv_block_ref ref;
	struct kv_offd *c;
	size_t cap, len;
	int64_t t0, t1;
	int err = 0;

	if (!cdf || !keys)
		return fail("zipf", -EINVAL);
	for (unsigned i = 0; i < keys; i++)
		cdf[i] = sum += 1.0 / pow(i + 1.0, skew);
	connect_to(a[0], &c);
	cap = kv_offd_slot_bytes(c);
	buf = malloc(cap);
	if (!buf)
		return fail("malloc", -ENOMEM);
	t0 = now_ns();
	for (unsigned n = 0; !err && n < ops; n++) {
		double u;
		unsigned lo = 0, hi = keys - 1;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		u = (double)(x >> 11) / 9007199254740992.0 * sum;
		while (lo < hi) {
			unsigned mid = (lo + hi) / 2;

			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		zipf_ref(&ref, a[1], lo);
		err = kv_offd_get(c, &ref, buf, cap, &len);
		if (err == -ENOENT) {
			misses++;
			fill(buf, cap, lo);
			err = kv_offd_put(c, &ref, buf, cap);
		} else if (!err) {
			unsigned char want[64];

			fill(want, sizeof(want), lo);
			if (len != cap || memcmp(buf, want, sizeof(want)))
				err = -KV_ECHECKSUM;
		}
		if (err)
			err = fail("zipf", err);
	}
	t1 = now_ns();
	kv_offd_close(c);
	free(buf);
	free(cdf);
	if (!err)
		printf("{\"gets\":%u,\"misses\":%llu,\"ns\":%lld}\n", ops,
		       (unsigned long long)misses, (long long)(t1 - t0));
	return err;
}

static int cmd_zipf_fill(char **a)
{
	unsigned keys = (unsigned)atoi(a[2]);
	struct kv_block_ref ref;
	unsigned char *buf;
	struct kv_offd *c;
	size_t cap;
	int err = 0;

	connect_to(a[0], &c);
	cap = kv_offd_slot_bytes(c);
	buf = malloc(cap);
	for (unsigned i = 0; buf && !err && i < keys; i++) {
		zipf_ref(&ref, a[1], i);
		fill(buf, cap, i);
		if ((err = kv_offd_put(c, &ref, buf, cap)))
			err = fail("put", err);
	}
	kv_offd_close(c);
	free(buf);
	return buf ? err : fail("malloc", -ENOMEM);
}

static int dma_fail(const char *what, int err)
{
	fprintf(stderr, "offd_client: dma: %s: %s%s%s\n", what, kv_strerror(err),
		*kv_error_detail() ? ": " : "", kv_error_detail());
	return 3;
}

/* The pinned-mapping path of a CUDA client: the pool registered in
 * place, blocks DMA'd into and out of slots with no copy through the
 * socket. */
static int dma_round_trip(struct kv_dma *dma, struct kv_offd *c, const char *model,
			  size_t len)
{
	size_t pool_bytes = 0, got = 0;
	unsigned char *pool = kv_offd_pool(c, &pool_bytes);
	unsigned char *want = malloc(len), *back = malloc(len);
	void *dev = NULL, *dev2 = NULL, *ptr;
	const void *rptr;
	struct kv_block_ref ref;
	uint32_t slot;
	int err, registered = 0;

	make_ref(&ref, model, 0, 0, "00000000000000000000000000dead29");
	err = !pool ? -EINVAL : !want || !back ? -ENOMEM : 0;
	if (err) {
		err = dma_fail("pool or buffers", err);
		goto out;
	}
	fill(want, len, 29);
	if ((err = kv_dma_register(dma, pool, pool_bytes))) {
		err = dma_fail("register the pool", err);
		goto out;
	}
	registered = 1;
	if ((err = kv_dma_dev_alloc(dma, len, &dev)) ||
	    (err = kv_dma_dev_alloc(dma, len, &dev2)) ||
	    (err = kv_dma_copy(dma, dev, want, len)) ||
	    (err = kv_dma_memset(dma, dev2, 0xA5, len))) {
		err = dma_fail("device buffers", err);
		goto out;
	}
	if ((err = kv_offd_alloc(c, &ref, len, &slot, &ptr))) {
		err = fail("alloc", err);
		goto out;
	}
	if ((unsigned char *)ptr < pool || (unsigned char *)ptr + len > pool + pool_bytes) {
		fprintf(stderr, "offd_client: dma: slot %u lies outside the pool\n", slot);
		kv_offd_abort(c, slot);
		err = 3;
		goto out;
	}
	if ((err = kv_dma_copy(dma, ptr, dev, len))) {
		kv_offd_abort(c, slot);
		err = dma_fail("device -> slot", err);
		goto out;
	}
	if ((err = kv_offd_commit(c, slot))) {
		err = fail("commit", err);
		goto out;
	}
	memset(back, 0xA5, len);
	if ((err = kv_offd_get(c, &ref, back, len, &got))) {
		err = fail("get", err);
		goto out;
	}
	if (got != len || memcmp(back, want, len)) {
		fprintf(stderr, "offd_client: dma: the daemon holds other bytes than the device sent\n");
		err = 3;
		goto out;
	}
	if ((err = kv_offd_lookup(c, &ref, &slot, &rptr, &got))) {
		err = fail("lookup", err);
		goto out;
	}
	err = got == len ? kv_dma_copy(dma, dev2, rptr, len) : -EIO;
	kv_offd_release(c, slot);
	memset(back, 0xA5, len);
	if (err || (err = kv_dma_copy(dma, back, dev2, len))) {
		err = dma_fail("slot -> device", err);
		goto out;
	}
	if (memcmp(back, want, len)) {
		fprintf(stderr, "offd_client: dma: the device got other bytes than the slot held\n");
		err = 3;
		goto out;
	}
	printf("%s: registered %zu pool bytes; %zu bytes device -> slot -> device: equal\n",
	       kv_dma_name(dma), pool_bytes, len);
out:
	kv_dma_dev_free(dma, dev);
	kv_dma_dev_free(dma, dev2);
	if (registered)
		kv_dma_unregister(dma, pool);
	free(want);
	free(back);
	return err;
}

static int cmd_dma(char **a)
{
	size_t len = strtoull(a[2], NULL, 0);
	struct kv_offd *c;
	struct kv_dma *dma;
	int err;

	if (len == 0)
		return dma_fail(a[2], -EINVAL);
	if ((err = kv_dma_open(0, NULL, &dma)))
		return dma_fail("open CUDA device 0", err);
	connect_to(a[0], &c);
	err = dma_round_trip(dma, c, a[1], len);
	kv_offd_close(c);
	kv_dma_close(dma);
	return err;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int args;
		int (*fn)(char **a);
	} cmds[] = {
		{ "put", 6, cmd_put }, { "get", 5, cmd_get }, { "hold", 5, cmd_hold },
		{ "hog", 3, cmd_hog }, { "scribble", 5, cmd_scribble },
		{ "stress", 6, cmd_stress }, { "bench", 6, cmd_bench },
		{ "memcpy", 3, cmd_memcpy }, { "batch", 6, cmd_batch },
		{ "memcpy-batch", 3, cmd_memcpy_batch },
		{ "has", 5, cmd_has }, { "fill", 4, cmd_fill }, { "zipf", 6, cmd_zipf },
		{ "zipf-fill", 3, cmd_zipf_fill }, { "dma", 3, cmd_dma },
	};

	for (size_t i = 0; argc > 1 && i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name) && argc == cmds[i].args + 2)
			return cmds[i].fn(argv + 2);
	fprintf(stderr, "usage: see the comment at the top of bench/offd_client.c\n");
	return 2;
}
