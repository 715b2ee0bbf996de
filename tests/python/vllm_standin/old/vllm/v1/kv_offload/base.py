"""STAND-IN of vllm/v1/kv_offload/base.py as it was after vLLM #43076 and
before #43870/#46363: not vLLM.  No LookupResult, no OffloadingConfig."""
from dataclasses import dataclass
from enum import Enum
from typing import Any, NewType

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: dict[str, Any] | None = None


class OffloadPolicy(Enum):
    BLOCK_LEVEL = "block_level"


@dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.BLOCK_LEVEL


class OffloadingSpec:
    def __init__(self, vllm_config, kv_cache_config):
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        self.extra_config = {}
