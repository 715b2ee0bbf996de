/*
 * kvput: store blocks in a cache root at the paths vLLM reads them from.
 *
 * One block from a file or stdin, or many from an NDJSON manifest with
 * --batch: manifest lines are read and their payloads loaded while up to
 * --qd earlier ones are in flight (kv_io_batch_stream), so a batch moves
 * at the speed of the device rather than of one write at a time.  Input
 * files are mapped, not copied: their page-cache pages go straight to
 * the (O_DIRECT) write.  With --daemon the store is kvoffd's RAM tier
 * instead, a batch over one connection; the code is the same (kv_tier).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../tool.h"
#include "kvput.h"
#include "manifest.h"

#define READ_CHUNK_BYTES	(1u << 20)
#define DEFAULT_QD		32
#define MAX_QD			1024
/* A model config gives tokens per block but not bytes per token (no head
 * count or size), so the default cannot come from it: 1 GiB is far above
 * any block upstream writes and far below what ends a machine. */
#define DEFAULT_MAX_BLOCK_BYTES	(1ull << 30)
#define MAX_MAX_BLOCK_BYTES	(1ull << 50)

enum {
	OPT_RANK = 256, OPT_GROUP, OPT_FSYNC, OPT_BUFFERED, OPT_REPLACE, OPT_QD, OPT_DAEMON,
	OPT_MAX_BLOCK_BYTES, OPT_EVENTS, OPT_ARCHIVE,
};

/*
 * A block's bytes: a file's pages mapped straight from the page cache
 * (no copy; O_DIRECT writes from them), anonymous pages read from stdin
 * or a pipe, or our own aligned buffer for base64.
 */
struct payload {
	void *buf;		/* ours, reused from block to block */
	size_t cap;
	void *map;		/* a mapped file or what was read, or NULL */
	size_t map_len;
	const void *data;
	size_t len;
	char why[PATH_MAX + 128];	/* why it could not be loaded */
};

/* One manifest line on its way to disk. */
struct slot {
	struct kv_tier_req req;
	struct slot *next_free;
	unsigned long line;
	char hash[KV_HASH_MAX_LEN + 1];
	char relpath[PATH_MAX];
	struct payload payload;
};

struct batch {
	struct put *put;
	struct tool_lines in;
	struct slot *free;
	unsigned inflight;	/* handed to the store, not yet done */
};

