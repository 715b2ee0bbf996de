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

/* "prog (kvtools) VERSION" on stdout, exit 0. */
void tool_version(void) __attribute__((noreturn));

/* --root or $KV_ROOT; exits 2 naming both when neither is set. */
const char *tool_root(const char *opt);

/* Option values: exit 2 with "invalid --opt value 'x'" on junk. */
uint64_t tool_parse_size(const char *opt, const char *text);
uint64_t tool_parse_duration_ns(const char *opt, const char *text);
uint64_t tool_parse_uint(const char *opt, const char *text, uint64_t max);

/* The model dir named by --model-dir (checked: exit 2 if malformed) or
 * hashed from --config's file (exit 3 if unreadable); with rootfd >= 0
 * it and its config.json are created there when missing. */
void tool_model_dir(const char *model_dir, const char *config, int rootfd,
		    char *out, size_t len);

/* kvoffd for --daemon: the option, else $KV_DAEMON, else NULL. */
const char *tool_daemon(const char *opt);

/* Connect to the daemon at sock, or say why not and exit 4 (3 for a
 * failure that is not about reaching it). */
struct kv_offd *tool_daemon_connect(const char *sock);

/* The exit status for a failed daemon call: 4 unreachable, else 3. */
int tool_daemon_exit(int err);

/* 1 if a failed daemon call left its connection unusable (the daemon
 * went away, or the frames fell out of step), so a batch must stop. */
int tool_daemon_lost(int err);

/* One JSON value on its own line, keys sorted; steals a reference. */
void tool_json_print(json_t *value);

/* Flush stdout; on a write error say so and exit 3.  Called at exit. */
void tool_close_stdout(void);

#endif
