/*
 * The DMA API and its CPU device.  CUDA work is handed to dma_cuda.cu;
 * the CPU device runs the same calls with memcpy so that every caller
 * works, and is tested, on machines without a GPU.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kv/dma.h>
#include <kv/errors.h>
#include <kv/numa.h>
#include "dma_impl.h"

#define HOST_ALIGN	4096
#define DEFAULT_LANES	4
#define MAX_LANES	64

struct kv_dma {
	int device;		/* KV_DMA_DEVICE_CPU or a CUDA index */
	unsigned lanes;
	atomic_int batch;	/* cleared when the driver refuses batches */
	char name[256];
	char pci[32];
};

struct kv_dma_stream {
	struct kv_dma *dma;
#ifdef KV_HAVE_CUDA
	struct kvi_cuda_stream *cs;
#endif
};

struct kv_dma_pool {
	struct kv_dma *dma;
	char *base;
	size_t slot_bytes;
	size_t total_bytes;
	unsigned slots;
	enum { POOL_HOST, POOL_NUMA, POOL_USER } origin;
	pthread_mutex_t lock;
	unsigned *free_stack;
	unsigned nfree;
	unsigned char *in_use;
};

static int is_cpu(const struct kv_dma *dma)
{
	return dma->device == KV_DMA_DEVICE_CPU;
}

int kv_dma_device_count(int *count)
{
#ifdef KV_HAVE_CUDA
	int n = 0;
	int r = kvi_cuda_device_count(&n);

	if (r < 0)
		return r;
	if (n == 0)
		return kvi_fail(-KV_ENODEV, "no CUDA device present");
	*count = n;
	return 0;
#else
	(void)count;
	return kvi_fail(-KV_ENODEV, "built without CUDA");
#endif
}

static int open_cuda(struct kv_dma *dma, int device)
{
#ifdef KV_HAVE_CUDA
	int n, r;

	r = kv_dma_device_count(&n);
	if (r < 0)
		return r;
	if (device >= n)
		return kvi_fail(-KV_ENODEV, "CUDA device %d absent (%d present)",
				device, n);
	r = kvi_cuda_open(device, dma->name, sizeof(dma->name), dma->pci,
			  sizeof(dma->pci));
	if (r < 0)
		return r == -EIO ? -KV_ENODEV : r;
	atomic_store(&dma->batch, kvi_cuda_has_batch());
	return 0;
#else
	(void)dma;
	(void)device;
	return kvi_fail(-KV_ENODEV, "built without CUDA");
#endif
}

int kv_dma_open(int device, const struct kv_dma_opts *opts,
		struct kv_dma **out)
{
	struct kv_dma *dma;
	unsigned flags = opts ? opts->flags : 0;
	int r = 0;

	if (device < KV_DMA_DEVICE_CPU)
		return -EINVAL;
	dma = calloc(1, sizeof(*dma));
	if (!dma)
		return -ENOMEM;
	dma->lanes = opts && opts->lanes ? opts->lanes : DEFAULT_LANES;
	if (dma->lanes > MAX_LANES)
		dma->lanes = MAX_LANES;
	dma->device = device;
	if (device != KV_DMA_DEVICE_CPU) {
		r = open_cuda(dma, device);
		if (r == -KV_ENODEV && (flags & KV_DMA_CPU_FALLBACK)) {
			dma->device = KV_DMA_DEVICE_CPU;
			r = 0;
		}
	}
	if (r < 0) {
		free(dma);
		return r;
	}
	if (is_cpu(dma))
		snprintf(dma->name, sizeof(dma->name), "cpu");
	if (flags & KV_DMA_NO_BATCH)
		atomic_store(&dma->batch, 0);
	*out = dma;
	return 0;
}

void kv_dma_close(struct kv_dma *dma)
{
	free(dma);
}

int kv_dma_is_cpu(const struct kv_dma *dma)
{
	return is_cpu(dma);
}

int kv_dma_device(const struct kv_dma *dma)
{
	return dma->device;
}

const char *kv_dma_name(const struct kv_dma *dma)
{
	return dma->name;
}

