"""kvoffd's wire protocol spoken by hand, as a peer that does not use
libkv would: pipelined requests, BATCH frames, and hostile ones."""
import array
import socket
import struct
import threading

import pytest

import kvtools
from conftest import MODEL_DIR

FRAME = 512
MAGIC = 0x444f564b
VERSION = 4
REPLY = 0x80
HELLO, ALLOC, COMMIT, ABORT, LOOKUP, RELEASE, HAS, STATS, LIST, BATCH = range(1, 11)
HEAD = struct.Struct("<IHHiIIIQQHHI")
SUM = 432           # COMMIT requests, LOOKUP replies: the block's xxh3
COMMIT_SUM = 1      # COMMIT arg: the sum is the client's


def frame(type, status=0, slot=0, count=0, arg=0, model=b"", version=VERSION):
    body = model.ljust(256, b"\0") if model else b""
    f = HEAD.pack(MAGIC, version, type, status, slot, 0, 0, count, arg, len(model), 0, 0)
    return (f + body).ljust(FRAME, b"\0")


def key_frame(type, hash, **kw):
    f = bytearray(frame(type, model=MODEL_DIR.encode(), **kw))
    struct.pack_into("<H", f, 42, len(hash))
    f[48 + 256:48 + 256 + len(hash)] = hash
    return bytes(f)


def parse(f):
    magic, version, type, status, slot, rank, group, n, arg, ml, hl, _ = HEAD.unpack_from(f)
    return dict(version=version, type=type, status=status, slot=slot, len=n, arg=arg,
                sum=struct.unpack_from("<Q", f, SUM)[0])


class Peer:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        fds = array.array("i")
        msg, anc, _, _ = self.s.recvmsg(FRAME, socket.CMSG_SPACE(4))
        for level, kind, data in anc:
            fds.frombytes(data[:4])
        self.hello = parse(msg + self.recv(FRAME - len(msg)))
        self.pool_fd = fds[0]

    def recv(self, n):
        buf = b""
        while len(buf) < n:
            got = self.s.recv(n - len(buf))
            if not got:
                raise ConnectionResetError
            buf += got
        return buf

    def closed(self):
        """True once the daemon has closed this connection."""
        self.s.settimeout(None)
        try:
            return self.s.recv(1) == b""
        except ConnectionResetError:
            return True


def stats(daemon):
    with kvtools.connect(daemon.sock) as c:
        return c.stats()


def test_hello_says_version_4_and_the_largest_class(daemon):
    p = Peer(daemon.sock)
    assert p.hello["type"] == HELLO | REPLY and p.hello["status"] == 0
    assert p.hello["version"] == 4
    assert p.hello["arg"] == 8 << 20


def test_pipelined_requests_are_answered_in_order(daemon):
    with kvtools.connect(daemon.sock) as c:
        c.put(MODEL_DIR, "abcdef07", b"x")
    p = Peer(daemon.sock)
    hashes = [b"abcdef%02x" % i for i in range(200)]
    # More requests than the socket buffers hold, sent while the replies
    # are read: a pipelining peer must read as it writes, as the daemon
    # stops reading a peer whose replies it cannot send.
    sender = threading.Thread(target=p.s.sendall,
                              args=(b"".join(key_frame(HAS, h) for h in hashes) * 20,))
    sender.start()
    for _ in range(20):
        for h in hashes:
            r = parse(p.recv(FRAME))
            assert r["type"] == HAS | REPLY
            assert r["status"] == (0 if h == b"abcdef07" else -2)
    sender.join()


def test_a_batch_frame_and_its_results(daemon):
    with kvtools.connect(daemon.sock) as c:
        c.put(MODEL_DIR, "abcdef01", b"x")
    p = Peer(daemon.sock)
    hashes = b"abcdef01" + b"abcdef02"
    p.s.sendall(frame(BATCH, model=MODEL_DIR.encode(), count=2, arg=HAS | 8 << 8) + hashes)
    r = parse(p.recv(FRAME))
    assert (r["type"], r["status"], r["len"], r["arg"]) == (BATCH | REPLY, 0, 2, HAS | 8 << 8)
    res = [struct.unpack_from("<iIQQQ", p.recv(32)) for _ in range(2)]
    assert res == [(0, 0, kvtools.IN_RAM, 0, 0), (-2, 0, 0, 0, 0)]


@pytest.mark.parametrize("count", [kvtools.BATCH_MAX + 1, 1 << 40, 0])
def test_a_batch_declaring_a_bad_count_is_refused_unread(daemon, count):
    p = Peer(daemon.sock)
    before = stats(daemon)["protocol_errors"]
    p.s.sendall(frame(BATCH, model=MODEL_DIR.encode(), count=count, arg=HAS | 8 << 8))
    assert p.closed()
    assert stats(daemon)["protocol_errors"] == before + 1


