/*
 * libFuzzer harness for the archive reader (kv_archive_*): any bytes,
 * read through a pipe-like fd as kvput --archive reads them, either give
 * entries whose data checks against their XXH3-64 and name a block path
 * that parses back, or are refused with a code the programs know; never
 * a crash, a leak, an allocation past the block limit or a loop.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <kv/kv.h>

#define ASSERT(cond) do { if (!(cond)) abort(); } while (0)
#define MAX_BLOCK_BYTES	(1u << 20)	/* the limit the reader is given */

static int refused(int ret)
{
	return ret == -KV_EPROTO || ret == -EFBIG || ret == -KV_ECHECKSUM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kv_archive_read_opts o = { .max_block_bytes = MAX_BLOCK_BYTES };
	struct kv_archive_reader *r;
	struct kv_archive_entry e;
	struct kv_block_ref back;
	char path[PATH_MAX];
	static unsigned char *buf;
	int fd = memfd_create("fuzz", MFD_CLOEXEC), ret, calls = 0;

	ASSERT(fd >= 0);
	ASSERT(write(fd, data, size) == (ssize_t)size);
	lseek(fd, 0, SEEK_SET);
	if (!buf)
		buf = malloc(MAX_BLOCK_BYTES);
	ret = kv_archive_reader_open(fd, &o, &r);
	if (ret < 0) {
		ASSERT(ret == -KV_EPROTO || ret == -KV_ESHORT || ret == -EPROTONOSUPPORT);
		ASSERT(kv_error_detail()[0] != '\0');
		close(fd);
		return 0;
	}
	while ((ret = kv_archive_next(r, &e)) != 0) {
		/* Each call consumes input: no more calls than bytes. */
		ASSERT(++calls <= (int)size + 2);
		if (ret < 0) {
			ASSERT(kv_error_detail()[0] != '\0');
			if (!refused(ret)) {
				ASSERT(ret == -KV_ESHORT);
				break;
			}
			continue;
		}
		ASSERT(e.size_bytes <= MAX_BLOCK_BYTES);
		ASSERT(e.shuffle_bytes >= 1);
		ASSERT(kv_layout_block_path_ref(&e.ref, path, sizeof(path)) == 0);
		ASSERT(kv_layout_block_parse(path, &back) == 0);
		ASSERT(!strcmp(back.hash, e.ref.hash) && !strcmp(back.model_dir, e.ref.model_dir));
		ASSERT(e.ref.layout == KV_LAYOUT_LLMD_V0 ? !e.config : e.config && e.config_len);
		/* Read the data of every other entry, skip the rest. */
		if (calls % 2) {
			ret = kv_archive_data(r, buf, MAX_BLOCK_BYTES);
			if (ret == -KV_ESHORT)
				break;
			ASSERT(ret == 0 || ret == -KV_ECHECKSUM);
			if (ret == 0)
				ASSERT(kv_xxh3(buf, (size_t)e.size_bytes) == e.xxh3);
		}
	}
	kv_archive_reader_close(r);
	close(fd);
	return 0;
}
