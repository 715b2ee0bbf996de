"""STAND-IN of vllm/v1/kv_offload/tiering/manager.py after vLLM #43076:
not vLLM.  The same order as main's stand-in (vllm_standin/main), with
this era's names: lookup -> True/False/None, JobMetadata(block_ids),
get_finished(), request_finished(); no on_schedule_end, so promotions
go out when the next step's first lookup polls."""
import numpy as np

from vllm.v1.kv_offload.tiering.base import JobMetadata
from standin_primary import PrimaryTier  # noqa: F401 (the primary tier, for callers)


class TieringOffloadingManager:
    def __init__(self, primary, tiers):
        self.primary, self.tiers = primary, tiers
        self._jobs = {}
        self._next_id = 0
        self._promotions = {}
        self.results = []

    def _job_id(self):
        self._next_id += 1
        return self._next_id

    def process_finished(self):
        for i, tier in enumerate(self.tiers):
            for r in tier.get_finished():
                tier_idx, job = self._jobs.pop(r.job_id)
                assert tier_idx == i
                if job.is_promotion:
                    self.primary.complete_write(job.keys, r.success)
                else:
                    self.primary.complete_read(job.keys)
                self.results.append((i, job, r))

    def lookup(self, key, req_context):
        if key in self.primary.chunk:
            return True if key in self.primary.ready else None
        retry = False
        for i, tier in enumerate(self.tiers):
            r = tier.lookup(key, req_context)
            if r is True:
                c = self.primary.prepare_write(key)
                if c is None:
                    return False
                keys, chunks, _ = self._promotions.setdefault(
                    (i, req_context.req_id), ([], [], req_context))
                keys.append(key)
                chunks.append(c)
                return None
            if r is None:
                retry = True
        return None if retry else False

    def complete_store(self, keys, req_context, success=True):
        if not success:
            return
        for i, tier in enumerate(self.tiers):
            ids = self.primary.prepare_read(keys)
            job = JobMetadata(job_id=self._job_id(), keys=list(keys),
                              block_ids=np.array(ids, dtype=np.int64), is_promotion=False,
                              req_context=req_context)
            self._jobs[job.job_id] = (i, job)
            tier.submit_store(job)

    def step_end(self):
        """The end of a step in this era: finished jobs, then promotions."""
        self.process_finished()
        promotions, self._promotions = self._promotions, {}
        for (i, _), (keys, chunks, ctx) in promotions.items():
            job = JobMetadata(job_id=self._job_id(), keys=keys,
                              block_ids=np.array(chunks, dtype=np.int32), is_promotion=True,
                              req_context=ctx)
            self._jobs[job.job_id] = (i, job)
            self.tiers[i].submit_load(job)

    def touch(self, keys, req_context):
        for tier in self.tiers:
            tier.touch(keys, req_context)

    def shutdown(self):
        for tier in self.tiers:
            tier.shutdown()
