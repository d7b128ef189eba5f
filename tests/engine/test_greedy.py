"""Greedy speculation is lossless: token for token equal to plain greedy decoding, whatever the drafter, tree, batch
or mid-stream config change."""

from __future__ import annotations

import pytest
import torch

from engine.config import SpecConfig, TreeShape
from engine.engine import Request, SpecEngine
from engine.policy import DecisionContext
from engine.sampling import SamplingParams
from engine.stats import StepStats
from tests.engine.tiny import plain_greedy, tiny_model

torch.set_grad_enabled(False)

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5], [10, 11, 12], [20, 21, 22, 23, 24, 25, 26, 27, 28, 20, 21], [5],
           [40, 41, 42, 43, 40, 41, 42, 43, 40, 41]]
NEW_TOKENS = 20

CONFIGS = [
    SpecConfig(),
    SpecConfig(method="ngram", k=4, min_n=1, max_n=3),
    SpecConfig(method="ngram", k=4, min_n=1, max_n=3, ngram_match="first"),
    SpecConfig(method="ngram", k=3, tree=TreeShape(branching=(2, 2))),
    SpecConfig(method="ngram", k=5, tree=TreeShape(top_k=2, budget=6)),
    SpecConfig(method="draft", k=1),
    SpecConfig(method="draft", k=5),
    SpecConfig(method="draft", k=3, tree=TreeShape(branching=(3, 2))),
    SpecConfig(method="draft", k=4, tree=TreeShape(top_k=3, budget=8)),
]


@pytest.fixture(scope="module")
def target():
    return tiny_model(1)


@pytest.fixture(scope="module")
def reference(target):
    return [plain_greedy(target, p, NEW_TOKENS) for p in PROMPTS]


def run(engine: SpecEngine, config: SpecConfig, prompts=PROMPTS, new_tokens=NEW_TOKENS):
    requests = [Request(str(i), p, SamplingParams(max_new_tokens=new_tokens), config) for i, p in enumerate(prompts)]
    result = engine.run(requests)
    return [result[str(i)][0] for i in range(len(prompts))], [result[str(i)][1] for i in range(len(prompts))]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label())
@pytest.mark.parametrize("drafter", ["random", "self"])
@pytest.mark.parametrize("max_batch", [1, 3])
def test_equal_to_plain_greedy(target, reference, config, drafter, max_batch):
    draft = tiny_model(2) if drafter == "random" else tiny_model(1)
    outputs, summaries = run(SpecEngine(target, draft, max_batch=max_batch), config)
    assert outputs == reference
    if config.method == "draft" and drafter == "self":
        assert sum(s.accepted_tokens for s in summaries) > 0.8 * sum(s.steps for s in summaries)
    if config.method == "draft" and drafter == "random":
        assert sum(s.accepted_tokens for s in summaries) <= 0.2 * sum(s.draft_tokens for s in summaries)


def test_self_draft_accepts_every_chain_token(target, reference):
    outputs, summaries = run(SpecEngine(target, tiny_model(1)), SpecConfig(method="draft", k=4))
    assert outputs == reference
    for s in summaries:
        if s.finish_reason == "length":
            assert s.accepted_tokens == s.draft_tokens  # draft == target: nothing is ever rejected


def test_llama_arch_with_tied_embeddings():
    target = tiny_model(3, arch="llama")
    ref = [plain_greedy(target, p, NEW_TOKENS) for p in PROMPTS]
    outputs, _ = run(SpecEngine(target, tiny_model(4, arch="llama"), max_batch=4), SpecConfig(method="draft", k=3))
    assert outputs == ref


class Cycle:
    """A policy that changes method, k and tree every step."""

    configs = [SpecConfig(method="draft", k=2), SpecConfig(), SpecConfig(method="ngram", k=6),
               SpecConfig(method="draft", k=7, tree=TreeShape(branching=(2,))), SpecConfig(method="ngram", k=1)]

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        return self.configs[(ctx.request_step + int(ctx.request_id)) % len(self.configs)]

    def observe(self, stats: StepStats) -> None:
        assert stats.accepted_tokens <= stats.draft_tokens


def test_config_changes_mid_stream(target, reference):
    engine = SpecEngine(target, tiny_model(1), policy=Cycle(), max_batch=5)
    outputs, _ = run(engine, SpecConfig())
    assert outputs == reference


class LongGaps:
    """Drafts every 24th step of a request and runs off in between, so each draft pass finds the draft model's
    cache 24 tokens behind: far enough to catch up alone (``engine.drafters.catch_up``)."""

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        return SpecConfig(method="draft", k=3) if ctx.request_step % 24 == 0 else SpecConfig()

    def observe(self, stats: StepStats) -> None:
        return None


