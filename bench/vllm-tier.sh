#!/usr/bin/env bash
# vLLM's secondary tier through kvtools (kvtools.vllm, driven as vLLM's
# tiering manager drives it: bench/vllm_tier.py) beside fio doing the same
# file-per-block I/O on the same volume: tmpfs and an ext4 loop image,
# 16 KiB and 2 MiB blocks.  Then loads through kvoffd beside one memcpy
# thread at 2 MiB, and the scheduler thread's cost per call.
#
# Usage: bench/vllm-tier.sh            (as root: it mounts its volumes)
#   COUNT16K=8192 COUNT2M=256 RUNS=3 THREADS=4 QD=32 FS="tmpfs ext4" BUILD=build
#
# What keeps it fair:
# - The tier runs THREADS transfer threads, each an io_uring queue of QD
#   (libkv's default, 32); fio runs THREADS jobs at --iodepth QD, one
#   file per block (--nrfiles, --filesize = the block), files created
#   inside the timed run (create_on_open).
# - Every store job is submitted before the first result is polled, as a
#   scheduler step hands over its stores; the tier's time runs from the
#   first submit to the last result, and includes what fio does not do:
#   the layout's dirs, a temp and rename per block, the xxh3 xattr on
#   writes and its check on reads, and each read's use (atime stamp).
# - O_DIRECT on ext4 for both (libkv chooses it for aligned whole-page
#   blocks; fio --direct=1); buffered on tmpfs for both.  Page caches are
#   dropped before each ext4 run.
# - Runs alternate tier and fio; the best of RUNS is kept for each.
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT16K=${COUNT16K:-8192}
COUNT2M=${COUNT2M:-256}
RUNS=${RUNS:-3}
THREADS=${THREADS:-4}
QD=${QD:-32}
FS=${FS:-tmpfs ext4}
BUILD=${BUILD:-build}
PY=/usr/bin/python3
DRIVER=$PWD/bench/vllm_tier.py
KVOFFD=$PWD/$BUILD/bin/kvoffd
export BUILD
[ -x "$KVOFFD" ] || { echo "vllm-tier.sh: build first (make BUILD=$BUILD)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "vllm-tier.sh: needs root to mount its volumes" >&2; exit 77; }
command -v fio > /dev/null || { echo "vllm-tier.sh: needs fio" >&2; exit 77; }
"$PY" -c 'import numpy' 2>/dev/null || { echo "vllm-tier.sh: needs python3-numpy" >&2; exit 77; }

SCRATCH=$(mktemp -d /tmp/vllm-tier.XXXXXX)
MNT=$SCRATCH/mnt
DPID=
cleanup() {
	[ -z "$DPID" ] || { kill "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null; } || true
	mountpoint -q "$MNT" && umount "$MNT"
	rm -rf "$SCRATCH"
}
trap cleanup EXIT
mkdir -p "$MNT"

best() { sort -g | tail -1; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

mount_fs() {
	local bytes=$1
	mountpoint -q "$MNT" && umount "$MNT"
	case $FSNAME in
	tmpfs) mount -t tmpfs -o size=$((bytes * 3 + (64 << 20))) tmpfs "$MNT" ;;
	ext4)
		rm -f "$SCRATCH/img"
		truncate -s $((bytes * 3 + (256 << 20))) "$SCRATCH/img"
		mkfs.ext4 -q -F "$SCRATCH/img"
		mount -o loop "$SCRATCH/img" "$MNT" ;;
	esac
}

# fio_gbps RW BS COUNT: fio's GB/s writing or reading COUNT files of BS.
fio_gbps() {
	local rw=$1 bs=$2 count=$3 direct=0
	[ "$FSNAME" = ext4 ] && direct=1
	mkdir -p "$MNT/fio"
	fio --name=blk --directory="$MNT/fio" --ioengine=io_uring --iodepth="$QD" \
		--direct=$direct --bs="$bs" --filesize="$bs" --nrfiles=$((count / THREADS)) \
		--openfiles="$QD" --numjobs="$THREADS" --group_reporting --rw="$rw" \
		--create_on_open=1 --fallocate=none --output-format=json > "$SCRATCH/fio.json"
	jq ".jobs[0].${rw}.bw_bytes / 1e9" "$SCRATCH/fio.json"
}

echo "vllm-tier.sh: $THREADS threads, QD $QD, best of $RUNS runs, GB/s"
printf '%-6s %-4s %10s %10s %6s %10s %10s %6s\n' fs bs tier-store fio-write ratio tier-load \
	fio-read ratio
for FSNAME in $FS; do
	for bs in 16K 2M; do
		bytes=$(numfmt --from=iec $bs)
		count=$COUNT16K
		per_job=64
		[ "$bs" = 2M ] && count=$COUNT2M && per_job=8
		mount_fs $((bytes * count))
		: > "$SCRATCH/ts"; : > "$SCRATCH/tl"; : > "$SCRATCH/fw"; : > "$SCRATCH/fr"
		for _ in $(seq "$RUNS"); do
			rm -rf "${MNT:?}"/*
			drop_caches
			out=$(DROP_CACHES=1 "$PY" "$DRIVER" io "{\"root_dir\": \"$MNT\", \"threads\": $THREADS}" \
				"$bytes" "$count" "$per_job")
			awk '{ print $2 }' <<<"$out" >> "$SCRATCH/ts"
			awk '{ print $4 }' <<<"$out" >> "$SCRATCH/tl"
			rm -rf "${MNT:?}"/*
			drop_caches
			fio_gbps write "$bs" "$count" >> "$SCRATCH/fw"
			drop_caches
			fio_gbps read "$bs" "$count" >> "$SCRATCH/fr"
		done
		ts=$(best < "$SCRATCH/ts"); tl=$(best < "$SCRATCH/tl")
		fw=$(best < "$SCRATCH/fw"); fr=$(best < "$SCRATCH/fr")
		printf '%-6s %-4s %10.3f %10.3f %6.2f %10.3f %10.3f %6.2f\n' "$FSNAME" "$bs" \
			"$ts" "$fw" "$(echo "$ts / $fw" | bc -l)" "$tl" "$fr" "$(echo "$tl / $fr" | bc -l)"
	done
done
mountpoint -q "$MNT" && umount "$MNT"

# Loads through kvoffd beside one memcpy thread, 2 MiB.
SOCK=$SCRATCH/kvoffd.sock
mkdir -p "$SCRATCH/offd"
exec 9> "$SCRATCH/ready"
"$KVOFFD" --root "$SCRATCH/offd" --socket "$SOCK" --cpu-bytes $(((COUNT2M + 64) * (2 << 20))) \
	--size-classes 2M --ready-fd 9 2> "$SCRATCH/kvoffd.log" &
DPID=$!
exec 9>&-
for _ in $(seq 600); do [ -S "$SOCK" ] && [ -s "$SCRATCH/ready" ] && break; sleep 0.1; done
: > "$SCRATCH/dl"; : > "$SCRATCH/mc"
for _ in $(seq "$RUNS"); do
	"$PY" "$DRIVER" io "{\"daemon\": \"$SOCK\", \"threads\": $THREADS}" $((2 << 20)) "$COUNT2M" 8 |
		awk '{ print $4 }' >> "$SCRATCH/dl"
	"$PY" "$DRIVER" memcpy $((2 << 20)) "$COUNT2M" | awk '{ print $2 }' >> "$SCRATCH/mc"
done
dl=$(best < "$SCRATCH/dl"); mc=$(best < "$SCRATCH/mc")
printf 'kvoffd 2M load %.3f, memcpy %.3f: %.2f of memcpy\n' "$dl" "$mc" "$(echo "$dl / $mc" | bc -l)"

# The scheduler thread's cost per call, on tmpfs.
mount -t tmpfs -o size=256m tmpfs "$MNT"
"$PY" "$DRIVER" calls "{\"root_dir\": \"$MNT\", \"threads\": $THREADS}"
