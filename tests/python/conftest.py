"""pytest fixtures for the kvtools Python package: a kvoffd of the build
tree ($BUILD, default build/) in a scratch root, and the package imported
from python/ beside it."""
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(REPO, os.environ.get("BUILD", "build"))
KVOFFD = os.path.join(BUILD, "bin", "kvoffd")
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("KVTOOLS_LIBKV", os.path.join(BUILD, "libkv.so"))

MODEL_DIR = "org_model_0123456789ab"


class Daemon:
    def __init__(self, root, sock, args):
        self.root, self.sock, self.args = root, sock, args
        self.proc = None

    def start(self):
        r, w = os.pipe()
        self.log = open(self.sock + ".log", "ab")
        self.proc = subprocess.Popen(
            [KVOFFD, "--root", self.root, "--socket", self.sock, "--ready-fd", str(w)]
            + self.args, pass_fds=(w,), stderr=self.log)
        os.close(w)
        with os.fdopen(r, "rb") as ready:
            if ready.readline() != b"\n":
                raise RuntimeError("kvoffd did not start: " + open(self.sock + ".log").read())
        return self

    def stop(self):
        """SIGTERM: the daemon writes its RAM tier behind, then exits 0."""
        self.proc.terminate()
        assert self.proc.wait() == 0
        self.log.close()


@pytest.fixture
def daemon_with(tmp_path):
    started = []

    def make(*args):
        root = tmp_path / "root"
        root.mkdir(exist_ok=True)
        d = Daemon(str(root), str(tmp_path / "sock"), list(args)).start()
        started.append(d)
        return d

    yield make
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


@pytest.fixture
def daemon(daemon_with):
    return daemon_with("--cpu-bytes", "64M", "--size-classes", "16K,512K,2M,8M")


@pytest.fixture
def client(daemon):
    import kvtools
    with kvtools.connect(daemon.sock) as c:
        yield c
