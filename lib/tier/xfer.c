/*
 * Transfers a caller does not wait for (kv/xfer.h): a queue of jobs,
 * one thread per tier handle, finished jobs kept until polled.  The
 * caller's scheduler thread only links a job in or out under the lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <kv/errors.h>
#include <kv/events.h>
#include <kv/evict.h>
#include <kv/lastuse.h>
#include <kv/layout.h>
#include <kv/tier.h>
#include <kv/units.h>
#include <kv/xfer.h>

#define JOURNAL_SYNC_NS	(5LL * 1000000000LL)	/* a bucket's journal, as kvwatch */

struct jobq {
	struct kv_xfer_job *head, *tail;
};

struct kv_xfer {
	struct kv_xfer_opts o;
	unsigned n;
	struct kv_tier **tiers;
	pthread_t *threads;
	unsigned started;

	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	struct jobq urgent, stores, done;	/* loads, lookups, touches first */
	size_t queued, running, pending;	/* pending: until polled */
	unsigned stores_running;
	int stopping;

	pthread_mutex_t room_lock;		/* max_bytes: one eviction at a time */
	uint64_t used_bytes;			/* 0: not measured yet */
	int64_t next_sync_ns;
	struct kv_xfer_stats st;		/* under lock */
};

struct worker {
	struct kv_xfer *x;
	struct kv_tier *tier;
};

static void push(struct jobq *q, struct kv_xfer_job *j)
{
	j->next = NULL;
	if (q->tail)
		q->tail->next = j;
	else
		q->head = j;
	q->tail = j;
}

static struct kv_xfer_job *pop(struct jobq *q)
{
	struct kv_xfer_job *j = q->head;

	if (j && !(q->head = j->next))
		q->tail = NULL;
	return j;
}

/* ---- one job ---- */

struct run {
	struct kv_xfer_job *job;
	struct kv_tier_req *reqs;
	size_t next;
};

static int run_next(void *arg, struct kv_tier_req **req)
{
	struct run *r = arg;

	if (r->next == r->job->n)
		return 0;
	*req = &r->reqs[r->next++];
	return 1;
}

static void run_done(void *arg, struct kv_tier_req *req)
{
	(void)arg;
	(void)req;
}

static void count(struct kv_xfer *x, uint64_t *counter, uint64_t n)
{
	pthread_mutex_lock(&x->lock);
	*counter += n;
	pthread_mutex_unlock(&x->lock);
}

static void announce(struct kv_xfer *x, enum kv_event_kind kind, const char *key)
{
	struct kv_block_ref ref;

	if (x->o.events && kv_layout_block_parse(key, &ref) == 0)
		kv_events_publish_block(x->o.events, kind, x->o.medium, x->o.rootfd, &ref);
}

static void evicted(const struct kv_evict_block *b, void *arg)
{
	struct kv_xfer *x = arg;

	if (x->o.events && b->ref)
		kv_events_publish_block(x->o.events, KV_EVENT_BLOCK_REMOVED, x->o.medium,
					x->o.rootfd, b->ref);
}

/* Keep the root at or under max_bytes with need more bytes coming:
 * kvevict's LRU frees what the store would pass.  Best effort: a store
 * goes on when eviction cannot run (another evictor holds the root),
 * and is measured again next time. */
static void make_room(struct kv_xfer *x, uint64_t need)
{
	uint64_t max = x->o.max_bytes, low = x->o.low_bytes ? x->o.low_bytes : max / 10 * 9;
	struct kv_evict_opts eo = { .high_pct = -1, .removed = evicted, .arg = x, .threads = 1 };
	struct kv_evict_report rep;
	int lockfd = -1, rc;

	if (!max)
		return;
	pthread_mutex_lock(&x->room_lock);
	if (x->used_bytes && x->used_bytes + need <= max) {
		x->used_bytes += need;
		goto out;
	}
	eo.max_bytes = max > need ? max - need : 1;
	eo.low_bytes = low > need ? low - need : 0;
	if (eo.low_bytes > eo.max_bytes)
		eo.low_bytes = eo.max_bytes;
	rc = kv_root_is_s3(x->o.root) ? 0 : kv_evict_lock(x->o.root, 0, &lockfd);
	if (rc == 0)
		rc = kv_evict_run(x->o.root, &eo, &rep);
	if (lockfd >= 0)
		close(lockfd);
	pthread_mutex_lock(&x->lock);
	if (rc < 0) {
		x->st.eviction_errors++;
		x->used_bytes = 0;
	} else {
		x->st.evictions += rep.files_deleted;
		x->st.evicted_bytes += rep.bytes_deleted;
		x->used_bytes = rep.cache_bytes_after + need;
	}
	x->st.used_bytes = x->used_bytes;
	pthread_mutex_unlock(&x->lock);
out:
	pthread_mutex_unlock(&x->room_lock);
}

