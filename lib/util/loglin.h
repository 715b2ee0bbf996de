/*
 * Log-linear bucket maths with a chosen precision, shared by the latency
 * histograms (stats.c) and eviction's age histogram (evict.c).  Buckets
 * 0..2^S-1 hold their value exactly; above, each power of two is split
 * into 2^S buckets, so (64 - S + 1) << S buckets cover every uint64_t.
 */
#ifndef KV_UTIL_LOGLIN_H
#define KV_UTIL_LOGLIN_H

#include <stdint.h>

#define KVI_LOGLIN_BUCKETS(sub_bits)	((64u - (sub_bits) + 1) << (sub_bits))

/* The bucket value falls in, and a bucket's lowest and highest value. */
unsigned kvi_loglin_index(uint64_t value, unsigned sub_bits);
uint64_t kvi_loglin_low(unsigned index, unsigned sub_bits);
uint64_t kvi_loglin_high(unsigned index, unsigned sub_bits);

#endif
