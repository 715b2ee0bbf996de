"""STAND-IN of vllm/v1/kv_offload/base.py (vLLM main): not vLLM."""
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any, NamedTuple, NewType

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


def get_offload_block_hash(key: OffloadKey) -> bytes:
    return key[:-4]


def get_offload_group_idx(key: OffloadKey) -> int:
    return int.from_bytes(key[-4:], "big", signed=False)


class LookupResult(Enum):
    MISS = auto()
    HIT = auto()
    HIT_PENDING = auto()
    RETRY = auto()


class Medium(Enum):
    CPU = "CPU"
    STORAGE = "STORAGE"


class Locality(Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"


@dataclass
class OffloadingEvent:
    keys: list
    medium: Medium
    removed: bool
    locality: Locality | None = None
    ownership: str | None = None
    removal_expected: bool = False


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: dict[str, Any] | None = None


class OffloadPolicy(Enum):
    CHUNK_LEVEL = "chunk_level"
    REQUEST_LEVEL = "request_level"


@dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.CHUNK_LEVEL


class ScheduleEndContext(NamedTuple):
    new_req_ids: Collection[str]
    preempted_req_ids: Collection[str]


class OffloadingSpec:
    """What a tier reads of the spec: its OffloadingConfig (config.py),
    blocks_per_chunk and storage_format."""

    def __init__(self, config, blocks_per_chunk=1, storage_format=None):
        self.config = config
        self.extra_config = config.extra_config
        self.blocks_per_chunk = blocks_per_chunk
        self.storage_format = storage_format


@dataclass
class OffloadingCounterMetadata:
    documentation: str
    labelnames: tuple = ()
