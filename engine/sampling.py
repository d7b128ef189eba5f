"""Sampling parameters, logits -> probabilities, and the rejection-sampling kernel that keeps speculation lossless."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from pydantic import BaseModel, ConfigDict, Field


class SamplingParams(BaseModel):
    """Per-request decoding parameters. ``temperature == 0`` is greedy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_new_tokens: int = Field(default=128, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop_token_ids: frozenset[int] | None = None  # None: the model's end-of-sequence tokens
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Softmax at ``temperature`` restricted to the top-p nucleus (at least one token kept), in float32.

    Both target and draft logits go through this, so acceptance preserves the distribution plain sampling would use.
    """
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > params.top_p  # mass before this token already exceeds p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclass
class Verdict:
    accepted: bool
    residual: torch.Tensor | None  # target distribution to continue with when rejected


def judge(p: torch.Tensor, token: int, q: torch.Tensor | None, generator: torch.Generator | None) -> Verdict:
    """Accept or reject one draft token proposed from ``q`` (None = one-hot: a deterministic proposal).

    q(x) <= p(x): always accept; q(x) > p(x): accept with prob p(x)/q(x); on rejection continue from the residual
    max(p - q, 0), renormalised (for one-hot q: p with x removed). Applied to siblings in turn, this samples exactly p.
    """
    q_x = 1.0 if q is None else float(q[token])
    p_x = float(p[token])
    u = float(torch.rand((), generator=generator))
    if q_x > 0 and u < min(1.0, p_x / q_x):
        return Verdict(True, None)
    if q is None:
        residual = p.clone()
        residual[token] = 0.0
    else:
        residual = (p - q).clamp_(min=0.0)
    total = float(residual.sum())
    return Verdict(False, residual / total if total > 0 else p)
