#!/usr/bin/env bash
# kvoffd with one, two and three tiers under a read-heavy Zipf load over a
# working set larger than RAM plus the local tier:
#
#   ram     RAM only: the file tier under it refuses every write (the
#           fault injector fails its opens), so a miss in RAM is a miss;
#   shared  RAM over shared storage (--root), which holds the whole set;
#   local   RAM over a bounded local tier over the same shared storage
#           (--tier local:DIR:SIZE --tier shared:DIR), copying up on the
#           first hit;
#   local2  the same, copying up on the second hit (--promote second-hit).
#
# The tiers are tmpfs dirs slowed by the fault injector: every read
# submitted to the local tier waits LOCAL_US microseconds (NVMe-like),
# every read from the shared one SHARED_MS milliseconds (network-like),
# in the worker thread that submits it, so THREADS workers are THREADS
# requests in flight per tier.  CLIENTS processes each make OPS gets of
# keys drawn with probability ~ 1/(rank+1)^SKEW; a miss everywhere is a
# put (the recompute, which costs a model server far more than here).
# A warm-up pass with other seeds runs first; the figures are the
# measured pass's, from the daemon's --stats before and after: the share
# of gets served by RAM, by each file tier and by none, and gets/s.
#
# Usage: bench/offd-tiers.sh [SCRATCH_DIR]  (default: a new dir in /dev/shm)
#   KEYS=4096 BLOCK=256K RAM=64M LOCAL=256M OPS=5000 CLIENTS=4 SKEW=0.9
#   THREADS=4 LOCAL_US=100 SHARED_MS=1 RUNS=3 BUILD=build
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS=${KEYS:-4096}
BLOCK=${BLOCK:-256K}
RAM=${RAM:-64M}
LOCAL=${LOCAL:-256M}
OPS=${OPS:-5000}
CLIENTS=${CLIENTS:-4}
SKEW=${SKEW:-0.9}
THREADS=${THREADS:-4}
LOCAL_US=${LOCAL_US:-100}
SHARED_MS=${SHARED_MS:-1}
RUNS=${RUNS:-3}
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
CLIENT=$PWD/$BUILD/bench/offd_client
FI=$PWD/$BUILD/tests/libfaultinj.so
MODEL=meta-llama_Llama-3.1-8B_0123456789ab
for f in "$BIN/kvoffd" "$CLIENT" "$FI"; do
	[ -x "$f" ] || [ -f "$f" ] || { echo "offd-tiers.sh: build first (make BUILD=$BUILD): no $f" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "offd-tiers.sh: needs python3" >&2; exit 1; }

SCRATCH=${1:-$(mktemp -d /dev/shm/kvoffd-tiers.XXXXXX)}
mkdir -p "$SCRATCH"
DPID=
cleanup() {
	[ -z "$DPID" ] || kill -KILL "$DPID" 2>/dev/null || true
	rm -rf "$SCRATCH"
}
trap cleanup EXIT
SOCK=$SCRATCH/offd.sock
SHARED=$SCRATCH/shared
mkdir -p "$SHARED"

# start ARGS...: kvoffd under the injector with $FAIL and the delays.
start() {
	local fifo=$SCRATCH/ready line
	rm -f "$fifo"
	mkfifo "$fifo"
	env LD_PRELOAD="$FI" KVFI_FAIL="${FAIL:-}" \
		KVFI_DELAY="uring_read:${LOCAL_US}us:path=$SCRATCH/local/,read:${LOCAL_US}us:path=$SCRATCH/local/,uring_read:$SHARED_MS:path=$SHARED/,read:$SHARED_MS:path=$SHARED/" \
		"$BIN/kvoffd" --socket "$SOCK" --cpu-bytes "$RAM" --slot-bytes "$BLOCK" \
		--write-threads "$THREADS" --ready-fd 3 "$@" 3>"$fifo" 2>>"$SCRATCH/kvoffd.log" &
	DPID=$!
	read -r line <"$fifo"
}

