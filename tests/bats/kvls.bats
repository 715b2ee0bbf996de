#!/usr/bin/env bats
# kvls on trees built here in the vLLM / llm-d layout (fingerprints from
# python3), and on hostile ones: symlinks out of the root, garbage names,
# unreadable dirs, mount points, a missing root, a full stdout.

load test_helper

LLAMA=meta-llama/Llama-3.1-8B
QWEN='Qwen/Qwen3-32B-ü中文'

# model_dir MODEL TP DTYPE: make the model dir with its config.json and
# print its name.
model_dir() {
	local cfg=$BATS_TEST_TMPDIR/cfg.$RANDOM dir
	make_config "$1" "$2" "$3" > "$cfg"
	dir=${1//\//_}_$(py_fingerprint "$cfg")
	mkdir -p "$KV_ROOT/$dir"
	cp "$cfg" "$KV_ROOT/$dir/config.json"
	echo "$dir"
}

# block DIR RANK GROUP HASH SIZE: write one block file; print its path.
block() {
	local rel=$1_r$2/${4:0:3}/${4:3:2}_g$3/$4.bin
	mkdir -p "$KV_ROOT/${rel%/*}"
	head -c "$5" /dev/urandom > "$KV_ROOT/$rel"
	echo "$rel"
}

# Two models: llama with ranks 0 and 1 (3 blocks each, two groups), qwen
# with rank 0 (2 blocks).  MANIFEST lists "path size" per block.
make_tree() {
	MANIFEST=$BATS_TEST_TMPDIR/manifest
	: > "$MANIFEST"
	L=$(model_dir "$LLAMA" 2 bfloat16)
	Q=$(model_dir "$QWEN" 1 float16)
	local r spec
	for r in 0 1; do
		for spec in "0 0123456789abcdef 100" "0 0123aaaaaaaaaaaa 200" "1 fedcba9876543210 300"; do
			set -- $spec
			echo "$(block "$L" "$r" "$1" "$2" "$3") $3" >> "$MANIFEST"
		done
	done
	echo "$(block "$Q" 0 0 abcdef00000000001111 4096) 4096" >> "$MANIFEST"
	echo "$(block "$Q" 0 0 abcde00000 10) 10" >> "$MANIFEST"
}

@test "the model table: model, fingerprint, dtype, schema, tp, ranks, files, size" {
	make_tree
	run --separate-stderr kvls
	[ "$status" -eq 0 ] || fail "kvls: $stderr"
	[ "${#lines[@]}" -eq 3 ]
	[[ "${lines[0]}" == MODEL*FINGERPRINT*DTYPE*SCHEMA*TP*RANKS*FILES*SIZE*OLDEST*NEWEST ]]
	read -r model fp dtype schema tp ranks files size oldest newest <<< "$(grep -F "$LLAMA " <<< "$output")"
	[ "$model" = "$LLAMA" ] && [ "$fp" = "${L##*_}" ] && [ "$dtype" = bfloat16 ]
	[ "$schema" = llm-d ]
	[ "$tp" = 2 ] && [ "$ranks" = 2 ] && [ "$files" = 6 ] && [ "$size" = 1.2K ]
	[[ "$oldest" =~ ^20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9:]{8}Z$ ]]
	read -r model fp dtype schema tp ranks files size oldest newest <<< "$(grep -F "$QWEN " <<< "$output")"
	[ "$dtype" = float16 ] && [ "$tp" = 1 ] && [ "$ranks" = 1 ] && [ "$files" = 2 ]
	[ "$size" = 4.0K ]
}

@test "tables align wide characters and escape control characters" {
	make_tree
	run --separate-stderr kvls
	[ "$status" -eq 0 ] || fail "kvls: $stderr"
	# Every row's FINGERPRINT starts in the same terminal column
	# (East Asian wide characters count two).
	python3 -c '
import sys, unicodedata
cols = set()
for line in sys.stdin.read().splitlines():
    i = line.index(line.split()[1], len(line.split()[0]))
    cols.add(sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line[:i]))
