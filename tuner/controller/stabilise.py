"""When a recommended config change may be applied, and when an applied one must be rolled back.

In the spirit of the Kubernetes HPA: a change must promise more than the ``tolerance`` band; the recommendation must
hold for a stabilisation window first (a longer one for turning speculation on than for turning it off, since a wrong
``off`` only costs the speedup while a wrong ``on`` slows every request); at most ``max_changes`` changes per
``rate_window_s``. After a change, the workload's measured goodput over ``rollback_window_s`` is compared with the
window before it; a drop beyond the tolerance rolls the change back, and the config rolled away from is not proposed
again for ``block_s``. All times come from the caller's clock, so tests drive it with a simulated one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from engine.config import SpecConfig


class StabilityOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tolerance: float = Field(default=0.10, ge=0.0, le=1.0, description="gain a change must promise")
    off_window_s: float = Field(default=30.0, ge=0.0, description="recommendation must hold this long to turn off")
    on_window_s: float = Field(default=90.0, ge=0.0, description="... to turn speculation on")
    change_window_s: float = Field(default=30.0, ge=0.0, description="... to change one speculative config to another")
    max_changes: int = Field(default=3, ge=1, description="changes allowed per rate window")
    rate_window_s: float = Field(default=600.0, gt=0.0)
    rollback_window_s: float = Field(default=60.0, gt=0.0, description="goodput compared this long after a change")
    min_samples: int = Field(default=32, ge=1, description="steps needed on each side of the comparison")
    block_s: float = Field(default=1800.0, ge=0.0, description="a rolled-back config is not proposed again this long")


@dataclass(frozen=True)
class Verdict:
    apply: bool
    reason: str


@dataclass
class PendingCheck:
    """A change whose effect on goodput is not yet confirmed."""

    previous: SpecConfig
    applied: SpecConfig
    at: float
    baseline: float | None  # measured goodput in the window before the change
    baseline_samples: int


@dataclass
class _State:
    candidate: SpecConfig | None = None
    since: float = 0.0
    changes: deque[float] = field(default_factory=deque)
    pending: PendingCheck | None = None
    blocked: dict[SpecConfig, float] = field(default_factory=dict)  # config -> until


class Stabiliser:
    """Per-workload bookkeeping of recommendations and changes; one instance per controller, one thread."""

    def __init__(self, options: StabilityOptions | None = None) -> None:
        self.options = options or StabilityOptions()
        self._state: dict[str, _State] = {}

    def _of(self, workload: str) -> _State:
        return self._state.setdefault(workload, _State())

    def window_for(self, current: SpecConfig, candidate: SpecConfig) -> float:
        if not candidate.speculative:
            return self.options.off_window_s
        return self.options.on_window_s if not current.speculative else self.options.change_window_s

    def consider(self, workload: str, current: SpecConfig, candidate: SpecConfig, gain: float, now: float) -> Verdict:
        """Whether to apply ``candidate`` (predicted ``gain`` over ``current``) now."""
        state = self._of(workload)
        opts = self.options
        if candidate == current:
            state.candidate = None
            return Verdict(False, "current config is already the best")
        if state.blocked.get(candidate, -1.0) > now:
            until = state.blocked[candidate]
            return Verdict(False, f"{candidate.label()} was rolled back; blocked until t={until:.0f}")
        if gain <= opts.tolerance:
            state.candidate = None
            return Verdict(False, f"predicted gain {gain:+.1%} is inside the tolerance band ±{opts.tolerance:.0%}")
        if state.pending is not None:
            return Verdict(False, "the previous change is still being measured")
        if state.candidate != candidate:
            state.candidate, state.since = candidate, now
        window = self.window_for(current, candidate)
        if now - state.since < window:
            return Verdict(False, f"recommended for {now - state.since:.0f}s of the {window:.0f}s stabilisation window")
        while state.changes and state.changes[0] <= now - opts.rate_window_s:
            state.changes.popleft()
        if len(state.changes) >= opts.max_changes:
            return Verdict(False, f"{opts.max_changes} changes in the last {opts.rate_window_s:.0f}s already")
        return Verdict(True, f"predicted gain {gain:+.1%} held for {now - state.since:.0f}s")

    def applied(self, workload: str, previous: SpecConfig, config: SpecConfig, now: float, baseline: float | None,
                baseline_samples: int) -> None:
        state = self._of(workload)
        state.changes.append(now)
        state.candidate = None
        state.pending = PendingCheck(previous, config, now, baseline, baseline_samples)

    def pending(self, workload: str) -> PendingCheck | None:
        return self._of(workload).pending

    def check_rollback(self, workload: str, measured: float | None, samples: int, now: float) -> Verdict | None:
        """After the rollback window: ``Verdict(True)`` to roll back, ``Verdict(False)`` to keep; ``None`` while the
        change is still being measured (or nothing is pending)."""
        state = self._of(workload)
        check = state.pending
        opts = self.options
        if check is None or now - check.at < opts.rollback_window_s:
            return None
        if samples < opts.min_samples:
            return None  # not enough traffic yet to judge; keep measuring
        state.pending = None
        if check.baseline is None or check.baseline_samples < opts.min_samples or measured is None:
            return Verdict(False, "kept: no baseline goodput to compare with")
        change = measured / check.baseline - 1.0
        if change < -opts.tolerance:
            state.blocked[check.applied] = now + opts.block_s
            return Verdict(True, f"measured goodput {measured:.1f} tok/s is {change:+.1%} vs {check.baseline:.1f} "
                                 f"before the change (tolerance {opts.tolerance:.0%})")
        return Verdict(False, f"kept: measured goodput {measured:.1f} tok/s ({change:+.1%} vs before)")
