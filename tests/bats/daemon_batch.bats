#!/usr/bin/env bats
# kvput --batch and kvget --batch through kvoffd: the manifests, records
# and exit codes of the file-tier batches, one connection per batch, and
# --config's config.json on disk so the daemon's write-behind lands in a
# complete model dir.

load test_helper

setup() {
	common_setup
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	DPID=
	CFG=$BATS_TEST_TMPDIR/config.json
	make_config meta-llama/Llama-3.1-8B > "$CFG"
	MODEL=meta-llama_Llama-3.1-8B_0123456789ab
}

teardown() {
	kill_daemon
	common_teardown
}

# The model dir vLLM names for $CFG.
cfg_model_dir() {
	echo "meta-llama_Llama-3.1-8B_$(py_fingerprint "$CFG")"
}

# blocks N: random payloads $BATS_TEST_TMPDIR/p1..pN of different sizes
# and a manifest of them, odd ones by file and even ones in base64, the
# last one for rank 1 group 2.
blocks() {
	local n=$1 i
	for ((i = 1; i <= n; i++)); do
		random_file "$BATS_TEST_TMPDIR/p$i" $((i * 70001))
		if ((i == n)); then
			echo "{\"hash\":\"cafe0000$i\",\"file\":\"$BATS_TEST_TMPDIR/p$i\",\"rank\":1,\"group\":2}"
		elif ((i % 2)); then
			echo "{\"hash\":\"cafe0000$i\",\"file\":\"$BATS_TEST_TMPDIR/p$i\"}"
		else
			echo "{\"hash\":\"CAFE0000$i\",\"data_b64\":\"$(base64 -w0 "$BATS_TEST_TMPDIR/p$i")\"}"
		fi
	done > "$BATS_TEST_TMPDIR/manifest"
}

# same_blocks DIR N: DIR/cafe0000<i>.bin is payload i, for i in 1..N.
same_blocks() {
	local i
	for ((i = 1; i <= $2; i++)); do
		cmp "$1/cafe0000$i.bin" "$BATS_TEST_TMPDIR/p$i"
	done
}

@test "daemon batch: kvput --batch in, kvget --batch out, byte for byte" {
	requires jq
	blocks 6
	start_daemon --cpu-bytes 32M
	run --separate-stderr kvput --daemon "$SOCK" --model-dir "$MODEL" --batch \
		"$BATS_TEST_TMPDIR/manifest"
	assert_success
	[ -z "$stderr" ] || fail "stderr: $stderr"
	[ "$(jq -s 'map(select(.status == "ok")) | length' <<< "$output")" -eq 6 ]
	jq -s -e 'map(select(.line == 4))[0] | .hash == "cafe00004" and .size_bytes == 280004
		and .path == "'"${MODEL}_r0/caf/e0_g0/cafe00004.bin"'"' <<< "$output"
	jq -s -e 'map(select(.line == 6))[0].path == "'"${MODEL}_r1/caf/e0_g2/cafe00006.bin"'"' \
		<<< "$output"
	[ "$(stat_of puts)" -eq 6 ]
	# The on-evict policy left them in RAM only: the gets below are the daemon's.
	[ ! -e "$KV_ROOT/${MODEL}_r0" ]
	mkdir "$BATS_TEST_TMPDIR/out"
	{
		printf 'cafe0000%d\n' 1 2 3 4 5
		echo "{\"path\":\"${MODEL}_r1/caf/e0_g2/cafe00006.bin\"}"
	} | kvget --daemon "$SOCK" --model-dir "$MODEL" --batch -o "$BATS_TEST_TMPDIR/out" \
		> "$BATS_TEST_TMPDIR/records"
	same_blocks "$BATS_TEST_TMPDIR/out" 6
	[ "$(jq -s 'map(select(.hit)) | length' < "$BATS_TEST_TMPDIR/records")" -eq 6 ]
	jq -s -e 'map(select(.line == 6))[0].size_bytes == 420006' < "$BATS_TEST_TMPDIR/records"
	[ "$(stat_of gets)" -eq 6 ]
	[ "$(stat_of pins)" -eq 0 ]
}

