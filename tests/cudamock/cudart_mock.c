/*
 * A simulated CUDA device for machines without a GPU: LD_PRELOAD this
 * over libcudart and libkv's CUDA code (lib/dma_cuda.cu and everything
 * above it) runs against one "device" whose memory is host memory at
 * addresses the host cannot dereference.  What it checks:
 *
 *  - every copy, memset and kernel access lies inside one allocation
 *    (device, pinned, registered) or is plain host memory: a copy that
 *    crosses an allocation's end is cudaErrorInvalidValue;
 *  - host code never touches device memory directly (it would fault);
 *  - registrations pair up, frees name live allocations;
 *  - cudaMemcpyBatchAsync gets well-formed attributes.
 *
 * Work runs at submission, so it checks addresses and bytes, not
 * timing.  The only kernel it knows is libkv's fragment copy kernel,
 * whose arguments it interprets the way lib/dma_cuda.cu lays them out.
 */
#include <pthread.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

/* Device addresses are the backing memory moved up by this much: the
 * result is not canonical (or not mapped), so a host dereference faults. */
#define DEVICE_OFFSET	(1ull << 47)
#define MAX_ALLOCS	4096

enum kind { DEVICE, PINNED, REGISTERED };

struct alloc {
	uintptr_t addr;		/* what the program sees */
	char *real;		/* the backing host memory */
	size_t len;
	enum kind kind;
	int live;
};

static struct alloc allocs[MAX_ALLOCS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread cudaError_t last_error;

static cudaError_t ret(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

static struct alloc *find(const void *p)
{
	uintptr_t a = (uintptr_t)p;

	for (int i = 0; i < MAX_ALLOCS; i++)
		if (allocs[i].live && a >= allocs[i].addr &&
		    a < allocs[i].addr + allocs[i].len)
			return &allocs[i];
	return NULL;
}

static cudaError_t add(uintptr_t addr, char *real, size_t len, enum kind k)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (!allocs[i].live) {
			allocs[i] = (struct alloc){ addr, real, len, k, 1 };
			pthread_mutex_unlock(&lock);
			return cudaSuccess;
		}
	}
	pthread_mutex_unlock(&lock);
	return cudaErrorMemoryAllocation;
}

/* Where [p, p+len) really is: inside one allocation, or host memory
 * that no allocation claims.  NULL if it straddles an allocation. */
static char *resolve(const void *p, size_t len)
{
	struct alloc *a;
	char *r = NULL;

	pthread_mutex_lock(&lock);
	a = find(p);
	if (!a)
		r = find((const char *)p + (len ? len - 1 : 0)) ? NULL : (char *)p;
	else if ((uintptr_t)p + len <= a->addr + a->len)
		r = a->real + ((uintptr_t)p - a->addr);
	pthread_mutex_unlock(&lock);
	/* Device addresses that miss every allocation are wild. */
	if (!a && (uintptr_t)p >= DEVICE_OFFSET)
		return NULL;
	return r;
}

/* The kernel reaches only device and pinned memory, never pageable. */
static int reachable(const void *p)
{
	struct alloc *a;

	pthread_mutex_lock(&lock);
	a = find(p);
	pthread_mutex_unlock(&lock);
	return a != NULL;
}

static cudaError_t copy(void *dst, const void *src, size_t len)
{
	char *d = resolve(dst, len), *s = resolve(src, len);

	if (!d || !s || !dst || !src)
		return ret(cudaErrorInvalidValue);
	memmove(d, s, len);
	return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = 1;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	return ret(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	if (device != 0)
		return ret(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "kvtools simulated GPU");
	return cudaSuccess;
}

/* A display, storage or network PCI device of this machine (the kinds
 * hwloc keeps), so NUMA lookups of the simulated GPU find it. */
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int device)
{
	DIR *d = opendir("/sys/bus/pci/devices");
	struct dirent *e;
	char id[256] = "0000:00:00.0";

	if (device != 0)
		return ret(cudaErrorInvalidDevice);
	while (d && (e = readdir(d))) {
		char path[320];
		unsigned cls = 0;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%x", &cls) == 1 && cls >> 16 >= 1 && cls >> 16 <= 3) {
			snprintf(id, sizeof(id), "%s", e->d_name);
			fclose(f);
			break;
		}
		fclose(f);
	}
	snprintf(buf, (size_t)len, "%s", id);
	if (d)
		closedir(d);
	return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "simulated device error";
}

