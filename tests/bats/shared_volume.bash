# The checks a shared volume must pass, for a filesystem mounted twice at
# $A and $B (two nodes): latency.bats runs them on latfs, gluster.bats
# on a GlusterFS volume.  Needs $CFG, $BATS_TEST_TMPDIR; $SOCK for kvoffd.

# sv_env: after the mounts, what the checks use.
sv_env() {
	export KV_ROOT=$A
	make_config > "$BATS_TEST_TMPDIR/config.json"
	CFG=$BATS_TEST_TMPDIR/config.json
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	DPID=
}

# sv_teardown MOUNT...: a daemon a failed test left, then the mounts.
sv_teardown() {
	local m
	kill_daemon
	! declare -F stop_kvwatch >/dev/null || stop_kvwatch KILL
	for m in "$@"; do
		mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
	done
	common_teardown
}

# manifest N PREFIX: N blocks of 64 KiB with hashes PREFIX<i>.
manifest() {
	local i
	for ((i = 1; i <= $1; i++)); do
		head -c 65536 /dev/urandom > "$BATS_TEST_TMPDIR/p$2$i"
		printf '{"hash":"%s%011x","file":"%s"}\n' "$2" "$i" "$BATS_TEST_TMPDIR/p$2$i"
	done
}

# Put, list, get, verify, check and evict through one mount; the other
# sees the same.
sv_one_node() {
	manifest 40 abcde > "$BATS_TEST_TMPDIR/m"
	run kvput --root "$A" --config "$CFG" --batch "$BATS_TEST_TMPDIR/m"
	assert_success
	[ "$(grep -c '"status":"ok"' <<<"$output")" -eq 40 ]
	[ "$(kvls --root "$A" --blocks --ndjson | wc -l)" -eq 40 ]
	run kvls --root "$A" --verify
	assert_success
	md=$(kvls --root "$A" -J | jq -r '.models[0].model_dir')
	kvget --root "$B" --model-dir "$md" abcde00000000001 | cmp - "$BATS_TEST_TMPDIR/pabcde1"
	run kvevict --root "$A" --max-bytes 1M --low-bytes 1M --hot 0
	assert_success
	n=$(kvls --root "$A" --blocks --ndjson | wc -l)
	[ "$n" -gt 0 ] && [ "$n" -lt 40 ]
	[ "$(kvls --root "$B" --blocks --ndjson | wc -l)" -eq "$n" ]
	run kvls --root "$B" --check
	assert_success
}

# Writers on both nodes, kvevict on one, three rounds: every block either
# node sees is whole, and nothing outside the layout goes.
sv_two_nodes() {
	mkdir -p "$A/lost+found" "$A/notes"
	echo keep > "$A/notes/README"
	echo keep > "$A/stray.bin"
	manifest 30 aaaaa > "$BATS_TEST_TMPDIR/ma"
	manifest 30 bbbbb > "$BATS_TEST_TMPDIR/mb"
	kvput --root "$A" --config "$CFG" --batch < /dev/null
	for round in 1 2 3; do
		kvput --root "$A" --config "$CFG" --replace --batch "$BATS_TEST_TMPDIR/ma" > /dev/null &
		pa=$!
		kvput --root "$B" --config "$CFG" --replace --batch "$BATS_TEST_TMPDIR/mb" > /dev/null &
		pb=$!
		kvevict --root "$B" --max-bytes 2M --low-bytes 1M --hot 0 > /dev/null
		wait "$pa"
		wait "$pb"
		run kvls --root "$A" --verify
		assert_success
		run kvls --root "$B" --verify
		assert_success
	done
	kvls --root "$A" --blocks --ndjson | kvget --root "$B" --batch > "$BATS_TEST_TMPDIR/got"
	! grep -q '"error"' "$BATS_TEST_TMPDIR/got"
	[ "$(cat "$B/notes/README")" = keep ]
	[ "$(cat "$B/stray.bin")" = keep ]
	[ -d "$B/lost+found" ]
	[ "$(find "$A" -name '*.tmp' | wc -l)" -eq 0 ]
}

