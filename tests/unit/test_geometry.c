/* kv_geometry: HF config parsing and the bytes it implies, checked
 * against numbers worked out by hand. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
		kv_error_detail()); failures++; } } while (0)

#define PARSE(text) kv_geometry_parse_hf(text, strlen(text), &g)

static int parse(const char *json, struct kv_geometry *g, unsigned tp)
{
	int r = kv_geometry_parse_hf(json, strlen(json), g);

	if (r < 0)
		return r;
	g->tp = tp;
	return kv_geometry_derive(g);
}

int main(void)
{
	static const char llama8b[] =
		"{\"num_hidden_layers\":32,\"num_attention_heads\":32,"
		"\"num_key_value_heads\":8,\"hidden_size\":4096,"
		"\"torch_dtype\":\"bfloat16\",\"model_type\":\"llama\"}";
	static const char dsv3[] =
		"{\"num_hidden_layers\":61,\"num_attention_heads\":128,"
		"\"num_key_value_heads\":128,\"kv_lora_rank\":512,"
		"\"qk_rope_head_dim\":64,\"qk_nope_head_dim\":128,"
		"\"torch_dtype\":\"bfloat16\"}";
	static const char qwen7b[] =
		"{\"num_hidden_layers\":28,\"num_attention_heads\":28,"
		"\"num_key_value_heads\":4,\"hidden_size\":3584,"
		"\"sliding_window\":131072,\"use_sliding_window\":false,"
		"\"torch_dtype\":\"bfloat16\"}";
	static const char gemma3[] =
		"{\"torch_dtype\":\"bfloat16\",\"text_config\":{"
		"\"num_hidden_layers\":62,\"num_attention_heads\":32,"
		"\"num_key_value_heads\":16,\"head_dim\":128,"
		"\"sliding_window\":1024,\"sliding_window_pattern\":6}}";
	static const char mha[] =
		"{\"num_hidden_layers\":12,\"num_attention_heads\":12,"
		"\"hidden_size\":768,\"dtype\":\"float32\"}";
	struct kv_geometry g;
	char canon[KV_DTYPE_NAME_MAX];
	unsigned b;

	/* Llama-3.1-8B: 2 * 32 layers * 8 heads * 128 dim * 2 bytes. */
	CHECK(parse(llama8b, &g, 1) == 0);
	CHECK(g.layers == 32 && g.kv_heads == 8 && g.head_dim == 128);
	CHECK(g.bytes_per_token == 131072);
	CHECK(g.bytes_per_gpu_block == 131072 * 16);
	CHECK(g.bytes_per_file == 131072ULL * 256);
	CHECK(!strcmp(g.model_type, "llama") && !strcmp(g.dtype, "bfloat16"));
	/* tp 2 halves the heads per rank; tp 16 replicates one head. */
	CHECK(parse(llama8b, &g, 2) == 0 && g.bytes_per_token == 65536);
	CHECK(parse(llama8b, &g, 16) == 0 && g.kv_heads_per_rank == 1 &&
	      g.bytes_per_token == 16384);
	CHECK(parse(llama8b, &g, 3) == -EINVAL);
	CHECK(parse(llama8b, &g, 12) == -EINVAL);

	/* DeepSeek-V3 MLA: (512 + 64) * 2 bytes * 61 layers, on every rank. */
	CHECK(parse(dsv3, &g, 1) == 0 && g.mla && g.bytes_per_token == 70272);
	CHECK(parse(dsv3, &g, 8) == 0 && g.bytes_per_token == 70272);
	CHECK(g.bytes_per_file == 70272ULL * 256);

	/* Qwen2.5-7B: 2 * 28 * 4 * (3584/28 = 128) * 2; window off. */
	CHECK(parse(qwen7b, &g, 1) == 0 && g.head_dim == 128 &&
	      g.bytes_per_token == 57344 && g.sliding_layers == 0 &&
	      g.sliding_window == 0);

	/* Gemma 3 27B, nested text_config: 2 * 62 * 16 * 128 * 2; 52 of 62
	 * layers slide (every 6th is global). */
	CHECK(parse(gemma3, &g, 1) == 0 && g.bytes_per_token == 507904 &&
	      g.sliding_window == 1024 && g.sliding_layers == 52);

	/* Plain MHA, KV heads from the attention heads, fp32 under "dtype":
	 * 2 * 12 * 12 * 64 * 4. */
	CHECK(parse(mha, &g, 1) == 0 && g.kv_heads == 12 &&
	      g.bytes_per_token == 73728);

	/* GPU block and file sizes follow the deployment fields. */
	CHECK(kv_geometry_parse_hf(llama8b, strlen(llama8b), &g) == 0);
	g.gpu_block_tokens = 32;
	g.tokens_per_file = 64;
	CHECK(kv_geometry_derive(&g) == 0 && g.bytes_per_gpu_block == 131072 * 32 &&
	      g.bytes_per_file == 131072 * 64);
	g.tokens_per_file = 48;
	CHECK(kv_geometry_derive(&g) == -EINVAL);

	/* Bad configs name what is wrong. */
	CHECK(PARSE("{\"num_hidden_layers\":") == -KV_EBADCONFIG);
	CHECK(strstr(kv_error_detail(), "line 1") != NULL);
	CHECK(PARSE("[1]") == -KV_EBADCONFIG);
	CHECK(PARSE("{\"hidden_size\":4096}") == -KV_EBADCONFIG);
	CHECK(strstr(kv_error_detail(), "num_hidden_layers") != NULL);
	CHECK(PARSE("{\"num_hidden_layers\":\"32\"}") == -KV_EBADCONFIG);
	CHECK(strstr(kv_error_detail(), "not an integer") != NULL);
	CHECK(PARSE("{\"num_hidden_layers\":-1}") == -KV_EBADCONFIG);
	CHECK(PARSE("{\"num_hidden_layers\":2,\"num_attention_heads\":3,"
				   "\"hidden_size\":10}") == -KV_EBADCONFIG);
	CHECK(PARSE("{\"num_hidden_layers\":2,\"kv_lora_rank\":8}") == -KV_EBADCONFIG);
	CHECK(strstr(kv_error_detail(), "qk_rope_head_dim") != NULL);
	CHECK(PARSE("{\"num_hidden_layers\":2,\"num_attention_heads\":2,"
				   "\"hidden_size\":8,\"torch_dtype\":\"int3\"}")
	      == -KV_EBADCONFIG);
	/* A config without a dtype parses but cannot be sized. */
	CHECK(PARSE("{\"num_hidden_layers\":2,\"num_attention_heads\":2,"
				   "\"hidden_size\":8}") == 0);
	CHECK(g.dtype[0] == '\0' && kv_geometry_derive(&g) == -EINVAL);
	CHECK(kv_geometry_load_hf(AT_FDCWD, "/nonexistent/config.json", &g) == -ENOENT);

	CHECK(kv_dtype_parse("torch.float16", canon, &b) == 0 && b == 2 &&
	      !strcmp(canon, "float16"));
	CHECK(kv_dtype_parse("BF16", canon, &b) == 0 && b == 2 &&
	      !strcmp(canon, "bfloat16"));
	CHECK(kv_dtype_parse("fp8", NULL, &b) == 0 && b == 1);
	CHECK(kv_dtype_parse("float8_e4m3fn", canon, &b) == 0 && b == 1);
	CHECK(kv_dtype_parse("float32", canon, &b) == 0 && b == 4);
	CHECK(kv_dtype_parse("int4", canon, &b) == -EINVAL);
	return failures ? 1 : 0;
}
