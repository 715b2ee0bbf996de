/*
 * Rounds of sharded eviction through the shared volume itself.
 *
 * Names in <root>/.kvevict/ (dry runs use "dry" for "round", so the two
 * never mix):
 *
 *   round.<R>.<N>          a round opened at R (seconds) for N shards
 *   round.<R>.<N>.<S>.<I>  shard I's state for stage S of it
 *   <either>_<hex>.tmp     one being written, renamed into place
 *   lock.<I>               shard I's lock (kv_evict_lock_shard)
 *
 * Anything else there is left alone.  On a bucket root the dir is the
 * key prefix "<root>//.kvevict/": a marker is created with If-None-Match,
 * a state is written with one PUT (S3 has no partial objects), and no
 * temp is needed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <kv/errors.h>
#include <kv/evict.h>
#include <kv/kv.h>
#include <kv/layout.h>
#include <kv/units.h>
#include "evict/round.h"
#include "store/beneath.h"
#include "store/s3.h"
#include "util/error.h"

#define NS			1000000000ll
#define SETTLE_NS		(1 * NS)	/* between joining and choosing */
#define SKEW_S			60	/* rounds from clocks this far ahead count */
#define STALE_S			3600	/* or twice the wait, if longer */
#define POLL_FIRST_NS		(50 * 1000000ll)
#define POLL_MAX_NS		(1 * NS)
#define WAIT_MAX_NS		(30 * 86400 * NS)	/* keeps the sums in range */
#define NAME_BYTES		96

enum name_kind { NAME_OTHER, NAME_MARKER, NAME_STATE, NAME_TEMP };

struct name {
	enum name_kind kind;
	int dry;
	int64_t round_s;
	unsigned count, stage, index;
};

struct kvi_round {
	int dirfd;
	struct kvi_s3 *s3;		/* a bucket root: its state prefix */
	char s3_dir[KVI_S3_KEY_MAX + 1];
	struct kvi_round_opts o;
	int64_t round_s;
	unsigned char *expect;		/* shards to wait for (a bitmap) */
	unsigned char *have;		/* state merged at this stage */
	unsigned char *refused;		/* refused at this stage, ... */
	uint64_t *refused_ino;		/* ...this file, said once */
	int said_other_count;
};

static int bit(const unsigned char *map, unsigned i)
{
	return map[i / 8] >> (i % 8) & 1;
}

static void set_bit(unsigned char *map, unsigned i)
{
	map[i / 8] |= (unsigned char)(1u << (i % 8));
}

