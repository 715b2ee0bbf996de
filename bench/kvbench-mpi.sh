#!/usr/bin/env bash
# kvbench on 1, 2 and 4 MPI ranks against fio driven the same way: each
# rank (fio: each group of THREADS jobs) owns FILES_PER_RANK files of one
# 2 MiB block, io_uring at QD per thread, O_DIRECT, in-place writes then
# reads, each phase for the same time.  kvbench stonewalls (a phase ends
# for all ranks when the first is done, here at the deadline) and sums
# the ranks; fio's group_reporting sums its jobs.  Each size runs REPEAT
# times, the tools taking turns, the best of each kept.  Prints one table
# row per rank count with both aggregates, their ratio and kvbench's
# slowest rank.
#
# Usage: bench/kvbench-mpi.sh [DIR]   (default: a fresh dir under /var/tmp;
#        DIR's filesystem must accept O_DIRECT: ext4, xfs, not tmpfs)
# Environment: BUILD (build), RANKS ("1 2 4"), FILES_PER_RANK (128),
#              THREADS (2), QD (8), SECONDS_PER_PHASE (10), REPEAT (3)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RANKS=${RANKS:-1 2 4}
FILES=${FILES_PER_RANK:-128}
THREADS=${THREADS:-2}
QD=${QD:-8}
T=${SECONDS_PER_PHASE:-10}
REPEAT=${REPEAT:-3}
KVBENCH=$PWD/$BUILD/bin/kvbench
for c in fio jq mpirun; do
	command -v $c >/dev/null || { echo "needs $c" >&2; exit 3; }
done
[ -x "$KVBENCH" ] || { echo "build kvbench first: make BUILD=$BUILD" >&2; exit 3; }
# grep -c reads all of ldd's output: -q would stop early, and ldd's
# SIGPIPE would fail the pipeline under pipefail now and then.
ldd "$KVBENCH" | grep -c libmpi > /dev/null ||
	{ echo "$KVBENCH is built without MPI (install libopenmpi-dev, rebuild)" >&2; exit 3; }
# Root may run ranks only when it says so.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ $# -ge 1 ]; then
	DIR=$1
	mkdir -p "$DIR"
else
	DIR=$(mktemp -d /var/tmp/kvbench-mpi.XXXXXX)
	trap 'rm -rf "$DIR"' EXIT
fi

# kvbench: in place, as fio writes; --keep so later turns overwrite
# files that exist, as fio's do.
kv_run() {
	mpirun --oversubscribe --bind-to none -np "$1" "$KVBENCH" run --dir "$DIR/kvbench-$1" \
		--block-size 2M --size $((FILES * 2))M --threads "$THREADS" --qd "$QD" \
		--engine uring --direct --in-place --phases write,read --duration "${T}s" --keep -J
}

# fio: ranks x THREADS jobs, each owning FILES/THREADS one-block files.
fio_run() {
	fio --name=kv --directory="$DIR/fio-$2" --rw="$1" --bs=2M --filesize=2M \
		--nrfiles=$((FILES / THREADS)) --numjobs=$(($2 * THREADS)) --iodepth="$QD" \
		--ioengine=io_uring --direct=1 --file_service_type=roundrobin \
		--time_based --runtime="$T" --group_reporting --output-format=json
}

max() { [ "$1" -ge "$2" ] && echo "$1" || echo "$2"; }
phase() { jq ".phases[] | select(.phase == \"$1\") | $2" <<<"$3"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

echo "job: per rank $FILES files x 2 MiB, $THREADS threads x QD $QD, io_uring, O_DIRECT," \
	"in place, ${T}s per phase, best of $REPEAT, $DIR ($(df -T "$DIR" | awk 'NR == 2 { print $2 }'))"
printf '%5s %12s %12s %8s %12s %12s %8s %16s\n' ranks kv_write fio_write ratio \
	kv_read fio_read ratio slowest_read
for n in $RANKS; do
	mkdir -p "$DIR/kvbench-$n" "$DIR/fio-$n"
	kw=0 kr=0 fw=0 fr=0 slow=0
	for _ in $(seq "$REPEAT"); do
		doc=$(kv_run "$n")
		kw=$(max "$kw" "$(phase write .throughput_Bps "$doc")")
		r=$(phase read .throughput_Bps "$doc")
		if [ "$r" -ge "$kr" ]; then
			kr=$r
			# The slowest rank of the best read, as bytes/s.
			slow=$(phase read '(.slowest_rank // 0) as $s |
				(.ranks // [{throughput_Bps: .throughput_Bps}])[$s].throughput_Bps' "$doc")
		fi
		fw=$(max "$fw" "$(fio_run write "$n" | jq '.jobs[0].write.bw_bytes')")
		fr=$(max "$fr" "$(fio_run read "$n" | jq '.jobs[0].read.bw_bytes')")
	done
	printf '%5s %12s %12s %8s %12s %12s %8s %16s\n' "$n" "$(mib "$kw")" "$(mib "$fw")" \
		"$(awk -v a="$kw" -v b="$fw" 'BEGIN { printf "%.3f", a / b }')" \
		"$(mib "$kr")" "$(mib "$fr")" \
		"$(awk -v a="$kr" -v b="$fr" 'BEGIN { printf "%.3f", a / b }')" "$(mib "$slow")"
done
echo "(MiB/s; ratio = kvbench / fio; slowest_read = kvbench's slowest rank in its best read)"
