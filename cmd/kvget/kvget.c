/*
 * kvget: read a block from a cache root, test that one is there, or
 * read many (--batch) with up to --qd reads in flight.
 *
 * A block is read whole and checked against its user.kv.xxh3 checksum
 * before a byte goes out, so a damaged block never reaches the caller in
 * part.  The answer (0 hit, 1 miss) is kept apart from failures (3).
 * With --daemon the store is kvoffd instead, a batch over one
 * connection; the code is the same (kv_tier).
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../tool.h"
#include "../tool_record.h"

#define DEFAULT_QD	32
#define MAX_QD		1024
#define GET_TRIES	3	/* reads of a block that turned out bigger */
#define DEFAULT_MAX_BLOCK_BYTES	(1ull << 30)	/* kvput's too */

enum { OPT_RANK = 256, OPT_GROUP, OPT_BLOCKS, OPT_BLOCK_BYTES, OPT_NO_TOUCH,
       OPT_BUFFERED, OPT_QD, OPT_DAEMON, OPT_ARCHIVE, OPT_ARCHIVE_LEVEL,
       OPT_MAX_BLOCK_BYTES, OPT_TIER, OPT_PROMOTE };

/* A model dir's config.json as read once for the archive, or why not. */
struct config_text {
	struct config_text *next;
	char model_dir[KV_NAME_MAX + 1];
	char *text;
	size_t len;
	int err;
};

/* --archive: the blocks of a batch go into one archive, FILE or stdout. */
struct archive {
	const char *path;		/* NULL: none; "-": stdout */
	struct kv_file_out *file;	/* FILE, replaced at the end */
	int fd;
	int rootfd;			/* for the models' config.json */
	int level;
	int err;			/* a failed write: the batch stops */
	struct kv_archive_writer *w;
	struct config_text *configs;
	uint64_t blocks, bytes;		/* archived so far */
	struct tool_progress progress;
};

struct get {
	char model_dir[KV_NAME_MAX + 1];	/* "" when none was given */
	unsigned rank, group;
	uint64_t tail_bytes;			/* 0: whole blocks */
	uint64_t max_block_bytes;		/* a bigger block is refused */
	int exists;
	const char *out;
	struct tool_store store;
	struct archive archive;
	/* A bucket keeps no atime: a hit is recorded as a use in this
	 * node's journal object, as kvwatch records one (kv/lastuse.h). */
	struct kv_use_recorder *uses;
	int misses, errors;
};

struct slot {
	struct kv_tier_req req;
	struct slot *next_free;
	unsigned long line;
	char hash[KV_HASH_MAX_LEN + 1];
	char relpath[PATH_MAX];
	void *buf;
	size_t cap;
	unsigned tries;		/* reads that found the block grown */
};

struct batch {
	struct get *get;
	struct kv_archive_entry archived;	/* the last block archived */
	struct tool_lines in;
	struct slot *free;
	struct slot *retry;	/* blocks to read again, with a bigger buffer */
	uint64_t size_hint;	/* the biggest block seen so far */
};