@test "daemon batch: \$KV_DAEMON routes batches too; empty, it does not" {
	requires jq
	blocks 3
	start_daemon --cpu-bytes 16M
	KV_DAEMON=$SOCK kvput --model-dir "$MODEL" --batch < "$BATS_TEST_TMPDIR/manifest" > /dev/null
	[ "$(stat_of puts)" -eq 3 ]
	[ ! -e "$KV_ROOT/${MODEL}_r0" ]
	run env KV_DAEMON="$SOCK" kvget --model-dir "$MODEL" --batch <<< cafe00001
	assert_success
	jq -e '.hit and .size_bytes == 70001' <<< "$output"
	# Empty: straight to the root, where nothing was written yet.
	run env KV_DAEMON= kvget --model-dir "$MODEL" --batch <<< cafe00001
	assert_failure 1
	jq -e '.hit == false' <<< "$output"
}

@test "daemon batch: one connection carries the whole batch" {
	requires jq
	blocks 2
	start_daemon --cpu-bytes 16M
	mkfifo "$BATS_TEST_TMPDIR/in"
	kvput --daemon "$SOCK" --model-dir "$MODEL" --batch < "$BATS_TEST_TMPDIR/in" \
		> "$BATS_TEST_TMPDIR/records" &
	local kp=$! w
	exec {w}>"$BATS_TEST_TMPDIR/in"
	sed -n 1p "$BATS_TEST_TMPDIR/manifest" >&$w
	until [ "$(stat_of puts)" -eq 1 ]; do :; done
	# Between blocks the batch's connection stays open.
	[ "$(stat_of clients)" -eq 2 ]
	sed -n 2p "$BATS_TEST_TMPDIR/manifest" >&$w
	exec {w}>&-
	wait "$kp"
	[ "$(stat_of puts)" -eq 2 ]
	[ "$(jq -s 'length' < "$BATS_TEST_TMPDIR/records")" -eq 2 ]
}

@test "daemon batch: bad lines are error records, the good blocks still go in" {
	requires jq
	blocks 3
	random_file "$BATS_TEST_TMPDIR/big" 3000000
	{
		sed -n 1p "$BATS_TEST_TMPDIR/manifest"
		echo 'this is not json'
		echo "{\"hash\":\"xyzzy00001\",\"file\":\"$BATS_TEST_TMPDIR/p1\"}"
		echo "{\"hash\":\"cafe00009\",\"file\":\"$BATS_TEST_TMPDIR/missing\"}"
		echo
		echo "{\"hash\":\"cafe00008\",\"file\":\"$BATS_TEST_TMPDIR/big\"}"
		echo "{\"hash\":\"cafe00007\",\"data_b64\":\"aGk=\",\"rank\":-1}"
		sed -n 2p "$BATS_TEST_TMPDIR/manifest"
	} > "$BATS_TEST_TMPDIR/mixed"
	start_daemon --cpu-bytes 16M
	run --separate-stderr kvput --daemon "$SOCK" --model-dir "$MODEL" --batch \
		"$BATS_TEST_TMPDIR/mixed"
	assert_failure 3
	[ "$(jq -s -c '[.[] | select(.status == "ok") | .line]' <<< "$output")" = "[1,8]" ]
	[ "$(jq -s -c '[.[] | select(.status == "error") | .line]' <<< "$output")" = "[2,3,4,6,7]" ]
	jq -s -e 'map(select(.line == 4))[0].error | test("No such file")' <<< "$output"
	jq -s -e 'map(select(.line == 6))[0].error | test("larger than the .* block limit \\(the daemon.s --slot-bytes\\)")' <<< "$output"
	[[ $stderr == *"mixed:2: invalid JSON"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"mixed:3: invalid hash 'xyzzy00001'"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"mixed:6: '$BATS_TEST_TMPDIR/big': larger than the "* ]] || fail "stderr: $stderr"
	[ "$(stat_of puts)" -eq 2 ]
	# The get side: a miss alone is exit 1, a bad line makes it 3.
	run --separate-stderr kvget --daemon "$SOCK" --model-dir "$MODEL" --batch \
		<<< $'cafe00001\ncafe00009\ncafe00002'
	assert_failure 1
	[ "$(jq -s -c '[.[] | .hit]' <<< "$output")" = "[true,false,true]" ]
	run --separate-stderr kvget --daemon "$SOCK" --batch \
		<<< $'cafe00001\n{"path":"../etc/passwd"}\n{"model_dir":"'"$MODEL"'","hash":"cafe00002"}'
	assert_failure 3
	[ "$(jq -s -c '[.[] | select(.error) | .line]' <<< "$output")" = "[1,2]" ]
	jq -s -e 'map(select(.line == 3))[0] | .hit and .size_bytes == 140002' <<< "$output"
	[[ $stderr == *"<stdin>:1: a bare hash needs --model-dir or --config"* ]] ||
		fail "stderr: $stderr"
	# --exists asks without reading; the daemon gives no size.
	run kvget --daemon "$SOCK" --model-dir "$MODEL" --batch --exists <<< $'cafe00002\ncafe00009'
	assert_failure 1
	[ "$(jq -s -c 'map([.hit, has("size_bytes")])' <<< "$output")" = "[[true,false],[false,false]]" ]
	# A tail longer than the block is an error, a shorter one is its last bytes.
	mkdir "$BATS_TEST_TMPDIR/out"
	run kvget --daemon "$SOCK" --model-dir "$MODEL" --batch --blocks 2 --block-bytes 1000 \
		-o "$BATS_TEST_TMPDIR/out" <<< cafe00001
	assert_success
	cmp "$BATS_TEST_TMPDIR/out/cafe00001.bin" <(tail -c 2000 "$BATS_TEST_TMPDIR/p1")
	run kvget --daemon "$SOCK" --model-dir "$MODEL" --batch --blocks 1 --block-bytes 1M \
		<<< cafe00001
	assert_failure 3
	[ "$(stat_of pins)" -eq 0 ]
}

