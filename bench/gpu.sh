#!/usr/bin/env bash
# bench/gpu.sh: every GPU check in one command (issue 29), for the rare
# and short loan of a GPU machine (about 30 minutes, 10 per command).
# In under 8 minutes it runs, writing everything under $OUT (else DIR):
#
#   1. make CUDA=1 from a clean build dir ($GPU_BUILD, build-gpu):
#      build.log (REUSE_BUILD=1 takes $GPU_BUILD as it is, for a rerun
#      on the same machine);
#   2. the GPU tests against the real CUDA runtime, not the simulated
#      device: the unit tests test_dma_cuda, test_tier_gpu (the GPU tier
#      put/get round trip), test_gds and test_numa, where a skip (77) is
#      a failure, and the bats suites $GPU_SUITES (tests/bats/dma.bats),
#      whose `requires gpu` tests run here (kvbench dma -J, and a kvoffd
#      client that registers the shared pool with CUDA and DMAs a block
#      into and out of a slot): tests.log;
#   3. kvbench dma -J, 16 KiB to 64 MiB, H2D and D2H, pinned and
#      pageable, single and batched, contiguous and per-layer K/V
#      fragments, against one large pinned cudaMemcpy in the same run:
#      dma.json; nvidia-smi (device, driver, clocks, PCIe link generation
#      and width) idle and sampled under that load: nvidia-smi.csv,
#      nvidia-smi-load.csv, nvidia-smi-q.txt;
#   4. GDS: bench/gds_bw writes and reads 64 blocks of 2 MiB in the
#      vLLM layout file <-> GPU by cuFile against the pinned bounce
#      buffer, every byte checked (gds.json), and test_gds runs again made
#      to take the system's cuFile (gds.log); where cuFile or its driver
#      is absent, one line says so and the run goes on;
#   5. the report: steps.txt (one line per step), rows.md (the rows of
#      bench/RESULTS.md's DMA table), dma-table.md (every measurement),
#      gpu.json (all of it in one document) and summary.txt, a line per
#      target: contiguous 2 MiB pinned batched >= 0.9 of the large copy,
#      per-layer fragments >= 0.8, and the published H100 figures (about
#      50 GB/s one direction at 2 MB blocks for vLLM's DMA offload, about
#      55 GB/s pinned on PCIe Gen5) beside ours.
#
# --from REC renders step 5 alone from a recorded run's files in REC
# (dma.json, nvidia-smi*.csv, and steps.txt, gds.json where present):
# the suite checks the report that way where no GPU is.
#
# Exit: 0 every step passed and every target met; 1 every step passed
# and a target was missed; 2 usage; 3 a step failed; 77 no GPU here.
#
# Usage: [OUT=DIR] [GPU_BUILD=build-gpu] [REUSE_BUILD=1] [JOBS=N]
#        [GPU_SUITES=tests/bats/dma.bats] [DMA_TOTAL=256M] [DMA_REPEAT=3]
#        [GDS_DIR=DIR] [NVIDIA_SMI=nvidia-smi] bench/gpu.sh [DIR]
#        bench/gpu.sh --from REC DIR
set -uo pipefail
cd "$(dirname "$0")/.." || exit 3
REPO=$PWD
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
GPU_BUILD=${GPU_BUILD:-build-gpu}
GPU_SUITES=${GPU_SUITES-tests/bats/dma.bats}
JOBS=${JOBS:-$(nproc)}
DMA_TOTAL=${DMA_TOTAL:-256M}
DMA_REPEAT=${DMA_REPEAT:-3}
PY=${PY:-python3}
SMI_FIELDS=name,driver_version,pci.bus_id,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,temperature.gpu,power.draw

usage() {
	echo "usage: [OUT=DIR] bench/gpu.sh [DIR] | bench/gpu.sh --from REC DIR" >&2
	exit 2
}

