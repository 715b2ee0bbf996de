/*
 * What kvoffd tells the outside: NDJSON block events, Prometheus text for
 * node_exporter's textfile collector (rewritten atomically), and the
 * stats body of a STATS reply.  All of it runs on the event loop thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <jansson.h>
#include "kvoffd.h"

static const char *const dir_names[DIR_COUNT] = {
	[DIR_PUT] = "put", [DIR_GET] = "get",
	[DIR_SPILL] = "spill", [DIR_READTHROUGH] = "readthrough",
};

int report_open_events(struct offd *d)
{
	struct stat st;
	FILE *f;
	int fd, err;

	if (!d->events_path)
		return 0;
	if (!strcmp(d->events_path, "-")) {
		d->events = stdout;
		return 0;
	}
	/* Its dir may be writable by others: a link planted at the name
	 * is refused, not followed to a file of root's, and only a regular
	 * file is appended to (a FIFO would stall the loop). */
	fd = open(d->events_path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
		  O_NOCTTY | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	err = fstat(fd, &st) < 0 ? -errno : !S_ISREG(st.st_mode) ? -EINVAL
	      : fcntl(fd, F_SETFL, O_APPEND) < 0 ? -errno : 0;
	if (err < 0) {
		close(fd);
		return err;
	}
	if (!(f = fdopen(fd, "a"))) {
		close(fd);
		return -errno;
	}
	if (d->events && d->events != stdout)
		fclose(d->events);
	d->events = f;
	return 0;
}

/* The NDJSON "tier" of RAM and of each file tier: "fs" is the shared
 * tier's name from before there were several. */
static const char *event_tier(const struct offd *d, unsigned t)
{
	if (t == TIER_NONE)
		return "cpu";
	return d->tiers[t].kind == TOOL_TIER_SHARED ? "fs" : "local";
}

/* The RAM and local tiers are the node's (their topics name it); the
 * shared tier is shared storage. */
static const char *event_medium(const struct offd *d, unsigned t)
{
	if (t == TIER_NONE)
		return KV_EVENTS_CPU;
	return d->tiers[t].kind == TOOL_TIER_SHARED ? KV_EVENTS_SHARED_STORAGE : KV_EVENTS_LOCAL_DISK;
}

static void emit(struct offd *d, const char *event, unsigned t, const struct kv_block_ref *ref,
		 uint64_t size)
{
	json_t *o;

	if (d->publisher)
		kv_events_publish_block(d->publisher,
					strcmp(event, "BlockStored") ? KV_EVENT_BLOCK_REMOVED
								     : KV_EVENT_BLOCK_STORED,
					event_medium(d, t), d->rootfd, ref);
	if (!d->events)
		return;
	o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:I, s:I}",
		      "event", event, "tier", event_tier(d, t),
		      "model_dir", ref->model_dir,
		      "rank", (json_int_t)ref->rank,
		      "group", (json_int_t)ref->group,
		      "hash", ref->hash,
		      "size_bytes", (json_int_t)size,
		      "time_ns", (json_int_t)kv_now_ns());
	if (!o)
		return;
	json_dumpf(o, d->events, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(o);
	fputc('\n', d->events);
	fflush(d->events);
}

void report_event(struct offd *d, const char *event, unsigned tier, uint32_t i)
{
	emit(d, event, tier, &d->slots[i].ref, kv_slots_len(d->store, i));
}

/* One change a file tier reported: its counters, and its event. */
static void tier_changed(struct offd *d, const struct tier_change *c)
{
	struct tier_stats *st = &d->tiers[c->tier].st;
	struct kv_block_ref ref;
	const char *event = "BlockRemoved";

	switch (c->change) {
	case KV_TIER_STORED:
	case KV_TIER_PROMOTED:
		st->writes++;
		st->write_bytes += c->size;
		event = "BlockStored";
		break;
	case KV_TIER_MOVED:
		st->demotions++;
		break;
	case KV_TIER_DROPPED:
		st->drops++;
		break;
	case KV_TIER_DELETED:
		break;
	}
	if ((d->publisher || d->events) && !kv_layout_block_parse(c->path, &ref))
		emit(d, event, c->tier, &ref, c->size);
}

