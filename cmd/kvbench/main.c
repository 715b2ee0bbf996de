/*
 * kvbench: qualify storage for KV-cache offload.  Subcommands: run (the
 * default) drives block files in the cache layout; geometry prints what
 * a model's config implies; verdict weighs loading against recomputing;
 * dma measures host<->GPU copies.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../tool.h"
#include "dma.h"
#include "kvbench.h"
#include "probe.h"
#include "ranks.h"
#include "verdict.h"

#define MAX_FILES	(4 << 20)

#define DEFAULT_PROBE_SAMPLES	8
#define DEFAULT_MAX_BUFFER_BYTES	(1ULL << 30)
#define DEFAULT_PROBE_LEVELS	"1,3,9"

enum cmd { CMD_RUN = 1, CMD_GEOMETRY = 2, CMD_VERDICT = 4, CMD_PROBE = 8 };
static const char *const cmd_names[] = { [CMD_RUN] = "run", [CMD_GEOMETRY] = "geometry",
					 [CMD_VERDICT] = "verdict", [CMD_PROBE] = "probe" };

enum {
	OPT_HF = 256, OPT_TP, OPT_TPF, OPT_GBT, OPT_DTYPE, OPT_BLOCK, OPT_DIR,
	OPT_PHASES, OPT_ENGINE, OPT_THREADS, OPT_QD, OPT_SIZE, OPT_DURATION,
	OPT_DIRECT, OPT_BUFFERED, OPT_ATOMIC, OPT_INPLACE, OPT_FSYNC, OPT_MIX,
	OPT_LOOKUPS, OPT_DROP, OPT_REGBUF, OPT_REGFILES, OPT_SQPOLL, OPT_SEED, OPT_KEEP,
	OPT_PLOT, OPT_NDJSON, OPT_PREFILL, OPT_PARAMS, OPT_TFLOPS, OPT_MFU,
	OPT_READBW, OPT_LATENCY, OPT_FROMRUN, OPT_ROOT, OPT_SAMPLES, OPT_LEVELS,
	OPT_MEASURED, OPT_CROSS, OPT_MAXBUF,
};

static const struct option longopts[] = {
	{ "hf-config", required_argument, NULL, OPT_HF },
	{ "tp", required_argument, NULL, OPT_TP },
	{ "tokens-per-file", required_argument, NULL, OPT_TPF },
	{ "gpu-block-tokens", required_argument, NULL, OPT_GBT },
	{ "dtype", required_argument, NULL, OPT_DTYPE },
	{ "block-size", required_argument, NULL, OPT_BLOCK },
	{ "dir", required_argument, NULL, OPT_DIR },
	{ "phases", required_argument, NULL, OPT_PHASES },
	{ "engine", required_argument, NULL, OPT_ENGINE },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "qd", required_argument, NULL, OPT_QD },
	{ "max-buffer-bytes", required_argument, NULL, OPT_MAXBUF },
	{ "size", required_argument, NULL, OPT_SIZE },
	{ "duration", required_argument, NULL, OPT_DURATION },
	{ "direct", no_argument, NULL, OPT_DIRECT },
	{ "buffered", no_argument, NULL, OPT_BUFFERED },
	{ "atomic", no_argument, NULL, OPT_ATOMIC },
	{ "in-place", no_argument, NULL, OPT_INPLACE },
	{ "fsync", required_argument, NULL, OPT_FSYNC },
	{ "mix", required_argument, NULL, OPT_MIX },
	{ "lookups", required_argument, NULL, OPT_LOOKUPS },
	{ "drop-caches", no_argument, NULL, OPT_DROP },
	{ "registered-buffers", no_argument, NULL, OPT_REGBUF },
	{ "registered-files", no_argument, NULL, OPT_REGFILES },
	{ "sqpoll", no_argument, NULL, OPT_SQPOLL },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "keep", no_argument, NULL, OPT_KEEP },
	{ "cross-read", no_argument, NULL, OPT_CROSS },
	{ "plot", required_argument, NULL, OPT_PLOT },
	{ "prefill-tokens-per-s", required_argument, NULL, OPT_PREFILL },
	{ "params", required_argument, NULL, OPT_PARAMS },
	{ "gpu-tflops", required_argument, NULL, OPT_TFLOPS },
	{ "mfu", required_argument, NULL, OPT_MFU },
	{ "measured-prefill", required_argument, NULL, OPT_MEASURED },
	{ "read-bandwidth", required_argument, NULL, OPT_READBW },
	{ "latency", required_argument, NULL, OPT_LATENCY },
	{ "from-run", required_argument, NULL, OPT_FROMRUN },
	{ "root", required_argument, NULL, OPT_ROOT },
	{ "samples", required_argument, NULL, OPT_SAMPLES },
	{ "levels", required_argument, NULL, OPT_LEVELS },
	{ "json", no_argument, NULL, 'J' },
	{ "ndjson", no_argument, NULL, OPT_NDJSON },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* Which subcommands take an option. */