from=
if [ "${1:-}" = --from ]; then
	[ $# -eq 3 ] || usage
	from=$2
	shift 2
fi
[ $# -le 1 ] || usage
out=${OUT:-${1:-}}
[ -n "$out" ] || usage

# The report: from the files of a run in $1, the rows, the summary and
# gpu.json; exit 0 all met, 1 a target missed, 3 a step failed or the
# records are unreadable.
render() {
	"$PY" - "$1" <<'PY'
import csv, json, os, sys

out = sys.argv[1]
FIELDS = ("name driver_version pci_bus_id clocks_sm_mhz clocks_mem_mhz "
          "clocks_max_sm_mhz clocks_max_mem_mhz pcie_gen pcie_gen_max "
          "pcie_width pcie_width_max temperature_c power_w").split()
TARGETS = {"contiguous": 0.9, "fragments": 0.8}
TARGET_BLOCK = 2 << 20
VLLM_DMA_GBPS = 50.0     # published: vLLM DMA offload, H100, 2 MB blocks
PCIE5_PINNED_GBPS = 55.0 # published: pinned cudaMemcpy on PCIe Gen5 x16


def die(msg):
    print("bench/gpu.sh: " + msg, file=sys.stderr)
    sys.exit(3)


def smi(path):
    """nvidia-smi --query-gpu=... --format=csv,noheader,nounits lines."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for rec in csv.reader(f, skipinitialspace=True):
            if not rec:
                continue
            if len(rec) != len(FIELDS):
                notes.append("%s: %d fields, not %d: %s" % (os.path.basename(path),
                                                             len(rec), len(FIELDS),
                                                             ", ".join(rec)))
                return []
            row = {}
            for k, v in zip(FIELDS, rec):
                v = v.strip()
                if k not in ("name", "driver_version", "pci_bus_id"):
                    try:
                        v = float(v)
                        v = int(v) if v.is_integer() else v
                    except ValueError:
                        v = None    # "[N/A]", "[Not Supported]"
                row[k] = v
            rows.append(row)
    return rows


def gbps(x):
    return x / 1e9


notes = []
idle = smi(os.path.join(out, "nvidia-smi.csv"))
load = smi(os.path.join(out, "nvidia-smi-load.csv"))
# Without nvidia-smi's record the figures still stand, unlabelled.
dev = idle[0] if idle else dict.fromkeys(FIELDS, "unknown")
# Under load: the sample with the highest SM clock, where the link has
# left its idle power state.
busy = max(load, key=lambda r: r["clocks_sm_mhz"] or 0) if load else None
link = busy or dev

steps = []
if os.path.exists(os.path.join(out, "steps.txt")):
    with open(os.path.join(out, "steps.txt")) as f:
        for line in f:
            word = line.split()
            if len(word) >= 2:
                steps.append({"step": word[0], "status": word[1],
                              "detail": " ".join(word[2:])})

dma = None
if os.path.exists(os.path.join(out, "dma.json")):
    try:
        with open(os.path.join(out, "dma.json")) as f:
            dma = json.load(f)
        ref = dma["reference"]
        results = dma["results"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        die("dma.json: %s" % e)
    if not results:
        die("dma.json: no results")
elif not [s for s in steps if s["status"] == "fail"]:
    die("no dma.json in %s" % out)
else:
    # A step failed before kvbench dma ran: the steps are the report.
    lines = ["step %s: %s%s" % (s["step"], s["status"], ": " + s["detail"]
                                if s["detail"] else "") for s in steps] + notes
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "gpu.json"), "w") as f:
        json.dump({"device": dev, "dma": None, "steps": steps, "summary": lines},
                  f, sort_keys=True, indent=1)
        f.write("\n")
    print("\n".join(lines))
    sys.exit(3)

gds = None
if os.path.exists(os.path.join(out, "gds.json")):
    try:
        with open(os.path.join(out, "gds.json")) as f:
            gds = json.load(f)
    except ValueError as e:
        die("gds.json: %s" % e)


def best(direction, layout, block=TARGET_BLOCK):
    """The best 2 MiB pinned batched row (over methods) of a layout."""
    cands = [r for r in results if r["direction"] == direction
             and r["layout"] == layout and r["host_memory"] == "pinned"
             and r["submit"] == "batched" and r["block_bytes"] == block]
    return max(cands, key=lambda r: r["bytes"] / r["elapsed_ns"]) if cands else None


def rate(r):
    return r["bytes"] * 1e9 / r["elapsed_ns"]


ref_rate = {d: ref["bytes"] * 1e9 / ref[d + "_elapsed_ns"] for d in ("h2d", "d2h")}
label = "%s (driver %s, PCIe Gen%s x%s)" % (dev["name"], dev["driver_version"],
                                            link["pcie_gen"], link["pcie_width"])
device_line = ("device: %s, %s; PCIe Gen%s x%s under load (max Gen%s x%s, idle Gen%s "
               "x%s); SM clock %s MHz under load (max %s), memory clock %s MHz"
               % (label, dev["pci_bus_id"], link["pcie_gen"], link["pcie_width"],
                  dev["pcie_gen_max"], dev["pcie_width_max"], dev["pcie_gen"],
                  dev["pcie_width"], link["clocks_sm_mhz"], dev["clocks_max_sm_mhz"],
                  link["clocks_mem_mhz"]))

summary, targets, missed = [], [], 0
for layout in ("contiguous", "fragments"):
    for d in ("h2d", "d2h"):
        r = best(d, layout)
        if r is None:
            summary.append("target %s %s: no 2 MiB pinned batched row: NOT measured"
                           % (layout, d))
            missed += 1
            continue
        ratio = rate(r) / ref_rate[d]
        met = ratio >= TARGETS[layout]
        missed += not met
        targets.append({"direction": d, "layout": layout, "method": r["method"],
                        "bytes_per_s": int(rate(r)), "reference_bytes_per_s":
                        int(ref_rate[d]), "ratio": round(ratio, 3),
                        "target": TARGETS[layout], "met": met})
        summary.append("target %s %s: 2M pinned batched (%s) %.1f GB/s = %.2f of the "
                       "large copy's %.1f GB/s (target %.1f): %s"
                       % (layout, d, r["method"], gbps(rate(r)), ratio,
                          gbps(ref_rate[d]), TARGETS[layout],
                          "met" if met else "NOT met"))
for d in ("h2d", "d2h"):
    r = best(d, "contiguous")
    if r:
        summary.append("reference %s: vLLM DMA offload about %.0f GB/s one direction "
                       "at 2 MB blocks (published, H100); here %.1f GB/s (%.2f of it)"
                       % (d, VLLM_DMA_GBPS, gbps(rate(r)), gbps(rate(r)) / VLLM_DMA_GBPS))
for d in ("h2d", "d2h"):
    summary.append("reference %s: pinned copy about %.0f GB/s on PCIe Gen5 (published); "
                   "here the large copy %.1f GB/s on Gen%s x%s (%.2f of it)"
                   % (d, PCIE5_PINNED_GBPS, gbps(ref_rate[d]), link["pcie_gen"],
                      link["pcie_width"], gbps(ref_rate[d]) / PCIE5_PINNED_GBPS))
if gds is not None:
    if gds.get("cufile"):
        for d in ("write", "read"):
            c, s = gds["cufile_" + d + "_bytes_per_s"], gds["staged_" + d + "_bytes_per_s"]
            summary.append("gds %s: cuFile %.2f GB/s, pinned bounce %.2f GB/s (%.2f)"
                           % (d, gbps(c), gbps(s), c / s if s else 0))
    else:
        summary.append("gds: cuFile absent (%s): staged %.2f GB/s write, %.2f GB/s read"
                       % (gds.get("reason", "?"), gbps(gds["staged_write_bytes_per_s"]),
                          gbps(gds["staged_read_bytes_per_s"])))
# kvbench's own ratios must agree with ours, or one of us misreads.
for x in dma.get("ratios", []):
    r = best(x["direction"], x["layout"])
    if r is None or abs(rate(r) / ref_rate[x["direction"]] - x["ratio"]) > 0.005:
        die("dma.json: kvbench's %s %s ratio %.3f disagrees with its rows"
            % (x["direction"], x["layout"], x["ratio"]))
if dev["name"] != dma.get("device", {}).get("name"):
    notes.append("note: nvidia-smi names %s, kvbench dma measured %s"
                 % (dev["name"], dma.get("device", {}).get("name")))
failed = [s for s in steps if s["status"] == "fail"]
for s in steps:
    summary.append("step %s: %s%s" % (s["step"], s["status"],
                                      ": " + s["detail"] if s["detail"] else ""))
summary += notes

# The rows of bench/RESULTS.md's DMA table, and every measurement.
rows = []
for d in ("h2d", "d2h"):
    cells = []
    for layout in ("contiguous", "fragments"):
        r = best(d, layout)
        cells.append("%.2f (%.1f / %.1f GB/s)" % (rate(r) / ref_rate[d], gbps(rate(r)),
                                                  gbps(ref_rate[d]))
                     if r else "not measured")
    rows.append("| %s | %s | %s | %s |" % (label, d, cells[0], cells[1]))
table = ["| dir | host | submit | layout | method | block | copies | GB/s | / large copy |",
         "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
for r in results:
    b = r["block_bytes"]
    size = "%dM" % (b >> 20) if b >= 1 << 20 else "%dK" % (b >> 10)
    table.append("| %s | %s | %s | %s | %s | %s | %d | %.2f | %.2f |"
                 % (r["direction"], r["host_memory"], r["submit"], r["layout"],
                    r["method"], size, r["copies"], gbps(rate(r)),
                    rate(r) / ref_rate[r["direction"]]))

with open(os.path.join(out, "rows.md"), "w") as f:
    f.write("\n".join(rows) + "\n")
with open(os.path.join(out, "dma-table.md"), "w") as f:
    f.write("\n".join(table) + "\n")
with open(os.path.join(out, "summary.txt"), "w") as f:
    f.write("\n".join([device_line] + summary) + "\n")
with open(os.path.join(out, "gpu.json"), "w") as f:
    json.dump({"device": dev, "device_under_load": busy, "dma": dma, "gds": gds,
               "steps": steps, "targets": targets, "summary": summary},
              f, sort_keys=True, indent=1)
    f.write("\n")
print(device_line)
print("\n".join(summary))
print("rows for bench/RESULTS.md:")
print("\n".join(rows))
sys.exit(3 if failed else 1 if missed else 0)
PY
}

if [ -n "$from" ]; then
	mkdir -p "$out" || exit 3
	for f in dma.json nvidia-smi.csv nvidia-smi-load.csv steps.txt gds.json; do
		[ ! -e "$from/$f" ] || cp "$from/$f" "$out/$f" || exit 3
	done
	render "$out"
	exit
fi

# No GPU: one line, exit 77, nothing written.
if ! command -v "$NVIDIA_SMI" >/dev/null; then
	echo "bench/gpu.sh: no NVIDIA GPU: $NVIDIA_SMI not found"
	exit 77
fi
if ! gpus=$("$NVIDIA_SMI" -L 2>&1) || ! grep -q '^GPU ' <<<"$gpus"; then
	echo "bench/gpu.sh: no NVIDIA GPU: $NVIDIA_SMI -L: $(head -n1 <<<"$gpus")"
	exit 77
fi
command -v "$PY" >/dev/null || { echo "bench/gpu.sh: needs $PY" >&2; exit 3; }
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 3
: > "$out/steps.txt"
t0=$SECONDS
step() {	# step NAME ok|fail|absent DETAIL...
	echo "$*" >> "$out/steps.txt"
	echo "bench/gpu.sh: $* ($((SECONDS - t0)) s)"
}
# exec: in the background, $! is nvidia-smi itself, which kill then stops
# (else the sampler outlives the script and holds its output open).
smi_query() {
	exec "$NVIDIA_SMI" --query-gpu=$SMI_FIELDS --format=csv,noheader,nounits -i 0 "$@"
}

{
	date -u +%Y-%m-%dT%H:%M:%SZ
	uname -a
	git -C "$REPO" rev-parse HEAD 2>/dev/null
	echo "$gpus"
	command -v nvcc >/dev/null && nvcc --version | tail -n2
} > "$out/env.txt" 2>&1
(smi_query) > "$out/nvidia-smi.csv" 2> "$out/nvidia-smi.err"
"$NVIDIA_SMI" -q > "$out/nvidia-smi-q.txt" 2>&1

# 1. The CUDA build, from nothing.
if [ -n "${REUSE_BUILD:-}" ] && [ -x "$GPU_BUILD/bin/kvbench" ]; then
	step build reused "$GPU_BUILD as it was"
elif rm -rf "$GPU_BUILD" && timeout 300 make -j"$JOBS" CUDA=1 BUILD="$GPU_BUILD" > "$out/build.log" 2>&1; then
	step build ok "make -j$JOBS CUDA=1 BUILD=$GPU_BUILD"
else
	step build fail "make CUDA=1: see build.log: $(grep -m1 -E 'error|Error' "$out/build.log")"
	render "$out"
	exit 3
fi
B=$(cd "$GPU_BUILD" && pwd)
runtime="the real runtime"
case ${LD_PRELOAD:-} in *cudart_mock*) runtime="the simulated device (LD_PRELOAD)" ;; esac

# 2. The GPU tests on the real runtime: no preload of the simulated
# device, and a skip is a failure since a GPU is here.
bad=
for t in test_dma_cuda test_tier_gpu test_gds test_numa; do
	echo "== $t" >> "$out/tests.log"
	timeout 120 "$B/tests/$t" >> "$out/tests.log" 2>&1
	rc=$?
	echo "== $t: exit $rc" >> "$out/tests.log"
	[ "$rc" -eq 0 ] || bad="$bad $t($rc)"
done
for s in $GPU_SUITES; do
	echo "== $s" >> "$out/tests.log"
	BUILD=$GPU_BUILD timeout 180 tests/run.sh "$s" >> "$out/tests.log" 2>&1 ||
		bad="$bad ${s##*/}"
done
nskip=$(grep -c '^ok .*# skip' "$out/tests.log")
if [ -z "$bad" ]; then
	step tests ok "4 unit tests and ${GPU_SUITES:-no bats suite} on $runtime ($nskip bats skips)"
else
	step tests fail "failed:$bad (tests.log)"
fi

# 3. kvbench dma, nvidia-smi sampled meanwhile for clocks and link state.
(smi_query -lms 500) > "$out/nvidia-smi-load.csv" 2>/dev/null &
smipid=$!
timeout 240 "$B/bin/kvbench" dma -J -t "$DMA_TOTAL" -r "$DMA_REPEAT" \
	--min-block 16K --max-block 64M > "$out/dma.json" 2> "$out/dma.err"
rc=$?
{ kill "$smipid" && wait "$smipid"; } 2>/dev/null
if [ "$rc" -eq 0 ]; then
	step dma ok "kvbench dma -J -t $DMA_TOTAL -r $DMA_REPEAT, 16K..64M"
else
	step dma fail "kvbench dma exit $rc: $(head -n1 "$out/dma.err")"
	render "$out"
	exit 3
fi

# 4. GDS: 2 MiB blocks file <-> GPU by cuFile and staged; where cuFile
# loads, test_gds again, made to take it.
gds_dir=${GDS_DIR:-$B/gds-scratch}
mkdir -p "$gds_dir"
timeout 120 "$B/bench/gds_bw" "$gds_dir" 64 > "$out/gds.json" 2> "$out/gds.log"
rc=$?
rm -rf "$gds_dir"
if [ "$rc" -ne 0 ]; then
	rm -f "$out/gds.json"
	step gds fail "bench/gds_bw exit $rc: $(head -n1 "$out/gds.log")"
elif grep -q '"cufile": true' "$out/gds.json"; then
	echo "== test_gds with the system's cuFile" >> "$out/gds.log"
	if KV_TEST_CUFILE=libcufile.so.0 timeout 60 "$B/tests/test_gds" >> "$out/gds.log" 2>&1; then
		step gds ok "cuFile: test_gds, and 64 blocks of 2 MiB each way"
	else
		step gds fail "cuFile loads but test_gds failed on it (gds.log)"
	fi
else
	step gds absent "$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["reason"])' "$out/gds.json") (the staged path measured)"
fi

render "$out"
rc=$?
echo "bench/gpu.sh: $((SECONDS - t0)) s; everything is in $out"
exit "$rc"
