/* Block files to and from device memory: the staged path on the CPU
 * device, cuFile absent or refused reported as such, and on a CUDA
 * device whichever path it takes, byte for byte. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <kv/kv.h>
#include <kv/gds.h>
#include "check.h"

static int check_reasons(struct kv_dma *dma, const char *root)
{
	struct kv_gds_opts absent = { .library = "libkv-test-absent-cufile.so.0" };
	struct kv_gds_opts staged = { .flags = KV_GDS_STAGED_ONLY };
	struct kv_gds *g;

	CHECK(kv_gds_open(dma, root, &absent, &g) == 0, "open with cuFile absent");
	CHECK(!kv_gds_cufile(g), "cuFile claimed from a missing library");
#ifdef KV_HAVE_CUDA
	CHECK(strstr(kv_gds_reason(g), "libkv-test-absent-cufile.so.0"),
	      "reason '%s' does not name the library", kv_gds_reason(g));
#else
	CHECK(!strcmp(kv_gds_reason(g), "built without CUDA"), "reason '%s'",
	      kv_gds_reason(g));
#endif
	kv_gds_close(g);
	CHECK(kv_gds_open(dma, root, &staged, &g) == 0, "open staged only");
	CHECK(!kv_gds_cufile(g) && strstr(kv_gds_reason(g), "staged"), "reason '%s'",
	      kv_gds_reason(g));
	kv_gds_close(g);
	CHECK(kv_gds_open(dma, "/nonexistent/kv-test", NULL, &g) == -ENOENT,
	      "missing root");
	CHECK(!strcmp(kv_gds_path_name(KV_GDS_CUFILE), "cufile") &&
	      !strcmp(kv_gds_path_name(KV_GDS_STAGED), "staged"), "path names");
	return 0;
}

/* Write a random block from device memory, check the file holds
 * exactly it, read it (whole and tail) back into poisoned device
 * memory and compare. */
static int round_trip(struct kv_gds *g, struct kv_dma *dma, const char *root,
		      const char *rel, size_t len, enum kv_gds_path *path)
{
	unsigned char *want = malloc(len), *got = malloc(len), *file = malloc(len + 1);
	void *dev, *back;
	char full[4096];
	enum kv_gds_path used;
	ssize_t n;
	int fd, r;

	CHECK(want && got && file, "malloc");
	for (size_t i = 0; i < len; i++)
		want[i] = (unsigned char)(rand() >> 7);
	CHECK(kv_dma_dev_alloc(dma, len, &dev) == 0 && kv_dma_dev_alloc(dma, len, &back) == 0,
	      "dev alloc");
	CHECK(kv_dma_copy(dma, dev, want, len) == 0, "to device");
	r = kv_gds_write(g, rel, dev, len, &used);
	CHECK(r == 0, "write %s: %s", rel, kv_strerror(r));
	*path = used;
	snprintf(full, sizeof(full), "%s/%s", root, rel);
	fd = open(full, O_RDONLY);
	CHECK(fd >= 0, "open %s", full);
	n = read(fd, file, len + 1);
	close(fd);
	CHECK(n == (ssize_t)len && memcmp(file, want, len) == 0,
	      "file holds %zd bytes, not the %zu written", n, len);
	CHECK(kv_dma_memset(dma, back, 0xA5, len) == 0, "poison");
	r = kv_gds_read(g, rel, back, len, &used);
	CHECK(r == 0 && used == *path, "read %s: %s via %s", rel, kv_strerror(r),
	      kv_gds_path_name(used));
	CHECK(kv_dma_copy(dma, got, back, len) == 0 && memcmp(got, want, len) == 0,
	      "read back differs (%zu bytes)", len);
	/* The tail, as a reader of n blocks out of a longer file does. */
	CHECK(kv_dma_memset(dma, back, 0xA5, len) == 0, "poison");
	CHECK(kv_gds_read(g, rel, back, len / 3 + 1, &used) == 0, "tail read");
	CHECK(kv_dma_copy(dma, got, back, len / 3 + 1) == 0 &&
	      memcmp(got, want + len - (len / 3 + 1), len / 3 + 1) == 0, "tail differs");
	CHECK(kv_gds_read(g, rel, back, len + 1, &used) == -KV_ESHORT, "over-long read");
	kv_dma_dev_free(dma, dev);
	kv_dma_dev_free(dma, back);
	free(want);
	free(got);
	free(file);
	return 0;
}

