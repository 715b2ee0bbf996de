#ifndef KV_LASTUSE_H
#define KV_LASTUSE_H

/*
 * A block's last use, the one thing eviction orders by: the later of its
 * atime and any use recorded for it in the root's use journals.
 *
 * kvwatch records a use by stamping atime (atime now, mtime untouched),
 * so every reader of atime sees it.  Where a block cannot be stamped
 * (an NFS export that squashes root, a read-only mount) the use goes to
 * this node's journal, "<root>/.kvwatch/<node>.uses": one text line per
 * use, "<ns since the epoch> <block path relative to the root>\n",
 * appended by that node alone and rewritten whole (temp + rename) when
 * it holds mostly stale lines.  Readers merge every node's journal,
 * read in pieces to its end however long it is (memory grows with the
 * paths kept, never with the journal's bytes), and skip what does not
 * parse: a line over KV_USES_LINE_MAX bytes, a path outside the layout,
 * a time that is not a positive integer or lies more than
 * KV_USES_FUTURE_NS ahead.  See kv(7).
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_USES_DIR		".kvwatch"	/* at the root */
#define KV_USES_SUFFIX		".uses"
#define KV_USES_LINE_MAX	4096		/* bytes, newline included */
#define KV_USES_OBJECT_MAX	(64u << 20)	/* a bucket's journal, written: the
						   oldest uses left out past it */
#define KV_USES_FUTURE_NS	(300LL * 1000000000LL)

/* Uses recorded beside atime: block path -> newest recorded use. */
struct kv_uses;

int kv_uses_new(struct kv_uses **out);
void kv_uses_free(struct kv_uses *u);

/* Every journal under rootfd's KV_USES_DIR, opened beneath the root
 * without following links and read whole, a piece at a time; only the
 * paths keep() accepts are held (keep NULL: all).  *out is NULL when
 * there is none (no dir, or empty), so the common case costs one failed
 * open.  A symlink or anything else not a regular file is no journal.
 * -ENOMEM, or the -errno of a journal that could not be opened or read
 * to its end (named in kv_error_detail()): its uses cannot be known, so
 * nothing is returned. */
int kv_uses_load(int rootfd, int (*keep)(const char *relpath, void *arg), void *arg,
		 struct kv_uses **out);

/* Merge journal text (complete lines; a last line without its newline is
 * ignored) into u, keeping the newest use per path; bad lines are
 * counted in *bad (may be NULL).  0 or -ENOMEM. */
int kv_uses_parse(struct kv_uses *u, const char *text, size_t len, uint64_t *bad);

/* Record when_ns for relpath if newer than what u holds.  -EINVAL for a
 * path outside the layout, -ENOMEM. */
int kv_uses_add(struct kv_uses *u, const char *relpath, int64_t when_ns);

/* The recorded use of relpath, 0 if none (u may be NULL). */
int64_t kv_uses_get(const struct kv_uses *u, const char *relpath);
size_t kv_uses_count(const struct kv_uses *u);

/* The rule: the later of atime_ns and relpath's recorded use. */
int64_t kv_last_use_ns(const struct kv_uses *u, const char *relpath, int64_t atime_ns);

/* This node's journal, for a recorder (kvwatch).  node names the file
 * ([A-Za-z0-9._-], at most 64 bytes); the dir is made where missing.
 * Earlier lines of the same file are loaded (in pieces, however long)
 * so that a rewrite keeps them. */
struct kv_uses_journal;

int kv_uses_journal_open(int rootfd, const char *node, struct kv_uses_journal **out);
/* Append a use (one write(2) of one line); rewrites the file first when
 * more than half its lines are stale. */
int kv_uses_journal_record(struct kv_uses_journal *j, const char *relpath, int64_t when_ns);
/* The newest use of relpath this journal holds, 0 if none (j may be
 * NULL). */
int64_t kv_uses_journal_last(const struct kv_uses_journal *j, const char *relpath);
void kv_uses_journal_close(struct kv_uses_journal *j);

/* The same for a bucket root ("s3://..."), where nothing appends: the
 * journal is the object "<root>//.kvwatch/<node>.uses" (kv(7)), loaded
 * here as it downloads, whatever its size, changed in memory by
 * kv_uses_journal_record and written whole by kv_uses_journal_sync. */
int kv_uses_journal_open_bucket(const char *root, const char *node,
				struct kv_uses_journal **out);
/* Write a bucket's journal if a use was recorded since it was last
 * written, or the object loaded was not compacted (more than one line a
 * path, bad lines, over KV_USES_OBJECT_MAX bytes): one line per path,
 * only the blocks keep() says are still there (keep NULL: all), and of
 * those the newest uses that fit in KV_USES_OBJECT_MAX bytes.  0 at once
 * for a filesystem's, which each record wrote. */
int kv_uses_journal_sync(struct kv_uses_journal *j, int (*keep)(const char *relpath, void *arg),
			 void *arg);

/*
 * Recording a use, the one rule every recorder follows (kvwatch, the
 * vLLM tier, kvget on a bucket): stamp the block's atime (atime now,
 * mtime untouched), resolved beneath the root with no symlink followed;
 * where the filesystem refuses that for good (EPERM, EACCES, EROFS,
 * ENOTSUP: a root-squashed export, a read-only mount), append it to this
 * node's journal; on a bucket ("s3://..."), record it in the journal
 * object, written by kv_use_recorder_sync.  A block whose atime or
 * journaled use is within resolution_ns of now is left as it is.
 * Thread-safe.
 */
#define KV_USES_NODE_MAX	64

enum kv_use_outcome {
	KV_USE_STAMPED = 1,	/* its atime */
	KV_USE_JOURNALED,	/* this node's journal */
	KV_USE_SKIPPED,		/* used within the resolution already */
};

struct kv_use_recorder;

/* The journal name of node (NULL: this host's name): letters, digits,
 * '.', '_' and '-', every other byte '_', at most KV_USES_NODE_MAX. */
void kv_uses_node_name(const char *node, char out[KV_USES_NODE_MAX + 1]);

int kv_use_recorder_open(const char *root, const char *node, int64_t resolution_ns,
			 struct kv_use_recorder **out);
/* Record a use of the block at relpath at now_ns: a KV_USE_* outcome,
 * -ENOENT when no regular file is there, -EINVAL for a path outside the
 * layout, or the -errno that kept it from being recorded anywhere.  fd,
 * when >= 0, is the block open (its stat and stamp go through it). */
int kv_use_record(struct kv_use_recorder *r, const char *relpath, int fd, int64_t now_ns);
/* A bucket's journal object written if a use was recorded since, keeping
 * the blocks keep() says are still there (NULL: all); 0 at once on a
 * filesystem, whose journal each record appended to. */
int kv_use_recorder_sync(struct kv_use_recorder *r, int (*keep)(const char *relpath, void *arg),
			 void *arg);
int kv_use_recorder_is_bucket(const struct kv_use_recorder *r);
/* Sync (a bucket's journal) and close. */
void kv_use_recorder_close(struct kv_use_recorder *r);

#ifdef __cplusplus
}
#endif

#endif