static void usage(void)
{
	printf("Usage: kvput [--root DIR] (--model-dir DIR | --config FILE) [--rank N] [--group N]\n"
	       "             [--fsync] [--buffered] [--replace] [--max-block-bytes SIZE]\n"
	       "             [--events ENDPOINT] [-J] HASH [FILE|-]\n"
	       "       kvput [--root DIR] (--model-dir DIR | --config FILE) [--rank N] [--group N]\n"
	       "             [--fsync] [--buffered] [--replace] [--max-block-bytes SIZE]\n"
	       "             [--qd N] [--events ENDPOINT] --batch [MANIFEST|-]\n"
	       "       kvput --daemon SOCK [--root DIR] (--model-dir DIR | --config FILE)\n"
	       "             [--rank N] [--group N] [--max-block-bytes SIZE] [-J] HASH [FILE|-]\n"
	       "       kvput --daemon SOCK [--root DIR] (--model-dir DIR | --config FILE)\n"
	       "             [--rank N] [--group N] [--max-block-bytes SIZE] --batch [MANIFEST|-]\n"
	       "       kvput [--root DIR] [--fsync] [--buffered] [--replace]\n"
	       "             [--max-block-bytes SIZE] [--qd N]\n"
	       "             [--events ENDPOINT] --archive FILE|-\n"
	       "       kvput -h | -V\n"
	       "\n"
	       "Store a KV-cache block (FILE, or stdin) under HASH, atomically, at the\n"
	       "path vLLM's file tier reads it from.  As vLLM's and llm-d's writers do, a\n"
	       "block already there is kept and its atime stamped (\"existed\":true in a\n"
	       "batch result), unless --replace.  With --batch, read NDJSON lines\n"
	       "{\"hash\":H,\"file\":F} or {\"hash\":H,\"data_b64\":B} (optional \"rank\",\n"
	       "\"group\") from MANIFEST or stdin and print one NDJSON result per line.\n"
	       "With --archive, restore the blocks of a kvget --archive stream, each\n"
	       "checked, with their model dirs and config.json, and print one result\n"
	       "per entry.\n"
	       "\n"
	       "  -r, --root DIR         the cache root, or a bucket s3://BUCKET[/PREFIX]\n"
	       "                         (default $KV_ROOT)\n"
	       "  -m, --model-dir DIR    the model dir, <model>_<fingerprint>\n"
	       "  -c, --config FILE      a model config.json: its model dir is named from\n"
	       "                         it and created with the config if missing (with\n"
	       "                         --daemon, only when a root is given)\n"
	       "      --rank N           the worker's global rank (default 0)\n"
	       "      --group N          KV-cache group (default 0)\n"
	       "      --fsync            make each block durable before its rename\n"
	       "      --buffered         never use O_DIRECT\n"
	       "      --replace          replace a block already there\n"
	       "      --max-block-bytes SIZE\n"
	       "                         refuse a block larger than SIZE (default 1G; with\n"
	       "                         --daemon, at most the daemon's slot size)\n"
	       "  -J, --json             print the block's result record (one HASH; --batch\n"
	       "                         and --archive print one per block already)\n"
	       "  -b, --batch            read a manifest of blocks\n"
	       "      --archive FILE     restore the blocks of an archive (- for stdin); a\n"
	       "                         damaged entry is refused, the rest restored\n"
	       "      --qd N             blocks in flight in a batch (default %d)\n"
	       "      --daemon SOCK      put the blocks into kvoffd's RAM tier at SOCK, which\n"
	       "                         writes them behind (default $KV_DAEMON)\n"
	       "      --events ENDPOINT  publish a BlockStored KV event for each block stored\n"
	       "                         (not for one kept) on a ZMQ endpoint for llm-d's\n"
	       "                         indexer: tcp://HOST:PORT (connect), tcp://*:PORT or\n"
	       "                         ipc://PATH (bind); default $KV_EVENTS.  With\n"
	       "                         --daemon, kvoffd --events announces instead\n"
	       "  -h, --help             show this help and exit\n"
	       "  -V, --version          show the version and exit\n"
	       "\n"
	       "Exit status: 0 stored, 2 usage error, 3 a block could not be stored,\n"
	       "4 the daemon could not be reached.\n",
	       DEFAULT_QD);
	exit(0);
}

/* Read fd to its end into an anonymous mapping, p's map, that grows
 * without a copy (mremap moves pages), so it costs what was read and no
 * more; -EFBIG, having read at most max + 1 bytes, past max. */
