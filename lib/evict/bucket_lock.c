/*
 * kvevict's lock on a bucket root (kv/evict.h), where a filesystem root
 * has a flock()ed file: an object made only where absent (If-None-Match),
 * naming its holder, rewritten every REFRESH_NS while held, and taken
 * over once the server's clock says it has not been for STALE_NS (its
 * holder died).  An unsharded run's lock is "<root>//.kvevict.lock", a
 * shard's "<root>//.kvevict/lock.<I>": each, once made, looks for a
 * fresh lock of the other kind and gives its own up if it finds one, so
 * that the two kinds of runs exclude each other and shards do not.  A
 * lock taken over, or made without conditional writes, is read back a
 * second later: of two that took it at once, one finds the other's.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <kv/errors.h>
#include <kv/evict.h>
#include <kv/units.h>
#include "store/s3.h"
#include "util/error.h"

#define NS		1000000000ll
#define STALE_NS	(60 * NS)	/* not refreshed for this long: its holder died */
#define REFRESH_NS	(15 * NS)
#define SETTLE_NS	(1 * NS)	/* between taking a lock and reading it back */
#define POLL_MAX_NS	(1 * NS)
#define RETRIES_MAX	8	/* a lock gone each time it is looked at */
#define BODY_MAX	256

struct kv_evict_bucket_lock {
	struct kvi_s3 *s3;
	unsigned count;			/* shards; 0: unsharded */
	char name[32];			/* relative to the root, for messages */
	char key[KVI_S3_KEY_MAX + 1];
	char body[BODY_MAX];		/* who holds it, and a nonce: ours */
	pthread_t refresher;
	int refreshing;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
};

