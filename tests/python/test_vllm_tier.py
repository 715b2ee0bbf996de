"""kvtools.vllm.KvtoolsTier driven as vLLM drives a secondary tier, through
a STAND-IN of vLLM's tiering framework (vllm_standin/, written from
upstream's source; vLLM itself cannot be installed here)."""
import ctypes
import errno
import json
import os
import subprocess

import pytest

from conftest import BUILD
from vllm_harness import ROW, Server, blocks_of, keys_of, make_spec, use_era

KVLS = os.path.join(BUILD, "bin", "kvls")
KVGET = os.path.join(BUILD, "bin", "kvget")


def fs_path(root, key, era="main"):
    """Where vLLM's own fs tier puts key: the stand-in's FileMapper."""
    use_era(era)
    from vllm.v1.kv_offload.file_mapper import FileMapper
    m = FileMapper.from_offloading_spec(str(root), make_spec(era), blocks_per_file=1,
                                        parallel_agnostic=True)
    return m, m.get_file_name(key)


def results(s):
    return [r for _, _, r in s.mgr.results]


def test_store_then_load_bytes_identical(tmp_path):
    keys = keys_of(40)
    blocks = blocks_of(keys)
    with Server("main", {"root_dir": str(tmp_path)}) as s:
        s.store(keys, blocks)
        assert all(r.success for r in results(s))
        s.forget(keys)
        assert s.load(keys) == blocks
        st = s.tier.stats()
        assert st["store_blocks"] == 40 and st["load_blocks"] == 40
        assert st["store_bytes"] == 40 * ROW and st["load_bytes"] == 40 * ROW
        loads = [r for _, j, r in s.mgr.results if j.is_promotion]
        assert loads and all(r.transfer_time is not None and r.transfer_time >= 0 for r in loads)


def test_the_tree_is_vllm_fs_tiers_own(tmp_path):
    """The same dirs, config.json and files vLLM's fs tier writes, byte for
    byte, and a checksum in an xattr beside each."""
    keys = keys_of(6)
    blocks = blocks_of(keys)
    with Server("main", {"root_dir": str(tmp_path)}) as s:
        s.store(keys, blocks)
    m, _ = fs_path(tmp_path, keys[0])
    with open(m.get_config_file_path(), "rb") as f:
        assert f.read() == json.dumps(m.get_run_config(), indent=2, sort_keys=True).encode()
    for k, b in zip(keys, blocks):
        path = m.get_file_name(k)
        with open(path, "rb") as f:
            assert f.read() == b
        assert len(os.getxattr(path, "user.kv.xxh3")) == 16
    files = sorted(os.path.relpath(os.path.join(d, f), tmp_path)
                   for d, _, fs in os.walk(tmp_path) for f in fs)
    want = sorted([os.path.relpath(m.get_config_file_path(), tmp_path)] +
                  [os.path.relpath(m.get_file_name(k), tmp_path) for k in keys])
    assert files == want


def test_model_dir_without_vllms_file_mapper(tmp_path):
    """Where vLLM has no FileMapper to import, the same name by the same
    rule."""
    kvvllm = use_era("main")
    spec = make_spec("main")
    want = kvvllm.model_dir_of(spec)
    kvvllm._FileMapper = None
    assert kvvllm.model_dir_of(spec) == want


def test_a_tree_vllms_fs_tier_wrote_is_found(tmp_path):
    keys = keys_of(8, seed=3)
    blocks = blocks_of(keys)
    for k, b in zip(keys, blocks):
        _, path = fs_path(tmp_path, k)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b)
    with Server("main", {"root_dir": str(tmp_path)}) as s:
        assert s.load(keys) == blocks


def test_lookup_retries_while_a_store_is_in_flight(tmp_path):
    keys = keys_of(4)
    with Server("main", {"root_dir": str(tmp_path)}) as s:
        from vllm.v1.kv_offload.base import LookupResult
        s.store(keys, blocks_of(keys), wait=False)
        # Stored in the primary: ask the tier itself, as a second
        # request would after the primary evicted them.
        assert all(s.tier.lookup(k, s.ctx()) == LookupResult.RETRY for k in keys)
        s.wait_jobs()
        s.forget(keys)
        answers, _ = s.lookup_all(keys)
        assert all(a == LookupResult.HIT_PENDING for a in answers)


def test_misses_cost_one_batch_per_step(tmp_path):
    keys = keys_of(1000, seed=9)
    with Server("main", {"root_dir": str(tmp_path)}) as s:
        from vllm.v1.kv_offload.base import LookupResult
        ctx = s.ctx()
        assert all(s.tier.lookup(k, ctx) == LookupResult.RETRY for k in keys)
        assert s.tier.has_pending_work()
        s.step()
        s.tier.drain_jobs()
        s.tier.get_finished_jobs()
        assert all(s.tier.lookup(k, ctx) == LookupResult.MISS for k in keys)