static int read_all(struct payload *p, int fd, size_t max)
{
	size_t n = 0, cap = 0, room = max + 1;
	char *map = NULL;
	int ret = 0;

	for (;;) {
		ssize_t r;

		if (n == cap) {
			size_t ncap = cap ? cap * 2 : READ_CHUNK_BYTES;
			void *nm;

			if (n == room) {
				ret = -EFBIG;
				break;
			}
			if (ncap > room)
				ncap = room;
			nm = map ? mremap(map, cap, ncap, MREMAP_MAYMOVE) :
				   mmap(NULL, ncap, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (nm == MAP_FAILED) {
				ret = -ENOMEM;
				break;
			}
			map = nm;
			cap = ncap;
		}
		r = read(fd, map + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			break;
		}
		if (r == 0)
			break;
		n += r;
	}
	if (ret < 0) {
		if (map)
			munmap(map, cap);
		return ret;
	}
	p->map = map;
	p->map_len = cap;
	p->data = map;
	p->len = n;
	return 0;
}

/* "the 1.0G block limit (--max-block-bytes)", for a refusal. */
static const char *block_limit(const struct put *put, char *buf, size_t len)
{
	char size[32];

	kv_size_format(put->max_block_bytes, size, sizeof(size));
	snprintf(buf, len, "the %s block limit (%s)", size, put->max_block_from);
	return buf;
}

static int payload_refuse(struct payload *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* -1, with why said in p->why. */
static int payload_refuse(struct payload *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->why, sizeof(p->why), fmt, ap);
	va_end(ap);
	return -1;
}

static void payload_release(struct payload *p)
{
	if (p->map)
		munmap(p->map, p->map_len);
	p->map = NULL;
}

/* The bytes of fd, named name in messages: 0, or -1 and why. */
static int payload_fd(const struct put *put, struct payload *p, int fd, const char *name)
{
	char limit[128];
	struct stat st;
	int ret;

	payload_release(p);
	if (fstat(fd, &st) < 0)
		return payload_refuse(p, "cannot read '%s': %s", name, strerror(errno));
	/* Refused before a byte is read: the size says it all. */
	if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > put->max_block_bytes)
		return payload_refuse(p, "'%s': larger than %s", name,
				      block_limit(put, limit, sizeof(limit)));
	if (S_ISREG(st.st_mode) && st.st_size > 0) {
		p->map = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p->map != MAP_FAILED) {
			p->map_len = p->len = st.st_size;
			p->data = p->map;
			return 0;
		}
		p->map = NULL;
	}
	ret = read_all(p, fd, put->max_block_bytes);
	if (ret == -EFBIG)
		return payload_refuse(p, "'%s': larger than %s", name,
				      block_limit(put, limit, sizeof(limit)));
	if (ret < 0)
		return payload_refuse(p, "cannot read '%s': %s", name, kv_strerror(ret));
	return 0;
}

/* A payload file must be a regular one: a FIFO or a device would hang
 * us or never end.  O_NONBLOCK lets the open of a FIFO return. */
