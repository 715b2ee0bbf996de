#!/usr/bin/env bats
# kvbench: options, model geometry against hand-computed sizes, bad model
# configs, tiny real runs of every phase checked through the JSON, the
# verdict arithmetic, and the SVG plot.

load test_helper

HF=$BATS_TEST_DIRNAME/../fixtures/hf

# A tiny run: 4 files of 256 KiB, small enough for a shared machine.
tiny() {
	kvbench run --dir "$D" --block-size 256K --size 1M --threads 2 --qd 2 \
		--lookups 100 "$@"
}

setup() {
	common_setup
	D=$BATS_TEST_TMPDIR/scratch
	mkdir -p "$D"
}

@test "help lists the subcommands; bad usage exits 2 with a hint" {
	run kvbench --help
	assert_success
	assert_output --partial "kvbench geometry"
	assert_output --partial "kvbench verdict"
	run --separate-stderr kvbench frobnicate
	assert_equal "$status" 2
	[[ "$stderr" == *"unknown command 'frobnicate'"* ]]
	[[ "$stderr" == *"Try 'kvbench --help'"* ]]
	run --separate-stderr kvbench run
	assert_equal "$status" 2
	[[ "$stderr" == *"needs --dir"* ]]
	run --separate-stderr kvbench run --dir "$D" --threads many
	assert_equal "$status" 2
	[[ "$stderr" == *"invalid --threads value 'many'"* ]]
	run --separate-stderr kvbench run --dir "$D" --engine aio
	assert_equal "$status" 2
	run --separate-stderr kvbench run --dir "$D" --phases write,scan
	assert_equal "$status" 2
	[[ "$stderr" == *"scan"* ]]
	run --separate-stderr kvbench run --dir "$D" --fsync sometimes
	assert_equal "$status" 2
	run --separate-stderr kvbench run --dir "$D" --size 1x
	assert_equal "$status" 2
	run --separate-stderr kvbench run --dir "$D" --mix 101
	assert_equal "$status" 2
	run --separate-stderr kvbench run --dir "$D" --qd 0
	assert_equal "$status" 2
	run --separate-stderr kvbench run --dir "$D" --block-size 4K --size 1T
	assert_equal "$status" 2
	[[ "$stderr" == *"files of 4096 bytes"* ]]
	run --separate-stderr kvbench run --dir "$D" -J --ndjson
	assert_equal "$status" 2
	run --separate-stderr kvbench run --dir "$D" --engine psync --sqpoll
	assert_equal "$status" 2
	run --separate-stderr kvbench run --dir "$D" stray
	assert_equal "$status" 2
	run --separate-stderr kvbench verdict --qd 4
	assert_equal "$status" 2
	[[ "$stderr" == *"--qd does not apply to 'verdict'"* ]]
	run --separate-stderr kvbench geometry --dir "$D"
	assert_equal "$status" 2
	run --separate-stderr kvbench geometry
	assert_equal "$status" 2
	# Nothing ran, so nothing was written.
	[ -z "$(ls -A "$D")" ]
}

@test "geometry: Llama-3.1-8B is 128 KiB per token in bf16 at tp 1" {
	run kvbench geometry --hf-config "$HF/llama-3.1-8b.json"
	assert_success
	assert_output --partial "= 2 * 32 * 8 * 128 * 2 = 131072"
	assert_output --partial "per token:     131072 bytes (128K)"
	run kvbench geometry --hf-config "$HF/llama-3.1-8b.json" -J
	assert_success
	assert_equal "$(jq .bytes_per_token <<<"$output")" 131072
	assert_equal "$(jq .gpu_block_bytes <<<"$output")" $((131072 * 16))
	assert_equal "$(jq .file_bytes <<<"$output")" $((131072 * 256))
	assert_equal "$(jq .head_dim <<<"$output")" 128
	assert_equal "$(jq .version <<<"$output")" 1
	# TP splits the 8 KV heads; beyond 8 ranks each holds one copy.
	run kvbench geometry --hf-config "$HF/llama-3.1-8b.json" --tp 2 -J
	assert_equal "$(jq .bytes_per_token <<<"$output")" 65536
	run kvbench geometry --hf-config "$HF/llama-3.1-8b.json" --tp 16 -J
	assert_equal "$(jq .bytes_per_token <<<"$output")" 16384
	run --separate-stderr kvbench geometry --hf-config "$HF/llama-3.1-8b.json" --tp 3
	assert_equal "$status" 2
	[[ "$stderr" == *"tp 3 does not divide the 8 KV heads"* ]]
	# fp8 KV cache halves it; other file and GPU block sizes.
	run kvbench geometry --hf-config "$HF/llama-3.1-8b.json" --dtype fp8 \
		--tokens-per-file 64 --gpu-block-tokens 32 -J
	assert_equal "$(jq .bytes_per_token <<<"$output")" 65536
	assert_equal "$(jq .file_bytes <<<"$output")" $((65536 * 64))
	assert_equal "$(jq .gpu_block_bytes <<<"$output")" $((65536 * 32))
	run --separate-stderr kvbench geometry --hf-config "$HF/llama-3.1-8b.json" --tokens-per-file 40
	assert_equal "$status" 2
	for o in --tp --tokens-per-file --gpu-block-tokens; do
		run --separate-stderr kvbench geometry --hf-config "$HF/llama-3.1-8b.json" $o 0
		assert_equal "$status" 2
	done
}

@test "geometry: DeepSeek-V3 MLA is one 576-wide latent per layer on every rank" {
	# 61 layers * (512 + 64) * 2 bytes = 70272, whatever the tp.
	for tp in 1 8; do
		run kvbench geometry --hf-config "$HF/deepseek-v3.json" --tp $tp -J
		assert_success
		assert_equal "$(jq .bytes_per_token <<<"$output")" 70272
		assert_equal "$(jq .mla <<<"$output")" true
		assert_equal "$(jq .file_bytes <<<"$output")" 17989632
	done
	run kvbench geometry --hf-config "$HF/deepseek-v3.json"
	assert_output --partial "= 61 * (512 + 64) * 2 = 70272"
}

