#!/usr/bin/env bats
# kvtools.vllm (vLLM's secondary tier) beside the programs: a tree the
# tier writes is what kvls, kvget and kvevict know, a tree kvput writes
# with vLLM's native config is what the tier finds, and its uses move
# kvls' LAST USE and kvevict's order.  The tier is driven through the
# STAND-IN of vLLM in tests/python/vllm_standin (vLLM cannot be
# installed here), by tests/python/vllm_harness.py.

load test_helper

setup() {
	common_setup
	requires /usr/bin/python3
	/usr/bin/python3 -c 'import numpy' 2>/dev/null || skip "needs python3-numpy"
	HARNESS=$BATS_TEST_DIRNAME/../python/vllm_harness.py
	ENTRY="{\"root_dir\": \"$KV_ROOT\", \"resolution_s\": 0}"
}

tier() {
	/usr/bin/python3 "$HARNESS" main "$ENTRY" "$@"
}

@test "vllm tier: a tree it writes passes kvls --check and kvget reads it" {
	run tier store 12 1
	assert_success
	assert_output "stored 12, 0 jobs failed"
	run kvls --root "$KV_ROOT" --check
	assert_success
	run kvls --root "$KV_ROOT" --verify
	assert_success
	assert_output --partial "12 verified, 0 mismatched"
	mkdir "$BATS_TEST_TMPDIR/x"
	MD=$(tier export 12 1 "$BATS_TEST_TMPDIR/x")
	while read -r line; do
		h=$(jq -r .hash <<<"$line")
		g=$(jq -r .group <<<"$line")
		kvget --root "$KV_ROOT" --model-dir "$MD" --group "$g" "$h" | cmp - "$BATS_TEST_TMPDIR/x/$h"
	done < "$BATS_TEST_TMPDIR/x/manifest"
}

@test "vllm tier: finds what kvput --config wrote with vLLM's native schema" {
	requires jq
	mkdir "$BATS_TEST_TMPDIR/x"
	MD=$(tier export 10 2 "$BATS_TEST_TMPDIR/x")
	run kvput --root "$KV_ROOT" --config "$BATS_TEST_TMPDIR/x/config.json" \
		--batch "$BATS_TEST_TMPDIR/x/manifest"
	assert_success
	# kvput named the model dir as vLLM does, config.json byte for byte.
	cmp "$KV_ROOT/$MD/config.json" "$BATS_TEST_TMPDIR/x/config.json"
	run tier check 10 2
	assert_success
	assert_output "loaded 10 of 10, 0 missed"
}

@test "vllm tier: touch and loads move LAST USE; kvevict --dry-run spares those blocks" {
	requires jq
	tier store 6 3
	find "$KV_ROOT" -name '*.bin' -exec touch -a -d '3 days ago' {} +
	# The first 3 blocks of seed 3 are used: a touch, then a load.
	run tier touch 2 3
	assert_success
	run tier check 3 3
	assert_success
	run kvls --root "$KV_ROOT" --blocks --ndjson
	assert_success
	recent=$(jq -r 'select(.last_use_ns / 1e9 > (now - 3600)) | .hash' <<<"$output" | sort)
	[ "$(wc -l <<<"$recent")" -eq 3 ]
	mkdir "$BATS_TEST_TMPDIR/x"
	tier export 3 3 "$BATS_TEST_TMPDIR/x" >/dev/null
	[ "$recent" = "$(jq -r .hash "$BATS_TEST_TMPDIR/x/manifest" | sort)" ]
	# 100K (6 blocks, config.json) down to 60K: three go, the unused.
	run kvevict --root "$KV_ROOT" --dry-run --hot 0 --max-bytes 80K --low-bytes 60K --ndjson
	assert_success
	[ "${#lines[@]}" -eq 3 ]
	for h in $recent; do
		refute_output --partial "$h"
	done
}

@test "vllm tier: max_bytes evicts the least recently used before a store passes it" {
	ENTRY="{\"root_dir\": \"$KV_ROOT\", \"max_bytes\": 200000}"
	run tier store 8 4
	assert_success
	find "$KV_ROOT" -name '*.bin' -exec touch -a -d '1 day ago' {} +
	run tier store 8 5
	assert_success
	[ "$(find "$KV_ROOT" -name '*.bin' | wc -l)" -le 12 ]
	# The newest stay.
	run tier check 8 5
	assert_success
	[ "$(find "$KV_ROOT" -name '*.bin' -printf '%s\n' | awk '{ s += $1 } END { print s }')" -le 200000 ]
}

@test "vllm tier: EIO from the volume fails the jobs and lookups miss; nothing hangs" {
	requires mount
	local latfs=$KV_BIN/../latfs/latfs src=$BATS_TEST_TMPDIR/src slow=$BATS_TEST_TMPDIR/slow
	[ -x "$latfs" ] || skip "latfs not built (needs libfuse3-dev)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	mkdir -p "$src" "$slow"
	"$latfs" "$src" "$slow" -o "eio_when=$BATS_TEST_TMPDIR/fail" ||
		skip "cannot mount a FUSE filesystem here"
	MNT=$slow
	ENTRY="{\"root_dir\": \"$slow\"}"
	run tier store 6 7
	assert_success
	touch "$BATS_TEST_TMPDIR/fail"
	run tier store 6 8
	assert_failure 1
	assert_line "stored 6, 1 jobs failed"
	assert_line --partial "[EIO]"
	run tier check 6 7
	assert_failure 1
	assert_line "loaded 0 of 6, 6 missed"
	assert_line --partial "kvtools: load job"
	rm "$BATS_TEST_TMPDIR/fail"
	run tier check 6 7
	assert_success
}
