"""kvtools: a Python client of kvoffd, the node-local KV-cache offload daemon.

ctypes over libkv.so: the daemon's pool is mapped into this process, so
put and get are one memcpy each and the zero-copy forms hand out
memoryviews of the pool itself (numpy.frombuffer maps them, no copy).

    import kvtools
    with kvtools.connect("/run/kvoffd.sock") as c:
        c.put_many(model_dir, hashes, blocks)
        present = c.has_many(model_dir, hashes)
        blocks = c.get_many(model_dir, hashes)

Keys are a model dir name (``<safe_model>_<d12>``, see kv(7)), a rank, a
KV-cache group and a block hash in hex.  Errors raise KvError, an OSError
whose ``errno`` and ``errno_name`` say what failed.
"""
import array
import ctypes
import errno as _errno
import json
import os
from itertools import accumulate, chain, repeat
from operator import add, attrgetter

from ._lib import exports as _exports, lib, strerror

__all__ = ["connect", "Client", "KvError", "Pinned", "Allocation",
           "IN_RAM", "ON_DISK", "BATCH_MAX", "Tiers", "errno_name", "__version__"]
__version__ = "0.1.0"   # kvtools' own (Makefile VERSION), kept in step by a test


def __dir__():
    """What the package offers, not what it imports."""
    return sorted(__all__)

IN_RAM = 1
ON_DISK = 2
BATCH_MAX = 4096
_GET_CHUNK = 1024
_KV_EBASE = 4096
_KV_NAMES = ["KV_EBADHASH", "KV_EBADPATH", "KV_EBADCONFIG", "KV_ECHECKSUM",
             "KV_ESHORT", "KV_EFINGERPRINT", "KV_EPROTO", "KV_ENODEV",
             "KV_ES3", "KV_ENOBUCKET"]


def errno_name(err):
    """The symbolic name of a positive errno or libkv error code."""
    if err in _errno.errorcode:
        return _errno.errorcode[err]
    if 0 <= err - _KV_EBASE < len(_KV_NAMES):
        return _KV_NAMES[err - _KV_EBASE]
    return "E%d" % err


class KvError(OSError):
    """A libkv call failed: errno is the positive code, errno_name its name."""

    def __init__(self, err, what):
        super().__init__(err, "%s: %s" % (what, strerror(-err)))
        self.errno_name = errno_name(err)

    def __str__(self):
        return "[%s] %s" % (self.errno_name, self.strerror)


def _check(rc, what):
    if rc < 0:
        raise KvError(-rc, what)
    return rc


class _Keys(ctypes.Structure):
    _fields_ = [("model_dir", ctypes.c_char_p), ("rank", ctypes.c_uint32),
                ("group", ctypes.c_uint32),
                ("hashes", ctypes.POINTER(ctypes.c_char_p)),
                ("n", ctypes.c_size_t)]


class _Block(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_uint32), ("ptr", ctypes.c_void_p),
                ("len", ctypes.c_size_t)]


def _text(s):
    return s if isinstance(s, bytes) else s.encode()


# An array of pointers or sizes, filled by C loops (array.array) rather
# than a Python object per element: a batch names a thousand blocks.
_WORD = "Q" if ctypes.sizeof(ctypes.c_void_p) == 8 else "I"


def _words(values):
    """(array, address) of values as pointer-sized words."""
    arr = array.array(_WORD, values)
    return arr, arr.buffer_info()[0]


def _joined(hashes):
    """The hashes NUL-separated in one bytes, or None: all str (ASCII, so
    each is as long encoded) or all bytes."""
    try:
        s = "\0".join(hashes)
        return (s + "\0").encode() if s.isascii() else None
    except TypeError:
        pass
    try:
        return b"\0".join(hashes) + b"\0"
    except TypeError:
        return None


