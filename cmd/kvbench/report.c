/* A run's results as a human table or one JSON document. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include "../tool.h"
#include "kvbench.h"

static const char *const engine_names[] = { "uring", "psync", "kvio", "s3" };
static const char *const fsync_names[] = { "none", "file", "dir" };

void format_ns(uint64_t ns, char *buf, size_t len)
{
	if (ns < 1000)
		snprintf(buf, len, "%lluns", (unsigned long long)ns);
	else if (ns < 1000000)
		snprintf(buf, len, "%.1fus", (double)ns / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, len, "%.2fms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%.2fs", (double)ns / 1e9);
}

json_t *hist_json(const struct kv_hist *h)
{
	json_t *j = json_object();

	json_object_set_new(j, "count", json_integer((json_int_t)h->count));
	json_object_set_new(j, "min_ns", json_integer(h->count ? (json_int_t)h->min : 0));
	json_object_set_new(j, "mean_ns", json_integer((json_int_t)kv_hist_mean(h)));
	json_object_set_new(j, "p50_ns", json_integer((json_int_t)kv_hist_percentile(h, 50)));
	json_object_set_new(j, "p90_ns", json_integer((json_int_t)kv_hist_percentile(h, 90)));
	json_object_set_new(j, "p99_ns", json_integer((json_int_t)kv_hist_percentile(h, 99)));
	json_object_set_new(j, "p999_ns", json_integer((json_int_t)kv_hist_percentile(h, 99.9)));
	json_object_set_new(j, "max_ns", json_integer((json_int_t)h->max));
	return j;
}

json_t *geometry_json(const struct kv_geometry *g)
{
	json_t *j = json_object();

	json_object_set_new(j, "model_type", json_string(g->model_type));
	json_object_set_new(j, "layers", json_integer(g->layers));
	json_object_set_new(j, "attention_heads", json_integer(g->attention_heads));
	json_object_set_new(j, "kv_heads", json_integer(g->kv_heads));
	json_object_set_new(j, "kv_heads_per_rank", json_integer(g->kv_heads_per_rank));
	json_object_set_new(j, "head_dim", json_integer(g->head_dim));
	json_object_set_new(j, "mla", json_boolean(g->mla));
	json_object_set_new(j, "kv_lora_rank", json_integer(g->kv_lora_rank));
	json_object_set_new(j, "qk_rope_head_dim", json_integer(g->qk_rope_head_dim));
	json_object_set_new(j, "sliding_window_tokens", json_integer(g->sliding_window));
	json_object_set_new(j, "sliding_layers", json_integer(g->sliding_layers));
	json_object_set_new(j, "dtype", json_string(g->dtype));
	json_object_set_new(j, "dtype_bytes", json_integer(g->dtype_bytes));
	json_object_set_new(j, "tp", json_integer(g->tp));
	json_object_set_new(j, "gpu_block_tokens", json_integer(g->gpu_block_tokens));
	json_object_set_new(j, "tokens_per_file", json_integer(g->tokens_per_file));
	json_object_set_new(j, "bytes_per_token", json_integer((json_int_t)g->bytes_per_token));
	json_object_set_new(j, "gpu_block_bytes", json_integer((json_int_t)g->bytes_per_gpu_block));
	json_object_set_new(j, "file_bytes", json_integer((json_int_t)g->bytes_per_file));
	return j;
}

void print_geometry(const struct kv_geometry *g, const char *source)
{
	char a[16], b[16], c[16];

	printf("model: %s%s%s, %u %s, dtype %s (%u bytes)\n",
	       g->model_type[0] ? g->model_type : "unnamed", source ? " from " : "",
	       source ? source : "", g->layers, tool_plural(g->layers, "layer", "layers"),
	       g->dtype, g->dtype_bytes);
	if (g->mla) {
		printf("attention: MLA, latent %u + rope %u per layer, not split by tp %u\n",
		       g->kv_lora_rank, g->qk_rope_head_dim, g->tp);
		printf("bytes/token = layers * (kv_lora_rank + qk_rope_head_dim) * dtype\n"
		       "            = %u * (%u + %u) * %u = %llu\n",
		       g->layers, g->kv_lora_rank, g->qk_rope_head_dim, g->dtype_bytes,
		       (unsigned long long)g->bytes_per_token);
	} else {
		printf("attention: %u KV heads x head_dim %u, tp %u: %u KV heads per rank%s\n",
		       g->kv_heads, g->head_dim, g->tp, g->kv_heads_per_rank,
		       g->tp > g->kv_heads ? " (replicated)" : "");
		printf("bytes/token = 2 (K,V) * layers * kv_heads/rank * head_dim * dtype\n"
		       "            = 2 * %u * %u * %u * %u = %llu\n",
		       g->layers, g->kv_heads_per_rank, g->head_dim, g->dtype_bytes,
		       (unsigned long long)g->bytes_per_token);
	}
	if (g->sliding_layers)
		printf("sliding window: %u %s on %u of %u layers (stored in full here)\n",
		       g->sliding_window, tool_plural(g->sliding_window, "token", "tokens"),
		       g->sliding_layers, g->layers);
	kv_size_format(g->bytes_per_token, a, sizeof(a));
	kv_size_format(g->bytes_per_gpu_block, b, sizeof(b));
	kv_size_format(g->bytes_per_file, c, sizeof(c));
	printf("per token:     %llu bytes (%s)\n", (unsigned long long)g->bytes_per_token, a);
	printf("per GPU block: %llu bytes (%s) = %u %s\n",
	       (unsigned long long)g->bytes_per_gpu_block, b, g->gpu_block_tokens,
	       tool_plural(g->gpu_block_tokens, "token", "tokens"));
	printf("per file:      %llu bytes (%s) = %u %s = %u GPU %s\n",
	       (unsigned long long)g->bytes_per_file, c, g->tokens_per_file,
	       tool_plural(g->tokens_per_file, "token", "tokens"),
	       g->tokens_per_file / g->gpu_block_tokens,
	       tool_plural(g->tokens_per_file / g->gpu_block_tokens, "block", "blocks"));
}

json_t *sample_json(const struct sample *s)
{
	json_t *j = json_object();
	double secs = (double)s->interval_ns / 1e9;

	json_object_set_new(j, "type", json_string("sample"));
	json_object_set_new(j, "phase", json_string(phase_names[s->phase]));
	json_object_set_new(j, "t_ns", json_integer((json_int_t)s->t_ns));
	json_object_set_new(j, "interval_ns", json_integer((json_int_t)s->interval_ns));
	json_object_set_new(j, "ops", json_integer((json_int_t)s->ops));
	json_object_set_new(j, "bytes", json_integer((json_int_t)s->bytes));
	json_object_set_new(j, "throughput_Bps",
			    json_integer(secs > 0 ? (json_int_t)((double)s->bytes / secs) : 0));
	json_object_set_new(j, "iops", json_real(secs > 0 ? (double)s->ops / secs : 0));
	return j;
}

/* A histogram's non-empty buckets as [low_ns, high_ns, count], so a
 * reader can pool ranks' distributions itself. */