static void usage(void)
{
	printf("Usage: kvget [--root DIR] (--model-dir DIR | --config FILE) [--rank N] [--group N]\n"
	       "             [--blocks N --block-bytes SIZE] [--no-touch] [--buffered] [-o FILE] HASH\n"
	       "       kvget [--root DIR] (--model-dir DIR | --config FILE) [--rank N] [--group N]\n"
	       "             --exists HASH\n"
	       "       kvget [--root DIR] [--model-dir DIR | --config FILE] [--rank N] [--group N]\n"
	       "             [--blocks N --block-bytes SIZE] [--no-touch] [--buffered] [--exists]\n"
	       "             [--qd N] [-o DIR] --batch\n"
	       "       kvget [--root DIR] [--model-dir DIR | --config FILE] [--rank N] [--group N]\n"
	       "             [--no-touch] [--buffered] [--qd N] [--archive-level N]\n"
	       "             --batch --archive FILE|-\n"
	       "       kvget --daemon SOCK (--model-dir DIR | --config FILE) [--rank N] [--group N]\n"
	       "             [--blocks N --block-bytes SIZE] [--exists] [-o FILE] HASH\n"
	       "       kvget --daemon SOCK [--model-dir DIR | --config FILE] [--rank N] [--group N]\n"
	       "             [--blocks N --block-bytes SIZE] [--exists] [-o DIR] --batch\n"
	       "       kvget --tier KIND:DIR[:SIZE]... [--promote first-hit|second-hit|never]\n"
	       "             (--model-dir DIR | --config FILE) [--rank N] [--group N]\n"
	       "             [--blocks N --block-bytes SIZE] [--exists] [-o FILE|DIR] HASH|--batch\n"
	       "       kvget -h | -V\n"
	       "\n"
	       "Read the KV-cache block HASH to stdout (or FILE), checked against its\n"
	       "checksum, and stamp its atime (vLLM's readers never do).  With --batch, read\n"
	       "hashes (one per line) or kvls NDJSON block records on stdin and print one\n"
	       "NDJSON record per block: {\"hash\",\"hit\",\"line\",\"path\",\"size_bytes\"}.\n"
	       "\n"
	       "  -r, --root DIR         the cache root, or a bucket s3://BUCKET[/PREFIX]\n"
	       "                         (default $KV_ROOT)\n"
	       "  -m, --model-dir DIR    the model dir, <model>_<fingerprint>\n"
	       "  -c, --config FILE      the model config.json that names the model dir\n"
	       "      --rank N           the worker's global rank (default 0)\n"
	       "      --group N          KV-cache group (default 0)\n"
	       "  -e, --exists           only test presence: exit 0 present, 1 absent\n"
	       "      --blocks N         read only the last N blocks of the file ...\n"
	       "      --block-bytes SIZE ... of SIZE bytes each (2M, 163840)\n"
	       "      --max-block-bytes SIZE  refuse a block larger than SIZE, as\n"
	       "                         one is held whole in memory (default 1G)\n"
	       "      --no-touch         leave the atime alone\n"
	       "      --buffered         never use O_DIRECT\n"
	       "  -o, --output FILE      write to FILE, atomically (- for stdout); with\n"
	       "                         --batch, a directory that gets <hash>.bin files\n"
	       "  -b, --batch            read many blocks named on stdin\n"
	       "      --qd N             reads in flight in a batch (default %d)\n"
	       "      --archive FILE     with --batch, write the blocks into one zstd archive\n"
	       "                         (- for stdout, then no records), each with its\n"
	       "                         model's config.json, for kvput --archive\n"
	       "      --archive-level N  zstd level of the archive (default 1)\n"
	       "      --daemon SOCK      get the blocks through kvoffd at SOCK: its RAM tier,\n"
	       "                         else its file tier (default $KV_DAEMON)\n"
	       "      --tier KIND:DIR[:SIZE]\n"
	       "                         read through a hierarchy of file tiers instead of\n"
	       "                         --root, in order, as kvoffd's --tier: KIND local or\n"
	       "                         shared, SIZE bounds a tier (every one but the last),\n"
	       "                         DIR may be a bucket s3://BUCKET[/PREFIX] (the last)\n"
	       "      --promote POLICY   a hit below the first tier is copied up to it:\n"
	       "                         first-hit (default), second-hit or never\n"
	       "  -h, --help             show this help and exit\n"
	       "  -V, --version          show the version and exit\n"
	       "\n"
	       "Exit status: 0 found (all found), 1 absent (some absent), 2 usage error,\n"
	       "3 a block could not be read or failed its checksum, 4 the daemon could not\n"
	       "be reached.\n",
	       DEFAULT_QD);
	exit(0);
}

static size_t round_up(uint64_t len)
{
	return (len + KV_IO_ALIGN - 1) & ~(uint64_t)(KV_IO_ALIGN - 1);
}

static int is_miss(int err)
{
	return err == -ENOENT || err == -ENOTDIR;
}

/* Why a kv_file_replace call failed: its detail ("it is a FIFO with no
 * reader"), else the code's words. */
static const char *file_error(int err)
{
	return *kv_error_detail() ? kv_error_detail() : kv_strerror(err);
}

/* Room for an O_DIRECT read of len bytes. */
static int ensure_buf(void **buf, size_t *cap, size_t len)
{
	void *nb;

	len = round_up(len ? len : 1);
	if (*buf && *cap >= len)
		return 0;
	nb = kv_io_buf_alloc(len);
	if (!nb)
		return -ENOMEM;
	kv_io_buf_free(*buf);
	*buf = nb;
	*cap = len;
	return 0;
}

/* --- one block -------------------------------------------------------- */

/* The block to -o FILE (atomically) or stdout; 0, or -errno said on stderr. */
static int emit(struct get *get, const void *buf, size_t len)
{
	int ret;

	if (get->out && strcmp(get->out, "-")) {
		/* Whole or not at all; a device or a FIFO is written in place. */
		ret = kv_file_replace(AT_FDCWD, get->out, buf, len, 0666, KV_FILE_IN_PLACE);
		if (ret < 0)
			tool_err("cannot write '%s': %s", get->out, file_error(ret));
	} else {
		ret = kv_write_full(STDOUT_FILENO, buf, len);
		if (ret < 0)
			tool_err("write error: %s", kv_strerror(ret));
	}
	return ret;
}

