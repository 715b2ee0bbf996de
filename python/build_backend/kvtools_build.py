"""kvtools' own PEP 517 build backend: the package's wheel and sdist from
the standard library alone, so `pip install ./python` works offline in a
fresh venv (no setuptools, no wheel package to fetch).

The wheel holds the kvtools package and, where this Python is 3.11 or
later and has Python.h and a C compiler, its one C module
kvtools._exports built against the limited API: one abi3 wheel serves
every CPython from 3.11 on (tag cp311-abi3-<platform>).  Without them the
wheel is pure (py3-none-any) and the package exports buffers through
ctypes, more slowly.
"""
import base64
import hashlib
import io
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PKG = os.path.join(_HERE, "kvtools")
_NAME = "kvtools"
_SUMMARY = "Client of kvoffd and vLLM's secondary tier over libkv.so (kvtools)"


def _version():
    with open(os.path.join(_PKG, "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
            "License: Apache-2.0\nRequires-Python: >=3.9\n"
            "Provides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n"
            % (_NAME, _version(), _SUMMARY))


def _extension(tmp):
    """kvtools/_exports.abi3.so built into tmp, or None."""
    include = sysconfig.get_paths().get("include") or ""
    if sys.version_info < (3, 11) or not os.path.exists(os.path.join(include, "Python.h")):
        return None
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    out = os.path.join(tmp, "_exports.abi3.so")
    cmd = cc + ["-O2", "-fPIC", "-shared", "-I" + include, "-o", out,
                os.path.join(_PKG, "_exports.c")]
    try:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except (OSError, subprocess.CalledProcessError) as e:
        print("kvtools: _exports not built (%s); ctypes exports instead" % e, file=sys.stderr)
        return None
    return out


def _platform_tag():
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    with tempfile.TemporaryDirectory() as tmp:
        ext = _extension(tmp)
        tag = "cp311-abi3-" + _platform_tag() if ext else "py3-none-any"
        files = [("kvtools/" + n, os.path.join(_PKG, n))
                 for n in sorted(os.listdir(_PKG)) if n.endswith(".py")]
        if ext:
            files.append(("kvtools/_exports.abi3.so", ext))
        dist = "%s-%s.dist-info" % (_NAME, version)
        meta = {
            dist + "/METADATA": _metadata(),
            dist + "/WHEEL": "Wheel-Version: 1.0\nGenerator: kvtools_build\n"
                             "Root-Is-Purelib: %s\nTag: %s\n" % ("false" if ext else "true", tag),
            dist + "/top_level.txt": "kvtools\n",
        }
        name = "%s-%s-%s.whl" % (_NAME, version, tag)
        record = []
        with zipfile.ZipFile(os.path.join(wheel_directory, name), "w",
                             zipfile.ZIP_DEFLATED) as z:
            for arc, path in files:
                with open(path, "rb") as f:
                    data = f.read()
                z.writestr(arc, data)
                record.append(_record_line(arc, data))
            for arc, text in meta.items():
                z.writestr(arc, text)
                record.append(_record_line(arc, text.encode()))
            record.append(dist + "/RECORD,,")
            z.writestr(dist + "/RECORD", "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (_NAME, _version())
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "build_backend/kvtools_build.py"] + \
                ["kvtools/" + n for n in sorted(os.listdir(_PKG))
                 if n.endswith((".py", ".c"))]:
            t.add(os.path.join(_HERE, rel), arcname=base + "/" + rel)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
