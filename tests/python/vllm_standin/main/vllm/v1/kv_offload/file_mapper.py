"""STAND-IN of vllm/v1/kv_offload/file_mapper.py (vLLM main): not vLLM.
The model dir's fields and name as upstream computes them."""
import hashlib
import json

from vllm.v1.kv_offload.base import get_offload_block_hash, get_offload_group_idx


class FileMapper:
    def __init__(self, root_dir, model_name, tokens_per_hash, blocks_per_file, tp_size, pp_size,
                 pcp_size, dcp_size, rank, dtype, kv_cache_groups=None, inference_engine="vllm",
                 parallel_agnostic=False, replicated_layout=False, canonical_format=None,
                 storage_format=None):
        if parallel_agnostic:
            tp_size = pp_size = pcp_size = dcp_size = 1
            rank = 0
        self.rank = rank
        self.fields = {"model_name": model_name, "tokens_per_hash": tokens_per_hash,
                       "blocks_per_file": blocks_per_file, "tp_size": tp_size,
                       "pp_size": pp_size, "pcp_size": pcp_size, "dcp_size": dcp_size,
                       "dtype": str(dtype), "kv_cache_groups": kv_cache_groups or [],
                       "inference_engine": inference_engine}
        if not parallel_agnostic:
            self.fields["parallel_agnostic"] = False
        if replicated_layout:
            self.fields["replicated_layout"] = True
        if canonical_format is not None:
            self.fields["canonical_format"] = canonical_format
        if storage_format is not None:
            self.fields["storage_format"] = storage_format
        canonical = json.dumps(self.fields, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
        self.base_path = "%s/%s_%s" % (root_dir, model_name.replace("/", "_"), digest)

    @classmethod
    def from_offloading_spec(cls, root_dir, offloading_spec, blocks_per_file=1,
                             parallel_agnostic=False):
        config = offloading_spec.config
        parallel = config.parallel
        groups = [{"tokens_per_block": g.tokens_per_block, "layer_names": list(g.layer_names)}
                  for g in config.groups]
        return cls(root_dir=root_dir, model_name=config.model.name,
                   tokens_per_hash=config.cache.tokens_per_hash, blocks_per_file=blocks_per_file,
                   tp_size=parallel.tp_size, pp_size=parallel.pp_size, pcp_size=parallel.pcp_size,
                   dcp_size=parallel.dcp_size, rank=parallel.rank, dtype=config.model.dtype,
                   kv_cache_groups=groups,
                   parallel_agnostic=(parallel_agnostic and (parallel.is_parallelism_agnostic
                                                             or config.replicated_layout)),
                   replicated_layout=parallel_agnostic and config.replicated_layout,
                   storage_format=offloading_spec.storage_format)

    def get_file_name(self, key):
        h = get_offload_block_hash(key).hex()
        return "%s_r%d/%s/%s_g%d/%s.bin" % (self.base_path, self.rank, h[:3], h[3:5],
                                            get_offload_group_idx(key), h)

    def get_run_config(self):
        return dict(self.fields)

    def get_config_file_path(self):
        return "%s/config.json" % self.base_path
