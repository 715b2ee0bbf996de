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
	[ -z "${LOCK_TMP:-}" ] || rm -rf "$LOCK_TMP"
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
	# bash forgets HOG_PID once the coprocess is reaped: keep it
	hog_pid=$HOG_PID
	read -r word n err <&"${HOG[0]}"
	# Half the pool's bytes: its 4 KiB blocks take slots of 16K, the
	# smallest class, so 64 of them.
	[ "$word" = hog ] && [ "$n" -eq 64 ] || fail "hog took $n slots of 16K in 2M ($err)"
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
	while kill -0 "$hog_pid" 2>/dev/null; do sleep 0.05; done
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

# bounded CMD...: CMD in 3 GiB of address space, so a program that grows
# without bound fails with ENOMEM rather than take the machine.  Not
# under ASan, whose shadow memory alone reserves terabytes.
bounded() {
	if [ -n "${KV_SANITIZED:-}" ]; then
		"$@"
	else
		prlimit --as=$((3 << 30)) "$@"
	fi
}

# feed_fifo PATH: a FIFO with a writer waiting to write a byte and close;
# release_fifo lets that writer go whether or not anything read it.
feed_fifo() {
	mkfifo "$1"
	printf x > "$1" &
	FEEDER=$!
}

release_fifo() {
	local rw
	exec {rw}<>"$1"
	wait "$FEEDER" || true
	exec {rw}>&-
}

@test "hostile: kvput takes FILE only as a regular file, and stdin only up to the block limit" {
	requires prlimit
	run --separate-stderr bounded kvput --config "$CFG" abcde00000000000000000000000000002 /dev/zero
	assert_failure 3
	[ "$stderr" = "kvput: '/dev/zero': not a regular file" ] || fail "stderr: $stderr"
	feed_fifo "$BATS_TEST_TMPDIR/fifo"
	run --separate-stderr kvput --config "$CFG" abcde00000000000000000000000000003 \
		"$BATS_TEST_TMPDIR/fifo"
	release_fifo "$BATS_TEST_TMPDIR/fifo"
	assert_failure 3
	[ "$stderr" = "kvput: '$BATS_TEST_TMPDIR/fifo': not a regular file" ] || fail "stderr: $stderr"
	# Stdin may be anything, but is read no further than the limit.
	run --separate-stderr bounded kvput --config "$CFG" abcde00000000000000000000000000004 - \
		< /dev/zero
	assert_failure 3
	[ "$stderr" = "kvput: '<stdin>': larger than the 1.0G block limit (--max-block-bytes)" ] ||
		fail "stderr: $stderr"
	random_file "$BATS_TEST_TMPDIR/64k" 65536
	random_file "$BATS_TEST_TMPDIR/over" 65537
	run bash -c 'cat "$1" | kvput --config "$2" --max-block-bytes 64K abcde00000000000000000000000000005' \
		_ "$BATS_TEST_TMPDIR/64k" "$CFG"
	assert_success
	cmp "$BATS_TEST_TMPDIR/64k" "$(dirname "$BLOCK")/abcde00000000000000000000000000005.bin"
	run --separate-stderr bash -c 'cat "$1" | kvput --config "$2" --max-block-bytes 64K abcde00000000000000000000000000006' \
		_ "$BATS_TEST_TMPDIR/over" "$CFG"
	assert_failure 3
	[ "$stderr" = "kvput: '<stdin>': larger than the 64K block limit (--max-block-bytes)" ] ||
		fail "stderr: $stderr"
	run --separate-stderr kvput --config "$CFG" --max-block-bytes 64K \
		abcde00000000000000000000000000007 "$BATS_TEST_TMPDIR/over"
	assert_failure 3
	[ "$stderr" = "kvput: '$BATS_TEST_TMPDIR/over': larger than the 64K block limit (--max-block-bytes)" ] ||
		fail "stderr: $stderr"
	[ "$(find "$KV_ROOT" -name '*.bin' | wc -l)" -eq 2 ]
	run kvput --config "$CFG" --max-block-bytes 0 abcde00000000000000000000000000008
	assert_failure 2
}

