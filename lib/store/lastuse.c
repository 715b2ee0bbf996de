/*
 * Last use: atime, or later a use recorded in the root's journals.  The
 * journals are for blocks that cannot be stamped; see kv/lastuse.h for
 * their format and why they exist.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <kv/integrity.h>
#include <kv/io.h>
#include <kv/lastuse.h>
#include <kv/layout.h>
#include <kv/units.h>
#include <kv/kv.h>
#include "store/lastuse.h"
#include "store/s3.h"
#include "util/error.h"
#include "beneath.h"

struct use {
	uint64_t hash;
	int64_t when_ns;
	char *path;		/* NULL: an empty bucket */
};

struct kv_uses {
	struct use *v;
	size_t mask, count;
};

int kv_uses_new(struct kv_uses **out)
{
	struct kv_uses *u = calloc(1, sizeof(*u));

	if (!u)
		return -ENOMEM;
	u->v = calloc(64, sizeof(*u->v));
	if (!u->v) {
		free(u);
		return -ENOMEM;
	}
	u->mask = 63;
	*out = u;
	return 0;
}

void kv_uses_free(struct kv_uses *u)
{
	if (!u)
		return;
	for (size_t i = 0; i <= u->mask; i++)
		free(u->v[i].path);
	free(u->v);
	free(u);
}

size_t kv_uses_count(const struct kv_uses *u)
{
	return u ? u->count : 0;
}

static struct use *slot(const struct kv_uses *u, const char *path, uint64_t h)
{
	size_t i = (size_t)h & u->mask;

	while (u->v[i].path && (u->v[i].hash != h || strcmp(u->v[i].path, path)))
		i = (i + 1) & u->mask;
	return &u->v[i];
}

static int grow(struct kv_uses *u)
{
	size_t n = 2 * (u->mask + 1);
	struct use *old = u->v, *v = calloc(n, sizeof(*v));
	size_t oldn = u->mask + 1;

	if (!v)
		return -ENOMEM;
	u->v = v;
	u->mask = n - 1;
	for (size_t i = 0; i < oldn; i++)
		if (old[i].path)
			*slot(u, old[i].path, old[i].hash) = old[i];
	free(old);
	return 0;
}

/* relpath's use into u, its path already checked. */
static int insert(struct kv_uses *u, const char *relpath, int64_t when_ns)
{
	uint64_t h;
	struct use *s;

	if (2 * (u->count + 1) > u->mask + 1 && grow(u) < 0)
		return -ENOMEM;
	h = kv_xxh3(relpath, strlen(relpath));
	s = slot(u, relpath, h);
	if (s->path) {
		if (when_ns > s->when_ns)
			s->when_ns = when_ns;
		return 0;
	}
	s->path = strdup(relpath);
	if (!s->path)
		return -ENOMEM;
	s->hash = h;
	s->when_ns = when_ns;
	u->count++;
	return 0;
}

int kv_uses_add(struct kv_uses *u, const char *relpath, int64_t when_ns)
{
	struct kv_block_ref ref;

	if (when_ns <= 0 || kv_layout_block_parse(relpath, &ref) < 0)
		return -EINVAL;
	return insert(u, relpath, when_ns);
}

int64_t kv_uses_get(const struct kv_uses *u, const char *relpath)
{
	const struct use *s;

	if (!u || !u->count)
		return 0;
	s = slot(u, relpath, kv_xxh3(relpath, strlen(relpath)));
	return s->path ? s->when_ns : 0;
}

int64_t kv_last_use_ns(const struct kv_uses *u, const char *relpath, int64_t atime_ns)
{
	int64_t used = kv_uses_get(u, relpath);

	return used > atime_ns ? used : atime_ns;
}

/* ---- the readers: journals in pieces ---- */

#define READ_PIECE_BYTES	(1u << 20)	/* a journal file is read this much at a time */

void kvi_uses_feed_init(struct kvi_uses_feed *f, struct kv_uses *u,
			int (*keep)(const char *relpath, void *arg), void *arg)
{
	f->u = u;
	f->keep = keep;
	f->arg = arg;
	f->latest_ns = kv_now_ns() + KV_USES_FUTURE_NS;
	kvi_uses_feed_restart(f);
}

void kvi_uses_feed_restart(struct kvi_uses_feed *f)
{
	f->lines = f->bad = 0;
	f->held = 0;
	f->overlong = 0;
}

/* "<ns> <path>" without its newline (len < KV_USES_LINE_MAX): 0, or
 * -EINVAL for a bad line. */
