#!/usr/bin/env bats
# kvget: blocks come back byte for byte from vLLM's paths, whole or as a
# tail; presence tests answer 0/1; atime is stamped (or not) as asked; a
# damaged block never reaches stdout; --batch reads many in flight.

load test_helper

setup() {
	common_setup
	CFG=$BATS_TEST_TMPDIR/config.json
	make_config Qwen/Qwen3-8B > "$CFG"
	NOBODY_DIR=
}

teardown() {
	kill_daemon
	[ -z "${NOBODY_DIR:-}" ] || rm -rf "$NOBODY_DIR"
	common_teardown
}

model_dir() {
	echo "Qwen_Qwen3-8B_$(py_fingerprint "$CFG")"
}

# vLLM's path for HASH [RANK] [GROUP], from the layout rules alone.
vllm_path() {
	local h=$1 rank=${2:-0} group=${3:-0}
	echo "$KV_ROOT/$(model_dir)_r$rank/${h:0:3}/${h:3:2}_g$group/$h.bin"
}

# put HASH BYTES [RANK]: a random block, kept in $BATS_TEST_TMPDIR/HASH.
put() {
	random_file "$BATS_TEST_TMPDIR/$1" "$2"
	kvput --root "$KV_ROOT" --config "$CFG" --rank "${3:-0}" "$1" "$BATS_TEST_TMPDIR/$1"
}

@test "blocks of many sizes come back byte for byte, to stdout or -o" {
	requires python3
	local n=0 size h
	for size in 0 1 4095 4096 100000 2097152 $((2097152 + 5)); do
		h=$(printf 'a%07x%08x' "$size" "$n")
		put "$h" "$size" $((n % 2))
		kvget --root "$KV_ROOT" --config "$CFG" --rank $((n % 2)) "$h" > "$BATS_TEST_TMPDIR/out"
		cmp "$BATS_TEST_TMPDIR/$h" "$BATS_TEST_TMPDIR/out"
		kvget --model-dir "$(model_dir)" --rank $((n % 2)) -o "$BATS_TEST_TMPDIR/o$n" "$h"
		cmp "$BATS_TEST_TMPDIR/$h" "$BATS_TEST_TMPDIR/o$n"
		kvget --model-dir "$(model_dir)" --rank $((n % 2)) --buffered "$h" |
			cmp - "$BATS_TEST_TMPDIR/$h"
		n=$((n + 1))
	done
	# -o leaves nothing but the file itself.
	[ "$(ls "$BATS_TEST_TMPDIR" | grep -c '^o[0-9]')" -eq "$n" ]
}

@test "a block that vLLM wrote (no checksum xattr) is read as is" {
	requires python3
	local p
	p=$(vllm_path 0123456789abcdef)
	mkdir -p "${p%/*}"
	random_file "$p" 123456
	kvget --config "$CFG" 0123456789abcdef | cmp - "$p"
}

@test "--exists: exit 0 present, 1 absent, no output, atime untouched" {
	requires python3
	put bbbbbb1111 4096
	touch -a -d '2001-02-03 04:05:06' "$(vllm_path bbbbbb1111)"
	before=$(stat -c %X "$(vllm_path bbbbbb1111)")
	run kvget --config "$CFG" --exists bbbbbb1111
	[ "$status" -eq 0 ] && [ -z "$output" ]
	run kvget --config "$CFG" --exists BBBBBB1111
	[ "$status" -eq 0 ]
	run kvget --config "$CFG" --exists bbbbbb2222
	[ "$status" -eq 1 ] && [ -z "$output" ]
	run kvget --config "$CFG" --rank 7 --exists bbbbbb1111
	[ "$status" -eq 1 ]
	[ "$(stat -c %X "$(vllm_path bbbbbb1111)")" -eq "$before" ]
}

@test "a miss exits 1 with a message and no data" {
	requires python3
	run --separate-stderr kvget --config "$CFG" cccccc0000
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[[ $stderr == "kvget: no block cccccc0000 at '$(vllm_path cccccc0000)'" ]] || fail "stderr: $stderr"
	run kvget --config "$CFG" -o "$BATS_TEST_TMPDIR/o" cccccc0000
	[ "$status" -eq 1 ]
	[ ! -e "$BATS_TEST_TMPDIR/o" ]
}