void report_tier_changes(struct offd *d)
{
	uint64_t lost = writer_take_changes(d, &d->changes);

	for (size_t k = 0; k < d->changes.n; k++)
		tier_changed(d, &d->changes.v[k]);
	if (lost)
		tool_err("%llu %s of file tiers not counted or announced: out of memory",
			 (unsigned long long)lost, tool_plural(lost, "change", "changes"));
}

void report_ram_cleared(struct offd *d)
{
	if (!d->publisher)
		return;
	KV_SLOTS_EACH_USED(d->store, i)
		if (kv_slots_indexed(d->store, i))
			kv_events_publish_block(d->publisher, KV_EVENT_ALL_CLEARED,
						KV_EVENTS_CPU, d->rootfd, &d->slots[i].ref);
}

void report_transfer(struct offd *d, enum dir dir, uint64_t bytes, int64_t ns)
{
	uint64_t bound = 4096;
	int i;

	for (i = 0; i < HIST_BUCKETS - 1 && bytes > bound; i++)
		bound *= 4;
	d->hist[dir][i]++;
	d->seconds[dir] += (double)(ns > 0 ? ns : 0) / 1e9;
}

void report_fill_stats(struct offd *d, struct kv_offd_stats *out)
{
	struct kv_offd_stats *st = &d->st;
	uint64_t blocks = 0, bytes = 0, dirty = 0, pins = 0, clients = 0;
	struct kv_slots_usage u;

	KV_SLOTS_EACH_USED(d->store, i) {
		const struct slot *s = &d->slots[i];

		pins += s->pins;
		if (s->state == SLOT_READY && kv_slots_indexed(d->store, i)) {
			blocks++;
			bytes += kv_slots_len(d->store, i);
			dirty += !s->held;
		}
	}
	kv_slots_usage(d->store, &u);
	for (struct client *c = d->clients; c; c = c->next)
		clients++;
	st->pool_bytes = d->pool_bytes;
	st->slot_bytes = d->slot_bytes;
	st->slots = d->npages;
	st->slots_used = u.slots_used;
	st->pool_bytes_used = u.pool_bytes_used;
	st->blocks = blocks;
	st->block_bytes = bytes;
	st->dirty_blocks = dirty;
	st->pins = pins;
	st->clients = clients;
	st->wb_queue_depth = d->wb_inflight;
	st->wb_queue_capacity = d->wr.wcap;
	st->hugepages = (uint64_t)d->hugepages;
	st->uptime_ns = (uint64_t)(kv_monotonic_ns() - d->start_ns);
	st->pid = (uint64_t)getpid();
	*out = *st;
}

void report_fill_tier_stats(struct offd *d, unsigned t, struct kv_offd_tier_stats *out)
{
	const struct ftier *ft = &d->tiers[t];
	struct kv_tier_stat u = { .blocks = ft->walk_blocks, .used_bytes = ft->walk_bytes };

	if (ft->capacity)
		kv_tier_stat(ft->tier, &u);
	*out = (struct kv_offd_tier_stats){
		.tier = t,
		.kind = ft->kind == TOOL_TIER_SHARED ? KV_OFFD_TIER_SHARED : KV_OFFD_TIER_LOCAL,
		.capacity_bytes = ft->capacity,
		.blocks = u.blocks,
		.bytes = u.used_bytes,
		.hits = ft->st.hits, .misses = ft->st.misses, .read_bytes = ft->st.read_bytes,
		.writes = ft->st.writes, .write_bytes = ft->st.write_bytes,
		.promotions = ft->st.promotions, .demotions = ft->st.demotions,
		.drops = ft->st.drops, .errors = ft->st.errors,
	};
}

static void metric(FILE *f, const char *name, const char *type, const char *help,
		   uint64_t v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type,
		name, (unsigned long long)v);
}

/* One family per tier stats member but the tier's place and kind,
 * which are its labels. */
