#ifndef KV_DMA_H
#define KV_DMA_H

/*
 * Copies between GPU memory and host memory.  A kv_dma handle is one
 * device: a CUDA device, or the CPU "device" that moves bytes with
 * memcpy where the build has no CUDA or the machine no GPU, so callers
 * run unchanged everywhere.  Memory from kv_dma_dev_alloc is device
 * memory (plain host memory on the CPU device); kv_dma_host_alloc and
 * pools give pinned host memory.  Copy directions come from the
 * pointers themselves (unified addressing).
 *
 * A handle may be shared by threads; a kv_dma_stream belongs to one
 * worker thread at a time.  CUDA failures come back as -EIO with the
 * CUDA message in kv_error_detail().
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_DMA_DEVICE_CPU	(-1)	/* kv_dma_open: the memcpy device */

#define KV_DMA_CPU_FALLBACK	(1u << 0) /* open the CPU device when the
					     CUDA one is unavailable */
#define KV_DMA_NO_BATCH		(1u << 1) /* never cudaMemcpyBatchAsync */

struct kv_dma_opts {
	unsigned lanes;		/* CUDA streams per kv_dma_stream; 0: 4 */
	unsigned flags;		/* KV_DMA_* */
};

struct kv_dma;
struct kv_dma_stream;
struct kv_dma_pool;

/* Number of CUDA devices; -KV_ENODEV (reason in kv_error_detail())
 * in a build without CUDA, without a driver, or with none present. */
int kv_dma_device_count(int *count);

/* Open CUDA device `device` (or KV_DMA_DEVICE_CPU).  -KV_ENODEV when it
 * is unavailable, unless KV_DMA_CPU_FALLBACK opens the CPU device. */
int kv_dma_open(int device, const struct kv_dma_opts *opts,
		struct kv_dma **out);
void kv_dma_close(struct kv_dma *dma);

/* 1 on the CPU device, 0 on a CUDA device. */
int kv_dma_is_cpu(const struct kv_dma *dma);

/* CUDA device index, or KV_DMA_DEVICE_CPU. */
int kv_dma_device(const struct kv_dma *dma);

/* "cpu" or the CUDA device name ("NVIDIA H100 80GB HBM3"). */
const char *kv_dma_name(const struct kv_dma *dma);

/* The device's PCI bus id ("0000:3b:00.0"); -KV_ENODEV on the CPU. */
int kv_dma_pci_bus_id(const struct kv_dma *dma, char *buf, size_t len);

/* The NUMA node nearest the device (hwloc, by PCI bus id), where its
 * staging memory and I/O workers belong; -KV_ENODEV on the CPU device,
 * -ENOENT where the topology does not say. */
int kv_dma_numa_node(const struct kv_dma *dma, int *node);

/* 1 if copies go through cudaMemcpyBatchAsync, else 0. */
int kv_dma_batched(const struct kv_dma *dma);

/* Pinned host memory (cudaHostAlloc, mapped and portable), 4096-aligned;
 * free with kv_dma_host_free. */
int kv_dma_host_alloc(struct kv_dma *dma, size_t len, void **out);
void kv_dma_host_free(struct kv_dma *dma, void *p);

/* Pin memory we already have (cudaHostRegister), such as kvoffd's
 * shared pool; no-op on the CPU device. */
int kv_dma_register(struct kv_dma *dma, void *p, size_t len);
int kv_dma_unregister(struct kv_dma *dma, void *p);

/* Device memory; free with kv_dma_dev_free. */
int kv_dma_dev_alloc(struct kv_dma *dma, size_t len, void **out);
void kv_dma_dev_free(struct kv_dma *dma, void *p);

/* Fill len bytes of device (or host) memory with byte, synchronously. */
int kv_dma_memset(struct kv_dma *dma, void *p, int byte, size_t len);

/* One synchronous copy between any two kinds of memory. */
int kv_dma_copy(struct kv_dma *dma, void *dst, const void *src, size_t len);

/* A worker's submission queue: `lanes` CUDA streams with an event each. */
int kv_dma_stream_open(struct kv_dma *dma, struct kv_dma_stream **out);
void kv_dma_stream_close(struct kv_dma_stream *s);

struct kv_dma_copy {
	void *dst;
	const void *src;
	size_t len;
};

/* Queue n copies: one cudaMemcpyBatchAsync where available, else one
 * cudaMemcpyAsync each, round-robin over the lanes.  Work queued on s
 * between syncs may run concurrently and in any order; buffers must
 * stay valid until kv_dma_stream_sync. */
int kv_dma_copy_async(struct kv_dma_stream *s, const struct kv_dma_copy *copies,
		      size_t n);

/* Wait for everything queued on s; the first failure is returned. */
int kv_dma_stream_sync(struct kv_dma_stream *s);

/* 0 when everything queued on s is done, -EAGAIN while in flight. */
int kv_dma_stream_query(struct kv_dma_stream *s);

/*
 * Per-layer KV layout: `num_tensors` tensors (one per layer when a
 * block's K and V sit together, or a K plane and a V plane per layer),
 * each holding block b's fragment at b * fragment_bytes.  The contiguous
 * form of a block, as a block file holds it, is the fragments of tensors
 * 0..num_tensors-1 in order: num_tensors * fragment_bytes.
 */
struct kv_dma_frags {
	void *const *tensors;
	unsigned num_tensors;
	size_t fragment_bytes;
};

enum kv_dma_method {
	KV_DMA_COPIES,	/* one DMA copy per fragment */
	KV_DMA_KERNEL,	/* a copy kernel; host buffers must be pinned */
};

/* Gather blocks ids[0..n) from the fragments into contiguous buffers
 * blocks[0..n) (queued on s). */
int kv_dma_gather(struct kv_dma_stream *s, enum kv_dma_method method,
		  const struct kv_dma_frags *frags, const uint64_t *ids,
		  void *const *blocks, size_t n);

/* The reverse: contiguous buffers blocks[i] into block ids[i]'s
 * fragments (queued on s). */
int kv_dma_scatter(struct kv_dma_stream *s, enum kv_dma_method method,
		   const struct kv_dma_frags *frags, const uint64_t *ids,
		   const void *const *blocks, size_t n);

#define KV_DMA_POOL_ON_NODE	(1u << 0) /* place slots on numa_node */
#define KV_DMA_POOL_NEAR_DEVICE	(1u << 1) /* on kv_dma_numa_node() where
					     known, else anywhere */

struct kv_dma_pool_opts {
	size_t slot_bytes;	/* rounded up to 4096 */
	unsigned slots;
	void *mem;		/* pin and carve this (slots times the rounded
				   slot_bytes) instead of allocating */
	unsigned flags;		/* KV_DMA_POOL_* */
	int numa_node;		/* with KV_DMA_POOL_ON_NODE */
};

/* A pinned staging pool of equal slots. */
int kv_dma_pool_create(struct kv_dma *dma, const struct kv_dma_pool_opts *opts,
		       struct kv_dma_pool **out);
void kv_dma_pool_destroy(struct kv_dma_pool *pool);

/* Take a free slot; -EAGAIN when all are in use. */
int kv_dma_pool_get(struct kv_dma_pool *pool, void **slot);

/* Return a slot; -EINVAL if it is not one of pool's slots in use. */
int kv_dma_pool_put(struct kv_dma_pool *pool, void *slot);

size_t kv_dma_pool_slot_bytes(const struct kv_dma_pool *pool);

#ifdef __cplusplus
}
#endif

#endif