@test "--blocks N --block-bytes B reads the tail as vLLM does" {
	requires python3
	put dddddd0001 $((5 * 4096 + 3 * 4096))
	kvget --config "$CFG" --blocks 3 --block-bytes 4096 dddddd0001 > "$BATS_TEST_TMPDIR/t"
	tail -c $((3 * 4096)) "$BATS_TEST_TMPDIR/dddddd0001" | cmp - "$BATS_TEST_TMPDIR/t"
	kvget --config "$CFG" --blocks 2 --block-bytes 4K dddddd0001 | tail -c 8192 |
		cmp - <(tail -c 8192 "$BATS_TEST_TMPDIR/dddddd0001")
	# A partial run: 2.5 blocks of 1000 bytes, the last 2 wanted.
	put dddddd0002 2500
	kvget --config "$CFG" --blocks 2 --block-bytes 1000 dddddd0002 |
		cmp - <(tail -c 2000 "$BATS_TEST_TMPDIR/dddddd0002")
	kvget --config "$CFG" --blocks 8 --block-bytes 4096 dddddd0001 |
		cmp - "$BATS_TEST_TMPDIR/dddddd0001"
	run --separate-stderr kvget --config "$CFG" --blocks 9 --block-bytes 4096 dddddd0001
	[ "$status" -eq 3 ] && [ -z "$output" ]
	[[ $stderr == *"holds 32768 bytes, fewer than the 36864 asked for"* ]] || fail "stderr: $stderr"
	run kvget --config "$CFG" --blocks 2 dddddd0001
	[ "$status" -eq 2 ]
	run kvget --config "$CFG" --blocks 2 --block-bytes 4096 dddddd0009
	[ "$status" -eq 1 ]
}

@test "--no-touch leaves an old atime alone; a plain get stamps it" {
	requires python3
	put eeeeee0001 65536
	f=$(vllm_path eeeeee0001)
	touch -a -d '2001-02-03 04:05:06' "$f"
	old=$(stat -c %X "$f")
	mtime=$(stat -c %Y "$f")
	kvget --config "$CFG" --no-touch eeeeee0001 > /dev/null
	kvget --config "$CFG" --no-touch --blocks 1 --block-bytes 4096 eeeeee0001 > /dev/null
	[ "$(stat -c %X "$f")" -eq "$old" ]
	kvget --config "$CFG" eeeeee0001 > /dev/null
	[ "$(stat -c %X "$f")" -ge "$(($(date +%s) - 60))" ]
	[ "$(stat -c %Y "$f")" -eq "$mtime" ]
	touch -a -d '2001-02-03 04:05:06' "$f"
	kvget --config "$CFG" --blocks 1 --block-bytes 4096 eeeeee0001 > /dev/null
	[ "$(stat -c %X "$f")" -gt "$old" ]
}

@test "a flipped byte: exit 3, nothing on stdout, the file left in place" {
	requires python3 xattr
	put ffffff0001 $((2 * 1024 * 1024))
	f=$(vllm_path ffffff0001)
	flip_byte "$f" 1000000
	cp "$f" "$BATS_TEST_TMPDIR/damaged"
	run --separate-stderr kvget --config "$CFG" ffffff0001
	[ "$status" -eq 3 ]
	[ -z "$output" ]
	[[ $stderr == "kvget: '$f': checksum mismatch (the file is left in place)" ]] || fail "stderr: $stderr"
	run kvget --config "$CFG" -o "$BATS_TEST_TMPDIR/o" ffffff0001
	[ "$status" -eq 3 ]
	[ ! -e "$BATS_TEST_TMPDIR/o" ]
	cmp "$f" "$BATS_TEST_TMPDIR/damaged"
	# The whole file as a tail is checked too; a shorter tail cannot be.
	run kvget --config "$CFG" --blocks 512 --block-bytes 4096 ffffff0001
	[ "$status" -eq 3 ]
	kvget --config "$CFG" --blocks 1 --block-bytes 4096 ffffff0001 |
		cmp - <(tail -c 4096 "$f")
}

