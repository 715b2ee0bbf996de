#!/usr/bin/env bats
# kvevict on small tmpfs mounts that reach the thresholds: exact LRU
# order, the hot window and the re-stat race, the lock, dry runs, hostile
# trees, budgets, quotas, housekeeping and --stdin.

load test_helper

M=meta-llama_Llama-3.1-8B_0123456789ab
M2=Qwen_Qwen3-8B_ba9876543210
NOW=$(date +%s)

setup() {
	common_setup
	mount_tmpfs 1m
	export KV_ROOT=$MNT
}

# blk I [RANK] [MODEL_DIR]: relative path of test block I.
blk() {
	local h
	h=$(printf '%05x%07x' "$1" "$1")
	echo "${3:-$M}_r${2:-0}/${h:0:3}/${h:3:2}_g0/$h.bin"
}

# mkblk I AGE_S [BYTES] [RANK] [MODEL_DIR]: block I, last read AGE_S
# seconds ago, written a month ago.
mkblk() {
	local p
	p=$KV_ROOT/$(blk "$1" "${4:-0}" "${5:-$M}")
	mkdir -p "${p%/*}"
	head -c "${3:-8192}" /dev/zero > "$p"
	touch -m -d "@$((NOW - 86400 * 30))" "$p"
	touch -a -d "@$((NOW - $2))" "$p"
}

# mkblocks N [BYTES]: blocks 1..N, block 1 the least recently read, made
# in a scrambled order so directory order says nothing about age.
mkblocks() {
	local n=$1 i j
	for ((j = 0; j < n; j++)); do
		i=$(((j * 7) % n + 1))
		mkblk "$i" $((100000 - i * 60)) "${2:-8192}"
	done
}

# fs_used / fs_total: bytes as df counts them.
fs_used() { stat -f -c '%S %b %f' "$MNT" | awk '{ print ($2 - $3) * $1 }'; }
fs_total() { stat -f -c '%S %b %f %a' "$MNT" | awk '{ print ($2 - $3 + $4) * $1 }'; }

# assert_gone_upto K N: blocks 1..K are gone, K+1..N are all there.
assert_gone_upto() {
	local i
	for ((i = 1; i <= $2; i++)); do
		if ((i <= $1)); then
			[ ! -e "$KV_ROOT/$(blk "$i")" ] || fail "block $i (among the $1 oldest) survived"
		else
			[ -e "$KV_ROOT/$(blk "$i")" ] || fail "block $i (newer than the $1 oldest) was deleted"
		fi
	done
}

@test "--high/--low deletes exactly the oldest blocks across models and ranks, no overshoot" {
	local i j n=40 rank model
	for ((j = 0; j < n; j++)); do
		i=$(((j * 7) % n + 1))
		rank=$((i % 2)); model=$M
		((i % 3)) || model=$M2
		mkblk "$i" $((100000 - i * 60)) 16384 "$rank" "$model"
	done
	used=$(fs_used); total=$(fs_total)
	[ $((used * 100)) -ge $((total * 50)) ] || fail "setup is under --high"
	k=$(((used - total * 25 / 100 + 16383) / 16384))
	((k > 0 && k < n)) || fail "bad setup: k=$k"
	run kvevict --high 50 --low 25 -J
	assert_success
	[ "$(jq .files_deleted <<<"$output")" -eq "$k" ]
	for ((i = 1; i <= n; i++)); do
		rank=$((i % 2)); model=$M
		((i % 3)) || model=$M2
		if ((i <= k)); then
			[ ! -e "$KV_ROOT/$(blk "$i" "$rank" "$model")" ] || fail "old block $i survived"
		else
			[ -e "$KV_ROOT/$(blk "$i" "$rank" "$model")" ] || fail "new block $i deleted"
		fi
	done
	used=$(fs_used)
	[ $((used * 100)) -le $((total * 25)) ] || fail "still above --low: $used of $total"
	[ $(((used + 16384) * 100)) -gt $((total * 25)) ] || fail "overshot --low by a block or more"
}

