/*
 * A simulated CUDA device for machines without a GPU: LD_PRELOAD this
 * over libcudart and libkv's CUDA code (lib/gpu/dma_cuda.cu and everything
 * above it) runs against one "device" whose memory is host memory at
 * addresses the host cannot dereference.  What it checks:
 *
 *  - every copy, memset and kernel access lies inside one allocation
 *    (device, pinned, registered) or is plain host memory: a copy that
 *    crosses an allocation's end is cudaErrorInvalidValue;
 *  - host code never touches device memory directly (it would fault);
 *  - registrations pair up, frees name live allocations;
 *  - cudaMemcpyBatchAsync gets well-formed attributes;
 *  - nothing reads results before waiting: work on a stream is queued
 *    until an event or stream sync (or a query) runs it, and freeing
 *    memory that queued work still uses aborts.
 *
 * It checks addresses, bytes and ordering, not timing.  The only
 * kernel it knows is libkv's fragment copy kernel, whose arguments it
 * interprets the way lib/gpu/dma_cuda.cu lays them out.
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

static void check_pending(uintptr_t addr, size_t len);

static cudaError_t drop(void *p, enum kind k)
{
	struct alloc *a;
	char *real = NULL;
	size_t len = 0;

	pthread_mutex_lock(&lock);
	a = find(p);
	if (a && a->addr == (uintptr_t)p && a->kind == k) {
		a->live = 0;
		real = a->real;
		len = a->len;
	}
	pthread_mutex_unlock(&lock);
	if (!real)
		return ret(k == REGISTERED ? cudaErrorHostMemoryNotRegistered
					   : cudaErrorInvalidValue);
	check_pending((uintptr_t)p, len);
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

/*
 * Streams queue their work and run it only when something waits (an
 * event or stream sync, a query, a destroy), so a missing wait shows up
 * as wrong bytes, and freeing memory that queued work still uses
 * aborts.
 */
enum op_kind { OP_COPY, OP_KERNEL, OP_EVENT };

struct event;

struct op {
	enum op_kind kind;
	struct op *next;
	void *dst;			/* OP_COPY */
	const void *src;
	size_t len;
	const uint64_t *tab;		/* OP_KERNEL: frags_kernel's arguments */
	unsigned ntensors;
	size_t n, frag;
	int gather, vec;
	struct event *ev;		/* OP_EVENT */
	unsigned long gen;
};

#define STREAM_MAGIC	0x57
#define EVENT_MAGIC	0xe7

struct stream {
	int magic;
	struct op *head, *tail;
	struct stream *next;
	cudaError_t err;		/* first failure of queued work */
};

struct event {
	int magic;
	struct stream *stream;		/* where it was last recorded */
	unsigned long gen;		/* records so far */
	int done;			/* the last record has been reached */
};

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static struct stream *streams;

static int overlaps(const void *p, size_t len, uintptr_t addr, size_t alen)
{
	uintptr_t a = (uintptr_t)p;

	return p && a < addr + alen && addr < a + (len ? len : 1);
}

static void check_pending(uintptr_t addr, size_t len)
{
	pthread_mutex_lock(&qlock);
	for (struct stream *st = streams; st; st = st->next)
		for (struct op *o = st->head; o; o = o->next)
			if ((o->kind == OP_COPY && (overlaps(o->dst, o->len, addr, len) ||
						    overlaps(o->src, o->len, addr, len))) ||
			    (o->kind == OP_KERNEL && overlaps(o->tab, 8, addr, len))) {
				fprintf(stderr, "cudart mock: memory at %#lx freed while "
					"queued work still uses it\n", (unsigned long)addr);
				abort();
			}
	pthread_mutex_unlock(&qlock);
}

