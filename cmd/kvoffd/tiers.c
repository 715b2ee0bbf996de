/*
 * kvoffd's file tiers below its RAM pool, in order: local ones, bounded
 * (--tier local:/nvme/kv:6T), then shared storage, usually unbounded.
 * A bounded tier is the daemon's own: it claims the root with a lock
 * file, indexes its blocks at start (least recently used first) and keeps an
 * exact LRU of them; past its capacity the oldest move down, one DEMOTE
 * job each, to the next tier that takes them.  Everything here runs on
 * the event loop thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include "../tool.h"
#include "kvoffd.h"

static const char *const kind_names[] = { [TIER_LOCAL] = "local", [TIER_SHARED] = "shared" };

const char *tier_name(const struct offd *d, unsigned t)
{
	return kind_names[d->tiers[t].kind];
}

/* KIND:PATH or KIND:PATH:SIZE; a PATH with a colon in it is taken
 * whole when what follows its last colon is not a size. */
void tiers_parse(struct offd *d, const char *arg)
{
	const char *colon = strchr(arg, ':');
	struct ftier *t;
	char *last;

	if (d->ntiers == FILE_TIERS_MAX)
		tool_usage_fail("--tier: at most %d file tiers", FILE_TIERS_MAX);
	t = &d->tiers[d->ntiers];
	if (!colon)
		tool_usage_fail("--tier '%s': expected KIND:PATH[:SIZE]", arg);
	if ((size_t)(colon - arg) == 5 && !strncmp(arg, "local", 5))
		t->kind = TIER_LOCAL;
	else if ((size_t)(colon - arg) == 6 && !strncmp(arg, "shared", 6))
		t->kind = TIER_SHARED;
	else
		tool_usage_fail("--tier '%s': the kind is local or shared", arg);
	t->root = strdup(colon + 1);
	if (!t->root)
		tool_usage_fail("out of memory");
	last = strrchr(t->root, ':');
	if (last && last[1] >= '0' && last[1] <= '9') {
		t->capacity = tool_parse_size("--tier", last + 1);
		*last = '\0';
		if (!t->capacity)
			tool_usage_fail("--tier '%s': a capacity of 0 holds nothing", arg);
	}
	if (!*t->root)
		tool_usage_fail("--tier '%s': no path", arg);
	t->lockfd = -1;
	d->ntiers++;
}

/* ---- the index ---- */

static uint64_t path_hash(const char *path)
{
	return kv_xxh3(path, strlen(path));
}

