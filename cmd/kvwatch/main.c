/*
 * kvwatch: keep each block's last use true.  Model servers read blocks
 * with O_DIRECT on noatime or relatime mounts and never stamp atime, so
 * LRU eviction sees write order; kvwatch, one per node, stamps atime for
 * every read of a block on the node and every prefix a model server
 * announces as computed or loaded (KV events), so kvevict, kvls and
 * kvoffd on any node order by true last use.  See kvwatch(8).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include "../tool.h"
#include "kvwatch.h"

#define RESOLUTION_DEFAULT_NS	(60ULL * 1000000000ULL)
#define RESCAN_DEFAULT_NS	(600ULL * 1000000000ULL)
#define METRICS_EVERY_NS	(10LL * 1000000000LL)
#define JOURNAL_SYNC_NS		(5LL * 1000000000LL)	/* a bucket's journal */
#define EVENTS_PER_TURN		4	/* messages (each at most 4 MiB) between
					   looks at fanotify */
#define EVENTS_AT_EXIT		64	/* more than ZMQ can have queued */
/* After the reads queued so far, wait this long for more before polling
 * again: each poll that sleeps costs the next reader a wake-up of this
 * process, and a use need not be recorded sooner than this. */
#define READ_BATCH_NS		2000000
#define ENDPOINTS_MAX		64
#define IGNORE_DEFAULT		"kvls,kvevict,kvbench,kvoffd,kvget,kvput"

static void usage(void)
{
	printf("Usage: kvwatch [--root DIR] [--events ENDPOINT]... [--resolution DUR]\n"
	       "               [--rescan DUR] [--node NAME] [--ignore-comm LIST]\n"
	       "               [--ready-fd N] [-J | --ndjson] [--metrics FILE]\n"
	       "       kvwatch -h | -V\n"
	       "\n"
	       "Record each use of a KV-cache block in its atime, where kvevict, kvls and\n"
	       "kvoffd on every node see it: every open of a block for reading on this node\n"
	       "(fanotify on the root's filesystem), and every block a model server announces\n"
	       "as computed or loaded (a GPU or CPU BlockStored KV event).  Runs until SIGTERM\n"
	       "or SIGINT.\n"
	       "\n"
	       "  -r, --root DIR          the cache root, or a bucket s3://BUCKET[/PREFIX]\n"
	       "                          (--events only; default $KV_ROOT)\n"
	       "  -e, --events ENDPOINT   subscribe to a KV-event publisher (repeatable):\n"
	       "                          tcp://HOST:PORT connects, tcp://*:PORT and\n"
	       "                          ipc://PATH bind; bind: or connect: forces either;\n"
	       "                          default $KVWATCH_EVENTS (spaces or commas between)\n"
	       "      --resolution DUR    stamp a block at most once per DUR (default 60s)\n"
	       "      --rescan DUR        re-walk the root this often to index blocks other\n"
	       "                          nodes wrote (default 10m; 0: never)\n"
	       "      --node NAME         this node's journal name (default: the host name)\n"
	       "      --ignore-comm LIST  opens by these programs are not uses (comma-separated;\n"
	       "                          default " IGNORE_DEFAULT ",\n"
	       "                          which stamp the uses they serve themselves; \"\": none)\n"
	       "      --ready-fd N        write a newline on fd N once watching and subscribed\n"
	       "  -J, --json              at exit, print what was recorded as one JSON\n"
	       "                          document (the metrics' counters)\n"
	       "      --ndjson            print one record per recorded use\n"
	       "      --metrics FILE      write Prometheus text to FILE every 10s and at exit\n"
	       "  -h, --help              show this help and exit\n"
	       "  -V, --version           show the version and exit\n"
	       "\n"
	       "Needs CAP_SYS_ADMIN (fanotify on a whole filesystem) and CAP_FOWNER (to stamp\n"
	       "blocks other users wrote).  Exit status: 0 stopped by a signal, 2 usage,\n"
	       "3 runtime failure.  See kvwatch(8).\n");
	exit(0);
}

/* ---- the index and its re-walk ---- */

void watch_index_add(struct watch *w, const char *relpath)
{
	index_add(&w->idx, relpath);
}

/* The re-walk's blocks, one at a time under the loop's lock. */
static int rescan_add(const struct kv_walk_entry *e, void *arg)
{
	struct watch *w = arg;
	int rc;

	if (w->stopping)
		return 1;
	if (e->kind != KV_WALK_BLOCK)
		return 0;
	pthread_mutex_lock(&w->lock);
	rc = index_add(&w->idx, e->path);
	pthread_mutex_unlock(&w->lock);
	return rc == -ENOMEM ? rc : 0;
}

