/*
 * Checks of the DMA API that hold on any device: test_dma runs them on
 * the CPU device, test_dma_cuda on a CUDA device where one exists.
 * Device memory is only ever read back through kv_dma_copy, so the same
 * code checks both.  Destinations are poisoned with 0xA5 first, so a
 * byte the copy never wrote shows up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>

#define POISON 0xA5

static unsigned long long rng_state;
static int failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);		\
		fprintf(stderr, __VA_ARGS__);				\
		fprintf(stderr, " (seed %llu; %s)\n", seed,		\
			kv_error_detail());				\
		failures++;						\
		return -1;						\
	}								\
} while (0)

static unsigned long long seed;

static unsigned long long rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fill_random(void *p, size_t len)
{
	unsigned char *c = p;

	for (size_t i = 0; i < len; i++)
		c[i] = (unsigned char)(rnd() >> 24);
}

static int all_poison(const unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != POISON)
			return 0;
	return 1;
}

enum host_kind { HOST_PAGEABLE, HOST_PINNED, HOST_REGISTERED };

static const char *const host_names[] = { "pageable", "pinned", "registered" };

static void *host_get(struct kv_dma *dma, enum host_kind k, size_t len)
{
	void *p = NULL;

	switch (k) {
	case HOST_PAGEABLE:
		return malloc(len);
	case HOST_PINNED:
		return kv_dma_host_alloc(dma, len, &p) == 0 ? p : NULL;
	case HOST_REGISTERED:
		if (posix_memalign(&p, 4096, len))
			return NULL;
		if (kv_dma_register(dma, p, len) < 0) {
			free(p);
			return NULL;
		}
		return p;
	}
	return NULL;
}

static void host_put(struct kv_dma *dma, enum host_kind k, void *p)
{
	switch (k) {
	case HOST_PAGEABLE:
		free(p);
		break;
	case HOST_PINNED:
		kv_dma_host_free(dma, p);
		break;
	case HOST_REGISTERED:
		kv_dma_unregister(dma, p);
		free(p);
		break;
	}
}

/* n random blocks host -> device -> host, by sync copies or one
 * batch, compared byte for byte. */
static int check_round_trip(struct kv_dma *dma, enum host_kind hk, size_t block,
			    size_t n, int batched)
{
	struct kv_dma_stream *s;
	struct kv_dma_copy *c = calloc(n, sizeof(*c));
	unsigned char *src = host_get(dma, hk, block * n);
	unsigned char *dst = host_get(dma, hk, block * n);
	unsigned char *dev = NULL;
	int r;

	CHECK(c && src && dst, "allocate %s host memory", host_names[hk]);
	CHECK(kv_dma_dev_alloc(dma, block * n, (void **)&dev) == 0, "dev_alloc");
	CHECK(kv_dma_memset(dma, dev, POISON, block * n) == 0, "memset");
	CHECK(kv_dma_stream_open(dma, &s) == 0, "stream_open");
	fill_random(src, block * n);
	memset(dst, POISON, block * n);
	for (int leg = 0; leg < 2; leg++) {
		/* Blocks go out in reverse order so an offset mix-up shows. */
		for (size_t i = 0; i < n; i++) {
			size_t j = n - 1 - i;

			c[i].dst = leg ? dst + i * block : dev + j * block;
			c[i].src = leg ? (void *)(dev + j * block) : src + i * block;
			c[i].len = block;
		}
		if (batched) {
			r = kv_dma_copy_async(s, c, n);
			CHECK(r == 0, "copy_async: %s", kv_strerror(r));
		} else {
			for (size_t i = 0; i < n; i++) {
				r = kv_dma_copy_async(s, &c[i], 1);
				CHECK(r == 0, "copy_async one: %s", kv_strerror(r));
			}
		}
		r = kv_dma_stream_sync(s);
		CHECK(r == 0, "stream_sync: %s", kv_strerror(r));
		CHECK(kv_dma_stream_query(s) == 0, "query after sync");
	}
	CHECK(memcmp(src, dst, block * n) == 0,
	      "round trip %s block %zu x %zu %s differs", host_names[hk], block, n,
	      batched ? "batched" : "single");
	kv_dma_stream_close(s);
	kv_dma_dev_free(dma, dev);
	host_put(dma, hk, src);
	host_put(dma, hk, dst);
	free(c);
	return 0;
}

/*
 * Scatter random blocks into poisoned per-layer tensors on the device,
 * read every tensor back and check each fragment landed where it
 * belongs and nothing else was touched; then gather them into poisoned
 * host blocks with guard bytes and compare.
 */
static int check_frags(struct kv_dma *dma, enum kv_dma_method method,
		       enum host_kind hk, unsigned layers, size_t frag)
{
	enum { SLOTS = 9, N = 5, GUARD = 64 };
	const uint64_t ids[N] = { 7, 2, 8, 0, 4 };
	unsigned T = 2 * layers;
	size_t block = T * frag, tensor_bytes = SLOTS * frag;
	void **tensors = calloc(T, sizeof(*tensors));
	void *blocks[N] = { 0 }, *back[N] = { 0 };
	unsigned char *want = malloc(N * block), *seen = malloc(tensor_bytes);
	struct kv_dma_frags f = { .tensors = tensors, .num_tensors = T,
				  .fragment_bytes = frag };
	struct kv_dma_stream *s;
	int r;