@test "a hash that is not hex is a usage error; a missing root is a runtime error" {
	run --separate-stderr kvget --root "$KV_ROOT" --model-dir m_0123456789ab xyz12345
	[ "$status" -eq 2 ]
	[[ $stderr == "kvget: invalid hash 'xyz12345' (want 5 to 128 hex digits)"* ]]
	run --separate-stderr kvget --root "$BATS_TEST_TMPDIR/nope" --model-dir m_0123456789ab abcdef
	[ "$status" -eq 3 ]
	[ "$stderr" = "kvget: cache root '$BATS_TEST_TMPDIR/nope' does not exist: not mounted, or not made yet?" ]
	run kvget --root "$KV_ROOT" abcdef
	[ "$status" -eq 2 ]
	run kvget --root "$KV_ROOT" --model-dir m_0123456789ab --exists -o x abcdef
	[ "$status" -eq 2 ]
	run kvget --root "$KV_ROOT" --model-dir m_0123456789ab abcdef abcdef
	[ "$status" -eq 2 ]
}

@test "block data is not written to a terminal unless asked" {
	requires python3 script
	put 1234512345 100
	run script -qec "kvget --root '$KV_ROOT' --config '$CFG' 1234512345" /dev/null
	[ "$status" -eq 2 ]
	[[ $output == *"refusing to write block data to a terminal"* ]]
	run script -qec "kvget --root '$KV_ROOT' --config '$CFG' -o - 1234512345 | wc -c" /dev/null
	[ "$status" -eq 0 ]
	[[ $output == *100* ]]
}

@test "a root or bucket user nobody may not read: exit 3, permission denied" {
	requires root setpriv python3
	NOBODY_DIR=$(mktemp -d /tmp/kvget-bats.XXXXXX)
	chmod 0755 "$NOBODY_DIR"
	export KV_ROOT=$NOBODY_DIR/root
	mkdir "$KV_ROOT"
	put 7777700001 8192
	chmod -R a+rX "$KV_ROOT"
	setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$KV_BIN/kvget" ||
		skip "user nobody cannot run $KV_BIN/kvget"
	# Readable: nobody gets the data (and cannot stamp atime: no matter).
	setpriv --reuid=65534 --regid=65534 --clear-groups \
		kvget --model-dir "$(model_dir)" 7777700001 | cmp - "$BATS_TEST_TMPDIR/7777700001"
	chmod 0700 "$KV_ROOT"
	run --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups \
		kvget --model-dir "$(model_dir)" 7777700001
	[ "$status" -eq 3 ]
	[ "$stderr" = "kvget: cannot open '$KV_ROOT': Permission denied" ] || fail "stderr: $stderr"
	chmod 0755 "$KV_ROOT"
	chmod 0700 "$(dirname "$(vllm_path 7777700001)")"
	run --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups \
		kvget --model-dir "$(model_dir)" --exists 7777700001
	[ "$status" -eq 3 ]
	[[ $stderr == kvget:*"Permission denied" ]] || fail "stderr: $stderr"
}

@test "--batch: bare hashes, hits and misses, -o DIR" {
	requires python3 jq
	local i
	for i in 1 2 3; do put "abcab0000$i" $((i * 100000)); done
	printf 'abcab00001\nabcab00009\n\nABCAB00002\nabcab00003\n' > "$BATS_TEST_TMPDIR/in"
	run --separate-stderr kvget --model-dir "$(model_dir)" --batch --qd 2 < "$BATS_TEST_TMPDIR/in"
	[ "$status" -eq 1 ]
	[ "$(jq -s 'length' <<< "$output")" -eq 4 ]
	[ "$(jq -s -c 'map(select(.hit)) | map(.hash) | sort' <<< "$output")" = \
		'["abcab00001","abcab00002","abcab00003"]' ]
	jq -s -e 'map(select(.hash == "abcab00009"))[0] | .hit == false and .line == 2' <<< "$output"
	jq -s -e 'map(select(.hash == "abcab00003"))[0].size_bytes == 300000' <<< "$output"
	# The output dir is made when missing.
	grep -v 09 "$BATS_TEST_TMPDIR/in" |
		kvget --model-dir "$(model_dir)" --batch -o "$BATS_TEST_TMPDIR/out" > /dev/null
	for i in 1 2 3; do cmp "$BATS_TEST_TMPDIR/abcab0000$i" "$BATS_TEST_TMPDIR/out/abcab0000$i.bin"; done
	[ "$(ls -A "$BATS_TEST_TMPDIR/out" | wc -l)" -eq 3 ]
	# --exists in a batch: presence only.
	run kvget --model-dir "$(model_dir)" --batch --exists < "$BATS_TEST_TMPDIR/in"
	[ "$status" -eq 1 ]
	[ "$(jq -s 'map(select(.hit)) | length' <<< "$output")" -eq 3 ]
}

