"""STAND-IN of vllm/v1/kv_offload/tiering/base.py (vLLM main, after
#52615): not vLLM."""
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import numpy as np

from vllm.v1.kv_offload.base import (OffloadKey, ReqContext, RequestOffloadingContext,
                                     LookupResult)

JobId = int


@dataclass
class TransferJob:
    job_id: JobId
    keys: Collection[OffloadKey]
    chunk_ids: np.ndarray
    is_promotion: bool
    req_context: ReqContext


@dataclass
class JobResult:
    job_id: JobId
    success: bool
    successful_keys: Collection[OffloadKey] | None = None
    transfer_time: float | None = None


class SecondaryTierManager(ABC):
    medium = None

    def __init__(self, offloading_spec, primary_kv_view: memoryview, tier_type: str) -> None:
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self.locality = None

    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult: ...

    @abstractmethod
    def submit_store(self, job_metadata: TransferJob) -> None: ...

    @abstractmethod
    def submit_load(self, job_metadata: TransferJob) -> None: ...

    @abstractmethod
    def get_finished_jobs(self) -> Iterable[JobResult]: ...

    @abstractmethod
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext: ...

    @abstractmethod
    def drain_jobs(self) -> None: ...

    def has_pending_work(self) -> bool:
        return False

    def take_events(self):
        return ()

    def touch(self, keys, req_context):
        return None

    def on_request_finished(self, req_context) -> None:
        return None

    def on_schedule_end(self, context) -> None:
        return None

    def shutdown(self) -> None:
        return None

    def get_stats(self):
        return None
