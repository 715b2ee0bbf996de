#ifndef KV_UNITS_H
#define KV_UNITS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Parse a size: digits with an optional suffix K, M, G, T, P (powers of
 * 1024; "KiB", "k", "KB" accepted alike) or B.  -EINVAL on junk, -ERANGE
 * on overflow.
 */
int kv_size_parse(const char *text, uint64_t *bytes);

/* Format bytes as "1.5G"-style text (powers of 1024) into buf. */
void kv_size_format(uint64_t bytes, char *buf, size_t len);

/*
 * Parse a duration: a number, with up to nine decimals, and a unit ns,
 * us, ms, s, m, h, d or w (default s); several terms may follow each
 * other ("1h30m", "0.2s", "1.5h").
 */
int kv_duration_parse(const char *text, uint64_t *ns);

/* Current CLOCK_REALTIME / CLOCK_MONOTONIC in nanoseconds. */
int64_t kv_now_ns(void);
int64_t kv_monotonic_ns(void);

/* Format ns since the epoch as RFC 3339 UTC ("2026-11-22T02:35:01Z"). */
void kv_time_format(int64_t ns, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