def corrupt(path, how):
    if how == "flip":
        with open(path, "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0xFF]))
    elif how == "short":
        os.truncate(path, ROW - 4096)
    else:
        with open(path, "ab") as f:
            f.write(b"x" * 4096)


@pytest.mark.parametrize("how", ["flip", "short", "long"])
def test_a_bad_block_fails_its_load_and_goes(tmp_path, how):
    keys = keys_of(3, seed=5)
    blocks = blocks_of(keys)
    with Server("main", {"root_dir": str(tmp_path)}) as s:
        s.store(keys, blocks)
        _, bad = fs_path(tmp_path, keys[1])
        corrupt(bad, how)
        s.forget(keys)
        s.mgr.results.clear()
        got = s.load(keys)
        assert got[0] == blocks[0] and got[2] == blocks[2] and got[1] is None
        (r,) = results(s)
        assert not r.success and set(r.successful_keys) == {keys[0], keys[2]}
        assert not os.path.exists(bad)
        assert s.tier.stats()["removed_bad"] == 1


def test_bad_bytes_never_stay_in_the_primary(tmp_path):
    keys = keys_of(1, seed=6)
    with Server("main", {"root_dir": str(tmp_path)}) as s:
        s.store(keys, blocks_of(keys))
        _, bad = fs_path(tmp_path, keys[0])
        corrupt(bad, "flip")
        s.forget(keys)
        answers, _ = s.lookup_all(keys)
        chunk = s.primary.chunk[keys[0]]
        s.step()
        s.wait_jobs()
        assert keys[0] not in s.primary.ready
        assert not s.primary.array[chunk].any()


def test_touch_and_loads_record_use(tmp_path):
    keys = keys_of(2, seed=7)
    with Server("main", {"root_dir": str(tmp_path), "resolution_s": 0}) as s:
        s.store(keys, blocks_of(keys))
        paths = [fs_path(tmp_path, k)[1] for k in keys]
        for p in paths:
            os.utime(p, (1_000_000_000, 1_000_000_000))
        s.mgr.touch(keys[:1], s.ctx())
        s.tier.drain_jobs()
        assert os.stat(paths[0]).st_atime > 1_500_000_000
        assert os.stat(paths[1]).st_atime < 1_500_000_000
        assert os.stat(paths[0]).st_mtime == 1_000_000_000
        s.forget(keys)
        s.load(keys[1:])
        assert os.stat(paths[1]).st_atime > 1_500_000_000


def test_a_thousand_jobs_in_flight(tmp_path):
    keys = keys_of(1000, seed=8)
    blocks = blocks_of(keys)
    with Server("main", {"root_dir": str(tmp_path)}, chunks=1000) as s:
        ctx = s.ctx()
        for k, b in zip(keys, blocks):
            s.primary.write(k, b)
            s.mgr.complete_store([k], ctx)
        assert len(s.mgr._jobs) == 1000
        s.wait_jobs()
        assert len(results(s)) == 1000 and all(r.success for r in results(s))
        s.forget(keys)
        assert s.load(keys) == blocks


def test_the_old_interface(tmp_path):
    """JobMetadata(block_ids), lookup -> True/False/None, get_finished(),
    JobResult(job_id, success), a spec without OffloadingConfig."""
    keys = keys_of(5, seed=11)
    blocks = blocks_of(keys)
    entry = {"root_dir": str(tmp_path), "model_dir": "org_model_0123456789ab"}
    with Server("old", entry) as s:
        s.store(keys, blocks)
        assert all(r.success for r in results(s))
        assert not hasattr(results(s)[0], "successful_keys")
        s.forget(keys)
        assert s.tier.lookup(keys_of(1, seed=99)[0], s.ctx()) is None
        assert s.load(keys) == blocks
    assert os.path.isdir(tmp_path / "org_model_0123456789ab_r0")


def test_unknown_keys_and_missing_root_are_refused(tmp_path):
    with pytest.raises(TypeError, match="unknown keys"):
        Server("main", {"root_dir": str(tmp_path), "rootdir": "x"})
    os.environ.pop("KV_DAEMON", None)
    with pytest.raises(ValueError, match="root_dir"):
        Server("main", {})


def test_the_tree_passes_kvls_check_and_kvget_reads_it(tmp_path):
    keys = keys_of(4, seed=12)
    blocks = blocks_of(keys)
    with Server("main", {"root_dir": str(tmp_path)}) as s:
        s.store(keys, blocks)
        model_dir = s.tier.model_dir
    out = subprocess.run([KVLS, "--root", str(tmp_path), "--check"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    h = keys[1][:-4].hex()
    got = subprocess.run([KVGET, "--root", str(tmp_path), "--model-dir", model_dir,
                          "--group", "1", h], capture_output=True)
    assert got.returncode == 0, got.stderr
    assert got.stdout == blocks[1]


def test_two_model_servers_share_one_kvoffd(daemon):
    keys = keys_of(32, seed=13)
    blocks = blocks_of(keys)
    entry = {"daemon": daemon.sock}
    with Server("main", entry) as a:
        a.store(keys, blocks)
        assert all(r.success for r in results(a))
        with Server("main", entry) as b:
            assert b.load(keys) == blocks
            assert b.load(keys_of(2, seed=14)) == [None, None]


def test_enospc_fails_the_store_and_lookups_miss(tmp_path):
    if os.geteuid():
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        keys = keys_of(40, seed=15)
        with Server("main", {"root_dir": str(mnt)}) as s:
            s.store(keys, blocks_of(keys))
            (r,) = results(s)
            assert not r.success
            s.forget(keys)
            got = s.load(keys)
            assert None in got
            assert s.tier.stats()["store_failures"] == 1
    finally:
        subprocess.run(["umount", str(mnt)])


def test_events_through_libkvs_publisher_with_locality(tmp_path):
    zmq = pytest.importorskip("zmq")
    msgpack = pytest.importorskip("msgpack")
    endpoint = "ipc://%s/ev" % tmp_path
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, 600000)    # a stall, not a timing
    keys = keys_of(3, seed=16)
    entry = {"root_dir": str(tmp_path / "root"), "enable_kv_events": True,
             "events_endpoint": endpoint, "locality": "LOCAL"}
    os.mkdir(tmp_path / "root")
    with Server("main", entry) as s:
        sub.connect(endpoint)
        s.store(keys, blocks_of(keys))
        topic, seq, payload = sub.recv_multipart()
        # vLLM's own events for the same stores, for its publisher.
        (ev,) = s.mgr.take_events()
        assert ev.keys == keys and not ev.removed and ev.medium.value == "STORAGE"
        assert ev.locality.value == "LOCAL"
    assert topic == b"kv@STORAGE@org/model-7b"
    ts, events = msgpack.unpackb(payload)
    hashes = [h for e in events for h in e["block_hashes"]]
    assert sorted(hashes) == sorted(int.from_bytes(k[-12:-4], "big") for k in keys)
    e = events[0]
    assert e["type"] == "BlockStored" and e["medium"] == "STORAGE" and e["locality"] == "LOCAL"
    assert e["block_size"] == 16
    sub.close()
    ctx.term()


def test_metrics_file(tmp_path):
    keys = keys_of(2, seed=17)
    metrics = tmp_path / "kv.prom"
    os.mkdir(tmp_path / "root")
    with Server("main", {"root_dir": str(tmp_path / "root"),
                         "metrics_file": str(metrics)}) as s:
        s.store(keys, blocks_of(keys))
    text = metrics.read_text()
    assert 'kvtools_vllm_store_blocks_total{tier="KvtoolsTier"} 2' in text
    assert "# TYPE kvtools_vllm_used_bytes gauge" in text


def test_a_kvoffd_restart_fails_jobs_meanwhile_then_serves_again(daemon):
    before, during, after = keys_of(8, seed=18), keys_of(8, seed=19), keys_of(8, seed=20)
    with Server("main", {"daemon": daemon.sock}, chunks=64) as s:
        s.store(before, blocks_of(before))
        daemon.stop()   # writes its RAM tier behind, to its root
        s.mgr.results.clear()
        s.store(during, blocks_of(during))
        (r,) = results(s)
        assert not r.success
        daemon.start()
        s.mgr.results.clear()
        s.store(after, blocks_of(after))
        assert all(r.success for r in results(s))
        s.forget(before + after)
        s.tier._known.clear()
        assert s.load(before + after) == blocks_of(before) + blocks_of(after)


def test_get_stats_in_vllms_own_container(tmp_path):
    keys = keys_of(3, seed=21)
    with Server("main", {"root_dir": str(tmp_path)}) as s:
        defs = type(s.tier).build_metric_definitions({})
        assert "kvtools_store_blocks" in defs and defs["kvtools_load_failures"].documentation
        s.store(keys, blocks_of(keys))
        st = s.tier.get_stats()
        assert st.data["data"]["kvtools_store_blocks"][()] == 3
        assert st.data["types"]["kvtools_store_bytes"] == "counter"
        assert s.tier.get_stats() is None     # nothing new since


def test_metrics_file_at_a_device_stays_a_device(tmp_path):
    if os.geteuid():
        pytest.skip("mknod needs root")
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
    os.mkdir(tmp_path / "root")
    keys = keys_of(1, seed=22)
    with Server("main", {"root_dir": str(tmp_path / "root"), "metrics_file": str(dev)}) as s:
        s.store(keys, blocks_of(keys))
    import stat
    assert stat.S_ISCHR(os.stat(dev).st_mode)


def test_through_kvoffd_the_model_dir_is_whole_on_its_file_tier(daemon):
    keys = keys_of(6, seed=23)
    with Server("main", {"daemon": daemon.sock}) as s:
        s.store(keys, blocks_of(keys))
        model_dir = s.tier.model_dir
    daemon.stop()       # writes its RAM tier behind
    assert os.path.exists(os.path.join(daemon.root, model_dir, "config.json"))
    out = subprocess.run([KVLS, "--root", daemon.root, "--check"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