/* library: a cuFile to load by path (the simulated one beside the
 * simulated device); NULL: the system's, if any. */
static int check_device(struct kv_dma *dma, const char *root, const char *library)
{
	static const size_t sizes[] = { 1, 5000, 65536, 3 << 20 };
	struct kv_gds_opts opts = { .library = library };
	struct kv_gds *g;
	enum kv_gds_path used;
	char rel[256], hash[17];
	void *dev;
	int r;

	r = kv_gds_open(dma, root, &opts, &g);
	CHECK(r == 0, "gds open: %s", kv_strerror(r));
	if (library && !kv_dma_is_cpu(dma))
		CHECK(kv_gds_cufile(g), "cuFile from %s not taken: %s", library,
		      kv_gds_reason(g));
	printf("%s: %s%s%s\n", kv_dma_name(dma), kv_gds_cufile(g) ? "cuFile" : "staged",
	       kv_gds_cufile(g) ? "" : ": ", kv_gds_reason(g));
	if (kv_dma_is_cpu(dma))
		CHECK(!kv_gds_cufile(g) && kv_gds_reason(g)[0], "cuFile on the CPU device");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		snprintf(hash, sizeof(hash), "%016zx", 0xabc000 + i);
		kv_layout_block_path("org_model_0123456789ab", 0, 0, hash, rel, sizeof(rel));
		if (round_trip(g, dma, root, rel, sizes[i], &used) < 0)
			return -1;
		CHECK(used == (kv_gds_cufile(g) ? KV_GDS_CUFILE : KV_GDS_STAGED),
		      "path %s with cuFile %s", kv_gds_path_name(used),
		      kv_gds_cufile(g) ? "loaded" : "absent");
	}
	CHECK(kv_dma_dev_alloc(dma, 4096, &dev) == 0, "dev alloc");
	snprintf(hash, sizeof(hash), "%016x", 0xdead);
	kv_layout_block_path("org_model_0123456789ab", 0, 0, hash, rel, sizeof(rel));
	CHECK(kv_gds_read(g, rel, dev, 4096, &used) == -ENOENT, "missing block");
	CHECK(kv_gds_read(g, "../outside.bin", dev, 4096, &used) == -KV_EBADPATH,
	      "path outside the layout");
	CHECK(kv_gds_write(g, "x/y.bin", dev, 4096, &used) == -KV_EBADPATH,
	      "write outside the layout");
	kv_dma_dev_free(dma, dev);
	kv_gds_close(g);
	return 0;
}

int main(void)
{
	char root[] = "/tmp/kv-test-gds-XXXXXX", cmd[64];
	struct kv_dma *dma;
	int n;

	srand((unsigned)kv_now_ns());
	if (!mkdtemp(root) || kv_dma_open(KV_DMA_DEVICE_CPU, NULL, &dma) < 0) {
		perror("setup");
		return 1;
	}
	check_reasons(dma, root);
	check_device(dma, root, NULL);
	kv_dma_close(dma);
	if (kv_dma_device_count(&n) == 0) {
		if (kv_dma_open(0, NULL, &dma) < 0) {
			fprintf(stderr, "open device 0: %s\n", kv_error_detail());
			return 1;
		}
		check_device(dma, root, getenv("KV_TEST_CUFILE"));
		kv_dma_close(dma);
	} else {
		printf("no CUDA device (%s): device transfers not checked\n",
		       kv_error_detail());
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return failures ? 1 : 0;
}
