#!/usr/bin/env bats
# kvoffd over several file tiers: RAM, then a small bounded "local" tier,
# then a larger "shared" one, each its own tmpfs.  Blocks leaving RAM go
# to the local tier; past its capacity its oldest move down; a hit below
# is copied up; a full or failing shared tier costs counted drops, never
# a failed or stalled put; kill -9 loses nothing that reached a tier.

load test_helper

MODEL=meta-llama_Llama-3.1-8B_0123456789ab
FI_LIB=$KV_BIN/../tests/libfaultinj.so
BLOCK=900000	# bytes: one per 1 MiB slot, four to the 4 MiB local tier

setup() {
	common_setup
	requires mount python3
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	EVENTS=$BATS_TEST_TMPDIR/events
	METRICS=$BATS_TEST_TMPDIR/metrics
	LOCAL=$BATS_TEST_TMPDIR/local
	SHARED=$BATS_TEST_TMPDIR/shared
	mkdir -p "$LOCAL" "$SHARED"
	mount -t tmpfs -o size=64m tmpfs "$LOCAL"
	mount -t tmpfs -o "size=${SHARED_SIZE:-256m}" tmpfs "$SHARED"
	DPID=
}

teardown() {
	kill_daemon
	umount -l "$LOCAL" "$SHARED" 2>/dev/null || true
	common_teardown
}

# start_tiers [ARGS...]: RAM of 4 slots of 1 MiB over local (4 MiB) and
# shared; $PRELOAD runs it under the injector.
start_tiers() {
	LD_PRELOAD=${PRELOAD:-} \
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		start_kvoffd --tier "local:$LOCAL:4M" --tier "shared:$SHARED" \
		--cpu-bytes 4M --slot-bytes 1M --write-threads 1 \
		--events "$EVENTS" --metrics-file "$METRICS" "$@"
}

block_file() {
	echo "$1/${MODEL}_r0/${2:0:3}/${2:3:2}_g0/$2.bin"
}

# put_all HASH...: one kvput each, in order, each with its own content.
put_all() {
	local h
	for h in "$@"; do
		random_file "$BATS_TEST_TMPDIR/blk.$h" "$BLOCK"
		kvput --daemon "$SOCK" --model-dir "$MODEL" "$h" "$BATS_TEST_TMPDIR/blk.$h" ||
			fail "kvput $h failed"
	done
}

# get_same HASH: kvget through the daemon returns the bytes put.
get_same() {
	kvget --daemon "$SOCK" --model-dir "$MODEL" "$1" > "$BATS_TEST_TMPDIR/out.$1" ||
		fail "kvget $1 failed"
	cmp "$BATS_TEST_TMPDIR/out.$1" "$BATS_TEST_TMPDIR/blk.$1" || fail "$1 differs"
}

# tier_stat TIER NAME: a member of --stats' tiers[TIER].
tier_stat() {
	kvoffd --stats "$SOCK" |
		python3 -c "import json,sys; print(json.load(sys.stdin)['tiers'][$1]['$2'])"
}

# settle: until no write, load or move is queued or running.
# trace_lookups: strace the daemon's threads' path lookups into
# $BATS_TEST_TMPDIR/strace, each line led by its thread's id (the loop
# thread's is $DPID); untrace stops it.
trace_lookups() {
	strace -f -p "$DPID" -e trace=%file,%stat,statx -o "$BATS_TEST_TMPDIR/strace" \
		2>"$BATS_TEST_TMPDIR/strace.err" &
	SPID=$!
	wait_for grep -q attached "$BATS_TEST_TMPDIR/strace.err"
}

untrace() {
	kill "$SPID"
	wait "$SPID" || true
}

settle() {
	wait_for stat_is wb_queue_depth 0
}

count_blocks() {
	find "$1" -name '*.bin' | wc -l
}

hashes() {
	local i
	for i in $(seq "$1" "$2"); do
		echo "abcdef$i"
	done
}