const char *cudaGetErrorName(cudaError_t e)
{
	static __thread char name[32];

	snprintf(name, sizeof(name), "cudaError %d", (int)e);
	return name;
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	last_error = cudaSuccess;
	return e;
}

cudaError_t cudaMalloc(void **p, size_t len)
{
	char *real = len < (1ull << 40) ? malloc(len ? len : 1) : NULL;

	if (!real)
		return ret(cudaErrorMemoryAllocation);
	memset(real, 0x5c, len);
	*p = (void *)((uintptr_t)real + DEVICE_OFFSET);
	if (add((uintptr_t)*p, real, len, DEVICE) != cudaSuccess) {
		free(real);
		return ret(cudaErrorMemoryAllocation);
	}
	return cudaSuccess;
}

static cudaError_t drop(void *p, enum kind k)
{
	struct alloc *a;
	char *real = NULL;

	pthread_mutex_lock(&lock);
	a = find(p);
	if (a && a->addr == (uintptr_t)p && a->kind == k) {
		a->live = 0;
		real = a->real;
	}
	pthread_mutex_unlock(&lock);
	if (!real)
		return ret(k == REGISTERED ? cudaErrorHostMemoryNotRegistered
					   : cudaErrorInvalidValue);
	if (k != REGISTERED)
		free(real);
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	return p ? drop(p, DEVICE) : cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t len, unsigned flags)
{
	void *m;

	(void)flags;
	if (posix_memalign(&m, 4096, len ? len : 1))
		return ret(cudaErrorMemoryAllocation);
	if (add((uintptr_t)m, m, len, PINNED) != cudaSuccess) {
		free(m);
		return ret(cudaErrorMemoryAllocation);
	}
	*p = m;
	return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
	return drop(p, PINNED);
}

cudaError_t cudaHostRegister(void *p, size_t len, unsigned flags)
{
	(void)flags;
	if (!p || !len)
		return ret(cudaErrorInvalidValue);
	pthread_mutex_lock(&lock);
	if (find(p) || find((char *)p + len - 1)) {
		pthread_mutex_unlock(&lock);
		return ret(cudaErrorHostMemoryAlreadyRegistered);
	}
	pthread_mutex_unlock(&lock);
	return add((uintptr_t)p, p, len, REGISTERED);
}

cudaError_t cudaHostUnregister(void *p)
{
	return drop(p, REGISTERED);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *at, const void *p)
{
	struct alloc *a;

	memset(at, 0, sizeof(*at));
	pthread_mutex_lock(&lock);
	a = find(p);
	if (!a) {
		at->type = cudaMemoryTypeUnregistered;
	} else if (a->kind == DEVICE) {
		at->type = cudaMemoryTypeDevice;
		at->devicePointer = (void *)p;
	} else {
		at->type = cudaMemoryTypeHost;
		at->devicePointer = (void *)p;
		at->hostPointer = (void *)p;
	}
	pthread_mutex_unlock(&lock);
	return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int byte, size_t len)
{
	char *r = resolve(p, len);
	struct alloc *a;

	pthread_mutex_lock(&lock);
	a = find(p);
	pthread_mutex_unlock(&lock);
	if (!r || !a || a->kind != DEVICE)
		return ret(cudaErrorInvalidValue);
	memset(r, byte, len);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t len, enum cudaMemcpyKind k)
{
	(void)k;
	return copy(dst, src, len);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t len,
			    enum cudaMemcpyKind k, cudaStream_t s)
{
	(void)k;
	if (!s)
		return ret(cudaErrorInvalidValue);
	return copy(dst, src, len);
}

cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs,
				 const size_t *sizes, size_t count,
				 struct cudaMemcpyAttributes *attrs, size_t *idxs,
				 size_t nattrs, cudaStream_t s)
{
	if (!s || !count || !nattrs || nattrs > count || idxs[0] != 0)
		return ret(cudaErrorInvalidValue);
	for (size_t i = 0; i < nattrs; i++)
		if (attrs[i].srcAccessOrder == cudaMemcpySrcAccessOrderInvalid ||
		    (i && idxs[i] <= idxs[i - 1]) || idxs[i] >= count)
			return ret(cudaErrorInvalidValue);
	for (size_t i = 0; i < count; i++)
		if (!sizes[i] || !resolve(dsts[i], sizes[i]) || !resolve(srcs[i], sizes[i]))
			return ret(cudaErrorInvalidValue);
	for (size_t i = 0; i < count; i++)
		copy(dsts[i], srcs[i], sizes[i]);
	return cudaSuccess;
}

