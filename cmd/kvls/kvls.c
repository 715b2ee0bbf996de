/*
 * kvls: list the model dirs and blocks of a cache root, or check it.
 *
 * One walk of the root (kv_walk) feeds every mode.  Block records are
 * formatted by hand straight into stdio's buffer: jansson per record
 * would cost more than the walk itself on a large tree.  The model table
 * is small and goes through jansson.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <limits.h>
#include <unistd.h>
#include <wchar.h>
#include <wctype.h>
#include <locale.h>
#include "../tool.h"
#include "../tool_record.h"

#define ORPHANS_AFTER_NS	(3600ULL * 1000000000ULL)

/* Why a walk callback stopped the walk (kv_walk passes it back). */
enum { STOP_WRITE = 1, STOP_NOMEM };

enum mode { MODE_MODELS, MODE_BLOCKS, MODE_CHECK };
enum out { OUT_TABLE, OUT_JSON, OUT_NDJSON };
/* --sort: none is walk order, as the blocks are found. */
enum sort { SORT_NONE, SORT_LAST_USE, SORT_SIZE, SORT_PATH };

struct model {
	char model_dir[KV_NAME_MAX + 1];
	char fingerprint[KV_FINGERPRINT_LEN + 1];
	char *name;		/* model_name from config.json */
	char *dtype;
	const char *schema;	/* "llm-d", "vllm", "llmd-v0"; NULL: unknown */
	enum kv_layout_kind layout;
	int64_t tp, pp, pcp, dcp;	/* -1: unknown */
	int has_config;		/* a config.json that parsed */
	int has_config_file;	/* a config.json, parsed or not */
	int has_dir;		/* some entry seen inside the model dir */
	unsigned *ranks;	/* distinct, sorted */
	size_t nranks;
	uint64_t files, size_bytes, alloc_bytes;
	int64_t oldest_ns, newest_ns;
};

struct ls {
	enum mode mode;
	enum out out;
	int check;		/* --check: report layout problems */
	int verify;		/* --verify: check checksums */
	int64_t now_ns;
	int has_older, has_newer;
	int64_t older_cut_ns, newer_cut_ns;
	uint64_t orphans_after_ns;

	struct model *models;
	size_t nmodels, cap;
	size_t last;		/* index of the last model looked up */

	int opened;		/* the -J document's opening is out */
	uint64_t records;	/* block or problem records written */
	uint64_t blocks, problems, temps_in_flight;
	uint64_t verified, mismatched, unchecked;
	int no_xattrs;

	struct tool_progress progress;
	uint64_t seen;

	int write_errno;

	struct kv_events *events;	/* --announce */
	int rootfd;
	struct kv_tier *bucket;	/* an s3:// root: for --verify */
	struct kv_config *configs[TOOL_CONFIGS_MAX];	/* --config */
	unsigned nconfigs;
	int bucket_root;	/* the root is a bucket */

	/* --sort: every matching block, held until the listing ends. */
	enum sort sort;
	struct kv_tier_entry *held;
	size_t nheld, held_cap;
};

static void usage(void)
{
	printf("Usage: kvls [-J | --ndjson] [--blocks] [--root DIR] [--model MODEL] [--rank N]\n"
	       "            [--older-than DUR] [--newer-than DUR] [--threads N]\n"
	       "            [--sort last-use|size|path] [--config FILE]...\n"
	       "       kvls --check | --verify [-J | --ndjson] [--root DIR] [--model MODEL]\n"
	       "            [--rank N] [--older-than DUR] [--newer-than DUR]\n"
	       "            [--orphans-after DUR] [--threads N]\n"
	       "       kvls --daemon SOCK [-J | --ndjson] [--model MODEL] [--rank N]\n"
	       "            [--sort size|path]\n"
	       "       kvls --announce [--events ENDPOINT] [-J | --ndjson] [--root DIR]\n"
	       "            [--model MODEL] [--rank N] [--older-than DUR] [--newer-than DUR]\n"
	       "            [--config FILE]...\n"
	       "       kvls -h | -V\n"
	       "\n"
	       "List the model dirs of a KV-cache root, its blocks, or check it.\n"
	       "\n"
	       "  -b, --blocks            one record per block instead of a model table\n"
	       "      --sort KEY          list the blocks by KEY: last-use (least recently\n"
	       "                          used first, kvevict's order), size (largest\n"
	       "                          first) or path, not as the walk finds them;\n"
	       "                          every record is held until the walk ends\n"
	       "      --check             report fingerprint mismatches, rank dirs without\n"
	       "                          a model dir, orphaned temps, foreign files and\n"
	       "                          unreadable dirs; exit 1 if any\n"
	       "      --verify            check each block's xxh3 checksum; exit 1 on a\n"
	       "                          mismatch (combines with --check)\n"
	       "  -J, --json              one JSON document\n"
	       "      --ndjson            one JSON record per line\n"
	       "  -r, --root DIR          the cache root, or a bucket s3://BUCKET[/PREFIX]\n"
	       "                          (default $KV_ROOT)\n"
	       "  -m, --model MODEL       only this model dir, or every fingerprint of a model\n"
	       "      --rank N            only rank N\n"
	       "      --older-than DUR    only blocks last read more than DUR ago (7d, 90m)\n"
	       "      --newer-than DUR    only blocks read within DUR\n"
	       "      --orphans-after DUR temp files older than DUR are orphans (default 1h)\n"
	       "  -t, --threads N         walk with N threads, 1 to 64 (default: 64 on a\n"
	       "                          network filesystem, else CPUs, at most 8)\n"
	       "      --daemon SOCK       list the blocks in kvoffd's RAM tier at SOCK instead\n"
	       "      --announce          publish a BlockStored KV event for every block that\n"
	       "                          matches, so that llm-d's indexer learns a volume\n"
	       "                          it did not watch being filled; prints a summary\n"
	       "                          (with -J / --ndjson, the blocks announced); exit 3\n"
	       "                          if some could not be delivered\n"
	       "      --events ENDPOINT   where --announce publishes: tcp://HOST:PORT\n"
	       "                          (connect), tcp://*:PORT or ipc://PATH (bind);\n"
	       "                          default $KV_EVENTS\n"
	       "      --config FILE       the config.json of model dirs that hold none (a\n"
	       "                          bucket's): their row and event topic; repeatable\n"
	       "  -h, --help              show this help and exit\n"
	       "  -V, --version           show the version and exit\n"
	       "\n"
	       "Exit status: 0 listed / clean, 1 nothing matched / problems found,\n"
	       "2 usage error, 3 the root could not be read, 4 the daemon could not be\n"
	       "reached.\n");
	exit(0);
}

