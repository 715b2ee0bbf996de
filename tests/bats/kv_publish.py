#!/usr/bin/python3
"""A KV-event publisher as vLLM, SGLang and llm-d run one, for the tests.

    kv_publish.py ENDPOINT MODE [HASH...]

ENDPOINT: bind:ADDR (tcp://127.0.0.1:* picks a port) or connect:ADDR.
Prints the endpoint actually bound, waits for a subscriber (XPUB), sends
what MODE says about the hex block hashes given (their low 64 bits,
the last 16 digits, as the engines announce them), and lingers a little.

MODE: positional-int, positional-bytes, map-int, map-bytes (one GPU
BlockStored each), storage (a BlockStored on medium STORAGE: not a use),
removed (BlockRemoved), hostile (malformed frames, then one good
positional-int message), flood:N (N messages of 64 random GPU hashes,
then one good message), flood-until:FILE (one message of 65536 random
GPU hashes, again and again as fast as ZMQ takes it, until FILE exists;
at most 10 million).
"""
import os
import struct
import sys
import time

import msgpack
import zmq


def low64(h):
    return int(h[-16:], 16)


def stored(hashes, medium, as_map, as_bytes):
    keys = [low64(h).to_bytes(8, "big") if as_bytes else low64(h) for h in hashes]
    if as_bytes:
        # bytes longer than 8: the decoder takes the last 8.
        keys = [b"\x99" * 8 + k for k in keys]
    if as_map:
        return {"type": "BlockStored", "block_hashes": keys, "parent_block_hash": None,
                "token_ids": list(range(16)), "block_size": 16, "lora_id": None,
                "medium": medium, "group_idx": 0, "locality": "local"}
    return ["BlockStored", keys, None, list(range(16)), 16, None, medium]


def main():
    endpoint, mode, hashes = sys.argv[1], sys.argv[2], sys.argv[3:]
    ctx = zmq.Context()
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    kind, addr = endpoint.split(":", 1)
    if kind == "bind":
        pub.bind(addr)
        print(pub.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)
    else:
        pub.connect(addr)
        print(addr, flush=True)
    pub.recv()  # a subscription: the subscriber is there
    seq = 0
    topic = b"kv@pod-a@meta-llama/Llama-3.1-8B"

    def send(events, ts=None):
        nonlocal seq
        payload = msgpack.packb([ts or time.time(), events, 0], use_bin_type=True)
        pub.send_multipart([topic, struct.pack(">Q", seq), payload])
        seq += 1

    good = [stored(hashes, "GPU", False, False)]
    if mode in ("positional-int", "positional-bytes", "map-int", "map-bytes"):
        send([stored(hashes, "GPU", mode.startswith("map"), mode.endswith("bytes"))])
    elif mode == "storage":
        send([stored(hashes, "STORAGE", False, False)])
    elif mode == "removed":
        send([["BlockRemoved", [low64(h) for h in hashes], "GPU"]])
    elif mode == "hostile":
        pub.send(b"one part only")
        pub.send_multipart([topic, b"\x00" * 4, msgpack.packb([1.0, []])])
        pub.send_multipart([topic, b"\x00" * 8, b"\xc1\xc1 not msgpack"])
        pub.send_multipart([topic, b"\x00" * 8, msgpack.packb({"not": "a batch"})])
        pub.send_multipart([topic, b"\x00" * 8, msgpack.packb([1.0, [["BlockStored", "x"]]])])
        pub.send_multipart([topic, b"\x00" * 8, msgpack.packb([1.0, [{"type": 7}]])])
        pub.send_multipart([topic, b"\x00" * 8, msgpack.packb([1.0, [["BlockStored", [1.5]]]])])
        # arrays nested 2000 deep
        pub.send_multipart([topic, b"\x00" * 8, b"\x91" * 2000 + b"\xc0"])
        # an array header claiming 4 billion elements, and nothing after
        pub.send_multipart([topic, b"\x00" * 8, b"\x92\xcb" + struct.pack(">d", 1.0) + b"\xdd\xff\xff\xff\xff"])
        pub.send_multipart([topic, b"\x00" * 8, os.urandom(4096)])
        pub.send_multipart([topic, b"\x00" * 8, msgpack.packb([1.0, []]), b"a fourth part"])
        send(good)
    elif mode.startswith("flood:"):
        for _ in range(int(mode.split(":")[1])):
            rand = [int.from_bytes(os.urandom(8), "big") for _ in range(64)]
            send([["BlockStored", rand, None, [], 16, None, "GPU"]])
        # past the subscriber's high-water mark PUB drops: let it drain
        time.sleep(3)
        send(good)
    elif mode.startswith("flood-until:"):
        # One message made once, sent as fast as ZMQ takes it: faster
        # than any subscriber can decode.
        stop = mode.split(":", 1)[1]
        rand = [int.from_bytes(os.urandom(8), "big") for _ in range(65536)]
        payload = msgpack.packb([time.time(), [["BlockStored", rand, None, [], 16, None, "GPU"]]])
        for n in range(10_000_000):
            if n % 64 == 0 and os.path.exists(stop):
                break
            pub.send_multipart([topic, struct.pack(">Q", n), payload])
            if n == 0:
                print("flooding", flush=True)
    else:
        sys.exit("unknown mode " + mode)
    time.sleep(float(os.environ.get("KV_PUBLISH_LINGER", "1")))
    pub.close(linger=2000)
    ctx.term()


if __name__ == "__main__":
    main()
