/* kvevict: threshold and budget LRU eviction of the shared file tier. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../tool.h"
#include "../tool_record.h"

static const char usage_text[] =
	"Usage: kvevict [-r DIR] [--high PCT] [--low PCT] [--max-bytes SIZE]\n"
	"               [--low-bytes SIZE] [--model-max-bytes MODEL=SIZE]...\n"
	"               [--hot DUR] [--orphans-after DUR [--force]] [--dir-grace DUR]\n"
	"               [-n] [--once | -w INTERVAL] [--wait[=DUR]] [-t N] [-J | --ndjson]\n"
	"               [--events ENDPOINT [--config FILE]...]\n"
	"               [--shard I/N [--shard-wait DUR]]\n"
	"       kvevict --stdin [-r DIR] [--hot DUR] [-n] [--wait[=DUR]] [-J | --ndjson]\n"
	"               [--events ENDPOINT]\n"
	"       kvevict -h | -V\n"
	"\n"
	"Delete least-recently-used KV-cache blocks (oldest atime first) until\n"
	"filesystem use, the cache's bytes and each model quota are back under\n"
	"their targets.  Only layout .bin blocks are deleted; orphan temp files\n"
	"and empty bucket dirs are cleaned up.\n"
	"\n"
	"Options:\n"
	"  -r, --root DIR           cache root, or a bucket s3://BUCKET[/PREFIX]\n"
	"                           (default $KV_ROOT)\n"
	"      --high PCT           act when filesystem use is at or above PCT\n"
	"      --low PCT            then free down to PCT (default: high - 15)\n"
	"      --max-bytes SIZE     act when the cache holds more than SIZE\n"
	"      --low-bytes SIZE     then free down to SIZE (default: 90% of max)\n"
	"      --model-max-bytes MODEL=SIZE\n"
	"                           per-model budget, freed down to 90%; repeatable\n"
	"      --hot DUR            never delete blocks read or written within DUR\n"
	"                           (default 60m; 0 disables)\n"
	"      --orphans-after DUR  remove temp files older than DUR (default 1h; under\n"
	"                           1m, which can catch writers at work, needs --force)\n"
	"      --force              allow --orphans-after under 1m, and eviction on a\n"
	"                           file tier that a running kvoffd manages\n"
	"      --dir-grace DUR      remove empty bucket dirs older than DUR (default 10m)\n"
	"  -n, --dry-run            list what would go, change nothing\n"
	"      --once               one pass, for cron (default)\n"
	"  -w, --watch INTERVAL     stay up, check every INTERVAL\n"
	"      --wait[=DUR]         wait at most DUR (default 10m) for another kvevict's\n"
	"                           lock instead of exiting 1 at once\n"
	"      --stdin              delete the block paths or kvls NDJSON records on stdin\n"
	"  -t, --threads N          walk and delete threads, 1 to 64 (default: 64 on a\n"
	"                           network filesystem, else one per CPU, at most 8)\n"
	"  -J, --json               one JSON report\n"
	"      --ndjson             one BlockRemoved event per deleted block\n"
	"      --shard I/N          be shard I of N runs (one per node) that split the\n"
	"                           root's buckets and agree on one LRU order through\n"
	"                           ROOT/.kvevict/; each frees its share (see kvevict(8))\n"
	"      --shard-wait DUR     wait at most DUR for the other shards (default 2m),\n"
	"                           then free this shard's share by what is there\n"
	"      --events ENDPOINT    publish BlockRemoved KV events for llm-d's indexer\n"
	"                           on a ZMQ endpoint: tcp://HOST:PORT (connect),\n"
	"                           tcp://*:PORT or ipc://PATH (bind); default\n"
	"                           $KV_EVENTS\n"
	"      --config FILE        the config.json of model dirs that hold none (a\n"
	"                           bucket's), naming their events' topic; repeatable\n"
	"  -h, --help               show this help\n"
	"  -V, --version            show the version\n"
	"\n"
	"Exit status: 0 done or nothing to do, 1 another kvevict holds the lock,\n"
	"2 usage error or a root kvoffd manages (without --force), 3 the root could\n"
	"not be reached.\n";

enum {
	OPT_HIGH = 256, OPT_LOW, OPT_MAX_BYTES, OPT_LOW_BYTES, OPT_MODEL_MAX,
	OPT_HOT, OPT_ORPHANS, OPT_DIR_GRACE, OPT_ONCE, OPT_WAIT, OPT_STDIN, OPT_NDJSON,
	OPT_FORCE, OPT_EVENTS, OPT_SHARD, OPT_SHARD_WAIT, OPT_CONFIG,
};

/* A temp younger than this may belong to a writer still at work on a slow
 * filesystem: removing it fails that put. */
