#!/usr/bin/env bash
# The same job in kvbench and fio: one file per block, 2 MiB blocks,
# io_uring, the same threads and queue depth, O_DIRECT, read then write,
# each phase for the same time.  The two tools take turns REPEAT times
# and the best run of each counts, so a noisy neighbour on a shared
# machine does not decide the comparison.  Prints both bandwidths and
# their ratio; exits 1 when they differ by more than 10%.
#
# Usage: bench/kvbench-vs-fio.sh [DIR]   (default: a fresh dir in /tmp;
#        DIR's filesystem must accept O_DIRECT: ext4, xfs, not tmpfs)
# Environment: BUILD (build), FILES (256), THREADS (2), QD (8),
#              SECONDS_PER_PHASE (5), REPEAT (3)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
FILES=${FILES:-256}
THREADS=${THREADS:-2}
QD=${QD:-8}
T=${SECONDS_PER_PHASE:-5}
REPEAT=${REPEAT:-3}
KVBENCH=$PWD/$BUILD/bin/kvbench
command -v fio >/dev/null || { echo "needs fio" >&2; exit 3; }
command -v jq >/dev/null || { echo "needs jq" >&2; exit 3; }
[ -x "$KVBENCH" ] || { echo "build kvbench first: make BUILD=$BUILD" >&2; exit 3; }

if [ $# -ge 1 ]; then
	DIR=$1
	mkdir -p "$DIR"
else
	DIR=$(mktemp -d /tmp/kvbench-vs-fio.XXXXXX)
	trap 'rm -rf "$DIR"' EXIT
fi
mkdir -p "$DIR/kvbench" "$DIR/fio"

# kvbench: in-place writes, as fio does them (the default atomic
# temp+rename adds metadata work fio has no equivalent for); --keep so
# later turns overwrite, as fio's do, files that already exist.
kv_run() {
	"$KVBENCH" run --dir "$DIR/kvbench" --block-size 2M --size $((FILES * 2))M \
		--threads "$THREADS" --qd "$QD" --engine uring --direct --in-place \
		--phases write,read --duration "${T}s" --keep -J
}

# fio: each job owns FILES/THREADS files of exactly one block each.
fio_run() {
	fio --name=kv --directory="$DIR/fio" --rw="$1" --bs=2M --filesize=2M \
		--nrfiles=$((FILES / THREADS)) --numjobs="$THREADS" --iodepth="$QD" \
		--ioengine=io_uring --direct=1 --file_service_type=roundrobin \
		--time_based --runtime="$T" --group_reporting --output-format=json
}

max() { [ "$1" -ge "$2" ] && echo "$1" || echo "$2"; }
kv_read=0 kv_write=0 fio_read=0 fio_write=0
for _ in $(seq "$REPEAT"); do
	kv_json=$(kv_run)
	kv_read=$(max "$kv_read" "$(jq '.phases[] | select(.phase == "read") | .throughput_Bps' <<<"$kv_json")")
	kv_write=$(max "$kv_write" "$(jq '.phases[] | select(.phase == "write") | .throughput_Bps' <<<"$kv_json")")
	fio_write=$(max "$fio_write" "$(fio_run write | jq '.jobs[0].write.bw_bytes')")
	fio_read=$(max "$fio_read" "$(fio_run read | jq '.jobs[0].read.bw_bytes')")
done

status=0
report() {
	local what=$1 kv=$2 f=$3
	awk -v w="$what" -v kv="$kv" -v f="$f" 'BEGIN {
		r = kv / f
		printf "%-6s kvbench %8.1f MiB/s   fio %8.1f MiB/s   ratio %.3f  %s\n", w,
			kv / 1048576, f / 1048576, r, (r >= 0.9 && r <= 1.1) ? "within 10%" : "DIFFERS"
		exit (r >= 0.9 && r <= 1.1) ? 0 : 1 }' || status=1
}
echo "job: $FILES files x 2 MiB, $THREADS threads x QD $QD, io_uring, O_DIRECT, ${T}s per phase, best of $REPEAT, $DIR"
report read "$kv_read" "$fio_read"
report write "$kv_write" "$fio_write"
exit $status
