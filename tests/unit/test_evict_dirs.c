/*
 * kv_evict_run deletes the blocks it chose bucket by bucket, sharing one
 * open of each bucket dir, and still in exact LRU order; a bucket swapped
 * for a symlink between the scan and the unlinks is refused, even one
 * that stays inside the root.  Both with openat2 and with the fallback for kernels without
 * it, forced here by a seccomp filter that answers ENOSYS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

#define RANK_DIR "m_0123456789ab_r0"
#define NS 1000000000LL
#define NBLOCKS 200u
#define NBUCKETS 8u
#define SWAPPED 3u	/* the bucket the race swaps for a symlink */

static char root[256], parked[300];
static int64_t day_ago;
static uint64_t alloc_bytes;

/* Block i lives in bucket i % NBUCKETS and is the i-th oldest, so LRU
 * order visits the buckets round robin, unlike path order. */
static unsigned bucket_of(unsigned i) { return i % NBUCKETS; }

static void block_rel(unsigned i, char *buf, size_t len)
{
	char hash[32];

	snprintf(hash, sizeof(hash), "%03x%02x%07x", 0xa00 + bucket_of(i), 0x10 + bucket_of(i), i);
	snprintf(buf, len, RANK_DIR "/%.3s/%.2s_g0/%s.bin", hash, hash + 3, hash);
}

static void bucket_rel(unsigned b, char *buf, size_t len)
{
	snprintf(buf, len, RANK_DIR "/%03x/%02x_g0", 0xa00 + b, 0x10 + b);
}

static void make_tree(void)
{
	static char data[4096];
	char rel[256], p[600];
	struct stat st;
	unsigned i, b;
	int fd;

	snprintf(p, sizeof(p), "%s/" RANK_DIR, root);
	CHECK(mkdir(p, 0755) == 0);
	for (b = 0; b < NBUCKETS; b++) {
		bucket_rel(b, rel, sizeof(rel));
		snprintf(p, sizeof(p), "%s/%.*s", root, (int)(strchr(strchr(rel, '/') + 1, '/') - rel), rel);
		CHECK(mkdir(p, 0755) == 0);
		snprintf(p, sizeof(p), "%s/%s", root, rel);
		CHECK(mkdir(p, 0755) == 0);
	}
	for (i = 0; i < NBLOCKS; i++) {
		struct timespec ts[2];

		block_rel(i, rel, sizeof(rel));
		snprintf(p, sizeof(p), "%s/%s", root, rel);
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, data, sizeof(data)) != (ssize_t)sizeof(data)) {
			perror(p);
			exit(1);
		}
		ts[0].tv_sec = (day_ago + (int64_t)i * 7 * NS) / NS;
		ts[0].tv_nsec = 0;
		ts[1] = ts[0];
		CHECK(futimens(fd, ts) == 0);
		CHECK(fstat(fd, &st) == 0);
		alloc_bytes = (uint64_t)st.st_blocks * 512;
		close(fd);
	}
}

static void clear_tree(void)
{
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/" RANK_DIR " '%s'", root, parked);
	if (system(cmd) != 0)
		exit(1);
}

static int exists(unsigned i)
{
	char rel[256], p[600];

	block_rel(i, rel, sizeof(rel));
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	return access(p, F_OK) == 0;
}

/* Between the scan and the first unlink: move a bucket aside, to the
 * top of the root, and leave a relative symlink to it in its place. */
static void swap_bucket(void *arg)
{
	char rel[256], p[600];

	(void)arg;
	bucket_rel(SWAPPED, rel, sizeof(rel));
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	CHECK(rename(p, parked) == 0);
	CHECK(symlink("../../parked", p) == 0);
}

static struct kv_evict_report run(unsigned k, void (*race)(void *))
{
	struct kv_evict_opts o = {
		.high_pct = -1,
		.max_bytes = NBLOCKS * alloc_bytes - 1,
		.low_bytes = (NBLOCKS - k) * alloc_bytes,
		.hot_ns = 3600 * NS,
		.orphans_after_ns = 3600 * NS,
		.dir_grace_ns = 600 * NS,
		.threads = 2,
		.before_first_unlink = race,
	};
	struct kv_evict_report r;

	CHECK(kv_evict_run(root, &o, &r) == 0);
	return r;
}

static void scenarios(const char *how)
{
	struct kv_evict_report r;
	struct kv_evict_opts o = { .high_pct = -1 };
	char rel[256], p[600];
	unsigned i, k = 130, bad = 0, gone, swapped_gone = 0;
	int rootfd, before = failures;

	/* Exactly the k oldest go, though their buckets alternate. */
	make_tree();
	r = run(k, NULL);
	CHECK(r.files_deleted == k && r.skipped_other == 0 && r.target_reached);
	for (i = 0; i < NBLOCKS; i++)
		bad += exists(i) != (i >= k);
	CHECK(bad == 0);
	clear_tree();

	/* The swapped bucket's blocks are refused; the next oldest of the
	 * other buckets take their place. */
	make_tree();
	r = run(k, swap_bucket);
	CHECK(r.files_deleted == k && r.skipped_other > 0 && r.target_reached);
	for (i = 0, gone = 0; i < NBLOCKS; i++) {
		if (bucket_of(i) == SWAPPED) {
			block_rel(i, rel, sizeof(rel));
			snprintf(p, sizeof(p), "%s/%s", parked, strrchr(rel, '/') + 1);
			swapped_gone += access(p, F_OK) != 0;
		} else if (gone < k) {
			bad += exists(i);
			gone++;
		} else {
			bad += !exists(i);
		}
	}
	CHECK(bad == 0 && swapped_gone == 0);

	/* --stdin's path: a block named through the symlink stays. */
	rootfd = open(root, O_RDONLY | O_DIRECTORY);
	CHECK(rootfd >= 0);
	block_rel(NBLOCKS - NBUCKETS + SWAPPED, rel, sizeof(rel));
	r = (struct kv_evict_report){ 0 };
	CHECK(kv_evict_path(rootfd, rel, &o, &r) < 0 && r.files_deleted == 0);
	snprintf(p, sizeof(p), "%s/%s", parked, strrchr(rel, '/') + 1);
	CHECK(access(p, F_OK) == 0);
	close(rootfd);
	clear_tree();
	if (failures > before)
		fprintf(stderr, "failed %s\n", how);
}

/* Make openat2 fail with ENOSYS in this process, as on kernels before
 * 5.6.  0 on success, -errno when seccomp is not available. */
static int hide_openat2(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -errno;
	return 0;
}

int main(void)
{
	const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
	int status, rc;
	pid_t pid;

	snprintf(root, sizeof(root), "%s/kvevict-dirs.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(parked, sizeof(parked), "%s/parked", root);
	day_ago = kv_now_ns() - 86400 * NS;

	scenarios("with openat2");

	pid = fork();
	if (pid == 0) {
		failures = 0;
		rc = hide_openat2();
		if (rc < 0) {
			fprintf(stderr, "no seccomp (%s): the fallback is not tested\n", strerror(-rc));
			_exit(0);
		}
		errno = 0;
		CHECK(syscall(SYS_openat2, AT_FDCWD, ".", NULL, 0) < 0 && errno == ENOSYS);
		scenarios("without openat2");
		_exit(failures ? 1 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0);

	rmdir(root);
	return failures ? 1 : 0;
}
