/* kv_layout_*: composing and strictly parsing names of the on-disk layout. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <kv/kv.h>

static int failures;

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

#define FP "0123456789ab"

static void test_hash(void)
{
	char h[KV_HASH_MAX_LEN + 1], big[KV_HASH_MAX_LEN + 2];

	CHECK(kv_layout_hash_normalize("ABCdef0123", h, sizeof(h)) == 0 &&
	      !strcmp(h, "abcdef0123"));
	CHECK(kv_layout_hash_normalize("0a1b2", h, sizeof(h)) == 0 &&
	      !strcmp(h, "0a1b2"));
	CHECK(kv_layout_hash_normalize("0a1b", h, sizeof(h)) == -KV_EBADHASH);
	CHECK(kv_layout_hash_normalize("", h, sizeof(h)) == -KV_EBADHASH);
	CHECK(kv_layout_hash_normalize(NULL, h, sizeof(h)) == -KV_EBADHASH);
	CHECK(kv_layout_hash_normalize("abcdeg", h, sizeof(h)) == -KV_EBADHASH);
	CHECK(kv_layout_hash_normalize("0x1234", h, sizeof(h)) == -KV_EBADHASH);
	CHECK(kv_layout_hash_normalize("12345 ", h, sizeof(h)) == -KV_EBADHASH);
	CHECK(kv_layout_hash_normalize("../12345", h, sizeof(h)) == -KV_EBADHASH);
	memset(big, 'f', KV_HASH_MAX_LEN);
	big[KV_HASH_MAX_LEN] = '\0';
	CHECK(kv_layout_hash_normalize(big, h, sizeof(h)) == 0);
	big[KV_HASH_MAX_LEN] = 'f';
	big[KV_HASH_MAX_LEN + 1] = '\0';
	CHECK(kv_layout_hash_normalize(big, h, sizeof(h)) == -KV_EBADHASH);
	CHECK(kv_layout_hash_normalize("abcdef", h, 6) == -ENAMETOOLONG);
	CHECK(kv_layout_hash_normalize("abcdef", h, 7) == 0);
}

static void test_model_names(void)
{
	char buf[KV_NAME_MAX + 1], name[300];
	struct kv_block_ref ref;

	CHECK(kv_layout_safe_model("meta-llama/Llama-3.1-8B", buf, sizeof(buf)) == 0 &&
	      !strcmp(buf, "meta-llama_Llama-3.1-8B"));
	/* A local path as model name: vLLM makes it one dir name too. */
	CHECK(kv_layout_safe_model("/models/x/../y", buf, sizeof(buf)) == 0 &&
	      !strcmp(buf, "_models_x_.._y"));
	CHECK(kv_layout_safe_model("Qwen/Qwen3-32B-\303\274\344\270\255", buf,
				   sizeof(buf)) == 0 &&
	      !strcmp(buf, "Qwen_Qwen3-32B-\303\274\344\270\255"));
	CHECK(kv_layout_safe_model("", buf, sizeof(buf)) == -KV_EBADPATH);
	CHECK(kv_layout_safe_model(NULL, buf, sizeof(buf)) == -KV_EBADPATH);
	CHECK(kv_layout_safe_model("a\nb", buf, sizeof(buf)) == -KV_EBADPATH);
	CHECK(kv_layout_safe_model("a\tb", buf, sizeof(buf)) == -KV_EBADPATH);
	CHECK(kv_layout_safe_model("a\177b", buf, sizeof(buf)) == -KV_EBADPATH);
	CHECK(kv_layout_safe_model("abc", buf, 3) == -ENAMETOOLONG);
	/* The longest name that still leaves room for "_<d12>". */
	memset(name, 'm', sizeof(name));
	name[KV_NAME_MAX - 1 - KV_FINGERPRINT_LEN] = '\0';
	CHECK(kv_layout_model_dir(name, FP, buf, sizeof(buf)) == 0 &&
	      strlen(buf) == KV_NAME_MAX);
	CHECK(kv_layout_model_dir_parse(buf, &ref) == 0);
	name[KV_NAME_MAX - 1 - KV_FINGERPRINT_LEN] = 'm';
	name[KV_NAME_MAX - KV_FINGERPRINT_LEN] = '\0';
	CHECK(kv_layout_model_dir(name, FP, buf, sizeof(buf)) == -ENAMETOOLONG);

	CHECK(kv_layout_model_dir("org/m", FP, buf, sizeof(buf)) == 0 &&
	      !strcmp(buf, "org_m_" FP));
	CHECK(kv_layout_model_dir("org/m", FP, buf, 18) == -ENAMETOOLONG);
	CHECK(kv_layout_model_dir("org/m", "0123456789AB", buf, sizeof(buf)) ==
	      -KV_EBADPATH);
	CHECK(kv_layout_model_dir("org/m", "0123456789a", buf, sizeof(buf)) ==
	      -KV_EBADPATH);
	CHECK(kv_layout_model_dir("org/m", "0123456789abc", buf, sizeof(buf)) ==
	      -KV_EBADPATH);
	CHECK(kv_layout_model_dir("org/m", "0123456789ag", buf, sizeof(buf)) ==
	      -KV_EBADPATH);
	CHECK(kv_layout_model_dir("", FP, buf, sizeof(buf)) == -KV_EBADPATH);
}

