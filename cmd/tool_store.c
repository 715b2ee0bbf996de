/*
 * The store kvput, kvget and kvls work on, chosen once: the file tier at
 * --root, a bucket, kvoffd at --daemon, or a hierarchy of --tier options
 * chained in libkv.  Everything after goes through kv_tier; only the
 * words of a message and the exit status tell them apart.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/file.h>
#include "tool.h"

/* How long the daemon may take: $KV_DAEMON_TIMEOUT (a duration, "0"
 * for ever), else libkv's default.  Junk there is a usage error. */
static unsigned daemon_timeout_ms(void)
{
	const char *env = getenv("KV_DAEMON_TIMEOUT");
	uint64_t ns;

	if (!env || !*env)
		return KV_OFFD_TIMEOUT_MS;
	ns = tool_parse_duration_ns("$KV_DAEMON_TIMEOUT", env);
	/* A deadline below a millisecond would round to "for ever". */
	return ns && ns < 1000000 ? 1 : ns / 1000000 > UINT32_MAX ? UINT32_MAX :
	       (unsigned)(ns / 1000000);
}

/* The message for a daemon that failed us: a timeout says which knob. */
static void daemon_err(const char *daemon, int err)
{
	if (err == -ETIMEDOUT)
		tool_err("no answer from the daemon at '%s' in time ($KV_DAEMON_TIMEOUT)",
			 daemon);
	else
		tool_err("cannot reach daemon at '%s': %s", daemon, kv_strerror(err));
}

const char *tool_daemon(const char *opt)
{
	const char *env = getenv("KV_DAEMON");

	if (opt)
		return opt;
	return env && *env ? env : NULL;
}

void tool_store_open(struct tool_store *s, const char *daemon, const char *root,
		     const struct kv_io_opts *opts)
{
	struct kv_tier_stat st;
	int err;

	memset(s, 0, sizeof(*s));
	s->daemon = daemon;
	s->root = root;
	if (!daemon && kv_root_is_s3(root)) {
		err = kv_tier_s3_open(root, opts, &s->tier);
		if (err < 0) {
			tool_root_err("open", root, err);
			exit(EXIT_RUNTIME);
		}
		return;
	}
	if (!daemon) {
		err = kv_tier_file_open(root, opts, &s->tier);
		/* A missing root: tool_root_open says it in its words. */
		if (err == -ENOENT)
			close(tool_root_open(root));
		if (err < 0) {
			tool_err("cannot open '%s': %s", root, kv_strerror(err));
			exit(EXIT_RUNTIME);
		}
		return;
	}
	err = kv_tier_daemon_open(daemon, daemon_timeout_ms(), &s->tier);
	if (err == 0) {
		err = kv_tier_stat(s->tier, &st);
		if (err < 0)
			kv_tier_close(s->tier);
	}
	if (err < 0) {
		daemon_err(daemon, err);
		exit(tool_store_exit(s, err));
	}
	s->block_max = st.block_max_bytes;
}

static const char *const tier_kinds[] = { [TOOL_TIER_LOCAL] = "local",
					   [TOOL_TIER_SHARED] = "shared" };

const char *tool_tier_kind_name(enum tool_tier_kind kind)
{
	return tier_kinds[kind];
}

/* KIND:PATH or KIND:PATH:SIZE; a PATH with a colon in it is taken
 * whole when what follows its last colon is not a size. */
void tool_tier_parse(const char *arg, struct tool_tier *tiers, unsigned *n)
{
	const char *colon = strchr(arg, ':');
	struct tool_tier *t;
	char *last;

	if (*n == TOOL_TIERS_MAX)
		tool_usage_fail("--tier: at most %d file tiers", TOOL_TIERS_MAX);
	t = &tiers[*n];
	if (!colon)
		tool_usage_fail("--tier '%s': expected KIND:PATH[:SIZE]", arg);
	if ((size_t)(colon - arg) == 5 && !strncmp(arg, "local", 5))
		t->kind = TOOL_TIER_LOCAL;
	else if ((size_t)(colon - arg) == 6 && !strncmp(arg, "shared", 6))
		t->kind = TOOL_TIER_SHARED;
	else
		tool_usage_fail("--tier '%s': the kind is local or shared", arg);
	t->root = strdup(colon + 1);
	if (!t->root)
		tool_usage_fail("out of memory");
	t->capacity = 0;
	last = strrchr(t->root, ':');
	if (last && last[1] >= '0' && last[1] <= '9') {
		t->capacity = tool_parse_size("--tier", last + 1);
		*last = '\0';
		if (!t->capacity)
			tool_usage_fail("--tier '%s': a capacity of 0 holds nothing", arg);
	}
	if (!*t->root)
		tool_usage_fail("--tier '%s': no path", arg);
	tool_root_check(t->root);
	(*n)++;
}

