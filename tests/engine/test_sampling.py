"""Rejection sampling keeps the target distribution: the kernel directly, and the engine end to end."""

from __future__ import annotations

import itertools

import pytest
import torch

from engine.config import SpecConfig, TreeShape
from engine.engine import Request, SpecEngine
from engine.sampling import SamplingParams, judge, sample, to_probs
from tests.engine.tiny import tiny_model

N = 40_000


def total_variation(counts: torch.Tensor, probs: torch.Tensor) -> float:
    return 0.5 * float((counts / counts.sum() - probs).abs().sum())


def tv_bound(support: int, n: int) -> float:
    """A generous bound on the TV distance of an n-sample empirical distribution (expected ~ sqrt(support / n))."""
    return 3.0 * (support / n) ** 0.5


def draw_with_draft(p: torch.Tensor, q: torch.Tensor | None, tokens: list[int], gen: torch.Generator) -> int:
    """One step: propose ``tokens`` in turn (drawn from q, or one-hot when q is None), judge, fall back to residual."""
    current = p
    for token in tokens:
        verdict = judge(current, token, q, gen)
        if verdict.accepted:
            return token
        current = verdict.residual
    return sample(current, gen)


@pytest.mark.parametrize("case", ["random_q", "one_hot", "one_hot_siblings", "q_disjoint"])
def test_kernel_preserves_target(case):
    gen = torch.Generator().manual_seed(0)
    vocab = 8
    p = torch.softmax(torch.randn(vocab, generator=gen) * 1.5, -1)
    q = torch.softmax(torch.randn(vocab, generator=gen) * 1.5, -1)
    if case == "q_disjoint":
        q = torch.zeros(vocab)
        q[int(p.argmin())] = 1.0
    counts = torch.zeros(vocab)
    for _ in range(N):
        if case in ("random_q", "q_disjoint"):
            token = draw_with_draft(p, q, [sample(q, gen)], gen)
        elif case == "one_hot":
            token = draw_with_draft(p, None, [int(p.argmax())], gen)
        else:
            token = draw_with_draft(p, None, p.topk(3).indices.tolist(), gen)
        counts[token] += 1
    assert total_variation(counts, p) < tv_bound(vocab, N)


def test_kernel_check_can_fail():
    """The same check rejects a biased sampler (always accepting the draft token)."""
    gen = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(8, generator=gen), -1)
    q = torch.softmax(torch.randn(8, generator=gen) * 3, -1)
    counts = torch.zeros(8)
    for _ in range(N // 4):
        counts[sample(q, gen)] += 1
    assert total_variation(counts, p) > tv_bound(8, N // 4)


def test_top_p_keeps_nucleus():
    probs = to_probs(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])), SamplingParams(temperature=1.0, top_p=0.8))
    assert probs.tolist() == pytest.approx([0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0])


def exact_two_token_distribution(target, prompt: list[int], params: SamplingParams) -> torch.Tensor:
    """p(x1, x2 | prompt) under the target at the sampling parameters, computed by brute force."""
    vocab = target.vocab_size
    model = target.model
    first = to_probs(model(torch.tensor([prompt])).logits[0, -1], params)
    batch = torch.tensor([prompt + [x] for x in range(vocab)])
    second = to_probs(model(batch).logits[:, -1], params)  # [vocab, vocab]
    return first[:, None] * second


@pytest.mark.parametrize("config", [SpecConfig(method="draft", k=2), SpecConfig(method="draft", k=2,
                                                                                   tree=TreeShape(branching=(3, 2))),
                                    SpecConfig(method="ngram", k=2, min_n=1)], ids=lambda c: c.label())
def test_engine_samples_target_distribution(config):
    """The first two emitted tokens of many seeded requests follow the target's joint distribution."""
    vocab = 6
    target, draft = tiny_model(11, vocab=vocab), tiny_model(12, vocab=vocab)
    with torch.no_grad():  # soften the tiny models so every pair has mass
        target.model.get_output_embeddings().weight.mul_(0.15)
        draft.model.get_output_embeddings().weight.mul_(0.15)
    prompt = [1, 2, 3, 1, 2]
    params = dict(max_new_tokens=2, temperature=1.0, top_p=1.0, ignore_eos=True)
    exact = exact_two_token_distribution(target, prompt, SamplingParams(**params))
    n = 6000
    engine = SpecEngine(target, draft, max_batch=256)
    requests = [Request(str(i), prompt, SamplingParams(**params, seed=i), config) for i in range(n)]
    out = engine.run(requests)
    counts = torch.zeros(vocab, vocab)
    for tokens, _ in out.values():
        counts[tokens[0], tokens[1]] += 1
    assert total_variation(counts.flatten(), exact.flatten()) < tv_bound(vocab * vocab, n)
    drafted = sum(s.draft_tokens for _, s in out.values())
    assert drafted > 0


def test_seeded_runs_reproduce():
    target, draft = tiny_model(11), tiny_model(12)
    params = SamplingParams(max_new_tokens=12, temperature=0.9, top_p=0.9, seed=7, ignore_eos=True)
    runs = []
    for config in itertools.repeat(SpecConfig(method="draft", k=3), 2):
        runs.append(SpecEngine(target, draft).run([Request("a", [4, 5, 6], params, config)])["a"][0])
    assert runs[0] == runs[1]