/* The bytes a whole block needs: a daemon's slot, else the block's size;
 * -EMSGSIZE over --max-block-bytes, as a block is held whole in memory. */
static int block_bytes(struct get *get, const char *relpath, uint64_t *size)
{
	int ret;

	*size = get->store.block_max;
	ret = *size ? 0 : kv_tier_size(get->store.tier, relpath, size);
	if (ret == 0 && *size > get->max_block_bytes)
		return -EMSGSIZE;
	return ret;
}

/* Why a block is not read: over the limit, or the store's words. */
static const char *get_error(struct get *get, int err, char *buf, size_t len)
{
	char size[32];

	if (err != -EMSGSIZE)
		return kv_strerror(err);
	kv_size_format(get->max_block_bytes, size, sizeof(size));
	snprintf(buf, len, "larger than the %s block limit (--max-block-bytes)", size);
	return buf;
}

/* A hit is a use (but --no-touch). */
static void used(struct get *get, const char *relpath)
{
	static int said;
	int rc;

	if (!get->uses)
		return;
	rc = kv_use_record(get->uses, relpath, -1, kv_now_ns());
	if (rc < 0 && !said++)
		tool_err("cannot record the use of '%s' in %s's journal: %s", relpath,
			 get->store.root, kv_strerror(rc));
}

static int get_one(struct get *get, const char *relpath)
{
	struct tool_store *st = &get->store;
	char where[PATH_MAX + 64], why[128];
	void *buf = NULL;
	size_t cap = 0, len = 0;
	uint64_t size;
	int ret, tries, rc = 0;

	if (get->exists) {
		ret = kv_tier_has(st->tier, relpath);
		if (is_miss(ret))
			return EXIT_ANSWER_NO;
		if (ret < 0) {
			tool_store_err(st, TOOL_STORE_OPEN, relpath, ret);
			return tool_store_exit(st, ret);
		}
		return 0;
	}
	if (!get->out && isatty(STDOUT_FILENO))
		tool_usage_fail("refusing to write block data to a terminal; use -o FILE, "
				"-o - or a redirection");
	for (tries = 0; tries < GET_TRIES; tries++) {
		if (get->tail_bytes) {
			len = get->tail_bytes;
			ret = ensure_buf(&buf, &cap, len);
			if (ret == 0)
				ret = kv_tier_get_tail(st->tier, relpath, buf, len);
		} else {
			ret = block_bytes(get, relpath, &size);
			if (ret == 0)
				ret = ensure_buf(&buf, &cap, size);
			if (ret == 0)
				ret = kv_tier_get(st->tier, relpath, buf, cap, &len);
		}
		if (ret != -EFBIG)
			break;
	}
	tool_store_where(st, relpath, where, sizeof(where));
	if (is_miss(ret)) {
		tool_store_err(st, TOOL_STORE_MISS, relpath, ret);
		kv_io_buf_free(buf);
		return EXIT_ANSWER_NO;
	}
	if (ret == -KV_ESHORT && kv_tier_size(st->tier, relpath, &size) == 0 &&
	    size != KV_TIER_SIZE_UNKNOWN)
		tool_err("%s holds %llu bytes, fewer than the %llu asked for", where,
			 (unsigned long long)size, (unsigned long long)len);
	else if (ret == -KV_ESHORT)
		tool_err("%s holds fewer than the %llu bytes asked for", where,
			 (unsigned long long)len);
	else if (ret == -KV_ECHECKSUM)
		tool_err("%s: checksum mismatch (the file is left in place)", where);
	else if (ret == -EMSGSIZE)
		tool_err("%s: %s", where, get_error(get, ret, why, sizeof(why)));
	else if (ret < 0)
		tool_store_err(st, TOOL_STORE_GET, relpath, ret);
	else {
		used(get, relpath);
		if (emit(get, buf, len) < 0)
			rc = EXIT_RUNTIME;
	}
	kv_io_buf_free(buf);
	return ret < 0 ? tool_store_exit(st, ret) : rc;
}

/* --- batch ------------------------------------------------------------ */

/* hit: 1, miss: 0, error: -1 (error gives the message).  With the
 * archive on stdout there are no records; a miss is said on stderr. */