sys.exit(len(cols) != 1)' <<< "$output" || fail "misaligned: $output"
	# A name that would clear the screen and split the record is shown
	# escaped, one line, in the human table.
	printf 'x' > "$KV_ROOT/$(printf 'evil\e[2J\nname')"
	run --separate-stderr kvls --check
	[ "$status" -eq 1 ]
	! grep -q $'\x1b' <<< "$output"
	grep -qxE 'foreign +evil\\x1b\[2J\\x0aname +.*' <<< "$output" || fail "$output"
}

@test "-J: one document of models with sizes in bytes" {
	make_tree
	run --separate-stderr kvls -J
	[ "$status" -eq 0 ]
	jq -e '.models | length == 2' <<< "$output"
	jq -e --arg m "$LLAMA" --arg d "$L" '.models[] | select(.model == $m) |
		.model_dir == $d and .fingerprint == ($d | .[-12:]) and .tp == 2 and
		.dtype == "bfloat16" and .ranks == [0, 1] and .files == 6 and
		.size_bytes == 1200 and .alloc_bytes >= 1200 and .config == true and
		.oldest_atime_ns <= .newest_atime_ns' <<< "$output"
	jq -e --arg m "$QWEN" '.models[] | select(.model == $m) | .size_bytes == 4106' <<< "$output"
	# Keys sorted, as every kvtools record.
	jq -e '.models[] | keys_unsorted == keys' <<< "$output"
	run kvls --ndjson
	[ "${#lines[@]}" -eq 2 ]
}

@test "--blocks --ndjson: one record per block with the layout fields" {
	make_tree
	run --separate-stderr kvls --blocks --ndjson
	[ "$status" -eq 0 ] || fail "$stderr"
	[ "${#lines[@]}" -eq 8 ]
	printf '%s\n' "$output" > "$BATS_TEST_TMPDIR/out"
	jq -e 'keys_unsorted == keys and keys == ["alloc_bytes", "atime_ns", "group",
		"hash", "last_use_ns", "model_dir", "mtime_ns", "path", "rank", "size_bytes"]' \
		"$BATS_TEST_TMPDIR/out" > /dev/null
	# path, size and the parsed fields agree with what was written.
	diff <(jq -r '"\(.path) \(.size_bytes)"' "$BATS_TEST_TMPDIR/out" | sort) \
		<(sort "$MANIFEST")
	jq -e '.path == "\(.model_dir)_r\(.rank)/\(.hash[0:3])/\(.hash[3:5])_g\(.group)/\(.hash).bin"' \
		"$BATS_TEST_TMPDIR/out" > /dev/null
	# atime_ns is exact: compare as text against stat.
	line=$(grep -F '"hash":"fedcba9876543210"' "$BATS_TEST_TMPDIR/out" | grep -F '"rank":1')
	p=$(jq -r .path <<< "$line")
	[[ "$line" == *"\"atime_ns\":$(stat -c %X "$KV_ROOT/$p")"* ]]
	want_ns=$(python3 -c 'import os, sys; print(os.stat(sys.argv[1]).st_atime_ns)' "$KV_ROOT/$p")
	[[ "$line" == *"\"atime_ns\":$want_ns,"* ]]
}

@test "--blocks -J is one document; the table has a header and readable sizes" {
	make_tree
	run kvls --blocks -J
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 1 ]
	jq -e '.blocks | length == 8' <<< "$output"
	run kvls --blocks
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 9 ]
	[[ "${lines[0]}" == LAST\ USE*ATIME*MTIME*SIZE*ALLOC*RANK*GROUP*PATH ]]
	grep -E "^[0-9T:-]+Z +[0-9T:-]+Z +[0-9T:-]+Z +4.0K +[0-9.]+K +0 +0 +${Q}_r0/abc/de_g0/abcdef00000000001111.bin$" <<< "$output"
}