#define ORPHANS_FLOOR_NS	(60ull * 1000000000)
#define SHARD_WAIT_NS		(120ull * 1000000000)
#define LOCK_WAIT_NS		(600ll * 1000000000)

static const struct option longopts[] = {
	{ "root", required_argument, NULL, 'r' },
	{ "high", required_argument, NULL, OPT_HIGH },
	{ "low", required_argument, NULL, OPT_LOW },
	{ "max-bytes", required_argument, NULL, OPT_MAX_BYTES },
	{ "low-bytes", required_argument, NULL, OPT_LOW_BYTES },
	{ "model-max-bytes", required_argument, NULL, OPT_MODEL_MAX },
	{ "hot", required_argument, NULL, OPT_HOT },
	{ "orphans-after", required_argument, NULL, OPT_ORPHANS },
	{ "dir-grace", required_argument, NULL, OPT_DIR_GRACE },
	{ "force", no_argument, NULL, OPT_FORCE },
	{ "dry-run", no_argument, NULL, 'n' },
	{ "once", no_argument, NULL, OPT_ONCE },
	{ "watch", required_argument, NULL, 'w' },
	{ "wait", optional_argument, NULL, OPT_WAIT },
	{ "stdin", no_argument, NULL, OPT_STDIN },
	{ "threads", required_argument, NULL, 't' },
	{ "json", no_argument, NULL, 'J' },
	{ "ndjson", no_argument, NULL, OPT_NDJSON },
	{ "events", required_argument, NULL, OPT_EVENTS },
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "shard", required_argument, NULL, OPT_SHARD },
	{ "shard-wait", required_argument, NULL, OPT_SHARD_WAIT },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

enum output { OUT_TEXT, OUT_JSON, OUT_NDJSON };

struct state {
	const char *root;
	enum output out;
	int dry_run;
	const char *pause_fifo;
	struct tool_progress progress;	/* on a terminal's stderr */
	struct kv_events *events;	/* --events: BlockRemoved after each unlink */
	int rootfd;			/* for the events' model names */
	int bucket;			/* the root is an s3:// bucket */
	unsigned shard, shards;		/* --shard I/N; shards 0: not sharded */
};

static volatile sig_atomic_t stop_requested;
static struct kv_evict_bucket_lock *bucket_lock;

static void unlock_bucket(void)
{
	kv_evict_unlock_bucket(bucket_lock);
}

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static double parse_pct(const char *opt, const char *text)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(text, &end);
	if (end != text && *end == '%')
		end++;
	if (end == text || *end || errno || !(v >= 0 && v <= 100))
		tool_usage_fail("invalid %s percentage '%s' (0 to 100)", opt, text);
	return v;
}

/* "I/N" in canonical decimals, 0 <= I < N <= KV_EVICT_MAX_SHARDS. */
static void parse_shard(const char *text, unsigned *index, unsigned *count)
{
	unsigned long i, n;
	char *end;

	errno = 0;
	i = strtoul(text, &end, 10);
	if (end != text && *end == '/' && text[0] >= '0' && text[0] <= '9' &&
	    (text[0] != '0' || end == text + 1) && end[1] >= '0' && end[1] <= '9' &&
	    end[1] != '0') {
		const char *ns = end + 1;

		n = strtoul(ns, &end, 10);
		if (!*end && !errno && i < n && n <= KV_EVICT_MAX_SHARDS) {
			*index = (unsigned)i;
			*count = (unsigned)n;
			return;
		}
	}
	tool_usage_fail("invalid --shard '%s' (I/N: shard I of N, 0 <= I < N <= %d)", text,
			KV_EVICT_MAX_SHARDS);
}

static void parse_quota(const char *text, struct kv_evict_quota *q)
{
	const char *eq = strrchr(text, '=');
	char *model;

	if (!eq || eq == text || !eq[1])
		tool_usage_fail("invalid --model-max-bytes '%s' (MODEL=SIZE)", text);
	model = strndup(text, (size_t)(eq - text));
	if (!model) {
		tool_err("out of memory");
		exit(EXIT_RUNTIME);
	}
	q->model = model;
	q->max_bytes = tool_parse_size("--model-max-bytes", eq + 1);
	q->low_bytes = q->max_bytes / 10 * 9;
}

