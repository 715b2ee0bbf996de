/* Log-linear histograms: see kv/stats.h for the error bound. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <kv/stats.h>
#include "loglin.h"

void kv_hist_init(struct kv_hist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

int kv_hist_new(struct kv_hist **out)
{
	struct kv_hist *h = malloc(sizeof(*h));

	if (!h)
		return -ENOMEM;
	kv_hist_init(h);
	*out = h;
	return 0;
}

void kv_hist_free(struct kv_hist *h)
{
	free(h);
}

/*
 * The log-linear bucket maths, for any number of sub-bucket bits S (the
 * histograms here use KV_HIST_SUB_BITS; eviction's age histogram wants
 * finer buckets).  Group g >= 1 holds [2^(g+S-1), 2^(g+S)) in 2^S buckets
 * of width 2^(g-1); group 0 holds 0..2^S-1 exactly.
 */
unsigned kvi_loglin_index(uint64_t value, unsigned sub_bits)
{
	uint64_t sub = 1ull << sub_bits;
	unsigned msb, shift;

	if (value < sub)
		return (unsigned)value;
	msb = 63u - (unsigned)__builtin_clzll(value);
	shift = msb - sub_bits;
	return (shift + 1) * (unsigned)sub + (unsigned)((value >> shift) - sub);
}

uint64_t kvi_loglin_low(unsigned index, unsigned sub_bits)
{
	unsigned group = index >> sub_bits, sub = index & ((1u << sub_bits) - 1);

	if (group == 0)
		return sub;
	return ((1ull << sub_bits) + sub) << (group - 1);
}

uint64_t kvi_loglin_high(unsigned index, unsigned sub_bits)
{
	unsigned group = index >> sub_bits;

	if (group == 0)
		return index;
	return kvi_loglin_low(index, sub_bits) + ((1ull << (group - 1)) - 1);
}

unsigned kv_hist_index(uint64_t value)
{
	return kvi_loglin_index(value, KV_HIST_SUB_BITS);
}

uint64_t kv_hist_bucket_low(unsigned index)
{
	return kvi_loglin_low(index, KV_HIST_SUB_BITS);
}

uint64_t kv_hist_bucket_high(unsigned index)
{
	return kvi_loglin_high(index, KV_HIST_SUB_BITS);
}

void kv_hist_record_n(struct kv_hist *h, uint64_t value, uint64_t n)
{
	if (!n)
		return;
	h->buckets[kv_hist_index(value)] += n;
	h->count += n;
	h->sum += (double)value * (double)n;
	if (value < h->min)
		h->min = value;
	if (value > h->max)
		h->max = value;
}

void kv_hist_record(struct kv_hist *h, uint64_t value)
{
	kv_hist_record_n(h, value, 1);
}

void kv_hist_merge(struct kv_hist *dst, const struct kv_hist *src)
{
	unsigned i;

	if (!src->count)
		return;
	for (i = 0; i < KV_HIST_BUCKETS; i++)
		dst->buckets[i] += src->buckets[i];
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t kv_hist_percentile(const struct kv_hist *h, double p)
{
	uint64_t rank, seen = 0, lo, hi, mid;
	unsigned i;

	if (!h->count)
		return 0;
	if (!(p > 0))
		return h->min;
	if (p >= 100)
		return h->max;
	/* The nearest-rank definition: the ceil(p/100 * n)-th smallest. */
	rank = (uint64_t)ceil(p / 100.0 * (double)h->count);
	if (rank < 1)
		rank = 1;
	for (i = 0; i < KV_HIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen >= rank)
			break;
	}
	lo = kv_hist_bucket_low(i);
	hi = kv_hist_bucket_high(i);
	mid = lo + (hi - lo) / 2;
	if (mid < h->min)
		mid = h->min;
	if (mid > h->max)
		mid = h->max;
	return mid;
}

double kv_hist_mean(const struct kv_hist *h)
{
	return h->count ? h->sum / (double)h->count : 0;
}
