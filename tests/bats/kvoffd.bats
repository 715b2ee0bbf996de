#!/usr/bin/env bats
# kvoffd: the shared CPU tier, write-behind, read-through, restarts,
# hostile peers and its memory bound.  Blocks move through a small client
# (bench/offd_client.c) built here against the in-tree libkv.

load test_helper

MODEL=meta-llama_Llama-3.1-8B_0123456789ab

setup_file() {
	export OFFD_CLIENT=$BATS_FILE_TMPDIR/offd_client
	# A copy outside the build tree also runs as an unprivileged user
	# that cannot reach it.
	cp "$KV_BIN/../bench/offd_client" "$OFFD_CLIENT"
}

setup() {
	common_setup
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	DPID=
	PUBDIR=
}

teardown() {
	kill_daemon
	[ -z "${PUBDIR:-}" ] || rm -rf "$PUBDIR"
	common_teardown
}

# public_socket: $SOCK in a directory every user can reach, so only the
# socket's own mode and the daemon's peer check decide.
public_socket() {
	PUBDIR=$(mktemp -d /tmp/kvoffd-bats.XXXXXX)
	chmod 755 "$PUBDIR" "$OFFD_CLIENT"
	SOCK=$PUBDIR/offd.sock
}

# hold_block HASH: a client that pins HASH and keeps it until release_hold
# closes its stdin ($HOLDER is its pid).
hold_block() {
	local line
	mkfifo "$BATS_TEST_TMPDIR/hold.in" "$BATS_TEST_TMPDIR/hold.out"
	"$OFFD_CLIENT" hold "$SOCK" "$MODEL" 0 0 "$1" \
		<"$BATS_TEST_TMPDIR/hold.in" >"$BATS_TEST_TMPDIR/hold.out" &
	HOLDER=$!
	exec {HOLD_W}>"$BATS_TEST_TMPDIR/hold.in"
	read -r line <"$BATS_TEST_TMPDIR/hold.out"
	[[ $line == "pinned "* ]]
}

# release_hold: let the holder release its pin; fails if it could not.
release_hold() {
	exec {HOLD_W}>&-
	wait "$HOLDER"
}

client() {
	"$OFFD_CLIENT" "$@"
}

# put_block NAME HASH BYTES: random content kept in $BATS_TEST_TMPDIR/NAME.
put_block() {
	random_file "$BATS_TEST_TMPDIR/$1" "$3"
	client put "$SOCK" "$MODEL" 0 0 "$2" "$BATS_TEST_TMPDIR/$1"
}

get_equals() {
	client get "$SOCK" "$MODEL" 0 0 "$2" >"$BATS_TEST_TMPDIR/got"
	cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/$1"
}

@test "kvoffd: --help, --version and usage errors" {
	run kvoffd --help
	assert_success
	assert_output --partial "Usage: kvoffd [--root DIR | --tier KIND:DIR[:SIZE]...] --socket PATH"
	run kvoffd --version
	assert_success
	assert_output --regexp "^kvoffd \(kvtools\) [0-9]"
	run kvoffd --bogus
	assert_failure 2
	run kvoffd --socket "$SOCK"
	assert_failure 2
	assert_output --partial "--cpu-bytes is required"
	run kvoffd --socket "$SOCK" --cpu-bytes 8M --write-policy sometimes
	assert_failure 2
	run kvoffd --socket "$SOCK" --cpu-bytes 8M --slot-bytes 1000
	assert_failure 2
	run kvoffd --socket "$SOCK" --cpu-bytes 1M
	assert_failure 2
}