def _keys(model_dir, hashes, rank, group):
    n = len(hashes)
    blob = _joined(hashes) if n else None
    if blob is None:
        enc = [_text(h) for h in hashes]
        arr = (ctypes.c_char_p * max(n, 1))(*enc)
        k = _Keys(_text(model_dir), rank, group, arr, n)
        k._keep = (enc, arr)
        return k
    # One buffer and a pointer to each hash in it.
    base = ctypes.cast(ctypes.c_char_p(blob), ctypes.c_void_p).value
    ptrs, at = _words(accumulate(chain((base,), map(add, map(len, hashes), repeat(1)))))
    k = _Keys(_text(model_dir), rank, group,
              ctypes.cast(at, ctypes.POINTER(ctypes.c_char_p)), n)
    k._keep = (blob, ptrs)
    return k


def _address(mv):
    """(address, length, keep) of a writable contiguous memoryview, or None.

    c_char.from_buffer holds the buffer export without making an array
    type per length: put_many and get_many call this once per block."""
    n = mv.nbytes
    if mv.readonly or not mv.contiguous or not n:
        return None
    keep = ctypes.c_char.from_buffer(mv)
    return ctypes.addressof(keep), n, (mv, keep)


def _buffers(items, writable):
    """(addresses, lengths, keep) of a list of C-contiguous buffers
    (numpy arrays, bytearrays; writable ones if asked), each exported
    once, or None when one is not such a buffer (the caller then takes
    them one by one, and says which).  kvtools._exports holds them all in
    one object; without it, ctypes takes only writable non-empty ones."""
    if _exports is not None:
        try:
            keep, addrs_at, lens_at = _exports.exports(items, writable)
        except (TypeError, ValueError, BufferError):
            return None
        return addrs_at, lens_at, keep
    try:
        mvs = list(map(memoryview, items))
        keeps = list(map(ctypes.c_char.from_buffer, mvs))
    except (TypeError, ValueError, BufferError):
        return None
    addrs, addrs_at = _words(map(ctypes.addressof, keeps))
    lens, lens_at = _words(map(attrgetter("nbytes"), mvs))
    return addrs_at, lens_at, (mvs, keeps, addrs, lens)


def _src(data):
    """(address, length, keep) of any buffer, without copying it."""
    if isinstance(data, bytes):
        return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value, len(data), data
    mv = memoryview(data)
    fast = _address(mv)
    if fast:
        return fast
    if not mv.contiguous:
        raise ValueError("block buffer must be contiguous")
    # Read-only: ctypes cannot take its pointer; or empty.
    return _src(bytes(mv))


def _rows(blocks, n, writable):
    """(addresses, lengths, keep) of the n rows of a 2-D C-contiguous
    buffer (a numpy array of blocks, a staging tensor's host copy), or
    None: one buffer export for all the blocks, not one per block."""
    if isinstance(blocks, (list, tuple)):
        return None
    try:
        mv = memoryview(blocks)
    except TypeError:
        return None
    if mv.ndim != 2 or not mv.c_contiguous or mv.shape[0] != n or not mv.nbytes:
        return None
    if mv.readonly:
        if writable:
            raise ValueError("outs must be writable")
        return None
    row = mv.strides[0]
    keep = ctypes.c_char.from_buffer(mv)
    base = ctypes.addressof(keep)
    addrs, addrs_at = _words(range(base, base + n * row, row))
    lens, lens_at = _words(repeat(row, n))
    return addrs_at, lens_at, (mv, keep, addrs, lens)


def _dst(out):
    mv = memoryview(out)
    fast = _address(mv)
    if fast:
        return fast
    if mv.readonly or not mv.contiguous:
        raise ValueError("out must be a writable contiguous buffer")
    # Empty: a valid pointer for no bytes.
    keep = ctypes.create_string_buffer(1)
    return ctypes.addressof(keep), 0, (mv, keep)


def _view(client, ptr, n, writable):
    if not n:
        return memoryview(b"")
    arr = (ctypes.c_char * n).from_address(ptr)
    # The array is what every view (and numpy array) of it holds on to:
    # it keeps the Client, and so the pool's mapping, alive with it.
    arr._kv_client = client
    mv = memoryview(arr).cast("B")
    return mv if writable else mv.toreadonly()


