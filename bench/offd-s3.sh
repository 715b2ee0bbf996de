#!/usr/bin/env bash
# kvoffd draining a full local tier into a bucket, beside rclone moving
# the same number of files of the same size from a dir into the bucket,
# on one real S3 server (Ceph's RADOS Gateway, tests/s3/s3server.sh)
# started for the run:
#
#   kvoffd  --tier local:DIR:LOCAL --tier shared:s3://BUCKET/offd over a
#           RAM pool of RAM: one client (kvtools, put_many) puts COUNT
#           blocks of SIZE; past RAM each block leaves for the local tier,
#           and past LOCAL the least recently used move to the bucket.
#           Timed from the first put until the write queue is empty and
#           the local tier is back within LOCAL; MOVED is how many blocks
#           the daemon says moved out of it (its demotions).
#   rclone  move of MOVED files of SIZE (hard links of one random file)
#           from a local dir into s3:BUCKET/rclone, --transfers and
#           --checkers INFLIGHT: the work of moving that many blocks from
#           local storage into the bucket, which is all kvoffd's moves are
#           (kvoffd also takes the puts and writes the local tier).
#
# The ratio is rclone's time / kvoffd's: above 1, kvoffd moved the same
# number of blocks sooner.  Each side's objects are deleted before the
# other runs (untimed); the sides alternate run by run; best of RUNS.
#
# Usage: bench/offd-s3.sh [SCRATCH_DIR]     (default: a new dir under /tmp)
#   COUNT=3000 SIZE=16K RAM=16M LOCAL=1M INFLIGHT=32 RUNS=3 BUILD=build
#   Smallest mode: COUNT=200 RAM=1M RUNS=1.  Needs rclone, /usr/bin/python3
#   with boto3 and Ceph (radosgw); exits 77 with one line saying why when
#   one is missing or the server does not start, 1 when a side fails or
#   moves the wrong count of objects.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/s3_bench.bash

COUNT=${COUNT:-3000}
SIZE=${SIZE:-16K}
RAM=${RAM:-16M}
LOCAL=${LOCAL:-1M}
INFLIGHT=${INFLIGHT:-32}
RUNS=${RUNS:-3}
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
PY=/usr/bin/python3
[ -x "$BIN/kvoffd" ] && [ -f "$PWD/$BUILD/libkv.so" ] ||
	{ echo "offd-s3.sh: build first (make BUILD=$BUILD): no $BIN/kvoffd or $BUILD/libkv.so" >&2; exit 1; }
command -v rclone > /dev/null || { echo "offd-s3.sh: needs rclone"; exit 77; }
"$PY" -c 'import boto3' 2> /dev/null || { echo "offd-s3.sh: needs $PY with boto3 (python3-boto3)"; exit 77; }
bytes=$(numfmt --from=iec "$SIZE")

SCRATCH=${1:-$(mktemp -d /tmp/kvoffd-s3.XXXXXX)}
mkdir -p "$SCRATCH"
SRV=$SCRATCH/s3
DPID=
cleanup() {
	[ -z "$DPID" ] || kill -KILL "$DPID" 2> /dev/null || true
	[ ! -d "$SRV" ] || tests/s3/s3server.sh stop "$SRV" > /dev/null 2>&1 || true
	rm -rf "$SCRATCH"
}
trap cleanup EXIT

B=kvoffds3
s3_bench_start offd-s3.sh "$SRV"
s3util mk

min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }'; }

