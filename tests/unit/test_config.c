/*
 * kv_config_*: the canonical JSON, fingerprints and config.json text
 * must be byte-identical to Python's json module.  The expected values
 * below were computed with python3:
 *   d = {k: json.loads(text)[k] for k in FIELDS}
 *   json.dumps(d, sort_keys=True, separators=(",", ":"))
 *   hashlib.sha256(<that>.encode()).hexdigest()[:12]
 *   json.dumps(d, indent=2, sort_keys=True)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

/* llama */
static const char llama_json[] =
	"{\"model_name\": \"meta-llama/Llama-3.1-8B\", \"hash_block_size\": 16, \"gpu_blocks_per_file\": 16,\n"
	" \"tp_size\": 1, \"pp_size\": 1, \"pcp_size\": 1, \"dcp_size\": 1, \"dtype\": \"bfloat16\",\n"
	" \"kv_cache_groups\": [{\"block_size\": 16, \"layer_names\": [\"model.layers.0.self_attn.attn\", \"model.layers.1.self_attn.attn\"]}],\n"
	" \"inference_engine\": \"vllm\"}";
static const char llama_canonical[] =
	"{\"dcp_size\":1,\"dtype\":\"bfloat16\",\"gpu_blocks_per_file\":16,\"hash_block_size\":16,\"inference_engine\":\"vllm\",\"kv_cache_groups\":[{\"block_size\":16,\"layer_names\":[\"model.layers.0.self_attn.attn\",\"model.layers.1.self_attn.attn\"]}],\"model_name\":\"meta-llama/Llama-3.1-8B\",\"pcp_size\":1,\"pp_size\":1,\"tp_size\":1}";
static const char llama_fp[] = "86704413bc92";
static const char llama_dir[] = "meta-llama_Llama-3.1-8B_86704413bc92";

/* qwen */
static const char qwen_json[] =
	"{\"model_name\": \"Qwen/Qwen3-32B-\303\274\344\270\255\346\226\207\360\237\231\202\", \"hash_block_size\": 16, \"gpu_blocks_per_file\": 8,\n"
	" \"tp_size\": 4, \"pp_size\": 2, \"pcp_size\": 1, \"dcp_size\": 1, \"dtype\": \"float16\",\n"
	" \"kv_cache_groups\": [{\"block_size\": 16, \"layer_names\": [\"model.layers.0.self_attn.attn\"]}],\n"
	" \"inference_engine\": \"vllm\", \"extra\": \"kept\"}";
static const char qwen_canonical[] =
	"{\"dcp_size\":1,\"dtype\":\"float16\",\"extra\":\"kept\",\"gpu_blocks_per_file\":8,\"hash_block_size\":16,\"inference_engine\":\"vllm\",\"kv_cache_groups\":[{\"block_size\":16,\"layer_names\":[\"model.layers.0.self_attn.attn\"]}],\"model_name\":\"Qwen/Qwen3-32B-\\u00fc\\u4e2d\\u6587\\ud83d\\ude42\",\"pcp_size\":1,\"pp_size\":2,\"tp_size\":4}";
static const char qwen_fp[] = "cb246f31fc1c";
static const char qwen_dir[] = "Qwen_Qwen3-32B-\303\274\344\270\255\346\226\207\360\237\231\202_cb246f31fc1c";

/* mixed */
static const char mixed_json[] =
	"{\"inference_engine\": \"vllm/\\u00e9\\t\", \"dtype\": \"float8_e4m3fn\",\n"
	" \"model_name\": \"org/m\\u00e9\\\"q\\\\z\", \"hash_block_size\": 256, \"gpu_blocks_per_file\": 1,\n"
	" \"tp_size\": 8, \"pp_size\": 1, \"pcp_size\": 1, \"dcp_size\": 2,\n"
	" \"kv_cache_groups\": [\n"
	"  {\"layer_names\": [\"a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001f\\u007f/\\u00e9\\u2028\\ud83d\\ude42\", \"\", \"x\"], \"block_size\": 16,\n"
	"   \"z\": [1.5, 1e-05, 1e16, 1E15, 0.1, -0.0, -2.5e-300, 100.0, true, false, null, [], {}, [[]], -7, 0],\n"
	"   \"\\u4e2d\": 1, \"\\u00e9\": 2, \"Z\": 3, \"z0\": {\"b\": 1, \"a\": {\"d\": [1, 2], \"c\": 0.0001}}, \"\\ud83d\\ude42\": 4, \"\\uffff\": 5},\n"
	"  {\"block_size\": 32, \"layer_names\": []}],\n"
	" \"unknown\": {\"deep\": [1, 2, 3]}}";
