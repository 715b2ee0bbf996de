#!/usr/bin/env bash
# bench/scale.sh: kvls, kvls --verify, kvevict (threshold and budget) and
# kvoffd's start-up re-index over trees of millions of blocks.
#
# For each size in SIZES, bench/kvtree builds a tree on a tmpfs this
# script mounts: two models, four rank dirs, random 64-bit hashes (so the
# real layout's fan-out: about one leaf dir per block up to 1M, 0.6 at
# 5M), every block with its own atime and a user.kv.xxh3 checksum.  The
# oldest DATA_PCT% of the blocks (default 10) hold one 4 KiB page, the
# rest are empty: 5M blocks fit in RAM, and evictions still free bytes
# oldest first.  The tmpfs is sized so that the tree fills 90% of it.
# Printed per size: the build time and the kernel memory the tree took
# (growth of Shmem: its pages, and of Slab: inodes, dentries, xattrs).
#
# Then, one after the other on that tree:
#
#   kvls --blocks --ndjson > /dev/null   every block listed
#   kvls --verify                        every block opened and checksummed
#   kvoffd --root                        start to --ready-fd: its re-index walk
#   kvoffd --tier local:ROOT:1000T       the same as a bounded tier, whose
#                                        walk also builds its LRU in memory
#   kvevict --high 80 --low L            fs use down by half the data bytes
#   kvevict --max-bytes --low-bytes      the same bytes freed as a budget
#
# Both evictions must delete exactly the oldest DATA_PCT/2 % of the
# blocks (kvtree -c says how many went and which); after each, kvtree -r
# restores the tree: the deleted blocks come back with their atimes, every
# other block gets its atime set again (a fresh tree without a rebuild).
#
# Each row: wall seconds, ns per block, CPU seconds, peak RSS
# (/usr/bin/time %M; kvoffd's includes its 16 MiB pool only as touched),
# kvevict's walks, and syscalls per block from a separate counting run
# under perf stat (raw_syscalls:sys_enter, all threads; SYSCALLS=0 skips
# those runs).  At the end: each tool's ns per block at every size (time
# grows linearly where it stays flat) and any peak RSS >= 64 MiB flagged.
#
# Usage: [SIZES="1000000 5000000"] [DATA_PCT=10] [BUCKETS=0] [THREADS=N]
#        [SYSCALLS=1] [BUILD=build] bench/scale.sh [DIR]
#
# DIR: build the trees under DIR instead of on a tmpfs; its filesystem's
# use is not ours to push to 80%, so the threshold eviction is skipped,
# and the kernel memory line leaves out the page cache.
# BUCKETS=N: denser dirs (see kvtree -b).  THREADS: kvls/kvevict -t
# (default: theirs).  Needs root (mount, perf).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
KVTREE=$PWD/$BUILD/bench/kvtree
SIZES=${SIZES:-1000000 5000000}
DATA_PCT=${DATA_PCT:-10}
BUCKETS=${BUCKETS:-0}
THREADS=${THREADS:-}
SYSCALLS=${SYSCALLS:-1}
PAGE=4096
RSS_LIMIT_KIB=65536

[ "$(id -u)" -eq 0 ] || { echo "bench/scale.sh: needs root (mount, perf)" >&2; exit 77; }
for b in "$BIN/kvls" "$BIN/kvevict" "$BIN/kvoffd" "$KVTREE"; do
	[ -x "$b" ] || { echo "bench/scale.sh: build $b first (make BUILD=$BUILD)" >&2; exit 2; }
done
[ -x /usr/bin/time ] || { echo "bench/scale.sh: needs /usr/bin/time (scripts/deps.sh)" >&2; exit 2; }
if [ "$SYSCALLS" != 0 ] && ! perf stat -e raw_syscalls:sys_enter true 2>/dev/null; then
	echo "bench/scale.sh: perf cannot count syscalls here (scripts/deps.sh: linux-perf); SYSCALLS=0 skips them" >&2
	exit 2
