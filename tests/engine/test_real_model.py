"""The real SmolLM2-135M: speculation stays lossless with a draft that is close but not identical to the target."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from engine.config import SpecConfig, TreeShape
from engine.engine import Request, SpecEngine
from engine.models import load_model
from engine.models.identity import model_identity
from engine.models.packed import PackedDecoder, packable
from engine.prompts import encode_chat
from engine.sampling import SamplingParams

pytestmark = pytest.mark.model

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Repeat this sentence exactly, then once more: the quick brown fox jumps over the lazy dog.",
    "Why is the sky blue? Answer in two sentences.",
]


@pytest.fixture(scope="module")
def models():
    return load_model("smollm2-135m", dtype="float32"), load_model("smollm2-135m", dtype="bfloat16")


def hf_greedy(loaded, ids: list[int], n: int) -> list[int]:
    out = loaded.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                max_new_tokens=n, do_sample=False, eos_token_id=sorted(loaded.eos_token_ids))
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("config", [SpecConfig(method="draft", k=4), SpecConfig(method="ngram", k=5),
                                    SpecConfig(method="draft", k=3, tree=TreeShape(branching=(2, 2)))],
                         ids=lambda c: c.label())
def test_bf16_self_draft_is_lossless(models, config):
    target, draft = models
    prompts = [encode_chat(target.tokenizer, [{"role": "user", "content": p}]) for p in PROMPTS]
    expected = [hf_greedy(target, ids, 32) for ids in prompts]
    if packable(draft.model):  # a bf16 draft on a CPU with oneDNN bf16 kernels drafts through packed linears
        assert isinstance(draft.decoder, PackedDecoder)
    engine = SpecEngine(target, draft, max_batch=len(prompts))
    out = engine.run([Request(str(i), ids, SamplingParams(max_new_tokens=32), config) for i, ids in enumerate(prompts)])
    assert [out[str(i)][0] for i in range(len(prompts))] == expected
    if config.method == "draft":
        drafted = sum(s.draft_tokens for _, s in out.values())
        accepted = sum(s.accepted_tokens for _, s in out.values())
        steps = sum(s.steps for _, s in out.values())
        # a bf16 copy agrees often; not always on most CPUs, but on the AMX host of 2026-12-07 in all 58 drafts
        assert 0.5 * steps < accepted <= drafted


def test_generate_cli_json():
    cmd = [sys.executable, "-m", "tuner.cli", "generate", "--target", "smollm2-135m", "--draft", "smollm2-135m",
           "--draft-dtype", "bfloat16", "--method", "draft", "--k", "3", "--max-new-tokens", "12", "--chat",
           "--prompt", "Say hello.", "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(result.stdout)
    assert set(report) == {"text", "token_ids", "stats"}
    assert set(report["stats"]) == {"steps", "draft_tokens", "accepted_tokens", "mean_acceptance_length",
                                    "accepted_per_position", "draft_s", "verify_s", "tokens_per_s"}
    assert len(report["token_ids"]) <= 12 and report["text"]


def test_generate_cli_bad_input_is_one_line():
    cmd = [sys.executable, "-m", "tuner.cli", "generate", "--target", "smollm2-135m", "--method", "draft",
           "--k", "40", "--max-new-tokens", "4", "--prompt", "x"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error:") and "k" in result.stderr and "Traceback" not in result.stderr


def test_int8_draft_is_lossless(models):
    target, _ = models
    draft = load_model("smollm2-135m", dtype="int8")
    assert draft.precision == "int8" and model_identity(draft) == "smollm2-135m@int8"
    assert not any(type(m) is torch.nn.Linear for m in draft.model.modules())
    assert draft.fast_decoder is not None  # SmolLM2 is a Llama: the engine drafts through the fused forward
    prompts = [encode_chat(target.tokenizer, [{"role": "user", "content": p}]) for p in PROMPTS]
    expected = [hf_greedy(target, ids, 32) for ids in prompts]
    engine = SpecEngine(target, draft, max_batch=len(prompts))
    config = SpecConfig(method="draft", k=4)
    out = engine.run([Request(str(i), ids, SamplingParams(max_new_tokens=32), config) for i, ids in enumerate(prompts)])
    assert [out[str(i)][0] for i in range(len(prompts))] == expected
    accepted = sum(s.accepted_tokens for _, s in out.values())
    assert accepted > 0.5 * sum(s.steps for _, s in out.values())  # int8 weights still agree with fp32 most steps
