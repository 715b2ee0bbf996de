#!/usr/bin/env bats
# Every bench/*.sh script runs to its end in its smallest mode, against
# the in-tree build, so a script cannot rot unseen while the tools it
# drives change (issue 28: bench/put.sh failed on its first command).
# A script whose peers or privileges are absent here skips with the
# reason.  What each figure says is the script's business, not this
# suite's: it checks that the run completes and prints its report.

load test_helper

REPO=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)

setup() {
	common_setup
	# The scripts take BUILD relative to the repository root.
	BENCH_BUILD=$(realpath --relative-to="$REPO" "$KV_BIN/..")
	export BUILD=$BENCH_BUILD
	SCRATCH=$BATS_TEST_TMPDIR/scratch
}

# needs_direct: skip where the scratch dir refuses O_DIRECT (tmpfs).
needs_direct() {
	local fs
	fs=$(stat -f -c %T "$BATS_TEST_TMPDIR")
	[ "$fs" != tmpfs ] || skip "fio --direct=1 needs a filesystem with O_DIRECT, $BATS_TEST_TMPDIR is tmpfs"
}

needs_mpi() {
	requires mpirun
	ldd "$KV_BIN/kvbench" | grep -q libmpi || skip "kvbench built without MPI (no mpicc)"
}

needs_latfs() {
	requires mount fusermount3
	[ -x "$KV_BIN/../latfs/latfs" ] || skip "latfs not built (libfuse3 absent)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
}

# The meta-check: a bench script added without a test here fails.
@test "bench: every bench/*.sh script has a test in this suite" {
	local f name missing=
	for f in "$REPO"/bench/*.sh; do
		name=${f##*/}
		grep -q "^@test \"bench/$name " "$BATS_TEST_FILENAME" || missing="$missing $name"
	done
	[ -z "$missing" ] || fail "no test runs:$missing"
}

@test "bench/put.sh runs (N=16, RUNS=1)" {
	requires fio jq
	needs_direct
	run env N=16 RUNS=1 QD=4 "$REPO/bench/put.sh" "$SCRATCH"
	assert_success
	assert_output --partial "kvput --batch"
	assert_output --partial "kvget --batch"
}

@test "bench/archive.sh runs (N=16, RUNS=1) and probes the blocks at their size" {
	requires zstd tar python3
	run env N=16 RUNS=1 "$REPO/bench/archive.sh" "$SCRATCH"
	assert_success
	# 16 blocks of 2M each, not one block of the file's whole size.
	assert_output --partial "16 blocks, 32M"
}

@test "bench/ls.sh runs (FILES=2000, RUNS=1)" {
	run env FILES=2000 RANKS=2 RUNS=1 HYPERFINE=none "$REPO/bench/ls.sh" "$SCRATCH"
	assert_success
	assert_output --partial "kvls/find"
}

@test "bench/lru_pipeline.sh frees the oldest blocks down to its target" {
	mount_tmpfs 4m
	local d=$MNT/m_r0/abc/de_g0 i
	mkdir -p "$d"
	for i in 1 2 3 4 5 6; do
		head -c 512K /dev/zero > "$d/$i.bin"
		touch -a -d "@$((1700000000 + i))" "$d/$i.bin"
	done
	run "$REPO/bench/lru_pipeline.sh" "$MNT" 40
	assert_success
	# 3 MiB of 4 MiB used; 40% is 1.6 MiB: the oldest go, the newest stay.
	[ ! -e "$d/1.bin" ] && [ ! -e "$d/2.bin" ]
	[ -e "$d/6.bin" ] && [ -e "$d/5.bin" ]
}

@test "bench/evict.sh runs (FILES=2000, RUNS=1)" {
	requires mount
	run env FILES=2000 RUNS=1 "$REPO/bench/evict.sh"
	assert_success
	assert_output --partial "kvevict"
}

@test "bench/events.sh runs (FILES=2000, RUNS=1)" {
	requires mount
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null ||
		skip "needs /usr/bin/python3 with python3-zmq and python3-msgpack"
	run env FILES=2000 RUNS=1 SLOW_S=0.01 "$REPO/bench/events.sh"
	assert_success
	assert_output --partial "live"
}

