/* kvoffd: node-local offload daemon with a shared CPU tier. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "../tool.h"
#include "kvoffd.h"

#define DEFAULT_SLOT_BYTES	(2u << 20)
#define DEFAULT_WRITE_THREADS	2
#define DEFAULT_PIN_TIMEOUT_S	60
#define WRITE_QUEUE_MAX		64

/* --size-classes: increasing sizes, each a multiple of KV_IO_ALIGN. */
static unsigned parse_classes(const char *arg, uint64_t *out)
{
	char *copy = strdup(arg), *save = NULL, *tok;
	unsigned n = 0;

	if (!copy)
		tool_usage_fail("out of memory");
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t bytes = tool_parse_size("--size-classes", tok);

		if (n == SIZE_CLASSES_MAX)
			tool_usage_fail("--size-classes takes at most %d sizes", SIZE_CLASSES_MAX);
		if (bytes < KV_IO_ALIGN || bytes % KV_IO_ALIGN)
			tool_usage_fail("--size-classes: '%s' is not a multiple of %d", tok,
					KV_IO_ALIGN);
		if (n && bytes <= out[n - 1])
			tool_usage_fail("--size-classes must increase: '%s'", tok);
		out[n++] = bytes;
	}
	free(copy);
	if (!n)
		tool_usage_fail("--size-classes needs at least one size");
	return n;
}

/* Without --size-classes: --slot-bytes and its halves down to
 * SMALLEST_CLASS, each a multiple of KV_IO_ALIGN.  A block takes at most
 * twice its size; all the classes share the pool (kv/slots.h). */
static unsigned derive_classes(uint64_t slot_bytes, uint64_t *out)
{
	unsigned n = 1;

	while (n < SIZE_CLASSES_MAX && (slot_bytes >> n) >= SMALLEST_CLASS &&
	       (slot_bytes >> n) % KV_IO_ALIGN == 0)
		n++;
	for (unsigned k = 0; k < n; k++)
		out[k] = slot_bytes >> (n - 1 - k);
	return n;
}

static void usage(void)
{
	printf("Usage: kvoffd [--root DIR | --tier KIND:DIR[:SIZE]...] --socket PATH\n"
	       "              --cpu-bytes SIZE [--promote first-hit|second-hit|never]\n"
	       "              [--slot-bytes SIZE | --size-classes SIZE,SIZE...] [--strict]\n"
	       "              [--pin-timeout DURATION]\n"
	       "              [--write-policy always|on-evict] [--write-threads N] [--fsync]\n"
	       "              [--ready-fd N] [--metrics-file PATH] [--events PATH|-]\n"
	       "              [--events ENDPOINT]\n"
	       "       kvoffd --stats SOCK\n"
	       "       kvoffd -h | -V\n"
	       "\n"
	       "Serve a shared CPU tier of KV-cache blocks over a Unix socket, writing\n"
	       "blocks behind to the file tiers below it and reading misses through.\n"
	       "\n"
	       "Options:\n"
	       "  -r, --root DIR            the one file tier, unbounded (default $KV_ROOT)\n"
	       "      --tier KIND:DIR[:SIZE]\n"
	       "                            a file tier, in order from RAM down: KIND is local\n"
	       "                            (this node's disk) or shared; SIZE bounds it (e.g.\n"
	       "                            6T), and blocks past it move to the next tier.\n"
	       "                            Every tier but the last needs a SIZE; DIR may be\n"
	       "                            a bucket, s3://BUCKET[/PREFIX], never bounded\n"
	       "      --promote POLICY      a hit below the first tier is copied up to it:\n"
	       "                            first-hit (default), second-hit or never\n"
	       "  -s, --socket PATH         Unix socket to listen on (default $KV_DAEMON)\n"
	       "      --cpu-bytes SIZE      size of the shared pool (e.g. 8G)\n"
	       "      --slot-bytes SIZE     largest block (default 2M); a block takes the\n"
	       "                            smallest slot that holds it, of SIZE or of its\n"
	       "                            halves down to 16K, all sizes from one pool\n"
	       "      --size-classes LIST   the slot sizes instead, comma-separated and\n"
	       "                            increasing (e.g. 16K,512K,2M,8M); the largest\n"
	       "                            is the largest block\n"
	       "      --strict              refuse a pool larger than the memory available\n"
	       "                            (without it: a warning)\n"
	       "      --pin-timeout DURATION\n"
	       "                            while puts are refused for want of an unpinned\n"
	       "                            slot, take back pins held longer (default 60s)\n"
	       "      --write-policy POLICY always: also write every put to the last tier\n"
	       "                            at once; on-evict: write blocks to the first tier\n"
	       "                            as they leave RAM (default; both do that)\n"
	       "      --write-threads N     file tier workers (default 2)\n"
	       "      --fsync               fsync each block and its directory\n"
	       "      --ready-fd N          write a newline on fd N once serving\n"
	       "      --metrics-file PATH   Prometheus text, rewritten every 5 s and on exit\n"
	       "      --events PATH|-       append BlockStored/BlockRemoved NDJSON events\n"
	       "      --events ENDPOINT     publish them as KV events for llm-d's indexer on a\n"
	       "                            ZMQ endpoint: tcp://HOST:PORT (connect),\n"
	       "                            tcp://*:PORT or ipc://PATH (bind); default\n"
	       "                            $KV_EVENTS.  Both forms may be given\n"
	       "      --stats SOCK          print the daemon at SOCK's statistics as JSON\n"
	       "  -h, --help                show this help and exit\n"
	       "  -V, --version             show the version and exit\n"
	       "\n"
	       "Exit status: 0 after SIGTERM or SIGINT once the RAM tier is written\n"
	       "behind, 2 usage error (or, with --strict, a pool past the memory\n"
	       "available), 3 cannot start (or write metrics at exit);\n"
	       "--stats: 0, or 4 when no daemon answers at SOCK.\n");
	exit(0);
}

