"""The kvtools package against a live kvoffd: batches, zero copy, errors,
read-through, size classes."""
import errno
import os
import subprocess
import sys

import numpy as np
import pytest

import kvtools
from conftest import MODEL_DIR, REPO


def hashes(n, tag=0):
    return ["%08x%08x" % (tag, i) for i in range(n)]


def block(i, size):
    return np.random.default_rng(i).integers(0, 256, size, dtype=np.uint8).tobytes()


def test_one_key_round_trip(client):
    assert client.has(MODEL_DIR, "abcdef01") == 0
    assert client.get(MODEL_DIR, "abcdef01") is None
    client.put(MODEL_DIR, "abcdef01", b"hello")
    assert client.has(MODEL_DIR, "abcdef01") == kvtools.IN_RAM
    assert client.get(MODEL_DIR, "ABCDEF01") == b"hello"
    assert client.get(MODEL_DIR, "abcdef01", rank=1) is None


def test_has_many_tells_present_from_absent(client):
    hs = hashes(3000)
    present = set(range(0, 3000, 7))
    client.put_many(MODEL_DIR, [hs[i] for i in sorted(present)],
                    [b"x" * 100] * len(present))
    where = client.has_many(MODEL_DIR, hs)
    assert [i for i, w in enumerate(where) if w] == sorted(present)
    assert all(w == kvtools.IN_RAM for w in where if w)


def test_more_keys_than_one_batch_takes(daemon_with):
    d = daemon_with("--cpu-bytes", "128M", "--slot-bytes", "16K")
    hs = hashes(kvtools.BATCH_MAX + 5)
    with kvtools.connect(d.sock) as c:
        c.put_many(MODEL_DIR, hs, [b"%d" % i for i in range(len(hs))])
        assert c.has_many(MODEL_DIR, hs) == [kvtools.IN_RAM] * len(hs)
        assert c.get_many(MODEL_DIR, hs) == [b"%d" % i for i in range(len(hs))]


def test_hashes_of_mixed_lengths(client):
    hs = ["abcdef01", "0123456789abcdef0123456789abcdef", "abcdef02"]
    client.put_many(MODEL_DIR, hs, [b"a", b"b", b"c"])
    assert client.get_many(MODEL_DIR, hs) == [b"a", b"b", b"c"]


def test_a_2d_array_is_a_block_per_row_both_ways(client):
    hs = hashes(300, 2)
    rows = np.random.default_rng(7).integers(0, 256, (300, 4096), dtype=np.uint8)
    client.put_many(MODEL_DIR, hs, rows)
    assert client.get_many(MODEL_DIR, hs[:2]) == [rows[0].tobytes(), rows[1].tobytes()]
    out = np.zeros((301, 4096), dtype=np.uint8)[1:]    # rows of a bigger array
    got = client.get_many(MODEL_DIR, hs[:150] + ["ffff000000000001"] + hs[151:], outs=out)
    assert got[150] is None
    assert all(bytes(got[i]) == rows[i].tobytes() for i in range(300) if i != 150)
    assert np.array_equal(out[:150], rows[:150]) and not out[150].any()
    # A block shorter than its row: the view is the block's length.
    client.put_many(MODEL_DIR, ["abab0001"], [b"short"])
    assert bytes(client.get_many(MODEL_DIR, ["abab0001"], outs=out[:1])[0]) == b"short"
    # Not C-contiguous (every other column): rows that are not one
    # buffer each are refused, as any such block is.
    with pytest.raises(ValueError):
        client.put_many(MODEL_DIR, hs[:3], rows[:3, ::2])
    ro = rows[:2].copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        client.get_many(MODEL_DIR, hs[:2], outs=ro)
    client.put_many(MODEL_DIR, hs[:2], ro)      # read-only rows are fine to put


def test_put_many_get_many_of_every_size_class(client):
    sizes = [16384, 524288, 2 << 20, 8 << 20, 1000, 300000]
    hs = hashes(len(sizes), 1)
    blocks = [block(i, s) for i, s in enumerate(sizes)]
    client.put_many(MODEL_DIR, hs, blocks)
    assert client.get_many(MODEL_DIR, hs) == blocks
    outs = [bytearray(s) for s in sizes]
    views = client.get_many(MODEL_DIR, hs + ["ffffffff"], outs=outs + [bytearray(1)])
    assert views[-1] is None
    assert [bytes(v) for v in views[:-1]] == blocks