static unsigned applies(int opt)
{
	switch (opt) {
	case OPT_DTYPE: case OPT_BLOCK: case 'J':
		return CMD_RUN | CMD_GEOMETRY | CMD_VERDICT | CMD_PROBE;
	case OPT_HF: case OPT_TP: case OPT_TPF: case OPT_GBT:
		return CMD_RUN | CMD_GEOMETRY | CMD_VERDICT;
	case OPT_PREFILL: case OPT_PARAMS: case OPT_TFLOPS: case OPT_MFU: case OPT_MEASURED:
		return CMD_RUN | CMD_VERDICT;
	case OPT_READBW: case OPT_FROMRUN:
		return CMD_VERDICT | CMD_PROBE;
	case OPT_LATENCY:
		return CMD_VERDICT;
	case OPT_ROOT: case OPT_SAMPLES: case OPT_LEVELS:
		return CMD_PROBE;
	case OPT_SEED:
		return CMD_RUN | CMD_PROBE;
	default:
		return CMD_RUN;
	}
}

static void usage(void)
{
	printf("Usage: kvbench [run] --dir DIR [OPTIONS]\n"
	       "       kvbench geometry (--hf-config FILE | --block-size SIZE) [OPTIONS]\n"
	       "       kvbench verdict [OPTIONS]\n"
	       "       kvbench probe (--root DIR | FILE...) [OPTIONS]\n"
	       "       kvbench dma [OPTIONS]\n"
	       "       kvbench -h | -V\n"
	       "\n"
	       "Qualify storage for KV-cache offload: block files in the vLLM/llm-d\n"
	       "layout, sized from a model, timed per phase; and whether loading a\n"
	       "prefix beats recomputing it; whether compressing blocks would pay.\n"
	       "'kvbench dma --help' covers dma.  Under mpirun (in builds with MPI),\n"
	       "run is one rank of many, stonewalled, its ranks summed by rank 0.\n"
	       "\n"
	       "Geometry (run, geometry, verdict):\n"
	       "      --hf-config FILE      Hugging Face config.json of the model\n"
	       "      --tp N                tensor-parallel ranks (default 1)\n"
	       "      --tokens-per-file N   tokens per block file (default 256)\n"
	       "      --gpu-block-tokens N  tokens per GPU block (default 16)\n"
	       "      --dtype TYPE          KV dtype: bfloat16, float16, float32, fp8\n"
	       "      --block-size SIZE     bytes per file, instead of the model's (run\n"
	       "                            default without --hf-config: 2M)\n"
	       "Run:\n"
	       "      --dir DIR             scratch directory to work in, made if\n"
	       "                            missing, or s3://BUCKET[/PREFIX] (required)\n"
	       "      --phases LIST         write,read,lookup,mixed or all (default all);\n"
	       "                            create,stat,unlink or meta: metadata, as mdtest\n"
	       "      --engine ENGINE       uring (default), psync, or kvio (libkv's)\n"
	       "      --threads N           worker threads (default 4)\n"
	       "      --qd N                I/Os in flight per thread, uring (default 8)\n"
	       "      --max-buffer-bytes SIZE\n"
	       "                            I/O buffers of all threads together; --qd is\n"
	       "                            lowered to fit them (default 1G)\n"
	       "      --size SIZE           working set (default 1G)\n"
	       "      --duration DUR        run each phase this long (default: one pass)\n"
	       "      --direct              O_DIRECT, or fail (default: when accepted)\n"
	       "      --buffered            through the page cache\n"
	       "      --atomic              write a temp, rename over the file (default)\n"
	       "      --in-place            write the file itself\n"
	       "      --fsync POLICY        none (default), file, or dir (file and dir)\n"
	       "      --mix PCT             reads in the mixed phase, percent (default 70)\n"
	       "      --lookups N           presence checks in the lookup phase (default 100000)\n"
	       "      --drop-caches         cold reads via /proc/sys/vm/drop_caches\n"
	       "      --registered-buffers  register buffers with io_uring\n"
	       "      --registered-files    open, fsync, close through io_uring, fixed files\n"
	       "      --sqpoll              io_uring kernel submission thread\n"
	       "      --seed N              block hashes and mix choices (default 1)\n"
	       "      --keep                leave the files in DIR\n"
	       "      --cross-read          under mpirun, read what the next rank wrote\n"
	       "      --plot FILE           latency CDF and throughput over time, SVG\n"
	       "      --ndjson              one record per second, then one per phase\n"
	       "Verdict (the first five also add a verdict to a run):\n"
	       "      --prefill-tokens-per-s N  measured prefill rate of the instance\n"
	       "      --measured-prefill FILE   measured 'TOKENS SECONDS' prefill curve\n"
	       "      --params N            model (active) parameters, e.g. 8B, to model it:\n"
	       "                            2 x params FLOPs a token, plus causal attention\n"
	       "                            from --hf-config\n"
	       "      --gpu-tflops N        peak dense TFLOP/s of one GPU (with --params)\n"
	       "      --mfu F               model FLOP utilisation (default 0.5)\n"
	       "      --read-bandwidth SIZE storage read bytes/s per GPU, e.g. 2G\n"
	       "      --latency DUR         fixed cost per request (default 0)\n"
	       "      --from-run FILE       take bandwidth, latency, geometry from a -J run\n"
	       "Probe (zstd ratios and speeds of real blocks, with and without byte\n"
	       "planes; with --read-bandwidth or --from-run, whether it pays):\n"
	       "      --root DIR            sample blocks of a cache root (else FILEs of\n"
	       "                            raw blocks of --dtype, cut at --block-size)\n"
	       "      --samples N           blocks per dtype from a root (default %d)\n"
	       "      --levels LIST         zstd levels, e.g. 1,3,9 (default %s)\n"
	       "Dma (details in 'kvbench dma --help'):\n"
	       "  -d, --device N            CUDA device index (default 0)\n"
	       "  -l, --layers N            layers of the per-layer fragment layout\n"
	       "  -t, --total SIZE          bytes moved per measurement\n"
	       "  -r, --repeat N            runs per measurement, best kept\n"
	       "      --lanes N             CUDA streams per worker\n"
	       "      --min-block SIZE      smallest block (default 16K)\n"
	       "      --max-block SIZE      largest block (default 64M)\n"
	       "\n"
	       "  -J, --json                one JSON document\n"
	       "  -h, --help                this help\n"
	       "  -V, --version             version\n"
	       "\n"
	       "Exit status: 0 ok, 1 dma without a GPU, 2 usage or unusable\n"
	       "options, 3 runtime failure (including an unreadable or invalid\n"
	       "--hf-config).\n", DEFAULT_PROBE_SAMPLES, DEFAULT_PROBE_LEVELS);
	exit(0);
}