def test_a_batch_entry_that_is_not_hex_closes_before_any_runs(daemon):
    p = Peer(daemon.sock)
    p.s.sendall(frame(BATCH, model=MODEL_DIR.encode(), count=2, arg=ALLOC | 8 << 8) +
                struct.pack("<Q", 10) + b"abcdef01" + struct.pack("<Q", 10) + b"abcdefXX")
    assert p.closed()
    st = stats(daemon)
    assert st["slots_used"] == 0 and st["protocol_errors"] == 1


def test_slot_ops_in_a_batch_carry_no_key(daemon):
    p = Peer(daemon.sock)
    p.s.sendall(frame(BATCH, model=MODEL_DIR.encode(), count=1, arg=COMMIT) + b"\0" * 16)
    assert p.closed()


def test_a_commit_whose_sum_lies_is_caught_by_the_reader_and_dropped(daemon):
    """A peer that commits bytes under another sum: libkv's reader finds
    the mismatch, the daemon checks and drops the block, the read is a
    miss, never those bytes."""
    import mmap
    p = Peer(daemon.sock)
    f = bytearray(key_frame(ALLOC, b"abcdef0a"))
    struct.pack_into("<Q", f, 24, 5)
    p.s.sendall(bytes(f))
    r = parse(p.recv(FRAME))
    assert r["status"] == 0
    pool = mmap.mmap(p.pool_fd, 0)
    pool[r["arg"]:r["arg"] + 5] = b"lying"
    c = bytearray(frame(COMMIT, slot=r["slot"], arg=COMMIT_SUM))
    struct.pack_into("<Q", c, SUM, 12345)
    p.s.sendall(bytes(c))
    assert parse(p.recv(FRAME))["status"] == 0
    with kvtools.connect(daemon.sock) as k:
        assert k.has(MODEL_DIR, "abcdef0a") == kvtools.IN_RAM
        assert k.get(MODEL_DIR, "abcdef0a") is None
        assert k.has(MODEL_DIR, "abcdef0a") == 0
    assert stats(daemon)["altered"] == 1
    pool.close()


def test_a_lookup_reply_carries_the_sum(daemon):
    with kvtools.connect(daemon.sock) as c:
        c.put(MODEL_DIR, "abcdef0b", b"one")
        c.put(MODEL_DIR, "abcdef0c", b"two")
    p = Peer(daemon.sock)
    sums = []
    for h in (b"abcdef0b", b"abcdef0c", b"abcdef0b"):
        p.s.sendall(key_frame(LOOKUP, h))
        r = parse(p.recv(FRAME))
        assert r["status"] == 0 and r["len"] == 3
        sums.append(r["sum"])
    assert sums[0] == sums[2] != sums[1] and all(sums)


def test_a_version_2_peer_is_closed_and_counted(daemon):
    p = Peer(daemon.sock)
    p.s.sendall(key_frame(HAS, b"abcdef01", version=2))
    assert p.closed()
    assert stats(daemon)["protocol_errors"] == 1


def test_a_peer_that_never_reads_does_not_stall_the_others(daemon):
    p = Peer(daemon.sock)
    p.s.setblocking(False)
    sent = 0
    try:
        while sent < 64 << 20:
            sent += p.s.send(key_frame(HAS, b"abcdef01") * 64)
    except BlockingIOError:
        pass
    with kvtools.connect(daemon.sock) as c:
        c.put(MODEL_DIR, "abcdef02", b"still here")
        assert c.get(MODEL_DIR, "abcdef02") == b"still here"


CONFIG = 12
EFINGERPRINT = 4096 + 5     # KV_EFINGERPRINT


def test_config_is_checked_against_its_model_dir(daemon):
    """CONFIG: a model dir, then len bytes of its config.json text.  A
    text whose fingerprint names another dir is refused; a length past
    KV_OFFD_CONFIG_MAX closes the connection as any malformed frame."""
    text = (b'{"model_name": "org/model", "hash_block_size": 16, "gpu_blocks_per_file": 1,'
            b' "tp_size": 1, "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "bfloat16",'
            b' "kv_cache_groups": [{"block_size": 16, "layer_names": ["l0"]}],'
            b' "inference_engine": "vllm"}')
    p = Peer(daemon.sock)
    p.s.sendall(frame(CONFIG, count=len(text), model=MODEL_DIR.encode()) + text)
    r = parse(p.recv(FRAME))
    assert r["type"] == CONFIG | REPLY and r["status"] == -EFINGERPRINT
    p.s.sendall(frame(CONFIG, count=(256 << 10) + 1, model=MODEL_DIR.encode()))
    assert p.closed()
