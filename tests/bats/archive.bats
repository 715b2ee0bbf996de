#!/usr/bin/env bats
# Cache archives (kvget --batch --archive, kvput --archive) and the
# compressibility probe (kvbench probe), run as a user runs them: trees
# as every upstream writer leaves them go out and come back byte for
# byte; damaged archives are refused entry by entry, leaving nothing half
# written behind.

load test_helper

setup() {
	common_setup
	requires python3 jq
	ROOT2=$BATS_TEST_TMPDIR/root2
	mkdir -p "$ROOT2"
	A=$BATS_TEST_TMPDIR/hot.kva
	# Scratch files of a test stay in its own dir, never in the tree.
	cd "$BATS_TEST_TMPDIR"
}

# upstream_tree: $KV_ROOT as every upstream writer fills it; $MANIFEST.
upstream_tree() {
	MANIFEST=$BATS_TEST_TMPDIR/manifest.ndjson
	python3 "$BATS_TEST_DIRNAME/../fixtures/upstream.py" "$KV_ROOT" "$MANIFEST"
}

# bf16_file PATH MIB: bf16 values as a model's KV cache holds them, small
# and normal, so sign and exponent bytes repeat and mantissa bytes do not.
bf16_file() {
	python3 - "$1" "$2" <<'PY'
import random, struct, sys
rng = random.Random(7)
with open(sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2])):
        f.write(b"".join(struct.pack("<f", rng.gauss(0, 0.05))[2:] for _ in range(1 << 19)))
PY
}

# same_tree A B: the same files with the same bytes, writers' temps aside.
same_tree() {
	diff -r -x '*.tmp' "$1" "$2"
}

# no_leftovers DIR: no temp file and no file that kvls --verify refuses.
no_leftovers() {
	[ -z "$(find "$1" -name '*.tmp')" ] || fail "temps left: $(find "$1" -name '*.tmp')"
	run kvls --root "$1" --verify
	[ "$status" -le 1 ] || fail "kvls --verify: $output"
}

@test "archive: every upstream layout and schema comes back byte-identical" {
	upstream_tree
	kvls --blocks --ndjson | kvget --batch --archive "$A" > out.ndjson
	[ "$(jq -c 'select(.hit != true)' out.ndjson | wc -l)" -eq 0 ] || fail "$(cat out.ndjson)"
	[ "$(wc -l < out.ndjson)" -eq "$(wc -l < "$MANIFEST")" ]
	run kvput --root "$ROOT2" --archive "$A"
	assert_success
	[ "$(jq -c 'select(.status != "ok")' <<<"$output" | wc -l)" -eq 0 ]
	same_tree "$KV_ROOT" "$ROOT2"
	# llm-d's pre-#585 layout and both config schemas were among them.
	[ -d "$ROOT2/meta-llama/Llama-3.1-8B/block_size_16_blocks_per_file_8" ]
	grep -l tokens_per_hash "$ROOT2"/*/config.json >/dev/null
	grep -l hash_block_size "$ROOT2"/*/config.json >/dev/null
	no_leftovers "$ROOT2"
	run kvls --root "$ROOT2" --verify
	assert_success
}

@test "archive: a second restore finds every block there and keeps it, as upstream does" {
	upstream_tree
	kvls --blocks --ndjson | kvget --batch --archive "$A" >/dev/null
	kvput --root "$ROOT2" --archive "$A" >/dev/null
	echo junk > "$BATS_TEST_TMPDIR/junk"
	run kvput --root "$ROOT2" --archive "$A"
	assert_success
	[ "$(jq -c 'select(.existed != true)' <<<"$output" | wc -l)" -eq 0 ] || fail "$output"
	same_tree "$KV_ROOT" "$ROOT2"
}

@test "archive: kvget --archive - | kvput --archive - moves a root through a pipe" {
	upstream_tree
	kvls --blocks --ndjson | kvget --batch --archive - | kvput --root "$ROOT2" --archive - > r.ndjson
	[ "$(wc -l < r.ndjson)" -eq "$(wc -l < "$MANIFEST")" ]
	same_tree "$KV_ROOT" "$ROOT2"
}

@test "archive: it is a zstd stream, and bf16 blocks go in byte-shuffled and smaller" {
	requires zstd
	make_config meta-llama/Llama-3.1-8B 1 bfloat16 > config.json
	bf16_file kv.bin 2
	kvput --config config.json 0123456789abcdef kv.bin
	head -c 1M /dev/urandom > noise.bin
	make_config Qwen/Qwen3-0.6B 1 bfloat16 > noise.json
	kvput --config noise.json fedcba9876543210 noise.bin
	run kvget --batch --archive "$A" < <(kvls --blocks --ndjson)
	assert_success
	[ "$(jq -r 'select(.hash == "0123456789abcdef") | .shuffle_bytes' <<<"$output")" = 2 ]
	[ "$(jq -r 'select(.hash == "0123456789abcdef") | .stored_bytes < .size_bytes' <<<"$output")" = true ]
	# Noise does not compress either way: kept as it is, not shuffled.
	[ "$(jq -r 'select(.hash == "fedcba9876543210") | .shuffle_bytes' <<<"$output")" = 1 ]
	zstd -tq "$A"
	kvput --root "$ROOT2" --archive "$A" >/dev/null
	same_tree "$KV_ROOT" "$ROOT2"
}