@test "the same records from 1 and 8 threads" {
	make_tree
	kvls --blocks --ndjson --threads 1 | sort > "$BATS_TEST_TMPDIR/one"
	kvls --blocks --ndjson --threads 8 | sort > "$BATS_TEST_TMPDIR/eight"
	[ "$(wc -l < "$BATS_TEST_TMPDIR/one")" -eq 8 ]
	cmp "$BATS_TEST_TMPDIR/one" "$BATS_TEST_TMPDIR/eight"
}

@test "filters: --model by name or dir, --rank, --older-than, --newer-than" {
	make_tree
	run kvls --blocks --ndjson --model "$LLAMA"
	[ "${#lines[@]}" -eq 6 ]
	run kvls --blocks --ndjson --model "$Q"
	[ "${#lines[@]}" -eq 2 ]
	run kvls --blocks --ndjson --model "${QWEN//\//_}"
	[ "${#lines[@]}" -eq 2 ]
	run kvls --blocks --ndjson --rank 1
	[ "${#lines[@]}" -eq 3 ]
	jq -e '.rank == 1' <<< "$output" > /dev/null
	run kvls --ndjson --rank 1
	[ "${#lines[@]}" -eq 2 ]
	jq -e --arg m "$LLAMA" 'select(.model == $m) | .files == 3' <<< "$output"

	# Two blocks last read ten days ago.
	touch -a -d '10 days ago' "$KV_ROOT/$(sed -n 1p "$MANIFEST" | cut -d' ' -f1)" \
		"$KV_ROOT/$(sed -n 7p "$MANIFEST" | cut -d' ' -f1)"
	run kvls --blocks --ndjson --older-than 7d
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 2 ]
	run kvls --blocks --ndjson --newer-than 1d
	[ "${#lines[@]}" -eq 6 ]
	run kvls --blocks --ndjson --older-than 7d --model "$LLAMA"
	[ "${#lines[@]}" -eq 1 ]
	run kvls -J --older-than 7d
	jq -e '[.models[].files] | add == 2' <<< "$output"

	# Nothing matched: exit 1, nothing printed.
	run kvls --blocks --ndjson --older-than 30d
	[ "$status" -eq 1 ] && [ -z "$output" ]
	run kvls --model no-such-model
	[ "$status" -eq 1 ]
	run kvls --blocks --rank 9
	[ "$status" -eq 1 ]
}

@test "--blocks --sort: least recently used first, largest first, or by path; ties by path" {
	make_tree
	local n=0 path size want
	while read -r path size; do
		n=$((n + 1))
		touch -a -d "$(( (n * 5) % 8 + 1 )) hours ago" "$KV_ROOT/$path"
		echo "$(( (n * 5) % 8 + 1 )) $path"
	done < "$MANIFEST" > "$BATS_TEST_TMPDIR/ages"
	want=$(sort -k1,1nr "$BATS_TEST_TMPDIR/ages" | cut -d' ' -f2)
	run kvls --blocks --sort last-use --ndjson
	assert_success
	[ "$(jq -r .path <<<"$output")" = "$want" ] || fail "$output"
	# The table too: its last column is the path.
	run kvls --blocks --sort last-use
	[ "$(sed 1d <<<"$output" | awk '{ print $NF }')" = "$want" ]
	want=$(LC_ALL=C sort -k2,2nr -k1,1 "$MANIFEST" | cut -d' ' -f1)
	run kvls --blocks --sort size -J
	[ "$(jq -r '.blocks[].path' <<<"$output")" = "$want" ] || fail "$output"
	want=$(LC_ALL=C sort "$MANIFEST" | cut -d' ' -f1)
	run kvls --blocks --sort path --ndjson --rank 0
	[ "$(jq -r .path <<<"$output")" = "$(grep _r0/ <<<"$want")" ] || fail "$output"
	# Only what --blocks or --daemon lists, and the RAM tier has no last use.
	for args in "--sort size" "--check --sort size" "--blocks --sort age" \
		    "--daemon $BATS_TEST_TMPDIR/none.sock --sort last-use"; do
		run --separate-stderr kvls $args
		[ "$status" -eq 2 ] || fail "kvls $args: exit $status"
	done
}

