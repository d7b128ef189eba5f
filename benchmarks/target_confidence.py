"""How well the target model's own confidence tracks the draft model's acceptance, per workload, on recorded traces.

The target computes its next-token distribution at every decode step, speculating or not, so its confidence (the top
probability) costs nothing to observe, where the draft model's acceptance is seen only in steps that run the draft
model. Per workload this prints, over every output position: the target's mean top probability (teacher-forced over
the prompt and the recorded output, in one forward per request), the draft model's mean top probability there and its
depth-1 acceptance (both from the trace), and the correlation of the target's confidence with a depth-1 hit.

    .venv/bin/python benchmarks/target_confidence.py [--traces benchmarks/results/traces] [--dtype float32]

The traces name their target; ``--dtype`` is the one it runs in here (the traces' own dtype where the CPU has bf16
matmul; float32 is exact enough for a mean probability elsewhere).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/policies.py would shadow the ``policies`` package

import numpy as np
import torch

from engine.models import load_model
from tuner.traces import Trace, TraceError, load_traces


def target_confidence(model, trace: Trace) -> list[float]:
    """The target's top probability at each output position of ``trace``, given the true tokens before it."""
    ids = torch.tensor([[*trace.prompt_ids, *trace.output_ids]], device=model.device)
    with torch.inference_mode():
        logits = model(ids).logits[0, len(trace.prompt_ids) - 1: -1]
    return torch.softmax(logits.float(), dim=-1).max(dim=-1).values.tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parent / "results" / "traces")
    parser.add_argument("--dtype", default="float32", help="the target's dtype here (default float32)")
    args = parser.parse_args()
    try:
        traces = load_traces(args.traces)
    except TraceError as exc:
        parser.error(f"--traces: {exc}")
    by_workload: dict[str, list[Trace]] = defaultdict(list)
    for trace in traces:
        if trace.draft_top_prob is not None:
            by_workload[trace.workload].append(trace)
    recorded = [t for group in by_workload.values() for t in group]
    if not recorded:
        parser.error(f"--traces: no trace in {args.traces} was recorded with a draft model")
    targets = {t.target for t in recorded}
    if len(targets) > 1:
        parser.error(f"--traces: traces of several targets ({', '.join(sorted(targets))}); give one target's")
    target = load_model(targets.pop(), dtype=args.dtype)
    print(f"target {target.name} in {args.dtype}; per output position, means")
    print("| workload | positions | target confidence | draft confidence | draft acceptance (depth 1) | "
          "corr(target confidence, hit) |")
    print("|---|---|---|---|---|---|")
    for name, traces in by_workload.items():
        confidence = np.array([c for t in traces for c in target_confidence(target.model, t)])
        draft = np.array([c for t in traces for c in t.draft_top_prob])
        hit = np.array([rank == 0 for t in traces for rank in t.draft_rank], dtype=float)
        corr = np.corrcoef(confidence, hit)[0, 1] if hit.std() > 0 and confidence.std() > 0 else float("nan")
        print(f"| {name} | {len(hit)} | {confidence.mean():.3f} | {draft.mean():.3f} | {hit.mean():.3f} | "
              f"{corr:.2f} |")


if __name__ == "__main__":
    main()
