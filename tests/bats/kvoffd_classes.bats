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

# clean: wait until every block in RAM is on disk too (--write-policy
# always writes each at once).  A put then takes room where the oldest
# blocks are, not the oldest of those already written, which is all a
# put may take while the older ones' writes are still on their way.
clean() {
	wait_for stat_is dirty_blocks 0
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
	# The pool must hold one slot of the largest size.
	run kvoffd --socket "$SOCK" --cpu-bytes 4M --size-classes 16K,8M
	assert_failure 2
	assert_output --partial "one slot of the largest size (8.0M)"
	run kvoffd --socket "$SOCK" --cpu-bytes 4M --slot-bytes 8M
	assert_failure 2
	assert_output --partial "one slot of the largest size (8.0M)"
	run kvoffd --socket "$SOCK" --cpu-bytes 64M --size-classes "$(seq -s, 4 4 68 | sed 's/\([0-9]*\)/\1K/g')"
	assert_failure 2
	assert_output --partial "at most 16"
}

@test "kvoffd --size-classes: every class draws on the one pool" {
	start_daemon --cpu-bytes 64M --size-classes 16K,512K,2M,8M --write-policy always
	# slots: how many blocks of the largest size the pool holds.
	[ "$(stat_of slots)" -eq 8 ]
	[ "$(stat_of pool_bytes)" -eq $((64 << 20)) ]
	[ "$(stat_of slot_bytes)" -eq $((8 << 20)) ]
	grep -q "a 64M pool of 8 slots of 8.0M, in 4 size classes from 16K" "$BATS_TEST_TMPDIR/kvoffd.log"
	# One size alone fills all of it, whichever size.
	run client fill "$SOCK" "$MODEL" 16384 4096
	assert_success
	[ "$(jq .block_bytes <<<"$output")" -eq $((64 << 20)) ] || fail "$output"
	[ "$(stat_of evictions)" -eq 0 ]
	clean
	run client fill "$SOCK" "$MODEL" 2097152 32
	assert_success
	[ "$(jq .block_bytes <<<"$output")" -eq $((64 << 20)) ] || fail "$output"
	# The 16 KiB blocks were older: all of them made way, page by page.
	[ "$(stat_of evictions)" -eq 4096 ]
	[ "$(stat_of blocks)" -eq 32 ]
}

@test "kvoffd: size classes by default, halving --slot-bytes down to 16K" {
	start_daemon --cpu-bytes 64M --slot-bytes 8M
	grep -q "a 64M pool of 8 slots of 8.0M, in 10 size classes from 16K" "$BATS_TEST_TMPDIR/kvoffd.log"
	run client fill "$SOCK" "$MODEL" 16384 1
	[ "$(jq .pool_bytes_used <<<"$output")" -eq 16384 ] || fail "$output"
	# A size between two classes takes the larger: at most twice itself.
	run client fill "$SOCK" "$MODEL" 20480 1
	[ "$(jq .pool_bytes_used <<<"$output")" -eq $((16384 + 32768)) ] || fail "$output"
	stop_daemon
	# A slot size under twice 16K, or whose half is no multiple of 4096,
	# is one class.
	start_daemon --cpu-bytes 64M --slot-bytes 28K
	grep -q "in 1 size class from 28K" "$BATS_TEST_TMPDIR/kvoffd.log"
}

@test "kvoffd: room for a block of one size comes from the least recently used blocks of any size" {
	start_daemon --cpu-bytes 64M --slot-bytes 8M --write-policy always
	# Half the pool in 16 KiB blocks, then half in 8 MiB: full.
	client fill "$SOCK" "$MODEL" 16384 2048 >/dev/null
	run client fill "$SOCK" "$MODEL" 8388608 4
	[ "$(jq .pool_bytes_used <<<"$output")" -eq $((64 << 20)) ] || fail "$output"
	[ "$(stat_of evictions)" -eq 0 ]
	clean
	# Four more 8 MiB blocks (the same keys' next four): the oldest
	# blocks are the small ones, so their pages go, 512 blocks a page.
	run client fill "$SOCK" "$MODEL" 8388608 8
	[ "$(stat_of evictions)" -eq 2048 ]
	[ "$(stat_of blocks)" -eq 8 ]
	# And the other way: a small block takes the page of the oldest large one.
	clean
	run client fill "$SOCK" "$MODEL" 4096 1
	[ "$(stat_of evictions)" -eq 2049 ]
	[ "$(stat_of blocks)" -eq 8 ]
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

@test "kvoffd: a pool of mixed sizes keeps >= 90% of its bytes as payload" {
	# The default classes hold the mix: --slot-bytes 8M alone.
	start_daemon --cpu-bytes 512M --slot-bytes 8M
	# A quarter of the pool in each size, and a little more: past the
	# end, blocks of the later sizes take the pages of the earlier ones.
	for size in 16384 524288 2097152 8388608; do
		client fill "$SOCK" "$MODEL" "$size" $(((128 << 20) / size + 2)) >/dev/null
	done
	run client fill "$SOCK" "$MODEL" 16384 1
	assert_success
	pool=$(jq .pool_bytes <<<"$output") payload=$(jq .block_bytes <<<"$output")
	# What is not payload: the free slots of a page a class has not
	# filled yet, at most a page per class.
	[ $((payload * 10)) -ge $((pool * 9)) ] || fail "$output"
	# One class of the largest size holds the same mix at a fraction.
	stop_daemon
	start_daemon --cpu-bytes 128M --size-classes 8M
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

@test "kvoffd batches: a pipeline sends each piece's second op with a later piece's first, one sendmsg for both" {
	requires strace
	start_daemon --cpu-bytes 128M --size-classes 16K
	# 1,024 x 16 KiB is 16 pieces of 1 MiB; a warm-up round and one
	# more: two put_many and two get_many.  Each sends its first two
	# pieces' first ops, then one message per piece: 18 (two per piece,
	# 32, when each op went alone).
	# LeakSanitizer cannot run under ptrace; the test above checks leaks.
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
		strace -f -e trace=sendmsg,sendto,write -o "$BATS_TEST_TMPDIR/strace" \
		"$OFFD_CLIENT" batch "$SOCK" "$MODEL" 0 1024 1 16384 > "$BATS_TEST_TMPDIR/out"
	jq -e '.bytes == 2 * 1024 * 16384' "$BATS_TEST_TMPDIR/out"
	sends=$(grep -c '^[0-9]* *sendmsg(' "$BATS_TEST_TMPDIR/strace")
	[ "$sends" -eq $((4 * (2 + 16))) ] || fail "$sends sendmsg calls, not $((4 * 18))"
	[ "$(stat_of protocol_errors)" -eq 0 ]
	[ "$(stat_of pins)" -eq 0 ]
}

@test "kvoffd batches: has_many finds every block put, in RAM" {
	start_daemon --cpu-bytes 128M --size-classes 16K
	run client has "$SOCK" "$MODEL" 0 5000 3
	assert_success
	[ "$(jq .checks <<<"$output")" -eq 15000 ]
}
