#!/usr/bin/env python3
"""A benchmark tree of N 8 KiB blocks in the vLLM/llm-d layout under ROOT,
two models, every block with its own atime spread over SPREAD seconds in
an order unrelated to directory order; the same tree for the same
arguments.  BUCKETS > 0 draws the five-digit bucket prefix from BUCKETS
values (denser dirs).  FILL (0..1, optional) tops the filesystem up to
that use with a filler file.  Prints "atime_ns path" per block.

Usage: evict_tree.py ROOT N SPREAD BUCKETS [FILL]
"""
import json, os, random, sys
root, n, spread, buckets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fill_to = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
rng = random.Random(20261122)
models = ["meta-llama_Llama-3.1-8B_0123456789ab", "Qwen_Qwen3-8B_ba9876543210"]
for m in models:
    os.mkdir(os.path.join(root, m))
    with open(os.path.join(root, m, "config.json"), "w") as f:
        # the model name KV events carry; the fingerprint is not checked
        f.write(json.dumps({
            "model_name": m.rsplit("_", 1)[0].replace("_", "/", 1),
            "hash_block_size": 16, "gpu_blocks_per_file": 16, "tp_size": 1,
            "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "bfloat16",
            "inference_engine": "vllm",
            "kv_cache_groups": [{"block_size": 16, "layer_names": ["l0"]}]}) + "\n")
now = 1_790_000_000 * 10**9
base = now - 30 * 86400 * 10**9
step = spread * 10**9 // n
ages = list(range(n))
rng.shuffle(ages)
payload = bytes(8192)
out = []
for i in range(n):
    h = "%016x" % rng.getrandbits(64)
    if buckets:
        h = "%05x" % (rng.randrange(buckets) * ((1 << 20) // buckets)) + h[5:]
    rank = i % 4
    d = os.path.join(root, "%s_r%d" % (models[rank // 2], rank % 2), h[:3], h[3:5] + "_g0")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, h + ".bin")
    with open(p, "wb") as f:
        f.write(payload)
    t = base + ages[i] * step + rng.randrange(step)
    os.utime(p, ns=(t, t))
    out.append("%d %s" % (t, os.path.relpath(p, root)))
sv = os.statvfs(root)
total = (sv.f_blocks - sv.f_bfree + sv.f_bavail) * sv.f_frsize
used = (sv.f_blocks - sv.f_bfree) * sv.f_frsize
fill = int(total * fill_to) - used
if fill_to and fill > 0:
    with open(os.path.join(root, "filler"), "wb") as f:
        os.posix_fallocate(f.fileno(), 0, fill)
sys.stdout.write("\n".join(out) + "\n")