@test "kvoffd --tier: usage errors say what is wrong" {
	run kvoffd --tier "local:$LOCAL" --tier "shared:$SHARED" --socket "$SOCK" --cpu-bytes 4M
	assert_failure 2
	assert_output --partial "needs a SIZE: only the last tier may be unbounded"
	run kvoffd --tier "nvme:$LOCAL:1G" --socket "$SOCK" --cpu-bytes 4M
	assert_failure 2
	assert_output --partial "the kind is local or shared"
	run kvoffd --tier "local:$LOCAL:0" --tier "shared:$SHARED" --socket "$SOCK" --cpu-bytes 4M
	assert_failure 2
	run kvoffd --root "$KV_ROOT" --tier "shared:$SHARED" --socket "$SOCK" --cpu-bytes 4M
	assert_failure 2
	assert_output --partial "exclude each other"
	run kvoffd --tier "shared:$SHARED" --promote sometimes --socket "$SOCK" --cpu-bytes 4M
	assert_failure 2
	run kvoffd --tier "local:$LOCAL:1X" --socket "$SOCK" --cpu-bytes 4M
	assert_failure 2
	run kvoffd --tier "local:$BATS_TEST_TMPDIR/none:1G" --tier "shared:$SHARED" \
		--socket "$SOCK" --cpu-bytes 4M
	assert_failure 3
	# One directory as two tiers: a move down would remove the only copy.
	run kvoffd --tier "local:$SHARED:1G" --tier "shared:$SHARED/." --socket "$SOCK" --cpu-bytes 4M
	assert_failure 3
	assert_output --partial "are the same directory"
}

@test "kvoffd tiers: past the local capacity the oldest move to shared, each block in one place, every byte readable" {
	start_tiers --promote never
	put_all $(hashes 10 29)
	settle
	# RAM holds the 4 newest; local at most 4 MiB; the rest are below.
	[ "$(count_blocks "$LOCAL")" -le 4 ] || fail "local holds $(count_blocks "$LOCAL")"
	[ "$(du -sb "$LOCAL" | cut -f1)" -le $((4 << 20 + 64 << 10)) ]
	for h in $(hashes 10 15); do
		[ -f "$(block_file "$SHARED" "$h")" ] || fail "$h not demoted"
		[ ! -e "$(block_file "$LOCAL" "$h")" ] || fail "$h still local"
	done
	demoted=$(tier_stat 0 demotions)
	[ "$demoted" -eq "$(count_blocks "$SHARED")" ]
	[ "$(tier_stat 0 blocks)" -eq "$(count_blocks "$LOCAL")" ]
	[ "$(tier_stat 0 drops)" -eq 0 ]
	# Leaving local is announced there, arriving below too.
	[ "$(grep -c '"event":"BlockRemoved".*"tier":"local"' "$EVENTS")" -eq "$demoted" ]
	[ "$(grep -c '"event":"BlockStored".*"tier":"fs"' "$EVENTS")" -eq "$demoted" ]
	for h in $(hashes 10 29); do
		get_same "$h"
	done
	stop_daemon
	grep -q '^kv_offload_tier_demotions_total{tier="0",kind="local"} [1-9]' "$METRICS"
	grep -q '^kv_offload_tier_blocks{tier="1",kind="shared"} ' "$METRICS"
}

@test "kvoffd tiers: a block only shared storage has is read through and copied up on the first hit" {
	h=abcdef77
	random_file "$BATS_TEST_TMPDIR/blk.$h" "$BLOCK"
	# As another node's writer left it: a plain file in the layout.
	mkdir -p "$(dirname "$(block_file "$SHARED" "$h")")"
	cp "$BATS_TEST_TMPDIR/blk.$h" "$(block_file "$SHARED" "$h")"
	start_tiers
	get_same "$h"
	settle
	[ "$(tier_stat 1 hits)" -eq 1 ]
	[ "$(tier_stat 0 promotions)" -eq 1 ]
	cmp "$(block_file "$LOCAL" "$h")" "$BATS_TEST_TMPDIR/blk.$h"
	grep -q '"event":"BlockStored".*"hash":"abcdef77".*"tier":"local"' "$EVENTS"
	# Out of RAM again, the next miss is served by the local tier.
	put_all $(hashes 10 14)
	settle
	get_same "$h"
	[ "$(tier_stat 0 hits)" -eq 1 ]
	[ "$(tier_stat 1 hits)" -eq 1 ]
}

