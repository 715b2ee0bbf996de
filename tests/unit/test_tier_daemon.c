/* The daemon tier's batches through a kvoffd started here: each request
 * answered as the tier's lone calls answer it (bytes, sizes, misses, a
 * block over the slot size, a short buffer, tails, bad keys, runs that
 * change model, rank, group or op, a next() that has none for a while),
 * the same counters, and a lost daemon failing every request gathered
 * and the batch.  Skips (77) without a built kvoffd. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <kv/kv.h>
#include <kv/tier.h>
#include "check.h"

#define SLOT	65536
#define N	300
#define NREQ	(N + 16)

static const char *const models[] = { "org_model_0123456789ab", "org_other_ba9876543210" };
static char keys[N][256], absent[256];
static pid_t daemon_pid;
static unsigned char *data[N];
static size_t lens[N];

static void make_blocks(void)
{
	unsigned long long x = (unsigned long long)kv_now_ns() | 1;

	/* Runs of 40 keys by model, rank and group: the batch's runs change. */
	for (int i = 0; i < N; i++) {
		char hash[17];
		int run = i / 40;

		snprintf(hash, sizeof(hash), "%016llx", 0x5eed0000ull + (unsigned)i * 7919);
		kv_layout_block_path(models[run % 2], (unsigned)run % 3, (unsigned)run % 4, hash,
				     keys[i], sizeof(keys[i]));
		lens[i] = 1000 + (size_t)i * 1237 % 40000;
		data[i] = malloc(lens[i]);
		for (size_t k = 0; k < lens[i]; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			data[i][k] = (unsigned char)x;
		}
	}
	kv_layout_block_path(models[0], 0, 0, "00000000deadbeef", absent, sizeof(absent));
}

/* kvoffd on dir/offd.sock over dir/root, ready; its pid, or 0 when there
 * is no kvoffd built beside this test. */
static pid_t start_kvoffd(const char *self, const char *dir, char *sock, size_t len)
{
	char path[PATH_MAX], root[PATH_MAX], me[PATH_MAX], ready;
	const char *bin = getenv("KV_BIN");
	int fds[2];
	pid_t pid;

	snprintf(me, sizeof(me), "%s", self);
	if (bin)
		snprintf(path, sizeof(path), "%s/kvoffd", bin);
	else
		snprintf(path, sizeof(path), "%s/../bin/kvoffd", dirname(me));
	if (access(path, X_OK) < 0)
		return 0;
	snprintf(sock, len, "%s/offd.sock", dir);
	snprintf(root, sizeof(root), "%s/root", dir);
	if (mkdir(root, 0755) < 0 || pipe(fds) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], 3);
		execl(path, "kvoffd", "--socket", sock, "--root", root, "--cpu-bytes", "64M",
		      "--slot-bytes", "64K", "--ready-fd", "3", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	if (pid > 0 && read(fds[0], &ready, 1) != 1)
		pid = -1;
	close(fds[0]);
	return pid;
}

struct batch {
	struct kv_tier_req reqs[NREQ];
	size_t n, next, done, failed;
	size_t pause_at;	/* next() has none here until all before are done */
};

static int batch_next(void *arg, struct kv_tier_req **req)
{
	struct batch *b = arg;

	if (b->next == b->n || (b->next == b->pause_at && b->done < b->next))
		return 0;
	b->reqs[b->next].result = 1;
	*req = &b->reqs[b->next++];
	return 1;
}

static void batch_done(void *arg, struct kv_tier_req *req)
{
	struct batch *b = arg;

	(void)req;
	b->done++;
	b->failed += req->result < 0;
}

static int run(struct kv_tier *t, struct batch *b)
{
	b->next = b->done = b->failed = 0;
	return kv_tier_batch_stream(t, batch_next, batch_done, b);
}

/* What the lone calls answer for q, as tier.c's loop ran them. */
static void lone(struct kv_tier *t, const struct kv_tier_req *q, int *result, size_t *done)
{
	uint64_t size;

	*done = 0;
	*result = -EINVAL;
	switch (q->op) {
	case KV_TIER_OP_PUT:
		*result = kv_tier_put(t, q->key, q->buf, q->len);
		*done = *result ? 0 : q->len;
		break;
	case KV_TIER_OP_GET:
		*result = kv_tier_get(t, q->key, q->buf, q->len, done);
		break;
	case KV_TIER_OP_GET_TAIL:
		*result = kv_tier_get_tail(t, q->key, q->buf, q->len);
		*done = *result ? 0 : q->len;
		break;
	case KV_TIER_OP_HAS:
		*result = kv_tier_size(t, q->key, &size);
		if (!*result)
			*done = size == KV_TIER_SIZE_UNKNOWN ? SIZE_MAX : (size_t)size;
		break;
	}
}