static json_t *buckets_json(const struct kv_hist *h)
{
	json_t *a = json_array();

	for (unsigned i = 0; i < KV_HIST_BUCKETS; i++)
		if (h->buckets[i])
			json_array_append_new(a, json_pack("[I,I,I]",
				(json_int_t)kv_hist_bucket_low(i), (json_int_t)kv_hist_bucket_high(i),
				(json_int_t)h->buckets[i]));
	return a;
}

static json_t *rank_json(unsigned k, const struct rank_result *rr)
{
	double secs = (double)rr->elapsed_ns / 1e9;
	json_t *j = json_object(), *lat = json_object(), *bk = json_object();

	json_object_set_new(j, "rank", json_integer(k));
	json_object_set_new(j, "elapsed_ns", json_integer((json_int_t)rr->elapsed_ns));
	json_object_set_new(j, "ops", json_integer((json_int_t)rr->ops));
	json_object_set_new(j, "bytes", json_integer((json_int_t)rr->bytes));
	json_object_set_new(j, "reads", json_integer((json_int_t)rr->reads));
	json_object_set_new(j, "writes", json_integer((json_int_t)rr->writes));
	json_object_set_new(j, "hits", json_integer((json_int_t)rr->hits));
	json_object_set_new(j, "misses", json_integer((json_int_t)rr->misses));
	json_object_set_new(j, "throughput_Bps",
			    json_integer(secs > 0 ? (json_int_t)((double)rr->bytes / secs) : 0));
	json_object_set_new(j, "iops", json_real(secs > 0 ? (double)rr->ops / secs : 0));
	for (unsigned l = 0; l < LAT_COUNT; l++) {
		if (!rr->lat[l]->count)
			continue;
		json_object_set_new(lat, lat_names[l], hist_json(rr->lat[l]));
		json_object_set_new(bk, lat_names[l], buckets_json(rr->lat[l]));
	}
	json_object_set_new(j, "latency", lat);
	json_object_set_new(j, "buckets", bk);
	return j;
}

