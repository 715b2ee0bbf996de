/*
 * kv_walk over small trees built here: every kind of entry, symlinks and
 * mount points never followed, unreadable dirs reported, filters, post-
 * order bucket dirs, early stop, and the same answer from 1 and 4
 * threads.  As root the walk runs as uid 65534, since root reads any dir.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <kv/kv.h>

#define MD	"org_model_0123456789ab"
#define OTHER	"other_model_fedcba987654"
#define MAX_SEEN 4096

static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

struct seen {
	char path[1100];
	enum kv_walk_kind kind;
	struct kv_block_ref ref;
	int has_rank;
	uint64_t size_bytes;
	int64_t mtime_ns;
	int err;
};

static struct seen seen[MAX_SEEN];
static int nseen;
static char root[256], outside[256];
static int have_mount;

static int collect(const struct kv_walk_entry *e, void *arg)
{
	struct seen *s;
	struct stat st;
	const char *slash = strrchr(e->path, '/');

	(void)arg;
	if (nseen == MAX_SEEN)
		return 99;
	s = &seen[nseen++];
	snprintf(s->path, sizeof(s->path), "%s", e->path);
	s->kind = e->kind;
	s->ref = e->ref;
	s->has_rank = e->has_rank;
	s->size_bytes = e->size_bytes;
	s->mtime_ns = e->mtime_ns;
	s->err = e->err;
	/* name is the last component, and dirfd is the dir that holds it. */
	CHECK(!strcmp(e->name, slash ? slash + 1 : e->path));
	if (e->kind != KV_WALK_ERROR) {
		CHECK(fstatat(e->dirfd, e->name, &st, AT_SYMLINK_NOFOLLOW) == 0);
		if (e->kind == KV_WALK_BLOCK)
			CHECK((uint64_t)st.st_size == e->size_bytes || !e->size_bytes);
	}
	return 0;
}

static int walk(unsigned threads, const char *model, int rank, unsigned flags)
{
	struct kv_walk_opts o = { .threads = threads, .model = model, .rank = rank,
				  .flags = flags };

	nseen = 0;
	return kv_walk(root, &o, collect, NULL);
}

static struct seen *find(const char *path)
{
	for (int i = 0; i < nseen; i++)
		if (!strcmp(seen[i].path, path))
			return &seen[i];
	return NULL;
}

static int index_of(const char *path, enum kv_walk_kind kind)
{
	for (int i = 0; i < nseen; i++)
		if (seen[i].kind == kind && !strcmp(seen[i].path, path))
			return i;
	return -1;
}

static int kind_is(const char *path, enum kv_walk_kind kind)
{
	struct seen *s = find(path);

	if (!s)
		fprintf(stderr, "not reported: %s\n", path);
	else if (s->kind != kind)
		fprintf(stderr, "%s: kind %d, want %d\n", path, s->kind, kind);
	return s && s->kind == kind;
}

static int count(enum kv_walk_kind kind)
{
	int n = 0;

	for (int i = 0; i < nseen; i++)
		n += seen[i].kind == kind;
	return n;
}

static void must(int ok, const char *what)
{
	if (!ok) {
		perror(what);
		exit(1);
	}
}

static void mkfile(const char *rel, size_t size)
{
	char path[PATH_MAX], buf[4096] = { 0 };
	int fd;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	must(fd >= 0, path);
	while (size) {
		size_t n = size < sizeof(buf) ? size : sizeof(buf);

		must(write(fd, buf, n) == (ssize_t)n, path);
		size -= n;
	}
	close(fd);
}

static void mkdirs(const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *p = path + strlen(root) + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			must(mkdir(path, 0755) == 0 || errno == EEXIST, path);
			*p = '/';
		}
	}
	must(mkdir(path, 0755) == 0 || errno == EEXIST, path);
}

static void mklink(const char *target, const char *rel)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	must(symlink(target, path) == 0, path);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static int chmod_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_D || flag == FTW_DNR)
		chmod(path, 0755);
	(void)st;
	return 0;
}

