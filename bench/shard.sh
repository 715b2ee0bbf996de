#!/usr/bin/env bash
# bench/shard.sh: kvevict --shard I/N with N = 1, 2, 4 against one
# unsharded run on the same tree: LRU precision and wall time.
#
# The tree is bench/evict.sh's: FILES 8 KiB blocks (default 100,000) in
# the vLLM/llm-d layout on a tmpfs, every block with its own atime spread
# over SPREAD_S seconds, topped up to 92% use; each run takes use to 50%
# (--high 80 --low 50 --hot 60m) on an identical fresh tree.  Two
# filesystems:
#
#   tmpfs   every run on the tmpfs itself;
#   latfs   through latfs (tests/latfs/latfs.c) at DELAY_US per operation
#           (default 500: 0.5 ms), one latfs mount of the tmpfs per shard,
#           standing for one client per node: each shard's round trips
#           wait on its own mount only.
#
# For each: the unsharded run, then N shards started at once (N = SHARDS,
# default "1 2 4"); seconds from the start to the last shard's exit (a
# round costs each shard a settling second, and the shards wait for the
# slowest), what was deleted, precision: the fraction of the blocks the
# shards deleted that the unsharded run deleted too (target >= 0.99), and
# the volume's use after, as df counts it (target <= 50.00%).
# Median of RUNS runs (default 3); then the ratios t(N shards) / t(1
# shard) and t(1 shard) / t(unsharded).  Needs root (mount, FUSE).
#
# Usage: [BUILD=build] [FILES=100000] [RUNS=3] [SPREAD_S=86400] [DELAY_US=500]
#        [SHARDS="1 2 4"] [FS="tmpfs latfs"] bench/shard.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
KVEVICT=$PWD/$BUILD/bin/kvevict
LATFS=$PWD/$BUILD/latfs/latfs
KVTREE=$PWD/$BUILD/bench/kvtree
FILES=${FILES:-100000}
RUNS=${RUNS:-3}
SPREAD_S=${SPREAD_S:-86400}
DELAY_US=${DELAY_US:-500}
SHARDS=${SHARDS:-"1 2 4"}
FS=${FS:-"tmpfs latfs"}
TARGETS=(--high 80 --low 50 --hot 60m)

[ "$(id -u)" -eq 0 ] || { echo "bench/shard.sh: needs root to mount" >&2; exit 77; }
[ -x "$KVEVICT" ] || { echo "bench/shard.sh: build $KVEVICT first" >&2; exit 2; }
if [[ " $FS " == *" latfs "* ]] && { [ ! -x "$LATFS" ] || [ ! -c /dev/fuse ]; }; then
	echo "bench/shard.sh: latfs needs $LATFS (libfuse3-dev) and /dev/fuse" >&2
	exit 2
fi

