#!/usr/bin/env bash
# kvwatch's cost to readers and its capacity, on a noatime tmpfs:
#
#  1. read throughput of 2 MiB and of 16 KiB blocks (each file opened,
#     O_DIRECT, read whole and closed, as vLLM's fs tier loads) with and
#     without kvwatch watching, at its default resolution (a block read
#     again within 60 s is not stamped again) and at --resolution 0
#     (every open stamped); sides alternate, best of RUNS each; the
#     ratio with/without (goal: >= 0.95);
#  2. kvwatch's rate: one pass over the small blocks, each opened once
#     (the kernel merges a second open of a file into an event still
#     queued), over the time from the reader's start until kvwatch has
#     recorded every one (it stamps each at --resolution 0, its worst
#     case) (goal: >= 50,000/s);
#  3. the event index's memory: kvwatch over INDEX_BLOCKS empty blocks
#     with 64-digit (sha256) names, its index bytes and peak RSS per
#     block, and what 10 million would take (goal: <= 1 GiB).
#
# Usage: bench/kvwatch.sh [SCRATCH_DIR]    (root: mounts a tmpfs there)
#   BIG=256 SMALL=20000 ROUNDS=5 RUNS=5 INDEX_BLOCKS=1000000 BUILD=build
#   FS=ext4 reads from an ext4 image on a loop device in SCRATCH_DIR
#   (noatime) instead of tmpfs: O_DIRECT then reaches the disk under it,
#   as a model server's loads from local NVMe do.
set -euo pipefail
cd "$(dirname "$0")/.."

