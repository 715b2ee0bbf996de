#!/usr/bin/env bats
# KV events on llm-d's wire: kvevict, kvput, kvls --announce and kvoffd
# publish to a subscriber (tests/fixtures/kvsub.py) that decodes each
# message as llm-d-kv-cache's Go vLLM adapter does.  The subscriber needs
# Debian's python3-zmq and python3-msgpack, hence /usr/bin/python3.

load test_helper

PY=/usr/bin/python3
SUB=$BATS_TEST_DIRNAME/../fixtures/kvsub.py
MODEL=meta-llama/Llama-3.1-8B

setup() {
	common_setup
	$PY -c 'import zmq, msgpack' 2>/dev/null ||
		skip "needs python3-zmq and python3-msgpack for /usr/bin/python3"
	SPID=
	DPID=
	make_config "$MODEL" > "$BATS_TEST_TMPDIR/config.json"
	CFG=$BATS_TEST_TMPDIR/config.json
}

teardown() {
	[ -z "${SPID:-}" ] || kill -KILL "$SPID" 2>/dev/null || true
	kill_daemon
	common_teardown
}

free_port() {
	$PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_sub --bind|--connect ENDPOINT [ARGS...]: the subscriber in the
# background, its records in $BATS_TEST_TMPDIR/sub.out.
start_sub() {
	local ready=$BATS_TEST_TMPDIR/sub.ready
	rm -f "$ready"
	$PY "$SUB" "$@" --ready "$ready" > "$BATS_TEST_TMPDIR/sub.out" \
		2> "$BATS_TEST_TMPDIR/sub.err" &
	SPID=$!
	wait_ready "$ready" "$SPID" "$BATS_TEST_TMPDIR/sub.err"
}

# stop_sub: it drains what it was sent, then exits.
stop_sub() {
	kill -TERM "$SPID"
	wait "$SPID"
	SPID=
	! grep -q '"error"' "$BATS_TEST_TMPDIR/sub.out" ||
		fail "undecodable: $(grep '"error"' "$BATS_TEST_TMPDIR/sub.out")"
}

# hashes TYPE: "<model> <hash>" per hash in TYPE events received, sorted.
hashes() {
	$PY - "$1" "$BATS_TEST_TMPDIR/sub.out" <<'PY'
import json, sys
for line in open(sys.argv[2]):
    r = json.loads(line)
    if r["type"] == sys.argv[1]:
        for h in r["hashes"]:
            print(r["model"], h)
PY
}

# low64 MODEL < hex hashes: "<model> <low 64 bits>" per line, sorted.
low64() {
	$PY -c '
import sys
for h in sys.stdin.read().split():
    print(sys.argv[1], int(h[-16:], 16))' "$1" | sort
}

# mkblocks N [notouch]: N blocks of $MODEL by kvput, hashes of 16, 32 and 64 digits,
# their atimes spread so that LRU has an order.
mkblocks() {
	local i h now
	now=$(date +%s)
	head -c 4096 /dev/urandom > "$BATS_TEST_TMPDIR/blk"
	for ((i = 1; i <= $1; i++)); do
		case $((i % 3)) in
		0) h=$(printf '%016x' $((i * 2654435761 + (1 << 62)))) ;;
		1) h=$(printf 'ab%030x' "$i") ;;
		2) h=$(printf 'c%063x' "$i") ;;
		esac
		echo "{\"hash\":\"$h\",\"file\":\"$BATS_TEST_TMPDIR/blk\"}"
	done > "$BATS_TEST_TMPDIR/manifest"
	kvput --config "$CFG" --batch "$BATS_TEST_TMPDIR/manifest" > /dev/null
	[ "${2:-}" != notouch ] || return 0
	i=0
	while read -r p; do
		i=$((i + 1))
		touch -a -d "@$((now - 100000 + i * 60))" "$KV_ROOT/$p"
	done < <(kvls --blocks --ndjson | $PY -c '
import json, sys
for l in sys.stdin: print(json.loads(l)["path"])')
}

