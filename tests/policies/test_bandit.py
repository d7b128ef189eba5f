from __future__ import annotations

from collections import Counter

from engine.config import SpecConfig
from policies.bandit import BanditOptions, BanditPolicy
from tests.policies.synthetic import context, step_stats

# tokens per step and seconds per step of each arm: the measured tokens/s is emitted / seconds
ARMS = {
    "off": (1, 0.050),  # 20 tok/s
    "ngram k=2 chain n=1..4": (2, 0.060),  # 33 tok/s
    "ngram k=4 chain n=1..4": (3, 0.070),  # 43 tok/s  <- best at small batch
    "draft k=2 chain": (2, 0.080),  # 25 tok/s
}


def play(policy: BanditPolicy, steps: int, batch: int = 1, payoff=ARMS, workload: str = "w") -> Counter[str]:
    pulls: Counter[str] = Counter()
    for step in range(1, steps + 1):
        config = policy.decide(context(f"r{step % 3}", workload, batch_size=batch, output_len=step))
        pulls[config.label()] += 1
        emitted, seconds = payoff[config.label()]
        stats = step_stats(config, emitted - 1, step=step, request_id=f"r{step % 3}", workload=workload,
                           batch_size=batch, draft_s=0.0, verify_s=seconds)
        policy.observe(stats)
    return pulls


def arms() -> list[SpecConfig]:
    return [SpecConfig(), SpecConfig(method="ngram", k=2), SpecConfig(method="ngram", k=4),
            SpecConfig(method="draft", k=2)]


def test_converges_on_the_best_arm():
    policy = BanditPolicy(BanditOptions(), arms=arms())
    pulls = play(policy, 2000)
    assert pulls.most_common(1)[0][0] == "ngram k=4 chain n=1..4"
    assert pulls["ngram k=4 chain n=1..4"] > 0.6 * 2000
    assert all(pulls[label] >= 1 for label in ARMS)  # every arm was tried


def test_buckets_learn_separately():
    big_batch = {**ARMS, "off": (1, 0.010)}  # at batch 16 off wins: 100 tok/s
    policy = BanditPolicy(BanditOptions(), arms=arms())
    play(policy, 1500, batch=1)
    pulls = play(policy, 1500, batch=16, payoff=big_batch)
    assert pulls.most_common(1)[0][0] == "off"
    assert policy.decide(context(batch_size=1)).label() == "ngram k=4 chain n=1..4"
    assert policy.decide(context(batch_size=12)).label() == "off"  # 12 shares the bucket of 16


def test_default_arms_from_options():
    policy = BanditPolicy(BanditOptions(methods=("ngram",), ks=(4, 1), off=False))
    assert [a.label() for a in policy.arms] == ["ngram k=1 chain n=1..4", "ngram k=4 chain n=1..4"]


def test_steps_of_another_method_are_not_credited():
    policy = BanditPolicy(BanditOptions(methods=("ngram",), ks=(2,), off=True))
    first = policy.decide(context())
    assert first.label() == "off"
    policy.observe(step_stats(SpecConfig(method="ngram", k=2), 2))  # ran n-gram although off was decided
    assert policy.pulls("w", 1) == {"off": 0, "ngram k=2 chain n=1..4": 0}
