/*
 * kvbench internals shared by its files: the options, one run's results,
 * and the pieces that turn them into tables, JSON, SVG and a verdict.
 */
#ifndef KVBENCH_H
#define KVBENCH_H

#include <limits.h>
#include <stdint.h>
#include <jansson.h>
#include <kv/kv.h>

#define KVBENCH_JSON_VERSION	1

/* kvio is libkv's own file engine (kv_io_batch, kv_io_has): what a
 * connector linking libkv gets, checksums and all.  s3 is not chosen: it
 * is what an s3:// --dir runs on (libkv's S3 tier, kv_tier_batch_stream). */
enum engine { ENGINE_URING, ENGINE_PSYNC, ENGINE_KVIO, ENGINE_S3 };
enum fsync_policy { FSYNC_NONE, FSYNC_FILE, FSYNC_DIR };
/* The data phases, then the metadata phases (mdtest's create, stat and
 * remove of empty files, here absent block keys in the bucket dirs). */
enum phase { PH_WRITE, PH_READ, PH_LOOKUP, PH_MIXED, PH_CREATE, PH_STAT, PH_UNLINK, PH_COUNT };
#define PH_DATA_MASK	((1u << PH_CREATE) - 1)		/* "all" */
#define PH_META_MASK	((1u << PH_COUNT) - 1 - PH_DATA_MASK)	/* "meta" */
enum direct_mode { DIRECT_AUTO, DIRECT_ON, DIRECT_OFF };

/* What one latency histogram measures; data transfer is kept apart
 * from the metadata calls around it. */
enum lat {
	LAT_READ,	/* read(2)/io_uring read of the whole block; s3: a GET,
			   handed to the engine to its done() */
	LAT_WRITE,	/* write of the whole block; s3: a PUT, likewise */
	LAT_OPEN,	/* openat, with create for writes */
	LAT_CLOSE,
	LAT_FSYNC,	/* fsync of the file */
	LAT_DIRSYNC,	/* fsync of its directory */
	LAT_RENAME,	/* temp -> target */
	LAT_TOUCH,	/* atime stamp on a read hit, as llm-d readers do */
	LAT_LOOKUP,	/* presence check (fstatat, kv_io_has, or an s3 HEAD) */
	LAT_FILE,	/* a whole block operation, open to close/rename */
	LAT_BATCH,	/* one kv_io_batch call of up to qd whole operations */
	LAT_CREATE,	/* open(O_CREAT | O_EXCL) and close of an empty file */
	LAT_UNLINK,
	LAT_COUNT
};

extern const char *const phase_names[PH_COUNT];
extern const char *const lat_names[LAT_COUNT];

/* Whether a latency is a phase's own operation (its rows carry the
 * rates) rather than a metadata call around a block transfer. */
int lat_is_main(enum lat l);

struct bench_opts {
	const char *dir;
	enum engine engine;
	unsigned threads;
	unsigned qd;
	uint64_t size_bytes;
	uint64_t duration_ns;		/* 0: one pass over --size */
	uint64_t block_bytes;
	enum direct_mode direct;
	int atomic;
	enum fsync_policy fsync;
	unsigned phases;		/* bit per enum phase, run in that order */
	unsigned mix_read_pct;
	uint64_t lookups;
	int drop_caches;
	int registered_buffers;
	int registered_files;		/* open/fsync/close through the ring */
	int sqpoll;
	uint64_t seed;
	int keep;
	int cross_read;			/* ranks read what the next rank wrote */
	int json, ndjson;
	const char *plot;
};

/* One rank's share of a phase, kept by rank 0 of a run of several. */
struct rank_result {
	uint64_t elapsed_ns;
	uint64_t ops, bytes, reads, writes, hits, misses;
	struct kv_hist *lat[LAT_COUNT];
};

struct phase_result {
	int ran;
	uint64_t elapsed_ns;
	uint64_t ops;			/* block reads + writes, or lookups */
	uint64_t bytes;
	uint64_t reads, writes;
	uint64_t hits, misses;		/* lookup phase */
	const char *cache_drop;		/* read phases: how the cache was made cold */
	struct kv_hist *lat[LAT_COUNT];
	/* Under mpirun, on rank 0: the figures above are every rank's,
	 * summed (histograms merged, elapsed the longest), and these are
	 * each rank's own.  NULL with one rank. */
	struct rank_result *per_rank;
	unsigned slowest;		/* the rank that moved least */
};

/* One second (or the last, shorter, interval) of a phase. */
struct sample {
	enum phase phase;
	uint64_t t_ns;			/* end of the interval, since the phase began */
	uint64_t interval_ns;
	uint64_t ops;
	uint64_t bytes;
};

struct bench {
	struct bench_opts o;
	struct kv_geometry geo;
	int have_geo;
	int rank;			/* under mpirun; 0 of 1 otherwise */
	unsigned nranks;
	int direct;			/* O_DIRECT in use */
	int s3;				/* --dir is a bucket (s3://) */
	uint64_t files;
	char model_dir[KV_NAME_MAX + 1];
	int64_t started_ns;
	struct phase_result res[PH_COUNT];
	struct sample *samples;
	size_t nsamples, samples_cap;
	char err[512];			/* first failure, for the caller to print */
	/* Where it ran (rank 0), taken before a dir it made is removed. */
	json_t *env;			/* env_json */
	char fs[PATH_MAX + 200];	/* env_fs_summary */
};

/* Run the selected phases under o.dir; 0, or -errno with b->err set. */
int bench_run(struct bench *b);
/* The I/O buffers a run's data phases hold: threads x qd (1 with psync)
 * x block; 0 when it runs none. */
uint64_t bench_buffer_bytes(const struct bench_opts *o);
void bench_free(struct bench *b);

/* The environment of a run in dir: kernel, CPU, NUMA, filesystem, device, GPU. */
json_t *env_json(const char *dir);
/* "ext4 on /dev/vda" style summary for the table header. */
void env_fs_summary(const char *dir, char *buf, size_t len);

/* Percentiles of a histogram as a JSON object with _ns keys. */
json_t *hist_json(const struct kv_hist *h);
json_t *geometry_json(const struct kv_geometry *g);
json_t *phase_json(const struct bench *b, enum phase ph);
json_t *sample_json(const struct sample *s);
json_t *report_json(const struct bench *b);
void report_table(const struct bench *b);
void print_geometry(const struct kv_geometry *g, const char *source);

/* Write the latency CDFs and throughput over time as SVG; -errno. */
int plot_svg(const char *path, const struct bench *b);

/* "12.3us"-style latency text. */
void format_ns(uint64_t ns, char *buf, size_t len);

#endif