static void print_record_with(struct get *get, unsigned long line, const char *hash,
			      const char *relpath, int hit, uint64_t size, const char *error,
			      const struct kv_archive_entry *archived)
{
	json_t *rec = json_pack("{s:I, s:b}", "line", (json_int_t)line, "hit", hit > 0);

	if (archived) {
		json_object_set_new(rec, "shuffle_bytes", json_integer(archived->shuffle_bytes));
		json_object_set_new(rec, "stored_bytes",
				    json_integer((json_int_t)archived->stored_bytes));
	}
	if (hash)
		json_object_set_new(rec, "hash", json_string(hash));
	if (relpath)
		json_object_set_new(rec, "path", json_string(relpath));
	if (hit > 0 && size != KV_TIER_SIZE_UNKNOWN)
		json_object_set_new(rec, "size_bytes", json_integer((json_int_t)size));
	if (error)
		json_object_set_new(rec, "error", json_string(error));
	if (get->archive.path && !strcmp(get->archive.path, "-")) {
		json_decref(rec);
		if (hit == 0)
			tool_store_err(&get->store, TOOL_STORE_MISS, relpath, -ENOENT);
	} else {
		tool_json_print(rec);
	}
	if (hit == 0)
		get->misses++;
	if (hit < 0)
		get->errors++;
}

static void print_record(struct get *get, unsigned long line, const char *hash,
			 const char *relpath, int hit, uint64_t size, const char *error)
{
	print_record_with(get, line, hash, relpath, hit, size, error, NULL);
}

/*
 * Make s a read request, or answer the line at once (miss, --exists):
 * 1 if s is ready for the engine, 0 if the line is done.  Blocks of a
 * model are mostly one size, so after the first the buffer is sized from
 * the biggest seen rather than by a stat of its own; a bigger block comes
 * back -EFBIG and is read again (batch_done).
 */
static int prepare(struct batch *b, struct slot *s)
{
	struct get *get = b->get;
	uint64_t size = b->size_hint;
	int ret = 0;

	if (get->exists) {
		s->req = (struct kv_tier_req){ .op = KV_TIER_OP_HAS, .key = s->relpath,
					       .user = s };
	} else if (get->tail_bytes) {
		ret = ensure_buf(&s->buf, &s->cap, get->tail_bytes);
		s->req = (struct kv_tier_req){ .op = KV_TIER_OP_GET_TAIL, .key = s->relpath,
					       .buf = s->buf, .len = get->tail_bytes,
					       .user = s };
	} else {
		if (get->store.block_max || s->tries || !size) {
			ret = block_bytes(get, s->relpath, &size);
			if (ret == 0 && size > b->size_hint && !get->store.block_max)
				b->size_hint = size;
		}
		if (ret == 0)
			ret = ensure_buf(&s->buf, &s->cap, size);
		s->req = (struct kv_tier_req){ .op = KV_TIER_OP_GET, .key = s->relpath,
					       .buf = s->buf, .len = s->cap, .user = s };
	}
	if (is_miss(ret)) {
		print_record(get, s->line, s->hash, s->relpath, 0, 0, NULL);
		return 0;
	}
	if (ret < 0) {
		char why[128];

		if (ret == -EMSGSIZE)
			tool_err("'%s': %s", s->relpath, get_error(get, ret, why, sizeof(why)));
		else
			tool_store_err(&get->store, TOOL_STORE_OPEN, s->relpath, ret);
		print_record(get, s->line, s->hash, s->relpath, -1, 0,
			     get_error(get, ret, why, sizeof(why)));
		return 0;
	}
	return 1;
}

/* The next stdin line that names a block, into s: 1, else 0 at the end
 * or -EIO on a read error (said).  Bad lines are reported on the way. */
static int next_line(struct batch *b, struct slot *s)
{
	const struct tool_record_opts o = { .model_dir = b->get->model_dir,
					    .rank = b->get->rank, .group = b->get->group,
					    .model_opts = 1, .bare = TOOL_RECORD_BARE_HASH };
	struct tool_record r;
	char *text;
	int ret;

	while ((ret = tool_lines_next(&b->in, &text)) == 1) {
		ret = tool_record_parse(text, &o, &r);
		if (ret == 0) {
			strcpy(s->hash, r.ref.hash);
			strcpy(s->relpath, r.relpath);
			s->line = b->in.line;
		} else {
			print_record(b->get, b->in.line, r.record_hash, r.record_path, -1, 0,
				     tool_lines_refuse(&b->in, "%s", r.error));
		}
		tool_record_free(&r);
		if (ret == 0)
			return 1;
	}
	return ret;
}