fi
[ "$DATA_PCT" -ge 2 ] && [ "$DATA_PCT" -le 100 ] ||
	{ echo "bench/scale.sh: DATA_PCT must be 2 to 100" >&2; exit 2; }

work=$(mktemp -d /tmp/kvscale-bench.XXXXXX)
if [ $# -ge 1 ]; then
	mkdir -p "$1"
	mnt=$(mktemp -d "$1/kvscale.XXXXXX")
	own_mount=
else
	mnt=$work/mnt
	mkdir -p "$mnt"
	own_mount=1
fi
root=$mnt/root
OPID=
cleanup() {
	[ -z "$OPID" ] || kill -KILL "$OPID" 2>/dev/null || true
	if [ -n "$own_mount" ]; then
		umount "$mnt" 2>/dev/null || true
	else
		rm -rf "$mnt"
	fi
	rm -rf "$work"
}
trap cleanup EXIT

tflag=()
[ -z "$THREADS" ] || tflag=(-t "$THREADS")

meminfo_kib() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

# syscalls CMD...: syscalls CMD made, all its threads and children.
syscalls() {
	perf stat -x, -e raw_syscalls:sys_enter -o "$work/perf" -- "$@" > /dev/null
	awk -F, '/raw_syscalls:sys_enter/ { print $1 }' "$work/perf"
}

# timed OUT CMD...: run it under /usr/bin/time, its output to OUT; sets
# T_S, CPU_S, RSS_KIB.
timed() {
	local t0 t1 out=$1
	shift
	t0=$(now_ns)
	/usr/bin/time -f '%M %U %S' -o "$work/time" "$@" > "$out"
	t1=$(now_ns)
	T_S=$(secs "$t0" "$t1")
	read -r RSS_KIB CPU_S < <(awk '{ print $1, $2 + $3 }' "$work/time")
}

# kvoffd from start to its ready line; sets T_S, CPU_S, RSS_KIB.  With
# "count", its syscalls (start-up, re-index, shutdown) instead.  The tree
# is its --root, or with $BOUNDED set a bounded local tier (over an empty
# shared one), which it indexes.
offd() {
	local t0 t1 fifo=$work/ready tiers=(--root "$root")
	rm -f "$fifo" "$work/offd.sock"
	mkfifo "$fifo"
	if [ -n "${BOUNDED:-}" ]; then
		mkdir -p "$work/shared"
		tiers=(--tier "local:$root:1000T" --tier "shared:$work/shared")
	fi
	t0=$(now_ns)
	if [ "${1:-}" = count ]; then
		perf stat -x, -e raw_syscalls:sys_enter -o "$work/perf" -- \
			"$BIN/kvoffd" "${tiers[@]}" --socket "$work/offd.sock" \
			--cpu-bytes 16M --slot-bytes 1M --ready-fd 3 3> "$fifo" 2> "$work/offd.err" &
	else
		/usr/bin/time -f '%M %U %S' -o "$work/time" \
			"$BIN/kvoffd" "${tiers[@]}" --socket "$work/offd.sock" \
			--cpu-bytes 16M --slot-bytes 1M --ready-fd 3 3> "$fifo" 2> "$work/offd.err" &
	fi
	OPID=$!
	read -r _ < "$fifo"
	t1=$(now_ns)
	# the daemon is the child of perf or time: stop it, not them
	kill -TERM "$(cat "/proc/$OPID/task/$OPID/children")"
	wait "$OPID"
	OPID=
	T_S=$(secs "$t0" "$t1")
	[ "${1:-}" = count ] ||
		read -r RSS_KIB CPU_S < <(awk '{ print $1, $2 + $3 }' "$work/time")
}

# Delete half the data bytes, as fs use ("threshold") or as a budget.
evict_args() {
	case $1 in
	threshold) echo --high 80 --low "$low_pct" ;;
	budget) echo --max-bytes "$((cache_bytes * 9 / 10))" --low-bytes "$((cache_bytes - data_bytes / 2))" ;;
	esac
}

