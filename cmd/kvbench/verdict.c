/*
 * kvbench verdict: is loading a prefix's KV blocks from storage faster
 * than recomputing its prefill?  For n tokens,
 *
 *   load(n)      = latency + n * bytes_per_token / read_Bps
 *   recompute(n) = FLOPs(n) / (gpus * peak FLOP/s * MFU), where
 *   FLOPs(n)     = 2 * params * n                      (the matmuls)
 *                + 2 * heads * head_dim * n (n + 1)    per full layer
 *                + 4 * heads * head_dim * sum min(i, window)  per sliding layer
 *
 * The attention terms count QK^T and AV (two multiply-adds per head
 * dimension) over the keys each causal query sees, so recompute grows
 * with the square of the prefix and loading's advantage with its length.
 * A given rate (n / tokens_per_s) or a measured curve replace the model.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../tool.h"
#include "verdict.h"

/* Break-even is searched up to here: a million tokens is past any
 * context window the table covers. */
#define SCAN_TOKENS	(1u << 20)
#define TABLE_FIRST	1024
#define TABLE_LAST	131072

void verdict_attention(struct verdict *v, const struct kv_geometry *g)
{
	/* MLA's prefill attention runs on expanded heads whose widths the
	 * geometry does not keep: leave the term out rather than guess. */
	if (g->mla || !g->attention_heads || !g->head_dim)
		return;
	v->layers = g->layers;
	v->sliding_layers = g->sliding_layers;
	v->sliding_window = g->sliding_window;
	v->heads = g->attention_heads;
	v->head_dim = g->head_dim;
}

static int cmp_point(const void *a, const void *b)
{
	const struct prefill_point *x = a, *y = b;

	return (x->tokens > y->tokens) - (x->tokens < y->tokens);
}

int verdict_load_curve(struct verdict *v, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	char line[256];
	unsigned lineno = 0;

	if (!f) {
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
		return -errno;
	}
	while (fgets(line, sizeof(line), f)) {
		double t, s;
		char *p = line + strspn(line, " \t"), extra;
		struct prefill_point *n;

		lineno++;
		if (*p == '#' || *p == '\n' || !*p)
			continue;
		if (sscanf(p, "%lf %lf %c", &t, &s, &extra) != 2 || !isfinite(t) ||
		    !isfinite(s) || t <= 0 || s <= 0) {
			snprintf(err, errlen, "'%s' line %u: want 'TOKENS SECONDS', both above 0",
				 path, lineno);
			fclose(f);
			return -EINVAL;
		}
		n = realloc(v->curve, (v->ncurve + 1) * sizeof(*n));
		if (!n) {
			fclose(f);
			return -ENOMEM;
		}
		v->curve = n;
		v->curve[v->ncurve++] = (struct prefill_point){ t, s };
	}
	fclose(f);
	if (!v->ncurve) {
		snprintf(err, errlen, "'%s' has no 'TOKENS SECONDS' lines", path);
		return -EINVAL;
	}
	qsort(v->curve, v->ncurve, sizeof(*v->curve), cmp_point);
	v->measured_from = path;
	return 0;
}

/* Piecewise linear between measured points; below the first, in
 * proportion to it; past the last, along the last segment, which
 * understates a quadratic cost and so never flatters loading. */
static double curve_s(const struct verdict *v, double n)
{
	const struct prefill_point *c = v->curve;
	size_t lo = 0, hi = v->ncurve - 1;

	if (n <= c[0].tokens || v->ncurve == 1)
		return c[0].seconds * n / c[0].tokens;
	if (n >= c[hi].tokens)
		lo = hi - 1;
	else
		while (hi - lo > 1) {
			size_t mid = (lo + hi) / 2;

			if (c[mid].tokens <= n)
				lo = mid;
			else
				hi = mid;
		}
	hi = lo + 1;
	return c[lo].seconds + (c[hi].seconds - c[lo].seconds) * (n - c[lo].tokens) /
			       (c[hi].tokens - c[lo].tokens);
}

