#!/usr/bin/env bats
# The README's examples, run as written in a scratch root: only the
# placeholders it names (HASH, D, M, and the paths of a real deployment:
# /var/cache/kv, /run/kvoffd, /mnt/shared, /tmp/kvdemo) are filled in, and
# kvoffd's 64G pool is 64M here.

load test_helper

top=$BATS_TEST_DIRNAME/../..

# The indented command lines of README section $1, comments dropped.
examples() {
	awk -v sec="## $1" '
		/^## / { on = ($0 == sec) }
		on && /^    [a-zA-Z]/ { sub(/^    /, ""); print }' "$top/README.md" |
		sed -E 's/[[:space:]]+#[^"'"'"']*$//'
}

setup() {
	common_setup
	requires python3 jq
	W=$BATS_TEST_TMPDIR/w
	mkdir -p "$W/Llama-3.1-8B"
	cd "$W"
	# The README's own sample config.json, and the HF config kvbench reads.
	awk '/^A model.s `config.json`/ { on = 1; next }
	     on && /^    [{ ]/ { sub(/^    /, ""); print; next }
	     on && /^    kvput/ { exit }' "$top/README.md" > config.json
	jq -e .model_name config.json >/dev/null || fail "no sample config.json in README"
	cp "$top/tests/fixtures/hf/llama-3.1-8b.json" Llama-3.1-8B/config.json
	HASH=3fa9c04e51d2b7a8
	head -c 2M /dev/urandom > block.bin
	for i in 1 2 3; do
		head -c 1M /dev/urandom > "p$i"
		printf '{"hash":"abcde0000%d","file":"%s/p%d"}\n' "$i" "$W" "$i"
	done > manifest.ndjson
	SOCK=$W/kvoffd.sock
}

teardown() {
	[ -z "${SPID:-}" ] || kill -KILL "$SPID" 2>/dev/null || true
	kill_daemon
	common_teardown
}

# run_example LINE: the line with its placeholders filled, in bash.
run_example() {
	local line=$1 D M
	D=$(kvls -J | jq -r '.models[0].model_dir // empty')
	M=$(kvls -J | jq -r '.models[0].model // empty')
	line=${line//HASH/$HASH}
	line=$(sed -E -e "s#(^| )D( |\$)#\\1$D\\2#g" -e "s#(^| )M( |\$)#\\1$M\\2#g" \
		-e "s#/var/cache/kv#$KV_ROOT#g" -e "s#/run/kvoffd/kvoffd.sock#$SOCK#g" \
		-e "s#/mnt/shared/kvbench#$W/bench#g" -e "s#/tmp/kvdemo#$W/kvdemo#g" \
		-e "s#/mnt/new-root#$W/new-root#g" <<<"$line")
	run bash -c "$line"
}

@test "README: the kvput, kvget, kvls and composition examples run as written" {
	local line
	for sec in kvput kvget kvls Composition; do
		while IFS= read -r line; do
			run_example "$line"
			# kvls answers 1 when a filter leaves nothing to list.
			if [[ $line == *--older-than* ]]; then
				[ "$status" -le 1 ] || fail "$sec: '$line' exited $status: $output"
			else
				[ "$status" -eq 0 ] || fail "$sec: '$line' exited $status: $output"
			fi
		done < <(examples "$sec")
	done
	cmp block.bin <(kvget --model-dir "$(kvls -J | jq -r '.models[0].model_dir')" "$HASH")
	[ "$(stat -c %s tail.bin)" -eq $((4 * 131072)) ]
}

@test "README: the kvevict examples run as written (but --watch, which stays up)" {
	local line
	kvput --config config.json --batch < manifest.ndjson > /dev/null
	while IFS= read -r line; do
		[[ $line == *--watch* ]] && continue
		run_example "$line"
		[ "$status" -eq 0 ] || fail "'$line' exited $status: $output"
	done < <(examples kvevict)
}

@test "README: the kvwatch examples run as written, and record a read" {
	requires mount
	local line n=0 sid p i blk
	# noatime, as model servers' volumes often are: only kvwatch stamps
	mount -t tmpfs -o noatime,size=64m tmpfs "$KV_ROOT"
	MNT=$KV_ROOT
	kvput --config config.json --batch < manifest.ndjson > /dev/null
	blk=$(kvls --blocks --ndjson | jq -r .path | head -1)
	while IFS= read -r line; do
		n=$((n + 1))
		touch -a -d '2 hours ago' "$KV_ROOT/$blk"
		line=${line%&}
		line=${line//\/tmp\/kvwatch.prom/$W/kvwatch.prom}
		line=${line//\/var\/cache\/kv/$KV_ROOT}
		setsid bash -c "$line" > "$W/out.$n" 2>&1 &
		sid=$!
		# watching once its fanotify fd holds a mark (its fdinfo lists it)
		for ((i = 0; i < 200; i++)); do
			p=$(pgrep -s "$sid" -x kvwatch) &&
				grep -qs '^fanotify.*mask:' /proc/"$p"/fdinfo/* && break
			sleep 0.1
		done
		cat "$KV_ROOT/$blk" > /dev/null
		pkill -TERM -s "$sid" -x kvwatch
		wait "$sid" || fail "'$line' failed: $(cat "$W/out.$n")"
		[ $(($(date +%s) - $(stat -c %X "$KV_ROOT/$blk"))) -lt 600 ] || fail "'$line' stamped nothing"
	done < <(examples kvwatch)
	[ "$n" -eq 2 ]
	grep -qx 'kvwatch_stamped_total 1' "$W/kvwatch.prom"
	[ "$(cat "$W/out.2")" = "$blk" ] || fail "out.2: $(cat "$W/out.2")"
}

@test "README: the kvbench examples run as written (but dma, which needs a GPU)" {
	local line mpi=1 asan=${ASAN_OPTIONS:-}
	# No mkdir of /mnt/shared/kvbench: kvbench makes its scratch dir.
	# mpirun needs OpenMPI and a kvbench built with it; OpenMPI's runtime
	# leaves allocations at exit, so its ranks check no leaks.
	command -v mpirun >/dev/null && ldd "$KV_BIN/kvbench" | grep -q libmpi || mpi=0
	[ -z "${KV_SANITIZED:-}" ] || asan=${asan:+$asan:}detect_leaks=0
	while IFS= read -r line; do
		[[ $line == "kvbench dma"* ]] && continue
		if [[ $line == mpirun* ]]; then
			[ "$mpi" = 1 ] || continue
			ASAN_OPTIONS=$asan run_example "$line"
			[ "$status" -eq 0 ] || fail "'$line' exited $status: $output"
			continue
		fi
		run_example "$line"
		[ "$status" -eq 0 ] || fail "'$line' exited $status: $output"
	done < <(examples kvbench)
}

@test "README: the archive examples run as written, and the blocks arrive" {
	local line
	kvput --config config.json --batch < manifest.ndjson > /dev/null
	mkdir -p "$W/new-root"
	while IFS= read -r line; do
		run_example "$line"
		[ "$status" -eq 0 ] || fail "'$line' exited $status: $output"
	done < <(examples Archives)
	diff -r "$KV_ROOT" "$W/new-root"
	[ -s hot.kva ]
}

# run_daemon_examples SECTION: its first line starts the daemon in the
# background, until its socket is up; the others run in turn.
run_daemon_examples() {
	local line first=1
	while IFS= read -r line; do
		if ((first)); then
			first=0
			line=$(sed -E -e "s#/var/cache/kv#$KV_ROOT#g" -e "s#/nvme/kv#$W/nvme#g" \
				-e "s#/run/kvoffd/kvoffd.sock#$SOCK#g" -e 's#64G#64M#' <<<"$line")
			bash -c "$line" 2>>"$BATS_TEST_TMPDIR/kvoffd.log" &
			DPID=$!
			until [ -S "$SOCK" ]; do
				kill -0 "$DPID" || fail "kvoffd: $(cat "$BATS_TEST_TMPDIR/kvoffd.log")"
				sleep 0.1
			done
			continue
		fi
		run_example "${line//\/nvme\/kv/$W/nvme}"
		[ "$status" -eq 0 ] || fail "'$line' exited $status: $output"
	done < <(examples "$1")
}

@test "README: the kvoffd examples run as written" {
	requires kvoffd
	kvput --config config.json "$HASH" block.bin
	run_daemon_examples kvoffd
	[ "$(ls blocks | wc -l)" -ge 1 ]
}

@test "README: the file tier examples run as written" {
	requires kvoffd
	mkdir -p "$W/nvme"
	kvput --config config.json "$HASH" block.bin
	run_daemon_examples "Tiers below RAM"
	[ -f "$W/nvme/.kvoffd.lock" ]
	run kvoffd --stats "$SOCK"
	assert_success
	[ "$(jq '.tiers | length' <<<"$output")" -eq 2 ]
}

@test "README: the Python section names what its example imports beyond kvtools" {
	local mod section
	section=$(awk '/^## / { on = ($0 == "## Python") } on && !/^    /' "$top/README.md")
	for mod in $(awk '/^## / { on = ($0 == "## Python") }
			on && /^    import / { print $2 }' "$top/README.md"); do
		[ "$mod" = kvtools ] && continue
		grep -q "needs $mod" <<<"$section" || fail "the example imports $mod; the section does not say it needs it"
	done
}

@test "README: the Python connector example runs as written" {
	requires kvoffd
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	/usr/bin/python3 -c 'import numpy' 2>/dev/null || skip "needs python3-numpy"
	# The indented block of the section, dedented, on a daemon of ours.
	awk '/^## / { on = ($0 == "## Python") }
	     on && (/^    / || /^$/) { sub(/^    /, ""); print }' "$top/README.md" |
		sed "s#/run/kvoffd/kvoffd.sock#$SOCK#" > example.py
	grep -q kvtools.connect example.py || fail "no example in README's Python section"
	start_daemon --cpu-bytes 64M
	run env PYTHONPATH="$top/python" KVTOOLS_LIBKV="$top/${BUILD:-build}/libkv.so" \
		/usr/bin/python3 example.py
	[ "$status" -eq 0 ] || fail "example.py: $output"
	run kvoffd --stats "$SOCK"
	[ "$(jq .puts <<<"$output")" -eq 4 ] || fail "$output"
	# Written behind at exit into a whole model dir.
	stop_daemon
	run kvls --root "$KV_ROOT" --check
	assert_success
	[ -n "$(find "$KV_ROOT" -name config.json)" ]
}

@test "README: the KV events examples run as written, against a subscriber at the indexer's place" {
	/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null ||
		skip "needs python3-zmq and python3-msgpack for /usr/bin/python3"
	local line n=0
	kvput --config config.json --batch < manifest.ndjson > /dev/null
	kvput --config config.json "$HASH" block.bin
	/usr/bin/python3 "$top/tests/fixtures/kvsub.py" --bind "ipc://$W/indexer.sock" \
		--ready "$W/sub.ready" > "$W/sub.out" &
	SPID=$!
	wait_ready "$W/sub.ready" "$SPID" /dev/null
	while IFS= read -r line; do
		n=$((n + 1))
		line=${line//tcp:\/\/kv-indexer:5557/connect:ipc:\/\/$W\/indexer.sock}
		run_example "$line"
		[ "$status" -eq 0 ] || fail "'$line' exited $status: $output"
	done < <(examples "KV events")
	kill -TERM "$SPID"
	wait "$SPID"
	[ "$n" -eq 3 ]
	grep -q '"type": "BlockStored"' "$W/sub.out"
	grep -q '"type": "BlockRemoved"' "$W/sub.out" || [ "$(kvls --blocks --ndjson | wc -l)" -eq 4 ]
}

@test "README: scripts/demo.sh runs as the set-up says" {
	run "$top/scripts/demo.sh" "$W/kvdemo"
	assert_success
	assert_output --partial "came back byte-identical"
}

@test "README: the With vLLM lines are vLLM's config, and the stand-in of vLLM runs each tier entry" {
	requires kvoffd
	[ -z "${KV_SANITIZED:-}" ] || skip "sanitized libkv.so needs the ASan runtime loaded first"
	/usr/bin/python3 -c 'import numpy' 2>/dev/null || skip "needs python3-numpy"
	awk '/^## / { on = ($0 == "## With vLLM") } on && /^    vllm serve/' "$top/README.md" > lines
	[ "$(wc -l < lines)" -eq 3 ] || fail "expected three vllm serve lines"
	start_daemon --cpu-bytes 64M
	mkdir vol
	# Each entry through the stand-in of vLLM's factory and manager
	# (tests/python/vllm_standin): the volume and the socket are this
	# test's, a bucket's keys are checked on the volume.
	run /usr/bin/python3 - "$top/tests/python" "$PWD/vol" "$SOCK" < <(cat <<'PY'
import json, shlex, sys
sys.path.insert(0, sys.argv[1])
from vllm_harness import Server, keys_of, blocks_of
for line in open("lines"):
    argv = shlex.split(line)
    cfg = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    extra = cfg["kv_connector_extra_config"]
    assert cfg["kv_connector"] == "OffloadingConnector" and extra["spec_name"] == "TieringOffloadingSpec"
    for entry in extra["secondary_tiers"]:
        entry = {k: v for k, v in entry.items() if k not in ("type", "module_path")}
        if "daemon" in entry:
            entry["daemon"] = sys.argv[3]
        else:
            entry["root_dir"] = sys.argv[2]
        keys = keys_of(4, seed=len(line))
        with Server("main", entry) as s:
            s.store(keys, blocks_of(keys))
            s.forget(keys)
            assert s.load(keys) == blocks_of(keys), entry
        print("ok", sorted(entry))
PY
)
	assert_success
	[ "${#lines[@]}" -eq 3 ]
}
