/* MPI for kvbench's ranks, and its absence: see ranks.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ranks.h"

/* Whether mpirun (OpenMPI, or a PMI launcher such as the MPI Operator's
 * hydra) started this process: only then is there a job to join. */
static const char *launched(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (getenv(vars[i]))
			return vars[i];
	return NULL;
}

#ifdef KV_HAVE_MPI
#include <mpi.h>

#define WALL_TAG	7

static int rank, size = 1, joined;
static MPI_Request wall_req = MPI_REQUEST_NULL;
static int wall_seen;		/* notices received this phase */
static char wall_buf, wall_note = 1;
static MPI_Request *wall_sends;	/* one per peer, waited for in drain */

int ranks_init(int *argc, char ***argv, char *err, size_t errlen)
{
	int provided;

	(void)err;
	(void)errlen;
	if (!launched())
		return 0;
	/* Only the main thread calls MPI; the workers never do. */
	MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	joined = 1;
	return 0;
}

void ranks_finish(void)
{
	if (joined)
		MPI_Finalize();
	joined = 0;
	free(wall_sends);
	wall_sends = NULL;
}

void ranks_abort(int code)
{
	if (joined && size > 1)
		MPI_Abort(MPI_COMM_WORLD, code);
}

int ranks_rank(void) { return rank; }
int ranks_size(void) { return size; }

void ranks_barrier(void)
{
	if (size > 1)
		MPI_Barrier(MPI_COMM_WORLD);
}

void ranks_wall_arm(void)
{
	wall_seen = 0;
	if (size > 1)
		MPI_Irecv(&wall_buf, 1, MPI_CHAR, MPI_ANY_SOURCE, WALL_TAG, MPI_COMM_WORLD,
			  &wall_req);
}

int ranks_wall_hit(void)
{
	int flag = 0;

	if (size < 2)
		return 0;
	if (wall_seen)
		return 1;
	MPI_Test(&wall_req, &flag, MPI_STATUS_IGNORE);
	if (flag)
		wall_seen = 1;
	return flag;
}

void ranks_wall_done(void)
{
	if (size < 2)
		return;
	if (!wall_sends && !(wall_sends = calloc((size_t)size, sizeof(*wall_sends))))
		ranks_abort(3);
	for (int r = 0; r < size; r++)
		wall_sends[r] = MPI_REQUEST_NULL;
	for (int r = 0; r < size; r++)
		if (r != rank)
			MPI_Isend(&wall_note, 1, MPI_CHAR, r, WALL_TAG, MPI_COMM_WORLD,
				  &wall_sends[r]);
}

void ranks_wall_drain(void)
{
	int got;

	if (size < 2)
		return;
	/* Every peer sends exactly one notice a phase. */
	if (!wall_seen)
		MPI_Wait(&wall_req, MPI_STATUS_IGNORE);
	for (got = 1; got < size - 1; got++)
		MPI_Recv(&wall_buf, 1, MPI_CHAR, MPI_ANY_SOURCE, WALL_TAG, MPI_COMM_WORLD,
			 MPI_STATUS_IGNORE);
	MPI_Waitall(size, wall_sends, MPI_STATUSES_IGNORE);
	wall_seen = 0;
	/* No rank may send the next phase's notice into this one's count. */
	MPI_Barrier(MPI_COMM_WORLD);
}

int ranks_gather(const uint64_t *mine, size_t n, uint64_t **all, size_t **ns)
{
	int len = (int)n, *lens = NULL, *offs = NULL, r = 0;
	size_t total = 0;

	*all = NULL;
	*ns = NULL;
	if (rank == 0) {
		lens = calloc((size_t)size, sizeof(*lens));
		offs = calloc((size_t)size, sizeof(*offs));
		*ns = calloc((size_t)size, sizeof(**ns));
		if (!lens || !offs || !*ns)
			r = -ENOMEM;
	}
	if (size == 1) {
		if (!r && !(*all = malloc(n * sizeof(**all))))
			r = -ENOMEM;
		if (!r) {
			memcpy(*all, mine, n * sizeof(*mine));
			(*ns)[0] = n;
		}
		goto out;
	}
	MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (rank == 0 && !r) {
		for (int i = 0; i < size; i++) {
			offs[i] = (int)total;
			(*ns)[i] = (size_t)lens[i];
			total += (size_t)lens[i];
		}
		if (!(*all = malloc((total ? total : 1) * sizeof(**all))))
			r = -ENOMEM;
	}
	if (r)
		ranks_abort(3);
	MPI_Gatherv(mine, len, MPI_UINT64_T, *all, lens, offs, MPI_UINT64_T, 0, MPI_COMM_WORLD);
out:
	free(lens);
	free(offs);
	if (r) {
		free(*all);
		free(*ns);
		*all = NULL;
		*ns = NULL;
	}
	return r;
}

#else

int ranks_init(int *argc, char ***argv, char *err, size_t errlen)
{
	const char *var = launched();
	const char *n = var ? getenv(var) : NULL;

	(void)argc;
	(void)argv;
	/* One process under mpirun -np 1 is a plain run; more would all
	 * write the same files, each thinking it alone. */
	if (var && strcmp(var, "PMIX_RANK") && n && strcmp(n, "1")) {
		snprintf(err, errlen, "this kvbench was built without MPI and cannot run as "
			 "one of %s ranks (install libopenmpi-dev and rebuild)", n);
		return -ENOTSUP;
	}
	return 0;
}

void ranks_finish(void) {}
void ranks_abort(int code) { (void)code; }
int ranks_rank(void) { return 0; }
int ranks_size(void) { return 1; }
void ranks_barrier(void) {}
void ranks_wall_arm(void) {}
int ranks_wall_hit(void) { return 0; }
void ranks_wall_done(void) {}
void ranks_wall_drain(void) {}

int ranks_gather(const uint64_t *mine, size_t n, uint64_t **all, size_t **ns)
{
	*all = malloc((n ? n : 1) * sizeof(**all));
	*ns = malloc(sizeof(**ns));
	if (!*all || !*ns) {
		free(*all);
		free(*ns);
		return -ENOMEM;
	}
	memcpy(*all, mine, n * sizeof(*mine));
	**ns = n;
	return 0;
}

#endif
