#!/usr/bin/env bats
# kvwatch: a block's last use is true whoever used it.  The acceptance
# scenario: 300 blocks of 64 KiB written 3 h, 2 h and 1 h ago in three
# sets of 100; the oldest set is then used (read as model servers read,
# or announced by a model server as GPU BlockStored); kvevict --max-bytes
# 18M --low-bytes 12800K --hot 30m must then delete no block just used,
# and the set written 2 h ago first.

load test_helper
load last_use

PUBLISH=$BATS_TEST_DIRNAME/kv_publish.py

setup() {
	common_setup
	requires root jq
	WPID= PPID_=
	make_config > "$BATS_TEST_TMPDIR/config.json"
	CFG=$BATS_TEST_TMPDIR/config.json
}

teardown() {
	stop_kvwatch KILL
	[ -z "${PPID_:-}" ] || kill "$PPID_" 2>/dev/null || true
	common_teardown
}

# wait_uses N: until kvwatch has printed N records (events arrive
# asynchronously; reads are recorded by the drain at SIGTERM).
wait_uses() {
	local i
	for ((i = 0; i < 300; i++)); do
		[ "$(wc -l < "$BATS_TEST_TMPDIR/kvwatch.out")" -ge "$1" ] && return 0
		sleep 0.1
	done
	fail "kvwatch recorded $(wc -l < "$BATS_TEST_TMPDIR/kvwatch.out") uses, not $1: $(cat "$BATS_TEST_TMPDIR/kvwatch.err")"
}

# publish MODE ARGS...: kv_publish.py bound on a free port, in the
# background ($PPID_); its endpoint in $EP.
publish() {
	requires /usr/bin/python3
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || skip "needs python3-zmq and python3-msgpack"
	local out=$BATS_TEST_TMPDIR/pub.$RANDOM i
	/usr/bin/python3 "$PUBLISH" "bind:tcp://127.0.0.1:*" "$@" > "$out" &
	PPID_=$!
	for ((i = 0; i < 100; i++)); do
		EP=$(head -1 "$out")
		[ -n "$EP" ] && return 0
		sleep 0.1
	done
	fail "the publisher did not start"
}

@test "kvwatch: --help, --version, usage errors exit 2, a missing root exits 3" {
	run kvwatch --help
	assert_success
	[[ "$output" == *"--resolution DUR"* ]]
	run kvwatch --version
	assert_success
	[[ "$output" == "kvwatch (kvtools) "* ]]
	run kvwatch --bogus
	[ "$status" -eq 2 ]
	run kvwatch --root "$KV_ROOT" --events 'udp://x'
	[ "$status" -eq 2 ]
	run kvwatch --root "$KV_ROOT" --resolution soon
	[ "$status" -eq 2 ]
	run kvwatch --root "$BATS_TEST_TMPDIR/absent"
	[ "$status" -eq 3 ]
}

@test "kvwatch: without CAP_SYS_ADMIN it exits 3 and names the capability" {
	run setpriv --bounding-set=-sys_admin kvwatch --root "$KV_ROOT"
	[ "$status" -eq 3 ]
	[[ "$output" == *CAP_SYS_ADMIN* ]]
}

@test "without kvwatch: on noatime tmpfs, kvevict deletes the blocks just read (the problem)" {
	mount_tmpfs 64m
	mount -o remount,noatime "$MNT"
	KV_ROOT=$MNT
	history "$KV_ROOT"
	read_set "$KV_ROOT" 1
	run kvevict --root "$KV_ROOT" --max-bytes 18M --low-bytes 12800K --hot 30m --ndjson
	assert_success
	hot=$(jq -r .path <<<"$output" | sort | comm -12 <(sort "$BATS_TEST_TMPDIR/set.1") - | wc -l)
	[ "$hot" -eq 100 ]
}