@test "kvoffd tiers: a read-through takes the class of its model's blocks, its tiers never asked from the loop" {
	requires strace
	local spec h
	# As another node's writer left them: blocks of 20,000 bytes and one
	# of 900,000, in one model and group.
	for spec in abcdef71:20000 abcdef72:900000 abcdef73:20000; do
		h=${spec%:*}
		random_file "$BATS_TEST_TMPDIR/blk.$h" "${spec#*:}"
		mkdir -p "$(dirname "$(block_file "$SHARED" "$h")")"
		cp "$BATS_TEST_TMPDIR/blk.$h" "$(block_file "$SHARED" "$h")"
	done
	start_tiers --promote never
	trace_lookups
	get_same abcdef71	# no size known: asked on a worker, then 20,000
	get_same abcdef72	# into a slot for 20,000 first: too small, read again
	get_same abcdef73	# 20,000 again: read at once
	untrace
	# Workers looked the files up; the loop thread (the daemon's pid) never.
	grep -q "abcdef71" "$BATS_TEST_TMPDIR/strace"
	grep -q "abcdef73" "$BATS_TEST_TMPDIR/strace"
	run grep "^$DPID .*abcdef7" "$BATS_TEST_TMPDIR/strace"
	assert_failure
	[ "$(stat_of readthroughs)" -eq 3 ]
	[ "$(tier_stat 1 errors)" -eq 0 ]
}

@test "kvoffd tiers: HAS and batch HAS and LOOKUP entries that miss RAM ask the shared tier on a worker, not the loop" {
	requires strace
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	local h top
	top=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	# As another node's writer left them; abcdef8f is nowhere.
	for h in abcdef81 abcdef82 abcdef83; do
		random_file "$BATS_TEST_TMPDIR/blk.$h" 20000
		mkdir -p "$(dirname "$(block_file "$SHARED" "$h")")"
		cp "$BATS_TEST_TMPDIR/blk.$h" "$(block_file "$SHARED" "$h")"
	done
	start_tiers
	trace_lookups
	kvget --daemon "$SOCK" --model-dir "$MODEL" --exists abcdef81
	run kvget --daemon "$SOCK" --model-dir "$MODEL" --exists abcdef8f
	assert_failure 1
	# A batch of HAS, then of LOOKUP (on disk: read through after it).
	run env PYTHONPATH="$top/python" KVTOOLS_LIBKV="$KV_BIN/../libkv.so" /usr/bin/python3 -c "
import kvtools
with kvtools.connect('$SOCK') as c:
    print(c.has_many('$MODEL', ['abcdef82', 'abcdef8f', 'abcdef83']))
    got = c.get_many('$MODEL', ['abcdef8f', 'abcdef83'])
    print(got[0], got[1] == open('$BATS_TEST_TMPDIR/blk.abcdef83', 'rb').read())"
	untrace
	[ "$status" -eq 0 ] || fail "$output"
	assert_output "[2, 0, 2]
None True"
	# Workers looked the files up; the loop thread (the daemon's pid) never.
	grep -q "abcdef8f" "$BATS_TEST_TMPDIR/strace"
	grep -q "abcdef82" "$BATS_TEST_TMPDIR/strace"
	run grep "^$DPID .*abcdef8" "$BATS_TEST_TMPDIR/strace"
	assert_failure
}

