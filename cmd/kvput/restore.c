/*
 * kvput --archive: the blocks of a kvget --archive stream back into a
 * cache root.  Entries are read, decompressed and checked one after
 * another while up to --qd earlier ones are being written (the same
 * kv_tier batch as --batch), so memory stays at --qd blocks whatever the
 * archive's size.  A block is put only once its data has checked, and
 * its model dir and config.json made only then, so a damaged entry
 * leaves nothing behind; the rest of the archive still restores.
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kvput.h"

/* A model dir made (or found) once: 0, or why it cannot be. */
struct model_made {
	struct model_made *next;
	char model_dir[KV_NAME_MAX + 1];
	int err;
	char why[KV_NAME_MAX + 256];
};

struct rslot {
	struct kv_tier_req req;
	struct rslot *next_free;
	unsigned long entry;
	char hash[KV_HASH_MAX_LEN + 1];
	char relpath[PATH_MAX];
	void *buf;
	size_t cap;
};

struct restore {
	struct put *put;
	struct kv_archive_reader *r;
	const char *name;	/* the archive, for messages */
	int rootfd;
	struct rslot *free;
	struct model_made *models;
	unsigned long entry;	/* records seen, damaged ones too */
	uint64_t bytes;		/* of the blocks read so far */
	int stop;		/* the archive ended badly: no more entries */
	struct tool_progress progress;
};

/* A refused entry: said, and its result record. */
static void refuse(struct restore *rs, const char *hash, const char *relpath,
		   const char *why)
{
	tool_err("%s: entry %lu: %s", rs->name, rs->entry, why);
	print_result(rs->put, hash, relpath, rs->entry, 0, 0, why);
}

/* The libkv failure err in words: its detail where it has one. */
static const char *because(int err)
{
	return *kv_error_detail() ? kv_error_detail() : kv_strerror(err);
}

/* e's model dir and config.json in the root, as upstream makes them:
 * once per model dir; 0, or -1 with why in *why. */
static int model_dir_ready(struct restore *rs, const struct kv_archive_entry *e,
			   const char **why)
{
	struct model_made *m;
	struct kv_config *cfg;
	char made[KV_NAME_MAX + 1];
	int ret;

	for (m = rs->models; m; m = m->next)
		if (!strcmp(m->model_dir, e->ref.model_dir))
			break;
	if (!m) {
		m = calloc(1, sizeof(*m));
		if (!m) {
			*why = kv_strerror(-ENOMEM);
			return -1;
		}
		strcpy(m->model_dir, e->ref.model_dir);
		ret = kv_config_parse(e->config, e->config_len, &cfg);
		if (ret < 0) {
			snprintf(m->why, sizeof(m->why), "its config.json: %s", because(ret));
		} else {
			ret = kv_config_ensure_model_dir(rs->rootfd, cfg, made, sizeof(made));
			/* The config must name the dir the entry says it is of. */
			if (ret == 0 && strcmp(made, e->ref.model_dir))
				ret = -KV_EFINGERPRINT;
			if (ret < 0)
				snprintf(m->why, sizeof(m->why), "cannot make the model dir '%s': %s",
					 e->ref.model_dir, kv_strerror(ret));
			kv_config_free(cfg);
		}
		m->err = ret;
		m->next = rs->models;
		rs->models = m;
	}
	*why = m->why;
	return m->err ? -1 : 0;
}

