"""Drives kvtools.vllm.KvtoolsTier as vLLM does, through the stand-in of
vLLM's tiering framework in vllm_standin/ (NOT vLLM: see its README).

    with Server("main", {"root_dir": path}) as s:
        s.store(keys, blocks)       # complete_store, then steps until done
        s.forget(keys)              # the primary evicts them
        got = s.load(keys)          # lookups each step, promotion, results

Also usable from bats: python3 vllm_harness.py ERA ENTRY_JSON OP N SEED
[DIR], OP one of store, check (load and compare), touch, export (the
blocks as files in DIR, a kvput --batch manifest DIR/manifest and the
run config DIR/config.json, as vLLM's fs tier would write it)."""
import importlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STANDIN = os.path.join(HERE, "vllm_standin")
if os.path.join(REPO, "python") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("KVTOOLS_LIBKV",
                      os.path.join(REPO, os.environ.get("BUILD", "build"), "libkv.so"))
ROW = 16384
STALL_S = 600   # a stall, not a timing: each wait ends as soon as it can


def use_era(era):
    """Import the stand-in of one vLLM form (main or old) and a fresh
    kvtools.vllm over it."""
    for name in list(sys.modules):
        if name == "vllm" or name.startswith("vllm.") or name == "kvtools.vllm":
            del sys.modules[name]
    for e in ("main", "old"):
        p = os.path.join(STANDIN, e)
        if p in sys.path:
            sys.path.remove(p)
    sys.path.insert(0, os.path.join(STANDIN, era))
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    return importlib.import_module("kvtools.vllm")


def make_spec(era, model="org/model-7b", row=ROW):
    if era == "old":
        base = importlib.import_module("vllm.v1.kv_offload.base")
        return base.OffloadingSpec(vllm_config=object(), kv_cache_config=object())
    c = importlib.import_module("vllm.v1.kv_offload.config")
    base = importlib.import_module("vllm.v1.kv_offload.base")
    cfg = c.OffloadingConfig(
        groups=(c.OffloadingGroupConfig(16, ("model.layers.0.attn", "model.layers.1.attn")),
                c.OffloadingGroupConfig(16, ("model.layers.2.attn",))),
        worker_kv_bytes_per_block=row, enable_kv_cache_events=False, extra_config={},
        engine_id="e0", model=c.OffloadingModelConfig(model, "bfloat16"),
        cache=c.OffloadingCacheConfig(16, 1), parallel=c.OffloadingParallelConfig())
    return base.OffloadingSpec(cfg, blocks_per_chunk=1)


def keys_of(n, seed=0, groups=2):
    """n OffloadKeys: a 32-byte block hash and its group."""
    import hashlib
    return [hashlib.sha256(b"%d/%d" % (seed, i)).digest() + (i % groups).to_bytes(4, "big")
            for i in range(n)]