@test "an empty root lists nothing and exits 1; --check on it is clean" {
	run kvls
	[ "$status" -eq 1 ] && [ -z "$output" ]
	run kvls --blocks -J
	[ "$status" -eq 1 ]
	jq -e '.blocks == []' <<< "$output"
	run kvls --check
	[ "$status" -eq 0 ]
}

@test "--check: clean tree exits 0, then each problem is reported" {
	make_tree
	run kvls --check
	[ "$status" -eq 0 ] || fail "$output"
	[ "$output" = "0 problems" ]

	# A young temp is a writer at work; an old one is an orphan.
	leaf=$KV_ROOT/$(sed -n 1p "$MANIFEST" | cut -d' ' -f1)
	touch "${leaf}_1a2b3c4d.tmp"
	touch -d '2 hours ago' "${leaf}_99999999.tmp"
	echo hello > "$KV_ROOT/README"
	echo junk > "${leaf%/*}/notes"
	mkdir "$KV_ROOT/${L}_r0/xyz"
	# A copy of llama's config under a wrong fingerprint, and a rank dir
	# with no model dir.
	mkdir "$KV_ROOT/${L%_*}_0123456789ab"
	cp "$KV_ROOT/$L/config.json" "$KV_ROOT/${L%_*}_0123456789ab/"
	block "gone_model_aaaaaaaaaaaa" 3 0 abcdef0000 5 > /dev/null
	mkdir "$KV_ROOT/broken_model_bbbbbbbbbbbb"
	echo '{"model_name": ' > "$KV_ROOT/broken_model_bbbbbbbbbbbb/config.json"
	: > "$KV_ROOT/.kvevict.lock"
	mkdir "$KV_ROOT/.kvevict"

	run --separate-stderr kvls --check -J
	[ "$status" -eq 1 ]
	printf '%s\n' "$output" > "$BATS_TEST_TMPDIR/report"
	has() { jq -e --arg k "$1" --arg p "$2" \
		'any(.problems[]; .problem == $k and .path == $p)' "$BATS_TEST_TMPDIR/report" > /dev/null ||
		fail "no $1 problem for $2: $output"; }
	rel=${leaf#"$KV_ROOT"/}
	has orphan-temp "${rel}_99999999.tmp"
	has foreign README
	has foreign "${rel%/*}/notes"
	has foreign "${L}_r0/xyz"
	has fingerprint "${L%_*}_0123456789ab"
	has orphan-rank gone_model_aaaaaaaaaaaa_r3
	has bad-config broken_model_bbbbbbbbbbbb/config.json
	jq -e '.problems | length == 7' "$BATS_TEST_TMPDIR/report" ||
		fail "$(jq -c '.problems[]' "$BATS_TEST_TMPDIR/report")"
	jq -e '.summary | .problems == 7 and .temps_in_flight == 1 and .blocks == 9' \
		"$BATS_TEST_TMPDIR/report"
	# The fingerprint problem says where the config belongs.
	jq -e --arg l "$L" 'any(.problems[]; .problem == "fingerprint" and
		(.detail | contains($l)))' "$BATS_TEST_TMPDIR/report"

	run kvls --check --ndjson
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 7 ]
	run kvls --check
	[ "$status" -eq 1 ]
	[ "${lines[-1]}" = "7 problems" ]
	run kvls --check --orphans-after 3h
	[ "${lines[-1]}" = "6 problems" ]
}

