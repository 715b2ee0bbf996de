/*
 * kvbench probe.  For each dtype found, a sample of blocks is compressed
 * at each level, as is and split into byte planes (the archive's shuffle,
 * kv_archive_shuffle), and decompressed back and compared.  Speeds are
 * CPU time of this one thread, so they read per core whatever else the
 * machine is doing.  Pipelined over a link of B bytes/s with one core
 * compressing and one decompressing, blocks move at
 *
 *   min(compress, decompress, ratio * B)   bytes of block per second,
 *
 * which beats B exactly when ratio > 1 and B < min(compress, decompress).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <zstd.h>
#include "../tool.h"
#include "kvbench.h"
#include "probe.h"

#define DTYPE_GROUPS_MAX	8
#define SAMPLE_MAX_BYTES	(64ull << 20)	/* per dtype */
#define FILE_MAX_BYTES		(256ull << 20)
#define PASS_MIN_NS		150000000ull	/* repeat a setting up to this long */
#define PASSES_MAX		5
#define CONFIG_DTYPES_MAX	64

struct block {
	unsigned char *data;
	size_t len;
};

struct result {
	int level;
	unsigned shuffle_bytes;
	uint64_t stored_bytes;
	double ratio, compress_Bps, decompress_Bps;
};

/* One dtype's sample: reservoir of block paths while listing, then data. */
struct group {
	char dtype[KV_DTYPE_NAME_MAX];
	unsigned width;
	uint64_t seen;
	char **keys;
	unsigned nkeys;
	struct block *blocks;
	unsigned nblocks;
	uint64_t bytes;
	struct result results[2 * PROBE_MAX_LEVELS];
	int nresults;
};

/* A v1 model dir's dtype, read once from its config.json. */
struct model_dtype {
	char model_dir[KV_NAME_MAX + 1];
	char dtype[KV_DTYPE_NAME_MAX];	/* "" when it cannot be known */
};

struct probe {
	const struct probe_opts *o;
	struct group groups[DTYPE_GROUPS_MAX];
	int ngroups;
	int rootfd;
	struct model_dtype models[CONFIG_DTYPES_MAX];
	int nmodels;
	uint64_t rng;
};

static uint64_t next_rand(struct probe *p)
{
	p->rng ^= p->rng << 13;
	p->rng ^= p->rng >> 7;
	p->rng ^= p->rng << 17;
	return p->rng;
}

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct group *group_of(struct probe *p, const char *name)
{
	char canon[KV_DTYPE_NAME_MAX];
	unsigned width = 1;
	struct group *g;

	/* An unknown dtype is probed under its own name, unshuffled. */
	if (kv_dtype_parse(name, canon, &width) < 0)
		snprintf(canon, sizeof(canon), "%s", *name ? name : "unknown");
	for (int i = 0; i < p->ngroups; i++)
		if (!strcmp(p->groups[i].dtype, canon))
			return &p->groups[i];
	if (p->ngroups == DTYPE_GROUPS_MAX)
		return NULL;
	g = &p->groups[p->ngroups++];
	snprintf(g->dtype, sizeof(g->dtype), "%s", canon);
	g->width = width;
	g->keys = calloc(p->o->samples, sizeof(*g->keys));
	return g->keys ? g : NULL;
}

static const char *dtype_of(struct probe *p, const struct kv_block_ref *ref)
{
	struct kv_config *cfg = NULL;
	struct model_dtype *m;
	size_t len;
	char *text;

	if (ref->layout == KV_LAYOUT_LLMD_V0)
		return ref->dtype;
	for (int i = 0; i < p->nmodels; i++)
		if (!strcmp(p->models[i].model_dir, ref->model_dir))
			return p->models[i].dtype;
	if (p->nmodels == CONFIG_DTYPES_MAX)
		return "";
	m = &p->models[p->nmodels++];
	snprintf(m->model_dir, sizeof(m->model_dir), "%s", ref->model_dir);
	if (kv_config_read(p->rootfd, ref->model_dir, &text, &len) == 0) {
		if (kv_config_parse(text, len, &cfg) == 0)
			snprintf(m->dtype, sizeof(m->dtype), "%s", kv_config_string(cfg, "dtype"));
		kv_config_free(cfg);
		free(text);
	}
	return m->dtype;
}

