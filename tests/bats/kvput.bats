#!/usr/bin/env bats
# kvput: blocks land whole at the exact path vLLM reads, one at a time or
# in a --batch, and no failure (bad input, full or unreadable storage, a
# killed writer, a kernel without io_uring) leaves a torn block or a temp.

load test_helper

FI_LIB=$KV_BIN/../tests/libfaultinj.so

setup() {
	common_setup
	CFG=$BATS_TEST_TMPDIR/config.json
	make_config meta-llama/Llama-3.1-8B > "$CFG"
	NOBODY_DIR=
}

teardown() {
	[ -z "${NOBODY_DIR:-}" ] || rm -rf "$NOBODY_DIR"
	common_teardown
}

# The model dir vLLM names for $CFG (python3 computes the fingerprint).
model_dir() {
	echo "meta-llama_Llama-3.1-8B_$(py_fingerprint "$CFG")"
}

# vLLM's path for HASH [RANK] [GROUP], from the layout rules alone.
vllm_path() {
	local h=${1,,} rank=${2:-0} group=${3:-0}
	echo "$KV_ROOT/$(model_dir)_r$rank/${h:0:3}/${h:3:2}_g$group/$h.bin"
}

assert_no_temps() {
	local t
	t=$(find "$1" -name '*.tmp')
	[ -z "$t" ] || fail "temp files left: $t"
}

@test "random blocks of many sizes land at vLLM's path, byte for byte" {
	requires python3
	local n=0 size h
	for size in 1 100 4095 4096 65536 2097152 $((2097152 + 17)); do
		h=$(printf '%08xabcdef%016x' "$size" "$n")
		random_file "$BATS_TEST_TMPDIR/p$n" "$size"
		kvput --root "$KV_ROOT" --config "$CFG" --rank $((n % 3)) --group $((n % 2)) \
			"$h" "$BATS_TEST_TMPDIR/p$n"
		cmp "$BATS_TEST_TMPDIR/p$n" "$(vllm_path "$h" $((n % 3)) $((n % 2)))"
		n=$((n + 1))
	done
	# The model dir holds its config.json, and nothing else was made.
	[ -f "$KV_ROOT/$(model_dir)/config.json" ]
	[ "$(find "$KV_ROOT" -type f | wc -l)" -eq $((n + 1)) ]
	assert_no_temps "$KV_ROOT"
}

@test "an upper-case hash is stored under its lower-case name" {
	requires python3
	random_file "$BATS_TEST_TMPDIR/p" 4096
	kvput --root "$KV_ROOT" --config "$CFG" ABCDEF0123456789 "$BATS_TEST_TMPDIR/p"
	cmp "$BATS_TEST_TMPDIR/p" "$(vllm_path abcdef0123456789)"
}

@test "the payload comes from stdin, as - or by default" {
	requires python3
	random_file "$BATS_TEST_TMPDIR/p" 300000
	kvput --root "$KV_ROOT" --config "$CFG" 1111122222 - < "$BATS_TEST_TMPDIR/p"
	cmp "$BATS_TEST_TMPDIR/p" "$(vllm_path 1111122222)"
	cat "$BATS_TEST_TMPDIR/p" | kvput --root "$KV_ROOT" --model-dir "$(model_dir)" 3333344444
	cmp "$BATS_TEST_TMPDIR/p" "$(vllm_path 3333344444)"
	# KV_ROOT stands in for --root.
	: | kvput --model-dir "$(model_dir)" 5555566666
	[ -f "$(vllm_path 5555566666)" ] && [ ! -s "$(vllm_path 5555566666)" ]
}