@pytest.fixture(params=["module", "ctypes"])
def exports(request, monkeypatch):
    """Each list test twice: through kvtools._exports, the C module the
    build tree has, and through ctypes, as where it could not be built."""
    if request.param == "ctypes":
        monkeypatch.setattr(kvtools, "_exports", None)
    return request.param


def test_the_build_trees_exports_module_is_loaded():
    from conftest import BUILD
    assert kvtools._exports is not None, \
        "make did not build it: its python3 is older than 3.11 or lacks Python.h (python3-dev)"
    assert kvtools._exports.__file__ == os.path.join(BUILD, "python", "kvtools",
                                                     "_exports.abi3.so")


def test_an_export_holds_its_buffers_until_it_is_freed():
    a, b = bytearray(b"abc"), bytearray(16384)
    holder, addrs, lens = kvtools._exports.exports([a, b], True)
    assert addrs and lens
    # Held: Python refuses to resize a buffer that is exported.
    with pytest.raises(BufferError):
        a.extend(b"more")
    del holder
    a.extend(b"more")
    b.extend(b"more")
    assert a == b"abcmore"


def test_exports_refuse_what_is_not_a_buffer_of_the_kind_asked():
    with pytest.raises(BufferError):
        kvtools._exports.exports([bytearray(4), b"read-only"], True)
    with pytest.raises(TypeError):
        kvtools._exports.exports([bytearray(4), 7], False)
    with pytest.raises((ValueError, BufferError)):
        kvtools._exports.exports([np.zeros((4, 4), np.uint8)[:, 1]], False)
    # Nothing stays exported after a refusal half way.
    a = bytearray(4)
    with pytest.raises(BufferError):
        kvtools._exports.exports([a, b"read-only"], True)
    a.extend(b"x")


def test_lists_of_buffers_and_hashes_of_every_kind(client, exports):
    # bytearrays and numpy rows take the one-export-per-list path; a list
    # holding bytes, an empty or a read-only buffer goes one by one
    # without the C module (with it, one export each, read-only too).
    arrays = [bytearray(block(i, 3000 + i)) for i in range(5)]
    rows = list(np.arange(5 * 64, dtype=np.uint8).reshape(5, 64).copy())
    mixed = [b"bytes", bytearray(b"ba"), memoryview(b"read-only"), b"", np.ones(7, np.uint8)]
    for tag, blocks in enumerate((arrays, rows, mixed)):
        hs = hashes(5, 10 + tag)
        for keys in (hs, [h.encode() for h in hs], [hs[0].encode()] + hs[1:]):
            client.put_many(MODEL_DIR, keys, blocks)
            assert client.get_many(MODEL_DIR, keys) == [bytes(b) for b in blocks]
            outs = [bytearray(len(bytes(b)) + 1) for b in blocks]
            got = client.get_many(MODEL_DIR, keys, outs=outs)
            assert [bytes(v) for v in got] == [bytes(b) for b in blocks]
    outs = [bytearray(100), bytes(100)]
    with pytest.raises(ValueError):
        client.get_many(MODEL_DIR, hashes(2, 10), outs=outs)
    # A column is not contiguous: refused by name, whichever path.
    cols = np.zeros((64, 2), np.uint8)
    with pytest.raises(ValueError):
        client.put_many(MODEL_DIR, hashes(2, 10), [cols[:, 0], cols[:, 1]])
    # A hash that is not ASCII is refused by name, not misread.
    with pytest.raises(kvtools.KvError) as e:
        client.has_many(MODEL_DIR, ["abcdef01", "abcdéf02"])
    assert e.value.errno_name == "KV_EBADHASH"


def test_get_into_a_short_buffer_is_efbig(client):
    client.put(MODEL_DIR, "abcdef01", b"x" * 5000)
    with pytest.raises(kvtools.KvError) as e:
        client.get(MODEL_DIR, "abcdef01", out=bytearray(100))
    assert e.value.errno_name == "EFBIG"
    # The pin was released: the block is still there to get whole.
    assert client.get(MODEL_DIR, "abcdef01") == b"x" * 5000


