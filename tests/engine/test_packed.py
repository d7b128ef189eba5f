"""oneDNN-packed bfloat16 linears (``engine.models.packed``): the engine's forwards give transformers' logits bit for
bit, the model keeps its own modules, and a packed draft drafts losslessly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine.config import SpecConfig
from engine.engine import Request, SpecEngine
from engine.kv import BatchKV, Nodes
from engine.models.loaded import LoadedModel
from engine.models.packed import PackedDecoder, packable, packed_decoder
from engine.sampling import SamplingParams
from tests.engine.tiny import plain_greedy, tiny_model

torch.set_grad_enabled(False)

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5], [10, 11, 12], [20, 21, 22, 23, 24, 25, 26, 27, 28, 20, 21], [5]]
needs_bf16 = pytest.mark.skipif(not packable(tiny_model(dtype=torch.bfloat16).model),
                                reason="this CPU's oneDNN has no bfloat16 matmul")


def packed_copy(seed: int, arch: str) -> LoadedModel:
    model = tiny_model(seed, arch=arch, dtype=torch.bfloat16).model
    return LoadedModel.from_model(model, precision="bfloat16", fast_decoder=packed_decoder(model))


def step_logits(loaded: LoadedModel, decoder) -> list[torch.Tensor]:
    """Logits of a 3-node tree step after the prefill, then of two one-token steps, over a batch of the prompts."""
    kv = BatchKV(loaded.model, decoder=decoder)
    kv.prefill([p[:-1] for p in PROMPTS])
    tree = [([p[-1], 7, 8, 9], [-1, 0, 0, 1]) for p in PROMPTS]
    out = []
    for rows, keep in ((tree, [0, 1, 3]), ([([11], [-1])] * len(PROMPTS), [0]), ([([12], [-1])] * len(PROMPTS), [0])):
        nodes = Nodes.trees(rows, kv.device)
        out.append(kv.logits(kv.forward(nodes)[nodes.valid]))
        kv.commit([keep] * len(PROMPTS))
    return out


@needs_bf16
@pytest.mark.parametrize("arch", ["qwen2", "llama"])  # llama: a tied LM head
def test_packed_forwards_give_transformers_logits_bit_for_bit(arch):
    loaded = packed_copy(0, arch)
    assert isinstance(loaded.decoder, PackedDecoder)
    stock = step_logits(loaded, loaded.model.get_decoder())
    packed = step_logits(loaded, loaded.decoder)
    assert all(torch.equal(a, b) for a, b in zip(stock, packed, strict=True))


@needs_bf16
def test_the_model_keeps_its_own_modules_and_shares_every_tensor_but_the_linears():
    loaded = packed_copy(0, "qwen2")
    model, packed = loaded.model, loaded.decoder
    assert all(type(m) is not nn.Linear for m in packed.decoder.modules())
    assert sum(isinstance(m, nn.Linear) for m in model.modules()) == 7 * 2 + 1  # 2 layers' projections + the head
    own = {p.data_ptr() for p in model.parameters()}
    assert all(p.data_ptr() in own for p in packed.parameters())  # norms, embeddings, biases: the model's tensors


@needs_bf16
def test_a_packed_draft_drafts_losslessly():
    target = tiny_model(1, dtype=torch.float32)
    draft = packed_copy(1, "qwen2")  # the target's own weights in bfloat16: high acceptance, not total
    calls = []
    draft.decoder.register_forward_pre_hook(lambda *_: calls.append(1))
    engine = SpecEngine(target, draft, max_batch=3)
    config = SpecConfig(method="draft", k=4)
    out = engine.run([Request(str(i), p, SamplingParams(max_new_tokens=16), config) for i, p in enumerate(PROMPTS)])
    assert [out[str(i)][0] for i in range(len(PROMPTS))] == [plain_greedy(target, p, 16) for p in PROMPTS]
    assert calls, "the engine drafted without the packed forward"


def test_float32_weights_keep_transformers_forward():
    model = tiny_model(0, dtype=torch.float32).model
    assert packed_decoder(model) is None
    assert LoadedModel.from_model(model).decoder is model.get_decoder()