@test "a block already there is kept and its atime stamped, as upstream's writers do" {
	requires python3 jq
	random_file "$BATS_TEST_TMPDIR/a" 8192
	random_file "$BATS_TEST_TMPDIR/b" 12288
	kvput --root "$KV_ROOT" --config "$CFG" abcde00001 "$BATS_TEST_TMPDIR/a"
	touch -a -d @1000000000 "$(vllm_path abcde00001)"
	run kvput --root "$KV_ROOT" --config "$CFG" abcde00001 "$BATS_TEST_TMPDIR/b"
	[ "$status" -eq 0 ]
	cmp "$BATS_TEST_TMPDIR/a" "$(vllm_path abcde00001)"
	[ "$(stat -c %X "$(vllm_path abcde00001)")" -gt 1000000000 ]
	printf '{"hash":"abcde00001","file":"%s"}\n{"hash":"abcde00003","file":"%s"}\n' \
		"$BATS_TEST_TMPDIR/b" "$BATS_TEST_TMPDIR/b" > "$BATS_TEST_TMPDIR/m"
	run --separate-stderr kvput --root "$KV_ROOT" --config "$CFG" --batch "$BATS_TEST_TMPDIR/m"
	[ "$status" -eq 0 ]
	[ "$(jq -s -c 'sort_by(.line) | map(.existed // false)' <<< "$output")" = '[true,false]' ] ||
		fail "results: $output"
	cmp "$BATS_TEST_TMPDIR/a" "$(vllm_path abcde00001)"
	cmp "$BATS_TEST_TMPDIR/b" "$(vllm_path abcde00003)"
	assert_no_temps "$KV_ROOT"
}

