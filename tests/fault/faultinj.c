/*
 * An LD_PRELOAD fault injector for the kvtools reliability suite.
 *
 * It sits between a program and libc (and liburing's submit calls) and
 * makes chosen calls fail, come up short or wait, so tests can check that
 * a program under EIO, ENOSPC, short writes or slow storage reports a
 * clear error, leaves no partial file behind and keeps its promises.
 * Rules come from the environment:
 *
 *   KVFI_FAIL=RULE[,RULE...]   RULE = OP:ERRNO[:after=N][:count=M][:path=S]
 *   KVFI_SHORT=RULE[,RULE...]  RULE = OP:half[:after=N][:count=M][:path=S]
 *   KVFI_DELAY=RULE[,RULE...]  RULE = OP:MS[:after=N][:count=M][:path=S]
 *                                        [:until=FILE]
 *   KVFI_LOG=FILE              one line per injected fault, appended
 *
 * OP is write (write, pwrite, writev, pwritev), fsync (fsync, fdatasync),
 * rename (rename, renameat, renameat2), link (linkat), open (open,
 * openat, creat with O_CREAT or a write mode), fsetxattr, mkdir (mkdir,
 * mkdirat), read (pread, pread64), or any of those with the prefix
 * "uring_" to hit the same
 * operation submitted through io_uring (io_uring bypasses libc, so those
 * are rewritten in the submission queue at io_uring_submit time:
 * a failing request becomes a NOP that completes with -ERRNO, a short
 * write has its length halved, a delayed one is submitted only after the
 * delay, by the thread that submits it).  ERRNO is a name (EIO, ENOSPC,
 * EROFS, EACCES, EDQUOT, ENOTSUP, ...) or a number.  A delay sleeps MS
 * milliseconds (1 to 3600000; or microseconds written Nus, which models
 * a device's latency) before the call goes on, and a FAIL or
 * SHORT rule may still hit it then; with until=FILE the sleep ends as
 * soon as FILE exists, so a test can hold calls back for as long as it
 * needs and let them all go at once, MS only bounding the wait.  after=N lets the first N matching calls through;
 * count=M stops after M injections; path=S only matches calls whose file
 * path contains S.  fd-based calls only ever match regular files, so a
 * program's messages on stderr still get out.
 *
 * KVFI_NO_URING=1 makes io_uring_queue_init*() fail with -ENOSYS, as on a
 * kernel or sandbox without io_uring.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum fi_op {
	OP_WRITE, OP_FSYNC, OP_RENAME, OP_LINK, OP_OPEN, OP_XATTR, OP_MKDIR, OP_READ,
	OP_URING_WRITE, OP_URING_FSYNC, OP_URING_RENAME, OP_URING_LINK,
	OP_URING_OPEN, OP_URING_MKDIR, OP_URING_READ, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
	"write", "fsync", "rename", "link", "open", "fsetxattr", "mkdir", "read",
	"uring_write", "uring_fsync", "uring_rename", "uring_link", "uring_open",
	"uring_mkdir", "uring_read",
};

/* What a rule does to the calls it matches. */
enum fi_kind { FI_FAIL, FI_SHORT, FI_DELAY, FI_KINDS };

static const char *const kind_envs[FI_KINDS] = {
	"KVFI_FAIL", "KVFI_SHORT", "KVFI_DELAY",
};

struct fi_rule {
	enum fi_op op;
	enum fi_kind kind;
	int err;		/* FI_FAIL: errno to fail with */
	unsigned long delay_us;	/* FI_DELAY */
	char until[PATH_MAX];	/* FI_DELAY: ends early once this exists */
	unsigned long after;
	unsigned long count;	/* 0: unlimited */
	char path[PATH_MAX];
	unsigned long seen;	/* matching calls so far */
	unsigned long fired;
};

#define MAX_RULES 16