def blocks_of(keys, row=ROW):
    import hashlib
    out = []
    for k in keys:
        seed = hashlib.sha256(k).digest()
        out.append((seed * (row // len(seed) + 1))[:row])
    return out


class Server:
    """One model server's offloading: a primary tier of chunks and the
    tier under test, driven in vLLM's call order."""

    def __init__(self, era, entry, chunks=256, row=ROW, spec=None):
        self.era = era
        self.kvvllm = use_era(era)
        mgr = importlib.import_module("vllm.v1.kv_offload.tiering.manager")
        self.primary = mgr.PrimaryTier(chunks, row)
        self.spec = spec or make_spec(era, row=row)
        base = importlib.import_module("vllm.v1.kv_offload.base")
        self.ReqContext = base.ReqContext
        if era == "main":
            factory = importlib.import_module("vllm.v1.kv_offload.tiering.factory")
            self.tier = factory.SecondaryTierFactory.create_secondary_tier(
                dict({"type": "KvtoolsTier", "module_path": "kvtools.vllm"}, **entry),
                self.primary.view, self.spec)
        else:
            # This era's factory built tiers by registry only; a tier's
            # constructor got the same keywords.
            self.tier = self.kvvllm.KvtoolsTier(offloading_spec=self.spec,
                                                primary_kv_view=self.primary.view,
                                                tier_type="KvtoolsTier", **entry)
        self.mgr = mgr.TieringOffloadingManager(self.primary, [self.tier])
        self.req = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.mgr.shutdown()

    def ctx(self):
        self.req += 1
        return self.ReqContext(req_id="req-%d" % self.req)

    def step(self):
        if self.era == "main":
            self.mgr.on_schedule_end()
        else:
            self.mgr.step_end()

    def wait_jobs(self):
        """Steps until every job has its result."""
        t0 = time.monotonic()
        while self.mgr._jobs:
            assert time.monotonic() - t0 < STALL_S, "jobs stalled: %r" % self.mgr._jobs
            self.step()
            time.sleep(0.0005)
        return self.mgr.results

    def store(self, keys, blocks, wait=True):
        ctx = self.ctx()
        for k, b in zip(keys, blocks):
            self.primary.write(k, b)
        self.mgr.complete_store(keys, ctx)
        if wait:
            self.wait_jobs()

    def forget(self, keys):
        for k in keys:
            self.primary.evict(k)

    def lookup_all(self, keys):
        """Each key's answer once no lookup says RETRY (a step apart)."""
        ctx = self.ctx()
        t0 = time.monotonic()
        hit, miss, retry = self._answers()
        while True:
            answers = [self.mgr.lookup(k, ctx) for k in keys]
            if not any(a is retry for a in answers):
                return answers, ctx
            assert time.monotonic() - t0 < STALL_S, "lookups stalled"
            self.step()
            time.sleep(0.0005)

    def _answers(self):
        if self.era == "main":
            lr = importlib.import_module("vllm.v1.kv_offload.base").LookupResult
            return lr.HIT_PENDING, lr.MISS, lr.RETRY
        return None, False, None

    def load(self, keys):
        """Look the keys up and promote what hits: each key's bytes in the
        primary, or None where it missed or its load failed."""
        answers, _ = self.lookup_all(keys)
        self.step()
        self.wait_jobs()
        out = []
        for k in keys:
            out.append(self.primary.read(k) if k in self.primary.ready else None)
        return out


def export(era, keys, blocks, out):
    use_era(era)
    from vllm.v1.kv_offload.file_mapper import FileMapper
    m = FileMapper.from_offloading_spec("", make_spec(era), blocks_per_file=1,
                                        parallel_agnostic=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(m.get_run_config(), f, indent=2, sort_keys=True)
    with open(os.path.join(out, "manifest"), "w") as man:
        for k, b in zip(keys, blocks):
            h = k[:-4].hex()
            with open(os.path.join(out, h), "wb") as f:
                f.write(b)
            man.write(json.dumps({"hash": h, "group": int.from_bytes(k[-4:], "big"),
                                  "file": os.path.join(out, h)}) + "\n")
    print(m.base_path.lstrip("/"))
    return 0


def main():
    era, entry, op, n, seed = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], \
        int(sys.argv[4]), int(sys.argv[5])
    keys = keys_of(n, seed)
    blocks = blocks_of(keys)
    if op == "export":
        return export(era, keys, blocks, sys.argv[6])
    with Server(era, entry) as s:
        # A fault-injecting proxy's plan armed once the tier is up
        # (tests/s3/faultproxy.py --control).
        if os.environ.get("FAULT_CONTROL"):
            with open(os.environ["FAULT_CONTROL"], "w") as f:
                f.write(os.environ.get("FAULT_PLAN", "") + "\n")
        if op == "store":
            s.store(keys, blocks)
            bad = [r for _, _, r in s.mgr.results if not r.success]
            print("stored %d, %d jobs failed" % (n, len(bad)))
            return 1 if bad else 0
        if op == "check":
            got = s.load(keys)
            ok = sum(g == b for g, b in zip(got, blocks))
            print("loaded %d of %d, %d missed" % (ok, n, got.count(None)))
            return 0 if ok == n else 1
        if op == "touch":
            s.mgr.touch(keys, s.ctx())
            s.step()
            s.tier.drain_jobs()
            return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
