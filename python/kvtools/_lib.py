"""Finds and declares libkv.so: $KVTOOLS_LIBKV (that one or none), else where `make install`
put it when this is the installed package (named by _installed.py), else
the build tree this package sits in (python/ beside build/), else the
system's libkv.so.0 (ld.so's search, or /usr/local/lib, where `make
install` puts it by default: a package that `pip install` put in place
finds it there)."""
import ctypes
import importlib.util
import os

_here = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    try:
        from ._installed import LIBKV
    except ImportError:
        # Not installed: the build tree's.  An installed package never
        # looks there, as whatever lies two dirs above it is not its own.
        yield os.path.join(_here, "..", "..", os.environ.get("BUILD", "build"), "libkv.so")
    else:
        yield LIBKV
    yield "libkv.so.0"
    yield "/usr/local/lib/libkv.so.0"


def _load():
    env = os.environ.get("KVTOOLS_LIBKV")
    if env:
        # Named, so no other: a wrong name must not load some other libkv.
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise ImportError("kvtools: cannot load $KVTOOLS_LIBKV '%s': %s" % (env, e)) \
                from None
    errors = []
    for path in _candidates():
        if "/" in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(str(e))
    raise ImportError("kvtools: cannot load libkv.so (set KVTOOLS_LIBKV): " +
                      "; ".join(errors))


lib, _libkv_path = _load()


def _load_exports():
    """kvtools._exports, the C module that takes a batch's buffer exports
    in one loop: the one installed beside this package, else the one
    built beside the build tree's libkv.so; None without one (ctypes
    then does it, a few objects per block)."""
    try:
        from . import _exports
        return _exports
    except ImportError:
        pass
    path = os.path.join(os.path.dirname(_libkv_path), "python", "kvtools", "_exports.abi3.so")
    if "/" not in _libkv_path or not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("kvtools._exports", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


exports = _load_exports()

_P = ctypes.c_void_p
_I = ctypes.c_int
_SZ = ctypes.c_size_t
_U32 = ctypes.c_uint32
for _name, _res, _args in [
    ("kv_strerror", ctypes.c_char_p, [_I]),
    ("kv_duration_parse", _I, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]),
    ("kv_offd_connect_timeout", _I, [ctypes.c_char_p, ctypes.c_uint, _P]),
    ("kv_offd_close", None, [_P]),
    ("kv_offd_slot_bytes", _SZ, [_P]),
    ("kv_offd_stats", _I, [_P, _P]),
    ("kv_offd_config", _I, [_P, ctypes.c_char_p, ctypes.c_char_p, _SZ]),
    ("kv_config_model_dir", _I, [_P, ctypes.c_char_p, _SZ]),
    ("kv_offd_stats_name", ctypes.c_char_p, [_SZ]),
    ("kv_offd_tier_stats", _I, [_P, ctypes.c_uint, _P]),
    ("kv_offd_tier_stats_name", ctypes.c_char_p, [_SZ]),
    ("kv_offd_has_many", _I, [_P, _P, _P]),
    ("kv_offd_lookup_many", _I, [_P, _P, _P, _P]),
    ("kv_offd_alloc_many", _I, [_P, _P, _P, _P, _P]),
    ("kv_offd_commit_many", _I, [_P, _P, _SZ, _P]),
    ("kv_offd_abort_many", _I, [_P, _P, _SZ, _P]),
    ("kv_offd_release_many", _I, [_P, _P, _SZ, _P]),
    ("kv_offd_put_many", _I, [_P, _P, _P, _P, _P]),
    ("kv_offd_get_many", _I, [_P, _P, _P, _P, _P, _P]),
    ("kv_layout_block_path", _I, [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint,
                                  ctypes.c_char_p, ctypes.c_char_p, _SZ]),
    ("kv_tier_file_open", _I, [ctypes.c_char_p, _P, _P]),
    ("kv_tier_file_open_bounded", _I, [ctypes.c_char_p, _P, ctypes.c_uint64, _P]),
    ("kv_tier_s3_open", _I, [ctypes.c_char_p, _P, _P]),
    ("kv_root_is_s3", _I, [ctypes.c_char_p]),
    ("kv_tier_chain", _I, [_P, _P, ctypes.c_uint]),
    ("kv_tier_close", None, [_P]),
    ("kv_tier_put", _I, [_P, ctypes.c_char_p, _P, _SZ]),
    ("kv_tier_get", _I, [_P, ctypes.c_char_p, _P, _SZ, _P]),
    ("kv_tier_size", _I, [_P, ctypes.c_char_p, _P]),
    ("kv_tier_del", _I, [_P, ctypes.c_char_p]),
    ("kv_tier_stat", _I, [_P, _P]),
    ("kv_tier_report_to", None, [_P, _P, _P]),
    ("kv_tier_daemon_open", _I, [ctypes.c_char_p, ctypes.c_uint, _P]),
    ("kv_tier_put_config", _I, [_P, ctypes.c_char_p, ctypes.c_char_p, _SZ]),
    ("kv_error_detail", ctypes.c_char_p, []),
    ("kv_config_parse", _I, [ctypes.c_char_p, _SZ, _P]),
    ("kv_config_free", None, [_P]),
    ("kv_config_ensure_model_dir", _I, [_I, _P, ctypes.c_char_p, _SZ]),
    ("kv_use_recorder_open", _I, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64, _P]),
    ("kv_use_recorder_close", None, [_P]),
    ("kv_events_open", _I, [ctypes.c_char_p, _P, _P]),
    ("kv_events_name_model_dir", _I, [_P, ctypes.c_char_p, _P]),
    ("kv_events_close", None, [_P, _P]),
    ("kv_xfer_open", _I, [_P, ctypes.c_uint, _P, _P]),
    ("kv_xfer_submit", _I, [_P, _P]),
    ("kv_xfer_poll", _SZ, [_P, _P, _SZ]),
    ("kv_xfer_pending", _SZ, [_P]),
    ("kv_xfer_drain", None, [_P]),
    ("kv_xfer_stats", None, [_P, _P]),
    ("kv_xfer_close", None, [_P]),
    ("kv_file_replace", _I, [_I, ctypes.c_char_p, ctypes.c_char_p, _SZ, _U32, ctypes.c_uint]),
]:
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args


def strerror(err):
    return lib.kv_strerror(err).decode()
