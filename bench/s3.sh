#!/usr/bin/env bash
# kvtools on an S3 bucket against its peers, on one real S3 server (Ceph's
# RADOS Gateway, tests/s3/s3server.sh) started for the run:
#
#  1. listing OBJECTS blocks at vLLM's obj-tier keys (PREFIX//model_d12_rN/
#     hhh/hh_gG/hash.bin): kvls --blocks --ndjson against rclone lsf -R
#     (walking the "directories", --checkers INFLIGHT), rclone lsf -R
#     --fast-list (one flat listing) and aws s3api list-objects-v2 (the
#     CLI's own pagination);
#  2. PUT and GET throughput of COUNT blocks of each size in SIZES:
#     kvput --batch and kvget --batch -o DIR against rclone copy of the
#     same number of files of the same size, at the same concurrency
#     (KV_S3_INFLIGHT=INFLIGHT and --qd INFLIGHT; rclone --transfers
#     INFLIGHT --checkers INFLIGHT).
#
# Usage: bench/s3.sh [SCRATCH_DIR]        (default: a new dir under /tmp)
#   OBJECTS=20000 RANKS=4 SIZES="16K 2M" COUNT=200 INFLIGHT=32 RUNS=5
#   BUILD=build to change the set-up.  Smallest mode: OBJECTS=200 COUNT=8
#   RUNS=1.  Needs rclone, the aws CLI, /usr/bin/python3 with boto3 and
#   Ceph (radosgw); exits 77 with one line saying why when one is missing
#   or the server does not start, 1 when a side fails or moves the wrong
#   count of objects or bytes.
#
# What keeps it fair:
# - Every side runs against the same gateway in the same run, best of RUNS
#   each, the sides alternated run by run (kvtools first in odd runs, the
#   peer first in even ones).  Each is timed wall-clock around the whole
#   process, start-up included.
# - Listing: each side must list exactly OBJECTS keys (checked once, before
#   timing).  rclone lists keys with "//" (1.60 shows them as names with a
#   leading "/"); should a version not, the script says so and lists a
#   single-slash fill of the same blocks for rclone instead.
#   kvls lists both top levels at once, then each rank dir from its start,
#   cutting what is left into hex key ranges listed side by side once its
#   first page shows more than a page; S3 has no end key, so a range reads
#   at most one page past its end.
# - PUT/GET: both sides upload the same COUNT source files (hard links of
#   one random file, so the page cache holds one copy) and download them
#   into an empty dir.  rclone gets a flat dir and a flat prefix (one
#   LIST of the destination; its best case); kvtools writes the layout's
#   keys.  After each PUT the objects under the side's prefix are counted
#   and summed on the server, after each GET the files on disk: both must
#   be COUNT objects of SIZE bytes.  Each side's objects are deleted after
#   its GET (untimed), so a PUT always lands in an empty prefix (kvput
#   keeps a block that is there) and the in-memory OSD (1 GiB) holds one
#   side's set at a time.
# - rclone keeps its defaults otherwise: it sends Content-MD5 on upload and
#   checks the ETag on download; kvput computes each block's xxh3 and kvget
#   verifies it.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/s3_bench.bash

OBJECTS=${OBJECTS:-20000}
RANKS=${RANKS:-4}
SIZES=${SIZES:-16K 2M}
COUNT=${COUNT:-200}
INFLIGHT=${INFLIGHT:-32}
RUNS=${RUNS:-5}
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
PY=/usr/bin/python3
for p in kvls kvput kvget; do
	[ -x "$BIN/$p" ] || { echo "s3.sh: build first (make BUILD=$BUILD): no $BIN/$p" >&2; exit 1; }
done
for c in rclone aws; do
	command -v "$c" > /dev/null || { echo "s3.sh: needs $c"; exit 77; }
done
"$PY" -c 'import boto3' 2> /dev/null || { echo "s3.sh: needs $PY with boto3 (python3-boto3)"; exit 77; }