json_t *phase_json(const struct bench *b, enum phase ph)
{
	const struct phase_result *r = &b->res[ph];
	double secs = (double)r->elapsed_ns / 1e9;
	json_t *j = json_object(), *lat = json_object();
	unsigned l;

	json_object_set_new(j, "type", json_string("phase"));
	json_object_set_new(j, "phase", json_string(phase_names[ph]));
	json_object_set_new(j, "elapsed_ns", json_integer((json_int_t)r->elapsed_ns));
	json_object_set_new(j, "ops", json_integer((json_int_t)r->ops));
	json_object_set_new(j, "bytes", json_integer((json_int_t)r->bytes));
	json_object_set_new(j, "reads", json_integer((json_int_t)r->reads));
	json_object_set_new(j, "writes", json_integer((json_int_t)r->writes));
	if (ph == PH_LOOKUP || ph == PH_STAT || ph == PH_UNLINK) {
		json_object_set_new(j, "hits", json_integer((json_int_t)r->hits));
		json_object_set_new(j, "misses", json_integer((json_int_t)r->misses));
	}
	json_object_set_new(j, "throughput_Bps",
			    json_integer(secs > 0 ? (json_int_t)((double)r->bytes / secs) : 0));
	json_object_set_new(j, "iops", json_real(secs > 0 ? (double)r->ops / secs : 0));
	json_object_set_new(j, "cache_drop", r->cache_drop ? json_string(r->cache_drop)
							   : json_null());
	for (l = 0; l < LAT_COUNT; l++)
		if (r->lat[l] && r->lat[l]->count)
			json_object_set_new(lat, lat_names[l], hist_json(r->lat[l]));
	json_object_set_new(j, "latency", lat);
	if (r->per_rank) {
		json_t *ranks = json_array();

		for (unsigned k = 0; k < b->nranks; k++)
			json_array_append_new(ranks, rank_json(k, &r->per_rank[k]));
		json_object_set_new(j, "ranks", ranks);
		json_object_set_new(j, "slowest_rank", json_integer(r->slowest));
	}
	return j;
}