@test "--batch: kvls-style records by path or by fields, bad lines reported" {
	requires python3 jq
	local md
	md=$(model_dir)
	put abcab00011 4096
	put abcab00012 8192 2
	{
		echo "{\"path\":\"${md}_r0/abc/ab_g0/abcab00011.bin\",\"size_bytes\":4096}"
		echo "{\"model_dir\":\"$md\",\"rank\":2,\"group\":0,\"hash\":\"abcab00012\"}"
		echo "{\"path\":\"../../etc/passwd\"}"
		echo 'zzzz not a hash'
		echo '{"hash":"abcab00011"}'
		echo "{\"model_dir\":\"$md\",\"rank\":2,\"hash\":\"abcab00013\"}"
	} > "$BATS_TEST_TMPDIR/in"
	run --separate-stderr kvget --batch < "$BATS_TEST_TMPDIR/in"
	[ "$status" -eq 3 ]
	[ "$(jq -s -c 'map(select(.hit)) | map(.line) | sort' <<< "$output")" = "[1,2]" ]
	[ "$(jq -s -c 'map(select(.error)) | map(.line) | sort' <<< "$output")" = "[3,4,5]" ]
	jq -s -e 'map(select(.line == 6))[0] | .hit == false and (has("error") | not)' <<< "$output"
	[[ $stderr == *"<stdin>:3: not a block path in the cache layout"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"<stdin>:5: no model dir"* ]] || fail "stderr: $stderr"
}

@test "--batch reads what kvls lists, and reports a damaged block" {
	requires python3 jq kvls
	local i
	for i in $(seq 1 12); do put "$(printf 'fedcb%05d' "$i")" $((i * 8192)) $((i % 2)); done
	kvls --blocks --ndjson > "$BATS_TEST_TMPDIR/list"
	[ "$(wc -l < "$BATS_TEST_TMPDIR/list")" -eq 12 ]
	run kvget --batch --qd 4 < "$BATS_TEST_TMPDIR/list"
	[ "$status" -eq 0 ]
	[ "$(jq -s 'map(select(.hit)) | length' <<< "$output")" -eq 12 ]
	f=$(vllm_path fedcb00004)
	flip_byte "$f" 7
	run --separate-stderr kvget --batch < "$BATS_TEST_TMPDIR/list"
	[ "$status" -eq 3 ]
	jq -s -e 'map(select(.hash == "fedcb00004"))[0] | .hit == false and .error == "checksum mismatch"' <<< "$output"
	[ "$(jq -s 'map(select(.hit)) | length' <<< "$output")" -eq 11 ]
	[[ $stderr == *"fedcb00004.bin': checksum mismatch"* ]] || fail "stderr: $stderr"
}

@test "--help and --version" {
	run kvget --help
	[ "$status" -eq 0 ]
	[[ $output == Usage:\ kvget* ]]
	[[ $output == *--exists* && $output == *--no-touch* ]]
	run kvget -V
	[ "$status" -eq 0 ]
	[[ $output == "kvget (kvtools) "* ]]
}