BIG=${BIG:-256}
SMALL=${SMALL:-20000}
ROUNDS=${ROUNDS:-5}
RUNS=${RUNS:-5}
INDEX_BLOCKS=${INDEX_BLOCKS:-1000000}
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
READ=$PWD/$BUILD/bench/readblocks
TREE=$PWD/$BUILD/bench/kvtree
for x in "$BIN/kvwatch" "$READ" "$TREE"; do
	[ -x "$x" ] || { echo "kvwatch.sh: build first (make BUILD=$BUILD)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "kvwatch.sh: needs root (tmpfs, fanotify)" >&2; exit 1; }

SCRATCH=${1:-$(mktemp -d /tmp/kvwatch-bench.XXXXXX)}
mkdir -p "$SCRATCH/mnt"
MNT=$SCRATCH/mnt
mb=$(( (BIG * 2 + SMALL * 16 / 1024) * 11 / 10 + INDEX_BLOCKS / 256 + 64 ))
FS=${FS:-tmpfs}
if [ "$FS" = ext4 ]; then
	truncate -s "$((mb * 2))M" "$SCRATCH/ext4.img"
	mkfs.ext4 -q -F -N $((BIG + SMALL + INDEX_BLOCKS + 400000)) "$SCRATCH/ext4.img"
	mount -o loop,noatime "$SCRATCH/ext4.img" "$MNT"
else
	mount -t tmpfs -o "noatime,size=${mb}m,nr_inodes=0" tmpfs "$MNT"
fi
WPID=
cleanup() {
	[ -z "$WPID" ] || kill -KILL "$WPID" 2>/dev/null || true
	umount -l "$MNT" 2>/dev/null || true
	rm -f "$SCRATCH/ext4.img"
	[ $# -ge 1 ] || rm -rf "$SCRATCH"
}
if [ $# -ge 1 ]; then trap 'cleanup keep' EXIT; else trap cleanup EXIT; fi

# watch ROOT [RESOLUTION]: kvwatch on ROOT, back once it watches; its
# pid in WPID.
watch() {
	local fifo=$SCRATCH/ready line
	rm -f "$fifo"; mkfifo "$fifo"
	"$BIN/kvwatch" --root "$1" --resolution "${2:-0}" --rescan 0 --ready-fd 3 \
		--metrics "$SCRATCH/kvwatch.prom" 3>"$fifo" 2>>"$SCRATCH/kvwatch.err" &
	WPID=$!
	read -r line <"$fifo"
}

unwatch() {
	kill -TERM "$WPID"
	wait "$WPID"
	WPID=
}

metric() {
	awk -v k="$1" '$1 == k { print $2 }' "$SCRATCH/kvwatch.prom"
}

# GB/s of one reader pass over list $1
rate() {
	"$READ" "$1" "$ROUNDS" | awk '{ printf "%.3f", $4 / $6 / 1e9 }'
}

best() { sort -g | tail -1; }

calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }

echo "building $BIG blocks of 2 MiB and $SMALL of 16 KiB in $MNT (noatime $FS) ..." >&2
"$TREE" -B 2097152 "$MNT/big" "$BIG" >/dev/null
"$TREE" -B 16384 "$MNT/small" "$SMALL" >/dev/null
for s in big small; do
	"$BIN/kvls" --root "$MNT/$s" --blocks --ndjson | jq -r --arg r "$MNT/$s/" '$r + .path' > "$SCRATCH/$s.list"
done

echo "read throughput on $FS, O_DIRECT open/read/close per block, $ROUNDS rounds, best of $RUNS (GB/s):"
for res in 60s 0; do
	for s in big small; do
		: > "$SCRATCH/off" ; : > "$SCRATCH/on"
		for ((r = 0; r < RUNS; r++)); do
			# every block last used long ago, so the first pass stamps all
			(cd "$MNT/$s" && find . -name '*.bin' -exec touch -a -d '2 hours ago' {} +)
			rate "$SCRATCH/$s.list" >> "$SCRATCH/off"; echo >> "$SCRATCH/off"
			(cd "$MNT/$s" && find . -name '*.bin' -exec touch -a -d '2 hours ago' {} +)
			watch "$MNT/$s" "$res"
			rate "$SCRATCH/$s.list" >> "$SCRATCH/on"; echo >> "$SCRATCH/on"
			unwatch
		done
		off=$(best < "$SCRATCH/off") on=$(best < "$SCRATCH/on")
		printf '  %-6s --resolution %-3s without %8s  with kvwatch %8s  ratio %.3f\n' \
			"$([ $s = big ] && echo 2MiB || echo 16KiB)" "$res" "$off" "$on" \
			"$(calc "$on / $off")"
	done
done

echo "kvwatch's rate: every open of $SMALL blocks, each once, stamped (--resolution 0):"
best_rate=0
for ((r = 0; r < RUNS; r++)); do
	watch "$MNT/small"
	t0=$(date +%s.%N)
	"$READ" "$SCRATCH/small.list" 1 > /dev/null
	unwatch
	t1=$(date +%s.%N)
	uses=$(metric 'kvwatch_uses_total{source="read"}')
	[ "$uses" -eq "$SMALL" ] || echo "  warning: $uses uses recorded of $SMALL" >&2
	r_=$(calc "$uses / ($t1 - $t0)")
	best_rate=$(printf '%s\n%s\n' "$best_rate" "$r_" | best)
done
printf '  %.0f opens/s recorded (reader start to kvwatch done), best of %d\n' "$best_rate" "$RUNS"

echo "the event index over $INDEX_BLOCKS blocks with 64-digit names:"
python3 - "$MNT/index" "$INDEX_BLOCKS" <<'PY'
import hashlib, json, os, sys
root, n = sys.argv[1], int(sys.argv[2])
cfg = {"model_name": "bench/idx", "hash_block_size": 16, "gpu_blocks_per_file": 16,
       "tp_size": 1, "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "bfloat16",
       "kv_cache_groups": [{"block_size": 16, "layer_names": ["l0"]}], "inference_engine": "vllm"}
fp = hashlib.sha256(json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
os.makedirs(f"{root}/bench_idx_{fp}")
json.dump(cfg, open(f"{root}/bench_idx_{fp}/config.json", "w"), indent=2, sort_keys=True)
made = set()
for i in range(n):
    h = hashlib.sha256(i.to_bytes(8, "little")).hexdigest()
    d = f"{root}/bench_idx_{fp}_r0/{h[:3]}/{h[3:5]}_g0"
    if d not in made:
        os.makedirs(d, exist_ok=True)
        made.add(d)
    open(f"{d}/{h}.bin", "w").close()
PY
mkdir -p "$MNT/empty"
watch "$MNT/empty"
rss0=$(awk '/^VmHWM/ { print $2 * 1024 }' "/proc/$WPID/status")
unwatch
watch "$MNT/index"
rss=$(awk '/^VmHWM/ { print $2 * 1024 }' "/proc/$WPID/status")
unwatch
blocks=$(metric kvwatch_index_blocks) bytes=$(metric kvwatch_index_bytes)
printf '  %d blocks: index %d bytes (%.1f a block), peak RSS %d bytes (%d on an empty root; %.1f a block more)\n' \
	"$blocks" "$bytes" "$(calc "$bytes / $blocks")" "$rss" "$rss0" "$(calc "($rss - $rss0) / $blocks")"
printf '  10 million blocks: index %.0f MiB, RSS %.0f MiB (goal: <= 1024)\n' \
	"$(calc "$bytes / $blocks * 10000000 / 1048576")" \
	"$(calc "($rss0 + ($rss - $rss0) / $blocks * 10000000) / 1048576")"
