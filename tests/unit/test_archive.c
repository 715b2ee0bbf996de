/* kv_archive_*: round trips through a memfd, byte planes, and hostile
 * archives built by patching a good one at the offsets kv(7) gives. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
		kv_error_detail()); failures++; } } while (0)

#define BLOCK_BYTES	(512 * 1024 + 3)	/* odd: a byte left after the planes */
#define HEADER_RECORD	(8 + 20)	/* the archive header's frame */
#define FIELD_SIZE	(8 + 20)	/* size_bytes within an entry's frame */

static const char config[] =
	"{\"model_name\": \"meta-llama/Llama-3.1-8B\", \"hash_block_size\": 16,\n"
	" \"gpu_blocks_per_file\": 16, \"tp_size\": 1, \"pp_size\": 1, \"pcp_size\": 1,\n"
	" \"dcp_size\": 1, \"dtype\": \"bfloat16\", \"inference_engine\": \"vllm\",\n"
	" \"kv_cache_groups\": [{\"block_size\": 16, \"layer_names\": [\"l0\"]}]}\n";

static uint64_t rng_state = 88172645463325252ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* bf16-like: small values, so sign/exponent bytes repeat, mantissas not. */
static void fill_bf16(unsigned char *p, size_t n)
{
	for (size_t i = 0; i + 1 < n; i += 2) {
		p[i] = (unsigned char)rng();
		p[i + 1] = (unsigned char)(0x3c + (rng() & 3) + (rng() & 0x80));
	}
	p[n - 1] = 0x5a;
}

static void check_planes(void)
{
	unsigned char src[37], mid[37], back[37];

	for (unsigned w = 1; w <= 8; w++) {
		for (size_t i = 0; i < sizeof(src); i++)
			src[i] = (unsigned char)rng();
		kv_archive_shuffle(mid, src, sizeof(src), w);
		kv_archive_unshuffle(back, mid, sizeof(src), w);
		CHECK(!memcmp(src, back, sizeof(src)));
	}
	src[0] = 1; src[1] = 2; src[2] = 3; src[3] = 4; src[4] = 5;
	kv_archive_shuffle(mid, src, 5, 2);
	CHECK(mid[0] == 1 && mid[1] == 3 && mid[2] == 2 && mid[3] == 4 && mid[4] == 5);
}

/* An archive of n blocks of model_dir into a memfd; the blocks in data. */
static int make_archive(const char *model_dir, unsigned char **data, int n,
			enum kv_archive_shuffle shuffle)
{
	struct kv_archive_write_opts o = { .level = 1, .shuffle = shuffle };
	struct kv_archive_writer *w;
	int fd = memfd_create("archive", 0);

	CHECK(kv_archive_writer_open(fd, &o, &w) == 0);
	for (int i = 0; i < n; i++) {
		struct kv_archive_entry e = { .config = config, .config_len = strlen(config) };

		CHECK(kv_layout_model_dir_parse(model_dir, &e.ref) == 0);
		e.ref.rank = (unsigned)i;
		e.ref.group = 1;
		snprintf(e.ref.hash, sizeof(e.ref.hash), "%016llx", (unsigned long long)rng());
		CHECK(kv_archive_write(w, &e, data[i], BLOCK_BYTES) == 0);
		CHECK(e.shuffle_bytes == (shuffle == KV_ARCHIVE_SHUFFLE_NEVER ? 1u : 2u));
		CHECK(e.stored_bytes < BLOCK_BYTES);
	}
	CHECK(kv_archive_writer_finish(w) == 0);
	kv_archive_writer_close(w);
	lseek(fd, 0, SEEK_SET);
	return fd;
}

/* Read fd back: entries whose data checked, and the last error. */
static int read_back(int fd, unsigned char **want, int n, int *last_err)
{
	struct kv_archive_reader *r;
	struct kv_archive_entry e;
	unsigned char *buf = malloc(BLOCK_BYTES);
	int got = 0, ret;

	*last_err = 0;
	ret = kv_archive_reader_open(fd, NULL, &r);
	if (ret < 0) {
		*last_err = ret;
		free(buf);
		return 0;
	}
	while ((ret = kv_archive_next(r, &e)) != 0) {
		if (ret < 0) {
			*last_err = ret;
			if (ret == -KV_ESHORT || ret == -EIO)
				break;
			continue;
		}
		CHECK(e.config_len == strlen(config) && !memcmp(e.config, config, e.config_len));
		CHECK(e.ref.rank < (unsigned)n && e.ref.group == 1);
		ret = kv_archive_data(r, buf, BLOCK_BYTES);
		if (ret < 0) {
			*last_err = ret;
			continue;
		}
		CHECK(!memcmp(buf, want[e.ref.rank], BLOCK_BYTES));
		got++;
	}
	kv_archive_reader_close(r);
	free(buf);
	return got;
}