@test "--batch: a record's path and fields must agree; duplicate keys refuse, unknown ones pass" {
	requires python3 jq
	local md
	md=$(model_dir)
	put abcab00021 4096
	put abcab00022 8192 1
	{
		echo "{\"path\":\"${md}_r0/abc/ab_g0/abcab00021.bin\",\"hash\":\"ABCAB00021\",\"model_dir\":\"$md\",\"rank\":0,\"group\":0,\"pins\":3,\"on_disk\":true}"
		echo "{\"path\":\"${md}_r0/abc/ab_g0/abcab00021.bin\",\"hash\":\"abcab00022\"}"
		echo "{\"path\":\"${md}_r1/abc/ab_g0/abcab00022.bin\",\"path\":\"${md}_r1/abc/ab_g0/abcab00022.bin\"}"
		echo "{\"path\":\"${md}_r1/abc/ab_g0/abcab00022.bin\",\"group\":1}"
		echo "{\"path\":\"${md}_r1/abc/ab_g0/abcab00022.bin\",\"model_dir\":\"other_0123456789ab\"}"
		echo "{\"path\":\"${md}_r1/abc/ab_g0/abcab00022.bin\",\"rank\":1,\"size_bytes\":1}"
	} > "$BATS_TEST_TMPDIR/in"
	run --separate-stderr kvget --batch < "$BATS_TEST_TMPDIR/in"
	assert_failure 3
	[ "$(jq -s -c 'map(select(.hit)) | map(.line) | sort' <<< "$output")" = "[1,6]" ]
	[ "$(jq -s -c 'map(select(.error)) | map(.line) | sort' <<< "$output")" = "[2,3,4,5]" ]
	[[ $stderr == *"<stdin>:2: \"path\" and \"hash\" disagree"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"<stdin>:3: invalid JSON: duplicate object key"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"<stdin>:4: \"path\" and \"group\" disagree"* ]] || fail "stderr: $stderr"
	[[ $stderr == *"<stdin>:5: \"path\" and \"model_dir\" disagree"* ]] || fail "stderr: $stderr"
}

# --tier (issue 26): a hierarchy chained in libkv, no daemon.  $KV_ROOT
# is the shared tier; $LOCAL a bounded local one in front of it.
@test "--tier: reads through a bounded local tier to the shared one, copying hits up and the oldest down" {
	local LOCAL=$BATS_TEST_TMPDIR/local h
	mkdir "$LOCAL"
	for h in abcdef0001 abcdef0002 abcdef0003 abcdef0004; do
		put "$h" 300000
	done
	# 700K holds two: the third copied up sends the least recently used down.
	for h in abcdef0001 abcdef0002 abcdef0001 abcdef0003; do
		kvget --tier "local:$LOCAL:700K" --tier "shared:$KV_ROOT" --config "$CFG" "$h" |
			cmp - "$BATS_TEST_TMPDIR/$h"
	done
	run find "$LOCAL" -name '*.bin' -printf '%f\n'
	assert_success
	[ "$(sort <<<"$output" | tr '\n' ' ')" = "abcdef0001.bin abcdef0003.bin " ]
	# Blocks copied up bring their model dir's config.json: a cache root
	# as vLLM and kvls expect it.
	cmp "$LOCAL/$(model_dir)/config.json" "$KV_ROOT/$(model_dir)/config.json"
	kvls --root "$LOCAL" --check
	# Nothing lost: every block still reads, through either tier.
	for h in abcdef0001 abcdef0002 abcdef0003 abcdef0004; do
		kvget --config "$CFG" "$h" | cmp - "$BATS_TEST_TMPDIR/$h"
	done
	run kvget --tier "local:$LOCAL:700K" --tier "shared:$KV_ROOT" --config "$CFG" abcdef0009
	assert_failure 1
	assert_output "kvget: no block abcdef0009 in the tiers '$LOCAL', '$KV_ROOT'"
	# A batch through the chain: hits from either tier, a miss.
	printf '%s\n' abcdef0004 abcdef0003 abcdef0009 |
		kvget --tier "local:$LOCAL:700K" --tier "shared:$KV_ROOT" --config "$CFG" \
			--batch -o "$BATS_TEST_TMPDIR/out" > "$BATS_TEST_TMPDIR/rec" || true
	cmp "$BATS_TEST_TMPDIR/out/abcdef0004.bin" "$BATS_TEST_TMPDIR/abcdef0004"
	cmp "$BATS_TEST_TMPDIR/out/abcdef0003.bin" "$BATS_TEST_TMPDIR/abcdef0003"
	[ "$(grep -c '"hit":true' "$BATS_TEST_TMPDIR/rec")" -eq 2 ]
	[ "$(grep -c '"hit":false' "$BATS_TEST_TMPDIR/rec")" -eq 1 ]
}

