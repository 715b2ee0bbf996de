#!/usr/bin/python3
"""The Python half of bench/offd-batch.sh: the kvtools package doing what
bench/offd_client.c's has and batch modes do, printing the same JSON.

    offd_py.py has SOCK MODEL_DIR CLIENT KEYS ITERS
    offd_py.py batch SOCK MODEL_DIR CLIENT BLOCKS ITERS BYTES [list|rows]
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import numpy as np  # noqa: E402

import kvtools  # noqa: E402

# The C client's buffers are malloc's, ordinary 4 KiB pages; numpy asks
# for transparent huge pages on arrays of 4 MiB and more.  The sides are
# compared on the same pages unless KV_BENCH_THP=1 keeps numpy's default:
# on the VM of bench/RESULTS.md, copies between a huge-page buffer and
# the pool ran at a third of the speed (the section "Python beside C").
if os.environ.get("KV_BENCH_THP") != "1":
    _core = getattr(np, "_core", None) or np.core
    _core.multiarray._set_madvise_hugepage(False)


def page_aligned(a):
    """A copy of a in page-aligned memory, as offd_client's buffers are
    (a connector's pinned staging buffers are): numpy's own start 16
    bytes past a 64-byte line, and such copies into kvoffd's page-aligned
    pool run at half the speed on some CPUs (bench/RESULTS.md)."""
    raw = np.empty(a.nbytes + 4096, dtype=np.uint8)
    at = -raw.ctypes.data % 4096
    out = raw[at:at + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def hashes(client, n):
    return ["%08x%08x" % (client + 1, i) for i in range(n)]


def has(sock, model_dir, client, keys, iters):
    hs = hashes(client, int(keys))
    with kvtools.connect(sock) as c:
        c.put_many(model_dir, hs, [bytes(4096)] * len(hs))
        t0 = time.perf_counter_ns()
        found = 0
        for _ in range(int(iters)):
            found += c.has_many(model_dir, hs).count(kvtools.IN_RAM)
        ns = time.perf_counter_ns() - t0
    if found != len(hs) * int(iters):
        sys.exit("offd_py: %d of %d checks found the block in RAM" % (found, len(hs) * int(iters)))
    print(json.dumps({"checks": len(hs) * int(iters), "ns": ns}))


def batch(sock, model_dir, client, blocks, iters, nbytes, shape="list"):
    """shape "list": a list of one array per block; "rows": one 2-D array,
    a block per row, as a connector's staging buffer holds them."""
    blocks, iters, nbytes = int(blocks), int(iters), int(nbytes)
    hs = hashes(client, blocks)
    rng = np.random.default_rng(client)
    src = page_aligned(rng.integers(0, 256, (blocks, nbytes), dtype=np.uint8))
    dst = page_aligned(np.zeros((blocks, nbytes), dtype=np.uint8))
    if shape == "list":
        src, dst = list(src), list(dst)
    with kvtools.connect(sock) as c:
        # Round 0 is a warm-up, as in the C client.
        for it in range(iters + 1):
            if it == 1:
                t0 = time.perf_counter_ns()
            c.put_many(model_dir, hs, src)
            c.get_many(model_dir, hs, outs=dst)
        ns = time.perf_counter_ns() - t0
    if any(not np.array_equal(a, b) for a, b in zip(src, dst)):
        sys.exit("offd_py: a block read back differs")
    print(json.dumps({"bytes": 2 * iters * blocks * nbytes, "ns": ns}))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "has" and len(args) == 5:
        has(args[0], args[1], int(args[2]), *args[3:])
    elif cmd == "batch" and len(args) in (6, 7):
        batch(args[0], args[1], int(args[2]), *args[3:])
    else:
        sys.exit(__doc__)