int kv_dma_pci_bus_id(const struct kv_dma *dma, char *buf, size_t len)
{
	if (is_cpu(dma))
		return -KV_ENODEV;
	if ((size_t)snprintf(buf, len, "%s", dma->pci) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int kv_dma_numa_node(const struct kv_dma *dma, int *node)
{
	if (is_cpu(dma))
		return -KV_ENODEV;
	return kv_numa_node_of_pci(dma->pci, node);
}

int kv_dma_batched(const struct kv_dma *dma)
{
	return !is_cpu(dma) && atomic_load(&dma->batch);
}

static int cpu_alloc(size_t len, void **out)
{
	void *p;

	if (len == 0)
		return -EINVAL;
	if (posix_memalign(&p, HOST_ALIGN, len))
		return -ENOMEM;
	*out = p;
	return 0;
}

int kv_dma_host_alloc(struct kv_dma *dma, size_t len, void **out)
{
#ifdef KV_HAVE_CUDA
	if (!is_cpu(dma))
		return len ? kvi_cuda_host_alloc(dma->device, len, out) : -EINVAL;
#endif
	(void)dma;
	return cpu_alloc(len, out);
}

void kv_dma_host_free(struct kv_dma *dma, void *p)
{
	if (!p)
		return;
#ifdef KV_HAVE_CUDA
	if (!is_cpu(dma)) {
		kvi_cuda_host_free(dma->device, p);
		return;
	}
#endif
	(void)dma;
	free(p);
}

int kv_dma_register(struct kv_dma *dma, void *p, size_t len)
{
	if (!p || !len)
		return -EINVAL;
#ifdef KV_HAVE_CUDA
	if (!is_cpu(dma))
		return kvi_cuda_register(dma->device, p, len);
#endif
	(void)dma;
	return 0;
}

int kv_dma_unregister(struct kv_dma *dma, void *p)
{
	if (!p)
		return -EINVAL;
#ifdef KV_HAVE_CUDA
	if (!is_cpu(dma))
		return kvi_cuda_unregister(dma->device, p);
#endif
	(void)dma;
	return 0;
}

int kv_dma_dev_alloc(struct kv_dma *dma, size_t len, void **out)
{
#ifdef KV_HAVE_CUDA
	if (!is_cpu(dma))
		return len ? kvi_cuda_dev_alloc(dma->device, len, out) : -EINVAL;
#endif
	(void)dma;
	return cpu_alloc(len, out);
}

void kv_dma_dev_free(struct kv_dma *dma, void *p)
{
	if (!p)
		return;
#ifdef KV_HAVE_CUDA
	if (!is_cpu(dma)) {
		kvi_cuda_dev_free(dma->device, p);
		return;
	}
#endif
	(void)dma;
	free(p);
}

int kv_dma_memset(struct kv_dma *dma, void *p, int byte, size_t len)
{
	if (!p)
		return -EINVAL;
#ifdef KV_HAVE_CUDA
	if (!is_cpu(dma))
		return kvi_cuda_memset(dma->device, p, byte, len);
#endif
	(void)dma;
	memset(p, byte, len);
	return 0;
}

int kv_dma_copy(struct kv_dma *dma, void *dst, const void *src, size_t len)
{
	if ((!dst || !src) && len)
		return -EINVAL;
#ifdef KV_HAVE_CUDA
	if (!is_cpu(dma))
		return kvi_cuda_copy(dma->device, dst, src, len);
#endif
	(void)dma;
	if (len)
		memcpy(dst, src, len);
	return 0;
}

int kv_dma_stream_open(struct kv_dma *dma, struct kv_dma_stream **out)
{
	struct kv_dma_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->dma = dma;
#ifdef KV_HAVE_CUDA
	if (!is_cpu(dma)) {
		int r = kvi_cuda_stream_open(dma->device, dma->lanes, &s->cs);

		if (r < 0) {
			free(s);
			return r;
		}
	}
#endif
	*out = s;
	return 0;
}

void kv_dma_stream_close(struct kv_dma_stream *s)
{
	if (!s)
		return;
#ifdef KV_HAVE_CUDA
	if (s->cs)
		kvi_cuda_stream_close(s->cs);
#endif
	free(s);
}

static int check_copies(const struct kv_dma_copy *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (c[i].len && (!c[i].dst || !c[i].src))
			return -EINVAL;
	return 0;
}

int kv_dma_copy_async(struct kv_dma_stream *s, const struct kv_dma_copy *copies,
		      size_t n)
{
	int r = check_copies(copies, n);

	if (r < 0 || n == 0)
		return r;
#ifdef KV_HAVE_CUDA
	if (s->cs) {
		int batch = atomic_load(&s->dma->batch);

		r = kvi_cuda_copy_async(s->cs, copies, n, batch);
		if (r == KVI_BATCH_UNSUPPORTED)
			atomic_store(&s->dma->batch, 0);
		if (r == KVI_BATCH_UNSUPPORTED || r == KVI_BATCH_REFUSED)
			r = kvi_cuda_copy_async(s->cs, copies, n, 0);
		return r;
	}
#endif
	(void)s;
	for (size_t i = 0; i < n; i++)
		if (copies[i].len)
			memcpy(copies[i].dst, copies[i].src, copies[i].len);
	return 0;
}

int kv_dma_stream_sync(struct kv_dma_stream *s)
{
#ifdef KV_HAVE_CUDA
	if (s->cs)
		return kvi_cuda_sync(s->cs);
#endif
	(void)s;
	return 0;
}

int kv_dma_stream_query(struct kv_dma_stream *s)
{
#ifdef KV_HAVE_CUDA
	if (s->cs)
		return kvi_cuda_query(s->cs);
#endif
	(void)s;
	return 0;
}

static int check_frags(const struct kv_dma_frags *f, const uint64_t *ids,
		       const void *blocks, size_t n, size_t *ncopies)
{
	if (!f || !f->tensors || !f->num_tensors || !f->fragment_bytes)
		return -EINVAL;
	if (n && (!ids || !blocks))
		return -EINVAL;
	for (unsigned t = 0; t < f->num_tensors; t++)
		if (!f->tensors[t])
			return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (ids[i] > SIZE_MAX / f->fragment_bytes)
			return -EOVERFLOW;
	if (n > SIZE_MAX / sizeof(struct kv_dma_copy) / f->num_tensors)
		return -EOVERFLOW;
	*ncopies = n * f->num_tensors;
	return 0;
}

/* The copy list between fragments and contiguous blocks, either way. */
static int frags_copies(struct kv_dma_stream *s, const struct kv_dma_frags *f,
			const uint64_t *ids, void *const *blocks, size_t n,
			size_t ncopies, int gather)
{
	struct kv_dma_copy *c = malloc(ncopies * sizeof(*c));
	size_t k = 0;
	int r;

	if (!c)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		for (unsigned t = 0; t < f->num_tensors; t++, k++) {
			char *frag = (char *)f->tensors[t] + ids[i] * f->fragment_bytes;
			char *blk = (char *)blocks[i] + (size_t)t * f->fragment_bytes;

			c[k].dst = gather ? blk : frag;
			c[k].src = gather ? frag : blk;
			c[k].len = f->fragment_bytes;
		}
	}
	r = kv_dma_copy_async(s, c, ncopies);
	free(c);
	return r;
}

static int frags_move(struct kv_dma_stream *s, enum kv_dma_method method,
		      const struct kv_dma_frags *f, const uint64_t *ids,
		      void *const *blocks, size_t n, int gather)
{
	size_t ncopies;
	int r = check_frags(f, ids, blocks, n, &ncopies);

	if (r < 0)
		return r;
	if (method != KV_DMA_COPIES && method != KV_DMA_KERNEL)
		return -EINVAL;
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!blocks[i])
			return -EINVAL;
#ifdef KV_HAVE_CUDA
	if (s->cs && method == KV_DMA_KERNEL)
		return kvi_cuda_frags_kernel(s->cs, f, ids, blocks, n, gather);
#endif
	/* On the CPU device both methods are the same memcpy loop. */
	return frags_copies(s, f, ids, blocks, n, ncopies, gather);
}