def test_zero_copy_alloc_commit_lookup_release(client):
    with client.alloc(MODEL_DIR, "beef0001", 1 << 20) as a:
        arr = np.frombuffer(a.view, dtype=np.float32)
        arr[:] = np.arange(arr.size, dtype=np.float32)
        del arr
    p = client.lookup(MODEL_DIR, "beef0001")
    arr = np.frombuffer(p.view, dtype=np.float32)
    assert arr.size == (1 << 18) and arr[12345] == 12345.0
    assert not arr.flags.writeable
    # The view maps the daemon's pool: what a put wrote, not a copy.
    assert client.get(MODEL_DIR, "beef0001") == p.view.tobytes()
    del arr
    p.release()
    with pytest.raises(ValueError):
        p.view.tobytes()


def test_alloc_many_commit_many_and_abort(client):
    hs = hashes(10, 2)
    allocs = client.alloc_many(MODEL_DIR, hs, [4096] * 10)
    for i, a in enumerate(allocs):
        a.view[:] = bytes([i]) * 4096
    client.commit_many(allocs[:5])
    client.abort_many(allocs[5:])
    assert client.has_many(MODEL_DIR, hs) == [kvtools.IN_RAM] * 5 + [0] * 5
    pins = client.lookup_many(MODEL_DIR, hs)
    assert [bytes(p.view[:1]) for p in pins[:5]] == [bytes([i]) for i in range(5)]
    assert pins[5:] == [None] * 5
    client.release_many(pins)
    with pytest.raises(kvtools.KvError) as e:
        allocs[0].commit()
    assert e.value.errno_name == "EINVAL"


def test_aborted_by_an_exception_in_the_with_block(client):
    with pytest.raises(RuntimeError):
        with client.alloc(MODEL_DIR, "beef0002", 100):
            raise RuntimeError("model server gave up")
    assert client.has(MODEL_DIR, "beef0002") == 0


def test_a_block_above_the_largest_class_is_refused(client):
    assert client.slot_bytes == 8 << 20
    with pytest.raises(kvtools.KvError) as e:
        client.put(MODEL_DIR, "abcdef03", bytes((8 << 20) + 1))
    assert e.value.errno == errno.EFBIG and e.value.errno_name == "EFBIG"


def test_bad_keys_raise_with_libkv_names(client):
    with pytest.raises(kvtools.KvError) as e:
        client.has_many(MODEL_DIR, ["abcdef01", "not-hex!"])
    assert e.value.errno_name == "KV_EBADHASH"
    with pytest.raises(kvtools.KvError) as e:
        client.put("../etc", "abcdef01", b"x")
    assert e.value.errno_name == "KV_EBADPATH"


def test_connect_to_no_daemon(tmp_path):
    with pytest.raises(kvtools.KvError) as e:
        kvtools.connect(str(tmp_path / "nothing"))
    assert e.value.errno_name == "ENOENT"


def test_batches_read_through_after_a_restart(daemon):
    hs = hashes(50, 3)
    blocks = [block(i, 16384) for i in range(50)]
    with kvtools.connect(daemon.sock) as c:
        c.put_many(MODEL_DIR, hs, blocks)
    daemon.stop()
    daemon.start()
    with kvtools.connect(daemon.sock) as c:
        assert c.has_many(MODEL_DIR, hs) == [kvtools.ON_DISK] * 50
        assert c.get_many(MODEL_DIR, hs + ["feedfeed"]) == blocks + [None]
        assert c.has_many(MODEL_DIR, hs) == [kvtools.IN_RAM] * 50
        # Read through into the class of each file's size, not the largest.
        st = c.stats()
        assert st["pool_bytes_used"] == 50 * 16384
        assert st["readthroughs"] == 50


def test_mixed_sizes_keep_the_pool_payload(daemon_with):
    # The default size classes of --slot-bytes 8M: 8M and its halves to
    # 16K, drawing on one pool.
    d = daemon_with("--cpu-bytes", "512M", "--slot-bytes", "8M")
    sizes = [16384, 524288, 2 << 20, 8 << 20]
    with kvtools.connect(d.sock) as c:
        for tag, size in enumerate(sizes):
            # A quarter of the pool each, and more: past the end, later
            # sizes take the pages of the earlier ones.
            n = (512 << 20) // 4 // size + 2
            c.put_many(MODEL_DIR, hashes(n, tag), [bytes(size)] * n)
        st = c.stats()
    assert st["block_bytes"] >= 0.9 * st["pool_bytes"], st


