/*
 * The CUDA device behind lib/gpu/dma.c.  Every runtime call is checked; a
 * failure is recorded for kv_error_detail() and returned as -EIO.
 */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <kv/errors.h>
#include "dma_impl.h"

#if CUDART_VERSION >= 12080
#define HAVE_BATCH 1
#else
#define HAVE_BATCH 0
#endif

/* Copies per cudaMemcpyBatchAsync call: bounds the descriptor arrays. */
#define BATCH_MAX	4096
#define KERNEL_THREADS	256
#define KERNEL_GRID_MAX	65535u

struct kvi_cuda_stream {
	int device;
	unsigned lanes;
	unsigned next;			/* round-robin lane for the next copy */
	cudaStream_t *stream;
	cudaEvent_t *done;		/* recorded after each submission */
	unsigned char *pending;		/* lane has work since the last sync */
	/* The copy kernel's tables: filled in pinned memory, then copied. */
	uint64_t *tab_host;
	uint64_t *tab_dev;
	size_t tab_cap;			/* entries */
	cudaEvent_t tab_copied;
	int tab_used;
};

static int fail(const char *call, cudaError_t e)
{
	return kvi_fail(-EIO, "%s: %s (%s)", call, cudaGetErrorString(e),
			cudaGetErrorName(e));
}

#define CK(call) do {							\
	cudaError_t e_ = (call);					\
	if (e_ != cudaSuccess)						\
		return fail(#call, e_);					\
} while (0)

static int use(int device)
{
	CK(cudaSetDevice(device));
	return 0;
}

extern "C" int kvi_cuda_has_batch(void)
{
	return HAVE_BATCH;
}

extern "C" int kvi_cuda_device_count(int *count)
{
	cudaError_t e = cudaGetDeviceCount(count);

	if (e != cudaSuccess) {
		fail("cudaGetDeviceCount", e);
		return -KV_ENODEV;
	}
	return 0;
}

extern "C" int kvi_cuda_open(int device, char *name, size_t name_len,
			     char *pci, size_t pci_len)
{
	cudaDeviceProp prop;

	if (use(device) < 0)
		return -EIO;
	CK(cudaGetDeviceProperties(&prop, device));
	snprintf(name, name_len, "%s", prop.name);
	CK(cudaDeviceGetPCIBusId(pci, (int)pci_len, device));
	/* cudaDeviceGetPCIBusId gives upper-case hex; sysfs and hwloc
	 * write lower case. */
	for (char *c = pci; *c; c++)
		if (*c >= 'A' && *c <= 'F')
			*c = (char)(*c - 'A' + 'a');
	return 0;
}

extern "C" int kvi_cuda_host_alloc(int device, size_t len, void **out)
{
	if (use(device) < 0)
		return -EIO;
	CK(cudaHostAlloc(out, len, cudaHostAllocPortable | cudaHostAllocMapped));
	return 0;
}

extern "C" void kvi_cuda_host_free(int device, void *p)
{
	cudaError_t e;

	if (use(device) < 0)
		return;
	e = cudaFreeHost(p);
	if (e != cudaSuccess)
		fail("cudaFreeHost", e);
}

extern "C" int kvi_cuda_register(int device, void *p, size_t len)
{
	if (use(device) < 0)
		return -EIO;
	CK(cudaHostRegister(p, len, cudaHostRegisterPortable | cudaHostRegisterMapped));
	return 0;
}

extern "C" int kvi_cuda_unregister(int device, void *p)
{
	if (use(device) < 0)
		return -EIO;
	CK(cudaHostUnregister(p));
	return 0;
}

extern "C" int kvi_cuda_dev_alloc(int device, size_t len, void **out)
{
	if (use(device) < 0)
		return -EIO;
	CK(cudaMalloc(out, len));
	return 0;
}

extern "C" void kvi_cuda_dev_free(int device, void *p)
{
	cudaError_t e;

	if (use(device) < 0)
		return;
	e = cudaFree(p);
	if (e != cudaSuccess)
		fail("cudaFree", e);
}

extern "C" int kvi_cuda_memset(int device, void *p, int byte, size_t len)
{
	cudaPointerAttributes a;

	if (use(device) < 0)
		return -EIO;
	CK(cudaPointerGetAttributes(&a, p));
	if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
		/* cudaMemset may return before it is done, and our streams do
		 * not wait for the legacy stream it runs on. */
		CK(cudaMemset(p, byte, len));
		CK(cudaStreamSynchronize(0));
	} else {
		memset(p, byte, len);
	}
	return 0;
}

