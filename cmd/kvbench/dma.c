/*
 * kvbench dma: host <-> GPU bandwidth through libkv's DMA paths, with
 * one large pinned copy measured in the same run as the yardstick.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../tool.h"
#include "dma.h"

#define DEFAULT_TOTAL_BYTES	(256ull << 20)
#define DEFAULT_MIN_BLOCK	(16ull << 10)
#define DEFAULT_MAX_BLOCK	(64ull << 20)
#define DEFAULT_LAYERS		32
#define DEFAULT_REPEAT		3
/* Bounds one measurement's copy count so small fragments stay quick. */
#define MAX_COPIES		65536
#define TARGET_BLOCK_BYTES	(2ull << 20)
#define TARGET_CONTIGUOUS	0.9
#define TARGET_FRAGMENTS	0.8

static const char usage_text[] =
	"Usage: kvbench dma [-J] [-d N] [-l N] [-t SIZE] [-r N] [--lanes N]\n"
	"                   [--min-block SIZE] [--max-block SIZE]\n"
	"\n"
	"Measure host-to-GPU (H2D) and GPU-to-host (D2H) bandwidth through the\n"
	"libkv DMA paths: pinned vs pageable host memory, one block at a time vs\n"
	"batched, contiguous blocks vs per-layer K/V fragments, for block sizes\n"
	"from --min-block to --max-block (x4 steps, plus 2M), against one large\n"
	"pinned cudaMemcpy measured in the same run.\n"
	"\n"
	"Options:\n"
	"  -d, --device N        CUDA device index (default 0)\n"
	"  -l, --layers N        layers for the fragment layout, K and V\n"
	"                        planes each (default 32)\n"
	"  -t, --total SIZE      bytes moved per measurement (default 256M)\n"
	"  -r, --repeat N        runs per measurement, best kept (default 3)\n"
	"      --lanes N         CUDA streams per worker (default 4)\n"
	"      --min-block SIZE  smallest block (default 16K)\n"
	"      --max-block SIZE  largest block (default 64M)\n"
	"  -J, --json            one JSON document\n"
	"  -h, --help            show this help and exit\n"
	"  -V, --version         show the version and exit\n"
	"\n"
	"Exit status: 0 measured, 1 no CUDA device, 2 usage, 3 runtime failure.\n";

enum { OPT_LANES = 256, OPT_MIN_BLOCK, OPT_MAX_BLOCK };

