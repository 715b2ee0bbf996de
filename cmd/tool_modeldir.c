/* The model dir a program works in, from --model-dir or --config. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "tool.h"

/* Whether the rank dir of model dir name for rank is a name at all:
 * a model name of 240-odd bytes fits a model dir but not "<dir>_r<rank>". */
static int rank_dir_fits(const char *name, unsigned rank)
{
	char probe[PATH_MAX];

	return kv_layout_block_path(name, rank, 0, "00000", probe, sizeof(probe)) != -ENAMETOOLONG;
}

/* A --config file, or say why not and exit 3. */
static struct kv_config *load_config(const char *file)
{
	struct kv_config *cfg;
	int ret = kv_config_load(AT_FDCWD, file, &cfg);

	if (ret == -KV_EBADCONFIG) {
		tool_err("invalid config '%s': %s", file, kv_error_detail());
		exit(EXIT_RUNTIME);
	}
	if (ret < 0) {
		tool_err("cannot open '%s': %s", file, kv_strerror(ret));
		exit(EXIT_RUNTIME);
	}
	return cfg;
}

void tool_model_dir(const char *model_dir, const char *config, int rootfd,
		    unsigned rank, char *out, size_t len)
{
	struct kv_block_ref ref;
	struct kv_config *cfg;
	int ret;

	if (model_dir) {
		if (kv_layout_model_dir_parse(model_dir, &ref) < 0 || strlen(model_dir) >= len)
			tool_usage_fail("invalid --model-dir '%s' (want <model>_<12 hex digits>)",
					model_dir);
		if (!rank_dir_fits(model_dir, rank))
			tool_usage_fail("--model-dir '%s' is too long for its rank dir '_r%u' "
					"(%d bytes at most)", model_dir, rank, KV_NAME_MAX);
		strcpy(out, model_dir);
		return;
	}
	cfg = load_config(config);
	ret = kv_config_model_dir(cfg, out, len);
	if (ret == 0 && !rank_dir_fits(out, rank)) {
		tool_err("the model name in '%s' is too long: its rank dir '%s_r%u' would pass "
			 "the %d-byte name limit; nothing was created", config, out, rank,
			 KV_NAME_MAX);
		kv_config_free(cfg);
		exit(EXIT_RUNTIME);
	}
	if (ret == 0 && rootfd >= 0)
		ret = kv_config_ensure_model_dir(rootfd, cfg, out, len);
	kv_config_free(cfg);
	if (ret < 0) {
		tool_err("cannot create the model dir for '%s': %s", config, kv_strerror(ret));
		exit(EXIT_RUNTIME);
	}
}

void tool_config_add(struct kv_config **configs, unsigned *n, const char *file)
{
	if (*n == TOOL_CONFIGS_MAX)
		tool_usage_fail("--config: at most %d files", TOOL_CONFIGS_MAX);
	configs[(*n)++] = load_config(file);
}

void tool_events_name(struct kv_events *ev, struct kv_config *const *configs, unsigned n)
{
	char dir[KV_NAME_MAX + 1];

	for (unsigned i = 0; ev && i < n; i++)
		if (kv_config_model_dir(configs[i], dir, sizeof(dir)) == 0)
			kv_events_name_model_dir(ev, dir, configs[i]);
}
