/*
 * The GPU tier: the slot store of tier_mem.c in device memory, moved
 * with kv_dma copies.  Only a CUDA kv_dma handle has device memory to
 * offer; builds without CUDA never open one.
 */
#include <errno.h>
#include <kv/dma.h>
#include <kv/errors.h>
#include "tier_impl.h"

int kv_tier_gpu_open(struct kv_dma *dma, const struct kv_tier_gpu_opts *opts,
		     struct kv_tier **out)
{
	struct kvi_tier_slots_opts o;

	if (!dma || !opts)
		return -EINVAL;
	if (kv_dma_is_cpu(dma))
		return -KV_ENODEV;
	o = (struct kvi_tier_slots_opts){
		.kind = "gpu",
		.slot_bytes = opts->slot_bytes,
		.slots = opts->slots,
		.dma = dma,
		.device_memory = 1,
	};
	return kvi_tier_slots_open(&o, out);
}
