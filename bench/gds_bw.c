/*
 * bench/gds_bw: block files <-> GPU memory through libkv's gds module,
 * cuFile (GPUDirect Storage) against the pinned bounce buffer, for
 * bench/gpu.sh.  Writes N blocks of 2 MiB in the vLLM layout under DIR
 * from device memory, fsync'd, drops them from the page cache, reads
 * them back into poisoned device memory and checks every byte; once by
 * cuFile where it loads, once staged.  One JSON document on stdout.
 *
 *   gds_bw DIR N [LIBRARY]     (LIBRARY: the cuFile to dlopen, default
 *                               libcufile.so.0)
 *
 * Exit: 0 measured (with or without cuFile), 3 failure or mismatch.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include <kv/kv.h>
#include <kv/gds.h>

#define BLOCK_BYTES	(2u << 20)
#define MODEL_DIR	"bench_gds_0123456789ab"

static int fail(const char *what, int err)
{
	fprintf(stderr, "gds_bw: %s: %s%s%s\n", what, kv_strerror(err),
		*kv_error_detail() ? ": " : "", kv_error_detail());
	return 3;
}

static void block_rel(unsigned i, char *rel, size_t len)
{
	char hash[17];

	snprintf(hash, sizeof(hash), "%016x", 0x29000000u + i);
	kv_layout_block_path(MODEL_DIR, 0, 0, hash, rel, len);
}

/* Out of the page cache, so the read measures the storage path. */
static void drop_cached(const char *dir, const char *rel)
{
	char full[4096];
	int fd;

	snprintf(full, sizeof(full), "%s/%s", dir, rel);
	fd = open(full, O_RDONLY);
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

/* N blocks written then read by one path; rates in bytes/s. */
static int measure(struct kv_dma *dma, const char *dir, unsigned n, int staged,
		   const char *library, char *src, char *dst, unsigned char *host,
		   double *wr, double *rd, json_t *doc)
{
	struct kv_gds_opts o = { .library = library,
				 .flags = staged ? KV_GDS_STAGED_ONLY : 0,
				 .io_flags = KV_IO_FSYNC };
	enum kv_gds_path want = staged ? KV_GDS_STAGED : KV_GDS_CUFILE, used;
	unsigned char *check = malloc(BLOCK_BYTES);
	struct kv_gds *g;
	char rel[256];
	int64_t t0;
	int r;

	if (!check)
		return fail("malloc", -ENOMEM);
	r = kv_gds_open(dma, dir, &o, &g);
	if (r < 0) {
		free(check);
		return fail("gds open", r);
	}
	if (!staged) {
		json_object_set_new(doc, "cufile", json_boolean(kv_gds_cufile(g)));
		json_object_set_new(doc, "reason", json_string(kv_gds_reason(g)));
		if (!kv_gds_cufile(g)) {
			kv_gds_close(g);
			free(check);
			return 0;
		}
	}
	t0 = kv_monotonic_ns();
	for (unsigned i = 0; i < n && r == 0; i++) {
		block_rel(i, rel, sizeof(rel));
		r = kv_gds_write(g, rel, src + (size_t)i * BLOCK_BYTES, BLOCK_BYTES, &used);
		if (r == 0 && used != want)
			r = -EPROTO;
	}
	*wr = (double)n * BLOCK_BYTES * 1e9 / (double)(kv_monotonic_ns() - t0);
	for (unsigned i = 0; i < n && r == 0; i++) {
		block_rel(i, rel, sizeof(rel));
		drop_cached(dir, rel);
	}
	if (r == 0)
		r = kv_dma_memset(dma, dst, 0xA5, (size_t)n * BLOCK_BYTES);
	t0 = kv_monotonic_ns();
	for (unsigned i = 0; i < n && r == 0; i++) {
		block_rel(i, rel, sizeof(rel));
		r = kv_gds_read(g, rel, dst + (size_t)i * BLOCK_BYTES, BLOCK_BYTES, &used);
		if (r == 0 && used != want)
			r = -EPROTO;
	}
	*rd = (double)n * BLOCK_BYTES * 1e9 / (double)(kv_monotonic_ns() - t0);
	for (unsigned i = 0; i < n && r == 0; i++) {
		r = kv_dma_copy(dma, check, dst + (size_t)i * BLOCK_BYTES, BLOCK_BYTES);
		if (r == 0 && memcmp(check, host + (size_t)i * BLOCK_BYTES, BLOCK_BYTES)) {
			fprintf(stderr, "gds_bw: %s: block %u read back differs\n",
				staged ? "staged" : "cufile", i);
			kv_gds_close(g);
			free(check);
			return 3;
		}
	}
	kv_gds_close(g);
	free(check);
	return r ? fail(staged ? "staged" : "cufile", r) : 0;
}

int main(int argc, char **argv)
{
	unsigned n = argc == 3 || argc == 4 ? (unsigned)strtoul(argv[2], NULL, 10) : 0;
	const char *library = argc == 4 ? argv[3] : NULL;
	double cw = 0, cr = 0, sw = 0, sr = 0;
	struct kv_dma *dma;
	unsigned char *host;
	char *src = NULL, *dst = NULL;
	json_t *doc;
	int r, rc;

	if (n == 0 || n > 4096) {
		fprintf(stderr, "usage: gds_bw DIR N [LIBRARY] (N: 1..4096 blocks of 2 MiB)\n");
		return 2;
	}
	r = kv_dma_open(0, NULL, &dma);
	if (r < 0)
		return fail("open CUDA device 0", r);
	host = malloc((size_t)n * BLOCK_BYTES);
	doc = json_object();
	if (!host || !doc)
		return fail("malloc", -ENOMEM);
	for (size_t i = 0; i < (size_t)n * BLOCK_BYTES; i++)
		host[i] = (unsigned char)(i * 131 + (i >> 21) * 7);
	r = kv_dma_dev_alloc(dma, (size_t)n * BLOCK_BYTES, (void **)&src);
	if (r == 0)
		r = kv_dma_dev_alloc(dma, (size_t)n * BLOCK_BYTES, (void **)&dst);
	if (r == 0)
		r = kv_dma_copy(dma, src, host, (size_t)n * BLOCK_BYTES);
	rc = r ? fail("device memory", r) : 0;
	if (rc == 0)
		rc = measure(dma, argv[1], n, 0, library, src, dst, host, &cw, &cr, doc);
	if (rc == 0)
		rc = measure(dma, argv[1], n, 1, library, src, dst, host, &sw, &sr, doc);
	if (rc == 0) {
		json_object_set_new(doc, "device", json_string(kv_dma_name(dma)));
		json_object_set_new(doc, "dir", json_string(argv[1]));
		json_object_set_new(doc, "block_bytes", json_integer(BLOCK_BYTES));
		json_object_set_new(doc, "blocks", json_integer(n));
		json_object_set_new(doc, "staged_write_bytes_per_s", json_integer((json_int_t)sw));
		json_object_set_new(doc, "staged_read_bytes_per_s", json_integer((json_int_t)sr));
		if (json_is_true(json_object_get(doc, "cufile"))) {
			json_object_set_new(doc, "cufile_write_bytes_per_s",
					    json_integer((json_int_t)cw));
			json_object_set_new(doc, "cufile_read_bytes_per_s",
					    json_integer((json_int_t)cr));
		}
		json_dumpf(doc, stdout, JSON_SORT_KEYS | JSON_INDENT(1));
		putchar('\n');
		if (fflush(stdout) != 0)
			rc = fail("stdout", -errno);
	}
	json_decref(doc);
	kv_dma_dev_free(dma, src);
	kv_dma_dev_free(dma, dst);
	kv_dma_close(dma);
	free(host);
	return rc;
}
