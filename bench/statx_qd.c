/*
 * Q statx calls in flight on one directory of N files, two ways: Q
 * threads each calling statx(2), as kvtools' walk does, or one thread
 * keeping Q IORING_OP_STATX requests in the ring.  Prints statx/s.
 *
 *   statx_qd DIR N Q threads|uring
 *
 * Files are named f0 .. f<N-1> (bench/statx-qd.sh makes them).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MASK	(STATX_TYPE | STATX_SIZE | STATX_ATIME | STATX_MTIME)

static int nfiles, dfd;
static atomic_int next_file;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *stat_some(void *arg)
{
	struct statx sx;
	char name[32];
	int i;

	(void)arg;
	while ((i = atomic_fetch_add(&next_file, 1)) < nfiles) {
		snprintf(name, sizeof(name), "f%d", i);
		if (statx(dfd, name, AT_SYMLINK_NOFOLLOW, MASK, &sx) < 0)
			perror(name);
	}
	return NULL;
}

static int by_threads(int q)
{
	pthread_t *t = calloc((size_t)q, sizeof(*t));

	if (!t)
		return -1;
	for (int i = 0; i < q; i++)
		pthread_create(&t[i], NULL, stat_some, NULL);
	for (int i = 0; i < q; i++)
		pthread_join(t[i], NULL);
	free(t);
	return 0;
}

static int by_ring(int q)
{
	char (*names)[32] = malloc((size_t)nfiles * 32);
	struct statx *sx = malloc(sizeof(*sx) * (size_t)nfiles);
	int submitted = 0, done = 0, inflight = 0;
	struct io_uring ring;
	struct io_uring_cqe *cqe;

	if (!names || !sx || io_uring_queue_init((unsigned)q, &ring, 0) < 0)
		return -1;
	while (done < nfiles) {
		while (inflight < q && submitted < nfiles) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			snprintf(names[submitted], 32, "f%d", submitted);
			io_uring_prep_statx(sqe, dfd, names[submitted], AT_SYMLINK_NOFOLLOW, MASK,
					    &sx[submitted]);
			submitted++;
			inflight++;
		}
		io_uring_submit(&ring);
		if (io_uring_wait_cqe(&ring, &cqe) < 0)
			return -1;
		do {
			if (cqe->res < 0)
				fprintf(stderr, "statx: %s\n", strerror(-cqe->res));
			io_uring_cqe_seen(&ring, cqe);
			done++;
			inflight--;
		} while (!io_uring_peek_cqe(&ring, &cqe));
	}
	io_uring_queue_exit(&ring);
	free(names);
	free(sx);
	return 0;
}

int main(int argc, char **argv)
{
	double t0, t;
	int q, err;

	if (argc != 5) {
		fprintf(stderr, "usage: statx_qd DIR N Q threads|uring\n");
		return 2;
	}
	dfd = open(argv[1], O_RDONLY | O_DIRECTORY);
	nfiles = atoi(argv[2]);
	q = atoi(argv[3]);
	if (dfd < 0 || nfiles <= 0 || q <= 0 || q > 4096) {
		fprintf(stderr, "statx_qd: bad arguments\n");
		return 2;
	}
	t0 = now();
	err = strcmp(argv[4], "uring") ? by_threads(q) : by_ring(q);
	t = now() - t0;
	if (err)
		return 1;
	printf("%s %d %.0f\n", argv[4], q, nfiles / t);
	return 0;
}
