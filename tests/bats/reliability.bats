#!/usr/bin/env bats
# Reliability (issue 7): short runs of the crash and concurrency stress
# scripts, and the faults a shared cache meets: a full filesystem, EIO and
# short writes (the LD_PRELOAD injector in tests/fault/), a read-only
# mount, permission denied, and a directory swapped for a symlink while a
# walk runs.  Every fault must give a clear error, exit 3, no partial
# file, and no change outside the root.  The long runs behind
# tests/RELIABILITY.md are `make stress`.

load test_helper

top=$BATS_TEST_DIRNAME/../..
FI_LIB=$KV_BIN/../tests/libfaultinj.so
HASH=00c0ffee0123456789abcdef01234567

setup() {
	common_setup
	CFG=$BATS_TEST_TMPDIR/config.json
	make_config stress/faults > "$CFG"
	NOBODY_DIR=
}

teardown() {
	[ -z "${NOBODY_DIR:-}" ] || rm -rf "$NOBODY_DIR"
	common_teardown
}

# The block file of $2 (hash) under root $1, found by name.
block_file() { find "$1" -name "$2.bin" -type f; }

# Nothing a writer leaves mid-way: no temp file anywhere under $1.
assert_no_temps() {
	local t
	t=$(find "$1" -name '*.tmp')
	[ -z "$t" ] || fail "temp files left: $t"
}

# fi_run RULES... -- CMD...: CMD under the fault injector with the given
# KVFI_* assignments; injected faults are logged in $FI_LOG.
fi_run() {
	[ -f "$FI_LIB" ] || skip "no $FI_LIB (make all builds it)"
	FI_LOG=$BATS_TEST_TMPDIR/fi.log
	: > "$FI_LOG"
	local env=(LD_PRELOAD="$FI_LIB" KVFI_LOG="$FI_LOG"
		   ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0")
	while [ "$1" != -- ]; do env+=("$1"); shift; done
	shift
	run --separate-stderr env "${env[@]}" "$@"
}

# The fault must really have been hit, or the test proves nothing.
assert_injected() {
	[ -s "$FI_LOG" ] || fail "no fault was injected (the rule never matched)"
}

put_small() {	# a first, intact version of $HASH under $KV_ROOT
	random_file "$BATS_TEST_TMPDIR/old" 8192
	kvput --root "$KV_ROOT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/old"
}

# ---- the injector itself ----------------------------------------------

@test "fault injector: write EIO after N calls, short writes, bad rules refused" {
	[ -f "$FI_LIB" ] || skip "no $FI_LIB (make all builds it)"
	out=$BATS_TEST_TMPDIR/dd.out
	fi_run KVFI_FAIL=write:EIO:after=2 -- dd if=/dev/zero of="$out" bs=4k count=5
	[ "$status" -ne 0 ]
	[[ "$stderr" == *"Input/output error"* ]]
	[ "$(stat -c %s "$out")" -eq 8192 ]
	assert_injected
	fi_run KVFI_SHORT=write:half:count=1 -- dd if=/dev/zero of="$out" bs=4k count=2
	[ "$status" -eq 0 ]
	grep -q "short write" "$FI_LOG"
	fi_run KVFI_FAIL=rename:EROFS:path=dst -- mv "$out" "$BATS_TEST_TMPDIR/dst"
	[ "$status" -ne 0 ]
	[[ "$stderr" == *"Read-only file system"* ]]
	[ -f "$out" ]
	fi_run KVFI_FAIL=nosuchop:EIO -- /bin/true
	[ "$status" -eq 125 ]
	[[ "$stderr" == *"bad rule"* ]]
}

# ---- crash and concurrency (short runs of tests/stress/) ----------------

@test "crash: 100 kill -9 writers leave no torn block, and the temps are reclaimed" {
	requires kvput kvget
	run env KV_BIN="$KV_BIN" STRESS_DIR="$BATS_TEST_TMPDIR/crash" \
		"$top/tests/stress/crash.sh" 100
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"crash: 100 iterations"*", 0 failures"* ]]
}

@test "concurrency: writers, readers and an evictor: a miss or the right bytes" {
	requires kvput kvget
	run env KV_BIN="$KV_BIN" STRESS_DIR="$BATS_TEST_TMPDIR/conc" WRITERS=3 READERS=2 \
		"$top/tests/stress/concurrency.sh" 40
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *" 0 wrong, 0 read errors"* ]]
}

