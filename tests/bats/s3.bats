#!/usr/bin/env bats
# The programs on S3 buckets: a real server (Ceph's RADOS Gateway, started
# once for this file), filled as vLLM's object tier fills one, driven with
# the built kvput, kvget, kvls and kvevict, through throttling, resets and
# bad credentials.

load test_helper
load s3_server

setup_file() { s3_setup_file; }
teardown_file() { s3_teardown_file; }

setup() {
	common_setup
	s3_requires aws boto3 jq
	# A bucket per test: tests cannot see each other's objects.
	B=kv$(printf '%s' "$BATS_TEST_NAME" | md5sum | cut -c1-12)
	s3_mkbucket "$B"
	CFG=$BATS_TEST_TMPDIR/config.json
	make_config meta-llama/Llama-3.1-8B > "$CFG"
	MD=meta-llama_Llama-3.1-8B_$(py_fingerprint "$CFG")
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	kill_daemon
	s3_proxy_stop
	common_teardown
}

# keys [PREFIX]: every key in the bucket, sorted.
keys() {
	s3_aws s3api list-objects-v2 --bucket "$B" ${1:+--prefix "$1"} --output json |
		jq -r '.Contents // [] | .[].Key' | sort
}

# block_keys [PREFIX]: the keys of blocks, not the use journals that
# kvget, kvwatch and the vLLM tier leave under .kvwatch/.
block_keys() {
	keys "$@" | grep -v '/\.kvwatch/'
}

# The key vLLM's obj tier reads for block HASH of rank 0 group 0 under PREFIX.
vllm_key() {
	local prefix=$1 hash=$2
	printf '%s/%s_r0/%s/%s_g0/%s.bin' "${prefix:+$prefix/}" "$MD" "${hash:0:3}" "${hash:3:2}" "$hash"
}

# ended PID: whether process PID has ended.
ended() {
	! kill -0 "$1" 2>/dev/null
}

# finish CMD...: run sets status and output, CMD run in the background
# and awaited with wait_for's bound, for a program that may never end.
finish() {
	local pid
	"$@" > "$BATS_TEST_TMPDIR/finish.out" 2>&1 &
	pid=$!
	wait_for ended "$pid" || { kill -9 "$pid"; return 1; }
	status=0
	wait "$pid" || status=$?
	output=$(cat "$BATS_TEST_TMPDIR/finish.out")
}

# peak_kib FILE: the peak RSS /usr/bin/time -f %M wrote to FILE, in KiB.
peak_kib() {
	tail -n 1 "$1"
}