/* --- output ---------------------------------------------------------- */

/* stdout's buffer when it is not a terminal: large writes into a pipe. */
static char out_buf[1 << 18];

static int out_write(struct ls *ls, const char *buf, size_t len)
{
	if (ls->write_errno)
		return STOP_WRITE;
	if (fwrite_unlocked(buf, 1, len, stdout) != len) {
		ls->write_errno = errno ? errno : EIO;
		return STOP_WRITE;
	}
	return 0;
}

/* The head of a -J document, written before its first record so that a
 * root that cannot be opened leaves stdout empty. */
static int out_open(struct ls *ls)
{
	static const char *const heads[] = {
		[MODE_BLOCKS] = "{\"blocks\":[",
		[MODE_CHECK] = "{\"problems\":[",
	};

	if (ls->opened || ls->out != OUT_JSON || ls->mode == MODE_MODELS)
		return 0;
	ls->opened = 1;
	return out_write(ls, heads[ls->mode], strlen(heads[ls->mode]));
}

/* A lost stdout ends the program: quietly for a closed pipe, which is
 * what `kvls | head` does, with a message for anything else. */
static void out_fail(const struct ls *ls)
{
	if (ls->write_errno != EPIPE)
		tool_err("write error: %s", strerror(ls->write_errno));
	_exit(EXIT_RUNTIME);
}

/* Separator before a record: none for the first, ',' inside a -J array. */
static int out_record(struct ls *ls, const char *rec, size_t len)
{
	if (out_open(ls) || (ls->out == OUT_JSON && ls->records && out_write(ls, ",", 1)))
		return STOP_WRITE;
	ls->records++;
	return out_write(ls, rec, len);
}

/* --- progress -------------------------------------------------------- */

static void progress_tick(struct ls *ls)
{
	if (ls->progress.on && !(++ls->seen & 1023))
		tool_progress_show(&ls->progress, "%" PRIu64 " files scanned", ls->seen);
}

/* --- models ---------------------------------------------------------- */

static struct model *model_get(struct ls *ls, const struct kv_block_ref *ref)
{
	struct model *m;

	if (ls->nmodels && !strcmp(ls->models[ls->last].model_dir, ref->model_dir))
		return &ls->models[ls->last];
	for (size_t i = 0; i < ls->nmodels; i++) {
		if (!strcmp(ls->models[i].model_dir, ref->model_dir)) {
			ls->last = i;
			return &ls->models[i];
		}
	}
	if (ls->nmodels == ls->cap) {
		size_t cap = ls->cap ? ls->cap * 2 : 16;
		struct model *mm = realloc(ls->models, cap * sizeof(*mm));

		if (!mm)
			return NULL;
		ls->models = mm;
		ls->cap = cap;
	}
	m = &ls->models[ls->nmodels];
	memset(m, 0, sizeof(*m));
	snprintf(m->model_dir, sizeof(m->model_dir), "%s", ref->model_dir);
	snprintf(m->fingerprint, sizeof(m->fingerprint), "%s", ref->fingerprint);
	m->tp = m->pp = m->pcp = m->dcp = -1;
	m->layout = ref->layout;
	if (ref->layout == KV_LAYOUT_LLMD_V0) {
		struct kv_layout_v0 v0;

		/* No config.json: the dirs say it all. */
		if (kv_layout_v0_parse(ref->model_dir, &v0) == 0) {
			m->name = strdup(v0.model_name);
			m->tp = v0.tp;
			m->pp = v0.pp;
			m->pcp = v0.pcp;
		}
		if (ref->dtype[0])
			m->dtype = strdup(ref->dtype);
		m->schema = kv_layout_name(ref->layout);
	}
	m->oldest_ns = INT64_MAX;
	m->newest_ns = INT64_MIN;
	ls->last = ls->nmodels++;
	return m;
}

static int model_add_rank(struct model *m, unsigned rank)
{
	size_t i = 0;
	unsigned *r;

	while (i < m->nranks && m->ranks[i] < rank)
		i++;
	if (i < m->nranks && m->ranks[i] == rank)
		return 0;
	r = realloc(m->ranks, (m->nranks + 1) * sizeof(*r));
	if (!r)
		return -ENOMEM;
	memmove(r + i + 1, r + i, (m->nranks - i) * sizeof(*r));
	r[i] = rank;
	m->ranks = r;
	m->nranks++;
	return 0;
}

/* --- human table cells ------------------------------------------------ */

/*
 * Copy S into OUT for a table cell: UTF-8 printable characters as they
 * are, anything else (control characters, invalid bytes) as \xNN so a
 * hostile name can neither break the line-per-record output nor send
 * escape sequences to a terminal.  Returns the cell's width in terminal
 * columns (CJK and emoji are two), whatever the caller's locale; stops
 * before a character that would take it past limit columns.
 */
static int cell_copy(const char *s, char *out, size_t len, int limit)
{
	static locale_t utf8;
	size_t n = strlen(s), o = 0;
	mbstate_t st = { 0 };
	locale_t saved = (locale_t)0;
	int width = 0;

	if (!utf8)
		utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	if (utf8)
		saved = uselocale(utf8);
	while (n && o + 5 <= len) {
		wchar_t wc = (unsigned char)*s;
		size_t r = 1;
		int w = isprint((unsigned char)*s) ? 1 : -1;

		if (utf8) {
			r = mbrtowc(&wc, s, n, &st);
			w = r <= n && iswprint((wint_t)wc) ? wcwidth(wc) : -1;
		}
		if (width + (w < 0 ? 4 : w) > limit)
			break;
		if (w < 0) {
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", (unsigned char)*s);
			memset(&st, 0, sizeof(st));
			width += 4;
			s++, n--;
			continue;
		}
		if (o + r >= len)
			break;
		memcpy(out + o, s, r);
		o += r, s += r, n -= r;
		width += w;
	}
	out[o] = '\0';
	if (utf8)
		uselocale(saved);
	return width;
}

