/* KV-cache geometry from a Hugging Face model config; see kv/geometry.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <jansson.h>
#include <kv/errors.h>
#include <kv/geometry.h>
#include "error.h"


static const struct {
	const char *name;
	const char *canon;
	unsigned bytes;
} dtypes[] = {
	{ "bfloat16", "bfloat16", 2 }, { "bf16", "bfloat16", 2 },
	{ "float16", "float16", 2 }, { "fp16", "float16", 2 },
	{ "half", "float16", 2 }, { "f16", "float16", 2 },
	{ "float32", "float32", 4 }, { "fp32", "float32", 4 },
	{ "float", "float32", 4 }, { "f32", "float32", 4 },
	{ "fp8", "float8", 1 }, { "float8", "float8", 1 },
	{ "fp8_e4m3", "float8", 1 }, { "fp8_e5m2", "float8", 1 },
	{ "float8_e4m3fn", "float8", 1 }, { "float8_e5m2", "float8", 1 },
	{ "float8_e4m3fnuz", "float8", 1 }, { "float8_e5m2fnuz", "float8", 1 },
};

int kv_dtype_parse(const char *name, char canon[KV_DTYPE_NAME_MAX],
		   unsigned *bytes)
{
	size_t i;

	if (!strncmp(name, "torch.", 6))
		name += 6;
	for (i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
		if (strcasecmp(name, dtypes[i].name))
			continue;
		if (canon)
			snprintf(canon, KV_DTYPE_NAME_MAX, "%s", dtypes[i].canon);
		*bytes = dtypes[i].bytes;
		return 0;
	}
	return -EINVAL;
}

/* An optional positive integer field: 0 absent or null, 1 found,
 * -KV_EBADCONFIG present but not a positive integer. */
static int get_uint(json_t *obj, const char *key, unsigned *out)
{
	json_t *v = json_object_get(obj, key);
	json_int_t n;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return kvi_fail(-KV_EBADCONFIG, "field '%s' is not an integer", key);
	n = json_integer_value(v);
	if (n <= 0 || n > (json_int_t)UINT32_MAX)
		return kvi_fail(-KV_EBADCONFIG, "field '%s' out of range: %lld", key,
			    (long long)n);
	*out = (unsigned)n;
	return 1;
}

static int need_uint(json_t *obj, const char *key, unsigned *out)
{
	int r = get_uint(obj, key, out);

	if (r == 0)
		return kvi_fail(-KV_EBADCONFIG, "missing field '%s'", key);
	return r < 0 ? r : 0;
}

static int parse_sliding(json_t *cfg, struct kv_geometry *g)
{
	json_t *types = json_object_get(cfg, "layer_types");
	json_t *use = json_object_get(cfg, "use_sliding_window");
	unsigned pattern = 0, full_layers = 0;
	size_t i;
	int r;

	if ((r = get_uint(cfg, "sliding_window", &g->sliding_window)) < 0)
		return r;
	if (json_is_array(types)) {
		/* Newer configs name each layer's attention outright. */
		for (i = 0; i < json_array_size(types); i++) {
			const char *t = json_string_value(json_array_get(types, i));

			if (t && !strcmp(t, "sliding_attention"))
				g->sliding_layers++;
		}
	} else if (!g->sliding_window || (use && json_is_false(use))) {
		g->sliding_layers = 0;
	} else if ((r = get_uint(cfg, "sliding_window_pattern", &pattern)) != 0) {
		if (r < 0)
			return r;
		/* Gemma 3: every pattern-th layer attends globally. */
		g->sliding_layers = g->layers - g->layers / pattern;
	} else if (use && (r = get_uint(cfg, "max_window_layers", &full_layers)) != 0) {
		if (r < 0)
			return r;
		/* Qwen2: the bottom max_window_layers layers are full. */
		g->sliding_layers = full_layers < g->layers ? g->layers - full_layers : 0;
	} else {
		g->sliding_layers = g->layers;
	}
	if (!g->sliding_layers)
		g->sliding_window = 0;
	return 0;
}