@test "kvoffd: the bash completion offers every long option of --help" {
	local opts opt
	opts=$(kvoffd --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
	for opt in $opts; do
		grep -q -- "$opt" "$BATS_TEST_DIRNAME/../../completions/bash/kvoffd" ||
			fail "completion lacks $opt"
		grep -q -- "$opt" "$BATS_TEST_DIRNAME/../../completions/zsh/_kvoffd" ||
			fail "zsh completion lacks $opt"
	done
}

@test "kvoffd: --stats on a socket nobody serves exits 4" {
	run kvoffd --stats "$SOCK"
	assert_failure 4
	assert_output --partial "cannot reach daemon at '$SOCK'"
}

@test "kvoffd: a put is read back byte for byte; an absent key is a miss" {
	start_daemon --cpu-bytes 16M --events "$BATS_TEST_TMPDIR/events"
	put_block a abcdef0001 1000000
	get_equals a abcdef0001
	run client get "$SOCK" "$MODEL" 0 0 abcdef0999
	assert_failure 1
	[ "$(stat_of hits)" -eq 1 ]
	[ "$(stat_of misses)" -eq 1 ]
	[ "$(stat_of blocks)" -eq 1 ]
	[ "$(stat_of block_bytes)" -eq 1000000 ]
	[ "$(stat -c %a "$SOCK")" = 660 ]
	run python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
assert ev == [dict(ev[0], event="BlockStored", tier="cpu", hash="abcdef0001",
              model_dir=sys.argv[2], rank=0, group=0, size_bytes=1000000)], ev' \
		"$BATS_TEST_TMPDIR/events" "$MODEL"
	assert_success
}

@test "kvoffd: concurrent clients put and get shared and own keys, content verified" {
	local pids=() i rc=0
	start_daemon --cpu-bytes 64M --slot-bytes 256K
	for i in 0 1 2 3; do
		client stress "$SOCK" "$MODEL" "$i" 6 20 200000 >"$BATS_TEST_TMPDIR/stress.$i" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || rc=$?
	done
	[ "$rc" -eq 0 ]
	for i in 0 1 2 3; do
		[ "$(cat "$BATS_TEST_TMPDIR/stress.$i")" = "ok 240" ]
	done
	[ "$(stat_of puts)" -eq 960 ]
	[ "$(stat_of gets)" -eq 960 ]
	[ "$(stat_of pins)" -eq 0 ]
	# 6 shared keys + 4 x 6 own keys, each one block after all the rewrites.
	[ "$(stat_of blocks)" -eq 30 ]
}

@test "kvoffd: RAM eviction spills to the file tier and a later get reads through" {
	local i
	# 16 slots, a write-behind queue of 8: 20 puts evict 4 blocks, all spilled.
	start_daemon --cpu-bytes 32M --events "$BATS_TEST_TMPDIR/events"
	for i in $(seq 10 29); do
		put_block "b$i" "abcdef00$i" 1500000
	done
	[ "$(stat_of wb_drops)" -eq 0 ]
	[ "$(stat_of spills)" -ge 4 ]
	for i in $(seq 10 29); do
		get_equals "b$i" "abcdef00$i"
	done
	[ "$(stat_of readthroughs)" -ge 4 ]
	[ -f "$KV_ROOT/${MODEL}_r0/abc/de_g0/abcdef0010.bin" ]
	cmp "$KV_ROOT/${MODEL}_r0/abc/de_g0/abcdef0010.bin" "$BATS_TEST_TMPDIR/b10"
	grep -q '"event":"BlockStored".*"hash":"abcdef0010".*"tier":"fs"' "$BATS_TEST_TMPDIR/events"
	grep -q '"event":"BlockRemoved".*"hash":"abcdef0010".*"tier":"cpu"' "$BATS_TEST_TMPDIR/events"
}

@test "kvoffd: concurrent misses on one key load it from the file tier once" {
	local pids=() i rc=0
	start_daemon --cpu-bytes 8M
	put_block a abcdef0001 2000000
	stop_daemon TERM
	[ "$DRC" -eq 0 ]
	start_daemon --cpu-bytes 8M
	for i in 1 2 3 4 5 6; do
		client get "$SOCK" "$MODEL" 0 0 abcdef0001 >"$BATS_TEST_TMPDIR/got.$i" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || rc=$?
	done
	[ "$rc" -eq 0 ]
	for i in 1 2 3 4 5 6; do
		cmp "$BATS_TEST_TMPDIR/got.$i" "$BATS_TEST_TMPDIR/a"
	done
	[ "$(stat_of readthroughs)" -eq 1 ]
	[ "$(stat_of gets)" -eq 6 ]
}

@test "kvoffd: SIGTERM writes what is only in RAM, exits 0, and a restart serves it" {
	local i
	start_daemon --cpu-bytes 16M --metrics-file "$BATS_TEST_TMPDIR/metrics"
	for i in 10 11 12; do
		put_block "b$i" "abcdef00$i" 700000
	done
	[ "$(stat_of dirty_blocks)" -eq 3 ]
	stop_daemon TERM
	[ "$DRC" -eq 0 ]
	[ ! -e "$SOCK" ]
	grep -qx 'kv_offload_bytes_total{direction="spill"} 2100000' "$BATS_TEST_TMPDIR/metrics"
	start_daemon --cpu-bytes 16M
	grep -q "tier 0, shared, $KV_ROOT: 3 blocks, 2.0M, unbounded" "$BATS_TEST_TMPDIR/kvoffd.log"
	[ "$(stat_of disk_blocks)" -eq 3 ]
	for i in 10 11 12; do
		get_equals "b$i" "abcdef00$i"
	done
}

@test "kvoffd: a crash keeps every block that reached the file tier" {
	local i
	start_daemon --cpu-bytes 16M --write-policy always --fsync
	for i in 10 11 12 13; do
		put_block "b$i" "abcdef00$i" 500000
	done
	# A get of a key in RAM cannot overtake earlier writes in the queue,
	# so wait for the spill count the way an operator would: ask.
	until [ "$(stat_of spills)" -eq 4 ]; do :; done
	stop_daemon KILL
	start_daemon --cpu-bytes 16M
	for i in 10 11 12 13; do
		get_equals "b$i" "abcdef00$i"
	done
	[ "$(stat_of readthroughs)" -eq 4 ]
}

@test "kvoffd: a client killed while holding a pin releases it" {
	start_daemon --cpu-bytes 4M
	put_block a abcdef0001 100000
	hold_block abcdef0001
	[ "$(stat_of pins)" -eq 1 ]
	kill -KILL "$HOLDER"
	wait "$HOLDER" || true
	[ "$(stat_of pins)" -eq 0 ]
	# Both slots are reusable again: two new puts evict the old block.
	put_block b abcdef0002 100000
	put_block c abcdef0003 100000
	get_equals c abcdef0003
}

@test "kvoffd: a pinned block is never reused under its reader" {
	start_daemon --cpu-bytes 4M
	put_block a abcdef0001 100000
	hold_block abcdef0001
	# One slot left: puts churn through it, never through the pinned one.
	put_block b abcdef0002 100000
	put_block c abcdef0003 100000
	get_equals a abcdef0001
	[ "$(stat_of pins)" -eq 1 ]
	release_hold
	[ "$(stat_of pins)" -eq 0 ]
}

@test "kvoffd: pins held past --pin-timeout while puts starve are taken back" {
	start_daemon --cpu-bytes 4M --size-classes 2M --pin-timeout 1s
	put_block a abcdef0001 100000
	put_block b abcdef0002 100000
	# Two peers pin one slot each (a peer may pin half the pool): every
	# slot is pinned and a third block has nowhere to go.
	local k
	for k in 1 2; do
		mkfifo "$BATS_TEST_TMPDIR/h$k.in" "$BATS_TEST_TMPDIR/h$k.out"
		"$OFFD_CLIENT" hold "$SOCK" "$MODEL" 0 0 "abcdef000$k" \
			<"$BATS_TEST_TMPDIR/h$k.in" >"$BATS_TEST_TMPDIR/h$k.out" \
			2>"$BATS_TEST_TMPDIR/h$k.err" &
		eval "H$k=\$!"
		eval "exec {W$k}>\"\$BATS_TEST_TMPDIR/h$k.in\""
		read -r line <"$BATS_TEST_TMPDIR/h$k.out"
		[[ $line == "pinned "* ]]
	done
	[ "$(stat_of pins)" -eq 2 ]
	random_file "$BATS_TEST_TMPDIR/c" 100000
	run "$OFFD_CLIENT" put "$SOCK" "$MODEL" 0 0 abcdef0003 "$BATS_TEST_TMPDIR/c"
	[ "$status" -ne 0 ]
	[[ $output == *"No space left on device"* ]]
	# Past the timeout, a starved put makes the next tick take them back.
	for k in $(seq 1 100); do
		client put "$SOCK" "$MODEL" 0 0 abcdef0003 "$BATS_TEST_TMPDIR/c" 2>/dev/null && break
		sleep 0.2
	done
	get_equals c abcdef0003
	[ "$(stat_of pins_revoked)" -eq 2 ]
	[ "$(stat_of pins)" -eq 0 ]
	grep -q "revoked 1 pin held over 1 s by pid $H1" "$BATS_TEST_TMPDIR/kvoffd.log"
	# The holders learn it when they release.
	exec {W1}>&- {W2}>&-
	# wait here, not under run: a subshell cannot wait for them.
	local rc1=0 rc2=0
	wait "$H1" || rc1=$?
	wait "$H2" || rc2=$?
	[ "$rc1" -eq 3 ] && [ "$rc2" -eq 3 ]
	grep -q "release: Stale file handle" "$BATS_TEST_TMPDIR/h1.err"
	grep -q "release: Stale file handle" "$BATS_TEST_TMPDIR/h2.err"
}

@test "kvoffd: malformed frames close only that client" {
	requires python3
	start_daemon --cpu-bytes 4M
	put_block a abcdef0001 100000
	hold_block abcdef0001
	run python3 - "$SOCK" <<'PY'
import os, socket, sys
for payload in (os.urandom(512), b"KVOD" + bytes(508), b"\x4b\x56\x4f\x44\x01\x00\x05\x00" + bytes(504)):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    hello = b""
    while len(hello) < 512:
        hello += s.recv(512 - len(hello))
    s.sendall(payload)
    assert s.recv(512) == b"", "daemon answered a malformed frame"
    s.close()
PY
	assert_success
	[ "$(stat_of protocol_errors)" -eq 3 ]
	# Hundreds more are counted, and said in a line or two, not hundreds.
	run python3 - "$SOCK" <<'PY'
import os, socket, sys
for _ in range(300):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    hello = b""
    while len(hello) < 512:
        hello += s.recv(512 - len(hello))
    s.sendall(os.urandom(512))
    s.recv(512)
    s.close()
PY
	assert_success
	[ "$(stat_of protocol_errors)" -eq 303 ]
	[ "$(grep -c 'malformed frame' "$BATS_TEST_TMPDIR/kvoffd.log")" -le 3 ] ||
		fail "$(grep -c 'malformed frame' "$BATS_TEST_TMPDIR/kvoffd.log") log lines"
	# The earlier client is still served: its release succeeds.
	release_hold
	get_equals a abcdef0001
}

@test "kvoffd: a peer with another uid and group is refused" {
	requires root setpriv
	public_socket
	start_daemon --cpu-bytes 4M
	put_block a abcdef0001 100000
	# The 0660 socket already keeps it out ...
	run setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$OFFD_CLIENT" get "$SOCK" "$MODEL" 0 0 abcdef0001
	assert_failure 4
	# ... and with the file opened up, SO_PEERCRED still does.
	chmod 666 "$SOCK"
	run setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$OFFD_CLIENT" get "$SOCK" "$MODEL" 0 0 abcdef0001
	assert_failure 4
	assert_output --partial "Permission denied"
	[ "$(stat_of refused)" -eq 1 ]
	get_equals a abcdef0001
}

@test "kvoffd: a peer in the socket's group is served" {
	requires root setpriv
	public_socket
	start_daemon --cpu-bytes 4M
	put_block a abcdef0001 100000
	chgrp 65534 "$SOCK"
	run setpriv --reuid=65534 --regid=100 --groups=65534 \
		"$OFFD_CLIENT" get "$SOCK" "$MODEL" 0 0 abcdef0001
	assert_success
	[ "$(stat_of refused)" -eq 0 ]
}

@test "kvoffd: memory stays within --cpu-bytes plus a small fixed overhead" {
	local i rss_kb pool_alloc slack
	start_daemon --cpu-bytes 64M
	random_file "$BATS_TEST_TMPDIR/blk" 2097152
	for i in $(seq 100 163); do
		client put "$SOCK" "$MODEL" 0 0 "abcdef0$i" "$BATS_TEST_TMPDIR/blk"
	done
	# The newest blocks are still in RAM; reading them maps their pages here too.
	for i in $(seq 156 163); do
		client get "$SOCK" "$MODEL" 0 0 "abcdef0$i" >/dev/null
	done
	[ "$(stat_of slots_used)" -eq 32 ]
	rss_kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$DPID/status")
	echo "VmRSS ${rss_kb} kB"
	# 16 MiB of fixed overhead (measured 11.5: the libraries libkv links,
	# libcurl's and libxml2's among them, 4.8 of it); the sanitizers'
	# runtime and shadow take 8 more.
	slack=16
	[ -z "${KV_SANITIZED:-}" ] || slack=24
	[ "$rss_kb" -le $(( (64 + slack) * 1024 )) ]
	# The pool's pages, mapped by clients or not, are the memfd's.
	pool_alloc=$(stat -L -c '%b * %B' "/proc/$DPID/fd/$(ls -l "/proc/$DPID/fd" |
		awk '/memfd:kvoffd-pool/ { print $9 }')")
	echo "pool $((pool_alloc)) bytes"
	[ $((pool_alloc)) -le $((64 << 20)) ]
}

@test "kvoffd: metrics are Prometheus text, rewritten on exit" {
	requires python3
	start_daemon --cpu-bytes 8M --metrics-file "$BATS_TEST_TMPDIR/metrics"
	[ -s "$BATS_TEST_TMPDIR/metrics" ]
	put_block a abcdef0001 300000
	get_equals a abcdef0001
	stop_daemon TERM
	[ "$DRC" -eq 0 ]
	run python3 - "$BATS_TEST_TMPDIR/metrics" <<'PY'
import re, sys
line_re = re.compile(r'^([a-z_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (\S+)$')
m = {}
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("# HELP ") or line.startswith("# TYPE "):
        continue
    g = line_re.match(line)
    assert g, line
    m[g.group(1) + (g.group(2) or "")] = float(g.group(4))
assert m['kv_offload_bytes_total{direction="put"}'] == 300000, m
assert m['kv_offload_bytes_total{direction="get"}'] == 300000, m
assert m['kv_offload_bytes_total{direction="spill"}'] == 300000, m
assert m['kv_offload_transfer_bytes_count{direction="put"}'] == 1, m
assert m['kv_offload_transfer_bytes_bucket{direction="put",le="1048576"}'] == 1, m
assert m['kv_offload_transfer_bytes_bucket{direction="put",le="262144"}'] == 0, m
assert m["kv_offload_hits_total"] == 1 and m["kv_offload_misses_total"] == 0, m
assert m["kv_offload_pool_bytes"] == 8 << 20, m
assert m["kv_offload_writebehind_drops_total"] == 0, m
assert "kv_offload_writebehind_queue_depth" in m
PY
	assert_success
}

@test "kvoffd: SIGHUP reopens the events file" {
	start_daemon --cpu-bytes 8M --events "$BATS_TEST_TMPDIR/events"
	put_block a abcdef0001 1000
	mv "$BATS_TEST_TMPDIR/events" "$BATS_TEST_TMPDIR/events.1"
	kill -HUP "$DPID"
	# The stats round trip is served after the signal was handled.
	stat_of pid >/dev/null
	put_block b abcdef0002 1000
	grep -q '"hash":"abcdef0001"' "$BATS_TEST_TMPDIR/events.1"
	grep -q '"hash":"abcdef0002"' "$BATS_TEST_TMPDIR/events"
	! grep -q '"hash":"abcdef0002"' "$BATS_TEST_TMPDIR/events.1"
}

@test "kvoffd: a second daemon on a live socket fails; a stale socket is replaced" {
	start_daemon --cpu-bytes 4M
	run kvoffd --root "$KV_ROOT" --socket "$SOCK" --cpu-bytes 4M
	assert_failure 3
	assert_output --partial "another daemon is serving it"
	stop_daemon KILL
	[ -S "$SOCK" ]
	start_daemon --cpu-bytes 4M
	put_block a abcdef0001 1000
	get_equals a abcdef0001
}

@test "kvoffd: a block larger than a slot is refused, the client stays usable" {
	start_daemon --cpu-bytes 4M --slot-bytes 64K
	random_file "$BATS_TEST_TMPDIR/big" 70000
	run client put "$SOCK" "$MODEL" 0 0 abcdef0001 "$BATS_TEST_TMPDIR/big"
	assert_failure 3
	assert_output --partial "File too large"
	put_block a abcdef0002 65536
	get_equals a abcdef0002
}

@test "kvoffd: a full file tier costs write-behind, never a put" {
	requires mount
	mount_tmpfs 1m
	KV_ROOT=$MNT
	# One writer: the queue is written in order, so the first block fits.
	start_daemon --cpu-bytes 8M --write-policy always --write-threads 1
	put_block a abcdef0001 700000
	put_block b abcdef0002 700000
	put_block c abcdef0003 700000
	until [ $(( $(stat_of spills) + $(stat_of wb_errors) )) -eq 3 ]; do :; done
	[ "$(stat_of spills)" -eq 1 ]
	[ "$(stat_of wb_errors)" -eq 2 ]
	get_equals b abcdef0002
	get_equals c abcdef0003
	# Said once for the tier, not once a block (kvoffd(8)).
	[ "$(grep -c "is full (No space left on device)" "$BATS_TEST_TMPDIR/kvoffd.log")" -eq 1 ]
	[ "$(grep -c "cannot write '${MODEL}" "$BATS_TEST_TMPDIR/kvoffd.log")" -eq 0 ]
	# The drain tries the unwritten blocks once more, then exits 0.
	stop_daemon TERM
	[ "$DRC" -eq 0 ]
	[ "$(grep -c "is full" "$BATS_TEST_TMPDIR/kvoffd.log")" -eq 1 ]
	cmp "$MNT/${MODEL}_r0/abc/de_g0/abcdef0001.bin" "$BATS_TEST_TMPDIR/a"
}

@test "kvoffd: a read-through of a damaged block fails its checksum, not silently" {
	requires xattr
	start_daemon --cpu-bytes 8M
	put_block a abcdef0001 300000
	stop_daemon TERM
	[ "$DRC" -eq 0 ]
	flip_byte "$KV_ROOT/${MODEL}_r0/abc/de_g0/abcdef0001.bin" 1000
	start_daemon --cpu-bytes 8M
	run client get "$SOCK" "$MODEL" 0 0 abcdef0001
	assert_failure 3
	assert_output --partial "checksum mismatch"
	[ "$(stat_of blocks)" -eq 0 ]
	[ "$(stat_of slots_used)" -eq 0 ]
}

@test "kvoffd: the pool goes on huge pages when the kernel has them free" {
	local free_pages
	free_pages=$(awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo)
	grep -q '^Hugepagesize: *2048 kB' /proc/meminfo && [ "${free_pages:-0}" -ge 4 ] ||
		skip "fewer than 4 free 2 MiB huge pages (vm.nr_hugepages)"
	start_daemon --cpu-bytes 8M
	[ "$(stat_of hugepages)" -eq 1 ]
	put_block a abcdef0001 2000000
	get_equals a abcdef0001
	grep -q "(huge pages)" "$BATS_TEST_TMPDIR/kvoffd.log"
}

@test "kvoffd: a slot size that is not a huge page multiple uses ordinary memory" {
	start_daemon --cpu-bytes 8M --slot-bytes 1M
	[ "$(stat_of hugepages)" -eq 0 ]
	[ "$(stat_of slots)" -eq 8 ]
	put_block a abcdef0001 1048576
	get_equals a abcdef0001
}

@test "kvoffd: kvput --daemon and kvget --daemon move blocks through the RAM tier" {
	start_daemon --cpu-bytes 16M
	random_file "$BATS_TEST_TMPDIR/a" 500000
	kvput --daemon "$SOCK" --model-dir "$MODEL" --rank 1 --group 2 abcdef0001 \
		"$BATS_TEST_TMPDIR/a"
	kvget --daemon "$SOCK" --model-dir "$MODEL" --rank 1 --group 2 \
		-o "$BATS_TEST_TMPDIR/got" abcdef0001
	cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/a"
	# $KV_DAEMON is the default; stdin and stdout work as without it.
	KV_DAEMON=$SOCK kvput --model-dir "$MODEL" ABCDEF0002 <"$BATS_TEST_TMPDIR/a"
	KV_DAEMON=$SOCK kvget --model-dir "$MODEL" abcdef0002 >"$BATS_TEST_TMPDIR/got2"
	cmp "$BATS_TEST_TMPDIR/got2" "$BATS_TEST_TMPDIR/a"
	kvget --daemon "$SOCK" --model-dir "$MODEL" --rank 1 --group 2 --exists abcdef0001
	run kvget --daemon "$SOCK" --model-dir "$MODEL" --exists abcdef0001
	assert_failure 1
	run kvget --daemon "$SOCK" --model-dir "$MODEL" -o "$BATS_TEST_TMPDIR/x" abcdef0099
	assert_failure 1
	assert_output --partial "no block abcdef0099 in the daemon at '$SOCK'"
	kvget --daemon "$SOCK" --model-dir "$MODEL" --blocks 2 --block-bytes 1000 \
		abcdef0002 >"$BATS_TEST_TMPDIR/tail"
	cmp "$BATS_TEST_TMPDIR/tail" <(tail -c 2000 "$BATS_TEST_TMPDIR/a")
	[ "$(stat_of puts)" -eq 2 ]
	# The RAM tier only: nothing reached the file tier yet.
	[ ! -e "$KV_ROOT/${MODEL}_r1" ]
}

@test "kvoffd: kvget --daemon reads through a block kvput wrote to the file tier" {
	random_file "$BATS_TEST_TMPDIR/a" 300000
	mkdir "$KV_ROOT/$MODEL"
	kvput --model-dir "$MODEL" abcdef0003 "$BATS_TEST_TMPDIR/a"
	start_daemon --cpu-bytes 8M
	kvget --daemon "$SOCK" --model-dir "$MODEL" abcdef0003 >"$BATS_TEST_TMPDIR/got"
	cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/a"
	[ "$(stat_of readthroughs)" -eq 1 ]
}

@test "kvoffd: concurrent kvput/kvget --daemon of shared and own keys, content verified" {
	local i k pids=() rc=0
	start_daemon --cpu-bytes 32M
	for k in 1 2 3 4; do
		random_file "$BATS_TEST_TMPDIR/shared$k" 400000
		for i in 1 2 3; do
			random_file "$BATS_TEST_TMPDIR/own$i.$k" 300000
		done
	done
	for i in 1 2 3; do
		(
			for round in 1 2 3; do
				for k in 1 2 3 4; do
					kvput --daemon "$SOCK" --model-dir "$MODEL" "aaaa000$k" \
						"$BATS_TEST_TMPDIR/shared$k"
					kvput --daemon "$SOCK" --model-dir "$MODEL" "bbbb$i$round$k" \
						"$BATS_TEST_TMPDIR/own$i.$k"
					kvget --daemon "$SOCK" --model-dir "$MODEL" "aaaa000$k" |
						cmp - "$BATS_TEST_TMPDIR/shared$k"
					kvget --daemon "$SOCK" --model-dir "$MODEL" "bbbb$i$round$k" |
						cmp - "$BATS_TEST_TMPDIR/own$i.$k"
				done
			done
		) &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || rc=$?
	done
	[ "$rc" -eq 0 ]
	[ "$(stat_of puts)" -eq 72 ]
	[ "$(stat_of gets)" -eq 72 ]
	[ "$(stat_of pins)" -eq 0 ]
}

@test "kvoffd: kvls --daemon lists the RAM tier" {
	requires python3
	start_daemon --cpu-bytes 16M
	random_file "$BATS_TEST_TMPDIR/a" 1000
	kvput --daemon "$SOCK" --model-dir "$MODEL" --rank 3 abcdef0001 "$BATS_TEST_TMPDIR/a"
	kvput --daemon "$SOCK" --model-dir other_0123456789ab abcdef0002 "$BATS_TEST_TMPDIR/a"
	run kvls --daemon "$SOCK"
	assert_success
	assert_line --index 0 --regexp '^ *SIZE +PINS +DISK +RANK +GROUP +PATH$'
	assert_output --partial "${MODEL}_r3/abc/de_g0/abcdef0001.bin"
	run kvls --daemon "$SOCK" --ndjson --model "$MODEL"
	assert_success
	[ "${#lines[@]}" -eq 1 ]
	run python3 -c 'import json, sys
r = json.loads(sys.argv[1])
assert r == {"group": 0, "hash": "abcdef0001", "model_dir": sys.argv[2], "on_disk": False,
             "path": sys.argv[2] + "_r3/abc/de_g0/abcdef0001.bin", "pins": 0, "rank": 3,
             "size_bytes": 1000}, r' "${lines[0]}" "$MODEL"
	assert_success
	run kvls --daemon "$SOCK" -J --rank 0
	assert_success
	[ "$(echo "$output" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["blocks"]))')" -eq 1 ]
	run kvls --daemon "$SOCK" --rank 7
	assert_failure 1
	run kvls --daemon "$SOCK" --check
	assert_failure 2
}

@test "kvoffd: kvput, kvget and kvls exit 4 when the daemon is unreachable" {
	random_file "$BATS_TEST_TMPDIR/a" 1000
	run kvput --daemon "$SOCK" --model-dir "$MODEL" abcdef0001 "$BATS_TEST_TMPDIR/a"
	assert_failure 4
	assert_output --partial "cannot reach daemon at '$SOCK'"
	run kvget --daemon "$SOCK" --model-dir "$MODEL" abcdef0001
	assert_failure 4
	run kvls --daemon "$SOCK"
	assert_failure 4
	# A daemon that went away mid-life: a stale socket file.
	start_daemon --cpu-bytes 4M
	stop_daemon KILL
	run env KV_DAEMON="$SOCK" kvget --model-dir "$MODEL" --exists abcdef0001
	assert_failure 4
}

@test "kvoffd: a block another client writes into after COMMIT is never served or written behind" {
	requires kvoffd
	start_daemon --cpu-bytes 16M --write-policy on-evict
	put_block a abcdef0001 65536
	put_block b abcdef0002 65536
	client scribble "$SOCK" "$MODEL" 0 0 abcdef0001
	# Served: a miss (the file tier never had it), never the scribbled bytes.
	run client get "$SOCK" "$MODEL" 0 0 abcdef0001
	[ "$status" -eq 1 ] || fail "get of an altered block exited $status"
	[ "$(stat_of altered)" -eq 1 ]
	# Written behind: the altered block never reaches disk; an intact one does.
	client get "$SOCK" "$MODEL" 0 0 abcdef0002 > "$BATS_TEST_TMPDIR/b.got"
	cmp "$BATS_TEST_TMPDIR/b" "$BATS_TEST_TMPDIR/b.got"
	client scribble "$SOCK" "$MODEL" 0 0 abcdef0002
	stop_daemon TERM
	[ "$DRC" -eq 0 ]
	[ -z "$(find "$KV_ROOT" -name 'abcdef0002.bin')" ] || fail "an altered block was written behind"
	[ -z "$(find "$KV_ROOT" -name 'abcdef0001.bin')" ]
}

@test "kvoffd's start lines name each tier's dir beside its own blocks, sizes as the other tools print them" {
	local shared=$BATS_TEST_TMPDIR/shared local=$BATS_TEST_TMPDIR/nvme h
	mkdir -p "$shared" "$local"
	make_config > "$BATS_TEST_TMPDIR/config.json"
	random_file "$BATS_TEST_TMPDIR/blk" 1048576
	for h in 1 2 3 4 5; do
		kvput --root "$shared" --config "$BATS_TEST_TMPDIR/config.json" "abcdef0$h" "$BATS_TEST_TMPDIR/blk"
	done
	start_kvoffd --tier "local:$local:6T" --tier "shared:$shared" --cpu-bytes 16M
	stop_daemon
	run cat "$BATS_TEST_TMPDIR/kvoffd.log"
	assert_line --partial "serving $SOCK: a 16M pool of "
	assert_line "kvoffd: tier 0, local, $local: 0 blocks, 0B, of 6.0T"
	assert_line "kvoffd: tier 1, shared, $shared: 5 blocks, 5.0M, unbounded"
	# No raw byte counts: 6T is not 6597069766656.
	refute_output --regexp '(of |, |up to )[0-9]{7,}'
}

@test "kvoffd warns of a pool larger than the memory available, and --strict refuses it" {
	local avail_kib pool
	avail_kib=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
	[ -n "$avail_kib" ] || skip "no MemAvailable in /proc/meminfo"
	# Twice what is available, in whole GiB: mapped, never touched.
	pool=$(( (avail_kib * 2 >> 20) + 1 ))G
	run --separate-stderr kvoffd --root "$KV_ROOT" --socket "$SOCK" --cpu-bytes "$pool" --strict
	assert_equal "$status" 2
	[[ "$stderr" == *"pool is more than the "*" of memory available (--strict)"* ]] ||
		fail "stderr: $stderr"
	[ ! -e "$SOCK" ]
	start_daemon --cpu-bytes "$pool"
	stop_daemon
	[ "$DRC" -eq 0 ]
	grep -q "warning: a $pool pool is more than the .* of memory available" \
		"$BATS_TEST_TMPDIR/kvoffd.log" || fail "$(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	# One that fits says nothing of memory.
	: > "$BATS_TEST_TMPDIR/kvoffd.log"
	start_daemon --cpu-bytes 16M --strict
	stop_daemon
	[ "$DRC" -eq 0 ]
	! grep -q "memory available" "$BATS_TEST_TMPDIR/kvoffd.log"
}
