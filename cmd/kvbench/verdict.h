/* kvbench verdict: load vs recompute arithmetic (see verdict.c). */
#ifndef KVBENCH_VERDICT_H
#define KVBENCH_VERDICT_H

#include <stddef.h>
#include <stdint.h>
#include "kvbench.h"

/* A measured prefill curve: seconds to compute the KV of n tokens. */
struct prefill_point {
	double tokens;
	double seconds;
};

struct verdict {
	uint64_t bytes_per_token;	/* per GPU (rank) */
	/* Prefill, one of three ways: a fixed rate, a FLOP model, or a
	 * measured curve. */
	double prefill_tps;		/* > 0: a given rate, tokens/s */
	double params;			/* > 0: the FLOP model, with the next */
	double gpu_tflops;
	double mfu;
	unsigned tp;
	/* The model's attention, for the quadratic term; layers 0: none
	 * known (no config, or MLA), the linear term alone. */
	unsigned layers, sliding_layers;
	unsigned heads, head_dim, sliding_window;
	const char *measured_from;	/* --measured-prefill FILE */
	struct prefill_point *curve;	/* sorted by tokens */
	size_t ncurve;
	double read_Bps;		/* per GPU */
	uint64_t latency_ns;		/* fixed cost per request */
};

/* The attention of a model config, for the FLOP model. */
void verdict_attention(struct verdict *v, const struct kv_geometry *g);

/* Read a tokens-vs-seconds curve (two numbers a line, '#' comments);
 * 0, or -errno / -EINVAL with a message in err. */
int verdict_load_curve(struct verdict *v, const char *path, char *err, size_t errlen);

/* Seconds to recompute the KV of n tokens. */
double verdict_recompute_s(const struct verdict *v, double n);

/* The verdict as a JSON object, or as text on stdout. */
json_t *verdict_json(const struct verdict *v);
void verdict_text(const struct verdict *v);

/* The verdict as text or one JSON document on stdout. */
int verdict_print(const struct verdict *v, int json);

void verdict_free(struct verdict *v);

#endif
