/*
 * kvoffd's tiers below its RAM pool, in order: local ones, bounded
 * (--tier local:/nvme/kv:6T), then shared storage, usually unbounded: a
 * cache root or a bucket (--tier shared:s3://BUCKET/PREFIX).  Each is a
 * libkv tier (kv/tier.h), one handle for the loop and one per worker.
 * The loop's handle of a bounded tier is libkv's bounded tier, claimed
 * in the daemon's name: its index (least recently used first) answers
 * for it without a system call, the workers' writes and reads through
 * their own handles are told to it, and past its capacity it names the
 * oldest blocks, which move down one DEMOTE job each (kv_tier_demote).
 * Everything here runs on the event loop thread.
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

/* Count an unbounded tier's blocks (a bucket's by listing it); a bounded
 * one's index says. */
static int count_blocks(struct ftier *t)
{
	struct kv_tier_stat st;
	int err;

	if (!t->capacity)
		return kv_tier_list(t->tier, NULL, count_block, t);
	err = kv_tier_stat(t->tier, &st);
	t->walk_blocks = st.blocks;
	t->walk_bytes = st.used_bytes;
	return err;
}

int tier_open_handle(const struct offd *d, unsigned t, unsigned flags, struct kv_tier **out)
{
	struct kv_io_opts opts = { .queue_depth = 4, .flags = d->io_flags | flags };
	const char *root = d->tiers[t].root;

	return kv_root_is_s3(root) ? kv_tier_s3_open(root, &opts, out) :
				     kv_tier_file_open(root, &opts, out);
}

/* The loop's handle: a bounded tier's LRU is the daemon's alone (a second
 * daemon on the root, or kvevict without --force, would contradict it),
 * so it is claimed in the daemon's name, and indexed. */
static int open_loop_handle(struct offd *d, unsigned k)
{
	struct kv_io_opts opts = { .queue_depth = 4, .flags = d->io_flags };
	struct ftier *t = &d->tiers[k];
	char holder[600];

	if (!t->capacity)
		return tier_open_handle(d, k, 0, &t->tier);
	snprintf(holder, sizeof(holder), "socket %s", d->socket_path);
	return kv_tier_file_open_bounded_by(t->root, &opts, t->capacity, holder, &t->tier);
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

		err = open_loop_handle(d, k);
		if (err == -EBUSY) {
			tool_err("cannot manage '%s': another kvoffd does (see its " TOOL_OFFD_LOCK
				 ": %s)", t->root, kv_error_detail());
			return err;
		}
		if (err) {
			tool_root_err("open", t->root, err);
			return err;
		}
		err = count_blocks(t);
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
	}
}

/* ---- moving blocks ---- */

int tiers_indexed(struct offd *d, const char *path, uint64_t *size)
{
	for (unsigned k = 0; k < d->ntiers; k++)
		if (d->tiers[k].capacity &&
		    kv_tier_bounded_find(d->tiers[k].tier, path, size, NULL) == 0)
			return 1;
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
		int moving;

		if (!d->tiers[k].capacity) {
			mask |= 1u << k;
			continue;
		}
		if (kv_tier_bounded_find(d->tiers[k].tier, path, NULL, &moving) < 0)
			continue;
		mask |= 1u << k;
		if (moving)
			mask |= ~0u << (k + 1) & ((1u << d->ntiers) - 1);
	}
	return mask;
}

int tier_moving(struct offd *d, unsigned t, const char *path)
{
	int moving = 0;

	return d->tiers[t].capacity &&
	       kv_tier_bounded_find(d->tiers[t].tier, path, NULL, &moving) == 0 && moving;
}

void tier_touch(struct offd *d, unsigned t, const char *path)
{
	if (d->tiers[t].capacity)
		kv_tier_bounded_used(d->tiers[t].tier, path);
}

void tier_stored(struct offd *d, unsigned t, const char *path, uint64_t size)
{
	struct ftier *ft = &d->tiers[t];

	if (!ft->capacity)
		return;
	if (kv_tier_bounded_stored(ft->tier, path, size)) {
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

struct trim {
	struct offd *d;
	unsigned tier;
};

/* A block tier_trim's tier offers to move out: a DEMOTE job, while the
 * queue has room. */
static int demote_out(void *arg, const char *path, uint64_t size)
{
	struct trim *tr = arg;
	struct offd *d = tr->d;
	struct job j = { .kind = JOB_DEMOTE, .tier = tr->tier, .len = size, .dest = TIER_NONE };

	if (d->wb_inflight >= d->wr.wcap)
		return -EAGAIN;
	if (write_pending(d, tr->tier, path))
		return 1;
	snprintf(j.path, sizeof(j.path), "%s", path);
	if (writer_push(d, &j))
		return -EAGAIN;
	d->wb_inflight++;
	return 0;
}

void tier_trim(struct offd *d, unsigned t)
{
	struct trim tr = { .d = d, .tier = t };

	if (d->tiers[t].capacity)
		kv_tier_bounded_trim(d->tiers[t].tier, demote_out, &tr);
}

void tier_demoted(struct offd *d, const struct job *j)
{
	struct ftier *from = &d->tiers[j->tier];
	uint32_t s;

	d->wb_inflight--;
	for (unsigned k = 0; k < d->ntiers; k++)
		if (j->refused & (1u << k))
			d->tiers[k].st.errors++;
	if (kv_tier_bounded_moved(from->tier, j->path) < 0)
		return;
	if (j->result && j->result != -ENOENT) {
		from->st.errors++;
		tool_err("cannot move '%s' out of '%s': %s", j->path, from->root,
			 kv_strerror(j->result));
	}
	s = kv_slots_find(d->store, j->path);
	if (s != KV_SLOT_NONE)
		d->slots[s].held &= ~(1u << j->tier);
	if (j->result == -ENOENT)
		return;	/* removed by someone else: nothing to move */
	if (j->dest == TIER_NONE) {
		tool_err("dropped '%s' from '%s': no lower tier took it", j->path, from->root);
		return;
	}
	if (s != KV_SLOT_NONE)
		d->slots[s].held |= 1u << j->dest;
	tier_stored(d, j->dest, j->path, j->len);
	tier_trim(d, j->tier);
}