# kvoffd on node A writes behind onto the volume; a daemon on node B
# reads the blocks through.
sv_offd() {
	kvput --root "$A" --config "$CFG" --batch < /dev/null
	md=$(kvls --root "$A" -J | jq -r '.models[0].model_dir')
	KV_ROOT=$A start_daemon --cpu-bytes 4M --slot-bytes 256K --write-policy always
	manifest 8 ccccc > "$BATS_TEST_TMPDIR/m"
	run kvput --daemon "$SOCK" --model-dir "$md" --batch "$BATS_TEST_TMPDIR/m"
	assert_success
	stop_daemon
	[ "$DRC" -eq 0 ]
	[ "$(kvls --root "$B" --blocks --ndjson | wc -l)" -eq 8 ]
	run kvls --root "$B" --verify
	assert_success
	KV_ROOT=$B start_daemon --cpu-bytes 4M --slot-bytes 256K
	kvget --daemon "$SOCK" --model-dir "$md" ccccc00000000003 | cmp - "$BATS_TEST_TMPDIR/pccccc3"
	stop_daemon
}

# Two shards of kvevict, one on each node, split the volume and delete
# what one run deletes (the tree of tests/fixtures/shard_tree.py, whose
# atimes make the choice exact); each deletes only in its own buckets.
sv_shards() {
	local fix=$BATS_TEST_DIRNAME/../fixtures i p d
	python3 "$fix/shard_tree.py" "$A" 200 > "$BATS_TEST_TMPDIR/manifest"
	kvevict --root "$A" --dry-run --ndjson --max-bytes 1500K --low-bytes 1000K |
		jq -r .path | sort > "$BATS_TEST_TMPDIR/ref"
	[ "$(wc -l < "$BATS_TEST_TMPDIR/ref")" -gt 50 ]
	kvevict --root "$A" --shard 0/2 --ndjson --max-bytes 1500K --low-bytes 1000K \
		> "$BATS_TEST_TMPDIR/out.0" &
	i=$!
	kvevict --root "$B" --shard 1/2 --ndjson --max-bytes 1500K --low-bytes 1000K \
		> "$BATS_TEST_TMPDIR/out.1"
	wait "$i"
	for i in 0 1; do
		while read -r p; do
			d=${p%/*}
			d=${d%/*}
			[ $((0x${d##*/} * 2 / 4096)) -eq "$i" ] || fail "shard $i deleted $p"
		done < <(jq -r .path "$BATS_TEST_TMPDIR/out.$i")
	done
	cat "$BATS_TEST_TMPDIR"/out.* | jq -r .path | sort > "$BATS_TEST_TMPDIR/sharded"
	# precision: what the shards deleted that one run deletes too, >= 0.99
	awk -v a="$(wc -l < "$BATS_TEST_TMPDIR/sharded")" \
	    -v b="$(comm -12 "$BATS_TEST_TMPDIR/sharded" "$BATS_TEST_TMPDIR/ref" | wc -l)" \
		'BEGIN { exit !(a > 0 && b / a >= 0.99) }' ||
		fail "$(comm -3 "$BATS_TEST_TMPDIR/sharded" "$BATS_TEST_TMPDIR/ref")"
	[ $(($(wc -l < "$BATS_TEST_TMPDIR/sharded") - $(wc -l < "$BATS_TEST_TMPDIR/ref"))) -le 2 ]
	# both nodes see what is left
	[ "$(cd "$B" && find . -name '*.bin' | wc -l)" -eq \
	  $((200 - $(wc -l < "$BATS_TEST_TMPDIR/sharded"))) ]
}

# kvwatch on node B sees the reads there; kvevict on node A evicts by
# them: the acceptance scenario of kvwatch.bats across two mounts.
sv_kvwatch() {
	history "$A"
	KV_ROOT=$B start_kvwatch
	read_set "$B" 1
	stop_kvwatch
	[ "$WRC" -eq 0 ]
	[ "$(jq -r .path "$BATS_TEST_TMPDIR/kvwatch.out" | sort -u | wc -l)" -ge 1 ]
	evict_and_judge "$A"
}