@test "hostile: a batch line naming a device, a FIFO or too much is an error record; the rest land" {
	requires prlimit jq
	local d=$BATS_TEST_TMPDIR
	random_file "$d/over" 65537
	feed_fifo "$d/fifo"
	{
		printf '{"hash":"fffff00001","file":"%s"}\n' "$d/blk"
		printf '{"hash":"fffff00002","file":"/dev/zero"}\n'
		printf '{"hash":"fffff00003","file":"%s"}\n' "$d/fifo"
		printf '{"hash":"fffff00004","file":"%s"}\n' "$d/over"
		printf '{"hash":"fffff00005","data_b64":"%s"}\n' "$(base64 -w0 "$d/over")"
		printf '{"hash":"fffff00006","file":"%s"}\n' "$d/blk"
	} > "$d/manifest"
	run --separate-stderr bounded kvput --config "$CFG" --max-block-bytes 64K --batch "$d/manifest"
	release_fifo "$d/fifo"
	assert_failure 3
	[ "$(jq -s -c '[.[] | select(.status == "ok") | .line] | sort' <<< "$output")" = "[1,6]" ] ||
		fail "records: $output"
	[ "$(jq -s -r 'sort_by(.line) | .[] | select(.status == "error") | .error' <<< "$output")" = \
"'/dev/zero': not a regular file
'$d/fifo': not a regular file
'$d/over': larger than the 64K block limit (--max-block-bytes)
\"data_b64\": larger than the 64K block limit (--max-block-bytes)" ] || fail "records: $output"
	[[ $stderr == *"manifest:3: '$d/fifo': not a regular file"* ]] || fail "stderr: $stderr"
	[ "$(find "$KV_ROOT" -name 'fffff*.bin' | wc -l)" -eq 2 ]
}

@test "hostile: kvput --daemon refuses a block over the daemon's slot size before sending it" {
	requires kvoffd prlimit jq
	start_daemon --cpu-bytes 2M --slot-bytes 256K || fail "kvoffd: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	random_file "$BATS_TEST_TMPDIR/big" 300000
	run --separate-stderr kvput --daemon "$SOCK" --model-dir "$MDIR" --max-block-bytes 1G \
		abcde00000000000000000000000000002 "$BATS_TEST_TMPDIR/big"
	assert_failure 3
	[ "$stderr" = "kvput: '$BATS_TEST_TMPDIR/big': larger than the 256K block limit (the daemon's --slot-bytes)" ] ||
		fail "stderr: $stderr"
	run --separate-stderr bounded kvput --daemon "$SOCK" --model-dir "$MDIR" \
		abcde00000000000000000000000000003 - < /dev/zero
	assert_failure 3
	[ "$stderr" = "kvput: '<stdin>': larger than the 256K block limit (the daemon's --slot-bytes)" ] ||
		fail "stderr: $stderr"
	printf '{"hash":"fffff00001","file":"%s"}\n{"hash":"fffff00002","file":"/dev/zero"}\n{"hash":"fffff00003","file":"%s"}\n' \
		"$BATS_TEST_TMPDIR/big" "$BATS_TEST_TMPDIR/blk" > "$BATS_TEST_TMPDIR/manifest"
	run --separate-stderr bounded kvput --daemon "$SOCK" --model-dir "$MDIR" --batch \
		"$BATS_TEST_TMPDIR/manifest"
	assert_failure 3
	[ "$(jq -s -c 'map([.line, .status]) | sort' <<< "$output")" = '[[1,"error"],[2,"error"],[3,"ok"]]' ] ||
		fail "records: $output"
	run kvoffd --stats "$SOCK"
	[ "$(jq .puts <<< "$output")" -eq 1 ] || fail "stats: $output"
	stop_daemon
}

# READ_NR: read(2)'s number in /proc/PID/syscall, where it can be seen.
requires_syscall_view() {
	[ -r /proc/self/syscall ] || skip "no /proc/PID/syscall"
	case $(uname -m) in
	x86_64) READ_NR=0 ;;
	aarch64) READ_NR=63 ;;
	*) skip "read(2)'s number unknown on $(uname -m)" ;;
	esac
}