def test_drafting_resumes_losslessly_after_the_draft_cache_fell_far_behind(target):
    prompts, new_tokens = PROMPTS[:3], 60
    engine = SpecEngine(target, tiny_model(1), policy=LongGaps(), max_batch=3)
    drafter = engine.drafters["draft"]
    jobs, fed_alone = {}, []
    propose, feed_alone = drafter.propose, drafter.kv.feed_alone

    def logged_propose(inputs):
        jobs.update({job.row: job for job in inputs})
        return propose(inputs)

    def logged_feed_alone(rows):
        lengths = drafter.kv.lengths.tolist()
        # exactly what the row's draft cache lacks, but its root (which the batch's draft pass feeds)
        assert all(tokens == jobs[b].tokens[lengths[b]:-1] and len(tokens) >= 16 for b, tokens in rows.items())
        fed_alone.append(len(rows))
        feed_alone(rows)

    drafter.propose, drafter.kv.feed_alone = logged_propose, logged_feed_alone
    outputs, summaries = run(engine, SpecConfig(), prompts, new_tokens)
    assert outputs == [plain_greedy(target, p, new_tokens) for p in prompts]
    assert fed_alone
    assert all(s.accepted_tokens == s.draft_tokens > 0 for s in summaries)  # self-draft accepts everything


def test_requests_join_and_leave_mid_batch(target):
    engine = SpecEngine(target, tiny_model(1), max_batch=3)
    lengths = [5, 17, 9, 12, 3, 20]
    expected = {str(i): plain_greedy(target, PROMPTS[i % len(PROMPTS)], n) for i, n in enumerate(lengths)}
    got: dict[str, list[int]] = {str(i): [] for i in range(len(lengths))}
    pending = list(enumerate(lengths))
    for _ in range(2):
        i, n = pending.pop(0)
        engine.add(Request(str(i), PROMPTS[i % len(PROMPTS)], SamplingParams(max_new_tokens=n),
                           SpecConfig(method="draft", k=3)))
    steps = 0
    while engine.has_work() or pending:
        if pending and steps % 2 == 1:  # arrivals while others are mid-generation
            i, n = pending.pop(0)
            engine.add(Request(str(i), PROMPTS[i % len(PROMPTS)], SamplingParams(max_new_tokens=n),
                               SpecConfig(method="ngram", k=2)))
        for out in engine.step():
            got[out.request_id] += out.new_token_ids
        steps += 1
        assert engine.num_running <= 3
    assert got == expected


def test_cache_holds_only_accepted_tokens(target):
    """Rejected draft entries are dropped: the committed cache length equals the tokens emitted so far minus one."""
    engine = SpecEngine(target, tiny_model(2))
    prompt = PROMPTS[0]
    engine.add(Request("a", prompt, SamplingParams(max_new_tokens=15), SpecConfig(method="draft", k=6)))
    emitted = 0
    while engine.has_work():
        for out in engine.step():
            emitted += len(out.new_token_ids)
            assert out.stats.draft_tokens == min(6, 15 - (emitted - len(out.new_token_ids)) - 1)
        if engine.num_running:
            assert engine.kv.committed_slots == len(prompt) + emitted - 1
            assert int(engine.kv.lengths[0]) == len(prompt) + emitted - 1


def test_stop_token_ends_request(target, reference):
    stop = reference[0][6]
    cut = reference[0][: reference[0].index(stop) + 1]
    for config in (SpecConfig(), SpecConfig(method="draft", k=8)):
        engine = SpecEngine(target, tiny_model(1))
        out = engine.run([Request("a", PROMPTS[0], SamplingParams(max_new_tokens=NEW_TOKENS,
                                                                  stop_token_ids=frozenset({stop})), config)])
        tokens, summary = out["a"]
        assert tokens == cut and summary.finish_reason == "stop"


def test_step_statistics_are_consistent(target):
    engine = SpecEngine(target, tiny_model(1), max_batch=2)
    for i, p in enumerate(PROMPTS[:2]):
        params = SamplingParams(max_new_tokens=12, ignore_eos=True)
        engine.add(Request(str(i), p, params, SpecConfig(method="draft", k=3)))
    totals = {"0": 0, "1": 0}
    while engine.has_work():
        outs = engine.step()
        for out in outs:
            s = out.stats
            assert s.batch_size == len(outs)
            assert sum(s.accepted_per_position) == s.accepted_tokens
            assert s.emitted_tokens == len(out.new_token_ids)
            assert s.batch_verify_tokens == sum(o.stats.verify_tokens for o in outs)
            assert (s.prompt_len, s.output_len, s.max_new_tokens) == \
                (len(PROMPTS[int(out.request_id)]), totals[out.request_id], 12)
            totals[out.request_id] += s.emitted_tokens
            if out.finished:
                assert out.summary.output_len == totals[out.request_id] == 12
                assert out.summary.mean_acceptance_length == pytest.approx(
                    1 + out.summary.accepted_tokens / out.summary.drafts)
