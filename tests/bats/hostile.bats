#!/usr/bin/env bats
# Hostile trees and neighbours: whatever a writer with access to the root
# plants there, no program reads, writes or serves anything outside it.

load test_helper

setup() {
	common_setup
	CFG=$BATS_TEST_TMPDIR/cfg.json
	make_config > "$CFG"
	OUTSIDE=$BATS_TEST_TMPDIR/outside
	mkdir -p "$OUTSIDE"
	echo "root:x:0:0:secret" > "$OUTSIDE/passwd"
	H=abcde00000000000000000000000000001
	random_file "$BATS_TEST_TMPDIR/blk" 4096
	kvput --config "$CFG" "$H" "$BATS_TEST_TMPDIR/blk"
	BLOCK=$(find "$KV_ROOT" -name "$H.bin")
	MDIR=$(basename "$(dirname "$(dirname "$(dirname "$BLOCK")")")")
	MDIR=${MDIR%_r0}
	SOCK=$BATS_TEST_TMPDIR/offd.sock
}

teardown() {
	kill_daemon
	common_teardown
}

# plant_file: the block itself becomes a symlink to a file outside.
plant_file() {
	rm "$BLOCK"
	ln -s "$OUTSIDE/passwd" "$BLOCK"
}

# plant_bucket: its bucket dir becomes a symlink to a dir outside that
# holds a file of the block's name.
plant_bucket() {
	local bucket
	bucket=$(dirname "$BLOCK")
	rm -r "$bucket"
	cp "$OUTSIDE/passwd" "$OUTSIDE/$H.bin"
	ln -s "$OUTSIDE" "$bucket"
}

@test "hostile: kvget never reads a block through a symlink, file or bucket" {
	for plant in plant_file plant_bucket; do
		setup
		$plant
		run --separate-stderr kvget --model-dir "$MDIR" "$H"
		[ "$status" -eq 3 ] || fail "$plant: kvget exited $status"
		[[ "$output" != *secret* ]]
		[[ "$stderr" == kvget:* ]]
		run kvget --model-dir "$MDIR" --exists "$H"
		[ "$status" -ne 0 ] || fail "$plant: --exists said yes"
		run --separate-stderr kvget --batch <<< "{\"model_dir\":\"$MDIR\",\"hash\":\"$H\"}"
		[[ "$output" != *secret* ]]
		[ "$(jq -r .hit <<< "$output")" = false ] || fail "$plant: batch: $output"
	done
}

@test "hostile: kvput never writes through a bucket dir symlinked out of the root" {
	plant_bucket
	rm "$OUTSIDE/$H.bin"
	H2=abcde11111111111111111111111111111
	run --separate-stderr kvput --config "$CFG" "$H2" "$BATS_TEST_TMPDIR/blk"
	[ "$status" -eq 3 ] || fail "kvput exited $status"
	[ -z "$(ls "$OUTSIDE" | grep -v '^passwd$')" ] || fail "written outside: $(ls "$OUTSIDE")"
	run kvput --config "$CFG" --batch <<< "{\"hash\":\"$H2\",\"file\":\"$BATS_TEST_TMPDIR/blk\"}"
	[ -z "$(ls "$OUTSIDE" | grep -v '^passwd$')" ] || fail "written outside: $(ls "$OUTSIDE")"
}

@test "hostile: kvoffd's read-through never serves a block through a symlink" {
	requires kvoffd
	for plant in plant_file plant_bucket; do
		setup
		$plant
		start_daemon --cpu-bytes 8M || fail "kvoffd: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
		run kvget --daemon "$SOCK" --model-dir "$MDIR" "$H"
		[ "$status" -ne 0 ] || fail "$plant: kvget --daemon exited 0"
		[[ "$output" != *secret* ]]
		stop_daemon
	done
}

@test "hostile: a client that ALLOCs every slot and commits none leaves the others room" {
	requires kvoffd
	start_daemon --cpu-bytes 2M --slot-bytes 256K || fail "kvoffd: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	coproc HOG { "$KV_BIN/../bench/offd_client" hog "$SOCK" "$MDIR" 4096; }
	read -r word n err <&"${HOG[0]}"
	[ "$word" = hog ] && [ "$n" -eq 4 ] || fail "hog took $n slots of 8 ($err)"
	[[ "$err" == *quota* ]] || fail "hog stopped on: $err"
	# The other half still serves everyone else.
	for i in 1 2 3; do
		run kvput --daemon "$SOCK" --model-dir "$MDIR" "abcde0000000000000000000000000000$i" \
			"$BATS_TEST_TMPDIR/blk"
		[ "$status" -eq 0 ] || fail "put $i beside the hog: $output"
	done
	run kvoffd --stats "$SOCK"
	[ "$(jq .alloc_refused <<< "$output")" -ge 1 ]
	# Gone, its allocations go back.
	exec {HOG[1]}>&-
	wait "$HOG_PID"
	run kvoffd --stats "$SOCK"
	[ "$(jq .slots_used <<< "$output")" -le 4 ] || fail "slots used after the hog left: $output"
	stop_daemon
}

@test "hostile: out of descriptors, kvoffd stops polling, logs once, counts, and recovers" {
	requires kvoffd prlimit /usr/bin/python3
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	local fifo=$BATS_TEST_TMPDIR/ready line
	mkfifo "$fifo"
	prlimit --nofile=48:48 kvoffd --root "$KV_ROOT" --socket "$SOCK" --cpu-bytes 8M \
		--ready-fd 3 3>"$fifo" 2>>"$BATS_TEST_TMPDIR/kvoffd.log" &
	DPID=$!
	read -r line <"$fifo" || fail "kvoffd: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	# 100 connections held open: far more than the daemon has fds for.
	coproc CONNS { /usr/bin/python3 -c '
import socket, sys
s = []
for _ in range(100):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(sys.argv[1])
    s.append(c)
print("connected", flush=True)
sys.stdin.read()
' "$SOCK"; }
	read -r word <&"${CONNS[0]}"
	[ "$word" = connected ]
	sleep 2
	# Once per interval, not once per wakeup.
	[ "$(grep -c 'cannot accept' "$BATS_TEST_TMPDIR/kvoffd.log")" -le 2 ] ||
		fail "log: $(head -c 2000 "$BATS_TEST_TMPDIR/kvoffd.log")"
	exec {CONNS[1]}>&-
	wait "$CONNS_PID"
	# The held connections are gone: new clients get served again.
	run kvput --daemon "$SOCK" --model-dir "$MDIR" abcde00000000000000000000000000009 \
		"$BATS_TEST_TMPDIR/blk"
	[ "$status" -eq 0 ] || fail "kvput after recovery: $output"
	run kvoffd --stats "$SOCK"
	[ "$(jq .accept_errors <<< "$output")" -ge 1 ]
	stop_daemon
}