/* A pool larger than the memory available (huge pages aside: hugetlbfs
 * reserved them when it was mapped) swaps, or is killed for memory, once
 * it fills: said at start, refused with --strict. */
static int check_memory(uint64_t pool_bytes, int strict)
{
	uint64_t avail = tool_mem_available();
	char pool[16], have[16];

	if (!avail || pool_bytes <= avail)
		return 0;
	kv_size_format(pool_bytes, pool, sizeof(pool));
	kv_size_format(avail, have, sizeof(have));
	if (strict) {
		tool_err("a %s pool is more than the %s of memory available (--strict): "
			 "lower --cpu-bytes", pool, have);
		return -1;
	}
	tool_err("warning: a %s pool is more than the %s of memory available: once it "
		 "fills, it swaps or is killed for memory (--strict refuses)", pool, have);
	return 0;
}

/* The topic of the RAM tier's events names this node: $KV_EVENTS_POD (a
 * pod's name, from the downward API), else the host name. */
static const char *events_pod(char *buf, size_t len)
{
	const char *pod = getenv("KV_EVENTS_POD");

	if (pod && *pod)
		return pod;
	if (gethostname(buf, len - 1) < 0)
		return NULL;
	buf[len - 1] = '\0';
	return buf;
}

/* "tiers": one object per file tier; a daemon from before tiers closes
 * the connection at the request, and the list ends there. */
static json_t *tier_stats_json(struct kv_offd *c)
{
	json_t *tiers = json_array();
	struct kv_offd_tier_stats ts;

	for (unsigned t = 0; t < 64 && !kv_offd_tier_stats(c, t, &ts); t++) {
		json_t *o = json_object();

		for (size_t i = 0; i < KV_OFFD_TIER_STATS_COUNT; i++)
			json_object_set_new(o, kv_offd_tier_stats_name(i),
					    json_integer((json_int_t)kv_offd_tier_stats_value(&ts, i)));
		json_object_set_new(o, "kind", json_string(ts.kind == KV_OFFD_TIER_SHARED ?
							   "shared" : "local"));
		json_array_append_new(tiers, o);
	}
	return tiers;
}

