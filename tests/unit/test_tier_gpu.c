/* GPU -> CPU -> file -> CPU -> GPU: blocks put in a small GPU tier
 * spill through a pinned CPU tier to files and come back up byte for
 * byte.  Skipped (77) without a CUDA device. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <kv/kv.h>
#include <kv/tier.h>

#define BLOCK	(256 * 1024)
#define NBLOCKS	10

static int failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);		\
		fprintf(stderr, __VA_ARGS__);				\
		fprintf(stderr, " (%s)\n", kv_error_detail());	\
		failures++;						\
		return -1;						\
	}								\
} while (0)

static char keys[NBLOCKS][256];
static unsigned char *data[NBLOCKS];

static int run(struct kv_dma *dma, const char *root)
{
	struct kv_tier_gpu_opts go = { .slot_bytes = BLOCK, .slots = 2 };
	struct kv_tier_mem_opts mo = { .slot_bytes = BLOCK, .slots = 3, .dma = dma };
	struct kv_tier *gpu, *mem, *file;
	struct kv_tier_stat gs, ms;
	unsigned char *buf = malloc(BLOCK);
	size_t len;
	int r;

	CHECK(buf, "malloc");
	r = kv_tier_gpu_open(dma, &go, &gpu);
	CHECK(r == 0, "gpu tier: %s", kv_strerror(r));
	CHECK(kv_tier_mem_open(&mo, &mem) == 0, "mem tier");
	CHECK(kv_tier_file_open(root, NULL, &file) == 0, "file tier");
	CHECK(kv_tier_chain(gpu, mem, KV_TIER_SPILL | KV_TIER_PROMOTE) == 0 &&
	      kv_tier_chain(mem, file, KV_TIER_SPILL | KV_TIER_PROMOTE) == 0, "chain");
	for (int i = 0; i < NBLOCKS; i++) {
		r = kv_tier_put(gpu, keys[i], data[i], BLOCK);
		CHECK(r == 0, "put %d: %s", i, kv_strerror(r));
	}
	/* 2 on the GPU, 3 in CPU memory, the 5 oldest in files. */
	for (int i = 0; i < NBLOCKS - 5; i++)
		CHECK(kv_tier_has(file, keys[i]) == 0, "block %d not in files", i);
	/* Newest first: 2 hits on the GPU, then 8 read up from below. */
	for (int i = NBLOCKS - 1; i >= 0; i--) {
		memset(buf, 0xA5, BLOCK);
		r = kv_tier_get(gpu, keys[i], buf, BLOCK, &len);
		CHECK(r == 0 && len == BLOCK, "get %d: %s", i, kv_strerror(r));
		CHECK(memcmp(buf, data[i], BLOCK) == 0, "block %d differs", i);
	}
	CHECK(kv_tier_stat(gpu, &gs) == 0 && kv_tier_stat(mem, &ms) == 0, "stat");
	CHECK(!strcmp(gs.kind, "gpu") && gs.blocks == 2 && gs.promotions == 8,
	      "gpu tier: %llu blocks, %llu promotions", (unsigned long long)gs.blocks,
	      (unsigned long long)gs.promotions);
	kv_tier_close(gpu);
	kv_tier_close(mem);
	kv_tier_close(file);
	free(buf);
	return 0;
}

int main(void)
{
	char root[] = "/tmp/kv-test-tier-gpu-XXXXXX", cmd[64];
	struct kv_dma *dma;
	int n;

	if (kv_dma_device_count(&n) < 0) {
		printf("no CUDA device: %s\n", kv_error_detail());
		return 77;
	}
	if (kv_dma_open(0, NULL, &dma) < 0 || !mkdtemp(root)) {
		fprintf(stderr, "open device 0: %s\n", kv_error_detail());
		return 1;
	}
	for (int i = 0; i < NBLOCKS; i++) {
		char hash[17];

		snprintf(hash, sizeof(hash), "%016llx", 0xfeed0000ull + (unsigned)i);
		kv_layout_block_path("org_model_0123456789ab", 0, 1, hash, keys[i],
				     sizeof(keys[i]));
		data[i] = malloc(BLOCK);
		if (!data[i])
			return 1;
		for (int k = 0; k < BLOCK; k++)
			data[i][k] = (unsigned char)(k * 31 + i * 17 + (k >> 8));
	}
	run(dma, root);
	kv_dma_close(dma);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return failures ? 1 : 0;
}