static const struct option longopts[] = {
	{ "device", required_argument, NULL, 'd' },
	{ "layers", required_argument, NULL, 'l' },
	{ "total", required_argument, NULL, 't' },
	{ "repeat", required_argument, NULL, 'r' },
	{ "lanes", required_argument, NULL, OPT_LANES },
	{ "min-block", required_argument, NULL, OPT_MIN_BLOCK },
	{ "max-block", required_argument, NULL, OPT_MAX_BLOCK },
	{ "json", no_argument, NULL, 'J' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

struct bench {
	struct kv_dma *dma;
	struct kv_dma_stream *s;
	uint64_t total_bytes;
	unsigned layers;
	unsigned repeat;
	int numa_node;		/* the device's node, -1 when unknown */
	int numa_bound;		/* this thread runs on that node's cores */
	char *pinned;		/* total_bytes of pinned host memory */
	char *pageable;		/* total_bytes of ordinary host memory */
	char *dev;		/* total_bytes of device memory: contiguous blocks */
	char *planes;		/* total_bytes of device memory: K/V planes */
	void **tensors;		/* 2 * layers plane bases inside planes */
	void **blocks;		/* per-block host addresses for one run */
	uint64_t *ids;
	struct kv_dma_copy *copies;
};

struct row {
	const char *direction;	/* "h2d" or "d2h" */
	const char *host;	/* "pinned" or "pageable" */
	const char *submit;	/* "single" or "batched" */
	const char *layout;	/* "contiguous" or "fragments" */
	const char *method;	/* "copies" or "kernel" */
	uint64_t block_bytes;
	uint64_t blocks;
	uint64_t copies;
	uint64_t bytes;
	int64_t elapsed_ns;
};

static double rate(uint64_t bytes, int64_t ns)
{
	return ns > 0 ? (double)bytes * 1e9 / (double)ns : 0.0;
}

static int fail_cuda(const char *what, int r)
{
	tool_err("dma: %s: %s%s%s", what, kv_strerror(r),
		 *kv_error_detail() ? ": " : "", kv_error_detail());
	return EXIT_RUNTIME;
}

/* One pass of a row's transfers, submitted and waited for. */
static int run_once(struct bench *b, const struct row *w, int64_t *ns)
{
	int h2d = w->direction[0] == 'h';
	int batched = w->submit[0] == 'b';
	char *host = w->host[1] == 'i' ? b->pinned : b->pageable;
	enum kv_dma_method m = w->method[0] == 'k' ? KV_DMA_KERNEL : KV_DMA_COPIES;
	struct kv_dma_frags f = {
		.tensors = b->tensors,
		.num_tensors = 2 * b->layers,
		.fragment_bytes = w->block_bytes / (2 * b->layers),
	};
	size_t per_call = batched ? w->blocks : 1;
	int64_t t0;
	int r = 0;

	for (size_t i = 0; i < w->blocks; i++) {
		b->ids[i] = i;
		b->blocks[i] = host + i * w->block_bytes;
		b->copies[i].dst = h2d ? b->dev + i * w->block_bytes : b->blocks[i];
		b->copies[i].src = h2d ? (void *)b->blocks[i] : b->dev + i * w->block_bytes;
		b->copies[i].len = w->block_bytes;
	}
	t0 = kv_monotonic_ns();
	for (size_t i = 0; i < w->blocks && r == 0; i += per_call) {
		if (w->layout[0] == 'c')
			r = kv_dma_copy_async(b->s, b->copies + i, per_call);
		else if (h2d)
			r = kv_dma_scatter(b->s, m, &f, b->ids + i,
					   (const void *const *)b->blocks + i, per_call);
		else
			r = kv_dma_gather(b->s, m, &f, b->ids + i, b->blocks + i,
					  per_call);
		if (r == 0)
			r = kv_dma_stream_sync(b->s);
	}
	*ns = kv_monotonic_ns() - t0;
	return r;
}

static int run_row(struct bench *b, struct row *w)
{
	int64_t best = 0;

	for (unsigned k = 0; k < b->repeat; k++) {
		int64_t ns;
		int r = run_once(b, w, &ns);

		if (r < 0)
			return fail_cuda("copy", r);
		if (best == 0 || ns < best)
			best = ns;
	}
	w->elapsed_ns = best;
	return 0;
}

static int reference(struct bench *b, int h2d, int64_t *best)
{
	*best = 0;
	for (unsigned k = 0; k < b->repeat; k++) {
		int64_t t0 = kv_monotonic_ns(), ns;
		int r = h2d ? kv_dma_copy(b->dma, b->dev, b->pinned, b->total_bytes)
			    : kv_dma_copy(b->dma, b->pinned, b->dev, b->total_bytes);

		if (r < 0)
			return fail_cuda("reference copy", r);
		ns = kv_monotonic_ns() - t0;
		if (*best == 0 || ns < *best)
			*best = ns;
	}
	return 0;
}

/* A round trip through the device must give back the bytes sent. */
static int verify(struct bench *b)
{
	size_t half = b->total_bytes / 2;
	int r;

	for (size_t i = 0; i < half; i++)
		b->pinned[i] = (char)(i * 131 + 7);
	memset(b->pinned + half, 0xa5, half);
	r = kv_dma_copy(b->dma, b->dev, b->pinned, half);
	if (r == 0)
		r = kv_dma_copy(b->dma, b->pinned + half, b->dev, half);
	if (r < 0)
		return fail_cuda("verify copy", r);
	if (memcmp(b->pinned, b->pinned + half, half)) {
		tool_err("dma: data changed in a round trip through the device");
		return EXIT_RUNTIME;
	}
	return 0;
}

static int setup(struct bench *b)
{
	size_t plane;
	int r;

	/* Measure as a well-placed worker would run: on the GPU's node, so
	 * first-touch puts the host buffers there too. */
	if (kv_dma_numa_node(b->dma, &b->numa_node) < 0)
		b->numa_node = -1;
	b->numa_bound = b->numa_node >= 0 && kv_numa_bind_thread(b->numa_node) == 0;
	r = kv_dma_stream_open(b->dma, &b->s);
	if (r == 0)
		r = kv_dma_host_alloc(b->dma, b->total_bytes, (void **)&b->pinned);
	if (r == 0)
		r = kv_dma_dev_alloc(b->dma, b->total_bytes, (void **)&b->dev);
	if (r == 0)
		r = kv_dma_dev_alloc(b->dma, b->total_bytes, (void **)&b->planes);
	if (r < 0)
		return fail_cuda("allocate", r);
	b->pageable = malloc(b->total_bytes);
	b->tensors = calloc(2 * b->layers, sizeof(*b->tensors));
	b->blocks = calloc(b->total_bytes / DEFAULT_MIN_BLOCK + 1, sizeof(*b->blocks));
	b->ids = calloc(b->total_bytes / DEFAULT_MIN_BLOCK + 1, sizeof(*b->ids));
	b->copies = calloc(b->total_bytes / DEFAULT_MIN_BLOCK + 1, sizeof(*b->copies));
	if (!b->pageable || !b->tensors || !b->blocks || !b->ids || !b->copies) {
		tool_err("dma: %s", strerror(ENOMEM));
		return EXIT_RUNTIME;
	}
	memset(b->pageable, 0x3c, b->total_bytes);
	plane = b->total_bytes / (2 * b->layers);
	for (unsigned t = 0; t < 2 * b->layers; t++)
		b->tensors[t] = b->planes + t * plane;
	return 0;
}

static void teardown(struct bench *b)
{
	kv_dma_stream_close(b->s);
	kv_dma_host_free(b->dma, b->pinned);
	kv_dma_dev_free(b->dma, b->dev);
	kv_dma_dev_free(b->dma, b->planes);
	free(b->pageable);
	free(b->tensors);
	free(b->blocks);
	free(b->ids);
	free(b->copies);
}

static json_t *row_json(const struct row *w)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I}",
			 "direction", w->direction, "host_memory", w->host,
			 "submit", w->submit, "layout", w->layout,
			 "method", w->method,
			 "block_bytes", (json_int_t)w->block_bytes,
			 "blocks", (json_int_t)w->blocks,
			 "copies", (json_int_t)w->copies,
			 "bytes", (json_int_t)w->bytes,
			 "elapsed_ns", (json_int_t)w->elapsed_ns,
			 "bytes_per_s", (json_int_t)rate(w->bytes, w->elapsed_ns));
}

