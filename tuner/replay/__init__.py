"""Counterfactual replay: score any policy or static config on recorded traces with a measured cost model."""

from __future__ import annotations

from collections.abc import Sequence

from policies.cost_model import CostModel
from policies.registry import PolicySpec, build_policy, without_draft
from tuner.replay.oracle import oracle_cell, static_grid
from tuner.replay.outcome import Outcome, ReplayError, ReplayTrace
from tuner.replay.simulator import WAVES, CellResult, check_identity, filled, prepare, repeated, replay_cell
from tuner.traces import Trace, by_workload

__all__ = ["WAVES", "CellResult", "Outcome", "ReplayError", "ReplayTrace", "check_identity", "filled", "oracle_cell",
           "prepare", "repeated", "replay_all", "replay_cell", "static_grid"]


def replay_all(traces: list[Trace], policies: Sequence[str], cost: CostModel, batch_sizes: Sequence[int],
               oracle: bool = False, waves: int = WAVES, progress: bool = False) -> list[CellResult]:
    """One cell per (workload, batch size, policy) with a fresh policy each, plus the oracle per cell if asked; a
    cell replays at least ``waves`` batches' worth of requests (``filled``), and a workload recorded without a draft
    model replays each policy ``without_draft``. ``progress``: a bar on stderr, one step per (workload, batch size)."""
    from tqdm import tqdm

    specs = [PolicySpec.parse(p) for p in policies]
    for spec in specs:
        build_policy(spec, cost)  # fail on a bad spec before any replay work
    check_identity(traces, cost)
    groups = by_workload(traces)
    cells = []
    with tqdm(total=len(groups) * len(batch_sizes), desc="replay", unit="cell", disable=not progress, delay=1.0) as bar:
        for group in groups.values():
            # a workload recorded without a draft model replays the policies' defaults on n-gram lookups
            group_specs = specs if all(t.has_draft for t in group) else [without_draft(s) for s in specs]
            group = prepare(group)
            for batch_size in batch_sizes:
                cell = filled(group, batch_size, waves)
                for spec in group_specs:
                    cells.append(replay_cell(cell, build_policy(spec, cost), cost, batch_size, spec.text))
                if oracle:
                    cells.append(oracle_cell(cell, cost, batch_size)[0])
                bar.update()
    return cells