static void rm_tree(const char *dir)
{
	nftw(dir, chmod_one, 16, FTW_PHYS);
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void build_tree(void)
{
	char path[PATH_MAX];

	mkdirs(MD);
	mkfile(MD "/config.json", 100);
	mkfile(MD "/notes.txt", 1);
	mkfile(MD "/config.json_5f3a.tmp", 1);
	mkdirs(MD "_r0/012/34_g0");
	mkdirs(MD "_r0/012/34_g1");
	mkfile(MD "_r0/012/34_g0/0123456789abcdef.bin", 10);
	mkfile(MD "_r0/012/34_g1/0123456789abcdef.bin", 20);
	mkfile(MD "_r0/012/34_g0/0123456789abcdef.bin_x1y2.tmp", 3);
	mkfile(MD "_r0/012/34_g0/ffff0.bin", 1);		/* wrong bucket */
	mkfile(MD "_r0/012/34_g0/0123456789ABCDEF.bin", 1);	/* uppercase */
	mkdirs(MD "_r0/012/34_g0/01234aaaaa.bin");		/* a dir */
	mkfile(MD "_r0/012/34_g0/01234aaaaa.bin/01234bbbbb.bin", 1);
	mkdirs(MD "_r0/zzz");
	mkfile(MD "_r0/zzz/x", 1);
	mkdirs(MD "_r0/abc");		/* made unreadable below */
	mkdirs(MD "_r1/fed/cb_g0");
	mkfile(MD "_r1/fed/cb_g0/fedcba9876543210.bin", 30);
	mkdirs(MD "_r1/fed/cc_g0");	/* empty leaf dirs, and tops of them */
	mkdirs(MD "_r1/ee0/aa_g0");
	mkdirs(MD "_r1/ee0/ab_g1");
	mkdirs(MD "_r1/ee1");
	mkdirs(OTHER "_r0/aaa/bb_g2");
	mkfile(OTHER "_r0/aaa/bb_g2/aaabb11111.bin", 40);
	mkfile("README", 5);

	/* Outside the root: a tree that looks like buckets, reached only
	 * through symlinks. */
	snprintf(path, sizeof(path), "%s/fed", outside);
	must(mkdir(path, 0755) == 0, path);
	snprintf(path, sizeof(path), "%s/fed/cb_g0", outside);
	must(mkdir(path, 0755) == 0, path);
	snprintf(path, sizeof(path), "%s/cb_g0", outside);
	must(mkdir(path, 0755) == 0, path);
	snprintf(path, sizeof(path), "%s/cb_g0/fedcb00000.bin", outside);
	must(close(open(path, O_WRONLY | O_CREAT, 0644)) == 0, path);
	snprintf(path, sizeof(path), "%s/fed/cb_g0/fedcb11111.bin", outside);
	must(close(open(path, O_WRONLY | O_CREAT, 0644)) == 0, path);
	mklink(outside, "rootlink");
	mklink(outside, MD "_r1/eee");
	snprintf(path, sizeof(path), "%s/fed", outside);
	mklink(path, MD "_r1/fef");
	mklink(outside, MD "_r1/fed/cb_g1");
	snprintf(path, sizeof(path), "%s/cb_g0/fedcb00000.bin", outside);
	mklink(path, MD "_r1/fed/cb_g0/fedcb00000.bin");
	mklink(outside, MD "_r2");

	/* A mount point inside a rank dir, in a mount namespace of our own. */
	snprintf(path, sizeof(path), "%s/%s_r1/ddd", root, MD);
	must(mkdir(path, 0755) == 0, path);
	if (getuid() == 0 && unshare(CLONE_NEWNS) == 0 &&
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
	    mount("tmpfs", path, "tmpfs", 0, "size=1m,mode=0755") == 0) {
		have_mount = 1;
		mkdirs(MD "_r1/ddd/ee_g0");
		mkfile(MD "_r1/ddd/ee_g0/dddee00000.bin", 1);
	} else {
		fprintf(stderr, "note: no mount namespace; mount point case not run\n");
	}
}

static void test_kinds(unsigned threads)
{
	struct seen *s;

	CHECK(walk(threads, NULL, -1, 0) == 0);
	CHECK(kind_is(MD "/config.json", KV_WALK_CONFIG));
	CHECK(kind_is(MD "/notes.txt", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "/config.json_5f3a.tmp", KV_WALK_TEMP));
	CHECK(kind_is(MD "_r0/012/34_g0/0123456789abcdef.bin", KV_WALK_BLOCK));
	CHECK(kind_is(MD "_r0/012/34_g1/0123456789abcdef.bin", KV_WALK_BLOCK));
	CHECK(kind_is(MD "_r0/012/34_g0/0123456789abcdef.bin_x1y2.tmp", KV_WALK_TEMP));
	CHECK(kind_is(MD "_r0/012/34_g0/ffff0.bin", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "_r0/012/34_g0/0123456789ABCDEF.bin", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "_r0/012/34_g0/01234aaaaa.bin", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "_r0/zzz", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "_r1/fed/cb_g0/fedcba9876543210.bin", KV_WALK_BLOCK));
	CHECK(kind_is(OTHER "_r0/aaa/bb_g2/aaabb11111.bin", KV_WALK_BLOCK));
	CHECK(kind_is("README", KV_WALK_FOREIGN));
	/* Symlinks of every shape are foreign and never descended. */
	CHECK(kind_is("rootlink", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "_r1/eee", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "_r1/fef", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "_r1/fed/cb_g1", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "_r1/fed/cb_g0/fedcb00000.bin", KV_WALK_FOREIGN));
	CHECK(kind_is(MD "_r2", KV_WALK_FOREIGN));
	if (have_mount)
		CHECK(kind_is(MD "_r1/ddd", KV_WALK_FOREIGN));
	CHECK(count(KV_WALK_BLOCK) == 4);
	CHECK(count(KV_WALK_DIR) == 0);
	for (int i = 0; i < nseen; i++) {
		const char *p = seen[i].path;

		CHECK(!strstr(p, "fedcb11111") && !strstr(p, "01234bbbbb") &&
		      !strstr(p, "dddee") && !strstr(p, "zzz/x"));
		CHECK(strncmp(p, "rootlink/", 9) && !strstr(p, "_r1/eee/") &&
		      !strstr(p, "_r2/"));
	}

	s = find(MD "_r0/012/34_g1/0123456789abcdef.bin");
	if (s) {
		CHECK(!strcmp(s->ref.model_dir, MD));
		CHECK(!strcmp(s->ref.fingerprint, "0123456789ab"));
		CHECK(s->ref.rank == 0 && s->ref.group == 1 && s->has_rank);
		CHECK(!strcmp(s->ref.hash, "0123456789abcdef"));
		CHECK(s->size_bytes == 20 && s->mtime_ns > 0);
	}
	s = find(MD "_r1/fed/cb_g0/fedcba9876543210.bin");
	if (s)
		CHECK(s->ref.rank == 1 && s->size_bytes == 30);
	s = find(MD "/config.json");
	if (s)
		CHECK(!strcmp(s->ref.model_dir, MD) && !s->has_rank);
	s = find(MD "_r0/012/34_g0/0123456789abcdef.bin_x1y2.tmp");
	if (s)
		CHECK(!strcmp(s->ref.model_dir, MD) && s->has_rank && s->ref.rank == 0);
}

static void test_dirs_filters_stop(void)
{
	struct seen *s;
	int leaf, leaf2, top;

	/* Bucket dirs read empty come after what they hold; a top bucket
	 * only when it holds nothing but such leaf dirs. */
	CHECK(walk(1, NULL, -1, KV_WALK_DIRS) == 0);
	leaf = index_of(MD "_r1/ee0/aa_g0", KV_WALK_DIR);
	top = index_of(MD "_r1/ee0", KV_WALK_DIR);
	leaf2 = index_of(MD "_r1/ee0/ab_g1", KV_WALK_DIR);
	CHECK(leaf >= 0 && leaf2 >= 0 && top > leaf && top > leaf2);
	CHECK(index_of(MD "_r1/ee1", KV_WALK_DIR) >= 0);
	CHECK(index_of(MD "_r1/fed/cc_g0", KV_WALK_DIR) >= 0);
	CHECK(index_of(MD "_r1/fed", KV_WALK_DIR) < 0);
	CHECK(index_of(MD "_r1/fed/cb_g0", KV_WALK_DIR) < 0);
	CHECK(index_of(MD "_r0/012/34_g0", KV_WALK_DIR) < 0);
	CHECK(index_of(MD "_r0/012/34_g1", KV_WALK_DIR) < 0);
	CHECK(index_of(MD "_r0/012", KV_WALK_DIR) < 0);
	CHECK(index_of(MD "_r0/zzz", KV_WALK_DIR) < 0);
	CHECK(index_of(MD "_r0", KV_WALK_DIR) < 0);
	s = find(MD "_r1/ee0/aa_g0");
	if (s)
		CHECK(s->mtime_ns > 0 && s->ref.rank == 1 && s->has_rank);

	/* A model name, a model dir, a rank. */
	CHECK(walk(2, "other/model", -1, 0) == 0);
	CHECK(count(KV_WALK_BLOCK) == 1 && kind_is(OTHER "_r0/aaa/bb_g2/aaabb11111.bin",
						   KV_WALK_BLOCK));
	CHECK(find("README") == NULL && find(MD "/config.json") == NULL);
	CHECK(walk(2, MD, -1, 0) == 0);
	CHECK(count(KV_WALK_BLOCK) == 3 && count(KV_WALK_CONFIG) == 1);
	CHECK(walk(2, "org_model", -1, 0) == 0);
	CHECK(count(KV_WALK_BLOCK) == 3);
	CHECK(walk(2, "no_such_model", -1, 0) == 0 && nseen == 0);
	CHECK(walk(2, NULL, 1, 0) == 0);
	CHECK(count(KV_WALK_BLOCK) == 1 &&
	      kind_is(MD "_r1/fed/cb_g0/fedcba9876543210.bin", KV_WALK_BLOCK));
	CHECK(count(KV_WALK_CONFIG) == 1 && find("README") == NULL);

	/* Names only. */
	CHECK(walk(2, NULL, -1, KV_WALK_NO_STAT) == 0);
	CHECK(count(KV_WALK_BLOCK) == 4);
	s = find(MD "_r0/012/34_g1/0123456789abcdef.bin");
	CHECK(s && s->size_bytes == 0 && s->kind == KV_WALK_BLOCK);
	CHECK(kind_is(MD "_r1/eee", KV_WALK_FOREIGN));
}

static int stop_after_one(const struct kv_walk_entry *e, void *arg)
{
	(void)e;
	(*(int *)arg)++;
	return 7;
}

static void test_stop_and_bad_roots(void)
{
	struct kv_walk_opts o = { .threads = 4, .rank = -1 };
	char path[PATH_MAX];
	int calls = 0;

	CHECK(kv_walk(root, &o, stop_after_one, &calls) == 7);
	CHECK(calls == 1);
	snprintf(path, sizeof(path), "%s/no-such-dir", root);
	CHECK(kv_walk(path, &o, collect, NULL) == -ENOENT);
	snprintf(path, sizeof(path), "%s/README", root);
	CHECK(kv_walk(path, &o, collect, NULL) == -ENOTDIR);
}

/* Run as a user the permission bits apply to. */
static void test_unreadable(void)
{
	struct seen *s;
	int before = failures;

	CHECK(walk(2, MD, -1, 0) == 0);
	s = find(MD "_r0/abc");
	CHECK(s && s->kind == KV_WALK_ERROR && s->err == -EACCES);
	if (s)
		CHECK(!strcmp(s->ref.model_dir, MD) && s->has_rank);
	CHECK(count(KV_WALK_BLOCK) == 3);
	if (failures != before)
		exit(1);
}

/* A bigger tree: every block once, whatever the thread count. */
static void test_many(void)
{
	enum { N = 900 };
	char rel[256];
	uint64_t want = 0, got;

	for (int i = 0; i < N; i++) {
		unsigned h = (unsigned)i * 2654435761u;

		snprintf(rel, sizeof(rel), "many_0000000000ff_r%d/%03x/%02x_g0", i % 3,
			 h >> 20, (h >> 12) & 0xff);
		mkdirs(rel);
		snprintf(rel + strlen(rel), sizeof(rel) - strlen(rel), "/%03x%02x%08x.bin",
			 h >> 20, (h >> 12) & 0xff, (unsigned)i);
		mkfile(rel, (size_t)(i % 7));
		want += (uint64_t)(i % 7);
	}
	for (unsigned t = 1; t <= 8; t *= 2) {
		CHECK(walk(t, "many", -1, 0) == 0);
		CHECK(count(KV_WALK_BLOCK) == N && nseen == N);
		got = 0;
		for (int i = 0; i < nseen; i++)
			got += seen[i].size_bytes;
		CHECK(got == want);
	}
}

static int seen_cmp(const void *a, const void *b)
{
	const struct seen *x = a, *y = b;
	int c = strcmp(x->path, y->path);

	return c ? c : (int)x->kind - (int)y->kind;
}

/* The top bucket a path passes through, if it reaches one: the
 * component after a rank dir (v1) or after a llmd-v0 dtype dir. */
static const char *top_bucket_of(const char *path, char *buf)
{
	const char *p = path;

	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);

		if (n == 3 && p != path) {
			memcpy(buf, p, 3);
			buf[3] = '\0';
			if (kv_layout_hash_bucket_parse(buf) == 0)
				return buf;
		}
		if (!slash)
			return NULL;
		p = slash + 1;
	}
}