/* Reservoir sampling: every block of a dtype equally likely. */
static int on_block(const struct kv_tier_entry *e, void *arg)
{
	struct probe *p = arg;
	struct group *g;
	uint64_t slot;

	if (e->err || !e->size_bytes)
		return 0;
	g = group_of(p, dtype_of(p, &e->ref));
	if (!g)
		return 0;
	slot = g->seen++;
	if (slot >= p->o->samples) {
		slot = next_rand(p) % g->seen;
		if (slot >= p->o->samples)
			return 0;
		free(g->keys[slot]);
	} else {
		g->nkeys++;
	}
	g->keys[slot] = strdup(e->key);
	return g->keys[slot] ? 0 : -ENOMEM;
}

static int add_block(struct group *g, unsigned char *data, size_t len)
{
	struct block *nb = realloc(g->blocks, (g->nblocks + 1) * sizeof(*nb));

	if (!nb)
		return -ENOMEM;
	g->blocks = nb;
	g->blocks[g->nblocks++] = (struct block){ data, len };
	g->bytes += len;
	return 0;
}

/* Blocks sampled from the root, read without stamping their atime. */
static int sample_root(struct probe *p)
{
	struct kv_io_opts io = { .flags = KV_IO_NO_TOUCH };
	struct kv_tier_list_opts lo = { .rank = -1, .threads = 1 };
	struct kv_tier *t;
	int ret;

	p->rootfd = tool_root_open(p->o->root);
	ret = kv_tier_file_open(p->o->root, &io, &t);
	if (ret < 0) {
		tool_err("cannot open '%s': %s", p->o->root, kv_strerror(ret));
		return -1;
	}
	ret = kv_tier_list(t, &lo, on_block, p);
	for (int i = 0; ret >= 0 && i < p->ngroups; i++) {
		struct group *g = &p->groups[i];

		for (unsigned k = 0; k < g->nkeys && g->bytes < SAMPLE_MAX_BYTES; k++) {
			uint64_t size;
			size_t got;
			unsigned char *buf;

			if (kv_tier_size(t, g->keys[k], &size) < 0 || !size)
				continue;
			buf = kv_io_buf_alloc(size);
			if (!buf) {
				ret = -ENOMEM;
				break;
			}
			/* A block gone or damaged meanwhile is left out. */
			if (kv_tier_get(t, g->keys[k], buf, size, &got) < 0 ||
			    add_block(g, buf, got) < 0)
				kv_io_buf_free(buf);
		}
	}
	kv_tier_close(t);
	close(p->rootfd);
	if (ret < 0) {
		tool_err("cannot sample '%s': %s", p->o->root, kv_strerror(ret));
		return -1;
	}
	return 0;
}

/* The files, cut into blocks, as one dtype. */
static int sample_files(struct probe *p)
{
	struct group *g = group_of(p, p->o->dtype ? p->o->dtype : "bfloat16");

	for (int i = 0; g && i < p->o->nfiles; i++) {
		const char *path = p->o->files[i];
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		struct stat st;

		if (fd < 0 || fstat(fd, &st) < 0) {
			tool_err("cannot read '%s': %s", path, strerror(errno));
			if (fd >= 0)
				close(fd);
			return -1;
		}
		if (!S_ISREG(st.st_mode)) {
			tool_err("cannot read '%s': not a regular file", path);
			close(fd);
			return -1;
		}
		for (off_t off = 0; off < st.st_size && g->bytes < FILE_MAX_BYTES;) {
			size_t len = (uint64_t)(st.st_size - off) < p->o->block_bytes ?
				     (size_t)(st.st_size - off) : p->o->block_bytes;
			unsigned char *buf = malloc(len);
			ssize_t got = buf ? pread(fd, buf, len, off) : -1;

			if (got != (ssize_t)len || add_block(g, buf, len) < 0) {
				tool_err("cannot read '%s': %s", path,
					 got < 0 ? strerror(errno) : "it changed while read");
				free(buf);
				close(fd);
				return -1;
			}
			off += (off_t)len;
		}
		close(fd);
	}
	return g ? 0 : -1;
}