int kv_dma_gather(struct kv_dma_stream *s, enum kv_dma_method method,
		  const struct kv_dma_frags *frags, const uint64_t *ids,
		  void *const *blocks, size_t n)
{
	return frags_move(s, method, frags, ids, blocks, n, 1);
}

int kv_dma_scatter(struct kv_dma_stream *s, enum kv_dma_method method,
		   const struct kv_dma_frags *frags, const uint64_t *ids,
		   const void *const *blocks, size_t n)
{
	/* Blocks are only read when scattering; the shared helper takes
	 * them unqualified because gathering writes them. */
	void *const *b = (void *const *)(uintptr_t)blocks;

	return frags_move(s, method, frags, ids, b, n, 0);
}

/* Pinned memory bound to a NUMA node. */
static int alloc_on_node(struct kv_dma *dma, int node, size_t len, void **out)
{
	void *m;
	int r = kv_numa_alloc(node, len, &m);

	if (r < 0)
		return r;
	r = kv_dma_register(dma, m, len);
	if (r < 0) {
		kv_numa_free(m, len);
		return r;
	}
	*out = m;
	return 0;
}

int kv_dma_pool_create(struct kv_dma *dma, const struct kv_dma_pool_opts *opts,
		       struct kv_dma_pool **out)
{
	struct kv_dma_pool *p;
	int r, node, on_node;