stop() {
	kill -TERM "$DPID"
	wait "$DPID" || { echo "offd-tiers.sh: kvoffd failed, see below" >&2; tail "$SCRATCH/kvoffd.log" >&2; exit 1; }
	DPID=
}

# pass SEED0: CLIENTS zipf clients at once; prints their JSON lines.
pass() {
	local i pids=()
	for i in $(seq 1 "$CLIENTS"); do
		"$CLIENT" zipf "$SOCK" "$MODEL" "$KEYS" "$OPS" "$SKEW" $(($1 + i)) \
			> "$SCRATCH/client.$i" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i"
	done
	cat "$SCRATCH"/client.*
}

echo "filling shared storage with $KEYS blocks of $BLOCK ..." >&2
start --root "$SHARED" --write-policy always
"$CLIENT" zipf-fill "$SOCK" "$MODEL" "$KEYS"
stop

RESULTS=$SCRATCH/results
: > "$RESULTS"
for run in $(seq 1 "$RUNS"); do
	for config in ram shared local local2; do
		rm -rf "$SCRATCH/local" "$SCRATCH/empty"
		mkdir -p "$SCRATCH/local" "$SCRATCH/empty"
		case $config in
		ram) FAIL="write:ENOSPC:path=$SCRATCH/empty/,uring_write:ENOSPC:path=$SCRATCH/empty/" \
			start --root "$SCRATCH/empty" ;;
		shared) start --root "$SHARED" ;;
		local) start --tier "local:$SCRATCH/local:$LOCAL" --tier "shared:$SHARED" ;;
		local2) start --tier "local:$SCRATCH/local:$LOCAL" --tier "shared:$SHARED" \
			--promote second-hit ;;
		esac
		pass 1000 > /dev/null			# warm-up
		"$BIN/kvoffd" --stats "$SOCK" > "$SCRATCH/before.json"
		pass 2000 > "$SCRATCH/pass.json"
		"$BIN/kvoffd" --stats "$SOCK" > "$SCRATCH/after.json"
		stop
		python3 - "$config" "$SCRATCH" >> "$RESULTS" <<'PY'
import json, sys
config, d = sys.argv[1], sys.argv[2]
b, a = json.load(open(d + "/before.json")), json.load(open(d + "/after.json"))
runs = [json.loads(l) for l in open(d + "/pass.json")]
gets = sum(r["gets"] for r in runs)
wall = max(r["ns"] for r in runs) / 1e9
ram = a["hits"] - b["hits"]
tiers = {}
for tb, ta in zip(b["tiers"], a["tiers"]):
    tiers[f'{ta["tier"]}:{ta["kind"]}'] = ta["hits"] - tb["hits"]
none = sum(r["misses"] for r in runs)
print(json.dumps({"config": config, "gets": gets, "wall_s": wall, "ram": ram,
                  "tiers": tiers, "none": none}))
PY
	done
done

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
best = {}
for r in rows:
    if r["config"] not in best or r["wall_s"] < best[r["config"]]["wall_s"]:
        best[r["config"]] = r
print(f'{"config":8} {"gets/s":>9}  {"RAM":>6} {"local":>6} {"shared":>6} {"none":>6}   (share of gets, best of {len(rows) // len(best)})')
base = best.get("shared")
for c in ("ram", "shared", "local", "local2"):
    r = best[c]
    g = r["gets"]
    loc = sum(v for k, v in r["tiers"].items() if k.endswith(":local"))
    sh = sum(v for k, v in r["tiers"].items() if k.endswith(":shared")) if c != "ram" else 0
    rate = g / r["wall_s"]
    print(f'{c:8} {rate:9.0f}  {r["ram"] / g:6.3f} {loc / g:6.3f} {sh / g:6.3f} {r["none"] / g:6.3f}'
          + (f'   {rate / (base["gets"] / base["wall_s"]):.2f}x shared' if base and c.startswith("local") else ""))
PY