/* One level and shuffle over a group's blocks, best of a few passes. */
static int measure(struct group *g, int level, unsigned width, struct result *res)
{
	size_t maxlen = 0;
	uint64_t best_c = UINT64_MAX, best_d = UINT64_MAX, spent = 0;
	unsigned char *planes, *out, *back;
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	int ret = 0;

	for (unsigned i = 0; i < g->nblocks; i++)
		if (g->blocks[i].len > maxlen)
			maxlen = g->blocks[i].len;
	planes = malloc(maxlen);
	back = malloc(maxlen);
	out = malloc(ZSTD_compressBound(maxlen));
	if (!cc || !dc || !planes || !back || !out)
		ret = -ENOMEM;
	*res = (struct result){ .level = level, .shuffle_bytes = width };
	for (int pass = 0; ret == 0 && pass < PASSES_MAX && (pass == 0 || spent < PASS_MIN_NS);
	     pass++) {
		uint64_t c_ns = 0, d_ns = 0, stored = 0;

		for (unsigned i = 0; ret == 0 && i < g->nblocks; i++) {
			const struct block *b = &g->blocks[i];
			const void *src = b->data;
			uint64_t t0 = cpu_ns(), t1, t2;
			size_t n, m;

			if (width > 1) {
				kv_archive_shuffle(planes, b->data, b->len, width);
				src = planes;
			}
			n = ZSTD_compressCCtx(cc, out, ZSTD_compressBound(b->len), src, b->len,
					      level);
			t1 = cpu_ns();
			m = ZSTD_isError(n) ? n : ZSTD_decompressDCtx(dc, planes, b->len, out, n);
			if (!ZSTD_isError(m) && width > 1)
				kv_archive_unshuffle(back, planes, b->len, width);
			t2 = cpu_ns();
			if (ZSTD_isError(n) || ZSTD_isError(m) || m != b->len ||
			    memcmp(width > 1 ? back : planes, b->data, b->len))
				ret = -EIO;
			c_ns += t1 - t0;
			d_ns += t2 - t1;
			stored += n;
		}
		spent += c_ns + d_ns;
		best_c = c_ns < best_c ? c_ns : best_c;
		best_d = d_ns < best_d ? d_ns : best_d;
		res->stored_bytes = stored;
	}
	if (ret == 0) {
		res->ratio = (double)g->bytes / (double)res->stored_bytes;
		res->compress_Bps = (double)g->bytes * 1e9 / (double)(best_c ? best_c : 1);
		res->decompress_Bps = (double)g->bytes * 1e9 / (double)(best_d ? best_d : 1);
	}
	free(planes);
	free(back);
	free(out);
	ZSTD_freeCCtx(cc);
	ZSTD_freeDCtx(dc);
	return ret;
}

/* Links slower than this, the setting beats raw transfer. */
static double pays_below(const struct result *r)
{
	return r->ratio > 1 ? fmin(r->compress_Bps, r->decompress_Bps) : 0;
}

/* Block bytes per second over a link of B with one core each side. */
static double effective(const struct result *r, double link_Bps)
{
	return fmin(fmin(r->compress_Bps, r->decompress_Bps), r->ratio * link_Bps);
}

/* The setting to judge by: the fastest transfer over the link, or
 * (no link) the one that pays on the fastest links. */
