#!/usr/bin/env bash
# Concurrency test: several writer processes (each in its own mount
# namespace where unshare(1) allows, like nodes sharing one volume) put the
# same and different keys while readers read them with kvget and an
# evictor deletes: a reader must always get a miss or the whole, correct
# bytes of some put of that key, never a torn or mixed block.
#
# Usage: tests/stress/concurrency.sh [ROUNDS]          (default 300)
# Environment: BUILD or KV_BIN for the binaries; WRITERS (default 4),
# READERS (default 3); SHARED_KEYS (default 8) keys every writer puts;
# BLOCK_BYTES (default 131072); DIR_GRACE (default 10m) for the evictor's
# --dir-grace, 0 to race bucket removal against puts; NS=0 to stay in one mount namespace;
# STRESS_DIR to keep the tree (default a fresh temp dir, removed).
#
# Each put writes BLOCK_BYTES of identical 64-byte records naming the key,
# the writer and its round, so a reader checks a block by itself.  One line
# of results at the end; exit 0 when every read and put was right.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
bin=${KV_BIN:-$PWD/${BUILD:-build}/bin}
PATH=$bin:$PATH
block_bytes=${BLOCK_BYTES:-131072}
shared_keys=${SHARED_KEYS:-8}

# Key $2 of writer $1 (writer 0: the shared keys), spread over buckets.
hash_of() { printf '%03x%05x%024x' $((($1 * 7 + $2) % 6)) "$1" "$2"; }
record() { printf 'kvconc key=%s ver=%08d %*s' "$1" "$2" $((63 - 25 - ${#1})) x; }
payload() { yes "$(record "$1" "$2")" | head -c "$block_bytes"; }
block_path() { local h=$2; echo "$1/${model_dir}_r0/${h:0:3}/${h:3:2}_g0/$h.bin"; }

# A block (file $1) is right when it is whole and every record is the
# first one, which must name key $2.
block_ok() {
	local f=$1 h=$2 line ver size
	size=$(stat -c %s "$f") || return 1
	[ "$size" -eq "$block_bytes" ] || return 1
	IFS= read -r line < "$f"
	ver=${line#*ver=}; ver=${ver%% *}
	[[ $line == "kvconc key=$h ver="* && $ver =~ ^[0-9]{8}$ ]] || return 1
	payload "$h" "$((10#$ver))" | cmp -s - "$f"
}

pick_key() {	# shared keys, or one of this writer's own ($1)
	if [ $((RANDOM % 2)) -eq 0 ]; then hash_of 0 $((RANDOM % shared_keys))
	else hash_of "$1" $((RANDOM % 4)); fi
}

# Workers: run as separate processes (and namespaces) of this script.
if [ "${1:-}" = --writer ]; then
	root=$2 model_dir=$3 w=$4 rounds=$5 out=$6
	puts=0 failed=0
	for ((r = 1; r <= rounds; r++)); do
		h=$(pick_key "$w")
		if payload "$h" $((w * 100000 + r)) |
			kvput --root "$root" --model-dir "$model_dir" "$h" - 2>> "$out.err"; then
			puts=$((puts + 1))
		else
			failed=$((failed + 1))
		fi
	done
	echo "puts=$puts putfail=$failed" > "$out"
	exit 0
fi
if [ "${1:-}" = --reader ]; then
	root=$2 model_dir=$3 n=$4 rounds=$5 out=$6 writers=$7
	hits=0 misses=0 bad=0 errors=0 tmp=$out.data
	for ((r = 1; r <= rounds; r++)); do
		h=$(pick_key $((1 + RANDOM % writers)))
		kvget --root "$root" --model-dir "$model_dir" "$h" > "$tmp" 2>> "$out.err"
		case $? in
		0) if block_ok "$tmp" "$h"; then hits=$((hits + 1))
		   else bad=$((bad + 1)); cp "$tmp" "$out.bad.$r"; fi ;;
		1) misses=$((misses + 1)) ;;
		*) errors=$((errors + 1)) ;;
		esac
	done
	rm -f "$tmp"
	echo "hits=$hits misses=$misses bad=$bad errors=$errors" > "$out"
	exit 0
fi
if [ "${1:-}" = --evictor ]; then
	root=$2 stopfile=$3 out=$4 dir_grace=$5
	runs=0 failed=0
	while [ ! -e "$stopfile" ]; do
		# Keep the cache near a dozen blocks so deletes race reads.
		if kvevict --root "$root" --max-bytes $((block_bytes * 12)) \
			--low-bytes $((block_bytes * 6)) --hot 0 --dir-grace "$dir_grace" > /dev/null 2>> "$out.err"; then
			runs=$((runs + 1))
		else
			failed=$((failed + 1))
		fi
	done
	echo "evictions=$runs evictfail=$failed" > "$out"
	exit 0
fi

rounds=${1:-300}
writers=${WRITERS:-4}
readers=${READERS:-3}
for p in kvput kvget; do
	[ -x "$bin/$p" ] || { echo "concurrency.sh: no $bin/$p (build first)" >&2; exit 2; }
done
if [ -n "${STRESS_DIR:-}" ]; then
	work=$STRESS_DIR; mkdir -p "$work"
else
	work=$(mktemp -d "${TMPDIR:-/tmp}/kvconc.XXXXXX")
	trap 'rm -rf "$work"' EXIT
fi
root=$work/root
rm -rf "$root" "$work"/out.* "$work/stop"; mkdir -p "$root"
cat > "$work/config.json" <<'JSON'
{"model_name": "stress/concurrency", "hash_block_size": 16, "gpu_blocks_per_file": 16,
 "tp_size": 1, "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "bfloat16",
 "kv_cache_groups": [{"block_size": 16, "layer_names": ["model.layers.0.self_attn.attn"]}],
 "inference_engine": "vllm"}
JSON
h0=$(hash_of 0 0)
payload "$h0" 0 | kvput --root "$root" --config "$work/config.json" "$h0" - ||
	{ echo "concurrency.sh: the first kvput failed" >&2; exit 2; }
model_dir=$(cd "$root" && for d in */; do d=${d%/}; case $d in *_r[0-9]*) ;; *) echo "$d" ;; esac; done)

