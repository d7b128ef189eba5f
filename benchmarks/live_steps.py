"""One live-check cell step by step: the replay's priced draft and verify seconds beside the live engine's.

``benchmarks/policies.py`` compares a cell's tokens/s predicted by the replay with a live run's. Where they differ,
this says which part of the step the cost model misprices. It re-times the cost model's forwards on this host
(``tuner.calibrate.retime``), replays the cell priced by them and runs it live on the same recorded requests. It
prints both runs' tokens/s and their sums of draft and verify seconds, then the steps side by side. A live step's
``verify_s`` covers the forward, the LM head and the acceptance. Step counts match where the live outputs equal the
recorded ones.

    .venv/bin/python benchmarks/live_steps.py math:1:static:method=draft,k=2 [--dtype float32] [--every 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/policies.py would shadow the ``policies`` package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import pin_threads  # noqa: E402
from engine.engine import Request, SpecEngine  # noqa: E402
from engine.sampling import SamplingParams  # noqa: E402
from engine.stats import StepStats  # noqa: E402
from policies.registry import build_policy  # noqa: E402
from tuner.calibrate import retime  # noqa: E402
from tuner.replay import replay_cell  # noqa: E402


class Recorder:
    """A policy that records each step's first statistics (draft and verify seconds are the step's) and defers the
    rest to the policy it wraps."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.steps: dict[int, StepStats] = {}

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def decide(self, ctx):
        return self.inner.decide(ctx)

    def observe(self, stats: StepStats) -> None:
        self.steps.setdefault(stats.step, stats)
        self.inner.observe(stats)


def parse_cell(text: str) -> tuple[str, int, str]:
    workload, batch, spec = text.split(":", 2)
    return workload, int(batch), spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cell", help="WORKLOAD:BATCH:SPEC, e.g. math:1:static:method=draft,k=2")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="float32")
    parser.add_argument("--every", type=int, default=10, help="print every n-th step after the first 5")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    try:
        workload, batch, spec = parse_cell(args.cell)
    except ValueError:
        parser.error(f"cell: expected WORKLOAD:BATCH:SPEC, got {args.cell!r}")
    if batch < 1 or args.every < 1:
        parser.error("cell: the batch size and --every must be at least 1")
    import benchmarks.policies as bench

    if workload not in bench.WORKLOADS:
        parser.error(f"cell: workload must be one of {', '.join(bench.WORKLOADS)}, got {workload!r}")
    pin_threads(args.threads)
    torch.set_grad_enabled(False)

    models = bench.Models(args.dtype)
    traces = bench.traces_for(workload, slice(0, 4), 96, models)
    cost = bench.cost_model(models)
    try:
        build_policy(spec, cost)
    except ValueError as error:
        parser.error(f"cell: {error}")
    target, draft = models.get()
    now = retime(cost, target, draft, batch)
    predicted = Recorder(build_policy(spec, cost))  # the policy decides on the calibrated model, as in the check
    replayed = replay_cell(traces, predicted, now, batch, spec)
    live = Recorder(build_policy(spec, cost))
    engine = SpecEngine(target, draft, policy=live, max_batch=batch)
    for t in traces:
        engine.add(Request(t.request_id, list(t.prompt_ids), SamplingParams(max_new_tokens=t.max_new_tokens)))
    walls, emitted, first_step, prefills = {}, 0, {}, {}
    while engine.has_work():
        started = time.perf_counter()
        outputs = engine.step()
        walls[engine.step_count] = time.perf_counter() - started
        for out in outputs:
            emitted += len(out.new_token_ids)
            first_step.setdefault(out.request_id, engine.step_count)
            if out.finished:  # requests admitted together share one prefill: count it once, by their first step
                prefills[first_step[out.request_id]] = out.summary.prefill_s
    decode_s = sum(walls.values()) - sum(prefills.values())  # as benchmarks/policies.py counts a live run

    def totals(steps: dict[int, StepStats]) -> str:
        return (f"{len(steps)} steps, draft {sum(s.draft_s for s in steps.values()):.2f} s, verify "
                f"{sum(s.verify_s for s in steps.values()):.2f} s")

    print(f"{workload} B={batch} {spec}, {args.dtype} on this host; forwards re-timed before the runs")
    print(f"replay: {replayed.job_tokens_per_s:.2f} tok/s; {totals(predicted.steps)}")
    print(f"live:   {emitted / decode_s:.2f} tok/s; {totals(live.steps)}; wall {sum(walls.values()):.2f} s, of it "
          f"prefill {sum(prefills.values()):.2f} s")
    print("step | replay: rows, verify tokens, draft s, verify s | live: the same, wall s")
    for i, (step, p) in enumerate(predicted.steps.items()):
        if i >= 5 and i % args.every:
            continue
        row = f"{step:4d} | {p.batch_size} {p.batch_verify_tokens:3d} {p.draft_s:6.3f} {p.verify_s:6.3f} |"
        lv = live.steps.get(step)
        if lv is not None:
            row += (f" {lv.batch_size} {lv.batch_verify_tokens:3d} {lv.draft_s:6.3f} {lv.verify_s:6.3f} "
                    f"{walls[step]:6.3f}")
        print(row)


if __name__ == "__main__":
    main()