@test "below --high nothing is deleted and the exit is 0" {
	mkblocks 10
	run kvevict --high 90 --low 50
	assert_success
	assert_output --partial "deleted 0 blocks"
	assert_gone_upto 0 10
}

@test "--max-bytes evicts the oldest down to --low-bytes" {
	mkblocks 20
	# 20 blocks of 8K = 160K; free down to 80K: the 10 oldest go.
	run kvevict --max-bytes 100K --low-bytes 80K -J
	assert_success
	assert_gone_upto 10 20
	[ "$(jq .cache_bytes_after <<<"$output")" -eq $((80 * 1024)) ]
	[ "$(jq .target_reached <<<"$output")" = true ]
}

@test "--low-bytes defaults to 90% of --max-bytes" {
	mkblocks 20
	# 160K over a 100K budget: down to 90K, so 9 blocks (72K) go.
	run kvevict --max-bytes 100K
	assert_success
	assert_gone_upto 9 20
}

@test "hot blocks survive even when the target cannot be met without them" {
	mkblocks 10
	touch -a "$KV_ROOT/$(blk 1)" "$KV_ROOT/$(blk 2)"	# just read
	touch -m "$KV_ROOT/$(blk 3)"			# just written
	run kvevict --max-bytes 8K --low-bytes 0 -J
	assert_success
	for i in 1 2 3; do [ -e "$KV_ROOT/$(blk $i)" ] || fail "hot block $i deleted"; done
	for i in 4 5 6 7 8 9 10; do [ ! -e "$KV_ROOT/$(blk $i)" ] || fail "cold block $i kept"; done
	[ "$(jq .files_hot <<<"$output")" -eq 3 ]
	[ "$(jq .target_reached <<<"$output")" = false ]
}

@test "--hot sets the window: blocks read 2h ago are cold under --hot 1h, hot under --hot 3h" {
	mkblk 1 7200
	mkblk 2 600
	run kvevict --max-bytes 1 --low-bytes 0 --hot 3h
	assert_success
	[ -e "$KV_ROOT/$(blk 1)" ]
	run kvevict --max-bytes 1 --low-bytes 0 --hot 1h
	assert_success
	[ ! -e "$KV_ROOT/$(blk 1)" ]
	[ -e "$KV_ROOT/$(blk 2)" ]
}

@test "a block read between the scan and its unlink survives (re-stat)" {
	mkblocks 10
	fifo=$BATS_TEST_TMPDIR/pause
	mkfifo "$fifo"
	KV_EVICT_TEST_PAUSE_BEFORE_UNLINK=$fifo kvevict --max-bytes 60K --low-bytes 48K -J \
		> "$BATS_TEST_TMPDIR/out" &
	pid=$!
	# Opening the FIFO waits until kvevict has scanned and chosen its
	# victims (the 4 oldest); read them now, then let it go on.
	exec 5> "$fifo"
	touch -a "$KV_ROOT/$(blk 1)" "$KV_ROOT/$(blk 2)" "$KV_ROOT/$(blk 3)" "$KV_ROOT/$(blk 4)"
	exec 5>&-
	wait "$pid"
	for i in 1 2 3 4; do [ -e "$KV_ROOT/$(blk $i)" ] || fail "block $i read before its unlink was deleted"; done
	[ "$(jq .skipped_hot "$BATS_TEST_TMPDIR/out")" -ge 1 ]
}

