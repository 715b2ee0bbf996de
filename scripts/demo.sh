#!/usr/bin/env bash
# The toolkit's main job on a local directory, end to end: register a
# model's layout, put blocks, list them, get one back, verify, evict.
# Usage: scripts/demo.sh [DIR]   (default: a fresh temp dir)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$here/${BUILD:-build}/bin
[ -x "$bin/kvput" ] || make -C "$here" -j"$(nproc)" >/dev/null
PATH=$bin:$PATH
root=${1:-$(mktemp -d /tmp/kvdemo.XXXXXX)}
mkdir -p "$root"
export KV_ROOT=$root
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Commands in bold on a terminal; plain text into a pipe or a file.
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold= plain=; fi
step() { printf '\n%s$ %s%s\n' "$bold" "$*" "$plain"; "$@"; }

cat > "$work/config.json" <<'JSON'
{"model_name": "meta-llama/Llama-3.1-8B", "hash_block_size": 16,
 "gpu_blocks_per_file": 16, "tp_size": 1, "pp_size": 1, "pcp_size": 1,
 "dcp_size": 1, "dtype": "bfloat16", "inference_engine": "vllm",
 "kv_cache_groups": [{"block_size": 16, "layer_names": ["model.layers.0.self_attn.attn"]}]}
JSON

echo "cache root: $root"
# Eight 2 MiB blocks with random payloads: one GPU block of 16 tokens of
# Llama-3.1-8B in bf16 (128 KiB per token); a file holding all 16 GPU
# blocks of this config would be 32 MiB.
for i in 1 2 3 4 5 6 7 8; do
	hash=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
	head -c 2M /dev/urandom > "$work/$hash"
	printf '{"hash":"%s","file":"%s"}\n' "$hash" "$work/$hash"
done > "$work/manifest.ndjson"
first=$(head -1 "$work/manifest.ndjson" | jq -r .hash)

step kvput --config "$work/config.json" --batch < "$work/manifest.ndjson"
step kvls
step kvls --blocks
model_dir=$(kvls -J | jq -r '.models[0].model_dir')
step kvget --model-dir "$model_dir" "$first" -o "$work/back.bin"
step cmp "$work/$first" "$work/back.bin"
echo "block $first came back byte-identical"
step kvls --verify
step kvevict --max-bytes 8M --low-bytes 6M --hot 0 --dry-run
echo
echo "done: the cache is in $root (remove it with: rm -rf $root)"
