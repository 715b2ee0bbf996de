/*
 * The ranks of a run under mpirun: rank 0 of 1 in a build without MPI
 * or a process mpirun did not start, so a plain kvbench makes no MPI
 * call at all.  Only ranks.c includes <mpi.h>.
 */
#ifndef KVBENCH_RANKS_H
#define KVBENCH_RANKS_H

#include <stddef.h>
#include <stdint.h>

/* Join the MPI job when mpirun started this process; 0, or -ENOTSUP
 * (with the reason in err) when it did and this build has no MPI. */
int ranks_init(int *argc, char ***argv, char *err, size_t errlen);
void ranks_finish(void);
/* End every rank of the job after a failure in this one. */
void ranks_abort(int code);

int ranks_rank(void);
int ranks_size(void);
void ranks_barrier(void);

/*
 * Stonewalling: each rank calls ranks_wall_done once when its share of
 * a phase is done; ranks_wall_hit says whether another rank's came
 * first, and ranks_wall_drain, after the phase, takes the notices still
 * in flight so the next phase starts clean.
 */
void ranks_wall_arm(void);
int ranks_wall_hit(void);
void ranks_wall_done(void);
void ranks_wall_drain(void);

/* Rank 0 gets every rank's n[rank] words, back to back, in *all
 * (malloc'd, with the counts in *ns); the others get NULL.  -ENOMEM. */
int ranks_gather(const uint64_t *mine, size_t n, uint64_t **all, size_t **ns);

#endif