static double attention_flops(const struct verdict *v, double n)
{
	double per_mac = 4.0 * v->heads * v->head_dim, w = v->sliding_window, keys;
	unsigned full = v->layers - v->sliding_layers;

	keys = n <= w ? n * (n + 1) / 2 : w * (w + 1) / 2 + (n - w) * w;
	return full * per_mac * n * (n + 1) / 2 + v->sliding_layers * per_mac * keys;
}

double verdict_recompute_s(const struct verdict *v, double n)
{
	if (v->ncurve)
		return curve_s(v, n);
	if (v->params > 0)
		return (2.0 * v->params * n + attention_flops(v, n)) /
		       (v->tp * v->gpu_tflops * 1e12 * v->mfu);
	return n / v->prefill_tps;
}

static double load_s(const struct verdict *v, double n)
{
	return (double)v->latency_ns / 1e9 + n * (double)v->bytes_per_token / v->read_Bps;
}

/* Smallest prefix from which loading is strictly faster at every length
 * up to SCAN_TOKENS; 0 if there is none. */
static uint64_t break_even(const struct verdict *v)
{
	uint64_t n;

	for (n = SCAN_TOKENS; n > 0; n--)
		if (load_s(v, (double)n) >= verdict_recompute_s(v, (double)n))
			break;
	return n == SCAN_TOKENS ? 0 : n + 1;
}

/* Read bandwidth per GPU at which loading keeps up with recomputing at
 * every length of the table, the fixed latency aside. */
static double required_Bps(const struct verdict *v)
{
	double need = 0;

	for (uint64_t n = TABLE_FIRST; n <= TABLE_LAST; n *= 2) {
		double b = (double)n * (double)v->bytes_per_token / verdict_recompute_s(v, (double)n);

		if (b > need)
			need = b;
	}
	return need;
}

static json_t *estimate_json(const struct verdict *v)
{
	json_t *est = json_object(), *att;

	json_object_set_new(est, "params", json_real(v->params));
	json_object_set_new(est, "gpu_flops_per_s", json_real(v->gpu_tflops * 1e12));
	json_object_set_new(est, "mfu", json_real(v->mfu));
	json_object_set_new(est, "gpus", json_integer(v->tp));
	if (v->layers) {
		att = json_object();
		json_object_set_new(att, "layers", json_integer(v->layers));
		json_object_set_new(att, "heads", json_integer(v->heads));
		json_object_set_new(att, "head_dim", json_integer(v->head_dim));
		json_object_set_new(att, "sliding_layers", json_integer(v->sliding_layers));
		json_object_set_new(att, "sliding_window_tokens", json_integer(v->sliding_window));
		json_object_set_new(est, "attention", att);
	} else {
		json_object_set_new(est, "attention", json_null());
	}
	return est;
}

json_t *verdict_json(const struct verdict *v)
{
	uint64_t be = break_even(v), n;
	json_t *j = json_object(), *rows = json_array(), *m;

	json_object_set_new(j, "bytes_per_token", json_integer((json_int_t)v->bytes_per_token));
	json_object_set_new(j, "prefill_tokens_per_s",
			    v->prefill_tps > 0 ? json_real(v->prefill_tps) : json_null());
	json_object_set_new(j, "prefill_estimate", v->params > 0 ? estimate_json(v) : json_null());
	if (v->ncurve) {
		m = json_object();
		json_object_set_new(m, "file", json_string(v->measured_from));
		json_object_set_new(m, "points", json_integer((json_int_t)v->ncurve));
		json_object_set_new(j, "prefill_measured", m);
	} else {
		json_object_set_new(j, "prefill_measured", json_null());
	}
	json_object_set_new(j, "read_Bps", json_integer((json_int_t)v->read_Bps));
	json_object_set_new(j, "latency_ns", json_integer((json_int_t)v->latency_ns));
	json_object_set_new(j, "required_read_Bps", json_integer((json_int_t)llround(required_Bps(v))));
	json_object_set_new(j, "break_even_tokens",
			    be ? json_integer((json_int_t)be) : json_null());
	for (n = TABLE_FIRST; n <= TABLE_LAST; n *= 2) {
		json_t *r = json_object();
		double l = load_s(v, (double)n), p = verdict_recompute_s(v, (double)n);

		json_object_set_new(r, "tokens", json_integer((json_int_t)n));
		json_object_set_new(r, "bytes", json_integer((json_int_t)(n * v->bytes_per_token)));
		json_object_set_new(r, "load_ns", json_integer((json_int_t)llround(l * 1e9)));
		json_object_set_new(r, "recompute_ns", json_integer((json_int_t)llround(p * 1e9)));
		json_object_set_new(r, "faster", json_string(l < p ? "load" : "recompute"));
		json_object_set_new(r, "speedup", json_real(p / l));
		json_array_append_new(rows, r);
	}
	json_object_set_new(j, "contexts", rows);
	return j;
}