/* Test-only: block on a FIFO between the scan and the first unlink. */
static void pause_before_unlink(void *arg)
{
	struct state *s = arg;
	char buf[64];
	int fd;

	if (!s->pause_fifo)
		return;
	fd = open(s->pause_fifo, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
}

static void on_removed(const struct kv_evict_block *b, void *arg)
{
	struct state *s = arg;

	if (s->events && !s->dry_run)
		kv_events_publish_block(s->events, KV_EVENT_BLOCK_REMOVED,
					KV_EVENTS_SHARED_STORAGE, s->rootfd, b->ref);

	if (s->out == OUT_NDJSON) {
		tool_json_print(json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:s, s:b}",
			"event", "BlockRemoved",
			"path", b->path,
			"model_dir", b->ref->model_dir,
			"rank", (json_int_t)b->ref->rank,
			"group", (json_int_t)b->ref->group,
			"hash", b->ref->hash,
			"size_bytes", (json_int_t)b->size_bytes,
			"alloc_bytes", (json_int_t)b->alloc_bytes,
			"atime_ns", (json_int_t)b->atime_ns,
			"last_use_ns", (json_int_t)b->last_use_ns,
			"tier", "fs",
			"dry_run", s->dry_run));
		fflush(stdout);
	} else if (s->out == OUT_TEXT && s->dry_run) {
		printf("%s\n", b->path);
	}
}

static void on_progress(uint64_t walked, uint64_t deleted, void *arg)
{
	struct state *s = arg;

	tool_progress_show(&s->progress, "%llu %s walked, %llu %s %s",
			   (unsigned long long)walked, tool_plural(walked, "entry", "entries"),
			   (unsigned long long)deleted, tool_plural(deleted, "block", "blocks"),
			   s->dry_run ? "to delete" : "deleted");
}

/* A sharded run's notices: a shard missing, a state file ignored. */
static void on_notice(const char *text, void *arg)
{
	const struct state *s = arg;

	tool_err("shard %u/%u: %s", s->shard, s->shards, text);
}

/* cache_known: the run walked the root, so the cache's size before and
 * after is known (--stdin deletes what it is given and walks nothing). */
static void report(struct state *s, const struct kv_evict_report *r, int cache_known)
{
	char del[32], before[32], after[32];

	tool_progress_done(&s->progress);
	if (s->out == OUT_JSON) {
		json_t *j = json_pack("{s:s, s:b, s:b}", "root", s->root,
				      "dry_run", s->dry_run, "target_reached", r->target_reached);
#define SET(k) json_object_set_new(j, #k, json_integer((json_int_t)r->k))
		SET(files_scanned); SET(bytes_scanned); SET(files_hot);
		SET(files_deleted); SET(bytes_deleted); SET(skipped_hot);
		SET(skipped_other); SET(orphans_removed); SET(orphan_bytes_removed);
		SET(dirs_removed); SET(dirs_unreadable); SET(cache_bytes_before);
		SET(cache_bytes_after); SET(bytes_needed); SET(walks);
		if (!cache_known) {
			json_object_set_new(j, "cache_bytes_before", json_null());
			json_object_set_new(j, "cache_bytes_after", json_null());
		}
		SET(cutoff_atime_ns); SET(elapsed_ns);
		if (s->shards) {
			SET(shard_round); SET(shards_merged);
			json_object_set_new(j, "shard_index", json_integer(s->shard));
			json_object_set_new(j, "shard_count", json_integer(s->shards));
		}
#undef SET
		json_object_set_new(j, "use_before_pct", json_real(r->use_before_pct));
		json_object_set_new(j, "use_after_pct", json_real(r->use_after_pct));
		tool_json_print(j);
	} else if (s->out == OUT_TEXT) {
		kv_size_format(r->bytes_deleted, del, sizeof(del));
		kv_size_format(r->cache_bytes_before, before, sizeof(before));
		kv_size_format(r->cache_bytes_after, after, sizeof(after));
		printf("kvevict: %s %llu %s (%s)", s->dry_run ? "would delete" : "deleted",
		       (unsigned long long)r->files_deleted,
		       tool_plural(r->files_deleted, "block", "blocks"), del);
		/* A bucket has no filesystem use to report. */
		if (!s->bucket)
			printf(", use %.1f%% -> %.1f%%", r->use_before_pct, r->use_after_pct);
		if (cache_known)
			printf(", cache %s -> %s", before, after);
		if (r->skipped_hot || r->skipped_other)
			printf(", skipped %llu hot %llu other", (unsigned long long)r->skipped_hot,
			       (unsigned long long)r->skipped_other);
		if (r->orphans_removed || r->dirs_removed)
			printf(", %llu %s %llu %s removed",
			       (unsigned long long)r->orphans_removed,
			       tool_plural(r->orphans_removed, "orphan", "orphans"),
			       (unsigned long long)r->dirs_removed,
			       tool_plural(r->dirs_removed, "dir", "dirs"));
		if (!r->target_reached)
			printf(", target not reached");
		if (s->shards)
			printf(", shard %u/%u (%u of %u merged)", s->shard, s->shards,
			       r->shards_merged, s->shards);
		putchar('\n');
	}
	fflush(stdout);
}