# After an eviction: how many went and whether they were the oldest,
# then the tree as it was.
check_restore() {
	read -r _ DELETED _ PRECISION < <("$KVTREE" -x -d "$DATA_PCT" -B "$PAGE" -b "$BUCKETS" -c "$root" "$n")
	"$KVTREE" -x -d "$DATA_PCT" -B "$PAGE" -b "$BUCKETS" -r "$root" "$n" 2> /dev/null
}

row() {	# TOOL SECONDS CPU RSS_KIB WALKS SYSCALLS NOTE
	local flag=
	[ "$4" = - ] || [ "$4" -lt "$RSS_LIMIT_KIB" ] || flag=" RSS>=64MiB"
	printf '%-9s %-16s %9s %8s %7s %8s %5s %9s  %s%s\n' "$n" "$1" "$2" \
		"$(awk -v s="$2" -v n="$n" 'BEGIN { printf "%.0f", s * 1e9 / n }')" "$3" \
		"$([ "$4" = - ] && echo - || awk -v k="$4" 'BEGIN { printf "%.1f", k / 1024 }')" \
		"$5" "$6" "$7" "$flag"
	echo "$n $1 $2 $4" >> "$work/summary"
}

per_block() {	# COUNT: syscalls per block, or - when not counted
	[ "$1" = - ] && echo - || awk -v c="$1" -v n="$n" 'BEGIN { printf "%.2f", c / n }'
}

echo "scale.sh: sizes $SIZES, data $DATA_PCT%, buckets $BUCKETS, threads ${THREADS:-default}," \
	"$(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$work/summary"