class Pinned:
    """A block pinned in the pool: ``view`` is a read-only memoryview of
    its bytes, valid until release() (or the end of a with block)."""

    def __init__(self, client, slot, ptr, n):
        self._client, self.slot, self.len = client, slot, n
        self.view = _view(client, ptr, n, False)

    def release(self):
        if self._client is not None:
            self._client.release_many([self])

    def __len__(self):
        return self.len

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class Allocation:
    """A slot to fill: ``view`` is a writable memoryview of the pool;
    commit() makes it the block, abort() drops it.  As a context manager
    it commits, or aborts when the block raises."""

    def __init__(self, client, slot, ptr, n):
        self._client, self.slot, self.len = client, slot, n
        self.view = _view(client, ptr, n, True)

    def _client_or_raise(self, what):
        if self._client is None:
            raise KvError(_errno.EINVAL, what + ": already committed or aborted")
        return self._client

    def commit(self):
        self._client_or_raise("commit").commit_many([self])

    def abort(self):
        self._client_or_raise("abort").abort_many([self])

    def __len__(self):
        return self.len

    def __enter__(self):
        return self

    def __exit__(self, typ, *exc):
        if self._client is None:
            return
        if typ is None:
            self.commit()
        else:
            self.abort()


def _drop_view(obj):
    # The slot may hold another block from now on: end the view if no
    # numpy array or memoryview still exports it.
    try:
        obj.view.release()
    except BufferError:
        pass


