/*
 * Last use (kv/lastuse.h): the rule, the journal's grammar (hostile
 * lines skipped, never fatal), the same text cut into pieces anywhere,
 * journals read to their end past the piece size, the walk's
 * last_use_ns, and a journal that rewrites itself without losing the
 * newest use of a live block.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <kv/kv.h>
#include "store/lastuse.h"

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

#define P1 "m_0123456789ab_r0/abc/de_g0/abcde00000000001.bin"
#define P2 "m_0123456789ab_r0/abc/de_g0/abcde00000000002.bin"

static void grammar(void)
{
	struct kv_uses *u;
	uint64_t bad = 0;
	int64_t now = kv_now_ns();
	char text[8192];
	int n;

	CHECK(kv_uses_new(&u) == 0);
	n = snprintf(text, sizeof(text),
		     "100 " P1 "\n"
		     "300 " P1 "\n"
		     "200 " P1 "\n"
		     "%lld " P2 "\n"		/* too far ahead */
		     "50 " P2 "\n"
		     "x1 " P2 "\n"
		     "0 " P2 "\n"
		     "99999999999999999999 " P2 "\n"
		     "7 ../../etc/passwd\n"
		     "7\n"
		     "\n"
		     "60 " P2,			/* no newline: ignored */
		     (long long)(now + 3600LL * 1000000000LL));
	CHECK(kv_uses_parse(u, text, (size_t)n, &bad) == 0);
	CHECK(kv_uses_count(u) == 2);
	CHECK(kv_uses_get(u, P1) == 300);
	CHECK(kv_uses_get(u, P2) == 50);
	CHECK(bad == 7);
	CHECK(kv_last_use_ns(u, P1, 250) == 300);
	CHECK(kv_last_use_ns(u, P1, 400) == 400);
	CHECK(kv_last_use_ns(NULL, P1, 400) == 400);
	CHECK(kv_uses_add(u, "not/a/block", 5) == -EINVAL);
	/* a line over KV_USES_LINE_MAX is refused */
	memset(text, 'a', sizeof(text));
	text[0] = '1';
	text[1] = ' ';
	text[sizeof(text) - 1] = '\n';
	bad = 0;
	CHECK(kv_uses_parse(u, text, sizeof(text), &bad) == 0 && bad == 1);
	kv_uses_free(u);
}

/* The grammar's text fed in pieces: every cut of it in two, then in
 * pieces of every size, reads as the whole did. */
static void pieces(void)
{
	static const char text[] =
		"100 " P1 "\n"
		"x1 " P2 "\n"
		"300 " P1 "\n"
		"\n"
		"50 " P2 "\n"
		"7 ../../etc/passwd\n"
		"60 " P2;			/* no newline: ignored */
	size_t len = sizeof(text) - 1;

	for (size_t cut = 0; cut <= len; cut++) {
		struct kvi_uses_feed f;
		struct kv_uses *u;

		CHECK(kv_uses_new(&u) == 0);
		kvi_uses_feed_init(&f, u, NULL, NULL);
		CHECK(kvi_uses_feed(&f, text, cut) == 0);
		CHECK(kvi_uses_feed(&f, text + cut, len - cut) == 0);
		CHECK(kv_uses_count(u) == 2 && kv_uses_get(u, P1) == 300 &&
		      kv_uses_get(u, P2) == 50 && f.bad == 3 && f.lines == 6);
		kv_uses_free(u);
	}
	for (size_t step = 1; step < 9; step++) {
		struct kvi_uses_feed f;
		struct kv_uses *u;

		CHECK(kv_uses_new(&u) == 0);
		kvi_uses_feed_init(&f, u, NULL, NULL);
		for (size_t at = 0; at < len; at += step)
			CHECK(kvi_uses_feed(&f, text + at, at + step < len ? step : len - at) == 0);
		CHECK(kv_uses_count(u) == 2 && kv_uses_get(u, P1) == 300 && f.bad == 3);
		kv_uses_free(u);
	}
	/* A line too long to be a use, given a byte at a time, is skipped
	 * without being held; the next line counts. */
	{
		struct kvi_uses_feed f;
		struct kv_uses *u;

		CHECK(kv_uses_new(&u) == 0);
		kvi_uses_feed_init(&f, u, NULL, NULL);
		CHECK(kvi_uses_feed(&f, "1 ", 2) == 0);
		for (int i = 0; i < 3 * KV_USES_LINE_MAX; i++)
			CHECK(kvi_uses_feed(&f, "a", 1) == 0);
		CHECK(f.overlong && f.held == 0);
		CHECK(kvi_uses_feed(&f, "\n400 " P1 "\n", strlen(P1) + 6) == 0);
		CHECK(f.bad == 1 && kv_uses_get(u, P1) == 400);
		kv_uses_free(u);
	}
}

static int only_p2(const char *relpath, void *arg)
{
	(void)arg;
	return !strcmp(relpath, P2);
}

/* A journal longer than any piece read, with a line across a piece's
 * edge and the newest use at its very end behind 300 MiB of NULs (a
 * sparse file: no disk), is read to its end. */
