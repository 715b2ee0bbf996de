#!/usr/bin/env bash
# bench/evict.sh: kvevict against an exact-LRU shell pipeline.
#
# A FILES-file tree (bench/kvtree, default 100,000) of 8 KiB blocks in the vLLM/llm-d
# layout on an 850 MiB tmpfs, topped up to 92% use with a filler file,
# every block with its own atime (spread over SPREAD_S seconds, in an
# order unrelated to directory order).  Each side gets an identical,
# freshly built tree and must take use from 92% to 50% (kvevict --high 80
# --low 50; the pipeline frees the same bytes):
#
#   find ROOT -name '*.bin' -printf '%A@ %s %p\n' | sort -n |
#       awk (take until enough bytes) | xargs rm -f     (bench/lru_pipeline.sh)
#
# Reports seconds to reach the target, LRU precision (the fraction of
# deleted files that are among the oldest that many) and kvevict's peak
# RSS (/usr/bin/time -v), median of RUNS runs.  Needs root (mount).
# CPU seconds (user + system, all processes) are reported beside the
# wall-clock seconds: on a shared machine they vary less.
#
# Random 64-bit hashes leave about one block per <hhh>/<hh>_g0 bucket dir
# at this size; BUCKETS=N draws the five-digit bucket prefix from N values
# spread over all 2^20 instead, for the denser dirs of a far larger cache
# (BUCKETS=1024: about 24 blocks per bucket dir).
#
# Usage: [BUILD=build] [FILES=100000] [RUNS=5] [SPREAD_S=86400] [BUCKETS=0] bench/evict.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
KVEVICT=$PWD/$BUILD/bin/kvevict
KVTREE=$PWD/$BUILD/bench/kvtree
FILES=${FILES:-100000}
RUNS=${RUNS:-5}
SPREAD_S=${SPREAD_S:-86400}
BUCKETS=${BUCKETS:-0}
HIGH=80
LOW=50

[ "$(id -u)" -eq 0 ] || { echo "bench/evict.sh: needs root to mount tmpfs" >&2; exit 77; }
for b in "$KVEVICT" "$KVTREE"; do
	[ -x "$b" ] || { echo "bench/evict.sh: build $b first" >&2; exit 2; }
done
[ "$BUCKETS" -ge 0 ] && [ "$BUCKETS" -le 1048576 ] ||
	{ echo "bench/evict.sh: BUCKETS must be 0 to 1048576" >&2; exit 2; }
if [ ! -x /usr/bin/time ]; then
	apt-get install -y time >/dev/null
fi

work=$(mktemp -d /tmp/kvevict-bench.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
trap 'umount "$mnt" 2>/dev/null || true; rm -rf "$work"' EXIT

# A fresh tree, identical for the same arguments (bench/kvtree).
make_tree() {
	umount "$mnt" 2>/dev/null || true
	mount -t tmpfs -o size=850m tmpfs "$mnt"
	"$KVTREE" -s "$SPREAD_S" -b "$BUCKETS" -f 0.92 "$mnt" "$FILES" 2> /dev/null
}

use_pct() { df --output=pcent "$mnt" | tail -1 | tr -dc 0-9; }

# How many went, and the fraction of them among the oldest that many.
precision() {
	"$KVTREE" -s "$SPREAD_S" -b "$BUCKETS" -c "$mnt" "$FILES" | awk '{ print $2, $4 }'
}

now_ns() { date +%s%N; }

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# cpu_s FILE: user + system seconds from a /usr/bin/time -v report.
cpu_s() {
	awk -F': ' '/User time|System time/ { t += $2 } END { printf "%.2f", t }' "$1"
}

echo "files=$FILES spread=${SPREAD_S}s buckets=$BUCKETS runs=$RUNS high=$HIGH low=$LOW tmpfs=850m cpus=$(nproc) load=$(cut -d' ' -f1 /proc/loadavg)"
printf '%-9s %4s %8s %6s %8s %9s %10s %8s\n' tool run seconds cpu_s deleted precision use% rss_kib
for f in k_s p_s k_cpu p_cpu k_rss k_prec p_prec; do : > "$work/$f"; done
for run in $(seq 1 "$RUNS"); do
	make_tree
	before=$(use_pct)
	t0=$(now_ns)
	/usr/bin/time -v -o "$work/time" "$KVEVICT" --root "$mnt" --high $HIGH --low $LOW \
		--hot 60m -J > "$work/report.json"
	t1=$(now_ns)
	rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time")
	cpu=$(cpu_s "$work/time")
	read -r k prec < <(precision)
	s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
	printf '%-9s %4d %8s %6s %8d %9s %4s->%-3s %8s\n' kvevict "$run" "$s" "$cpu" "$k" \
		"$prec" "$before" "$(use_pct)" "$rss"
	echo "$s" >> "$work/k_s"; echo "$cpu" >> "$work/k_cpu"
	echo "$rss" >> "$work/k_rss"; echo "$prec" >> "$work/k_prec"

	make_tree
	before=$(use_pct)
	t0=$(now_ns)
	/usr/bin/time -v -o "$work/time" bench/lru_pipeline.sh "$mnt" "$LOW"
	t1=$(now_ns)
	cpu=$(cpu_s "$work/time")
	read -r k prec < <(precision)
	s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
	printf '%-9s %4d %8s %6s %8d %9s %4s->%-3s %8s\n' pipeline "$run" "$s" "$cpu" "$k" \
		"$prec" "$before" "$(use_pct)" -
	echo "$s" >> "$work/p_s"; echo "$cpu" >> "$work/p_cpu"; echo "$prec" >> "$work/p_prec"
done
ks=$(median < "$work/k_s"); ps=$(median < "$work/p_s")
kc=$(median < "$work/k_cpu"); pc=$(median < "$work/p_cpu")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
echo "median seconds: kvevict $ks, pipeline $ps, ratio $(ratio "$ks" "$ps") (target <= 0.50)"
echo "median cpu seconds: kvevict $kc, pipeline $pc, ratio $(ratio "$kc" "$pc")"
echo "kvevict precision (min): $(sort -n "$work/k_prec" | head -1) (target 1.0); pipeline: $(sort -n "$work/p_prec" | head -1)"
echo "kvevict peak RSS (max): $(sort -n "$work/k_rss" | tail -1) KiB (target < 65536)"