static int index_grow_table(struct tier_index *x)
{
	uint32_t nb = x->table ? 2 * (x->mask + 1) : 1024, *t = calloc(nb, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (uint32_t i = 0; x->table && i <= x->mask; i++) {
		uint32_t k = x->table[i], b;

		if (!k)
			continue;
		for (b = (uint32_t)x->e[k - 1].hash & (nb - 1); t[b]; b = (b + 1) & (nb - 1))
			;
		t[b] = k;
	}
	free(x->table);
	x->table = t;
	x->mask = nb - 1;
	return 0;
}

/* The bucket holding path's entry, or the empty one where it would go. */
static uint32_t index_bucket(const struct tier_index *x, const char *path, uint64_t h)
{
	uint32_t b = (uint32_t)h & x->mask;

	for (; x->table[b]; b = (b + 1) & x->mask) {
		const struct tier_entry *e = &x->e[x->table[b] - 1];

		if (e->hash == h && !strcmp(e->path, path))
			break;
	}
	return b;
}

static uint32_t index_find(const struct tier_index *x, const char *path)
{
	uint32_t k;

	if (!x->table)
		return INDEX_NONE;
	k = x->table[index_bucket(x, path, path_hash(path))];
	return k ? k - 1 : INDEX_NONE;
}

static void lru_unlink(struct tier_index *x, uint32_t i)
{
	kv_lru_remove(&x->lru, x->link, i);
}

static void lru_append(struct tier_index *x, uint32_t i)
{
	kv_lru_push(&x->lru, x->link, i);
}

/* Add path (or refresh its size) as the newest entry; the index takes
 * owned (a copy of path the caller gives up) or copies path itself. */
static int index_put_owned(struct tier_index *x, const char *path, char *owned, uint64_t size)
{
	uint64_t h = path_hash(path);
	uint32_t b, i;

	if ((!x->table || 2 * (x->count + 1) > (uint64_t)x->mask + 1) && index_grow_table(x)) {
		free(owned);
		return -ENOMEM;
	}
	b = index_bucket(x, path, h);
	if (x->table[b]) {
		i = x->table[b] - 1;
		x->bytes = x->bytes - x->e[i].size + size;
		x->e[i].size = size;
		lru_unlink(x, i);
		lru_append(x, i);
		free(owned);
		return 0;
	}
	if (x->free_head != INDEX_NONE) {
		i = x->free_head;
		x->free_head = x->link[i].newer;
	} else {
		if (x->n == x->cap) {
			uint32_t cap = x->cap ? 2 * x->cap : 1024;
			struct tier_entry *e = realloc(x->e, cap * sizeof(*e));
			struct kv_lru_link *l = e ? realloc(x->link, cap * sizeof(*l)) : NULL;

			if (e)
				x->e = e;
			if (!l) {
				free(owned);
				return -ENOMEM;
			}
			x->link = l;
			x->cap = cap;
		}
		i = x->n++;
	}
	x->e[i] = (struct tier_entry){ .hash = h, .size = size,
				       .path = owned ? owned : strdup(path) };
	if (!x->e[i].path) {
		x->link[i].newer = x->free_head;
		x->free_head = i;
		return -ENOMEM;
	}
	x->table[b] = i + 1;
	lru_append(x, i);
	x->count++;
	x->bytes += size;
	return 0;
}

static int index_put(struct tier_index *x, const char *path, uint64_t size)
{
	return index_put_owned(x, path, NULL, size);
}

/* Linear probing without tombstones: the entries after a removed one
 * that could sit earlier move back. */
static void index_del(struct tier_index *x, uint32_t i)
{
	uint32_t b = index_bucket(x, x->e[i].path, x->e[i].hash), next;

	x->table[b] = 0;
	for (next = (b + 1) & x->mask; x->table[next]; next = (next + 1) & x->mask) {
		uint32_t home = (uint32_t)x->e[x->table[next] - 1].hash & x->mask;

		/* It may fill the hole if its home is not in (b, next]. */
		if (((next - home) & x->mask) >= ((next - b) & x->mask)) {
			x->table[b] = x->table[next];
			x->table[next] = 0;
			b = next;
		}
	}
	lru_unlink(x, i);
	x->count--;
	x->bytes -= x->e[i].size;
	free(x->e[i].path);
	x->e[i].path = NULL;
	x->link[i].newer = x->free_head;
	x->free_head = i;
}

static void index_free(struct tier_index *x)
{
	for (uint32_t i = 0; i < x->n; i++)
		free(x->e[i].path);
	free(x->e);
	free(x->link);
	free(x->table);
	memset(x, 0, sizeof(*x));
}

/* ---- start-up ---- */

struct found {
	char *path;
	uint64_t size;
	int64_t when;
};

struct reindex {
	struct ftier *t;
	struct found *v;
	size_t n, cap;
	int err;
};

static int found_block(const struct kv_walk_entry *e, void *arg)
{
	struct reindex *r = arg;

	if (e->kind != KV_WALK_BLOCK)
		return 0;
	r->t->walk_blocks++;
	r->t->walk_bytes += e->size_bytes;
	if (!r->t->capacity)
		return 0;
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 4096;
		struct found *v = realloc(r->v, cap * sizeof(*v));

		if (!v)
			return r->err = -ENOMEM;
		r->v = v;
		r->cap = cap;
	}
	r->v[r->n].path = strdup(e->path);
	if (!r->v[r->n].path)
		return r->err = -ENOMEM;
	r->v[r->n].size = e->size_bytes;
	/* Last use, as kvevict orders them (kv/lastuse.h). */
	r->v[r->n].when = e->last_use_ns;
	r->n++;
	return 0;
}

static int by_when(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	return x->when < y->when ? -1 : x->when > y->when;
}

/* Walk tier t: count its blocks, and index a bounded one's oldest first. */
static int reindex(struct ftier *t)
{
	struct kv_walk_opts opts = { .rank = -1 };
	struct reindex r = { .t = t };
	int err = kv_walk(t->root, &opts, found_block, &r);

	if (!err && r.err)
		err = r.err;
	if (!err && r.n)
		qsort(r.v, r.n, sizeof(*r.v), by_when);
	for (size_t i = 0; i < r.n; i++) {
		if (!err)
			err = index_put_owned(&t->idx, r.v[i].path, r.v[i].path, r.v[i].size);
		else
			free(r.v[i].path);
	}
	free(r.v);
	return err;
}