static void row_print(const struct row *w)
{
	char blk[16];

	kv_size_format(w->block_bytes, blk, sizeof(blk));
	printf("%-4s %-9s %-8s %-11s %-7s %6s %7llu %8.2f\n", w->direction,
	       w->host, w->submit, w->layout, w->method, blk,
	       (unsigned long long)w->copies, rate(w->bytes, w->elapsed_ns) / 1e9);
}

/* The best fragment figure among methods for a direction at 2 MiB. */
static double target_rate(const struct row *rows, size_t n, const char *dir,
			  const char *layout)
{
	double best = 0;

	for (size_t i = 0; i < n; i++) {
		const struct row *w = &rows[i];
		double r = rate(w->bytes, w->elapsed_ns);

		if (w->block_bytes == TARGET_BLOCK_BYTES && !strcmp(w->direction, dir) &&
		    !strcmp(w->layout, layout) && !strcmp(w->host, "pinned") &&
		    !strcmp(w->submit, "batched") && r > best)
			best = r;
	}
	return best;
}

static int report(struct bench *b, const struct row *rows, size_t n,
		  const int64_t ref_ns[2], int json)
{
	static const char *const dirs[2] = { "h2d", "d2h" };
	static const char *const layouts[2] = { "contiguous", "fragments" };
	static const double targets[2] = { TARGET_CONTIGUOUS, TARGET_FRAGMENTS };
	json_t *doc = NULL, *results = NULL, *ratios = NULL;
	char pci[32] = "";
	char total[16];

	kv_dma_pci_bus_id(b->dma, pci, sizeof(pci));
	kv_size_format(b->total_bytes, total, sizeof(total));
	if (json) {
		doc = json_pack("{s:{s:s,s:s,s:i,s:o,s:b},s:b,s:i,s:i,s:I,s:i,s:{s:I,s:I,s:I,s:I,s:I}}",
			"device", "name", kv_dma_name(b->dma), "pci_bus_id", pci,
			"index", kv_dma_device(b->dma),
			"numa_node", b->numa_node >= 0 ? json_integer(b->numa_node) : json_null(),
			"numa_bound", b->numa_bound,
			"batch_api", kv_dma_batched(b->dma),
			"layers", (int)b->layers, "fragments_per_block", (int)(2 * b->layers),
			"total_bytes", (json_int_t)b->total_bytes, "repeat", (int)b->repeat,
			"reference", "bytes", (json_int_t)b->total_bytes,
			"h2d_elapsed_ns", (json_int_t)ref_ns[0],
			"d2h_elapsed_ns", (json_int_t)ref_ns[1],
			"h2d_bytes_per_s", (json_int_t)rate(b->total_bytes, ref_ns[0]),
			"d2h_bytes_per_s", (json_int_t)rate(b->total_bytes, ref_ns[1]));
		results = json_array();
		ratios = json_array();
		if (!doc || !results || !ratios) {
			tool_err("dma: %s", strerror(ENOMEM));
			return EXIT_RUNTIME;
		}
		for (size_t i = 0; i < n; i++)
			json_array_append_new(results, row_json(&rows[i]));
	} else {
		char node[32] = "unknown";

		if (b->numa_node >= 0)
			snprintf(node, sizeof(node), "%d%s", b->numa_node,
				 b->numa_bound ? ", bound" : ", not bound");
		printf("device: %s (%s, NUMA node %s), copies: %s, best of %u, "
		       "GB/s = 1e9 bytes/s\n", kv_dma_name(b->dma), pci, node,
		       kv_dma_batched(b->dma) ? "cudaMemcpyBatchAsync"
					       : "cudaMemcpyAsync over streams",
		       b->repeat);
		printf("reference: one %s pinned cudaMemcpy: h2d %.2f GB/s, d2h %.2f GB/s\n\n",
		       total, rate(b->total_bytes, ref_ns[0]) / 1e9,
		       rate(b->total_bytes, ref_ns[1]) / 1e9);
		printf("%-4s %-9s %-8s %-11s %-7s %6s %7s %8s\n", "DIR", "HOST",
		       "SUBMIT", "LAYOUT", "METHOD", "BLOCK", "COPIES", "GB/s");
		for (size_t i = 0; i < n; i++)
			row_print(&rows[i]);
		printf("\n");
	}
	for (int d = 0; d < 2; d++) {
		for (int l = 0; l < 2; l++) {
			double got = target_rate(rows, n, dirs[d], layouts[l]);
			double ref = rate(b->total_bytes, ref_ns[d]);
			double ratio = ref > 0 ? got / ref : 0;

			if (got == 0)
				continue;
			if (json)
				json_array_append_new(ratios, json_pack(
					"{s:s,s:s,s:I,s:f,s:f,s:b}", "direction", dirs[d],
					"layout", layouts[l],
					"block_bytes", (json_int_t)TARGET_BLOCK_BYTES,
					"ratio", ratio, "target", targets[l],
					"met", ratio >= targets[l]));
			else
				printf("%s %-10s 2M pinned batched / reference: %.3f "
				       "(target %.1f) %s\n", dirs[d], layouts[l], ratio,
				       targets[l], ratio >= targets[l] ? "met" : "NOT met");
		}
	}
	if (json) {
		json_object_set_new(doc, "results", results);
		json_object_set_new(doc, "ratios", ratios);
		tool_json_print(doc);
	}
	return 0;
}