static int table_cell(const char *s, char *out, size_t len)
{
	return cell_copy(s, out, len, INT_MAX);
}

/* A cell of at most max columns: one that is wider is cut, its last
 * column an ellipsis, so one long model name cannot push the table off
 * the terminal. */
static int table_cell_fit(const char *s, char *out, size_t len, int max)
{
	int width = cell_copy(s, out, len, INT_MAX);

	if (width <= max)
		return width;
	width = cell_copy(s, out, len - 3, max - 1);
	strcat(out, "\u2026");
	return width + 1;
}

/* Print CELL left-aligned in WIDTH columns, then SEP. */
static void table_pad(const char *cell, int cell_width, int width, const char *sep)
{
	printf("%s%*s%s", cell, width > cell_width ? width - cell_width : 0, "", sep);
}

/* The model part of a model dir name: "<safe_model>" without "_<d12>". */
static void safe_model_of(const struct model *m, char *buf, size_t len)
{
	size_t n = strlen(m->model_dir);

	n = n > KV_FINGERPRINT_LEN + 1 ? n - KV_FINGERPRINT_LEN - 1 : n;
	snprintf(buf, len, "%.*s", (int)n, m->model_dir);
}

static int cmp_model(const void *a, const void *b)
{
	return strcmp(((const struct model *)a)->model_dir,
		      ((const struct model *)b)->model_dir);
}

static void models_free(struct ls *ls)
{
	for (size_t i = 0; i < ls->nmodels; i++) {
		free(ls->models[i].name);
		free(ls->models[i].dtype);
		free(ls->models[i].ranks);
	}
	free(ls->models);
	for (unsigned c = 0; c < ls->nconfigs; c++)
		kv_config_free(ls->configs[c]);
	ls->nconfigs = 0;
}

/* Whether a model has anything to show under the filters in force. */
static int model_listed(const struct ls *ls, const struct model *m)
{
	return m->files || (!ls->has_older && !ls->has_newer);
}

static json_t *model_json(const struct model *m)
{
	char safe[KV_NAME_MAX + 1];
	json_t *ranks = json_array();

	for (size_t i = 0; i < m->nranks; i++)
		json_array_append_new(ranks, json_integer(m->ranks[i]));
	safe_model_of(m, safe, sizeof(safe));
	return json_pack("{s:s, s:s, s:s, s:b, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:o, s:o}",
			 "model", m->name ? m->name : safe,
			 "model_dir", m->model_dir,
			 "fingerprint", m->fingerprint,
			 "config", m->has_config,
			 "dtype", m->dtype ? json_string(m->dtype) : json_null(),
			 "layout", kv_layout_name(m->layout),
			 "schema", m->schema ? json_string(m->schema) : json_null(),
			 "tp", m->tp >= 0 ? json_integer(m->tp) : json_null(),
			 "pp", m->pp >= 0 ? json_integer(m->pp) : json_null(),
			 "pcp", m->pcp >= 0 ? json_integer(m->pcp) : json_null(),
			 "dcp", m->dcp >= 0 ? json_integer(m->dcp) : json_null(),
			 "ranks", ranks,
			 "files", (json_int_t)m->files,
			 "size_bytes", (json_int_t)m->size_bytes,
			 "alloc_bytes", (json_int_t)m->alloc_bytes,
			 "oldest_atime_ns", m->files ? json_integer(m->oldest_ns) : json_null(),
			 "newest_atime_ns", m->files ? json_integer(m->newest_ns) : json_null());
}

/* On a terminal a model name takes at most this many columns; into a
 * pipe or a file it is whole. */
#define MODEL_COLUMNS_MAX	48

static void models_table(struct ls *ls)
{
	int model_max = isatty(STDOUT_FILENO) ? MODEL_COLUMNS_MAX : INT_MAX;
	int wmodel = 5, wdtype = 5;
	char safe[KV_NAME_MAX + 1], cell[4 * KV_NAME_MAX + 8];

	for (size_t i = 0; i < ls->nmodels; i++) {
		const struct model *m = &ls->models[i];
		int n;

		if (!model_listed(ls, m))
			continue;
		safe_model_of(m, safe, sizeof(safe));
		n = table_cell_fit(m->name ? m->name : safe, cell, sizeof(cell), model_max);
		wmodel = n > wmodel ? n : wmodel;
		n = table_cell(m->dtype ? m->dtype : "-", cell, sizeof(cell));
		wdtype = n > wdtype ? n : wdtype;
	}
	printf("%-*s  %-12s  %-*s  %-7s  %3s  %5s  %8s  %6s  %-20s  %s\n", wmodel, "MODEL",
	       "FINGERPRINT", wdtype, "DTYPE", "SCHEMA", "TP", "RANKS", "FILES", "SIZE",
	       "OLDEST", "NEWEST");
	for (size_t i = 0; i < ls->nmodels; i++) {
		const struct model *m = &ls->models[i];
		char size[16], oldest[32] = "-", newest[32] = "-", tp[24] = "-";
		int n;

		if (!model_listed(ls, m))
			continue;
		safe_model_of(m, safe, sizeof(safe));
		kv_size_format(m->size_bytes, size, sizeof(size));
		if (m->files) {
			kv_time_format(m->oldest_ns, oldest, sizeof(oldest));
			kv_time_format(m->newest_ns, newest, sizeof(newest));
		}
		if (m->tp >= 0)
			snprintf(tp, sizeof(tp), "%" PRId64, m->tp);
		n = table_cell_fit(m->name ? m->name : safe, cell, sizeof(cell), model_max);
		table_pad(cell, n, wmodel, "  ");
		printf("%-12s  ", m->fingerprint[0] ? m->fingerprint : "-");
		n = table_cell(m->dtype ? m->dtype : "-", cell, sizeof(cell));
		table_pad(cell, n, wdtype, "  ");
		printf("%-7s  ", m->schema ? m->schema : "-");
		printf("%3s  %5zu  %8" PRIu64 "  %6s  %-20s  %s\n", tp, m->nranks,
		       m->files, size, oldest, newest);
	}
}

