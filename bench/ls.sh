#!/usr/bin/env bash
# kvls --blocks --ndjson against find(1) printing the same fields, over a
# warm tree of 200,000 block files in the vLLM / llm-d layout.
#
# Usage: bench/ls.sh [SCRATCH_DIR]     (default: a new dir under /tmp)
#   FILES=200000 RANKS=4 RUNS=5 BUILD=build KEEP=1 to change the set-up.
#
# The tree is one model at tp=RANKS with FILES blocks of 0-4 KiB spread
# over the hash buckets as random 64-bit block hashes spread them.  Both
# commands run once to warm the caches before timing.  Prints both mean
# wall times, the ratio kvls/find (target: <= 1.0), and the CPU time
# (user + system) each used, which a busy machine disturbs less.
# KEEP=1 keeps the tree in SCRATCH_DIR for another run.
set -euo pipefail
cd "$(dirname "$0")/.."

FILES=${FILES:-200000}
RANKS=${RANKS:-4}
RUNS=${RUNS:-5}
BUILD=${BUILD:-build}
KVLS=$PWD/$BUILD/bin/kvls
[ -x "$KVLS" ] || { echo "ls.sh: build kvls first (make BUILD=$BUILD)" >&2; exit 1; }

if [ $# -ge 1 ]; then
	SCRATCH=$1
	mkdir -p "$SCRATCH"
else
	SCRATCH=$(mktemp -d /tmp/kvls-bench.XXXXXX)
fi
ROOT=$SCRATCH/root
[ -n "${KEEP:-}" ] || trap 'rm -rf "$ROOT"' EXIT

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
if command -v hyperfine > /dev/null; then
	json=$SCRATCH/hyperfine.json
	hyperfine --style basic --warmup 1 --runs "$RUNS" --export-json "$json" \
		-n kvls "$KVLS_CMD" -n find "$FIND_CMD" >&2
	read -r t_kvls t_find c_kvls c_find < <(python3 -c '
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
print(r["kvls"]["mean"], r["find"]["mean"],
      r["kvls"]["user"] + r["kvls"]["system"], r["find"]["user"] + r["find"]["system"])' "$json")
else
	# Best of RUNS wall times after one warm-up run each.
	best() {
		local b=999999 t s e
		bash -c "$1"
		for _ in $(seq "$RUNS"); do
			s=$(date +%s.%N); bash -c "$1"; e=$(date +%s.%N)
			t=$(echo "$e - $s" | bc)
			b=$(echo "if ($t < $b) $t else $b" | bc)
		done
		echo "$b"
	}
	t_kvls=$(best "$KVLS_CMD")
	t_find=$(best "$FIND_CMD")
	c_kvls=nan c_find=nan
fi
python3 -c '
import sys
k, f, ck, cf = map(float, sys.argv[1:])
print(f"kvls --blocks --ndjson: {k:.3f} s wall, {ck:.3f} s CPU")
print(f"find -printf:           {f:.3f} s wall, {cf:.3f} s CPU")
print(f"ratio kvls/find:        {k / f:.2f} wall (target <= 1.0), {ck / cf:.2f} CPU")' \
	"$t_kvls" "$t_find" "$c_kvls" "$c_find"