static void long_journal(const char *root)
{
	int rootfd = open(root, O_RDONLY | O_DIRECTORY), fd;
	char path[4096], line[256];
	struct kv_uses *u;
	off_t edge = 1 << 20;
	int n;

	CHECK(system("mkdir -p \"$KV_T/.kvwatch\"") == 0);
	snprintf(path, sizeof(path), "%s/.kvwatch/long.uses", root);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	n = snprintf(line, sizeof(line), "\n200 " P2 "\n");
	CHECK(pwrite(fd, line, (size_t)n, edge - 20) == n);
	CHECK(ftruncate(fd, 300LL << 20) == 0);
	n = snprintf(line, sizeof(line), "\n500 " P1 "\n");
	CHECK(pwrite(fd, line, (size_t)n, 300LL << 20) == n);
	close(fd);
	CHECK(kv_uses_load(rootfd, NULL, NULL, &u) == 0 && u != NULL);
	CHECK(kv_uses_get(u, P1) == 500 && kv_uses_get(u, P2) == 200);
	kv_uses_free(u);
	/* keep() holds what the caller will look up, nothing else */
	CHECK(kv_uses_load(rootfd, only_p2, NULL, &u) == 0 && u != NULL);
	CHECK(kv_uses_count(u) == 1 && kv_uses_get(u, P2) == 200);
	kv_uses_free(u);
	/* a symlink is no journal; a journal that cannot be read fails the load */
	snprintf(line, sizeof(line), "%s/.kvwatch/link.uses", root);
	CHECK(symlink(path, line) == 0);
	CHECK(kv_uses_load(rootfd, NULL, NULL, &u) == 0 && kv_uses_get(u, P1) == 500);
	kv_uses_free(u);
	unlink(line);
	if (geteuid() != 0) {
		CHECK(chmod(path, 0) == 0);
		CHECK(kv_uses_load(rootfd, NULL, NULL, &u) == -EACCES && u == NULL);
		CHECK(strstr(kv_error_detail(), "long.uses") != NULL);
	}
	unlink(path);
	close(rootfd);
}

static void journal(const char *root)
{
	struct kv_uses_journal *j;
	struct kv_uses *u;
	char path[4096];
	int rootfd = open(root, O_RDONLY | O_DIRECTORY), fd;
	int64_t now = kv_now_ns();

	CHECK(rootfd >= 0);
	CHECK(kv_uses_load(rootfd, NULL, NULL, &u) == 0 && u == NULL);
	CHECK(kv_uses_journal_open(rootfd, "../evil", &j) == -EINVAL);
	CHECK(kv_uses_journal_open(rootfd, "n1", &j) == 0);
	/* P1 exists, P2 does not: a rewrite keeps only P1 */
	snprintf(path, sizeof(path), "%s/m_0123456789ab_r0/abc/de_g0", root);
	CHECK(system("mkdir -p \"$KV_T/m_0123456789ab_r0/abc/de_g0\"") == 0);
	snprintf(path, sizeof(path), "%s/" P1, root);
	fd = open(path, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0);
	close(fd);
	for (int i = 0; i < 10000; i++) {
		CHECK(kv_uses_journal_record(j, P1, now - 1000 + i % 7) == 0);
		CHECK(kv_uses_journal_record(j, P2, now - 2000) == 0);
	}
	CHECK(kv_uses_journal_last(j, P1) == now - 1000 + 6);
	kv_uses_journal_close(j);
	snprintf(path, sizeof(path), "%s/.kvwatch/n1.uses", root);
	{
		struct stat st;

		/* 20,000 lines written, a rewrite or more on the way */
		CHECK(stat(path, &st) == 0 && st.st_size < 20000LL * 60);
	}
	CHECK(kv_uses_load(rootfd, NULL, NULL, &u) == 0 && u != NULL);
	CHECK(kv_uses_get(u, P1) == now - 1000 + 6);
	kv_uses_free(u);
	close(rootfd);
}

static int64_t walked_last_use;

static int on_entry(const struct kv_walk_entry *e, void *arg)
{
	(void)arg;
	if (e->kind == KV_WALK_BLOCK && !strcmp(e->path, P1))
		walked_last_use = e->last_use_ns;
	return 0;
}

static void walk(const char *root)
{
	struct kv_walk_opts o = { .rank = -1 };
	struct kv_walk_opts shard = { .rank = 0, .model = "m", .shard_index = 1, .shard_count = 2 };
	int64_t future = kv_now_ns() + 1000000000LL;
	struct kv_uses_journal *j;
	int rootfd = open(root, O_RDONLY | O_DIRECTORY);

	CHECK(kv_uses_journal_open(rootfd, "n2", &j) == 0);
	CHECK(kv_uses_journal_record(j, P1, future) == 0);
	kv_uses_journal_close(j);
	CHECK(kv_walk(root, &o, on_entry, NULL) == 0);
	CHECK(walked_last_use == future);
	/* A walk of one model, rank and shard holds the uses it reaches
	 * (bucket "abc" is shard 1 of 2). */
	walked_last_use = 0;
	CHECK(kv_walk(root, &shard, on_entry, NULL) == 0);
	CHECK(walked_last_use == future);
	close(rootfd);
}

int main(void)
{
	char root[] = "/tmp/kv-lastuse.XXXXXX", cmd[256];

	if (!mkdtemp(root))
		return 1;
	setenv("KV_T", root, 1);
	grammar();
	pieces();
	long_journal(root);
	journal(root);
	walk(root);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		failures++;
	return failures ? 1 : 0;
}
