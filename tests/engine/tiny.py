"""Tiny randomly initialised causal LMs built from a config, for fast exact tests."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from engine.models.loaded import LoadedModel


def tiny_model(seed: int = 0, vocab: int = 96, arch: str = "qwen2", dtype: torch.dtype = torch.float64,
               layers: int = 2) -> LoadedModel:
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, eos_token_id=vocab - 1,
                  bos_token_id=0, pad_token_id=0)
    if arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True))
    # random init gives near-uniform logits; sharpen them so greedy decoding has clear winners
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    model.to(dtype)
    return LoadedModel.from_model(model, name=f"tiny-{arch}-{seed}")


def plain_greedy(loaded: LoadedModel, prompt: list[int], max_new_tokens: int,
                 stop: set[int] | None = None) -> list[int]:
    """Reference: no cache, one full forward per token."""
    stop = loaded.eos_token_ids if stop is None else stop
    ids = list(prompt)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = loaded.model(torch.tensor([ids])).logits[0, -1]
            token = int(logits.argmax())
            out.append(token)
            ids.append(token)
            if token in stop:
                break
    return out
