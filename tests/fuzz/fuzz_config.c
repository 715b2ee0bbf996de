/*
 * libFuzzer harness for kv_config_parse and the canonical writer: any
 * bytes either parse into a config whose canonical JSON is pure ASCII,
 * parses back to the same canonical text and names a model dir that
 * kv_layout_model_dir_parse accepts, or are refused with -KV_EBADCONFIG
 * and a message.  Never a crash or a leak.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>

#define ASSERT(cond) do { if (!(cond)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char fp[KV_FINGERPRINT_LEN + 1], dir[KV_NAME_MAX + 1];
	struct kv_config *cfg = NULL, *again = NULL;
	struct kv_block_ref ref;
	char *canon = NULL, *canon2 = NULL;
	int ret;

	ret = kv_config_parse((const char *)data, size, &cfg);
	if (ret < 0) {
		ASSERT(ret == -KV_EBADCONFIG || ret == -ENOMEM);
		ASSERT(ret == -ENOMEM || kv_error_detail()[0] != '\0');
		return 0;
	}
	ASSERT(kv_error_detail()[0] == '\0');
	ASSERT(kv_config_string(cfg, "model_name") != NULL);
	ASSERT(kv_config_string(cfg, "dtype") != NULL);
	ASSERT(kv_config_canonical(cfg, &canon) == 0);
	for (const char *p = canon; *p; p++)
		ASSERT(*p >= 0x20 && *p < 0x7f);
	ASSERT(kv_config_parse(canon, strlen(canon), &again) == 0);
	ASSERT(kv_config_canonical(again, &canon2) == 0);
	ASSERT(!strcmp(canon, canon2));
	ASSERT(kv_config_fingerprint(cfg, fp) == 0);
	ret = kv_config_model_dir(cfg, dir, sizeof(dir));
	ASSERT(ret == 0 || ret == -ENAMETOOLONG);
	if (ret == 0) {
		ASSERT(kv_layout_model_dir_parse(dir, &ref) == 0);
		ASSERT(!strcmp(ref.fingerprint, fp));
		ASSERT(!strcmp(ref.model_dir, dir));
	}
	free(canon);
	free(canon2);
	kv_config_free(again);
	kv_config_free(cfg);
	return 0;
}