static off_t fd_size(int fd)
{
	return lseek(fd, 0, SEEK_END);
}

static void patch(int fd, off_t off, const void *p, size_t n)
{
	CHECK(pwrite(fd, p, n, off) == (ssize_t)n);
	lseek(fd, 0, SEEK_SET);
}

/* Recompute the checksum of the record whose frame starts at off. */
static void reseal(int fd, off_t off)
{
	unsigned char head[8], *c;
	uint32_t len;
	uint64_t sum;

	CHECK(pread(fd, head, 8, off) == 8);
	len = head[4] | head[5] << 8 | head[6] << 16 | (uint32_t)head[7] << 24;
	c = malloc(len);
	CHECK(pread(fd, c, len, off + 8) == (ssize_t)len);
	sum = kv_xxh3(c, len - 8);
	for (int i = 0; i < 8; i++)
		c[len - 8 + i] = (unsigned char)(sum >> (8 * i));
	patch(fd, off + 8, c, len);
	free(c);
}

int main(void)
{
	struct kv_config *cfg;
	char model_dir[KV_NAME_MAX + 1];
	unsigned char *blocks[3], byte;
	int fd, err;
	off_t second;

	check_planes();
	CHECK(kv_config_parse(config, strlen(config), &cfg) == 0);
	CHECK(kv_config_model_dir(cfg, model_dir, sizeof(model_dir)) == 0);
	kv_config_free(cfg);
	for (int i = 0; i < 3; i++) {
		blocks[i] = malloc(BLOCK_BYTES);
		fill_bf16(blocks[i], BLOCK_BYTES);
	}

	/* Whole, both ways; bf16-like data goes shuffled in auto. */
	for (int s = 0; s <= 2; s += 2) {
		fd = make_archive(model_dir, blocks, 3, (enum kv_archive_shuffle)s);
		CHECK(read_back(fd, blocks, 3, &err) == 3 && err == 0);
		close(fd);
	}

	/* A block larger than the reader allows, checksum and all: refused
	 * by its size before anything is allocated; the rest still read. */
	fd = make_archive(model_dir, blocks, 3, KV_ARCHIVE_SHUFFLE_AUTO);
	{
		unsigned char ten_g[8] = { 0, 0, 0, 0x80, 2, 0, 0, 0 };

		patch(fd, HEADER_RECORD + FIELD_SIZE, ten_g, 8);
		reseal(fd, HEADER_RECORD);
	}
	CHECK(read_back(fd, blocks, 3, &err) == 2 && err == -EFBIG);
	close(fd);

	/* A flipped byte inside the second entry's data: that one refused. */
	fd = make_archive(model_dir, blocks, 3, KV_ARCHIVE_SHUFFLE_AUTO);
	{
		unsigned char head[8];
		struct kv_archive_reader *r;
		struct kv_archive_entry e;

		CHECK(kv_archive_reader_open(fd, NULL, &r) == 0);
		CHECK(kv_archive_next(r, &e) == 1);
		CHECK(kv_archive_next(r, &e) == 1);
		second = (off_t)e.offset;
		kv_archive_reader_close(r);
		CHECK(pread(fd, head, 8, second) == 8);
		second += 8 + (head[4] | head[5] << 8 | head[6] << 16) + 40;
		CHECK(pread(fd, &byte, 1, second) == 1);
		byte ^= 0xff;
		patch(fd, second, &byte, 1);
	}
	CHECK(read_back(fd, blocks, 3, &err) == 2 && err == -KV_ECHECKSUM);
	close(fd);

	/* Cut short: what came whole is read, then -KV_ESHORT. */
	fd = make_archive(model_dir, blocks, 3, KV_ARCHIVE_SHUFFLE_AUTO);
	CHECK(ftruncate(fd, fd_size(fd) - 100) == 0);
	lseek(fd, 0, SEEK_SET);
	CHECK(read_back(fd, blocks, 3, &err) == 2 && err == -KV_ESHORT);
	close(fd);

	/* Another version: refused at open, by its number. */
	fd = make_archive(model_dir, blocks, 1, KV_ARCHIVE_SHUFFLE_AUTO);
	byte = 2;
	patch(fd, 8 + 4, &byte, 1);
	CHECK(read_back(fd, blocks, 1, &err) == 0 && err == -EPROTONOSUPPORT);
	CHECK(strstr(kv_error_detail(), "version 2") != NULL);
	close(fd);

	/* Not an archive at all, and nothing. */
	fd = memfd_create("junk", 0);
	CHECK(read_back(fd, blocks, 1, &err) == 0 && err == -KV_ESHORT);
	patch(fd, 0, config, sizeof(config));
	CHECK(read_back(fd, blocks, 1, &err) == 0 && err == -KV_EPROTO);
	close(fd);

	for (int i = 0; i < 3; i++)
		free(blocks[i]);
	return failures ? 1 : 0;
}
