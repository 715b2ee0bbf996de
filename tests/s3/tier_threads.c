/*
 * Several threads on one object-store tier at once, as a chain or a
 * server's connector would use it (kv/tier.h: a tier's calls are
 * thread-safe): each puts, reads back, sizes and deletes its own blocks
 * under s3.bats.  Usage: tier_threads s3://BUCKET/PREFIX THREADS BLOCKS
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>

static struct kv_tier *tier;
static unsigned blocks;

static void *worker(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg, i;
	char key[256], hash[17], in[4096], out[4096];
	size_t len;
	uint64_t size;

	for (i = 0; i < blocks; i++) {
		snprintf(hash, sizeof(hash), "%08x%08x", t + 1, i);
		if (kv_layout_block_path("m_0123456789ab", 0, 0, hash, key, sizeof(key)) < 0)
			return "path";
		memset(in, (int)(t * 31 + i), sizeof(in));
		if (kv_tier_put(tier, key, in, sizeof(in)) < 0)
			return "put";
		if (kv_tier_get(tier, key, out, sizeof(out), &len) < 0 || len != sizeof(in) ||
		    memcmp(in, out, len))
			return "get";
		if (kv_tier_size(tier, key, &size) < 0 || size != sizeof(in))
			return "size";
		if (kv_tier_del(tier, key) < 0 || kv_tier_has(tier, key) != -ENOENT)
			return "del";
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t tid[64];
	unsigned n, i;
	int rc, failed = 0;
	void *res;

	if (argc != 4 || (n = (unsigned)atoi(argv[2])) < 1 || n > 64) {
		fprintf(stderr, "usage: tier_threads s3://BUCKET/PREFIX THREADS BLOCKS\n");
		return 2;
	}
	blocks = (unsigned)atoi(argv[3]);
	rc = kv_tier_s3_open(argv[1], NULL, &tier);
	if (rc < 0) {
		fprintf(stderr, "tier_threads: %s: %s\n", kv_strerror(rc), kv_error_detail());
		return 3;
	}
	for (i = 0; i < n; i++)
		pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)i);
	for (i = 0; i < n; i++) {
		pthread_join(tid[i], &res);
		if (res) {
			fprintf(stderr, "tier_threads: thread %u: %s failed\n", i, (char *)res);
			failed = 1;
		}
	}
	kv_tier_close(tier);
	return failed;
}