static json_t *config_json(const struct bench *b)
{
	const struct bench_opts *o = &b->o;
	json_t *j = json_object(), *ph = json_array();
	unsigned i;

	json_object_set_new(j, "dir", json_string(o->dir));
	json_object_set_new(j, "model_dir", json_string(b->model_dir));
	json_object_set_new(j, "engine", json_string(engine_names[o->engine]));
	json_object_set_new(j, "threads", json_integer(o->threads));
	json_object_set_new(j, "queue_depth", json_integer(o->engine != ENGINE_PSYNC ? o->qd : 1));
	json_object_set_new(j, "buffer_bytes", json_integer((json_int_t)bench_buffer_bytes(o)));
	json_object_set_new(j, "size_bytes", json_integer((json_int_t)o->size_bytes));
	json_object_set_new(j, "duration_ns", json_integer((json_int_t)o->duration_ns));
	json_object_set_new(j, "block_bytes", json_integer((json_int_t)o->block_bytes));
	json_object_set_new(j, "files", json_integer((json_int_t)b->files));
	json_object_set_new(j, "direct", json_boolean(b->direct));
	json_object_set_new(j, "atomic", json_boolean(o->atomic));
	json_object_set_new(j, "fsync", json_string(fsync_names[o->fsync]));
	json_object_set_new(j, "mix_read_pct", json_integer(o->mix_read_pct));
	json_object_set_new(j, "lookups", json_integer((json_int_t)o->lookups));
	json_object_set_new(j, "drop_caches", json_boolean(o->drop_caches));
	json_object_set_new(j, "registered_buffers", json_boolean(o->registered_buffers));
	json_object_set_new(j, "registered_files", json_boolean(o->registered_files));
	json_object_set_new(j, "sqpoll", json_boolean(o->sqpoll));
	json_object_set_new(j, "seed", json_integer((json_int_t)o->seed));
	for (i = 0; i < PH_COUNT; i++)
		if (o->phases & (1u << i))
			json_array_append_new(ph, json_string(phase_names[i]));
	json_object_set_new(j, "phases", ph);
	if (b->nranks > 1) {
		json_object_set_new(j, "ranks", json_integer(b->nranks));
		json_object_set_new(j, "cross_read", json_boolean(o->cross_read));
	}
	return j;
}

json_t *report_json(const struct bench *b)
{
	json_t *j = json_object(), *phases = json_array();
	char ts[40];
	unsigned ph;

	kv_time_format(b->started_ns, ts, sizeof(ts));
	json_object_set_new(j, "version", json_integer(KVBENCH_JSON_VERSION));
	json_object_set_new(j, "kvtools_version", json_string(kv_version()));
	json_object_set_new(j, "started", json_string(ts));
	json_object_set_new(j, "config", config_json(b));
	json_object_set_new(j, "geometry", b->have_geo ? geometry_json(&b->geo) : json_null());
	json_object_set_new(j, "environment", b->env ? json_incref(b->env) : json_null());
	for (ph = 0; ph < PH_COUNT; ph++)
		if (b->res[ph].ran)
			json_array_append_new(phases, phase_json(b, ph));
	json_object_set_new(j, "phases", phases);
	return j;
}

static void table_row(const char *phase, const char *what, const struct kv_hist *h,
		      const char *rate, const char *iops)
{
	char p[5][16];

	format_ns(kv_hist_percentile(h, 50), p[0], sizeof(p[0]));
	format_ns(kv_hist_percentile(h, 90), p[1], sizeof(p[1]));
	format_ns(kv_hist_percentile(h, 99), p[2], sizeof(p[2]));
	format_ns(kv_hist_percentile(h, 99.9), p[3], sizeof(p[3]));
	format_ns(h->max, p[4], sizeof(p[4]));
	printf("%-7s %-8s %9llu %11s %9s %9s %9s %9s %9s %9s\n", phase, what,
	       (unsigned long long)h->count, rate, iops, p[0], p[1], p[2], p[3], p[4]);
}

/* Each rank's share of each phase, and the slowest: under stonewalling
 * every rank stops when the first is done, so shares differ, not times. */
static void ranks_table(const struct bench *b)
{
	char rate[24], p50[16], p99[16];

	printf("\n%u ranks%s, each phase started together and ended when the first rank "
	       "finished:\n", b->nranks, b->o.cross_read ? " reading each other's blocks" : "");
	printf("%-7s %5s %9s %11s %9s %9s %9s\n", "phase", "rank", "ops", "throughput", "IOPS",
	       "p50", "p99");
	for (unsigned ph = 0; ph < PH_COUNT; ph++) {
		const struct phase_result *r = &b->res[ph];

		if (!r->ran || !r->per_rank)
			continue;
		for (unsigned k = 0; k < b->nranks; k++) {
			const struct rank_result *rr = &r->per_rank[k];
			const struct kv_hist *h = NULL;
			double secs = (double)rr->elapsed_ns / 1e9;

			for (unsigned l = 0; l < LAT_COUNT && !h; l++)
				if (lat_is_main(l) && rr->lat[l]->count)
					h = rr->lat[l];
			if (secs > 0 && ph != PH_LOOKUP && ph < PH_CREATE) {
				kv_size_format((uint64_t)((double)rr->bytes / secs), rate, sizeof(rate));
				strcat(rate, "/s");
			} else {
				strcpy(rate, "-");
			}
			format_ns(h ? kv_hist_percentile(h, 50) : 0, p50, sizeof(p50));
			format_ns(h ? kv_hist_percentile(h, 99) : 0, p99, sizeof(p99));
			printf("%-7s %5u %9llu %11s %9.0f %9s %9s%s\n", k ? "" : phase_names[ph], k,
			       (unsigned long long)rr->ops, rate, secs > 0 ? (double)rr->ops / secs : 0,
			       p50, p99, k == r->slowest ? "  slowest" : "");
		}
	}
}