@test "acceptance, reads: noatime tmpfs, plain and O_DIRECT reads; no hot block evicted, precision >= 0.99" {
	mount_tmpfs 64m
	mount -o remount,noatime "$MNT"
	KV_ROOT=$MNT
	history "$KV_ROOT"
	start_kvwatch --metrics "$BATS_TEST_TMPDIR/kvwatch.prom"
	read_set "$KV_ROOT" 1
	stop_kvwatch
	[ "$WRC" -eq 0 ]
	[ "$(jq -r 'select(.source == "read") | .path' "$BATS_TEST_TMPDIR/kvwatch.out" | sort -u | wc -l)" -eq 100 ]
	grep -qx 'kvwatch_stamped_total 100' "$BATS_TEST_TMPDIR/kvwatch.prom"
	grep -qx 'kvwatch_uses_total{source="read"} 100' "$BATS_TEST_TMPDIR/kvwatch.prom"
	# kvls sees the same last use, and --older-than follows it
	[ "$(kvls --root "$KV_ROOT" --blocks --older-than 30m --ndjson | wc -l)" -eq 200 ]
	evict_and_judge "$KV_ROOT"
}

@test "acceptance, events: no reads, a publisher announces the hot blocks as GPU BlockStored" {
	mount_tmpfs 64m
	mount -o remount,noatime "$MNT"
	KV_ROOT=$MNT
	history "$KV_ROOT"
	publish positional-int $(hashes 1)
	start_kvwatch --events "$EP"
	wait_uses 100
	stop_kvwatch
	[ "$(jq -r 'select(.source == "event") | .path' "$BATS_TEST_TMPDIR/kvwatch.out" | sort -u | wc -l)" -eq 100 ]
	evict_and_judge "$KV_ROOT"
}

@test "events: each encoding (positional or map, hashes as integers or bytes) names the same blocks" {
	history "$KV_ROOT"
	local mode n=0
	for mode in positional-int positional-bytes map-int map-bytes; do
		n=$((n + 10))
		: > "$BATS_TEST_TMPDIR/kvwatch.out"
		publish "$mode" $(hashes 1 | sed -n "$((n - 9)),${n}p")
		start_kvwatch --events "$EP"
		wait_uses 10
		stop_kvwatch
		wait "$PPID_" || true
		PPID_=
		[ "$(jq -r .hash "$BATS_TEST_TMPDIR/kvwatch.out" | sort)" = "$(hashes 1 | sed -n "$((n - 9)),${n}p" | sort)" ] ||
			fail "$mode: $(cat "$BATS_TEST_TMPDIR/kvwatch.out")"
	done
}

@test "events: without --events, kvwatch subscribes to \$KVWATCH_EVENTS, spaces or commas between" {
	history "$KV_ROOT"
	publish positional-int $(hashes 1 | head -10)
	export KVWATCH_EVENTS="ipc://$BATS_TEST_TMPDIR/other.sock, $EP"
	start_kvwatch
	wait_uses 10
	stop_kvwatch
	[ "$(jq -r .hash "$BATS_TEST_TMPDIR/kvwatch.out" | sort)" = "$(hashes 1 | head -10 | sort)" ]
	[ -S "$BATS_TEST_TMPDIR/other.sock" ]
	# Checked as --events is; --events wins.
	run --separate-stderr env KVWATCH_EVENTS='udp://x' kvwatch --root "$KV_ROOT"
	[ "$status" -eq 2 ]
	[[ "$stderr" == 'kvwatch: $KVWATCH_EVENTS: '* ]] || fail "$stderr"
	: > "$BATS_TEST_TMPDIR/kvwatch.out"
	KVWATCH_EVENTS=udp://x
	start_kvwatch --events "ipc://$BATS_TEST_TMPDIR/ev.sock"
	stop_kvwatch
	[ "$WRC" -eq 0 ]
}