ns=()
if [ "${NS:-1}" = 1 ] && [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; then
	ns=(unshare -m --propagation private)
fi

self=$here/concurrency.sh
start=$(date +%s%N)
pids=()
for ((w = 1; w <= writers; w++)); do
	"${ns[@]}" bash "$self" --writer "$root" "$model_dir" "$w" "$rounds" "$work/out.w$w" &
	pids+=($!)
done
for ((n = 1; n <= readers; n++)); do
	bash "$self" --reader "$root" "$model_dir" "$n" "$rounds" "$work/out.r$n" "$writers" &
	pids+=($!)
done
evicting=no
if [ -x "$bin/kvevict" ]; then
	bash "$self" --evictor "$root" "$work/stop" "$work/out.evict" "${DIR_GRACE:-10m}" &
	evpid=$! evicting=yes
fi
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
if [ "$evicting" = yes ]; then touch "$work/stop"; wait "$evpid" || status=1; fi
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))

sum() { cat "$work"/out.$1* 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | awk '{s += $1} END {print s + 0}'; }
puts=$(sum w puts) putfail=$(sum w putfail)
hits=$(sum r hits) misses=$(sum r misses) bad=$(sum r bad) errors=$(sum r errors)
evictions=$(sum evict evictions) evictfail=$(sum evict evictfail)

# Everything still visible must be a whole block of its key.
final=0 finalbad=0
while IFS= read -r f; do
	h=${f##*/}; h=${h%.bin}
	if block_ok "$f" "$h"; then final=$((final + 1)); else finalbad=$((finalbad + 1)); fi
done < <(find "$root" -name '*.bin')

echo "concurrency: $writers writers${ns:+ (own mount namespaces)} x $rounds puts, $readers readers x $rounds gets," \
	"evictor $evicting ($evictions runs) in ${elapsed_ms} ms: $puts puts ok, $putfail failed;" \
	"$hits hits ok, $misses misses, $bad wrong, $errors read errors; $final blocks at the end ok, $finalbad bad"
for e in "$work"/out.*.err; do
	[ -s "$e" ] && { echo "--- ${e##*/}:"; sort "$e" | uniq -c | sort -rn | head -5; }
done
[ "$status" -eq 0 ] && [ "$bad" -eq 0 ] && [ "$errors" -eq 0 ] && [ "$putfail" -eq 0 ] &&
	[ "$evictfail" -eq 0 ] && [ "$finalbad" -eq 0 ] && [ "$hits" -gt 0 ]