@test "s3: kvput writes the key vLLM reads, its xxh3 in metadata; kvget reads it back" {
	head -c 20000 /dev/urandom > "$BATS_TEST_TMPDIR/a"
	run kvput --root "s3://$B/fleet" --config "$CFG" 3fa9c04e51d2b7a8 "$BATS_TEST_TMPDIR/a"
	assert_success
	# vLLM's key: PREFIX, then "/" + the block path: a doubled slash.
	run keys
	assert_output "$(vllm_key fleet 3fa9c04e51d2b7a8)"
	[[ $output == fleet//meta-llama_* ]]
	s3_aws s3api head-object --bucket "$B" --key "$(vllm_key fleet 3fa9c04e51d2b7a8)" > head.json
	jq -e '.Metadata["kv-xxh3"] | test("^[0-9a-f]{16}$")' head.json
	kvget --root "s3://$B/fleet" --config "$CFG" -o "$BATS_TEST_TMPDIR/b" 3fa9c04e51d2b7a8
	cmp "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"
	# No config.json object: vLLM writes none on a bucket, nor does kvput
	# (kvget's hit is a use, in the node's journal object).
	run block_keys
	[ "${#lines[@]}" -eq 1 ]
}

@test "s3: kvget --tier reads a bucket through a bounded local tier, copying hits up" {
	local h
	mkdir "$BATS_TEST_TMPDIR/local"
	for h in abcde00001 abcde00002 abcde00003; do
		head -c 300000 /dev/urandom > "$BATS_TEST_TMPDIR/$h"
		kvput --root "s3://$B/fleet" --config "$CFG" "$h" "$BATS_TEST_TMPDIR/$h"
	done
	for h in abcde00001 abcde00002 abcde00003 abcde00003; do
		kvget --tier "local:$BATS_TEST_TMPDIR/local:700K" --tier "shared:s3://$B/fleet" \
			--config "$CFG" "$h" | cmp - "$BATS_TEST_TMPDIR/$h"
	done
	# Two fit; the oldest went back down, where the bucket has it already.
	run find "$BATS_TEST_TMPDIR/local" -name '*.bin' -printf '%f\n'
	[ "$(sort <<<"$output" | tr '\n' ' ')" = "abcde00002.bin abcde00003.bin " ]
	run keys
	[ "${#lines[@]}" -eq 3 ]
	run kvget --tier "local:$BATS_TEST_TMPDIR/local:700K" --tier "shared:s3://$B/fleet:1G" \
		--config "$CFG" abcde00001
	assert_failure 2
	assert_output --partial "a bucket is not bounded by a SIZE"
}

@test "s3: kvoffd keeps a bounded local tier in front of a bucket: the oldest move down, every block reads back, and again after a restart" {
	local h hs="abcde00001 abcde00002 abcde00003 abcde00004 abcde00005 abcde00006"
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	mkdir "$BATS_TEST_TMPDIR/local"
	start_kvoffd --tier "local:$BATS_TEST_TMPDIR/local:700K" --tier "shared:s3://$B/fleet" \
		--cpu-bytes 1M --slot-bytes 512K --write-threads 2 \
		--events "$BATS_TEST_TMPDIR/events" --metrics-file "$BATS_TEST_TMPDIR/metrics"
	for h in $hs; do
		head -c 300000 /dev/urandom > "$BATS_TEST_TMPDIR/$h"
		kvput --daemon "$SOCK" --model-dir "$MD" "$h" "$BATS_TEST_TMPDIR/$h"
	done
	# SIGTERM writes RAM's blocks behind; the local tier keeps two.
	stop_daemon
	[ "$DRC" -eq 0 ]
	run find "$BATS_TEST_TMPDIR/local" -name '*.bin'
	[ "${#lines[@]}" -le 2 ]
	# The rest went into the bucket at the keys vLLM's obj tier reads.
	run keys
	[ "${#lines[@]}" -ge 4 ]
	for h in $hs; do
		[ -e "$(find "$BATS_TEST_TMPDIR/local" -name "$h.bin")" ] && continue
		grep -qxF "$(vllm_key fleet "$h")" <<<"$output" || fail "$h in neither tier"
		kvget --root "s3://$B/fleet" --model-dir "$MD" "$h" | cmp - "$BATS_TEST_TMPDIR/$h"
	done
	grep -q '"event":"BlockStored".*"tier":"fs"' "$BATS_TEST_TMPDIR/events"
	grep -q '^kv_offload_tier_demotions_total{tier="0",kind="local"} [1-9]' "$BATS_TEST_TMPDIR/metrics"
	# A restart lists the bucket and reads every block through it.
	start_kvoffd --tier "local:$BATS_TEST_TMPDIR/local:700K" --tier "shared:s3://$B/fleet" \
		--cpu-bytes 1M --slot-bytes 512K
	for h in $hs; do
		kvget --daemon "$SOCK" --model-dir "$MD" "$h" | cmp - "$BATS_TEST_TMPDIR/$h"
	done
	kvoffd --stats "$SOCK" > stats.json
	jq -e '.tiers[1].hits >= 1 and .tiers[1].kind == "shared"' stats.json
	stop_daemon
	grep -q "tier 1, shared, s3://$B/fleet: [4-6] blocks" "$BATS_TEST_TMPDIR/kvoffd.log"
	# --root takes a bucket as the one tier below RAM.
	start_kvoffd --root "s3://$B/fleet" --cpu-bytes 1M --slot-bytes 512K
	h=$(basename "$(block_keys | head -1)" .bin)
	kvget --daemon "$SOCK" --model-dir "$MD" "$h" | cmp - "$BATS_TEST_TMPDIR/$h"
	stop_daemon
	[ "$DRC" -eq 0 ]
	# A bucket has no SIZE, for kvoffd as for kvget.
	run kvoffd --socket "$SOCK" --cpu-bytes 1M --tier "local:$BATS_TEST_TMPDIR/local:700K" \
		--tier "shared:s3://$B/fleet:1G"
	assert_failure 2
	assert_output --partial "a bucket is not bounded by a SIZE"
}

# slow_bucket_offd H...: blocks H... in the bucket (3,000 bytes each) as
# another node's writer leaves them, and kvoffd over the bucket behind the
# fault proxy holding each request 200 ms: asked one after another, no
# two requests overlap.  HS gets the hashes as a Python list; OFFD_EXTRA
# holds more kvoffd options.
slow_bucket_offd() {
	local h
	HS=
	for h in "$@"; do
		head -c 3000 /dev/urandom > "$h"
		kvput --root "s3://$B/fleet" --config "$CFG" "$h" "$h"
		HS+="${HS:+, }'$h'"
	done
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	s3_proxy_start --delay-ms 200
	AWS_ENDPOINT_URL=$S3_PROXY_URL start_kvoffd --root "s3://$B/fleet" --cpu-bytes 1M \
		--slot-bytes 512K ${OFFD_EXTRA:-}
}

# kvtools_run CODE: CODE under Debian's python3 with this tree's kvtools.
kvtools_run() {
	run env PYTHONPATH="$BATS_TEST_DIRNAME/../../python" KVTOOLS_LIBKV="$KV_BIN/../libkv.so" \
		/usr/bin/python3 -c "import kvtools
$1"
}

# at_once_at_least METHOD N: the proxy held N or more METHOD requests at once.
at_once_at_least() {
	run jq -r ".inflight_max_$1 // 0" "$S3_PROXY_STATS"
	[ "$output" -ge "$2" ] || fail "at most $output $1 requests at once: $(cat "$S3_PROXY_LOG")"
}

@test "s3: kvoffd asks a bucket about a batch's blocks with their HEADs in flight together" {
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	slow_bucket_offd abcdef01 abcdef02 abcdef03 abcdef04 abcdef05 abcdef06 abcdef07 abcdef08
	# abcdef0f is nowhere.
	kvtools_run "
with kvtools.connect('$SOCK') as c:
    print(c.has_many('$MD', [$HS, 'abcdef0f']))"
	[ "$status" -eq 0 ] || fail "$output"
	assert_output "[2, 2, 2, 2, 2, 2, 2, 2, 0]"
	at_once_at_least HEAD 4
	stop_daemon
	[ "$DRC" -eq 0 ]
}

@test "s3: kvoffd reads a batch's blocks through from a bucket with their GETs in flight together" {
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	slow_bucket_offd abcdef11 abcdef12 abcdef13 abcdef14 abcdef15 abcdef16 abcdef17 abcdef18
	# A batch LOOKUP answers EAGAIN for each, and the client looks each
	# up alone, one after another: the daemon has them in flight already.
	kvtools_run "
hs = [$HS, 'abcdef1f']
with kvtools.connect('$SOCK') as c:
    got = c.get_many('$MD', hs)
print([g == open(h, 'rb').read() for g, h in zip(got[:-1], hs)], got[-1])"
	[ "$status" -eq 0 ] || fail "$output"
	assert_output "[True, True, True, True, True, True, True, True] None"
	at_once_at_least GET 4
	stop_daemon
	[ "$DRC" -eq 0 ]
}

@test "s3: kvoffd writes blocks behind to a bucket with their PUTs in flight together" {
	local h
	OFFD_EXTRA="--write-policy always --cpu-bytes 64M" slow_bucket_offd
	for h in abcdef21 abcdef22 abcdef23 abcdef24 abcdef25 abcdef26 abcdef27 abcdef28; do
		head -c 3000 /dev/urandom > "$h"
		printf '{"hash":"%s","file":"%s"}\n' "$h" "$BATS_TEST_TMPDIR/$h"
	done > manifest
	run kvput --daemon "$SOCK" --model-dir "$MD" --batch manifest
	assert_success
	# SIGTERM writes behind what is left, then exits 0.
	stop_daemon
	[ "$DRC" -eq 0 ]
	at_once_at_least PUT 4
	for h in abcdef21 abcdef28; do
		kvget --root "s3://$B/fleet" --model-dir "$MD" "$h" | cmp - "$h"
	done
	run block_keys
	[ "${#lines[@]}" -eq 8 ] || fail "$output"
}

# move_through_proxy PROXY_OPTION...: 40 blocks of 10,000 bytes (HS) put
# through kvoffd with RAM for 16 and a local tier for 4 in front of the
# bucket, the bucket behind the fault proxy; five of them are in the
# bucket already, as another node wrote them.  One worker, so that no two
# moves would overlap one at a time.  Ends with the daemon stopped
# (SIGTERM writes RAM's blocks behind), MOVED and WRITTEN from its metrics,
# and every block whole in one tier or the other.
move_through_proxy() {
	local h
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	mkdir "$BATS_TEST_TMPDIR/local"
	HS=
	for h in $(seq -f 'abcd%04g' 1 40); do
		head -c 10000 /dev/urandom > "$h"
		printf '{"hash":"%s","file":"%s"}\n' "$h" "$BATS_TEST_TMPDIR/$h"
		HS+=" $h"
	done > manifest
	head -5 manifest > first
	kvput --root "s3://$B/fleet" --config "$CFG" --batch first
	s3_proxy_start "$@"
	AWS_ENDPOINT_URL=$S3_PROXY_URL start_kvoffd --tier "local:$BATS_TEST_TMPDIR/local:40K" \
		--tier "shared:s3://$B/fleet" --cpu-bytes 256K --slot-bytes 16K --write-threads 1 \
		--metrics-file "$BATS_TEST_TMPDIR/metrics"
	run kvput --daemon "$SOCK" --model-dir "$MD" --batch manifest
	assert_success
	stop_daemon
	[ "$DRC" -eq 0 ]
	MOVED=$(awk '/^kv_offload_tier_demotions_total\{tier="0"/ { print $2 }' "$BATS_TEST_TMPDIR/metrics")
	WRITTEN=$(awk '/^kv_offload_tier_writes_total\{tier="1"/ { print $2 }' "$BATS_TEST_TMPDIR/metrics")
	grep -q '^kv_offload_tier_drops_total{tier="0",kind="local"} 0$' "$BATS_TEST_TMPDIR/metrics"
	[ "$(find "$BATS_TEST_TMPDIR/local" -name '*.bin' | wc -l)" -le 4 ]
	run keys
	for h in $HS; do
		[ -e "$(find "$BATS_TEST_TMPDIR/local" -name "$h.bin")" ] && continue
		grep -qxF "$(vllm_key fleet "$h")" <<<"$output" || fail "$h in neither tier"
		kvget --root "s3://$B/fleet" --model-dir "$MD" "$h" | cmp - "$h"
	done
}

@test "s3: kvoffd moves blocks out of a full local tier into a bucket with their PUTs in flight together, one conditional PUT each" {
	move_through_proxy --delay-ms 200
	at_once_at_least PUT 3
	# Each move is one PUT that keeps what is there: no HEAD asks first,
	# and the five the bucket had were moved out without being written.
	! grep -E "HEAD [^ ]+\.bin " "$S3_PROXY_LOG" || fail "a move asked the bucket first"
	[ "$MOVED" -eq $((WRITTEN + 5)) ] || fail "$MOVED moved, $WRITTEN written"
}

@test "s3: a bucket without conditional writes (501) still takes every move, written plainly" {
	move_through_proxy --no-conditional
	[ "$(s3_proxy_stat not_implemented)" -gt 0 ]
	[ "$MOVED" -eq "$WRITTEN" ] || fail "$MOVED moved, $WRITTEN written"
}

@test "s3: kvoffd over a failing bucket: every put succeeds, refused moves down are counted drops; once it is back they land" {
	local h
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	CTL=$BATS_TEST_TMPDIR/faults
	mkdir "$BATS_TEST_TMPDIR/local"
	s3_proxy_start --control "$CTL"
	AWS_ENDPOINT_URL=$S3_PROXY_URL AWS_MAX_ATTEMPTS=1 \
		start_kvoffd --tier "local:$BATS_TEST_TMPDIR/local:700K" --tier "shared:s3://$B/fleet" \
		--cpu-bytes 1M --slot-bytes 512K --write-threads 1
	printf 'every 1\nerror500 0\n' > "$CTL"
	for h in abcde00001 abcde00002 abcde00003 abcde00004 abcde00005 abcde00006; do
		head -c 300000 /dev/urandom > "$h"
		kvput --daemon "$SOCK" --model-dir "$MD" "$h" "$h"
	done
	stop_daemon
	[ "$DRC" -eq 0 ]
	jq -e '.error500 > 0' "$S3_PROXY_STATS"
	grep -q "dropped '.*' from '$BATS_TEST_TMPDIR/local': no lower tier took it" \
		"$BATS_TEST_TMPDIR/kvoffd.log"
	run keys
	[ -z "$output" ]
	# The bucket back: what leaves the local tier lands there.
	: > "$CTL"
	AWS_ENDPOINT_URL=$S3_PROXY_URL AWS_MAX_ATTEMPTS=1 \
		start_kvoffd --tier "local:$BATS_TEST_TMPDIR/local:700K" --tier "shared:s3://$B/fleet" \
		--cpu-bytes 1M --slot-bytes 512K --write-threads 1
	for h in abcde00007 abcde00008 abcde00009 abcde00010; do
		head -c 300000 /dev/urandom > "$h"
		kvput --daemon "$SOCK" --model-dir "$MD" "$h" "$h"
	done
	kvoffd --stats "$SOCK" > stats.json
	stop_daemon
	[ "$DRC" -eq 0 ]
	jq -e '.tiers[0].drops == 0 and .tiers[1].errors == 0' stats.json
	run keys
	[ "${#lines[@]}" -ge 2 ]
	for k in "${lines[@]}"; do
		h=$(basename "$k" .bin)
		kvget --root "s3://$B/fleet" --model-dir "$MD" "$h" | cmp - "$h"
	done
}

@test "s3: without a prefix the key starts with '/', as vLLM writes it" {
	head -c 100 /dev/urandom > "$BATS_TEST_TMPDIR/a"
	kvput --root "s3://$B" --config "$CFG" 3fa9c04e51d2b7a8 "$BATS_TEST_TMPDIR/a"
	run keys
	assert_output "$(vllm_key '' 3fa9c04e51d2b7a8)"
	[[ $output == /meta-llama_* ]]
	kvget --root "s3://$B" --config "$CFG" --exists 3fa9c04e51d2b7a8
}

@test "s3: a block already there is kept unless --replace" {
	head -c 5000 /dev/urandom > "$BATS_TEST_TMPDIR/a"
	head -c 6000 /dev/urandom > "$BATS_TEST_TMPDIR/b"
	kvput --root "s3://$B/p" --config "$CFG" abcde00001 "$BATS_TEST_TMPDIR/a"
	kvput --root "s3://$B/p" --config "$CFG" abcde00001 "$BATS_TEST_TMPDIR/b"
	kvget --root "s3://$B/p" --config "$CFG" abcde00001 | cmp - "$BATS_TEST_TMPDIR/a"
	printf '{"hash":"abcde00001","file":"%s"}\n' "$BATS_TEST_TMPDIR/b" |
		kvput --root "s3://$B/p" --config "$CFG" --batch > out.ndjson
	jq -e '.existed == true and .status == "ok"' out.ndjson
	kvput --root "s3://$B/p" --config "$CFG" --replace abcde00001 "$BATS_TEST_TMPDIR/b"
	kvget --root "s3://$B/p" --config "$CFG" abcde00001 | cmp - "$BATS_TEST_TMPDIR/b"
}

@test "s3: a bucket without conditional writes (501): kvput stores, keeps a block there by asking first, --replace replaces" {
	local h
	head -c 5000 /dev/urandom > a
	head -c 6000 /dev/urandom > b
	for h in abcde00011 abcde00012 abcde00013; do
		head -c 3000 /dev/urandom > "$h"
		printf '{"hash":"%s","file":"%s"}\n' "$h" "$BATS_TEST_TMPDIR/$h"
	done > manifest
	s3_proxy_start --no-conditional
	export AWS_ENDPOINT_URL=$S3_PROXY_URL
	kvput --root "s3://$B/p" --config "$CFG" abcde00001 a
	kvput --root "s3://$B/p" --config "$CFG" abcde00001 b
	kvget --root "s3://$B/p" --config "$CFG" abcde00001 | cmp - a
	kvput --root "s3://$B/p" --config "$CFG" --batch manifest > out.ndjson
	jq -s -e 'length == 3 and all(.status == "ok" and (.existed // false) == false)' \
		out.ndjson || fail "$(cat out.ndjson)"
	kvput --root "s3://$B/p" --config "$CFG" --batch manifest > again.ndjson
	jq -s -e 'length == 3 and all(.status == "ok" and .existed == true)' again.ndjson ||
		fail "$(cat again.ndjson)"
	for h in abcde00011 abcde00012 abcde00013; do
		kvget --root "s3://$B/p" --config "$CFG" "$h" | cmp - "$h"
	done
	kvput --root "s3://$B/p" --config "$CFG" --replace abcde00001 b
	kvget --root "s3://$B/p" --config "$CFG" abcde00001 | cmp - b
	# One put at a time (kv_tier_put), as the Python client's Tiers does.
	if [ -z "${KV_SANITIZED:-}" ]; then
		kvtools_run "
with kvtools.Tiers(['s3://$B/p']) as t:
    t.put('$MD', 'abcde00021', b'x' * 100)
    t.put('$MD', 'abcde00021', b'y' * 100)
    print(t.get('$MD', 'abcde00021')[:2])"
		[ "$status" -eq 0 ] || fail "$output"
		assert_output "b'xx'"
	fi
	# The server said 501 to the first conditional PUT of each run, and
	# no block was written over.
	[ "$(s3_proxy_stat not_implemented)" -ge 3 ]
	[ "$(grep -c ' PUT [^ ]*abcde0001[123]\.bin .* forward' "$S3_PROXY_LOG")" -eq 3 ] ||
		fail "$(cat "$S3_PROXY_LOG")"
}

@test "s3: a miss asks vLLM's key alone where the root has no single-slash dir, both forms where it has one" {
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	local h
	for h in abcdef41 abcdef42 abcdef43; do
		head -c 3000 /dev/urandom > "$h"
		kvput --root "s3://$B/fleet" --config "$CFG" "$h" "$h"
	done
	s3_proxy_start
	export AWS_ENDPOINT_URL=$S3_PROXY_URL
	kvtools_run "
with kvtools.Tiers(['s3://$B/fleet']) as t:
    print([t.has('$MD', h) for h in ['abcdef41', 'abcdef42', 'abcdef43',
                                     'abcdef4a', 'abcdef4b', 'abcdef4c', 'abcdef4d']])"
	[ "$status" -eq 0 ] || fail "$output"
	assert_output "[True, True, True, False, False, False, False]"
	# One HEAD a block: a listing of the top level, not a second HEAD a miss.
	[ "$(grep -c ' HEAD [^ ]*\.bin ' "$S3_PROXY_LOG")" -eq 7 ] || fail "$(cat "$S3_PROXY_LOG")"
	grep -q ' GET [^ ]*list-type=2' "$S3_PROXY_LOG"
	# Another client sends one at the single-slash form: asked there too.
	head -c 2000 /dev/urandom > abcdef44
	s3_aws s3api put-object --bucket "$B" --key "$(vllm_key fleet abcdef44 | sed 's|//|/|')" \
		--body abcdef44 > /dev/null
	: > "$S3_PROXY_LOG"
	kvtools_run "
with kvtools.Tiers(['s3://$B/fleet']) as t:
    print(t.has('$MD', 'abcdef44'), t.get('$MD', 'abcdef44') == open('abcdef44', 'rb').read(),
          t.has('$MD', 'abcdef4a'))"
	[ "$status" -eq 0 ] || fail "$output"
	assert_output "True True False"
	[ "$(grep -c ' HEAD [^ ]*abcdef4a\.bin ' "$S3_PROXY_LOG")" -eq 2 ] || fail "$(cat "$S3_PROXY_LOG")"
	# And through kvoffd's batches, twice (a listing between them).
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	start_kvoffd --root "s3://$B/fleet" --cpu-bytes 1M --slot-bytes 512K
	kvtools_run "
with kvtools.connect('$SOCK') as c:
    for _ in range(2):
        print(c.has_many('$MD', ['abcdef41', 'abcdef44', 'abcdef4a']))"
	[ "$status" -eq 0 ] || fail "$output"
	assert_output "$(printf '[2, 2, 0]\n[2, 2, 0]')"
	stop_daemon
	[ "$DRC" -eq 0 ]
}

@test "s3: readers and listers find the single-slash keys another client sent" {
	s3_fill --bucket "$B" --prefix fleet --models 1 --blocks 5 --single-slash --print > filled
	s3_fill --bucket "$B" --prefix fleet --models 1 --blocks 4 --seed 9 --print >> filled
	[ "$(grep -c '^fleet//' filled)" -eq 4 ]
	[ "$(grep -c '^fleet/[^/]' filled)" -eq 5 ]
	run kvls --root "s3://$B/fleet" --blocks --ndjson
	assert_success
	[ "${#lines[@]}" -eq 9 ]
	# Each block read back, by hash, from either form.
	while read -r key size; do
		rel=${key#fleet/}; rel=${rel#/}
		md=${rel%%_r0/*}; h=${rel##*/}; h=${h%.bin}
		kvget --root "s3://$B/fleet" --model-dir "$md" --exists "$h"
		[ "$(kvget --root "s3://$B/fleet" --model-dir "$md" "$h" | wc -c)" -eq "$size" ]
	done < filled
}

@test "s3: kvls lists a bucket as vLLM fills it, every model, rank and hash length" {
	for len in 16 32 64; do
		s3_fill --bucket "$B" --prefix "fleet/prod" --models 2 --ranks 2 --blocks 3 \
			--hex-len "$len" --seed "$len" --print
	done > filled
	run kvls --root "s3://$B/fleet/prod" --blocks --ndjson
	assert_success
	[ "${#lines[@]}" -eq "$(wc -l < filled)" ]
	# The same paths, sizes and ranks as the keys say.
	printf '%s\n' "${lines[@]}" | jq -r '.path' | sort > listed
	sed -e 's|^fleet/prod//||' -e 's/ .*//' filled | sort > want
	diff want listed
	printf '%s\n' "${lines[@]}" | jq -e 'select(.size_bytes != 4096 or .last_use_ns <= 0)' &&
		fail "a record without its size or last use"
	# One row per model dir; a trailing slash on the root changes nothing.
	run kvls --root "s3://$B/fleet/prod/" -J
	assert_success
	[ "$(jq '.models | length' <<< "$output")" -eq 2 ]
	[ "$(jq '[.models[].files] | add' <<< "$output")" -eq "$(wc -l < filled)" ]
	# --model and --rank narrow the listing.
	run kvls --root "s3://$B/fleet/prod" --blocks --ndjson --model kvtest/model-1 --rank 1
	assert_success
	[ "${#lines[@]}" -eq 9 ]
}

@test "s3: kvls follows pages past 1,000 keys in one range" {
	s3_fill --bucket "$B" --prefix big --models 1 --blocks 2300 --size 16 --threads 16
	run kvls --root "s3://$B/big" --blocks --ndjson
	assert_success
	[ "${#lines[@]}" -eq 2300 ]
	[ "$(printf '%s\n' "${lines[@]}" | jq -r .path | sort -u | wc -l)" -eq 2300 ]
}

@test "s3: a top level that lists the same page again under new tokens is a loop: kvls and kvevict fail at once" {
	s3_proxy_start --listing loop
	AWS_ENDPOINT_URL=$S3_PROXY_URL finish kvls --root "s3://$B/fleet"
	[ "$status" -eq 3 ] || fail "$output"
	assert_output --partial "a listing from s3://$B/fleet/ at $S3_PROXY_URL goes back"
	AWS_ENDPOINT_URL=$S3_PROXY_URL finish kvevict --root "s3://$B/fleet" --max-bytes 1 --hot 0
	[ "$status" -eq 3 ] || fail "$output"
	assert_output --partial "goes back"
	# Its lock given up on the way out.
	run keys fleet//.kvevict
	assert_output ""
}

@test "s3: a root's many dirs cost tens of bytes each until listed, and a top level without end stops at a bound" {
	[ -z "${KV_SANITIZED:-}" ] || skip "peak RSS under the sanitizers is theirs"
	# 4,000 rank dirs, each listed (an empty page): 13 KiB a dir would
	# be 52 MiB before the first was listed.
	s3_proxy_start --listing dirs:4000
	AWS_ENDPOINT_URL=$S3_PROXY_URL run /usr/bin/time -f %M -o rss kvls --root "s3://$B/fleet"
	[ "$(s3_proxy_stat listed)" -eq 4004 ] || fail "$(s3_proxy_stat listed) listings: $output"
	[ "$(peak_kib rss)" -lt 40000 ] || fail "peak RSS $(peak_kib rss) KiB"
	s3_proxy_stop
	s3_proxy_start --listing endless
	AWS_ENDPOINT_URL=$S3_PROXY_URL finish /usr/bin/time -f %M -o rss kvls --root "s3://$B/fleet"
	[ "$status" -eq 3 ] || fail "$output"
	assert_output --partial "names more dirs than fit in 16 MiB"
	[ "$(peak_kib rss)" -lt 100000 ] || fail "peak RSS $(peak_kib rss) KiB"
}

@test "s3: a listing answer past what one may take is said as that, naming the bucket" {
	s3_proxy_start --listing huge
	AWS_ENDPOINT_URL=$S3_PROXY_URL run kvls --root "s3://$B/fleet"
	assert_failure 3
	assert_output --partial "the answer for bucket '$B' is over 8 MiB ($S3_PROXY_URL)"
}

@test "s3: kvls --check names what is not the layout, and no bucket needs config.json" {
	s3_fill --bucket "$B" --prefix fleet --models 1 --blocks 2
	printf 'x' > "$BATS_TEST_TMPDIR/x"
	s3_aws s3api put-object --bucket "$B" --key fleet//notes.txt --body "$BATS_TEST_TMPDIR/x" >/dev/null
	run kvls --root "s3://$B/fleet" --check
	assert_failure 1
	assert_line --partial "notes.txt"
	refute_output --partial "orphan-rank"
	refute_output --partial "no-config"
}

@test "s3: kvls --verify checks the xxh3 kept in metadata and says where none is" {
	head -c 4096 /dev/urandom > "$BATS_TEST_TMPDIR/a"
	kvput --root "s3://$B/v" --config "$CFG" abcde00001 "$BATS_TEST_TMPDIR/a"
	kvput --root "s3://$B/v" --config "$CFG" abcde00002 "$BATS_TEST_TMPDIR/a"
	s3_fill --bucket "$B" --prefix v --models 1 --blocks 3
	run kvls --root "s3://$B/v" --verify
	assert_success
	assert_output --partial "2 verified, 0 mismatched, 3 without checksum"
	# The bytes change under the checksum kept with them.
	head -c 4096 /dev/urandom > "$BATS_TEST_TMPDIR/z"
	key=$(vllm_key v abcde00002)
	sum=$(s3_aws s3api head-object --bucket "$B" --key "$key" | jq -r '.Metadata["kv-xxh3"]')
	s3_aws s3api put-object --bucket "$B" --key "$key" --body "$BATS_TEST_TMPDIR/z" \
		--metadata "kv-xxh3=$sum" >/dev/null
	run kvls --root "s3://$B/v" --verify
	assert_failure 1
	assert_output --partial "checksum"
	assert_output --partial "abcde00002"
	# And kvget refuses to serve them.
	run kvget --root "s3://$B/v" --config "$CFG" abcde00002
	assert_failure
	assert_output --partial "checksum"
}

@test "s3: kvls --verify hashes an object as it comes, and reads none whose size is not the listing's" {
	[ -z "${KV_SANITIZED:-}" ] || skip "peak RSS under the sanitizers is theirs"
	head -c 4096 /dev/urandom > a
	kvput --root "s3://$B/v" --config "$CFG" abcde00001 a
	# Listed at 4 KiB, 300 MB by its HEAD and its GET.
	s3_proxy_start --object-size 300000000
	AWS_ENDPOINT_URL=$S3_PROXY_URL run /usr/bin/time -f %M -o rss kvls --root "s3://$B/v" --verify
	assert_failure 1
	assert_output --partial "unreadable"
	assert_output --partial "300000000 bytes now, 4096 when listed"
	[ "$(peak_kib rss)" -lt 60000 ] || fail "peak RSS $(peak_kib rss) KiB"
	! grep -q ' GET [^ ]*abcde00001\.bin ' "$S3_PROXY_LOG" || fail "the object was read"
	s3_proxy_stop
	run kvls --root "s3://$B/v" --verify
	assert_success
	assert_output --partial "1 verified, 0 mismatched"
}

@test "s3: kvget --batch reports each miss and answers the rest; tails are ranged reads" {
	for i in 1 2 3; do
		head -c 8192 /dev/urandom > "$BATS_TEST_TMPDIR/p$i"
		printf '{"hash":"abcde0000%d","file":"%s/p%d"}\n' "$i" "$BATS_TEST_TMPDIR" "$i"
	done | kvput --root "s3://$B/b" --config "$CFG" --batch > /dev/null
	printf '{"hash":"abcde0000%d"}\n' 1 9 2 3 > want
	run --separate-stderr kvget --root "s3://$B/b" --config "$CFG" --exists --batch < want
	[ "$(jq -s '[.[] | select(.hit)] | length' <<< "$output")" -eq 3 ]
	jq -s -e '.[] | select(.hash == "abcde00009") | .hit == false' <<< "$output"
	mkdir out
	run --separate-stderr kvget --root "s3://$B/b" --config "$CFG" -o out --batch < want
	cmp out/abcde00002.bin "$BATS_TEST_TMPDIR/p2"
	[ ! -e out/abcde00009.bin ]
	# The last two 4 KiB blocks of a 2-block file, as vLLM reads a tail.
	kvget --root "s3://$B/b" --config "$CFG" --blocks 1 --block-bytes 4096 abcde00003 > tail
	cmp tail <(tail -c 4096 "$BATS_TEST_TMPDIR/p3")
}

@test "s3: kvevict frees a budget by last use: Last-Modified, or a later use in a journal" {
	s3_fill --bucket "$B" --prefix e --models 1 --blocks 4 --size 4096 --seed old --print > old
	sleep 2
	s3_fill --bucket "$B" --prefix e --models 1 --blocks 4 --size 4096 --seed new --print > new
	s3_aws s3api put-object --bucket "$B" --key e//README --body "$CFG" >/dev/null
	# One old block was read just now on some node (kvwatch's journal).
	used=$(head -n 1 old | cut -d' ' -f1); used=${used#e//}
	printf '%s %s\n' "$(date +%s%N)" "$used" > uses
	s3_aws s3api put-object --bucket "$B" --key e//.kvwatch/node1.uses --body uses >/dev/null
	run kvevict --root "s3://$B/e" --max-bytes 20K --low-bytes 16K --hot 0 --dry-run
	assert_success
	assert_output --partial "would delete 4 blocks"
	[ "$(keys e/ | grep -c '\.bin$')" -eq 8 ]
	run kvevict --root "s3://$B/e" --max-bytes 20K --low-bytes 16K --hot 0 -J
	assert_success
	[ "$(jq .files_deleted <<< "$output")" -eq 4 ]
	keys e/ > left
	# The three old ones unused are gone, the one used stays, one new one went.
	for k in $(tail -n 3 old | cut -d' ' -f1); do ! grep -qxF "$k" left; done
	grep -qxF "e//$used" left
	[ "$(grep -cFf <(cut -d' ' -f1 new) left)" -eq 3 ]
	# Nothing outside the layout, and not the journal.
	grep -qx 'e//README' left
	grep -qx 'e//.kvwatch/node1.uses' left
}

@test "s3: kvevict --model-max-bytes touches only that model, and deletes both key forms" {
	s3_fill --bucket "$B" --prefix q --models a/one,b/two --blocks 6 --size 1000
	s3_fill --bucket "$B" --prefix q --models a/one --blocks 2 --size 1000 --seed s --single-slash
	run kvevict --root "s3://$B/q" --max-bytes 1T --model-max-bytes a/one=4000 \
		--model-max-bytes 'b/two=1T' --hot 0 -J
	assert_success
	keys q/ > left
	[ "$(grep -c 'b_two_' left)" -eq 6 ]
	[ "$(grep -c 'a_one_' left)" -le 4 ]
	[ "$(jq .files_deleted <<< "$output")" -ge 4 ]
}

@test "s3: kvevict keeps a block whose other key form is hot, and counts a block in both forms once with both objects' bytes" {
	# Four blocks in the single-slash form; a few seconds later two of
	# them again in vLLM's form, as a second writer would send them.
	s3_fill --bucket "$B" --prefix t --models 1 --blocks 4 --size 4096 --seed tw \
		--single-slash --print > old
	sleep 10
	s3_fill --bucket "$B" --prefix t --models 1 --blocks 2 --size 4096 --seed tw --print > new
	# The scan sees four blocks.  The two twins' last use is their newer
	# form's: hot, both forms stay; the two in the old form alone go.
	run kvevict --root "s3://$B/t" --max-bytes 1 --low-bytes 0 --hot 5s -J
	assert_success
	jq -e '.files_scanned == 4 and .bytes_scanned == 24576 and .files_hot == 2 and
	       .files_deleted == 2 and .bytes_deleted == 8192 and .skipped_hot == 0' \
		<<< "$output" || fail "$output"
	keys t/ > left
	for k in $(head -n 2 old | cut -d' ' -f1) $(cut -d' ' -f1 new); do
		grep -qxF "$k" left || fail "$k deleted: $(cat left)"
	done
	[ "$(wc -l < left)" -eq 4 ]
	# A walk sees two blocks, each holding both objects' bytes.
	run kvls --root "s3://$B/t" -J
	assert_success
	jq -e '[.models[].files] | add == 2' <<< "$output" || fail "$output"
	jq -e '[.models[].alloc_bytes] | add == 16384' <<< "$output" || fail "$output"
	# Out of the window, each twin goes whole: one block, two objects.
	run kvevict --root "s3://$B/t" --max-bytes 1 --low-bytes 0 --hot 0 -J
	assert_success
	jq -e '.files_deleted == 2 and .bytes_deleted == 16384 and .skipped_other == 0' \
		<<< "$output" || fail "$output"
	run keys t/
	assert_output ""
}

@test "s3: a walk pairs a path's two key forms page by page in one range, and kvevict counts what went" {
	# 1,200 keys in vLLM's form, 1,200 in the other, 600 paths in both,
	# all in one range of the rank dir: more than a page of each.
	"$S3_PYTHON" - "$B" "$MD" <<'EOF'
import concurrent.futures, os, sys, boto3
from botocore.config import Config
bucket, md = sys.argv[1:3]
s3 = boto3.session.Session().client(
    "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
    region_name=os.environ.get("AWS_REGION", "us-east-1"),
    config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))
def key(i, sep):
    h = "%016x" % i
    return f"p/{sep}{md}_r0/{h[:3]}/{h[3:5]}_g0/{h}.bin"
keys = [key(i, "/") for i in range(1200)] + [key(i, "") for i in range(600, 1800)]
with concurrent.futures.ThreadPoolExecutor(32) as ex:
    list(ex.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=b"x" * 8), keys))
EOF
	run kvevict --root "s3://$B/p" --max-bytes 1 --low-bytes 0 --hot 0 --dry-run -J
	assert_success
	jq -e '.files_scanned == 1800 and .bytes_scanned == 19200' <<< "$output" || fail "$output"
	# One request in flight at a time: the same blocks.
	KV_S3_INFLIGHT=1 run kvls --root "s3://$B/p" -J
	assert_success
	jq -e '.models[0].files == 1800 and .models[0].alloc_bytes == 19200' <<< "$output" ||
		fail "$output"
	# Down to 3,000 bytes (a block is 8 or 16): the bytes it says went.
	run kvevict --root "s3://$B/p" --max-bytes 4000 --low-bytes 3000 --hot 0 -J
	assert_success
	deleted=$(jq .bytes_deleted <<< "$output")
	[ "$deleted" -ge 16200 ] && [ "$deleted" -le 16208 ] || fail "$output"
	[ $(($(keys p/ | wc -l) * 8)) -eq $((19200 - deleted)) ] || fail "$output"
}

@test "s3: kvevict asks for both key forms again just before the delete: a twin sent since the scan keeps its block" {
	s3_fill --bucket "$B" --prefix r --models 1 --blocks 2 --size 4096 --seed rc \
		--single-slash --print > old
	sleep 6
	mkfifo pause
	KV_EVICT_TEST_PAUSE_BEFORE_UNLINK=$PWD/pause kvevict --root "s3://$B/r" --max-bytes 1 \
		--low-bytes 0 --hot 4s -J > out &
	pid=$!
	# Opening the FIFO waits until kvevict has chosen both old blocks;
	# a second writer sends the first again, in vLLM's form.
	exec 5> pause
	s3_fill --bucket "$B" --prefix r --models 1 --blocks 1 --size 4096 --seed rc --print > new
	exec 5>&-
	wait "$pid"
	jq -e '.files_deleted == 1 and .bytes_deleted == 4096 and .skipped_hot == 1' out ||
		fail "$(cat out)"
	run keys r/
	assert_output "$( (head -n 1 old; cat new) | cut -d' ' -f1 | sort)"
}

@test "s3: kvevict refuses what a bucket cannot do" {
	run kvevict --root "s3://$B" --high 80 --low 60
	assert_failure 2
	assert_output --partial "bucket"
	run kvevict --root "s3://$B" --max-bytes 1G --stdin < /dev/null
	assert_failure 2
}

# lock_there KEY: whether the bucket holds KEY.
lock_there() {
	keys "$1" | grep -qxF "$1"
}

@test "s3: kvevict on a bucket runs one at a time: a second exits 1 naming the first, --wait waits, a dry run goes by" {
	s3_fill --bucket "$B" --prefix l --models 1 --blocks 6 --size 1000
	mkfifo pause
	KV_EVICT_TEST_PAUSE_BEFORE_UNLINK=$PWD/pause kvevict --root "s3://$B/l" --max-bytes 1 \
		--low-bytes 0 --hot 0 -J > first 2> first.err &
	pid=$!
	wait_for lock_there l//.kvevict.lock
	run kvevict --root "s3://$B/l" --max-bytes 1 --low-bytes 0 --hot 0
	assert_failure 1
	assert_output --partial "another kvevict holds the lock on 's3://$B/l'"
	assert_output --partial "held by pid $pid (kvevict) on $(hostname)"
	run kvevict --root "s3://$B/l" --max-bytes 1 --low-bytes 0 --hot 0 --wait=1s
	assert_failure 1
	run kvevict --root "s3://$B/l" --max-bytes 1 --low-bytes 0 --hot 0 --shard 0/2
	assert_failure 1
	assert_output --partial "another kvevict (unsharded, or shard 0) holds the lock"
	run kvevict --root "s3://$B/l" --max-bytes 1 --low-bytes 0 --hot 0 --dry-run -J
	assert_success
	jq -e '.files_deleted == 6' <<< "$output"
	# The second waits for the first to finish, then finds nothing to do.
	kvevict --root "s3://$B/l" --max-bytes 1 --low-bytes 0 --hot 0 --wait=5m -J > second &
	wpid=$!
	exec 5> pause
	exec 5>&-
	wait "$pid" || fail "$(cat first.err)"
	wait "$wpid"
	jq -e '.files_deleted == 6' first
	jq -e '.files_deleted == 0' second
	# Each gave its lock up.
	run keys l//.kvevict
	assert_output ""
}

@test "s3: kvevict --shard: shards agree through objects under the prefix and free the budget once" {
	s3_fill --bucket "$B" --prefix s --models 1 --ranks 2 --blocks 40 --size 1000 --threads 16
	# 80 blocks of 1000 bytes; free down to 30,000 bytes: 50 blocks go.
	for i in 0 1; do
		kvevict --root "s3://$B/s" --max-bytes 60000 --low-bytes 30000 --hot 0 \
			--shard "$i/2" --shard-wait 60s -J > "shard.$i" 2> "shard.$i.err" &
	done
	wait
	for i in 0 1; do
		jq -e '.shard_count == 2 and .shards_merged == 2' "shard.$i" ||
			fail "shard $i: $(cat "shard.$i" "shard.$i.err")"
	done
	deleted=$(jq -s '[.[].files_deleted] | add' shard.0 shard.1)
	# Each frees its share of one LRU order: 50 in all, give or take the
	# boundary bucket's rounding.
	[ "$deleted" -ge 48 ] && [ "$deleted" -le 52 ] || fail "deleted $deleted"
	[ "$(keys s/ | grep -c '\.bin$')" -eq $((80 - deleted)) ]
	# The round's state stays under the prefix, nowhere else.
	keys | grep -v '^s//' && fail "state outside the prefix"
	keys s//.kvevict/ | grep -q 'round\.'
}

@test "s3: kvevict --shard on a bucket without conditional writes: a clear error, nothing deleted" {
	s3_fill --bucket "$B" --prefix s --models 1 --blocks 20 --size 1000 --threads 8
	s3_proxy_start --no-conditional
	AWS_ENDPOINT_URL=$S3_PROXY_URL run kvevict --root "s3://$B/s" --max-bytes 10000 \
		--low-bytes 5000 --hot 0 --shard 0/2 --shard-wait 5s
	assert_failure 3
	assert_output --partial "does not take conditional writes"
	[ "${#lines[@]}" -eq 1 ] || fail "$output"
	[ "$(keys s/ | grep -c '\.bin$')" -eq 20 ]
}

@test "s3: a root with a '.' or '..' segment in its prefix is a usage error in every program" {
	local r
	s3_mkbucket "${B}o"
	head -c 100 /dev/urandom > a
	for r in "s3://$B/../${B}o" "s3://$B/./prod" "s3://$B/p/.." "s3://.."; do
		run kvput --root "$r" --config "$CFG" abcde00001 a
		assert_failure 2
		assert_output --partial "invalid root '$r'"
		run kvget --root "$r" --config "$CFG" --exists abcde00001
		assert_failure 2
		run kvls --root "$r"
		assert_failure 2
		run kvevict --root "$r" --max-bytes 1G
		assert_failure 2
		run kvwatch --root "$r" --events tcp://127.0.0.1:1
		assert_failure 2
		run kvoffd --root "$r" --socket "$BATS_TEST_TMPDIR/s" --cpu-bytes 1M
		assert_failure 2
		run kvget --tier "shared:$r" --config "$CFG" abcde00001
		assert_failure 2
	done
	assert_output --partial "'..' is not a bucket name"
	# Nothing written, here or in the other bucket.
	run keys
	assert_output ""
	B=${B}o run keys
	assert_output ""
}

@test "s3: a missing bucket, wrong keys or no endpoint: exit 3, one line naming them, no secret" {
	run kvls --root s3://no-such-bucket-here
	assert_failure 3
	assert_output --partial "no-such-bucket-here"
	assert_output --partial "$AWS_ENDPOINT_URL"
	AWS_SECRET_ACCESS_KEY=Wr0ngS3cretKeyThatMustNotShow run kvget --root "s3://$B" \
		--config "$CFG" --exists abcde00001
	assert_failure 3
	assert_output --partial "denied"
	refute_output --partial "Wr0ngS3cret"
	refute_output --partial "$AWS_SECRET_ACCESS_KEY"
	AWS_ENDPOINT_URL=http://127.0.0.1:9 AWS_MAX_ATTEMPTS=2 run kvls --root "s3://$B" --blocks
	assert_failure 3
	assert_output --partial "127.0.0.1:9"
	[ "${#lines[@]}" -eq 1 ]
}

# no_credential: $output shows no session token, secret key or signature.
no_credential() {
	[[ $output != *SessionTokenThatMustNotShow* && $output != *Signature=* &&
	   $output != *"$AWS_SECRET_ACCESS_KEY"* ]] || fail "$output"
}

@test "s3: a server that echoes the request's token and headers in its errors: no credential printed" {
	head -c 100 /dev/urandom > a
	s3_proxy_start --every 1 --echo 0
	export AWS_SESSION_TOKEN=FwoGZXIvYXdzEJr/SessionTokenThatMustNotShow+0123456789==
	AWS_ENDPOINT_URL=$S3_PROXY_URL run kvls --root "s3://$B/x"
	assert_failure 3
	assert_output --partial "InvalidRequest: The security token included in the request is invalid: [redacted]."
	assert_output --partial "x-amz-security-token: [redacted]"
	no_credential
	# --replace: a HEAD, which the proxy says yes to, would keep it.
	AWS_ENDPOINT_URL=$S3_PROXY_URL run kvput --root "s3://$B/x" --config "$CFG" --replace \
		abcde00001 a
	assert_failure 3
	assert_output --partial "Authorization: [redacted]"
	no_credential
	AWS_ENDPOINT_URL=$S3_PROXY_URL run kvevict --root "s3://$B/x" --max-bytes 1 --hot 0
	assert_failure 3
	assert_output --partial "[redacted]"
	no_credential
}

@test "s3: credentials and endpoint from a profile in ~/.aws, as the AWS CLI reads them" {
	mkdir -p home/.aws
	printf '[kvp]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
		"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" > home/.aws/credentials
	printf '[profile kvp]\nregion = us-east-1\nendpoint_url = %s\n' "$AWS_ENDPOINT_URL" > home/.aws/config
	head -c 100 /dev/urandom > a
	env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_ENDPOINT_URL \
		HOME="$PWD/home" AWS_PROFILE=kvp kvput --root "s3://$B/p" --config "$CFG" abcde00001 a
	env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_ENDPOINT_URL \
		HOME="$PWD/home" AWS_PROFILE=kvp kvget --root "s3://$B/p" --config "$CFG" abcde00001 | cmp - a
	# Another profile has no keys: said, not guessed.
	run env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME="$PWD/home" AWS_PROFILE=none \
		kvls --root "s3://$B/p"
	assert_failure 3
	assert_output --partial "no credentials"
}

@test "s3: throttling, server errors and resets are retried; past AWS_MAX_ATTEMPTS they fail" {
	head -c 3000 /dev/urandom > a
	kvput --root "s3://$B/r" --config "$CFG" abcde00001 a
	s3_proxy_start --slowdown 2 --error500 1 --reset 1
	AWS_ENDPOINT_URL=$S3_PROXY_URL run kvget --root "s3://$B/r" --config "$CFG" -o b abcde00001
	assert_success
	cmp a b
	[ "$(s3_proxy_stat slowdown)" -eq 2 ]
	[ "$(s3_proxy_stat reset)" -eq 1 ]
	s3_proxy_stop
	s3_proxy_start --slowdown 5
	AWS_ENDPOINT_URL=$S3_PROXY_URL AWS_MAX_ATTEMPTS=2 run kvls --root "s3://$B/r" --blocks
	assert_failure 3
	assert_output --partial "SlowDown"
}

@test "s3: a server that drips its answers runs into \$KV_S3_REQUEST_TIMEOUT: kvls and kvevict fail naming it" {
	s3_fill --bucket "$B" --prefix d --models 1 --blocks 3
	# 2 bytes a second: never idle, never done.
	s3_proxy_start --drip-ms 500
	AWS_ENDPOINT_URL=$S3_PROXY_URL KV_S3_REQUEST_TIMEOUT=2s AWS_MAX_ATTEMPTS=2 \
		finish kvls --root "s3://$B/d"
	[ "$status" -eq 3 ] || fail "$output"
	assert_output --partial "no whole answer within 2s (\$KV_S3_REQUEST_TIMEOUT)"
	AWS_ENDPOINT_URL=$S3_PROXY_URL KV_S3_REQUEST_TIMEOUT=2s AWS_MAX_ATTEMPTS=2 \
		finish kvevict --root "s3://$B/d" --max-bytes 1 --hot 0
	[ "$status" -eq 3 ] || fail "$output"
	assert_output --partial "no whole answer within 2s (\$KV_S3_REQUEST_TIMEOUT)"
	[ "$(keys d/ | grep -c '\.bin$')" -eq 3 ]
	run keys d//.kvevict
	assert_output ""
	# Junk there is said, as for the other limits.
	KV_S3_REQUEST_TIMEOUT=soon run kvls --root "s3://$B/d"
	assert_failure 3
	assert_output --partial "\$KV_S3_REQUEST_TIMEOUT: not a duration: 'soon'"
}

@test "s3: a batch through resets and throttling keeps every block" {
	for i in $(seq 10 40); do
		head -c 2048 /dev/urandom > "p$i"
		printf '{"hash":"abcde000%d","file":"%s/p%d"}\n' "$i" "$PWD" "$i"
	done > m
	s3_proxy_start --every 7 --reset 0
	AWS_ENDPOINT_URL=$S3_PROXY_URL run --separate-stderr kvput --root "s3://$B/f" \
		--config "$CFG" --batch m
	assert_success
	[ "$(s3_proxy_stat reset)" -gt 0 ]
	s3_proxy_stop
	run kvls --root "s3://$B/f" --verify
	assert_success
	assert_output --partial "31 verified, 0 mismatched"
}

@test "s3: the README's bucket examples run as written" {
	s3_requires
	B=kv-cache
	s3_aws s3api create-bucket --bucket "$B" >/dev/null 2>&1 || true
	cd "$BATS_TEST_TMPDIR"
	[ -f config.json ] || cp "$CFG" config.json
	head -c 1M /dev/urandom > block.bin
	awk '/^## Buckets \(S3\)/ { on = 1; next } /^## / { on = 0 }
	     on && /^    kv/ { sub(/^    /, ""); print }' "$BATS_TEST_DIRNAME/../../README.md" > ex.sh
	[ "$(wc -l < ex.sh)" -ge 5 ]
	run bash -e ex.sh
	assert_success
}

@test "s3: kvput --events announces each block on its model's topic, named by --config" {
	requires python3
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || skip "needs python3-zmq and python3-msgpack"
	port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	ready=$BATS_TEST_TMPDIR/sub.ready
	/usr/bin/python3 "$BATS_TEST_DIRNAME/../fixtures/kvsub.py" --bind "tcp://127.0.0.1:$port" \
		--ready "$ready" > sub.out 2> sub.err &
	spid=$!
	wait_ready "$ready" "$spid" sub.err
	for i in 1 2 3; do
		head -c 1000 /dev/urandom > "p$i"
		printf '{"hash":"abcde0000%d","file":"%s/p%d"}\n' "$i" "$PWD" "$i"
	done | kvput --root "s3://$B/ev" --config "$CFG" --events "tcp://127.0.0.1:$port" --batch >/dev/null
	kill -TERM "$spid"
	wait "$spid" || true
	jq -s -e '[.[] | select(.type == "BlockStored") | .hashes[]] | length == 3' sub.out
	jq -s -e 'all(.[]; .model == "meta-llama/Llama-3.1-8B" and .medium == "SHARED_STORAGE")' sub.out
}

@test "s3: one tier handle serves several threads at once" {
	drv=$BATS_TEST_DIRNAME/../../${BUILD:-build}/tests/s3/tier_threads
	[ -x "$drv" ] || skip "tests/s3/tier_threads not built"
	run "$drv" "s3://$B/threads" 8 12
	assert_success
	run keys
	assert_output ""
}

@test "s3: kvwatch on a bucket records GPU uses from KV events in its journal object, and kvevict keeps those blocks" {
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || skip "needs python3-zmq and python3-msgpack"
	s3_fill --bucket "$B" --prefix w --models 1 --blocks 6 --size 4096 --print > filled
	used=$(sed -n 2p filled | cut -d' ' -f1)
	hash=${used##*/}; hash=${hash%.bin}
	/usr/bin/python3 "$BATS_TEST_DIRNAME/kv_publish.py" "bind:tcp://127.0.0.1:*" positional-int \
		"$hash" > pub.out &
	ppid=$!
	for _ in $(seq 100); do [ -s pub.out ] && break; sleep 0.1; done
	mkfifo ready
	kvwatch --root "s3://$B/w" --events "$(head -1 pub.out)" --node n1 --ndjson --ready-fd 3 \
		3>ready > watch.out 2> watch.err &
	wpid=$!
	read -r _ < ready || true
	for _ in $(seq 100); do [ -s watch.out ] && break; sleep 0.1; done
	kill -TERM "$wpid"
	wait "$wpid" || fail "kvwatch: $(cat watch.err)"
	kill "$ppid" 2>/dev/null || true
	jq -e --arg h "$hash" 'select(.hash == $h) | .where == "journal" and .source == "event"' watch.out
	# The journal object, as kv(7) says, naming the block used.
	s3_aws s3api get-object --bucket "$B" --key w//.kvwatch/n1.uses journal >/dev/null
	grep -q " ${used#w//}\$" journal
	# Evicting all but one block keeps the one used.
	run kvevict --root "s3://$B/w" --max-bytes 8K --low-bytes 4K --hot 0
	assert_success
	run keys w/
	assert_line "$used"
	assert_line "w//.kvwatch/n1.uses"
	[ "$(grep -c '\.bin$' <<< "$output")" -eq 1 ]
	# Without --events there is nothing to watch a bucket by.
	run kvwatch --root "s3://$B/w"
	assert_failure 2
	assert_output --partial "--events"
}

@test "s3: --config names a bucket's model dirs: kvls's table, kvevict's BlockRemoved topic" {
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || skip "needs python3-zmq and python3-msgpack"
	for i in 1 2 3; do
		head -c 1000 /dev/urandom > "p$i"
		printf '{"hash":"abcde0000%d","file":"%s/p%d"}\n' "$i" "$PWD" "$i"
	done | kvput --root "s3://$B/c" --config "$CFG" --batch >/dev/null
	run kvls --root "s3://$B/c" -J
	assert_success
	jq -e '.models[0].model == "meta-llama_Llama-3.1-8B"' <<< "$output"
	run kvls --root "s3://$B/c" -J --config "$CFG"
	assert_success
	jq -e '.models[0].model == "meta-llama/Llama-3.1-8B" and .models[0].dtype == "bfloat16"' <<< "$output"
	port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	/usr/bin/python3 "$BATS_TEST_DIRNAME/../fixtures/kvsub.py" --bind "tcp://127.0.0.1:$port" \
		--ready ready > sub.out 2> sub.err &
	spid=$!
	wait_ready ready "$spid" sub.err
	run kvevict --root "s3://$B/c" --max-bytes 1500 --low-bytes 1000 --hot 0 \
		--events "tcp://127.0.0.1:$port" --config "$CFG"
	assert_success
	kill -TERM "$spid"
	wait "$spid" || true
	jq -s -e '[.[] | select(.type == "BlockRemoved") | .hashes[]] | length == 2' sub.out
	jq -s -e 'all(.[]; .model == "meta-llama/Llama-3.1-8B")' sub.out
}

# vllm_tier ENTRY OP N SEED: kvtools.vllm driven through the STAND-IN of
# vLLM's tiering framework (tests/python/vllm_standin; vLLM cannot be
# installed here).
vllm_tier() {
	/usr/bin/python3 "$BATS_TEST_DIRNAME/../python/vllm_harness.py" main "$@"
}

@test "s3: vLLM's secondary tier (kvtools.vllm) stores at vLLM's obj keys, loads back, journals the loads" {
	/usr/bin/python3 -c 'import numpy' 2>/dev/null || skip "needs python3-numpy"
	E="{\"root_dir\": \"s3://$B/fleet\", \"resolution_s\": 0, \"node\": \"n1\"}"
	run vllm_tier "$E" store 10 1
	assert_success
	assert_output "stored 10, 0 jobs failed"
	run keys fleet//org_model-7b_
	[ "${#lines[@]}" -eq 10 ]
	[[ ${lines[0]} == fleet//org_model-7b_*_r0/???/??_g?/*.bin ]]
	run kvls --root "s3://$B/fleet" --verify
	assert_success
	assert_output --partial "10 verified, 0 mismatched"
	run vllm_tier "$E" check 10 1
	assert_success
	assert_output "loaded 10 of 10, 0 missed"
	# Each load is a use, in this node's journal object.
	s3_aws s3 cp "s3://$B/fleet//.kvwatch/n1.uses" - > uses
	[ "$(grep -c '_r0/' uses)" -eq 10 ]
}

@test "s3: the vLLM tier fails its jobs, not the scheduler, when every connection drops" {
	/usr/bin/python3 -c 'import numpy' 2>/dev/null || skip "needs python3-numpy"
	E="{\"root_dir\": \"s3://$B/fleet\"}"
	vllm_tier "$E" store 4 2
	: > ctl
	s3_proxy_start --control "$PWD/ctl"
	export AWS_MAX_ATTEMPTS=2
	AWS_ENDPOINT_URL=$S3_PROXY_URL FAULT_CONTROL=$PWD/ctl FAULT_PLAN=$'every 1\nreset 0' \
		run vllm_tier "$E" store 4 3
	assert_failure 1
	assert_line "stored 4, 1 jobs failed"
	# What vLLM's log shows: the job, the root, the first block, the error.
	assert_line --partial "kvtools: store job 1 on s3://$B/fleet: 4 of 4 blocks failed"
	assert_line --partial "[ECONNRESET]"
	[ "$(s3_proxy_stat reset)" -gt 0 ]
	# Lookups cannot ask, so they miss: nothing is promoted.
	: > ctl
	AWS_ENDPOINT_URL=$S3_PROXY_URL FAULT_CONTROL=$PWD/ctl FAULT_PLAN=$'every 1\nreset 0' \
		run vllm_tier "$E" check 4 2
	assert_failure 1
	assert_line "loaded 0 of 4, 4 missed"
}

@test "s3: kvget records a hit as a use in the node's journal object, and kvevict keeps that block" {
	for h in abcde00001 abcde00002 abcde00003; do
		head -c 4096 /dev/urandom > "$h"
		kvput --root "s3://$B/g" --config "$CFG" "$h" "$h"
	done
	sleep 2
	# A read of the oldest: a use, not the Last-Modified it keeps.
	kvget --root "s3://$B/g" --config "$CFG" abcde00001 | cmp - abcde00001
	printf '%s\n' abcde00002 | kvget --root "s3://$B/g" --config "$CFG" --batch -o . >/dev/null
	kvget --root "s3://$B/g" --config "$CFG" --no-touch abcde00003 > /dev/null
	kvget --root "s3://$B/g" --config "$CFG" --exists abcde00003
	s3_aws s3 cp "s3://$B/g//.kvwatch/$(hostname | tr -c 'A-Za-z0-9._\n-' _).uses" - > uses
	[ "$(wc -l < uses)" -eq 2 ]
	grep -q 'abcde00001.bin$' uses
	grep -q 'abcde00002.bin$' uses
	# 12K of blocks down to 4K: the unread one goes first, then by use.
	run kvevict --root "s3://$B/g" --max-bytes 8K --low-bytes 4K --hot 0 -J
	assert_success
	run keys g//
	refute_output --partial abcde00003
	assert_output --partial abcde00002
}