@test "daemon batch: an unreachable daemon exits 4, before and during a batch" {
	requires jq
	blocks 3
	run --separate-stderr kvput --daemon "$SOCK" --model-dir "$MODEL" --batch \
		"$BATS_TEST_TMPDIR/manifest"
	assert_failure 4
	[ -z "$output" ]
	[[ $stderr == *"cannot reach daemon at '$SOCK'"* ]] || fail "stderr: $stderr"
	run --separate-stderr kvget --daemon "$SOCK" --model-dir "$MODEL" --batch <<< cafe00001
	assert_failure 4
	[[ $stderr == *"cannot reach daemon at '$SOCK'"* ]] || fail "stderr: $stderr"
	run --separate-stderr env KV_DAEMON="$SOCK" kvput --model-dir "$MODEL" --batch \
		< "$BATS_TEST_TMPDIR/manifest"
	assert_failure 4
	# Killed after the first block: that block's record is in, the next
	# lines (one write, so one round trip) are error records and the
	# batch stops there.
	start_daemon --cpu-bytes 16M
	mkfifo "$BATS_TEST_TMPDIR/in"
	kvput --daemon "$SOCK" --model-dir "$MODEL" --batch < "$BATS_TEST_TMPDIR/in" \
		> "$BATS_TEST_TMPDIR/records" 2> "$BATS_TEST_TMPDIR/err" &
	local kp=$! w rc=0
	exec {w}>"$BATS_TEST_TMPDIR/in"
	sed -n 1p "$BATS_TEST_TMPDIR/manifest" >&$w
	until [ "$(stat_of puts)" -eq 1 ]; do :; done
	stop_daemon KILL
	sed -n 2,3p "$BATS_TEST_TMPDIR/manifest" >&$w
	exec {w}>&-
	wait "$kp" || rc=$?
	[ "$rc" -eq 4 ]
	[ "$(jq -s -c 'map([.line, .status])' < "$BATS_TEST_TMPDIR/records")" = \
		'[[1,"ok"],[2,"error"],[3,"error"]]' ]
	grep -q "batch stopped at <stdin>:3: lost the daemon" "$BATS_TEST_TMPDIR/err"
}