static int batch_next(void *arg, struct kv_tier_req **req)
{
	struct batch *b = arg;
	struct slot *s;
	int ret;

	if (b->get->archive.err)
		return b->get->archive.err;
	while ((s = b->retry)) {
		b->retry = s->next_free;
		if (prepare(b, s)) {
			*req = &s->req;
			return 1;
		}
		s->next_free = b->free;
		b->free = s;
	}
	s = b->free;
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -ENOMEM;
	} else {
		b->free = s->next_free;
	}
	while ((ret = next_line(b, s)) == 1) {
		s->tries = 0;
		if (prepare(b, s)) {
			*req = &s->req;
			return 1;
		}
	}
	s->next_free = b->free;
	b->free = s;
	return ret;
}

/* --- archive ---------------------------------------------------------- */

/* The archive's fd: stdout, or FILE's (kv_file_replace_open).  0, or -1
 * said. */
static int archive_open(struct get *get)
{
	struct archive *a = &get->archive;
	struct kv_archive_write_opts o = { .level = a->level };
	int ret;

	a->fd = STDOUT_FILENO;
	if (strcmp(a->path, "-")) {
		ret = kv_file_replace_open(AT_FDCWD, a->path, 0666, KV_FILE_IN_PLACE, &a->file);
		if (ret < 0) {
			tool_err("cannot write '%s': %s", a->path, file_error(ret));
			return -1;
		}
		a->fd = kv_file_replace_fd(a->file);
	}
	tool_progress_init(&a->progress);
	ret = kv_archive_writer_open(a->fd, &o, &a->w);
	if (ret < 0) {
		tool_err("cannot write the archive: %s", *kv_error_detail() ?
			 kv_error_detail() : kv_strerror(ret));
		return -1;
	}
	return 0;
}

/* model_dir's config.json, read once; NULL with *err when it cannot be. */
static const struct config_text *archive_config(struct archive *a, const char *model_dir,
						int *err)
{
	struct config_text *c;

	for (c = a->configs; c; c = c->next)
		if (!strcmp(c->model_dir, model_dir))
			break;
	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c) {
			*err = -ENOMEM;
			return NULL;
		}
		strcpy(c->model_dir, model_dir);
		c->err = kv_config_read(a->rootfd, model_dir, &c->text, &c->len);
		c->next = a->configs;
		a->configs = c;
	}
	*err = c->err;
	return c->err ? NULL : c;
}

/* A hit's data into the archive; a failure is said and recorded, and
 * one of the archive's own writes stops the batch. */
static int archive_hit(struct get *get, const struct slot *s, const void *buf, size_t len,
		       struct kv_archive_entry *e)
{
	struct archive *a = &get->archive;
	const struct config_text *c = NULL;
	char why[2 * PATH_MAX];
	int ret = 0;

	memset(e, 0, sizeof(*e));
	if (kv_layout_block_parse(s->relpath, &e->ref) < 0)
		ret = -KV_EBADPATH;
	if (ret == 0 && e->ref.layout == KV_LAYOUT_V1 &&
	    !(c = archive_config(a, e->ref.model_dir, &ret)))
		snprintf(why, sizeof(why), "cannot archive '%s/%s': its model dir's config.json: %s",
			 get->store.root, s->relpath, kv_strerror(ret));
	if (ret == 0) {
		e->config = c ? c->text : NULL;
		e->config_len = c ? c->len : 0;
		ret = kv_archive_write(a->w, e, buf, len);
		if (ret == 0) {
			a->blocks++;
			a->bytes += len;
			tool_progress_show(&a->progress, "%" PRIu64 " %s (%" PRIu64 " bytes) archived",
					   a->blocks, tool_plural(a->blocks, "block", "blocks"),
					   a->bytes);
		}
		if (ret < 0)
			snprintf(why, sizeof(why), "cannot archive '%s/%s': %s", get->store.root,
				 s->relpath, *kv_error_detail() ? kv_error_detail() :
				 kv_strerror(ret));
		/* Only the write to the archive itself fails with an errno. */
		if (ret < 0 && ret > -KV_EBADHASH && ret != -ENOMEM)
			a->err = ret;
	}
	if (ret < 0) {
		tool_err("%s", why);
		print_record(get, s->line, s->hash, s->relpath, -1, 0, why);
	}
	return ret;
}

/* End the archive: complete and in place, or (failed) nothing left. */
static int archive_close(struct get *get, int ok)
{
	struct archive *a = &get->archive;
	int ret = 0;

	if (ok && a->w && (ret = kv_archive_writer_finish(a->w)) < 0)
		tool_err("cannot write the archive: %s", kv_strerror(ret));
	tool_progress_done(&a->progress);
	kv_archive_writer_close(a->w);
	a->w = NULL;
	if (a->file && ok && ret == 0) {
		ret = kv_file_replace_commit(a->file);
		if (ret < 0)
			tool_err("cannot write '%s': %s", a->path, file_error(ret));
	} else {
		kv_file_replace_abort(a->file);
	}
	a->file = NULL;
	while (a->configs) {
		struct config_text *c = a->configs;

		a->configs = c->next;
		free(c->text);
		free(c);
	}
	if (a->rootfd >= 0)
		close(a->rootfd);
	return ok && ret == 0 ? 0 : -1;
}

