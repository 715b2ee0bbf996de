#ifndef KV_STATS_H
#define KV_STATS_H

/*
 * Log-linear latency histograms in the manner of HdrHistogram: values
 * below 2^KV_HIST_SUB_BITS are counted exactly; above, each power of two
 * is split into 2^KV_HIST_SUB_BITS equal buckets, so a reported value
 * (the bucket midpoint, clamped to the recorded min and max) is within
 * 2^-(KV_HIST_SUB_BITS+1) (0.2%) of any value in its bucket.  Memory is
 * fixed (about 114 KiB) whatever the range; one histogram per thread,
 * merged at the end, needs no locking.
 */

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_HIST_SUB_BITS	8
#define KV_HIST_BUCKETS		((64 - KV_HIST_SUB_BITS + 1) << KV_HIST_SUB_BITS)

struct kv_hist {
	uint64_t count;
	uint64_t min;		/* UINT64_MAX while empty */
	uint64_t max;
	double sum;		/* for the mean; a double cannot overflow */
	uint64_t buckets[KV_HIST_BUCKETS];
};

/* Empty a histogram (also the initialiser). */
void kv_hist_init(struct kv_hist *h);

/* Allocate an empty histogram; -ENOMEM.  Free with kv_hist_free. */
int kv_hist_new(struct kv_hist **out);
void kv_hist_free(struct kv_hist *h);

/* Count value once / n times. */
void kv_hist_record(struct kv_hist *h, uint64_t value);
void kv_hist_record_n(struct kv_hist *h, uint64_t value, uint64_t n);

/* Add every count of src into dst. */
void kv_hist_merge(struct kv_hist *dst, const struct kv_hist *src);

/* The value at percentile p (0..100): the smallest recorded value v such
 * that at least p% of the values are <= v, within the bucket error; 0 for
 * an empty histogram.  p outside 0..100 is clamped. */
uint64_t kv_hist_percentile(const struct kv_hist *h, double p);

/* Arithmetic mean of the recorded values; 0 when empty. */
double kv_hist_mean(const struct kv_hist *h);

/* Bucket arithmetic, for walking the distribution (plots, CDFs):
 * the index a value falls in, and a bucket's lowest and highest value. */
unsigned kv_hist_index(uint64_t value);
uint64_t kv_hist_bucket_low(unsigned index);
uint64_t kv_hist_bucket_high(unsigned index);

#ifdef __cplusplus
}
#endif

#endif
