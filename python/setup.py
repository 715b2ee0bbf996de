# pyproject.toml says everything else; this adds kvtools' one C module,
# kvtools._exports (a batch's buffer exports in one loop), built against
# CPython's limited API of 3.11.  optional: where it cannot be built (an
# older Python, no Python.h), the package installs without it and
# exports buffers through ctypes, more slowly.
from setuptools import Extension, setup

setup(ext_modules=[Extension("kvtools._exports", ["kvtools/_exports.c"],
                             py_limited_api=True, optional=True)])