static int parse_obj(json_t *root, struct kv_geometry *g)
{
	json_t *cfg = root, *v;
	unsigned hidden = 0;
	const char *s;
	int r;

	if (!json_is_object(root))
		return kvi_fail(-KV_EBADCONFIG, "not a JSON object");
	if (!json_object_get(root, "num_hidden_layers") &&
	    json_is_object(json_object_get(root, "text_config")))
		cfg = json_object_get(root, "text_config");
	memset(g, 0, sizeof(*g));
	s = json_string_value(json_object_get(cfg, "model_type"));
	if (!s)
		s = json_string_value(json_object_get(root, "model_type"));
	if (s)
		snprintf(g->model_type, sizeof(g->model_type), "%s", s);
	if ((r = need_uint(cfg, "num_hidden_layers", &g->layers)) < 0)
		return r;
	if ((r = get_uint(cfg, "num_attention_heads", &g->attention_heads)) < 0)
		return r;
	if ((r = get_uint(cfg, "kv_lora_rank", &g->kv_lora_rank)) < 0)
		return r;
	if (g->kv_lora_rank) {
		g->mla = 1;
		if ((r = need_uint(cfg, "qk_rope_head_dim", &g->qk_rope_head_dim)) < 0)
			return r;
	} else {
		if ((r = get_uint(cfg, "num_key_value_heads", &g->kv_heads)) < 0)
			return r;
		if (!g->kv_heads)
			g->kv_heads = g->attention_heads;
		if (!g->kv_heads)
			return kvi_fail(-KV_EBADCONFIG,
				    "missing field 'num_key_value_heads' (and 'num_attention_heads')");
		if ((r = get_uint(cfg, "head_dim", &g->head_dim)) < 0)
			return r;
		if (!g->head_dim) {
			if ((r = get_uint(cfg, "hidden_size", &hidden)) < 0)
				return r;
			if (!hidden || !g->attention_heads)
				return kvi_fail(-KV_EBADCONFIG,
					    "missing field 'head_dim' (and 'hidden_size' with 'num_attention_heads')");
			if (hidden % g->attention_heads)
				return kvi_fail(-KV_EBADCONFIG,
					    "hidden_size %u is not a multiple of num_attention_heads %u",
					    hidden, g->attention_heads);
			g->head_dim = hidden / g->attention_heads;
		}
	}
	if ((r = parse_sliding(cfg, g)) < 0)
		return r;
	v = json_object_get(cfg, "torch_dtype");
	if (!v || json_is_null(v))
		v = json_object_get(cfg, "dtype");
	if ((!v || json_is_null(v)) && cfg != root) {
		v = json_object_get(root, "torch_dtype");
		if (!v || json_is_null(v))
			v = json_object_get(root, "dtype");
	}
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return kvi_fail(-KV_EBADCONFIG, "field 'torch_dtype' is not a string");
		if (kv_dtype_parse(json_string_value(v), g->dtype, &g->dtype_bytes) < 0)
			return kvi_fail(-KV_EBADCONFIG, "unknown torch_dtype '%s'",
				    json_string_value(v));
	}
	return 0;
}

int kv_geometry_parse_hf(const char *text, size_t len, struct kv_geometry *g)
{
	json_error_t jerr;
	json_t *root;
	int r;

	kvi_error_clear();
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return kvi_fail(-KV_EBADCONFIG, "line %d: %s", jerr.line, jerr.text);
	r = parse_obj(root, g);
	json_decref(root);
	return r;
}

int kv_geometry_load_hf(int dirfd, const char *path, struct kv_geometry *g)
{
	enum { MAX_CONFIG_BYTES = 4 << 20 };
	char *buf;
	size_t len = 0;
	ssize_t n;
	int fd, r;

	kvi_error_clear();
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Model configs are a few KiB; the cap keeps a wrong path (a
	 * weights file) from being read whole. */
	buf = malloc(MAX_CONFIG_BYTES);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (len < MAX_CONFIG_BYTES &&
	       (n = read(fd, buf + len, MAX_CONFIG_BYTES - len)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			close(fd);
			free(buf);
			return r;
		}
		len += (size_t)n;
	}
	close(fd);
	if (len == MAX_CONFIG_BYTES) {
		free(buf);
		return kvi_fail(-KV_EBADCONFIG, "larger than %d bytes", MAX_CONFIG_BYTES);
	}
	r = kv_geometry_parse_hf(buf, len, g);
	free(buf);
	return r;
}

int kv_geometry_derive(struct kv_geometry *g)
{
	uint64_t per_layer;

	kvi_error_clear();
	if (!g->tp)
		g->tp = 1;
	if (!g->gpu_block_tokens)
		g->gpu_block_tokens = 16;
	if (!g->tokens_per_file)
		g->tokens_per_file = 256;
	if (!g->dtype_bytes)
		return kvi_fail(-EINVAL, "no dtype in the model config: give one");
	if (!g->layers)
		return kvi_fail(-EINVAL, "no layers");
	if (g->tokens_per_file % g->gpu_block_tokens)
		return kvi_fail(-EINVAL,
			    "tokens per file %u is not a multiple of the GPU block of %u tokens",
			    g->tokens_per_file, g->gpu_block_tokens);
	if (g->mla) {
		/* The latent is not split across ranks: each holds it all. */
		g->kv_heads_per_rank = 0;
		per_layer = (uint64_t)(g->kv_lora_rank + (uint64_t)g->qk_rope_head_dim) *
			    g->dtype_bytes;
	} else {
		if (g->tp <= g->kv_heads) {
			if (g->kv_heads % g->tp)
				return kvi_fail(-EINVAL,
					    "tp %u does not divide the %u KV heads",
					    g->tp, g->kv_heads);
			g->kv_heads_per_rank = g->kv_heads / g->tp;
		} else {
			/* More ranks than KV heads: each head is replicated. */
			if (g->tp % g->kv_heads)
				return kvi_fail(-EINVAL,
					    "the %u KV heads do not divide tp %u",
					    g->kv_heads, g->tp);
			g->kv_heads_per_rank = 1;
		}
		per_layer = 2ULL * g->kv_heads_per_rank * g->head_dim * g->dtype_bytes;
	}
	if (per_layer > UINT64_MAX / g->layers / g->tokens_per_file)
		return kvi_fail(-ERANGE, "geometry overflows 64 bits");
	g->bytes_per_token = per_layer * g->layers;
	g->bytes_per_gpu_block = g->bytes_per_token * g->gpu_block_tokens;
	g->bytes_per_file = g->bytes_per_token * g->tokens_per_file;
	return 0;
}