static size_t models_print(struct ls *ls)
{
	json_t *all = json_array();
	size_t listed = 0;

	if (ls->nmodels)
		qsort(ls->models, ls->nmodels, sizeof(*ls->models), cmp_model);
	for (size_t i = 0; i < ls->nmodels; i++)
		listed += model_listed(ls, &ls->models[i]) ? 1 : 0;
	if (ls->out == OUT_TABLE) {
		if (listed)
			models_table(ls);
		json_decref(all);
		return listed;
	}
	for (size_t i = 0; i < ls->nmodels; i++) {
		if (!model_listed(ls, &ls->models[i]))
			continue;
		if (ls->out == OUT_NDJSON)
			tool_json_print(model_json(&ls->models[i]));
		else
			json_array_append_new(all, model_json(&ls->models[i]));
	}
	if (ls->out == OUT_JSON)
		tool_json_print(json_pack("{s:o}", "models", all));
	else
		json_decref(all);
	return listed;
}

/* --- per-entry work -------------------------------------------------- */

/* --older-than and --newer-than, by last use (kv/lastuse.h). */
static int block_matches(const struct ls *ls, int64_t last_use_ns)
{
	if (ls->has_older && last_use_ns >= ls->older_cut_ns)
		return 0;
	if (ls->has_newer && last_use_ns < ls->newer_cut_ns)
		return 0;
	return 1;
}

/* One block: a table row (a file's times, or the daemon's pins) or a record. */
static int block_record(struct ls *ls, const struct kv_tier_entry *e)
{
	char rec[TOOL_RECORD_MAX], *p = rec, size[16], cell[TOOL_RECORD_MAX / 2];
	int n;

	if (ls->out != OUT_TABLE) {
		p = tool_record_format(rec, e);
		if (ls->out == OUT_NDJSON)
			*p++ = '\n';
		return out_record(ls, rec, (size_t)(p - rec));
	}
	kv_size_format(e->size_bytes, size, sizeof(size));
	table_cell(e->key, cell, sizeof(cell));
	if (e->fields & KV_TIER_ENTRY_RAM) {
		if (!ls->records) {
			n = snprintf(rec, sizeof(rec), "%6s  %4s  %4s  %4s  %5s  %s\n",
				     "SIZE", "PINS", "DISK", "RANK", "GROUP", "PATH");
			if (out_write(ls, rec, (size_t)n))
				return STOP_WRITE;
		}
		n = snprintf(rec, sizeof(rec), "%6s  %4u  %4s  %4u  %5u  %s\n", size, e->pins,
			     e->on_disk ? "yes" : "no", e->ref.rank, e->ref.group, cell);
	} else {
		char lu[32], at[32], mt[32], alloc[16];

		kv_time_format(e->last_use_ns, lu, sizeof(lu));
		kv_time_format(e->atime_ns, at, sizeof(at));
		kv_time_format(e->mtime_ns, mt, sizeof(mt));
		kv_size_format(e->alloc_bytes, alloc, sizeof(alloc));
		if (!ls->records) {
			n = snprintf(rec, sizeof(rec),
				     "%-20s  %-20s  %-20s  %6s  %6s  %4s  %5s  %s\n",
				     "LAST USE", "ATIME", "MTIME", "SIZE", "ALLOC", "RANK",
				     "GROUP", "PATH");
			if (out_write(ls, rec, (size_t)n))
				return STOP_WRITE;
		}
		n = snprintf(rec, sizeof(rec), "%-20s  %-20s  %-20s  %6s  %6s  %4u  %5u  %s\n",
			     lu, at, mt, size, alloc, e->ref.rank, e->ref.group, cell);
	}
	ls->records++;
	return out_write(ls, rec, (size_t)n);
}

static int problem(struct ls *ls, const char *kind, const char *path,
		   const char *detail)
{
	char rec[TOOL_RECORD_MAX], *p = rec;

	ls->problems++;
	/* Escaping may grow text sixfold: drop a detail that would not fit. */
	if (6 * (strlen(path) + strlen(detail) + strlen(kind)) + 64 > TOOL_RECORD_MAX)
		detail = "";
	if (ls->out == OUT_TABLE) {
		char cpath[TOOL_RECORD_MAX / 2], cdetail[TOOL_RECORD_MAX / 4];
		int n;

		table_cell(path, cpath, sizeof(cpath));
		table_cell(detail, cdetail, sizeof(cdetail));
		n = snprintf(rec, sizeof(rec), "%-12s  %s%s%s\n", kind, cpath,
			     *detail ? "  " : "", cdetail);

		ls->records++;
		return out_write(ls, rec, (size_t)n < sizeof(rec) ? (size_t)n : sizeof(rec) - 1);
	}
	p = tool_json_str(stpcpy(p, "{\"detail\":"), detail);
	p = tool_json_str(stpcpy(p, ",\"path\":"), path);
	p = tool_json_str(stpcpy(p, ",\"problem\":"), kind);
	*p++ = '}';
	if (ls->out == OUT_NDJSON)
		*p++ = '\n';
	return out_record(ls, rec, (size_t)(p - rec));
}

static const char *type_name(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return "file with a name outside the layout";
	case S_IFDIR: return "directory outside the layout, not descended";
	case S_IFLNK: return "symlink, not followed";
	case 0: return "symlink or mount point, not followed";
	default: return "special file";
	}
}

/* The tree may change under the walk (a FIFO or a symlink swapped in
 * after its stat): read it again beneath the root, no link followed, a
 * regular file or nothing, never blocking. */
