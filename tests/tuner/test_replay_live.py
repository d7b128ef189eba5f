"""Replay against the live engine (tiny random models): a static config replays to the live run's step count and
accepted tokens exactly, and a policy makes the same decisions live and in replay given the same statistics."""

from __future__ import annotations

import pytest
import torch

from engine.config import SpecConfig, TreeShape
from engine.engine import Request, SpecEngine
from engine.models.loaded import LoadedModel
from engine.policy import DecisionContext, SpecPolicy, reads_suffix_match
from engine.sampling import SamplingParams
from engine.stats import StepStats
from policies.cost_model import CostModel
from policies.registry import build_policy
from policies.static import StaticPolicy
from tests.engine.tiny import tiny_model
from tests.policies.synthetic import linear_cost
from tuner.record import record
from tuner.replay import replay_cell
from tuner.traces import Trace

torch.set_grad_enabled(False)

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5], [10, 11, 12], [20, 21, 22, 23, 24, 25, 26, 27, 28, 20, 21], [5],
           [40, 41, 42, 43, 40, 41, 42, 43, 40, 41]]
NEW_TOKENS = 16
RANK_CAP = 8
COST = linear_cost(target="tiny-qwen2-1", draft="noisy-tiny-qwen2-1", dtype="float64")


class Recording:
    """Passes calls through to a policy and records each request's decisions in order."""

    def __init__(self, inner: SpecPolicy) -> None:
        self.inner = inner
        self.decisions: dict[str, list[SpecConfig]] = {}
        self.suffix_matches: dict[str, list[int]] = {}
        self.limits: dict[str, list[int | None]] = {}
        self.stats: dict[str, list[StepStats]] = {}

    @property
    def reads_suffix_match(self) -> bool:
        return reads_suffix_match(self.inner)

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        config = self.inner.decide(ctx).at_batch_size(ctx.batch_size)
        self.decisions.setdefault(ctx.request_id, []).append(config)
        self.suffix_matches.setdefault(ctx.request_id, []).append(ctx.suffix_match)
        self.limits.setdefault(ctx.request_id, []).append(ctx.max_new_tokens)
        return config

    def observe(self, stats: StepStats) -> None:
        self.stats.setdefault(stats.request_id, []).append(stats)
        self.inner.observe(stats)


@pytest.fixture(scope="module")
def models() -> tuple[LoadedModel, LoadedModel]:
    target = tiny_model(1)
    draft = tiny_model(1)
    noise = torch.Generator().manual_seed(0)
    for param in draft.model.parameters():  # a draft that agrees with the target often, not always
        param.add_(torch.randn(param.shape, generator=noise, dtype=param.dtype) * 0.3 * param.std())
    return target, draft


def live(models, policy: SpecPolicy, max_batch: int) -> dict[str, list[int]]:
    target, draft = models
    engine = SpecEngine(target, draft, policy=policy, max_batch=max_batch)
    result = engine.run([Request(str(i), p, SamplingParams(max_new_tokens=NEW_TOKENS)) for i, p in enumerate(PROMPTS)])
    return {rid: tokens for rid, (tokens, _) in result.items()}


def record_traces(models, outputs: dict[str, list[int]], new_tokens: int = NEW_TOKENS) -> list[Trace]:
    """The real recorder's traces, whose greedy outputs must be the live run's."""
    target, draft = models
    traces = record(target, draft, "w", [str(i) for i in range(len(PROMPTS))], PROMPTS, new_tokens,
                    rank_cap=RANK_CAP, max_batch=2)
    assert {t.request_id: list(t.output_ids) for t in traces} == outputs
    return traces


def compare(models, make_policy, max_batch: int) -> Recording:
    live_policy = Recording(make_policy())
    outputs = live(models, live_policy, max_batch)
    traces = record_traces(models, outputs)
    assert any(t.output_ids[-1] in t.stop_ids and len(t.output_ids) < NEW_TOKENS for t in traces)  # a stop case
    replay_policy = Recording(make_policy())
    replay_cell(traces, replay_policy, COST, max_batch, "live-check")
    assert replay_policy.decisions == live_policy.decisions
    assert replay_policy.suffix_matches == live_policy.suffix_matches
    assert replay_policy.limits == live_policy.limits
    assert {limit for limits in live_policy.limits.values() for limit in limits} == {NEW_TOKENS}
    for rid, steps in live_policy.stats.items():
        fields = [(s.step, s.batch_size, s.context_len, s.method, s.k, s.draft_tokens, s.accepted_tokens,
                   s.accepted_per_position, s.emitted_tokens, s.verify_tokens, s.batch_verify_tokens, s.finished)
                  for s in steps]
        replayed = [(s.step, s.batch_size, s.context_len, s.method, s.k, s.draft_tokens, s.accepted_tokens,
                     s.accepted_per_position, s.emitted_tokens, s.verify_tokens, s.batch_verify_tokens, s.finished)
                    for s in replay_policy.stats[rid]]
        assert replayed == fields, rid
        assert [s.finished for s in steps] == [False] * (len(steps) - 1) + [True], rid
    return live_policy


