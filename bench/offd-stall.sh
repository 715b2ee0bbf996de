#!/usr/bin/env bash
# bench/offd-stall.sh: how long a put waits on kvoffd when its file tier
# stops.  The fault injector (tests/fault/faultinj.c) holds every block
# write until a gate file appears; PUTS puts of 300 KB into a 16-slot
# pool with --write-policy on-evict then fill RAM with unwritten blocks,
# and each put beyond that must either wait for a write or drop one.
# Prints the longest single put's wall time and the drops counted; the
# rest land once the gate opens and SIGTERM drains the queue.
#
# Usage: [BUILD=build] [PUTS=24] bench/offd-stall.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PUTS=${PUTS:-24}
BIN=$PWD/$BUILD/bin
FI=$PWD/$BUILD/tests/libfaultinj.so
[ -x "$BIN/kvoffd" ] && [ -f "$FI" ] ||
	{ echo "bench/offd-stall.sh: build $BIN/kvoffd and $FI first (make)" >&2; exit 2; }

tmp=$(mktemp -d)
pid=
cleanup() {
	touch "$tmp/gate"
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$tmp/root"
hold="300000:path=_r0/:until=$tmp/gate"
mkfifo "$tmp/ready"
LD_PRELOAD=$FI KVFI_DELAY="write:$hold,uring_write:$hold" \
	"$BIN/kvoffd" --root "$tmp/root" --socket "$tmp/sock" --cpu-bytes 16M \
	--slot-bytes 1M --write-threads 1 --ready-fd 3 3>"$tmp/ready" 2>"$tmp/log" &
pid=$!
read -r _ <"$tmp/ready"
head -c 300000 /dev/urandom >"$tmp/block"

longest=0
for i in $(seq 1 "$PUTS"); do
	start=$(date +%s%N)
	"$BIN/kvput" --daemon "$tmp/sock" --model-dir bench_0123456789ab \
		"$(printf 'abcde%05d' "$i")" "$tmp/block"
	took=$(( $(date +%s%N) - start ))
	[ "$took" -gt "$longest" ] && longest=$took
done
drops=$("$BIN/kvoffd" --stats "$tmp/sock" | python3 -c 'import json,sys; print(json.load(sys.stdin)["wb_drops"])')
python3 -c 'import sys; print("puts %s  longest put %.3f s  drops %s" % (sys.argv[1], int(sys.argv[2]) / 1e9, sys.argv[3]))' \
	"$PUTS" "$longest" "$drops"
touch "$tmp/gate"
kill -TERM "$pid"
wait "$pid"
pid=