static void test_dir_parse(void)
{
	struct kv_block_ref ref;
	static const char *const bad_model[] = {
		FP, "_" FP, "m-" FP, "m_0123456789AB", "m_0123456789a",
		"m_0123456789abc", "a/b_" FP, "a\nb_" FP, "", "m_" FP "_r0",
		"m_" FP "/",
	};
	static const char *const bad_rank[] = {
		"m_" FP, "m_" FP "_r", "m_" FP "_r01", "m_" FP "_r-1",
		"m_" FP "_r+1", "m_" FP "_rx", "m_" FP "_r4294967296",
		"m_" FP "_r99999999999", "m_" FP "r1", "m_" FP "__r1",
		"m_0123456789aB_r1", "_" FP "_r1", "m_" FP "_r 1", "m_" FP "_R1",
	};

	CHECK(kv_layout_model_dir_parse("meta-llama_Llama-3.1-8B_" FP, &ref) == 0);
	CHECK(!strcmp(ref.model_dir, "meta-llama_Llama-3.1-8B_" FP));
	CHECK(!strcmp(ref.fingerprint, FP));
	/* Safe names hold '_', digits and even "_r<n>": parse from the right. */
	CHECK(kv_layout_model_dir_parse("x_r1_2_" FP, &ref) == 0 &&
	      !strcmp(ref.model_dir, "x_r1_2_" FP));
	CHECK(kv_layout_model_dir_parse("m_" FP, &ref) == 0);
	for (size_t i = 0; i < sizeof(bad_model) / sizeof(bad_model[0]); i++) {
		memset(&ref, 0x5a, sizeof(ref));
		if (kv_layout_model_dir_parse(bad_model[i], &ref) != -KV_EBADPATH) {
			fprintf(stderr, "model dir '%s' accepted\n", bad_model[i]);
			failures++;
		}
		CHECK(ref.model_dir[0] == 0x5a && ref.rank == 0x5a5a5a5a);
	}

	CHECK(kv_layout_rank_dir_parse("Qwen_Qwen3-32B_r2_" FP "_r3", &ref) == 0);
	CHECK(!strcmp(ref.model_dir, "Qwen_Qwen3-32B_r2_" FP));
	CHECK(!strcmp(ref.fingerprint, FP) && ref.rank == 3);
	CHECK(kv_layout_rank_dir_parse("m_" FP "_r0", &ref) == 0 && ref.rank == 0);
	CHECK(kv_layout_rank_dir_parse("m_" FP "_r4294967295", &ref) == 0 &&
	      ref.rank == 4294967295u);
	for (size_t i = 0; i < sizeof(bad_rank) / sizeof(bad_rank[0]); i++) {
		memset(&ref, 0x5a, sizeof(ref));
		if (kv_layout_rank_dir_parse(bad_rank[i], &ref) != -KV_EBADPATH) {
			fprintf(stderr, "rank dir '%s' accepted\n", bad_rank[i]);
			failures++;
		}
		CHECK(ref.model_dir[0] == 0x5a && ref.rank == 0x5a5a5a5a);
	}
}

