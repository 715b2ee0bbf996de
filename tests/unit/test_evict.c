/*
 * kv_evict_run picks exactly the oldest blocks on every path: the
 * one-walk heap, the two-walk histogram (forced by a tiny scan heap), its
 * refinement when thousands of atimes share one bucket, and ties.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

#define MODEL_DIR "m_0123456789ab"
#define NS 1000000000LL

static char root[256];

static void block_path(unsigned i, char *buf, size_t len)
{
	char hash[32];

	snprintf(hash, sizeof(hash), "%05x%07x", i * 2654435761u % 0xfffff, i);
	snprintf(buf, len, MODEL_DIR "_r0/%.3s/%.2s_g0/%s.bin", hash, hash + 3, hash);
}

static void mkdirs(const char *rel)
{
	char p[512], *s;

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	for (s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		mkdir(p, 0755);
		*s = '/';
	}
}

/* n blocks of 4 KiB; block i's atime is atime_of(i). */
static uint64_t make_tree(unsigned n, int64_t (*atime_of)(unsigned))
{
	char rel[256], p[512];
	static char data[4096];
	struct stat st;
	unsigned i;
	int fd;

	for (i = 0; i < n; i++) {
		struct timespec ts[2];

		block_path(i, rel, sizeof(rel));
		mkdirs(rel);
		snprintf(p, sizeof(p), "%s/%s", root, rel);
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, data, sizeof(data)) != (ssize_t)sizeof(data)) {
			perror(p);
			exit(1);
		}
		ts[0].tv_sec = atime_of(i) / NS;
		ts[0].tv_nsec = atime_of(i) % NS;
		ts[1] = ts[0];
		futimens(fd, ts);
		close(fd);
	}
	block_path(0, rel, sizeof(rel));
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	stat(p, &st);
	return (uint64_t)st.st_blocks * 512;
}

static void clear_tree(void)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/" MODEL_DIR "_r0", root);
	if (system(cmd) != 0)
		exit(1);
}

/* Blocks [0, k) must be gone and [k, n) still there. */
static int check_oldest_gone(unsigned n, unsigned k)
{
	char rel[256], p[512];
	unsigned i, bad = 0;

	for (i = 0; i < n; i++) {
		block_path(i, rel, sizeof(rel));
		snprintf(p, sizeof(p), "%s/%s", root, rel);
		if ((access(p, F_OK) == 0) != (i >= k))
			bad++;
	}
	if (bad)
		fprintf(stderr, "%u of %u blocks on the wrong side of the cut at %u\n", bad, n, k);
	return bad == 0;
}

static int64_t day_ago;

/* Distinct atimes a few seconds apart, block 0 oldest, order of
 * creation unrelated to age only through the hash-derived dirs. */
static int64_t spread(unsigned i) { return day_ago + (int64_t)i * 7 * NS; }
/* Thousands of distinct atimes inside one first-level bucket. */
static int64_t crowded(unsigned i) { return day_ago + (int64_t)i * 1000; }
static int64_t same(unsigned i) { (void)i; return day_ago; }

static struct kv_evict_report run(uint64_t cache, uint64_t keep, size_t heap_bytes)
{
	struct kv_evict_opts o = {
		.high_pct = -1,
		.max_bytes = cache - 1,
		.low_bytes = keep,
		.hot_ns = 3600 * NS,
		.orphans_after_ns = 3600 * NS,
		.dir_grace_ns = 600 * NS,
		.scan_heap_bytes = heap_bytes,
	};
	struct kv_evict_report r;

	CHECK(kv_evict_run(root, &o, &r) == 0);
	return r;
}

int main(void)
{
	struct kv_evict_report r;
	/* tmpfs when there is one: 30,000 small files are slow on some disks. */
	const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
	uint64_t a;
	unsigned n, k;

	snprintf(root, sizeof(root), "%s/kvevict-unit.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	day_ago = kv_now_ns() - 86400 * NS;

	/* One walk: the scan's heap covers the need. */
	n = 600, k = 217;
	a = make_tree(n, spread);
	r = run(n * a, (n - k) * a, 0);
	CHECK(r.files_deleted == k && r.walks == 1 && r.target_reached);
	CHECK(check_oldest_gone(n, k));
	clear_tree();

	/* Two walks: a one-byte scan heap forces the histogram path. */
	a = make_tree(n, spread);
	r = run(n * a, (n - k) * a, 1);
	CHECK(r.files_deleted == k && r.walks == 2 && r.target_reached);
	CHECK(check_oldest_gone(n, k));
	clear_tree();

	/* Refinement: 12,000 atimes 1 us apart share one first-level bucket. */
	n = 12000, k = 9001;
	a = make_tree(n, crowded);
	r = run(n * a, (n - k) * a, 1);
	CHECK(r.files_deleted == k && r.walks >= 3 && r.target_reached);
	CHECK(check_oldest_gone(n, k));
	clear_tree();

	/* Ties: equal atimes are equally old; exactly enough of them go. */
	n = 9000, k = 8500;
	a = make_tree(n, same);
	r = run(n * a, (n - k) * a, 1);
	CHECK(r.files_deleted == k && r.bytes_deleted == k * a);

	clear_tree();
	rmdir(root);
	return failures ? 1 : 0;
}
