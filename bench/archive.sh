#!/usr/bin/env bash
# Cache archives against tar and zstd: `kvls | kvget --batch --archive`
# vs `tar -c | zstd` of the same root, and `kvput --archive` vs
# `zstd -d | tar -x` into an empty root; then kvbench probe's ratios on
# the same bf16-like data.
#
# Usage: bench/archive.sh [SCRATCH_DIR]     (default: a new dir under /tmp)
#   N=128 BS=2M RUNS=3 LEVEL=1 BUILD=build to change the set-up.
#
# What keeps it fair:
# - The same N block files of bf16-like data (normal values: sign and
#   exponent bytes repeat, mantissa bytes are random, every block
#   different), in the vLLM layout, for both sides.
# - The same zstd level on both sides (LEVEL, default 1: kvget's default)
#   and one compressing thread (zstd -T1).
# - Both read a warm page cache and write to the same file system
#   without fsync; both restore into a fresh empty root each run.  The kv
#   side also lists the root (kvls), reads through libkv with checksums
#   checked, verifies every entry on restore and sets user.kv.xxh3: that
#   is its job.
# - Wall clock around each whole pipeline, start-up included; runs
#   alternate kv and tar; the best of RUNS is kept (the machine may be
#   shared), and ratios are kv / tar.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-128}
BS=${BS:-2M}
RUNS=${RUNS:-3}
LEVEL=${LEVEL:-1}
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
for p in kvls kvget kvput kvbench; do
	[ -x "$BIN/$p" ] || { echo "archive.sh: build first (make BUILD=$BUILD): no $BIN/$p" >&2; exit 1; }
done
for c in tar zstd python3 jq; do
	command -v "$c" > /dev/null || { echo "archive.sh: needs $c" >&2; exit 1; }
done
bytes=$(numfmt --from=iec "$BS")

