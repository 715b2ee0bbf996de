#!/usr/bin/env bash
# bench/latfs.sh: kvls and kvevict on a high-latency filesystem and on
# tmpfs, beside the tools an operator would use instead.
#
# The tree (bench/kvtree: FILES blocks, default 20,000, one 4 KiB page
# each; DATA_PCT < 100 leaves the youngest empty and hot) fills 90% of a
# tmpfs.  "latfs" is tests/latfs/latfs mounted over that tmpfs with
# every operation delayed DELAY_US (default 500) and 64 FUSE threads;
# "tmpfs" is the tmpfs itself.  On each:
#
#   1. kvls --blocks --ndjson against find -printf '%P %s %b %A@ %T@\n',
#      the same fields (latfs only: FUSE operations per block, counted by
#      latfs).  kvls's and kvevict's peak RSS are noted (/usr/bin/time).
#   2. latfs only: the walk rate of kvls -t 8, 16, 32, 64 (the model
#      table: the same walk, a stat per block, without the per-block
#      output that competes with latfs for the CPUs), latfs's operations
#      per second, against Q/L (Q = threads in flight, L = DELAY_US):
#      rate / (Q/L), goal >= 0.8.
#   3. Evictions to one target, fs use from 90% down by half the data
#      bytes (the oldest half of the blocks with data), each side on the
#      same tree restored beforehand (kvtree -r: deleted blocks recreated
#      with their atimes):
#        kvevict --high 80 --low L            (default threads: 64 on FUSE)
#        bench/lru_pipeline.sh                find | sort -n | awk | xargs rm
#        llm-d's PVC evictor (bench/pvc_run.py, CLEANUP_THRESHOLD=80,
#        TARGET_THRESHOLD=L), when PVC_EVICTOR is set
#      Time to the target, and what went: how many, and the fraction that
#      were among the oldest that many (1.0: exact LRU).  Goals: on latfs
#      the pipeline / kvevict >= 10; on tmpfs kvevict / PVC <= 0.1.
#
# Sides alternate (the order rotates each run); best of RUNS (default 3)
# is compared.  At the defaults, on latfs, find takes about 4.5 minutes a
# run (19 FUSE operations per block, one at a time), the pipeline 5.5
# and the PVC evictor 2.5: a full run takes about 40 minutes.
#
# The PVC evictor: llm-d-kv-cache's kv_connectors/pvc_evictor (Python,
# standard library only; a daemon configured by environment variables).
# PVC_EVICTOR=DIR names a copy of it; unset or absent, its side is
# skipped and said so.  The copy this was written against (kept outside
# this repository, in /work/peers/pvc_evictor) is the "N+2" version
# whose crawler reads the layout of llm-d-kv-cache #585
# (<model>_<d12>_r<rank>/<hhh>/<hh>_g<g>/*.bin).  The code index it came
# from stores each file's versions apart and names a commit for some, so
# the files were matched by the arguments they pass each other:
#
#   file                       commit     chars  sha256 (first 8)
#   processes/crawler.py       08cac803   12948  b6fb0de3
#   evictor.py                 -          15552  a4f2df6f
#   config.py                  -           4435  a1a1307d
#   processes/activator.py     -           4039  69fdadbe
#   processes/deleter.py       -          10919  204ea2c7
#   utils/system.py            -           2693  1b6b9950
#   utils/logging_helpers.py   -           4776  da431089
#   processes/__init__.py      eadd380c      40
#   utils/__init__.py          46bc0bc1      40
#
# (crawler.py's commit in full: 08cac803df0296a988cf338b907012c7f983d4f4.)
# Later versions (4096 shards, a folder cleaner, several deleters, an LRU
# mode) import llm-d's FileMapper or mock vllm modules.  It is run
# once per side by bench/pvc_run.py: PVC_MOUNT_PATH=ROOT,
# CACHE_DIRECTORY="", CLEANUP_THRESHOLD=80, TARGET_THRESHOLD=L, its
# defaults otherwise (8 crawlers, 1 deleter, batches of 100 through
# xargs rm, files read within 60 minutes kept); the clock runs from its
# start (Python and its 10 processes included, as kvevict's includes
# its own) until statvfs shows L, and the evictor is then killed.  It deletes in the
# order its crawlers find files, not oldest first.
#
# Usage: [FILES=20000] [DATA_PCT=100] [DELAY_US=500] [RUNS=3] [BUILD=build] [FS="latfs tmpfs"]
#        [PVC_EVICTOR=DIR] bench/latfs.sh
# Needs root (mount), /dev/fuse, latfs (make, with libfuse3-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
KVTREE=$PWD/$BUILD/bench/kvtree
LATFS=$PWD/$BUILD/latfs/latfs
FILES=${FILES:-20000}
DATA_PCT=${DATA_PCT:-100}
DELAY_US=${DELAY_US:-500}
RUNS=${RUNS:-3}
PVC_EVICTOR=${PVC_EVICTOR:-}
FS=${FS:-latfs tmpfs}	# "tmpfs" alone: a bigger tree without hours on latfs
PAGE=4096
FIND_FMT='%P %s %b %A@ %T@\n'