#define TS(member)	(offsetof(struct kv_offd_tier_stats, member) / sizeof(uint64_t))
static void tier_metrics(struct offd *d, FILE *f)
{
	static const struct {
		const char *name, *type, *help;
	} fam[KV_OFFD_TIER_STATS_COUNT] = {
		[TS(capacity_bytes)] = { "kv_offload_tier_capacity_bytes", "gauge", "Bytes a file tier may hold; 0 unbounded." },
		[TS(blocks)] = { "kv_offload_tier_blocks", "gauge", "Blocks in a file tier (bounded: its LRU; else found at start)." },
		[TS(bytes)] = { "kv_offload_tier_bytes", "gauge", "Bytes of those blocks." },
		[TS(hits)] = { "kv_offload_tier_hits_total", "counter", "Read-throughs a file tier served." },
		[TS(misses)] = { "kv_offload_tier_misses_total", "counter", "Read-throughs that asked a file tier in vain." },
		[TS(read_bytes)] = { "kv_offload_tier_read_bytes_total", "counter", "Bytes read through from a file tier." },
		[TS(writes)] = { "kv_offload_tier_writes_total", "counter", "Blocks written into a file tier." },
		[TS(write_bytes)] = { "kv_offload_tier_write_bytes_total", "counter", "Bytes written into a file tier." },
		[TS(promotions)] = { "kv_offload_tier_promotions_total", "counter", "Blocks copied up into a file tier." },
		[TS(demotions)] = { "kv_offload_tier_demotions_total", "counter", "Blocks moved out of a file tier to a lower one." },
		[TS(drops)] = { "kv_offload_tier_drops_total", "counter", "Blocks that left a file tier with no lower tier taking them." },
		[TS(errors)] = { "kv_offload_tier_errors_total", "counter", "Reads, writes and removals on a file tier that failed." },
	};
	struct kv_offd_tier_stats ts[FILE_TIERS_MAX];

	for (unsigned t = 0; t < d->ntiers; t++)
		report_fill_tier_stats(d, t, &ts[t]);
	for (size_t m = 0; m < KV_OFFD_TIER_STATS_COUNT; m++) {
		if (!fam[m].name)
			continue;
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fam[m].name, fam[m].help, fam[m].name,
			fam[m].type);
		for (unsigned t = 0; t < d->ntiers; t++)
			fprintf(f, "%s{tier=\"%u\",kind=\"%s\"} %llu\n", fam[m].name, t,
				tier_name(d, t),
				(unsigned long long)kv_offd_tier_stats_value(&ts[t], m));
	}
}