/* Every combination for one block size, appended to rows. */
static size_t plan(struct bench *b, uint64_t block, struct row *rows)
{
	static const char *const dirs[] = { "h2d", "d2h" };
	static const char *const hosts[] = { "pinned", "pageable" };
	static const char *const submits[] = { "single", "batched" };
	unsigned frags = 2 * b->layers;
	uint64_t blocks = b->total_bytes / block;
	uint64_t frag_blocks = blocks;
	size_t n = 0;

	if (frags && blocks * frags > MAX_COPIES)
		frag_blocks = MAX_COPIES / frags ? MAX_COPIES / frags : 1;
	for (int d = 0; d < 2; d++)
		for (int h = 0; h < 2; h++)
			for (int s = 0; s < 2; s++)
				for (int k = 0; k < 3; k++) {
					struct row *w = &rows[n];
					int contiguous = k == 0;

					if (!contiguous && (block % frags || block / frags == 0))
						continue;
					/* The kernel reaches host memory only when pinned. */
					if (k == 2 && h == 1)
						continue;
					memset(w, 0, sizeof(*w));
					w->direction = dirs[d];
					w->host = hosts[h];
					w->submit = submits[s];
					w->layout = contiguous ? "contiguous" : "fragments";
					w->method = k == 2 ? "kernel" : "copies";
					w->block_bytes = block;
					w->blocks = contiguous ? blocks : frag_blocks;
					w->copies = contiguous ? w->blocks
						  : k == 2 ? (s ? 1 : w->blocks)
						  : w->blocks * frags;
					w->bytes = w->blocks * block;
					n++;
				}
	return n;
}

