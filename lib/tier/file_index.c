/*
 * A bounded file tier's index: entries in one array, found through an
 * open-addressing table on the path's hash and ordered by kv/lru.h; freed
 * entries are reused through their LRU links.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <kv/file_index.h>
#include <kv/integrity.h>

struct entry {
	uint64_t hash;		/* xxh3 of path */
	uint64_t size;
	int moving;
	char *path;		/* NULL: a free entry */
};

struct kv_file_index {
	struct entry *e;
	struct kv_lru_link *link;	/* per entry: its LRU or free-list link */
	uint32_t n, cap;	/* entries used or freed, allocated */
	uint32_t free_head;	/* freed entries, linked by link[].newer */
	uint32_t *table;	/* entry + 1 per bucket, 0 empty; linear probe */
	uint32_t mask;
	struct kv_lru lru;
	uint64_t count, bytes, moving_bytes;
};

int kv_file_index_new(struct kv_file_index **out)
{
	struct kv_file_index *x = calloc(1, sizeof(*x));

	if (!x)
		return -ENOMEM;
	x->free_head = KV_FILE_INDEX_NONE;
	kv_lru_init(&x->lru);
	*out = x;
	return 0;
}

void kv_file_index_free(struct kv_file_index *x)
{
	if (!x)
		return;
	for (uint32_t i = 0; i < x->n; i++)
		free(x->e[i].path);
	free(x->e);
	free(x->link);
	free(x->table);
	free(x);
}

static uint64_t path_hash(const char *path)
{
	return kv_xxh3(path, strlen(path));
}

static int grow_table(struct kv_file_index *x)
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
static uint32_t bucket(const struct kv_file_index *x, const char *path, uint64_t h)
{
	uint32_t b = (uint32_t)h & x->mask;

	for (; x->table[b]; b = (b + 1) & x->mask) {
		const struct entry *e = &x->e[x->table[b] - 1];

		if (e->hash == h && !strcmp(e->path, path))
			break;
	}
	return b;
}

uint32_t kv_file_index_find(const struct kv_file_index *x, const char *path)
{
	uint32_t k;

	if (!x->table)
		return KV_FILE_INDEX_NONE;
	k = x->table[bucket(x, path, path_hash(path))];
	return k ? k - 1 : KV_FILE_INDEX_NONE;
}

void kv_file_index_touch(struct kv_file_index *x, uint32_t id)
{
	kv_lru_remove(&x->lru, x->link, id);
	kv_lru_push(&x->lru, x->link, id);
}

/* kv_file_index_put, taking owned (a copy of path the caller gives up)
 * or, owned NULL, copying path itself. */
static int put_owned(struct kv_file_index *x, const char *path, char *owned, uint64_t size)
{
	uint64_t h = path_hash(path);
	uint32_t b, i;

	if ((!x->table || 2 * (x->count + 1) > (uint64_t)x->mask + 1) && grow_table(x)) {
		free(owned);
		return -ENOMEM;
	}
	b = bucket(x, path, h);
	if (x->table[b]) {
		i = x->table[b] - 1;
		x->bytes = x->bytes - x->e[i].size + size;
		if (x->e[i].moving)
			x->moving_bytes = x->moving_bytes - x->e[i].size + size;
		x->e[i].size = size;
		kv_file_index_touch(x, i);
		free(owned);
		return 0;
	}
	if (x->free_head != KV_FILE_INDEX_NONE) {
		i = x->free_head;
		x->free_head = x->link[i].newer;
	} else {
		if (x->n == x->cap) {
			uint32_t cap = x->cap ? 2 * x->cap : 1024;
			struct entry *e = realloc(x->e, cap * sizeof(*e));
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
	x->e[i] = (struct entry){ .hash = h, .size = size, .path = owned ? owned : strdup(path) };
	if (!x->e[i].path) {
		x->link[i].newer = x->free_head;
		x->free_head = i;
		return -ENOMEM;
	}
	x->table[b] = i + 1;
	kv_lru_push(&x->lru, x->link, i);
	x->count++;
	x->bytes += size;
	return 0;
}

int kv_file_index_put(struct kv_file_index *x, const char *path, uint64_t size_bytes)
{
	return put_owned(x, path, NULL, size_bytes);
}

/* Linear probing without tombstones: the entries after a removed one
 * that could sit earlier move back. */
void kv_file_index_remove(struct kv_file_index *x, uint32_t id)
{
	uint32_t b = bucket(x, x->e[id].path, x->e[id].hash), next;

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
	kv_lru_remove(&x->lru, x->link, id);
	x->count--;
	x->bytes -= x->e[id].size;
	if (x->e[id].moving)
		x->moving_bytes -= x->e[id].size;
	free(x->e[id].path);
	x->e[id].path = NULL;
	x->link[id].newer = x->free_head;
	x->free_head = id;
}

const char *kv_file_index_path(const struct kv_file_index *x, uint32_t id)
{
	return x->e[id].path;
}

uint64_t kv_file_index_size(const struct kv_file_index *x, uint32_t id)
{
	return x->e[id].size;
}

int kv_file_index_moving(const struct kv_file_index *x, uint32_t id)
{
	return x->e[id].moving;
}

void kv_file_index_set_moving(struct kv_file_index *x, uint32_t id, int moving)
{
	moving = !!moving;
	if (x->e[id].moving == moving)
		return;
	x->e[id].moving = moving;
	if (moving)
		x->moving_bytes += x->e[id].size;
	else
		x->moving_bytes -= x->e[id].size;
}

uint32_t kv_file_index_oldest(const struct kv_file_index *x)
{
	return x->lru.oldest;
}

uint32_t kv_file_index_newer(const struct kv_file_index *x, uint32_t id)
{
	return x->link[id].newer;
}

void kv_file_index_usage(const struct kv_file_index *x, struct kv_file_index_usage *u)
{
	u->blocks = x->count;
	u->bytes = x->bytes;
	u->moving_bytes = x->moving_bytes;
}

/* ---- building it from the root ---- */

struct found {
	char *path;
	uint64_t size;
	int64_t last_use_ns;
};

struct scan {
	struct found *v;
	size_t n, cap;
	int err;
};

static int found_block(const struct kv_walk_entry *e, void *arg)
{
	struct scan *s = arg;

	if (e->kind != KV_WALK_BLOCK)
		return 0;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 4096;
		struct found *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return s->err = -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n].path = strdup(e->path);
	if (!s->v[s->n].path)
		return s->err = -ENOMEM;
	s->v[s->n].size = e->size_bytes;
	s->v[s->n].last_use_ns = e->last_use_ns;
	s->n++;
	return 0;
}

static int by_last_use(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	return x->last_use_ns < y->last_use_ns ? -1 : x->last_use_ns > y->last_use_ns;
}

int kv_file_index_scan(struct kv_file_index *x, const char *root,
		       const struct kv_walk_opts *opts)
{
	static const struct kv_walk_opts all = { .rank = -1 };
	struct scan s = { 0 };
	int err = kv_walk(root, opts ? opts : &all, found_block, &s);

	if (!err && s.err)
		err = s.err;
	if (!err && s.n)
		qsort(s.v, s.n, sizeof(*s.v), by_last_use);
	for (size_t i = 0; i < s.n; i++) {
		if (!err)
			err = put_owned(x, s.v[i].path, s.v[i].path, s.v[i].size);
		else
			free(s.v[i].path);
	}
	free(s.v);
	return err;
}