# kvoffd_run: one run of the kvoffd side; T its seconds, MOVED its moves.
kvoffd_run() {
	local fifo=$SCRATCH/ready out
	rm -rf "$SCRATCH/local" "$SCRATCH/offd.sock"
	mkdir "$SCRATCH/local"
	mkfifo "$fifo"
	"$BIN/kvoffd" --tier "local:$SCRATCH/local:$LOCAL" --tier "shared:s3://$B/offd" \
		--socket "$SCRATCH/offd.sock" --cpu-bytes "$RAM" --slot-bytes "$SIZE" --ready-fd 3 \
		3> "$fifo" 2>> "$SCRATCH/kvoffd.log" &
	DPID=$!
	read -r _ < "$fifo"
	rm -f "$fifo"
	out=$(PYTHONPATH=$PWD/python KVTOOLS_LIBKV=$PWD/$BUILD/libkv.so "$PY" - \
		"$SCRATCH/offd.sock" "$COUNT" "$bytes" <<'PY'
import sys, time, kvtools
sock, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hashes = ["%016x" % (i + 1) for i in range(count)]
blocks = [bytes([i % 251]) * size for i in range(count)]
with kvtools.connect(sock) as c:
    t = time.perf_counter()
    c.put_many("bench_0123456789ab", hashes, blocks)
    while True:
        st = c.stats()
        local = st["tiers"][0]
        if st["wb_queue_depth"] == 0 and local["bytes"] <= local["capacity_bytes"]:
            break
        time.sleep(0.005)
    print("%.4f %d %d" % (time.perf_counter() - t, local["demotions"], st["tiers"][1]["errors"]))
PY
)
	read -r T MOVED errors <<< "$out"
	[ "$errors" -eq 0 ] || { echo "offd-s3.sh: the bucket refused $errors moves" >&2; exit 1; }
	# Every block moved is an object.  (Counted before SIGTERM, which
	# writes RAM's blocks behind and so moves more.)
	read -r n _ <<< "$(s3util count offd)"
	[ "$n" -eq "$MOVED" ] || { echo "offd-s3.sh: kvoffd moved $MOVED blocks, the bucket holds $n" >&2; exit 1; }
	kill "$DPID"
	wait "$DPID" || { echo "offd-s3.sh: kvoffd exited $?; see $SCRATCH/kvoffd.log" >&2; exit 1; }
	DPID=
	s3util rm offd > /dev/null
}

# rclone_run N: rclone moves N files of SIZE into the bucket; T its seconds.
rclone_run() {
	local i t0 t1 n
	rm -rf "$SCRATCH/src"
	mkdir "$SCRATCH/src"
	head -c "$bytes" /dev/urandom > "$SCRATCH/one"
	for ((i = 1; i <= $1; i++)); do ln "$SCRATCH/one" "$SCRATCH/src/$(printf '%016x' "$i").bin"; done
	t0=$(date +%s%N)
	rclone move --transfers "$INFLIGHT" --checkers "$INFLIGHT" "$SCRATCH/src" "s3:$B/rclone" ||
		{ echo "offd-s3.sh: rclone move failed" >&2; exit 1; }
	t1=$(date +%s%N)
	T=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }')
	read -r n _ <<< "$(s3util count rclone)"
	[ "$n" -eq "$1" ] || { echo "offd-s3.sh: rclone moved $n of $1 files" >&2; exit 1; }
	s3util rm rclone > /dev/null
}

echo "offd-s3.sh: $(nproc) CPUs, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: Ceph RGW $(radosgw --version 2> /dev/null | awk '{ print $3 }') at $AWS_ENDPOINT_URL, rclone $(rclone version 2> /dev/null | awk 'NR == 1 { print $2 }')"
echo "kvoffd: --tier local:DIR:$LOCAL --tier shared:s3://$B/offd --cpu-bytes $RAM --slot-bytes $SIZE, $COUNT puts of $SIZE (put_many)"
echo "rclone: move --transfers $INFLIGHT --checkers $INFLIGHT DIR s3:$B/rclone, as many files of $SIZE as kvoffd moved"
printf '  %-4s %12s %8s %12s\n' run "kvoffd (s)" moved "rclone (s)"
best_k= best_r=
for ((r = 1; r <= RUNS; r++)); do
	if [ $((r % 2)) -eq 1 ]; then
		kvoffd_run; tk=$T; moved=$MOVED
		rclone_run "$moved"; tr=$T
	else
		# rclone first: it moves as many as kvoffd did in the last run.
		rclone_run "$moved"; tr=$T
		kvoffd_run; tk=$T; moved=$MOVED
	fi
	printf '  %-4s %12s %8s %12s\n' "$r" "$tk" "$moved" "$tr"
	best_k=$(min "$best_k" "$tk")
	best_r=$(min "$best_r" "$tr")
done
[ "$moved" -gt 0 ] || { echo "offd-s3.sh: nothing moved to the bucket: RAM + LOCAL hold all $COUNT" >&2; exit 1; }
echo "best: kvoffd $best_k s, rclone $best_r s"
echo "ratio moving $moved x $SIZE into the bucket: rclone move / kvoffd = $(awk -v a="$best_r" -v b="$best_k" 'BEGIN { printf "%.2f", a / b }')"