static cudaError_t run_kernel(const struct op *o)
{
	unsigned T = o->ntensors;
	size_t n = o->n, frag = o->frag;
	const uint64_t *t = (const uint64_t *)resolve(o->tab, (T + 2 * n) * sizeof(uint64_t));

	if (!t || (o->vec && frag % 16))
		return cudaErrorIllegalAddress;
	for (size_t i = 0; i < n; i++) {
		for (unsigned j = 0; j < T; j++) {
			char *f = (char *)(uintptr_t)t[j] + t[T + i] * frag;
			char *b = (char *)(uintptr_t)t[T + n + i] + (size_t)j * frag;

			if (!reachable(f) || !reachable(b) ||
			    (o->vec && (((uintptr_t)f | (uintptr_t)b) & 15)) ||
			    (o->gather ? copy(b, f, frag) : copy(f, b, frag)) != cudaSuccess)
				return cudaErrorIllegalAddress;
		}
	}
	return cudaSuccess;
}

/* Run the stream's oldest queued op; 0 when there was none. */
static int run_one(struct stream *st)
{
	struct op *o;
	cudaError_t e = cudaSuccess;

	pthread_mutex_lock(&qlock);
	o = st->head;
	if (o) {
		st->head = o->next;
		if (!st->head)
			st->tail = NULL;
	}
	pthread_mutex_unlock(&qlock);
	if (!o)
		return 0;
	switch (o->kind) {
	case OP_COPY:
		e = copy(o->dst, o->src, o->len);
		break;
	case OP_KERNEL:
		e = run_kernel(o);
		break;
	case OP_EVENT:
		if (o->gen == o->ev->gen)
			o->ev->done = 1;
		break;
	}
	if (e != cudaSuccess && st->err == cudaSuccess)
		st->err = e;
	free(o);
	return 1;
}

static cudaError_t enqueue(struct stream *st, struct op *o)
{
	struct op *q = malloc(sizeof(*q));

	if (!q)
		return ret(cudaErrorMemoryAllocation);
	*q = *o;
	q->next = NULL;
	pthread_mutex_lock(&qlock);
	if (st->tail)
		st->tail->next = q;
	else
		st->head = q;
	st->tail = q;
	pthread_mutex_unlock(&qlock);
	return cudaSuccess;
}

static struct stream *as_stream(cudaStream_t s)
{
	struct stream *st = (struct stream *)s;

	return st && st->magic == STREAM_MAGIC ? st : NULL;
}

static struct event *as_event(cudaEvent_t e)
{
	struct event *ev = (struct event *)e;

	return ev && ev->magic == EVENT_MAGIC ? ev : NULL;
}

static cudaError_t queue_copy(void *dst, const void *src, size_t len, cudaStream_t s)
{
	struct stream *st = as_stream(s);
	struct op o = { .kind = OP_COPY, .dst = dst, .src = src, .len = len };

	if (!st)
		return ret(cudaErrorInvalidResourceHandle);
	if (!dst || !src || !resolve(dst, len) || !resolve(src, len))
		return ret(cudaErrorInvalidValue);
	return enqueue(st, &o);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t len,
			    enum cudaMemcpyKind k, cudaStream_t s)
{
	(void)k;
	return queue_copy(dst, src, len, s);
}

cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs,
				 const size_t *sizes, size_t count,
				 struct cudaMemcpyAttributes *attrs, size_t *idxs,
				 size_t nattrs, cudaStream_t s)
{
	if (!as_stream(s))
		return ret(cudaErrorInvalidResourceHandle);
	if (!count || !nattrs || nattrs > count || idxs[0] != 0)
		return ret(cudaErrorInvalidValue);
	for (size_t i = 0; i < nattrs; i++)
		if (attrs[i].srcAccessOrder == cudaMemcpySrcAccessOrderInvalid ||
		    (i && idxs[i] <= idxs[i - 1]) || idxs[i] >= count)
			return ret(cudaErrorInvalidValue);
	for (size_t i = 0; i < count; i++)
		if (!sizes[i] || !resolve(dsts[i], sizes[i]) || !resolve(srcs[i], sizes[i]))
			return ret(cudaErrorInvalidValue);
	for (size_t i = 0; i < count; i++)
		if (queue_copy(dsts[i], srcs[i], sizes[i], s) != cudaSuccess)
			return last_error;
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	struct stream *st = calloc(1, sizeof(*st));

	(void)flags;
	if (!st)
		return ret(cudaErrorMemoryAllocation);
	st->magic = STREAM_MAGIC;
	pthread_mutex_lock(&qlock);
	st->next = streams;
	streams = st;
	pthread_mutex_unlock(&qlock);
	*s = (cudaStream_t)st;
	return cudaSuccess;
}

