#!/usr/bin/env bats
# kvtools on a high-latency filesystem: latfs (tests/latfs/latfs.c), a
# FUSE passthrough that delays every operation as a network filesystem's
# round trip does.  Two mounts of one source play two nodes sharing a
# volume.

load test_helper

LATFS=$KV_BIN/../latfs/latfs

setup() {
	common_setup
	requires mount
	[ -x "$LATFS" ] || skip "latfs not built (needs libfuse3-dev)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	SRC=$BATS_TEST_TMPDIR/src
	mkdir -p "$SRC" "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"
	"$LATFS" "$SRC" "$BATS_TEST_TMPDIR/a" -o delay_us=200 -o max_threads=64 ||
		skip "cannot mount a FUSE filesystem here"
	A=$BATS_TEST_TMPDIR/a
	B=
	export KV_ROOT=$A
	make_config > "$BATS_TEST_TMPDIR/config.json"
	CFG=$BATS_TEST_TMPDIR/config.json
	DPID=
}

teardown() {
	kill_daemon
	for m in "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"; do
		mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
	done
	common_teardown
}

mount_b() {
	"$LATFS" "$SRC" "$BATS_TEST_TMPDIR/b" -o delay_us=200 -o max_threads=64
	B=$BATS_TEST_TMPDIR/b
}

# manifest N PREFIX: N blocks of 64 KiB with hashes PREFIX<i>.
manifest() {
	local i
	for ((i = 1; i <= $1; i++)); do
		head -c 65536 /dev/urandom > "$BATS_TEST_TMPDIR/p$2$i"
		printf '{"hash":"%s%011x","file":"%s"}\n' "$2" "$i" "$BATS_TEST_TMPDIR/p$2$i"
	done
}

@test "latfs: put, list, get, verify, check and evict on a filesystem where every operation waits" {
	mountpoint -q "$A"
	manifest 40 abcde > "$BATS_TEST_TMPDIR/m"
	run kvput --config "$CFG" --batch "$BATS_TEST_TMPDIR/m"
	assert_success
	[ "$(grep -c '"status":"ok"' <<<"$output")" -eq 40 ]
	[ "$(kvls --blocks --ndjson | wc -l)" -eq 40 ]
	run kvls --verify
	assert_success
	md=$(kvls -J | jq -r '.models[0].model_dir')
	kvget --model-dir "$md" abcde00000000001 | cmp - "$BATS_TEST_TMPDIR/pabcde1"
	run kvevict --max-bytes 1M --low-bytes 1M --hot 0
	assert_success
	n=$(kvls --blocks --ndjson | wc -l)
	[ "$n" -gt 0 ] && [ "$n" -lt 40 ]
	run kvls --check
	assert_success
	# what the tools saw through the mount is what the source holds
	[ "$(find "$SRC" -name '*.bin' | wc -l)" -eq "$n" ]
}

@test "latfs: two nodes share a volume: writers on both, kvevict on one; no torn block, nothing outside the layout deleted" {
	mount_b
	mkdir -p "$SRC/lost+found" "$SRC/notes"
	echo keep > "$SRC/notes/README"
	echo keep > "$SRC/stray.bin"
	manifest 30 aaaaa > "$BATS_TEST_TMPDIR/ma"
	manifest 30 bbbbb > "$BATS_TEST_TMPDIR/mb"
	kvput --root "$A" --config "$CFG" --batch < /dev/null
	for round in 1 2 3; do
		kvput --root "$A" --config "$CFG" --replace --batch "$BATS_TEST_TMPDIR/ma" > /dev/null &
		pa=$!
		kvput --root "$B" --config "$CFG" --replace --batch "$BATS_TEST_TMPDIR/mb" > /dev/null &
		pb=$!
		kvevict --root "$B" --max-bytes 2M --low-bytes 1M --hot 0 --orphans-after 1h > /dev/null
		wait "$pa"
		wait "$pb"
		# every block either node sees is whole and checks
		run kvls --root "$A" --verify
		assert_success
		run kvls --root "$B" --verify
		assert_success
	done
	kvls --root "$A" --blocks --ndjson | kvget --root "$A" --batch > "$BATS_TEST_TMPDIR/got"
	! grep -q '"error"' "$BATS_TEST_TMPDIR/got"
	[ "$(cat "$SRC/notes/README")" = keep ]
	[ "$(cat "$SRC/stray.bin")" = keep ]
	[ -d "$SRC/lost+found" ]
	[ "$(find "$SRC" -name '*.tmp' | wc -l)" -eq 0 ]
}

@test "latfs: kvoffd writes behind onto it and reads through from it" {
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	kvput --config "$CFG" --batch < /dev/null
	md=$(kvls -J | jq -r '.models[0].model_dir')
	start_daemon --cpu-bytes 4M --slot-bytes 256K --write-policy always
	manifest 8 ccccc > "$BATS_TEST_TMPDIR/m"
	run kvput --daemon "$SOCK" --model-dir "$md" --batch "$BATS_TEST_TMPDIR/m"
	assert_success
	stop_daemon
	[ "$DRC" -eq 0 ]
	[ "$(find "$SRC" -name '*.bin' | wc -l)" -eq 8 ]
	run kvls --verify
	assert_success
	# a fresh daemon finds them on the slow tier and reads them through
	start_daemon --cpu-bytes 4M --slot-bytes 256K
	kvget --daemon "$SOCK" --model-dir "$md" ccccc00000000003 | cmp - "$BATS_TEST_TMPDIR/pccccc3"
	stop_daemon
}