work=$(mktemp -d /tmp/kvevict-shard-bench.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
# tmpfs of about 8.5 KiB per block at 92%, as bench/evict.sh has at 100,000
size_m=$((FILES * 85 / 10000 + 16))
unmount_all() {
	local m
	for m in "$work"/lat.*; do
		[ -d "$m" ] && { mountpoint -q "$m" && umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }
	done
	# A latfs daemon may still hold files of the tmpfs as it exits: wait
	# a little, then detach it lazily, so the rm below always works.
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		mountpoint -q "$mnt" || return 0
		umount "$mnt" 2>/dev/null && return 0
		sleep 0.1
	done
	umount -l "$mnt" 2>/dev/null || true
}
trap 'unmount_all; rm -rf "$work"' EXIT

# A fresh tree, identical for the same arguments: bench/kvtree's where the
# build has one, else bench/evict_tree.py's.
make_tree() {
	unmount_all
	mount -t tmpfs -o "size=${size_m}m" tmpfs "$mnt"
	if [ -x "$KVTREE" ]; then
		"$KVTREE" -s "$SPREAD_S" -f 0.92 "$mnt" "$FILES" 2> /dev/null
	else
		python3 bench/evict_tree.py "$mnt" "$FILES" "$SPREAD_S" 0 0.92 > /dev/null
	fi
}

# root_for FS I: the root shard I (or the unsharded run, I = 0) works on.
root_for() {
	if [ "$1" = tmpfs ]; then
		echo "$mnt"
		return
	fi
	local m=$work/lat.$2
	mkdir -p "$m"
	mountpoint -q "$m" || "$LATFS" "$mnt" "$m" -o "delay_us=$DELAY_US" -o max_threads=64
	echo "$m"
}

now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# precision SHARDED SINGLE: |SHARDED and SINGLE| / |SHARDED|
precision() {
	awk -v a="$(wc -l < "$1")" -v b="$(comm -12 "$1" "$2" | wc -l)" \
		'BEGIN { printf "%.4f", a ? b / a : 0 }'
}

echo "files=$FILES spread=${SPREAD_S}s runs=$RUNS delay=${DELAY_US}us shards=($SHARDS) fs=($FS)" \
     "tmpfs=${size_m}m cpus=$(nproc) load=$(cut -d' ' -f1 /proc/loadavg)"
# use_after: the tmpfs's use, used / (used + available), as df counts it.
use_after() {
	stat -f -c '%b %f %a' "$mnt" | awk '{ u = $1 - $2; printf "%.2f%%", 100 * u / (u + $3) }'
}

printf '%-6s %-9s %4s %9s %8s %9s %9s\n' fs run '#' seconds deleted precision use_after
for fs in $FS; do
	for run in $(seq 1 "$RUNS"); do
		make_tree
		root=$(root_for "$fs" 0)
		t0=$(now_ns)
		"$KVEVICT" --root "$root" "${TARGETS[@]}" --ndjson > "$work/single.ndjson"
		t1=$(now_ns)
		jq -r .path "$work/single.ndjson" | sort > "$work/single.$run"
		s=$(secs "$t0" "$t1")
		echo "$s" >> "$work/t.$fs.single"
		printf '%-6s %-9s %4d %9s %8d %9s %9s\n' "$fs" unsharded "$run" "$s" \
			"$(wc -l < "$work/single.$run")" - "$(use_after)"
		for n in $SHARDS; do
			make_tree
			roots=()
			for ((i = 0; i < n; i++)); do
				roots+=("$(root_for "$fs" "$i")")
			done
			pids=()
			t0=$(now_ns)
			for ((i = 0; i < n; i++)); do
				"$KVEVICT" --root "${roots[i]}" "${TARGETS[@]}" --shard "$i/$n" \
					--ndjson > "$work/out.$i" 2> "$work/err.$i" &
				pids+=($!)
			done
			for ((i = 0; i < n; i++)); do
				wait "${pids[i]}" || { echo "shard $i/$n failed: $(cat "$work/err.$i")" >&2; exit 3; }
			done
			t1=$(now_ns)
			cat "$work"/out.[0-9]* | jq -r .path | sort > "$work/sharded"
			rm -f "$work"/out.[0-9]*
			s=$(secs "$t0" "$t1")
			p=$(precision "$work/sharded" "$work/single.$run")
			echo "$s" >> "$work/t.$fs.$n"
			echo "$p" >> "$work/p.$fs.$n"
			printf '%-6s %-9s %4d %9s %8d %9s %9s\n' "$fs" "$n shards" "$run" "$s" \
				"$(wc -l < "$work/sharded")" "$p" "$(use_after)"
		done
	done
done
echo
for fs in $FS; do
	single=$(median < "$work/t.$fs.single")
	first=${SHARDS%% *}
	one=$(median < "$work/t.$fs.$first")
	for n in $SHARDS; do
		t=$(median < "$work/t.$fs.$n")
		echo "$fs: $n shards: median ${t}s, min precision $(sort -n "$work/p.$fs.$n" | head -1)," \
		     "t/t($first shards) $(ratio "$t" "$one"), t/t(unsharded) $(ratio "$t" "$single")"
	done
	echo "$fs: unsharded: median ${single}s"
done