static struct fi_rule rules[MAX_RULES];
static int nrules;
static int nkind[FI_KINDS];	/* rules of each kind: none, no lookups */
static int no_uring;
static int log_fd = -1;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pread64)(int, void *, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);
static int (*real_linkat)(int, const char *, int, const char *, int);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_creat)(const char *, mode_t);
static int (*real_fsetxattr)(int, const char *, const void *, size_t, int);
static int (*real_mkdir)(const char *, mode_t);
static int (*real_mkdirat)(int, const char *, mode_t);
static int (*real_submit)(struct io_uring *);
static int (*real_submit_and_wait)(struct io_uring *, unsigned);
static int (*real_submit_and_wait_timeout)(struct io_uring *,
					   struct io_uring_cqe **, unsigned,
					   struct __kernel_timespec *, sigset_t *);
static int (*real_submit_and_get_events)(struct io_uring *);
static int (*real_wait_cqes)(struct io_uring *, struct io_uring_cqe **,
			     unsigned, struct __kernel_timespec *, sigset_t *);
static int (*real_queue_init)(unsigned, struct io_uring *, unsigned);
static int (*real_queue_init_params)(unsigned, struct io_uring *,
				     struct io_uring_params *);

static void resolve_all(void);

/* A wrapped function's next definition, found on first use if need be. */
#define REAL(name) (real_##name ? real_##name : (resolve_all(), real_##name))

static const struct { const char *name; int err; } errnames[] = {
	{ "EIO", EIO }, { "ENOSPC", ENOSPC }, { "EDQUOT", EDQUOT },
	{ "EROFS", EROFS }, { "EACCES", EACCES }, { "EPERM", EPERM },
	{ "ENOTSUP", ENOTSUP }, { "EOPNOTSUPP", EOPNOTSUPP },
	{ "EFBIG", EFBIG }, { "EINTR", EINTR }, { "EAGAIN", EAGAIN },
	{ "ENOENT", ENOENT }, { "EEXIST", EEXIST }, { "EXDEV", EXDEV },
	{ "ENOMEM", ENOMEM }, { "EBADF", EBADF }, { "EINVAL", EINVAL },
	{ "EMFILE", EMFILE },
};

