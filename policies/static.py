"""``static``: one fixed config for every request and step (``static`` alone is off)."""

from __future__ import annotations

from engine.config import Method, NgramMatch, SpecConfig
from engine.policy import DecisionContext
from policies.base import Policy, PolicyOptions, Tree


class StaticOptions(PolicyOptions):
    method: Method = "off"
    k: int = 4
    tree: Tree | None = None
    top_k: int | None = None
    budget: int | None = None
    min_n: int = 1
    max_n: int = 4
    ngram_match: NgramMatch = "recent"
    max_batch_size: int | None = None


class StaticPolicy(Policy):
    """Always the same config, e.g. ``static:method=ngram,k=4`` or ``static:method=draft,k=3,tree=2x2``."""

    name = "static"
    Options = StaticOptions

    def __init__(self, config: SpecConfig) -> None:
        self.config = config

    @classmethod
    def from_options(cls, options: StaticOptions) -> StaticPolicy:
        fields = options.model_dump(exclude={"tree", "top_k", "budget"})
        tree = options.tree.model_dump() if options.tree is not None else {}
        if options.top_k is not None or options.budget is not None:
            tree = {**tree, "top_k": options.top_k, "budget": options.budget}
        return cls(SpecConfig.model_validate({**fields, "tree": tree}))

    def choose(self, ctx: DecisionContext) -> SpecConfig:
        return self.config
