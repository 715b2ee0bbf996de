/*
 * The io engine on real filesystems: put/get/tail/has/touch and batch
 * round trips of random data, O_DIRECT on /tmp (ext4 here) against
 * buffered on tmpfs, checksum mismatches, and ENOSPC on a tiny tmpfs
 * (root only: exit 77 after the rest passes when not root).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <linux/magic.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

#define MODEL_DIR "org_model_0123456789ab"
#define MIB (1u << 20)

static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fill_random(unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = rng() >> 56;
}

/* A block path as vLLM would name it, for key k. */
static void block_path(unsigned k, unsigned rank, char *buf, size_t len)
{
	char hash[33];

	snprintf(hash, sizeof(hash), "%08x%08x%016llx", k * 2654435761u, k,
		 (unsigned long long)k * 0x9e3779b97f4a7c15ULL);
	if (kv_layout_block_path(MODEL_DIR, rank, 0, hash, buf, len) < 0)
		abort();
}

static int temps_seen, files_seen;

static int count_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	size_t n = strlen(path);

	(void)st;
	(void)ftw;
	if (type == FTW_F) {
		files_seen++;
		if (n > 4 && !strcmp(path + n - 4, ".tmp"))
			temps_seen++;
	}
	return 0;
}

static void count_files(const char *dir)
{
	temps_seen = files_seen = 0;
	nftw(dir, count_one, 16, FTW_PHYS);
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

static void remove_tree(const char *dir)
{
	nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static struct timespec file_atime(const char *root, const char *rel)
{
	char path[8192];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	if (stat(path, &st) < 0)
		memset(&st, 0, sizeof(st));
	return st.st_atim;
}

static void set_old_atime(const char *root, const char *rel)
{
	struct timespec ts[2] = { { 1000000000, 0 }, { 0, UTIME_OMIT } };
	char path[8192];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

/* Round trips of many sizes; direct_expected: what an aligned 2 MiB put
 * on this root should use. */
static void round_trips(const char *root, int direct_expected)
{
	size_t sizes[] = { 0, 1, 4095, 4096, 12288, 2 * MIB, 2 * MIB + 13 };
	struct kv_io_opts opts = { .queue_depth = 4 };
	unsigned char *src = kv_io_buf_alloc(2 * MIB + 13);
	unsigned char *dst = kv_io_buf_alloc(3 * MIB);
	char rel[512], path[8192], text[32], want[17];
	struct kv_io *io;
	uint64_t size;
	ssize_t n;
	size_t len;
	unsigned i;

	CHECK(kv_io_open(root, &opts, &io) == 0);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		block_path(i, 0, rel, sizeof(rel));
		fill_random(src, sizes[i]);
		CHECK(kv_io_put(io, rel, src, sizes[i]) == 0);
		CHECK(kv_io_used_direct(io) ==
		      (direct_expected && sizes[i] && sizes[i] % KV_IO_ALIGN == 0));
		CHECK(kv_io_size(io, rel, &size) == 0 && size == sizes[i]);
		CHECK(kv_io_has(io, rel) == 0);
		memset(dst, 0xa5, sizes[i]);
		CHECK(kv_io_get(io, rel, dst, 3 * MIB, &len) == 0 && len == sizes[i]);
		CHECK(memcmp(src, dst, sizes[i]) == 0);
		CHECK(kv_io_used_direct(io) == (direct_expected && sizes[i]));
		/* The checksum is what a reader outside libkv can check too. */
		snprintf(path, sizeof(path), "%s/%s", root, rel);
		snprintf(want, sizeof(want), "%016llx",
			 (unsigned long long)kv_xxh3(src, sizes[i]));
		n = getxattr(path, KV_XATTR_XXH3, text, sizeof(text));
		CHECK((n == 16 && !memcmp(text, want, 16)) || (n < 0 && errno == ENOTSUP));
	}

	/* An unaligned buffer still works, through the page cache. */
	block_path(100, 0, rel, sizeof(rel));
	fill_random(src + 1, 2 * MIB);
	CHECK(kv_io_put(io, rel, src + 1, 2 * MIB) == 0);
	CHECK(kv_io_used_direct(io) == 0);
	CHECK(kv_io_get(io, rel, dst + 1, 2 * MIB, &len) == 0 && len == 2 * MIB);
	CHECK(kv_io_used_direct(io) == 0);
	CHECK(memcmp(src + 1, dst + 1, 2 * MIB) == 0);

	/* A block already there is kept, as upstream's writers keep it... */
	fill_random(dst, 2 * MIB);
	{
		struct kv_io_req req = { .op = KV_IO_OP_PUT, .relpath = rel,
					 .buf = dst, .len = MIB };

		CHECK(kv_io_batch(io, &req, 1) == 0 && req.result == 0 && req.existed);
	}
	CHECK(kv_io_get(io, rel, dst, 3 * MIB, &len) == 0 && len == 2 * MIB);
	CHECK(memcmp(src + 1, dst, 2 * MIB) == 0);
	/* ...and under KV_IO_REPLACE the new content replaces it whole. */
	kv_io_close(io);
	opts.flags = KV_IO_REPLACE;
	CHECK(kv_io_open(root, &opts, &io) == 0);
	fill_random(src, 2 * MIB);
	CHECK(kv_io_put(io, rel, src, MIB) == 0);
	CHECK(kv_io_get(io, rel, dst, 3 * MIB, &len) == 0 && len == MIB);
	CHECK(memcmp(src, dst, MIB) == 0);
	opts.flags = 0;

	/* Tail reads: the last n blocks, as vLLM reads a partial file. */
	CHECK(kv_io_get_tail(io, rel, dst, 3 * 4096) == 0);
	CHECK(memcmp(src + MIB - 3 * 4096, dst, 3 * 4096) == 0);
	CHECK(kv_io_used_direct(io) == direct_expected);
	CHECK(kv_io_get_tail(io, rel, dst, 1000) == 0);
	CHECK(memcmp(src + MIB - 1000, dst, 1000) == 0);
	CHECK(kv_io_used_direct(io) == 0);
	CHECK(kv_io_get_tail(io, rel, dst, MIB) == 0);
	CHECK(memcmp(src, dst, MIB) == 0);
	CHECK(kv_io_get_tail(io, rel, dst, MIB + 4096) == -KV_ESHORT);

	CHECK(kv_io_get(io, rel, dst, MIB - 1, &len) == -EFBIG);
	block_path(101, 0, rel, sizeof(rel));
	CHECK(kv_io_get(io, rel, dst, MIB, &len) == -ENOENT);
	CHECK(kv_io_has(io, rel) == -ENOENT);
	CHECK(kv_io_size(io, rel, &size) == -ENOENT);
	CHECK(kv_io_touch(io, rel) == -ENOENT);
	CHECK(kv_io_get(io, MODEL_DIR "_r0", dst, MIB, &len) == -EISDIR);

	/* Paths must stay below the root. */
	CHECK(kv_io_put(io, "../escape.bin", src, 10) == -KV_EBADPATH);
	CHECK(kv_io_put(io, "/tmp/escape.bin", src, 10) == -KV_EBADPATH);
	CHECK(kv_io_put(io, "a//b.bin", src, 10) == -KV_EBADPATH);
	CHECK(kv_io_get(io, "a/./b.bin", dst, 10, &len) == -KV_EBADPATH);
	CHECK(kv_io_has(io, "") == -KV_EBADPATH);
	kv_io_close(io);

	/* Without KV_IO_NO_MKDIR the bucket dirs appear; with it, not. */
	opts.flags = KV_IO_NO_MKDIR;
	CHECK(kv_io_open(root, &opts, &io) == 0);
	block_path(102, 5, rel, sizeof(rel));
	CHECK(kv_io_put(io, rel, src, 4096) == -ENOENT);
	CHECK(kv_io_has(io, rel) == -ENOENT);
	block_path(0, 0, rel, sizeof(rel));
	CHECK(kv_io_put(io, rel, src, 4096) == 0);
	kv_io_close(io);

	/* FSYNC takes the file and dir fsync steps and still lands. */
	opts.flags = KV_IO_FSYNC;
	CHECK(kv_io_open(root, &opts, &io) == 0);
	block_path(103, 1, rel, sizeof(rel));
	fill_random(src, 2 * MIB);
	CHECK(kv_io_put(io, rel, src, 2 * MIB) == 0);
	CHECK(kv_io_get(io, rel, dst, 2 * MIB, &len) == 0 && len == 2 * MIB);
	CHECK(memcmp(src, dst, 2 * MIB) == 0);
	kv_io_close(io);

	count_files(root);
	CHECK(temps_seen == 0);
	kv_io_buf_free(src);
	kv_io_buf_free(dst);
}

static void atime_and_checksum(const char *root)
{
	struct kv_io_opts opts = { 0 };
	unsigned char *src = kv_io_buf_alloc(64 * 1024);
	unsigned char *dst = kv_io_buf_alloc(64 * 1024);
	struct timespec before, after;
	struct kv_io *io, *quiet;
	char rel[512], path[8192];
	size_t len;
	int fd;

	CHECK(kv_io_open(root, &opts, &io) == 0);
	opts.flags = KV_IO_NO_TOUCH;
	CHECK(kv_io_open(root, &opts, &quiet) == 0);
	block_path(200, 0, rel, sizeof(rel));
	fill_random(src, 64 * 1024);
	CHECK(kv_io_put(io, rel, src, 64 * 1024) == 0);

	/* A put that finds the block there stamps its atime, as llm-d
	 * does; under NO_TOUCH it leaves it. */
	set_old_atime(root, rel);
	CHECK(kv_io_put(quiet, rel, src, 64 * 1024) == 0);
	CHECK(file_atime(root, rel).tv_sec == 1000000000);
	CHECK(kv_io_put(io, rel, src, 64 * 1024) == 0);
	CHECK(file_atime(root, rel).tv_sec > 1000000000);

	/* An atime far in the past: relatime alone would move it on a
	 * read, so NO_TOUCH must prevent that as well. */
	set_old_atime(root, rel);
	CHECK(kv_io_get(quiet, rel, dst, 64 * 1024, &len) == 0);
	CHECK(kv_io_get_tail(quiet, rel, dst, 4096) == 0);
	CHECK(kv_io_has(io, rel) == 0);
	after = file_atime(root, rel);
	CHECK(after.tv_sec == 1000000000);
	CHECK(kv_io_get(io, rel, dst, 64 * 1024, &len) == 0);
	after = file_atime(root, rel);
	CHECK(after.tv_sec > 1000000000);
	set_old_atime(root, rel);
	CHECK(kv_io_get_tail(io, rel, dst, 8192) == 0);
	CHECK(file_atime(root, rel).tv_sec > 1000000000);
	set_old_atime(root, rel);
	before = file_atime(root, rel);
	CHECK(kv_io_touch(io, rel) == 0);
	CHECK(file_atime(root, rel).tv_sec > before.tv_sec);

	/* A flipped byte: the whole-file read fails, the file stays. */
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	fd = open(path, O_WRONLY);
	CHECK(fd >= 0);
	src[777] ^= 1;
	CHECK(pwrite(fd, src + 777, 1, 777) == 1);
	close(fd);
	CHECK(kv_io_get(io, rel, dst, 64 * 1024, &len) == -KV_ECHECKSUM);
	CHECK(kv_io_get_tail(io, rel, dst, 64 * 1024) == -KV_ECHECKSUM);
	CHECK(kv_io_has(io, rel) == 0);
	/* Partial tails cannot be checked against a whole-file sum. */
	CHECK(kv_io_get_tail(io, rel, dst, 4096) == 0);
	kv_io_close(quiet);
	opts.flags = KV_IO_NO_CHECKSUM;
	CHECK(kv_io_open(root, &opts, &quiet) == 0);
	CHECK(kv_io_get(quiet, rel, dst, 64 * 1024, &len) == 0);
	CHECK(memcmp(src, dst, 64 * 1024) == 0);
	/* Without a checksum a put sets no xattr. */
	block_path(201, 0, rel, sizeof(rel));
	CHECK(kv_io_put(quiet, rel, src, 100) == 0);
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	CHECK(getxattr(path, KV_XATTR_XXH3, dst, 32) < 0 && errno == ENODATA);
	CHECK(kv_io_get(io, rel, dst, 100, &len) == 0 && len == 100);
	kv_io_close(quiet);
	kv_io_close(io);
	kv_io_buf_free(src);
	kv_io_buf_free(dst);
}

struct stream {
	struct kv_io_req *reqs;
	size_t n, next;
	unsigned outstanding, max_outstanding, finished;
	int order_ok;
};

static int stream_next(void *arg, struct kv_io_req **req)
{
	struct stream *st = arg;

	if (st->next == st->n)
		return 0;
	*req = &st->reqs[st->next++];
	if (++st->outstanding > st->max_outstanding)
		st->max_outstanding = st->outstanding;
	return 1;
}

static void stream_done(void *arg, struct kv_io_req *req)
{
	struct stream *st = arg;

	st->outstanding--;
	st->finished++;
	if (req->user != req)
		st->order_ok = 0;
}

/* A done() that queues a retry: next() has none until it does. */
struct requeue {
	struct kv_io_req *req;
	int pending, handed, retried;
};

static int requeue_next(void *arg, struct kv_io_req **req)
{
	struct requeue *rq = arg;

	if (!rq->pending)
		return 0;
	rq->pending = 0;
	rq->handed++;
	*req = rq->req;
	return 1;
}

static void requeue_done(void *arg, struct kv_io_req *req)
{
	struct requeue *rq = arg;

	if (req->result == -EFBIG && !rq->retried) {
		rq->retried = 1;
		req->len *= 4;
		rq->pending = 1;
	}
}

static void batches(const char *root)
{
	enum { N = 96, QD = 8, MAXB = 256 * 1024 };
	/* REPLACE: the last case stores a key again with new content. */
	struct kv_io_opts opts = { .queue_depth = QD, .flags = KV_IO_REPLACE };
	static struct kv_io_req reqs[N];
	static char rels[N][512];
	unsigned char *src[N], *dst[N];
	struct stream st = { 0 };
	struct kv_io *io;
	size_t lens[N];
	unsigned i;

	CHECK(kv_io_open(root, &opts, &io) == 0);
	for (i = 0; i < N; i++) {
		/* Whole pages (direct where possible) and odd sizes mixed. */
		lens[i] = i % 3 ? (rng() % 64 + 1) * 4096 : rng() % MAXB;
		src[i] = kv_io_buf_alloc(MAXB);
		dst[i] = kv_io_buf_alloc(MAXB);
		fill_random(src[i], lens[i]);
		block_path(1000 + i, i % 4, rels[i], sizeof(rels[i]));
		reqs[i] = (struct kv_io_req){ .op = KV_IO_OP_PUT, .relpath = rels[i],
					      .buf = src[i], .len = lens[i] };
	}
	CHECK(kv_io_batch(io, reqs, N) == 0);
	for (i = 0; i < N; i++)
		CHECK(reqs[i].result == 0 && reqs[i].done == lens[i]);

	/* Whole gets, tails, presence checks, and some misses. */
	for (i = 0; i < N; i++) {
		reqs[i] = (struct kv_io_req){ .relpath = rels[i], .buf = dst[i], .len = MAXB };
		reqs[i].user = &reqs[i];
		if (i % 4 == 1 && lens[i] >= 4096) {
			reqs[i].op = KV_IO_OP_GET_TAIL;
			reqs[i].len = 4096;
		} else if (i % 4 == 2) {
			reqs[i].op = KV_IO_OP_HAS;
		} else {
			reqs[i].op = KV_IO_OP_GET;
		}
		if (i % 10 == 9)
			reqs[i].relpath = "org_model_0123456789ab_r9/fff/ff_g0/fffffff.bin";
	}
	st.reqs = reqs;
	st.n = N;
	st.order_ok = 1;
	CHECK(kv_io_batch_stream(io, stream_next, stream_done, &st) == N / 10);
	CHECK(st.finished == N && st.outstanding == 0);
	CHECK(st.max_outstanding <= QD && st.max_outstanding > 1);
	CHECK(st.order_ok);
	for (i = 0; i < N; i++) {
		if (i % 10 == 9) {
			CHECK(reqs[i].result == -ENOENT);
			continue;
		}
		CHECK(reqs[i].result == 0);
		if (reqs[i].op == KV_IO_OP_GET)
			CHECK(reqs[i].done == lens[i] && !memcmp(src[i], dst[i], lens[i]));
		if (reqs[i].op == KV_IO_OP_GET_TAIL)
			CHECK(reqs[i].done == 4096 &&
			      !memcmp(src[i] + lens[i] - 4096, dst[i], 4096));
	}
	CHECK(kv_io_batch(io, reqs, 0) == 0);

	/* Too small a buffer, then the retry that done() queues. */
	{
		struct kv_io_req req = { .op = KV_IO_OP_GET, .relpath = rels[3],
					 .buf = dst[3], .len = MAXB / 4 };
		struct requeue rq = { .req = &req, .pending = 1 };

		lens[3] = MAXB / 2 + 4096;
		fill_random(src[3], lens[3]);
		CHECK(kv_io_put(io, rels[3], src[3], lens[3]) == 0);
		CHECK(kv_io_batch_stream(io, requeue_next, requeue_done, &rq) == 1);
		CHECK(rq.handed == 2 && rq.retried && req.result == 0);
		CHECK(req.done == lens[3] && !memcmp(src[3], dst[3], lens[3]));
	}
	kv_io_close(io);
	for (i = 0; i < N; i++) {
		kv_io_buf_free(src[i]);
		kv_io_buf_free(dst[i]);
	}
	count_files(root);
	CHECK(temps_seen == 0);
}

/* A full filesystem: the put fails with ENOSPC and leaves nothing. */
static int enospc(const char *base)
{
	char mnt[4096];
	struct kv_io_opts opts = { .queue_depth = 1 };
	unsigned char *src = kv_io_buf_alloc(4 * MIB);
	struct kv_io_req reqs[4];
	char rels[4][512];
	struct kv_io *io;
	unsigned i;

	if (geteuid() != 0)
		return 0;
	snprintf(mnt, sizeof(mnt), "%s/full", base);
	CHECK(mkdir(mnt, 0755) == 0);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") < 0) {
		printf("cannot mount tmpfs: %s\n", strerror(errno));
		rmdir(mnt);
		return 0;
	}
	fill_random(src, 4 * MIB);
	CHECK(kv_io_open(mnt, &opts, &io) == 0);
	block_path(300, 0, rels[0], sizeof(rels[0]));
	CHECK(kv_io_put(io, rels[0], src, 4 * MIB) == -ENOSPC);
	CHECK(kv_io_has(io, rels[0]) == -ENOENT);
	/* In a batch, one at a time so the outcome is certain: the big one
	 * fails, and its cleanup leaves room for the small ones after it. */
	for (i = 0; i < 4; i++) {
		block_path(301 + i, 0, rels[i], sizeof(rels[i]));
		reqs[i] = (struct kv_io_req){ .op = KV_IO_OP_PUT, .relpath = rels[i],
					      .buf = src, .len = i == 2 ? 2 * MIB : 8192 };
	}
	CHECK(kv_io_batch(io, reqs, 4) == 1);
	for (i = 0; i < 4; i++)
		CHECK(reqs[i].result == (i == 2 ? -ENOSPC : 0));
	kv_io_close(io);
	count_files(mnt);
	CHECK(temps_seen == 0 && files_seen == 3);
	umount2(mnt, MNT_DETACH);
	rmdir(mnt);
	kv_io_buf_free(src);
	return 1;
}

int main(void)
{
	char dir[] = "/tmp/kv-test-io.XXXXXX";
	char shm[] = "/dev/shm/kv-test-io.XXXXXX";
	char root[4096];
	struct statfs sfs;
	struct kv_io *io;
	int ran_enospc;

	rng_state = 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() << 20;
	printf("seed %llx\n", (unsigned long long)rng_state);
	if (!mkdtemp(dir))
		return 1;
	CHECK(kv_io_open("/nonexistent/kv-root", NULL, &io) == -ENOENT);
	CHECK(kv_io_open("/etc/passwd", NULL, &io) == -ENOTDIR);

	snprintf(root, sizeof(root), "%s/root", dir);
	CHECK(mkdir(root, 0755) == 0);
	/* ext4 and xfs take O_DIRECT; the suite notes what /tmp is. */
	CHECK(statfs(root, &sfs) == 0);
	round_trips(root, sfs.f_type == EXT4_SUPER_MAGIC || sfs.f_type == XFS_SUPER_MAGIC);
	atime_and_checksum(root);
	batches(root);
	remove_tree(root);

	if (statfs("/dev/shm", &sfs) == 0 && sfs.f_type == TMPFS_MAGIC && mkdtemp(shm)) {
		round_trips(shm, 0);
		batches(shm);
		remove_tree(shm);
	} else {
		printf("no tmpfs at /dev/shm: buffered case not run\n");
	}

	ran_enospc = enospc(dir);
	remove_tree(dir);
	if (failures)
		return 1;
	if (!ran_enospc) {
		printf("ENOSPC check needs root and tmpfs mounts\n");
		return 77;
	}
	return 0;
}
