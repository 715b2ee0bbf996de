/* Front-end glue shared by the kvtools programs. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tool.h"

const char *tool_name = "kvtools";

void tool_init(const char *name)
{
	tool_name = name;
	atexit(tool_close_stdout);
}

static void vmsg(const char *fmt, va_list ap)
{
	fflush(stdout);
	fprintf(stderr, "%s: ", tool_name);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void tool_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

void tool_usage_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try '%s --help' for more information.\n", tool_name);
	exit(EXIT_USAGE);
}

void tool_bad_option(int c, char *const argv[])
{
	const char *arg = argv[optind - 1];
	int is_long = !strncmp(arg, "--", 2);

	if (c == ':' && is_long)
		tool_usage_fail("option '%s' requires an argument", arg);
	if (c == ':')
		tool_usage_fail("option requires an argument -- '%c'", optopt);
	if (!optopt)
		tool_usage_fail("unrecognized option '%s'", arg);
	if (is_long && strchr(arg, '='))
		tool_usage_fail("option '%.*s' doesn't allow an argument",
				(int)(strchr(arg, '=') - arg), arg);
	tool_usage_fail("invalid option -- '%c'", optopt);
}

uint64_t tool_mem_available(void)
{
	unsigned long long kib = 0, max = 0, cur = 0;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "re");
	uint64_t avail = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
			avail = (uint64_t)kib << 10;
			break;
		}
	if (f)
		fclose(f);
	/* "max" (no limit) does not scan, and leaves MemAvailable. */
	f = fopen("/sys/fs/cgroup/memory.max", "re");
	if (f && fscanf(f, "%llu", &max) == 1) {
		FILE *c = fopen("/sys/fs/cgroup/memory.current", "re");

		if (c && fscanf(c, "%llu", &cur) == 1) {
			uint64_t room = max > cur ? max - cur : 0;

			if (!avail || room < avail)
				avail = room;
		}
		if (c)
			fclose(c);
	}
	if (f)
		fclose(f);
	return avail;
}

void tool_version(void)
{
	printf("%s (kvtools) %s\n", tool_name, kv_version());
	exit(0);
}

void tool_root_check(const char *root)
{
	if (kv_root_check(root) < 0)
		tool_usage_fail("invalid root '%s': %s", root, kv_error_detail());
}

const char *tool_root(const char *opt)
{
	const char *env = getenv("KV_ROOT");
	const char *root = opt && *opt ? opt : env && *env ? env : NULL;

	if (!root)
		tool_usage_fail("no cache root: give --root or set KV_ROOT");
	tool_root_check(root);
	return root;
}

uint64_t tool_parse_size(const char *opt, const char *text)
{
	uint64_t v;

	if (kv_size_parse(text, &v) < 0)
		tool_usage_fail("invalid %s size '%s' (e.g. 4096, 2M, 10G)", opt, text);
	return v;
}

uint64_t tool_parse_duration_ns(const char *opt, const char *text)
{
	uint64_t v;

	if (kv_duration_parse(text, &v) < 0)
		tool_usage_fail("invalid %s duration '%s' (e.g. 90s, 60m, 7d)", opt, text);
	return v;
}

uint64_t tool_parse_uint(const char *opt, const char *text, uint64_t max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(text, &end, 10);
	if (!*text || *end || errno || text[0] == '-' || v > max)
		tool_usage_fail("invalid %s value '%s' (an integer 0..%llu)", opt, text,
				(unsigned long long)max);
	return v;
}

const char *tool_plural(uint64_t n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

void tool_json_print(json_t *value)
{
	json_dumpf(value, stdout, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII);
	fputc('\n', stdout);
	json_decref(value);
}

void tool_close_stdout(void)
{
	/* A closed pipe ends us quietly through SIGPIPE; anything else that
	 * loses output (a full disk, /dev/full) must not look like success. */
	if (fflush(stdout) != 0 || ferror(stdout) || close(STDOUT_FILENO) != 0) {
		if (errno == EBADF)
			return;
		fprintf(stderr, "%s: write error: %s\n", tool_name, strerror(errno));
		_exit(EXIT_RUNTIME);
	}
}