static void *rescan_main(void *arg)
{
	struct watch *w = arg;
	struct kv_walk_opts o = { .rank = -1, .flags = KV_WALK_NO_STAT };
	char one = 1;

	w->rescan_err = kv_walk(w->root, &o, rescan_add, w);
	if (write(w->wake[1], &one, 1) < 0)
		return NULL;
	return NULL;
}

static void rescan_start(struct watch *w)
{
	pthread_mutex_lock(&w->lock);
	index_walk_begin(&w->idx);
	pthread_mutex_unlock(&w->lock);
	w->last_scan_ns = kv_now_ns();
	if (pthread_create(&w->rescan_tid, NULL, rescan_main, w) == 0)
		w->rescanning = 1;
}

/* The re-walk is done: what it did not see is gone (unless it failed,
 * when nothing is). */
static void rescan_finish(struct watch *w)
{
	char drain[16];

	if (read(w->wake[0], drain, sizeof(drain)) < 0 || !w->rescanning)
		return;
	pthread_join(w->rescan_tid, NULL);
	w->rescanning = 0;
	if (w->rescan_err) {
		tool_err("cannot re-walk '%s': %s", w->root, kv_strerror(w->rescan_err));
		index_walk_begin(&w->idx);	/* back: all count as seen */
		return;
	}
	if (index_walk_end(&w->idx) < 0)
		tool_err("out of memory compacting the index");
	w->c.rescans++;
}

/* ---- KV events ---- */

/* A BlockStored on these media says the prefix was just computed on, or
 * loaded into, a model server: a use.  A storage medium's is a write. */
static int is_use_medium(const char *m)
{
	return !*m || !strcasecmp(m, "GPU") || !strcasecmp(m, "CPU") ||
	       !strcasecmp(m, "cpu_pinned") || !strcasecmp(m, "HBM");
}

static int use_one(const char *relpath, void *arg)
{
	return record_use(arg, relpath, -1, SOURCE_EVENT) == -ENOENT ? 1 : 0;
}

static int on_kv_event(const struct kv_event *ev, void *arg)
{
	struct watch *w = arg;

	if (ev->ts > 0)
		w->c.lag_s = (double)kv_now_ns() / 1e9 - ev->ts;
	if (ev->kind != KV_EVENT_BLOCK_STORED || !is_use_medium(ev->medium))
		return 0;
	for (size_t i = 0; i < ev->nhashes; i++) {
		if (!index_each(&w->idx, ev->hashes[i], use_one, w))
			w->c.unmatched++;
	}
	return 0;
}

/* ---- a bucket's journal ---- */

static int still_there(const char *relpath, void *arg)
{
	struct watch *w = arg;

	return index_has(&w->idx, relpath);
}

/* Write the journal object when uses were recorded since it was last
 * written, at most once per JOURNAL_SYNC_NS: S3 has no append, so each
 * write is the whole object, the blocks the index no longer holds left
 * out. */
static void journal_sync(struct watch *w, int now)
{
	int64_t t = kv_now_ns();
	int rc;

	if (!w->bucket || (!now && t < w->next_sync_ns))
		return;
	w->next_sync_ns = t + JOURNAL_SYNC_NS;
	pthread_mutex_lock(&w->lock);
	rc = kv_use_recorder_sync(w->uses, still_there, w);
	pthread_mutex_unlock(&w->lock);
	if (rc) {
		w->c.failed++;
		tool_err("cannot write the journal of '%s': %s%s%s", w->root, kv_strerror(rc),
			 *kv_error_detail() ? ": " : "", kv_error_detail());
	}
}

/* ---- the loop ---- */

static int signal_fd(void)
{
	sigset_t set;
	int fd;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (fd < 0) {
		tool_err("cannot open a signalfd: %s", strerror(errno));
		exit(EXIT_RUNTIME);
	}
	return fd;
}

