"""STAND-IN of vllm/distributed/kv_transfer/kv_connector/v1/offloading/
metrics.py (vLLM main): not vLLM.  The flat stats container a tier's
get_stats returns: {"types": {name: kind}, "data": {name: {labels: v}}}."""
from dataclasses import dataclass, field
from typing import Any


@dataclass
class OffloadingConnectorStats:
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if "data" not in self.data:
            self.reset()

    def reset(self):
        self.data = {"types": {}, "data": {}}

    def increase_counter(self, name, value=1, labelvalues=()):
        self.data["types"][name] = "counter"
        values = self.data["data"].setdefault(name, {})
        values[labelvalues] = values.get(labelvalues, 0) + value

    def is_empty(self):
        return not self.data["data"]

    def aggregate(self, other):
        if not other.is_empty():
            for name, values in other.data["data"].items():
                self.data["types"][name] = other.data["types"][name]
                mine = self.data["data"].setdefault(name, {})
                for labels, v in values.items():
                    mine[labels] = mine.get(labels, 0) + v
        return self