static double parse_real(const char *opt, const char *text, double min, double max,
			 int scaled)
{
	char *end;
	double v, mul = 1;

	errno = 0;
	v = strtod(text, &end);
	if (scaled && end != text && *end && !end[1]) {
		switch (*end) {
		case 'k': case 'K': mul = 1e3; end++; break;
		case 'M': mul = 1e6; end++; break;
		case 'B': case 'G': mul = 1e9; end++; break;
		case 'T': mul = 1e12; end++; break;
		}
	}
	v *= mul;
	if (end == text || *end || errno || !isfinite(v) || v < min || v > max)
		tool_usage_fail("invalid %s value '%s'", opt, text);
	return v;
}

/* A count that must be at least 1 (0 would silently mean the default). */
static unsigned parse_count(const char *opt, const char *text, unsigned max)
{
	unsigned v = (unsigned)tool_parse_uint(opt, text, max);

	if (!v)
		tool_usage_fail("invalid %s value '%s' (at least 1)", opt, text);
	return v;
}

static unsigned parse_phases(const char *text)
{
	char buf[256], *tok, *save;
	unsigned mask = 0, p;

	snprintf(buf, sizeof(buf), "%s", text);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "all")) {
			mask |= PH_DATA_MASK;
			continue;
		}
		if (!strcmp(tok, "meta")) {
			mask |= PH_META_MASK;
			continue;
		}
		for (p = 0; p < PH_COUNT; p++)
			if (!strcmp(tok, phase_names[p]))
				break;
		if (p == PH_COUNT)
			tool_usage_fail("invalid --phases value '%s' (write, read, lookup, mixed, all, "
					"create, stat, unlink, meta)", tok);
		mask |= 1u << p;
	}
	if (!mask)
		tool_usage_fail("invalid --phases value '%s'", text);
	return mask;
}

/* --levels: zstd levels, comma-separated, each 1..22 (or negative,
 * zstd's fast levels). */
static void parse_levels(const char *text, struct probe_opts *po)
{
	char buf[256], *tok, *save, *end;

	snprintf(buf, sizeof(buf), "%s", text);
	po->nlevels = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		long l = strtol(tok, &end, 10);

		if (*end || end == tok || l < -7 || l > 22 || !l || po->nlevels == PROBE_MAX_LEVELS)
			tool_usage_fail("invalid --levels value '%s' (up to %d zstd levels, -7..22, "
					"not 0)", text, PROBE_MAX_LEVELS);
		po->levels[po->nlevels++] = (int)l;
	}
	if (!po->nlevels)
		tool_usage_fail("invalid --levels value '%s'", text);
}

struct geo_args {
	const char *hf;
	unsigned tp, tpf, gbt;
	const char *dtype;
	uint64_t block;
};

/* Geometry from the options; exits 2 on inconsistent options, 3 when
 * the config file cannot be read or is not a usable model config. */
