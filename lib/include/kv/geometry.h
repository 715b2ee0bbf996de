#ifndef KV_GEOMETRY_H
#define KV_GEOMETRY_H

/*
 * KV-cache geometry of a model, from its Hugging Face config.json, and
 * the sizes it implies for one tensor-parallel rank:
 *
 *   bytes/token = 2 (K and V) * layers * kv_heads/tp * head_dim * dtype
 *   MLA (DeepSeek): layers * (kv_lora_rank + qk_rope_head_dim) * dtype,
 *                   one latent per layer, the same on every rank
 *   bytes/GPU block = bytes/token * gpu_block_tokens
 *   bytes/file      = bytes/token * tokens_per_file
 *
 * Sliding-window layers are counted (sliding_layers) but stored in full,
 * as a file tier that keeps every layer of a block does.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_DTYPE_NAME_MAX	24
#define KV_MODEL_TYPE_MAX	64

struct kv_geometry {
	/* From the model config (kv_geometry_parse_hf). */
	char model_type[KV_MODEL_TYPE_MAX];	/* "llama", ""; informational */
	unsigned layers;		/* num_hidden_layers */
	unsigned attention_heads;	/* num_attention_heads; 0 if absent */
	unsigned kv_heads;		/* num_key_value_heads, else attention_heads */
	unsigned head_dim;		/* head_dim, else hidden_size / attention_heads */
	int mla;			/* 1: multi-head latent attention */
	unsigned kv_lora_rank;		/* MLA latent width */
	unsigned qk_rope_head_dim;	/* MLA decoupled rope key width */
	unsigned sliding_window;	/* window in tokens; 0: none */
	unsigned sliding_layers;	/* layers that use the window */
	char dtype[KV_DTYPE_NAME_MAX];	/* canonical name; "" if the config has none */
	unsigned dtype_bytes;
	/* Deployment, set by the caller before kv_geometry_derive. */
	unsigned tp;			/* tensor-parallel ranks; 0: 1 */
	unsigned gpu_block_tokens;	/* 0: 16 */
	unsigned tokens_per_file;	/* 0: 256 */
	/* Derived. */
	unsigned kv_heads_per_rank;	/* 0 for MLA */
	uint64_t bytes_per_token;	/* per rank */
	uint64_t bytes_per_gpu_block;
	uint64_t bytes_per_file;
};

/* Parse a Hugging Face config.json (a nested "text_config" is used when
 * the top level has no num_hidden_layers).  Fills the model fields and
 * zeroes the rest.  -KV_EBADCONFIG on malformed JSON or a missing or
 * mistyped field, with the detail in kv_error_detail(). */
int kv_geometry_parse_hf(const char *text, size_t len, struct kv_geometry *g);

/* Read and parse a file (dirfd-relative, AT_FDCWD allowed); -errno when
 * it cannot be read. */
int kv_geometry_load_hf(int dirfd, const char *path, struct kv_geometry *g);

/* Canonical name and size of a dtype spelling ("bfloat16", "bf16",
 * "torch.float16", "half", "fp8", "float8_e4m3fn", ...); -EINVAL if
 * unknown.  canon may be NULL. */
int kv_dtype_parse(const char *name, char canon[KV_DTYPE_NAME_MAX],
		   unsigned *bytes);

/* Fill the derived fields from the model and deployment fields.  -EINVAL
 * (detail in kv_error_detail()) when tp does not divide the KV heads
 * (nor they tp), tokens_per_file is not a multiple of gpu_block_tokens,
 * or no dtype is known; -ERANGE on overflow. */
int kv_geometry_derive(struct kv_geometry *g);


#ifdef __cplusplus
}
#endif

#endif