[ "$(id -u)" -eq 0 ] || { echo "bench/latfs.sh: needs root (mount)" >&2; exit 77; }
[ -c /dev/fuse ] || { echo "bench/latfs.sh: no /dev/fuse" >&2; exit 77; }
for b in "$BIN/kvls" "$BIN/kvevict" "$KVTREE" "$LATFS"; do
	[ -x "$b" ] || { echo "bench/latfs.sh: build $b first (make BUILD=$BUILD)" >&2; exit 2; }
done
[ -x /usr/bin/time ] || { echo "bench/latfs.sh: needs /usr/bin/time (scripts/deps.sh)" >&2; exit 2; }
if [ -z "$PVC_EVICTOR" ]; then
	echo "PVC evictor: not run (PVC_EVICTOR is unset); kvevict is compared with the pipeline only"
elif [ ! -f "$PVC_EVICTOR/evictor.py" ]; then
	echo "PVC evictor: not run (no evictor.py in PVC_EVICTOR=$PVC_EVICTOR); kvevict is compared with the pipeline only"
	PVC_EVICTOR=
elif ! /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
	echo "PVC evictor: not run (it needs Python 3.10 or later as /usr/bin/python3)"
	PVC_EVICTOR=
fi

work=$(mktemp -d /tmp/kvlatfs-bench.XXXXXX)
src=$work/src
lat=$work/lat
mkdir -p "$src" "$lat"
LPID=
cleanup() {
	if mountpoint -q "$lat"; then
		umount "$lat" 2>/dev/null || umount -l "$lat"
	fi
	[ -z "$LPID" ] || wait "$LPID" 2>/dev/null || true
	umount "$src" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

with_data=$((FILES * DATA_PCT / 100))
data_bytes=$((with_data * PAGE))
size=$((((data_bytes + 2 * PAGE) * 10 / 9 / PAGE + 1) * PAGE))
mount -t tmpfs -o "size=$size,nr_inodes=0" tmpfs "$src"
tree() { "$KVTREE" -B "$PAGE" -d "$DATA_PCT" "$@" "$src/root" "$FILES"; }
tree 2> /dev/null
read -r used avail < <(df -B1 --output=used,avail "$src" | tail -1)
low=$(awk -v u="$used" -v a="$avail" -v d="$data_bytes" 'BEGIN { printf "%.2f", (u - d / 2) * 100 / (u + a) }')

now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

# Mount latfs over the tree, with a fresh operation count.
lat_mount() {
	rm -f "$work/ops"
	"$LATFS" "$src" "$lat" -f -o "delay_us=$DELAY_US" -o max_threads=64 \
		-o "stats=$work/ops" 2>> "$work/latfs.err" &
	LPID=$!
	until mountpoint -q "$lat"; do sleep 0.05; done
}

# Unmount it; OPS gets the operations it served.
lat_umount() {
	umount "$lat"
	wait "$LPID"
	LPID=
	OPS=$(cat "$work/ops")
}

# timed FS CMD...: CMD's seconds (and latfs operations) on FS, in T_S and OPS.
timed() {
	local fs=$1 t0 t1
	shift
	OPS=-
	[ "$fs" = tmpfs ] || lat_mount
	t0=$(now_ns)
	"$@"
	t1=$(now_ns)
	[ "$fs" = tmpfs ] || lat_umount
	T_S=$(secs "$t0" "$t1")
}

dir_of() { [ "$1" = tmpfs ] && echo "$src/root" || echo "$lat/root"; }

# kvls and kvevict leave their peak RSS (KiB) in $work/rss.
kvls_blocks() {
	/usr/bin/time -f %M -o "$work/rss" "$BIN/kvls" --root "$1" --blocks --ndjson "${@:2}" > /dev/null
}
kvls_table() { /usr/bin/time -f %M -o "$work/rss" "$BIN/kvls" --root "$1" "${@:2}" > /dev/null; }
find_printf() { find "$1" -name '*.bin' -printf "$FIND_FMT" > /dev/null; }
kvevict_side() {
	/usr/bin/time -f %M -o "$work/rss" "$BIN/kvevict" --root "$1" --high 80 --low "$low" \
		--hot 60m > /dev/null
}
rss_note() { awk '{ printf "peak RSS %.1f MiB", $1 / 1024 }' "$work/rss"; }
pipeline_side() { bench/lru_pipeline.sh "$1" "$low"; }

# A PVC run times itself: from its start to statvfs at the target.
pvc_side() {
	local s
	s=$(/usr/bin/python3 bench/pvc_run.py "$PVC_EVICTOR" "$1" "$src" 80 "$low" "$work/pvc.log")
	echo "$s" > "$work/pvc.s"
}

record() {	# FS SIDE SECONDS [NOTE]
	printf '%-6s %-12s %4s %9s  %s\n' "$1" "$2" "$run" "$3" "${4:-}"
	echo "$3" >> "$work/$1.$2"
}
best() { sort -n "$work/$1.$2" | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "latfs.sh: $FILES blocks ($with_data of 4 KiB), delay ${DELAY_US}us, runs $RUNS," \
	"$(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg);" \
	"evictions: --high 80 --low $low (use $(df --output=pcent "$src" | tail -1 | tr -d ' '))"
printf '%-6s %-12s %4s %9s  %s\n' fs side run seconds note

sides_ls=(kvls find)
evict_sides=(kvevict pipeline)
[ -z "$PVC_EVICTOR" ] || evict_sides+=(pvc)
for run in $(seq 1 "$RUNS"); do
	for fs in $FS; do
		root=$(dir_of "$fs")
		for k in 0 1; do
			side=${sides_ls[(k + run) % 2]}
			case $side in
			kvls) timed "$fs" kvls_blocks "$root" ;;
			find) timed "$fs" find_printf "$root" ;;
			esac
			note=
			[ "$side" = find ] || note="$(rss_note)"
			[ "$OPS" = - ] || note="$note $(awk -v o="$OPS" -v n="$FILES" 'BEGIN { printf "%.1f", o / n }') ops/block"
			record "$fs" "$side" "$T_S" "$note"
		done
		if [ "$fs" = latfs ]; then
			for t in 8 16 32 64; do
				timed latfs kvls_table "$root" -t "$t"
				rate=$(awk -v o="$OPS" -v s="$T_S" 'BEGIN { printf "%.0f", o / s }')
				record latfs "kvls-t$t" "$T_S" "$(rss_note), $rate ops/s, rate/(Q/L) $(awk -v r="$rate" \
					-v q="$t" -v l="$DELAY_US" 'BEGIN { printf "%.2f", r / (q * 1e6 / l) }')"
				echo "$rate" >> "$work/rate.$t"
			done
		fi
		n=${#evict_sides[@]}
		for ((k = 0; k < n; k++)); do
			side=${evict_sides[(k + run) % n]}
			tree -r 2> /dev/null
			timed "$fs" "${side}_side" "$root"
			[ "$side" != pvc ] || T_S=$(cat "$work/pvc.s")
			read -r _ deleted _ precision < <(tree -c)
			note="deleted $deleted (want $((with_data / 2))), precision $precision"
			[ "$side" != kvevict ] || note="$note, $(rss_note)"
			record "$fs" "$side" "$T_S" "$note"
		done
	done
done

echo
echo "best of $RUNS:"
for fs in $FS; do
	echo "$fs: kvls $(best "$fs" kvls) s, find $(best "$fs" find) s: kvls/find $(ratio "$(best "$fs" kvls)" "$(best "$fs" find)")"
	echo "$fs: kvevict $(best "$fs" kvevict) s, pipeline $(best "$fs" pipeline) s:" \
		"pipeline/kvevict $(ratio "$(best "$fs" pipeline)" "$(best "$fs" kvevict)")" \
		"$([ "$fs" = latfs ] && echo "(goal >= 10)")"
	if [ -n "$PVC_EVICTOR" ]; then
		echo "$fs: PVC evictor $(best "$fs" pvc) s: kvevict/PVC $(ratio "$(best "$fs" kvevict)" "$(best "$fs" pvc)")" \
			"$([ "$fs" = tmpfs ] && echo "(goal <= 0.1)")"
	fi
done
for t in 8 16 32 64; do
	[ -e "$work/rate.$t" ] || continue
	r=$(sort -n "$work/rate.$t" | tail -1)
	echo "latfs: kvls -t $t: $r ops/s, Q/L $((t * 1000000 / DELAY_US))/s, rate/(Q/L) $(ratio "$r" "$((t * 1000000 / DELAY_US))") (goal >= 0.8)"
done
