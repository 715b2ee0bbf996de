/* Library identity, error strings and the error-detail channel. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <kv/errors.h>
#include <kv/kv.h>
#include "error.h"

/* Per thread, as errno is: a failure's detail belongs to the caller that
 * got the failure. */
static __thread char detail[256];

int kvi_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	return err;
}

void kvi_error_clear(void)
{
	detail[0] = '\0';
}

const char *kv_error_detail(void)
{
	return detail;
}

int kv_write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

const char *kv_version(void)
{
	return KV_VERSION_STRING;
}

const char *kv_strerror(int err)
{
	static const char *const msgs[] = {
		[KV_EBADHASH - KV_EBADHASH] = "not a hex block hash",
		[KV_EBADPATH - KV_EBADHASH] = "path does not match the cache layout",
		[KV_EBADCONFIG - KV_EBADHASH] = "malformed model config",
		[KV_ECHECKSUM - KV_EBADHASH] = "checksum mismatch",
		[KV_ESHORT - KV_EBADHASH] = "file shorter than requested",
		[KV_EFINGERPRINT - KV_EBADHASH] = "model dir name does not match config.json",
		[KV_EPROTO - KV_EBADHASH] = "malformed message",
		[KV_ENODEV - KV_EBADHASH] = "no GPU device",
		[KV_ES3 - KV_EBADHASH] = "object store error",
		[KV_ENOBUCKET - KV_EBADHASH] = "no such bucket",
	};
	int e = err < 0 ? -err : err;

	if (e >= KV_EBADHASH && e < KV_ERRMAX)
		return msgs[e - KV_EBADHASH];
	/* strerror() is thread-safe in glibc for known errnos. */
	return strerror(e);
}
