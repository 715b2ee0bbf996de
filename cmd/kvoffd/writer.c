/*
 * Write-behind and read-through workers.  Each thread owns a handle on
 * each tier; the event loop queues jobs (writes into a bounded ring, loads
 * into a ring with room for one per slot so they are never refused,
 * probes into one as large) and collects finished ones through an
 * eventfd.  Probes go first, then loads: a client waits on each of them.
 * A worker takes up to BATCH queued loads at once, or as many writes to
 * one bucket, and asks a bucket for them as one batch, its GETs or PUTs
 * in flight together.  One more thread, the prober, runs only probes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "kvoffd.h"

#define BATCH	32	/* loads, or writes to a bucket, one worker takes at once */
#define BATCH_BYTES	(8u << 20)	/* ... and of moves, at most these bytes,
					   each held in memory on their way */

struct worker_arg {
	struct offd *d;
	unsigned idx;		/* its entry in the writer's active[] */
	int prober;		/* runs probes only */
	struct kv_tier **io;	/* one per file tier */
	struct kv_tier_demotion *moves;	/* DEMOTE: BATCH, their buffers kept */
	struct job *jobs;	/* BATCH taken at once ... */
	struct kv_tier_req *reqs;	/* ... and their requests */
};

/* A block's model dir carries its config.json on every tier, as vLLM
 * and kvls expect: copy it to tier t from the first tier that has it
 * (each handle remembers the model dirs it has seen hold one), else
 * from what a client gave (CONFIG). */
static void carry_config(struct offd *d, struct kv_tier **io, unsigned t, const char *path)
{
	struct kv_block_ref ref;

	for (unsigned u = 0; u < d->ntiers; u++)
		if (u != t && kv_tier_copy_config(io[t], io[u], path) == 0)
			return;
	if (kv_layout_block_parse(path, &ref) == 0 && ref.layout == KV_LAYOUT_V1)
		configs_give(&d->configs, io[t], ref.model_dir);
}

static size_t done_cap(const struct writer *w);

/* A worker's handle on a tier changed a block: kept for the loop, which
 * counts and announces it (report_tier_changes, after each pass over
 * finished jobs).  Its job finishes after, so the pass that sees the job
 * end takes its changes too. */
static void handle_reported(void *arg, struct kv_tier *t, const struct kv_tier_report *r)
{
	const struct reporter *rp = arg;
	struct writer *w = rp->w;
	struct tier_changes *c = &w->changes;
	struct tier_change *at;

	(void)t;
	pthread_mutex_lock(&w->lock);
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		struct tier_change *v = realloc(c->v, cap * sizeof(*v));

		if (!v) {
			w->changes_lost++;
			pthread_mutex_unlock(&w->lock);
			return;
		}
		c->v = v;
		c->cap = cap;
	}
	at = &c->v[c->n++];
	at->tier = rp->tier;
	at->change = r->change;
	at->size = r->size;
	snprintf(at->path, sizeof(at->path), "%s", r->key);
	pthread_mutex_unlock(&w->lock);
}

uint64_t writer_take_changes(struct offd *d, struct tier_changes *mine)
{
	struct writer *w = &d->wr;
	struct tier_changes taken;
	uint64_t lost;

	pthread_mutex_lock(&w->lock);
	taken = w->changes;
	mine->n = 0;
	w->changes = *mine;
	*mine = taken;
	lost = w->changes_lost;
	w->changes_lost = 0;
	pthread_mutex_unlock(&w->lock);
	return lost;
}

/* Hand a finished job to the loop, w->lock held. */
static void job_finished_locked(struct writer *w, const struct job *j)
{
	uint64_t one = 1;

	w->done[(w->dhead + w->dcount) % done_cap(w)] = *j;
	w->dcount++;
	/* The loop reads the eventfd; a failed write would mean the counter
	 * overflowed, which 2^64 completions cannot do. */
	if (write(w->efd, &one, sizeof(one)) < 0)
		tool_err("cannot signal a finished job: %s", strerror(errno));
}

static void job_finished(struct writer *w, const struct job *j)
{
	pthread_mutex_lock(&w->lock);
	job_finished_locked(w, j);
	pthread_mutex_unlock(&w->lock);
}