static const struct result *best_of(const struct group *g, double link_Bps)
{
	const struct result *best = &g->results[0];

	for (int i = 1; i < g->nresults; i++) {
		const struct result *r = &g->results[i];

		if (link_Bps > 0 ? effective(r, link_Bps) > effective(best, link_Bps) :
				   pays_below(r) > pays_below(best))
			best = r;
	}
	return best;
}

static const char *shuffle_name(unsigned width, char *buf, size_t len)
{
	if (width < 2)
		return "none";
	snprintf(buf, len, "%u-byte", width);
	return buf;
}

/* "no shuffle", "2-byte shuffle": for sentences. */
static const char *shuffle_phrase(unsigned width, char *buf, size_t len)
{
	if (width < 2)
		return "no shuffle";
	snprintf(buf, len, "%u-byte shuffle", width);
	return buf;
}

static json_t *result_json(const struct result *r)
{
	return json_pack("{s:i, s:i, s:I, s:f, s:I, s:I, s:I}", "level", r->level,
			 "shuffle_bytes", (int)r->shuffle_bytes,
			 "stored_bytes", (json_int_t)r->stored_bytes, "ratio", r->ratio,
			 "compress_Bps", (json_int_t)llround(r->compress_Bps),
			 "decompress_Bps", (json_int_t)llround(r->decompress_Bps),
			 "pays_below_Bps", (json_int_t)llround(pays_below(r)));
}

static json_t *group_json(const struct group *g, double link_Bps)
{
	const struct result *best = best_of(g, link_Bps);
	json_t *j = json_object(), *rs = json_array(), *b = result_json(best);

	for (int i = 0; i < g->nresults; i++)
		json_array_append_new(rs, result_json(&g->results[i]));
	json_object_set_new(j, "dtype", json_string(g->dtype));
	json_object_set_new(j, "elem_bytes", json_integer(g->width));
	json_object_set_new(j, "blocks", json_integer(g->nblocks));
	json_object_set_new(j, "bytes", json_integer((json_int_t)g->bytes));
	json_object_set_new(j, "results", rs);
	if (link_Bps > 0)
		json_object_set_new(b, "effective_Bps",
				    json_integer((json_int_t)llround(effective(best, link_Bps))));
	json_object_set_new(j, "best", b);
	json_object_set_new(j, "pays", link_Bps > 0 ?
			    json_boolean(effective(best, link_Bps) > link_Bps) : json_null());
	return j;
}

static void rate(double Bps, char *buf, size_t len)
{
	size_t n;

	kv_size_format((uint64_t)llround(Bps), buf, len - 2);
	n = strlen(buf);
	memcpy(buf + n, "/s", 3);
}

static void verdict_text(const struct group *g, const struct probe_opts *o)
{
	const struct result *b = best_of(g, o->link_Bps);
	char sh[32], link[32], eff[32], below[32];
	double e;

	rate(pays_below(b), below, sizeof(below));
	if (!(o->link_Bps > 0)) {
		if (pays_below(b) > 0)
			printf("compression pays only on links slower than %s (level %d, %s, "
			       "%.2fx); give --read-bandwidth or --from-run for a verdict\n",
			       below, b->level, shuffle_phrase(b->shuffle_bytes, sh, sizeof(sh)),
			       b->ratio);
		else
			printf("compression does not pay on any link: these blocks do not "
			       "compress\n");
		return;
	}
	e = effective(b, o->link_Bps);
	rate(o->link_Bps, link, sizeof(link));
	rate(e, eff, sizeof(eff));
	if (e > o->link_Bps)
		printf("compression pays at %s (%s): level %d with %s moves %s of "
		       "blocks, %.2fx the raw link, with one core on each side\n", link,
		       o->link_from, b->level, shuffle_phrase(b->shuffle_bytes, sh, sizeof(sh)), eff,
		       e / o->link_Bps);
	else if (b->ratio <= 1)
		printf("compression does not pay at %s (%s): these blocks do not compress\n",
		       link, o->link_from);
	else
		printf("compression does not pay at %s (%s): the best setting, level %d with "
		       "%s, moves %s of blocks with one core on each side, %.2fx the "
		       "raw link; it pays only below %s, or with %.0f cores on each side\n",
		       link, o->link_from, b->level, shuffle_phrase(b->shuffle_bytes, sh, sizeof(sh)),
		       eff, e / o->link_Bps, below,
		       ceil(b->ratio * o->link_Bps / pays_below(b)));
}