extern "C" int kvi_cuda_copy(int device, void *dst, const void *src, size_t len)
{
	if (use(device) < 0)
		return -EIO;
	if (len) {
		/* cudaMemcpy returns early for device-to-device copies and
		 * staged pageable ones; the contract is a finished copy. */
		CK(cudaMemcpy(dst, src, len, cudaMemcpyDefault));
		CK(cudaStreamSynchronize(0));
	}
	return 0;
}

extern "C" void kvi_cuda_stream_close(struct kvi_cuda_stream *cs)
{
	if (!cs)
		return;
	if (use(cs->device) == 0) {
		for (unsigned i = 0; i < cs->lanes; i++) {
			if (cs->stream && cs->stream[i])
				cudaStreamSynchronize(cs->stream[i]);
			if (cs->done && cs->done[i])
				cudaEventDestroy(cs->done[i]);
			if (cs->stream && cs->stream[i])
				cudaStreamDestroy(cs->stream[i]);
		}
		if (cs->tab_copied)
			cudaEventDestroy(cs->tab_copied);
		if (cs->tab_host)
			cudaFreeHost(cs->tab_host);
		if (cs->tab_dev)
			cudaFree(cs->tab_dev);
	}
	free(cs->stream);
	free(cs->done);
	free(cs->pending);
	free(cs);
}

extern "C" int kvi_cuda_stream_open(int device, unsigned lanes,
				    struct kvi_cuda_stream **out)
{
	struct kvi_cuda_stream *cs;
	cudaError_t e = cudaSuccess;
	const char *call = "";