/* One tier asked for the loads that no tier above had. */
struct load_pass {
	struct offd *d;
	struct kv_tier *io;
	unsigned tier;
	struct job *jobs;
	struct kv_tier_req *req;	/* one per job */
	size_t n, at;			/* jobs, and the next to look at */
	int64_t t0;
};

static int load_next(void *arg, struct kv_tier_req **out)
{
	struct load_pass *lp = arg;

	while (lp->at < lp->n) {
		size_t k = lp->at++;
		struct job *j = &lp->jobs[k];

		if (j->result != -ENOENT || !(j->probe & (1u << lp->tier)))
			continue;
		lp->req[k] = (struct kv_tier_req){ .op = KV_TIER_OP_GET, .key = j->path,
						   .buf = lp->d->pool + j->offset,
						   .len = (size_t)j->cap };
		*out = &lp->req[k];
		return 1;
	}
	return 0;
}

/* A load this tier answered is finished: read (its sum taken), too large
 * for its slot (its size said, so the loop may find it a larger one), or
 * failed.  A miss goes on to the next tier. */
static void load_done(void *arg, struct kv_tier_req *req)
{
	struct load_pass *lp = arg;
	struct job *j = &lp->jobs[req - lp->req];
	uint64_t size = 0;

	j->result = req->result;
	j->tier = lp->tier;
	if (j->result == -ENOENT) {
		j->missed |= 1u << lp->tier;
		return;
	}
	if (j->result == -EFBIG && kv_tier_size(lp->io, j->path, &size))
		size = 0;
	j->len = j->result == -EFBIG ? size : j->result ? 0 : req->done;
	j->sum = j->result ? 0 : kv_xxh3(req->buf, req->done);
	j->ns = kv_monotonic_ns() - lp->t0;
	job_finished(&lp->d->wr, j);
}

/* A file tier's loads one at a time, each one's size asked first (a stat:
 * a miss costs no open), as before batches: through the file tier's
 * io_uring batch, bench/offd-tiers.sh's misses ran up to 10% slower. */
static void load_each(struct load_pass *lp)
{
	struct kv_tier_req *req;

	while (load_next(lp, &req) == 1) {
		const struct job *j = &lp->jobs[req - lp->req];
		uint64_t size = 0;

		req->result = kv_tier_size(lp->io, j->path, &size);
		if (!req->result && size > j->cap)
			req->result = -EFBIG;
		if (!req->result)
			req->result = kv_tier_get(lp->io, j->path, req->buf, req->len, &req->done);
		load_done(lp, req);
	}
}

/* Read n loads through the tiers in each one's j->probe, in order, into
 * their slots: a bucket's share as one batch, its GETs in flight
 * together. */
static void run_loads(struct offd *d, struct worker_arg *a, struct job *jobs, size_t n)
{
	struct load_pass lp = { .d = d, .jobs = jobs, .req = a->reqs, .n = n,
				.t0 = kv_monotonic_ns() };

	for (size_t k = 0; k < n; k++) {
		jobs[k].result = -ENOENT;
		jobs[k].len = 0;
		jobs[k].sum = 0;
	}
	for (unsigned t = 0; t < d->ntiers; t++) {
		int rc;

		lp.io = a->io[t];
		lp.tier = t;
		lp.at = 0;
		if (!kv_root_is_s3(d->tiers[t].root)) {
			load_each(&lp);
			continue;
		}
		rc = kv_tier_batch_stream(lp.io, load_next, load_done, &lp);
		/* The batch stopped (its connection lost): what it did not
		 * ask fails with that error, as asking it alone would have. */
		for (size_t k = lp.at; rc < 0 && k < n; k++)
			if (jobs[k].result == -ENOENT && (jobs[k].probe & (1u << t))) {
				jobs[k].result = rc;
				jobs[k].tier = t;
				job_finished(&d->wr, &jobs[k]);
			}
	}
	for (size_t k = 0; k < n; k++)
		if (jobs[k].result == -ENOENT) {
			jobs[k].ns = kv_monotonic_ns() - lp.t0;
			job_finished(&d->wr, &jobs[k]);
		}
}

/* Whether write j's slot still holds the bytes committed: a client that
 * wrote into a committed slot must not get them stored under a fresh
 * checksum. */
static int slot_intact(const unsigned char *mem, const struct job *j)
{
	return kv_xxh3(mem, (size_t)j->len) == j->sum;
}

/* Writes to one bucket, taken at once: the bucket gets their PUTs as one
 * batch. */
