#ifndef KV_GDS_H
#define KV_GDS_H

/*
 * GPUDirect Storage: block files moved straight between storage and
 * device memory by cuFile, which is loaded with dlopen so binaries run
 * where it is absent.  Where it is absent or refuses (no CUDA device,
 * no nvidia-fs, a filesystem it does not support), the staged path runs
 * instead: the io engine into pinned memory, then a DMA copy.  Every
 * call reports the path it took.  A handle belongs to one thread at a
 * time, like kv_io.
 *
 * cuFile writes carry no user.kv.xxh3 checksum and cuFile reads do not
 * verify one (the payload never passes through host memory); staged
 * transfers behave as kv_io_put / kv_io_get_tail.
 */

#include <stddef.h>
#include <kv/dma.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kv_gds_path {
	KV_GDS_CUFILE,		/* storage <-> device memory by cuFile */
	KV_GDS_STAGED,		/* through pinned host memory */
};

#define KV_GDS_STAGED_ONLY	(1u << 0) /* never load cuFile */

struct kv_gds_opts {
	const char *library;	/* dlopen name; NULL: "libcufile.so.0" */
	unsigned flags;		/* KV_GDS_* */
	unsigned io_flags;	/* KV_IO_* for both paths (KV_IO_FSYNC) */
};

struct kv_gds;

/* Open block-file transfers under root for dma's device.  Succeeds
 * without cuFile; kv_gds_cufile() then says 0 and kv_gds_reason() why. */
int kv_gds_open(struct kv_dma *dma, const char *root,
		const struct kv_gds_opts *opts, struct kv_gds **out);
void kv_gds_close(struct kv_gds *g);

/* 1 when cuFile is loaded and its driver open, else 0. */
int kv_gds_cufile(const struct kv_gds *g);

/* Why cuFile is not in use ("libcufile.so.0: cannot open shared object
 * file: No such file or directory"), or "" when it is. */
const char *kv_gds_reason(const struct kv_gds *g);

/* "cufile" or "staged". */
const char *kv_gds_path_name(enum kv_gds_path path);

/* Read the last len bytes of a block file into device memory (as vLLM
 * reads n blocks); -ENOENT when absent, -KV_ESHORT when shorter. */
int kv_gds_read(struct kv_gds *g, const char *relpath, void *dev, size_t len,
		enum kv_gds_path *used);

/* Write len bytes of device memory as a block file, atomically (temp
 * beside the target, then rename). */
int kv_gds_write(struct kv_gds *g, const char *relpath, const void *dev,
		 size_t len, enum kv_gds_path *used);

#ifdef __cplusplus
}
#endif

#endif
