#ifndef KV_CONFIG_H
#define KV_CONFIG_H

/*
 * A model dir's identity: the config object that vLLM / llm-d hash, whole,
 * into the directory name, and the config.json that records it.  Two
 * schemas are written upstream:
 *
 *   llm-d fs backend: model_name, hash_block_size, gpu_blocks_per_file,
 *     tp_size, pp_size, pcp_size, dcp_size, dtype, inference_engine,
 *     kv_cache_groups (a list of {block_size, layer_names});
 *   vLLM's native tier: model_name, tokens_per_hash, blocks_per_file, the
 *     same parallel sizes, dtype, inference_engine, kv_cache_groups (a
 *     list of {tokens_per_block, layer_names}), and in newer versions
 *     parallel_agnostic, replicated_layout, canonical_format,
 *     storage_format.
 *
 * Any other key is kept: it is part of the fingerprint.
 */

#include <stddef.h>
#include <stdint.h>
#include <kv/layout.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kv_config;

enum kv_config_schema {
	KV_CONFIG_LLMD,		/* llm-d's fs backend */
	KV_CONFIG_VLLM,		/* vLLM's native file-system tier */
};

/* Parse config JSON text in either schema: its fields present with their
 * types, sizes in range; other keys are kept.  -KV_EBADCONFIG on malformed JSON or a missing/mistyped
 * field, with the detail in kv_error_detail(). */
int kv_config_parse(const char *text, size_t len, struct kv_config **out);

/* Read and parse a file (dirfd-relative, AT_FDCWD allowed). */
int kv_config_load(int dirfd, const char *path, struct kv_config **out);

/* The config.json bytes of model_dir under the root, as they are (not
 * parsed), opened beneath the root without following a symlink; *text
 * is malloc'd.  -ENOENT when there is none, -KV_EBADCONFIG past 1 MiB
 * or for what is not a regular file. */
int kv_config_read(int rootfd, const char *model_dir, char **text, size_t *len);

void kv_config_free(struct kv_config *cfg);

/* The canonical JSON of the whole object, byte-identical to Python's
 * json.dumps(obj, sort_keys=True, separators=(",", ":")); *out is
 * malloc'd. */
int kv_config_canonical(const struct kv_config *cfg, char **out);

/* The first 12 hex digits of SHA-256 over the canonical JSON. */
int kv_config_fingerprint(const struct kv_config *cfg,
			  char out[KV_FINGERPRINT_LEN + 1]);

/* "<safe_model>_<fingerprint>" for this config. */
int kv_config_model_dir(const struct kv_config *cfg, char *buf, size_t len);

/* Which upstream schema the config follows, and its name ("llm-d",
 * "vllm"). */
enum kv_config_schema kv_config_schema(const struct kv_config *cfg);
const char *kv_config_schema_name(const struct kv_config *cfg);

/* Tokens per hashed block and GPU blocks per file, whichever schema's
 * keys hold them. */
int kv_config_blocks(const struct kv_config *cfg, uint64_t *tokens_per_block,
		     uint64_t *blocks_per_file);

/* Field access; NULL / -ENOENT when absent or of another type. */
const char *kv_config_string(const struct kv_config *cfg, const char *key);
int kv_config_int(const struct kv_config *cfg, const char *key, int64_t *out);

/* Write config.json text as Python's json.dump(indent=2, sort_keys=True)
 * does, atomically at dirfd/path (kv_file_replace: temp, fsync, rename);
 * a path there that is not a regular file is refused, never replaced. */
int kv_config_write(const struct kv_config *cfg, int dirfd, const char *path);

/* Create <root>/<model_dir>/ and its config.json if missing (racing
 * writers agree: same content); model_dir gets the dir name.  -EEXIST is
 * never returned for an identical existing config; a different one is
 * -KV_EFINGERPRINT, a malformed one -KV_EBADCONFIG, both left alone. */
int kv_config_ensure_model_dir(int rootfd, const struct kv_config *cfg,
			       char *model_dir, size_t len);

#ifdef __cplusplus
}
#endif

#endif