if [ $# -ge 1 ]; then
	SCRATCH=$1
	mkdir -p "$SCRATCH"
else
	SCRATCH=$(mktemp -d /tmp/kvs3-bench.XXXXXX)
fi
SRV=$SCRATCH/s3
KEEP_SCRATCH=
[ $# -eq 0 ] || KEEP_SCRATCH=1
cleanup() {
	[ ! -d "$SRV" ] || tests/s3/s3server.sh stop "$SRV" > /dev/null 2>&1 || true
	if [ -n "${KEEP_SCRATCH:-}" ]; then
		rm -rf "$SRV" "$SRV".* "$SCRATCH"/src-* "$SCRATCH/out" "$SCRATCH"/*.out
	else
		rm -rf "$SCRATCH"
	fi
}
trap cleanup EXIT

s3_bench_start s3.sh "$SRV"
export KV_S3_INFLIGHT=$INFLIGHT

B=kvbench
P=list

# timed CMD: run the command line CMD (eval'd, so quoted as echoed), its
# wall time in seconds in T; fails the script when it fails.
timed() {
	local t0 t1
	t0=$(date +%s%N)
	eval "$1" || { echo "s3.sh: failed: $1" >&2; exit 1; }
	t1=$(date +%s%N)
	T=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }')
}

# min A B: the smaller (an empty A counts as none)
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }'; }

# local_count DIR: "files bytes" under DIR
local_count() { find "$1" -type f -printf '%s\n' | awk '{ n++; s += $1 } END { print n + 0, s + 0 }'; }

echo "s3.sh: $(nproc) CPUs, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server: Ceph RGW $(radosgw --version 2>/dev/null | awk '{ print $3 }') at $AWS_ENDPOINT_URL (memstore), rclone $(rclone version 2>/dev/null | awk 'NR == 1 { print $2 }'), $(aws --version 2>&1 | cut -d' ' -f1)"
echo "environment of every command: . $SRV/env; unset AWS_CA_BUNDLE; KV_S3_INFLIGHT=$INFLIGHT;"
echo "  RCLONE_CONFIG=$RCLONE_CONFIG (empty) RCLONE_CONFIG_S3_TYPE=s3 RCLONE_CONFIG_S3_PROVIDER=Ceph"
echo "  RCLONE_CONFIG_S3_ENDPOINT=\$AWS_ENDPOINT_URL RCLONE_CONFIG_S3_ACCESS_KEY_ID=\$AWS_ACCESS_KEY_ID RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=\$AWS_SECRET_ACCESS_KEY"

# --- 1. listing -------------------------------------------------------------
blocks=$(( (OBJECTS + RANKS - 1) / RANKS ))
OBJECTS=$((blocks * RANKS))
echo "filling s3://$B/$P with $OBJECTS objects (1 model, $RANKS ranks, $blocks blocks each, 1 KiB) ..." >&2
"$PY" tests/s3/fill.py --bucket "$B" --prefix "$P" --ranks "$RANKS" --blocks "$blocks" \
	--size 1024 --threads 16 --create-bucket > /dev/null

RP=$P
n_rclone=$(rclone lsf -R --files-only "s3:$B/$P" | wc -l)
if [ "$n_rclone" -ne "$OBJECTS" ]; then
	echo "note: rclone lists $n_rclone of the $OBJECTS keys with '//'; rclone lists a single-slash fill (s3://$B/${P}1/model_...) instead"
	RP=${P}1
	"$PY" tests/s3/fill.py --bucket "$B" --prefix "$RP" --ranks "$RANKS" --blocks "$blocks" \
		--size 1024 --threads 16 --single-slash > /dev/null
fi

L_NAMES=(kvls "rclone lsf -R" "rclone lsf -R --fast-list" "aws s3api list-objects-v2")
L_CMDS=(
	"$BIN/kvls --root s3://$B/$P --blocks --ndjson"
	"rclone lsf -R --files-only --checkers $INFLIGHT s3:$B/$RP"
	"rclone lsf -R --files-only --fast-list s3:$B/$RP"
	"aws s3api list-objects-v2 --bucket $B --prefix $P/ --output text --query 'Contents[].Key' | tr '\\t' '\\n'"
)
for i in "${!L_CMDS[@]}"; do
	n=$(eval "${L_CMDS[$i]}" | grep -c .) || true
	[ "$n" -eq "$OBJECTS" ] || { echo "s3.sh: ${L_NAMES[$i]} listed $n keys, want $OBJECTS: ${L_CMDS[$i]}" >&2; exit 1; }
done

echo
echo "1. listing $OBJECTS objects, best of $RUNS (s), commands:"
for i in "${!L_CMDS[@]}"; do echo "  ${L_CMDS[$i]} > /dev/null"; done
declare -A LBEST=()
printf '  %-4s' run; for n in "${L_NAMES[@]}"; do printf ' %28s' "$n"; done; echo
for ((r = 1; r <= RUNS; r++)); do
	declare -A lt=()
	order=(0 1 2 3)
	[ $((r % 2)) -eq 1 ] || order=(1 2 3 0)
	for i in "${order[@]}"; do
		timed "${L_CMDS[$i]} > /dev/null"
		lt[$i]=$T
		LBEST[$i]=$(min "${LBEST[$i]:-}" "$T")
	done
	printf '  %-4s' "$r"; for i in "${!L_CMDS[@]}"; do printf ' %28s' "${lt[$i]}"; done; echo
	unset lt
done
RATIOS=()
for i in 1 2 3; do
	line=$(awk -v p="${LBEST[$i]}" -v k="${LBEST[0]}" -v n="${L_NAMES[$i]}" \
		'BEGIN { printf "list %d objects: %s / kvls = %.3f / %.3f s = %.2f", '"$OBJECTS"', n, p, k, p / k }')
	echo "  ratio $line"
	RATIOS+=("$line")
done
s3util rm "$P" > /dev/null
[ "$RP" = "$P" ] || s3util rm "$RP" > /dev/null

# --- 2. PUT and GET -----------------------------------------------------------
CFG=$SCRATCH/config.json
cat > "$CFG" <<'JSON'
{"model_name": "bench/s3", "hash_block_size": 16, "gpu_blocks_per_file": 16,
 "tp_size": 1, "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "bfloat16",
 "kv_cache_groups": [{"block_size": 16, "layer_names": ["model.layers.0.self_attn.attn"]}],
 "inference_engine": "vllm"}
JSON
OUT=$SCRATCH/out

for SIZE in $SIZES; do
	bytes=$(numfmt --from=iec "$SIZE")
	want="$COUNT $((COUNT * bytes))"
	SRC=$SCRATCH/src-$SIZE
	rm -rf "$SRC"; mkdir -p "$SRC"
	head -c "$bytes" /dev/urandom > "$SCRATCH/blob-$SIZE"
	head -c $((COUNT * 16)) /dev/urandom | od -An -v -tx1 | tr -d ' \n' | fold -w32 > "$SRC.hashes"
	echo >> "$SRC.hashes"
	while read -r h; do ln "$SCRATCH/blob-$SIZE" "$SRC/$h.bin"; done < "$SRC.hashes"
	sed "s|.*|{\"hash\":\"&\",\"file\":\"$SRC/&.bin\"}|" "$SRC.hashes" > "$SRC.manifest"

	KPUT="$BIN/kvput --root s3://$B/kv --config $CFG --batch --qd $INFLIGHT < $SRC.manifest > $SCRATCH/put.out"
	KGET="$BIN/kvget --root s3://$B/kv --config $CFG --batch --qd $INFLIGHT -o $OUT < $SRC.hashes > $SCRATCH/get.out"
	RPUT="rclone copy --transfers $INFLIGHT --checkers $INFLIGHT $SRC s3:$B/rc"
	RGET="rclone copy --transfers $INFLIGHT --checkers $INFLIGHT s3:$B/rc $OUT"
	echo
	echo "2. $COUNT objects of $SIZE, $INFLIGHT in flight, best of $RUNS (s; MiB/s), commands:"
	printf '  %s\n' "$KPUT" "$KGET" "$RPUT" "$RGET"
	printf '  %-4s %10s %7s %10s %7s %10s %7s %10s %7s\n' run kvput MiB/s rclone-up MiB/s kvget MiB/s rclone-dn MiB/s
	kp='' kg='' rp='' rg=''
	for ((r = 1; r <= RUNS; r++)); do
		sides=(kv rc)
		[ $((r % 2)) -eq 1 ] || sides=(rc kv)
		for side in "${sides[@]}"; do
			rm -rf "$OUT"; mkdir -p "$OUT"
			if [ "$side" = kv ]; then
				timed "$KPUT"; t_kp=$T
				ok=$(grep -c '"status":"ok"' "$SCRATCH/put.out") || true
				[ "$ok" -eq "$COUNT" ] || { echo "s3.sh: kvput stored $ok of $COUNT" >&2; exit 1; }
				got=$(s3util count kv)
				[ "$got" = "$want" ] || { echo "s3.sh: after kvput the bucket holds '$got' (objects bytes), want '$want'" >&2; exit 1; }
				timed "$KGET"; t_kg=$T
				hits=$(grep -c '"hit":true' "$SCRATCH/get.out") || true
				[ "$hits" -eq "$COUNT" ] || { echo "s3.sh: kvget read $hits of $COUNT" >&2; exit 1; }
				got=$(local_count "$OUT")
				[ "$got" = "$want" ] || { echo "s3.sh: kvget wrote '$got' (files bytes), want '$want'" >&2; exit 1; }
				s3util rm kv > /dev/null
			else
				timed "$RPUT"; t_rp=$T
				got=$(s3util count rc)
				[ "$got" = "$want" ] || { echo "s3.sh: after rclone copy the bucket holds '$got' (objects bytes), want '$want'" >&2; exit 1; }
				timed "$RGET"; t_rg=$T
				got=$(local_count "$OUT")
				[ "$got" = "$want" ] || { echo "s3.sh: rclone copy wrote '$got' (files bytes), want '$want'" >&2; exit 1; }
				s3util rm rc > /dev/null
			fi
		done
		printf '  %-4s %10s %7s %10s %7s %10s %7s %10s %7s\n' "$r" \
			"$t_kp" "$(awk -v t="$t_kp" -v b=$((COUNT * bytes)) 'BEGIN { printf "%.1f", b / 1048576 / t }')" \
			"$t_rp" "$(awk -v t="$t_rp" -v b=$((COUNT * bytes)) 'BEGIN { printf "%.1f", b / 1048576 / t }')" \
			"$t_kg" "$(awk -v t="$t_kg" -v b=$((COUNT * bytes)) 'BEGIN { printf "%.1f", b / 1048576 / t }')" \
			"$t_rg" "$(awk -v t="$t_rg" -v b=$((COUNT * bytes)) 'BEGIN { printf "%.1f", b / 1048576 / t }')"
		kp=$(min "$kp" "$t_kp"); kg=$(min "$kg" "$t_kg")
		rp=$(min "$rp" "$t_rp"); rg=$(min "$rg" "$t_rg")
	done
	for op in PUT GET; do
		if [ $op = PUT ]; then k=$kp p=$rp kn="kvput --batch"; else k=$kg p=$rg kn="kvget --batch"; fi
		line=$(awk -v p="$p" -v k="$k" -v kn="$kn" -v b=$((COUNT * bytes)) \
			'BEGIN { printf "%s %d x %s: rclone copy / %s = %.3f / %.3f s = %.2f (%.1f vs %.1f MiB/s)",
				"'"$op"'", '"$COUNT"', "'"$SIZE"'", kn, p, k, p / k, b / 1048576 / k, b / 1048576 / p }')
		echo "  ratio $line"
		RATIOS+=("$line")
	done
	rm -rf "$SRC" "$SRC.hashes" "$SRC.manifest" "$SCRATCH/blob-$SIZE" "$OUT"
done

echo
echo "ratios, peer time / kvtools time, best of $RUNS (>= 1: kvtools at least as fast):"
printf '  %s\n' "${RATIOS[@]}"