class _Closes:
    """A handle closed by close(), a with block, or collection."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


def _timeout_ms(timeout_ms):
    """timeout_ms, else $KV_DAEMON_TIMEOUT (a duration: 500ms, 1s; 0 for
    ever), as the programs read it, else 30 s."""
    if timeout_ms is not None:
        return timeout_ms
    env = os.environ.get("KV_DAEMON_TIMEOUT")
    if not env:
        return 30000
    ns = ctypes.c_uint64()
    if lib.kv_duration_parse(env.encode(), ctypes.byref(ns)) < 0:
        raise KvError(_errno.EINVAL, "$KV_DAEMON_TIMEOUT '%s' is no duration (1s, 500ms)" % env)
    return 1 if 0 < ns.value < 1000000 else min(ns.value // 1000000, 0xffffffff)


class Client(_Closes):
    """One connection to kvoffd; use one per thread.  timeout_ms bounds
    the connect and each request (default: $KV_DAEMON_TIMEOUT, else 30 s;
    0 waits for ever)."""

    def __init__(self, socket_path=None, timeout_ms=None):
        self._h = None
        timeout_ms = _timeout_ms(timeout_ms)
        path = socket_path or os.environ.get("KV_DAEMON")
        if not path:
            raise KvError(_errno.EINVAL, "no socket: give one or set KV_DAEMON")
        h = ctypes.c_void_p()
        _check(lib.kv_offd_connect_timeout(_text(path), timeout_ms, ctypes.byref(h)),
               "connect to '%s'" % path)
        self._h = h
        self.socket_path = path
        self.slot_bytes = lib.kv_offd_slot_bytes(h)

    def close(self):
        if self._h:
            lib.kv_offd_close(self._h)
            self._h = None

    # ---- one key: a batch of one ----

    def has(self, model_dir, hash, rank=0, group=0):
        """0 when absent, IN_RAM or ON_DISK."""
        return self.has_many(model_dir, [hash], rank, group)[0]

    def put(self, model_dir, hash, data, rank=0, group=0):
        self.put_many(model_dir, [hash], [data], rank, group)

    def get(self, model_dir, hash, rank=0, group=0, out=None):
        """The block's bytes, or None when absent.  With out (a writable
        buffer) the bytes land there and a memoryview of them comes back."""
        return self.get_many(model_dir, [hash], rank, group,
                             None if out is None else [out])[0]

    def lookup(self, model_dir, hash, rank=0, group=0):
        """A Pinned block (zero copy), or None when absent."""
        return self.lookup_many(model_dir, [hash], rank, group)[0]

    def alloc(self, model_dir, hash, nbytes, rank=0, group=0):
        """An Allocation of nbytes to fill (zero copy)."""
        return self.alloc_many(model_dir, [hash], [nbytes], rank, group)[0]

    # ---- batches ----

    def has_many(self, model_dir, hashes, rank=0, group=0):
        """A list: 0 absent, IN_RAM or ON_DISK for each hash."""
        k = _keys(model_dir, hashes, rank, group)
        where = (ctypes.c_int * max(k.n, 1))()
        _check(lib.kv_offd_has_many(self._h, ctypes.byref(k), where), "has_many")
        res = where[:k.n]
        for i, w in enumerate(res):
            if w < 0:
                raise KvError(-w, "has_many: %s" % _text(hashes[i]).decode())
        return res

    def put_many(self, model_dir, hashes, blocks, rank=0, group=0):
        """Store blocks[i] under hashes[i]: a list of buffers, or one
        2-D C-contiguous buffer (a numpy array) holding a block per row,
        which costs one buffer export instead of one per block.  Buffers
        aligned to 64 bytes copy fastest (see libkv(3), put_many)."""
        if len(blocks) != len(hashes):
            raise ValueError("put_many: %d hashes, %d blocks" % (len(hashes), len(blocks)))
        k = _keys(model_dir, hashes, rank, group)
        rows = _rows(blocks, k.n, False) or _buffers(blocks, False)
        if rows:
            bufs, lens, srcs = rows
        else:
            srcs = [_src(b) for b in blocks]
            bufs = (ctypes.c_void_p * max(k.n, 1))(*[s[0] for s in srcs])
            lens = (ctypes.c_size_t * max(k.n, 1))(*[s[1] for s in srcs])
        status = (ctypes.c_int * max(k.n, 1))()
        _check(lib.kv_offd_put_many(self._h, ctypes.byref(k), bufs, lens, status),
               "put_many")
        _raise_first(status, k.n, hashes, "put_many")

    def get_many(self, model_dir, hashes, rank=0, group=0, outs=None):
        """A list of bytes (or, with outs, memoryviews into them), None for
        an absent block.  outs is a list of writable buffers or, as for
        put_many, one 2-D array of them, a block per row."""
        k = _keys(model_dir, hashes, rank, group)
        n = max(k.n, 1)
        if outs is None:
            # A chunk at a time: the daemon bounds a client's pins.
            got = []
            for at in range(0, k.n, _GET_CHUNK):
                pins = self.lookup_many(model_dir, hashes[at:at + _GET_CHUNK], rank, group)
                got += [None if p is None else bytes(p.view) for p in pins]
                self.release_many(pins)
            return got
        if len(outs) != k.n:
            raise ValueError("get_many: %d hashes, %d buffers" % (k.n, len(outs)))
        rows = _rows(outs, k.n, True)
        many = None if rows else _buffers(outs, True)
        if rows:
            bufs, caps, keep = rows
        elif many:
            bufs, caps, keep = many
        else:
            dsts = [_dst(o) for o in outs]
            bufs = (ctypes.c_void_p * n)(*[d[0] for d in dsts])
            caps = (ctypes.c_size_t * n)(*[d[1] for d in dsts])
        lens = (ctypes.c_size_t * n)()
        status = (ctypes.c_int * n)()
        _check(lib.kv_offd_get_many(self._h, ctypes.byref(k), bufs, caps, lens, status),
               "get_many")
        _raise_first(status, k.n, hashes, "get_many", absent_ok=True)
        if rows:
            flat, row = keep[0].cast("B"), keep[0].strides[0]
            return [None if st else flat[at:at + ln]
                    for st, ln, at in zip(status[:k.n], lens[:k.n], range(0, k.n * row, row))]
        if many:
            return [None if st else memoryview(o).cast("B")[:ln]
                    for st, ln, o in zip(status[:k.n], lens[:k.n], outs)]
        return [None if status[i] else dsts[i][2][0].cast("B")[:lens[i]] for i in range(k.n)]

    def lookup_many(self, model_dir, hashes, rank=0, group=0):
        """Pinned blocks, None where absent; release with release_many."""
        k = _keys(model_dir, hashes, rank, group)
        out = (_Block * max(k.n, 1))()
        status = (ctypes.c_int * max(k.n, 1))()
        _check(lib.kv_offd_lookup_many(self._h, ctypes.byref(k), out, status),
               "lookup_many")
        pins = [None if status[i] else Pinned(self, out[i].slot, out[i].ptr, out[i].len)
                for i in range(k.n)]
        try:
            _raise_first(status, k.n, hashes, "lookup_many", absent_ok=True)
        except KvError:
            self.release_many(pins)
            raise
        return pins

    def release_many(self, pins):
        self._finish_many([p for p in pins if p is not None],
                          lib.kv_offd_release_many, "release_many")

    def alloc_many(self, model_dir, hashes, sizes, rank=0, group=0):
        """Allocations to fill, then commit_many or abort_many."""
        if len(sizes) != len(hashes):
            raise ValueError("alloc_many: %d hashes, %d sizes" % (len(hashes), len(sizes)))
        k = _keys(model_dir, hashes, rank, group)
        n = max(k.n, 1)
        lens = (ctypes.c_size_t * n)(*sizes)
        out = (_Block * n)()
        status = (ctypes.c_int * n)()
        _check(lib.kv_offd_alloc_many(self._h, ctypes.byref(k), lens, out, status),
               "alloc_many")
        allocs = [None if status[i] else Allocation(self, out[i].slot, out[i].ptr, sizes[i])
                  for i in range(k.n)]
        try:
            _raise_first(status, k.n, hashes, "alloc_many")
        except KvError:
            self.abort_many([a for a in allocs if a is not None])
            raise
        return allocs

    def commit_many(self, allocs):
        self._finish_many(allocs, lib.kv_offd_commit_many, "commit_many")

    def abort_many(self, allocs):
        self._finish_many(allocs, lib.kv_offd_abort_many, "abort_many")

    def _finish_many(self, objs, fn, what):
        for o in objs:
            if o._client is None:
                raise KvError(_errno.EINVAL, "%s: slot %d already finished" % (what, o.slot))
        n = max(len(objs), 1)
        slots = (ctypes.c_uint32 * n)(*[o.slot for o in objs])
        status = (ctypes.c_int * n)()
        for o in objs:
            o._client = None
            _drop_view(o)
        _check(fn(self._h, slots, len(objs), status), what)
        for i, o in enumerate(objs):
            if status[i]:
                raise KvError(-status[i], "%s: slot %d" % (what, o.slot))

    def put_config(self, config):
        """Give the daemon a model's config.json (a dict, or its JSON
        text) and return the model dir it names (``<safe_model>_<d12>``):
        each of the daemon's file tiers writes it into that dir with the
        first block it takes, so the dir is whole there (kvls --check)."""
        text = (config if isinstance(config, (str, bytes))
                else json.dumps(config, sort_keys=True))
        text = _text(text)
        cfg = ctypes.c_void_p()
        _check(lib.kv_config_parse(text, len(text), ctypes.byref(cfg)), "config")
        try:
            name = ctypes.create_string_buffer(1024)
            _check(lib.kv_config_model_dir(cfg, name, len(name)), "model dir of config")
        finally:
            lib.kv_config_free(cfg)
        _check(lib.kv_offd_config(self._h, name.value, text, len(text)), "put_config")
        return name.value.decode()

    def stats(self):
        """The daemon's counters as a dict (kvoffd --stats)."""
        n = 64
        buf = (ctypes.c_uint64 * n)()
        _check(lib.kv_offd_stats(self._h, buf), "stats")
        out = {}
        for i in range(n):
            name = lib.kv_offd_stats_name(i)
            if not name:
                break
            out[name.decode()] = buf[i]
        out["tiers"] = self.tier_stats()
        return out

    def tier_stats(self):
        """Each file tier's counters, nearest RAM first, as dicts."""
        tiers = []
        while True:
            buf = (ctypes.c_uint64 * 32)()
            err = lib.kv_offd_tier_stats(self._h, len(tiers), buf)
            if err == -_errno.ENOENT:
                return tiers
            _check(err, "tier stats")
            t = {}
            for i in range(32):
                name = lib.kv_offd_tier_stats_name(i)
                if not name:
                    break
                t[name.decode()] = buf[i]
            t["kind"] = "shared" if t["kind"] == 1 else "local"
            tiers.append(t)