# ---- full, failing and read-only filesystems ----------------------------

@test "a bucket dir removed between a put's mkdirs (as kvevict does) is made again" {
	requires kvput
	random_file "$BATS_TEST_TMPDIR/s" 4096
	kvput --root "$KV_ROOT" --config "$CFG" --replace 0040000000 "$BATS_TEST_TMPDIR/s"
	# kvevict deletes a cold block, then its bucket dirs once empty and
	# older than --dir-grace; a writer's mkdir of an old bucket (EEXIST)
	# does not make it young, so the parent can vanish before the child's
	# mkdir at any grace.  The injector plays that race: the first mkdir
	# of the group dir fails with ENOENT.
	fi_run KVFI_FAIL=mkdir:ENOENT:count=1:path=/00_g0,uring_mkdir:ENOENT:count=1:path=/00_g0 -- \
		kvput --root "$KV_ROOT" --config "$CFG" --replace 00500aaaa "$BATS_TEST_TMPDIR/s"
	assert_injected
	[ "$status" -eq 0 ] || fail "kvput exited $status: $stderr"
	cmp "$(block_file "$KV_ROOT" 00500aaaa)" "$BATS_TEST_TMPDIR/s"
}

@test "ENOSPC: a block that does not fit exits 3 and leaves the old block whole" {
	requires kvput kvget
	mount_tmpfs 1m
	export KV_ROOT=$MNT
	put_small
	random_file "$BATS_TEST_TMPDIR/big" $((2 * 1024 * 1024))
	run --separate-stderr kvput --root "$MNT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/big"
	[ "$status" -eq 3 ]
	[[ "$stderr" == kvput:*"No space left on device"* ]] || fail "stderr: $stderr"
	assert_no_temps "$MNT"
	cmp "$(block_file "$MNT" "$HASH")" "$BATS_TEST_TMPDIR/old"
	# A new key that does not fit leaves nothing at all.
	run kvput --root "$MNT" --config "$CFG" --replace "${HASH/00/11}" "$BATS_TEST_TMPDIR/big"
	[ "$status" -eq 3 ]
	[ -z "$(block_file "$MNT" "${HASH/00/11}")" ]
	assert_no_temps "$MNT"
}

@test "EIO on a block write (libc or io_uring): exit 3, no partial file" {
	requires kvput
	put_small
	random_file "$BATS_TEST_TMPDIR/new" 65536
	fi_run KVFI_FAIL=write:EIO:path=_r0/,uring_write:EIO:path=_r0/ -- \
		kvput --root "$KV_ROOT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/new"
	assert_injected
	[ "$status" -eq 3 ]
	[[ "$stderr" == kvput:* ]] || fail "stderr: $stderr"
	assert_no_temps "$KV_ROOT"
	cmp "$(block_file "$KV_ROOT" "$HASH")" "$BATS_TEST_TMPDIR/old"
}

@test "EIO on one block of a --batch: that one is reported, the others land, no temp" {
	requires kvput
	: > "$BATS_TEST_TMPDIR/manifest"
	for h in aaaa000001 bbbb000002 cccc000003; do
		random_file "$BATS_TEST_TMPDIR/$h" 65536
		printf '{"hash":"%s","file":"%s"}\n' "$h" "$BATS_TEST_TMPDIR/$h" >> "$BATS_TEST_TMPDIR/manifest"
	done
	fi_run KVFI_FAIL=write:EIO:path=bbbb000002,uring_write:EIO:path=bbbb000002 -- \
		kvput --root "$KV_ROOT" --config "$CFG" --replace --batch "$BATS_TEST_TMPDIR/manifest"
	assert_injected
	[ "$status" -eq 3 ]
	[ "$(grep -c '"status":"ok"' <<< "$output")" -eq 2 ] || fail "output: $output"
	grep '"status":"error"' <<< "$output" | grep -q bbbb000002 || fail "output: $output"
	cmp "$(block_file "$KV_ROOT" aaaa000001)" "$BATS_TEST_TMPDIR/aaaa000001"
	cmp "$(block_file "$KV_ROOT" cccc000003)" "$BATS_TEST_TMPDIR/cccc000003"
	[ -z "$(block_file "$KV_ROOT" bbbb000002)" ]
	assert_no_temps "$KV_ROOT"
}