@test "--verify: kvput's checksums hold, a flipped byte is a mismatch" {
	requires xattr
	[ -x "$KV_BIN/kvput" ] || skip "kvput is not built"
	local cfg=$BATS_TEST_TMPDIR/cfg.json p
	make_config "$LLAMA" > "$cfg"
	for h in 0123456789abcdef 00112233445566778899 fedcba9876543210; do
		head -c 5000 /dev/urandom > "$BATS_TEST_TMPDIR/payload"
		kvput --root "$KV_ROOT" --config "$cfg" "$h" "$BATS_TEST_TMPDIR/payload"
	done
	# One block written without kvput carries no checksum.
	block "$(cd "$KV_ROOT" && ls -d *_????????????)" 0 0 aaaaaaaaaa 100 > /dev/null
	p=$(cd "$KV_ROOT" && ls *_r0/001/12_g0/*.bin)
	before=$(stat -c %X "$KV_ROOT/$p")

	run kvls --verify
	[ "$status" -eq 0 ] || fail "$output"
	[[ "$output" == *"4 blocks: 3 verified, 0 mismatched, 1 without checksum"* ]] || fail "$output"
	# Layout problems are --check's business: --verify alone passes them.
	echo junk > "$KV_ROOT/notes.txt"
	: > "$KV_ROOT/${p%.bin}_stale.tmp"
	touch -d '-2 hours' "$KV_ROOT/${p%.bin}_stale.tmp"
	run kvls --verify
	[ "$status" -eq 0 ] || fail "--verify counted layout problems: $output"
	run kvls --verify --check
	[ "$status" -eq 1 ]
	[[ "$output" == *notes.txt* && "$output" == *_stale.tmp* ]] || fail "$output"
	rm "$KV_ROOT/notes.txt" "$KV_ROOT/${p%.bin}_stale.tmp"

	flip_byte "$KV_ROOT/$p" 1234
	touch -a -d @"$before" "$KV_ROOT/$p"
	run --separate-stderr kvls --verify -J
	[ "$status" -eq 1 ]
	jq -e --arg p "$p" '.problems == [{"detail": "payload does not match user.kv.xxh3",
		"path": $p, "problem": "checksum"}]' <<< "$output"
	jq -e '.summary | .verified == 3 - 1 and .mismatched == 1 and .unchecked == 1 and
		.xattrs == true' <<< "$output"
	# Verifying reads every block but leaves atime alone.
	[ "$(stat -c %X "$KV_ROOT/$p")" = "$before" ]
	run kvls --verify --check --ndjson
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 1 ]
}

@test "--verify on a filesystem without user xattrs says so" {
	requires mount
	MNT=$BATS_TEST_TMPDIR/ramfs
	mkdir -p "$MNT"
	mount -t ramfs ramfs "$MNT" || skip "cannot mount ramfs"
	touch "$MNT/probe"
	! setfattr -n user.kv.probe -v 1 "$MNT/probe" 2>/dev/null || skip "ramfs has user xattrs here"
	rm "$MNT/probe"
	KV_ROOT=$MNT make_tree
	run --separate-stderr kvls --root "$MNT" --verify
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"no user xattrs"* ]] || fail "stderr: $stderr"
	[[ "$output" == *"8 without checksum (no user xattrs on this filesystem)"* ]] || fail "$output"
}

@test "symlinks out of the root are never followed" {
	make_tree
	# Outside: a full model tree, and buckets that look like ours.
	OUT=$BATS_TEST_TMPDIR/outside
	mkdir -p "$OUT"
	(KV_ROOT=$OUT; model_dir "$LLAMA" 2 bfloat16 > /dev/null
	 block "$L" 0 0 777777777777 50 > /dev/null
	 mkdir -p "$OUT/cd_g0" && head -c 9 /dev/zero > "$OUT/cd_g0/abccd999.bin")
	ln -s "$OUT/${L}_r0" "$KV_ROOT/${L}_r5"		# a rank dir
	ln -s "$OUT/${L}_r0/777" "$KV_ROOT/${L}_r0/777"	# a top bucket
	ln -s "$OUT" "$KV_ROOT/${L}_r0/012/cd_g0"		# a leaf bucket
	ln -s "$OUT/cd_g0/abccd999.bin" "$KV_ROOT/${L}_r0/012/34_g0/01234888.bin"
	ln -s "$OUT" "$KV_ROOT/outside"

	run --separate-stderr kvls --blocks --ndjson
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 8 ] || fail "$output"
	[[ "$output" != *777777777777* && "$output" != *abccd999* && "$output" != *01234888* ]]
	run kvls -J
	jq -e --arg m "$LLAMA" '.models[] | select(.model == $m) | .ranks == [0, 1]' <<< "$output"

	run kvls --check --ndjson
	[ "$status" -eq 1 ]
	[ "${#lines[@]}" -eq 5 ]
	jq -s -e 'all(.[]; .problem == "foreign" and (.detail | test("symlink")))' <<< "$output"
	[[ "$output" != *"$OUT"* ]]
}

@test "garbage names and files are foreign, listed safely" {
	make_tree
	leaf=$KV_ROOT/$(sed -n 1p "$MANIFEST" | cut -d' ' -f1)
	leaf=${leaf%/*}
	printf 'x' > "$leaf/$(printf 'bad\nname')"
	printf 'x' > "$leaf/$(printf 'q"uo\\te\x01\xff')"
	printf 'x' > "$leaf/0123456789ABCDEF.bin"
	printf 'x' > "$leaf/99999.bin"
	mkfifo "$leaf/01234fifo0.bin"
	mkdir "$leaf/01234dddd.bin"
	printf 'x' > "$KV_ROOT/${L}_r7"
	mkdir -p "$KV_ROOT/${L}_r0/12/34_g0" "$KV_ROOT/${L}_r0/012/34_g"
	head -c 10 /dev/zero > "$KV_ROOT/${L}_r0/12/34_g0/01234567.bin"

	run kvls --blocks --ndjson
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 8 ]
	run kvls --check -J
	[ "$status" -eq 1 ]
	jq -e '.problems | length == 9 and all(.problem == "foreign")' <<< "$output" ||
		fail "$output"
	jq -e 'any(.problems[]; .path | endswith("bad\nname"))' <<< "$output"
	jq -e 'any(.problems[]; .path | endswith("q\"uo\\te\u0001\ufffd"))' <<< "$output"
	jq -e 'any(.problems[]; .detail | test("special"))' <<< "$output"
	run kvls --check --ndjson
	[ "${#lines[@]}" -eq 9 ]
}

@test "an unreadable dir is reported and skipped; the rest is listed" {
	requires root setpriv
	make_tree
	# A root the nobody user can reach.
	NROOT=$(mktemp -d /tmp/kvls-bats.XXXXXX)
	chmod 0755 "$NROOT"
	cp -a "$KV_ROOT" "$NROOT/root"
	chmod 0700 "$NROOT/root/${L}_r1/fed"
	nobody() { run --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
	setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$KV_BIN/kvls" ||
		skip "user nobody cannot run $KV_BIN/kvls"
	nobody "$KV_BIN/kvls" --root "$NROOT/root" --blocks --ndjson
	[ "$status" -eq 0 ]
	[[ "$stderr" == "kvls: cannot read '${L}_r1/fed': Permission denied" ]] || fail "$stderr"
	[ "${#lines[@]}" -eq 7 ]
	nobody "$KV_BIN/kvls" --root "$NROOT/root" --check --ndjson
	[ "$status" -eq 1 ]
	jq -e --arg p "${L}_r1/fed" '.problem == "unreadable" and .path == $p and
		.detail == "Permission denied"' <<< "$output"
	chmod 0700 "$NROOT/root"
	nobody "$KV_BIN/kvls" --root "$NROOT/root"
	[ "$status" -eq 3 ]
	[ "$stderr" = "kvls: cannot open '$NROOT/root': Permission denied" ]
	[ -z "$output" ]
	rm -rf "$NROOT"
}

@test "a filesystem mounted below the root is not entered" {
	make_tree
	mount_tmpfs 1m
	mkdir -p "$KV_ROOT/${L}_r0/ddd"
	mount --bind "$MNT" "$KV_ROOT/${L}_r0/ddd"
	mkdir -p "$MNT/ee_g0" && printf x > "$MNT/ee_g0/dddee0000.bin"
	run kvls --blocks --ndjson
	umount "$KV_ROOT/${L}_r0/ddd"
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 8 ]
	[[ "$output" != *dddee0000* ]]
}

@test "a missing or unusable root exits 3 with a message; no root is a usage error" {
	run --separate-stderr kvls --root "$BATS_TEST_TMPDIR/nope"
	[ "$status" -eq 3 ]
	[ "$stderr" = "kvls: cache root '$BATS_TEST_TMPDIR/nope' does not exist: not mounted, or not made yet?" ]
	[ -z "$output" ]
	run --separate-stderr kvls --blocks -J --root "$BATS_TEST_TMPDIR/nope"
	[ "$status" -eq 3 ] && [ -z "$output" ]
	touch "$BATS_TEST_TMPDIR/file"
	run --separate-stderr kvls --root "$BATS_TEST_TMPDIR/file"
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"Not a directory"* ]]
	unset KV_ROOT
	run --separate-stderr kvls
	[ "$status" -eq 2 ]
	[[ "$stderr" == *KV_ROOT* ]]
}

@test "usage errors exit 2" {
	for args in "--blocks --check" "--blocks --verify" "--rank x" "--rank -1" \
		"--older-than soon" "--threads 999" "--model=" "extra" "--root"; do
		run --separate-stderr kvls $args
		[ "$status" -eq 2 ] || fail "kvls $args exited $status"
		[[ "$stderr" == *"Try 'kvls --help'"* ]]
	done
}

@test "stdout: a full device fails with a message, a closed pipe is quiet" {
	make_tree
	# Enough records to pass through stdio's buffer more than once.
	mkdir -p "$KV_ROOT/${L}_r2/abc/de_g0"
	for i in $(seq 100000 102999); do
		: > "$KV_ROOT/${L}_r2/abc/de_g0/abcde$i.bin"
	done
	run --separate-stderr bash -c 'kvls --blocks --ndjson > /dev/full'
	[ "$status" -eq 3 ]
	[ "$stderr" = "kvls: write error: No space left on device" ]
	for mode in "" "--blocks" "--blocks -J" "--check" "-J"; do
		run --separate-stderr bash -c "kvls $mode > /dev/full"
		[ "$status" -eq 3 ] || fail "kvls $mode > /dev/full exited $status"
		[[ "$stderr" == *"write error"* ]]
	done
	run --separate-stderr bash -c 'kvls --blocks --ndjson | head -1'
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 1 ] && [ -z "$stderr" ]
	run --separate-stderr bash -c 'trap "" PIPE; kvls --blocks | head -1'
	[ -z "$stderr" ]
}

@test "--help and --version" {
	run kvls --help
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "Usage: kvls "* ]]
	run kvls -V
	[ "$status" -eq 0 ]
	[[ "$output" == "kvls (kvtools) "* ]]
}

@test "on a terminal a long model name is cut with an ellipsis; into a pipe it is whole" {
	requires script
	local long="org/$(printf 'very-long-model-name-%.0s' 1 2 3 4 5 6 7 8)"
	make_config "$long" > "$BATS_TEST_TMPDIR/cfg.json"
	random_file "$BATS_TEST_TMPDIR/b" 100
	kvput --config "$BATS_TEST_TMPDIR/cfg.json" abcde0001 "$BATS_TEST_TMPDIR/b"
	run kvls
	assert_success
	[[ "${lines[1]}" == "$long "* ]] || fail "piped: ${lines[1]}"
	run script -qc "kvls --root '$KV_ROOT'" /dev/null
	assert_success
	[[ "$output" == *"org/very-long-model-name-very-long-model-name-v…"* ]] || fail "terminal: $output"
	[[ "$output" != *"$long"* ]]
}

@test "kvls --check knows kvoffd's claim on a tier it bounds, as it knows kvevict's files" {
	local local_tier=$BATS_TEST_TMPDIR/nvme shared=$BATS_TEST_TMPDIR/shared
	mkdir -p "$local_tier" "$shared"
	make_config > "$BATS_TEST_TMPDIR/config.json"
	random_file "$BATS_TEST_TMPDIR/blk" 4096
	kvput --root "$local_tier" --config "$BATS_TEST_TMPDIR/config.json" abcdef01 "$BATS_TEST_TMPDIR/blk"
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	start_kvoffd --tier "local:$local_tier:4M" --tier "shared:$shared" --cpu-bytes 4M --slot-bytes 1M
	[ -f "$local_tier/.kvoffd.lock" ]
	run kvls --root "$local_tier" --check -J
	kill_daemon
	assert_success
	jq -e '.summary.problems == 0' <<<"$output" || fail "$output"
	# Anything else at the root is still foreign.
	: > "$local_tier/.kvoffd.lock.old"
	run kvls --root "$local_tier" --check -J
	assert_failure 1
	jq -e '[.problems[] | select(.problem == "foreign")] | length == 1 and .[0].path == ".kvoffd.lock.old"' \
		<<<"$output" || fail "$output"
}

# big_dirs ROOT MODELDIR: a rank dir of 4,200 top buckets (a block each)
# and a leaf dir of 5,000 blocks, with 40 foreign names of 250 bytes
# among them: each dir takes several getdents reads of the walk's buffer.
big_dirs() {
	/usr/bin/python3 - "$1" "$2" <<'PY'
import os, sys
root, mdir = sys.argv[1], sys.argv[2]
rank = os.path.join(root, mdir + "_r0")
for i in range(4200):
    h = "%03x" % (i % 4096) + "%02x" % (i // 4096) + "%011x" % i
    d = os.path.join(rank, h[:3], h[3:5] + "_g0")
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, h + ".bin"), "w").close()
leaf = os.path.join(rank, "fff", "ee_g1")
os.makedirs(leaf, exist_ok=True)
for i in range(5000):
    open(os.path.join(leaf, "fffee%011x.bin" % i), "w").close()
    if i % 125 == 0:
        open(os.path.join(leaf, "x" * 240 + "%09d" % i), "w").close()
PY
}

@test "dirs of thousands of entries are listed whole on tmpfs, ext4 and FUSE" {
	requires mount mkfs.ext4
	local m=$BATS_TEST_TMPDIR/m img=$BATS_TEST_TMPDIR/ext4.img latfs=$KV_BIN/../latfs/latfs
	local d=$(model_dir "$LLAMA" 1 bfloat16) fs n
	mkdir -p "$m/tmpfs" "$m/ext4" "$m/src" "$m/fuse"
	mount -t tmpfs -o size=256m tmpfs "$m/tmpfs"
	truncate -s 256M "$img"
	mkfs.ext4 -q -F -N 20000 "$img"
	mount -o loop "$img" "$m/ext4" || { umount "$m/tmpfs"; skip "cannot mount a loop ext4"; }
	for fs in tmpfs ext4 src; do
		cp -r "$KV_ROOT/$d" "$m/$fs/"
		big_dirs "$m/$fs" "$d"
	done
	if [ -x "$latfs" ] && [ -c /dev/fuse ] && "$latfs" "$m/src" "$m/fuse" -o delay_us=0; then
		fs="tmpfs ext4 fuse"
	else
		fs="tmpfs ext4"	# FUSE is the case without the short-read rule
	fi
	for f in $fs; do
		for t in 1 2; do
			n=$(kvls --root "$m/$f" --blocks --ndjson --threads "$t" | grep -c '"hash"') || true
			[ "$n" -eq 9200 ] || { umount "$m/tmpfs" "$m/ext4" "$m/fuse" 2>/dev/null; fail "$f, $t threads: $n of 9200 blocks"; }
		done
	done
	umount "$m/tmpfs" "$m/ext4"
	[ "$fs" = "tmpfs ext4" ] || umount "$m/fuse"
}