@test "a second kvevict exits 1 while the lock is held, --wait waits for it" {
	mkblocks 4
	mkfifo "$BATS_TEST_TMPDIR/held" "$BATS_TEST_TMPDIR/release"
	# As kvevict makes it: 0600 (one others could open would be replaced).
	(umask 077 && : > "$KV_ROOT/.kvevict.lock")
	flock "$KV_ROOT/.kvevict.lock" sh -c 'echo held > "$1"; cat "$2" > /dev/null' sh \
		"$BATS_TEST_TMPDIR/held" "$BATS_TEST_TMPDIR/release" &
	holder=$!
	read -r _ < "$BATS_TEST_TMPDIR/held"
	run --separate-stderr kvevict --max-bytes 8K --low-bytes 0 --hot 0
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"another kvevict holds the lock"* ]]
	assert_gone_upto 0 4
	kvevict --max-bytes 8K --low-bytes 0 --hot 0 --wait > "$BATS_TEST_TMPDIR/out" &
	waiter=$!
	echo go > "$BATS_TEST_TMPDIR/release"
	wait "$holder"
	wait "$waiter"
	assert_gone_upto 4 4
}

@test "--dry-run lists exactly what a real run deletes and changes nothing" {
	mkblocks 20
	mkdir -p "$KV_ROOT/$M"
	make_config > "$KV_ROOT/$M/config.json"
	# Reading a dir may stamp its atime (relatime): compare file atimes only.
	snap() { (cd "$KV_ROOT" && find . -type f -printf '%p %s %A@ %T@\n' -o -printf '%p\n' | sort); }
	before=$(snap)
	run --separate-stderr kvevict --max-bytes 100K --low-bytes 80K --dry-run
	assert_success
	[ "$(snap)" = "$before" ] || fail "dry run changed the tree"
	[ ! -e "$KV_ROOT/.kvevict.lock" ] || fail "dry run created the lock file"
	would=$(grep -v '^kvevict:' <<<"$output" | sort)
	[[ "$output" == *"would delete 11 blocks"* ]] || fail "$output"
	run kvevict --max-bytes 100K --low-bytes 80K --ndjson
	assert_success
	did=$(jq -r .path <<<"$output" | sort)
	[ "$would" = "$did" ] || fail "dry run listed '$would', real run deleted '$did'"
	assert_gone_upto 11 20
}

@test "--ndjson: one BlockRemoved event per deleted block with the block's identity" {
	mkblocks 5
	run kvevict --max-bytes 16K --low-bytes 16K --ndjson
	assert_success
	[ "$(wc -l <<<"$output")" -eq 3 ]
	first=$(head -1 <<<"$output")
	keys=$(jq -c 'keys' <<<"$first")
	[ "$keys" = '["alloc_bytes","atime_ns","dry_run","event","group","hash","last_use_ns","model_dir","path","rank","size_bytes","tier"]' ] || fail "$keys"
	path=$(jq -r .path <<<"$first")
	h=$(jq -r .hash <<<"$first")
	[ "$path" = "${M}_r0/${h:0:3}/${h:3:2}_g0/$h.bin" ]
	[ "$(jq -r .event <<<"$first")" = BlockRemoved ]
	[ "$(jq -r .tier <<<"$first")" = fs ]
	[ "$(jq -r .model_dir <<<"$first")" = "$M" ]
	[ "$(jq .size_bytes <<<"$first")" -eq 8192 ]
	atimes=$(jq .atime_ns <<<"$output" | sort -n | tr '\n' ' ')
	for i in 1 2 3; do
		want=$(((NOW - 100000 + i * 60) * 1000000000))
		[[ " $atimes" == *" $want "* ]] || fail "no event with atime of block $i: $atimes"
	done
}

@test "-J reports every key" {
	mkblocks 3
	run kvevict --max-bytes 8K --low-bytes 8K -J
	assert_success
	keys=$(jq -c 'keys' <<<"$output")
	[ "$keys" = '["bytes_deleted","bytes_needed","bytes_scanned","cache_bytes_after","cache_bytes_before","cutoff_atime_ns","dirs_removed","dirs_unreadable","dry_run","elapsed_ns","files_deleted","files_hot","files_scanned","orphan_bytes_removed","orphans_removed","root","skipped_hot","skipped_other","target_reached","use_after_pct","use_before_pct","walks"]' ] || fail "$keys"
	[ "$(jq .files_scanned <<<"$output")" -eq 3 ]
	[ "$(jq .files_deleted <<<"$output")" -eq 2 ]
	[ "$(jq .bytes_deleted <<<"$output")" -eq 16384 ]
	[ "$(jq .cutoff_atime_ns <<<"$output")" -eq $(((NOW - 100000 + 2 * 60) * 1000000000)) ]
}