static void test_block_paths(void)
{
	char buf[4096], longdir[KV_NAME_MAX + 1];
	struct kv_block_ref ref, back;
	size_t n;

	/* As vLLM writes it for hash 0xabcdef0123456789, rank 2, group 1. */
	CHECK(kv_layout_block_path("meta-llama_Llama-3.1-8B_" FP, 2, 1,
				   "ABCDEF0123456789", buf, sizeof(buf)) == 0);
	CHECK(!strcmp(buf, "meta-llama_Llama-3.1-8B_" FP
		      "_r2/abc/de_g1/abcdef0123456789.bin"));
	CHECK(kv_layout_block_parse(buf, &ref) == 0);
	CHECK(!strcmp(ref.model_dir, "meta-llama_Llama-3.1-8B_" FP));
	CHECK(!strcmp(ref.fingerprint, FP));
	CHECK(ref.rank == 2 && ref.group == 1);
	CHECK(!strcmp(ref.hash, "abcdef0123456789"));
	CHECK(kv_layout_block_path_ref(&ref, buf, sizeof(buf)) == 0);
	CHECK(kv_layout_block_parse(buf, &back) == 0 &&
	      !memcmp(&ref, &back, sizeof(ref)));

	CHECK(kv_layout_block_path("m_" FP, 0, 0, "00000", buf, sizeof(buf)) == 0 &&
	      !strcmp(buf, "m_" FP "_r0/000/00_g0/00000.bin"));
	n = strlen(buf);
	CHECK(kv_layout_block_path("m_" FP, 0, 0, "00000", buf, n) == -ENAMETOOLONG);
	CHECK(kv_layout_block_path("m_" FP, 0, 0, "00000", buf, n + 1) == 0);
	CHECK(kv_layout_block_path("m_" FP, 0, 0, "0000", buf, sizeof(buf)) ==
	      -KV_EBADHASH);
	CHECK(kv_layout_block_path("m_" FP, 0, 0, "0000z", buf, sizeof(buf)) ==
	      -KV_EBADHASH);
	CHECK(kv_layout_block_path("m", 0, 0, "00000", buf, sizeof(buf)) ==
	      -KV_EBADPATH);
	CHECK(kv_layout_block_path("../m_" FP, 0, 0, "00000", buf, sizeof(buf)) ==
	      -KV_EBADPATH);
	CHECK(kv_layout_block_path(NULL, 0, 0, "00000", buf, sizeof(buf)) ==
	      -KV_EBADPATH);
	/* A model dir so long that "_r<rank>" would overflow one name. */
	memset(longdir, 'm', KV_NAME_MAX - KV_FINGERPRINT_LEN - 1);
	snprintf(longdir + KV_NAME_MAX - KV_FINGERPRINT_LEN - 1,
		 KV_FINGERPRINT_LEN + 2, "_%s", FP);
	CHECK(kv_layout_block_path(longdir, 0, 0, "00000", buf, sizeof(buf)) ==
	      -ENAMETOOLONG);
	longdir[KV_NAME_MAX - KV_FINGERPRINT_LEN - 4] = '_';
	memcpy(longdir + KV_NAME_MAX - KV_FINGERPRINT_LEN - 3, FP "\0", 13);
	CHECK(strlen(longdir) == KV_NAME_MAX - 3);
	CHECK(kv_layout_block_path(longdir, 7, 0, "00000", buf, sizeof(buf)) == 0);
	CHECK(kv_layout_block_path(longdir, 17, 0, "00000", buf, sizeof(buf)) ==
	      -ENAMETOOLONG);
}