int report_write_metrics(struct offd *d)
{
	struct kv_offd_stats st;
	const uint64_t bytes[DIR_COUNT] = {
		[DIR_PUT] = d->st.put_bytes, [DIR_GET] = d->st.get_bytes,
		[DIR_SPILL] = d->st.spill_bytes,
		[DIR_READTHROUGH] = d->st.readthrough_bytes,
	};
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int err = 0;

	if (!d->metrics_path)
		return 0;
	report_fill_stats(d, &st);
	f = open_memstream(&text, &len);
	if (!f)
		return -errno;
	fputs("# HELP kv_offload_bytes_total Block bytes moved, by direction.\n"
	      "# TYPE kv_offload_bytes_total counter\n", f);
	for (int i = 0; i < DIR_COUNT; i++)
		fprintf(f, "kv_offload_bytes_total{direction=\"%s\"} %llu\n",
			dir_names[i], (unsigned long long)bytes[i]);
	fputs("# HELP kv_offload_seconds_total Time spent moving blocks, by direction.\n"
	      "# TYPE kv_offload_seconds_total counter\n", f);
	for (int i = 0; i < DIR_COUNT; i++)
		fprintf(f, "kv_offload_seconds_total{direction=\"%s\"} %.9f\n",
			dir_names[i], d->seconds[i]);
	fputs("# HELP kv_offload_transfer_bytes Size of each block transfer.\n"
	      "# TYPE kv_offload_transfer_bytes histogram\n", f);
	for (int i = 0; i < DIR_COUNT; i++) {
		uint64_t cum = 0, bound = 4096;

		for (int b = 0; b < HIST_BUCKETS; b++, bound *= 4) {
			cum += d->hist[i][b];
			if (b < HIST_BUCKETS - 1)
				fprintf(f, "kv_offload_transfer_bytes_bucket{direction=\"%s\",le=\"%llu\"} %llu\n",
					dir_names[i], (unsigned long long)bound,
					(unsigned long long)cum);
			else
				fprintf(f, "kv_offload_transfer_bytes_bucket{direction=\"%s\",le=\"+Inf\"} %llu\n",
					dir_names[i], (unsigned long long)cum);
		}
		fprintf(f, "kv_offload_transfer_bytes_sum{direction=\"%s\"} %llu\n"
			"kv_offload_transfer_bytes_count{direction=\"%s\"} %llu\n",
			dir_names[i], (unsigned long long)bytes[i],
			dir_names[i], (unsigned long long)cum);
	}
	metric(f, "kv_offload_hits_total", "counter", "LOOKUPs served from RAM.", st.hits);
	metric(f, "kv_offload_misses_total", "counter", "LOOKUPs not in RAM.", st.misses);
	metric(f, "kv_offload_evictions_total", "counter", "Blocks dropped from RAM.",
	       st.evictions);
	metric(f, "kv_offload_pool_bytes", "gauge", "Size of the shared pool.",
	       st.pool_bytes);
	metric(f, "kv_offload_pool_bytes_used", "gauge", "Pool bytes in slots in use.",
	       st.pool_bytes_used);
	metric(f, "kv_offload_blocks", "gauge", "Blocks in the RAM tier.", st.blocks);
	metric(f, "kv_offload_pins", "gauge", "Outstanding client pins.", st.pins);
	metric(f, "kv_offload_clients", "gauge", "Connected clients.", st.clients);
	metric(f, "kv_offload_writebehind_queue_depth", "gauge",
	       "Write-behind jobs queued or running.", st.wb_queue_depth);
	metric(f, "kv_offload_writebehind_drops_total", "counter",
	       "Blocks dropped from RAM unwritten: storage was behind.", st.wb_drops);
	metric(f, "kv_offload_writebehind_errors_total", "counter",
	       "Write-behind writes that failed.", st.wb_errors);
	metric(f, "kv_offload_accept_errors_total", "counter",
	       "Connections not accepted for want of a descriptor.", st.accept_errors);
	metric(f, "kv_offload_alloc_refused_total", "counter",
	       "ALLOCs refused over a client's share of slots.", st.alloc_refused);
	metric(f, "kv_offload_allocs_reclaimed_total", "counter",
	       "ALLOCs left uncommitted too long, taken back.", st.allocs_reclaimed);
	metric(f, "kv_offload_pins_revoked_total", "counter",
	       "Pins held past --pin-timeout while puts were refused, taken back.",
	       st.pins_revoked);
	metric(f, "kv_offload_pins_refused_total", "counter",
	       "Pins refused: all the pages but one per other size class held pins.",
	       st.pins_refused);
	metric(f, "kv_offload_altered_total", "counter",
	       "Blocks written into after COMMIT, dropped unserved.", st.altered);
	tier_metrics(d, f);
	if (fclose(f) != 0)
		err = -ENOMEM;
	/* Whole or not at all, through a temp made O_EXCL and never followed
	 * (a textfile dir others can write); node_exporter reads it as another
	 * user, so 0644 whatever the umask.  A device or a FIFO there is
	 * written in place, and never waited on: the loop must not stall. */
	if (!err)
		err = kv_file_replace(AT_FDCWD, d->metrics_path, text, len, 0644,
				      KV_FILE_IN_PLACE | KV_FILE_NONBLOCK | KV_FILE_MODE_EXACT);
	free(text);
	if (err)
		tool_err("cannot write '%s': %s", d->metrics_path,
			 *kv_error_detail() ? kv_error_detail() : kv_strerror(err));
	return err;
}