static int bad_block(int err)
{
	return err == -KV_ESHORT || err == -KV_ECHECKSUM || err == -EFBIG;
}

static void use(struct kv_xfer *x, struct kv_xfer_job *j, size_t i)
{
	int rc = kv_use_record(x->o.uses, j->keys[i], -1, kv_now_ns());

	if (rc < 0) {
		if (j->op == KV_XFER_TOUCH)
			j->status[i] = rc;
		if (rc != -ENOENT)
			count(x, &x->st.uses_failed, 1);
	}
}

static void settle(struct kv_xfer *x, struct kv_tier *t, struct kv_xfer_job *j,
		   struct kv_tier_req *q, size_t i)
{
	int *st = &j->status[i];

	*st = q->result;
	switch (j->op) {
	case KV_XFER_LOAD:
		if (!*st && q->done != j->lens[i])
			*st = -KV_ESHORT;
		if (bad_block(*st)) {
			/* What was read must not pass for the block. */
			memset(j->bufs[i], 0, j->lens[i]);
			if ((x->o.flags & KV_XFER_REMOVE_BAD) && kv_tier_del(t, j->keys[i]) == 0)
				count(x, &x->st.removed_bad, 1);
		}
		if (!*st) {
			j->bytes += j->lens[i];
			if (x->o.uses)
				use(x, j, i);
		}
		break;
	case KV_XFER_STORE:
		if (!*st && !q->existed) {
			j->bytes += j->lens[i];
			announce(x, KV_EVENT_BLOCK_STORED, j->keys[i]);
		}
		break;
	default:
		break;
	}
}

static void run_job(struct kv_xfer *x, struct kv_tier *t, struct kv_xfer_job *j)
{
	static const enum kv_tier_op ops[] = {
		[KV_XFER_STORE] = KV_TIER_OP_PUT, [KV_XFER_LOAD] = KV_TIER_OP_GET,
		[KV_XFER_HAS] = KV_TIER_OP_HAS,
	};
	struct run r = { .job = j };
	uint64_t need = 0;
	int rc;

	j->start_ns = kv_monotonic_ns();
	j->bytes = 0;
	if (j->op == KV_XFER_TOUCH) {
		for (size_t i = 0; i < j->n; i++) {
			j->status[i] = 0;
			if (x->o.uses)
				use(x, j, i);
		}
		goto out;
	}
	r.reqs = calloc(j->n ? j->n : 1, sizeof(*r.reqs));
	if (!r.reqs) {
		for (size_t i = 0; i < j->n; i++)
			j->status[i] = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < j->n; i++) {
		struct kv_tier_req *q = &r.reqs[i];

		q->op = ops[j->op];
		q->key = j->keys[i];
		q->result = -ECANCELED;	/* what a request a lost batch never ran says */
		q->keep = 1;
		if (j->op != KV_XFER_HAS) {
			q->buf = j->bufs[i];
			q->len = j->lens[i];
		}
		if (j->op == KV_XFER_STORE)
			need += j->lens[i];
	}
	if (j->op == KV_XFER_STORE)
		make_room(x, need);
	rc = kv_tier_batch_stream(t, run_next, run_done, &r);
	for (size_t i = 0; i < j->n; i++) {
		if (rc < 0 && r.reqs[i].result == -ECANCELED)
			r.reqs[i].result = rc;
		settle(x, t, j, &r.reqs[i], i);
	}
	free(r.reqs);
out:
	j->failed = 0;
	for (size_t i = 0; i < j->n; i++)
		j->failed += j->status[i] != 0;
	j->end_ns = kv_monotonic_ns();
}

/* ---- the threads ---- */

/* Loads and lookups first; a store only while a thread stays free for
 * them. */
static struct kv_xfer_job *take(struct kv_xfer *x)
{
	struct kv_xfer_job *j = pop(&x->urgent);

	if (!j && (x->n == 1 || x->stores_running + 1 < x->n) && (j = pop(&x->stores)))
		x->stores_running++;
	return j;
}

/* Whether a bucket's journal is due to be written (under the lock;
 * the write itself is done without it, as it is a PUT). */
