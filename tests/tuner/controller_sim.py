"""A simulated engine for controller tests on a simulated clock: it runs whatever config the controller applied per
workload, with acceptance scripted per workload and step times from a cost model, and pages its statistics the way
``GET /stats`` does. (Real-process tests use the engine server; this one exists because real time cannot be
simulated.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.config import SpecConfig
from engine.stats import StepStats
from policies.cost_model import CostModel
from tuner.engines.base import EngineError
from tuner.engines.spectune import StatsPage

CONTEXT = 128


@dataclass
class Behaviour:
    """How a workload's traffic behaves: draft tokens accepted per method and depth, and request lengths."""

    accept: Callable[[str, int], int]
    prompt_len: int = 100
    output_len: int = 64


class SimulatedEngine:
    def __init__(self, cost: CostModel, workloads: dict[str, Behaviour], steps_per_read: int = 40,
                 steps_per_request: int = 8) -> None:
        self.cost = cost
        self.workloads = workloads
        self.steps_per_read = steps_per_read
        self.steps_per_request = steps_per_request
        self.default = SpecConfig()
        self.configs: dict[str, SpecConfig] = {}
        self.applied: list[tuple[str, SpecConfig]] = []
        self.step = 0
        self.reachable = True

    def _guard(self) -> None:
        if not self.reachable:
            raise EngineError("simulated engine: connection refused")

    def spec_configs(self) -> dict[str, Any]:
        self._guard()
        return {"default": self.default.model_dump(mode="json"),
                "workloads": {n: c.model_dump(mode="json") for n, c in self.configs.items()}}

    def apply(self, workload: str, config: SpecConfig) -> None:
        self._guard()
        self.configs[workload] = config
        self.applied.append((workload, config))

    def stats_page(self, since: int = 0, limit: int = 1000) -> StatsPage:
        self._guard()
        steps, requests = [], []
        for name, behaviour in self.workloads.items():
            config = self.configs.get(name, self.default)
            for i in range(self.steps_per_read):
                self.step += 1
                steps.append(self._step(name, behaviour, config))
                if (i + 1) % self.steps_per_request == 0:
                    requests.append(self._request(name, behaviour, config))
        return StatsPage(epoch="sim", next_cursor=self.step, dropped=0, steps=tuple(steps), requests=tuple(requests))

    def _step(self, name: str, behaviour: Behaviour, config: SpecConfig) -> StepStats:
        depth = config.k if config.speculative else 0
        accepted = min(behaviour.accept(config.method, depth), depth) if depth else 0
        return StepStats(self.step, f"{name}-{self.step // self.steps_per_request}", name, 1, CONTEXT,
                         config.method if depth else "off", depth, depth, accepted,
                         tuple(1 if d < accepted else 0 for d in range(depth)), accepted + 1, 1 + depth, 1 + depth,
                         self.cost.draft_s(1, depth, CONTEXT, config.method) if depth else 0.0,
                         self.cost.verify_s(1, 1 + depth, CONTEXT), float(self.step))

    def _request(self, name: str, behaviour: Behaviour, config: SpecConfig) -> dict[str, Any]:
        depth = config.k if config.speculative else 0
        accepted = min(behaviour.accept(config.method, depth), depth) if depth else 0
        return {"workload": name, "prompt_len": behaviour.prompt_len, "output_len": behaviour.output_len,
                "draft_tokens": depth * self.steps_per_request, "accepted_tokens": accepted * self.steps_per_request}
