/* What kvput's modes share: its settings and its result record. */
#ifndef KVPUT_H
#define KVPUT_H

#include <stddef.h>
#include "../tool.h"

struct put {
	char model_dir[KV_NAME_MAX + 1];
	unsigned rank, group;
	struct tool_store store;
	size_t max_block_bytes;
	const char *max_block_from;	/* what set it, for a refusal */
	const char *seq_key;		/* "line" of a manifest, "entry" of an archive;
					   NULL: one block's record (-J) */
	int failed;
	int json;			/* -J: one block's record on stdout */
	struct kv_events *events;	/* --events: BlockStored after each rename */
	int rootfd;			/* for the events' model names */
};

/* A block that was renamed into place is news for llm-d's indexer. */
void announce(struct put *put, const char *relpath);

/* One NDJSON result: seq is the manifest line or archive entry; error
 * NULL for a block stored (existed: found there and kept). */
void print_result(struct put *put, const char *hash, const char *relpath,
		  unsigned long seq, size_t size, int existed, const char *error);

/* kvput --archive: restore path ("-": stdin) into root; the exit status. */
int restore_archive(struct put *put, const char *root, const char *path,
		    const struct kv_io_opts *opts);

#endif
