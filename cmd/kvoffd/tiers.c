/*
 * kvoffd's tiers below its RAM pool, in order: local ones, bounded
 * (--tier local:/nvme/kv:6T), then shared storage, usually unbounded: a
 * cache root or a bucket (--tier shared:s3://BUCKET/PREFIX).  Each is a
 * libkv tier (kv/tier.h), one handle for the loop and one per worker.
 * A bounded tier is the daemon's own: it claims the root with a lock
 * file, indexes its blocks at start (least recently used first) and keeps an
 * exact LRU of them; past its capacity the oldest move down, one DEMOTE
 * job each, to the next tier that takes them.  Everything here runs on
 * the event loop thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "../tool.h"
#include "kvoffd.h"

const char *tier_name(const struct offd *d, unsigned t)
{
	return tool_tier_kind_name(d->tiers[t].kind);
}

/* ---- start-up ---- */

static int count_block(const struct kv_tier_entry *e, void *arg)
{
	struct ftier *t = arg;

	if (!e->err) {
		t->walk_blocks++;
		t->walk_bytes += e->size_bytes;
	}
	return 0;
}

/* Walk tier t: index a bounded one's blocks oldest first, count an
 * unbounded one's (a bucket's by listing it). */
static int reindex(struct ftier *t)
{
	struct kv_walk_opts opts = { .rank = -1 };
	struct kv_file_index_usage u;
	int err;

	if (!t->capacity)
		return kv_tier_list(t->tier, NULL, count_block, t);
	err = kv_file_index_new(&t->idx);
	if (!err)
		err = kv_file_index_scan(t->idx, t->root, &opts);
	if (err)
		return err;
	kv_file_index_usage(t->idx, &u);
	t->walk_blocks = u.blocks;
	t->walk_bytes = u.bytes;
	return 0;
}

int tier_open_handle(const struct offd *d, unsigned t, unsigned flags, struct kv_tier **out)
{
	struct kv_io_opts opts = { .queue_depth = 4, .flags = d->io_flags | flags };
	const char *root = d->tiers[t].root;

	return kv_root_is_s3(root) ? kv_tier_s3_open(root, &opts, out) :
				     kv_tier_file_open(root, &opts, out);
}

/* A bounded tier's LRU is the daemon's alone: a second daemon on the
 * root, or kvevict (without --force), would contradict it. */
static int claim(struct offd *d, struct ftier *t)
{
	char holder[600];

	snprintf(holder, sizeof(holder), "socket %s", d->socket_path);
	return kv_tier_claim(t->root, holder, &t->lockfd);
}

/* Two tiers on one directory would lose blocks: a move down would find
 * the block "already there" and remove the only copy. */
static int same_dir_twice(struct offd *d)
{
	struct stat st[FILE_TIERS_MAX];

	for (unsigned k = 0; k < d->ntiers; k++) {
		int bucket = kv_root_is_s3(d->tiers[k].root);

		if (!bucket && stat(d->tiers[k].root, &st[k]) < 0)
			continue;	/* opening it says why */
		for (unsigned j = 0; j < k; j++)
			if (bucket ? !strcmp(d->tiers[j].root, d->tiers[k].root) :
			    !kv_root_is_s3(d->tiers[j].root) && st[j].st_dev == st[k].st_dev &&
			    st[j].st_ino == st[k].st_ino) {
				tool_err("tiers %u and %u are the same directory ('%s', '%s')",
					 j, k, d->tiers[j].root, d->tiers[k].root);
				return 1;
			}
	}
	return 0;
}