/* A hit's data to <-o DIR>/<hash>.bin; a failure is said and recorded. */
static int write_hit(struct get *get, const struct slot *s, const void *buf, size_t len)
{
	char path[PATH_MAX];
	const char *why;
	int ret;

	if (snprintf(path, sizeof(path), "%s/%s.bin", get->out, s->hash) >= (int)sizeof(path)) {
		ret = -ENAMETOOLONG;
		why = kv_strerror(ret);
	} else {
		ret = kv_file_replace(AT_FDCWD, path, buf, len, 0666, KV_FILE_IN_PLACE);
		why = file_error(ret);
	}
	if (ret < 0) {
		tool_err("cannot write '%s': %s", path, why);
		print_record(get, s->line, s->hash, s->relpath, -1, 0, why);
	}
	return ret;
}

static void batch_done(void *arg, struct kv_tier_req *req)
{
	struct batch *b = arg;
	struct get *get = b->get;
	struct slot *s = req->user;
	int ret = req->result;

	if (ret == -EFBIG && s->tries < GET_TRIES) {
		s->tries++;
		s->next_free = b->retry;
		b->retry = s;
		return;
	}
	if (ret == 0 && req->op == KV_TIER_OP_HAS) {
		print_record(get, s->line, s->hash, s->relpath, 1,
			     req->done == SIZE_MAX ? KV_TIER_SIZE_UNKNOWN : req->done, NULL);
	} else if (ret == 0 && get->out) {
		ret = write_hit(get, s, s->buf, req->done);
	} else if (ret == 0 && get->archive.path) {
		ret = archive_hit(get, s, s->buf, req->done, &b->archived);
		if (ret >= 0)
			print_record_with(get, s->line, s->hash, s->relpath, 1, req->done, NULL,
					  &b->archived);
	} else if (is_miss(ret)) {
		print_record(get, s->line, s->hash, s->relpath, 0, 0, NULL);
	} else if (ret < 0) {
		tool_store_err(&get->store, req->op == KV_TIER_OP_HAS ? TOOL_STORE_OPEN :
			       TOOL_STORE_GET, s->relpath, ret);
		print_record(get, s->line, s->hash, s->relpath, -1, 0, kv_strerror(ret));
	}
	if (ret == 0 && req->op != KV_TIER_OP_HAS) {
		if (!get->archive.path)
			used(get, s->relpath);
		if (req->done > b->size_hint)
			b->size_hint = req->done;
		if (!get->archive.path)
			print_record(get, s->line, s->hash, s->relpath, 1, req->done, NULL);
	}
	s->next_free = b->free;
	b->free = s;
}

/* -o DIR of a batch must be a directory: 0, or -1 said. */
/* --batch -o DIR: made if missing (its parent must exist), as
 * `mkdir DIR` would; an existing non-directory is an error. */
static int check_out_dir(const struct get *get)
{
	struct stat st;

	errno = 0;
	if (get->out && mkdir(get->out, 0777) < 0 && errno != EEXIST) {
		tool_err("cannot make the output dir '%s': %s", get->out, strerror(errno));
		return -1;
	}
	errno = 0;
	if (get->out && (stat(get->out, &st) < 0 || !S_ISDIR(st.st_mode))) {
		tool_err("cannot use '%s' as the output dir: %s", get->out,
			 strerror(errno ? errno : ENOTDIR));
		return -1;
	}
	return 0;
}

