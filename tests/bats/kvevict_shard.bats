#!/usr/bin/env bats
# kvevict --shard I/N: N runs at once on one root (as N nodes would) split
# its buckets and delete what one run deletes; every block has one shard;
# a shard that never comes costs only its share; damaged and hostile state
# files are ignored; locks, quotas, dry runs, reports and clean-up.  Two
# mounts of one volume as two nodes: latency.bats and gluster.bats.
#
# The trees (tests/fixtures/shard_tree.py) hold every layout, and atimes
# far enough apart that each block is alone in its histogram bucket: the
# shards' choice is then exact, and precision (the fraction of what the
# shards deleted that one run deletes too) must be at least 0.99.

load test_helper

FIX=$BATS_TEST_DIRNAME/../fixtures
T=

setup() {
	common_setup
	requires python3 jq
	T=$BATS_TEST_TMPDIR
}

# mktree [N]: a fresh tree at $KV_ROOT, its manifest ("atime_ns path",
# oldest first) in $T/manifest.
mktree() {
	python3 "$FIX/shard_tree.py" "$KV_ROOT" "${1:-400}" > "$T/manifest"
}

# owner PATH N: the shard of N that owns a block path: its <hhh>.
owner() {
	local d=${1%/*}
	d=${d%/*}
	echo $((0x${d##*/} * $2 / 4096))
}

# reference ARGS...: what one run would delete, sorted, in $T/ref.
reference() {
	kvevict --dry-run --ndjson "$@" > "$T/ref.ndjson" || fail "single dry run failed"
	jq -r .path "$T/ref.ndjson" | sort > "$T/ref"
}

# shards N FIRST LAST ARGS...: shards FIRST..LAST of N at once, each with
# --ndjson into $T/out.<i> and its stderr in $T/err.<i>; what they deleted,
# sorted, in $T/sharded.
shards() {
	local n=$1 first=$2 last=$3 i pids=()
	shift 3
	for ((i = first; i <= last; i++)); do
		kvevict --shard "$i/$n" --ndjson "$@" > "$T/out.$i" 2> "$T/err.$i" &
		pids+=($!)
	done
	for ((i = first; i <= last; i++)); do
		wait "${pids[i - first]}" || fail "shard $i/$n exited $?: $(cat "$T/err.$i")"
	done
	cat "$T"/out.* | jq -r .path | sort > "$T/sharded"
}

# own N FIRST LAST: each shard deleted only blocks of its own buckets.
own() {
	local i p
	for ((i = $2; i <= $3; i++)); do
		while read -r p; do
			[ "$(owner "$p" "$1")" -eq "$i" ] || fail "shard $i/$1 deleted $p"
		done < <(jq -r .path "$T/out.$i")
	done
}

# precision A B: |A and B| / |A| for sorted path lists.
precision() {
	local a both
	a=$(wc -l < "$1")
	both=$(comm -12 "$1" "$2" | wc -l)
	awk -v a="$a" -v b="$both" 'BEGIN { printf "%.4f", a ? b / a : 1 }'
}

# assert_precise A B: precision of A against B at least 0.99.
assert_precise() {
	local p
	p=$(precision "$1" "$2")
	awk -v p="$p" 'BEGIN { exit !(p >= 0.99) }' ||
		fail "precision $p < 0.99: $(comm -3 "$1" "$2" | head -20)"
}

# blocks: the blocks left, sorted.
blocks() {
	(cd "$KV_ROOT" && find . -name '*.bin' -type f | sed 's|^\./||' | sort)
}

BUDGET=(--max-bytes 3000K --low-bytes 2000K)

