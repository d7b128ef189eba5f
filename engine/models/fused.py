"""A leaner forward for an int8 draft of the Llama family (Llama, Qwen2): fused projections, fewer ops per layer.

At one token per row an int8 draft forward pays per call: fbgemm's dynamic GEMV quantizes its input every call, and
transformers' decoder layer adds dozens of small ops around it. Here each layer runs one q/k/v GEMV and one gate/up
GEMV instead of five (weights concatenated before quantization, with a scale per output channel since the fused
projections differ in range), and attention, RoPE and RMSNorm are written inline. The q/k/v and gate/up GEMVs of a
0.5B layer took 120 instead of 205 us in an ad-hoc timing; the whole forward stays bound by reading the weights (the
LM head alone reads 136 MB), so it gains less: the ``draft int8`` rows of benchmarks/engine_vs_hf.py's cost curve
time it against transformers' forward. The draft only
proposes tokens and the target verifies every one, so the output stays lossless; with float projections the forward
matches transformers' within 1e-4 in float32 (tests/engine/test_kv.py).

Only the layers' projections are copied: embeddings, norms, rotary tables, ``o_proj``, ``down_proj`` and the LM head
are the model's own modules, so the model stays a complete transformers model (assisted generation keeps using it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPast

from engine.models.quantize import quantize_int8

SUPPORTED = frozenset({"llama", "qwen2"})


def fusable(model: nn.Module) -> bool:
    """Whether ``model`` has the plain Llama-family layer this forward reproduces."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return (config.model_type in SUPPORTED and config.hidden_act == "silu"
            and not getattr(config, "mlp_bias", False) and getattr(config, "pretraining_tp", 1) == 1
            and all(kind == "full_attention" for kind in layer_types))


def _concat(linears: list[nn.Linear]) -> nn.Linear:
    weight = torch.cat([linear.weight for linear in linears])
    has_bias = linears[0].bias is not None
    out = nn.Linear(weight.shape[1], weight.shape[0], bias=has_bias, dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        out.weight.copy_(weight)
        if has_bias:
            out.bias.copy_(torch.cat([linear.bias for linear in linears]))
    return out


class FusedProjections(nn.Module):
    """One layer's q/k/v and gate/up projections, each as one linear."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = _concat([attn.q_proj, attn.k_proj, attn.v_proj])
        self.gate_up = _concat([mlp.gate_proj, mlp.up_proj])


def fuse_projections(model: nn.Module) -> nn.ModuleList:
    """Float copies of every layer's fused projections; take them before ``model``'s linears are quantized."""
    if not fusable(model):
        raise ValueError(f"model type {model.config.model_type!r}: the fused forward reproduces plain "
                         f"{'/'.join(sorted(SUPPORTED))} layers (SiLU MLP without bias, full attention)")
    return nn.ModuleList(FusedProjections(layer) for layer in model.get_decoder().layers)


def _rms_norm(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    return norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class FusedDecoder(nn.Module):
    """Drop-in for ``model.get_decoder()`` as ``engine.kv.BatchKV`` calls it: token ids, an additive 4D mask, positions
    and a cache whose layers' ``update`` returns the keys and values to attend to."""

    def __init__(self, model: nn.Module, projections: nn.ModuleList) -> None:
        super().__init__()
        decoder = model.get_decoder()
        config = model.config
        self.embed, self.norm, self.rotary = decoder.embed_tokens, decoder.norm, decoder.rotary_emb
        self.layers = decoder.layers
        self.projections = projections
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.intermediate = config.intermediate_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                cache, use_cache: bool = True) -> BaseModelOutputWithPast:
        batch, width = input_ids.shape
        x = self.embed(input_ids)
        cos, sin = self.rotary(x, position_ids)
        cos, sin = cos[:, None], sin[:, None]
        split = (self.heads, self.kv_heads, self.kv_heads)
        for index, (layer, fused) in enumerate(zip(self.layers, self.projections, strict=True)):
            h = _rms_norm(x, layer.input_layernorm)
            qkv = fused.qkv(h).view(batch, width, sum(split), self.head_dim).transpose(1, 2)
            q, k, v = qkv.split(split, 1)
            k, v = cache.layers[index].update(_rotate(k, cos, sin), v)
            attn = F.scaled_dot_product_attention(_rotate(q, cos, sin), k, v, attn_mask=attention_mask,
                                                  scale=layer.self_attn.scaling, enable_gqa=True)
            x = x + layer.self_attn.o_proj(attn.transpose(1, 2).reshape(batch, width, -1))
            gate, up = fused.gate_up(_rms_norm(x, layer.post_attention_layernorm)).split(self.intermediate, -1)
            x = x + layer.mlp.down_proj(F.silu(gate) * up)
        return BaseModelOutputWithPast(last_hidden_state=_rms_norm(x, self.norm))


def quantize_int8_fused(model: nn.Module) -> tuple[nn.Module, FusedDecoder | None]:
    """``model`` with dynamic int8 weights (``engine.models.quantize``), and a fused int8 decoder on it where its
    architecture allows one (None otherwise)."""
    projections = fuse_projections(model) if fusable(model) else None  # from the float weights
    model = quantize_int8(model)
    # a scale per output channel: one per tensor over fused projections would coarsen the narrowest-ranged one
    return model, None if projections is None else FusedDecoder(model, quantize_int8(projections, per_channel=True))
