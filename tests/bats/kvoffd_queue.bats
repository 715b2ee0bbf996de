#!/usr/bin/env bats
# kvoffd's bounded write-behind queue when the file tier is slower than
# the puts.  The fault injector (tests/fault/) holds every block write at
# its submission until the test creates a gate file, so the queue fills
# at a point set by counts, not by timing: 16 slots of 1 MiB (one size
# class, so that every block takes one), a queue of 8 (half the slots)
# and one writer.  Puts must all succeed, blocks that
# could not be queued must stay readable while in RAM, the blocks dropped
# must be exactly the ones counted, and nothing torn may reach the disk.

load test_helper

MODEL=meta-llama_Llama-3.1-8B_0123456789ab
FI_LIB=$KV_BIN/../tests/libfaultinj.so

setup() {
	common_setup
	[ -f "$FI_LIB" ] || skip "no $FI_LIB (make all builds it)"
	requires python3
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	GATE=$BATS_TEST_TMPDIR/gate
	EVENTS=$BATS_TEST_TMPDIR/events
	METRICS=$BATS_TEST_TMPDIR/metrics
	FI_LOG=$BATS_TEST_TMPDIR/fi.log
	DPID=
}

teardown() {
	touch "$GATE"
	kill_daemon
	common_teardown
}

# start_held_daemon ARGS...: kvoffd under the injector, as start_daemon
# in test_helper.bash.  Every write of a block file is held until $GATE exists
# (300 s at most, a bound for a test gone wrong that one that works never
# reaches), or by $HOLD when that is set (a KVFI_DELAY rule's MS:... part).
start_held_daemon() {
	local hold=${HOLD:-300000:path=_r0/:until=$GATE}
	LD_PRELOAD="$FI_LIB" KVFI_LOG="$FI_LOG" \
	KVFI_DELAY="write:$hold,uring_write:$hold" \
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		start_kvoffd --root "$KV_ROOT" --cpu-bytes 16M --size-classes 1M --write-threads 1 \
		--events "$EVENTS" --metrics-file "$METRICS" "$@"
}

metric_of() {
	sed -n "s/^$1 //p" "$METRICS"
}

# hashes FROM TO [PREFIX]: the block hashes PREFIX<i> (default abcdef00).
hashes() {
	local i
	for i in $(seq "$1" "$2"); do
		echo "${3:-abcdef00}$i"
	done
}

block_file() {
	echo "$KV_ROOT/${MODEL}_r0/${1:0:3}/${1:3:2}_g0/$1.bin"
}

# put_all HASH...: one kvput each, in order, each block with its own
# random content, kept in $BATS_TEST_TMPDIR/blk.HASH.
put_all() {
	local h n=0
	for h in "$@"; do
		random_file "$BATS_TEST_TMPDIR/blk.$h" $((300000 + n++))
		kvput --daemon "$SOCK" --model-dir "$MODEL" "$h" "$BATS_TEST_TMPDIR/blk.$h" ||
			fail "put $h: exit $?"
	done
}

# The hashes that left RAM before any write of theirs landed, from the
# events: a BlockRemoved (cpu) with no BlockStored (fs) before it.
dropped_hashes() {
	python3 - "$EVENTS" <<'PY'
import json, sys
on_disk, dropped = set(), []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "BlockStored" and e["tier"] == "fs":
        on_disk.add(e["hash"])
    elif e["event"] == "BlockRemoved" and e["tier"] == "cpu" and e["hash"] not in on_disk:
        dropped.append(e["hash"])
print(" ".join(dropped))
PY
}

# assert_gets "DROPPED" HASH...: every block not dropped reads back byte
# for byte through the daemon; every dropped one is in neither tier, and
# asking for it (a miss that needs a slot to read through) costs no other
# unwritten block.
assert_gets() {
	local h dropped=" $1 " drops
	shift
	drops=$(stat_of wb_drops)
	for h in "$@"; do
		if [[ $dropped == *" $h "* ]]; then
			run kvget --daemon "$SOCK" --model-dir "$MODEL" --exists "$h"
			[ "$status" -eq 1 ] || fail "dropped $h: --exists exit $status"
			run kvget --daemon "$SOCK" --model-dir "$MODEL" -o "$BATS_TEST_TMPDIR/got" "$h"
			[ "$status" -eq 1 ] || fail "dropped $h: exit $status"
		else
			kvget --daemon "$SOCK" --model-dir "$MODEL" -o "$BATS_TEST_TMPDIR/got" "$h"
			cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/blk.$h"
		fi
	done
	[ "$(stat_of wb_drops)" -eq "$drops" ]
}