@test "symlinks, foreign files and config.json are never touched" {
	old=$((NOW - 86400 * 30))
	mkblocks 3
	mkdir -p "$KV_ROOT/$M"
	make_config > "$KV_ROOT/$M/config.json"
	out=$BATS_TEST_TMPDIR/outside
	# A rank dir that is a symlink to a block tree outside the root.
	mkdir -p "$out/000/01_g0"
	h=0000100000001
	head -c 8192 /dev/zero > "$out/000/01_g0/$h.bin"
	ln -s "$out" "$KV_ROOT/${M}_r7"
	# A block name that is a symlink, and foreign files in a bucket.
	bucket=$KV_ROOT/${M}_r0/000/02_g0
	mkdir -p "$bucket"
	ln -s "$out/000/01_g0/$h.bin" "$bucket/0000200000009.bin"
	echo notes > "$bucket/notes.txt"
	echo x > "$bucket/zzzzz.bin"
	echo x > "$KV_ROOT/foreign-at-root.bin"
	find "$KV_ROOT" "$out" -exec touch -h -a -m -d "@$old" {} +
	run kvevict --max-bytes 1 --low-bytes 0 --orphans-after 1s --force
	assert_success
	assert_gone_upto 3 3
	[ -f "$out/000/01_g0/$h.bin" ] || fail "file behind a symlinked rank dir deleted"
	[ -L "$KV_ROOT/${M}_r7" ] && [ -L "$bucket/0000200000009.bin" ] || fail "symlink deleted"
	[ -f "$bucket/notes.txt" ] && [ -f "$bucket/zzzzz.bin" ] && [ -f "$KV_ROOT/foreign-at-root.bin" ] ||
		fail "foreign file deleted"
	[ -f "$KV_ROOT/$M/config.json" ] || fail "config.json deleted"
	# --stdin neither follows the symlinked rank dir nor removes a symlink.
	run kvevict --stdin <<<"${M}_r7/000/01_g0/$h.bin"
	assert_success
	[ -f "$out/000/01_g0/$h.bin" ] || fail "--stdin followed a symlinked rank dir"
	run kvevict --stdin <<<"${M}_r0/000/02_g0/0000200000009.bin"
	[ -L "$bucket/0000200000009.bin" ] || fail "--stdin removed a symlink"
}

@test "blocks on another filesystem under the root survive" {
	requires mount
	mkblocks 2
	h=0000100000001
	sub=$KV_ROOT/${M}_r9
	mkdir -p "$sub"
	mount -t tmpfs -o size=1m tmpfs "$sub"
	mkdir -p "$sub/000/01_g0"
	head -c 8192 /dev/zero > "$sub/000/01_g0/$h.bin"
	touch -a -m -d "@$((NOW - 86400 * 30))" "$sub/000/01_g0/$h.bin"
	run kvevict --max-bytes 1 --low-bytes 0
	s1=$status
	run kvevict --stdin <<<"${M}_r9/000/01_g0/$h.bin"
	s2=$status
	[ -f "$sub/000/01_g0/$h.bin" ]; kept=$?
	umount "$sub" 2>/dev/null || umount -l "$sub"
	[ "$s1" -eq 0 ] && [ "$s2" -eq 0 ]
	[ "$kept" -eq 0 ] || fail "a block on another filesystem was deleted"
	assert_gone_upto 2 2
}