	cs = (struct kvi_cuda_stream *)calloc(1, sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	cs->device = device;
	cs->stream = (cudaStream_t *)calloc(lanes, sizeof(*cs->stream));
	cs->done = (cudaEvent_t *)calloc(lanes, sizeof(*cs->done));
	cs->pending = (unsigned char *)calloc(lanes, 1);
	if (!cs->stream || !cs->done || !cs->pending) {
		kvi_cuda_stream_close(cs);
		return -ENOMEM;
	}
	if (use(device) < 0) {
		kvi_cuda_stream_close(cs);
		return -EIO;
	}
	for (unsigned i = 0; i < lanes && e == cudaSuccess; i++) {
		call = "cudaStreamCreateWithFlags";
		e = cudaStreamCreateWithFlags(&cs->stream[i], cudaStreamNonBlocking);
		if (e == cudaSuccess) {
			cs->lanes = i + 1;
			call = "cudaEventCreateWithFlags";
			e = cudaEventCreateWithFlags(&cs->done[i], cudaEventDisableTiming);
		}
	}
	if (e == cudaSuccess) {
		call = "cudaEventCreateWithFlags";
		e = cudaEventCreateWithFlags(&cs->tab_copied, cudaEventDisableTiming);
	}
	if (e != cudaSuccess) {
		int r = fail(call, e);

		kvi_cuda_stream_close(cs);
		return r;
	}
	*out = cs;
	return 0;
}

static int mark_done(struct kvi_cuda_stream *cs, unsigned lane)
{
	CK(cudaEventRecord(cs->done[lane], cs->stream[lane]));
	cs->pending[lane] = 1;
	return 0;
}

#if HAVE_BATCH
/* One cudaMemcpyBatchAsync per BATCH_MAX copies on lane 0.  The
 * signature lost its failIdx argument in CUDA 13. */
static int copy_batch(struct kvi_cuda_stream *cs, const struct kv_dma_copy *c,
		      size_t n)
{
	size_t chunk = n < BATCH_MAX ? n : BATCH_MAX;
	void **dsts = (void **)malloc(chunk * sizeof(*dsts));
	const void **srcs = (const void **)malloc(chunk * sizeof(*srcs));
	size_t *sizes = (size_t *)malloc(chunk * sizeof(*sizes));
	struct cudaMemcpyAttributes attr;
	size_t attr_idx = 0;
	cudaError_t e = cudaSuccess;
	size_t done = 0;
	int submitted = 0, r = 0, rm;

	if (!dsts || !srcs || !sizes) {
		free(dsts);
		free(srcs);
		free(sizes);
		return -ENOMEM;
	}
	memset(&attr, 0, sizeof(attr));
	attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	while (done < n && e == cudaSuccess) {
		size_t k = 0, used = 0;

		/* Empty copies are left out: the batch form wants sizes > 0. */
		for (; used < chunk && done + k < n; k++) {
			if (!c[done + k].len)
				continue;
			dsts[used] = c[done + k].dst;
			srcs[used] = c[done + k].src;
			sizes[used++] = c[done + k].len;
		}
		if (used == 0) {
			done += k;
			continue;
		}
#if CUDART_VERSION >= 13000
		e = cudaMemcpyBatchAsync(dsts, srcs, sizes, used, &attr, &attr_idx, 1,
					 cs->stream[0]);
#else
		{
			size_t fail_idx = 0;

			e = cudaMemcpyBatchAsync(dsts, (void **)srcs, sizes, used, &attr,
						 &attr_idx, 1, &fail_idx, cs->stream[0]);
		}
#endif
		if (e == cudaSuccess) {
			done += k;
			submitted = 1;
		}
	}
	free(dsts);
	free(srcs);
	free(sizes);
	if (e != cudaSuccess) {
		/* Refused before anything was queued: the per-copy form
		 * takes over, and reports any real fault itself. */
		if (!submitted && (e == cudaErrorNotSupported ||
				   e == cudaErrorCallRequiresNewerDriver)) {
			cudaGetLastError();
			return KVI_BATCH_UNSUPPORTED;
		}
		if (!submitted && e == cudaErrorInvalidValue) {
			cudaGetLastError();
			return KVI_BATCH_REFUSED;
		}
		r = fail("cudaMemcpyBatchAsync", e);
	}
	/* Batches queued before a failure must still be waited for. */
	rm = submitted ? mark_done(cs, 0) : 0;
	return r ? r : rm;
}
#endif

extern "C" int kvi_cuda_copy_async(struct kvi_cuda_stream *cs,
				   const struct kv_dma_copy *c, size_t n, int batch)
{
	unsigned used = 0;
	int r = 0;

	if (use(cs->device) < 0)
		return -EIO;
#if HAVE_BATCH
	if (batch && n > 1)
		return copy_batch(cs, c, n);
#else
	(void)batch;
#endif
	for (size_t i = 0; i < n && r == 0; i++) {
		unsigned lane = cs->next;
		cudaError_t e;

		if (!c[i].len)
			continue;
		e = cudaMemcpyAsync(c[i].dst, c[i].src, c[i].len, cudaMemcpyDefault,
				    cs->stream[lane]);
		if (e != cudaSuccess) {
			r = fail("cudaMemcpyAsync", e);
			break;
		}
		cs->next = (cs->next + 1) % cs->lanes;
		if (used < cs->lanes)
			used++;
	}
	/* The lanes just used are the `used` ones before cs->next; what
	 * was queued before a failure must still be waited for. */
	for (unsigned k = 0; k < used; k++) {
		unsigned lane = (cs->next + cs->lanes - 1 - k) % cs->lanes;
		int rm = mark_done(cs, lane);

		if (r == 0)
			r = rm;
	}
	return r;
}

extern "C" int kvi_cuda_sync(struct kvi_cuda_stream *cs)
{
	int r = 0;

	if (use(cs->device) < 0)
		return -EIO;
	for (unsigned i = 0; i < cs->lanes; i++) {
		cudaError_t e;

		if (!cs->pending[i])
			continue;
		e = cudaEventSynchronize(cs->done[i]);
		cs->pending[i] = 0;
		if (e != cudaSuccess && r == 0)
			r = fail("cudaEventSynchronize", e);
	}
	return r;
}

extern "C" int kvi_cuda_query(struct kvi_cuda_stream *cs)
{
	if (use(cs->device) < 0)
		return -EIO;
	for (unsigned i = 0; i < cs->lanes; i++) {
		cudaError_t e;

		if (!cs->pending[i])
			continue;
		e = cudaEventQuery(cs->done[i]);
		if (e == cudaErrorNotReady)
			return -EAGAIN;
		if (e != cudaSuccess)
			return fail("cudaEventQuery", e);
		cs->pending[i] = 0;
	}
	return 0;
}

/*
 * One CUDA block per (block, tensor) fragment, grid-stride.  The table
 * holds the tensor bases, then the block ids, then the contiguous block
 * addresses (device or mapped pinned host memory).
 */
__global__ static void frags_kernel(const uint64_t *tab, unsigned ntensors,
				    size_t n, size_t frag, int gather, int vec)
{
	const uint64_t *tensors = tab;
	const uint64_t *ids = tab + ntensors;
	const uint64_t *blocks = tab + ntensors + n;
	size_t jobs = n * ntensors;

	for (size_t j = blockIdx.x; j < jobs; j += gridDim.x) {
		size_t i = j / ntensors;
		unsigned t = (unsigned)(j % ntensors);
		char *f = (char *)(uintptr_t)tensors[t] + ids[i] * frag;
		char *b = (char *)(uintptr_t)blocks[i] + (size_t)t * frag;
		char *dst = gather ? b : f;
		const char *src = gather ? f : b;

		if (vec) {
			int4 *d4 = (int4 *)dst;
			const int4 *s4 = (const int4 *)src;

			for (size_t k = threadIdx.x; k < frag / 16; k += blockDim.x)
				d4[k] = s4[k];
		} else {
			for (size_t k = threadIdx.x; k < frag; k += blockDim.x)
				dst[k] = src[k];
		}
	}
}

/* The address the device uses for p: itself for device memory, the
 * mapped alias for pinned host memory; pageable memory is refused. */
static int device_view(const void *p, uint64_t *out)
{
	cudaPointerAttributes a;

	CK(cudaPointerGetAttributes(&a, p));
	switch (a.type) {
	case cudaMemoryTypeDevice:
	case cudaMemoryTypeManaged:
		*out = (uint64_t)(uintptr_t)p;
		return 0;
	case cudaMemoryTypeHost:
		if (!a.devicePointer)
			break;
		*out = (uint64_t)(uintptr_t)a.devicePointer;
		return 0;
	default:
		break;
	}
	return kvi_fail(-EINVAL, "copy kernel: %p is not device or mapped pinned memory",
			p);
}

static int tab_reserve(struct kvi_cuda_stream *cs, size_t entries)
{
	if (entries <= cs->tab_cap)
		return 0;
	/* The old tables may still be read by a queued kernel. */
	CK(cudaStreamSynchronize(cs->stream[0]));
	if (cs->tab_host) {
		CK(cudaFreeHost(cs->tab_host));
		cs->tab_host = NULL;
	}
	if (cs->tab_dev) {
		CK(cudaFree(cs->tab_dev));
		cs->tab_dev = NULL;
	}
	cs->tab_cap = 0;
	cs->tab_used = 0;
	CK(cudaHostAlloc((void **)&cs->tab_host, entries * sizeof(uint64_t),
			 cudaHostAllocDefault));
	CK(cudaMalloc((void **)&cs->tab_dev, entries * sizeof(uint64_t)));
	cs->tab_cap = entries;
	return 0;
}

extern "C" int kvi_cuda_frags_kernel(struct kvi_cuda_stream *cs,
				     const struct kv_dma_frags *f,
				     const uint64_t *ids, void *const *blocks,
				     size_t n, int gather)
{
	unsigned T = f->num_tensors;
	size_t entries, jobs;
	int vec = f->fragment_bytes % 16 == 0;
	unsigned grid;
	int r;

	if (n > (SIZE_MAX / sizeof(uint64_t) - T) / 2)
		return -EOVERFLOW;
	entries = T + 2 * n;
	if (use(cs->device) < 0)
		return -EIO;
	r = tab_reserve(cs, entries);
	if (r < 0)
		return r;
	/* The previous table copy must be done before the host side is
	 * rewritten; the device side is ordered by lane 0 itself. */
	if (cs->tab_used)
		CK(cudaEventSynchronize(cs->tab_copied));
	for (unsigned t = 0; t < T; t++) {
		r = device_view(f->tensors[t], &cs->tab_host[t]);
		if (r < 0)
			return r;
		vec &= cs->tab_host[t] % 16 == 0;
	}
	for (size_t i = 0; i < n; i++) {
		cs->tab_host[T + i] = ids[i];
		r = device_view(blocks[i], &cs->tab_host[T + n + i]);
		if (r < 0)
			return r;
		vec &= cs->tab_host[T + n + i] % 16 == 0;
	}
	CK(cudaMemcpyAsync(cs->tab_dev, cs->tab_host, entries * sizeof(uint64_t),
			   cudaMemcpyHostToDevice, cs->stream[0]));
	CK(cudaEventRecord(cs->tab_copied, cs->stream[0]));
	cs->tab_used = 1;
	jobs = n * T;
	grid = jobs < KERNEL_GRID_MAX ? (unsigned)jobs : KERNEL_GRID_MAX;
	/* A launch reports through cudaGetLastError, which also holds the
	 * last failure of any earlier call: clear that first. */
	(void)cudaGetLastError();
	frags_kernel<<<grid, KERNEL_THREADS, 0, cs->stream[0]>>>(
		cs->tab_dev, T, n, f->fragment_bytes, gather, vec);
	CK(cudaGetLastError());
	return mark_done(cs, 0);
}