# assert_disk "DROPPED" HASH...: the file tier holds exactly the blocks
# not dropped, each whole and checksummed, and no temp file.
assert_disk() {
	local h dropped=" $1 " n=0
	shift
	for h in "$@"; do
		if [[ $dropped == *" $h "* ]]; then
			[ ! -e "$(block_file "$h")" ] || fail "dropped $h is on disk"
		else
			cmp "$(block_file "$h")" "$BATS_TEST_TMPDIR/blk.$h"
			n=$((n + 1))
		fi
	done
	[ -z "$(find "$KV_ROOT" -name '*.tmp')" ]
	run kvls --verify --root "$KV_ROOT"
	assert_success
	assert_output --partial "$n blocks: $n verified, 0 mismatched, 0 without checksum"
}

@test "kvoffd queue: the injector holds block writes until the gate opens" {
	# A delay that is not a number of milliseconds is refused, not ignored.
	run env LD_PRELOAD="$FI_LIB" KVFI_DELAY=uring_write:soon /bin/true
	[ "$status" -eq 125 ]
	assert_output --partial "bad rule in KVFI_DELAY: 'uring_write:soon'"
	start_held_daemon --write-policy always
	random_file "$BATS_TEST_TMPDIR/b" 4096
	kvput --daemon "$SOCK" --model-dir "$MODEL" abcdef0001 "$BATS_TEST_TMPDIR/b"
	[ "$(stat_of wb_queue_depth)" -eq 1 ]
	wait_for grep -Eq "^$DPID delay (uring_)?write .*/abcdef0001\.bin_.*\.tmp$" "$FI_LOG"
	[ "$(stat_of spills)" -eq 0 ]
	[ ! -e "$(block_file abcdef0001)" ]
	touch "$GATE"
	wait_for stat_is spills 1
	cmp "$(block_file abcdef0001)" "$BATS_TEST_TMPDIR/b"
}

@test "kvoffd queue: always, storage held: refused writes wait in RAM, full-pool puts drop the oldest unwritten blocks, counted" {
	local drops dropped slots cap want
	start_held_daemon --write-policy always
	put_all $(hashes 10 33)
	slots=$(stat_of slots) cap=$(stat_of wb_queue_capacity)
	[ "$slots" -eq 16 ] && [ "$cap" -eq 8 ]
	[ "$(stat_of puts)" -eq 24 ]
	[ "$(stat_of wb_queue_depth)" -eq "$cap" ]
	# The first $cap puts were queued; the next ones were refused and stay
	# in RAM unwritten; each put past the pool's size then had to evict
	# one of those, oldest first.
	drops=$(stat_of wb_drops)
	[ "$drops" -eq $((24 - slots)) ]
	[ "$(stat_of evictions)" -eq "$drops" ]
	[ "$(stat_of dirty_blocks)" -eq "$slots" ]
	dropped=$(dropped_hashes)
	want=$(hashes $((10 + cap)) $((10 + cap + drops - 1)) | paste -sd' ')
	[ "$dropped" = "$want" ]
	assert_gets "$dropped" $(hashes 10 33)
	[ "$(stat_of spills)" -eq 0 ]
	# Storage catches up: the refused blocks are written without waiting
	# for an eviction or SIGTERM.
	touch "$GATE"
	wait_for stat_is dirty_blocks 0
	wait_for stat_is wb_queue_depth 0
	[ "$(stat_of spills)" -eq "$slots" ]
	[ "$(stat_of wb_drops)" -eq "$drops" ]
	assert_disk "$dropped" $(hashes 10 33)
	kill -TERM "$DPID"
	wait "$DPID"
	DPID=
	[ "$(metric_of kv_offload_writebehind_drops_total)" -eq "$drops" ]
	[ "$(metric_of kv_offload_evictions_total)" -eq "$drops" ]
	[ "$(metric_of kv_offload_writebehind_queue_depth)" -eq 0 ]
}