/* A bounded tier's LRU is the daemon's alone: a second daemon on the
 * root, or kvevict (without --force), would contradict it. */
static int claim(struct offd *d, struct ftier *t)
{
	char text[640];
	int fd = openat(AT_FDCWD, t->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), lfd, n;

	if (fd < 0)
		return -errno;
	/* 0600 and this user's: a reader of the root cannot hold it. */
	n = kv_lock_beneath(fd, TOOL_OFFD_LOCK, LOCK_EX, 0, &lfd);
	close(fd);
	if (n < 0)
		return n == -EWOULDBLOCK ? -EBUSY : n;
	n = snprintf(text, sizeof(text), "pid %d socket %s\n", (int)getpid(), d->socket_path);
	if (ftruncate(lfd, 0) < 0 || pwrite(lfd, text, (size_t)n, 0) != n) {
		n = -errno;
		close(lfd);
		return n;
	}
	t->lockfd = lfd;
	return 0;
}

/* Two tiers on one directory would lose blocks: a move down would find
 * the block "already there" and remove the only copy. */
static int same_dir_twice(struct offd *d)
{
	struct stat st[FILE_TIERS_MAX];

	for (unsigned k = 0; k < d->ntiers; k++) {
		if (stat(d->tiers[k].root, &st[k]) < 0)
			continue;	/* kv_io_open says why */
		for (unsigned j = 0; j < k; j++)
			if (st[j].st_dev == st[k].st_dev && st[j].st_ino == st[k].st_ino) {
				tool_err("tiers %u and %u are the same directory ('%s', '%s')",
					 j, k, d->tiers[j].root, d->tiers[k].root);
				return 1;
			}
	}
	return 0;
}

int tiers_open(struct offd *d)
{
	struct kv_io_opts opts = { .queue_depth = 4, .flags = d->io_flags };
	int err;

	if (same_dir_twice(d))
		return -EINVAL;

	for (unsigned k = 0; k < d->ntiers; k++) {
		struct ftier *t = &d->tiers[k];

		t->idx.free_head = INDEX_NONE;
		kv_lru_init(&t->idx.lru);
		err = kv_io_open(t->root, &opts, &t->io);
		if (err) {
			tool_err("cannot open '%s': %s", t->root, kv_strerror(err));
			return err;
		}
		if (t->capacity && (err = claim(d, t))) {
			tool_err(err == -EBUSY ? "cannot manage '%s': another kvoffd does "
						 "(see its " TOOL_OFFD_LOCK ": %s)"
					       : "cannot claim '%s': %s",
				 t->root, err == -EBUSY ? kv_error_detail() : kv_strerror(err));
			return err;
		}
		err = reindex(t);
		if (err) {
			tool_err("cannot index '%s': %s", t->root, kv_strerror(err));
			return err;
		}
		d->st.disk_blocks += t->walk_blocks;
		d->st.disk_bytes += t->walk_bytes;
	}
	return 0;
}

void tiers_close(struct offd *d)
{
	for (unsigned k = 0; k < d->ntiers; k++) {
		struct ftier *t = &d->tiers[k];

		kv_io_close(t->io);
		t->io = NULL;
		index_free(&t->idx);
		for (unsigned i = 0; i < t->nconfigs; i++)
			free(t->configs[i]);
		free(t->configs);
		t->configs = NULL;
		t->nconfigs = 0;
		if (t->lockfd >= 0)
			close(t->lockfd);
		t->lockfd = -1;
	}
}

/* ---- moving blocks ---- */

int tiers_locate(struct offd *d, const char *path, uint64_t *size)
{
	uint64_t unused;
	int err = -ENOENT;

	if (!size)
		size = &unused;
	for (unsigned k = 0; k < d->ntiers; k++) {
		uint32_t i;

		if (d->tiers[k].capacity) {
			i = index_find(&d->tiers[k].idx, path);
			if (i == INDEX_NONE)
				continue;
			*size = d->tiers[k].idx.e[i].size;
			return (int)k;
		}
		err = kv_io_size(d->tiers[k].io, path, size);
		if (!err)
			return (int)k;
		if (err != -ENOENT)
			return err;
	}
	return err;
}

/* Unbounded tiers are asked; a bounded one only if its index has the
 * block, and those below one that is moving it out are asked too. */
