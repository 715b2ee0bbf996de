/* Payload checksums in xattrs: kvtools' XXH3-64, vLLM's CRC32C. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/xattr.h>
#include <xxhash.h>
#include <isa-l/crc.h>
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
/* libxxhash's runtime dispatch picks AVX2/AVX-512 where the CPU has
 * them: the same hash, several times faster than the SSE2 baseline. */
#include <xxh_x86dispatch.h>
#define xxh3_64(buf, len)		XXH3_64bits_dispatch(buf, len)
#define xxh3_64_update(st, buf, len)	XXH3_64bits_update_dispatch(st, buf, len)
#else
#define xxh3_64(buf, len)		XXH3_64bits(buf, len)
#define xxh3_64_update(st, buf, len)	XXH3_64bits_update(st, buf, len)
#endif
#include <kv/errors.h>
#include <kv/integrity.h>
#include "util/error.h"

#define XXH3_HEX_LEN	16
#define VERIFY_CHUNK_BYTES	(1u << 20)
#define CRC32C_SEED		0xFFFFFFFFu	/* and the final xor */

uint64_t kv_xxh3(const void *buf, size_t len)
{
	return xxh3_64(buf, len);
}

/* struct kv_xxh3_state is never defined: it is libxxhash's state under a
 * name of ours, so the header need not pull in xxhash.h. */
int kv_xxh3_new(struct kv_xxh3_state **out)
{
	XXH3_state_t *st = XXH3_createState();

	if (!st)
		return -ENOMEM;
	XXH3_64bits_reset(st);
	*out = (struct kv_xxh3_state *)(void *)st;
	return 0;
}

void kv_xxh3_update(struct kv_xxh3_state *st, const void *buf, size_t len)
{
	xxh3_64_update((XXH3_state_t *)(void *)st, buf, len);
}

uint64_t kv_xxh3_digest(const struct kv_xxh3_state *st)
{
	return XXH3_64bits_digest((const XXH3_state_t *)(const void *)st);
}

void kv_xxh3_free(struct kv_xxh3_state *st)
{
	XXH3_freeState((XXH3_state_t *)(void *)st);
}

int kv_integrity_set(int fd, uint64_t xxh3)
{
	static const char hex[] = "0123456789abcdef";
	char text[XXH3_HEX_LEN];
	int i;

	for (i = XXH3_HEX_LEN - 1; i >= 0; i--, xxh3 >>= 4)
		text[i] = hex[xxh3 & 0xf];
	if (fsetxattr(fd, KV_XATTR_XXH3, text, sizeof(text), 0) < 0)
		return -errno;
	return 0;
}

/* A value that is not 16 hex digits cannot vouch for the data: -EBADMSG. */
int kv_integrity_get(int fd, uint64_t *xxh3)
{
	char text[XXH3_HEX_LEN + 1];
	uint64_t v = 0;
	ssize_t n;
	int i;

	n = fgetxattr(fd, KV_XATTR_XXH3, text, sizeof(text));
	if (n < 0)
		return errno == ERANGE ? -EBADMSG : -errno;
	if (n != XXH3_HEX_LEN)
		return -EBADMSG;
	for (i = 0; i < XXH3_HEX_LEN; i++) {
		char c = text[i];
		unsigned d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -EBADMSG;
		v = v << 4 | d;
	}
	*xxh3 = v;
	return 0;
}

uint32_t kv_crc32c(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t crc = CRC32C_SEED;

	/* ISA-L takes an int length. */
	while (len) {
		size_t n = len > VERIFY_CHUNK_BYTES ? VERIFY_CHUNK_BYTES : len;

		crc = crc32_iscsi((unsigned char *)p, (int)n, crc);
		p += n;
		len -= n;
	}
	return crc ^ CRC32C_SEED;
}

/* vLLM's CRC32C xattr: 0, -ENODATA when absent (or no xattrs here),
 * -EBADMSG when it is not four bytes. */