static int journal_due(struct kv_xfer *x)
{
	int64_t now = kv_monotonic_ns();

	if (!x->o.uses || !kv_use_recorder_is_bucket(x->o.uses) || now < x->next_sync_ns)
		return 0;
	x->next_sync_ns = now + JOURNAL_SYNC_NS;
	return 1;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct kv_xfer *x = w->x;
	struct kv_xfer_job *j;

	pthread_mutex_lock(&x->lock);
	for (;;) {
		if (!(j = take(x))) {
			if (x->stopping && !x->queued)
				break;
			pthread_cond_wait(&x->work, &x->lock);
			continue;
		}
		x->queued--;
		x->running++;
		pthread_mutex_unlock(&x->lock);
		run_job(x, w->tier, j);
		pthread_mutex_lock(&x->lock);
		x->running--;
		if (j->op == KV_XFER_STORE)
			x->stores_running--;
		push(&x->done, j);
		pthread_cond_broadcast(&x->idle);
		pthread_cond_signal(&x->work);	/* a store may go now */
		if (journal_due(x)) {
			pthread_mutex_unlock(&x->lock);
			if (kv_use_recorder_sync(x->o.uses, NULL, NULL) < 0)
				count(x, &x->st.uses_failed, 1);
			pthread_mutex_lock(&x->lock);
		}
	}
	pthread_mutex_unlock(&x->lock);
	free(w);
	return NULL;
}

int kv_xfer_open(struct kv_tier *const *tiers, unsigned n, const struct kv_xfer_opts *opts,
		 struct kv_xfer **out)
{
	struct kv_xfer *x;

	if (!tiers || !n || !out || (opts && opts->max_bytes && !opts->root))
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	if (opts)
		x->o = *opts;
	if (!x->o.events)
		x->o.rootfd = -1;
	x->n = n;
	x->tiers = calloc(n, sizeof(*x->tiers));
	x->threads = calloc(n, sizeof(*x->threads));
	pthread_mutex_init(&x->lock, NULL);
	pthread_mutex_init(&x->room_lock, NULL);
	pthread_cond_init(&x->work, NULL);
	pthread_cond_init(&x->idle, NULL);
	if (!x->tiers || !x->threads) {
		kv_xfer_close(x);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		struct worker *w = malloc(sizeof(*w));
		int rc;

		x->tiers[i] = tiers[i];
		if (!w) {
			kv_xfer_close(x);
			return -ENOMEM;
		}
		*w = (struct worker){ .x = x, .tier = tiers[i] };
		rc = -pthread_create(&x->threads[i], NULL, worker_main, w);
		if (rc) {
			free(w);
			kv_xfer_close(x);
			return rc;
		}
		x->started++;
	}
	*out = x;
	return 0;
}

int kv_xfer_submit(struct kv_xfer *x, struct kv_xfer_job *j)
{
	int data;

	if (!x || !j || (unsigned)j->op > KV_XFER_TOUCH || (j->n && (!j->keys || !j->status)))
		return -EINVAL;
	data = j->op == KV_XFER_STORE || j->op == KV_XFER_LOAD;
	if (data && j->n && (!j->bufs || !j->lens))
		return -EINVAL;
	pthread_mutex_lock(&x->lock);
	if (x->stopping) {
		pthread_mutex_unlock(&x->lock);
		return -ESHUTDOWN;
	}
	push(j->op == KV_XFER_STORE ? &x->stores : &x->urgent, j);
	x->queued++;
	x->pending++;
	pthread_cond_signal(&x->work);
	pthread_mutex_unlock(&x->lock);
	return 0;
}

size_t kv_xfer_poll(struct kv_xfer *x, struct kv_xfer_job **done, size_t max)
{
	size_t k = 0;

	pthread_mutex_lock(&x->lock);
	while (k < max && x->done.head)
		done[k++] = pop(&x->done);
	x->pending -= k;
	pthread_mutex_unlock(&x->lock);
	return k;
}

size_t kv_xfer_pending(struct kv_xfer *x)
{
	size_t n;

	pthread_mutex_lock(&x->lock);
	n = x->pending;
	pthread_mutex_unlock(&x->lock);
	return n;
}

void kv_xfer_drain(struct kv_xfer *x)
{
	pthread_mutex_lock(&x->lock);
	while (x->queued || x->running)
		pthread_cond_wait(&x->idle, &x->lock);
	pthread_mutex_unlock(&x->lock);
}

void kv_xfer_stats(struct kv_xfer *x, struct kv_xfer_stats *out)
{
	pthread_mutex_lock(&x->lock);
	*out = x->st;
	pthread_mutex_unlock(&x->lock);
}

void kv_xfer_close(struct kv_xfer *x)
{
	if (!x)
		return;
	pthread_mutex_lock(&x->lock);
	x->stopping = 1;
	pthread_cond_broadcast(&x->work);
	pthread_mutex_unlock(&x->lock);
	for (unsigned i = 0; i < x->started; i++)
		pthread_join(x->threads[i], NULL);
	if (x->o.uses && kv_use_recorder_is_bucket(x->o.uses))
		kv_use_recorder_sync(x->o.uses, NULL, NULL);
	pthread_cond_destroy(&x->work);
	pthread_cond_destroy(&x->idle);
	pthread_mutex_destroy(&x->lock);
	pthread_mutex_destroy(&x->room_lock);
	free(x->tiers);
	free(x->threads);
	free(x);
}