struct write_pass {
	struct job *jobs;
	struct kv_tier_req *req;	/* one per job */
	unsigned char *pool;
	size_t n, at;
	int64_t t0;
};

#define WRITE_PENDING	1	/* a job's result until its write is answered */

static int write_next(void *arg, struct kv_tier_req **out)
{
	struct write_pass *wp = arg;

	while (wp->at < wp->n) {
		size_t k = wp->at++;
		struct job *j = &wp->jobs[k];
		unsigned char *mem = wp->pool + j->offset;

		if (!slot_intact(mem, j)) {
			j->result = -KV_ECHECKSUM;
			continue;
		}
		wp->req[k] = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = j->path,
						   .buf = mem, .len = (size_t)j->len };
		*out = &wp->req[k];
		return 1;
	}
	return 0;
}

static void write_done(void *arg, struct kv_tier_req *req)
{
	struct write_pass *wp = arg;
	struct job *j = &wp->jobs[req - wp->req];

	j->result = req->result;
	j->ns = kv_monotonic_ns() - wp->t0;
}

static void run_writes(struct offd *d, struct worker_arg *a, struct job *jobs, size_t n)
{
	struct write_pass wp = { .jobs = jobs, .req = a->reqs, .pool = d->pool, .n = n,
				 .t0 = kv_monotonic_ns() };
	struct kv_tier *io = a->io[jobs[0].tier];
	int rc;

	for (size_t k = 0; k < n; k++)
		jobs[k].result = WRITE_PENDING;
	rc = kv_tier_batch_stream(io, write_next, write_done, &wp);
	for (size_t k = 0; k < n; k++) {
		struct job *j = &jobs[k];

		/* The batch stopped (its connection lost) before asking it. */
		if (j->result == WRITE_PENDING) {
			j->result = rc < 0 ? rc : -EIO;
			j->ns = kv_monotonic_ns() - wp.t0;
		}
		if (j->result == 0)
			carry_config(d, a->io, j->tier, j->path);
	}
}

/* One tier asked about a probe's entries that no tier above had. */
struct probe_pass {
	struct probe *p;
	size_t at;			/* the next entry to look at */
};

static int probe_next(void *arg, struct kv_tier_req **out)
{
	struct probe_pass *pp = arg;
	struct probe *p = pp->p;

	while (pp->at < p->n) {
		size_t k = pp->at++;

		if (p->found[k] != -ENOENT)
			continue;
		p->reqs[k] = (struct kv_tier_req){ .op = KV_TIER_OP_HAS, .key = p->path[k] };
		*out = &p->reqs[k];
		return 1;
	}
	return 0;
}

static void probe_done(void *arg, struct kv_tier_req *req)
{
	struct probe *p = ((struct probe_pass *)arg)->p;
	size_t k = (size_t)(req - p->reqs);

	p->found[k] = req->result;
	if (!req->result)
		p->size[k] = req->done == SIZE_MAX ? KV_TIER_SIZE_UNKNOWN : req->done;
}

/* Ask the probe's tiers, in order, whether they hold each entry, and
 * its size: a tier's questions go as one batch, which a bucket keeps in
 * flight together (HEADs) instead of one round trip after another (a
 * file tier answers each with a stat, as before). */
void probe_run(const struct offd *d, struct kv_tier *const *io, struct probe *p)
{
	struct probe_pass pp = { .p = p };

	for (size_t k = 0; k < p->n; k++) {
		p->found[k] = -ENOENT;
		p->size[k] = KV_TIER_SIZE_UNKNOWN;
	}
	for (unsigned t = 0; t < d->ntiers; t++) {
		int rc;

		if (!(p->tiers & (1u << t)))
			continue;
		pp.at = 0;
		rc = kv_tier_batch_stream(io[t], probe_next, probe_done, &pp);
		/* The batch stopped (its connection lost): what it did not
		 * ask gets that error, as asking it alone would have. */
		for (size_t k = pp.at; rc < 0 && k < p->n; k++)
			if (p->found[k] == -ENOENT)
				p->found[k] = rc;
	}
}

/* Move blocks out of tier jobs[0].tier down the tiers below it, by
 * libkv's one rule for that (kv_tier_demote_many): n of them at once
 * where a bucket is next, so that it has their requests in flight. */
