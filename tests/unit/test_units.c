/* kv_size_parse, kv_duration_parse, kv_size_format. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

int main(void)
{
	uint64_t v;
	char buf[32];

	CHECK(kv_size_parse("4096", &v) == 0 && v == 4096);
	CHECK(kv_size_parse("2M", &v) == 0 && v == 2u << 20);
	CHECK(kv_size_parse("2MiB", &v) == 0 && v == 2u << 20);
	CHECK(kv_size_parse("10g", &v) == 0 && v == 10ULL << 30);
	CHECK(kv_size_parse("1KB", &v) == 0 && v == 1024);
	CHECK(kv_size_parse("", &v) == -EINVAL);
	CHECK(kv_size_parse("M", &v) == -EINVAL);
	CHECK(kv_size_parse("12X", &v) == -EINVAL);
	CHECK(kv_size_parse("-1", &v) == -EINVAL);
	CHECK(kv_size_parse("99999999999999999999", &v) == -ERANGE);
	CHECK(kv_size_parse("17000000E", &v) == -ERANGE);

	CHECK(kv_duration_parse("60m", &v) == 0 && v == 3600000000000ULL);
	CHECK(kv_duration_parse("1h30m", &v) == 0 && v == 5400000000000ULL);
	CHECK(kv_duration_parse("90", &v) == 0 && v == 90000000000ULL);
	CHECK(kv_duration_parse("7d", &v) == 0 && v == 604800000000000ULL);
	CHECK(kv_duration_parse("250ms", &v) == 0 && v == 250000000ULL);
	CHECK(kv_duration_parse("5x", &v) == -EINVAL);
	CHECK(kv_duration_parse("m", &v) == -EINVAL);
	CHECK(kv_duration_parse("", &v) == -EINVAL);
	/* Decimals: "--watch 0.2s", "1.5h". */
	CHECK(kv_duration_parse("0.2s", &v) == 0 && v == 200000000ULL);
	CHECK(kv_duration_parse("1.5h", &v) == 0 && v == 5400000000000ULL);
	CHECK(kv_duration_parse("0.000000001s", &v) == 0 && v == 1);
	CHECK(kv_duration_parse("1.25", &v) == 0 && v == 1250000000ULL);
	CHECK(kv_duration_parse("1.s", &v) == -EINVAL);
	CHECK(kv_duration_parse(".5s", &v) == -EINVAL);
	CHECK(kv_duration_parse("1.0000000001s", &v) == -EINVAL);

	kv_size_format(512, buf, sizeof(buf));
	CHECK(!strcmp(buf, "512B"));
	kv_size_format(1536, buf, sizeof(buf));
	CHECK(!strcmp(buf, "1.5K"));
	kv_size_format(3ULL << 30, buf, sizeof(buf));
	CHECK(!strcmp(buf, "3.0G"));
	kv_size_format(200ULL << 20, buf, sizeof(buf));
	CHECK(!strcmp(buf, "200M"));

	kv_time_format(0, buf, sizeof(buf));
	CHECK(!strcmp(buf, "1970-01-01T00:00:00Z"));
	CHECK(!strcmp(kv_strerror(-KV_ECHECKSUM), "checksum mismatch"));
	CHECK(!strcmp(kv_strerror(-ENOENT), "No such file or directory"));
	return failures ? 1 : 0;
}
