/* The DMA API on the CPU device, which every build and machine has. */
#include "dma_checks.h"

int main(void)
{
	struct kv_dma *dma;
	struct kv_dma_opts o = { .flags = KV_DMA_CPU_FALLBACK };
	char pci[32];
	int n, r;

	seed_rng();
	if (kv_dma_open(-2, NULL, &dma) != -EINVAL) {
		fprintf(stderr, "device -2 accepted\n");
		return 1;
	}
	/* Without a CUDA device, device 0 is refused with a reason, and the
	 * fallback flag gives the CPU device instead. */
	if (kv_dma_device_count(&n) < 0) {
		r = kv_dma_open(0, NULL, &dma);
		if (r != -KV_ENODEV || !*kv_error_detail()) {
			fprintf(stderr, "open(0) without a device: %d '%s'\n", r,
				kv_error_detail());
			return 1;
		}
		r = kv_dma_open(0, &o, &dma);
		if (r != 0 || !kv_dma_is_cpu(dma)) {
			fprintf(stderr, "CPU fallback not taken: %d\n", r);
			return 1;
		}
		kv_dma_close(dma);
	}
	r = kv_dma_open(KV_DMA_DEVICE_CPU, NULL, &dma);
	if (r < 0) {
		fprintf(stderr, "open cpu: %s\n", kv_strerror(r));
		return 1;
	}
	if (!kv_dma_is_cpu(dma) || kv_dma_device(dma) != KV_DMA_DEVICE_CPU ||
	    strcmp(kv_dma_name(dma), "cpu") || kv_dma_batched(dma) ||
	    kv_dma_pci_bus_id(dma, pci, sizeof(pci)) != -KV_ENODEV ||
	    kv_dma_numa_node(dma, &n) != -KV_ENODEV) {
		fprintf(stderr, "CPU device misdescribed\n");
		return 1;
	}
	check_device(dma);
	kv_dma_close(dma);
	return failures ? 1 : 0;
}