@test "--model-max-bytes evicts the oldest of that model only" {
	local i
	mkdir -p "$KV_ROOT/$M" "$KV_ROOT/$M2"
	make_config > "$KV_ROOT/$M/config.json"
	# Model 2's blocks are older than all of model 1's: a global LRU would
	# take them first, the quota must not.
	for i in 1 2 3 4 5 6 7 8 9 10; do
		mkblk "$i" $((50000 - i * 60))
		mkblk "$i" $((90000 - i * 60)) 8192 0 "$M2"
	done
	# Model 1: 10 blocks of 8K + a 4K config = 84K; 48K quota frees down to
	# 90% of it (44235 bytes): 6 blocks.
	run kvevict --model-max-bytes meta-llama/Llama-3.1-8B=48K -J
	assert_success
	assert_gone_upto 6 10
	for i in 1 2 3 4 5 6 7 8 9 10; do
		[ -e "$KV_ROOT/$(blk "$i" 0 "$M2")" ] || fail "model 2 block $i deleted"
	done
	[ "$(jq .target_reached <<<"$output")" = true ]
}

@test "orphan temp files and old empty bucket dirs are removed, fresh ones kept" {
	mkblocks 2
	b=$KV_ROOT/$(dirname "$(blk 1)")
	old_tmp=$b/$(basename "$(blk 1)")_a1b2c3.tmp
	new_tmp=$b/$(basename "$(blk 1)")_d4e5f6.tmp
	echo partial > "$old_tmp"
	echo partial > "$new_tmp"
	touch -m -d '2 hours ago' "$old_tmp"
	mkdir -p "$KV_ROOT/${M}_r0/abc/de_g0" "$KV_ROOT/${M}_r0/abd/de_g0"
	touch -m -d '1 hour ago' "$KV_ROOT/${M}_r0/abc/de_g0"
	run kvevict --max-bytes 1G -J --orphans-after 30m
	assert_success
	[ ! -e "$old_tmp" ] || fail "orphan temp kept"
	[ -e "$new_tmp" ] || fail "a live writer's temp removed"
	[ ! -e "$KV_ROOT/${M}_r0/abc/de_g0" ] || fail "old empty dir kept"
	[ -d "$KV_ROOT/${M}_r0/abd/de_g0" ] || fail "fresh empty dir removed"
	[ "$(jq .orphans_removed <<<"$output")" -eq 1 ]
	[ "$(jq .dirs_removed <<<"$output")" -eq 1 ]
	[ "$(jq .files_deleted <<<"$output")" -eq 0 ]
	assert_gone_upto 0 2
	# --dir-grace 0 takes the fresh one too.
	run kvevict --max-bytes 1G -J --dir-grace 0
	assert_success
	[ ! -e "$KV_ROOT/${M}_r0/abd/de_g0" ]
	[ "$(jq .dirs_removed <<<"$output")" -ge 1 ]
}

@test "--stdin deletes the paths given, with the layout and hot rules" {
	mkblocks 4
	touch -a "$KV_ROOT/$(blk 4)"
	printf '%s\n' "$(blk 1)" "$KV_ROOT/$(blk 2)" "$(blk 4)" "../etc/passwd" \
		"/elsewhere/$(blk 3)" "${M}_r0/not-a-block" > "$BATS_TEST_TMPDIR/list"
	run --separate-stderr kvevict --stdin -J < "$BATS_TEST_TMPDIR/list"
	assert_success
	[ ! -e "$KV_ROOT/$(blk 1)" ] && [ ! -e "$KV_ROOT/$(blk 2)" ] || fail "listed blocks kept"
	[ -e "$KV_ROOT/$(blk 3)" ] || fail "a path outside the root was followed"
	[ -e "$KV_ROOT/$(blk 4)" ] || fail "a hot block was deleted"
	[ "$(jq .files_deleted <<<"$output")" -eq 2 ]
	[ "$(jq .skipped_hot <<<"$output")" -eq 1 ]
	[ "$(jq .skipped_other <<<"$output")" -eq 3 ]
	[[ "$stderr" == *"outside the root"* ]]
}

