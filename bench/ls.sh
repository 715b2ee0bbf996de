#!/usr/bin/env bash
# kvls --blocks --ndjson against find(1) printing the same fields, over a
# warm tree of 200,000 block files in the vLLM / llm-d layout.
#
# Usage: bench/ls.sh [SCRATCH_DIR]     (default: a new dir under /tmp)
#   FILES=200000 RANKS=4 RUNS=7 BUILD=build KEEP=1 to change the set-up;
#   HYPERFINE=none times with python3 instead of hyperfine.
#
# The tree is one model at tp=RANKS with FILES blocks of 0-4 KiB spread
# over the hash buckets as random 64-bit block hashes spread them.  Both
# commands run once to warm the caches before timing.  Prints both median
# wall times, the ratio kvls/find (target: <= 0.25, issue 27), and the mean CPU time
# (user + system) each used, which a busy machine disturbs less.  Medians,
# because on a shared machine another job may drop the caches mid-run.
# KEEP=1 keeps the tree in SCRATCH_DIR for another run.
set -euo pipefail
cd "$(dirname "$0")/.."

FILES=${FILES:-200000}
RANKS=${RANKS:-4}
RUNS=${RUNS:-7}
BUILD=${BUILD:-build}
KVLS=$PWD/$BUILD/bin/kvls
[ -x "$KVLS" ] || { echo "ls.sh: build kvls first (make BUILD=$BUILD)" >&2; exit 1; }

if [ $# -ge 1 ]; then
	SCRATCH=$1
	mkdir -p "$SCRATCH"
	[ -n "${KEEP:-}" ] || trap 'rm -rf "$SCRATCH/root" "$SCRATCH/.made" "$SCRATCH/hyperfine.json"' EXIT
else
	SCRATCH=$(mktemp -d /tmp/kvls-bench.XXXXXX)
	[ -n "${KEEP:-}" ] || trap 'rm -rf "$SCRATCH"' EXIT
fi
ROOT=$SCRATCH/root

if [ ! -d "$ROOT" ] || [ "$(cat "$SCRATCH/.made" 2>/dev/null)" != "$FILES $RANKS" ]; then
	rm -rf "$ROOT"
	echo "building $FILES files in $ROOT ..." >&2
	python3 - "$ROOT" "$FILES" "$RANKS" <<'PY'
import hashlib, json, os, random, sys
root, nfiles, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = {"model_name": "meta-llama/Llama-3.1-8B", "hash_block_size": 16,
       "gpu_blocks_per_file": 16, "tp_size": ranks, "pp_size": 1, "pcp_size": 1,
       "dcp_size": 1, "dtype": "bfloat16", "inference_engine": "vllm",
       "kv_cache_groups": [{"block_size": 16,
                            "layer_names": ["model.layers.0.self_attn.attn"]}]}
fp = hashlib.sha256(json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
mdir = cfg["model_name"].replace("/", "_") + "_" + fp
os.makedirs(os.path.join(root, mdir))
with open(os.path.join(root, mdir, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2, sort_keys=True)
rng = random.Random(42)
zeros = bytes(4096)
made = set()
for i in range(nfiles):
    h = "%016x" % rng.getrandbits(64)
    d = os.path.join(root, "%s_r%d" % (mdir, i % ranks), h[:3], h[3:5] + "_g0")
    if d not in made:
        os.makedirs(d, exist_ok=True)
        made.add(d)
    fd = os.open(os.path.join(d, h + ".bin"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, zeros[:rng.randrange(0, 4097)])
    os.close(fd)
PY
	echo "$FILES $RANKS" > "$SCRATCH/.made"
fi

KVLS_CMD="$KVLS --root $ROOT --blocks --ndjson > /dev/null"
FIND_CMD="find $ROOT -name '*.bin' -printf '%P %s %b %A@ %T@\n' > /dev/null"

# Both must see every block.
n_kvls=$("$KVLS" --root "$ROOT" --blocks --ndjson | wc -l)
n_find=$(find "$ROOT" -name '*.bin' -printf '%P %s %b %A@ %T@\n' | wc -l)
[ "$n_kvls" -eq "$FILES" ] && [ "$n_find" -eq "$FILES" ] ||
	{ echo "ls.sh: kvls saw $n_kvls, find $n_find, want $FILES" >&2; exit 1; }

echo "machine: $(nproc) CPUs, $(uname -r), $(df -T "$ROOT" | awk 'NR == 2 { print $2 }') at $ROOT, load average $(cut -d' ' -f1-3 /proc/loadavg)"
if command -v "${HYPERFINE:-hyperfine}" > /dev/null; then
	json=$SCRATCH/hyperfine.json
	"${HYPERFINE:-hyperfine}" --style basic --warmup 1 --runs "$RUNS" --export-json "$json" \
		-n kvls "$KVLS_CMD" -n find "$FIND_CMD" >&2
	read -r t_kvls t_find c_kvls c_find < <(python3 -c '
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
print(r["kvls"]["median"], r["find"]["median"],
      r["kvls"]["user"] + r["kvls"]["system"], r["find"]["user"] + r["find"]["system"])' "$json")
else
	# The same statistics without hyperfine: one warm-up run, then the
	# median wall time and the mean CPU time of RUNS runs.
	measure() {
		python3 - "$1" "$RUNS" <<'PY'
import resource, statistics, subprocess, sys, time
cmd, runs = sys.argv[1], int(sys.argv[2])
subprocess.run(cmd, shell=True, check=True)
walls, cpus = [], []
for _ in range(runs):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, shell=True, check=True)
    walls.append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
print(statistics.median(walls), statistics.mean(cpus))
PY
	}
	read -r t_kvls c_kvls < <(measure "$KVLS_CMD")
	read -r t_find c_find < <(measure "$FIND_CMD")
fi
python3 -c '
import sys
k, f, ck, cf = map(float, sys.argv[1:])
print(f"kvls --blocks --ndjson: {k:.3f} s wall (median), {ck:.3f} s CPU")
print(f"find -printf:           {f:.3f} s wall (median), {cf:.3f} s CPU")
print(f"ratio kvls/find:        {k / f:.2f} wall (target <= 0.25), {ck / cf:.2f} CPU")' \
	"$t_kvls" "$t_find" "$c_kvls" "$c_find"
