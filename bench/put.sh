#!/usr/bin/env bash
# kvput --batch and kvget --batch of N blocks in the vLLM / llm-d layout,
# against fio doing the same file-per-block I/O: io_uring, the same queue
# depth, O_DIRECT on both sides, one job, one file per block.
#
# Usage: bench/put.sh [SCRATCH_DIR]       (default: a new dir under /tmp)
#   N=512 QD=32 BS=2M RUNS=5 BUILD=build to change the set-up.
#
# What keeps it fair:
# - kvput's payloads come from one page-cached source file (mapped by
#   kvput, not copied, and no base64 to decode), so it reads no disk;
#   fio writes from its own buffers.
# - Both create every file inside the timed run, in a fresh dir each run
#   (fio: create_on_open=1, fallocate=none).  kvput also makes the bucket
#   dirs, sets the user.kv.xxh3 xattr and renames each temp into place:
#   that is its job.
# - Both use O_DIRECT (kvput chooses it on ext4 for whole-page blocks;
#   fio --direct=1); caches are dropped before every run when we may
#   (root), so reads come from the device.  kvget also verifies each
#   block's xxh3 and stamps its atime.
# - kvput and kvget are timed wall-clock around the whole process,
#   start-up included; fio by its own bandwidth figure, which leaves out
#   its start-up and file set-up.  The ratios are conservative for kv*.
# - fio reads twice: its own flat dir of N files (as fio --nrfiles lays
#   them out) and, with --opendir, the very files kvput wrote, so the
#   layout's spread of dirs and inodes costs both the same.  fio stats
#   every file while setting up, before its clock starts.
# - Runs alternate kv and fio; medians are reported, since the machine
#   may be shared and noisy.
# - Where the buffers' pages are the bound (a VM pinning each 4 KiB page
#   for DMA), huge pages matter more than anything else: libkv asks for
#   transparent huge pages for buffers of 2 MiB and more.  So fio reads
#   the same files a second time from hugetlbfs buffers (--mem=mmaphuge),
#   when root can reserve them, and that row is the bar; its ratio is
#   given on fio's clock and on the wall clock around both processes.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-512}
QD=${QD:-32}
BS=${BS:-2M}
RUNS=${RUNS:-5}
BUILD=${BUILD:-build}
KVPUT=$PWD/$BUILD/bin/kvput
KVGET=$PWD/$BUILD/bin/kvget
for p in "$KVPUT" "$KVGET"; do
	[ -x "$p" ] || { echo "put.sh: build first (make BUILD=$BUILD): no $p" >&2; exit 1; }
done
command -v fio > /dev/null || { echo "put.sh: needs fio" >&2; exit 1; }
command -v jq > /dev/null || { echo "put.sh: needs jq" >&2; exit 1; }
bytes=$(numfmt --from=iec "$BS")