static int parse_line(struct kvi_uses_feed *f, const char *line, size_t len)
{
	char path[KV_USES_LINE_MAX];
	struct kv_block_ref ref;
	int64_t when = 0;
	size_t i = 0;

	for (; i < len && line[i] >= '0' && line[i] <= '9'; i++) {
		if (when > (INT64_MAX - 9) / 10)
			return -EINVAL;
		when = when * 10 + (line[i] - '0');
	}
	if (!i || i >= len || line[i] != ' ' || when <= 0 || when > f->latest_ns)
		return -EINVAL;
	i++;
	if (memchr(line + i, '\0', len - i))
		return -EINVAL;
	memcpy(path, line + i, len - i);
	path[len - i] = '\0';
	if (kv_layout_block_parse(path, &ref) < 0)
		return -EINVAL;
	if (f->keep && !f->keep(path, f->arg))
		return 0;
	return insert(f->u, path, when);
}

static int end_line(struct kvi_uses_feed *f, const char *line, size_t len)
{
	int rc = parse_line(f, line, len);

	f->lines++;
	if (rc == -EINVAL)
		f->bad++;
	return rc == -ENOMEM ? rc : 0;
}

int kvi_uses_feed(struct kvi_uses_feed *f, const char *text, size_t len)
{
	while (len) {
		const char *nl = memchr(text, '\n', len);
		size_t n = nl ? (size_t)(nl - text) : len;
		int rc = 0;

		if (f->overlong || f->held + n >= KV_USES_LINE_MAX) {
			/* Too long to be a use: dropped as it comes. */
			f->overlong = 1;
			f->held = 0;
			if (nl) {
				f->lines++;
				f->bad++;
				f->overlong = 0;
			}
		} else if (nl && !f->held) {
			rc = end_line(f, text, n);
		} else {
			memcpy(f->line + f->held, text, n);
			f->held += n;
			if (nl) {
				rc = end_line(f, f->line, f->held);
				f->held = 0;
			}
		}
		if (rc)
			return rc;
		if (!nl)
			break;
		text = nl + 1;
		len -= n + 1;
	}
	return 0;
}

int kv_uses_parse(struct kv_uses *u, const char *text, size_t len, uint64_t *bad)
{
	struct kvi_uses_feed f;
	int rc;

	kvi_uses_feed_init(&f, u, NULL, NULL);
	rc = kvi_uses_feed(&f, text, len);
	if (bad)
		*bad += f.bad;
	return rc;
}

/* Everything a journal file holds, read a piece at a time from its
 * start: 0, -ENOMEM, or the -errno of a read that failed. */
static int read_fd(struct kvi_uses_feed *f, int fd, char *buf)
{
	off_t at = 0;

	for (;;) {
		ssize_t n = pread(fd, buf, READ_PIECE_BYTES, at);
		int rc;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		rc = kvi_uses_feed(f, buf, (size_t)n);
		if (rc)
			return rc;
		at += n;
	}
}

/* One journal of dirfd into u: 0 with what it holds, or -errno, the
 * journal named in kv_error_detail().  What is not a regular file (a
 * symlink, a FIFO, one gone since listed) is no journal: 0. */
static int load_file(struct kvi_uses_feed *f, int dirfd, const char *name, char *buf)
{
	int fd = kvi_open_beneath(dirfd, name, O_RDONLY | O_NONBLOCK, 0, 0);
	struct stat st;
	int rc;

	if (fd == -ENOENT || fd == -ELOOP || fd == -ENXIO || fd == -EXDEV)
		return 0;
	if (fd < 0)
		return kvi_fail(fd, "cannot open use journal '%s/%s': %s", KV_USES_DIR, name,
				strerror(-fd));
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		close(fd);
		return kvi_fail(rc, "cannot stat use journal '%s/%s': %s", KV_USES_DIR, name,
				strerror(-rc));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	kvi_uses_feed_restart(f);
	rc = read_fd(f, fd, buf);
	close(fd);
	if (rc && rc != -ENOMEM)
		return kvi_fail(rc, "cannot read use journal '%s/%s': %s", KV_USES_DIR, name,
				strerror(-rc));
	return rc;
}

static int is_journal_name(const char *name)
{
	size_t n = strlen(name), s = strlen(KV_USES_SUFFIX);

	return name[0] != '.' && n > s && !strcmp(name + n - s, KV_USES_SUFFIX);
}