@test "1, 2 and 4 shards at once delete what one run deletes, in every layout" {
	local n
	for n in 1 2 4; do
		rm -rf "$KV_ROOT" && mkdir "$KV_ROOT"
		mktree
		reference "${BUDGET[@]}"
		[ "$(wc -l < "$T/ref")" -gt 100 ] || fail "a bad set-up: $(wc -l < "$T/ref") to delete"
		rm -f "$T"/out.*
		shards "$n" 0 $((n - 1)) "${BUDGET[@]}"
		assert_precise "$T/sharded" "$T/ref"
		assert_precise "$T/ref" "$T/sharded"
		# each shard rounds its share up to a whole block
		[ $(($(wc -l < "$T/sharded") - $(wc -l < "$T/ref"))) -le "$n" ]
		[ -z "$(uniq -d "$T/sharded")" ] || fail "a block deleted twice"
		own "$n" 0 $((n - 1))
		[ -z "$(comm -12 <(blocks) "$T/sharded")" ] || fail "a block reported deleted is there"
		[ "$(blocks | wc -l)" -eq $((400 - $(wc -l < "$T/sharded"))) ]
		# the llmd-v0 tree and every hash length took part
		grep -q '^meta-llama/Llama-3.1-70B/' "$T/sharded"
		grep -qE '/[0-9a-f]{64}\.bin$' "$T/sharded"
		for f in "$KV_ROOT"/*_0123456789ab/config.json "$KV_ROOT"/*_ba9876543210/config.json; do
			[ -f "$f" ] || fail "$f deleted"
		done
	done
}

@test "--high/--low: the shards read the volume's use as one run would" {
	mount_tmpfs 8m
	export KV_ROOT=$MNT
	mktree
	# Fill the rest to 90% use; free down to 60%.
	fallocate -l $(( $(stat -f -c '%b * %S * 9 / 10 - (%b - %f) * %S' "$MNT") )) "$MNT/filler"
	reference --high 80 --low 60
	[ "$(wc -l < "$T/ref")" -gt 100 ] || fail "a bad set-up: $(wc -l < "$T/ref") to delete"
	shards 4 0 3 --high 80 --low 60
	# What one run deletes, the shards delete; and beyond it only the
	# room their own state files take, which the one run has no need
	# of (a 4 KiB block a shard: two 8 KiB blocks), and a block of
	# rounding for each shard past the first.
	assert_precise "$T/ref" "$T/sharded"
	local extra
	extra=$(comm -23 "$T/sharded" "$T/ref" | wc -l)
	[ "$extra" -le 5 ] || fail "the shards deleted $extra blocks more than one run"
	own 4 0 3
	[ -f "$MNT/filler" ]
	# The volume ends at --low or under, as df counts it (used over used
	# and available), the round's own state files included.
	local blocks free avail used
	read -r blocks free avail < <(stat -f -c '%b %f %a' "$MNT")
	used=$((blocks - free))
	[ $((used * 100)) -le $(((used + avail) * 60)) ] ||
		fail "$used of $((used + avail)) blocks in use: over 60%"
}

@test "a full volume: shards that cannot write their state still free their share" {
	local i=0 used total
	mount_tmpfs 8m
	export KV_ROOT=$MNT
	mktree
	# The state dir and the shards' locks are there from earlier rounds.
	shards 2 0 1 --max-bytes 1G --shard-wait 0
	fallocate -l $(( $(stat -f -c '%a * %S' "$MNT") - 65536 )) "$MNT/filler"
	while head -c 4096 /dev/zero > "$MNT/fill.$i" 2> /dev/null; do i=$((i + 1)); done
	shards 2 0 1 --high 90 --low 70 --shard-wait 1s
	# (an empty round file takes no block on tmpfs, a state file does)
	for i in 0 1; do
		grep -q "shard $i/2: cannot write .*: No space left on device; the other shards go on without it" \
			"$T/err.$i" || fail "$(cat "$T"/err.*)"
	done
	own 2 0 1
	read -r used total < <(stat -f -c '%b %f %a' "$MNT" | awk '{ print $1 - $2, $1 - $2 + $3 }')
	[ $((used * 100)) -le $((total * 71)) ] || fail "use still $((used * 100 / total))%"
}

@test "every block belongs to exactly one shard: dry runs of everything list the tree once" {
	local i p
	mktree
	blocks > "$T/all"
	shards 3 0 2 --max-bytes 1 --low-bytes 0 --hot 0 --dry-run
	diff "$T/all" "$T/sharded" || fail "the shards' lists are not the tree"
	for ((i = 0; i <= 2; i++)); do
		while read -r p; do
			[ "$(owner "$p" 3)" -eq "$i" ] || fail "$p listed by shard $i, owned by $(owner "$p" 3)"
		done < <(jq -r .path "$T/out.$i")
		[ "$(jq -s 'all(.[]; .dry_run)' "$T/out.$i")" = true ]
	done
	diff "$T/all" <(blocks)
	# a dry run takes no lock, and its state is not a real run's
	[ ! -e "$KV_ROOT/.kvevict.lock" ]
	ls "$KV_ROOT"/.kvevict/dry.*.3.0.2 > /dev/null
	! ls "$KV_ROOT"/.kvevict/round.* 2> /dev/null
}

@test "a dead shard costs only its share: the others wait --shard-wait, say so, free theirs; it may come late" {
	local i p k want
	mktree
	reference "${BUDGET[@]}"
	shards 4 0 2 "${BUDGET[@]}" --shard-wait 2s
	for ((i = 0; i <= 2; i++)); do
		grep -q "shard $i/4: round [0-9]* stage 0: 1 of 4 shards missing after 2s (shard 3 first); freeing this shard's share only" "$T/err.$i" ||
			fail "shard $i: $(cat "$T/err.$i")"
	done
	own 4 0 2
	# Among the blocks of shards 0 to 2, exactly the oldest went...
	while read -r _ p; do
		[ "$(owner "$p" 4)" -eq 3 ] || echo "$p"
	done < "$T/manifest" > "$T/present"
	k=$(wc -l < "$T/sharded")
	diff <(head -n "$k" "$T/present" | sort) "$T/sharded" || fail "not the oldest of the shards present"
	# ...their share of what to free: the cache their buckets show (8K
	# blocks, two 4K configs) taken for 3/4 of it, less the budget's low
	# mark, times 3/4; nothing of shard 3's.
	p=$(wc -l < "$T/present")
	want=$(( ((p * 8192 + 8192) * 4096 / 3072 - 2000 * 1024) * 3072 / 4096 ))
	want=$(( (want + 8191) / 8192 ))
	[ $((k - want)) -ge -2 ] && [ $((k - want)) -le 2 ] || fail "deleted $k, their share is $want"
	# Shard 3 comes late, joins the round, merges all four and frees
	# exactly its part of one run's choice.
	kvevict --shard 3/4 --ndjson "${BUDGET[@]}" --shard-wait 1m > "$T/out.3" 2> "$T/err.3"
	[ ! -s "$T/err.3" ] || fail "$(cat "$T/err.3")"
	own 4 3 3
	diff <(jq -r .path "$T/out.3" | sort) <(while read -r p; do
		[ "$(owner "$p" 4)" -ne 3 ] || echo "$p"; done < "$T/ref")
	[ "$(ls "$KV_ROOT"/.kvevict/round.*.4.0.* | sed 's/\.4\.0\.[0-9]$//' | sort -u | wc -l)" -eq 1 ] ||
		fail "shards in several rounds: $(ls "$KV_ROOT/.kvevict")"
}

@test "damaged and hostile state files are ignored with a message, and never trusted" {
	local r0 r good dry keep=(--max-bytes 1G)
	mktree
	mkdir -p "$KV_ROOT/.kvevict"
	# Rounds opened a little ahead (a clock that runs fast) are joined.
	r0=$(($(date +%s) + 30))
	: > "$KV_ROOT/.kvevict/round.$r0.2"
	# Good state files: shard 1 alone in round r0, and in a dry run.
	run --separate-stderr kvevict --shard 1/2 -J "${keep[@]}" --shard-wait 0
	assert_success
	[ "$(jq .shard_round <<<"$output")" -eq "$r0" ]
	good=$KV_ROOT/.kvevict/round.$r0.2.0.1
	[ -f "$good" ]
	kvevict --shard 1/2 --dry-run "${keep[@]}" --shard-wait 0 > /dev/null 2>&1
	dry=$(ls "$KV_ROOT"/.kvevict/dry.*.2.0.1)
	r=$r0
	# hostile CASE WHY: shard 1's state in a fresh round is CASE; shard 0
	# must say WHY and go on alone.
	hostile() {
		local f now
		now=$(date +%s)
		r=$((r + 1 > now + 30 ? r + 1 : now + 30))
		: > "$KV_ROOT/.kvevict/round.$r.2"
		f=$KV_ROOT/.kvevict/round.$r.2.0.1
		case $1 in
		symlink) ln -s "$good" "$f" ;;
		dir) mkdir "$f" ;;
		fifo) mkfifo "$f" ;;
		short) head -c 100 "$good" > "$f" ;;
		long) { cat "$good"; echo x; } > "$f" ;;
		checksum) cp "$good" "$f" && flip_byte "$f" 45 ;;
		round) cp "$good" "$f" ;;
		dry) cp "$dry" "$f" ;;
		count) cp "$good" "$KV_ROOT/.kvevict/round.$r.3.0.1" ;;
		big) head -c 600000 /dev/zero > "$f" ;;
		esac
		run --separate-stderr kvevict --shard 0/2 -J "${keep[@]}" --shard-wait 1s
		assert_success
		[ "$(jq .shard_round <<<"$output")" -eq "$r" ] || fail "$1: joined another round"
		[ "$(jq .shards_merged <<<"$output")" -eq 1 ] || fail "$1: merged: $output"
		[[ "$stderr" == *"shard 0/2: ignoring '.kvevict/round.$r.$2"* ]] || fail "$1: $stderr"
		[[ "$stderr" == *"1 of 2 shards missing"* ]] || fail "$1: $stderr"
	}
	hostile symlink "2.0.1': a symbolic link"
	hostile dir "2.0.1': not a regular file"
	hostile fifo "2.0.1': not a regular file"
	hostile short "2.0.1': wrong size (100 bytes"
	hostile long "2.0.1': wrong size"
	hostile checksum "2.0.1': bad checksum"
	hostile round "2.0.1': it holds stage 0 of shard 1/2, round $r0"
	hostile dry "2.0.1': it holds dry-run stage 0 of shard 1/2"
	hostile count "3.0.1': state of 3 shards, not 2"
	hostile big "2.0.1': wrong size (600000 bytes)"
	# Other targets, in the same round: each shard ignores the other's.
	r=$(($(date +%s) + 30 > r + 1 ? $(date +%s) + 30 : r + 1))
	: > "$KV_ROOT/.kvevict/round.$r.2"
	kvevict --shard 1/2 --max-bytes 2G --shard-wait 2s > /dev/null 2> "$T/err.1" &
	run --separate-stderr kvevict --shard 0/2 -J "${keep[@]}" --shard-wait 2s
	wait $!
	assert_success
	[ "$(jq .shards_merged <<<"$output")" -eq 1 ]
	[[ "$stderr" == *"ignoring '.kvevict/round.$r.2.0.1': computed for other targets"* ]] || fail "$stderr"
	grep -q "ignoring '.kvevict/round.$r.2.0.0': computed for other targets" "$T/err.1" ||
		fail "$(cat "$T/err.1")"
	[ "$(blocks | wc -l)" -eq 400 ]
}

@test "state of rounds long gone is removed, anything else in .kvevict is left" {
	local old=$(($(date +%s) - 7200))
	mktree 40
	mkdir -p "$KV_ROOT/.kvevict"
	for f in round.$old.1 round.$old.1.0.0 dry.$old.2.1.1 round.$old.1.0.0_0123456789abcdef.tmp \
		round.$((old + 7000)).1; do
		: > "$KV_ROOT/.kvevict/$f"
	done
	echo keep > "$KV_ROOT/.kvevict/notes"
	mkdir "$KV_ROOT/.kvevict/round.$old.1.0.9"
	run kvevict --shard 0/1 --max-bytes 1G
	assert_success
	for f in round.$old.1 round.$old.1.0.0 dry.$old.2.1.1 round.$old.1.0.0_0123456789abcdef.tmp; do
		[ ! -e "$KV_ROOT/.kvevict/$f" ] || fail "$f kept"
	done
	[ "$(cat "$KV_ROOT/.kvevict/notes")" = keep ]
	[ -d "$KV_ROOT/.kvevict/round.$old.1.0.9" ]
	# a recent round and this run's own state stay
	[ -e "$KV_ROOT/.kvevict/round.$((old + 7000)).1" ]
	ls "$KV_ROOT"/.kvevict/round.*.1.0.0 > /dev/null
	# kvls --check counts the state dir as kvevict's
	run kvls --check --ndjson
	refute_output --partial .kvevict
}

@test "an unsharded run and shards exclude each other; one shard index runs once at a time" {
	mktree 40
	mkdir -p "$KV_ROOT/.kvevict"
	mkfifo "$T/held" "$T/release"
	# hold MODE FILE: a holder of the lock, in the background, until released.
	hold() {
		(umask 077 && : >> "$2")
		flock "$1" "$2" sh -c 'echo held > "$1"; cat "$2" > /dev/null' sh "$T/held" "$T/release" &
		holder=$!
		read -r _ < "$T/held"
	}
	release() { echo go > "$T/release"; wait "$holder"; }

	hold -x "$KV_ROOT/.kvevict.lock"
	run --separate-stderr kvevict --shard 0/2 --max-bytes 1G --shard-wait 0
	[ "$status" -eq 1 ] && [[ "$stderr" == *"another kvevict (unsharded, or shard 0) holds the lock"* ]] ||
		fail "$status: $stderr"
	release
	hold -s "$KV_ROOT/.kvevict.lock"
	run --separate-stderr kvevict --max-bytes 1G
	[ "$status" -eq 1 ] && [[ "$stderr" == *"another kvevict holds the lock"* ]] || fail "$stderr"
	run kvevict --shard 0/2 --max-bytes 1G --shard-wait 0
	assert_success
	release
	hold -x "$KV_ROOT/.kvevict/lock.1"
	run --separate-stderr kvevict --shard 1/2 --max-bytes 1G --shard-wait 0
	[ "$status" -eq 1 ] || fail "shard 1 ran twice"
	release
}

@test "-J and the summary line say the shard, its round and how many shards merged" {
	mktree
	kvevict --shard 1/2 -J "${BUDGET[@]}" > "$T/j1" &
	run --separate-stderr kvevict --shard 0/2 "${BUDGET[@]}"
	wait $!
	assert_success
	[[ "$output" == "kvevict: deleted "*", shard 0/2 (2 of 2 merged)" ]] || fail "$output"
	keys=$(jq -c 'keys' "$T/j1")
	[ "$keys" = '["bytes_deleted","bytes_needed","bytes_scanned","cache_bytes_after","cache_bytes_before","cutoff_atime_ns","dirs_removed","dirs_unreadable","dry_run","elapsed_ns","files_deleted","files_hot","files_scanned","orphan_bytes_removed","orphans_removed","root","shard_count","shard_index","shard_round","shards_merged","skipped_hot","skipped_other","target_reached","use_after_pct","use_before_pct","walks"]' ] || fail "$keys"
	jq -e '.shard_index == 1 and .shard_count == 2 and .shards_merged == 2 and
		.target_reached and .files_deleted > 0 and .shard_round > 1700000000' "$T/j1"
	# what each scanned adds up to the tree
	[ "$(jq .files_scanned "$T/j1")" -lt 400 ]
}

@test "--model-max-bytes: quotas are stages of the round; the shards delete what one run deletes" {
	local q=(--model-max-bytes meta-llama/Llama-3.1-8B=600K)
	mktree
	reference "${q[@]}"
	[ "$(wc -l < "$T/ref")" -gt 20 ] || fail "a bad set-up"
	shards 2 0 1 "${q[@]}"
	assert_precise "$T/sharded" "$T/ref"
	assert_precise "$T/ref" "$T/sharded"
	! grep -v '^meta-llama_Llama-3.1-8B_0123456789ab_r' "$T/sharded" || fail "another model's block"
	ls "$KV_ROOT"/.kvevict/round.*.2.0.1 "$KV_ROOT"/.kvevict/round.*.2.1.1 > /dev/null
}

@test "--shard usage errors exit 2" {
	local args
	for args in "--shard 2/2" "--shard 1" "--shard /2" "--shard 0/0" "--shard -1/2" \
		"--shard 01/2" "--shard 0/4097" "--shard a/b" "--shard-wait 1s" \
		"--shard 0/2 --watch 1s" "--shard 0/2 --stdin" "--shard 0/2 --shard-wait soon"; do
		run --separate-stderr kvevict --max-bytes 1G $args
		[ "$status" -eq 2 ] || fail "kvevict $args exited $status"
		[[ "$stderr" == *"Try 'kvevict --help'"* ]] || fail "kvevict $args: $stderr"
	done
	run --separate-stderr kvevict --stdin --shard 0/2 < /dev/null
	[ "$status" -eq 2 ]
}

@test "a state dir that is a symlink or no dir is refused: exit 3, nothing deleted" {
	mktree 40
	ln -s "$T" "$KV_ROOT/.kvevict"
	run --separate-stderr kvevict --shard 0/1 --max-bytes 1 --low-bytes 0 --hot 0
	[ "$status" -eq 3 ] && [[ "$stderr" == *"the shards' state dir '.kvevict'"* ]] || fail "$stderr"
	run --separate-stderr kvevict --shard 0/1 --max-bytes 1 --low-bytes 0 --hot 0 --dry-run
	[ "$status" -eq 3 ]
	rm "$KV_ROOT/.kvevict"
	: > "$KV_ROOT/.kvevict"
	run --separate-stderr kvevict --shard 0/1 --max-bytes 1 --low-bytes 0 --hot 0
	[ "$status" -eq 3 ]
	[ "$(blocks | wc -l)" -eq 40 ]
	[ -z "$(ls "$T" | grep '^round\.')" ] || fail "state written through the symlink"
}
