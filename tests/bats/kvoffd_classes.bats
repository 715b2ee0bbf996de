#!/usr/bin/env bats
# kvoffd's size classes and batched requests, driven through the C
# client (bench/offd_client.c, libkv's _many calls) as a connector would.
# tests/python covers the same calls from Python, read-through of
# batches, and the wire spoken by hand (pipelining, hostile batches).

load test_helper

MODEL=meta-llama_Llama-3.1-8B_0123456789ab

setup_file() {
	export OFFD_CLIENT=$BATS_FILE_TMPDIR/offd_client
	cp "$KV_BIN/../bench/offd_client" "$OFFD_CLIENT"
}

setup() {
	common_setup
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	DPID=
}

teardown() {
	kill_daemon
	common_teardown
}

client() {
	"$OFFD_CLIENT" "$@"
}

stat_of() {
	kvoffd --stats "$SOCK" | jq ".$1"
}

@test "kvoffd --size-classes: usage errors" {
	run kvoffd --socket "$SOCK" --cpu-bytes 64M --size-classes 2M,16K
	assert_failure 2
	assert_output --partial "must increase"
	run kvoffd --socket "$SOCK" --cpu-bytes 64M --size-classes 16K,1000
	assert_failure 2
	assert_output --partial "multiple of 4096"
	run kvoffd --socket "$SOCK" --cpu-bytes 64M --size-classes 16K,junk
	assert_failure 2
	run kvoffd --socket "$SOCK" --cpu-bytes 64M --size-classes 16K --slot-bytes 2M
	assert_failure 2
	assert_output --partial "exclude each other"
	# Each class's share must hold one of its slots.
	run kvoffd --socket "$SOCK" --cpu-bytes 8M --size-classes 16K,8M
	assert_failure 2
	assert_output --partial "size class"
	run kvoffd --socket "$SOCK" --cpu-bytes 64M --size-classes "$(seq -s, 4 4 68 | sed 's/\([0-9]*\)/\1K/g')"
	assert_failure 2
	assert_output --partial "at most 16"
}

@test "kvoffd --size-classes: each class gets an equal share of the pool" {
	start_daemon --cpu-bytes 64M --size-classes 16K,512K,2M,8M
	# 16 MiB each: 1024 + 32 + 8 + 2 slots, the largest 8 MiB.
	[ "$(stat_of slots)" -eq 1066 ]
	[ "$(stat_of pool_bytes)" -eq $((64 << 20)) ]
	[ "$(stat_of slot_bytes)" -eq $((8 << 20)) ]
	grep -q "a 64M pool of 1066 slots in 4 size classes up to 8.0M" "$BATS_TEST_TMPDIR/kvoffd.log"
}

@test "kvoffd --size-classes: a block takes the smallest class that holds it" {
	start_daemon --cpu-bytes 64M --size-classes 16K,512K,2M,8M
	for size in 16384 16385 524288 2097152 8388608; do
		before=$(stat_of pool_bytes_used)
		run client fill "$SOCK" "$MODEL" "$size" 1
		assert_success
		used=$(jq .pool_bytes_used <<<"$output")
		echo "$size: $before -> $used"
		case $size in
		16384) [ $((used - before)) -eq 16384 ] ;;
		16385|524288) [ $((used - before)) -eq 524288 ] ;;
		2097152) [ $((used - before)) -eq 2097152 ] ;;
		8388608) [ $((used - before)) -eq 8388608 ] ;;
		esac
	done
	random_file "$BATS_TEST_TMPDIR/big" $(((8 << 20) + 1))
	run client put "$SOCK" "$MODEL" 0 0 abcdef01 "$BATS_TEST_TMPDIR/big"
	assert_failure 3
	assert_output --partial "too large"
}

@test "kvoffd --size-classes: a pool of mixed sizes keeps >= 90% of its bytes as payload" {
	start_daemon --cpu-bytes 128M --size-classes 16K,512K,2M,8M
	# More blocks of each size than its class holds: every class ends full
	# of the newest ones.
	for size in 16384 524288 2097152 8388608; do
		client fill "$SOCK" "$MODEL" "$size" $(((32 << 20) / size + 2)) >/dev/null
	done
	run client fill "$SOCK" "$MODEL" 16384 1
	assert_success
	pool=$(jq .pool_bytes <<<"$output") used=$(jq .pool_bytes_used <<<"$output")
	payload=$(jq .block_bytes <<<"$output")
	[ "$used" -eq "$pool" ] || fail "$output"
	[ $((payload * 10)) -ge $((pool * 9)) ] || fail "$output"
	# One class of the largest size holds the same mix at a fraction.
	stop_daemon
	start_daemon --cpu-bytes 128M --slot-bytes 8M
	run client fill "$SOCK" "$MODEL" 16384 8
	payload=$(jq .block_bytes <<<"$output") used=$(jq .pool_bytes_used <<<"$output")
	[ $((payload * 100)) -lt "$used" ] || fail "$output"
}

@test "kvoffd batches: put_many and get_many round-trip every byte, in one class and many" {
	start_daemon --cpu-bytes 64M --size-classes 16K,512K,2M
	run client batch "$SOCK" "$MODEL" 0 300 2 16384
	assert_success
	run client batch "$SOCK" "$MODEL" 1 5 2 2097152
	assert_success
	[ "$(stat_of protocol_errors)" -eq 0 ]
	# Two rounds of 300 and of 5, after a warm-up round each.
	[ "$(stat_of puts)" -eq $((3 * 300 + 3 * 5)) ]
	[ "$(stat_of pins)" -eq 0 ]
	[ "$(stat_of slots_used)" -eq 305 ]
}

@test "kvoffd batches: has_many finds every block put, in RAM" {
	start_daemon --cpu-bytes 128M --size-classes 16K
	run client has "$SOCK" "$MODEL" 0 5000 3
	assert_success
	[ "$(jq .checks <<<"$output")" -eq 15000 ]
}