static int print_stats(const char *sock)
{
	struct kv_offd_stats st;
	struct kv_offd *c;
	json_t *o;
	int err;

	c = tool_daemon_connect(sock);
	err = kv_offd_stats(c, &st);
	if (err) {
		kv_offd_close(c);
		tool_err("cannot get statistics from '%s': %s", sock, kv_strerror(err));
		return tool_daemon_exit(err);
	}
	o = json_object();
	for (size_t i = 0; i < KV_OFFD_STATS_COUNT; i++)
		json_object_set_new(o, kv_offd_stats_name(i),
				    json_integer((json_int_t)kv_offd_stats_value(&st, i)));
	json_object_set_new(o, "tiers", tier_stats_json(c));
	kv_offd_close(c);
	json_object_set_new(o, "socket", json_string(sock));
	tool_json_print(o);
	return 0;
}

/* Bind the socket, 0660; a live daemon already on it is an error, a
 * stale socket file is replaced. */
static int listen_on(const char *path, int *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int fd, err;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		err = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		close(fd);
		if (err == 0)
			return -EADDRINUSE;
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* The umask gives bind's socket its mode 0660: no chmod by path
	 * after, which a name swapped in between would redirect. */
	old = umask(0117);
	err = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (err < 0 || listen(fd, 128) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	*out = fd;
	return 0;
}

/* systemd Type=notify, by hand: one datagram to $NOTIFY_SOCKET. */
static void sd_notify_ready(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;
	char msg[64];
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(sa.sun_path))
		return;
	strcpy(sa.sun_path, path);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	snprintf(msg, sizeof(msg), "READY=1\nMAINPID=%d", (int)getpid());
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
		tool_err("cannot notify systemd: %s", strerror(errno));
	close(fd);
}