static void fi_log(const char *what, const struct fi_rule *r, const char *path)
{
	char line[PATH_MAX + 128];
	int n;

	if (log_fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%d %s %s %s\n", (int)getpid(), what,
		     op_names[r->op], path && *path ? path : "-");
	if (n > 0 && real_write)
		(void)!real_write(log_fd, line,
				  (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* A delay in milliseconds, or microseconds with "us", at most an hour;
 * in microseconds, 0 for a bad one. */
static unsigned long parse_delay_us(const char *s)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (*s < '0' || *s > '9')
		return 0;
	if (!strcmp(end, "us"))
		return v <= 3600000000ul ? v : 0;
	return !*end && v <= 3600000 ? v * 1000 : 0;
}

static int parse_errno(const char *s)
{
	char *end;
	long v;
	size_t i;

	for (i = 0; i < sizeof(errnames) / sizeof(errnames[0]); i++)
		if (!strcmp(s, errnames[i].name))
			return errnames[i].err;
	v = strtol(s, &end, 10);
	return (*s && !*end && v > 0 && v < 4096) ? (int)v : 0;
}

/* One rule of the given kind: "op:what[:key=value...]". */
static void parse_rule(char *text, enum fi_kind kind)
{
	struct fi_rule *r = &rules[nrules];
	char *save = NULL, *tok, whole[PATH_MAX + 64];
	int i, field = 0;

	snprintf(whole, sizeof(whole), "%s", text);	/* strtok_r cuts text up */

	memset(r, 0, sizeof(*r));
	r->kind = kind;
	for (tok = strtok_r(text, ":", &save); tok; tok = strtok_r(NULL, ":", &save), field++) {
		if (field == 0) {
			for (i = 0; i < OP_COUNT && strcmp(tok, op_names[i]); i++)
				;
			if (i == OP_COUNT)
				goto bad;
			r->op = (enum fi_op)i;
		} else if (field == 1) {
			if (kind == FI_SHORT) {
				if (strcmp(tok, "half") ||
				    (r->op != OP_WRITE && r->op != OP_URING_WRITE))
					goto bad;
			} else if (kind == FI_DELAY) {
				if (!(r->delay_us = parse_delay_us(tok)))
					goto bad;
			} else if (!(r->err = parse_errno(tok))) {
				goto bad;
			}
		} else if (kind == FI_DELAY && !strncmp(tok, "until=", 6)) {
			snprintf(r->until, sizeof(r->until), "%s", tok + 6);
		} else if (!strncmp(tok, "after=", 6)) {
			r->after = strtoul(tok + 6, NULL, 10);
		} else if (!strncmp(tok, "count=", 6)) {
			r->count = strtoul(tok + 6, NULL, 10);
		} else if (!strncmp(tok, "path=", 5)) {
			snprintf(r->path, sizeof(r->path), "%s", tok + 5);
		} else {
			goto bad;
		}
	}
	if (field < 2)
		goto bad;
	nrules++;
	nkind[kind]++;
	return;
bad:
	/* A typo must not silently turn a fault test into a pass. */
	fprintf(stderr, "faultinj: bad rule in %s: '%s'\n", kind_envs[kind], whole);
	_exit(125);
}

static void parse_rules(enum fi_kind kind)
{
	char *copy, *save = NULL, *tok;
	const char *v = getenv(kind_envs[kind]);

	if (!v || !*v)
		return;
	copy = strdup(v);
	if (!copy)
		return;
	for (tok = strtok_r(copy, ",", &save); tok && nrules < MAX_RULES;
	     tok = strtok_r(NULL, ",", &save))
		parse_rule(tok, kind);
	free(copy);
}

#define RESOLVE(var, name) (var = (__typeof__(var))dlsym(RTLD_NEXT, name))

/*
 * The next definitions of what we wrap.  Also called from every wrapper:
 * a sanitizer runtime or another library's constructor may write or open
 * before ours has run.
 */
static void resolve_all(void)
{
	static volatile int resolved;

	if (resolved)
		return;
	RESOLVE(real_write, "write");
	RESOLVE(real_pwrite, "pwrite");
	RESOLVE(real_pwrite64, "pwrite64");
	RESOLVE(real_writev, "writev");
	RESOLVE(real_pwritev, "pwritev");
	RESOLVE(real_pwritev2, "pwritev2");
	RESOLVE(real_pread, "pread");
	RESOLVE(real_pread64, "pread64");
	RESOLVE(real_fsync, "fsync");
	RESOLVE(real_fdatasync, "fdatasync");
	RESOLVE(real_rename, "rename");
	RESOLVE(real_renameat, "renameat");
	RESOLVE(real_renameat2, "renameat2");
	RESOLVE(real_linkat, "linkat");
	RESOLVE(real_open, "open");
	RESOLVE(real_open64, "open64");
	RESOLVE(real_openat, "openat");
	RESOLVE(real_openat64, "openat64");
	RESOLVE(real_creat, "creat");
	RESOLVE(real_fsetxattr, "fsetxattr");
	RESOLVE(real_mkdir, "mkdir");
	RESOLVE(real_mkdirat, "mkdirat");
	RESOLVE(real_submit, "io_uring_submit");
	RESOLVE(real_submit_and_wait, "io_uring_submit_and_wait");
	RESOLVE(real_submit_and_wait_timeout, "io_uring_submit_and_wait_timeout");
	RESOLVE(real_submit_and_get_events, "io_uring_submit_and_get_events");
	RESOLVE(real_wait_cqes, "io_uring_wait_cqes");
	RESOLVE(real_queue_init, "io_uring_queue_init");
	RESOLVE(real_queue_init_params, "io_uring_queue_init_params");
	resolved = 1;
}

__attribute__((constructor)) static void fi_init(void)
{
	const char *logp = getenv("KVFI_LOG");

	resolve_all();
	for (int k = 0; k < FI_KINDS; k++)
		parse_rules((enum fi_kind)k);
	no_uring = getenv("KVFI_NO_URING") && !strcmp(getenv("KVFI_NO_URING"), "1");
	if (logp && *logp && real_open)
		log_fd = REAL(open)(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

/* Path of an open fd, or "" if it is not a regular file. */
static void fd_path(int fd, char *buf, size_t len)
{
	char link[64];
	struct stat st;
	ssize_t n;

	buf[0] = '\0';
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode))
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, buf, len - 1);
	buf[n > 0 ? n : 0] = '\0';
	if (n <= 0)
		snprintf(buf, len, "fd:%d", fd);
}

/*
 * The rule for `op` of the given kind that fires for this call, counting
 * the call against it.
 */
static struct fi_rule *match(enum fi_op op, enum fi_kind kind, const char *path)
{
	static const char *const what[FI_KINDS] = { "fail", "short", "delay" };
	int i;

	if (!nkind[kind])
		return NULL;
	for (i = 0; i < nrules; i++) {
		struct fi_rule *r = &rules[i];
		unsigned long seen;

		if (r->op != op || r->kind != kind)
			continue;
		if (r->path[0] && (!path || !strstr(path, r->path)))
			continue;
		seen = __atomic_fetch_add(&r->seen, 1, __ATOMIC_RELAXED);
		if (seen < r->after)
			continue;
		if (r->count && __atomic_fetch_add(&r->fired, 1, __ATOMIC_RELAXED) >= r->count)
			continue;
		fi_log(what[kind], r, path);
		return r;
	}
	return NULL;
}

/* Rule check for an fd-based call; only regular files qualify. */
static struct fi_rule *match_fd(enum fi_op op, enum fi_kind kind, int fd)
{
	char path[PATH_MAX];

	if (!nkind[kind])
		return NULL;
	fd_path(fd, path, sizeof(path));
	if (!path[0])
		return NULL;
	return match(op, kind, path);
}

static struct fi_rule *match_at(enum fi_op op, enum fi_kind kind, int dirfd,
				const char *name)
{
	char path[PATH_MAX], dir[PATH_MAX], link[64];
	ssize_t n;

	if (!nkind[kind])
		return NULL;
	if (!name)
		return match(op, kind, "");
	if (name[0] == '/' || dirfd == AT_FDCWD) {
		snprintf(path, sizeof(path), "%s", name);
	} else {
		snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
		n = readlink(link, dir, sizeof(dir) - 1);
		dir[n > 0 ? n : 0] = '\0';
		snprintf(path, sizeof(path), "%.2000s/%.2000s", dir, name);
	}
	return match(op, kind, path);
}

static ssize_t fail_with(int err)
{
	errno = err;
	return -1;
}

/* A delay rule's wait: its time, or less once its until file exists.
 * The errno of the call it precedes is left alone. */
static void fi_sleep(const struct fi_rule *r)
{
	const int64_t poll_ns = 10 * 1000000LL;
	int64_t left_ns, step_ns, total_ns = (int64_t)r->delay_us * 1000LL;
	struct timespec t0, now, ts;
	int saved = errno;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (r->until[0] && access(r->until, F_OK) == 0)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		left_ns = total_ns - ((int64_t)(now.tv_sec - t0.tv_sec) * 1000000000LL +
				      (now.tv_nsec - t0.tv_nsec));
		if (left_ns <= 0)
			break;
		step_ns = r->until[0] && left_ns > poll_ns ? poll_ns : left_ns;
		ts.tv_sec = (time_t)(step_ns / 1000000000LL);
		ts.tv_nsec = (long)(step_ns % 1000000000LL);
		nanosleep(&ts, NULL);
	}
	errno = saved;
}