static void test_block_parse_rejects(void)
{
	static const char *const bad[] = {
		"",
		"/m_" FP "_r0/abc/de_g0/abcdef.bin",
		"m_" FP "_r0/abc/de_g0/abcdef.bin/",
		"m_" FP "_r0//abc/de_g0/abcdef.bin",
		"./m_" FP "_r0/abc/de_g0/abcdef.bin",
		"m_" FP "_r0/abc/de_g0/../de_g0/abcdef.bin",
		"../m_" FP "_r0/abc/de_g0/abcdef.bin",
		"m_" FP "_r0/abc/de_g0/..",
		"m_" FP "_r0/abc/de_g0/.",
		"m_" FP "_r0/abc/de_g0",
		"m_" FP "_r0/abc/de_g0/x/abcdef.bin",
		"m_" FP "/abc/de_g0/abcdef.bin",		/* model dir, no rank */
		"m_" FP "_r0/abd/de_g0/abcdef.bin",		/* wrong hhh */
		"m_" FP "_r0/abc/df_g0/abcdef.bin",		/* wrong hh */
		"m_" FP "_r0/ABC/DE_g0/ABCDEF.bin",		/* not lowercase */
		"m_" FP "_r0/abc/de_g0/abcDef.bin",
		"m_" FP "_r0/abc/de_g01/abcdef.bin",
		"m_" FP "_r0/abc/de_g/abcdef.bin",
		"m_" FP "_r0/abc/de_gx/abcdef.bin",
		"m_" FP "_r0/abc/de-g0/abcdef.bin",
		"m_" FP "_r0/abc/de/abcdef.bin",		/* old llm-d layout */
		"m_" FP "_r0/abcd/de_g0/abcdef.bin",
		"m_" FP "_r0/ab/de_g0/abcdef.bin",
		"m_" FP "_r0/abc/de_g0/abcd.bin",		/* hash too short */
		"m_" FP "_r0/abc/de_g0/abcdef.bin.tmp",
		"m_" FP "_r0/abc/de_g0/abcdef.bin_0011223344556677.tmp",
		"m_" FP "_r0/abc/de_g0/abcdef.BIN",
		"m_" FP "_r0/abc/de_g0/abcdef",
		"m_" FP "_r0/abc/de_g0/.bin",
		"m_" FP "_r0/abc/de_g0/abcdeg.bin",
		"m_" FP "_r0/abc/de_g0/abcdef.bin\n",
		"m_" FP "_r01/abc/de_g0/abcdef.bin",
	};
	struct kv_block_ref ref;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&ref, 0x5a, sizeof(ref));
		if (kv_layout_block_parse(bad[i], &ref) != -KV_EBADPATH) {
			fprintf(stderr, "block path '%s' accepted\n", bad[i]);
			failures++;
		}
		CHECK(ref.model_dir[0] == 0x5a && ref.hash[0] == 0x5a);
	}
	CHECK(kv_layout_block_parse(NULL, &ref) == -KV_EBADPATH);
	CHECK(kv_layout_block_parse("m_" FP "_r0/abc/de_g4294967295/abcdef.bin",
				    &ref) == 0 && ref.group == 4294967295u);
	CHECK(kv_layout_block_parse("m_" FP "_r0/abc/de_g4294967296/abcdef.bin",
				    &ref) == -KV_EBADPATH);
}

static void test_temp(void)
{
	char a[KV_NAME_MAX + 1], b[KV_NAME_MAX + 1], target[300];
	const char *tail;

	CHECK(kv_layout_temp_name("abcdef.bin", a, sizeof(a)) == 0);
	CHECK(kv_layout_temp_name("abcdef.bin", b, sizeof(b)) == 0);
	CHECK(strcmp(a, b) != 0);
	CHECK(!strncmp(a, "abcdef.bin_", 11) && strlen(a) == 11 + 16 + 4);
	tail = a + 11;
	CHECK(strspn(tail, "0123456789abcdef") == 16 && !strcmp(tail + 16, ".tmp"));
	CHECK(kv_layout_is_temp(a) == 1);
	CHECK(kv_layout_temp_name("x_r0/abc/de_g0/abcdef.bin", a, sizeof(a)) == 0 &&
	      !strncmp(a, "x_r0/abc/de_g0/abcdef.bin_", 26));
	CHECK(kv_layout_temp_name("abcdef.bin", a, 31) == -ENAMETOOLONG);
	CHECK(kv_layout_temp_name("abcdef.bin", a, 32) == 0);
	CHECK(kv_layout_temp_name("", a, sizeof(a)) == -EINVAL);
	memset(target, 'a', sizeof(target));
	target[KV_NAME_MAX - 21] = '\0';
	CHECK(kv_layout_temp_name(target, a, sizeof(a)) == 0);
	target[KV_NAME_MAX - 21] = 'a';
	target[KV_NAME_MAX - 20] = '\0';
	CHECK(kv_layout_temp_name(target, a, sizeof(a)) == -ENAMETOOLONG);

	CHECK(kv_layout_is_temp("config.json_0011223344556677.tmp") == 1);
	CHECK(kv_layout_is_temp("abc.tmp") == 1);
	CHECK(kv_layout_is_temp(".tmp") == 0);
	CHECK(kv_layout_is_temp("abcdef.bin") == 0);
	CHECK(kv_layout_is_temp("abc.tmpx") == 0);
	CHECK(kv_layout_is_temp("") == 0);
	CHECK(kv_layout_is_temp(NULL) == 0);
}

