"""``spectune replay``: score policies (and the per-cell static oracle) on recorded traces with a measured cost
model, per workload and batch size."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.errors import UsageError, user_errors

if TYPE_CHECKING:
    from policies.cost_model import CostModel
    from tuner.replay import CellResult


def parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--batch-sizes: {text!r} is not a comma-separated list of integers") from None
    if not sizes or any(b < 1 for b in sizes):
        raise UsageError(f"--batch-sizes: {text!r} must list batch sizes of at least 1")
    return sizes


def load_cost_model(path: Path | None) -> CostModel:
    from pydantic import ValidationError

    from policies.cost_model import CostModel
    from tuner.cli.errors import describe_validation_error

    if path is None:
        raise UsageError("--cost-model: required; measure one with `spectune calibrate` and pass its JSON file")
    try:
        return CostModel.from_json(path.read_bytes())
    except FileNotFoundError:
        raise UsageError(f"--cost-model: {path}: no such file") from None
    except ValidationError as exc:
        raise UsageError(f"--cost-model: {path}: {describe_validation_error(exc)}") from None


def _print_table(cells: list[CellResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="replay: decode tokens/s per workload and batch size")
    for name, justify in (("workload", "left"), ("batch", "right"), ("policy", "left"), ("tokens/s", "right"),
                          ("mean acc. len", "right"), ("steps", "right"), ("requests", "right"), ("config", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in cells:
        table.add_row(c.workload, str(c.batch_size), c.policy, f"{c.tokens_per_s:.2f}",
                      f"{c.mean_acceptance_length:.2f}", str(c.steps), str(c.requests), c.config)
    Console(width=None if sys.stdout.isatty() else 160).print(table)  # pipes and logs get a readable width


def replay(
    traces: Annotated[Path, typer.Option("--traces", help="Directory of *.jsonl traces (or one .jsonl file).")],
    policy: Annotated[list[str] | None, typer.Option("--policy", help="Policy SPEC NAME[:key=value,...], e.g. "
                                                     "static:method=ngram,k=4, heuristic, goodput, bandit. Repeatable."
                                                     )] = None,
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", help="Comma-separated batch sizes.")] = "1,2,4,8,16",
    cost_model: Annotated[Path | None, typer.Option("--cost-model", help="Cost model JSON from `spectune calibrate`."
                                                    )] = None,
    oracle: Annotated[bool, typer.Option("--oracle", help="Also grid-search static configs per cell.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with a list of cells.")] = False,
    waves: Annotated[int, typer.Option("--waves", min=1, help="A cell at batch size B replays at least WAVES x B "
                                       "requests, the recorded ones repeated, so that B really decode together.")
                     ] = 8,  # tuner.replay.WAVES, not imported here: --help stays fast
) -> None:
    """Replay recorded traces through policies with continuous batching; print tokens/s (over the steps that ran
    the full batch) and mean acceptance length per (workload, batch size)."""
    from tuner.replay import replay_all
    from tuner.traces import load_traces

    with user_errors():
        sizes = parse_batch_sizes(batch_sizes)
        if not policy and not oracle:
            raise UsageError("--policy: give at least one policy SPEC (or --oracle)")
        cost = load_cost_model(cost_model)
        cells = replay_all(load_traces(traces), policy or [], cost, sizes, oracle=oracle, waves=waves, progress=True)
    if as_json:
        print(json.dumps({"cells": [c.to_dict() for c in cells]}, indent=1))
    else:
        _print_table(cells)