	CHECK(tensors && want && seen, "malloc");
	CHECK(kv_dma_stream_open(dma, &s) == 0, "stream_open");
	for (unsigned t = 0; t < T; t++) {
		CHECK(kv_dma_dev_alloc(dma, tensor_bytes, &tensors[t]) == 0, "dev_alloc");
		CHECK(kv_dma_memset(dma, tensors[t], POISON, tensor_bytes) == 0, "memset");
	}
	fill_random(want, N * block);
	for (int i = 0; i < N; i++) {
		blocks[i] = host_get(dma, hk, block);
		back[i] = host_get(dma, hk, block + GUARD);
		CHECK(blocks[i] && back[i], "host alloc");
		memcpy(blocks[i], want + i * block, block);
		memset(back[i], POISON, block + GUARD);
	}
	r = kv_dma_scatter(s, method, &f, ids, (const void *const *)blocks, N);
	CHECK(r == 0, "scatter: %s", kv_strerror(r));
	CHECK(kv_dma_stream_sync(s) == 0, "sync");
	for (unsigned t = 0; t < T; t++) {
		CHECK(kv_dma_copy(dma, seen, tensors[t], tensor_bytes) == 0, "read back");
		for (uint64_t slot = 0; slot < SLOTS; slot++) {
			const unsigned char *got = seen + slot * frag;
			int i;

			for (i = 0; i < N && ids[i] != slot; i++)
				;
			if (i == N)
				CHECK(all_poison(got, frag),
				      "scatter wrote slot %llu of tensor %u (layers %u, frag %zu)",
				      (unsigned long long)slot, t, layers, frag);
			else
				CHECK(memcmp(got, want + i * block + t * frag, frag) == 0,
				      "scatter: block %d tensor %u wrong (layers %u, frag %zu)",
				      i, t, layers, frag);
		}
	}
	/* Two gathers queued before one sync: the second must not disturb
	 * the first (the kernel's tables are reused between launches). */
	r = kv_dma_gather(s, method, &f, ids, back, 3);
	CHECK(r == 0, "gather: %s", kv_strerror(r));
	r = kv_dma_gather(s, method, &f, ids + 3, back + 3, N - 3);
	CHECK(r == 0, "gather: %s", kv_strerror(r));
	CHECK(kv_dma_stream_sync(s) == 0, "sync");
	for (int i = 0; i < N; i++) {
		CHECK(memcmp(back[i], want + i * block, block) == 0,
		      "gather: block %d differs (layers %u, frag %zu, %s)", i, layers,
		      frag, host_names[hk]);
		CHECK(all_poison((unsigned char *)back[i] + block, GUARD),
		      "gather wrote past block %d", i);
	}
	for (int i = 0; i < N; i++) {
		host_put(dma, hk, blocks[i]);
		host_put(dma, hk, back[i]);
	}
	for (unsigned t = 0; t < T; t++)
		kv_dma_dev_free(dma, tensors[t]);
	kv_dma_stream_close(s);
	free(tensors);
	free(want);
	free(seen);
	return 0;
}

static int check_pool(struct kv_dma *dma)
{
	struct kv_dma_pool_opts o = { .slot_bytes = 5000, .slots = 3 };
	struct kv_dma_pool *p;
	void *slot[3], *extra, *mem;
	int r;

	CHECK(kv_dma_pool_create(dma, &o, &p) == 0, "pool_create");
	CHECK(kv_dma_pool_slot_bytes(p) == 8192, "slot rounded to 4096");
	for (int i = 0; i < 3; i++) {
		CHECK(kv_dma_pool_get(p, &slot[i]) == 0, "pool_get %d", i);
		CHECK(((uintptr_t)slot[i] & 4095) == 0, "slot aligned");
		memset(slot[i], i, 8192);
	}
	CHECK(kv_dma_pool_get(p, &extra) == -EAGAIN, "pool exhausted");
	CHECK(kv_dma_pool_put(p, (char *)slot[1] + 1) == -EINVAL, "misaligned put");
	CHECK(kv_dma_pool_put(p, slot[1]) == 0, "put");
	CHECK(kv_dma_pool_put(p, slot[1]) == -EINVAL, "double put");
	CHECK(kv_dma_pool_get(p, &extra) == 0 && extra == slot[1], "reuse");
	CHECK(kv_dma_pool_put(p, &o) == -EINVAL, "foreign put");
	kv_dma_pool_destroy(p);

	/* Memory we already have, such as kvoffd's pool, pinned in place. */
	CHECK(posix_memalign(&mem, 4096, 4 * 4096) == 0, "memalign");
	o = (struct kv_dma_pool_opts){ .slot_bytes = 4096, .slots = 4, .mem = mem };
	CHECK(kv_dma_pool_create(dma, &o, &p) == 0, "pool over user memory");
	CHECK(kv_dma_pool_get(p, &extra) == 0, "get");
	CHECK((char *)extra >= (char *)mem && (char *)extra < (char *)mem + 4 * 4096,
	      "slot inside the given memory");
	kv_dma_pool_destroy(p);
	free(mem);

	o = (struct kv_dma_pool_opts){ .slot_bytes = 4096, .slots = 2,
				       .flags = KV_DMA_POOL_ON_NODE, .numa_node = 0 };
	r = kv_dma_pool_create(dma, &o, &p);
	CHECK(r == 0 || r == -ENOSYS || r == -EPERM, "pool on node 0: %s", kv_strerror(r));
	if (r == 0) {
		CHECK(kv_dma_pool_get(p, &extra) == 0, "get");
		memset(extra, 1, 4096);
		kv_dma_pool_destroy(p);
	}
	o.numa_node = 100000;
	CHECK(kv_dma_pool_create(dma, &o, &p) == -ENOENT, "pool on a missing node");

	/* Near the device: its node where known, else anywhere, never a
	 * failure for want of a node. */
	o = (struct kv_dma_pool_opts){ .slot_bytes = 4096, .slots = 2,
				       .flags = KV_DMA_POOL_NEAR_DEVICE };
	r = kv_dma_pool_create(dma, &o, &p);
	CHECK(r == 0, "pool near the device: %s", kv_strerror(r));
	CHECK(kv_dma_pool_get(p, &extra) == 0, "get");
	memset(extra, 2, 4096);
	kv_dma_pool_destroy(p);
	return 0;
}

