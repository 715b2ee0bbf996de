#!/usr/bin/env bats
# Files the tools write by name (kvget -o and --archive, kvoffd's
# --metrics-file, kvwatch's --metrics): a regular file is replaced whole,
# but a path that exists and is not one is never replaced.  A device or a
# FIFO is written in place (kvget -o /dev/null as root once left a
# regular file for /dev/null), a FIFO with no reader is refused at once,
# and a symbolic link is refused, neither followed nor replaced.

load test_helper
load last_use

setup() {
	common_setup
	CFG=$BATS_TEST_TMPDIR/config.json
	make_config Qwen/Qwen3-8B > "$CFG"
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	DPID= WPID= RPID=
}

teardown() {
	kill_daemon
	stop_kvwatch KILL
	[ -z "${RPID:-}" ] || kill "$RPID" 2>/dev/null || true
	common_teardown
}

# put HASH BYTES: a random block, kept in $BATS_TEST_TMPDIR/HASH.
put() {
	random_file "$BATS_TEST_TMPDIR/$1" "$2"
	kvput --root "$KV_ROOT" --config "$CFG" "$1" "$BATS_TEST_TMPDIR/$1"
}

# null_device PATH: a character device like /dev/null at PATH, or skip.
null_device() {
	mknod "$1" c 1 3 2>/dev/null || skip "cannot mknod here (needs root)"
}

# fifo_reader FIFO OUT: cat FIFO > OUT in the background ($RPID).  This
# shell holds FIFO open too ($HOLD), so a writer finds a reader however
# soon it comes; close_fifo lets cat see the end.
fifo_reader() {
	mkfifo "$1"
	exec {HOLD}<>"$1"
	cat "$1" > "$2" {HOLD}>&- 3>&- &
	RPID=$!
}

close_fifo() {
	exec {HOLD}>&-
	wait "$RPID"
	RPID=
}

# gone PID: whether PID has exited.
gone() {
	! kill -0 "$1" 2>/dev/null
}

@test "kvget -o a character device writes to it and leaves it a device" {
	local dev=$BATS_TEST_TMPDIR/null
	null_device "$dev"
	put abcde00001 100000
	run --separate-stderr kvget --root "$KV_ROOT" --config "$CFG" -o "$dev" abcde00001
	assert_success
	[ "$(stat -c %F "$dev")" = "character special file" ] || fail "now $(stat -c %F "$dev")"
	[ "$(stat -c %t:%T "$dev")" = "1:3" ]
	# --batch -o DIR: a device at DIR/<hash>.bin too; --archive FILE too.
	mkdir "$BATS_TEST_TMPDIR/out"
	null_device "$BATS_TEST_TMPDIR/out/abcde00001.bin"
	echo abcde00001 | kvget --root "$KV_ROOT" --config "$CFG" --batch -o "$BATS_TEST_TMPDIR/out" > /dev/null
	[ "$(stat -c %F "$BATS_TEST_TMPDIR/out/abcde00001.bin")" = "character special file" ]
	echo abcde00001 | kvget --root "$KV_ROOT" --config "$CFG" --batch --archive "$dev" > /dev/null
	[ "$(stat -c %F "$dev")" = "character special file" ]
	[ -z "$(ls "$BATS_TEST_TMPDIR" "$BATS_TEST_TMPDIR/out" | grep '\.tmp$')" ] || fail "temps left"
}

@test "kvget -o a FIFO with a reader: the reader gets the block, the FIFO stays" {
	local fifo=$BATS_TEST_TMPDIR/fifo
	# Bigger than a pipe holds: the writes must wait for the reader.
	put abcde00002 $((1 << 20))
	fifo_reader "$fifo" "$BATS_TEST_TMPDIR/got"
	run --separate-stderr kvget --root "$KV_ROOT" --config "$CFG" -o "$fifo" abcde00002
	assert_success
	close_fifo
	cmp "$BATS_TEST_TMPDIR/abcde00002" "$BATS_TEST_TMPDIR/got"
	[ "$(stat -c %F "$fifo")" = fifo ]
}

@test "kvget -o a FIFO with no reader is refused at once, not waited on" {
	local fifo=$BATS_TEST_TMPDIR/fifo pid rc=0
	put abcde00003 4096
	mkfifo "$fifo"
	kvget --root "$KV_ROOT" --config "$CFG" -o "$fifo" abcde00003 2> "$BATS_TEST_TMPDIR/err" &
	pid=$!
	wait_for gone "$pid"
	wait "$pid" || rc=$?
	[ "$rc" -eq 3 ] || fail "exit $rc: $(cat "$BATS_TEST_TMPDIR/err")"
	grep -qx "kvget: cannot write '$fifo': it is a FIFO with no reader" "$BATS_TEST_TMPDIR/err" ||
		fail "$(cat "$BATS_TEST_TMPDIR/err")"
	[ "$(stat -c %F "$fifo")" = fifo ]
}