if [ $# -ge 1 ]; then
	SCRATCH=$1
	mkdir -p "$SCRATCH"
	trap 'rm -rf "$SCRATCH/root" "$SCRATCH/restore" "$SCRATCH"/a.* "$SCRATCH/src.bin" "$SCRATCH/config.json"' EXIT
else
	SCRATCH=$(mktemp -d /tmp/kvarchive-bench.XXXXXX)
	trap 'rm -rf "$SCRATCH"' EXIT
fi
ROOT=$SCRATCH/root
mkdir -p "$ROOT"

# The blocks: exponent bytes from a pool of N(0, 0.05) bf16 values,
# mantissa bytes fresh random bytes for each block.
python3 - "$ROOT" "$N" "$bytes" "$SCRATCH/src.bin" <<'PY'
import hashlib, json, os, random, struct, sys
root, n, size, src = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = random.Random(20)
pool = bytes(struct.pack("<f", rng.gauss(0, 0.05))[3] for _ in range(1 << 20))
cfg = {"model_name": "bench/bf16", "hash_block_size": 16, "gpu_blocks_per_file": 16,
       "tp_size": 1, "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "bfloat16",
       "kv_cache_groups": [{"block_size": 16, "layer_names": ["l0"]}],
       "inference_engine": "vllm"}
fp = hashlib.sha256(json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
mdir = os.path.join(root, "bench_bf16_" + fp)
os.makedirs(mdir)
with open(os.path.join(mdir, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2, sort_keys=True)
out = open(src, "wb")
for i in range(n):
    block = bytearray(size)
    block[0::2] = os.urandom(size // 2)
    off = rng.randrange(len(pool))
    high = (pool[off:] + pool) * (size // 2 // len(pool) + 2)
    block[1::2] = high[:size // 2]
    h = "%032x" % rng.getrandbits(128)
    d = os.path.join(root, "bench_bf16_%s_r0/%s/%s_g0" % (fp, h[:3], h[3:5]))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, h + ".bin"), "wb") as f:
        f.write(block)
    if i < 16:
        out.write(block)
PY

now_ns() { date +%s%N; }
mib_s() { awk -v b=$((N * bytes)) -v ns="$1" 'BEGIN { printf "%.0f", b / 1048576 / (ns / 1e9) }'; }
best() { sort -n | head -1; }

: > "$SCRATCH/a.kv_w"; : > "$SCRATCH/a.kv_r"; : > "$SCRATCH/a.tar_w"; : > "$SCRATCH/a.tar_r"
for run in $(seq "$RUNS"); do
	rm -f "$SCRATCH/a.kva"
	t0=$(now_ns)
	"$BIN/kvls" --root "$ROOT" --blocks --ndjson |
		"$BIN/kvget" --root "$ROOT" --batch --no-touch --archive-level "$LEVEL" \
			--archive "$SCRATCH/a.kva" > /dev/null
	echo $(($(now_ns) - t0)) >> "$SCRATCH/a.kv_w"
	rm -rf "$SCRATCH/restore" && mkdir "$SCRATCH/restore"
	t0=$(now_ns)
	"$BIN/kvput" --root "$SCRATCH/restore" --archive "$SCRATCH/a.kva" > /dev/null
	echo $(($(now_ns) - t0)) >> "$SCRATCH/a.kv_r"
	diff -r "$ROOT" "$SCRATCH/restore" > /dev/null

	rm -f "$SCRATCH/a.tar.zst"
	t0=$(now_ns)
	tar -C "$ROOT" -cf - . | zstd -q -T1 "-$LEVEL" -o "$SCRATCH/a.tar.zst"
	echo $(($(now_ns) - t0)) >> "$SCRATCH/a.tar_w"
	rm -rf "$SCRATCH/restore" && mkdir "$SCRATCH/restore"
	t0=$(now_ns)
	zstd -q -dc "$SCRATCH/a.tar.zst" | tar -C "$SCRATCH/restore" -xf -
	echo $(($(now_ns) - t0)) >> "$SCRATCH/a.tar_r"
	diff -r "$ROOT" "$SCRATCH/restore" > /dev/null
done

kv_w=$(mib_s "$(best < "$SCRATCH/a.kv_w")"); kv_r=$(mib_s "$(best < "$SCRATCH/a.kv_r")")
tar_w=$(mib_s "$(best < "$SCRATCH/a.tar_w")"); tar_r=$(mib_s "$(best < "$SCRATCH/a.tar_r")")
kv_size=$(stat -c %s "$SCRATCH/a.kva"); tar_size=$(stat -c %s "$SCRATCH/a.tar.zst")
printf '%d blocks of %s, bf16-like, zstd level %d, best of %d, load %s\n' "$N" "$BS" "$LEVEL" \
	"$RUNS" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %10s %10s %10s\n' "" "kv" "tar+zstd" "kv/tar"
printf '%-28s %10s %10s %10.2f\n' "archive MiB/s (block bytes)" "$kv_w" "$tar_w" \
	"$(awk -v a="$kv_w" -v b="$tar_w" 'BEGIN { print a / b }')"
printf '%-28s %10s %10s %10.2f\n' "restore MiB/s (block bytes)" "$kv_r" "$tar_r" \
	"$(awk -v a="$kv_r" -v b="$tar_r" 'BEGIN { print a / b }')"
printf '%-28s %10.3f %10.3f %10.2f\n' "ratio (block bytes / file)" \
	"$(awk -v s="$kv_size" -v b=$((N * bytes)) 'BEGIN { print b / s }')" \
	"$(awk -v s="$tar_size" -v b=$((N * bytes)) 'BEGIN { print b / s }')" \
	"$(awk -v a="$kv_size" -v b="$tar_size" 'BEGIN { print b / a }')"
echo
echo "kvbench probe on 16 of the same blocks:"
"$BIN/kvbench" probe --block-size "$BS" --levels 1,3,9 --read-bandwidth 1G "$SCRATCH/src.bin"
