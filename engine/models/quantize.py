"""Dynamic int8 weights for a CPU draft model.

A draft only proposes tokens; the target verifies every one, so a cheaper, slightly less exact draft keeps the output
lossless and costs only acceptance. On x86 CPUs fbgemm's int8 GEMV is about twice as fast as bfloat16: the 0.5B
draft costs 0.24 instead of 0.46 of a 1.5B bf16 target forward (benchmarks/engine_vs_hf.py cost curve).
Activations stay float32; weights of every ``nn.Linear`` (the LM head included) become int8 per channel.
"""

from __future__ import annotations

import warnings

import torch


def require_cpu(device: torch.device) -> None:
    if device.type != "cpu":
        raise ValueError(f"dtype: int8 is CPU-only (fbgemm dynamic quantization), not for {device.type}; "
                         "use bfloat16 or float16 there")


def quantize_int8(model: torch.nn.Module, per_channel: bool = False) -> torch.nn.Module:
    """Quantize ``model`` in place and return it; ``per_channel``: a weight scale per output channel instead of one
    per tensor."""
    require_cpu(next(model.parameters()).device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's notice that eager quantization moves to torchao (GPU-first)
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        spec = {torch.nn.Linear: per_channel_dynamic_qconfig} if per_channel else {torch.nn.Linear}
        return quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)