@test "kvevict --events: each deleted block in exactly one BlockRemoved, none kept, on the real model name's topic" {
	mkblocks 60
	port=$(free_port)
	start_sub --bind "tcp://127.0.0.1:$port"
	run kvevict --max-bytes 120K --low-bytes 100K --hot 0 --ndjson \
		--events "tcp://127.0.0.1:$port"
	assert_success
	stop_sub
	deleted=$(echo "$output" | $PY -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if r.get("event") == "BlockRemoved": print(r["hash"])' | low64 "$MODEL")
	[ -n "$deleted" ]
	[ "$(echo "$deleted" | wc -l)" -lt 60 ]
	diff <(echo "$deleted") <(hashes BlockRemoved | sort)
	kept=$(kvls --blocks --ndjson | $PY -c '
import json, sys
for l in sys.stdin: print(json.loads(l)["hash"])' | low64 "$MODEL")
	[ -n "$kept" ]
	[ -z "$(comm -12 <(echo "$kept") <(hashes BlockRemoved | sort))" ]
	# the topic and medium the storage tier uses
	run $PY -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    assert r["topic"] == "kv@SHARED_STORAGE@meta-llama/Llama-3.1-8B", r["topic"]
    assert r["medium"] == "SHARED_STORAGE", r
print("ok")' "$BATS_TEST_TMPDIR/sub.out"
	assert_output ok
}

@test "kvevict --shard --events: each shard announces what it deleted; together each deleted block once" {
	mkblocks 60
	port=$(free_port)
	start_sub --bind "tcp://127.0.0.1:$port"
	for i in 0 1; do
		kvevict --shard "$i/2" --max-bytes 120K --low-bytes 100K --hot 0 --ndjson \
			--events "tcp://127.0.0.1:$port" > "$BATS_TEST_TMPDIR/out.$i" &
		pids[i]=$!
	done
	wait "${pids[0]}"
	wait "${pids[1]}"
	stop_sub
	deleted=$(cat "$BATS_TEST_TMPDIR"/out.* | $PY -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if r.get("event") == "BlockRemoved": print(r["hash"])' | low64 "$MODEL")
	[ -n "$deleted" ] && [ -s "$BATS_TEST_TMPDIR/out.0" ] && [ -s "$BATS_TEST_TMPDIR/out.1" ]
	[ "$(echo "$deleted" | wc -l)" -lt 60 ]
	diff <(echo "$deleted") <(hashes BlockRemoved | sort)
}

@test "kvls --announce: a big volume goes in several messages, their sequence numbers strictly increasing" {
	mkblocks 2100 notouch
	port=$(free_port)
	start_sub --bind "tcp://127.0.0.1:$port"
	KV_EVENTS="tcp://127.0.0.1:$port" run kvls --announce
	assert_success
	stop_sub
	run $PY -c '
import json, sys
last, msgs = {}, {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    t, s, m = r["topic"], r["seq"], r["msg"]
    if msgs.get(t) != m:
        assert s > last.get(t, -1), (t, s, last.get(t))
    last[t], msgs[t] = s, m
print(len(last), last[t] + 1)' "$BATS_TEST_TMPDIR/sub.out"
	assert_output "1 3"
	[ "$(hashes BlockStored | sort -u | wc -l)" -eq 2100 ]
}

@test "kvevict --events ipc://: binding for a subscriber that connects, and connect: to one that binds" {
	mkblocks 12
	start_sub --connect "ipc://$BATS_TEST_TMPDIR/ev.sock"
	run kvevict --max-bytes 1 --low-bytes 0 --hot 0 --events "ipc://$BATS_TEST_TMPDIR/ev.sock"
	assert_success
	stop_sub
	[ "$(hashes BlockRemoved | wc -l)" -eq 12 ]

	mkblocks 9
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	run kvevict --max-bytes 1 --low-bytes 0 --hot 0 \
		--events "connect:ipc://$BATS_TEST_TMPDIR/sub.sock"
	assert_success
	stop_sub
	[ "$(hashes BlockRemoved | wc -l)" -eq 9 ]
}

@test "kvevict --events: a dry run announces nothing" {
	mkblocks 6
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	run kvevict -n --max-bytes 1 --low-bytes 0 --hot 0 \
		--events "connect:ipc://$BATS_TEST_TMPDIR/sub.sock"
	assert_success
	stop_sub
	[ ! -s "$BATS_TEST_TMPDIR/sub.out" ]
	[ "$(kvls --blocks --ndjson | wc -l)" -eq 6 ]
}

@test "kvevict --events: an absent subscriber costs the job nothing and is said" {
	mkblocks 10
	port=$(free_port)
	run kvevict --max-bytes 1 --low-bytes 0 --hot 0 --events "tcp://127.0.0.1:$port"
	assert_success
	assert_output --partial "10 block events in 1 message not delivered"
	run kvls --blocks
	assert_failure 1
}

@test "malformed endpoints are usage errors in every program (exit 2)" {
	for bad in foo tcp://127.0.0.1 tcp://127.0.0.1:0 tcp://127.0.0.1:70000 \
		tcp://:5557 'tcp://bad host:5557' ipc:// connect:tcp://*:5557 \
		bind:udp://x:1 "ipc://$(printf 'x%.0s' {1..120})"; do
		run kvevict --max-bytes 1 --events "$bad"
		assert_failure 2
		run kvput --config "$CFG" --events "$bad" 0123456789abcdef /dev/null
		assert_failure 2
		run kvls --announce --events "$bad"
		assert_failure 2
		KV_EVENTS=$bad run kvevict --max-bytes 1
		assert_failure 2
		assert_output --partial '$KV_EVENTS'
	done
	run kvoffd --socket "$BATS_TEST_TMPDIR/s" --cpu-bytes 8M --events tcp://x:0
	assert_failure 2
	run kvls --events tcp://127.0.0.1:5557
	assert_failure 2
	run kvput --daemon "$BATS_TEST_TMPDIR/s" --config "$CFG" --events tcp://127.0.0.1:1 0123456789abcdef /dev/null
	assert_failure 2
}

@test "kvput --events: BlockStored after each block stored, none for a block kept" {
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	head -c 8192 /dev/urandom > "$BATS_TEST_TMPDIR/b"
	ep="connect:ipc://$BATS_TEST_TMPDIR/sub.sock"
	run kvput --config "$CFG" --events "$ep" 00112233445566778899aabbccddeeff "$BATS_TEST_TMPDIR/b"
	assert_success
	run kvput --config "$CFG" --events "$ep" 00112233445566778899aabbccddeeff "$BATS_TEST_TMPDIR/b"
	assert_success
	printf '{"hash":"%s","file":"%s"}\n' 1111111111111111 "$BATS_TEST_TMPDIR/b" \
		00112233445566778899aabbccddeeff "$BATS_TEST_TMPDIR/b" \
		2222222222222222222222222222222222222222222222222222222222222222 "$BATS_TEST_TMPDIR/b" |
		kvput --config "$CFG" --events "$ep" --batch > /dev/null
	stop_sub
	diff <(hashes BlockStored | sort) <(printf '%s\n' 00112233445566778899aabbccddeeff \
		1111111111111111 2222222222222222222222222222222222222222222222222222222222222222 |
		low64 "$MODEL")
	run $PY -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    assert r["block_size"] == 16 and r["medium"] == "SHARED_STORAGE", r
print("ok")' "$BATS_TEST_TMPDIR/sub.out"
	assert_output ok
}

# Issue 30, hole 14: libzmq 4.3 took such a peer for ZMTP 1.0 and
# aborted the publisher (zmtp_engine.cpp:463), 3 times in 3.
@test "--events: a peer that answers HTTP 400 and closes neither aborts kvput nor kvoffd" {
	$PY "$BATS_TEST_DIRNAME/../fixtures/http400.py" "$BATS_TEST_TMPDIR/port" &
	SPID=$!
	local i
	for i in $(seq 1 100); do [ -s "$BATS_TEST_TMPDIR/port" ] && break; sleep 0.1; done
	ep="tcp://127.0.0.1:$(cat "$BATS_TEST_TMPDIR/port")"
	head -c 8192 /dev/urandom > "$BATS_TEST_TMPDIR/b"
	for i in 1 2 3 4 5; do
		run kvput --config "$CFG" --events "$ep" "0011223344556677889900000000000$i" \
			"$BATS_TEST_TMPDIR/b"
		assert_success
	done
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	md=$(kvls -J | $PY -c 'import json, sys; print(json.load(sys.stdin)["models"][0]["model_dir"])')
	start_daemon --cpu-bytes 16M --slot-bytes 64K --events "$ep"
	kvput --daemon "$SOCK" --model-dir "$md" 1111111111111111 "$BATS_TEST_TMPDIR/b"
	sleep 1
	stop_daemon
	[ "$DRC" -eq 0 ]
	# Written behind at the drain, the program alive to do it.
	find "$KV_ROOT" -name 1111111111111111.bin | grep -q .
}

@test "kvls --announce: every block of every upstream writer's layout, under its model's real name" {
	python3 "$BATS_TEST_DIRNAME/../fixtures/upstream.py" "$KV_ROOT" "$BATS_TEST_TMPDIR/manifest"
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	run kvls --announce --events "connect:ipc://$BATS_TEST_TMPDIR/sub.sock"
	assert_success
	assert_output --regexp '^kvls: announced [0-9]+ blocks in [0-9]+ messages?$'
	stop_sub
	expected=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], int(r["hash"][-16:], 16))' "$BATS_TEST_TMPDIR/manifest" | sort)
	[ "$(echo "$expected" | wc -l)" -gt 10 ]
	diff <(echo "$expected") <(hashes BlockStored | sort)
}

@test "kvls --announce: filters apply; no subscriber is exit 3" {
	mkblocks 9
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	KV_EVENTS="connect:ipc://$BATS_TEST_TMPDIR/sub.sock" run kvls --announce --ndjson --newer-than 99700s
	assert_success
	stop_sub
	[ "$(echo "$output" | wc -l)" -eq "$(hashes BlockStored | wc -l)" ]
	[ "$(hashes BlockStored | wc -l)" -lt 9 ]
	run kvls --announce --events "tcp://127.0.0.1:$(free_port)"
	assert_failure 3
	assert_output --partial "were not delivered"
}

@test "kvoffd --events ENDPOINT: CPU events on the node's topic, SHARED_STORAGE on write-behind, AllBlocksCleared at exit" {
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	kvput --config "$CFG" --batch < /dev/null
	md=$(kvls -J | $PY -c 'import json, sys; print(json.load(sys.stdin)["models"][0]["model_dir"])')
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	KV_EVENTS_POD=node-7 start_daemon --cpu-bytes 16M --slot-bytes 64K \
		--events "connect:ipc://$BATS_TEST_TMPDIR/sub.sock" \
		--events "$BATS_TEST_TMPDIR/events.ndjson"
	head -c 4096 /dev/urandom > "$BATS_TEST_TMPDIR/b"
	for h in 0123456789abcdef0123456789abcdef 1111111111111111; do
		kvput --daemon "$SOCK" --model-dir "$md" "$h" "$BATS_TEST_TMPDIR/b"
	done
	stop_daemon
	[ "$DRC" -eq 0 ]
	stop_sub
	run $PY -c '
import json, sys
seen = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    seen.setdefault((r["topic"], r["type"], r.get("medium")), []).extend(r.get("hashes", []))
for k, v in sorted(seen.items()): print(k + (sorted(v),))' "$BATS_TEST_TMPDIR/sub.out"
	h1=$((0x0123456789abcdef)); h2=$((0x1111111111111111))
	assert_line "('kv@node-7@$MODEL', 'BlockStored', 'CPU', [$h1, $h2])"
	assert_line "('kv@SHARED_STORAGE@$MODEL', 'BlockStored', 'SHARED_STORAGE', [$h1, $h2])"
	assert_line "('kv@node-7@$MODEL', 'AllBlocksCleared', None, [])"
	assert_equal "${#lines[@]}" 3
	# the NDJSON file still gets its events
	[ "$(grep -c BlockStored "$BATS_TEST_TMPDIR/events.ndjson")" -eq 4 ]
}

@test "kvput --archive --events: every block restored is announced, none that was there" {
	mkblocks 5 notouch
	kvls --blocks --ndjson | kvget --batch --archive "$BATS_TEST_TMPDIR/a.kva" > /dev/null
	mkdir "$BATS_TEST_TMPDIR/other"
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	KV_ROOT=$BATS_TEST_TMPDIR/other run kvput --archive "$BATS_TEST_TMPDIR/a.kva" \
		--events "connect:ipc://$BATS_TEST_TMPDIR/sub.sock"
	assert_success
	stop_sub
	diff <(hashes BlockStored | sort) <(kvls --blocks --ndjson | $PY -c '
import json, sys
for l in sys.stdin: print(json.loads(l)["hash"])' | low64 "$MODEL")
	# again: every block is there, kept, and nothing is announced
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	KV_ROOT=$BATS_TEST_TMPDIR/other run kvput --archive "$BATS_TEST_TMPDIR/a.kva" \
		--events "connect:ipc://$BATS_TEST_TMPDIR/sub.sock"
	assert_success
	[ "$(grep -c '"existed":true' <<<"$output")" -eq 5 ]
	stop_sub
	[ ! -s "$BATS_TEST_TMPDIR/sub.out" ]
}

@test "hostile model dirs: a name a topic cannot carry, a config.json symlink: not announced, counted, the rest are" {
	mkblocks 3 notouch
	for d in evil_at_0123456789ab link_0123456789ab; do
		mkdir -p "$KV_ROOT/${d}_r0/abc/de_g0"
		head -c 4096 /dev/urandom > "$KV_ROOT/${d}_r0/abc/de_g0/abcde00000000001.bin"
	done
	mkdir "$KV_ROOT/evil_at_0123456789ab" "$KV_ROOT/link_0123456789ab"
	make_config 'org@evil' > "$KV_ROOT/evil_at_0123456789ab/config.json"
	ln -s "$CFG" "$KV_ROOT/link_0123456789ab/config.json"
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	run kvls --announce --events "connect:ipc://$BATS_TEST_TMPDIR/sub.sock"
	assert_failure 3
	assert_output --partial "2 blocks in model dirs whose config.json names no model a topic can carry"
	stop_sub
	[ "$(hashes BlockStored | wc -l)" -eq 3 ]
	run hashes BlockStored
	refute_output --partial evil
}

@test "kvoffd --tier: LOCAL_DISK on the node's topic for the local tier, SHARED_STORAGE for blocks it moves down" {
	SOCK=$BATS_TEST_TMPDIR/offd.sock
	LOCAL=$BATS_TEST_TMPDIR/local
	mkdir -p "$LOCAL"
	kvput --config "$CFG" --batch < /dev/null
	md=$(kvls -J | $PY -c 'import json, sys; print(json.load(sys.stdin)["models"][0]["model_dir"])')
	start_sub --bind "ipc://$BATS_TEST_TMPDIR/sub.sock"
	KV_EVENTS_POD=node-7 start_kvoffd --tier "local:$LOCAL:8K" --tier "shared:$KV_ROOT" \
		--cpu-bytes 512K --slot-bytes 64K --write-threads 1 \
		--events "connect:ipc://$BATS_TEST_TMPDIR/sub.sock"
	head -c 4096 /dev/urandom > "$BATS_TEST_TMPDIR/b"
	for h in 1111111111111111 2222222222222222 3333333333333333 4444444444444444; do
		kvput --daemon "$SOCK" --model-dir "$md" "$h" "$BATS_TEST_TMPDIR/b"
	done
	stop_daemon
	[ "$DRC" -eq 0 ]
	stop_sub
	run $PY -c '
import json, sys
seen = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    seen.setdefault((r["topic"], r["type"], r.get("medium")), set()).update(r.get("hashes", []))
for k, v in sorted(seen.items()): print(k + (len(v),))
moved = seen[("kv@node-7@" + sys.argv[2], "BlockRemoved", "LOCAL_DISK")]
assert moved == seen[("kv@SHARED_STORAGE@" + sys.argv[2], "BlockStored", "SHARED_STORAGE")]
' "$BATS_TEST_TMPDIR/sub.out" "$MODEL"
	assert_success
	assert_line "('kv@node-7@$MODEL', 'BlockStored', 'CPU', 4)"
	assert_line "('kv@node-7@$MODEL', 'BlockStored', 'LOCAL_DISK', 4)"
	assert_line "('kv@node-7@$MODEL', 'BlockRemoved', 'LOCAL_DISK', 2)"
	assert_line "('kv@SHARED_STORAGE@$MODEL', 'BlockStored', 'SHARED_STORAGE', 2)"
}
