"""``heuristic``: transformers' ``num_assistant_tokens_schedule="heuristic"`` rule, per request.

After a step whose draft was fully accepted the request's k grows by 2, after any other speculative step it shrinks by 1
(never below 1). Steps that proposed nothing leave k alone.
"""

from __future__ import annotations

from pydantic import Field

from engine.config import Method, SpecConfig
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.base import Policy, PolicyOptions, remember


class HeuristicOptions(PolicyOptions):
    method: Method = "draft"
    k: int = Field(default=5, ge=1, le=32)  # starting k of every request
    max_k: int = Field(default=32, ge=1, le=32)
    min_n: int = 1
    max_n: int = 4
    max_batch_size: int | None = None


class HeuristicPolicy(Policy):
    name = "heuristic"
    Options = HeuristicOptions

    def __init__(self, options: HeuristicOptions | None = None) -> None:
        self.options = options or HeuristicOptions()
        opts = self.options
        self._configs = {k: SpecConfig(method=opts.method, k=k, min_n=opts.min_n, max_n=opts.max_n,
                                       max_batch_size=opts.max_batch_size) for k in range(1, opts.max_k + 1)}
        self._start = min(max(opts.k, 1), opts.max_k)
        self._k: dict[str, int] = {}

    @classmethod
    def from_options(cls, options: HeuristicOptions) -> HeuristicPolicy:
        return cls(options)

    def choose(self, ctx: DecisionContext) -> SpecConfig:
        return self._configs[self._k.get(ctx.request_id, self._start)]

    def observe(self, stats: StepStats) -> None:
        if stats.draft_tokens <= 0:
            return
        k = self._k.get(stats.request_id, self._start)
        k = min(k + 2, self.options.max_k) if stats.accepted_tokens >= k else max(k - 1, 1)
        remember(self._k, stats.request_id, k)
