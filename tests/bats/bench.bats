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
	# The plain run checks every script; under the sanitizers a script
	# would only re-run, slower, tools their own suites cover.
	[ -z "${KV_SANITIZED:-}" ] || skip "bench scripts are checked by the plain run (make check)"
	common_setup
	# The scripts take BUILD relative to the repository root.
	BENCH_BUILD=$(realpath --relative-to="$REPO" "$KV_BIN/..")
	export BUILD=$BENCH_BUILD
	SCRATCH=$BATS_TEST_TMPDIR/scratch
	# Under check-asan the scripts only have to run: the suites of the
	# programs check for leaks, and MPI's runtime leaks at exit.
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
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
	local hp
	hp=$(cat /proc/sys/vm/nr_hugepages)
	run env N=16 RUNS=1 QD=4 "$REPO/bench/put.sh" "$SCRATCH"
	assert_success
	assert_output --partial "kvput --batch"
	assert_output --partial "kvget --batch"
	assert_output --regexp "huge pages +[0-9]+ +kvget/fio|with huge-page buffers: not run"
	# the huge pages it reserved for fio are given back, its mount gone
	[ "$(cat /proc/sys/vm/nr_hugepages)" -eq "$hp" ]
	run grep -c " $SCRATCH/hp " /proc/mounts
	[ "$output" = 0 ]
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
	# Every run, sharded or not, ends at --low 50 or under.
	local rows ok
	rows=$(grep -cE '^(tmpfs|latfs) ' <<<"$output")
	ok=$(grep -cE '^(tmpfs|latfs) .* (50\.00|[1-4][0-9]\.[0-9]{2})%$' <<<"$output")
	[ "$rows" -gt 0 ] && [ "$ok" -eq "$rows" ] || fail "$output"
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

@test "bench/s3.sh runs (OBJECTS=200, COUNT=8, RUNS=1)" {
	# It starts its own gateway (tests/s3/s3server.sh); exit 77 is one
	# line saying what is missing: Ceph, rclone, the aws CLI or boto3.
	run env OBJECTS=200 COUNT=8 RUNS=1 "$REPO/bench/s3.sh" "$SCRATCH"
	[ "$status" -ne 77 ] || skip "$(tail -n 1 <<< "$output")"
	assert_success
	assert_output --partial "ratio list 200 objects: rclone lsf -R / kvls ="
	assert_output --partial "ratio list 200 objects: aws s3api list-objects-v2 / kvls ="
	assert_output --partial "ratio PUT 8 x 16K: rclone copy / kvput --batch ="
	assert_output --partial "ratio GET 8 x 16K: rclone copy / kvget --batch ="
	assert_output --partial "ratio PUT 8 x 2M: rclone copy / kvput --batch ="
	assert_output --partial "ratio GET 8 x 2M: rclone copy / kvget --batch ="
	assert_output --partial "ratios, peer time / kvtools time"
}