static int load_config(struct ls *ls, const struct kv_walk_entry *e, struct kv_config **cfg)
{
	char model_dir[KV_NAME_MAX + 1];
	const char *slash = strrchr(e->path, '/');
	size_t len;
	char *text;
	int rc;

	if (!slash || (size_t)(slash - e->path) >= sizeof(model_dir))
		return -KV_EBADPATH;
	memcpy(model_dir, e->path, (size_t)(slash - e->path));
	model_dir[slash - e->path] = '\0';
	rc = kv_config_read(ls->rootfd, model_dir, &text, &len);
	if (rc < 0)
		return rc;
	rc = kv_config_parse(text, len, cfg);
	free(text);
	return rc;
}

/* What a model's row takes from its config. */
static void model_fill(struct model *m, const struct kv_config *cfg)
{
	const char *s;

	m->has_config = 1;
	m->schema = kv_config_schema_name(cfg);
	if ((s = kv_config_string(cfg, "model_name")) && !m->name)
		m->name = strdup(s);
	if ((s = kv_config_string(cfg, "dtype")) && !m->dtype)
		m->dtype = strdup(s);
	kv_config_int(cfg, "tp_size", &m->tp);
	kv_config_int(cfg, "pp_size", &m->pp);
	kv_config_int(cfg, "pcp_size", &m->pcp);
	kv_config_int(cfg, "dcp_size", &m->dcp);
}

/* --config: model dirs that hold no config.json (a bucket's: vLLM writes
 * none there) take their row from the one given for them. */
static void fill_from_configs(struct ls *ls)
{
	char dir[KV_NAME_MAX + 1];

	for (size_t i = 0; i < ls->nmodels; i++) {
		struct model *m = &ls->models[i];

		for (unsigned c = 0; c < ls->nconfigs && !m->has_config; c++)
			if (kv_config_model_dir(ls->configs[c], dir, sizeof(dir)) == 0 &&
			    !strcmp(dir, m->model_dir))
				model_fill(m, ls->configs[c]);
	}
}

static int on_config(struct ls *ls, const struct kv_walk_entry *e)
{
	struct kv_config *cfg;
	struct model *m = model_get(ls, &e->ref);
	char want[KV_NAME_MAX + 1], detail[KV_NAME_MAX + 64];
	int rc;

	if (!m)
		return STOP_NOMEM;
	m->has_dir = 1;
	m->has_config_file = 1;
	rc = load_config(ls, e, &cfg);
	if (rc < 0) {
		if (ls->check)
			return problem(ls, "bad-config", e->path,
				       rc == -KV_EBADCONFIG && *kv_error_detail() ?
				       kv_error_detail() : kv_strerror(rc));
		tool_err("cannot read '%s': %s", e->path, kv_strerror(rc));
		return 0;
	}
	model_fill(m, cfg);
	rc = 0;
	if (ls->check && kv_config_model_dir(cfg, want, sizeof(want)) == 0 &&
	    strcmp(want, e->ref.model_dir)) {
		snprintf(detail, sizeof(detail), "config.json belongs in '%s'", want);
		rc = problem(ls, "fingerprint", e->ref.model_dir, detail);
	}
	kv_config_free(cfg);
	return rc;
}