static int run_stdin(struct state *s, const struct kv_evict_opts *o)
{
	struct kv_evict_report r;
	struct tool_record_opts ro = { .bare = TOOL_RECORD_BARE_PATH, .root = s->root };
	struct tool_record rec;
	struct tool_lines in;
	char *line, *root_real;
	int64_t t0 = kv_monotonic_ns();
	int rootfd, rc;

	memset(&r, 0, sizeof(r));
	rootfd = tool_root_open(s->root);
	root_real = realpath(s->root, NULL);
	if (!root_real) {
		tool_err("cannot open '%s': %s", s->root, strerror(errno));
		close(rootfd);
		return EXIT_RUNTIME;
	}
	ro.root_real = root_real;
	kv_evict_fs_use(s->root, &r.use_before_pct);
	tool_lines_open(&in, NULL);
	while ((rc = tool_lines_next(&in, &line)) == 1) {
		if (tool_record_parse(line, &ro, &rec) < 0) {
			tool_lines_refuse(&in, "%s", rec.error);
			r.skipped_other++;
		} else if ((rc = kv_evict_path(rootfd, rec.relpath, o, &r)) < 0) {
			tool_err("skipping '%s': %s", rec.relpath,
				 rc == -ELOOP ? "a symlink" : kv_strerror(rc));
		}
		tool_record_free(&rec);
	}
	tool_lines_close(&in);
	free(root_real);
	close(rootfd);
	r.target_reached = 1;
	kv_evict_fs_use(s->root, &r.use_after_pct);
	r.elapsed_ns = kv_monotonic_ns() - t0;
	report(s, &r, 0);
	return rc < 0 ? EXIT_RUNTIME : 0;
}