@test "geometry: Qwen2.5-7B, Gemma 3 27B and Mistral 7B by hand" {
	# Qwen2.5-7B: head_dim 3584/28 = 128; 2 * 28 * 4 * 128 * 2; window off.
	run kvbench geometry --hf-config "$HF/qwen2.5-7b.json" -J
	assert_equal "$(jq .bytes_per_token <<<"$output")" 57344
	assert_equal "$(jq .sliding_layers <<<"$output")" 0
	# Gemma 3 27B (text_config): 2 * 62 * 16 * 128 * 2; every 6th of 62
	# layers is global, so 52 slide over 1024 tokens.
	run kvbench geometry --hf-config "$HF/gemma-3-27b.json" -J
	assert_equal "$(jq .bytes_per_token <<<"$output")" 507904
	assert_equal "$(jq .sliding_layers <<<"$output")" 52
	assert_equal "$(jq .sliding_window_tokens <<<"$output")" 1024
	run kvbench geometry --hf-config "$HF/gemma-3-27b.json"
	assert_output --partial "sliding window: 1024 tokens on 52 of 62 layers"
	# Mistral 7B, float16 under "dtype": 2 * 32 * 8 * 128 * 2, all sliding.
	run kvbench geometry --hf-config "$HF/mistral-7b.json" -J
	assert_equal "$(jq .bytes_per_token <<<"$output")" 131072
	assert_equal "$(jq -r .dtype <<<"$output")" float16
	assert_equal "$(jq .sliding_layers <<<"$output")" 32
}

@test "bad model configs: exit 3 naming the problem; missing dtype is exit 2" {
	run --separate-stderr kvbench geometry --hf-config "$HF/bad-malformed.json"
	assert_equal "$status" 3
	[[ "$stderr" == *"bad-malformed.json' is not a usable model config: line "* ]]
	run --separate-stderr kvbench geometry --hf-config "$HF/bad-missing-layers.json"
	assert_equal "$status" 3
	[[ "$stderr" == *"missing field 'num_hidden_layers'"* ]]
	run --separate-stderr kvbench geometry --hf-config "$HF/bad-type.json"
	assert_equal "$status" 3
	[[ "$stderr" == *"'num_hidden_layers' is not an integer"* ]]
	run --separate-stderr kvbench geometry --hf-config "$HF/bad-dtype.json"
	assert_equal "$status" 3
	[[ "$stderr" == *"unknown torch_dtype 'int3'"* ]]
	run --separate-stderr kvbench geometry --hf-config "$BATS_TEST_TMPDIR/none.json"
	assert_equal "$status" 3
	[[ "$stderr" == *"cannot read"*"No such file or directory"* ]]
	printf '\x00\xff garbage' > "$BATS_TEST_TMPDIR/bin.json"
	run --separate-stderr kvbench geometry --hf-config "$BATS_TEST_TMPDIR/bin.json"
	assert_equal "$status" 3
	run --separate-stderr kvbench geometry --hf-config "$HF"
	assert_equal "$status" 3
	# A config without a dtype needs --dtype, which then sizes it.
	run --separate-stderr kvbench geometry --hf-config "$HF/no-dtype.json"
	assert_equal "$status" 2
	[[ "$stderr" == *"give --dtype"* ]]
	run kvbench geometry --hf-config "$HF/no-dtype.json" --dtype bf16 -J
	assert_success
	assert_equal "$(jq .bytes_per_token <<<"$output")" 131072
	run --separate-stderr kvbench geometry --hf-config "$HF/llama-3.1-8b.json" --dtype int4
	assert_equal "$status" 2
}