def test_one_class_pools_waste_what_classes_keep(daemon_with):
    d = daemon_with("--cpu-bytes", "64M", "--size-classes", "8M")
    with kvtools.connect(d.sock) as c:
        c.put_many(MODEL_DIR, hashes(8), [bytes(16384)] * 8)
        st = c.stats()
    assert st["block_bytes"] < 0.01 * st["pool_bytes_used"]


def test_tier_stats_count_read_throughs_of_the_file_tier(daemon):
    hs = hashes(4, 5)
    with kvtools.connect(daemon.sock) as c:
        c.put_many(MODEL_DIR, hs, [bytes(16384)] * 4)
    daemon.stop()
    daemon.start()
    with kvtools.connect(daemon.sock) as c:
        c.get_many(MODEL_DIR, hs)
        tiers = c.stats()["tiers"]
    assert [t["kind"] for t in tiers] == ["shared"]
    assert tiers[0]["hits"] == 4 and tiers[0]["capacity_bytes"] == 0
    assert tiers[0]["blocks"] == 4


def test_a_view_keeps_the_pool_mapped_after_its_client_is_gone(daemon):
    # In a child: on the old package the read below was a SIGSEGV.
    import subprocess
    import sys
    code = """
import gc, sys, kvtools
c = kvtools.connect(sys.argv[1])
c.put(sys.argv[2], "abcdef77", b"kept alive" * 1000)
view = c.lookup(sys.argv[2], "abcdef77").view
arr = __import__("numpy").frombuffer(c.lookup(sys.argv[2], "abcdef77").view, dtype="u1")
del c
gc.collect()
assert bytes(view[:10]) == b"kept alive", bytes(view[:10])
assert arr[:10].tobytes() == b"kept alive"
print("ok")
"""
    from conftest import REPO
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", code, daemon.sock, MODEL_DIR],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr)


def test_one_process_cannot_pin_the_pool_over_many_connections(daemon_with):
    import subprocess
    import sys
    from conftest import REPO
    d = daemon_with("--cpu-bytes", "1M", "--slot-bytes", "16K")
    hs = hashes(64, tag=0x91)
    with kvtools.connect(d.sock) as c:
        assert c.slot_bytes == 16384
        c.put_many(MODEL_DIR, hs, [b"p" * 1000] * 64)
    conns = [kvtools.connect(d.sock) for _ in range(8)]
    pinned, refused = [], 0
    for i, h in enumerate(hs):
        try:
            p = conns[i % 8].lookup(MODEL_DIR, h)
        except kvtools.KvError as e:
            assert e.errno == errno.EMFILE
            refused += 1
            continue
        if p is not None:
            pinned.append(p)
    # Half the 64 slots, whatever the number of connections.
    assert len(pinned) == 32 and refused == 32, (len(pinned), refused)
    # Another process still stores a burst of its own.
    code = """
import sys, kvtools
with kvtools.connect(sys.argv[1]) as c:
    c.put_many(sys.argv[2], ["%016x" % (0xabc000 + i) for i in range(20)], [b"q" * 1000] * 20)
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", code, d.sock, MODEL_DIR],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr)
    for c in conns:
        c.close()


def test_an_installed_package_loads_its_own_libkv_not_a_build_tree_beside_it(tmp_path):
    import shutil
    import subprocess
    import sys
    from conftest import REPO, BUILD
    site = tmp_path / "lib" / "site"
    shutil.copytree(os.path.join(REPO, "python", "kvtools"), site / "kvtools")
    (site / "kvtools" / "_installed.py").write_text(
        "LIBKV = %r\n" % os.path.join(BUILD, "libkv.so"))
    # Where a build tree would be, relative to the package: some other
    # library, which must not be loaded.
    other = os.path.join(BUILD, "tests", "libfaultinj.so")
    if not os.path.exists(other):
        pytest.skip("no %s (make all builds it)" % other)
    (tmp_path / "lib" / "build").mkdir()
    shutil.copy(other,
                tmp_path / "lib" / "build" / "libkv.so")
    env = {k: v for k, v in os.environ.items() if k not in ("KVTOOLS_LIBKV", "BUILD")}
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, "-c",
                        "import kvtools._lib as l; print(l.lib._name)"],
                       capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == os.path.join(BUILD, "libkv.so")


def test_one_process_cannot_hold_the_pool_in_allocations_over_many_connections(daemon_with):
    import subprocess
    import sys
    from conftest import REPO
    d = daemon_with("--cpu-bytes", "1M", "--slot-bytes", "16K")
    conns = [kvtools.connect(d.sock) for _ in range(8)]
    held, refused = [], 0
    for i in range(64):
        try:
            held.append(conns[i % 8].alloc(MODEL_DIR, "%016x" % (0xa11c00 + i), 1000))
        except kvtools.KvError as e:
            assert e.errno == errno.EDQUOT, e
            refused += 1
    # Half the 64 slots, whatever the number of connections.
    assert len(held) == 32 and refused == 32, (len(held), refused)
    code = """
