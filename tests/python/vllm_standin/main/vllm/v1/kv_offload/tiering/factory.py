"""STAND-IN of vllm/v1/kv_offload/tiering/factory.py (vLLM #51007):
not vLLM."""
import importlib

from vllm.v1.kv_offload.tiering.base import SecondaryTierManager


class SecondaryTierFactory:
    _registry = {}

    @classmethod
    def get_tier_class(cls, tier_config):
        tier_type = tier_config.get("type")
        if not tier_type:
            raise ValueError("Secondary tier configuration must include 'type'")
        if tier_type in cls._registry:
            return cls._registry[tier_type]()
        module_path = tier_config.get("module_path")
        if module_path is None:
            raise ValueError("Unknown secondary tier type: %s" % tier_type)
        tier_cls = getattr(importlib.import_module(module_path), tier_type)
        assert issubclass(tier_cls, SecondaryTierManager)
        return tier_cls

    @classmethod
    def create_secondary_tier(cls, tier_config, primary_kv_view, offloading_spec):
        tier_cls = cls.get_tier_class(tier_config)
        config = tier_config.copy()
        tier_type = config.pop("type")
        config.pop("module_path", None)
        return tier_cls(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view,
                        tier_type=tier_type, **config)
