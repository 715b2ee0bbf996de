# Shared set-up for the kvtools bats suites: the in-tree binaries on
# PATH, a fresh cache root per test, and `requires` that skips with a
# reason when the machine cannot run a test.

bats_require_minimum_version 1.5.0
load /usr/lib/bats/bats-support/load.bash
load /usr/lib/bats/bats-assert/load.bash

: "${KV_BIN:=$BATS_TEST_DIRNAME/../../build/bin}"
PATH=$KV_BIN:$PATH
export PATH
unset KV_DAEMON

common_setup() {
	export KV_ROOT=$BATS_TEST_TMPDIR/root
	mkdir -p "$KV_ROOT"
	MNT=
}

common_teardown() {
	if [ -n "${MNT:-}" ] && mountpoint -q "$MNT"; then
		umount -l "$MNT" 2>/dev/null || true
	fi
}

setup() { common_setup; }
teardown() { common_teardown; }

# requires root|xattr|python3|gpu|mount|CMD...: skip with a reason.
requires() {
	local what
	for what in "$@"; do
		case $what in
		root) [ "$(id -u)" -eq 0 ] || skip "needs root" ;;
		mount)
			[ "$(id -u)" -eq 0 ] || skip "needs root to mount"
			local probe=$BATS_TEST_TMPDIR/.mountprobe
			mkdir -p "$probe"
			mount -t tmpfs -o size=1m tmpfs "$probe" 2>/dev/null ||
				skip "cannot mount tmpfs here"
			umount "$probe" ;;
		xattr)
			local f=$BATS_TEST_TMPDIR/.xattrprobe
			touch "$f"
			setfattr -n user.kv.probe -v 1 "$f" 2>/dev/null ||
				skip "no user xattrs on $BATS_TEST_TMPDIR" ;;
		gpu) command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 ||
			skip "no GPU device" ;;
		*) command -v "$what" >/dev/null || skip "needs $what" ;;
		esac
	done
}

# wait_for CMD...: poll until CMD succeeds; the bound, about ten
# minutes, only stops a test whose daemon never gets there.
wait_for() {
	local n
	for n in $(seq 6000); do
		"$@" && return 0
		sleep 0.1
	done
	fail "never true: $*"
}

# stat_of NAME: kvoffd's statistic NAME (a jq path) from the daemon on
# $SOCK; fails where there is none.
stat_of() {
	kvoffd --stats "$SOCK" | jq -er ".$1"
}

# stat_is NAME VALUE: whether that statistic is VALUE now.
stat_is() {
	[ "$(stat_of "$1")" = "$2" ]
}

# wait_ready FILE PID LOG: wait until process PID has made FILE; if it
# exits first, fail with what it wrote to LOG.
wait_ready() {
	until [ -e "$1" ]; do
		kill -0 "$2" 2>/dev/null || fail "process $2 exited before making $1: $(cat "$3" 2>/dev/null)"
		sleep 0.05
	done
}

# mount_tmpfs SIZE: a small tmpfs at $MNT, unmounted in teardown.
mount_tmpfs() {
	requires mount
	MNT=$BATS_TEST_TMPDIR/mnt
	mkdir -p "$MNT"
	mount -t tmpfs -o "size=$1" tmpfs "$MNT"
}

# A model config.json like vLLM's file tier writes; args: model [tp] [dtype].
make_config() {
	local model=${1:-meta-llama/Llama-3.1-8B} tp=${2:-1} dtype=${3:-bfloat16}
	cat <<JSON
{"model_name": "$model", "hash_block_size": 16, "gpu_blocks_per_file": 16,
 "tp_size": $tp, "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "$dtype",
 "kv_cache_groups": [{"block_size": 16, "layer_names": ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]}],
 "inference_engine": "vllm"}
JSON
}

# The fingerprint vLLM / llm-d would compute for a config file (python3):
# SHA-256 over the whole object's canonical JSON.
py_fingerprint() {
	python3 - "$1" <<'PY'
import hashlib, json, sys
cfg = json.load(open(sys.argv[1]))
print(hashlib.sha256(json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12])
PY
}

# random_file PATH BYTES
random_file() {
	head -c "$2" /dev/urandom > "$1"
}

# flip_byte FILE OFFSET: invert one byte in place.  Writing a fixed byte
# instead leaves random content unchanged once in 256 runs.
flip_byte() {
	python3 - "$1" "$2" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
off = int(sys.argv[2])
b = os.pread(fd, 1, off)
assert len(b) == 1, "offset beyond the end of the file"
os.pwrite(fd, bytes([b[0] ^ 0xFF]), off)
os.close(fd)
PY
}

# start_kvoffd ARGS...: kvoffd with ARGS on $SOCK, returning once it
# wrote its --ready-fd newline (a daemon that dies first fails the read);
# its pid is $DPID, its stderr in kvoffd.log.  Variables assigned on the
# call (LD_PRELOAD=... KVFI_...=...) reach the daemon.
start_kvoffd() {
	local fifo=$BATS_TEST_TMPDIR/ready.$RANDOM line
	mkfifo "$fifo"
	kvoffd --socket "$SOCK" --ready-fd 3 "$@" 3>"$fifo" 2>>"$BATS_TEST_TMPDIR/kvoffd.log" &
	DPID=$!
	read -r line <"$fifo"
	rm -f "$fifo"
	kill -0 "$DPID"
}

# start_daemon ARGS...: start_kvoffd over $KV_ROOT.
start_daemon() {
	start_kvoffd --root "$KV_ROOT" "$@"
}

# stop_daemon [SIGNAL]: signal it and leave its exit status in $DRC.
stop_daemon() {
	kill -"${1:-TERM}" "$DPID"
	DRC=0
	wait "$DPID" || DRC=$?
	DPID=
}

# kill_daemon: for teardown, a daemon a failed test left running.
kill_daemon() {
	if [ -n "${DPID:-}" ] && kill -0 "$DPID" 2>/dev/null; then
		kill -KILL "$DPID"
		wait "$DPID" 2>/dev/null || true
	fi
}