int main(int argc, char **argv)
{
	enum { OPT_SLOT = 256, OPT_CLASSES, OPT_POLICY, OPT_THREADS, OPT_FSYNC, OPT_READY,
	       OPT_METRICS, OPT_EVENTS, OPT_STATS, OPT_TIER, OPT_PROMOTE, OPT_STRICT,
	       OPT_PIN_TIMEOUT, OPT_CPU_BYTES };
	static const struct option longopts[] = {
		{ "root", required_argument, NULL, 'r' },
		{ "tier", required_argument, NULL, OPT_TIER },
		{ "promote", required_argument, NULL, OPT_PROMOTE },
		{ "socket", required_argument, NULL, 's' },
		{ "cpu-bytes", required_argument, NULL, OPT_CPU_BYTES },
		{ "slot-bytes", required_argument, NULL, OPT_SLOT },
		{ "size-classes", required_argument, NULL, OPT_CLASSES },
		{ "strict", no_argument, NULL, OPT_STRICT },
		{ "pin-timeout", required_argument, NULL, OPT_PIN_TIMEOUT },
		{ "write-policy", required_argument, NULL, OPT_POLICY },
		{ "write-threads", required_argument, NULL, OPT_THREADS },
		{ "fsync", no_argument, NULL, OPT_FSYNC },
		{ "ready-fd", required_argument, NULL, OPT_READY },
		{ "metrics-file", required_argument, NULL, OPT_METRICS },
		{ "events", required_argument, NULL, OPT_EVENTS },
		{ "stats", required_argument, NULL, OPT_STATS },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	static struct offd d;
	static uint64_t classes[SIZE_CLASSES_MAX];
	struct tool_tier specs[TOOL_TIERS_MAX];
	unsigned nspecs = 0;
	int slot_opt = 0, strict = 0;
	const char *root_opt = NULL, *stats_sock = NULL;
	uint64_t cpu_bytes = 0, threads = DEFAULT_WRITE_THREADS;
	int ready_fd = -1, opt, err;
	sigset_t mask;
	char pod[256], size[16], pool[16], smallest[16];

	tool_init("kvoffd");
	d.slot_bytes = DEFAULT_SLOT_BYTES;
	d.write_flags = KV_TIER_SPILL;
	d.promote = KV_TIER_PROMOTE;
	d.pin_timeout_ns = DEFAULT_PIN_TIMEOUT_S * 1000000000ULL;
	d.socket_path = getenv("KV_DAEMON");
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":r:s:hV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'r':
			root_opt = optarg;
			break;
		case OPT_TIER:
			tool_tier_parse(optarg, specs, &nspecs);
			break;
		case OPT_PROMOTE:
			d.promote = tool_parse_promote(optarg);
			break;
		case 's':
			d.socket_path = optarg;
			break;
		case OPT_CPU_BYTES:
			cpu_bytes = tool_parse_size("--cpu-bytes", optarg);
			break;
		case OPT_SLOT:
			d.slot_bytes = tool_parse_size("--slot-bytes", optarg);
			slot_opt = 1;
			break;
		case OPT_CLASSES:
			d.nclasses = parse_classes(optarg, classes);
			break;
		case OPT_STRICT:
			strict = 1;
			break;
		case OPT_PIN_TIMEOUT:
			d.pin_timeout_ns = tool_parse_duration_ns("--pin-timeout", optarg);
			if (!d.pin_timeout_ns)
				tool_usage_fail("--pin-timeout must be more than 0");
			break;
		case OPT_POLICY:
			if (!strcmp(optarg, "always"))
				d.write_flags = KV_TIER_SPILL | KV_TIER_WRITE_THROUGH;
			else if (!strcmp(optarg, "on-evict"))
				d.write_flags = KV_TIER_SPILL;
			else
				tool_usage_fail("invalid --write-policy '%s' (always or on-evict)",
						optarg);
			break;
		case OPT_THREADS:
			threads = tool_parse_uint("--write-threads", optarg, 64);
			break;
		case OPT_FSYNC:
			d.io_flags |= KV_IO_FSYNC;
			break;
		case OPT_READY:
			ready_fd = (int)tool_parse_uint("--ready-fd", optarg, 1 << 20);
			break;
		case OPT_METRICS:
			d.metrics_path = optarg;
			break;
		case OPT_EVENTS:
			/* a ZMQ scheme selects the publisher, anything else
			 * names the NDJSON file */
			if (kv_events_is_endpoint(optarg)) {
				if (d.events_endpoint)
					tool_usage_fail("--events ENDPOINT given twice");
				d.events_endpoint = optarg;
			} else {
				if (d.events_path)
					tool_usage_fail("--events PATH given twice");
				d.events_path = optarg;
			}
			break;
		case OPT_STATS:
			stats_sock = optarg;
			break;
		case 'h':
			usage();
			break;
		case 'V':
			tool_version();
			break;
		default:
			tool_bad_option(opt, argv);
		}
	}
	if (optind < argc)
		tool_usage_fail("unexpected argument '%s'", argv[optind]);
	if (stats_sock)
		return print_stats(stats_sock);

	if (nspecs && root_opt)
		tool_usage_fail("--root and --tier exclude each other");
	if (!nspecs) {
		/* Today's one file tier: the shared one, unbounded. */
		specs[0] = (struct tool_tier){ TOOL_TIER_SHARED, strdup(tool_root(root_opt)), 0 };
		nspecs = 1;
	}
	tool_tiers_check(specs, nspecs);
	for (unsigned k = 0; k < nspecs; k++)
		d.tiers[k] = (struct ftier){ .kind = specs[k].kind, .root = specs[k].root,
					     .capacity = specs[k].capacity };
	d.ntiers = nspecs;
	if ((d.promote & KV_TIER_PROMOTE_SECOND_HIT) && kv_hits_new(KV_HITS_SLOTS, &d.first_hits))
		tool_usage_fail("out of memory");
	d.events_endpoint = tool_events_endpoint(d.events_endpoint);
	if (!d.socket_path || !*d.socket_path)
		tool_usage_fail("no socket: give --socket or set KV_DAEMON");
	if (!cpu_bytes)
		tool_usage_fail("--cpu-bytes is required");
	if (slot_opt && d.nclasses)
		tool_usage_fail("--slot-bytes and --size-classes exclude each other");
	if (!d.nclasses) {
		if (d.slot_bytes < KV_IO_ALIGN || d.slot_bytes % KV_IO_ALIGN)
			tool_usage_fail("--slot-bytes must be a multiple of %d", KV_IO_ALIGN);
		d.nclasses = derive_classes(d.slot_bytes, classes);
	}
	if (cpu_bytes < classes[d.nclasses - 1]) {
		kv_size_format(classes[d.nclasses - 1], size, sizeof(size));
		tool_usage_fail("--cpu-bytes must hold at least one slot of the largest size (%s)",
				size);
	}
	d.classes = classes;
	if (threads == 0)
		tool_usage_fail("--write-threads must be at least 1");
	if (ready_fd >= 0 && fcntl(ready_fd, F_GETFD) < 0)
		tool_usage_fail("--ready-fd %d is not open", ready_fd);
	d.pool_bytes = cpu_bytes;
	d.start_ns = kv_monotonic_ns();
	d.lfd = -1;

	/* Signals go to the loop's signalfd; workers inherit the mask. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (tiers_open(&d))
		return EXIT_RUNTIME;
	configs_init(&d.configs);
	err = offd_pool_init(&d);
	if (err) {
		tool_err("cannot create a %llu-byte pool: %s",
			 (unsigned long long)cpu_bytes, kv_strerror(err));
		return EXIT_RUNTIME;
	}
	if (!d.hugepages && check_memory(d.pool_bytes, strict) < 0)
		return EXIT_USAGE;
	err = writer_start(&d, (unsigned)threads,
			   d.npages / 2 < WRITE_QUEUE_MAX ? (d.npages + 1) / 2 : WRITE_QUEUE_MAX);
	if (err) {
		tool_err("cannot start writers: %s", kv_strerror(err));
		return EXIT_RUNTIME;
	}
	err = report_open_events(&d);
	if (err) {
		tool_err("cannot open '%s': %s", d.events_path, kv_strerror(err));
		return EXIT_RUNTIME;
	}
	if (d.events_endpoint) {
		/* Model names from the last cache root's config.json files:
		 * the shared volume's, which the model servers write (a
		 * bucket keeps none). */
		d.rootfd = -1;
		for (unsigned k = d.ntiers; k-- > 0 && d.rootfd < 0;)
			if (!kv_root_is_s3(d.tiers[k].root))
				d.rootfd = tool_root_open(d.tiers[k].root);
		d.publisher = tool_events_open(d.events_endpoint, events_pod(pod, sizeof(pod)));
	}
	err = listen_on(d.socket_path, &d.lfd);
	if (err) {
		tool_err("cannot listen on '%s': %s", d.socket_path,
			 err == -EADDRINUSE ? "another daemon is serving it" : kv_strerror(err));
		return EXIT_RUNTIME;
	}
	/* Sizes as the other tools print them; each tier's blocks beside
	 * its own dir. */
	kv_size_format(d.slot_bytes, size, sizeof(size));
	kv_size_format(cpu_bytes, pool, sizeof(pool));
	kv_size_format(d.classes[0], smallest, sizeof(smallest));
	tool_err("serving %s: a %s pool of %u %s of %s, in %u size %s from %s%s",
		 d.socket_path, pool, d.npages, tool_plural(d.npages, "slot", "slots"), size,
		 d.nclasses, tool_plural(d.nclasses, "class", "classes"), smallest,
		 d.hugepages ? " (huge pages)" : "");
	for (unsigned k = 0; k < d.ntiers; k++) {
		char cap[32] = "unbounded";

		if (d.tiers[k].capacity) {
			strcpy(cap, "of ");
			kv_size_format(d.tiers[k].capacity, cap + 3, sizeof(cap) - 3);
		}
		kv_size_format(d.tiers[k].walk_bytes, size, sizeof(size));
		tool_err("tier %u, %s, %s: %llu %s, %s, %s", k, tier_name(&d, k),
			 d.tiers[k].root, (unsigned long long)d.tiers[k].walk_blocks,
			 tool_plural(d.tiers[k].walk_blocks, "block", "blocks"), size, cap);
	}
	sd_notify_ready();
	err = offd_serve(&d, ready_fd);
	if (d.lfd >= 0)
		unlink(d.socket_path);
	writer_stop(&d);
	report_tier_changes(&d);	/* those of jobs the loop did not see end */
	report_ram_cleared(&d);
	tool_events_close(d.publisher);
	if (err) {
		tool_err("event loop failed: %s", kv_strerror(err));
		return EXIT_RUNTIME;
	}
	err = report_write_metrics(&d);
	tiers_close(&d);
	configs_free(&d.configs);
	kv_hits_free(d.first_hits);
	return err ? EXIT_RUNTIME : 0;
}
