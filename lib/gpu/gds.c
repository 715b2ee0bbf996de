/*
 * GPUDirect Storage through a dlopen'd cuFile, with the staged path
 * (kv_io + pinned memory + DMA copy) wherever cuFile cannot serve.  The
 * few cuFile declarations needed are repeated here, ABI-exact, so that
 * neither the build nor the binary needs cufile.h or libcufile.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#ifdef KV_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#include <kv/errors.h>
#include <kv/gds.h>
#include <kv/io.h>
#include <kv/layout.h>

#define DEFAULT_LIBRARY		"libcufile.so.0"
#define CUFILE_HANDLE_FD	1	/* CU_FILE_HANDLE_TYPE_OPAQUE_FD */

struct cufile_error {
	int err;		/* CUfileOpError; 0 is success */
	int cu_err;		/* CUresult */
};

struct cufile_descr {
	int type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
};

struct cufile {
	void *lib;
	struct cufile_error (*driver_open)(void);
	struct cufile_error (*driver_close)(void);
	struct cufile_error (*handle_register)(void **fh, struct cufile_descr *d);
	void (*handle_deregister)(void *fh);
	ssize_t (*read)(void *fh, void *dev, size_t size, off_t file_off,
			off_t dev_off);
	ssize_t (*write)(void *fh, const void *dev, size_t size, off_t file_off,
			 off_t dev_off);
};

struct kv_gds {
	struct kv_dma *dma;
	struct kv_io *io;
	int rootfd;
	unsigned io_flags;
	struct cufile cf;
	int cufile;		/* cf is loaded and the driver open */
	char reason[256];
	struct kv_dma_pool *stage_pool;	/* one slot, near the device */
	void *stage;
	size_t stage_cap;
};

const char *kv_gds_path_name(enum kv_gds_path path)
{
	return path == KV_GDS_CUFILE ? "cufile" : "staged";
}

int kv_gds_cufile(const struct kv_gds *g)
{
	return g->cufile;
}

const char *kv_gds_reason(const struct kv_gds *g)
{
	return g->reason;
}

#ifdef KV_HAVE_CUDA
/* cuFile works on the calling thread's current device. */
static int use_device(struct kv_gds *g)
{
	return cudaSetDevice(kv_dma_device(g->dma)) == cudaSuccess ? 0 : -EIO;
}

static void *sym(struct kv_gds *g, const char *name)
{
	void *p = dlsym(g->cf.lib, name);

	if (!p && !g->reason[0])
		snprintf(g->reason, sizeof(g->reason), "cuFile library lacks %s",
			 name);
	return p;
}

static void load_cufile(struct kv_gds *g, const char *library)
{
	struct cufile_error e;
	void *close_v2;

	g->cf.lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
	if (!g->cf.lib) {
		snprintf(g->reason, sizeof(g->reason), "%s", dlerror());
		return;
	}
	if (kv_dma_is_cpu(g->dma)) {
		snprintf(g->reason, sizeof(g->reason), "no CUDA device");
		goto unload;
	}
	*(void **)&g->cf.driver_open = sym(g, "cuFileDriverOpen");
	/* cufile.h maps cuFileDriverClose to the _v2 entry point. */
	close_v2 = dlsym(g->cf.lib, "cuFileDriverClose_v2");
	*(void **)&g->cf.driver_close = close_v2 ? close_v2 : sym(g, "cuFileDriverClose");
	*(void **)&g->cf.handle_register = sym(g, "cuFileHandleRegister");
	*(void **)&g->cf.handle_deregister = sym(g, "cuFileHandleDeregister");
	*(void **)&g->cf.read = sym(g, "cuFileRead");
	*(void **)&g->cf.write = sym(g, "cuFileWrite");
	if (g->reason[0])
		goto unload;
	if (use_device(g) < 0) {
		snprintf(g->reason, sizeof(g->reason), "cudaSetDevice failed");
		goto unload;
	}
	e = g->cf.driver_open();
	if (e.err != 0) {
		snprintf(g->reason, sizeof(g->reason),
			 "cuFileDriverOpen: cuFile error %d, CUDA error %d", e.err,
			 e.cu_err);
		goto unload;
	}
	g->cufile = 1;
	return;
unload:
	dlclose(g->cf.lib);
	g->cf.lib = NULL;
}
#endif