static void prefill_text(const struct verdict *v)
{
	if (v->ncurve) {
		printf("prefill: measured, %zu %s from '%s' (linear between them)\n",
		       v->ncurve, tool_plural(v->ncurve, "point", "points"), v->measured_from);
	} else if (v->params > 0) {
		printf("prefill FLOPs: 2 x %.3g params x n", v->params);
		if (v->layers > v->sliding_layers)
			printf(" + 2 x %u layers x %u heads x %u head_dim x n(n+1)",
			       v->layers - v->sliding_layers, v->heads, v->head_dim);
		if (v->sliding_layers)
			printf(" + %u sliding layers over %u-token windows", v->sliding_layers,
			       v->sliding_window);
		if (!v->layers)
			printf(" (attention unknown: no --hf-config, or MLA)");
		printf("\n  at %u GPU(s) x %.0f TFLOP/s x MFU %.2f\n", v->tp, v->gpu_tflops, v->mfu);
	} else {
		printf("prefill: %.0f tokens/s (given)\n", v->prefill_tps);
	}
}

void verdict_text(const struct verdict *v)
{
	uint64_t be = break_even(v), n;
	double need = required_Bps(v);
	char a[16], c[16];

	kv_size_format(v->bytes_per_token, a, sizeof(a));
	printf("KV bytes per token per GPU: %llu (%s)\n",
	       (unsigned long long)v->bytes_per_token, a);
	prefill_text(v);
	kv_size_format((uint64_t)v->read_Bps, a, sizeof(a));
	printf("storage: %.0f B/s (%s/s) per GPU, %.3f ms fixed latency per request\n",
	       v->read_Bps, a, (double)v->latency_ns / 1e6);
	kv_size_format((uint64_t)llround(need), c, sizeof(c));
	printf("read bandwidth per GPU to match prefill at every length below: %.0f B/s (%s/s)\n",
	       need, c);
	if (be)
		printf("break-even prefix: %llu %s (loading is faster from there up)\n",
		       (unsigned long long)be, tool_plural(be, "token", "tokens"));
	else
		printf("break-even prefix: none (storage is slower than prefill at any length)\n");
	printf("\n%8s %12s %12s %14s  %-9s %8s\n", "tokens", "bytes", "load_ms", "recompute_ms",
	       "faster", "by");
	for (n = TABLE_FIRST; n <= TABLE_LAST; n *= 2) {
		double l = load_s(v, (double)n), p = verdict_recompute_s(v, (double)n);

		kv_size_format(n * v->bytes_per_token, a, sizeof(a));
		printf("%8llu %12s %12.3f %14.3f  %-9s %7.2fx\n", (unsigned long long)n, a,
		       l * 1e3, p * 1e3, l < p ? "load" : "recompute", l < p ? p / l : l / p);
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

void verdict_free(struct verdict *v)
{
	free(v->curve);
	v->curve = NULL;
	v->ncurve = 0;
}