@test "kvget -o a symbolic link is refused: neither followed nor replaced" {
	local link=$BATS_TEST_TMPDIR/link target=$BATS_TEST_TMPDIR/target
	put abcde00004 4096
	echo keep > "$target"
	ln -s "$target" "$link"
	run --separate-stderr kvget --root "$KV_ROOT" --config "$CFG" -o "$link" abcde00004
	[ "$status" -eq 3 ]
	[ "$stderr" = "kvget: cannot write '$link': it is a symbolic link (not followed, not replaced)" ] ||
		fail "$stderr"
	[ -L "$link" ] && [ "$(readlink "$link")" = "$target" ] || fail "the link was replaced"
	[ "$(cat "$target")" = keep ] || fail "written through the link"
	# A directory is refused too; a regular file is still replaced whole.
	run kvget --root "$KV_ROOT" --config "$CFG" -o "$BATS_TEST_TMPDIR" abcde00004
	[ "$status" -eq 3 ]
	kvget --root "$KV_ROOT" --config "$CFG" -o "$target" abcde00004
	cmp "$BATS_TEST_TMPDIR/abcde00004" "$target"
}

@test "kvoffd --metrics-file a character device writes to it and leaves it a device" {
	requires kvoffd
	local dev=$BATS_TEST_TMPDIR/metrics
	null_device "$dev"
	start_daemon --cpu-bytes 8M --metrics-file "$dev" ||
		fail "kvoffd: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	stop_daemon
	[ "$DRC" -eq 0 ] || fail "kvoffd exited $DRC: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	[ "$(stat -c %F "$dev")" = "character special file" ] || fail "now $(stat -c %F "$dev")"
	[ "$(stat -c %t:%T "$dev")" = "1:3" ]
}

@test "kvoffd --metrics-file a FIFO: its reader gets the metrics, the FIFO stays" {
	requires kvoffd
	local fifo=$BATS_TEST_TMPDIR/metrics
	fifo_reader "$fifo" "$BATS_TEST_TMPDIR/got"
	start_daemon --cpu-bytes 8M --metrics-file "$fifo" ||
		fail "kvoffd: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	stop_daemon
	[ "$DRC" -eq 0 ] || fail "kvoffd exited $DRC: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
	close_fifo
	grep -q '^kv_offload_blocks 0$' "$BATS_TEST_TMPDIR/got"
	[ "$(stat -c %F "$fifo")" = fifo ]
}

@test "kvwatch --metrics a character device writes to it and leaves it a device" {
	requires root
	local dev=$BATS_TEST_TMPDIR/metrics
	null_device "$dev"
	start_kvwatch --metrics "$dev"
	stop_kvwatch
	[ "$WRC" -eq 0 ] || fail "kvwatch exited $WRC: $(cat "$BATS_TEST_TMPDIR/kvwatch.err")"
	[ "$(stat -c %F "$dev")" = "character special file" ] || fail "now $(stat -c %F "$dev")"
	[ "$(stat -c %t:%T "$dev")" = "1:3" ]
	[ ! -s "$BATS_TEST_TMPDIR/kvwatch.err" ] || fail "$(cat "$BATS_TEST_TMPDIR/kvwatch.err")"
}

@test "kvwatch --metrics a FIFO: its reader gets the metrics; a link is refused" {
	requires root
	local fifo=$BATS_TEST_TMPDIR/metrics link=$BATS_TEST_TMPDIR/link
	fifo_reader "$fifo" "$BATS_TEST_TMPDIR/got"
	start_kvwatch --metrics "$fifo"
	stop_kvwatch
	[ "$WRC" -eq 0 ] || fail "kvwatch exited $WRC: $(cat "$BATS_TEST_TMPDIR/kvwatch.err")"
	close_fifo
	grep -q '^kvwatch_uses_total{source="read"} 0$' "$BATS_TEST_TMPDIR/got"
	[ "$(stat -c %F "$fifo")" = fifo ]
	echo keep > "$BATS_TEST_TMPDIR/target"
	ln -s "$BATS_TEST_TMPDIR/target" "$link"
	start_kvwatch --metrics "$link"
	stop_kvwatch
	[ -L "$link" ] && [ "$(cat "$BATS_TEST_TMPDIR/target")" = keep ] || fail "the link was replaced or followed"
	grep -q "cannot write '$link': it is a symbolic link" "$BATS_TEST_TMPDIR/kvwatch.err"
}
