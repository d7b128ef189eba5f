"""``bandit``: UCB1 over a finite set of configs, one bandit per (workload, batch-size bucket).

Reward of a step = its measured tokens per second for the request, ``emitted / (draft_s + verify_s)``. Rewards are
divided by the best arm's mean reward in the bucket, so the best arm scores about 1 and the exploration constant keeps
its textbook meaning. Every arm is played once, then the arm with the highest ``mean / scale + c * sqrt(2 ln N / n)``
is chosen (ties: first arm), so the policy is deterministic. A step is credited to the arm that was decided only if
it ran that arm's method.
"""

from __future__ import annotations

import math

from pydantic import Field, field_validator

from engine.config import SpecConfig
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.base import IntList, MethodList, Policy, PolicyOptions, batch_bucket, remember


class BanditOptions(PolicyOptions):
    methods: MethodList = ("draft", "ngram")
    ks: IntList = (1, 2, 4, 8)
    off: bool = True  # off is an arm too
    exploration: float = Field(default=1.0, ge=0.0)
    min_n: int = 1
    max_n: int = 4
    max_batch_size: int | None = None

    @field_validator("ks")
    @classmethod
    def _ks_in_range(cls, ks: tuple[int, ...]) -> tuple[int, ...]:
        if any(k < 1 or k > 32 for k in ks):
            raise ValueError("every k must be between 1 and 32")
        return tuple(sorted(set(ks)))


class _Arms:
    __slots__ = ("counts", "sums", "total")

    def __init__(self, n: int) -> None:
        self.counts = [0] * n
        self.sums = [0.0] * n
        self.total = 0


class BanditPolicy(Policy):
    name = "bandit"
    Options = BanditOptions

    def __init__(self, options: BanditOptions | None = None, arms: list[SpecConfig] | None = None) -> None:
        self.options = opts = options or BanditOptions()
        if arms is None:
            arms = [SpecConfig(max_batch_size=opts.max_batch_size)] if opts.off else []
            arms += [SpecConfig(method=m, k=k, min_n=opts.min_n, max_n=opts.max_n, max_batch_size=opts.max_batch_size)
                     for m in opts.methods if m != "off" for k in opts.ks]
        if not arms:
            raise ValueError("bandit: no arms (give methods and ks, or off=true)")
        self.arms = arms
        self._bandits: dict[tuple[str, int], _Arms] = {}
        self._pending: dict[str, tuple[tuple[str, int], int]] = {}

    @classmethod
    def from_options(cls, options: BanditOptions) -> BanditPolicy:
        return cls(options)

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        key = (ctx.workload, batch_bucket(ctx.batch_size))
        arm = self._pick(self._bandit(key))
        config = self.arms[arm].at_batch_size(ctx.batch_size)
        if config == self.arms[arm]:
            remember(self._pending, ctx.request_id, (key, arm))
        else:
            self._pending.pop(ctx.request_id, None)
        return config

    def choose(self, ctx: DecisionContext) -> SpecConfig:
        return self.arms[self._pick(self._bandit((ctx.workload, batch_bucket(ctx.batch_size))))]

    def _pick(self, bandit: _Arms) -> int:
        for arm, count in enumerate(bandit.counts):
            if count == 0:
                return arm
        log_total = math.log(bandit.total)
        scale = max(total / count for count, total in zip(bandit.counts, bandit.sums, strict=True)) or 1.0
        c = self.options.exploration
        best, best_value = 0, -math.inf
        for arm, (count, total) in enumerate(zip(bandit.counts, bandit.sums)):
            value = total / count / scale + c * math.sqrt(2.0 * log_total / count)
            if value > best_value:
                best, best_value = arm, value
        return best

    def overridden(self, request_id: str, config: SpecConfig) -> None:
        self._pending.pop(request_id, None)

    def observe(self, stats: StepStats) -> None:
        pending = self._pending.pop(stats.request_id, None)
        if pending is None:
            return
        key, arm = pending
        config = self.arms[arm]
        ran = stats.method if stats.draft_tokens > 0 else "off"
        if ran != config.method and not (config.speculative and stats.draft_tokens == 0):
            return
        seconds = stats.draft_s + stats.verify_s
        if not (seconds > 0.0 and math.isfinite(seconds)) or stats.emitted_tokens < 0:
            return
        reward = stats.emitted_tokens / seconds
        bandit = self._bandit(key)
        bandit.counts[arm] += 1
        bandit.sums[arm] += reward
        bandit.total += 1

    def _bandit(self, key: tuple[str, int]) -> _Arms:
        bandit = self._bandits.get(key)
        if bandit is None:
            bandit = _Arms(len(self.arms))
            self._bandits[key] = bandit
        return bandit

    def pulls(self, workload: str, batch_size: int) -> dict[str, int]:
        """Plays per arm label in the bucket of ``batch_size`` (for inspection and tests)."""
        bandit = self._bandit((workload, batch_bucket(batch_size)))
        return {config.label(): count for config, count in zip(self.arms, bandit.counts)}