/* Losing the daemon stops a batch: its last line is an error record. */
static int run_batch(struct get *get)
{
	struct batch b = { .get = get };
	struct slot *s;
	int ret;

	if (check_out_dir(get) < 0 || tool_lines_open(&b.in, NULL) < 0)
		return EXIT_RUNTIME;
	if (get->archive.path && archive_open(get) < 0) {
		archive_close(get, 0);
		tool_lines_close(&b.in);
		return EXIT_RUNTIME;
	}
	ret = kv_tier_batch_stream(get->store.tier, batch_next, batch_done, &b);
	if (get->archive.err)
		tool_err("cannot write the archive: %s", kv_strerror(get->archive.err));
	if (get->archive.path && archive_close(get, ret >= 0 && !get->archive.err) < 0 &&
	    ret >= 0)
		ret = -EIO;
	if (tool_store_lost(&get->store, ret))
		tool_err("batch stopped at %s:%lu: lost the daemon", b.in.name, b.in.line);
	else if (ret < 0 && ret != -EIO && !get->archive.err)
		tool_err("batch stopped: %s", kv_strerror(ret));
	while ((s = b.free)) {
		b.free = s->next_free;
		kv_io_buf_free(s->buf);
		free(s);
	}
	tool_lines_close(&b.in);
	if (tool_store_lost(&get->store, ret))
		return tool_store_exit(&get->store, ret);
	if (ret < 0 || get->errors)
		return EXIT_RUNTIME;
	return get->misses ? EXIT_ANSWER_NO : 0;
}