# await_input_wait PID: return once PID sleeps in read(2) on its fd 0.
# A state, not a time: after a write to its input it is there only once
# it has taken what was written and done all it does before reading on.
await_input_wait() {
	local nr fd rest state
	for (( ;; )); do
		read -r _ _ state _ < "/proc/$1/stat" || fail "pid $1 is gone"
		[ "$state" != Z ] || fail "pid $1 exited"
		if read -r nr fd rest < "/proc/$1/syscall" 2>/dev/null &&
			[ "$nr" = "$READ_NR" ] && [ "$fd" = 0x0 ]; then
			return 0
		fi
		sleep 0.01
	done
}

# put_fed OUT ARGS...: kvput ARGS in the background, reading a FIFO
# whose write end is fd $FEED and writing to OUT; its pid is $PUT_PID.
# Not a coproc: bash closes a coproc's fds once it is reaped.
put_fed() {
	local out=$1 fifo=$BATS_TEST_TMPDIR/feed.$RANDOM
	shift
	mkfifo "$fifo"
	kvput "$@" < "$fifo" > "$out" &
	PUT_PID=$!
	exec {FEED}> "$fifo"
}

# streams STORE...: L1, then L2 only once kvput waits for input again;
# by then L1's block is stored and its record out.
streams() {
	local h1=fffff$RANDOM$RANDOM h2=fffff$RANDOM$RANDOM rec results
	mkfifo "$BATS_TEST_TMPDIR/results"
	put_fed "$BATS_TEST_TMPDIR/results" "$@" --model-dir "$MDIR" --batch
	exec {results}< "$BATS_TEST_TMPDIR/results"
	rm "$BATS_TEST_TMPDIR/results"
	printf '{"hash":"%s","file":"%s"}\n' "$h1" "$BATS_TEST_TMPDIR/blk" >&$FEED
	await_input_wait "$PUT_PID"
	read -r -t 0 <&$results || fail "$*: no record for line 1 before line 2"
	read -r rec <&$results
	[ "$(jq -r '[.line, .status, .hash] | join(" ")' <<< "$rec")" = "1 ok $h1" ] ||
		fail "$*: $rec"
	kvget "$@" --model-dir "$MDIR" -o "$BATS_TEST_TMPDIR/got" "$h1"
	cmp "$BATS_TEST_TMPDIR/blk" "$BATS_TEST_TMPDIR/got"
	printf '{"hash":"%s","file":"%s"}\n' "$h2" "$BATS_TEST_TMPDIR/blk" >&$FEED
	exec {FEED}>&-
	read -r rec <&$results
	[ "$(jq -r '[.line, .status, .hash] | join(" ")' <<< "$rec")" = "2 ok $h2" ] ||
		fail "$*: $rec"
	wait "$PUT_PID"
	exec {results}<&-
}

@test "hostile: kvput --batch stores and reports each line before the next is written" {
	requires jq kvoffd
	requires_syscall_view
	streams --root "$KV_ROOT"
	start_daemon --cpu-bytes 8M
	streams --daemon "$SOCK"
	stop_daemon
}

@test "hostile: kvput --batch killed mid-way has reported every block it stored, each whole" {
	requires jq
	requires_syscall_view
	local d=$BATS_TEST_TMPDIR i n stored
	for i in $(seq 10000 10399); do
		printf '{"hash":"fffff%s","file":"%s"}\n' "$i" "$d/blk"
	done > "$d/first"
	for i in $(seq 20000 23999); do
		printf '{"hash":"fffff%s","file":"%s"}\n' "$i" "$d/blk"
	done > "$d/rest"
	put_fed "$d/out" --config "$CFG" --batch --qd 4
	cat "$d/first" >&$FEED
	# Waiting for more input, nothing in flight: all it stored, it said.
	await_input_wait "$PUT_PID"
	n=$(jq -s 'map(select(.status == "ok")) | length' < "$d/out") ||
		fail "a torn record: $(tail -c 300 "$d/out")"
	stored=$(find "$KV_ROOT" -name 'fffff*.bin' | wc -l)
	[ "$n" -eq "$stored" ] || fail "$stored blocks stored, $n reported"
	# Then killed while it works.
	cat "$d/rest" >&$FEED &
	until [ "$(wc -l < "$d/out")" -ge $((n + 100)) ]; do
		kill -0 "$PUT_PID" || fail "kvput exited"
		sleep 0.01
	done
	kill -9 "$PUT_PID"
	wait "$PUT_PID" || true
	exec {FEED}>&-
	wait
	# Whole records only, and each "ok" one's block in place; at most
	# the --qd in flight stored and not yet said.
	jq -s -r '.[] | select(.status == "ok") | .path' < "$d/out" > "$d/paths" ||
		fail "a torn record: $(tail -c 300 "$d/out")"
	n=$(wc -l < "$d/paths")
	while read -r p; do
		cmp "$d/blk" "$KV_ROOT/$p" || fail "reported, not stored: $p"
	done < "$d/paths"
	stored=$(find "$KV_ROOT" -name 'fffff*.bin' | wc -l)
	[ "$stored" -le $((n + 4)) ] || fail "$stored blocks stored, $n reported"
}