void tool_tiers_check(const struct tool_tier *tiers, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		if (kv_root_is_s3(tiers[k].root) && tiers[k].capacity)
			tool_usage_fail("--tier %s:%s: a bucket is not bounded by a SIZE",
					tool_tier_kind_name(tiers[k].kind), tiers[k].root);
		if (k + 1 < n && !tiers[k].capacity)
			tool_usage_fail("--tier %s:%s needs a SIZE: only the last tier may be "
					"unbounded", tool_tier_kind_name(tiers[k].kind), tiers[k].root);
	}
}

unsigned tool_parse_promote(const char *text)
{
	if (!strcmp(text, "first-hit"))
		return KV_TIER_PROMOTE;
	if (!strcmp(text, "second-hit"))
		return KV_TIER_PROMOTE_SECOND_HIT;
	if (!strcmp(text, "never"))
		return 0;
	tool_usage_fail("invalid --promote '%s' (first-hit, second-hit or never)", text);
}

void tool_store_open_tiers(struct tool_store *s, const struct tool_tier *tiers, unsigned n,
			   unsigned promote, const struct kv_io_opts *opts)
{
	int err = 0;

	memset(s, 0, sizeof(*s));
	s->root = tiers[0].root;
	for (unsigned k = 0; k < n; k++) {
		const char *root = tiers[k].root;

		if (kv_root_is_s3(root))
			err = kv_tier_s3_open(root, opts, &s->chain[k]);
		else if (tiers[k].capacity)
			err = kv_tier_file_open_bounded(root, opts, tiers[k].capacity, &s->chain[k]);
		else
			err = kv_tier_file_open(root, opts, &s->chain[k]);
		if (err == -ENOENT && !kv_root_is_s3(root))
			close(tool_root_open(root));
		if (err < 0) {
			tool_root_err("open", root, err);
			exit(EXIT_RUNTIME);
		}
		s->nchain = k + 1;
		snprintf(s->tiers + strlen(s->tiers), sizeof(s->tiers) - strlen(s->tiers),
			 "%s'%s'", k ? ", " : "", root);
		if (k)
			err = kv_tier_chain(s->chain[k - 1], s->chain[k],
					    KV_TIER_SPILL | promote);
		if (err < 0) {
			tool_err("cannot chain '%s' below '%s': %s", root, tiers[k - 1].root,
				 kv_strerror(err));
			exit(EXIT_RUNTIME);
		}
	}
	s->tier = s->chain[0];
}

void tool_store_close(struct tool_store *s)
{
	if (!s->nchain)
		kv_tier_close(s->tier);
	for (unsigned k = 0; k < s->nchain; k++)
		kv_tier_close(s->chain[k]);
	s->nchain = 0;
	s->tier = NULL;
}

int tool_store_lost(const struct tool_store *s, int err)
{
	return s->daemon && (err == -ECONNRESET || err == -EPIPE || err == -KV_EPROTO ||
			     err == -ETIMEDOUT);
}

int tool_daemon_exit(int err)
{
	return err == -ENOENT || err == -ECONNREFUSED || err == -ECONNRESET ||
	       err == -EPIPE || err == -EACCES || err == -ETIMEDOUT ? EXIT_DAEMON : EXIT_RUNTIME;
}

int tool_store_exit(const struct tool_store *s, int err)
{
	return s->daemon ? tool_daemon_exit(err) : EXIT_RUNTIME;
}

struct kv_offd *tool_daemon_connect(const char *sock)
{
	struct kv_offd *c;
	int err = kv_offd_connect_timeout(sock, daemon_timeout_ms(), &c);

	if (err) {
		daemon_err(sock, err);
		exit(tool_daemon_exit(err));
	}
	return c;
}

/* The hash a block path ends in, for the daemon's messages. */
static const char *hash_of(const char *relpath, struct kv_block_ref *ref)
{
	return kv_layout_block_parse(relpath, ref) == 0 ? ref->hash : relpath;
}

void tool_store_where(const struct tool_store *s, const char *relpath, char *buf,
		      size_t len)
{
	struct kv_block_ref ref;

	if (s->daemon)
		snprintf(buf, len, "block %s in the daemon at '%s'", hash_of(relpath, &ref),
			 s->daemon);
	else
		snprintf(buf, len, "'%s/%s'", s->root, relpath);
}