@test "bench/shard.sh runs (FILES=2000, RUNS=1, SHARDS=2)" {
	requires mount
	local fs=tmpfs
	[ -x "$KV_BIN/../latfs/latfs" ] && [ -c /dev/fuse ] && fs="tmpfs latfs"
	run env FILES=2000 RUNS=1 SHARDS=2 DELAY_US=50 FS="$fs" "$REPO/bench/shard.sh"
	assert_success
	assert_output --partial "precision"
}

@test "bench/latfs.sh runs (FILES=1000, RUNS=1)" {
	needs_latfs
	run env FILES=1000 RUNS=1 DELAY_US=50 "$REPO/bench/latfs.sh"
	assert_success
	assert_output --partial "kvevict"
}

@test "bench/statx-qd.sh runs (FILES=200, QS=8, RUNS=1)" {
	needs_latfs
	run env FILES=200 QS=8 RUNS=1 DELAY_US=50 "$REPO/bench/statx-qd.sh"
	assert_success
	assert_output --partial "threads/s"
}

@test "bench/scale.sh runs (SIZES=2000, no perf)" {
	requires mount
	run env SIZES=2000 SYSCALLS=0 "$REPO/bench/scale.sh" "$SCRATCH"
	assert_success
	assert_output --partial "kvevict"
}

@test "bench/kvbench-vs-fio.sh runs (FILES=16, 1 s phases, REPEAT=1)" {
	requires fio jq
	needs_direct
	run env FILES=16 THREADS=1 QD=2 SECONDS_PER_PHASE=1 REPEAT=1 \
		"$REPO/bench/kvbench-vs-fio.sh" "$SCRATCH"
	# Exit 1 is its verdict (the tools differ by more than 10%), which a
	# one-second run on a shared machine may well give.
	[ "$status" -eq 0 ] || [ "$status" -eq 1 ] || fail "exit $status: $output"
	assert_output --partial "fio"
	assert_output --regexp '[0-9]'
}

@test "bench/kvbench-mpi.sh runs (RANKS=1, 1 s phases, REPEAT=1)" {
	requires fio
	needs_direct
	needs_mpi
	run env RANKS=1 FILES_PER_RANK=8 THREADS=1 QD=2 SECONDS_PER_PHASE=1 REPEAT=1 \
		"$REPO/bench/kvbench-mpi.sh" "$SCRATCH"
	assert_success
}

@test "bench/offd.sh runs (one client, 4 blocks, REPEAT=1)" {
	requires redis-server redis-benchmark
	run env CLIENTS=1 BLOCKS=4 ITERS=1 REPEAT=1 "$REPO/bench/offd.sh"
	assert_success
	assert_output --partial "memcpy"
}

@test "bench/offd-batch.sh runs (SMOKE=1)" {
	requires redis-server redis-benchmark
	run env SMOKE=1 REPEAT=1 "$REPO/bench/offd-batch.sh"
	assert_success
	assert_output --partial "presence"
}

@test "bench/offd-stall.sh runs (PUTS=20)" {
	[ -e "$KV_BIN/../tests/libfaultinj.so" ] || skip "fault injector not built"
	run env PUTS=20 "$REPO/bench/offd-stall.sh"
	assert_success
}

@test "bench/offd-tiers.sh runs (a small set, RUNS=1)" {
	[ -e "$KV_BIN/../tests/libfaultinj.so" ] || skip "fault injector not built"
	run env KEYS=128 BLOCK=16K RAM=512K LOCAL=1M OPS=200 CLIENTS=2 THREADS=2 \
		LOCAL_US=10 SHARED_MS=1 RUNS=1 "$REPO/bench/offd-tiers.sh" "$SCRATCH"
	assert_success
	assert_output --partial "local"
}

@test "bench/kvwatch.sh runs (BIG=8, SMALL=500, RUNS=1) and every open is recorded" {
	requires root mount jq
	run env BIG=8 SMALL=500 ROUNDS=2 RUNS=1 INDEX_BLOCKS=2000 "$REPO/bench/kvwatch.sh" "$SCRATCH"
	assert_success
	assert_output --partial "ratio"
	assert_output --partial "opens/s recorded"
	assert_output --partial "2000 blocks: index"
	refute_output --partial "warning"
}