@test "hostile: kvoffd never writes its metrics or events through a planted symlink" {
	requires kvoffd
	local tdir=$BATS_TEST_TMPDIR/textfile prom
	mkdir -p "$tdir"
	chmod 1777 "$tdir"
	prom=$tdir/kvoffd.prom
	# --events FILE: a link at the name is refused at start, at once.
	ln -s "$OUTSIDE/passwd" "$tdir/events"
	run timeout 10 kvoffd --root "$KV_ROOT" --socket "$SOCK" --cpu-bytes 8M --events "$tdir/events"
	[ "$status" -eq 3 ] || fail "kvoffd started with --events a symlink: $status"
	[ "$(cat "$OUTSIDE/passwd")" = "root:x:0:0:secret" ] || fail "passwd appended to"
	mkfifo "$tdir/fifo"
	run timeout 10 kvoffd --root "$KV_ROOT" --socket "$SOCK" --cpu-bytes 8M --events "$tdir/fifo"
	[ "$status" -eq 3 ] || fail "kvoffd with --events a FIFO: $status"
	rm "$tdir/events"
	start_daemon --cpu-bytes 8M --metrics-file "$prom" --events "$tdir/events" ||
		fail "kvoffd: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	# The temp names the old daemon used, and the events file swapped
	# for a link before a SIGHUP reopens it.
	ln -s "$OUTSIDE/passwd" "$prom.$DPID.tmp"
	rm "$tdir/events"
	ln -s "$OUTSIDE/passwd" "$tdir/events"
	kill -HUP "$DPID"
	random_file "$BATS_TEST_TMPDIR/b2" 4096
	kvput --daemon "$SOCK" --config "$CFG" abcde22222222222222222222222222222 "$BATS_TEST_TMPDIR/b2"
	stop_daemon
	[ "$(cat "$OUTSIDE/passwd")" = "root:x:0:0:secret" ] || fail "passwd overwritten"
	[ -f "$prom" ] && [ ! -L "$prom" ] || fail "the .prom is not a regular file"
	grep -q '^kv_offload_blocks ' "$prom"
	[ "$(stat -c %a "$prom")" = 644 ]
	[ -z "$(ls "$tdir" | grep -v -e '^kvoffd.prom$' -e '^kvoffd.prom.[0-9]*.tmp$' -e '^events$' -e '^fifo$')" ] ||
		fail "left behind: $(ls "$tdir")"
}

# as_nobody CMD...: CMD as user nobody, no groups.
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# hold_as WHO MODE FILE: WHO (root or nobody) holds flock MODE on FILE in
# the background ($holder) until let_go; its handshake FIFO is in
# $LOCK_TMP, a dir that nobody can reach.
hold_as() {
	local fifo=$LOCK_TMP/held.$RANDOM run=()
	mkfifo "$fifo"
	chmod 666 "$fifo"
	[ "$1" = nobody ] && run=(setpriv --reuid=65534 --regid=65534 --clear-groups)
	"${run[@]}" flock -o "$2" "$3" sh -c 'echo held > "$1"; exec sleep 60' sh "$fifo" \
		> /dev/null 2>&1 3>&- &
	holder=$!
	read -r -t 10 _ <> "$fifo" || fail "$1 could not take $3"
	rm "$fifo"
}

# let_go: the holder, and the command it ran, end.
let_go() {
	pkill -P "$holder" || true
	kill "$holder" 2>/dev/null || true
	wait "$holder" || true
}