static void test_buckets(void)
{
	unsigned g = 99;

	CHECK(kv_layout_hash_bucket_parse("0af") == 0);
	CHECK(kv_layout_hash_bucket_parse("0AF") == -KV_EBADPATH);
	CHECK(kv_layout_hash_bucket_parse("0a") == -KV_EBADPATH);
	CHECK(kv_layout_hash_bucket_parse("0abc") == -KV_EBADPATH);
	CHECK(kv_layout_group_bucket_parse("3e_g0", KV_LAYOUT_V1, &g) == 0 && g == 0);
	CHECK(kv_layout_group_bucket_parse("3e_g17", KV_LAYOUT_V1, &g) == 0 && g == 17);
	CHECK(kv_layout_group_bucket_parse("3e_g17", KV_LAYOUT_V1, NULL) == 0);
	/* The group is canonical decimal, as block paths require. */
	CHECK(kv_layout_group_bucket_parse("3e_g017", KV_LAYOUT_V1, &g) == -KV_EBADPATH);
	CHECK(kv_layout_group_bucket_parse("3e_g", KV_LAYOUT_V1, &g) == -KV_EBADPATH);
	CHECK(kv_layout_group_bucket_parse("3E_g1", KV_LAYOUT_V1, &g) == -KV_EBADPATH);
	CHECK(kv_layout_group_bucket_parse("3e-g1", KV_LAYOUT_V1, &g) == -KV_EBADPATH);
	CHECK(kv_layout_group_bucket_parse("3e_g4294967296", KV_LAYOUT_V1, &g) == -KV_EBADPATH);
	/* model matching: the dir itself, or the model name, any fingerprint */
	CHECK(kv_layout_model_matches(NULL, "m_0123456789ab"));
	CHECK(kv_layout_model_matches("m_0123456789ab", "m_0123456789ab"));
	CHECK(kv_layout_model_matches("org/m", "org_m_0123456789ab"));
	CHECK(kv_layout_model_matches("org_m", "org_m_0123456789ab"));
	CHECK(!kv_layout_model_matches("org/m", "org_mx_0123456789ab"));
	CHECK(!kv_layout_model_matches("org", "org_m_0123456789ab"));
}

/* Shards of the bucket space: contiguous, even, one owner each. */
static void test_bucket_shard(void)
{
	char name[4];
	unsigned owned[7] = { 0 };
	int last = 0;

	for (unsigned v = 0; v < KV_LAYOUT_TOP_BUCKETS; v++) {
		int s;

		snprintf(name, sizeof(name), "%03x", v);
		s = kv_layout_bucket_shard(name, 7);
		CHECK(s >= last && s < 7);
		if (s >= 0 && s < 7) {
			owned[s]++;
			last = s;
		}
		CHECK(kv_layout_bucket_shard(name, 1) == 0);
		CHECK(kv_layout_bucket_shard(name, KV_LAYOUT_TOP_BUCKETS) == (int)v);
		CHECK(kv_layout_bucket_shard(name, 4) == (int)(v / 1024));
	}
	for (int s = 0; s < 7; s++)
		CHECK(owned[s] == 585 || owned[s] == 586);
	CHECK(kv_layout_bucket_shard("fff", 2) == 1);
	CHECK(kv_layout_bucket_shard("7ff", 2) == 0);
	CHECK(kv_layout_bucket_shard("800", 2) == 1);
	CHECK(kv_layout_bucket_shard("FFF", 2) == -KV_EBADPATH);
	CHECK(kv_layout_bucket_shard("ff", 2) == -KV_EBADPATH);
	CHECK(kv_layout_bucket_shard("fff0", 2) == -KV_EBADPATH);
	CHECK(kv_layout_bucket_shard(NULL, 2) == -KV_EBADPATH);
	CHECK(kv_layout_bucket_shard("fff", 0) == -EINVAL);
	CHECK(kv_layout_bucket_shard("fff", KV_LAYOUT_TOP_BUCKETS + 1) == -EINVAL);
}

/* llm-d before #585: the model name's '/' kept as dirs, parameters as
 * dirs, <hh> buckets with or without _g<G>, 16-hex names of that era. */