@test "EIO on the buffered path with io_uring unavailable: exit 3, no partial file" {
	requires kvput
	put_small
	random_file "$BATS_TEST_TMPDIR/new" 65536
	fi_run KVFI_NO_URING=1 KVFI_FAIL=write:EIO:path=_r0/ -- \
		kvput --root "$KV_ROOT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/new"
	if [ ! -s "$FI_LOG" ] && [ "$status" -eq 3 ]; then
		skip "kvput needs io_uring (exit 3 without it: $stderr)"
	fi
	assert_injected
	[ "$status" -eq 3 ]
	assert_no_temps "$KV_ROOT"
	cmp "$(block_file "$KV_ROOT" "$HASH")" "$BATS_TEST_TMPDIR/old"
}

@test "short writes are finished or reported, never a short block" {
	requires kvput kvget
	random_file "$BATS_TEST_TMPDIR/new" $((256 * 1024))
	fi_run KVFI_SHORT=write:half:path=_r0/,uring_write:half:path=_r0/ -- \
		kvput --root "$KV_ROOT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/new"
	assert_injected
	assert_no_temps "$KV_ROOT"
	if [ "$status" -eq 0 ]; then
		cmp "$(block_file "$KV_ROOT" "$HASH")" "$BATS_TEST_TMPDIR/new"
		kvget --root "$KV_ROOT" --config "$CFG" "$HASH" | cmp - "$BATS_TEST_TMPDIR/new"
	else
		[ "$status" -eq 3 ] || fail "kvput exited $status: $stderr"
		[ -z "$(block_file "$KV_ROOT" "$HASH")" ]
	fi
}

@test "EIO on fsync or on the rename: exit 3, old block kept, no temp" {
	requires kvput
	kvput --help | grep -q -- --fsync || skip "kvput has no --fsync"
	put_small
	random_file "$BATS_TEST_TMPDIR/new" 65536
	fi_run KVFI_FAIL=fsync:EIO:path=_r0/,uring_fsync:EIO:path=_r0/ -- \
		kvput --root "$KV_ROOT" --config "$CFG" --replace --fsync "$HASH" "$BATS_TEST_TMPDIR/new"
	assert_injected
	[ "$status" -eq 3 ]
	assert_no_temps "$KV_ROOT"
	cmp "$(block_file "$KV_ROOT" "$HASH")" "$BATS_TEST_TMPDIR/old"
	fi_run KVFI_FAIL=rename:EIO:path=_r0/,uring_rename:EIO:path=_r0/,link:EIO:path=_r0/,uring_link:EIO:path=_r0/ -- \
		kvput --root "$KV_ROOT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/new"
	assert_injected
	[ "$status" -eq 3 ]
	assert_no_temps "$KV_ROOT"
	cmp "$(block_file "$KV_ROOT" "$HASH")" "$BATS_TEST_TMPDIR/old"
}

@test "no user xattrs (ENOTSUP): the put still lands, whole" {
	requires kvput kvget
	random_file "$BATS_TEST_TMPDIR/new" 65536
	fi_run KVFI_FAIL=fsetxattr:ENOTSUP -- \
		kvput --root "$KV_ROOT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/new"
	assert_injected
	[ "$status" -eq 0 ] || fail "kvput exited $status: $stderr"
	cmp "$(block_file "$KV_ROOT" "$HASH")" "$BATS_TEST_TMPDIR/new"
	kvget --root "$KV_ROOT" --config "$CFG" "$HASH" | cmp - "$BATS_TEST_TMPDIR/new"
}

@test "read-only filesystem: puts exit 3, gets still work, nothing deleted" {
	requires kvput kvget
	mount_tmpfs 4m
	export KV_ROOT=$MNT
	put_small
	mount -o remount,ro "$MNT"
	random_file "$BATS_TEST_TMPDIR/new" 8192
	run --separate-stderr kvput --root "$MNT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/new"
	[ "$status" -eq 3 ]
	[[ "$stderr" == kvput:*"Read-only file system"* ]] || fail "stderr: $stderr"
	run kvget --root "$MNT" --config "$CFG" -o "$BATS_TEST_TMPDIR/got" "$HASH"
	[ "$status" -eq 0 ] || fail "kvget on a read-only mount exited $status"
	cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/old"
	if command -v kvevict > /dev/null; then
		run kvevict --root "$MNT" --max-bytes 1 --hot 0
		[ "$status" -ne 0 ] || fail "kvevict on a read-only mount exited 0: $output"
		cmp "$(block_file "$MNT" "$HASH")" "$BATS_TEST_TMPDIR/old"
	fi
}

