#!/usr/bin/env bats
# The on-disk layout is a compatibility contract with vLLM's file tier and
# llm-d's fs backend (DESIGN.md "The on-disk layout").  Python computes
# every name here the way those writers do, at test time, and the built
# programs must agree with it byte for byte: dir names, config.json text
# and block paths, in both directions.

load test_helper

# py_layout CONFIG [RANK GROUP HASH]: the model dir vLLM names for CONFIG
# (its fingerprint covers the whole object), or the block path for
# RANK/GROUP/HASH.
py_layout() {
	python3 - "$@" <<PY
import hashlib, json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
fp = hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
mdir = d["model_name"].replace("/", "_") + "_" + fp
if len(sys.argv) == 2:
    print(mdir)
else:
    rank, group, h = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].lower()
    print(f"{mdir}_r{rank}/{h[:3]}/{h[3:5]}_g{group}/{h}.bin")
PY
}

# py_config_json CONFIG OUT: config.json as the Python writers write it.
py_config_json() {
	python3 - "$1" "$2" <<PY
import json, sys
cfg = json.load(open(sys.argv[1], encoding="utf-8"))
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump(cfg, f, indent=2, sort_keys=True)
PY
}

# py_tree ROOT MANIFEST: a tree as a vLLM fleet leaves it (three models,
# one with a non-ASCII name, several ranks and groups, a writer's
# leftover temp file); MANIFEST gets one JSON record per block.
py_tree() {
	python3 - "$1" "$2" <<PY
import hashlib, json, os, random, sys
root, manifest = sys.argv[1], sys.argv[2]
rng = random.Random(7)
def config(model, tp, dtype, groups):
    return {"model_name": model, "hash_block_size": 16, "gpu_blocks_per_file": 8,
            "tp_size": tp, "pp_size": 1, "pcp_size": 1, "dcp_size": 1,
            "dtype": dtype, "inference_engine": "vllm",
            "kv_cache_groups": [{"block_size": 16,
                                 "layer_names": [f"model.layers.{i}.self_attn.attn" for i in range(g)]}
                                for g in groups]}
models = [config("meta-llama/Llama-3.1-8B", 2, "bfloat16", [2]),
          config("Qwen/Qwen3-32B-\u00fc\u4e2d\u6587\U0001F642", 4, "float16", [3, 1]),
          config("deepseek-ai/DeepSeek-V3_2", 1, "float8_e4m3fn", [1, 1, 2])]
out = []
for cfg in models:
    fp = hashlib.sha256(json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    mdir = cfg["model_name"].replace("/", "_") + "_" + fp
    os.makedirs(os.path.join(root, mdir), exist_ok=True)
    with open(os.path.join(root, mdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    for rank in range(cfg["tp_size"]):
        for group in range(len(cfg["kv_cache_groups"])):
            for i in range(3):
                if i == 0:
                    h = f"{rng.getrandbits(64):016x}"
                else:
                    h = hashlib.sha256(f"{mdir}{rank}{group}{i}".encode()).hexdigest()
                rel = f"{mdir}_r{rank}/{h[:3]}/{h[3:5]}_g{group}/{h}.bin"
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                size = rng.randrange(1, 4096)
                with open(os.path.join(root, rel), "wb") as f:
                    f.write(os.urandom(size))
                out.append({"model_dir": mdir, "rank": rank, "group": group,
                            "hash": h, "path": rel, "size_bytes": size})
last = out[-1]["path"]
with open(os.path.join(root, last + "_3f2a9c0d1e4b5a67.tmp"), "wb") as f:
    f.write(b"torn")
with open(manifest, "w") as f:
    for r in out:
        f.write(json.dumps(r, sort_keys=True) + "\n")
PY
}

setup() {
	common_setup
	requires python3
}

@test "kvput --config names the model dir and writes config.json as python does" {
	local model cfg want dir
	for model in meta-llama/Llama-3.1-8B 'Qwen/Qwen3-32B-ü中文🙂'; do
		rm -rf "$KV_ROOT" && mkdir -p "$KV_ROOT"
		cfg=$BATS_TEST_TMPDIR/cfg.json
		make_config "$model" 2 float16 > "$cfg"
		dir=$(py_layout "$cfg")
		[ "$dir" = "${model//\//_}_$(py_fingerprint "$cfg")" ]
		random_file "$BATS_TEST_TMPDIR/payload" 4096

		run kvput --root "$KV_ROOT" --config "$cfg" --rank 1 --group 0 \
			00c0ffee1234abcd "$BATS_TEST_TMPDIR/payload"
		[ "$status" -eq 0 ] || fail "kvput: $output"

		# Exactly the model dir and its rank dir, nothing else.
		run ls -A "$KV_ROOT"
		[ "$output" = "$(printf '%s\n%s' "$dir" "${dir}_r1")" ] ||
			fail "root holds: $output; want $dir"
		run ls -A "$KV_ROOT/$dir"
		[ "$output" = config.json ] || fail "model dir holds: $output"
		py_config_json "$cfg" "$BATS_TEST_TMPDIR/want.json"
		cmp "$BATS_TEST_TMPDIR/want.json" "$KV_ROOT/$dir/config.json"

		want=$(py_layout "$cfg" 1 0 00c0ffee1234abcd)
		[ -f "$KV_ROOT/$want" ] || fail "no block at $want"
		cmp "$BATS_TEST_TMPDIR/payload" "$KV_ROOT/$want"
		[ "$(find "$KV_ROOT" -type f | wc -l)" -eq 2 ]
	done
}

@test "kvput puts blocks where python's layout puts them, any hash length" {
	local cfg=$BATS_TEST_TMPDIR/cfg.json want hash rank group spec
	make_config deepseek-ai/DeepSeek-V3 8 bfloat16 > "$cfg"
	random_file "$BATS_TEST_TMPDIR/payload" 100
	for spec in "0 0 ABCDEF0123456789" "13 2 $(sha256sum "$cfg" | cut -c1-64)" \
		"7 11 0a1b2"; do
		read -r rank group hash <<< "$spec"
		run kvput --root "$KV_ROOT" --config "$cfg" --rank "$rank" \
			--group "$group" "$hash" "$BATS_TEST_TMPDIR/payload"
		[ "$status" -eq 0 ] || fail "kvput $spec: $output"
		want=$(py_layout "$cfg" "$rank" "$group" "$hash")
		cmp "$BATS_TEST_TMPDIR/payload" "$KV_ROOT/$want"
	done
	# Nothing but the config and the three blocks: no temp left behind.
	[ "$(find "$KV_ROOT" -type f | wc -l)" -eq 4 ]
	[ -z "$(find "$KV_ROOT" -name '*.tmp')" ]
}

@test "kvput --config reuses a model dir that python created" {
	local cfg=$BATS_TEST_TMPDIR/cfg.json dir
	make_config 'Qwen/Qwen3-32B-ü中文🙂' 4 bfloat16 > "$cfg"
	dir=$(py_layout "$cfg")
	mkdir "$KV_ROOT/$dir"
	py_config_json "$cfg" "$KV_ROOT/$dir/config.json"
	cp "$KV_ROOT/$dir/config.json" "$BATS_TEST_TMPDIR/before"
	echo data > "$BATS_TEST_TMPDIR/payload"
	run kvput --root "$KV_ROOT" --config "$cfg" 0123456789abcdef "$BATS_TEST_TMPDIR/payload"
	[ "$status" -eq 0 ] || fail "kvput: $output"
	cmp "$BATS_TEST_TMPDIR/before" "$KV_ROOT/$dir/config.json"
	[ "$(ls -A "$KV_ROOT" | wc -l)" -eq 2 ]
	cmp "$BATS_TEST_TMPDIR/payload" "$KV_ROOT/$(py_layout "$cfg" 0 0 0123456789abcdef)"
}

@test "kvls --blocks --ndjson lists a python-written vLLM tree exactly" {
	py_tree "$KV_ROOT" "$BATS_TEST_TMPDIR/manifest"
	run --separate-stderr kvls --root "$KV_ROOT" --blocks --ndjson
	[ "$status" -eq 0 ] || fail "kvls: $stderr"
	printf '%s\n' "$output" > "$BATS_TEST_TMPDIR/listed"
	run python3 - "$KV_ROOT" "$BATS_TEST_TMPDIR/manifest" "$BATS_TEST_TMPDIR/listed" <<'PY'
import json, os, sys
root, manifest, listed = sys.argv[1:]
keys = ("model_dir", "rank", "group", "hash", "path", "size_bytes")
want = sorted(tuple(r[k] for k in keys) for r in map(json.loads, open(manifest)))
got = []
for line in open(listed):
    r = json.loads(line)
    # A path may be given relative to the root or in full.
    if r["path"].startswith(root + "/"):
        r["path"] = r["path"][len(root) + 1:]
    got.append(tuple(r[k] for k in keys))
got.sort()
if got != want:
    print("missing:", sorted(set(want) - set(got)))
    print("extra:", sorted(set(got) - set(want)))
    sys.exit(1)
print(len(got))
PY
	[ "$status" -eq 0 ] || fail "$output"
}

@test "kvls --check finds nothing wrong in a python-written tree but a renamed dir" {
	py_tree "$KV_ROOT" "$BATS_TEST_TMPDIR/manifest"
	# The writer's leftover temp file is an orphan --check reports; the
	# tree is otherwise clean.
	find "$KV_ROOT" -name '*.tmp' -delete
	run kvls --root "$KV_ROOT" --check
	[ "$status" -eq 0 ] || fail "clean tree: kvls --check exited $status: $output"

	# Rename one model dir (and its rank dirs) to a wrong fingerprint.
	local good bad r
	good=$(cd "$KV_ROOT" && ls -d deepseek-ai_DeepSeek-V3_2_????????????)
	bad=${good%_*}_0123456789ab
	mv "$KV_ROOT/$good" "$KV_ROOT/$bad"
	for r in "$KV_ROOT/${good}"_r*; do
		mv "$r" "$KV_ROOT/${bad}_r${r##*_r}"
	done
	run kvls --root "$KV_ROOT" --check
	[ "$status" -ne 0 ] || fail "a wrong fingerprint went unreported: $output"
	[[ "$output" == *"$bad"* ]] || fail "--check does not name $bad: $output"
}

@test "blocks kvput writes are listed back by kvls with their python path" {
	local cfg=$BATS_TEST_TMPDIR/cfg.json want
	make_config 'Qwen/Qwen3-32B-ü中文🙂' > "$cfg"
	head -c 777 /dev/urandom > "$BATS_TEST_TMPDIR/payload"
	kvput --root "$KV_ROOT" --config "$cfg" --rank 3 --group 1 FEEDFACE00112233 \
		"$BATS_TEST_TMPDIR/payload"
	want=$(py_layout "$cfg" 3 1 feedface00112233)
	run --separate-stderr kvls --root "$KV_ROOT" --blocks --ndjson
	[ "$status" -eq 0 ] || fail "kvls: $stderr"
	run python3 -c '
import json, sys
r = json.loads(sys.argv[1])
p = r["path"].split(sys.argv[3] + "/", 1)[-1]
assert (p, r["hash"], r["rank"], r["group"], r["size_bytes"]) == \
    (sys.argv[2], "feedface00112233", 3, 1, 777), r
' "$output" "$want" "$KV_ROOT"
	[ "$status" -eq 0 ] || fail "$output"
}

@test "racing kvput --config writers agree on one model dir and python's config.json" {
	local cfg=$BATS_TEST_TMPDIR/cfg.json dir i pids=()
	make_config 'Qwen/Qwen3-32B-ü中文🙂' 2 bfloat16 > "$cfg"
	dir=$(py_layout "$cfg")
	random_file "$BATS_TEST_TMPDIR/payload" 512
	for i in 0 1 2 3 4 5 6 7; do
		kvput --root "$KV_ROOT" --config "$cfg" "abcde0$i" "$BATS_TEST_TMPDIR/payload" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i" || fail "a racing kvput failed"
	done
	[ "$(ls -A "$KV_ROOT" | wc -l)" -eq 2 ]
	[ "$(ls -A "$KV_ROOT/$dir")" = config.json ]
	py_config_json "$cfg" "$BATS_TEST_TMPDIR/want.json"
	cmp "$BATS_TEST_TMPDIR/want.json" "$KV_ROOT/$dir/config.json"
	for i in 0 1 2 3 4 5 6 7; do
		cmp "$BATS_TEST_TMPDIR/payload" "$KV_ROOT/$(py_layout "$cfg" 0 0 "abcde0$i")"
	done
}

@test "kvput --config refuses a model dir whose config.json says otherwise" {
	local cfg=$BATS_TEST_TMPDIR/cfg.json other=$BATS_TEST_TMPDIR/other.json dir
	make_config meta-llama/Llama-3.1-8B 1 bfloat16 > "$cfg"
	make_config meta-llama/Llama-3.1-8B 8 bfloat16 > "$other"
	dir=$(py_layout "$cfg")
	mkdir "$KV_ROOT/$dir"
	py_config_json "$other" "$KV_ROOT/$dir/config.json"
	cp "$KV_ROOT/$dir/config.json" "$BATS_TEST_TMPDIR/before"
	echo data > "$BATS_TEST_TMPDIR/payload"
	run kvput --root "$KV_ROOT" --config "$cfg" abcdef01 "$BATS_TEST_TMPDIR/payload"
	[ "$status" -eq 3 ] || fail "exit $status: $output"
	cmp "$BATS_TEST_TMPDIR/before" "$KV_ROOT/$dir/config.json"
	[ -z "$(find "$KV_ROOT" -name '*.bin' -o -name '*.tmp')" ]
}

@test "kvget reads python-written blocks byte for byte, and their tails as vLLM does" {
	local mdir rank group hash path size n
	py_tree "$KV_ROOT" "$BATS_TEST_TMPDIR/manifest"
	python3 -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
for r in (recs[0], recs[len(recs) // 2], recs[-1]):
    print(r["model_dir"], r["rank"], r["group"], r["hash"], r["path"], r["size_bytes"])
' "$BATS_TEST_TMPDIR/manifest" > "$BATS_TEST_TMPDIR/picked"
	[ "$(wc -l < "$BATS_TEST_TMPDIR/picked")" -eq 3 ]
	while read -r mdir rank group hash path size; do
		run kvget --root "$KV_ROOT" --model-dir "$mdir" --rank "$rank" \
			--group "$group" -o "$BATS_TEST_TMPDIR/out" "$hash"
		[ "$status" -eq 0 ] || fail "kvget $path: $output"
		cmp "$KV_ROOT/$path" "$BATS_TEST_TMPDIR/out"
		n=$((size / 3))
		[ "$n" -gt 0 ] || continue
		kvget --root "$KV_ROOT" --model-dir "$mdir" --rank "$rank" --group "$group" \
			--blocks 2 --block-bytes "$n" "$hash" > "$BATS_TEST_TMPDIR/tail"
		tail -c $((2 * n)) "$KV_ROOT/$path" | cmp - "$BATS_TEST_TMPDIR/tail"
	done < "$BATS_TEST_TMPDIR/picked"

	# Every block kvls finds, kvget finds.
	kvls --root "$KV_ROOT" --blocks --ndjson > "$BATS_TEST_TMPDIR/listed"
	run --separate-stderr kvget --root "$KV_ROOT" --batch --exists < "$BATS_TEST_TMPDIR/listed"
	[ "$status" -eq 0 ] || fail "kvget --batch: $stderr"
	[ "$(grep -c '"hit":true' <<< "$output")" -eq "$(wc -l < "$BATS_TEST_TMPDIR/manifest")" ]
	[ "$(grep -c '"hit":false' <<< "$output")" -eq 0 ]
}