/* Open a block for reading without disturbing its atime where we may. */
static int open_noatime(const struct kv_walk_entry *e)
{
	int fd = openat(e->dirfd, e->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);

	if (fd < 0 && errno == EPERM)
		fd = openat(e->dirfd, e->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int verify_block(struct ls *ls, const struct kv_walk_entry *e)
{
	int fd, rc;

	if (ls->bucket) {
		/* An object: the checksum is in its metadata, where kept; one
		 * not the size it was listed at is not read. */
		rc = kv_tier_verify_size(ls->bucket, e->path, e->size_bytes);
		if (rc == -ENOENT)
			return 0;
	} else {
		fd = open_noatime(e);
		if (fd == -ENOENT)
			return 0;
		if (fd < 0)
			return problem(ls, "unreadable", e->path, kv_strerror(fd));
		rc = kv_integrity_verify_fd(fd);
		close(fd);
	}
	switch (rc) {
	case 0:
		ls->verified++;
		return 0;
	case -ENODATA:
		ls->unchecked++;
		return 0;
	case -ENOTSUP:
		ls->unchecked++;
		ls->no_xattrs = 1;
		return 0;
	case -KV_ECHECKSUM:
		ls->mismatched++;
		return problem(ls, "checksum", e->path, kv_error_detail());
	default:
		/* A bucket says why: the object changed, the server... */
		return problem(ls, "unreadable", e->path, ls->bucket && *kv_error_detail() ?
			       kv_error_detail() : kv_strerror(rc));
	}
}

static int on_block(struct ls *ls, const struct kv_walk_entry *e)
{
	struct model *m = model_get(ls, &e->ref);

	/* Every rank dir counts for the table and for --check, whatever
	 * the time filters leave of its blocks. */
	if (!m || model_add_rank(m, e->ref.rank) < 0)
		return STOP_NOMEM;
	if (!block_matches(ls, e->last_use_ns))
		return 0;
	ls->blocks++;
	if (ls->mode == MODE_CHECK)
		return ls->verify ? verify_block(ls, e) : 0;
	m->files++;
	m->size_bytes += e->size_bytes;
	m->alloc_bytes += e->alloc_bytes;
	if (e->atime_ns < m->oldest_ns)
		m->oldest_ns = e->atime_ns;
	if (e->atime_ns > m->newest_ns)
		m->newest_ns = e->atime_ns;
	return 0;
}

static int on_entry(const struct kv_walk_entry *e, void *arg)
{
	struct ls *ls = arg;
	struct model *m;
	char detail[128];
	int rc = 0;

	progress_tick(ls);
	/* Note every model and rank dir, for the table and for rank dirs
	 * whose model dir is missing. */
	if (e->ref.model_dir[0] && e->kind != KV_WALK_BLOCK) {
		if (!(m = model_get(ls, &e->ref)))
			return STOP_NOMEM;
		if (e->has_rank)
			rc = model_add_rank(m, e->ref.rank);
		else
			m->has_dir = 1;
		if (rc)
			return STOP_NOMEM;
	}
	switch (e->kind) {
	case KV_WALK_BLOCK:
		return on_block(ls, e);
	case KV_WALK_CONFIG:
		return on_config(ls, e);
	case KV_WALK_TEMP:
		if (!ls->check)
			return 0;
		if (e->mtime_ns > ls->now_ns - (int64_t)ls->orphans_after_ns) {
			ls->temps_in_flight++;
			return 0;
		}
		snprintf(detail, sizeof(detail), "temp file untouched for %" PRId64 "s",
			 (int64_t)((ls->now_ns - e->mtime_ns) / 1000000000LL));
		return problem(ls, "orphan-temp", e->path, detail);
	case KV_WALK_FOREIGN:
		/* kvevict's lock file and shard state dir, and kvoffd's claim
		 * on a tier it bounds, are ours, not foreign. */
		if ((S_ISREG(e->mode) && (!strcmp(e->path, KV_EVICT_LOCK_NAME) ||
					  !strcmp(e->path, TOOL_OFFD_LOCK))) ||
		    (S_ISDIR(e->mode) && !strcmp(e->path, KV_EVICT_STATE_DIR)))
			return 0;
		return ls->check ? problem(ls, "foreign", e->path, type_name(e->mode)) : 0;
	case KV_WALK_ERROR:
		if (ls->mode == MODE_CHECK)
			return problem(ls, "unreadable", e->path, kv_strerror(e->err));
		tool_err("cannot read '%s': %s", e->path, kv_strerror(e->err));
		return 0;
	case KV_WALK_DIR:
		return 0;
	}
	return 0;
}

/* Rank dirs whose model dir has no config.json, found once the walk is
 * done. */
static int check_models(struct ls *ls)
{
	char path[KV_NAME_MAX + 32];

	if (ls->nmodels)
		qsort(ls->models, ls->nmodels, sizeof(*ls->models), cmp_model);
	for (size_t i = 0; i < ls->nmodels; i++) {
		const struct model *m = &ls->models[i];

		/* llmd-v0 trees never had a config.json, nor have buckets
		 * (vLLM's obj tier writes none). */
		if (m->has_config_file || m->layout == KV_LAYOUT_LLMD_V0 || ls->bucket_root)
			continue;
		if (m->has_dir && problem(ls, "no-config", m->model_dir,
					  "model dir without config.json"))
			return STOP_WRITE;
		for (size_t r = 0; r < m->nranks; r++) {
			snprintf(path, sizeof(path), "%s_r%u", m->model_dir, m->ranks[r]);
			if (problem(ls, "orphan-rank", path,
				    "rank dir without a model dir holding config.json"))
				return STOP_WRITE;
		}
	}
	return 0;
}

static void check_summary(struct ls *ls)
{
	json_t *sum;

	if (ls->verify && ls->no_xattrs)
		tool_err("note: the filesystem has no user xattrs; checksums cannot be verified");
	if (ls->out == OUT_NDJSON)
		return;
	if (ls->out == OUT_TABLE) {
		if (!ls->verify) {
			printf("%" PRIu64 " %s\n", ls->problems,
			       tool_plural(ls->problems, "problem", "problems"));
			return;
		}
		printf("%" PRIu64 " %s; %" PRIu64 " %s: %" PRIu64
		       " verified, %" PRIu64 " mismatched, %" PRIu64 " without checksum%s\n",
		       ls->problems, tool_plural(ls->problems, "problem", "problems"), ls->blocks,
		       tool_plural(ls->blocks, "block", "blocks"),
		       ls->verified, ls->mismatched, ls->unchecked,
		       ls->no_xattrs ? " (no user xattrs on this filesystem)" : "");
		return;
	}
	sum = json_pack("{s:I, s:I, s:I}", "blocks", (json_int_t)ls->blocks,
			"problems", (json_int_t)ls->problems,
			"temps_in_flight", (json_int_t)ls->temps_in_flight);
	if (ls->verify) {
		json_object_set_new(sum, "verified", json_integer((json_int_t)ls->verified));
		json_object_set_new(sum, "mismatched", json_integer((json_int_t)ls->mismatched));
		json_object_set_new(sum, "unchecked", json_integer((json_int_t)ls->unchecked));
		json_object_set_new(sum, "xattrs", json_boolean(!ls->no_xattrs));
	}
	out_open(ls);
	fputs("],\"summary\":", stdout);
	json_dumpf(sum, stdout, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII);
	fputs("}\n", stdout);
	json_decref(sum);
}

/* --- blocks ---------------------------------------------------------- */

/* --sort: keep a copy of e, its key too; STOP_NOMEM when memory ends. */
static int hold_entry(struct ls *ls, const struct kv_tier_entry *e)
{
	struct kv_tier_entry *h;

	if (ls->nheld == ls->held_cap) {
		size_t cap = ls->held_cap ? 2 * ls->held_cap : 4096;

		h = realloc(ls->held, cap * sizeof(*h));
		if (!h)
			return STOP_NOMEM;
		ls->held = h;
		ls->held_cap = cap;
	}
	h = &ls->held[ls->nheld];
	*h = *e;
	h->key = strdup(e->key);
	if (!h->key)
		return STOP_NOMEM;
	ls->nheld++;
	return 0;
}

static int cmp_last_use(const void *a, const void *b)
{
	const struct kv_tier_entry *x = a, *y = b;

	if (x->last_use_ns != y->last_use_ns)
		return x->last_use_ns < y->last_use_ns ? -1 : 1;
	return strcmp(x->key, y->key);
}

static int cmp_size(const void *a, const void *b)
{
	const struct kv_tier_entry *x = a, *y = b;

	if (x->size_bytes != y->size_bytes)
		return x->size_bytes > y->size_bytes ? -1 : 1;
	return strcmp(x->key, y->key);
}

static int cmp_path(const void *a, const void *b)
{
	const struct kv_tier_entry *x = a, *y = b;

	return strcmp(x->key, y->key);
}

/* --sort: the held blocks, in order. */
static int held_print(struct ls *ls)
{
	static int (*const cmp[])(const void *, const void *) = {
		[SORT_LAST_USE] = cmp_last_use, [SORT_SIZE] = cmp_size, [SORT_PATH] = cmp_path,
	};
	int rc = 0;

	if (ls->nheld)
		qsort(ls->held, ls->nheld, sizeof(*ls->held), cmp[ls->sort]);
	for (size_t i = 0; i < ls->nheld && !rc; i++)
		rc = block_record(ls, &ls->held[i]);
	return rc;
}

static void held_free(struct ls *ls)
{
	for (size_t i = 0; i < ls->nheld; i++)
		free((char *)ls->held[i].key);
	free(ls->held);
	ls->held = NULL;
	ls->nheld = ls->held_cap = 0;
}

static int on_listed(const struct kv_tier_entry *e, void *arg)
{
	struct ls *ls = arg;

	progress_tick(ls);
	if (e->err) {
		tool_err("cannot read '%s': %s", e->key, kv_strerror(e->err));
		return 0;
	}
	if (!block_matches(ls, e->fields & KV_TIER_ENTRY_FILE ? e->last_use_ns : e->atime_ns))
		return 0;
	ls->blocks++;
	if (ls->events) {
		kv_events_publish_block(ls->events, KV_EVENT_BLOCK_STORED,
					KV_EVENTS_SHARED_STORAGE, ls->rootfd, &e->ref);
		if (ls->out == OUT_TABLE)
			return 0;
	}
	return ls->sort ? hold_entry(ls, e) : block_record(ls, e);
}

/* --announce: flush what is queued, then say what reached the subscriber. */
static int announce_done(struct ls *ls)
{
	struct kv_events_stats st;
	int undelivered;

	kv_events_close(ls->events, &st);
	ls->events = NULL;
	close(ls->rootfd);
	undelivered = st.hashes_dropped || st.messages_dropped || st.unnamed;
	if (st.unnamed)
		tool_err("%llu %s in model dirs whose config.json names no model a "
			 "topic can carry %s not announced", (unsigned long long)st.unnamed,
			 tool_plural(st.unnamed, "block", "blocks"),
			 tool_plural(st.unnamed, "was", "were"));
	if (st.hashes_dropped)
		tool_err("%llu of %llu %s %s not delivered (no subscriber, or one "
			 "too slow)", (unsigned long long)st.hashes_dropped,
			 (unsigned long long)ls->blocks, tool_plural(ls->blocks, "block", "blocks"),
			 tool_plural(st.hashes_dropped, "was", "were"));
	if (ls->out == OUT_TABLE)
		printf("kvls: announced %llu %s in %llu %s\n",
		       (unsigned long long)st.hashes_sent,
		       tool_plural(st.hashes_sent, "block", "blocks"),
		       (unsigned long long)st.messages_sent,
		       tool_plural(st.messages_sent, "message", "messages"));
	if (undelivered)
		return EXIT_RUNTIME;
	return ls->blocks ? 0 : EXIT_ANSWER_NO;
}

/* --blocks: the blocks of the file tier, or of kvoffd's RAM tier. */
static int list_blocks(struct ls *ls, const char *daemon, const char *root,
		       const struct kv_walk_opts *wopts)
{
	const struct kv_tier_list_opts o = { .model = wopts->model, .rank = wopts->rank,
					     .threads = wopts->threads };
	struct tool_store st;
	int rc;

	tool_store_open(&st, daemon, root, NULL);
	rc = kv_tier_list(st.tier, &o, on_listed, ls);
	tool_progress_done(&ls->progress);
	if (rc == 0 && ls->sort)
		rc = held_print(ls);
	if (rc == STOP_WRITE)
		out_fail(ls);
	if (rc == STOP_NOMEM)
		tool_err("out of memory holding %zu blocks for --sort: list without it, or "
			 "fewer (--model, --rank)", ls->nheld);
	held_free(ls);
	if (rc == STOP_NOMEM) {
		tool_store_close(&st);
		return EXIT_RUNTIME;
	}
	if (rc < 0 && daemon)
		tool_err("cannot list the daemon at '%s': %s", daemon, kv_strerror(rc));
	else if (rc < 0)
		tool_root_err("open", root, rc);
	if (rc == 0 && ls->out == OUT_JSON && !out_open(ls))
		fputs("]}\n", stdout);
	if (ls->write_errno)
		out_fail(ls);
	tool_store_close(&st);
	if (rc < 0)
		return tool_store_exit(&st, rc);
	if (ls->events)
		return announce_done(ls);
	return ls->records ? 0 : EXIT_ANSWER_NO;
}

int main(int argc, char **argv)
{
	enum {
		OPT_NDJSON = 256, OPT_RANK, OPT_OLDER, OPT_NEWER, OPT_VERIFY,
		OPT_ORPHANS, OPT_DAEMON, OPT_ANNOUNCE, OPT_EVENTS, OPT_CONFIG, OPT_CHECK, OPT_SORT,
	};
	static const struct option longopts[] = {
		{ "blocks", no_argument, NULL, 'b' },
		{ "sort", required_argument, NULL, OPT_SORT },
		{ "check", no_argument, NULL, OPT_CHECK },
		{ "verify", no_argument, NULL, OPT_VERIFY },
		{ "json", no_argument, NULL, 'J' },
		{ "ndjson", no_argument, NULL, OPT_NDJSON },
		{ "root", required_argument, NULL, 'r' },
		{ "model", required_argument, NULL, 'm' },
		{ "rank", required_argument, NULL, OPT_RANK },
		{ "older-than", required_argument, NULL, OPT_OLDER },
		{ "newer-than", required_argument, NULL, OPT_NEWER },
		{ "orphans-after", required_argument, NULL, OPT_ORPHANS },
		{ "threads", required_argument, NULL, 't' },
		{ "daemon", required_argument, NULL, OPT_DAEMON },
		{ "announce", no_argument, NULL, OPT_ANNOUNCE },
		{ "events", required_argument, NULL, OPT_EVENTS },
		{ "config", required_argument, NULL, OPT_CONFIG },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct kv_walk_opts wopts = { .rank = -1 };
	struct ls ls = { .mode = MODE_MODELS, .orphans_after_ns = ORPHANS_AFTER_NS, .rootfd = -1 };
	const char *root_opt = NULL, *root, *daemon = NULL, *events_opt = NULL, *endpoint;
	int blocks = 0, check = 0, announce = 0, c, rc;
	uint64_t older = 0, newer = 0;

	tool_init("kvls");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":bJr:m:t:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'b': blocks = 1; break;
		case OPT_SORT:
			ls.sort = !strcmp(optarg, "last-use") ? SORT_LAST_USE :
				  !strcmp(optarg, "size") ? SORT_SIZE :
				  !strcmp(optarg, "path") ? SORT_PATH : SORT_NONE;
			if (!ls.sort)
				tool_usage_fail("invalid --sort value '%s' (last-use, size or path)",
						optarg);
			break;
		case OPT_CHECK: check = ls.check = 1; break;
		case OPT_VERIFY: ls.verify = 1; break;
		case 'J': ls.out = OUT_JSON; break;
		case OPT_NDJSON: ls.out = OUT_NDJSON; break;
		case 'r': root_opt = optarg; break;
		case 'm':
			if (!*optarg)
				tool_usage_fail("invalid --model value ''");
			wopts.model = optarg;
			break;
		case OPT_RANK:
			wopts.rank = (int)tool_parse_uint("--rank", optarg, INT32_MAX);
			break;
		case OPT_OLDER:
			older = tool_parse_duration_ns("--older-than", optarg);
			ls.has_older = 1;
			break;
		case OPT_NEWER:
			newer = tool_parse_duration_ns("--newer-than", optarg);
			ls.has_newer = 1;
			break;
		case OPT_ORPHANS:
			ls.orphans_after_ns = tool_parse_duration_ns("--orphans-after", optarg);
			break;
		case 't':
			wopts.threads = (unsigned)tool_parse_uint("--threads", optarg, 64);
			break;
		case OPT_DAEMON: daemon = optarg; break;
		case OPT_ANNOUNCE: announce = 1; break;
		case OPT_EVENTS: events_opt = optarg; break;
		case OPT_CONFIG:
			tool_config_add(ls.configs, &ls.nconfigs, optarg);
			break;
		case 'h': usage(); break;
		case 'V': tool_version(); break;
		default:
			tool_bad_option(c, argv);
		}
	}
	if (optind < argc)
		tool_usage_fail("unexpected argument '%s'", argv[optind]);
	if (blocks && (check || ls.verify))
		tool_usage_fail("--blocks lists; --check and --verify check: pick one");
	if (daemon && (check || ls.verify || ls.has_older || ls.has_newer))
		tool_usage_fail("--daemon lists the RAM tier: no --check, --verify, "
				"--older-than or --newer-than");
	if (ls.sort && (!(blocks || daemon) || check || ls.verify || announce))
		tool_usage_fail("--sort orders the blocks --blocks or --daemon lists");
	if (ls.sort == SORT_LAST_USE && daemon)
		tool_usage_fail("--sort last-use: the daemon's RAM tier says no last use "
				"(size or path)");
	if (events_opt && !announce)
		tool_usage_fail("--events is where --announce publishes: add --announce");
	if (announce && (check || ls.verify || daemon))
		tool_usage_fail("--announce publishes the file tier's blocks: no --check, "
				"--verify or --daemon");
	endpoint = announce ? tool_events_endpoint(events_opt) : NULL;
	if (announce && !endpoint)
		tool_usage_fail("--announce needs --events ENDPOINT or $KV_EVENTS");
	root = daemon ? NULL : tool_root(root_opt);
	if (check || ls.verify)
		ls.mode = MODE_CHECK;
	else if (blocks || daemon || announce)
		ls.mode = MODE_BLOCKS;
	if (announce) {
		struct kv_events_opts eo = { .backpressure = 1 };

		ls.rootfd = kv_root_is_s3(root) ? -1 : tool_root_open(root);
		ls.events = tool_events_open_opts(endpoint, &eo);
		tool_events_name(ls.events, ls.configs, ls.nconfigs);
	}

	ls.now_ns = kv_now_ns();
	ls.older_cut_ns = ls.now_ns - (int64_t)(older > (uint64_t)INT64_MAX ? INT64_MAX : older);
	ls.newer_cut_ns = ls.now_ns - (int64_t)(newer > (uint64_t)INT64_MAX ? INT64_MAX : newer);
	tool_progress_init(&ls.progress);
	/* glibc ignores the size unless it is given the buffer. */
	if (!isatty(STDOUT_FILENO))
		setvbuf(stdout, out_buf, _IOFBF, sizeof(out_buf));
	if (ls.mode == MODE_BLOCKS) {
		rc = list_blocks(&ls, daemon, root, &wopts);
		models_free(&ls);
		return rc;
	}

	/* For config.json, read beneath it; the walk says why it cannot. */
	ls.bucket_root = kv_root_is_s3(root);
	if (!announce && !ls.bucket_root)
		ls.rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ls.bucket_root && ls.verify) {
		struct tool_store st;

		tool_store_open(&st, NULL, root, NULL);
		ls.bucket = st.tier;
	}
	rc = kv_walk(root, &wopts, on_entry, &ls);
	tool_progress_done(&ls.progress);
	if (rc == STOP_WRITE)
		out_fail(&ls);
	if (rc) {
		if (rc < 0)
			tool_root_err("open", root, rc);
		else
			tool_err("%s", strerror(ENOMEM));
		models_free(&ls);
		return EXIT_RUNTIME;
	}

	fill_from_configs(&ls);
	if (ls.mode == MODE_MODELS) {
		rc = models_print(&ls) ? 0 : EXIT_ANSWER_NO;
	} else {
		if (check && check_models(&ls))
			out_fail(&ls);
		check_summary(&ls);
		rc = ls.problems ? EXIT_ANSWER_NO : 0;
	}
	if (ls.write_errno)
		out_fail(&ls);
	models_free(&ls);
	if (ls.bucket)
		kv_tier_close(ls.bucket);
	return rc;
}