static cudaError_t drain(struct stream *st)
{
	cudaError_t e;

	while (run_one(st))
		;
	e = st->err;
	return ret(e);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	struct stream *st = as_stream(s);

	if (!st)
		return ret(cudaErrorInvalidResourceHandle);
	drain(st);
	pthread_mutex_lock(&qlock);
	for (struct stream **p = &streams; *p; p = &(*p)->next)
		if (*p == st) {
			*p = st->next;
			break;
		}
	pthread_mutex_unlock(&qlock);
	st->magic = 0;
	free(st);
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	struct stream *st;

	if (!s)
		return cudaSuccess;
	st = as_stream(s);
	return st ? drain(st) : ret(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	struct event *ev = calloc(1, sizeof(*ev));

	(void)flags;
	if (!ev)
		return ret(cudaErrorMemoryAllocation);
	ev->magic = EVENT_MAGIC;
	ev->done = 1;
	*e = (cudaEvent_t)ev;
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	struct event *ev = as_event(e);

	if (!ev)
		return ret(cudaErrorInvalidResourceHandle);
	/* Queued records of it would touch freed memory: run them first. */
	if (ev->stream && !ev->done)
		drain(ev->stream);
	ev->magic = 0;
	free(ev);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	struct event *ev = as_event(e);
	struct stream *st = as_stream(s);
	struct op o = { .kind = OP_EVENT, .ev = ev };

	if (!ev || !st)
		return ret(cudaErrorInvalidResourceHandle);
	ev->stream = st;
	ev->done = 0;
	o.gen = ++ev->gen;
	return enqueue(st, &o);
}

/* Run the recording stream up to the event. */
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	struct event *ev = as_event(e);

	if (!ev)
		return ret(cudaErrorInvalidResourceHandle);
	while (!ev->done && run_one(ev->stream))
		;
	return ret(ev->stream ? ev->stream->err : cudaSuccess);
}

/* Work advances one op per query, so pollers see it in flight. */
cudaError_t cudaEventQuery(cudaEvent_t e)
{
	struct event *ev = as_event(e);

	if (!ev)
		return ret(cudaErrorInvalidResourceHandle);
	if (!ev->done && ev->stream)
		run_one(ev->stream);
	if (ev->stream && ev->stream->err != cudaSuccess)
		return ret(ev->stream->err);
	return ev->done ? cudaSuccess : cudaErrorNotReady;
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

/* libkv's frags_kernel(tab, ntensors, n, frag, gather, vec), queued
 * with its arguments as dma_cuda.cu passes them. */
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block,
			       void **args, size_t shmem, cudaStream_t s)
{
	struct stream *st = as_stream(s);
	struct op o = {
		.kind = OP_KERNEL,
		.tab = *(const uint64_t **)args[0],
		.ntensors = *(unsigned *)args[1],
		.n = *(size_t *)args[2],
		.frag = *(size_t *)args[3],
		.gather = *(int *)args[4],
		.vec = *(int *)args[5],
	};

	(void)k, (void)shmem;
	if (!st)
		return ret(cudaErrorInvalidResourceHandle);
	if (!grid.x || !block.x)
		return ret(cudaErrorInvalidConfiguration);
	return enqueue(st, &o);
}
