/*
 * `kvbench probe`: would compressing blocks (zstd, with or without
 * byte planes) raise the effective bandwidth of a link?  Real blocks are
 * sampled per model dtype and the answer said plainly.
 */
#ifndef KVBENCH_PROBE_H
#define KVBENCH_PROBE_H

#include <stdint.h>

#define PROBE_MAX_LEVELS	8

struct probe_opts {
	const char *root;		/* sample this cache root, or */
	char **files;			/* these files of raw block bytes */
	int nfiles;
	const char *dtype;		/* the files' dtype (default bfloat16) */
	uint64_t block_bytes;		/* the files cut into blocks (default 2M) */
	unsigned samples;		/* blocks per dtype from a root */
	int levels[PROBE_MAX_LEVELS];
	int nlevels;
	double link_Bps;		/* 0: none given */
	const char *link_from;		/* what gave it */
	uint64_t seed;
	int json;
};

/* Run the probe and print; the exit status. */
int probe_main(const struct probe_opts *o);

#endif