int kv_gds_open(struct kv_dma *dma, const char *root,
		const struct kv_gds_opts *opts, struct kv_gds **out)
{
	/* REPLACE: kv_gds_write writes the block it is given, as documented. */
	struct kv_io_opts io_opts = { .flags = (opts ? opts->io_flags : 0) | KV_IO_REPLACE };
	struct kv_gds *g;
	int r;

	if (!dma || !root)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->dma = dma;
	g->io_flags = io_opts.flags;
	g->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (g->rootfd < 0) {
		r = -errno;
		free(g);
		return r;
	}
	r = kv_io_open(root, &io_opts, &g->io);
	if (r < 0) {
		close(g->rootfd);
		free(g);
		return r;
	}
	if (opts && (opts->flags & KV_GDS_STAGED_ONLY))
		snprintf(g->reason, sizeof(g->reason), "staged path requested");
	else
#ifdef KV_HAVE_CUDA
		load_cufile(g, opts && opts->library ? opts->library : DEFAULT_LIBRARY);
#else
		snprintf(g->reason, sizeof(g->reason), "built without CUDA");
#endif
	*out = g;
	return 0;
}

void kv_gds_close(struct kv_gds *g)
{
	if (!g)
		return;
	if (g->cufile) {
		g->cf.driver_close();
		dlclose(g->cf.lib);
	}
	kv_dma_pool_destroy(g->stage_pool);
	kv_io_close(g->io);
	close(g->rootfd);
	free(g);
}

/* Pinned staging on the GPU's NUMA node, grown to the largest block. */
static int stage_reserve(struct kv_gds *g, size_t len)
{
	struct kv_dma_pool_opts o = {
		.slot_bytes = len ? len : 1,
		.slots = 1,
		.flags = KV_DMA_POOL_NEAR_DEVICE,
	};
	struct kv_dma_pool *pool;
	void *p;
	int r;

	if (len <= g->stage_cap && g->stage)
		return 0;
	r = kv_dma_pool_create(g->dma, &o, &pool);
	if (r < 0)
		return r;
	r = kv_dma_pool_get(pool, &p);
	if (r < 0) {
		kv_dma_pool_destroy(pool);
		return r;
	}
	kv_dma_pool_destroy(g->stage_pool);
	g->stage_pool = pool;
	g->stage = p;
	g->stage_cap = kv_dma_pool_slot_bytes(pool);
	return 0;
}

static int staged_read(struct kv_gds *g, const char *relpath, void *dev,
		       size_t len)
{
	int r = stage_reserve(g, len);

	if (r == 0)
		r = kv_io_get_tail(g->io, relpath, g->stage, len);
	if (r == 0)
		r = kv_dma_copy(g->dma, dev, g->stage, len);
	return r;
}

static int staged_write(struct kv_gds *g, const char *relpath, const void *dev,
			size_t len)
{
	int r = stage_reserve(g, len);

	if (r == 0)
		r = kv_dma_copy(g->dma, g->stage, dev, len);
	if (r == 0)
		r = kv_io_put(g->io, relpath, g->stage, len);
	return r;
}

#ifdef KV_HAVE_CUDA
/* O_DIRECT where the filesystem takes it; cuFile copes either way. */
static int open_direct(int rootfd, const char *rel, int flags)
{
	int fd = openat(rootfd, rel, flags | O_DIRECT | O_CLOEXEC, 0644);

	if (fd < 0 && errno == EINVAL)
		fd = openat(rootfd, rel, flags | O_CLOEXEC, 0644);
	return fd < 0 ? -errno : fd;
}

/* Move len bytes between fd at off and dev with cuFile; -EIO if it
 * fails (nothing else is known about why). */
