/* The DMA API on CUDA device 0: skipped (77) where there is none. */
#include "dma_checks.h"

static int check_cuda_only(struct kv_dma *dma)
{
	struct kv_dma_stream *s;
	char pci[32], buf[64];
	void *tensors[1], *blocks[1] = { buf }, *p;
	uint64_t id = 0;
	struct kv_dma_frags f = { .tensors = tensors, .num_tensors = 1,
				  .fragment_bytes = 16 };
	int r;

	CHECK(kv_dma_pci_bus_id(dma, pci, sizeof(pci)) == 0 && strlen(pci) >= 12,
	      "pci bus id");
	CHECK(kv_dma_dev_alloc(dma, 4096, &tensors[0]) == 0, "dev_alloc");
	CHECK(kv_dma_stream_open(dma, &s) == 0, "stream_open");
	/* The kernel cannot reach pageable memory and must say so. */
	r = kv_dma_gather(s, KV_DMA_KERNEL, &f, &id, blocks, 1);
	CHECK(r == -EINVAL && strstr(kv_error_detail(), "not device"),
	      "kernel on pageable memory: %d", r);
	/* A CUDA failure is -EIO with the call named. */
	r = kv_dma_dev_alloc(dma, (size_t)1 << 60, &p);
	CHECK(r == -EIO && strstr(kv_error_detail(), "cudaMalloc"),
	      "huge cudaMalloc: %d", r);
	kv_dma_stream_close(s);
	kv_dma_dev_free(dma, tensors[0]);
	return 0;
}

int main(void)
{
	struct kv_dma_opts no_batch = { .flags = KV_DMA_NO_BATCH };
	struct kv_dma *dma;
	int n, r;

	seed_rng();
	if (kv_dma_device_count(&n) < 0) {
		printf("no CUDA device: %s\n", kv_error_detail());
		return 77;
	}
	r = kv_dma_open(0, NULL, &dma);
	if (r < 0) {
		fprintf(stderr, "open device 0: %s: %s\n", kv_strerror(r),
			kv_error_detail());
		return 1;
	}
	printf("device 0: %s, batch API %s\n", kv_dma_name(dma),
	       kv_dma_batched(dma) ? "yes" : "no");
	check_device(dma);
	check_cuda_only(dma);
	kv_dma_close(dma);
	/* The per-copy path over several streams, batch API or not. */
	r = kv_dma_open(0, &no_batch, &dma);
	if (r < 0 || kv_dma_batched(dma)) {
		fprintf(stderr, "open device 0 without batches: %d\n", r);
		return 1;
	}
	check_device(dma);
	kv_dma_close(dma);
	return failures ? 1 : 0;
}
