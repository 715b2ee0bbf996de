#!/usr/bin/env bash
# Metadata operations in flight on a high-latency filesystem: statx from
# Q threads (what kvls' and kvevict's walk does) against Q IORING_OP_STATX
# requests from one thread, on latfs (tests/latfs) at DELAY_US per
# operation.  The kernel runs io_uring's statx in its io-wq workers, so
# both are blocking calls in kernel threads; this shows which keeps more
# of them in flight on FUSE.  Prints statx/s, best of RUNS, alternating,
# and the ratio to Q/L.
#
# Usage: bench/statx-qd.sh   (root, for the FUSE mount)
#   FILES=4000 DELAY_US=500 QS="8 16 32 64" RUNS=3 BUILD=build
set -euo pipefail
cd "$(dirname "$0")/.."

FILES=${FILES:-4000}
DELAY_US=${DELAY_US:-500}
QS=${QS:-8 16 32 64}
RUNS=${RUNS:-3}
BUILD=${BUILD:-build}
LATFS=$PWD/$BUILD/latfs/latfs
[ -x "$LATFS" ] || { echo "statx-qd.sh: build latfs first (make; needs libfuse3-dev)" >&2; exit 1; }
W=$(mktemp -d /tmp/statx-qd.XXXXXX)
trap 'umount "$W/mnt" 2>/dev/null || true; rm -rf "$W"' EXIT
cc -O2 -Wall -o "$W/statx_qd" bench/statx_qd.c -luring -lpthread
mkdir -p "$W/src" "$W/mnt"
(cd "$W/src" && seq 0 $((FILES - 1)) | sed 's/^/f/' | xargs touch)
"$LATFS" "$W/src" "$W/mnt" -o delay_us="$DELAY_US" -o max_threads=128
"$W/statx_qd" "$W/mnt" "$FILES" 64 threads > /dev/null	# latfs's threads up

printf '%4s %12s %12s %8s %8s\n' Q threads/s uring/s thr/QL uring/QL
for q in $QS; do
	best_t=0 best_u=0
	for _ in $(seq 1 "$RUNS"); do
		t=$("$W/statx_qd" "$W/mnt" "$FILES" "$q" threads | cut -d' ' -f3)
		u=$("$W/statx_qd" "$W/mnt" "$FILES" "$q" uring | cut -d' ' -f3)
		[ "$t" -gt "$best_t" ] && best_t=$t
		[ "$u" -gt "$best_u" ] && best_u=$u
	done
	awk -v q="$q" -v t="$best_t" -v u="$best_u" -v l="$DELAY_US" \
		'BEGIN { ql = q * 1e6 / l; printf "%4d %12d %12d %8.2f %8.2f\n", q, t, u, t / ql, u / ql }'
done
