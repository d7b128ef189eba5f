"""The report's curves, from replay over the traces recorded in the demo priced by the cost model calibrated in it:
acceptance per draft position, and decode tokens/s against k and batch size, per workload and method.

Replay is exact for greedy decoding (``tuner.replay.outcome``): the acceptance curves are what each method would have
accepted on the demo's own outputs; tokens/s is the cost model's price of those steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.config import OFF, SpecConfig
from policies.cost_model import CostModel
from tuner.replay import prepare
from tuner.traces import Trace
from tuner.tuning.scoring import ReplayScorer
from tuner.tuning.space import Candidate


@dataclass(frozen=True)
class AcceptanceCurve:
    workload: str
    method: str
    rates: tuple[float, ...]  # per position d = 1..k (see ``acceptance_curves``)


@dataclass(frozen=True)
class ThroughputCurve:
    workload: str
    method: str  # "off" has one point per batch size, at k = 0
    batch_size: int
    ks: tuple[int, ...]
    tokens_per_s: tuple[float, ...]


def methods_of(traces: Sequence[Trace]) -> tuple[str, ...]:
    return ("draft", "ngram") if all(t.has_draft for t in traces) else ("ngram",)


def acceptance_curves(traces: dict[str, list[Trace]], k: int) -> list[AcceptanceCurve]:
    """Per workload and method, a chain of depth ``k`` stepped through every trace: at each position d, the share of
    steps that asked the drafter for d tokens or more (fewer are asked near the end) whose token at d was accepted.
    A lookup that found nothing counts as a miss."""
    curves = []
    for workload, group in traces.items():
        for method in methods_of(group):
            config = SpecConfig(method=method, k=k)
            asked, hits = [0] * k, [0] * k
            for trace in prepare(group):
                p = 0
                while p < trace.length:
                    outcome = trace.step(p, config)
                    for d in range(outcome.asked):
                        asked[d] += 1
                        hits[d] += d < outcome.accepted
                    p += outcome.emitted
            curves.append(AcceptanceCurve(workload, method, tuple(h / a for h, a in zip(hits, asked) if a)))
    return curves


def throughput_curves(traces: dict[str, list[Trace]], cost: CostModel, ks: Sequence[int],
                      batch_sizes: Sequence[int]) -> list[ThroughputCurve]:
    """Per workload, off and each method's chain at every k, at every batch size (``ReplayScorer`` repeats the
    traces, so batch size B always means B requests decoding together)."""
    curves = []
    for workload, group in traces.items():
        scorer = ReplayScorer(group, cost, {b: 1.0 for b in batch_sizes})
        off = _by_batch(scorer, OFF)
        curves += [ThroughputCurve(workload, "off", b, (0,), (off[b],)) for b in batch_sizes]
        for method in methods_of(group):
            by_k = [_by_batch(scorer, SpecConfig(method=method, k=k)) for k in ks]
            curves += [ThroughputCurve(workload, method, b, tuple(ks), tuple(row[b] for row in by_k))
                       for b in batch_sizes]
    return curves


def _by_batch(scorer: ReplayScorer, config: SpecConfig) -> dict[int, float]:
    return {b.batch_size: b.tokens_per_s for b in scorer.score(Candidate(config)).buckets}
