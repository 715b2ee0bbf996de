/*
 * kvtree: the benchmarks' tree of N blocks in the vLLM / llm-d layout,
 * built fast enough for millions (bench/evict.sh, events.sh, scale.sh,
 * latfs.sh).
 *
 *   kvtree [-s SPREAD_S] [-b BUCKETS] [-B BYTES] [-d PCT] [-f FILL] [-x]
 *          [-p | -r | -c] ROOT N
 *
 * Two models (real config.json, llm-d schema, tp=2), blocks dealt to
 * their four rank dirs in turn, random 64-bit hashes from a fixed seed:
 * the same arguments give the same tree.  Every block has its own atime
 * (= mtime), spread over SPREAD_S seconds (default 86400) ending 30 days
 * before 2026-09-21, in an order unrelated to directory order.
 *
 *   -b BUCKETS  draw the five-digit bucket prefix from BUCKETS values
 *               spread over all 2^20 (denser dirs); 0 (default): random
 *   -B BYTES    a block's payload (default 8192)
 *   -d PCT      only the oldest PCT% of the blocks carry it (default
 *               100); the rest are empty and hot, read in the last few
 *               seconds, as a cache's working set is: millions of blocks
 *               fit in RAM, every walk still stats them all, and an
 *               eviction frees bytes oldest first among the others
 *   -f FILL     top the filesystem up to FILL (0..1) with ROOT/filler
 *   -x          set user.kv.xxh3 on every block (for kvls --verify)
 *   -p          print "atime_ns path" per block
 *   -r          restore: recreate the blocks that are gone, set every
 *               block's times again (a fresh tree without a rebuild)
 *   -c          check: print "deleted K precision P", P the fraction of
 *               the K missing blocks that are among the K oldest
 *
 * Exit: 0 done, 2 usage, 3 failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <kv/kv.h>

#define NRANKS		4
#define SEED		20261122u
#define END_NS		((1790000000LL - 30 * 86400LL) * 1000000000LL)

static const char *const model_cfg[2] = {
	"{\"model_name\":\"meta-llama/Llama-3.1-8B\",\"hash_block_size\":16,"
	"\"gpu_blocks_per_file\":16,\"tp_size\":2,\"pp_size\":1,\"pcp_size\":1,"
	"\"dcp_size\":1,\"dtype\":\"bfloat16\",\"inference_engine\":\"vllm\","
	"\"kv_cache_groups\":[{\"block_size\":16,\"layer_names\":[\"l0\"]}]}",
	"{\"model_name\":\"Qwen/Qwen3-8B\",\"hash_block_size\":16,"
	"\"gpu_blocks_per_file\":16,\"tp_size\":2,\"pp_size\":1,\"pcp_size\":1,"
	"\"dcp_size\":1,\"dtype\":\"bfloat16\",\"inference_engine\":\"vllm\","
	"\"kv_cache_groups\":[{\"block_size\":16,\"layer_names\":[\"l0\"]}]}",
};

enum mode { BUILD, MANIFEST, RESTORE, CHECK };

struct tree {
	int rootfd;
	enum mode mode;
	uint64_t n, spread_s, buckets, with_payload;
	size_t payload_bytes;
	int xattr;
	char model_dir[2][KV_NAME_MAX + 1];
	char *payload;
	uint64_t sum_payload, sum_empty;	/* xxh3 of each kind of block */
	uint32_t *age;				/* block -> rank by atime */
	int64_t now_ns;				/* when the hot blocks were read */
	uint64_t rng;
	uint64_t made_dirs, made_blocks;
};

static void die(const char *what, const char *subject, int err)
{
	fprintf(stderr, "kvtree: %s '%s': %s\n", what, subject, kv_strerror(err));
	exit(3);
}

static void usage(void)
{
	fputs("usage: kvtree [-s SPREAD_S] [-b BUCKETS] [-B BYTES] [-d PCT] [-f FILL] [-x]\n"
	      "              [-p | -r | -c] ROOT N\n", stderr);
	exit(2);
}

