"""``Hysteresis``: wrap any policy so a request's config changes only after the inner policy has asked for the same new
config ``hold`` steps in a row, and never within ``cooldown`` steps of the last change.

In a SPEC string the keys ``hold`` and ``cooldown`` wrap any policy, e.g. ``goodput:hold=3,cooldown=16``. The inner
policy still sees every decision and every step's statistics, including steps run with the held config; a ``Policy``
is told through ``overridden`` when that happens.
"""

from __future__ import annotations

from engine.config import SpecConfig
from engine.policy import DecisionContext, SpecPolicy, reads_suffix_match
from engine.stats import StepStats
from policies.base import Policy, remember


class _Held:
    __slots__ = ("current", "candidate", "streak", "since")

    def __init__(self, current: SpecConfig, since: int) -> None:
        self.current = current
        self.candidate: SpecConfig | None = None
        self.streak = 0  # consecutive steps the inner policy asked for ``candidate``
        self.since = since  # steps since the last change


class Hysteresis(Policy):
    name = "hysteresis"

    def __init__(self, inner: SpecPolicy, hold: int = 2, cooldown: int = 0) -> None:
        if hold < 1:
            raise ValueError("hold: must be at least 1")
        if cooldown < 0:
            raise ValueError("cooldown: must not be negative")
        self.inner = inner
        self.hold = hold
        self.cooldown = cooldown
        self._held: dict[str, _Held] = {}
        self._pending: dict[str, tuple[SpecConfig, SpecConfig]] = {}  # request -> (asked, returned)

    @property
    def reads_suffix_match(self) -> bool:
        return reads_suffix_match(self.inner)

    def choose(self, ctx: DecisionContext) -> SpecConfig:
        asked = self.inner.decide(ctx)
        held = self._held.get(ctx.request_id)
        chosen = asked
        if held is not None and asked != held.current:
            streak = held.streak + 1 if asked == held.candidate else 1
            if streak < self.hold or held.since < self.cooldown:
                chosen = held.current
                if isinstance(self.inner, Policy):
                    self.inner.overridden(ctx.request_id, chosen)
        remember(self._pending, ctx.request_id, (asked, chosen))
        return chosen

    def observe(self, stats: StepStats) -> None:
        self.inner.observe(stats)
        pending = self._pending.pop(stats.request_id, None)
        if pending is None:
            return
        asked, chosen = pending
        held = self._held.get(stats.request_id)
        if held is None or chosen != held.current:
            # a request's first config is not a change: the cooldown only follows real changes
            held = _Held(chosen, since=self.cooldown if held is None else 0)
            remember(self._held, stats.request_id, held)
        elif asked == held.current:
            held.candidate, held.streak = None, 0
        elif asked == held.candidate:
            held.streak += 1
        else:
            held.candidate, held.streak = asked, 1
        held.since += 1
