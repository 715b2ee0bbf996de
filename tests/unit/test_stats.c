/* kv_hist: bucket arithmetic, merge, and percentiles within the stated
 * error of exact nearest-rank percentiles over random data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double uniform(void)
{
	return (double)(rng() >> 11) / 9007199254740992.0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Compare every percentile we report against the exact nearest rank. */
static void check_against_exact(uint64_t *vals, size_t n, const char *what)
{
	static const double ps[] = { 0, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100 };
	struct kv_hist *h, *a, *b;
	size_t i;

	CHECK(kv_hist_new(&h) == 0 && kv_hist_new(&a) == 0 && kv_hist_new(&b) == 0);
	for (i = 0; i < n; i++) {
		kv_hist_record(h, vals[i]);
		/* The same data split across two "threads" and merged. */
		kv_hist_record(i % 3 ? a : b, vals[i]);
	}
	kv_hist_merge(a, b);
	qsort(vals, n, sizeof(*vals), cmp_u64);
	CHECK(h->count == n && a->count == n);
	CHECK(h->min == vals[0] && h->max == vals[n - 1]);
	for (i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
		size_t rank = (size_t)ceil(ps[i] / 100.0 * (double)n);
		uint64_t exact = vals[rank ? rank - 1 : 0];
		uint64_t got = kv_hist_percentile(h, ps[i]);
		double err = exact ? fabs((double)got - (double)exact) / (double)exact
				   : (double)got;

		if (err >= 0.01) {
			fprintf(stderr, "%s p%g: exact %llu got %llu (%.4f)\n", what,
				ps[i], (unsigned long long)exact,
				(unsigned long long)got, err);
			failures++;
		}
		/* The bound the header promises, 2^-(S+1), with slack for
		 * the midpoint rounding down. */
		CHECK(err <= 1.0 / (1 << (KV_HIST_SUB_BITS + 1)) + 1e-9);
		CHECK(kv_hist_percentile(a, ps[i]) == got);
	}
	kv_hist_free(h);
	kv_hist_free(a);
	kv_hist_free(b);
}

int main(void)
{
	enum { N = 200000 };
	uint64_t *vals = malloc(N * sizeof(*vals));
	struct kv_hist h;
	unsigned i;
	size_t k;

	/* Buckets tile the whole range without gaps or overlaps. */
	for (i = 0; i + 1 < KV_HIST_BUCKETS; i++)
		CHECK(kv_hist_bucket_high(i) + 1 == kv_hist_bucket_low(i + 1));
	CHECK(kv_hist_bucket_low(0) == 0);
	CHECK(kv_hist_bucket_high(KV_HIST_BUCKETS - 1) == UINT64_MAX);
	CHECK(kv_hist_index(UINT64_MAX) == KV_HIST_BUCKETS - 1);
	for (k = 0; k < 100000; k++) {
		uint64_t v = rng() >> (rng() % 64);
		unsigned idx = kv_hist_index(v);

		CHECK(kv_hist_bucket_low(idx) <= v && v <= kv_hist_bucket_high(idx));
	}

	/* Empty, single value, small exact values. */
	kv_hist_init(&h);
	CHECK(kv_hist_percentile(&h, 50) == 0 && kv_hist_mean(&h) == 0);
	kv_hist_record(&h, 123456789);
	CHECK(kv_hist_percentile(&h, 0) == 123456789);
	CHECK(kv_hist_percentile(&h, 50) == 123456789);
	CHECK(kv_hist_percentile(&h, 100) == 123456789);
	kv_hist_init(&h);
	for (k = 1; k <= 100; k++)
		kv_hist_record(&h, k);
	CHECK(kv_hist_percentile(&h, 50) == 50);
	CHECK(kv_hist_percentile(&h, 99) == 99);
	CHECK(kv_hist_percentile(&h, 99.5) == 100);
	CHECK(kv_hist_percentile(&h, -3) == 1 && kv_hist_percentile(&h, 300) == 100);
	CHECK(fabs(kv_hist_mean(&h) - 50.5) < 1e-9);
	kv_hist_record_n(&h, 1000, 100);
	CHECK(h.count == 200 && kv_hist_percentile(&h, 75) == 1000);

	/* Latency-like data: log-normal around 100 us, over decades. */
	for (k = 0; k < N; k++) {
		double u1 = uniform() + 1e-12, u2 = uniform();
		double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);

		vals[k] = (uint64_t)exp(log(100000.0) + 1.5 * z);
	}
	check_against_exact(vals, N, "lognormal");
	/* Uniform over the full 64-bit range. */
	for (k = 0; k < N; k++)
		vals[k] = rng();
	check_against_exact(vals, N, "uniform64");
	/* Uniform in a narrow band, where many values share a bucket. */
	for (k = 0; k < N; k++)
		vals[k] = 2000000 + rng() % 50000;
	check_against_exact(vals, N, "narrow");
	/* Heavy tail: a few huge outliers among small values. */
	for (k = 0; k < N; k++)
		vals[k] = k % 1000 == 0 ? 5000000000ULL + rng() % 1000000000ULL : 300 + rng() % 700;
	check_against_exact(vals, N, "tail");

	free(vals);
	return failures ? 1 : 0;
}
