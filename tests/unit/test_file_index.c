/* The file tier index: LRU order through puts, touches and removals,
 * lookups that survive removals in the probe chains, the bytes of blocks
 * marked moving, and a scan of a root ordered by last use. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <kv/kv.h>
#include "check.h"

#define MANY	5000	/* past the first table and entry array sizes */

static void key(unsigned i, char *out, size_t cap)
{
	char hash[17];

	snprintf(hash, sizeof(hash), "%016llx", 0xfeed0000ull + i);
	kv_layout_block_path("org_model_0123456789ab", 0, 0, hash, out, cap);
}

/* The order oldest first must be want[0..n-1]. */
static int expect_order(const struct kv_file_index *x, const unsigned *want, unsigned n)
{
	uint32_t id = kv_file_index_oldest(x);
	char k[256];

	for (unsigned i = 0; i < n; i++, id = kv_file_index_newer(x, id)) {
		key(want[i], k, sizeof(k));
		CHECK(id != KV_FILE_INDEX_NONE, "order ends at %u of %u", i, n);
		CHECK(!strcmp(kv_file_index_path(x, id), k), "place %u: %s, want %s", i,
		      kv_file_index_path(x, id), k);
	}
	CHECK(id == KV_FILE_INDEX_NONE, "order longer than %u", n);
	return 0;
}

static int check_order(void)
{
	static const unsigned after_touch[] = { 1, 2, 0, 3 };
	static const unsigned after_remove[] = { 2, 0, 3, 1 };
	struct kv_file_index *x;
	struct kv_file_index_usage u;
	char k[256];
	uint32_t id;

	CHECK(kv_file_index_new(&x) == 0, "new");
	key(0, k, sizeof(k));
	CHECK(kv_file_index_find(x, k) == KV_FILE_INDEX_NONE, "found in an empty index");
	for (unsigned i = 0; i < 4; i++) {
		key(i, k, sizeof(k));
		CHECK(kv_file_index_put(x, k, 100 + i) == 0, "put %u", i);
	}
	key(0, k, sizeof(k));
	id = kv_file_index_find(x, k);
	CHECK(id != KV_FILE_INDEX_NONE && kv_file_index_size(x, id) == 100, "find 0");
	kv_file_index_touch(x, id);
	key(3, k, sizeof(k));
	kv_file_index_touch(x, kv_file_index_find(x, k));
	CHECK(expect_order(x, after_touch, 4) == 0, "after touches");
	/* A put of a present block refreshes it and its size. */
	key(1, k, sizeof(k));
	CHECK(kv_file_index_put(x, k, 1000) == 0, "put 1 again");
	CHECK(expect_order(x, after_remove, 4) == 0, "after a second put");
	kv_file_index_usage(x, &u);
	CHECK(u.blocks == 4 && u.bytes == 100 + 1000 + 102 + 103 && u.moving_bytes == 0,
	      "usage %llu blocks %llu bytes", (unsigned long long)u.blocks,
	      (unsigned long long)u.bytes);
	/* Moving bytes follow the mark, a resize and the removal. */
	id = kv_file_index_find(x, k);
	kv_file_index_set_moving(x, id, 1);
	kv_file_index_set_moving(x, id, 1);
	kv_file_index_usage(x, &u);
	CHECK(u.moving_bytes == 1000 && kv_file_index_moving(x, id), "moving %llu",
	      (unsigned long long)u.moving_bytes);
	CHECK(kv_file_index_put(x, k, 10) == 0, "resize a moving block");
	kv_file_index_usage(x, &u);
	CHECK(u.moving_bytes == 10, "moving after a resize %llu", (unsigned long long)u.moving_bytes);
	kv_file_index_remove(x, id);
	kv_file_index_usage(x, &u);
	CHECK(u.blocks == 3 && u.bytes == 305 && u.moving_bytes == 0, "after remove");
	CHECK(kv_file_index_find(x, k) == KV_FILE_INDEX_NONE, "removed still found");
	kv_file_index_free(x);
	return 0;
}

/* Many entries, every other removed: the rest stay findable. */
static int check_many(void)
{
	struct kv_file_index *x;
	struct kv_file_index_usage u;
	char k[256];

	CHECK(kv_file_index_new(&x) == 0, "new");
	for (unsigned i = 0; i < MANY; i++) {
		key(i, k, sizeof(k));
		CHECK(kv_file_index_put(x, k, i) == 0, "put %u", i);
	}
	for (unsigned i = 0; i < MANY; i += 2) {
		key(i, k, sizeof(k));
		kv_file_index_remove(x, kv_file_index_find(x, k));
	}
	for (unsigned i = 0; i < MANY; i++) {
		uint32_t id;

		key(i, k, sizeof(k));
		id = kv_file_index_find(x, k);
		CHECK((id == KV_FILE_INDEX_NONE) == !(i & 1), "block %u %s", i,
		      id == KV_FILE_INDEX_NONE ? "lost" : "kept");
		CHECK(id == KV_FILE_INDEX_NONE || kv_file_index_size(x, id) == i, "size of %u", i);
	}
	/* Freed entries are reused. */
	for (unsigned i = 0; i < MANY; i += 2) {
		key(i, k, sizeof(k));
		CHECK(kv_file_index_put(x, k, i) == 0, "put %u again", i);
	}
	kv_file_index_usage(x, &u);
	CHECK(u.blocks == MANY, "%llu blocks", (unsigned long long)u.blocks);
	kv_file_index_free(x);
	return 0;
}

/* Blocks written in one order and last used in another are indexed in
 * the order of use. */
static int check_scan(const char *root)
{
	static const unsigned used[] = { 2, 0, 3, 1 };	/* oldest first */
	struct kv_file_index *x;
	struct kv_io *io;
	char k[256], path[512];
	int r;

	CHECK(kv_io_open(root, NULL, &io) == 0, "io open");
	for (unsigned i = 0; i < 4; i++) {
		key(i, k, sizeof(k));
		CHECK(kv_io_put(io, k, "block", 5) == 0, "put %u", i);
	}
	kv_io_close(io);
	for (unsigned i = 0; i < 4; i++) {
		struct timespec ts[2] = { { .tv_sec = 1000000 + 100 * i }, { .tv_nsec = UTIME_OMIT } };

		key(used[i], k, sizeof(k));
		snprintf(path, sizeof(path), "%s/%s", root, k);
		CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat %s", path);
	}
	CHECK(kv_file_index_new(&x) == 0, "new");
	r = kv_file_index_scan(x, root, NULL);
	CHECK(r == 0, "scan: %s", kv_strerror(r));
	CHECK(expect_order(x, used, 4) == 0, "scanned order");
	kv_file_index_free(x);
	return 0;
}

int main(void)
{
	char root[] = "/tmp/kv-test-file-index-XXXXXX", cmd[64];

	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	check_order();
	check_many();
	check_scan(root);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return failures ? 1 : 0;
}
