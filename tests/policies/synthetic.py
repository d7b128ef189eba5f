"""Small synthetic building blocks shared by the policy and replay tests: cost models, traces, contexts, stats."""

from __future__ import annotations

from collections.abc import Sequence

from engine.config import OFF, SpecConfig
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.cost_model import CostModel, EngineIdentity, uniform_grid
from tuner.traces import Trace

BATCHES = (1, 2, 4, 8, 16)
TOKENS = (1, 2, 4, 8, 16, 32)
CONTEXTS = (64, 256, 1024, 4096)


def linear_cost(base: float = 0.02, per_token: float = 0.0005, per_context: float = 2e-6, draft_base: float = 0.006,
                draft_per_token: float = 0.0002, ngram_s: float = 2e-5, target: str = "t", draft: str | None = "d",
                dtype: str = "bf16", head: tuple[float, float] | None = None) -> CostModel:
    """A cost model whose grid samples ``base + per_token * batch * tokens + per_context * batch * context``, so
    interpolation inside the grid reproduces the formula exactly; with ``head`` (base, per row), LM heads timed
    apart: the target's ``base + per_row * rows``, the draft's half that."""
    grid = uniform_grid(BATCHES, TOKENS, CONTEXTS, lambda b, t, c: base + per_token * b * t + per_context * b * c)
    draft_grid = uniform_grid(BATCHES, TOKENS, CONTEXTS,
                              lambda b, t, c: draft_base + draft_per_token * b * t + per_context / 4 * b * c)
    heads = {}
    if head is not None:
        heads = {name: uniform_grid((1,), (1, 1024), (0,), lambda b, rows, c, share=share: share * (
                     head[0] + head[1] * rows)) for name, share in (("target_head", 1.0), ("draft_head", 0.5))}
    return CostModel(engine=EngineIdentity(target=target, draft=draft, dtype=dtype), target=grid,
                     draft=draft_grid if draft is not None else None, ngram_s=ngram_s, **heads)


def make_trace(output: Sequence[int], prompt: Sequence[int] = (1, 2, 3), max_new_tokens: int | None = None,
               eos: Sequence[int] = (), ranks: Sequence[int] | None = None, rank_cap: int = 8, workload: str = "w",
               request_id: str = "r0", target: str = "t", draft: str | None = "d", dtype: str = "bf16") -> Trace:
    has_draft = ranks is not None
    return Trace(version=1, workload=workload, request_id=request_id, prompt_ids=tuple(prompt),
                 output_ids=tuple(output), max_new_tokens=max_new_tokens or len(output), eos_token_ids=tuple(eos),
                 target=target, draft=draft if has_draft else None, dtype=dtype, rank_cap=rank_cap,
                 draft_rank=tuple(ranks) if has_draft else None,
                 draft_top_prob=tuple(0.5 for _ in output) if has_draft else None,
                 draft_true_prob=tuple(0.5 if r == 0 else 0.1 for r in ranks) if has_draft else None)


def context(request_id: str = "r0", workload: str = "w", batch_size: int = 1, context_len: int = 128,
            output_len: int = 0, request_step: int = 0, requested: SpecConfig = OFF,
            last: StepStats | None = None, batch_context_len: int | None = None,
            suffix_match: int = 0, max_new_tokens: int | None = None) -> DecisionContext:
    return DecisionContext(request_id, workload, batch_size, context_len, 64, output_len, request_step, requested,
                           last, batch_context_len, suffix_match, max_new_tokens)


def step_stats(config: SpecConfig, accepted: int, step: int = 1, request_id: str = "r0", workload: str = "w",
               batch_size: int = 1, context_len: int = 128, draft_s: float = 0.01, verify_s: float = 0.03,
               proposed: int | None = None, finished: bool = False) -> StepStats:
    """Stats of a chain step under ``config`` that accepted ``accepted`` draft tokens (``proposed`` defaults to k;
    0 proposed reports method off, as the engine does)."""
    depth = (config.k if proposed is None else proposed) if config.speculative else 0
    accepted = min(accepted, depth)
    return StepStats(step, request_id, workload, batch_size, context_len, config.method if depth else "off", depth,
                     depth, accepted, tuple(1 if d < accepted else 0 for d in range(depth)), accepted + 1, 1 + depth,
                     batch_size * (1 + depth), draft_s, verify_s, float(step), finished)