@test "archive: a cut archive restores what came whole, then says so, leaving nothing half written" {
	upstream_tree
	kvls --blocks --ndjson | kvget --batch --archive "$A" >/dev/null
	n=$(wc -l < "$MANIFEST")
	head -c -1000 "$A" > cut.kva
	run --separate-stderr kvput --root "$ROOT2" --archive cut.kva
	[ "$status" -eq 3 ] || fail "exited $status: $stderr"
	[[ $stderr == *"archive cut short at byte"* ]] || fail "$stderr"
	restored=$(jq -c 'select(.status == "ok")' <<<"$output" | wc -l)
	[ "$restored" -eq $((n - 1)) ] || fail "restored $restored of $n"
	[ "$(find "$ROOT2" -name '*.bin' | wc -l)" -eq $((n - 1)) ]
	no_leftovers "$ROOT2"
}

@test "archive: a flipped byte costs the one entry it lands in; the rest restore" {
	upstream_tree
	kvls --blocks --ndjson | kvget --batch --archive "$A" >/dev/null
	n=$(wc -l < "$MANIFEST")
	for at in 2 3; do
		cp "$A" flipped.kva
		flip_byte flipped.kva $(($(stat -c %s "$A") * at / 5))
		rm -rf "$ROOT2" && mkdir "$ROOT2"
		run --separate-stderr kvput --root "$ROOT2" --archive flipped.kva
		[ "$status" -eq 3 ] || fail "exited $status: $stderr"
		[ "$(jq -c 'select(.status == "error")' <<<"$output" | wc -l)" -eq 1 ] ||
			fail "want one refused entry: $output $stderr"
		[ "$(jq -c 'select(.status == "ok")' <<<"$output" | wc -l)" -eq $((n - 1)) ]
		[[ $stderr == *"entry "*": "* ]] || fail "$stderr"
		no_leftovers "$ROOT2"
	done
}

@test "archive: another version is refused by its number, nothing made" {
	upstream_tree
	kvls --blocks --ndjson | kvget --batch --archive "$A" >/dev/null
	printf '\002' | dd of="$A" bs=1 seek=12 conv=notrunc status=none
	run --separate-stderr kvput --root "$ROOT2" --archive "$A"
	[ "$status" -eq 3 ]
	[[ $stderr == *"archive version 2; this libkv reads version 1"* ]] || fail "$stderr"
	[ -z "$(ls -A "$ROOT2")" ]
}

@test "archive: a declared 10 GB block is refused by its size, not allocated; the rest restore" {
	upstream_tree
	kvls --blocks --ndjson | kvget --batch --archive "$A" >/dev/null
	n=$(wc -l < "$MANIFEST")
	# The first entry's size_bytes: kv(7) puts it 28 bytes into its record,
	# which follows the 28-byte archive header.
	printf '\000\000\000\200\002\000\000\000' | dd of="$A" bs=1 seek=56 conv=notrunc status=none
	run --separate-stderr kvput --root "$ROOT2" --archive "$A"
	[ "$status" -eq 3 ]
	[[ $stderr == *"declares a block of 10737418240 bytes"* ]] || fail "$stderr"
	[ "$(jq -c 'select(.status == "ok")' <<<"$output" | wc -l)" -eq $((n - 1)) ]
	no_leftovers "$ROOT2"
}

@test "archive: what is not an archive is refused with exit 3" {
	head -c 4096 /dev/urandom > junk.kva
	run --separate-stderr kvput --root "$ROOT2" --archive junk.kva
	[ "$status" -eq 3 ]
	[[ $stderr == *"not a kvtools archive"* ]] || fail "$stderr"
	run --separate-stderr kvput --root "$ROOT2" --archive - < /dev/null
	[ "$status" -eq 3 ]
	[[ $stderr == *"empty input"* ]] || fail "$stderr"
	[ -z "$(ls -A "$ROOT2")" ]
}

@test "archive: a miss is answered 1 and the hits still go out; a model dir without config.json is an error" {
	make_config > config.json
	head -c 8K /dev/urandom > b.bin
	kvput --config config.json aaaaaaaaaaaaaaaa b.bin
	D=$(kvls -J | jq -r '.models[0].model_dir')
	printf '%s\n' aaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbb |
		kvget --model-dir "$D" --batch --archive "$A" > out.ndjson || rc=$?
	[ "${rc:-0}" -eq 1 ]
	[ "$(jq -c 'select(.hit == false)' out.ndjson | wc -l)" -eq 1 ]
	kvput --root "$ROOT2" --archive "$A" >/dev/null
	cmp b.bin "$ROOT2/${D}_r0/aaa/aa_g0/aaaaaaaaaaaaaaaa.bin"
	rm "$KV_ROOT/$D/config.json"
	run --separate-stderr kvget --model-dir "$D" --batch --archive "$A" <<<aaaaaaaaaaaaaaaa
	[ "$status" -eq 3 ]
	[[ $stderr == *"config.json"* ]] || fail "$stderr"
}