@test "events: storage media and removals are not uses; kvwatch binds on ipc:// for a connecting publisher" {
	history "$KV_ROOT"
	local sock=$BATS_TEST_TMPDIR/ev.sock
	start_kvwatch --events "ipc://$sock" --metrics "$BATS_TEST_TMPDIR/m.prom"
	requires /usr/bin/python3
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || skip "needs python3-zmq and python3-msgpack"
	KV_PUBLISH_LINGER=0.5 /usr/bin/python3 "$PUBLISH" "connect:ipc://$sock" storage $(hashes 1) > /dev/null
	KV_PUBLISH_LINGER=0.5 /usr/bin/python3 "$PUBLISH" "connect:ipc://$sock" removed $(hashes 1) > /dev/null
	KV_PUBLISH_LINGER=0.5 /usr/bin/python3 "$PUBLISH" "connect:ipc://$sock" map-int $(hashes 2 | head -3) > /dev/null
	wait_uses 3
	stop_kvwatch
	[ "$(wc -l < "$BATS_TEST_TMPDIR/kvwatch.out")" -eq 3 ]
	[ "$(jq -r .hash "$BATS_TEST_TMPDIR/kvwatch.out" | sort)" = "$(hashes 2 | head -3 | sort)" ]
	grep -qx 'kvwatch_events_total 3' "$BATS_TEST_TMPDIR/m.prom"
}

@test "events: an ipc:// path that is not a socket is refused, not replaced" {
	echo precious > "$BATS_TEST_TMPDIR/precious.txt"
	run kvwatch --root "$KV_ROOT" --events "ipc://$BATS_TEST_TMPDIR/precious.txt"
	[ "$status" -eq 3 ]
	[ "$(cat "$BATS_TEST_TMPDIR/precious.txt")" = precious ]
}

@test "events: hostile frames and a flood of unmatched hashes stop neither events nor reads" {
	# noatime: only kvwatch stamps, so each use prints a record
	mount_tmpfs 64m
	mount -o remount,noatime "$MNT"
	KV_ROOT=$MNT
	history "$KV_ROOT"
	requires /usr/bin/python3
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || skip "needs python3-zmq and python3-msgpack"
	local sock=$BATS_TEST_TMPDIR/ev.sock
	start_kvwatch --events "ipc://$sock" --metrics "$BATS_TEST_TMPDIR/m.prom"
	/usr/bin/python3 "$PUBLISH" "connect:ipc://$sock" hostile $(hashes 1 | head -5) > /dev/null
	wait_uses 5
	/usr/bin/python3 "$PUBLISH" "connect:ipc://$sock" flood:20000 $(hashes 2 | head -5) > /dev/null &
	PPID_=$!
	sed -n 1,50p "$BATS_TEST_TMPDIR/set.3" > "$BATS_TEST_TMPDIR/set.4"
	read_set "$KV_ROOT" 4
	wait_uses 60
	stop_kvwatch
	[ "$WRC" -eq 0 ]
	[ "$(jq -r 'select(.source == "read") | .path' "$BATS_TEST_TMPDIR/kvwatch.out" | sort -u | wc -l)" -eq 50 ]
	[ "$(jq -r 'select(.source == "event") | .hash' "$BATS_TEST_TMPDIR/kvwatch.out" | sort -u | wc -l)" -eq 10 ]
	bad=$(awk '$1 == "kvwatch_frames_bad_total" { print $2 }' "$BATS_TEST_TMPDIR/m.prom")
	[ "$bad" -ge 9 ] || fail "bad frames $bad"
	# what ZMQ dropped past the high-water mark shows as gaps
	unmatched=$(awk '$1 == "kvwatch_events_unmatched_total" { print $2 }' "$BATS_TEST_TMPDIR/m.prom")
	gaps=$(awk '$1 == "kvwatch_event_gaps_total" { print $2 }' "$BATS_TEST_TMPDIR/m.prom")
	[ "$unmatched" -ge $(((20000 - gaps) * 64)) ] || fail "unmatched $unmatched, gaps $gaps"
}