int tiers_open(struct offd *d)
{
	int err;

	if (same_dir_twice(d))
		return -EINVAL;

	for (unsigned k = 0; k < d->ntiers; k++) {
		struct ftier *t = &d->tiers[k];

		err = tier_open_handle(d, k, 0, &t->tier);
		if (err) {
			tool_root_err("open", t->root, err);
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

		kv_tier_close(t->tier);
		t->tier = NULL;
		kv_file_index_free(t->idx);
		t->idx = NULL;
		if (t->lockfd >= 0)
			close(t->lockfd);
		t->lockfd = -1;
	}
}

/* ---- moving blocks ---- */

int tiers_indexed(struct offd *d, const char *path, uint64_t *size)
{
	for (unsigned k = 0; k < d->ntiers; k++) {
		uint32_t i;

		if (!d->tiers[k].capacity)
			continue;
		i = kv_file_index_find(d->tiers[k].idx, path);
		if (i == KV_FILE_INDEX_NONE)
			continue;
		if (size)
			*size = kv_file_index_size(d->tiers[k].idx, i);
		return 1;
	}
	return 0;
}

unsigned tiers_unbounded(const struct offd *d)
{
	unsigned mask = 0;

	for (unsigned k = 0; k < d->ntiers; k++)
		if (!d->tiers[k].capacity)
			mask |= 1u << k;
	return mask;
}

/* Unbounded tiers are asked; a bounded one only if its index has the
 * block, and those below one that is moving it out are asked too. */
unsigned tiers_probe(struct offd *d, const char *path)
{
	unsigned mask = 0;

	for (unsigned k = 0; k < d->ntiers; k++) {
		struct kv_file_index *x = d->tiers[k].idx;
		uint32_t i;

		if (!d->tiers[k].capacity) {
			mask |= 1u << k;
			continue;
		}
		i = kv_file_index_find(x, path);
		if (i == KV_FILE_INDEX_NONE)
			continue;
		mask |= 1u << k;
		if (kv_file_index_moving(x, i))
			mask |= ~0u << (k + 1) & ((1u << d->ntiers) - 1);
	}
	return mask;
}

int tier_moving(struct offd *d, unsigned t, const char *path)
{
	uint32_t i;

	if (!d->tiers[t].capacity)
		return 0;
	i = kv_file_index_find(d->tiers[t].idx, path);
	return i != KV_FILE_INDEX_NONE && kv_file_index_moving(d->tiers[t].idx, i);
}

void tier_touch(struct offd *d, unsigned t, const char *path)
{
	struct kv_file_index *x = d->tiers[t].idx;
	uint32_t i;

	if (!d->tiers[t].capacity || (i = kv_file_index_find(x, path)) == KV_FILE_INDEX_NONE)
		return;
	kv_file_index_touch(x, i);
}

void tier_stored(struct offd *d, unsigned t, const char *path, uint64_t size, int wrote)
{
	struct ftier *ft = &d->tiers[t];

	if (wrote) {
		ft->st.writes++;
		ft->st.write_bytes += size;
		report_tier_event(d, "BlockStored", t, path, size);
	}
	if (!ft->capacity)
		return;
	if (kv_file_index_put(ft->idx, path, size)) {
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
	struct kv_file_index *x = ft->idx;
	struct kv_file_index_usage u;
	uint32_t i;

	if (!ft->capacity)
		return;
	for (i = kv_file_index_oldest(x); i != KV_FILE_INDEX_NONE && d->wb_inflight < d->wr.wcap;
	     i = kv_file_index_newer(x, i)) {
		const char *path = kv_file_index_path(x, i);
		struct job j = { .kind = JOB_DEMOTE, .tier = t, .len = kv_file_index_size(x, i),
				 .dest = TIER_NONE };

		kv_file_index_usage(x, &u);
		if (u.bytes - u.moving_bytes <= ft->capacity)
			return;
		if (kv_file_index_moving(x, i) || write_pending(d, t, path))
			continue;
		snprintf(j.path, sizeof(j.path), "%s", path);
		if (writer_push(d, &j))
			return;
		kv_file_index_set_moving(x, i, 1);
		d->wb_inflight++;
	}
}

void tier_demoted(struct offd *d, const struct job *j)
{
	struct ftier *from = &d->tiers[j->tier];
	uint32_t i = kv_file_index_find(from->idx, j->path), s;

	d->wb_inflight--;
	for (unsigned k = 0; k < d->ntiers; k++)
		if (j->refused & (1u << k))
			d->tiers[k].st.errors++;
	if (i == KV_FILE_INDEX_NONE)
		return;
	if (j->result && j->result != -ENOENT) {
		from->st.errors++;
		tool_err("cannot move '%s' out of '%s': %s", j->path, from->root,
			 kv_strerror(j->result));
	}
	if (j->result != -ENOENT)
		report_tier_event(d, "BlockRemoved", j->tier, j->path, j->len);
	kv_file_index_remove(from->idx, i);
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
	tier_stored(d, j->dest, j->path, j->len, !j->existed);
	tier_trim(d, j->tier);
}
