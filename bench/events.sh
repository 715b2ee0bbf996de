#!/usr/bin/env bash
# bench/events.sh: what KV events cost kvevict.
#
# The kvevict bench tree (bench/kvtree: FILES 8 KiB blocks, default
# 100,000, two models with real config.json) on a tmpfs; each run copies a
# fresh tree from a template and evicts half its bytes (kvevict
# --max-bytes and --low-bytes at half the tree: 800 MB to 400 MB).
# Four sides, alternated within each run, best of RUNS:
#
#   off      no --events
#   absent   --events tcp://127.0.0.1:PORT with nothing there (refused)
#   live     a subscriber bound there, decoding every message
#            (tests/fixtures/kvsub.py, as llm-d's Go adapter decodes)
#   slow     a subscriber that sleeps SLOW_S after each message, RCVHWM 1
#
# and prints seconds, CPU seconds and the ratio of each to off (target
# <= 1.05 for absent and live).  The slow side includes the bounded wait
# at exit ($KV_EVENTS_LINGER, default 2s) for events it could not hand
# over.  Needs root (mount) and /usr/bin/python3 with python3-zmq and
# python3-msgpack.
#
# Usage: [BUILD=build] [FILES=100000] [RUNS=5] [SLOW_S=0.5] bench/events.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
KVEVICT=$PWD/$BUILD/bin/kvevict
KVTREE=$PWD/$BUILD/bench/kvtree
FILES=${FILES:-100000}
RUNS=${RUNS:-5}
SLOW_S=${SLOW_S:-0.5}
SUB=$PWD/tests/fixtures/kvsub.py
half=$((FILES * 4096))

[ "$(id -u)" -eq 0 ] || { echo "bench/events.sh: needs root to mount tmpfs" >&2; exit 77; }
for b in "$KVEVICT" "$KVTREE"; do
	[ -x "$b" ] || { echo "bench/events.sh: build $b first" >&2; exit 2; }
done
/usr/bin/python3 -c 'import zmq, msgpack' ||
	{ echo "bench/events.sh: needs python3-zmq and python3-msgpack" >&2; exit 77; }
[ -x /usr/bin/time ] || apt-get install -y time >/dev/null

work=$(mktemp -d /tmp/kvevents-bench.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
SPID=
trap '[ -z "$SPID" ] || kill -KILL "$SPID" 2>/dev/null; umount "$mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
# noatime: copying the template must not make its blocks hot
mount -t tmpfs -o size=2g,noatime tmpfs "$mnt"
mkdir -p "$mnt/template"
"$KVTREE" "$mnt/template" "$FILES" 2> /dev/null

port() {
	/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_sub PORT [ARGS]: a subscriber bound on PORT, its records counted.
start_sub() {
	local p=$1
	shift
	rm -f "$work/ready"
	/usr/bin/python3 "$SUB" --bind "tcp://127.0.0.1:$p" --ready "$work/ready" "$@" \
		> "$work/sub.out" &
	SPID=$!
	until [ -e "$work/ready" ]; do sleep 0.05; done
}

stop_sub() {
	kill -TERM "$SPID" 2>/dev/null || true
	wait "$SPID" 2>/dev/null || true
	SPID=
}

cpu_s() {
	awk -F': ' '/User time|System time/ { t += $2 } END { printf "%.2f", t }' "$1"
}

# side NAME: one eviction of a fresh tree; appends "seconds cpu deleted".
side() {
	local name=$1 p ep=() t0 t1 s
	rm -rf "$mnt/run"
	cp -a "$mnt/template" "$mnt/run"
	sync
	case $name in
	off) ;;
	absent) p=$(port); ep=(--events "tcp://127.0.0.1:$p") ;;
	live) p=$(port); start_sub "$p"; ep=(--events "tcp://127.0.0.1:$p") ;;
	slow) p=$(port); start_sub "$p" --slow "$SLOW_S" --hwm 1; ep=(--events "tcp://127.0.0.1:$p") ;;
	esac
	t0=$(date +%s%N)
	/usr/bin/time -v -o "$work/time" "$KVEVICT" --root "$mnt/run" --max-bytes "$half" \
		--low-bytes "$half" --hot 60m -J "${ep[@]}" > "$work/report.json" 2> "$work/stderr"
	t1=$(date +%s%N)
	[ -z "$SPID" ] || stop_sub
	s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
	deleted=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["files_deleted"])' "$work/report.json")
	got=-
	if [ "$name" = live ]; then
		got=$(python3 -c '
import json, sys
print(sum(len(json.loads(l).get("hashes", [])) for l in open(sys.argv[1])))' "$work/sub.out")
	fi
	printf '%-7s %4d %8s %6s %8d %9s  %s\n' "$name" "$run" "$s" "$(cpu_s "$work/time")" \
		"$deleted" "$got" "$(head -c 70 "$work/stderr")"
	echo "$s $(cpu_s "$work/time")" >> "$work/$name"
}

echo "files=$FILES runs=$RUNS slow=${SLOW_S}s cpus=$(nproc) load=$(cut -d' ' -f1 /proc/loadavg)"
printf '%-7s %4s %8s %6s %8s %9s\n' side run seconds cpu_s deleted received
sides=(off absent live slow)
for run in $(seq 1 "$RUNS"); do
	# rotate the order so no side always runs first
	for k in 0 1 2 3; do
		side "${sides[(k + run) % 4]}"
	done
done
best() { sort -n "$work/$1" | head -1 | cut -d' ' -f"$2"; }
echo
for name in "${sides[@]}"; do
	printf '%-7s best %6ss (cpu %5ss)  ratio to off %s (cpu %s)\n' "$name" "$(best "$name" 1)" \
		"$(sort -n -k2 "$work/$name" | head -1 | cut -d' ' -f2)" \
		"$(awk -v a="$(best "$name" 1)" -v b="$(best off 1)" 'BEGIN { printf "%.3f", a / b }')" \
		"$(awk -v a="$(sort -n -k2 "$work/$name" | head -1 | cut -d' ' -f2)" \
			-v b="$(sort -n -k2 "$work/off" | head -1 | cut -d' ' -f2)" \
			'BEGIN { printf "%.3f", a / b }')"
done
