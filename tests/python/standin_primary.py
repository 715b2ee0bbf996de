"""STAND-IN of vLLM's CPU primary tier (vllm/v1/kv_offload/cpu/): not
vLLM.  What the stand-in managers in vllm_standin/ need of it."""
import mmap

import numpy as np


class PrimaryTier:
    """num_chunks rows of row_bytes: the shared region's memoryview (2-D,
    int8, C-contiguous, as SharedOffloadRegion.create_kv_memoryview)."""

    def __init__(self, num_chunks, row_bytes):
        # Page-aligned, as the shared region's mmap is.
        self._map = mmap.mmap(-1, num_chunks * row_bytes)
        self.array = np.frombuffer(self._map, dtype=np.int8).reshape(num_chunks, row_bytes)
        self.view = memoryview(self.array)
        self.free = list(range(num_chunks - 1, -1, -1))
        self.chunk = {}         # key -> chunk of a block held or being written
        self.ready = set()      # keys whose bytes are there
        self.pins = {}          # chunk -> readers

    def write(self, key, data):
        """A block computed on the GPU and copied here (prepare_store +
        the copy)."""
        c = self.free.pop()
        self.chunk[key] = c
        self.array[c] = np.frombuffer(data, dtype=np.int8)
        self.ready.add(key)
        return c

    def read(self, key):
        return self.array[self.chunk[key]].tobytes()

    def evict(self, key):
        c = self.chunk.pop(key)
        assert not self.pins.get(c), "evicting a pinned chunk"
        self.ready.discard(key)
        self.free.append(c)

    def prepare_write(self, key):
        if not self.free:
            return None
        c = self.free.pop()
        self.chunk[key] = c
        return c

    def complete_write(self, keys, success):
        for k in keys:
            if success:
                self.ready.add(k)
            else:
                self.free.append(self.chunk.pop(k))

    def prepare_read(self, keys):
        ids = [self.chunk[k] for k in keys]
        for c in ids:
            self.pins[c] = self.pins.get(c, 0) + 1
        return ids

    def complete_read(self, keys):
        for k in keys:
            c = self.chunk[k]
            self.pins[c] -= 1
