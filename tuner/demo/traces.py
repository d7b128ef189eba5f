"""Traces from the demo's own traffic: the engine's greedy output of each prompt (its first answer in the controller
phase; greedy verification makes it the same whatever config served it) plus the draft model's teacher-forced ranks,
so the replay search scores configs on exactly what was served."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from engine.models.loaded import LoadedModel
from tuner.demo.traffic import DemoPrompt, Sample
from tuner.record import draft_views, make_traces
from tuner.traces import Trace, write_traces

RANK_CAP = 16  # the search's largest k and tree branching


def traces_from_samples(target: LoadedModel, draft: LoadedModel | None, prompts: dict[str, list[DemoPrompt]],
                        samples: Sequence[Sample], max_tokens: int) -> dict[str, list[Trace]]:
    """Per workload, one trace per prompt answered (stopped or at the length limit; aborted answers are skipped)."""
    first: dict[tuple[str, str], Sample] = {}
    for sample in sorted(samples, key=lambda s: s.started):
        if sample.finish_reason in ("stop", "length"):
            first.setdefault((sample.workload, sample.prompt_id), sample)
    out = {}
    for workload, mine in prompts.items():
        answered = [(p, first[(workload, p.id)]) for p in mine if (workload, p.id) in first]
        if not answered:
            continue
        pairs = [(list(p.ids), list(s.output_ids)) for p, s in answered]
        views = None
        if draft is not None:
            with torch.no_grad():
                views = draft_views(draft, pairs, RANK_CAP)
        out[workload] = make_traces(target, draft, workload, [p.id for p, _ in answered], [a for a, _ in pairs],
                                    [b for _, b in pairs], max_tokens, RANK_CAP, views)
    return out


def write_trace_dir(directory: Path, traces: dict[str, list[Trace]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for workload, group in traces.items():
        write_traces(directory / f"{workload}.jsonl", group)
