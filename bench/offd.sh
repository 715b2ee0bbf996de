#!/usr/bin/env bash
# bench/offd.sh: 2 MiB blocks through kvoffd against memcpy and redis.
#
#   kvoffd  CLIENTS client processes (default 2), each putting then getting
#           BLOCKS distinct 2 MiB blocks ITERS times through the daemon's
#           shared pool (after one untimed warm-up round);
#   memcpy  one thread doing the same moves with memcpy: each block into a
#           pool-sized buffer and back out;
#   redis   redis-server on loopback, redis-benchmark SET then GET of
#           2 MiB values from CLIENTS connections.
#
# Each put and each get counts as one block's bytes moved.  The daemon's
# figure is all clients' bytes over the slowest client's time.  Prints
# GB/s (10^9 bytes per second) for each and the two ratios the kvoffd
# issue targets: >= 0.8 of memcpy, >= 5x redis.  Best of REPEAT runs.
#
# Usage: [BUILD=build] [CLIENTS=2] [BLOCKS=64] [ITERS=10] [REPEAT=3] bench/offd.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CLIENTS=${CLIENTS:-2}
BLOCKS=${BLOCKS:-64}
ITERS=${ITERS:-10}
REPEAT=${REPEAT:-3}
BYTES=2097152
KVOFFD=$PWD/$BUILD/bin/kvoffd
MODEL=bench_0123456789ab

[ -x "$KVOFFD" ] && [ -x "$BUILD/bench/offd_client" ] || { echo "bench/offd.sh: build $KVOFFD and $BUILD/bench/offd_client first (make)" >&2; exit 2; }
for cmd in redis-server redis-benchmark python3; do
	command -v "$cmd" >/dev/null || { echo "bench/offd.sh: needs $cmd" >&2; exit 3; }
done

TMP=$(mktemp -d /tmp/offd-bench.XXXXXX)
DPID= RPID=
cleanup() {
	[ -z "$DPID" ] || kill -KILL "$DPID" 2>/dev/null || true
	[ -z "$RPID" ] || kill -KILL "$RPID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

cp "$BUILD/bench/offd_client" "$TMP/offd_client"

# Every put takes a fresh slot before the old copy of its key is freed:
# room for two copies of every block plus one in flight per client.
POOL=$(( (2 * CLIENTS * BLOCKS + CLIENTS + 1) * BYTES ))
mkdir "$TMP/root"
mkfifo "$TMP/ready"
"$KVOFFD" --root "$TMP/root" --socket "$TMP/sock" --cpu-bytes "$POOL" \
	--ready-fd 3 3>"$TMP/ready" 2>"$TMP/kvoffd.log" &
DPID=$!
read -r _ <"$TMP/ready"

gbps() { python3 -c "import json,sys; d=[json.loads(l) for l in open(sys.argv[1])]; \
print('%.3f' % (sum(x['bytes'] for x in d) / max(x['ns'] for x in d)))" "$1"; }
best() { sort -g | tail -1; }

offd_runs=() memcpy_runs=()
for r in $(seq "$REPEAT"); do
	: >"$TMP/offd.json"
	pids=()
	for c in $(seq 0 $((CLIENTS - 1))); do
		"$TMP/offd_client" bench "$TMP/sock" "$MODEL" "$c" "$BLOCKS" "$ITERS" "$BYTES" \
			>>"$TMP/offd.json" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p"; done
	offd_runs+=("$(gbps "$TMP/offd.json")")
	"$TMP/offd_client" memcpy "$BLOCKS" "$ITERS" "$BYTES" >"$TMP/memcpy.json"
	memcpy_runs+=("$(gbps "$TMP/memcpy.json")")
done
OFFD=$(printf '%s\n' "${offd_runs[@]}" | best)
MEMCPY=$(printf '%s\n' "${memcpy_runs[@]}" | best)
STATS=$("$KVOFFD" --stats "$TMP/sock")
kill -TERM "$DPID"
wait "$DPID"
DPID=

PORT=$(( 20000 + RANDOM % 20000 ))
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$TMP" >"$TMP/redis.log" 2>&1 &
RPID=$!
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do :; done
redis_runs=()
for r in $(seq "$REPEAT"); do
	redis-benchmark -p "$PORT" -c "$CLIENTS" -n $((CLIENTS * BLOCKS)) -r "$BLOCKS" \
		-d "$BYTES" -t set,get --csv >"$TMP/redis.csv"
	# One SET and one GET per block: bytes over the time of both.
	redis_runs+=("$(python3 -c "
import csv, sys
rps = {row[0]: float(row[1]) for row in csv.reader(open(sys.argv[1])) if row and row[0] in ('SET', 'GET')}
print('%.3f' % (2 * $BYTES / (1 / rps['SET'] + 1 / rps['GET']) / 1e9))" "$TMP/redis.csv")")
done
REDIS=$(printf '%s\n' "${redis_runs[@]}" | best)
kill -TERM "$RPID"
wait "$RPID" || true
RPID=

echo "kvoffd  $CLIENTS clients x $BLOCKS blocks x $ITERS rounds: $OFFD GB/s (runs: ${offd_runs[*]})"
echo "memcpy  1 thread, same moves:               $MEMCPY GB/s (runs: ${memcpy_runs[*]})"
echo "redis   $CLIENTS connections, SET+GET:           $REDIS GB/s (runs: ${redis_runs[*]})"
python3 -c "
o, m, r = $OFFD, $MEMCPY, $REDIS
print('kvoffd/memcpy %.2f (target >= 0.8)   kvoffd/redis %.1fx (target >= 5x)' % (o / m, o / r))"
echo "daemon: $(echo "$STATS" | python3 -c "import json,sys; d=json.load(sys.stdin); \
print('puts %d gets %d hugepages %d wb_drops %d' % (d['puts'], d['gets'], d['hugepages'], d['wb_drops']))")"