@test "a tiny run of every phase: counts and schema in the JSON document" {
	run --separate-stderr tiny -J
	assert_success
	doc=$output
	jq -e . <<<"$doc" >/dev/null
	assert_equal "$(jq .version <<<"$doc")" 1
	assert_equal "$(jq -c '[.phases[].phase]' <<<"$doc")" '["write","read","lookup","mixed"]'
	assert_equal "$(jq '.config.files' <<<"$doc")" 4
	assert_equal "$(jq '.config.block_bytes' <<<"$doc")" 262144
	assert_equal "$(jq '.config.size_bytes' <<<"$doc")" 1048576
	assert_equal "$(jq -r '.config.engine' <<<"$doc")" uring
	assert_equal "$(jq '.config.queue_depth' <<<"$doc")" 2
	assert_equal "$(jq '.config.direct' <<<"$doc")" true
	assert_equal "$(jq '.config.atomic' <<<"$doc")" true
	# write: every file once, through a temp and a rename.
	w='.phases[] | select(.phase == "write")'
	assert_equal "$(jq "$w | .ops" <<<"$doc")" 4
	assert_equal "$(jq "$w | .writes" <<<"$doc")" 4
	assert_equal "$(jq "$w | .bytes" <<<"$doc")" 1048576
	assert_equal "$(jq "$w | .latency.rename.count" <<<"$doc")" 4
	assert_equal "$(jq "$w | .latency.open.count" <<<"$doc")" 4
	assert_equal "$(jq "$w | .latency.write.count" <<<"$doc")" 4
	# read: cold through O_DIRECT, atime stamped.
	r='.phases[] | select(.phase == "read")'
	assert_equal "$(jq "$r | .reads" <<<"$doc")" 4
	assert_equal "$(jq "$r | .bytes" <<<"$doc")" 1048576
	assert_equal "$(jq -r "$r | .cache_drop" <<<"$doc")" direct
	assert_equal "$(jq "$r | .latency.touch.count" <<<"$doc")" 4
	# lookup: half the keys present, half absent.
	l='.phases[] | select(.phase == "lookup")'
	assert_equal "$(jq "$l | .ops" <<<"$doc")" 100
	assert_equal "$(jq "$l | .hits" <<<"$doc")" 50
	assert_equal "$(jq "$l | .misses" <<<"$doc")" 50
	assert_equal "$(jq "$l | .latency.lookup.count" <<<"$doc")" 100
	m='.phases[] | select(.phase == "mixed")'
	assert_equal "$(jq "$m | .reads + .writes" <<<"$doc")" 4
	# Every phase has rates and percentiles; every latency is in _ns.
	for k in throughput_Bps iops elapsed_ns ops bytes latency; do
		assert_equal "$(jq "[.phases[] | has(\"$k\")] | all" <<<"$doc")" true
	done
	for k in count min_ns mean_ns p50_ns p90_ns p99_ns p999_ns max_ns; do
		assert_equal "$(jq "[.phases[].latency[] | has(\"$k\")] | all" <<<"$doc")" true
	done
	assert_equal "$(jq '[.phases[].latency[] | .p50_ns <= .p99_ns and .p99_ns <= .max_ns] | all' <<<"$doc")" true
	# The environment.
	assert_equal "$(jq -r '.environment.kernel.release' <<<"$doc")" "$(uname -r)"
	assert_equal "$(jq -r '.environment.filesystem.type' <<<"$doc")" "$(stat -f -c %T "$D" | sed 's/ext2\/ext3/ext4/')"
	jq -e '.environment.cpu.numa_nodes >= 1 and .environment.cpu.online >= 1' <<<"$doc" >/dev/null
	jq -e '.environment.filesystem.mount_options | length > 0' <<<"$doc" >/dev/null
	jq -e '.environment.gpus | type == "array"' <<<"$doc" >/dev/null
	assert_equal "$(jq .verdict <<<"$doc")" null
	# It cleaned up after itself.
	[ -z "$(ls -A "$D")" ]
}

@test "--keep leaves block files in the vLLM layout with a matching config.json" {
	requires python3
	run tiny --phases write --keep -J
	assert_success
	model=$(jq -r .config.model_dir <<<"$output")
	[ -f "$D/$model/config.json" ]
	assert_equal "${model##*_}" "$(py_fingerprint "$D/$model/config.json")"
	run find "$D/${model}_r0" -type f -name '*.bin'
	assert_equal "${#lines[@]}" 4
	for f in "${lines[@]}"; do
		[[ "$f" =~ /${model}_r0/([0-9a-f]{3})/([0-9a-f]{2})_g0/([0-9a-f]{16})\.bin$ ]]
		[ "${BASH_REMATCH[3]:0:3}" = "${BASH_REMATCH[1]}" ]
		[ "${BASH_REMATCH[3]:3:2}" = "${BASH_REMATCH[2]}" ]
		assert_equal "$(stat -c %s "$f")" 262144
	done
	[ -z "$(find "$D" -name '*.tmp')" ]
}

@test "psync, buffered, in place, fsync dir: counts, cold cache by fadvise" {
	run tiny --engine psync --buffered --in-place --fsync dir --phases write,read -J
	assert_success
	assert_equal "$(jq '.config.direct' <<<"$output")" false
	assert_equal "$(jq '.config.queue_depth' <<<"$output")" 1
	w='.phases[] | select(.phase == "write")'
	assert_equal "$(jq "$w | .writes" <<<"$output")" 4
	assert_equal "$(jq "$w | .latency.fsync.count" <<<"$output")" 4
	assert_equal "$(jq "$w | .latency.dirsync.count" <<<"$output")" 4
	assert_equal "$(jq "$w | .latency | has(\"rename\")" <<<"$output")" false
	assert_equal "$(jq -r '.phases[] | select(.phase == "read") | .cache_drop' <<<"$output")" fadvise
	assert_equal "$(jq '.phases[] | select(.phase == "read") | .reads' <<<"$output")" 4
}

@test "io_uring with registered buffers and a model geometry" {
	# 16 tokens per file of Llama-3.1-8B at tp 8: 16384 * 16 = 256 KiB.
	run tiny --hf-config "$HF/llama-3.1-8b.json" --tp 8 --tokens-per-file 16 \
		--registered-buffers --phases write,read -J
	assert_success
	assert_equal "$(jq .geometry.bytes_per_token <<<"$output")" 16384
	assert_equal "$(jq .config.block_bytes <<<"$output")" 262144
	assert_equal "$(jq .config.registered_buffers <<<"$output")" true
	assert_equal "$(jq '.phases[] | select(.phase == "read") | .bytes' <<<"$output")" 1048576
}

@test "io_uring with registered files: open, fsync and close in the ring" {
	run tiny --registered-files --registered-buffers --fsync file -J
	assert_success
	assert_equal "$(jq .config.registered_files <<<"$output")" true
	w='.phases[] | select(.phase == "write")'
	assert_equal "$(jq "$w | .writes" <<<"$output")" 4
	for op in open write fsync close rename file; do
		assert_equal "$(jq "$w | .latency.$op.count" <<<"$output")" 4
	done
	assert_equal "$(jq '.phases[] | select(.phase == "read") | .latency.read.count' <<<"$output")" 4
	assert_equal "$(jq '.phases[] | select(.phase == "mixed") | .reads + .writes' <<<"$output")" 4
	[ -z "$(ls -A "$D")" ]
	run --separate-stderr kvbench run --dir "$D" --engine psync --registered-files
	assert_equal "$status" 2
}

@test "the kvio engine: libkv's own puts, gets and presence checks" {
	requires xattr
	run tiny --engine kvio --fsync dir -J
	assert_success
	assert_equal "$(jq -r .config.engine <<<"$output")" kvio
	assert_equal "$(jq '.phases[] | select(.phase == "write") | .writes' <<<"$output")" 4
	assert_equal "$(jq '.phases[] | select(.phase == "read") | .reads' <<<"$output")" 4
	assert_equal "$(jq '.phases[] | select(.phase == "lookup") | [.hits, .misses]' <<<"$output" | tr -d ' \n')" '[50,50]'
	assert_equal "$(jq '[.phases[] | select(.phase != "lookup") | .latency.batch.count > 0] | all' <<<"$output")" true
	[ -z "$(ls -A "$D")" ]
	# Its puts carry the checksum xattr.
	run tiny --engine kvio --phases write --keep -J
	f=$(find "$D" -name '*.bin' | head -1)
	run --separate-stderr getfattr --only-values -n user.kv.xxh3 "$f"
	assert_success
	[[ "$output" =~ ^[0-9a-f]{16}$ ]]
	run --separate-stderr tiny --engine kvio --in-place
	assert_equal "$status" 2
	run --separate-stderr tiny --engine kvio --fsync file
	assert_equal "$status" 2
}

@test "read-only phases populate the working set first; --duration runs on" {
	run tiny --phases lookup --duration 300ms -J
	assert_success
	assert_equal "$(jq -c '[.phases[].phase]' <<<"$output")" '["lookup"]'
	jq -e '.phases[0].elapsed_ns >= 300000000' <<<"$output" >/dev/null
	jq -e '.phases[0].hits > 0 and .phases[0].misses > 0' <<<"$output" >/dev/null
	# Present keys are always found, absent never: alternate exactly.
	jq -e '.phases[0].hits - .phases[0].misses | fabs <= 2' <<<"$output" >/dev/null
}

@test "--ndjson: per-second samples, then one record per phase" {
	run --separate-stderr tiny --phases write,read --ndjson
	assert_success
	while IFS= read -r line; do
		jq -e . <<<"$line" >/dev/null
	done <<<"$output"
	assert_equal "$(jq -s '[.[] | select(.type == "phase")] | length' <<<"$output")" 2
	jq -se '[.[] | select(.type == "sample")] | length >= 2' <<<"$output" >/dev/null
	jq -se '[.[] | select(.type == "sample") | has("throughput_Bps") and has("t_ns")] | all' <<<"$output" >/dev/null
	# Samples of a phase add up to its totals.
	assert_equal "$(jq -s '[.[] | select(.type == "sample" and .phase == "read") | .bytes] | add' <<<"$output")" 1048576
	[ -z "$stderr" ]
}

@test "live progress goes to stderr only when it is a terminal" {
	requires script
	run script -qec "kvbench run --dir '$D' --block-size 256K --size 1M --threads 1 \
		--phases lookup --duration 1500ms > '$BATS_TEST_TMPDIR/table'" /dev/null
	assert_success
	assert_output --partial "lookup: 1 s,"
	assert_output --partial "ops/s"
	# The table on stdout is not mixed with it.
	run cat "$BATS_TEST_TMPDIR/table"
	refute_output --partial "ops/s"
	assert_output --partial "hits"
}

@test "--plot writes a well-formed SVG" {
	requires python3
	run tiny --plot "$BATS_TEST_TMPDIR/run.svg"
	assert_success
	run python3 -c '
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
lines = root.findall(".//{http://www.w3.org/2000/svg}polyline")
assert len(lines) >= 4, len(lines)
print("ok")' "$BATS_TEST_TMPDIR/run.svg"
	assert_success
	assert_output ok
	run --separate-stderr tiny --phases write --plot "$BATS_TEST_TMPDIR/no/such/dir.svg"
	assert_equal "$status" 3
	[[ "$stderr" == *"cannot write"* ]]
	# A link planted at the plot's name is not written through.
	echo secret > "$BATS_TEST_TMPDIR/victim"
	ln -s "$BATS_TEST_TMPDIR/victim" "$BATS_TEST_TMPDIR/planted.svg"
	run --separate-stderr tiny --phases write --plot "$BATS_TEST_TMPDIR/planted.svg"
	assert_equal "$status" 3
	[ "$(cat "$BATS_TEST_TMPDIR/victim")" = secret ]
}

@test "O_DIRECT: used where the filesystem takes it, refused loudly when asked" {
	mount_tmpfs 8m
	D=$MNT
	# Kernels before 6.6 refuse O_DIRECT on tmpfs; newer ones take it.
	if dd if=/dev/zero of="$D/probe" bs=4096 count=1 oflag=direct 2>/dev/null; then
		want=true
	else
		want=false
		run --separate-stderr tiny --direct --phases write
		assert_equal "$status" 3
		[[ "$stderr" == *"O_DIRECT"*"--buffered"* ]]
	fi
	rm -f "$D/probe"
	run tiny --phases write,read -J
	assert_success
	assert_equal "$(jq .config.direct <<<"$output")" "$want"
	assert_equal "$(jq -r .environment.filesystem.type <<<"$output")" tmpfs
	# A block O_DIRECT cannot move whole: buffered by default, an error
	# when --direct insists.
	D=$BATS_TEST_TMPDIR/scratch
	run kvbench run --dir "$D" --block-size 1000 --size 4000 --phases write,read -J
	assert_success
	assert_equal "$(jq .config.direct <<<"$output")" false
	assert_equal "$(jq '.phases[1].bytes' <<<"$output")" 4000
	run --separate-stderr kvbench run --dir "$D" --block-size 1000 --direct
	assert_equal "$status" 2
	[[ "$stderr" == *"multiple of 4096"* ]]
}

@test "a full filesystem is a runtime failure that leaves no files behind" {
	mount_tmpfs 1m
	D=$MNT
	for engine in "--engine uring" "--engine uring --registered-files" "--engine psync"; do
		run --separate-stderr kvbench run --dir "$D" --block-size 256K --size 4M \
			--phases write $engine
		assert_equal "$status" 3
		[[ "$stderr" == *"No space left on device"* ]]
		[ -z "$(find "$D" -type f)" ]
	done
}

@test "an unwritable --dir is a runtime failure" {
	requires root setpriv
	chmod 755 "$D"
	run --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$KV_BIN/kvbench" run --dir "$D" --block-size 256K --size 1M
	assert_equal "$status" 3
	[[ "$stderr" == *"Permission denied"* ]]
	# A missing dir is made, but not its missing parent.
	run --separate-stderr kvbench run --dir "$BATS_TEST_TMPDIR/absent/dir"
	assert_equal "$status" 3
	[[ "$stderr" == *"cannot make the scratch dir"*"No such file or directory"* ]]
}

@test "run bounds its I/O buffers: --qd lowered to --max-buffer-bytes, said, and held to" {
	requires /usr/bin/time
	# 2 threads x 32 x 8M would be 512M; 32M of buffers hold 2 per thread.
	run --separate-stderr /usr/bin/time -f 'maxrss_kib %M' kvbench run --dir "$D" \
		--block-size 8M --threads 2 --qd 32 --max-buffer-bytes 32M --size 16M \
		--phases write,read -J
	assert_success
	[[ "$stderr" == *"--qd 32 lowered to 2: 2 threads x 32 x 8.0M of buffers would be 512M, over --max-buffer-bytes 32M"* ]] ||
		fail "stderr: $stderr"
	assert_equal "$(jq .config.queue_depth <<<"$output")" 2
	assert_equal "$(jq .config.buffer_bytes <<<"$output")" $((32 << 20))
	rss=$(sed -n 's/^maxrss_kib //p' <<<"$stderr")
	[ "$rss" -lt $((160 << 10)) ] || fail "peak RSS ${rss} KiB for 32M of buffers"
	# The default cap: 1G, whatever the depth asked for (reads of 4 files
	# touch 4M of it).
	run --separate-stderr tiny --threads 4 --qd 4096 --block-size 1M --phases read -J
	assert_success
	assert_equal "$(jq .config.queue_depth <<<"$output")" 256
	# Lookups and metadata hold no buffers, so nothing is lowered.
	run --separate-stderr tiny --threads 4 --qd 4096 --block-size 1M --phases lookup,meta -J
	assert_success
	assert_equal "$(jq .config.queue_depth <<<"$output")" 4096
	assert_equal "$(jq .config.buffer_bytes <<<"$output")" 0
	# The table's header says what it holds.
	run tiny --phases write
	assert_output --partial "2 threads x qd 2, 1.0M of buffers"
}

@test "run refuses I/O buffers that would not fit in the memory available" {
	run --separate-stderr kvbench run --dir "$D" --block-size 1G --threads 64 --qd 64 \
		--max-buffer-bytes 1P --phases write
	assert_equal "$status" 2
	[[ "$stderr" == *"64 threads x 64 x 1.0G of I/O buffers (4.0T) would not fit in the "*" of memory available"* ]] ||
		fail "stderr: $stderr"
	[ -z "$(ls "$D")" ]
	run --separate-stderr kvbench run --dir "$D" --block-size 1G --threads 1024 --engine psync \
		--phases write
	assert_equal "$status" 2
	[[ "$stderr" == *"would not fit"* ]]
}

@test "metadata phases alone: every block key created, found and removed once" {
	run tiny --phases meta -J
	assert_success
	assert_equal "$(jq -c '[.phases[] | [.phase, .ops]]' <<<"$output")" \
		'[["create",4],["stat",4],["unlink",4]]'
	assert_equal "$(jq -c '[.phases[1,2] | [.hits, .misses]]' <<<"$output")" '[[4,0],[4,0]]'
	assert_equal "$(jq '.phases[0].latency.create.count' <<<"$output")" 4
	assert_equal "$(jq '.phases[2].latency.unlink.count' <<<"$output")" 4
	# Without a create, nothing is there to find or remove.
	run tiny --phases stat,unlink -J
	assert_success
	assert_equal "$(jq -c '[.phases[] | [.hits, .misses]]' <<<"$output")" '[[0,4],[0,4]]'
	# "all" stays the four data phases, and one process has no ranks.
	run tiny -J
	assert_equal "$(jq -c '.config.phases' <<<"$output")" '["write","read","lookup","mixed"]'
	assert_equal "$(jq '.config.ranks' <<<"$output")" null
	assert_equal "$(jq '[.phases[] | has("ranks")] | any' <<<"$output")" false
	[ -z "$(ls -A "$D")" ]
}

@test "verdict: break-even, bandwidth needed and the context table, by hand" {
	# 131072 B/token, 10000 tokens/s, 2 GiB/s, 10 ms: per token load is
	# 131072/2^31 s = 61.03515625 us against 100 us of prefill, so
	# n* = 0.01 / (100e-6 - 61.03515625e-6) = 256.64 -> 257 tokens.
	run kvbench verdict --hf-config "$HF/llama-3.1-8b.json" --prefill-tokens-per-s 10000 \
		--read-bandwidth 2G --latency 10ms -J
	assert_success
	assert_equal "$(jq .bytes_per_token <<<"$output")" 131072
	assert_equal "$(jq .required_read_Bps <<<"$output")" 1310720000
	assert_equal "$(jq .break_even_tokens <<<"$output")" 257
	assert_equal "$(jq .read_Bps <<<"$output")" 2147483648
	assert_equal "$(jq .latency_ns <<<"$output")" 10000000
	# 1024 tokens: 10 ms + 1024 * 61.03515625 us = 72.5 ms; 102.4 ms.
	assert_equal "$(jq -c '.contexts[0] | [.tokens, .load_ns, .recompute_ns, .faster]' <<<"$output")" \
		'[1024,72500000,102400000,"load"]'
	# 131072 tokens: 10 ms + 8 s; 13.1072 s.
	assert_equal "$(jq -c '.contexts[-1] | [.tokens, .bytes, .load_ns, .recompute_ns]' <<<"$output")" \
		'[131072,17179869184,8010000000,13107200000]'
	assert_equal "$(jq '.contexts | length' <<<"$output")" 8
	run kvbench verdict --hf-config "$HF/llama-3.1-8b.json" --prefill-tokens-per-s 10000 \
		--read-bandwidth 2G --latency 10ms
	assert_success
	assert_output --partial "break-even prefix: 257 tokens"
	assert_output --partial "1310720000 B/s"
}

@test "verdict: prefill modelled from params, attention, FLOP/s and MFU" {
	# Llama-3.1-8B, 1000 TFLOP/s at the default MFU 0.5: 1024 tokens cost
	# 2 * 8e9 * 1024 FLOPs of matmuls plus causal attention,
	# 2 * 32 layers * 32 heads * 128 * 1024 * 1025 FLOPs.
	run kvbench verdict --hf-config "$HF/llama-3.1-8b.json" --params 8B \
		--gpu-tflops 1000 --read-bandwidth 2G -J
	assert_success
	assert_equal "$(jq .prefill_estimate.mfu <<<"$output")" 0.5
	assert_equal "$(jq -c .prefill_estimate.attention <<<"$output")" \
		'{"head_dim":128,"heads":32,"layers":32,"sliding_layers":0,"sliding_window_tokens":0}'
	assert_equal "$(jq .contexts[0].recompute_ns <<<"$output")" \
		"$(awk 'BEGIN { printf "%.0f", (2 * 8e9 * 1024 + 2 * 32 * 32 * 128 * 1024 * 1025) / 500e12 * 1e9 }')"
	# At 2 GiB/s n tokens load in n * 61.03515625 us = n * 30517578125
	# FLOPs' worth, against 16e9 n + 262144 n (n + 1): loading wins once
	# n + 1 > 14517578125 / 262144 = 55380.2, from 55380 tokens up.
	assert_equal "$(jq -c '[.contexts[] | .faster]' <<<"$output")" \
		'["recompute","recompute","recompute","recompute","recompute","recompute","load","load"]'
	assert_equal "$(jq .break_even_tokens <<<"$output")" 55380
	# The bandwidth that keeps up at every length is the short prefixes'.
	assert_equal "$(jq .required_read_Bps <<<"$output")" \
		"$(awk 'BEGIN { printf "%.0f", 131072 * 1024 / ((2 * 8e9 * 1024 + 262144 * 1024 * 1025) / 500e12) }')"
	# tp 8 of DeepSeek-V3 (MLA: the attention term is left out), 37B
	# active, 500 TFLOP/s, MFU 0.5: 8 * 500e12 * 0.5 / 74e9 tokens/s.
	run kvbench verdict --hf-config "$HF/deepseek-v3.json" --tp 8 --params 37e9 \
		--gpu-tflops 500 --mfu 0.5 --read-bandwidth 4G -J
	assert_success
	assert_equal "$(jq .prefill_estimate.attention <<<"$output")" null
	assert_equal "$(jq .required_read_Bps <<<"$output")" \
		"$(awk 'BEGIN { printf "%.0f", 70272 * 8 * 500e12 * 0.5 / 74e9 }')"
	# Gemma 3: sliding layers see at most their window of keys.
	run kvbench verdict --hf-config "$HF/gemma-3-27b.json" --params 27B \
		--gpu-tflops 1000 --read-bandwidth 1G -J
	assert_success
	jq -e '.prefill_estimate.attention | .sliding_layers > 0 and .sliding_window_tokens > 0' \
		<<<"$output" >/dev/null
	# A bare block size: 4 MiB per 256-token file is 16384 B/token.
	run kvbench verdict --block-size 4M --prefill-tokens-per-s 1000 --read-bandwidth 1G -J
	assert_equal "$(jq .bytes_per_token <<<"$output")" 16384
	assert_equal "$(jq .break_even_tokens <<<"$output")" 1
}

@test "verdict: Llama-3-70B on 4 x H100 (TP 4) recomputes 128k tokens in about 20 s, as measured" {
	# IBM measured almost 20 s to compute the KV of 128,000 tokens of
	# Llama-3-70B on 4 x H100 (989 TFLOP/s dense bf16 each).
	run kvbench verdict --hf-config "$HF/llama-3.3-70b.json" --params 70B --tp 4 \
		--gpu-tflops 989 --read-bandwidth 10G -J
	assert_success
	jq -e '.contexts[-1] | .tokens == 131072 and .recompute_ns > 16e9 and .recompute_ns < 24e9' \
		<<<"$output" >/dev/null || fail "128k tokens: $(jq .contexts[-1].recompute_ns <<<"$output") ns"
	# Loading's advantage grows with the prefix, as the published gains do.
	jq -e '.contexts[-1].speedup > 2 * .contexts[0].speedup' <<<"$output" >/dev/null
	# The linear term alone (no config, so no attention) misses it by half.
	run kvbench verdict --block-size 20M --params 70B --tp 4 --gpu-tflops 989 \
		--read-bandwidth 10G -J
	assert_success
	jq -e '.contexts[-1].recompute_ns < 12e9' <<<"$output" >/dev/null
}

@test "verdict --measured-prefill: a tokens-vs-seconds curve instead of the model" {
	printf '# tokens seconds\n2000 3.0\n1000 1.0\n\n' > "$BATS_TEST_TMPDIR/curve"
	run kvbench verdict --block-size 256K --measured-prefill "$BATS_TEST_TMPDIR/curve" \
		--read-bandwidth 1G -J
	assert_success
	assert_equal "$(jq -c .prefill_measured.points <<<"$output")" 2
	# 1024 tokens: 1.0 + 2.0 * 24/1000 s between the points; 131072:
	# along the last segment, 3.0 + 2.0 * 129072/1000 s.
	assert_equal "$(jq .contexts[0].recompute_ns <<<"$output")" 1048000000
	assert_equal "$(jq .contexts[-1].recompute_ns <<<"$output")" 261144000000
	printf '1000 fast\n' > "$BATS_TEST_TMPDIR/bad"
	run --separate-stderr kvbench verdict --block-size 256K --read-bandwidth 1G \
		--measured-prefill "$BATS_TEST_TMPDIR/bad"
	assert_equal "$status" 3
	[[ "$stderr" == *"line 1"* ]]
	run --separate-stderr kvbench verdict --block-size 256K --read-bandwidth 1G \
		--measured-prefill "$BATS_TEST_TMPDIR/curve" --prefill-tokens-per-s 10
	assert_equal "$status" 2
}

@test "verdict: bandwidth and latency from a kvbench run" {
	tiny -J > "$BATS_TEST_TMPDIR/run.json"
	bw=$(jq '.phases[] | select(.phase == "read") | .throughput_Bps' "$BATS_TEST_TMPDIR/run.json")
	lat=$(jq '([.phases[] | select(.phase == "read") | .latency.open.p50_ns] + [.phases[] | select(.phase == "lookup") | .latency.lookup.p50_ns]) | add' "$BATS_TEST_TMPDIR/run.json")
	run kvbench verdict --from-run "$BATS_TEST_TMPDIR/run.json" --block-size 256K \
		--prefill-tokens-per-s 5000 -J
	assert_success
	assert_equal "$(jq .read_Bps <<<"$output")" "$bw"
	assert_equal "$(jq .latency_ns <<<"$output")" "$lat"
	assert_equal "$(jq .bytes_per_token <<<"$output")" 1024
}

@test "verdict --from-run of a run without a model refuses to guess its tokens per file" {
	tiny -J > "$BATS_TEST_TMPDIR/run.json"
	[ "$(jq .geometry "$BATS_TEST_TMPDIR/run.json")" = null ]
	block=$(jq .config.block_bytes "$BATS_TEST_TMPDIR/run.json")
	run --separate-stderr kvbench verdict --from-run "$BATS_TEST_TMPDIR/run.json" \
		--params 8B --gpu-tflops 989 -J
	assert_equal "$status" 2
	assert_equal "$output" ""
	[[ "$stderr" == *"has no geometry"*"--hf-config"*"--tokens-per-file"* ]]
	# Told the tokens per file, it spreads the run's block size over them.
	run kvbench verdict --from-run "$BATS_TEST_TMPDIR/run.json" --tokens-per-file 64 \
		--params 8B --gpu-tflops 989 -J
	assert_success
	assert_equal "$(jq .bytes_per_token <<<"$output")" $(( (block + 63) / 64 ))
}

@test "verdict --from-run of a run with a model takes its geometry (README: Llama-3.1-8B recomputes)" {
	kvbench run --dir "$D" --hf-config "$HF/llama-3.1-8b.json" --size 8M --threads 1 --qd 2 \
		--lookups 100 -J > "$BATS_TEST_TMPDIR/run.json"
	run kvbench verdict --from-run "$BATS_TEST_TMPDIR/run.json" --params 8B --gpu-tflops 989 -J
	assert_success
	# 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes (bf16).
	assert_equal "$(jq .bytes_per_token <<<"$output")" 131072
	assert_equal "$(jq .bytes_per_token <<<"$output")" \
		"$(jq .geometry.bytes_per_token "$BATS_TEST_TMPDIR/run.json")"
}

@test "run --dir makes a missing scratch dir, as mkdir would, and never through a link" {
	run tiny --dir "$BATS_TEST_TMPDIR/fresh" --phases write,read --keep
	assert_success
	[ -d "$BATS_TEST_TMPDIR/fresh" ]
	# Removed with the files, as kvbench(1) says, unless --keep; one
	# that was there stays.
	run tiny --dir "$BATS_TEST_TMPDIR/fresh2" --phases write,read,create
	assert_success
	[ ! -e "$BATS_TEST_TMPDIR/fresh2" ] || fail "left: $(find "$BATS_TEST_TMPDIR/fresh2")"
	# Its filesystem is said all the same, as it was while there.
	assert_line --regexp "^dir $BATS_TEST_TMPDIR/fresh2: [a-z0-9]+ on "
	run tiny --dir "$BATS_TEST_TMPDIR/fresh3" --phases write -J
	assert_success
	jq -e '.environment.filesystem.type | strings' <<<"$output" >/dev/null ||
		fail "$(jq -c .environment.filesystem <<<"$output")"
	run tiny --phases write
	assert_success
	[ -d "$D" ] && [ -z "$(ls -A "$D")" ]
	# Its parent must exist, as for mkdir(1) and kvget -o.
	run --separate-stderr tiny --dir "$BATS_TEST_TMPDIR/no/such" --phases write
	assert_equal "$status" 3
	[[ "$stderr" == *"cannot make the scratch dir"*"No such file or directory"* ]]
	# A dangling link is not followed to create its target.
	ln -s "$BATS_TEST_TMPDIR/elsewhere" "$BATS_TEST_TMPDIR/link"
	run --separate-stderr tiny --dir "$BATS_TEST_TMPDIR/link" --phases write
	assert_equal "$status" 3
	[ ! -e "$BATS_TEST_TMPDIR/elsewhere" ]
	# A file in the way is refused.
	: > "$BATS_TEST_TMPDIR/file"
	run --separate-stderr tiny --dir "$BATS_TEST_TMPDIR/file" --phases write
	assert_equal "$status" 3
}

@test "a run with a prefill rate ends with a verdict on its own figures" {
	run tiny --prefill-tokens-per-s 5000 -J
	assert_success
	doc=$output
	bw=$(jq '.phases[] | select(.phase == "read") | .throughput_Bps' <<<"$doc")
	lat=$(jq '([.phases[] | select(.phase == "read") | .latency.open.p50_ns] + [.phases[] | select(.phase == "lookup") | .latency.lookup.p50_ns]) | add' <<<"$doc")
	# 256 KiB files of 256 tokens: 1024 bytes per token.
	assert_equal "$(jq .verdict.bytes_per_token <<<"$doc")" 1024
	assert_equal "$(jq .verdict.required_read_Bps <<<"$doc")" $((1024 * 5000))
	assert_equal "$(jq .verdict.read_Bps <<<"$doc")" "$bw"
	assert_equal "$(jq .verdict.latency_ns <<<"$doc")" "$lat"
	# No model config: 2 * 8e9 FLOPs a token at 1000e12 * 0.5 FLOP/s.
	run tiny --phases write,read --params 8B --gpu-tflops 1000 --ndjson
	assert_success
	assert_equal "$(jq -s '[.[] | select(.type == "verdict")][0].contexts[0].recompute_ns' <<<"$output")" 32768000
	run tiny --phases read --prefill-tokens-per-s 5000
	assert_success
	assert_output --partial "break-even prefix"
	run --separate-stderr tiny --phases write,lookup --prefill-tokens-per-s 5000
	assert_equal "$status" 2
	[[ "$stderr" == *"needs the read phase"* ]]
	run --separate-stderr tiny --read-bandwidth 1G --prefill-tokens-per-s 5000
	assert_equal "$status" 2
}

@test "the verdict options --help and kvbench(1) say add a verdict to a run are the ones run takes" {
	local opts n=0 word page taken=0 o
	opts=$(kvbench --help | sed -n '/^Verdict/,/^Probe/p' | grep -oE '^      --[a-z-]+' | tr -d ' ')
	word=$(kvbench --help | sed -n 's/^Verdict (the first \([a-z]*\) also add a verdict to a run):$/\1/p')
	page=$(sed -n 's/^The first \([a-z]*\) options also apply to$/\1/p' "$BATS_TEST_DIRNAME/../../man/kvbench.1")
	[ -n "$word" ] && [ "$word" = "$page" ] || fail "--help says the first '$word', kvbench(1) the first '$page'"
	for o in $opts; do
		n=$((n + 1))
		run --separate-stderr kvbench run "$o" 1
		if [[ $stderr != *"does not apply to 'run'"* ]]; then
			[ "$taken" -eq $((n - 1)) ] || fail "$o applies to run but follows one that does not"
			taken=$n
		fi
	done
	local -A num=([one]=1 [two]=2 [three]=3 [four]=4 [five]=5 [six]=6 [seven]=7)
	[ "${num[$word]:-0}" -eq "$taken" ] || fail "'the first $word', but run takes the first $taken"
}

@test "verdict: missing inputs are usage errors" {
	L=$HF/llama-3.1-8b.json
	run --separate-stderr kvbench verdict --hf-config "$L" --read-bandwidth 1G
	assert_equal "$status" 2
	run --separate-stderr kvbench verdict --hf-config "$L" --prefill-tokens-per-s 1000
	assert_equal "$status" 2
	[[ "$stderr" == *"--read-bandwidth"* ]]
	run --separate-stderr kvbench verdict --prefill-tokens-per-s 1000 --read-bandwidth 1G
	assert_equal "$status" 2
	run --separate-stderr kvbench verdict --hf-config "$L" --params 8B --read-bandwidth 1G
	assert_equal "$status" 2
	[[ "$stderr" == *"--gpu-tflops"* ]]
	run --separate-stderr kvbench verdict --hf-config "$L" --params 8B --gpu-tflops 900 \
		--prefill-tokens-per-s 9 --read-bandwidth 1G
	assert_equal "$status" 2
	run --separate-stderr kvbench verdict --hf-config "$L" --prefill-tokens-per-s fast \
		--read-bandwidth 1G
	assert_equal "$status" 2
	run --separate-stderr kvbench verdict --hf-config "$L" --prefill-tokens-per-s 1000 \
		--read-bandwidth 1G --mfu 1.5
	assert_equal "$status" 2
	run --separate-stderr kvbench verdict --from-run "$BATS_TEST_TMPDIR/none.json" \
		--block-size 1M --prefill-tokens-per-s 1000
	assert_equal "$status" 3
}

# The scratch dir is often shared (1777) and the block names follow from
# --seed: a neighbour plants links where the next run will write.
@test "hostile: kvbench never writes, truncates or removes through a symlink in --dir" {
	local out=$BATS_TEST_TMPDIR/outside blocks b bucket engine
	mkdir -p "$out"
	tiny --phases write --keep > /dev/null
	blocks=$(cd "$D" && find . -name '*.bin' | sort)
	[ -n "$blocks" ]
	for engine in uring uring-registered psync; do
		local extra=(--engine "${engine%-registered}")
		[ "$engine" = uring-registered ] && extra+=(--registered-files)
		for mode in read in-place atomic; do
			rm -rf "${D:?}"/* "$out"/*
			echo secret > "$out/victim"
			# Every block a link to a file outside, and one bucket dir
			# a link to a dir outside that holds a file of a block's name.
			bucket=
			for b in $blocks; do
				mkdir -p "$D/$(dirname "$b")"
				if [ -z "$bucket" ]; then
					bucket=$(dirname "$b")
					rmdir "$D/$bucket"
					mkdir "$out/bucket"
					echo secret > "$out/bucket/$(basename "$b")"
					ln -s "$out/bucket" "$D/$bucket"
				else
					ln -s "$out/victim" "$D/$b"
				fi
			done
			case $mode in
			read) run tiny "${extra[@]}" --phases read ;;
			in-place) run tiny "${extra[@]}" --phases write --in-place ;;
			atomic) run tiny "${extra[@]}" --phases write,read,lookup,meta ;;
			esac
			[ "$(cat "$out/victim")" = secret ] || fail "$engine $mode: victim overwritten"
			[ "$(ls "$out/bucket")" = "$(basename "$(echo "$blocks" | head -1)")" ] ||
				fail "$engine $mode: bucket outside now holds: $(ls "$out/bucket")"
			[ "$(cat "$out/bucket"/*)" = secret ] || fail "$engine $mode: file outside changed"
			[ "$status" -ne 0 ] || fail "$engine $mode: exited 0 through a planted link"
		done
	done
}
