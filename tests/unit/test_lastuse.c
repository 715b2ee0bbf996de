/*
 * Last use (kv/lastuse.h): the rule, the journal's grammar (hostile
 * lines skipped, never fatal), the walk's last_use_ns, and a journal
 * that rewrites itself without losing the newest use of a live block.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <kv/kv.h>

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

static void journal(const char *root)
{
	struct kv_uses_journal *j;
	struct kv_uses *u;
	char path[4096];
	int rootfd = open(root, O_RDONLY | O_DIRECTORY), fd;
	int64_t now = kv_now_ns();

	CHECK(rootfd >= 0);
	CHECK(kv_uses_load(rootfd, &u) == 0 && u == NULL);
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
	CHECK(kv_uses_load(rootfd, &u) == 0 && u != NULL);
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
	int64_t future = kv_now_ns() + 1000000000LL;
	struct kv_uses_journal *j;
	int rootfd = open(root, O_RDONLY | O_DIRECTORY);

	CHECK(kv_uses_journal_open(rootfd, "n2", &j) == 0);
	CHECK(kv_uses_journal_record(j, P1, future) == 0);
	kv_uses_journal_close(j);
	CHECK(kv_walk(root, &o, on_entry, NULL) == 0);
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
	journal(root);
	walk(root);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		failures++;
	return failures ? 1 : 0;
}
