"""The fused int8 draft forward (``engine.models.fused``): used where the architecture allows, lossless in the engine,
refused with the model type named where it does not apply. Its logits against transformers' are in test_kv.py."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine.config import SpecConfig, TreeShape
from engine.engine import Request, SpecEngine
from engine.models.fused import FusedDecoder, fuse_projections, quantize_int8_fused
from engine.models.loaded import LoadedModel
from engine.sampling import SamplingParams
from tests.engine.tiny import plain_greedy, tiny_model

torch.set_grad_enabled(False)

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5], [10, 11, 12], [20, 21, 22, 23, 24, 25, 26, 27, 28, 20, 21], [5]]


def int8_copy(seed: int, arch: str) -> LoadedModel:
    model, fused = quantize_int8_fused(tiny_model(seed, arch=arch, dtype=torch.float32).model)
    return LoadedModel.from_model(model, precision="int8", fast_decoder=fused)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("config", [SpecConfig(method="draft", k=4),
                                    SpecConfig(method="draft", k=3, tree=TreeShape(branching=(2, 2)))],
                         ids=lambda c: c.label())
def test_an_int8_copy_of_the_target_drafts_through_the_fused_forward_losslessly(arch, config):
    target = tiny_model(1, arch=arch, dtype=torch.float32)
    draft = int8_copy(1, arch)
    assert isinstance(draft.decoder, FusedDecoder)
    calls = []
    draft.decoder.register_forward_pre_hook(lambda *_: calls.append(1))
    engine = SpecEngine(target, draft, max_batch=3)
    out = engine.run([Request(str(i), p, SamplingParams(max_new_tokens=16), config) for i, p in enumerate(PROMPTS)])
    assert [out[str(i)][0] for i in range(len(PROMPTS))] == [plain_greedy(target, p, 16) for p in PROMPTS]
    assert calls, "the engine drafted without the fused forward"
    summaries = [s for _, s in out.values()]
    assert sum(s.accepted_tokens for s in summaries) > 0.5 * sum(s.steps for s in summaries)


def test_an_architecture_it_does_not_reproduce_keeps_transformers_forward():
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, mlp_bias=True)
    model, fused = quantize_int8_fused(LlamaForCausalLM(config).eval())
    assert fused is None
    assert LoadedModel.from_model(model).decoder is model.get_decoder()
    with pytest.raises(ValueError, match="model type 'llama'"):
        fuse_projections(LlamaForCausalLM(config))
