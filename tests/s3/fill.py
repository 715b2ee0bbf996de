#!/usr/bin/python3
"""Fill an S3 bucket as vLLM's obj tier does.

Keys are root_dir + "/" + <safe_model>_<d12>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin
where root_dir is PREFIX + "/" (empty without a prefix): so
"PREFIX//model_0123456789ab_r0/abc/de_g0/<hash>.bin" with a prefix and
"/model_..." without one.  --single-slash writes "PREFIX/model_..." (and
"model_..." without a prefix), the form a client library may send.

The endpoint and the keys come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY and AWS_REGION (tests/s3/s3server.sh writes them).
An object's body is SHAKE-256 of "SEED\\0KEY", SIZE bytes long, so a test
can recompute it: --emit-body KEY writes it to stdout and exits.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import sys


def safe_model(name):
    # kv_layout_safe_model: '/' becomes '_'
    return name.replace("/", "_")


def fingerprint(model, tp):
    # tests/bats/test_helper.bash py_fingerprint over make_config's JSON:
    # the 12 hex digits vLLM / llm-d would name the model directory with
    cfg = {"model_name": model, "hash_block_size": 16, "gpu_blocks_per_file": 16,
           "tp_size": tp, "pp_size": 1, "pcp_size": 1, "dcp_size": 1,
           "dtype": "bfloat16",
           "kv_cache_groups": [{"block_size": 16, "layer_names": [
               "model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]}],
           "inference_engine": "vllm"}
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()[:12]


def block_hash(seed, model, rank, group, i, hex_len):
    h = hashlib.sha256(f"{seed}\0{model}\0{rank}\0{group}\0{i}".encode()).hexdigest()
    return h[:hex_len]


def body(seed, key, size):
    return hashlib.shake_256(f"{seed}\0{key}".encode()).digest(size)


def keys(args):
    root_dir = args.prefix + "/" if args.prefix else ""
    sep = "" if args.single_slash else "/"
    for model in args.model_names:
        d = f"{safe_model(model)}_{args.fingerprint or fingerprint(model, args.ranks)}"
        for rank in range(args.ranks):
            for group in range(args.groups):
                for i in range(args.blocks):
                    h = block_hash(args.seed, model, rank, group, i, args.hex_len)
                    yield (f"{root_dir}{sep}{d}_r{rank}/{h[:3]}/{h[3:5]}_g{group}/{h}.bin")


def client(threads):
    import boto3
    from botocore.config import Config
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        sys.exit("fill.py: AWS_ENDPOINT_URL is not set (source DIR/env of s3server.sh)")
    cfg = Config(s3={"addressing_style": "path"},
                 max_pool_connections=max(10, threads),
                 retries={"max_attempts": 10, "mode": "standard"})
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint,
        region_name=os.environ.get("AWS_REGION", "us-east-1"), config=cfg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bucket")
    ap.add_argument("--prefix", default="")
    ap.add_argument("--models", default="1",
                    help="a count N (models kvtest/model-0..N-1) or comma-separated names")
    ap.add_argument("--fingerprint", help="12 lowercase hex digits for every model "
                    "(default: as vLLM would compute from a config)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--groups", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=4, help="blocks per model, rank and group")
    ap.add_argument("--size", type=int, default=4096, help="bytes per object")
    ap.add_argument("--hex-len", type=int, default=16, choices=(16, 32, 64))
    ap.add_argument("--single-slash", action="store_true")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--create-bucket", action="store_true")
    ap.add_argument("--print", action="store_true", help="print 'KEY SIZE' per object")
    ap.add_argument("--dry-run", action="store_true", help="print the keys, upload nothing")
    ap.add_argument("--emit-body", metavar="KEY",
                    help="write KEY's body (--seed, --size) to stdout and exit")
    args = ap.parse_args()

    if args.emit_body is not None:
        sys.stdout.buffer.write(body(args.seed, args.emit_body, args.size))
        return 0
    if args.models.isdigit():
        args.model_names = [f"kvtest/model-{i}" for i in range(int(args.models))]
    else:
        args.model_names = [m for m in args.models.split(",") if m]
    if args.fingerprint and (len(args.fingerprint) != 12 or
                             any(c not in "0123456789abcdef" for c in args.fingerprint)):
        ap.error("--fingerprint takes 12 lowercase hex digits")
    ks = list(keys(args))
    if args.dry_run:
        for k in ks:
            print(f"{k} {args.size}")
        return 0
    if not args.bucket:
        ap.error("--bucket is required")
    s3 = client(args.threads)
    if args.create_bucket:
        try:
            s3.create_bucket(Bucket=args.bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass

    def put(k):
        s3.put_object(Bucket=args.bucket, Key=k, Body=body(args.seed, k, args.size))
        return k

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.threads)) as ex:
        for _ in ex.map(put, ks):
            pass
    if args.print:
        out = sys.stdout
        for k in ks:
            out.write(f"{k} {args.size}\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