/* Shards split the walk: each bucket in exactly one shard (the layout's
 * rule), what lies outside the buckets in shard 0 only, and together
 * exactly the entries of the unfiltered walk, in both layouts. */
static void test_shards(void)
{
	static const unsigned counts[] = { 1, 2, 3, 4, 7, 4096 };
	static struct seen all[MAX_SEEN], got[MAX_SEEN];
	struct kv_walk_opts o = { .threads = 2, .rank = -1 };
	int nall, ngot;
	char buf[4], buf2[PATH_MAX];

	mkdirs("org/m/block_size_16_blocks_per_file_1/tp_1_pp_size_1_pcp_size_1/"
	       "rank_0/bfloat16/fed/cb_g0");
	mkfile("org/m/block_size_16_blocks_per_file_1/tp_1_pp_size_1_pcp_size_1/"
	       "rank_0/bfloat16/fed/cb_g0/fedcb22222.bin", 5);
	mkdirs("org/m/block_size_16_blocks_per_file_1/tp_1_pp_size_1_pcp_size_1/"
	       "rank_0/bfloat16/001/23");
	mkfile("org/m/block_size_16_blocks_per_file_1/tp_1_pp_size_1_pcp_size_1/"
	       "rank_0/bfloat16/001/23/00123aaaaa.bin", 5);
	CHECK(walk(2, NULL, -1, KV_WALK_DIRS) == 0);
	nall = nseen;
	memcpy(all, seen, (size_t)nseen * sizeof(*seen));
	qsort(all, (size_t)nall, sizeof(*all), seen_cmp);
	CHECK(find("org/m/block_size_16_blocks_per_file_1/tp_1_pp_size_1_pcp_size_1/"
		   "rank_0/bfloat16/001/23/00123aaaaa.bin") != NULL);
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		ngot = 0;
		for (unsigned i = 0; i < counts[c]; i++) {
			o.shard_index = i;
			o.shard_count = counts[c];
			o.flags = KV_WALK_DIRS;
			nseen = 0;
			CHECK(kv_walk(root, &o, collect, NULL) == 0);
			for (int k = 0; k < nseen; k++) {
				const char *top = top_bucket_of(seen[k].path, buf);

				if (top)
					CHECK(kv_layout_bucket_shard(top, counts[c]) == (int)i);
				else
					CHECK(i == 0 || seen[k].kind == KV_WALK_ERROR);
				if (ngot < MAX_SEEN)
					got[ngot++] = seen[k];
			}
		}
		qsort(got, (size_t)ngot, sizeof(*got), seen_cmp);
		CHECK(ngot == nall);
		for (int k = 0; k < ngot && k < nall; k++)
			CHECK(!seen_cmp(&got[k], &all[k]));
	}
	o.shard_count = 4;
	o.shard_index = 4;
	CHECK(kv_walk(root, &o, collect, NULL) == -EINVAL);
	o.shard_count = KV_LAYOUT_TOP_BUCKETS + 1;
	o.shard_index = 0;
	CHECK(kv_walk(root, &o, collect, NULL) == -EINVAL);
	snprintf(buf2, sizeof(buf2), "%s/org", root);
	rm_tree(buf2);
}