/* b's batch on t, then each request alone: the same answers and counts. */
static int same_as_lone(struct kv_tier *t, struct batch *b, const char *what)
{
	struct kv_tier_stat s0, s1, s2;
	size_t failed = 0;
	int r;

	CHECK(kv_tier_stat(t, &s0) == 0, "%s: stat", what);
	r = run(t, b);
	CHECK(kv_tier_stat(t, &s1) == 0, "%s: stat", what);
	CHECK(r == (int)b->failed && b->done == b->n, "%s: %d, %zu of %zu done", what, r,
	      b->done, b->n);
	for (size_t i = 0; i < b->n; i++) {
		const struct kv_tier_req *q = &b->reqs[i];
		size_t done;
		int result;

		CHECK(!q->existed, "%s: request %zu existed", what, i);
		lone(t, q, &result, &done);
		failed += result < 0;
		CHECK(q->result == result && q->done == done,
		      "%s: request %zu (op %d): %d, %zu; alone %d, %zu", what, i, q->op,
		      q->result, q->done, result, done);
	}
	CHECK(kv_tier_stat(t, &s2) == 0, "%s: stat", what);
	CHECK(failed == b->failed, "%s: %zu failed, alone %zu", what, b->failed, failed);
	CHECK(s1.puts - s0.puts == s2.puts - s1.puts && s1.hits - s0.hits == s2.hits - s1.hits &&
	      s1.misses - s0.misses == s2.misses - s1.misses,
	      "%s: counters differ from the lone calls'", what);
	return 0;
}

static int check_batches(struct kv_tier *t)
{
	static struct batch b;
	static unsigned char big[SLOT + 1], bufs[N][SLOT], tail[100];
	size_t n = 0;

	for (int i = 0; i < N; i++)
		b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = keys[i],
						    .buf = data[i], .len = lens[i] };
	b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = "../x.bin",
					    .buf = big, .len = 1 };
	b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = absent,
					    .buf = big, .len = sizeof(big) };
	b.n = n;
	b.pause_at = 100;
	if (same_as_lone(t, &b, "puts") < 0)
		return -1;
	CHECK(b.reqs[N + 1].result == -EFBIG, "over the slot: %s",
	      kv_strerror(b.reqs[N + 1].result));

	n = 0;
	for (int i = 0; i < N; i++)
		b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_GET, .key = keys[i],
						    .buf = bufs[i], .len = SLOT };
	b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_GET, .key = absent,
					    .buf = big, .len = SLOT };
	b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_GET, .key = keys[7],
					    .buf = big, .len = lens[7] - 1 };
	b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_GET_TAIL, .key = keys[9],
					    .buf = tail, .len = sizeof(tail) };
	b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_HAS, .key = keys[9] };
	b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_HAS, .key = absent };
	b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_GET, .key = "nope" };
	b.reqs[n++] = (struct kv_tier_req){ .op = KV_TIER_OP_GET, .key = keys[N - 1],
					    .buf = big, .len = SLOT };
	b.n = n;
	b.pause_at = 0;
	if (same_as_lone(t, &b, "gets") < 0)
		return -1;
	for (int i = 0; i < N; i++)
		CHECK(b.reqs[i].done == lens[i] && !memcmp(bufs[i], data[i], lens[i]),
		      "block %d came back other than it went in", i);
	CHECK(b.reqs[N].result == -ENOENT && b.reqs[N + 1].result == -EFBIG &&
	      b.reqs[N + 1].done == lens[7], "a miss, a short buffer");
	CHECK(b.reqs[N + 2].result == 0 &&
	      !memcmp(tail, data[9] + lens[9] - sizeof(tail), sizeof(tail)), "tail");
	CHECK(b.reqs[N + 3].result == 0 && b.reqs[N + 3].done == SIZE_MAX &&
	      b.reqs[N + 4].result == -ENOENT, "presence");
	return 0;
}

/* The daemon gone: every request gathered fails with the connection. */
static int check_lost(struct kv_tier *t)
{
	static struct batch b;
	static unsigned char bufs[5][SLOT];
	int r;

	kill(daemon_pid, SIGKILL);
	waitpid(daemon_pid, NULL, 0);
	daemon_pid = 0;
	for (int i = 0; i < 5; i++)
		b.reqs[i] = (struct kv_tier_req){ .op = KV_TIER_OP_GET, .key = keys[i],
						  .buf = bufs[i], .len = SLOT };
	b.n = 5;
	b.pause_at = 0;
	r = run(t, &b);
	CHECK(r == -ECONNRESET || r == -EPIPE, "a lost daemon: %s", kv_strerror(r));
	CHECK(b.done == 5 && b.failed == 5, "%zu done, %zu failed", b.done, b.failed);
	for (int i = 0; i < 5; i++)
		CHECK(b.reqs[i].result == r, "request %d: %s", i, kv_strerror(b.reqs[i].result));
	return 0;
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/kv-test-tier-daemon-XXXXXX", sock[PATH_MAX], cmd[64];
	struct kv_tier *t;
	int r;

	(void)argc;
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	daemon_pid = start_kvoffd(argv[0], dir, sock, sizeof(sock));
	if (daemon_pid <= 0) {
		rmdir(dir);
		printf("%s\n", daemon_pid ? "kvoffd did not start" :
		       "no kvoffd built beside the test");
		return daemon_pid ? 1 : 77;
	}
	make_blocks();
	r = kv_tier_daemon_open(sock, 10000, &t);
	if (r < 0) {
		fprintf(stderr, "daemon open: %s\n", kv_strerror(r));
		failures++;
	} else {
		if (check_batches(t) == 0)
			check_lost(t);
		kv_tier_close(t);
	}
	if (daemon_pid > 0) {
		kill(daemon_pid, SIGKILL);
		waitpid(daemon_pid, NULL, 0);
	}
	for (int i = 0; i < N; i++)
		free(data[i]);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return failures ? 1 : 0;
}