static void run_demotes(struct offd *d, struct worker_arg *a, struct job *jobs, size_t n)
{
	unsigned from = jobs[0].tier, below = from + 1;
	int64_t t0 = kv_monotonic_ns(), ns;
	int r;

	for (size_t k = 0; k < n; k++)
		a->moves[k].key = jobs[k].path;
	r = kv_tier_demote_many(a->io[from], a->io + below, d->ntiers - below, a->moves, n, 0);
	ns = kv_monotonic_ns() - t0;
	for (size_t k = 0; k < n; k++) {
		const struct kv_tier_demotion *m = &a->moves[k];
		struct job *j = &jobs[k];

		j->result = r < 0 ? r : m->result;
		j->existed = m->existed;
		j->refused = m->refused << below;
		j->dest = m->dest < 0 ? TIER_NONE : below + (unsigned)m->dest;
		if (m->len)
			j->len = m->len;
		j->ns = ns;
	}
}

static void run_job(struct offd *d, struct worker_arg *a, struct job *j)
{
	unsigned char *mem = d->pool + j->offset;
	int64_t t0 = kv_monotonic_ns();

	if (j->kind == JOB_WRITE) {
		j->result = !slot_intact(mem, j) ? -KV_ECHECKSUM :
			    kv_tier_put(a->io[j->tier], j->path, mem, (size_t)j->len);
		if (j->result == 0)
			carry_config(d, a->io, j->tier, j->path);
	} else if (j->kind == JOB_PROBE) {
		probe_run(d, a->io, j->ask);
	} else {
		run_demotes(d, a, j, 1);
	}
	j->ns = kv_monotonic_ns() - t0;
}

/* Whether a write of thread idx has a write of the same file that left
 * the ring before it (so an older version) still on another thread: that
 * must land first, as its rename coming last would put the older bytes
 * back. */
static int older_same_file(const struct writer *w, unsigned idx)
{
	for (size_t m = 0; m < w->nactive[idx]; m++) {
		const struct job *j = &w->active[idx][m];

		if (j->kind != JOB_WRITE)
			continue;
		for (unsigned k = 0; k < w->nthreads; k++) {
			if (k == idx || w->ticket[k] >= w->ticket[idx])
				continue;
			for (size_t q = 0; q < w->nactive[k]; q++) {
				const struct job *o = &w->active[k][q];

				if (o->kind == JOB_WRITE && o->tier == j->tier &&
				    !strcmp(o->path, j->path))
					return 1;
			}
		}
	}
	return 0;
}

/* Whether a write or a move goes to a bucket (a move: to the next tier
 * down, where it usually lands): such jobs batch, so that the bucket has
 * their requests in flight together. */
static int to_bucket(const struct offd *d, const struct job *j)
{
	unsigned dest = j->kind == JOB_DEMOTE ? j->tier + 1 : j->tier;

	return dest < d->ntiers && kv_root_is_s3(d->tiers[dest].root);
}

/* Whether job next may join first, of a batch to a bucket. */
static int joins(const struct job *first, const struct job *next)
{
	return next->kind == first->kind && next->tier == first->tier;
}

static int taken(const struct job *jobs, size_t n, const char *path)
{
	for (size_t k = 0; k < n; k++)
		if (!strcmp(jobs[k].path, path))
			return 1;
	return 0;
}

/* Moves wait in the ring between writes, as each write landing in a
 * bounded tier queues the move that makes its room: gather those that
 * join jobs[0] from anywhere in the ring, the rest keeping their order. */
static size_t gather_moves(struct writer *w, struct job *jobs, size_t n, uint64_t bytes)
{
	size_t kept = 0, count = w->wcount;

	for (size_t q = 0; q < count; q++) {
		const struct job *j = &w->writes[(w->whead + q) % w->wcap];

		if (n < BATCH && joins(&jobs[0], j) && bytes + j->len <= BATCH_BYTES &&
		    !taken(jobs, n, j->path)) {
			jobs[n++] = *j;
			bytes += j->len;
			continue;
		}
		if (kept != q)
			w->writes[(w->whead + kept) % w->wcap] = *j;
		kept++;
	}
	w->wcount = kept;
	return n;
}

/* Take the jobs at the ring's head, w->lock held: one, or as many after
 * it (at most BATCH, and BATCH_BYTES of moves) as join it, each a file
 * the others are not: the writes to a bucket that follow it, or the
 * moves toward a bucket from anywhere in the ring. */