@test "hostile: users who can read or write the root cannot hold kvevict's or kvoffd's locks" {
	requires root setpriv flock
	local d
	d=$(mktemp -d /tmp/kv-locks.XXXXXX)
	LOCK_TMP=$d
	chmod 0755 "$d"
	export KV_ROOT=$d/root
	mkdir -m 1777 "$KV_ROOT" "$KV_ROOT/.kvevict"
	# kvevict makes its lock 0600: nobody cannot even open it.
	kvevict --max-bytes 1G > /dev/null
	[ "$(stat -c %a "$KV_ROOT/.kvevict.lock")" = 600 ]
	! as_nobody flock -n -s "$KV_ROOT/.kvevict.lock" true || fail "nobody took the lock"
	# An older, readable lock file that nobody holds shared, and one that
	# nobody made and holds in the 1777 root, for a run and a shard:
	# --wait (what the systemd unit and cron use) replaces them and runs.
	for lock in .kvevict.lock .kvevict/lock.0; do
		chmod 644 "$KV_ROOT/$lock"
		hold_as nobody -s "$KV_ROOT/$lock"
		run --separate-stderr timeout 20 kvevict --max-bytes 1G --wait=5s --shard 0/1 --shard-wait 0
		let_go
		[ "$status" -eq 0 ] || fail "$lock 0644 held by nobody: exit $status: $stderr"
		rm "$KV_ROOT/$lock"
		as_nobody sh -c 'umask 077 && : > "$1"' sh "$KV_ROOT/$lock"
		hold_as nobody -x "$KV_ROOT/$lock"
		run --separate-stderr timeout 20 kvevict --max-bytes 1G --wait=5s --shard 0/1 --shard-wait 0
		let_go
		[ "$status" -eq 0 ] || fail "$lock of nobody's: exit $status: $stderr"
		[ "$(stat -c '%a %U' "$KV_ROOT/$lock")" = "600 root" ]
	done
	# A run that does hold it: --wait is bounded and names the holder.
	hold_as root -x "$KV_ROOT/.kvevict.lock"
	SECONDS=0
	run --separate-stderr timeout 30 kvevict --max-bytes 1G --wait=1s
	let_go
	[ "$status" -eq 1 ] || fail "exit $status: $stderr"
	[ "$SECONDS" -lt 10 ]
	[[ "$stderr" == *"held by pid $holder (flock, uid 0)"* ]] || fail "$stderr"
	# kvoffd's claim: a readable one of an older daemon, or one nobody
	# made, held by nobody, neither keeps kvoffd from starting nor makes
	# kvevict refuse the root.
	for owner in root nobody; do
		rm -f "$KV_ROOT/.kvoffd.lock"
		if [ $owner = root ]; then
			(umask 022 && : > "$KV_ROOT/.kvoffd.lock")
		else
			as_nobody sh -c 'umask 077 && : > "$1"' sh "$KV_ROOT/.kvoffd.lock"
		fi
		hold_as nobody -x "$KV_ROOT/.kvoffd.lock"
		run --separate-stderr kvevict --max-bytes 1G
		[ "$status" -eq 0 ] || fail "kvevict, $owner's claim held by nobody: $status: $stderr"
		start_kvoffd --tier "local:$KV_ROOT:64M" --cpu-bytes 8M ||
			fail "kvoffd, $owner's claim held by nobody: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
		[ "$(stat -c '%a %U' "$KV_ROOT/.kvoffd.lock")" = "600 root" ]
		run --separate-stderr kvevict --max-bytes 1G
		[ "$status" -eq 2 ] || fail "kvevict beside a live kvoffd: $status"
		stop_daemon
		let_go
	done
}

