"""kvtools.vllm: a secondary tier for vLLM's TieringOffloadingSpec, loaded
by ``module_path`` (no vLLM fork or patch)::

    "secondary_tiers": [{"type": "KvtoolsTier", "module_path": "kvtools.vllm",
                         "root_dir": "/mnt/kv-cache"}]

The entry's keys choose the root:

- ``root_dir`` a path: blocks in the tree vLLM's own ``fs`` tier writes
  (``<model>_<digest>/config.json``, ``<model>_<digest>_r<rank>/...``),
  byte for byte, each with kvtools' xxh3 checksum in an xattr;
- ``root_dir`` ``s3://BUCKET/PREFIX``: one object per block at the key
  vLLM's ``obj`` tier uses, through libkv's S3 engine (AWS_* settings);
- ``daemon`` a socket path (or ``root_dir`` absent and $KV_DAEMON set):
  the node's kvoffd, whose RAM and file tiers every model server on the
  node shares.

Other keys: ``threads`` (transfer threads, default 4), ``max_bytes``
(evict by kvevict's LRU before a store passes it), ``enable_kv_events``
with ``events_endpoint`` (BlockStored/BlockRemoved through libkv's
publisher) and ``locality``, ``lookup_ttl_s`` (how long a lookup's answer
is reused, default 2), ``resolution_s`` (last-use resolution, default 60,
as kvwatch), ``node`` (this node's journal name), ``metrics_file``
(Prometheus text), ``model_dir`` (the model dir, for forms of vLLM whose
spec carries no OffloadingConfig).  See kvtools-vllm(7).

Every method runs on vLLM's scheduler thread and returns at once: bytes
move in libkv's threads (kv/xfer.h), with the GIL released; lookups are
answered from one presence batch per scheduler step.
"""
import ctypes
import dataclasses
import errno as _errno
import hashlib
import inspect
import json
import logging
import os
import time

from . import KvError, _check, _text, _words, errno_name
from ._lib import lib, strerror

logger = logging.getLogger("kvtools.vllm")

# ---- vLLM's interface, in whichever form is installed ----

try:
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager as _Base
except ImportError:  # no vLLM: the class still works on its own
    _Base = object
try:
    from vllm.v1.kv_offload.tiering.base import JobResult
except ImportError:
    @dataclasses.dataclass
    class JobResult:
        """vLLM's JobResult, as its main branch has it (no vLLM here)."""
        job_id: int
        success: bool
        successful_keys: object = None
        transfer_time: object = None
try:
    from vllm.v1.kv_offload.base import LookupResult as _LookupResult
except ImportError:  # before vLLM #46363: True, False, None
    _LookupResult = None
try:
    from vllm.v1.kv_offload.base import RequestOffloadingContext as _ReqOffloadCtx
except ImportError:
    _ReqOffloadCtx = None
try:
    from vllm.v1.kv_offload.base import Locality as _Locality, Medium as _Medium, \
        OffloadingEvent as _OffloadingEvent
except ImportError:
    _OffloadingEvent = None
try:
    from vllm.v1.kv_offload.file_mapper import FileMapper as _FileMapper
except ImportError:
    _FileMapper = None
try:  # a tier's counters in vLLM's own metrics (get_stats)
    from vllm.v1.kv_offload.base import OffloadingCounterMetadata as _CounterMeta
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import \
        OffloadingConnectorStats as _ConnectorStats
    if not hasattr(_ConnectorStats, "increase_counter"):
        _ConnectorStats = None
except ImportError:
    _ConnectorStats = None

_RESULT_FIELDS = {f.name for f in dataclasses.fields(JobResult)} \
    if dataclasses.is_dataclass(JobResult) else set(inspect.signature(JobResult).parameters)

if _LookupResult is not None:
    HIT, MISS, RETRY = _LookupResult.HIT, _LookupResult.MISS, _LookupResult.RETRY
else:
    HIT, MISS, RETRY = True, False, None

# ---- libkv's structs (kv/io.h, kv/events.h, kv/xfer.h) ----

