/* XXH3-64 payload checksums kept in the user.kv.xxh3 xattr. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/xattr.h>
#include <xxhash.h>
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

#define XXH3_HEX_LEN	16
#define VERIFY_CHUNK_BYTES	(1u << 20)

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

int kv_integrity_verify_fd(int fd)
{
	struct kv_xxh3_state *st;
	uint64_t want;
	off_t off = 0;
	char *buf;
	int ret;

	ret = kv_integrity_get(fd, &want);
	if (ret == -EBADMSG)
		return -KV_ECHECKSUM;
	if (ret == -ENOTSUP || ret == -EOPNOTSUPP)
		return -ENODATA;
	if (ret < 0)
		return ret;
	buf = malloc(VERIFY_CHUNK_BYTES);
	if (!buf)
		return -ENOMEM;
	ret = kv_xxh3_new(&st);
	if (ret < 0) {
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
			ret = kv_xxh3_digest(st) == want ? 0 : -KV_ECHECKSUM;
			break;
		}
		kv_xxh3_update(st, buf, n);
		off += n;
	}
	kv_xxh3_free(st);
	free(buf);
	return ret;
}