@test "--stdin takes kvls --blocks --older-than --ndjson records" {
	[ -x "$KV_BIN/kvls" ] || skip "kvls is not built"
	mkdir -p "$KV_ROOT/$M"
	make_config > "$KV_ROOT/$M/config.json"
	mkblk 1 $((8 * 86400))
	mkblk 2 $((9 * 86400))
	mkblk 3 $((2 * 86400))
	mkblk 4 600
	kvls --blocks --older-than 7d --ndjson > "$BATS_TEST_TMPDIR/old.ndjson"
	[ "$(wc -l < "$BATS_TEST_TMPDIR/old.ndjson")" -eq 2 ] || fail "$(cat "$BATS_TEST_TMPDIR/old.ndjson")"
	run kvevict --stdin --ndjson < "$BATS_TEST_TMPDIR/old.ndjson"
	assert_success
	[ "$(wc -l <<<"$output")" -eq 2 ]
	[ ! -e "$KV_ROOT/$(blk 1)" ] && [ ! -e "$KV_ROOT/$(blk 2)" ]
	[ -e "$KV_ROOT/$(blk 3)" ] && [ -e "$KV_ROOT/$(blk 4)" ]
}

@test "--watch reacts when use crosses --high and stops on SIGTERM" {
	fifo=$BATS_TEST_TMPDIR/events
	mkfifo "$fifo"
	mkblocks 20
	kvevict --watch 50ms --high 60 --low 30 --ndjson > "$fifo" &
	pid=$!
	exec 4< "$fifo"
	# Under --high: nothing happens.  Fill to ~70% and it must react.
	[ $(($(fs_used) * 100)) -lt $(($(fs_total) * 60)) ]
	for i in $(seq 21 90); do mkblk "$i" $((100000 - i * 60)); done
	read -r event <&4
	[ "$(jq -r .event <<<"$event")" = BlockRemoved ]
	kill -TERM "$pid"
	wait "$pid"
	exec 4<&-
	[ ! -e "$KV_ROOT/$(blk 1)" ]
}

@test "usage errors exit 2" {
	for args in "--high 120" "--low 50" "--high 50 --low 60" "--max-bytes 1G --low-bytes 2G" \
		"--low-bytes 1G" "--stdin --high 80" "--model-max-bytes x" "--model-max-bytes =1G" \
		"--watch 0 --high 80" "--once --watch 1s --high 80" "--hot soon --high 80" "" \
		"--high 80 extra" "--no-such-option"; do
		run --separate-stderr kvevict $args
		[ "$status" -eq 2 ] || fail "kvevict $args exited $status"
		[[ "$stderr" == *"Try 'kvevict --help'"* ]] || fail "kvevict $args: $stderr"
	done
}

@test "a missing root exits 3" {
	run --separate-stderr kvevict --root "$BATS_TEST_TMPDIR/nope" --high 80
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"cache root '$BATS_TEST_TMPDIR/nope' does not exist"* ]]
	run --separate-stderr kvevict --root "$BATS_TEST_TMPDIR/nope" --high 80 --dry-run
	[ "$status" -eq 3 ]
	run --separate-stderr kvevict --root "$BATS_TEST_TMPDIR/nope" --stdin < /dev/null
	[ "$status" -eq 3 ]
}

