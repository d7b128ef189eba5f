"""Microseconds per decision for every policy (target: <= 50 us): ``decide``, the ``observe`` of its step, and the
two together, on a synthetic but busy stream: 8 concurrent requests over 2 workloads, contexts growing, acceptance
varying step to step.

    .venv/bin/python benchmarks/policy_latency.py [--steps 4000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from operator import add
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/policies.py would shadow the ``policies`` package

from engine.config import OFF
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.cost_model import CostModel, EngineIdentity, uniform_grid
from policies.registry import build_policy

SPECS = ["static:method=ngram,k=4", "heuristic", "goodput", "goodput:trees=chain+2x2+4", "bandit",
         "goodput:hold=3,cooldown=16"]
BATCH = 8


def cost_model() -> CostModel:
    """Shaped like MEASURED.md's bf16 CPU curves: 275 ms for 1 token, +8 ms per extra token, +16% per batch
    doubling; the draft costs 0.4x the target."""
    def target(b: float, t: float, c: float) -> float:
        return 0.275 * (1 + 0.16 * (b - 1) / 2) + 0.008 * (b * t - b) + 2e-5 * b * c

    grid = (1, 2, 4, 8, 16), (1, 2, 4, 8, 16, 32), (64, 256, 1024, 4096)
    return CostModel(engine=EngineIdentity(target="synthetic", draft="synthetic-draft", dtype="bfloat16"),
                     target=uniform_grid(*grid, target),
                     draft=uniform_grid(*grid, lambda b, t, c: 0.4 * target(b, t, c)), ngram_s=3e-5)


def measure(spec: str, cost: CostModel, steps: int) -> tuple[list[float], list[float]]:
    """Microseconds of each ``decide`` and of the ``observe`` of its step, in order."""
    policy = build_policy(spec, cost)
    decides, observes = [], []
    last: dict[str, StepStats | None] = {}
    for step in range(1, steps + 1):
        # as the engine runs a step: every request decides, the step runs, then every request is observed
        pending = []
        for b in range(BATCH):
            rid = f"{b}-{step // 97}"  # requests finish and new ones arrive
            workload = "code" if b % 2 else "prose"
            ctx = DecisionContext(rid, workload, BATCH, 200 + step % 3000, 120, step % 97, step % 97, OFF,
                                  last.get(rid), suffix_match=(step * 7 + b) % 13)  # every suffix-match bucket
            t0 = time.perf_counter_ns()
            config = policy.decide(ctx)
            decides.append((time.perf_counter_ns() - t0) / 1000)
            pending.append((b, rid, workload, ctx, config))
        for b, rid, workload, ctx, config in pending:
            accepted = (step * 31 + b * 7) % 5
            k = config.k if config.speculative else 0
            a = min(accepted, k)
            stats = StepStats(step, rid, workload, BATCH, ctx.context_len, config.method if k else "off", k, k, a,
                              tuple(1 if d < a else 0 for d in range(k)), a + 1, 1 + k, BATCH * (1 + k),
                              0.01 * k, 0.3, float(step))
            t0 = time.perf_counter_ns()
            policy.observe(stats)
            observes.append((time.perf_counter_ns() - t0) / 1000)
            last[rid] = stats
    warm = len(decides) // 10  # drop the warm-up tenth
    return decides[warm:], observes[warm:]


def summary(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), statistics.fmean(ordered), ordered[int(0.99 * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000, help="engine steps per policy (8 decisions each)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over all policies, interleaved")
    args = parser.parse_args()
    if args.repeats < 1 or args.steps < 10:
        parser.error("--repeats must be at least 1 and --steps at least 10")
    cost = cost_model()
    parts = ("decide", "observe", "decide + observe")
    stats: dict[str, dict[str, list[tuple[float, float, float]]]] = {spec: {p: [] for p in parts} for spec in SPECS}
    for _ in range(args.repeats):  # the host's speed drifts: interleave the policies and repeat
        for spec in SPECS:
            decides, observes = measure(spec, cost, args.steps)
            for part, samples in zip(parts, (decides, observes, list(map(add, decides, observes))), strict=True):
                stats[spec][part].append(summary(samples))
    print(f"median over {args.repeats} rounds (range) of each round's statistic, {args.steps * BATCH} decisions each")
    print(f"{'policy':<30} {'part':<17} {'median us':>18} {'mean us':>18} {'p99 us':>20}")
    for spec, by_part in stats.items():
        for part, rounds in by_part.items():
            cells = [f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})" for v in zip(*rounds, strict=True)]
            print(f"{spec:<30} {part:<17} {cells[0]:>18} {cells[1]:>18} {cells[2]:>20}")


if __name__ == "__main__":
    main()