import sys, kvtools
with kvtools.connect(sys.argv[1]) as c:
    c.put_many(sys.argv[2], ["%016x" % (0xabc000 + i) for i in range(20)], [b"q" * 1000] * 20)
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", code, d.sock, MODEL_DIR],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr)
    for c in conns:
        c.close()


def test_version_is_kvtools_own():
    import re
    import kvtools
    with open(os.path.join(REPO, "Makefile")) as f:
        want = re.search(r"^VERSION\s*:=\s*(\S+)", f.read(), re.M).group(1)
    assert kvtools.__version__ == want


def test_dir_shows_the_api_not_the_imports():
    import kvtools
    names = dir(kvtools)
    assert "connect" in names and "Tiers" in names and "__version__" in names
    assert not {"os", "ctypes", "chain", "array", "lib"} & set(names)


def test_a_missing_kvtools_libkv_is_an_error_not_another_libkv():
    out = subprocess.run([sys.executable, "-c", "import kvtools"], capture_output=True,
                         text=True, cwd=os.path.join(REPO, "python"),
                         env=dict(os.environ, KVTOOLS_LIBKV="/nonexistent/libkv.so"))
    assert out.returncode != 0
    assert "$KVTOOLS_LIBKV '/nonexistent/libkv.so'" in out.stderr


def test_connect_waits_as_long_as_kv_daemon_timeout_says(tmp_path, monkeypatch):
    import socket
    import kvtools
    path = str(tmp_path / "mute.sock")
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(path)
    mute.listen(1)      # accepts, never says HELLO
    monkeypatch.setenv("KV_DAEMON_TIMEOUT", "200ms")
    with pytest.raises(kvtools.KvError) as e:
        kvtools.connect(path)
    assert e.value.errno_name == "ETIMEDOUT"
    monkeypatch.setenv("KV_DAEMON_TIMEOUT", "soon")
    with pytest.raises(kvtools.KvError, match="no duration"):
        kvtools.connect(path)
    mute.close()


PINNER = r"""
import sys, kvtools
c = kvtools.connect(sys.argv[1])
hashes = ["%016x" % (0x5000 + i) for i in range(512)]
for at in range(0, 512, 64):
    c.put_many(sys.argv[2], hashes[at:at + 64], [bytes([i % 251]) * 16384 for i in range(64)])
held = []
for h in hashes[::32]:     # a few, spread over every page
    try:
        p = c.lookup(sys.argv[2], h)
    except kvtools.KvError:
        continue
    if p is not None:
        held.append(p)
print(len(held), flush=True)
sys.stdin.read()
"""


def test_another_clients_small_pins_do_not_deny_a_size_class(daemon_with):
    """Small blocks fill every page, then one client pins a few spread
    over them: a page goes to another class only once all its slots are
    free, so pins are kept from holding every page, and another client's
    2 MiB puts and gets still find one (hostile round four, item 14)."""
    d = daemon_with("--cpu-bytes", "8M", "--size-classes", "16K,2M")
    pinner = subprocess.Popen([sys.executable, "-c", PINNER, d.sock, MODEL_DIR],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
    try:
        assert int(pinner.stdout.readline()) > 0
        with kvtools.connect(d.sock) as c:
            big = [bytes([7]) * (2 << 20), bytes([9]) * (2 << 20)]
            c.put_many(MODEL_DIR, ["b190000000000001", "b190000000000002"], big)
            assert c.get_many(MODEL_DIR, ["b190000000000001"])[0] == big[0]
            assert c.stats()["pins_refused"] > 0
    finally:
        pinner.stdin.close()
        pinner.wait()
