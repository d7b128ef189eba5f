"""oneDNN-packed bfloat16 linears for a CPU model: the same layers and weights, a faster matmul kernel.

At the few rows a decode step feeds (1-20 tokens per request), ``F.linear`` in bfloat16 on CPU streams the weights at
about a third of the memory bandwidth (16-18 GB/s over 660 MB of weights on 2 cores of this host, where a plain read
reaches 53 GB/s). oneDNN's matmul on weights reordered once into its blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, what inductor's CPU freezing uses) reached 24-27 GB/s on the same
stream with identical results, and the 1.5B target's one-token step at batch 4 took 107 instead of 204 ms (ad-hoc
timings; the cost curve of benchmarks/engine_vs_hf.py times it against transformers' forward).

``packed_decoder`` copies a model's decoder module tree around the model's own tensors, replaces every linear by a
packed copy and packs the LM head too; the model itself is unchanged (transformers' generate keeps using it). The
engine runs the copy through ``LoadedModel.decoder``. The packed weights are a second copy of the linears' weights in
memory.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def packable(model: nn.Module) -> bool:
    """Whether ``model``'s linears can run packed: bfloat16 weights on a CPU whose oneDNN has bfloat16 kernels."""
    weight = model.get_output_embeddings().weight
    return (weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and torch.backends.mkldnn.is_available()
            and torch.ops.mkldnn._is_mkldnn_bf16_supported())


class PackedLinear(nn.Module):
    """``nn.Linear`` with its weight reordered for oneDNN."""

    def __init__(self, linear: nn.Linear, rows_hint: int = 4) -> None:
        super().__init__()
        self.out_features = linear.out_features
        with torch.no_grad():
            self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), rows_hint))
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), self.packed, self.bias, "none", [], "")
        return y.view(*x.shape[:-1], self.out_features)


def _pack_linears(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, PackedLinear(child))
        else:
            _pack_linears(child)


class PackedDecoder(nn.Module):
    """Drop-in for ``model.get_decoder()`` as ``engine.kv.BatchKV`` calls it, plus ``head``, the packed LM head."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        decoder = model.get_decoder()
        shared = {id(p): p for p in decoder.parameters()} | {id(b): b for b in decoder.buffers()}
        self.decoder = copy.deepcopy(decoder, memo=shared)  # new modules around the same tensors
        _pack_linears(self.decoder)
        self.head = PackedLinear(model.get_output_embeddings())

    def forward(self, *args, **kwargs):
        return self.decoder(*args, **kwargs)


def packed_decoder(model: nn.Module) -> PackedDecoder | None:
    """A packed copy of ``model``'s decoder where ``packable``, else None."""
    return PackedDecoder(model) if packable(model) else None