static int load_geometry(const struct geo_args *a, struct kv_geometry *g)
{
	int r;

	memset(g, 0, sizeof(*g));
	if (!a->hf)
		return 0;
	r = kv_geometry_load_hf(AT_FDCWD, a->hf, g);
	if (r == -KV_EBADCONFIG) {
		tool_err("'%s' is not a usable model config: %s", a->hf, kv_error_detail());
		exit(EXIT_RUNTIME);
	}
	if (r < 0) {
		tool_err("cannot read '%s': %s", a->hf, kv_strerror(r));
		exit(EXIT_RUNTIME);
	}
	if (a->dtype && kv_dtype_parse(a->dtype, g->dtype, &g->dtype_bytes) < 0)
		tool_usage_fail("invalid --dtype value '%s' (bfloat16, float16, float32, fp8)",
				a->dtype);
	g->tp = a->tp;
	g->tokens_per_file = a->tpf;
	g->gpu_block_tokens = a->gbt;
	r = kv_geometry_derive(g);
	if (r == -EINVAL && !g->dtype_bytes) {
		tool_err("'%s' has no torch_dtype: give --dtype", a->hf);
		exit(EXIT_USAGE);
	}
	if (r < 0)
		tool_usage_fail("%s", kv_error_detail());
	return 1;
}

/* Each thread keeps a buffer of a block for each I/O in flight: threads x
 * qd x block, 8 GiB for 8 threads at qd 32 of 32 MiB, bytes that would
 * only wait in the device's queue.  qd is lowered until the buffers fit
 * in max_bytes (one I/O per thread at least), and that is said; buffers
 * that would not fit in the memory available are refused. */
static void fit_buffers(struct bench_opts *o, uint64_t max_bytes)
{
	uint64_t avail = tool_mem_available();
	char blk[16], want[16], cap[16], have[16];

	kv_size_format(o->block_bytes, blk, sizeof(blk));
	if (o->engine != ENGINE_PSYNC && o->qd > 1 && bench_buffer_bytes(o) > max_bytes) {
		uint64_t qd = max_bytes / o->threads / o->block_bytes;
		unsigned was = o->qd;

		kv_size_format(bench_buffer_bytes(o), want, sizeof(want));
		kv_size_format(max_bytes, cap, sizeof(cap));
		o->qd = qd ? (unsigned)qd : 1;
		tool_err("--qd %u lowered to %u: %u %s x %u x %s of buffers would be %s, "
			 "over --max-buffer-bytes %s", was, o->qd, o->threads,
			 tool_plural(o->threads, "thread", "threads"), was, blk, want, cap);
	}
	if (avail && bench_buffer_bytes(o) > avail) {
		kv_size_format(bench_buffer_bytes(o), want, sizeof(want));
		kv_size_format(avail, have, sizeof(have));
		tool_usage_fail("%u %s x %u x %s of I/O buffers (%s) would not fit in the %s "
				"of memory available: lower --threads, --qd or --block-size",
				o->threads, tool_plural(o->threads, "thread", "threads"),
				o->engine != ENGINE_PSYNC ? o->qd : 1, blk, want, have);
	}
}

/* The most requests one S3 engine keeps in flight ($KV_S3_INFLIGHT's
 * range): --qd on a bucket. */
#define S3_QD_MAX	256

/*
 * An s3:// --dir: the blocks are objects moved by libkv's S3 tier, so
 * what is about files, the page cache or io_uring means nothing there
 * and is refused by name rather than ignored.  --atomic is what a PUT
 * is anyway; lookups are HEADs.
 */
static void s3_check(const struct bench_opts *o, const char *phases, int engine_given)
{
	const char *opt = NULL, *why = NULL;
	char buf[256], *tok, *save;

	if (engine_given) {
		opt = "--engine";
		why = "a bucket is reached through libkv's S3 tier";
	} else if (o->direct == DIRECT_ON || o->direct == DIRECT_OFF) {
		opt = o->direct == DIRECT_ON ? "--direct" : "--buffered";
		why = "objects have no page cache to bypass or use";
	} else if (!o->atomic) {
		opt = "--in-place";
		why = "a PUT replaces an object whole";
	} else if (o->fsync != FSYNC_NONE) {
		opt = "--fsync";
		why = "a PUT is durable when it is answered";
	} else if (o->drop_caches) {
		opt = "--drop-caches";
		why = "objects have no page cache";
	} else if (o->registered_buffers || o->registered_files || o->sqpoll) {
		opt = o->registered_buffers ? "--registered-buffers" :
		      o->registered_files ? "--registered-files" : "--sqpoll";
		why = "there is no io_uring";
	}
	if (opt)
		tool_usage_fail("%s does not apply to a bucket ('%s'): %s", opt, o->dir, why);
	/* The metadata phase named as it was given: "meta" is all three. */
	snprintf(buf, sizeof(buf), "%s", phases ? phases : "");
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (!strcmp(tok, "meta") || !strcmp(tok, "create") || !strcmp(tok, "stat") ||
		    !strcmp(tok, "unlink"))
			tool_usage_fail("--phases %s does not apply to a bucket ('%s'): it creates "
					"and removes files (write, read, lookup and mixed do)",
					tok, o->dir);
	if (o->qd > S3_QD_MAX)
		tool_usage_fail("--qd %u on a bucket: at most %d requests in flight per thread",
				o->qd, S3_QD_MAX);
}

