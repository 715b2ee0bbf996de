/*
 * Where a use lands, by libkv's one rule (kv_use_record): the block's
 * atime at most once per resolution, this node's journal where that is
 * refused, a bucket's journal object.  Also the NDJSON record and the
 * metrics file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "../tool.h"
#include "kvwatch.h"

static const char *const source_names[] = { [SOURCE_READ] = "read", [SOURCE_EVENT] = "event" };

static void print_use(const struct watch *w, const char *relpath, enum use_source src,
		      int64_t now, const char *where)
{
	const char *slash = strrchr(relpath, '/');
	char hash[KV_HASH_MAX_LEN + 1];
	size_t n;

	(void)w;
	slash = slash ? slash + 1 : relpath;
	n = strlen(slash) > 4 ? strlen(slash) - 4 : 0;
	if (n > KV_HASH_MAX_LEN)
		n = KV_HASH_MAX_LEN;
	memcpy(hash, slash, n);
	hash[n] = '\0';
	tool_json_print(json_pack("{s:s, s:s, s:s, s:I, s:s}", "hash", hash, "path", relpath,
				  "source", source_names[src], "time_ns", (json_int_t)now,
				  "where", where));
}

int record_use(struct watch *w, const char *relpath, int fd, enum use_source src)
{
	int64_t now = kv_now_ns();
	int rc = kv_use_record(w->uses, relpath, fd, now);

	if (rc == -ENOENT)
		return rc;
	w->c.uses[src]++;
	switch (rc) {
	case KV_USE_STAMPED:
		w->c.stamped++;
		break;
	case KV_USE_JOURNALED:
		w->c.journaled++;
		break;
	case KV_USE_SKIPPED:
		w->c.skipped++;
		return 0;
	default: {
		static int said;

		if (!said++)
			tool_err("cannot record a use of '%s' in its atime nor in '%s/%s': %s",
				 relpath, w->root, KV_USES_DIR, kv_strerror(rc));
		w->c.failed++;
		return 0;
	}
	}
	if (w->ndjson)
		print_use(w, relpath, src, now, rc == KV_USE_STAMPED ? "atime" : "journal");
	return 0;
}

void summary_print(struct watch *w)
{
	struct kv_events_sub_stats es = { 0 };

	if (w->sub)
		kv_events_sub_stats(w->sub, &es);
	tool_json_print(json_pack("{s:{s:I, s:I}, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
				  "s:I, s:I, s:I, s:s}",
				  "uses", "read", (json_int_t)w->c.uses[SOURCE_READ],
				  "event", (json_int_t)w->c.uses[SOURCE_EVENT],
				  "stamped", (json_int_t)w->c.stamped,
				  "journaled", (json_int_t)w->c.journaled,
				  "reads_ignored", (json_int_t)w->c.reads_ignored,
				  "skipped", (json_int_t)w->c.skipped,
				  "failed", (json_int_t)w->c.failed,
				  "events", (json_int_t)es.events,
				  "events_unmatched", (json_int_t)w->c.unmatched,
				  "frames_bad", (json_int_t)es.bad_frames,
				  "event_gaps", (json_int_t)es.gaps,
				  "fanotify_overflows", (json_int_t)w->c.overflows,
				  "index_blocks", (json_int_t)w->idx.blocks,
				  "rescans", (json_int_t)w->c.rescans,
				  "root", w->root));
}

void metrics_write(struct watch *w)
{
	struct kv_events_sub_stats es = { 0 };
	char buf[4096];
	int n;

	if (!w->metrics)
		return;
	if (w->sub)
		kv_events_sub_stats(w->sub, &es);
	n = snprintf(buf, sizeof(buf),
		"# HELP kvwatch_uses_total Uses of blocks seen, by source.\n"
		"# TYPE kvwatch_uses_total counter\n"
		"kvwatch_uses_total{source=\"read\"} %" PRIu64 "\n"
		"kvwatch_uses_total{source=\"event\"} %" PRIu64 "\n"
		"# HELP kvwatch_stamped_total Uses recorded in a block's atime.\n"
		"# TYPE kvwatch_stamped_total counter\n"
		"kvwatch_stamped_total %" PRIu64 "\n"
		"# HELP kvwatch_journaled_total Uses recorded in the node's journal (atime refused).\n"
		"# TYPE kvwatch_journaled_total counter\n"
		"kvwatch_journaled_total %" PRIu64 "\n"
		"# HELP kvwatch_reads_ignored_total Opens by programs --ignore-comm names.\n"
		"# TYPE kvwatch_reads_ignored_total counter\n"
		"kvwatch_reads_ignored_total %" PRIu64 "\n"
		"# HELP kvwatch_skipped_total Uses within the resolution of the last one recorded.\n"
		"# TYPE kvwatch_skipped_total counter\n"
		"kvwatch_skipped_total %" PRIu64 "\n"
		"# HELP kvwatch_failed_total Uses that could be recorded nowhere.\n"
		"# TYPE kvwatch_failed_total counter\n"
		"kvwatch_failed_total %" PRIu64 "\n"
		"# HELP kvwatch_events_unmatched_total Hashes of GPU/CPU BlockStored naming no block on the volume.\n"
		"# TYPE kvwatch_events_unmatched_total counter\n"
		"kvwatch_events_unmatched_total %" PRIu64 "\n"
		"# HELP kvwatch_events_total KV events received.\n"
		"# TYPE kvwatch_events_total counter\n"
		"kvwatch_events_total %" PRIu64 "\n"
		"# HELP kvwatch_frames_bad_total Event frames refused (malformed).\n"
		"# TYPE kvwatch_frames_bad_total counter\n"
		"kvwatch_frames_bad_total %" PRIu64 "\n"
		"# HELP kvwatch_event_gaps_total Event sequence numbers never received.\n"
		"# TYPE kvwatch_event_gaps_total counter\n"
		"kvwatch_event_gaps_total %" PRIu64 "\n"
		"# HELP kvwatch_fanotify_overflows_total Times the kernel's event queue overflowed.\n"
		"# TYPE kvwatch_fanotify_overflows_total counter\n"
		"kvwatch_fanotify_overflows_total %" PRIu64 "\n"
		"# HELP kvwatch_event_lag_seconds From the last event batch's timestamp to its recording.\n"
		"# TYPE kvwatch_event_lag_seconds gauge\n"
		"kvwatch_event_lag_seconds %.6f\n"
		"# HELP kvwatch_index_blocks Blocks in the event-hash index.\n"
		"# TYPE kvwatch_index_blocks gauge\n"
		"kvwatch_index_blocks %" PRIu64 "\n"
		"# HELP kvwatch_index_bytes Memory of the event-hash index.\n"
		"# TYPE kvwatch_index_bytes gauge\n"
		"kvwatch_index_bytes %zu\n"
		"# HELP kvwatch_rescans_total Walks of the root that refreshed the index.\n"
		"# TYPE kvwatch_rescans_total counter\n"
		"kvwatch_rescans_total %" PRIu64 "\n",
		w->c.uses[SOURCE_READ], w->c.uses[SOURCE_EVENT], w->c.stamped, w->c.journaled,
		w->c.reads_ignored,
		w->c.skipped, w->c.failed, w->c.unmatched, es.events, es.bad_frames, es.gaps,
		w->c.overflows, w->c.lag_s, w->idx.blocks, index_bytes(&w->idx), w->c.rescans);
	if (n > 0 && (size_t)n < sizeof(buf)) {
		/* A device or a FIFO there is written in place, and never
		 * waited on: a reader that stops reading cannot stop the watch. */
		int rc = kv_file_replace(AT_FDCWD, w->metrics, buf, (size_t)n, 0644,
					 KV_FILE_IN_PLACE | KV_FILE_NONBLOCK);
		static int said;

		if (rc && !said++)
			tool_err("cannot write '%s': %s", w->metrics,
				 *kv_error_detail() ? kv_error_detail() : kv_strerror(rc));
	}
}