/* The next entry that checks into s: 1, or 0 when there are no more. */
static int next_entry(struct restore *rs, struct rslot *s)
{
	struct kv_archive_entry e;
	const char *why;
	int ret;

	while (!rs->stop) {
		ret = kv_archive_next(rs->r, &e);
		if (ret == 0)
			return 0;
		rs->entry++;
		if (ret < 0) {
			refuse(rs, NULL, NULL, because(ret));
			/* Damage is skipped past; a cut stream or a read error ends it. */
			rs->stop = ret != -KV_EPROTO && ret != -EFBIG;
			continue;
		}
		rs->bytes += e.size_bytes;
		tool_progress_show(&rs->progress, "%lu %s (%" PRIu64 " bytes) read from '%s'",
				   rs->entry, tool_plural(rs->entry, "block", "blocks"), rs->bytes,
				   rs->name);
		strcpy(s->hash, e.ref.hash);
		if (kv_layout_block_path_ref(&e.ref, s->relpath, sizeof(s->relpath)) < 0) {
			refuse(rs, s->hash, NULL, "its block path is too long");
			continue;
		}
		if (s->cap < e.size_bytes || !s->buf) {
			kv_io_buf_free(s->buf);
			s->cap = e.size_bytes ? e.size_bytes : 1;
			s->buf = kv_io_buf_alloc(s->cap);
			if (!s->buf) {
				s->cap = 0;
				refuse(rs, s->hash, s->relpath, kv_strerror(-ENOMEM));
				rs->stop = 1;
				continue;
			}
		}
		ret = kv_archive_data(rs->r, s->buf, s->cap);
		if (ret < 0) {
			refuse(rs, s->hash, s->relpath, because(ret));
			rs->stop = ret != -KV_ECHECKSUM;
			continue;
		}
		if (e.ref.layout == KV_LAYOUT_V1 && model_dir_ready(rs, &e, &why) < 0) {
			refuse(rs, s->hash, s->relpath, why);
			continue;
		}
		s->entry = rs->entry;
		s->req = (struct kv_tier_req){ .op = KV_TIER_OP_PUT, .key = s->relpath,
					       .buf = s->buf, .len = (size_t)e.size_bytes,
					       .user = s };
		return 1;
	}
	return 0;
}

static int restore_next(void *arg, struct kv_tier_req **req)
{
	struct restore *rs = arg;
	struct rslot *s = rs->free;
	int ret;

	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -ENOMEM;
	} else {
		rs->free = s->next_free;
	}
	ret = next_entry(rs, s);
	if (ret == 1) {
		*req = &s->req;
		return 1;
	}
	s->next_free = rs->free;
	rs->free = s;
	return 0;
}

static void restore_done(void *arg, struct kv_tier_req *req)
{
	struct restore *rs = arg;
	struct rslot *s = req->user;

	if (req->result < 0) {
		tool_store_err(&rs->put->store, TOOL_STORE_PUT, s->relpath, req->result);
		print_result(rs->put, s->hash, s->relpath, s->entry, 0, 0,
			     kv_strerror(req->result));
	} else {
		print_result(rs->put, s->hash, s->relpath, s->entry, req->done, req->existed,
			     NULL);
		if (!req->existed)
			announce(rs->put, s->relpath);
	}
	s->next_free = rs->free;
	rs->free = s;
}

int restore_archive(struct put *put, const char *root, const char *path,
		    const struct kv_io_opts *opts)
{
	struct kv_archive_read_opts ro = { .max_block_bytes = put->max_block_bytes };
	struct restore rs = { .put = put, .name = strcmp(path, "-") ? path : "<stdin>" };
	struct rslot *s;
	struct model_made *m;
	int fd = STDIN_FILENO, ret;

	tool_progress_init(&rs.progress);
	put->seq_key = "entry";
	rs.rootfd = tool_root_open(root);
	if (strcmp(path, "-") && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		tool_err("cannot open '%s': %s", path, strerror(errno));
		close(rs.rootfd);
		return EXIT_RUNTIME;
	}
	ret = kv_archive_reader_open(fd, &ro, &rs.r);
	if (ret < 0) {
		tool_err("%s: %s", rs.name, because(ret));
		close(rs.rootfd);
		if (fd != STDIN_FILENO)
			close(fd);
		return EXIT_RUNTIME;
	}
	tool_store_open(&put->store, NULL, root, opts);
	ret = kv_tier_batch_stream(put->store.tier, restore_next, restore_done, &rs);
	if (ret < 0)
		tool_err("restore stopped: %s", kv_strerror(ret));
	tool_store_close(&put->store);
	tool_progress_done(&rs.progress);
	kv_archive_reader_close(rs.r);
	while ((s = rs.free)) {
		rs.free = s->next_free;
		kv_io_buf_free(s->buf);
		free(s);
	}
	while ((m = rs.models)) {
		rs.models = m->next;
		free(m);
	}
	close(rs.rootfd);
	if (fd != STDIN_FILENO)
		close(fd);
	return ret < 0 || rs.stop || put->failed ? EXIT_RUNTIME : 0;
}