static int crc32c_get(int fd, uint32_t *crc)
{
	unsigned char b[5];
	ssize_t n = fgetxattr(fd, KV_XATTR_VLLM_CRC32C, b, sizeof(b));

	if (n < 0)
		return errno == ERANGE ? -EBADMSG :
		       errno == ENOTSUP || errno == EOPNOTSUPP ? -ENODATA : -errno;
	if (n != 4)
		return -EBADMSG;
	*crc = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
	return 0;
}

/* Both stored sums, each present or not: 0, -ENOTSUP where the
 * filesystem has no user xattrs, -KV_ECHECKSUM for a malformed value
 * (named in the error detail), -errno. */
static int stored_sums(int fd, int *has_xxh3, uint64_t *xxh3, int *has_crc, uint32_t *crc)
{
	int ret = kv_integrity_get(fd, xxh3);

	kvi_error_clear();
	if (ret == -ENOTSUP || ret == -EOPNOTSUPP)
		return -ENOTSUP;
	if (ret == -EBADMSG)
		return kvi_fail(-KV_ECHECKSUM, "malformed %s", KV_XATTR_XXH3);
	if (ret < 0 && ret != -ENODATA)
		return ret;
	*has_xxh3 = ret == 0;
	ret = crc32c_get(fd, crc);
	if (ret == -EBADMSG)
		return kvi_fail(-KV_ECHECKSUM, "malformed %s", KV_XATTR_VLLM_CRC32C);
	if (ret < 0 && ret != -ENODATA)
		return ret;
	*has_crc = ret == 0;
	return 0;
}

/* The verdict on the sums computed, naming the one that disagrees. */
static int compare(int has_xxh3, uint64_t want, uint64_t got, int has_crc,
		   uint32_t want_crc, uint32_t got_crc)
{
	if (has_xxh3 && got != want)
		return kvi_fail(-KV_ECHECKSUM, "payload does not match %s", KV_XATTR_XXH3);
	if (has_crc && got_crc != want_crc)
		return kvi_fail(-KV_ECHECKSUM, "payload does not match %s",
				KV_XATTR_VLLM_CRC32C);
	return 0;
}

int kv_integrity_check(int fd, const void *buf, size_t len)
{
	int has_xxh3, has_crc, ret;
	uint64_t xxh3;
	uint32_t crc;

	ret = stored_sums(fd, &has_xxh3, &xxh3, &has_crc, &crc);
	if (ret == -ENOTSUP)
		return 0;
	if (ret < 0)
		return ret;
	return compare(has_xxh3, xxh3, has_xxh3 ? kv_xxh3(buf, len) : 0,
		       has_crc, crc, has_crc ? kv_crc32c(buf, len) : 0);
}

int kv_integrity_verify_fd(int fd)
{
	struct kv_xxh3_state *st = NULL;
	int has_xxh3, has_crc, ret;
	uint32_t want_crc, crc = CRC32C_SEED;
	uint64_t want;
	off_t off = 0;
	char *buf;

	ret = stored_sums(fd, &has_xxh3, &want, &has_crc, &want_crc);
	if (ret < 0)
		return ret;
	if (!has_xxh3 && !has_crc)
		return -ENODATA;
	buf = malloc(VERIFY_CHUNK_BYTES);
	if (!buf)
		return -ENOMEM;
	if (has_xxh3 && (ret = kv_xxh3_new(&st)) < 0) {
		free(buf);
		return ret;
	}
	for (;;) {
		ssize_t n = pread(fd, buf, VERIFY_CHUNK_BYTES, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			break;
		}
		if (n == 0) {
			ret = compare(has_xxh3, want, st ? kv_xxh3_digest(st) : 0,
				      has_crc, want_crc, crc ^ CRC32C_SEED);
			break;
		}
		if (has_xxh3)
			kv_xxh3_update(st, buf, n);
		if (has_crc)
			crc = crc32_iscsi((unsigned char *)buf, (int)n, crc);
		off += n;
	}
	if (st)
		kv_xxh3_free(st);
	free(buf);
	return ret;
}
