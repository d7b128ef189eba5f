from __future__ import annotations

from engine.config import SpecConfig
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.base import Policy
from policies.hysteresis import Hysteresis
from tests.policies.synthetic import context, step_stats

A, B = SpecConfig(method="ngram", k=2), SpecConfig(method="ngram", k=6)


class Scripted(Policy):
    """Asks for the configs of a script, one per step, and records what it is told."""

    name = "scripted"

    def __init__(self, script: list[SpecConfig]) -> None:
        self.script = script
        self.step = 0
        self.observed: list[StepStats] = []
        self.overrides: list[SpecConfig] = []

    def choose(self, ctx: DecisionContext) -> SpecConfig:
        return self.script[min(ctx.output_len, len(self.script) - 1)]

    def observe(self, stats: StepStats) -> None:
        self.observed.append(stats)

    def overridden(self, request_id: str, config: SpecConfig) -> None:
        self.overrides.append(config)


def run(policy: Hysteresis, steps: int) -> list[SpecConfig]:
    out = []
    for step in range(steps):
        config = policy.decide(context(output_len=step))
        out.append(config)
        policy.observe(step_stats(config, 1, step=step + 1))
    return out


def test_switches_only_after_hold_consecutive_asks():
    script = [A, B, A, B, B, B, B, A, A, A]
    inner = Scripted(script)
    assert run(Hysteresis(inner, hold=3), 10) == [A, A, A, A, A, B, B, B, B, A]
    assert len(inner.observed) == 10
    assert inner.overrides == [A, A, A, B, B]  # the steps it asked for one config and got the other


def test_cooldown_blocks_changes_after_a_change():
    script = [A, B, A, A, A, A, A, A]
    assert run(Hysteresis(Scripted(script), hold=1, cooldown=3), 8) == [A, B, B, B, A, A, A, A]


def test_hold_one_without_cooldown_is_transparent():
    script = [A, B, A, B, SpecConfig(), B]
    assert run(Hysteresis(Scripted(script), hold=1), 6) == script


def test_state_is_per_request():
    policy = Hysteresis(Scripted([B]), hold=5)
    assert policy.decide(context("fresh")) == B  # a new request takes the inner policy's first answer