@test "--stdin: a record's path and fields must agree; duplicate keys refuse, unknown ones pass" {
	mkblocks 5
	local h4
	h4=$(basename "$(blk 4)" .bin)
	{
		echo "{\"path\":\"$(blk 1)\",\"model_dir\":\"$M\",\"rank\":0,\"atime_ns\":1,\"on_disk\":false}"
		echo "{\"path\":\"$(blk 2)\",\"hash\":\"$h4\"}"
		echo "{\"path\":\"$(blk 3)\",\"path\":\"$(blk 3)\"}"
		echo "{\"model_dir\":\"$M\",\"hash\":\"$h4\",\"size_bytes\":8192}"
		echo "{\"path\":\"$KV_ROOT/$(blk 5)\",\"rank\":1}"
	} > "$BATS_TEST_TMPDIR/list"
	run --separate-stderr kvevict --stdin -J < "$BATS_TEST_TMPDIR/list"
	assert_success
	[ ! -e "$KV_ROOT/$(blk 1)" ] && [ ! -e "$KV_ROOT/$(blk 4)" ] || fail "listed blocks kept"
	[ -e "$KV_ROOT/$(blk 2)" ] && [ -e "$KV_ROOT/$(blk 3)" ] && [ -e "$KV_ROOT/$(blk 5)" ] ||
		fail "a refused line deleted its block"
	[ "$(jq .files_deleted <<<"$output")" -eq 2 ]
	[ "$(jq .skipped_other <<<"$output")" -eq 3 ]
	[[ $stderr == *"<stdin>:2: \"path\" and \"hash\" disagree"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"<stdin>:3: invalid JSON: duplicate object key"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"<stdin>:5: \"path\" and \"rank\" disagree"* ]] || fail "stderr: $stderr"
}

@test "--orphans-after under a minute needs --force: live writers' temps are not fair game" {
	run --separate-stderr kvevict --max-bytes 1G --orphans-after 0
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"--orphans-after under 1m"*"--force"* ]] || fail "stderr: $stderr"
	run --separate-stderr kvevict --max-bytes 1G --orphans-after 30s
	[ "$status" -eq 2 ]
	run kvevict --max-bytes 1G --orphans-after 30s --force
	assert_success
	run kvevict --max-bytes 1G --orphans-after 1m
	assert_success
}

@test "--stdin reports no cache size it did not measure (null in -J, left out of the text)" {
	mkblocks 4
	run --separate-stderr bash -c 'kvls --blocks --ndjson | head -2 | kvevict --stdin --hot 0 -J'
	assert_success
	[ "$(jq .files_deleted <<<"$output")" -eq 2 ]
	[ "$(jq .cache_bytes_before <<<"$output")" = null ]
	[ "$(jq .cache_bytes_after <<<"$output")" = null ]
	run --separate-stderr bash -c 'kvls --blocks --ndjson | head -1 | kvevict --stdin --hot 0'
	assert_success
	[[ "$output" == "kvevict: deleted 1 block ("* ]] || fail "$output"
	[[ "$output" != *cache* ]]
}

@test "progress: on a terminal a long run says what it walked and deleted on stderr; in a pipe nothing" {
	requires mount script
	local latfs=$KV_BIN/../latfs/latfs tree=$KV_BIN/../bench/kvtree
	[ -x "$latfs" ] || skip "latfs not built (needs libfuse3-dev)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	mkdir -p "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/slow"
	"$tree" "$BATS_TEST_TMPDIR/src" 400 > /dev/null
	# every operation waits 1 ms, one walk thread: about 20 ms a block
	# through FUSE, so the run outlasts the progress line's first second
	"$latfs" "$BATS_TEST_TMPDIR/src" "$BATS_TEST_TMPDIR/slow" -o delay_us=1000 ||
		skip "cannot mount a FUSE filesystem here"
	local slow=$BATS_TEST_TMPDIR/slow
	run script -qec "kvevict --root '$slow' --threads 1 --max-bytes 1M --low-bytes 512K --dry-run > /dev/null" /dev/null
	local term=$status out=$output
	run --separate-stderr kvevict --root "$slow" --threads 1 --max-bytes 1M --low-bytes 512K --dry-run
	umount "$slow"
	[ "$term" -eq 0 ] && [[ "$out" == *"entries walked"* ]] || fail "terminal: $out"
	assert_success
	[ -z "$stderr" ]
}