_IO_NO_TOUCH = 1 << 3
_FILE_IN_PLACE, _FILE_NONBLOCK = 1 << 2, 1 << 3     # kv/io.h
_AT_FDCWD = -100
_XFER_STORE, _XFER_LOAD, _XFER_HAS, _XFER_TOUCH = range(4)
_XFER_REMOVE_BAD = 1
_POLL_MAX = 256
_ASK_MAX = 4096          # keys in one presence batch
_KNOWN_MAX = 1 << 20     # lookup answers kept


class _IoOpts(ctypes.Structure):
    _fields_ = [("queue_depth", ctypes.c_uint), ("flags", ctypes.c_uint)]


class _EventsOpts(ctypes.Structure):
    _fields_ = [("queue_max", ctypes.c_uint), ("batch_max", ctypes.c_uint),
                ("flush_ns", ctypes.c_uint64), ("linger_ns", ctypes.c_uint64),
                ("pod", ctypes.c_char_p), ("backpressure", ctypes.c_int),
                ("locality", ctypes.c_char_p)]


class _Job(ctypes.Structure):
    pass


_Job._fields_ = [("id", ctypes.c_uint64), ("op", ctypes.c_int), ("n", ctypes.c_size_t),
                 ("keys", ctypes.c_void_p), ("bufs", ctypes.c_void_p),
                 ("lens", ctypes.c_void_p), ("status", ctypes.c_void_p),
                 ("failed", ctypes.c_size_t), ("bytes", ctypes.c_uint64),
                 ("start_ns", ctypes.c_int64), ("end_ns", ctypes.c_int64),
                 ("next", ctypes.c_void_p)]


class _XferOpts(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint), ("uses", ctypes.c_void_p),
                ("root", ctypes.c_char_p), ("max_bytes", ctypes.c_uint64),
                ("low_bytes", ctypes.c_uint64), ("events", ctypes.c_void_p),
                ("medium", ctypes.c_char_p), ("rootfd", ctypes.c_int)]


class _XferStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "evictions", "evicted_bytes", "eviction_errors", "removed_bad", "uses_failed",
        "used_bytes")]


class _Config(ctypes.c_void_p):
    pass


def _strings(texts):
    """(keep, address) of a char *[] over texts (ASCII str)."""
    blob = ("\0".join(texts) + "\0").encode()
    base = ctypes.cast(ctypes.c_char_p(blob), ctypes.c_void_p).value
    at, offs = base, []
    for t in texts:
        offs.append(at)
        at += len(t) + 1
    ptrs, addr = _words(offs)
    return (blob, ptrs), addr


class _Pending:
    """A job in libkv's hands: its C struct and everything it points at."""
    __slots__ = ("job_id", "op", "keys", "c", "keep", "status", "internal")

    def __init__(self, job_id, op, keys, internal=False):
        self.job_id, self.op, self.keys, self.internal = job_id, op, keys, internal


def _fs_fields(spec):
    """The fields vLLM's fs tier hashes into its model dir
    (FileMapper.from_offloading_spec, parallel_agnostic=True), where
    vLLM's own FileMapper is not importable."""
    config = spec.config
    par = config.parallel
    agnostic = bool(par.is_parallelism_agnostic or getattr(config, "replicated_layout", False))
    fields = {
        "model_name": config.model.name,
        "tokens_per_hash": config.cache.tokens_per_hash,
        "blocks_per_file": spec.blocks_per_chunk,
        "tp_size": 1 if agnostic else par.tp_size,
        "pp_size": 1 if agnostic else par.pp_size,
        "pcp_size": 1 if agnostic else par.pcp_size,
        "dcp_size": 1 if agnostic else par.dcp_size,
        "dtype": str(config.model.dtype),
        "kv_cache_groups": [{"tokens_per_block": g.tokens_per_block,
                             "layer_names": list(g.layer_names)} for g in config.groups],
        "inference_engine": "vllm",
    }
    if not agnostic:
        fields["parallel_agnostic"] = False
    if agnostic and getattr(config, "replicated_layout", False):
        fields["replicated_layout"] = True
    if getattr(config, "canonical_layout", False):
        raise ValueError("kvtools.vllm: a canonical layout needs vLLM's own FileMapper")
    if getattr(spec, "storage_format", None) is not None:
        fields["storage_format"] = spec.storage_format
    return fields, 0 if agnostic else par.rank