static void serve(struct watch *w, int sigfd)
{
	int64_t next_metrics = kv_now_ns() + METRICS_EVERY_NS;
	int fan_more = 0, ev_more = w->sub != NULL, evfd = w->sub ? kv_events_sub_fd(w->sub) : -1;

	for (;;) {
		static const struct timespec batch = { 0, READ_BATCH_NS };
		struct pollfd p[4] = {
			{ .fd = w->fan, .events = POLLIN },
			{ .fd = sigfd, .events = POLLIN },
			{ .fd = w->wake[0], .events = POLLIN },
			{ .fd = evfd, .events = POLLIN },
		};
		int64_t now = kv_now_ns();
		int timeout = fan_more || ev_more ? 0 : 1000;

		if (poll(p, 4, timeout) < 0 && errno != EINTR) {
			tool_err("poll: %s", strerror(errno));
			exit(EXIT_RUNTIME);
		}
		if (p[1].revents & POLLIN)
			break;
		/* Reads first, and floods of events in slices, so that neither
		 * starves the other. */
		pthread_mutex_lock(&w->lock);
		if (fan_more || (p[0].revents & POLLIN)) {
			fan_more = fan_drain(w);
			if (!fan_more)
				nanosleep(&batch, NULL);
		}
		if (w->sub && (ev_more || (p[3].revents & POLLIN)))
			ev_more = kv_events_sub_drain(w->sub, EVENTS_PER_TURN, on_kv_event, w) > 0;
		pthread_mutex_unlock(&w->lock);
		if (p[2].revents & POLLIN)
			rescan_finish(w);
		/* Records leave per turn, not per stdio buffer: a pipe to jq
		 * sees each use as it is recorded. */
		if (w->ndjson && fflush(stdout) == EOF) {
			tool_err("cannot write to stdout: %s", strerror(errno));
			exit(EXIT_RUNTIME);
		}
		now = kv_now_ns();
		if (w->rescan_ns && !w->rescanning && now - w->last_scan_ns > (int64_t)w->rescan_ns)
			rescan_start(w);
		if (w->metrics && now >= next_metrics) {
			metrics_write(w);
			next_metrics = now + METRICS_EVERY_NS;
		}
		journal_sync(w, 0);
	}
	/* Record what was queued when the signal came, not what a flood
	 * keeps sending after it, then stop: an exit in bounded time. */
	for (int k = 0; k < EVENTS_AT_EXIT && !w->bucket && fan_drain(w); k++)
		;
	if (w->sub)
		kv_events_sub_drain(w->sub, EVENTS_AT_EXIT, on_kv_event, w);
	journal_sync(w, 1);
}

static void node_name(struct watch *w, const char *opt)
{
	kv_uses_node_name(opt, w->node);
	if (opt && strcmp(opt, w->node))
		tool_usage_fail("--node '%s': use letters, digits, '.', '_' and '-'", opt);
}

enum { OPT_RESOLUTION = 256, OPT_RESCAN, OPT_NODE, OPT_IGNORE, OPT_READY, OPT_NDJSON,
       OPT_METRICS };

/* One endpoint to subscribe to, checked; what names its source. */
static void endpoint_add(const char **endpoints, unsigned *n, const char *spec,
			 const char *what)
{
	if (*n == ENDPOINTS_MAX)
		tool_usage_fail("%s: at most %d endpoints", what, ENDPOINTS_MAX);
	if (kv_events_endpoint_check(spec, NULL) < 0)
		tool_usage_fail("%s: %s", what, kv_error_detail());
	endpoints[(*n)++] = spec;
}

/* $KVWATCH_EVENTS when no --events is given: endpoints separated by
 * spaces or commas, as a unit's Environment= line holds them.  Not
 * $KV_EVENTS, which names where the other programs publish. */
static void env_endpoints(const char **endpoints, unsigned *n)
{
	const char *env = getenv("KVWATCH_EVENTS");
	char *list, *save, *tok;

	if (!env || !*env)
		return;
	list = strdup(env);
	if (!list) {
		tool_err("out of memory");
		exit(EXIT_RUNTIME);
	}
	for (tok = strtok_r(list, " ,\t\n", &save); tok; tok = strtok_r(NULL, " ,\t\n", &save))
		endpoint_add(endpoints, n, tok, "$KVWATCH_EVENTS");
}