void report_table(const struct bench *b)
{
	const struct bench_opts *o = &b->o;
	char blk[16], bufs[16], rate[24], iops[24];
	unsigned ph, l;

	kv_size_format(o->block_bytes, blk, sizeof(blk));
	kv_size_format(bench_buffer_bytes(o), bufs, sizeof(bufs));
	printf("dir %s: %s\n", o->dir, b->fs);
	if (b->s3)
		printf("engine s3, %u %s x %u %s in flight, %s of buffers, "
		       "%llu %s of %s\n\n", o->threads, tool_plural(o->threads, "thread", "threads"),
		       o->qd, tool_plural(o->qd, "request", "requests"), bufs,
		       (unsigned long long)b->files, tool_plural(b->files, "object", "objects"), blk);
	else
		printf("engine %s, %u %s x qd %u, %s of buffers, %s, %s, fsync %s, "
		       "%llu %s of %s\n\n",
		       engine_names[o->engine], o->threads,
		       tool_plural(o->threads, "thread", "threads"),
		       o->engine != ENGINE_PSYNC ? o->qd : 1,
		       bufs, b->direct ? "O_DIRECT" : "buffered", o->atomic ? "atomic" : "in place",
		       fsync_names[o->fsync], (unsigned long long)b->files,
		       tool_plural(b->files, "file", "files"), blk);
	printf("%-7s %-8s %9s %11s %9s %9s %9s %9s %9s %9s\n", "phase", "op", "count",
	       "throughput", "IOPS", "p50", "p90", "p99", "p99.9", "max");
	for (ph = 0; ph < PH_COUNT; ph++) {
		const struct phase_result *r = &b->res[ph];
		double secs = (double)r->elapsed_ns / 1e9;
		const char *name = phase_names[ph];

		if (!r->ran)
			continue;
		if (secs > 0) {
			kv_size_format((uint64_t)((double)r->bytes / secs), rate, sizeof(rate));
			strcat(rate, "/s");
			snprintf(iops, sizeof(iops), "%.0f", (double)r->ops / secs);
		} else {
			strcpy(rate, "-");
			strcpy(iops, "-");
		}
		if (ph == PH_LOOKUP || ph >= PH_CREATE)
			strcpy(rate, "-");
		/* The data (or lookup) rows carry the rates; the metadata
		 * calls around them follow. */
		for (l = 0; l < LAT_COUNT; l++) {
			if (!r->lat[l] || !r->lat[l]->count || !lat_is_main(l))
				continue;
			table_row(name, lat_names[l], r->lat[l], rate, iops);
			name = "";
			strcpy(rate, "");
			strcpy(iops, "");
		}
		for (l = 0; l < LAT_COUNT; l++) {
			if (!r->lat[l] || !r->lat[l]->count || lat_is_main(l))
				continue;
			table_row(name, lat_names[l], r->lat[l], "", "");
		}
		if (ph == PH_LOOKUP || ph == PH_STAT || ph == PH_UNLINK)
			printf("%-7s hits %llu, misses %llu\n", "",
			       (unsigned long long)r->hits, (unsigned long long)r->misses);
		if (r->cache_drop)
			printf("%-7s cold cache: %s\n", "", r->cache_drop);
	}
	if (b->nranks > 1)
		ranks_table(b);
}