def model_dir_of(spec):
    """(model dir, rank, run config) of a vLLM OffloadingSpec, exactly as
    vLLM's fs tier names them: its FileMapper when vLLM has one, else the
    same rule (vLLM main, file_mapper.py)."""
    if _FileMapper is not None and hasattr(_FileMapper, "from_offloading_spec"):
        m = _FileMapper.from_offloading_spec("", spec, blocks_per_file=spec.blocks_per_chunk,
                                             parallel_agnostic=True)
        return m.base_path.lstrip("/"), m.rank, m.get_run_config()
    fields, rank = _fs_fields(spec)
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
    return "%s_%s" % (fields["model_name"].replace("/", "_"), digest), rank, fields


class _Counters:
    NAMES = ("stores", "store_blocks", "store_bytes", "store_failures",
             "loads", "load_blocks", "load_bytes", "load_failures",
             "lookups", "hits", "misses", "retries", "touches")

    def __init__(self):
        for n in self.NAMES:
            setattr(self, n, 0)
        self.store_seconds = self.load_seconds = 0.0


class KvtoolsTier(_Base):
    """vLLM's SecondaryTierManager over libkv: see the module's doc."""

    medium = _Medium.STORAGE if _OffloadingEvent is not None else None

    @staticmethod
    def get_tier_type():
        """The oldest factory's registry name (before vLLM #51007)."""
        return "KvtoolsTier"

    def __init__(self, offloading_spec=None, primary_kv_view=None, tier_type="KvtoolsTier", *,
                 vllm_config=None, root_dir=None, daemon=None, threads=4, max_bytes=None,
                 enable_kv_events=False, events_endpoint=None, locality=None,
                 lookup_ttl_s=2.0, resolution_s=60.0, node=None, metrics_file=None,
                 model_dir=None, **kwargs):
        self._xfer = None
        self._tiers = []
        self._uses = None
        self._events = None
        self._jobs = {}
        if _Base is not object:
            accepted = inspect.signature(_Base.__init__).parameters
            given = {"offloading_spec": offloading_spec, "vllm_config": vllm_config,
                     "primary_kv_view": primary_kv_view, "tier_type": tier_type}
            given.update(kwargs)
            _Base.__init__(self, **{k: v for k, v in given.items() if k in accepted})
        self.tier_type = tier_type
        unknown = set(kwargs) - {"backpressure_detector", "backpressure"}
        if unknown:
            raise TypeError("KvtoolsTier: unknown keys %s (see kvtools-vllm(7))"
                            % ", ".join(sorted(unknown)))
        if primary_kv_view is None:
            raise ValueError("KvtoolsTier: no primary_kv_view")
        self.locality = _Locality(locality) if locality and _OffloadingEvent else locality
        self._spec = offloading_spec
        self._view = memoryview(primary_kv_view)
        if not self._view.c_contiguous or self._view.ndim != 2:
            raise ValueError("KvtoolsTier: the primary view must be 2-D and C-contiguous")
        self._rows = self._view.shape[0]
        self._row = self._view.strides[0]
        self._flat = self._view.cast("B")
        self._anchor = ctypes.c_char.from_buffer(self._flat)
        self._base = ctypes.addressof(self._anchor)
        self._ttl = float(lookup_ttl_s)
        self._c = _Counters()
        self._next_internal = 1 << 62
        self._known = {}        # OffloadKey -> (present, until)
        self._ask = []          # keys to look up in the next batch
        self._asking = set()
        self._storing = {}      # OffloadKey -> stores in flight
        self._finished = []     # results made here (a job libkv refused)
        self._events_out = []   # OffloadingEvents for take_events
        self._want_events = bool(enable_kv_events)
        self._metrics_file = metrics_file
        self._metrics_at = 0.0
        self._config_pending = None
        self._config_retry_at = 0.0
        self._reported = {}

        if model_dir:
            self.model_dir, self.rank, run_config = model_dir, 0, None
        elif offloading_spec is not None and hasattr(offloading_spec, "config"):
            self.model_dir, self.rank, run_config = model_dir_of(offloading_spec)
        else:
            raise ValueError("KvtoolsTier: this vLLM's spec carries no OffloadingConfig: "
                             "give the entry a \"model_dir\" key")
        self._prefix = "%s_r%d/" % (self.model_dir, self.rank)
        daemon = daemon or (None if root_dir else os.environ.get("KV_DAEMON"))
        if not root_dir and not daemon:
            raise ValueError("KvtoolsTier: give root_dir (a path or s3://BUCKET/PREFIX) "
                             "or daemon (kvoffd's socket)")
        try:
            self._open(root_dir, daemon, int(threads), run_config, max_bytes, events_endpoint,
                       float(resolution_s), node)
        except BaseException:
            self.shutdown()
            raise

    # ---- setting up ----

    def _open(self, root_dir, daemon, threads, run_config, max_bytes, endpoint, resolution_s,
              node):
        if threads < 1:
            raise ValueError("KvtoolsTier: threads must be at least 1")
        self.root = daemon if daemon else root_dir
        self.kind = "daemon" if daemon else "s3" if lib.kv_root_is_s3(_text(root_dir)) else "path"
        io = _IoOpts(0, _IO_NO_TOUCH)
        for _ in range(threads):
            t = ctypes.c_void_p()
            if self.kind == "daemon":
                rc = lib.kv_tier_daemon_open(_text(daemon), 30000, ctypes.byref(t))
            elif self.kind == "s3":
                rc = lib.kv_tier_s3_open(_text(root_dir), ctypes.byref(io), ctypes.byref(t))
            else:
                rc = lib.kv_tier_file_open(os.fsencode(root_dir), ctypes.byref(io),
                                           ctypes.byref(t))
            _check(rc, "open %s" % self.root)
            self._tiers.append(t)
        rootfd = -1
        if self.kind == "path":
            rootfd = os.open(root_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self._rootfd = rootfd
            if run_config is not None:
                self._config_pending = run_config
                self._ensure_config()
        if self.kind == "daemon" and run_config is not None:
            # kvoffd's file tiers may hold no config.json of this model
            # dir: each that takes a block of it gets this one.
            text = json.dumps(run_config, sort_keys=True).encode()
            rc = lib.kv_tier_put_config(self._tiers[0], _text(self.model_dir), text, len(text))
            if rc < 0:
                logger.warning("kvtools: %s: cannot give kvoffd the config of %s: %s",
                               daemon, self.model_dir, strerror(rc))
        if self.kind != "daemon":
            u = ctypes.c_void_p()
            _check(lib.kv_use_recorder_open(_text(root_dir), node and _text(node),
                                            int(resolution_s * 1e9), ctypes.byref(u)),
                   "open the use journal of %s" % root_dir)
            self._uses = u
        if self._want_events and endpoint:
            self._open_events(endpoint, run_config)
        opts = _XferOpts()
        opts.flags = _XFER_REMOVE_BAD
        opts.uses = self._uses
        opts.rootfd = rootfd
        if max_bytes:
            if self.kind == "daemon":
                raise ValueError("KvtoolsTier: max_bytes bounds a path or a bucket; "
                                 "kvoffd bounds its own tiers")
            opts.root = _text(root_dir)
            opts.max_bytes = int(max_bytes)
        if self._events:
            opts.events = self._events
            opts.medium = b"STORAGE"
        self._opts = opts
        tiers = (ctypes.c_void_p * threads)(*[t.value for t in self._tiers])
        x = ctypes.c_void_p()
        _check(lib.kv_xfer_open(tiers, threads, ctypes.byref(opts), ctypes.byref(x)),
               "start the transfer threads")
        self._xfer = x

    def _ensure_config(self):
        """config.json written, or tried again in 10 s: a volume that
        fails (EIO, ENOSPC) must not keep vLLM from starting."""
        run_config = self._config_pending
        if run_config is None or time.monotonic() < self._config_retry_at:
            return
        try:
            self._ensure_model_dir(self._rootfd, run_config)
        except KvError as e:
            if e.errno_name in ("KV_EFINGERPRINT", "KV_EBADCONFIG") or e.errno == _errno.EINVAL:
                raise
            self._config_retry_at = time.monotonic() + 10
            logger.warning("kvtools: %s: %s; trying again in 10 s", self.root, e)
            return
        self._config_pending = None

    def _ensure_model_dir(self, rootfd, run_config):
        """config.json in the model dir, as vLLM's fs tier writes it on
        first start (indent 2, keys sorted), kept if present."""
        text = json.dumps(run_config, sort_keys=True).encode()
        cfg = _Config()
        _check(lib.kv_config_parse(text, len(text), ctypes.byref(cfg)), "run config")
        try:
            name = ctypes.create_string_buffer(1024)
            _check(lib.kv_config_ensure_model_dir(rootfd, cfg, name, len(name)),
                   "config.json of %s" % self.model_dir)
        finally:
            lib.kv_config_free(cfg)
        if name.value.decode() != self.model_dir:
            raise KvError(_errno.EINVAL, "model dir %s: libkv names it %s"
                          % (self.model_dir, name.value.decode()))

    def _open_events(self, endpoint, run_config):
        ev = ctypes.c_void_p()
        eo = _EventsOpts()
        if self.locality:
            eo.locality = _text(getattr(self.locality, "value", self.locality))
        self._eo = eo   # libkv keeps its strings' pointers
        _check(lib.kv_events_open(_text(endpoint), ctypes.byref(eo), ctypes.byref(ev)),
               "open KV events at %s" % endpoint)
        self._events = ev
        if self.kind != "path" and run_config is not None:
            text = json.dumps(run_config).encode()
            cfg = _Config()
            _check(lib.kv_config_parse(text, len(text), ctypes.byref(cfg)), "run config")
            try:
                _check(lib.kv_events_name_model_dir(ev, _text(self.model_dir), cfg),
                       "name %s for events" % self.model_dir)
            finally:
                lib.kv_config_free(cfg)

    # ---- keys ----

    def key_path(self, key):
        """The layout path of an OffloadKey (the block hash, then the group
        as 4 big-endian bytes): vLLM's FileMapper.get_file_name relative to
        the root."""
        h = key[:-4].hex()
        return "%s%s/%s_g%d/%s.bin" % (self._prefix, h[:3], h[3:5],
                                       int.from_bytes(key[-4:], "big"), h)

    # ---- jobs ----

    def _submit(self, job_id, op, keys, chunk_ids=None, internal=False):
        p = _Pending(job_id, op, list(keys), internal)
        n = len(p.keys)
        paths = [self.key_path(k) for k in p.keys]
        keep, keys_at = _strings(paths)
        status = (ctypes.c_int * max(n, 1))()
        c = _Job(job_id, op, n, keys_at, None, None, ctypes.addressof(status))
        p.keep = [keep, status]
        if chunk_ids is not None:
            ids = [int(i) for i in chunk_ids]
            if len(ids) != n or any(i < 0 or i >= self._rows for i in ids):
                return self._refuse(p, "chunk ids %r do not fit %d keys in %d rows"
                                    % (ids[:8], n, self._rows))
            row = self._row
            bufs, bufs_at = _words(self._base + i * row for i in ids)
            lens, lens_at = _words([row] * n)
            c.bufs, c.lens = bufs_at, lens_at
            p.keep += [bufs, lens]
        p.c, p.status = c, status
        rc = lib.kv_xfer_submit(self._xfer, ctypes.byref(c)) if self._xfer else -_errno.ESHUTDOWN
        if rc < 0:
            return self._refuse(p, strerror(-rc))
        self._jobs[job_id] = p
        return p

    def _refuse(self, p, why):
        logger.error("kvtools: job %d refused: %s", p.job_id, why)
        if not p.internal:
            self._finished.append(self._result(p.job_id, False, (), None, 0))
        return None

    def _result(self, job_id, success, ok_keys, seconds, nbytes):
        kw = {"job_id": job_id, "success": success}
        if "successful_keys" in _RESULT_FIELDS and not success:
            kw["successful_keys"] = tuple(ok_keys) or None
        if "transfer_time" in _RESULT_FIELDS:
            kw["transfer_time"] = seconds
        if "transfer_bytes" in _RESULT_FIELDS:
            kw["transfer_bytes"] = nbytes
        return JobResult(**kw)

    @staticmethod
    def _chunk_ids(job):
        ids = getattr(job, "chunk_ids", None)
        return job.block_ids if ids is None else ids

    def submit_store(self, job_metadata):
        """Store the job's chunks from the primary view (a block already
        there is kept); returns at once."""
        p = self._submit(job_metadata.job_id, _XFER_STORE, job_metadata.keys,
                         self._chunk_ids(job_metadata))
        if p is not None:
            for k in p.keys:
                self._storing[k] = self._storing.get(k, 0) + 1

    def submit_load(self, job_metadata):
        """Load the job's blocks into the primary view's chunks, each
        checked (size, checksum) and recorded as a use; returns at once."""
        self._submit(job_metadata.job_id, _XFER_LOAD, job_metadata.keys,
                     self._chunk_ids(job_metadata))

    def _internal(self, op, keys):
        job_id = self._next_internal
        self._next_internal += 1
        return self._submit(job_id, op, keys, internal=True)

    def get_finished_jobs(self):
        """The jobs that finished since the last call."""
        self._flush_lookups()
        self._ensure_config()
        out, self._finished = self._finished, []
        done = (ctypes.c_void_p * _POLL_MAX)()
        while self._xfer:
            got = lib.kv_xfer_poll(self._xfer, done, _POLL_MAX)
            for i in range(got):
                c = _Job.from_address(done[i])
                p = self._jobs.pop(c.id)
                r = self._finish(p, c)
                if r is not None:
                    out.append(r)
            if got < _POLL_MAX:
                break
        self._write_metrics()
        return out

    get_finished = get_finished_jobs    # before vLLM #43870

    def _finish(self, p, c):
        now = time.monotonic()
        st = p.status
        n = len(p.keys)
        ok = [p.keys[i] for i in range(n) if st[i] == 0] if c.failed else p.keys
        if p.op == _XFER_HAS:
            until = now + self._ttl
            for i, k in enumerate(p.keys):
                self._asking.discard(k)
                self._known[k] = (st[i] == 0, until)
            return None
        if c.failed:
            self._log_failure(p, c)
        if p.op == _XFER_TOUCH:
            return None
        secs = (c.end_ns - c.start_ns) / 1e9
        cnt = self._c
        if p.op == _XFER_STORE:
            until = now + self._ttl
            for k in p.keys:
                left = self._storing.get(k, 1) - 1
                if left:
                    self._storing[k] = left
                else:
                    self._storing.pop(k, None)
            for k in ok:
                self._known[k] = (True, until)
            cnt.stores += 1
            cnt.store_blocks += len(ok)
            cnt.store_bytes += c.bytes
            cnt.store_failures += bool(c.failed)
            cnt.store_seconds += secs
            if self._want_events and _OffloadingEvent is not None and ok:
                self._events_out.append(_OffloadingEvent(
                    keys=list(ok), medium=_Medium.STORAGE, removed=False,
                    locality=self.locality if isinstance(self.locality, _Locality) else None))
        else:
            until = now + self._ttl
            for i, k in enumerate(p.keys):
                if st[i]:
                    self._known[k] = (False, until)
            cnt.loads += 1
            cnt.load_blocks += len(ok)
            cnt.load_bytes += c.bytes
            cnt.load_failures += bool(c.failed)
            cnt.load_seconds += secs
        return self._result(p.job_id, not c.failed, ok, secs, c.bytes)

    def _log_failure(self, p, c):
        first = next(i for i in range(len(p.keys)) if p.status[i])
        err = -p.status[first]
        what = {_XFER_STORE: "store", _XFER_LOAD: "load", _XFER_TOUCH: "touch"}.get(p.op, "job")
        logger.warning("kvtools: %s job %d on %s: %d of %d blocks failed, first %s: [%s] %s",
                       what, p.job_id, self.root, c.failed, len(p.keys),
                       self.key_path(p.keys[first]), errno_name(err), strerror(-err))

    # ---- lookups ----

    def lookup(self, key, req_context=None):
        """HIT, MISS, or RETRY while a store of it is in flight or its
        presence is being asked (answered by the next step)."""
        self._c.lookups += 1
        if key in self._storing:
            self._c.retries += 1
            return RETRY
        known = self._known.get(key)
        if known is not None and known[1] > time.monotonic():
            if known[0]:
                self._c.hits += 1
                return HIT
            self._c.misses += 1
            return MISS
        if key not in self._asking:
            self._asking.add(key)
            self._ask.append(key)
            if len(self._ask) >= _ASK_MAX:
                self._flush_lookups()
        self._c.retries += 1
        return RETRY

    def _flush_lookups(self):
        if not self._ask:
            return
        keys, self._ask = self._ask, []
        if len(self._known) > _KNOWN_MAX:
            now = time.monotonic()
            self._known = {k: v for k, v in self._known.items() if v[1] > now}
        if self._internal(_XFER_HAS, keys) is None:
            self._asking.difference_update(keys)

    def touch(self, keys, req_context=None):
        """Record a use of each block (its atime, or this node's journal);
        kvevict's LRU then spares them."""
        keys = list(keys)
        if keys and self._uses:
            self._c.touches += len(keys)
            self._internal(_XFER_TOUCH, keys)

    # ---- the scheduler's other calls ----

    def on_new_request(self, req_context):
        return _ReqOffloadCtx() if _ReqOffloadCtx is not None else None

    get_request_offloading_context = on_new_request     # vLLM #43076's name

    def on_request_finished(self, req_context):
        return None

    request_finished = on_request_finished

    def on_schedule_end(self, context=None):
        """The step's lookups go out in one presence batch."""
        self._flush_lookups()

    def has_pending_work(self):
        return bool(self._ask or self._jobs or self._finished)

    def drain_jobs(self):
        """Block until every submitted job has finished (vLLM's reset_cache)."""
        self._flush_lookups()
        if self._xfer:
            lib.kv_xfer_drain(self._xfer)

    def take_events(self):
        out, self._events_out = self._events_out, []
        return out

    # The counters vLLM's metrics carry, as kvtools_<name>.
    _STATS_COUNTERS = ("store_blocks", "store_bytes", "store_failures", "load_blocks",
                       "load_bytes", "load_failures", "hits", "misses", "retries",
                       "evictions", "removed_bad", "uses_failed")

    @classmethod
    def build_metric_definitions(cls, extra_config=None):
        """vLLM's metric metadata for what get_stats reports."""
        if _ConnectorStats is None:
            return {}
        return {"kvtools_" + n: _CounterMeta(documentation=_HELP[n])
                for n in cls._STATS_COUNTERS}

    def get_stats(self):
        """The counters' increases since the last call, in vLLM's
        OffloadingConnectorStats where it has one (else None: they are
        in stats() and metrics_file)."""
        if _ConnectorStats is None:
            return None
        now = self.stats()
        st = _ConnectorStats()
        for n in self._STATS_COUNTERS:
            delta = now[n] - self._reported.get(n, 0)
            if delta:
                st.increase_counter("kvtools_" + n, delta)
            self._reported[n] = now[n]
        return None if st.is_empty() else st

    def stats(self):
        """Counters since start: jobs, blocks, bytes, failures, lookups,
        and libkv's evictions and removed bad blocks."""
        out = {n: getattr(self._c, n) for n in _Counters.NAMES}
        out["store_seconds"] = self._c.store_seconds
        out["load_seconds"] = self._c.load_seconds
        if self._xfer:
            xs = _XferStats()
            lib.kv_xfer_stats(self._xfer, ctypes.byref(xs))
            out.update({n: getattr(xs, n) for n, _ in _XferStats._fields_})
        out["jobs_in_flight"] = len(self._jobs)
        return out

    def _write_metrics(self):
        if not self._metrics_file or time.monotonic() < self._metrics_at:
            return
        self._metrics_at = time.monotonic() + 10
        write_prometheus(self._metrics_file, self.stats(), {"tier": self.tier_type})

    def shutdown(self):
        """Finish what is in flight, then close."""
        if self._xfer:
            lib.kv_xfer_drain(self._xfer)
            self._write_metrics_now()
            lib.kv_xfer_close(self._xfer)
            self._xfer = None
        for t in self._tiers:
            lib.kv_tier_close(t)
        self._tiers = []
        if self._uses:
            lib.kv_use_recorder_close(self._uses)
            self._uses = None
        if self._events:
            lib.kv_events_close(self._events, None)
            self._events = None
        fd = getattr(self, "_rootfd", -1)
        if fd >= 0:
            os.close(fd)
            self._rootfd = -1

    def _write_metrics_now(self):
        if self._metrics_file:
            self._metrics_at = 0
            self._write_metrics()


_HELP = {
    "stores": "Store jobs finished.", "store_blocks": "Blocks stored (or kept).",
    "store_bytes": "Bytes written.", "store_failures": "Store jobs that failed in part or whole.",
    "loads": "Load jobs finished.", "load_blocks": "Blocks loaded and verified.",
    "load_bytes": "Bytes read.", "load_failures": "Load jobs that failed in part or whole.",
    "lookups": "Lookups answered.", "hits": "Lookups answered HIT.",
    "misses": "Lookups answered MISS.", "retries": "Lookups answered RETRY.",
    "touches": "Blocks whose use was recorded by touch.",
    "store_seconds": "Time store jobs ran.", "load_seconds": "Time load jobs ran.",
    "evictions": "Blocks evicted for max_bytes.", "evicted_bytes": "Bytes evicted for max_bytes.",
    "eviction_errors": "Evictions that could not run.",
    "removed_bad": "Blocks removed for a wrong size or checksum.",
    "uses_failed": "Uses that could be recorded nowhere.",
    "used_bytes": "Bytes under the root as last measured (max_bytes).",
    "jobs_in_flight": "Jobs submitted and not finished.",
}
_GAUGES = {"used_bytes", "jobs_in_flight"}


def write_prometheus(path, values, labels):
    """values as Prometheus text (node_exporter's textfile collector),
    kvtools_vllm_<name>, written whole."""
    lab = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    lines = []
    for name, v in values.items():
        metric = "kvtools_vllm_" + name + ("" if name in _GAUGES else "_total")
        lines.append("# HELP %s %s" % (metric, _HELP.get(name, name)))
        lines.append("# TYPE %s %s" % (metric, "gauge" if name in _GAUGES else "counter"))
        lines.append("%s{%s} %s" % (metric, lab, v))
    text = ("\n".join(lines) + "\n").encode()
    # libkv's rule for a file written by name: a regular file replaced
    # whole, a device or FIFO written in place (never waiting), nothing
    # else replaced.
    rc = lib.kv_file_replace(_AT_FDCWD, os.fsencode(path), text, len(text), 0o644,
                             _FILE_IN_PLACE | _FILE_NONBLOCK)
    if rc < 0:
        logger.warning("kvtools: cannot write %s: %s: %s", path, strerror(rc),
                       lib.kv_error_detail().decode())