static int payload_file(const struct put *put, struct payload *p, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), ret;
	struct stat st;

	if (fd < 0)
		return payload_refuse(p, "cannot read '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) < 0)
		ret = payload_refuse(p, "cannot read '%s': %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		ret = payload_refuse(p, "'%s': not a regular file", path);
	else
		ret = payload_fd(put, p, fd, path);
	close(fd);
	return ret;
}

/* A mapped input file cut short under us faults on access. */
static void on_sigbus(int sig)
{
	static const char msg[] = "kvput: an input file shrank while it was being stored\n";

	(void)sig;
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(EXIT_RUNTIME);
	_exit(EXIT_RUNTIME);
}

void announce(struct put *put, const char *relpath)
{
	struct kv_block_ref ref;

	if (put->events && kv_layout_block_parse(relpath, &ref) == 0)
		kv_events_publish_block(put->events, KV_EVENT_BLOCK_STORED,
					KV_EVENTS_SHARED_STORAGE, put->rootfd, &ref);
}

/* --- batch ------------------------------------------------------------ */

void print_result(struct put *put, const char *hash, const char *relpath,
		  unsigned long line, size_t size, int existed, const char *error)
{
	json_t *rec = json_pack("{s:s}", "status", error ? "error" : "ok");

	if (put->seq_key)
		json_object_set_new(rec, put->seq_key, json_integer((json_int_t)line));
	/* As upstream's writers: a block already there is kept, a hit. */
	if (existed)
		json_object_set_new(rec, "existed", json_true());
	if (hash)
		json_object_set_new(rec, "hash", json_string(hash));
	if (relpath)
		json_object_set_new(rec, "path", json_string(relpath));
	if (error)
		json_object_set_new(rec, "error", json_string(error));
	else
		json_object_set_new(rec, "size_bytes", json_integer((json_int_t)size));
	tool_json_print(rec);
	/* Out as soon as its block is stored: a reader of our output,
	 * or one left after a crash, knows every block we reported. */
	fflush(stdout);
	if (error)
		put->failed++;
}

/* A line that cannot be stored, why as tool_lines_refuse said it. */
static void bad_line(struct batch *b, const char *hash, const char *relpath,
		     const char *why)
{
	print_result(b->put, hash, relpath, b->in.line, 0, 0, why);
}

/* Turn one manifest line into a ready request in s; 0 on success. */
static int load_line(struct batch *b, char *text, struct slot *s)
{
	const struct tool_record_opts o = { .model_dir = b->put->model_dir,
					    .rank = b->put->rank, .group = b->put->group,
					    .model_opts = 1, .line_max = b->in.max };
	struct manifest_line m;
	char limit[128];
	int ret;

	ret = manifest_line_parse(text, &o, &m);
	if (ret < 0) {
		bad_line(b, m.rec.record_hash, m.rec.record_path,
			 tool_lines_refuse(&b->in, "%s", m.rec.error));
		goto out;
	}
	strcpy(s->hash, m.rec.ref.hash);
	strcpy(s->relpath, m.rec.relpath);
	if (m.file) {
		ret = payload_file(b->put, &s->payload, m.file);
	} else {
		payload_release(&s->payload);
		ret = manifest_b64_decode(m.data_b64, &s->payload.buf, &s->payload.cap,
					  &s->payload.len);
		s->payload.data = s->payload.buf;
		if (ret < 0)
			ret = payload_refuse(&s->payload, "invalid \"data_b64\": %s",
					     ret == -EINVAL ? "not base64" : kv_strerror(ret));
		else if (s->payload.len > b->put->max_block_bytes)
			ret = payload_refuse(&s->payload, "\"data_b64\": larger than %s",
					     block_limit(b->put, limit, sizeof(limit)));
	}
	if (ret < 0)
		bad_line(b, s->hash, s->relpath, tool_lines_refuse(&b->in, "%s", s->payload.why));
	else {
		s->line = b->in.line;
		s->req = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = s->relpath,
					       .buf = (void *)s->payload.data,
					       .len = s->payload.len, .user = s };
	}
out:
	tool_record_free(&m.rec);
	return ret;
}

/* The next manifest line that loads into s: 1, else 0 at the end or
 * -EIO on a read error (said).  Bad lines are reported on the way.
 * While blocks are in flight only a line already here is taken (else
 * -EAGAIN): their results must not wait for input yet to be written. */
static int next_line(struct batch *b, struct slot *s)
{
	char *text;
	int ret;

	while ((ret = b->inflight ? tool_lines_ready(&b->in, &text) :
				    tool_lines_next(&b->in, &text)) == 1)
		if (load_line(b, text, s) == 0)
			return 1;
	return ret;
}

static int batch_next(void *arg, struct kv_tier_req **req)
{
	struct batch *b = arg;
	struct slot *s = b->free;
	int ret;

	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -ENOMEM;
	} else {
		b->free = s->next_free;
	}
	ret = next_line(b, s);
	if (ret == 1) {
		b->inflight++;
		*req = &s->req;
		return 1;
	}
	s->next_free = b->free;
	b->free = s;
	/* None for now: the store asks again after each done(), and with
	 * nothing in flight we wait for input. */
	return ret == -EAGAIN ? 0 : ret;
}

static void batch_done(void *arg, struct kv_tier_req *req)
{
	struct batch *b = arg;
	struct slot *s = req->user;

	b->inflight--;
	if (req->result < 0) {
		tool_store_err(&b->put->store, TOOL_STORE_PUT, s->relpath, req->result);
		print_result(b->put, s->hash, s->relpath, s->line, 0, 0,
			     kv_strerror(req->result));
	} else {
		print_result(b->put, s->hash, s->relpath, s->line, req->done,
			     req->existed, NULL);
		if (!req->existed)
			announce(b->put, s->relpath);
	}
	payload_release(&s->payload);
	s->next_free = b->free;
	b->free = s;
}