int kvbench_dma_main(int argc, char **argv)
{
	struct bench b = { .total_bytes = DEFAULT_TOTAL_BYTES,
			   .layers = DEFAULT_LAYERS, .repeat = DEFAULT_REPEAT };
	struct kv_dma_opts o = { 0 };
	uint64_t min_block = DEFAULT_MIN_BLOCK, max_block = DEFAULT_MAX_BLOCK;
	uint64_t sizes[32];
	size_t nsizes = 0, nrows = 0;
	struct row *rows = NULL;
	int64_t ref_ns[2];
	int device = 0, json = 0, c, rc, r;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":d:l:t:r:JhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			device = (int)tool_parse_uint("--device", optarg, 1023);
			break;
		case 'l':
			b.layers = (unsigned)tool_parse_uint("--layers", optarg, 4096);
			if (!b.layers)
				tool_usage_fail("invalid --layers value '%s' (at least 1)",
						optarg);
			break;
		case 't':
			b.total_bytes = tool_parse_size("--total", optarg);
			break;
		case 'r':
			b.repeat = (unsigned)tool_parse_uint("--repeat", optarg, 1000);
			if (!b.repeat)
				tool_usage_fail("invalid --repeat value '%s' (at least 1)",
						optarg);
			break;
		case OPT_LANES:
			o.lanes = (unsigned)tool_parse_uint("--lanes", optarg, 64);
			break;
		case OPT_MIN_BLOCK:
			min_block = tool_parse_size("--min-block", optarg);
			break;
		case OPT_MAX_BLOCK:
			max_block = tool_parse_size("--max-block", optarg);
			break;
		case 'J':
			json = 1;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'V':
			tool_version();
		default:
			tool_bad_option(c, argv);
		}
	}
	if (optind < argc)
		tool_usage_fail("dma: unexpected argument '%s'", argv[optind]);
	if (min_block < DEFAULT_MIN_BLOCK || max_block < min_block)
		tool_usage_fail("dma: need 16K <= --min-block <= --max-block");
	if (b.total_bytes < max_block || b.total_bytes > (64ull << 30))
		tool_usage_fail("dma: --total must be between --max-block and 64G");
	/* x4 steps, with the 2 MiB block of the targets always measured. */
	for (uint64_t s = min_block; s <= max_block && nsizes < 31; s *= 4) {
		if (s > TARGET_BLOCK_BYTES && min_block < TARGET_BLOCK_BYTES &&
		    sizes[nsizes - 1] < TARGET_BLOCK_BYTES)
			sizes[nsizes++] = TARGET_BLOCK_BYTES;
		sizes[nsizes++] = s;
	}
	if (sizes[nsizes - 1] < TARGET_BLOCK_BYTES && max_block >= TARGET_BLOCK_BYTES)
		sizes[nsizes++] = TARGET_BLOCK_BYTES;

	r = kv_dma_open(device, &o, &b.dma);
	if (r == -KV_ENODEV) {
		tool_err("dma: no CUDA device (%s)", kv_error_detail());
		return EXIT_ANSWER_NO;
	}
	if (r < 0)
		return fail_cuda("open", r);
	rc = setup(&b);
	if (rc == 0)
		rc = verify(&b);
	if (rc == 0)
		rc = reference(&b, 1, &ref_ns[0]);
	if (rc == 0)
		rc = reference(&b, 0, &ref_ns[1]);
	if (rc == 0) {
		rows = calloc(nsizes * 24, sizeof(*rows));
		if (!rows) {
			tool_err("dma: %s", strerror(ENOMEM));
			rc = EXIT_RUNTIME;
		}
	}
	for (size_t i = 0; rc == 0 && i < nsizes; i++)
		nrows += plan(&b, sizes[i], rows + nrows);
	for (size_t i = 0; rc == 0 && i < nrows; i++)
		rc = run_row(&b, &rows[i]);
	if (rc == 0)
		rc = report(&b, rows, nrows, ref_ns, json);
	free(rows);
	teardown(&b);
	kv_dma_close(b.dma);
	return rc;
}
