#ifndef KV_LAYOUT_H
#define KV_LAYOUT_H

/*
 * The on-disk layout shared with vLLM's file tier and llm-d's fs backend:
 *
 *   <root>/<safe_model>_<d12>/config.json
 *   <root>/<safe_model>_<d12>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin
 *
 * All paths here are relative to the root.  See kv(7).
 */

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_FINGERPRINT_LEN	12	/* hex digits of SHA-256 kept in names */
#define KV_HASH_MIN_LEN		5	/* hhh + hh; real hashes are longer */
#define KV_HASH_MAX_LEN		128
#define KV_NAME_MAX		255
#define KV_CONFIG_NAME		"config.json"
#define KV_BLOCK_SUFFIX		".bin"
#define KV_TEMP_SUFFIX		".tmp"

/* A block's place in the layout, as composed or parsed. */
struct kv_block_ref {
	char model_dir[KV_NAME_MAX + 1];	/* "<safe_model>_<d12>" */
	char fingerprint[KV_FINGERPRINT_LEN + 1];
	unsigned rank;
	unsigned group;
	char hash[KV_HASH_MAX_LEN + 1];		/* lowercase hex */
};

/* Copy hash to out in lowercase; -KV_EBADHASH unless it is 5..128 hex digits. */
int kv_layout_hash_normalize(const char *hash, char *out, size_t len);

/* The model name with every '/' replaced by '_'; -KV_EBADPATH if empty or unsafe. */
int kv_layout_safe_model(const char *model_name, char *buf, size_t len);

/* "<safe_model>_<fingerprint>" into buf. */
int kv_layout_model_dir(const char *model_name, const char *fingerprint,
			char *buf, size_t len);

/* Check a model dir name ("<safe_model>_<d12>"), filling ref->model_dir and
 * ref->fingerprint; -KV_EBADPATH with no change to ref otherwise. */
int kv_layout_model_dir_parse(const char *name, struct kv_block_ref *ref);

/* 1 if filter selects model_dir: the model dir name itself, or a model
 * name (its '/' read as '_') with any fingerprint; NULL selects all. */
int kv_layout_model_matches(const char *filter, const char *model_dir);

/* Check a rank dir name ("<model_dir>_r<rank>"), filling model_dir,
 * fingerprint and rank. */
int kv_layout_rank_dir_parse(const char *name, struct kv_block_ref *ref);

/* 0 if name is a first-level bucket dir ("<hhh>", lowercase hex), else
 * -KV_EBADPATH. */
int kv_layout_hash_bucket_parse(const char *name);

/* 0 if name is a second-level bucket dir ("<hh>_g<group>", the group in
 * canonical decimal), filling *group when not NULL; else -KV_EBADPATH. */
int kv_layout_group_bucket_parse(const char *name, unsigned *group);

/* "<model_dir>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin" into buf. */
int kv_layout_block_path(const char *model_dir, unsigned rank, unsigned group,
			 const char *hash, char *buf, size_t len);

/* Same, from a filled ref. */
int kv_layout_block_path_ref(const struct kv_block_ref *ref, char *buf, size_t len);

/* Parse a relative block path into ref.  Rejects absolute paths, "..",
 * "." and empty components, and any name that does not match the layout
 * (including a hash whose bucket dirs disagree with it): -KV_EBADPATH. */
int kv_layout_block_parse(const char *relpath, struct kv_block_ref *ref);

/* 1 if name is a writer's temp file ("<target>_<random>.tmp", or any
 * "*.tmp" in a bucket dir), else 0. */
int kv_layout_is_temp(const char *name);

/* A fresh temp name beside target_name: "<target_name>_<random>.tmp". */
int kv_layout_temp_name(const char *target_name, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
