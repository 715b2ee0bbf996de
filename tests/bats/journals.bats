#!/usr/bin/env bats
# The use journals read to their end however long, in memory that does
# not grow with them: the newest use past 256 MiB of journal counts, a
# journal that cannot be read stops eviction before it deletes anything,
# and kvwatch on a bucket restarts on a journal object of any size and
# writes it back compacted.  The bucket tests run on a real S3 server
# (Ceph's RADOS Gateway, started once for this file).

load test_helper
load s3_server

setup_file() { s3_setup_file; }
teardown_file() { s3_teardown_file; }

M=meta-llama_Llama-3.1-8B_0123456789ab
NODAC="setpriv --bounding-set=-dac_override,-dac_read_search"
NOW=$(date +%s)

setup() {
	common_setup
	cd "$BATS_TEST_TMPDIR"
}

teardown() {
	if [ -n "${WPID:-}" ]; then
		kill "$WPID" 2>/dev/null || true
		wait "$WPID" 2>/dev/null || true
	fi
	if [ -n "${PPID_PUB:-}" ]; then
		kill "$PPID_PUB" 2>/dev/null || true
		wait "$PPID_PUB" 2>/dev/null || true
	fi
	common_teardown
}

# blk I: relative path of test block I.
blk() {
	local h
	h=$(printf '%05x%07x' "$1" "$1")
	echo "${M}_r0/${h:0:3}/${h:3:2}_g0/$h.bin"
}

# mkblk I AGE_S: block I, last read AGE_S seconds ago, written a month ago.
mkblk() {
	local p=$KV_ROOT/$(blk "$1")
	mkdir -p "${p%/*}"
	head -c 8192 /dev/zero > "$p"
	touch -m -d "@$((NOW - 86400 * 30))" "$p"
	touch -a -d "@$((NOW - $2))" "$p"
}