int main(void)
{
	/* tmpfs where there is one: thousands of small dirs, no disk. */
	struct stat st;
	int shm = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) &&
		  access("/dev/shm", W_OK) == 0;
	char tmpl[64], path[PATH_MAX], *base;

	snprintf(tmpl, sizeof(tmpl), "%s/test_walk.XXXXXX", shm ? "/dev/shm" : "/tmp");
	base = mkdtemp(tmpl);
	pid_t pid;
	int status;

	must(base != NULL, "mkdtemp");
	must(chmod(base, 0755) == 0, base);
	snprintf(root, sizeof(root), "%s/root", base);
	snprintf(outside, sizeof(outside), "%s/outside", base);
	must(mkdir(root, 0755) == 0 && mkdir(outside, 0755) == 0, root);
	build_tree();

	test_kinds(1);
	test_kinds(4);
	test_dirs_filters_stop();
	test_stop_and_bad_roots();
	test_many();
	test_shards();

	snprintf(path, sizeof(path), "%s/%s_r0/abc", root, MD);
	must(chmod(path, 0) == 0, path);
	pid = fork();
	must(pid >= 0, "fork");
	if (pid == 0) {
		if (getuid() == 0 && (setgroups(0, NULL) || setgid(65534) || setuid(65534)))
			_exit(77);
		failures = 0;
		test_unreadable();
		_exit(failures ? 1 : 0);
	}
	must(waitpid(pid, &status, 0) == pid, "waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status) == 1) {
		fprintf(stderr, "unreadable-dir case failed\n");
		failures++;
	} else if (WEXITSTATUS(status) == 77) {
		fprintf(stderr, "note: cannot drop root; unreadable-dir case not run\n");
	}

	if (have_mount) {
		snprintf(path, sizeof(path), "%s/%s_r1/ddd", root, MD);
		umount(path);
	}
	rm_tree(base);
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	return 0;
}