static void notice(const struct kvi_round *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void notice(const struct kvi_round *r, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	if (!r->o.notice)
		return;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	r->o.notice(text, r->o.arg);
}

/* A canonical decimal of at most 18 digits (no sign, no leading zero):
 * its end, or NULL. */
static const char *decimal(const char *s, uint64_t *v)
{
	const char *p = s;

	*v = 0;
	while (*p >= '0' && *p <= '9' && p - s < 18)
		*v = *v * 10 + (uint64_t)(*p++ - '0');
	if (p == s || (*s == '0' && p - s > 1) || (*p >= '0' && *p <= '9'))
		return NULL;
	return p;
}

/* Parse a state dir entry's name into n; NAME_OTHER for any other. */
static void name_parse(const char *s, struct name *n)
{
	uint64_t v[4];
	const char *p, *tmp;
	char head[NAME_BYTES];
	int k = 0;

	memset(n, 0, sizeof(*n));
	n->kind = NAME_OTHER;
	if (!strncmp(s, "round.", 6))
		p = s + 6;
	else if (!strncmp(s, "dry.", 4))
		p = s + 4, n->dry = 1;
	else
		return;
	/* A temp: the name it becomes, "_", random hex, ".tmp". */
	tmp = strrchr(s, '_');
	if (tmp && kv_layout_is_temp(tmp)) {
		if ((size_t)(tmp - s) >= sizeof(head))
			return;
		memcpy(head, s, (size_t)(tmp - s));
		head[tmp - s] = '\0';
		name_parse(head, n);
		if (n->kind != NAME_OTHER)
			n->kind = NAME_TEMP;
		return;
	}
	for (;;) {
		if (k == 4 || !(p = decimal(p, &v[k++])))
			return;
		if (!*p)
			break;
		if (*p++ != '.')
			return;
	}
	if ((k != 2 && k != 4) || !v[0] || !v[1] || v[1] > KV_EVICT_MAX_SHARDS)
		return;
	n->round_s = (int64_t)v[0];
	n->count = (unsigned)v[1];
	n->kind = NAME_MARKER;
	if (k == 4) {
		if (v[2] >= KVI_SHARD_MAX_STAGES || v[3] >= v[1])
			return;
		n->stage = (unsigned)v[2];
		n->index = (unsigned)v[3];
		n->kind = NAME_STATE;
	}
}

static void name_marker(const struct kvi_round *r, int64_t round_s, char *buf)
{
	snprintf(buf, NAME_BYTES, "%s.%lld.%u", r->o.dry ? "dry" : "round",
		 (long long)round_s, r->o.count);
}

static void name_state(const struct kvi_round *r, unsigned stage, unsigned index,
		       char *buf)
{
	snprintf(buf, NAME_BYTES, "%s.%lld.%u.%u.%u", r->o.dry ? "dry" : "round",
		 (long long)r->round_s, r->o.count, stage, index);
}

/* The top buckets shard i of count owns. */
static unsigned share_of(unsigned i, unsigned count)
{
	unsigned lo = (i * KV_LAYOUT_TOP_BUCKETS + count - 1) / count;
	unsigned hi = ((i + 1) * KV_LAYOUT_TOP_BUCKETS + count - 1) / count;

	return hi - lo;
}

/* A write that failed for want of room, which eviction is there to make. */
static int full(int err)
{
	return err == ENOSPC || err == EDQUOT;
}

static void nap(int64_t ns)
{
	struct timespec ts = { (time_t)(ns / NS), (long)(ns % NS) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- the state dir: a directory, or a bucket's key prefix ---- */

struct s3_scan {
	struct kvi_round *r;
	void (*fn)(struct kvi_round *r, const char *name, const struct name *n, void *arg);
	void *arg;
};

static int s3_entry(const struct kvi_s3_object *o, void *arg)
{
	struct s3_scan *sc = arg;
	const char *name = o->key + strlen(sc->r->s3_dir);
	struct name n;

	if (strlen(o->key) <= strlen(sc->r->s3_dir) || strchr(name, '/'))
		return 0;
	name_parse(name, &n);
	if (n.kind != NAME_OTHER)
		sc->fn(sc->r, name, &n, sc->arg);
	return 0;
}

/* Each object under the bucket's state prefix. */
static int s3_list(struct kvi_round *r,
		   void (*fn)(struct kvi_round *r, const char *name,
			      const struct name *n, void *arg), void *arg)
{
	struct s3_scan sc = { r, fn, arg };

	return kvi_s3_list_prefix(r->s3, r->s3_dir, s3_entry, &sc);
}

/* Read the state dir, calling fn for each entry of ours. */
static int list(struct kvi_round *r,
		void (*fn)(struct kvi_round *r, const char *name,
			   const struct name *n, void *arg), void *arg)
{
	int fd;
	struct dirent *d;
	struct name n;
	DIR *dir;

	if (r->s3)
		return s3_list(r, fn, arg);
	fd = openat(r->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return -ENOMEM;
	}
	while ((d = readdir(dir))) {
		name_parse(d->d_name, &n);
		if (n.kind != NAME_OTHER)
			fn(r, d->d_name, &n, arg);
	}
	closedir(dir);
	return 0;
}

/* One request on the object name of the bucket's state prefix. */
static int s3_on(const struct kvi_round *r, struct kvi_s3_op *op, const char *name)
{
	char key[KVI_S3_KEY_MAX + NAME_BYTES];
	int rc;

	snprintf(key, sizeof(key), "%s%s", r->s3_dir, name);
	op->key = key;
	rc = kvi_s3_do(r->s3, op);
	op->key = NULL;
	return rc;
}

/* Make name, empty, only if it is not there: 0, -EEXIST, or -errno. */
static int create_new(const struct kvi_round *r, const char *name)
{
	struct kvi_s3_op op = { .method = KVI_S3_PUT, .flags = KVI_S3_IF_NONE_MATCH, .body = "" };
	int fd, rc;

	if (r->s3) {
		rc = s3_on(r, &op, name);
		free(op.resp);
		/* Without them two shards could both think they made it. */
		if (kvi_s3_condition_refused(&op))
			rc = kvi_fail(-EOPNOTSUPP, "%s does not take conditional writes "
				      "(If-None-Match: HTTP %ld), which shards on a bucket "
				      "need to agree", kvi_s3_where(r->s3), op.status);
		return rc;
	}
	fd = openat(r->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static int exists(const struct kvi_round *r, const char *name)
{
	struct kvi_s3_op op = { .method = KVI_S3_HEAD };
	int rc;

	if (!r->s3)
		return faccessat(r->dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	rc = s3_on(r, &op, name);
	free(op.resp);
	return rc == 0;
}

static void remove_name(const struct kvi_round *r, const char *name)
{
	struct kvi_s3_op op = { .method = KVI_S3_DELETE };

	if (!r->s3) {
		unlinkat(r->dirfd, name, 0);
		return;
	}
	s3_on(r, &op, name);
	free(op.resp);
}

/* ---- joining ---- */

struct join_scan {
	int64_t lo, hi;			/* the window of rounds to join */
	int64_t *open, *mine;		/* rounds seen, and ones we are in */
	size_t nopen, nmine, cap_open, cap_mine;
	int err;
};

static void push(int64_t **v, size_t *n, size_t *cap, int64_t x, int *err)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		int64_t *nv = realloc(*v, c * sizeof(**v));

		if (!nv) {
			*err = -ENOMEM;
			return;
		}
		*v = nv;
		*cap = c;
	}
	(*v)[(*n)++] = x;
}

static void join_entry(struct kvi_round *r, const char *name,
		       const struct name *n, void *arg)
{
	struct join_scan *js = arg;

	(void)name;
	if (n->dry != r->o.dry || n->count != r->o.count ||
	    n->round_s < js->lo || n->round_s > js->hi)
		return;
	if (n->kind == NAME_MARKER)
		push(&js->open, &js->nopen, &js->cap_open, n->round_s, &js->err);
	else if (n->kind == NAME_STATE && n->stage == 0 && n->index == r->o.index)
		push(&js->mine, &js->nmine, &js->cap_mine, n->round_s, &js->err);
}

/* The newest round in the window that this shard is not in yet, or 0. */
static int newest_open(struct kvi_round *r, int64_t now_s, int64_t *round_s)
{
	struct join_scan js = {
		.lo = now_s - (int64_t)(r->o.wait_ns / NS), .hi = now_s + SKEW_S,
	};
	int rc = list(r, join_entry, &js);

	*round_s = 0;
	for (size_t i = 0; rc == 0 && i < js.nopen; i++) {
		size_t j = 0;

		while (j < js.nmine && js.mine[j] != js.open[i])
			j++;
		if (j == js.nmine && js.open[i] > *round_s)
			*round_s = js.open[i];
	}
	free(js.open);
	free(js.mine);
	return rc ? rc : js.err;
}

int kvi_round_dir_open(int rootfd, int *fd)
{
	int d = kvi_mkdir_beneath(rootfd, KV_EVICT_STATE_DIR);

	if (d < 0)
		return kvi_fail(d, "the shards' state dir '%s'", KV_EVICT_STATE_DIR);
	*fd = d;
	return 0;
}

int kvi_round_join(int rootfd, const struct kvi_round_opts *o, struct kvi_round **out)
{
	size_t map = (KV_EVICT_MAX_SHARDS + 7) / 8;
	int64_t now_s = kv_now_ns() / NS, found;
	char name[NAME_BYTES];
	struct kvi_round *r;
	int rc, made;

	if (!o->count || o->count > KV_EVICT_MAX_SHARDS || o->index >= o->count)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->dirfd = -1;
	r->o = *o;
	if (r->o.wait_ns > (uint64_t)WAIT_MAX_NS)
		r->o.wait_ns = WAIT_MAX_NS;
	r->expect = calloc(3, map);
	r->refused_ino = calloc(KV_EVICT_MAX_SHARDS, sizeof(*r->refused_ino));
	if (!r->expect || !r->refused_ino) {
		rc = -ENOMEM;
		goto fail;
	}
	r->have = r->expect + map;
	r->refused = r->have + map;
	memset(r->expect, 0xff, map);
	if (o->bucket_root) {
		rc = kvi_s3_open(o->bucket_root, &r->s3);
		if (rc == 0)
			rc = kvi_s3_key(r->s3, KV_EVICT_STATE_DIR "/", 1, r->s3_dir,
					sizeof(r->s3_dir));
	} else {
		rc = kvi_round_dir_open(rootfd, &r->dirfd);
	}
	if (rc < 0)
		goto fail;
	rc = newest_open(r, now_s, &found);
	if (rc < 0)
		goto fail;
	/* Open a round now, or in the next second free of this shard's
	 * state: a round that ended within the second is not reopened. */
	for (int64_t at = now_s; !found && at <= now_s + SKEW_S; at++) {
		name_marker(r, at, name);
		kvi_error_clear();
		made = create_new(r, name);
		if (full(-made)) {
			/* A full volume is when eviction matters most: go on in
			 * a round of our own, unseen, rather than not at all. */
			notice(r, "cannot open round '%s/%s': %s; going on alone",
			       KV_EVICT_STATE_DIR, name, strerror(-made));
			found = at;
			break;
		}
		if (made < 0 && made != -EEXIST) {
			char why[512];

			/* Keep what the store said (the server's answer). */
			snprintf(why, sizeof(why), "%s", kv_error_detail());
			rc = kvi_fail(made, "opening round '%s/%s'%s%s", KV_EVICT_STATE_DIR, name,
				      *why ? ": " : "", why);
			goto fail;
		}
		r->round_s = at;
		name_state(r, 0, o->index, name);
		if (made == 0 || !exists(r, name))
			found = at;
	}
	if (!found) {
		rc = kvi_fail(-EEXIST, "no round free to open in '%s'", KV_EVICT_STATE_DIR);
		goto fail;
	}
	/* Shards that found no round at once each opened one; by now each
	 * sees all of them, and all take the newest. */
	nap(SETTLE_NS);
	rc = newest_open(r, now_s, &r->round_s);
	if (rc < 0)
		goto fail;
	if (!r->round_s)
		r->round_s = found;
	*out = r;
	return 0;
fail:
	kvi_round_leave(r);
	return rc;
}

int64_t kvi_round_id(const struct kvi_round *r)
{
	return r->round_s;
}

/* ---- publishing and merging ---- */

static int write_state(const struct kvi_round *r, const char *name,
		       const void *buf, size_t len)
{
	struct kvi_s3_op op = { .method = KVI_S3_PUT, .body = buf, .body_len = len };
	int rc;

	if (r->s3) {
		rc = s3_on(r, &op, name);
		free(op.resp);
		return rc;
	}
	/* A "<name>_<random>.tmp" renamed into place; what is there and is
	 * not a regular file is refused, never replaced. */
	return kv_file_replace(r->dirfd, name, buf, len, 0644, KV_FILE_BENEATH);
}

struct merge_scan {
	const struct kvi_shard_state *mine;
	struct kvi_round_merge *m;
};

/* Say once per file why shard i's state is not taken. */
static void refuse(struct kvi_round *r, unsigned i, uint64_t ino, const char *name,
		   const char *why)
{
	if (bit(r->refused, i) && r->refused_ino[i] == ino)
		return;
	set_bit(r->refused, i);
	r->refused_ino[i] = ino;
	notice(r, "ignoring '%s/%s': %s", KV_EVICT_STATE_DIR, name, why);
}

/* Read, check and merge shard i's state file name: 1 merged, 0 not. */
static int take(struct kvi_round *r, const char *name, unsigned i,
		const struct kvi_shard_state *mine, struct kvi_round_merge *m)
{
	struct kvi_shard_state s;
	struct stat st;
	char why[256];
	void *buf;
	ssize_t got = 0;
	int fd;

	if (r->s3) {
		/* An object: one GET, a byte more than a state may hold. */
		struct kvi_s3_op op = { .method = KVI_S3_GET, .cap = KVI_SHARD_MAX_BYTES + 1 };

		buf = op.dst = malloc(op.cap);
		if (!buf)
			return 0;
		if (s3_on(r, &op, name) < 0) {
			free(op.resp);
			free(buf);
			return 0;
		}
		free(op.resp);
		memset(&st, 0, sizeof(st));
		/* What tells one upload of it from the next. */
		st.st_ino = (ino_t)((uint64_t)op.mtime_ns ^ (op.got << 1));
		got = (ssize_t)op.got;
		if (bit(r->refused, i) && r->refused_ino[i] == (uint64_t)st.st_ino) {
			free(buf);
			return 0;
		}
		goto decode;
	}
	if (fstatat(r->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	if (bit(r->refused, i) && r->refused_ino[i] == (uint64_t)st.st_ino)
		return 0;
	if (S_ISLNK(st.st_mode)) {
		refuse(r, i, st.st_ino, name, "a symbolic link");
		return 0;
	}
	if (!S_ISREG(st.st_mode)) {
		refuse(r, i, st.st_ino, name, "not a regular file");
		return 0;
	}
	if (st.st_size > (off_t)KVI_SHARD_MAX_BYTES) {
		snprintf(why, sizeof(why), "wrong size (%lld bytes)", (long long)st.st_size);
		refuse(r, i, st.st_ino, name, why);
		return 0;
	}
	fd = openat(r->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	/* A byte more than its size, so that a file grown since is caught. */
	buf = malloc((size_t)st.st_size + 1);
	while (buf && got <= st.st_size) {
		ssize_t n = pread(fd, (char *)buf + got, (size_t)(st.st_size + 1 - got), got);

		if (n <= 0)
			break;
		got += n;
	}
	close(fd);
	if (!buf)
		return 0;
decode:
	if (kvi_shard_decode(buf, (size_t)got, &s) < 0) {
		refuse(r, i, st.st_ino, name, kv_error_detail());
	} else if (s.index != i || s.count != r->o.count || s.stage != mine->stage ||
		   s.round_s != r->round_s || !(s.flags & KVI_SHARD_FLAG_DRY) != !r->o.dry) {
		snprintf(why, sizeof(why), "it holds %sstage %u of shard %u/%u, round %lld",
			 s.flags & KVI_SHARD_FLAG_DRY ? "dry-run " : "", s.stage, s.index,
			 s.count, (long long)s.round_s);
		refuse(r, i, st.st_ino, name, why);
	} else if (s.targets != mine->targets) {
		refuse(r, i, st.st_ino, name,
		       "computed for other targets (give every shard the same options)");
	} else {
		kvi_shard_add(buf, &s, m->count, m->bytes);
		m->cache_bytes += s.cache_bytes;
		m->cand_bytes += s.cand_bytes;
		if (s.fs_used_bytes > m->fs_used_bytes)
			m->fs_used_bytes = s.fs_used_bytes;
		if (s.fs_total_bytes > m->fs_total_bytes)
			m->fs_total_bytes = s.fs_total_bytes;
		free(buf);
		return 1;
	}
	free(buf);
	return 0;
}

static void merge_entry(struct kvi_round *r, const char *name,
			const struct name *n, void *arg)
{
	struct merge_scan *ms = arg;

	if (n->kind != NAME_STATE || n->dry != r->o.dry || n->round_s != r->round_s)
		return;
	if (n->count != r->o.count) {
		if (!r->said_other_count)
			notice(r, "ignoring '%s/%s': state of %u shards, not %u (give every "
			       "shard the same count)", KV_EVICT_STATE_DIR, name, n->count,
			       r->o.count);
		r->said_other_count = 1;
		return;
	}
	if (n->stage != ms->mine->stage || !bit(r->expect, n->index) ||
	    bit(r->have, n->index))
		return;
	if (take(r, name, n->index, ms->mine, ms->m)) {
		set_bit(r->have, n->index);
		ms->m->present++;
	}
}

/* Expected shards still missing; the first of them in *first. */
static unsigned missing(const struct kvi_round *r, unsigned *first)
{
	unsigned n = 0;

	for (unsigned i = r->o.count; i-- > 0;)
		if (bit(r->expect, i) && !bit(r->have, i)) {
			n++;
			*first = i;
		}
	return n;
}

int kvi_round_exchange(struct kvi_round *r, struct kvi_shard_state *mine,
		       const uint64_t *count, const uint64_t *bytes,
		       struct kvi_round_merge *m)
{
	size_t map = (KV_EVICT_MAX_SHARDS + 7) / 8, len;
	int64_t deadline, poll = POLL_FIRST_NS, now;
	struct merge_scan ms = { mine, m };
	struct kvi_shard_state back;
	char name[NAME_BYTES];
	unsigned first = 0, gone;
	void *buf;
	int rc;

	mine->flags = r->o.dry ? KVI_SHARD_FLAG_DRY : 0;
	mine->index = r->o.index;
	mine->count = r->o.count;
	mine->round_s = r->round_s;
	rc = kvi_shard_encode(mine, count, bytes, &buf, &len);
	if (rc < 0)
		return rc;
	name_state(r, mine->stage, r->o.index, name);
	rc = write_state(r, name, buf, len);
	if (rc < 0 && full(-rc)) {
		/* The others will count this shard missing and free their
		 * share; it still frees its own. */
		notice(r, "cannot write '%s/%s': %s; the other shards go on without it",
		       KV_EVICT_STATE_DIR, name, strerror(-rc));
		rc = 0;
	}
	if (rc < 0) {
		char why[256];

		/* Keep why (a FIFO planted at the name is not replaced). */
		snprintf(why, sizeof(why), "%s", kv_error_detail());
		kvi_fail(rc, "writing '%s/%s'%s%s", KV_EVICT_STATE_DIR, name, *why ? ": " : "",
			 why);
	}
	if (rc == 0 && kvi_shard_decode(buf, len, &back) == 0)
		kvi_shard_add(buf, &back, m->count, m->bytes);
	free(buf);
	if (rc < 0)
		return rc;
	m->cache_bytes = mine->cache_bytes;
	m->cand_bytes = mine->cand_bytes;
	m->fs_used_bytes = mine->fs_used_bytes;
	m->fs_total_bytes = mine->fs_total_bytes;
	m->present = 1;
	memset(r->have, 0, map);
	memset(r->refused, 0, map);
	set_bit(r->have, r->o.index);
	deadline = kv_monotonic_ns() + (int64_t)r->o.wait_ns;
	for (;;) {
		rc = list(r, merge_entry, &ms);
		if (rc < 0)
			return rc;
		now = kv_monotonic_ns();
		if (!missing(r, &first) || now >= deadline)
			break;
		nap(poll < deadline - now ? poll : deadline - now);
		poll = poll * 2 < POLL_MAX_NS ? poll * 2 : POLL_MAX_NS;
	}
	gone = missing(r, &first);
	if (gone)
		notice(r, "round %lld stage %u: %u of %u shards missing after %gs (shard %u "
		       "first); freeing this shard's share only", (long long)r->round_s,
		       mine->stage, gone, r->o.count, (double)r->o.wait_ns / NS, first);
	/* Later stages wait only for the shards that came to this one. */
	memcpy(r->expect, r->have, map);
	m->share_buckets = 0;
	for (unsigned i = 0; i < r->o.count; i++)
		if (bit(r->have, i))
			m->share_buckets += share_of(i, r->o.count);
	return 0;
}

/* ---- leaving ---- */

static void stale_entry(struct kvi_round *r, const char *name,
			const struct name *n, void *arg)
{
	const int64_t *now_s = arg;
	int64_t stale = (int64_t)(2 * r->o.wait_ns / NS);

	if (stale < STALE_S)
		stale = STALE_S;
	if (n->round_s < r->round_s - stale || n->round_s > *now_s + stale)
		remove_name(r, name);
}

void kvi_round_leave(struct kvi_round *r)
{
	int64_t now_s = kv_now_ns() / NS;

	if (!r)
		return;
	if ((r->dirfd >= 0 || r->s3) && r->round_s)
		list(r, stale_entry, &now_s);
	if (r->dirfd >= 0)
		close(r->dirfd);
	kvi_s3_close(r->s3);
	free(r->expect);
	free(r->refused_ino);
	free(r);
}