if [ $# -ge 1 ]; then
	SCRATCH=$1
	mkdir -p "$SCRATCH"
else
	SCRATCH=$(mktemp -d /tmp/kvput-bench.XXXXXX)
fi
ROOT=$SCRATCH/root
FIODIR=$SCRATCH/fio
CONFIG=$SCRATCH/config.json
OWN_SCRATCH=$(( $# == 0 ))
HUGE=
cleanup() {
	if [ -n "$HUGE" ]; then
		umount "$HUGE" 2>/dev/null || true
		rmdir "$HUGE" 2>/dev/null || true
	fi
	[ -z "${HP_OLD:-}" ] || echo "$HP_OLD" > /proc/sys/vm/nr_hugepages 2>/dev/null || true
	if [ "$OWN_SCRATCH" -eq 1 ]; then
		rm -rf "$SCRATCH"
	else
		rm -rf "$ROOT" "$FIODIR" "$CONFIG" "$SCRATCH/src" "$SCRATCH/manifest" \
			"$SCRATCH/hashes" "$SCRATCH"/*.out "$SCRATCH"/*.med
	fi
}
trap cleanup EXIT

# N random 128-bit block hashes, as vLLM's spread over the buckets.
head -c $((N * 16)) /dev/urandom | od -An -v -tx1 | tr -d ' \n' | fold -w32 > "$SCRATCH/hashes"
echo >> "$SCRATCH/hashes"
head -c "$bytes" /dev/urandom > "$SCRATCH/src"
# kvput creates a model dir only from its config.json, as vLLM does.
cat > "$CONFIG" <<JSON
{"model_name": "bench/put", "hash_block_size": 16, "gpu_blocks_per_file": 1,
 "tp_size": 1, "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "bfloat16",
 "kv_cache_groups": [{"block_size": 16, "layer_names": ["model.layers.0.self_attn.attn"]}],
 "inference_engine": "vllm"}
JSON
sed "s|.*|{\"hash\":\"&\",\"file\":\"$SCRATCH/src\"}|" "$SCRATCH/hashes" > "$SCRATCH/manifest"

# fio's huge-page buffers: QD x BS in 2 MiB pages on a private hugetlbfs,
# given back on exit.  HUGE stays empty where that cannot be had.
hp_need=$(( (QD * bytes + (2 << 20) - 1) / (2 << 20) + 4 ))
if [ -w /proc/sys/vm/nr_hugepages ]; then
	HP_OLD=$(cat /proc/sys/vm/nr_hugepages)
	echo $((HP_OLD + hp_need)) > /proc/sys/vm/nr_hugepages 2>/dev/null || true
	if [ "$(awk '/HugePages_Free/ { print $2 }' /proc/meminfo)" -ge "$hp_need" ] &&
	   mkdir -p "$SCRATCH/hp" && mount -t hugetlbfs none "$SCRATCH/hp" 2>/dev/null; then
		HUGE=$SCRATCH/hp
	fi
fi

drop_caches() {
	sync
	if [ -w /proc/sys/vm/drop_caches ]; then
		echo 3 > /proc/sys/vm/drop_caches
	fi
	cat "$SCRATCH/src" > /dev/null	# kvput's source stays cached
}

now_ns() { date +%s%N; }
mib_s() { echo "$1" | awk -v b=$((N * bytes)) '{ printf "%.0f", b / 1048576 / ($1 / 1e9) }'; }
fio_mib_s() { jq ".jobs[0].$1.bw_bytes / 1048576 | floor" "$2"; }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

fio_common=(--name=blk --directory="$FIODIR" --ioengine=io_uring --iodepth="$QD"
	    --direct=1 --bs="$BS" --filesize="$BS" --nrfiles="$N" --openfiles="$QD"
	    --numjobs=1 --output-format=json)

echo "put.sh: $N blocks of $BS, QD $QD, $RUNS runs, in $SCRATCH ($(df -PT "$SCRATCH" | awk 'NR == 2 { print $2 }'))"
printf '%-4s %10s %10s %10s %10s %10s %10s\n' run kvput fio-write kvget fio-read fio-same fio-huge
for m in w.kv w.fio r.kv r.fio r.same r.huge r.hugewall; do : > "$SCRATCH/$m.med"; done
for run in $(seq 1 "$RUNS"); do
	rm -rf "$ROOT" "$FIODIR"
	mkdir -p "$ROOT" "$FIODIR"

	drop_caches
	t0=$(now_ns)
	"$KVPUT" --root "$ROOT" --config "$CONFIG" --batch --qd "$QD" \
		< "$SCRATCH/manifest" > "$SCRATCH/put.out"
	t1=$(now_ns)
	ok=$(grep -c '"status":"ok"' "$SCRATCH/put.out")
	[ "$ok" -eq "$N" ] || { echo "put.sh: kvput stored $ok of $N" >&2; exit 1; }
	w_kv=$(mib_s $((t1 - t0)))

	drop_caches
	fio "${fio_common[@]}" --rw=write --create_on_open=1 --fallocate=none > "$SCRATCH/fio-w.out"
	w_fio=$(fio_mib_s write "$SCRATCH/fio-w.out")

	drop_caches
	t0=$(now_ns)
	"$KVGET" --root "$ROOT" --config "$CONFIG" --batch --qd "$QD" \
		< "$SCRATCH/hashes" > "$SCRATCH/get.out"
	t1=$(now_ns)
	hits=$(grep -c '"hit":true' "$SCRATCH/get.out")
	[ "$hits" -eq "$N" ] || { echo "put.sh: kvget read $hits of $N" >&2; exit 1; }
	r_kv=$(mib_s $((t1 - t0)))

	drop_caches
	fio "${fio_common[@]}" --rw=read > "$SCRATCH/fio-r.out"
	r_fio=$(fio_mib_s read "$SCRATCH/fio-r.out")

	rank_dir=$(echo "$ROOT"/*_r0)
	drop_caches
	# --opendir prints a line before the JSON document.
	fio --name=same --opendir="$rank_dir" --ioengine=io_uring --iodepth="$QD" \
		--direct=1 --bs="$BS" --openfiles="$QD" --numjobs=1 --rw=read \
		--output-format=json 2> /dev/null | sed -n '/^{/,$p' > "$SCRATCH/fio-s.out"
	r_same=$(fio_mib_s read "$SCRATCH/fio-s.out")

	r_huge=-
	if [ -n "$HUGE" ]; then
		drop_caches
		t0=$(now_ns)
		fio --name=huge --opendir="$rank_dir" --ioengine=io_uring --iodepth="$QD" \
			--direct=1 --bs="$BS" --openfiles="$QD" --numjobs=1 --rw=read \
			--mem="mmaphuge:$HUGE/fiobuf" \
			--output-format=json 2> /dev/null | sed -n '/^{/,$p' > "$SCRATCH/fio-h.out"
		t1=$(now_ns)
		rm -f "$HUGE/fiobuf"
		r_huge=$(fio_mib_s read "$SCRATCH/fio-h.out")
		echo "$r_huge" >> "$SCRATCH/r.huge.med"
		echo "$(mib_s $((t1 - t0)))" >> "$SCRATCH/r.hugewall.med"
	fi

	printf '%-4s %10s %10s %10s %10s %10s %10s\n' "$run" "$w_kv" "$w_fio" "$r_kv" "$r_fio" "$r_same" "$r_huge"
	echo "$w_kv" >> "$SCRATCH/w.kv.med"; echo "$w_fio" >> "$SCRATCH/w.fio.med"
	echo "$r_kv" >> "$SCRATCH/r.kv.med"; echo "$r_fio" >> "$SCRATCH/r.fio.med"
	echo "$r_same" >> "$SCRATCH/r.same.med"
done

w_kv=$(median < "$SCRATCH/w.kv.med"); w_fio=$(median < "$SCRATCH/w.fio.med")
r_kv=$(median < "$SCRATCH/r.kv.med"); r_fio=$(median < "$SCRATCH/r.fio.med")
r_same=$(median < "$SCRATCH/r.same.med")
echo
echo "medians, MiB/s:"
awk -v a="$w_kv" -v b="$w_fio" 'BEGIN { printf "kvput --batch %6.0f   fio write            %6.0f   kvput/fio %.2f (target >= 0.9)\n", a, b, a / b }'
awk -v a="$r_kv" -v b="$r_fio" 'BEGIN { printf "kvget --batch %6.0f   fio read, flat dir   %6.0f   kvget/fio %.2f (target >= 0.9)\n", a, b, a / b }'
awk -v a="$r_kv" -v b="$r_same" 'BEGIN { printf "kvget --batch %6.0f   fio read, same files %6.0f   kvget/fio %.2f\n", a, b, a / b }'
if [ -n "$HUGE" ]; then
	r_huge=$(median < "$SCRATCH/r.huge.med"); r_hw=$(median < "$SCRATCH/r.hugewall.med")
	awk -v a="$r_kv" -v b="$r_huge" -v w="$r_hw" 'BEGIN { printf "kvget --batch %6.0f   fio, same files, huge pages %6.0f   kvget/fio %.2f on fio'"'"'s clock, %.2f on the wall clock (fio %.0f)\n", a, b, a / b, a / w, w }'
else
	echo "fio with huge-page buffers: not run (needs root and free memory for $hp_need huge pages)"
fi
