"""STAND-IN of vllm/v1/kv_offload/tiering/base.py after vLLM #43076
(commit 041410b9): not vLLM."""
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import numpy as np

from vllm.v1.kv_offload.base import OffloadKey, ReqContext, RequestOffloadingContext

JobId = int


@dataclass
class JobMetadata:
    job_id: JobId
    keys: Collection[OffloadKey]
    block_ids: np.ndarray
    is_promotion: bool
    req_context: ReqContext


@dataclass
class JobResult:
    job_id: JobId
    success: bool


class SecondaryTierManager(ABC):
    def __init__(self, offloading_spec, primary_kv_view: memoryview, tier_type: str) -> None:
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type

    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> bool | None: ...

    @abstractmethod
    def submit_store(self, job_metadata: JobMetadata) -> None: ...

    @abstractmethod
    def submit_load(self, job_metadata: JobMetadata) -> None: ...

    @abstractmethod
    def get_finished(self) -> Iterable[JobResult]: ...

    def touch(self, keys, req_context):
        return

    def get_request_offloading_context(self, req_context) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def request_finished(self, req_context) -> None:
        return

    def shutdown(self) -> None:
        return