struct token {
	int magic;
};

#define STREAM_MAGIC	0x57
#define EVENT_MAGIC	0xe7

static cudaError_t make(void **out, int magic)
{
	struct token *t = malloc(sizeof(*t));

	if (!t)
		return ret(cudaErrorMemoryAllocation);
	t->magic = magic;
	*out = t;
	return cudaSuccess;
}

static cudaError_t check(const void *p, int magic)
{
	const struct token *t = p;

	return ret(t && t->magic == magic ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	return make((void **)s, STREAM_MAGIC);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	cudaError_t e = check(s, STREAM_MAGIC);

	if (e == cudaSuccess)
		free(s);
	return e;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	return s ? check(s, STREAM_MAGIC) : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	(void)flags;
	return make((void **)e, EVENT_MAGIC);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	cudaError_t r = check(e, EVENT_MAGIC);

	if (r == cudaSuccess)
		free(e);
	return r;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	cudaError_t r = check(e, EVENT_MAGIC);

	return r == cudaSuccess ? check(s, STREAM_MAGIC) : r;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	return check(e, EVENT_MAGIC);
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	return check(e, EVENT_MAGIC);
}

/* Kernel registration and launch, as nvcc's generated code calls them. */
static char fatbin_handle;

void **__cudaRegisterFatBinary(void *fatbin)
{
	(void)fatbin;
	return (void **)&fatbin_handle;
}

void __cudaRegisterFatBinaryEnd(void **h)
{
	(void)h;
}

void __cudaUnregisterFatBinary(void **h)
{
	(void)h;
}

void __cudaRegisterFunction(void **h, const char *host_fun, char *dev_fun,
			    const char *name, int limit, uint3 *tid, uint3 *bid,
			    dim3 *bdim, dim3 *gdim, int *wsize)
{
	(void)h, (void)host_fun, (void)dev_fun, (void)name, (void)limit;
	(void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
}

static __thread struct {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
} launch;

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem,
				     struct CUstream_st *stream)
{
	launch.grid = grid;
	launch.block = block;
	launch.shmem = shmem;
	launch.stream = stream;
	return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem,
				       void *stream)
{
	*grid = launch.grid;
	*block = launch.block;
	*shmem = launch.shmem;
	*(cudaStream_t *)stream = launch.stream;
	return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *fun)
{
	*k = (cudaKernel_t)fun;
	return cudaSuccess;
}

/* libkv's frags_kernel(tab, ntensors, n, frag, gather, vec), run on the
 * CPU with every address checked like a copy. */
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block,
			       void **args, size_t shmem, cudaStream_t s)
{
	const uint64_t *tab = *(const uint64_t **)args[0];
	unsigned T = *(unsigned *)args[1];
	size_t n = *(size_t *)args[2], frag = *(size_t *)args[3];
	int gather = *(int *)args[4], vec = *(int *)args[5];
	const uint64_t *t;

	(void)k, (void)shmem;
	if (check(s, STREAM_MAGIC) != cudaSuccess || !grid.x || !block.x)
		return ret(cudaErrorInvalidConfiguration);
	t = (const uint64_t *)resolve(tab, (T + 2 * n) * sizeof(uint64_t));
	if (!t || (vec && frag % 16))
		return ret(cudaErrorIllegalAddress);
	for (size_t i = 0; i < n; i++) {
		for (unsigned j = 0; j < T; j++) {
			char *f = (char *)(uintptr_t)t[j] + t[T + i] * frag;
			char *b = (char *)(uintptr_t)t[T + n + i] + (size_t)j * frag;

			if (!reachable(f) || !reachable(b) ||
			    (vec && (((uintptr_t)f | (uintptr_t)b) & 15)) ||
			    (gather ? copy(b, f, frag) : copy(f, b, frag)) != cudaSuccess)
				return ret(cudaErrorIllegalAddress);
		}
	}
	return cudaSuccess;
}
