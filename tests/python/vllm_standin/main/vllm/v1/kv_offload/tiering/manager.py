"""STAND-IN of vllm/v1/kv_offload/tiering/manager.py (vLLM main): not
vLLM.  The primary CPU tier and TieringOffloadingManager reduced to what
a secondary tier sees, in upstream's order:

- lookup(key): finished jobs are polled once per step first; the primary
  answers if it has the key; else each tier in turn, the first HIT
  reserving a primary chunk (HIT_PENDING) for a promotion, a RETRY
  making the answer RETRY unless a later tier hits;
- complete_store(keys): every tier gets a store job of the keys' primary
  chunks, pinned until its result comes back;
- on_schedule_end(): finished jobs polled, one promotion job per (tier,
  request) submitted, then each tier's on_schedule_end;
- touch(keys): every tier's touch;
- reset_cache(): each tier's drain_jobs, after which every job must have
  a result;
- shutdown(): each tier's shutdown.
A result for a job the tier was not given, or given twice, fails an
assert, as upstream's does.
"""
import numpy as np

from vllm.v1.kv_offload.base import LookupResult, ScheduleEndContext
from vllm.v1.kv_offload.tiering.base import TransferJob
from standin_primary import PrimaryTier  # noqa: F401 (the primary tier, for callers)


class TieringOffloadingManager:
    def __init__(self, primary, tiers):
        self.primary, self.tiers = primary, tiers
        self._jobs = {}             # job id -> (tier index, job)
        self._next_id = 0
        self._polled = False
        self._promotions = {}       # (tier index, req id) -> (keys, chunks, ctx)
        self.results = []           # (tier index, job, JobResult), for the tests

    def _job_id(self):
        self._next_id += 1
        return self._next_id

    def _maybe_process_finished_jobs(self):
        if not self._polled:
            self._polled = True
            self._process_finished_jobs()

    def _process_finished_jobs(self):
        for i, tier in enumerate(self.tiers):
            for r in tier.get_finished_jobs():
                tier_idx, job = self._jobs.pop(r.job_id)
                assert tier_idx == i
                if job.is_promotion:
                    if r.success:
                        self.primary.complete_write(job.keys, True)
                    elif r.successful_keys:
                        ok = set(r.successful_keys)
                        assert ok <= set(job.keys)
                        self.primary.complete_write([k for k in job.keys if k in ok], True)
                        self.primary.complete_write([k for k in job.keys if k not in ok],
                                                    False)
                    else:
                        self.primary.complete_write(job.keys, False)
                else:
                    self.primary.complete_read(job.keys)
                self.results.append((i, job, r))

    def on_new_request(self, req_context):
        for tier in self.tiers:
            tier.on_new_request(req_context)

    def lookup(self, key, req_context):
        self._maybe_process_finished_jobs()
        if key in self.primary.chunk:
            return LookupResult.HIT if key in self.primary.ready else LookupResult.HIT_PENDING
        retry = False
        for i, tier in enumerate(self.tiers):
            r = tier.lookup(key, req_context)
            if r == LookupResult.HIT:
                c = self.primary.prepare_write(key)
                if c is None:
                    return LookupResult.MISS
                keys, chunks, _ = self._promotions.setdefault(
                    (i, req_context.req_id), ([], [], req_context))
                keys.append(key)
                chunks.append(c)
                return LookupResult.HIT_PENDING
            if r == LookupResult.RETRY:
                retry = True
        return LookupResult.RETRY if retry else LookupResult.MISS

    def touch(self, keys, req_context):
        for tier in self.tiers:
            tier.touch(keys, req_context)

    def complete_store(self, keys, req_context, success=True):
        self._maybe_process_finished_jobs()
        if not success:
            return
        for i, tier in enumerate(self.tiers):
            ids = self.primary.prepare_read(keys)
            job = TransferJob(job_id=self._job_id(), keys=list(keys),
                              chunk_ids=np.array(ids, dtype=np.int64), is_promotion=False,
                              req_context=req_context)
            self._jobs[job.job_id] = (i, job)
            tier.submit_store(job)

    def on_schedule_end(self, new_req_ids=(), preempted_req_ids=()):
        self._maybe_process_finished_jobs()
        self._polled = False
        promotions, self._promotions = self._promotions, {}
        for (i, _), (keys, chunks, ctx) in promotions.items():
            job = TransferJob(job_id=self._job_id(), keys=keys,
                              chunk_ids=np.array(chunks, dtype=np.int32), is_promotion=True,
                              req_context=ctx)
            self._jobs[job.job_id] = (i, job)
            self.tiers[i].submit_load(job)
        ctx = ScheduleEndContext(new_req_ids=list(new_req_ids),
                                 preempted_req_ids=list(preempted_req_ids))
        for tier in self.tiers:
            tier.on_schedule_end(ctx)

    def on_request_finished(self, req_context):
        for tier in self.tiers:
            tier.on_request_finished(req_context)

    def has_pending_work(self):
        return bool(self._jobs) or any(t.has_pending_work() for t in self.tiers)

    def take_events(self):
        return [e for t in self.tiers for e in t.take_events()]

    def get_stats(self):
        return [t.get_stats() for t in self.tiers]

    def reset_cache(self):
        for tier in self.tiers:
            tier.drain_jobs()
        self._process_finished_jobs()
        assert not self._jobs, "jobs without a result after drain_jobs: %r" % self._jobs

    def shutdown(self):
        for tier in self.tiers:
            tier.shutdown()