static uint64_t next(struct tree *t)
{
	uint64_t z = (t->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t parse_u64(const char *s, uint64_t max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || v > max)
		usage();
	return v;
}

/* mkdir -p of the dirs of relpath below the root. */
static void make_parents(struct tree *t, const char *relpath)
{
	char dir[4 * (KV_NAME_MAX + 1)];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", relpath);
	for (slash = strchr(dir, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		if (mkdirat(t->rootfd, dir, 0755) == 0)
			t->made_dirs++;
		else if (errno != EEXIST)
			die("cannot create", dir, -errno);
		*slash = '/';
	}
}

static void make_block(struct tree *t, const char *path, int payload, int64_t t_ns)
{
	struct timespec ts[2] = {
		{ t_ns / 1000000000LL, t_ns % 1000000000LL },
		{ t_ns / 1000000000LL, t_ns % 1000000000LL },
	};
	int fd = openat(t->rootfd, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	int err;

	if (fd < 0 && errno == ENOENT) {
		make_parents(t, path);
		fd = openat(t->rootfd, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	}
	if (fd < 0)
		die("cannot create", path, -errno);
	if (payload && (err = kv_write_full(fd, t->payload, t->payload_bytes)) < 0)
		die("cannot write", path, err);
	if (t->xattr &&
	    (err = kv_integrity_set(fd, payload ? t->sum_payload : t->sum_empty)) < 0)
		die("cannot set the checksum of", path, err);
	if (futimens(fd, ts) < 0)
		die("cannot set the times of", path, -errno);
	close(fd);
	t->made_blocks++;
}

/* The block's path and atime, the same for every mode. */
static void block_at(struct tree *t, uint64_t i, char *path, size_t len, int64_t *t_ns)
{
	uint64_t step = t->spread_s * 1000000000ull / t->n, h = next(t), r = next(t);
	unsigned rank = (unsigned)(i % NRANKS);
	char hash[17];
	int err;

	if (!step)
		step = 1;
	if (t->buckets)
		h = (h & ((1ull << 44) - 1)) |
		    (next(t) % t->buckets * ((1ull << 20) / t->buckets)) << 44;
	snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)h);
	err = kv_layout_block_path(t->model_dir[rank / 2], rank % 2, 0, hash, path, len);
	if (err)
		die("cannot compose a path for", hash, err);
	if (t->age[i] < t->with_payload)
		*t_ns = END_NS - (int64_t)(t->spread_s * 1000000000ull) +
			(int64_t)(t->age[i] * step + r % step);
	else
		*t_ns = t->now_ns - (int64_t)(t->n - t->age[i]) * 1000;
}

static void fill_to(struct tree *t, double fill)
{
	struct statvfs sv;
	long long total, used, want;
	int fd;

	if (fstatvfs(t->rootfd, &sv) < 0)
		die("cannot statvfs", ".", -errno);
	total = (long long)((sv.f_blocks - sv.f_bfree + sv.f_bavail) * sv.f_frsize);
	used = (long long)((sv.f_blocks - sv.f_bfree) * sv.f_frsize);
	want = (long long)((double)total * fill) - used;
	if (want <= 0)
		return;
	fd = openat(t->rootfd, "filler", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		die("cannot create", "filler", -errno);
	if ((errno = posix_fallocate(fd, 0, want)))
		die("cannot allocate", "filler", -errno);
	close(fd);
}

static void models(struct tree *t)
{
	for (int m = 0; m < 2; m++) {
		struct kv_config *cfg;
		int err = kv_config_parse(model_cfg[m], strlen(model_cfg[m]), &cfg);

		if (!err && (t->mode == BUILD || t->mode == RESTORE))
			err = kv_config_ensure_model_dir(t->rootfd, cfg, t->model_dir[m],
							 sizeof(t->model_dir[m]));
		else if (!err)
			err = kv_config_model_dir(cfg, t->model_dir[m], sizeof(t->model_dir[m]));
		if (err)
			die("cannot write the config of", m ? "Qwen/Qwen3-8B" :
			    "meta-llama/Llama-3.1-8B", err);
		kv_config_free(cfg);
	}
}

/* Ranks by atime, a random permutation independent of the hashes. */
static void ages(struct tree *t)
{
	t->age = malloc(t->n * sizeof(*t->age));
	if (!t->age)
		die("cannot allocate", "ages", -ENOMEM);
	for (uint64_t i = 0; i < t->n; i++)
		t->age[i] = (uint32_t)i;
	for (uint64_t i = t->n - 1; i > 0; i--) {
		uint64_t j = next(t) % (i + 1);
		uint32_t a = t->age[i];

		t->age[i] = t->age[j];
		t->age[j] = a;
	}
}

int main(int argc, char **argv)
{
	struct tree t = { .spread_s = 86400, .payload_bytes = 8192, .mode = BUILD };
	char path[4 * (KV_NAME_MAX + 1)];
	uint64_t pct = 100, missing = 0, hits = 0;
	unsigned char *gone = NULL;
	struct timespec now;
	double fill = 0;
	int opt;

	while ((opt = getopt(argc, argv, "s:b:B:d:f:xprc")) != -1) {
		switch (opt) {
		case 's': t.spread_s = parse_u64(optarg, 10ull * 365 * 86400); break;
		case 'b': t.buckets = parse_u64(optarg, 1u << 20); break;
		case 'B': t.payload_bytes = parse_u64(optarg, 1u << 30); break;
		case 'd': pct = parse_u64(optarg, 100); break;
		case 'f':
			fill = atof(optarg);
			if (fill < 0 || fill >= 1)
				usage();
			break;
		case 'x': t.xattr = 1; break;
		case 'p': t.mode = MANIFEST; break;
		case 'r': t.mode = RESTORE; break;
		case 'c': t.mode = CHECK; break;
		default: usage();
		}
	}
	if (argc - optind != 2)
		usage();
	t.n = parse_u64(argv[optind + 1], UINT32_MAX);
	if (!t.n)
		usage();
	t.with_payload = t.n * pct / 100;
	t.rng = SEED;
	if (clock_gettime(CLOCK_REALTIME, &now) < 0)
		die("cannot read", "the clock", -errno);
	t.now_ns = now.tv_sec * 1000000000LL + now.tv_nsec;
	if (t.mode == BUILD && mkdir(argv[optind], 0755) < 0 && errno != EEXIST)
		die("cannot create", argv[optind], -errno);
	t.rootfd = open(argv[optind], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t.rootfd < 0)
		die("cannot open", argv[optind], -errno);
	t.payload = calloc(1, t.payload_bytes + 1);
	if (!t.payload)
		die("cannot allocate", "payload", -ENOMEM);
	t.sum_payload = kv_xxh3(t.payload, t.payload_bytes);
	t.sum_empty = kv_xxh3(t.payload, 0);
	models(&t);
	ages(&t);
	if (t.mode == CHECK && !(gone = calloc(t.n / 8 + 1, 1)))
		die("cannot allocate", "bitmap", -ENOMEM);

	for (uint64_t i = 0; i < t.n; i++) {
		int payload = t.age[i] < t.with_payload;
		struct timespec ts[2];
		int64_t t_ns;

		block_at(&t, i, path, sizeof(path), &t_ns);
		switch (t.mode) {
		case BUILD:
			make_block(&t, path, payload, t_ns);
			break;
		case MANIFEST:
			printf("%lld %s\n", (long long)t_ns, path);
			break;
		case RESTORE:
			ts[0].tv_sec = ts[1].tv_sec = t_ns / 1000000000LL;
			ts[0].tv_nsec = ts[1].tv_nsec = t_ns % 1000000000LL;
			if (utimensat(t.rootfd, path, ts, AT_SYMLINK_NOFOLLOW) == 0)
				break;
			if (errno != ENOENT)
				die("cannot set the times of", path, -errno);
			make_block(&t, path, payload, t_ns);
			break;
		case CHECK:
			if (faccessat(t.rootfd, path, F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
				if (errno != ENOENT)
					die("cannot check", path, -errno);
				gone[i / 8] |= (unsigned char)(1u << (i % 8));
				missing++;
			}
			break;
		}
	}
	if (t.mode == BUILD && fill > 0)
		fill_to(&t, fill);
	if (t.mode == BUILD || t.mode == RESTORE)
		fprintf(stderr, "kvtree: made %llu blocks and %llu dirs\n",
			(unsigned long long)t.made_blocks, (unsigned long long)t.made_dirs);
	if (t.mode == CHECK) {
		for (uint64_t i = 0; i < t.n; i++)
			if ((gone[i / 8] >> (i % 8) & 1) && t.age[i] < missing)
				hits++;
		printf("deleted %llu precision %.4f\n", (unsigned long long)missing,
		       missing ? (double)hits / (double)missing : 0.0);
	}
	if (fflush(stdout) == EOF || ferror(stdout))
		die("cannot write", "stdout", -EIO);
	free(gone);
	free(t.age);
	free(t.payload);
	close(t.rootfd);
	return 0;
}