@test "-J: one block's result record, stored, kept or refused, as a batch line's without its line" {
	local path
	path=$(vllm_path abcdef0123)
	path=${path#"$KV_ROOT/"}
	random_file "$BATS_TEST_TMPDIR/p" 100
	run --separate-stderr kvput --config "$CFG" -J abcdef0123 "$BATS_TEST_TMPDIR/p"
	assert_success
	[ "$output" = "{\"hash\":\"abcdef0123\",\"path\":\"$path\",\"size_bytes\":100,\"status\":\"ok\"}" ] ||
		fail "$output"
	run --separate-stderr kvput --config "$CFG" --json abcdef0123 "$BATS_TEST_TMPDIR/p"
	assert_success
	jq -e '.existed == true and .status == "ok" and (has("line") | not)' <<<"$output"
	run --separate-stderr kvput --config "$CFG" -J abcdef0124 "$BATS_TEST_TMPDIR/nope"
	[ "$status" -eq 3 ]
	jq -e '.status == "error" and .hash == "abcdef0124" and (.error | test("No such file"))' <<<"$output"
	run --separate-stderr kvput --config "$CFG" -J --batch < /dev/null
	[ "$status" -eq 2 ]
}

@test "--replace: a put replaces the old block whole, and the checksum follows" {
	requires python3 xattr getfattr
	random_file "$BATS_TEST_TMPDIR/a" 8192
	random_file "$BATS_TEST_TMPDIR/b" 12288
	kvput --root "$KV_ROOT" --config "$CFG" abcde00001 "$BATS_TEST_TMPDIR/a"
	sum_a=$(getfattr --only-values -n user.kv.xxh3 "$(vllm_path abcde00001)")
	[[ $sum_a =~ ^[0-9a-f]{16}$ ]] || fail "user.kv.xxh3 is '$sum_a'"
	kvput --root "$KV_ROOT" --config "$CFG" --fsync --replace abcde00001 "$BATS_TEST_TMPDIR/b"
	cmp "$BATS_TEST_TMPDIR/b" "$(vllm_path abcde00001)"
	sum_b=$(getfattr --only-values -n user.kv.xxh3 "$(vllm_path abcde00001)")
	[[ $sum_b =~ ^[0-9a-f]{16}$ ]] && [ "$sum_a" != "$sum_b" ]
	# The same bytes through the page cache give the same checksum.
	kvput --root "$KV_ROOT" --config "$CFG" --buffered abcde00002 "$BATS_TEST_TMPDIR/b"
	[ "$(getfattr --only-values -n user.kv.xxh3 "$(vllm_path abcde00002)")" = "$sum_b" ]
	assert_no_temps "$KV_ROOT"
}

@test "--batch: a bad line in the middle is reported, the rest land" {
	requires python3 jq
	local md i
	md=$(model_dir)
	for i in 1 2 3 4; do random_file "$BATS_TEST_TMPDIR/p$i" $((i * 65536)); done
	{
		echo "{\"hash\":\"aaaaa00001\",\"file\":\"$BATS_TEST_TMPDIR/p1\"}"
		echo "{\"hash\":\"aaaaa00002\",\"file\":\"$BATS_TEST_TMPDIR/p2\"}"
		echo 'this is not json'
		echo "{\"file\":\"$BATS_TEST_TMPDIR/p1\"}"
		echo "{\"hash\":\"xyzzy00001\",\"file\":\"$BATS_TEST_TMPDIR/p1\"}"
		echo "{\"hash\":\"aaaaa00005\",\"file\":\"$BATS_TEST_TMPDIR/missing\"}"
		echo
		echo "{\"hash\":\"aaaaa00003\",\"file\":\"$BATS_TEST_TMPDIR/p3\"}"
		echo "{\"hash\":\"aaaaa00004\",\"file\":\"$BATS_TEST_TMPDIR/p4\"}"
	} > "$BATS_TEST_TMPDIR/manifest"
	# --model-dir names a model dir that must be there.
	mkdir "$KV_ROOT/$md"
	run --separate-stderr kvput --root "$KV_ROOT" --model-dir "$md" --batch --qd 2 \
		< "$BATS_TEST_TMPDIR/manifest"
	[ "$status" -eq 3 ]
	for i in 1 2 3 4; do cmp "$BATS_TEST_TMPDIR/p$i" "$(vllm_path aaaaa0000$i)"; done
	[ ! -e "$(vllm_path aaaaa00005)" ]
	# One record per non-blank line: 4 ok, 4 errors naming their line.
	[ "$(jq -s 'length' <<< "$output")" -eq 8 ]
	[ "$(jq -s 'map(select(.status == "ok")) | length' <<< "$output")" -eq 4 ]
	[ "$(jq -s -c '[.[] | select(.status == "error") | .line] | sort' <<< "$output")" = "[3,4,5,6]" ]
	jq -s -e 'map(select(.hash == "aaaaa00004"))[0] | .size_bytes == 262144 and
		.path == "'"${md}_r0/aaa/aa_g0/aaaaa00004.bin"'"' <<< "$output"
	jq -s -e 'map(select(.line == 6))[0].error | test("No such file")' <<< "$output"
	[[ $stderr == *"<stdin>:3: invalid JSON"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"<stdin>:5: invalid hash 'xyzzy00001'"* ]] || fail "stderr: $stderr"
	assert_no_temps "$KV_ROOT"
}

@test "--batch: data_b64 payloads, per-line rank and group, a manifest file" {
	requires python3 jq
	random_file "$BATS_TEST_TMPDIR/p" 70000
	b64=$(base64 -w0 "$BATS_TEST_TMPDIR/p")
	{
		echo "{\"hash\":\"bbbbb00001\",\"data_b64\":\"$b64\"}"
		echo "{\"hash\":\"bbbbb00002\",\"data_b64\":\"$(printf 'hi' | base64)\",\"rank\":3,\"group\":2}"
		echo "{\"hash\":\"bbbbb00003\",\"data_b64\":\"\"}"
		echo "{\"hash\":\"bbbbb00004\",\"data_b64\":\"not base64!\"}"
		echo "{\"hash\":\"bbbbb00005\",\"data_b64\":\"aGk=\",\"rank\":-1}"
		echo "{\"hash\":\"bbbbb00006\",\"data_b64\":\"aGk=\",\"file\":\"$BATS_TEST_TMPDIR/p\"}"
	} > "$BATS_TEST_TMPDIR/manifest"
	run --separate-stderr kvput --root "$KV_ROOT" --config "$CFG" --batch "$BATS_TEST_TMPDIR/manifest"
	[ "$status" -eq 3 ]
	cmp "$BATS_TEST_TMPDIR/p" "$(vllm_path bbbbb00001)"
	[ "$(cat "$(vllm_path bbbbb00002 3 2)")" = hi ]
	[ -f "$(vllm_path bbbbb00003)" ] && [ ! -s "$(vllm_path bbbbb00003)" ]
	[ "$(jq -s -c '[.[] | select(.status == "error") | .line] | sort' <<< "$output")" = "[4,5,6]" ]
	[[ $stderr == *"manifest:4: invalid \"data_b64\""* ]] || fail "stderr: $stderr"
	# All good: exit 0; an empty manifest is all good too.
	echo "{\"hash\":\"bbbbb00007\",\"data_b64\":\"aGk=\"}" |
		kvput --root "$KV_ROOT" --config "$CFG" --batch -
	run kvput --root "$KV_ROOT" --config "$CFG" --batch < /dev/null
	[ "$status" -eq 0 ] && [ -z "$output" ]
}

@test "--batch keeps many blocks in flight and still lands every one" {
	requires python3 jq
	local i
	for i in $(seq 1 40); do
		random_file "$BATS_TEST_TMPDIR/p$i" $(( (i % 5) * 4096 + (i % 3) * 1000 + 1 ))
		printf '{"hash":"ccccc%05d","file":"%s"}\n' "$i" "$BATS_TEST_TMPDIR/p$i"
	done > "$BATS_TEST_TMPDIR/manifest"
	run --separate-stderr kvput --root "$KV_ROOT" --config "$CFG" --batch --qd 16 \
		"$BATS_TEST_TMPDIR/manifest"
	[ "$status" -eq 0 ]
	[ "$(jq -s 'map(select(.status == "ok")) | length' <<< "$output")" -eq 40 ]
	for i in $(seq 1 40); do
		cmp "$BATS_TEST_TMPDIR/p$i" "$(vllm_path "$(printf 'ccccc%05d' "$i")")"
	done
	assert_no_temps "$KV_ROOT"
}

@test "short io_uring writes are resubmitted, in single puts and batches" {
	requires python3
	[ -f "$FI_LIB" ] || skip "no $FI_LIB (make all builds it)"
	random_file "$BATS_TEST_TMPDIR/p" $((1024 * 1024))
	env LD_PRELOAD="$FI_LIB" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		KVFI_SHORT=uring_write:half:count=3 KVFI_LOG="$BATS_TEST_TMPDIR/fi.log" \
		kvput --root "$KV_ROOT" --config "$CFG" ddddd00001 "$BATS_TEST_TMPDIR/p"
	[ "$(grep -c . "$BATS_TEST_TMPDIR/fi.log")" -eq 3 ]
	cmp "$BATS_TEST_TMPDIR/p" "$(vllm_path ddddd00001)"
	for i in 2 3 4 5; do
		printf '{"hash":"ddddd0000%d","file":"%s"}\n' "$i" "$BATS_TEST_TMPDIR/p"
	done | env LD_PRELOAD="$FI_LIB" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		KVFI_SHORT=uring_write:half KVFI_LOG="$BATS_TEST_TMPDIR/fi2.log" \
		kvput --root "$KV_ROOT" --config "$CFG" --batch --qd 4 > /dev/null
	[ -s "$BATS_TEST_TMPDIR/fi2.log" ]
	for i in 2 3 4 5; do cmp "$BATS_TEST_TMPDIR/p" "$(vllm_path ddddd0000$i)"; done
	assert_no_temps "$KV_ROOT"
}

@test "without io_uring (old kernel, sandbox) puts still land whole" {
	requires python3
	[ -f "$FI_LIB" ] || skip "no $FI_LIB (make all builds it)"
	random_file "$BATS_TEST_TMPDIR/p" $((2 * 1024 * 1024))
	LD_PRELOAD="$FI_LIB" KVFI_NO_URING=1 ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		kvput --root "$KV_ROOT" --config "$CFG" --fsync eeeee00001 "$BATS_TEST_TMPDIR/p"
	cmp "$BATS_TEST_TMPDIR/p" "$(vllm_path eeeee00001)"
	printf '{"hash":"eeeee00002","file":"%s"}\n' "$BATS_TEST_TMPDIR/p" |
		LD_PRELOAD="$FI_LIB" KVFI_NO_URING=1 ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		kvput --root "$KV_ROOT" --config "$CFG" --batch > /dev/null
	cmp "$BATS_TEST_TMPDIR/p" "$(vllm_path eeeee00002)"
}

@test "a hash that is not hex is a usage error" {
	random_file "$BATS_TEST_TMPDIR/p" 10
	for h in xyz12345 abc 12345678g "" "../../etc"; do
		run --separate-stderr kvput --root "$KV_ROOT" --config "$CFG" "$h" "$BATS_TEST_TMPDIR/p"
		[ "$status" -eq 2 ] || fail "hash '$h': exit $status"
		[[ $stderr == "kvput: invalid hash '$h' (want 5 to 128 hex digits)"* ]] ||
			fail "stderr: $stderr"
	done
	[ -z "$(ls -A "$KV_ROOT")" ]
}

@test "usage errors: model dir options, arguments, --qd" {
	random_file "$BATS_TEST_TMPDIR/p" 10
	run kvput --root "$KV_ROOT" abcde "$BATS_TEST_TMPDIR/p"
	[ "$status" -eq 2 ]
	run kvput --root "$KV_ROOT" --config "$CFG" --model-dir x_0123456789ab abcde
	[ "$status" -eq 2 ]
	run --separate-stderr kvput --root "$KV_ROOT" --model-dir not-a-model-dir abcde "$BATS_TEST_TMPDIR/p"
	[ "$status" -eq 2 ]
	[[ $stderr == *"invalid --model-dir 'not-a-model-dir'"* ]]
	run kvput --root "$KV_ROOT" --config "$CFG"
	[ "$status" -eq 2 ]
	run kvput --root "$KV_ROOT" --config "$CFG" abcde a b
	[ "$status" -eq 2 ]
	run kvput --root "$KV_ROOT" --config "$CFG" --batch --qd 0
	[ "$status" -eq 2 ]
	run kvput --root "$KV_ROOT" --config "$CFG" --rank -1 abcde "$BATS_TEST_TMPDIR/p"
	[ "$status" -eq 2 ]
	[ -z "$(ls -A "$KV_ROOT")" ]
}

@test "a missing root, payload or config is a runtime error with the reason" {
	random_file "$BATS_TEST_TMPDIR/p" 10
	run --separate-stderr kvput --root "$BATS_TEST_TMPDIR/nope" --config "$CFG" abcde "$BATS_TEST_TMPDIR/p"
	[ "$status" -eq 3 ]
	[ "$stderr" = "kvput: cache root '$BATS_TEST_TMPDIR/nope' does not exist: not mounted, or not made yet?" ]
	run --separate-stderr kvput --root "$KV_ROOT" --config "$CFG" abcde "$BATS_TEST_TMPDIR/nope"
	[ "$status" -eq 3 ]
	[ "$stderr" = "kvput: cannot read '$BATS_TEST_TMPDIR/nope': No such file or directory" ]
	run --separate-stderr kvput --root "$KV_ROOT" --config "$BATS_TEST_TMPDIR/nope.json" abcde "$BATS_TEST_TMPDIR/p"
	[ "$status" -eq 3 ]
	[[ $stderr == "kvput: cannot open '$BATS_TEST_TMPDIR/nope.json'"* ]]
	echo '{"model_name": "x"' > "$BATS_TEST_TMPDIR/bad.json"
	run --separate-stderr kvput --root "$KV_ROOT" --config "$BATS_TEST_TMPDIR/bad.json" abcde "$BATS_TEST_TMPDIR/p"
	[ "$status" -eq 3 ]
	[[ $stderr == "kvput: invalid config '$BATS_TEST_TMPDIR/bad.json'"* ]]
	[ -z "$(find "$KV_ROOT" -name '*.bin')" ]
}

@test "a root user nobody may not write to: exit 3, permission denied, nothing left" {
	requires root setpriv python3
	NOBODY_DIR=$(mktemp -d /tmp/kvput-bats.XXXXXX)
	chmod 0755 "$NOBODY_DIR"
	mkdir "$NOBODY_DIR/root"
	random_file "$NOBODY_DIR/p" 8192
	chmod 0644 "$NOBODY_DIR/p"
	cp "$CFG" "$NOBODY_DIR/config.json" && chmod 0644 "$NOBODY_DIR/config.json"
	setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$KV_BIN/kvput" ||
		skip "user nobody cannot run $KV_BIN/kvput"
	run --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups \
		kvput --root "$NOBODY_DIR/root" --config "$NOBODY_DIR/config.json" abcde11111 "$NOBODY_DIR/p"
	[ "$status" -eq 3 ]
	[[ $stderr == kvput:*"Permission denied"* ]] || fail "stderr: $stderr"
	# A model dir that exists but whose rank dir nobody may create.
	KV_ROOT=$NOBODY_DIR/root kvput --config "$CFG" abcde22222 "$NOBODY_DIR/p"
	run --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups \
		kvput --root "$NOBODY_DIR/root" --config "$NOBODY_DIR/config.json" --rank 1 abcde11111 "$NOBODY_DIR/p"
	[ "$status" -eq 3 ]
	[[ $stderr == "kvput: cannot store '$NOBODY_DIR/root/"*"_r1/abc/de_g0/abcde11111.bin': Permission denied" ]] ||
		fail "stderr: $stderr"
	[ -z "$(find "$NOBODY_DIR/root" -name '*.tmp' -o -name 'abcde11111*')" ]
}

@test "a full filesystem: exit 3, no partial block, no temp left" {
	requires python3
	mount_tmpfs 1m
	export KV_ROOT=$MNT
	random_file "$BATS_TEST_TMPDIR/small" 4096
	random_file "$BATS_TEST_TMPDIR/big" $((2 * 1024 * 1024))
	kvput --config "$CFG" fffff00001 "$BATS_TEST_TMPDIR/small"
	run --separate-stderr kvput --config "$CFG" --replace fffff00001 "$BATS_TEST_TMPDIR/big"
	[ "$status" -eq 3 ]
	[[ $stderr == "kvput: cannot store "*": No space left on device" ]] || fail "stderr: $stderr"
	cmp "$BATS_TEST_TMPDIR/small" "$(vllm_path fffff00001)"
	run kvput --config "$CFG" fffff00002 "$BATS_TEST_TMPDIR/big"
	[ "$status" -eq 3 ]
	[ ! -e "$(vllm_path fffff00002)" ]
	# In a batch the big one fails alone; the space it took is given back.
	{
		printf '{"hash":"fffff00003","file":"%s"}\n' "$BATS_TEST_TMPDIR/big"
		printf '{"hash":"fffff00004","file":"%s"}\n' "$BATS_TEST_TMPDIR/small"
	} | { run kvput --config "$CFG" --batch --qd 1; [ "$status" -eq 3 ]; }
	[ ! -e "$(vllm_path fffff00003)" ]
	cmp "$BATS_TEST_TMPDIR/small" "$(vllm_path fffff00004)"
	assert_no_temps "$MNT"
}

@test "a writer killed mid-input leaves no torn block and the old one whole" {
	requires python3
	random_file "$BATS_TEST_TMPDIR/old" 65536
	random_file "$BATS_TEST_TMPDIR/new" $((4 * 1024 * 1024))
	kvput --root "$KV_ROOT" --config "$CFG" 9999900001 "$BATS_TEST_TMPDIR/old"
	mkfifo "$BATS_TEST_TMPDIR/fifo"
	kvput --root "$KV_ROOT" --config "$CFG" --replace 9999900001 - < "$BATS_TEST_TMPDIR/fifo" &
	pid=$!
	kvput --root "$KV_ROOT" --config "$CFG" 9999900002 - < "$BATS_TEST_TMPDIR/fifo" &
	pid2=$!
	exec 8> "$BATS_TEST_TMPDIR/fifo"
	# More than a pipe holds: when this returns the writers are mid-read.
	head -c $((1024 * 1024)) "$BATS_TEST_TMPDIR/new" >&8
	kill -9 "$pid" "$pid2"
	wait "$pid" || true
	wait "$pid2" || true
	exec 8>&-
	cmp "$BATS_TEST_TMPDIR/old" "$(vllm_path 9999900001)"
	[ ! -e "$(vllm_path 9999900002)" ]
	# Only whole blocks carry the .bin name; a temp may remain.
	[ "$(find "$KV_ROOT" -name '*.bin' | wc -l)" -eq 1 ]
}

@test "--help and --version" {
	run kvput --help
	[ "$status" -eq 0 ]
	[[ $output == Usage:\ kvput* ]]
	[[ $output == *--batch* && $output == *--qd* ]]
	run kvput --version
	[ "$status" -eq 0 ]
	[[ $output == "kvput (kvtools) "* ]]
}

@test "--batch: a record's path and fields must agree; duplicate keys refuse, unknown ones pass" {
	requires python3 jq
	local md i
	md=$(model_dir)
	for i in 1 2; do random_file "$BATS_TEST_TMPDIR/p$i" $((i * 4096)); done
	{
		echo "{\"hash\":\"aaaaa00001\",\"file\":\"$BATS_TEST_TMPDIR/p1\",\"path\":\"${md}_r0/aaa/aa_g0/aaaaa00001.bin\",\"atime_ns\":5,\"pins\":0}"
		echo "{\"hash\":\"aaaaa00002\",\"file\":\"$BATS_TEST_TMPDIR/p2\",\"path\":\"${md}_r0/aaa/aa_g0/aaaaa00009.bin\"}"
		echo "{\"hash\":\"aaaaa00003\",\"hash\":\"aaaaa00004\",\"file\":\"$BATS_TEST_TMPDIR/p2\"}"
		echo "{\"path\":\"${md}_r1/aaa/aa_g0/aaaaa00005.bin\",\"rank\":0,\"file\":\"$BATS_TEST_TMPDIR/p2\"}"
		echo "{\"path\":\"${md}_r2/aaa/aa_g1/aaaaa00006.bin\",\"file\":\"$BATS_TEST_TMPDIR/p2\"}"
	} > "$BATS_TEST_TMPDIR/manifest"
	mkdir "$KV_ROOT/$md"
	run --separate-stderr kvput --root "$KV_ROOT" --model-dir "$md" --batch \
		"$BATS_TEST_TMPDIR/manifest"
	assert_failure 3
	# Records come as blocks finish.
	[ "$(jq -s -c '[.[] | select(.status == "ok") | .line] | sort' <<< "$output")" = "[1,5]" ]
	[ "$(jq -s -c '[.[] | select(.status == "error") | .line] | sort' <<< "$output")" = "[2,3,4]" ]
	cmp "$BATS_TEST_TMPDIR/p1" "$(vllm_path aaaaa00001)"
	cmp "$BATS_TEST_TMPDIR/p2" "$(vllm_path aaaaa00006 2 1)"
	[ ! -e "$(vllm_path aaaaa00002)" ] && [ ! -e "$(vllm_path aaaaa00009)" ]
	[ ! -e "$(vllm_path aaaaa00003)" ] && [ ! -e "$(vllm_path aaaaa00005 1)" ]
	[[ $stderr == *"manifest:2: \"path\" and \"hash\" disagree"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"manifest:3: invalid JSON: duplicate object key"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"manifest:4: \"path\" and \"rank\" disagree"* ]] || fail "stderr: $stderr"
}

@test "--model-dir must name a model dir that is there; --config makes one" {
	random_file "$BATS_TEST_TMPDIR/b" 4096
	run --separate-stderr kvput --model-dir meta-llama_Llama-3.1-8B_0123456789ab --rank 1 \
		abcde00001 "$BATS_TEST_TMPDIR/b"
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"model dir 'meta-llama_Llama-3.1-8B_0123456789ab' does not exist"*"--config"* ]] ||
		fail "stderr: $stderr"
	[ -z "$(ls -A "$KV_ROOT")" ] || fail "left behind: $(ls -A "$KV_ROOT")"
	kvput --config "$CFG" abcde00001 "$BATS_TEST_TMPDIR/b"
	run kvput --model-dir "$(model_dir)" --rank 1 abcde00002 "$BATS_TEST_TMPDIR/b"
	assert_success
}

@test "a model name too long for its rank dir is refused before anything is made" {
	requires python3
	# 240 bytes: the model dir (253) fits a name, its rank dir (256) does not.
	make_config "$(printf 'm%.0s' $(seq 240))" > "$BATS_TEST_TMPDIR/long.json"
	random_file "$BATS_TEST_TMPDIR/b" 4096
	run --separate-stderr kvput --config "$BATS_TEST_TMPDIR/long.json" abcde00001 "$BATS_TEST_TMPDIR/b"
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"too long"*"nothing was created"* ]] || fail "stderr: $stderr"
	[ -z "$(ls -A "$KV_ROOT")" ] || fail "left behind: $(ls -A "$KV_ROOT")"
}
