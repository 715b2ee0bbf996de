/* kvbench verdict: load vs recompute arithmetic (see verdict.c). */
#ifndef KVBENCH_VERDICT_H
#define KVBENCH_VERDICT_H

#include <stdint.h>
#include "kvbench.h"

struct verdict {
	uint64_t bytes_per_token;	/* per GPU (rank) */
	double prefill_tps;		/* tokens/s of the whole instance */
	double params;			/* > 0 when prefill_tps is estimated */
	double gpu_tflops;
	double mfu;
	unsigned tp;
	double read_Bps;		/* per GPU */
	uint64_t latency_ns;		/* fixed cost per request */
};

/* prefill_tps from params, gpu_tflops, mfu and tp. */
void verdict_estimate(struct verdict *v);

/* The verdict as a JSON object, or as text on stdout. */
json_t *verdict_json(const struct verdict *v);
void verdict_text(const struct verdict *v);

/* The verdict as text or one JSON document on stdout. */
int verdict_print(const struct verdict *v, int json);

#endif