@test "kvoffd queue: on-evict, storage held: a put waits for a queued write only until storage is seen stalled, then drops; SIGTERM drains the rest" {
	local drops dropped
	start_held_daemon
	put_all $(hashes 10 33)
	[ "$(stat_of puts)" -eq 24 ]
	# No write has landed, so every eviction lost its block.
	[ "$(stat_of spills)" -eq 0 ]
	drops=$(stat_of wb_drops)
	[ "$drops" -gt 0 ]
	[ "$(stat_of evictions)" -eq "$drops" ]
	[ "$(stat_of blocks)" -eq $((24 - drops)) ]
	dropped=$(dropped_hashes)
	[ "$(wc -w <<<"$dropped")" -eq "$drops" ]
	assert_gets "$dropped" $(hashes 10 33)
	# SIGTERM while the writes are still held: the daemon must wait for
	# them and write every block left in RAM before it exits 0.
	kill -TERM "$DPID"
	wait_for test ! -e "$SOCK"
	kill -0 "$DPID"
	touch "$GATE"
	wait "$DPID"
	DPID=
	assert_disk "$dropped" $(hashes 10 33)
	[ "$(metric_of kv_offload_writebehind_drops_total)" -eq "$drops" ]
	[ "$(metric_of kv_offload_bytes_total'{direction="spill"}')" -eq \
	  "$(find "$KV_ROOT" -name '*.bin' -printf '%s\n' | awk '{ n += $1 } END { print n }')" ]
}

@test "kvoffd queue: slow storage, four clients at once, either policy: every put succeeds and exactly the dropped blocks are missing" {
	local policy k pids drops dropped all
	all=$(for k in 1 2 3 4; do hashes 10 21 "abcdef$k"; done)
	for policy in on-evict always; do
		rm -rf "$KV_ROOT" "$EVENTS"
		mkdir -p "$KV_ROOT"
		# Each block write waits 20 ms: storage that keeps going, only
		# slower than the puts, so whether and what drops is up to the
		# machine; the counts must agree whatever it is.
		HOLD=20:path=_r0/ start_held_daemon --write-policy "$policy"
		pids=()
		for k in 1 2 3 4; do
			put_all $(hashes 10 21 "abcdef$k") &
			pids+=($!)
		done
		for k in "${pids[@]}"; do
			wait "$k"
		done
		[ "$(stat_of puts)" -eq 48 ]
		kill -TERM "$DPID"
		wait "$DPID"
		DPID=
		drops=$(metric_of kv_offload_writebehind_drops_total)
		dropped=$(dropped_hashes)
		[ "$(wc -w <<<"$dropped")" -eq "$drops" ]
		assert_disk "$dropped" $all
		# What reached the disk is served after a restart, by read-through.
		HOLD=20:path=_r0/ start_held_daemon --write-policy "$policy"
		assert_gets "$dropped" $all
		[ "$(stat_of readthroughs)" -eq $((48 - drops)) ]
		kill -TERM "$DPID"
		wait "$DPID"
		DPID=
	done
}

@test "kvoffd: a burst of ten pools on healthy storage loses nothing: every acknowledged put reaches the disk" {
	local i man=$BATS_TEST_TMPDIR/manifest
	make_config > "$BATS_TEST_TMPDIR/cfg.json"
	start_kvoffd --root "$KV_ROOT" --cpu-bytes 8M || fail "$(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	for i in $(seq 100 139); do
		head -c 2097152 /dev/urandom > "$BATS_TEST_TMPDIR/b$i"
		echo "{\"hash\":\"abcdef00$i\",\"file\":\"$BATS_TEST_TMPDIR/b$i\"}"
	done > "$man"
	run kvput --daemon "$SOCK" --config "$BATS_TEST_TMPDIR/cfg.json" --batch "$man"
	[ "$(grep -c '"status":"ok"' <<< "$output")" -eq 40 ] || fail "$output"
	[ "$(stat_of wb_drops)" -eq 0 ] || fail "wb_drops $(stat_of wb_drops)"
	stop_daemon
	[ "$DRC" -eq 0 ]
	[ "$(find "$KV_ROOT" -name '*.bin' | wc -l)" -eq 40 ] || fail "$(find "$KV_ROOT" -name '*.bin' | wc -l) of 40 on disk"
}

@test "kvoffd queue: versions of one key written behind at once land in order; the newest is what is read back" {
	local h=abcdef77 v f
	# The first write of the key is held 1.5 s, so its later versions'
	# writes, on the other threads, would land before it.
	HOLD=1500:count=1:path=$h start_held_daemon --write-policy always --write-threads 4
	for v in 1 2 3; do
		random_file "$BATS_TEST_TMPDIR/v$v" 1000000
		kvput --daemon "$SOCK" --model-dir "$MODEL" "$h" "$BATS_TEST_TMPDIR/v$v"
	done
	# Push it out of RAM once every write has landed: read through.
	sleep 2
	put_all $(hashes 10 40 fafafa00)
	sleep 2
	kvget --daemon "$SOCK" --model-dir "$MODEL" -o "$BATS_TEST_TMPDIR/got" "$h"
	cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/v3" || fail "an older version came back"
	stop_daemon
	cmp "$(block_file "$h")" "$BATS_TEST_TMPDIR/v3" || fail "an older version is on disk"
}