@pytest.mark.parametrize("config", [
    SpecConfig(method="draft", k=4),
    SpecConfig(method="draft", k=3, tree=TreeShape(branching=(2, 2))),
    SpecConfig(method="ngram", k=4, min_n=1, max_n=3),
    SpecConfig(method="ngram", k=6, min_n=1, max_n=2, ngram_match="first"),
    SpecConfig(method="ngram", k=3, tree=TreeShape(branching=(2,))),
], ids=lambda c: c.label())
def test_static_config_replays_the_live_run_exactly(models, config):
    compare(models, lambda: StaticPolicy(config), max_batch=3)


@pytest.mark.parametrize("spec", ["heuristic", "goodput:ks=1+2+4", "goodput:methods=ngram,hold=2"])
def test_policy_decides_the_same_live_and_in_replay(models, spec):
    recorded = compare(models, lambda: build_policy(spec, COST), max_batch=2)
    assert len({c for configs in recorded.decisions.values() for c in configs}) > 1  # it did adapt
    matches = [m for values in recorded.suffix_matches.values() for m in values]
    # computed (and nonzero somewhere) only for a policy that reads it
    assert any(m > 0 for m in matches) if recorded.reads_suffix_match else not any(matches)


class Alternating:
    """Drafts with the model every ``period``-th step of a request and runs ``between`` otherwise, so the draft
    model's cache falls behind by whatever the steps between emitted."""

    def __init__(self, period: int, between: SpecConfig) -> None:
        self.period, self.between = period, between

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        return SpecConfig(method="draft", k=3) if ctx.request_step % self.period == 0 else self.between

    def observe(self, stats: StepStats) -> None:
        return None


class CatchUpLog(CostModel):
    """A cost model that logs, per draft-model pass the replay prices, its first forward's catch-up and the rows
    priced as catching up alone."""

    def draft_s(self, batch_size, k, context_len, method, tree=None, catch_up=1, depths=None) -> float:
        if method == "draft":
            PRICED.append((catch_up, []))
        return super().draft_s(batch_size, k, context_len, method, tree, catch_up, depths)

    def catch_up_alone_s(self, missing, context_len) -> float:
        PRICED[-1][1].append(missing)
        return super().catch_up_alone_s(missing, context_len)


PRICED: list[tuple[int, list[int]]] = []


@pytest.mark.parametrize("policy, new_tokens", [
    (lambda: Alternating(3, SpecConfig(method="ngram", k=3, min_n=1, max_n=2)), NEW_TOKENS),
    (lambda: Alternating(20, SpecConfig()), 48),  # 20 tokens behind: rows catch up alone
], ids=["lookups-between", "far-behind"])
def test_replay_prices_the_catch_up_the_engine_feeds_its_draft_model(models, policy, new_tokens):
    target, draft = models
    engine = SpecEngine(target, draft, policy=policy(), max_batch=2)
    kv = engine.drafters["draft"].kv
    propose, feed_alone, forward = engine.drafters["draft"].propose, kv.feed_alone, kv.forward
    fed: list[tuple[int, list[int]]] = []

    def logged_propose(inputs):
        fed.append((0, []))
        return propose(inputs)

    def logged_feed_alone(rows):
        fed[-1][1].extend(sorted(len(tokens) + 1 for tokens in rows.values()))  # + the root, fed with the batch
        feed_alone(rows)

    def logged_forward(nodes):
        if fed[-1][0] == 0:  # the pass's first forward: its width is the widest catch-up
            fed[-1] = (nodes.tokens.shape[1], fed[-1][1])
        return forward(nodes)

    engine.drafters["draft"].propose, kv.feed_alone, kv.forward = logged_propose, logged_feed_alone, logged_forward
    requests = [Request(str(i), p, SamplingParams(max_new_tokens=new_tokens)) for i, p in enumerate(PROMPTS)]
    done = engine.run(requests)
    traces = record_traces(models, {rid: tokens for rid, (tokens, _) in done.items()}, new_tokens)
    PRICED.clear()
    replay_cell(traces, policy(), CatchUpLog(**COST.model_dump()), 2, "catch-up")
    assert [(c, sorted(alone)) for c, alone in PRICED] == fed
    assert max(c for c, _ in fed) > 1  # the draft model caught up on tokens emitted without it
    assert any(alone for _, alone in fed) == (new_tokens == 48)