@test "hostile: --events ipc://PATH never removes a file that is not a socket, nor a live one's" {
	local p=$BATS_TEST_TMPDIR/precious.txt sock=$BATS_TEST_TMPDIR/live.sock
	echo precious > "$p"
	run --separate-stderr env KV_EVENTS="ipc://$p" kvevict --max-bytes 1G
	[ "$status" -eq 3 ] || fail "kvevict: $status: $stderr"
	[[ "$stderr" == *"exists and is not a socket"* ]] || fail "$stderr"
	run kvput --config "$CFG" --events "ipc://$p" abcde33333333333333333333333333333 \
		"$BATS_TEST_TMPDIR/blk"
	[ "$status" -eq 3 ]
	[ "$(cat "$p")" = precious ] || fail "the file at the ipc path is gone"
	# A socket someone serves is theirs: not unlinked and rebound.
	python3 -c 'import socket,sys,time
s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print(flush=True); time.sleep(30)' \
		"$sock" > "$BATS_TEST_TMPDIR/srv.out" &
	local srv=$!
	for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
	ino=$(stat -c %i "$sock")
	run --separate-stderr kvevict --max-bytes 1G --events "ipc://$sock"
	kill "$srv"; wait "$srv" || true
	[ "$status" -eq 3 ] || fail "kvevict on a live socket: $status: $stderr"
	[ "$(stat -c %i "$sock")" = "$ino" ] || fail "the live socket was replaced"
}

@test "hostile: kvls never hangs on nor follows a config.json swapped for a FIFO or a symlink" {
	requires python3
	local cfg=$KV_ROOT/$MDIR/config.json i hung=0 leaked=0
	cp "$cfg" "$BATS_TEST_TMPDIR/good.json"
	mkfifo "$BATS_TEST_TMPDIR/fifo"
	# A writer that holds the FIFO open and never writes.
	sleep 300 <> "$BATS_TEST_TMPDIR/fifo" &
	local writer=$!
	ln -s "$OUTSIDE/passwd" "$BATS_TEST_TMPDIR/link"
	# Swap config.json with the FIFO, then the link, and back, again and
	# again (renameat2 RENAME_EXCHANGE), while kvls reads the tree.
	python3 - "$cfg" "$BATS_TEST_TMPDIR/fifo" "$BATS_TEST_TMPDIR/link" <<'PY' &
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
cfg, others = sys.argv[1].encode(), [a.encode() for a in sys.argv[2:]]
end = time.time() + 60
while time.time() < end:
    for o in others:
        libc.renameat2(-100, cfg, -100, o, 2)
        time.sleep(0.0002)
        libc.renameat2(-100, cfg, -100, o, 2)
        time.sleep(0.0002)
PY
	local swapper=$!
	for i in $(seq 60); do
		run --separate-stderr timeout 5 kvls --check
		[ "$status" -ne 124 ] || hung=$((hung + 1))
		[[ "$output$stderr" != *secret* ]] || leaked=$((leaked + 1))
		run --separate-stderr timeout 5 kvls
		[ "$status" -ne 124 ] || hung=$((hung + 1))
	done
	kill "$swapper" "$writer"
	wait "$swapper" "$writer" || true
	[ "$hung" -eq 0 ] || fail "kvls hung $hung times"
	[ "$leaked" -eq 0 ] || fail "kvls showed the link's target $leaked times"
}