void tool_store_err(const struct tool_store *s, enum tool_store_verb verb,
		    const char *relpath, int err)
{
	static const char *const file_verbs[] = {
		[TOOL_STORE_PUT] = "store", [TOOL_STORE_GET] = "read",
		[TOOL_STORE_OPEN] = "open",
	};
	struct kv_block_ref ref;
	const char *hash = hash_of(relpath, &ref);

	if (verb == TOOL_STORE_MISS && s->nchain > 1)
		tool_err("no block %s in the tiers %s", hash, s->tiers);
	else if (verb == TOOL_STORE_MISS && s->daemon)
		tool_err("no block %s in the daemon at '%s'", hash, s->daemon);
	else if (verb == TOOL_STORE_MISS)
		tool_err("no block %s at '%s/%s'", hash, s->root, relpath);
	else if (s->daemon && verb == TOOL_STORE_PUT)
		tool_err("cannot put %s into the daemon at '%s': %s", hash, s->daemon,
			 kv_strerror(err));
	else if (s->daemon)
		tool_err("cannot get %s from the daemon at '%s': %s", hash, s->daemon,
			 kv_strerror(err));
	else if (kv_root_is_s3(s->root) && *kv_error_detail())
		tool_err("cannot %s '%s/%s': %s: %s", file_verbs[verb], s->root, relpath,
			 kv_strerror(err), kv_error_detail());
	else
		tool_err("cannot %s '%s/%s': %s", file_verbs[verb], s->root, relpath,
			 kv_strerror(err));
}

/* A root that is not there, said in the one set of words every program
 * uses for it: most often a volume not mounted.  0 when it is there. */
static int root_missing(const char *root)
{
	if (kv_root_is_s3(root) || access(root, F_OK) == 0 || errno != ENOENT)
		return 0;
	tool_err("cache root '%s' does not exist: not mounted, or not made yet?", root);
	return 1;
}

void tool_root_err(const char *verb, const char *root, int err)
{
	if (err == -ENOENT && root_missing(root))
		return;
	/* A bounded tier's root another process claims: say who. */
	if (err == -EBUSY && *kv_error_detail())
		tool_err("cannot %s '%s': another process keeps its LRU: %s", verb, root,
			 kv_error_detail());
	/* A bucket's failure has its bucket, endpoint and S3 code to say; a
	 * use journal that cannot be read, its name. */
	else if (*kv_error_detail())
		tool_err("cannot %s '%s': %s: %s", verb, root, kv_strerror(err), kv_error_detail());
	else
		tool_err("cannot %s '%s': %s", verb, root, kv_strerror(err));
}

int tool_root_open(const char *root)
{
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err;

	if (fd >= 0)
		return fd;
	err = errno;
	if (err != ENOENT || !root_missing(root))
		tool_err("cannot open '%s': %s", root, strerror(err));
	exit(EXIT_RUNTIME);
}

int tool_root_managed(const char *root, char *who, size_t len)
{
	int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd, err;
	struct stat st, rst;
	ssize_t n;

	if (dfd < 0)
		return -errno;
	if (fstatat(dfd, TOOL_OFFD_LOCK, &st, AT_SYMLINK_NOFOLLOW) < 0 || fstat(dfd, &rst) < 0) {
		err = errno;
		close(dfd);
		return err == ENOENT ? 0 : -err;
	}
	/* kvoffd makes its claim 0600, as root, the root's owner or this
	 * user: anything else anyone could have made or could hold. */
	if (!S_ISREG(st.st_mode) || (st.st_mode & 077) ||
	    (st.st_uid != 0 && st.st_uid != geteuid() && st.st_uid != rst.st_uid)) {
		close(dfd);
		return 0;
	}
	fd = openat(dfd, TOOL_OFFD_LOCK, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	err = fd < 0 ? -errno : 0;
	close(dfd);
	if (err == -ENOENT)
		return 0;
	if (err == -EACCES) {
		/* Another user's daemon: taken as live, as its lock cannot be tried. */
		snprintf(who, len, "a claim of uid %u", (unsigned)st.st_uid);
		return 1;
	}
	if (err)
		return err;
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		close(fd);
		return 0;
	}
	err = errno == EWOULDBLOCK ? 1 : -errno;
	n = err == 1 ? read(fd, who, len - 1) : 0;
	who[n > 0 ? n : 0] = '\0';
	who[strcspn(who, "\n")] = '\0';
	close(fd);
	return err;
}