/* --- main ------------------------------------------------------------- */

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "root", required_argument, NULL, 'r' },
		{ "model-dir", required_argument, NULL, 'm' },
		{ "config", required_argument, NULL, 'c' },
		{ "rank", required_argument, NULL, OPT_RANK },
		{ "group", required_argument, NULL, OPT_GROUP },
		{ "exists", no_argument, NULL, 'e' },
		{ "blocks", required_argument, NULL, OPT_BLOCKS },
		{ "block-bytes", required_argument, NULL, OPT_BLOCK_BYTES },
		{ "max-block-bytes", required_argument, NULL, OPT_MAX_BLOCK_BYTES },
		{ "no-touch", no_argument, NULL, OPT_NO_TOUCH },
		{ "buffered", no_argument, NULL, OPT_BUFFERED },
		{ "output", required_argument, NULL, 'o' },
		{ "batch", no_argument, NULL, 'b' },
		{ "qd", required_argument, NULL, OPT_QD },
		{ "daemon", required_argument, NULL, OPT_DAEMON },
		{ "tier", required_argument, NULL, OPT_TIER },
		{ "promote", required_argument, NULL, OPT_PROMOTE },
		{ "archive", required_argument, NULL, OPT_ARCHIVE },
		{ "archive-level", required_argument, NULL, OPT_ARCHIVE_LEVEL },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct kv_io_opts opts = { .queue_depth = DEFAULT_QD };
	const char *root_opt = NULL, *model_dir = NULL, *config = NULL;
	const char *daemon_opt = NULL, *daemon;
	struct tool_tier tiers[TOOL_TIERS_MAX];
	unsigned ntiers = 0;
	unsigned promote = KV_TIER_PROMOTE;
	int promote_opt = 0;
	uint64_t blocks = 0, block_bytes = 0;
	struct get get = { .archive = { .rootfd = -1, .fd = -1 },
			   .max_block_bytes = DEFAULT_MAX_BLOCK_BYTES };
	int archive_level = 0, rc;
	char hash[KV_HASH_MAX_LEN + 1], relpath[PATH_MAX];
	int c, batch = 0, ret;

	tool_init("kvget");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":r:m:c:eo:bhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': root_opt = optarg; break;
		case 'm': model_dir = optarg; break;
		case 'c': config = optarg; break;
		case OPT_RANK: get.rank = tool_parse_uint("--rank", optarg, UINT_MAX); break;
		case OPT_GROUP: get.group = tool_parse_uint("--group", optarg, UINT_MAX); break;
		case 'e': get.exists = 1; break;
		case OPT_BLOCKS: blocks = tool_parse_uint("--blocks", optarg, UINT32_MAX); break;
		case OPT_BLOCK_BYTES: block_bytes = tool_parse_size("--block-bytes", optarg); break;
		case OPT_MAX_BLOCK_BYTES:
			get.max_block_bytes = tool_parse_size("--max-block-bytes", optarg);
			if (!get.max_block_bytes)
				tool_usage_fail("invalid --max-block-bytes value '%s'", optarg);
			break;
		case OPT_NO_TOUCH: opts.flags |= KV_IO_NO_TOUCH; break;
		case OPT_BUFFERED: opts.flags |= KV_IO_BUFFERED; break;
		case 'o': get.out = optarg; break;
		case 'b': batch = 1; break;
		case OPT_QD:
			opts.queue_depth = tool_parse_uint("--qd", optarg, MAX_QD);
			if (!opts.queue_depth)
				tool_usage_fail("invalid --qd value '0' (an integer 1..%d)", MAX_QD);
			break;
		case OPT_DAEMON: daemon_opt = optarg; break;
		case OPT_TIER: tool_tier_parse(optarg, tiers, &ntiers); break;
		case OPT_PROMOTE: promote = tool_parse_promote(optarg); promote_opt = 1; break;
		case OPT_ARCHIVE: get.archive.path = optarg; break;
		case OPT_ARCHIVE_LEVEL:
			archive_level = (int)tool_parse_uint("--archive-level", optarg, 22);
			if (!archive_level)
				tool_usage_fail("invalid --archive-level value '0' (1..22)");
			break;
		case 'h': usage(); break;
		case 'V': tool_version(); break;
		default:
			tool_bad_option(c, argv);
		}
	}
	if (model_dir && config)
		tool_usage_fail("give one of --model-dir and --config, not both");
	if (!batch && !model_dir && !config)
		tool_usage_fail("give --model-dir or --config");
	if (!blocks != !block_bytes)
		tool_usage_fail("--blocks and --block-bytes go together");
	if (blocks && block_bytes > UINT64_MAX / blocks)
		tool_usage_fail("--blocks times --block-bytes is too large");
	get.tail_bytes = blocks * block_bytes;
	if (get.tail_bytes > get.max_block_bytes)
		tool_usage_fail("--blocks times --block-bytes is over --max-block-bytes");
	if (get.exists && (get.tail_bytes || (get.out && !batch)))
		tool_usage_fail("--exists reads no data: drop --blocks and -o");
	if (get.archive.path && (!batch || get.exists || get.tail_bytes || get.out))
		tool_usage_fail("--archive goes with --batch, and not with --exists, --blocks or -o");
	if (archive_level && !get.archive.path)
		tool_usage_fail("--archive-level needs --archive");
	get.archive.level = archive_level;
	if (get.archive.path && !strcmp(get.archive.path, "-") && isatty(STDOUT_FILENO))
		tool_usage_fail("refusing to write an archive to a terminal; use --archive FILE "
				"or a redirection");
	if (batch ? optind != argc : optind + 1 != argc)
		tool_usage_fail(batch ? "--batch reads its blocks from stdin, not arguments" :
				"give one HASH");
	if (!batch && kv_layout_hash_normalize(argv[optind], hash, sizeof(hash)) < 0)
		tool_usage_fail("invalid hash '%s' (want 5 to 128 hex digits)", argv[optind]);
	if (model_dir || config)
		tool_model_dir(model_dir, config, -1, get.rank, get.model_dir, sizeof(get.model_dir));
	if (!batch && kv_layout_block_path(get.model_dir, get.rank, get.group, hash, relpath,
					   sizeof(relpath)) < 0) {
		tool_err("cannot compose a block path for '%s'", hash);
		return EXIT_RUNTIME;
	}
	if (ntiers && (root_opt || daemon_opt || get.archive.path))
		tool_usage_fail("--tier names the store: drop --root, --daemon and --archive");
	if (promote_opt && ntiers < 2)
		tool_usage_fail("--promote needs two --tier options or more");
	if (ntiers) {
		tool_tiers_check(tiers, ntiers);
		tool_store_open_tiers(&get.store, tiers, ntiers, promote, &opts);
		ret = batch ? run_batch(&get) : get_one(&get, relpath);
		tool_store_close(&get.store);
		for (unsigned k = 0; k < ntiers; k++)
			free(tiers[k].root);
		return ret;
	}
	/* $KV_DAEMON routes every get, a batch too, as --daemon does. */
	daemon = tool_daemon(daemon_opt);
	if (get.archive.path && !daemon && kv_root_is_s3(tool_root(root_opt)))
		tool_usage_fail("--archive reads a file tier, not a bucket");
	if (get.archive.path && daemon)
		tool_usage_fail("--archive reads the file tier: drop --daemon (and $KV_DAEMON)");
	tool_store_open(&get.store, daemon, daemon ? NULL : tool_root(root_opt), &opts);
	if (get.archive.path)
		get.archive.rootfd = tool_root_open(get.store.root);
	if (!daemon && kv_root_is_s3(get.store.root) && !(opts.flags & KV_IO_NO_TOUCH) &&
	    !get.exists && (ret = kv_use_recorder_open(get.store.root, NULL, 0, &get.uses)) < 0)
		tool_err("cannot open %s's use journal: %s (uses are not recorded)",
			 get.store.root, kv_strerror(ret));
	ret = batch ? run_batch(&get) : get_one(&get, relpath);
	if (get.uses && (rc = kv_use_recorder_sync(get.uses, NULL, NULL)) < 0) {
		tool_err("cannot write %s's use journal: %s", get.store.root, kv_strerror(rc));
		ret = ret ? ret : EXIT_RUNTIME;
	}
	kv_use_recorder_close(get.uses);
	tool_store_close(&get.store);
	return ret;
}