static const char mixed_canonical[] =
	"{\"dcp_size\":2,\"dtype\":\"float8_e4m3fn\",\"gpu_blocks_per_file\":1,\"hash_block_size\":256,\"inference_engine\":\"vllm/\\u00e9\\t\",\"kv_cache_groups\":[{\"Z\":3,\"block_size\":16,\"layer_names\":[\"a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001f\\u007f/\\u00e9\\u2028\\ud83d\\ude42\",\"\",\"x\"],\"z\":[1.5,1e-05,1e+16,1000000000000000.0,0.1,-0.0,-2.5e-300,100.0,true,false,null,[],{},[[]],-7,0],\"z0\":{\"a\":{\"c\":0.0001,\"d\":[1,2]},\"b\":1},\"\\u00e9\":2,\"\\u4e2d\":1,\"\\uffff\":5,\"\\ud83d\\ude42\":4},{\"block_size\":32,\"layer_names\":[]}],\"model_name\":\"org/m\\u00e9\\\"q\\\\z\",\"pcp_size\":1,\"pp_size\":1,\"tp_size\":8,\"unknown\":{\"deep\":[1,2,3]}}";
static const char mixed_fp[] = "dc511f7fc601";
static const char mixed_dir[] = "org_m\303\251\"q\\z_dc511f7fc601";
static const char mixed_pretty[] =
	"{\n"
	"  \"dcp_size\": 2,\n"
	"  \"dtype\": \"float8_e4m3fn\",\n"
	"  \"gpu_blocks_per_file\": 1,\n"
	"  \"hash_block_size\": 256,\n"
	"  \"inference_engine\": \"vllm/\\u00e9\\t\",\n"
	"  \"kv_cache_groups\": [\n"
	"    {\n"
	"      \"Z\": 3,\n"
	"      \"block_size\": 16,\n"
	"      \"layer_names\": [\n"
	"        \"a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001f\\u007f/\\u00e9\\u2028\\ud83d\\ude42\",\n"
	"        \"\",\n"
	"        \"x\"\n"
	"      ],\n"
	"      \"z\": [\n"
	"        1.5,\n"
	"        1e-05,\n"
	"        1e+16,\n"
	"        1000000000000000.0,\n"
	"        0.1,\n"
	"        -0.0,\n"
	"        -2.5e-300,\n"
	"        100.0,\n"
	"        true,\n"
	"        false,\n"
	"        null,\n"
	"        [],\n"
	"        {},\n"
	"        [\n"
	"          []\n"
	"        ],\n"
	"        -7,\n"
	"        0\n"
	"      ],\n"
	"      \"z0\": {\n"
	"        \"a\": {\n"
	"          \"c\": 0.0001,\n"
	"          \"d\": [\n"
	"            1,\n"
	"            2\n"
	"          ]\n"
	"        },\n"
	"        \"b\": 1\n"
	"      },\n"
	"      \"\\u00e9\": 2,\n"
	"      \"\\u4e2d\": 1,\n"
	"      \"\\uffff\": 5,\n"
	"      \"\\ud83d\\ude42\": 4\n"
	"    },\n"
	"    {\n"
	"      \"block_size\": 32,\n"
	"      \"layer_names\": []\n"
	"    }\n"
	"  ],\n"
	"  \"model_name\": \"org/m\\u00e9\\\"q\\\\z\",\n"
	"  \"pcp_size\": 1,\n"
	"  \"pp_size\": 1,\n"
	"  \"tp_size\": 8,\n"
	"  \"unknown\": {\n"
	"    \"deep\": [\n"
	"      1,\n"
	"      2,\n"
	"      3\n"
	"    ]\n"
	"  }\n"
	"}";

struct known {
	const char *name, *json, *canonical, *fp, *dir;
};

static const struct known known[] = {
	{ "llama", llama_json, llama_canonical, llama_fp, llama_dir },
	{ "qwen", qwen_json, qwen_canonical, qwen_fp, qwen_dir },
	{ "mixed", mixed_json, mixed_canonical, mixed_fp, mixed_dir },
};