static int cufile_xfer(struct kv_gds *g, int fd, void *dev, size_t len,
		       off_t off, int write)
{
	struct cufile_descr d = { .type = CUFILE_HANDLE_FD, .handle.fd = fd };
	struct cufile_error e;
	void *fh = NULL;
	size_t done = 0;

	if (use_device(g) < 0)
		return -EIO;
	e = g->cf.handle_register(&fh, &d);
	if (e.err != 0)
		return -EIO;
	while (done < len) {
		ssize_t n = write ? g->cf.write(fh, dev, len - done, off + (off_t)done,
						(off_t)done)
				  : g->cf.read(fh, dev, len - done, off + (off_t)done,
					       (off_t)done);
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	g->cf.handle_deregister(fh);
	return done == len ? 0 : -EIO;
}

/* 0 done by cuFile, 1 when the staged path must take over, -errno. */
static int cufile_read(struct kv_gds *g, const char *relpath, void *dev,
		       size_t len)
{
	struct stat st;
	int fd = open_direct(g->rootfd, relpath, O_RDONLY), r;

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		r = -errno;
	} else if ((uint64_t)st.st_size < len) {
		r = -KV_ESHORT;
	} else {
		r = cufile_xfer(g, fd, dev, len, st.st_size - (off_t)len, 0);
		if (r == -EIO)
			r = 1;
	}
	close(fd);
	if (r == 0 && !(g->io_flags & KV_IO_NO_TOUCH))
		kv_io_touch(g->io, relpath);
	return r;
}

static int mkdir_parents(int rootfd, const char *relpath)
{
	char dir[PATH_MAX];
	size_t n = strlen(relpath);

	if (n >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, relpath, n + 1);
	for (char *c = dir; *c; c++) {
		if (*c != '/')
			continue;
		*c = '\0';
		if (mkdirat(rootfd, dir, 0777) < 0 && errno != EEXIST)
			return -errno;
		*c = '/';
	}
	return 0;
}

static int cufile_write(struct kv_gds *g, const char *relpath, const void *dev,
			size_t len)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	const char *slash = strrchr(relpath, '/');
	size_t dlen = slash ? (size_t)(slash - relpath) : 0;
	int fd, r, dfd;

	if (!slash || dlen >= sizeof(dir))
		return -KV_EBADPATH;
	memcpy(dir, relpath, dlen);
	dir[dlen] = '\0';
	r = mkdir_parents(g->rootfd, relpath);
	if (r < 0)
		return r;
	memcpy(tmp, relpath, dlen + 1);
	r = kv_layout_temp_name(slash + 1, tmp + dlen + 1, sizeof(tmp) - dlen - 1);
	if (r < 0)
		return r;
	fd = open_direct(g->rootfd, tmp, O_WRONLY | O_CREAT | O_EXCL);
	if (fd < 0)
		return fd;
	r = cufile_xfer(g, fd, (void *)(uintptr_t)dev, len, 0, 1);
	if (r == 0 && (g->io_flags & KV_IO_FSYNC) && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(g->rootfd, tmp, g->rootfd, relpath) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(g->rootfd, tmp, 0);
		return r == -EIO ? 1 : r;
	}
	if (g->io_flags & KV_IO_FSYNC) {
		dfd = openat(g->rootfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0)
			return -errno;
		r = fsync(dfd) < 0 ? -errno : 0;
		close(dfd);
	}
	return r;
}
#endif

int kv_gds_read(struct kv_gds *g, const char *relpath, void *dev, size_t len,
		enum kv_gds_path *used)
{
	struct kv_block_ref ref;
	int r = kv_layout_block_parse(relpath, &ref);

	if (r < 0)
		return r;
	if (!dev || !len)
		return -EINVAL;
#ifdef KV_HAVE_CUDA
	if (g->cufile) {
		r = cufile_read(g, relpath, dev, len);
		if (r <= 0) {
			if (r == 0 && used)
				*used = KV_GDS_CUFILE;
			return r;
		}
	}
#endif
	r = staged_read(g, relpath, dev, len);
	if (r == 0 && used)
		*used = KV_GDS_STAGED;
	return r;
}

int kv_gds_write(struct kv_gds *g, const char *relpath, const void *dev,
		 size_t len, enum kv_gds_path *used)
{
	struct kv_block_ref ref;
	int r = kv_layout_block_parse(relpath, &ref);

	if (r < 0)
		return r;
	if (!dev && len)
		return -EINVAL;
#ifdef KV_HAVE_CUDA
	if (g->cufile && len) {
		r = cufile_write(g, relpath, dev, len);
		if (r <= 0) {
			if (r == 0 && used)
				*used = KV_GDS_CUFILE;
			return r;
		}
	}
#endif
	r = staged_write(g, relpath, dev, len);
	if (r == 0 && used)
		*used = KV_GDS_STAGED;
	return r;
}
