from __future__ import annotations

from engine.config import SpecConfig
from engine.stats import StepStats
from policies.heuristic import HeuristicOptions, HeuristicPolicy
from tests.policies.synthetic import context, step_stats


def run(policy: HeuristicPolicy, accepted: list[int | None], request_id: str = "r0") -> list[int]:
    """k decided before each step; ``None`` = the drafter proposed nothing that step."""
    ks = []
    for step, a in enumerate(accepted, start=1):
        config = policy.decide(context(request_id, output_len=step))
        ks.append(config.k)
        proposed = 0 if a is None else None
        policy.observe(step_stats(config, a or 0, step=step, request_id=request_id, proposed=proposed))
    return ks


def test_transformers_rule():
    policy = HeuristicPolicy()
    # start 5; full -> 7; full -> 9; 3 of 9 -> 8; none proposed -> 8; 0 -> 7; 7 of 7 -> 9
    assert run(policy, [5, 7, 3, None, 0, 7, 0]) == [5, 7, 9, 8, 8, 7, 9]


def test_k_never_below_one_nor_above_max():
    policy = HeuristicPolicy(HeuristicOptions(k=2, max_k=6))
    assert run(policy, [0, 0, 0, 1, 3, 5, 6, 6]) == [2, 1, 1, 1, 3, 5, 6, 6]


def test_state_is_per_request():
    policy = HeuristicPolicy(HeuristicOptions(method="ngram", k=3))
    run(policy, [3, 5], request_id="a")
    assert policy.decide(context("a")).k == 7
    assert policy.decide(context("b")) == SpecConfig(method="ngram", k=3)


def test_capped_depth_counts_as_not_fully_accepted():
    policy = HeuristicPolicy()
    config = policy.decide(context())
    # near the end of the request the engine drafts only 2 of k=5; both accepted is still not k accepted
    policy.observe(StepStats(1, "r0", "w", 1, 10, "draft", 2, 2, 2, (1, 1), 3, 3, 3, 0.01, 0.02, 0.0))
    assert config.k == 5 and policy.decide(context()).k == 4
