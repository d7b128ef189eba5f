"""The per-cell oracle: replay a grid of static configs and keep the fastest."""

from __future__ import annotations

from collections.abc import Sequence

from engine.config import MAX_TREE_NODES, OFF, SpecConfig, TreeShape
from policies.cost_model import CostModel
from policies.static import StaticPolicy
from tuner.replay.outcome import ReplayTrace
from tuner.replay.simulator import CellResult, prepare, replay_cell
from tuner.traces import Trace

DRAFT_CHAIN_KS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
DRAFT_TREES = ((2,), (3,), (4,), (2, 2), (2, 2, 2))
DRAFT_TREE_KS = (2, 3, 4, 6, 8)
NGRAM_KS = (1, 2, 3, 4, 6, 8, 12, 16)
NGRAM_WINDOWS = ((1, 2), (1, 4), (2, 4), (3, 8))


def static_grid(traces: Sequence[Trace]) -> list[SpecConfig]:
    """Off, n-gram chains over k and n-gram windows, and, when every trace has draft ranks, draft-model chains and the
    static trees their ``rank_cap`` can score."""
    grid = [OFF]
    grid += [SpecConfig(method="ngram", k=k, min_n=lo, max_n=hi) for k in NGRAM_KS for lo, hi in NGRAM_WINDOWS]
    if traces and all(t.has_draft for t in traces):
        rank_cap = min(t.rank_cap for t in traces)
        grid += [SpecConfig(method="draft", k=k) for k in DRAFT_CHAIN_KS]
        for branching in DRAFT_TREES:
            if max(branching) > rank_cap:
                continue
            tree = TreeShape(branching=branching)
            grid += [SpecConfig(method="draft", k=k, tree=tree) for k in DRAFT_TREE_KS
                     if k >= len(branching) and tree.max_nodes(k) <= MAX_TREE_NODES]
    return grid


def oracle_cell(traces: Sequence[Trace | ReplayTrace], cost: CostModel, batch_size: int,
                grid: list[SpecConfig] | None = None) -> tuple[CellResult, list[CellResult]]:
    """The best static config of ``grid`` (default ``static_grid``) for this workload and batch size, and every
    config's result."""
    prepared = prepare(traces)
    if grid is None:
        grid = static_grid([t.trace for t in prepared])
    results = [replay_cell(prepared, StaticPolicy(config), cost, batch_size, f"static {config.label()}")
               for config in grid]
    best = max(results, key=lambda r: r.tokens_per_s)
    oracle = CellResult(**{**best.to_dict(), "policy": "oracle"})
    return oracle, results
