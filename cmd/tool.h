/*
 * What every kvtools program shares: exit codes, error messages in one
 * format, option-value parsing that exits 2 on junk, JSON output with
 * sorted keys, and a checked stdout.  Programs reach libkv only through
 * <kv/kv.h>; this file is front-end glue, not library.
 */
#ifndef KV_TOOL_H
#define KV_TOOL_H

#include <stdint.h>
#include <stdio.h>
#include <jansson.h>
#include <kv/kv.h>

enum {
	EXIT_ANSWER_NO = 1,	/* a negative answer: absent, nothing to do */
	EXIT_USAGE = 2,
	EXIT_RUNTIME = 3,
	EXIT_DAEMON = 4,
};

/* Set the program name for messages and register the stdout check. */
void tool_init(const char *name);
extern const char *tool_name;

/* "prog: message" on stderr. */
void tool_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "prog: message" then "Try 'prog --help' ..." and exit 2. */
void tool_usage_fail(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

/* A getopt_long error (c: '?' or ':'; opterr = 0 and an optstring that
 * starts with ':') in getopt's words, under the program's name, and
 * exit 2: the one form of every program's option errors. */
void tool_bad_option(int c, char *const argv[]) __attribute__((noreturn));

/* Progress of long work on stderr, only when it is a terminal: quiet
 * for the first second, then one line redrawn at most 4 times a second
 * (cmd/tool_progress.c). */
struct tool_progress {
	int on, shown;
	int64_t next_ns;
};
void tool_progress_init(struct tool_progress *p);
/* "prog: TEXT" over the last line, when one is due. */
void tool_progress_show(struct tool_progress *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Clear the line, if one was shown. */
void tool_progress_done(struct tool_progress *p);

/* Memory this process may still take without swapping: MemAvailable,
 * or less where its cgroup (v2) allows less; 0 when unknown. */
uint64_t tool_mem_available(void);

/* "prog (kvtools) VERSION" on stdout, exit 0. */
void tool_version(void) __attribute__((noreturn));

/* --root or $KV_ROOT; exits 2 naming both when neither is set, or
 * naming why kv_root_check refuses it. */
const char *tool_root(const char *opt);

/* Exit 2 naming why kv_root_check refuses root (a bucket root with a
 * "." or ".." segment...). */
void tool_root_check(const char *root);

/* Option values: exit 2 with "invalid --opt value 'x'" on junk. */
uint64_t tool_parse_size(const char *opt, const char *text);
uint64_t tool_parse_duration_ns(const char *opt, const char *text);
uint64_t tool_parse_uint(const char *opt, const char *text, uint64_t max);

/* The noun for n things, one or many: "1 block", "0 blocks", "2 blocks". */
const char *tool_plural(uint64_t n, const char *one, const char *many);

/* The model dir named by --model-dir (checked: exit 2 if malformed) or
 * hashed from --config's file (exit 3 if unreadable); with rootfd >= 0
 * it and its config.json are created there when missing.  Nothing is
 * created unless the rank dir for rank fits in a name. */
void tool_model_dir(const char *model_dir, const char *config, int rootfd,
		    unsigned rank, char *out, size_t len);

/* kvoffd for --daemon: the option, else $KV_DAEMON, else NULL. */
const char *tool_daemon(const char *opt);

/* Connect to the daemon at sock, or say why not and exit 4 (3 for a
 * failure that is not about reaching it): kvoffd --stats. */
struct kv_offd *tool_daemon_connect(const char *sock);

/* The exit status for a failed daemon call: 4 unreachable, else 3. */
int tool_daemon_exit(int err);

/* --tier KIND:DIR[:SIZE] (kvoffd, kvget): a file tier of a hierarchy,
 * local (this node's disk) or shared; SIZE bounds it, 0 unbounded. */
#define TOOL_TIERS_MAX	4
enum tool_tier_kind { TOOL_TIER_LOCAL, TOOL_TIER_SHARED };
struct tool_tier {
	enum tool_tier_kind kind;
	char *root;
	uint64_t capacity;
};

/* Parse one --tier into tiers[*n] (usage error past TOOL_TIERS_MAX or on
 * a bad spec); tool_tiers_check: every tier but the last has a SIZE. */
void tool_tier_parse(const char *arg, struct tool_tier *tiers, unsigned *n);
void tool_tiers_check(const struct tool_tier *tiers, unsigned n);
const char *tool_tier_kind_name(enum tool_tier_kind kind);

/* --promote first-hit|second-hit|never: when a hit below the first tier
 * is copied up to it, as libkv's flags (KV_TIER_PROMOTE,
 * KV_TIER_PROMOTE_SECOND_HIT or 0; kv_tier_promotes). */
unsigned tool_parse_promote(const char *text);

/* The one store a program works on (cmd/tool_store.c). */
struct tool_store {
	struct kv_tier *tier;
	const char *root;	/* the file tier's root; a chain: its first */
	const char *daemon;	/* kvoffd's socket; NULL: the file tier */
	size_t block_max;	/* the largest block it holds; 0: no limit */
	struct kv_tier *chain[TOOL_TIERS_MAX];	/* --tier: tier is chain[0] */
	unsigned nchain;
	char tiers[1024];	/* a chain's roots for messages: "'A', 'B'" */
};

/* kvoffd at daemon, else the file tier at root with opts; says why and
 * exits (4 unreachable, 3) when it cannot be opened. */
void tool_store_open(struct tool_store *s, const char *daemon, const char *root,
		     const struct kv_io_opts *opts);
void tool_store_close(struct tool_store *s);

/* The hierarchy of --tier options, each below the one before, blocks
 * spilled down as the bounded ones fill and hits below copied up by
 * promote; says why and exits 3 when a tier cannot be opened. */
void tool_store_open_tiers(struct tool_store *s, const struct tool_tier *tiers, unsigned n,
			   unsigned promote, const struct kv_io_opts *opts);

/* --config FILE, repeatable: the configs of model dirs that hold no
 * config.json (a bucket's), for tables and event topics. */
#define TOOL_CONFIGS_MAX 64
struct kv_config;
/* Load FILE into configs[*n] (usage error past the limit, exit 3 on a bad
 * file). */
void tool_config_add(struct kv_config **configs, unsigned *n, const char *file);
/* Name each config's model dir for events (no-op without events). */
struct kv_events;
void tool_events_name(struct kv_events *ev, struct kv_config *const *configs, unsigned n);

/* "cannot VERB 'ROOT': why", with a bucket's detail (endpoint, S3 code);
 * a root that does not exist in the words tool_root_open says it in. */
void tool_root_err(const char *verb, const char *root, int err);

/* Open the cache root as a directory, or say why not and exit 3: a
 * missing one is most often a volume not mounted. */
int tool_root_open(const char *root);

/* kvoffd's claim on a file tier it bounds and keeps the LRU of: libkv's
 * bounded tier claim (kv/tier.h), holding "pid PID socket PATH". */
#define TOOL_OFFD_LOCK	KV_TIER_LOCK

/* 1 when a live kvoffd manages root (its words in who), 0 when none
 * does (no claim, or a stale one), -errno. */
int tool_root_managed(const char *root, char *who, size_t len);

/* The exit status for a failed store call: 4 when the daemon cannot be
 * reached or went away, else 3. */
int tool_store_exit(const struct tool_store *s, int err);

/* 1 if err lost the daemon's connection, so a batch must stop. */
int tool_store_lost(const struct tool_store *s, int err);

/* How messages name a block: 'ROOT/PATH', or "block H in the daemon at 'S'". */
void tool_store_where(const struct tool_store *s, const char *relpath, char *buf,
		      size_t len);

/* Say that a call on the block at relpath failed with err (unused for a
 * miss), in the store's words: "cannot store 'ROOT/PATH': ...", "cannot
 * put H into the daemon at 'S': ...", "no block H at ...". */
enum tool_store_verb { TOOL_STORE_PUT, TOOL_STORE_GET, TOOL_STORE_OPEN, TOOL_STORE_MISS };
void tool_store_err(const struct tool_store *s, enum tool_store_verb verb,
		    const char *relpath, int err);

/* Batch input (cmd/tool_lines.c): NDJSON lines from a file or stdin,
 * numbered, blank ones skipped; a refused line is said on stderr as
 * "NAME:LINE: why", and its result record carries the same words. */
/* A line over max (0: TOOL_LINE_MAX, tool_record.h) is handed over cut
 * to max + 1 bytes, its rest dropped as it comes, and tool_record_parse
 * with the same line_max refuses it: input without newlines costs no
 * more. */

struct tool_lines {
	int fd;
	const char *name;	/* the file, or "<stdin>" */
	unsigned long line;	/* number of the last line read */
	char *buf;		/* read ahead; [start, end) not handed out yet */
	size_t cap, start, end;
	size_t scanned;		/* [start, scanned) holds no newline */
	int eof;
	size_t max;		/* the longest line; 0: TOOL_LINE_MAX */
	int skipping;		/* inside an over-long line's rest */
	char why[512];		/* the last refusal */
};

/* Read path (NULL or "-": stdin): 0, or -1 when it cannot be opened (said). */
int tool_lines_open(struct tool_lines *l, const char *path);

/* The next non-blank line, modifiable until the next call: 1 and *text,
 * 0 at the end, -EIO on a read error (said). */
int tool_lines_next(struct tool_lines *l, char **text);

/* tool_lines_next without waiting: -EAGAIN when no whole line has come. */
int tool_lines_ready(struct tool_lines *l, char **text);

/* Say why the current line is refused; the message, for its record. */
const char *tool_lines_refuse(struct tool_lines *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

void tool_lines_close(struct tool_lines *l);

/* KV events (cmd/tool_events.c).  The endpoint from --events (opt) or
 * $KV_EVENTS, checked (exit 2 when malformed); NULL when neither is set. */
const char *tool_events_endpoint(const char *opt);

/* A publisher on endpoint (NULL: none), or exit 2/3 saying why. */
struct kv_events *tool_events_open(const char *endpoint, const char *pod);
struct kv_events *tool_events_open_opts(const char *endpoint, const struct kv_events_opts *opts);

/* Close with the bounded linger; say on stderr what was not delivered.
 * 1 when something was not, 0 otherwise. */
int tool_events_close(struct kv_events *ev);

/* One JSON value on its own line, keys sorted; steals a reference. */
void tool_json_print(json_t *value);

/* Flush stdout; on a write error say so and exit 3.  Called at exit. */
void tool_close_stdout(void);

#endif