@test "daemon batch: --config with --daemon writes the same config.json as without" {
	requires python3
	local md r2=$BATS_TEST_TMPDIR/root2
	md=$(cfg_model_dir)
	mkdir "$r2"
	blocks 2
	start_daemon --cpu-bytes 16M
	# --root given: the model dir and config.json appear there at once.
	kvput --daemon "$SOCK" --root "$r2" --config "$CFG" --batch "$BATS_TEST_TMPDIR/manifest" \
		> /dev/null
	kvput --root "$KV_ROOT" --config "$CFG" cafe00001 "$BATS_TEST_TMPDIR/p1"
	cmp "$KV_ROOT/$md/config.json" "$r2/$md/config.json"
	# $KV_ROOT serves as the root as well, for a single put too.
	rm -rf "${KV_ROOT:?}/$md"
	kvput --daemon "$SOCK" --config "$CFG" cafe00003 "$BATS_TEST_TMPDIR/p1"
	cmp "$KV_ROOT/$md/config.json" "$r2/$md/config.json"
	# No root at all: the model dir is only named, nothing is written.
	rm -rf "${KV_ROOT:?}/$md" "${r2:?}/$md"
	env -u KV_ROOT kvput --daemon "$SOCK" --config "$CFG" cafe00004 "$BATS_TEST_TMPDIR/p1"
	[ ! -e "$KV_ROOT/$md" ] && [ ! -e "$r2/$md" ]
	[ "$(stat_of puts)" -eq 4 ]
	# A root that is not there is an error, as without --daemon.
	run kvput --daemon "$SOCK" --root "$BATS_TEST_TMPDIR/nowhere" --config "$CFG" \
		cafe00005 "$BATS_TEST_TMPDIR/p1"
	assert_failure 3
	assert_output --partial "cache root '$BATS_TEST_TMPDIR/nowhere' does not exist"
}

@test "daemon batch: SIGTERM writes the batch behind into a layout kvls and kvget accept" {
	requires jq python3
	local md
	md=$(cfg_model_dir)
	blocks 5
	start_daemon --cpu-bytes 32M
	kvput --daemon "$SOCK" --config "$CFG" --batch "$BATS_TEST_TMPDIR/manifest" > /dev/null
	[ "$(stat_of dirty_blocks)" -eq 5 ]
	stop_daemon TERM
	[ "$DRC" -eq 0 ]
	run kvls --verify
	assert_success
	assert_output --partial "5 blocks: 5 verified, 0 mismatched"
	# config.json is there, so no rank dir is an orphan.
	run kvls --check
	assert_success
	mkdir "$BATS_TEST_TMPDIR/out"
	{
		printf 'cafe0000%d\n' 1 2 3 4
		echo "{\"path\":\"${md}_r1/caf/e0_g2/cafe00005.bin\"}"
	} | kvget --config "$CFG" --batch -o "$BATS_TEST_TMPDIR/out" > /dev/null
	same_blocks "$BATS_TEST_TMPDIR/out" 5
}

@test "daemon batch: kvls --daemon --model takes the model name as the file walk does" {
	requires python3
	local md
	md=$(cfg_model_dir)
	random_file "$BATS_TEST_TMPDIR/p1" 5000
	start_daemon --cpu-bytes 16M
	kvput --daemon "$SOCK" --root "$KV_ROOT" --config "$CFG" cafe00001 "$BATS_TEST_TMPDIR/p1"
	run kvls --daemon "$SOCK" --model meta-llama/Llama-3.1-8B --ndjson
	assert_success
	assert_output --partial "\"path\":\"${md}_r0/caf/e0_g0/cafe00001.bin\""
	run kvls --daemon "$SOCK" --model meta-llama_Llama-3.1-8B --ndjson
	assert_success
	assert_output --partial "${md}_r0/caf/e0_g0/cafe00001.bin"
	run kvls --model meta-llama/Llama-3.1-8B
	assert_success
	assert_output --partial "meta-llama/Llama-3.1-8B"
}