	if (!opts || !opts->slot_bytes || !opts->slots ||
	    opts->slot_bytes > SIZE_MAX - HOST_ALIGN)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->dma = dma;
	p->slots = opts->slots;
	p->slot_bytes = (opts->slot_bytes + HOST_ALIGN - 1) & ~(size_t)(HOST_ALIGN - 1);
	if (p->slot_bytes > SIZE_MAX / p->slots) {
		free(p);
		return -EOVERFLOW;
	}
	p->total_bytes = p->slot_bytes * p->slots;
	node = opts->numa_node;
	on_node = (opts->flags & KV_DMA_POOL_ON_NODE) ||
		  ((opts->flags & KV_DMA_POOL_NEAR_DEVICE) &&
		   kv_dma_numa_node(dma, &node) == 0);
	r = -pthread_mutex_init(&p->lock, NULL);
	if (r) {
		free(p);
		return r;
	}
	p->free_stack = calloc(p->slots, sizeof(*p->free_stack));
	p->in_use = calloc(p->slots, 1);
	if (!p->free_stack || !p->in_use) {
		r = -ENOMEM;
		goto fail;
	}
	if (opts->mem) {
		p->origin = POOL_USER;
		p->base = opts->mem;
		r = kv_dma_register(dma, p->base, p->total_bytes);
	} else {
		void *m = NULL;

		r = -ENOENT;
		if (on_node) {
			p->origin = POOL_NUMA;
			r = alloc_on_node(dma, node, p->total_bytes, &m);
		}
		/* Near the device is a preference: anywhere beats failing. */
		if (r < 0 && !(opts->flags & KV_DMA_POOL_ON_NODE)) {
			p->origin = POOL_HOST;
			r = kv_dma_host_alloc(dma, p->total_bytes, &m);
		}
		if (r == 0)
			p->base = m;
	}
	if (r < 0)
		goto fail;
	for (unsigned i = 0; i < p->slots; i++)
		p->free_stack[i] = p->slots - 1 - i;
	p->nfree = p->slots;
	*out = p;
	return 0;
fail:
	pthread_mutex_destroy(&p->lock);
	free(p->free_stack);
	free(p->in_use);
	free(p);
	return r;
}

void kv_dma_pool_destroy(struct kv_dma_pool *p)
{
	if (!p)
		return;
	switch (p->origin) {
	case POOL_HOST:
		kv_dma_host_free(p->dma, p->base);
		break;
	case POOL_NUMA:
		kv_dma_unregister(p->dma, p->base);
		kv_numa_free(p->base, p->total_bytes);
		break;
	case POOL_USER:
		kv_dma_unregister(p->dma, p->base);
		break;
	}
	pthread_mutex_destroy(&p->lock);
	free(p->free_stack);
	free(p->in_use);
	free(p);
}

int kv_dma_pool_get(struct kv_dma_pool *p, void **slot)
{
	unsigned i;

	pthread_mutex_lock(&p->lock);
	if (p->nfree == 0) {
		pthread_mutex_unlock(&p->lock);
		return -EAGAIN;
	}
	i = p->free_stack[--p->nfree];
	p->in_use[i] = 1;
	pthread_mutex_unlock(&p->lock);
	*slot = p->base + (size_t)i * p->slot_bytes;
	return 0;
}

int kv_dma_pool_put(struct kv_dma_pool *p, void *slot)
{
	char *c = slot;
	size_t off;
	unsigned i;

	if (c < p->base || c >= p->base + p->total_bytes)
		return -EINVAL;
	off = (size_t)(c - p->base);
	if (off % p->slot_bytes)
		return -EINVAL;
	i = (unsigned)(off / p->slot_bytes);
	pthread_mutex_lock(&p->lock);
	if (!p->in_use[i]) {
		pthread_mutex_unlock(&p->lock);
		return -EINVAL;
	}
	p->in_use[i] = 0;
	p->free_stack[p->nfree++] = i;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

size_t kv_dma_pool_slot_bytes(const struct kv_dma_pool *p)
{
	return p->slot_bytes;
}