static struct kv_config *parse(const char *text)
{
	struct kv_config *cfg = NULL;
	int ret = kv_config_parse(text, strlen(text), &cfg);

	if (ret < 0) {
		fprintf(stderr, "parse: %s: %s\n", kv_strerror(ret),
			kv_error_detail());
		failures++;
	}
	return cfg;
}

static void test_known(void)
{
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		const struct known *k = &known[i];
		struct kv_config *cfg = parse(k->json);
		char fp[KV_FINGERPRINT_LEN + 1], dir[KV_NAME_MAX + 1];
		char *canon = NULL;

		if (!cfg)
			continue;
		CHECK(kv_config_canonical(cfg, &canon) == 0);
		if (canon && strcmp(canon, k->canonical)) {
			fprintf(stderr, "%s canonical:\n got  %s\n want %s\n",
				k->name, canon, k->canonical);
			failures++;
		}
		free(canon);
		CHECK(kv_config_fingerprint(cfg, fp) == 0);
		if (strcmp(fp, k->fp)) {
			fprintf(stderr, "%s fingerprint %s, want %s\n",
				k->name, fp, k->fp);
			failures++;
		}
		CHECK(kv_config_model_dir(cfg, dir, sizeof(dir)) == 0);
		CHECK(!strcmp(dir, k->dir));
		CHECK(kv_config_model_dir(cfg, dir, strlen(k->dir)) ==
		      -ENAMETOOLONG);
		kv_config_free(cfg);
	}
}

static void test_fields(void)
{
	struct kv_config *cfg = parse(qwen_json);
	int64_t v;

	if (!cfg)
		return;
	CHECK(!strcmp(kv_config_string(cfg, "dtype"), "float16"));
	CHECK(!strcmp(kv_config_string(cfg, "model_name"),
		      "Qwen/Qwen3-32B-\303\274\344\270\255\346\226\207\360\237\231\202"));
	CHECK(kv_config_string(cfg, "tp_size") == NULL);
	CHECK(!strcmp(kv_config_string(cfg, "extra"), "kept"));	/* kept whole */
	CHECK(kv_config_int(cfg, "tp_size", &v) == 0 && v == 4);
	CHECK(kv_config_int(cfg, "pp_size", &v) == 0 && v == 2);
	CHECK(kv_config_int(cfg, "dtype", &v) == -ENOENT);
	CHECK(kv_config_int(cfg, "nope", &v) == -ENOENT);
	kv_config_free(cfg);
	kv_config_free(NULL);
}

/* Replace the first occurrence of from with to in the llama config. */
static int parse_edited(const char *from, const char *to)
{
	char text[2048];
	const char *at = strstr(llama_json, from);
	struct kv_config *cfg = NULL;
	int ret;

	if (!at) {
		fprintf(stderr, "test bug: '%s' not in llama_json\n", from);
		failures++;
		return 0;
	}
	snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - llama_json),
		 llama_json, to, at + strlen(from));
	ret = kv_config_parse(text, strlen(text), &cfg);
	kv_config_free(cfg);
	return ret;
}

static int error_has(const char *what)
{
	if (strstr(kv_error_detail(), what))
		return 1;
	fprintf(stderr, "error '%s' lacks '%s'\n", kv_error_detail(), what);
	return 0;
}