int kv_uses_load(int rootfd, int (*keep)(const char *relpath, void *arg), void *arg,
		 struct kv_uses **out)
{
	int dirfd = kvi_open_beneath(rootfd, KV_USES_DIR, O_RDONLY | O_DIRECTORY, 0, 0);
	struct kvi_uses_feed *f = NULL;
	struct kv_uses *u = NULL;
	char *buf = NULL;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	*out = NULL;
	/* No dir, or something else where it would be: no journal. */
	if (dirfd == -ENOENT || dirfd == -ENOTDIR || dirfd == -ELOOP || dirfd == -EXDEV)
		return 0;
	if (dirfd < 0)
		return kvi_fail(dirfd, "cannot open '%s': %s", KV_USES_DIR, strerror(-dirfd));
	d = fdopendir(dirfd);
	if (!d) {
		rc = -errno;
		close(dirfd);
		return rc;
	}
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				rc = kvi_fail(-errno, "cannot read '%s': %s", KV_USES_DIR,
					      strerror(errno));
			break;
		}
		if (!is_journal_name(de->d_name))
			continue;
		if (!u) {
			f = malloc(sizeof(*f));
			buf = malloc(READ_PIECE_BYTES);
			rc = f && buf ? kv_uses_new(&u) : -ENOMEM;
			if (rc)
				break;
			kvi_uses_feed_init(f, u, keep, arg);
		}
		rc = load_file(f, dirfd, de->d_name, buf);
		if (rc)
			break;
	}
	closedir(d);
	free(buf);
	free(f);
	if (rc < 0 || !kv_uses_count(u)) {
		kv_uses_free(u);
		return rc < 0 ? rc : 0;
	}
	*out = u;
	return 0;
}

/* ---- a bucket's journal object, read as it downloads ---- */

static int feed_object(struct kvi_s3_op *op, const char *data, size_t len)
{
	struct kvi_uses_feed *f = op->user;

	if (op->got == 0)
		kvi_uses_feed_restart(f);
	return kvi_uses_feed(f, data, len);
}

int kvi_uses_read_object(struct kvi_s3 *s, const char *key, struct kv_uses *u,
			 int (*keep)(const char *relpath, void *arg), void *arg,
			 uint64_t *lines, uint64_t *bad)
{
	struct kvi_s3_op op = { .method = KVI_S3_GET, .key = key, .sink = feed_object };
	struct kvi_uses_feed *f = malloc(sizeof(*f));
	int rc;

	if (!f)
		return -ENOMEM;
	kvi_uses_feed_init(f, u, keep, arg);
	op.user = f;
	kvi_error_clear();
	rc = kvi_s3_do(s, &op);
	free(op.resp);
	if (lines)
		*lines = f->lines;
	if (bad)
		*bad = f->bad;
	free(f);
	if (rc && rc != -ENOENT && rc != -ENOMEM) {
		char why[512];

		snprintf(why, sizeof(why), "%s", *kv_error_detail() ? kv_error_detail() :
			 kv_strerror(rc));
		return kvi_fail(rc, "cannot read use journal '%s': %s", key, why);
	}
	return rc;
}

/* ---- the writer ---- */

struct kv_uses_journal {
	int rootfd, dirfd, fd;
	char name[80];
	struct kv_uses *mine;	/* what this file says, newest per path */
	uint64_t lines;		/* lines in the file now */
	/* A bucket's: one object, written whole by kv_uses_journal_sync. */
	struct kvi_s3 *s3;
	char key[KVI_S3_KEY_MAX + 1];
	int dirty;
};

static int node_ok(const char *node)
{
	size_t n = strlen(node);

	if (!n || n > 64 || node[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((node[i] >= 'a' && node[i] <= 'z') || (node[i] >= 'A' && node[i] <= 'Z') ||
		      (node[i] >= '0' && node[i] <= '9') || strchr("._-", node[i])))
			return 0;
	return 1;
}

static int open_append(struct kv_uses_journal *j)
{
	struct stat st;
	int fd = kvi_open_beneath(j->dirfd, j->name, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK,
				  0644, 0);

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	j->fd = fd;
	return 0;
}

/* A journal for node, nothing open yet. */
static int journal_new(const char *node, struct kv_uses_journal **out)
{
	struct kv_uses_journal *j;

	if (!node_ok(node))
		return -EINVAL;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->rootfd = j->dirfd = j->fd = -1;
	*out = j;
	return 0;
}

/* This node's file as it is, read in pieces like any journal. */
static int load_own(struct kv_uses_journal *j)
{
	int fd = kvi_open_beneath(j->dirfd, j->name, O_RDONLY | O_NONBLOCK, 0, 0);
	struct kvi_uses_feed *f;
	struct stat st;
	char *buf;
	int rc;

	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;	/* as open_append would say */
	}
	f = malloc(sizeof(*f));
	buf = malloc(READ_PIECE_BYTES);
	rc = -ENOMEM;
	if (f && buf) {
		kvi_uses_feed_init(f, j->mine, NULL, NULL);
		rc = read_fd(f, fd, buf);
		j->lines = f->lines;
	}
	free(buf);
	free(f);
	close(fd);
	return rc;
}