@test "events: under a flood that does not stop, SIGTERM still ends kvwatch, what it had recorded kept" {
	requires /usr/bin/python3
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || skip "needs python3-zmq and python3-msgpack"
	history "$KV_ROOT"
	local sock=$BATS_TEST_TMPDIR/ev.sock stop=$BATS_TEST_TMPDIR/stop-flood
	start_kvwatch --events "ipc://$sock" --resolution 0
	/usr/bin/python3 "$PUBLISH" "connect:ipc://$sock" "flood-until:$stop" \
		> "$BATS_TEST_TMPDIR/pub.out" &
	PPID_=$!
	wait_for grep -q flooding "$BATS_TEST_TMPDIR/pub.out"
	p=$(head -1 "$BATS_TEST_TMPDIR/set.1")
	cat "$KV_ROOT/$p" > /dev/null
	kill -TERM "$WPID"
	# It stops taking input: it exits while the flood goes on.
	wait_for eval '! kill -0 "$WPID" 2>/dev/null'
	touch "$stop"
	wait "$PPID_" || true
	PPID_=
	stop_kvwatch
	[ "$WRC" -eq 0 ]
	grep -q "$p" "$BATS_TEST_TMPDIR/kvwatch.out"
}

@test "reads: at most one stamp per block per --resolution; kvwatch's own and non-block opens are not uses" {
	mount_tmpfs 64m
	mount -o remount,noatime "$MNT"
	KV_ROOT=$MNT
	history "$KV_ROOT"
	echo x > "$KV_ROOT/notes.bin"
	start_kvwatch --resolution 1h --metrics "$BATS_TEST_TMPDIR/m.prom"
	p=$(head -1 "$BATS_TEST_TMPDIR/set.1")
	for i in 1 2 3 4 5; do cat "$KV_ROOT/$p" > /dev/null; done
	cat "$KV_ROOT/notes.bin" "$KV_ROOT"/*/config.json > /dev/null
	stop_kvwatch
	[ "$(wc -l < "$BATS_TEST_TMPDIR/kvwatch.out")" -eq 1 ]
	grep -qx 'kvwatch_stamped_total 1' "$BATS_TEST_TMPDIR/m.prom"
	grep -qx 'kvwatch_skipped_total 4' "$BATS_TEST_TMPDIR/m.prom"
	jq -e '(keys == ["hash", "path", "source", "time_ns", "where"]) and .where == "atime"' \
		"$BATS_TEST_TMPDIR/kvwatch.out"
}

@test "-J: at exit, what was recorded as one JSON document (the metrics' counters); not with --ndjson" {
	mount_tmpfs 64m
	mount -o remount,noatime "$MNT"
	KV_ROOT=$MNT
	history "$KV_ROOT"
	local fifo=$BATS_TEST_TMPDIR/ready line p i
	mkfifo "$fifo"
	kvwatch --root "$KV_ROOT" --ready-fd 3 --resolution 1h -J 3>"$fifo" \
		>"$BATS_TEST_TMPDIR/doc" 2>>"$BATS_TEST_TMPDIR/kvwatch.err" &
	WPID=$!
	read -r line <"$fifo" || true
	p=$(head -1 "$BATS_TEST_TMPDIR/set.1")
	for i in 1 2 3; do cat "$KV_ROOT/$p" > /dev/null; done
	stop_kvwatch
	[ "$WRC" -eq 0 ]
	[ "$(wc -l < "$BATS_TEST_TMPDIR/doc")" -eq 1 ] || fail "$(cat "$BATS_TEST_TMPDIR/doc")"
	jq -e --arg root "$KV_ROOT" '.uses == {"event": 0, "read": 3} and .stamped == 1 and
		.skipped == 2 and .journaled == 0 and .index_blocks == 300 and .root == $root' \
		"$BATS_TEST_TMPDIR/doc" || fail "$(cat "$BATS_TEST_TMPDIR/doc")"
	run --separate-stderr kvwatch --root "$KV_ROOT" -J --ndjson
	[ "$status" -eq 2 ]
}

@test "reads: through a bind mount of the volume elsewhere, and of a block written after the start" {
	requires mount
	history "$KV_ROOT"
	start_kvwatch --resolution 0
	kvput --root "$KV_ROOT" --config "$CFG" b00000000000000000000000000000001 "$BATS_TEST_TMPDIR/blk"
	MNT=$BATS_TEST_TMPDIR/pod
	mkdir -p "$MNT"
	mount --bind "$KV_ROOT" "$MNT"
	mount -o remount,bind,ro "$MNT"
	p=$(head -1 "$BATS_TEST_TMPDIR/set.1")
	cat "$MNT/$p" > /dev/null
	cat "$MNT"/*/b00/00_g0/b00000000000000000000000000000001.bin > /dev/null
	stop_kvwatch
	[ "$(jq -r .path "$BATS_TEST_TMPDIR/kvwatch.out" | sort)" = "$( (echo "$p"; cd "$KV_ROOT" && ls */b00/00_g0/*.bin) | sort)" ]
	now=$(date +%s)
	[ $((now - $(stat -c %X "$KV_ROOT/$p"))) -lt 600 ]
}