static void test_v0(void)
{
	const char *p = "meta-llama/Llama-3.1-8B/block_size_16_blocks_per_file_8/"
			"tp_2_pp_size_1_pcp_size_1/rank_1/bfloat16/3fa/9c/3fa9c04e51d2b7a8.bin";
	const char *pg = "Qwen3-0.6B/block_size_256_blocks_per_file_1/"
			 "tp_1_pp_size_1_pcp_size_1/rank_0/torch.float16/0ab/cd_g2/"
			 "0abcd0123456789a0abcd0123456789a.bin";
	struct kv_block_ref ref;
	struct kv_layout_v0 v0;
	char buf[1024];
	unsigned g;

	CHECK(kv_layout_block_parse(p, &ref) == 0);
	CHECK(ref.layout == KV_LAYOUT_LLMD_V0 && ref.rank == 1 && ref.group == 0 &&
	      !ref.group_dir && !strcmp(ref.dtype, "bfloat16") &&
	      !strcmp(ref.hash, "3fa9c04e51d2b7a8") &&
	      !strcmp(ref.model_dir, "meta-llama/Llama-3.1-8B/block_size_16_blocks_per_file_8/"
				     "tp_2_pp_size_1_pcp_size_1"));
	CHECK(kv_layout_block_path_ref(&ref, buf, sizeof(buf)) == 0 && !strcmp(buf, p));
	CHECK(kv_layout_v0_parse(ref.model_dir, &v0) == 0 &&
	      !strcmp(v0.model_name, "meta-llama/Llama-3.1-8B") && v0.block_size == 16 &&
	      v0.blocks_per_file == 8 && v0.tp == 2 && v0.pp == 1 && v0.pcp == 1);
	CHECK(!strcmp(kv_layout_name(ref.layout), "llmd-v0"));
	CHECK(kv_layout_model_matches("meta-llama/Llama-3.1-8B", ref.model_dir));
	CHECK(kv_layout_model_matches("meta-llama_Llama-3.1-8B", ref.model_dir));
	CHECK(!kv_layout_model_matches("meta-llama/Llama-3.1", ref.model_dir));
	CHECK(kv_layout_block_parse(pg, &ref) == 0 && ref.group == 2 && ref.group_dir &&
	      !strcmp(ref.dtype, "torch.float16"));
	CHECK(kv_layout_block_path_ref(&ref, buf, sizeof(buf)) == 0 && !strcmp(buf, pg));
	CHECK(kv_layout_group_bucket_parse("cd", KV_LAYOUT_LLMD_V0, &g) == 0 && g == 0);
	CHECK(kv_layout_group_bucket_parse("cd", KV_LAYOUT_V1, &g) == -KV_EBADPATH);
	CHECK(kv_layout_v0_params_parse("block_size_16_blocks_per_file_8") == 0);
	CHECK(kv_layout_v0_params_parse("block_size_016_blocks_per_file_8") == -KV_EBADPATH);
	CHECK(kv_layout_v0_params_parse("block_size_16_blocks_per_file_") == -KV_EBADPATH);
	CHECK(kv_layout_v0_rank_parse("rank_12", &g) == 0 && g == 12);
	CHECK(kv_layout_v0_rank_parse("rank_", &g) == -KV_EBADPATH);
	/* Hash and buckets disagree, a bad parameter dir, no model name, a
	 * model name deeper than four dirs: not the layout. */
	CHECK(kv_layout_block_parse("m/block_size_16_blocks_per_file_8/tp_1_pp_size_1_pcp_size_1/"
				    "rank_0/bf16/3fb/9c/3fa9c04e51d2b7a8.bin", &ref) == -KV_EBADPATH);
	CHECK(kv_layout_block_parse("m/block_size_16_blocks_per_file_8/tp_1_pp_1_pcp_1/"
				    "rank_0/bf16/3fa/9c/3fa9c04e51d2b7a8.bin", &ref) == -KV_EBADPATH);
	CHECK(kv_layout_block_parse("block_size_16_blocks_per_file_8/tp_1_pp_size_1_pcp_size_1/"
				    "rank_0/bf16/3fa/9c/3fa9c04e51d2b7a8.bin", &ref) == -KV_EBADPATH);
	CHECK(kv_layout_block_parse("a/b/c/d/e/block_size_16_blocks_per_file_8/"
				    "tp_1_pp_size_1_pcp_size_1/rank_0/bf16/3fa/9c/3fa9c04e51d2b7a8.bin",
				    &ref) == -KV_EBADPATH);
	CHECK(kv_layout_block_parse("a/b/c/d/block_size_16_blocks_per_file_8/"
				    "tp_1_pp_size_1_pcp_size_1/rank_0/bf16/3fa/9c/3fa9c04e51d2b7a8.bin",
				    &ref) == 0);
	CHECK(kv_layout_block_parse("m/../block_size_16_blocks_per_file_8/tp_1_pp_size_1_pcp_size_1/"
				    "rank_0/bf16/3fa/9c/3fa9c04e51d2b7a8.bin", &ref) == -KV_EBADPATH);
}

int main(void)
{
	test_v0();
	test_buckets();
	test_bucket_shard();
	test_hash();
	test_model_names();
	test_dir_parse();
	test_block_paths();
	test_block_parse_rejects();
	test_temp();
	return failures ? 1 : 0;
}