/* Sleep for ns unless a signal asks us to stop. */
static void nap(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };

	while (!stop_requested && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int run_watch(struct state *s, const struct kv_evict_opts *o, uint64_t interval_ns)
{
	struct kv_evict_report r;
	int64_t last_walk = 0;
	int first = 1, rc;
	double use;

	while (!stop_requested) {
		int walk = first || o->max_bytes || o->nquotas ||
			   kv_monotonic_ns() - last_walk >= (int64_t)o->orphans_after_ns;

		/* statvfs is cheap; the walks only happen when it says so. */
		if (!walk && o->high_pct >= 0) {
			rc = kv_evict_fs_use(s->root, &use);
			if (rc < 0) {
				tool_err("cannot read '%s': %s", s->root, kv_strerror(rc));
				return EXIT_RUNTIME;
			}
			walk = use >= o->high_pct;
		}
		if (walk) {
			rc = kv_evict_run(s->root, o, &r);
			if (rc < 0) {
				tool_root_err("walk", s->root, rc);
				return EXIT_RUNTIME;
			}
			last_walk = kv_monotonic_ns();
			if (s->events)
				kv_events_flush(s->events);
			if (first || r.files_deleted || r.orphans_removed || r.dirs_removed ||
			    r.skipped_hot)
				report(s, &r, 1);
			first = 0;
		}
		nap(interval_ns);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct kv_config *configs[TOOL_CONFIGS_MAX];
	static unsigned nconfigs;
	static struct kv_evict_quota quotas[KV_EVICT_MAX_QUOTAS];
	struct state s = { 0 };
	struct kv_evict_opts o = {
		.high_pct = -1,
		.low_pct = -1,
		.hot_ns = 60ull * 60 * 1000000000,
		.orphans_after_ns = 60ull * 60 * 1000000000,
		.dir_grace_ns = 10ull * 60 * 1000000000,
	};
	struct kv_evict_report r;
	const char *root_opt = NULL, *events_opt = NULL, *endpoint;
	uint64_t watch_ns = 0;
	int64_t wait_ns = 0;
	int c, use_stdin = 0, once = 0, low_bytes_set = 0, lockfd[2] = { -1, -1 }, rc;
	int force = 0, shard_wait_set = 0;

	tool_init("kvevict");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":r:nw:t:JhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': root_opt = optarg; break;
		case OPT_HIGH: o.high_pct = parse_pct("--high", optarg); break;
		case OPT_LOW: o.low_pct = parse_pct("--low", optarg); break;
		case OPT_MAX_BYTES: o.max_bytes = tool_parse_size("--max-bytes", optarg); break;
		case OPT_LOW_BYTES:
			o.low_bytes = tool_parse_size("--low-bytes", optarg);
			low_bytes_set = 1;
			break;
		case OPT_MODEL_MAX:
			if (o.nquotas == KV_EVICT_MAX_QUOTAS)
				tool_usage_fail("at most %d --model-max-bytes", KV_EVICT_MAX_QUOTAS);
			parse_quota(optarg, &quotas[o.nquotas++]);
			break;
		case OPT_HOT: o.hot_ns = tool_parse_duration_ns("--hot", optarg); break;
		case OPT_ORPHANS:
			o.orphans_after_ns = tool_parse_duration_ns("--orphans-after", optarg);
			break;
		case OPT_DIR_GRACE:
			o.dir_grace_ns = tool_parse_duration_ns("--dir-grace", optarg);
			break;
		case OPT_FORCE: force = 1; break;
		case 'n': o.dry_run = s.dry_run = 1; break;
		case OPT_ONCE: once = 1; break;
		case 'w':
			watch_ns = tool_parse_duration_ns("--watch", optarg);
			if (!watch_ns)
				tool_usage_fail("--watch needs an interval above 0");
			break;
		case OPT_WAIT:
			wait_ns = optarg ? (int64_t)tool_parse_duration_ns("--wait", optarg)
				  : LOCK_WAIT_NS;
			break;
		case OPT_STDIN: use_stdin = 1; break;
		case 't': o.threads = (unsigned)tool_parse_uint("--threads", optarg, 64); break;
		case 'J': s.out = OUT_JSON; break;
		case OPT_NDJSON: s.out = OUT_NDJSON; break;
		case OPT_EVENTS: events_opt = optarg; break;
		case OPT_CONFIG: tool_config_add(configs, &nconfigs, optarg); break;
		case OPT_SHARD: parse_shard(optarg, &s.shard, &s.shards); break;
		case OPT_SHARD_WAIT:
			o.shard_wait_ns = tool_parse_duration_ns("--shard-wait", optarg);
			shard_wait_set = 1;
			break;
		case 'h': fputs(usage_text, stdout); return 0;
		case 'V': tool_version();
		default: tool_bad_option(c, argv);
		}
	}
	if (optind < argc)
		tool_usage_fail("unexpected argument '%s'", argv[optind]);
	s.root = tool_root(root_opt);
	endpoint = tool_events_endpoint(events_opt);
	o.quotas = quotas;
	/* Without a listener the library skips re-parsing each victim's path. */
	if (s.out == OUT_NDJSON || (s.out == OUT_TEXT && o.dry_run) || (endpoint && !o.dry_run))
		o.removed = on_removed;
	o.before_first_unlink = pause_before_unlink;
	o.progress = on_progress;
	o.arg = &s;
	tool_progress_init(&s.progress);
	s.pause_fifo = getenv("KV_EVICT_TEST_PAUSE_BEFORE_UNLINK");

	if (o.low_pct >= 0 && o.high_pct < 0)
		tool_usage_fail("--low needs --high");
	if (o.high_pct >= 0 && o.low_pct < 0)
		o.low_pct = o.high_pct > 15 ? o.high_pct - 15 : 0;
	if (o.low_pct > o.high_pct)
		tool_usage_fail("--low %g is above --high %g", o.low_pct, o.high_pct);
	if (low_bytes_set && !o.max_bytes)
		tool_usage_fail("--low-bytes needs --max-bytes");
	if (!low_bytes_set)
		o.low_bytes = o.max_bytes / 10 * 9;
	if (o.low_bytes > o.max_bytes)
		tool_usage_fail("--low-bytes is above --max-bytes");
	if (once && watch_ns)
		tool_usage_fail("--once and --watch exclude each other");
	if (use_stdin && (o.high_pct >= 0 || o.max_bytes || o.nquotas || watch_ns))
		tool_usage_fail("--stdin takes no thresholds, budgets or --watch");
	if (o.orphans_after_ns < ORPHANS_FLOOR_NS && !force)
		tool_usage_fail("--orphans-after under 1m can remove the temp files of writers "
				"still at work; add --force to mean it");
	if (!use_stdin && o.high_pct < 0 && !o.max_bytes && !o.nquotas)
		tool_usage_fail("nothing to do: give --high, --max-bytes, --model-max-bytes or --stdin");
	if (shard_wait_set && !s.shards)
		tool_usage_fail("--shard-wait needs --shard");
	/* Shards meet in rounds that each run opens once: a watcher would
	 * need its own schedule of rounds, a list on stdin has no buckets
	 * to split. */
	if (s.shards && (use_stdin || watch_ns))
		tool_usage_fail("--shard runs once, from cron or an Indexed Job: it takes no %s",
				use_stdin ? "--stdin" : "--watch");
	if (s.shards) {
		o.shard_index = s.shard;
		o.shard_count = s.shards;
		if (!shard_wait_set)
			o.shard_wait_ns = SHARD_WAIT_NS;
		o.notice = on_notice;
	}

	/* A bucket is filled by no filesystem and holds no lock files: byte
	 * budgets only (kvevict(8)); shards agree through objects under its
	 * prefix. */
	s.bucket = kv_root_is_s3(s.root);
	if (s.bucket && (o.high_pct >= 0 || use_stdin))
		tool_usage_fail("a bucket root takes --max-bytes and --model-max-bytes, not %s",
				o.high_pct >= 0 ? "--high/--low (it has no filesystem use)" :
				"--stdin");

	/* A tier kvoffd bounds is evicted by kvoffd, in its own LRU order;
	 * files removed under it would still count against its capacity. */
	if (!o.dry_run && !force && !s.bucket) {
		char who[256];

		rc = tool_root_managed(s.root, who, sizeof(who));
		if (rc == 1) {
			tool_err("'%s' is a tier kvoffd manages (%s): it evicts there itself; "
				 "add --force to evict all the same", s.root, who);
			return EXIT_USAGE;
		}
	}
	/* A dry run changes nothing, so it neither needs nor blocks the lock.
	 * A bucket's is an object, given up at exit. */
	if (!o.dry_run) {
		if (s.bucket)
			rc = kv_evict_lock_bucket(s.root, s.shard, s.shards, wait_ns, &bucket_lock);
		else
			rc = s.shards ? kv_evict_lock_shard(s.root, s.shard, wait_ns, lockfd) :
					kv_evict_lock(s.root, wait_ns, &lockfd[0]);
		if (rc == 0 && bucket_lock)
			atexit(unlock_bucket);
		if (rc == -EWOULDBLOCK && s.shards) {
			tool_err("another kvevict (unsharded, or shard %u) holds the lock on '%s' (%s)",
				 s.shard, s.root, kv_error_detail());
			return EXIT_ANSWER_NO;
		}
		if (rc == -EWOULDBLOCK) {
			tool_err("another kvevict holds the lock on '%s' (%s)", s.root,
				 kv_error_detail());
			return EXIT_ANSWER_NO;
		}
		if (rc < 0) {
			tool_root_err("open", s.root, rc);
			return EXIT_RUNTIME;
		}
	}
	/* A dry run deletes nothing, so it has nothing to announce. */
	if (endpoint && !o.dry_run) {
		s.rootfd = s.bucket ? -1 : tool_root_open(s.root);
		s.events = tool_events_open(endpoint, NULL);
		tool_events_name(s.events, configs, nconfigs);
	}
	if (use_stdin) {
		rc = run_stdin(&s, &o);
	} else if (watch_ns) {
		struct sigaction sa = { .sa_handler = on_signal };

		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		rc = run_watch(&s, &o, watch_ns);
	} else {
		rc = kv_evict_run(s.root, &o, &r);
		if (rc < 0) {
			tool_root_err("walk", s.root, rc);
			rc = EXIT_RUNTIME;
		} else {
			report(&s, &r, 1);
		}
	}
	/* Lingers, within $KV_EVENTS_LINGER, until the subscriber has them. */
	tool_events_close(s.events);
	return rc;
}