/* Bandwidth, latency and (absent other geometry) bytes per token from a
 * `kvbench -J` document: its geometry, or else its block size spread over
 * tpf tokens (--tokens-per-file, 0 when not given).  A run without a
 * model says nothing of tokens, and a guess of 256 tokens per file can
 * turn the verdict around (16x off for Llama-3.1-8B's 2 MiB files):
 * without tpf it is refused. */
static void from_run(const char *path, struct verdict *v, int have_bw, int have_lat,
		     int have_geo, unsigned tpf)
{
	json_error_t jerr;
	json_t *doc = json_load_file(path, 0, &jerr), *ph, *read = NULL, *lookup = NULL;
	size_t i;

	if (!doc) {
		tool_err("cannot read '%s': %s", path, jerr.text);
		exit(EXIT_RUNTIME);
	}
	json_array_foreach(json_object_get(doc, "phases"), i, ph) {
		const char *name = json_string_value(json_object_get(ph, "phase"));

		if (name && !strcmp(name, "read"))
			read = ph;
		if (name && !strcmp(name, "lookup"))
			lookup = ph;
	}
	if (!have_bw) {
		if (!read) {
			tool_err("'%s' has no read phase to take a bandwidth from", path);
			exit(EXIT_RUNTIME);
		}
		json_t *ranks = json_object_get(json_object_get(doc, "config"), "ranks");

		/* A run of several ranks has one GPU's reads per rank. */
		v->read_Bps = (double)json_integer_value(json_object_get(read, "throughput_Bps")) /
			      (json_integer_value(ranks) > 1 ? (double)json_integer_value(ranks) : 1);
	}
	if (!have_lat) {
		/* What a request pays before data flows: the prefix lookup
		 * and the open of the first file. */
		json_t *lat = json_object_get(read, "latency");

		v->latency_ns = (uint64_t)json_integer_value(
			json_object_get(json_object_get(lat, "open"), "p50_ns"));
		const char *engine = json_string_value(json_object_get(
			json_object_get(doc, "config"), "engine"));
		/* A bucket's run has no open: a GET's fixed cost is taken
		 * as a HEAD's, as verdict_from_bench does. */
		unsigned heads = engine && !strcmp(engine, "s3") ? 2 : 1;

		if (lookup)
			v->latency_ns += heads * (uint64_t)json_integer_value(json_object_get(
				json_object_get(json_object_get(lookup, "latency"), "lookup"),
				"p50_ns"));
	}
	if (!have_geo) {
		uint64_t block = (uint64_t)json_integer_value(
			json_object_get(json_object_get(doc, "config"), "block_bytes"));

		v->bytes_per_token = (uint64_t)json_integer_value(
			json_object_get(json_object_get(doc, "geometry"), "bytes_per_token"));
		if (!v->bytes_per_token && !tpf)
			tool_usage_fail("'%s' has no geometry (its run had no --hf-config), so its "
					"bytes per token are unknown: give the model's --hf-config, "
					"or --tokens-per-file its files hold",
					path);
		if (!v->bytes_per_token)
			v->bytes_per_token = (block + tpf - 1) / tpf;
	}
	json_decref(doc);
}

/* The storage side of a verdict from this run, as --from-run takes it
 * from a document: read bandwidth (per rank, each rank standing for a
 * GPU), and lookup plus open as latency. */
static void verdict_from_bench(const struct bench *b, struct verdict *v)
{
	const struct phase_result *rd = &b->res[PH_READ], *lk = &b->res[PH_LOOKUP];
	double secs = (double)rd->elapsed_ns / 1e9;

	v->read_Bps = secs > 0 ? (double)rd->bytes / secs / b->nranks : 0;
	v->latency_ns = kv_hist_percentile(rd->lat[LAT_OPEN], 50);
	if (lk->ran)
		v->latency_ns += kv_hist_percentile(lk->lat[LAT_LOOKUP], 50);
	/* A bucket has no open: a GET's round trip before data flows is
	 * taken as a HEAD's, the lookup phase's p50, paid once more. */
	if (b->s3 && lk->ran)
		v->latency_ns += kv_hist_percentile(lk->lat[LAT_LOOKUP], 50);
}

