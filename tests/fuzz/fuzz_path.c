/*
 * libFuzzer harness for the layout parsers: whatever name or relative
 * path a hostile tree holds, kv_layout_block_parse, _model_dir_parse and
 * _rank_dir_parse either refuse it with -KV_EBADPATH, leaving the ref
 * alone, or accept exactly the names the composers write back byte for
 * byte, so an accepted path never holds ".", "..", '/' at either end or
 * an empty component.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>

#define ASSERT(cond) do { if (!(cond)) abort(); } while (0)

static void untouched(const struct kv_block_ref *ref)
{
	const unsigned char *p = (const unsigned char *)ref;

	for (size_t i = 0; i < sizeof(*ref); i++)
		ASSERT(p[i] == 0xa5);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s, buf[4096], h[KV_HASH_MAX_LEN + 1];
	struct kv_block_ref ref, back;
	int ret;

	if (size > 2048)
		return 0;
	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	/* The parsers see C strings: stop where they would. */
	size = strlen(s);

	memset(&ref, 0xa5, sizeof(ref));
	ret = kv_layout_block_parse(s, &ref);
	if (ret == 0) {
		ASSERT(kv_layout_block_path_ref(&ref, buf, sizeof(buf)) == 0);
		ASSERT(!strcmp(buf, s));
		ASSERT(s[0] != '/' && s[size - 1] != '/');
		ASSERT(!strstr(s, "//") && !strstr(s, "/./") &&
		       !strstr(s, "/../") && strncmp(s, "./", 2) &&
		       strncmp(s, "../", 3));
		ASSERT(kv_layout_hash_normalize(ref.hash, h, sizeof(h)) == 0 &&
		       !strcmp(h, ref.hash));
		ASSERT(!kv_layout_is_temp(s));
		if (ref.layout == KV_LAYOUT_LLMD_V0) {
			struct kv_layout_v0 v0;

			ASSERT(kv_layout_v0_parse(ref.model_dir, &v0) == 0);
			ASSERT(v0.model_name[0] && v0.model_name[0] != '/');
		}
	} else {
		ASSERT(ret == -KV_EBADPATH);
		untouched(&ref);
	}

	memset(&ref, 0xa5, sizeof(ref));
	ret = kv_layout_model_dir_parse(s, &ref);
	if (ret == 0) {
		ASSERT(!strcmp(ref.model_dir, s) && !strchr(s, '/'));
		ASSERT(!strcmp(s + size - KV_FINGERPRINT_LEN, ref.fingerprint));
	} else {
		ASSERT(ret == -KV_EBADPATH);
		untouched(&ref);
	}

	memset(&ref, 0xa5, sizeof(ref));
	ret = kv_layout_rank_dir_parse(s, &ref);
	if (ret == 0) {
		snprintf(buf, sizeof(buf), "%s_r%u", ref.model_dir, ref.rank);
		ASSERT(!strcmp(buf, s));
		ASSERT(kv_layout_model_dir_parse(ref.model_dir, &back) == 0);
		ASSERT(!strcmp(back.fingerprint, ref.fingerprint));
	} else {
		ASSERT(ret == -KV_EBADPATH);
		untouched(&ref);
	}

	ret = kv_layout_hash_normalize(s, h, sizeof(h));
	if (ret == 0) {
		ASSERT(strlen(h) == size && strspn(h, "0123456789abcdef") == size);
		ASSERT(kv_layout_block_path("m_0123456789ab", 0, 0, s, buf,
					    sizeof(buf)) == 0);
		ASSERT(kv_layout_block_parse(buf, &back) == 0 &&
		       !strcmp(back.hash, h));
	} else {
		ASSERT(ret == -KV_EBADHASH);
	}

	ret = kv_layout_safe_model(s, buf, sizeof(buf));
	if (ret == 0) {
		char dir[KV_NAME_MAX + 1];

		ASSERT(!strchr(buf, '/') && strlen(buf) == size);
		ASSERT(kv_layout_model_dir(s, "0123456789ab", dir,
					   sizeof(dir)) == 0);
		ASSERT(kv_layout_model_dir_parse(dir, &back) == 0);
	} else {
		ASSERT(ret == -KV_EBADPATH || ret == -ENAMETOOLONG);
	}
	free(s);
	return 0;
}
