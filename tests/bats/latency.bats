#!/usr/bin/env bats
# kvtools on a high-latency filesystem: latfs (tests/latfs/latfs.c), a
# FUSE passthrough that delays every operation as a network filesystem's
# round trip does.  Two mounts of one source play two nodes sharing a
# volume (tests/bats/shared_volume.bash).

load test_helper
load shared_volume
load last_use

LATFS=$KV_BIN/../latfs/latfs

setup() {
	common_setup
	requires mount jq
	[ -x "$LATFS" ] || skip "latfs not built (needs libfuse3-dev)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	SRC=$BATS_TEST_TMPDIR/src
	A=$BATS_TEST_TMPDIR/a
	B=$BATS_TEST_TMPDIR/b
	mkdir -p "$SRC" "$A" "$B"
	"$LATFS" "$SRC" "$A" -o delay_us=200 -o max_threads=64 ||
		skip "cannot mount a FUSE filesystem here"
	"$LATFS" "$SRC" "$B" -o delay_us=200 -o max_threads=64
	sv_env
}

teardown() {
	sv_teardown "$A" "$B" "$BATS_TEST_TMPDIR/slow"
}

@test "latfs: put, list, get, verify, check and evict where every operation waits" {
	sv_one_node
	# what the tools saw through the mounts is what the source holds
	[ "$(find "$SRC" -name '*.bin' | wc -l)" -eq "$n" ]
}

@test "latfs: two nodes share a volume: writers on both, kvevict on one; no torn block, nothing outside the layout deleted" {
	sv_two_nodes
}

@test "latfs: kvoffd writes behind onto it, another node's kvoffd reads through from it" {
	sv_offd
}

@test "latfs: two nodes, one kvevict shard on each, delete what one run deletes" {
	requires python3
	sv_shards
}

@test "latfs: two nodes: kvwatch sees the reads on one, kvevict on the other evicts by them" {
	sv_kvwatch
}

@test "latfs: kvoffd over it: a client gone while its HAS is asked of the slow tier costs nothing; others are served meanwhile, and SIGTERM waits for the answer" {
	local slow=$BATS_TEST_TMPDIR/slow model=meta-llama_Llama-3.1-8B_0123456789ab hpid
	mkdir -p "$slow"
	# Each operation a tenth of a second: a HAS of a block in this
	# directory (four lookups) takes longer than the client lives.
	mkdir -p "$SRC/${model}_r0/abc/de_g0"
	"$LATFS" "$SRC" "$slow" -o delay_us=100000 -o max_threads=8
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	start_kvoffd --root "$slow" --cpu-bytes 4M --slot-bytes 1M
	kvget --daemon "$SOCK" --model-dir "$model" --exists abcdef0001 &
	hpid=$!
	sleep 0.2
	kill -KILL "$hpid"
	wait "$hpid" || true
	# Served while the dead client's HAS may still be asked.
	random_file "$BATS_TEST_TMPDIR/blk" 5000
	kvput --daemon "$SOCK" --model-dir "$model" abcdef0002 "$BATS_TEST_TMPDIR/blk"
	kvget --daemon "$SOCK" --model-dir "$model" abcdef0002 > "$BATS_TEST_TMPDIR/got"
	cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/blk"
	# A HAS the slow tier answers.
	run kvget --daemon "$SOCK" --model-dir "$model" --exists abcdef0003
	assert_failure 1
	stop_daemon TERM
	[ "$DRC" -eq 0 ] || fail "kvoffd exited $DRC: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	umount "$slow" 2>/dev/null || umount -l "$slow"
}