@test "bench/offd-s3.sh runs (COUNT=200, RAM=1M, RUNS=1)" {
	# It starts its own gateway (tests/s3/s3server.sh); exit 77 is one
	# line saying what is missing: Ceph, rclone or boto3.
	run env COUNT=200 RAM=1M RUNS=1 "$REPO/bench/offd-s3.sh" "$SCRATCH"
	[ "$status" -ne 77 ] || skip "$(tail -n 1 <<< "$output")"
	assert_success
	assert_output --regexp "ratio moving [1-9][0-9]* x 16K into the bucket: rclone move / kvoffd = [0-9.]+"
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

@test "bench/vllm-tier.sh runs (COUNT16K=64, COUNT2M=8, RUNS=1)" {
	requires root fio jq bc mkfs.ext4
	/usr/bin/python3 -c 'import numpy' 2>/dev/null || skip "needs python3-numpy"
	run env COUNT16K=64 COUNT2M=8 RUNS=1 "$REPO/bench/vllm-tier.sh"
	assert_success
	assert_line --regexp '^ext4 +2M +[0-9.]+ +[0-9.]+ '
	assert_line --partial "of memcpy"
	assert_line --regexp '^lookup_us [0-9.]+$'
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

# bench/gpu.sh (issue 29) needs a GPU to measure; here it answers 77,
# and its report is checked against a recorded run (tests/fixtures/gpu/,
# sample figures, not measurements) and, every step, on the simulated
# device with a stand-in nvidia-smi.
GPU_REC=$REPO/tests/fixtures/gpu

@test "bench/gpu.sh without a GPU exits 77 with one line saying why" {
	run env NVIDIA_SMI=kv-no-such-nvidia-smi OUT="$SCRATCH" "$REPO/bench/gpu.sh"
	[ "$status" -eq 77 ]
	assert_output "bench/gpu.sh: no NVIDIA GPU: kv-no-such-nvidia-smi not found"
	[ ! -e "$SCRATCH" ]
	run env NVIDIA_SMI=false "$REPO/bench/gpu.sh" "$SCRATCH"
	[ "$status" -eq 77 ]
	assert_output "bench/gpu.sh: no NVIDIA GPU: false -L: "
	if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
		run "$REPO/bench/gpu.sh" "$SCRATCH"
		[ "$status" -eq 77 ]
		[ "${#lines[@]}" -eq 1 ]
		assert_output --regexp "^bench/gpu.sh: no NVIDIA GPU: "
	fi
	run env -u OUT "$REPO/bench/gpu.sh"
	[ "$status" -eq 2 ]
	run "$REPO/bench/gpu.sh" --from "$GPU_REC"
	[ "$status" -eq 2 ]
}

@test "bench/gpu.sh --from a recorded run writes the RESULTS rows, gpu.json and a line per target" {
	requires python3
	run "$REPO/bench/gpu.sh" --from "$GPU_REC" "$SCRATCH"
	# The sample misses one target (d2h fragments): exit 1.
	[ "$status" -eq 1 ] || fail "exit $status: $output"
	assert_line --index 0 --partial "device: NVIDIA H100 80GB HBM3 (driver 550.90.07, PCIe Gen5 x16), 00000000:19:00.0; PCIe Gen5 x16 under load (max Gen5 x16, idle Gen1 x16); SM clock 1980 MHz under load"
	assert_line "target contiguous h2d: 2M pinned batched (copies) 52.6 GB/s = 0.99 of the large copy's 53.2 GB/s (target 0.9): met"
	assert_line "target contiguous d2h: 2M pinned batched (copies) 53.5 GB/s = 0.99 of the large copy's 54.1 GB/s (target 0.9): met"
	assert_line "target fragments h2d: 2M pinned batched (kernel) 45.6 GB/s = 0.86 of the large copy's 53.2 GB/s (target 0.8): met"
	assert_line "target fragments d2h: 2M pinned batched (kernel) 41.6 GB/s = 0.77 of the large copy's 54.1 GB/s (target 0.8): NOT met"
	assert_line "reference h2d: vLLM DMA offload about 50 GB/s one direction at 2 MB blocks (published, H100); here 52.6 GB/s (1.05 of it)"
	assert_line "reference d2h: pinned copy about 55 GB/s on PCIe Gen5 (published); here the large copy 54.1 GB/s on Gen5 x16 (0.98 of it)"
	assert_line --partial "gds: cuFile absent (libcufile.so.0: cannot open shared object file"
	assert_line "step tests: ok: 4 unit tests and tests/bats/dma.bats on the real runtime (4 bats skips)"
	diff -u - "$SCRATCH/rows.md" <<'ROWS'
| NVIDIA H100 80GB HBM3 (driver 550.90.07, PCIe Gen5 x16) | h2d | 0.99 (52.6 / 53.2 GB/s) | 0.86 (45.6 / 53.2 GB/s) |
| NVIDIA H100 80GB HBM3 (driver 550.90.07, PCIe Gen5 x16) | d2h | 0.99 (53.5 / 54.1 GB/s) | 0.77 (41.6 / 54.1 GB/s) |
ROWS
	# Every measurement a row, under the header.
	[ "$(wc -l < "$SCRATCH/dma-table.md")" -eq 162 ]
	grep -qx '| d2h | pageable | batched | fragments | copies | 64M | 256 | 20.44 | 0.38 |' \
		"$SCRATCH/dma-table.md"
	[ "$(grep -c ': met$\|: NOT met$' "$SCRATCH/summary.txt")" -eq 4 ]
	python3 - "$SCRATCH/gpu.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["device"]["pcie_gen"] == 1 and d["device_under_load"]["pcie_gen"] == 5, d
assert d["device_under_load"]["power_w"] == 118.4, d["device_under_load"]
assert d["device"]["driver_version"] == "550.90.07"
assert [(t["direction"], t["layout"], t["met"]) for t in d["targets"]] == [
    ("h2d", "contiguous", True), ("d2h", "contiguous", True),
    ("h2d", "fragments", True), ("d2h", "fragments", False)], d["targets"]
assert len(d["dma"]["results"]) == 160 and d["gds"]["cufile"] is False
assert [s["step"] for s in d["steps"]] == ["build", "tests", "dma", "gds"]
PY
}

@test "bench/gpu.sh --from reports a failed step with exit 3, and refuses records it cannot read" {
	requires python3
	local rec=$BATS_TEST_TMPDIR/rec
	mkdir -p "$rec"
	cp "$GPU_REC"/* "$rec/"
	echo "tests fail failed: test_tier_gpu(1) (tests.log)" >> "$rec/steps.txt"
	run "$REPO/bench/gpu.sh" --from "$rec" "$SCRATCH/a"
	[ "$status" -eq 3 ] || fail "exit $status: $output"
	assert_line "step tests: fail: failed: test_tier_gpu(1) (tests.log)"
	# A build that failed: no figures, the steps are the report.
	rm "$rec/dma.json"
	echo "build fail make CUDA=1: see build.log" > "$rec/steps.txt"
	run "$REPO/bench/gpu.sh" --from "$rec" "$SCRATCH/b"
	[ "$status" -eq 3 ]
	assert_output "step build: fail: make CUDA=1: see build.log"
	# No figures and no failed step, figures cut short, or figures that
	# disagree with kvbench's own ratios: refused.
	: > "$rec/steps.txt"
	run --separate-stderr "$REPO/bench/gpu.sh" --from "$rec" "$SCRATCH/c"
	[ "$status" -eq 3 ]
	[[ "$stderr" == "bench/gpu.sh: no dma.json in "* ]] || fail "stderr: $stderr"
	head -c 2000 "$GPU_REC/dma.json" > "$rec/dma.json"
	run --separate-stderr "$REPO/bench/gpu.sh" --from "$rec" "$SCRATCH/d"
	[ "$status" -eq 3 ]
	[[ "$stderr" == "bench/gpu.sh: dma.json: "* ]] || fail "stderr: $stderr"
	python3 - "$GPU_REC/dma.json" "$rec/dma.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["reference"]["d2h_elapsed_ns"] //= 2
json.dump(d, open(sys.argv[2], "w"))
PY
	run --separate-stderr "$REPO/bench/gpu.sh" --from "$rec" "$SCRATCH/e"
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"ratio"*"disagrees with its rows" ]] || fail "stderr: $stderr"
}

@test "bench/gpu.sh runs every step on the simulated device (a stand-in nvidia-smi)" {
	requires python3
	local mock=$KV_BIN/../tests/libcudart_mock.so
	[ -f "$mock" ] || skip "built without CUDA: no simulated device"
	run env REUSE_BUILD=1 GPU_BUILD="$BENCH_BUILD" GPU_SUITES= DMA_TOTAL=64M DMA_REPEAT=1 \
		GDS_DIR="$BATS_TEST_TMPDIR/gds" NVIDIA_SMI="$GPU_REC/nvidia-smi" LD_PRELOAD="$mock" \
		KV_SMI_PIDFILE="$BATS_TEST_TMPDIR/smi.pid" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		"$REPO/bench/gpu.sh" "$SCRATCH"
	# Whether the simulated device meets a target is no matter here.
	[ "$status" -eq 0 ] || [ "$status" -eq 1 ] || fail "exit $status: $output"
	diff -u - <(cut -d' ' -f1,2 "$SCRATCH/steps.txt") <<'STEPS'
build reused
tests ok
dma ok
gds absent
STEPS
	assert_line "step tests: ok: 4 unit tests and no bats suite on the simulated device (LD_PRELOAD) (0 bats skips)"
	assert_line "note: nvidia-smi names NVIDIA H100 80GB HBM3, kvbench dma measured kvtools simulated GPU"
	[ "$(grep -c ': met$\|: NOT met$' "$SCRATCH/summary.txt")" -eq 4 ]
	[ "$(wc -l < "$SCRATCH/rows.md")" -eq 2 ]
	for f in env.txt nvidia-smi.csv nvidia-smi-load.csv nvidia-smi-q.txt tests.log \
		dma.json gds.json gpu.json dma-table.md summary.txt; do
		[ -s "$SCRATCH/$f" ] || fail "$f missing or empty"
	done
	grep -q '^== test_tier_gpu: exit 0$' "$SCRATCH/tests.log"
	[ ! -e "$BATS_TEST_TMPDIR/gds" ]
	# The sampler under load stopped with the script: one left running
	# held this suite's output open for its 600 s.
	! kill -0 "$(cat "$BATS_TEST_TMPDIR/smi.pid")" 2>/dev/null
}