for n in $SIZES; do
	with_data=$((n * DATA_PCT / 100))
	data_bytes=$((with_data * PAGE))
	cache_bytes=$((data_bytes + 2 * PAGE))	# and the two config.json
	if [ -n "$own_mount" ]; then
		# the tree at 90% of the tmpfs; no limit on inodes
		size=$(((cache_bytes * 10 / 9 / PAGE + 1) * PAGE))
		mount -t tmpfs -o "size=$size,nr_inodes=0" tmpfs "$mnt"
	fi
	sync
	shmem0=$(meminfo_kib Shmem)
	slab0=$(meminfo_kib Slab)
	t0=$(now_ns)
	"$KVTREE" -x -d "$DATA_PCT" -B "$PAGE" -b "$BUCKETS" "$root" "$n" 2> "$work/tree"
	t1=$(now_ns)
	shmem1=$(meminfo_kib Shmem)
	slab1=$(meminfo_kib Slab)
	dirs=$(awk '{ print $6 }' "$work/tree")
	echo
	echo "$n blocks ($with_data of 4 KiB, the rest empty), $dirs dirs: built in $(secs "$t0" "$t1") s;" \
		"kernel memory: Shmem +$(((shmem1 - shmem0) / 1024)) MiB, Slab +$(((slab1 - slab0) / 1024)) MiB" \
		"($(((slab1 - slab0) * 1024 / (n + dirs))) bytes of Slab per inode)"
	if [ -n "$own_mount" ]; then
		read -r used avail < <(df -B1 --output=used,avail "$mnt" | tail -1)
		low_pct=$(awk -v u="$used" -v a="$avail" -v d="$data_bytes" \
			'BEGIN { printf "%.2f", (u - d / 2) * 100 / (u + a) }')
		echo "tmpfs $((size / 1048576)) MiB, use $(df --output=pcent "$mnt" | tail -1 | tr -d ' ');" \
			"threshold eviction: --high 80 --low $low_pct"
	fi
	printf '%-9s %-16s %9s %8s %7s %8s %5s %9s  %s\n' blocks tool seconds ns/block cpu_s \
		rss_MiB walks sys/block note

	timed /dev/null "$BIN/kvls" --root "$root" --blocks --ndjson "${tflag[@]}"
	c=-
	[ "$SYSCALLS" = 0 ] || c=$(syscalls "$BIN/kvls" --root "$root" --blocks --ndjson "${tflag[@]}")
	row "kvls --blocks" "$T_S" "$CPU_S" "$RSS_KIB" - "$(per_block "$c")" ""

	timed "$work/out" "$BIN/kvls" --root "$root" --verify "${tflag[@]}"
	note=$(tail -1 "$work/out")
	grep -q "; $n blocks: $n verified" "$work/out" ||
		{ echo "bench/scale.sh: kvls --verify: $note (want $n blocks verified)" >&2; exit 1; }
	c=-
	[ "$SYSCALLS" = 0 ] || c=$(syscalls "$BIN/kvls" --root "$root" --verify "${tflag[@]}")
	row "kvls --verify" "$T_S" "$CPU_S" "$RSS_KIB" - "$(per_block "$c")" "$note"

	offd
	t_s=$T_S cpu=$CPU_S rss=$RSS_KIB
	note=$(sed -n 's/.*file tier [^:]*: //p' "$work/offd.err")
	c=-
	if [ "$SYSCALLS" != 0 ]; then
		offd count
		c=$(awk -F, '/raw_syscalls:sys_enter/ { print $1 }' "$work/perf")
	fi
	row "kvoffd re-index" "$t_s" "$cpu" "$rss" - "$(per_block "$c")" "$note"

	BOUNDED=1 offd
	row "kvoffd lru-index" "$T_S" "$CPU_S" "$RSS_KIB" - - \
		"$(sed -n 's/.*tier 0, local, [^:]*: //p' "$work/offd.err")"
	rm -f "$root/.kvoffd.lock"

	for mode in threshold budget; do
		[ "$mode" = budget ] || [ -n "$own_mount" ] || continue
		# shellcheck disable=SC2046
		timed "$work/out" "$BIN/kvevict" --root "$root" $(evict_args "$mode") --hot 60m -J "${tflag[@]}"
		walks=$(jq -r .walks "$work/out")
		reached=$(jq -r .target_reached "$work/out")
		t_s=$T_S cpu=$CPU_S rss=$RSS_KIB
		check_restore
		c=-
		if [ "$SYSCALLS" != 0 ]; then
			# shellcheck disable=SC2046
			c=$(syscalls "$BIN/kvevict" --root "$root" $(evict_args "$mode") --hot 60m -J "${tflag[@]}")
			"$KVTREE" -x -d "$DATA_PCT" -B "$PAGE" -b "$BUCKETS" -r "$root" "$n" 2> /dev/null
		fi
		row "kvevict $mode" "$t_s" "$cpu" "$rss" "$walks" "$(per_block "$c")" \
			"deleted $DELETED (want $((with_data / 2))), precision $PRECISION, target reached: $reached"
	done

	if [ -n "$own_mount" ]; then
		umount "$mnt"
	else
		rm -rf "$root"
	fi
done

echo
echo "ns per block at each size (linear: flat across sizes); peak RSS in MiB"
awk '{ tool = $2 " " $3; if (!(tool in seen)) { seen[tool] = 1; order[++k] = tool }
       ns[tool] = ns[tool] sprintf(" %8.0f", $4 * 1e9 / $1)
       if ($5 != "-" && $5 > max[tool]) max[tool] = $5
       if (!(tool in first)) first[tool] = $4 / $1; last[tool] = $4 / $1 }
     END { for (i = 1; i <= k; i++) { t = order[i]
             printf "%-16s%s   last/first %.2f   max RSS %.1f%s\n", t, ns[t],
                    last[t] / first[t], max[t] / 1024, (max[t] >= 65536 ? "  RSS>=64MiB" : "") } }' \
	"$work/summary"