def _raise_first(status, n, hashes, what, absent_ok=False):
    for i in range(n):
        st = status[i]
        if st and not (absent_ok and st == -_errno.ENOENT):
            raise KvError(-st, "%s: %s" % (what, _text(hashes[i]).decode()))


def connect(socket_path=None, timeout_ms=None):
    """A Client of the kvoffd at socket_path (default $KV_DAEMON), each
    request bounded by timeout_ms (default $KV_DAEMON_TIMEOUT, else 30 s)."""
    return Client(socket_path, timeout_ms)


# kv/tier.h's chain flags.
_TIER_SPILL = 1 << 0
_TIER_PROMOTE = 1 << 1
_TIER_PROMOTE_SECOND_HIT = 1 << 3
_PROMOTE = {"first-hit": _TIER_PROMOTE, "second-hit": _TIER_PROMOTE_SECOND_HIT,
            "never": 0}
_SIZE_UNKNOWN = (1 << 64) - 1


class _TierStat(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_char_p)] + [(n, ctypes.c_uint64) for n in (
        "blocks", "used_bytes", "capacity_bytes", "hits", "misses", "puts",
        "evictions", "spills", "promotions", "block_max_bytes")]


class _TierReport(ctypes.Structure):
    _fields_ = [("change", ctypes.c_int), ("key", ctypes.c_char_p), ("size", ctypes.c_uint64)]