static void test_errors(void)
{
	struct kv_config *cfg = NULL;

	CHECK(parse_edited("\"tp_size\": 1, ", "") == -KV_EBADCONFIG);
	CHECK(error_has("missing field 'tp_size'"));
	CHECK(parse_edited("\"inference_engine\": \"vllm\"", "\"x\": 1") ==
	      -KV_EBADCONFIG);
	CHECK(error_has("missing field 'inference_engine'"));
	CHECK(parse_edited("\"tp_size\": 1", "\"tp_size\": \"1\"") ==
	      -KV_EBADCONFIG);
	CHECK(error_has("field 'tp_size' is a string, not an integer"));
	CHECK(parse_edited("\"tp_size\": 1", "\"tp_size\": 1.0") ==
	      -KV_EBADCONFIG);
	CHECK(error_has("field 'tp_size' is a float"));
	CHECK(parse_edited("\"dtype\": \"bfloat16\"", "\"dtype\": null") ==
	      -KV_EBADCONFIG);
	CHECK(error_has("field 'dtype' is null"));
	CHECK(parse_edited("\"kv_cache_groups\"",
			   "\"kv_cache_groups\": {}, \"old\"") == -KV_EBADCONFIG);
	CHECK(error_has("field 'kv_cache_groups' is an object, not a list"));
	CHECK(parse_edited("[{\"block_size\": 16", "[7, {\"block_size\": 16") ==
	      -KV_EBADCONFIG);
	CHECK(error_has("item 0 is an integer, not an object"));
	CHECK(parse_edited("{\"block_size\": 16, ", "{") == -KV_EBADCONFIG);
	CHECK(error_has("item 0 has no integer 'block_size'"));
	CHECK(parse_edited("meta-llama/Llama-3.1-8B", "a\\nb") == -KV_EBADCONFIG);
	CHECK(error_has("model_name"));
	CHECK(parse_edited("meta-llama/Llama-3.1-8B", "") == -KV_EBADCONFIG);
	CHECK(parse_edited("meta-llama/Llama-3.1-8B", "a\\u0000b") ==
	      -KV_EBADCONFIG);
	CHECK(error_has("NUL"));
	CHECK(parse_edited("\"vllm\"}", "\"vllm\"") == -KV_EBADCONFIG);
	CHECK(error_has("line 4:"));
	CHECK(parse_edited("\"vllm\"}", "\"vllm\"} x") == -KV_EBADCONFIG);
	/* Python keeps the last of duplicate keys, and so must the hash. */
	CHECK(parse_edited("\"tp_size\": 1", "\"tp_size\": \"x\", \"tp_size\": 1") == 0);
	CHECK(kv_config_parse("[]", 2, &cfg) == -KV_EBADCONFIG);
	CHECK(error_has("config is a list, not an object"));
	CHECK(kv_config_parse("", 0, &cfg) == -KV_EBADCONFIG);
	CHECK(cfg == NULL);
	CHECK(parse_edited("\"tp_size\": 1, ", "") == -KV_EBADCONFIG);
	CHECK(kv_config_parse(llama_json, strlen(llama_json), &cfg) == 0);
	CHECK(!strcmp(kv_error_detail(), ""));
	kv_config_free(cfg);
}

/* vLLM's native tier: old (no parallel_agnostic), new, and newest fields;
 * fingerprints from Python's json.dumps over the whole object. */
static const struct {
	const char *json, *fp;
} vllm_cases[] = {
	{ "{\"model_name\": \"Qwen/Qwen3-0.6B\", \"tokens_per_hash\": 16, \"blocks_per_file\": 1, \"tp_size\": 2, \"pp_size\": 1, \"pcp_size\": 1, \"dcp_size\": 1, \"dtype\": \"bfloat16\", \"kv_cache_groups\": [{\"tokens_per_block\": 16, \"layer_names\": [\"model.layers.0.self_attn.attn\"]}], \"inference_engine\": \"vllm\"}",
	  "1fa589604724" },
	{ "{\"model_name\": \"Qwen/Qwen3-0.6B\", \"tokens_per_hash\": 16, \"blocks_per_file\": 1, \"tp_size\": 2, \"pp_size\": 1, \"pcp_size\": 1, \"dcp_size\": 1, \"dtype\": \"bfloat16\", \"kv_cache_groups\": [{\"tokens_per_block\": 16, \"layer_names\": [\"model.layers.0.self_attn.attn\"]}], \"inference_engine\": \"vllm\", \"parallel_agnostic\": false}",
	  "56edf777c321" },
	{ "{\"model_name\": \"Qwen/Qwen3-0.6B\", \"tokens_per_hash\": 16, \"blocks_per_file\": 1, \"tp_size\": 1, \"pp_size\": 1, \"pcp_size\": 1, \"dcp_size\": 1, \"dtype\": \"bfloat16\", \"kv_cache_groups\": [{\"tokens_per_block\": 16, \"layer_names\": [\"model.layers.0.self_attn.attn\"]}], \"inference_engine\": \"vllm\", \"replicated_layout\": true, \"canonical_format\": \"hnd-v1\", \"storage_format\": \"raw\"}",
	  "0d6ba268e2ab" },
	{ "{\"model_name\": \"Qwen/Qwen3-0.6B\", \"tokens_per_hash\": 16, \"blocks_per_file\": 1, \"tp_size\": 2, \"pp_size\": 1, \"pcp_size\": 1, \"dcp_size\": 1, \"dtype\": \"bfloat16\", \"kv_cache_groups\": [], \"inference_engine\": \"vllm\"}",
	  "c71150b3bd37" },
};