/* Losing the daemon stops a batch: its last line is an error record. */
static int run_batch(struct put *put, const char *manifest)
{
	struct batch b = { .put = put };
	struct slot *s;
	int ret;

	/* The manifest is MANIFEST, or stdin when absent or "-". */
	if (tool_lines_open(&b.in, manifest) < 0)
		return EXIT_RUNTIME;
	/* A record may carry its block as "data_b64": room for the largest. */
	b.in.max = TOOL_LINE_MAX + (size_t)((put->max_block_bytes + 2) / 3 * 4);
	ret = kv_tier_batch_stream(put->store.tier, batch_next, batch_done, &b);
	if (tool_store_lost(&put->store, ret))
		tool_err("batch stopped at %s:%lu: lost the daemon", b.in.name, b.in.line);
	else if (ret < 0 && ret != -EIO)
		tool_err("batch stopped: %s", kv_strerror(ret));
	while ((s = b.free)) {
		b.free = s->next_free;
		kv_io_buf_free(s->payload.buf);
		free(s);
	}
	tool_lines_close(&b.in);
	if (tool_store_lost(&put->store, ret))
		return tool_store_exit(&put->store, ret);
	return ret < 0 || put->failed ? EXIT_RUNTIME : 0;
}

/* --- one block -------------------------------------------------------- */

struct one {
	struct kv_tier_req req;
	int given;
};

static int one_next(void *arg, struct kv_tier_req **req)
{
	struct one *o = arg;

	if (o->given)
		return 0;
	o->given = 1;
	*req = &o->req;
	return 1;
}

static void one_done(void *arg, struct kv_tier_req *req)
{
	(void)arg;
	(void)req;
}

static int put_one(struct put *put, const char *hash, const char *file)
{
	struct payload payload = { 0 };
	char relpath[PATH_MAX];
	struct one one = { 0 };
	int ret;

	put->seq_key = NULL;	/* one block's record has no line */
	ret = kv_layout_block_path(put->model_dir, put->rank, put->group, hash, relpath,
				   sizeof(relpath));
	if (ret < 0) {
		tool_err("cannot compose a block path for '%s': %s", hash, kv_strerror(ret));
		return EXIT_RUNTIME;
	}
	/* Stdin may be a pipe or a device: only its size is bounded. */
	if (strcmp(file, "-"))
		ret = payload_file(put, &payload, file);
	else
		ret = payload_fd(put, &payload, STDIN_FILENO, "<stdin>");
	if (ret < 0) {
		tool_err("%s", payload.why);
		if (put->json)
			print_result(put, hash, relpath, 0, 0, 0, payload.why);
		ret = EXIT_RUNTIME;
	} else {
		/* as a batch of one, to learn whether the block was kept */
		one.req = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = relpath,
						.buf = (void *)payload.data, .len = payload.len };
		/* >= 0: how many failed, the one's own result says why */
		ret = kv_tier_batch_stream(put->store.tier, one_next, one_done, &one);
		if (ret >= 0)
			ret = one.req.result;
		if (ret < 0) {
			tool_store_err(&put->store, TOOL_STORE_PUT, relpath, ret);
			if (put->json)
				print_result(put, hash, relpath, 0, 0, 0, kv_strerror(ret));
			ret = tool_store_exit(&put->store, ret);
		} else {
			if (!one.req.existed)
				announce(put, relpath);
			if (put->json)
				print_result(put, hash, relpath, 0, one.req.done, one.req.existed,
					     NULL);
		}
	}
	payload_release(&payload);
	return ret;
}

/* --- main ------------------------------------------------------------- */

/* --root, else $KV_ROOT, else NULL: the daemon needs no root. */
static const char *root_if_any(const char *opt)
{
	const char *env = getenv("KV_ROOT");

	if (opt && *opt)
		return opt;
	return env && *env ? env : NULL;
}

/* The daemon's file tiers may hold no config.json of this model dir:
 * give it the config, so that every tier a block lands on has its model
 * dir whole. */
