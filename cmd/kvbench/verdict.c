/*
 * kvbench verdict: is loading a prefix's KV blocks from storage faster
 * than recomputing its prefill?  For n tokens,
 *
 *   load(n)      = latency + n * bytes_per_token / read_Bps
 *   recompute(n) = n / prefill_tokens_per_s
 *
 * so loading wins above n* = latency / (1/P - b/B) when b/B < 1/P, and
 * the read bandwidth per GPU that matches prefill is b * P.  Prefill
 * FLOPs are taken as 2 * params per token (the attention term ignored).
 */
#include <math.h>
#include <stdio.h>
#include "../tool.h"
#include "verdict.h"

/* Smallest whole prefix for which loading is strictly faster; 0 if
 * loading never wins. */
static uint64_t break_even(const struct verdict *v)
{
	double per_load = (double)v->bytes_per_token / v->read_Bps;
	double per_comp = 1.0 / v->prefill_tps;

	if (per_load >= per_comp)
		return 0;
	return (uint64_t)floor((double)v->latency_ns / 1e9 / (per_comp - per_load)) + 1;
}

static double load_s(const struct verdict *v, uint64_t n)
{
	return (double)v->latency_ns / 1e9 + (double)n * (double)v->bytes_per_token / v->read_Bps;
}

void verdict_estimate(struct verdict *v)
{
	v->prefill_tps = v->tp * v->gpu_tflops * 1e12 * v->mfu / (2.0 * v->params);
}

json_t *verdict_json(const struct verdict *v)
{
	uint64_t be = break_even(v), n;
	double need = (double)v->bytes_per_token * v->prefill_tps;
	json_t *j = json_object(), *rows = json_array(), *est;

	json_object_set_new(j, "bytes_per_token", json_integer((json_int_t)v->bytes_per_token));
	json_object_set_new(j, "prefill_tokens_per_s", json_real(v->prefill_tps));
	if (v->params > 0) {
		est = json_object();
		json_object_set_new(est, "params", json_real(v->params));
		json_object_set_new(est, "gpu_flops_per_s", json_real(v->gpu_tflops * 1e12));
		json_object_set_new(est, "mfu", json_real(v->mfu));
		json_object_set_new(est, "gpus", json_integer(v->tp));
		json_object_set_new(j, "prefill_estimate", est);
	} else {
		json_object_set_new(j, "prefill_estimate", json_null());
	}
	json_object_set_new(j, "read_Bps", json_integer((json_int_t)v->read_Bps));
	json_object_set_new(j, "latency_ns", json_integer((json_int_t)v->latency_ns));
	json_object_set_new(j, "required_read_Bps", json_integer((json_int_t)llround(need)));
	json_object_set_new(j, "break_even_tokens",
			    be ? json_integer((json_int_t)be) : json_null());
	for (n = 1024; n <= 131072; n *= 2) {
		json_t *r = json_object();
		double l = load_s(v, n), p = (double)n / v->prefill_tps;

		json_object_set_new(r, "tokens", json_integer((json_int_t)n));
		json_object_set_new(r, "bytes", json_integer((json_int_t)(n * v->bytes_per_token)));
		json_object_set_new(r, "load_ns", json_integer((json_int_t)llround(l * 1e9)));
		json_object_set_new(r, "recompute_ns", json_integer((json_int_t)llround(p * 1e9)));
		json_object_set_new(r, "faster", json_string(l < p ? "load" : "recompute"));
		json_array_append_new(rows, r);
	}
	json_object_set_new(j, "contexts", rows);
	return j;
}

void verdict_text(const struct verdict *v)
{
	uint64_t be = break_even(v), n;
	double need = (double)v->bytes_per_token * v->prefill_tps;
	char a[16], c[16];

	kv_size_format(v->bytes_per_token, a, sizeof(a));
	printf("KV bytes per token per GPU: %llu (%s)\n",
	       (unsigned long long)v->bytes_per_token, a);
	if (v->params > 0)
		printf("prefill: %.0f tokens/s = %u GPU(s) x %.0f TFLOP/s x MFU %.2f / (2 x %.3g params)\n",
		       v->prefill_tps, v->tp, v->gpu_tflops, v->mfu, v->params);
	else
		printf("prefill: %.0f tokens/s (given)\n", v->prefill_tps);
	kv_size_format((uint64_t)v->read_Bps, a, sizeof(a));
	printf("storage: %.0f B/s (%s/s) per GPU, %.3f ms fixed latency per request\n",
	       v->read_Bps, a, (double)v->latency_ns / 1e6);
	kv_size_format((uint64_t)llround(need), c, sizeof(c));
	printf("read bandwidth per GPU to match prefill: %.0f B/s (%s/s)\n", need, c);
	if (be)
		printf("break-even prefix: %llu tokens (loading is faster from there up)\n",
		       (unsigned long long)be);
	else
		printf("break-even prefix: none (storage is slower than prefill at any length)\n");
	printf("\n%8s %12s %12s %14s  %s\n", "tokens", "bytes", "load_ms", "recompute_ms", "faster");
	for (n = 1024; n <= 131072; n *= 2) {
		double l = load_s(v, n), p = (double)n / v->prefill_tps;

		kv_size_format(n * v->bytes_per_token, a, sizeof(a));
		printf("%8llu %12s %12.3f %14.3f  %s\n", (unsigned long long)n, a, l * 1e3,
		       p * 1e3, l < p ? "load" : "recompute");
	}
}

int verdict_print(const struct verdict *v, int json)
{
	if (json) {
		json_t *j = verdict_json(v);

		json_object_set_new(j, "version", json_integer(KVBENCH_JSON_VERSION));
		tool_json_print(j);
	} else {
		verdict_text(v);
	}
	return 0;
}