@test "archive: a failed kvget leaves no archive and no temp beside it" {
	run kvget --batch --archive "$BATS_TEST_TMPDIR/no/such/dir/a.kva" < /dev/null
	[ "$status" -eq 3 ]
	run kvget --batch --archive /dev/full/a.kva < /dev/null
	[ "$status" -eq 3 ]
	[ -z "$(ls "$BATS_TEST_TMPDIR" | grep '\.kva')" ]
}

@test "archive: options that do not go with --archive are usage errors" {
	run kvget --archive "$A" --model-dir x_0123456789ab aaaaa
	[ "$status" -eq 2 ]
	run kvget --batch --archive "$A" --daemon /nonexistent.sock
	[ "$status" -eq 2 ]
	run kvget --batch --archive-level 3
	[ "$status" -eq 2 ]
	run kvput --archive "$A" --config config.json
	[ "$status" -eq 2 ]
	run kvput --archive "$A" aaaaa
	[ "$status" -eq 2 ]
}

@test "probe: bf16-like blocks compress better split into byte planes" {
	bf16_file kv.bin 4
	run kvbench probe --levels 1 -J kv.bin
	assert_success
	none=$(jq '.dtypes[0].results[] | select(.shuffle_bytes == 1) | .ratio' <<<"$output")
	planes=$(jq '.dtypes[0].results[] | select(.shuffle_bytes == 2) | .ratio' <<<"$output")
	jq -en --argjson a "$planes" --argjson b "$none" '$a > $b and $b > 1' >/dev/null ||
		fail "planes $planes, none $none"
	[ "$(jq -r '.dtypes[0].dtype' <<<"$output")" = bfloat16 ]
	[ "$(jq -r '.dtypes[0].pays' <<<"$output")" = null ]
}

@test "probe: on a fast link it says plainly that compression does not pay; on a slow one that it does" {
	bf16_file kv.bin 2
	run kvbench probe --levels 1 --read-bandwidth 1T kv.bin
	assert_success
	assert_output --partial "compression does not pay at 1.0T/s (--read-bandwidth)"
	run kvbench probe --levels 1 --read-bandwidth 1M -J kv.bin
	assert_success
	[ "$(jq -r '.dtypes[0].pays' <<<"$output")" = true ]
	[ "$(jq -r '.link_Bps' <<<"$output")" = 1048576 ]
	# A kvbench run document gives the link as well.
	echo '{"phases":[{"phase":"read","throughput_Bps":1000000000000000}]}' > run.json
	run kvbench probe --levels 1 --from-run run.json -J kv.bin
	assert_success
	[ "$(jq -r '.dtypes[0].pays' <<<"$output")" = false ]
}

@test "probe: samples a root per model dtype, and noise does not compress" {
	make_config meta-llama/Llama-3.1-8B 1 float16 > config.json
	for i in 1 2 3; do
		head -c 256K /dev/urandom > b.bin
		kvput --config config.json "0000000000000$i" b.bin
	done
	run kvbench probe --root "$KV_ROOT" --levels 1 --samples 2
	assert_success
	assert_output --partial "float16: 2 blocks"
	assert_output --partial "do not compress"
	run kvbench probe --root "$ROOT2"
	[ "$status" -eq 1 ]
	run kvbench probe --root "$KV_ROOT" kv.bin
	[ "$status" -eq 2 ]
}

@test "progress: archiving and restoring a slow volume say how far they are on a terminal's stderr" {
	requires mount script
	local latfs=$KV_BIN/../latfs/latfs tree=$KV_BIN/../bench/kvtree slow=$BATS_TEST_TMPDIR/slow
	[ -x "$latfs" ] || skip "latfs not built (needs libfuse3-dev)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	mkdir -p "$BATS_TEST_TMPDIR/src" "$slow"
	"$tree" "$BATS_TEST_TMPDIR/src" 400 > /dev/null
	"$latfs" "$BATS_TEST_TMPDIR/src" "$slow" -o delay_us=3000 ||
		skip "cannot mount a FUSE filesystem here"
	kvls --root "$slow" --blocks --ndjson > "$BATS_TEST_TMPDIR/list"
	run script -qec "kvget --root '$slow' --qd 1 --batch --archive '$A' < '$BATS_TEST_TMPDIR/list' > /dev/null" /dev/null
	local archived=$status out=$output
	rm -rf "$BATS_TEST_TMPDIR/src"/*
	run script -qec "kvput --root '$slow' --qd 1 --archive '$A' > /dev/null" /dev/null
	local restored=$status out2=$output
	umount "$slow"
	[ "$archived" -eq 0 ] && [[ "$out" == *"blocks ("*"bytes) archived"* ]] || fail "kvget: $out"
	[ "$restored" -eq 0 ] && [[ "$out2" == *"bytes) read from"* ]] || fail "kvput: $out2"
}