static int check_bad_args(struct kv_dma *dma)
{
	struct kv_dma_stream *s;
	struct kv_dma_copy c = { .dst = NULL, .src = &c, .len = 1 };
	void *tensors[1] = { NULL };
	struct kv_dma_frags f = { .tensors = tensors, .num_tensors = 1,
				  .fragment_bytes = 16 };
	uint64_t id = 0;
	char buf[16];
	void *blocks[1] = { buf };
	void *p;

	CHECK(kv_dma_stream_open(dma, &s) == 0, "stream_open");
	CHECK(kv_dma_copy_async(s, &c, 1) == -EINVAL, "NULL dst refused");
	CHECK(kv_dma_copy(dma, NULL, buf, 1) == -EINVAL, "NULL dst refused");
	CHECK(kv_dma_copy_async(s, &c, 0) == 0, "empty batch");
	CHECK(kv_dma_gather(s, KV_DMA_COPIES, &f, &id, blocks, 1) == -EINVAL,
	      "NULL tensor refused");
	tensors[0] = buf;
	f.num_tensors = 0;
	CHECK(kv_dma_gather(s, KV_DMA_COPIES, &f, &id, blocks, 1) == -EINVAL,
	      "no tensors refused");
	f.num_tensors = 1;
	id = UINT64_MAX / 2;
	CHECK(kv_dma_gather(s, KV_DMA_COPIES, &f, &id, blocks, 1) == -EOVERFLOW,
	      "block id overflow refused");
	CHECK(kv_dma_gather(s, (enum kv_dma_method)7, &f, &id, blocks, 0) == -EINVAL,
	      "unknown method refused");
	CHECK(kv_dma_host_alloc(dma, 0, &p) == -EINVAL, "zero-length alloc");
	CHECK(kv_dma_dev_alloc(dma, 0, &p) == -EINVAL, "zero-length dev alloc");
	kv_dma_stream_close(s);
	return 0;
}

/* Everything above on one device, for every host memory kind the
 * method can reach. */
static int check_device(struct kv_dma *dma)
{
	static const unsigned layers[] = { 1, 2, 7, 32 };
	static const size_t frags[] = { 1, 48, 100, 4096, 16384 };
	static const size_t blocks[] = { 1, 4096, 5000, 1 << 20 };

	for (int hk = HOST_PAGEABLE; hk <= HOST_REGISTERED; hk++) {
		for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
			if (check_round_trip(dma, hk, blocks[b], 6, 0) < 0 ||
			    check_round_trip(dma, hk, blocks[b], 6, 1) < 0)
				return -1;
		}
		for (size_t l = 0; l < sizeof(layers) / sizeof(layers[0]); l++) {
			for (size_t f = 0; f < sizeof(frags) / sizeof(frags[0]); f++) {
				if (check_frags(dma, KV_DMA_COPIES, hk, layers[l], frags[f]) < 0)
					return -1;
				/* The kernel reaches host memory only when pinned. */
				if ((hk != HOST_PAGEABLE || kv_dma_is_cpu(dma)) &&
				    check_frags(dma, KV_DMA_KERNEL, hk, layers[l], frags[f]) < 0)
					return -1;
			}
		}
	}
	if (check_pool(dma) < 0 || check_bad_args(dma) < 0)
		return -1;
	return 0;
}

static void seed_rng(void)
{
	const char *env = getenv("KV_TEST_SEED");

	seed = env ? strtoull(env, NULL, 10) : (unsigned long long)kv_now_ns();
	rng_state = seed | 1;
}
