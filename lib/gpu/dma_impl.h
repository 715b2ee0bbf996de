/*
 * Between lib/gpu/dma.c (API, CPU device) and lib/gpu/dma_cuda.cu (the CUDA
 * device, built only with CUDA=1).  Names are kvi_* so the version
 * script keeps them out of libkv.so's exports.
 */
#ifndef KV_DMA_IMPL_H
#define KV_DMA_IMPL_H

#include <stdarg.h>
#include <kv/dma.h>
#include "util/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef KV_HAVE_CUDA
struct kvi_cuda_stream;

/* 1 if this build can call cudaMemcpyBatchAsync. */
int kvi_cuda_has_batch(void);

int kvi_cuda_device_count(int *count);
int kvi_cuda_open(int device, char *name, size_t name_len, char *pci,
		  size_t pci_len);
int kvi_cuda_host_alloc(int device, size_t len, void **out);
void kvi_cuda_host_free(int device, void *p);
int kvi_cuda_register(int device, void *p, size_t len);
int kvi_cuda_unregister(int device, void *p);
int kvi_cuda_dev_alloc(int device, size_t len, void **out);
void kvi_cuda_dev_free(int device, void *p);
int kvi_cuda_memset(int device, void *p, int byte, size_t len);
int kvi_cuda_copy(int device, void *dst, const void *src, size_t len);

int kvi_cuda_stream_open(int device, unsigned lanes,
			 struct kvi_cuda_stream **out);
void kvi_cuda_stream_close(struct kvi_cuda_stream *cs);

/* What copy_async answers, with nothing queued, when a batch is not
 * taken: never by this driver, or not this one (an operand the batch
 * form rejects); the caller goes on with per-copy submissions. */
#define KVI_BATCH_UNSUPPORTED	(-100000)
#define KVI_BATCH_REFUSED	(-100001)

/* batch: use cudaMemcpyBatchAsync where it takes the copies. */
int kvi_cuda_copy_async(struct kvi_cuda_stream *cs,
			const struct kv_dma_copy *copies, size_t n, int batch);

/* The copy kernel for kv_dma_gather (gather=1) and kv_dma_scatter. */
int kvi_cuda_frags_kernel(struct kvi_cuda_stream *cs,
			  const struct kv_dma_frags *frags, const uint64_t *ids,
			  void *const *blocks, size_t n, int gather);

int kvi_cuda_sync(struct kvi_cuda_stream *cs);
int kvi_cuda_query(struct kvi_cuda_stream *cs);
#endif

#ifdef __cplusplus
}
#endif

#endif
