/*
 * Write-behind and read-through workers.  Each thread owns a kv_io
 * handle; the event loop queues jobs (writes into a bounded ring, loads
 * into a ring with room for one per slot so they are never refused) and
 * collects finished ones through an eventfd.  Loads go first: a client
 * waits on each of them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "kvoffd.h"

struct worker_arg {
	struct offd *d;
	struct kv_io *io;
};

static void run_job(struct offd *d, struct kv_io *io, struct job *j)
{
	unsigned char *mem = d->pool + kv_slots_offset(d->store, j->slot);
	uint64_t cap = kv_slots_capacity(d->store, j->slot);
	int64_t t0 = kv_monotonic_ns();
	uint64_t size;
	size_t got = 0;

	if (j->kind == JOB_WRITE) {
		/* A client that wrote into a committed slot must not get
		 * its bytes onto disk under a fresh checksum. */
		j->result = kv_xxh3(mem, (size_t)j->len) != j->sum ? -KV_ECHECKSUM :
			    kv_io_put(io, j->path, mem, (size_t)j->len);
	} else {
		j->result = kv_io_size(io, j->path, &size);
		if (!j->result && size > cap)
			j->result = -EFBIG;
		if (!j->result)
			j->result = kv_io_get(io, j->path, mem, (size_t)cap, &got);
		j->len = j->result ? 0 : got;
		j->sum = j->result ? 0 : kv_xxh3(mem, got);
	}
	j->ns = kv_monotonic_ns() - t0;
}

static void *worker(void *p)
{
	struct worker_arg *a = p;
	struct offd *d = a->d;
	struct writer *w = &d->wr;
	struct job j;
	uint64_t one = 1;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->lcount && !w->wcount && !w->stop)
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->lcount) {
			j = w->loads[w->lhead];
			w->lhead = (w->lhead + 1) % w->lcap;
			w->lcount--;
		} else if (w->wcount) {
			j = w->writes[w->whead];
			w->whead = (w->whead + 1) % w->wcap;
			w->wcount--;
		} else {
			break;
		}
		w->running++;
		pthread_mutex_unlock(&w->lock);
		run_job(d, a->io, &j);
		pthread_mutex_lock(&w->lock);
		w->running--;
		w->done[(w->dhead + w->dcount) % (w->wcap + w->lcap)] = j;
		w->dcount++;
		/* The loop reads the eventfd; a failed write would mean the
		 * counter overflowed, which 2^64 completions cannot do. */
		if (write(w->efd, &one, sizeof(one)) < 0)
			break;
	}
	pthread_mutex_unlock(&w->lock);
	free(a);
	return NULL;
}

int writer_start(struct offd *d, unsigned nthreads, size_t wcap)
{
	struct writer *w = &d->wr;
	/* REPLACE: a key put again replaces its RAM block, and so its file. */
	struct kv_io_opts opts = { .queue_depth = 4, .flags = d->io_flags | KV_IO_REPLACE };
	int err;

	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->wcap = wcap;
	w->lcap = d->nslots;
	w->writes = calloc(w->wcap, sizeof(struct job));
	w->loads = calloc(w->lcap, sizeof(struct job));
	w->done = calloc(w->wcap + w->lcap, sizeof(struct job));
	w->threads = calloc(nthreads, sizeof(pthread_t));
	w->ios = calloc(nthreads, sizeof(struct kv_io *));
	if (!w->writes || !w->loads || !w->done || !w->threads || !w->ios)
		return -ENOMEM;
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0)
		return -errno;
	for (unsigned i = 0; i < nthreads; i++) {
		struct worker_arg *a;

		err = kv_io_open(d->root, &opts, &w->ios[i]);
		if (err)
			return err;
		a = malloc(sizeof(*a));
		if (!a)
			return -ENOMEM;
		a->d = d;
		a->io = w->ios[i];
		err = pthread_create(&w->threads[i], NULL, worker, a);
		if (err) {
			free(a);
			return -err;
		}
		w->nthreads++;
	}
	return 0;
}

int writer_push(struct offd *d, const struct job *job)
{
	struct writer *w = &d->wr;
	int err = 0;

	pthread_mutex_lock(&w->lock);
	if (job->kind == JOB_LOAD) {
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
		w->dhead = (w->dhead + 1) % (w->wcap + w->lcap);
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
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->nthreads; i++)
		pthread_join(w->threads[i], NULL);
	for (unsigned i = 0; i < w->nthreads; i++)
		kv_io_close(w->ios[i]);
	w->nthreads = 0;
}