@test "a journal past 256 MiB is read to its end: its newest use keeps a block, in memory that does not grow with it" {
	mount_tmpfs 96m
	KV_ROOT=$MNT
	mkblk 1 7200		# A: read 2 h ago, used 1 minute ago (journal only)
	mkblk 2 172800		# B: read 2 days ago, unused since
	mkdir "$KV_ROOT/.kvwatch"
	# 257 MiB of NULs (sparse: no memory, no disk), then A's use
	truncate -s 257M "$KV_ROOT/.kvwatch/n1.uses"
	printf '\n%s %s\n' "$(( (NOW - 60) * 1000000000 ))" "$(blk 1)" >> "$KV_ROOT/.kvwatch/n1.uses"
	[ "$(du -k "$KV_ROOT/.kvwatch/n1.uses" | cut -f1)" -lt 1024 ]
	# and 64 MiB of one old use of B, written out
	yes "$(( (NOW - 86400 * 3) * 1000000000 )) $(blk 2)" | head -c 64M > "$KV_ROOT/.kvwatch/n2.uses"
	run kvls --root "$KV_ROOT" --blocks --ndjson
	assert_success
	[ "$(jq -r "select(.path == \"$(blk 1)\") | .last_use_ns" <<<"$output")" -eq \
		$(( (NOW - 60) * 1000000000 )) ]
	/usr/bin/time -f %M -o rss kvevict --root "$KV_ROOT" --max-bytes 1 --hot 60m --ndjson > removed
	[ -e "$KV_ROOT/$(blk 1)" ] || fail "A, used a minute ago, was deleted"
	[ ! -e "$KV_ROOT/$(blk 2)" ] || fail "B, unused for 2 days, was kept"
	[ "$(jq -r .path removed)" = "$(blk 2)" ]
	echo "kvevict peak RSS: $(tail -1 rss) KiB" >&3
	[ "$(tail -1 rss)" -lt 65536 ]
}

@test "a line split across the reader's pieces counts; a line over 4096 bytes, however long, does not" {
	mount_tmpfs 16m
	KV_ROOT=$MNT
	mkblk 1 7200
	mkblk 2 172800
	mkdir "$KV_ROOT/.kvwatch"
	# A's use straddles the first MiB; a 5 MiB line naming B is no use
	{
		head -c $(( (1 << 20) - 30 )) /dev/zero | tr '\0' x
		printf '\n%s %s\n' "$(( (NOW - 60) * 1000000000 ))" "$(blk 1)"
		printf '%s ' "$(( (NOW - 60) * 1000000000 ))"
		head -c $((5 << 20)) /dev/zero | tr '\0' /
		printf '%s\n' "$(blk 2)"
	} > "$KV_ROOT/.kvwatch/n1.uses"
	run kvevict --root "$KV_ROOT" --max-bytes 1 --hot 60m --ndjson
	assert_success
	[ -e "$KV_ROOT/$(blk 1)" ]
	[ ! -e "$KV_ROOT/$(blk 2)" ]
}

@test "a journal that cannot be read stops kvevict before it deletes anything: exit 3, the journal named" {
	mount_tmpfs 16m
	KV_ROOT=$MNT
	mkblk 1 7200
	mkblk 2 172800
	mkdir "$KV_ROOT/.kvwatch"
	printf '%s %s\n' "$(( (NOW - 60) * 1000000000 ))" "$(blk 1)" > "$KV_ROOT/.kvwatch/n1.uses"
	# another user's 0600 file: root without CAP_DAC_OVERRIDE and
	# CAP_DAC_READ_SEARCH cannot read it
	chown nobody "$KV_ROOT/.kvwatch/n1.uses"
	chmod 600 "$KV_ROOT/.kvwatch/n1.uses"
	run --separate-stderr $NODAC kvevict --root "$KV_ROOT" --max-bytes 1 --hot 60m --ndjson
	assert_failure 3
	[ -z "$output" ]
	[[ $stderr == *"cannot walk '$KV_ROOT'"*"cannot open use journal '.kvwatch/n1.uses': Permission denied"* ]] ||
		fail "stderr: $stderr"
	[ -e "$KV_ROOT/$(blk 1)" ] && [ -e "$KV_ROOT/$(blk 2)" ]
	run --separate-stderr $NODAC kvls --root "$KV_ROOT" --blocks
	assert_failure 3
	[[ $stderr == *"use journal '.kvwatch/n1.uses'"* ]] || fail "stderr: $stderr"
	# readable, it is followed
	chmod 644 "$KV_ROOT/.kvwatch/n1.uses"
	run $NODAC kvevict --root "$KV_ROOT" --max-bytes 1 --hot 60m --ndjson
	assert_success
	[ -e "$KV_ROOT/$(blk 1)" ] && [ ! -e "$KV_ROOT/$(blk 2)" ]
}

@test "s3: kvwatch restarts on a 9 MB journal object of its node, records, and writes it back compacted" {
	s3_requires aws jq
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || skip "needs python3-zmq and python3-msgpack"
	B=kv$(printf '%s' "$BATS_TEST_NAME" | md5sum | cut -c1-12)
	s3_mkbucket "$B"
	s3_fill --bucket "$B" --prefix w --models 1 --blocks 6 --size 4096 --print > filled
	used=$(sed -n 2p filled | cut -d' ' -f1)
	kept=$(sed -n 3p filled | cut -d' ' -f1)
	hash=${used##*/}; hash=${hash%.bin}
	md=${used#w//}; md=${md%%/*}
	# 9 MB of uses of blocks long gone, then one of a block still there
	# (a minute ahead, within what a clock may be off by: later than its
	# Last-Modified): more than a bucket answer kvwatch once read back
	# (8 MiB).
	/usr/bin/python3 - "$md" "${kept#w//}" "$(( (NOW + 60) * 1000000000 ))" > big.uses <<'EOF'
import sys
md, kept, t = sys.argv[1], sys.argv[2], int(sys.argv[3])
n = i = 0
while n < 9000000:
    h = "%032x" % (0xfeed0000000000000000000000000000 + i)
    line = f"{t - i} {md}/{h[:3]}/{h[3:5]}_g0/{h}.bin\n"
    sys.stdout.write(line)
    n += len(line)
    i += 1
sys.stdout.write(f"{t} {kept}\n")
EOF
	[ "$(stat -c %s big.uses)" -gt 9000000 ]
	s3_aws s3api put-object --bucket "$B" --key w//.kvwatch/n1.uses --body big.uses >/dev/null
	# readers take the use at its end
	run kvls --root "s3://$B/w" --blocks --ndjson
	assert_success
	[ "$(jq -r "select(.path == \"${kept#w//}\") | .last_use_ns" <<<"$output")" -eq \
		$(( (NOW + 60) * 1000000000 )) ]
	/usr/bin/python3 "$BATS_TEST_DIRNAME/kv_publish.py" "bind:tcp://127.0.0.1:*" positional-int \
		"$hash" > pub.out &
	PPID_PUB=$!
	for _ in $(seq 100); do [ -s pub.out ] && break; sleep 0.1; done
	mkfifo ready
	kvwatch --root "s3://$B/w" --events "$(head -1 pub.out)" --node n1 --ndjson --ready-fd 3 \
		3>ready > watch.out 2> watch.err &
	WPID=$!
	read -r _ < ready || true
	kill -0 "$WPID" || fail "kvwatch did not start: $(cat watch.err)"
	for _ in $(seq 100); do [ -s watch.out ] && break; sleep 0.1; done
	kill -TERM "$WPID"
	wait "$WPID" || fail "kvwatch: $(cat watch.err)"
	WPID=
	jq -e --arg h "$hash" 'select(.hash == $h) | .where == "journal"' watch.out
	# Written back: a line for each block still there that has a use,
	# the 90,000 gone ones left out.
	s3_aws s3api get-object --bucket "$B" --key w//.kvwatch/n1.uses journal >/dev/null
	[ "$(wc -l < journal)" -eq 2 ] || fail "journal: $(head -c 600 journal)"
	grep -q " ${used#w//}\$" journal
	grep -qx "$(( (NOW + 60) * 1000000000 )) ${kept#w//}" journal
}