# ---- permissions and hostile trees --------------------------------------

# A root that user nobody (65534) can reach, under a world-searchable dir.
nobody_root() {
	requires root setpriv
	NOBODY_DIR=$(mktemp -d /tmp/kvrely.XXXXXX)
	chmod 0755 "$NOBODY_DIR"
	export KV_ROOT=$NOBODY_DIR/root
	mkdir -p "$KV_ROOT"
	cp "$CFG" "$NOBODY_DIR/config.json"
	chmod 0644 "$NOBODY_DIR/config.json"
	CFG=$NOBODY_DIR/config.json
	[ -x "$KV_BIN/kvput" ] && setpriv --reuid=65534 --regid=65534 --clear-groups \
		test -x "$KV_BIN/kvput" || skip "user nobody cannot run $KV_BIN/kvput"
}

as_nobody() { run --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

@test "permission denied: put and get as another user exit 3 with the reason" {
	requires kvput kvget
	nobody_root
	put_small
	chmod -R go-w "$KV_ROOT"
	random_file "$NOBODY_DIR/new" 8192
	chmod 0644 "$NOBODY_DIR/new"
	as_nobody kvput --root "$KV_ROOT" --config "$CFG" --replace "$HASH" "$NOBODY_DIR/new"
	[ "$status" -eq 3 ]
	[[ "$stderr" == kvput:*"Permission denied"* ]] || fail "stderr: $stderr"
	assert_no_temps "$KV_ROOT"
	cmp "$(block_file "$KV_ROOT" "$HASH")" "$BATS_TEST_TMPDIR/old"
	# A bucket nobody may read is an error, not a miss.
	chmod 0700 "$(dirname "$(block_file "$KV_ROOT" "$HASH")")"
	as_nobody kvget --root "$KV_ROOT" --config "$CFG" "$HASH"
	[ "$status" -eq 3 ] || fail "kvget exited $status: $stderr"
	[[ "$stderr" == kvget:*"Permission denied"* ]] || fail "stderr: $stderr"
}

@test "permission denied: kvls reports the unreadable dir and lists the rest" {
	requires kvput kvls
	nobody_root
	for h in 111aa000 222bb000 333cc000; do
		random_file "$BATS_TEST_TMPDIR/p" 4096
		kvput --root "$KV_ROOT" --config "$CFG" --replace "$h" "$BATS_TEST_TMPDIR/p"
	done
	chmod 0700 "$(dirname "$(dirname "$(block_file "$KV_ROOT" 222bb000)")")"
	as_nobody kvls --root "$KV_ROOT" --blocks --ndjson
	[[ "$stderr" == kvls:*"Permission denied"* ]] || fail "stderr: $stderr"
	[[ "$output" == *111aa000* && "$output" == *333cc000* ]] || fail "output: $output"
	[[ "$output" != *222bb000* ]]
}

# A tree of blocks, and outside it a decoy that looks like a bucket.
decoy_tree() {
	local i h
	for i in $(seq 1 40); do
		h=$(printf '%03x%02x%027x' $((i % 5)) $((i % 3)) "$i")
		head -c 4096 /dev/zero | kvput --root "$KV_ROOT" --config "$CFG" --replace "$h" -
	done
	OUTSIDE=$BATS_TEST_TMPDIR/outside
	mkdir -p "$OUTSIDE/00_g0"
	# Names a walk that followed the link would take for real blocks.
	for p in 000 001 002 003 004 fff; do
		random_file "$OUTSIDE/00_g0/${p}00$(printf '%027x' 4242).bin" 4096
	done
	random_file "$OUTSIDE/precious" 4096
	find "$OUTSIDE" -type f | sort | xargs sha256sum > "$BATS_TEST_TMPDIR/outside.sum"
}

@test "a bucket that is a symlink out of the root: kvls and kvevict stay inside" {
	requires kvput kvls
	decoy_tree
	rankdir=$(find "$KV_ROOT" -maxdepth 1 -name '*_r0')
	ln -s "$OUTSIDE" "$rankdir/fff"
	run --separate-stderr kvls --root "$KV_ROOT" --blocks --ndjson
	[ "$status" -eq 0 ]
	[ "$(grep -c '"hash"' <<< "$output")" -eq 40 ] || fail "listed: $output"
	[[ "$output" != *outside* ]]
	if command -v kvevict > /dev/null; then
		run kvevict --root "$KV_ROOT" --max-bytes 1 --hot 0 --orphans-after 0 --force
		[ "$status" -eq 0 ] || fail "kvevict exited $status: $output"
		[ -z "$(find "$KV_ROOT" -name '*.bin')" ]
	fi
	sha256sum -c --quiet "$BATS_TEST_TMPDIR/outside.sum"
	[ -L "$rankdir/fff" ]
}

@test "buckets swapped for symlinks while kvls and kvevict walk: nothing outside is seen or touched" {
	requires kvput kvls kvevict
	decoy_tree
	rankdir=$(find "$KV_ROOT" -maxdepth 1 -name '*_r0')
	decoy=$(printf '%027x' 4242)
	# Swap every bucket for a symlink to the decoy and back, over and over,
	# until the walkers are done.
	(
		exec {never}<> <(:)
		while [ ! -e "$BATS_TEST_TMPDIR/stop" ]; do
			for b in "$rankdir"/00[0-4]; do
				[ -d "$b" ] && [ ! -L "$b" ] || continue
				mv -T "$b" "$b.away" 2>/dev/null || continue
				ln -s "$OUTSIDE" "$b"
				read -r -t 0.002 -u "$never" _ || true
				rm -f "$b"
				mv -T "$b.away" "$b"
			done
		done
	) &
	swapper=$!
	for i in $(seq 1 10); do
		run kvls --root "$KV_ROOT" --blocks --ndjson
		[[ "$output" != *"$decoy"* ]] || fail "kvls listed a block outside the root: $output"
		run kvevict --root "$KV_ROOT" --max-bytes 1 --hot 0 --dry-run --ndjson
		[[ "$output" != *"$decoy"* ]] || fail "kvevict would delete outside the root: $output"
	done
	for i in 1 2 3; do
		run kvevict --root "$KV_ROOT" --max-bytes 1 --hot 0
		[ "$status" -eq 0 ] || [ "$status" -eq 1 ] || fail "kvevict exited $status: $output"
	done
	touch "$BATS_TEST_TMPDIR/stop"
	wait "$swapper"
	sha256sum -c --quiet "$BATS_TEST_TMPDIR/outside.sum"
}

@test "what kvevict leaves in a root is not a problem for kvls --check" {
	requires kvput kvls kvevict
	put_small
	run kvls --root "$KV_ROOT" --check
	[ "$status" -eq 0 ] || fail "a fresh tree is not clean: $output"
	run kvevict --root "$KV_ROOT" --max-bytes 1T
	[ "$status" -eq 0 ]
	run kvls --root "$KV_ROOT" --check
	[ "$status" -eq 0 ] || fail "kvls --check after kvevict exited $status: $output"
}

@test "a flipped bit in a block: kvget exits 3 with nothing on stdout, kvls --verify names it" {
	requires kvput kvget kvls xattr
	random_file "$BATS_TEST_TMPDIR/new" 65536
	kvput --root "$KV_ROOT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/new"
	f=$(block_file "$KV_ROOT" "$HASH")
	flip_byte "$f" 40000
	run --separate-stderr kvget --root "$KV_ROOT" --config "$CFG" "$HASH"
	[ "$status" -eq 3 ]
	[ -z "$output" ] || fail "kvget wrote ${#output} bytes of a corrupt block"
	[[ "$stderr" == kvget:* ]]
	run kvget --root "$KV_ROOT" --config "$CFG" -o "$BATS_TEST_TMPDIR/got" "$HASH"
	[ "$status" -eq 3 ]
	[ ! -e "$BATS_TEST_TMPDIR/got" ]
	run kvls --root "$KV_ROOT" --verify
	[ "$status" -eq 1 ]
	[[ "$output" == *"$HASH"* ]]
	[ -f "$f" ] || fail "the corrupt block was removed; it is left for fsck"
}

@test "kvget -o onto a full filesystem: exit 3 and no partial output file" {
	requires kvput kvget
	random_file "$BATS_TEST_TMPDIR/new" $((2 * 1024 * 1024))
	kvput --root "$KV_ROOT" --config "$CFG" --replace "$HASH" "$BATS_TEST_TMPDIR/new"
	mount_tmpfs 1m
	run --separate-stderr kvget --root "$KV_ROOT" --config "$CFG" -o "$MNT/out.bin" "$HASH"
	[ "$status" -eq 3 ]
	[[ "$stderr" == kvget:*"No space left on device"* ]] || fail "stderr: $stderr"
	[ -z "$(ls -A "$MNT")" ] || fail "left behind: $(ls -A "$MNT")"
}

@test "kvoffd writing behind onto a full filesystem: errors counted, no partial file, RAM still serves" {
	requires kvoffd
	client=$KV_BIN/../bench/offd_client
	mount_tmpfs 1m
	model=stress_faults_0123456789ab
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	mkfifo "$BATS_TEST_TMPDIR/ready"
	kvoffd --root "$MNT" --socket "$SOCK" --cpu-bytes 16M --write-policy always \
		--ready-fd 3 3>"$BATS_TEST_TMPDIR/ready" 2>"$BATS_TEST_TMPDIR/kvoffd.log" &
	dpid=$!
	read -r _ < "$BATS_TEST_TMPDIR/ready"
	for i in 1 2 3 4; do
		random_file "$BATS_TEST_TMPDIR/b$i" 600000
		"$client" put "$SOCK" "$model" 0 0 "abcdef000$i" "$BATS_TEST_TMPDIR/b$i"
	done
	# The queue drains on its own; wait for it rather than for a time.
	wait_for stat_is wb_queue_depth 0
	[ "$(stat_of wb_errors)" -ge 1 ] || fail "no write-behind error counted on a full tier"
	for i in 1 2 3 4; do
		"$client" get "$SOCK" "$model" 0 0 "abcdef000$i" > "$BATS_TEST_TMPDIR/got"
		cmp "$BATS_TEST_TMPDIR/got" "$BATS_TEST_TMPDIR/b$i"
	done
	kill -TERM "$dpid"
	wait "$dpid"
	assert_no_temps "$MNT"
	for i in 1 2 3 4; do
		f=$(block_file "$MNT" "abcdef000$i")
		[ -z "$f" ] || cmp "$f" "$BATS_TEST_TMPDIR/b$i"
	done
}

@test "kvevict --stdin: hostile paths and records delete nothing outside the root" {
	requires kvput kvevict
	random_file "$BATS_TEST_TMPDIR/s" 4096
	kvput --root "$KV_ROOT" --config "$CFG" --replace 1230000001 "$BATS_TEST_TMPDIR/s"
	rankdir=$(find "$KV_ROOT" -maxdepth 1 -name '*_r0')
	rank=${rankdir##*/}
	out=$BATS_TEST_TMPDIR/outside
	mkdir -p "$out/de_g0" "$out/45_g0"
	random_file "$out/de_g0/abcde00002.bin" 4096
	random_file "$out/45_g0/1234500003.bin" 4096
	# A whole bucket and a single block that are symlinks out of the root,
	# each reachable by a path that matches the layout.
	ln -s "$out" "$rankdir/abc"
	mkdir -p "$rankdir/123/45_g0"
	ln -s "$out/45_g0/1234500003.bin" "$rankdir/123/45_g0/1234500003.bin"
	find "$out" -type f | sort | xargs sha256sum > "$BATS_TEST_TMPDIR/outside.sum"
	run kvevict --root "$KV_ROOT" --stdin --hot 0 <<-EOF2
		../outside/de_g0/abcde00002.bin
		$out/de_g0/abcde00002.bin
		$rank/abc/de_g0/abcde00002.bin
		$rank/123/45_g0/1234500003.bin
		$rank/123/45_g0/../../../../outside/de_g0/abcde00002.bin
		{"path":"../outside/de_g0/abcde00002.bin"}
		{"model_dir":"${rank%_r0}","rank":0,"group":0,"hash":"abcde00002"}
	EOF2
	[ "$status" -eq 0 ] || fail "kvevict exited $status: $output"
	sha256sum -c --quiet "$BATS_TEST_TMPDIR/outside.sum"
	[ -L "$rankdir/abc" ] && [ -L "$rankdir/123/45_g0/1234500003.bin" ]
	cmp "$(block_file "$KV_ROOT" 1230000001)" "$BATS_TEST_TMPDIR/s"
}
