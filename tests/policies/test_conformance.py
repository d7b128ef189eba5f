"""One conformance suite for every policy the registry knows, plain and wrapped."""

from __future__ import annotations

import builtins
import math
import subprocess
import sys

import pytest

from engine.config import SpecConfig
from engine.policy import SpecPolicy
from engine.stats import StepStats
from policies.registry import POLICIES, build_policy
from tests.policies.synthetic import context, linear_cost, step_stats

SPECS = [
    "static",
    "static:method=ngram,k=4",
    "static:method=draft,k=3,tree=2x2",
    "heuristic",
    "heuristic:method=ngram,k=2",
    "goodput",
    "goodput:methods=ngram,ks=1+2+4",
    "goodput:trees=chain+2x2",
    "bandit",
    "bandit:methods=ngram,ks=2+4,off=false",
    "goodput:hold=3,cooldown=4",
    "heuristic:hold=2",
    "bandit:cooldown=3",
]
COST = linear_cost()


def make(spec: str) -> SpecPolicy:
    return build_policy(spec, COST)


def drive(policy: SpecPolicy, steps: int = 60, requests: int = 3) -> list[SpecConfig]:
    """A scripted run: several requests and batch sizes, each step's acceptance a fixed function of the step."""
    decisions = []
    for step in range(1, steps + 1):
        batch = 1 + step % 5
        for r in range(min(requests, batch)):
            rid = f"r{r}"
            config = policy.decide(context(rid, "w" if r % 2 == 0 else "v", batch, 100 + 3 * step, step, step))
            decisions.append(config)
            policy.observe(step_stats(config, accepted=(step * 7 + r) % 5, step=step, request_id=rid,
                                      workload="w" if r % 2 == 0 else "v", batch_size=batch,
                                      draft_s=0.002 * config.k if config.speculative else 0.0,
                                      verify_s=0.02 + 0.001 * config.k))
    return decisions


def test_every_registered_policy_is_covered():
    assert set(POLICIES) == {spec.split(":")[0] for spec in SPECS}


@pytest.mark.parametrize("spec", SPECS)
def test_returns_valid_configs(spec):
    policy = make(spec)
    assert isinstance(policy, SpecPolicy)
    for config in drive(policy):
        assert isinstance(config, SpecConfig)
        assert SpecConfig.model_validate(config.model_dump()) == config
        assert config.tree.top_k is None  # replay can score every shipped policy's choices exactly


@pytest.mark.parametrize("spec", SPECS)
def test_deterministic_given_the_same_calls(spec):
    assert drive(make(spec)) == drive(make(spec))


@pytest.mark.parametrize("spec", SPECS)
def test_decide_without_observe_repeats_itself(spec):
    policy = make(spec)
    drive(policy, steps=20)
    ctx = context("r1", batch_size=2, output_len=7)
    assert policy.decide(ctx) == policy.decide(ctx)


@pytest.mark.parametrize("spec", SPECS)
def test_respects_max_batch_size(spec):
    name, _, rest = spec.partition(":")
    if name == "static" and "method" not in rest:
        rest = "method=ngram" + ("," + rest if rest else "")
    policy = make(f"{name}:{rest + ',' if rest else ''}max_batch_size=2")
    for step in range(1, 40):
        for batch in (3, 4, 16):
            config = policy.decide(context(f"r{step}", batch_size=batch, output_len=step))
            assert not config.speculative
            policy.observe(step_stats(config, 0, step=step, request_id=f"r{step}", batch_size=batch))


EDGE_STATS = [
    StepStats(1, "never-decided", "w", 1, 0, "off", 0, 0, 0, (), 1, 1, 1, 0.0, 0.0, 0.0),
    StepStats(2, "r0", "w", 1, 10, "draft", 0, 0, 0, (), 1, 1, 1, 0.0, 0.0, 0.0),
    StepStats(3, "r0", "w", 4, 10, "draft", 40, 40, 45, (1,) * 40, 46, 41, 100, 0.0, 0.0, 0.0),
    StepStats(4, "r0", "new-workload", 1, 10, "ngram", 3, 2, 0, (0, 0, 0), 0, 3, 3, math.nan, math.inf, 0.0),
    StepStats(5, "r0", "w", 1, 10, "ngram", 2, 7, 2, (1, 1), 2, 8, 8, 0.01, 0.02, 0.0),
    StepStats(6, "r0", "w", 0, -1, "mystery", -1, -1, -1, (), -1, 0, 0, -1.0, -1.0, 0.0),
]


@pytest.mark.parametrize("spec", SPECS)
def test_observe_never_raises_on_edge_stats(spec):
    policy = make(spec)
    for stats in EDGE_STATS:
        policy.decide(context(stats.request_id, stats.workload))
        policy.observe(stats)
        policy.observe(stats)  # twice: an observe without a decide before it
    assert isinstance(policy.decide(context("r0", "new-workload", batch_size=3)), SpecConfig)


@pytest.mark.parametrize("spec", SPECS)
def test_no_io(spec, monkeypatch):
    policy = make(spec)

    def forbidden(*args, **kwargs):
        raise AssertionError("a policy touched the file system")

    monkeypatch.setattr(builtins, "open", forbidden)
    drive(policy, steps=30)


def test_policies_import_no_torch():
    code = "import sys, policies.registry; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
