/*
 * Sharded kv_evict_run, each shard on a thread of its own as it would
 * be on a node of its own: together the shards delete exactly the
 * oldest blocks a single run deletes, on the one-walk and the two-walk
 * path and for a quota; a shard that never comes costs only its share.
 * Atimes are far enough apart that no two blocks share a histogram
 * bucket, so the answer is exact.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
#define N_BLOCKS 400

static char root[256];
static int64_t newest;

static void block_path(unsigned i, char *buf, size_t len)
{
	char hash[32];

	snprintf(hash, sizeof(hash), "%05x%07x", i * 2654435761u % 0xfffff, i);
	snprintf(buf, len, MODEL_DIR "_r0/%.3s/%.2s_g0/%s.bin", hash, hash + 3, hash);
}

static int shard_of(unsigned i, unsigned count)
{
	char rel[256], bucket[4];

	block_path(i, rel, sizeof(rel));
	memcpy(bucket, rel + strlen(MODEL_DIR "_r0/"), 3);
	bucket[3] = '\0';
	return kv_layout_bucket_shard(bucket, count);
}

/* Block 0 oldest; 40 s apart from 1.2 h old on, wider than any
 * histogram bucket at those ages. */
static int64_t atime_of(unsigned i)
{
	return newest - (int64_t)(N_BLOCKS - 1 - i) * 40 * NS;
}

static uint64_t make_tree(void)
{
	char rel[256], p[512], cmd[600];
	static char data[4096];
	struct stat st;

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/" MODEL_DIR "_r0 '%s'/.kvevict*", root, root);
	if (system(cmd) != 0)
		exit(1);
	for (unsigned i = 0; i < N_BLOCKS; i++) {
		struct timespec ts[2];
		char *s;
		int fd;

		block_path(i, rel, sizeof(rel));
		snprintf(p, sizeof(p), "%s/%s", root, rel);
		for (s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
			*s = '\0';
			mkdir(p, 0755);
			*s = '/';
		}
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

static int gone(unsigned i)
{
	char rel[256], p[512];

	block_path(i, rel, sizeof(rel));
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	return access(p, F_OK) != 0;
}

struct shard {
	pthread_t tid;
	struct kv_evict_opts o;
	struct kv_evict_report r;
	int rc, missing_said;
};

static void on_notice(const char *text, void *arg)
{
	struct shard *s = arg;

	if (strstr(text, "missing after"))
		s->missing_said = 1;
	else
		fprintf(stderr, "shard %u: %s\n", s->o.shard_index, text);
}

static void *shard_main(void *arg)
{
	struct shard *s = arg;

	s->rc = kv_evict_run(root, &s->o, &s->r);
	return NULL;
}

/* Run shards [0, run) of count at once with the budget or quota given;
 * the deleted blocks' count. */
static unsigned run_shards(unsigned count, unsigned run, uint64_t max, uint64_t low,
			   size_t heap_bytes, const struct kv_evict_quota *quota)
{
	static struct shard sh[8];
	unsigned deleted = 0;

	for (unsigned i = 0; i < run; i++) {
		memset(&sh[i], 0, sizeof(sh[i]));
		sh[i].o = (struct kv_evict_opts){
			.high_pct = -1,
			.max_bytes = quota ? 0 : max,
			.low_bytes = quota ? 0 : low,
			.quotas = quota,
			.nquotas = quota ? 1 : 0,
			.hot_ns = 3600 * NS,
			.orphans_after_ns = 3600 * NS,
			.dir_grace_ns = 600 * NS,
			.scan_heap_bytes = heap_bytes,
			.shard_index = i,
			.shard_count = count,
			.shard_wait_ns = run < count ? NS / 2 : 60 * NS,
			.notice = on_notice,
			.arg = &sh[i],
		};
		CHECK(pthread_create(&sh[i].tid, NULL, shard_main, &sh[i]) == 0);
	}
	for (unsigned i = 0; i < run; i++) {
		pthread_join(sh[i].tid, NULL);
		CHECK(sh[i].rc == 0);
		CHECK(sh[i].r.shards_merged == run);
		CHECK(sh[i].missing_said == (run < count));
		CHECK(sh[i].r.shard_round > 0 && sh[i].r.shard_round == sh[0].r.shard_round);
		deleted += (unsigned)sh[i].r.files_deleted;
	}
	return deleted;
}

/* Blocks [0, k) gone, [k, n) there; block i counted only if shard_of
 * it under count is below run. */
static int oldest_gone(unsigned k, unsigned count, unsigned run)
{
	unsigned bad = 0, seen = 0;

	for (unsigned i = 0; i < N_BLOCKS; i++) {
		if ((unsigned)shard_of(i, count) >= run) {
			bad += gone(i);
			continue;
		}
		bad += gone(i) != (seen < k);
		seen++;
	}
	if (bad)
		fprintf(stderr, "%u blocks on the wrong side (k %u, %u of %u shards)\n", bad, k,
			run, count);
	return bad == 0;
}

int main(void)
{
	static const unsigned counts[] = { 1, 2, 3, 4 };
	const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
	struct kv_evict_quota quota = { .model = MODEL_DIR };
	unsigned k = 137, present, n3 = 0;
	uint64_t a, cache, need;

	snprintf(root, sizeof(root), "%s/kvevict-shards.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	newest = kv_now_ns() - 4320 * NS;

	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		/* One walk each (the scan's heap), then two (a one-byte heap). */
		for (size_t heap = 0; heap <= 1; heap++) {
			a = make_tree();
			CHECK(run_shards(counts[c], counts[c], N_BLOCKS * a - 1,
					 (N_BLOCKS - k) * a, heap, NULL) == k);
			CHECK(oldest_gone(k, counts[c], counts[c]));
		}
	}

	/* A quota is a stage of its own, before the global one. */
	a = make_tree();
	quota.max_bytes = N_BLOCKS * a - 1;
	quota.low_bytes = (N_BLOCKS - k) * a;
	CHECK(run_shards(3, 3, 0, 0, 0, &quota) == k);
	CHECK(oldest_gone(k, 3, 3));

	/* Shard 3 of 4 never comes: the others free their share of the
	 * need, the oldest of their own buckets, and nothing of shard 3's. */
	a = make_tree();
	for (unsigned i = 0; i < N_BLOCKS; i++)
		n3 += shard_of(i, 4) == 3;
	present = N_BLOCKS - n3;
	cache = (uint64_t)present * a * 4096 / 3072;
	need = (cache - (N_BLOCKS - k) * a) * 3072 / 4096;
	k = (unsigned)((need + a - 1) / a);
	CHECK(run_shards(4, 3, N_BLOCKS * a - 1, (N_BLOCKS - 137) * a, 0, NULL) == k);
	CHECK(oldest_gone(k, 4, 3));

	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd) != 0)
			failures++;
	}
	return failures ? 1 : 0;
}