/* --ignore-comm's list as ",a,b,"; names are at most 15 bytes (comm). */
static void ignore_list(struct watch *w, const char *list)
{
	size_t n = strlen(list);
	char *p = w->ignore;

	if (!n) {
		w->ignore[0] = '\0';
		return;
	}
	if (n + 3 > sizeof(w->ignore) || strstr(list, ",,") || list[0] == ',' ||
	    list[n - 1] == ',')
		tool_usage_fail("--ignore-comm '%s': names separated by single commas", list);
	*p++ = ',';
	memcpy(p, list, n);
	p[n] = ',';
	p[n + 1] = '\0';
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "root", required_argument, NULL, 'r' },
		{ "events", required_argument, NULL, 'e' },
		{ "resolution", required_argument, NULL, OPT_RESOLUTION },
		{ "rescan", required_argument, NULL, OPT_RESCAN },
		{ "node", required_argument, NULL, OPT_NODE },
		{ "ignore-comm", required_argument, NULL, OPT_IGNORE },
		{ "ready-fd", required_argument, NULL, OPT_READY },
		{ "json", no_argument, NULL, 'J' },
		{ "ndjson", no_argument, NULL, OPT_NDJSON },
		{ "metrics", required_argument, NULL, OPT_METRICS },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	static struct watch w;
	const char *root_opt = NULL, *endpoints[ENDPOINTS_MAX], *node = NULL;
	unsigned nend = 0;
	int ignore_set = 0;
	int opt, ready_fd = -1, sigfd, rc;
	struct stat st;

	tool_init("kvwatch");
	w.resolution_ns = RESOLUTION_DEFAULT_NS;
	w.rescan_ns = RESCAN_DEFAULT_NS;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":r:e:JhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'r': root_opt = optarg; break;
		case 'e': endpoint_add(endpoints, &nend, optarg, "--events"); break;
		case OPT_RESOLUTION:
			w.resolution_ns = tool_parse_duration_ns("--resolution", optarg);
			break;
		case OPT_RESCAN: w.rescan_ns = tool_parse_duration_ns("--rescan", optarg); break;
		case OPT_NODE: node = optarg; break;
		case OPT_IGNORE: ignore_list(&w, optarg); ignore_set = 1; break;
		case OPT_READY:
			ready_fd = (int)tool_parse_uint("--ready-fd", optarg, 1 << 20);
			break;
		case 'J': w.json = 1; break;
		case OPT_NDJSON: w.ndjson = 1; break;
		case OPT_METRICS: w.metrics = optarg; break;
		case 'h': usage(); break;
		case 'V': tool_version(); break;
		default: tool_bad_option(opt, argv);
		}
	}
	if (optind < argc)
		tool_usage_fail("unexpected argument '%s'", argv[optind]);
	if (w.json && w.ndjson)
		tool_usage_fail("-J prints one document at exit, --ndjson a record per use: "
				"pick one");
	if (!nend)
		env_endpoints(endpoints, &nend);
	if (!ignore_set)
		ignore_list(&w, IGNORE_DEFAULT);
	w.root = tool_root(root_opt);
	node_name(&w, node);
	w.bucket = kv_root_is_s3(w.root);
	if (w.bucket) {
		/* Blocks on a bucket are read by remote servers: only their
		 * events say so, and every use goes to the journal object. */
		if (!nend)
			tool_usage_fail("a bucket is watched through the model servers' KV "
					"events: give --events or $KVWATCH_EVENTS");
		rc = kv_use_recorder_open(w.root, w.node, (int64_t)w.resolution_ns, &w.uses);
		if (rc) {
			tool_root_err("open", w.root, rc);
			return EXIT_RUNTIME;
		}
		w.rootfd = w.fan = -1;
		w.mark = "none";
	} else {
		w.rootfd = tool_root_open(w.root);
		if (fstat(w.rootfd, &st) < 0 || !realpath(w.root, w.root_real)) {
			tool_err("cannot open '%s': %s", w.root, strerror(errno));
			return EXIT_RUNTIME;
		}
		w.root_len = strlen(w.root_real);
		if (w.root_len == 1)
			w.root_len = 0;		/* "/": every path is under it */
		rc = kv_use_recorder_open(w.root, w.node, (int64_t)w.resolution_ns, &w.uses);
		if (rc) {
			tool_err("cannot open '%s': %s", w.root, kv_strerror(rc));
			return EXIT_RUNTIME;
		}
	}
	pthread_mutex_init(&w.lock, NULL);
	if (pipe2(w.wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		tool_err("pipe: %s", strerror(errno));
		return EXIT_RUNTIME;
	}
	sigfd = signal_fd();
	/* Watch before the walk, so that nothing read meanwhile is missed. */
	if (!w.bucket)
		fan_open(&w);
	if (nend) {
		rc = kv_events_sub_open(&w.sub);
		for (unsigned i = 0; !rc && i < nend; i++)
			if ((rc = kv_events_sub_add(w.sub, endpoints[i])) < 0)
				tool_err("%s", kv_error_detail());
		if (rc) {
			if (rc == -ENOMEM)
				tool_err("out of memory");
			return EXIT_RUNTIME;
		}
	}
	if ((rc = index_init(&w.idx)) < 0 || (rc = index_build(&w.idx, w.root, 0)) < 0) {
		tool_root_err("index", w.root, rc);
		return EXIT_RUNTIME;
	}
	w.last_scan_ns = kv_now_ns();
	if (ready_fd >= 0) {
		if (write(ready_fd, "\n", 1) != 1)
			tool_err("cannot write to --ready-fd: %s", strerror(errno));
		close(ready_fd);
	}
	serve(&w, sigfd);
	w.stopping = 1;
	if (w.rescanning)
		pthread_join(w.rescan_tid, NULL);
	metrics_write(&w);
	if (w.json)
		summary_print(&w);
	kv_events_sub_close(w.sub);
	kv_use_recorder_close(w.uses);
	index_free(&w.idx);
	return 0;
}