int main(int argc, char **argv)
{
	struct geo_args ga = { 0 };
	struct bench b = { 0 };
	struct verdict v = { 0 };
	struct probe_opts po = { .samples = DEFAULT_PROBE_SAMPLES, .block_bytes = 2ull << 20,
				 .seed = 1 };
	const char *levels = DEFAULT_PROBE_LEVELS;
	enum cmd cmd = CMD_RUN;
	const char *from = NULL, *measured = NULL, *phases = NULL;
	int c, have_geo, have_bw = 0, have_lat = 0, have_prefill = 0, r;
	int seen_tflops = 0, want_verdict, engine_given = 0;
	uint64_t max_buffer_bytes = DEFAULT_MAX_BUFFER_BYTES;

	tool_init("kvbench");
	if (argc > 1 && argv[1][0] != '-') {
		if (!strcmp(argv[1], "dma"))
			return kvbench_dma_main(argc - 1, argv + 1);
		for (c = CMD_RUN; c <= CMD_PROBE; c <<= 1)
			if (!strcmp(argv[1], cmd_names[c]))
				break;
		if (c > CMD_PROBE)
			tool_usage_fail("unknown command '%s' (run, geometry, verdict, probe, dma)",
					argv[1]);
		cmd = (enum cmd)c;
		argv[1] = argv[0];
		argc--;
		argv++;
	}
	b.o.engine = ENGINE_URING;
	b.o.threads = 4;
	b.o.qd = 8;
	b.o.size_bytes = 1ULL << 30;
	b.o.direct = DIRECT_AUTO;
	b.o.atomic = 1;
	b.o.phases = PH_DATA_MASK;
	b.o.mix_read_pct = 70;
	b.o.lookups = 100000;
	b.o.seed = 1;
	v.mfu = 0.5;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":JhV", longopts, NULL)) != -1) {
		if (c == 'h')
			usage();
		if (c == 'V')
			tool_version();
		if (c == '?' || c == ':')
			tool_bad_option(c, argv);
		if (!(applies(c) & cmd)) {
			const struct option *o = longopts;

			while (o->name && o->val != c)
				o++;
			tool_usage_fail("--%s does not apply to '%s'", o->name, cmd_names[cmd]);
		}
		switch (c) {
		case OPT_HF: ga.hf = optarg; break;
		case OPT_TP: ga.tp = parse_count("--tp", optarg, 4096); break;
		case OPT_TPF: ga.tpf = parse_count("--tokens-per-file", optarg, 1 << 24); break;
		case OPT_GBT: ga.gbt = parse_count("--gpu-block-tokens", optarg, 1 << 24); break;
		case OPT_DTYPE: ga.dtype = optarg; break;
		case OPT_BLOCK: ga.block = tool_parse_size("--block-size", optarg); break;
		case OPT_DIR: b.o.dir = optarg; break;
		case OPT_PHASES:
			phases = optarg;
			b.o.phases = parse_phases(optarg);
			break;
		case OPT_ENGINE:
			engine_given = 1;
			if (!strcmp(optarg, "uring"))
				b.o.engine = ENGINE_URING;
			else if (!strcmp(optarg, "psync"))
				b.o.engine = ENGINE_PSYNC;
			else if (!strcmp(optarg, "kvio"))
				b.o.engine = ENGINE_KVIO;
			else
				tool_usage_fail("invalid --engine value '%s' (uring, psync, kvio)", optarg);
			break;
		case OPT_THREADS: b.o.threads = (unsigned)tool_parse_uint("--threads", optarg, 1024); break;
		case OPT_QD: b.o.qd = (unsigned)tool_parse_uint("--qd", optarg, 4096); break;
		case OPT_MAXBUF:
			max_buffer_bytes = tool_parse_size("--max-buffer-bytes", optarg);
			if (!max_buffer_bytes)
				tool_usage_fail("invalid --max-buffer-bytes value '0'");
			break;
		case OPT_SIZE: b.o.size_bytes = tool_parse_size("--size", optarg); break;
		case OPT_DURATION: b.o.duration_ns = tool_parse_duration_ns("--duration", optarg); break;
		case OPT_DIRECT: b.o.direct = DIRECT_ON; break;
		case OPT_BUFFERED: b.o.direct = DIRECT_OFF; break;
		case OPT_ATOMIC: b.o.atomic = 1; break;
		case OPT_INPLACE: b.o.atomic = 0; break;
		case OPT_FSYNC:
			if (!strcmp(optarg, "none"))
				b.o.fsync = FSYNC_NONE;
			else if (!strcmp(optarg, "file"))
				b.o.fsync = FSYNC_FILE;
			else if (!strcmp(optarg, "dir"))
				b.o.fsync = FSYNC_DIR;
			else
				tool_usage_fail("invalid --fsync value '%s' (none, file, dir)", optarg);
			break;
		case OPT_MIX: b.o.mix_read_pct = (unsigned)tool_parse_uint("--mix", optarg, 100); break;
		case OPT_LOOKUPS: b.o.lookups = tool_parse_uint("--lookups", optarg, UINT64_MAX); break;
		case OPT_DROP: b.o.drop_caches = 1; break;
		case OPT_REGBUF: b.o.registered_buffers = 1; break;
		case OPT_REGFILES: b.o.registered_files = 1; break;
		case OPT_SQPOLL: b.o.sqpoll = 1; break;
		case OPT_SEED: b.o.seed = tool_parse_uint("--seed", optarg, UINT64_MAX); break;
		case OPT_KEEP: b.o.keep = 1; break;
		case OPT_CROSS: b.o.cross_read = 1; break;
		case OPT_PLOT: b.o.plot = optarg; break;
		case 'J': b.o.json = 1; break;
		case OPT_NDJSON: b.o.ndjson = 1; break;
		case OPT_PREFILL:
			v.prefill_tps = parse_real("--prefill-tokens-per-s", optarg, 1e-9, 1e15, 1);
			have_prefill = 1;
			break;
		case OPT_PARAMS: v.params = parse_real("--params", optarg, 1, 1e16, 1); break;
		case OPT_TFLOPS:
			v.gpu_tflops = parse_real("--gpu-tflops", optarg, 1e-6, 1e9, 0);
			seen_tflops = 1;
			break;
		case OPT_MFU: v.mfu = parse_real("--mfu", optarg, 1e-6, 1, 0); break;
		case OPT_MEASURED: measured = optarg; break;
		case OPT_READBW:
			v.read_Bps = (double)tool_parse_size("--read-bandwidth", optarg);
			if (v.read_Bps <= 0)
				tool_usage_fail("invalid --read-bandwidth value '%s'", optarg);
			have_bw = 1;
			break;
		case OPT_LATENCY:
			v.latency_ns = tool_parse_duration_ns("--latency", optarg);
			have_lat = 1;
			break;
		case OPT_FROMRUN: from = optarg; break;
		case OPT_ROOT: po.root = optarg; break;
		case OPT_SAMPLES: po.samples = parse_count("--samples", optarg, 1 << 16); break;
		case OPT_LEVELS: levels = optarg; break;
		}
	}
	if (cmd == CMD_PROBE) {
		parse_levels(levels, &po);
		po.seed = b.o.seed;
		po.dtype = ga.dtype;
		po.block_bytes = ga.block ? ga.block : po.block_bytes;
		po.json = b.o.json;
		po.files = argv + optind;
		po.nfiles = argc - optind;
		if (!po.root == !po.nfiles)
			tool_usage_fail("probe samples --root DIR or FILEs of blocks, one of the two");
		if (po.root && (ga.dtype || ga.block))
			tool_usage_fail("--dtype and --block-size describe FILEs; a root's blocks "
					"have their model's dtype");
		if (have_bw) {
			po.link_Bps = v.read_Bps;
			po.link_from = "--read-bandwidth";
		} else if (from) {
			from_run(from, &v, 0, 1, 1, 256);
			po.link_Bps = v.read_Bps;
			po.link_from = from;
		}
		return probe_main(&po);
	}
	if (optind < argc)
		tool_usage_fail("unexpected argument '%s'", argv[optind]);
	if (b.o.json && b.o.ndjson)
		tool_usage_fail("-J and --ndjson exclude each other");

	have_geo = load_geometry(&ga, &b.geo);
	if (!have_geo && (ga.tp || ga.dtype) && !(cmd == CMD_VERDICT && ga.block))
		tool_usage_fail("--tp and --dtype need --hf-config");

	if (cmd == CMD_GEOMETRY) {
		if (!have_geo && !ga.block)
			tool_usage_fail("geometry needs --hf-config or --block-size");
		if (!have_geo) {
			/* A bare block size: the file is all there is to say. */
			if (b.o.json) {
				json_t *j = json_object();

				json_object_set_new(j, "version", json_integer(KVBENCH_JSON_VERSION));
				json_object_set_new(j, "file_bytes", json_integer((json_int_t)ga.block));
				tool_json_print(j);
			} else {
				printf("per file:      %llu bytes\n", (unsigned long long)ga.block);
			}
			return 0;
		}
		if (ga.block)
			b.geo.bytes_per_file = ga.block;
		if (b.o.json) {
			json_t *j = geometry_json(&b.geo);

			json_object_set_new(j, "version", json_integer(KVBENCH_JSON_VERSION));
			tool_json_print(j);
		} else {
			print_geometry(&b.geo, ga.hf);
		}
		return 0;
	}

	want_verdict = cmd == CMD_VERDICT || have_prefill || v.params > 0 || seen_tflops ||
		       measured;
	if (want_verdict) {
		unsigned tpf = ga.tpf ? ga.tpf : 256;
		char err[512];

		if (have_prefill + (v.params > 0) + !!measured > 1)
			tool_usage_fail("give one of --prefill-tokens-per-s, --measured-prefill, --params");
		if (v.params > 0 && !seen_tflops)
			tool_usage_fail("--params needs --gpu-tflops");
		if (!have_prefill && !(v.params > 0) && !measured)
			tool_usage_fail("verdict needs --prefill-tokens-per-s, --measured-prefill, "
					"or --params with --gpu-tflops");
		if (measured && (r = verdict_load_curve(&v, measured, err, sizeof(err))) < 0) {
			if (r == -ENOMEM)
				tool_err("%s", kv_strerror(r));
			else
				tool_err("%s", err);
			exit(EXIT_RUNTIME);
		}
		if (have_geo)
			v.bytes_per_token = b.geo.bytes_per_token;
		else if (ga.block)
			v.bytes_per_token = (ga.block + tpf - 1) / tpf;
		else if (cmd == CMD_RUN)
			v.bytes_per_token = (2ULL << 20) / tpf;
		v.tp = have_geo ? b.geo.tp : (ga.tp ? ga.tp : 1);
		if (have_geo)
			verdict_attention(&v, &b.geo);
		if (cmd == CMD_RUN && !(b.o.phases & (1u << PH_READ)))
			tool_usage_fail("a verdict needs the read phase");
	}

	if (cmd == CMD_VERDICT) {
		if (from)
			from_run(from, &v, have_bw, have_lat, have_geo || ga.block, ga.tpf);
		if (!v.bytes_per_token)
			tool_usage_fail("verdict needs --hf-config, --block-size or a --from-run with a geometry");
		if (!(v.read_Bps > 0))
			tool_usage_fail("verdict needs --read-bandwidth or --from-run");
		r = verdict_print(&v, b.o.json);
		verdict_free(&v);
		return r;
	}

	if (!b.o.dir)
		tool_usage_fail("run needs --dir (a scratch directory or an s3:// bucket)");
	if (kv_root_is_s3(b.o.dir)) {
		tool_root_check(b.o.dir);
		s3_check(&b.o, phases, engine_given);
		b.s3 = 1;
		b.o.engine = ENGINE_S3;
		b.o.direct = DIRECT_OFF;
	}
	if (b.o.engine != ENGINE_URING &&
	    (b.o.registered_buffers || b.o.registered_files || b.o.sqpoll))
		tool_usage_fail("--registered-buffers, --registered-files and --sqpoll need --engine uring");
	if (b.o.engine == ENGINE_KVIO && !b.o.atomic)
		tool_usage_fail("--engine kvio always writes atomically: no --in-place");
	if (b.o.engine == ENGINE_KVIO && b.o.fsync == FSYNC_FILE)
		tool_usage_fail("--engine kvio syncs file and directory together: --fsync dir");
	if (!b.o.threads || !b.o.qd)
		tool_usage_fail("--threads and --qd must be at least 1");
	if (b.o.size_bytes == 0)
		tool_usage_fail("--size must be more than 0");
	b.have_geo = have_geo;
	b.o.block_bytes = ga.block ? ga.block : have_geo ? b.geo.bytes_per_file : 2ULL << 20;
	if (b.o.block_bytes > UINT32_MAX / 2)
		tool_usage_fail("block of %llu bytes is too large for one I/O",
				(unsigned long long)b.o.block_bytes);
	/* Each file's path is kept in memory; a working set of tiny blocks
	 * should not need gigabytes of them. */
	if ((b.o.size_bytes + b.o.block_bytes - 1) / b.o.block_bytes > MAX_FILES)
		tool_usage_fail("--size of %llu bytes is more than %d files of %llu bytes",
				(unsigned long long)b.o.size_bytes, MAX_FILES,
				(unsigned long long)b.o.block_bytes);
	fit_buffers(&b.o, max_buffer_bytes);
	if (b.o.direct == DIRECT_ON && b.o.block_bytes % KV_IO_ALIGN)
		tool_usage_fail("--direct needs a block size that is a multiple of %d bytes",
				KV_IO_ALIGN);
	if (ranks_init(&argc, &argv, b.err, sizeof(b.err)) < 0) {
		tool_err("%s", b.err);
		return EXIT_RUNTIME;
	}
	b.rank = ranks_rank();
	b.nranks = (unsigned)ranks_size();
	if (b.have_geo && !b.o.json && !b.o.ndjson && b.rank == 0) {
		print_geometry(&b.geo, ga.hf);
		putchar('\n');
	}
	r = bench_run(&b);
	if (r < 0) {
		tool_err("%s", b.err);
		/* The other ranks would wait for this one at the next barrier. */
		ranks_abort(EXIT_RUNTIME);
		bench_free(&b);
		verdict_free(&v);
		return EXIT_RUNTIME;
	}
	if (want_verdict)
		verdict_from_bench(&b, &v);
	/* Rank 0 speaks for the run; the others only took part. */
	if (b.rank != 0) {
		bench_free(&b);
		verdict_free(&v);
		ranks_finish();
		return 0;
	}
	if (b.o.json) {
		json_t *j = report_json(&b);

		json_object_set_new(j, "verdict", want_verdict ? verdict_json(&v) : json_null());
		tool_json_print(j);
	} else if (b.o.ndjson) {
		for (unsigned ph = 0; ph < PH_COUNT; ph++)
			if (b.res[ph].ran)
				tool_json_print(phase_json(&b, ph));
		if (want_verdict) {
			json_t *j = verdict_json(&v);

			json_object_set_new(j, "type", json_string("verdict"));
			tool_json_print(j);
		}
	} else {
		report_table(&b);
		if (want_verdict) {
			printf("\nverdict, with the read phase's bandwidth and %s p50 as latency:\n",
			       b.s3 ? "twice the lookup (HEAD)" : "open + lookup");
			verdict_text(&v);
		}
	}
	if (b.o.plot && (r = plot_svg(b.o.plot, &b)) < 0) {
		tool_err("cannot write '%s': %s", b.o.plot, kv_strerror(r));
		bench_free(&b);
		verdict_free(&v);
		ranks_finish();
		return EXIT_RUNTIME;
	}
	bench_free(&b);
	verdict_free(&v);
	ranks_finish();
	return 0;
}