static int give_config(struct put *put, const char *config)
{
	struct kv_config *cfg;
	char *text = NULL;
	int rc = kv_config_load(AT_FDCWD, config, &cfg);

	if (rc == 0) {
		rc = kv_config_canonical(cfg, &text);
		kv_config_free(cfg);
	}
	if (rc == 0)
		rc = kv_tier_put_config(put->store.tier, put->model_dir, text, strlen(text));
	free(text);
	if (rc < 0)
		tool_err("cannot give the daemon the config '%s': %s", config, kv_strerror(rc));
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "root", required_argument, NULL, 'r' },
		{ "model-dir", required_argument, NULL, 'm' },
		{ "config", required_argument, NULL, 'c' },
		{ "rank", required_argument, NULL, OPT_RANK },
		{ "group", required_argument, NULL, OPT_GROUP },
		{ "fsync", no_argument, NULL, OPT_FSYNC },
		{ "buffered", no_argument, NULL, OPT_BUFFERED },
		{ "replace", no_argument, NULL, OPT_REPLACE },
		{ "batch", no_argument, NULL, 'b' },
		{ "json", no_argument, NULL, 'J' },
		{ "qd", required_argument, NULL, OPT_QD },
		{ "daemon", required_argument, NULL, OPT_DAEMON },
		{ "max-block-bytes", required_argument, NULL, OPT_MAX_BLOCK_BYTES },
		{ "events", required_argument, NULL, OPT_EVENTS },
		{ "archive", required_argument, NULL, OPT_ARCHIVE },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct kv_io_opts opts = { .queue_depth = DEFAULT_QD };
	const char *root_opt = NULL, *model_dir = NULL, *config = NULL;
	const char *daemon_opt = NULL, *daemon, *root, *events_opt = NULL, *endpoint;
	struct put put = { .max_block_bytes = DEFAULT_MAX_BLOCK_BYTES,
			   .max_block_from = "--max-block-bytes", .seq_key = "line" };
	const char *archive = NULL;
	uint64_t max_block;
	char hash[KV_HASH_MAX_LEN + 1];
	int c, batch = 0, rootfd, ret;

	tool_init("kvput");
	signal(SIGBUS, on_sigbus);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":r:m:c:bJhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': root_opt = optarg; break;
		case 'm': model_dir = optarg; break;
		case 'c': config = optarg; break;
		case OPT_RANK: put.rank = tool_parse_uint("--rank", optarg, UINT_MAX); break;
		case OPT_GROUP: put.group = tool_parse_uint("--group", optarg, UINT_MAX); break;
		case OPT_FSYNC: opts.flags |= KV_IO_FSYNC; break;
		case OPT_BUFFERED: opts.flags |= KV_IO_BUFFERED; break;
		case OPT_REPLACE: opts.flags |= KV_IO_REPLACE; break;
		case 'b': batch = 1; break;
		case 'J': put.json = 1; break;
		case OPT_QD:
			opts.queue_depth = tool_parse_uint("--qd", optarg, MAX_QD);
			if (!opts.queue_depth)
				tool_usage_fail("invalid --qd value '0' (an integer 1..%d)", MAX_QD);
			break;
		case OPT_DAEMON: daemon_opt = optarg; break;
		case OPT_EVENTS: events_opt = optarg; break;
		case OPT_MAX_BLOCK_BYTES:
			max_block = tool_parse_size("--max-block-bytes", optarg);
			if (!max_block || max_block > MAX_MAX_BLOCK_BYTES)
				tool_usage_fail("invalid --max-block-bytes size '%s' (1 to 1P)",
						optarg);
			put.max_block_bytes = max_block;
			break;
		case OPT_ARCHIVE: archive = optarg; break;
		case 'h': usage(); break;
		case 'V': tool_version(); break;
		default:
			tool_bad_option(c, argv);
		}
	}
	if (put.json && (batch || archive))
		tool_usage_fail("-J prints one block's record: --batch and --archive print "
				"one per block already");
	if (archive) {
		/* Each entry names its own model dir, rank and group. */
		if (model_dir || config || put.rank || put.group || batch || optind != argc)
			tool_usage_fail("--archive takes no --model-dir, --config, --rank, --group, "
					"--batch or HASH: each entry names its block");
		if (tool_daemon(daemon_opt))
			tool_usage_fail("--archive restores into the file tier: drop --daemon "
					"(and $KV_DAEMON)");
		if (!strcmp(archive, "-") && isatty(STDIN_FILENO))
			tool_usage_fail("refusing to read an archive from a terminal");
		root = tool_root(root_opt);
		if (kv_root_is_s3(root))
			tool_usage_fail("--archive restores into a file tier, not a bucket");
		endpoint = tool_events_endpoint(events_opt);
		if (endpoint) {
			put.rootfd = tool_root_open(root);
			put.events = tool_events_open(endpoint, NULL);
		}
		ret = restore_archive(&put, root, archive, &opts);
		tool_events_close(put.events);
		if (put.events)
			close(put.rootfd);
		return ret;
	}
	if (!model_dir == !config)
		tool_usage_fail("give one of --model-dir and --config");
	if (batch ? argc - optind > 1 : argc - optind < 1 || argc - optind > 2)
		tool_usage_fail(batch ? "--batch takes at most one MANIFEST" :
				"give HASH and at most one FILE");
	if (!batch && kv_layout_hash_normalize(argv[optind], hash, sizeof(hash)) < 0)
		tool_usage_fail("invalid hash '%s' (want 5 to 128 hex digits)", argv[optind]);
	/* $KV_DAEMON routes every put, a batch too, as --daemon does. */
	daemon = tool_daemon(daemon_opt);
	root = daemon ? root_if_any(root_opt) : tool_root(root_opt);
	/* Through the daemon, the daemon announces what it writes behind. */
	if (daemon && events_opt)
		tool_usage_fail("--events with --daemon: kvoffd --events announces its blocks");
	endpoint = daemon ? NULL : tool_events_endpoint(events_opt);
	/* --config's model dir and config.json go to the root, daemon or
	 * not: the daemon writes blocks behind into that layout. */
	/* A bucket has no model dirs: vLLM's obj tier writes no config.json,
	 * and neither does kvput there. */
	rootfd = root && !kv_root_is_s3(root) ? tool_root_open(root) : -1;
	tool_model_dir(model_dir, config, config ? rootfd : -1, put.rank, put.model_dir,
		       sizeof(put.model_dir));
	/* A rank dir beside no model dir is an orphan that no reader can
	 * name a config for: --model-dir must name one that is there. */
	if (model_dir && rootfd >= 0 && !daemon && !kv_root_is_s3(root) &&
	    faccessat(rootfd, model_dir, F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
		tool_err("model dir '%s' does not exist under '%s': give --config to create it",
			 model_dir, root);
		return EXIT_RUNTIME;
	}
	tool_store_open(&put.store, daemon, root, &opts);
	if (daemon && config && give_config(&put, config) < 0)
		return EXIT_RUNTIME;
	if (put.store.block_max && put.store.block_max < put.max_block_bytes) {
		put.max_block_bytes = put.store.block_max;
		put.max_block_from = "the daemon's --slot-bytes";
	}
	put.rootfd = rootfd;
	put.events = tool_events_open(endpoint, NULL);
	/* A bucket has no config.json to name the model by: --config does. */
	if (put.events && config && rootfd < 0) {
		struct kv_config *cfg;

		if (kv_config_load(AT_FDCWD, config, &cfg) == 0) {
			kv_events_name_model_dir(put.events, put.model_dir, cfg);
			kv_config_free(cfg);
		}
	}
	ret = batch ? run_batch(&put, argv[optind]) :
		put_one(&put, hash, argc - optind > 1 ? argv[optind + 1] : "-");
	tool_store_close(&put.store);
	tool_events_close(put.events);
	if (rootfd >= 0)
		close(rootfd);
	return ret;
}