@test "a daemon that never answers: \$KV_DAEMON_TIMEOUT, then exit 4 and a clear message" {
	requires /usr/bin/python3
	local sock=$BATS_TEST_TMPDIR/mute.sock
	# Listens, never accepts: connect succeeds, HELLO never comes.
	coproc MUTE { /usr/bin/python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(16)
print("listening", flush=True)
sys.stdin.read()
' "$sock"; }
	read -r word <&"${MUTE[0]}"
	[ "$word" = listening ]
	random_file "$BATS_TEST_TMPDIR/blk" 4096
	export KV_DAEMON_TIMEOUT=300ms
	run --separate-stderr kvput --daemon "$sock" --model-dir m_0123456789ab abcde00001 "$BATS_TEST_TMPDIR/blk"
	[ "$status" -eq 4 ] || fail "kvput exited $status: $stderr"
	[[ "$stderr" == *"no answer from the daemon at '$sock' in time"* ]] || fail "stderr: $stderr"
	run --separate-stderr kvget --daemon "$sock" --model-dir m_0123456789ab abcde00001
	[ "$status" -eq 4 ] || fail "kvget exited $status"
	run --separate-stderr kvls --daemon "$sock"
	[ "$status" -eq 4 ] || fail "kvls exited $status"
	run --separate-stderr kvoffd --stats "$sock"
	[ "$status" -eq 4 ] || fail "kvoffd --stats exited $status"
	KV_DAEMON_TIMEOUT=soon run --separate-stderr kvput --daemon "$sock" --model-dir m_0123456789ab abcde00001 "$BATS_TEST_TMPDIR/blk"
	[ "$status" -eq 2 ]
	exec {MUTE[1]}>&-
	wait "$MUTE_PID"
}

@test "daemon batch: 200 blocks go in and come out in a few round trips, not one or two a block" {
	requires jq strace cmp
	local n=200 i d=$BATS_TEST_TMPDIR calls rc=0
	start_daemon --cpu-bytes 64M --size-classes 16K
	head -c $((n * 16384)) /dev/urandom > "$d/all"
	split -b 16384 -d -a 3 "$d/all" "$d/p"
	random_file "$d/big" 16385
	for ((i = 0; i < n; i++)); do
		printf '{"hash":"beef%05d","file":"%s/p%03d"}\n' "$i" "$d" "$i"
	done > "$d/manifest"
	echo "{\"hash\":\"beefbb000\",\"file\":\"$d/big\"}" >> "$d/manifest"
	# Each message to the daemon is a send(to) or a sendmsg; a block
	# alone took two (ALLOC, COMMIT; LOOKUP, RELEASE).  LeakSanitizer
	# cannot run under ptrace.
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
		strace -f -e trace=sendto,sendmsg -o "$d/strace.put" \
		kvput --daemon "$SOCK" --model-dir "$MODEL" --batch "$d/manifest" \
		> "$d/put.records" 2> "$d/put.err" || rc=$?
	[ "$rc" -eq 3 ] || fail "kvput exited $rc: $(cat "$d/put.err")"
	calls=$(grep -c '^[0-9]* *send' "$d/strace.put")
	[ "$calls" -lt $((n / 10)) ] || fail "kvput: $calls sends for $n blocks"
	[ "$(jq -s 'map(select(.status == "ok")) | length' < "$d/put.records")" -eq "$n" ]
	# The one over the slot size fails as it always did.
	jq -s -e 'map(select(.line == 201))[0].error | test("larger than the .* block limit \\(the daemon.s --slot-bytes\\)")' \
		< "$d/put.records"
	[ "$(stat_of puts)" -eq "$n" ]
	mkdir "$d/out"
	rc=0
	for ((i = 0; i < n; i++)); do
		printf 'beef%05d\n' "$i"
		if ((i == 100)); then echo beefdead00; fi
	done > "$d/hashes"
	ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
		strace -f -e trace=sendto,sendmsg -o "$d/strace.get" \
		kvget --daemon "$SOCK" --model-dir "$MODEL" --batch -o "$d/out" \
		< "$d/hashes" > "$d/get.records" || rc=$?
	# The miss makes it 1.
	[ "$rc" -eq 1 ] || fail "kvget exited $rc"
	calls=$(grep -c '^[0-9]* *send' "$d/strace.get")
	[ "$calls" -lt $((n / 10)) ] || fail "kvget: $calls sends for $n blocks"
	for ((i = 0; i < n; i++)); do
		cat "$d/out/beef$(printf %05d "$i").bin"
	done | cmp - "$d/all"
	[ "$(jq -s 'map(select(.hit)) | length' < "$d/get.records")" -eq "$n" ]
	jq -s -e 'map(select(.hash == "beefdead00"))[0] | .hit == false and (has("error") | not)' \
		< "$d/get.records"
	[ "$(stat_of gets)" -eq "$n" ]
	[ "$(stat_of pins)" -eq 0 ]
}
