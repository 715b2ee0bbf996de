#ifndef KV_LAYOUT_H
#define KV_LAYOUT_H

/*
 * The on-disk layout shared with vLLM's file tier and llm-d's fs backend:
 *
 *   <root>/<safe_model>_<d12>/config.json
 *   <root>/<safe_model>_<d12>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin
 *
 * and, read but never written, the one llm-d used before llm-d-kv-cache
 * #585 ("llmd-v0"), whose model name keeps its '/' as directories:
 *
 *   <root>/<model>/block_size_<B>_blocks_per_file_<N>/
 *       tp_<T>_pp_size_<P>_pcp_size_<C>/rank_<R>/<dtype>/<hhh>/<hh>[_g<G>]/<hash>.bin
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
#define KV_LAYOUT_V0_MODEL_DEPTH 4	/* llmd-v0: dirs a model name may span */
#define KV_DTYPE_DIR_MAX	63	/* llmd-v0: the <dtype> dir name */
#define KV_LAYOUT_TOP_BUCKETS	4096	/* <hhh> values, in every layout */

enum kv_layout_kind {
	KV_LAYOUT_V1,		/* <safe_model>_<d12>_r<rank>/... (current) */
	KV_LAYOUT_LLMD_V0,	/* llm-d before #585 */
};

/* A block's place in the layout, as composed or parsed. */
struct kv_block_ref {
	/* v1: "<safe_model>_<d12>"; llmd-v0: the dirs above rank_<R>,
	 * "<model>/block_size_<B>_blocks_per_file_<N>/tp_<T>_pp_size_<P>_pcp_size_<C>" */
	char model_dir[KV_NAME_MAX + 1];
	char fingerprint[KV_FINGERPRINT_LEN + 1];	/* v1 only */
	unsigned rank;
	unsigned group;
	char hash[KV_HASH_MAX_LEN + 1];		/* lowercase hex */
	enum kv_layout_kind layout;
	char dtype[KV_DTYPE_DIR_MAX + 1];	/* llmd-v0: the <dtype> dir */
	int group_dir;				/* llmd-v0: bucket named <hh>_g<G> */
};

/* What an llmd-v0 model_dir says. */
struct kv_layout_v0 {
	char model_name[KV_NAME_MAX + 1];	/* with its '/' */
	unsigned block_size, blocks_per_file, tp, pp, pcp;
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
 * name (its '/' read as '_') with any fingerprint, or the model of an
 * llmd-v0 model_dir; NULL selects all. */
int kv_layout_model_matches(const char *filter, const char *model_dir);

/* Check a rank dir name ("<model_dir>_r<rank>"), filling model_dir,
 * fingerprint and rank. */
int kv_layout_rank_dir_parse(const char *name, struct kv_block_ref *ref);

/* 0 if name is a first-level bucket dir ("<hhh>", lowercase hex), else
 * -KV_EBADPATH. */
int kv_layout_hash_bucket_parse(const char *name);

/* Which of count shards (1 to KV_LAYOUT_TOP_BUCKETS) owns the
 * first-level bucket dir name ("<hhh>", a block's hash's first three
 * digits): floor(value * count / 4096).  Shards own contiguous ranges
 * that differ by at most one bucket, and every block has one owner, in
 * every layout.  -KV_EBADPATH for another name, -EINVAL for a bad count. */
int kv_layout_bucket_shard(const char *name, unsigned count);

/* 0 if name is a second-level bucket dir of that layout ("<hh>_g<group>",
 * the group in canonical decimal; llmd-v0 also "<hh>", group 0), filling
 * *group when not NULL; else -KV_EBADPATH. */
int kv_layout_group_bucket_parse(const char *name, enum kv_layout_kind layout,
				 unsigned *group);

/* "v1" or "llmd-v0". */
const char *kv_layout_name(enum kv_layout_kind layout);

/* 0 if name is llmd-v0's "block_size_<B>_blocks_per_file_<N>" dir, the
 * mark of such a tree below a model name; else -KV_EBADPATH. */
int kv_layout_v0_params_parse(const char *name);

/* 0 if name is llmd-v0's "rank_<R>" dir, filling *rank when not NULL;
 * else -KV_EBADPATH. */
int kv_layout_v0_rank_parse(const char *name, unsigned *rank);

/* Split an llmd-v0 model_dir into its parts; -KV_EBADPATH if it is not
 * one. */
int kv_layout_v0_parse(const char *model_dir, struct kv_layout_v0 *out);

/* "<model_dir>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin" into buf. */
int kv_layout_block_path(const char *model_dir, unsigned rank, unsigned group,
			 const char *hash, char *buf, size_t len);

/* Same, from a filled ref, in its layout. */
int kv_layout_block_path_ref(const struct kv_block_ref *ref, char *buf, size_t len);

/* Parse a relative block path into ref, in either layout.  Rejects
 * absolute paths, "..", "." and empty components, and any name that does
 * not match (including a hash whose bucket dirs disagree with it):
 * -KV_EBADPATH. */
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
