"""The real SmolLM2-135M (fp32): traces from ``tuner.record`` replay static configs to the live engine's step count
and accepted tokens exactly."""

from __future__ import annotations

import pytest
import torch

from engine.config import SpecConfig, TreeShape
from engine.engine import Request, SpecEngine
from engine.models import load_model
from engine.sampling import SamplingParams
from policies.static import StaticPolicy
from tests.policies.synthetic import linear_cost
from tuner.record import encode_prompt, record
from tuner.replay import replay_cell
from tuner.workloads import PromptRecord

pytestmark = pytest.mark.model

PROMPTS = [
    PromptRecord(id="code", messages=[{"role": "user", "content": "Write a Python function that reverses a list."}]),
    PromptRecord(id="copy", messages=[{"role": "user", "content": "Repeat exactly: the cat sat on the mat, the cat "
                                       "sat on the mat, the cat sat on the mat."}]),
    PromptRecord(id="prose", prompt="The history of the bicycle begins"),
]
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def recorded():
    target = load_model("smollm2-135m", dtype="float32", progress=False)
    draft = load_model("smollm2-135m", dtype="float32", progress=False)
    noise = torch.Generator().manual_seed(0)
    for param in draft.model.parameters():  # a draft that agrees with the target often, not always
        param.add_(torch.randn(param.shape, generator=noise) * 0.05 * param.std())
    prompts = [encode_prompt(target, p) for p in PROMPTS]
    traces = record(target, draft, "mix", [p.id for p in PROMPTS], prompts, NEW_TOKENS, rank_cap=4, max_batch=2)
    return target, draft, traces


@pytest.mark.parametrize("config", [SpecConfig(method="draft", k=4), SpecConfig(method="ngram", k=4),
                                    SpecConfig(method="draft", k=3, tree=TreeShape(branching=(2, 2)))],
                         ids=lambda c: c.label())
def test_smollm2_traces_replay_the_live_run_exactly(recorded, config):
    target, draft, traces = recorded
    ranks = [r for t in traces for r in t.draft_rank]
    assert 0 < ranks.count(0) < len(ranks)  # the draft both hits and misses
    engine = SpecEngine(target, draft, max_batch=2)
    live = engine.run([Request(t.request_id, list(t.prompt_ids), SamplingParams(max_new_tokens=NEW_TOKENS), config)
                       for t in traces])
    assert {rid: out for rid, (out, _) in live.items()} == {t.request_id: list(t.output_ids) for t in traces}
    cost = linear_cost(target="smollm2-135m", draft="smollm2-135m", dtype="float32")
    replayed = replay_cell(traces, StaticPolicy(config), cost, 2, "static")
    assert replayed.steps == engine.step_count
    assert replayed.accepted_tokens == sum(s.accepted_tokens for _, s in live.values())
    assert replayed.draft_tokens == sum(s.draft_tokens for _, s in live.values())
