#!/usr/bin/env bash
# Crash test: kill -9 kvput writers at random moments and check that no
# torn or wrong block is ever visible, that nothing a finished put wrote is
# lost, and that kvevict's orphan rule reclaims the temps the dead writers
# left behind.
#
# Then the same for kvoffd's write-behind: a daemon with --write-policy
# always is killed while clients put, ITERATIONS/10 times.
#
# Usage: tests/stress/crash.sh [ITERATIONS]      (default 1000)
# Environment: BUILD (default build) or KV_BIN for the binaries; KEYS
# (default 16) distinct block hashes; BLOCK_BYTES (default 262144);
# STRESS_DIR to keep the tree somewhere given (default a fresh temp dir,
# removed at the end).
#
# Every fifth writer is a kvput --batch of 4 blocks, killed the same way.
# Every put of key K version V writes BLOCK_BYTES of 64-byte records
# "kvcrash key=K ver=V ...", so a reader can tell a torn or mixed file from
# a whole one without keeping every payload.  One line of results at the
# end; exit 0 when every check held, 1 otherwise, 2 on bad set-up.
set -u
cd "$(dirname "$0")/../.."
iterations=${1:-1000}
keys=${KEYS:-16}
block_bytes=${BLOCK_BYTES:-262144}
bin=${KV_BIN:-$PWD/${BUILD:-build}/bin}
PATH=$bin:$PATH

for p in kvput kvget; do
	[ -x "$bin/$p" ] || { echo "crash.sh: no $bin/$p (build first)" >&2; exit 2; }
done
[ $((block_bytes % 64)) -eq 0 ] || { echo "crash.sh: BLOCK_BYTES must be a multiple of 64" >&2; exit 2; }

if [ -n "${STRESS_DIR:-}" ]; then
	work=$STRESS_DIR; mkdir -p "$work"
else
	work=$(mktemp -d "${TMPDIR:-/tmp}/kvcrash.XXXXXX")
	trap 'rm -rf "$work"' EXIT
fi
root=$work/root
rm -rf "$root"; mkdir -p "$root"

cat > "$work/config.json" <<'JSON'
{"model_name": "stress/crash-model", "hash_block_size": 16, "gpu_blocks_per_file": 16,
 "tp_size": 1, "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "bfloat16",
 "kv_cache_groups": [{"block_size": 16, "layer_names": ["model.layers.0.self_attn.attn"]}],
 "inference_engine": "vllm"}
JSON

hash_of() { printf '%08x%024x' "$1" "$1"; }

