#!/usr/bin/env bats
# kvbench under mpirun: 1, 2 and 4 ranks on a tmpfs, their sums checked
# against the files on disk, the merged histograms against the pooled
# per-rank distributions, stonewalling, --cross-read and the metadata
# phases.  Ranks oversubscribe this machine's cores, which is fine for
# checking arithmetic, not for timing.

load test_helper

setup() {
	common_setup
	requires jq python3 mpirun
	# OpenMPI's runtime and its unloaded plugins leave allocations at
	# exit; under the sanitizers the ranks still check memory errors and
	# UB, but not leaks (the suites without mpirun check kvbench's).
	[ -z "${KV_SANITIZED:-}" ] || export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
	ldd "$KV_BIN/kvbench" | grep -q libmpi || skip "kvbench built without MPI (no mpicc)"
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	# Keep OpenMPI on this machine, quiet about absent fabrics.
	export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
	mount_tmpfs 1g
}

teardown() { common_teardown; }

# ranks N ARGS...: kvbench run on N ranks.
ranks() {
	local n=$1
	shift
	mpirun --oversubscribe -np "$n" "$KV_BIN/kvbench" run "$@"
}

@test "1, 2 and 4 ranks: the bytes all ranks wrote are the bytes on disk, each rank in its own dir" {
	local n doc
	for n in 1 2 4; do
		D=$MNT/n$n
		mkdir -p "$D"
		doc=$(ranks "$n" --dir "$D" --block-size 256K --size 2M --threads 2 --qd 2 \
			--phases write --keep -J)
		bytes=$(jq '.phases[0].bytes' <<<"$doc")
		writes=$(jq '.phases[0].writes' <<<"$doc")
		[ "$bytes" -gt 0 ]
		on_disk=$(find "$D" -name '*.bin' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
		assert_equal "$bytes" "$on_disk"
		assert_equal "$writes" "$(find "$D" -name '*.bin' | wc -l)"
		assert_equal "$(find "$D" -maxdepth 1 -type d -name '*_r[0-9]*' | wc -l)" "$n"
		if [ "$n" -gt 1 ]; then
			assert_equal "$(jq .config.ranks <<<"$doc")" "$n"
			assert_equal "$(jq '.phases[0].ranks | length' <<<"$doc")" "$n"
			assert_equal "$(jq '[.phases[0].ranks[].bytes] | add' <<<"$doc")" "$bytes"
			assert_equal "$(jq '[.phases[0].ranks[].ops] | add' <<<"$doc")" \
				"$(jq '.phases[0].ops' <<<"$doc")"
			# The phase lasted as long as its longest rank.
			assert_equal "$(jq '[.phases[0].ranks[].elapsed_ns] | max' <<<"$doc")" \
				"$(jq '.phases[0].elapsed_ns' <<<"$doc")"
			for r in $(seq 0 $((n - 1))); do
				assert_equal "$(find "$D"/*_r"$r" -name '*.bin' -printf '%s\n' |
					awk '{ s += $1 } END { print s + 0 }')" \
					"$(jq ".phases[0].ranks[$r].bytes" <<<"$doc")"
			done
		else
			assert_equal "$(jq .config.ranks <<<"$doc")" null
		fi
	done
}

@test "4 ranks: merged percentiles are those of the pooled per-rank distributions" {
	ranks 4 --dir "$MNT" --block-size 64K --size 4M --threads 2 --qd 2 --lookups 2000 \
		-J > "$BATS_TEST_TMPDIR/run.json"
	python3 - "$BATS_TEST_TMPDIR/run.json" <<'PY'
import json, math, sys
doc = json.load(open(sys.argv[1]))
checked = 0
for ph in doc["phases"]:
    assert len(ph["ranks"]) == 4, ph["phase"]
    for lat, merged in ph["latency"].items():
        pooled = {}
        for r in ph["ranks"]:
            for lo, hi, c in r["buckets"].get(lat, []):
                pooled[(lo, hi)] = pooled.get((lo, hi), 0) + c
        ranks = [r["latency"][lat] for r in ph["ranks"] if lat in r["latency"]]
        n = sum(pooled.values())
        assert n == merged["count"] == sum(r["count"] for r in ranks), (ph["phase"], lat)
        assert merged["min_ns"] == min(r["min_ns"] for r in ranks)
        assert merged["max_ns"] == max(r["max_ns"] for r in ranks)
        for p, key in ((50, "p50_ns"), (90, "p90_ns"), (99, "p99_ns"), (99.9, "p999_ns")):
            rank = max(1, math.ceil(p / 100 * n))
            seen = 0
            for lo, hi in sorted(pooled):
                seen += pooled[(lo, hi)]
                if seen >= rank:
                    break
            # The histogram's error: the value lies in the pooled
            # distribution's bucket for that rank.
            assert lo <= merged[key] <= hi, (ph["phase"], lat, key, lo, merged[key], hi)
            checked += 1
assert checked > 40, checked
PY
}

