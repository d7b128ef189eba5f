"""Score a candidate: tokens/s and inter-token latency, per batch size and over the workload's batch-size mix.

Replay scores come from the replay simulator on recorded traces priced by a cost model. Inter-token latency: a step
that emits ``e`` tokens in ``s`` seconds gives each of them ``s / e``; percentiles are over the tokens of the steps at
the cell's batch size, the steps its tokens/s counts. Live scores come
from real requests on an engine (sent one at a time, so batch size 1), with per-request decode time per token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from engine.config import SpecConfig
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.cost_model import CostModel
from storage.schemas import BucketMeasurement, Measurements
from tuner.engines.base import EngineAdapter
from tuner.replay import WAVES, ReplayTrace, filled, prepare, replay_cell
from tuner.traces import Trace
from tuner.tuning.space import Candidate


@dataclass(frozen=True)
class Bucket:
    batch_size: int
    tokens_per_s: float
    mean_acceptance_length: float | None
    latency_ms: tuple[float, float, float]  # p50, p90, p99 inter-token latency
    samples: int  # request steps (replay) or requests (live)


@dataclass(frozen=True)
class Score:
    """A candidate's buckets and their mix-weighted tokens/s and p99 inter-token latency."""

    buckets: tuple[Bucket, ...]
    tokens_per_s: float
    p99_ms: float

    def measurements(self, off: Score | None = None) -> Measurements:
        base = {b.batch_size: b.tokens_per_s for b in off.buckets} if off is not None else {}
        return Measurements(buckets=[BucketMeasurement(
            batch_size=b.batch_size, tokens_per_s=b.tokens_per_s, tokens_per_s_off=base.get(b.batch_size),
            mean_acceptance_length=b.mean_acceptance_length, latency_p50_ms=b.latency_ms[0],
            latency_p90_ms=b.latency_ms[1], latency_p99_ms=b.latency_ms[2], samples=b.samples) for b in self.buckets])


def normalize_mix(mix: Mapping[int, float] | None) -> dict[int, float]:
    """Weights summing to 1; ValueError naming ``batch_mix`` for bad entries. ``None`` means batch size 1 only."""
    if not mix:
        return {1: 1.0}
    if any(int(b) < 1 for b in mix) or any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"batch_mix: batch sizes must be >= 1 and weights >= 0 with a positive sum, got {dict(mix)}")
    total = sum(mix.values())
    return {int(b): w / total for b, w in sorted(mix.items()) if w > 0}


def _percentiles(values: Sequence[float], weights: Sequence[float] | None = None) -> tuple[float, float, float]:
    if not values:
        return 0.0, 0.0, 0.0
    arr = np.asarray(values, dtype=float)
    if weights is None:
        p50, p90, p99 = np.percentile(arr, [50, 90, 99])
        return float(p50), float(p90), float(p99)
    order = np.argsort(arr)
    cum = np.cumsum(np.asarray(weights, dtype=float)[order])
    cum /= cum[-1]
    return tuple(float(arr[order][min(np.searchsorted(cum, q), len(arr) - 1)])  # type: ignore[return-value]
                 for q in (0.5, 0.9, 0.99))


def _combine(buckets: list[Bucket], mix: dict[int, float]) -> Score:
    return Score(tuple(buckets), tokens_per_s=sum(mix[b.batch_size] * b.tokens_per_s for b in buckets),
                 p99_ms=sum(mix[b.batch_size] * b.latency_ms[2] for b in buckets))


def spliced(low: Score, high: Score, split: int, mix: Mapping[int, float]) -> Score:
    """About what a candidate running ``low`` up to batch size ``split`` and ``high`` above it scores, from their
    buckets (about: a cell's drain at its end runs below its batch size, where the other config would apply)."""
    buckets = [b for b in low.buckets if b.batch_size <= split] + [b for b in high.buckets if b.batch_size > split]
    return _combine(buckets, dict(mix))


class _ScheduledPolicy:
    """A candidate as a policy: the config in force at the step's batch size. Records the inter-token latency of
    each request step at the cell's full batch size (a step's whole cost, the engine's overhead included), the steps
    its tokens/s counts."""

    def __init__(self, candidate: Candidate, cost: CostModel, batch_size: int) -> None:
        self.candidate = candidate
        self.overhead_s = cost.overhead_s(batch_size)  # per step, on top of its forwards
        self.batch_size = batch_size
        self.latency_ms: list[float] = []
        self.tokens: list[int] = []

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        return self.candidate.at(ctx.batch_size)

    def observe(self, stats: StepStats) -> None:
        if stats.emitted_tokens and stats.batch_size == self.batch_size:
            seconds = stats.draft_s + stats.verify_s + self.overhead_s
            self.latency_ms.append(1000 * seconds / stats.emitted_tokens)
            self.tokens.append(stats.emitted_tokens)


class ReplayScorer:
    """Scores candidates on one workload's traces at its batch-size mix; each batch size's cell is filled once
    (``tuner.replay.filled``: at least ``waves`` batches' worth of requests, the recorded ones repeated)."""

    def __init__(self, traces: Sequence[Trace], cost: CostModel, mix: Mapping[int, float] | None,
                 waves: int = WAVES) -> None:
        if not traces:
            raise ValueError("traces: no traces for this workload")
        self.cost = cost
        self.mix = normalize_mix(mix)
        prepared = prepare(traces)
        self.cells: dict[int, list[ReplayTrace]] = {b: filled(prepared, b, waves) for b in self.mix}

    def score(self, candidate: Candidate) -> Score:
        buckets = []
        for batch_size, cell_traces in self.cells.items():
            policy = _ScheduledPolicy(candidate, self.cost, batch_size)
            cell = replay_cell(cell_traces, policy, self.cost, batch_size, candidate.label())
            buckets.append(Bucket(batch_size, cell.tokens_per_s, cell.mean_acceptance_length,
                                  _percentiles(policy.latency_ms, policy.tokens), cell.steps))
        return _combine(buckets, self.mix)


def measure_live(engine: EngineAdapter, workload: str, candidate: Candidate, prompts: Sequence[str],
                 max_tokens: int) -> Score:
    """Apply the candidate's batch-size-1 config, send every prompt once, and read decode tokens/s and latency."""
    if not prompts:
        raise ValueError("prompts: live scoring needs the workload's prompts")
    engine.apply(workload, candidate.at(1))
    timings = [engine.complete(p, workload=workload, max_tokens=max_tokens).timing for p in prompts]
    tokens = sum(t.output_tokens for t in timings)
    decode = sum(t.decode_s for t in timings)
    per_token = [1000 * t.decode_s / t.output_tokens for t in timings if t.output_tokens]
    drafted = sum(t.draft_tokens for t in timings)
    accepted = sum(t.accepted_tokens for t in timings)
    steps = tokens - accepted
    acceptance = tokens / steps if drafted and steps > 0 else None
    bucket = Bucket(1, tokens / decode if decode > 0 else 0.0, acceptance, _percentiles(per_token), len(timings))
    return _combine([bucket], {1: 1.0})