_REPORT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.POINTER(_TierReport))
# kv/tier.h's enum kv_tier_change, in order.
_CHANGES = ("stored", "promoted", "moved", "dropped", "deleted")


class Tiers(_Closes):
    """A hierarchy of file tiers chained in libkv, in this process: no
    daemon.  ``tiers`` lists them fastest first, each a root or a (root,
    capacity_bytes) pair; every tier but the last needs a capacity, and
    the last may be a bucket ("s3://BUCKET/PREFIX").  As kvget --tier and
    kvoffd --tier: a bounded tier keeps its blocks in LRU order by last
    use and sends the oldest down as it fills; a hit below the first tier
    is copied up by ``promote`` ("first-hit", "second-hit" or "never").
    A bounded tier claims its root while open (.kvoffd.lock): a root that
    kvoffd or another bounded tier keeps the LRU of raises KvError EBUSY.

    ``on_change(tier, change, key, size)``, if given, is called as each
    tier changes a block, whoever made the change (libkv's
    kv_tier_report_to): ``tier`` its place, fastest first; ``change``
    "stored", "promoted", "moved" (down to a lower tier), "dropped" or
    "deleted"; ``key`` the block's path in the layout; ``size`` its
    bytes (0 for "deleted").  What a connector needs to announce
    BlockStored and BlockRemoved.  It runs inside the call that made the
    change and must not call back into these Tiers; what it raises is
    printed, not raised.

        with kvtools.Tiers([("/nvme/kv", 200 << 30), "/mnt/kv"]) as t:
            t.put(model_dir, "5f1c9a44e0b2", data)
            data = t.get(model_dir, "5f1c9a44e0b2")
    """

    def __init__(self, tiers, promote="first-hit", on_change=None):
        self._tiers = []
        self._report = None
        if on_change is not None:
            def report(arg, _tier, r):
                on_change(arg or 0, _CHANGES[r.contents.change], r.contents.key.decode(),
                          r.contents.size)
            self._report = _REPORT_FN(report)
        if promote not in _PROMOTE:
            raise ValueError("promote: first-hit, second-hit or never, not %r" % promote)
        if not tiers:
            raise ValueError("tiers: at least one")
        try:
            for k, spec in enumerate(tiers):
                root, cap = (spec, None) if isinstance(spec, (str, bytes, os.PathLike)) else spec
                root = os.fsencode(root)
                if not cap and k + 1 < len(tiers):
                    raise ValueError("tier %r needs a capacity: only the last may be "
                                     "unbounded" % os.fsdecode(root))
                t = ctypes.c_void_p()
                if lib.kv_root_is_s3(root):
                    if cap:
                        raise ValueError("a bucket is not bounded by a capacity")
                    rc = lib.kv_tier_s3_open(root, None, ctypes.byref(t))
                elif cap:
                    rc = lib.kv_tier_file_open_bounded(root, None, cap, ctypes.byref(t))
                else:
                    rc = lib.kv_tier_file_open(root, None, ctypes.byref(t))
                _check(rc, "open %s" % os.fsdecode(root))
                self._tiers.append(t)
                if self._report:
                    lib.kv_tier_report_to(t, ctypes.cast(self._report, ctypes.c_void_p), k)
                if k:
                    _check(lib.kv_tier_chain(self._tiers[k - 1], t,
                                             _TIER_SPILL | _PROMOTE[promote]),
                           "chain %s" % os.fsdecode(root))
        except BaseException:
            self.close()
            raise

    def close(self):
        for t in self._tiers:
            lib.kv_tier_close(t)
        self._tiers = []

    def _top(self):
        if not self._tiers:
            raise ValueError("Tiers is closed")
        return self._tiers[0]

    @staticmethod
    def _key(model_dir, hash, rank, group):
        buf = ctypes.create_string_buffer(4096)
        _check(lib.kv_layout_block_path(model_dir.encode(), rank, group, hash.encode(),
                                        buf, len(buf)), "block path of %s" % hash)
        return buf.value

    def put(self, model_dir, hash, data, rank=0, group=0):
        """Store a block (bytes-like) in the first tier."""
        key = self._key(model_dir, hash, rank, group)
        view = memoryview(data).cast("B")
        buf = (ctypes.c_char * len(view)).from_buffer_copy(view) if view.readonly \
            else (ctypes.c_char * len(view)).from_buffer(view)
        _check(lib.kv_tier_put(self._top(), key, buf, len(view)), "put %s" % hash)

    def get(self, model_dir, hash, rank=0, group=0):
        """The block's bytes from the first tier that has it, or None."""
        key = self._key(model_dir, hash, rank, group)
        size = ctypes.c_uint64()
        rc = lib.kv_tier_size(self._top(), key, ctypes.byref(size))
        if rc == -_errno.ENOENT:
            return None
        _check(rc, "size of %s" % hash)
        cap = size.value if size.value != _SIZE_UNKNOWN else 1 << 30
        buf = ctypes.create_string_buffer(max(cap, 1))
        got = ctypes.c_size_t()
        rc = lib.kv_tier_get(self._top(), key, buf, cap, ctypes.byref(got))
        if rc == -_errno.ENOENT:
            return None
        _check(rc, "get %s" % hash)
        return buf.raw[:got.value]

    def has(self, model_dir, hash, rank=0, group=0):
        """Whether some tier holds the block."""
        size = ctypes.c_uint64()
        rc = lib.kv_tier_size(self._top(), self._key(model_dir, hash, rank, group),
                              ctypes.byref(size))
        if rc == -_errno.ENOENT:
            return False
        _check(rc, "has %s" % hash)
        return True

    def delete(self, model_dir, hash, rank=0, group=0):
        """Remove the block from every tier; False if none had it."""
        rc = lib.kv_tier_del(self._top(), self._key(model_dir, hash, rank, group))
        if rc == -_errno.ENOENT:
            return False
        _check(rc, "delete %s" % hash)
        return True

    def stats(self):
        """Per tier, fastest first: kind, blocks, used and capacity bytes
        (bounded tiers), hits, misses, puts, evictions, spills, promotions."""
        out = []
        for t in self._tiers:
            st = _TierStat()
            _check(lib.kv_tier_stat(t, ctypes.byref(st)), "stat")
            d = {n: getattr(st, n) for n, _ in _TierStat._fields_[1:]}
            d["kind"] = st.kind.decode()
            out.append(d)
        return out
