"""The one interface the controller and the tuner use to steer an inference engine.

Implementations: llama.cpp's ``llama-server`` (``tuner.engines.llamacpp``; configs fixed at launch, so applying one
relaunches the server) and spectune's own engine server (live ``PUT /admin/spec-config`` per workload, ``GET /stats``,
``GET /metrics`` with ``spectune:`` names). Both report the same statistics types, so the tuner scores either the same
way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from engine.config import SpecConfig
from tuner.engines.prometheus import SpecDecodeCounters


class EngineError(RuntimeError):
    """The engine could not be started, stopped responding, or answered with an error."""


class UnsupportedConfigError(ValueError):
    """A config the engine cannot run; ``field`` names the config field at fault and the message says why."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do; the tuner plans around these instead of engine names."""

    live_config: bool  # apply() takes effect without restarting the engine
    per_workload_config: bool  # one running engine serves several workloads with different configs
    step_traces: bool  # exact per-step statistics (StepStats), enough for counterfactual replay
    trees: bool  # draft trees, not just chains
    methods: frozenset[str]  # SpecConfig.method values it can run


@dataclass(frozen=True)
class RequestTiming:
    """What one finished request cost, as the engine reported it."""

    workload: str
    prompt_tokens: int
    output_tokens: int
    prompt_s: float  # prefill time
    decode_s: float  # generation time after the first token
    draft_tokens: int
    accepted_tokens: int
    wall_s: float  # as seen by the client, end to end

    @property
    def decode_tokens_per_s(self) -> float:
        return self.output_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        """End-to-end: output tokens over client wall time (prefill included)."""
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class Completion:
    text: str
    timing: RequestTiming


@dataclass(frozen=True)
class EngineStats:
    """One read of an engine's statistics.

    ``counters`` are cumulative per workload since the engine process started (an engine that cannot tell workloads
    apart, like llama.cpp, reports them all under ``""``); ``instance`` changes whenever the
    process restarts (the counters then restart at zero), so only subtract reads with equal ``instance``.
    ``requests`` are the requests finished after the ``since`` cursor given to ``read_stats``; pass ``cursor`` back
    next time to get only newer ones.
    """

    instance: str
    counters: Mapping[str, SpecDecodeCounters]
    requests: tuple[RequestTiming, ...]
    cursor: int


class EngineAdapter(ABC):
    """A running (or connectable) inference engine the tuner can steer.

    Contract:
    - ``start()`` launches the engine or connects to it and returns once it is healthy; ``stop()`` releases
      everything ``start()`` acquired (a launched process is gone, no orphans) and is safe to call twice.
      The adapter is also a context manager doing both.
    - ``apply(workload, config)`` makes ``config`` the one serving ``workload`` or raises UnsupportedConfigError naming
      the field, before touching the running engine. With ``capabilities.live_config`` it takes effect for the
      next step; otherwise it may restart the engine, but must reuse the running one when nothing would change.
      ``extension`` carries engine-specific settings that SpecConfig has no field for (documented per engine).
    - ``complete()`` sends one greedy request as ``workload`` and returns its text and timing; ``read_stats()``
      never blocks on in-flight requests.
    - One adapter is driven by one thread at a time; it owns the engine process it launched.
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    @property
    def supports_live_config(self) -> bool:
        return self.capabilities.live_config

    @property
    @abstractmethod
    def base_url(self) -> str:
        """Where the engine's HTTP API answers, e.g. ``http://127.0.0.1:8080``."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def health(self) -> bool:
        """True when the engine answers its health check now."""

    @abstractmethod
    def apply(self, workload: str, config: SpecConfig, extension: Mapping[str, Any] | None = None) -> None: ...

    @abstractmethod
    def complete(self, prompt: str, *, workload: str, max_tokens: int) -> Completion: ...

    @abstractmethod
    def read_stats(self, since: int = 0) -> EngineStats: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