int kv_uses_journal_open(int rootfd, const char *node, struct kv_uses_journal **out)
{
	struct kv_uses_journal *j;
	int rc = journal_new(node, &j);

	if (rc)
		return rc;
	j->rootfd = rootfd;
	snprintf(j->name, sizeof(j->name), "%s%s", node, KV_USES_SUFFIX);
	j->dirfd = kvi_mkdir_beneath(rootfd, KV_USES_DIR);
	if (j->dirfd < 0) {
		rc = j->dirfd;
		free(j);
		return rc;
	}
	rc = kv_uses_new(&j->mine);
	/* What this node wrote before is kept by the next rewrite. */
	if (!rc)
		rc = load_own(j);
	if (!rc)
		rc = open_append(j);
	if (rc) {
		kv_uses_journal_close(j);
		return rc;
	}
	*out = j;
	return 0;
}

/* Write the newest use of every block still there to a temp, rename it
 * over the journal (kv_file_replace_open: a journal that is not a regular
 * file is refused, never replaced), and append to the new file from now
 * on. */
static int rewrite(struct kv_uses_journal *j)
{
	struct kv_file_out *out;
	struct kv_uses *kept;
	FILE *f;
	int fd, rc;

	rc = kv_uses_new(&kept);
	if (rc)
		return rc;
	rc = kv_file_replace_open(j->dirfd, j->name, 0644, KV_FILE_BENEATH, &out);
	if (rc) {
		kv_uses_free(kept);
		return rc;
	}
	fd = dup(kv_file_replace_fd(out));
	f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		if (fd >= 0)
			close(fd);
		kv_file_replace_abort(out);
		kv_uses_free(kept);
		return -ENOMEM;
	}
	for (size_t i = 0; i <= j->mine->mask; i++) {
		const struct use *s = &j->mine->v[i];
		struct stat st;

		if (!s->path || fstatat(j->rootfd, s->path, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		fprintf(f, "%" PRId64 " %s\n", s->when_ns, s->path);
		if (kv_uses_add(kept, s->path, s->when_ns) < 0) {
			rc = -ENOMEM;
			break;
		}
	}
	if (fclose(f) != 0 && !rc)
		rc = -EIO;
	if (rc)
		kv_file_replace_abort(out);
	else
		rc = kv_file_replace_commit(out);
	if (rc) {
		kv_uses_free(kept);
		return rc;
	}
	kv_uses_free(j->mine);
	j->mine = kept;
	j->lines = kept->count;
	close(j->fd);
	j->fd = -1;
	return open_append(j);
}

int kv_uses_journal_record(struct kv_uses_journal *j, const char *relpath, int64_t when_ns)
{
	char line[KV_USES_LINE_MAX + 32];
	int n, rc;

	rc = kv_uses_add(j->mine, relpath, when_ns);
	if (rc)
		return rc;
	if (j->s3) {
		j->dirty = 1;
		return 0;
	}
	if (j->lines > 2 * kv_uses_count(j->mine) + 4096 && (rc = rewrite(j)) < 0)
		return rc;
	n = snprintf(line, sizeof(line), "%" PRId64 " %s\n", when_ns, relpath);
	if (n < 0 || (size_t)n >= KV_USES_LINE_MAX)
		return -EINVAL;
	rc = kv_write_full(j->fd, line, (size_t)n);
	if (rc)
		return rc;
	j->lines++;
	return 0;
}

int64_t kv_uses_journal_last(const struct kv_uses_journal *j, const char *relpath)
{
	return j ? kv_uses_get(j->mine, relpath) : 0;
}

/* ---- a bucket's journal: one object per node ---- */

/* The bytes of a use's line. */
static size_t line_bytes(const struct use *s)
{
	char n[24];

	return (size_t)snprintf(n, sizeof(n), "%" PRId64, s->when_ns) + strlen(s->path) + 2;
}

/* The bytes u's lines take, one per path. */
static uint64_t text_bytes(const struct kv_uses *u)
{
	uint64_t n = 0;

	for (size_t i = 0; i <= u->mask; i++)
		if (u->v[i].path)
			n += line_bytes(&u->v[i]);
	return n;
}

static int newest_first(const void *a, const void *b)
{
	const struct use *x = *(const struct use *const *)a, *y = *(const struct use *const *)b;

	return x->when_ns != y->when_ns ? (x->when_ns < y->when_ns ? 1 : -1) :
					  strcmp(x->path, y->path);
}

int kv_uses_journal_open_bucket(const char *root, const char *node,
				struct kv_uses_journal **out)
{
	struct kv_uses_journal *j;
	char rel[128];
	int rc = journal_new(node, &j);

	if (rc)
		return rc;
	snprintf(rel, sizeof(rel), "%s/%s%s", KV_USES_DIR, node, KV_USES_SUFFIX);
	rc = kvi_s3_open(root, &j->s3);
	if (rc == 0)
		rc = kvi_s3_key(j->s3, rel, 1, j->key, sizeof(j->key));
	if (rc == 0)
		rc = kv_uses_new(&j->mine);
	/* What an earlier run of this node recorded is kept, however big;
	 * the first sync writes it compacted. */
	if (rc == 0) {
		uint64_t lines = 0;

		rc = kvi_uses_read_object(j->s3, j->key, j->mine, NULL, NULL, &lines, NULL);
		if (rc == -ENOENT)
			rc = 0;
		j->dirty = lines > kv_uses_count(j->mine) ||
			   text_bytes(j->mine) > KV_USES_OBJECT_MAX;
	}
	if (rc) {
		kv_uses_journal_close(j);
		return rc;
	}
	*out = j;
	return 0;
}

int kv_uses_journal_sync(struct kv_uses_journal *j, int (*keep)(const char *relpath, void *arg),
			 void *arg)
{
	struct kvi_s3_op op = { .method = KVI_S3_PUT };
	const struct use **v;
	struct kv_uses *kept;
	uint64_t bytes = 0;
	char *text = NULL;
	size_t n = 0, len = 0;
	FILE *f;
	int rc;

	if (!j || !j->s3 || !j->dirty)
		return 0;
	rc = kv_uses_new(&kept);
	if (rc)
		return rc;
	v = malloc((j->mine->count + 1) * sizeof(*v));
	if (!v) {
		kv_uses_free(kept);
		return -ENOMEM;
	}
	for (size_t i = 0; i <= j->mine->mask; i++) {
		const struct use *s = &j->mine->v[i];

		if (!s->path || (keep && !keep(s->path, arg)))
			continue;
		v[n++] = s;
		bytes += line_bytes(s);
	}
	/* Over the bound, the newest uses that fit are kept: those left out
	 * are the blocks eviction would take first anyway. */
	if (bytes > KV_USES_OBJECT_MAX) {
		size_t m = 0;

		qsort(v, n, sizeof(*v), newest_first);
		for (bytes = 0; m < n && bytes + line_bytes(v[m]) <= KV_USES_OBJECT_MAX; m++)
			bytes += line_bytes(v[m]);
		n = m;
	}
	f = open_memstream(&text, &len);
	if (!f) {
		free(v);
		kv_uses_free(kept);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		fprintf(f, "%" PRId64 " %s\n", v[i]->when_ns, v[i]->path);
		rc = insert(kept, v[i]->path, v[i]->when_ns);
	}
	free(v);
	if (fclose(f) != 0 && !rc)
		rc = -ENOMEM;
	if (!rc) {
		op.key = j->key;
		op.body = text;
		op.body_len = len;
		rc = kvi_s3_do(j->s3, &op);
		free(op.resp);
	}
	free(text);
	if (rc) {
		kv_uses_free(kept);
		return rc;
	}
	kv_uses_free(j->mine);
	j->mine = kept;
	j->dirty = 0;
	return 0;
}

void kv_uses_journal_close(struct kv_uses_journal *j)
{
	if (!j)
		return;
	kvi_s3_close(j->s3);
	if (j->fd >= 0)
		close(j->fd);
	if (j->dirfd >= 0)
		close(j->dirfd);
	kv_uses_free(j->mine);
	free(j);
}
