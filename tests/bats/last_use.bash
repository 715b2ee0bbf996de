# The last-use scenario the kvwatch suites share (kvwatch.bats, and the
# two-node runs of shared_volume.bash): three sets of 100 blocks of 64
# KiB written 3 h, 2 h and 1 h ago; set 1 is then used; kvevict --max-bytes
# 18M --low-bytes 12800K --hot 30m must delete no block of set 1 and all
# of set 2.  Needs $CFG and $BATS_TEST_TMPDIR.

# start_kvwatch ARGS...: kvwatch on $KV_ROOT, returning once it is
# watching (its --ready-fd); pid $WPID, NDJSON in kvwatch.out.
start_kvwatch() {
	local fifo=$BATS_TEST_TMPDIR/ready.$RANDOM line
	mkfifo "$fifo"
	${KVWATCH_PREFIX:-} kvwatch --root "$KV_ROOT" --ready-fd 3 --ndjson "$@" 3>"$fifo" \
		>>"$BATS_TEST_TMPDIR/kvwatch.out" 2>>"$BATS_TEST_TMPDIR/kvwatch.err" &
	WPID=$!
	read -r line <"$fifo" || true
	rm -f "$fifo"
	kill -0 "$WPID" || fail "kvwatch did not start: $(cat "$BATS_TEST_TMPDIR/kvwatch.err")"
}

# stop_kvwatch [SIGNAL]: its exit status in $WRC.
stop_kvwatch() {
	WRC=0
	[ -n "${WPID:-}" ] || return 0
	kill -"${1:-TERM}" "$WPID" 2>/dev/null || true
	wait "$WPID" || WRC=$?
	WPID=
}

# history ROOT: the three sets; set S (1..3) written (4 - S) hours ago,
# hashes a<S><i> padded to 32 digits.  Lists each set's paths in set.S.
history() {
	local root=$1 s i now
	now=$(date +%s)
	head -c 65536 /dev/urandom > "$BATS_TEST_TMPDIR/blk"
	for s in 1 2 3; do
		for ((i = 0; i < 100; i++)); do
			printf '{"hash":"a%015x%016x","file":"%s"}\n' "$s" "$((s * 1000 + i))" \
				"$BATS_TEST_TMPDIR/blk"
		done > "$BATS_TEST_TMPDIR/m.$s"
		kvput --root "$root" --config "$CFG" --batch "$BATS_TEST_TMPDIR/m.$s" |
			jq -r 'select(.status == "ok") | .path' > "$BATS_TEST_TMPDIR/set.$s"
		[ "$(wc -l < "$BATS_TEST_TMPDIR/set.$s")" -eq 100 ]
		(cd "$root" && xargs touch -d "@$((now - (4 - s) * 3600))" < "$BATS_TEST_TMPDIR/set.$s")
	done
}

# read_set ROOT S: read set S as model servers do, half with plain reads
# and half with O_DIRECT (where the filesystem takes it).
read_set() {
	local root=$1 n=0 p
	while read -r p; do
		if ((n++ % 2)); then
			dd if="$root/$p" of=/dev/null bs=64k iflag=direct status=none 2>/dev/null ||
				cat "$root/$p" > /dev/null
		else
			cat "$root/$p" > /dev/null
		fi
	done < "$BATS_TEST_TMPDIR/set.$2"
}

# hashes S: set S's hashes.
hashes() {
	sed 's|.*/||; s|\.bin$||' "$BATS_TEST_TMPDIR/set.$1"
}

# evict_and_judge ROOT: the acceptance run's kvevict, then: no block of
# set 1 (just used) deleted, every block of set 2 deleted, and precision
# against true last use (set 1 now, set 2 at -2 h, set 3 at -1 h) >= 0.99.
evict_and_judge() {
	run --separate-stderr kvevict --root "$1" --max-bytes 18M --low-bytes 12800K --hot 30m --ndjson
	[ "$status" -eq 0 ] || fail "kvevict: $stderr"
	jq -r .path <<<"$output" | sort > "$BATS_TEST_TMPDIR/deleted"
	local deleted hot lru
	deleted=$(wc -l < "$BATS_TEST_TMPDIR/deleted")
	hot=$(sort "$BATS_TEST_TMPDIR/set.1" | comm -12 - "$BATS_TEST_TMPDIR/deleted" | wc -l)
	lru=$(sort "$BATS_TEST_TMPDIR/set.2" | comm -12 - "$BATS_TEST_TMPDIR/deleted" | wc -l)
	echo "deleted $deleted: hot $hot, least recently used $lru" >&3
	[ "$deleted" -ge 100 ] || fail "deleted only $deleted"
	[ "$hot" -eq 0 ] || fail "deleted $hot blocks just used"
	[ "$lru" -eq 100 ] || fail "deleted $lru of the 100 least recently used"
	# precision: deleted blocks no older than the true boundary
	awk -v d="$deleted" -v h="$hot" 'BEGIN { exit !((d - h) / d >= 0.99) }'
}