static size_t take_writes(const struct offd *d, struct writer *w, struct job *jobs)
{
	size_t n = 0;

	jobs[n++] = w->writes[w->whead];
	w->whead = (w->whead + 1) % w->wcap;
	w->wcount--;
	if (!w->wcount || !to_bucket(d, &jobs[0]))
		return n;
	if (jobs[0].kind == JOB_DEMOTE)
		return gather_moves(w, jobs, n, jobs[0].len);
	while (w->wcount && n < BATCH) {
		const struct job *next = &w->writes[w->whead];

		if (!joins(&jobs[0], next) || taken(jobs, n, next->path))
			break;
		jobs[n++] = *next;
		w->whead = (w->whead + 1) % w->wcap;
		w->wcount--;
	}
	return n;
}

/* Every job in flight fits. */
static size_t done_cap(const struct writer *w)
{
	return w->wcap + 2 * w->lcap;
}

static void worker_arg_free(struct worker_arg *a)
{
	if (!a)
		return;
	for (size_t k = 0; a->moves && k < BATCH; k++)
		kv_io_buf_free(a->moves[k].buf);
	free(a->moves);
	free(a->jobs);
	free(a->reqs);
	free(a);
}

static void *worker(void *p)
{
	struct worker_arg *a = p;
	struct offd *d = a->d;
	struct writer *w = &d->wr;
	struct job j;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->pcount && (a->prober || (!w->lcount && !w->wcount)) && !w->stop)
			pthread_cond_wait(a->prober ? &w->pcond : &w->cond, &w->lock);
		if (w->pcount) {
			j = w->probes[w->phead];
			w->phead = (w->phead + 1) % w->lcap;
			w->pcount--;
		} else if (a->prober) {
			break;
		} else if (w->lcount) {
			size_t n = 0;

			while (w->lcount && n < BATCH) {
				a->jobs[n++] = w->loads[w->lhead];
				w->lhead = (w->lhead + 1) % w->lcap;
				w->lcount--;
			}
			w->running += n;
			pthread_mutex_unlock(&w->lock);
			run_loads(d, a, a->jobs, n);
			pthread_mutex_lock(&w->lock);
			w->running -= n;
			pthread_cond_broadcast(&w->cond);
			continue;
		} else if (w->wcount) {
			size_t n = take_writes(d, w, a->jobs);

			w->running += n;
			w->active[a->idx] = a->jobs;
			w->nactive[a->idx] = n;
			w->ticket[a->idx] = w->next_ticket++;
			while (older_same_file(w, a->idx))
				pthread_cond_wait(&w->cond, &w->lock);
			pthread_mutex_unlock(&w->lock);
			if (n == 1)
				run_job(d, a, &a->jobs[0]);
			else if (a->jobs[0].kind == JOB_DEMOTE)
				run_demotes(d, a, a->jobs, n);
			else
				run_writes(d, a, a->jobs, n);
			pthread_mutex_lock(&w->lock);
			w->active[a->idx] = NULL;
			w->nactive[a->idx] = 0;
			/* Wake a write waiting on these files, and idle threads. */
			pthread_cond_broadcast(&w->cond);
			w->running -= n;
			for (size_t k = 0; k < n; k++)
				job_finished_locked(w, &a->jobs[k]);
			continue;
		} else {
			break;
		}
		/* A probe: it writes nothing, so older_same_file need not see it. */
		w->running++;
		pthread_mutex_unlock(&w->lock);
		run_job(d, a, &j);
		pthread_mutex_lock(&w->lock);
		pthread_cond_broadcast(&w->cond);
		w->running--;
		job_finished_locked(w, &j);
	}
	pthread_mutex_unlock(&w->lock);
	worker_arg_free(a);
	return NULL;
}