static void nap(int64_t ns)
{
	struct timespec ts = { (time_t)(ns / NS), (long)(ns % NS) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The server's time of an answer, or ours where it sent no Date. */
static int64_t server_now(const struct kvi_s3_op *op)
{
	return op->date_ns ? op->date_ns : kv_now_ns();
}

/* key's lock object: its words into body (len bytes at most), and
 * whether the server's clock says it is fresh; -ENOENT if none. */
static int read_lock(struct kv_evict_bucket_lock *l, const char *key, char *body, size_t len,
		     int *fresh)
{
	struct kvi_s3_op op = { .method = KVI_S3_GET, .key = key, .dst = body, .cap = len - 1 };
	int rc = kvi_s3_do(l->s3, &op);

	free(op.resp);
	/* One too big to be a lock's words is still a lock. */
	if (rc == -EFBIG)
		rc = 0;
	if (rc < 0)
		return rc;
	body[op.got] = '\0';
	*fresh = !op.mtime_ns || server_now(&op) - op.mtime_ns < STALE_NS;
	return 0;
}

/* The holder named in a lock's words, for a message. */
static void holder(const char *body, char *who, size_t len)
{
	size_t j = 0;

	for (size_t i = 0; body[i] && body[i] != '\n' && j + 1 < len; i++)
		who[j++] = body[i] >= 0x20 && body[i] < 0x7f ? body[i] : '?';
	who[j] = '\0';
	if (!j)
		snprintf(who, len, "an unknown holder");
}

static int held_by(const char *name, const char *body)
{
	char who[BODY_MAX];

	holder(body, who, sizeof(who));
	return kvi_fail(-EWOULDBLOCK, "lock '%s' held by %s", name, who);
}

static int put(struct kv_evict_bucket_lock *l, unsigned flags, struct kvi_s3_op *op)
{
	int rc;

	memset(op, 0, sizeof(*op));
	op->method = KVI_S3_PUT;
	op->key = l->key;
	op->body = l->body;
	op->body_len = strlen(l->body);
	op->flags = flags;
	rc = kvi_s3_do(l->s3, op);
	free(op->resp);
	op->resp = NULL;
	return rc;
}

static void delete_key(struct kv_evict_bucket_lock *l, const char *key)
{
	struct kvi_s3_op op = { .method = KVI_S3_DELETE, .key = key };

	kvi_s3_do(l->s3, &op);
	free(op.resp);
}

/* 0 if the lock object is still ours, -EWOULDBLOCK naming whose it is. */
static int still_mine(struct kv_evict_bucket_lock *l)
{
	char body[BODY_MAX];
	int fresh, rc = read_lock(l, l->key, body, sizeof(body), &fresh);

	if (rc == -ENOENT)
		return kvi_fail(-EWOULDBLOCK, "lock '%s' taken and given up by another", l->name);
	if (rc < 0)
		return rc;
	return strcmp(body, l->body) ? held_by(l->name, body) : 0;
}

struct fresh_shard {
	int64_t now_ns;
	char key[KVI_S3_KEY_MAX + 1];	/* a fresh shard's lock, "" none */
};

static int on_shard_lock(const struct kvi_s3_object *o, void *arg)
{
	struct fresh_shard *f = arg;

	if (!f->key[0] && o->mtime_ns && f->now_ns - o->mtime_ns < STALE_NS)
		snprintf(f->key, sizeof(f->key), "%s", o->key);
	return 0;
}

/* With our lock made at now_ns (the server's time), a fresh lock of the
 * other kind: 0 none, -EWOULDBLOCK naming its holder. */
static int other_kind(struct kv_evict_bucket_lock *l, int64_t now_ns)
{
	char key[KVI_S3_KEY_MAX + 1], body[BODY_MAX];
	struct fresh_shard f = { now_ns, "" };
	int fresh = 0, rc;

	if (l->count) {
		rc = kvi_s3_key(l->s3, KV_EVICT_LOCK_NAME, 1, key, sizeof(key));
		if (rc == 0)
			rc = read_lock(l, key, body, sizeof(body), &fresh);
		if (rc == -ENOENT || (rc == 0 && !fresh))
			return 0;
		return rc < 0 ? rc : held_by(KV_EVICT_LOCK_NAME, body);
	}
	rc = kvi_s3_key(l->s3, KV_EVICT_STATE_DIR "/lock.", 1, key, sizeof(key));
	if (rc == 0)
		rc = kvi_s3_list_prefix(l->s3, key, on_shard_lock, &f);
	if (rc < 0 || !f.key[0])
		return rc;
	rc = read_lock(l, f.key, body, sizeof(body), &fresh);
	if (rc == -ENOENT)
		return 0;
	return rc < 0 ? rc : held_by(f.key + strlen(kvi_s3_prefix(l->s3)) + 1, body);
}

/*
 * One try: 0 the lock is ours, -EWOULDBLOCK another's (named), 1 try
 * again at once (a stale one removed, or one gone meanwhile).
 */
static int try_take(struct kv_evict_bucket_lock *l)
{
	struct kvi_s3_op op;
	char body[BODY_MAX];
	int fresh, settle = 0, rc;

	rc = put(l, KVI_S3_IF_NONE_MATCH, &op);
	/* A server without conditional writes: look, then write, then see
	 * whose it is. */
	if (kvi_s3_condition_refused(&op)) {
		rc = read_lock(l, l->key, body, sizeof(body), &fresh);
		if (rc == 0 && fresh)
			return held_by(l->name, body);
		if (rc < 0 && rc != -ENOENT)
			return rc;
		rc = put(l, 0, &op);
		settle = 1;
	} else if (rc == -EEXIST) {
		rc = read_lock(l, l->key, body, sizeof(body), &fresh);
		if (rc == -ENOENT)
			return 1;
		if (rc < 0)
			return rc;
		if (fresh)
			return held_by(l->name, body);
		/* Its holder died: taken over, and read back. */
		delete_key(l, l->key);
		rc = put(l, KVI_S3_IF_NONE_MATCH, &op);
		if (rc == -EEXIST)
			return 1;
		settle = 1;
	}
	if (rc < 0)
		return rc;
	if (settle) {
		nap(SETTLE_NS);
		rc = still_mine(l);
	}
	if (rc == 0 && (rc = other_kind(l, server_now(&op))) < 0)
		delete_key(l, l->key);
	return rc;
}

/* Rewrite the lock while it is ours, until told to stop. */
static void *refresh(void *arg)
{
	struct kv_evict_bucket_lock *l = arg;
	struct kvi_s3_op op;
	struct timespec until;
	int stop, rc;

	pthread_mutex_lock(&l->mu);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += REFRESH_NS / NS;
		while (!l->stop &&
		       pthread_cond_timedwait(&l->cv, &l->mu, &until) != ETIMEDOUT)
			;
		stop = l->stop;
		pthread_mutex_unlock(&l->mu);
		if (stop)
			return NULL;
		/* One taken over meanwhile is another's now: left alone.  A
		 * server that did not answer is asked again next time. */
		rc = still_mine(l);
		if (rc == -EWOULDBLOCK)
			return NULL;
		if (rc == 0)
			put(l, 0, &op);
		pthread_mutex_lock(&l->mu);
	}
}

int kv_evict_lock_bucket(const char *root, unsigned index, unsigned count, int64_t wait_ns,
			 struct kv_evict_bucket_lock **out)
{
	int64_t deadline = kv_monotonic_ns() + (wait_ns > 0 ? wait_ns : 0), poll = 50000000;
	struct kv_evict_bucket_lock *l;
	pthread_condattr_t ca;
	char host[64] = "?", comm[32] = "?", since[40];
	uint64_t seed;
	FILE *f;
	int again = 0, rc;

	kvi_error_clear();
	if ((count && index >= count) || count > KV_EVICT_MAX_SHARDS)
		return -EINVAL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->count = count;
	rc = kvi_s3_open(root, &l->s3);
	if (rc < 0) {
		free(l);
		return rc;
	}
	if (count)
		snprintf(l->name, sizeof(l->name), "%s/lock.%u", KV_EVICT_STATE_DIR, index);
	else
		snprintf(l->name, sizeof(l->name), "%s", KV_EVICT_LOCK_NAME);
	rc = kvi_s3_key(l->s3, l->name, 1, l->key, sizeof(l->key));
	/* Who holds it, in words, and a nonce that tells ours from another's. */
	gethostname(host, sizeof(host) - 1);
	if ((f = fopen("/proc/self/comm", "re"))) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	kv_time_format(kv_now_ns(), since, sizeof(since));
	snprintf(l->body, sizeof(l->body), "pid %d (%s) on %s since %s\n%016llx\n",
		 (int)getpid(), comm, host, since, (unsigned long long)kv_now_ns());
	seed = (uint64_t)kv_now_ns() ^ (uint64_t)getpid() << 32;
	while (rc == 0 && (rc = try_take(l)) != 0) {
		if (rc == 1 && ++again < RETRIES_MAX) {
			rc = 0;
			continue;
		}
		if (rc == 1)
			rc = kvi_fail(-EAGAIN, "lock '%s' keeps going and coming back", l->name);
		if (rc != -EWOULDBLOCK || kv_monotonic_ns() >= deadline)
			break;
		/* Jittered, so that two that back off from each other part. */
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		nap(poll / 2 + (int64_t)((seed >> 33) % (uint64_t)(poll / 2 + 1)));
		if (poll < POLL_MAX_NS)
			poll *= 2;
		rc = 0;
	}
	if (rc < 0) {
		kvi_s3_close(l->s3);
		free(l);
		return rc;
	}
	pthread_mutex_init(&l->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	l->refreshing = pthread_create(&l->refresher, NULL, refresh, l) == 0;
	*out = l;
	return 0;
}

void kv_evict_unlock_bucket(struct kv_evict_bucket_lock *l)
{
	if (!l)
		return;
	if (l->refreshing) {
		pthread_mutex_lock(&l->mu);
		l->stop = 1;
		pthread_cond_signal(&l->cv);
		pthread_mutex_unlock(&l->mu);
		pthread_join(l->refresher, NULL);
	}
	if (still_mine(l) == 0)
		delete_key(l, l->key);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
	kvi_s3_close(l->s3);
	free(l);
}