# One 64-byte record (63 characters and the newline `yes` adds).
record() { printf 'kvcrash key=%s ver=%08d %*s' "$1" "$2" $((63 - 26 - ${#1})) x; }

payload() { yes "$(record "$1" "$2")" | head -c "$block_bytes"; }

fails=0
fail() { echo "crash.sh: FAIL: $*" >&2; fails=$((fails + 1)); }

# The model dir, created once by a put that is left to finish.
payload "$(hash_of 0)" 0 | kvput --root "$root" --config "$work/config.json" "$(hash_of 0)" - ||
	{ echo "crash.sh: the first kvput failed" >&2; exit 2; }
model_dir=$(cd "$root" && for d in */; do d=${d%/}; case $d in *_r[0-9]*) ;; *) echo "$d" ;; esac; done)
[ -n "$model_dir" ] || { echo "crash.sh: no model dir under $root" >&2; exit 2; }

block_path() { local h=$1; echo "$root/${model_dir}_r0/${h:0:3}/${h:3:2}_g0/$h.bin"; }

# Check one visible block: whole, self-consistent, of key $1, with a
# version no older than $2; echoes the version found.
check_block() {
	local h=$1 min=$2 f line ver size
	f=$(block_path "$h")
	size=$(stat -c %s "$f") || { fail "$h: vanished"; return 1; }
	[ "$size" -eq "$block_bytes" ] || { fail "$h: $size bytes, want $block_bytes"; return 1; }
	IFS= read -r line < "$f"
	ver=${line#*ver=}; ver=${ver%% *}
	[[ $line == "kvcrash key=$h ver="* && $ver =~ ^[0-9]{8}$ ]] ||
		{ fail "$h: foreign first record '$line'"; return 1; }
	payload "$h" "$((10#$ver))" | cmp -s - "$f" || { fail "$h: torn or mixed content (ver $ver)"; return 1; }
	[ "$((10#$ver))" -ge "$min" ] || { fail "$h: holds ver $ver, older than a finished put ($min)"; return 1; }
	# kvget checks the user.kv.xxh3 checksum where the filesystem keeps it.
	kvget --root "$root" --model-dir "$model_dir" --no-touch "$h" | cmp -s - "$f" ||
		{ fail "$h: kvget disagrees (checksum or read error)"; return 1; }
	echo "$((10#$ver))"
}

# A pause of a given number of microseconds without forking: a read that
# times out on a pipe nobody writes to.
exec {never}<> <(:)
pause_us() { read -r -t "$(printf '0.%06d' "$1")" -u "$never" _ || true; }

# Calibrate the kill window on this machine: a little longer than a put.
t0=$(date +%s%N)
for i in 1 2 3 4 5; do payload "$(hash_of 1)" 0 | kvput --replace --root "$root" --model-dir "$model_dir" "$(hash_of 1)" - || exit 2; done
put_us=$(( ($(date +%s%N) - t0) / 5000 ))
window_us=$(( put_us * 3 / 2 + 1 ))
[ "$window_us" -lt 1000000 ] || window_us=999999

declare -a done_ver
for ((k = 0; k < keys; k++)); do done_ver[k]=-1; done
done_ver[0]=0 done_ver[1]=0

killed=0 finished=0 checked=0 batches=0 start=$(date +%s%N)
for ((i = 1; i <= iterations; i++)); do
	k=$((RANDOM % keys))
	# Every fifth writer is a kvput --batch of 4 keys with 4 in flight.
	if [ $((i % 5)) -eq 0 ]; then
		batch_keys=($k $(((k + 1) % keys)) $(((k + 2) % keys)) $(((k + 3) % keys)))
		: > "$work/manifest"
		for bk in "${batch_keys[@]}"; do
			payload "$(hash_of "$bk")" "$i" > "$work/batch.$bk"
			printf '{"hash":"%s","file":"%s"}\n' "$(hash_of "$bk")" "$work/batch.$bk" >> "$work/manifest"
		done
		kvput --replace --root "$root" --model-dir "$model_dir" --qd 4 --batch "$work/manifest" \
			> /dev/null 2>&1 &
		batches=$((batches + 1))
	else
		batch_keys=($k)
		payload "$(hash_of "$k")" "$i" |
			kvput --replace --root "$root" --model-dir "$model_dir" "$(hash_of "$k")" - 2>/dev/null &
	fi
	pid=$!
	pause_us $(( (RANDOM * 32768 + RANDOM) % (window_us * ${#batch_keys[@]}) ))
	kill -9 "$pid" 2>/dev/null
	# (The braces keep bash's "Killed" job notice off stderr.)
	{ wait "$pid"; rc=$?; } 2>/dev/null
	if [ "$rc" -eq 0 ]; then
		finished=$((finished + 1))
		for bk in "${batch_keys[@]}"; do done_ver[bk]=$i; done
	elif [ "$rc" -eq 137 ]; then
		killed=$((killed + 1))
	else
		fail "iteration $i: kvput exited $rc"
	fi
	for bk in "${batch_keys[@]}"; do
		h=$(hash_of "$bk")
		if [ -e "$(block_path "$h")" ]; then
			check_block "$h" "${done_ver[bk]}" > /dev/null && checked=$((checked + 1))
		elif [ "${done_ver[bk]}" -ge 0 ]; then
			fail "iteration $i: $h vanished after a finished put"
		fi
	done
done

# Phase two: kill -9 kvoffd while it writes blocks behind to the file tier
# (--write-policy always), one tenth as many rounds, on keys of its own.
# Whatever reached the tier must be whole; RAM-only blocks may be lost.
offd_rounds=0 offd_keys=0
client=$bin/../bench/offd_client
if [ -x "$bin/kvoffd" ] && [ -x "$client" ]; then
	offd_keys=4
	for ((k = keys; k < keys + offd_keys; k++)); do done_ver[k]=-1; done
	for ((i = 1; i <= iterations / 10; i++)); do
		sock=$work/offd.sock
		rm -f "$sock"
		exec {ready}<> <(:)
		kvoffd --root "$root" --socket "$sock" --cpu-bytes 4M --slot-bytes "$block_bytes" \
			--write-policy always --ready-fd "$ready" 2>/dev/null &
		dpid=$!
		read -r -u "$ready" _ || { fail "kvoffd did not start"; break; }
		exec {ready}<&-
		(
			for ((k = keys; k < keys + offd_keys; k++)); do
				payload "$(hash_of "$k")" $((iterations + i)) > "$work/offd.$k"
				"$client" put "$sock" "$model_dir" 0 0 "$(hash_of "$k")" "$work/offd.$k" 2>/dev/null
			done
		) &
		cpid=$!
		pause_us $(( (RANDOM * 32768 + RANDOM) % (window_us * offd_keys * 2) ))
		kill -9 "$dpid" 2>/dev/null
		{ wait "$dpid"; wait "$cpid"; } 2>/dev/null
		offd_rounds=$i
		for ((k = keys; k < keys + offd_keys; k++)); do
			h=$(hash_of "$k")
			if [ -e "$(block_path "$h")" ]; then
				check_block "$h" -1 > /dev/null && checked=$((checked + 1))
			fi
		done
	done
fi

elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))

# Final sweep: every visible block of every key, and the temps left behind.
bins=0
for ((k = 0; k < keys + offd_keys; k++)); do
	h=$(hash_of "$k")
	if [ -e "$(block_path "$h")" ]; then
		check_block "$h" "${done_ver[k]}" > /dev/null && bins=$((bins + 1))
	elif [ "${done_ver[k]}" -ge 0 ]; then
		fail "$h: lost"
	fi
done
foreign=$(find "$root" -type f ! -name '*.bin' ! -name '*.tmp' ! -name config.json | wc -l)
[ "$foreign" -eq 0 ] || fail "$foreign unexpected files in the tree"
temps=$(find "$root" -name '*.tmp' | wc -l)

# kvls re-hashes every block against its user.kv.xxh3 (temps are young,
# so they are writes in flight to it, not problems).
verified=skipped
if [ -x "$bin/kvls" ]; then
	v=$(kvls --root "$root" --verify -J)
	if [[ $v == *'"mismatched":0,'* && $v == *'"unchecked":0,'* && $v == *"\"verified\":$bins,"* ]]; then
		verified=$bins
	else
		fail "kvls --verify: $v"
	fi
fi

reclaimed=skipped
if [ -x "$bin/kvevict" ]; then
	# Only the orphan rule can apply: no threshold is near.
	if kvevict --root "$root" --orphans-after 0 --force --max-bytes 1T > /dev/null; then
		left=$(find "$root" -name '*.tmp' | wc -l)
		[ "$left" -eq 0 ] || fail "kvevict --orphans-after 0 --force left $left temps"
		reclaimed=$((temps - left))
		after=$(find "$root" -name '*.bin' | wc -l)
		[ "$after" -eq "$bins" ] || fail "kvevict removed blocks: $bins before, $after after"
	else
		fail "kvevict --orphans-after 0 --force failed"
	fi
fi
echo "crash: $iterations iterations in ${elapsed_ms} ms (window ${window_us} us):" \
	"$killed killed, $finished finished, $batches of all were --batch puts of 4;" \
	"$offd_rounds kvoffd write-behind kills;" \
	"$checked checks during the run," \
	"$bins blocks whole at the end, xxh3 verified by kvls: $verified, $temps temps left," \
	"reclaimed $reclaimed, $fails failures"
[ "$fails" -eq 0 ]
