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
#include "store/s3.h"
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

int kv_uses_add(struct kv_uses *u, const char *relpath, int64_t when_ns)
{
	struct kv_block_ref ref;
	uint64_t h;
	struct use *s;

	if (when_ns <= 0 || kv_layout_block_parse(relpath, &ref) < 0)
		return -EINVAL;
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

/* "<ns> <path>" without its newline: 0, or -EINVAL for a bad line. */
static int parse_line(struct kv_uses *u, const char *line, size_t len, int64_t latest_ns)
{
	char path[KV_USES_LINE_MAX];
	int64_t when = 0;
	size_t i = 0;
	int rc;

	if (len >= KV_USES_LINE_MAX)
		return -EINVAL;
	for (; i < len && line[i] >= '0' && line[i] <= '9'; i++) {
		if (when > (INT64_MAX - 9) / 10)
			return -EINVAL;
		when = when * 10 + (line[i] - '0');
	}
	if (!i || i >= len || line[i] != ' ' || when > latest_ns)
		return -EINVAL;
	i++;
	if (memchr(line + i, '\0', len - i))
		return -EINVAL;
	memcpy(path, line + i, len - i);
	path[len - i] = '\0';
	rc = kv_uses_add(u, path, when);
	return rc == -ENOMEM ? rc : rc ? -EINVAL : 0;
}

int kv_uses_parse(struct kv_uses *u, const char *text, size_t len, uint64_t *bad)
{
	int64_t latest = kv_now_ns() + KV_USES_FUTURE_NS;
	size_t pos = 0;

	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		int rc;

		if (!nl)
			break;
		rc = parse_line(u, text + pos, (size_t)(nl - text) - pos, latest);
		if (rc == -ENOMEM)
			return rc;
		if (rc && bad)
			(*bad)++;
		pos = (size_t)(nl - text) + 1;
	}
	return 0;
}

/* Read a journal (at most KV_USES_FILE_MAX bytes) into u. */
static int load_file(struct kv_uses *u, int dirfd, const char *name)
{
	int fd = kvi_open_beneath(dirfd, name, O_RDONLY | O_NONBLOCK, 0, 0);
	struct stat st;
	size_t len;
	char *buf;
	ssize_t n;
	int rc = 0;

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
		close(fd);
		return 0;
	}
	len = (uint64_t)st.st_size < KV_USES_FILE_MAX ? (size_t)st.st_size : KV_USES_FILE_MAX;
	buf = malloc(len);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	n = pread(fd, buf, len, 0);
	if (n > 0)
		rc = kv_uses_parse(u, buf, (size_t)n, NULL);
	free(buf);
	close(fd);
	return rc;
}

static int is_journal_name(const char *name)
{
	size_t n = strlen(name), s = strlen(KV_USES_SUFFIX);

	return name[0] != '.' && n > s && !strcmp(name + n - s, KV_USES_SUFFIX);
}

int kv_uses_load(int rootfd, struct kv_uses **out)
{
	int dirfd = kvi_open_beneath(rootfd, KV_USES_DIR, O_RDONLY | O_DIRECTORY, 0, 0);
	struct kv_uses *u = NULL;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	*out = NULL;
	if (dirfd < 0)
		return 0;
	d = fdopendir(dirfd);
	if (!d) {
		close(dirfd);
		return 0;
	}
	while (!rc && (de = readdir(d))) {
		if (!is_journal_name(de->d_name))
			continue;
		if (!u && (rc = kv_uses_new(&u)) < 0)
			break;
		rc = load_file(u, dirfd, de->d_name);
	}
	closedir(d);
	if (rc < 0 || !kv_uses_count(u)) {
		kv_uses_free(u);
		return rc < 0 ? rc : 0;
	}
	*out = u;
	return 0;
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

int kv_uses_journal_open(int rootfd, const char *node, struct kv_uses_journal **out)
{
	struct kv_uses_journal *j;
	uint64_t bad = 0;
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
	if (!rc) {
		int fd = kvi_open_beneath(j->dirfd, j->name, O_RDONLY | O_NONBLOCK, 0, 0);
		struct stat st;

		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
		    (uint64_t)st.st_size <= KV_USES_FILE_MAX) {
			char *buf = malloc((size_t)st.st_size);
			ssize_t n = buf ? pread(fd, buf, (size_t)st.st_size, 0) : -1;

			if (n > 0)
				rc = kv_uses_parse(j->mine, buf, (size_t)n, &bad);
			free(buf);
		}
		if (fd >= 0)
			close(fd);
		j->lines = kv_uses_count(j->mine) + bad;
	}
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

int kv_uses_journal_open_bucket(const char *root, const char *node,
				struct kv_uses_journal **out)
{
	struct kv_uses_journal *j;
	struct kvi_s3_op op = { .method = KVI_S3_GET };
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
	/* What an earlier run of this node recorded is kept. */
	if (rc == 0) {
		op.key = j->key;
		rc = kvi_s3_do(j->s3, &op);
		if (rc == 0)
			rc = kv_uses_parse(j->mine, op.resp, op.got, NULL);
		else if (rc == -ENOENT)
			rc = 0;
		free(op.resp);
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
	struct kv_uses *kept;
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int rc;

	if (!j || !j->s3 || !j->dirty)
		return 0;
	rc = kv_uses_new(&kept);
	if (rc)
		return rc;
	f = open_memstream(&text, &len);
	if (!f) {
		kv_uses_free(kept);
		return -ENOMEM;
	}
	for (size_t i = 0; i <= j->mine->mask && !rc; i++) {
		const struct use *s = &j->mine->v[i];

		if (!s->path || (keep && !keep(s->path, arg)))
			continue;
		fprintf(f, "%" PRId64 " %s\n", s->when_ns, s->path);
		rc = kv_uses_add(kept, s->path, s->when_ns);
	}
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