@test "stonewalling: a phase ends for every rank when the first finishes its share" {
	# Rank 0 has 4 files to write, rank 1 2048, one at a time: rank 1 is
	# stopped long before its share is done, and what it did is counted.
	mpirun --oversubscribe \
		-np 1 "$KV_BIN/kvbench" run --dir "$MNT" --block-size 256K --size 1M \
			--threads 1 --qd 1 --phases write -J : \
		-np 1 "$KV_BIN/kvbench" run --dir "$MNT" --block-size 256K --size 512M \
			--threads 1 --qd 1 --engine psync --phases write > "$BATS_TEST_TMPDIR/run.json"
	doc=$(cat "$BATS_TEST_TMPDIR/run.json")
	assert_equal "$(jq '.phases[0].ranks[0].ops' <<<"$doc")" 4
	ops1=$(jq '.phases[0].ranks[1].ops' <<<"$doc")
	[ "$ops1" -lt 2048 ] || fail "rank 1 wrote all its $ops1 files"
	assert_equal "$(jq '.phases[0].ops' <<<"$doc")" $((4 + ops1))
	assert_equal "$(jq '.phases[0].bytes' <<<"$doc")" $(((4 + ops1) * 262144))
}

@test "--cross-read: each rank looks up and reads the blocks the next rank wrote" {
	# Rank 0 holds 4 blocks, rank 1 8; reading across, rank 1 finds only
	# the first 4 of its 8 keys in rank 0's dir.
	local args="--block-size 64K --threads 1 --qd 1 --lookups 64 --phases lookup -J"
	mpirun --oversubscribe -np 1 "$KV_BIN/kvbench" run --dir "$MNT" --size 256K $args : \
		-np 1 "$KV_BIN/kvbench" run --dir "$MNT" --size 512K $args --cross-read \
		> "$BATS_TEST_TMPDIR/cross.json"
	doc=$(cat "$BATS_TEST_TMPDIR/cross.json")
	ops=$(jq '.phases[0].ranks[1].ops' <<<"$doc")
	hits=$(jq '.phases[0].ranks[1].hits' <<<"$doc")
	[ "$ops" -gt 8 ]
	[ "$hits" -lt $(((ops + 1) / 2)) ] || fail "rank 1 found all $hits present keys"
	# Without it, every key that should be there is.
	mpirun --oversubscribe -np 1 "$KV_BIN/kvbench" run --dir "$MNT" --size 256K $args : \
		-np 1 "$KV_BIN/kvbench" run --dir "$MNT" --size 512K $args \
		> "$BATS_TEST_TMPDIR/own.json"
	doc=$(cat "$BATS_TEST_TMPDIR/own.json")
	ops=$(jq '.phases[0].ranks[1].ops' <<<"$doc")
	assert_equal "$(jq '.phases[0].ranks[1].hits' <<<"$doc")" $(((ops + 1) / 2))
	# Reads across ranks move whole blocks; a verdict takes each rank
	# for one GPU.
	run ranks 2 --dir "$MNT" --block-size 64K --size 512K --threads 1 --qd 2 \
		--phases write,read --cross-read --prefill-tokens-per-s 5000 -J
	assert_success
	assert_equal "$(jq '.config.cross_read' <<<"$output")" true
	assert_equal "$(jq '.phases[1].bytes' <<<"$output")" $(($(jq '.phases[1].reads' <<<"$output") * 65536))
	assert_equal "$(jq '.verdict.read_Bps' <<<"$output")" \
		"$(jq '.phases[1].throughput_Bps / 2 | floor' <<<"$output")"
}

@test "metadata phases: creates, checks and removes from 4 ranks at once, and the table shows each rank" {
	run ranks 4 --dir "$MNT" --block-size 64K --size 2M --threads 2 --phases meta -J
	assert_success
	doc=$output
	assert_equal "$(jq -c '[.phases[].phase]' <<<"$doc")" '["create","stat","unlink"]'
	assert_equal "$(jq -c '[.phases[] | .ranks | length]' <<<"$doc")" '[4,4,4]'
	created=$(jq '.phases[0].writes' <<<"$doc")
	[ "$created" -gt 0 ] && [ "$created" -le 128 ]
	assert_equal "$(jq '.phases[0].latency.create.count' <<<"$doc")" "$created"
	# A check or a removal finds only what was created.
	jq -e --argjson c "$created" '.phases[1].hits <= $c and .phases[2].hits <= $c and
		.phases[1].hits + .phases[1].misses == .phases[1].ops' <<<"$doc" >/dev/null
	[ -z "$(find "$MNT" -name '*.bin')" ]
	run ranks 2 --dir "$MNT" --block-size 64K --size 1M --threads 1 --phases write,meta
	assert_success
	assert_output --partial "2 ranks, each phase started together"
	assert_output --partial "slowest"
	assert_line --regexp '^unlink +[0-9]+ '
}
