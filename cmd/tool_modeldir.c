/* The model dir a program works in, from --model-dir or --config. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include "tool.h"

void tool_model_dir(const char *model_dir, const char *config, int rootfd,
		    char *out, size_t len)
{
	struct kv_block_ref ref;
	struct kv_config *cfg;
	int ret;

	if (model_dir) {
		if (kv_layout_model_dir_parse(model_dir, &ref) < 0 || strlen(model_dir) >= len)
			tool_usage_fail("invalid --model-dir '%s' (want <model>_<12 hex digits>)",
					model_dir);
		strcpy(out, model_dir);
		return;
	}
	ret = kv_config_load(AT_FDCWD, config, &cfg);
	if (ret == -KV_EBADCONFIG) {
		tool_err("invalid config '%s': %s", config, kv_error_detail());
		exit(EXIT_RUNTIME);
	}
	if (ret < 0) {
		tool_err("cannot open '%s': %s", config, kv_strerror(ret));
		exit(EXIT_RUNTIME);
	}
	if (rootfd >= 0)
		ret = kv_config_ensure_model_dir(rootfd, cfg, out, len);
	else
		ret = kv_config_model_dir(cfg, out, len);
	kv_config_free(cfg);
	if (ret < 0) {
		tool_err("cannot create the model dir for '%s': %s", config, kv_strerror(ret));
		exit(EXIT_RUNTIME);
	}
}