@test "kvoffd tiers: --promote second-hit copies up on the second miss, never never" {
	h=abcdef77
	random_file "$BATS_TEST_TMPDIR/blk.$h" "$BLOCK"
	# As another node's writer left it: a plain file in the layout.
	mkdir -p "$(dirname "$(block_file "$SHARED" "$h")")"
	cp "$BATS_TEST_TMPDIR/blk.$h" "$(block_file "$SHARED" "$h")"
	start_tiers --promote second-hit
	get_same "$h"
	settle
	[ ! -e "$(block_file "$LOCAL" "$h")" ]
	put_all $(hashes 10 14)		# pushes it out of RAM
	settle
	get_same "$h"
	settle
	[ "$(tier_stat 1 hits)" -eq 2 ]
	[ "$(tier_stat 0 promotions)" -eq 1 ]
	[ -f "$(block_file "$LOCAL" "$h")" ]
	stop_daemon
	rm -f "$(block_file "$LOCAL" "$h")"
	start_tiers --promote never
	for i in 1 2 3; do
		get_same "$h"
		put_all $(hashes 10 14)
		settle
	done
	[ "$(tier_stat 1 hits)" -eq 3 ]
	[ "$(tier_stat 0 promotions)" -eq 0 ]
	[ ! -e "$(block_file "$LOCAL" "$h")" ]
}

@test "kvoffd tiers: a full shared tier costs counted drops, never a failed put" {
	umount "$SHARED"
	mount -t tmpfs -o size=3m tmpfs "$SHARED"
	start_tiers
	put_all $(hashes 10 29)
	settle
	drops=$(tier_stat 0 drops)
	[ "$drops" -gt 0 ]
	[ "$(tier_stat 0 errors)" -eq 0 ]
	[ "$(tier_stat 1 errors)" -eq "$drops" ]
	[ "$(count_blocks "$LOCAL")" -le 4 ]
	# What a tier still holds reads back whole; nothing torn anywhere.
	for h in $(hashes 10 29); do
		if [ -e "$(block_file "$LOCAL" "$h")" ] || [ -e "$(block_file "$SHARED" "$h")" ]; then
			get_same "$h"
		fi
	done
	[ -z "$(find "$SHARED" "$LOCAL" -name '*.tmp')" ]
	grep -q "no lower tier took it" "$BATS_TEST_TMPDIR/kvoffd.log"
}

@test "kvoffd tiers: a full local filesystem passes writes down whatever its SIZE says; nothing is lost" {
	umount "$LOCAL"
	mount -t tmpfs -o size=1m tmpfs "$LOCAL"
	LD_PRELOAD= start_kvoffd --tier "local:$LOCAL:100M" --tier "shared:$SHARED" \
		--cpu-bytes 4M --slot-bytes 1M --write-threads 1 --events "$EVENTS"
	put_all $(hashes 10 29)
	settle
	stop_daemon
	# Every block reached a tier: the local one while it had room, the
	# shared one after; and the daemon said why once.
	for h in $(hashes 10 29); do
		[ -e "$(block_file "$LOCAL" "$h")" ] || [ -e "$(block_file "$SHARED" "$h")" ] ||
			fail "$h lost"
	done
	[ "$(count_blocks "$SHARED")" -ge 19 ]
	[ "$(grep -c 'is full' "$BATS_TEST_TMPDIR/kvoffd.log")" -eq 1 ]
	[ -z "$(find "$SHARED" "$LOCAL" -name '*.tmp')" ]
}

@test "kvoffd tiers: a failing shared tier under the injector: puts succeed, errors and drops counted" {
	[ -f "$FI_LIB" ] || skip "no $FI_LIB (make all builds it)"
	PRELOAD=$FI_LIB KVFI_FAIL="write:EIO:path=$SHARED/,uring_write:EIO:path=$SHARED/" \
		start_tiers
	put_all $(hashes 10 25)
	settle
	[ "$(tier_stat 0 drops)" -gt 0 ]
	[ "$(tier_stat 1 errors)" -eq "$(tier_stat 0 drops)" ]
	[ "$(count_blocks "$SHARED")" -eq 0 ]
	[ "$(count_blocks "$LOCAL")" -le 4 ]
	for h in $(hashes 22 25); do
		get_same "$h"		# RAM still has the newest
	done
}

