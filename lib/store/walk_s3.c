/*
 * kv_walk over a bucket root: the objects of one listing (s3_list.c)
 * reported as the walk reports files, so that every program that walks
 * a root (kvls, kvevict) walks a bucket the same way.  S3 has no dirs,
 * no atime and no temp files: each object is a regular file whose atime
 * and mtime are its Last-Modified, and whose last use is that or a later
 * use recorded in the root's journals.  A path stored under both key
 * forms is one file: its times the later of the two, its size vLLM's
 * key's (what a reader gets), its allocated bytes both objects' (what
 * deleting it frees).
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <kv/lastuse.h>
#include <kv/layout.h>
#include <kv/walk.h>
#include "store/s3.h"
#include "store/walk_s3.h"

struct swalk {
	const struct kv_walk_opts *o;
	struct kv_uses *uses;
	kv_walk_fn fn;
	void *arg;
};

/* The tools' own state under the root, which no walk reports. */
static int is_tool_state(const char *rel)
{
	return strncmp(rel, KV_USES_DIR "/", strlen(KV_USES_DIR) + 1) == 0 ||
	       strncmp(rel, ".kvevict/", 9) == 0 || strcmp(rel, ".kvevict.lock") == 0;
}

static int in_shard(const struct swalk *w, const struct kv_walk_entry *e)
{
	const char *slash;
	char top[4];

	if (!w->o || w->o->shard_count <= 1)
		return 1;
	if (e->kind != KV_WALK_BLOCK)
		return w->o->shard_index == 0;
	slash = strchr(e->path, '/');
	if (!slash || strlen(slash + 1) < 3)
		return w->o->shard_index == 0;
	memcpy(top, slash + 1, 3);
	top[3] = '\0';
	return kv_layout_bucket_shard(top, w->o->shard_count) == (int)w->o->shard_index;
}

static int on_object(const struct kvi_s3_listed *o, void *arg)
{
	struct swalk *w = arg;
	struct kv_walk_entry e;
	const char *slash;
	char dir[KV_NAME_MAX + 1];

	/* Twins are reported once, with vLLM's key: the longer one. */
	if (is_tool_state(o->rel) || (o->twin && strlen(o->key) < strlen(o->twin->key)))
		return 0;
	memset(&e, 0, sizeof(e));
	e.path = o->rel;
	slash = strrchr(o->rel, '/');
	e.name = slash ? slash + 1 : o->rel;
	e.dirfd = -1;
	e.size_bytes = e.alloc_bytes = o->size;
	e.mtime_ns = o->mtime_ns;
	if (o->twin) {
		e.alloc_bytes += o->twin->size;
		if (o->twin->mtime_ns > e.mtime_ns)
			e.mtime_ns = o->twin->mtime_ns;
	}
	e.atime_ns = e.last_use_ns = e.mtime_ns;
	e.nlink = 1;
	e.mode = S_IFREG | 0644;
	if (kv_layout_block_parse(o->rel, &e.ref) == 0) {
		e.kind = KV_WALK_BLOCK;
		e.has_rank = 1;
		e.last_use_ns = kv_last_use_ns(w->uses, o->rel, e.mtime_ns);
	} else if (slash && strcmp(e.name, KV_CONFIG_NAME) == 0 &&
		   (size_t)(slash - o->rel) < sizeof(dir) && !memchr(o->rel, '/', (size_t)(slash - o->rel))) {
		memcpy(dir, o->rel, (size_t)(slash - o->rel));
		dir[slash - o->rel] = '\0';
		e.kind = kv_layout_model_dir_parse(dir, &e.ref) == 0 ? KV_WALK_CONFIG :
								       KV_WALK_FOREIGN;
		if (e.kind == KV_WALK_CONFIG && w->o && w->o->model &&
		    !kv_layout_model_matches(w->o->model, e.ref.model_dir))
			return 0;
	} else {
		e.kind = kv_layout_is_temp(e.name) ? KV_WALK_TEMP : KV_WALK_FOREIGN;
		/* The rank dir a stray object sits in, where it names one. */
		if (slash && (size_t)(strchr(o->rel, '/') - o->rel) < sizeof(dir)) {
			size_t n = (size_t)(strchr(o->rel, '/') - o->rel);

			memcpy(dir, o->rel, n);
			dir[n] = '\0';
			if (kv_layout_rank_dir_parse(dir, &e.ref) == 0)
				e.has_rank = 1;
			else
				memset(&e.ref, 0, sizeof(e.ref));
		}
		if (w->o && (w->o->model || w->o->rank >= 0) && !e.has_rank)
			return 0;
	}
	if (!in_shard(w, &e))
		return 0;
	return w->fn(&e, w->arg);
}

int kvi_walk_s3(const char *root, const struct kv_walk_opts *opts, kv_walk_fn fn, void *arg)
{
	struct swalk w = { .o = opts, .fn = fn, .arg = arg };
	struct kvi_s3 *s;
	int rc = kvi_s3_open(root, &s);

	if (rc < 0)
		return rc;
	rc = kvi_s3_list_all(s, opts ? opts->model : NULL, opts ? opts->rank : -1,
			     opts && opts->flags & KV_WALK_NO_STAT ? NULL : &w.uses, on_object, &w);
	kv_uses_free(w.uses);
	kvi_s3_close(s);
	return rc;
}
