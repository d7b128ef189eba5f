"""Prices configs for a workload with the goodput policy's acceptance estimates and cost model, and picks the best.

The engine runs whatever config the controller applied, so each observed step is attributed to that config
(``decide`` then ``overridden``), exactly as a wrapper that holds a config tells the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import SpecConfig
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.cost_model import CostModel
from policies.goodput import GoodputPolicy
from policies.registry import PolicySpec, build_policy, without_draft


@dataclass(frozen=True)
class Recommendation:
    workload: str
    batch_size: int
    context_len: int
    config: SpecConfig
    tokens_per_s: float
    tokens_per_s_off: float
    tokens_per_s_current: float
    current: SpecConfig

    @property
    def gain_over_off(self) -> float:
        return self.tokens_per_s / self.tokens_per_s_off - 1.0

    @property
    def gain_over_current(self) -> float:
        if self.tokens_per_s_current <= 0:
            return float("inf")
        return self.tokens_per_s / self.tokens_per_s_current - 1.0


def build_estimator(spec: str, cost_model: CostModel) -> GoodputPolicy:
    """The goodput policy for ``spec`` (``goodput[:key=value,...]``); the controller prices with no other policy."""
    parsed = PolicySpec.parse(spec)
    if parsed.name != "goodput":
        raise ValueError(f"policy {parsed.name!r}: the controller prices configs with goodput; give goodput[:...]")
    if parsed.options.get("match_buckets", "none").lower() != "none":
        # Steps reach the controller without the suffix match a deciding policy saw, and the configs it applies are
        # static (no request deviates by bucket), so the workload's own estimate is unbiased and buckets would be empty
        raise ValueError("policy goodput: match_buckets does not apply to the controller (its steps carry no suffix "
                         "match); leave it out")
    parsed = PolicySpec(parsed.name, {**parsed.options, "match_buckets": "none"}, parsed.text)
    if cost_model.draft is None:  # a cost model calibrated without a draft model can only price n-gram speculation
        parsed = without_draft(parsed)
    policy = build_policy(parsed, cost_model)
    if not isinstance(policy, GoodputPolicy):  # hold/cooldown would wrap it; the controller stabilises on its own
        raise ValueError("policy: hold and cooldown do not apply to the controller (it has its own stabilisation)")
    return policy


class Estimator:
    def __init__(self, policy: GoodputPolicy) -> None:
        self.policy = policy

    def observe(self, step: StepStats, applied: SpecConfig) -> None:
        ctx = DecisionContext(request_id=step.request_id, workload=step.workload, batch_size=step.batch_size,
                              context_len=step.context_len, prompt_len=step.prompt_len, output_len=step.output_len,
                              request_step=0, requested=applied, last=None, max_new_tokens=step.max_new_tokens)
        self.policy.decide(ctx)
        self.policy.overridden(step.request_id, applied)
        self.policy.observe(step)

    def candidates(self) -> list[SpecConfig]:
        return [self.policy.off, *(config for group in self.policy.groups for config in group.configs.values())]

    def score(self, workload: str, config: SpecConfig, batch_size: int, context_len: int) -> float:
        """Expected tokens/s; 0 for a config the estimator cannot price (a method outside its SPEC, or a draft model
        the cost model was not calibrated with)."""
        if config.speculative and config.method not in self.policy.options.methods:
            return 0.0
        try:
            return self.policy.expected_tokens_per_s(workload, config.at_batch_size(batch_size), batch_size,
                                                     context_len)
        except ValueError:
            return 0.0

    def recommend(self, workload: str, batch_size: int, context_len: int, current: SpecConfig) -> Recommendation:
        scored = [(self.score(workload, c, batch_size, context_len), c) for c in self.candidates()]
        off = scored[0][0]
        best_score, best = max(scored, key=lambda item: item[0])
        if best.speculative and best_score <= off * (1.0 + self.policy.options.margin):
            best_score, best = off, self.policy.off
        return Recommendation(workload, batch_size, context_len, best, best_score, off,
                              self.score(workload, current, batch_size, context_len), current)

    def cost_evidence(self, batch_size: int, context_len: int) -> dict[str, Any]:
        cost = self.policy.cost
        return {"engine": cost.engine.model_dump(mode="json"),
                "verify_s_1_token": cost.verify_s(batch_size, batch_size, context_len),
                "ngram_s": cost.ngram_s, "has_draft_grid": cost.draft is not None}