@test "kvoffd tiers: kill -9 and restart: both tiers re-indexed, nothing that reached a tier lost" {
	start_tiers
	put_all $(hashes 10 29)
	settle
	kill -KILL "$DPID"
	wait "$DPID" || true
	DPID=
	on_tiers=$(find "$LOCAL" "$SHARED" -name '*.bin' | sed 's|.*/||; s|\.bin$||' | sort -u)
	[ "$(echo "$on_tiers" | wc -l)" -ge 16 ]
	local_n=$(count_blocks "$LOCAL")
	start_tiers
	grep -q "tier 0, local, $LOCAL: $local_n blocks" "$BATS_TEST_TMPDIR/kvoffd.log"
	[ "$(tier_stat 0 blocks)" -eq "$local_n" ]
	for h in $on_tiers; do
		get_same "$h"
	done
	# The rebuilt LRU still bounds the tier.
	put_all $(hashes 40 49)
	settle
	[ "$(du -sb "$LOCAL" | cut -f1)" -le $((4 << 20 + 64 << 10)) ]
	stop_daemon
	[ "$DRC" -eq 0 ]
}

@test "kvoffd tiers: --write-policy always puts every block on shared storage at once" {
	start_tiers --write-policy always
	put_all abcdef10 abcdef11
	settle
	cmp "$(block_file "$SHARED" abcdef10)" "$BATS_TEST_TMPDIR/blk.abcdef10"
	cmp "$(block_file "$SHARED" abcdef11)" "$BATS_TEST_TMPDIR/blk.abcdef11"
	[ "$(count_blocks "$LOCAL")" -eq 0 ]
	# Leaving RAM they go to the local tier as well, as a cache of shared.
	put_all $(hashes 12 17)
	settle
	[ -f "$(block_file "$LOCAL" abcdef10)" ] || [ -f "$(block_file "$LOCAL" abcdef11)" ]
	[ "$(tier_stat 0 drops)" -eq 0 ]
}

@test "kvevict refuses a tier kvoffd manages unless --force; a second kvoffd refuses it too" {
	start_tiers
	put_all $(hashes 10 19)
	settle
	before=$(count_blocks "$LOCAL")
	run kvevict --root "$LOCAL" --max-bytes 1M
	assert_failure 2
	assert_output --partial "is a tier kvoffd manages (pid $DPID socket $SOCK)"
	[ "$(count_blocks "$LOCAL")" -eq "$before" ]
	run kvevict --root "$LOCAL" --max-bytes 1M --dry-run
	assert_success
	run kvoffd --tier "local:$LOCAL:4M" --tier "shared:$BATS_TEST_TMPDIR" \
		--socket "$BATS_TEST_TMPDIR/other.sock" --cpu-bytes 4M --slot-bytes 1M
	assert_failure 3
	assert_output --partial "another kvoffd does"
	run kvevict --root "$SHARED" --max-bytes 1M
	assert_success
	run kvevict --root "$LOCAL" --max-bytes 1M --force
	assert_success
	stop_daemon
	# A claim its daemon left behind binds nobody.
	[ -f "$LOCAL/.kvoffd.lock" ]
	run kvevict --root "$LOCAL" --max-bytes 1
	assert_success
}

@test "kvoffd tiers: restarted with a smaller SIZE, the local tier moves its excess down at once" {
	start_tiers
	put_all $(hashes 10 29)
	stop_daemon
	[ "$(count_blocks "$LOCAL")" -ge 3 ]
	start_kvoffd --tier "local:$LOCAL:1M" --tier "shared:$SHARED" --cpu-bytes 4M --slot-bytes 1M
	settle
	[ "$(count_blocks "$LOCAL")" -eq 1 ]
	[ "$(tier_stat 0 blocks)" -eq 1 ]
	for h in $(hashes 10 29); do
		get_same "$h"
	done
}

