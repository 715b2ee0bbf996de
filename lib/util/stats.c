/* Log-linear histograms: see kv/stats.h for the error bound. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <kv/stats.h>

#define SUB	(1u << KV_HIST_SUB_BITS)

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

/* Group g >= 1 holds [2^(g+S-1), 2^(g+S)) in SUB buckets of width 2^(g-1);
 * group 0 holds 0..SUB-1 exactly. */
unsigned kv_hist_index(uint64_t value)
{
	unsigned msb, shift;

	if (value < SUB)
		return (unsigned)value;
	msb = 63u - (unsigned)__builtin_clzll(value);
	shift = msb - KV_HIST_SUB_BITS;
	return (shift + 1) * SUB + (unsigned)((value >> shift) - SUB);
}

uint64_t kv_hist_bucket_low(unsigned index)
{
	unsigned group = index / SUB, sub = index % SUB;

	if (group == 0)
		return sub;
	return (uint64_t)(SUB + sub) << (group - 1);
}

uint64_t kv_hist_bucket_high(unsigned index)
{
	unsigned group = index / SUB;

	if (group == 0)
		return index;
	return kv_hist_bucket_low(index) + ((1ULL << (group - 1)) - 1);
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