@test "journal: where a block cannot be stamped the use goes to ROOT/.kvwatch/NODE.uses, and kvevict and kvls follow it" {
	mount_tmpfs 64m
	mount -o remount,noatime "$MNT"
	KV_ROOT=$MNT
	history "$KV_ROOT"
	chown -R nobody "$KV_ROOT"/*_r0
	# root without CAP_FOWNER and CAP_DAC_OVERRIDE: another user's
	# 0644 block refuses utimensat
	KVWATCH_PREFIX="setpriv --bounding-set=-fowner,-dac_override" start_kvwatch --node n1
	read_set "$KV_ROOT" 1
	stop_kvwatch
	[ "$(jq -r 'select(.where == "journal") | .path' "$BATS_TEST_TMPDIR/kvwatch.out" | sort -u | wc -l)" -eq 100 ]
	[ "$(wc -l < "$KV_ROOT/.kvwatch/n1.uses")" -eq 100 ]
	# the atimes did not move; the journal says what did
	p=$(head -1 "$BATS_TEST_TMPDIR/set.1")
	[ $(($(date +%s) - $(stat -c %X "$KV_ROOT/$p"))) -gt 3000 ]
	line=$(kvls --root "$KV_ROOT" --blocks --ndjson | jq -c "select(.path == \"$p\")")
	[ $(jq '.last_use_ns > .atime_ns' <<<"$line") = true ]
	# hostile lines beside it are skipped
	printf '%s\n' "99999999999999999999 $p" "12 ../../etc/passwd" "$(printf 'x%.0s' {1..5000})" \
		"1 $(head -1 "$BATS_TEST_TMPDIR/set.2")" > "$KV_ROOT/.kvwatch/evil.uses"
	evict_and_judge "$KV_ROOT"
}

@test "kvwatch killed with SIGKILL and restarted: it goes on recording, its journal kept" {
	history "$KV_ROOT"
	start_kvwatch
	read_set "$KV_ROOT" 1
	stop_kvwatch KILL
	[ "$WRC" -eq 137 ]
	: > "$BATS_TEST_TMPDIR/kvwatch.out"
	start_kvwatch --resolution 0
	head -10 "$BATS_TEST_TMPDIR/set.2" > "$BATS_TEST_TMPDIR/set.5"
	read_set "$KV_ROOT" 5
	stop_kvwatch
	[ "$WRC" -eq 0 ]
	[ "$(wc -l < "$BATS_TEST_TMPDIR/kvwatch.out")" -eq 10 ]
}

@test "relatime ext4 with hours of history (debugfs): reads under 24 h after the last do not move atime; kvwatch does" {
	requires mount mkfs.ext4 debugfs
	local img=$BATS_TEST_TMPDIR/ext4.img now s f
	truncate -s 64M "$img"
	mkfs.ext4 -q -F -I 256 "$img"
	MNT=$BATS_TEST_TMPDIR/ext4
	mkdir -p "$MNT"
	mount -o loop,relatime "$img" "$MNT" || skip "cannot mount a loop ext4"
	KV_ROOT=$MNT
	history "$KV_ROOT"
	umount "$MNT"
	# set 1 written 20 h ago and read 19 h ago; sets 2 and 3 written
	# 18 h and 17 h ago, never read
	now=$(date +%s)
	for s in 1 2 3; do
		while read -r f; do
			w=$((now - (21 - s) * 3600))
			a=$((s == 1 ? now - 19 * 3600 : w))
			echo "set_inode_field /$f mtime @$w"
			echo "set_inode_field /$f ctime @$w"
			echo "set_inode_field /$f atime @$a"
		done < "$BATS_TEST_TMPDIR/set.$s"
	done > "$BATS_TEST_TMPDIR/debugfs.cmds"
	debugfs -w -f "$BATS_TEST_TMPDIR/debugfs.cmds" "$img" > /dev/null 2>&1
	mount -o loop,relatime "$img" "$MNT"
	p=$(head -1 "$BATS_TEST_TMPDIR/set.1")
	[ $((now - $(stat -c %X "$MNT/$p"))) -ge $((19 * 3600 - 60)) ]
	# a plain read now: relatime leaves atime alone
	cat "$MNT/$p" > /dev/null
	[ $((now - $(stat -c %X "$MNT/$p"))) -ge $((19 * 3600 - 60)) ]
	start_kvwatch
	read_set "$KV_ROOT" 1
	stop_kvwatch
	[ $(($(date +%s) - $(stat -c %X "$MNT/$p"))) -lt 600 ]
	run --separate-stderr kvevict --root "$KV_ROOT" --max-bytes 18M --low-bytes 12800K --hot 30m --ndjson
	assert_success
	hot=$(jq -r .path <<<"$output" | sort | comm -12 <(sort "$BATS_TEST_TMPDIR/set.1") - | wc -l)
	lru=$(jq -r .path <<<"$output" | sort | comm -12 <(sort "$BATS_TEST_TMPDIR/set.2") - | wc -l)
	[ "$hot" -eq 0 ] && [ "$lru" -ge 90 ] || fail "hot $hot, set 2 $lru"
}

@test "latfs (FUSE): kvwatch marks the filesystem with fd events and stamps what is read through it" {
	requires mount
	local latfs=$KV_BIN/../latfs/latfs
	[ -x "$latfs" ] || skip "latfs not built (needs libfuse3-dev)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	# its source on noatime tmpfs, so that only kvwatch can move atime
	mount_tmpfs 64m
	mount -o remount,noatime "$MNT"
	mkdir -p "$MNT/src" "$BATS_TEST_TMPDIR/fuse"
	"$latfs" "$MNT/src" "$BATS_TEST_TMPDIR/fuse" -o delay_us=50 ||
		skip "cannot mount a FUSE filesystem here"
	KV_ROOT=$BATS_TEST_TMPDIR/fuse
	history "$KV_ROOT"
	start_kvwatch
	read_set "$KV_ROOT" 1
	stop_kvwatch
	[ "$(jq -r .path "$BATS_TEST_TMPDIR/kvwatch.out" | sort -u | wc -l)" -eq 100 ]
	evict_and_judge "$KV_ROOT"
	umount "$KV_ROOT"
}

@test "events: blocks in llm-d's older layout (bucket dirs with and without a group) and v1 ones in odd groups are found" {
	local v0=meta-llama/Llama-3.1-8B/block_size_16_blocks_per_file_8/tp_1_pp_size_1_pcp_size_1/rank_0/bfloat16
	local h1=0123456789abcdef0123456789abcdef h2=fedcba9876543210fedcba9876543210
	mkdir -p "$KV_ROOT/$v0/012/34" "$KV_ROOT/$v0/fed/cb_g1"
	echo x > "$KV_ROOT/$v0/012/34/$h1.bin"
	echo x > "$KV_ROOT/$v0/fed/cb_g1/$h2.bin"
	kvput --root "$KV_ROOT" --config "$CFG" --group 12 abcdef0011223344 "$CFG" > /dev/null
	touch -d '3 hours ago' "$KV_ROOT/$v0/012/34/$h1.bin" "$KV_ROOT/$v0/fed/cb_g1/$h2.bin" \
		"$KV_ROOT"/*_r0/abc/de_g12/abcdef0011223344.bin
	publish map-bytes "$h1" "$h2" abcdef0011223344
	start_kvwatch --events "$EP"
	wait_uses 3
	stop_kvwatch
	[ "$(jq -r .path "$BATS_TEST_TMPDIR/kvwatch.out" | sort)" = "$( (cd "$KV_ROOT" && ls "$v0/012/34/$h1.bin" "$v0/fed/cb_g1/$h2.bin" */abc/de_g12/*.bin) | sort)" ]
}

@test "reads: kvls --verify and kvget --archive are not uses (--ignore-comm); an empty list counts them" {
	history "$KV_ROOT"
	start_kvwatch --metrics "$BATS_TEST_TMPDIR/m.prom"
	kvls --root "$KV_ROOT" --verify > /dev/null || true
	stop_kvwatch
	[ "$(wc -l < "$BATS_TEST_TMPDIR/kvwatch.out")" -eq 0 ]
	grep -qx 'kvwatch_reads_ignored_total 300' "$BATS_TEST_TMPDIR/m.prom"
	p=$(head -1 "$BATS_TEST_TMPDIR/set.1")
	[ $(($(date +%s) - $(stat -c %X "$KV_ROOT/$p"))) -gt 3000 ]
	start_kvwatch --ignore-comm ''
	kvls --root "$KV_ROOT" --verify > /dev/null || true
	stop_kvwatch
	[ "$(wc -l < "$BATS_TEST_TMPDIR/kvwatch.out")" -eq 300 ]
}

@test "a backlog of reads queued at SIGTERM is recorded whole, read after read (few fds: small reads)" {
	mount_tmpfs 128m
	mount -o remount,noatime "$MNT"
	"$KV_BIN/../bench/kvtree" -B 4096 "$MNT" 3000 > /dev/null
	kvls --root "$MNT" --blocks --ndjson | jq -r --arg r "$MNT/" '$r + .path' > "$BATS_TEST_TMPDIR/list"
	(
		ulimit -n 300
		KV_ROOT=$MNT start_kvwatch --resolution 0 --metrics "$BATS_TEST_TMPDIR/m.prom"
		"$KV_BIN/../bench/readblocks" "$BATS_TEST_TMPDIR/list" 1 > /dev/null
		stop_kvwatch
		[ "$WRC" -eq 0 ]
	)
	grep -qx 'kvwatch_uses_total{source="read"} 3000' "$BATS_TEST_TMPDIR/m.prom" ||
		fail "$(grep uses_total "$BATS_TEST_TMPDIR/m.prom")"
}

@test "reads: a rank dir planted as a symlink to a file outside the root is not stamped" {
	# Anyone in the cache's group can make a rank dir; as a symlink to a
	# tree of root's outside the root, a read through it must stamp
	# nothing there (hostile round four, item 4).
	requires mount
	# One noatime volume holds both, so only a stamp moves an atime.
	MNT=$BATS_TEST_TMPDIR/vol
	mkdir -p "$MNT"
	mount -t tmpfs -o noatime,size=16m tmpfs "$MNT"
	export KV_ROOT=$MNT/root
	mkdir "$KV_ROOT"
	local p=abc/de_g0/abcde000000000000000000000000001.bin out
	kvput --root "$KV_ROOT" --config "$CFG" abcde000000000000000000000000002 "$CFG"
	md=$(cd "$KV_ROOT" && ls -d *_r0 | head -1)
	# Named as the rank dir, so that its path's tail is a layout path.
	out=$MNT/elsewhere/${md%_r0}_r1
	mkdir -p "$out/${p%/*}"
	head -c 4096 /dev/urandom > "$out/$p"
	touch -d '2 days ago' "$out/$p"
	before=$(stat -c %X "$out/$p")
	ln -s "$out" "$KV_ROOT/${md%_r0}_r1"
	start_kvwatch --resolution 0
	cat "$KV_ROOT/${md%_r0}_r1/$p" > /dev/null
	cat "$out/$p" > /dev/null
	stop_kvwatch
	[ "$(stat -c %X "$out/$p")" -eq "$before" ] || fail "the file outside the root was stamped"
	run grep -c . "$BATS_TEST_TMPDIR/kvwatch.out"
	[ "$output" = 0 ]
}
