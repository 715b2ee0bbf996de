"""bench/vllm-tier.sh's driver: kvtools.vllm.KvtoolsTier, driven through
the STAND-IN of vLLM's tiering framework (tests/python/vllm_standin; vLLM
cannot be installed here), timed as vLLM would feel it.

    vllm_tier.py io ENTRY_JSON BLOCK_BYTES COUNT JOB_BLOCKS
        store then load COUNT blocks in jobs of JOB_BLOCKS, every job
        submitted before the first result is polled (vLLM's stores of a
        step arrive at once); prints "store GBPS load GBPS", wall clock
        from the first submit to the last result
    vllm_tier.py calls ENTRY_JSON
        the scheduler thread's cost per call: lookup (a step of 1,000
        keys answered from the step before's batch, and the first
        asking), submit_store / submit_load (16 blocks of 16 KiB) and
        get_finished_jobs; prints "NAME US" lines
    vllm_tier.py memcpy BLOCK_BYTES COUNT
        one thread copying the same bytes (numpy), GB/s
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
from vllm_harness import Server, keys_of, use_era  # noqa: E402


def fill(s, keys, row):
    """Each key's chunk in the primary: its own bytes, cheaply made."""
    import numpy as np
    for i, k in enumerate(keys):
        c = s.primary.prepare_write(k)
        s.primary.array[c] = i % 251 - 125
        s.primary.array[c, :8] = np.frombuffer(k[:8], dtype=np.int8)
        s.primary.complete_write([k], True)


def run_jobs(s, jobs, submit):
    """Submit every job, then poll until all are back: (seconds, failed)."""
    t0 = time.perf_counter()
    for j in jobs:
        submit(j)
    left = {j.job_id for j in jobs}
    failed = 0
    while left:
        for r in s.tier.get_finished_jobs():
            left.discard(r.job_id)
            failed += not r.success
        if left:
            time.sleep(0.0002)
    return time.perf_counter() - t0, failed


def io(entry, row, count, per_job):
    use_era("main")
    from vllm.v1.kv_offload.tiering.base import TransferJob
    import numpy as np
    keys = keys_of(count, seed=int(time.time()))
    with Server("main", entry, chunks=count, row=row) as s:
        fill(s, keys, row)
        chunks = [s.primary.chunk[k] for k in keys]
        ctx = s.ctx()

        def jobs(promotion):
            out = []
            for at in range(0, count, per_job):
                out.append(TransferJob(job_id=s.mgr._job_id(), keys=keys[at:at + per_job],
                                       chunk_ids=np.array(chunks[at:at + per_job]),
                                       is_promotion=promotion, req_context=ctx))
            return out
        ws, wf = run_jobs(s, jobs(False), s.tier.submit_store)
        s.primary.array[:] = 0
        if os.environ.get("DROP_CACHES"):
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        rs, rf = run_jobs(s, jobs(True), s.tier.submit_load)
        if wf or rf:
            sys.exit("vllm_tier.py: %d store and %d load jobs failed" % (wf, rf))
    total = row * count
    print("store %.3f load %.3f" % (total / ws / 1e9, total / rs / 1e9))


def calls(entry):
    use_era("main")
    from vllm.v1.kv_offload.tiering.base import TransferJob
    import numpy as np
    row = 16384
    with Server("main", entry, chunks=2048, row=row) as s:
        tier, ctx = s.tier, s.ctx()
        keys = keys_of(1000, seed=int(time.time()))
        t0 = time.perf_counter()
        for k in keys:
            tier.lookup(k, ctx)
        tier.on_schedule_end(None)
        first = (time.perf_counter() - t0) / len(keys)
        tier.drain_jobs()
        tier.get_finished_jobs()
        best = None
        for _ in range(5):
            t0 = time.perf_counter()
            for k in keys:
                tier.lookup(k, ctx)
            t = (time.perf_counter() - t0) / len(keys)
            best = t if best is None else min(best, t)
        stored = keys_of(16 * 64, seed=7)
        fill(s, stored, row)
        subs = []
        for op in (tier.submit_store, tier.submit_load):
            t0 = time.perf_counter()
            for at in range(0, len(stored), 16):
                ks = stored[at:at + 16]
                op(TransferJob(job_id=s.mgr._job_id(), keys=ks,
                               chunk_ids=np.array([s.primary.chunk[k] for k in ks]),
                               is_promotion=op == tier.submit_load, req_context=ctx))
            subs.append((time.perf_counter() - t0) / 64)
            tier.drain_jobs()
        polls = 0
        t0 = time.perf_counter()
        for _ in range(1000):
            polls += len(tier.get_finished_jobs())
        poll = (time.perf_counter() - t0) / 1000
    print("lookup_us %.2f" % (best * 1e6))
    print("lookup_first_us %.2f" % (first * 1e6))
    print("submit_store_us %.1f" % (subs[0] * 1e6))
    print("submit_load_us %.1f" % (subs[1] * 1e6))
    print("get_finished_us %.2f" % (poll * 1e6))


def memcpy(row, count):
    import numpy as np
    src = np.random.default_rng(2).integers(-128, 127, (count, row), dtype=np.int8)
    dst = np.zeros_like(src)
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(count):
            dst[i] = src[i]
        t = time.perf_counter() - t0
        best = t if best is None else min(best, t)
    print("memcpy %.3f" % (row * count / best / 1e9))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "io":
        io(json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif what == "calls":
        calls(json.loads(sys.argv[2]))
    elif what == "memcpy":
        memcpy(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(__doc__)
