/* Sizes, durations and clocks as operators type and read them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <kv/units.h>

int kv_size_parse(const char *text, uint64_t *bytes)
{
	static const char units[] = "BKMGTPE";
	const char *p = text, *u;
	uint64_t v = 0, mult = 1;
	int digits = 0;

	if (!text || !*text)
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (!digits)
		return -EINVAL;
	if (*p) {
		u = strchr(units, *p >= 'a' ? *p - 32 : *p);
		if (!u)
			return -EINVAL;
		for (long i = u - units; i > 0; i--)
			mult *= 1024;
		p++;
		/* Accept "K", "KB", "KiB" (and lowercase) as the same unit. */
		if (u != units && (!strcasecmp(p, "iB") || !strcasecmp(p, "B")))
			p += strlen(p);
		if (*p)
			return -EINVAL;
	}
	if (mult > 1 && v > UINT64_MAX / mult)
		return -ERANGE;
	*bytes = v * mult;
	return 0;
}

void kv_size_format(uint64_t bytes, char *buf, size_t len)
{
	static const char units[] = "KMGTPE";
	double v = (double)bytes;
	int i = -1;

	if (bytes < 1024) {
		snprintf(buf, len, "%" PRIu64 "B", bytes);
		return;
	}
	while (v >= 1024 && i < 5) {
		v /= 1024;
		i++;
	}
	snprintf(buf, len, v < 10 ? "%.1f%c" : "%.0f%c", v, units[i]);
}

int kv_duration_parse(const char *text, uint64_t *ns)
{
	static const struct { const char *name; uint64_t ns; } units[] = {
		{ "ns", 1 }, { "us", 1000 }, { "ms", 1000000 },
		{ "s", 1000000000ULL }, { "m", 60000000000ULL },
		{ "h", 3600000000000ULL }, { "d", 86400000000000ULL },
		{ "w", 604800000000000ULL },
	};
	const char *p = text;
	uint64_t total = 0;

	if (!text || !*text)
		return -EINVAL;
	while (*p) {
		uint64_t v = 0, mult = 0, frac = 0, scale = 1;
		unsigned __int128 term;
		int digits = 0;
		size_t n;

		for (; *p >= '0' && *p <= '9'; p++, digits++) {
			if (v > UINT64_MAX / 10)
				return -ERANGE;
			v = v * 10 + (uint64_t)(*p - '0');
		}
		if (!digits)
			return -EINVAL;
		/* "0.2s": up to nine decimals, enough for a nanosecond of any unit. */
		if (*p == '.') {
			for (p++, digits = 0; *p >= '0' && *p <= '9'; p++, digits++) {
				if (digits == 9)
					return -EINVAL;
				frac = frac * 10 + (uint64_t)(*p - '0');
				scale *= 10;
			}
			if (!digits)
				return -EINVAL;
		}
		for (n = 0; p[n] >= 'a' && p[n] <= 'z'; n++)
			;
		if (n == 0) {
			if (*p)
				return -EINVAL;
			mult = units[3].ns;	/* a bare number is seconds */
		}
		for (size_t i = 0; n && i < sizeof(units) / sizeof(units[0]); i++)
			if (strlen(units[i].name) == n && !strncmp(p, units[i].name, n))
				mult = units[i].ns;
		if (!mult)
			return -EINVAL;
		term = (unsigned __int128)v * mult + (unsigned __int128)frac * mult / scale;
		if (term > UINT64_MAX - total)
			return -ERANGE;
		total += (uint64_t)term;
		p += n;
	}
	*ns = total;
	return 0;
}

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t kv_now_ns(void)
{
	return clock_ns(CLOCK_REALTIME);
}

int64_t kv_monotonic_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

void kv_time_format(int64_t ns, char *buf, size_t len)
{
	time_t s = (time_t)(ns / 1000000000);
	struct tm tm;

	gmtime_r(&s, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
