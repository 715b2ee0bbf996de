/* kv_xxh3*, kv_integrity_set/get/verify_fd on a real file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/xattr.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fill_random(unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = rng() >> 56;
}

static void check_streaming(const unsigned char *buf, size_t len)
{
	struct kv_xxh3_state *st;
	size_t off = 0;

	CHECK(kv_xxh3_new(&st) == 0);
	while (off < len) {
		size_t n = rng() % 70000 + 1;

		if (n > len - off)
			n = len - off;
		kv_xxh3_update(st, buf + off, n);
		off += n;
	}
	CHECK(kv_xxh3_digest(st) == kv_xxh3(buf, len));
	kv_xxh3_free(st);
}

int main(void)
{
	char dir[] = "/tmp/kv-test-integrity.XXXXXX", path[64], text[32];
	size_t sizes[] = { 0, 1, 17, 4096, (1u << 20) - 1, (3u << 20) + 7 };
	unsigned char *buf = malloc((3u << 20) + 7);
	uint64_t sum;
	unsigned i;
	ssize_t n;
	int fd, ret;

	rng_state = 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
	if (!buf || !mkdtemp(dir))
		return 1;
	/* The published XXH3-64 of empty input. */
	CHECK(kv_xxh3("", 0) == 0x2D06800538D394C2ULL);
	fill_random(buf, (3u << 20) + 7);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		check_streaming(buf, sizes[i]);
	CHECK(kv_xxh3(buf, 4096) != kv_xxh3(buf + 1, 4096));

	snprintf(path, sizeof(path), "%s/blk", dir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, buf, (3u << 20) + 7) == (3 << 20) + 7);
	CHECK(kv_integrity_get(fd, &sum) == -ENODATA);
	CHECK(kv_integrity_verify_fd(fd) == -ENODATA);

	ret = kv_integrity_set(fd, kv_xxh3(buf, (3u << 20) + 7));
	if (ret == -ENOTSUP || ret == -EOPNOTSUPP) {
		printf("no user xattrs on /tmp\n");
		unlink(path);
		rmdir(dir);
		return failures ? 1 : 77;
	}
	CHECK(ret == 0);
	/* 16 lowercase hex digits, nothing else. */
	n = fgetxattr(fd, KV_XATTR_XXH3, text, sizeof(text));
	CHECK(n == 16);
	for (i = 0; n == 16 && i < 16; i++)
		CHECK((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f'));
	CHECK(kv_integrity_get(fd, &sum) == 0 && sum == kv_xxh3(buf, (3u << 20) + 7));
	CHECK(kv_integrity_verify_fd(fd) == 0);

	/* A flipped byte deep in the file, past the first read chunk. */
	buf[(2u << 20) + 5] ^= 0x40;
	CHECK(pwrite(fd, buf + (2u << 20) + 5, 1, (2u << 20) + 5) == 1);
	CHECK(kv_integrity_verify_fd(fd) == -KV_ECHECKSUM);
	CHECK(kv_integrity_set(fd, kv_xxh3(buf, (3u << 20) + 7)) == 0);
	CHECK(kv_integrity_verify_fd(fd) == 0);

	/* Values that are not 16 hex digits vouch for nothing. */
	CHECK(fsetxattr(fd, KV_XATTR_XXH3, "0123456789abcdeg", 16, 0) == 0);
	CHECK(kv_integrity_get(fd, &sum) == -EBADMSG);
	CHECK(kv_integrity_verify_fd(fd) == -KV_ECHECKSUM);
	CHECK(fsetxattr(fd, KV_XATTR_XXH3, "0123", 4, 0) == 0);
	CHECK(kv_integrity_get(fd, &sum) == -EBADMSG);
	CHECK(fsetxattr(fd, KV_XATTR_XXH3, "0123456789abcdef0123456789abcdef", 32, 0) == 0);
	CHECK(kv_integrity_get(fd, &sum) == -EBADMSG);
	/* Upper case is accepted on read: it is the same number. */
	CHECK(fsetxattr(fd, KV_XATTR_XXH3, "00000000DEADBEEF", 16, 0) == 0);
	CHECK(kv_integrity_get(fd, &sum) == 0 && sum == 0xdeadbeefULL);

	/* vLLM's CRC32C: the published check value, then the xattr vLLM
	 * writes (four big-endian bytes) alone and beside ours. */
	CHECK(kv_crc32c("123456789", 9) == 0xE3069283u);
	CHECK(kv_crc32c("", 0) == 0);
	CHECK(fremovexattr(fd, KV_XATTR_XXH3) == 0);
	{
		uint32_t c = kv_crc32c(buf, (3u << 20) + 7);
		unsigned char be[4] = { c >> 24, c >> 16, c >> 8, c };

		CHECK(fsetxattr(fd, KV_XATTR_VLLM_CRC32C, be, 4, 0) == 0);
		CHECK(kv_integrity_verify_fd(fd) == 0);
		CHECK(kv_integrity_check(fd, buf, (3u << 20) + 7) == 0);
		CHECK(kv_integrity_check(fd, buf, (3u << 20) + 6) == -KV_ECHECKSUM);
		CHECK(kv_integrity_set(fd, kv_xxh3(buf, (3u << 20) + 7)) == 0);
		CHECK(kv_integrity_verify_fd(fd) == 0);
		/* Either sum wrong is a mismatch. */
		be[3] ^= 1;
		CHECK(fsetxattr(fd, KV_XATTR_VLLM_CRC32C, be, 4, 0) == 0);
		CHECK(kv_integrity_verify_fd(fd) == -KV_ECHECKSUM);
		CHECK(kv_integrity_check(fd, buf, (3u << 20) + 7) == -KV_ECHECKSUM);
		CHECK(fsetxattr(fd, KV_XATTR_VLLM_CRC32C, be, 3, 0) == 0);
		CHECK(kv_integrity_verify_fd(fd) == -KV_ECHECKSUM);
	}

	close(fd);
	CHECK(kv_integrity_get(fd, &sum) == -EBADF);
	unlink(path);
	rmdir(dir);
	free(buf);
	return failures ? 1 : 0;
}