static void delay_fd(enum fi_op op, int fd)
{
	struct fi_rule *r = match_fd(op, FI_DELAY, fd);

	if (r)
		fi_sleep(r);
}

static void delay_at(enum fi_op op, int dirfd, const char *name)
{
	struct fi_rule *r = match_at(op, FI_DELAY, dirfd, name);

	if (r)
		fi_sleep(r);
}

ssize_t write(int fd, const void *buf, size_t n)
{
	struct fi_rule *r;

	delay_fd(OP_WRITE, fd);
	if ((r = match_fd(OP_WRITE, FI_FAIL, fd)))
		return fail_with(r->err);
	if (n > 1 && match_fd(OP_WRITE, FI_SHORT, fd))
		n /= 2;
	return REAL(write)(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	struct fi_rule *r;

	delay_fd(OP_WRITE, fd);
	if ((r = match_fd(OP_WRITE, FI_FAIL, fd)))
		return fail_with(r->err);
	if (n > 1 && match_fd(OP_WRITE, FI_SHORT, fd))
		n /= 2;
	return REAL(pwrite)(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	struct fi_rule *r;

	delay_fd(OP_WRITE, fd);
	if ((r = match_fd(OP_WRITE, FI_FAIL, fd)))
		return fail_with(r->err);
	if (n > 1 && match_fd(OP_WRITE, FI_SHORT, fd))
		n /= 2;
	return REAL(pwrite64)(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	struct fi_rule *r;

	delay_fd(OP_WRITE, fd);
	if ((r = match_fd(OP_WRITE, FI_FAIL, fd)))
		return fail_with(r->err);
	if (cnt > 1 && match_fd(OP_WRITE, FI_SHORT, fd))
		cnt /= 2;
	else if (cnt == 1 && iov[0].iov_len > 1 && match_fd(OP_WRITE, FI_SHORT, fd))
		return REAL(write)(fd, iov[0].iov_base, iov[0].iov_len / 2);
	return REAL(writev)(fd, iov, cnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	struct fi_rule *r;

	delay_fd(OP_WRITE, fd);
	if ((r = match_fd(OP_WRITE, FI_FAIL, fd)))
		return fail_with(r->err);
	if (cnt > 1 && match_fd(OP_WRITE, FI_SHORT, fd))
		cnt /= 2;
	else if (cnt == 1 && iov[0].iov_len > 1 && match_fd(OP_WRITE, FI_SHORT, fd))
		return REAL(pwrite)(fd, iov[0].iov_base, iov[0].iov_len / 2, off);
	return REAL(pwritev)(fd, iov, cnt, off);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	struct fi_rule *r;

	delay_fd(OP_WRITE, fd);
	if ((r = match_fd(OP_WRITE, FI_FAIL, fd)))
		return fail_with(r->err);
	if (cnt > 1 && match_fd(OP_WRITE, FI_SHORT, fd))
		cnt /= 2;
	return REAL(pwritev2)(fd, iov, cnt, off, flags);
}

/* Reads of block files: kv_io's path without io_uring. */
ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	struct fi_rule *r;

	delay_fd(OP_READ, fd);
	if ((r = match_fd(OP_READ, FI_FAIL, fd)))
		return fail_with(r->err);
	return REAL(pread)(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
	struct fi_rule *r;

	delay_fd(OP_READ, fd);
	if ((r = match_fd(OP_READ, FI_FAIL, fd)))
		return fail_with(r->err);
	return REAL(pread64)(fd, buf, n, off);
}

int fsync(int fd)
{
	struct fi_rule *r;

	delay_fd(OP_FSYNC, fd);
	r = match_fd(OP_FSYNC, FI_FAIL, fd);
	return r ? (int)fail_with(r->err) : REAL(fsync)(fd);
}

int fdatasync(int fd)
{
	struct fi_rule *r;

	delay_fd(OP_FSYNC, fd);
	r = match_fd(OP_FSYNC, FI_FAIL, fd);
	return r ? (int)fail_with(r->err) : REAL(fdatasync)(fd);
}

int rename(const char *from, const char *to)
{
	struct fi_rule *r;

	delay_at(OP_RENAME, AT_FDCWD, to);
	r = match_at(OP_RENAME, FI_FAIL, AT_FDCWD, to);
	return r ? (int)fail_with(r->err) : REAL(rename)(from, to);
}

int renameat(int fromfd, const char *from, int tofd, const char *to)
{
	struct fi_rule *r;

	delay_at(OP_RENAME, tofd, to);
	r = match_at(OP_RENAME, FI_FAIL, tofd, to);
	return r ? (int)fail_with(r->err) : REAL(renameat)(fromfd, from, tofd, to);
}

int renameat2(int fromfd, const char *from, int tofd, const char *to,
	      unsigned flags)
{
	struct fi_rule *r;

	delay_at(OP_RENAME, tofd, to);
	r = match_at(OP_RENAME, FI_FAIL, tofd, to);
	return r ? (int)fail_with(r->err)
		 : REAL(renameat2)(fromfd, from, tofd, to, flags);
}

int linkat(int fromfd, const char *from, int tofd, const char *to, int flags)
{
	struct fi_rule *r;

	delay_at(OP_LINK, tofd, to);
	r = match_at(OP_LINK, FI_FAIL, tofd, to);
	return r ? (int)fail_with(r->err)
		 : REAL(linkat)(fromfd, from, tofd, to, flags);
}

/* O_TMPFILE includes O_DIRECTORY's bit, so test for all of it. */
static int takes_mode(int flags)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

static int opens_for_writing(int flags)
{
	return takes_mode(flags) || (flags & O_ACCMODE) != O_RDONLY;
}

static mode_t open_mode(int flags, va_list ap)
{
	return takes_mode(flags) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
	struct fi_rule *r;
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	if (opens_for_writing(flags))
		delay_at(OP_OPEN, AT_FDCWD, path);
	if (opens_for_writing(flags) && (r = match_at(OP_OPEN, FI_FAIL, AT_FDCWD, path)))
		return (int)fail_with(r->err);
	return REAL(open)(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	struct fi_rule *r;
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	if (opens_for_writing(flags))
		delay_at(OP_OPEN, AT_FDCWD, path);
	if (opens_for_writing(flags) && (r = match_at(OP_OPEN, FI_FAIL, AT_FDCWD, path)))
		return (int)fail_with(r->err);
	return REAL(open64)(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	struct fi_rule *r;
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	if (opens_for_writing(flags))
		delay_at(OP_OPEN, dirfd, path);
	if (opens_for_writing(flags) && (r = match_at(OP_OPEN, FI_FAIL, dirfd, path)))
		return (int)fail_with(r->err);
	return REAL(openat)(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	struct fi_rule *r;
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	if (opens_for_writing(flags))
		delay_at(OP_OPEN, dirfd, path);
	if (opens_for_writing(flags) && (r = match_at(OP_OPEN, FI_FAIL, dirfd, path)))
		return (int)fail_with(r->err);
	return REAL(openat64)(dirfd, path, flags, mode);
}

int creat(const char *path, mode_t mode)
{
	struct fi_rule *r;

	delay_at(OP_OPEN, AT_FDCWD, path);
	r = match_at(OP_OPEN, FI_FAIL, AT_FDCWD, path);
	return r ? (int)fail_with(r->err) : REAL(creat)(path, mode);
}

int fsetxattr(int fd, const char *name, const void *value, size_t size,
	      int flags)
{
	struct fi_rule *r;

	delay_fd(OP_XATTR, fd);
	r = match_fd(OP_XATTR, FI_FAIL, fd);
	return r ? (int)fail_with(r->err)
		 : REAL(fsetxattr)(fd, name, value, size, flags);
}

int mkdir(const char *path, mode_t mode)
{
	struct fi_rule *r;

	delay_at(OP_MKDIR, AT_FDCWD, path);
	r = match_at(OP_MKDIR, FI_FAIL, AT_FDCWD, path);
	return r ? (int)fail_with(r->err) : REAL(mkdir)(path, mode);
}

int mkdirat(int dirfd, const char *path, mode_t mode)
{
	struct fi_rule *r;

	delay_at(OP_MKDIR, dirfd, path);
	r = match_at(OP_MKDIR, FI_FAIL, dirfd, path);
	return r ? (int)fail_with(r->err) : REAL(mkdirat)(dirfd, path, mode);
}

/*
 * io_uring: look at the requests queued since the last submit and rewrite
 * those a rule picks.  A failure becomes a NOP whose result the kernel
 * reports as given (IORING_NOP_INJECT_RESULT, Linux 6.10+); a short write
 * keeps the request with half the length, rounded to 4 KiB where the
 * length allows, so O_DIRECT requests stay aligned; a delay holds the
 * submitting thread before anything queued reaches the kernel.
 */
#define FI_NOP_INJECT_RESULT (1u << 0)

static enum fi_op uring_op(unsigned char opcode)
{
	switch (opcode) {
	case IORING_OP_WRITE: case IORING_OP_WRITEV: case IORING_OP_WRITE_FIXED:
		return OP_URING_WRITE;
	case IORING_OP_FSYNC: case IORING_OP_SYNC_FILE_RANGE:
		return OP_URING_FSYNC;
	case IORING_OP_RENAMEAT:
		return OP_URING_RENAME;
	case IORING_OP_LINKAT:
		return OP_URING_LINK;
	case IORING_OP_OPENAT: case IORING_OP_OPENAT2:
		return OP_URING_OPEN;
	case IORING_OP_MKDIRAT:
		return OP_URING_MKDIR;
	case IORING_OP_READ: case IORING_OP_READV: case IORING_OP_READ_FIXED:
		return OP_URING_READ;
	default:
		return OP_COUNT;
	}
}

static void uring_rewrite(struct io_uring *ring)
{
	unsigned i;

	if (!nrules)
		return;
	for (i = ring->sq.sqe_head; i != ring->sq.sqe_tail; i++) {
		struct io_uring_sqe *sqe = &ring->sq.sqes[i & ring->sq.ring_mask];
		enum fi_op op = uring_op(sqe->opcode);
		char path[PATH_MAX];
		struct fi_rule *r;

		if (op == OP_COUNT)
			continue;
		path[0] = '\0';
		if (!(sqe->flags & IOSQE_FIXED_FILE) &&
		    (op == OP_URING_WRITE || op == OP_URING_FSYNC || op == OP_URING_READ))
			fd_path(sqe->fd, path, sizeof(path));
		else if (op == OP_URING_OPEN || op == OP_URING_MKDIR)
			snprintf(path, sizeof(path), "%s", (const char *)(uintptr_t)sqe->addr);
		else if (op == OP_URING_RENAME || op == OP_URING_LINK)
			snprintf(path, sizeof(path), "%s", (const char *)(uintptr_t)sqe->addr2);
		if ((r = match(op, FI_DELAY, path)))
			fi_sleep(r);
		if ((r = match(op, FI_FAIL, path))) {
			__u64 user_data = sqe->user_data;
			__u8 flags = sqe->flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK |
						   IOSQE_IO_DRAIN | IOSQE_ASYNC |
						   IOSQE_CQE_SKIP_SUCCESS);

			memset(sqe, 0, sizeof(*sqe));
			sqe->opcode = IORING_OP_NOP;
			sqe->flags = flags;
			sqe->rw_flags = FI_NOP_INJECT_RESULT;
			sqe->len = (__u32)-r->err;
			sqe->user_data = user_data;
		} else if (op == OP_URING_WRITE && match(op, FI_SHORT, path)) {
			if (sqe->opcode == IORING_OP_WRITEV)
				sqe->len = sqe->len > 1 ? sqe->len / 2 : sqe->len;
			else if (sqe->len >= 8192)
				sqe->len = (sqe->len / 2) & ~4095u;
			else if (sqe->len > 1)
				sqe->len /= 2;
		}
	}
}

int io_uring_submit(struct io_uring *ring)
{
	uring_rewrite(ring);
	return REAL(submit)(ring);
}

int io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr)
{
	uring_rewrite(ring);
	return REAL(submit_and_wait)(ring, wait_nr);
}

int io_uring_submit_and_wait_timeout(struct io_uring *ring,
				     struct io_uring_cqe **cqe, unsigned wait_nr,
				     struct __kernel_timespec *ts, sigset_t *sigmask)
{
	uring_rewrite(ring);
	return REAL(submit_and_wait_timeout)(ring, cqe, wait_nr, ts, sigmask);
}

int io_uring_submit_and_get_events(struct io_uring *ring)
{
	uring_rewrite(ring);
	return REAL(submit_and_get_events)(ring);
}

/* With a timeout, liburing submits what is queued before waiting. */
int io_uring_wait_cqes(struct io_uring *ring, struct io_uring_cqe **cqe,
		       unsigned wait_nr, struct __kernel_timespec *ts,
		       sigset_t *sigmask)
{
	uring_rewrite(ring);
	return REAL(wait_cqes)(ring, cqe, wait_nr, ts, sigmask);
}

int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags)
{
	return no_uring ? -ENOSYS : REAL(queue_init)(entries, ring, flags);
}

int io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
			       struct io_uring_params *p)
{
	return no_uring ? -ENOSYS : REAL(queue_init_params)(entries, ring, p);
}