static void test_vllm(void)
{
	for (size_t i = 0; i < sizeof(vllm_cases) / sizeof(vllm_cases[0]); i++) {
		struct kv_config *cfg = parse(vllm_cases[i].json);
		char fp[KV_FINGERPRINT_LEN + 1];
		uint64_t tokens, per_file;

		if (!cfg)
			continue;
		CHECK(kv_config_schema(cfg) == KV_CONFIG_VLLM);
		CHECK(!strcmp(kv_config_schema_name(cfg), "vllm"));
		CHECK(kv_config_fingerprint(cfg, fp) == 0 && !strcmp(fp, vllm_cases[i].fp));
		CHECK(kv_config_blocks(cfg, &tokens, &per_file) == 0 &&
		      tokens == 16 && per_file == 1);
		kv_config_free(cfg);
	}
}

/* Sizes are positive and bounded, whatever the schema; errors name the field. */
static void test_bounds(void)
{
	struct kv_config *cfg = parse(llama_json);
	uint64_t tokens, per_file;

	if (cfg) {
		CHECK(kv_config_schema(cfg) == KV_CONFIG_LLMD);
		CHECK(!strcmp(kv_config_schema_name(cfg), "llm-d"));
		CHECK(kv_config_blocks(cfg, &tokens, &per_file) == 0 &&
		      tokens == 16 && per_file == 16);
		kv_config_free(cfg);
	}
	CHECK(parse_edited("\"hash_block_size\": 16", "\"hash_block_size\": -16") ==
	      -KV_EBADCONFIG);
	CHECK(error_has("field 'hash_block_size' is -16, not 1.."));
	CHECK(parse_edited("\"gpu_blocks_per_file\": 16", "\"gpu_blocks_per_file\": 0") ==
	      -KV_EBADCONFIG);
	CHECK(error_has("field 'gpu_blocks_per_file' is 0"));
	CHECK(parse_edited("\"tp_size\": 1", "\"tp_size\": 0") == -KV_EBADCONFIG);
	CHECK(error_has("field 'tp_size' is 0"));
	CHECK(parse_edited("\"tp_size\": 1", "\"tp_size\": 9999999") == -KV_EBADCONFIG);
	CHECK(error_has("field 'tp_size' is 9999999"));
	CHECK(parse_edited("{\"block_size\": 16", "{\"block_size\": 0") == -KV_EBADCONFIG);
	CHECK(error_has("'block_size' is 0"));
	CHECK(parse_edited("\"hash_block_size\": 16", "\"hash_block_size\": 16, \"tokens_per_hash\": 16") ==
	      -KV_EBADCONFIG);
	CHECK(error_has("both"));
	CHECK(parse_edited("\"hash_block_size\": 16, ", "") == -KV_EBADCONFIG);
	CHECK(error_has("'hash_block_size' (llm-d) or 'tokens_per_hash' (vLLM)"));
}