static void report_text(const struct probe *p)
{
	const struct probe_opts *o = p->o;

	for (int i = 0; i < p->ngroups; i++) {
		const struct group *g = &p->groups[i];
		char size[32], sh[16], c[32], d[32];

		if (!g->nblocks)
			continue;
		kv_size_format(g->bytes, size, sizeof(size));
		printf("%s%s: %u %s, %s, from %s\n", i ? "\n" : "", g->dtype, g->nblocks,
		       tool_plural(g->nblocks, "block", "blocks"), size,
		       o->root ? o->root : "the files given");
		printf("%6s  %-8s %7s %15s %17s\n", "level", "shuffle", "ratio", "compress/core",
		       "decompress/core");
		for (int k = 0; k < g->nresults; k++) {
			const struct result *r = &g->results[k];

			rate(r->compress_Bps, c, sizeof(c));
			rate(r->decompress_Bps, d, sizeof(d));
			printf("%6d  %-8s %6.2fx %15s %17s\n", r->level,
			       shuffle_name(r->shuffle_bytes, sh, sizeof(sh)), r->ratio, c, d);
		}
		verdict_text(g, o);
	}
}

int probe_main(const struct probe_opts *o)
{
	struct probe p = { .o = o, .rootfd = -1, .rng = o->seed * 0x9e3779b97f4a7c15ull + 1 };
	int ret = o->root ? sample_root(&p) : sample_files(&p), any = 0, rc = 0;

	for (int i = 0; ret == 0 && i < p.ngroups; i++) {
		struct group *g = &p.groups[i];

		any |= g->nblocks > 0;
		for (int l = 0; ret == 0 && g->nblocks && l < o->nlevels; l++)
			for (unsigned w = 1; ret == 0 && w <= g->width; w = w < g->width ? g->width : w + 1)
				ret = measure(g, o->levels[l], w, &g->results[g->nresults++]);
	}
	if (ret < 0) {
		if (ret != -1)
			tool_err("probe failed: %s", kv_strerror(ret));
		rc = EXIT_RUNTIME;
	} else if (!any) {
		tool_err("no blocks to probe in '%s'", o->root ? o->root : "the files given");
		rc = EXIT_ANSWER_NO;
	} else if (o->json) {
		json_t *j = json_object(), *gs = json_array();

		for (int i = 0; i < p.ngroups; i++)
			if (p.groups[i].nblocks)
				json_array_append_new(gs, group_json(&p.groups[i], o->link_Bps));
		json_object_set_new(j, "version", json_integer(KVBENCH_JSON_VERSION));
		json_object_set_new(j, "dtypes", gs);
		json_object_set_new(j, "link_Bps", o->link_Bps > 0 ?
				    json_integer((json_int_t)llround(o->link_Bps)) : json_null());
		tool_json_print(j);
	} else {
		report_text(&p);
	}
	for (int i = 0; i < p.ngroups; i++) {
		struct group *g = &p.groups[i];

		for (unsigned k = 0; k < g->nkeys; k++)
			free(g->keys[k]);
		free(g->keys);
		for (unsigned k = 0; k < g->nblocks; k++)
			o->root ? kv_io_buf_free(g->blocks[k].data) : free(g->blocks[k].data);
		free(g->blocks);
	}
	return rc;
}