@test "kvoffd tiers: thousands of small blocks through a bounded tier: its LRU stays exact through every move" {
	client=$KV_BIN/../bench/offd_client
	[ -x "$client" ] || skip "no $client (make all builds it)"
	start_kvoffd --tier "local:$LOCAL:8M" --tier "shared:$SHARED" --cpu-bytes 1M --slot-bytes 4K
	"$client" zipf-fill "$SOCK" "$MODEL" 6000
	"$client" zipf "$SOCK" "$MODEL" 6000 6000 0.6 7 > "$BATS_TEST_TMPDIR/zipf.json"
	settle
	n_local=$(count_blocks "$LOCAL")
	[ "$n_local" -eq "$(tier_stat 0 blocks)" ]
	[ "$(tier_stat 0 bytes)" -eq $((n_local * 4096)) ]
	[ "$(tier_stat 0 bytes)" -le $((8 << 20)) ]
	[ "$(tier_stat 0 demotions)" -ge 1000 ]
	[ "$(tier_stat 0 errors)" -eq 0 ]
	# Another pass reads through both tiers; the client checks every
	# block's bytes and fails on a wrong one.
	"$client" zipf "$SOCK" "$MODEL" 6000 3000 0.6 8 > "$BATS_TEST_TMPDIR/zipf2.json"
	grep -q '"gets":3000' "$BATS_TEST_TMPDIR/zipf2.json"
	stop_daemon
	[ "$DRC" -eq 0 ]
	# A restart finds the same blocks the index had.
	start_kvoffd --tier "local:$LOCAL:8M" --tier "shared:$SHARED" --cpu-bytes 1M --slot-bytes 4K
	[ "$(tier_stat 0 blocks)" -eq "$(count_blocks "$LOCAL")" ]
}

@test "kvoffd tiers: a block's model dir carries its config.json to every tier it lands on; kvls --check passes on each" {
	make_config > "$BATS_TEST_TMPDIR/config.json"
	random_file "$BATS_TEST_TMPDIR/seed" 4096
	# the model's config.json is on shared storage, as vLLM leaves it
	kvput --root "$SHARED" --config "$BATS_TEST_TMPDIR/config.json" abcdef0000000001 "$BATS_TEST_TMPDIR/seed"
	md=$(kvls --root "$SHARED" -J | jq -r '.models[0].model_dir')
	start_tiers --promote never
	local h
	for h in $(hashes 10 29); do
		random_file "$BATS_TEST_TMPDIR/blk.$h" "$BLOCK"
		kvput --daemon "$SOCK" --model-dir "$md" "$h" "$BATS_TEST_TMPDIR/blk.$h"
	done
	settle
	stop_daemon
	[ "$(count_blocks "$LOCAL")" -ge 1 ]
	cmp "$SHARED/$md/config.json" "$LOCAL/$md/config.json"
	run kvls --root "$LOCAL" --check -J
	assert_success
	jq -e '.summary.problems == 0' <<<"$output" || fail "$output"
	run kvls --root "$SHARED" --check -J
	assert_success
}

@test "kvoffd tiers: kvput --daemon --config gives a new model dir's config.json to every tier its blocks land on, none having it before" {
	make_config > "$BATS_TEST_TMPDIR/config.json"
	start_tiers --promote never
	local h
	for h in $(hashes 30 49); do
		random_file "$BATS_TEST_TMPDIR/blk.$h" "$BLOCK"
		kvput --daemon "$SOCK" --config "$BATS_TEST_TMPDIR/config.json" "$h" \
			"$BATS_TEST_TMPDIR/blk.$h" > /dev/null
	done
	settle
	stop_daemon
	[ "$(count_blocks "$LOCAL")" -ge 1 ] && [ "$(count_blocks "$SHARED")" -ge 1 ]
	md=$(kvls --root "$SHARED" -J | jq -r '.models[0].model_dir')
	# Each tier holds the model dir whole: vLLM's reader and kvls find
	# the config beside the blocks.
	[ -f "$LOCAL/$md/config.json" ] && [ -f "$SHARED/$md/config.json" ]
	for t in "$LOCAL" "$SHARED"; do
		run kvls --root "$t" --check -J
		assert_success
		jq -e '.summary.problems == 0' <<<"$output" || fail "$t: $output"
	done
}