@test "--tier: a bounded tier another process keeps the LRU of is refused, naming it; unbounded it may be read" {
	local LOCAL=$BATS_TEST_TMPDIR/local
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	mkdir "$LOCAL"
	put abcdef0001 100000
	start_kvoffd --tier "local:$LOCAL:1M" --tier "shared:$KV_ROOT" --cpu-bytes 1M --slot-bytes 256K
	run kvget --tier "local:$LOCAL:1M" --tier "shared:$KV_ROOT" --config "$CFG" abcdef0001
	assert_failure 3
	assert_output --partial "cannot open '$LOCAL': another process keeps its LRU: lock '.kvoffd.lock' held by pid $DPID (kvoffd"
	# Read only, the daemon's local tier is just a cache root.
	kvget --tier "local:$LOCAL" --config "$CFG" --exists abcdef0001 || [ "$?" -eq 1 ]
	stop_daemon
	# The claim dies with its holder.
	kvget --tier "local:$LOCAL:1M" --tier "shared:$KV_ROOT" --config "$CFG" abcdef0001 |
		cmp - "$BATS_TEST_TMPDIR/abcdef0001"
}

@test "--tier --promote: never copies nothing up, second-hit on the second read in one run" {
	local LOCAL=$BATS_TEST_TMPDIR/local
	mkdir "$LOCAL"
	put abcdef0001 100000
	put abcdef0002 100000
	kvget --tier "local:$LOCAL:1M" --tier "shared:$KV_ROOT" --promote never \
		--config "$CFG" abcdef0001 | cmp - "$BATS_TEST_TMPDIR/abcdef0001"
	[ -z "$(find "$LOCAL" -name '*.bin')" ]
	printf '%s\n' abcdef0002 |
		kvget --tier "local:$LOCAL:1M" --tier "shared:$KV_ROOT" --promote second-hit \
			--config "$CFG" --batch > /dev/null
	[ -z "$(find "$LOCAL" -name '*.bin')" ]
	printf '%s\n' abcdef0002 abcdef0002 |
		kvget --tier "local:$LOCAL:1M" --tier "shared:$KV_ROOT" --promote second-hit \
			--config "$CFG" --batch > /dev/null
	[ "$(find "$LOCAL" -name '*.bin' -printf '%f\n')" = abcdef0002.bin ]
}

@test "--tier: usage errors exit 2 and name the option" {
	local LOCAL=$BATS_TEST_TMPDIR/local
	mkdir "$LOCAL"
	run kvget --tier "local:$LOCAL" --tier "shared:$KV_ROOT" --config "$CFG" abcdef0001
	assert_failure 2
	assert_line "kvget: --tier local:$LOCAL needs a SIZE: only the last tier may be unbounded"
	run kvget --tier "local:$LOCAL:1M" --root "$KV_ROOT" --config "$CFG" abcdef0001
	assert_failure 2
	assert_line "kvget: --tier names the store: drop --root, --daemon and --archive"
	run kvget --tier "shared:$KV_ROOT" --promote never --config "$CFG" abcdef0001
	assert_failure 2
	assert_line "kvget: --promote needs two --tier options or more"
	run kvget --tier "nvme:$LOCAL:1M" --config "$CFG" abcdef0001
	assert_failure 2
	assert_line "kvget: --tier 'nvme:$LOCAL:1M': the kind is local or shared"
	run kvget --tier "local:$LOCAL:1M" --tier "shared:$KV_ROOT" --promote often --config "$CFG" abcdef0001
	assert_failure 2
	assert_line "kvget: invalid --promote 'often' (first-hit, second-hit or never)"
	run kvget --tier "local:$BATS_TEST_TMPDIR/nowhere:1M" --tier "shared:$KV_ROOT" --config "$CFG" abcdef0001
	assert_failure 3
}