static char *slurp(int dirfd, const char *path)
{
	static char buf[8192];
	int fd = openat(dirfd, path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return NULL;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return NULL;
	buf[n] = '\0';
	return buf;
}

static int count_entries(int dirfd)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY), n = 0;
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *e;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static void test_files(const char *tmp)
{
	struct kv_config *cfg = parse(mixed_json), *llama = parse(llama_json);
	struct kv_config *back = NULL;
	char dir[KV_NAME_MAX + 1], *text;
	int root, mfd;
	pid_t pids[8];

	if (!cfg || !llama)
		return;
	root = open(tmp, O_RDONLY | O_DIRECTORY);
	CHECK(root >= 0);

	CHECK(kv_config_write(cfg, root, "plain.json") == 0);
	text = slurp(root, "plain.json");
	CHECK(text && !strcmp(text, mixed_pretty));
	CHECK(kv_config_load(root, "plain.json", &back) == 0);
	if (back) {
		char fp[KV_FINGERPRINT_LEN + 1];

		CHECK(kv_config_fingerprint(back, fp) == 0 &&
		      !strcmp(fp, mixed_fp));
		kv_config_free(back);
	}
	CHECK(kv_config_load(root, "absent.json", &back) == -ENOENT);
	CHECK(kv_config_load(root, ".", &back) == -EISDIR);

	/* Racing writers of one model dir all succeed and agree. */
	for (int i = 0; i < 8; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(kv_config_ensure_model_dir(root, cfg, dir,
							 sizeof(dir)) ? 1 : 0);
	}
	for (int i = 0; i < 8; i++) {
		int st;

		CHECK(waitpid(pids[i], &st, 0) == pids[i] &&
		      WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	CHECK(kv_config_ensure_model_dir(root, cfg, dir, sizeof(dir)) == 0);
	CHECK(!strcmp(dir, mixed_dir));
	mfd = openat(root, mixed_dir, O_RDONLY | O_DIRECTORY);
	CHECK(mfd >= 0);
	text = slurp(mfd, KV_CONFIG_NAME);
	CHECK(text && !strcmp(text, mixed_pretty));
	CHECK(count_entries(mfd) == 1);		/* no temp left behind */

	/* A different config under the same name is refused, untouched. */
	CHECK(kv_config_write(llama, mfd, KV_CONFIG_NAME) == 0);
	CHECK(kv_config_ensure_model_dir(root, cfg, dir, sizeof(dir)) ==
	      -KV_EFINGERPRINT);
	text = slurp(mfd, KV_CONFIG_NAME);
	CHECK(text && strstr(text, "meta-llama/Llama-3.1-8B"));

	/* A malformed one is reported, not overwritten. */
	CHECK(unlinkat(mfd, KV_CONFIG_NAME, 0) == 0);
	text = "{\"model_name\": ";
	{
		int fd = openat(mfd, KV_CONFIG_NAME, O_WRONLY | O_CREAT, 0644);

		CHECK(fd >= 0 && write(fd, text, strlen(text)) > 0);
		close(fd);
	}
	CHECK(kv_config_ensure_model_dir(root, cfg, dir, sizeof(dir)) ==
	      -KV_EBADCONFIG);
	text = slurp(mfd, KV_CONFIG_NAME);
	CHECK(text && !strcmp(text, "{\"model_name\": "));
	CHECK(kv_config_ensure_model_dir(root, cfg, dir, 5) == -ENAMETOOLONG);

	/* Hostile trees: a FIFO must not hang the writer, a symlink is not
	 * followed out of the root. */
	CHECK(unlinkat(mfd, KV_CONFIG_NAME, 0) == 0);
	CHECK(mkfifoat(mfd, KV_CONFIG_NAME, 0644) == 0);
	CHECK(kv_config_ensure_model_dir(root, cfg, dir, sizeof(dir)) ==
	      -KV_EBADCONFIG);
	CHECK(error_has("not a regular file"));
	CHECK(kv_config_load(mfd, KV_CONFIG_NAME, &back) == -KV_EBADCONFIG);
	CHECK(unlinkat(mfd, KV_CONFIG_NAME, 0) == 0);
	CHECK(symlinkat("../plain.json", mfd, KV_CONFIG_NAME) == 0);
	CHECK(kv_config_ensure_model_dir(root, cfg, dir, sizeof(dir)) == -ELOOP);
	close(mfd);

	/* A pipe holding a config reads like a file (--config /dev/stdin). */
	{
		int fds[2];
		char fdpath[64];

		CHECK(pipe(fds) == 0);
		CHECK(write(fds[1], llama_json, strlen(llama_json)) ==
		      (ssize_t)strlen(llama_json));
		close(fds[1]);
		snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fds[0]);
		back = NULL;
		CHECK(kv_config_load(AT_FDCWD, fdpath, &back) == 0);
		if (back) {
			char fp[KV_FINGERPRINT_LEN + 1];

			CHECK(kv_config_fingerprint(back, fp) == 0 &&
			      !strcmp(fp, llama_fp));
			kv_config_free(back);
		}
		close(fds[0]);
	}

	/* A file where the model dir should be. */
	{
		int fd = openat(root, llama_dir, O_WRONLY | O_CREAT, 0644);

		CHECK(fd >= 0);
		close(fd);
	}
	CHECK(kv_config_ensure_model_dir(root, llama, dir, sizeof(dir)) ==
	      -ENOTDIR);
	close(root);
	kv_config_free(cfg);
	kv_config_free(llama);
}

int main(void)
{
	char tmp[] = "/tmp/test_config.XXXXXX";
	char cmd[64];

	test_known();
	test_fields();
	test_errors();
	test_vllm();
	test_bounds();
	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		return 1;
	}
	test_files(tmp);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		failures++;
	return failures ? 1 : 0;
}
