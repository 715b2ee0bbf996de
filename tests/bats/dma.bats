#!/usr/bin/env bats
# kvbench dma: its usage, the answer without a GPU, and with one a
# complete measurement in JSON; and the CUDA code paths of libkv's dma,
# tier, gds and numa modules against a simulated device (tests/cudamock/)
# where no GPU is.

load test_helper

MOCK=$KV_BIN/../tests/libcudart_mock.so
TESTS=$KV_BIN/../tests

needs_mock() {
	[ -f "$MOCK" ] || skip "built without CUDA: no simulated device"
}

# Run a command against the simulated CUDA device (tests/cudamock/).
with_mock() {
	env LD_PRELOAD="$MOCK" \
		ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" "$@"
}

teardown() {
	kill_daemon
	common_teardown
}

# offd_dma [WRAPPER...]: a kvoffd client that registers the daemon's
# shared pool with CUDA device 0 and DMAs a 1 MiB block into a slot and
# back out of it (bench/offd_client.c dma), run under WRAPPER.
offd_dma() {
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	start_daemon --cpu-bytes 8M
	run "$@" "$KV_BIN/../bench/offd_client" dma "$SOCK" \
		meta-llama_Llama-3.1-8B_0123456789ab 1048576
}

no_gpu() {
	if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
		skip "a GPU is present"
	fi
}

@test "kvbench dma --help lists every option and exits 0" {
	run kvbench dma --help
	assert_success
	assert_line --index 0 --partial "Usage: kvbench dma"
	for opt in --device --layers --total --repeat --lanes --min-block \
		--max-block --json --help --version; do
		assert_output --partial -- "$opt"
	done
	run kvbench dma -h
	assert_success
	assert_line --index 0 --partial "Usage: kvbench dma"
}

@test "kvbench dma without a GPU says so on stderr and exits 1" {
	no_gpu
	run --separate-stderr kvbench dma
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[[ "$stderr" == "kvbench: dma: no CUDA device ("*")" ]] || fail "stderr: $stderr"
	run --separate-stderr kvbench dma -J
	[ "$status" -eq 1 ]
	[ -z "$output" ]
}

@test "kvbench dma rejects bad usage with exit 2" {
	run --separate-stderr kvbench dma --bogus
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"unrecognized option '--bogus'"* ]] || fail "stderr: $stderr"
	[[ "$stderr" == *"Try 'kvbench --help'"* ]] || fail "stderr: $stderr"
	run kvbench dma --total 1K
	[ "$status" -eq 2 ]
	run kvbench dma --min-block 64M --max-block 1M
	[ "$status" -eq 2 ]
	run kvbench dma --layers 0
	[ "$status" -eq 2 ]
	run kvbench dma --device
	[ "$status" -eq 2 ]
	run kvbench dma extra
	[ "$status" -eq 2 ]
}

@test "kvbench dma -J measures every combination against the reference" {
	requires gpu python3
	run --separate-stderr kvbench dma -J -t 64M -r 1 --min-block 1M --max-block 4M
	assert_success
	python3 - "$output" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
ref = d["reference"]
assert ref["h2d_bytes_per_s"] > 0 and ref["d2h_bytes_per_s"] > 0, ref
rows = d["results"]
seen = {(r["direction"], r["host_memory"], r["submit"], r["layout"], r["method"])
        for r in rows}
for direction in ("h2d", "d2h"):
    for host in ("pinned", "pageable"):
        for submit in ("single", "batched"):
            for layout in ("contiguous", "fragments"):
                assert (direction, host, submit, layout, "copies") in seen
            if host == "pinned":
                assert (direction, host, submit, "fragments", "kernel") in seen
assert {r["block_bytes"] for r in rows} == {1 << 20, 2 << 20, 4 << 20}
assert all(r["bytes_per_s"] > 0 and r["elapsed_ns"] > 0 for r in rows)
assert {(r["direction"], r["layout"]) for r in d["ratios"]} == {
    (a, b) for a in ("h2d", "d2h") for b in ("contiguous", "fragments")}
PY
}

@test "simulated device: dma round trips, gather/scatter and pools pass" {
	needs_mock
	run with_mock "$TESTS/test_dma_cuda"
	assert_success
	assert_output --partial "device 0: kvtools simulated GPU, batch API yes"
}

@test "simulated device: GPU -> CPU -> file -> CPU -> GPU tier round trip" {
	needs_mock
	run with_mock "$TESTS/test_tier_gpu"
	assert_success
}

@test "simulated device: block files through gds report the staged path" {
	needs_mock
	run with_mock "$TESTS/test_gds"
	assert_success
	assert_output --partial "kvtools simulated GPU: staged: "
}

@test "simulated device: block files through a cuFile report the cuFile path" {
	needs_mock
	run with_mock env KV_TEST_CUFILE="$TESTS/libcufile_mock.so" "$TESTS/test_gds"
	assert_success
	assert_output --partial "kvtools simulated GPU: cuFile"
}

@test "simulated device: a kvoffd client DMAs a block into and out of the registered pool" {
	needs_mock
	offd_dma with_mock
	assert_success
	assert_output --regexp "^kvtools simulated GPU: registered [0-9]+ pool bytes; 1048576 bytes device -> slot -> device: equal$"
}

@test "GPU: a kvoffd client DMAs a block into and out of the registered pool" {
	requires gpu
	offd_dma
	assert_success
	assert_output --regexp ": registered [0-9]+ pool bytes; 1048576 bytes device -> slot -> device: equal$"
}

@test "simulated device: bench/gds_bw moves 2 MiB blocks by cuFile and staged, checked" {
	requires python3
	needs_mock
	run --separate-stderr with_mock "$KV_BIN/../bench/gds_bw" "$KV_ROOT" 3 \
		"$TESTS/libcufile_mock.so"
	assert_success
	python3 - "$output" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["cufile"] is True and d["blocks"] == 3 and d["block_bytes"] == 2 << 20, d
for k in ("cufile_write", "cufile_read", "staged_write", "staged_read"):
    assert d[k + "_bytes_per_s"] > 0, k
PY
	[ "$(find "$KV_ROOT" -name '*.bin' | wc -l)" -eq 3 ]
	# Without a cuFile: the reason, and the staged path alone.
	run --separate-stderr with_mock "$KV_BIN/../bench/gds_bw" "$KV_ROOT" 1 \
		libkv-test-absent-cufile.so.0
	assert_success
	python3 - "$output" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["cufile"] is False and "libkv-test-absent-cufile" in d["reason"], d
assert "cufile_read_bytes_per_s" not in d and d["staged_read_bytes_per_s"] > 0, d
PY
}

@test "simulated device: its PCI bus id maps to a NUMA node" {
	needs_mock
	run with_mock "$TESTS/test_numa"
	assert_success
	assert_output --regexp "GPU [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]: NUMA node [0-9]+"
}

@test "simulated device: kvbench dma -J measures every combination" {
	requires python3
	needs_mock
	run --separate-stderr with_mock kvbench dma -J -t 16M -r 1 --min-block 1M --max-block 4M
	assert_success
	python3 - "$output" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert d["device"]["name"] == "kvtools simulated GPU", d["device"]
assert d["batch_api"] is True
assert "numa_node" in d["device"] and "numa_bound" in d["device"], d["device"]
rows = d["results"]
assert len(rows) == 3 * 20, len(rows)
assert all(r["bytes"] == (16 << 20 if r["layout"] == "contiguous" else r["blocks"] * r["block_bytes"])
           for r in rows)
assert len(d["ratios"]) == 4
PY
}
