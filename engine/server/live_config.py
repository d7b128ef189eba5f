"""The live per-workload speculation configs, and the policy that makes the engine follow them step by step."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from engine.config import SpecConfig
from engine.policy import DecisionContext
from engine.stats import StepStats


@dataclass(frozen=True)
class ConfigSnapshot:
    """The default config plus the per-workload overrides, as one immutable value."""

    default: SpecConfig = field(default_factory=SpecConfig)
    workloads: MappingProxyType[str, SpecConfig] = field(default_factory=lambda: MappingProxyType({}))

    def lookup(self, workload: str) -> SpecConfig:
        return self.workloads.get(workload, self.default)

    def to_dict(self) -> dict[str, Any]:
        return {"default": self.default.model_dump(mode="json"),
                "workloads": {name: cfg.model_dump(mode="json") for name, cfg in sorted(self.workloads.items())}}


class LiveConfigTable:
    """Thread-safe table of configs. Writers swap in a new snapshot under a lock; readers (the stepping thread, once per
    request per step) read the current snapshot without locking, so a change is seen whole at the next step."""

    def __init__(self, default: SpecConfig | None = None) -> None:
        self._lock = threading.Lock()
        self._snapshot = ConfigSnapshot(default or SpecConfig())

    @property
    def snapshot(self) -> ConfigSnapshot:
        return self._snapshot

    def lookup(self, workload: str) -> SpecConfig:
        return self._snapshot.lookup(workload)

    def set(self, config: SpecConfig, workload: str | None = None) -> ConfigSnapshot:
        """Set the default config (``workload`` None) or one workload's config; returns the new snapshot."""
        with self._lock:
            old = self._snapshot
            if workload is None:
                self._snapshot = ConfigSnapshot(config, old.workloads)
            else:
                self._snapshot = ConfigSnapshot(old.default, MappingProxyType({**old.workloads, workload: config}))
            return self._snapshot

    def replace(self, default: SpecConfig, workloads: dict[str, SpecConfig]) -> ConfigSnapshot:
        with self._lock:
            self._snapshot = ConfigSnapshot(default, MappingProxyType(dict(workloads)))
            return self._snapshot


class LiveConfigPolicy:
    """``SpecPolicy`` that gives every request the current config of its workload, ignoring the submitted one."""

    def __init__(self, table: LiveConfigTable) -> None:
        self.table = table

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        return self.table.lookup(ctx.workload)

    def observe(self, stats: StepStats) -> None:
        return None