int writer_start(struct offd *d, unsigned nthreads, size_t wcap)
{
	struct writer *w = &d->wr;
	int err;

	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	pthread_cond_init(&w->pcond, NULL);
	w->wcap = wcap;
	/* Each load holds a slot; past the cap a miss parks (do_lookup). */
	w->lcap = d->npages > LOADS_MIN ? d->npages : LOADS_MIN;
	if (w->lcap > d->nslots)
		w->lcap = d->nslots;
	w->writes = calloc(w->wcap, sizeof(struct job));
	w->loads = calloc(w->lcap, sizeof(struct job));
	w->probes = calloc(w->lcap, sizeof(struct job));
	w->done = calloc(done_cap(w), sizeof(struct job));
	w->threads = calloc(nthreads + 1, sizeof(pthread_t));
	w->active = calloc(nthreads + 1, sizeof(*w->active));
	w->nactive = calloc(nthreads + 1, sizeof(*w->nactive));
	w->ticket = calloc(nthreads + 1, sizeof(*w->ticket));
	w->handles = calloc((size_t)(nthreads + 1) * d->ntiers, sizeof(struct kv_tier *));
	if (!w->writes || !w->loads || !w->probes || !w->done || !w->threads || !w->active ||
	    !w->nactive ||
	    !w->ticket || !w->handles)
		return -ENOMEM;
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0)
		return -errno;
	for (unsigned t = 0; t < d->ntiers; t++)
		w->reporters[t] = (struct reporter){ .w = w, .tier = t };
	/* The last one started is the prober. */
	for (unsigned i = 0; i <= nthreads; i++) {
		struct kv_tier **io = w->handles + (size_t)i * d->ntiers;
		struct worker_arg *a;

		/* REPLACE: a key put again replaces its RAM block, and so its
		 * file. */
		for (unsigned t = 0; t < d->ntiers; t++) {
			err = tier_open_handle(d, t, KV_IO_REPLACE, &io[t]);
			if (err)
				return err;
			kv_tier_report_to(io[t], handle_reported, &w->reporters[t]);
		}
		a = calloc(1, sizeof(*a));
		if (a) {
			a->jobs = calloc(BATCH, sizeof(*a->jobs));
			a->reqs = calloc(BATCH, sizeof(*a->reqs));
			a->moves = calloc(BATCH, sizeof(*a->moves));
		}
		if (!a || !a->jobs || !a->reqs || !a->moves) {
			worker_arg_free(a);
			return -ENOMEM;
		}
		a->d = d;
		a->idx = i;
		a->io = io;
		a->prober = i == nthreads;
		err = pthread_create(&w->threads[i], NULL, worker, a);
		if (err) {
			worker_arg_free(a);
			return -err;
		}
		if (a->prober)
			w->prober = 1;
		else
			w->nthreads++;
	}
	return 0;
}

int writer_push(struct offd *d, const struct job *job)
{
	struct writer *w = &d->wr;
	int err = 0;

	pthread_mutex_lock(&w->lock);
	if (job->kind == JOB_PROBE && w->pcount < w->lcap) {
		w->probes[(w->phead + w->pcount) % w->lcap] = *job;
		w->pcount++;
		/* The prober, and an idle worker if there is one: whichever
		 * comes first takes it. */
		pthread_cond_signal(&w->pcond);
	} else if (job->kind == JOB_PROBE) {
		err = -EAGAIN;
	} else if (job->kind == JOB_LOAD) {
		/* At most one load per slot is ever in flight. */
		w->loads[(w->lhead + w->lcount) % w->lcap] = *job;
		w->lcount++;
	} else if (w->wcount < w->wcap) {
		w->writes[(w->whead + w->wcount) % w->wcap] = *job;
		w->wcount++;
	} else {
		err = -EAGAIN;
	}
	if (!err)
		pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return err;
}

int writer_pop_done(struct offd *d, struct job *out)
{
	struct writer *w = &d->wr;
	int err = -EAGAIN;

	pthread_mutex_lock(&w->lock);
	if (w->dcount) {
		*out = w->done[w->dhead];
		w->dhead = (w->dhead + 1) % done_cap(w);
		w->dcount--;
		err = 0;
	}
	pthread_mutex_unlock(&w->lock);
	return err;
}

size_t writer_queued(struct offd *d)
{
	struct writer *w = &d->wr;
	size_t n;

	pthread_mutex_lock(&w->lock);
	n = w->wcount;
	pthread_mutex_unlock(&w->lock);
	return n;
}

void writer_stop(struct offd *d)
{
	struct writer *w = &d->wr;

	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_broadcast(&w->cond);
	pthread_cond_broadcast(&w->pcond);
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->nthreads + (unsigned)w->prober; i++)
		pthread_join(w->threads[i], NULL);
	for (size_t i = 0; w->handles && i < (size_t)(w->nthreads + 1) * d->ntiers; i++)
		kv_tier_close(w->handles[i]);
	w->nthreads = 0;
	w->prober = 0;
}