unsigned tiers_probe(struct offd *d, const char *path)
{
	unsigned mask = 0;

	for (unsigned k = 0; k < d->ntiers; k++) {
		struct tier_index *x = &d->tiers[k].idx;
		uint32_t i;

		if (!d->tiers[k].capacity) {
			mask |= 1u << k;
			continue;
		}
		i = index_find(x, path);
		if (i == INDEX_NONE)
			continue;
		mask |= 1u << k;
		if (x->e[i].moving)
			mask |= ~0u << (k + 1) & ((1u << d->ntiers) - 1);
	}
	return mask;
}

int tier_moving(struct offd *d, unsigned t, const char *path)
{
	uint32_t i;

	if (!d->tiers[t].capacity)
		return 0;
	i = index_find(&d->tiers[t].idx, path);
	return i != INDEX_NONE && d->tiers[t].idx.e[i].moving;
}

void tier_touch(struct offd *d, unsigned t, const char *path)
{
	struct tier_index *x = &d->tiers[t].idx;
	uint32_t i;

	if (!d->tiers[t].capacity || (i = index_find(x, path)) == INDEX_NONE)
		return;
	lru_unlink(x, i);
	lru_append(x, i);
}

void tier_stored(struct offd *d, unsigned t, const char *path, uint64_t size)
{
	struct ftier *ft = &d->tiers[t];

	if (!ft->capacity)
		return;
	if (index_put(&ft->idx, path, size)) {
		/* Unindexed, it is never demoted: say so, once is enough. */
		tool_err("cannot index '%s' in '%s': out of memory", path, ft->root);
		return;
	}
	tier_trim(d, t);
}

/* Whether RAM has a write of path into tier t in flight: removing the
 * file under it would lose the newer bytes. */
static int write_pending(struct offd *d, unsigned t, const char *path)
{
	uint32_t i = kv_slots_find(d->store, path);

	return i != KV_SLOT_NONE && d->slots[i].wb_pending && d->slots[i].wb_tier == t;
}

void tier_trim(struct offd *d, unsigned t)
{
	struct ftier *ft = &d->tiers[t];
	struct tier_index *x = &ft->idx;
	uint32_t i = x->lru.oldest;

	while (ft->capacity && x->bytes - ft->moving_bytes > ft->capacity && i != INDEX_NONE &&
	       d->wb_inflight < d->wr.wcap) {
		struct tier_entry *e = &x->e[i];
		struct job j = { .kind = JOB_DEMOTE, .tier = t, .len = e->size,
				 .dest = TIER_NONE };

		if (e->moving || write_pending(d, t, e->path)) {
			i = x->link[i].newer;
			continue;
		}
		snprintf(j.path, sizeof(j.path), "%s", e->path);
		if (writer_push(d, &j))
			return;
		e->moving = 1;
		ft->moving_bytes += e->size;
		d->wb_inflight++;
		i = x->link[i].newer;
	}
}

void tier_demoted(struct offd *d, const struct job *j)
{
	struct ftier *from = &d->tiers[j->tier];
	uint32_t i = index_find(&from->idx, j->path), s;

	d->wb_inflight--;
	for (unsigned k = 0; k < d->ntiers; k++)
		if (j->refused & (1u << k))
			d->tiers[k].st.errors++;
	if (i == INDEX_NONE)
		return;
	from->moving_bytes -= from->idx.e[i].size;
	if (j->result && j->result != -ENOENT) {
		from->st.errors++;
		tool_err("cannot move '%s' out of '%s': %s", j->path, from->root,
			 kv_strerror(j->result));
	}
	if (j->result != -ENOENT)
		report_tier_event(d, "BlockRemoved", j->tier, j->path, j->len);
	index_del(&from->idx, i);
	s = kv_slots_find(d->store, j->path);
	if (s != KV_SLOT_NONE)
		d->slots[s].held &= ~(1u << j->tier);
	if (j->result == -ENOENT)
		return;	/* removed by someone else: nothing to move */
	if (j->dest == TIER_NONE) {
		from->st.drops++;
		tool_err("dropped '%s' from '%s': no lower tier took it", j->path, from->root);
		return;
	}
	from->st.demotions++;
	if (s != KV_SLOT_NONE)
		d->slots[s].held |= 1u << j->dest;
	if (!j->existed) {
		d->tiers[j->dest].st.writes++;
		d->tiers[j->dest].st.write_bytes += j->len;
		report_tier_event(d, "BlockStored", j->dest, j->path, j->len);
	}
	tier_stored(d, j->dest, j->path, j->len);
	tier_trim(d, j->tier);
}
