#!/usr/bin/env bats
# Trees written by each upstream writer's rules (tests/fixtures/upstream.py:
# llm-d's fs backend, vLLM's native tier old, current and newest, extra
# config fields, 16/32/64-hex hashes, writers' temps): every program must
# list, read, verify and evict them as they are.

load test_helper

setup() {
	common_setup
	requires python3
	MANIFEST=$BATS_TEST_TMPDIR/manifest.ndjson
	python3 "$BATS_TEST_DIRNAME/../fixtures/upstream.py" "$KV_ROOT" "$MANIFEST"
}

@test "upstream trees: kvls names every model from its config.json, whatever the schema" {
	run kvls -J
	assert_success
	for model in meta-llama/Llama-3.1-8B 'Qwen/Qwen3-32B-ü中文🙂' Qwen/Qwen3-0.6B \
		meta-llama/Llama-3.3-70B-Instruct deepseek-ai/DeepSeek-V3; do
		jq -e --arg m "$model" '.models[] | select(.model == $m)' <<<"$output" >/dev/null ||
			fail "kvls -J lacks $model: $output"
	done
	[ "$(jq -r '.models[] | select(.model == "Qwen/Qwen3-0.6B") | .dtype' <<<"$output")" = float16 ]
	[ "$(jq -r '.models[] | select(.model == "Qwen/Qwen3-0.6B") | .tp' <<<"$output")" = 2 ]
	[ "$(jq -r '.models[] | select(.model == "Qwen/Qwen3-0.6B") | .schema' <<<"$output")" = vllm ]
	[ "$(jq -r '.models[] | select(.model == "deepseek-ai/DeepSeek-V3") | .schema' <<<"$output")" = vllm ]
	[ "$(jq -r '.models[] | select(.fingerprint == "" | not) | select(.model == "meta-llama/Llama-3.1-8B") | .schema' <<<"$output")" = llm-d ]
}

@test "upstream trees: kvls lists llm-d's pre-#585 layout by model, dtype and parallel sizes" {
	run kvls -J
	assert_success
	v0=$(jq -c '[.models[] | select(.layout == "llmd-v0") | {model, dtype, tp, pp, pcp, schema, files}] | sort_by(.model)' <<<"$output")
	[ "$v0" = '[{"model":"Qwen3-0.6B","dtype":"float16","tp":1,"pp":1,"pcp":1,"schema":"llmd-v0","files":4},{"model":"meta-llama/Llama-3.1-8B","dtype":"bfloat16","tp":2,"pp":1,"pcp":1,"schema":"llmd-v0","files":8}]' ] ||
		fail "llmd-v0 models: $v0"
	run kvls --blocks --ndjson --model meta-llama/Llama-3.1-8B
	assert_success
	[ "$(jq -r .path <<<"$output" | grep -c /block_size_16_blocks_per_file_8/)" -eq 8 ]
	[ "$(jq -r .path <<<"$output" | grep -vc /block_size_16_blocks_per_file_8/)" -eq 12 ]
	run kvls --blocks --ndjson --rank 1 --model meta-llama/Llama-3.1-8B
	[ "$(jq -r .path <<<"$output" | grep -c '/rank_1/')" -eq 4 ]
}

@test "upstream trees: kvls --check finds no problem in a correctly named tree" {
	run kvls --check
	assert_success
	assert_output --partial "0 problems"
}

@test "upstream trees: kvls --blocks lists exactly the blocks each writer wrote" {
	run kvls --blocks --ndjson
	assert_success
	diff <(jq -r .path <<<"$output" | sort) <(jq -r .path "$MANIFEST" | sort)
}

@test "upstream trees: kvget --batch reads every block back" {
	run kvget --batch --no-touch < "$MANIFEST"
	assert_success
	[ "$(jq -c 'select(.hit != true)' <<<"$output" | wc -l)" -eq 0 ] ||
		fail "misses: $output"
	[ "$(wc -l <<<"$output")" -eq "$(wc -l < "$MANIFEST")" ]
}

@test "upstream trees: kvput --config names the dir and writes config.json as each writer does" {
	local root2=$BATS_TEST_TMPDIR/root2 cfg h=00112233445566778899aabbccddeeff
	mkdir -p "$root2"
	printf 'block' > "$BATS_TEST_TMPDIR/blk"
	for cfg in "$KV_ROOT"/*/config.json; do
		dir=$(basename "$(dirname "$cfg")")
		run kvput --root "$root2" --config "$cfg" "$h" "$BATS_TEST_TMPDIR/blk"
		assert_success
		cmp "$cfg" "$root2/$dir/config.json" || fail "config.json of $dir differs"
		[ -f "$root2/${dir}_r0/001/12_g0/$h.bin" ] || fail "no block under ${dir}_r0"
	done
}

@test "upstream trees: kvevict removes every writer's blocks, never a config.json" {
	run kvevict --max-bytes 1 --low-bytes 0 --hot 0 --orphans-after 0 --force --dir-grace 0
	assert_success
	[ "$(find "$KV_ROOT" -name '*.bin' | wc -l)" -eq 0 ]
	[ "$(find "$KV_ROOT" -name config.json | wc -l)" -eq 5 ]
}

@test "upstream trees: vLLM's CRC32C is checked by kvget and kvls --verify; a flipped byte is caught" {
	local rec path
	rec=$(jq -c 'select(.writer == "vllm")' "$MANIFEST" | head -1)
	path=$KV_ROOT/$(jq -r .path <<<"$rec")
	getfattr -n user.vllm.kv_crc32c "$path" >/dev/null 2>&1 ||
		skip "no user xattrs under $BATS_TEST_TMPDIR"
	run kvls --verify
	assert_success
	run kvget --no-touch --batch <<<"$rec"
	[ "$(jq -r .hit <<<"$output")" = true ]
	flip_byte "$path" 100
	run --separate-stderr kvget --no-touch --model-dir "$(jq -r .model_dir <<<"$rec")" \
		"$(jq -r .hash <<<"$rec")"
	[ "$status" -eq 3 ] || fail "kvget exited $status"
	[[ "$stderr" == *"checksum mismatch"* ]] || fail "stderr: $stderr"
	[ -z "$output" ]
	run kvls --verify
	[ "$status" -ne 0 ]
	assert_output --partial "$(jq -r .path <<<"$rec")"
}