@test "hostile: a line with no end costs bounded memory: refused as a bad line, the next one served" {
	local big=$BATS_TEST_TMPDIR/big.ndjson prog rss
	# 96 MB without a newline, then a valid record of the block.
	{ head -c 96000000 /dev/zero | tr '\0' a; echo; echo "{\"model_dir\":\"$MDIR\",\"hash\":\"$H\"}"; } > "$big"
	run --separate-stderr /usr/bin/time -f 'rss %M' kvget --batch < "$big"
	[[ "$stderr" == *"<stdin>:1: line longer than 65536 bytes"* ]] || fail "kvget: ${stderr:0:300}"
	[ "$(jq -s 'map(select(.line == 2 and .hit)) | length' <<< "$output")" = 1 ] || fail "line 2: $output"
	rss=$(grep -o 'rss [0-9]*' <<< "$stderr" | cut -d' ' -f2)
	[ "$rss" -lt 40000 ] || fail "kvget --batch: $rss KiB"
	run --separate-stderr /usr/bin/time -f 'rss %M' kvput --batch --model-dir "$MDIR" --max-block-bytes 4K < "$big"
	# Room for a 4K block in "data_b64" (5,464 bytes), and no more.
	[[ "$stderr" == *"<stdin>:1: line longer than 71000 bytes"* ]] || fail "kvput: ${stderr:0:300}"
	rss=$(grep -o 'rss [0-9]*' <<< "$stderr" | cut -d' ' -f2)
	[ "$rss" -lt 40000 ] || fail "kvput --batch: $rss KiB"
	run --separate-stderr /usr/bin/time -f 'rss %M' kvevict --stdin --hot 0 < "$big"
	[[ "$stderr" == *"<stdin>:1: line longer than 65536 bytes"* ]] || fail "kvevict: ${stderr:0:300}"
	rss=$(grep -o 'rss [0-9]*' <<< "$stderr" | cut -d' ' -f2)
	[ "$rss" -lt 40000 ] || fail "kvevict --stdin: $rss KiB"
	# A line of exactly the limit is still a line.
	{ printf '{"model_dir":"%s","hash":"%s","pad":"' "$MDIR" "$H"; head -c $((65536 - 35 - ${#MDIR} - ${#H})) /dev/zero | tr '\0' x; echo '"}'; } > "$big"
	[ "$(head -1 "$big" | wc -c)" -eq 65537 ]
	run --separate-stderr kvget --batch < "$big"
	[[ "$stderr" != *"longer than"* ]] || fail "a 64 KiB line refused"
}

@test "hostile: kvget holds no more than --max-block-bytes of a huge sparse block" {
	local big=$KV_ROOT/$(dirname "${BLOCK#"$KV_ROOT"/}")/abcde44444444444444444444444444444.bin rss
	truncate -s 3G "$big"
	run --separate-stderr /usr/bin/time -f 'rss %M' kvget --model-dir "$MDIR" abcde44444444444444444444444444444 -o "$BATS_TEST_TMPDIR/out"
	[ "$status" -eq 3 ] || fail "exit $status"
	[[ "$stderr" == *"larger than the 1.0G block limit (--max-block-bytes)"* ]] || fail "$stderr"
	rss=$(grep -o 'rss [0-9]*' <<< "$stderr" | cut -d' ' -f2)
	[ "$rss" -lt 100000 ] || fail "kvget: $rss KiB"
	run --separate-stderr /usr/bin/time -f 'rss %M' kvget --batch --max-block-bytes 1M \
		<<< "{\"model_dir\":\"$MDIR\",\"hash\":\"abcde44444444444444444444444444444\"}
{\"model_dir\":\"$MDIR\",\"hash\":\"$H\"}"
	rss=$(grep -o 'rss [0-9]*' <<< "$stderr" | cut -d' ' -f2)
	[ "$rss" -lt 100000 ] || fail "kvget --batch: $rss KiB"
	[ "$(jq -r 'select(.line == 1) | .error' <<< "$output")" = "larger than the 1.0M block limit (--max-block-bytes)" ] ||
		fail "$output"
	[ "$(jq -r 'select(.line == 2) | .hit' <<< "$output")" = true ] || fail "$output"
}

@test "hostile: kvput writes no llmd-v0 block below a dot-dir, which no walk would list or evict" {
	local v0=block_size_16_blocks_per_file_1/tp_1_pp_size_1_pcp_size_1/rank_0/bfloat16/abc/de
	for model in .hidden org/.hidden .kvevict.lock; do
		run --separate-stderr kvput --model-dir "$MDIR" --batch <<< \
			"{\"path\":\"$model/$v0/abcde55555555555555555555555555555.bin\",\"file\":\"$BATS_TEST_TMPDIR/blk\"}"
		[ "$(jq -r .status <<< "$output")" = error ] || fail "$model: $output"
	done
	[ ! -e "$KV_ROOT/.hidden" ] && [ ! -e "$KV_ROOT/org" ] && [ ! -e "$KV_ROOT/.kvevict.lock" ] ||
		fail "made: $(ls -A "$KV_ROOT")"
	# What is written is what kvls sees.
	run kvput --model-dir "$MDIR" --batch <<< \
		"{\"path\":\"org/vis/$v0/abcde55555555555555555555555555555.bin\",\"file\":\"$BATS_TEST_TMPDIR/blk\"}"
	[ "$(jq -r .status <<< "$output")" = ok ] || fail "$output"
	kvls --blocks --ndjson | grep -q abcde55555555555555555555555555555
	run kvevict --max-bytes 1G
	assert_success
}
