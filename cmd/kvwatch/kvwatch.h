/*
 * kvwatch: records each use of a block where every tool can see it, in
 * its atime (kv/lastuse.h).  One thread: a poll loop over fanotify (the
 * node's reads), the KV-event subscriber (model servers' announcements)
 * and a signalfd; a second thread only re-walks the root to refresh the
 * index that maps an event's hash to the block files named by it.
 */
#ifndef KVWATCH_H
#define KVWATCH_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <kv/kv.h>

enum use_source { SOURCE_READ, SOURCE_EVENT };

/* Block files by the low 64 bits of their hash (the last 16 hex digits
 * of the name): what a KV event names.  Per block: a 16-byte entry, its
 * name's digits packed two to a byte with a length byte, and 4 to 8
 * bytes of table; the dirs are shared.  A re-walk updates it in place:
 * each entry carries the parity of the last walk that saw it, and what
 * the walk did not see is gone. */
struct index {
	struct ix_entry {
		uint64_t low;
		uint32_t dir;		/* into dirs, | SEEN_BIT by parity;
					   DIR_GONE once deleted */
		uint32_t name;		/* offset of its packed name in names */
	} *e;
	uint32_t n, cap;
	uint32_t *table;	/* entry + 1, 0 empty; linear probing */
	uint32_t mask;
	unsigned char *names;
	size_t names_len, names_cap;
	char **dirs;		/* "rank dir/hhh/hh_gN" and llmd-v0's */
	uint32_t ndirs, dirs_cap;
	uint32_t *dir_table;	/* dir + 1, by the dir's hash */
	uint32_t dir_mask;
	uint64_t blocks;	/* entries not gone */
	uint32_t parity;	/* SEEN_BIT or 0: the walk under way's mark */
};

#define DIR_GONE	UINT32_MAX
#define SEEN_BIT	0x80000000u

int index_init(struct index *x);
void index_free(struct index *x);
/* Add the block at relpath (a layout block path) unless it is there;
 * either way it is marked seen by the walk under way. */
int index_add(struct index *x, const char *relpath);
/* A re-walk begins: entries it does not see will be swept. */
void index_walk_begin(struct index *x);
/* It ended: what it did not see is gone; compact when most is. */
int index_walk_end(struct index *x);
/* Walk root into x (names only). */
int index_build(struct index *x, const char *root, unsigned threads);
/* Call fn for each block whose hash ends in low; fn may mark it gone by
 * returning 1. */
typedef int (*index_fn)(const char *relpath, void *arg);
unsigned index_each(struct index *x, uint64_t low, index_fn fn, void *arg);
/* 1 if relpath is in x. */
int index_has(struct index *x, const char *relpath);
/* Bytes x holds. */
size_t index_bytes(const struct index *x);

struct watch {
	const char *root;
	char root_real[4096];
	size_t root_len;
	int rootfd;
	struct kv_use_recorder *uses;	/* where each use is recorded */
	int bucket;			/* the root is an s3:// bucket: events
					   only, every use to the journal */
	int64_t next_sync_ns;		/* when a bucket's journal is written */
	char node[KV_USES_NODE_MAX + 1];
	uint64_t resolution_ns;
	int ndjson;
	int json;			/* -J: the counters at exit */
	/* Readers whose opens are not uses (--ignore-comm): kvtools' own,
	 * which stamp the uses they serve themselves and read the rest to
	 * verify, copy or archive. */
	char ignore[512];		/* ",name,name," */
	pid_t last_pid;			/* the last reader looked up, */
	int last_ignored;		/* whether it is ignored, */
	int64_t last_pid_ns;		/* and when (pids are reused) */
	const char *metrics;
	int fan;			/* fanotify fd */
	size_t fan_read_bytes;		/* a read's worth: fds to spare for it */
	const char *mark;		/* "filesystem" or "mount" */
	struct kv_events_sub *sub;

	/* The index; a re-walk thread adds to it in place, under lock,
	 * which the loop holds while it handles a turn's uses. */
	struct index idx;
	pthread_mutex_t lock;
	int rescanning, rescan_err;
	volatile int stopping;		/* the re-walk gives up */
	pthread_t rescan_tid;
	int wake[2];			/* the thread's "done" to the loop */
	uint64_t rescan_ns;
	int64_t last_scan_ns;

	struct counters {
		uint64_t uses[2];		/* by source */
		uint64_t stamped, journaled, skipped, failed;
		uint64_t reads_ignored;		/* by --ignore-comm */
		uint64_t unmatched;
		uint64_t overflows;
		uint64_t rescans;
		double lag_s;			/* the last event's, from its stamp */
	} c;
};

/* Index relpath (a block just read or written on this node). */
void watch_index_add(struct watch *w, const char *relpath);

/* Record one use of relpath: stamp its atime (through fd when >= 0,
 * else beneath the root), unless it was used within the resolution;
 * where it cannot be stamped, in this node's journal.  -ENOENT when the
 * block is gone. */
int record_use(struct watch *w, const char *relpath, int fd, enum use_source src);
/* The counters as Prometheus text into w->metrics (atomically). */
void metrics_write(struct watch *w);
/* The same as one JSON document on stdout (-J, at exit). */
void summary_print(struct watch *w);

/* fanotify: mark the root's filesystem (or its mount); exits 3 saying
 * what is missing when it cannot. */
void fan_open(struct watch *w);
/* Handle what is waiting (one read's worth): 1 if more may be. */
int fan_drain(struct watch *w);

#endif
